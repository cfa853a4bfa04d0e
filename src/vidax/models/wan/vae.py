"""The Wan2.1 and Wan2.2 3D causal VAEs in Flax NNX, following ``diffusers.AutoencoderKLWan``.

Layout: video ``(B, T, H, W, C)`` and latents ``(B, T', H', W', C_z)``, channels last, with
``T = 1 + 4 (T' - 1)`` and ``H = s H'``, ``W = s W'`` where ``s`` is
:attr:`WanVAEConfig.spatial_compression` (8 for Wan2.1, 16 for the Wan2.2 TI2V-5B VAE).

Wan2.2 (TI2V-5B) VAE: ``patch_size`` p folds each p x p pixel block into the channels before the
encoder (:func:`patchify`, 3 -> 12 channels for p = 2) and unfolds the decoder's output
(:func:`unpatchify`); ``in_channels`` / ``out_channels`` in its config count the folded
channels. ``is_residual`` replaces the down / up blocks by ``WanResidualDownBlock`` /
``WanResidualUpBlock``, whose shortcut is a parameter-free space/time-to-channel average
(:func:`avg_down_3d`) or channel-to-space/time duplication (:func:`dup_up_3d`) around the
residual blocks and resampler, and whose decoder channels are not halved by the up-samplers.
``decoder_base_dim`` sets the decoder width. ``clip_output`` (written by the Wan2.2 converter) is
not a setting of diffusers 0.42.1, which drops it when loading the config and always clamps the
decoded video to ``[-1, 1]``; vidax does the same (the pipelines' post-processing clamps to that
range anyway, so it changes no generated video).

The module tree mirrors the reference (``encoder.down_blocks.3.resample.1.weight`` is the NNX path
``encoder/down_blocks/3/resample/1/kernel``), so the checkpoint maps 1:1 by the loader's rule with
no renames (its registry entry names no ``key_rules``).

Frame-chunked causal cache
--------------------------
The reference encodes the first frame alone and then chunks of 4 frames, and decodes one latent
frame at a time; every causal convolution carries the last ``CACHE_T = 2`` frames of its input
from chunk to chunk (``feat_cache``), the temporal down-samplers carry 1 frame, and the temporal
up-samplers skip their time convolution on the first chunk (the ``"Rep"`` marker) and see zero
history on the second. Here that cache is an explicit pytree: a tuple of fixed-shape arrays, one
per cached layer in call order, passed into and returned from one jitted chunk function. A cache
entry of a 3-tap causal conv always holds 2 frames; an entry the reference would hold as
"nothing yet" (first chunk), as ``"Rep"``, or as a single frame is stored with zero frames in
front, which is exactly the zero padding the reference applies in those cases. Each chunk's
result is moved to host memory as soon as it is computed, so device memory does not grow with
the clip length.

The decoder runs every chunk, the first included, as one compiled program: the first chunk is
the steady-state chunk (one latent frame in, ``4`` frames out) with an all-zero cache and a
traced flag ``first``. Every layer is causal in time (convolutions look back only; norms,
attention and spatial up-sampling are per frame), so output frame 0 depends on input frame 0 and
the cache alone. With ``first`` set, each temporal up-sampler passes its input frames on
(repeated, so frame 0 is the input's frame 0, as when the reference skips the time conv) and
stores the zero ``"Rep"`` history, each causal conv stores the zero-padded first frame of its
input as its cache (the reference's one-frame cache), and the Wan2.2 shortcut puts the frame the
reference keeps first; output frame 0 is then the reference's first frame, and the host keeps
only it. The encoder keeps two programs (first frame, then chunks of 4).

Precision: parameters and compute in ``float32`` by default (the checkpoint is fp32 and the
reference keeps no fp32-only modules); with ``bfloat16`` the RMS norms (statistics, ``sqrt(C)``
scale and ``gamma``, stored fp32) and the attention softmax run in fp32.

The settings are :class:`~vidax.models.wan.config.WanVAEConfig`; the loader is
:func:`vidax.weights.component.load_component`.

Not implemented (refused by :class:`WanVAEConfig` with a ConfigError): ``attn_scales`` other
than ``[]`` (the reference's own chunked encode fails with attention blocks in ``down_blocks``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.models.wan.config import WanVAEConfig, decoder_levels, encoder_levels
from vidax.models.wan.vae_folding import avg_down_3d, dup_up_3d, patchify, unpatchify
from vidax.nn.inputs import check_video_array as _check_array
from vidax.nn.layers import matmul
from vidax.nn.tiling import StridedTiling, TiledVAE, TilingSettings, check_tiling_fields, tiled

CACHE_T = 2
"""Frames of history carried per causal 3-tap convolution between chunks (as the reference)."""

ENCODE_CHUNK = 4
"""Frames per encoder chunk after the first frame (fixed in the reference's ``_encode``)."""


@dataclasses.dataclass(frozen=True)
class WanTiling(StridedTiling):
    """Tile sizes of ``AutoencoderKLWan.enable_tiling`` in pixels (defaults as its ``__init__``).

    A latent wider or taller than ``tile_sample_min_* / s`` is decoded in overlapping tiles of
    that many latent pixels, one every ``tile_sample_stride_* / s``; each tile decodes all its
    frames with its own causal cache, and neighbours are blended over
    ``tile_sample_min_* - tile_sample_stride_*`` pixels (:func:`vidax.nn.tiling.tiled`).
    ``use_tiling`` is the switch (``enable_tiling()`` / ``disable_tiling()``).

    ``same_shape_tiles`` (vidax's, set by :meth:`scaled` for the plan's larger tiles): each tile
    has one shape, the last of a row or column ending at the edge (one program; ``tiled``'s
    ``same_shape``); ``enable_tiling``'s tiles keep the reference's layout."""

    tile_sample_min_height: int = 256
    tile_sample_min_width: int = 256
    tile_sample_stride_height: int = 192
    tile_sample_stride_width: int = 192
    use_tiling: bool = False
    same_shape_tiles: bool = False

    def scaled(self, scale: int) -> WanTiling:
        """:meth:`StridedTiling.scaled`, with every tile of one shape where ``scale`` > 1."""
        return dataclasses.replace(super().scaled(scale), same_shape_tiles=scale > 1 or self.same_shape_tiles)

    def check(self, config: WanVAEConfig, what: str = "") -> None:
        """Raise InputError (naming the keyword as ``{what}{field}=``) unless every size is a
        positive multiple of the spatial compression ``s`` and each stride is at most its tile."""
        check_tiling_fields(self, what)
        s = config.spatial_compression
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not isinstance(f.default, bool) and v % s:
                raise InputError(f"{what}{f.name}={v} must be a multiple of {s} (this VAE's spatial compression)")
        for axis in ("height", "width"):
            tile, stride = getattr(self, f"tile_sample_min_{axis}"), getattr(self, f"tile_sample_stride_{axis}")
            if stride > tile:
                raise InputError(
                    f"{what}tile_sample_stride_{axis}={stride} must be at most "
                    f"tile_sample_min_{axis}={tile} (tiles must overlap or touch)"
                )


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def _triple(v: int | Sequence[int]) -> tuple[int, int, int]:
    return (v, v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]


def _kernel_init(rngs: nnx.Rngs, shape: tuple[int, ...], dtype) -> nnx.Param:
    return nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), shape, dtype))


