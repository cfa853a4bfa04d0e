"""Random weights made on the device from a component's config (``random_weights=True``).

What ``load_pipeline(..., random_weights=True)`` and ``vidax generate --random-weights`` load
instead of a checkpoint's tensors: every parameter of the component's model (its registry
entry, built abstractly from its ``config.json``) is created where the loader would place it
(its sharding on the mesh, host memory for a staged component, ``pinned_host`` chunks for
streamed blocks) in the dtype the precision policy gives it, by one small jitted program per
(shape, dtype, placement) whose output sharding is that placement: no file is read and no host
copy of the model is made. The values come from a counter hash (``lowbias32`` of the element's
index and a per-parameter seed), uniform with a mean and spread by the parameter's role:

* a norm's ``scale``: mean 1, std 0.02;
* a kernel of rank >= 2: mean 0, std ``1/sqrt(fan_in)`` (``fan_in``: the product of its
  dimensions but the last, the layer axis of a stacked block left out);
* everything else (biases, embeddings, modulation tables): mean 0, std 0.02;
* integer parameters: zeros;
* with an 8-bit ``weight_dtype`` (``policy.weights``), each quantized Linear's ``kernel`` is made
  in that format (int8: integers uniform in [-127, 127]; float8: as any kernel) and its
  ``kernel_scale`` constant, so that the kernel times its scale has the float kernel's spread.

A streamed stack's chunks hold the same values as the rows of the resident stack (the hash runs
over the stack's element indices), so a model streamed and resident compute the same video.
So activations keep a sensible scale through the blocks (finite in bfloat16); the video is
noise. :class:`ConfigReader` lists the tensors such a component's checkpoint would hold (names,
shapes in the file's layout, float32), so the memory plan and the staging count the same bytes
as with files.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.nn.quant import SCALE
from vidax.weights.loader import (
    DtypePolicy,
    PendingLoad,
    Placement,
    _source_shape_of,
    _stack_axes,
    abstract_params,
    path_str,
    stored_maker,
)
from vidax.weights.safetensors_io import TensorIndex, TensorInfo

#: What :class:`ConfigReader` gives as each tensor's file, in messages.
SOURCE = "<random weights>"


def value_scale(path: tuple, shape: tuple[int, ...], stacked: bool) -> tuple[float, float]:
    """``(mean, std)`` of the random values of the parameter at ``path`` of ``shape``
    (``stacked``: its first axis is the layer axis of a block stack); see the module docstring."""
    dims = tuple(shape[1:]) if stacked else tuple(shape)
    leaf = str(path[-1])
    if leaf == "scale":
        return 1.0, 0.02
    if leaf == "kernel" and len(dims) >= 2:
        return 0.0, 1.0 / math.sqrt(max(1, math.prod(dims[:-1])))
    return 0.0, 0.02


def _hashed_uniform(shape: tuple[int, ...], seed: jax.Array, offset: jax.Array) -> jax.Array:
    """float32 values uniform in [-0.5, 0.5) of ``shape``: ``lowbias32`` of each element's
    row-major index plus ``offset`` (modulo 2**32) mixed with ``seed`` (both uint32, traced)."""
    index = jnp.full(shape, offset, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride % 2**32)
        stride *= shape[axis]
    x = index * jnp.uint32(0x9E3779B9) + seed
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    x = x ^ (x >> 16)
    return (x >> 8).astype(jnp.float32) * jnp.float32(2.0**-24) - jnp.float32(0.5)


@dataclasses.dataclass(frozen=True)
class Fill:
    """One array to make: its ``shape``, ``dtype`` and ``sharding`` (device or host memory),
    uniform values of ``mean`` and ``std`` from the counter hash of ``seed`` over the element
    indices from ``offset`` on (so rows ``[a, b)`` of a stack made with offset ``a`` x row size
    equal those rows of the whole stack); zeros for an integer dtype."""

    shape: tuple[int, ...]
    dtype: Any
    sharding: jax.sharding.Sharding
    seed: int
    mean: float
    std: float
    offset: int = 0


@functools.lru_cache(maxsize=256)
def _filler(shape: tuple[int, ...], dtype: np.dtype, sharding: jax.sharding.Sharding) -> Callable:
    """The jitted ``(seed, offset, mean, std) -> array`` of ``shape`` / ``dtype`` made in
    ``sharding`` (one program per distinct triple: a model's parameters share few shapes, so
    few compile, each small)."""

    def fill(seed, offset, mean, std):
        if dtype == np.int8:  # an 8-bit kernel: whole numbers of the int8 range
            u = mean + std * math.sqrt(12.0) * _hashed_uniform(shape, seed, offset)
            return jnp.clip(jnp.round(u), -127, 127).astype(dtype)
        if not jnp.issubdtype(dtype, jnp.floating):
            return jnp.zeros(shape, dtype)
        return (mean + std * math.sqrt(12.0) * _hashed_uniform(shape, seed, offset)).astype(dtype)

    return jax.jit(fill, out_shardings=sharding)


def random_arrays(fills: list[Fill]) -> list[jax.Array]:
    """The arrays of ``fills``, each made by its layout's program (dispatched asynchronously)."""
    return [
        _filler(tuple(int(d) for d in f.shape), np.dtype(f.dtype), f.sharding)(
            np.uint32(f.seed % 2**32), np.uint32(f.offset % 2**32), np.float32(f.mean), np.float32(f.std)
        )
        for f in fills
    ]


