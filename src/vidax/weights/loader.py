"""Strict 1:1 translation of a diffusers/transformers state dict into a Flax NNX module.

The mapping from a source key to a parameter path is a rule, not a table per tensor:

* the dotted key is split at ``.``; numeric segments become ``int`` (``nnx.List`` indices);
* a numeric segment right after a *stacked* prefix (e.g. ``blocks``) is the layer index of a
  parameter stacked along a leading layer axis (the module runs those layers with a scan);
* the leaf ``weight`` becomes whichever of ``kernel`` / ``scale`` / ``embedding`` / ``weight``
  the target module has; every other leaf keeps its name;
* a ``prefix`` shared by every used key (``model.language_model.`` of a multimodal checkpoint
  whose language model is the module) is removed first, ``renames`` then substitute dotted
  fragments (for modules named differently on purpose);
* keys under an ``unused`` prefix (the vision tower of such a checkpoint, its ``lm_head``) are
  tensors the module does not run by design: named in the rules, never read;
* a ``kernel`` is re-laid out by rank: linear ``(O, I) -> (I, O)``, conv1d ``(O, I, K) ->
  (K, I, O)``, conv2d ``(O, I, H, W) -> (H, W, I, O)``, conv3d ``(O, I, T, H, W) -> (T, H, W, I,
  O)``. Other tensors keep the reference's shape exactly (a ``(C, 1, 1, 1)`` gamma stays so;
  the module reshapes it where it uses it), so the mapping stays a bijection.

Before any byte is read, the whole plan is checked in both directions against the abstract
module: every source tensor used exactly once, every parameter filled, every shape equal after
the layout change. Any failure raises one :class:`~vidax.errors.CheckpointError` that lists the
first few missing, unexpected and mis-shaped keys with the file each came from.

Tensors are then read one at a time from the memory-mapped files, cast on the host by the
:class:`DtypePolicy`, and placed on their device (a stacked parameter is filled layer by layer
into a donated device buffer), so host memory never holds the checkpoint twice.

Checking and reading can be split: ``load_module(..., defer=True)`` checks the plan and returns
a :class:`PendingLoad` whose :meth:`~PendingLoad.read` reads the tensors later, so a pipeline
checks every component's plan before it reads the first tensor of any.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import CheckpointError
from vidax.weights.safetensors_io import CheckpointReader

logger = logging.getLogger(__name__)

Path = tuple[Any, ...]
Placement = Callable[[Path, jax.ShapeDtypeStruct], jax.sharding.Sharding]
#: ``(path, ShapeDtypeStruct, sharding, read_layer) -> value or None``: places one stacked
#: parameter itself (``read_layer(i)`` is layer ``i`` on the host, in the target layout and
#: dtype); None leaves it to the loader. See :func:`load_module`'s ``place_stacked``.
StackedPlacement = Callable[[Path, jax.ShapeDtypeStruct, jax.sharding.Sharding, Callable[[int], np.ndarray]], Any]

_WEIGHT_LEAVES = ("kernel", "scale", "embedding", "weight")
_KERNEL_PERM = {2: (1, 0), 3: (2, 1, 0), 4: (2, 3, 1, 0), 5: (2, 3, 4, 1, 0)}
_MAX_LISTED = 8


@dataclasses.dataclass(frozen=True)
class KeyRules:
    """How one family's source keys map to its NNX parameter paths (see module docstring).

    Attributes:
        stacked: dotted prefixes (e.g. ``"blocks"``, ``"encoder.block"``) whose next, numeric,
            segment is a layer index into a stacked parameter.
        renames: ``(source_fragment, target_fragment)`` pairs substituted in the dotted key,
            in order (reversed, in reverse order, when exporting).
        aliases: source keys that duplicate another source key (tied weights written twice);
            they are consumed without being read. Mapping alias -> canonical key.
        prefix: removed from the front of every used source key before the renames (added back
            by :meth:`join`); a key without it that is not ``unused`` is unexpected.
        unused: source-key prefixes (e.g. ``"model.visual."``) of tensors in the checkpoint that
            the module does not run by design; they are consumed without being read.
    """

    stacked: tuple[str, ...] = ()
    renames: tuple[tuple[str, str], ...] = ()
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    prefix: str = ""
    unused: tuple[str, ...] = ()

    def is_unused(self, key: str) -> bool:
        """Whether ``key`` is under one of the :attr:`unused` prefixes."""
        return any(key.startswith(p) for p in self.unused)

    def split(self, key: str) -> tuple[Path, int | None]:
        """Source key -> (target path whose leaf may still be ``weight``, layer index).

        A key without :attr:`prefix` maps to a path no module has (so it is reported unexpected).
        """
        if not key.startswith(self.prefix):
            return ("<outside the prefix>", key), None
        key = key[len(self.prefix) :]
        for src, dst in self.renames:
            key = key.replace(src, dst)
        for prefix in self.stacked:
            if key.startswith(prefix + "."):
                rest = key[len(prefix) + 1 :].split(".", 1)
                if len(rest) == 2 and rest[0].isdigit():
                    return _parts(prefix) + _parts(rest[1]), int(rest[0])
        return _parts(key), None

    def join(self, path: Path, layer: int | None) -> str:
        """Target path (+ layer index) -> source key; the inverse of :meth:`split`."""
        parts = [str(p) for p in path]
        if parts[-1] in _WEIGHT_LEAVES:
            parts[-1] = "weight"
        key = ".".join(parts)
        if layer is not None:
            for prefix in self.stacked:
                if key.startswith(prefix + "."):
                    key = f"{prefix}.{layer}.{key[len(prefix) + 1 :]}"
                    break
            else:
                raise ValueError(f"{path} is stacked but matches no stacked prefix {self.stacked}")
        for src, dst in reversed(self.renames):
            key = key.replace(dst, src)
        return self.prefix + key


@dataclasses.dataclass(frozen=True)
class DtypePolicy:
    """Per-tensor storage dtype, applied on the host before a tensor is placed.

    Attributes:
        param_dtype: dtype of floating parameters not matched by ``keep_fp32``.
        keep_fp32: regexes on the target path string (``"blocks/norm2/scale"``) of parameters
            that stay float32 whatever ``param_dtype`` is (the reference's fp32 modules).
        weights: None, or an 8-bit format of :data:`vidax.nn.quant.WEIGHT_FORMATS`: the
            kernels of the Linear layers not kept float32 are quantized per output channel as
            each is read (a ``kernel_scale`` beside each, :mod:`vidax.nn.quant`).
    """

    param_dtype: Any = jnp.float32
    keep_fp32: tuple[str, ...] = ()
    weights: str | None = None

    def dtype_for(self, path: Path) -> np.dtype:
        """Storage dtype of the floating parameter at ``path``."""
        s = path_str(path)
        if any(re.search(p, s) for p in self.keep_fp32):
            return np.dtype(np.float32)
        return np.dtype(self.param_dtype)


def path_str(path: Path) -> str:
    return "/".join(str(p) for p in path)


def _parts(dotted: str) -> Path:
    return tuple(int(p) if p.isdigit() else p for p in dotted.split("."))


def _to_target_layout(arr: np.ndarray, path: Path) -> np.ndarray:
    if path[-1] == "kernel" and arr.ndim in _KERNEL_PERM:
        arr = arr.transpose(_KERNEL_PERM[arr.ndim])
    return arr


def _target_shape_of(shape: tuple[int, ...], path: Path) -> tuple:
    if path[-1] == "kernel" and len(shape) in _KERNEL_PERM:
        shape = tuple(shape[i] for i in _KERNEL_PERM[len(shape)])
    return shape


def _source_shape_of(shape: tuple[int, ...], path: Path) -> tuple:
    """The checkpoint's shape of a parameter whose vidax shape is ``shape`` (inverse of
    :func:`_target_shape_of`)."""
    if path[-1] == "kernel" and len(shape) in _KERNEL_PERM:
        shape = tuple(shape[i] for i in np.argsort(_KERNEL_PERM[len(shape)]))
    return shape


def _from_target_layout(arr: np.ndarray, path: Path) -> np.ndarray:
    if path[-1] == "kernel" and arr.ndim in _KERNEL_PERM:
        arr = arr.transpose(np.argsort(_KERNEL_PERM[arr.ndim]))
    return arr


def abstract_params(make: Callable[[], nnx.Module]):
    """Build ``make()`` abstractly; return (graphdef, flat {path: Variable of ShapeDtypeStruct})."""
    module = nnx.eval_shape(make)
    graphdef, state = nnx.split(module)
    return graphdef, dict(nnx.to_flat_state(state))


def _stack_axes(abstract: dict[Path, Any], rules: KeyRules) -> dict[Path, int]:
    """Paths of stacked parameters -> number of layers (their leading axis)."""
    out = {}
    for path, var in abstract.items():
        key = ".".join(str(p) for p in path)
        if any(key.startswith(prefix + ".") for prefix in rules.stacked):
            out[path] = var.get_value().shape[0]
    return out


class PendingLoad:
    """A component whose checkpoint was checked against its model from the safetensors headers
    alone (file sizes, every tensor used exactly once, shapes, dtypes) and whose tensors are not
    read yet: :meth:`read` reads and places them (once).

    Args:
        read: ``() -> module``: reads the tensors.
        abstract: the parameters the read fills, path -> variable of a ``ShapeDtypeStruct``
            (their storage: a GGUF kernel kept as blocks is uint8, padded where its stack
            mixes types), for sizing the module before it is read; None where not known.
    """

    def __init__(self, read: Callable[[], Any], abstract: Mapping[Any, Any] | None = None):
        self._read = read
        self.abstract = abstract

    def read(self) -> Any:
        """The loaded module (reads every tensor of the plan).

        Raises:
            CheckpointError: a file changed or became unreadable since the plan was checked.
        """
        return self._read()

    def then(self, fn: Callable[[Any], Any]) -> PendingLoad:
        """A PendingLoad whose :meth:`read` returns ``fn(self.read())``."""
        return PendingLoad(lambda: fn(self.read()), self.abstract)


def load_module(
    make: Callable[[], nnx.Module],
    source: str | CheckpointReader,
    rules: KeyRules,
    policy: DtypePolicy = DtypePolicy(),
    placement: Placement | None = None,
    what: str = "model",
    place_stacked: StackedPlacement | None = None,
    defer: bool = False,
) -> nnx.Module | PendingLoad:
    """Build the module ``make()`` and fill every parameter from a safetensors checkpoint.

    Args:
        make: zero-argument constructor of the NNX module (run abstractly, never materialised).
        source: a component folder (``transformer/``), a ``.safetensors`` file, or a reader.
        rules: the family's key mapping.
        policy: storage dtype per parameter.
        placement: ``(path, ShapeDtypeStruct) -> Sharding``; default: this process's first device.
        what: name used in error messages (``"transformer"``, ``"vae"``...).
        place_stacked: optional hook for stacked parameters (e.g. blocks streamed from host
            memory, :mod:`vidax.parallel.offload`): called with the parameter's path, storage
            ``ShapeDtypeStruct``, ``placement`` sharding and a ``read_layer(i)`` function; its
            non-None result becomes the parameter's value.
        defer: check the plan now (from the headers and the abstract module; no tensor is
            read) and return a :class:`PendingLoad` that reads the tensors when asked.

    Returns:
        The module with concrete parameters on their devices (a :class:`PendingLoad` of it with
        ``defer``).

    Raises:
        CheckpointError: missing, unexpected or mis-shaped tensors (all checked before reading),
            listing the first few of each kind with their files.
    """
    reader = source if not isinstance(source, (str, os.PathLike)) else CheckpointReader(source)
    make = stored_maker(make, policy)
    graphdef, abstract = abstract_params(make)
    stacks = _stack_axes(abstract, rules)

    plan, unexpected, scales = _key_plan(reader, rules, abstract, stacks)
    missing, misshaped, duplicated = _check_plan(reader, rules, abstract, stacks, plan, scales, unexpected)
    if missing or unexpected or misshaped or duplicated:
        raise CheckpointError(_report(what, reader, missing, unexpected, misshaped, duplicated))
    graphdef, abstract, kept, indices = _keep_gguf(make, reader, plan, policy, graphdef, abstract, what)
    checked = _CheckedPlan(plan, stacks, scales, kept, indices)
    read = PendingLoad(
        lambda: _read_module(reader, graphdef, abstract, checked, policy, placement, place_stacked, rules.stacked),
        abstract,
    )
    return read if defer else read.read()


def stored_maker(make: Callable[[], nnx.Module], policy: DtypePolicy) -> Callable[[], nnx.Module]:
    """``make`` as the parameters are stored: with an 8-bit ``policy.weights``, every quantizable
    Linear given its 8-bit ``kernel`` and ``kernel_scale`` (:func:`vidax.nn.quant.quantize_structure`);
    else ``make`` itself."""
    if policy.weights is None:
        return make
    from vidax.nn.quant import quantize_structure

    return lambda: quantize_structure(make(), policy.weights, policy.keep_fp32)


def _key_plan(reader: Any, rules: KeyRules, abstract: dict, stacks: dict) -> tuple[dict, list[str], set]:
    """``(plan, unexpected, scales)``: target path -> its ``[(layer, source key)]`` (None for an
    unstacked parameter), the source keys no parameter takes, and the paths of 8-bit scales
    (planned from the kernel beside them)."""
    plan: dict[Path, list[tuple[int | None, str]]] = defaultdict(list)
    unexpected: list[str] = []
    for key in reader.keys():
        if rules.is_unused(key):
            continue
        if key in rules.aliases:
            if rules.aliases[key] not in reader:
                unexpected.append(f"{key} (alias of absent {rules.aliases[key]})")
            continue
        path, layer = rules.split(key)
        if path[-1] == "weight":
            for leaf in _WEIGHT_LEAVES:
                if path[:-1] + (leaf,) in abstract:
                    path = path[:-1] + (leaf,)
                    break
        if path not in abstract or (layer is None) != (path not in stacks):
            unexpected.append(key)
            continue
        plan[path].append((layer, key))
    scales = {p for p in abstract if p[-1] == _SCALE}
    for path in scales:  # read from the kernel beside it
        plan[path] = plan.get(path[:-1] + ("kernel",), [])
    return plan, unexpected, scales


def _check_plan(reader, rules, abstract, stacks, plan, scales, unexpected) -> tuple[list, list, list]:
    """``(missing, misshaped, duplicated)`` of ``plan`` against the abstract parameters (stack
    layers past the stack's depth go to ``unexpected``): every parameter (each layer of a stack)
    read once, of its shape and a dtype it can be cast from."""
    missing, misshaped, duplicated = [], [], []
    for path, var in abstract.items():
        if path in scales:
            continue
        target = var.get_value()
        entries = plan.get(path, [])
        if path in stacks:
            n = stacks[path]
            got = sorted(l for l, _ in entries)
            if got != list(range(n)):
                have = set(got)
                dup = {l for l in got if got.count(l) > 1}
                missing += [rules.join(path, l) for l in range(n) if l not in have]
                duplicated += [rules.join(path, l) for l in sorted(dup)]
                extra = [l for l in have if l >= n]
                unexpected.extend(rules.join(path, l) for l in extra)
            want = tuple(target.shape[1:])
        else:
            if not entries:
                missing.append(rules.join(path, None))
            want = tuple(target.shape)
        for layer, key in entries:
            info = reader.info(key)
            got_shape = _target_shape_of(info.shape, path)
            if got_shape != want:
                # Both shapes in the file's layout; a kernel's own (transposed) shape is named too.
                want_file = _source_shape_of(want, path)
                stored = f" (vidax stores it as {path_str(path)} {want})" if want_file != want else ""
                misshaped.append(f"{key} in {info.file}: shape {info.shape}, expected {want_file}{stored}")
            elif not _castable(info.dtype, target.dtype) and not (_is_float(info.dtype) and _quantized(path, scales)):
                misshaped.append(f"{key} in {info.file}: dtype {info.dtype}, expected {target.dtype}")
    return missing, misshaped, duplicated


def _keep_gguf(make, reader, plan, policy, graphdef, abstract, what):
    """GGUF Linear kernels kept quantized on the device (:mod:`vidax.nn.gguf`): the module
    rebuilt with their uint8 storage, and their paths; the block-quantized tensors dequantized
    on the host instead are logged in one line. Nothing kept with 8-bit ``weights`` (the file
    then dequantized and quantized again to that format, as asked). Also the per-layer type
    index of each kept stack mixing types: its ``kernel_gguf_index`` path -> ``(L,)`` int32."""
    from vidax.nn.gguf import INDEX_ATTR, NOT_LINEAR, keep_gguf, kept_candidates, type_index

    if policy.weights is not None:
        return graphdef, abstract, frozenset(), {}
    kinds, host = kept_candidates(reader, plan, policy.keep_fp32)
    if kinds:
        graphdef, abstract = abstract_params(lambda: keep_gguf(make(), kinds))
    kept = frozenset(p for p in kinds if abstract[p].get_value().dtype == np.uint8)
    host.update({key: NOT_LINEAR for p in kinds if p not in kept for _, key in plan[p]})
    indices = {p[:-1] + (INDEX_ATTR,): type_index(k) for p, k in kinds.items() if p in kept and not isinstance(k, str)}
    if host:
        logger.info(
            "%s: %d GGUF block-quantized tensor(s) dequantized on the host: %s", what, len(host), host_reasons(host)
        )
    return graphdef, abstract, kept, indices


def host_reasons(host: dict[str, str]) -> str:
    """``"2 kept float32 by the precision policy (a, b); 1 not a Linear weight (c)"``: the keys of
    ``host`` (key -> why, :func:`~vidax.nn.gguf.kept_candidates`) grouped by why, the first four
    of each named."""
    groups: dict[str, list[str]] = {}
    for key in sorted(host):
        groups.setdefault(host[key], []).append(key)
    return "; ".join(
        f"{len(keys)} {why} ({', '.join(keys[:4])}{', ...' if len(keys) > 4 else ''})" for why, keys in groups.items()
    )


@dataclasses.dataclass(frozen=True)
class _CheckedPlan:
    """What :func:`load_module` checked before reading: the tensors of each parameter (``plan``),
    the stacked parameters' layer axes (``stacks``), the quantization scales' paths (``scales``),
    the GGUF stacks kept packed (``kept``) and the values of parameters no tensor holds
    (``indices``: a kept GGUF stack's per-layer type index)."""

    plan: dict
    stacks: dict
    scales: Any = frozenset()
    kept: Any = frozenset()
    indices: dict | None = None


def _read_module(
    reader, graphdef, abstract, checked: _CheckedPlan, policy, placement, place_stacked, stack_names=()
) -> nnx.Module:
    """Read and place every tensor of a checked plan (see :func:`load_module`)."""
    plan, stacks, scales, kept, indices = checked.plan, checked.stacks, checked.scales, checked.kept, checked.indices
    from vidax.nn.quant import scale_sharding

    if placement is None:
        device = jax.local_devices()[0]  # this process's first device (multi-host safe)
        placement = lambda path, sds: jax.sharding.SingleDeviceSharding(device)  # noqa: E731

    from vidax.nn.kernels import keeps_kernel_layout, lay_out_kernel_stacks

    linears = _stacked_linear_kernels(graphdef, abstract, stacks, policy)
    filled: list[tuple[Path, Any]] = []
    pieces = _PieceBuffers()
    with ThreadPoolExecutor(_read_threads(), thread_name_prefix="vidax-read") as pool:
        for path, var in abstract.items():
            target = var.get_value()
            entries = plan[path] if not indices or path not in indices else list(enumerate(indices[path]))
            quantized = path in scales or _quantized(path, scales)
            dtype = target.dtype if quantized or not _is_float(target.dtype) else policy.dtype_for(path)
            sds = jax.ShapeDtypeStruct(target.shape, dtype)
            if path in scales:  # sharded as its kernel, less the kernel's D_in axis
                kernel = abstract[path[:-1] + ("kernel",)].get_value()
                sharding = scale_sharding(placement(path[:-1] + ("kernel",), kernel), kernel.ndim)
            else:
                sharding = placement(path, sds)
            read = functools.partial(
                _read_layer,
                reader,
                path,
                dtype=sds.dtype,
                quant=policy.weights if quantized else None,
                raw=target.shape[-2] if path in kept else None,
            )
            plain = not quantized and path not in kept  # read by bytes: _fill
            stacked = path in stacks
            if indices and path in indices:  # each "key" is the layer's index itself
                read, stacked, plain = functools.partial(np.asarray, dtype=sds.dtype), True, False
            value = None
            if stacked and place_stacked is not None:
                keys = dict(entries)
                value = place_stacked(path, sds, sharding, lambda i, read=read, keys=keys: read(keys[i]))
            if (
                value is None
                and stacked
                and path in linears
                and keeps_kernel_layout(linears[path], sds.dtype, sds.shape, sharding)
            ):
                # read as the file holds it, (N, K) a layer: the stack's bytes are then the kernel layout
                value = _place_stacked_transposed(reader, path, entries, sds, sharding, pool, pieces)
            if value is None and stacked:
                fill = functools.partial(_fill, reader, path) if plain else None
                value = _place_stacked(read, entries, sds, sharding, pool, pieces, fill)
            elif value is None:
                value = jax.device_put(read(entries[0][1], pool=pool) if plain else read(entries[0][1]), sharding)
            filled.append((path, var.replace(value)))
    module = nnx.merge(graphdef, nnx.from_flat_state(filled))
    if linears:
        lay_out_kernel_stacks(module, stack_names)  # each such Linear's kernel_transposed
    return module


def _stacked_linear_kernels(graphdef, abstract, stacks, policy) -> dict:
    """The stacked Linear kernels (path -> the abstract Linear), where the CPU matmul reads stacks of
    some stacked parameter's dtype in place in this process (else empty): those that
    :func:`vidax.nn.kernels.stacks.keeps_kernel_layout` keeps in its layout are read straight into it,
    which is the file's (torch's (N, K) weights, layer after layer), so neither a transposition
    on the host nor a relayout later is needed."""
    from vidax.nn.kernels import KernelOwner, reads_stacks_in_place

    if not any(_is_float(abstract[p].get_value().dtype) and reads_stacks_in_place(policy.dtype_for(p)) for p in stacks):
        return {}
    module = nnx.merge(graphdef, nnx.from_flat_state(list(abstract.items())))
    return {
        tuple(p) + ("kernel",): node
        for p, node in nnx.iter_graph(module)
        if isinstance(node, KernelOwner) and tuple(p) + ("kernel",) in stacks
    }


def _place_stacked_transposed(reader, path, entries, sds, sharding, pool, pieces):
    """A stacked Linear kernel (L, K, N) placed from its layers as the file holds them, (N, K):
    an (L, N, K) buffer filled piece by piece (:func:`_place_stacked`), then its (L, K, N) view
    in the kernel layout (:func:`vidax.nn.kernels.stacks.from_torch_layout`: the same buffer)."""
    from vidax.nn.kernels import from_torch_layout

    layers, k, n = sds.shape
    fill = functools.partial(_fill, reader, path, source_layout=True)
    return from_torch_layout(
        _place_stacked(None, entries, jax.ShapeDtypeStruct((layers, n, k), sds.dtype), sharding, pool, pieces, fill)
    )


_SCALE = "kernel_scale"


def _quantized(path: Path, scales) -> bool:
    """Whether ``path`` is a kernel stored 8-bit (a ``kernel_scale`` beside it)."""
    return path[-1] == "kernel" and path[:-1] + (_SCALE,) in scales


def _is_float(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.floating)


def _castable(src: np.dtype, dst) -> bool:
    if _is_float(src) and _is_float(dst):
        return True
    return np.dtype(src) == np.dtype(dst)


#: Bytes of the host buffer a stacked parameter is sent to the device in (whole layers; at
#: least one), and at most this many bytes of such buffers read ahead or in transfer at once.
PIECE_BYTES = 64 << 20
IN_FLIGHT_BYTES = 512 << 20


def _read_threads() -> int:
    """Threads reading the files (each ``preadv`` / conversion runs without the GIL)."""
    return max(2, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2))


def _host_buffer(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous host array whose data starts on a 64-byte boundary: XLA:CPU
    takes such a buffer over on ``device_put`` instead of copying it."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _adopts_host_buffers(sharding: jax.sharding.Sharding) -> bool:
    """Whether ``sharding`` is one CPU device's own memory, where ``device_put`` of an aligned
    host array keeps that array's buffer (no copy): a stack is then best assembled in host
    memory and put once."""
    devices = sharding.device_set
    if len(devices) != 1:
        return False
    device = next(iter(devices))
    return device.platform == "cpu" and sharding.memory_kind in (None, device.default_memory().kind)


def _place_stacked(read, entries, sds, sharding, pool, pieces, fill=None):
    """A stacked parameter placed from its layers; ``read(key)`` is one layer on the host, or
    ``fill(key, out)`` writes it into a host array ``out`` (the file's bytes read straight into
    it: :func:`_fill`).

    With ``fill``, where the device takes host buffers over (one CPU device) or the stack goes
    to host memory (a staged component), the layers are read in parallel into one host array
    put once; elsewhere the stack is sent in pieces of whole layers (:data:`PIECE_BYTES`),
    read by ``pool`` ahead of their transfer (at most :data:`IN_FLIGHT_BYTES` of them at a
    time) and written into a donated device buffer: host memory is bounded whatever the size
    of the stack."""
    on_host = sharding.memory_kind != jax.local_devices()[0].default_memory().kind
    if fill is None:
        fill = lambda key, out: np.copyto(out, read(key))  # noqa: E731
        if on_host:  # Host memory (a staged component): assemble the stack on the host, place it once.
            host = np.empty(sds.shape, sds.dtype)
            for layer, key in entries:
                host[layer] = read(key)
            return jax.device_put(host, sharding)
    elif on_host or _adopts_host_buffers(sharding):
        host = _host_buffer(sds.shape, sds.dtype)
        list(pool.map(lambda e: fill(e[1], _layer(host, e[0])), entries))
        return jax.device_put(host, sharding)
    buf = jnp.zeros(sds.shape, sds.dtype, device=sharding)  # jit-cached per (shape, dtype, sharding)
    layer_bytes = int(np.prod(sds.shape[1:], dtype=np.int64)) * np.dtype(sds.dtype).itemsize
    per_piece = max(1, PIECE_BYTES // max(layer_bytes, 1))
    keys = [key for _, key in sorted(entries)]
    starts = list(range(0, len(keys), per_piece))
    piece_sharding = _piece_sharding(sharding)
    ahead = min(len(starts), max(1, IN_FLIGHT_BYTES // (per_piece * layer_bytes)))

    def read_piece(start: int, raw: np.ndarray) -> np.ndarray:
        n = min(per_piece, len(keys) - start)
        host = raw[: n * layer_bytes].view(sds.dtype).reshape(n, *sds.shape[1:])
        for i, key in enumerate(keys[start : start + n]):
            fill(key, _layer(host, i))
        return host

    def submit(i: int):
        raw = pieces.take(per_piece * layer_bytes)
        return raw, pool.submit(read_piece, starts[i], raw)

    pending = {i: submit(i) for i in range(ahead)}
    for i, start in enumerate(starts):
        raw, host = pending.pop(i)
        sent = jax.device_put(host.result(), piece_sharding)
        buf = _set_layers(buf, sent, start)
        buf.block_until_ready()  # the piece is in the stack: its host buffer is free again
        sent.delete()
        pieces.give(raw)
        if i + ahead < len(starts):
            pending[i + ahead] = submit(i + ahead)
    return buf


def _layer(stack: np.ndarray, i: int) -> np.ndarray:
    """Layer ``i`` of a host ``stack`` as an array view (0-d for a stack of scalars)."""
    return stack[i : i + 1].reshape(stack.shape[1:])


class _PieceBuffers:
    """The aligned host buffers that pieces of stacks go to the device in, reused from stack to
    stack (their pages are touched once per load, not once per piece)."""

    def __init__(self):
        self._free: list[np.ndarray] = []

    def take(self, nbytes: int) -> np.ndarray:
        """A free aligned uint8 buffer of at least ``nbytes`` (a new one when none is free)."""
        fits = [i for i, raw in enumerate(self._free) if raw.nbytes >= nbytes]
        if not fits:
            return _host_buffer((max(nbytes, PIECE_BYTES),), np.uint8)
        return self._free.pop(min(fits, key=lambda i: self._free[i].nbytes))

    def give(self, raw: np.ndarray) -> None:
        """Return a buffer :meth:`take` gave, for reuse."""
        self._free.append(raw)


def _fill(reader, path, key, out: np.ndarray, source_layout: bool = False) -> None:
    """Tensor ``key`` (a layer of a stacked parameter, or a whole one) into the host array
    ``out``, in ``out``'s dtype and the target layout (``source_layout``: as the file holds it,
    a kernel not transposed): the file's bytes read straight into ``out`` where neither layout
    nor dtype changes, else converted from the mapped file, whose pages are then released."""
    info = reader.info(key)
    if source_layout or not (path[-1] == "kernel" and len(info.shape) in _KERNEL_PERM):
        reader.read_into(key, out)
        return
    np.copyto(out, _to_target_layout(reader.get(key), path), casting="unsafe")
    reader.release(key)


def _read_layer(
    reader,
    path,
    key,
    dtype,
    quant: str | None = None,
    raw: int | None = None,
    source_layout: bool = False,
    pool: Any = None,
) -> np.ndarray:
    """One tensor (a layer of a stacked parameter, or a whole one) as a host array in the target
    layout and ``dtype`` (a copy, so the file's pages can be released at once). With ``quant``
    (an 8-bit format), ``path`` is a quantized kernel or its ``kernel_scale``: the kernel read
    from ``key`` is quantized on the host (:func:`vidax.nn.quant.quantize`) and the part asked
    for returned. With ``raw`` (a byte count), a GGUF kernel kept quantized: its bytes ``(rows,
    n_bytes)``, transposed as a kernel is, padded with zero rows to ``raw`` rows (a layer of a
    stack mixing types, :mod:`vidax.nn.gguf`). ``source_layout``: the tensor as the file holds it
    (a kernel not transposed). Without either, the bytes go from the file straight into a
    64-byte aligned host array (:func:`_fill`; a large tensor in parallel pieces on ``pool``)."""
    if not quant and not raw:
        info = reader.info(key)
        shape = info.shape if source_layout else _target_shape_of(info.shape, path)
        out = _host_buffer(shape, dtype)
        if pool is not None and out.nbytes > 2 * PIECE_BYTES and shape == info.shape and out.dtype == info.dtype:
            _fill_rows(reader, key, out, pool)
        else:
            _fill(reader, path, key, out, source_layout)
        return out
    arr = reader.raw(key) if raw else reader.get(key)
    if not source_layout:
        arr = _to_target_layout(arr, path[:-1] + ("kernel",) if quant else path)
    if raw and arr.shape[-2] < raw:
        arr = np.pad(arr, [(0, 0)] * (arr.ndim - 2) + [(0, raw - arr.shape[-2]), (0, 0)])
    if quant:
        from vidax.nn.quant import quantize

        q, scale = quantize(arr, quant)
        arr = scale if path[-1] == _SCALE else q
    arr = np.array(arr, dtype=dtype)
    reader.release(key)
    return arr


def _fill_rows(reader, key, out: np.ndarray, pool) -> None:
    """A large tensor of unchanged layout into ``out``, its rows in pieces of about
    :data:`PIECE_BYTES` read in parallel on ``pool``."""
    rows = max(1, PIECE_BYTES // max(out[0].nbytes, 1))
    list(pool.map(lambda r: reader.read_into(key, out[r : r + rows], rows=(r, r + rows)), range(0, len(out), rows)))


_set_layers = jax.jit(lambda buf, x, i: jax.lax.dynamic_update_slice_in_dim(buf, x, i, 0), donate_argnums=0)


def _piece_sharding(sharding: jax.sharding.Sharding) -> jax.sharding.Sharding:
    """The sharding of a piece of whole layers of a stack placed on ``sharding``: the stack's,
    its layer axis not split (a piece has fewer layers than the stack)."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = (None, *tuple(sharding.spec)[1:])
        return jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec(*spec), memory_kind=sharding.memory_kind
        )
    return sharding


def _report(what, reader, missing, unexpected, misshaped, duplicated) -> str:
    lines = [f"{what} checkpoint at {reader.path} does not match vidax's model 1:1:"]
    for title, items in (
        ("missing tensors (the model needs them, the checkpoint lacks them)", missing),
        ("unexpected tensors (in the checkpoint, not used by the model)", unexpected),
        ("duplicated layers", duplicated),
        ("wrong shape or dtype", misshaped),
    ):
        if items:
            more = f" ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
            lines.append(f"  {len(items)} {title}: " + "; ".join(items[:_MAX_LISTED]) + more)
    return "\n".join(lines)


def export_state_dict(module: nnx.Module, rules: KeyRules) -> dict[str, np.ndarray]:
    """The module's parameters as a source-layout state dict (inverse of :func:`load_module`).

    Used to write checkpoints in the diffusers layout without torch (the embedded default) and
    to prove that the key rules are a bijection.
    """
    _, state = nnx.split(module)
    out: dict[str, np.ndarray] = {}
    flat = dict(nnx.to_flat_state(state))
    stacked = _stack_axes(flat, rules)
    for path, var in flat.items():
        value = np.asarray(var.get_value())
        if path in stacked:
            for layer in range(value.shape[0]):
                out[rules.join(path, layer)] = _from_target_layout(value[layer], path)
        else:
            out[rules.join(path, None)] = _from_target_layout(value, path)
    return out
