"""The ``vidax serve`` command: load one pipeline, then serve :mod:`vidax.serve.app` with uvicorn."""

from __future__ import annotations

import signal
import socket
from typing import Optional

import typer


def serve(
    checkpoint: Optional[str] = typer.Option(
        None, help="Diffusers-format pipeline folder or hub id. Default: the embedded tiny random checkpoint."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (only this one; 0.0.0.0 for every IPv4 "
                             "interface)."),
    port: int = typer.Option(8000, help="Port to listen on (0: a free one, printed when the server is ready)."),
    jobs_dir: str = typer.Option("vidax-jobs", help="Folder of the job records (jobs.sqlite3) and the videos "
                                 "(<id>.mp4); a restart keeps every finished video."),
    queue_size: int = typer.Option(8, help="Jobs that may wait behind the running one; a request beyond them "
                                   "gets 429."),
    dtype: str = typer.Option("float32", help="Transformer/text-encoder dtype: float32 or bfloat16."),
    dp: Optional[int] = typer.Option(None, help="Data-parallel size [default: the devices left by tp x sp]."),
    tp: Optional[int] = typer.Option(None, help="Tensor-parallel size [default: 1]."),
    sp: Optional[int] = typer.Option(None, help="Sequence-parallel size [default: 1]."),
    offload_blocks: Optional[str] = typer.Option(
        None, help="Stream N transformer blocks per chunk from host memory each step ('all': the whole stack)."),
    keep_text_encoder: Optional[bool] = typer.Option(
        None, "--keep-text-encoder/--offload-text-encoder", help="Keep the text encoder on the device, or in "
        "host memory [default: decided from device memory]."),
    keep_vae: Optional[bool] = typer.Option(
        None, "--keep-vae/--offload-vae", help="Keep the VAE on the device, or in host memory [default: decided "
        "from device memory]."),
    compile_cache: bool = typer.Option(
        True, "--compile-cache/--no-compile-cache", help="Reuse compiled functions across runs (JAX's "
        "persistent cache)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log every request and what vidax does."),
) -> None:
    """Serve video generation over HTTP: OpenAI's /v1/videos API and a page at /.

    One pipeline is loaded once and stays resident; requests are checked as vidax generate
    checks its flags (400 naming the field), then queued and run one at a time (429 when
    --queue-size jobs wait). POST /v1/videos, GET /v1/videos[/ID[/content]], DELETE
    /v1/videos/ID (cancels between steps), GET /v1/models, GET /health; see README "Serving".

    SIGINT / SIGTERM: stop accepting requests, cancel the running job at its next check (it is
    recorded as failed, code "cancelled") and every queued one, and exit 0."""
    from vidax.cli import _fail, _offload_config, _setup_logging, flag_names
    from vidax.errors import InputError, VidaxError

    _setup_logging(verbose)
    try:
        if queue_size < 0:
            raise InputError(f"--queue-size must be >= 0, got {queue_size}")
        if not 0 <= port <= 65535:
            raise InputError(f"--port must be in [0, 65535], got {port}")
        _serve(checkpoint, host, port, jobs_dir, queue_size, dtype, (dp, tp, sp),
               _offload_config(offload_blocks, keep_text_encoder, keep_vae), compile_cache, verbose)
    except VidaxError as e:
        _fail(flag_names(str(e)).replace("jobs_dir=", "--jobs-dir "))


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` only."""
    from vidax.errors import InputError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        raise InputError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})") from None
    return sock


def _serve(checkpoint, host, port, jobs_dir, queue_size, dtype, sizes, offload, compile_cache, verbose) -> None:
    import uvicorn

    import vidax
    from vidax.compile_cache import setup_compile_cache
    from vidax.default_checkpoint import PUBLIC_NAME
    from vidax.nn.inputs import parse_dtype
    from vidax.parallel.mesh import mesh_from_sizes
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    setup_compile_cache(enabled=compile_cache)
    parse_dtype(dtype)
    store = JobStore(jobs_dir)  # a folder that cannot hold the records fails before loading
    sock = _listen(host, port)  # and a taken port
    model = checkpoint or PUBLIC_NAME
    if checkpoint is None:
        typer.secho(f"Using the embedded default checkpoint ({PUBLIC_NAME}): tiny, RANDOM weights, so the videos "
                    "are noise. Pass --checkpoint PATH for real weights.", fg=typer.colors.YELLOW, err=True)
    pipe = vidax.load_pipeline(model, dtype=dtype, mesh=mesh_from_sizes(*sizes), offload=offload)
    runner = JobRunner(pipe, model, store, queue_size)
    config = uvicorn.Config(create_app(runner), log_level="info" if verbose else "warning",
                            timeout_graceful_shutdown=5)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    typer.echo(f"vidax serve: {model} on http://{shown}:{bound[1]}/ (jobs in {store.folder})", err=True)
    received: list[int] = []
    # uvicorn handles SIGINT / SIGTERM itself (a graceful shutdown, whose lifespan end cancels the
    # jobs), then raises the signal again for the handler it found: this one, which only records it.
    previous = {sig: signal.signal(sig, lambda signum, _frame: received.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        store.close()
    how = f" ({signal.Signals(received[0]).name})" if received else ""
    typer.echo(f"vidax serve: stopped{how}", err=True)