def random_array(
    shape: tuple[int, ...],
    dtype: Any,
    sharding: jax.sharding.Sharding,
    seed: int,
    mean: float,
    std: float,
    offset: int = 0,
) -> jax.Array:
    """One array of :class:`Fill` ``(shape, dtype, sharding, seed, mean, std, offset)``."""
    return random_arrays([Fill(tuple(shape), dtype, sharding, seed, mean, std, offset)])[0]


def _quantized_scale(path: tuple, abstract: dict, stacked: dict) -> tuple[float, float] | None:
    """``(mean, std)`` of an 8-bit Linear's ``kernel`` or ``kernel_scale`` (None for any other
    parameter): an int8 kernel spans its range (std 127 / sqrt(3)) and its scale is the float
    kernel's std over that; a float8 kernel is made as a float one, with scale 1."""
    leaf = str(path[-1])
    kernel = path[:-1] + ("kernel",)
    if leaf not in ("kernel", SCALE) or path[:-1] + (SCALE,) not in abstract:
        return None
    target = abstract[kernel].get_value()
    int8 = target.dtype == np.int8
    if leaf == "kernel":
        return (0.0, 127.0 / math.sqrt(3.0)) if int8 else None
    _, std = value_scale(kernel, target.shape, kernel in stacked)
    return (std * math.sqrt(3.0) / 127.0, 0.0) if int8 else (1.0, 0.0)


def _path_seed(path: tuple, seed: int) -> int:
    return zlib.crc32(path_str(path).encode()) ^ (seed * 0x9E3779B1) % 2**32


def random_module(
    make: Callable[[], nnx.Module],
    policy: DtypePolicy,
    placement: Placement | None,
    rules: Any,
    *,
    block_stacks: tuple[str, ...] = (),
    stream: Any = None,
    seed: int = 0,
    made_at_fetch: bool = False,
) -> PendingLoad:
    """The module ``make()`` (built abstractly now) with random parameters made when read.

    Args:
        make: the module's constructor (never run concretely).
        policy: the storage dtype of each floating parameter.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` (with its memory kind); None: this
            process's first device.
        rules: the family's :class:`~vidax.weights.loader.KeyRules` (which parameters are
            stacked layers).
        block_stacks: the model's stacked block attributes (their first axis is the layer axis).
        stream: an :class:`~vidax.parallel.offload.OffloadConfig` that streams blocks: every
            stack of ``block_stacks`` is made chunk by chunk straight into host memory (its
            ``memory_kind``) and attached as the loader's streamed chunks; None: resident.
        seed: mixed into every parameter's seed (its path's CRC32).
        made_at_fetch: with ``stream``, each chunk is made on the device at each fetch instead
            (:class:`~vidax.parallel.layer_streaming.MadeLayers`, memory kind ``"made"``: a
            streamed text encoder, whose layers hold no host memory).

    Returns:
        A :class:`~vidax.weights.loader.PendingLoad` (its ``abstract``: the parameters).
    """
    graphdef, abstract = abstract_params(stored_maker(make, policy))
    stacked = _stack_axes(abstract, rules)
    streamed = tuple(block_stacks) if stream is not None else ()

    def read() -> nnx.Module:
        from vidax.parallel.layer_streaming import MadeLayers, stack_of
        from vidax.parallel.offload import attach_chunks, host_memory_kind

        device = jax.local_devices()[0]
        kind = "made" if made_at_fetch else host_memory_kind(stream.memory_kind) if streamed else None
        resident: dict = {}  # path -> Fill
        parts: dict = {}  # path of a streamed stack's parameter -> its chunks' Fills
        shardings: dict = {}
        filled = []
        for path, var in abstract.items():
            target = var.get_value()
            floating = jnp.issubdtype(target.dtype, jnp.floating)
            # an 8-bit kernel and its float32 scale keep their dtypes (as the loader stores them)
            quantized = path[-1] in ("kernel", SCALE) and path[:-1] + (SCALE,) in abstract
            own = not floating or quantized
            sds = jax.ShapeDtypeStruct(target.shape, target.dtype if own else policy.dtype_for(path))
            sharding = placement(path, sds) if placement is not None else jax.sharding.SingleDeviceSharding(device)
            mean, std = _quantized_scale(path, abstract, stacked) or value_scale(path, sds.shape, path in stacked)
            base = _path_seed(path, seed)
            if stack_of(path, streamed) is not None:
                total, row = sds.shape[0], math.prod(sds.shape[1:])
                n = stream.layers_per_chunk(total)
                where = sharding if kind in (None, "made") else sharding.with_memory_kind(kind)
                parts[path] = [
                    Fill((min(n, total - a),) + tuple(sds.shape[1:]), sds.dtype, where, base, mean, std, a * row)
                    for a in range(0, total, n)
                ]
                shardings[path] = sharding
            else:
                resident[path] = Fill(tuple(sds.shape), sds.dtype, sharding, base, mean, std)
            filled.append((path, var, sds))
        values = dict(zip(resident, random_arrays(list(resident.values()))))
        # A streamed stack: chunk i of every parameter, one chunk at a time.
        chunks: dict = {p: [] for p in parts}
        for i in range(max((len(f) for f in parts.values()), default=0)):
            paths = [p for p, f in parts.items() if i < len(f)]
            if kind == "made":
                for p in paths:
                    fill = parts[p][i]
                    chunks[p].append(MadeLayers(lambda f=fill: random_arrays([f])[0], fill.shape, fill.dtype))
                continue
            for p, arr in zip(paths, random_arrays([parts[p][i] for p in paths])):
                chunks[p].append(arr if kind is not None else np.asarray(arr))
        state = [(p, var.replace(values.get(p, sds))) for p, var, sds in filled]
        module = nnx.merge(graphdef, nnx.from_flat_state(state))
        for attr in dict.fromkeys(stack_of(p, streamed) for p in chunks):  # a list of stacks: each item's
            mine, d = [p for p in chunks if stack_of(p, streamed) == attr], attr.count(".") + 1
            attach_chunks(module, attr, {p[d:]: chunks[p] for p in mine}, {p[d:]: shardings[p] for p in mine}, kind)
        return module

    return PendingLoad(read, abstract)


