"""The HunyuanVideo 1.5 causal 3D VAE in Flax NNX, following ``diffusers.AutoencoderKLHunyuanVideo15``
(``diffusers/models/autoencoders/autoencoder_kl_hunyuanvideo15.py``, 0.42.1).

Layout: video ``(B, F, H, W, C)`` and latents ``(B, T, h, w, C_z)``, channels last (the diffusers
layout is ``(B, C, F, H, W)``; convert once at the boundary). For the released config
(:class:`~vidax.models.hunyuan_video15.config.HunyuanVideo15VAEConfig` defaults) ``h = H / 16``,
``w = W / 16``, ``T = (F - 1) / 4 + 1`` (``F = 4 k + 1``) and ``C_z = 32``.

The module tree mirrors the reference (``decoder.up_blocks.0.upsamplers.0.conv.conv.weight`` is
the NNX path ``decoder/up_blocks/0/upsamplers/0/conv/conv/kernel``, ``...norm1.gamma`` is
``.../norm1/gamma``), so the checkpoint maps 1:1 by the loader's default rule.

The layers
----------
* 3x3x3 convolutions are HunyuanVideo 1.0's causal, replicate-padded ones
  (:class:`~vidax.models.hunyuan_video.vae.HunyuanVideoCausalConv3d`, stride 1 here); the
  resnet shortcut and the attention projections are plain 1x1x1 convolutions.
* Norms are Wan's channel RMS norm (:class:`~vidax.models.wan.vae.WanRMS_norm`: ``x / ||x||_C *
  sqrt(C) * gamma``, no bias), per position, so they do not depend on the tile.
* The mid blocks' attention (one head of ``C`` channels) is frame-causal, as HunyuanVideo 1.0's
  (:func:`~vidax.models.hunyuan_video.vae.frame_causal_attention`).
* Resampling is DC-AE style: the down-sampler's conv output and its shortcut are space-to-channel
  folds (``(r_t, 2, 2)`` blocks; the first frame folded in space only, its channels doubled), the
  shortcut averaged over groups of channels; the up-sampler's are channel-to-space unfolds (the
  first frame unfolded in space only, half its channels kept), the shortcut repeating channels.
  ``T -> 1 + (T - 1) / 2`` down and ``T -> 1 + 2 (T - 1)`` up where time is resampled.
* The encoder adds to its output the mean of groups of its last features' channels; the
  decoder adds to its first conv's output the latents with each channel repeated.

Tiling (the reference's, exactly)
---------------------------------
Spatial only, off by default (the diffusers HunyuanVideo 1.5 pipelines never enable it; their
docstring examples do): :class:`HunyuanVideo15Tiling`. With it on, ``encode`` splits a video
larger than ``tile_sample_min_height`` x ``tile_sample_min_width`` (256) into tiles of that size
every ``int(tile * (1 - tile_overlap_factor))`` pixels, blends ``int(tile_latent_min *
overlap)`` latent rows / columns and keeps ``tile_latent_min - blend``; ``decode`` splits
latents larger than ``tile_latent_min_*`` (the reference's ``256 // 16 = 16`` unless given) into
tiles every ``int(tile_latent_min * (1 - overlap))`` and blends / keeps the sample sizes' share.
The kept pieces are concatenated as they are (no crop to the input's size, as the reference).
Blends run on the host in float32, in raster order and in place (:mod:`vidax.nn.tiling`).
``enable_tiled_decode`` (``--vae-tiling``, the memory plan) takes the same tiling at half the
default tile (:data:`TILED_DECODE_SAMPLE_TILE`) where no size was set: one 256-pixel tile of a
121-frame clip does not fit a 16 GB accelerator.

There is no temporal tiling: :meth:`HunyuanVideo15VAE.iter_decode` yields the whole clip as one
chunk (host numpy, as soon as it is decoded).

Precision: compute and parameters in ``float32`` (default) or ``bfloat16``; the RMS norms and
their ``gamma`` in float32 (:data:`vidax.models.hunyuan_video15.convert.VAE_FP32_PARAMS`);
attention softmax and the shortcut means in float32; outputs float32.

The loader is :func:`vidax.weights.component.load_component` (``"AutoencoderKLHunyuanVideo15"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.config import is_positive_int
from vidax.errors import InputError
from vidax.models.hunyuan_video.vae import HunyuanVideoCausalConv3d, ScaledLatentsVAE, frame_causal_attention
from vidax.models.hunyuan_video15.config import HunyuanVideo15VAEConfig
from vidax.models.wan.vae import WanRMS_norm
from vidax.nn.inputs import check_video_array
from vidax.nn.layers import Conv
from vidax.nn.tiling import TilingSettings, check_tile_scale, scaled_sides, tiled

_F32 = jnp.float32

#: The reference's ``tile_sample_min_height`` / ``_width`` at construction; its latent tile
#: sizes are this ``//`` the spatial compression unless ``enable_tiling`` names them.
_DEFAULT_SAMPLE_TILE = 256

#: The sample tile (pixels a side) :meth:`HunyuanVideo15VAE.enable_tiled_decode` (``--vae-tiling``,
#: and the memory plan where the whole frame does not fit) decodes in when no tile size was set:
#: the reference's tiling at half its default tile (latent tiles of 8, the same overlap). Each
#: tile decodes the whole clip at once, so the reference's 256 pixels at 121 frames need 24.6 GiB
#: of temporaries on a TPU v5e (its full-resolution activations, 128 channels, 3.8 GiB each, ~6
#: alive at once); 128 pixels need 8.75 GiB (benchmarks/tpu_memory_aot.py).
TILED_DECODE_SAMPLE_TILE = 128


# --------------------------------------------------------------------------------------------
# Tiling settings
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HunyuanVideo15Tiling:
    """The reference's tiling switch and sizes (``AutoencoderKLHunyuanVideo15`` attributes).

    Defaults are its ``__init__``'s: ``use_tiling=False``, sample tiles of 256 x 256, overlap
    0.25. ``tile_latent_min_height`` / ``_width`` ``None`` mean the reference's init value
    ``256 // spatial_compression_ratio`` (16), which ``enable_tiling`` keeps unless it is given
    them: the latent tile size does not follow a new sample tile size.
    """

    use_tiling: bool = False
    tile_sample_min_height: int = _DEFAULT_SAMPLE_TILE
    tile_sample_min_width: int = _DEFAULT_SAMPLE_TILE
    tile_latent_min_height: int | None = None
    tile_latent_min_width: int | None = None
    tile_overlap_factor: float = 0.25

    @classmethod
    def enabled(
        cls,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_latent_min_height: int | None = None,
        tile_latent_min_width: int | None = None,
        tile_overlap_factor: float | None = None,
    ) -> HunyuanVideo15Tiling:
        """The state after the reference's ``vae.enable_tiling(...)`` with these arguments: tiling
        on, a ``None`` (or 0) keeps the default (the reference's ``x or default``)."""
        base = cls()
        return cls(use_tiling=True,
                   tile_sample_min_height=tile_sample_min_height or base.tile_sample_min_height,
                   tile_sample_min_width=tile_sample_min_width or base.tile_sample_min_width,
                   tile_latent_min_height=tile_latent_min_height or base.tile_latent_min_height,
                   tile_latent_min_width=tile_latent_min_width or base.tile_latent_min_width,
                   tile_overlap_factor=tile_overlap_factor or base.tile_overlap_factor)  # fmt: skip

    def scaled(self, scale: int) -> HunyuanVideo15Tiling:
        """Sample and latent tiles ``scale`` times as large a side, the overlap factor kept
        (``enable_tiled_decode(scale)``; resolved first, :meth:`resolved`)."""
        return scaled_sides(self, scale, strides=False, latent=True)

    def resolved(self, spatial: int) -> HunyuanVideo15Tiling:
        """Checked, with the latent tile sizes filled in for a VAE of ``spatial`` compression.

        Raises:
            InputError: a size is not a positive integer, the overlap is not in ``[0, 1)``, or a
                tile step (``int(tile * (1 - overlap))``) is below 1 (the reference's loop
                would not advance).
        """
        if (
            not isinstance(self.tile_overlap_factor, (int, float))
            or isinstance(self.tile_overlap_factor, bool)
            or not 0 <= self.tile_overlap_factor < 1
        ):
            raise InputError(f"tiling: tile_overlap_factor={self.tile_overlap_factor!r} must be a number in [0, 1)")
        if not isinstance(self.use_tiling, bool):
            raise InputError(f"tiling: use_tiling={self.use_tiling!r} must be True or False")
        latent = _DEFAULT_SAMPLE_TILE // spatial
        out = dataclasses.replace(
            self,
            tile_latent_min_height=latent if self.tile_latent_min_height is None else self.tile_latent_min_height,
            tile_latent_min_width=latent if self.tile_latent_min_width is None else self.tile_latent_min_width,
        )
        for name in _TILE_SIZES:
            if not is_positive_int(getattr(out, name)):
                raise InputError(f"tiling: {name}={getattr(out, name)!r} must be a positive integer")
        for name in _TILE_SIZES:
            if int(getattr(out, name) * (1 - out.tile_overlap_factor)) < 1:
                raise InputError(
                    f"tiling: {name}={getattr(out, name)} with tile_overlap_factor={out.tile_overlap_factor} "
                    "gives a tile step below 1"
                )
        return out


_TILE_SIZES = ("tile_sample_min_height", "tile_sample_min_width", "tile_latent_min_height", "tile_latent_min_width")


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def _fold(x: jax.Array, rt: int) -> jax.Array:
    """The reference's ``_dcae_downsample_rearrange(x, rt, 2, 2)`` channels last:
    ``(B, rt T, 2 H, 2 W, C)`` -> ``(B, T, H, W, rt 4 C)``, channel ``((i_t 2 + i_h) 2 + i_w) C + c``."""
    b, t, h, w, c = x.shape
    y = x.reshape(b, t // rt, rt, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 5, 2, 4, 6, 7)
    return y.reshape(b, t // rt, h // 2, w // 2, rt * 4 * c)


def _unfold(x: jax.Array, rt: int) -> jax.Array:
    """The reference's ``_dcae_upsample_rearrange(x, rt, 2, 2)`` channels last, the inverse of
    :func:`_fold`: ``(B, T, H, W, rt 4 C)`` -> ``(B, rt T, 2 H, 2 W, C)``."""
    b, t, h, w, cc = x.shape
    c = cc // (rt * 4)
    y = x.reshape(b, t, h, w, rt, 2, 2, c).transpose(0, 1, 4, 2, 5, 3, 6, 7)
    return y.reshape(b, t * rt, h * 2, w * 2, c)


def _group_mean(x: jax.Array, channels: int) -> jax.Array:
    """Mean of consecutive groups of channels (the reference's ``view(B, channels, g, ...).mean(2)``),
    in float32: ``(..., channels g)`` -> ``(..., channels)`` in ``x``'s dtype."""
    y = x.reshape(*x.shape[:-1], channels, x.shape[-1] // channels)
    return jnp.mean(y.astype(_F32), axis=-1).astype(x.dtype)


def _conv1(cin: int, cout: int, kw) -> Conv:
    """A plain 1x1x1 ``nn.Conv3d`` with bias (``conv_shortcut``, ``to_q`` ...)."""
    return Conv(cin, cout, (1, 1, 1), **kw)


class HunyuanVideo15ResnetBlock(nnx.Module):
    """RMS norm-SiLU-causal conv twice plus a (1x1x1 conv) shortcut; ``HunyuanVideo15ResnetBlock``."""

    def __init__(self, in_channels: int, out_channels: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm1 = WanRMS_norm(in_channels, images=False)
        self.conv1 = HunyuanVideoCausalConv3d(in_channels, out_channels, 3, **kw)
        self.norm2 = WanRMS_norm(out_channels, images=False)
        self.conv2 = HunyuanVideoCausalConv3d(out_channels, out_channels, 3, **kw)
        self.conv_shortcut = _conv1(in_channels, out_channels, kw) if in_channels != out_channels else None

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T, H, W, C_out)``."""
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        shortcut = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return h + shortcut.astype(h.dtype)


class HunyuanVideo15AttnBlock(nnx.Module):
    """RMS norm, 1x1x1 ``to_q`` / ``to_k`` / ``to_v``, one frame-causal head of ``C`` channels
    (scale ``1 / sqrt(C)``), ``proj_out``, residual; ``HunyuanVideo15AttnBlock``."""

    def __init__(self, channels: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dtype = dtype
        self.norm = WanRMS_norm(channels, images=False)
        self.to_q = _conv1(channels, channels, kw)
        self.to_k = _conv1(channels, channels, kw)
        self.to_v = _conv1(channels, channels, kw)
        self.proj_out = _conv1(channels, channels, kw)

    def __call__(self, x: jax.Array, attention: str = "auto") -> jax.Array:
        """``x (B, T, H, W, C)`` -> same shape; token ``(t, i, j)`` attends frames ``0 .. t``."""
        b, t, h, w, c = x.shape
        y = self.norm(x).astype(self.dtype)
        q, k, v = (proj(y).reshape(b, t * h * w, 1, c) for proj in (self.to_q, self.to_k, self.to_v))
        out = frame_causal_attention(q, k, v, t, attention).reshape(b, t, h, w, c)
        out = self.proj_out(out)
        return out + x.astype(out.dtype)


class HunyuanVideo15MidBlock(nnx.Module):
    """resnet, attention, resnet; ``HunyuanVideo15MidBlock(num_layers=1, add_attention=True)``."""

    def __init__(self, channels: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = nnx.List([HunyuanVideo15ResnetBlock(channels, channels, **kw) for _ in range(2)])
        self.attentions = nnx.List([HunyuanVideo15AttnBlock(channels, **kw)])

    def __call__(self, x: jax.Array, attention: str = "auto") -> jax.Array:
        x = self.resnets[0](x)
        return self.resnets[1](self.attentions[0](x, attention))


class HunyuanVideo15Downsample(nnx.Module):
    """``HunyuanVideo15Downsample``: a causal conv to ``C_out / r`` channels folded to ``C_out``
    (``r = 8`` with time, else 4), plus the input folded and averaged over groups of channels.
    ``(B, T, H, W, C_in)`` -> ``(B, 1 + (T - 1) / 2 or T, H / 2, W / 2, C_out)``."""

    def __init__(self, in_channels: int, out_channels: int, temporal: bool, *, dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        factor = 8 if temporal else 4
        self.temporal = temporal
        self.out_channels = out_channels
        self.conv = HunyuanVideoCausalConv3d(in_channels, out_channels // factor, 3,
                                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv(x)
        c = self.out_channels
        if not self.temporal:
            return _fold(h, 1) + _group_mean(_fold(x, 1), c)
        h_first = _fold(h[:, :1], 1)
        h = jnp.concatenate([jnp.concatenate([h_first, h_first], axis=-1), _fold(h[:, 1:], 2)], axis=1)
        shortcut = jnp.concatenate([_group_mean(_fold(x[:, :1], 1), c), _group_mean(_fold(x[:, 1:], 2), c)], axis=1)
        return h + shortcut


class HunyuanVideo15Upsample(nnx.Module):
    """``HunyuanVideo15Upsample``: a causal conv to ``r C_out`` channels unfolded to ``C_out``
    (``r = 8`` with time, else 4; the first frame unfolded in space only, its first half of
    channels kept), plus the input with channels repeated and unfolded.
    ``(B, T, H, W, C_in)`` -> ``(B, 1 + 2 (T - 1) or T, 2 H, 2 W, C_out)``."""

    def __init__(self, in_channels: int, out_channels: int, temporal: bool, *, dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        factor = 8 if temporal else 4
        self.temporal = temporal
        self.out_channels = out_channels
        self.repeats = factor * out_channels // in_channels
        self.conv = HunyuanVideoCausalConv3d(in_channels, out_channels * factor, 3,
                                             dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv(x)
        if not self.temporal:
            return _unfold(h, 1) + _unfold(jnp.repeat(x, self.repeats, axis=-1), 1)
        h = jnp.concatenate([_unfold(h[:, :1], 1)[..., : self.out_channels], _unfold(h[:, 1:], 2)], axis=1)
        shortcut = jnp.concatenate([jnp.repeat(_unfold(x[:, :1], 1), self.repeats // 2, axis=-1),
                                    jnp.repeat(_unfold(x[:, 1:], 2), self.repeats, axis=-1)], axis=1)  # fmt: skip
        return h + shortcut


class HunyuanVideo15Block3D(nnx.Module):
    """``HunyuanVideo15DownBlock3D`` / ``HunyuanVideo15UpBlock3D``: ``num_layers`` resnets, then
    the resampler (``downsamplers`` / ``upsamplers``, a one-entry list) when ``resample_out``."""

    def __init__(self, in_channels: int, out_channels: int, num_layers: int, resample_out: int | None,
                 temporal: bool, up: bool, *, dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = nnx.List([
            HunyuanVideo15ResnetBlock(in_channels if i == 0 else out_channels, out_channels, **kw)
            for i in range(num_layers)
        ])  # fmt: skip
        sampler = None
        if resample_out is not None:
            cls = HunyuanVideo15Upsample if up else HunyuanVideo15Downsample
            sampler = nnx.List([cls(out_channels, resample_out, temporal, **kw)])
        if up:
            self.upsamplers = sampler
        else:
            self.downsamplers = sampler
        self.up = up

    def __call__(self, x: jax.Array) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x)
        sampler = self.upsamplers if self.up else self.downsamplers
        return sampler[0](x) if sampler is not None else x


class HunyuanVideo15Encoder3D(nnx.Module):
    """Video ``(B, F, H, W, C_in)`` -> moments ``(B, T, h, w, 2 C_z)``; ``HunyuanVideo15Encoder3D``."""

    def __init__(self, config: HunyuanVideo15VAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        boc = config.block_out_channels
        self.out_channels = 2 * config.latent_channels
        self.conv_in = HunyuanVideoCausalConv3d(config.in_channels, boc[0], 3, **kw)
        self.down_blocks = nnx.List([
            HunyuanVideo15Block3D(cin, cout, config.layers_per_block, down, t, False, **kw)
            for cin, cout, down, t in config.down_blocks()
        ])  # fmt: skip
        self.mid_block = HunyuanVideo15MidBlock(boc[-1], **kw)
        self.norm_out = WanRMS_norm(boc[-1], images=False)
        self.conv_out = HunyuanVideoCausalConv3d(boc[-1], self.out_channels, 3, **kw)

    def __call__(self, x: jax.Array, attention: str = "auto") -> jax.Array:
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x)
        x = self.mid_block(x, attention)
        shortcut = _group_mean(x, self.out_channels)
        return self.conv_out(jax.nn.silu(self.norm_out(x))) + shortcut.astype(x.dtype)


class HunyuanVideo15Decoder3D(nnx.Module):
    """Latents ``(B, T, h, w, C_z)`` -> video ``(B, F, H, W, C_out)``; ``HunyuanVideo15Decoder3D``
    (``layers_per_block + 1`` resnets per up block)."""

    def __init__(self, config: HunyuanVideo15VAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        rev = tuple(reversed(config.block_out_channels))
        self.repeat = rev[0] // config.latent_channels
        self.conv_in = HunyuanVideoCausalConv3d(config.latent_channels, rev[0], 3, **kw)
        self.mid_block = HunyuanVideo15MidBlock(rev[0], **kw)
        self.up_blocks = nnx.List([
            HunyuanVideo15Block3D(cin, cout, config.layers_per_block + 1, up, t, True, **kw)
            for cin, cout, up, t in config.up_blocks()
        ])  # fmt: skip
        self.norm_out = WanRMS_norm(rev[-1], images=False)
        self.conv_out = HunyuanVideoCausalConv3d(rev[-1], config.out_channels, 3, **kw)

    def __call__(self, z: jax.Array, attention: str = "auto") -> jax.Array:
        x = self.conv_in(z)
        x = x + jnp.repeat(z, self.repeat, axis=-1).astype(x.dtype)
        x = self.mid_block(x, attention)
        for block in self.up_blocks:
            x = block(x)
        return self.conv_out(jax.nn.silu(self.norm_out(x)))


# --------------------------------------------------------------------------------------------
# The autoencoder
# --------------------------------------------------------------------------------------------


class HunyuanVideo15VAE(ScaledLatentsVAE):
    """The HunyuanVideo 1.5 video VAE (``diffusers.AutoencoderKLHunyuanVideo15``), channels last.

    The arguments are :class:`~vidax.models.hunyuan_video.vae.HunyuanVideoVAE`'s (``config``: the
    VAE's :class:`HunyuanVideo15VAEConfig`). :meth:`encode` / :meth:`decode` /
    :meth:`iter_decode` take host or device arrays and return host (numpy) float32 arrays; tiling per :class:`HunyuanVideo15Tiling` (default: the
    reference's, off). ``scaling_factor``, ``normalize_latents`` (``z * scaling_factor``) and
    ``denormalize_latents`` (``z / scaling_factor``) and the jitted tile functions are
    :class:`ScaledLatentsVAE`'s. Tiling:
    ``enable_tiling(...)`` / ``disable_tiling()`` / ``use_tiling`` set :attr:`tiling` (spatial
    only, as the reference: the whole clip decodes at once in each tile).

    Sizes (released config): a video of ``F = 4 k + 1`` frames ``H x W`` (multiples of 16; the I2V
    pipeline encodes one frame) encodes to ``(B, (F - 1) // 4 + 1, H / 16, W / 16, C_z)`` (tiled:
    the concatenated kept pieces, as the reference); latents ``(B, T, h, w, C_z)`` decode to
    ``(B, 4 (T - 1) + 1, 16 h, 16 w, C_out)``.
    """

    TILING = HunyuanVideo15Tiling

    def __init__(self, config: HunyuanVideo15VAEConfig, *, dtype=_F32, param_dtype=_F32,
                 attention: str = "auto", rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype
        self.attention = attention
        self.encoder = HunyuanVideo15Encoder3D(config, **kw)
        self.decoder = HunyuanVideo15Decoder3D(config, **kw)
        self._tiling_settings = TilingSettings(HunyuanVideo15Tiling().resolved(config.spatial_compression))

    def enable_tiling(
        self,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_latent_min_height: int | None = None,
        tile_latent_min_width: int | None = None,
        tile_overlap_factor: float | None = None,
    ) -> None:
        """Spatial tiles, as ``AutoencoderKLHunyuanVideo15.enable_tiling`` (a size left None keeps
        its current value: the latent tile does not follow a new sample tile, as the reference).

        Raises:
            InputError: a size that is not a positive integer, an overlap outside ``[0, 1)``, or
                a tile step below 1.
        """
        self._enable_tiling(
            tile_sample_min_height=tile_sample_min_height,
            tile_sample_min_width=tile_sample_min_width,
            tile_latent_min_height=tile_latent_min_height,
            tile_latent_min_width=tile_latent_min_width,
            tile_overlap_factor=tile_overlap_factor,
        )

    def enable_tiled_decode(self, scale: int = 1) -> None:
        """What ``--vae-tiling`` turns on: ``enable_tiling()`` with the sizes set so far, or,
        where none was set (the reference's construction defaults), sample tiles of
        :data:`TILED_DECODE_SAMPLE_TILE` pixels and latent tiles of that ``//`` the spatial
        compression: the reference's tiled decode (the same blends and overlap) with tiles
        small enough that one tile of a whole default-length clip fits a 16 GB device.
        ``scale`` k multiplies the sample and latent tiles' sides by k, the overlap factor kept
        (:meth:`HunyuanVideo15Tiling.scaled`; the memory plan's, where the device has room).

        Raises:
            InputError: ``scale`` is not a positive integer (before anything changes).
        """
        check_tile_scale(scale)
        s = self.config.spatial_compression
        if self._state().resolved(s) != HunyuanVideo15Tiling(use_tiling=self.use_tiling).resolved(s):
            self.enable_tiling()
        else:
            tile = TILED_DECODE_SAMPLE_TILE
            self.enable_tiling(
                tile_sample_min_height=tile,
                tile_sample_min_width=tile,
                tile_latent_min_height=tile // s,
                tile_latent_min_width=tile // s,
            )
        if scale > 1:
            self._tiling_settings.state = self._checked_tiling(self.tiling.scaled(scale))

    # -- one tile (traced inside jit) ---------------------------------------------------------

    def encode_tile(self, x: jax.Array) -> jax.Array:
        """``x (B, F, H, W, C_in)`` -> the posterior's raw moments ``(B, T, h, w, 2 C_z)`` float32
        (mean, then logvar before clamping)."""
        return self.encoder(x.astype(self.dtype), self.attention).astype(_F32)

    def decode_tile(self, z: jax.Array) -> jax.Array:
        """``z (B, T, h, w, C_z)`` -> ``decoder(z)`` ``(B, F, H, W, C_out)`` float32."""
        return self.decoder(z.astype(self.dtype), self.attention).astype(_F32)

    # -- host-side tiling (the reference's _encode / _decode) ----------------------------------

    def _tiling(self, tiling: HunyuanVideo15Tiling | None) -> HunyuanVideo15Tiling:
        tiling = self.tiling if tiling is None else tiling
        if not isinstance(tiling, HunyuanVideo15Tiling):
            raise InputError(f"tiling={tiling!r} must be a HunyuanVideo15Tiling or None")
        return tiling.resolved(self.config.spatial_compression)

    def _moments(self, x, tl: HunyuanVideo15Tiling) -> np.ndarray:
        """The reference's ``_encode`` (``tiled_encode`` when on and larger than a tile)."""
        sh, sw, f = tl.tile_sample_min_height, tl.tile_sample_min_width, tl.tile_overlap_factor
        if not (tl.use_tiling and (x.shape[3] > sw or x.shape[2] > sh)):
            return self._run_encode(x)
        lh, lw = tl.tile_latent_min_height, tl.tile_latent_min_width
        blend_h, blend_w = int(lh * f), int(lw * f)
        return tiled(
            self._run_encode,
            x,
            (sh, sw),
            (int(sh * (1 - f)), int(sw * (1 - f))),
            (blend_h, blend_w),
            (lh - blend_h, lw - blend_w),
        )

    def _decode(self, z, tl: HunyuanVideo15Tiling) -> np.ndarray:
        """The reference's ``_decode`` (``tiled_decode`` when on and larger than a latent tile)."""
        lh, lw, f = tl.tile_latent_min_height, tl.tile_latent_min_width, tl.tile_overlap_factor
        if not (tl.use_tiling and (z.shape[3] > lw or z.shape[2] > lh)):
            return self._run_decode(z)
        sh, sw = tl.tile_sample_min_height, tl.tile_sample_min_width
        blend_h, blend_w = int(sh * f), int(sw * f)
        return tiled(
            self._run_decode,
            z,
            (lh, lw),
            (int(lh * (1 - f)), int(lw * (1 - f))),
            (blend_h, blend_w),
            (sh - blend_h, sw - blend_w),
        )

    # -- the public API --------------------------------------------------------------------------

    def iter_decode(self, z, *, tiling: HunyuanVideo15Tiling | None = None) -> Iterator[np.ndarray]:
        """:meth:`decode` as the pipelines' chunk iterator: one chunk (the whole clip; the
        reference has no temporal tiling), on the host as soon as it is decoded. Validates ``z``
        before the first chunk (the InputErrors of :meth:`decode`)."""
        check_video_array("z", z, self.config.latent_channels, "latent_channels")
        tl = self._tiling(tiling)

        def chunks():
            yield self._decode(z, tl)

        return chunks()

    # -- the VAE contract (vidax.pipelines.contracts.VAE; the compression factors are the config's)

    def decode_chunks(self, z, tiling: HunyuanVideo15Tiling | None = None) -> int:
        """How many chunks :meth:`iter_decode` yields: always 1 (no temporal tiling)."""
        return 1
