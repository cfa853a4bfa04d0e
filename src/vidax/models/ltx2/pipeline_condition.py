"""LTX-2 with image and video conditions at any latent frame, with its soundtrack (reference:
diffusers 0.42.1 ``LTX2ConditionPipeline``, ``pipelines/ltx2/pipeline_ltx2_condition.py``).

``pipe(prompt, conditions=[LTX2VideoCondition(frames=im, index=0), LTX2VideoCondition(frames=im2,
index=-1)], ...)``, or the flat ``image=`` / ``video=`` (one condition) with
``condition_index`` and ``condition_strength``. What the reference does, channels last on
packed tokens ``(B, N, C)``:

* A condition's ``frames`` (a PIL image, a list of frames or a uint8 ``(F, H, W, 3)`` /
  ``(H, W, 3)`` array) are resized to cover ``height x width`` and centre-cropped (torch's
  bilinear arithmetic, :func:`~vidax.io.image.cover_crop_bilinear`); a single frame is first
  H.264 re-compressed at its ``crf`` (None: 33, LTX-2.5: 18). ``index`` is a *latent* frame
  (negative: from the end); a video is trimmed to the frames left in the clip from pixel frame
  ``max((index - 1) temporal + 1, 0)``, to ``temporal k + 1`` frames (a warning says so).
* Each is VAE-encoded at its posterior mode and normalised (no scaling factor). ``index`` 0:
  its latent frames replace the leading tokens (mask = ``strength``, clean = the latent).
  Other indices: its tokens are appended after the video's (mask = ``strength``) with their
  own coordinates: pixel frame ``(index - 1) temporal + 1`` without the causal shift, a single
  frame spanning one pixel frame, in seconds at ``frame_rate / motion_speed``.
* ``latents=`` (B, C, F', H', W') de-normalised clean latents (normalised with the scaling
  factor; else zeros), then every token ``n s' + x (1 - s')`` with ``s' = (1 - mask)
  noise_scale``; ``noise_scale`` None: the first of ``sigmas`` or 1. The noise: the base
  tokens' from ``seed`` as :meth:`~vidax.pipelines.hooks.FamilyHooks.initial_noise` (5-D),
  the appended tokens' from ``fold_in(PRNGKey(seed), 5)``. ``audio_latents`` (B, C_a, L, M)
  are normalised and mixed with ``noise_scale`` too (1 by default: noise).
* The schedule's shift counts every token, the appended ones too; per token timestep ``t (1 -
  mask)``; the guided x0 is ``x0 (1 - mask) + clean mask`` (:mod:`.conditioning`); the appended
  tokens are dropped before the decode.

Differences from the reference, each because it would drop input: an ``index`` past the
clip is refused (the reference skips the condition with a warning), and the frames of one
condition must have one size.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, InputError
from vidax.io.image import cover_crop_bilinear, h264_recompress, to_rgb_image, video_frames
from vidax.models.ltx.pipeline import checked_number
from vidax.models.ltx2.conditioning import IMAGE_CRF, check_crf, default_image_crf
from vidax.models.ltx2.pipeline import LTX2_OPTIONS, LTX2Hooks, _frame_rate
from vidax.pipelines.base import VideoPipeline
from vidax.pipelines.options import OBJECT, VIDEO_FILE, CallOption

logger = logging.getLogger("vidax.pipeline")

_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class LTX2VideoCondition:
    """One condition of :class:`LTX2ConditionPipeline` (diffusers' ``LTX2VideoCondition``; the
    pipeline also takes diffusers' objects, read by these attribute names).

    Attributes:
        frames: a PIL image or uint8 ``(H, W, 3)`` array (an image), or a list of them / a uint8
            ``(F, H, W, 3)`` array (a video); any size (resized to cover, centre-cropped).
        index: the latent frame it conditions, in ``[-F', F')`` (negative: from the end).
        strength: in [0, 1]; 1 holds its latents clean.
        crf: H.264 CRF a single frame is re-compressed at (None: 33, LTX-2.5: 18; 0: not).
    """

    frames: Any
    index: int = 0
    strength: float = 1.0
    crf: int | None = None


@dataclasses.dataclass(frozen=True)
class _Item:
    """A checked condition: ``frames`` uint8 (F, H, W, 3) after the trim, ``index`` (latent, >= 0),
    ``strength``, ``latent_frames``."""

    frames: np.ndarray
    index: int
    strength: float
    latent_frames: int


def _raw_conditions(call) -> tuple[list[tuple], list[tuple]]:
    """``(raw, flat)``: ``(prefix, frames, index, strength, crf)`` of each of the call's conditions
    as given, and the flat ``(name, value)`` of ``image`` / ``video`` given."""
    x = call.extra
    conditions, video = x.get("conditions"), x.get("video")
    flat = [(n, v) for n, v in (("image", call.image), ("video", video)) if v is not None]
    raw = []
    if conditions is not None:
        extra = flat + [(n, x[n]) for n in ("condition_index", "condition_strength") if x.get(n) is not None]
        if extra:
            raise InputError(
                Arg("conditions"),
                " was given with ",
                Arg(extra[0][0]),
                "; give every condition in "
                "conditions=[LTX2VideoCondition(frames=, index=, strength=)], or the flat arguments alone",
            )
        items = list(conditions) if isinstance(conditions, (list, tuple)) else [conditions]
        for i, c in enumerate(items):
            if not all(hasattr(c, a) for a in ("frames", "index", "strength")):
                raise InputError(
                    Arg(f"conditions[{i}]", type(c).__name__),
                    "; give LTX2VideoCondition(frames=, index=, strength=) objects",
                )
            raw.append((f"conditions[{i}].", c.frames, c.index, c.strength, getattr(c, "crf", None)))
    elif len(flat) == 2:
        raise InputError(Arg("image"), " and ", Arg("video"), " were both given; give one, or both as conditions=[...]")
    elif flat:
        raw.append(("", flat[0][1], x.get("condition_index", 0), x.get("condition_strength", 1.0), x.get("image_crf")))
    else:
        for name in ("condition_index", "condition_strength"):
            if x.get(name) is not None:
                raise InputError(Arg(name, x[name]), " was given without an image, video or conditions to apply it to")
    return raw, flat


def condition_items(info, call, warn: bool = True) -> list[_Item]:
    """The call's conditions checked (InputError naming the argument) and trimmed as the
    reference (``warn``: log the trims; the check before loading does)."""
    k = info.vae_config.temporal_compression
    f_lat = info.latent_grid(call.num_frames, call.height, call.width)[0]
    raw, flat = _raw_conditions(call)
    out = []
    for prefix, frames, index, strength, crf in raw:
        fname = f"{prefix}frames" if prefix else flat[0][0]
        iname = f"{prefix}index" if prefix else "condition_index"
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not -f_lat <= index < f_lat:
            raise InputError(
                Arg(iname, index),
                f" is not a latent frame of the {call.num_frames}-frame clip "
                f"({f_lat} latent frames): give an integer in [{-f_lat}, {f_lat - 1}]",
            )
        strength = checked_number(f"{prefix}strength" if prefix else "condition_strength", strength, 0.0, 1.0)
        crf_arg = Arg(f"{prefix}crf" if prefix else "image_crf", crf)
        crf = default_image_crf(info) if crf is None else check_crf(crf_arg, crf)
        if isinstance(frames, np.ndarray) and frames.ndim == 4 or isinstance(frames, (list, tuple)):
            pil = video_frames(frames, fname)
        else:
            pil = [to_rgb_image(frames, fname)]
        if len({im.size for im in pil}) > 1:
            sizes = sorted({im.size for im in pil})
            raise InputError(
                Arg(fname, f"{len(pil)} frames of sizes {sizes}"), "; the frames of one condition must have one size"
            )
        if len(pil) == 1 and crf and min(pil[0].size) < 2:
            raise InputError(
                Arg(fname, "{}x{}".format(*pil[0].size)),
                " is too small for the H.264 re-compression (at least 2x2); give a larger image or crf 0",
            )
        index = int(index) % f_lat
        start = max((index - 1) * k + 1, 0)
        keep = (min(len(pil), call.num_frames - start) - 1) // k * k + 1
        if keep < len(pil) and warn:
            logger.warning(
                "%s has %d frames; from pixel frame %d of %d the first %d are used (%dk+1, as diffusers' "
                "trim_conditioning_sequence)",
                Arg(fname),
                len(pil),
                start,
                call.num_frames,
                keep,
                k,
            )
        arr = np.stack([np.asarray(im) for im in pil[:keep]])
        if keep == 1:
            arr = h264_recompress(arr[0], crf)[None]
        out.append(_Item(arr, index, strength, (keep - 1) // k + 1))
    return out


def keyframe_coords(
    frames: int, height: int, width: int, pixel_frame: int, pixel_frames: int, scale: tuple[int, int, int], fps: float
) -> np.ndarray:
    """The reference's ``_prepare_keyframe_coords`` of one condition: ``(3, n, 2)`` float32
    ``[start, end)`` bounds (seconds, pixels, pixels): latent positions times ``scale``, time
    shifted by ``pixel_frame`` (no causal shift), one pixel frame long for a single frame."""
    axes = [np.arange(n, dtype=_F32) for n in (frames, height, width)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=0)
    coords = np.stack([grid, grid + _F32(1)], axis=-1).reshape(3, -1, 2) * np.asarray(scale, _F32).reshape(3, 1, 1)
    coords[0] = coords[0] + _F32(pixel_frame)
    if pixel_frames == 1:
        coords[0, :, 1:] = coords[0, :, :1] + _F32(1)
    coords[0] = coords[0] / _F32(fps)
    return coords


class LTX2ConditionHooks(LTX2Hooks):
    """The hooks of :class:`LTX2ConditionPipeline`."""

    pipeline_name = "LTX2ConditionPipeline"
    #: ``image=`` / ``video=``: vidax's spelling of one of diffusers' ``conditions=``
    #: (:data:`~vidax.pipelines.diffusers_keywords.SPELLINGS`).
    takes_image = True

    task = "t2v"
    latents_layout = "(batch, latent channels, latent frames, height/32, width/32), de-normalised clean latents"
    packed_latents = False
    call_options = tuple(o for o in LTX2_OPTIONS if o.name != "noise_scale") + (
        CallOption("conditions", OBJECT, "LTX2VideoCondition objects (frames, index, strength, crf) (LTX-2)."),
        CallOption(
            "video",
            VIDEO_FILE,
            "Video to condition on (LTX-2 condition pipeline: its latent frames from condition_index on).",
            task="v2v",
        ),
        CallOption(
            "condition_index",
            int,
            "Latent frame the image / video conditions (LTX-2 condition pipeline; negative: from the end).",
            "0",
        ),
        CallOption(
            "condition_strength",
            float,
            "How strongly the image / video condition holds (LTX-2 condition pipeline).",
            "1",
            low=0,
            high=1,
        ),
        IMAGE_CRF,
        CallOption(
            "noise_scale",
            float,
            "Noise mixed into the latents (the given ones, else zeros) and "
            "audio_latents, by 1 - mask per token (LTX-2 condition pipeline, default the first sigma).",
            "the first sigma",
            low=0,
            high=1,
        ),
    )

    @classmethod
    def class_for_task(cls, task: str) -> type | None:
        """None: the condition pipeline runs every task of its checkpoint itself."""
        return None

    @classmethod
    def check_family_call(cls, info, call) -> None:
        super().check_family_call(info, call)
        condition_items(info, call)

    @classmethod
    def extra_tokens(cls, info, call) -> int:
        """Tokens the conditions past latent frame 0 append."""
        _, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        return sum(it.latent_frames * h * w for it in condition_items(info, call, warn=False) if it.index)

    def _noise_scale(self, call) -> float:
        s = call.extra.get("noise_scale")
        if s is None:
            sigmas = call.extra.get("sigmas")
            s = 1.0 if sigmas is None else float(np.asarray(sigmas, np.float64)[0])
        return float(s)

    def condition(self, call, stats) -> dict:
        """Encode the conditions: ``mask`` (B, N + K), ``clean`` (B, N + K, C), ``first`` the
        index-0 latents ``[(tokens, latent (1, n, C))]``, ``extras`` the appended tokens (1, K, C)
        or None, ``coords`` their coordinates (3, K, 2) or None."""
        v = self.pipe.info.vae_config
        k, s = v.temporal_compression, v.spatial_compression
        f, h, w = self.pipe.info.latent_grid(call.num_frames, call.height, call.width)
        c = self.pipe.info.transformer_config.in_channels
        n = f * h * w
        b = call.batch
        items = condition_items(self.pipe.info, call, warn=False)
        fps = _frame_rate(self.pipe.info, call) / float(call.extra.get("motion_speed", 1.0))
        mask = np.zeros((n,), np.float32)
        clean = jnp.zeros((1, n, c), _F32)
        first, extras, extra_mask, coords = [], [], [], []
        with stats.timed("text_encode_s"):
            for it in items:
                pixels = cover_crop_bilinear(it.frames, call.height, call.width) / np.float32(127.5) - np.float32(1)
                z = self.encode_condition(pixels)  # (1, F_c, h, w, C)
                z = z.reshape(1, -1, c)
                if it.index == 0:
                    t = z.shape[1]
                    first.append((t, z))
                    mask[:t] = it.strength
                    clean = clean.at[:, :t].set(z)
                    continue
                extras.append(z)
                extra_mask.append(np.full((z.shape[1],), it.strength, np.float32))
                coords.append(
                    keyframe_coords(it.latent_frames, h, w, (it.index - 1) * k + 1, len(it.frames), (k, s, s), fps)
                )
        stats.sample_memory()
        if extras:
            mask = np.concatenate([mask] + extra_mask)
            clean = jnp.concatenate([clean] + extras, axis=1)
        return {
            "mask": np.broadcast_to(mask, (b, mask.size)),
            "clean": jnp.broadcast_to(clean, (b,) + clean.shape[1:]),
            "first": first,
            "extras": jnp.concatenate(extras, axis=1) if extras else None,
            "coords": np.concatenate(coords, axis=1) if coords else None,
            "n_extra": mask.size - n,
        }

    def prepare_latents(self, call, noise, cond):
        """Packed ``(B, N + K, C)`` video tokens: the given latents normalised (else zeros), the
        index-0 conditions in place, the appended tokens after, then the noise by ``(1 - mask)
        noise_scale``; the audio as :class:`LTX2Pipeline` with this ``noise_scale``."""
        b, c = noise["latents"].shape[:2]
        video = jnp.transpose(noise["latents"], (0, 2, 3, 4, 1)).reshape(b, -1, c)
        eps = video
        if call.latents is not None:
            video = self.pipe.vae.normalize_latents(video)
            eps = jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(call.seed), 3), video.shape, _F32)
        else:
            video = jnp.zeros_like(video)
        for t, z in cond["first"]:
            video = video.at[:, :t].set(jnp.broadcast_to(z, (b, t, c)))
        if cond["extras"] is not None:
            z = cond["extras"]
            video = jnp.concatenate([video, jnp.broadcast_to(z, (b,) + z.shape[1:])], axis=1)
            key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 5)
            eps = jnp.concatenate([eps, jax.random.normal(key, (b,) + z.shape[1:], _F32)], axis=1)
        s = self._noise_scale(call)
        scaled = (1.0 - jnp.asarray(cond["mask"], _F32))[..., None] * s
        video = eps * scaled + video * (1 - scaled)
        out = super().prepare_latents(
            dataclasses.replace(call, latents=None, extra={**call.extra, "noise_scale": s}),
            {**noise, "latents": jnp.zeros((b, video.shape[1] - cond["n_extra"], c), _F32)},
            {},
        )
        return {**out, "latents": video}

    def rope_coordinates(self, call, cond, batch: int):
        """The video's coordinates, then the appended tokens'."""
        video, audio = super().rope_coordinates(call, cond, batch)
        if cond["coords"] is not None:
            video = np.concatenate(
                [video, np.broadcast_to(cond["coords"][None], (batch,) + cond["coords"].shape)], axis=2
            )
        return video, audio

    def final_latents(self, call, latents, cond):
        """Drop the appended tokens; video ``(B, F', H', W', C)``."""
        f, h, w = self.pipe.info.latent_grid(call.num_frames, call.height, call.width)
        x = latents["latents"][:, : f * h * w]
        return {**latents, "latents": x.reshape(x.shape[0], f, h, w, x.shape[-1])}


class LTX2ConditionPipeline(VideoPipeline):
    """LTX-2 with image / video conditions at any latent frame, with its soundtrack (see the
    module docstring); keywords as :class:`~vidax.models.ltx2.pipeline.LTX2Pipeline`'s plus
    ``conditions``, the flat ``image`` / ``video`` with ``condition_index`` (0),
    ``condition_strength`` (1) and ``image_crf`` (33, LTX-2.5: 18), and ``noise_scale`` (None: the first
    sigma)."""

    family = LTX2ConditionHooks
