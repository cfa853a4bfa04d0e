"""Rotary position embedding of the LTX-Video transformer (diffusers ``LTXVideoRotaryPosEmbed``,
``models/transformers/transformer_ltx.py``).

Unlike Wan's per-head RoPE, LTX builds **one** table over the whole model width D = N·K (not per
head) and rotates q and k (``(B, L, D)``, after their RMSNorm, before the split into heads):

* coordinates: a ``(B, L, 3)`` float32 grid of (frame, row, column) per token, either from the
  latent grid scaled by ``rope_interpolation_scale`` (:func:`grid_coords`) or from explicit
  ``video_coords`` ``(B, 3, L)`` in pixel units (:func:`video_coords_to_grid`, the condition
  pipeline's path); both are divided by the base sizes (20 frames, 2048 x 2048 pixels);
* frequencies: ``F = D // 6`` values ``theta ** linspace(0, 1, F) · π / 2`` (:func:`rope_frequencies`);
* angles: ``freq_f · (2·coord_a − 1)`` laid out frequency-major with the three axes interleaved
  (``f0·t, f0·h, f0·w, f1·t, ...``), one angle per *interleaved* pair ``(x[2i], x[2i+1])`` of D;
* padding at the front: the first ``(D mod 6) / 2`` pairs are not rotated (cos 1, sin 0).

The tables returned here are half tables ``(B, L, D/2)`` (one angle per pair), as
:func:`vidax.nn.rope.apply_rope` takes them with the whole width viewed as one head.

Precision: the reference computes everything in float32; so does this module, op for op
(``((coord · scale) · patch) / base`` with a true division, ``(freq · π) / 2``, ``freq · (2c − 1)``).
The angles reach
~1.6e4 rad at the highest frequency, so a 1-ulp difference in a frequency moves cos / sin by up to
~1e-3: the frequencies follow torch's CPU ``linspace`` (a fused multiply-add per half) exactly; the
power ``theta ** x`` is correctly rounded here and within 1 ulp of torch's (SLEEF) for a few of
the full-size frequencies (none at the test sizes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import InputError

ROPE_THETA = 10000.0
#: The reference's ``base_num_frames``, ``base_height``, ``base_width`` (fixed in its ``__init__``).
BASE_FRAMES, BASE_HEIGHT, BASE_WIDTH = 20.0, 2048.0, 2048.0

_F32 = jnp.float32


def _div(x: jax.Array, d: float) -> jax.Array:
    """``x / d`` as a float32 division. XLA rewrites a division by a constant into a
    multiplication by its reciprocal (1 ulp off for d = 20); a divisor it cannot see as a
    constant (behind an optimisation barrier) keeps the reference's rounding."""
    return x / jax.lax.optimization_barrier(jnp.full(x.shape, d, x.dtype))


