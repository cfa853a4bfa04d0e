"""The diffusion-forcing schedule of SkyReels-V2, as plain functions (host numpy, and one jittable
per-frame scheduler step).

References: ``SkyReelsV2DiffusionForcingPipeline.generate_timestep_matrix``, its
``prepare_latents`` and the long-video loop of its ``__call__`` (diffusers 0.42.1).

* :func:`timestep_matrix`: for each iteration of a chunk, the timestep of every latent frame, and
  which frames the scheduler updates. Synchronous (``ar_step=0``): every frame follows the same
  schedule. Asynchronous (``ar_step > 0``): causal blocks of ``causal_block_size`` frames, each
  ``ar_step`` steps behind the block before it (a denoising wave); frames not started yet get
  timestep 999, finished ones 0; ``num_pre_ready`` frames (the overlap with the previous chunk)
  are finished from the start.
* :func:`chunk_plan`: a long video (``num_frames > base_num_frames`` with ``overlap_history``) as
  chunks of at most ``base_num_frames``, each after the first starting from the last
  ``overlap_history`` frames of the video so far (latent frames, trimmed to whole causal blocks).
* :func:`per_frame_step`: one update of every frame's own scheduler (the reference keeps one
  scheduler copy per latent frame), only where the update mask says.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, InputError

logger = logging.getLogger("vidax.pipeline")

#: The most chunks one video is made of: 10,000 chunks of SkyReels' 80 new frames are ~9 hours at
#: 24 fps (two months of one v5e chip at 50 steps); a longer video is a typo, refused before its
#: chunk list is made.
MAX_CHUNKS = 10_000


def timestep_matrix(
    num_latent_frames: int,
    step_template: np.ndarray,
    base_num_latent_frames: int,
    ar_step: int = 5,
    num_pre_ready: int = 0,
    causal_block_size: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """The reference's ``generate_timestep_matrix`` (``shrink_interval_with_mask=False``).

    Args:
        num_latent_frames: F, frames of the chunk (a multiple of ``causal_block_size``).
        step_template: (N,) the scheduler's timesteps, decreasing.
        base_num_latent_frames: the most frames one model call takes.
        ar_step: steps each causal block lags the one before it (0: synchronous).
        num_pre_ready: frames already denoised (the prefix from the previous chunk).
        causal_block_size: frames per causal block.

    Returns:
        ``(step_matrix, step_index, update_mask, valid_interval)``: (I, F) int64 timesteps,
        (I, F) int64 indices into ``[999, *step_template, 0]``, (I, F) bool, and per iteration
        the ``(start, end)`` frames the model sees.

    Raises:
        InputError: ``ar_step`` too small for the chunk to finish within the frames of one call.
    """
    n = len(step_template)
    num_iterations = n + 1
    num_blocks = num_latent_frames // causal_block_size
    base_num_blocks = base_num_latent_frames // causal_block_size
    if base_num_blocks < num_blocks and ar_step < n / base_num_blocks:
        raise InputError(
            Arg("ar_step", ar_step),
            f" must be at least {math.ceil(n / base_num_blocks)} for {n} steps over "
            f"{base_num_blocks} causal blocks per call",
        )
    template = np.concatenate([[999], np.asarray(step_template, np.int64), [0]]).astype(np.int64)
    pre_row = np.zeros(num_blocks, np.int64)
    if num_pre_ready > 0:
        pre_row[: num_pre_ready // causal_block_size] = num_iterations
    rows, masks = [], []
    while not np.all(pre_row >= num_iterations - 1):
        new_row = np.zeros(num_blocks, np.int64)
        for i in range(num_blocks):
            if i == 0 or pre_row[i - 1] >= num_iterations - 1:
                new_row[i] = pre_row[i] + 1
            else:
                new_row[i] = new_row[i - 1] - ar_step
        new_row = np.clip(new_row, 0, num_iterations)
        masks.append((new_row != pre_row) & (new_row != num_iterations))
        rows.append(new_row)
        pre_row = new_row
    terminal = base_num_blocks
    intervals = []
    for mask in masks:
        if terminal < num_blocks and mask[terminal]:
            terminal += 1
        intervals.append((max(terminal - base_num_blocks, 0), terminal))
    index = np.repeat(np.stack(rows), causal_block_size, axis=1)
    update = np.repeat(np.stack(masks), causal_block_size, axis=1)
    intervals = [(s * causal_block_size, e * causal_block_size) for s, e in intervals]
    return template[index], index, update, intervals


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One model-sized piece of a long video, in latent frames.

    Attributes:
        num_latent_frames: frames of the chunk (prefix included).
        prefix: frames at its start copied from the video so far: ``video[-overlap:][:prefix]``
            (finished, not denoised again).
        overlap: frames of the video so far the chunk spans; its frames from ``overlap`` on are
            appended to the video (0 for the first chunk: all of it). ``overlap > prefix`` when the
            prefix was trimmed to whole causal blocks: the chunk's frames between are dropped, as
            the reference drops them.
    """

    num_latent_frames: int
    prefix: int
    overlap: int


