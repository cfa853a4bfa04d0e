"""Cosmos-Predict2.5 diffusion transformer (``diffusers.CosmosTransformer3DModel``) in Flax NNX.

Follows diffusers 0.42.1 ``models/transformers/transformer_cosmos.py`` top to bottom::

    latents (B, T, H, W, C) ++ condition mask (B, T, H, W, 1) ++ padding mask (resized, 1 channel)
        ──patch_embed (linear over (C, p_t, p_h, p_w) patches)──> tokens (B, L, D)
    timestep (B,) or per latent frame (B, T) ──sinusoid (D)──┬─ t_embedder ─> temb (B, S, 3D)
                                                             └─ RMSNorm ───> emb  (B, S, D)
    text (B, L_txt, crossattn_proj_in_channels) ──crossattn_proj (Linear + GELU)──> context
    blocks × num_layers (stacked, run with a scan):
        [x += learnable position embedding]                      (extra_pos_embed_type)
        x += gate · self_attn(AdaLN-LoRA(x), per-head QK-RMSNorm, rotate-half 3-D RoPE)
        x += gate · cross_attn(AdaLN-LoRA(x), context)
        x += gate · ffn(AdaLN-LoRA(x))                           (GELU, no biases)
    AdaLN-LoRA(x) ──proj_out──unpatchify ((p_h, p_w, p_t, C) channel order)──> (B, T, H, W, C_out)

AdaLN-LoRA (``CosmosAdaLayerNormZero``): ``shift, scale, gate = linear_2(linear_1(silu(emb))) +
temb``; ``LN(x) * (1 + scale) + shift`` with a non-affine LayerNorm (eps 1e-6). The final
``CosmosAdaLayerNorm`` does the same with two chunks and ``temb[..., :2D]``. With per-frame
timesteps ``S = T`` and each block computes its modulation per frame and gathers it per token
(the reference expands emb / temb to every token first; the rows are the same).

Precision: the timestep sinusoid is rounded to the compute dtype (``.type_as``); modulation
arithmetic and the gated residual adds are float32, the LayerNorm / RMSNorm statistics, RoPE
rotation and softmax float32. The residual stream between operations is held in
``residual_dtype`` (float32 by default; ``None`` = the compute dtype, as diffusers in bf16). The
learnable position embedding is stored float32 (the reference's ``_keep_in_fp32_modules``).

Parameter paths mirror the diffusers state dict (``transformer_blocks.3.attn1.to_q.weight`` ->
``transformer_blocks/attn1/to_q/kernel`` with a leading layer axis), so the loader
(:func:`vidax.models.cosmos.convert.load_transformer`) maps keys by rule.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import AdaLayerNorm, gated_add
from vidax.blocks.transformer import TOKENS, DiffusionTransformer, block_inputs, shared, static
from vidax.errors import InputError
from vidax.models.cosmos.config import CosmosTransformerConfig
from vidax.models.cosmos.rope import cosmos_rope
from vidax.nn.layers import FeedForward, RMSNorm, gelu, linear, matmul, patchify, timestep_sinusoid, unpatchify
from vidax.nn.stack import stacked
from vidax.parallel.rules import constrain
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32
_EPS = 1e-6  # every LayerNorm / RMSNorm of the model except the QK norms
_QK_EPS = 1e-5  # diffusers ``Attention(qk_norm="rms_norm")`` default eps


# ---------------------------------------------------------------------------------------------
# Embeddings


class CosmosPatchEmbed(nnx.Module):
    """diffusers ``CosmosPatchEmbed``: a bias-free linear over ``(C, p_t, p_h, p_w)`` patches.

    ``proj.kernel`` is ``(C·p_t·p_h·p_w, D)`` in the checkpoint's feature order (C slowest); the
    patchified input is ``(p_t, p_h, p_w, C)``-ordered, so the kernel rows are reordered at use.
    Input ``(B, T, H, W, C)`` -> tokens ``(B, L, D)`` in frame, row, column order.
    """

    def __init__(self, patch, cin, dim, dtype, param_dtype, rngs):
        self.patch = tuple(patch)
        self.cin = cin
        self.dtype = dtype
        self.proj = linear(cin * math.prod(patch), dim, dtype, param_dtype, rngs, use_bias=False)

    def __call__(self, x: jax.Array) -> jax.Array:
        cols = patchify(x, self.patch)  # (B, L, P·C), features (p_t, p_h, p_w, C)
        k = self.proj.dense_kernel()
        kernel = k.reshape(self.cin, -1, k.shape[-1]).transpose(1, 0, 2).reshape(k.shape)
        return matmul("blc,cd->bld", cols, kernel, self.dtype)


class CosmosTimestepEmbedding(nnx.Module):
    """diffusers ``CosmosTimestepEmbedding``: ``linear_2(silu(linear_1(x)))``, D -> D -> 3D, no biases."""

    def __init__(self, dim, dtype, param_dtype, rngs):
        self.linear_1 = linear(dim, dim, dtype, param_dtype, rngs, use_bias=False)
        self.linear_2 = linear(dim, 3 * dim, dtype, param_dtype, rngs, use_bias=False)

    def __call__(self, x):
        return self.linear_2(jax.nn.silu(self.linear_1(x)))


class CosmosEmbedding(nnx.Module):
    """diffusers ``CosmosEmbedding``: sinusoid -> (``t_embedder`` (3D), ``norm`` (RMSNorm, D))."""

    def __init__(self, dim, dtype, param_dtype, rngs):
        self.dim = dim
        self.dtype = dtype
        self.t_embedder = CosmosTimestepEmbedding(dim, dtype, param_dtype, rngs)
        self.norm = RMSNorm(dim, _EPS, param_dtype=param_dtype)

    def __call__(self, timestep: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``timestep`` ``(B, S)`` -> ``temb`` ``(B, S, 3D)``, ``embedded_timestep`` ``(B, S, D)``."""
        proj = timestep_sinusoid(timestep, self.dim).astype(self.dtype)  # the reference's .type_as
        return self.t_embedder(proj), self.norm(proj)


