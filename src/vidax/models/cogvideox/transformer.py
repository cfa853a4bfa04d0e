"""CogVideoX / CogVideoX1.5 diffusion transformer (``diffusers.CogVideoXTransformer3DModel``).

Reads top to bottom like the reference::

    timestep (B,) ──sinusoid(D)──time_embedding──> temb (B, E)   [+ ofs (1,) ──sinusoid──ofs_embedding]
    text (B, L_txt, D_txt) ──patch_embed.text_proj──> text tokens (B, L_txt, D)
    latents (B, T, H, W, C_in) ──patch_embed.proj──> video tokens (B, L, D)
        1.0: a p x p convolution per frame, L = T · H/p · W/p
        1.5: a linear map of (C, p_t, p, p) patches, L = T/p_t · H/p · W/p
    [+ sincos (2B) or learned (5B-I2V) position table]        [3-D RoPE on video q/k (5B, 1.5)]
    one joint sequence x = [text; video] (B, L_txt + L, D)
    transformer_blocks × num_layers (stacked, run with a scan):
        shift, scale, gate, e_shift, e_scale, e_gate = norm1.linear(silu(temb))
        per token: (e_shift, e_scale, e_gate) on text tokens, (shift, scale, gate) on video tokens
        x += gate · self_attention(LN(x)·(1+scale)+shift)     (one LN, RoPE on the video rows)
        the same with norm2 and a feed-forward network
    video rows of x ──norm_final──norm_out (AdaLN: shift, scale)──proj_out──unpatchify──> (B, T, H, W, C_out)

The reference keeps text and video as two streams and concatenates them around attention and the
feed-forward network; here the blocks run on the concatenation throughout, and what differs per
token is expressed per token (the modulation picked by an ``is_text`` mask, RoPE tables with
identity rows ``cos = 1, sin = 0`` on the text positions), which is the same arithmetic. On a
mesh (:mod:`vidax.parallel`) this one sequence is padded to a multiple of the ``sequence`` axis
and split over it like Wan's video tokens (the padded keys masked), so the text tokens are not
replicated on every sequence shard; see ``docs/parallelism.md``.

The RoPE tables and the crop / slice of the position grid follow the reference pipelines'
``_prepare_rotary_positional_embeddings`` (the reference computes them in the pipeline; here the
model computes them from its config and the latent grid, so a bare model call is complete).

Precision: the timestep (and ofs) MLPs and all LayerNorm parameters are float32
(:func:`vidax.models.cogvideox.convert.transformer_policy`); the timestep MLPs, LayerNorm
statistics and affine, modulation arithmetic, gated residual adds, the RoPE rotation and the
softmax are float32. The joint text + video residual stream is held in ``residual_dtype``
(float32 by default; ``None`` rounds it to the compute dtype after every add, as the reference
does in bf16). In float32 this is the reference's arithmetic.

Parameter paths mirror the diffusers state dict (``transformer_blocks.3.attn1.to_q.weight`` ->
``transformer_blocks/attn1/to_q/kernel`` with a leading layer axis); the key rules, parameter axes
and loader are in :mod:`vidax.models.cogvideox.convert`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import AdaLayerNorm, gated_add
from vidax.blocks.transformer import DiffusionTransformer, block_inputs, shared, static
from vidax.errors import InputError
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.nn.layers import (
    FeedForward,
    LayerNorm,
    activation,
    linear,
    matmul,
    patchify,
    timestep_sinusoid,
    unpatchify_channels_first,
)
from vidax.nn.stack import stacked
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32


# ---------------------------------------------------------------------------------------------
# Position tables (host, numpy)


def get_resize_crop_region_for_grid(src: tuple[int, int], tgt_width: int, tgt_height: int):
    """The reference pipelines' crop region of a ``(h, w)`` patch grid in a ``tgt`` base grid.

    Returns ``((top, left), (bottom, right))`` in base-grid units (Python floats rounded as the
    reference does).
    """
    tw, th = tgt_width, tgt_height
    h, w = src
    if h / w > th / tw:
        resize_height = th
        resize_width = int(round(th / h * w))
    else:
        resize_width = tw
        resize_height = int(round(tw / w * h))
    crop_top = int(round((th - resize_height) / 2.0))
    crop_left = int(round((tw - resize_width) / 2.0))
    return (crop_top, crop_left), (crop_top + resize_height, crop_left + resize_width)


def _linspace_f32(start: float, stop: float, num: int) -> np.ndarray:
    """``torch.linspace(start, stop, num, dtype=float32)`` to within an ulp: float32 step, the
    first half counted from ``start``, the second from ``stop`` (torch's scalar kernel)."""
    if num == 1:
        return np.array([start], np.float32)
    start32, stop32 = np.float32(start), np.float32(stop)
    step = (stop32 - start32) / np.float32(num - 1)
    i = np.arange(num)
    half = num // 2
    out = np.where(
        i < half,
        start32 + step * i.astype(np.float32),
        stop32 - step * (num - 1 - i).astype(np.float32),
    )
    return out.astype(np.float32)


def _rope_axis(dim: int, pos: np.ndarray, theta: float = 10000.0) -> np.ndarray:
    """``get_1d_rotary_pos_embed(dim, pos, use_real=True)`` angles, float32 as the reference:
    ``(n, dim // 2)`` = ``outer(pos, 1 / theta ** (arange(0, dim, 2) / dim))``."""
    exps = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    freqs = (np.float32(1.0) / np.power(np.float32(theta), exps)).astype(np.float32)
    return np.outer(pos.astype(np.float32), freqs).astype(np.float32)


@functools.lru_cache(maxsize=32)
def rope_axis_tables(config: CogVideoXTransformerConfig, grid: tuple[int, int, int]):
    """Per-axis cos and sin tables of the video tokens' 3-D RoPE, as the reference pipelines build
    them (:func:`cogvideox_rope` assembles them per token).

    CogVideoX 1.0 (``patch_size_t`` None): the patch grid is placed in the base grid
    ``(sample_height / p, sample_width / p)`` with :func:`get_resize_crop_region_for_grid` and its
    positions are ``linspace`` over the crop region (``grid_type="linspace"``). CogVideoX 1.5:
    integer positions ``0 .. n-1`` along each axis (``grid_type="slice"``), which must fit in the
    base grid.

    Args:
        config: the transformer config.
        grid: ``(t, h, w)`` patches along frames, rows and columns.

    Returns:
        ``((cos_t, sin_t), (cos_h, sin_h), (cos_w, sin_w))`` float32 numpy, ``(n_axis, d_axis / 2)``
        with ``(d_t, d_h, d_w) = config.rope_split`` (angles in float32 as the reference, cos / sin
        evaluated in float64 and rounded).

    Raises:
        InputError: a 1.5 grid larger than the base grid (the reference fails there).
    """
    t, h, w = grid
    p = config.patch_size
    base_h, base_w = config.sample_height // p, config.sample_width // p
    if config.patch_size_t is None:
        (top, left), (bottom, right) = get_resize_crop_region_for_grid((h, w), base_w, base_h)
        positions = (
            _linspace_f32(0, t * (t - 1) / t, t),
            _linspace_f32(top, bottom * (h - 1) / h, h),
            _linspace_f32(left, right * (w - 1) / w, w),
        )
    else:
        if h > base_h or w > base_w:
            raise InputError(
                f"CogVideoX1.5 RoPE: the video has {h}x{w} patches but the model's position grid "
                f"is {base_h}x{base_w} (sample_height/sample_width / patch_size); use a smaller "
                "height/width (the reference fails for this size too)."
            )
        positions = tuple(np.arange(n, dtype=np.float32) for n in grid)
    tables = []
    for dim, pos in zip(config.rope_split, positions):
        ang = _rope_axis(dim, pos).astype(np.float64)
        tables.append((np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)))
    return tuple(tables)