def _linspace01_f32(n: int) -> np.ndarray:
    """``torch.linspace(0, 1, n, dtype=float32)`` on CPU, bit for bit: ``step = 1 / (n - 1)`` in
    float32, ``fma(step, i, 0)`` for the first ``n // 2`` entries, ``fma(-step, n - 1 - i, 1)``
    for the rest (products of two float32 are exact in float64, so one rounding as an fma)."""
    if n <= 1:
        return np.zeros((n,), np.float32)
    step = np.float64(np.float32(1.0) / np.float32(n - 1))
    i = np.arange(n, dtype=np.float64)
    lo = step * i
    hi = 1.0 - step * (n - 1 - i)
    return np.where(np.arange(n) < n // 2, lo, hi).astype(np.float32)


def rope_frequencies(dim: int, theta: float = ROPE_THETA) -> np.ndarray:
    """The reference's ``theta ** linspace(log_theta(1), log_theta(theta), dim // 6) · π / 2``.

    Args:
        dim: the rotated width D (the model width).
        theta: RoPE base.

    Returns:
        ``(dim // 6,)`` float32 numpy.
    """
    lin = _linspace01_f32(dim // 6)
    freqs = (np.float64(theta) ** lin.astype(np.float64)).astype(np.float32)
    return (freqs * np.float32(math.pi)) / np.float32(2.0)


def grid_coords(
    batch: int,
    grid: tuple[int, int, int],
    rope_interpolation_scale: Sequence | jax.Array | None,
    patch_size: int = 1,
    patch_size_t: int = 1,
) -> jax.Array:
    """The reference's ``_prepare_video_coords``: latent (frame, row, column) indices, scaled.

    Args:
        batch: B.
        grid: ``(T, H, W)`` tokens along frames, rows, columns (tokens ordered frame-major, then
            row, then column: the pipeline's packing order).
        rope_interpolation_scale: ``(s_t, s_h, s_w)`` numbers or scalar arrays (the pipelines
            pass ``(vae_temporal_compression / frame_rate, vae_spatial_compression,
            vae_spatial_compression)``: time in seconds, space in pixels), or ``None``: the raw
            indices, unscaled and not divided by the base sizes (as the reference).
        patch_size, patch_size_t: the config's patch sizes (multiply the scale).

    Returns:
        ``(B, T·H·W, 3)`` float32: ``((i · s) · p) / base`` per axis.
    """
    t, h, w = grid
    axes = [jnp.arange(n, dtype=_F32) for n in grid]
    coords = jnp.stack(jnp.meshgrid(*axes, indexing="ij"), axis=-1).reshape(t * h * w, 3)
    if rope_interpolation_scale is not None:
        if len(rope_interpolation_scale) != 3:
            raise InputError(
                f"rope_interpolation_scale must hold 3 numbers (time, height, width); got {rope_interpolation_scale!r}."
            )
        s = [jnp.asarray(v, _F32).reshape(()) for v in rope_interpolation_scale]
        coords = jnp.stack(
            [
                _div(coords[:, 0] * s[0] * patch_size_t, BASE_FRAMES),
                _div(coords[:, 1] * s[1] * patch_size, BASE_HEIGHT),
                _div(coords[:, 2] * s[2] * patch_size, BASE_WIDTH),
            ],
            axis=-1,
        )
    return jnp.broadcast_to(coords[None], (batch, t * h * w, 3))


def video_coords_to_grid(video_coords: jax.Array) -> jax.Array:
    """Explicit coordinates ``(B, 3, L)`` (frame time in seconds, row and column in pixels, as
    ``LTXConditionPipeline`` passes them) -> ``(B, L, 3)`` float32 divided by the base sizes."""
    vc = jnp.asarray(video_coords).astype(_F32)
    return jnp.stack([_div(vc[:, 0], BASE_FRAMES), _div(vc[:, 1], BASE_HEIGHT), _div(vc[:, 2], BASE_WIDTH)], axis=-1)


def ltx_rope(coords: jax.Array, dim: int, theta: float = ROPE_THETA) -> tuple[jax.Array, jax.Array]:
    """Half tables of the LTX RoPE over the whole width.

    Args:
        coords: ``(B, L, 3)`` float32 from :func:`grid_coords` or :func:`video_coords_to_grid`.
        dim: D, even.
        theta: RoPE base.

    Returns:
        ``(cos, sin)``, each ``(B, L, D / 2)`` float32: pair ``i`` of the width rotates by the
        angle of entry ``i`` (the reference's tables are these repeated per pair,
        ``cos_ref[..., 2i] == cos_ref[..., 2i + 1] == cos[..., i]``).

    Raises:
        InputError: odd ``dim``.
    """
    if dim % 2:
        raise InputError(f"ltx_rope: dim={dim} must be even (it rotates pairs of channels).")
    freqs = jnp.asarray(rope_frequencies(dim, theta))  # (F,)
    ang = freqs * (coords.astype(_F32)[..., None] * 2 - 1)  # (B, L, 3, F)
    ang = jnp.swapaxes(ang, -1, -2).reshape(*coords.shape[:-1], -1)  # (B, L, 3F): f-major, (t, h, w)
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    pad = (dim % 6) // 2
    if pad:
        widths = [(0, 0)] * (cos.ndim - 1) + [(pad, 0)]
        cos = jnp.pad(cos, widths, constant_values=1.0)
        sin = jnp.pad(sin, widths, constant_values=0.0)
    return cos, sin
