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
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.nn.kernels import StackBits, from_stack_bits, stack_bits_putter

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
        memory_kind: where offloaded weights wait: ``"auto"`` (``pinned_host`` where the backend
            has it, else ``unpinned_host``, else numpy arrays), ``"pinned_host"``,
            ``"unpinned_host"`` or ``"numpy"``.

    Raises:
        InputError: a value outside the above.
    """

    chunk: int | str | None = None
    keep_text_encoder: bool | None = None
    keep_vae: bool | None = None
    memory_kind: str = "auto"

    def __post_init__(self):
        c = self.chunk
        if c is not None and c != "all" and (isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1):
            raise InputError(f"offload chunk={c!r} must be a positive int (layers per chunk), 'all' or None.")
        for name in ("keep_text_encoder", "keep_vae"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, bool):
                raise InputError(f"offload {name}={v!r} must be True, False or None (decide from memory).")
        if self.memory_kind not in MEMORY_KIND_CHOICES:
            raise InputError(f"offload memory_kind={self.memory_kind!r} must be one of {MEMORY_KIND_CHOICES}.")

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


def _abstract(x: Any, sharding: jax.sharding.Sharding | None = None) -> jax.ShapeDtypeStruct:
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
        self.call_step: ChunkedStep | None = None
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
        chunk, put = self._chunks[i], self._putters
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
    ) -> Any:
        """``x = compute(i, chunk_i, x)`` for every chunk, double buffered.

        The copy of chunk ``i+1`` is issued before ``compute`` of chunk ``i``, so they overlap;
        chunk ``i`` is waited for (and so freed) before chunk ``i+2`` is fetched, so at most two
        chunks are on the device. ``on_chunk()`` runs after each compute is dispatched, while
        this chunk and the next one are both referenced (memory sampling). ``first``: chunk 0,
        already fetched (a step cache ran its first layer alone).
        """
        n = len(self.sizes)
        fetched = self.fetch(0) if first is None else first
        for i in range(n):
            current, fetched = fetched, (self.fetch(i + 1) if i + 1 < n else None)
            x = compute(i, current, x)
            if on_chunk is not None:
                on_chunk()
            del current
            if i + 1 < n:
                jax.block_until_ready(x)
        return x

    def describe(self) -> str:
        where = self.memory_kind or "numpy host arrays"
        return (
            f"{self.num_layers} blocks streamed from {where} in {len(self.sizes)} chunk(s) of "
            f"{self.sizes[0]}, {self.chunk_bytes(0) / 2**20:,.1f} MiB per chunk, "
            f"{self.nbytes / 2**20:,.1f} MiB per step"
        )


_OFFLOADED: weakref.WeakKeyDictionary[nnx.Module, dict[str, OffloadedBlocks]] = weakref.WeakKeyDictionary()


def offloaded_stacks(module: nnx.Module) -> tuple[OffloadedBlocks, ...]:
    """Every streamed block stack of ``module``, in the order its ``block_stacks`` run (empty
    when its blocks are resident)."""
    stacks = _OFFLOADED.get(module, {})
    order = list(getattr(module, "block_stacks", ())) + [
        a for a in stacks if a not in getattr(module, "block_stacks", ())
    ]
    return tuple(stacks[a] for a in order if a in stacks)


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
    TPU benchmarks build them from host-made weights."""
    blocks = getattr(module, attr)
    graphdef, state = nnx.split(blocks)
    flat = list(nnx.to_flat_state(state))
    n = len(next(iter(chunks.values())))
    per_chunk = [nnx.from_flat_state([(p, v.replace(chunks[p][i])) for p, v in flat]) for i in range(n)]
    sh = nnx.from_flat_state([(p, v.replace(shardings[p])) for p, v in flat])
    abstract = nnx.from_flat_state(
        [
            (p, v.replace(_abstract(v.get_value(), None if kind is None else shardings[p].with_memory_kind(kind))))
            for p, v in flat
        ]
    )
    nnx.update(blocks, abstract)
    stacks = _OFFLOADED.setdefault(module, {})
    stacks[attr] = OffloadedBlocks(graphdef, abstract, per_chunk, sh, kind, attr)
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
            ``block_stacks``: every one is streamed).
    """

    def __init__(self, config: OffloadConfig, attr: str | tuple[str, ...] = "blocks"):
        self.config = config
        self.attrs = (attr,) if isinstance(attr, str) else tuple(attr)
        self.kind = host_memory_kind(config.memory_kind)
        self._chunks: dict = {a: {} for a in self.attrs}
        self._shardings: dict = {a: {} for a in self.attrs}

    def __call__(self, path, sds: jax.ShapeDtypeStruct, sharding, read_layer) -> Any:
        attr = str(path[0])
        if attr not in self.attrs:
            return None
        total = sds.shape[0]
        n = self.config.layers_per_chunk(total)
        out = []
        for start in range(0, total, n):
            stop = min(start + n, total)
            buf = np.empty((stop - start,) + tuple(sds.shape[1:]), sds.dtype)
            for j in range(stop - start):
                buf[j] = read_layer(start + j)
            out.append(to_host(buf, sharding, self.kind))
            del buf
        self._chunks[attr][tuple(path[1:])] = out
        self._shardings[attr][tuple(path[1:])] = sharding
        return _abstract(sds)

    def attach(self, module: nnx.Module) -> nnx.Module:
        """Register the chunks read during loading with ``module`` (returned)."""
        for attr in self.attrs:
            if not self._chunks[attr]:
                raise InputError(f"offload: the model has no stacked parameters under {attr!r}.")
            attach_chunks(module, attr, self._chunks[attr], self._shardings[attr], self.kind)
        return module


def offload_loader(offload: Any, attr: str | tuple[str, ...] = "blocks") -> HostBlockLoader | None:
    """A :class:`HostBlockLoader` of the stack(s) ``attr`` when ``offload`` streams blocks, else None."""
    config = resolve_offload(offload)
    return HostBlockLoader(config, attr) if config is not None and config.streams_blocks else None


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


class ChunkedStep:
    """A denoising step whose model streams its blocks; stands in for the pipeline's
    ``jax.jit(step, donate_argnums=(1,))`` in :func:`vidax.pipelines.sampling.run_denoising_loop`.

    ``step(params, latents, state, *args) -> (latents, state)`` is given in two traced pieces
    around the model call::

        out = model(*model_args(latents, state, *args))
        return finish(out, latents, state, *args)

    and runs as ``pre`` (``model_args`` + ``model.embed``), the chunk loop of
    :meth:`OffloadedBlocks.run` for each streamed stack in turn (``model.run_blocks``, one
    executable per stack and distinct chunk size) and ``post`` (``model.head`` + ``finish``;
    latents donated). A model of several stacks is called ``run_blocks(x, inputs, chunk,
    stack=name)``, and its residual stream ``x`` keeps one structure through all of them.

    Args:
        graphdef: NNX graph of the whole model.
        blocks: its :class:`OffloadedBlocks`, or a tuple of them (one per stack, in running
            order; :func:`offloaded_stacks`).
        model_args, finish: the step's pieces (see above).
        cache: a step cache's :class:`~vidax.pipelines.step_cache.CacheSpec` (the state is then
            its carry): ``pre`` embeds, ``first`` runs the first layer and decides (First-Block
            Cache), the chunks stream only on a step that needs the blocks (the host reads the
            decision), and ``post`` is the cache's ``end`` + ``head`` + ``finish``.
        out_shardings: ``(latents, state)`` output shardings of ``post`` (set on a mesh, see
            :meth:`with_out_shardings`).
        compiled_shapes: how many argument shapes stay compiled (:class:`CompiledShapes`; the
            step's variants, :meth:`for_blocks` and :meth:`with_out_shardings`, share them).

    Call ``step.lower(params, latents, state, *args).compile()`` (as for a jitted function),
    then call the result with the same arguments; ``params`` is ``nnx.state(model)`` (its block
    placeholders are ignored).
    """

    def __init__(
        self,
        graphdef,
        blocks: OffloadedBlocks | Sequence[OffloadedBlocks],
        model_args: Callable,
        finish: Callable,
        *,
        out_shardings: Any = None,
        cache: Any = None,
        compiled_shapes: int = COMPILED_SHAPES,
        _shared: dict | None = None,
    ):
        self.graphdef = graphdef
        self.cache = cache
        self.stacks = (blocks,) if isinstance(blocks, OffloadedBlocks) else tuple(blocks)
        if not self.stacks:
            raise InputError("ChunkedStep: no streamed block stack given")
        self.model_args = model_args
        self.finish = finish
        self.out_shardings = out_shardings
        self._shared = _shared if _shared is not None else {"compiled": CompiledShapes(compiled_shapes), "jits": {}}

    @property
    def blocks(self) -> OffloadedBlocks:
        """The first (for a single-stack model, the only) streamed stack."""
        return self.stacks[0]

    # -- variants sharing one compile cache --------------------------------------------------

    def _variant(self, **changes) -> ChunkedStep:
        kw = dict(out_shardings=self.out_shardings, cache=self.cache)
        blocks = changes.pop("blocks", self.stacks)
        kw.update(changes)
        return ChunkedStep(self.graphdef, blocks, self.model_args, self.finish, _shared=self._shared, **kw)

    def for_blocks(self, blocks: OffloadedBlocks | Sequence[OffloadedBlocks]) -> ChunkedStep:
        """The same step streaming other blocks of the same structure (a second expert): the
        compiled executables are shared."""
        stacks = (blocks,) if isinstance(blocks, OffloadedBlocks) else tuple(blocks)
        return self if all(a is b for a, b in zip(stacks, self.stacks, strict=True)) else self._variant(blocks=stacks)

    def with_out_shardings(self, out_shardings: Any) -> ChunkedStep:
        """The same step with ``(latents, state)`` pinned to ``out_shardings`` (see
        :func:`vidax.parallel.step.shard_step`)."""
        return self._variant(out_shardings=out_shardings)

    # -- the jitted pieces -------------------------------------------------------------------

    def _rest(self, params: nnx.State) -> nnx.State:
        attrs = {b.attr for b in self.stacks}
        return nnx.State({k: v for k, v in params.items() if k not in attrs})

    def _model_fn(self) -> Callable[[nnx.State], nnx.Module]:
        """``rest params -> model`` (the blocks as placeholders). Captures no array, so the
        jitted pieces cached in the shared dict keep no chunk alive."""
        graphdef = self.graphdef
        abstract = {b.attr: b.abstract for b in self.stacks}
        return lambda rest: nnx.merge(graphdef, nnx.State({**rest, **abstract}))

    def _jits(self) -> tuple:
        """The jitted ``pre`` and ``post`` (shared by the variants of this step)."""
        key = ("pre-post", self.out_shardings, self.cache)
        jits = self._shared["jits"]
        if key not in jits and self.cache is not None:
            model_of, model_args, finish, spec = self._model_fn(), self.model_args, self.finish, self.cache

            def pre(rest, latents, state, *args):
                return model_of(rest).embed(*model_args(latents, spec.split(state)[0], *args))

            def post(rest, x, y, z, inputs, aux, latents, state, *args):
                sched, cs = spec.split(state)
                pred, cs = spec.end(model_of(rest), x, y, z, inputs, cs, aux)
                return spec.join(finish(pred, latents, sched, *args), cs)

            jits[key] = (jax.jit(pre), jax.jit(post, donate_argnums=(6,), out_shardings=self.out_shardings))
        if key not in jits:
            model_of, model_args, finish = self._model_fn(), self.model_args, self.finish

            def pre(rest, latents, state, *args):
                return model_of(rest).embed(*model_args(latents, state, *args))

            def post(rest, x, inputs, latents, state, *args):
                return finish(model_of(rest).head(x, inputs), latents, state, *args)

            jits[key] = (jax.jit(pre), jax.jit(post, donate_argnums=(3,), out_shardings=self.out_shardings))
        return jits[key]

    def _chunk_jit(self, abstract_rest: nnx.State, x_sharding, stack: OffloadedBlocks, layers=None):
        model_of, blocks_graphdef = self._model_fn(), stack.graphdef
        named = len(self.stacks) > 1

        def run_chunk(chunk, x, inputs):
            model = model_of(abstract_rest)  # no parameter of it is read
            blocks = nnx.merge(blocks_graphdef, from_stack_bits(chunk))
            # ``layers`` (a step cache's range) only when there is one: a family's own run_blocks
            # need not take it.
            extra = {} if layers is None else {"layers": layers}
            return model.run_blocks(x, inputs, blocks, stack=stack.attr if named else None, **extra)

        # With a step cache the streams a chunk takes are read again after it (the residuals).
        return jax.jit(run_chunk, donate_argnums=() if self.cache is not None else (1,), out_shardings=x_sharding)

    def _taps_jit(self, abstract_rest: nnx.State, stack: OffloadedBlocks):
        """TaylorSeer's hooked modules in a chunk of ``stack``: ``(chunk, x, inputs, cs,
        entries) -> (x, new entries)``, ``entries`` the chunk's layers' slice of the stack's
        per-layer cache arrays, ``cs`` the step's decision and coefficients."""
        model_of, blocks_graphdef, spec = self._model_fn(), stack.graphdef, self.cache
        named = len(self.stacks) > 1

        def run_chunk(chunk, x, inputs, cs, entries):
            model = model_of(abstract_rest)
            blocks = nnx.merge(blocks_graphdef, chunk)
            x, states = model.run_blocks(
                x, inputs, blocks, stack=stack.attr if named else None, hooks=spec.tap_hooks(cs, stack.attr, entries)
            )
            return x, states[stack.attr]

        return jax.jit(run_chunk)

    def _first_jit(self, abstract_rest: nnx.State, x_sharding, stack: OffloadedBlocks):
        """The step cache's ``begin`` on the first layer of chunk 0: ``(y, aux, need_blocks)``."""
        model_of, blocks_graphdef, spec = self._model_fn(), stack.graphdef, self.cache
        named = len(self.stacks) > 1

        def first(chunk, x, inputs, cs):
            model = model_of(abstract_rest)
            blocks = nnx.merge(blocks_graphdef, from_stack_bits(chunk))
            run = lambda h: model.run_blocks(
                h,
                inputs,
                blocks,
                stack=stack.attr if named else None,  # noqa: E731
                layers=(0, 1),
            )
            y, aux = spec.begin(run, model.hidden_rows(inputs), x, cs)
            return y, aux, spec.need_blocks(cs, aux)

        return jax.jit(first)

    def lower(self, params: nnx.State, latents: jax.Array, state: Any, *args: Any) -> _Lowered:
        """Stage for compilation (mirrors ``jax.jit(...).lower``); ``.compile()`` on the result."""
        return _Lowered(self, params, latents, state, args)

    def compile_for(self, params: nnx.State, latents: jax.Array, state: Any, *args: Any) -> CompiledChunkedStep:
        """Compile ``pre``, one ``run_layers`` per stack and distinct chunk size, and ``post``
        for these arguments' shapes and shardings (cached)."""
        rest = self._rest(params)
        leaves, treedef = jax.tree.flatten((rest, latents, state, args))
        key = (
            treedef,
            tuple((np.shape(a), str(getattr(a, "dtype", type(a))), getattr(a, "sharding", None)) for a in leaves),
            tuple(b.signature for b in self.stacks),
            self.out_shardings,
        )
        cache = self._shared["compiled"]
        if cache.get(key) is None:
            pre_fn, post_fn = self._jits()
            pre = pre_fn.lower(rest, latents, state, *args).compile()
            x_info, inputs_info = jax.tree.map(lambda i: _abstract(i, i.sharding), pre.out_info)
            abstract_rest = jax.tree.map(lambda a: _abstract(a), rest)
            x_sharding = jax.tree.map(lambda i: i.sharding, x_info)
            chunks = []
            cs = None if self.cache is None else self.cache.split(state)[1]
            for stack in self.stacks:
                if cs is not None and stack.attr in cs.get("taps", {}):
                    taps_fn, small = self._taps_jit(abstract_rest, stack), _tap_scalars(cs)
                    chunks.append(
                        {
                            size: taps_fn.lower(
                                stack.chunk_spec(size),
                                x_info,
                                inputs_info,
                                small,
                                _layer_slice(cs["taps"][stack.attr], 0, size, True),
                            ).compile()
                            for size in sorted(set(stack.sizes))
                        }
                    )
                    continue
                chunk_fn = self._chunk_jit(abstract_rest, x_sharding, stack)
                chunks.append(
                    {
                        size: chunk_fn.lower(stack.chunk_spec(size), x_info, inputs_info).compile()
                        for size in sorted(set(stack.sizes))
                    }
                )
            first = None
            if self.cache is None:
                post = post_fn.lower(rest, x_info, inputs_info, latents, state, *args).compile()
            else:
                cs = self.cache.split(state)[1]
                aux_info = {}
                if self.cache.first_layer_alone:
                    head, size = self.stacks[0], self.stacks[0].sizes[0]
                    first_fn = (
                        self._first_jit(abstract_rest, x_sharding, head)
                        .lower(head.chunk_spec(size), x_info, inputs_info, cs)
                        .compile()
                    )
                    aux_info = jax.tree.map(lambda i: _abstract(i, i.sharding), first_fn.out_info[1])
                    rest0 = (
                        self._chunk_jit(abstract_rest, x_sharding, head, layers=(1, size))
                        .lower(head.chunk_spec(size), x_info, inputs_info)
                        .compile()
                    )
                    first = (first_fn, rest0)
                post = post_fn.lower(
                    rest, x_info, x_info, x_info, inputs_info, aux_info, latents, state, *args
                ).compile()
            cache.put(key, (pre, chunks, post, first))
            logger.info("offload: compiled the streamed step (chunk sizes %s)", [sorted(c) for c in chunks])
        return CompiledChunkedStep(self, *cache.get(key))