def cogvideox_rope(config: CogVideoXTransformerConfig, grid: tuple[int, int, int]) -> tuple[jax.Array, jax.Array]:
    """cos and sin of the 3-D RoPE per video token, ``(t·h·w, K/2)`` float32 each (tokens t-major,
    then h, w; pairs ``[K/8 frame | 3K/16 row | 3K/16 column]``), assembled on device from
    :func:`rope_axis_tables` (so no ``L x K`` constant is baked into a compiled program).

    Raises:
        InputError: see :func:`rope_axis_tables`.
    """
    return tuple(_broadcast_axes(grid, [jnp.asarray(tab[k]) for tab in rope_axis_tables(config, grid)]) for k in (0, 1))


def _broadcast_axes(grid: tuple[int, int, int], parts: list) -> jax.Array:
    """Per-axis tables ``(t, a)``, ``(h, b)``, ``(w, c)`` -> ``(t·h·w, a + b + c)`` per token."""
    t, h, w = grid
    full = [
        jnp.broadcast_to(parts[0][:, None, None, :], (t, h, w, parts[0].shape[-1])),
        jnp.broadcast_to(parts[1][None, :, None, :], (t, h, w, parts[1].shape[-1])),
        jnp.broadcast_to(parts[2][None, None, :, :], (t, h, w, parts[2].shape[-1])),
    ]
    return jnp.concatenate(full, axis=-1).reshape(t * h * w, -1)


