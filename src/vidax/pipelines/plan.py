"""The plan of a load (and of a call): everything decided before any weight is read.

:func:`read_plan` opens the checkpoint, picks the pipeline class for the task and reads the
checkpoint's configs once (the family's ``read_checkpoint``); :func:`with_call` checks a call
against those configs and fills its defaults; :func:`with_placement` checks the loading options
and decides the mesh, the offloading and which components are staged; :func:`with_memory`
estimates the call's peak memory and refuses (or warns about) a call that does not fit.
:meth:`VideoPipeline.from_plan <vidax.pipelines.base.VideoPipeline.from_plan>` then loads the
weights the plan names. ``from_pretrained``, ``vidax generate``, ``vidax serve`` and
``vidax inspect`` build their plans with these functions.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from vidax.checkpoint import TASK_NAMES, Checkpoint, CheckpointInfo
from vidax.errors import ConfigError
from vidax.pipelines.spec import FamilySpec
from vidax.pipelines.staging import Staging
from vidax.registry import registry


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a load (and a call) will do, decided from the configs alone.

    Attributes:
        checkpoint: the opened checkpoint (with its weight format, :func:`with_weights`).
        pipeline: the pipeline class that runs it.
        info: what the checkpoint is (``pipeline.family.read_checkpoint``, read once).
        dtype: the transformer / text encoder dtype (a jnp dtype).
        matmul_precision: ``"highest"``, ``"high"`` or ``"default"``; None: not given
            (``"highest"``, the VAE decode of a bfloat16 run ``"high"``: :mod:`vidax.nn.precision`).
        mesh: the device mesh or None (one device).
        offload: the :class:`~vidax.parallel.offload.OffloadConfig` or None.
        staging: which components wait in host memory (None before :func:`with_placement`).
        offload_experts: with two experts, the one not in use waits in host memory.
        options: the family's loading options (``vae_dtype``, ...).
        call: the checked call (:class:`~vidax.pipelines.base.Call`), None for a load alone.
        memory: the call's :class:`~vidax.pipelines.base.MemoryEstimate` (None: not estimated, or
            the family gives none); with ``memory_checked`` the loaded pipeline does not check it again.
        memory_checked: :func:`with_memory` ran.
        vae_tiling: the VAE decodes in tiles (asked for, or needed to fit).
        vae_tile_scale: the scale of those tiles (``enable_tiled_decode(scale=...)``): above 1
            only where the memory plan chose the tiling and larger tiles fit; 1 where tiling was
            asked for (the reference's tile).
        preset: the :class:`~vidax.pipelines.presets.Preset` the call runs (None: none).
        scheduler: the scheduler the preset asks for, built from the checkpoint's config (None:
            the checkpoint's).
        device_plan: what :func:`with_device_plan` chose for a device with a memory limit
            (:class:`~vidax.pipelines.device_plan.DevicePlan`; None: no limit known, the CPU).
        asked_offload: the offloading asked for (``offload=`` resolved), before the device plan
            filled in what it left open.
        micro_batch: rows of the step's batch each transformer layer runs at a time (None: all),
            as asked (``micro_batch=``) or as the device plan needs
            (:attr:`vidax.blocks.transformer.DiffusionTransformer.micro_batch`).
        asked_micro_batch: ``micro_batch=`` as given.
    """

    checkpoint: Checkpoint
    pipeline: type
    info: CheckpointInfo
    dtype: Any = jnp.float32
    matmul_precision: str | None = None
    mesh: Any = None
    offload: Any = None
    staging: Staging | None = None
    offload_experts: bool = True
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    call: Any = None
    memory: Any = None
    memory_checked: bool = False
    vae_tiling: bool = False
    vae_tile_scale: int = 1
    preset: Any = None
    scheduler: Any = None
    device_plan: Any = None
    asked_offload: Any = None
    micro_batch: int | None = None
    asked_micro_batch: int | None = None

    @functools.cached_property
    def spec(self) -> FamilySpec:
        """The family's description for this checkpoint (:class:`~vidax.pipelines.spec.FamilySpec`
        of :attr:`pipeline` and :attr:`info`), built from the configs on first use: every check of
        the plan before weights runs from it."""
        return FamilySpec.of(self.pipeline, self.info)

    @property
    def heads(self) -> list[int]:
        """The attention head counts of the checkpoint's transformers (what a mesh must split)."""
        return [h for _, h in self.spec.attention_heads]


