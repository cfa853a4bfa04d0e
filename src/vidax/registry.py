"""What vidax runs, keyed by the checkpoint's own class names: one list of families.

A diffusers checkpoint names its pipeline in ``model_index.json`` (``_class_name``) and each
component as ``[library, class]`` there (the class is also the component's ``config.json``
``_class_name`` or its transformers ``architectures``). Every name vidax runs is registered once,
by the package that implements it: a family folder (``vidax/models/<family>/__init__.py``) or a
package shared by several families (``vidax/encoders``, ``vidax/schedulers``) exports a
:class:`Family` named ``FAMILY`` whose entries point at their code by ``"module:attribute"``
strings, imported only when used. A new family is its folder plus one line in
:data:`FAMILIES`; out-of-tree families are named in the ``VIDAX_FAMILIES`` environment variable
(comma-separated module names), read each time the registry is asked for.

The CLI, ``vidax inspect``, staging, offloading and placement iterate over this registry and
never name a family or a component class themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from collections.abc import Iterator
from typing import Any

from vidax.errors import ConfigError

#: The packages that register pipelines and components, one line per family.
FAMILIES: tuple[str, ...] = (
    "vidax.encoders",
    "vidax.schedulers",
    "vidax.models.wan",
    "vidax.models.cogvideox",
    "vidax.models.cosmos",
    "vidax.models.cosmos3",
    "vidax.models.hunyuan_video",
    "vidax.models.hunyuan_video15",
    "vidax.models.ltx",
    "vidax.models.ltx2",
    "vidax.models.skyreels_v2",
)

#: Component kinds (the roles of ``model_index.json`` entries).
KINDS = (
    "transformer",
    "vae",
    "text_encoder",
    "image_encoder",
    "scheduler",
    "tokenizer",
    "image_processor",
    "latent_upsampler",
    "audio_decoder",
    "vocoder",
    "connectors",
    "duration_head",
    "diffusion_decoder",
)

ENV_VAR = "VIDAX_FAMILIES"


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclasses.dataclass(frozen=True)
class PipelineSpec:
    """A pipeline class of ``model_index.json``.

    Attributes:
        class_name: ``_class_name`` in model_index.json (diffusers' pipeline class).
        target: ``"module:Class"`` of the vidax pipeline
            (a :class:`vidax.pipelines.base.VideoPipeline`, or for a ``generates=False`` one any
            class with ``from_pretrained(checkpoint, dtype=, mesh=)`` and ``for_task(checkpoint,
            task)``).
        generates: a pipeline that makes videos from a prompt, which ``vidax generate`` runs
            (its call keywords are flags; the contracts of ``tests/test_contracts.py`` hold it);
            False for one that only transforms given latents (LTX-2.5's diffusion decode),
            which :func:`vidax.load_pipeline` loads and whose ``for_task`` tells the CLI how to
            run it from Python.
        family: the registering family's name (filled by the registry).
    """

    class_name: str
    target: str
    generates: bool = True
    family: str = ""

    def load(self) -> type:
        return _resolve(self.target)


@dataclasses.dataclass(frozen=True)
class ComponentSpec:
    """A component class (transformer, VAE, encoder, scheduler, tokenizer, ...).

    A component with weights (``model`` set) is loaded by the one component loader,
    :func:`vidax.weights.component.plan_component`, from this entry alone: the config class,
    the model, its key rules, the parameters kept float32, the parameter axes and the block
    stacks are data here, every one a ``"module:NAME"`` string imported only when used.

    Attributes:
        class_name: its class in model_index.json / config.json.
        kind: one of :data:`KINDS`.
        config: ``"module:ConfigClass"`` with ``from_config_dict(dict, source=...)`` and
            ``from_json_file(path)``.
        model: ``"module:Class"`` built as ``Class(config, dtype=, param_dtype=, rngs=)`` (plus
            ``mesh=`` when it has ``block_stacks``); None for components their pipeline reads
            itself (tokenizers, processors, schedulers).
        key_rules: ``"module:NAME"`` of a :class:`~vidax.weights.loader.KeyRules`, or of a
            function ``(config, keys) -> KeyRules`` (``keys``: the checkpoint's tensor names);
            None: ``KeyRules(stacked=block_stacks)``.
        fp32_params: ``"module:NAME"`` of the path regexes of the parameters kept float32 under
            any dtype (:class:`~vidax.weights.loader.DtypePolicy`); None: none.
        param_axes: ``"module:NAME"``, the logical-axis rules of its parameters (placement on a
            mesh); None: replicated.
        key_configs: config keys ``vidax inspect`` shows.
        block_stacks: attributes / checkpoint key prefixes of its stacked layers (``"blocks"``):
            stacked by the key rules' default, streamed from host memory by block offloading,
            counted by the staging plan.
        loader: ``"module:function"`` for a component built from parts that the plain rule does
            not cover (LLaVA: two models from one folder), called as ``function(folder, dtype=,
            placement=, mesh=, config=) -> PendingLoad``; None for every other.
        family: the registering family's name (filled by the registry).
    """

    class_name: str
    kind: str
    config: str | None = None
    model: str | None = None
    key_rules: str | None = None
    fp32_params: str | None = None
    param_axes: str | None = None
    key_configs: tuple[str, ...] = ()
    block_stacks: tuple[str, ...] = ()
    loader: str | None = None
    family: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"ComponentSpec {self.class_name}: kind={self.kind!r} is not one of {KINDS}")

    def load_fn(self):
        return _resolve(self.loader)

    def config_class(self):
        return _resolve(self.config)

    def model_class(self):
        return _resolve(self.model)

    def axes(self) -> tuple:
        """The parameter-axis rules (``()`` when none are registered)."""
        return _resolve(self.param_axes) if self.param_axes else ()

    def fp32(self) -> tuple[str, ...]:
        """The path regexes of the parameters kept float32 (``()`` when none are registered)."""
        return tuple(_resolve(self.fp32_params)) if self.fp32_params else ()

    def rules(self, config: Any, keys: Any = ()) -> Any:
        """The :class:`~vidax.weights.loader.KeyRules` of a checkpoint of ``config`` whose tensor
        names are ``keys``."""
        if self.key_rules is None:
            from vidax.weights.loader import KeyRules

            return KeyRules(stacked=self.block_stacks)
        rules = _resolve(self.key_rules)
        return rules(config, keys) if callable(rules) else rules


#: The prefix of a family's ``convert.py`` tables for each kind of component it may own.
_TABLES = {
    "transformer": "TRANSFORMER",
    "vae": "VAE",
    "latent_upsampler": "UPSAMPLER",
    "audio_decoder": "AUDIO_DECODER",
    "vocoder": "VOCODER",
    "connectors": "CONNECTORS",
    "diffusion_decoder": "DIFFUSION_DECODER",
}


def family_pipelines(package: str, *class_names: str) -> tuple[PipelineSpec, ...]:
    """The :class:`PipelineSpec` of each pipeline class a family folder's ``pipeline.py`` defines
    under the diffusers class name it runs (``family_pipelines("vidax.models.wan", "WanPipeline",
    ...)``)."""
    return tuple(PipelineSpec(name, f"{package}.pipeline:{name}") for name in class_names)


#: The config keys ``vidax inspect`` shows first for a diffusion transformer (after its layer
#: counts) and for a VAE: the names diffusers' model configs share.
TRANSFORMER_SHAPE_KEYS = ("num_attention_heads", "attention_head_dim", "in_channels", "out_channels")
VAE_SHAPE_KEYS = ("latent_channels", "block_out_channels", "layers_per_block")


def family_component(
    package: str,
    kind: str,
    class_name: str,
    model: str,
    config: str,
    *,
    key_configs: tuple[str, ...] = (),
    block_stacks: tuple[str, ...] = (),
    key_rules: str | None = None,
) -> ComponentSpec:
    """The :class:`ComponentSpec` of a model a family folder owns, its code found by the layout of
    ``docs/adding_a_family.md``: the config class ``config`` in ``<package>.config``, the model
    ``model`` (``"transformer:WanTransformer3DModel"``) in ``<package>``, and in
    ``<package>.convert`` the tables ``<KIND>_FP32_PARAMS`` (``TRANSFORMER_`` / ``VAE_`` /
    ``UPSAMPLER_`` / ``AUDIO_DECODER_`` / ``VOCODER_``), ``TRANSFORMER_PARAM_AXES`` for a
    transformer and ``key_rules`` when named
    (else the default ``KeyRules(stacked=block_stacks)``).

    Raises:
        ValueError: ``kind`` is not one a family folder owns.
    """
    if kind not in _TABLES:
        raise ValueError(f"family_component {class_name}: kind={kind!r} is not one of {tuple(_TABLES)}")
    convert = f"{package}.convert:"
    return ComponentSpec(
        class_name,
        kind,
        config=f"{package}.config:{config}",
        model=f"{package}.{model}",
        key_rules=key_rules and convert + key_rules,
        fp32_params=f"{convert}{_TABLES[kind]}_FP32_PARAMS",
        param_axes=convert + "TRANSFORMER_PARAM_AXES" if kind == "transformer" else None,
        key_configs=key_configs,
        block_stacks=block_stacks,
    )


@dataclasses.dataclass(frozen=True)
class Family:
    """What one package registers.

    Attributes:
        name: e.g. ``"wan"``.
        pipelines: its pipeline classes.
        components: its component classes.
    """

    name: str
    pipelines: tuple[PipelineSpec, ...] = ()
    components: tuple[ComponentSpec, ...] = ()


class Registry:
    """The pipelines and components of some families (see the module docstring).

    Args:
        modules: packages exporting ``FAMILY``.

    Raises:
        ConfigError: a module that does not import or has no ``FAMILY``, or a class name
            registered twice.
    """

    def __init__(self, modules: tuple[str, ...]):
        self.families: list[Family] = []
        self._pipelines: dict[str, PipelineSpec] = {}
        self._components: dict[str, ComponentSpec] = {}
        for name in modules:
            try:
                module = importlib.import_module(name)
            except ImportError as e:
                raise ConfigError(
                    f"family module {name!r} (from vidax.registry.FAMILIES or ${ENV_VAR}) does not import: {e}"
                ) from None
            family = getattr(module, "FAMILY", None)
            if not isinstance(family, Family):
                raise ConfigError(f"{name} registers no vidax family (no FAMILY = vidax.registry.Family(...))")
            self.families.append(family)
            for p in family.pipelines:
                self._add(self._pipelines, dataclasses.replace(p, family=family.name), "pipeline")
            for c in family.components:
                self._add(self._components, dataclasses.replace(c, family=family.name), "component")

    @staticmethod
    def _add(table: dict, spec: Any, what: str) -> None:
        if spec.class_name in table:
            raise ConfigError(
                f"{what} {spec.class_name} is registered by both {table[spec.class_name].family} and "
                f"{spec.family}; register a shared component once"
            )
        table[spec.class_name] = spec

    def pipeline(self, class_name: Any, source: str = "model_index.json") -> PipelineSpec:
        """The pipeline registered for ``class_name``.

        Raises:
            ConfigError: none is (the message lists those that are).
        """
        if class_name not in self._pipelines:
            raise ConfigError(
                f"{source}: pipeline {class_name!r} is not supported; vidax runs {sorted(self._pipelines)}"
            )
        return self._pipelines[class_name]

    def component(self, class_name: Any, kind: str | None = None, source: str = "model_index.json") -> ComponentSpec:
        """The component registered for ``class_name`` (of ``kind`` when given).

        Raises:
            ConfigError: none is (the message lists those of that kind).
        """
        spec = self._components.get(class_name)
        if spec is None or (kind is not None and spec.kind != kind):
            valid = sorted(n for n, s in self._components.items() if kind is None or s.kind == kind)
            raise ConfigError(
                f"{source}: {kind or 'component'} class {class_name!r} is not supported; vidax implements {valid}"
            )
        return spec

    def find_component(self, class_name: Any) -> ComponentSpec | None:
        """The component registered for ``class_name``, or None."""
        return self._components.get(class_name)

    def pipelines(self, generating_only: bool = True) -> Iterator[PipelineSpec]:
        """The registered pipelines: those ``vidax generate`` runs, or every one."""
        return (p for p in self._pipelines.values() if p.generates or not generating_only)

    def components(self, kind: str | None = None) -> Iterator[ComponentSpec]:
        return (s for s in self._components.values() if kind is None or s.kind == kind)


@functools.lru_cache(maxsize=8)
def _registry(modules: tuple[str, ...]) -> Registry:
    return Registry(modules)


def registry() -> Registry:
    """The registry of :data:`FAMILIES` plus the modules named in ``VIDAX_FAMILIES``."""
    extra = tuple(m.strip() for m in os.environ.get(ENV_VAR, "").split(",") if m.strip())
    return _registry(FAMILIES + tuple(m for m in extra if m not in FAMILIES))
