"""Weights larger than device memory: the stacked blocks wait in host memory and stream in chunks.

With ``OffloadConfig(chunk=N)`` a model's stacked transformer blocks (the leading-layer-axis
parameters of :func:`vidax.nn.stack.stacked`) live in host memory, split into chunks of ``N``
consecutive layers; every other parameter stays on the device. Each denoising step then runs as
a short Python sequence of jitted calls instead of one::

    x, inputs = pre(resident params, latents, ...)        # embeddings (one jit)
    fetch(chunk 0)
    for i in chunks:
        fetch(chunk i+1)                                   # host -> device copy, issued first ...
        x = run_layers(chunk i, x, inputs)                 # ... so it overlaps this compute
        wait for chunk i (then it is freed)
    latents, state = post(resident params, x, inputs, ...) # head, guidance, scheduler (one jit)

JAX dispatch is asynchronous, so the copy of chunk ``i+1`` runs while chunk ``i`` computes
(double buffering) and hides behind it when compute is the longer of the two. Waiting for chunk
``i`` before fetching chunk ``i+2`` bounds the device to the resident weights plus two chunks.
``run_layers`` is compiled once for ``N`` layers; when ``N`` does not divide the layer count,
the final, smaller chunk is compiled once more (two executables in all; padding with
identity layers instead would stream and compute dead layers every step).

Host memory is the backend's ``pinned_host`` memory kind where it has one (page-locked, copied by
DMA; CPU, GPU and TPU backends of JAX 0.10 all list it), else ``unpinned_host``, else plain numpy
arrays. Chunks keep the parameters' sharding (:mod:`vidax.parallel.placement`): each shard waits
in the host memory of its own device and lands already sharded. On the CPU backend, where host
and device memory are the same RAM, a chunk's bf16 / fp16 leaves are not copied at all: the fetch
gives uint16 views of their host buffers (:func:`vidax.nn.kernels.stacks.stack_bits_putter`), which the
chunk jit bitcasts back, so XLA:CPU makes no copy of the chunk either.

A model that streams implements three methods with ``model(*a) == head(run_blocks(*embed(*a)))``:

* ``embed(*model_args) -> (x, inputs)``: everything before the blocks; ``inputs`` a pytree;
* ``run_blocks(x, inputs, blocks) -> x``: a stacked module of any number of layers over ``x``;
* ``head(x, inputs) -> output``.

(:class:`vidax.models.wan.transformer.WanTransformer3DModel` does.) The loader streams the
blocks straight from the checkpoint into host chunks (:class:`HostBlockLoader`), so they never
touch the device at load time; :func:`offload_module` converts a module already loaded.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.nn.kernels import StackBits, stack_bits_putter
from vidax.parallel.layer_streaming import FileLayers, MadeLayers, stack_of

logger = logging.getLogger("vidax.offload")

#: Host memory kinds, in order of preference.
HOST_MEMORY_KINDS = ("pinned_host", "unpinned_host")
#: Valid ``OffloadConfig.memory_kind`` values ("numpy": plain host arrays).
MEMORY_KIND_CHOICES = ("auto", "pinned_host", "unpinned_host", "numpy")

#: Argument shapes a :class:`ChunkedStep` keeps compiled (the least recently used dropped
#: first): a long ``vidax serve`` of many sizes holds at most this many sets of executables a step.
COMPILED_SHAPES = 8


@dataclasses.dataclass(frozen=True)
class OffloadConfig:
    """Which weights wait in host memory between uses, and how the blocks stream.

    Attributes:
        chunk: ``N >= 1`` or ``"all"``: the transformer's stacked blocks live in host memory and
            each step streams them ``N`` layers at a time (``N >=`` the layer count, or
            ``"all"``: the whole stack as one chunk). None: the blocks stay on the device.
        keep_text_encoder: True: the text encoder stays on the device; False: it waits in host
            memory and is placed on the device only to encode (staged); None: decided from the
            parameter sizes and the device memory (:func:`vidax.pipelines.staging.plan_staging`).
        keep_vae: the same for the VAE (placed only to encode images and to decode).
        keep_transformer: True: the transformer's device weights stay on the device while the
            text encoders run and the VAE decodes; False: they wait in host memory then (moved
            off before, back after: diffusers' model CPU offload of the transformer); None:
            decided from the device memory (:mod:`vidax.pipelines.device_plan`, before streaming
            blocks or tiling the VAE).
        memory_kind: where offloaded weights wait: ``"auto"`` (``pinned_host`` where the backend
            has it, else ``unpinned_host``, else numpy arrays), ``"pinned_host"``,
            ``"unpinned_host"`` or ``"numpy"``.
        text_encoder_chunk: ``N >= 1``: every text encoder is staged and its stacked layers
            stream onto the device ``N`` at a time while it encodes, read from the checkpoint's
            files at each use (so they hold no host memory between calls: the OS page cache
            keeps them while memory allows); the device holds the encoder's other weights, two
            chunks and the activations. None: decided from the device memory
            (:mod:`vidax.pipelines.device_plan`; resident or staged where no limit is known).

    Raises:
        InputError: a value outside the above, or ``text_encoder_chunk`` with
            ``keep_text_encoder=True``.
    """

    chunk: int | str | None = None
    keep_text_encoder: bool | None = None
    keep_vae: bool | None = None
    memory_kind: str = "auto"
    text_encoder_chunk: int | None = None
    keep_transformer: bool | None = None

    def __post_init__(self):
        c = self.chunk
        if c is not None and c != "all" and (isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1):
            raise InputError(f"offload chunk={c!r} must be a positive int (layers per chunk), 'all' or None.")
        for name in ("keep_text_encoder", "keep_vae", "keep_transformer"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, bool):
                raise InputError(f"offload {name}={v!r} must be True, False or None (decide from memory).")
        if self.memory_kind not in MEMORY_KIND_CHOICES:
            raise InputError(f"offload memory_kind={self.memory_kind!r} must be one of {MEMORY_KIND_CHOICES}.")
        t = self.text_encoder_chunk
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1):
            raise InputError(
                f"offload text_encoder_chunk={t!r} must be a positive int (text encoder layers per chunk) or None."
            )
        if t is not None and self.keep_text_encoder:
            raise InputError(
                f"offload text_encoder_chunk={t!r} streams the text encoder's layers, keep_text_encoder=True "
                "keeps them on the device: give one of the two."
            )

    @property
    def streams_blocks(self) -> bool:
        """True when the transformer blocks are streamed from host memory."""
        return self.chunk is not None

    def layers_per_chunk(self, num_layers: int) -> int:
        """Layers per chunk for a stack of ``num_layers`` (``chunk`` capped at ``num_layers``)."""
        if self.chunk is None or self.chunk == "all":
            return num_layers
        return min(int(self.chunk), num_layers)


def resolve_offload(offload: Any) -> OffloadConfig | None:
    """Normalise the public ``offload=`` argument.

    Accepts None (nothing offloaded, staging decided from memory), an :class:`OffloadConfig`, a
    positive int or ``"all"`` (``OffloadConfig(chunk=...)``) or a dict of its fields.

    Raises:
        InputError: anything else.
    """
    if offload is None or isinstance(offload, OffloadConfig):
        return offload
    if offload == "all" or (isinstance(offload, (int, np.integer)) and not isinstance(offload, bool)):
        return OffloadConfig(chunk=offload)
    if isinstance(offload, dict):
        fields = {f.name for f in dataclasses.fields(OffloadConfig)}
        unknown = sorted(set(offload) - fields)
        if unknown:
            raise InputError(f"offload={offload!r}: unknown keys {unknown}; valid keys {sorted(fields)}.")
        return OffloadConfig(**offload)
    raise InputError(
        f"offload={offload!r} is not valid; pass None, a positive int (blocks per chunk), 'all', "
        "an OffloadConfig or a dict of its fields."
    )


# ---------------------------------------------------------------------------------------------
# Host memory


def device_memory_kind(device: Any = None) -> str:
    """The default (device) memory kind of ``device`` (default: this process's first device)."""
    device = device or jax.local_devices()[0]
    return device.default_memory().kind


def host_memory_kind(requested: str = "auto", device: Any = None) -> str | None:
    """The memory kind offloaded weights wait in, or None for plain numpy arrays.

    Args:
        requested: see :attr:`OffloadConfig.memory_kind`.
        device: whose memories to look at (default: this process's first device).

    Raises:
        InputError: ``requested`` names a memory kind the device does not have.
    """
    if requested not in MEMORY_KIND_CHOICES:
        raise InputError(f"memory_kind={requested!r} must be one of {MEMORY_KIND_CHOICES}.")
    device = device or jax.local_devices()[0]
    kinds = [m.kind for m in device.addressable_memories()]
    default = device.default_memory().kind
    if requested == "numpy":
        return None
    if requested == "auto":
        return next((k for k in HOST_MEMORY_KINDS if k in kinds and k != default), None)
    if requested not in kinds or requested == default:
        raise InputError(
            f"memory_kind={requested!r}: {device.platform} device {device.id} has memories {kinds} "
            f"(default {default!r}); use 'auto' or one of {[k for k in kinds if k != default] + ['numpy']}."
        )
    return requested


def to_host(x: Any, sharding: jax.sharding.Sharding, kind: str | None) -> Any:
    """``x`` (numpy or a device array) placed in host memory ``kind`` with ``sharding``'s layout
    (each shard in the host memory of its device); a numpy copy when ``kind`` is None."""
    if kind is None:
        return np.array(x)
    return jax.device_put(x, sharding.with_memory_kind(kind))


def abstract_of(x: Any, sharding: jax.sharding.Sharding | None = None) -> jax.ShapeDtypeStruct:
    """``x``'s shape and dtype (and ``sharding``) as a ``jax.ShapeDtypeStruct``."""
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def _nbytes(x: Any) -> int:
    return int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize


# ---------------------------------------------------------------------------------------------
# Offloaded blocks


class OffloadedBlocks:
    """The parameters of a stacked module, split into chunks of consecutive layers in host memory.

    Built by :class:`HostBlockLoader` (straight from a checkpoint) or :func:`offload_module`.

    Attributes:
        graphdef: NNX graph of the stacked module; merged with a chunk's state it is a module of
            that chunk's layers.
        abstract: the module's state as ``ShapeDtypeStruct`` of the full stack (what the owning
            model holds in place of the parameters).
        sizes: layers of each chunk, e.g. ``[2, 2, 1]`` for 5 layers in chunks of 2.
        memory_kind: host memory kind of the chunks (None: numpy arrays).
        attr: the owning model's attribute that holds the stack.
    """

    def __init__(
        self,
        graphdef,
        abstract: nnx.State,
        chunks: Sequence[nnx.State],
        shardings: nnx.State,
        memory_kind: str | None,
        attr: str = "blocks",
    ):
        self.attr = attr
        self.graphdef = graphdef
        self.abstract = abstract
        self.memory_kind = memory_kind
        leaves = [jax.tree.flatten(c) for c in chunks]
        self._treedef = leaves[0][1]
        self._chunks = [lv for lv, _ in leaves]
        device = device_memory_kind()
        self._shardings = [s.with_memory_kind(device) for s in jax.tree.leaves(shardings)]
        # 16-bit float leaves on CPU devices go to the chunk jits as uint16 views (no copy).
        self._putters = [stack_bits_putter(a.dtype, s) for a, s in zip(self._chunks[0], self._shardings)]
        self.sizes = [int(lv[0].shape[0]) for lv in self._chunks]
        self.num_layers = sum(self.sizes)
        # streamed_call's step of the owning module, its compiled pieces with it (dropped with it).
        self.call_step: Any = None  # a vidax.parallel.chunked_step.ChunkedStep
        ids = jax.tree.unflatten(self._treedef, list(range(len(self._chunks[0]))))
        self._leaf_index = {tuple(p): v.get_value() for p, v in nnx.to_flat_state(ids)}

    def chunk_leaf(self, i: int, path: tuple) -> Any:
        """The array of parameter ``path`` (within the stack) in chunk ``i`` (host memory)."""
        return self._chunks[i][self._leaf_index[tuple(path)]]

    def set_chunk_leaf(self, i: int, path: tuple, value: Any) -> None:
        """Replace the array of parameter ``path`` in chunk ``i`` by ``value`` (same shape, dtype and
        host placement: compiled code depends on them; LoRA merges, :mod:`vidax.lora.apply`)."""
        self._chunks[i][self._leaf_index[tuple(path)]] = value

    def leaf_sharding(self, path: tuple) -> jax.sharding.Sharding:
        """The device sharding a chunk of parameter ``path`` is fetched with."""
        return self._shardings[self._leaf_index[tuple(path)]]

    def fetch(self, i: int) -> nnx.State:
        """Start copying chunk ``i`` to the device (asynchronous); its device state. On the CPU
        backend its bf16 / fp16 leaves are :class:`~vidax.nn.kernels.stacks.StackBits` views of the host
        arrays instead (no copy; :func:`~vidax.nn.kernels.stacks.stack_bits_putter`): pass the state
        through :func:`~vidax.nn.kernels.stacks.from_stack_bits` inside the jit."""
        chunk, put = (
            [a.read() if isinstance(a, (FileLayers, MadeLayers)) else a for a in self._chunks[i]],
            self._putters,
        )
        moved = iter(
            jax.device_put(
                [a for a, p in zip(chunk, put) if p is None], [s for s, p in zip(self._shardings, put) if p is None]
            )
        )
        return jax.tree.unflatten(self._treedef, [next(moved) if p is None else p(a) for a, p in zip(chunk, put)])

    def chunk_spec(self, size: int) -> nnx.State:
        """``ShapeDtypeStruct`` state (device shardings) of a chunk of ``size`` layers, as
        :meth:`fetch` gives it."""

        def spec(a, s, put):
            shape = (size,) + tuple(a.shape[1:])
            if put is None:
                return jax.ShapeDtypeStruct(shape, a.dtype, sharding=s)
            return StackBits(jax.ShapeDtypeStruct(shape, np.uint16, sharding=s), a.dtype)

        leaves = zip(self._chunks[0], self._shardings, self._putters)
        return jax.tree.unflatten(self._treedef, [spec(*z) for z in leaves])

    def chunk_bytes(self, i: int) -> int:
        """Bytes of chunk ``i`` (all shards together)."""
        return sum(_nbytes(a) for a in self._chunks[i])

    @property
    def nbytes(self) -> int:
        """Bytes of all chunks."""
        return sum(self.chunk_bytes(i) for i in range(len(self.sizes)))

    @property
    def signature(self) -> tuple:
        """What compiled code depends on: chunk sizes, leaf shapes, dtypes and shardings."""
        return (
            tuple(self.sizes),
            self._treedef,
            tuple(
                (a.shape[1:], str(a.dtype), s, p is None)
                for a, s, p in zip(self._chunks[0], self._shardings, self._putters)
            ),
        )

    def run(
        self,
        compute: Callable[[int, nnx.State, Any], Any],
        x: Any,
        on_chunk: Callable[[], None] | None = None,
        first: nnx.State | None = None,
        chunks: int | None = None,
    ) -> Any:
        """``x = compute(i, chunk_i, x)`` for every chunk (the first ``chunks`` of them), double buffered.

        The copy of chunk ``i+1`` is issued before ``compute`` of chunk ``i``, so they overlap (a
        chunk read from the files or made at each fetch is read after ``compute`` is dispatched,
        so the read overlaps it too);
        chunk ``i`` is waited for (and so freed) before chunk ``i+2`` is fetched, so at most two
        chunks are on the device. ``on_chunk()`` runs after each compute is dispatched, while
        this chunk and the next one are both referenced (memory sampling). ``first``: chunk 0,
        already fetched (a step cache ran its first layer alone).
        """
        n = len(self.sizes) if chunks is None else chunks
        fetched = self.fetch(0) if first is None else first
        made = self.memory_kind in ("files", "made")  # made on the host thread: after the compute is dispatched
        for i in range(n):
            if made:
                current = fetched
                x = compute(i, current, x)
                fetched = self.fetch(i + 1) if i + 1 < n else None
            else:
                current, fetched = fetched, (self.fetch(i + 1) if i + 1 < n else None)
                x = compute(i, current, x)
            if on_chunk is not None:
                on_chunk()
            del current
            if i + 1 < n:
                jax.block_until_ready(x)
        return x

    def describe(self) -> str:
        where = {"made": "the device (made at each fetch: random weights)", "files": "the checkpoint's files"}.get(
            self.memory_kind, self.memory_kind or "numpy host arrays"
        )
        return (
            f"{self.num_layers} blocks streamed from {where} in {len(self.sizes)} chunk(s) of "
            f"{self.sizes[0]}, {self.chunk_bytes(0) / 2**20:,.1f} MiB per chunk, "
            f"{self.nbytes / 2**20:,.1f} MiB per step"
        )


_OFFLOADED: weakref.WeakKeyDictionary[nnx.Module, dict[str, OffloadedBlocks]] = weakref.WeakKeyDictionary()
#: The stacked module itself -> its streamed chunks (what :func:`streamed_stack` finds).
_STACKS: weakref.WeakKeyDictionary[nnx.Module, OffloadedBlocks] = weakref.WeakKeyDictionary()


def streamed_stack(layers: nnx.Module) -> OffloadedBlocks | None:
    """The streamed chunks of the stacked module ``layers`` (an attribute of a module whose stack
    :func:`attach_chunks` registered), or None where its parameters are on the device."""
    return _STACKS.get(layers)


def _attribute(module: Any, attr: str) -> Any:
    for part in attr.split("."):
        module = module[int(part)] if part.isdigit() else getattr(module, part)
    return module


def offloaded_stacks(module: nnx.Module) -> tuple[OffloadedBlocks, ...]:
    """Every streamed block stack of ``module``, in the order its ``block_stacks`` run (empty
    when its blocks are resident)."""
    stacks = _OFFLOADED.get(module, {})
    order = list(getattr(module, "block_stacks", ())) + [
        a for a in stacks if a not in getattr(module, "block_stacks", ())
    ]
    return tuple(stacks[a] for a in order if a in stacks)


def streams_layers(module: nnx.Module) -> bool:
    """True when some stacked layers of ``module`` are streamed
    (:func:`attach_chunks`): its forward then runs outside a jit, each
    chunk of layers jitted (:func:`~vidax.parallel.layer_streaming.scan_streamed`)."""
    return bool(offloaded_stacks(module))


def offloaded_blocks(module: nnx.Module) -> OffloadedBlocks | None:
    """The first streamed block stack of ``module`` (its only one, for a single-stack model), or
    None when its blocks are resident."""
    stacks = offloaded_stacks(module)
    return stacks[0] if stacks else None


def attach_chunks(module: nnx.Module, attr: str, chunks: dict, shardings: dict, kind: str | None) -> nnx.Module:
    """Install host chunks (``{path within attr: [chunk arrays]}``, each of the layers of one
    chunk, in host memory ``kind``; ``shardings``: each parameter's device sharding) for
    ``module.<attr>``: its parameters become ``ShapeDtypeStruct`` placeholders and the chunks
    are registered. :class:`HostBlockLoader` and :func:`offload_module` build the chunks; the
    TPU benchmarks build them from host-made weights. ``attr`` may be dotted
    (``"encoder.block"``); a chunk may be :class:`~vidax.parallel.layer_streaming.FileLayers` (``kind`` "files")."""
    blocks = _attribute(module, attr)
    graphdef, state = nnx.split(blocks)
    flat = list(nnx.to_flat_state(state))
    n = len(next(iter(chunks.values())))
    per_chunk = [nnx.from_flat_state([(p, v.replace(chunks[p][i])) for p, v in flat]) for i in range(n)]
    sh = nnx.from_flat_state([(p, v.replace(shardings[p])) for p, v in flat])
    host = None if kind in (None, "files", "made") else kind  # where the placeholders say the chunks wait
    at = {p: None if host is None else shardings[p].with_memory_kind(host) for p, _ in flat}
    abstract = nnx.from_flat_state([(p, v.replace(abstract_of(v.get_value(), at[p]))) for p, v in flat])
    nnx.update(blocks, abstract)
    stacks = _OFFLOADED.setdefault(module, {})
    stacks[attr] = _STACKS[blocks] = OffloadedBlocks(graphdef, abstract, per_chunk, sh, kind, attr)
    logger.info("offload: %s: %s", attr, stacks[attr].describe())
    return module


class HostBlockLoader:
    """The loader's ``place_stacked`` hook (:func:`vidax.weights.loader.load_module`) that puts
    every stacked parameter under ``attr`` (each of them, for several stacks) straight into
    host-memory chunks.

    Each chunk is assembled from the memory-mapped file layer by layer in one numpy buffer of
    ``chunk`` layers and placed in host memory with the parameter's sharding, so host memory
    holds at most one chunk of one parameter besides the chunks already placed, and the
    device is not touched. Call :meth:`attach` on the loaded module.

    Args:
        config: the offload settings (``chunk``, ``memory_kind``).
        attr: the model attribute holding the stacked blocks, or a tuple of them (the model's
            ``block_stacks``: every one is streamed); dotted for a nested one (a text
            encoder's ``stacked_paths``, ``"encoder.block"``).
        from_files: read nothing now: each chunk is a :class:`~vidax.parallel.layer_streaming.FileLayers`, read from the
            memory-mapped checkpoint at each fetch (a streamed text encoder, used once a call).
    """

    def __init__(self, config: OffloadConfig, attr: str | tuple[str, ...] = "blocks", from_files: bool = False):
        self.config = config
        self.attrs = (attr,) if isinstance(attr, str) else tuple(attr)
        self.kind = "files" if from_files else host_memory_kind(config.memory_kind)
        self._chunks: dict = {}
        self._shardings: dict = {}

    def __call__(self, path, sds: jax.ShapeDtypeStruct, sharding, read_layer) -> Any:
        attr = stack_of(path, self.attrs)
        if attr is None:
            return None
        total = sds.shape[0]
        n = self.config.layers_per_chunk(total)
        out = []
        for start in range(0, total, n):
            stop = min(start + n, total)
            if self.kind == "files":
                out.append(FileLayers(read_layer, start, stop, sds))
                continue
            buf = np.empty((stop - start,) + tuple(sds.shape[1:]), sds.dtype)
            for j in range(stop - start):
                buf[j] = read_layer(start + j)
            out.append(to_host(buf, sharding, self.kind))
            del buf
        within = tuple(path[attr.count(".") + 1 :])
        self._chunks.setdefault(attr, {})[within] = out
        self._shardings.setdefault(attr, {})[within] = sharding
        return abstract_of(sds)

    def attach(self, module: nnx.Module) -> nnx.Module:
        """Register the chunks read during loading with ``module`` (returned)."""
        for attr in self.attrs:
            if not any(a == attr or a.startswith(attr + ".") for a in self._chunks):
                raise InputError(f"offload: the model has no stacked parameters under {attr!r}.")
        for attr in self._chunks:
            attach_chunks(module, attr, self._chunks[attr], self._shardings[attr], self.kind)
        return module


def offload_loader(
    offload: Any, attr: str | tuple[str, ...] = "blocks", from_files: bool = False
) -> HostBlockLoader | None:
    """A :class:`HostBlockLoader` of the stack(s) ``attr`` when ``offload`` streams blocks, else None."""
    config = resolve_offload(offload)
    return HostBlockLoader(config, attr, from_files) if config is not None and config.streams_blocks else None


def offload_module(module: nnx.Module, offload: Any, attr: str | None = None) -> nnx.Module:
    """Move the stacked blocks of an already loaded ``module`` into host chunks (in place).

    Each chunk is sliced on the device, copied to host memory and the device stack released
    once the module holds placeholders (callers must drop their own references to the old
    parameters). Returns ``module``.

    ``attr``: the stack to stream; default every one of the model's ``block_stacks``.

    Raises:
        InputError: ``offload`` does not stream blocks, or ``module`` has no ``attr``.
    """
    attrs = (attr,) if attr else tuple(getattr(module, "block_stacks", ("blocks",)))
    config = resolve_offload(offload)
    if config is None or not config.streams_blocks:
        raise InputError(f"offload_module: offload={offload!r} does not stream blocks (give a chunk size).")
    for a in attrs:
        if not hasattr(module, a):
            raise InputError(f"offload_module: {type(module).__name__} has no stacked blocks {a!r}.")
    kind = host_memory_kind(config.memory_kind)
    for a in attrs:
        chunks, shardings = {}, {}
        for path, var in nnx.to_flat_state(nnx.state(getattr(module, a))):
            arr = var.get_value()
            n = config.layers_per_chunk(arr.shape[0])
            chunks[path] = [to_host(arr[s : s + n], arr.sharding, kind) for s in range(0, arr.shape[0], n)]
            shardings[path] = arr.sharding
        attach_chunks(module, a, chunks, shardings, kind)
    return module


# ---------------------------------------------------------------------------------------------
# The streamed denoising step