class CompiledShapes:
    """A :class:`ChunkedStep`'s compiled pieces by argument shapes: at most ``limit`` entries,
    the least recently used dropped when one more is put."""

    def __init__(self, limit: int = COMPILED_SHAPES):
        if limit < 1:
            raise InputError(f"compiled_shapes={limit!r}: keep at least 1 compiled shape")
        self.limit = limit
        self._entries: OrderedDict = OrderedDict()

    def get(self, key: Any) -> Any:
        """The entry of ``key`` (now the most recently used), or None."""
        if key not in self._entries:
            return None
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: Any, entry: Any) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def items(self) -> list:
        return list(self._entries.items())

    def values(self) -> list:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


@dataclasses.dataclass
class _Lowered:
    """A :class:`ChunkedStep` with its arguments, waiting for :meth:`compile`."""

    step: ChunkedStep
    params: Any
    latents: Any
    state: Any
    args: tuple

    def compile(self) -> CompiledChunkedStep:
        return self.step.compile_for(self.params, self.latents, self.state, *self.args)


class CompiledChunkedStep:
    """The compiled pieces of a :class:`ChunkedStep`; call as the step.

    Attributes:
        chunk_sizes: the chunk sizes compiled for the first stack (``{N}``, or ``{N, L mod N}``).
        on_chunk: optional zero-argument callback run after each chunk is dispatched (memory
            sampling in the first step, and the call's cancel check, which stops the step by
            raising :class:`~vidax.errors.Cancelled`; set by
            :func:`vidax.pipelines.sampling.run_denoising_loop`).
    """

    def __init__(self, step: ChunkedStep, pre, chunks: list, post, first=None):
        self.step = step
        self._pre, self._chunks, self._post, self._first = pre, chunks, post, first
        self.chunk_sizes = sorted(chunks[0])
        self.on_chunk: Callable[[], None] | None = None

    def __call__(self, params: nnx.State, latents: jax.Array, state: Any, *args: Any):
        step = self.step
        rest = step._rest(params)
        x, inputs = self._pre(rest, latents, state, *args)
        if step.cache is not None:
            return self._cached(rest, x, inputs, latents, state, args)
        for stack, compiled in zip(step.stacks, self._chunks):
            sizes = stack.sizes
            x = stack.run(lambda i, chunk, h, c=compiled, n=sizes: c[n[i]](chunk, h, inputs), x, self.on_chunk)
        return self._post(rest, x, inputs, latents, state, *args)

    def _cached(self, rest, x, inputs, latents, state, args):
        # The step cache's decision is read on the host: a step that skips the blocks streams
        # none (First-Block Cache: only chunk 0, for the first layer).
        spec, cs = self.step.cache, self.step.cache.split(state)[1]
        chunk0, y, aux = None, x, {}
        if self._first is not None:
            first, rest0 = self._first
            chunk0 = self.step.stacks[0].fetch(0)
            y, aux, need = first(chunk0, x, inputs, cs)
        else:
            need = spec.need_blocks(cs, aux)
        z = y
        if spec.taps:
            # TaylorSeer on modules inside the layers: every layer runs on every step (only the
            # hooked modules are predicted), each chunk with its layers' slice of the factors.
            small, taps = _tap_scalars(cs), dict(cs["taps"])
            for stack, compiled in zip(self.step.stacks, self._chunks):
                if stack.attr not in taps:
                    z = stack.run(
                        lambda i, chunk, h, c=compiled, n=stack.sizes: c[n[i]](chunk, h, inputs), z, self.on_chunk
                    )
                    continue
                starts, parts = np.cumsum([0, *stack.sizes]), []

                def run(i, chunk, h, c=compiled, n=stack.sizes, entries=taps[stack.attr], starts=starts, parts=parts):
                    h, new = c[n[i]](chunk, h, inputs, small, _layer_slice(entries, int(starts[i]), n[i]))
                    parts.append(new)
                    return h

                z = stack.run(run, z, self.on_chunk)
                taps[stack.attr] = jax.tree.map(lambda *p: jnp.concatenate(p), *parts)
            state = spec.with_cache(state, dict(cs, taps=taps))
        elif bool(need):
            for k, (stack, compiled) in enumerate(zip(self.step.stacks, self._chunks)):

                def run(i, chunk, h, c=compiled, n=stack.sizes, head=k == 0 and self._first is not None):
                    return (self._first[1] if head and i == 0 else c[n[i]])(chunk, h, inputs)

                z = stack.run(run, z, self.on_chunk, first=chunk0 if k == 0 else None)
        del chunk0
        return self._post(rest, x, y, z, inputs, aux, latents, state, *args)