def pipeline_class(checkpoint: Checkpoint, task: str | None = None) -> type:
    """The vidax pipeline class for ``checkpoint`` (and ``task``, when given).

    Raises:
        ConfigError: a pipeline class vidax does not run. InputError: a task the checkpoint
            does not do.
    """
    cls = registry().pipeline(checkpoint.pipeline_class_name, source=f"{checkpoint.source}: _class_name").load()
    return cls if task is None else cls.for_task(checkpoint, task)


def read_plan(
    path: Any,
    *,
    task: str | None = None,
    pipeline: type | None = None,
    weight_dtype: Any = None,
    transformer: Any = None,
    random_weights: bool = False,
) -> Plan:
    """The plan's checkpoint, pipeline class and configs: ``path`` (a folder, a hub id, the embedded
    checkpoint's name or an opened :class:`Checkpoint`) opened with its weight format
    (``weight_dtype``, a single-file ``transformer``; ``random_weights``: every weight made on
    the device from the configs, :func:`~vidax.pipelines.weight_formats.with_random_weights`),
    the class the registry holds for it (that of ``task`` where given, or ``pipeline`` itself),
    its configs read once.

    Raises:
        CheckpointError, ConfigError: as the family's ``read_checkpoint``; ConfigError also where
            the class (``pipeline``, or the registry's without ``task``) runs a task the checkpoint
            does not do. InputError: a task the checkpoint does not do; a bad ``weight_dtype`` /
            ``transformer``, or either with ``random_weights``.
    """
    from vidax.default_checkpoint import resolve_named_checkpoint
    from vidax.pipelines.weight_formats import with_random_weights, with_weights

    checkpoint = path if isinstance(path, Checkpoint) else Checkpoint.open(resolve_named_checkpoint(path))
    checkpoint = with_random_weights(with_weights(checkpoint, weight_dtype, transformer), random_weights)
    cls = pipeline or pipeline_class(checkpoint)
    if not hasattr(cls, "family"):  # not a VideoPipeline (LTX-2.5's diffusion decoder): it says how to run it
        cls.for_task(checkpoint, task or "t2v")
    info = cls.family.read_checkpoint(checkpoint)
    if pipeline is None and task is not None:
        chosen = cls.for_task(checkpoint, task, info)
        if (
            chosen.family.read_checkpoint.__func__ is not cls.family.read_checkpoint.__func__
        ):  # a task class of its own configs
            info = chosen.family.read_checkpoint(checkpoint)
        cls = chosen
    if task is None and cls.family.task not in info.tasks:
        raise ConfigError(
            f"{checkpoint.root} is {info.variant}; {cls.__name__} runs {TASK_NAMES[cls.family.task]} "
            f"(load it with vidax.load_pipeline(path, task={info.tasks[0]!r}))"
        )
    return Plan(checkpoint, cls, info)


def with_call(plan: Plan, **kwargs: Any) -> Plan:
    """``plan`` with its call: ``kwargs`` checked against the configs and the defaults filled
    (the pipeline's ``check_call``).

    Raises:
        InputError: a bad call argument (naming it).
    """
    return dataclasses.replace(plan, call=plan.spec.check_call(**kwargs))


