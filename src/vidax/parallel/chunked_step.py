"""A denoising step whose transformer blocks stream from host memory, as a short sequence of
jitted calls (:mod:`vidax.parallel.offload` holds the chunks and how they are fetched): the
step's pieces compiled once per input shape and kept, a bounded number of shapes, by the step
that uses them (:class:`ChunkedStep`, :class:`CompiledShapes`), and :func:`streamed_call`, one
forward of a streamed module outside a step."""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.nn.kernels import from_stack_bits
from vidax.parallel.offload import (
    COMPILED_SHAPES,
    OffloadedBlocks,
    abstract_of,
    offloaded_stacks,
)

logger = logging.getLogger("vidax.offload")


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
            x_info, inputs_info = jax.tree.map(lambda i: abstract_of(i, i.sharding), pre.out_info)
            abstract_rest = jax.tree.map(lambda a: abstract_of(a), rest)
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
                    aux_info = jax.tree.map(lambda i: abstract_of(i, i.sharding), first_fn.out_info[1])
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