class _FeatCache:
    """One chunk's view of the functional cache: reads entries in call order, collects new ones.

    ``entries=None`` is the first chunk: every read returns zero frames (the zero padding the
    reference applies when its ``feat_cache`` slot is still empty). ``first`` is the decoder's
    traced flag (a bool scalar): set, only frame 0 of each layer's input is the clip's (the
    first chunk run as a steady-state one, see the module doc); None for the encoder, whose
    first chunk is its own program.
    """

    def __init__(self, entries: Sequence[jax.Array] | None, first: jax.Array | None = None):
        self._in = entries
        self.first = first
        self.out: list[jax.Array] = []

    def take(self, like: jax.Array, frames: int) -> jax.Array:
        """Cached frames ``(B, frames, H, W, C)`` for the layer whose input is ``like``."""
        if self._in is None:
            return jnp.zeros((like.shape[0], frames) + like.shape[2:], like.dtype)
        if len(self.out) >= len(self._in):
            raise ValueError(f"cache has {len(self._in)} entries; more layers read it")
        entry = self._in[len(self.out)]
        want = (like.shape[0], frames) + like.shape[2:]
        if entry.shape != want:
            raise ValueError(f"cache entry {len(self.out)} has shape {entry.shape}, need {want}")
        return entry.astype(like.dtype)

    def put(self, value: jax.Array) -> None:
        self.out.append(value)


