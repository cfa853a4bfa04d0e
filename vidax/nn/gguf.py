"""GGUF weights kept quantized on the device, dequantized inside each Linear's matmul (as
diffusers' ``GGUFLinear``, whose ``GGUFParameter`` keeps the blocks and dequantizes in
``forward``).

A :class:`~vidax.nn.layers.Linear` whose kernel comes from a GGUF file in one of the
:data:`BLOCKS` types stores it as the file's bytes: ``kernel`` ``(..., D_in // block * size,
D_out)`` uint8 (``...``: the layer axis of a stacked module), column ``o`` the bytes of the
file's row ``o`` (the torch weight's output channel ``o``: ``D_in // block`` blocks of ``size``
bytes, scales inside each block), so the kernel splits along the output channels over a mesh
like a float one; ``kernel_gguf`` (static) names the type. The forward pass dequantizes it
(:func:`dequantize_kernel`: the functions of :mod:`vidax.nn.gguf_dequant` in
``jax.numpy``, the same operations as the host's, so the same bits), casts it to the layer's
``param_dtype`` (the host path's stored dtype) and runs the Linear's matmul on it.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.nn.gguf_dequant import DEQUANTIZE

#: GGML type name -> (values per block, bytes per block): the types dequantized on the device
#: (every type diffusers' GGUF loader reads; the ``gguf`` package's ``GGML_QUANT_SIZES``).
BLOCKS = {"Q8_0": (32, 34), "Q5_1": (32, 24), "Q5_0": (32, 22), "Q4_1": (32, 20), "Q4_0": (32, 18),
          "Q6_K": (256, 210), "Q5_K": (256, 176), "Q4_K": (256, 144), "Q3_K": (256, 110), "Q2_K": (256, 84),
          "BF16": (1, 2), "IQ4_NL": (32, 18), "IQ4_XS": (256, 136)}
assert set(BLOCKS) == set(DEQUANTIZE)
GGUF_ATTR = "kernel_gguf"


def stored_shape(shape: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """The uint8 shape ``(..., D_in // block * size, D_out)`` of a kernel ``(..., D_in, D_out)``
    kept in GGUF type ``kind``.

    Raises:
        ValueError: ``D_in`` is not a whole number of ``kind``'s blocks.
    """
    block, size = BLOCKS[kind]
    if shape[-2] % block:
        raise ValueError(f"{kind} blocks hold {block} values; a kernel of {shape[-2]} inputs is not whole blocks")
    return (*shape[:-2], shape[-2] // block * size, shape[-1])


def value_shape(shape: tuple[int, ...], kind: str) -> tuple[int, ...]:
    """The kernel shape ``(..., D_in, D_out)`` of a kept ``kind`` kernel stored as ``shape``
    (:func:`stored_shape`'s inverse)."""
    block, size = BLOCKS[kind]
    return (*shape[:-2], shape[-2] // size * block, shape[-1])


def dequantize_kernel(blocks: jax.Array, kind: str, dtype: Any) -> jax.Array:
    """The values of a kept GGUF kernel.

    Args:
        blocks: ``(..., D_in // block * size, D_out)`` uint8 (see the module doc).
        kind: its :data:`BLOCKS` type.
        dtype: the dtype returned (the host path's: the layer's ``param_dtype``).

    Returns:
        ``(..., D_in, D_out)`` in ``dtype``: the host's dequantized weight (float16 / float32,
        :mod:`vidax.nn.gguf_dequant`), transposed, cast to ``dtype``, bit for bit.
    """
    block, size = BLOCKS[kind]
    *lead, nbytes, d_out = blocks.shape
    rows = jnp.swapaxes(blocks, -1, -2).reshape(-1, size)  # (... * D_out * n_blocks, size)
    w = DEQUANTIZE[kind](rows, block, jnp).reshape(*lead, d_out, nbytes // size * block)
    return jnp.swapaxes(w, -1, -2).astype(dtype)


def keep_gguf(module: nnx.Module, kinds: Mapping[tuple[Any, ...], str]) -> nnx.Module:
    """Give the Linear kernels at ``kinds``' paths (NNX path tuples ending in ``"kernel"``; a
    path that is not a Linear's kernel is left as it is) their kept GGUF storage: a uint8
    ``kernel`` of :func:`stored_shape` (zeros: meant for an abstract module, built under
    ``nnx.eval_shape``, whose values the loader then fills) and ``kernel_gguf``. Returns
    ``module``."""
    from vidax.nn.quant import _at, quantizable_kernels

    linears = set(quantizable_kernels(module))
    for path, kind in kinds.items():
        if path not in linears:
            continue
        layer = _at(module, path[:-1])
        shape = stored_shape(layer.kernel.get_value().shape, kind)
        layer.kernel = layer.kernel.replace(jnp.zeros(shape, jnp.uint8))
        setattr(layer, GGUF_ATTR, kind)
    return module


def keepable(module: nnx.Module, kind: str, keep_fp32: Iterable[str] = ()) -> dict[tuple[Any, ...], str]:
    """Path -> ``kind`` for every Linear kernel of ``module`` a GGUF file in ``kind`` would keep
    on the device: those :func:`~vidax.nn.quant.quantizable_kernels` finds whose ``D_in`` is
    whole blocks (a converter writes the others as F16 / F32). For sizing a model before
    any file exists (:func:`vidax.parallel.placement.per_device_bytes`)."""
    from vidax.nn.quant import _at, quantizable_kernels

    block = BLOCKS[kind][0]
    return {p: kind for p in quantizable_kernels(module, keep_fp32)
            if _at(module, p[:-1]).kernel.get_value().shape[-2] % block == 0}


def keep_all(module: nnx.Module, kind: str, keep_fp32: Iterable[str] = ()) -> nnx.Module:
    """``module`` as a GGUF file of ``kind`` would load it: :func:`keep_gguf` on every
    :func:`keepable` kernel. Returns ``module``."""
    return keep_gguf(module, keepable(module, kind, keep_fp32))


def kept_candidates(reader: Any, plan: Mapping[tuple[Any, ...], list], keep_fp32: Iterable[str] = ()
                    ) -> tuple[dict[tuple[Any, ...], str], list[str]]:
    """Which kernels of a load plan (path -> ``[(layer, key)]``) a GGUF ``reader`` keeps on the
    device: path -> type for each ``kernel`` whose tensors are all 2-D (a Linear's weight) in
    the same :data:`BLOCKS` type (one type for every layer of a stack) and not kept float32 by
    the precision policy (``keep_fp32`` regexes). Also the keys of the block-quantized tensors
    left to the host's dequantization (the others)."""
    keep = tuple(keep_fp32)
    kinds, host = {}, []
    for path, entries in plan.items():
        infos = [reader.info(key) for _, key in entries]
        stored = {getattr(i, "stored", "") for i in infos}
        if not stored & set(BLOCKS):
            continue
        name = "/".join(str(p) for p in path)
        if (path[-1] == "kernel" and len(stored) == 1 and all(len(i.shape) == 2 for i in infos)
                and not any(re.search(p, name) for p in keep) and hasattr(reader, "raw")):
            kinds[path] = stored.pop()
        else:
            host += [key for _, key in entries]
    return kinds, host
