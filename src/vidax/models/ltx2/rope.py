"""LTX-2's rotary position tables, computed on the host in numpy (diffusers 0.42.1
``LTX2AudioVideoRotaryPosEmbed`` in ``models/transformers/transformer_ltx2.py`` and
``LTX2RotaryPosEmbed1d`` in ``pipelines/ltx2/connectors.py``).

Why numpy on the host: the reference computes the frequencies in float64
(``rope_double_precision``) and JAX without x64 silently computes float64 as float32; the angles
reach ``theta·π/2 ≈ 1.6e4`` rad, where one float32 ulp (~1e-3) is a visible change of cos / sin.
Here every float32 step is the reference's own float32 operation in the same order (IEEE,
identical in numpy and torch), the frequencies are float64 as the reference's, and only cos / sin
are evaluated in float64 and rounded once (torch's float32 cos / sin are within an ulp of that).

Positions (the reference's ``prepare_video_coords`` / ``prepare_audio_coords``), as
``[start, end)`` bounds per patch:

* video ``(B, 3, N, 2)``: latent (frame, row, column) indices stepping by the patch, times the
  VAE's scale factors (pixels), the frame bound shifted by ``causal_offset - scale_t`` and
  clamped at 0 (the causal first frame), then divided by the frame rate (seconds);
* audio ``(B, 1, N, 2)``: latent index times ``audio_scale_factor`` (mel frames), the same
  causal shift and clamp, times ``hop_length / sampling_rate`` (seconds).

Tables (the reference's ``forward``): the midpoint of each bound, divided by the base sizes
(``pos_embed_max_pos`` frames, ``base_height`` x ``base_width`` pixels), angle
``freq_f · (2·pos − 1)`` with ``freq_f = theta ** linspace(0, 1, F) · π / 2``, laid out
frequency-major with the axes interleaved, and ``dim/2 − F·axes`` unrotated pairs (cos 1, sin 0)
at the front. The cross-modal tables use the time axis only.

Half tables ``(.., N, dim/2)``: one angle per rotated pair, for
:class:`vidax.blocks.attention.Attention` with ``rope_full_width`` (``"interleaved"``: pairs
``(2i, 2i+1)`` of the whole width; ``"split"``: the width cut into chunks, each rotated
rotate-half by its slice of the table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from vidax.errors import InputError

_F32 = np.float32


def _linspace01(n: int, dtype) -> np.ndarray:
    """``torch.linspace(0, 1, n, dtype)`` on CPU: ``i·step`` for the first ``n // 2`` entries,
    ``1 − (n − 1 − i)·step`` for the rest, that one rounded once (torch's vectorised x86 kernels
    contract it into a fused multiply-add; rounding the product first is off by an ulp for most
    ``n`` > 9, which the float32 power of ``rope_double_precision=false`` carries into the angles)."""
    if n <= 1:
        return np.zeros((n,), dtype)
    step = dtype(1.0) / dtype(n - 1)
    lo = np.arange(n).astype(dtype) * step
    if dtype == np.float32:  # k·step and 1 − k·step are exact in float64 (<= 48 significant bits)
        hi = (1.0 - np.arange(n - 1, -1, -1, dtype=np.float64) * np.float64(step)).astype(dtype)
    else:  # float64: the fused result, exactly rounded
        hi = np.array([float(1 - Fraction(k) * Fraction(float(step))) for k in range(n - 1, -1, -1)], dtype)
    return np.where(np.arange(n) < n // 2, lo, hi).astype(dtype)


def rope_frequencies(n: int, theta: float, double_precision: bool = True) -> np.ndarray:
    """``(theta ** linspace(0, 1, n) · π / 2)`` as the reference: float64 then rounded to float32
    (``double_precision``), else float32 throughout (the power correctly rounded).

    Returns:
        ``(n,)`` float32 numpy.
    """
    if double_precision:
        lin = _linspace01(n, np.float64)
        return ((np.float64(theta) ** lin) * np.float64(math.pi) / np.float64(2.0)).astype(_F32)
    lin = _linspace01(n, np.float32)
    power = (np.float64(theta) ** lin.astype(np.float64)).astype(_F32)
    return (power * _F32(math.pi)) / _F32(2.0)


def video_coords(
    batch: int,
    num_frames: int,
    height: int,
    width: int,
    fps: float,
    *,
    patch_size: int = 1,
    patch_size_t: int = 1,
    scale_factors: Sequence[int] = (8, 32, 32),
    causal_offset: int = 1,
) -> np.ndarray:
    """The reference's ``prepare_video_coords``: ``(B, 3, N, 2)`` float32 ``[start, end)`` per
    patch (frame bound in seconds, row / column in pixels), patches frame-major.

    Args:
        batch: B; num_frames, height, width: the latent grid; fps: frames per second (> 0).
        patch_size, patch_size_t, scale_factors, causal_offset: the transformer config's.
    """
    axes = [
        np.arange(0, n, p, dtype=_F32)
        for n, p in ((num_frames, patch_size_t), (height, patch_size), (width, patch_size))
    ]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=0)  # (3, F, H, W)
    ends = grid + np.asarray((patch_size_t, patch_size, patch_size), _F32).reshape(3, 1, 1, 1)
    coords = np.stack([grid, ends], axis=-1).reshape(3, -1, 2)
    pixel = coords * np.asarray(scale_factors, _F32).reshape(3, 1, 1)
    t = np.maximum((pixel[0] + _F32(causal_offset)) - _F32(scale_factors[0]), _F32(0))
    pixel[0] = t / _F32(fps)
    return np.broadcast_to(pixel[None], (batch, *pixel.shape)).copy()


def audio_coords(
    batch: int,
    num_frames: int,
    *,
    patch_size_t: int = 1,
    scale_factor: int = 4,
    hop_length: int = 160,
    sampling_rate: int = 16000,
    causal_offset: int = 1,
    shift: int = 0,
) -> np.ndarray:
    """The reference's ``prepare_audio_coords``: ``(B, 1, N, 2)`` float32 ``[start, end)`` of
    each latent audio frame in seconds.

    Args:
        batch: B; num_frames: latent audio frames; the rest: the transformer config's
            (``audio_patch_size_t``, ``audio_scale_factor``, ``audio_hop_length``,
            ``audio_sampling_rate``, ``causal_offset``); shift: offset of the latent indices.
    """
    f = np.arange(shift, num_frames + shift, patch_size_t, dtype=_F32)
    sf, off = _F32(scale_factor), _F32(causal_offset)

    def seconds(mel):
        mel = np.maximum((mel + off) - sf, _F32(0))
        return (mel * _F32(hop_length)) / _F32(sampling_rate)

    c = np.stack([seconds(f * sf), seconds((f + _F32(patch_size_t)) * sf)], axis=-1)  # (N, 2)
    return np.broadcast_to(c[None, None], (batch, 1, *c.shape)).copy()


def rope_table(
    coords: np.ndarray, dim: int, max_positions: Sequence[float], theta: float, double_precision: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Half tables of ``LTX2AudioVideoRotaryPosEmbed.forward``.

    Args:
        coords: ``(B, P, N, 2)`` bounds (midpoints taken) or ``(B, P, N)`` positions, P axes.
        dim: the rotated width (even).
        max_positions: the base size of each of the P axes.
        theta, double_precision: the config's ``rope_theta``, ``rope_double_precision``.

    Returns:
        ``(cos, sin)`` float32 numpy, each ``(B, N, dim/2)``.

    Raises:
        InputError: odd ``dim``, or coordinates of another rank.
    """
    c = np.asarray(coords, _F32)
    if dim % 2 or c.ndim not in (3, 4):
        raise InputError(f"rope_table: dim={dim} must be even and coords (B, P, N[, 2]); got {c.shape}.")
    if c.ndim == 4:
        c = (c[..., 0] + c[..., 1]) / _F32(2.0)
    p = c.shape[1]
    grid = np.stack([c[:, i] / _F32(max_positions[i]) for i in range(p)], axis=-1)  # (B, N, P)
    freqs = rope_frequencies(dim // (2 * p), theta, double_precision)
    ang = (grid[..., None] * _F32(2) - _F32(1)) * freqs  # (B, N, P, F)
    ang = np.swapaxes(ang, -1, -2).reshape(*ang.shape[:2], -1)  # (B, N, F·P): f-major
    return _cos_sin(ang, dim // 2)


def text_rope_table(
    length: int, dim: int, base_seq_len: int, theta: float, double_precision: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Half tables of the connectors' ``LTX2RotaryPosEmbed1d``: position ``i / base_seq_len``.

    Returns:
        ``(cos, sin)`` float32 numpy, each ``(length, dim/2)``.
    """
    grid = np.arange(length, dtype=_F32) / _F32(base_seq_len)
    freqs = rope_frequencies(dim // 2, theta, double_precision)
    return _cos_sin((grid[:, None] * _F32(2) - _F32(1)) * freqs, dim // 2)


def _cos_sin(ang: np.ndarray, half: int) -> tuple[np.ndarray, np.ndarray]:
    """cos / sin of float32 angles (float64, rounded once), unrotated pairs padded at the front."""
    a = ang.astype(np.float64)
    cos, sin = np.cos(a).astype(_F32), np.sin(a).astype(_F32)
    pad = half - ang.shape[-1]
    if pad:
        widths = [(0, 0)] * (ang.ndim - 1) + [(pad, 0)]
        cos = np.pad(cos, widths, constant_values=1.0)
        sin = np.pad(sin, widths, constant_values=0.0)
    return cos, sin
