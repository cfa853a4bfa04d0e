"""Position tables of the Cosmos transformer: the 3-D RoPE (diffusers ``CosmosRotaryPosEmbed``)
and the learnable per-axis embedding (``CosmosLearnablePositionalEmbed``, in the transformer).

RoPE: the head dim K is split into (T, H, W) parts ``t = K - 2h, h, h`` with ``h = 2 * (K // 6)``
(K=128 -> 44, 42, 42); axis ``a`` of ``d`` channels uses frequencies ``theta_a ** (-(0, 2, ..,
d-2) / d)`` with ``theta_a = 10000 * rope_scale[a] ** (d / (d - 2))`` (NTK extrapolation). All in
float32, as the reference. Positions are the patch indices; with ``fps`` the frame index becomes
``t / fps * 24`` (``base_fps`` 24), without it (images, and the Predict2.5 pipeline, which never
passes fps) the plain index.

Pair layout: rotate-half (``apply_rotary_emb(use_real_unbind_dim=-2)`` with ``cos = cat([t, h,
w] * 2)``): channel ``i`` pairs with ``i + K/2``, both rotated by angle ``i`` of ``cat(t, h, w)``.
"""

from __future__ import annotations

import jax
import numpy as np

from vidax.errors import InputError
from vidax.models.cosmos.config import CosmosTransformerConfig
from vidax.nn.rope import grid_position_ids, rope_tables

#: ``CosmosRotaryPosEmbed``'s ``base_fps``: with ``fps``, frame positions are scaled by 24 / fps.
BASE_FPS = 24


def cosmos_rope(
    config: CosmosTransformerConfig, grid: tuple[int, int, int], fps: float | None = None
) -> tuple[jax.Array, jax.Array]:
    """cos and sin of the Cosmos 3-D RoPE for a patch grid.

    Args:
        config: the transformer's config (head dim, ``rope_scale``, ``max_size``, patch size).
        grid: ``(t, h, w)`` patches; tokens are ordered t-major, then h, then w.
        fps: frames per second of the video (a Python number, static) or None (images / the
            Predict2.5 pipeline): frame positions ``t / fps * 24`` instead of ``t``.

    Returns:
        ``(cos, sin)``, each ``(t * h * w, K // 2)`` float32, for
        :func:`vidax.nn.rope.apply_rope` with ``layout="rotate_half"``.

    Raises:
        InputError: a grid axis longer than the reference's position table
            (``max(max_size // patch_size)`` patches), or ``fps`` not a positive number.
    """
    limit = max(config.patch_grid_max)
    for name, n in zip(("frames", "rows", "columns"), grid):
        if n > limit:
            raise InputError(
                f"cosmos_rope: {n} patch {name} exceed the reference's RoPE table of {limit} positions "
                f"(max(max_size // patch_size) for max_size={config.max_size}); use a smaller video."
            )
    pos = grid_position_ids(grid).astype(np.float32)
    if fps is not None:
        if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)) or not fps > 0:
            raise InputError(f"cosmos_rope: fps={fps!r} must be a positive number (static) or None.")
        # float32 division then multiplication, as the reference's ``seq / fps * base_fps``.
        pos[:, 0] = pos[:, 0] / np.float32(fps) * np.float32(BASE_FPS)
    return rope_tables(pos, config.rope_split, config.rope_theta)
