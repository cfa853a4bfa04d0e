"""8-bit weights of the dense layers: per-output-channel scales, dequantized inside the matmul.

A :class:`~vidax.nn.layers.Linear` whose ``kernel`` ``(..., D_in, D_out)`` is stored in an 8-bit
format holds ``kernel_scale`` ``(..., D_out)`` float32 next to it (``...``: the layer axis of a
stacked module); ``W = kernel * kernel_scale`` column by column. The matmul runs on the 8-bit
kernel converted to the compute dtype (exact: every int8 and every float8_e4m3fn value is a
bfloat16 value) with a float32 result, scaled per output channel, then the bias added:
``y = (x @ q) * s + b``, the same as ``x @ (q * s) + b`` up to float32 rounding, without a
dequantized copy of the weights.

Formats (:data:`WEIGHT_FORMATS`): ``int8`` (symmetric, ``s = max|W_col| / 127``, round to
nearest) and ``float8_e4m3fn`` (``s = max|W_col| / 448``, round to nearest even by
``ml_dtypes``). Only the kernels of :class:`~vidax.nn.layers.Linear` layers are quantized, and
not those the family's precision policy keeps float32; convolutions, norms, biases, embeddings
and every other parameter keep the component's dtype.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx

from vidax.errors import Arg, InputError

#: Storage format name -> numpy dtype of the quantized kernel.
WEIGHT_FORMATS = {"int8": np.dtype(np.int8), "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn)}
#: Names accepted for each format (the CLI's ``--weights int8|fp8``).
FORMAT_ALIASES = {"int8": "int8", "fp8": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn", "float8": "float8_e4m3fn"}
_QMAX = {"int8": 127.0, "float8_e4m3fn": 448.0}
SCALE = "kernel_scale"


def parse_weight_format(value: Any, arg: str = "weight_dtype") -> str | None:
    """``None`` / ``"none"``: None (weights in the component's dtype); ``"int8"``, ``"fp8"`` /
    ``"float8_e4m3fn"``: that format's name.

    Raises:
        InputError: any other value, naming ``arg`` as the user typed it; a compute dtype
            (``bf16``, ``float32``, ...) points to ``dtype=`` (``--dtype``), which sets it.
    """
    if value is None:
        return None
    name = str(getattr(value, "name", value)).lower()
    if name == "none":
        return None
    if name in ("bfloat16", "float32", "bf16", "fp32", "float16", "fp16"):
        raise InputError(
            Arg(arg, value),
            " is a dtype, not a weight format (it would change nothing); the weights' dtype is ",
            Arg("dtype", keyword=True),
            "; valid formats: int8, fp8 (float8_e4m3fn), or none",
        )
    if name not in FORMAT_ALIASES:
        raise InputError(
            Arg(arg, value), " is not a weight format; valid: int8, fp8 (float8_e4m3fn), or none (the dtype's)"
        )
    return FORMAT_ALIASES[name]


def quantize(w: Any, fmt: str, xp: Any = np) -> tuple[Any, Any]:
    """Per-output-channel quantization of a kernel: on the host (``xp=numpy``, as the loader
    reads it) or on its device (``xp=jax.numpy``, inside a jitted function: a LoRA merge).

    Args:
        w: ``(..., D_in, D_out)`` any float dtype (the vidax kernel layout).
        fmt: a :data:`WEIGHT_FORMATS` name.

    Returns:
        ``(q, scale)``: ``q`` ``(..., D_in, D_out)`` in the format, ``scale`` ``(..., D_out)``
        float32 with ``w ≈ q * scale[..., None, :]``; a column of zeros gets scale 1.
    """
    w = xp.asarray(w, np.float32)
    amax = xp.abs(w).max(axis=-2)
    scale = xp.where(amax > 0, amax / np.float32(_QMAX[fmt]), np.float32(1)).astype(np.float32)
    x = w / scale[..., None, :]
    if fmt == "int8":
        return xp.clip(xp.rint(x), -127, 127).astype(np.int8), scale
    return x.astype(WEIGHT_FORMATS[fmt]), scale


def format_of(dtype: Any) -> str:
    """The :data:`WEIGHT_FORMATS` name of a quantized kernel's dtype."""
    return next(name for name, d in WEIGHT_FORMATS.items() if d == np.dtype(dtype))


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``q * scale[..., None, :]`` in float32 (the inverse of :func:`quantize`, up to rounding)."""
    return np.asarray(q, np.float32) * np.asarray(scale, np.float32)[..., None, :]


def quantized_dot(x: jax.Array, q: jax.Array, scale: jax.Array, dtype: Any, precision=None) -> jax.Array:
    """``(x @ q) * scale`` over the last axis of ``x``: ``q`` ``(D_in, D_out)`` 8-bit converted to
    ``dtype`` inside the dot, float32 result, times ``scale`` ``(D_out,)``; float32 out."""
    x = x.astype(dtype)
    y = jax.lax.dot_general(
        x, q.astype(dtype), (((x.ndim - 1,), (0,)), ((), ())), precision=precision, preferred_element_type=jnp.float32
    )
    return y * scale.astype(jnp.float32)


def quantizable_kernels(module: nnx.Module, keep_fp32: Iterable[str] = ()) -> list[tuple[Any, ...]]:
    """Paths (NNX path tuples, ending in ``"kernel"``) of the :class:`~vidax.nn.layers.Linear`
    kernels of ``module`` that 8-bit weights store quantized: every Linear's whose path does not
    match a ``keep_fp32`` regex (the family's precision policy)."""
    keep = tuple(keep_fp32)
    out = []
    for path, sub in nnx.iter_graph(module):
        # a Linear: the only module with a kernel_scale slot (None until quantized)
        if isinstance(sub, nnx.Module) and hasattr(sub, SCALE) and hasattr(sub, "kernel"):
            name = "/".join(str(p) for p in (*path, "kernel"))
            if not any(re.search(p, name) for p in keep):
                out.append(tuple(path) + ("kernel",))
    return out


def quantize_structure(module: nnx.Module, fmt: str, keep_fp32: Iterable[str] = ()) -> nnx.Module:
    """Give every quantizable Linear of ``module`` an 8-bit ``kernel`` and a ``kernel_scale``
    (zeros / ones of the right shapes: meant for an abstract module, built under
    ``nnx.eval_shape``, whose values the loader then fills). Returns ``module``."""
    for path in quantizable_kernels(module, keep_fp32):
        layer = _at(module, path[:-1])
        shape = layer.kernel.get_value().shape
        layer.kernel = layer.kernel.replace(jnp.zeros(shape, WEIGHT_FORMATS[fmt]))
        layer.kernel_scale = nnx.Param(jnp.ones(shape[:-2] + shape[-1:], jnp.float32))
    return module


def quantize_module(module: nnx.Module, fmt: str, keep_fp32: Iterable[str] = ()) -> nnx.Module:
    """Quantize the Linear kernels of a loaded ``module`` in place (:func:`quantize` on the
    host, placed back with each kernel's sharding; the scale gets the kernel's sharding without
    its ``D_in`` axis). For tests and for modules built in memory; checkpoints are quantized by
    the loader as each tensor is read. Returns ``module``."""
    for path in quantizable_kernels(module, keep_fp32):
        layer = _at(module, path[:-1])
        w = layer.kernel.get_value()
        q, s = quantize(np.asarray(jax.device_get(w), np.float32), fmt)
        sharding = getattr(w, "sharding", None)
        layer.kernel = layer.kernel.replace(jax.device_put(q, sharding))
        layer.kernel_scale = nnx.Param(jax.device_put(s, scale_sharding(sharding, w.ndim)))
    return module


def scale_sharding(kernel_sharding: Any, kernel_ndim: int) -> Any:
    """The sharding of a ``kernel_scale`` whose kernel (rank ``kernel_ndim``) has
    ``kernel_sharding``: the same, without the ``D_in`` axis (a named sharding's spec loses its
    second-to-last entry; any other sharding is kept)."""
    if isinstance(kernel_sharding, jax.sharding.NamedSharding):
        spec = tuple(kernel_sharding.spec) + (None,) * (kernel_ndim - len(kernel_sharding.spec))
        spec = spec[:-2] + spec[-1:]
        return jax.sharding.NamedSharding(
            kernel_sharding.mesh, jax.sharding.PartitionSpec(*spec), memory_kind=kernel_sharding.memory_kind
        )
    return kernel_sharding


def _at(module: nnx.Module, path: tuple[Any, ...]) -> Any:
    for p in path:
        module = module[p] if isinstance(p, int) else getattr(module, p)
    return module