def chunk_plan(
    num_frames: int,
    base_num_frames: int | None,
    overlap_history: int | None,
    temporal_compression: int,
    causal_block_size: int,
    *,
    video_prefix: int | None = None,
) -> list[Chunk]:
    """The chunks the reference denoises, one after the other (one chunk for a short video).

    Args:
        num_frames: frames of the video (``k * temporal_compression + 1``).
        base_num_frames: the most frames one chunk has (pixel frames), or None.
        overlap_history: frames each chunk after the first repeats from the video so far, or None
            (a short video: one chunk of ``num_frames``).
        temporal_compression: the VAE's (4).
        causal_block_size: frames per causal block; the prefix is trimmed to whole blocks (from
            its end, with a warning, as the reference).
        video_prefix: None, or the latent frames of a given video's end that the first chunk
            starts from (video-to-video: every chunk, the first included, repeats
            ``overlap_history``; the first has ``min(F, base)`` frames, trimmed as the others).

    Returns:
        The :class:`Chunk` list.
    """
    f = (num_frames - 1) // temporal_compression + 1
    if video_prefix is None and (overlap_history is None or base_num_frames is None or num_frames <= base_num_frames):
        return [Chunk(f, 0, 0)]
    overlap = (overlap_history - 1) // temporal_compression + 1
    base = (base_num_frames - 1) // temporal_compression + 1
    n_iter = 1 + (f - base - 1) // (base - overlap) + 1
    if n_iter > MAX_CHUNKS:
        raise InputError(
            Arg("num_frames", num_frames),
            f" makes {n_iter:,} chunks of at most {base_num_frames} frames; at most {MAX_CHUNKS:,} are made "
            f"({1 + (MAX_CHUNKS * (base - overlap) + overlap - 1) * temporal_compression:,} frames with this ",
            Arg("base_num_frames"),
            " and ",
            Arg("overlap_history"),
            ")",
        )
    first = 0 if video_prefix is None else video_prefix - video_prefix % causal_block_size
    chunks = [Chunk(min(f, base), first, 0)]
    prefix = overlap - overlap % causal_block_size
    if prefix != overlap and n_iter > 1:
        logger.warning(
            "the %d latent frames of %s are cut to %d, a whole number of causal blocks (%s), as diffusers "
            "does; the seam may show",
            overlap,
            Arg("overlap_history", overlap_history),
            prefix,
            Arg("causal_block_size", causal_block_size),
        )
    for k in range(1, n_iter):
        finished = k * (base - overlap) + overlap
        frames = min(f - finished + overlap, base)
        chunks.append(Chunk(frames, prefix, overlap))
    return chunks


def per_frame_step(step, state, model_output: jax.Array, sample: jax.Array, update: jax.Array, axis: int = 1):
    """One step of every latent frame's own scheduler, kept where ``update`` is False.

    Args:
        step: the scheduler's ``step(state, model_output, sample) -> (sample, state)`` (elementwise
            over the sample, a pytree state of frozen dataclasses).
        state: its state for the whole latents, with the step counter per frame: arrays of the
            latents' shape (the multistep history) hold every frame's own, ``step_index`` is (F,);
            the other arrays (the schedule tables) are shared.
        model_output, sample: the latents' shape, F frames on ``axis``.
        update: (F,) bool, the frames this iteration updates.

    Returns:
        ``(sample, state)``: the updated frames stepped, the others (latents and their scheduler
        state) as they were.

    A multistep state's ``last_sample`` (UniPC's) of a frame's first update is the updated sample,
    as the reference has it: there the scheduler keeps the view of the latents it was given,
    which the pipeline then overwrites in place with the step's result, so the corrector of the
    frame's second update starts from that.
    """
    shape = sample.shape
    names = [f.name for f in dataclasses.fields(state)]

    def axes(name):
        value = getattr(state, name)
        if name == "step_index":
            return 0
        return jax.tree.map(lambda a: axis if a.shape == shape else None, value)

    in_axes = type(state)(**{k: axes(k) for k in names})
    stepped, new = jax.vmap(step, in_axes=(in_axes, axis, axis), out_axes=(axis, in_axes))(state, model_output, sample)
    keep = update.reshape([-1 if i == axis else 1 for i in range(len(shape))])

    def pick(name):
        mask = update if name == "step_index" else keep
        return jax.tree.map(lambda a, b: jnp.where(mask, a, b) if a.shape == shape or name == "step_index" else a,
                            getattr(new, name), getattr(state, name))  # fmt: skip

    sample = jnp.where(keep, stepped, sample)
    out = {k: pick(k) for k in names}
    if "last_sample" in out:
        first = keep & (state.step_index == 0).reshape(keep.shape)
        out["last_sample"] = jnp.where(first, sample.astype(out["last_sample"].dtype), out["last_sample"])
    return sample, type(state)(**out)
