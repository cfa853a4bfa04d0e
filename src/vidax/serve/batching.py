"""How ``vidax serve`` batches jobs (:class:`~vidax.serve.jobs.JobRunner`): whether a pipeline's
guidance is per video, the copies a batch is padded with to split over a data-parallel mesh, and
the ``batch`` field of a job's record."""

from __future__ import annotations

from typing import Any


def per_video_guidance(pipe: Any) -> bool:
    """Whether ``pipe``'s guidance is the plain CFG combination of the default hooks (their
    ``step_args``, ``guidance`` and ``guide``), which weighs each video of a batch by its own
    :attr:`~vidax.pipelines.base.Call.video_guidance` (Wan2.1 / Wan2.2); the other families'
    guidance has more to it (per-step tables, rescaling, several passes)."""
    from vidax.pipelines.hooks import FamilyHooks

    family = type(pipe).family
    return all(getattr(family, name) is getattr(FamilyHooks, name) for name in ("step_args", "guidance", "guide"))


def batch_padding(batch: list, data_parallel: int) -> int:
    """Videos added to ``batch`` so that its denoising rows (the videos, times two with CFG)
    split evenly over the mesh's data-parallel devices: a batch that does not split is
    replicated on every device (no faster than one); 0 off a data-parallel mesh and for a
    job that runs alone as it is (``key`` None)."""
    if data_parallel < 2 or batch[0].key is None:
        return 0
    per_video = 2 if batch[0].call.do_cfg else 1
    n = len(batch)
    while (n * per_video) % data_parallel:
        n += 1
    return n - len(batch)


def batch_report(batch: list, index: int, resumed: int | None, data_parallel: int) -> dict:
    """How a job ran: ``size`` (videos in its denoising batch), ``index`` (its row), the ids
    of the batch's jobs, ``resumed_from_step`` (the saved step it resumed at, or None), and
    ``data_parallel``: None off a data-parallel mesh, else ``devices`` (the mesh's data
    axis), ``rows`` (the denoising batch: the videos with ``padding`` copies of the last,
    times two with CFG) and ``split`` (the rows split over the devices; False: replicated,
    each device running them all)."""
    dp = None
    if data_parallel > 1:
        padding = batch_padding(batch, data_parallel)
        rows = (len(batch) + padding) * (2 if batch[0].call.do_cfg else 1)
        dp = {
            "devices": data_parallel,
            "rows": rows,
            "padding": padding,
            "split": rows % data_parallel == 0,
        }
    return {
        "size": len(batch),
        "index": index,
        "jobs": [p.id for p in batch],
        "resumed_from_step": resumed,
        "data_parallel": dp,
    }
