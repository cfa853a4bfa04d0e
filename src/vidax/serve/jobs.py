"""The jobs of ``vidax serve``: records in SQLite, mp4 files beside them, one worker thread.

A job is the OpenAI video object (``id``, ``object``, ``model``, ``status``, ``progress``,
``created_at``, ``completed_at``, ``size``, ``seconds``, ``error``) plus vidax's fields
(``prompt``, ``num_frames``, ``fps``, ``num_inference_steps``, ``step``: denoising steps done,
``seed``: the seed used, ``input_reference``: the image's file name, and for a completed job
``stats``: seconds of the pipeline call, of its compiles, of writing the mp4). ``status`` goes ``queued`` -> ``in_progress`` -> ``completed`` or
``failed`` (a cancelled job is ``failed`` with the error code ``cancelled``, so a client waiting
for one of OpenAI's final states sees one).

Records live in ``<jobs_dir>/jobs.sqlite3``, videos in ``<jobs_dir>/<id>.mp4`` (written
atomically by :func:`vidax.io.video.write_video`), so a restart keeps every finished video; a
job that was queued or running when the process ended is marked failed when the store opens.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import queue
import sqlite3
import threading
import time
import uuid
from typing import Any, Mapping

from vidax.errors import Arg, Cancelled, InputError, VidaxError
from vidax.serve.fields import Fields, RequestError, Upload

logger = logging.getLogger("vidax.serve")

QUEUED, IN_PROGRESS, COMPLETED, FAILED = "queued", "in_progress", "completed", "failed"
ACTIVE = (QUEUED, IN_PROGRESS)


class JobStore:
    """Job records in SQLite (``<folder>/jobs.sqlite3``), safe to use from several threads. The
    folder is held by one store at a time (an exclusive ``flock`` on ``<folder>/serve.lock``,
    which names the holder's pid) until :meth:`close`.

    Raises:
        InputError: ``folder`` cannot be created or the database cannot be opened there; another
            process holds the folder; its ``jobs.sqlite3`` has a ``jobs`` table of another schema.
    """

    FILE = "jobs.sqlite3"
    LOCK = "serve.lock"
    COLUMNS = ["id", "created_at", "status", "data"]

    def __init__(self, folder: str | os.PathLike):
        self.folder = os.path.abspath(os.fspath(folder))
        arg = Arg("jobs_dir", os.fspath(folder))
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise InputError(arg, " is a file, not a folder; give a folder for the job records (created if missing)")
        try:
            os.makedirs(self.folder, exist_ok=True)
            self._lock_file = _hold(os.path.join(self.folder, self.LOCK), arg)
        except OSError as e:
            raise InputError(arg, f" cannot hold the job records ({e})") from None
        try:
            self._db = sqlite3.connect(os.path.join(self.folder, self.FILE), check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, created_at REAL NOT NULL, "
                             "status TEXT NOT NULL, data TEXT NOT NULL)")
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(jobs)")]
            if columns != self.COLUMNS:
                self._db.close()
                raise InputError(arg, f": {self.FILE} there is not vidax serve's (its table jobs has the columns "
                                 f"{', '.join(columns)}; expected {', '.join(self.COLUMNS)}); give another "
                                 "folder or move that file away")
        except (OSError, sqlite3.Error) as e:
            self._lock_file.close()
            raise InputError(arg, f" cannot hold the job records ({e})") from None
        except InputError:
            self._lock_file.close()
            raise
        self._lock = threading.Lock()

    def video_path(self, job_id: str) -> str:
        return os.path.join(self.folder, f"{job_id}.mp4")

    def put(self, job: dict) -> None:
        """Insert ``job``, or replace the record of its ``id`` (keeping the time it was first put,
        which orders the list: ``created_at`` counts whole seconds, as OpenAI's)."""
        with self._lock:
            self._db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                             "status = excluded.status, data = excluded.data",
                             (job["id"], time.time(), job["status"], json.dumps(job)))

    def get(self, job_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def list(self, limit: int, after: str | None = None, newest_first: bool = True) -> tuple[list[dict], bool]:
        """Up to ``limit`` jobs by creation time (after the job ``after``), and whether more follow.

        Raises:
            RequestError: 400, ``after`` is no job's id.
        """
        order, cmp = ("DESC", "<") if newest_first else ("ASC", ">")
        query, args = "SELECT data FROM jobs", []
        with self._lock:
            if after is not None:
                row = self._db.execute("SELECT created_at FROM jobs WHERE id = ?", (after,)).fetchone()
                if row is None:
                    raise RequestError(400, f"after={after!r} is no job's id; give the id of a listed job (the last "
                                       "of a page, to get the next)", "after")
                query += f" WHERE (created_at, id) {cmp} (?, ?)"
                args = [row[0], after]
            rows = self._db.execute(f"{query} ORDER BY created_at {order}, id {order} LIMIT ?",
                                    (*args, limit + 1)).fetchall()
        return [json.loads(r[0]) for r in rows[:limit]], len(rows) > limit

    def update(self, job_id: str, **fields: Any) -> None:
        """Set ``fields`` in the record of ``job_id`` (nothing for an unknown id)."""
        with self._lock:
            row = self._db.execute("SELECT data FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None:
                self._db.execute("UPDATE jobs SET data = ? WHERE id = ?",
                                 (json.dumps({**json.loads(row[0]), **fields}), job_id))

    def delete(self, job_id: str) -> None:
        """Delete the job's record, its mp4 and the frames kept when the mp4 could not be written."""
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        for path in [self.video_path(job_id),
                     *glob.glob(os.path.join(glob.escape(self.folder), f"{job_id}.unwritten*.npy"))]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def fail_active(self, message: str, code: str) -> int:
        """Mark every queued or running job failed with ``message``; returns how many."""
        with self._lock:
            rows = self._db.execute("SELECT data FROM jobs WHERE status IN (?, ?)", ACTIVE).fetchall()
        for (data,) in rows:
            self.put(_failed(json.loads(data), message, code))
        return len(rows)

    def close(self) -> None:
        """Close the database and let another server take the folder."""
        with self._lock:
            self._db.close()
            self._lock_file.close()


def _hold(path: str, arg: Arg) -> Any:
    """``path`` opened and locked (``fcntl.flock``, exclusive) with this process's id in it, for as
    long as the returned file stays open.

    Raises:
        InputError: another process holds the lock (its id named).
        OSError: the file cannot be opened or written.
    """
    import fcntl

    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise InputError(arg, f" is in use by another vidax serve, pid {holder}; stop it or give another "
                         "--jobs-dir") from None
    except OSError:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


#: Characters of a job's prompt in lists (``GET /v1/videos``, the page's table); a longer one is
#: cut there and ends with "…".
LISTED_PROMPT = 200


def _listed(job: dict) -> dict:
    prompt = job.get("prompt")
    if isinstance(prompt, str) and len(prompt) > LISTED_PROMPT:
        return {**job, "prompt": prompt[:LISTED_PROMPT - 1] + "…"}
    return job


def _progress(step: int, steps: int) -> int:
    """The percentage of ``step`` denoising steps done of ``steps`` (decoding and writing the
    video count as one more step)."""
    return 100 * step // (steps + 1)


def _reached(step: int, job: dict) -> dict:
    """``step`` and its ``progress`` in ``job``, for a job that stopped there."""
    return {"step": step, "progress": _progress(step, job["num_inference_steps"])}


def _failed(job: dict, message: str, code: str) -> dict:
    return {**job, "status": FAILED, "completed_at": int(time.time()), "error": {"code": code, "message": message}}


class _Unwritten(Exception):
    """The mp4 of a finished job could not be written; its frames are kept as
    ``<folder>/<job_id>.unwritten.npy`` (:func:`vidax.io.video.save_unwritten`, in ``folder``
    only), and the message names the files relative to ``folder`` (the client does not see the
    server's paths)."""

    def __init__(self, folder: str, job_id: str, frames: Any, error: Exception):
        from vidax.io.video import save_unwritten

        def local(text: str) -> str:
            return " ".join(text.replace(folder + os.sep, "").split())

        try:
            kept = os.path.relpath(save_unwritten(frames, os.path.join(folder, f"{job_id}.mp4"), elsewhere=False),
                                   folder)
            kept = f"the frames are kept in {kept} in the jobs folder (float32 (videos, frames, height, width, " \
                   "RGB) in [0, 1], numpy.load)"
        except OSError as e:
            kept = local(f"saving the frames as .npy failed too ({type(e).__name__}: {e})")
        super().__init__(f"could not write {job_id}.mp4 ({local(f'{type(error).__name__}: {error}')}); {kept}")


class _Pending:
    """A job accepted and not finished: its checked call, its cancel event, its live step."""

    def __init__(self, job_id: str, call: Any):
        self.id, self.call, self.fps, self.cache = job_id, call, None, None
        self.request: Fields | None = None  # spells the run's errors as the request's fields
        self.cancel = threading.Event()
        self.step = 0


class JobRunner:
    """Runs the jobs of one resident pipeline, one at a time, on a worker thread.

    Args:
        pipe: the loaded pipeline (:func:`vidax.load_pipeline`).
        model: the model id requests may name (``model`` field).
        store: the :class:`JobStore`; jobs it holds as queued or running are marked failed now
            (the process that ran them ended).
        queue_size: jobs that may wait behind the running one; a request beyond them gets 429.
    """

    def __init__(self, pipe: Any, model: str, store: JobStore, queue_size: int = 8):
        self.pipe, self.model, self.store, self.queue_size = pipe, model, store, queue_size
        self.cls, self.info = type(pipe), pipe.info
        self.options = self.cls.options()
        self.call_args = tuple(o.name for o in self.options)
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._running: str | None = None
        interrupted = store.fail_active("interrupted: the server stopped before the job finished", "interrupted")
        if interrupted:
            logger.warning("marked %d job(s) of an earlier run failed (interrupted)", interrupted)

    # ------------------------------------------------------------------ the API's operations
    def submit(self, fields: dict[str, Any], image_path: str | None = None, image_name: str = "",
               texts: Mapping[str, str] | None = None) -> dict:
        """Check a request and queue its job; returns the job. ``texts``: the text of each JSON
        number field as sent (:func:`~vidax.serve.fields.number_texts`), for the messages.

        Raises:
            RequestError: 400 for a field the pipeline's checks refuse (the message names the
                field), 429 when the queue is full.
        """
        from vidax.io.image import load_image

        model = fields.get("model")
        if model not in (None, "", self.model):
            raise RequestError(400, f"model={model!r} is not loaded; this server runs {self.model!r}", "model",
                               "model_not_found")
        request = Fields(fields, self.options, self.info.defaults.fps, image_name if image_path else None,
                         cache=self.cls.cache_reference, texts=texts)
        job_id = "video_" + uuid.uuid4().hex
        pending = _Pending(job_id, None)
        try:
            kw = request.call_keywords()
            if image_path is not None:
                if "image" not in self.call_args or "i2v" not in self.info.tasks:
                    raise RequestError(400, f"input_reference is given but {self.model} does not do "
                                       f"image-to-video (it does {', '.join(self.info.tasks)})", "input_reference")
                kw["image"] = load_image(image_path)
            for key, value in kw.items():  # the pipeline's other image keywords, uploaded as files
                if isinstance(value, Upload):
                    kw[key] = load_image(value.path, key)
            call = self.cls.check_call(self.info, progress=False, cancel=pending.cancel,
                                       callback=lambda i, n: self._stepped(pending, i + 1, n), **kw)
        except InputError as e:
            raise request.error(e) from None
        pending.cache = self._cache(request.given.get("cache"), call.num_inference_steps)
        pending.call, pending.fps = call, self.pipe.video_fps(call)  # the mp4's, as vidax generate's
        pending.request = request
        fps = float(pending.fps)
        fps = int(fps) if fps.is_integer() else fps  # 16, not 16.0, in the job's JSON
        job = {"id": job_id, "object": "video", "model": self.model, "status": QUEUED, "progress": 0,
               "created_at": int(time.time()), "completed_at": None, "expires_at": None,
               "size": f"{call.width}x{call.height}", "seconds": f"{(call.num_frames - 1) / fps:g}",
               "error": None, "prompt": call.prompts[0], "num_frames": call.num_frames, "fps": fps,
               "num_inference_steps": call.num_inference_steps, "step": 0, "seed": call.seed,
               "input_reference": image_name or None}
        with self._lock:
            if len(self._pending) > self.queue_size:  # the running job and queue_size waiting ones
                raise RequestError(429, f"the queue is full ({self.queue_size} jobs waiting behind the running "
                                   "one); retry when one has finished", None, "queue_full")
            self._pending[job_id] = pending
            self.store.put(job)
        self._queue.put(pending)
        return job

    def _cache(self, value: Any, steps: int) -> Any:
        """The step cache config of a request's ``cache`` field (the CLI's ``--cache`` syntax, the
        MagCache ratios inline), checked against the pipeline; None when not given.

        Raises:
            RequestError: 400 naming the field, its value and what is valid.
        """
        if value is None:
            return None
        from vidax.pipelines.step_cache import parse_cache_option

        try:
            if not isinstance(value, str):
                raise InputError(f"cache={value!r} must be a string: first_block:THRESHOLD, mag[:[r1, r2, ...]] or "
                                 "taylorseer")
            return self.pipe.check_cache(parse_cache_option(value, steps, name="cache", files=False), "cache")
        except InputError as e:
            raise RequestError(400, " ".join(str(e).split()), "cache") from None

    def _stepped(self, pending: _Pending, step: int, steps: int) -> None:
        """The call's step callback: the job's record keeps the step reached (and its progress),
        so a job whose server died keeps it."""
        pending.step = step
        self.store.update(pending.id, step=step, progress=_progress(step, steps))

    def get(self, job_id: str) -> dict | None:
        """The job with its live progress, or None for an unknown id."""
        job = self.store.get(job_id)
        pending = self._pending.get(job_id)
        if job is not None and pending is not None and job["status"] == IN_PROGRESS:
            job.update(_reached(pending.step, job))
        return job

    def list(self, limit: int = 20, after: str | None = None, newest_first: bool = True) -> tuple[list[dict], bool]:
        """Up to ``limit`` jobs (see :meth:`JobStore.list`), each with its live progress and its
        prompt cut to :data:`LISTED_PROMPT` characters (``GET /v1/videos/{id}`` gives it whole).

        Raises:
            RequestError: 400, ``after`` is no job's id.
        """
        jobs, more = self.store.list(limit, after, newest_first)
        return [_listed(self.get(j["id"]) or j) for j in jobs], more

    def cancel(self, job_id: str) -> dict | None:
        """Cancel a queued job now, a running one at its next check (before each denoising step,
        before each VAE decode chunk); a finished job is deleted with its video (:meth:`JobStore.delete`). Returns the
        job (or the OpenAI deletion object), None for an unknown id."""
        with self._lock:
            pending = self._pending.get(job_id)
            if pending is not None:
                pending.cancel.set()
                if job_id == self._running:
                    return self.get(job_id)
                del self._pending[job_id]
                job = _failed(self.store.get(job_id), "cancelled before it started", "cancelled")
                self.store.put(job)
                return job
        job = self.store.get(job_id)
        if job is None:
            return None
        self.store.delete(job_id)
        return {"id": job_id, "object": "video.deleted", "deleted": True}

    def counts(self) -> dict:
        """``{"queued": jobs waiting, "running": the running job's id or None}``."""
        with self._lock:
            return {"queued": len(self._pending) - (self._running is not None), "running": self._running}

    # ------------------------------------------------------------------ the worker
    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="vidax-serve-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Cancel the running job (at its next check) and every queued one, and wait for the
        worker to end."""
        with self._lock:
            for pending in self._pending.values():
                pending.cancel.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)
        self.store.fail_active("cancelled: the server stopped before the job finished", "cancelled")

    def _work(self) -> None:
        while (pending := self._queue.get()) is not None:
            with self._lock:
                if pending.id not in self._pending:
                    continue  # cancelled while queued
                job = {**self.store.get(pending.id), "status": IN_PROGRESS}
                self.store.put(job)
                self._running = pending.id
            self._run(pending, job)

    def _run(self, pending: _Pending, job: dict) -> None:
        from vidax.io.video import write_video

        try:
            if pending.cancel.is_set():
                raise Cancelled("before it started")
            if pending.cache is not None:  # this job's step cache (the worker runs one job at a time)
                self.pipe.disable_cache()
                self.pipe.enable_cache(pending.cache)
            try:
                out = self.pipe.generate(pending.call)
            finally:
                if pending.cache is not None:
                    self.pipe.disable_cache()
            if pending.cancel.is_set():
                raise Cancelled(f"after the VAE decode (all {job['num_inference_steps']} denoising steps done)")
            t0 = time.perf_counter()
            try:
                # The sound, where the model makes it, goes into the mp4 as its AAC track.
                write_video(out.frames[0], self.store.video_path(pending.id), fps=pending.fps,
                            audio=None if out.audio is None else out.audio[0], sample_rate=out.audio_sample_rate)
            except Exception as e:  # disk full, a codec error: the frames are kept as .npy, the error says where
                raise _Unwritten(self.store.folder, pending.id, out.frames, e) from None
            stats = {"compile_s": out.stats.compile_s, "call_s": out.stats.call_s,
                     "write_s": time.perf_counter() - t0}
            if out.stats.cache is not None:
                stats["cache"] = out.stats.cache.describe()
                if out.stats.cache.calibration is not None:
                    stats["mag_ratios"] = out.stats.cache.calibration
            job = {**job, "status": COMPLETED, "progress": 100, "step": job["num_inference_steps"],
                   "completed_at": int(time.time()), "stats": stats}
        except Cancelled as e:
            job = _failed({**job, **_reached(pending.step, job)}, str(e), "cancelled")
        except _Unwritten as e:
            job = _failed({**job, "step": job["num_inference_steps"]}, str(e), "write_failed")
        except VidaxError as e:
            message = pending.request.error(e).message if pending.request else str(e)
            job = _failed({**job, **_reached(pending.step, job)}, " ".join(message.split()), type(e).__name__)
        except Exception as e:  # a codec or disk error writing the video, a bug: the job fails, the server stays
            logger.exception("job %s failed", pending.id)
            job = _failed({**job, **_reached(pending.step, job)}, " ".join(f"{type(e).__name__}: {e}".split()),
                          "internal")
        with self._lock:
            self.store.put(job)
            self._pending.pop(pending.id, None)
            self._running = None
