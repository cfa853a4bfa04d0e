"""HunyuanVideo 1.5 diffusion transformer (``diffusers.HunyuanVideo15Transformer3DModel``, 0.42.1).

Reads top to bottom like the reference (``diffusers/models/transformers/transformer_hunyuan_video15.py``)::

    timestep (B,) ──sinusoid(256)──time_embed.timestep_embedder──┐
    timestep_r (B,) ──sinusoid(256)──timestep_embedder_r─────────┴─> temb (B, D)  [use_meanflow only]
    Qwen2.5-VL states (B, L1, D_txt), mask (B, L1) ──context_embedder (token refiner)──> (B, L1, D)
        masked mean ──time_text_embed(timestep)──> refiner temb; proj_in; refiner blocks under
        the self-attention mask m_i & m_j
    byT5 states (B, L2, D_byt5) ──context_embedder_2 (LN, GELU MLP 2048)──> (B, L2, D)
    SigLIP tokens (B, L3, D_img) ──image_embedder (LN, GELU MLP, LN)──> (B, L3, D); an item whose
        image tokens are all zero (T2V) has them zeroed and masked out
    + cond_type_embed[0 | 1 | 2] on the text / glyph / image tokens
    conditioning tokens reordered per item: [valid image, valid byT5, valid text, then the
        invalid ones in the same order] (padded byT5 and text rows zeroed)
    latents (B, T, H, W, C_in) ──x_embedder (Conv3d as patch matmul)──> video tokens (B, L, D)
    transformer_blocks × num_layers (double stream, stacked, scanned): HunyuanVideo 1.0's
        (:class:`vidax.models.hunyuan_video.transformer.DoubleStreamBlock`): per stream AdaLN-zero,
        own q/k/v, per-head RMSNorm, RoPE on the video q/k, one joint attention over
        [video; conditioning], gated residual, modulated GELU-tanh FFN
    video tokens ──norm_out (AdaLN continuous)──proj_out──unpatchify──> (B, T, H, W, C_out)

Masks: after the reorder every item's real conditioning tokens are a prefix of its conditioning
sequence, so the joint attention is the padding form of HunyuanVideo 1.0 (segment ids: real video
tokens and the first ``n_img + sum(mask_2) + sum(mask)`` conditioning tokens of each item), and
the prompts of a batch may have any real lengths. The reference decides "T2V" for the whole call
(``torch.all(image_embeds == 0)``); here each item decides for itself, which is the same for
every batch the reference pipeline runs (one prompt branch per call) and for vidax's CFG batch of
both branches. Padded rows carry values nothing real reads (masked as keys, dropped at the end).

RoPE: HunyuanVideo 1.0's (:func:`vidax.models.hunyuan_video.rope.hunyuan_rope`): the same
``get_1d_rotary_pos_embed(use_real=True)`` tables over the ``(T/p_t, H/p, W/p)`` grid, interleaved
pairs, video tokens only.

Mesh (:mod:`vidax.parallel`), precision and parameter paths: as HunyuanVideo 1.0 (see its module
docstring): heads over ``tensor``, batch over ``data``, Ulysses over ``sequence`` with video and
conditioning tokens each padded to a multiple of it; the token refiner attends locally. The
timestep MLPs, norm statistics, modulation arithmetic, gated residual adds, RoPE and softmax run
in float32; the residual stream is held in ``residual_dtype`` (float32 by default). Paths mirror
the diffusers state dict (``transformer_blocks.3.attn.to_q.weight`` ->
``transformer_blocks/attn/to_q/kernel`` with a leading layer axis); the tables for the loader are
in :mod:`vidax.models.hunyuan_video15.convert`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.blocks.modulation import AdaLayerNorm
from vidax.blocks.transformer import DiffusionTransformer
from vidax.errors import InputError
from vidax.models.hunyuan_video.transformer import (
    DoubleStreamBlock,
    HunyuanBlockInputs,
    TokenRefiner,
    joint_streams,
    video_head,
)
from vidax.models.hunyuan_video15.config import BYT5_PROJECTION_DIM, HunyuanVideo15TransformerConfig
from vidax.nn.layers import LayerNorm, PatchEmbedding, TimestepEmbedding, gelu, linear, timestep_sinusoid
from vidax.nn.stack import stacked

_F32 = jnp.float32
_EPS = 1e-6  # the blocks' and head's norms
_LN_EPS = 1e-5  # torch nn.LayerNorm's default: the glyph and image projections' norms


class TimeEmbedding(nnx.Module):
    """diffusers ``HunyuanVideo15TimeEmbedding``: ``timestep_embedder(sinusoid(t))``, plus
    ``timestep_embedder_r(sinusoid(t_r))`` when ``use_meanflow`` and ``timestep_r`` is given;
    ``Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)`` features, float32."""

    def __init__(self, dim: int, use_meanflow: bool, rngs):
        self.timestep_embedder = TimestepEmbedding(256, dim, rngs)
        self.timestep_embedder_r = TimestepEmbedding(256, dim, rngs) if use_meanflow else None

    def __call__(self, timestep, timestep_r=None):
        """``(B,)`` times (and ``(B,)`` or None) -> ``(B, D)`` float32."""
        temb = self.timestep_embedder(timestep_sinusoid(timestep, 256))
        if timestep_r is not None:
            temb = temb + self.timestep_embedder_r(timestep_sinusoid(timestep_r, 256))
        return temb


class GlyphProjection(nnx.Module):
    """diffusers ``HunyuanVideo15ByT5TextProjection``: ``LayerNorm`` (eps 1e-5), ``linear_1``,
    GELU (erf), ``linear_2``, GELU, ``linear_3`` (hidden width 2048)."""

    def __init__(self, din, dout, dtype, param_dtype, rngs):
        self.dtype = dtype
        self.norm = LayerNorm(din, _LN_EPS, True)
        self.linear_1 = linear(din, BYT5_PROJECTION_DIM, dtype, param_dtype, rngs)
        self.linear_2 = linear(BYT5_PROJECTION_DIM, BYT5_PROJECTION_DIM, dtype, param_dtype, rngs)
        self.linear_3 = linear(BYT5_PROJECTION_DIM, dout, dtype, param_dtype, rngs)

    def __call__(self, x):
        h = gelu(self.linear_1(self.norm(x, self.dtype)), False)
        return self.linear_3(gelu(self.linear_2(h), False))


class ImageProjection(nnx.Module):
    """diffusers ``HunyuanVideo15ImageProjection``: ``norm_in`` (LayerNorm eps 1e-5),
    ``linear_1`` (width kept), GELU (erf), ``linear_2``, ``norm_out`` (LayerNorm eps 1e-5)."""

    def __init__(self, din, dout, dtype, param_dtype, rngs):
        self.dtype = dtype
        self.norm_in = LayerNorm(din, _LN_EPS, True)
        self.linear_1 = linear(din, din, dtype, param_dtype, rngs)
        self.linear_2 = linear(din, dout, dtype, param_dtype, rngs)
        self.norm_out = LayerNorm(dout, _LN_EPS, True)

    def __call__(self, x):
        h = gelu(self.linear_1(self.norm_in(x, self.dtype)), False)
        return self.norm_out(self.linear_2(h), _F32)


class HunyuanVideo15Transformer3DModel(DiffusionTransformer):
    """The HunyuanVideo 1.5 diffusion transformer; follows ``diffusers.HunyuanVideo15Transformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`HunyuanVideo15TransformerConfig`; ``residual_dtype`` is that
    of the video, conditioning and refiner streams; ``attention`` is the joint attention's: the
    token refiner always materialises its short ``L1²`` scores). One block stack over the pair of
    streams ``(video, conditioning)``. Call ``model(hidden_states, timestep, encoder_hidden_states,
    encoder_attention_mask, encoder_hidden_states_2, encoder_attention_mask_2, image_embeds,
    timestep_r=None)`` (see :meth:`embed`).
    """

    block_stacks = ("transformer_blocks",)

    def build(self, cfg: HunyuanVideo15TransformerConfig, param_dtype, attention, rngs):
        dtype = self.dtype
        d = cfg.inner_dim
        self.x_embedder = nnx.Dict(proj=PatchEmbedding(cfg.patch, cfg.in_channels, d, dtype, param_dtype, rngs))
        self.image_embedder = ImageProjection(cfg.image_embed_dim, d, dtype, param_dtype, rngs)
        # HunyuanVideo15TokenRefiner: HunyuanVideo 1.0's refiner without its always-seen first key.
        self.context_embedder = TokenRefiner(cfg, dtype, self.residual_dtype, param_dtype, rngs, first_key=False)
        self.context_embedder_2 = GlyphProjection(cfg.text_embed_2_dim, d, dtype, param_dtype, rngs)
        self.time_embed = TimeEmbedding(d, cfg.use_meanflow, rngs)
        self.cond_type_embed = nnx.Embed(3, d, param_dtype=param_dtype, rngs=rngs)
        self.transformer_blocks = stacked(
            lambda r: DoubleStreamBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_layers,
            rngs,
        )
        # diffusers AdaLayerNormContinuous(elementwise_affine=False, eps=1e-6): scale, shift (scale first).
        self.norm_out = AdaLayerNorm(d, d, 2, dtype=dtype, param_dtype=param_dtype, rngs=rngs, norm_eps=_EPS)
        self.proj_out = linear(d, cfg.out_dim * cfg.patch_size_t * cfg.patch_size**2, dtype, param_dtype, rngs)

    def embed(
        self,
        hidden_states,
        timestep,
        encoder_hidden_states,
        encoder_attention_mask,
        encoder_hidden_states_2,
        encoder_attention_mask_2,
        image_embeds,
        timestep_r=None,
    ) -> tuple[tuple[jax.Array, jax.Array], HunyuanBlockInputs]:
        """Everything before the blocks: RoPE, time embedding, patch embedding, the token refiner,
        the glyph and image projections, the reordered conditioning tokens and their segment ids.

        Args:
            hidden_states: latents ``(B, T, H, W, C_in)`` channels-last (the reference takes
                ``(B, C, T, H, W)``): the noisy latents, the condition latents and the mask
                channel (65 = 32 + 32 + 1), as the reference pipeline concatenates them; T
                divisible by ``patch_size_t``, H and W by ``patch_size``.
            timestep: ``(B,)`` diffusion time in [0, 1000] (not sigma), float or int.
            encoder_hidden_states: Qwen2.5-VL states ``(B, L1, text_embed_dim)`` (template cropped).
            encoder_attention_mask: ``(B, L1)`` 0/1; any real tokens per item, at least one.
            encoder_hidden_states_2: byT5 glyph states ``(B, L2, text_embed_2_dim)``.
            encoder_attention_mask_2: ``(B, L2)`` 0/1 (all zero: a prompt without quoted text).
            image_embeds: SigLIP tokens ``(B, L3, image_embed_dim)``; all zero for an item: no
                image (T2V), its image tokens masked out.
            timestep_r: MeanFlow's second time ``(B,)`` (the step-distilled checkpoints pass the
                next step's timestep), or None; only with ``use_meanflow``.

        Returns:
            ``((video (B, L', D), conditioning (B, L_c', D)), inputs)``: the residual streams in
            the residual dtype (each padded to a multiple of the mesh's ``sequence`` axis;
            ``L_c = L3 + L2 + L1``) and the :class:`HunyuanBlockInputs`. The model call returns
            the prediction ``(B, T, H, W, out_channels)`` in the compute dtype.

        Raises:
            InputError: shapes that do not fit the config, ``timestep_r`` without ``use_meanflow``.
        """
        grid = self._check_inputs(
            hidden_states,
            timestep,
            encoder_hidden_states,
            encoder_attention_mask,
            encoder_hidden_states_2,
            encoder_attention_mask_2,
            image_embeds,
            timestep_r,
        )
        b = hidden_states.shape[0]
        res = self.res_dtype
        timestep = jnp.reshape(timestep, (b,))
        temb = self.time_embed(timestep, None if timestep_r is None else jnp.reshape(timestep_r, (b,)))
        vid = self.x_embedder["proj"](hidden_states.astype(self.dtype)).astype(res)

        cond = self.cond_type_embed.embedding[...].astype(_F32)  # (3, D): text, glyph, image
        m_txt = encoder_attention_mask != 0
        m_glyph = encoder_attention_mask_2 != 0
        txt = self.context_embedder(encoder_hidden_states, timestep, encoder_attention_mask).astype(_F32) + cond[0]
        glyph = self.context_embedder_2(encoder_hidden_states_2.astype(self.dtype)).astype(_F32) + cond[1]
        has_image = jnp.any(image_embeds != 0, axis=(1, 2))  # (B,)
        img = self.image_embedder(image_embeds.astype(self.dtype))
        img = jnp.where(has_image[:, None, None], img, 0.0) + cond[2]
        m_img = jnp.broadcast_to(has_image[:, None], img.shape[:2])
        # [valid image, valid glyph, valid text, invalid image, invalid glyph, invalid text] per
        # item (a stable sort on "invalid"), the invalid glyph and text rows zeroed.
        tokens = jnp.concatenate(
            [img, jnp.where(m_glyph[..., None], glyph, 0.0), jnp.where(m_txt[..., None], txt, 0.0)], axis=1
        )
        valid = jnp.concatenate([m_img, m_glyph, m_txt], axis=1)
        order = jnp.argsort(~valid, axis=1, stable=True)
        ctx = jnp.take_along_axis(tokens, order[..., None], axis=1)
        ctx_len = valid.sum(axis=1).astype(jnp.int32)  # (B,)

        streams, rope, segments = joint_streams(self, vid, ctx, ctx_len, grid)
        return streams, HunyuanBlockInputs(temb, None, rope, segments, None, vid.shape[1], grid)

    def head(self, x, inputs: HunyuanBlockInputs) -> jax.Array:
        """Everything after the blocks: the real video tokens, ``norm_out``, ``proj_out``,
        unpatchify (features ``(C, p_t, p, p)``) -> ``(B, T, H, W, C_out)`` in the compute dtype."""
        return video_head(self, x, inputs)

    def _check_inputs(self, x, timestep, text, mask, text_2, mask_2, image, timestep_r) -> tuple[int, int, int]:
        cfg = self.config
        name = type(self).__name__
        pt, p = cfg.patch_size_t, cfg.patch_size
        grid = self.check_latents(x, cfg.in_channels, (pt, p, p), patch_name="(patch_size_t, patch_size, patch_size)")
        b = x.shape[0]
        for arg, value in (("timestep", timestep), ("timestep_r", timestep_r)):
            if value is not None and tuple(jnp.shape(value)) not in ((b,), ()):
                raise InputError(f"{name}: {arg} must have shape (B,)=({b},); got {tuple(jnp.shape(value))}.")
        if timestep_r is not None and not cfg.use_meanflow:
            raise InputError(
                f"{name}: timestep_r was given but this model has no MeanFlow embedder (use_meanflow=false)."
            )
        self.check_text(text, b, cfg.text_embed_dim, "text_embed_dim=", "L1")
        for arg, states, dim_name, dim, length in (
            ("encoder_hidden_states_2", text_2, "text_embed_2_dim", cfg.text_embed_2_dim, "L2"),
            ("image_embeds", image, "image_embed_dim", cfg.image_embed_dim, "L3"),
        ):
            if states.ndim != 3 or states.shape[0] != b or states.shape[-1] != dim:
                raise InputError(
                    f"{name}: {arg} must be (B={b}, {length}, {dim_name}={dim}); got {tuple(states.shape)}."
                )
        for arg, m, states, text_arg in (
            ("encoder_attention_mask", mask, text, "encoder_hidden_states"),
            ("encoder_attention_mask_2", mask_2, text_2, "encoder_hidden_states_2"),
        ):
            if tuple(m.shape) != tuple(states.shape[:2]):
                raise InputError(
                    f"{name}: {arg} must be (B, L) of {text_arg}={tuple(states.shape[:2])}; got {tuple(m.shape)}."
                )
        return grid