class CosmosLearnablePositionalEmbed(nnx.Module):
    """diffusers ``CosmosLearnablePositionalEmbed``: ``pos_emb_t[t] + pos_emb_h[h] + pos_emb_w[w]``
    per token, divided by ``eps + |e| / sqrt(D)`` (its ``vector_norm`` scaled by
    ``sqrt(numel(norm) / numel(e))``), in float32."""

    def __init__(self, dim, grid_max, rngs):
        self.pos_emb_t = nnx.Param(jax.random.normal(rngs.params(), (grid_max[0], dim), _F32))
        self.pos_emb_h = nnx.Param(jax.random.normal(rngs.params(), (grid_max[1], dim), _F32))
        self.pos_emb_w = nnx.Param(jax.random.normal(rngs.params(), (grid_max[2], dim), _F32))

    def __call__(self, grid: tuple[int, int, int]) -> jax.Array:
        """``(L, D)`` float32 for the patch grid ``(t, h, w)`` (each within the tables)."""
        t, h, w = grid
        e = (
            self.pos_emb_t[:t].astype(_F32)[:, None, None]
            + self.pos_emb_h[:h].astype(_F32)[None, :, None]
            + self.pos_emb_w[:w].astype(_F32)[None, None, :]
        ).reshape(t * h * w, -1)
        norm = jnp.sqrt(jnp.square(e).sum(axis=-1, keepdims=True))
        return e / (_EPS + norm * np.float32(math.sqrt(1.0 / e.shape[-1])))


# ---------------------------------------------------------------------------------------------
# Transformer block


