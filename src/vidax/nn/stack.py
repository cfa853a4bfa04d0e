"""Stacked layers: N identical blocks held as one module with a leading layer axis, run by scan.

Compile time then does not grow with depth, the stacked arrays are what the loader fills layer
by layer, and what offloading streams and sharding rules see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.nn.kernels import ScanLeaves

M = TypeVar("M", bound=nnx.Module)


def stacked(make: Callable[[nnx.Rngs], M], num_layers: int, rngs: nnx.Rngs) -> M:
    """Build ``num_layers`` copies of ``make(rngs)`` as one module whose params lead with L."""

    @nnx.split_rngs(splits=num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(r: nnx.Rngs) -> M:
        return make(r)

    return create(rngs)


def scan_layers(
    layers: nnx.Module,
    carry: Any,
    body: Callable[..., Any],
    *,
    num_layers: int | None = None,
    collect: bool = False,
    start: int = 0,
    per_layer: Any = None,
) -> Any:
    """Run ``carry = body(layer_i, carry)`` for each layer of a :func:`stacked` module.

    ``body`` sees one layer as an ordinary module (params without the L axis). Implemented with
    ``jax.lax.scan`` over the split state, so it traces the block once.

    Args:
        layers: a :func:`stacked` module of L layers.
        carry: the initial carry (any pytree).
        body: ``(layer, carry) -> carry``.
        num_layers: a static int in ``[0, L]``: run only the first ``num_layers`` layers (default
            all). The loop then indexes the whole stack layer by layer (no sliced copy of the
            first layers' weights is made).
        start: a static int: run layers ``[start, num_layers)`` (default 0), indexed from the
            whole stack like ``num_layers`` (a step cache runs the first layer alone, then the rest).
        collect: also return the carry after every layer run, stacked along a new leading axis.
        per_layer: a pytree of arrays with a leading axis of L (one entry per layer, e.g. a step
            cache's state of a module inside each layer): ``body`` is then
            ``(layer_i, carry, entry_i) -> (carry, new entry_i)``.

    Returns:
        The final carry; with ``collect``, ``(carry, carries)`` where ``carries`` has the carry's
        structure with a leading axis of ``num_layers`` (entry ``i`` is the carry after layer
        ``i``, so entry ``-1`` equals the final carry). With ``per_layer``: ``(that,
        new per_layer)``, the entries of the layers not run unchanged.

    Raises:
        ValueError: ``num_layers`` is not an int in ``[0, L]``.

    On the CPU backend the stacks cross the loop as the weight-format seam says
    (:class:`vidax.nn.kernels.stacks.ScanLeaves`): 16-bit floats sliced as integers (no float32
    copy of a stack), Linear kernels read in place by the CPU matmul where it does so. A stack
    passed in as :class:`~vidax.nn.kernels.stacks.StackBits` (:func:`~vidax.nn.kernels.stacks.as_stack_bits`)
    is not copied whole per call either.

    A stack whose layers stream from host memory (:func:`vidax.parallel.offload.streamed_stack`:
    a streamed text encoder, run outside a jit) runs chunk by chunk
    (:func:`~vidax.parallel.layer_streaming.scan_streamed`).
    """
    from vidax.parallel.layer_streaming import scan_streamed
    from vidax.parallel.offload import streamed_stack

    streamed = streamed_stack(layers)
    if streamed is not None and start == 0 and per_layer is None:  # chunk by chunk from host memory
        return scan_streamed(streamed, carry, body, scan_layers, num_layers=num_layers, collect=collect)
    graphdef, state = nnx.split(layers)
    paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    leaves = [leaf for _, leaf in paths]
    views = ScanLeaves(layers, [p for p, _ in paths], leaves)
    xs = views.carried(leaves)
    total = leaves[0].shape[0]
    count = total if num_layers is None else num_layers
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= total:
        raise ValueError(f"scan_layers: num_layers={num_layers!r} must be an int in [0, {total}].")
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= count:
        raise ValueError(f"scan_layers: start={start!r} must be an int in [0, num_layers={count}].")

    def step(c, layer_leaves, entry=None):
        module = nnx.merge(graphdef, jax.tree.unflatten(treedef, views.layer(layer_leaves)))
        if per_layer is None:
            c = body(module, c)
            return c, (c if collect else None)
        c, entry = body(module, c, entry)
        return c, ((c if collect else None), entry)

    if count == total and start == 0 and not views.reads_in_place:
        carry, carries = jax.lax.scan(lambda c, xe: step(c, *xe), carry, (xs, per_layer))
    else:

        def indexed(c, i):
            entry = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False), per_layer)
            return step(c, views.at(xs, i), entry)

        carry, carries = jax.lax.scan(indexed, carry, jnp.arange(start, count, dtype=jnp.int32))
        if per_layer is not None:
            carries = (carries[0], jax.tree.map(lambda a, e: a.at[start:count].set(e), per_layer, carries[1]))
    if per_layer is None:
        return (carry, carries) if collect else carry
    carries, entries = carries
    return ((carry, carries) if collect else carry), entries


def num_layers(layers: nnx.Module) -> int:
    """Length of the leading layer axis of a :func:`stacked` module."""
    leaves = jax.tree.leaves(nnx.state(layers))
    return leaves[0].shape[0]
