"""LTX-2 / LTX-2.3 audio-video denoising transformer (``diffusers.LTX2VideoTransformer3DModel``,
diffusers 0.42.1 ``models/transformers/transformer_ltx2.py``) in Flax NNX, on the shared blocks.

Two residual streams run through every block, video ``x`` (width D) and audio ``a`` (width D_a)::

    video tokens (B, N, C) ──proj_in──> x        audio tokens (B, M, C_a) ──audio_proj_in──> a
    timestep ──time_embed──> 6 (9) modulations per token, and the head's embedding   (audio alike)
    timestep ──av_cross_attn_*──> the audio<->video attention's scale / shift (4) and gate (1)
    sigma ──prompt_adaln──> the text keys' / values' scale and shift (2.3, ``cross_attn_mod``)
    text ──caption_projection──> context (2.0; 2.3's connectors already give D / D_a)
    RoPE (host numpy, float64 frequencies; vidax.models.ltx2.rope): video (t, y, x) and audio (t)
        self-attention tables, and time-only tables for the audio<->video attention
    transformer_blocks × num_layers (stacked, one scan over the pair (x, a)):
        x += g·attn1(RMS(x)·(1+s)+b, video RoPE)         a += g·audio_attn1(..., audio RoPE)
        x += [g_q·] attn2(RMS(x)[·(1+s_q)+b_q], ctx[·(1+s_kv)+b_kv])     (audio alike)
        nx, na = RMS(x), RMS(a)   (both before the two updates below)
        x += g·audio_to_video_attn(nx·(1+s)+b, na·(1+s')+b')   q: video, kv: audio, time RoPE each
        a += g·video_to_audio_attn(na·(1+s)+b, nx·(1+s')+b')   q: audio, kv: video
        x += g·ff(RMS(x)·(1+s)+b)                         a += g·audio_ff(...)
    LN(x)·(1+scale)+shift ──proj_out──> (B, N, C_out)     audio alike ──audio_proj_out──> (B, M, C_a)

Every RMS(·) is the block's own RMSNorm (``norm1`` .. ``audio_norm3``; weighted only with
``norm_elementwise_affine``, the weight multiplied in float32).

Every attention is :class:`vidax.blocks.attention.Attention`: q / k RMS-normalised over all heads
(eps 1e-6, weights), RoPE over the whole width (``rope_type`` "interleaved": pairs ``(2i, 2i+1)``;
"split": rotate-half within each head's slice; the video side of the audio<->video attention is
cut into ``num_attention_heads`` slices, as the reference's table, whatever that attention's head
count), LTX-2.3's per-head output gate ``2·sigmoid(to_gate_logits(x))``. The modulations are
:func:`vidax.blocks.modulation.table_modulation` of each block's tables and
:class:`~vidax.blocks.modulation.AdaLayerNormSingle` embeddings.

Guidance switches of the reference's call, static here: ``isolate_modalities`` skips the
audio<->video attention (modality guidance); ``spatio_temporal_guidance_blocks`` replaces the
video and audio self-attention of those blocks by their values for the samples whose
``perturbation_mask`` is 0 (STG, needs ``perturbed_attn``); ``use_cross_timestep`` modulates the
audio<->video attention with the other modality's sigma. vidax's ``cross_modal_mask`` (B,) isolates
the modalities per sample (0: that sample's audio<->video updates are multiplied by 0, exactly the
reference's skipped attention), so one batch can hold the reference's separate guidance passes.

Masks: the text masks ``(B, L)`` 0/1 are key masks (the reference's additive ``-10000`` bias is
exactly that after softmax; an all-zero row attends every key, as the uniform bias does). On a
mesh the token counts are padded to a multiple of ``sequence``; padded keys are masked in every
attention that sees them and the head drops the padded rows.

Precision: the timestep MLPs and every ``*scale_shift_table`` float32 (``convert.py``); the
modulation arithmetic, norm statistics, RoPE (tables from numpy float64 frequencies) and softmax
float32; the residual streams in ``residual_dtype`` (float32 by default). In float32 this is the
reference's arithmetic.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import AdaLayerNormSingle, gated_add, modulate, table_modulation
from vidax.blocks.transformer import DiffusionTransformer, block_inputs, shared, static
from vidax.errors import InputError
from vidax.models.ltx2 import rope as ltx2_rope
from vidax.models.ltx2.config_transformer import LTX2_ROPE_TYPES, LTX2TransformerConfig
from vidax.nn.layers import FeedForward, LayerNorm, RMSNorm, TextProjection, linear
from vidax.nn.stack import stacked
from vidax.parallel.mesh import check_heads
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32
#: ``LTX2Attention``'s q / k RMSNorm epsilon (its ``norm_eps`` default; the model does not pass one).
QK_NORM_EPS = 1e-6
#: ``norm_out`` / ``audio_norm_out`` epsilon (fixed in the reference).
OUT_NORM_EPS = 1e-6


def _param(rngs, shape, scale):
    return nnx.Param(jax.random.normal(rngs.params(), shape, _F32) * scale)


# ---------------------------------------------------------------------------------------------
# Transformer block


class LTX2VideoTransformerBlock(nnx.Module):
    """diffusers ``LTX2VideoTransformerBlock``: self-attention, prompt cross-attention,
    audio<->video cross-attention and feed-forward of both streams (module docstring)."""

    def __init__(self, cfg: LTX2TransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None):
        d, da = cfg.inner_dim, cfg.audio_inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        affine = "w" if cfg.norm_elementwise_affine else None
        for name, width in (
            ("norm1", d),
            ("audio_norm1", da),
            ("norm2", d),
            ("audio_norm2", da),
            ("audio_to_video_norm", d),
            ("video_to_audio_norm", da),
            ("norm3", d),
            ("audio_norm3", da),
        ):
            setattr(self, name, RMSNorm(width, cfg.norm_eps, weight=affine, dtype=_F32, param_dtype=param_dtype))
        self.video_q_adaln = cfg.cross_attn_mod
        self.audio_q_adaln = cfg.audio_cross_attn_mod
        layout = LTX2_ROPE_TYPES[cfg.rope_type]

        def attn(dim, heads, head_dim, gate, kv_dim=None, context_tokens="replicated"):
            c = AttentionConfig(
                dim,
                heads,
                head_dim,
                kv_dim=kv_dim,
                bias=cfg.attention_bias,
                out_bias=cfg.attention_out_bias,
                qk_norm="rms",
                qk_norm_eps=QK_NORM_EPS,
                rope=layout,
                rope_full_width=True,
                gate=gate,
                context_tokens=context_tokens,
            )
            return Attention(c, attention, dtype, param_dtype, rngs, mesh)

        hv, kv, ha, ka = (
            cfg.num_attention_heads,
            cfg.attention_head_dim,
            cfg.audio_num_attention_heads,
            cfg.audio_attention_head_dim,
        )
        self.attn1 = attn(d, hv, kv, cfg.gated_attn)
        self.audio_attn1 = attn(da, ha, ka, cfg.audio_gated_attn)
        self.attn2 = attn(d, hv, kv, cfg.gated_attn, kv_dim=cfg.cross_attention_dim)
        self.audio_attn2 = attn(da, ha, ka, cfg.audio_gated_attn, kv_dim=cfg.audio_cross_attention_dim)
        self.audio_to_video_attn = attn(d, ha, ka, cfg.gated_attn, kv_dim=da, context_tokens="seq")
        self.video_to_audio_attn = attn(da, ha, ka, cfg.audio_gated_attn, kv_dim=d, context_tokens="seq")
        act = cfg.activation_fn
        self.ff = FeedForward(d, 4 * d, d, act, dtype, param_dtype, rngs, use_bias=cfg.ff_bias)
        self.audio_ff = FeedForward(da, 4 * da, da, act, dtype, param_dtype, rngs, use_bias=cfg.audio_ff_bias)

        self.scale_shift_table = _param(rngs, (9 if cfg.cross_attn_mod else 6, d), 1 / math.sqrt(d))
        self.audio_scale_shift_table = _param(rngs, (9 if cfg.audio_cross_attn_mod else 6, da), 1 / math.sqrt(da))
        prompt = cfg.prompt_modulation
        self.prompt_scale_shift_table = _param(rngs, (2, d), 1.0) if prompt else None
        self.audio_prompt_scale_shift_table = _param(rngs, (2, da), 1.0) if prompt else None
        self.video_a2v_cross_attn_scale_shift_table = _param(rngs, (5, d), 1.0)
        self.audio_a2v_cross_attn_scale_shift_table = _param(rngs, (5, da), 1.0)

    def __call__(self, streams, inputs: LTX2BlockInputs):
        """One block over the streams ``(x (B, N', D), a (B, M', D_a)[, layer])`` -> the same
        structure in the residual dtype (``layer``: this block's index when STG runs)."""
        i = inputs
        x, a = streams[:2]
        res, dt = self.residual_dtype or self.dtype, self.dtype
        pv = pa = None
        if i.stg_layers is not None:  # the block's STG weights: perturbation_mask on STG blocks, else 1
            on = i.stg_layers[streams[2].reshape(())]
            pv = pa = jnp.where(on, i.perturbation_mask, 1.0)

        # 1. Self-attention.
        v_mod = table_modulation(self.scale_shift_table[...], i.video_mod)
        a_mod = table_modulation(self.audio_scale_shift_table[...], i.audio_mod)
        shift, scale, gate = v_mod[:3]
        h = modulate(self.norm1(x), shift, scale, dt)
        x = gated_add(x, self.attn1(h, rope=i.video_rope, mask=AttentionMask(i.video_valid), perturb=pv), gate, res)
        shift, scale, gate = a_mod[:3]
        h = modulate(self.audio_norm1(a), shift, scale, dt)
        a = gated_add(
            a, self.audio_attn1(h, rope=i.audio_rope, mask=AttentionMask(i.audio_valid), perturb=pa), gate, res
        )

        # 2. Prompt cross-attention (LTX-2.3: AdaLN of the queries and of the text keys / values).
        ctx, actx = i.context, i.audio_context
        if self.prompt_scale_shift_table is not None:
            # Without prompt_adaln (LTX-2.5's use_prompt_adaln_single=false) the static table alone.
            no_emb = jnp.zeros((1, 1, 1, 1), _F32)
            for table, emb, is_audio in (
                (self.prompt_scale_shift_table, i.prompt_mod, False),
                (self.audio_prompt_scale_shift_table, i.audio_prompt_mod, True),
            ):
                b_kv, s_kv = table_modulation(table[...], no_emb if emb is None else emb)
                if is_audio:
                    actx = modulate(actx, b_kv, s_kv, dt)
                else:
                    ctx = modulate(ctx, b_kv, s_kv, dt)
        x = self._prompt_attention(self.attn2, self.norm2, x, ctx, i.kv_mask, v_mod[6:] if self.video_q_adaln else None)
        a = self._prompt_attention(
            self.audio_attn2, self.audio_norm2, a, actx, i.audio_kv_mask, a_mod[6:] if self.audio_q_adaln else None
        )

        # 3. Audio <-> video cross-attention (skipped when the modalities are isolated).
        if not i.isolate_modalities:
            nx, na = self.audio_to_video_norm(x), self.video_to_audio_norm(a)
            v_ca = table_modulation(self.video_a2v_cross_attn_scale_shift_table[...][:4], i.video_ca_mod)
            (v_gate,) = table_modulation(self.video_a2v_cross_attn_scale_shift_table[...][4:], i.video_ca_gate)
            a_ca = table_modulation(self.audio_a2v_cross_attn_scale_shift_table[...][:4], i.audio_ca_mod)
            (a_gate,) = table_modulation(self.audio_a2v_cross_attn_scale_shift_table[...][4:], i.audio_ca_gate)
            # Rows: a2v scale, a2v shift, v2a scale, v2a shift.
            q = modulate(nx, v_ca[1], v_ca[0], dt)
            kv = modulate(na, a_ca[1], a_ca[0], dt)
            out = self.audio_to_video_attn(
                q, kv, rope=i.video_ca_rope, key_rope=i.audio_ca_rope, mask=AttentionMask(kv_mask=i.audio_keys)
            )
            x = gated_add(x, out, v_gate if i.cross_modal_mask is None else v_gate * i.cross_modal_mask, res)
            q = modulate(na, a_ca[3], a_ca[2], dt)
            kv = modulate(nx, v_ca[3], v_ca[2], dt)
            out = self.video_to_audio_attn(
                q, kv, rope=i.audio_ca_rope, key_rope=i.video_ca_rope, mask=AttentionMask(kv_mask=i.video_keys)
            )
            a = gated_add(a, out, a_gate if i.cross_modal_mask is None else a_gate * i.cross_modal_mask, res)

        # 4. Feed-forward.
        shift, scale, gate = v_mod[3:6]
        x = gated_add(x, self.ff(modulate(self.norm3(x), shift, scale, dt)), gate, res)
        shift, scale, gate = a_mod[3:6]
        a = gated_add(a, self.audio_ff(modulate(self.audio_norm3(a), shift, scale, dt)), gate, res)
        return (x, a) if len(streams) == 2 else (x, a, streams[2] + 1)

    def _prompt_attention(self, layer, norm, x, context, kv_mask, q_mod):
        """``x + [gate·] layer(norm(x)[·(1+scale)+shift], context)``; ``q_mod`` the three
        cross-attention AdaLN rows (shift, scale, gate) or None."""
        res = self.residual_dtype or self.dtype
        if q_mod is None:
            h, gate = norm(x).astype(self.dtype), None
        else:
            shift, scale, gate = q_mod
            h = modulate(norm(x), shift, scale, self.dtype)
        return gated_add(x, layer(h, context, mask=AttentionMask(kv_mask=kv_mask)), gate, res)


@block_inputs
class LTX2BlockInputs:
    """What the blocks and the head read (from :meth:`LTX2VideoTransformer3DModel.embed`).

    Attributes:
        context, audio_context: the text ``(B, L, D)`` / ``(B, L, D_a)``, compute dtype.
        kv_mask, audio_kv_mask: ``(B, L)`` int32 text key masks or None.
        video_mod, audio_mod: ``(B, 1 or N', 6|9, D)`` / ``(B, 1 or M', 6|9, D_a)`` modulations.
        prompt_mod, audio_prompt_mod: ``(B, 1, 2, D|D_a)`` (LTX-2.3) or None.
        video_ca_mod, video_ca_gate, audio_ca_mod, audio_ca_gate: the audio<->video attention's
            ``(B, S, 4, D)``, ``(B, S, 1, D)`` and the audio ones.
        video_rope, audio_rope, video_ca_rope, audio_ca_rope: ``(cos, sin)`` float32 half tables.
        video_temb, audio_temb: ``(B, 1 or N, D|D_a)`` embeddings for the head.
        video_keys, audio_keys: ``(B, N')`` / ``(B, M')`` int32 masks of the real tokens as
            audio<->video keys when the mesh padded them, else None.
        stg_layers: ``(num_layers,)`` bool, the STG blocks, or None (no STG).
        perturbation_mask: ``(B,)`` float32 (0: perturbed) or None.
        cross_modal_mask: ``(B, 1, 1)`` float32 (0: that sample's modalities isolated) or None.
        video_valid, audio_valid: static; real tokens when padded, else None.
        n_video, n_audio: static; real token counts.
        isolate_modalities: static; skip the audio<->video attention.
    """

    context: jax.Array
    audio_context: jax.Array
    kv_mask: jax.Array | None
    audio_kv_mask: jax.Array | None
    video_mod: jax.Array
    audio_mod: jax.Array
    prompt_mod: jax.Array | None
    audio_prompt_mod: jax.Array | None
    video_ca_mod: jax.Array
    video_ca_gate: jax.Array
    audio_ca_mod: jax.Array
    audio_ca_gate: jax.Array
    video_rope: tuple
    audio_rope: tuple
    video_ca_rope: tuple
    audio_ca_rope: tuple
    video_temb: jax.Array
    audio_temb: jax.Array
    video_keys: jax.Array | None
    audio_keys: jax.Array | None
    stg_layers: jax.Array | None = shared()
    perturbation_mask: jax.Array | None
    cross_modal_mask: jax.Array | None
    video_valid: int | None = static()
    audio_valid: int | None = static()
    n_video: int = static()
    n_audio: int = static()
    isolate_modalities: bool = static()


@dataclasses.dataclass(frozen=True)
class LTX2Forward:
    """The arguments of :meth:`LTX2VideoTransformer3DModel.embed`: the reference's ``forward``'s
    (``diffusers.LTX2VideoTransformer3DModel.forward``), in its order or by name.

    Attributes:
        hidden_states: packed video latents ``(B, N, in_channels)`` (frame, row, column order).
        audio_hidden_states: packed audio latents ``(B, M, audio_in_channels)``.
        encoder_hidden_states, audio_encoder_hidden_states: the connectors' text ``(B, L, W)``,
            ``W`` = ``caption_channels`` (2.0) or ``cross_attention_dim`` /
            ``audio_cross_attention_dim`` (2.3, ``use_prompt_embeddings=false``).
        timestep: diffusion time (sigma x 1000), ``(B,)`` or per video token ``(B, N)``.
        audio_timestep: ``(B,)`` or ``(B, M)``; None: ``timestep``.
        sigma, audio_sigma: ``(B,)`` sigmas for 2.3's prompt AdaLN and ``use_cross_timestep``
            (``audio_sigma`` None: ``sigma``); needed only then.
        encoder_attention_mask, audio_encoder_attention_mask: ``(B, L)`` 0/1 or None.
        num_frames, height, width: the latent grid (Python ints), fps: frames per second,
            audio_num_frames: latent audio frames; used when the coordinates are None.
        video_coords, audio_coords: numpy ``(B, 3, N, 2)`` / ``(B, 1, M, 2)`` bounds (the
            reference's ``prepare_*_coords``; concrete host arrays, not traced), or None.
        isolate_modalities: skip the audio<->video attention (static).
        spatio_temporal_guidance_blocks: block indices whose self-attention STG perturbs
            (static; needs ``perturbed_attn``), or None.
        perturbation_mask: ``(B,)`` 1 = not perturbed, 0 = perturbed; None with STG blocks:
            every sample perturbed (as the reference).
        use_cross_timestep: modulate the audio<->video attention with the other modality's
            sigma (LTX-2.3's behaviour).
        video_keyframes_mask: ``(B, N, 1)``, non-zero on the tokens that get
            ``keyframes_abs_pos_embedding`` (LTX-2.5); ignored without that parameter.
        rope: the tables of :meth:`rope_tables` (computed once on the host and passed as
            arrays, e.g. as jit arguments of a denoising step, instead of being rebuilt as
            constants of each traced call); then the coordinates and grid are not read.
        cross_modal_mask: ``(B,)`` 1 = audio<->video attention on, 0 = off for that sample
            (``isolate_modalities`` per sample; vidax's, for batched guidance passes), or None.
    """

    hidden_states: jax.Array
    audio_hidden_states: jax.Array
    encoder_hidden_states: jax.Array
    audio_encoder_hidden_states: jax.Array
    timestep: jax.Array
    audio_timestep: jax.Array | None = None
    sigma: jax.Array | None = None
    audio_sigma: jax.Array | None = None
    encoder_attention_mask: jax.Array | None = None
    audio_encoder_attention_mask: jax.Array | None = None
    num_frames: int | None = None
    height: int | None = None
    width: int | None = None
    fps: float = 24.0
    audio_num_frames: int | None = None
    video_coords: np.ndarray | None = None
    audio_coords: np.ndarray | None = None
    isolate_modalities: bool = False
    spatio_temporal_guidance_blocks: Sequence[int] | None = None
    perturbation_mask: jax.Array | None = None
    use_cross_timestep: bool = False
    video_keyframes_mask: jax.Array | None = None
    rope: tuple | None = None
    cross_modal_mask: jax.Array | None = None


# ---------------------------------------------------------------------------------------------
# Model


class LTX2VideoTransformer3DModel(DiffusionTransformer):
    """The LTX-2 / LTX-2.3 audio-video transformer; follows ``diffusers.LTX2VideoTransformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: :class:`~vidax.models.ltx2.config.LTX2TransformerConfig`). ``model(*args)`` takes
    the arguments of :meth:`embed` and returns ``(video (B, N, C_out), audio (B, M, C_a_out))``
    in the compute dtype. The residual streams are the pair ``(video, audio)`` (a third, the
    layer index ``(1, 1, 1)`` int32, while STG runs).
    """

    block_stacks = ("transformer_blocks",)

    def build(self, cfg: LTX2TransformerConfig, param_dtype, attention, rngs):
        check_heads(self.mesh, cfg.audio_num_attention_heads, f"{type(self).__name__} (audio)")
        dtype, d, da = self.dtype, cfg.inner_dim, cfg.audio_inner_dim
        self.proj_in = linear(cfg.in_channels, d, dtype, param_dtype, rngs)
        self.audio_proj_in = linear(cfg.audio_in_channels, da, dtype, param_dtype, rngs)
        prompt = cfg.use_prompt_embeddings
        self.caption_projection = TextProjection(cfg.caption_channels, d, dtype, param_dtype, rngs) if prompt else None
        self.audio_caption_projection = (
            TextProjection(cfg.caption_channels, da, dtype, param_dtype, rngs) if prompt else None
        )
        n_v, n_a = (9 if cfg.cross_attn_mod else 6), (9 if cfg.audio_cross_attn_mod else 6)
        self.time_embed = AdaLayerNormSingle(d, n_v, dtype, param_dtype, rngs)
        self.audio_time_embed = AdaLayerNormSingle(da, n_a, dtype, param_dtype, rngs)
        self.av_cross_attn_video_scale_shift = AdaLayerNormSingle(d, 4, dtype, param_dtype, rngs)
        self.av_cross_attn_audio_scale_shift = AdaLayerNormSingle(da, 4, dtype, param_dtype, rngs)
        self.av_cross_attn_video_a2v_gate = AdaLayerNormSingle(d, 1, dtype, param_dtype, rngs)
        self.av_cross_attn_audio_v2a_gate = AdaLayerNormSingle(da, 1, dtype, param_dtype, rngs)
        self.scale_shift_table = _param(rngs, (2, d), 1 / math.sqrt(d))
        self.audio_scale_shift_table = _param(rngs, (2, da), 1 / math.sqrt(da))
        pm = cfg.prompt_adaln
        self.prompt_adaln = AdaLayerNormSingle(d, 2, dtype, param_dtype, rngs) if pm else None
        self.audio_prompt_adaln = AdaLayerNormSingle(da, 2, dtype, param_dtype, rngs) if pm else None
        self.keyframes_abs_pos_embedding = (
            nnx.Param(jnp.zeros((1, d), _F32)) if cfg.use_keyframes_abs_pos_embedding else None
        )
        self.transformer_blocks = stacked(
            lambda r: LTX2VideoTransformerBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_layers,
            rngs,
        )
        self.norm_out = LayerNorm(d, OUT_NORM_EPS, False)
        self.proj_out = linear(d, cfg.out_dim, dtype, param_dtype, rngs)
        self.audio_norm_out = LayerNorm(da, OUT_NORM_EPS, False)
        self.audio_proj_out = linear(da, cfg.audio_out_dim, dtype, param_dtype, rngs)

    # -- RoPE (host) ---------------------------------------------------------------------------

    def rope_coords(
        self, batch: int, num_frames: int, height: int, width: int, fps: float, audio_num_frames: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The reference's ``rope.prepare_video_coords`` and ``audio_rope.prepare_audio_coords``
        (numpy float32): ``(B, 3, N, 2)`` and ``(B, 1, M, 2)`` (what the pipelines pass as
        ``video_coords`` / ``audio_coords``)."""
        c = self.config
        v = ltx2_rope.video_coords(
            batch,
            num_frames,
            height,
            width,
            fps,
            patch_size=c.patch_size,
            patch_size_t=c.patch_size_t,
            scale_factors=c.vae_scale_factors,
            causal_offset=c.causal_offset,
        )
        a = ltx2_rope.audio_coords(
            batch,
            audio_num_frames,
            patch_size_t=c.audio_patch_size_t,
            scale_factor=c.audio_scale_factor,
            hop_length=c.audio_hop_length,
            sampling_rate=c.audio_sampling_rate,
            causal_offset=c.causal_offset,
        )
        return v, a

    def rope_tables(self, video_coords: np.ndarray, audio_coords: np.ndarray) -> tuple[tuple, tuple, tuple, tuple]:
        """The four ``(cos, sin)`` float32 tables (video, audio, cross-modal video, cross-modal
        audio) from the coordinates, computed on the host (what :meth:`embed` takes as ``rope=``).

        Args:
            video_coords, audio_coords: numpy ``(B, 3, N, 2)`` / ``(B, 1, M, 2)`` bounds
                (:meth:`rope_coords`).

        Returns:
            Rows padded to the mesh-padded token counts: ``(L, W/2)`` when every sample has the
            same positions, else ``(B, L, W/2)``; the split video cross-modal table
            ``(B, L, num_attention_heads, r)`` when its slices are not the attention's heads.
        """
        c = self.config
        video_coords, audio_coords = np.asarray(video_coords, np.float32), np.asarray(audio_coords, np.float32)
        batch = video_coords.shape[0]
        video_length = self.sequence_length(video_coords.shape[2])[0]
        audio_length = self.sequence_length(audio_coords.shape[2])[0]
        theta, dp = c.rope_theta, c.rope_double_precision
        cross_base = max(c.pos_embed_max_pos, c.audio_pos_embed_max_pos)
        vid = ltx2_rope.rope_table(
            video_coords, c.inner_dim, (c.pos_embed_max_pos, c.base_height, c.base_width), theta, dp
        )
        aud = ltx2_rope.rope_table(audio_coords, c.audio_inner_dim, (c.audio_pos_embed_max_pos,), theta, dp)
        vca = ltx2_rope.rope_table(video_coords[:, :1], c.audio_cross_attention_dim, (cross_base,), theta, dp)
        aca = ltx2_rope.rope_table(audio_coords[:, :1], c.audio_cross_attention_dim, (cross_base,), theta, dp)
        chunked = c.rope_type == "split" and c.num_attention_heads != c.audio_num_attention_heads

        def finish(table, length, chunks=None):
            out = []
            for t, fill in zip(table, (1.0, 0.0)):
                t = np.pad(t, ((0, 0), (0, length - t.shape[1]), (0, 0)), constant_values=fill)
                if chunks is not None:
                    t = np.broadcast_to(t, (batch, *t.shape[1:])).reshape(batch, length, chunks, -1)
                elif (t == t[:1]).all():
                    t = t[0]
                else:
                    t = np.broadcast_to(t, (batch, *t.shape[1:]))
                out.append(jnp.asarray(t))
            return tuple(out)

        return (
            finish(vid, video_length),
            finish(aud, audio_length),
            finish(vca, video_length, c.num_attention_heads if chunked else None),
            finish(aca, audio_length),
        )

    # -- stages --------------------------------------------------------------------------------

    def embed(self, *args, **kwargs) -> tuple[tuple, LTX2BlockInputs]:
        """Everything before the blocks; the arguments of the reference's ``forward``
        (:class:`LTX2Forward`, in its order or by name).

        Returns:
            The streams ``(x (B, N', D), a (B, M', D_a))`` in the residual dtype (``N'``, ``M'``
            padded to the mesh's ``sequence`` axis), plus the layer index ``(1, 1, 1)`` int32
            while STG runs, and the :class:`LTX2BlockInputs`.

        Raises:
            InputError: shapes that do not fit the config or each other, missing sigmas / grid,
                traced coordinates, STG without ``perturbed_attn`` or an STG block out of range.
            TypeError: an argument :class:`LTX2Forward` does not have.
        """
        f = LTX2Forward(*args, **kwargs)
        cfg, dt = self.config, self.dtype
        b, n_v, n_a = self._check_forward(f)
        stg = tuple(f.spatio_temporal_guidance_blocks or ())
        # RoPE tables on the host (float64 frequencies), rows padded to the mesh lengths.
        len_v, valid_v = self.sequence_length(n_v)
        len_a, valid_a = self.sequence_length(n_a)
        video_rope, audio_rope, video_ca_rope, audio_ca_rope = self._forward_rope(f, b, n_v, n_a, len_v, len_a)
        x = self.proj_in(f.hidden_states.astype(dt))
        x = pad_tokens(self._keyframes(f, x, b, n_v), len_v)
        a = pad_tokens(self.audio_proj_in(f.audio_hidden_states.astype(dt)), len_a)
        mods = self._modulations(f, b, len_v, len_a)
        context = f.encoder_hidden_states.astype(dt)
        audio_context = f.audio_encoder_hidden_states.astype(dt)
        if cfg.use_prompt_embeddings:
            context = self.caption_projection(context)
            audio_context = self.audio_caption_projection(audio_context)

        def key_mask(n, length):  # real tokens of a padded stream, as audio<->video keys
            if length == n:
                return None
            return jnp.broadcast_to((jnp.arange(length) < n).astype(jnp.int32)[None], (b, length))

        stg_layers = pmask = None
        if stg:
            stg_layers = jnp.zeros((cfg.num_layers,), bool).at[jnp.asarray(stg)].set(True)
            pmask = (
                jnp.zeros((b,), _F32)
                if f.perturbation_mask is None
                else jnp.asarray(f.perturbation_mask, _F32).reshape(b)
            )
        streams = (self.stream(x), self.stream(a))
        if stg:
            streams = (*streams, jnp.zeros((1, 1, 1), jnp.int32))
        cross_modal = f.cross_modal_mask
        inputs = LTX2BlockInputs(
            context=context,
            audio_context=audio_context,
            kv_mask=_text_mask(f.encoder_attention_mask),
            audio_kv_mask=_text_mask(f.audio_encoder_attention_mask),
            **mods,
            video_rope=video_rope,
            audio_rope=audio_rope,
            video_ca_rope=video_ca_rope,
            audio_ca_rope=audio_ca_rope,
            video_keys=key_mask(n_v, len_v),
            audio_keys=key_mask(n_a, len_a),
            stg_layers=stg_layers,
            perturbation_mask=pmask,
            cross_modal_mask=None if cross_modal is None else jnp.asarray(cross_modal, _F32).reshape(b, 1, 1),
            video_valid=valid_v,
            audio_valid=valid_a,
            n_video=n_v,
            n_audio=n_a,
            isolate_modalities=bool(f.isolate_modalities),
        )
        return streams, inputs

    def _check_forward(self, f: LTX2Forward) -> tuple[int, int, int]:
        """``(B, N, M)`` of :meth:`embed`'s arguments, each checked against the config and the
        others: the token streams, timesteps, sigmas, texts and STG blocks.

        Raises:
            InputError: as :meth:`embed`.
        """
        cfg = self.config
        name = type(self).__name__
        b, n_v = self._check_tokens(f.hidden_states, cfg.in_channels, "hidden_states", "in_channels")
        b_a, n_a = self._check_tokens(
            f.audio_hidden_states, cfg.audio_in_channels, "audio_hidden_states", "audio_in_channels"
        )
        if b_a != b:
            raise InputError(f"{name}: audio_hidden_states batch {b_a} must equal hidden_states batch {b}.")
        timestep, sigma = f.timestep, f.sigma
        audio_timestep = timestep if f.audio_timestep is None else f.audio_timestep
        audio_sigma = sigma if f.audio_sigma is None else f.audio_sigma
        for key, t, n in (("timestep", timestep, n_v), ("audio_timestep", audio_timestep, n_a)):
            if tuple(jnp.shape(t)) not in ((b,), (b, 1), (b, n)):
                raise InputError(
                    f"{name}: {key} must be (B,)=({b},), (B, 1) or (B, tokens)=({b}, {n}); got {tuple(jnp.shape(t))}."
                )
        if cfg.prompt_adaln or f.use_cross_timestep:
            for key, s in (("sigma", sigma), ("audio_sigma", audio_sigma)):
                if s is None or tuple(jnp.shape(s)) not in ((b,), (b, 1)):
                    raise InputError(
                        f"{name}: {key} must be (B,)=({b},) for the prompt AdaLN / use_cross_timestep; "
                        f"got {None if s is None else tuple(jnp.shape(s))}."
                    )
        text_w = cfg.caption_channels if cfg.use_prompt_embeddings else cfg.cross_attention_dim
        audio_text_w = cfg.caption_channels if cfg.use_prompt_embeddings else cfg.audio_cross_attention_dim
        self.check_text(f.encoder_hidden_states, b, text_w, "")
        audio_encoder_hidden_states = f.audio_encoder_hidden_states
        if (
            audio_encoder_hidden_states.ndim != 3
            or audio_encoder_hidden_states.shape[0] != b
            or audio_encoder_hidden_states.shape[-1] != audio_text_w
        ):
            raise InputError(
                f"{name}: audio_encoder_hidden_states must be (B={b}, L, {audio_text_w}); "
                f"got {tuple(audio_encoder_hidden_states.shape)}."
            )
        stg = tuple(f.spatio_temporal_guidance_blocks or ())
        if stg and not cfg.perturbed_attn:
            raise InputError(
                f"{name}: spatio_temporal_guidance_blocks={list(stg)} needs a perturbed_attn=true "
                "checkpoint (the reference's other attention ignores it)."
            )
        if any(not isinstance(i, int) or not 0 <= i < cfg.num_layers for i in stg):
            raise InputError(
                f"{name}: spatio_temporal_guidance_blocks={list(stg)} must be block indices in [0, {cfg.num_layers})."
            )
        return b, n_v, n_a

    def _forward_rope(self, f: LTX2Forward, b: int, n_v: int, n_a: int, len_v: int, len_a: int) -> tuple:
        """The four ``(cos, sin)`` RoPE tables (video, audio, and the audio<->video attention's):
        ``f.rope`` as given, else built on the host from the coordinates (from the latent grid and
        fps where they are None), rows padded to ``len_v`` / ``len_a``.

        Raises:
            InputError: a ``rope`` of another structure or length; no coordinates and no grid;
                traced coordinates.
        """
        name = type(self).__name__
        rope, video_coords, audio_coords = f.rope, f.video_coords, f.audio_coords
        if rope is not None:
            if not (
                isinstance(rope, (tuple, list))
                and len(rope) == 4
                and all(len(r) == 2 for r in rope)
                and rope[0][0].shape[-2] == len_v
                and rope[1][0].shape[-2] == len_a
            ):
                raise InputError(
                    f"{name}: rope must be the four (cos, sin) pairs of rope_tables() for {n_v} video "
                    f"and {n_a} audio tokens."
                )
            return tuple(tuple(p) for p in rope)
        if video_coords is None or audio_coords is None:
            num_frames, height, width, fps = f.num_frames, f.height, f.width, f.fps
            grid = (num_frames, height, width, f.audio_num_frames)
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in grid):
                raise InputError(
                    f"{name}: without video_coords / audio_coords, num_frames, height, width and "
                    f"audio_num_frames must be positive Python ints; got {grid!r}."
                )
            if not (isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0):
                raise InputError(f"{name}: fps={fps!r} must be a positive number (frames per second).")
            vc, ac = self.rope_coords(b, num_frames, height, width, float(fps), f.audio_num_frames)
            video_coords = vc if video_coords is None else video_coords
            audio_coords = ac if audio_coords is None else audio_coords
        video_coords = self._host_coords(video_coords, "video_coords", (b, 3, n_v, 2))
        audio_coords = self._host_coords(audio_coords, "audio_coords", (b, 1, n_a, 2))
        return self.rope_tables(video_coords, audio_coords)

    def _keyframes(self, f: LTX2Forward, x: jax.Array, b: int, n_v: int) -> jax.Array:
        """``x`` with ``keyframes_abs_pos_embedding`` added to the tokens ``f.video_keyframes_mask``
        marks (LTX-2.5; ``x`` as it is without that parameter or mask).

        Raises:
            InputError: a mask not ``(B, N, 1)``.
        """
        mask = f.video_keyframes_mask
        if self.keyframes_abs_pos_embedding is None or mask is None:
            return x
        if tuple(jnp.shape(mask)) != (b, n_v, 1):
            raise InputError(
                f"{type(self).__name__}: video_keyframes_mask must be (B, N, 1)=({b}, {n_v}, 1); "
                f"got {tuple(jnp.shape(mask))}."
            )
        dt = self.dtype
        marker = (jnp.asarray(mask) > 0).astype(dt)
        return x + marker * self.keyframes_abs_pos_embedding[...].astype(dt)

    def _modulations(self, f: LTX2Forward, b: int, len_v: int, len_a: int) -> dict:
        """The :class:`LTX2BlockInputs` fields of the time embeddings: the streams' modulations
        and head embeddings, the prompt AdaLN's (LTX-2.3), the audio<->video attention's (from the
        other modality's sigma with ``use_cross_timestep``); per-token ones padded to the mesh
        lengths."""
        cfg, dt = self.config, self.dtype
        timestep, sigma = f.timestep, f.sigma
        audio_timestep = timestep if f.audio_timestep is None else f.audio_timestep
        audio_sigma = sigma if f.audio_sigma is None else f.audio_sigma
        use_cross_timestep = f.use_cross_timestep

        def emb(layer, t, length=None):
            mod, e = layer(jnp.reshape(t, (b, -1)), dt)
            if length is not None and mod.shape[1] > 1:
                mod = pad_tokens(mod, length)
            return mod, e

        video_mod, video_temb = emb(self.time_embed, timestep, len_v)
        audio_mod, audio_temb = emb(self.audio_time_embed, audio_timestep, len_a)
        prompt_mod = audio_prompt_mod = None
        if cfg.prompt_adaln:
            prompt_mod, _ = emb(self.prompt_adaln, sigma)
            audio_prompt_mod, _ = emb(self.audio_prompt_adaln, audio_sigma)
        gate_factor = cfg.cross_attn_timestep_scale_multiplier / cfg.timestep_scale_multiplier
        video_ca_t = audio_sigma if use_cross_timestep else timestep
        audio_ca_t = sigma if use_cross_timestep else audio_timestep
        video_ca_t, audio_ca_t = (jnp.asarray(t, _F32) for t in (video_ca_t, audio_ca_t))
        video_ca_mod, _ = emb(self.av_cross_attn_video_scale_shift, video_ca_t, len_v)
        video_ca_gate, _ = emb(self.av_cross_attn_video_a2v_gate, video_ca_t * gate_factor, len_v)
        audio_ca_mod, _ = emb(self.av_cross_attn_audio_scale_shift, audio_ca_t, len_a)
        audio_ca_gate, _ = emb(self.av_cross_attn_audio_v2a_gate, audio_ca_t * gate_factor, len_a)
        return dict(
            video_mod=video_mod,
            audio_mod=audio_mod,
            prompt_mod=prompt_mod,
            audio_prompt_mod=audio_prompt_mod,
            video_ca_mod=video_ca_mod,
            video_ca_gate=video_ca_gate,
            audio_ca_mod=audio_ca_mod,
            audio_ca_gate=audio_ca_gate,
            video_temb=video_temb,
            audio_temb=audio_temb,
        )

    def head(self, x: tuple, inputs: LTX2BlockInputs) -> tuple[jax.Array, jax.Array]:
        """Everything after the blocks: drop the padding, modulated output norms, projections.
        Returns ``(video (B, N, C_out), audio (B, M, C_a_out))`` in the compute dtype."""
        v, a = x[0][:, : inputs.n_video], x[1][:, : inputs.n_audio]
        shift, scale = table_modulation(self.scale_shift_table[...], inputs.video_temb[:, :, None])
        v = self.proj_out(modulate(self.norm_out(v, _F32), shift, scale, self.dtype))
        shift, scale = table_modulation(self.audio_scale_shift_table[...], inputs.audio_temb[:, :, None])
        a = self.audio_proj_out(modulate(self.audio_norm_out(a, _F32), shift, scale, self.dtype))
        return v, a

    # -- checks --------------------------------------------------------------------------------

    def _check_tokens(self, x, channels, key, field):
        if x.ndim != 3 or x.shape[-1] != channels:
            raise InputError(
                f"{type(self).__name__}: {key} must be packed tokens (B, tokens, {field}={channels}); "
                f"got shape {tuple(x.shape)}."
            )
        return x.shape[:2]

    def _host_coords(self, coords, key, shape):
        if isinstance(coords, jax.core.Tracer):
            raise InputError(
                f"{type(self).__name__}: {key} must be a concrete (host) array: the RoPE tables are "
                "computed in numpy float64; pass it outside jit."
            )
        c = np.asarray(coords, np.float32)
        if c.shape != shape:
            raise InputError(f"{type(self).__name__}: {key} must have shape {shape}; got {c.shape}.")
        return c


def _text_mask(mask):
    """A ``(B, L)`` 0/1 text mask as int32 key mask; an all-zero row attends every key (the
    reference's uniform bias); None stays None."""
    if mask is None:
        return None
    m = (jnp.asarray(mask) != 0).astype(jnp.int32)
    return jnp.where(m.any(axis=1, keepdims=True), m, 1)
