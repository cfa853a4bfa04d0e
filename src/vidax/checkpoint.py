"""A diffusers-layout checkpoint folder, read once: ``model_index.json`` and every component's
config, shared by the pipeline's checks and its component loaders (no weights are read here);
what a family makes of it (:class:`CheckpointInfo`) and the call defaults it gives
(:class:`CallDefaults`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.config import ConfigFile, read_json_object
from vidax.errors import Arg, CheckpointError, ConfigError

#: ``task`` values of :func:`vidax.load_pipeline` and what they mean.
TASK_NAMES = {"t2v": "text-to-video", "i2v": "image-to-video", "v2v": "video-to-video", "upsample": "latent upsampling"}

#: The config file of a component folder, by preference.
CONFIG_FILES = ("config.json", "scheduler_config.json", "guider_config.json", "preprocessor_config.json")


def resolve_checkpoint(path_or_hub_id: str | os.PathLike, local_files_only: bool = False) -> str:
    """A local folder as is; otherwise a Hugging Face hub id fetched with ``huggingface_hub``
    (safetensors, configs and tokenizer files only; ``local_files_only``: from its cache only,
    as diffusers' keyword).

    Raises:
        CheckpointError: not a folder and not downloadable (no network, unknown repo, ...).
    """
    path = os.fspath(path_or_hub_id)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise CheckpointError(Arg("checkpoint", path), " is a file; give the pipeline folder (with model_index.json)")
    if path.count("/") != 1 or path.startswith((".", "/", "~")):
        raise CheckpointError(Arg("checkpoint", path), ": no such folder, and not a hub id of the form owner/name")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(
            path,
            allow_patterns=["*.json", "*.safetensors", "*.model", "tokenizer/*", "*.txt"],
            local_files_only=local_files_only,
        )
    except Exception as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())  # huggingface_hub's messages span lines
        raise CheckpointError(
            Arg("checkpoint", path),
            ": no such local folder, and downloading it from the Hugging Face hub "
            f"failed ({reason}). Pass a local diffusers-format folder.",
        ) from None


def _component_names(model_index: str) -> set[str]:
    """The components a ``model_index.json`` lists (none where it is missing or unreadable)."""
    if not os.path.isfile(model_index):
        return set()
    try:
        return {k for k in read_json_object(model_index) if not k.startswith("_")}
    except ConfigError:
        return set()


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint's ``model_index.json`` and component configs.

    Attributes:
        root: the folder.
        index: ``model_index.json``.
        configs: component name -> its parsed config (``config.json``, else
            ``scheduler_config.json``, else ``preprocessor_config.json``; a
            :class:`~vidax.config.ConfigFile`, which warns about a key its class ignores once) for
            every component whose folder exists (``{}`` for folders without one, like ``tokenizer/``).
        config_files: component name -> the file its config came from.
        weights: None, or the 8-bit format its transformers' Linear kernels load in
            (:mod:`vidax.nn.quant`; ``load_pipeline(..., weight_dtype=)``).
        files: component name -> a single-file checkpoint read instead of its folder's weights
            (``load_pipeline(..., transformer=FILE)``, :mod:`vidax.weights.single_file`).
        folders: component name -> a diffusers-layout component folder read instead of
            ``<root>/<name>`` (``load_pipeline(..., transformer=FOLDER)``, :meth:`with_folder`).
        random_weights: every component's weights are made on the device from its config, no
            file read (``load_pipeline(..., random_weights=True)``,
            :func:`vidax.pipelines.weight_formats.with_random_weights`).
        variant: None, or the weights variant (``"fp16"``) whose files the component folders
            under ``root`` are read from where they have them (``load_pipeline(..., variant=)``,
            :meth:`reader`).
    """

    root: str
    index: Mapping[str, Any]
    configs: Mapping[str, Mapping[str, Any]]
    config_files: Mapping[str, str]
    weights: str | None = None
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    folders: Mapping[str, str] = dataclasses.field(default_factory=dict)
    random_weights: bool = False
    variant: str | None = None

    @classmethod
    def open(cls, path_or_hub_id: str | os.PathLike) -> Checkpoint:
        """Read ``model_index.json`` and every component config of a folder (or hub id).

        Raises:
            CheckpointError: no such folder, or no model_index.json.
            ConfigError: a JSON file that does not parse.
        """
        if isinstance(path_or_hub_id, Checkpoint):
            return path_or_hub_id
        root = resolve_checkpoint(path_or_hub_id)
        file = os.path.join(root, "model_index.json")
        if not os.path.isfile(file):
            parent = os.path.dirname(os.path.normpath(root))
            name = os.path.basename(os.path.normpath(root))
            if name in _component_names(os.path.join(parent, "model_index.json")):
                raise CheckpointError(
                    f"{root} is the {name!r} component of the pipeline folder {parent}; give that "
                    "folder (vidax loads diffusers-layout pipeline folders, with model_index.json)"
                )
            raise CheckpointError(f"{root} has no model_index.json; vidax loads diffusers-layout pipeline folders")
        index = read_json_object(file)
        configs, files = {}, {}
        for name in index:
            folder = os.path.join(root, name)
            if name.startswith("_") or not os.path.isdir(folder):
                continue
            configs[name], files[name] = {}, ""
            for candidate in CONFIG_FILES:
                path = os.path.join(folder, candidate)
                if os.path.isfile(path):
                    configs[name], files[name] = ConfigFile(read_json_object(path)), path
                    break
        return cls(root, index, configs, files)

    @property
    def source(self) -> str:
        """``<root>/model_index.json``, for messages."""
        return os.path.join(self.root, "model_index.json")

    @property
    def pipeline_class_name(self) -> Any:
        return self.index.get("_class_name")

    def has(self, name: str) -> bool:
        """model_index.json names component ``name`` (not as ``[null, null]``)."""
        value = self.index.get(name)
        return value is not None and value != [None, None]

    def class_of(self, name: str) -> str | None:
        """The class model_index.json gives component ``name``, or None."""
        value = self.index.get(name)
        return value[1] if isinstance(value, list) and len(value) == 2 else None

    def folder(self, name: str) -> str:
        """Folder of component ``name``.

        Raises:
            CheckpointError: model_index.json does not name it, or its folder is missing.
        """
        if not self.has(name):
            raise CheckpointError(f"{self.source} names no {name!r} component")
        path = self.folders.get(name) or os.path.join(self.root, name)
        if not os.path.isdir(path):
            raise CheckpointError(
                f"component folder {name}/ is missing in {self.root} (model_index.json lists "
                f"{self.class_of(name) or self.index[name]})"
            )
        return path

    def with_folder(self, name: str, folder: str) -> Checkpoint:
        """This checkpoint with component ``name`` read from ``folder`` (a diffusers-layout
        component folder: its config and weights, as diffusers' ``from_pretrained(path,
        transformer=Model.from_pretrained(folder))``).

        Raises:
            CheckpointError: model_index.json names no ``name``; ``folder`` has no config.
            ConfigError: its config names another class than model_index.json gives ``name``.
        """
        if not self.has(name):
            raise CheckpointError(f"{self.source} names no {name!r} component")
        config_file = next(
            (os.path.join(folder, c) for c in CONFIG_FILES if os.path.isfile(os.path.join(folder, c))), ""
        )
        if not config_file:
            raise CheckpointError(f"{folder} has none of {list(CONFIG_FILES)}")
        config = ConfigFile(read_json_object(config_file))
        given = config.get("_class_name")
        if given is not None and given != self.class_of(name):
            raise ConfigError(
                f"{config_file}: _class_name={given!r}, but {self.source} has {name} {self.class_of(name)!r}"
            )
        return dataclasses.replace(
            self,
            configs={**self.configs, name: config},
            config_files={**self.config_files, name: config_file},
            folders={**self.folders, name: folder},
        )

    def variant_of(self, name: str) -> str | None:
        """The weights variant component ``name``'s folder is read from: :attr:`variant` for a
        folder under ``root``, None for one given in its place (:meth:`with_folder`)."""
        return None if name in self.folders else self.variant

    def reader(self, name: str) -> Any:
        """A :class:`~vidax.weights.safetensors_io.CheckpointReader` of component ``name``'s
        folder, its :meth:`variant_of` files where it has them.

        Raises:
            CheckpointError: as :meth:`folder`, and the reader's own.
        """
        from vidax.weights.safetensors_io import CheckpointReader

        return CheckpointReader(self.folder(name), variant=self.variant_of(name))

    def require(self, *names: str) -> None:
        """Check that model_index.json names every component of ``names`` and that its folder exists.

        Raises:
            CheckpointError: for the first one missing (as :meth:`folder`).
        """
        for name in names:
            self.folder(name)

    def config(self, name: str) -> Mapping[str, Any]:
        """The parsed config of component ``name``.

        Raises:
            CheckpointError: the component or its config file is missing.
        """
        self.folder(name)
        if not self.config_files.get(name):
            raise CheckpointError(f"{self.root}/{name}/ has none of {list(CONFIG_FILES)}")
        return self.configs[name]

    def config_file(self, name: str) -> str:
        self.config(name)
        return self.config_files[name]

    def typed_config(self, name: str, config_cls: Any) -> Any:
        """``config_cls.from_config_dict`` of component ``name``'s config (errors name its file)."""
        return config_cls.from_config_dict(self.config(name), source=self.config_file(name))


@dataclasses.dataclass(frozen=True)
class CallDefaults:
    """What a call uses for the arguments it is not given, taken from the checkpoint where the
    reference takes them (sizes from a transformer config, fps from the reference's examples).

    Attributes:
        height, width: pixels. num_frames: frames. num_inference_steps: denoising steps.
        guidance_scale: CFG weight. max_sequence_length: text tokens. fps: frames per second
        of a written video.
    """

    height: int
    width: int
    num_frames: int
    num_inference_steps: int
    guidance_scale: float
    max_sequence_length: int
    fps: int

    #: ``model_index.json`` key whose object overrides these (vidax's own checkpoints use it).
    INDEX_KEY: ClassVar[str] = "_vidax_call_defaults"

    def for_checkpoint(self, checkpoint: Checkpoint) -> CallDefaults:
        """These defaults with the checkpoint's ``_vidax_call_defaults`` applied.

        Raises:
            ConfigError: an unknown key or a value that is not a positive number.
        """
        given = checkpoint.index.get(self.INDEX_KEY) or {}
        if not isinstance(given, dict):
            raise ConfigError(f"{checkpoint.source}: {self.INDEX_KEY} must be an object, got {given!r}")
        kinds = {f.name: float if f.name == "guidance_scale" else int for f in dataclasses.fields(self)}
        for key, value in given.items():
            ok = key in kinds and not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0
            if not ok or (kinds[key] is int and not isinstance(value, int)):
                raise ConfigError(
                    f"{checkpoint.source}: {self.INDEX_KEY}.{key}={value!r}; keys are "
                    f"{sorted(kinds)}, values positive numbers (integers but guidance_scale)"
                )
        return dataclasses.replace(self, **given)


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint is, from its configs alone (a family subclasses it with its configs).

    Attributes:
        checkpoint: the folder's index and configs.
        tasks: what it generates, a subset of :data:`vidax.pipelines.common.TASK_NAMES`.
        variant: a human-readable name (``vidax inspect``).
        defaults: the call's defaults.
        transformers: component names of the denoising transformers, in expert order.
        size_multiple: ``(mh, mw)``: height and width must be multiples of these.
        size_reason: why (for the error message).
    """

    checkpoint: Checkpoint
    tasks: tuple[str, ...]
    variant: str
    defaults: CallDefaults
    transformers: tuple[str, ...]
    size_multiple: tuple[int, int]
    size_reason: str
