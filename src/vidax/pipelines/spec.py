"""What a family is for one checkpoint, apart from what a loaded pipeline does: :class:`FamilySpec`.

A :class:`FamilySpec` is frozen and built from the checkpoint's configs alone (``model_index.json``
and the component configs; no weight is read): the diffusers pipeline classes it answers to, its
components (each with its registry entry, whether it has weights and whether it may wait in host
memory), its call keywords (shared, latent streams, the family's own, precomputed prompt
encodings), the checkpoint's call defaults and limits, its latent streams and sound, its
presets, and the configs-only functions of a call: :meth:`FamilySpec.check_call` (raw keywords
-> checked :class:`~vidax.pipelines.call.Call`), :meth:`FamilySpec.latent_shapes`,
:meth:`FamilySpec.model_size` and :meth:`FamilySpec.memory_estimate` (the memory model;
:mod:`vidax.pipelines.memory`, :mod:`vidax.pipelines.device_plan`), :meth:`FamilySpec.plan_staging`
(:mod:`vidax.pipelines.staging`). The :class:`~vidax.pipelines.plan.Plan` holds it
(``plan.spec``): every check of a load and a call before weights runs from it.

A family declares what it is in one place, its hooks class (the pipeline class's ``family``,
:class:`~vidax.pipelines.hooks.FamilyHooks`): the class attributes (``task``, ``call_options``,
``unsupported_call_args``, ``latent_streams``, ``audio_stream``, ``stageable``,
``scheduler_classes``, ``prompt_embeds_args``) and the class-level hooks (``read_checkpoint``,
``check_call``, ``resolve_num_frames``, ``check_family_call``, ``latent_shape(s)``,
``size_limits``, ``model_size``, ``text_token_limit``, ``check_schedule``); :meth:`FamilySpec.of`
reads them once.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any

from vidax.checkpoint import CallDefaults, CheckpointInfo
from vidax.errors import ConfigError, InputError
from vidax.pipelines.call import Call
from vidax.pipelines.options import OBJECT, CallOption, untaken_shared_args
from vidax.registry import registry
from vidax.schedulers import scheduler_from_config

#: The config fields of a transformer's attention head counts (each splits over tensor x sequence).
HEAD_FIELDS = ("num_attention_heads", "audio_num_attention_heads")

#: The loading keywords every pipeline takes (:meth:`~vidax.pipelines.loading.Loading.from_pretrained`).
SHARED_LOAD_OPTIONS = (
    "dtype",
    "mesh",
    "offload",
    "stats",
    "offload_experts",
    "progress",
    "matmul_precision",
    "preset",
    "micro_batch",
)


@dataclasses.dataclass(frozen=True)
class ComponentEntry:
    """One component of the checkpoint, as the family loads it.

    Attributes:
        name: its ``model_index.json`` key (``"transformer"``, ``"text_encoder"``, ...).
        class_name: its class there (the registry key).
        kind: the registry's kind (:data:`vidax.registry.KINDS`); None for a class vidax does not
            register (loaded by the family itself, e.g. a tokenizer it reads as files).
        weighted: it has weights, loaded by the one component loader
            (:func:`vidax.weights.component.plan_component`).
        denoises: one of the denoising transformers (experts in order).
        stageable: it may wait in host memory between uses (the pipeline's ``stageable``).
    """

    name: str
    class_name: str
    kind: str | None
    weighted: bool
    denoises: bool
    stageable: bool


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """A family's description for one checkpoint, built from its configs (:meth:`of`).

    Attributes:
        pipeline: the vidax pipeline class that runs the checkpoint (its runtime side).
        info: the checkpoint's :class:`~vidax.checkpoint.CheckpointInfo` (``pipeline.family.read_checkpoint``).
        family: the registering family's name (``"wan"``, its folder's).
        task: the task the class is for (``"t2v"``, ``"i2v"``).
        diffusers_classes: the diffusers pipeline classes (``model_index.json`` ``_class_name``)
            registered to run as :attr:`pipeline`.
        components: :class:`ComponentEntry` of each component ``model_index.json`` names.
        options: every call keyword, declared (:class:`~vidax.pipelines.options.CallOption`):
            the shared ones the family takes, the further latent streams', the family's own,
            the precomputed prompt encodings'.
        unsupported_call_args: the shared keywords the class does not take (:func:`~vidax.pipelines.options.untaken_shared_args`).
        defaults: the checkpoint's :class:`~vidax.checkpoint.CallDefaults`.
        latent_streams: the call keywords of the latent streams denoised together, the video's first.
        audio_stream: the stream the sound is decoded from (None: no sound stream).
        stageable: components staged in host memory when device memory is short, in order.
        scheduler_classes: the scheduler classes the family's loop runs (None: any vidax implements).
        prompt_embeds_args: diffusers' keywords of a precomputed prompt encoding.
        attention_heads: ``(config file, heads)`` of each head count a mesh must split.
        presets: the names of the family's presets (:mod:`vidax.pipelines.presets`).
        load_options: the family's loading keywords beyond the shared ones (``vae_dtype``, ...).

    Also, read on first use: :attr:`size_limits`, :attr:`text_token_limit`, :attr:`makes_audio`,
    :attr:`capabilities`.
    """

    pipeline: type
    info: CheckpointInfo
    family: str
    task: str
    diffusers_classes: tuple[str, ...]
    components: tuple[ComponentEntry, ...]
    options: tuple[CallOption, ...]
    unsupported_call_args: tuple[str, ...]
    defaults: CallDefaults
    latent_streams: tuple[str, ...]
    audio_stream: str | None
    stageable: tuple[str, ...]
    scheduler_classes: tuple[str, ...] | None
    prompt_embeds_args: tuple[str, ...]
    attention_heads: tuple[tuple[str, int], ...]
    presets: tuple[str, ...]
    load_options: tuple[str, ...]

    @classmethod
    def of(cls, pipeline: type, info: CheckpointInfo) -> FamilySpec:
        """The spec of ``pipeline`` (a :class:`~vidax.pipelines.base.VideoPipeline` class) for the
        checkpoint ``info`` describes; reads configs only.

        Raises:
            ConfigError: a transformer class the registry does not hold.
        """
        from vidax.pipelines.presets import family_of, presets_of

        target = f"{pipeline.__module__}:{pipeline.__qualname__}"
        registered = (p.family for p in registry().pipelines(generating_only=False) if p.target == target)
        family = next(registered, None) or family_of(pipeline)
        return cls(
            pipeline=pipeline,
            info=info,
            family=family,
            task=pipeline.family.task,
            diffusers_classes=diffusers_classes(pipeline),
            components=_components(pipeline, info),
            options=tuple(pipeline.options()),
            unsupported_call_args=untaken_shared_args(pipeline),
            defaults=info.defaults,
            latent_streams=tuple(pipeline.family.latent_streams),
            audio_stream=pipeline.family.audio_stream,
            stageable=tuple(pipeline.family.stageable),
            scheduler_classes=pipeline.family.scheduler_classes,
            prompt_embeds_args=tuple(pipeline.family.prompt_embeds_args),
            attention_heads=tuple(attention_heads(info)),
            presets=tuple(p.name for p in presets_of(pipeline)),
            load_options=load_options(pipeline),
        )

    # The limits below read more than the model configs (a tokenizer's, a RoPE table's): each is
    # read when first asked, so that a load alone reads no more than it did before a spec existed.
    @functools.cached_property
    def size_limits(self) -> Any:
        """The largest height / width / num_frames the model represents
        (:class:`~vidax.pipelines.call_checks.SizeLimits`)."""
        return self.pipeline.family.size_limits(self.info)

    @functools.cached_property
    def text_token_limit(self) -> tuple[int, str] | None:
        """``(largest max_sequence_length, why)`` the text encoding takes, or None: no limit."""
        return self.pipeline.family.text_token_limit(self.info)

    @functools.cached_property
    def makes_audio(self) -> bool:
        """The checkpoint's model makes sound."""
        return bool(self.pipeline.family.makes_audio(self.info))

    @functools.cached_property
    def capabilities(self) -> Any:
        """What the pipeline accepts (:class:`~vidax.pipelines.call_checks.Capabilities`)."""
        return self.pipeline.capabilities_of(self.info)

    # ------------------------------------------------------------------ the call, configs only
    @property
    def call_args(self) -> tuple[str, ...]:
        """Every keyword the call takes (the names of :attr:`options`)."""
        return tuple(o.name for o in self.options)

    def check_call(self, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any) -> Call:
        """The call's keywords checked against the configs, the defaults filled (the family's
        ``check_call``); no weight is read.

        Raises:
            InputError: an unknown keyword or an invalid value (naming it, its value and what is valid).
        """
        return self.pipeline.check_call(self.info, prompt, negative_prompt, **kwargs)

    def default_call(self) -> Call | None:
        """The checkpoint's default call (its own size, frames and steps, a one-word prompt);
        None where a call needs inputs the defaults lack (an image, a video)."""
        from vidax.errors import VidaxError

        try:
            return self.check_call("a video")
        except VidaxError:
            return None

    def latent_shapes(self, call: Call) -> dict[str, tuple[int, ...]]:
        """The initial noise's shape of each latent stream for ``call`` (keyword -> diffusers layout)."""
        return self.pipeline.family.latent_shapes(self.info, call)

    def silent_call(self, call: Call) -> tuple | None:
        """Why ``call`` makes no sound (message parts), None where it makes sound."""
        return self.pipeline.family.silent_call(self.info, call)

    # ------------------------------------------------------------------ the memory model
    def model_size(self, call: Call) -> Any:
        """The transformer's numbers for the memory model (:class:`~vidax.pipelines.memory.ModelSize`), or None."""
        return self.pipeline.family.model_size(self.info, call)

    def memory_estimate(self, call: Call, **kwargs: Any) -> Any:
        """The call's peak memory (:func:`~vidax.pipelines.memory.memory_estimate`), or None."""
        from vidax.pipelines.memory import memory_estimate

        return memory_estimate(self.pipeline, self.info, call, **kwargs)

    def check_memory(self, call: Call, **kwargs: Any) -> Any:
        """:func:`~vidax.pipelines.memory.check_memory` of ``call``.

        Raises:
            OutOfMemoryError: the call does not fit (and ``refuse``).
        """
        from vidax.pipelines.memory import check_memory

        return check_memory(self.pipeline, self.info, call, **kwargs)

    # ------------------------------------------------------------------ the load, configs only
    def check_load_options(self, options: Mapping[str, Any]) -> None:
        """Raise InputError for a loading keyword the family does not take (:func:`check_load_options`)."""
        check_load_options(self.pipeline, options)

    def check_checkpoint(self, mesh: Any = None) -> None:
        """The checks of a checkpoint that need no call and no weights: its scheduler (the
        pipeline's :func:`read_scheduler`) and, on ``mesh``, that each transformer's attention heads
        split over ``tensor x sequence``. ``vidax generate`` runs them with the mesh of
        ``--dp/--tp/--sp`` before loading.

        Raises:
            ConfigError: a scheduler the family does not run or a setting it does not implement.
                InputError: heads that do not split (the message lists the valid ``(tp, sp)``).
        """
        from vidax.parallel.mesh import check_heads

        read_scheduler(self.pipeline.family, self.info)
        for what, heads in self.attention_heads:
            check_heads(mesh, heads, what)

    def plan_staging(self, dtype: Any, vae_dtype: Any, offload: Any, mesh: Any, text_encoder_dtype: Any = None) -> Any:
        """Which stageable components wait in host memory (:mod:`vidax.pipelines.staging`)."""
        return self.pipeline.family.plan_staging(self.info, dtype, vae_dtype, offload, mesh, text_encoder_dtype)


