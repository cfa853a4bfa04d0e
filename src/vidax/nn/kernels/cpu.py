"""The CPU backend's matmuls: XLA's dot or the custom call of :mod:`vidax.cpu.onednn`.

Every other part of vidax reaches the CPU kernels through these functions (and the weight
formats of :mod:`vidax.nn.kernels.formats`, the stack views of :mod:`vidax.nn.kernels.stacks`);
which kernel runs is decided here, from ``VIDAX_CPU_MATMUL``, the CPU and the device count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from vidax.cpu import onednn


def xla_cpu_upcasts(dtype: Any) -> bool:
    """Whether ``dtype`` is bfloat16 / float16 on the CPU backend, where XLA computes most
    operations on it by converting to float32 and back; vidax then shapes two things so that
    XLA:CPU keeps them in 16 bits:

    * matmuls (:class:`vidax.nn.layers.Linear`, :func:`vidax.nn.layers.matmul`) ask for a
      float32 *result*, rounded to ``dtype`` after: a bf16-result dot is computed by converting
      both operands (the weights included, every call) to float32 and running a float32 GEMM,
      slower than float32 itself, while a bf16 dot with a float32 result runs XLA:CPU's native
      bf16 GEMM (AMX / AVX512-BF16), 2.9x faster on this project's CI CPU. Both forms sum the
      products in float32 and round once, as torch's bf16 matmul does.
    * :func:`vidax.nn.stack.scan_layers` slices stacked weights as 16-bit integers: a bf16
      dynamic-slice inside the layer loop is otherwise upcast, and XLA hoists the upcast of the
      whole stack out of the loop, materialising a float32 copy of every stacked weight.

    On GPU and TPU these operations are native in 16 bits, so nothing changes there.
    """
    # 2-byte floats are bf16 and fp16; other leaves (ints, PRNG keys) are never upcast.
    return jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize == 2 and jax.default_backend() == "cpu"


def linear(x: jax.Array, w: Any, bias: jax.Array | None, dtype: Any, precision: Any = None) -> jax.Array:
    """``x (..., K) @ w (K, N) + bias (N,)`` in ``dtype`` (16-bit on the CPU backend): the
    products summed in float32, the bias added in float32, the sum rounded once (torch's CPU
    bf16 linear), by the CPU matmul this process uses (``precision``: XLA's dot's). ``w`` may be
    layer ``i`` of a stack read in place (:class:`vidax.nn.kernels.stacks.StackedKernel`)."""
    return onednn.linear(x, w, bias, dtype, precision)


def dot_f32(x: jax.Array, w: jax.Array, precision: Any = None) -> jax.Array:
    """``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, both operands in the same dtype, by the
    CPU matmul this process uses for their dtype (``precision``: XLA's dot's)."""
    return onednn.dot_f32(x, w, precision)


def fused_attention_products(groups: int, *arrays: jax.Array) -> bool:
    """Whether attention's two products run as the CPU kernels' batched matmul on the (B, L, N,
    K) tensors where they are (:func:`attention_scores`, :func:`attention_values`): bf16 on the
    CPU with that matmul in use, one query head per key head (``groups`` 1), ``arrays`` of one
    dtype. XLA:CPU's dots need the heads-major order, and the transpositions cost more than the
    products at the sizes measured (docs/benchmarks/cpu_speed.md)."""
    return groups == 1 and len({a.dtype for a in arrays}) == 1 and onednn.enabled(arrays[0].dtype)


def attention_scores(q: jax.Array, k: jax.Array) -> jax.Array:
    """``q (B, Lq, H, D) . k (B, Lk, H, D)`` over D -> float32 scores (B, H, Lq, Lk), reading q
    and k where they are (where :func:`fused_attention_products`)."""
    return onednn.attention_scores(q, k)


def attention_values(p: jax.Array, v: jax.Array, out_dtype: Any) -> jax.Array:
    """``p (B, H, Lq, Lk) @ v (B, Lk, H, D)`` -> (B, Lq, H, D) in ``out_dtype``, rounded once from
    the float32 sums (where :func:`fused_attention_products`)."""
    return onednn.attention_values(p, v, out_dtype)


def check_matmul_setting() -> str:
    """``$VIDAX_CPU_MATMUL`` (``auto`` when unset), checked before any weight is read.

    Raises:
        SetupError: a value that is not a CPU matmul (one line naming it and the valid ones).
    """
    return onednn.mode()


def describe(dtype: Any, kept: Sequence[str] = ()) -> str | None:
    """What a ``dtype`` matmul on this process's CPU backend runs through, in words, for the run
    summary (None off the CPU backend or for dtypes that are not 16-bit floats); ``kept``: the
    formats of the Linear weights kept quantized (:func:`vidax.nn.kernels.formats.kept_formats`),
    which run XLA's dot."""
    return onednn.describe(dtype, kept)
