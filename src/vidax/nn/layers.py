"""Layers and functions shared by the model families' transformers and VAEs.

Each follows a diffusers / torch building block exactly (named in its docstring): the fp32
LayerNorm, RMSNorm and GroupNorm, channels-last 2D / 3D convolutions (VAE and latent-upsampler
blocks) with torch-order ``pixel_shuffle``, the GELU feed-forward network, ``(p_t, p_h, p_w)``
patchify of channels-last video and its inverses (both feature orders), the Conv3d patch
embedding, the sinusoidal timestep embedding with its MLP (``TimestepEmbedding``,
``PixArtAlphaCombinedTimestepSizeEmbeddings``) and the PixArt-alpha text projection. Statistics
and the timestep embedding
are computed in float32. The rotary embedding lives in :mod:`vidax.nn.rope`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.config import FFN_ACTIVATIONS
from vidax.nn.kernels import KernelOwner, dot_f32, weight_of, xla_cpu_upcasts

_F32 = jnp.float32


class Identity(nnx.Module):
    """Parameter-free placeholder for ``nn.Dropout`` entries of the reference's ``ModuleList``s."""

    def __call__(self, x):
        return x


class LayerNorm(nnx.Module):
    """``FP32LayerNorm``: statistics and affine in float32, result in ``out_dtype``.

    Over the last axis, biased variance, ``eps`` inside the square root; ``affine=False`` has no
    parameters (``elementwise_affine=False``), ``bias=False`` a scale without a bias.
    """

    def __init__(self, dim: int, eps: float, affine: bool, *, bias: bool = True, param_dtype=_F32):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), param_dtype)) if affine else None
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype)) if affine and bias else None

    def __call__(self, x: jax.Array, out_dtype) -> jax.Array:
        x = x.astype(_F32)
        mean = x.mean(axis=-1, keepdims=True)
        var = jnp.square(x - mean).mean(axis=-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps)
        if self.scale is not None:
            y = y * self.scale[...].astype(_F32)
        if self.bias is not None:
            y = y + self.bias[...].astype(_F32)
        return y.astype(out_dtype)


#: Weight conventions of :class:`RMSNorm`: ``"w"`` (``x̂ · w``: torch / diffusers ``RMSNorm``,
#: T5 ``T5LayerNorm``, Llama / Qwen2 ``RMSNorm``), ``"1+w"`` (``x̂ · (1 + w)``: Gemma, whose
#: weight is stored as an offset from 1), None (weightless: ``elementwise_affine=False``).
RMS_WEIGHTS = ("w", "1+w", None)


def rms_norm(
    x: jax.Array,
    eps: float,
    out_dtype,
    weight: jax.Array | None = None,
    *,
    one_plus: bool = False,
    weight_after_cast: bool = False,
) -> jax.Array:
    """``x̂ = x / sqrt(mean(x²) + eps)`` over the last axis, statistics and ``x̂`` in float32,
    optionally times ``weight`` (or ``1 + weight`` with ``one_plus``); result in ``out_dtype``.

    ``weight_after_cast``: ``x̂`` is rounded to ``out_dtype`` first and multiplied by the weight
    cast to ``out_dtype`` (transformers' T5 / Llama / Qwen2: ``weight * x̂.to(input_dtype)``);
    otherwise the weight multiplies in float32 and the product is rounded once (torch
    ``RMSNorm``, diffusers ``RMSNorm`` in float32, Gemma).
    """
    x32 = x.astype(_F32)
    y = x32 * jax.lax.rsqrt(jnp.square(x32).mean(axis=-1, keepdims=True) + eps)
    if weight is None:
        return y.astype(out_dtype)
    if weight_after_cast:
        w = weight.astype(out_dtype)
        return (1 + w if one_plus else w) * y.astype(out_dtype)
    w = weight.astype(_F32)
    return (y * (1.0 + w if one_plus else w)).astype(out_dtype)


