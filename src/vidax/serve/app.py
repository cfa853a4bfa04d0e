"""The ASGI app of ``vidax serve`` (starlette): OpenAI's ``/v1/videos`` API and a page at ``/``.

=============================  ===================================================================
``POST /v1/videos``            check a request (JSON, or a form with the image as the multipart
                               file ``input_reference``, a video to extend as ``input_video``)
                               and queue its job -> the job; 400 with the one-line error naming
                               the field; 429 when the queue is full
``GET /v1/videos``             the jobs, newest first (``limit`` 1..100, ``after`` a job's id,
                               ``order`` desc / asc) -> ``{"object": "list", "data", "first_id",
                               "last_id", "has_more"}``, each prompt cut to 200 characters
``GET /v1/videos/{id}``        the job: queued / in_progress (``step`` of ``num_inference_steps``,
                               ``progress`` %) / completed / failed (``error.message``)
``GET /v1/videos/{id}/content``  the mp4 of a completed job (409 before, code ``not_ready``; 409
                               for a failed job, code ``video_failed``, with its error; 404
                               unknown id)
``GET /v1/videos/{id}/events``  server-sent events until the job ends: ``queued``
                               (``position``, 1: next), ``progress`` (``step``, ``num_inference_steps``,
                               ``progress`` %), ``preview`` (``step``, ``of``: ``estimate`` or
                               ``latents``, ``image``: a PNG data URL, :mod:`vidax.serve.preview`),
                               ``chunk`` as a long video's chunks finish (the last one: ``chunk``
                               of ``of``, ``frames`` done of ``num_frames``; diffusion forcing;
                               also the job's ``chunk``),
                               then ``done`` or ``failed`` (the job), or ``stopping`` (``id``,
                               ``message``) when the server shuts down first
``DELETE /v1/videos/{id}``     cancel a queued job (-> the failed job), or a running one between
                               steps (-> the job, ``cancel_requested: true``); a finished job is
                               deleted with its video
``GET /v1/models``             the loaded model: id, tasks (``image`` / ``video``: whether it
                               takes ``input_reference`` / ``input_video``), defaults, size
                               multiple, the request fields of its tasks, its preset (``vidax serve --preset`` or the one
                               recognised, ``preset_recognised_from``) and the family's presets
``GET /health``                ``{"status": "ok", "model", "queued", "running"}``
``GET /``                      the page (``page.html``)
=============================  ===================================================================

Every request is checked first (:class:`_Guard`): with an API key (``vidax serve --api-key`` /
``VIDAX_API_KEY``) every request but the page itself (``GET /``, static, holding no data) needs
``Authorization: Bearer <key>`` (the scheme in any case; 401 with ``WWW-Authenticate: Bearer`` otherwise; the key
compared in constant time, :func:`hmac.compare_digest`); a ``Host`` header other than the bound address
or a localhost name (``127.0.0.1``, ``localhost``, ``[::1]``) with the bound port is 403 (DNS
rebinding), as is a POST / DELETE whose ``Origin`` header is not the server's own origin (a
cross-site form or fetch); a body over :data:`MAX_BODY` bytes is 413. Errors, 404 and 405 of
unknown paths and methods included, are OpenAI's error object.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import os
import tempfile
from importlib.resources import files
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from vidax.pipelines.presets import presets_of
from vidax.serve.fields import RequestError, Upload, number_texts
from vidax.serve.jobs import JobRunner
from vidax.serve.store import COMPLETED, FAILED

#: Seconds between two looks at a job whose events are streamed.
EVENTS_POLL = 0.1

#: The largest request body accepted (bytes): an image or a short clip and the fields.
MAX_BODY = 16 * 2**20
_LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")
#: The fields sent as multipart files: the image, the video to extend, the last frame.
_FILES = ("input_reference", "input_video", "last_image")
_WILDCARD = ("0.0.0.0", "::", "")


class _Guard:
    """ASGI middleware refusing, in OpenAI's error shape, a request whose ``Host`` is not
    ``host`` or a localhost name with port ``port`` (any name when ``host`` is a wildcard
    address; any port when ``port`` is None), a POST / DELETE / PUT / PATCH whose ``Origin`` is
    not ``http://<its Host>`` (403), and a body over ``max_body`` bytes (413; the body is read
    here and handed on). With ``api_key``, a request other than ``GET /`` without
    ``Authorization: Bearer <api_key>`` is 401 (before the body is read)."""

    def __init__(self, app: Any, host: str, port: int | None, max_body: int = MAX_BODY, api_key: str | None = None):
        self.app, self.port, self.max_body = app, port, max_body
        self.key = None if api_key is None else api_key.encode()
        host = host.strip("[]").lower()
        self.names = None if host in _WILDCARD else {host, *_LOCAL_NAMES}

    def _unauthorized(self, headers: dict[str, str], method: str, path: str) -> RequestError | None:
        if self.key is None or (method in ("GET", "HEAD") and path == "/"):
            return None
        given = headers.get("authorization")
        scheme, _, key = (given or "").partition(" ")
        key = key.lstrip(" ")  # one or more spaces after the scheme (RFC 9110 11.4: 1*SP)
        bearer = scheme.lower() == "bearer"  # the scheme is case-insensitive (RFC 9110 11.1)
        if bearer and hmac.compare_digest(key.encode("latin-1"), self.key):
            return None
        reason = (
            "no Authorization header"
            if given is None
            else "the Authorization header's key is not this server's"
            if bearer
            else "the Authorization header is not 'Bearer <key>'"
        )
        return RequestError(
            401,
            f"{reason}: send 'Authorization: Bearer <key>' with the server's API key "
            "(vidax serve --api-key / VIDAX_API_KEY)",
            None,
            "invalid_api_key",
        )

    def _refusal(self, headers: dict[str, str], method: str) -> RequestError | None:
        given = headers.get("host", "")
        name, _, port = given.rpartition(":") if given.rpartition(":")[2].isdigit() else (given, "", "")
        name = name.strip("[]").lower()
        if (self.names is not None and name not in self.names) or (self.port is not None and port != str(self.port)):
            return RequestError(
                403,
                f"Host {given!r} is not this server's address; use the address it listens on",
                None,
                "forbidden_host",
            )
        origin = headers.get("origin")
        if (
            method in ("POST", "DELETE", "PUT", "PATCH")
            and origin is not None
            and origin.lower() != f"http://{given}".lower()
        ):
            return RequestError(
                403,
                f"Origin {origin!r} is another site: only this server's own page may change its jobs",
                None,
                "forbidden_origin",
            )
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            return self._too_large()
        return None

    def _too_large(self) -> RequestError:
        return RequestError(413, f"the request body is over {self.max_body} bytes", None, "too_large")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(headers, scope["method"]) or self._unauthorized(headers, scope["method"], scope["path"])
        if refusal is None and scope["method"] in ("POST", "PUT", "PATCH"):
            body, more = bytearray(), True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > self.max_body:
                    refusal = self._too_large()
                    break
            if refusal is None:
                messages = [{"type": "http.request", "body": bytes(body), "more_body": False}]

                async def receive_body() -> dict:
                    return messages.pop() if messages else await receive()

                return await self.app(scope, receive_body, send)
        if refusal is not None:
            return await _error(refusal)(scope, receive, send)
        return await self.app(scope, receive, send)


def _error(e: RequestError) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="vidax"'} if e.status == 401 else None
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


def _not_found(job_id: str) -> JSONResponse:
    return _error(RequestError(404, f"no video with id {job_id!r}", "video_id", "not_found"))


async def _fields(request: Request, upload_dir: str) -> tuple[dict[str, Any], str | None, str, dict[str, str] | None]:
    """The request's fields, the uploaded ``input_reference`` saved in ``upload_dir`` (path,
    its file name) or None, and the text of each JSON number field as sent (:func:`number_texts`;
    None for a form, whose fields are texts)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            fields = await request.json()
        except (ValueError, RecursionError) as e:  # bad JSON, bad UTF-8, nesting deeper than Python's stack
            reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            raise RequestError(400, f"the body is not valid JSON ({reason})") from None
        if not isinstance(fields, dict):
            raise RequestError(400, f"the body must be a JSON object of fields, got {type(fields).__name__}")
        for key in _FILES:
            if key in fields:
                raise RequestError(400, f"{key} must be sent as a file in a multipart/form-data request", key)
        return fields, None, "", number_texts(await request.body())
    if kind not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise RequestError(415, f"content-type {kind or 'none'!r}: send application/json or multipart/form-data")
    if kind == "application/x-www-form-urlencoded" and (await request.body()).lstrip()[:1] in (b"{", b"["):
        # curl -d '{...}' without -H: a JSON body sent as a form
        raise RequestError(
            415,
            "the body is JSON but its content-type is application/x-www-form-urlencoded: send it with "
            "the header 'content-type: application/json' (curl: -H 'content-type: application/json')",
        )
    form = await request.form()
    fields: dict[str, Any] = {}
    image_path, image_name = None, ""
    try:
        for key, value in form.multi_items():
            image_path, image_name = await _form_field(fields, key, value, upload_dir, image_path, image_name)
    except BaseException:
        for path in [image_path] + [u.path for u in fields.values() if isinstance(u, Upload)]:
            if path is not None:
                os.unlink(path)
        raise
    return fields, image_path, image_name, None  # None: a form's texts