def config_reader(spec: Any, config: Any) -> ConfigReader:
    """The :class:`ConfigReader` of ``spec`` and ``config`` (one per pair in this process where
    the config is hashable: a plan sizes the same component more than once)."""
    try:
        return _config_reader(spec, config)
    except TypeError:  # a config holding a list or dict
        return ConfigReader(spec, config)


@functools.lru_cache(maxsize=16)
def _config_reader(spec: Any, config: Any) -> ConfigReader:
    return ConfigReader(spec, config)


def rules_from_config(spec: Any, config: Any) -> Any:
    """The family's key rules for a checkpoint without tensors (``spec.rules(config, ())``); a
    family whose rules read the tensor names (a text encoder's prefix) and refuses none gets
    the default rules (its ``block_stacks`` stacked): then only the key names of
    :class:`ConfigReader` and the ``fan_in`` of stacked layers not named there differ, not
    the bytes."""
    from vidax.errors import VidaxError
    from vidax.weights.loader import KeyRules

    try:
        return spec.rules(config, ())
    except VidaxError:
        return KeyRules(stacked=spec.block_stacks)


class ConfigReader(TensorIndex):
    """The tensors a component's checkpoint would hold, from its config alone: each parameter of
    the abstract model under the key the family's key rules give it (a stacked one once per
    layer), its shape in the file's layout, float32: the :class:`~vidax.weights.safetensors_io.TensorIndex`
    (``keys``, ``info``) the memory plan and the staging read in random-weights mode.

    Args:
        spec: the component's registry entry. config: its parsed config.
    """

    def __init__(self, spec: Any, config: Any):
        model_cls = spec.model_class()
        kwargs = {"mesh": None} if spec.block_stacks else {}
        _, abstract = abstract_params(lambda: model_cls(config, rngs=nnx.Rngs(0), **kwargs))
        rules = rules_from_config(spec, config)
        stacked = _stack_axes(abstract, rules)
        self._infos: dict[str, TensorInfo] = {}
        for path, var in abstract.items():
            target = var.get_value()
            dtype = np.dtype(np.float32) if jnp.issubdtype(target.dtype, jnp.floating) else np.dtype(target.dtype)
            if path in stacked:
                layer_shape = _source_shape_of(tuple(target.shape[1:]), path)
                for layer in range(target.shape[0]):
                    self._infos[rules.join(path, layer)] = TensorInfo(SOURCE, dtype, layer_shape, 0, 0)
            else:
                self._infos[rules.join(path, None)] = TensorInfo(
                    SOURCE, dtype, _source_shape_of(tuple(target.shape), path), 0, 0
                )
