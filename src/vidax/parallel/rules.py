"""Logical axis names -> mesh axes: the one rule table, and sharding helpers that take logical names.

Model code describes every sharded tensor by logical axes, one name (or ``None``) per dimension:

==============  ======================================================  ============
logical axis    meaning                                                 mesh axis
==============  ======================================================  ============
``batch``       batch elements (CFG cond / uncond included)             ``data``
``seq``         self-attention tokens (video; CogVideoX: text + video)  ``sequence``
``heads``       attention heads; the ``N·K`` width of q/k/v             ``tensor``
``mlp``         hidden units of a feed-forward network                  ``tensor``
``vocab``       rows of a token-embedding table                         ``tensor``
``modulation``  outputs of an adaptive-norm modulation layer            ``tensor``
``embed``       model width D (the residual stream)                     replicated
``kv``          head dim K                                              replicated
``text_seq``    text / image context tokens (cross-attention)           replicated
``layers``      leading axis of stacked layers                          replicated
==============  ======================================================  ============

A dimension whose size does not divide by its mesh axes is left replicated (logged at INFO):
e.g. a batch of 1 without CFG on ``data=2``. Sequence lengths never take that path: the models
pad their tokens to a multiple of the ``sequence`` size (:func:`vidax.parallel.ulysses.pad_tokens`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vidax.errors import InputError
from vidax.parallel.mesh import DATA, SEQUENCE, TENSOR

logger = logging.getLogger("vidax.parallel")

LogicalAxes = Sequence["str | None"]

#: The rule table: logical axis -> mesh axis (``None`` = replicated).
LOGICAL_AXIS_RULES: dict[str, str | None] = {
    "batch": DATA,
    "seq": SEQUENCE,
    "heads": TENSOR,
    "mlp": TENSOR,
    "vocab": TENSOR,
    "modulation": TENSOR,
    "embed": None,
    "kv": None,
    "text_seq": None,
    "layers": None,
}


def column_parallel(path: str, axis: str) -> tuple[tuple[str, LogicalAxes], ...]:
    """Megatron column-parallel axes of the stacked linear(s) at ``path`` (a regex of the module
    path, e.g. ``"^layers/self_attn/(q_proj|k_proj|v_proj)"``): the kernel's output and the bias
    split over ``axis`` (``"heads"`` or ``"mlp"``)."""
    return ((rf"{path}/kernel$", ("layers", "embed", axis)), (rf"{path}/bias$", ("layers", axis)))


def row_parallel(path: str, axis: str) -> tuple[tuple[str, LogicalAxes], ...]:
    """Megatron row-parallel axes of the stacked linear at ``path``: the kernel's input split over
    ``axis``; its bias stays replicated (added once, after the reduction)."""
    return ((rf"{path}/kernel$", ("layers", axis, "embed")),)


def mesh_axis(logical: str | None) -> str | None:
    """The mesh axis of one logical axis name (``None`` -> ``None``).

    Raises:
        InputError: a name not in :data:`LOGICAL_AXIS_RULES`.
    """
    if logical is None:
        return None
    if logical not in LOGICAL_AXIS_RULES:
        raise InputError(f"logical axis {logical!r} is not in the rule table; known: {sorted(LOGICAL_AXIS_RULES)}.")
    return LOGICAL_AXIS_RULES[logical]


def logical_spec(axes: LogicalAxes, mesh: Mesh | None = None, shape: Sequence[int] | None = None) -> PartitionSpec:
    """``PartitionSpec`` of a tensor with logical ``axes``.

    With ``mesh`` and ``shape``, mesh axes absent from ``mesh`` or of size 1, and dimensions not
    divisible by their mesh axis, become ``None`` (replicated), so the spec is always valid.

    Raises:
        InputError: unknown logical name, or ``len(axes) != len(shape)``.
    """
    if shape is not None and len(axes) != len(shape):
        raise InputError(f"logical axes {tuple(axes)} do not match shape {tuple(shape)} (rank differs).")
    out = []
    for i, name in enumerate(axes):
        axis = mesh_axis(name)
        if axis is not None and mesh is not None:
            size = mesh.shape.get(axis, 1) if axis in mesh.axis_names else 1
            if size == 1:
                axis = None
            elif shape is not None and shape[i] % size:
                logger.info(
                    "dimension %d (%s, size %d) of shape %s does not divide by mesh axis %s=%d: replicated",
                    i,
                    name,
                    shape[i],
                    tuple(shape),
                    axis,
                    size,
                )
                axis = None
        out.append(axis)
    while out and out[-1] is None:
        out.pop()
    return PartitionSpec(*out)


def logical_sharding(mesh: Mesh, axes: LogicalAxes, shape: Sequence[int] | None = None) -> NamedSharding:
    """``NamedSharding`` on ``mesh`` of a tensor with logical ``axes`` (see :func:`logical_spec`)."""
    return NamedSharding(mesh, logical_spec(axes, mesh, shape))


def replicated(mesh: Mesh) -> NamedSharding:
    """Fully replicated sharding on ``mesh``."""
    return NamedSharding(mesh, PartitionSpec())


def constrain(x: jax.Array, axes: LogicalAxes, mesh: Mesh | None) -> jax.Array:
    """``with_sharding_constraint`` of ``x`` to its logical ``axes``; identity when ``mesh`` is None."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, logical_sharding(mesh, axes, x.shape))


def shard_count(spec: PartitionSpec, mesh_shape: dict[str, int]) -> list[int]:
    """Number of shards along each dimension named by ``spec`` (for bytes-per-device arithmetic)."""
    counts = []
    for entry in spec:
        names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        counts.append(math.prod(mesh_shape.get(n, 1) for n in names))
    return counts
