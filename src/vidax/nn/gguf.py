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

A stacked kernel whose layers the file stores in several types (the ``Q4_K_M`` / ``Q5_K_M``
files: some layers' same Linear in ``Q4_K``, others in ``Q6_K``...) is kept too, as diffusers'
``GGUFParameter`` keeps each layer's own type: each layer's bytes padded with zero rows to the
widest type's (:func:`stored_shape` of the tuple), ``kernel_gguf`` the tuple of the types
(sorted), and ``kernel_gguf_index`` ``(L,)`` int32 (a parameter, sliced by the layer scan as
any other) each layer's type's position in it; the forward pass dequantizes a layer with
``jax.lax.switch`` over the types, each branch reading its own leading rows, so a layer's values
are those of its own type, bit for bit. A single-type stack is kept as above (no index, no
padding).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.nn.gguf_dequant import DEQUANTIZE

#: GGML type name -> (values per block, bytes per block): the types dequantized on the device
#: (every type diffusers' GGUF loader reads; the ``gguf`` package's ``GGML_QUANT_SIZES``).
BLOCKS = {
    "Q8_0": (32, 34),
    "Q5_1": (32, 24),
    "Q5_0": (32, 22),
    "Q4_1": (32, 20),
    "Q4_0": (32, 18),
    "Q6_K": (256, 210),
    "Q5_K": (256, 176),
    "Q4_K": (256, 144),
    "Q3_K": (256, 110),
    "Q2_K": (256, 84),
    "BF16": (1, 2),
    "IQ4_NL": (32, 18),
    "IQ4_XS": (256, 136),
}
assert set(BLOCKS) == set(DEQUANTIZE)
GGUF_ATTR = "kernel_gguf"
#: The per-layer type index of a stacked kernel mixing types (see the module doc).
INDEX_ATTR = "kernel_gguf_index"


def widest(kind: Any) -> str:
    """The type of ``kind`` (a :data:`BLOCKS` name or a tuple of them) taking the most bytes per
    value: the one a mixed stack's rows are padded to."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    return max(kinds, key=lambda k: (BLOCKS[k][1] / BLOCKS[k][0], k))


def stored_shape(shape: tuple[int, ...], kind: Any) -> tuple[int, ...]:
    """The uint8 shape ``(..., D_in // block * size, D_out)`` of a kernel ``(..., D_in, D_out)``
    kept in GGUF type ``kind`` (a tuple of types: the widest one's, :func:`widest`).

    Raises:
        ValueError: ``D_in`` is not a whole number of a type's blocks.
    """
    for k in (kind,) if isinstance(kind, str) else kind:
        if shape[-2] % BLOCKS[k][0]:
            raise ValueError(
                f"{k} blocks hold {BLOCKS[k][0]} values; a kernel of {shape[-2]} inputs is not whole blocks"
            )
    block, size = BLOCKS[widest(kind)]
    return (*shape[:-2], shape[-2] // block * size, shape[-1])


def value_shape(shape: tuple[int, ...], kind: Any) -> tuple[int, ...]:
    """The kernel shape ``(..., D_in, D_out)`` of a kept ``kind`` kernel stored as ``shape``
    (:func:`stored_shape`'s inverse)."""
    block, size = BLOCKS[widest(kind)]
    return (*shape[:-2], shape[-2] // size * block, shape[-1])


def dequantize_kernel(blocks: jax.Array, kind: Any, dtype: Any, index: jax.Array | None = None) -> jax.Array:
    """The values of a kept GGUF kernel.

    Args:
        blocks: ``(..., D_in // block * size, D_out)`` uint8 (see the module doc).
        kind: its :data:`BLOCKS` type, or the tuple of types of a stack mixing them.
        dtype: the dtype returned (the host path's: the layer's ``param_dtype``).
        index: with a tuple ``kind``, ``(...)`` int32: each kernel's type's position in it (its
            ``kernel_gguf_index``); ignored otherwise.

    Returns:
        ``(..., D_in, D_out)`` in ``dtype``: the host's dequantized weight (float16 / float32,
        :mod:`vidax.nn.gguf_dequant`), transposed, cast to ``dtype``, bit for bit.
    """
    if not isinstance(kind, str):
        return _dequantize_mixed(blocks, tuple(kind), dtype, index)
    block, size = BLOCKS[kind]
    *lead, nbytes, d_out = blocks.shape
    rows = jnp.swapaxes(blocks, -1, -2).reshape(-1, size)  # (... * D_out * n_blocks, size)
    w = DEQUANTIZE[kind](rows, block, jnp).reshape(*lead, d_out, nbytes // size * block)
    return jnp.swapaxes(w, -1, -2).astype(dtype)


def _dequantize_mixed(blocks: jax.Array, kinds: tuple[str, ...], dtype: Any, index: jax.Array) -> jax.Array:
    """:func:`dequantize_kernel` of kernels padded to the widest of ``kinds``, each of type
    ``kinds[index[...]]``: ``jax.lax.switch`` over the types, each branch dequantizing its own
    leading rows; kernels with leading axes are dequantized one by one (``jax.lax.map``)."""
    if index is None:
        raise ValueError(f"a GGUF kernel mixing types {kinds} needs its per-layer index")
    d_in = value_shape(blocks.shape, kinds)[-2]
    branches = [lambda b, k=k: dequantize_kernel(b[..., : stored_shape((d_in, 1), k)[0], :], k, dtype) for k in kinds]
    one = lambda b, i: jax.lax.switch(i, branches, b)  # noqa: E731
    if blocks.ndim == 2:
        return one(blocks, index)
    lead = blocks.shape[:-2]
    flat = blocks.reshape(-1, *blocks.shape[-2:])
    out = jax.lax.map(lambda a: one(*a), (flat, jnp.reshape(index, (-1,))))
    return out.reshape(*lead, *out.shape[-2:])


def mixed_types(layers: Iterable[str]) -> tuple[str, ...]:
    """The ``kernel_gguf`` of a stack whose layers are of types ``layers``: their sorted set."""
    return tuple(sorted(set(layers)))


def type_index(layers: Iterable[str]) -> np.ndarray:
    """The ``kernel_gguf_index`` of a stack whose layers are of types ``layers`` (in layer
    order): ``(L,)`` int32, each layer's type's position in :func:`mixed_types`."""
    layers = tuple(layers)
    return np.asarray([mixed_types(layers).index(k) for k in layers], np.int32)


def keep_gguf(module: nnx.Module, kinds: Mapping[tuple[Any, ...], Any]) -> nnx.Module:
    """Give the Linear kernels at ``kinds``' paths (NNX path tuples ending in ``"kernel"``; a
    path that is not a Linear's kernel is left as it is) their kept GGUF storage: a uint8
    ``kernel`` of :func:`stored_shape` (zeros: meant for an abstract module, built under
    ``nnx.eval_shape``, whose values the loader then fills) and ``kernel_gguf``. A path's kind
    is a :data:`BLOCKS` type, or for a stacked kernel the tuple of its layers' types (in layer
    order): when they differ, the kernel is kept padded to the widest, ``kernel_gguf`` is
    :func:`mixed_types` and ``kernel_gguf_index`` ``(L,)`` int32 each layer's position in it
    (see the module doc). Returns ``module``."""
    from vidax.nn.quant import _at, quantizable_kernels

    linears = set(quantizable_kernels(module))
    for path, kind in kinds.items():
        if path not in linears:
            continue
        layer = _at(module, path[:-1])
        if not isinstance(kind, str) and len(set(kind)) == 1:
            kind = kind[0]
        types = kind if isinstance(kind, str) else mixed_types(kind)
        shape = stored_shape(layer.kernel.get_value().shape, types)
        layer.kernel = layer.kernel.replace(jnp.zeros(shape, jnp.uint8))
        setattr(layer, GGUF_ATTR, types)
        if not isinstance(kind, str):
            if len(kind) != shape[0]:
                raise ValueError(f"{'/'.join(map(str, path))}: {len(kind)} layer types for a stack of {shape[0]}")
            setattr(layer, INDEX_ATTR, nnx.Param(jnp.asarray(type_index(kind))))
    return module


def keepable(module: nnx.Module, kind: str, keep_fp32: Iterable[str] = ()) -> dict[tuple[Any, ...], str]:
    """Path -> ``kind`` for every Linear kernel of ``module`` a GGUF file in ``kind`` would keep
    on the device: those :func:`~vidax.nn.quant.quantizable_kernels` finds whose ``D_in`` is
    whole blocks (a converter writes the others as F16 / F32). For sizing a model before
    any file exists (:func:`vidax.parallel.placement.per_device_bytes`)."""
    from vidax.nn.quant import _at, quantizable_kernels

    block = BLOCKS[kind][0]
    return {
        p: kind
        for p in quantizable_kernels(module, keep_fp32)
        if _at(module, p[:-1]).kernel.get_value().shape[-2] % block == 0
    }


def keep_all(module: nnx.Module, kind: str, keep_fp32: Iterable[str] = ()) -> nnx.Module:
    """``module`` as a GGUF file of ``kind`` would load it: :func:`keep_gguf` on every
    :func:`keepable` kernel. Returns ``module``."""
    return keep_gguf(module, keepable(module, kind, keep_fp32))


def padded_stack_bytes(reader: Any) -> dict[str, int]:
    """Bytes on the device of each 2-D block-quantized tensor of a GGUF ``reader`` (its
    ``keys`` / ``info``) in a layer stack whose layers' types differ (keys equal but for their
    first ``.<index>.``, shapes equal): its rows at the widest type's bytes per row
    (:func:`stored_shape`), as the loader pads them, plus its layer's int32 type index. For
    counting a file's device bytes before it is loaded; the other tensors are absent."""
    groups: dict[tuple, list] = {}
    for key in reader.keys():
        info = reader.info(key)
        if len(info.shape) == 2 and getattr(info, "stored", "") in BLOCKS:
            groups.setdefault((re.sub(r"\.\d+\.", ".#.", key, count=1), tuple(info.shape)), []).append(
                (key, info.stored)
            )
    out = {}
    for (_, (rows, cols)), members in groups.items():
        types = mixed_types(t for _, t in members)
        if len(types) > 1:
            out.update({key: rows * stored_shape((cols, 1), types)[0] + 4 for key, _ in members})
    return out


#: Why a block-quantized tensor is dequantized on the host (:func:`kept_candidates`).
NOT_LINEAR = "not a Linear weight"
KEPT_FP32 = "kept float32 by the precision policy"
NO_RAW = "the file is read dequantized"


def kept_candidates(
    reader: Any, plan: Mapping[tuple[Any, ...], list], keep_fp32: Iterable[str] = ()
) -> tuple[dict[tuple[Any, ...], Any], dict[str, str]]:
    """Which kernels of a load plan (path -> ``[(layer, key)]``, ``layer`` None for an unstacked
    one) a GGUF ``reader`` keeps on the device: path -> type for each ``kernel`` whose tensors
    are all 2-D (a Linear's weight) in :data:`BLOCKS` types and not kept float32 by the
    precision policy (``keep_fp32`` regexes); a stack whose layers differ in type maps to the
    tuple of its layers' types, in layer order (:func:`keep_gguf`). Also the keys of the
    block-quantized tensors left to the host's dequantization (the others), each with why: not a
    Linear weight (:data:`NOT_LINEAR`), kept float32 (:data:`KEPT_FP32`), a stack whose layers
    mix float types (F16, F32...) with block types (a kept stack holds block types only), or a
    reader without raw blocks (:data:`NO_RAW`)."""
    keep = tuple(keep_fp32)
    kinds, host = {}, {}
    for path, entries in plan.items():
        entries = sorted(entries, key=lambda e: -1 if e[0] is None else e[0])
        infos = [reader.info(key) for _, key in entries]
        stored = [getattr(i, "stored", "") for i in infos]
        if not set(stored) & set(BLOCKS):
            continue
        name = "/".join(str(p) for p in path)
        floats = sorted(set(stored) - set(BLOCKS))
        if path[-1] != "kernel" or not all(len(i.shape) == 2 for i in infos):
            why = NOT_LINEAR
        elif any(re.search(p, name) for p in keep):
            why = KEPT_FP32
        elif floats:
            # a kept stack is one uint8 array of blocks: every layer must be a block type
            why = f"in stacks whose layers mix {'/'.join(floats)} with block types"
        elif not hasattr(reader, "raw"):
            why = NO_RAW
        else:
            stacked = entries[0][0] is not None
            kinds[path] = tuple(stored) if stacked and len(set(stored)) > 1 else stored[0]
            continue
        host.update({key: why for _, key in entries if getattr(reader.info(key), "stored", "") in BLOCKS})
    return kinds, host