@block_inputs
class CosmosBlockInputs:
    """What the blocks and the head read (from :meth:`CosmosTransformer3DModel.embed`).

    Attributes:
        context: cross-attention context ``(B, L_txt, text_embed_dim)``, compute dtype.
        emb: embedded timestep ``(B, S, D)`` (``S`` = 1, or T latent frames), compute dtype.
        temb: timestep embedding ``(B, S, 3D)``, compute dtype.
        rope: ``(cos, sin)``, each ``(L', K/2)`` float32.
        pos: learnable position embedding ``(L', D)`` float32, or None.
        valid_length: static; real tokens when ``L'`` is padded, else None.
        n_tok: static; real video tokens ``L``.
        grid: static; the token grid ``(T/p_t, H/p_h, W/p_w)``.
    """

    context: jax.Array
    emb: jax.Array
    temb: jax.Array
    rope: tuple = shared()
    pos: jax.Array | None = shared()
    valid_length: int | None = static()
    n_tok: int = static()
    grid: tuple = static()

    def per_token(self, e: jax.Array) -> jax.Array:
        """A per-frame table ``(B, T, D)`` gathered to the (padded) tokens ``(B, L', D)``; a
        ``(B, 1, D)`` table is returned as it is (it broadcasts)."""
        if e.shape[1] == 1:
            return e
        t, h, w = self.grid
        length = self.rope[0].shape[0]
        frame = np.minimum(np.arange(length) // (h * w), t - 1)  # padded tokens take the last frame
        return jnp.take(e, jnp.asarray(frame, jnp.int32), axis=1)


class CosmosTransformerBlock(nnx.Module):
    """diffusers ``CosmosTransformerBlock`` (without the image context and control branches)."""

    def __init__(self, cfg: CosmosTransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None):
        d, n, k, r = cfg.inner_dim, cfg.num_attention_heads, cfg.attention_head_dim, cfg.adaln_lora_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.mesh = mesh
        # diffusers CosmosAdaLayerNormZero (AdaLN-LoRA): linear_2(linear_1(silu(emb))) + temb ->
        # shift, scale, gate; a non-affine LayerNorm (eps 1e-6).
        ada = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, norm_eps=_EPS, lora_dim=r)
        # diffusers Attention(qk_norm="rms_norm", bias=False, out_bias=False) + CosmosAttnProcessor2_0:
        # per-head RMSNorm of q and k (eps 1e-5), rotate-half RoPE (self-attention only).
        attn = AttentionConfig(
            d, n, k, bias=False, out_bias=False, qk_norm="rms_head", qk_norm_eps=_QK_EPS, rope="rotate_half"
        )
        self.norm1 = AdaLayerNorm(d, d, 3, **ada)
        self.attn1 = Attention(attn, attention, dtype, param_dtype, rngs, mesh)
        self.norm2 = AdaLayerNorm(d, d, 3, **ada)
        self.attn2 = Attention(
            dataclasses.replace(attn, kv_dim=cfg.text_embed_dim), attention, dtype, param_dtype, rngs, mesh
        )
        self.norm3 = AdaLayerNorm(d, d, 3, **ada)
        self.ff = FeedForward(d, cfg.ffn_dim, d, False, dtype, param_dtype, rngs, use_bias=False)

    def __call__(self, x: jax.Array, inputs: CosmosBlockInputs) -> jax.Array:
        """One block: residual stream ``(B, L', D)`` -> ``(B, L', D)`` in the residual dtype."""
        res_dtype = self.residual_dtype or self.dtype
        i = inputs
        if i.pos is not None:
            x = (x.astype(_F32) + i.pos[None]).astype(res_dtype)

        def add(x, y, gate):
            return constrain(gated_add(x, y, gate, res_dtype), TOKENS, self.mesh)

        shift, scale, gate = (i.per_token(e) for e in self.norm1.modulation(i.emb, i.temb))
        x = add(
            x,
            self.attn1(self.norm1(x, shift, scale, self.dtype), rope=i.rope, mask=AttentionMask(i.valid_length)),
            gate,
        )
        shift, scale, gate = (i.per_token(e) for e in self.norm2.modulation(i.emb, i.temb))
        x = add(x, self.attn2(self.norm2(x, shift, scale, self.dtype), i.context), gate)
        shift, scale, gate = (i.per_token(e) for e in self.norm3.modulation(i.emb, i.temb))
        return add(x, self.ff(self.norm3(x, shift, scale, self.dtype)), gate)


# ---------------------------------------------------------------------------------------------
# Model


def _nearest_resize(mask: jax.Array, size: tuple[int, int]) -> jax.Array:
    """``(B, H_m, W_m)`` -> ``(B, H, W)`` nearest-neighbour, as torch ``interpolate(mode="nearest")``
    (torchvision's tensor ``resize(NEAREST)``): source index ``floor(i * (in / out))`` in float32,
    clipped to ``in - 1``."""
    idx = []
    for n_in, n_out in zip(mask.shape[1:], size):
        scale = np.float32(n_in) / np.float32(n_out)
        idx.append(np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64), n_in - 1))
    return mask[:, idx[0]][:, :, idx[1]]


