"""``load_pipeline``: a diffusers-layout checkpoint folder (or hub id) -> a vidax pipeline.

The pipeline class is the one the registry (:mod:`vidax.registry`) holds for ``_class_name`` in
``model_index.json``; every component folder it names must exist.
"""

from __future__ import annotations

import os
from typing import Any

from vidax.checkpoint import Checkpoint
from vidax.registry import registry


def pipeline_class(checkpoint: Checkpoint, task: str | None = None) -> type:
    """The vidax pipeline class for ``checkpoint`` (and ``task``, when given).

    Raises:
        ConfigError: a pipeline class vidax does not run. InputError: a task the checkpoint
            does not do.
    """
    cls = registry().pipeline(checkpoint.pipeline_class_name, source=f"{checkpoint.source}: _class_name").load()
    return cls if task is None else cls.for_task(checkpoint, task)


def load_pipeline(path_or_hub_id: str | os.PathLike, dtype: Any = "float32", task: str | None = None,
                  mesh: Any = None, **kwargs):
    """Load a pipeline from a diffusers-format folder or hub id.

    Args:
        path_or_hub_id: folder holding ``model_index.json`` and component folders, a hub id, or
            ``"vidax/tiny-random-wan"`` (the embedded tiny checkpoint, built on first use; see
            :mod:`vidax.default_checkpoint`).
        dtype: ``"float32"`` or ``"bfloat16"`` (or the jnp dtype): storage and compute dtype of
            the transformer and text encoder; the reference's fp32 modules stay fp32.
        task: ``None``: the pipeline named in model_index.json (as diffusers); ``"t2v"`` or
            ``"i2v"``: the pipeline that does this task on the checkpoint (e.g. image-to-video on
            Wan2.2 TI2V-5B, whose model_index.json names ``WanPipeline``).
        mesh: run on a device mesh (:func:`vidax.parallel.mesh.resolve_mesh`: a
            ``jax.sharding.Mesh``, ``"2x2x2"``, ``"dp=2,tp=2,sp=2"``, a dict or a ``(dp, tp, sp)``
            tuple; its product of devices, the first ones where there are more, in one process); None:
            one device.
        **kwargs: passed to the pipeline's ``from_pretrained``: ``offload=``
            (:class:`vidax.parallel.offload.OffloadConfig`, see docs/offloading.md), ``stats=``,
            ``offload_experts=``, ``progress=`` (a status line on stderr while the weights load;
            default True) and the family's options (e.g. ``vae_dtype=``).

    Raises:
        CheckpointError: missing folder, files or tensors. ConfigError: a pipeline class or a
            setting vidax does not implement. InputError: unsupported dtype, or a task the
            checkpoint does not do.

    JAX's persistent compilation cache is turned on for the process unless configured
    otherwise (:func:`vidax.compile_cache.setup_compile_cache`; ``VIDAX_COMPILE_CACHE=0`` turns
    it off).
    """
    from vidax.compile_cache import setup_compile_cache
    from vidax.default_checkpoint import resolve_named_checkpoint

    setup_compile_cache()  # once per process; a cache the user configured is kept

    checkpoint = Checkpoint.open(resolve_named_checkpoint(path_or_hub_id))
    return pipeline_class(checkpoint, task).from_pretrained(checkpoint, dtype=dtype, mesh=mesh, **kwargs)
