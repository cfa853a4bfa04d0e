"""HunyuanVideo 1.5's prompt path: the Qwen2.5-VL text tower with its chat template and crop, and
the byT5 glyph encoder of the quoted text.

Reference: diffusers 0.42.1 ``pipelines/hunyuan_video1_5/pipeline_hunyuan_video1_5.py``
(``format_text_input``, ``extract_glyph_texts``, ``HunyuanVideo15Pipeline._get_mllm_prompt_embeds``
and ``._get_byt5_prompt_embeds``; the image-to-video pipeline copies them).

Text (``text_encoder``, ``Qwen2_5_VLTextModel``): each prompt becomes the conversation
``[system: SYSTEM_MESSAGE, user: prompt or " "]``, rendered with the tokenizer's chat template
with the assistant header appended, right-padded (the tokenizer folder's side) and truncated to
``max_length + crop_start`` = 1000 + 108 tokens. The hidden state taken is
``hidden_states[-(2 + 1)]`` (the output of the third-to-last layer, no final norm), and the first
``crop_start`` = 108 positions (the template's system turn and user header, as the released
Qwen2.5-VL tokenizer writes them) are cut from the states and the mask.

Glyph text (``text_encoder_2``, byT5 ``T5EncoderModel``): the text between double quotes
``"…"`` or curly double quotes ``“…”`` (the reference's regex ``"(.*?)"|“(.*?)”``; single quotes,
``‘…’`` and CJK brackets such as ``「…」`` are *not* extracted by it, so neither here) is
collected, de-duplicated when there is more than one, and formatted as ``Text "a". Text "b". ``;
that string is tokenized by the ByT5 tokenizer (256 tokens, padded) and encoded with the padding
masked. A prompt with no quoted text gets zeros (256, d_model) and an all-zero mask, the encoder
not run for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from vidax.encoders.decoder_lm import DecoderLM, encode_hidden_states
from vidax.encoders.t5 import T5Encoder, encode_tokens
from vidax.encoders.tokenizer import ByteTokenizer, TextTokenizer, Tokens, Truncation
from vidax.errors import InputError

#: The system turn of every prompt (diffusers' ``HunyuanVideo15Pipeline.system_message``, with
#: the runs of spaces its line continuations leave).
SYSTEM_MESSAGE = (
    "You are a helpful assistant. Describe the video by detailing the following aspects:"
    "         1. The main content and theme of the video."
    "         2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "         3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "         4. background environment, light, style and atmosphere."
    "         5. camera angles, movements, and transitions used in the video."
)
#: Template tokens before the prompt, cut from the text states (``prompt_template_encode_start_idx``).
CROP_START = 108
#: Text tokens kept after the crop (``tokenizer_max_length``).
TEXT_MAX_LENGTH = 1000
#: Layers skipped from the end: ``hidden_states[-(2 + 1)]`` (``num_hidden_layers_to_skip``).
NUM_HIDDEN_LAYERS_TO_SKIP = 2
#: Glyph tokens (``tokenizer_2_max_length``).
GLYPH_MAX_LENGTH = 256

_GLYPH_PATTERN = re.compile(r"\"(.*?)\"|“(.*?)”")


def chat_conversations(prompts: Sequence[str], system_message: str = SYSTEM_MESSAGE) -> list[list[dict]]:
    """``format_text_input``: one ``[system, user]`` conversation per prompt; an empty prompt
    becomes ``" "``."""
    return [[{"role": "system", "content": system_message}, {"role": "user", "content": p if p else " "}]
            for p in prompts]  # fmt: skip


def extract_glyph_text(prompt: str) -> str | None:
    """``extract_glyph_texts``: the quoted text of ``prompt`` as the glyph encoder's input, or None.

    Every match of ``"(.*?)"|“(.*?)”`` (non-greedy, not across lines: ``.`` does not match a
    newline), in order; the first group's text, else the second's (an empty ``""`` gives ``""``
    unless a ``“…”`` group follows in the same match, as the reference's ``a or b``); with more
    than one match, duplicates dropped keeping the first. Formatted as
    ``'Text "a". Text "b". '``; None when nothing matched.
    """
    matches = _GLYPH_PATTERN.findall(prompt)
    texts = [a or b for a, b in matches]
    texts = list(dict.fromkeys(texts)) if len(texts) > 1 else texts
    if not texts:
        return None
    return ". ".join(f'Text "{t}"' for t in texts) + ". "


def _prompt_list(prompts: Any) -> list[str]:
    prompts = [prompts] if isinstance(prompts, str) else prompts
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise InputError(f"prompt must be a string or a non-empty list of strings; got {prompts!r:.200}")
    return list(prompts)


def encode_text_prompts(encoder: DecoderLM, tokenizer: TextTokenizer, prompts: str | Sequence[str], *,
                        max_length: int = TEXT_MAX_LENGTH, crop_start: int = CROP_START,
                        system_message: str = SYSTEM_MESSAGE,
                        num_hidden_layers_to_skip: int = NUM_HIDDEN_LAYERS_TO_SKIP,
                        truncation: Truncation | None = None) -> tuple[Any, np.ndarray]:  # fmt: skip
    """``_get_mllm_prompt_embeds``: the Qwen2.5-VL states of the templated prompts, cropped.

    Args:
        encoder: the loaded ``text_encoder`` (:class:`vidax.encoders.decoder_lm.DecoderLM`).
        tokenizer: the ``tokenizer`` folder (with its chat template).
        prompts: one prompt or B prompts.
        max_length: tokens kept after the crop (1000).
        crop_start: template tokens cut from the front (108); the chat is padded / truncated to
            ``max_length + crop_start`` first.
        system_message: the system turn.
        num_hidden_layers_to_skip: the state taken is ``hidden_states[-(skip + 1)]``.
        truncation: how a truncation warning names the prompts (its ``offset`` is set to
            ``crop_start``).

    Returns:
        ``(states, mask)``: states ``(B, max_length, D)`` in the encoder's dtype (padded rows
        included, as the reference leaves them), mask ``(B, max_length)`` int32, 1 on real
        tokens (right padding).

    Raises:
        InputError: ``prompts`` is not a string or a non-empty list of strings, or a length is
            not positive.
    """
    prompts = _prompt_list(prompts)
    if max_length < 1 or crop_start < 0:
        raise InputError(f"max_length={max_length} must be >= 1 and crop_start={crop_start} >= 0")
    t = truncation or Truncation()
    t = Truncation(labels=t.labels, limit=t.limit, offset=crop_start)
    tokens = tokenizer.apply_chat_template(
        chat_conversations(prompts, system_message), max_length + crop_start,
        padding_side=tokenizer.padding_side, add_generation_prompt=True, truncation=t,
    )  # fmt: skip
    states = encode_hidden_states(encoder, tokens.input_ids, tokens.attention_mask,
                                  output_layer=-(num_hidden_layers_to_skip + 1))  # fmt: skip
    return states[:, crop_start:], tokens.attention_mask[:, crop_start:]


def encode_glyph_prompts(encoder: T5Encoder, tokenizer: ByteTokenizer, prompts: str | Sequence[str], *,
                         max_length: int = GLYPH_MAX_LENGTH) -> tuple[Any, np.ndarray]:  # fmt: skip
    """``_get_byt5_prompt_embeds``: byT5 states of each prompt's quoted text.

    The prompts with quoted text (:func:`extract_glyph_text`) are tokenized (padded to
    ``max_length``, truncated) and encoded together with the padding masked (the reference
    encodes them one by one; T5's rows are independent under the mask, so the batch gives the
    same rows); the others get zeros.

    Args:
        encoder: the loaded ``text_encoder_2`` (:class:`vidax.encoders.t5.T5Encoder`).
        tokenizer: the ``tokenizer_2`` folder (:class:`vidax.encoders.tokenizer.ByteTokenizer`).
        prompts: one prompt or B prompts.
        max_length: glyph tokens per prompt (256).

    Returns:
        ``(states, mask)``: states ``(B, max_length, d_model)`` in the encoder's dtype (padded
        rows as the encoder gives them; all-zero rows for a prompt without quoted text), mask
        ``(B, max_length)`` int32 (all zero for such a prompt).

    Raises:
        InputError: ``prompts`` is not a string or a non-empty list of strings.
    """
    prompts = _prompt_list(prompts)
    glyphs = [extract_glyph_text(p) for p in prompts]
    rows = [i for i, g in enumerate(glyphs) if g is not None]
    d = encoder.config.d_model
    states = jnp.zeros((len(prompts), max_length, d), encoder.dtype)
    mask = np.zeros((len(prompts), max_length), np.int32)
    if rows:
        labels = [f"the quoted text of prompt {i}" for i in rows] if len(prompts) > 1 else ["the quoted text of prompt"]
        tokens: Tokens = tokenizer([glyphs[i] for i in rows], max_length, truncation=Truncation(labels=labels))
        encoded = encode_tokens(encoder, tokens)
        states = states.at[np.asarray(rows)].set(encoded.astype(encoder.dtype))
        mask[rows] = tokens.attention_mask
    return states, mask
