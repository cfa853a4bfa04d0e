"""The CogVideoX 3D VAE in Flax NNX, following ``diffusers.AutoencoderKLCogVideoX``.

Layout: video ``(B, F, H, W, C)`` and latents ``(B, T', H', W', C_z)``, channels last. For the
released configs (four blocks, ``temporal_compression_ratio=4``) ``H' = H / 8``, ``W' = W / 8`` and
``F = 1 + 4 (T' - 1)`` when ``T'`` is odd (the pipelines' 49 frames <-> 13 latent frames).

The module tree mirrors the reference (``decoder.up_blocks.0.resnets.1.norm1.conv_y.conv.weight``
is the NNX path ``decoder/up_blocks/0/resnets/1/norm1/conv_y/conv/kernel``), so the checkpoint
maps 1:1 by the loader's rule with no renames (its registry entry names no ``key_rules``).

Temporal chunks and the conv cache
----------------------------------
The reference encodes ``num_sample_frames_batch_size = 8`` frames at a time and decodes
``num_latent_frames_batch_size = 2`` latent frames at a time. With ``n`` frames and batch ``b``
it runs ``max(n // b, 1)`` chunks; the remainder ``n % b`` goes to the first chunk
(``[0, b + n % b)``, then ``[b k + n % b, b (k + 1) + n % b)``), so 13 latent frames decode as
3 + 2 + 2 + 2 + 2 + 2 and 49 frames encode as 9 + 8 + ... + 8. Group norms take their statistics
over the whole chunk (all its frames), so the chunking changes the values and is reproduced
exactly. Every causal 3-tap time convolution pads its input in front with 2 frames: on the first
chunk copies of its first frame (``pad_mode="first"``), afterwards the last 2 frames of its padded
input in the previous chunk (the reference's ``conv_cache``). Here that cache is an explicit
tuple of fixed-shape ``(B, 2, h, w, C)`` arrays in call order, passed into and returned from one
jitted chunk function; the function is traced once for the first chunk (no cache) and once for
the later chunks, whatever the clip length, and each chunk's result is copied to host memory as
soon as it is computed. Two programs, not one as the Wan VAE's: the first chunk of an odd clip
(the pipelines' 13 or 21 latent frames) holds 3 latent frames and the others 2, and the 3 are not
a 2-frame chunk plus one: the group norms take their statistics over all of a chunk's frames, and
an odd chunk up-samples its first frame alone (above), so running it in the later chunks' program
would need those norms, resizes and up-samplers masked by a traced frame count.

The odd/even frame handling of the reference is reproduced: time down-sampling keeps the first
frame of an odd chunk and averages the others in pairs, time up-sampling doubles all frames of an
even chunk but only spatially up-samples the first frame of an odd one (and a 1-frame chunk stays
1 frame), and the decoder's spatial norm resizes the latent chunk to each feature map with
nearest-neighbour indices computed as torch's ``F.interpolate`` does, the first frame on its own
when the feature map has an odd number (> 1) of frames.

Spatial tiling
--------------
``tiled_decode`` / ``tiled_encode`` of the reference are reproduced: tiles of
``sample_height // 2`` x ``sample_width // 2`` pixels (``/ 8`` in latent space) start every
``int(tile * (1 - overlap_factor))`` latent (decode) or pixel (encode) rows / columns, overlap
factors 1/6 (height) and 1/5 (width); each tile runs the whole temporal chunk loop with its own
cache; then, in raster order, each tile's top rows are blended with the bottom rows of the tile
above and its left columns with the right columns of the tile to the left (linear ramps over
``int(tile_out * overlap_factor)`` rows / columns), and the first ``tile_out - blend`` rows /
columns of each tile are kept. The blending reads each neighbour as the full decoded tile (not
the cropped output), with the blends that tile itself received already applied, as the reference
does (its ``blend_v`` / ``blend_h`` write into the tile in place); this is done on the host in
float32. Tiled and untiled results differ (each tile has its own group-norm statistics and zero
padding at its borders); tiled output matches the reference's tiled output.

Precision: compute and parameters in ``float32`` (default) or ``bfloat16``; group-norm statistics,
affine and parameters always float32 (:data:`vidax.models.cogvideox.convert.VAE_FP32_PARAMS`); outputs
are float32.

The settings are :class:`~vidax.models.cogvideox.config.CogVideoXVAEConfig`; the loader is
:func:`vidax.weights.component.load_component`.

Not implemented (refused by :class:`CogVideoXVAEConfig`): block types other than ``CogVideoXDownBlock3D`` / ``CogVideoXUpBlock3D``. The reference's
``CogVideoXSafeConv3d`` splits very large convolutions along time with a halo of ``k - 1`` frames;
that is a memory device with the same result, and is not reproduced.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.models.cogvideox.config import CogVideoXVAEConfig
from vidax.nn.inputs import check_video_array
from vidax.nn.layers import Conv, GroupNorm, activation
from vidax.nn.tiling import TiledVAE, TilingSettings, scaled_sides
from vidax.nn.tiling import tiled as _tiled

NUM_SAMPLE_FRAMES_BATCH_SIZE = 8
"""Video frames per encoder chunk (the reference's ``num_sample_frames_batch_size``)."""

NUM_LATENT_FRAMES_BATCH_SIZE = 2
"""Latent frames per decoder chunk (the reference's ``num_latent_frames_batch_size``)."""

AUTO_TILE_AREA_FACTOR = 4
"""``tiled=None`` tiles a frame larger than this many times ``sample_height * sample_width``."""

_F32 = jnp.float32


# --------------------------------------------------------------------------------------------
# Tiling
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CogVideoXTiling:
    """Tile sizes of the reference's ``enable_tiling`` (pixels) and its overlap factors.

    Build it with :meth:`from_config` (the reference's defaults: half the training size, factors
    1/6 and 1/5). All derived sizes below are computed with the reference's expressions.
    ``use_tiling`` is the reference's switch (``enable_tiling()`` / ``disable_tiling()``).
    """

    tile_sample_min_height: int
    tile_sample_min_width: int
    tile_overlap_factor_height: float = 1 / 6
    tile_overlap_factor_width: float = 1 / 5
    spatial_compression: int = 8
    use_tiling: bool = False

    @classmethod
    def from_config(
        cls,
        config: CogVideoXVAEConfig,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_overlap_factor_height: float | None = None,
        tile_overlap_factor_width: float | None = None,
    ) -> CogVideoXTiling:
        """Defaults as ``AutoencoderKLCogVideoX.__init__``; arguments as ``enable_tiling(...)``.

        A ``None`` (or zero) argument keeps the default, as the reference's ``x or default``.

        Raises:
            InputError: a size that is not a positive integer, a factor outside ``(0, 1)``, or a
                combination whose tile step is zero.
        """
        out = cls(
            tile_sample_min_height or config.sample_height // 2,
            tile_sample_min_width or config.sample_width // 2,
            tile_overlap_factor_height or 1 / 6,
            tile_overlap_factor_width or 1 / 5,
            config.spatial_compression,
        )
        for name in ("tile_sample_min_height", "tile_sample_min_width"):
            v = getattr(out, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name}={v!r} must be a positive integer (pixels)")
        for name in ("tile_overlap_factor_height", "tile_overlap_factor_width"):
            v = getattr(out, name)
            if not isinstance(v, (int, float)) or not 0 < v < 1:
                raise InputError(f"{name}={v!r} must be a number in (0, 1)")
        if min(out.decode_params[1] + out.encode_params[1]) < 1:
            raise InputError(
                f"tiling {out} gives a tile step of 0 (tile_latent_min * (1 - overlap) < 1); "
                "use larger tiles or smaller overlap factors"
            )
        return out

    def scaled(self, scale: int) -> CogVideoXTiling:
        """Tiles ``scale`` times as large a side, the overlap factors kept (the reference's
        tiling has no stride of its own: ``enable_tiled_decode(scale)``); InputError where they
        would not keep the rows they advance (:meth:`check_exact`)."""
        out = scaled_sides(self, scale, strides=False)
        out.check_exact()
        return out

    def check_exact(self, given: Sequence[str] = ()) -> None:
        """Refuse tiles that keep more or fewer rows (columns) than they advance
        (:meth:`_keeps_its_step`): the reference's video would have the wrong size. ``given``: the
        keywords the caller passed (a size not among them is named as the VAE's current one).

        Raises:
            InputError: naming the size keyword and sizes that tile exactly with the factor.
        """
        out = self
        for axis in (0, 1):
            name = ("tile_sample_min_height", "tile_sample_min_width")[axis]
            if not out._keeps_its_step(axis):
                v = getattr(out, name)
                near = sorted(
                    (w for w in range(8, 4 * v + 64) if dataclasses.replace(out, **{name: w})._keeps_its_step(axis)),
                    key=lambda w: (abs(w - v), w),
                )[:3]
                factor = ("tile_overlap_factor_height", "tile_overlap_factor_width")[axis]
                fix = (
                    f"sizes that tile exactly with {factor}={getattr(out, factor):g}: "
                    f"{', '.join(map(str, sorted(near)))}"
                    if near
                    else f"no size up to {4 * v + 64} tiles exactly with {factor}={getattr(out, factor):g}: "
                    "change the factor (e.g. the default)"
                )
                shown = f"{name}={v!r}" if name in given else f"{name}={v!r} (the VAE's current size, not given here)"
                raise InputError(
                    f"{shown}: its tiles advance {out.decode_params[1][axis] * out.spatial_compression} "
                    f"pixels but each keeps {out.decode_params[3][axis]}, so the decoded video would come out "
                    f"the wrong size (diffusers' AutoencoderKLCogVideoX returns that wrong size); {fix}"
                )

    def _keeps_its_step(self, axis: int) -> bool:
        """Whether the reference's tile loops along ``axis`` (0 height, 1 width) keep exactly the
        rows they advance: decoding steps ``step`` latent rows and keeps ``limit`` pixels of each
        tile (encoding: ``step`` pixels, ``limit`` latent rows); where these disagree the
        reference's output has a wrong size."""
        c = self.spatial_compression
        dec, enc = self.decode_params, self.encode_params
        return dec[1][axis] * c == dec[3][axis] and enc[1][axis] == enc[3][axis] * c

    @property
    def tile_latent_min_height(self) -> int:
        return int(self.tile_sample_min_height / self.spatial_compression)

    @property
    def tile_latent_min_width(self) -> int:
        return int(self.tile_sample_min_width / self.spatial_compression)

    def _params(self, tile_in, tile_out):
        fh, fw = self.tile_overlap_factor_height, self.tile_overlap_factor_width
        step = (int(tile_in[0] * (1 - fh)), int(tile_in[1] * (1 - fw)))
        blend = (int(tile_out[0] * fh), int(tile_out[1] * fw))
        limit = (tile_out[0] - blend[0], tile_out[1] - blend[1])
        return tile_in, step, blend, limit

    @property
    def decode_params(self):
        """``((tile_h, tile_w) latent, (step_h, step_w) latent, blend (px), row limit (px))``."""
        lat = (self.tile_latent_min_height, self.tile_latent_min_width)
        smp = (self.tile_sample_min_height, self.tile_sample_min_width)
        return self._params(lat, smp)

    @property
    def encode_params(self):
        """``((tile_h, tile_w) px, (step_h, step_w) px, blend (latent), row limit (latent))``."""
        lat = (self.tile_latent_min_height, self.tile_latent_min_width)
        smp = (self.tile_sample_min_height, self.tile_sample_min_width)
        return self._params(smp, lat)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class _ConvCache:
    """One chunk's view of the functional conv cache: read in call order, collect new entries.

    ``entries=None`` is the first chunk: every causal conv pads with its first frame instead.
    """

    def __init__(self, entries: Sequence[jax.Array] | None):
        self._in = entries
        self.out: list[jax.Array] = []

    def take(self, like: jax.Array, frames: int) -> jax.Array | None:
        """The cached ``(B, frames, H, W, C)`` for the conv whose input is ``like``, or None."""
        if self._in is None:
            return None
        if len(self.out) >= len(self._in):
            raise ValueError(f"conv cache has {len(self._in)} entries; more layers read it")
        entry = self._in[len(self.out)]
        want = (like.shape[0], frames) + like.shape[2:]
        if entry.shape != want:
            raise ValueError(f"conv cache entry {len(self.out)} has shape {entry.shape}, need {want}")
        return entry.astype(like.dtype)

    def put(self, value: jax.Array) -> None:
        self.out.append(value)


class CogVideoXCausalConv3d(nnx.Module):
    """Conv3d causal in time with ``pad_mode="first"``; follows ``CogVideoXCausalConv3d``.

    The input gets ``kt - 1`` frames in front: the cached last frames of the previous chunk's
    padded input, or (first chunk) copies of its own first frame; the new cache is the last
    ``kt - 1`` frames of the padded input. Spatially it is zero padded as the reference's
    ``Conv3d(padding=(0, width_pad, height_pad))`` (H by ``(kw - 1) // 2``, W by ``(kh - 1) // 2``).
    A ``kt = 1`` conv neither reads nor writes the cache (the reference's cache for it is unused).
    Parameters: ``conv.kernel (kt, kh, kw, C_in, C_out)``, ``conv.bias (C_out,)``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *,
                 dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):  # fmt: skip
        k = kernel_size
        self.time_pad = k - 1
        pad = ((0, 0), ((k - 1) // 2,) * 2, ((k - 1) // 2,) * 2)
        self.conv = Conv(in_channels, out_channels, (k, k, k), padding=pad,
                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array, cache: _ConvCache) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T, H, W, C_out)``."""
        x = x.astype(self.conv.dtype)
        if self.time_pad:
            prev = cache.take(x, self.time_pad)
            if prev is None:
                prev = jnp.repeat(x[:, :1], self.time_pad, axis=1)
            x = jnp.concatenate([prev, x], axis=1)
            cache.put(x[:, -self.time_pad :])
        return self.conv(x)


def _nearest_index(out_size: int, in_size: int) -> np.ndarray | None:
    """Source indices of torch's ``F.interpolate(mode="nearest")`` along one axis (None = same)."""
    if out_size == in_size:
        return None
    if out_size == 2 * in_size:
        return np.arange(out_size) >> 1
    scale = np.float32(in_size) / np.float32(out_size)
    idx = np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(idx, in_size - 1)


def _resize_nearest(x: jax.Array, size: tuple[int, int, int]) -> jax.Array:
    """``x (B, T, H, W, C)`` -> ``(B, *size, C)`` as torch's nearest ``F.interpolate(size=...)``."""
    for axis, n in zip((1, 2, 3), size):
        idx = _nearest_index(n, x.shape[axis])
        if idx is None:
            continue
        ratio = n // x.shape[axis]
        if n % x.shape[axis] == 0 and np.array_equal(idx, np.arange(n) // ratio):
            x = jnp.repeat(x, ratio, axis=axis)  # an integer up-scale: cheaper than a gather
        else:
            x = jnp.take(x, jnp.asarray(idx, jnp.int32), axis=axis)
    return x


class _LatentCondition:
    """The decoder's latent chunk ``z (B, T_z, h, w, C_z)``, resized for the spatial norms.

    :meth:`at` resizes it by nearest neighbour to a feature map's ``(T, H, W)``; when ``T`` is odd
    and > 1 the first latent frame is resized alone to the first frame and the others to the
    remaining ``T - 1`` (as ``CogVideoXSpatialNorm3D``). Results are memoised per size, so the
    many norms at one resolution share one resize in the traced program.
    """

    def __init__(self, z: jax.Array):
        self.z = z
        self._memo: dict[tuple[int, int, int], jax.Array] = {}

    def at(self, t: int, h: int, w: int) -> jax.Array:
        if (t, h, w) not in self._memo:
            z = self.z
            if t > 1 and t % 2 == 1:
                first = _resize_nearest(z[:, :1], (1, h, w))
                z = jnp.concatenate([first, _resize_nearest(z[:, 1:], (t - 1, h, w))], axis=1)
            else:
                z = _resize_nearest(z, (t, h, w))
            self._memo[(t, h, w)] = z
        return self._memo[(t, h, w)]


class CogVideoXSpatialNorm3D(nnx.Module):
    """``GroupNorm(f) * conv_y(zq) + conv_b(zq)`` with ``zq`` resized to ``f``; follows diffusers
    ``CogVideoXSpatialNorm3D`` (group norm eps 1e-6; 1x1x1 causal convs ``conv_y`` / ``conv_b``;
    the resize is :meth:`_LatentCondition.at`)."""

    def __init__(self, f_channels: int, zq_channels: int, groups: int, *, dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm_layer = GroupNorm(f_channels, groups, eps=1e-6)
        self.conv_y = CogVideoXCausalConv3d(zq_channels, f_channels, 1, **kw)
        self.conv_b = CogVideoXCausalConv3d(zq_channels, f_channels, 1, **kw)

    def __call__(self, f: jax.Array, zq: _LatentCondition, cache: _ConvCache) -> jax.Array:
        """``f (B, T, H, W, C_f)`` conditioned on the latent chunk -> ``(B, T, H, W, C_f)``."""
        z = zq.at(*f.shape[1:4])
        return self.norm_layer(f) * self.conv_y(z, cache) + self.conv_b(z, cache)


class CogVideoXResnetBlock3D(nnx.Module):
    """norm-SiLU-causal conv twice plus a (1x1x1 conv) shortcut; follows diffusers
    ``CogVideoXResnetBlock3D`` (no time embedding, no conv shortcut option: as the VAE uses it).

    With ``spatial_norm_dim`` the norms are :class:`CogVideoXSpatialNorm3D` (decoder), otherwise
    group norms with ``eps`` (encoder).
    """

    def __init__(self, in_channels: int, out_channels: int, *, groups: int, eps: float,
                 spatial_norm_dim: int | None = None, act: str = "silu", dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.act = act
        if spatial_norm_dim is None:
            self.norm1 = GroupNorm(in_channels, groups, eps)
            self.norm2 = GroupNorm(out_channels, groups, eps)
        else:
            self.norm1 = CogVideoXSpatialNorm3D(in_channels, spatial_norm_dim, groups, **kw)
            self.norm2 = CogVideoXSpatialNorm3D(out_channels, spatial_norm_dim, groups, **kw)
        self.conv1 = CogVideoXCausalConv3d(in_channels, out_channels, 3, **kw)
        self.conv2 = CogVideoXCausalConv3d(out_channels, out_channels, 3, **kw)
        self.conv_shortcut = Conv(in_channels, out_channels, (1, 1, 1), **kw) if in_channels != out_channels else None

    def _norm(self, norm, x, zq, cache):
        return norm(x) if zq is None else norm(x, zq, cache)

    def __call__(self, x: jax.Array, zq: _LatentCondition | None, cache: _ConvCache) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T, H, W, C_out)``; ``zq`` for spatial norms."""
        act = activation(self.act)
        h = self.conv1(act(self._norm(self.norm1, x, zq, cache)), cache)
        h = self.conv2(act(self._norm(self.norm2, h, zq, cache)), cache)
        shortcut = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        return h + shortcut.astype(h.dtype)


class CogVideoXDownsample3D(nnx.Module):
    """Optional time halving, then zero pad right/bottom by 1 and Conv2d 3x3 stride 2 per frame;
    follows diffusers ``CogVideoXDownsample3D``.

    With ``compress_time``, an odd number of frames keeps the first frame and averages the others
    in pairs (``T -> 1 + (T - 1) / 2``); an even number averages all in pairs (``T -> T / 2``).
    """

    def __init__(self, channels: int, compress_time: bool, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.compress_time = compress_time
        self.conv = Conv(channels, channels, (3, 3), stride=(2, 2), padding=((0, 1), (0, 1)),
                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (B, T, H, W, C)`` -> ``(B, T', floor(H / 2), floor(W / 2), C)``."""
        if self.compress_time:
            first, rest = (x[:, :1], x[:, 1:]) if x.shape[1] % 2 else (x[:, :0], x)
            if rest.shape[1]:
                pairs = rest.astype(_F32).reshape(rest.shape[0], -1, 2, *rest.shape[2:])
                rest = (jnp.sum(pairs, axis=2) / 2).astype(x.dtype)
            x = jnp.concatenate([first, rest], axis=1)
        b, t = x.shape[:2]
        y = self.conv(x.reshape(b * t, *x.shape[2:]))
        return y.reshape(b, t, *y.shape[1:])


class CogVideoXUpsample3D(nnx.Module):
    """Nearest 2x up-sampling (optionally of time), then Conv2d 3x3 (padding 1) per frame;
    follows diffusers ``CogVideoXUpsample3D``.

    With ``compress_time``: one frame stays one frame; an odd number ``T > 1`` becomes
    ``1 + 2 (T - 1)`` (the first frame is not repeated); an even number doubles.
    """

    def __init__(self, channels: int, compress_time: bool, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.compress_time = compress_time
        self.conv = Conv(channels, channels, (3, 3), padding=((1, 1), (1, 1)),
                         dtype=dtype, param_dtype=param_dtype, rngs=rngs)  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (B, T, H, W, C)`` -> ``(B, T', 2 H, 2 W, C)``."""
        x = jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)
        t = x.shape[1]
        if self.compress_time and t > 1:
            if t % 2:
                x = jnp.concatenate([x[:, :1], jnp.repeat(x[:, 1:], 2, axis=1)], axis=1)
            else:
                x = jnp.repeat(x, 2, axis=1)
        b, t = x.shape[:2]
        y = self.conv(x.reshape(b * t, *x.shape[2:]))
        return y.reshape(b, t, *y.shape[1:])


class _ResnetStack(nnx.Module):
    """``resnets`` (an ``nnx.List``) run in order, then an optional resampler (slot 0 of a list)."""

    def _run(self, x, zq, cache):
        for resnet in self.resnets:
            x = resnet(x, zq, cache)
        return x


class CogVideoXDownBlock3D(_ResnetStack):
    """``num_layers`` resnets then an optional :class:`CogVideoXDownsample3D` (downsamplers.0)."""

    def __init__(self, in_channels: int, out_channels: int, num_layers: int, *, groups: int,
                 eps: float, add_downsample: bool, compress_time: bool, act: str = "silu", dtype, param_dtype,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = nnx.List([
            CogVideoXResnetBlock3D(in_channels if i == 0 else out_channels, out_channels,
                                   groups=groups, eps=eps, act=act, **kw)
            for i in range(num_layers)
        ])  # fmt: skip
        self.downsamplers = (
            nnx.List([CogVideoXDownsample3D(out_channels, compress_time, **kw)])
            if add_downsample else None
        )  # fmt: skip

    def __call__(self, x: jax.Array, cache: _ConvCache) -> jax.Array:
        x = self._run(x, None, cache)
        return self.downsamplers[0](x) if self.downsamplers is not None else x


class CogVideoXMidBlock3D(_ResnetStack):
    """Two resnets of ``channels`` (group norms, or spatial norms with ``spatial_norm_dim``)."""

    def __init__(self, channels: int, *, groups: int, eps: float, spatial_norm_dim: int | None,
                 act: str = "silu", dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = nnx.List([
            CogVideoXResnetBlock3D(channels, channels, groups=groups, eps=eps,
                                   spatial_norm_dim=spatial_norm_dim, act=act, **kw)
            for _ in range(2)
        ])  # fmt: skip

    def __call__(self, x: jax.Array, zq: _LatentCondition | None, cache: _ConvCache) -> jax.Array:
        return self._run(x, zq, cache)


class CogVideoXUpBlock3D(_ResnetStack):
    """``num_layers`` spatially-normed resnets then an optional :class:`CogVideoXUpsample3D`."""

    def __init__(self, in_channels: int, out_channels: int, num_layers: int, *, groups: int,
                 spatial_norm_dim: int, add_upsample: bool, compress_time: bool, act: str = "silu", dtype,
                 param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.resnets = nnx.List([
            CogVideoXResnetBlock3D(in_channels if i == 0 else out_channels, out_channels,
                                   groups=groups, eps=1e-6, spatial_norm_dim=spatial_norm_dim,
                                   act=act, **kw)
            for i in range(num_layers)
        ])  # fmt: skip
        self.upsamplers = (
            nnx.List([CogVideoXUpsample3D(out_channels, compress_time, **kw)])
            if add_upsample else None
        )  # fmt: skip

    def __call__(self, x: jax.Array, zq: _LatentCondition, cache: _ConvCache) -> jax.Array:
        x = self._run(x, zq, cache)
        return self.upsamplers[0](x) if self.upsamplers is not None else x


class CogVideoXEncoder3D(nnx.Module):
    """Video chunk ``(B, T, H, W, C_in)`` -> ``(B, T', H / 8, W / 8, 2 C_z)``; follows diffusers
    ``CogVideoXEncoder3D``."""

    def __init__(self, config: CogVideoXVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        boc = config.block_out_channels
        groups = config.norm_num_groups
        self.conv_in = CogVideoXCausalConv3d(config.in_channels, boc[0], 3, **kw)
        compress = config.compress_time + (False,)
        self.down_blocks = nnx.List([
            CogVideoXDownBlock3D(boc[max(i - 1, 0)], boc[i], config.layers_per_block,
                                 groups=groups, eps=config.norm_eps,
                                 add_downsample=i < len(boc) - 1, compress_time=compress[i],
                                 act=config.act_fn, **kw)
            for i in range(len(boc))
        ])  # fmt: skip
        self.mid_block = CogVideoXMidBlock3D(boc[-1], groups=groups, eps=config.norm_eps,
                                             spatial_norm_dim=None, act=config.act_fn, **kw)  # fmt: skip
        self.norm_out = GroupNorm(boc[-1], groups, eps=1e-6)
        self.conv_out = CogVideoXCausalConv3d(boc[-1], 2 * config.latent_channels, 3, **kw)

    def __call__(self, x: jax.Array, cache: _ConvCache) -> jax.Array:
        x = self.conv_in(x, cache)
        for block in self.down_blocks:
            x = block(x, cache)
        x = self.mid_block(x, None, cache)
        return self.conv_out(jax.nn.silu(self.norm_out(x)), cache)


class CogVideoXDecoder3D(nnx.Module):
    """Latent chunk ``(B, T', h, w, C_z)`` -> ``(B, T, 8 h, 8 w, C_out)``; follows diffusers
    ``CogVideoXDecoder3D`` (every norm is spatially conditioned on the latent chunk)."""

    def __init__(self, config: CogVideoXVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        rev = tuple(reversed(config.block_out_channels))
        groups = config.norm_num_groups
        zc = config.latent_channels
        self.conv_in = CogVideoXCausalConv3d(zc, rev[0], 3, **kw)
        self.mid_block = CogVideoXMidBlock3D(rev[0], groups=groups, eps=config.norm_eps,
                                             spatial_norm_dim=zc, act=config.act_fn, **kw)  # fmt: skip
        compress = config.compress_time + (False,)
        self.up_blocks = nnx.List([
            CogVideoXUpBlock3D(rev[max(i - 1, 0)], rev[i], config.layers_per_block + 1,
                               groups=groups, spatial_norm_dim=zc, add_upsample=i < len(rev) - 1,
                               compress_time=compress[i], act=config.act_fn, **kw)
            for i in range(len(rev))
        ])  # fmt: skip
        self.norm_out = CogVideoXSpatialNorm3D(rev[-1], zc, groups, **kw)
        self.conv_out = CogVideoXCausalConv3d(rev[-1], config.out_channels, 3, **kw)

    def __call__(self, z: jax.Array, cache: _ConvCache) -> jax.Array:
        zq = _LatentCondition(z)
        x = self.conv_in(z, cache)
        x = self.mid_block(x, zq, cache)
        for block in self.up_blocks:
            x = block(x, zq, cache)
        return self.conv_out(jax.nn.silu(self.norm_out(x, zq, cache)), cache)


# --------------------------------------------------------------------------------------------
# The autoencoder
# --------------------------------------------------------------------------------------------


class CogVideoXVAE(TiledVAE, nnx.Module):
    """The CogVideoX video VAE (follows ``diffusers.AutoencoderKLCogVideoX``), channels last.

    Args:
        config: the VAE's :class:`CogVideoXVAEConfig`.
        dtype: compute dtype (``float32`` or ``bfloat16``).
        param_dtype: storage dtype used when building (the loader's policy decides on load).
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    Use :meth:`encode` / :meth:`decode`; both run one jitted function per temporal chunk (traced
    once for the first chunk and once for the others, per tile shape when tiled) and return host
    (numpy) arrays. Tiling: ``enable_tiling(...)`` / ``disable_tiling()`` / ``use_tiling``
    (:class:`CogVideoXTiling`, :class:`vidax.nn.tiling.TiledVAE`).
    """

    TILING = CogVideoXTiling

    def __init__(self, config: CogVideoXVAEConfig, *, dtype=_F32, param_dtype=_F32,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype
        self.encoder = CogVideoXEncoder3D(config, **kw)
        self.decoder = CogVideoXDecoder3D(config, **kw)
        z2 = 2 * config.latent_channels
        self.quant_conv = Conv(z2, z2, (1, 1, 1), **kw) if config.use_quant_conv else None
        zc = config.latent_channels
        self.post_quant_conv = Conv(zc, zc, (1, 1, 1), **kw) if config.use_post_quant_conv else None
        self._tiling_settings = TilingSettings(CogVideoXTiling.from_config(config))

    def enable_tiling(
        self,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_overlap_factor_height: float | None = None,
        tile_overlap_factor_width: float | None = None,
    ) -> None:
        """Encode / decode large inputs in spatial tiles, as ``AutoencoderKLCogVideoX.enable_tiling``
        (a size left None keeps its current value; the defaults are :meth:`CogVideoXTiling.from_config`'s).

        Raises:
            InputError: a size that is not a positive integer, a factor outside ``(0, 1)``, a
                tile step of 0, or a size or factor given here whose tiles keep more or fewer rows
                than they advance (diffusers' video would come out the wrong size); checked here,
                before any decode.
        """
        given = dict(
            tile_sample_min_height=tile_sample_min_height,
            tile_sample_min_width=tile_sample_min_width,
            tile_overlap_factor_height=tile_overlap_factor_height,
            tile_overlap_factor_width=tile_overlap_factor_width,
        )
        now = self.tiling
        CogVideoXTiling.from_config(
            self.config, **{k: v if v is not None else getattr(now, k) for k, v in given.items()}
        ).check_exact(given=[k for k, v in given.items() if v is not None])
        self._enable_tiling(
            tile_sample_min_height=tile_sample_min_height,
            tile_sample_min_width=tile_sample_min_width,
            tile_overlap_factor_height=tile_overlap_factor_height,
            tile_overlap_factor_width=tile_overlap_factor_width,
        )

    def _checked_tiling(self, state: CogVideoXTiling) -> CogVideoXTiling:
        checked = CogVideoXTiling.from_config(
            self.config,
            state.tile_sample_min_height,
            state.tile_sample_min_width,
            state.tile_overlap_factor_height,
            state.tile_overlap_factor_width,
        )
        return dataclasses.replace(checked, use_tiling=state.use_tiling)

    @property
    def scaling_factor(self) -> float:
        """``config.scaling_factor`` (the pipelines decode ``latents / scaling_factor``)."""
        return self.config.scaling_factor

    # -- one temporal chunk (traced inside jit) ---------------------------------------------------

    def encode_chunk(self, x: jax.Array, cache: tuple | None):
        """``x (B, T, H, W, C_in)`` -> ``(h (B, T', H/8, W/8, 2 C_z) float32, new cache)``.

        ``h`` is the posterior's raw parameters (mean, then logvar before clamping); ``cache`` is
        ``None`` for the first chunk of a clip and the previous call's returned cache after.
        """
        feat = _ConvCache(cache)
        h = self.encoder(x.astype(self.dtype), feat)
        if self.quant_conv is not None:
            h = self.quant_conv(h)
        return h.astype(_F32), tuple(feat.out)

    def decode_chunk(self, z: jax.Array, cache: tuple | None):
        """``z (B, T', h, w, C_z)`` -> ``(frames (B, T, 8 h, 8 w, C_out) float32, new cache)``."""
        feat = _ConvCache(cache)
        z = z.astype(self.dtype)
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        out = self.decoder(z, feat)
        return out.astype(_F32), tuple(feat.out)

    # -- whole clips ------------------------------------------------------------------------------

    def encode(
        self, video, *, tiled: bool | None = None, tiling: CogVideoXTiling | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Encode a video to the posterior's ``(mean, logvar)`` (``AutoencoderKLCogVideoX.encode``).

        Args:
            video: ``(B, F, H, W, C_in)`` float in ``[-1, 1]`` (numpy or jax). Encoded in temporal
                chunks of 8 frames, the remainder ``F % 8`` joining the first chunk, as the
                reference (``F = 1`` or ``8 k + 1`` gives ``1 + 2 k`` latent frames for the
                released configs; other counts are processed the same way the reference does).
            tiled: ``True``: the reference's ``tiled_encode`` (used only when ``H`` or ``W``
                exceeds the tile, as in the reference with tiling enabled); ``False``: plain;
                ``None``: tiled when :attr:`use_tiling` (``enable_tiling()``), else only when
                ``H * W`` exceeds :data:`AUTO_TILE_AREA_FACTOR` times ``sample_height *
                sample_width`` (the diffusers pipelines never enable tiling, so up to that size
                the output is theirs).
            tiling: tile sizes (default :attr:`tiling`, set by ``enable_tiling``).

        Returns:
            ``(mean, logvar)``, each ``(B, T', H', W', C_z)`` float32 numpy, ``logvar`` clamped to
            ``[-30, 20]`` as ``DiagonalGaussianDistribution``. Unscaled latents: the pipelines
            multiply (or, with ``invert_scale_latents``, divide) by ``scaling_factor``.

        Raises:
            InputError: ``video`` is not 5-D floating point with ``in_channels`` channels on the
                last axis, or a frame side is smaller than the spatial compression; bad ``tiled``.
        """
        cfg = self.config
        shape = check_video_array("video", video, cfg.in_channels, "in_channels")
        for name, side in (("H", shape[2]), ("W", shape[3])):
            if side < cfg.spatial_compression:
                raise InputError(
                    f"video has {name}={side} (shape {shape}); the VAE needs at least "
                    f"{cfg.spatial_compression} pixels per side"
                )
        tiling = tiling or self.tiling
        tiled = True if tiled is None and tiling.use_tiling else tiled
        tile = tiling.encode_params[0]
        run = functools.partial(self._temporal, _encode_chunk, batch=NUM_SAMPLE_FRAMES_BATCH_SIZE)
        if self._use_tiles(tiled, shape[2:4], tile, shape[2:4]):
            h = _tiled(run, video, *tiling.encode_params)
        else:
            h = run(video)
        mean, logvar = np.split(h, 2, axis=-1)
        return np.ascontiguousarray(mean), np.clip(logvar, -30.0, 20.0)

    # -- the VAE contract (vidax.pipelines.contracts.VAE; the compression factors are the config's)

    def normalize_latents(self, z) -> jax.Array:
        """Posterior latents -> the diffusion model's: times ``scaling_factor`` (divided by it
        with ``invert_scale_latents``), as the reference's I2V ``prepare_latents``."""
        sf = self.config.scaling_factor
        return np.float32(1 / sf if self.config.invert_scale_latents else sf) * jnp.asarray(z, jnp.float32)

    def denormalize_latents(self, z) -> np.ndarray:
        """The diffusion model's latents -> what :meth:`decode` takes: ``latents / scaling_factor``."""
        return np.float32(1 / self.config.scaling_factor) * np.asarray(z, np.float32)

    def iter_decode(self, z, **kwargs):
        """:meth:`decode` as one chunk (its temporal chunks share the tiling pass)."""
        yield self.decode(z, **kwargs)

    def decode_chunks(self, z) -> int:
        return 1

    def decode(self, z, *, tiled: bool | None = None, tiling: CogVideoXTiling | None = None) -> np.ndarray:
        """Decode latents to video, following ``AutoencoderKLCogVideoX.decode(z).sample``.

        Args:
            z: unscaled latents ``(B, T', h, w, C_z)`` (the pipelines pass
                ``latents / scaling_factor``), numpy or jax. Decoded in temporal chunks of 2 latent
                frames, an odd remainder joining the first chunk (13 -> 3 + 2 + ... + 2).
            tiled: ``True``: the reference's ``tiled_decode`` (used only when ``h`` or ``w``
                exceeds the latent tile, as in the reference with tiling enabled); ``False``:
                plain; ``None``: tiled when :attr:`use_tiling` (``enable_tiling()``), else only
                when the decoded frame's area exceeds
                :data:`AUTO_TILE_AREA_FACTOR` times ``sample_height * sample_width`` (e.g. not at
                480x720 or 768x1360, yes at 1080x1920 for the released configs).
            tiling: tile sizes (default :attr:`tiling`, set by ``enable_tiling``).

        Returns:
            ``(B, F, 8 h, 8 w, C_out)`` float32 numpy, ``F = 1 + 4 (T' - 1)`` for odd ``T'`` and
            ``4 T'`` for even ``T'`` (released configs). Not clamped, as the reference: values
            are nominally in ``[-1, 1]`` and may overshoot slightly; the pipelines map them with
            ``clip(x / 2 + 0.5, 0, 1)``. Each chunk is copied to host as soon as it is decoded.

        Raises:
            InputError: ``z`` is not 5-D floating point with ``latent_channels`` channels on the
                last axis; bad ``tiled``.
        """
        cfg = self.config
        shape = check_video_array("z", z, cfg.latent_channels, "latent_channels")
        tiling = tiling or self.tiling
        tiled = True if tiled is None and tiling.use_tiling else tiled
        tile = tiling.decode_params[0]
        out_hw = (shape[2] * cfg.spatial_compression, shape[3] * cfg.spatial_compression)
        run = functools.partial(self._temporal, _decode_chunk, batch=NUM_LATENT_FRAMES_BATCH_SIZE)
        if self._use_tiles(tiled, shape[2:4], tile, out_hw):
            return _tiled(run, z, *tiling.decode_params)
        return run(z)

    def _use_tiles(self, tiled, hw, tile, out_hw) -> bool:
        if tiled is None:
            cfg = self.config
            limit = AUTO_TILE_AREA_FACTOR * cfg.sample_height * cfg.sample_width
            tiled = out_hw[0] * out_hw[1] > limit
        elif not isinstance(tiled, bool):
            raise InputError(f"tiled={tiled!r} must be True, False or None")
        # As the reference: with tiling enabled, inputs that fit in one tile run untiled.
        return tiled and (hw[0] > tile[0] or hw[1] > tile[1])

    def _temporal(self, chunk_fn, x, *, batch: int) -> np.ndarray:
        """Run ``chunk_fn`` over the reference's temporal chunks of ``x``; results on host."""
        graphdef, state = nnx.split(self)
        outs, cache = [], None
        for start, end in temporal_chunks(x.shape[1], batch):
            out, cache = chunk_fn(graphdef, state, jnp.asarray(x[:, start:end]), cache)
            # A copy, so no host array aliases the device buffer (CPU backends share memory).
            outs.append(np.array(out))
            del out
        return np.concatenate(outs, axis=1)


def decoded_frames(latent_frames: int, temporal_compression: int) -> int:
    """Frames the CogVideoX VAE decodes from ``latent_frames``: ``k T`` for even T, ``k (T-1) + 1``
    for odd T (its 2-latent-frame decode chunks, the odd remainder in the first)."""
    t, k = latent_frames, temporal_compression
    return k * t if t % 2 == 0 else k * (t - 1) + 1


def temporal_chunks(num_frames: int, batch: int) -> list[tuple[int, int]]:
    """The reference's frame ranges ``[start, end)``: ``max(n // b, 1)`` chunks, remainder first.

    >>> temporal_chunks(13, 2)
    [(0, 3), (3, 5), (5, 7), (7, 9), (9, 11), (11, 13)]
    """
    rem = num_frames % batch
    n = max(num_frames // batch, 1)
    return [(batch * i + (0 if i == 0 else rem), min(batch * (i + 1) + rem, num_frames)) for i in range(n)]


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(3,))
def _encode_chunk(graphdef, state, x, cache):
    return nnx.merge(graphdef, state).encode_chunk(x, cache)


@functools.partial(jax.jit, static_argnums=(0,), donate_argnums=(3,))
def _decode_chunk(graphdef, state, z, cache):
    return nnx.merge(graphdef, state).decode_chunk(z, cache)
