"""Tiled VAE decoding / encoding: the diffusers raster-order tile loop and its linear blends.

The diffusers video VAEs (``AutoencoderKLCogVideoX``, ``AutoencoderKLHunyuanVideo``, ...) split a
large input into overlapping tiles, run each alone, then walk the tiles in raster order: each
tile's first rows are blended with the last rows of the tile above (``blend_v``), its first
columns with the last columns of the tile to the left (``blend_h``), and the first frames of a
temporal tile with the last frames of the previous one (``blend_t``). The blends write into the
tile **in place**, so a neighbour is read with the blends it received itself already applied;
:func:`blend` and :func:`tiled` reproduce that on host (numpy, float32) arrays in the channels-last
layout ``(B, T, H, W, C)`` (axis 1 frames, 2 rows, 3 columns).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from vidax.errors import InputError


def check_tiling_fields(tiling: Any, what: str) -> None:
    """Raise InputError (``"{what}{field}={value!r} must be ..."``) unless every field of the
    tiling dataclass ``tiling`` whose default is a bool (a switch) is a bool and every other
    field (a tile size or stride) a positive integer."""
    for f in dataclasses.fields(tiling):
        v = getattr(tiling, f.name)
        if isinstance(f.default, bool):
            if not isinstance(v, bool):
                raise InputError(f"{what}{f.name}={v!r} must be True or False")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{what}{f.name}={v!r} must be a positive integer")


def blend(a: np.ndarray, b: np.ndarray, extent: int, axis: int) -> None:
    """``blend_t`` (axis 1) / ``blend_v`` (axis 2) / ``blend_h`` (axis 3): ramp ``b``'s first
    entries along ``axis`` from ``a``'s last, in place:
    ``b[y] = a[-e + y] (1 - y / e) + b[y] y / e`` for ``y < e = min(extent, sizes)``; nothing
    when ``e <= 0``."""
    e = min(a.shape[axis], b.shape[axis], extent)
    if e <= 0:
        return
    shape = [1] * b.ndim
    shape[axis] = e
    ramp = (np.arange(e) / e).reshape(shape)
    tail = np.take(a, np.arange(a.shape[axis] - e, a.shape[axis]), axis=axis)
    head = np.take(b, np.arange(e), axis=axis)
    mixed = tail * (1 - ramp).astype(np.float32) + head * ramp.astype(np.float32)
    index = [slice(None)] * b.ndim
    index[axis] = slice(0, e)
    b[tuple(index)] = mixed


def tiled(run: Callable[[Any], np.ndarray], x, tile: Sequence[int], step: Sequence[int],
          extent: Sequence[int], limit: Sequence[int]) -> np.ndarray:
    """The reference's spatial tile loop over ``x (B, T, H, W, C)``.

    ``run`` maps each tile ``x[:, :, i : i + tile[0], j : j + tile[1]]`` (``i`` every ``step[0]``
    rows, ``j`` every ``step[1]`` columns) to a writable host array; then in raster order each
    result is blended with the one above over ``extent[0]`` rows and with the one to its left
    over ``extent[1]`` columns (:func:`blend`, in place), its first ``limit[0]`` x ``limit[1]``
    rows / columns are kept, and the kept pieces are concatenated. Host float32.
    """
    height, width = x.shape[2:4]
    rows = [
        [run(x[:, :, i : i + tile[0], j : j + tile[1]]) for j in range(0, width, step[1])]
        for i in range(0, height, step[0])
    ]
    out_rows = []
    for i, row in enumerate(rows):
        kept = []
        for j, t in enumerate(row):
            if i > 0:
                blend(rows[i - 1][j], t, extent[0], axis=2)
            if j > 0:
                blend(row[j - 1], t, extent[1], axis=3)
            kept.append(t[:, :, : limit[0], : limit[1]])
        out_rows.append(np.concatenate(kept, axis=3))
    return np.concatenate(out_rows, axis=2)
