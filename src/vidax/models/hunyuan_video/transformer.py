"""HunyuanVideo 1.0 diffusion transformer (``diffusers.HunyuanVideoTransformer3DModel``, 0.42.1).

Reads top to bottom like the reference (``diffusers/models/transformers/transformer_hunyuan_video.py``)::

    timestep (B,) ──sinusoid(256)──timestep_embedder──┐
    guidance (B,) ──sinusoid(256)──guidance_embedder──┼─> temb (B, D)     (time_text_embed)
    pooled (B, D_clip) ──text_embedder (silu MLP)─────┘   [token_replace: the same with timestep 0]
    text (B, L_txt, D_llama), mask (B, L_txt) ──context_embedder (token refiner)──> text tokens (B, L_txt, D)
        masked mean ──time_text_embed(timestep)──> refiner temb;  proj_in;  refiner blocks with
        the self-attention mask (m_i & m_j) | (j == 0)
    latents (B, T, H, W, C_in) ──x_embedder (Conv3d as patch matmul)──> video tokens (B, L, D)
    transformer_blocks × num_layers (double stream, stacked, scanned):
        video and text each: AdaLN-zero modulation (norm1 / norm1_context), their own q/k/v,
        per-head RMSNorm, RoPE on the video q/k; one joint attention over [video; text];
        gated residual; modulated FFN (ff / ff_context)
    single_transformer_blocks × num_single_layers (single stream, stacked, scanned):
        one AdaLN-zero (shift, scale, gate) and one set of weights for all tokens:
        x += gate · proj_out([attention(LN(x)·(1+scale)+shift); gelu(proj_mlp(...))])
    video tokens ──norm_out (AdaLN continuous: scale, shift)──proj_out──unpatchify──> (B, T, H, W, C_out)

The residual stream through both stacks is the pair ``(video (B, L', D), text (B, L_txt', D))``;
the single-stream blocks, whose reference concatenates the two, apply the same row-wise layers to
each and concatenate only q, k, v for attention (the same arithmetic). Attention runs over the
joint sequence ``[video; text]``: a key is attended when it is a real video token or one of the
first ``sum(encoder_attention_mask[b])`` text tokens, as the reference's joint mask (which
assumes right padding), so each prompt of a batch sees only its own tokens. Padded text rows
carry values nothing real reads (masked as keys, dropped at the end).

Token replace (I2V ``image_condition_type="token_replace"``): the first frame's ``H/p · W/p`` video
tokens take the modulation (shift, scale, gate) of ``temb(timestep=0)`` in every block, the rest
of ``temb(timestep)``; the text stream always the latter.

Guidance: the model embeds ``guidance`` as given, with the same sinusoid as the timestep; the
reference *pipeline* passes ``guidance_scale * 1000`` (``pipeline_hunyuan_video.py``, "Prepare
guidance condition"), so callers pass ``1000 · guidance_scale``.

Mesh (:mod:`vidax.parallel`): heads over ``tensor`` (q/k/v and FFN-in column-parallel,
attention-out and FFN-out row-parallel, via GSPMD), batch over ``data``; Ulysses sequence
parallelism of the joint sequence over ``sequence``: video and text tokens are each padded to a
multiple of it (any token count) and split over it, the joint attention masked per token with
segment ids (the padding form, which cuDNN runs, whenever the video needs no padding). The token
refiner attends the short text locally with a dense mask (``xla``).

Precision: the timestep / guidance MLPs (float32 parameters, see
:func:`vidax.models.hunyuan_video.convert.transformer_policy`), LayerNorm / RMSNorm statistics,
the modulation arithmetic and gated residual adds, the RoPE rotation and the softmax are float32;
the residual stream is held in ``residual_dtype`` (float32 by default; ``None`` rounds it to the
compute dtype after every add, as the reference in bf16). In float32 this is the reference's
arithmetic.

Parameter paths mirror the diffusers state dict (``transformer_blocks.3.attn.to_q.weight`` ->
``transformer_blocks/attn/to_q/kernel`` with a leading layer axis); the key rules, parameter axes
and loader are in :mod:`vidax.models.hunyuan_video.convert`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import AdaLayerNorm, gated_add
from vidax.blocks.transformer import DiffusionTransformer, block_inputs, shared, static
from vidax.errors import InputError
from vidax.models.hunyuan_video.config import QK_NORMS, HunyuanVideoTransformerConfig
from vidax.models.hunyuan_video.rope import hunyuan_rope
from vidax.nn.attention import SegmentIds
from vidax.nn.layers import (
    FeedForward,
    Identity,
    LayerNorm,
    PatchEmbedding,
    TextProjection,
    TimestepEmbedding,
    gelu,
    linear,
    timestep_sinusoid,
    unpatchify_channels_first,
)
from vidax.nn.stack import stacked
from vidax.parallel.rules import constrain
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32
_EPS = 1e-6  # every LayerNorm / RMSNorm of the model


# ---------------------------------------------------------------------------------------------
# Embeddings


class ConditionEmbedding(nnx.Module):
    """diffusers ``HunyuanVideoConditionEmbedding`` (``guidance=True`` / ``token_replace``) and
    ``CombinedTimestepTextProjEmbeddings`` (the token refiner's, neither): the sum of the timestep
    MLP, the pooled-text MLP and (optionally) the guidance MLP; ``Timesteps(256, flip_sin_to_cos=
    True, downscale_freq_shift=0)`` features."""

    def __init__(self, dim, pooled_dim, guidance: bool, token_replace: bool, dtype, param_dtype, rngs):
        self.dtype = dtype
        self.token_replace = token_replace
        self.timestep_embedder = TimestepEmbedding(256, dim, rngs)
        self.text_embedder = TextProjection(pooled_dim, dim, dtype, param_dtype, rngs, act="silu")
        self.guidance_embedder = TimestepEmbedding(256, dim, rngs) if guidance else None

    def __call__(self, timestep, pooled, guidance=None):
        """``timestep`` ``(B,)``, ``pooled`` ``(B, D_pool)``, ``guidance`` ``(B,)`` or None ->
        ``(temb, token_replace_emb or None)``, each ``(B, D)`` float32."""
        text = self.text_embedder(pooled.astype(self.dtype)).astype(_F32)
        temb = self.timestep_embedder(timestep_sinusoid(timestep, 256)) + text
        tr = None
        if self.token_replace:
            tr = self.timestep_embedder(timestep_sinusoid(jnp.zeros_like(timestep), 256)) + text
        if self.guidance_embedder is not None:
            temb = temb + self.guidance_embedder(timestep_sinusoid(guidance, 256))
        return temb, tr


# ---------------------------------------------------------------------------------------------
# Token refiner (context_embedder)


class LinearSiLU(nnx.Module):
    """diffusers ``LinearActivation(activation="silu")``: ``silu(proj(x))``."""

    def __init__(self, din, dout, dtype, param_dtype, rngs):
        self.proj = linear(din, dout, dtype, param_dtype, rngs)

    def __call__(self, x):
        return jax.nn.silu(self.proj(x))


class RefinerFeedForward(nnx.Module):
    """diffusers ``FeedForward(activation_fn="linear-silu")``: ``net = [LinearSiLU, Dropout, Linear]``."""

    def __init__(self, dim, inner, dtype, param_dtype, rngs):
        self.net = nnx.List(
            [LinearSiLU(dim, inner, dtype, param_dtype, rngs), Identity(), linear(inner, dim, dtype, param_dtype, rngs)]
        )

    def __call__(self, x):
        for layer in self.net:
            x = layer(x)
        return x


class RefinerBlock(nnx.Module):
    """diffusers ``HunyuanVideoIndividualTokenRefinerBlock``: gated self-attention, gated FFN,
    the gates ``norm_out.linear(silu(temb))`` (``HunyuanVideoAdaNorm``)."""

    def __init__(self, cfg: HunyuanVideoTransformerConfig, dtype, residual_dtype, param_dtype, rngs):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.norm1 = LayerNorm(d, _EPS, True)
        # diffusers Attention(bias=True) + AttnProcessor2_0: plain self-attention of the text under a
        # dense mask, L_txt x L_txt: small, materialised ("xla") on every backend and mesh.
        self.attn = Attention(
            AttentionConfig(d, cfg.num_attention_heads, cfg.attention_head_dim), "xla", dtype, param_dtype, rngs
        )
        self.norm2 = LayerNorm(d, _EPS, True)
        self.ff = RefinerFeedForward(d, cfg.refiner_mlp_dim, dtype, param_dtype, rngs)
        # diffusers HunyuanVideoAdaNorm: the two gates linear(silu(temb)).
        self.norm_out = AdaLayerNorm(d, d, 2, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x, temb, bias):
        res = self.residual_dtype or self.dtype
        a = self.attn(self.norm1(x, self.dtype), mask=AttentionMask(bias=bias))
        gate_msa, gate_mlp = self.norm_out.modulation(temb)
        x = gated_add(x, a, gate_msa, res)
        return gated_add(x, self.ff(self.norm2(x, self.dtype)), gate_mlp, res)


class TokenRefiner(nnx.Module):
    """diffusers ``HunyuanVideoTokenRefiner``: masked-mean pooled text -> refiner temb, ``proj_in``,
    the ``token_refiner.refiner_blocks``.

    ``first_key``: the refiner's self-attention also lets every query see the first token (1.0's
    mask ``(m_i & m_j) | (j == 0)``); False: ``m_i & m_j`` (``HunyuanVideo15TokenRefiner``), where
    the padded queries, whose rows the reference leaves at zero attention and the model drops,
    attend to the padded keys here so that they stay finite."""

    def __init__(
        self, cfg: HunyuanVideoTransformerConfig, dtype, residual_dtype, param_dtype, rngs, first_key: bool = True
    ):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.first_key = first_key
        self.time_text_embed = ConditionEmbedding(d, cfg.text_embed_dim, False, False, dtype, param_dtype, rngs)
        self.proj_in = linear(cfg.text_embed_dim, d, dtype, param_dtype, rngs)
        blocks = [RefinerBlock(cfg, dtype, residual_dtype, param_dtype, rngs) for _ in range(cfg.num_refiner_layers)]
        self.token_refiner = nnx.Dict(refiner_blocks=nnx.List(blocks))

    def __call__(self, text, timestep, mask):
        """``text`` ``(B, L, D_text)``, ``timestep`` ``(B,)``, ``mask`` ``(B, L)`` 0/1 -> ``(B, L, D)``
        in the residual dtype."""
        m = mask.astype(_F32)[..., None]
        pooled = ((text.astype(_F32) * m).sum(axis=1) / m.sum(axis=1)).astype(text.dtype)
        temb, _ = self.time_text_embed(timestep, pooled)
        x = self.proj_in(text.astype(self.dtype)).astype(self.residual_dtype or self.dtype)
        valid = mask != 0
        if self.first_key:
            allowed = (valid[:, :, None] & valid[:, None, :]) | (jnp.arange(mask.shape[1]) == 0)[None, None, :]
        else:
            allowed = valid[:, :, None] == valid[:, None, :]
        bias = jnp.where(allowed, 0.0, -jnp.inf).astype(_F32)[:, None]  # (B, 1, L, L)
        for block in self.token_refiner["refiner_blocks"]:
            x = block(x, temb, bias)
        return x


# ---------------------------------------------------------------------------------------------
# Blocks


def _modulate(x, scale, shift, first=None, tr_scale=None, tr_shift=None):
    """``x·(1+scale)+shift`` in float32; with ``first`` ``(L, 1)`` bool, the rows where it is True
    take ``tr_scale`` / ``tr_shift`` instead (token replace). Modulations ``(B, 1, D)``."""
    out = x * (1 + scale) + shift
    if first is not None:
        out = jnp.where(first[None], x * (1 + tr_scale) + tr_shift, out)
    return out


def _gate(y, gate, first=None, tr_gate=None):
    """``y·gate`` in float32, ``tr_gate`` on the ``first`` rows when given."""
    out = y * gate
    if first is not None:
        out = jnp.where(first[None], y * tr_gate, out)
    return out


def _attention_config(cfg: HunyuanVideoTransformerConfig, **kw) -> AttentionConfig:
    """diffusers ``Attention`` + ``HunyuanVideoAttnProcessor2_0``: per-head norm of q and k
    (``qk_norm``, eps 1e-6), RoPE on the video stream only; one attention over the joint ``[video; text]``."""
    return AttentionConfig(
        cfg.inner_dim,
        cfg.num_attention_heads,
        cfg.attention_head_dim,
        qk_norm=QK_NORMS[cfg.qk_norm],
        qk_norm_eps=_EPS,
        rope="interleaved",
        **kw,
    )


class DoubleStreamBlock(nnx.Module):
    """diffusers ``HunyuanVideoTransformerBlock`` (``HunyuanVideoTokenReplaceTransformerBlock`` when
    the inputs carry a token-replace embedding: same parameters)."""

    def __init__(
        self, cfg: HunyuanVideoTransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None
    ):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        # diffusers AdaLayerNormZero (its LayerNorm is self.ln): 6 modulations per stream.
        ada = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm1 = AdaLayerNorm(d, d, 6, **ada)
        self.norm1_context = AdaLayerNorm(d, d, 6, **ada)
        # The text has its own add_{q,k,v}_proj, norm_added_{q,k} and to_add_out.
        self.attn = Attention(_attention_config(cfg, added="joint"), attention, dtype, param_dtype, rngs, mesh)
        self.ff = FeedForward(d, cfg.mlp_dim, d, True, dtype, param_dtype, rngs)
        self.ff_context = FeedForward(d, cfg.mlp_dim, d, True, dtype, param_dtype, rngs)
        self.ln = LayerNorm(d, _EPS, False)  # norm1.norm, norm2, norm2_context: no parameters

    def __call__(self, x, inputs: HunyuanBlockInputs):
        res = self.residual_dtype or self.dtype
        vid, txt = x
        f = inputs.first
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.norm1.modulation(inputs.temb)
        tr_shift_msa, tr_scale_msa, tr_gate_msa, tr_shift_mlp, tr_scale_mlp, tr_gate_mlp = self.norm1.modulation(
            inputs.tr_emb
        )
        c_shift_msa, c_scale_msa, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = self.norm1_context.modulation(
            inputs.temb
        )

        hv = _modulate(self.ln(vid, _F32), scale_msa, shift_msa, f, tr_scale_msa, tr_shift_msa)
        ht = _modulate(self.ln(txt, _F32), c_scale_msa, c_shift_msa)
        a_vid, a_txt = self.attn(
            (hv.astype(self.dtype), ht.astype(self.dtype)),
            rope=inputs.rope,
            mask=AttentionMask(segment_ids=inputs.segments),
        )
        vid = (vid.astype(_F32) + _gate(a_vid.astype(_F32), gate_msa, f, tr_gate_msa)).astype(res)
        txt = (txt.astype(_F32) + _gate(a_txt.astype(_F32), c_gate_msa)).astype(res)

        hv = _modulate(self.ln(vid, _F32), scale_mlp, shift_mlp, f, tr_scale_mlp, tr_shift_mlp)
        ht = _modulate(self.ln(txt, _F32), c_scale_mlp, c_shift_mlp)
        f_vid = self.ff(hv.astype(self.dtype)).astype(_F32)
        f_txt = self.ff_context(ht.astype(self.dtype)).astype(_F32)
        vid = (vid.astype(_F32) + _gate(f_vid, gate_mlp, f, tr_gate_mlp)).astype(res)
        txt = (txt.astype(_F32) + _gate(f_txt, c_gate_mlp)).astype(res)
        return vid, txt


class SingleStreamBlock(nnx.Module):
    """diffusers ``HunyuanVideoSingleTransformerBlock`` (``HunyuanVideoTokenReplaceSingleTransformerBlock``
    with a token-replace embedding: same parameters)."""

    def __init__(
        self, cfg: HunyuanVideoTransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None
    ):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.mesh = mesh
        # diffusers AdaLayerNormZeroSingle (its LayerNorm is self.ln): shift, scale, gate.
        self.norm = AdaLayerNorm(d, d, 3, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        # pre_only: the same to_{q,k,v} for both streams and no output projection.
        self.attn = Attention(_attention_config(cfg, out=None), attention, dtype, param_dtype, rngs, mesh)
        self.proj_mlp = linear(d, cfg.mlp_dim, dtype, param_dtype, rngs)
        self.proj_out = linear(d + cfg.mlp_dim, d, dtype, param_dtype, rngs)
        self.ln = LayerNorm(d, _EPS, False)

    def _mlp(self, h):
        y = constrain(self.proj_mlp(h), ("batch", "seq", "mlp"), self.mesh)
        return gelu(y, True)

    def __call__(self, x, inputs: HunyuanBlockInputs):
        res = self.residual_dtype or self.dtype
        vid, txt = x
        f = inputs.first
        shift, scale, gate = self.norm.modulation(inputs.temb)
        tr_shift, tr_scale, tr_gate = self.norm.modulation(inputs.tr_emb)
        hv = _modulate(self.ln(vid, _F32), scale, shift, f, tr_scale, tr_shift).astype(self.dtype)
        ht = _modulate(self.ln(txt, _F32), scale, shift).astype(self.dtype)
        a_vid, a_txt = self.attn((hv, ht), rope=inputs.rope, mask=AttentionMask(segment_ids=inputs.segments))
        o_vid = self.proj_out(jnp.concatenate([a_vid, self._mlp(hv)], axis=-1)).astype(_F32)
        o_txt = self.proj_out(jnp.concatenate([a_txt, self._mlp(ht)], axis=-1)).astype(_F32)
        vid = (vid.astype(_F32) + _gate(o_vid, gate, f, tr_gate)).astype(res)
        txt = (txt.astype(_F32) + _gate(o_txt, gate)).astype(res)
        return vid, txt


# ---------------------------------------------------------------------------------------------
# Model


@block_inputs
class HunyuanBlockInputs:
    """What the blocks and the head read (from :meth:`HunyuanVideoTransformer3DModel.embed`).

    Attributes:
        temb: conditioning ``(B, D)`` float32 (timestep + guidance + pooled text).
        tr_emb: token replace: the same with timestep 0, ``(B, D)`` float32; else None.
        rope: ``(cos, sin)`` of the video tokens, each ``(L', K/2)`` float32 (padded rows zero).
        segments: :class:`~vidax.nn.attention.SegmentIds` of the joint ``[video; text]``
            sequence ``(B, L' + L_txt')``: real video tokens and each prompt's real text tokens 1.
        first: token replace: ``(L', 1)`` bool, True on the first frame's video tokens; else None.
        n_vid: static; real video tokens ``L``.
        grid: static; the token grid ``(T/p_t, H/p, W/p)``.
    """

    temb: jax.Array
    tr_emb: jax.Array | None
    rope: tuple = shared()
    segments: SegmentIds
    first: jax.Array | None = shared()
    n_vid: int = static()
    grid: tuple = static()


def joint_streams(
    model: DiffusionTransformer, vid: jax.Array, txt: jax.Array, text_len: jax.Array, grid: tuple[int, int, int]
) -> tuple[tuple[jax.Array, jax.Array], tuple, SegmentIds]:
    """The streams, RoPE and segment ids of the joint ``[video; text]`` attention of ``model``.

    Args:
        model: the transformer (its mesh's sequence padding, residual dtype and ``config``'s RoPE).
        vid: video tokens ``(B, L, D)``, all real.
        txt: text tokens ``(B, L_txt, D)`` whose first ``text_len[b]`` are real (``text_len``
            ``(B,)`` int32).
        grid: the video token grid ``(T/p_t, H/p, W/p)``.

    Returns:
        ``((video (B, L', D), text (B, L_txt', D)), (cos, sin) (L', K/2), segments)``: each stream
        padded to a multiple of the mesh's ``sequence`` axis, in the residual dtype; the RoPE of
        the video tokens (padded rows zero); segment ids 1 on the real tokens and 0 on the padding,
        in the padding form (real tokens a prefix, what cuDNN runs) when the video needs none.
    """
    n_vid, n_txt = vid.shape[1], txt.shape[1]
    (lv, _), (lt, _) = model.sequence_length(n_vid), model.sequence_length(n_txt)
    vid, txt = model.stream(pad_tokens(vid, lv)), model.stream(pad_tokens(txt, lt))
    rope = tuple(pad_tokens(r, lv, axis=0) for r in hunyuan_rope(model.config, grid))
    b = text_len.shape[0]
    if lv == n_vid:
        return (vid, txt), rope, SegmentIds.for_padding(b, lv + lt, lv + lt, n_vid + text_len, n_vid + text_len)
    ids = jnp.concatenate(
        [
            jnp.broadcast_to(jnp.arange(lv) < n_vid, (b, lv)),
            jnp.arange(lt)[None] < text_len[:, None],
        ],
        axis=1,
    ).astype(jnp.int32)
    return (vid, txt), rope, SegmentIds(ids, ids)


def video_head(model: DiffusionTransformer, x, inputs: HunyuanBlockInputs) -> jax.Array:
    """The head of a model of (video, text) streams: the real video tokens, ``model.norm_out``
    (AdaLN continuous: scale, shift of ``inputs.temb``), ``model.proj_out``, unpatchify (features
    ``(C, p_t, p, p)``) -> ``(B, T, H, W, C_out)`` in the compute dtype."""
    cfg = model.config
    vid = x[0][:, : inputs.n_vid]
    scale, shift = model.norm_out.modulation(inputs.temb)
    out = model.proj_out(model.norm_out(vid, shift, scale, model.dtype))
    return unpatchify_channels_first(out, inputs.grid, cfg.patch_size_t, cfg.patch_size)


class HunyuanVideoTransformer3DModel(DiffusionTransformer):
    """The HunyuanVideo 1.0 diffusion transformer; follows ``diffusers.HunyuanVideoTransformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`HunyuanVideoTransformerConfig`; ``residual_dtype`` is that of
    the video, text and refiner streams; ``attention`` is the joint attention's: the token
    refiner always materialises its short ``L_txt²`` scores). Two block stacks run in turn over
    the pair of streams ``(video, text)``. Call ``model(hidden_states, timestep,
    encoder_hidden_states, encoder_attention_mask, pooled_projections, guidance=None)`` (see
    :meth:`embed`).
    """

    block_stacks = ("transformer_blocks", "single_transformer_blocks")

    def build(self, cfg: HunyuanVideoTransformerConfig, param_dtype, attention, rngs):
        dtype = self.dtype
        d = cfg.inner_dim
        self.x_embedder = nnx.Dict(proj=PatchEmbedding(cfg.patch, cfg.in_channels, d, dtype, param_dtype, rngs))
        self.context_embedder = TokenRefiner(cfg, dtype, self.residual_dtype, param_dtype, rngs)
        self.time_text_embed = ConditionEmbedding(
            d, cfg.pooled_projection_dim, cfg.guidance_embeds, cfg.token_replace, dtype, param_dtype, rngs
        )
        self.transformer_blocks = stacked(
            lambda r: DoubleStreamBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_layers,
            rngs,
        )
        self.single_transformer_blocks = stacked(
            lambda r: SingleStreamBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_single_layers,
            rngs,
        )
        # diffusers AdaLayerNormContinuous(elementwise_affine=False, eps=1e-6): scale, shift (scale first).
        self.norm_out = AdaLayerNorm(d, d, 2, dtype=dtype, param_dtype=param_dtype, rngs=rngs, norm_eps=_EPS)
        self.proj_out = linear(d, cfg.out_dim * cfg.patch_size_t * cfg.patch_size**2, dtype, param_dtype, rngs)

    def embed(
        self, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask, pooled_projections, guidance=None
    ) -> tuple[tuple[jax.Array, jax.Array], HunyuanBlockInputs]:
        """Everything before the blocks: RoPE, conditioning, patch embedding, token refiner, the
        joint-attention segment ids.

        Args:
            hidden_states: latents ``(B, T, H, W, C_in)`` channels-last (the reference takes
                ``(B, C, T, H, W)``); T divisible by ``patch_size_t``, H and W by ``patch_size``.
                ``latent_concat`` I2V: the 33 channels the pipeline concatenates.
            timestep: ``(B,)`` diffusion time in [0, 1000] (not sigma), float or int.
            encoder_hidden_states: Llama states ``(B, L_txt, text_embed_dim)``.
            encoder_attention_mask: ``(B, L_txt)`` 0/1 (bool or int); each row needs a real token.
                The refiner uses the mask as given; the joint attention, as the reference, the
                first ``sum(mask[b])`` text tokens (right padding).
            pooled_projections: CLIP pooled text ``(B, pooled_projection_dim)``.
            guidance: ``(B,)`` embedded guidance, ``1000 · guidance_scale`` as the reference
                pipeline passes it; required iff ``guidance_embeds``.

        Returns:
            ``((video (B, L', D), text (B, L_txt', D)), inputs)``: the residual streams in the
            residual dtype (each padded to a multiple of the mesh's ``sequence`` axis) and the
            :class:`HunyuanBlockInputs`. The model call returns the flow
            ``(B, T, H, W, out_channels)`` in the compute dtype.

        Raises:
            InputError: shapes that do not fit the config, a missing or unexpected ``guidance``.
        """
        cfg = self.config
        grid = self._check_inputs(
            hidden_states, timestep, encoder_hidden_states, encoder_attention_mask, pooled_projections, guidance
        )
        b = hidden_states.shape[0]
        res = self.res_dtype
        timestep = jnp.reshape(timestep, (b,))
        temb, tr_emb = self.time_text_embed(
            timestep, pooled_projections, None if guidance is None else jnp.reshape(guidance, (b,))
        )
        vid = self.x_embedder["proj"](hidden_states.astype(self.dtype)).astype(res)
        txt = self.context_embedder(encoder_hidden_states, timestep, encoder_attention_mask)

        text_len = (encoder_attention_mask != 0).sum(axis=1).astype(jnp.int32)  # (B,)
        (vid, txt), rope, segments = joint_streams(self, vid, txt, text_len, grid)
        lv, n_vid = vid.shape[1], grid[0] * grid[1] * grid[2]
        first = None
        if cfg.token_replace:
            first = (jnp.arange(lv) < grid[1] * grid[2])[:, None]
        return (vid, txt), HunyuanBlockInputs(temb, tr_emb, rope, segments, first, n_vid, grid)

    def hidden_rows(self, inputs: HunyuanBlockInputs) -> tuple[int, int]:
        """The real video rows of the video stream (the reference's ``hidden_states``)."""
        return 0, inputs.n_vid

    def head(self, x, inputs: HunyuanBlockInputs) -> jax.Array:
        """Everything after the blocks: the real video tokens, ``norm_out``, ``proj_out``,
        unpatchify (features ``(C, p_t, p, p)``) -> ``(B, T, H, W, C_out)`` in the compute dtype."""
        return video_head(self, x, inputs)

    def _check_inputs(self, x, timestep, text, mask, pooled, guidance) -> tuple[int, int, int]:
        cfg = self.config
        name = type(self).__name__
        pt, p = cfg.patch_size_t, cfg.patch_size
        grid = self.check_latents(x, cfg.in_channels, (pt, p, p), patch_name="(patch_size_t, patch_size, patch_size)")
        b = x.shape[0]
        if tuple(jnp.shape(timestep)) not in ((b,), ()):
            raise InputError(f"{name}: timestep must have shape (B,)=({b},); got {tuple(jnp.shape(timestep))}.")
        self.check_text(text, b, cfg.text_embed_dim, "text_embed_dim=")
        if tuple(mask.shape) != tuple(text.shape[:2]):
            raise InputError(
                f"{name}: encoder_attention_mask must be (B, L_txt)={tuple(text.shape[:2])}; got {tuple(mask.shape)}."
            )
        if tuple(pooled.shape) != (b, cfg.pooled_projection_dim):
            raise InputError(
                f"{name}: pooled_projections must be (B, pooled_projection_dim)=({b}, {cfg.pooled_projection_dim}); "
                f"got {tuple(pooled.shape)}."
            )
        if cfg.guidance_embeds and guidance is None:
            raise InputError(
                f"{name}: this model embeds guidance (guidance_embeds=true); pass guidance (B,) = "
                "1000 * guidance_scale, as the reference pipeline does."
            )
        if not cfg.guidance_embeds and guidance is not None:
            raise InputError(
                f"{name}: guidance was given but this model has no guidance embedder (guidance_embeds=false)."
            )
        if guidance is not None and tuple(jnp.shape(guidance)) not in ((b,), ()):
            raise InputError(f"{name}: guidance must have shape (B,)=({b},); got {tuple(jnp.shape(guidance))}.")
        return grid