def with_placement(
    plan: Plan,
    *,
    dtype: Any = jnp.float32,
    mesh: Any = None,
    offload: Any = None,
    matmul_precision: str | None = None,
    offload_experts: bool = True,
    micro_batch: int | None = None,
    **options: Any,
) -> Plan:
    """``plan`` with where its weights go: the loading options checked (the dtype options parsed,
    :func:`parsed_dtype_options`), the matmul precision
    parsed, ``dtype`` taken as a front door parsed it (``jnp.float32`` / ``jnp.bfloat16``:
    ``load_pipeline`` / ``from_pretrained``, the command line) or, for a caller of the plan's
    functions themselves (``read_plan`` -> ``with_placement``, as the benchmarks), a name parsed
    here (:func:`~vidax.nn.inputs.parse_dtype`), the backend checked, the mesh resolved (anything
    :func:`~vidax.parallel.mesh.resolve_mesh` takes) and checked against the configs' heads,
    the offloading resolved and the staging of the text encoder / VAE decided; ``micro_batch``
    (rows of the step's batch each transformer layer runs at a time, None: as the device plan
    needs) checked.

    Raises:
        InputError: a loading option the pipeline does not take, a bad dtype, precision, mesh or
            ``micro_batch``.
        SetupError: ``JAX_PLATFORMS`` names a backend JAX cannot start here; ``VIDAX_CPU_MATMUL``
            is not a CPU matmul (:func:`vidax.nn.kernels.cpu.check_matmul_setting`). ConfigError: the
            checkpoint's scheduler.
    """
    from vidax.blocks.transformer import check_micro_batch
    from vidax.nn.inputs import is_parsed_dtype, parse_dtype
    from vidax.nn.kernels import check_matmul_setting
    from vidax.nn.precision import parse_matmul_precision
    from vidax.parallel.distributed import check_backend
    from vidax.parallel.mesh import resolve_mesh
    from vidax.parallel.offload import resolve_offload

    dtype = dtype if is_parsed_dtype(dtype) else parse_dtype(dtype)  # parsed once, on any way in
    spec = plan.spec
    spec.check_load_options(options)
    options = parsed_dtype_options(plan.pipeline, options)  # as dtype: names parsed, parsed ones kept
    matmul_precision = parse_matmul_precision(matmul_precision)
    check_backend()
    check_matmul_setting()  # a VIDAX_CPU_MATMUL that is not a choice: one line, before any weight is read
    mesh = resolve_mesh(mesh, heads=plan.heads)
    spec.check_checkpoint(mesh)
    offload = resolve_offload(offload)
    check_micro_batch(micro_batch, mesh)  # before any weight is read
    staging = spec.plan_staging(
        dtype, options.get("vae_dtype", jnp.float32), offload, mesh, options.get("text_encoder_dtype", dtype)
    )
    plan = dataclasses.replace(
        plan,
        dtype=dtype,
        matmul_precision=matmul_precision,
        mesh=mesh,
        offload=offload,
        staging=staging,
        offload_experts=offload_experts,
        options=dict(options),
        micro_batch=micro_batch,
        asked_micro_batch=micro_batch,
    )
    return with_device_plan(plan, offload)


#: The loading options that give a component's dtype (keywords of a family's ``load_components``).
DTYPE_OPTIONS = ("vae_dtype", "text_encoder_dtype")