class RMSNorm(nnx.Module):
    """RMS norm over the last axis with float32 statistics (:func:`rms_norm`).

    Args:
        dim: the normalised width (``D`` of the input ``(..., D)``).
        eps: added to ``mean(x²)`` inside the square root.
        weight: one of :data:`RMS_WEIGHTS`; the parameter (``scale``, ``(dim,)``) starts at 1
            for ``"w"`` and at 0 for ``"1+w"``; None has none.
        dtype: the output dtype; None: the input's.
        weight_after_cast: see :func:`rms_norm` (T5 / Llama / Qwen2 order).
        param_dtype: the parameter's initial dtype.
    """

    def __init__(
        self,
        dim: int,
        eps: float,
        *,
        weight: str | None = "w",
        dtype=None,
        weight_after_cast: bool = False,
        param_dtype=_F32,
    ):
        if weight not in RMS_WEIGHTS:
            raise ValueError(f"RMSNorm: weight={weight!r}; valid: {RMS_WEIGHTS}.")
        self.eps = eps
        self.dtype = dtype
        self.one_plus = weight == "1+w"
        self.weight_after_cast = weight_after_cast
        init = jnp.zeros if self.one_plus else jnp.ones
        self.scale = nnx.Param(init((dim,), param_dtype)) if weight is not None else None

    def __call__(self, x: jax.Array) -> jax.Array:
        """``(..., D)`` any float dtype -> ``(..., D)`` in ``dtype`` (or the input's)."""
        w = None if self.scale is None else self.scale[...]
        return rms_norm(
            x, self.eps, self.dtype or x.dtype, w, one_plus=self.one_plus, weight_after_cast=self.weight_after_cast
        )