def _components(pipeline: type, info: CheckpointInfo) -> tuple[ComponentEntry, ...]:
    """The :class:`ComponentEntry` of each component ``model_index.json`` names."""
    ckpt = info.checkpoint
    by_class = {c.class_name: c for c in registry().components()}
    out = []
    for name in ckpt.index:
        if name.startswith("_") or not ckpt.has(name) or ckpt.class_of(name) is None:
            continue
        entry = by_class.get(ckpt.class_of(name))
        out.append(
            ComponentEntry(
                name=name,
                class_name=ckpt.class_of(name),
                kind=None if entry is None else entry.kind,
                weighted=entry is not None and (entry.model is not None or entry.loader is not None),
                denoises=name in info.transformers,
                stageable=name in pipeline.family.stageable,
            )
        )
    return tuple(out)


# ---------------------------------------------------------------------- a family's declarations
def read_scheduler(family: type, info: CheckpointInfo) -> Any:
    """The checkpoint's scheduler for a family's hooks class ``family``
    (:class:`~vidax.pipelines.hooks.FamilyHooks`, a pipeline class's ``family``), built from its
    config (every setting checked), or None when the checkpoint has no ``scheduler`` component.

    Raises:
        ConfigError: a scheduler class vidax does not implement or the family does not run
            (``family.scheduler_classes``), or a setting it does not implement (e.g. a
            ``prediction_type``).
    """
    ckpt = info.checkpoint
    if not ckpt.has("scheduler"):
        return None
    config, file = ckpt.config("scheduler"), ckpt.config_file("scheduler")
    name = config.get("_class_name")
    allowed = family.scheduler_classes
    if (
        allowed is not None
        and name in {s.class_name for s in registry().components("scheduler")}
        and name not in allowed
    ):
        raise ConfigError(f"{file}: _class_name={name!r}; {family.pipeline_name} runs {' or '.join(allowed)}")
    return scheduler_from_config(config, source=file)


