"""The weight formats of a :class:`vidax.nn.layers.Linear` kernel, one type each, behind one call.

A Linear asks :func:`weight_of` for its kernel as a typed weight and calls
``weight.matmul(x, bias, dtype, precision, out_sharding)`` (the :class:`Weight` protocol); the
models, encoders and pipelines never ask which format a kernel has (the loaders and the LoRA
merges, which write the formats' slots, do). Each type says what it stores in the Linear (the
slots named below), how the compute dtype is found (``operands``), its values (``values``) and
its matmul:

* :class:`Dense`: a float kernel ``(D_in, D_out)``. Where
  :func:`~vidax.nn.kernels.cpu.xla_cpu_upcasts` (bf16 / fp16 on CPU) ``x W`` is summed in
  float32, the bias added in float32 and the sum rounded once (torch's CPU bf16 linear, by the
  CPU matmul of :mod:`vidax.nn.kernels.cpu`); elsewhere, or with an ``out_sharding``, it is
  ``nnx.Linear``'s arithmetic (the bf16 ``x W`` rounded before the bias add).
* :class:`Quantized`: an int8 / float8_e4m3fn ``kernel`` with ``kernel_scale`` ``(D_out,)``
  float32 (:mod:`vidax.nn.quant`): ``y = (x q) s + b``, the kernel converted to the compute
  dtype inside the dot, float32 result, rounded once.
* :class:`GGUFBlocks`: the file's blocks, uint8, in ``kernel`` with their type in the static
  ``kernel_gguf`` (a tuple of types and ``kernel_gguf_index`` for a stack mixing them;
  :mod:`vidax.nn.gguf`), dequantized to ``param_dtype`` inside the forward pass, then
  ``x W + b`` as a dense kernel's, without the CPU matmul's call.
* :class:`InPlace`: inside :func:`vidax.nn.stack.scan_layers` where the CPU matmul reads stacks
  in place, layer ``i`` of the bf16 stack (:class:`~vidax.nn.kernels.stacks.StackedKernel` in
  ``kernel``), read in the stack; ``kernel_transposed`` (static) says the stack is kept in the
  kernel layout (:func:`vidax.nn.kernels.stacks.lay_out_kernel_stacks`).

Where each format is stored, loaded and sharded: int8 / fp8 kernels are quantized as the loader
reads them and ``kernel_scale`` is sharded as its kernel less ``D_in``
(:func:`vidax.nn.quant.scale_sharding`); GGUF blocks are kept by :func:`vidax.nn.gguf.keep_gguf`
and split along the output channels as a float kernel; stacks read in place are read from the
file straight into the kernel layout (:func:`vidax.nn.kernels.stacks.keeps_kernel_layout`).
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.cpu.onednn import StackedKernel
from vidax.nn.gguf import dequantize_kernel
from vidax.nn.kernels.cpu import describe, xla_cpu_upcasts
from vidax.nn.kernels.cpu import linear as cpu_linear
from vidax.nn.quant import quantized_dot

_F32 = jnp.float32


class KernelOwner:
    """What a module whose ``kernel`` takes the formats of this module derives from
    (:class:`vidax.nn.layers.Linear`); the stack views and the loader find such modules by this
    class. Its slots (:meth:`init_kernel_slots`) are ``kernel_scale`` (a parameter: 8-bit
    scales), ``kernel_gguf`` (static: GGUF type(s)), ``kernel_gguf_index`` (a parameter: a mixed
    GGUF stack's per-layer type) and ``kernel_transposed`` (static: a stack in the kernel
    layout)."""

    def init_kernel_slots(self) -> None:
        """Give the module a dense kernel's slots: None / False each (the loaders and
        :func:`vidax.nn.quant.quantize_structure`, :func:`vidax.nn.gguf.keep_gguf` and
        :func:`vidax.nn.kernels.stacks.lay_out_kernel_stacks` set them for the other formats)."""
        self.kernel_scale = nnx.data(None)
        self.kernel_transposed = False
        self.kernel_gguf = None
        self.kernel_gguf_index = nnx.data(None)


def _xla_linear(
    x: jax.Array, kernel: jax.Array, bias: jax.Array | None, dtype: Any, precision: Any, out_sharding: Any
) -> jax.Array:
    """``nnx.Linear``'s arithmetic: ``x``, ``kernel`` and ``bias`` cast to ``dtype``, the dot
    in ``dtype`` (placed as ``out_sharding``), then the bias added."""
    x, kernel = jnp.asarray(x, dtype), jnp.asarray(kernel, dtype)
    bias = None if bias is None else jnp.asarray(bias, dtype)
    y = jax.lax.dot_general(
        x, kernel, (((x.ndim - 1,), (0,)), ((), ())), precision=precision, out_sharding=out_sharding
    )
    if bias is not None:
        y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
    return y


class Weight(Protocol):
    """A Linear kernel in one weight format, as :func:`weight_of` reads it in the forward pass."""

    #: The format as ``--weights`` and the run summary name it.
    name: str

    def operands(self) -> tuple:
        """What the compute dtype is promoted with (arrays or dtypes), beside the input and bias."""

    def values(self) -> jax.Array:
        """The kernel ``(D_in, D_out)`` as values."""

    def matmul(
        self, x: jax.Array, bias: jax.Array | None, dtype: Any, precision: Any = None, out_sharding: Any = None
    ) -> jax.Array:
        """``x (..., D_in) W + bias`` -> ``(..., D_out)`` in the compute ``dtype``."""


class Dense:
    """A float kernel ``(D_in, D_out)``."""

    name = "dense"

    def __init__(self, kernel: jax.Array):
        self.kernel = kernel

    def operands(self) -> tuple:
        return (self.kernel,)

    def values(self) -> jax.Array:
        return self.kernel

    def matmul(
        self, x: jax.Array, bias: jax.Array | None, dtype: Any, precision: Any = None, out_sharding: Any = None
    ) -> jax.Array:
        if out_sharding is None and xla_cpu_upcasts(dtype):
            return cpu_linear(x, self.kernel, bias, dtype, precision)
        return _xla_linear(x, self.values(), bias, dtype, precision, out_sharding)


class InPlace(Dense):
    """Layer ``i`` of a bf16 kernel stack, read in the stack by the CPU matmul (``kernel`` a
    :class:`~vidax.nn.kernels.stacks.StackedKernel`); sliced out of it where that matmul does not
    run (another dtype, an ``out_sharding``)."""

    def operands(self) -> tuple:
        return (self.kernel.dtype,)

    def values(self) -> jax.Array:
        return self.kernel.layer()


class Quantized:
    """An 8-bit kernel ``(D_in, D_out)`` (int8 or float8_e4m3fn) and its per-output-channel
    scales ``(D_out,)`` float32 (:mod:`vidax.nn.quant`)."""

    def __init__(self, kernel: jax.Array, scale: jax.Array):
        self.kernel, self.scale = kernel, scale
        self.name = "int8" if jnp.dtype(kernel.dtype) == jnp.int8 else "fp8"

    def operands(self) -> tuple:
        return ()

    def values(self) -> jax.Array:
        """The kernel times its scales, in float32 (not the compute dtype)."""
        return self.kernel.astype(_F32) * self.scale.astype(_F32)[..., None, :]

    def matmul(
        self, x: jax.Array, bias: jax.Array | None, dtype: Any, precision: Any = None, out_sharding: Any = None
    ) -> jax.Array:
        y = quantized_dot(x, self.kernel, self.scale, dtype, precision)
        return (y if bias is None else y + bias.astype(_F32)).astype(dtype)


class GGUFBlocks(Dense):
    """A GGUF file's blocks ``(D_in // block * size, D_out)`` uint8 of type ``kind`` (a tuple of
    types with their per-layer ``index`` for a stack mixing them), dequantized to ``dtype`` (the
    Linear's ``param_dtype``) in the forward pass (:mod:`vidax.nn.gguf`)."""

    name = "GGUF"

    def __init__(self, blocks: jax.Array, kind: Any, dtype: Any, index: jax.Array | None = None):
        super().__init__(dequantize_kernel(blocks, kind, dtype, index))

    def matmul(
        self, x: jax.Array, bias: jax.Array | None, dtype: Any, precision: Any = None, out_sharding: Any = None
    ) -> jax.Array:
        """``x W`` in the compute dtype plus the bias; where :func:`xla_cpu_upcasts` in float32
        and rounded once (as torch's CPU bf16 linear), elsewhere as ``nnx.Linear``."""
        acc = _F32 if xla_cpu_upcasts(dtype) else dtype
        x = x.astype(dtype)
        y = jax.lax.dot_general(
            x,
            self.kernel.astype(dtype),
            (((x.ndim - 1,), (0,)), ((), ())),
            precision=precision,
            preferred_element_type=acc,
        )
        if bias is not None:
            y = y + bias.astype(acc)
        return y.astype(dtype)


def weight_of(linear: KernelOwner) -> Weight:
    """``linear``'s kernel as its format's type (read inside the forward pass)."""
    if linear.kernel_gguf is not None:
        index = None if linear.kernel_gguf_index is None else linear.kernel_gguf_index[...]
        return GGUFBlocks(linear.kernel[...], linear.kernel_gguf, linear.param_dtype, index)
    if isinstance(linear.kernel.get_value(), StackedKernel):
        return InPlace(linear.kernel.get_value())
    if linear.kernel_scale is not None:
        return Quantized(linear.kernel[...], linear.kernel_scale[...])
    return Dense(linear.kernel[...])


def format_name(linear: KernelOwner) -> str:
    """The format of ``linear``'s kernel as ``--weights`` names it: ``"dense"``, ``"int8"``,
    ``"fp8"`` or ``"GGUF"`` (read from its slots: no value is computed)."""
    if linear.kernel_gguf is not None:
        return "GGUF"
    if linear.kernel_scale is not None:
        return "int8" if jnp.dtype(linear.kernel.get_value().dtype) == jnp.int8 else "fp8"
    return "dense"


def kept_formats(module: nnx.Module) -> list[str]:
    """The formats of ``module``'s Linear kernels kept quantized, sorted, as ``--weights`` names
    them (``"int8"``, ``"fp8"``), and ``"GGUF"``; empty for plain weights."""
    return sorted(
        {format_name(node) for _, node in nnx.iter_graph(module) if isinstance(node, KernelOwner)} - {"dense"}
    )


def describe_matmul(module: nnx.Module, dtype: Any) -> str | None:
    """What ``module``'s ``dtype`` matmuls run through on this process's CPU backend, in words,
    for the run summary (:func:`vidax.nn.kernels.cpu.describe`; its Linear kernels kept
    quantized run XLA's dot, which the row says); None off the CPU backend or for dtypes that are
    not 16-bit floats."""
    return describe(dtype, kept_formats(module))
