"""Data parallelism of a denoising step: its inputs placed on the mesh, its outputs kept there.

:func:`shard_step` is what :func:`vidax.pipelines.sampling.run_denoising_loop` calls when a
pipeline runs on a mesh: the latents and every batched argument (text embeddings of the
cond / uncond pair...) are split over ``data`` along their leading batch axis, scalars and the
scheduler's tables are replicated, and the step is re-jitted with its output shardings equal to
its input shardings, so the donated latents buffer is reused and no step recompiles. The model
inside shards its own activations (tensor / sequence parallelism).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from vidax.parallel.distributed import put
from vidax.parallel.rules import logical_sharding, replicated


def batch_sharding(mesh: Mesh, shape: tuple[int, ...]) -> jax.sharding.NamedSharding:
    """Leading axis over ``data`` when it divides, everything else replicated."""
    if len(shape) == 0:
        return replicated(mesh)
    return logical_sharding(mesh, ("batch",) + (None,) * (len(shape) - 1), shape)


def shard_step(
    step: Callable,
    latents: jax.Array,
    state: Any,
    args: tuple,
    mesh: Mesh,
    arg_axes: tuple | None = None,
) -> tuple[Callable, jax.Array, Any, tuple]:
    """Place ``step(params, latents, state, *args)``'s inputs on ``mesh`` and pin its outputs.

    Args:
        step: the pipeline's jitted step (``donate_argnums=(1,)``), or a
            :class:`~vidax.parallel.chunked_step.ChunkedStep` (its outputs are pinned the same way).
        latents: ``(B, ...)`` latents, or a pytree of latent streams (video, audio), each
            batch-split on its own.
        state: scheduler state pytree; leaves shaped like a latent stream (multistep history)
            are batch-split like it, the rest replicated.
        args: further step arguments (pytrees); array leaves batch-split on their leading axis
            when it divides by ``data``, scalars replicated, other leaves passed through.
        mesh: the mesh.
        arg_axes: optional, one entry per ``args`` element: ``None`` (the rule above), the
            logical axes of that array argument (:mod:`vidax.parallel.rules`), e.g.
            ``(None, "batch", None)`` for per-step noise ``(steps, B, ...)``, ``(None,)`` for a
            per-step table that every device reads whole, or for a dataclass argument (a
            :class:`~vidax.pipelines.step_inputs.StepInputs`) a mapping from field names to such
            entries (its other fields by the rule above).

    Returns:
        ``(step, latents, state, args)`` to run in its place.
    """
    lat_sh = jax.tree.map(lambda a: batch_sharding(mesh, a.shape), latents)
    latents = jax.tree.map(put, latents, lat_sh)
    by_shape = {tuple(a.shape): sh for a, sh in zip(jax.tree.leaves(latents), jax.tree.leaves(lat_sh))}

    def place_state(a):
        return put(a, by_shape.get(tuple(getattr(a, "shape", ())), replicated(mesh)))

    state = jax.tree.map(place_state, state)

    def place_arg(arg, axes):
        if isinstance(axes, Mapping):
            return dataclasses.replace(
                place_arg(arg, None), **{k: place_arg(getattr(arg, k), ax) for k, ax in axes.items()}
            )
        if axes is not None and isinstance(arg, (jax.Array, np.ndarray)):
            return put(arg, logical_sharding(mesh, axes, arg.shape))
        return jax.tree.map(
            lambda a: put(a, batch_sharding(mesh, a.shape)) if isinstance(a, (jax.Array, np.ndarray)) else a, arg
        )

    args = tuple(place_arg(a, ax) for a, ax in zip(args, arg_axes or (None,) * len(args), strict=True))
    state_sh = jax.tree.map(lambda a: a.sharding, state)
    if hasattr(step, "with_out_shardings"):  # a streamed step (vidax.parallel.chunked_step.ChunkedStep)
        return step.with_out_shardings((lat_sh, state_sh)), latents, state, args
    sharded = jax.jit(step, out_shardings=(lat_sh, state_sh), donate_argnums=(1,))
    return sharded, latents, state, args
