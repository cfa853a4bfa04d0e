"""Preview images of a running job: the denoising loop's clean-sample estimate projected to RGB
by a linear map fit to the loaded checkpoint's own VAE (a cheap look, not a VAE decode).

**The map** (:func:`fit_preview_map`, once per server process when previews are on): a few
small random latents drawn as the denoising loop holds them (the prior N(0, 1) of the loop's
normalised latents, :data:`FIT_FRAMES` latent frames of :data:`FIT_GRID` x :data:`FIT_GRID`,
fewer where the model's size limits are smaller) go through the pipeline's own path to pixels
(``condition``, ``initial_noise``, ``prepare_latents``, ``final_latents``, ``decode``: the VAE's
de-normalisation, LTX's decode noise and timestep, CogVideoX's padding frames as a job's decode
has them); the decoded RGB in [-1, 1] is average-pooled to the latent grid (each latent frame
after the first against the ``temporal_compression`` frames it decodes to, aligned from the
end), and ``rgb ~ z @ W + b`` is fit by least squares over every latent pixel. One latent sample is held out and its
correlation between the projection and the pooled decode is kept (:attr:`PreviewMap.r`): how
much of the decode a linear map of one latent pixel explains for this VAE.

**The image** (:class:`Previewer`): the middle latent frame of the current clean-sample
estimate where the scheduler state gives it cheaply, else of the current (noisy) latents; each
preview says which (``of``):

- ``"estimate"``: UniPC (Wan, Cosmos-Predict2.5, Cosmos 3): its last converted model output,
  the data prediction ``x0 = x_t - sigma_t v``; flow-matching Euler (LTX-Video, LTX-2,
  HunyuanVideo, HunyuanVideo 1.5): ``x0 = x_t - sigma_t v`` with ``v`` from the step just made
  (``x_next = x_t + (sigma_next - sigma_t) v``, so two consecutive latents give it); CogVideoX's
  DDIM: ``x_next = a x_t + b x0``, solved for ``x0`` the same way.
- ``"latents"``: CogVideoX's DPM (a stochastic second-order step), the first preview after a
  resume (the latents before it were not seen), and any other scheduler.

``(rgb + 1) / 2`` clipped to [0, 1], at the latent resolution (e.g. 104 x 60 for 832 x 480), as
a PNG data URL.
"""

from __future__ import annotations

import base64
import dataclasses
import io
from typing import Any

import numpy as np

#: Latent frames, latent rows and columns, and videos of the fit's random latents (the last
#: video held out for :attr:`PreviewMap.r`).
FIT_FRAMES, FIT_GRID, FIT_VIDEOS = 3, 8, 3


@dataclasses.dataclass(frozen=True)
class PreviewMap:
    """``rgb = z @ weights + bias`` per latent pixel, RGB in [-1, 1].

    Attributes:
        weights: (C, 3) float32. bias: (3,) float32.
        r: the correlation of the projection of a held-out random latent with its decode pooled
            to the latent grid (:func:`correlation`).
    """

    weights: np.ndarray
    bias: np.ndarray
    r: float

    def project(self, z: np.ndarray) -> np.ndarray:
        """``z`` (..., C) -> RGB (..., 3)."""
        return np.asarray(z, np.float32) @ self.weights + self.bias


def _pooled_pairs(z: np.ndarray, frames: np.ndarray, decoded_t: int, temporal: int, spatial: int):
    """``(latents (N, C), rgb (N, 3))``: each latent pixel of frames 1.. of the last
    ``decoded_t`` latent frames of ``z`` (B, T, h, w, C), against the mean of the pixels it
    decodes to in ``frames`` (B, F, H, W, 3) in [0, 1] (the last ``temporal`` frames per latent
    frame, counted from the end; ``spatial`` x ``spatial`` pixels)."""
    b, _, h, w, c = z.shape
    used = decoded_t - 1
    if used < 1 or frames.shape[1] < used * temporal or frames.shape[2:4] != (h * spatial, w * spatial):
        raise ValueError(
            f"{frames.shape[1:4]} decoded frames / pixels do not follow the latent grid {z.shape[1:4]} "
            f"at compression {temporal} x {spatial}"
        )
    rgb = frames[:, frames.shape[1] - used * temporal :] * 2.0 - 1.0
    rgb = rgb.reshape(b, used, temporal, h, spatial, w, spatial, 3).mean(axis=(2, 4, 6))
    return z[:, z.shape[1] - used :].reshape(-1, c), rgb.reshape(-1, 3)


