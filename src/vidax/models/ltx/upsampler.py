"""LTX-Video latent upsampler and the latent maths of the latent-upsample pipeline.

:class:`LTXLatentUpsamplerModel` follows diffusers' ``LTXLatentUpsamplerModel``
(pipelines/ltx/modeling_latent_upsampler.py) on channels-last latents ``(B, T, H, W, C)``:
Conv -> GroupNorm(32) -> SiLU, ``num_blocks_per_stage`` residual blocks, the upsampler (a conv
to ``f * mid_channels`` channels then depth-to-space, :func:`vidax.nn.layers.pixel_shuffle`),
``num_blocks_per_stage`` more residual blocks, a final conv back to ``C`` channels. Parameter
paths mirror the reference's state-dict keys (``res_blocks.0.conv1.weight`` ->
``res_blocks/0/conv1/kernel``); the loader is :func:`vidax.weights.component.load_component`.

The functions :func:`adain_filter_latent`, :func:`tone_map_latents`, :func:`normalize_latents`,
:func:`denormalize_latents` and :func:`upsample_latents` are the latent maths of diffusers'
``LTXLatentUpsamplePipeline`` (pipelines/ltx/pipeline_ltx_latent_upsample.py), channels last.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import InputError
from vidax.models.ltx.config import LTXLatentUpsamplerConfig
from vidax.nn.inputs import check_video_array
from vidax.nn.layers import Conv, GroupNorm, pixel_shuffle

_F32 = jnp.float32
_GROUPS = 32
_EPS = 1e-5  # torch.nn.GroupNorm's default, as the reference builds them


def padded_conv(cin: int, cout: int, dims: int, **kw) -> Conv:
    """A 3x3(x3) conv with padding 1 (the reference's ``ConvNd(kernel_size=3, padding=1)``)."""
    return Conv(cin, cout, (3,) * dims, padding=((1, 1),) * dims, **kw)


class ResBlock(nnx.Module):
    """``silu(norm2(conv2(silu(norm1(conv1(x))))) + x)``; follows the reference's ``ResBlock``.

    Convs are 3x3 (``dims=2``, input ``(N, H, W, C)``) or 3x3x3 (``dims=3``, ``(N, T, H, W, C)``),
    zero padded by 1; GroupNorms have 32 groups, eps 1e-5, statistics in float32.
    """

    def __init__(self, channels: int, dims: int, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.conv1 = padded_conv(channels, channels, dims, **kw)
        self.norm1 = GroupNorm(channels, _GROUPS, _EPS)
        self.conv2 = padded_conv(channels, channels, dims, **kw)
        self.norm2 = GroupNorm(channels, _GROUPS, _EPS)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.silu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        return jax.nn.silu(h + x.astype(h.dtype))


class LTXLatentUpsamplerModel(nnx.Module):
    """Upsamples LTX-Video VAE latents 2x in space and/or time (diffusers ``LTXLatentUpsamplerModel``).

    Args:
        config: :class:`~vidax.models.ltx.config.LTXLatentUpsamplerConfig`.
        dtype: compute dtype (float32 or bfloat16); GroupNorm statistics are always float32.
        param_dtype: storage dtype of the conv kernels and biases (the GroupNorm scale/bias are
            created float32; the loader's policy keeps them so).
        rngs: initialisers (the loader replaces every parameter).
    """

    def __init__(self, config: LTXLatentUpsamplerConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        self.config = config
        self.dtype = dtype
        c, mid, dims = config.in_channels, config.mid_channels, config.dims
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.initial_conv = padded_conv(c, mid, dims, **kw)
        self.initial_norm = GroupNorm(mid, _GROUPS, _EPS)
        self.res_blocks = nnx.List([ResBlock(mid, dims, **kw) for _ in range(config.num_blocks_per_stage)])
        self.upsampler = self._make_upsampler(config, **kw)
        self.post_upsample_res_blocks = nnx.List(
            [ResBlock(mid, dims, **kw) for _ in range(config.num_blocks_per_stage)]
        )
        self.final_conv = padded_conv(mid, c, dims, **kw)

    def _make_upsampler(self, config: LTXLatentUpsamplerConfig, **kw) -> nnx.Module:
        """The reference's ``upsampler = Sequential(ConvNd, PixelShuffleND)`` (keys ``upsampler.0.*``):
        a conv to ``prod(factors) * mid_channels`` channels, shuffled by :meth:`_upsample`."""
        if config.spatial_upsample and config.temporal_upsample:
            self._factors, up_dims = (2, 2, 2), 3
        elif config.spatial_upsample:
            self._factors, up_dims = (2, 2), 2
        else:
            self._factors, up_dims = (2,), 3
        mid = config.mid_channels
        return nnx.List([padded_conv(mid, math.prod(self._factors) * mid, up_dims, **kw)])

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``(B, T, H, W, C)`` -> the output's ``(B, T', H', W', C)``: ``T' = 2T - 1`` with temporal
        upsampling, ``H' = 2H, W' = 2W`` with spatial upsampling."""
        b, t, h, w, c = shape
        st, ss = self.config.scale
        return (b, st * t - (st - 1), ss * h, ss * w, c)

    def _upsample(self, x: jax.Array) -> jax.Array:
        return pixel_shuffle(self.upsampler[0](x), self._factors)

    def __call__(self, latents: jax.Array) -> jax.Array:
        """Upsample un-normalised VAE latents.

        Args:
            latents: ``(B, T, H, W, C)`` channels-last, floating, ``C = in_channels`` (diffusers
                takes ``(B, C, T, H, W)``); the latent-upsample pipeline passes the VAE's latents
                *un-normalised* (see :func:`upsample_latents`).

        Returns:
            ``(B, T', H', W', C)`` in the compute dtype (:meth:`output_shape`).

        Raises:
            InputError: not 5-D, wrong channel count, an empty axis or not floating.
        """
        b, t, h, w, c = check_video_array("latents", latents, self.config.in_channels, "in_channels")
        x = latents.astype(self.dtype)
        per_frame = self.config.dims == 2
        if per_frame:  # every layer sees one frame: (B T, H, W, C)
            x = x.reshape(b * t, h, w, c)
        x = jax.nn.silu(self.initial_norm(self.initial_conv(x)))
        for block in self.res_blocks:
            x = block(x)
        if per_frame or self.config.temporal_upsample:
            x = self._upsample(x)
            if self.config.temporal_upsample:  # the doubled first frame is dropped: T' = 2T - 1
                x = x[:, 1:]
        else:  # dims=3, spatial only: a Conv2d per frame
            x = self._upsample(x.reshape(b * t, h, w, -1))
            x = x.reshape(b, t, *x.shape[1:])
        for block in self.post_upsample_res_blocks:
            x = block(x)
        x = self.final_conv(x)
        if per_frame:
            x = x.reshape(b, t, *x.shape[1:])
        return x


# ---------------------------------------------------------------------------------------------
# LTXLatentUpsamplePipeline's latent maths (channels last)


def _channel_stats(latents: jax.Array, mean: Any, std: Any) -> tuple[jax.Array, jax.Array]:
    c = latents.shape[-1]
    mean = jnp.asarray(mean, latents.dtype).reshape(-1)
    std = jnp.asarray(std, latents.dtype).reshape(-1)
    if mean.shape != (c,) or std.shape != (c,):
        raise InputError(
            f"latents_mean {mean.shape} / latents_std {std.shape} must have one entry per latent channel ({c})"
        )
    return mean, std


def normalize_latents(
    latents: jax.Array, latents_mean: Any, latents_std: Any, scaling_factor: float = 1.0
) -> jax.Array:
    """``(z - mean) * scaling_factor / std`` per channel: VAE latents -> the transformer's.

    As diffusers' ``LTXPipeline._normalize_latents`` (same operation order, ``latents``' dtype).
    ``latents``: ``(..., C)`` channels last; mean/std ``(C,)`` (the LTX VAE's ``latents_mean`` /
    ``latents_std`` buffers). Raises InputError on a channel mismatch.
    """
    mean, std = _channel_stats(latents, latents_mean, latents_std)
    return (latents - mean) * scaling_factor / std


def denormalize_latents(
    latents: jax.Array, latents_mean: Any, latents_std: Any, scaling_factor: float = 1.0
) -> jax.Array:
    """``z * std / scaling_factor + mean`` per channel: the inverse of :func:`normalize_latents`
    (diffusers' ``LTXPipeline._denormalize_latents``, same operation order)."""
    mean, std = _channel_stats(latents, latents_mean, latents_std)
    return latents * std / scaling_factor + mean


def torch_lerp(start: jax.Array, end: jax.Array, weight: float) -> jax.Array:
    """torch.lerp's formula (its two branches on the weight, for accuracy near both ends)."""
    diff = end - start
    return start + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)


def adain_filter_latent(latents: jax.Array, reference_latents: jax.Array, factor: float = 1.0) -> jax.Array:
    """Adaptive instance normalisation: give each (sample, channel) of ``latents`` the mean and
    standard deviation of ``reference_latents``, blended by ``factor``.

    ``lerp(latents, (latents - mean) / std * ref_std + ref_mean, factor)`` with the statistics
    per sample and channel over (T, H, W) (unbiased std, as torch.std_mean); follows
    ``LTXLatentUpsamplePipeline.adain_filter_latent``.

    Args:
        latents: ``(B, T, H, W, C)`` floating.
        reference_latents: ``(B, T_r, H_r, W_r, C)`` (its own sizes: the pipeline passes the
            latents before upsampling).
        factor: Python float blend (0: ``latents``; 1: fully matched; the reference allows -10..10).

    Returns:
        ``(B, T, H, W, C)`` in the dtype of ``latents``.

    Raises:
        InputError: ranks, batch or channel counts differ.
    """
    if (
        latents.ndim != reference_latents.ndim
        or latents.ndim < 3
        or (latents.shape[0], latents.shape[-1]) != (reference_latents.shape[0], reference_latents.shape[-1])
    ):
        raise InputError(
            f"adain_filter_latent: latents {latents.shape} and reference_latents {reference_latents.shape} "
            "must both be (B, ..., C) with the same B and C."
        )
    axes = tuple(range(1, latents.ndim - 1))
    r_mean = jnp.mean(reference_latents, axis=axes, keepdims=True)
    r_sd = jnp.std(reference_latents, axis=axes, keepdims=True, ddof=1)
    i_mean = jnp.mean(latents, axis=axes, keepdims=True)
    i_sd = jnp.std(latents, axis=axes, keepdims=True, ddof=1)
    result = ((latents - i_mean) / i_sd) * r_sd.astype(latents.dtype) + r_mean.astype(latents.dtype)
    return torch_lerp(latents, result, factor)


def tone_map_latents(latents: jax.Array, compression: float) -> jax.Array:
    """Sigmoid tone map that shrinks large latent values: ``x * (1 - 0.8 s sigmoid(4 s (|x| - 1)))``
    with ``s = 0.75 * compression``; follows ``LTXLatentUpsamplePipeline.tone_map_latents``.

    ``latents``: any shape, floating; ``compression`` in [0, 1] (0: identity). Same dtype out.
    """
    scale_factor = compression * 0.75
    sigmoid_term = jax.nn.sigmoid(4.0 * scale_factor * (jnp.abs(latents) - 1.0))
    return latents * (1.0 - 0.8 * scale_factor * sigmoid_term)


def upsample_latents(
    model: LTXLatentUpsamplerModel,
    latents: jax.Array,
    latents_mean: Any,
    latents_std: Any,
    scaling_factor: float = 1.0,
    *,
    adain_factor: float = 0.0,
    tone_map_compression_ratio: float = 0.0,
    normalize_output: bool = True,
    denormalize_input: bool = True,
) -> jax.Array:
    """The latent path of ``LTXLatentUpsamplePipeline.__call__(latents=...)``.

    Un-normalise with the VAE's statistics (float32, :func:`denormalize_latents`), cast to the
    model's dtype, upsample, AdaIN towards the un-normalised input if ``adain_factor > 0``, tone
    map if ``tone_map_compression_ratio > 0``, and (``normalize_output=True``, the reference's
    ``output_type="latent"``) normalise back. With ``normalize_output=False`` the result is what
    the reference hands to the VAE decoder (before its optional decode-timestep noise). LTX-2's
    ``LTX2LatentUpsamplePipeline`` takes and returns un-normalised latents: ``denormalize_input``
    False (its ``latents_normalized=False``) and ``normalize_output`` False.

    Args:
        model: the loaded upsampler (or any callable with its ``dtype``, e.g. a jitted call).
        latents: ``(B, T, H, W, C)`` *normalised* latents (what an LTX pipeline returns with
            ``output_type="latent"``; un-normalised with ``denormalize_input=False``); cast to
            float32 first, as the reference's ``prepare_latents(dtype=torch.float32)``.
        latents_mean, latents_std: ``(C,)`` the VAE's buffers; scaling_factor: the VAE config's.
        adain_factor, tone_map_compression_ratio: Python floats (they select branches, as in the
            reference); the ratio must lie in [0, 1].

    Returns:
        ``(B, T', H', W', C)`` (see :meth:`LTXLatentUpsamplerModel.output_shape`) in the model's
        compute dtype (normalised in that dtype, as the reference).

    Raises:
        InputError: ``tone_map_compression_ratio`` outside [0, 1], or bad shapes.
    """
    if not 0 <= tone_map_compression_ratio <= 1:
        raise InputError(f"tone_map_compression_ratio={tone_map_compression_ratio!r}; it must lie in [0, 1].")
    x = jnp.asarray(latents, _F32)
    if denormalize_input:
        x = denormalize_latents(x, latents_mean, latents_std, scaling_factor)
    x = x.astype(model.dtype)
    up = model(x)
    out = adain_filter_latent(up, x, adain_factor) if adain_factor > 0.0 else up
    if tone_map_compression_ratio > 0.0:
        out = tone_map_latents(out, tone_map_compression_ratio)
    if normalize_output:
        out = normalize_latents(out, latents_mean, latents_std, scaling_factor)
    return out