def parsed_dtype_options(pipeline: type, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with each of :data:`DTYPE_OPTIONS` parsed (:func:`~vidax.nn.inputs.parse_dtype`:
    ``jnp.float32`` / ``jnp.bfloat16``): the one parse of the user's value, in
    :func:`with_placement`, which every load passes before any weight is read
    (``from_pretrained``, ``vidax generate`` / ``serve``, the plan's own callers); a value parsed
    already is kept as it is. None stays None where ``pipeline``'s ``load_components`` default is
    None (HunyuanVideo's ``text_encoder_dtype``: the pipeline's dtype); the loading behind takes
    only parsed dtypes.

    Raises:
        InputError: a dtype vidax does not run, or None where it means nothing, naming the
            keyword as given (``vae_dtype='float16'``) and the valid values.
    """
    from vidax.nn.inputs import is_parsed_dtype, parse_dtype

    defaults = inspect.signature(pipeline.family.load_components).parameters
    parsed = dict(options)
    for key in DTYPE_OPTIONS:
        if key not in parsed or is_parsed_dtype(parsed[key]):
            continue
        if parsed[key] is None and (key not in defaults or defaults[key].default is None):
            continue
        parsed[key] = parse_dtype(parsed[key], key)
    return parsed


def default_call(plan: Plan) -> Any:
    """``plan``'s call, or for a load alone the checkpoint's default call (its own size, frames and
    steps; None where a default call needs inputs, e.g. an image)."""
    return plan.call if plan.call is not None else plan.spec.default_call()


def with_device_plan(plan: Plan, asked: Any, vae_tiling: bool = False) -> Plan:
    """``plan`` placed for the device's memory (:mod:`vidax.pipelines.device_plan`): where the
    device has a memory limit (``VIDAX_DEVICE_MEMORY``, or GPU / TPU), the blocks streamed, the
    text encoders and VAE staged and the VAE tiled as the call (or, for a load alone, the
    checkpoint's default call) needs, what ``asked`` (the resolved ``offload=``) and
    ``vae_tiling`` set winning. Elsewhere ``plan`` unchanged (staging as
    :func:`~vidax.pipelines.staging.plan_pipeline_staging` decided)."""
    from vidax.pipelines.device_plan import device_limit, host_limit, plan_device

    limit = device_limit()
    call = default_call(plan)
    if limit is None or call is None or plan.spec.model_size(call) is None:
        return plan
    sizes = plan.device_plan.sizes if plan.device_plan is not None else None
    dp = plan_device(
        plan,
        call,
        limit[0],
        host_limit(),
        asked=asked,
        vae_tiling=vae_tiling,
        sizes=sizes,
        micro_batch=plan.asked_micro_batch,
    )
    offload = dp.offload_config(asked)
    staging = Staging(
        {n: bool(dp.staged.get(n)) for n in plan.spec.stageable},
        "auto" if offload is None else offload.memory_kind,
        dp.text_chunk,
        dp.free_transformer,
    )
    return dataclasses.replace(
        plan,
        offload=offload,
        staging=staging,
        device_plan=dp,
        asked_offload=asked,
        vae_tiling=plan.vae_tiling or dp.vae_tiling,
        vae_tile_scale=1 if vae_tiling else dp.vae_tile_scale,
        micro_batch=dp.micro_batch,
    )


def with_memory(plan: Plan, *, refuse: bool = True, vae_tiling: bool = False) -> Plan:
    """``plan`` with its call's peak memory estimated before loading (every weight counted that
    the load puts in memory; the pipeline's ``check_memory``): refused (``refuse``) or warned
    about when it does not fit; the VAE decodes in tiles where asked (``vae_tiling``) or where
    only that fits.

    With a device plan (:func:`with_device_plan`), that plan is the check: re-planned with
    ``vae_tiling`` given, and refused where it does not fit, naming what would
    (:func:`~vidax.pipelines.device_plan.refusal`).

    Raises:
        OutOfMemoryError: the call does not fit (and ``refuse``).
    """
    if plan.device_plan is not None:
        return _with_device_memory(plan, refuse, vae_tiling)
    mesh = plan.mesh
    est = plan.spec.check_memory(
        plan.call,
        dtype=plan.dtype,
        loaded=False,
        refuse=refuse,
        devices=1 if mesh is None else mesh.size,
        offload=plan.offload,
        vae_tiling=vae_tiling,
    )
    chosen = not vae_tiling and est is not None and est.vae_tiling  # tiled by the estimate's choice
    return dataclasses.replace(
        plan,
        memory=est,
        memory_checked=True,
        vae_tiling=vae_tiling or chosen,
        vae_tile_scale=est.vae_tile_scale if chosen else 1,
    )


def _with_device_memory(plan: Plan, refuse: bool, vae_tiling: bool) -> Plan:
    """:func:`with_memory` of a plan with a device plan."""
    import logging

    from vidax.errors import Arg, OutOfMemoryError
    from vidax.pipelines.device_plan import device_limit, refusal

    if vae_tiling and (not plan.device_plan.vae_tiling or plan.device_plan.vae_tile_scale > 1):
        # tiles asked for are the reference's: re-planned with them (the line and the stage
        # estimates of the tiles that run, not of the larger ones the plan would choose)
        plan = with_device_plan(plan, plan.asked_offload, vae_tiling=True)
    dp = plan.device_plan
    if not dp.fits:
        msg = refusal(plan, plan.call, dp, device_limit()[1], asked=plan.asked_offload, vae_tiling=vae_tiling)
        if refuse:
            raise OutOfMemoryError(
                msg, " (to run it anyway: ", Arg("memory_check", python="pipe.memory_check = False"), ")"
            )
        logging.getLogger("vidax.pipeline").warning("%s; running it anyway", msg)
    return dataclasses.replace(
        plan,
        memory_checked=True,
        vae_tiling=vae_tiling or dp.vae_tiling,
        vae_tile_scale=1 if vae_tiling else plan.vae_tile_scale,
    )
