"""The LTX-Video 0.9.x VAE in Flax NNX, following ``diffusers.AutoencoderKLLTXVideo``
(diffusers 0.42.1, ``models/autoencoders/autoencoder_kl_ltx.py``).

Layout: channels last inside and at this module's boundary: video ``(B, F, H, W, C)`` in
``[-1, 1]``, latents ``(B, T, h, w, C_z)``; the diffusers layout ``(B, C, F, H, W)`` is the
pipelines' business (``vidax.pipelines.base`` converts once). For the released configs
``h = H / 32``, ``w = W / 32`` and ``F = 1 + 8 (T - 1)`` (:attr:`LTXVAEConfig.spatial_compression`,
:attr:`LTXVAEConfig.temporal_compression`).

The module tree mirrors the reference (``decoder.up_blocks.0.resnets.1.conv1.conv.weight`` is the
NNX path ``decoder/up_blocks/0/resnets/1/conv1/conv/kernel``), so the checkpoint maps 1:1 by the
loader's default rule (its registry entry names no ``key_rules``). The per-channel latent
statistics are the checkpoint's buffers ``latents_mean`` / ``latents_std`` (:class:`Buffer`
variables here, not parameters), read by :meth:`LTXVideoVAE.normalize_latents` /
:meth:`LTXVideoVAE.denormalize_latents`.

Frames: the encoder's causal convolutions replicate the first frame in front; a stride-2 time
step (``LTXVideoDownBlock3D``'s strided conv, ``LTXVideoDownsampler3d`` after prepending its first
frame) maps ``F`` frames to ``(F - 1) // 2 + 1``. The 0.9.5 down-samplers fold frames into channels
and need an odd count at each of them (``F = 8 k + 1`` for the released configs; anything else
fails in the reference and is refused here with an InputError). Each decoder up-sampler doubles
the frames and drops the first (``T -> 2 T - 1``), so ``T`` latent frames decode to
``8 (T - 1) + 1`` frames.

Decode timestep and noise (0.9.1+ ``timestep_conditioning``): :meth:`LTXVideoVAE.decode` takes
``timestep`` (the pipelines' ``decode_timestep``, a float or one per batch entry); the decoder
multiplies it by the learned ``timestep_scale_multiplier`` and embeds it per block. The 0.9.1
decoder also injects spatial noise after its convolutions (``decoder_inject_noise``,
``per_channel_scale1/2``): the reference draws it from torch's global RNG, here from
``noise_key`` (a JAX key; one ``(h, w)`` normal draw per injection, shared over batch, frames and
channels, as the reference). Mixing noise into the latents before decoding
(``decode_noise_scale``) is the pipeline's step, not the VAE's.

Tiling (:class:`~vidax.models.ltx.tiles.LTXTiling`): the reference's ``tiled_encode`` / ``tiled_decode`` (spatial,
``enable_tiling``) and ``_temporal_tiled_encode`` / ``_temporal_tiled_decode`` (its
``use_framewise_decoding``), blended by :mod:`vidax.nn.tiling` as the reference blends (in place,
neighbours as already blended, on the host in float32). Off by default, as in the diffusers LTX
pipelines. Every decode tile (the smaller ones at the clip's end and at the frame's bottom and
right edges included) is padded at its end to the largest tile's latent shape and decoded with its
real extent by one jitted function, so a tiled decode compiles one program (:class:`~vidax.models.ltx.tiles.Tile`: the
padded convolutions see what the tile alone would, to float32 rounding); results are cropped and
copied to host memory as each tile ends, and :meth:`LTXVideoVAE.iter_decode` yields each temporal
tile's frames as soon as they are final.

Precision: parameters and compute in float32 (default) or bfloat16; RMS / Layer norm statistics,
the time embeddings and the latent statistics in float32 (:data:`vidax.models.ltx.convert.VAE_FP32_PARAMS`);
outputs are float32.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.models.ltx.config import LTXVAEConfig
from vidax.models.ltx.tiles import LTXTiling, Tile
from vidax.nn import tiling as tile_loop
from vidax.nn.buffer import Buffer
from vidax.nn.inputs import check_video_array
from vidax.nn.layers import Conv, LayerNorm, PixArtTimestepEmbedding, rms_norm

_F32 = jnp.float32
_RMS_EPS = 1e-8  # every RMSNorm of the reference VAE (``RMSNorm(eps=1e-8, elementwise_affine=False)``)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class LTXVideoCausalConv3d(nnx.Module):
    """``LTXVideoCausalConv3d`` (and LTX-2's ``LTX2VideoCausalConv3d``): a Conv3d with replicate
    time padding and ``k // 2`` spatial padding.

    Causal: ``kt - 1`` copies of the first frame in front; otherwise ``(kt - 1) // 2`` copies of
    the first frame in front and of the last behind. Spatial padding ``padding`` (a
    :func:`jax.numpy.pad` mode: ``"constant"`` is torch's ``"zeros"``, ``"reflect"`` its
    ``"reflect"``). ``x (B, T, H, W, C_in)`` -> ``(B, T', H', W', C_out)``; parameters
    ``conv.kernel (kt, kh, kw, C_in, C_out)``, ``conv.bias``.
    """

    def __init__(self, cin: int, cout: int, kernel_size: int = 3, stride: int = 1, is_causal: bool = True, *,
                 padding: str = "constant", dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        k = kernel_size
        self.kt = k
        self.is_causal = is_causal
        self.pad_mode = None if padding == "constant" or k == 1 else padding
        zero_pad = ((0, 0), (k // 2,) * 2, (k // 2,) * 2) if self.pad_mode is None else None
        self.conv = Conv(cin, cout, (k, k, k), stride=(stride,) * 3, padding=zero_pad,
                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array, tile: Tile | None = None) -> jax.Array:
        """``tile``: the decoder call's :class:`~vidax.models.ltx.tiles.Tile` (its extent: the real tile inside a
        padded input, :meth:`Tile.fix`)."""
        x = x.astype(self.conv.dtype)
        if tile is not None:
            x = tile.fix(x, self.pad_mode, self.is_causal, self.kt)
        if self.pad_mode is not None:
            p = self.kt // 2
            x = jnp.pad(x, ((0, 0), (0, 0), (p, p), (p, p), (0, 0)), mode=self.pad_mode)
        if self.kt > 1:
            if self.is_causal:
                x = jnp.concatenate([jnp.repeat(x[:, :1], self.kt - 1, axis=1), x], axis=1)
            else:
                n = (self.kt - 1) // 2
                x = jnp.concatenate([jnp.repeat(x[:, :1], n, axis=1), x, jnp.repeat(x[:, -1:], n, axis=1)], axis=1)
        return self.conv(x)


class LTXVideoResnetBlock3d(nnx.Module):
    """``LTXVideoResnetBlock3d``: RMS norm, [scale/shift], SiLU, conv, [noise], twice, plus a
    shortcut (LayerNorm + 1x1x1 conv when the width changes: a causal-conv wrapper
    ``conv_shortcut.conv``, or with ``plain_shortcut`` a plain conv ``conv_shortcut`` as LTX-2's
    ``LTX2VideoResnetBlock3d``).

    ``x (B, T, H, W, C_in)``; ``temb (B, 4 C_in)`` float32 when ``timestep_conditioning`` (the
    block's time embedding: shift1, scale1, shift2, scale2 after adding ``scale_shift_table``);
    ``noise`` the decoder's draws when ``inject_noise``. The noise scales are stored as the
    reference's ``(C_in, 1, 1)`` tensors.
    """

    def __init__(self, cin: int, cout: int, eps: float, is_causal: bool, inject_noise: bool = False,
                 timestep_conditioning: bool = False, *, padding: str = "constant", plain_shortcut: bool = False,
                 dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.conv1 = LTXVideoCausalConv3d(cin, cout, 3, is_causal=is_causal, padding=padding, **kw)
        self.conv2 = LTXVideoCausalConv3d(cout, cout, 3, is_causal=is_causal, padding=padding, **kw)
        self.norm3 = LayerNorm(cin, eps, True) if cin != cout else None
        if cin == cout:
            self.conv_shortcut = None
        elif plain_shortcut:
            self.conv_shortcut = Conv(cin, cout, (1, 1, 1), **kw)
        else:
            self.conv_shortcut = LTXVideoCausalConv3d(cin, cout, 1, is_causal=is_causal, **kw)
        self.per_channel_scale1 = nnx.Param(jnp.zeros((cin, 1, 1), param_dtype)) if inject_noise else None
        self.per_channel_scale2 = nnx.Param(jnp.zeros((cin, 1, 1), param_dtype)) if inject_noise else None
        self.scale_shift_table = (
            nnx.Param(jax.random.normal(rngs.params(), (4, cin), _F32) / cin**0.5) if timestep_conditioning else None
        )

    def _noise(self, h: jax.Array, scale: nnx.Param, tile: Tile) -> jax.Array:
        draw = tile.normal(h.shape[2:4], h.dtype)  # (H, W): one draw over batch, frames, channels
        return h + draw[None, None, :, :, None] * scale[...].reshape(-1).astype(h.dtype)

    def __call__(self, x: jax.Array, temb: jax.Array | None, tile: Tile) -> jax.Array:
        h = rms_norm(x, _RMS_EPS, x.dtype)
        if self.scale_shift_table is not None:
            t = temb.reshape(temb.shape[0], 4, -1) + self.scale_shift_table[...].astype(_F32)
            shift1, scale1, shift2, scale2 = (t[:, i, None, None, None, :].astype(h.dtype) for i in range(4))
            h = h * (1 + scale1) + shift1
        h = self.conv1(jax.nn.silu(h), tile)
        if self.per_channel_scale1 is not None:
            h = self._noise(h, self.per_channel_scale1, tile)
        h = rms_norm(h, _RMS_EPS, h.dtype)
        if self.scale_shift_table is not None:
            h = h * (1 + scale2) + shift2
        h = self.conv2(jax.nn.silu(h), tile)
        if self.per_channel_scale2 is not None:
            h = self._noise(h, self.per_channel_scale2, tile)
        if self.norm3 is not None:
            x = self.norm3(x, x.dtype)
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return h + x.astype(h.dtype)


def _space_to_depth(x: jax.Array, s: tuple[int, int, int]) -> jax.Array:
    """``(B, T, H, W, C)`` -> ``(B, T/st, H/sh, W/sw, C st sh sw)``, channels ordered
    ``(C, st, sh, sw)`` (the reference's ``unflatten`` x3 + ``permute(0, 1, 3, 5, 7, 2, 4, 6)``)."""
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // s[0], s[0], h // s[1], s[1], w // s[2], s[2], c)
    return x.transpose(0, 1, 3, 5, 7, 2, 4, 6).reshape(b, t // s[0], h // s[1], w // s[2], c * math.prod(s))


def _depth_to_space(x: jax.Array, s: tuple[int, int, int]) -> jax.Array:
    """Inverse of :func:`_space_to_depth` (the reference's ``reshape(B, -1, st, sh, sw, T, H, W)``
    + ``permute(0, 1, 5, 2, 6, 3, 7, 4)``)."""
    b, t, h, w, c = x.shape
    k = math.prod(s)
    x = x.reshape(b, t, h, w, c // k, s[0], s[1], s[2])
    return x.transpose(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, t * s[0], h * s[1], w * s[2], c // k)


class LTXVideoDownsampler3d(nnx.Module):
    """``LTXVideoDownsampler3d`` (0.9.5): the first ``st - 1`` frames prepended, then
    ``space_to_depth(conv(x)) + group-mean(space_to_depth(x))``. ``(B, T, H, W, C_in)`` ->
    ``(B, (T + st - 1) / st, H / sh, W / sw, C_out)``."""

    def __init__(self, cin: int, cout: int, stride: tuple[int, int, int], is_causal: bool, *,
                 padding: str = "constant", dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        self.stride = tuple(stride)
        self.group_size = cin * math.prod(stride) // cout
        self.conv = LTXVideoCausalConv3d(cin, cout // math.prod(stride), 3, is_causal=is_causal, padding=padding,
                                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.concatenate([x[:, : self.stride[0] - 1], x], axis=1)
        r = _space_to_depth(x, self.stride)
        r = r.reshape(*r.shape[:-1], -1, self.group_size).mean(axis=-1)
        return _space_to_depth(self.conv(x), self.stride) + r.astype(self.conv.conv.dtype)


class LTXVideoUpsampler3d(nnx.Module):
    """``LTXVideoUpsampler3d``: ``depth_to_space(conv(x))`` [+ ``depth_to_space(x)`` tiled over
    channels when ``residual``], first ``st - 1`` frames dropped. ``(B, T, H, W, C)`` ->
    ``(B, st T - st + 1, sh H, sw W, C / upscale_factor)`` for stride ``(st, sh, sw)``."""

    def __init__(self, cin: int, stride: tuple[int, int, int], is_causal: bool, residual: bool, upscale_factor: int,
                 *, padding: str = "constant", dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        self.stride = tuple(stride)
        self.residual = residual
        self.repeats = math.prod(stride) // upscale_factor
        self.conv = LTXVideoCausalConv3d(
            cin,
            cin * math.prod(stride) // upscale_factor,
            3,
            is_causal=is_causal,
            padding=padding,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def __call__(self, x: jax.Array, tile: Tile | None = None) -> jax.Array:
        drop = self.stride[0] - 1
        h = _depth_to_space(self.conv(x, tile), self.stride)[:, drop:]
        if tile is not None:
            tile.upsample(self.stride)
        if self.residual:
            r = _depth_to_space(x, self.stride)
            h = h + jnp.tile(r, (1, 1, 1, 1, self.repeats))[:, drop:].astype(h.dtype)
        return h


class LTXVideoDownBlock3D(nnx.Module):
    """``LTXVideoDownBlock3D`` (0.9.0 / 0.9.1) and ``LTXVideo095DownBlock3D`` (``stride`` given or
    ``kind`` 095): resnets at ``cin``, then the down-sampler (a stride-2 causal conv, or an
    ``LTXVideoDownsampler3d``), then (0.9.0 type only) a width-changing resnet ``conv_out``."""

    def __init__(self, block: dict, eps: float, is_causal: bool, *, padding: str = "constant",
                 plain_shortcut: bool = False, dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, padding=padding)
        cin, cout = block["cin"], block["cout"]
        self.resnets = nnx.List([LTXVideoResnetBlock3d(cin, cin, eps, is_causal, **kw) for _ in range(block["layers"])])
        if not block["scale"]:
            down = None
        elif block["stride"] is None:
            down = LTXVideoCausalConv3d(cin, cin, 3, stride=2, is_causal=is_causal, **kw)
        else:
            down = LTXVideoDownsampler3d(cin, cout, block["stride"], is_causal, **kw)
        self.downsamplers = nnx.List([down]) if down is not None else None
        old = block["type"] == "LTXVideoDownBlock3D"
        self.conv_out = (
            LTXVideoResnetBlock3d(cin, cout, eps, is_causal, plain_shortcut=plain_shortcut, **kw)
            if old and cin != cout
            else None
        )

    def __call__(self, x: jax.Array, tile: Tile) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x, None, tile)
        for down in self.downsamplers or ():
            x = down(x)
        if self.conv_out is not None:
            x = self.conv_out(x, None, tile)
        return x


class LTXVideoMidBlock3d(nnx.Module):
    """``LTXVideoMidBlock3d``: [its own time embedding ``(B,) -> (B, 4 C)``], resnets at ``C``."""

    def __init__(self, channels: int, layers: int, eps: float, is_causal: bool, inject_noise: bool,
                 timestep_conditioning: bool, *, padding: str = "constant", dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, padding=padding)
        self.time_embedder = PixArtTimestepEmbedding(channels * 4, rngs) if timestep_conditioning else None
        self.resnets = nnx.List([
            LTXVideoResnetBlock3d(channels, channels, eps, is_causal, inject_noise, timestep_conditioning, **kw)
            for _ in range(layers)
        ])  # fmt: skip

    def __call__(self, x: jax.Array, temb: jax.Array | None, tile: Tile) -> jax.Array:
        emb = self.time_embedder(temb) if self.time_embedder is not None else None
        for resnet in self.resnets:
            x = resnet(x, emb, tile)
        return x


class LTXVideoUpBlock3d(nnx.Module):
    """``LTXVideoUpBlock3d``: [width-changing resnet ``conv_in``], [time embedding], up-sampler
    (input ``cout * factor`` channels, stride ``block["stride"]``), resnets at ``cout``."""

    def __init__(self, block: dict, eps: float, is_causal: bool, timestep_conditioning: bool, *,
                 padding: str = "constant", plain_shortcut: bool = False, dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs, padding=padding)
        cin, cout, noise = block["cin"], block["cout"], block["inject_noise"]
        tc = timestep_conditioning
        self.time_embedder = PixArtTimestepEmbedding(cin * 4, rngs) if tc else None
        self.conv_in = (
            LTXVideoResnetBlock3d(cin, cout, eps, is_causal, noise, tc, plain_shortcut=plain_shortcut, **kw)
            if cin != cout
            else None
        )
        self.upsamplers = nnx.List([
            LTXVideoUpsampler3d(cout * block["factor"], block["stride"], is_causal, block["residual"],
                                block["factor"], **kw)
        ]) if block["scale"] else None  # fmt: skip
        self.resnets = nnx.List([
            LTXVideoResnetBlock3d(cout, cout, eps, is_causal, noise, tc, **kw) for _ in range(block["layers"])
        ])  # fmt: skip

    def __call__(self, x: jax.Array, temb: jax.Array | None, tile: Tile) -> jax.Array:
        if self.conv_in is not None:  # never with timestep conditioning (LTXVAEConfig refuses it)
            x = self.conv_in(x, None, tile)
        emb = self.time_embedder(temb) if self.time_embedder is not None else None
        for up in self.upsamplers or ():
            x = up(x, tile)
        for resnet in self.resnets:
            x = resnet(x, emb, tile)
        return x


class LTXVideoEncoder3d(nnx.Module):
    """``LTXVideoEncoder3d``: video ``(B, F, H, W, C_in)`` -> ``(B, T, h, w, C_z + 1)`` (the
    reference's output before it repeats the last channel: ``C_z`` means and one log-variance).

    Patching folds each ``p x p`` pixel block into channels ordered ``(C, p_w, p_h)`` (the
    reference's ``permute(0, 1, 3, 7, 5, 2, 4, 6)``).
    """

    def __init__(self, config: LTXVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        c, eps, causal = config, config.resnet_norm_eps, config.encoder_causal
        kw["padding"] = c.encoder_padding
        self.patch = c.patch_size
        blocks = c.encoder_blocks()
        self.conv_in = LTXVideoCausalConv3d(c.in_channels * c.patch_size**2,
                                            blocks[0]["cin"] if blocks else c.block_out_channels[0], 3,
                                            is_causal=causal, **kw)  # fmt: skip
        self.down_blocks = nnx.List(
            [LTXVideoDownBlock3D(b, eps, causal, plain_shortcut=c.plain_conv_shortcut, **kw) for b in blocks]
        )
        width = c.encoder_out_width
        self.mid_block = LTXVideoMidBlock3d(width, c.layers_per_block[-1], eps, causal, False, False, **kw)
        self.conv_out = LTXVideoCausalConv3d(width, c.latent_channels + 1, 3, is_causal=causal, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, f, h, w, c = x.shape
        p = self.patch
        x = x.reshape(b, f, h // p, p, w // p, p, c).transpose(0, 1, 2, 4, 6, 5, 3)
        x = x.reshape(b, f, h // p, w // p, c * p * p)
        tile = Tile(None)
        x = self.conv_in(x)
        for block in self.down_blocks:
            x = block(x, tile)
        x = self.mid_block(x, None, tile)
        return self.conv_out(jax.nn.silu(rms_norm(x, _RMS_EPS, x.dtype)))


class LTXVideoDecoder3d(nnx.Module):
    """``LTXVideoDecoder3d``: latents ``(B, T, h, w, C_z)`` [+ decode timestep ``(B,)``] ->
    ``(B, F, h s, w s, C_out)``; the last conv's ``C_out p p`` channels unfold as ``(C, p_w, p_h)``.
    """

    def __init__(self, config: LTXVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        c, eps, causal, tc = config, config.resnet_norm_eps, config.decoder_causal, config.timestep_conditioning
        kw["padding"] = c.decoder_padding
        self.patch = c.patch_size
        width = tuple(reversed(c.decoder_block_out_channels))[0]
        self.conv_in = LTXVideoCausalConv3d(c.latent_channels, width, 3, is_causal=causal, **kw)
        self.mid_block = LTXVideoMidBlock3d(width, c.decoder_layers_per_block[-1], eps, causal,
                                            bool(c.decoder_inject_noise[-1]), tc, **kw)  # fmt: skip
        blocks = c.decoder_blocks()
        self.up_blocks = nnx.List(
            [LTXVideoUpBlock3d(b, eps, causal, tc, plain_shortcut=c.plain_conv_shortcut, **kw) for b in blocks]
        )
        out = blocks[-1]["cout"]
        self.conv_out = LTXVideoCausalConv3d(out, c.out_channels * c.patch_size**2, 3, is_causal=causal, **kw)
        self.timestep_scale_multiplier = nnx.Param(jnp.asarray(1000.0, _F32)) if tc else None
        self.time_embedder = PixArtTimestepEmbedding(out * 2, rngs) if tc else None
        self.scale_shift_table = nnx.Param(jax.random.normal(rngs.params(), (2, out), _F32) / out**0.5) if tc else None

    def noise_shapes(self, h: int, w: int) -> list[tuple[int, int]]:
        """The ``(H, W)`` of every noise draw, in call order, for a latent tile of ``h x w``."""
        shapes = []
        for resnet in self.mid_block.resnets:
            shapes += [(h, w)] * (2 if resnet.per_channel_scale1 is not None else 0)
        for block in self.up_blocks:  # a noisy up block has no conv_in (LTXVAEConfig)
            if block.upsamplers is not None:
                h, w = h * block.upsamplers[0].stride[1], w * block.upsamplers[0].stride[2]
            for resnet in block.resnets:
                shapes += [(h, w)] * (2 if resnet.per_channel_scale1 is not None else 0)
        return shapes

    def __call__(self, z: jax.Array, temb: jax.Array | None, tile: Tile) -> jax.Array:
        real = None if tile.extent is None else self.noise_shapes(tile.extent[1], tile.extent[2])
        tile.prepare(self.noise_shapes(z.shape[2], z.shape[3]), real)
        x = self.conv_in(z, tile)
        if self.timestep_scale_multiplier is not None:
            temb = temb.astype(_F32) * self.timestep_scale_multiplier[...].astype(_F32)
        x = self.mid_block(x, temb, tile)
        for block in self.up_blocks:
            x = block(x, temb, tile)
        x = rms_norm(x, _RMS_EPS, x.dtype)
        if self.time_embedder is not None:
            t = self.time_embedder(temb).reshape(temb.shape[0], 2, -1) + self.scale_shift_table[...].astype(_F32)
            shift, scale = (t[:, i, None, None, None, :].astype(x.dtype) for i in range(2))
            x = x * (1 + scale) + shift
        x = self.conv_out(jax.nn.silu(x), tile)
        b, t, h, w, ch = x.shape
        p = self.patch
        x = x.reshape(b, t, h, w, ch // (p * p), p, p).transpose(0, 1, 2, 6, 3, 5, 4)
        return x.reshape(b, t, h * p, w * p, ch // (p * p))


# --------------------------------------------------------------------------------------------
# The autoencoder
# --------------------------------------------------------------------------------------------


class LTXVideoVAE(tile_loop.TiledVAE, nnx.Module):
    """The LTX-Video 0.9.x VAE (follows ``diffusers.AutoencoderKLLTXVideo``), channels last.

    Args:
        config: the VAE's :class:`LTXVAEConfig`.
        dtype: compute dtype (float32 or bfloat16).
        param_dtype: storage dtype used when building (the loader's policy decides on load).
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    Attributes:
        tiling: the :class:`LTXTiling` used when a call gives none; None (default, as the
            diffusers pipelines): no tiling. Set by ``enable_tiling(...)`` / ``disable_tiling()``
            (``spatial``, diffusers' ``use_tiling``) and ``use_framewise_decoding = True``
            (``temporal``), :class:`vidax.nn.tiling.TiledVAE`.
        latents_mean, latents_std: ``(C_z,)`` float32 :class:`Buffer` s (the checkpoint's).

    Implements the VAE contract (:class:`vidax.pipelines.contracts.VAE`): :meth:`encode`,
    :meth:`normalize_latents`, :meth:`denormalize_latents`, :meth:`iter_decode`,
    :meth:`decode_chunks`; ``config.spatial_compression`` / ``config.temporal_compression``.
    """

    TILING = LTXTiling
    TILING_SWITCH = "spatial"
    TILING_FRAMEWISE = "temporal"

    def __init__(self, config: LTXVAEConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype
        self._tiling_settings = tile_loop.TilingSettings(None)
        self.encoder = LTXVideoEncoder3d(config, **kw)
        self.decoder = LTXVideoDecoder3d(config, **kw)
        self.latents_mean = Buffer(jnp.zeros((config.latent_channels,), _F32))
        self.latents_std = Buffer(jnp.ones((config.latent_channels,), _F32))

    def enable_tiling(
        self,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_sample_min_num_frames: int | None = None,
        tile_sample_stride_height: int | None = None,
        tile_sample_stride_width: int | None = None,
        tile_sample_stride_num_frames: int | None = None,
    ) -> None:
        """Spatial tiles, as ``AutoencoderKLLTXVideo.enable_tiling`` (a size left None keeps its
        current value, the :class:`LTXTiling` defaults at first; the frame sizes serve the
        temporal tiles of ``use_framewise_decoding``).

        Raises:
            InputError: a size that is not a positive integer or below the compression.
        """
        self._enable_tiling(
            tile_sample_min_height=tile_sample_min_height,
            tile_sample_min_width=tile_sample_min_width,
            tile_sample_min_num_frames=tile_sample_min_num_frames,
            tile_sample_stride_height=tile_sample_stride_height,
            tile_sample_stride_width=tile_sample_stride_width,
            tile_sample_stride_num_frames=tile_sample_stride_num_frames,
        )

    def _checked_tiling(self, state: LTXTiling) -> LTXTiling:
        state.check(self.config)
        return state

    @property
    def injects_noise(self) -> bool:
        """Whether the decoder adds noise (any ``decoder_inject_noise`` entry in use)."""
        c = self.config
        return bool(c.decoder_inject_noise[-1]) or any(b["inject_noise"] for b in c.decoder_blocks())

    # -- encode ----------------------------------------------------------------------------------

    def encode(self, video, *, tiling: LTXTiling | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Encode a video to the posterior's ``(mean, logvar)`` (``AutoencoderKLLTXVideo.encode``).

        Args:
            video: ``(B, F, H, W, C_in)`` float in ``[-1, 1]`` (numpy or jax), channels last.
                ``H`` and ``W`` multiples of ``patch_size`` (and of 2 at each 0.9.5 spatial
                down-sampler); ``F`` odd at each 0.9.5 temporal down-sampler (``8 k + 1`` for the
                released 0.9.5 / 0.9.7 VAEs); any ``F`` for 0.9.0 / 0.9.1, giving
                ``(F - 1) // 8 + 1`` latent frames.
            tiling: tiles as the reference with tiling enabled (default :attr:`tiling`; None:
                the whole clip at once).

        Returns:
            ``(mean, logvar)``, each ``(B, T, h, w, C_z)`` float32 numpy; ``logvar`` is the one
            channel the encoder predicts, repeated over ``C_z`` and clamped to ``[-30, 20]``
            (``DiagonalGaussianDistribution``). Unnormalised (see :meth:`normalize_latents`).

        Raises:
            InputError: ``video`` not 5-D floating point with ``in_channels`` channels last, or a
                size the reference cannot encode (see above); bad ``tiling``.
        """
        cfg = self.config
        shape = check_video_array("video", video, cfg.in_channels, "in_channels")
        tiling = self.tiling if tiling is None else tiling
        if tiling is not None:
            tiling.check(cfg)
        video = np.asarray(video, np.float32) if not isinstance(video, np.ndarray) else video
        run = self._encode_run()
        if tiling is not None and tiling.temporal and shape[1] > tiling.tile_sample_min_num_frames:
            h = self._temporal_tiled_encode(video, run, tiling)
        else:
            h = self._spatial_encode(video, run, tiling)
        c = cfg.latent_channels
        mean = np.ascontiguousarray(h[..., :c])
        logvar = np.clip(np.broadcast_to(h[..., c:], mean.shape), -30.0, 20.0).astype(np.float32)
        return mean, logvar

    def _encode_run(self):
        graphdef, state = nnx.split(self.encoder)

        def run(x):
            self._check_encodable(x.shape)
            return np.array(_encode_fn(graphdef, state, jnp.asarray(x, self.dtype)))

        return run

    def _check_encodable(self, shape) -> None:
        cfg = self.config
        f, h, w = shape[1:4]
        p = cfg.patch_size
        if h % p or w % p:
            raise InputError(f"video (tile) is {h} x {w} pixels; the LTX VAE needs multiples of patch_size={p}")
        h, w = h // p, w // p
        for i, block in enumerate(cfg.encoder_blocks()):
            if not block["scale"]:
                continue
            st = block["stride"] or (2, 2, 2)
            if block["stride"] is not None:
                if (f + st[0] - 1) % st[0] or h % st[1] or w % st[2]:
                    raise InputError(
                        f"video (tile) of shape {tuple(shape)} reaches encoder block {i}'s {st} "
                        f"down-sampler as {f} frames of {h} x {w}; it needs (frames + {st[0] - 1}) % "
                        f"{st[0]} == 0 and sizes divisible by {st[1:]} (use 8 k + 1 frames and sizes "
                        f"that are multiples of {cfg.spatial_compression})"
                    )
                f, h, w = (f + st[0] - 1) // st[0], h // st[1], w // st[2]
            else:
                f, h, w = (f - 1) // 2 + 1, (h - 1) // 2 + 1, (w - 1) // 2 + 1

    def _spatial_encode(self, x: np.ndarray, run, tiling: LTXTiling | None) -> np.ndarray:
        """``_encode`` without the temporal branch: ``tiled_encode`` when tiling applies."""
        cfg = self.config
        height, width = x.shape[2:4]
        if (
            tiling is None
            or not tiling.spatial
            or not (width > tiling.tile_sample_min_width or height > tiling.tile_sample_min_height)
        ):
            return run(x)
        s = cfg.spatial_compression
        tile = (tiling.tile_sample_min_height, tiling.tile_sample_min_width)
        step = (tiling.tile_sample_stride_height, tiling.tile_sample_stride_width)
        lat_tile = (tile[0] // s, tile[1] // s)
        lat_step = (step[0] // s, step[1] // s)
        blend = (lat_tile[0] - lat_step[0], lat_tile[1] - lat_step[1])
        out = tile_loop.tiled(run, x, tile, step, blend, lat_step)
        return out[:, :, : height // s, : width // s]

    def _temporal_tiled_encode(self, x: np.ndarray, run, tiling: LTXTiling) -> np.ndarray:
        """``_temporal_tiled_encode``: tiles of ``min + 1`` frames every ``stride`` frames, the
        first latent frame of each later tile dropped, blended over ``min/t - stride/t`` latent
        frames. Tiles whose frames the final crop removes entirely are not computed (the kept
        frames of a tile depend only on it and the tiles before it)."""
        t = self.config.temporal_compression
        frames = x.shape[1]
        total = (frames - 1) // t + 1
        lat_min, lat_stride = tiling.tile_sample_min_num_frames // t, tiling.tile_sample_stride_num_frames // t
        out, prev, have = [], None, 0
        for i in range(0, frames, tiling.tile_sample_stride_num_frames):
            if have >= total:
                break
            tile = self._spatial_encode(x[:, i : i + tiling.tile_sample_min_num_frames + 1], run, tiling)
            if i > 0:
                tile = tile[:, 1:]
            if prev is not None:
                tile_loop.blend(prev, tile, lat_min - lat_stride, axis=1)
                kept = tile[:, :lat_stride]
            else:
                kept = tile[:, : lat_stride + 1]
            prev = tile
            kept = kept[:, : total - have]
            have += kept.shape[1]
            out.append(kept)
        return np.concatenate(out, axis=1)

    # -- the VAE contract (vidax.pipelines.contracts.VAE) ---------------------------------------

    def normalize_latents(self, z) -> jax.Array:
        """Encoder latents -> the transformer's: ``(z - latents_mean) * scaling_factor /
        latents_std`` per channel (``LTXPipeline._normalize_latents``), ``z (..., C_z)``
        channels last, in ``z``'s floating dtype."""
        z = jnp.asarray(z)
        mean, std = self._stats(z)
        return (z - mean) * jnp.asarray(self.config.scaling_factor, z.dtype) / std

    def denormalize_latents(self, z) -> jax.Array:
        """The transformer's latents -> what :meth:`iter_decode` takes: ``z * latents_std /
        scaling_factor + latents_mean`` (``LTXPipeline._denormalize_latents``)."""
        z = jnp.asarray(z)
        mean, std = self._stats(z)
        return z * std / jnp.asarray(self.config.scaling_factor, z.dtype) + mean

    def _stats(self, z: jax.Array):
        c = self.config.latent_channels
        if z.ndim < 1 or z.shape[-1] != c or not jnp.issubdtype(z.dtype, jnp.floating):
            raise InputError(
                f"latents must be floating point, channels last with {c} channels; got "
                f"shape {tuple(z.shape)} dtype {z.dtype}"
            )
        return self.latents_mean[...].astype(z.dtype), self.latents_std[...].astype(z.dtype)

    def decode_chunks(self, z, *, tiling: LTXTiling | None = None) -> int:
        """How many chunks :meth:`iter_decode` yields for ``z`` with ``tiling``: one per
        temporal tile that keeps frames when temporal tiling applies, else 1."""
        tiling = self.tiling if tiling is None else tiling
        plan = self._temporal_decode_plan(int(z.shape[1]), tiling)
        return len(plan) if plan is not None else 1

    def iter_decode(
        self, z, timestep=None, *, noise_key: jax.Array | None = None, tiling: LTXTiling | None = None
    ) -> Iterator[np.ndarray]:
        """Decode latents chunk by chunk (``AutoencoderKLLTXVideo.decode(z, temb).sample``).

        Args:
            z: unnormalised latents ``(B, T, h, w, C_z)`` (numpy or jax, see
                :meth:`denormalize_latents`).
            timestep: the decode timestep (``LTXPipeline``'s ``decode_timestep``, e.g. 0.05):
                a float (every batch entry) or ``(B,)``; required when
                ``config.timestep_conditioning``, ignored otherwise (as the reference).
            noise_key: JAX key of the decoder's noise injection (``decoder_inject_noise``);
                None: ``jax.random.key(0)``. Unused by VAEs that inject no noise.
            tiling: as the reference with tiling enabled (default :attr:`tiling`; None: whole).

        Returns:
            An iterator of float32 numpy ``(B, f, H, W, C_out)`` frame chunks, concatenating to
            ``F = 1 + temporal_compression (T - 1)`` frames (released configs) of
            ``h * spatial_compression`` x ``w * spatial_compression``: one chunk, or one per
            temporal tile (each yielded as soon as its frames are final). Not clamped (the
            pipelines map ``x / 2 + 0.5`` and clip).

        Raises:
            InputError: bad ``z``, ``timestep`` or ``tiling`` (raised by this call).
        """
        cfg = self.config
        shape = check_video_array("z", z, cfg.latent_channels, "latent_channels")
        tiling = self.tiling if tiling is None else tiling
        if tiling is not None:
            tiling.check(cfg)
        self._check_reflect_tiles(shape[2], shape[3], tiling)
        temb = self._timestep(timestep, shape[0])
        key = (jax.random.key(0) if noise_key is None else noise_key) if self.injects_noise else None
        z = np.asarray(z, np.float32)
        plan = self._temporal_decode_plan(shape[1], tiling)
        run = self._decode_run(temb, key, self._tile_shape(shape, plan, tiling))

        def chunks():
            if plan is None:
                yield self._spatial_decode(z, run, tiling)
                return
            prev, blend = None, tiling.tile_sample_min_num_frames - tiling.tile_sample_stride_num_frames
            lat_min = tiling.tile_sample_min_num_frames // cfg.temporal_compression
            for start, keep in plan:
                dec = self._spatial_decode(z[:, start : start + lat_min + 1], run, tiling)
                if start > 0:
                    dec = dec[:, :-1]
                if prev is not None:
                    tile_loop.blend(prev, dec, blend, axis=1)
                prev = dec
                yield np.ascontiguousarray(dec[:, :keep])

        return chunks()

    def decode(
        self, z, timestep=None, *, noise_key: jax.Array | None = None, tiling: LTXTiling | None = None
    ) -> np.ndarray:
        """:meth:`iter_decode` concatenated: ``(B, F, H, W, C_out)`` float32 numpy."""
        return np.concatenate(list(self.iter_decode(z, timestep, noise_key=noise_key, tiling=tiling)), axis=1)

    def _timestep(self, timestep, batch: int) -> jax.Array | None:
        if not self.config.timestep_conditioning:
            return None
        if timestep is None:
            raise InputError(
                "this LTX VAE is timestep-conditioned (timestep_conditioning=true): pass the "
                "decode timestep (e.g. timestep=0.05)"
            )
        t = np.asarray(timestep, np.float32).reshape(-1)
        if t.size == 1:
            t = np.full((batch,), t[0], np.float32)
        if t.shape != (batch,) or not np.isfinite(t).all():
            raise InputError(f"timestep must be a finite float or one per batch entry ({batch}); got {timestep!r}")
        return jnp.asarray(t)

    def _decode_run(self, temb, key, tile_shape: tuple[int, int, int] | None):
        """The function decoding one tile ``z (B, t, h, w, C_z)`` (host) to host frames.

        With ``tile_shape`` ``(T, H, W)`` every tile is padded at its end to that many latent
        frames, rows and columns, decoded with its real extent (:class:`~vidax.models.ltx.tiles.Tile`: the values the
        tile alone gives, to float32 rounding) and cropped: one compiled program for the edge
        tiles and the full ones alike. None: decoded as it is (the untiled decode)."""
        graphdef, state = nnx.split(self.decoder)
        counter = [0]
        cfg = self.config

        def run(z):
            tile_key = None if key is None else jax.random.fold_in(key, counter[0])
            counter[0] += 1
            if tile_shape is None:
                return np.array(_decode_fn(graphdef, state, jnp.asarray(z, self.dtype), temb, tile_key, None))
            t, h, w = z.shape[1:4]
            pad = [(0, 0), (0, tile_shape[0] - t), (0, tile_shape[1] - h), (0, tile_shape[2] - w), (0, 0)]
            extent = jnp.asarray(np.array([t, h, w], np.int32))
            out = _decode_fn(graphdef, state, jnp.asarray(np.pad(z, pad), self.dtype), temb, tile_key, extent)
            s = cfg.spatial_compression
            return np.array(out)[:, : _decoded_frames(cfg, t), : h * s, : w * s]  # cropped on the host

        return run

    def _tile_shape(self, shape, plan, tiling: LTXTiling | None) -> tuple[int, int, int] | None:
        """The latent ``(T, H, W)`` every decode tile of latents of ``shape`` is padded to (the
        largest tile's), or None when the decode is one whole-clip call."""
        cfg = self.config
        t, h, w = shape[1:4]
        s = cfg.spatial_compression
        lat = None if tiling is None else (tiling.tile_sample_min_height // s, tiling.tile_sample_min_width // s)
        spatial = tiling is not None and tiling.spatial and (w > lat[1] or h > lat[0])
        if plan is None and not spatial:
            return None
        if plan is not None:
            t = min(t, tiling.tile_sample_min_num_frames // cfg.temporal_compression + 1)
        return (t, min(h, lat[0]), min(w, lat[1])) if spatial else (t, h, w)

    def _temporal_decode_plan(self, frames: int, tiling: LTXTiling | None):
        """``_temporal_tiled_decode``'s tiles as ``[(first latent frame, frames kept)]``, or None
        when it does not apply; tiles that keep nothing after the final crop are left out."""
        cfg = self.config
        t = cfg.temporal_compression
        if tiling is None or not tiling.temporal:
            return None
        lat_min, lat_stride = tiling.tile_sample_min_num_frames // t, tiling.tile_sample_stride_num_frames // t
        if frames <= lat_min:
            return None
        total = (frames - 1) * t + 1
        plan, have = [], 0
        for i in range(0, frames, lat_stride):
            if have >= total:
                break
            n = min(frames - i, lat_min + 1)
            length = (n - 1) * t + 1 - (1 if i > 0 else 0)  # decoded frames of the tile
            keep = min(length, tiling.tile_sample_stride_num_frames + (0 if i > 0 else 1), total - have)
            plan.append((i, keep))
            have += keep
        return plan

    def _check_reflect_tiles(self, h: int, w: int, tiling: LTXTiling | None) -> None:
        """A decoder that pads by reflection (LTX-2) needs every spatial tile at least 2 latents
        high and wide (the reference fails on a 1-latent tile); raises InputError otherwise."""
        if self.config.decoder_padding != "reflect":
            return
        s = self.config.spatial_compression
        sizes = [(h, w)]
        if (
            tiling is not None
            and tiling.spatial
            and (w > tiling.tile_sample_min_width // s or h > tiling.tile_sample_min_height // s)
        ):
            tile = (tiling.tile_sample_min_height // s, tiling.tile_sample_min_width // s)
            step = (tiling.tile_sample_stride_height // s, tiling.tile_sample_stride_width // s)
            sizes = [
                (min(tile[0], h - i), min(tile[1], w - j)) for i in range(0, h, step[0]) for j in range(0, w, step[1])
            ]
        for th, tw in sizes:
            if min(th, tw) < 2:
                raise InputError(
                    f"latents of {h} x {w} decode in a tile of {th} x {tw} latents: this VAE's decoder "
                    "pads by reflection, which needs at least 2 x 2 latents per tile (the reference "
                    "fails there); use other sizes or tile sizes"
                )

    def _spatial_decode(self, z: np.ndarray, run, tiling: LTXTiling | None) -> np.ndarray:
        """``_decode`` without the temporal branch: ``tiled_decode`` when tiling applies."""
        cfg = self.config
        s = cfg.spatial_compression
        h, w = z.shape[2:4]
        if tiling is None or not tiling.spatial:
            return run(z)
        lat_tile = (tiling.tile_sample_min_height // s, tiling.tile_sample_min_width // s)
        if not (w > lat_tile[1] or h > lat_tile[0]):
            return run(z)
        lat_step = (tiling.tile_sample_stride_height // s, tiling.tile_sample_stride_width // s)
        blend = (
            tiling.tile_sample_min_height - tiling.tile_sample_stride_height,
            tiling.tile_sample_min_width - tiling.tile_sample_stride_width,
        )
        limit = (tiling.tile_sample_stride_height, tiling.tile_sample_stride_width)
        out = tile_loop.tiled(run, z, lat_tile, lat_step, blend, limit)
        return out[:, :, : h * s, : w * s]


@functools.partial(jax.jit, static_argnums=(0,))
def _encode_fn(graphdef, state, x):
    return nnx.merge(graphdef, state)(x).astype(_F32)


@functools.partial(jax.jit, static_argnums=(0,))
def _decode_fn(graphdef, state, z, temb, key, extent):
    return nnx.merge(graphdef, state)(z, temb, Tile(key, extent)).astype(_F32)


def _decoded_frames(config: LTXVAEConfig, frames: int) -> int:
    """Frames the decoder makes of ``frames`` latent frames (each up-sampler: ``T -> st T - st + 1``)."""
    for block in config.decoder_blocks():
        if block["scale"]:
            st = block["stride"][0]
            frames = frames * st - (st - 1)
    return frames
