"""LTX-2.5's duration head (``diffusers.pipelines.ltx2.duration_head.LTX2DurationHead``, diffusers
0.42.1): the natural length of the shot a prompt describes, from the text connectors' outputs.

::

    video tokens (B, L_v, D_v) ──video_input_proj──> + video_modality_emb ─┐
    audio tokens (B, L_a, D_a) ──audio_input_proj──> + audio_modality_emb ─┴─ concat (B, L_v + L_a, P)
    attention_pooler: Q learnable queries cross-attend the tokens (no mask, scale K^-1/2) -> (B, Q·P)
    mlp_hidden -> GELU-tanh -> mlp_out -> exp: seconds (B,)

:func:`duration_num_frames` turns the seconds into a frame count as
``LTX2DurationHead.predict_num_frames`` does (clamp to ``[min_seconds, max_seconds]`` in frames,
snap down to ``k · temporal_compression_ratio + 1``, up again when that undershoots the minimum).
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.config import ConfigBase, check_positive_ints
from vidax.errors import InputError
from vidax.nn.attention import dot_product_attention
from vidax.nn.inputs import compute_dtype
from vidax.nn.layers import Linear

_F32 = jnp.float32
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LTX2DurationHeadConfig(ConfigBase):
    """``LTX2DurationHead``'s config.json; defaults are diffusers'."""

    video_cross_attention_dim: int = 4096
    audio_cross_attention_dim: int = 2048
    pooler_hidden_dim: int = 256
    num_queries: int = 1
    num_pooler_heads: int = 4
    mlp_hidden_dim: int = 256

    def validate(self, source: str) -> None:
        check_positive_ints(source, self, tuple(f.name for f in dataclasses.fields(self)))
        if self.pooler_hidden_dim % self.num_pooler_heads:
            self.invalid(
                source,
                "num_pooler_heads",
                self.num_pooler_heads,
                f"must divide pooler_hidden_dim={self.pooler_hidden_dim}",
            )


class LTX2DurationAttentionPooler(nnx.Module):
    """``LTX2DurationAttentionPooler``: ``query_tokens`` (Q, P) cross-attend the tokens."""

    def __init__(self, hidden_dim: int, num_queries: int, num_heads: int, *, dtype, param_dtype, rngs):
        lin = partial(Linear, hidden_dim, hidden_dim, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.query_tokens = nnx.Param(jnp.zeros((num_queries, hidden_dim), param_dtype))
        self.to_q, self.to_k, self.to_v, self.to_out = lin(), lin(), lin(), lin()
        self.heads = num_heads

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """tokens (B, L, P) -> (B, Q, P)."""
        b, length, p = tokens.shape
        queries = jnp.broadcast_to(self.query_tokens[...].astype(tokens.dtype), (b, *self.query_tokens.shape))
        n = self.heads
        q = self.to_q(queries).reshape(b, -1, n, p // n)
        k = self.to_k(tokens).reshape(b, length, n, p // n)
        v = self.to_v(tokens).reshape(b, length, n, p // n)
        return self.to_out(dot_product_attention(q, k, v).reshape(b, -1, p))


class LTX2DurationHead(nnx.Module):
    """``LTX2DurationHead`` (see the module docstring).

    Args:
        config: :class:`LTX2DurationHeadConfig`.
        dtype: compute dtype (float32 / bfloat16).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    def __init__(
        self,
        config: LTX2DurationHeadConfig,
        *,
        dtype: Any = _F32,
        param_dtype: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        dtype = compute_dtype(dtype, "LTX-2 duration head")
        param_dtype = dtype if param_dtype is None else param_dtype
        rngs = nnx.Rngs(0) if rngs is None else rngs
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        c = config
        self.video_input_proj = Linear(c.video_cross_attention_dim, c.pooler_hidden_dim, **kw)
        self.video_modality_emb = nnx.Param(jnp.zeros((c.pooler_hidden_dim,), param_dtype))
        self.audio_input_proj = Linear(c.audio_cross_attention_dim, c.pooler_hidden_dim, **kw)
        self.audio_modality_emb = nnx.Param(jnp.zeros((c.pooler_hidden_dim,), param_dtype))
        self.attention_pooler = LTX2DurationAttentionPooler(
            c.pooler_hidden_dim, c.num_queries, c.num_pooler_heads, **kw
        )
        self.mlp_hidden = Linear(c.pooler_hidden_dim * c.num_queries, c.mlp_hidden_dim, **kw)
        self.mlp_out = Linear(c.mlp_hidden_dim, 1, **kw)
        self.config = config
        self.dtype = dtype

    def __call__(self, video_tokens: jax.Array | None = None, audio_tokens: jax.Array | None = None) -> jax.Array:
        """Predicted seconds.

        Args:
            video_tokens: (B, L_v, D_v) video connector output, or None.
            audio_tokens: (B, L_a, D_a) audio connector output, or None.

        Returns:
            (B,) float32 seconds.

        Raises:
            InputError: both are None.
        """
        if video_tokens is None and audio_tokens is None:
            raise InputError("LTX2DurationHead needs video_tokens= or audio_tokens= (a connector output).")
        groups = []
        if video_tokens is not None:
            x = self.video_input_proj(jnp.asarray(video_tokens).astype(self.dtype))
            groups.append(x + self.video_modality_emb[...].astype(x.dtype))
        if audio_tokens is not None:
            x = self.audio_input_proj(jnp.asarray(audio_tokens).astype(self.dtype))
            groups.append(x + self.audio_modality_emb[...].astype(x.dtype))
        pooled = self.attention_pooler(jnp.concatenate(groups, axis=1))
        pooled = pooled.reshape(pooled.shape[0], -1)
        hidden = jax.nn.gelu(self.mlp_hidden(pooled).astype(_F32), approximate=True).astype(self.dtype)
        return jnp.exp(self.mlp_out(hidden)[..., 0].astype(_F32))


def duration_num_frames(
    seconds: float,
    *,
    frame_rate: float,
    temporal_compression_ratio: int,
    min_seconds: float = 1.0,
    max_seconds: float = 20.0,
) -> int:
    """``LTX2DurationHead.predict_num_frames`` after the head: a frame count on the VAE's grid
    (``k · temporal_compression_ratio + 1``) for ``seconds`` clamped to ``[min_seconds,
    max_seconds]``. Python's ``round`` (half to even) as the reference's.

    The clamp is applied in frames first, then snapped down; a snap below the minimum frame count
    moves up one grid step when that stays within the maximum, else the nearer of the two is used
    (bounds narrower than one grid step) and a warning logged, as the reference.
    """
    k = int(temporal_compression_ratio)
    min_frames = max(1, round(min_seconds * frame_rate))
    max_frames = round(max_seconds * frame_rate)
    clamped = max(min_frames, min(round(seconds * frame_rate), max_frames))
    frames = ((clamped - 1) // k) * k + 1
    if frames < min_frames:
        up = frames + k
        if up <= max_frames:
            frames = up
        else:
            if abs(up - clamped) < abs(frames - clamped):
                frames = up
            log.warning(
                "duration bounds [%.2fs, %.2fs] at %.2f fps admit no frame count of the form k * %d + 1; "
                "using the nearest: %d frames",
                min_seconds,
                max_seconds,
                frame_rate,
                k,
                frames,
            )
    if seconds < min_seconds or seconds > max_seconds:
        log.warning(
            "predicted duration %.2fs outside [%.2fs, %.2fs]: %d frames", seconds, min_seconds, max_seconds, frames
        )
    return frames
