"""LTX-Video 0.9.x denoising transformer (``diffusers.LTXVideoTransformer3DModel``, diffusers
0.42.1 ``models/transformers/transformer_ltx.py``) in Flax NNX.

Reads top to bottom like the reference::

    packed latents (B, N, C_in) ──proj_in──> tokens (B, N, D)                 (patch size 1: a linear map)
    timestep (B,) / (B, 1) / (B, N) ──sinusoid(256)──time_embed.emb──> e (B, S, D)   S = 1 or N
        ──SiLU──time_embed.linear──> temb (B, S, 6D)                                  (AdaLN-single)
    text (B, L, C_txt) ──caption_projection──> context (B, L, D); mask (B, L) -> masked context keys
    coords (B, N, 3) ──LTX RoPE──> one (cos, sin) table over the whole width D (vidax.models.ltx.rope)
    transformer_blocks × num_layers (stacked, run with a scan):
        shift, scale, gate, shift_mlp, scale_mlp, gate_mlp = scale_shift_table + temb   (per token)
        x += gate · self_attn(RMS(x)·(1+scale)+shift, RoPE)
        x += cross_attn(x, context, mask)                                  (no norm before it)
        x += gate_mlp · ffn(RMS(x)·(1+scale_mlp)+shift_mlp)
    LN(x)·(1+scale)+shift  (shift, scale = scale_shift_table + e) ──proj_out──> (B, N, C_out)

Attention (``LTXAttention``): q, k, v projections, then RMSNorm (weight, eps 1e-5) of q and of k
over the whole width D, across heads (``rms_norm_across_heads``), then the RoPE rotation of q and
k over the whole width, then the split into N heads of K.

The text mask: the reference turns ``encoder_attention_mask`` (B, L) of 0/1 into the additive
bias ``(1 - mask) · -10000``; after softmax that is exactly a key mask whenever a row keeps at
least one key (``exp(-10000)`` is 0 in float32), which is what vidax applies (segment ids, never a
dense bias). A sample whose mask is all zeros gets the same bias on every key in the reference,
i.e. no mask at all; vidax then attends to all keys too.

Per-token timesteps: with ``timestep`` ``(B, N)`` every token has its own modulation in every
block and in the output norm (conditioning tokens of the image-to-video / condition pipelines
sit at their own timestep, e.g. 0), as the reference broadcasts ``temb`` ``(B, N, 6D)``.

Precision: the timestep MLP (``time_embed.emb``) and the ``scale_shift_table`` parameters are
float32 under any dtype (:func:`vidax.models.ltx.convert.transformer_policy`; the reference casts
them with the model, vidax keeps them as the fp32 modules of the other families); the timestep
MLP, its rounding to the compute dtype, modulation arithmetic (table + temb,
``RMS(x)·(1+scale)+shift``, gated residual adds), norm statistics, the RoPE tables and rotation
and the softmax are float32. The residual stream between operations is held in
``residual_dtype`` (float32 by default; ``None`` rounds it to the compute dtype after every add,
as the reference does in bf16). In float32 this is the reference's arithmetic.

Parameter paths mirror the diffusers state dict (``transformer_blocks.3.attn1.to_q.weight`` ->
``transformer_blocks/attn1/to_q/kernel`` with a leading layer axis); the key rules, parameter
axes and loader are in :mod:`vidax.models.ltx.convert`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import AdaLayerNormSingle, gated_add, modulate, table_modulation
from vidax.blocks.transformer import DiffusionTransformer, block_inputs, static
from vidax.errors import InputError
from vidax.models.ltx.config import LTXTransformerConfig
from vidax.models.ltx.rope import grid_coords, ltx_rope, video_coords_to_grid
from vidax.nn.layers import FeedForward, LayerNorm, RMSNorm, TextProjection, linear
from vidax.nn.stack import stacked
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32
#: ``LTXAttention``'s q / k RMSNorm epsilon (fixed in the reference, not ``norm_eps``).
QK_NORM_EPS = 1e-5
#: ``norm_out``'s epsilon (fixed in the reference).
OUT_NORM_EPS = 1e-6


# ---------------------------------------------------------------------------------------------
# Transformer block


class LTXVideoTransformerBlock(nnx.Module):
    """diffusers ``LTXVideoTransformerBlock``: modulated self-attention, cross-attention to the
    text, modulated feed-forward network (``norm1`` / ``norm2``: RMSNorms, weighted only with
    ``norm_elementwise_affine``; the weight multiplies in float32)."""

    def __init__(self, cfg: LTXTransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        affine = "w" if cfg.norm_elementwise_affine else None
        self.norm1 = RMSNorm(d, cfg.norm_eps, weight=affine, dtype=_F32, param_dtype=param_dtype)
        self.norm2 = RMSNorm(d, cfg.norm_eps, weight=affine, dtype=_F32, param_dtype=param_dtype)
        # diffusers LTXAttention + LTXVideoAttnProcessor: q and k RMS-normalised over all heads
        # (eps 1e-5), then rotated by one RoPE table over the whole width, then split into heads.
        attn = AttentionConfig(
            d,
            cfg.num_attention_heads,
            cfg.attention_head_dim,
            bias=cfg.attention_bias,
            out_bias=cfg.attention_out_bias,
            qk_norm="rms",
            qk_norm_eps=QK_NORM_EPS,
            rope="interleaved",
            rope_full_width=True,
        )
        self.attn1 = Attention(attn, attention, dtype, param_dtype, rngs, mesh)
        self.attn2 = Attention(
            dataclasses.replace(attn, kv_dim=cfg.cross_attention_dim), attention, dtype, param_dtype, rngs, mesh
        )
        self.ff = FeedForward(d, 4 * d, d, cfg.activation_fn, dtype, param_dtype, rngs)
        self.scale_shift_table = nnx.Param(jax.random.normal(rngs.params(), (6, d), _F32) / math.sqrt(d))

    def __call__(self, x, context, kv_mask, mod, rope, valid_length=None):
        """One block.

        Args:
            x: residual stream ``(B, L', D)``.
            context: projected text ``(B, L, D)``, compute dtype.
            kv_mask: ``(B, L)`` int32 text key mask or None.
            mod: time modulation ``(B, 1 or L', 6, D)``, compute dtype.
            rope: ``(cos, sin)`` each ``(B, L', D/2)`` float32.
            valid_length: tokens of ``x`` before it are real, the rest padding (masked as
                self-attention keys); None: all real.

        Returns:
            ``(B, L', D)`` in the residual dtype (``residual_dtype``, or the compute dtype).
        """
        res_dtype = self.residual_dtype or self.dtype
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = table_modulation(
            self.scale_shift_table[...], mod
        )

        h = modulate(self.norm1(x), shift_msa, scale_msa, self.dtype)
        x = gated_add(x, self.attn1(h, rope=rope, mask=AttentionMask(valid_length)), gate_msa, res_dtype)

        a = self.attn2(x.astype(self.dtype), context, mask=AttentionMask(kv_mask=kv_mask))
        x = gated_add(x, a, None, res_dtype)

        h = modulate(self.norm2(x), shift_mlp, scale_mlp, self.dtype)
        return gated_add(x, self.ff(h), gate_mlp, res_dtype)


@block_inputs
class LTXBlockInputs:
    """What the blocks and the head read (from :meth:`LTXVideoTransformer3DModel.embed`).

    Attributes:
        context: projected text ``(B, L, D)``, compute dtype.
        kv_mask: ``(B, L)`` int32 text key mask (1 attended), or None (all attended).
        mod: time modulation ``(B, 1 or N', 6, D)``, compute dtype.
        rope: ``(cos, sin)``, each ``(B, N', D/2)`` float32.
        temb: timestep embedding ``(B, 1 or N, D)``, compute dtype (the head's modulation).
        valid_length: static; real tokens when ``N'`` is padded, else None.
        n_tok: static; real video tokens N.
    """

    context: jax.Array
    kv_mask: jax.Array | None
    mod: jax.Array
    rope: tuple
    temb: jax.Array
    valid_length: int | None = static()
    n_tok: int = static()


# ---------------------------------------------------------------------------------------------
# Model


class LTXVideoTransformer3DModel(DiffusionTransformer):
    """The LTX-Video 0.9.x denoising transformer; follows ``diffusers.LTXVideoTransformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`~vidax.models.ltx.config.LTXTransformerConfig`). Call
    ``model(hidden_states, encoder_hidden_states, timestep, encoder_attention_mask, num_frames,
    height, width, rope_interpolation_scale=None, video_coords=None)`` (see :meth:`embed`).
    """

    block_stacks = ("transformer_blocks",)

    def build(self, cfg: LTXTransformerConfig, param_dtype, attention, rngs):
        dtype, d = self.dtype, cfg.inner_dim
        self.proj_in = linear(cfg.in_channels, d, dtype, param_dtype, rngs)
        self.scale_shift_table = nnx.Param(jax.random.normal(rngs.params(), (2, d), _F32) / math.sqrt(d))
        self.time_embed = AdaLayerNormSingle(d, 6, dtype, param_dtype, rngs)
        self.caption_projection = TextProjection(cfg.caption_channels, d, dtype, param_dtype, rngs)
        self.transformer_blocks = stacked(
            lambda r: LTXVideoTransformerBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_layers,
            rngs,
        )
        self.norm_out = LayerNorm(d, OUT_NORM_EPS, False)
        self.proj_out = linear(d, cfg.out_dim, dtype, param_dtype, rngs)

    def embed(
        self,
        hidden_states: jax.Array,
        encoder_hidden_states: jax.Array,
        timestep: jax.Array,
        encoder_attention_mask: jax.Array | None = None,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        rope_interpolation_scale: Sequence | None = None,
        video_coords: jax.Array | None = None,
    ) -> tuple[jax.Array, LTXBlockInputs]:
        """Everything before the blocks: ``proj_in``, timestep / caption embeddings, RoPE, mask.

        Args:
            hidden_states: packed latents ``(B, N, C_in)``, tokens in frame, row, column order
                (``LTXPipeline._pack_latents``), float.
            encoder_hidden_states: T5 states ``(B, L, caption_channels)``, float.
            timestep: diffusion time in [0, 1000] (not sigma), float or int: ``(B,)`` or
                ``(B, 1)`` one per sample, or ``(B, N)`` one per token.
            encoder_attention_mask: ``(B, L)`` 0/1 (int or bool) text mask, 1 = real token; None:
                every text token attended.
            num_frames, height, width: Python ints, the latent grid ``(T, H, W)`` with
                ``T·H·W == N`` (static: they shape the RoPE grid); needed when ``video_coords``
                is None, ignored otherwise.
            rope_interpolation_scale: ``(s_t, s_h, s_w)`` numbers or scalar arrays: the RoPE
                coordinates are ``index · s · patch / base`` (the pipeline passes
                ``(vae_temporal_compression / frame_rate, vae_spatial_compression,
                vae_spatial_compression)``); None: raw indices (as the reference).
            video_coords: ``(B, 3, N)`` float explicit coordinates (frame time in seconds, row
                and column in pixels; ``LTXConditionPipeline``), or None.

        Returns:
            The residual stream ``(B, N', D)`` in the residual dtype (``N'``: the tokens padded
            to a multiple of the mesh's ``sequence`` axis) and the :class:`LTXBlockInputs` every
            block and :meth:`head` read. The model call returns the flow ``(B, N, C_out)`` in
            the compute dtype.

        Raises:
            InputError: shapes that do not fit the config or each other.
        """
        cfg = self.config
        self._check_inputs(
            hidden_states,
            encoder_hidden_states,
            timestep,
            encoder_attention_mask,
            num_frames,
            height,
            width,
            video_coords,
        )
        b, n_tok = hidden_states.shape[:2]

        if video_coords is None:
            coords = grid_coords(
                b, (num_frames, height, width), rope_interpolation_scale, cfg.patch_size, cfg.patch_size_t
            )
        else:
            coords = video_coords_to_grid(video_coords)
        rope = ltx_rope(coords, cfg.inner_dim)  # (B, N, D/2) each

        x = self.proj_in(hidden_states.astype(self.dtype))  # (B, N, D)
        mod, temb = self.time_embed(timestep.reshape(b, -1), self.dtype)  # (B, S, 6, D), (B, S, D)
        context = self.caption_projection(encoder_hidden_states.astype(self.dtype))
        kv_mask = None
        if encoder_attention_mask is not None:
            kv_mask = (jnp.asarray(encoder_attention_mask) != 0).astype(jnp.int32)
            # An all-zero mask is a uniform bias in the reference: every key attended.
            kv_mask = jnp.where(kv_mask.any(axis=1, keepdims=True), kv_mask, 1)

        # Sequence parallelism: tokens (and per-token tables) padded to a multiple of the
        # sequence axis; the padded keys are masked, the padded outputs dropped in head().
        length, valid_length = self.sequence_length(n_tok)
        x = pad_tokens(x, length)
        rope = tuple(pad_tokens(r, length) for r in rope)
        if mod.shape[1] > 1:
            mod = pad_tokens(mod, length)

        return self.stream(x), LTXBlockInputs(context, kv_mask, mod, rope, temb, valid_length, n_tok)

    def run_block(self, block: LTXVideoTransformerBlock, x: jax.Array, inputs: LTXBlockInputs) -> jax.Array:
        i = inputs
        return block(x, i.context, i.kv_mask, i.mod, i.rope, i.valid_length)

    def head(self, x: jax.Array, inputs: LTXBlockInputs) -> jax.Array:
        """Everything after the blocks: drop the padding, modulated output norm, ``proj_out``.
        ``x`` ``(B, N', D)`` -> ``(B, N, C_out)`` in the compute dtype."""
        x = x[:, : inputs.n_tok]
        shift, scale = table_modulation(self.scale_shift_table[...], inputs.temb[:, :, None])
        x = modulate(self.norm_out(x, _F32), shift, scale, self.dtype)
        return self.proj_out(x)

    def _check_inputs(self, x, text, timestep, mask, num_frames, height, width, video_coords) -> None:
        cfg = self.config
        name = type(self).__name__
        if x.ndim != 3 or x.shape[-1] != cfg.in_channels:
            raise InputError(
                f"{name}: hidden_states must be packed tokens (B, N, C={cfg.in_channels}); got shape {tuple(x.shape)}."
            )
        b, n_tok, _ = x.shape
        if tuple(timestep.shape) not in ((b,), (b, 1), (b, n_tok)):
            raise InputError(
                f"{name}: timestep must have shape (B,)=({b},), (B, 1) or (B, N)=({b}, {n_tok}) (one per "
                f"token); got {tuple(timestep.shape)}."
            )
        self.check_text(text, b, cfg.caption_channels, "caption_channels=", "L")
        if mask is not None and tuple(mask.shape) != tuple(text.shape[:2]):
            raise InputError(
                f"{name}: encoder_attention_mask must be (B, L)={tuple(text.shape[:2])} like "
                f"encoder_hidden_states; got {tuple(mask.shape)}."
            )
        if video_coords is not None:
            if tuple(video_coords.shape) != (b, 3, n_tok):
                raise InputError(
                    f"{name}: video_coords must be (B, 3, N)=({b}, 3, {n_tok}); got {tuple(video_coords.shape)}."
                )
            return
        grid = (num_frames, height, width)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in grid):
            raise InputError(
                f"{name}: without video_coords, num_frames, height and width must be positive Python "
                f"ints (the latent grid); got {grid!r}."
            )
        if math.prod(grid) != n_tok:
            raise InputError(
                f"{name}: num_frames*height*width={math.prod(grid)} (from {grid}) must equal the "
                f"{n_tok} tokens of hidden_states."
            )
