"""Wan 2.1 / 2.2 diffusion transformer (``diffusers.WanTransformer3DModel``) in Flax NNX.

Reads top to bottom like the reference::

    latents (B, T, H, W, C_in) ──patch_embedding──> tokens (B, L, D)        L = T/p_t · H/p_h · W/p_w
    timestep (B,) or (B, L) ──sinusoid──time_embedder──> temb ──SiLU──time_proj──> 6 modulations
    text (B, L_txt, D_text) ──text_embedder──> context (B, L_txt, D)
    [image (B, L_img, D_img) ──image_embedder──> image context (B, L_img, D)]            (I2V)
    blocks × num_layers (stacked, run with a scan):
        x += gate_msa · self_attn(LN(x)·(1+scale_msa)+shift_msa, 3-D RoPE)
        x += cross_attn(LN₂(x), context [+ image context])
        x += c_gate · ffn(LN(x)·(1+c_scale)+c_shift)
    LN(x)·(1+scale)+shift ──proj_out──unpatchify──> (B, T, H, W, C_out)

Precision follows the reference's casts: the parameters of ``time_embedder``, ``scale_shift_table``
and ``norm1/2/3`` stay float32 (its ``_keep_in_fp32_modules``, see
:func:`vidax.models.wan.convert.transformer_policy`); the timestep MLP runs in float32, its
output is rounded to the compute dtype (``.type_as``); modulation arithmetic (table + temb,
``LN(x)·(1+scale)+shift``, gated residual adds) is float32; the RoPE rotation, softmax and norm
statistics are float32. The residual stream between
operations is held in ``residual_dtype``: float32 by default (as the original Wan code, where the
residual is fp32 under autocast); ``residual_dtype=None`` rounds it to the compute dtype after
every add, which is what diffusers does when the model is cast to bf16.

Parameter paths mirror the diffusers state dict (``blocks.3.attn1.to_q.weight`` ->
``blocks/attn1/to_q/kernel`` with a leading layer axis), so the loader
(:func:`vidax.models.wan.convert.load_transformer`) maps keys by rule.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import gated_add, modulate, table_modulation
from vidax.blocks.transformer import DiffusionTransformer, block_inputs, shared, static
from vidax.errors import InputError
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.rope import wan_rope
from vidax.nn.layers import (
    FeedForward,
    LayerNorm,
    PatchEmbedding,
    TextProjection,
    TimestepEmbedding,
    linear,
    timestep_sinusoid,
    unpatchify,
)
from vidax.nn.stack import stacked
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32


# ---------------------------------------------------------------------------------------------
# Embeddings


class WanImageEmbedding(nnx.Module):
    """diffusers ``WanImageEmbedding``: ``norm2(ff(norm1(x [+ pos_embed])))`` for CLIP features.

    ``norm1``/``norm2`` are affine FP32 LayerNorms (eps 1e-5, the ``FP32LayerNorm`` default), ``ff``
    a ``FeedForward(mult=1, gelu)``. With ``pos_embed`` ``(1, P, E)`` (FLF2V), the input
    ``(B', S, E)`` is regrouped to ``(B'·S / P, P, E)`` with ``P = 2S`` before the addition.
    """

    def __init__(self, cin, dim, pos_embed_seq_len, dtype, param_dtype, rngs):
        self.dtype = dtype
        self.norm1 = LayerNorm(cin, 1e-5, True)
        self.ff = FeedForward(cin, cin, dim, False, dtype, param_dtype, rngs)
        self.norm2 = LayerNorm(dim, 1e-5, True)
        self.pos_embed = (
            nnx.Param(jnp.zeros((1, pos_embed_seq_len, cin), param_dtype)) if pos_embed_seq_len is not None else None
        )

    def __call__(self, x):
        x = x.astype(self.dtype)
        if self.pos_embed is not None:
            _, s, e = x.shape
            x = x.reshape(-1, 2 * s, e) + self.pos_embed[...].astype(self.dtype)
        return self.norm2(self.ff(self.norm1(x, self.dtype)), self.dtype)


class WanTimeTextImageEmbedding(nnx.Module):
    """diffusers ``WanTimeTextImageEmbedding``: timestep MLP + 6-way modulation, text / image MLPs."""

    def __init__(self, cfg: WanTransformerConfig, dtype, param_dtype, rngs):
        d = cfg.inner_dim
        self.freq_dim = cfg.freq_dim
        self.time_embedder = TimestepEmbedding(cfg.freq_dim, d, rngs)
        self.time_proj = linear(d, 6 * d, dtype, param_dtype, rngs)
        self.text_embedder = TextProjection(cfg.text_dim, d, dtype, param_dtype, rngs)
        self.image_embedder = (
            WanImageEmbedding(cfg.image_dim, d, cfg.pos_embed_seq_len, dtype, param_dtype, rngs)
            if cfg.image_dim is not None
            else None
        )

    def time(self, timestep: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
        """``timestep`` ``(B, S)`` -> ``temb`` ``(B, S, D)`` and modulation ``(B, S, 6, D)``, in ``dtype``."""
        temb = self.time_embedder(timestep_sinusoid(timestep, self.freq_dim)).astype(dtype)
        mod = self.time_proj(jax.nn.silu(temb))
        return temb, mod.reshape(*mod.shape[:-1], 6, -1)


# ---------------------------------------------------------------------------------------------
# Transformer block


class WanTransformerBlock(nnx.Module):
    """diffusers ``WanTransformerBlock``: modulated self-attention, cross-attention, modulated FFN."""

    def __init__(self, cfg: WanTransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.norm1 = LayerNorm(d, cfg.eps, False)
        # diffusers WanAttention: q and k RMS-normalised over all heads together; the I2V image
        # keys / values (add_k_proj, add_v_proj, norm_added_k) attended separately and summed.
        attn = AttentionConfig(d, cfg.num_attention_heads, cfg.attention_head_dim, qk_norm="rms", qk_norm_eps=cfg.eps)
        self.attn1 = Attention(dataclasses.replace(attn, rope="interleaved"), attention, dtype, param_dtype, rngs, mesh)
        added = dict(added="image_kv", added_kv_dim=cfg.added_kv_proj_dim) if cfg.added_kv_proj_dim else {}
        self.attn2 = Attention(dataclasses.replace(attn, **added), attention, dtype, param_dtype, rngs, mesh)
        self.norm2 = LayerNorm(d, cfg.eps, True) if cfg.cross_attn_norm else None
        self.ffn = FeedForward(d, cfg.ffn_dim, d, True, dtype, param_dtype, rngs)
        self.norm3 = LayerNorm(d, cfg.eps, False)
        self.scale_shift_table = nnx.Param(jax.random.normal(rngs.params(), (1, 6, d), _F32) / math.sqrt(d))

    def __call__(self, x, context, mod, rope, context_img=None, valid_length=None, causal_block=None):
        """One block.

        Args:
            x: residual stream ``(B, L, D)``.
            context: text context ``(B, L_txt, D)`` in the compute dtype.
            mod: time modulation ``(B, 1 or L, 6, D)`` in the compute dtype.
            rope: ``(cos, sin)`` each ``(L, K/2)`` float32.
            context_img: image context ``(B, L_img, D)`` or ``None``.
            valid_length: tokens of ``x`` before it are real, the rest padding (masked as
                self-attention keys); ``None``: all real.
            causal_block: static; block-causal self-attention over blocks of this many tokens
                (SkyReels-V2's diffusion forcing; single device), or ``None``: full attention.

        Returns:
            ``(B, L, D)`` in the residual dtype (``residual_dtype``, or the compute dtype).
        """
        res_dtype = self.residual_dtype or self.dtype
        shift_msa, scale_msa, gate_msa, c_shift, c_scale, c_gate = table_modulation(self.scale_shift_table[...], mod)

        h = modulate(self.norm1(x, _F32), shift_msa, scale_msa, self.dtype)
        mask = AttentionMask(valid_length, causal=causal_block is not None, causal_block=causal_block or 1)
        x = gated_add(x, self.attn1(h, rope=rope, mask=mask), gate_msa, res_dtype)

        h = self.norm2(x, self.dtype) if self.norm2 is not None else x.astype(self.dtype)
        x = gated_add(x, self.attn2(h, context, image=context_img), None, res_dtype)

        h = modulate(self.norm3(x, _F32), c_shift, c_scale, self.dtype)
        return gated_add(x, self.ffn(h), c_gate, res_dtype)


@block_inputs
class WanBlockInputs:
    """What the blocks and the head read (from :meth:`WanTransformer3DModel.embed`).

    Attributes:
        context: text context ``(B, L_txt, D)`` (image tokens in front when the model has no
            added k/v projections), compute dtype.
        mod: time modulation ``(B, 1 or L', 6, D)``, compute dtype.
        rope: ``(cos, sin)``, each ``(L', K/2)`` float32.
        temb: time embedding ``(B, 1 or L', D)``, compute dtype (the head's modulation).
        context_img: image context ``(B, L_img, D)`` or None.
        valid_length: static; real tokens when ``L'`` is padded, else None.
        n_tok: static; real video tokens ``L``.
        grid: static; the token grid ``(T/p_t, H/p_h, W/p_w)``.
    """

    context: jax.Array
    mod: jax.Array
    rope: tuple = shared()
    temb: jax.Array
    context_img: jax.Array | None
    valid_length: int | None = static()
    n_tok: int = static()
    grid: tuple = static()


# ---------------------------------------------------------------------------------------------
# Model


class WanTransformer3DModel(DiffusionTransformer):
    """The Wan diffusion transformer; follows ``diffusers.WanTransformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`WanTransformerConfig`). Call ``model(hidden_states,
    timestep, encoder_hidden_states, encoder_hidden_states_image)`` (see :meth:`embed`).
    """

    block_stacks = ("blocks",)

    def build(self, cfg: WanTransformerConfig, param_dtype, attention, rngs):
        build_wan_modules(self, cfg, param_dtype, attention, rngs)

    def embed(
        self,
        hidden_states: jax.Array,
        timestep: jax.Array,
        encoder_hidden_states: jax.Array,
        encoder_hidden_states_image: jax.Array | None = None,
    ) -> tuple[jax.Array, WanBlockInputs]:
        """Everything before the blocks: patch embedding, time / text / image embeddings, RoPE.

        Args:
            hidden_states: latents ``(B, T, H, W, C_in)`` channels-last; T, H, W divisible by
                ``patch_size``.
            timestep: ``(B,)`` diffusion time in [0, 1000] (not sigma), or ``(B, L)`` one per
                token (Wan2.2 TI2V ``expand_timesteps``), ``L = T/p_t · H/p_h · W/p_w`` in
                frame, row, column order. Float or int.
            encoder_hidden_states: text-encoder states ``(B, L_txt, text_dim)``.
            encoder_hidden_states_image: CLIP image features ``(B, L_img, image_dim)`` (I2V) or
                ``None``. Passed separately: the reference concatenates them in front of the text
                and splits them off again at ``L_txt - 512`` (it assumes 512 text tokens); here
                any text length works.

        Returns:
            The residual stream ``(B, L', D)`` in the residual dtype (``L'``: the video tokens
            padded to a multiple of the mesh's ``sequence`` axis) and the :class:`WanBlockInputs`
            every block and :meth:`head` read. The model call returns ``(B, T, H, W, C_out)`` in
            the compute dtype.

        Raises:
            InputError: shapes that do not fit the config.
        """
        cfg = self.config
        grid = self._check_inputs(hidden_states, timestep, encoder_hidden_states, encoder_hidden_states_image)
        b = hidden_states.shape[0]

        rope = wan_rope(cfg.attention_head_dim, grid, cfg.rope_max_seq_len)
        x = self.patch_embedding(hidden_states)  # (B, L, D)

        ts = timestep.reshape(b, -1)  # (B, 1) or (B, L)
        temb, mod = self.condition_embedder.time(ts, self.dtype)  # (B, S, D), (B, S, 6, D)
        context = self.condition_embedder.text_embedder(encoder_hidden_states.astype(self.dtype))
        n_tok = x.shape[1]
        x, rope, mod, valid_length = wan_sequence_padding(self, x, rope, mod)
        context, context_img = wan_image_context(self, context, encoder_hidden_states_image)
        return self.stream(x), WanBlockInputs(context, mod, rope, temb, context_img, valid_length, n_tok, grid)

    def run_block(self, block: WanTransformerBlock, x: jax.Array, inputs: WanBlockInputs) -> jax.Array:
        i = inputs
        return block(x, i.context, i.mod, i.rope, i.context_img, i.valid_length)

    def head(self, x: jax.Array, inputs: WanBlockInputs) -> jax.Array:
        """Everything after the blocks (:func:`wan_head`)."""
        return wan_head(self, x, inputs)

    def _check_inputs(self, x, timestep, text, image) -> tuple[int, int, int]:
        grid = check_wan_inputs(self, x, text, image)
        b = x.shape[0]
        n_tok = math.prod(grid)
        if tuple(timestep.shape) not in ((b,), (b, n_tok)):
            raise InputError(
                f"{type(self).__name__}: timestep must have shape (B,)=({b},) or (B, L)=({b}, {n_tok}) (one per "
                f"token); got {tuple(timestep.shape)}."
            )
        return grid


def build_wan_modules(model: DiffusionTransformer, cfg: WanTransformerConfig, param_dtype, attention, rngs) -> None:
    """The modules of the Wan layout on ``model`` (``dtype``, ``residual_dtype`` and ``mesh`` set):
    ``patch_embedding``, ``condition_embedder``, the stacked ``blocks``, ``norm_out``, ``proj_out``
    and the output ``scale_shift_table``, with the reference's parameter paths."""
    dtype, d, p = model.dtype, cfg.inner_dim, tuple(cfg.patch_size)
    model.patch_embedding = PatchEmbedding(p, cfg.in_channels, d, dtype, param_dtype, rngs)
    model.condition_embedder = WanTimeTextImageEmbedding(cfg, dtype, param_dtype, rngs)
    model.blocks = stacked(
        lambda r: WanTransformerBlock(cfg, attention, dtype, model.residual_dtype, param_dtype, r, model.mesh),
        cfg.num_layers,
        rngs,
    )
    model.norm_out = LayerNorm(d, cfg.eps, False)
    model.proj_out = linear(d, cfg.out_dim * math.prod(p), dtype, param_dtype, rngs)
    model.scale_shift_table = nnx.Param(jax.random.normal(rngs.params(), (1, 2, d), _F32) / math.sqrt(d))


def wan_sequence_padding(model: DiffusionTransformer, x: jax.Array, rope: tuple, mod: jax.Array) -> tuple:
    """Sequence parallelism: ``(x, rope, mod, valid_length)``, the tokens ``x (B, L, D)`` and the
    per-token tables (the RoPE ``(L, K)`` pair, a per-token ``mod``) padded to ``model``'s
    sequence length (a multiple of the mesh's ``sequence`` axis; the padded keys are masked, the
    padded outputs dropped in the head); ``valid_length``: the real tokens when padded, else None."""
    length, valid_length = model.sequence_length(x.shape[1])
    x = pad_tokens(x, length)
    rope = tuple(pad_tokens(r, length, axis=0) for r in rope)
    if mod.shape[1] > 1:
        mod = pad_tokens(mod, length)
    return x, rope, mod, valid_length


def wan_image_context(model: DiffusionTransformer, context: jax.Array, image: jax.Array | None):
    """The text context and the image context of a Wan-layout ``model``'s cross-attention.

    Args:
        context: embedded text ``(B, L_txt, D)``.
        image: CLIP features ``(B, L_img, image_dim)`` or None.

    Returns:
        ``(context, context_img)``: with the added image key / value projections the embedded
        image apart ``(B, L_img, D)``; without them (the reference attends to image and text tokens
        alike) the image tokens in front of the text and None; without an image, the text and None.
    """
    if image is None:
        return context, None
    context_img = model.condition_embedder.image_embedder(image)
    if model.config.added_kv_proj_dim is None:
        return jnp.concatenate([context_img, context], axis=1), None
    return context, context_img


def wan_head(model: DiffusionTransformer, x: jax.Array, inputs) -> jax.Array:
    """The Wan output head of ``model`` (a Wan-layout transformer: ``norm_out``, ``proj_out``,
    ``scale_shift_table`` ``(1, 2, D)``, ``config.patch_size``): drop the padding, modulated output
    norm, ``proj_out``, unpatchify.

    Args:
        x: ``(B, L', D)`` residual stream.
        inputs: block inputs with ``temb`` ``(B, 1 or L, D)``, ``n_tok`` and ``grid``.

    Returns:
        ``(B, T, H, W, C_out)`` in the model's compute dtype.
    """
    x = x[:, : inputs.n_tok]
    shift, scale = table_modulation(model.scale_shift_table[...], inputs.temb[:, :, None])
    x = modulate(model.norm_out(x, _F32), shift, scale, model.dtype)
    x = model.proj_out(x)
    return unpatchify(x, inputs.grid, tuple(model.config.patch_size))


def check_wan_inputs(model: DiffusionTransformer, x, text, image) -> tuple[int, int, int]:
    """The latents, text and image checks of a Wan-layout transformer's call (its config as
    :class:`WanTransformerConfig`); returns the token grid ``(T/p_t, H/p_h, W/p_w)``.

    Raises:
        InputError: latents, text or image features that do not fit the config.
    """
    cfg = model.config
    name = type(model).__name__
    grid = model.check_latents(x, cfg.in_channels, tuple(cfg.patch_size))
    b = x.shape[0]
    model.check_text(text, b, cfg.text_dim, "text_dim=", "L")
    if image is not None:
        if cfg.image_dim is None:
            raise InputError(
                f"{name}: encoder_hidden_states_image was given but this checkpoint has no "
                "image embedder (image_dim is null)."
            )
        per = 2 if cfg.pos_embed_seq_len is not None else 1
        ok = image.ndim == 3 and image.shape[-1] == cfg.image_dim
        if ok and per == 2:
            ok = 2 * image.shape[1] == cfg.pos_embed_seq_len and image.shape[0] == 2 * b
        elif ok:
            ok = image.shape[0] == b
        if not ok:
            want = (
                f"({2 * b}, {cfg.pos_embed_seq_len // 2}, {cfg.image_dim}) (two images per "
                "sample, as the reference's pos_embed regrouping needs)"
                if per == 2
                else f"({b}, L_img, {cfg.image_dim})"
            )
            raise InputError(f"{name}: encoder_hidden_states_image must be {want}; got {tuple(image.shape)}.")
    return grid