def _sincos_1d(dim: int, pos: np.ndarray) -> np.ndarray:
    """``get_1d_sincos_pos_embed_from_grid``: float64 ``[sin(pos·ω), cos(pos·ω)]``, ω = 10000^(-2i/dim)."""
    omega = np.arange(dim // 2, dtype=np.float64) / (dim / 2.0)
    omega = 1.0 / 10000**omega
    out = np.outer(pos.reshape(-1).astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


@functools.lru_cache(maxsize=32)
def sincos_axis_tables(config: CogVideoXTransformerConfig, grid: tuple[int, int, int]):
    """The factors of the reference's ``get_3d_sincos_pos_embed`` for a ``(t, h, w)`` grid.

    Per token the reference's table is ``[temporal (D/4) | sin-cos of the column (3D/8) | of the
    row (3D/8)]``, positions divided by the temporal / spatial interpolation scales (float32, as
    the reference), values in float64 rounded to float32.

    Returns:
        ``(temporal (t, D/4), column (w, 3D/8), row (h, 3D/8))`` float32 numpy.
    """
    t, h, w = grid
    d = config.inner_dim
    ds = 3 * d // 4
    scale = np.float32(config.spatial_interpolation_scale)
    column = _sincos_1d(ds // 2, np.arange(w, dtype=np.float32) / scale)
    row = _sincos_1d(ds // 2, np.arange(h, dtype=np.float32) / scale)
    temporal = _sincos_1d(d // 4, np.arange(t, dtype=np.float32) / np.float32(config.temporal_interpolation_scale))
    return temporal.astype(np.float32), column.astype(np.float32), row.astype(np.float32)


def sincos_position_table(config: CogVideoXTransformerConfig, grid: tuple[int, int, int]) -> jax.Array:
    """The video rows of the reference's sincos position table, ``(t·h·w, D)`` float32 (tokens
    t-major, then h, w), assembled on device from :func:`sincos_axis_tables`."""
    temporal, column, row = (jnp.asarray(a) for a in sincos_axis_tables(config, grid))
    t, h, w = grid
    spatial = jnp.concatenate(
        [
            jnp.broadcast_to(column[None], (h, w, column.shape[-1])),
            jnp.broadcast_to(row[:, None], (h, w, row.shape[-1])),
        ],
        axis=-1,
    )
    return _broadcast_axes((t, 1, h * w), [temporal, jnp.zeros((1, 0), jnp.float32), spatial.reshape(h * w, -1)])


# ---------------------------------------------------------------------------------------------
# Layers


class TimestepEmbedding(nnx.Module):
    """diffusers ``TimestepEmbedding(in, out, act)``: ``linear_2(act(linear_1(x)))`` in float32."""

    def __init__(self, cin: int, dim: int, act: str, rngs: nnx.Rngs):
        self.linear_1 = linear(cin, dim, _F32, _F32, rngs)
        self.linear_2 = linear(dim, dim, _F32, _F32, rngs)
        self.act = act

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(activation(self.act)(self.linear_1(x.astype(_F32))))


class PatchConv(nnx.Module):
    """``nn.Conv2d(C_in, D, kernel=stride=p)`` applied to every frame, as patchify + matmul.

    ``kernel`` ``(p, p, C_in, D)`` (the loader's conv2d layout), optional ``bias`` ``(D,)``.
    """

    def __init__(self, p: int, cin: int, dim: int, use_bias: bool, dtype, param_dtype, rngs: nnx.Rngs):
        self.p = p
        self.dtype = dtype
        self.kernel = nnx.Param(
            jax.random.normal(rngs.params(), (p, p, cin, dim), param_dtype) / math.sqrt(cin * p * p)
        )
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype)) if use_bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        """``(B, T, H, W, C_in)`` -> ``(B, T·H/p·W/p, D)`` (frame, row, column order)."""
        cols = patchify(x, (1, self.p, self.p))  # features (p_h, p_w, C)
        kernel = self.kernel[...].reshape(-1, self.kernel.shape[-1]).astype(self.dtype)
        y = matmul("blc,cd->bld", cols, kernel, self.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


def patchify_channels_first(x: jax.Array, pt: int, p: int) -> jax.Array:
    """``(B, T, H, W, C)`` -> ``(B, T/p_t·H/p·W/p, C·p_t·p·p)``, features ordered ``(C, p_t, p_h, p_w)``
    (the reference's 1.5 patch embedding and its output projection's order)."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // pt, pt, h // p, p, w // p, p, c)
    x = x.transpose(0, 1, 3, 5, 7, 2, 4, 6)
    return x.reshape(b, (t // pt) * (h // p) * (w // p), c * pt * p * p)


class CogVideoXPatchEmbed(nnx.Module):
    """diffusers ``CogVideoXPatchEmbed``: text projection, video patch embedding, position table.

    ``proj`` is a per-frame convolution (1.0) or a linear map of ``(C, p_t, p, p)`` patches (1.5);
    ``pos_embedding`` ``(1, max_text_seq_length + num_patches, D)`` exists only for learned
    position embeddings (the reference's persistent buffer).
    """

    def __init__(self, cfg: CogVideoXTransformerConfig, dtype, param_dtype, rngs: nnx.Rngs):
        d = cfg.inner_dim
        p = cfg.patch_size
        if cfg.patch_size_t is None:
            self.proj = PatchConv(p, cfg.in_channels, d, cfg.patch_bias, dtype, param_dtype, rngs)
        else:
            self.proj = linear(cfg.in_channels * p * p * cfg.patch_size_t, d, dtype, param_dtype, rngs)
        self.text_proj = linear(cfg.text_embed_dim, d, dtype, param_dtype, rngs)
        if cfg.use_learned_positional_embeddings:
            n = _sample_num_patches(cfg)
            self.pos_embedding = nnx.Param(jnp.zeros((1, cfg.max_text_seq_length + n, d), param_dtype))
        else:
            self.pos_embedding = None
        self.cfg = cfg
        self.dtype = dtype

    def video(self, x: jax.Array) -> jax.Array:
        """Latents ``(B, T, H, W, C_in)`` -> video tokens ``(B, L, D)`` in the compute dtype."""
        cfg = self.cfg
        if cfg.patch_size_t is None:
            return self.proj(x)
        return self.proj(patchify_channels_first(x.astype(self.dtype), cfg.patch_size_t, cfg.patch_size))

    def position_table(self, grid: tuple[int, int, int], text_len: int):
        """``(text rows, video rows)`` float32 to add to the tokens, or ``None`` (RoPE only).

        The learned table is used when the latent size and frame count equal the training ones
        (``sample_height``, ``sample_width``, ``sample_frames``); otherwise the reference
        recomputes the sincos table (zero text rows) for this grid, learned model or not.
        """
        cfg = self.cfg
        if not cfg.uses_position_table:
            return None
        t, h, w = grid
        p = cfg.patch_size
        frames = (t - 1) * cfg.temporal_compression_ratio + 1
        if text_len != cfg.max_text_seq_length:
            raise InputError(
                f"CogVideoXTransformer3DModel: this model adds a position table made for "
                f"max_text_seq_length={cfg.max_text_seq_length} text tokens; got {text_len} "
                "(pass max_sequence_length equal to it, as the reference requires)."
            )
        if self.pos_embedding is not None and (h * p, w * p) != (cfg.sample_height, cfg.sample_width):
            raise InputError(
                f"CogVideoXTransformer3DModel: this model's learned position table is for latents of "
                f"{cfg.sample_height}x{cfg.sample_width} (height x width); "
                f"got {h * p}x{w * p}. The reference cannot generate at another resolution either."
            )
        if self.pos_embedding is not None and frames == cfg.sample_frames:
            table = self.pos_embedding[...].astype(_F32)[0]
            return table[:text_len], table[text_len:]
        return None, sincos_position_table(cfg, grid)


def _sample_num_patches(cfg: CogVideoXTransformerConfig) -> int:
    """Video tokens of the training size: ``(H/p)·(W/p)·((frames-1)/tcr + 1)`` (the table length)."""
    p = cfg.patch_size
    frames = (cfg.sample_frames - 1) // cfg.temporal_compression_ratio + 1
    return (cfg.sample_height // p) * (cfg.sample_width // p) * frames


class CogVideoXBlock(nnx.Module):
    """diffusers ``CogVideoXBlock``: adaptive-norm joint attention, then adaptive-norm FFN."""

    def __init__(self, cfg: CogVideoXTransformerConfig, attention, dtype, residual_dtype, param_dtype, rngs, mesh=None):
        d = cfg.inner_dim
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        # diffusers CogVideoXLayerNormZero: linear(silu(temb)) -> 6 modulations (the e_* ones on
        # the text tokens), one LayerNorm for the joint sequence.
        ada = dict(
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
            norm_eps=cfg.norm_eps,
            norm_affine=cfg.norm_elementwise_affine,
            mesh=mesh,
        )
        self.norm1 = AdaLayerNorm(cfg.time_embed_dim, d, 6, **ada)
        # diffusers Attention + CogVideoXAttnProcessor2_0: per-head LayerNorm on q and k (eps 1e-6),
        # RoPE on the video q and k (identity rows elsewhere).
        self.attn1 = Attention(
            AttentionConfig(
                d,
                cfg.num_attention_heads,
                cfg.attention_head_dim,
                bias=cfg.attention_bias,
                qk_norm="layer_head",
                qk_norm_eps=1e-6,
                rope="interleaved",
            ),
            attention,
            dtype,
            param_dtype,
            rngs,
            mesh,
        )
        self.norm2 = AdaLayerNorm(cfg.time_embed_dim, d, 6, **ada)
        self.ff = FeedForward(d, 4 * d, d, cfg.activation_fn, dtype, param_dtype, rngs)

    def __call__(self, x, temb, rope, is_text, valid_length=None):
        """One block over the joint sequence.

        Args:
            x: joint residual ``(B, L, D)``, text tokens first (then video, then padding).
            temb: ``(B, E)`` float32 timestep embedding.
            rope: ``(cos, sin)`` ``(L, K/2)`` float32 (identity rows off the video) or ``None``.
            is_text: ``(L, 1)`` bool, True on the text tokens.
            valid_length: tokens before it are real, the rest padding; None: all real.

        Returns:
            ``(B, L, D)`` in the residual dtype.
        """
        res = self.residual_dtype or self.dtype
        h, gate = self._modulated(self.norm1, x, temb, is_text)
        x = gated_add(x, self.attn1(h, rope=rope, mask=AttentionMask(valid_length)), gate, res)

        h, gate = self._modulated(self.norm2, x, temb, is_text)
        return gated_add(x, self.ff(h), gate, res)

    def _modulated(self, norm: AdaLayerNorm, x, temb, is_text):
        """``LN(x)·(1+scale)+shift`` in the compute dtype and the gate (float32), with the text
        modulations (``e_*``) on the text tokens (``is_text`` ``(L, 1)``) and the video ones elsewhere."""
        shift, scale, gate, e_shift, e_scale, e_gate = norm.modulation(temb)

        def pick(text, video):
            return jnp.where(is_text, text, video)

        return norm(x, pick(e_shift, shift), pick(e_scale, scale), self.dtype), pick(e_gate, gate)


# ---------------------------------------------------------------------------------------------
# Model


@block_inputs
class CogVideoXBlockInputs:
    """What the blocks and the head read (from :meth:`CogVideoXTransformer3DModel.embed`).

    Attributes:
        temb: time (+ ofs) embedding ``(B, D_t)`` float32.
        rope: ``(cos, sin)`` each ``(L', K)`` float32 (identity on text and padding rows), or None.
        is_text: ``(L', 1)`` bool, True on the text rows.
        valid_length: static; real tokens when ``L'`` is padded, else None.
        n_txt: static; text tokens at the front. n_tok: static; text + video tokens.
        grid: static; the token grid ``(T/p_t, H/p, W/p)``.
    """

    temb: jax.Array
    rope: tuple | None = shared()
    is_text: jax.Array = shared()
    valid_length: int | None = static()
    n_txt: int = static()
    n_tok: int = static()
    grid: tuple = static()


class CogVideoXTransformer3DModel(DiffusionTransformer):
    """The CogVideoX diffusion transformer; follows ``diffusers.CogVideoXTransformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`CogVideoXTransformerConfig`); the mesh's ``sequence`` axis
    splits the joint ``[text; video]`` sequence. Call ``model(hidden_states, timestep,
    encoder_hidden_states, ofs=None)`` (see :meth:`embed`).
    """

    block_stacks = ("transformer_blocks",)

    def build(self, cfg: CogVideoXTransformerConfig, param_dtype, attention, rngs):
        dtype, d = self.dtype, cfg.inner_dim
        self.patch_embed = CogVideoXPatchEmbed(cfg, dtype, param_dtype, rngs)
        self.time_embedding = TimestepEmbedding(d, cfg.time_embed_dim, cfg.timestep_activation_fn, rngs)
        if cfg.has_ofs:
            self.ofs_embedding = TimestepEmbedding(
                cfg.ofs_embed_dim, cfg.ofs_embed_dim, cfg.timestep_activation_fn, rngs
            )
        else:
            self.ofs_embedding = None
        self.transformer_blocks = stacked(
            lambda r: CogVideoXBlock(cfg, attention, dtype, self.residual_dtype, param_dtype, r, self.mesh),
            cfg.num_layers,
            rngs,
        )
        self.norm_final = LayerNorm(d, cfg.norm_eps, cfg.norm_elementwise_affine)
        # diffusers AdaLayerNorm(chunk_dim=1): shift, scale = linear(silu(temb)).
        self.norm_out = AdaLayerNorm(
            cfg.time_embed_dim,
            d,
            2,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
            norm_eps=cfg.norm_eps,
            norm_affine=cfg.norm_elementwise_affine,
        )
        p, pt = cfg.patch_size, cfg.patch_t
        self.proj_out = linear(d, p * p * pt * cfg.out_channels, dtype, param_dtype, rngs)

    def embed(self, hidden_states, timestep, encoder_hidden_states, ofs=None) -> tuple[jax.Array, CogVideoXBlockInputs]:
        """Everything before the blocks: time / ofs embedding, text projection, patch embedding,
        position table, the joint ``[text; video]`` sequence (padded to a multiple of the mesh's
        ``sequence`` axis) and RoPE.

        Args:
            hidden_states: latents ``(B, T, H, W, C_in)`` channels-last (the reference takes
                ``(B, T, C, H, W)``); H and W divisible by ``patch_size``, T by ``patch_size_t``.
            timestep: ``(B,)`` diffusion timestep in [0, num_train_timesteps), float or int.
            encoder_hidden_states: T5 states ``(B, L_txt, text_embed_dim)``; with a position table
                (2B, 5B-I2V) ``L_txt`` must equal ``max_text_seq_length``.
            ofs: ``(1,)`` or ``(B,)`` ofs value (the pipelines pass 2.0); required iff the config
                has ``ofs_embed_dim``.

        Returns:
            The residual stream ``(B, L', D)`` in the residual dtype and the
            :class:`CogVideoXBlockInputs`. The model call returns its output (v-prediction for
            the released checkpoints) ``(B, T, H, W, C_out)`` in the compute dtype.

        Raises:
            InputError: shapes that do not fit the config, a missing or unexpected ``ofs``.
        """
        cfg = self.config
        grid = self._check_inputs(hidden_states, timestep, encoder_hidden_states, ofs)
        b = hidden_states.shape[0]
        res = self.res_dtype

        temb = self.time_embedding(timestep_sinusoid(timestep.reshape(b), cfg.inner_dim, *cfg.sinusoid))
        if self.ofs_embedding is not None:
            ofs_emb = self.ofs_embedding(timestep_sinusoid(jnp.reshape(ofs, (-1,)), cfg.ofs_embed_dim, *cfg.sinusoid))
            temb = temb + ofs_emb

        ctx = self.patch_embed.text_proj(encoder_hidden_states.astype(self.dtype))
        x = self.patch_embed.video(hidden_states.astype(self.dtype))
        table = self.patch_embed.position_table(grid, ctx.shape[1])
        if table is not None:
            text_rows, video_rows = table
            x = x.astype(_F32) + video_rows[None]
            if text_rows is not None:
                ctx = ctx.astype(_F32) + text_rows[None]
        # One joint sequence [text; video], padded to a multiple of the mesh's sequence axis
        # (padded keys masked, padded rows dropped in head()).
        n_txt, n_vid = ctx.shape[1], x.shape[1]
        n_tok = n_txt + n_vid
        length, valid_length = self.sequence_length(n_tok)
        x = self.stream(pad_tokens(jnp.concatenate([ctx.astype(res), x.astype(res)], axis=1), length))
        is_text = (jnp.arange(length) < n_txt)[:, None]
        rope = None
        if cfg.use_rotary_positional_embeddings:
            # Identity rotation (cos 1, sin 0) on the text and padding rows.
            extra = ((n_txt, length - n_tok), (0, 0))
            cos, sin = cogvideox_rope(cfg, grid)
            rope = (jnp.pad(cos, extra, constant_values=1.0), jnp.pad(sin, extra))
        return x, CogVideoXBlockInputs(temb, rope, is_text, valid_length, n_txt, n_tok, grid)

    def run_block(self, block: CogVideoXBlock, x: jax.Array, inputs: CogVideoXBlockInputs) -> jax.Array:
        i = inputs
        return block(x, i.temb, i.rope, i.is_text, i.valid_length)

    def hidden_rows(self, inputs: CogVideoXBlockInputs) -> tuple[int, int]:
        """The video rows of the joint ``[text; video]`` stream (the reference's ``hidden_states``)."""
        return inputs.n_txt, inputs.n_tok

    def head(self, x: jax.Array, inputs: CogVideoXBlockInputs) -> jax.Array:
        """Everything after the blocks: the video rows, final norm, modulated output norm,
        ``proj_out``, unpatchify -> ``(B, T, H, W, C_out)`` in the compute dtype."""
        cfg, i = self.config, inputs
        x = self.norm_final(x[:, i.n_txt : i.n_tok], self.res_dtype)
        shift, scale = self.norm_out.modulation(i.temb)
        x = self.proj_out(self.norm_out(x, shift, scale, self.dtype))
        return unpatchify_channels_first(x, i.grid, cfg.patch_t, cfg.patch_size)

    def _check_inputs(self, x, timestep, text, ofs) -> tuple[int, int, int]:
        cfg = self.config
        name = type(self).__name__
        p, pt = cfg.patch_size, cfg.patch_t
        grid = self.check_latents(
            x,
            cfg.in_channels,
            (pt, p, p),
            patch_name="(patch_size_t, patch_size, patch_size)",
            hint=" (pipelines pad T for CogVideoX1.5)",
        )
        b = x.shape[0]
        if tuple(jnp.shape(timestep)) not in ((b,), ()):
            raise InputError(f"{name}: timestep must have shape (B,)=({b},); got {tuple(jnp.shape(timestep))}.")
        self.check_text(text, b, cfg.text_embed_dim, "text_embed_dim=")
        if cfg.has_ofs and ofs is None:
            raise InputError(
                f"{name}: this model has an ofs embedding (ofs_embed_dim={cfg.ofs_embed_dim}); pass ofs (the pipelines use 2.0)."
            )
        if not cfg.has_ofs and ofs is not None:
            raise InputError(f"{name}: ofs was given but this model has no ofs embedding (ofs_embed_dim is null).")
        if ofs is not None and jnp.size(ofs) not in (1, b):
            raise InputError(f"{name}: ofs must have 1 or B={b} entries; got shape {tuple(jnp.shape(ofs))}.")
        return grid
