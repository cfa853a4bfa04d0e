"""3-D rotary position embedding of the Wan transformer (``diffusers`` ``WanRotaryPosEmbed``).

The head dim K is split into three parts for the (T, H, W) patch coordinates:
``h = w = 2 * (K // 6)``, ``t = K - h - w`` (K=128 -> 44, 42, 42). Each part of width ``d`` uses
frequencies ``theta ** (-(0, 2, 4, ..., d-2) / d)``, ``theta = 10000``. The tables are computed on
the host in float64 and rounded to float32, as the reference does (it builds them in float64).

Pair layout: the reference rotates *interleaved* pairs ``(x[2i], x[2i+1])`` of each head by the
angle of pair ``i``; pairs ``0 .. t/2-1`` use the frame index, the next ``h/2`` the row index,
the last ``w/2`` the column index.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import InputError

ROPE_THETA = 10000.0


def rope_split(head_dim: int) -> tuple[int, int, int]:
    """Channels of the head dim given to the (T, H, W) axes: ``(K - 2h, h, h)``, ``h = 2(K//6)``."""
    h = w = 2 * (head_dim // 6)
    return head_dim - h - w, h, w


def _axis_angles(dim: int, n: int, theta: float) -> np.ndarray:
    """(n, dim // 2) float64 angles ``pos * theta ** (-2i / dim)``, as ``get_1d_rotary_pos_embed``."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    return np.outer(np.arange(n, dtype=np.float64), freqs)


def wan_rope(
    head_dim: int,
    grid: tuple[int, int, int],
    max_seq_len: int,
    theta: float = ROPE_THETA,
) -> tuple[jax.Array, jax.Array]:
    """Per-token, per-pair cos and sin of the Wan 3-D RoPE.

    Args:
        head_dim: K (even).
        grid: ``(t, h, w)`` patches along frames, rows, columns; tokens are ordered t-major then
            h then w (the patch-embedding flatten order).
        max_seq_len: the reference's table length (``rope_max_seq_len``); each of t, h, w must
            fit in it.
        theta: RoPE base.

    Returns:
        ``(cos, sin)``, each ``(L, K // 2)`` float32 with ``L = t * h * w``.

    Raises:
        InputError: a grid size exceeds ``max_seq_len``.
    """
    for name, n in zip(("frames", "rows", "columns"), grid):
        if n > max_seq_len:
            raise InputError(
                f"wan_rope: {n} patch {name} exceed rope_max_seq_len={max_seq_len} (the reference's "
                "RoPE table length); use a smaller video."
            )
    dims = rope_split(head_dim)
    cos_parts, sin_parts = [], []
    for axis, (dim, n) in enumerate(zip(dims, grid)):
        ang = _axis_angles(dim, n, theta)  # (n, dim // 2) float64
        shape = [1, 1, 1, dim // 2]
        shape[axis] = n
        # Small per-axis tables become constants; the (t, h, w, K/2) broadcast happens on device.
        for parts, fn in ((cos_parts, np.cos), (sin_parts, np.sin)):
            table = jnp.asarray(fn(ang).astype(np.float32).reshape(shape))
            parts.append(jnp.broadcast_to(table, (*grid, dim // 2)))
    n_tok = grid[0] * grid[1] * grid[2]
    cos = jnp.concatenate(cos_parts, axis=-1).reshape(n_tok, head_dim // 2)
    sin = jnp.concatenate(sin_parts, axis=-1).reshape(n_tok, head_dim // 2)
    return cos, sin
