"""LTX-2's text connectors (``diffusers.pipelines.ltx2.connectors.LTX2TextConnectors``, diffusers
0.42.1) in Flax NNX: from every Gemma 3 hidden state to the video and audio text embeddings.

::

    hidden states (B, L, C, layers) [+ tokenizer mask (B, L), left or right padded]
      2.0: per (sample, layer): (h − masked mean) / (masked max − masked min + 1e-6) · 8,
           padding zeroed, flattened (C·layers, channel-major) ──text_proj_in──> (B, L, C)
      2.3: per (token, layer) RMS over C, padding zeroed, flattened, · sqrt(D_m / C)
           ──video_text_proj_in / audio_text_proj_in──> (B, L, D_v) / (B, L, D_a)
    per modality, LTX2ConnectorTransformer1d:
      learnable registers: the real tokens moved to the front (in order), the rest of the
          sequence filled with the registers tiled along it (position i gets register i mod R);
          every key then attended
      blocks × layers (stacked): x += attn1(RMS(x), 1-D RoPE); x += ff(RMS(x))
      RMS(x)
    video embedding, audio embedding, mask (B, L) (all ones, as the reference's)

The attention is :class:`vidax.blocks.attention.Attention` (q / k RMS over all heads, RoPE over
the whole width: "interleaved" or "split", LTX-2.3's per-head gates). The 1-D RoPE's positions
are ``i / connector_rope_base_seq_len`` (tables on the host, float64 frequencies:
:func:`vidax.models.ltx2.rope.text_rope_table`).

Without registers the padded tokens are masked as keys inside the connectors (the reference's
additive ``-finfo.max`` bias). The mask returned for the transformer is all ones in either case,
as the reference's (``additive < 1e-6`` holds for 0 and for ``-finfo.max``), so the video
embedding's rows are all kept.

Precision: statistics, norms and RoPE in float32; the projections in the compute dtype.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.errors import InputError
from vidax.models.ltx2.config_transformer import LTX2_ROPE_TYPES, LTX2ConnectorsConfig
from vidax.models.ltx2.rope import text_rope_table
from vidax.nn.attention import SegmentIds
from vidax.nn.layers import FeedForward, linear, rms_norm
from vidax.nn.stack import scan_layers, stacked

_F32 = jnp.float32
#: The connectors' RMSNorm and q / k norm epsilon (fixed in the reference).
EPS = 1e-6
#: Where a tokenizer pads.
PADDING_SIDES = ("left", "right")


class LTX2TransformerBlock1d(nnx.Module):
    """diffusers ``LTX2TransformerBlock1d``: pre-RMS self-attention and feed-forward."""

    def __init__(self, dim, heads, head_dim, rope_layout, gated, attention, dtype, param_dtype, rngs):
        self.dtype = dtype
        cfg = AttentionConfig(
            dim, heads, head_dim, qk_norm="rms", qk_norm_eps=EPS, rope=rope_layout, rope_full_width=True, gate=gated
        )
        self.attn1 = Attention(cfg, attention, dtype, param_dtype, rngs)
        self.ff = FeedForward(dim, 4 * dim, dim, True, dtype, param_dtype, rngs)

    def __call__(self, x, rope, mask: AttentionMask):
        x = x + self.attn1(rms_norm(x, EPS, self.dtype), rope=rope, mask=mask).astype(x.dtype)
        return x + self.ff(rms_norm(x, EPS, self.dtype)).astype(x.dtype)


class LTX2ConnectorTransformer1d(nnx.Module):
    """diffusers ``LTX2ConnectorTransformer1d``: registers, stacked 1-D blocks, final RMSNorm."""

    def __init__(self, cfg: LTX2ConnectorsConfig, modality: str, attention, dtype, param_dtype, rngs):
        heads, head_dim, layers, registers, gated = cfg.connector(modality)
        self.cfg = cfg
        self.dtype = dtype
        self.dim = heads * head_dim
        self.num_registers = registers
        self.learnable_registers = (
            nnx.Param(jax.random.uniform(rngs.params(), (registers, self.dim), _F32, -1, 1))
            if registers is not None
            else None
        )
        layout = LTX2_ROPE_TYPES[cfg.rope_type]
        self.transformer_blocks = stacked(
            lambda r: LTX2TransformerBlock1d(
                self.dim, heads, head_dim, layout, gated, attention, dtype, param_dtype, r
            ),
            layers,
            rngs,
        )

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        """``x`` ``(B, L, dim)``, ``mask`` ``(B, L)`` int32 1 = real -> the embedding
        ``(B, L, dim)``: with registers every token attended, else the padded keys masked."""
        b, length, _ = x.shape
        if self.learnable_registers is not None:
            r = self.num_registers
            if length % r:
                raise InputError(
                    f"LTX2TextConnectors: the text length {length} must be a multiple of the "
                    f"{r} learnable registers (pad the prompt to it, as the reference's tokenizer call)."
                )
            registers = jnp.tile(self.learnable_registers[...], (length // r, 1)).astype(x.dtype)  # (L, dim)
            # Stable order: real tokens first (in order), then the padding.
            order = jnp.argsort(1 - mask, axis=1, stable=True)
            front = jnp.take_along_axis(x, order[:, :, None], axis=1)
            n_real = mask.sum(axis=1, keepdims=True)
            x = jnp.where((jnp.arange(length)[None] < n_real)[:, :, None], front, registers[None])
            mask = jnp.ones_like(mask)
        cos, sin = text_rope_table(
            length, self.dim, self.cfg.connector_rope_base_seq_len, self.cfg.rope_theta, self.cfg.rope_double_precision
        )
        rope = (jnp.asarray(cos), jnp.asarray(sin))
        attn_mask = AttentionMask(segment_ids=SegmentIds.for_mask(jnp.ones_like(mask), mask))

        def body(block, h):
            return block(h, rope, attn_mask)

        x = scan_layers(self.transformer_blocks, x, body)
        return rms_norm(x, EPS, x.dtype)


class LTX2TextConnectors(nnx.Module):
    """The video and audio text connectors of LTX-2 / LTX-2.3.

    Args:
        config: :class:`~vidax.models.ltx2.config.LTX2ConnectorsConfig`.
        dtype: compute dtype; param_dtype: initial parameter dtype; attention: implementation
            for :func:`vidax.nn.attention.dot_product_attention`; rngs: initialisation.

    Call ``connectors(text_encoder_hidden_states, attention_mask, padding_side="left",
    scale_factor=8)`` -> ``(video (B, L, D_v), audio (B, L, D_a), mask (B, L) int32)``.
    """

    def __init__(
        self,
        config: LTX2ConnectorsConfig,
        *,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        attention: str = "auto",
        rngs: nnx.Rngs,
        mesh=None,
    ):
        c = self.config = config
        self.dtype = dtype
        width = c.caption_channels * c.text_proj_in_factor
        if c.per_modality_projections:
            self.video_text_proj_in = linear(width, c.video_hidden_dim, dtype, param_dtype, rngs, c.proj_bias)
            self.audio_text_proj_in = linear(width, c.audio_hidden_dim, dtype, param_dtype, rngs, c.proj_bias)
            self.text_proj_in = None
        else:
            self.text_proj_in = linear(width, c.caption_channels, dtype, param_dtype, rngs, c.proj_bias)
            self.video_text_proj_in = self.audio_text_proj_in = None
        self.video_connector = LTX2ConnectorTransformer1d(c, "video", attention, dtype, param_dtype, rngs)
        self.audio_connector = LTX2ConnectorTransformer1d(c, "audio", attention, dtype, param_dtype, rngs)

    def __call__(
        self,
        text_encoder_hidden_states: jax.Array,
        attention_mask: jax.Array,
        padding_side: str = "left",
        scale_factor: float = 8,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The reference's ``forward``.

        Args:
            text_encoder_hidden_states: ``(B, L, caption_channels, text_proj_in_factor)`` (every
                hidden state stacked last, as the pipeline stacks them) or ``(B, L,
                caption_channels·text_proj_in_factor)`` flattened channel-major.
            attention_mask: ``(B, L)`` 0/1 tokenizer mask.
            padding_side: where the tokenizer padded (``"left"`` / ``"right"``; 2.0 only: its
                normalisation takes the real tokens as the last / first ``sum(mask)``).
            scale_factor: 2.0's normalisation scale.

        Returns:
            ``(video (B, L, D_v), audio (B, L, D_a))`` in the compute dtype and the mask the
            transformer takes ``(B, L)`` int32 (all ones, as the reference's).

        Raises:
            InputError: shapes that do not fit the config, an unknown ``padding_side``, a text
                length that is not a multiple of the registers.
        """
        c = self.config
        h = text_encoder_hidden_states
        width = c.caption_channels * c.text_proj_in_factor
        if h.ndim == 3 and h.shape[-1] == width:
            h = h.reshape(*h.shape[:2], c.caption_channels, c.text_proj_in_factor)
        if h.ndim != 4 or h.shape[2:] != (c.caption_channels, c.text_proj_in_factor):
            raise InputError(
                f"LTX2TextConnectors: text_encoder_hidden_states must be (B, L, {c.caption_channels}, "
                f"{c.text_proj_in_factor}) or (B, L, {width}); got {tuple(text_encoder_hidden_states.shape)}."
            )
        b, length = h.shape[:2]
        if tuple(attention_mask.shape) != (b, length):
            raise InputError(
                f"LTX2TextConnectors: attention_mask must be (B, L)=({b}, {length}); got {tuple(attention_mask.shape)}."
            )
        if padding_side not in PADDING_SIDES:
            raise InputError(f"LTX2TextConnectors: padding_side={padding_side!r}; valid: {list(PADDING_SIDES)}.")
        mask = (jnp.asarray(attention_mask) != 0).astype(jnp.int32)
        real = mask.astype(bool)[:, :, None]
        if c.per_modality_projections:
            x = h.astype(_F32)
            x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=2, keepdims=True) + EPS)
            x = jnp.where(real, x.reshape(b, length, -1), 0.0)
            video = self.video_text_proj_in((x * math.sqrt(c.video_hidden_dim / c.caption_channels)).astype(self.dtype))
            audio = self.audio_text_proj_in((x * math.sqrt(c.audio_hidden_dim / c.caption_channels)).astype(self.dtype))
        else:
            x = _masked_layer_norm(h, mask.sum(axis=1), padding_side, scale_factor)
            video = audio = self.text_proj_in(x.astype(self.dtype))
        video = self.video_connector(video, mask)
        audio = self.audio_connector(audio, mask)
        # The reference's returned mask is ``additive_mask < 1e-6`` of the connector's additive
        # mask (0, or -finfo.max for padding without registers): true everywhere, so the
        # transformer attends every text token and the video embedding keeps every row.
        return video, audio, jnp.ones_like(mask)


def _masked_layer_norm(h: jax.Array, lengths: jax.Array, padding_side: str, scale: float, eps: float = 1e-6):
    """The reference's ``per_layer_masked_mean_norm``: ``h`` ``(B, L, C, layers)`` -> ``(B, L,
    C·layers)`` float32, each (sample, layer) centred on its real tokens' mean and divided by
    their range, times ``scale``; padded rows zero. ``lengths`` ``(B,)`` real tokens (the last ones
    for left padding, the first for right)."""
    b, length, c, _ = h.shape
    pos = jnp.arange(length)[None]
    real = pos >= (length - lengths[:, None]) if padding_side == "left" else pos < lengths[:, None]
    m = real[:, :, None, None]
    x = h.astype(_F32)
    mean = jnp.where(m, x, 0.0).sum(axis=(1, 2), keepdims=True) / ((lengths * c).reshape(b, 1, 1, 1) + eps)
    lo = jnp.where(m, x, jnp.inf).min(axis=(1, 2), keepdims=True)
    hi = jnp.where(m, x, -jnp.inf).max(axis=(1, 2), keepdims=True)
    out = (x - mean) / (hi - lo + eps) * scale
    return jnp.where(real[:, :, None], out.reshape(b, length, -1), 0.0)