async def _form_field(
    fields: dict, key: str, value: Any, upload_dir: str, image_path: str | None, image_name: str
) -> tuple[str | None, str]:
    """Add one form field to ``fields``; the upload's (path, name)."""
    if key in fields or (key == "input_reference" and image_path):
        raise RequestError(400, f"field {key!r} is given twice", key)
    if not isinstance(value, UploadFile):
        if key in _FILES[1:]:
            raise RequestError(400, f"{key} must be sent as a file in a multipart/form-data request", key)
        fields[key] = value
        return image_path, image_name
    if key not in _FILES:
        raise RequestError(400, f"field {key!r} is a file; only {', '.join(_FILES)} take one", key)
    if not value.filename and not value.size:  # a form's empty file input
        return image_path, image_name
    fd, path = tempfile.mkstemp(dir=upload_dir, prefix=".upload-")
    with os.fdopen(fd, "wb") as f:
        f.write(await value.read())
    if key != "input_reference":
        fields[key] = Upload(path, value.filename or key)
        return image_path, image_name
    return path, value.filename or "input_reference"


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


async def _event_stream(runner: JobRunner, job_id: str):
    """The events of one job (see the module), each sent when it changes; the stream ends with
    the job (``done`` / ``failed``), with the job deleted (``failed``, code ``not_found``) or
    with the server (``stopping``, as soon as it begins to shut down: :class:`Server`)."""
    sent: dict[str, Any] = {}
    while True:
        if runner.stopping:
            message = "the server is stopping; the job stays in the jobs folder for the next server on it"
            yield _event("stopping", {"id": job_id, "message": message})
            return
        now = runner.events(job_id)
        if now is None:
            yield _event("failed", {"id": job_id, "error": {"code": "not_found", "message": "the job was deleted"}})
            return
        job = now["job"]
        chunk = job.get("chunk")  # a long video's last chunk finished (sent before done, too)
        if chunk is not None and sent.get("chunk") != chunk:
            sent["chunk"] = chunk
            yield _event("chunk", {"id": job_id, **chunk})
        if job["status"] in (COMPLETED, FAILED):
            yield _event("done" if job["status"] == COMPLETED else "failed", job)
            return
        news = {
            "queued": {"id": job_id, "position": now["position"]} if now["position"] is not None else None,
            "progress": {
                "id": job_id,
                "status": job["status"],
                "step": job["step"],
                "num_inference_steps": job["num_inference_steps"],
                "progress": job["progress"],
            },
        }
        # in step order: the previews up to the step reached, then that step's progress (a preview
        # made before its step's progress is recorded waits for it)
        for preview in now["previews"]:
            if sent.get("preview", 0) < preview["step"] <= job["step"]:
                sent["preview"] = preview["step"]
                yield _event("preview", {"id": job_id, **preview})
        for name, data in news.items():
            if data is not None and sent.get(name) != data:
                sent[name] = data
                yield _event(name, data)
        await asyncio.sleep(EVENTS_POLL)


