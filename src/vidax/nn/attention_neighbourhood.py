"""3D neighbourhood attention, blocked: memory grows with the window, never with the frame.

Each query of a ``(T, H, W)`` token grid attends the ``kernel`` window around it, shifted inward
at the grid's borders so that it always holds exactly ``kernel`` positions (NATTEN's ``na3d``;
diffusers' ``_neighborhood_block_mask`` for FlexAttention, ltx2_diffusion_decoder.py). A kernel
larger than the grid along an axis is cut to the grid (the reference's ``min``).

No mask over the whole grid is ever built. The queries are cut into tiles of ``block`` tokens per
axis (default: the kernel); every query of a tile finds its window inside one key slab of
``block + kernel - 1`` tokens per axis starting at ``clip(tile_start - kernel // 2, 0, size -
slab)`` (the windows' starts are monotone in the query position, and that slab holds the first
and the last window of the tile). One tile is then a small dense attention of
:func:`vidax.nn.attention.dot_product_attention` with the tile's ``(Lq_tile, Lk_slab)`` window
mask as its ``-inf`` bias, and ``lax.map`` walks the tiles (``tiles_per_step`` at a time), so the
temporaries are those of ``tiles_per_step`` tiles whatever the grid.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from vidax.errors import InputError
from vidax.nn.attention import dot_product_attention


def _window_axis(q_pos: jax.Array, k_pos: jax.Array, size: int, kernel: int) -> jax.Array:
    """``(len(q_pos), len(k_pos))`` bool: key position inside the query's inward-shifted window."""
    start = jnp.clip(jnp.minimum(q_pos, size - 1) - kernel // 2, 0, size - kernel)
    return (k_pos[None, :] >= start[:, None]) & (k_pos[None, :] < start[:, None] + kernel)


def neighbourhood_mask(grid: tuple[int, int, int], kernel: tuple[int, int, int]) -> jax.Array:
    """The dense ``(L, L)`` bool mask of the same windows (``L = T·H·W``, row-major tokens), for
    tests on small grids only."""
    kernel = tuple(min(k, s) for k, s in zip(kernel, grid))
    parts = [_window_axis(jnp.arange(s), jnp.arange(s), s, k) for s, k in zip(grid, kernel)]
    mask = (
        parts[0][:, None, None, :, None, None]
        & parts[1][None, :, None, None, :, None]
        & parts[2][None, None, :, None, None, :]
    )
    n = math.prod(grid)
    return mask.reshape(n, n)


def _tile_bias(start, key_start, block, slab, grid, kernel) -> jax.Array:
    """``(1, 1, prod(block), prod(slab))`` float32: 0 where a query of the tile at ``start``
    has the key of the slab at ``key_start`` in its window (``kernel``, cut at the ``grid``'s
    edges), -inf elsewhere."""
    parts = [
        _window_axis(start[i] + jnp.arange(block[i]), key_start[i] + jnp.arange(slab[i]), grid[i], kernel[i])
        for i in range(3)
    ]
    allowed = (
        parts[0][:, None, None, :, None, None]
        & parts[1][None, :, None, None, :, None]
        & parts[2][None, None, :, None, None, :]
    ).reshape(math.prod(block), math.prod(slab))
    return jnp.where(allowed, 0.0, -jnp.inf).astype(jnp.float32)[None, None]


def neighbourhood_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    grid: tuple[int, int, int],
    kernel: tuple[int, int, int],
    *,
    scale: float | None = None,
    block: tuple[int, int, int] | None = None,
    tiles_per_step: int = 8,
) -> jax.Array:
    """Neighbourhood attention of tokens on a 3D grid (module docstring).

    Args:
        q, k, v: ``(B, L, N, K)`` with ``L = T·H·W`` tokens in row-major ``(T, H, W)`` order, one
            float dtype.
        grid: ``(T, H, W)``.
        kernel: window ``(k_t, k_h, k_w)``, each >= 1 (cut to the grid).
        scale: of the scores; default ``1 / sqrt(K)``.
        block: query tile per axis; default the (cut) kernel.
        tiles_per_step: tiles computed together by each ``lax.map`` step.

    Returns:
        ``(B, L, N, K)`` in ``q.dtype``; softmax and accumulation in float32.

    Raises:
        InputError: ``L`` is not ``T·H·W``, or a kernel / block size below 1.
    """
    b, l, n, d = q.shape
    grid = tuple(int(s) for s in grid)
    if l != math.prod(grid) or k.shape[1] != l or v.shape[1] != l:
        raise InputError(f"neighbourhood_attention: {l} queries / {k.shape[1]} keys do not fill the grid {grid}.")
    if min(kernel) < 1 or (block is not None and min(block) < 1):
        raise InputError(f"neighbourhood_attention: kernel={tuple(kernel)} and block={block} must be >= 1.")
    kernel = tuple(min(int(kk), s) for kk, s in zip(kernel, grid))
    block = kernel if block is None else tuple(min(int(bb), s) for bb, s in zip(block, grid))
    slab = tuple(min(bb + kk - 1, s) for bb, kk, s in zip(block, kernel, grid))
    tiles = tuple(-(-s // bb) for s, bb in zip(grid, block))
    padded = tuple(t * bb for t, bb in zip(tiles, block))
    q5 = q.reshape(b, *grid, n, d)
    q5 = jnp.pad(q5, ((0, 0), *((0, p - s) for p, s in zip(padded, grid)), (0, 0), (0, 0)))
    k5, v5 = k.reshape(b, *grid, n, k.shape[-1]), v.reshape(b, *grid, n, v.shape[-1])
    starts = jnp.stack(
        jnp.meshgrid(*(jnp.arange(t, dtype=jnp.int32) * bb for t, bb in zip(tiles, block)), indexing="ij"), axis=-1
    ).reshape(-1, 3)
    lq, lk = math.prod(block), math.prod(slab)
    zero = jnp.int32(0)

    def tile(start):
        key_start = [jnp.clip(start[i] - kernel[i] // 2, 0, grid[i] - slab[i]) for i in range(3)]
        qt = jax.lax.dynamic_slice(q5, (zero, *(start[i] for i in range(3)), zero, zero), (b, *block, n, d))
        kt = jax.lax.dynamic_slice(k5, (zero, *key_start, zero, zero), (b, *slab, n, k5.shape[-1]))
        vt = jax.lax.dynamic_slice(v5, (zero, *key_start, zero, zero), (b, *slab, n, v5.shape[-1]))
        bias = _tile_bias(start, key_start, block, slab, grid, kernel)
        return dot_product_attention(
            qt.reshape(b, lq, n, d),
            kt.reshape(b, lk, n, -1),
            vt.reshape(b, lk, n, -1),
            implementation="xla",
            scale=scale,
            bias=bias,
        )

    # Whole steps only (a remainder would compile the tile a second time): the last tile repeats.
    step = min(tiles_per_step, starts.shape[0])
    count = starts.shape[0]
    steps = -(-count // step)
    starts = jnp.concatenate([starts, jnp.repeat(starts[-1:], steps * step - count, axis=0)])
    out = jax.lax.map(lambda s: jax.vmap(tile)(s), starts.reshape(steps, step, 3))
    out = out.reshape(steps * step, b, lq, n, v.shape[-1])[:count]  # (tiles, B, lq, N, K)
    out = out.reshape(*tiles, b, *block, n, v.shape[-1])
    out = out.transpose(3, 0, 4, 1, 5, 2, 6, 7, 8).reshape(b, *padded, n, v.shape[-1])
    return out[:, : grid[0], : grid[1], : grid[2]].reshape(b, l, n, v.shape[-1])
