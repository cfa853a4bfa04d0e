"""Where each parameter lives on the mesh, derived from per-parameter logical axes.

A model family declares a table of ``(regex on the parameter path, logical axes)`` (e.g.
``TRANSFORMER_PARAM_AXES`` in ``vidax/models/wan/convert.py``); :func:`logical_placement` turns it
into the ``placement(path, ShapeDtypeStruct) -> Sharding`` the loader calls for every tensor, so
each weight is put straight into its shards. Parameters no rule matches are replicated.

After loading, :func:`placement_report` prints the per-device parameter bytes and the largest
replicated tensors, and :func:`check_sharded` fails if a weight meant to be sharded is
replicated. :func:`plan_report` does the same arithmetic from shapes alone (``vidax inspect
--mesh``), without devices or weights.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vidax.errors import InputError
from vidax.parallel.mesh import MESH_AXES, describe_mesh
from vidax.parallel.rules import logical_spec, shard_count
from vidax.weights.loader import Placement, path_str

#: ``(regex searched in the "/"-joined parameter path, logical axes of that parameter)``.
ParamAxes = Sequence[tuple[str, tuple[str | None, ...]]]


def param_axes(path: Any, ndim: int, table: ParamAxes) -> tuple[str | None, ...] | None:
    """Logical axes of the parameter at ``path`` (first matching rule), None when none matches.

    Raises:
        InputError: the matching rule's rank differs from ``ndim`` (a table / model mismatch).
    """
    s = path if isinstance(path, str) else path_str(path)
    for pattern, axes in table:
        if re.search(pattern, s):
            if len(axes) != ndim:
                raise InputError(
                    f"parameter {s} has rank {ndim} but its placement rule {pattern!r} names {len(axes)} axes {axes}."
                )
            return tuple(axes)
    return None


def param_spec(path: Any, shape: Sequence[int], table: ParamAxes, mesh: Mesh) -> PartitionSpec:
    """PartitionSpec of one parameter (replicated when no rule matches or sizes do not divide).
    An 8-bit kernel's ``kernel_scale`` ``(..., D_out)`` is split as its kernel's output axis."""
    s = path if isinstance(path, str) else path_str(path)
    if s.endswith("/kernel_scale"):
        axes = param_axes(s[: -len("_scale")], len(shape) + 1, table)
        return PartitionSpec() if axes is None else logical_spec(axes[:-2] + axes[-1:], mesh, tuple(shape))
    axes = param_axes(path, len(shape), table)
    if axes is None:
        return PartitionSpec()
    return logical_spec(axes, mesh, shape)


def logical_placement(mesh: Mesh | None, table: ParamAxes) -> Placement | None:
    """The loader's ``placement`` for a family's parameter table on ``mesh`` (None: loader default)."""
    if mesh is None:
        return None

    def placement(path, sds: jax.ShapeDtypeStruct) -> NamedSharding:
        return NamedSharding(mesh, param_spec(path, sds.shape, table, mesh))

    return placement


def _flat_params(module) -> dict[str, jax.Array]:
    from flax import nnx

    return {path_str(p): v.get_value() for p, v in nnx.to_flat_state(nnx.state(module, nnx.Param))}


def _shard_bytes(shape, itemsize, spec, mesh_shape) -> int:
    counts = shard_count(spec, mesh_shape) + [1] * (len(shape) - len(spec))
    return int(math.prod(-(-d // c) for d, c in zip(shape, counts)) * itemsize)


def _report(name: str, rows: list[tuple[str, tuple, int, PartitionSpec]], mesh_shape, top: int) -> list[str]:
    """rows: (path, shape, itemsize, spec) -> lines: per-device bytes and largest replicated."""
    per_device = sum(_shard_bytes(s, i, sp, mesh_shape) for _, s, i, sp in rows)
    total = sum(int(math.prod(s)) * i for _, s, i, _ in rows)
    repl = sorted(
        ((int(math.prod(s)) * i, p, s) for p, s, i, sp in rows if all(e is None for e in sp)),
        reverse=True,
    )
    lines = [
        f"  {name}: {total / 2**20:,.1f} MiB of parameters, {per_device / 2**20:,.1f} MiB per device "
        f"({len(rows) - len(repl)} of {len(rows)} tensors sharded)"
    ]
    if repl:
        lines.append(
            "    largest replicated: " + "; ".join(f"{p} {tuple(s)} {b / 2**20:,.2f} MiB" for b, p, s in repl[:top])
        )
    return lines


def placement_report(modules: Mapping[str, Any], mesh: Mesh | None, top: int = 5) -> str:
    """Mesh, per-device parameter bytes and largest replicated tensors of loaded ``modules``.

    Args:
        modules: name -> NNX module with placed parameters.
        mesh: the mesh in use (None: single device).
        top: how many replicated tensors to list per module.
    """
    mesh_shape = dict(mesh.shape) if mesh is not None else {}
    lines = [describe_mesh(mesh)]
    for name, module in modules.items():
        rows = []
        for path, arr in _flat_params(module).items():
            sharding = getattr(arr, "sharding", None)
            spec = sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()
            rows.append((path, tuple(arr.shape), np.dtype(arr.dtype).itemsize, spec))
        lines += _report(name, rows, mesh_shape, top)
    return "\n".join(lines)


def pipeline_report(pipe: Any, top: int = 5) -> str:
    """:func:`placement_report` of every NNX module a pipeline holds (transformer, text encoder,
    VAE...), on the pipeline's ``mesh``; modules kept off the mesh are reported as such."""
    from flax import nnx

    mesh = getattr(pipe, "mesh", None)
    on_mesh, lines = {}, []
    for name, value in vars(pipe).items():
        if not isinstance(value, nnx.Module):
            continue
        params = list(_flat_params(value).values())
        if params and isinstance(getattr(params[0], "sharding", None), NamedSharding):
            on_mesh[name] = value
        else:
            nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in params)
            where = "one device per process (not on the mesh)" if mesh is not None else "one device"
            lines.append(f"  {name}: {nbytes / 2**20:,.1f} MiB on {where}")
    return "\n".join([placement_report(on_mesh, mesh, top)] + lines)


