"""A job record's changes and its event lines (``vidax serve``): its progress, its end
(finished, failed with an error code, cancelled), the form lists show, and the error of a
video that could not be written."""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from vidax.errors import Cancelled, VidaxError
from vidax.serve.store import COMPLETED, FAILED

#: One line per job event (queued, started, resumed, finished, failed, cancelled), shown at the
#: default verbosity of ``vidax serve``.
events = logging.getLogger("vidax.serve.jobs")
logger = logging.getLogger("vidax.serve")


#: Characters of a job's prompt in lists (``GET /v1/videos``, the page's table); a longer one is
#: cut there and ends with "…".
LISTED_PROMPT = 200


def listed_job(job: dict) -> dict:
    prompt = job.get("prompt")
    if isinstance(prompt, str) and len(prompt) > LISTED_PROMPT:
        return {**job, "prompt": prompt[: LISTED_PROMPT - 1] + "…"}
    return job


def progress_percent(step: int, steps: int, chunk: int = 0, chunks: int = 1) -> int:
    """The percentage of the whole job done at ``step`` denoising steps of ``steps`` in its chunk
    ``chunk`` (0-based) of ``chunks`` (a long video made chunk by chunk; 1: a video made at
    once): each chunk counts as an equal part, and in it decoding counts as one more step, so
    the percentage grows through the chunks and reaches 100 only when the job is done."""
    return 100 * (chunk * (steps + 1) + step) // (chunks * (steps + 1))


def log_job_end(job: dict) -> None:
    """The job event line of a job that ended (finished, failed or cancelled)."""
    if job["status"] == COMPLETED:
        stats = job.get("stats") or {}
        events.info(
            "%s finished: its mp4 written in %.1f s (compiles %.1f s)",
            job["id"],
            stats.get("call_s", 0) + stats.get("write_s", 0),
            stats.get("compile_s", 0),
        )
    elif job["error"]["code"] == "cancelled":
        events.info("%s %s", job["id"], job["error"]["message"])
    else:
        events.warning("%s failed (%s): %s", job["id"], job["error"]["code"], job["error"]["message"])


def error_code(error: Exception) -> str:
    """The error code of a job that failed with ``error``: its class's name in snake_case
    (``OutOfMemoryError`` -> ``out_of_memory_error``), as the API's other codes are spelled."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(error).__name__).lower()


def failed_job(job: dict, message: str, code: str) -> dict:
    return {**job, "status": FAILED, "completed_at": int(time.time()), "error": {"code": code, "message": message}}


class Unwritten(Exception):
    """The mp4 of a finished job could not be written; its frames are kept as
    ``<folder>/<job_id>.unwritten.npy`` (:func:`vidax.io.video.save_unwritten`, in ``folder``
    only), and the message names the files relative to ``folder`` (the client does not see the
    server's paths).

    Args:
        folder: the jobs folder.
        job_id: the job.
        frames: the frames not written, float32 (1, F, H, W, 3) in [0, 1]; None: none.
        error: what failed.
        grown: the job's growing mp4 (:class:`~vidax.io.growing.GrowingMp4`) where a long
            video's chunks were appended to it before ``error``: the frames it holds are kept as
            ``<folder>/<job_id>.unwritten.mp4`` (the mp4 as far as it was written; ``frames``
            then are those after them).
    """

    def __init__(self, folder: str, job_id: str, frames: Any, error: Exception, grown: Any = None):
        from vidax.io.video import save_unwritten

        def local(text: str) -> str:
            return " ".join(text.replace(folder + os.sep, "").split())

        said = []
        if grown is not None and grown.frames:
            kept = f"{job_id}.unwritten.mp4"
            try:
                grown.keep(os.path.join(folder, kept))
                said.append(
                    f"its first {grown.frames} frames are kept in {kept} in the jobs folder (the mp4 as far as it "
                    "was written)"
                )
            except OSError as e:
                said.append(
                    local(f"keeping its first {grown.frames} frames as {kept} failed ({type(e).__name__}: {e})")
                )
        elif grown is not None:
            grown.abort()
        if frames is not None:
            which = "the frames after them" if said else "the frames"
            try:
                kept = os.path.relpath(
                    save_unwritten(frames, os.path.join(folder, f"{job_id}.mp4"), elsewhere=False), folder
                )
                said.append(
                    f"{which} are kept in {kept} in the jobs folder (float32 (videos, frames, height, width, "
                    "RGB) in [0, 1], numpy.load)"
                )
            except OSError as e:
                said.append(local(f"saving {which} as .npy failed too ({type(e).__name__}: {e})"))
        super().__init__(
            f"could not write {job_id}.mp4 ({local(f'{type(error).__name__}: {error}')})" + "; ".join(["", *said])
        )


def failure_record(pending: Any, job: dict, e: Exception) -> dict:
    """The record of job ``job`` (its :class:`~vidax.serve.pending.Pending` ``pending``) that
    failed with ``e``: cancelled, its video unwritten, refused, or an internal error (logged)."""
    if isinstance(e, Cancelled):
        return failed_job({**job, **pending.reached()}, pending.in_chunk(str(e)), "cancelled")
    if isinstance(e, Unwritten):
        return failed_job({**job, "step": job["num_inference_steps"]}, str(e), "write_failed")
    if isinstance(e, VidaxError):
        message = pending.request.error(e).message if pending.request else str(e)
        return failed_job({**job, **pending.reached()}, " ".join(message.split()), error_code(e))
    # a codec or disk error writing the video, a bug: the job fails, the server stays
    logger.error("job %s failed", pending.id, exc_info=e)
    return failed_job({**job, **pending.reached()}, " ".join(f"{type(e).__name__}: {e}".split()), "internal")