class _Endpoints:
    """The handlers of the API (``/v1/...``, ``/health``) and of the page (``GET /``) over one
    :class:`~vidax.serve.jobs.JobRunner`."""

    def __init__(self, runner: JobRunner):
        self.runner = runner
        self.page = files("vidax.serve").joinpath("page.html").read_text()

    def routes(self) -> list[Route]:
        return [
            Route("/", self.index),
            Route("/health", self.health),
            Route("/v1/models", self.models),
            Route("/v1/videos", self.create, methods=["POST"]),
            Route("/v1/videos", self.listing, methods=["GET"]),
            Route("/v1/videos/{id}", self.retrieve, methods=["GET"]),
            Route("/v1/videos/{id}", self.delete, methods=["DELETE"]),
            Route("/v1/videos/{id}/content", self.content, methods=["GET"]),
            Route("/v1/videos/{id}/events", self.events, methods=["GET"]),
        ]

    async def create(self, request: Request) -> Response:
        image_path, fields = None, None
        try:
            fields, image_path, image_name, texts = await _fields(request, self.runner.store.folder)
            job = await run_in_threadpool(self.runner.submit, fields, image_path, image_name, texts)
        except RequestError as e:
            return _error(e)
        finally:
            for path in [image_path] + [u.path for u in (fields or {}).values() if isinstance(u, Upload)]:
                if path is not None:
                    os.unlink(path)
        return JSONResponse(job)

    async def retrieve(self, request: Request) -> Response:
        job_id = request.path_params["id"]
        job = self.runner.get(job_id)
        return _not_found(job_id) if job is None else JSONResponse(job)

    async def content(self, request: Request) -> Response:
        job_id = request.path_params["id"]
        job = self.runner.get(job_id)
        if job is None:
            return _not_found(job_id)
        variant = request.query_params.get("variant", "video")
        if variant != "video":
            return _error(RequestError(400, f"variant={variant!r}: this server has only 'video'", "variant"))
        if job["status"] == FAILED:
            error = job["error"] or {}
            return _error(
                RequestError(
                    409,
                    f"{job_id} failed, so it has no video ({error.get('code')}: {error.get('message')})",
                    "video_id",
                    "video_failed",
                )
            )
        if job["status"] != COMPLETED:
            return _error(
                RequestError(
                    409,
                    f"{job_id} is {job['status']}; its video is there once it is completed",
                    "video_id",
                    "not_ready",
                )
            )
        path = self.runner.store.video_path(job_id)
        if not os.path.isfile(path):
            return _error(
                RequestError(404, f"the video of {job_id} is no longer in the jobs folder", "video_id", "not_found")
            )
        return FileResponse(path, media_type="video/mp4", filename=f"{job_id}.mp4", content_disposition_type="inline")

    async def events(self, request: Request) -> Response:
        job_id = request.path_params["id"]
        if self.runner.events(job_id) is None:
            return _not_found(job_id)
        return StreamingResponse(
            _event_stream(self.runner, job_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def delete(self, request: Request) -> Response:
        job_id = request.path_params["id"]
        job = self.runner.cancel(job_id)
        return _not_found(job_id) if job is None else JSONResponse(job)

    async def listing(self, request: Request) -> Response:
        q = request.query_params
        try:
            limit = int(q.get("limit", "20"))
            if not 1 <= limit <= 100:
                raise ValueError
        except ValueError:
            return _error(RequestError(400, f"limit must be an integer in [1, 100], got {q.get('limit')!r}", "limit"))
        order = q.get("order", "desc")
        if order not in ("asc", "desc"):
            return _error(RequestError(400, f"order must be 'asc' or 'desc', got {order!r}", "order"))
        try:
            jobs, more = self.runner.list(limit, q.get("after"), order == "desc")
        except RequestError as e:
            return _error(e)
        # first_id / last_id: the cursors OpenAI's list objects carry (the SDK's pager asks for
        # the page after last_id while has_more)
        return JSONResponse(
            {
                "object": "list",
                "data": jobs,
                "first_id": jobs[0]["id"] if jobs else None,
                "last_id": jobs[-1]["id"] if jobs else None,
                "has_more": more,
            }
        )

    async def models(self, request: Request) -> Response:
        info = self.runner.info
        presets = presets_of(self.runner.cls)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.runner.model,
                        "object": "model",
                        "owned_by": "vidax",
                        "pipeline": self.runner.cls.__name__,
                        "tasks": list(info.tasks),
                        "image": "i2v" in info.tasks and "image" in self.runner.tasks.class_for("i2v").call_args(),
                        "video": "v2v" in info.tasks and "video" in self.runner.tasks.class_for("v2v").call_args(),
                        "defaults": dataclasses.asdict(info.defaults),
                        "size_multiple": list(info.size_multiple),
                        "fields": self.runner.tasks.accepted(),
                        "preset": None if self.runner.pipe.preset is None else self.runner.pipe.preset.name,
                        "preset_recognised_from": None if self.runner.recognised is None else self.runner.recognised[1],
                        "presets": [p.name for p in presets],
                    }
                ],
            }
        )

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.runner.model, **self.runner.counts()})

    async def index(self, request: Request) -> Response:
        return HTMLResponse(self.page)