def diffusers_classes(pipeline: type) -> tuple[str, ...]:
    """The diffusers pipeline classes (model_index.json's ``_class_name``) registered to run as
    ``pipeline`` (its own name where none is)."""
    target = f"{pipeline.__module__}:{pipeline.__name__}"
    return tuple(p.class_name for p in registry().pipelines() if p.target == target) or (pipeline.__name__,)


def embeds_options(pipeline: type) -> tuple[CallOption, ...]:
    """The declarations of ``pipeline.family.prompt_embeds_args`` and their ``negative_`` twins."""
    return tuple(
        CallOption(
            prefix + n,
            OBJECT,
            f"diffusers' {prefix + n}: the {what} prompt's precomputed "
            "encoding (encode_prompt_embeds makes it), instead of the text.",
        )
        for prefix, what in (("", "positive"), ("negative_", "negative"))
        for n in pipeline.family.prompt_embeds_args
    )


def attention_heads(info: CheckpointInfo) -> list[tuple[str, int]]:
    """``(config file, heads)`` of each attention head count the transformers' configs declare
    (``num_attention_heads``; LTX-2's ``audio_num_attention_heads`` too): what ``tensor x
    sequence`` must divide. From the configs only: the mesh errors list the valid sizes for them."""
    ckpt = info.checkpoint
    out = []
    for name in info.transformers:
        spec = registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
        config = ckpt.typed_config(name, spec.config_class())
        out += [
            (ckpt.config_file(name) + ("" if field == HEAD_FIELDS[0] else f" ({field})"), getattr(config, field))
            for field in HEAD_FIELDS
            if getattr(config, field, None) is not None
        ]
    return out


def load_options(pipeline: type) -> tuple[str, ...]:
    """The family's loading options ``from_pretrained`` passes on (the keywords of its
    ``load_components`` beyond the shared ones, e.g. ``vae_dtype``)."""
    shared = {"cls", "info", "dtype", "mesh", "offload", "staging", "offload_experts"}
    params = inspect.signature(pipeline.family.load_components).parameters.values()
    return tuple(p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name not in shared)


def check_load_options(pipeline: type, options: Mapping[str, Any]) -> None:
    """Raise InputError for a loading keyword ``pipeline`` does not take (a family whose
    ``load_components`` takes ``**options`` checks its own)."""
    params = inspect.signature(pipeline.family.load_components).parameters.values()
    unknown = sorted(set(options) - set(load_options(pipeline)))
    if not unknown or any(p.kind == p.VAR_KEYWORD for p in params):
        return
    takes = ", ".join(f"{n}=" for n in (*SHARED_LOAD_OPTIONS, *load_options(pipeline)))
    raise InputError(
        f"{pipeline.__name__} takes no {', '.join(f'{u}=' for u in unknown)} when loading; it takes {takes}"
    )
