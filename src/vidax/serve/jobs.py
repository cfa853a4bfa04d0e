"""The jobs of ``vidax serve``: records in SQLite (:mod:`vidax.serve.store`), mp4 files beside
them, one worker thread running them alone or in batches.

A job is the OpenAI video object (``id``, ``object``, ``model``, ``status``, ``progress``,
``created_at``, ``completed_at``, ``size``, ``seconds``, ``error``) plus vidax's fields
(``prompt``, ``num_frames``, ``fps``, ``num_inference_steps``, ``step``: denoising steps done,
``seed``: the seed used, ``task``: ``t2v``, ``i2v`` or ``v2v`` (what the request asked for:
an image, a video to extend, neither), ``pipeline``: the pipeline class that runs it,
``input_reference``: the image's file name, ``input_video``: the video's, and for a completed job
``stats``: seconds of the pipeline call, of its compiles, of writing the mp4; once it ran,
``batch``: how it was batched, :func:`~vidax.serve.batching.batch_report`). ``status`` goes ``queued`` ->
``in_progress`` -> ``completed`` or ``failed`` (a cancelled job is ``failed`` with the error code
``cancelled``, so a client waiting for one of OpenAI's final states sees one; the other codes are
the error's class in snake_case, ``out_of_memory_error``, ``numerical_error``...), and ``preset``:
the preset it runs under (None: none); ``warnings``, where the request's checks changed something
as ``vidax generate`` warns (``num_frames=2 is not of the form 4k+1; using 1, ...``), those lines.

Records live in ``<jobs_dir>/jobs.sqlite3`` (with each unfinished job's request, the seed drawn
filled in, its image as ``<id>.input.png``, its other uploads, the video to extend among them, as
``<id>.<field>.upload``), videos in ``<jobs_dir>/<id>.mp4`` (written
atomically by :func:`vidax.io.video.write_video`; a video made chunk by chunk grows as its chunks
finish and is published when the job completes, :mod:`vidax.serve.long_video`), and the denoising state of a running batch
(with a job's step cache, the cache's state too), saved every few steps and after the last, in
``<jobs_dir>/states/<batch>.npz`` (written to a temporary file,
fsync'd, renamed). So nothing is lost on a restart (a crash, ``kill -9``, a stop): finished
videos stay, queued jobs are queued again in their order, and a running batch resumes from its
last saved step and ends with the video an uninterrupted run makes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vidax.errors import Cancelled, InputError, OutOfMemoryError, VidaxError
from vidax.pipelines.presets import distilled_warning, presets_of
from vidax.serve.batching import batch_padding, batch_report, per_video_guidance
from vidax.serve.fields import Fields, RequestError, Upload
from vidax.serve.long_video import GrowingVideos, grows
from vidax.serve.pending import CheckWarnings, Pending
from vidax.serve.records import (
    Unwritten,
    events,
    failed_job,
    failure_record,
    listed_job,
    log_job_end,
    progress_percent,
)
from vidax.serve.store import COMPLETED, IN_PROGRESS, QUEUED, JobStore, load_state, save_state
from vidax.serve.tasks import TaskPipes

logger = logging.getLogger("vidax.serve")
#: A request's ``preset`` that runs its job under no preset, whatever the server's.
NO_PRESET = "none"


#: What a batch's jobs must share besides the shape and the steps: the call's other settings
#: (each job keeps its own prompt, negative prompt and seed; with :func:`per_video_guidance`
#: its own guidance too, the batch sharing only whether CFG runs).
_SHARED_SETTINGS = (
    "height",
    "width",
    "num_frames",
    "num_inference_steps",
    "max_sequence_length",
    "output_type",
    "decode_audio",
    "lora_scale",
    "do_cfg",
)
_GUIDANCE = ("guidance_scale", "guidance_scale_2")


class JobRunner:
    """Runs the jobs of one resident pipeline on a worker thread, alone or in batches.

    Args:
        pipe: the loaded pipeline (:func:`vidax.load_pipeline`).
        model: the model id requests may name (``model`` field).
        store: the :class:`JobStore`; the jobs it holds as queued or running are queued again
            now, in their order (a running batch to resume from its saved state); one whose
            request cannot be read again is marked failed (``interrupted``).
        queue_size: jobs that may wait beyond a running batch; a request beyond them gets 429.
        max_batch: the most jobs one denoising batch runs (1: one at a time). Jobs share a
            batch when their calls differ only in prompt, negative prompt and seed, and in
            guidance where :func:`per_video_guidance` (CFG on for all or none) (a text-to-video
            call of a family whose seed draws only the initial noise, without a step cache);
            each job's initial noise is drawn from its own seed, as when it runs alone.
        batch_window_ms: how long the worker, with fewer than ``max_batch`` such jobs queued,
            waits for more before it starts a batch.
        save_every: save a running batch's denoising state every this many steps (0: never).
        preview_every: make a preview image (:mod:`vidax.serve.preview`) every this many steps
            (0: never).
        preview_map: the latent-to-RGB map of the previews; None: fit now
            (:func:`~vidax.serve.preview.fit_preview_map`) when ``preview_every`` asks for
            previews (a pipeline whose decode the fit cannot follow makes none, with a warning).
        recognised: ``(preset, why)`` where the checkpoint or a LoRA called for the pipeline's
            preset (:func:`~vidax.pipelines.presets.recognise`): a job running that preset with
            many steps and CFG is warned about in the log
            (:func:`~vidax.pipelines.presets.distilled_warning`).

    Every job's preset is its request's ``preset`` field, else the pipeline's (``pipe.preset``,
    ``vidax serve --preset``); the request's other fields win over the preset's values. A job
    runs on the pipeline of its task (:class:`~vidax.serve.tasks.TaskPipes`): a request with an image or a video on a
    checkpoint whose family has a class per task (SkyReels-V2 diffusion forcing) runs that class
    over the loaded weights.
    """

    def __init__(
        self,
        pipe: Any,
        model: str,
        store: JobStore,
        queue_size: int = 8,
        max_batch: int = 1,
        batch_window_ms: float = 0,
        save_every: int = 5,
        preview_every: int = 0,
        preview_map: Any = None,
        recognised: tuple | None = None,
    ):
        self.recognised = recognised
        self.pipe, self.model, self.store, self.queue_size = pipe, model, store, queue_size
        self.max_batch, self.window = max_batch, batch_window_ms / 1000
        self.save_every, self.preview_every = save_every, preview_every
        self.cls, self.info = type(pipe), pipe.info
        self.per_video_guidance = per_video_guidance(pipe)
        self.data_parallel = 1 if pipe.mesh is None else dict(pipe.mesh.shape).get("data", 1)
        self.preview_map = preview_map if preview_map is not None or not preview_every else self._fit_preview_map()
        self.options = self.cls.options()
        self.call_args = tuple(o.name for o in self.options)
        self.tasks = TaskPipes(pipe, model)
        self._pending: dict[str, Pending] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: list[Pending] = []  # in the order they run
        self._running: list[Pending] = []
        self._resumed: int | None = None  # the saved step the running batch resumed at
        #: (bytes, what they are): the memory there was when no job ran, last measured
        #: (:meth:`_check_memory`); None before the first request.
        self.idle_memory: tuple[int, str] | None = None
        self._thread: threading.Thread | None = None
        self.stopping = False
        self._requeue()

    def _fit_preview_map(self) -> Any:
        """The pipeline's latent-to-RGB map (logged with its fit), or None where it cannot be fit."""
        from vidax.serve.preview import fit_preview_map

        t0 = time.perf_counter()
        try:
            found = fit_preview_map(self.pipe)
        except (VidaxError, ValueError) as e:
            logger.warning(
                "no previews: the latent-to-RGB map of %s could not be fit (%s)", self.model, " ".join(str(e).split())
            )
            return None
        logger.info(
            "previews: latent-to-RGB map fit to the VAE in %.1f s (held-out correlation %.2f)",
            time.perf_counter() - t0,
            found.r,
        )
        return found

    # ------------------------------------------------------------------ the API's operations
    def submit(
        self,
        fields: dict[str, Any],
        image_path: str | None = None,
        image_name: str = "",
        texts: Mapping[str, str] | None = None,
    ) -> dict:
        """Check a request and queue its job; returns the job. ``texts``: the text of each JSON
        number field as sent (:func:`~vidax.serve.fields.number_texts`), for the messages.

        Raises:
            RequestError: 400 for a field the pipeline's checks refuse (the message names the
                field), 429 when the queue is full.
        """
        pending, job = self._prepare("video_" + uuid.uuid4().hex, fields, image_path, image_name, texts)
        with self._lock:
            if len(self._pending) >= self.queue_size + self.max_batch:  # the running batch and queue_size waiting
                raise RequestError(
                    429,
                    f"the queue is full ({self.queue_size} job{'s' * (self.queue_size != 1)} waiting behind the running "
                    f"{'one' if self.max_batch == 1 else 'batch'}); retry when one has finished",
                    None,
                    "queue_full",
                )
            if pending.call.image is not None:
                pending.call.image.save(self.store.image_path(pending.id), format="PNG")
            kept = {}
            for key, value in fields.items():  # uploaded image keywords: their bytes kept beside the job
                if isinstance(value, Upload):
                    shutil.copyfile(value.path, self.store.upload_path(pending.id, key))
                    kept[key] = {"upload": value.name}
            self.store.put_request(
                pending.id,
                {
                    "fields": {**fields, **kept, "seed": pending.call.seed},
                    "texts": None if texts is None else dict(texts),
                    "image_name": image_name if image_path is not None else None,
                },
            )
            self.store.put(job)
            self._enqueue(pending)
            position = len(self._waiting)
        events.info(
            "%s queued: %s, %d frame%s, %d step%s%s (position %d)",
            job["id"],
            job["size"],
            job["num_frames"],
            "s" * (job["num_frames"] != 1),
            job["num_inference_steps"],
            "s" * (job["num_inference_steps"] != 1),
            f", preset {job['preset']}" if job["preset"] else "",
            position,
        )
        return job

    def _prepare(
        self,
        job_id: str,
        fields: dict[str, Any],
        image_path: str | None,
        image_name: str,
        texts: Mapping[str, str] | None,
    ) -> tuple[Pending, dict]:
        """The checked job of a request (not queued yet); ``image_path``: its ``input_reference``.

        Raises:
            RequestError: 400, a field the checks refuse.
        """
        model = fields.get("model")
        if model not in (None, "", self.model):
            raise RequestError(
                400, f"model={model!r} is not loaded; this server runs {self.model!r}", "model", "model_not_found"
            )
        pending = Pending(job_id, None)
        pending.pipe = self.tasks.request_pipe(fields, image_path is not None)
        cls = type(pending.pipe)
        request = Fields(
            fields,
            cls.options(),
            pending.pipe.info.defaults.fps,
            image_name if image_path else None,
            cache=cls.family.cache_reference,
            texts=texts,
            presets=bool(presets_of(cls)),
            every=self.tasks.accepted(),
        )
        call, preset_cache = self._checked_call(pending, request, image_path)
        pending.cache = self._cache(pending.pipe, request.given.get("cache"), call.num_inference_steps) or preset_cache
        if self.recognised is not None and pending.preset == self.recognised[0]:
            warning = distilled_warning(*self.recognised, call)
            if warning:
                events.warning("%s: %s", job_id, warning)
        # the mp4's, as vidax generate's: the request's fps, else the model's
        pending.call = call
        pending.fps = request.fps if "fps" in request.given else pending.pipe.video_fps(call)
        pending.request = request
        pending.key = self._batch_key(pending)
        plan = getattr(cls.family, "chunks", None)  # a long video's chunks, known from the checked call
        pending.chunks = 1 if plan is None else len(plan(pending.pipe.info, call))
        video = fields.get("input_video")
        return pending, self._queued_job(pending, image_name, video.name if video is not None else None)

    def _checked_call(self, pending: Pending, request: Fields, image_path: str | None) -> tuple[Any, Any]:
        """``(call, preset_cache)``: the pipeline's checked call of ``request`` (its images read,
        under its preset, its memory estimate checked) and the preset's step cache where the
        request turned none on (None: none).

        Raises:
            RequestError: 400, a field the checks refuse (named as the request spells it).
        """
        from vidax.io.image import load_image
        from vidax.pipelines.options import VIDEO_FILE
        from vidax.pipelines.options import read_input_file as read_file

        pipe = pending.pipe
        cls = type(pipe)
        try:
            kw = request.call_keywords()
            self.tasks.check_inputs(request, cls)
            if image_path is not None:
                kw["image"] = load_image(image_path)
            if "input_video" in request.given:  # uint8 (F, H, W, 3), as vidax generate --video reads it
                kw["video"] = read_file(VIDEO_FILE, "video", request.given["input_video"].path)
            for key, value in kw.items():  # the pipeline's other image keywords, uploaded as files
                if isinstance(value, Upload):
                    kw[key] = load_image(value.path, key)
            kw, applied = self._preset(pending, request, kw)
            chunked = getattr(cls.family, "chunked_length", None)  # a video made chunk by chunk: its defaults
            said = None
            if chunked is not None:
                kw, said = chunked(pipe.info, kw)
            with CheckWarnings(request) as warned:  # what the checks change (num_frames rounded), said in the job
                call = cls.check_call(
                    pipe.info,
                    progress=False,
                    cancel=pending.cancel,
                    callback=lambda i, n: self._stepped([pending], i + 1, n),
                    **kw,
                )
            pending.warnings = warned.messages + ([] if said is None else [said.render(request.spell)])
            self._check_memory(pipe, call)
            preset_cache = pending.preset.cache_config(cls, call.num_inference_steps) if "cache" in applied else None
        except (InputError, OutOfMemoryError) as e:
            raise request.error(e) from None
        return call, preset_cache

    def _queued_job(self, pending: Pending, image_name: str, video_name: str | None) -> dict:
        """The record of the checked job ``pending``, queued (the OpenAI video object and vidax's
        fields, see the module's docstring)."""
        call = pending.call
        fps = float(pending.fps)
        fps = int(fps) if fps.is_integer() else fps  # 16, not 16.0, in the job's JSON
        return {
            "id": pending.id,
            "object": "video",
            "model": self.model,
            "status": QUEUED,
            "progress": 0,
            "created_at": int(time.time()),
            "completed_at": None,
            "expires_at": None,
            "size": f"{call.width}x{call.height}",
            "seconds": f"{(call.num_frames - 1) / fps:g}",
            "error": None,
            "prompt": call.prompts[0],
            "num_frames": call.num_frames,
            "fps": fps,
            "num_inference_steps": call.num_inference_steps,
            "step": 0,
            "seed": call.seed,
            "task": call.task,
            "pipeline": type(pending.pipe).__name__,
            "input_reference": image_name or None,
            "input_video": video_name,
            "preset": None if pending.preset is None else pending.preset.name,
            **({"warnings": pending.warnings} if pending.warnings else {}),
        }

    def _preset(self, pending: Pending, request: Fields, kw: dict[str, Any]) -> tuple[dict[str, Any], dict]:
        """``(kw, applied)``: the call keywords ``kw`` over those of the job's preset (the
        request's ``preset``, ``"none"`` for none; else the pipeline's), the preset's values that
        apply; the preset and its scheduler set in ``pending``.

        Raises:
            RequestError: 400, ``preset`` is not a preset of the family (or not a string).
        """
        from vidax.pipelines.presets import call_scheduler, find_preset, preset_call

        name = request.given.get("preset")
        try:
            if name is not None and not isinstance(name, str):
                raise InputError(f"preset must be a string (a preset's name), got {json.dumps(name)}")
            if name is None:  # the server's (--preset, or the one recognised)
                pending.preset = self.pipe.preset
            elif name.strip().lower() == NO_PRESET:  # none for this job, under a server's --preset too
                pending.preset = None
            else:
                pending.preset = find_preset(name.strip(), self.cls)
            pending.scheduler = call_scheduler(pending.preset, pending.pipe)
        except InputError as e:
            raise RequestError(400, " ".join(str(e).split()), "preset") from None
        return preset_call(pending.preset, kw, cache_given="cache" in request.given)

    def _check_memory(self, pipe: Any, call: Any) -> None:
        """Refuse ``call`` of ``pipe`` when its memory estimate does not fit in the memory there is with the
        weights loaded and no job running: measured now when none runs, else the last such
        measure (a running job's activations are free again when this one runs)
        (:func:`~vidax.pipelines.memory.check_memory`, its hints the request's
        fields only).

        Raises:
            OutOfMemoryError: naming the fields to change and the size that fits.
        """
        from vidax.pipelines.memory import available_memory, check_memory

        with self._lock:
            if not self._running:
                self.idle_memory = available_memory()
            idle = self.idle_memory
        check_memory(
            type(pipe),
            pipe.info,
            call,
            dtype=pipe.dtype,
            loaded=True,
            devices=1 if pipe.mesh is None else pipe.mesh.size,
            vae_tiling=getattr(pipe.vae, "use_tiling", False),
            available=idle,
            anyway=None,
            also="",
        )

    def _batch_key(self, pending: Pending) -> tuple | None:
        """What a job's batch-mates must share (on a data-parallel mesh also the key of a job that
        runs alone but may be padded, :func:`~vidax.serve.batching.batch_padding`), or None when it runs alone as it is:
        with a step cache (its state is the call's), an image, several videos, or a family that
        draws more than the initial noise from the seed (LTX-Video's decode noise, LTX-2's
        latent noise, CogVideoX's DPM step noise)."""
        call = pending.call
        if (
            (self.max_batch < 2 and self.data_parallel < 2)
            or pending.cache is not None
            or call.task != "t2v"
            or call.num_videos_per_prompt != 1
        ):
            return None
        if ".ltx" in self.cls.__module__ or type(self.pipe.scheduler).__name__ == "CogVideoXDPMScheduler":
            return None
        guidance = () if self.per_video_guidance else tuple(getattr(call, name) for name in _GUIDANCE)
        preset = None if pending.preset is None else pending.preset.name  # its sampler
        return (
            *(getattr(call, name) for name in _SHARED_SETTINGS),
            *guidance,
            repr(sorted(call.extra.items())),
            preset,
        )

    def _enqueue(self, pending: Pending) -> None:
        # with self._lock held
        self._pending[pending.id] = pending
        self._waiting.append(pending)
        self._wake.notify_all()

    def _requeue(self) -> None:
        """Queue again the jobs the store holds as queued or running (see the class)."""
        states = {}
        for path in self.store.state_paths():
            try:
                with np.load(path) as saved:
                    states.update((str(i), (path, int(saved["done"]))) for i in saved["jobs"])
            except (OSError, ValueError, KeyError) as e:
                logger.warning("ignored the saved denoising state %s (%s)", path, e)
                os.unlink(path)
        again = failed = 0
        for job in self.store.active():
            request = self.store.get_request(job["id"])
            try:
                if request is None:
                    raise RequestError(500, "its request was not kept (a server of an earlier version ran it)")
                image = self.store.image_path(job["id"]) if request.get("image_name") else None
                fields = {
                    key: Upload(self.store.upload_path(job["id"], key), value["upload"])
                    if isinstance(value, dict) and "upload" in value
                    else value
                    for key, value in request["fields"].items()
                }
                pending, _ = self._prepare(
                    job["id"], fields, image, request.get("image_name") or "", request.get("texts")
                )
            except (RequestError, OSError) as e:
                failed += 1
                self.store.put(
                    failed_job(
                        job,
                        f"interrupted: the server stopped before the job finished, and it could "
                        f"not be queued again ({getattr(e, 'message', e)})",
                        "interrupted",
                    )
                )
                continue
            pending.resume, pending.step = states.get(job["id"], (None, 0))
            pending.progress = progress_percent(pending.step, job["num_inference_steps"])
            events.info(
                "%s queued again after a restart%s",
                job["id"],
                f" (resumes after denoising step {pending.step})" if pending.resume else "",
            )
            again += 1
            with self._lock:
                self.store.put(
                    {
                        **job,
                        "status": QUEUED,
                        "step": pending.step,
                        "progress": pending.progress,
                    }
                )
                self._enqueue(pending)
        for path in {path for path, _ in states.values()} - {p.resume for p in self._pending.values()}:
            os.unlink(path)
        if again or failed:
            logger.warning(
                "queued again %d job(s) of an earlier run%s",
                again,
                f"; {failed} could not be (failed, interrupted)" if failed else "",
            )

    def _cache(self, pipe: Any, value: Any, steps: int) -> Any:
        """The step cache config of a request's ``cache`` field (the CLI's ``--cache`` syntax, the
        MagCache ratios inline), checked against ``pipe``; None when not given.

        Raises:
            RequestError: 400 naming the field, its value and what is valid.
        """
        if value is None:
            return None
        from vidax.pipelines.step_cache import parse_cache_option

        try:
            if not isinstance(value, str):
                raise InputError(
                    f"cache={value!r} must be a string: first_block:THRESHOLD, mag[:[r1, r2, ...]] or taylorseer"
                )
            return pipe.check_cache(parse_cache_option(value, steps, name="cache", files=False), "cache")
        except InputError as e:
            raise RequestError(400, " ".join(str(e).split()), "cache") from None

    def _stepped(self, batch: list[Pending], step: int, steps: int) -> None:
        """The call's step callback (``step`` of ``steps`` in the chunk being denoised; a step
        no later than the last one reported starts a long video's next chunk): each job's record
        keeps the step reached and the whole job's progress (:func:`progress_percent`), so a job
        whose server died keeps it; a job cancelled while its batch runs on keeps the record made
        then."""
        for pending in self._live(batch):
            if step <= pending.step and pending.chunk_index + 1 < pending.chunks:
                pending.chunk_index += 1
            pending.step = step
            pending.progress = progress_percent(step, steps, pending.chunk_index, pending.chunks)
            self.store.update(pending.id, **pending.reached())

    def _chunked(self, batch: list[Pending], chunk: Any, grown: GrowingVideos | None = None) -> None:
        """The call's chunk callback (the family's ``CHUNK_CALLBACK``): with ``grown``, each job's
        frames of the chunk (its row of ``chunk.frames``) appended to its mp4 (a job cancelled
        meanwhile: its file removed); then each job's record keeps the last chunk finished
        (``chunk``, :meth:`~vidax.models.skyreels_v2.long_video.FinishedChunk.progress`), a
        ``chunk`` event."""
        live = self._live(batch)
        if grown is not None:
            for i, pending in enumerate(batch):
                if pending in live:
                    grown.append(pending.id, chunk.frames[i])
                else:
                    grown.drop(pending.id)
        for pending in live:
            pending.chunk = chunk.progress()
            self.store.update(pending.id, chunk=pending.chunk)

    def _live(self, batch: list[Pending]) -> list[Pending]:
        """The jobs of ``batch`` not finished yet (not cancelled while the batch runs on)."""
        with self._lock:
            return [p for p in batch if p.id in self._pending]

    def get(self, job_id: str) -> dict | None:
        """The job with its live progress, or None for an unknown id."""
        job = self.store.get(job_id)
        pending = self._pending.get(job_id)
        if job is not None and pending is not None and job["status"] == IN_PROGRESS:
            job.update(pending.reached())
        return job

    def events(self, job_id: str) -> dict | None:
        """What ``GET /v1/videos/{id}/events`` streams: the job (:meth:`get`), its place in the
        queue (``position``, 1: next to run; None once it runs) and its latest previews (oldest
        first); None for an unknown id."""
        job = self.get(job_id)
        if job is None:
            return None
        with self._lock:
            pending = self._pending.get(job_id)
            position = next((i + 1 for i, p in enumerate(self._waiting) if p.id == job_id), None)
        return {"job": job, "position": position, "previews": [] if pending is None else list(pending.previews)}

    def list(self, limit: int = 20, after: str | None = None, newest_first: bool = True) -> tuple[list[dict], bool]:
        """Up to ``limit`` jobs (see :meth:`JobStore.list`), each with its live progress and its
        prompt cut to :data:`LISTED_PROMPT` characters (``GET /v1/videos/{id}`` gives it whole).

        Raises:
            RequestError: 400, ``after`` is no job's id.
        """
        jobs, more = self.store.list(limit, after, newest_first)
        return [listed_job(self.get(j["id"]) or j) for j in jobs], more

    def cancel(self, job_id: str) -> dict | None:
        """Cancel a queued job now, a running one at its next check (before each denoising step,
        before each VAE decode chunk; in a batch with other jobs running on, now, its record
        saying the batch it ran in, the batch going on without it); a finished job is deleted
        with its video (:meth:`JobStore.delete`). Returns the job (or the OpenAI deletion
        object), None for an unknown id."""
        with self._lock:
            pending = self._pending.get(job_id)
            if pending is not None:
                pending.cancel.set()
                job = self.store.get(job_id)
                if pending in self._running:
                    if all(p.cancel.is_set() for p in self._running):  # the call stops at its next check
                        self.store.update(job_id, cancel_requested=True)
                        events.info("%s cancelling: stops at the next step", job_id)
                        return self.get(job_id)
                    message = pending.in_chunk(
                        f"cancelled after denoising step {pending.step} of {job['num_inference_steps']}"
                        if pending.step
                        else "cancelled before denoising step 1"
                    )
                    job = {
                        **failed_job({**job, **pending.reached()}, message, "cancelled"),
                        "batch": batch_report(
                            self._running, self._running.index(pending), self._resumed, self.data_parallel
                        ),
                    }
                else:
                    self._waiting.remove(pending)
                    job = failed_job(job, "cancelled before it started", "cancelled")
                del self._pending[job_id]
                log_job_end(job)
                self.store.put(job)
                self.store.forget_request(job_id)
                return job
        job = self.store.get(job_id)
        if job is None:
            return None
        self.store.delete(job_id)
        return {"id": job_id, "object": "video.deleted", "deleted": True}

    def counts(self) -> dict:
        """``{"queued": jobs waiting, "running": the (first) running job's id or None}``."""
        with self._lock:
            return {"queued": len(self._waiting), "running": self._running[0].id if self._running else None}

    # ------------------------------------------------------------------ the worker
    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="vidax-serve-worker", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        """Mark the runner stopping, without waiting (it takes no lock: a signal handler may call
        it): the running batch stops at its next check and the event streams end; :meth:`stop`
        does the rest."""
        self.stopping = True

    def stop(self, timeout: float | None = None) -> None:
        """Stop the running batch at its next check and wait for the worker to end. The queued
        jobs stay queued and the running ones go back to the queue (with the state saved last),
        for the next server on the jobs folder."""
        with self._lock:
            self.stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._run(batch)

    def _next_batch(self) -> list[Pending] | None:
        """The next jobs to run together (marked running), or None when stopping."""
        with self._lock:
            while True:
                while not self._waiting and not self.stopping:
                    self._wake.wait()
                if self.stopping:
                    return None
                batch = self._gather()
                if batch:
                    break
            for pending in batch:
                self._waiting.remove(pending)
            self._running, self._resumed = batch, None
            for pending in batch:
                self.store.put({**self.store.get(pending.id), "status": IN_PROGRESS})
            return batch

    def _gather(self) -> list[Pending]:
        # with self._lock held: the first waiting job and those that may join it, waiting up to
        # the batch window for more; [] when the first was cancelled meanwhile.
        first = self._waiting[0]
        if first.resume is not None:  # the batch whose state was saved, as it was
            with np.load(first.resume) as saved:
                members = [str(i) for i in saved["jobs"]]
            batch = [self._pending.get(i) for i in members]
            if all(p is not None and p in self._waiting for p in batch):
                return batch
            logger.warning("the saved state of %s does not fit the jobs queued now; they start over", first.resume)
            for pending in (p for p in batch if p is not None):
                pending.resume, pending.step = None, 0
            os.unlink(first.resume)
        if first.key is None:
            return [first]
        deadline = time.monotonic() + self.window
        while True:
            batch = [p for p in self._waiting if p.key == first.key and p.resume is None][: self.max_batch]
            left = deadline - time.monotonic()
            if len(batch) == self.max_batch or left <= 0 or self.stopping:
                return batch
            self._wake.wait(left)
            if first not in self._waiting:
                return []

    def _batched_call(self, batch: list[Pending], state_path: str, grown: GrowingVideos | None = None) -> Any:
        """One call running every job of ``batch``: the first's settings, each job's prompt,
        negative prompt, initial noise (drawn from its own seed, as when it runs alone) and
        guidance (:attr:`~vidax.pipelines.base.Call.video_guidance`, where they differ); on a
        data-parallel mesh the last job's call again for each row of :func:`~vidax.serve.batching.batch_padding` (their
        videos are not kept). A pipeline that makes its video chunk by chunk reports each chunk
        (:meth:`_chunked`); with ``grown``, each job's chunks are appended to its growing mp4 and
        the call keeps none (the family's ``CHUNK_KEEP`` False)."""
        import jax

        calls = [p.call for p in batch]
        call = calls[0]
        calls += [calls[-1]] * batch_padding(batch, self.data_parallel)
        if len(calls) > 1:
            noise = jax.tree.map(
                lambda *a: np.concatenate([np.asarray(x) for x in a]),
                *[batch[0].pipe.hooks.initial_noise(c) for c in calls],
            )
            streams = type(batch[0].pipe).family.latent_streams
            first, others = (
                (noise, {})
                if not isinstance(noise, dict)
                else (noise[streams[0]], {k: v for k, v in noise.items() if k != streams[0]})
            )
            guidance = tuple((c.guidance_scale, c.guidance_scale_2) for c in calls)
            call = dataclasses.replace(
                call,
                prompts=[c.prompts[0] for c in calls],
                negatives=[c.negatives[0] for c in calls],
                latents=first,
                stream_latents=others,
                given=call.given | {"latents"},
                video_guidance=guidance if len(set(guidance)) > 1 else None,
            )
        resume = None if batch[0].resume is None else load_state(batch[0].resume)
        family = type(batch[0].pipe).family
        chunked = getattr(family, "CHUNK_CALLBACK", None)
        if chunked in type(batch[0].pipe).call_args():  # a long video: each finished chunk is an event
            extra = {**call.extra, chunked: lambda c: self._chunked(batch, c, grown)}
            if grown is not None:
                extra[family.CHUNK_KEEP] = False
            call = dataclasses.replace(call, extra=extra)
        return dataclasses.replace(
            call,
            callback=lambda i, n: self._stepped(batch, i + 1, n),
            cancel=lambda: self.stopping or all(p.cancel.is_set() for p in batch),
            on_state=self._on_state(batch, state_path, call),
            resume=resume,
        )

    def _on_state(self, batch: list[Pending], path: str, call: Any) -> Callable | None:
        """The call's ``on_state``: the state saved every :attr:`save_every` steps (with a step
        cache, its state beside the loop's, :func:`save_state`), a preview made every
        :attr:`preview_every` steps (:class:`~vidax.serve.preview.Previewer`)."""
        steps = call.num_inference_steps
        # a pipeline whose loop does not resume from a saved state (a video made in chunks) saves none
        save = self.save_every > 0 and getattr(type(batch[0].pipe).family, "RESUMES_STATE", True)
        previewer = None
        if self.preview_every and self.preview_map is not None:
            from vidax.serve.preview import Previewer

            previewer = Previewer(batch[0].pipe, call, self.preview_map, self.preview_every)
        if not (save or previewer):
            return None
        ids = np.asarray([p.id for p in batch])

        def on_state(done: int, latents: Any, state: Any, cache: Any = None) -> None:
            # every save_every steps, and after the last (a crash in the decode then redoes only the decode)
            if save and (done % self.save_every == 0 or done == steps):
                save_state(path, ids, done, latents, state, cache)
                for pending in self._live(batch):
                    self.store.update(pending.id, saved_step=done)
            made = None if previewer is None else previewer.observe(done, latents, state)
            if made is not None:
                urls, of = made
                live = self._live(batch)
                for pending, url in zip(batch, urls):
                    if pending in live:
                        pending.previews.append({"step": done, "of": of, "image": url})

        return on_state

    def _run(self, batch: list[Pending]) -> None:
        from vidax.io.video import write_video

        state_path = self.store.state_path(batch[0].id)
        jobs = {p.id: self.store.get(p.id) for p in batch}
        resumed = grown = None
        try:
            if grows(batch[0].pipe, batch[0].call):  # each chunk appended to the job's mp4 as it ends
                grown = GrowingVideos(self.store, batch)
            call = self._batched_call(batch, state_path, grown)
            resumed = self._resumed = None if call.resume is None else call.resume[0]
            for pending in batch:
                events.info(
                    "%s %s of %d%s",
                    pending.id,
                    "started: denoising step 1" if resumed is None else f"resumed after denoising step {resumed}",
                    call.num_inference_steps,
                    f" (batch of {len(batch)})" if len(batch) > 1 else "",
                )
            pipe = batch[0].pipe  # the jobs of a batch share their task
            loaded = pipe.scheduler, pipe.cache_config
            # the batch's preset's sampler; its job's step cache (a job with one runs alone), else none
            pipe.scheduler = loaded[0] if batch[0].scheduler is None else batch[0].scheduler
            pipe.cache_config = batch[0].cache
            try:
                out = pipe.generate(call)
            except InputError as e:
                if call.resume is None or "saved denoising state" not in str(e):
                    raise
                logger.warning("%s; the batch of %s starts over", e, ", ".join(jobs))
                resumed = self._resumed = None
                out = pipe.generate(dataclasses.replace(call, resume=None))
            finally:
                pipe.scheduler, pipe.cache_config = loaded
            results = {}
            for i, pending in enumerate(batch):
                results[pending.id] = self._finish(pending, jobs[pending.id], out, i, write_video, grown)
        except Exception as e:
            if grown is not None:
                grown.abort()
            if self.stopping and isinstance(e, Cancelled):  # the jobs wait for the next server
                with self._lock:
                    for pending in batch:
                        if pending.id in self._pending:
                            self.store.update(pending.id, status=QUEUED)
                    self._running = []
                return
            results = {p.id: failure_record(p, jobs[p.id], e) for p in batch}
        with self._lock:
            for i, pending in enumerate(batch):
                if pending.id not in self._pending:
                    continue  # cancelled while its batch ran on: recorded then
                job = {**results[pending.id], "batch": batch_report(batch, i, resumed, self.data_parallel)}
                log_job_end(job)
                self.store.put(job)
                self.store.forget_request(pending.id)
                self._pending.pop(pending.id, None)
            self._running = []
            if grown is not None:  # the files of jobs cancelled meanwhile
                grown.abort()
            if os.path.exists(state_path):
                os.unlink(state_path)
            for pending in batch:
                if pending.resume is not None and os.path.exists(pending.resume):
                    os.unlink(pending.resume)

    def _finish(
        self, pending: Pending, job: dict, out: Any, index: int, write_video: Callable, grown: GrowingVideos | None
    ) -> dict:
        """The record of a job whose call ran: its mp4 written (row ``index`` of the output), or
        with ``grown`` its growing mp4 published."""
        try:
            if pending.cancel.is_set():
                raise Cancelled(f"after the VAE decode (all {job['num_inference_steps']} denoising steps done)")
            t0 = time.perf_counter()
            if grown is not None:
                write_s = grown.publish(pending.id)
            else:
                try:
                    # The sound, where the model makes it, goes into the mp4 as its AAC track.
                    write_video(
                        out.frames[index],
                        self.store.video_path(pending.id),
                        fps=pending.fps,
                        audio=None if out.audio is None else out.audio[index],
                        sample_rate=out.audio_sample_rate,
                    )
                except Exception as e:  # disk full, a codec error: the frames are kept as .npy, the error says where
                    raise Unwritten(self.store.folder, pending.id, out.frames[index : index + 1], e) from None
                write_s = time.perf_counter() - t0
        except Exception as e:
            return failure_record(pending, job, e)
        stats = {"compile_s": out.stats.compile_s, "call_s": out.stats.call_s, "write_s": write_s}
        if out.stats.cache is not None:
            stats["cache"] = out.stats.cache.describe()
            if out.stats.cache.calibration is not None:
                stats["mag_ratios"] = out.stats.cache.calibration
        return {
            **job,
            "status": COMPLETED,
            "progress": 100,
            "step": job["num_inference_steps"],
            "completed_at": int(time.time()),
            "stats": stats,
            **({} if pending.chunk is None else {"chunk": pending.chunk}),
        }