class CosmosTransformer3DModel(DiffusionTransformer):
    """The Cosmos(-Predict2.5) diffusion transformer; follows ``diffusers.CosmosTransformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`CosmosTransformerConfig`). Call ``model(hidden_states,
    timestep, encoder_hidden_states, fps=None, condition_mask=None, padding_mask=None)`` (see
    :meth:`embed`).
    """

    block_stacks = ("transformer_blocks",)

    def build(self, cfg: CosmosTransformerConfig, param_dtype, attention, rngs):
        dtype, d, p = self.dtype, cfg.inner_dim, tuple(cfg.patch_size)
        self.patch_embed = CosmosPatchEmbed(p, cfg.patch_in_channels, d, dtype, param_dtype, rngs)
        self.learnable_pos_embed = (
            CosmosLearnablePositionalEmbed(d, cfg.patch_grid_max, rngs)
            if cfg.extra_pos_embed_type == "learnable"
            else None
        )
        self.time_embed = CosmosEmbedding(d, dtype, param_dtype, rngs)
        self.transformer_blocks = stacked(
            lambda r: CosmosTransformerBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_layers,
            rngs,
        )
        # diffusers CosmosAdaLayerNorm: AdaLN-LoRA with two chunks (shift, scale) and temb[..., :2D].
        self.norm_out = AdaLayerNorm(
            d, d, 2, dtype=dtype, param_dtype=param_dtype, rngs=rngs, norm_eps=_EPS, lora_dim=cfg.adaln_lora_dim
        )
        self.proj_out = linear(d, math.prod(p) * cfg.out_channels, dtype, param_dtype, rngs, use_bias=False)
        self.crossattn_proj = (
            nnx.List(
                [linear(cfg.crossattn_proj_in_channels, cfg.encoder_hidden_states_channels, dtype, param_dtype, rngs)]
            )
            if cfg.use_crossattn_projection
            else None
        )

    def embed(
        self,
        hidden_states: jax.Array,
        timestep: jax.Array,
        encoder_hidden_states: jax.Array,
        fps: float | None = None,
        condition_mask: jax.Array | None = None,
        padding_mask: jax.Array | None = None,
    ) -> tuple[jax.Array, CosmosBlockInputs]:
        """Everything before the blocks: mask channels, patch embedding, time and text
        embeddings, RoPE and the learnable position embedding.

        Args:
            hidden_states: latents ``(B, T, H, W, C)`` channels-last; T, H, W divisible by
                ``patch_size``; ``C = in_channels`` without ``condition_mask``, ``in_channels - 1``
                with it.
            timestep: ``(B,)`` one per sample, or one per latent frame as ``(B, T)`` or the
                reference's ``(B, 1, T, 1, 1)`` (needs ``p_t = 1``). The Predict2.5 pipeline feeds
                the flow sigma in [0, 1] (not x 1000): the noisy frames get ``sigma_t``, the
                conditioning frames ``conditional_frame_timestep`` (1e-4). Float.
            encoder_hidden_states: text states ``(B, L_txt, crossattn_proj_in_channels)`` (with
                ``use_crossattn_projection``: Predict2.5's 28 normalised Qwen2.5-VL layers
                concatenated, 100352) or ``(B, L_txt, text_embed_dim)`` without it.
            fps: frames per second, a static Python number, or None. Given, the RoPE frame
                positions are ``t / fps * 24`` (the reference does the same); None uses the frame
                index, as the Predict2.5 pipeline (which never passes fps).
            condition_mask: ``(B, T, H, W, 1)`` (1 on conditioning frames), concatenated to the
                latents as the reference does when given.
            padding_mask: ``(1 or B, H_m, W_m, 1)`` (the reference's ``(B, 1, H_m, W_m)``
                channels-last; any ``H_m``, ``W_m``: resized nearest to ``(H, W)`` and repeated
                over frames) when ``concat_padding_mask``; None = zeros (what the Predict2.5
                pipeline always passes; the reference itself requires it).

        Returns:
            The residual stream ``(B, L', D)`` in the residual dtype (``L'``: the video tokens
            padded to a multiple of the mesh's ``sequence`` axis) and the
            :class:`CosmosBlockInputs` every block and :meth:`head` read. The model call returns
            the flow ``(B, T, H, W, out_channels)`` in the compute dtype.

        """
        cfg = self.config
        grid, ts = self._check_inputs(hidden_states, timestep, encoder_hidden_states, condition_mask, padding_mask)
        b, t, h, w, _ = hidden_states.shape
        x = hidden_states.astype(self.dtype)
        parts = [x]
        if condition_mask is not None:
            parts.append(condition_mask.astype(self.dtype))
        if cfg.concat_padding_mask:
            if padding_mask is None:
                pad = jnp.zeros((b, t, h, w, 1), self.dtype)
            else:
                m = _nearest_resize(padding_mask[..., 0].astype(self.dtype), (h, w))  # (1 or B, H, W)
                pad = jnp.broadcast_to(m[:, None, :, :, None], (b, t, h, w, 1))
            parts.append(pad)
        x = self.patch_embed(jnp.concatenate(parts, axis=-1))  # (B, L, D)

        rope = cosmos_rope(cfg, grid, fps)
        pos = self.learnable_pos_embed(grid) if self.learnable_pos_embed is not None else None
        temb, emb = self.time_embed(ts)  # (B, S, 3D), (B, S, D)

        context = encoder_hidden_states.astype(self.dtype)
        if self.crossattn_proj is not None:
            context = gelu(self.crossattn_proj[0](context), False)

        # Sequence parallelism: tokens (and per-token tables) padded to a multiple of the
        # sequence axis; the padded keys are masked, the padded outputs dropped in head().
        n_tok = x.shape[1]
        length, valid_length = self.sequence_length(n_tok)
        x = pad_tokens(x, length)
        rope = tuple(pad_tokens(r, length, axis=0) for r in rope)
        if pos is not None:
            pos = pad_tokens(pos, length, axis=0)
        return self.stream(x), CosmosBlockInputs(context, emb, temb, rope, pos, valid_length, n_tok, grid)

    def head(self, x: jax.Array, inputs: CosmosBlockInputs) -> jax.Array:
        """Everything after the blocks: drop the padding, AdaLN-LoRA output norm, ``proj_out``,
        unpatchify. ``x`` ``(B, L', D)`` -> ``(B, T, H, W, C_out)`` in the compute dtype."""
        x = x[:, : inputs.n_tok]
        t, h, w = inputs.grid
        shift, scale = self.norm_out.modulation(inputs.emb, inputs.temb)
        if shift.shape[1] > 1:  # per frame -> per token
            shift, scale = (jnp.repeat(e, h * w, axis=1) for e in (shift, scale))
        x = self.proj_out(self.norm_out(x, shift, scale, self.dtype))  # (B, L, p_h·p_w·p_t·C)
        pt, ph, pw = self.config.patch_size
        b, n = x.shape[:2]
        # The reference's output features are (p_h, p_w, p_t, C); unpatchify takes (p_t, p_h, p_w, C).
        x = x.reshape(b, n, ph, pw, pt, -1).transpose(0, 1, 4, 2, 3, 5).reshape(b, n, -1)
        return unpatchify(x, inputs.grid, (pt, ph, pw))

    def _check_inputs(self, x, timestep, text, condition_mask, padding_mask):
        """Validate the call's shapes; returns the patch grid and the timesteps as ``(B, S)``."""
        cfg = self.config
        name = type(self).__name__
        c_x = cfg.in_channels - (1 if condition_mask is not None else 0)
        with_mask = " (in_channels - 1: the condition mask brings the last)" if condition_mask is not None else ""
        grid = self.check_latents(x, c_x, tuple(cfg.patch_size), with_mask)
        b, t, h, w, _ = x.shape
        if cfg.extra_pos_embed_type == "learnable" and any(g > m for g, m in zip(grid, cfg.patch_grid_max)):
            raise InputError(
                f"{name}: the patch grid {grid} exceeds the learnable position tables {cfg.patch_grid_max} "
                f"(max_size={tuple(cfg.max_size)} / patch_size); use a smaller video."
            )
        if condition_mask is not None and tuple(condition_mask.shape) != (b, t, h, w, 1):
            raise InputError(
                f"{name}: condition_mask must be (B, T, H, W, 1)={(b, t, h, w, 1)}; got {tuple(condition_mask.shape)}."
            )
        if padding_mask is not None:
            if not cfg.concat_padding_mask:
                raise InputError(f"{name}: padding_mask was given but concat_padding_mask is false in the config.")
            if padding_mask.ndim != 4 or padding_mask.shape[0] not in (1, b) or padding_mask.shape[-1] != 1:
                raise InputError(
                    f"{name}: padding_mask must be (1 or B={b}, H_m, W_m, 1); got {tuple(padding_mask.shape)}."
                )
        shape = tuple(timestep.shape)
        if shape == (b,):
            ts = timestep.reshape(b, 1)
        elif shape in ((b, t), (b, 1, t, 1, 1)):
            if cfg.patch_size[0] != 1:
                raise InputError(
                    f"{name}: per-frame timesteps need p_t = 1 (as the reference); patch_size={tuple(cfg.patch_size)}."
                )
            ts = timestep.reshape(b, t)
        else:
            raise InputError(
                f"{name}: timestep must be (B,)=({b},), or one per latent frame (B, T)=({b}, {t}) or "
                f"(B, 1, T, 1, 1); got {shape}."
            )
        self.check_text(text, b, cfg.context_dim, "")
        return grid, ts
