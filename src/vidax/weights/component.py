"""The one component loader: every registered component with weights is loaded here, from its
registry entry (:class:`~vidax.registry.ComponentSpec`) alone.

For each component, in this order and in this place only:

1. the dtype is checked (float32 or bfloat16), the config read (or taken as given);
2. the key rules (``spec.rules(config, keys)``), the precision policy (``spec.fp32()``), the
   placement (given, else ``spec.axes()`` on the mesh, first device without one; in host memory
   with ``memory_kind``) and the block streaming (``spec.block_stacks`` from the files straight
   into host memory when ``offload`` streams blocks) are decided;
3. the model is built abstractly and the checkpoint checked against it 1:1 from the safetensors
   headers (:func:`~vidax.weights.loader.load_module` with ``defer``): a
   :class:`~vidax.weights.loader.PendingLoad`.

:func:`load_components` plans every component of a pipeline before it reads the first weight of
any, so a checkpoint error in the last component costs no read of the first.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import InputError
from vidax.nn.inputs import compute_dtype
from vidax.parallel.offload import offload_loader
from vidax.parallel.placement import logical_placement
from vidax.registry import ComponentSpec, registry
from vidax.weights.loader import DtypePolicy, PendingLoad, Placement, load_module
from vidax.weights.safetensors_io import CheckpointReader


def plan_component(
    spec: ComponentSpec | str,
    folder: str | os.PathLike,
    dtype: Any = jnp.float32,
    placement: Placement | None = None,
    *,
    mesh: Any = None,
    offload: Any = None,
    memory_kind: str | None = None,
    config: Any = None,
    weights: str | None = None,
    file: str | os.PathLike | None = None,
    random_weights: bool = False,
    variant: str | None = None,
    **model_kwargs: Any,
) -> PendingLoad:
    """Check the checkpoint in ``folder`` against the model of ``spec`` and return the load.

    Args:
        spec: the registry entry, or its class name (``"WanTransformer3DModel"``).
        folder: the component folder (``config.json`` + safetensors, or shards + index).
        dtype: compute and storage dtype, float32 or bfloat16 (a jnp dtype or its name); the
            entry's ``fp32_params`` stay float32.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default: by the
            entry's ``param_axes`` on ``mesh``, this process's first device without a mesh.
        mesh: the ``(data, tensor, sequence)`` mesh (a model with ``block_stacks`` also gets it
            as ``mesh=``, and checks its heads against it while it is built).
        offload: ``OffloadConfig`` / chunk size (:func:`vidax.parallel.offload.resolve_offload`):
            when it streams blocks, every stack of ``block_stacks`` goes from the files straight
            into host-memory chunks and the model holds placeholders; a model without
            ``block_stacks`` (a text encoder) streams the stacks its class's ``stacked_paths``
            names, each chunk read from the memory-mapped files at each use
            (:class:`~vidax.parallel.layer_streaming.FileLayers`: no host memory held between calls).
        memory_kind: place every parameter in this memory kind (a staged component's host
            memory); None: the device's.
        config: the parsed config when the caller has it (a pipeline reads each once); None:
            read ``folder/config.json``.
        weights: None, or an 8-bit format (``"int8"``, ``"float8_e4m3fn"``,
            :mod:`vidax.nn.quant`): the Linear kernels not kept float32 are stored so, quantized
            per output channel as they are read.
        file: a single-file checkpoint of this component (``.gguf``, fp8-scaled or plain
            ``.safetensors`` in the original repository's layout,
            :mod:`vidax.weights.single_file`) read instead of the folder's weights (the
            folder's config.json still gives the model).
        random_weights: make every parameter on its placement from the config instead of
            reading any file (:mod:`vidax.weights.random_weights`; the folder needs only its
            ``config.json``).
        variant: the folder's weights variant (``"fp16"``) read where it has its files
            (:class:`~vidax.weights.safetensors_io.CheckpointReader`); None: the plain files.
        **model_kwargs: more keywords of the model's constructor (``attention="xla"``, ...).

    Returns:
        A :class:`~vidax.weights.loader.PendingLoad` whose ``read()`` reads and places the
        tensors and returns the module.

    Raises:
        InputError: ``folder`` is not a folder, ``dtype`` is not supported, the heads do not
            split over ``mesh``, or ``random_weights`` with ``weights`` / ``file``.
        ConfigError: a class vidax does not implement, ``config.json`` missing or asking for
            something not implemented.
        CheckpointError: tensors missing, unexpected, duplicated or mis-shaped (the first few of
            each, with their files).
    """
    spec = registry().component(spec) if isinstance(spec, str) else spec
    folder = os.fspath(folder)
    what = f"{spec.kind} ({spec.class_name})"
    dtype = compute_dtype(dtype, what)
    if not os.path.isdir(folder):
        raise InputError(
            f"path={folder!r} is not a folder; pass the {spec.class_name} folder (config.json and safetensors)."
        )
    config = config or spec.config_class().from_json_file(os.path.join(folder, "config.json"))
    placement = _in_memory(placement or logical_placement(mesh, spec.axes()), memory_kind)
    if random_weights:
        return _plan_random(spec, config, dtype, placement, mesh, offload, weights, file, model_kwargs)
    if spec.loader is not None:
        return spec.load_fn()(folder, dtype=dtype, placement=placement, mesh=mesh, config=config, variant=variant)
    return _plan_files(spec, folder, config, dtype, placement, mesh, offload, weights, file, variant, model_kwargs)


def _plan_files(spec, folder, config, dtype, placement, mesh, offload, weights, file, variant, model_kwargs):
    """:func:`plan_component` from the files: the single ``file``'s tensors, else the folder's
    (its ``variant``'s files where it has them), checked against the model from their headers;
    the block stacks streamed into host memory as they are read when ``offload`` streams them."""
    if file is not None:
        from vidax.weights.single_file import open_single_file

        reader = open_single_file(file, spec)
    else:
        from vidax.weights.single_file import fp8_scaled

        reader = fp8_scaled(CheckpointReader(folder, variant))
    stream = None
    stacked_paths = getattr(spec.model_class(), "stacked_paths", ())
    if spec.block_stacks:
        stream = offload_loader(offload, attr=spec.block_stacks)
    elif offload is not None and stacked_paths:  # a streamed text encoder: read at each use
        stream = offload_loader(offload, attr=stacked_paths, from_files=True)
    pending = load_module(
        _model_maker(spec, config, dtype, mesh, model_kwargs),
        reader,
        spec.rules(config, reader.keys()),
        DtypePolicy(dtype, spec.fp32(), weights),
        placement,
        what=f"{spec.kind} ({spec.class_name})",
        place_stacked=stream,
        defer=True,
    )
    return pending.then(stream.attach) if stream is not None else pending


def _model_maker(spec, config, dtype, mesh, model_kwargs) -> Callable[[], nnx.Module]:
    """``() -> model``: ``spec``'s model class built from ``config`` with its parameters in
    ``dtype`` (a model with ``block_stacks`` also gets ``mesh=``)."""
    model_cls = spec.model_class()
    kwargs = {**model_kwargs, "mesh": mesh} if spec.block_stacks else model_kwargs
    return lambda: model_cls(config, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0), **kwargs)


def _plan_random(spec, config, dtype, placement, mesh, offload, weights, file, model_kwargs) -> PendingLoad:
    """:func:`plan_component` with ``random_weights``: the model's parameters made on their
    placement (:func:`vidax.weights.random_weights.random_module`), no file read (a component
    with its own ``loader`` too: its model is built from its config as any other's)."""
    from vidax.parallel.offload import resolve_offload
    from vidax.weights.random_weights import random_module, rules_from_config

    what = f"{spec.kind} ({spec.class_name})"
    if file is not None:
        raise InputError(
            f"random_weights=True makes the {what} weights from its config; transformer={os.fspath(file)!r} cannot apply"
        )
    stacks = spec.block_stacks or getattr(spec.model_class(), "stacked_paths", ())  # a text encoder's: in host memory
    stream = resolve_offload(offload) if stacks else None
    return random_module(
        _model_maker(spec, config, dtype, mesh, model_kwargs),
        DtypePolicy(dtype, spec.fp32(), weights),
        placement,
        rules_from_config(spec, config),
        block_stacks=stacks,
        made_at_fetch=not spec.block_stacks,  # a text encoder's layers: made at each use, as read from files
        stream=stream if stream is not None and stream.streams_blocks else None,
    )


def load_component(spec: ComponentSpec | str, folder: str | os.PathLike, *args: Any, **options: Any) -> nnx.Module:
    """:func:`plan_component` (same arguments) then read: the module with its parameters placed."""
    return plan_component(spec, folder, *args, **options).read()


@dataclasses.dataclass(frozen=True)
class Request:
    """One component of :func:`load_components`.

    Attributes:
        spec: its registry entry. folder: its folder. options: :func:`plan_component`'s keywords.
        then: called with the module as soon as it is read, before the next one is
            (e.g. moving an expert not in use to host memory).
    """

    spec: ComponentSpec
    folder: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    then: Callable[[Any], Any] | None = None


def load_components(requests: Mapping[str, Request]) -> dict[str, Any]:
    """Every request planned (each checkpoint checked against its model from the headers) before
    the first weight of any is read; then each read, in the order given.

    Returns:
        name -> module.

    Raises:
        as :func:`plan_component`, before any tensor is read.
    """
    plans = {name: plan_component(r.spec, r.folder, **r.options) for name, r in requests.items()}
    modules = {}
    for name, plan in plans.items():
        modules[name] = plan.read()
        if requests[name].then is not None:
            requests[name].then(modules[name])
    return modules


def _in_memory(placement: Placement | None, memory_kind: str | None) -> Placement | None:
    """``placement`` (None: this process's first device) in ``memory_kind`` when given."""
    if memory_kind is None:
        return placement
    device = jax.local_devices()[0]

    def place(path, sds):
        sharding = placement(path, sds) if placement is not None else jax.sharding.SingleDeviceSharding(device)
        return sharding.with_memory_kind(memory_kind)

    return place
