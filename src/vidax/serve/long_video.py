"""Long videos in ``vidax serve``: the mp4 of each job of a batch whose pipeline makes its video
chunk by chunk (its family's ``CHUNK_CALLBACK`` keyword) grows as the chunks finish
(:class:`~vidax.io.growing.GrowingMp4`, a temporary ``.vidax-*.mp4`` beside the job's video), the
call keeping no chunk's frames (the family's ``CHUNK_KEEP`` keyword False): the server's host
memory holds one chunk of a video of any length, as ``vidax generate``'s does."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from vidax.serve.records import Unwritten


def grows(pipe: Any, call: Any) -> bool:
    """Whether a job of ``pipe`` with the checked ``call`` has its mp4 written chunk by chunk: the
    pipeline makes its video in chunks and takes the chunk keywords, the call decodes frames
    (``output_type`` "np") and makes no sound (a video with sound keeps the one write at the end,
    its sound track muxed with the frames)."""
    family = type(pipe).family
    keyword = getattr(family, "CHUNK_CALLBACK", None)
    return (
        keyword is not None
        and {keyword, family.CHUNK_KEEP} <= set(type(pipe).call_args())
        and call.output_type == "np"
        and family.silent_call(pipe.info, call) is not None
    )


class GrowingVideos:
    """The growing mp4 of each job of a batch (by its id), at a temporary name beside
    ``store.video_path(id)``, each job's own frames rate (``pending.fps``).

    A chunk that cannot be appended (disk full, a codec error) ends that job's writing: the mp4
    as far as it was written and the frames of this chunk and the chunks after it are kept for
    :meth:`publish` to save (:class:`~vidax.serve.records.Unwritten`); the other jobs go on.

    Raises:
        OSError: a temporary file could not be created (none is left).
    """

    def __init__(self, store: Any, batch: list):
        from vidax.io.growing import GrowingMp4

        self.folder = store.folder
        self.writers: dict[str, GrowingMp4] = {}
        #: job id -> (the error that ended its writing, the frames (n, H, W, 3) made since)
        self.failed: dict[str, tuple[Exception, list[np.ndarray]]] = {}
        #: job id -> seconds spent appending its frames
        self.spent: dict[str, float] = {}
        try:
            for pending in batch:
                self.writers[pending.id] = GrowingMp4(store.video_path(pending.id), pending.fps, overwrite=True)
                self.spent[pending.id] = 0.0
        except BaseException:
            self.abort()
            raise

    def temporary(self, job_id: str) -> str:
        """The growing file of the job (its temporary name)."""
        return self.writers[job_id].tmp

    def append(self, job_id: str, frames: np.ndarray) -> None:
        """Append the job's next frames, float32 (n, H, W, 3) in [0, 1] (a copy is kept where
        its writing failed)."""
        if job_id not in self.writers:  # dropped: cancelled
            return
        if job_id in self.failed:
            self.failed[job_id][1].append(np.array(frames))
            return
        t0 = time.perf_counter()
        try:
            self.writers[job_id].append(frames)
        except Exception as e:  # disk full, a codec error: the frames kept for publish
            self.failed[job_id] = (e, [np.array(frames)])
        self.spent[job_id] += time.perf_counter() - t0

    def drop(self, job_id: str) -> None:
        """Remove the job's growing file (a job cancelled while its batch runs on)."""
        writer = self.writers.pop(job_id, None)
        if writer is not None:
            writer.abort()
        self.failed.pop(job_id, None)

    def publish(self, job_id: str) -> float:
        """End the job's mp4 and publish it under its name (atomically); the seconds spent
        writing it, its appends included.

        Raises:
            Unwritten: a chunk could not be appended, or the end of the file could not be
                written: the mp4 as far as it was written and the frames after it are kept in the
                jobs folder, the error says where.
        """
        writer = self.writers.pop(job_id)
        if job_id in self.failed:
            error, frames = self.failed.pop(job_id)
            raise Unwritten(self.folder, job_id, np.concatenate(frames)[None], error, grown=writer)
        t0 = time.perf_counter()
        try:
            writer.finish(keep_failed=True)
        except Exception as e:
            raise Unwritten(self.folder, job_id, None, e, grown=writer) from None
        return self.spent[job_id] + time.perf_counter() - t0

    def abort(self) -> None:
        """Remove every growing file not published (a failed or stopped batch)."""
        for job_id in list(self.writers):
            self.drop(job_id)