class GroupNorm(nnx.Module):
    """torch ``nn.GroupNorm`` on ``(B, ..., C)``: statistics per sample and group over all other
    axes (time included), in float32; ``scale`` / ``bias`` ``(C,)``; returns the input dtype."""

    def __init__(self, num_channels: int, num_groups: int, eps: float):
        self.num_groups = num_groups
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((num_channels,), _F32))
        self.bias = nnx.Param(jnp.zeros((num_channels,), _F32))

    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        xf = x.astype(_F32).reshape(x.shape[0], -1, self.num_groups, c // self.num_groups)
        mean = jnp.mean(xf, axis=(1, 3), keepdims=True)
        var = jnp.mean(jnp.square(xf - mean), axis=(1, 3), keepdims=True)
        y = ((xf - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
        y = y * self.scale[...].astype(_F32) + self.bias[...].astype(_F32)
        return y.astype(x.dtype)


_DIMENSION_NUMBERS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}


class Conv(nnx.Module):
    """torch ``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d`` on channels-last input, with explicit
    zero padding.

    Args:
        in_channels, out_channels: ``C_in`` / ``C_out``.
        kernel_size: ``(k,)``, ``(kh, kw)`` or ``(kt, kh, kw)``; kernel ``(*kernel_size, C_in, C_out)``.
        stride: per spatial axis (default 1).
        padding: ``(low, high)`` zero padding per spatial axis (default none).
        dilation: kernel dilation per spatial axis (default 1).
        use_bias: whether there is a bias ``(C_out,)`` (torch ``bias=``).
        dtype: compute dtype; param_dtype: storage dtype of kernel and bias.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Sequence[int], *,
                 stride: Sequence[int] | None = None,
                 padding: Sequence[tuple[int, int]] | None = None,
                 dilation: Sequence[int] | None = None, use_bias: bool = True,
                 dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):  # fmt: skip
        n = len(kernel_size)
        self.stride = tuple(stride) if stride is not None else (1,) * n
        self.padding = tuple(padding) if padding is not None else ((0, 0),) * n
        self.dilation = tuple(dilation) if dilation is not None else (1,) * n
        self.dtype = dtype
        self.pointwise = (
            all(k == 1 for k in kernel_size) and set(self.stride) == {1} and all(p == (0, 0) for p in self.padding)
        )
        shape = (*kernel_size, in_channels, out_channels)
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), shape, param_dtype))
        self.bias = nnx.Param(jnp.zeros((out_channels,), param_dtype)) if use_bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x (N, [T,] H, W, C_in)`` -> ``(N, [T',] H', W', C_out)`` in the compute dtype."""
        x = x.astype(self.dtype)
        kernel = self.kernel[...].astype(self.dtype)
        if self.pointwise:
            # A 1x1(x1) conv is a matmul over channels; XLA compiles a dot much faster.
            y = jnp.einsum("...i,io->...o", x, kernel.reshape(kernel.shape[-2:]))
        else:
            if any(p != (0, 0) for p in self.padding):
                x = jnp.pad(x, ((0, 0), *self.padding, (0, 0)))
            y = jax.lax.conv_general_dilated(
                x, kernel, self.stride, "VALID", rhs_dilation=self.dilation,
                dimension_numbers=_DIMENSION_NUMBERS[len(self.stride)],
            )  # fmt: skip
        return y if self.bias is None else y + self.bias[...].astype(self.dtype)


def matmul(spec: str, x: jax.Array, w: jax.Array, dtype: Any) -> jax.Array:
    """``jnp.einsum(spec, x, w)`` with both operands cast to ``dtype``, result in ``dtype``
    (a float32 result rounded once where :func:`~vidax.nn.kernels.cpu.xla_cpu_upcasts`; a
    ``"...k,kn->...n"`` spec then goes through the CPU matmul, :func:`vidax.nn.kernels.cpu.dot_f32`)."""
    x, w = x.astype(dtype), w.astype(dtype)
    if xla_cpu_upcasts(dtype):
        lhs, rhs, out = spec.replace("->", ",").split(",")
        if len(rhs) == 2 and lhs[-1:] == rhs[0] and out == lhs[:-1] + rhs[1]:  # x (..., K) @ w (K, N)
            return dot_f32(x, w).astype(dtype)
        return jnp.einsum(spec, x, w, preferred_element_type=_F32).astype(dtype)
    return jnp.einsum(spec, x, w)


class Linear(nnx.Linear, KernelOwner):
    """``nnx.Linear``: ``y = x W + b`` over the last axis, ``kernel`` ``(D_in, D_out)``, ``bias``
    ``(D_out,)``, computed in ``dtype`` (or the inputs' and parameters' promoted dtype).

    The kernel may be stored in any weight format of :mod:`vidax.nn.kernels.formats` (dense,
    int8 / fp8 with ``kernel_scale``, GGUF blocks with ``kernel_gguf``, a layer of a stack read
    in place); the call is the format's matmul, whose arithmetic that module states (bf16 / fp16
    on CPU: ``x W`` summed in float32, the bias added in float32, the sum rounded once, as
    torch's CPU bf16 linear; elsewhere ``nnx.Linear``'s). The formats' slots are
    :class:`~vidax.nn.kernels.formats.KernelOwner`'s.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.init_kernel_slots()

    def dense_kernel(self) -> jax.Array:
        """The kernel ``(D_in, D_out)`` as values: an 8-bit one times its scales, in float32; a
        GGUF one dequantized, in ``param_dtype``."""
        return weight_of(self).values()

    def __call__(self, inputs: jax.Array, out_sharding=None) -> jax.Array:
        weight = weight_of(self)
        bias = None if self.bias is None else self.bias[...]
        dtype = self.dtype or jnp.result_type(inputs, *weight.operands(), *(() if bias is None else (bias,)))
        return weight.matmul(inputs, bias, dtype, self.precision, out_sharding)

    def gguf_index(self) -> jax.Array | None:
        """``kernel_gguf_index``'s value (a stacked GGUF kernel mixing types), else None."""
        return None if self.kernel_gguf_index is None else self.kernel_gguf_index[...]


def linear(din: int, dout: int, dtype, param_dtype, rngs: nnx.Rngs, use_bias: bool = True) -> Linear:
    """``nn.Linear(din, dout)``: ``kernel`` ``(din, dout)`` (+ ``bias``), compute in ``dtype``."""
    return Linear(din, dout, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)


def gelu(x: jax.Array, approximate: bool) -> jax.Array:
    """torch's ``F.gelu`` (``approximate="tanh"`` or exact erf) in ``x``'s dtype: a 16-bit ``x``
    is computed in float32 and rounded once, as torch computes it on bf16 / fp16 tensors (its
    float "opmath"), not op by op in 16 bits (a rounding per op, and slower on XLA:CPU, which
    emulates each 16-bit op with conversions)."""
    if jnp.issubdtype(x.dtype, jnp.floating) and jnp.dtype(x.dtype).itemsize < 4:
        return jax.nn.gelu(x.astype(_F32), approximate=approximate).astype(x.dtype)
    return jax.nn.gelu(x, approximate=approximate)


class GELUProj(nnx.Module):
    """diffusers ``GELU``: ``gelu(proj(x))``, tanh approximation or exact erf; ``use_bias=False``
    is its ``bias=False`` (no ``proj`` bias)."""

    def __init__(self, din, dout, approximate: bool, dtype, param_dtype, rngs, use_bias: bool = True):
        self.proj = linear(din, dout, dtype, param_dtype, rngs, use_bias)
        self.approximate = approximate

    def __call__(self, x):
        return gelu(self.proj(x), self.approximate)


_ACTIVATION_FNS = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "gelu": lambda x: gelu(x, False),
    "relu": jax.nn.relu,
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
}


def activation(name: str):
    """diffusers ``get_activation(name)`` (one of :data:`vidax.config.ACTIVATIONS`, any case) as a function."""
    return _ACTIVATION_FNS[name.lower()]


def _in_float32(fn, x):
    """``fn(x)`` computed in float32 and rounded once to a 16-bit ``x``'s dtype (torch's opmath)."""
    if jnp.issubdtype(x.dtype, jnp.floating) and jnp.dtype(x.dtype).itemsize < 4:
        return fn(x.astype(_F32)).astype(x.dtype)
    return fn(x)


class ActivationProj(nnx.Module):
    """``net[0]`` of diffusers ``FeedForward`` for the :data:`FFN_ACTIVATIONS` other than GELU:
    ``proj`` to ``dout`` (the gated ones to ``2 * dout``, split value | gate), then the activation."""

    def __init__(self, din, dout, activation: str, dtype, param_dtype, rngs, use_bias: bool = True):
        gated = activation in ("geglu", "swiglu")
        self.proj = linear(din, 2 * dout if gated else dout, dtype, param_dtype, rngs, use_bias)
        self.activation = activation

    def __call__(self, x):
        h = self.proj(x)
        if self.activation == "geglu":
            h, gate = jnp.split(h, 2, axis=-1)
            return h * gelu(gate, False)
        if self.activation == "swiglu":
            h, gate = jnp.split(h, 2, axis=-1)
            return h * _in_float32(jax.nn.silu, gate)
        if self.activation == "geglu-approximate":
            return h * jax.nn.sigmoid(1.702 * h)
        return _in_float32(jax.nn.silu, h)


class FeedForward(nnx.Module):
    """diffusers ``FeedForward``: ``net = [act(dim -> inner), Dropout, Linear(inner -> dim_out)]``;
    ``activation``: True / False for its ``GELU`` with / without the tanh approximation, or one of
    :data:`FFN_ACTIVATIONS`; ``use_bias=False`` is its ``bias=False`` (neither linear has a bias,
    as Cosmos's)."""

    def __init__(self, dim, inner, dim_out, activation: bool | str, dtype, param_dtype, rngs, use_bias: bool = True):
        if activation in ("gelu", "gelu-approximate"):
            activation = activation == "gelu-approximate"
        if isinstance(activation, bool):
            first = GELUProj(dim, inner, activation, dtype, param_dtype, rngs, use_bias)
        elif activation in FFN_ACTIVATIONS:
            first = ActivationProj(dim, inner, activation, dtype, param_dtype, rngs, use_bias)
        else:
            raise ValueError(f"FeedForward: activation={activation!r}; valid: True, False, {FFN_ACTIVATIONS}")
        self.net = nnx.List([first, Identity(), linear(inner, dim_out, dtype, param_dtype, rngs, use_bias)])

    def __call__(self, x):
        for layer in self.net:
            x = layer(x)
        return x


class TimestepEmbedding(nnx.Module):
    """diffusers ``TimestepEmbedding`` (``act_fn="silu"``): ``linear_2(silu(linear_1(x)))``, parameters
    and arithmetic in float32 whatever the model dtype (Wan, LTX-Video, HunyuanVideo)."""

    def __init__(self, cin, dim, rngs):
        self.linear_1 = linear(cin, dim, _F32, _F32, rngs)
        self.linear_2 = linear(dim, dim, _F32, _F32, rngs)

    def __call__(self, x):
        return self.linear_2(jax.nn.silu(self.linear_1(x.astype(_F32))))


class TextProjection(nnx.Module):
    """diffusers ``PixArtAlphaTextProjection(act_fn=act)``: ``linear_2(act(linear_1(x)))`` in
    ``dtype``; ``act`` ``"gelu_tanh"`` (Wan's text embedder, LTX-Video's caption projection) or
    ``"silu"`` (HunyuanVideo's pooled-text embedder)."""

    def __init__(self, cin, dim, dtype, param_dtype, rngs, act: str = "gelu_tanh"):
        if act not in ("gelu_tanh", "silu"):
            raise ValueError(f"TextProjection: act={act!r}; valid: 'gelu_tanh', 'silu'")
        self.act = act
        self.linear_1 = linear(cin, dim, dtype, param_dtype, rngs)
        self.linear_2 = linear(dim, dim, dtype, param_dtype, rngs)

    def __call__(self, x):
        h = self.linear_1(x)
        h = jax.nn.silu(h) if self.act == "silu" else gelu(h, True)
        return self.linear_2(h)


def patchify(x: jax.Array, patch: tuple[int, int, int]) -> jax.Array:
    """``(B, T, H, W, C)`` -> ``(B, t·h·w, p_t·p_h·p_w·C)``, features ordered ``(p_t, p_h, p_w, C)``."""
    b, t, h, w, c = x.shape
    pt, ph, pw = patch
    x = x.reshape(b, t // pt, pt, h // ph, ph, w // pw, pw, c)
    x = x.transpose(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(b, (t // pt) * (h // ph) * (w // pw), pt * ph * pw * c)


def unpatchify(x: jax.Array, grid: tuple[int, int, int], patch: tuple[int, int, int]) -> jax.Array:
    """Inverse of :func:`patchify`: ``(B, t·h·w, p_t·p_h·p_w·C)`` -> ``(B, t·p_t, h·p_h, w·p_w, C)``.

    Matches the reference's ``reshape(B, t, h, w, p_t, p_h, p_w, C).permute(0, 7, 1, 4, 2, 5,
    3, 6)`` in channels-last order.
    """
    b = x.shape[0]
    t, h, w = grid
    pt, ph, pw = patch
    x = x.reshape(b, t, h, w, pt, ph, pw, -1)
    x = x.transpose(0, 1, 4, 2, 5, 3, 6, 7)
    return x.reshape(b, t * pt, h * ph, w * pw, x.shape[-1])


def unpatchify_channels_first(x: jax.Array, grid: tuple[int, int, int], pt: int, p: int) -> jax.Array:
    """Tokens whose features are ordered ``(C, p_t, p_h, p_w)`` -> video: ``(B, t·h·w, C·p_t·p·p)``
    -> ``(B, t·p_t, h·p, w·p, C)``.

    The reference's ``reshape(B, t, h, w, C, p_t, p, p).permute(0, 4, 1, 5, 2, 6, 3, 7)`` (CogVideoX
    1.5, HunyuanVideo ``proj_out``) in channels-last order.
    """
    b = x.shape[0]
    t, h, w = grid
    x = x.reshape(b, t, h, w, -1, pt, p, p)
    x = x.transpose(0, 1, 5, 2, 6, 3, 7, 4)
    return x.reshape(b, t * pt, h * p, w * p, x.shape[-1])


def timestep_sinusoid(
    timestep: jax.Array, dim: int, flip_sin_to_cos: bool = True, downscale_freq_shift: float = 0.0
) -> jax.Array:
    """diffusers ``Timesteps(dim, flip_sin_to_cos, downscale_freq_shift)`` (defaults: the
    ``True, 0`` every released model uses).

    ``[cos(t·f), sin(t·f)]`` (``[sin, cos]`` when not ``flip_sin_to_cos``) with
    ``f_i = exp(-ln(10000)·i/(dim//2 - downscale_freq_shift))`` (an odd ``dim`` is padded with one
    zero). The frequencies are rounded to float32 exactly as torch computes them (float32
    exponent, exp in float64 then rounded); ``t·f`` and cos / sin are float32.

    Args:
        timestep: any shape ``S``, float (diffusion time in [0, 1000]).
        dim: feature width.
        flip_sin_to_cos: cosines first.
        downscale_freq_shift: subtracted from ``dim // 2`` in the frequencies' denominator.

    Returns:
        ``S + (dim,)`` float32.
    """
    half = dim // 2
    exponent = np.float32(-math.log(10000)) * np.arange(half, dtype=np.float32)
    exponent = exponent / np.float32(half - downscale_freq_shift)
    freqs = np.exp(exponent.astype(np.float64)).astype(np.float32)
    arg = timestep.astype(_F32)[..., None] * jnp.asarray(freqs)
    parts = [jnp.cos(arg), jnp.sin(arg)] if flip_sin_to_cos else [jnp.sin(arg), jnp.cos(arg)]
    emb = jnp.concatenate(parts, axis=-1)
    if dim % 2:
        emb = jnp.pad(emb, [(0, 0)] * (emb.ndim - 1) + [(0, 1)])
    return emb


class PatchEmbedding(nnx.Module):
    """``nn.Conv3d(C_in, D, kernel=stride=patch)`` as patchify + matmul.

    ``kernel`` is ``(p_t, p_h, p_w, C_in, D)`` (the loader's conv3d layout), ``bias`` ``(D,)``.
    Input ``(B, T, H, W, C_in)`` -> tokens ``(B, L, D)`` in frame-major, then row, then column
    order (the reference's ``flatten(2)``).
    """

    def __init__(self, patch, cin, dim, dtype, param_dtype, rngs: nnx.Rngs):
        self.patch = tuple(patch)
        self.dtype = dtype
        fan_in = cin * math.prod(patch)
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (*patch, cin, dim), param_dtype) / math.sqrt(fan_in))
        self.bias = nnx.Param(jnp.zeros((dim,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        cols = patchify(x, self.patch)
        kernel = self.kernel[...].reshape(-1, self.kernel.shape[-1]).astype(self.dtype)
        y = matmul("blc,cd->bld", cols, kernel, self.dtype)
        return y + self.bias[...].astype(self.dtype)


class PixArtTimestepEmbedding(nnx.Module):
    """diffusers ``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, size_emb_dim,
    use_additional_conditions=False)``: 256-wide sinusoid (:func:`timestep_sinusoid`) then
    ``timestep_embedder`` (:class:`TimestepEmbedding`), in float32.

    ``timestep (B,)`` float (e.g. diffusion time in ``[0, 1000]``) -> ``(B, dim)`` float32.
    """

    def __init__(self, dim: int, rngs: nnx.Rngs):
        self.timestep_embedder = TimestepEmbedding(256, dim, rngs)

    def __call__(self, timestep: jax.Array) -> jax.Array:
        return self.timestep_embedder(timestep_sinusoid(timestep, 256))


def pixel_shuffle(x: jax.Array, factors: Sequence[int]) -> jax.Array:
    """Depth to space on channels-last input, in torch's channel order.

    ``x (N, S_1, ..., S_n, C * prod(factors))`` -> ``(N, S_1 f_1, ..., S_k f_k, S_k+1, ..., C)``:
    the factors enlarge the *leading* ``k = len(factors)`` spatial axes, and the input channel
    ``c * prod(f) + i_1 * (f_2 ... f_k) + ... + i_k`` lands at output channel ``c``, offset
    ``(i_1, ..., i_k)``. This is ``torch.nn.functional.pixel_shuffle`` for ``k = n = 2`` and
    diffusers' ``PixelShuffleND`` (pipelines/ltx/modeling_latent_upsampler.py; 1: frames of
    ``(N, T, H, W, C)``, 2: ``(N, H, W, C)``, 3: ``(N, T, H, W, C)``), and the channel-major
    unflatten the LTX-Video VAE upsamplers use.

    Raises:
        ValueError: more factors than spatial axes, or channels not divisible by ``prod(factors)``.
    """
    factors = tuple(int(f) for f in factors)
    n, k = x.ndim - 2, len(factors)
    group = math.prod(factors)
    if not 1 <= k <= n or x.shape[-1] % group:
        raise ValueError(f"pixel_shuffle: factors {factors} do not fit a {x.shape} input (N, *S, C * prod)")
    c = x.shape[-1] // group
    spatial = [s * (factors[i] if i < k else 1) for i, s in enumerate(x.shape[1:-1])]
    x = x.reshape(*x.shape[:-1], c, *factors)
    order = [0]
    for i in range(n):
        order.append(1 + i)
        if i < k:
            order.append(n + 2 + i)
    return x.transpose(*order, n + 1).reshape(x.shape[0], *spatial, c)
