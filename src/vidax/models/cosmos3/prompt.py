"""Cosmos 3's prompting and packed-sequence positions, as diffusers 0.42.1
``Cosmos3OmniPipeline`` builds them (``tokenize_prompt``, ``get_3d_mrope_ids_*``).

* Text: the prompt with the duration sentence (videos only) and the resolution sentence appended
  (``_append``: the text's trailing dots stripped, ``". "``, the sentence); the negative prompt
  (``""`` when not given) with the inverse sentences. Each as the chat ``[system (when
  use_system_prompt), user: text]`` through the tokenizer's chat template with the generation
  prompt (``add_vision_id=False``), unpadded, then ``eos`` and ``<|vision_start|>`` appended.
* Positions (3 axes T, H, W): text token ``i`` at ``i`` on every axis; the vision and sound
  tokens start at ``T0 = n_text + unified_3d_mrope_temporal_modality_margin`` (the two modalities
  are temporal siblings). With ``enable_fps_modulation`` and more than one frame, frame ``f`` is at
  ``f / (fps / c) * (base_fps / c) + T0`` (float, ``c`` the temporal compression: the VAE's for
  vision, 1 for sound), else ``f + T0``; H and W are the patch row / column (plus ``T0`` when
  ``unified_3d_mrope_reset_spatial_ids`` is false).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SYSTEM_PROMPT_IMAGE = "You are a helpful assistant who will generate images from a give prompt."
SYSTEM_PROMPT_VIDEO = "You are a helpful assistant who will generate videos from a give prompt."
DURATION_TEMPLATE = "The video is {duration:.1f} seconds long and is of {fps:.0f} FPS."
IMAGE_RESOLUTION_TEMPLATE = "This image is of {height}x{width} resolution."
VIDEO_RESOLUTION_TEMPLATE = "This video is of {height}x{width} resolution."
INVERSE_DURATION_TEMPLATE = "The video is not {duration:.1f} seconds long and is not of {fps:.0f} FPS."
INVERSE_IMAGE_RESOLUTION_TEMPLATE = "This image is not of {height}x{width} resolution."
INVERSE_VIDEO_RESOLUTION_TEMPLATE = "This video is not of {height}x{width} resolution."
#: The token the generation starts at (appended after ``eos``).
START_OF_GENERATION = "<|vision_start|>"


def templated_prompt(
    text: str,
    *,
    negative: bool,
    num_frames: int,
    height: int,
    width: int,
    fps: float,
    add_resolution_template: bool = True,
    add_duration_template: bool = True,
) -> str:
    """``text`` with the reference's metadata sentences (the inverse ones for a negative prompt)."""
    is_image = num_frames == 1

    def append(base: str, addition: str) -> str:
        base = base.rstrip(".")
        return f"{base}. {addition}" if base else addition

    if not is_image and add_duration_template:
        template = INVERSE_DURATION_TEMPLATE if negative else DURATION_TEMPLATE
        text = append(text, template.format(duration=num_frames / fps, fps=fps))
    if add_resolution_template:
        if is_image:
            template = INVERSE_IMAGE_RESOLUTION_TEMPLATE if negative else IMAGE_RESOLUTION_TEMPLATE
        else:
            template = INVERSE_VIDEO_RESOLUTION_TEMPLATE if negative else VIDEO_RESOLUTION_TEMPLATE
        text = append(text, template.format(height=height, width=width))
    return text


def conversation(text: str, *, num_frames: int, use_system_prompt: bool) -> list[dict]:
    """The chat ``tokenize_prompt`` renders (string contents, the image / video system turn)."""
    turns = []
    if use_system_prompt:
        turns.append({"role": "system", "content": SYSTEM_PROMPT_IMAGE if num_frames == 1 else SYSTEM_PROMPT_VIDEO})
    return turns + [{"role": "user", "content": text}]


def prompt_token_ids(tokenizer: Any, texts: list[str], *, num_frames: int, use_system_prompt: bool) -> list[list[int]]:
    """The reference's token ids of each (already templated) text: the chat with the generation
    prompt, then ``eos_token_id`` and the ``<|vision_start|>`` id.

    Args:
        tokenizer: a :class:`vidax.encoders.tokenizer.TextTokenizer`.

    Raises:
        CheckpointError: the tokenizer has no chat template, no eos token or no ``<|vision_start|>``.
    """
    from vidax.errors import CheckpointError

    eos, start = tokenizer.eos_token_id, tokenizer.token_to_id(START_OF_GENERATION)
    if eos is None or start is None:
        raise CheckpointError(
            f"{tokenizer.path}: Cosmos 3 needs the tokenizer's eos token and {START_OF_GENERATION} "
            f"(eos id {eos}, {START_OF_GENERATION} id {start})"
        )
    ids = tokenizer.chat_token_ids(
        [conversation(t, num_frames=num_frames, use_system_prompt=use_system_prompt) for t in texts],
        add_generation_prompt=True,
        add_vision_id=False,
    )
    return [list(i) + [eos, start] for i in ids]


def grid_positions(
    grid_t: int,
    grid_h: int,
    grid_w: int,
    *,
    fps: float | None,
    base_fps: float,
    temporal_compression: int,
    reset_spatial_ids: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """``get_3d_mrope_ids_vae_tokens`` at temporal offset 0, split so the offset can be added per
    sequence: ``(positions (3, t·h·w) float32, offset_axes (3,) float32)``; the reference's
    positions at offset ``T0`` are ``positions + T0 · offset_axes`` (one float32 add, as there).

    ``fps``: None (or one frame) gives integer frame positions, else the fps-modulated ones."""
    if fps is not None and grid_t > 1:
        tps = np.float32(fps / temporal_compression)
        base_tps = np.float32(base_fps / temporal_compression)
        t = np.arange(grid_t, dtype=np.float32) / tps * base_tps
    else:
        t = np.arange(grid_t, dtype=np.float32)
    t = np.repeat(t, grid_h * grid_w)
    h = np.tile(np.repeat(np.arange(grid_h, dtype=np.float32), grid_w), grid_t)
    w = np.tile(np.arange(grid_w, dtype=np.float32), grid_t * grid_h)
    axes = np.array([1.0, 0.0, 0.0] if reset_spatial_ids else [1.0, 1.0, 1.0], np.float32)
    return np.stack([t, h, w]).astype(np.float32), axes
