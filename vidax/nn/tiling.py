"""The overlapping-tile loop and linear blends of the diffusers video VAEs, on host arrays.

diffusers' ``tiled_encode`` / ``tiled_decode`` (CogVideoX, LTX-Video, HunyuanVideo, ...) run the
model on overlapping tiles, then in raster order blend each tile's first rows / columns / frames
with the last ones of its neighbour (``blend_v`` / ``blend_h`` / ``blend_t``, which write into
the tile in place, so a neighbour is read as already blended), crop and concatenate. These are
those two steps on channels-last ``(B, T, H, W, C)`` float32 numpy arrays.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def blend_in_place(a: np.ndarray, b: np.ndarray, extent: int, axis: int) -> None:
    """``blend_t`` (axis 1) / ``blend_v`` (axis 2) / ``blend_h`` (axis 3): ramp ``b``'s first
    entries along ``axis`` from ``a``'s last, in place:
    ``b[y] = a[-e + y] (1 - y / e) + b[y] y / e`` for ``y < e = min(extent, sizes)``."""
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


def tiled_apply(run: Callable[[Any], np.ndarray], x, tile, step, blend, limit,
                blend_fn: Callable[..., None] = blend_in_place) -> np.ndarray:
    """The reference's spatial tile loop over ``x (B, T, H, W, C)``.

    ``run`` maps the tile ``x[:, :, i : i + tile[0], j : j + tile[1]]`` (``i`` / ``j`` every
    ``step[0]`` / ``step[1]`` rows / columns from 0) to a host array; in raster order each result
    gets its first ``blend[0]`` rows blended from the tile above and its first ``blend[1]``
    columns from the tile to the left (``blend_fn``, in place), then keeps its first
    ``limit[0] x limit[1]``; the kept parts are concatenated (no final crop).
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
                blend_fn(rows[i - 1][j], t, blend[0], axis=2)
            if j > 0:
                blend_fn(row[j - 1], t, blend[1], axis=3)
            kept.append(t[:, :, : limit[0], : limit[1]])
        out_rows.append(np.concatenate(kept, axis=3))
    return np.concatenate(out_rows, axis=2)