class WanCausalConv3d(nnx.Module):
    """Conv3d causal in time, following diffusers ``WanCausalConv3d``.

    The input is padded with ``2 * padding_t`` frames in front (cached frames first, zeros for
    the rest) and ``padding_h`` / ``padding_w`` zeros on both sides, then convolved VALID.

    Args:
        in_channels, out_channels: channels ``C_in`` / ``C_out``.
        kernel_size, stride, padding: int or ``(t, h, w)``, as the reference.
        dtype: compute dtype; param_dtype: storage dtype of kernel ``(kt, kh, kw, C_in, C_out)``
            and bias ``(C_out,)``.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, *,
                 dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):  # fmt: skip
        k = _triple(kernel_size)
        self.stride = _triple(stride)
        p = _triple(padding)
        self.time_pad = 2 * p[0]
        self.spatial_pad = (p[1], p[2])
        self.dtype = dtype
        self.kernel = _kernel_init(rngs, (*k, in_channels, out_channels), param_dtype)
        self.bias = nnx.Param(jnp.zeros((out_channels,), param_dtype))

    def __call__(self, x: jax.Array, cache: jax.Array | None = None) -> jax.Array:
        """``x (B, T, H, W, C_in)``, ``cache (B, n, H, W, C_in)`` or None -> ``(B, T', H', W', O)``.

        ``cache`` (the ``n`` frames before ``x``) replaces ``n`` of the front zero-padding frames.
        """
        x = x.astype(self.dtype)
        front = self.time_pad
        if cache is not None and front > 0:
            x = jnp.concatenate([cache.astype(self.dtype), x], axis=1)
            front -= cache.shape[1]
        ph, pw = self.spatial_pad
        if front or ph or pw:
            x = jnp.pad(x, ((0, 0), (front, 0), (ph, ph), (pw, pw), (0, 0)))
        y = jax.lax.conv_general_dilated(
            x, self.kernel[...].astype(self.dtype), self.stride, "VALID",
            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
        )  # fmt: skip
        return y + self.bias[...].astype(self.dtype)

    def cached(self, x: jax.Array, feat: _FeatCache) -> jax.Array:
        """Apply with the chunk cache: read the cached ``CACHE_T`` frames, store the new ones
        (with ``feat.first`` set: the cache followed by ``x``'s frame 0 only)."""
        cache = feat.take(x, CACHE_T)
        new = jnp.concatenate([cache, x.astype(cache.dtype)], axis=1)[:, -CACHE_T:]
        if feat.first is not None and x.shape[1] > 1:
            first = jnp.concatenate([cache, x[:, :1].astype(cache.dtype)], axis=1)[:, -CACHE_T:]
            new = jnp.where(feat.first, first, new)
        feat.put(new)
        return self(x, cache)


class _Conv2d(nnx.Module):
    """torch ``nn.Conv2d`` on ``(N, H, W, C)``, symmetric zero pad; kernel ``(kh, kw, I, O)``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, *,
                 dtype=jnp.float32, param_dtype=jnp.float32, rngs: nnx.Rngs):  # fmt: skip
        self.stride = (stride, stride)
        self.padding = padding
        self.dtype = dtype
        shape = (kernel_size, kernel_size, in_channels, out_channels)
        self.kernel = _kernel_init(rngs, shape, param_dtype)
        self.bias = nnx.Param(jnp.zeros((out_channels,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(self.dtype)
        p = self.padding
        if p:
            x = jnp.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
        y = jax.lax.conv_general_dilated(
            x, self.kernel[...].astype(self.dtype), self.stride, "VALID",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )  # fmt: skip
        return y + self.bias[...].astype(self.dtype)


class WanRMS_norm(nnx.Module):  # noqa: N801 (reference name)
    """``x / max(||x||_C, 1e-12) * sqrt(C) * gamma``, following diffusers ``WanRMS_norm``.

    ``gamma`` keeps the reference shape ``(C, 1, 1, 1)`` (``images=False``) or ``(C, 1, 1)``
    (``images=True``) and is reshaped to ``(C,)`` here; the Wan VAEs have no norm bias. The
    whole norm runs in fp32 and returns the input dtype.
    """

    def __init__(self, dim: int, images: bool = True):
        self.dim = dim
        self.gamma = nnx.Param(jnp.ones((dim, 1, 1) if images else (dim, 1, 1, 1), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (..., C)`` -> same shape and dtype."""
        xf = x.astype(jnp.float32)
        norm = jnp.sqrt(jnp.sum(xf * xf, axis=-1, keepdims=True))
        y = xf / jnp.maximum(norm, 1e-12) * (self.dim**0.5)
        return (y * self.gamma[...].astype(jnp.float32).reshape(self.dim)).astype(x.dtype)


class WanResidualBlock(nnx.Module):
    """RMSNorm-SiLU-CausalConv3d twice plus shortcut; follows diffusers ``WanResidualBlock``."""

    def __init__(self, in_dim: int, out_dim: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm1 = WanRMS_norm(in_dim, images=False)
        self.conv1 = WanCausalConv3d(in_dim, out_dim, 3, padding=1, **kw)
        self.norm2 = WanRMS_norm(out_dim, images=False)
        self.conv2 = WanCausalConv3d(out_dim, out_dim, 3, padding=1, **kw)
        self.conv_shortcut = WanCausalConv3d(in_dim, out_dim, 1, **kw) if in_dim != out_dim else None

    def __call__(self, x: jax.Array, feat: _FeatCache) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T, H, W, C_out)``."""
        h = self.conv_shortcut(x) if self.conv_shortcut is not None else x
        x = self.conv1.cached(jax.nn.silu(self.norm1(x)), feat)
        x = self.conv2.cached(jax.nn.silu(self.norm2(x)), feat)
        return x + h.astype(x.dtype)


class WanAttentionBlock(nnx.Module):
    """Single-head self-attention over each frame's H*W positions (``WanAttentionBlock``)."""

    def __init__(self, dim: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dim = dim
        self.dtype = dtype
        self.norm = WanRMS_norm(dim, images=True)
        self.to_qkv = _Conv2d(dim, dim * 3, 1, **kw)
        self.proj = _Conv2d(dim, dim, 1, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (B, T, H, W, C)`` -> same shape; softmax in fp32, scale ``1/sqrt(C)``."""
        b, t, h, w, c = x.shape
        identity = x
        y = self.to_qkv(self.norm(x.reshape(b * t, h, w, c))).reshape(b * t, h * w, 3 * c)
        q, k, v = jnp.split(y, 3, axis=-1)
        logits = jnp.einsum("nqc,nkc->nqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(c)
        probs = jax.nn.softmax(logits, axis=-1).astype(self.dtype)
        y = matmul("nqk,nkc->nqc", probs, v, self.dtype).reshape(b * t, h, w, c)
        y = self.proj(y).reshape(b, t, h, w, c)
        return y + identity.astype(y.dtype)


class WanResample(nnx.Module):
    """Spatial 2x up/down-sampling, optionally with a causal time conv (diffusers ``WanResample``).

    Modes: ``upsample2d`` / ``upsample3d`` (nearest 2x then Conv2d 3x3 to ``dim // 2`` channels;
    3d first doubles the frames with ``time_conv`` to ``2 dim`` channels; on the first chunk the
    reference skips it: here the input frames are repeated instead, see the module doc),
    ``downsample2d`` / ``downsample3d`` (zero pad right/bottom by 1, Conv2d 3x3 stride 2;
    3d then halves the frames with a stride-2 ``time_conv`` over the last cached frame plus the
    chunk, skipped on the first chunk). ``resample`` is a list whose slot 0 (the parameter-free
    upsample / pad of the reference's ``nn.Sequential``) is ``None``.
    """

    def __init__(self, dim: int, mode: str, upsample_out_dim: int | None = None, *,
                 dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        if mode not in ("upsample2d", "upsample3d", "downsample2d", "downsample3d"):
            raise ValueError(f"WanResample mode={mode!r}")
        self.mode = mode
        if mode.startswith("upsample"):
            out = dim // 2 if upsample_out_dim is None else upsample_out_dim
            self.resample = nnx.List([None, _Conv2d(dim, out, 3, padding=1, **kw)])
        else:
            self.resample = nnx.List([None, _Conv2d(dim, dim, 3, stride=2, **kw)])
        if mode == "upsample3d":
            self.time_conv = WanCausalConv3d(dim, dim * 2, (3, 1, 1), padding=(1, 0, 0), **kw)
        elif mode == "downsample3d":
            self.time_conv = WanCausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1), **kw)
        else:
            self.time_conv = None

    def __call__(self, x: jax.Array, feat: _FeatCache, first: bool | jax.Array) -> jax.Array:
        """``x (B, T, H, W, C)`` -> ``(B, T', H', W', C')``; ``first``: the clip's first chunk
        (a Python bool in the encoder; the decoder's traced flag ``feat.first`` for up-sampling).
        """
        if self.mode == "upsample3d":
            cache = feat.take(x, CACHE_T)
            y = self.time_conv(x, cache)
            b, t, h, w, c2 = y.shape
            y = jnp.moveaxis(y.reshape(b, t, h, w, 2, c2 // 2), 4, 2).reshape(b, 2 * t, h, w, c2 // 2)
            new = jnp.concatenate([cache, x.astype(cache.dtype)], axis=1)[:, -CACHE_T:]
            # First chunk, as the reference: no time conv (frame 0 stays the input's frame 0) and
            # the slot becomes "Rep", which the next chunk reads as zero history.
            feat.put(jnp.where(first, jnp.zeros_like(new), new))
            x = jnp.where(first, jnp.repeat(x.astype(y.dtype), 2, axis=1), y)
        b, t, h, w, c = x.shape
        y = x.reshape(b * t, h, w, c)
        if self.mode.startswith("upsample"):
            y = jnp.repeat(jnp.repeat(y, 2, axis=1), 2, axis=2)  # nearest-exact at scale 2
        else:
            y = jnp.pad(y, ((0, 0), (0, 1), (0, 1), (0, 0)))
        y = self.resample[1](y)
        x = y.reshape(b, t, *y.shape[1:])
        if self.mode == "downsample3d":
            if first:
                feat.put(x[:, -1:])
            else:
                last = feat.take(x, 1)
                feat.put(x[:, -1:])
                x = self.time_conv(jnp.concatenate([last, x], axis=1))
        return x


class WanMidBlock(nnx.Module):
    """Residual, attention, residual (diffusers ``WanMidBlock`` with ``num_layers=1``)."""

    def __init__(self, dim: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.attentions = nnx.List([WanAttentionBlock(dim, **kw)])
        self.resnets = nnx.List([WanResidualBlock(dim, dim, **kw) for _ in range(2)])

    def __call__(self, x: jax.Array, feat: _FeatCache) -> jax.Array:
        x = self.resnets[0](x, feat)
        for attn, resnet in zip(self.attentions, list(self.resnets)[1:]):
            x = resnet(attn(x), feat)
        return x


class WanUpBlock(nnx.Module):
    """``num_res_blocks + 1`` residual blocks, then an optional upsampler (``WanUpBlock``)."""

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, upsample_mode: str | None,
                 *, dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        dims = [in_dim] + [out_dim] * (num_res_blocks + 1)
        self.resnets = nnx.List([WanResidualBlock(a, b, **kw) for a, b in zip(dims[:-1], dims[1:])])
        upsamplers = None
        if upsample_mode is not None:
            upsamplers = nnx.List([WanResample(out_dim, upsample_mode, **kw)])
        self.upsamplers = upsamplers

    def __call__(self, x: jax.Array, feat: _FeatCache) -> jax.Array:
        for resnet in self.resnets:
            x = resnet(x, feat)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x, feat, feat.first)
        return x


class WanResidualDownBlock(nnx.Module):
    """Wan2.2 encoder level (diffusers ``WanResidualDownBlock``).

    ``num_res_blocks`` residual blocks and an optional down-sampler, plus the parameter-free
    shortcut :func:`avg_down_3d` of the block's input (the reference's ``avg_shortcut``).
    """

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, temporal: bool,
                 spatial: bool, *, dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        dims = [in_dim] + [out_dim] * num_res_blocks
        self.resnets = nnx.List([WanResidualBlock(a, b, **kw) for a, b in zip(dims[:-1], dims[1:])])
        mode = "downsample3d" if temporal else "downsample2d"
        self.downsampler = WanResample(out_dim, mode, **kw) if spatial else None
        self.out_dim = out_dim
        self.factor_t = 2 if temporal else 1
        self.factor_s = 2 if spatial else 1

    def __call__(self, x: jax.Array, feat: _FeatCache, first: bool) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T', H', W', C_out)``."""
        shortcut = avg_down_3d(x, self.out_dim, self.factor_t, self.factor_s)
        for resnet in self.resnets:
            x = resnet(x, feat)
        if self.downsampler is not None:
            x = self.downsampler(x, feat, first)
        return x + shortcut.astype(x.dtype)


class WanResidualUpBlock(nnx.Module):
    """Wan2.2 decoder level (diffusers ``WanResidualUpBlock``).

    ``num_res_blocks + 1`` residual blocks and an optional up-sampler that keeps the channel
    count, plus (when up-sampling) the parameter-free shortcut :func:`dup_up_3d` of the block's
    input.
    """

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, temporal: bool,
                 spatial: bool, *, dtype, param_dtype, rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        dims = [in_dim] + [out_dim] * (num_res_blocks + 1)
        self.resnets = nnx.List([WanResidualBlock(a, b, **kw) for a, b in zip(dims[:-1], dims[1:])])
        mode = "upsample3d" if temporal else "upsample2d"
        self.upsampler = WanResample(out_dim, mode, upsample_out_dim=out_dim, **kw) if spatial else None
        self.out_dim = out_dim
        self.factor_t = 2 if temporal else 1

    def __call__(self, x: jax.Array, feat: _FeatCache) -> jax.Array:
        """``x (B, T, H, W, C_in)`` -> ``(B, T', H', W', C_out)``."""
        x_in = x
        for resnet in self.resnets:
            x = resnet(x, feat)
        if self.upsampler is None:
            return x
        x = self.upsampler(x, feat, feat.first)
        shortcut = dup_up_3d(x_in, self.out_dim, self.factor_t, 2, False)
        if self.factor_t > 1:
            # First chunk: the reference drops the first factor_t - 1 frames; rotated here, so
            # that frame 0 is its first frame and the shape stays the steady-state chunk's.
            shortcut = jnp.where(feat.first, jnp.roll(shortcut, 1 - self.factor_t, axis=1), shortcut)
        return x + shortcut.astype(x.dtype)


class WanEncoder3d(nnx.Module):
    """Chunk ``(B, T, H, W, C_in)`` -> ``(B, T', H/2^k, W/2^k, 2 C_z)`` (``WanEncoder3d``).

    ``down_blocks`` is a flat list of residual blocks and resamplers (Wan2.1), or one
    :class:`WanResidualDownBlock` per level (``is_residual``, Wan2.2).
    """

    def __init__(self, config: WanVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        levels = encoder_levels(config)
        self.conv_in = WanCausalConv3d(config.in_channels, levels[0][0], 3, padding=1, **kw)
        blocks: list[nnx.Module] = []
        for in_dim, out_dim, temporal, spatial in levels:
            if config.is_residual:
                blocks.append(WanResidualDownBlock(
                    in_dim, out_dim, config.num_res_blocks, temporal, spatial, **kw
                ))  # fmt: skip
                continue
            for _ in range(config.num_res_blocks):
                blocks.append(WanResidualBlock(in_dim, out_dim, **kw))
                in_dim = out_dim
            if spatial:
                mode = "downsample3d" if temporal else "downsample2d"
                blocks.append(WanResample(out_dim, mode, **kw))
        self.down_blocks = nnx.List(blocks)
        dim = levels[-1][1]
        self.mid_block = WanMidBlock(dim, **kw)
        self.norm_out = WanRMS_norm(dim, images=False)
        self.conv_out = WanCausalConv3d(dim, 2 * config.z_dim, 3, padding=1, **kw)

    def __call__(self, x: jax.Array, feat: _FeatCache, first: bool) -> jax.Array:
        x = self.conv_in.cached(x, feat)
        for layer in self.down_blocks:
            if isinstance(layer, WanResidualBlock):
                x = layer(x, feat)
            else:
                x = layer(x, feat, first)
        x = self.mid_block(x, feat)
        return self.conv_out.cached(jax.nn.silu(self.norm_out(x)), feat)


class WanDecoder3d(nnx.Module):
    """Latent chunk ``(B, 1, H', W', C_z)`` -> ``(B, 4, 2^k H', 2^k W', C_out)`` (frame 0 alone
    is the clip's on the first chunk; ``WanDecoder3d``); ``up_blocks`` are :class:`WanUpBlock` (Wan2.1) or
    :class:`WanResidualUpBlock` (``is_residual``, Wan2.2)."""

    def __init__(self, config: WanVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        levels = decoder_levels(config)
        dim = levels[0][0]
        self.conv_in = WanCausalConv3d(config.z_dim, dim, 3, padding=1, **kw)
        self.mid_block = WanMidBlock(dim, **kw)
        blocks: list[nnx.Module] = []
        for in_dim, out_dim, temporal, spatial in levels:
            if config.is_residual:
                blocks.append(WanResidualUpBlock(
                    in_dim, out_dim, config.num_res_blocks, temporal, spatial, **kw
                ))  # fmt: skip
                continue
            mode = ("upsample3d" if temporal else "upsample2d") if spatial else None
            blocks.append(WanUpBlock(in_dim, out_dim, config.num_res_blocks, mode, **kw))
        self.up_blocks = nnx.List(blocks)
        dim = levels[-1][1]
        self.norm_out = WanRMS_norm(dim, images=False)
        self.conv_out = WanCausalConv3d(dim, config.out_channels, 3, padding=1, **kw)

    def __call__(self, x: jax.Array, feat: _FeatCache) -> jax.Array:
        """``feat.first`` (traced) marks the first chunk; the output has the steady-state
        chunk's frames either way (see the module doc)."""
        x = self.conv_in.cached(x, feat)
        x = self.mid_block(x, feat)
        for block in self.up_blocks:
            x = block(x, feat)
        return self.conv_out.cached(jax.nn.silu(self.norm_out(x)), feat)


# --------------------------------------------------------------------------------------------
# The autoencoder
# --------------------------------------------------------------------------------------------


class WanVAE(TiledVAE, nnx.Module):
    """The Wan2.1 / Wan2.2 video VAE (follows ``diffusers.AutoencoderKLWan``), channels last.

    Below, ``s`` is ``config.spatial_compression`` (8 or 16), ``C`` the video channels
    (``config.video_in_channels`` / ``video_out_channels``, 3) and ``C_z`` ``config.z_dim``.

    Args:
        config: the VAE's :class:`WanVAEConfig`.
        dtype: compute dtype (``float32`` or ``bfloat16``).
        param_dtype: storage dtype used when building (the loader's policy decides on load).
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    Use :meth:`encode` / :meth:`decode`; both run one jitted function per chunk and return host
    (numpy) arrays. The decode compiles one program for every chunk of a latent size, the first
    included; the encode compiles one for the first frame and one for the later chunks. Tiling:
    ``enable_tiling(...)`` / ``disable_tiling()`` / ``use_tiling`` (:class:`WanTiling`,
    :class:`vidax.nn.tiling.TiledVAE`).
    """

    TILING = WanTiling

    def __init__(self, config: WanVAEConfig, *, dtype=jnp.float32, param_dtype=jnp.float32,
                 rngs: nnx.Rngs):  # fmt: skip
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype
        self.encoder = WanEncoder3d(config, **kw)
        self.quant_conv = WanCausalConv3d(2 * config.z_dim, 2 * config.z_dim, 1, **kw)
        self.post_quant_conv = WanCausalConv3d(config.z_dim, config.z_dim, 1, **kw)
        self.decoder = WanDecoder3d(config, **kw)
        self._tiling_settings = TilingSettings(WanTiling())

    # -- tiling (diffusers' switches: vidax.nn.tiling.TiledVAE) ---------------------------------

    def enable_tiling(
        self,
        tile_sample_min_height: int | None = None,
        tile_sample_min_width: int | None = None,
        tile_sample_stride_height: int | None = None,
        tile_sample_stride_width: int | None = None,
    ) -> None:
        """Decode large latents in spatial tiles, as ``AutoencoderKLWan.enable_tiling``: a size
        left None keeps its current value (the :class:`WanTiling` defaults at first).

        Raises:
            InputError: a size is not a positive multiple of the spatial compression, or a stride
                is larger than its tile (checked here, before any decode).
        """
        self._enable_tiling(
            tile_sample_min_height=tile_sample_min_height,
            tile_sample_min_width=tile_sample_min_width,
            tile_sample_stride_height=tile_sample_stride_height,
            tile_sample_stride_width=tile_sample_stride_width,
        )

    def _checked_tiling(self, state: WanTiling) -> WanTiling:
        state.check(self.config)
        return state

    def _tiles(self, shape) -> bool:
        """Whether a latent of ``shape (B, T', H', W', C_z)`` is decoded in tiles (as the
        reference's ``_decode``: tiling on and the latent larger than one tile)."""
        t, s = self.tiling, self.config.spatial_compression
        return t.use_tiling and (shape[3] > t.tile_sample_min_width // s or shape[2] > t.tile_sample_min_height // s)

    # -- one chunk (traced inside jit) --------------------------------------------------------

    def encode_chunk(self, x: jax.Array, cache: tuple | None, first: bool):
        """Encode one chunk: ``x (B, 1 or 4, H, W, C)`` -> ``(mean, logvar, cache)``.

        ``mean`` / ``logvar`` are ``(B, 1, H/s, W/s, C_z)`` float32, ``logvar`` clamped to
        ``[-30, 20]`` as ``DiagonalGaussianDistribution``; ``cache`` is the tuple to pass with the
        next chunk (``None`` and ``first=True`` for the first chunk).
        """
        feat = _FeatCache(cache)
        x = patchify(x.astype(self.dtype), self.config.patch)
        h = self.quant_conv(self.encoder(x, feat, first)).astype(jnp.float32)
        mean, logvar = jnp.split(h, 2, axis=-1)
        return mean, jnp.clip(logvar, -30.0, 20.0), tuple(feat.out)

    def decode_chunk(self, z: jax.Array, cache: tuple | None, first: bool | jax.Array, raw: bool = False):
        """Decode one latent frame ``z (B, 1, H', W', C_z)`` -> ``(frames, cache)``.

        ``frames`` is ``(B, 4, s H', s W', C)`` float32 clamped to ``[-1, 1]``; on the clip's
        first chunk (``first`` true, a bool scalar that may be traced, with the all-zero cache
        of :meth:`decode_cache`) only frame 0 is the video's. With ``raw`` the decoder's own
        float32 output, before the unfolding of p x p pixel blocks and the clamp (``(B, 4,
        s H' / p, s W' / p, C p^2)``, what the reference's tiled decode blends). ``cache``
        None reads as zeros (used to find the cache's shapes).
        """
        feat = _FeatCache(cache, jnp.asarray(first, jnp.bool_))
        x = self.post_quant_conv(z.astype(self.dtype))
        out = self.decoder(x, feat).astype(jnp.float32)
        if raw:
            return out, tuple(feat.out)
        return jnp.clip(unpatchify(out, self.config.patch), -1.0, 1.0), tuple(feat.out)

    # -- whole clips ------------------------------------------------------------------------------

    def encode(self, video) -> tuple[np.ndarray, np.ndarray]:
        """Encode a video to the posterior's ``(mean, logvar)`` (``AutoencoderKLWan.encode``).

        Args:
            video: ``(B, T, H, W, C)`` float in ``[-1, 1]`` (numpy or jax), ``T = 1 + 4 k``; H
                and W multiples of ``config.pixel_multiple`` (1 for Wan2.1, 16 for Wan2.2).
                Processed as the reference does: frame 0 alone, then chunks of 4 frames.

        Returns:
            ``(mean, logvar)``, each ``(B, 1 + k, H/s, W/s, C_z)`` float32 numpy (for the released
            configs; unnormalised latents, see :func:`normalize_latents`). The diffusers Wan I2V
            pipelines use the mean (``retrieve_latents(..., sample_mode="argmax")``); a sample
            would be ``mean + exp(0.5 * logvar) * noise``. Each chunk's result is copied to host
            as soon as it is computed.

        Raises:
            InputError: ``video`` is not 5-D, has the wrong channel count, a frame count that is
                not ``1 + 4 k``, a size that is not a multiple of ``config.pixel_multiple``, or
                is not floating point.
        """
        cfg = self.config
        shape = _check_array("video", video, cfg.video_in_channels, "video input channels")
        m = cfg.pixel_multiple
        if shape[2] % m or shape[3] % m:
            raise InputError(
                f"video is {shape[2]} x {shape[3]} pixels (H x W); this VAE (patch_size="
                f"{cfg.patch_size}, is_residual={cfg.is_residual}) needs multiples of {m}"
            )
        t = shape[1]
        step = ENCODE_CHUNK
        if (t - 1) % step:
            raise InputError(
                f"video has T={t} frames; the Wan VAE encodes 1 + {step} k frames (1, {1 + step}, "
                f"{1 + 2 * step}, ...); trim or pad the clip"
            )
        graphdef, state = nnx.split(self)
        means, logvars, cache = [], [], None
        for i in range(1 + (t - 1) // step):
            chunk = video[:, :1] if i == 0 else video[:, 1 + step * (i - 1) : 1 + step * i]
            mean, logvar, cache = _encode_chunk(graphdef, state, jnp.asarray(chunk), cache, i == 0)
            means.append(np.array(mean))
            logvars.append(np.array(logvar))
        return np.concatenate(means, axis=1), np.concatenate(logvars, axis=1)

    def iter_decode(self, z) -> Iterator[np.ndarray]:
        """Decode latents chunk by chunk, yielding each chunk as a host array once it is ready.

        Args:
            z: unnormalised latents ``(B, T', H', W', C_z)`` (see :func:`denormalize_latents`).

        Returns:
            An iterator over ``T'`` float32 numpy arrays: ``(B, 1, s H', s W', C)`` for the
            first latent frame, then ``(B, 4, s H', s W', C)`` for each further one, in
            ``[-1, 1]``. Device memory holds one chunk and the cache at a time. With tiling on
            (:meth:`enable_tiling`) and ``z`` larger than a tile: one array, the whole video,
            decoded tile by tile as ``AutoencoderKLWan.tiled_decode`` (device memory: one
            tile's chunk and cache).

        Raises:
            InputError: ``z`` is not 5-D, has the wrong channel count or is not floating point
                (raised by this call, before iterating).
        """
        shape = _check_array("z", z, self.config.z_dim, "z_dim")
        graphdef, state = nnx.split(self)
        if self._tiles(shape):
            return iter((self._tiled_decode(z, graphdef, state),))

        def chunks():
            cache = self.decode_cache(z[:, :1], graphdef, state)
            for i in range(shape[1]):
                zi = jnp.asarray(z[:, i : i + 1])
                out, cache = _decode_chunk(graphdef, state, zi, cache, np.bool_(i == 0))
                # A copy, so no host array aliases the device buffer (CPU backends share memory);
                # the first chunk keeps its frame 0 (sliced on host: no program for the slice).
                yield np.array(np.asarray(out)[:, :1] if i == 0 else out)
                del out

        return chunks()

    def decode_cache(self, z, graphdef=None, state=None, raw: bool = False) -> tuple:
        """The all-zero cache the first chunk of latents shaped as ``z (B, T', H', W', C_z)``
        is decoded with: a tuple of float arrays ``(B, n, h, w, c)``, one per cached layer, put
        from host zeros (no program is compiled for them) where the VAE's parameters are, as the
        caches the decode returns: an array placed elsewhere would compile the decode again."""
        if graphdef is None:
            graphdef, state = nnx.split(self)
        zi = jax.ShapeDtypeStruct((z.shape[0], 1) + tuple(z.shape[2:]), jax.dtypes.canonicalize_dtype(z.dtype))
        _, cache = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s).decode_chunk(x, None, True, raw), state, zi)
        where = jax.tree.leaves(state)[0].sharding
        return tuple(jax.device_put(np.zeros(c.shape, c.dtype), where) for c in cache)

    def decode_stream(self, z, caches: dict) -> np.ndarray:
        """Decode a video's next latent frames, the causal caches of the frames before held in
        host memory between calls: the frames of all calls together equal :meth:`decode` of all
        the latents at once (tiled as it would be, where :meth:`enable_tiling` applies to the
        size), and the device holds nothing of the video between calls (a long video decoded as
        each chunk of it is made).

        Args:
            z: unnormalised latents ``(B, n, H', W', C_z)``, the video's next ``n`` latent frames.
            caches: the stream's caches (host arrays, one entry per tile); empty for the first
                call, updated in place.

        Returns:
            float32 numpy ``(B, frames, s H', s W', C)`` in ``[-1, 1]``: ``1 + 4 (n - 1)`` frames
            on the first call, ``4 n`` after.
        """
        shape = _check_array("z", z, self.config.z_dim, "z_dim")
        graphdef, state = nnx.split(self)
        if self._tiles(shape):
            return self._tiled_decode(z, graphdef, state, caches)
        return self._decode_frames(z, graphdef, state, caches, 0, False)

    def _decode_frames(self, z, graphdef, state, caches: dict | None, key: int, raw: bool) -> np.ndarray:
        """``z (B, n, h, w, C_z)`` decoded frame by frame (each frame copied to host as it ends),
        with the cache ``caches[key]`` (host arrays) left by the frames before, stored back there
        after (``caches`` None, or no entry: the video's first frames, from the zero cache)."""
        first = caches is None or key not in caches
        if first:
            cache = self.decode_cache(z[:, :1], graphdef, state, raw=raw)
        else:
            where = jax.tree.leaves(state)[0].sharding
            cache = tuple(jax.device_put(c, where) for c in caches[key])
        frames = []
        for k in range(z.shape[1]):
            out, cache = _decode_chunk(
                graphdef, state, jnp.asarray(z[:, k : k + 1]), cache, np.bool_(first and k == 0), raw
            )
            # a copy: no host array aliases the device buffer (CPU backends share memory); the
            # video's first chunk keeps its frame 0 (sliced on host: no program for the slice)
            frames.append(np.array(np.asarray(out)[:, :1] if first and k == 0 else out))
            del out
        if caches is not None:
            caches[key] = tuple(np.array(c) for c in cache)
        return np.concatenate(frames, axis=1)

    def _tiled_decode(self, z, graphdef, state, caches: dict | None = None) -> np.ndarray:
        """``AutoencoderKLWan.tiled_decode``: each latent tile decoded frame by frame with its own
        cache (every chunk copied to host as it ends; with ``caches``, the tiles' caches carried
        from the frames before, see :meth:`decode_stream`), then blended on host in raster order
        (each frame on its own), cut to the video size, unfolded and clamped. Returns ``(B,
        frames, s H', s W', C)``."""
        cfg, t = self.config, self.tiling
        s, p = cfg.spatial_compression, cfg.patch
        tile = (t.tile_sample_min_height // s, t.tile_sample_min_width // s)
        step = (t.tile_sample_stride_height // s, t.tile_sample_stride_width // s)
        keep = (t.tile_sample_stride_height // p, t.tile_sample_stride_width // p)
        extent = (t.tile_sample_min_height // p - keep[0], t.tile_sample_min_width // p - keep[1])
        order = itertools.count()  # the tiles in raster order, the same on every call

        def run(zt) -> np.ndarray:
            return self._decode_frames(zt, graphdef, state, caches, next(order), True)

        dec = tiled(run, z, tile, step, extent, keep, t.same_shape_tiles)
        dec = dec[:, :, : z.shape[2] * s // p, : z.shape[3] * s // p]
        return np.clip(unpatchify(dec, p), -1.0, 1.0)

    # -- the VAE contract (vidax.pipelines.contracts.VAE; the compression factors are the config's)

    def normalize_latents(self, z) -> jax.Array:
        """Encoder latents -> the diffusion model's (per-channel mean/std, see :func:`normalize_latents`)."""
        return normalize_latents(jnp.asarray(z, jnp.float32), self.config)

    def denormalize_latents(self, z) -> jax.Array:
        """The diffusion model's latents -> what :meth:`iter_decode` takes, in the VAE dtype."""
        return denormalize_latents(jnp.asarray(z).astype(self.dtype), self.config)

    def decode_chunks(self, z) -> int:
        """How many chunks :meth:`iter_decode` yields for ``z`` (one per latent frame; 1 when tiled)."""
        return 1 if self._tiles(tuple(z.shape)) else int(z.shape[1])

    def decode(self, z) -> np.ndarray:
        """Decode latents to video, following ``AutoencoderKLWan.decode(z).sample``.

        Args:
            z: unnormalised latents ``(B, T', H', W', C_z)`` (numpy or jax; see
                :func:`denormalize_latents`), decoded one latent frame at a time.

        Returns:
            ``(B, 1 + 4 (T' - 1), s H', s W', C)`` float32 numpy in ``[-1, 1]``; each chunk
            is copied to host as soon as it is decoded (see :meth:`iter_decode`).

        Raises:
            InputError: ``z`` is not 5-D, has the wrong channel count or is not floating point.
        """
        return np.concatenate(list(self.iter_decode(z)), axis=1)


@functools.lru_cache(maxsize=16)
def decode_cache_bytes_per_latent_pixel(config: WanVAEConfig) -> int:
    """Bytes of the decode's cache (:meth:`WanVAE.decode_cache`: the frames each causal layer
    carries to the next chunk, float32) per latent pixel of one sample: the cache of a latent
    ``H' x W'`` is this times ``H' W'`` (every entry is a fixed multiple of the latent's area).
    From the shapes alone (``jax.eval_shape`` of a 1 x 1 latent; no array is made)."""
    vae = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(vae)
    z = jax.ShapeDtypeStruct((1, 1, 1, 1, config.z_dim), jnp.float32)
    _, cache = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s).decode_chunk(x, None, True), state, z)
    return int(sum(np.prod(c.shape) * np.dtype(c.dtype).itemsize for c in cache))


@functools.partial(jax.jit, static_argnums=(0, 4), donate_argnums=(3,))
def _encode_chunk(graphdef, state, x, cache, first):
    return nnx.merge(graphdef, state).encode_chunk(x, cache, first)


@functools.partial(jax.jit, static_argnums=(0, 5), donate_argnums=(3,))
def _decode_chunk(graphdef, state, z, cache, first, raw=False):
    return nnx.merge(graphdef, state).decode_chunk(z, cache, first, raw)


# --------------------------------------------------------------------------------------------
# Latent normalisation (the pipelines' convention)
# --------------------------------------------------------------------------------------------


def _stats(z, config: WanVAEConfig) -> tuple[jax.Array, jax.Array]:
    shape = tuple(getattr(z, "shape", ()))
    if not shape or shape[-1] != config.z_dim:
        raise InputError(
            f"z must be channels-last with z_dim={config.z_dim} channels on the last axis; got shape {shape}"
        )
    dtype = jnp.asarray(z).dtype
    mean = jnp.asarray(np.asarray(config.latents_mean, np.float32)).astype(dtype)
    inv_std = jnp.asarray(1.0 / np.asarray(config.latents_std, np.float32)).astype(dtype)
    return mean, inv_std


def normalize_latents(z, config: WanVAEConfig) -> jax.Array:
    """``(z - mean) / std`` per channel: VAE latents -> the transformer's latent space.

    Computed as the diffusers pipelines do, ``(z - latents_mean) * (1 / latents_std)`` in
    ``z``'s dtype. ``z``: ``(..., C_z)`` channels last. Raises InputError on a channel mismatch.
    """
    mean, inv_std = _stats(z, config)
    return (jnp.asarray(z) - mean) * inv_std


def denormalize_latents(z, config: WanVAEConfig) -> jax.Array:
    """``z * std + mean`` per channel: transformer latents -> VAE latents (for ``WanVAE.decode``).

    Computed as ``pipeline_wan.py`` does, ``z / (1 / latents_std) + latents_mean`` in ``z``'s
    dtype. ``z``: ``(..., C_z)`` channels last. Raises InputError on a channel mismatch.
    """
    mean, inv_std = _stats(z, config)
    return jnp.asarray(z) / inv_std + mean
