"""``load_pipeline``: a diffusers-layout checkpoint folder (or hub id) -> a vidax pipeline.

The pipeline class is the one the registry (:mod:`vidax.registry`) holds for ``_class_name`` in
``model_index.json``; every component folder it names must exist. :class:`Loading` (a base of
:class:`~vidax.pipelines.base.VideoPipeline`) loads a pipeline's components from a plan
(:mod:`vidax.pipelines.plan`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from collections.abc import Collection, Mapping
from typing import Any

import jax.numpy as jnp

from vidax.checkpoint import Checkpoint, CheckpointInfo, resolve_checkpoint
from vidax.errors import InputError
from vidax.nn.inputs import parse_dtype, parsed_dtype
from vidax.nn.precision import parse_matmul_precision
from vidax.pipelines.common import check_task, status
from vidax.pipelines.experts import Experts
from vidax.pipelines.plan import Plan, pipeline_class, read_plan, with_placement
from vidax.pipelines.presets import with_preset
from vidax.pipelines.spec import check_load_options, diffusers_classes
from vidax.pipelines.staging import Staging, plan_pipeline_staging
from vidax.pipelines.weight_formats import check_weights_present, transformer_source, weights_source
from vidax.registry import registry
from vidax.schedulers import scheduler_from_config
from vidax.stats import RunStats
from vidax.weights.component import Request, load_components


def load_pipeline(
    path_or_hub_id: str | os.PathLike,
    dtype: Any = None,
    task: str | None = None,
    mesh: Any = None,
    preset: str | None = None,
    **kwargs,
):
    """Load a pipeline from a diffusers-format folder or hub id.

    Args:
        path_or_hub_id: folder holding ``model_index.json`` and component folders, a hub id, or
            ``"vidax/tiny-random-wan"`` (the embedded tiny checkpoint, built on first use; see
            :mod:`vidax.default_checkpoint`).
        dtype: ``"float32"`` (None: the default) or ``"bfloat16"`` (or the jnp or torch dtype):
            storage and compute dtype of the transformer and text encoder; the reference's fp32
            modules stay fp32. diffusers' spelling ``torch_dtype=`` is taken too.
        task: ``None``: the pipeline named in model_index.json (as diffusers); ``"t2v"`` or
            ``"i2v"``: the pipeline that does this task on the checkpoint (e.g. image-to-video on
            Wan2.2 TI2V-5B, whose model_index.json names ``WanPipeline``).
        mesh: run on a device mesh (:func:`vidax.parallel.mesh.resolve_mesh`: a
            ``jax.sharding.Mesh``, ``"2x2x2"``, ``"dp=2,tp=2,sp=2"``, a dict or a ``(dp, tp, sp)``
            tuple; its product of devices, the first ones where there are more, in one process); None:
            one device.
        preset: a preset of the checkpoint's family (:mod:`vidax.pipelines.presets`, listed by
            ``vidax inspect``), applied in the plan before any weight is read: its sampler / shift
            is the pipeline's scheduler, its call keywords (steps, guidance, sigmas...) the defaults
            of every call, under the keywords a call gives; None: none.
        **kwargs: passed to the pipeline's ``from_pretrained``: ``offload=``
            (:class:`vidax.parallel.offload.OffloadConfig`, see docs/offloading.md), ``stats=``,
            ``offload_experts=``, ``progress=`` (default True: a status line on stderr while the
            weights load; False silences it and the progress bars and status lines of every later
            call that does not give ``progress=``, as diffusers' ``pipe.set_progress_bar_config(
            disable=True)`` does; ``pipe(..., progress=True)`` shows them for one call,
            ``pipe.set_progress_bar_config(disable=False)`` for the calls after), diffusers' ``variant=`` (:func:`with_variant`) and
            ``local_files_only=`` (a hub id from the cache only), ``random_weights=True`` (every
            weight made on the device from the configs, no file read: the folder needs only
            ``model_index.json`` and the component configs, e.g. ``reference_configs/<name>/``;
            its video is noise; :mod:`vidax.weights.random_weights`) and the family's options
            (e.g. ``vae_dtype=``).

    Raises:
        CheckpointError: missing folder, files or tensors. ConfigError: a pipeline class or a
            setting vidax does not implement. InputError: unsupported dtype, a task the
            checkpoint does not do, or ``preset`` not a preset of the checkpoint's family (before
            any weight is read).

    JAX's persistent compilation cache is turned on for the process unless configured
    otherwise (:func:`vidax.compile_cache.setup_compile_cache`; ``VIDAX_COMPILE_CACHE=0`` turns
    it off).
    """
    from vidax.compile_cache import setup_compile_cache
    from vidax.default_checkpoint import resolve_named_checkpoint

    setup_compile_cache()  # once per process; a cache the user configured is kept

    root = resolve_checkpoint(resolve_named_checkpoint(path_or_hub_id), bool(kwargs.pop("local_files_only", False)))
    checkpoint = with_variant(Checkpoint.open(root), kwargs.pop("variant", None))
    cls = pipeline_class(checkpoint)
    if not issubclass(cls, Loading):  # a pipeline that loads itself (LTX-2.5's diffusion decoder)
        if preset is not None:
            raise InputError(f"preset={preset!r}: {cls.__name__} does not generate, it takes no preset; leave it out")
        return (cls if task is None else cls.for_task(checkpoint, task)).from_pretrained(
            checkpoint, dtype=dtype_option(dtype, kwargs), mesh=mesh, **kwargs
        )
    plan = read_plan(
        checkpoint,
        task=task,
        weight_dtype=kwargs.pop("weight_dtype", None),
        transformer=kwargs.pop("transformer", None),
        random_weights=bool(kwargs.pop("random_weights", False)),
    )
    check_weights_present(plan.checkpoint)
    return plan.pipeline.from_pretrained(plan, dtype=dtype, mesh=mesh, preset=preset, **kwargs)


def dtype_option(dtype: Any, options: dict[str, Any]) -> Any:
    """The load's dtype, parsed (:func:`~vidax.nn.inputs.parse_dtype`: ``jnp.float32`` or
    ``jnp.bfloat16``; the one parse of the user's value, what the plan and the loading take):
    ``dtype=``, or diffusers' ``torch_dtype=`` (popped from ``options``; a torch dtype or a name),
    or float32 when neither is given. diffusers' loading keywords that ask for what vidax does
    anyway are popped too (:func:`drop_inert_options`).

    Raises:
        InputError: both are given; a dtype vidax does not run (naming ``dtype=`` or
            ``torch_dtype=`` as given); an inert keyword with a value vidax cannot honour.
    """
    drop_inert_options(options)
    if "torch_dtype" in options:
        torch_dtype = options.pop("torch_dtype")
        if dtype is not None:
            raise InputError(
                f"dtype={dtype!r} and torch_dtype={torch_dtype!r} are the same setting "
                "(torch_dtype= is diffusers' spelling); give one"
            )
        return parse_dtype(torch_dtype, "torch_dtype")  # refused as the keyword given
    return jnp.float32 if dtype is None else parse_dtype(dtype)


def with_variant(checkpoint: Checkpoint, variant: Any) -> Checkpoint:
    """``checkpoint``, its component folders read from ``variant``'s weights files where they
    have them (diffusers' ``variant="fp16"``; None: the plain files; :attr:`Checkpoint.variant`).

    Raises:
        InputError: ``variant`` is not a name (a string without dots or slashes).
    """
    if variant is not None and (not isinstance(variant, str) or not variant or set(variant) & set("./\\")):
        raise InputError(f"variant={variant!r} is not a weights variant's name (e.g. 'fp16', 'bf16')")
    return dataclasses.replace(checkpoint, variant=variant)


def drop_inert_options(options: dict[str, Any]) -> None:
    """Pop diffusers' ``from_pretrained`` keywords that change nothing in vidax:
    ``use_safetensors=True`` (vidax reads safetensors only), ``low_cpu_mem_usage`` (vidax
    memory-maps the files and reads each tensor once).

    Raises:
        InputError: ``use_safetensors=False`` (the ``.bin`` pickles need torch to read).
    """
    if options.pop("use_safetensors", None) is False:
        raise InputError(
            "use_safetensors=False: vidax reads safetensors weights only (a .bin file is a torch pickle); "
            "convert with diffusers' save_pretrained(..., safe_serialization=True)"
        )
    options.pop("low_cpu_mem_usage", None)


def check_pipeline_class(cls: type, checkpoint: Checkpoint, given: Any = None) -> None:
    """Refuse ``cls.from_pretrained`` of a checkpoint whose model_index.json names a pipeline of
    another family (``vidax.WanPipeline.from_pretrained`` of a CogVideoX folder), before any weight
    is read. A class of the same family for another task is the checkpoint's own
    (``WanImageToVideoPipeline`` of Wan2.2 TI2V-5B, whose model_index.json names ``WanPipeline``,
    as diffusers loads it): :func:`~vidax.pipelines.plan.read_plan` checks the task. ``given``: the
    path or name as the caller gave it (``"vidax/tiny-random-wan"``), named in the error (None:
    the checkpoint's folder).

    Raises:
        InputError: another family's checkpoint, naming both classes and the calls that load it.
        ConfigError: model_index.json names a pipeline vidax does not run.
    """
    from vidax.pipelines.presets import family_of

    named = checkpoint.pipeline_class_name
    own = pipeline_class(checkpoint)
    if family_of(own) == family_of(cls):
        return
    ours = diffusers_classes(cls)[0]
    raise InputError(
        f"{ours}.from_pretrained({checkpoint.root if given is None else given!r}): its model_index.json names {named}, not a {ours} "
        f"checkpoint; load it with vidax.{named}.from_pretrained(path) or vidax.load_pipeline(path)"
    )


#: The keywords of :meth:`Loading.from_pretrained` that say which weights are read (:func:`plan_of`).
WEIGHT_FORMAT = ("variant", "weight_dtype", "transformer", "random_weights")


def plan_of(
    cls: type,
    path: Any,
    variant: Any = None,
    weight_dtype: Any = None,
    transformer: Any = None,
    random_weights: Any = None,
    given: Any = None,
) -> Plan:
    """The plan of ``path`` (a folder or an opened :class:`Checkpoint`) for the pipeline class
    ``cls``, read with its weight format (:func:`with_variant`, :func:`read_plan`); ``path`` itself
    where it is a :class:`Plan` already (its weight format applied there).

    Args:
        weight_dtype: None, ``"int8"`` or ``"float8_e4m3fn"`` (``"fp8"``): the transformers'
            Linear kernels (not those kept float32) stored 8-bit with per-output-channel
            scales, quantized as they are read (:mod:`vidax.nn.quant`).
        transformer: a single-file transformer checkpoint (``.gguf``, fp8-scaled or plain
            ``.safetensors`` in the original repository's layout) read instead of the
            folder's ``transformer/`` weights (:mod:`vidax.weights.single_file`).
        variant: diffusers' ``variant="fp16"``: the folders' ``<name>.fp16.safetensors`` (or
            shards) are read where they have them (:func:`with_variant`); None: the plain files.
        random_weights: make every weight on the device from the configs instead of reading
            files (:func:`vidax.load_pipeline`); with a plan, give it to ``read_plan``.
        given: the path or name as the caller gave it, named in :func:`check_pipeline_class`'s error.

    Raises:
        InputError: a weight format given with a plan; as :func:`check_pipeline_class` and
            :func:`read_plan`.
    """
    if isinstance(path, Plan):
        if weight_dtype is not None or transformer is not None or variant is not None or random_weights:
            raise InputError(
                "weight_dtype=, transformer=, variant= and random_weights= go to read_plan, which applies the "
                "weight format; "
                "from_pretrained takes a plan as read_plan gives it"
            )
        return path
    checkpoint = with_variant(Checkpoint.open(path), variant)
    check_pipeline_class(cls, checkpoint, given)
    plan = read_plan(
        checkpoint,
        pipeline=cls,
        weight_dtype=weight_dtype,
        transformer=transformer,
        random_weights=bool(random_weights),
    )
    check_weights_present(plan.checkpoint)
    return plan


def from_pipe(cls: type, pipe: Any) -> Any:
    """diffusers' ``Pipeline.from_pipe(pipe)``: a ``cls`` over ``pipe``'s loaded components, no
    weight read again, for another task of the same checkpoint
    (``from_pipe(SkyReelsV2DiffusionForcingVideoToVideoPipeline, df_pipe)``). The new pipeline
    shares ``pipe``'s modules, scheduler, staging, LoRA adapters, preset and step cache setting
    (each as set now), reads its configs as ``cls`` does (its own defaults) and compiles its own
    steps (a compiled step calls the hooks of the pipeline that traced it). ``cls`` is to load
    the components ``pipe`` has (true of the classes of one checkpoint's tasks).

    Raises:
        InputError: ``pipe`` is of another family, or its checkpoint does not do ``cls``'s task.
    """
    from vidax.pipelines.denoiser import Denoiser
    from vidax.pipelines.presets import family_of

    if family_of(type(pipe)) != family_of(cls):
        raise InputError(
            f"from_pipe({cls.__name__}, pipe): the pipeline is a {type(pipe).__name__}, of another family; "
            f"load {pipe.root} with vidax.load_pipeline"
        )
    own = cls.family.read_checkpoint.__func__ is not type(pipe).family.read_checkpoint.__func__
    info = cls.family.read_checkpoint(pipe.checkpoint) if own else pipe.info
    check_task(pipe.root, cls.family.task, info.tasks, info.variant)
    new = cls.__new__(cls)
    new.__dict__.update(pipe.__dict__)
    new.info, new.defaults, new._interrupt = info, info.defaults, False
    new.hooks = cls.family(new)
    new.capabilities = cls.capabilities_of(info)
    new.denoiser = Denoiser(new.experts, new.mesh)
    return new


def load_component(
    info: CheckpointInfo,
    name: str,
    *,
    dtype: Any = None,
    mesh: Any = None,
    offload: Any = None,
    staging: Staging | None = None,
) -> Any:
    """Component ``name`` of the checkpoint, by the class model_index.json gives it: a
    scheduler built from its config, any other loaded alone by :func:`load_weighted`."""
    ckpt = info.checkpoint
    spec = registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
    if spec.kind == "scheduler":
        return scheduler_from_config(ckpt.config(name), source=ckpt.config_file(name))
    options = dict(dtype=dtype, mesh=mesh, offload=offload, staging=staging)
    return load_weighted(info, {name: options})[name]


def load_weighted(info: CheckpointInfo, components: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The components with weights named in ``components``, by the classes model_index.json
    gives them, through the one component loader (:func:`vidax.weights.component.load_components`):
    every checkpoint is checked against its model from its config and safetensors headers
    (heads against the mesh, file sizes, the 1:1 key plan, shapes, dtypes) before the first
    weight of any is read; then each is read, in the order given.

    Args:
        info: the checkpoint's configs.
        components: name -> options: ``dtype``, ``mesh``, ``offload`` (blocks streamed),
            ``staging`` (a :class:`Staging`: in host memory when it stages the component),
            ``then`` (called with the module once it is read); None values are left out.

    Returns:
        name -> module.

    Raises:
        ConfigError: a class vidax does not implement. CheckpointError: missing files or
        tensors. InputError: a dtype not supported, heads that do not split over the mesh.
    """
    ckpt = info.checkpoint
    requests = {}
    for name, options in components.items():
        options = {k: v for k, v in options.items() if v is not None}
        spec = registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
        staging, then = options.pop("staging", None), options.pop("then", None)
        if staging is not None and staging.is_staged(name):
            options["memory_kind"] = staging.kind
        if staging is not None and staging.stream_config(name) is not None:  # its layers read at each use
            options["offload"] = staging.stream_config(name)
        if spec.kind == "transformer" and ckpt.weights is not None:
            options["weights"] = ckpt.weights
        if name in ckpt.files:
            options["file"] = ckpt.files[name]
        if ckpt.random_weights:
            options["random_weights"] = True
        if ckpt.variant_of(name) is not None:
            options["variant"] = ckpt.variant_of(name)
        options["config"] = ckpt.typed_config(name, spec.config_class())
        requests[name] = Request(spec, ckpt.folder(name), options, then)
    return load_components(requests)


class Loading:
    """How a pipeline loads its components; a base of :class:`~vidax.pipelines.base.VideoPipeline`."""

    # ================================================================== loading
    @classmethod
    def from_pretrained(
        cls,
        path: Any,
        dtype: Any = None,
        *,
        mesh: Any = None,
        offload: Any = None,
        stats: RunStats | None = None,
        offload_experts: bool = True,
        progress: bool = True,
        matmul_precision: str | None = None,
        preset: str | None = None,
        micro_batch: int | None = None,
        **options: Any,
    ):
        """Load every component of a diffusers-layout folder: ``vidax.WanPipeline.from_pretrained(path)``
        (any diffusers pipeline class name vidax runs, :func:`vidax.__getattr__`) is
        ``vidax.load_pipeline(path)`` with the class checked against model_index.json first
        (:func:`check_pipeline_class`).

        Args:
            path: the folder (or hub id, or an opened :class:`Checkpoint`), or a
                :class:`~vidax.pipelines.plan.Plan` of :func:`~vidax.pipelines.plan.read_plan` for
                this class (its configs read, its weight format applied there: then
                ``weight_dtype`` and ``transformer`` are not given).
            dtype: transformer and text-encoder dtype, ``"float32"`` (None: the default) or
                ``"bfloat16"``; diffusers' ``torch_dtype=`` is taken too (:func:`dtype_option`).
            mesh: ``(data, tensor, sequence)`` mesh (anything
                :func:`~vidax.parallel.mesh.resolve_mesh` takes) or None (one device).
            offload: weights in host memory (:func:`vidax.parallel.offload.resolve_offload`):
                transformer blocks streamed each step, text encoder / VAE staged
                (``docs/offloading.md``).
            stats: receives the load time. offload_experts: with two experts, keep the one not in use in host memory.
            progress: show a status line on stderr while the weights load; False also silences
                every later call that does not give ``progress=`` (:func:`vidax.load_pipeline`).
            matmul_precision: ``"highest"`` (float32 products in float32, as torch), ``"high"``
                or ``"default"`` (the backend's fastest); None (default): ``"highest"``, the float32
                VAE's decode of a bfloat16 run ``"high"``; see :mod:`vidax.nn.precision`.
            preset: a preset of the family (:func:`vidax.load_pipeline`), applied to the plan
                before any weight is read.
            micro_batch: rows of the denoising step's batch (prompts x videos x CFG passes) each
                transformer layer runs at a time; None (default): the whole batch, or parts of it
                where the device plan finds only those fit (:mod:`vidax.pipelines.device_plan`).
                Parts divide a layer's activations (the CFG passes one after another, as
                diffusers' Wan pipelines run them) at the cost of smaller matmuls.
            **options: the family's loading options (e.g. ``vae_dtype``), and the weight format
                (:data:`WEIGHT_FORMAT`: ``weight_dtype``, ``transformer``, ``variant``,
                ``random_weights``; :func:`plan_of`).

        Raises:
            CheckpointError, ConfigError, InputError (see :func:`vidax.load_pipeline`); InputError
                also where model_index.json names a pipeline of another family (one line naming both).
            SetupError: ``JAX_PLATFORMS`` names a backend JAX cannot start here; ``VIDAX_CPU_MATMUL``
                is not a CPU matmul (:func:`vidax.nn.kernels.cpu.check_matmul_setting`).
        """
        from vidax.compile_cache import setup_compile_cache
        from vidax.default_checkpoint import resolve_named_checkpoint

        t0 = time.perf_counter()
        setup_compile_cache()  # once per process (load_pipeline's), for vidax.WanPipeline.from_pretrained too
        dtype = dtype_option(dtype, options)
        weight_format = {k: options.pop(k, None) for k in WEIGHT_FORMAT}
        given = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None  # named in errors as given
        if isinstance(path, (str, os.PathLike)):  # a hub id: from the cache only with local_files_only=True
            path = resolve_checkpoint(resolve_named_checkpoint(path), bool(options.pop("local_files_only", False)))
        check_load_options(cls, options)
        parse_matmul_precision(matmul_precision)
        plan = plan_of(cls, path, given=given, **weight_format)
        plan = with_preset(plan, preset)  # InputError for a preset not of the family, before any weight
        plan = with_placement(
            plan,
            dtype=dtype,
            mesh=mesh,
            offload=offload,
            matmul_precision=matmul_precision,
            offload_experts=offload_experts,
            micro_batch=micro_batch,
            **options,
        )
        return cls.from_plan(plan, stats=stats, progress=progress, t0=t0)

    @classmethod
    def from_plan(cls, plan: Plan, *, stats: RunStats | None = None, progress: bool = True, t0: float | None = None):
        """Load the weights ``plan`` names (:mod:`vidax.pipelines.plan`, placed with
        :func:`~vidax.pipelines.plan.with_placement`) into the pipeline it plans: ``cls`` or a
        subclass of it (``plan.pipeline``); ``stats`` receives the load time (from ``t0``, default
        now), ``progress`` shows a status line on stderr meanwhile (False: and none in the calls
        that do not give ``progress=``). A plan whose memory was checked
        (:func:`~vidax.pipelines.plan.with_memory`) gives a pipeline that does not check it again,
        its VAE tiled where the plan says so."""
        t0 = time.perf_counter() if t0 is None else t0
        pipeline, info, staging = plan.pipeline, plan.info, plan.staging
        if not issubclass(pipeline, cls):
            raise TypeError(f"{cls.__name__}.from_plan: the plan is for {pipeline.__name__}")
        if plan.device_plan is not None:  # what vidax chose for the device's memory, in one line
            default = "" if plan.call is not None else " (for the checkpoint's default call)"
            print(plan.device_plan.line() + default, file=sys.stderr)
        with status(f"loading {plan.checkpoint.root}", progress):
            modules = pipeline.family.load_components(
                info,
                dtype=plan.dtype,
                mesh=plan.mesh,
                offload=plan.offload,
                staging=staging,
                offload_experts=plan.offload_experts,
                **plan.options,
            )
        staging.attach(**{n: modules.get(n) for n in pipeline.family.stageable})
        load_s = time.perf_counter() - t0
        if stats is not None:
            stats.load_s += load_s
            stats.sample_memory()  # the weights in place: host memory as the load leaves it
        pipe = pipeline(
            info,
            modules,
            dtype=plan.dtype,
            mesh=plan.mesh,
            staging=staging,
            offload=plan.offload,
            offload_experts=plan.offload_experts,
            load_s=load_s,
            matmul_precision=plan.matmul_precision,
        )
        if plan.device_plan is not None and plan.call is not None:  # estimates the summary sets beside the measures
            pipe.device_plan = (plan.call, plan.device_plan.stages)
        if plan.memory_checked:
            pipe.memory_check = None  # checked (or warned about) with the plan, the weights counted
        if plan.vae_tiling:
            pipe.vae.enable_tiled_decode(scale=plan.vae_tile_scale)
        if plan.micro_batch is not None:
            for module in pipe.experts.modules:
                module.set_micro_batch(plan.micro_batch)
        if plan.scheduler is not None:  # the preset's sampler / shift (vidax.pipelines.presets)
            pipe.scheduler = plan.scheduler
        pipe.preset = plan.preset
        pipe.progress_default = bool(progress)  # progress=False: later calls too, as set_progress_bar_config
        if plan.preset is not None and plan.preset.cache is not None:  # the preset's step cache
            pipe.enable_cache(plan.preset.cache_config(pipeline, info.defaults.num_inference_steps))
            pipe._preset_cache = pipe.cache_config
        return pipe


def plan_staging(
    family: type,
    info: CheckpointInfo,
    dtype: Any,
    vae_dtype: Any,
    offload: Any,
    mesh: Any,
    text_encoder_dtype: Any = None,
) -> Staging:
    """Which of the stageable components of ``family`` (a
    :class:`~vidax.pipelines.hooks.FamilyHooks` class) wait in host memory
    (:func:`plan_pipeline_staging`), each counted at the dtype it is loaded in: the default of
    ``FamilyHooks.plan_staging``."""
    ckpt = info.checkpoint
    spec = registry().component(ckpt.class_of(info.transformers[0]), "transformer", source=ckpt.source)
    # a folder's reader is opened only where the staging reads headers (a device with a memory
    # limit: a folder of configs alone plans with no limit); a single file is opened (its
    # layout and family checked) now, before any weight is read
    name = info.transformers[0]
    eager = ckpt.random_weights or name in ckpt.files
    paths = {"transformer": transformer_source(ckpt, name, spec) if eager else functools.partial(ckpt.reader, name)}
    paths.update(
        {
            n: functools.partial(weights_source, ckpt, n) if ckpt.random_weights else functools.partial(ckpt.reader, n)
            for n in family.stageable
            if ckpt.has(n)
        }
    )
    dtype = parsed_dtype(dtype, "plan_staging")
    return plan_pipeline_staging(
        paths,
        dtype,
        parsed_dtype(vae_dtype, "plan_staging"),
        offload,
        mesh,
        blocks_prefixes=spec.block_stacks,
        weights=ckpt.weights,
        text_encoder_dtype=dtype if text_encoder_dtype is None else parsed_dtype(text_encoder_dtype, "plan_staging"),
        stageable=tuple(family.stageable),
    )


@dataclasses.dataclass(frozen=True)
class Weighted:
    """How a family loads one component with weights: a row of its declared component table
    (:class:`ComponentTable`).

    Attributes:
        dtype: the loading keyword giving its dtype: ``"dtype"`` (the pipeline's), a family's
            option (``"vae_dtype"``, ``"text_encoder_dtype"``); or a dtype of its own
            (``jnp.float32``); or None (the component's own, as its registry entry loads it).
        none_is_dtype: the option's None means the pipeline's ``dtype`` (HunyuanVideo's
            ``text_encoder_dtype``, whose ``load_components`` default is None); otherwise None is
            refused at the front door, naming the keyword
            (:func:`~vidax.pipelines.plan.parsed_dtype_options`).
        mesh: placed on the device mesh (sharded by its rules).
        offload: its blocks streamed from host memory where the load asks (``offload=``).
        staged: it may wait in host memory between uses (the load's staging).
        expert_to_host: a second expert, moved to host memory as soon as it is read
            (:meth:`Experts.move_to_host <vidax.pipelines.experts.Experts.move_to_host>`) where
            the load's ``offload_experts`` is true (its default), so the device never holds both.
    """

    dtype: Any = "dtype"
    none_is_dtype: bool = False
    mesh: bool = False
    offload: bool = False
    staged: bool = False
    expert_to_host: bool = False


@dataclasses.dataclass(frozen=True)
class ComponentTable:
    """A family's components as its ``load_components`` loads them, declared.

    Attributes:
        files: name -> the class built from the checkpoint's folder of that name (a tokenizer).
        weighted: name -> :class:`Weighted`, read in this order (every checkpoint checked against
            its model before the first weight is read, :func:`load_weighted`).

    The scheduler is built from its config (every family has one).
    """

    files: Mapping[str, Any]
    weighted: Mapping[str, Weighted]

    def load(
        self,
        info: CheckpointInfo,
        *,
        dtype: Any,
        mesh: Any,
        offload: Any,
        staging: Staging,
        skip: Collection[str] = (),
        **options: Any,
    ) -> dict[str, Any]:
        """name -> module of every component of the table but those in ``skip`` (weighted rows the
        checkpoint does not have; ``options``: the family's loading keywords the rows' ``dtype``
        names, e.g. ``vae_dtype``, parsed at the front door:
        :func:`~vidax.pipelines.plan.parsed_dtype_options`).

        Raises:
            InputError: see :func:`load_weighted`.
            TypeError: ``dtype`` or a dtype option not parsed (a name, or None where the row does
                not mean the pipeline's dtype by it: :func:`~vidax.nn.inputs.parsed_dtype`).
        """
        dtype = parsed_dtype(dtype, "ComponentTable.load")
        ckpt = info.checkpoint
        modules: dict[str, Any] = {name: make(ckpt.folder(name)) for name, make in self.files.items()}
        modules["scheduler"] = load_component(info, "scheduler")
        requests = {}
        for name, row in self.weighted.items():
            if name in skip:
                continue
            if row.dtype is None or row.dtype == "dtype":
                row_dtype = None if row.dtype is None else dtype
            elif row.dtype in options:
                value = options[row.dtype]
                row_dtype = parsed_dtype(dtype if value is None and row.none_is_dtype else value, "ComponentTable.load")
            else:  # the row's own dtype; an option the family did not pass is a TypeError here
                row_dtype = parsed_dtype(row.dtype, "ComponentTable.load")
            requests[name] = dict(
                dtype=row_dtype,
                mesh=mesh if row.mesh else None,
                offload=offload if row.offload else None,
                staging=staging if row.staged else None,
            )
            if row.expert_to_host and options.get("offload_experts", True):
                requests[name]["then"] = Experts.move_to_host
        return modules | load_weighted(info, requests)


#: The rows most families share: a text encoder in the pipeline's dtype on the mesh, staged; the
#: denoising transformer on the mesh, its blocks streamed where asked; the VAE in ``vae_dtype``, staged.
TEXT_ENCODER = Weighted(mesh=True, staged=True)
TRANSFORMER = Weighted(mesh=True, offload=True)
VAE = Weighted(dtype="vae_dtype", staged=True)