def decoded_samples(pipe: Any, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(latents (N, C), rgb (N, 3))`` of :data:`FIT_VIDEOS` random latents drawn from
    ``seed`` through the pipeline's own decode path (see the module), the latent pixels of one
    video after another.

    Raises:
        VidaxError: the pipeline refuses the fit's small call (a size it does not take).
        ValueError: the decode does not follow the latent grid (no linear map per latent pixel).
    """
    from vidax.stats import RunStats

    info = pipe.info
    vae = info.vae_config
    s, t = vae.spatial_compression, vae.temporal_compression
    limits = type(pipe).family.size_limits(info)  # e.g. a transformer's RoPE grid, smaller than the fit's
    height, width = (FIT_GRID * s if m is None else min(FIT_GRID * s, m) for m in (limits.height, limits.width))
    frames = 1 + t * (FIT_FRAMES - 1)
    frames = frames if limits.num_frames is None else min(frames, limits.num_frames)
    call = type(pipe).check_call(
        info,
        ["preview"] * FIT_VIDEOS,
        height=height,
        width=width,
        num_frames=frames,
        num_inference_steps=2,
        seed=seed,
        progress=False,
    )
    stats = RunStats()
    with pipe.precision():
        cond = pipe.hooks.condition(call, stats)
        x = pipe.hooks.final_latents(call, pipe.hooks.prepare_latents(call, pipe.hooks.initial_noise(call), cond), cond)
        z = x[pipe.family.latent_streams[0]] if isinstance(x, dict) else x
        decoded_t = pipe.hooks.latents_to_decode(call, z).shape[1]
        frames = pipe.hooks.decode(call, z, stats)
    return _pooled_pairs(np.asarray(z, np.float32), np.asarray(frames, np.float32), decoded_t, t, s)


def correlation(preview_map: PreviewMap, latents: np.ndarray, rgb: np.ndarray) -> float:
    """The correlation over the latent pixels of ``preview_map``'s projection of ``latents``
    with ``rgb``, per colour, averaged over the colours that vary in both (0 when none does: a
    decode saturated to one value)."""
    projected = preview_map.project(latents)
    found = [
        np.corrcoef(projected[:, k], rgb[:, k])[0, 1]
        for k in range(3)
        if projected[:, k].std() > 0 and rgb[:, k].std() > 0
    ]
    return float(np.mean(found)) if found else 0.0


def fit_preview_map(pipe: Any, seed: int = 0) -> PreviewMap:
    """Fit the latent-to-RGB map of ``pipe``'s VAE (see the module) to
    :func:`decoded_samples`, the last video held out for :attr:`PreviewMap.r`.

    Raises:
        VidaxError, ValueError: as :func:`decoded_samples`.
    """
    latents, rgb = decoded_samples(pipe, seed)
    n = len(latents) - len(latents) // FIT_VIDEOS
    design = np.concatenate([latents[:n], np.ones((n, 1), np.float32)], axis=1).astype(np.float64)
    solution = np.linalg.lstsq(design, rgb[:n].astype(np.float64), rcond=None)[0]
    fitted = PreviewMap(solution[:-1].astype(np.float32), solution[-1].astype(np.float32), 0.0)
    return dataclasses.replace(fitted, r=correlation(fitted, latents[n:], rgb[n:]))


def middle_frame(pipe: Any, call: Any, latents: Any) -> np.ndarray | None:
    """The middle latent frame (B, h, w, C) float32 on the host of the denoising loop's
    latents (its first stream): channels-last (B, T, h, w, C), or the packed tokens
    (B, T h w, C) of LTX-Video's conditioned pipelines without appended tokens; None for
    another layout."""
    x = latents[pipe.family.latent_streams[0]] if isinstance(latents, dict) else latents
    if x.ndim == 3 and hasattr(pipe.info, "latent_grid"):
        f, h, w = pipe.info.latent_grid(call.num_frames, call.height, call.width)
        if x.shape[1] != f * h * w:
            return None
        x = x.reshape(x.shape[0], f, h, w, x.shape[-1])
    if x.ndim != 5:
        return None
    return np.asarray(x[:, x.shape[1] // 2], np.float32)


def _two_step_weights(state: Any) -> tuple[float, float] | None:
    """``(a, b)`` with ``x0 = a x_next + b x_t`` for the step just made, where the scheduler's
    step is linear in ``x_t`` and ``x0`` (flow-matching Euler, CogVideoX's DDIM); None
    otherwise."""
    from vidax.schedulers.ddim_cogvideox import CogVideoXDDIMState
    from vidax.schedulers.flow_match_euler import FlowMatchEulerState

    i = int(state.step_index) - 1
    if i < 0:
        return None
    if isinstance(state, FlowMatchEulerState):  # x_next = x_t + (s1 - s0) v, x0 = x_t - s0 v
        s0, s1 = float(state.sigmas[i]), float(state.sigmas[i + 1])
        return (-s0 / (s1 - s0), s1 / (s1 - s0)) if s1 != s0 else None
    if isinstance(state, CogVideoXDDIMState):  # x_next = coef_sample x_t + coef_x0 x0
        a, b = float(state.coef_sample[i]), float(state.coef_x0[i])
        return (1 / b, -a / b) if abs(b) > 1e-6 else None
    return None


class Previewer:
    """The previews of one running batch: :meth:`observe` after every denoising step (the loop's
    ``on_state``), an image per video at the steps :meth:`due` says.

    Args:
        pipe: the pipeline; call: the batch's call; preview_map: :func:`fit_preview_map`'s;
        every: a preview every this many steps.
    """

    def __init__(self, pipe: Any, call: Any, preview_map: PreviewMap, every: int):
        self.pipe, self.call, self.map, self.every = pipe, call, preview_map, every
        self._before: tuple[int, np.ndarray] | None = None  # (step, middle frame) of the latents kept

    def due(self, done: int) -> bool:
        return done % self.every == 0

    def estimate(self, done: int, latents: Any, state: Any) -> tuple[np.ndarray, str] | None:
        """After step ``done``, when a preview is due: ``(the middle latent frame (B, h, w, C) of
        what the preview shows, "estimate" or "latents")`` (see the module); else None (the
        latents are kept when the next step's preview needs them)."""
        frame_now = None
        if self.due(done) or self.due(done + 1):
            frame_now = middle_frame(self.pipe, self.call, latents)
        if not self.due(done):
            self._before = None if frame_now is None else (done, frame_now)
            return None
        before, self._before = self._before, None
        if frame_now is None:
            return None
        from vidax.schedulers.unipc import UniPCState

        step_state = self.pipe.hooks.step_state(state)
        if isinstance(step_state, UniPCState):
            estimate = middle_frame(self.pipe, self.call, step_state.model_outputs[-1])
            return (frame_now, "latents") if estimate is None else (estimate, "estimate")
        weights = _two_step_weights(step_state) if before is not None and before[0] == done - 1 else None
        if weights is None:
            return frame_now, "latents"
        return weights[0] * frame_now + weights[1] * before[1], "estimate"

    def observe(self, done: int, latents: Any, state: Any) -> tuple[list[str], str] | None:
        """After step ``done``, when a preview is due: ``(a PNG data URL per video, which it
        shows)`` (:meth:`estimate` through the map); else None."""
        found = self.estimate(done, latents, state)
        if found is None:
            return None
        frame, of = found
        return preview_images(self.map.project(frame)), of


def preview_images(rgb: np.ndarray) -> list[str]:
    """One PNG data URL per image of ``rgb`` (B, h, w, 3) in [-1, 1]: ``(rgb + 1) / 2`` clipped."""
    from PIL import Image

    pixels = np.round(np.clip((rgb + 1) / 2, 0, 1) * 255).astype(np.uint8)
    urls = []
    for image in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        urls.append("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
    return urls
