"""The device mesh: ``(data, tensor, sequence)`` axes over every device of every process.

* ``data``: batch elements (and the cond / uncond halves of classifier-free guidance).
* ``tensor``: Megatron-style 1-D tensor parallelism (heads and FFN hidden units).
* ``sequence``: DeepSpeed-Ulysses sequence parallelism (video tokens).

Model code never names these axes: it names logical axes (``batch``, ``seq``, ``heads``...) and
:mod:`vidax.parallel.rules` maps them here. ``mesh=None`` everywhere means the single-device path.

The axes are ``AxisType.Auto`` (GSPMD propagation between explicit sharding constraints and
``shard_map`` regions); recent JAX makes ``jax.make_mesh`` default to ``Explicit`` axes, so the
type is always passed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from vidax.errors import Arg, InputError, joined

#: Mesh axis names, in mesh order.
DATA, TENSOR, SEQUENCE = "data", "tensor", "sequence"
MESH_AXES = (DATA, TENSOR, SEQUENCE)
#: Short names of the axis sizes (CLI flags ``--dp --tp --sp``, ``mesh="dp=2,tp=2,sp=2"``).
SIZE_NAMES = ("dp", "tp", "sp")
_MAX_LISTED = 40
#: The largest mesh vidax plans for (devices in all): far beyond any system, small enough that
#: listing its factorizations stays instant.
MAX_DEVICES = 2**20


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` (>= 1), ascending, in O(sqrt(n)) steps."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def valid_factorizations(n: int) -> list[tuple[int, int, int]]:
    """Every ``(dp, tp, sp)`` of positive ints with ``dp * tp * sp == n``, sorted."""
    return [(dp, tp, n // dp // tp) for dp in divisors(n) for tp in divisors(n // dp)]


def valid_layouts(n: int, heads: Sequence[int] = ()) -> list[tuple[int, int, int]]:
    """The ``(dp, tp, sp)`` of :func:`valid_factorizations` whose ``tp * sp`` divides every head
    count in ``heads`` (the model's attention heads: TP shards them, Ulysses re-shards the
    TP-local ones; :func:`check_heads`); all of them when ``heads`` is empty."""
    return [t for t in valid_factorizations(n) if all(h % (t[1] * t[2]) == 0 for h in heads)]


def _layouts_clause(n: int, heads: Sequence[int]) -> str:
    """``"valid (dp, tp, sp) for 8 devices[ and 12 attention heads]: (1, 1, 8), ..."``."""
    counts = sorted(set(heads))
    which = f" and {' / '.join(map(str, counts))} attention heads" if counts else ""
    return f"valid (dp, tp, sp) for {_devices(n)}{which}: {_format_triples(valid_layouts(n, counts))}"


def _devices(n: int) -> str:
    return f"{n} device" if n == 1 else f"{n} devices"


def check_layout(
    named: Sequence[Any], sizes: tuple[int, int, int], n: int, heads: Sequence[int] = (), note: str = "", tail: str = ""
) -> None:
    """Refuse mesh sizes ``(dp, tp, sp)`` that do not multiply to the device count ``n``, or whose
    ``tp * sp`` does not divide each of ``heads`` (TP shards the heads, Ulysses re-shards the
    TP-local ones). Both messages read alike: they start from ``named`` (message parts naming the
    sizes as the caller gave them: ``tp=2 sp=2`` in Python, ``--tp 2 --sp 2`` on the command
    line), then the mesh and what is wrong with it, then the valid ``(dp, tp, sp)``; ``note``
    follows the mesh (e.g. ``" (a size not given is 1)"``), ``tail`` the valid sizes.

    Raises:
        InputError: as above.
    """
    dp, tp, sp = sizes
    bad_heads = sorted({h for h in heads if h % (tp * sp)})
    if dp * tp * sp != n:
        problem = f"needs {_devices(dp * tp * sp)}, but there are {n}"
    elif bad_heads:
        problem = (
            f"splits attention heads over tp x sp = {tp * sp}, which does not divide the model's "
            f"{' / '.join(map(str, bad_heads))}"
        )
    else:
        return
    raise InputError(
        *named, f": the mesh dp {dp} x tp {tp} x sp {sp}{note} {problem}; {_layouts_clause(n, heads)}{tail}."
    )


def _format_triples(triples: Sequence[tuple[int, ...]]) -> str:
    shown = ", ".join("(" + ", ".join(map(str, t)) + ")" for t in triples[:_MAX_LISTED])
    return shown + (f", ... ({len(triples)} in all)" if len(triples) > _MAX_LISTED else "")


def make_mesh(
    dp: int = 1,
    tp: int = 1,
    sp: int = 1,
    *,
    devices: Sequence[Any] | None = None,
    heads: Sequence[int] = (),
    named: Sequence[Any] | None = None,
) -> Mesh:
    """A ``(data, tensor, sequence)`` mesh of sizes ``(dp, tp, sp)`` over ``devices``.

    Args:
        dp, tp, sp: axis sizes, positive ints whose product is the number of devices.
        devices: the devices to use, in mesh order; default ``jax.devices()`` (all processes),
            laid out by ``jax.make_mesh`` (which follows the physical topology on TPU / GPU); in
            one process, sizes of fewer devices than there are take the first ones
            (:func:`mesh_device_count`).
        heads: the attention head counts of the model the mesh is for: ``tp * sp`` must divide
            each, and the valid sizes an error lists are those that do (:func:`valid_layouts`).
        named: how an error names the sizes (message parts, :func:`check_layout`); default the
            keywords ``dp=.., tp=.., sp=..``.

    Returns:
        A :class:`jax.sharding.Mesh` with ``AxisType.Auto`` axes.

    Raises:
        InputError: a size is not a positive int, ``dp * tp * sp`` differs from the device
            count (is more than it, where ``devices`` is not given in one process), or ``tp * sp``
            does not divide ``heads`` (the message lists every valid ``(dp, tp, sp)``, for ``heads``).
    """
    sizes = (dp, tp, sp)
    for name, value in zip(SIZE_NAMES, sizes):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(f"make_mesh: {name}={value!r} must be a positive int.")
    sizes = tuple(int(s) for s in sizes)
    n = len(devices) if devices is not None else mesh_device_count(sizes)
    check_layout(joined(Arg(k, v) for k, v in zip(SIZE_NAMES, sizes)) if named is None else named, sizes, n, heads)
    types = (AxisType.Auto,) * 3
    if devices is None and n == jax.device_count():
        return jax.make_mesh(sizes, MESH_AXES, axis_types=types)
    devices = jax.devices()[:n] if devices is None else devices
    return Mesh(np.asarray(devices, dtype=object).reshape(sizes), MESH_AXES, axis_types=types)


def mesh_device_count(sizes: Sequence[int]) -> int:
    """The devices a mesh of ``sizes`` (dp, tp, sp) is made over: in one process, their product
    where it is fewer than there are (the first devices, as a run without a mesh uses the first
    one); else all of them (several processes: every process takes part)."""
    n = jax.device_count()
    return min(math.prod(sizes), n) if jax.process_count() == 1 else n


def parse_mesh_sizes(text: str) -> dict[str, int]:
    """``"2x2x2"`` (all three sizes: ``"2x2"`` is refused, as it could mean DPxTP or TPxSP) or
    ``"dp=2,tp=1,sp=4"`` (any subset, missing sizes 1) -> ``{"dp":.., "tp":.., "sp":..}``.

    Raises:
        InputError: another form, or a size below 1.
    """
    s = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+x\d+x\d+", s):
        return _check_sizes(dict(zip(SIZE_NAMES, (int(v) for v in s.split("x")))), text)
    out = {k: 1 for k in SIZE_NAMES}
    parts = [p for p in s.split(",") if p]
    for part in parts:
        m = re.fullmatch(r"(dp|tp|sp)=(\d+)", part)
        if not m:
            out = None
            break
        out[m.group(1)] = int(m.group(2))
    if not parts or out is None:
        raise InputError(
            Arg("mesh", text),
            " is not a mesh description; use 'DPxTPxSP' with all three sizes (e.g. '2x2x1'), "
            "or keys, where a size left out is 1 (e.g. 'dp=2,tp=2').",
        )
    return _check_sizes(out, text)


def _check_sizes(sizes: dict[str, int], text: str) -> dict[str, int]:
    bad = {k: v for k, v in sizes.items() if v < 1}
    if bad:
        raise InputError(Arg("mesh", text), f": sizes must be >= 1, got {bad}.")
    if math.prod(sizes.values()) > MAX_DEVICES:
        raise InputError(
            Arg("mesh", text),
            f" asks for {math.prod(sizes.values())} devices; a mesh has at most {MAX_DEVICES} (dp * tp * sp).",
        )
    return sizes


def resolve_mesh(mesh: Any, heads: Sequence[int] = ()) -> Mesh | None:
    """Normalise the ``mesh=`` argument of the public API.

    Accepts ``None`` (single device), a :class:`~jax.sharding.Mesh` (used as is), a string
    (:func:`parse_mesh_sizes`), a mapping with keys among ``dp``/``tp``/``sp`` or a
    ``(dp, tp, sp)`` sequence. ``heads``: the model's attention head counts, for the valid sizes
    an error lists (:func:`make_mesh`).

    Raises:
        InputError: anything else, or sizes that do not multiply to the device count or do not
            split ``heads`` (the message starts ``mesh=...``: :func:`check_layout`).
    """
    if mesh is None or isinstance(mesh, Mesh):
        return mesh
    named = [Arg("mesh", dict(mesh) if isinstance(mesh, Mapping) else mesh)]
    if isinstance(mesh, str):
        return make_mesh(**parse_mesh_sizes(mesh), heads=heads, named=named)
    if isinstance(mesh, Mapping):
        unknown = set(mesh) - set(SIZE_NAMES)
        if unknown:
            raise InputError(
                Arg("mesh", dict(mesh)), f": unknown keys {sorted(unknown)}; valid keys {list(SIZE_NAMES)}."
            )
        return make_mesh(**mesh, heads=heads, named=named)
    if isinstance(mesh, (tuple, list)) and len(mesh) == 3:
        return make_mesh(*mesh, heads=heads, named=named)
    raise InputError(
        Arg("mesh", mesh),
        " is not valid; pass None, a jax.sharding.Mesh, 'DPxTPxSP', "
        "'dp=..,tp=..,sp=..', a dict or a (dp, tp, sp) tuple.",
    )


def axis_size(mesh: Mesh | None, axis: str) -> int:
    """Size of mesh axis ``axis``; 1 when ``mesh`` is None or has no such axis."""
    if mesh is None or axis not in mesh.axis_names:
        return 1
    return int(mesh.shape[axis])


def mesh_sizes(mesh: Mesh | None) -> tuple[int, int, int]:
    """``(dp, tp, sp)`` of ``mesh`` (``(1, 1, 1)`` for None)."""
    return tuple(axis_size(mesh, a) for a in MESH_AXES)


def describe_mesh(mesh: Mesh | None) -> str:
    """One line: axis sizes, device count and kind, process count."""
    if mesh is None:
        return "mesh: none (single device)"
    dp, tp, sp = mesh_sizes(mesh)
    devs = mesh.devices.flat
    first = next(iter(devs))
    n_proc = len({d.process_index for d in mesh.devices.flat})
    return (
        f"mesh: data={dp} x tensor={tp} x sequence={sp} over {mesh.devices.size} "
        f"{first.platform} devices in {n_proc} process(es)"
    )


def check_heads(mesh: Mesh | None, heads: int, what: str) -> None:
    """Raise unless ``heads`` splits evenly over ``tensor x sequence`` (TP shards heads, Ulysses
    re-shards the TP-local heads over ``sequence``).

    Raises:
        InputError: starting from ``what``, then the mesh and the valid ``(dp, tp, sp)`` for this
            device count (:func:`check_layout`).
    """
    if mesh is not None:
        sizes = mesh_sizes(mesh)
        check_layout([what], sizes, math.prod(sizes), [heads])


def mesh_from_sizes(
    dp: int | None, tp: int | None, sp: int | None, *, always: bool = False, heads: Sequence[int] = ()
) -> Mesh | None:
    """The mesh of the CLI flags ``--dp --tp --sp``.

    None when no size is given (and not ``always``): the single-device path. Otherwise a size
    not given is 1, the same for each of the three (``--dp 2`` alone is ``dp=2, tp=1, sp=1``),
    and the product is the number of devices used: at most the device count, the first devices
    (sizes whose product is 1, ``--dp 1``: the single-device path too); with several processes
    exactly the device count. With ``always`` (several processes) and no size given, every
    device is data-parallel (``dp`` = the device count). ``heads``: the attention
    head counts of the model's configs, read before any weight: the valid sizes an error lists
    are those that split them (:func:`valid_layouts`).

    Raises:
        InputError: a given size that is not a positive integer (named ``dp=`` / ``tp=`` /
            ``sp=``, which the CLI spells ``--dp`` ...), or sizes whose product is more than the
            device count, or not it with several processes (one message whichever sizes were
            given, naming them and listing the valid ones).
    """
    for name, value in zip(SIZE_NAMES, (dp, tp, sp)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise InputError(
                Arg(name, value),
                " is not valid: each mesh axis size must be a positive integer (the number of devices along that axis)",
            )
    n = jax.device_count()
    if dp is None and tp is None and sp is None:
        return make_mesh(n, 1, 1) if always else None
    # Only the sizes the caller gave are named (the CLI spells them as the flags typed).
    given = joined((Arg(k, v) for k, v in zip(SIZE_NAMES, (dp, tp, sp)) if v is not None), " ")
    dp, tp, sp = dp or 1, tp or 1, sp or 1
    if dp * tp * sp == 1 and not always:
        return None
    n = mesh_device_count((dp, tp, sp))
    check_layout(
        given,
        (dp, tp, sp),
        n,
        heads,
        note=" (a size not given is 1)",
        tail=""
        if heads
        else ", of which only those whose tp x sp divides the model's attention heads run "
        "it (vidax inspect PATH --mesh DPxTPxSP checks a mesh)",
    )
    return make_mesh(dp, tp, sp, heads=heads)