async def _http_error(request: Request, e: HTTPException) -> Response:
    reason = {
        404: f"no such path {request.url.path!r}",
        405: f"{request.method} is not allowed on {request.url.path!r}",
    }.get(e.status_code, str(e.detail))
    code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
    return _error(RequestError(e.status_code, reason, None, code))


def create_app(
    runner: JobRunner, host: str = "127.0.0.1", port: int | None = None, api_key: str | None = None
) -> Starlette:
    """The app serving ``runner``'s jobs on ``host:port`` (the address the server is bound to:
    requests naming another ``Host`` are refused, :class:`_Guard`; ``port`` None: any port),
    every request but the page's ``GET /`` needing ``api_key`` when given; it
    starts the worker with the app and stops it (cancelling the running job between steps) when
    the server shuts down."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        runner.start()
        try:
            yield
        finally:
            await run_in_threadpool(runner.stop)

    app = Starlette(
        exception_handlers={HTTPException: _http_error}, routes=_Endpoints(runner).routes(), lifespan=lifespan
    )
    app.add_middleware(_Guard, host=host, port=port, api_key=api_key)
    return app


class Server(uvicorn.Server):
    """uvicorn's server for ``runner``'s app (:func:`create_app`): a SIGINT / SIGTERM first marks
    the runner stopping (:meth:`~vidax.serve.jobs.JobRunner.halt`), so the running job stops at
    its next check and the open event streams end (``stopping``), then shuts down as uvicorn
    does (its graceful shutdown waits for the open responses, which then close at once)."""

    def __init__(self, config: uvicorn.Config, runner: JobRunner):
        super().__init__(config)
        self.runner = runner

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.runner.halt()
        super().handle_exit(sig, frame)
