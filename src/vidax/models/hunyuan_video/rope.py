"""3-D rotary position embedding of the HunyuanVideo 1.0 video tokens (``diffusers``
``HunyuanVideoRotaryPosEmbed``); the text tokens get none.

Positions are the integer patch coordinates ``(frame, row, column)`` of each token, in the
patch-embedding flatten order (``torch.meshgrid(..., indexing="ij")``). Axis ``a`` rotates
``rope_axes_dim[a] // 2`` pairs (``(16, 56, 56)`` for K = 128) with frequencies
``theta ** (-2i / d_a)``, ``theta = rope_theta`` (256), computed in float32 as the reference's
``get_1d_rotary_pos_embed(use_real=True)``. The reference's tables repeat each angle for the two
channels of an *interleaved* pair (``repeat_interleave_real=True``) and ``apply_rotary_emb``
rotates ``(x[2i], x[2i+1])``: rotate with :func:`vidax.nn.rope.apply_rope` ``layout="interleaved"``.
"""

from __future__ import annotations

import jax

from vidax.models.hunyuan_video.config import HunyuanVideoTransformerConfig
from vidax.nn.rope import grid_position_ids, rope_tables


def hunyuan_rope(config: HunyuanVideoTransformerConfig, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """cos and sin of the video tokens' RoPE.

    Args:
        config: the transformer config (``rope_axes_dim``, ``rope_theta``).
        grid: ``(T/p_t, H/p, W/p)`` patches along frames, rows, columns.

    Returns:
        ``(cos, sin)``, each ``(t·h·w, K // 2)`` float32, tokens t-major then h then w.
    """
    return rope_tables(grid_position_ids(grid), config.rope_axes_dim, float(config.rope_theta))
