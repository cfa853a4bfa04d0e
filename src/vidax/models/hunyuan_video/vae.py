"""The HunyuanVideo (1.0) causal 3D VAE in Flax NNX, following ``diffusers.AutoencoderKLHunyuanVideo``
(``diffusers/models/autoencoders/autoencoder_kl_hunyuan_video.py``).

Layout: video ``(B, F, H, W, C)`` and latents ``(B, T, h, w, C_z)``, channels last (the diffusers
layout is ``(B, C, F, H, W)``; convert once at the boundary). For the released configs
``h = H / 8``, ``w = W / 8`` and ``T = (F - 1) / 4 + 1`` (``F = 4 k + 1``).

The module tree mirrors the reference (``encoder.down_blocks.1.downsamplers.0.conv.conv.weight``
is the NNX path ``encoder/down_blocks/1/downsamplers/0/conv/conv/kernel``), so the checkpoint maps
1:1 by the loader's default rule (its registry entry names no ``key_rules``).

The layers
----------
* Every 3D convolution is causal in time and pads by **replication** (``F.pad(...,
  mode="replicate")``): ``k - 1`` copies of the first frame in front, ``k // 2`` copies of the
  edge rows / columns on each side, then a VALID convolution (stride 2 in the down-samplers).
* Group norms (eps 1e-6) take their statistics per sample and group over all frames, rows and
  columns of the tile being processed (torch ``nn.GroupNorm`` on ``(B, C, T, H, W)``).
* The mid blocks' attention (one head of ``C`` channels, a group norm in front, residual) is
  frame-causal: a token of frame ``t`` attends every token of frames ``0 .. t``
  (``prepare_causal_attention_mask``). It runs as one attention call per query frame over the
  keys of frames ``<= t`` through :func:`vidax.nn.attention.dot_product_attention` (no dense
  mask; the blockwise / flash implementations apply at full size).
* Up-samplers repeat the first frame only spatially and the other frames in time and space
  (nearest), then a causal conv: ``T -> 1 + 2 (T - 1)`` where time is up-sampled.

Tiling (the reference's, exactly)
---------------------------------
:class:`HunyuanVideoTiling` holds the reference's switches and sizes, defaults as
``AutoencoderKLHunyuanVideo.__init__``: spatial tiling off, temporal ("framewise") tiling on for
both encode and decode, tiles of 256 x 256 pixels every 192 and of 16 frames every 12.

* encode: more than ``tile_sample_min_num_frames`` (16) frames -> ``_temporal_tiled_encode``:
  windows of 17 frames every 12, each encoded alone (spatially tiled when enabled and larger than
  a tile), the first latent frame of each window after the first dropped, one latent frame
  blended (``blend_t``), 3 latent frames kept per window (4 for the first). Otherwise, with
  spatial tiling enabled and ``H`` or ``W`` above 256: ``tiled_encode`` (tiles of 256 pixels
  every 192, latent blends of 32 - 24 = 8 rows / columns, 24 kept).
* decode: more than ``tile_sample_min_num_frames // 4`` (4) latent frames ->
  ``_temporal_tiled_decode``: windows of 5 latent frames every 3, each decoded alone (spatially
  tiled when enabled and larger than 32 latent pixels), the first frame of each window after the
  first dropped, 16 - 12 = 4 frames blended, 12 frames kept per window (13 for the first).
  Otherwise, with spatial tiling enabled and ``h`` or ``w`` above 32: ``tiled_decode`` (latent
  tiles of 32 every 24, 64-pixel blends, 192 pixels kept).

Blends run on the host in float32 in the reference's raster order and in place
(:mod:`vidax.nn.tiling`). Each tile / window runs one jitted function (traced once per distinct
input shape). The HunyuanVideo diffusers pipelines never call ``enable_tiling`` themselves (their
docstring examples do), so vidax's default is the reference's default state: framewise on,
spatial tiling off; :meth:`HunyuanVideoTiling.enabled` is ``vae.enable_tiling(...)``.

Precision: compute and parameters in ``float32`` (default) or ``bfloat16``; group-norm statistics,
affine and parameters always float32 (:data:`vidax.models.hunyuan_video.convert.VAE_FP32_PARAMS`);
attention softmax in float32; outputs float32.

The settings are :class:`~vidax.models.hunyuan_video.config.HunyuanVideoVAEConfig`; the loader is
:func:`vidax.weights.component.load_component`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.models.hunyuan_video.config import HunyuanVideoVAEConfig
from vidax.nn.attention import dot_product_attention
from vidax.nn.inputs import check_video_array
from vidax.nn.layers import Conv, GroupNorm, Identity, activation, linear
from vidax.nn.tiling import StridedTiling, TiledVAE, TilingSettings, blend, check_tiling_fields, tiled

_F32 = jnp.float32
_EPS = 1e-6  # every group norm of the reference's VAE


# --------------------------------------------------------------------------------------------
# Tiling settings
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HunyuanVideoTiling(StridedTiling):
    """The reference's tiling switches and sizes (pixels / frames of the video).

    Defaults are ``AutoencoderKLHunyuanVideo.__init__``'s: ``use_tiling=False``,
    ``use_framewise_encoding=True``, ``use_framewise_decoding=True``, tiles of 256 x 256 pixels
    every 192 x 192, and of 16 frames every 12. Latent sizes are these ``//`` the compressions,
    as in the reference.
    """

    use_tiling: bool = False
    use_framewise_encoding: bool = True
    use_framewise_decoding: bool = True
    tile_sample_min_height: int = 256
    tile_sample_min_width: int = 256
    tile_sample_min_num_frames: int = 16
    tile_sample_stride_height: int = 192
    tile_sample_stride_width: int = 192
    tile_sample_stride_num_frames: int = 12
    same_shape_tiles: bool = False

    def scaled(self, scale: int) -> HunyuanVideoTiling:
        """:meth:`StridedTiling.scaled`, with every decode tile of one shape where ``scale`` > 1
        (vidax's, for the plan's larger tiles: :attr:`vidax.models.wan.vae.WanTiling.same_shape_tiles`)."""
        return dataclasses.replace(super().scaled(scale), same_shape_tiles=scale > 1 or self.same_shape_tiles)

    @classmethod
    def enabled(cls, **given: int | bool | None) -> HunyuanVideoTiling:
        """The state after the reference's ``vae.enable_tiling(**given)``: spatial tiling on; each
        size given (a ``tile_sample_*`` field) replaces the default unless it is None or 0 (the
        reference's ``x or default``); ``use_framewise_encoding`` / ``use_framewise_decoding``
        are set as given. TypeError on a name that is not a field."""
        base = cls()
        kw = {k: v if k.startswith("use_") or v else getattr(base, k, v) for k, v in given.items()}
        return dataclasses.replace(base, use_tiling=True, **kw)

    def check(self, spatial: int, temporal: int) -> None:
        """Raise InputError unless every size is a positive integer, every stride at most its tile,
        and the latent tiles / strides (``// spatial``, ``// temporal``) are at least 1."""
        check_tiling_fields(self, "tiling ")
        for axis, ratio in (("height", spatial), ("width", spatial), ("num_frames", temporal)):
            tile = getattr(self, f"tile_sample_min_{axis}")
            stride = getattr(self, f"tile_sample_stride_{axis}")
            if stride > tile or stride // ratio < 1:
                raise InputError(
                    f"tiling: tile_sample_stride_{axis}={stride} must be at most "
                    f"tile_sample_min_{axis}={tile} and at least the compression {ratio}"
                )


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class HunyuanVideoCausalConv3d(nnx.Module):
    """Conv3d after replicate padding, causal in time; follows ``HunyuanVideoCausalConv3d``.

    The reference pads ``F.pad(x, (k0 // 2, k0 // 2, k1 // 2, k1 // 2, k2 - 1, 0),
    mode="replicate")`` on ``(B, C, T, H, W)`` (width by ``k0 // 2``, height by ``k1 // 2``, time
    by ``k2 - 1`` in front; the kernels here are cubic) and then convolves with ``stride`` and no
    further padding. Parameters: ``conv.kernel (kt, kh, kw, C_in, C_out)``, ``conv.bias``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 stride: tuple[int, int, int] = (1, 1, 1), *, dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        k = (kernel_size,) * 3
        # (time, height, width) amounts, from the reference's (k0, k1, k2) tuple order
        self.pad = ((k[2] - 1, 0), (k[1] // 2, k[1] // 2), (k[0] // 2, k[0] // 2))
        self.conv = Conv(in_channels, out_channels, k, stride=stride,
                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T', H', W', C_out)``."""
        if any(p != (0, 0) for p in self.pad):
            x = jnp.pad(x, ((0, 0), *self.pad, (0, 0)), mode="edge")
        return self.conv(x)


class HunyuanVideoResnetBlockCausal3D(nnx.Module):
    """GroupNorm-activation (``act``: SiLU by default)-CausalConv3d twice plus a (1x1x1 causal
    conv) shortcut; follows ``HunyuanVideoResnetBlockCausal3D`` (dropout 0 at inference)."""

    def __init__(self, in_channels: int, out_channels: int, groups: int, *, act: str = "silu", dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.act = act
        self.norm1 = GroupNorm(in_channels, groups, _EPS)
        self.conv1 = HunyuanVideoCausalConv3d(in_channels, out_channels, 3, **kw)
        self.norm2 = GroupNorm(out_channels, groups, _EPS)
        self.conv2 = HunyuanVideoCausalConv3d(out_channels, out_channels, 3, **kw)
        self.conv_shortcut = (
            HunyuanVideoCausalConv3d(in_channels, out_channels, 1, **kw) if in_channels != out_channels else None
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T, H, W, C_out)``."""
        act = activation(self.act)
        h = self.conv1(act(self.norm1(x)))
        h = self.conv2(act(self.norm2(h)))
        shortcut = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return h + shortcut.astype(h.dtype)


def frame_causal_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, frames: int, implementation: str = "auto"
) -> jax.Array:
    """Attention of ``frames`` equal-sized frames of tokens where a token of frame ``t`` attends
    every token of frames ``0 .. t`` (the HunyuanVideo VAEs' ``prepare_causal_attention_mask``:
    ``mask[i, j] = 0`` iff ``frame(j) <= frame(i)``, ``-inf`` otherwise).

    ``q``, ``k``, ``v``: ``(B, frames * HW, N, K)``; returns ``(B, frames * HW, N, K)``. One
    :func:`vidax.nn.attention.dot_product_attention` call per query frame over the keys of frames
    ``<= t``, without a dense ``L x L`` mask; scale ``1 / sqrt(K)``.
    """
    hw = q.shape[1] // frames
    return jnp.concatenate([
        dot_product_attention(q[:, f * hw:(f + 1) * hw], k[:, :(f + 1) * hw], v[:, :(f + 1) * hw],
                              implementation=implementation)
        for f in range(frames)
    ], axis=1)  # fmt: skip


class HunyuanVideoAttention(nnx.Module):
    """The mid block's ``Attention(C, heads=1, dim_head=C, norm_num_groups, residual_connection)``
    with the reference's frame-causal mask (``AttnProcessor2_0`` on ``(B, T H W, C)`` tokens).

    ``group_norm`` (statistics over all tokens, i.e. all frames), ``to_q`` / ``to_k`` / ``to_v`` /
    ``to_out.0`` linear ``C -> C`` with bias, scale ``1 / sqrt(C)``, then the residual.
    """

    def __init__(self, channels: int, groups: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.dtype = dtype
        self.group_norm = GroupNorm(channels, groups, _EPS)
        self.to_q = linear(channels, channels, dtype, param_dtype, rngs)
        self.to_k = linear(channels, channels, dtype, param_dtype, rngs)
        self.to_v = linear(channels, channels, dtype, param_dtype, rngs)
        self.to_out = nnx.List([linear(channels, channels, dtype, param_dtype, rngs), Identity()])

    def __call__(self, x: jax.Array, attention: str = "auto") -> jax.Array:
        """``x (B, T, H, W, C)`` -> same shape; token ``(t, i, j)`` attends frames ``0 .. t``."""
        b, t, h, w, c = x.shape
        hw = h * w
        y = self.group_norm(x).reshape(b, t * hw, c).astype(self.dtype)
        q, k, v = (proj(y)[:, :, None, :] for proj in (self.to_q, self.to_k, self.to_v))  # (B, L, 1, C)
        out = frame_causal_attention(q, k, v, t, attention)
        out = self.to_out[0](out.reshape(b, t * hw, c)).reshape(b, t, h, w, c)
        return out + x.astype(out.dtype)


class HunyuanVideoMidBlock3D(nnx.Module):
    """resnet, then (attention, resnet) once; follows ``HunyuanVideoMidBlock3D(num_layers=1)``.
    Without ``add_attention`` the attention slot is ``None`` (as the reference's list)."""

    def __init__(self, channels: int, groups: int, add_attention: bool, *, act: str = "silu", dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = nnx.List(
            [HunyuanVideoResnetBlockCausal3D(channels, channels, groups, act=act, **kw) for _ in range(2)]
        )
        self.attentions = nnx.List([HunyuanVideoAttention(channels, groups, **kw) if add_attention else None])

    def __call__(self, x: jax.Array, attention: str = "auto") -> jax.Array:
        x = self.resnets[0](x)
        for attn, resnet in zip(self.attentions, self.resnets[1:]):
            if attn is not None:
                x = attn(x, attention)
            x = resnet(x)
        return x


class HunyuanVideoDownsampleCausal3D(nnx.Module):
    """A 3x3x3 causal conv of stride ``(s_t, 2, 2)`` or ``(2, 1, 1)`` (``HunyuanVideoDownsampleCausal3D``):
    ``T -> (T - 1) // s_t + 1``, ``H -> (H - 1) // s + 1``."""

    def __init__(self, channels: int, stride: tuple[int, int, int], *, dtype, param_dtype, rngs: nnx.Rngs):
        self.conv = HunyuanVideoCausalConv3d(channels, channels, 3, stride,
                                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class HunyuanVideoUpsampleCausal3D(nnx.Module):
    """Nearest up-sampling then a 3x3x3 causal conv (``HunyuanVideoUpsampleCausal3D``): the first
    frame is up-sampled in space only, the others by ``factor`` ``(f_t, f_h, f_w)`` in time and
    space, so ``T -> 1 + f_t (T - 1)``."""

    def __init__(self, channels: int, factor: tuple[int, int, int], *, dtype, param_dtype, rngs: nnx.Rngs):
        self.factor = factor
        self.conv = HunyuanVideoCausalConv3d(channels, channels, 3,
                                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        ft, fh, fw = self.factor

        def space(y):
            return jnp.repeat(jnp.repeat(y, fh, axis=2), fw, axis=3)

        first = space(x[:, :1])
        if x.shape[1] > 1:
            x = jnp.concatenate([first, jnp.repeat(space(x[:, 1:]), ft, axis=1)], axis=1)
        else:
            x = first
        return self.conv(x)


class _HunyuanVideoBlock3D(nnx.Module):
    """``num_layers`` resnets then an optional resampler (``SAMPLER``), held in a one-entry list
    named ``SAMPLERS`` as the reference's."""

    SAMPLERS: str
    SAMPLER: type

    def __init__(self, in_channels: int, out_channels: int, num_layers: int, groups: int,
                 factor: tuple[int, int, int] | None, *, act: str = "silu", dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = _resnets(in_channels, out_channels, num_layers, groups, act, kw)
        samplers = nnx.List([self.SAMPLER(out_channels, factor, **kw)]) if factor is not None else None
        setattr(self, self.SAMPLERS, samplers)

    def __call__(self, x: jax.Array) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x)
        samplers = getattr(self, self.SAMPLERS)
        return samplers[0](x) if samplers is not None else x


class HunyuanVideoDownBlock3D(_HunyuanVideoBlock3D):
    """``num_layers`` resnets then an optional down-sampler (``downsamplers.0``, by ``stride``)."""

    SAMPLERS = "downsamplers"
    SAMPLER = HunyuanVideoDownsampleCausal3D


class HunyuanVideoUpBlock3D(_HunyuanVideoBlock3D):
    """``num_layers`` resnets then an optional up-sampler (``upsamplers.0``, by ``factor``)."""

    SAMPLERS = "upsamplers"
    SAMPLER = HunyuanVideoUpsampleCausal3D


def _resnets(in_channels: int, out_channels: int, num_layers: int, groups: int, act: str, kw: dict) -> nnx.List:
    """A block's ``num_layers`` resnets, the first from ``in_channels``, the others from
    ``out_channels`` (``kw``: dtypes and rngs)."""
    return nnx.List(
        [
            HunyuanVideoResnetBlockCausal3D(
                in_channels if i == 0 else out_channels, out_channels, groups, act=act, **kw
            )
            for i in range(num_layers)
        ]
    )


def _factors(space: bool, time: bool) -> tuple[int, int, int] | None:
    """``(t, h, w)`` resampling factors of a block, None when it does not resample."""
    if not (space or time):
        return None
    s = 2 if space else 1
    return (2 if time else 1, s, s)


class HunyuanVideoEncoder3D(nnx.Module):
    """Video ``(B, F, H, W, C_in)`` -> ``(B, T, h, w, 2 C_z)``; follows ``HunyuanVideoEncoder3D``."""

    def __init__(self, config: HunyuanVideoVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        boc, groups = config.block_out_channels, config.norm_num_groups
        self.conv_in = HunyuanVideoCausalConv3d(config.in_channels, boc[0], 3, **kw)
        self.down_blocks = nnx.List([
            HunyuanVideoDownBlock3D(boc[max(i - 1, 0)], boc[i], config.layers_per_block, groups,
                                    _factors(*config.resampling()[i]), act=config.act_fn, **kw)
            for i in range(len(boc))
        ])  # fmt: skip
        self.mid_block = HunyuanVideoMidBlock3D(
            boc[-1], groups, config.mid_block_add_attention, act=config.act_fn, **kw
        )
        self.conv_norm_out = GroupNorm(boc[-1], groups, _EPS)
        self.conv_out = HunyuanVideoCausalConv3d(boc[-1], 2 * config.latent_channels, 3, **kw)

    def __call__(self, x: jax.Array, attention: str = "auto") -> jax.Array:
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        x = self.mid_block(x, attention)
        return self.conv_out(jax.nn.silu(self.conv_norm_out(x)))


class HunyuanVideoDecoder3D(nnx.Module):
    """Latents ``(B, T, h, w, C_z)`` -> ``(B, F, H, W, C_out)``; follows ``HunyuanVideoDecoder3D``
    (up block ``i`` resamples as encoder block ``i``; ``layers_per_block + 1`` resnets each)."""

    def __init__(self, config: HunyuanVideoVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        rev, groups = tuple(reversed(config.block_out_channels)), config.norm_num_groups
        self.conv_in = HunyuanVideoCausalConv3d(config.latent_channels, rev[0], 3, **kw)
        self.mid_block = HunyuanVideoMidBlock3D(rev[0], groups, config.mid_block_add_attention, act=config.act_fn, **kw)
        self.up_blocks = nnx.List([
            HunyuanVideoUpBlock3D(rev[max(i - 1, 0)], rev[i], config.layers_per_block + 1, groups,
                                  _factors(*config.resampling()[i]), act=config.act_fn, **kw)
            for i in range(len(rev))
        ])  # fmt: skip
        self.conv_norm_out = GroupNorm(rev[-1], groups, _EPS)
        self.conv_out = HunyuanVideoCausalConv3d(rev[-1], config.out_channels, 3, **kw)

    def __call__(self, z: jax.Array, attention: str = "auto") -> jax.Array:
        x = self.conv_in(z)
        x = self.mid_block(x, attention)
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(jax.nn.silu(self.conv_norm_out(x)))


# --------------------------------------------------------------------------------------------
# The autoencoder
# --------------------------------------------------------------------------------------------


def posterior(moments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``DiagonalGaussianDistribution(moments)`` of diffusers: ``(mean, logvar)`` halves of the
    last axis, ``logvar`` clamped to ``[-30, 20]``; host float32."""
    mean, logvar = np.split(moments, 2, axis=-1)
    return np.ascontiguousarray(mean), np.clip(logvar, -30.0, 20.0)


class ScaledLatentsVAE(TiledVAE, nnx.Module):
    """What the HunyuanVideo 1.0 and 1.5 VAEs share: latents scaled by ``config.scaling_factor``
    alone (no shift), one tile run through a jitted ``encode_tile`` / ``decode_tile`` (the
    subclass's methods) to a writable host array, and diffusers' tiling switches
    (:class:`vidax.nn.tiling.TiledVAE`: the state starts as the ``TILING`` dataclass's defaults,
    the reference's ``__init__``, checked by the subclass's ``_tiling``)."""

    config: object

    @property
    def scaling_factor(self) -> float:
        """``config.scaling_factor`` (the pipelines decode ``latents / scaling_factor``)."""
        return self.config.scaling_factor

    def _checked_tiling(self, state):
        return self._tiling(state)

    def _run(self, fn, x) -> np.ndarray:
        graphdef, state = nnx.split(self)
        out = fn(graphdef, state, jnp.asarray(x))
        return np.array(out)  # a writable copy: the blends write in place

    def _run_encode(self, x) -> np.ndarray:
        """``encode_tile(x)`` jitted (traced once per input shape), on the host."""
        return self._run(_encode_tile, x)

    def _run_decode(self, z) -> np.ndarray:
        """``decode_tile(z)`` jitted (traced once per input shape), on the host."""
        return self._run(_decode_tile, z)

    def encode(self, video, *, tiling=None) -> tuple[np.ndarray, np.ndarray]:
        """Encode a video to the posterior's ``(mean, logvar)`` (the reference's ``encode``).

        Args:
            video: ``(B, F, H, W, C_in)`` float in ``[-1, 1]`` (numpy or jax).
            tiling: the VAE's ``TILING`` dataclass; default :attr:`tiling` (at first the
                reference's state).

        Returns:
            ``(mean, logvar)``, each ``(B, T, h, w, C_z)`` float32 numpy (the sizes: the VAE's
            docstring), ``logvar`` clamped to ``[-30, 20]`` as ``DiagonalGaussianDistribution``.
            Unscaled: see :meth:`normalize_latents`.

        Raises:
            InputError: ``video`` is not 5-D floating point with ``in_channels`` channels on the
                last axis; a bad ``tiling``.
        """
        check_video_array("video", video, self.config.in_channels, "in_channels")
        return posterior(self._moments(video, self._tiling(tiling)))

    def decode(self, z, *, tiling=None) -> np.ndarray:
        """Decode latents to video (the reference's ``decode(z).sample``): the chunks of
        ``iter_decode`` concatenated.

        Args:
            z: unscaled latents ``(B, T, h, w, C_z)`` (the pipelines pass
                ``latents / scaling_factor``, :meth:`denormalize_latents`), numpy or jax.
            tiling: the VAE's ``TILING`` dataclass; default :attr:`tiling`.

        Returns:
            ``(B, F, H, W, C_out)`` float32 numpy (the sizes: the VAE's docstring), not clamped
            (the pipelines post-process with ``clip(x / 2 + 0.5, 0, 1)``).

        Raises:
            InputError: ``z`` is not 5-D floating point with ``latent_channels`` channels on the
                last axis; a bad ``tiling``.
        """
        return np.concatenate(list(self.iter_decode(z, tiling=tiling)), axis=1)

    def normalize_latents(self, z) -> jax.Array:
        """Posterior latents -> the transformer's: ``z * scaling_factor`` in float32 (the I2V
        pipelines' ``image_latents * scaling_factor``)."""
        return jnp.asarray(z, _F32) * np.float32(self.config.scaling_factor)

    def denormalize_latents(self, z) -> np.ndarray:
        """The transformer's latents -> what ``decode`` takes: ``latents / scaling_factor`` in
        float32 (as the pipelines before ``vae.decode``)."""
        return np.asarray(z, np.float32) / np.float32(self.config.scaling_factor)


class HunyuanVideoVAE(ScaledLatentsVAE):
    """The HunyuanVideo 1.0 video VAE (``diffusers.AutoencoderKLHunyuanVideo``), channels last.

    Args:
        config: the VAE's :class:`HunyuanVideoVAEConfig`.
        dtype: compute dtype (``float32`` or ``bfloat16``).
        param_dtype: storage dtype used when building (the loader's policy decides on load).
        attention: implementation of the mid blocks' attention
            (:func:`vidax.nn.attention.dot_product_attention`; ``"auto"`` picks by size).
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    :meth:`encode` / :meth:`decode` / :meth:`iter_decode` take host or device arrays and return
    host (numpy) float32 arrays; tiling per :class:`HunyuanVideoTiling` (default: :attr:`tiling`,
    the reference's state, set by ``enable_tiling(...)`` / ``disable_tiling()`` /
    ``use_framewise_decoding``: framewise windows above 16 frames / 4 latent frames, windows of 5
    latent frames every 3, no spatial tiles).

    Sizes (released configs): a video of ``F = 4 k + 1`` frames (any ``F`` runs, as in the
    reference) ``H x W`` encodes to ``(B, (F - 1) // 4 + 1, ceil(H / 8), ceil(W / 8), C_z)``;
    latents ``(B, T, h, w, C_z)`` decode to ``(B, 4 (T - 1) + 1, 8 h, 8 w, C_out)``.
    """

    TILING = HunyuanVideoTiling
    TILING_FRAMEWISE = "use_framewise_decoding"

    def __init__(self, config: HunyuanVideoVAEConfig, *, dtype=_F32, param_dtype=_F32,
                 attention: str = "auto", rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype
        self.attention = attention
        lc = config.latent_channels
        self.encoder = HunyuanVideoEncoder3D(config, **kw)
        self.decoder = HunyuanVideoDecoder3D(config, **kw)
        self.quant_conv = Conv(2 * lc, 2 * lc, (1, 1, 1), **kw)
        self.post_quant_conv = Conv(lc, lc, (1, 1, 1), **kw)
        self._tiling_settings = TilingSettings(HunyuanVideoTiling())

    def enable_tiling(
        self,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_sample_min_num_frames: int | None = None,
        tile_sample_stride_height: int | None = None,
        tile_sample_stride_width: int | None = None,
        tile_sample_stride_num_frames: int | None = None,
    ) -> None:
        """Spatial tiles, as ``AutoencoderKLHunyuanVideo.enable_tiling`` (a size left None keeps
        its current value; temporal windows are ``use_framewise_decoding``'s, on by default).

        Raises:
            InputError: a size that is not a positive integer, a stride above its tile or below
                the compression.
        """
        self._enable_tiling(
            tile_sample_min_height=tile_sample_min_height,
            tile_sample_min_width=tile_sample_min_width,
            tile_sample_min_num_frames=tile_sample_min_num_frames,
            tile_sample_stride_height=tile_sample_stride_height,
            tile_sample_stride_width=tile_sample_stride_width,
            tile_sample_stride_num_frames=tile_sample_stride_num_frames,
        )

    # -- one tile (traced inside jit) ---------------------------------------------------------

    def encode_tile(self, x: jax.Array) -> jax.Array:
        """``x (B, F, H, W, C_in)`` -> the posterior's raw parameters ``(B, T, h, w, 2 C_z)``
        float32 (``quant_conv(encoder(x))``: mean, then logvar before clamping)."""
        h = self.encoder(x.astype(self.dtype), self.attention)
        return self.quant_conv(h).astype(_F32)

    def decode_tile(self, z: jax.Array) -> jax.Array:
        """``z (B, T, h, w, C_z)`` -> ``decoder(post_quant_conv(z))`` ``(B, F, H, W, C_out)`` float32."""
        return self.decoder(self.post_quant_conv(z.astype(self.dtype)), self.attention).astype(_F32)

    # -- host-side tiling (the reference's _encode / _decode) ----------------------------------

    def _tiling(self, tiling: HunyuanVideoTiling | None) -> HunyuanVideoTiling:
        tiling = self.tiling if tiling is None else tiling
        if not isinstance(tiling, HunyuanVideoTiling):
            raise InputError(f"tiling={tiling!r} must be a HunyuanVideoTiling or None")
        tiling.check(self.config.spatial_compression, self.config.temporal_compression)
        return tiling

    def _tiled_encode(self, x, tl: HunyuanVideoTiling) -> np.ndarray:
        s = self.config.spatial_compression
        lat = (tl.tile_sample_min_height // s, tl.tile_sample_min_width // s)
        lat_stride = (tl.tile_sample_stride_height // s, tl.tile_sample_stride_width // s)
        out = tiled(self._run_encode, x,
                    (tl.tile_sample_min_height, tl.tile_sample_min_width),
                    (tl.tile_sample_stride_height, tl.tile_sample_stride_width),
                    (lat[0] - lat_stride[0], lat[1] - lat_stride[1]), lat_stride)  # fmt: skip
        return out[:, :, : x.shape[2] // s, : x.shape[3] // s]

    def _tiled_decode(self, z, tl: HunyuanVideoTiling) -> np.ndarray:
        s = self.config.spatial_compression
        lat = (tl.tile_sample_min_height // s, tl.tile_sample_min_width // s)
        lat_stride = (tl.tile_sample_stride_height // s, tl.tile_sample_stride_width // s)
        out = tiled(self._run_decode, z, lat, lat_stride,
                    (tl.tile_sample_min_height - tl.tile_sample_stride_height,
                     tl.tile_sample_min_width - tl.tile_sample_stride_width),
                    (tl.tile_sample_stride_height, tl.tile_sample_stride_width), tl.same_shape_tiles)  # fmt: skip
        return out[:, :, : z.shape[2] * s, : z.shape[3] * s]

    def _encode_window(self, x, tl: HunyuanVideoTiling) -> np.ndarray:
        """One temporal window (or the whole clip): spatially tiled when enabled and larger."""
        if tl.use_tiling and (x.shape[2] > tl.tile_sample_min_height or x.shape[3] > tl.tile_sample_min_width):
            return self._tiled_encode(x, tl)
        return self._run_encode(x)

    def _decode_window(self, z, tl: HunyuanVideoTiling) -> np.ndarray:
        s = self.config.spatial_compression
        if tl.use_tiling and (
            z.shape[2] > tl.tile_sample_min_height // s or z.shape[3] > tl.tile_sample_min_width // s
        ):
            return self._tiled_decode(z, tl)
        return self._run_decode(z)

    def _moments(self, x, tl: HunyuanVideoTiling) -> np.ndarray:
        """The reference's ``_encode`` (temporal windows, else spatial tiles, else whole)."""
        frames = x.shape[1]
        if not (tl.use_framewise_encoding and frames > tl.tile_sample_min_num_frames):
            return self._encode_window(x, tl)
        k = self.config.temporal_compression
        latent_frames = (frames - 1) // k + 1
        lat_min, lat_stride = tl.tile_sample_min_num_frames // k, tl.tile_sample_stride_num_frames // k
        prev, kept = None, []
        for i in range(0, frames, tl.tile_sample_stride_num_frames):
            t = self._encode_window(x[:, i : i + tl.tile_sample_min_num_frames + 1], tl)
            if i > 0:
                t = t[:, 1:]
                blend(prev, t, lat_min - lat_stride, axis=1)
                kept.append(t[:, :lat_stride])
            else:
                kept.append(t[:, : lat_stride + 1])
            prev = t
        return np.concatenate(kept, axis=1)[:, :latent_frames]

    def decode_windows(self, num_latent_frames: int, tiling: HunyuanVideoTiling | None = None) -> list[tuple[int, int]]:
        """The latent frame ranges ``[start, end)`` decoded one after the other (one per chunk of
        :meth:`iter_decode`): the reference's ``_temporal_tiled_decode`` windows when framewise
        decoding applies (``T > tile_sample_min_num_frames // 4``), else ``[(0, T)]``.

        A window of a single latent frame after the first decodes to no new frame (its first
        frame is dropped) and is left out, as it adds nothing to the output.
        """
        tl = self._tiling(tiling)
        k = self.config.temporal_compression
        lat_min, lat_stride = tl.tile_sample_min_num_frames // k, tl.tile_sample_stride_num_frames // k
        t = num_latent_frames
        if not (tl.use_framewise_decoding and t > lat_min):
            return [(0, t)]
        return [
            (i, min(i + lat_min + 1, t)) for i in range(0, t, lat_stride) if i == 0 or min(i + lat_min + 1, t) - i > 1
        ]

    # -- the public API --------------------------------------------------------------------------

    def iter_decode(self, z, *, tiling: HunyuanVideoTiling | None = None) -> Iterator[np.ndarray]:
        """:meth:`decode` window after window (:meth:`decode_windows`), each chunk of frames
        final (blended with the previous window) and on the host as soon as it is decoded.

        Validates ``z`` before the first chunk (the InputErrors of :meth:`decode`).
        """
        cfg = self.config
        shape = check_video_array("z", z, cfg.latent_channels, "latent_channels")
        tl = self._tiling(tiling)
        windows = self.decode_windows(shape[1], tl)

        def chunks():
            if len(windows) == 1 and windows[0] == (0, shape[1]):
                yield self._decode_window(z, tl)
                return
            k = cfg.temporal_compression
            out_frames = (shape[1] - 1) * k + 1
            extent = tl.tile_sample_min_num_frames - tl.tile_sample_stride_num_frames
            stride = tl.tile_sample_stride_num_frames
            prev, done = None, 0
            for start, end in windows:
                dec = self._decode_window(z[:, start:end], tl)
                if start > 0:
                    dec = dec[:, 1:]
                    blend(prev, dec, extent, axis=1)
                    keep = dec[:, :stride]
                else:
                    keep = dec[:, : stride + 1]
                keep = keep[:, : out_frames - done]
                done += keep.shape[1]
                prev = dec
                yield np.array(keep)

        return chunks()

    # -- the VAE contract (vidax.pipelines.contracts.VAE; the compression factors are the config's)

    def decode_chunks(self, z, tiling: HunyuanVideoTiling | None = None) -> int:
        """How many chunks :meth:`iter_decode` yields for ``z`` (one per decode window)."""
        return len(self.decode_windows(int(z.shape[1]), tiling))


@functools.partial(jax.jit, static_argnums=(0,))
def _encode_tile(graphdef, state, x):
    return nnx.merge(graphdef, state).encode_tile(x)


@functools.partial(jax.jit, static_argnums=(0,))
def _decode_tile(graphdef, state, z):
    return nnx.merge(graphdef, state).decode_tile(z)
