"""Stacked layers: N identical blocks held as one module with a leading layer axis, run by scan.

Compile time then does not grow with depth, the stacked arrays are what the loader fills layer
by layer, and what offloading streams and sharding rules see.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import jax
from flax import nnx

M = TypeVar("M", bound=nnx.Module)


def stacked(make: Callable[[nnx.Rngs], M], num_layers: int, rngs: nnx.Rngs) -> M:
    """Build ``num_layers`` copies of ``make(rngs)`` as one module whose params lead with L."""

    @nnx.split_rngs(splits=num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(r: nnx.Rngs) -> M:
        return make(r)

    return create(rngs)


def scan_layers(layers: nnx.Module, carry: Any, body: Callable[[nnx.Module, Any], Any]) -> Any:
    """Run ``carry = body(layer_i, carry)`` for each layer of a :func:`stacked` module.

    ``body`` sees one layer as an ordinary module (params without the L axis). Implemented with
    ``jax.lax.scan`` over the split state, so it traces the block once.
    """
    graphdef, state = nnx.split(layers)

    def step(c, layer_state):
        return body(nnx.merge(graphdef, layer_state), c), None

    carry, _ = jax.lax.scan(step, carry, state)
    return carry


def num_layers(layers: nnx.Module) -> int:
    """Length of the leading layer axis of a :func:`stacked` module."""
    leaves = jax.tree.leaves(nnx.state(layers))
    return leaves[0].shape[0]