def _tap_scalars(cs: dict) -> dict:
    """A step cache's arrays without TaylorSeer's per-layer ones (what every chunk reads)."""
    return {k: v for k, v in cs.items() if k != "taps"}


def _layer_slice(entries: Any, start: int, size: int, abstract: bool = False) -> Any:
    """Layers ``[start, start + size)`` of per-layer arrays (ShapeDtypeStructs with ``abstract``)."""
    if abstract:
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct((size, *a.shape[1:]), a.dtype), entries)
    return jax.tree.map(lambda a: a[start : start + size], entries)


def streamed_call(module: nnx.Module, *args: Any) -> Any:
    """``module(*args)`` for a module whose blocks are streamed: one :class:`ChunkedStep` pass
    (compiled on first use for these shapes; the step and its compiled pieces, at most
    :data:`COMPILED_SHAPES` shapes, are the module's own, kept by its first streamed stack as
    ``call_step``). For tests and one-off calls; the pipelines run their own
    :class:`ChunkedStep` inside their denoising loop.

    Raises:
        InputError: ``module``'s blocks are not offloaded.
    """
    stacks = offloaded_stacks(module)
    if not stacks:
        raise InputError(f"streamed_call: {type(module).__name__}'s blocks are not offloaded.")
    graphdef, params = nnx.split(module)
    step = stacks[0].call_step
    if step is None or step.graphdef != graphdef or step.stacks != stacks:
        step = stacks[0].call_step = ChunkedStep(graphdef, stacks, _call_args, _call_finish)
    out, _ = step.compile_for(params, None, None, *args)(params, None, None, *args)
    return out


def _call_args(latents, state, *args):
    return args


def _call_finish(out, latents, state, *args):
    return out, None