def plan_report(
    components: Mapping[str, tuple[Callable[[], Any], ParamAxes, Any]],
    sizes: Mapping[str, int],
    top: int = 5,
) -> str:
    """:func:`placement_report` computed from shapes only (no devices, no weights).

    Args:
        components: name -> (zero-argument module constructor, parameter table, param dtype).
        sizes: ``{"dp": .., "tp": .., "sp": ..}``.
    """
    from jax.sharding import AbstractMesh

    from vidax.weights.loader import abstract_params

    shape = tuple(int(sizes.get(k, 1)) for k in ("dp", "tp", "sp"))
    mesh = AbstractMesh(shape, MESH_AXES)
    mesh_shape = dict(zip(MESH_AXES, shape))
    lines = [f"mesh (planned): data={shape[0]} x tensor={shape[1]} x sequence={shape[2]} = {math.prod(shape)} devices"]
    for name, (make, table, dtype) in components.items():
        _, flat = abstract_params(make)
        rows = []
        for path, var in flat.items():
            sds = var.get_value()
            stored = not np.issubdtype(sds.dtype, np.floating) or sds.dtype.itemsize == 1 or path[-1] == "kernel_scale"
            itemsize = np.dtype(sds.dtype if stored else dtype).itemsize
            rows.append((path_str(path), tuple(sds.shape), itemsize, param_spec(path, sds.shape, table, mesh)))
        lines += _report(name, rows, mesh_shape, top)
    return "\n".join(lines)


def check_sharded(module: Any, table: ParamAxes, mesh: Mesh | None, what: str = "model") -> None:
    """Raise if a parameter whose rule shards it on a mesh axis of size > 1 is not sharded so.

    Raises:
        InputError: listing the parameters found replicated (or sharded differently) with the
            spec they should have.
    """
    if mesh is None:
        return
    wrong = []
    for path, arr in _flat_params(module).items():
        want = param_spec(path, arr.shape, table, mesh)
        sharding = getattr(arr, "sharding", None)
        got = sharding.spec if isinstance(sharding, NamedSharding) else PartitionSpec()
        if any(e is not None for e in want) and not sharding.is_equivalent_to(NamedSharding(mesh, want), arr.ndim):
            wrong.append(f"{path} {tuple(arr.shape)}: {got} instead of {want}")
    if wrong:
        raise InputError(f"{what}: {len(wrong)} parameter(s) meant to be sharded are not: " + "; ".join(wrong[:8]))


def per_device_bytes(
    make: Callable[[], Any],
    table: ParamAxes,
    sizes: Mapping[str, int],
    dtype: Any,
    keep_fp32: Sequence[str] = (),
    weights: str | None = None,
) -> int:
    """Parameter bytes one device holds of the module ``make()`` on a ``(dp, tp, sp)`` mesh of
    ``sizes``, computed from shapes only: floating parameters in ``dtype``, those matching
    ``keep_fp32`` in float32, and with ``weights`` (an 8-bit format, :mod:`vidax.nn.quant`) the
    quantizable Linear kernels 1 byte a value plus their float32 scales, each sharded by
    ``table`` as the loader places it; ``weights`` a GGUF type (``"Q8_0"``, ``"Q4_K"``, a
    :data:`vidax.nn.gguf.BLOCKS` name): those kernels whose inputs are whole blocks kept as
    that type's blocks (as a GGUF file of that type loads, :mod:`vidax.nn.gguf`)."""
    from vidax.nn.gguf import BLOCKS, keep_all
    from vidax.weights.loader import abstract_params

    if weights in BLOCKS:
        plain = make
        make = lambda: keep_all(plain(), weights, keep_fp32)  # noqa: E731
    elif weights is not None:
        from vidax.nn.quant import quantize_structure

        plain = make
        make = lambda: quantize_structure(plain(), weights, keep_fp32)  # noqa: E731
    return held_per_device(abstract_params(make)[1], table, sizes, dtype, keep_fp32)


def held_per_device(
    params: Mapping[Any, Any], table: ParamAxes, sizes: Mapping[str, int], dtype: Any, keep_fp32: Sequence[str] = ()
) -> int:
    """:func:`per_device_bytes` of abstract parameters ``params`` (path -> variable of a
    ``ShapeDtypeStruct``, as :func:`~vidax.weights.loader.abstract_params` gives them, or a
    load's :attr:`~vidax.weights.loader.PendingLoad.abstract`): floating ones in ``dtype`` (those
    matching ``keep_fp32`` in float32), the others (8-bit and GGUF kernels, indices) as they are."""
    from jax.sharding import AbstractMesh

    from vidax.weights.loader import DtypePolicy

    shape = tuple(int(sizes.get(k, 1)) for k in ("dp", "tp", "sp"))
    mesh = AbstractMesh(shape, MESH_AXES)
    policy = DtypePolicy(dtype, tuple(keep_fp32))
    total = 0
    for path, var in params.items():
        sds = var.get_value()
        stored = not np.issubdtype(sds.dtype, np.floating) or sds.dtype.itemsize == 1 or path[-1] == "kernel_scale"
        itemsize = np.dtype(sds.dtype if stored else policy.dtype_for(path)).itemsize
        total += _shard_bytes(
            tuple(sds.shape), itemsize, param_spec(path, sds.shape, table, mesh), dict(zip(MESH_AXES, shape))
        )
    return total
