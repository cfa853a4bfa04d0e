"""``load_pipeline``: a diffusers-layout checkpoint folder (or hub id) -> a vidax pipeline.

The pipeline class is chosen by ``_class_name`` in ``model_index.json`` from one explicit
table; each component folder named there must exist.
"""

from __future__ import annotations

import os
from typing import Any

from vidax.config import read_json_object
from vidax.errors import CheckpointError, ConfigError

# ``_class_name`` in model_index.json -> "module:Class" of the vidax pipeline.
PIPELINES: dict[str, str] = {
    "WanPipeline": "vidax.pipelines.wan:WanPipeline",
    "WanImageToVideoPipeline": "vidax.pipelines.wan_i2v:WanImageToVideoPipeline",
    "CogVideoXPipeline": "vidax.pipelines.cogvideox:CogVideoXPipeline",
    "CogVideoXImageToVideoPipeline": "vidax.pipelines.cogvideox:CogVideoXImageToVideoPipeline",
}


def resolve_checkpoint(path_or_hub_id: str | os.PathLike) -> str:
    """A local folder as is; otherwise a Hugging Face hub id fetched with ``huggingface_hub``
    (safetensors, configs and tokenizer files only).

    Raises:
        CheckpointError: not a folder and not downloadable (no network, unknown repo, ...).
    """
    path = os.fspath(path_or_hub_id)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise CheckpointError(f"checkpoint={path!r} is a file; give the pipeline folder (with model_index.json)")
    if path.count("/") != 1 or path.startswith((".", "/", "~")):
        raise CheckpointError(f"checkpoint={path!r}: no such folder, and not a hub id of the form owner/name")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(
            path,
            allow_patterns=["*.json", "*.safetensors", "*.model", "tokenizer/*", "*.txt"],
        )
    except Exception as e:
        raise CheckpointError(
            f"checkpoint={path!r}: no such local folder, and downloading it from the Hugging Face hub "
            f"failed ({type(e).__name__}: {e}). Pass a local diffusers-format folder."
        ) from None


def read_model_index(root: str) -> dict[str, Any]:
    file = os.path.join(root, "model_index.json")
    if not os.path.isfile(file):
        raise CheckpointError(
            f"{root} has no model_index.json; vidax loads diffusers-layout pipeline folders"
        )
    return read_json_object(file)


def require_component(root: str, name: str, index: dict[str, Any]) -> str:
    """Path of component folder ``name``; a clear error if model_index lacks it or it is missing."""
    if name not in index or index[name] in (None, [None, None]):
        raise CheckpointError(f"{root}/model_index.json names no {name!r} component")
    path = os.path.join(root, name)
    if not os.path.isdir(path):
        raise CheckpointError(
            f"component folder {name}/ is missing in {root} (model_index.json lists "
            f"{index[name][1] if isinstance(index[name], list) else index[name]})"
        )
    return path


def pipeline_class(root: str, index: dict[str, Any]) -> type:
    """The vidax pipeline class registered for ``index["_class_name"]``.

    Raises:
        ConfigError: a pipeline class vidax does not run.
    """
    name = index.get("_class_name")
    if name not in PIPELINES:
        raise ConfigError(
            f"{root}/model_index.json: pipeline {name!r} is not supported; vidax runs {sorted(PIPELINES)}"
        )
    module_name, cls_name = PIPELINES[name].split(":")
    import importlib

    return getattr(importlib.import_module(module_name), cls_name)


def load_pipeline(path_or_hub_id: str | os.PathLike, dtype: Any = "float32", task: str | None = None,
                  mesh: Any = None, **kwargs):
    """Load a pipeline from a diffusers-format folder or hub id.

    Args:
        path_or_hub_id: folder holding ``model_index.json`` and component folders, or a hub id.
        dtype: ``"float32"`` or ``"bfloat16"`` (or the jnp dtype): storage and compute dtype of
            the transformer and text encoder; the reference's fp32 modules stay fp32.
        task: ``None``: the pipeline named in model_index.json (as diffusers); ``"t2v"`` or
            ``"i2v"``: the pipeline that does this task on the checkpoint, via the registered
            class's ``for_task(root, index, task)`` (e.g. image-to-video on Wan2.2 TI2V-5B,
            whose model_index.json names ``WanPipeline``).
        mesh: run on a device mesh (:func:`vidax.parallel.mesh.resolve_mesh`: a
            ``jax.sharding.Mesh``, ``"2x2x2"``, ``"dp=2,tp=2,sp=2"``, a dict or a ``(dp, tp, sp)``
            tuple whose product is the device count); None: one device.
        **kwargs: passed to the pipeline's ``from_pretrained`` (e.g. ``offload=`` for the Wan
            pipelines: :class:`vidax.parallel.offload.OffloadConfig`, see docs/offloading.md).

    Raises:
        CheckpointError: missing folder, files or tensors. ConfigError: a pipeline class or a
            setting vidax does not implement. InputError: unsupported dtype, or a task the
            checkpoint does not do.

    JAX's persistent compilation cache is turned on for the process unless configured
    otherwise (:func:`vidax.compile_cache.setup_compile_cache`; ``VIDAX_COMPILE_CACHE=0`` turns
    it off).
    """
    from vidax.compile_cache import setup_compile_cache

    setup_compile_cache()  # once per process; a cache the user configured is kept
    root = resolve_checkpoint(path_or_hub_id)
    index = read_model_index(root)
    cls = pipeline_class(root, index)
    if task is not None and hasattr(cls, "for_task"):
        cls = cls.for_task(root, index, task)
    if mesh is not None:
        from vidax.parallel.mesh import resolve_mesh

        kwargs["mesh"] = resolve_mesh(mesh)
    if kwargs.get("offload") is not None:
        import inspect

        if "offload" not in inspect.signature(cls.from_pretrained).parameters:
            from vidax.errors import InputError

            raise InputError(f"offload={kwargs['offload']!r}: {cls.__name__} does not implement offloading "
                             "(the Wan pipelines do)")
    return cls.from_pretrained(root, dtype=dtype, **kwargs)
