"""The job records of ``vidax serve`` on disk: :class:`JobStore` (``<jobs_dir>/jobs.sqlite3``,
each unfinished job's request, the folder held by one server) and the denoising state of a
running batch (``<jobs_dir>/states/<batch>.npz``, :func:`save_state` / :func:`load_state`,
written atomically)."""

from __future__ import annotations

import glob
import json
import logging
import os
import sqlite3
import threading
import time
from typing import Any

import numpy as np

from vidax.errors import Arg, InputError
from vidax.serve.fields import RequestError

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
            self._db = sqlite3.connect(
                os.path.join(self.folder, self.FILE), check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, created_at REAL NOT NULL, "
                "status TEXT NOT NULL, data TEXT NOT NULL)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS requests (id TEXT PRIMARY KEY, data TEXT NOT NULL)")
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(jobs)")]
            if columns != self.COLUMNS:
                self._db.close()
                raise InputError(
                    arg,
                    f": {self.FILE} there is not vidax serve's (its table jobs has the columns "
                    f"{', '.join(columns)}; expected {', '.join(self.COLUMNS)}); give another "
                    "folder or move that file away",
                )
        except (OSError, sqlite3.Error) as e:
            self._lock_file.close()
            raise InputError(arg, f" cannot hold the job records ({e})") from None
        except InputError:
            self._lock_file.close()
            raise
        self._lock = threading.Lock()
        self._clear_stale()

    def _clear_stale(self) -> None:
        """Delete the temporary files a server killed mid-write left in the folder (held now, so
        no other writer is there): a state save's ``states/*.tmp`` (:func:`_save_atomically`)
        and a video write's ``.vidax-*`` (:func:`vidax.io.video.write_video`)."""
        folder = glob.escape(self.folder)
        stale = glob.glob(os.path.join(folder, "states", "*.tmp")) + glob.glob(os.path.join(folder, ".vidax-*"))
        stale = [path for path in stale if os.path.isfile(path)]
        for path in stale:
            _unlink(path)
        if stale:
            logger.warning("deleted %d temporary file(s) a stopped server left in %s", len(stale), self.folder)

    def video_path(self, job_id: str) -> str:
        return os.path.join(self.folder, f"{job_id}.mp4")

    def image_path(self, job_id: str) -> str:
        """Where an unfinished job's ``input_reference`` is kept (PNG, lossless)."""
        return os.path.join(self.folder, f"{job_id}.input.png")

    def upload_path(self, job_id: str, key: str) -> str:
        """Where an unfinished job's uploaded file ``key`` (``input_video``, ``last_image``) is kept,
        the bytes as sent."""
        return os.path.join(self.folder, f"{job_id}.{key}.upload")

    def state_path(self, batch_id: str) -> str:
        """Where a running batch's denoising state is saved."""
        return os.path.join(self.folder, "states", f"{batch_id}.npz")

    def state_paths(self) -> list[str]:
        return sorted(glob.glob(os.path.join(glob.escape(self.folder), "states", "*.npz")))

    def put_request(self, job_id: str, request: dict) -> None:
        """Keep what re-queues an unfinished job after a restart (its fields, the seed filled in)."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO requests VALUES (?, ?)", (job_id, json.dumps(request)))

    def get_request(self, job_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM requests WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def forget_request(self, job_id: str) -> None:
        """Drop a finished job's request and its kept image."""
        with self._lock:
            row = self._db.execute("SELECT data FROM requests WHERE id = ?", (job_id,)).fetchone()
            self._db.execute("DELETE FROM requests WHERE id = ?", (job_id,))
        _unlink(self.image_path(job_id))
        for key, value in ({} if row is None else json.loads(row[0])["fields"]).items():
            if isinstance(value, dict) and "upload" in value:
                _unlink(self.upload_path(job_id, key))

    def active(self) -> list[dict]:
        """The queued and running jobs, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT data FROM jobs WHERE status IN (?, ?) ORDER BY created_at, id", ACTIVE
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def put(self, job: dict) -> None:
        """Insert ``job``, or replace the record of its ``id`` (keeping the time it was first put,
        which orders the list: ``created_at`` counts whole seconds, as OpenAI's)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "status = excluded.status, data = excluded.data",
                (job["id"], time.time(), job["status"], json.dumps(job)),
            )

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
                    raise RequestError(
                        400,
                        f"after={after!r} is no job's id; give the id of a listed job (the last "
                        "of a page, to get the next)",
                        "after",
                    )
                query += f" WHERE (created_at, id) {cmp} (?, ?)"
                args = [row[0], after]
            rows = self._db.execute(
                f"{query} ORDER BY created_at {order}, id {order} LIMIT ?", (*args, limit + 1)
            ).fetchall()
        return [json.loads(r[0]) for r in rows[:limit]], len(rows) > limit

    def update(self, job_id: str, **fields: Any) -> None:
        """Set ``fields`` in the record of ``job_id`` (nothing for an unknown id)."""
        with self._lock:
            row = self._db.execute("SELECT data FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is not None:
                self._db.execute(
                    "UPDATE jobs SET data = ? WHERE id = ?", (json.dumps({**json.loads(row[0]), **fields}), job_id)
                )

    def delete(self, job_id: str) -> None:
        """Delete the job's record, its mp4 and the frames kept when the mp4 could not be written."""
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        self.forget_request(job_id)
        for path in [
            self.video_path(job_id),
            *glob.glob(os.path.join(glob.escape(self.folder), f"{job_id}.unwritten*")),
        ]:
            _unlink(path)

    def close(self) -> None:
        """Close the database and let another server take the folder."""
        with self._lock:
            self._db.close()
            self._lock_file.close()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


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
        raise InputError(
            arg, f" is in use by another vidax serve, pid {holder}; stop it or give another --jobs-dir"
        ) from None
    except OSError:
        f.close()
        raise
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def save_state(path: str, ids: np.ndarray, done: int, latents: Any, state: Any, cache: Any) -> None:
    """Save a batch's denoising state after step ``done`` to ``path`` (:func:`_save_atomically`):
    the ids of its jobs, ``done``, the leaves of ``(latents, state)`` (``leaves`` of them) and,
    with a step cache (``cache``: its :class:`~vidax.pipelines.step_cache.CacheState`), the
    cache's arrays after them and its host state as JSON (``cache_host``). Each array's dtype is
    named in ``dtypes``: one numpy cannot store (bfloat16, TaylorSeer's factors) is saved as
    its bits (unsigned integers of its size)."""
    import jax

    arrays = [np.asarray(a) for a in jax.tree.leaves((latents, state))]
    values: dict[str, Any] = dict(jobs=ids, done=done, leaves=len(arrays))
    if cache is not None:
        arrays += [np.asarray(a) for a in cache.arrays]
        values["cache_host"] = json.dumps(cache.host)
    values["dtypes"] = np.asarray([a.dtype.name for a in arrays])
    arrays = [a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" else a for a in arrays]
    _save_atomically(path, arrays, **values)


def load_state(path: str) -> tuple:
    """What :func:`save_state` saved: ``(done, arrays, cache)``, the call's ``resume`` (``cache``:
    the step cache's :class:`~vidax.pipelines.step_cache.CacheState`, None without one)."""
    import jax.numpy as jnp

    from vidax.pipelines.step_cache import CacheState

    with np.load(path) as saved:
        leaves = int(saved["leaves"])
        # a state of an earlier version names no dtypes (and holds no cache state)
        names = [str(n) for n in saved["dtypes"]] if "dtypes" in saved else [None] * leaves
        arrays = [saved[f"arr_{i}"] for i in range(len(names))]
        host = json.loads(str(saved["cache_host"])) if "cache_host" in saved else None
        done = int(saved["done"])
    arrays = [a if name is None or a.dtype.name == name else a.view(jnp.dtype(name)) for a, name in zip(arrays, names)]
    return done, arrays[:leaves], None if host is None else CacheState(arrays[leaves:], host)


def _save_atomically(path: str, arrays: list, **values: Any) -> None:
    """``np.savez`` of ``arrays`` (``arr_0``, ...) and ``values`` to ``path``: written to a
    temporary file beside it, fsync'd, then renamed over it (a crash leaves the old file or the
    new one, never a torn one)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, *arrays, **values)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
