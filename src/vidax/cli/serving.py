"""What ``vidax serve`` (:func:`vidax.cli.app.serve`, its flags) runs: its flags checked into a
:class:`~vidax.cli.records.ServeOptions`, one pipeline loaded, then :mod:`vidax.serve.app`
served with uvicorn until SIGINT / SIGTERM."""

from __future__ import annotations

import logging
import signal
import socket

import typer

from vidax.cli.flags import LoadFlags, ServeFlags
from vidax.cli.records import ServeOptions, apply_loras, serve_options


def serve(load: LoadFlags, own: ServeFlags) -> None:
    """Run ``vidax serve`` with its flags (``load``, ``own``) checked (:func:`~vidax.cli.records.serve_options`).

    Raises:
        VidaxError: a bad flag (naming it as data), checked before loading where it can be.
    """
    run(serve_options(load, own))


def run(options: ServeOptions) -> None:
    """Load the pipeline ``options.load`` names (its LoRAs merged), serve it on ``host:port``
    until SIGINT / SIGTERM, every request needing ``options.api_key`` when set. The preset: every
    job's is ``--preset`` (a request's ``preset`` field and its other fields win), else the one
    the checkpoint or a ``--lora`` file calls for (:func:`~vidax.serve.command.plan_preset`).

    Raises:
        VidaxError: a bad checkpoint, weight format, preset, jobs folder, address or mesh, checked
            before the weights are read.
    """
    from vidax.compile_cache import setup_compile_cache
    from vidax.default_checkpoint import PUBLIC_NAME
    from vidax.parallel.mesh import mesh_from_sizes
    from vidax.pipelines.plan import read_plan, with_placement
    from vidax.serve.command import listen, plan_preset
    from vidax.serve.jobs import JobRunner, JobStore

    load = options.load
    setup_compile_cache(enabled=load.compile_cache)
    model = load.checkpoint or PUBLIC_NAME
    # the configs read once; a bad weight format is refused before the port is taken
    plan = read_plan(model, weight_dtype=load.weight_dtype, transformer=load.transformer)
    plan, recognised = plan_preset(plan, load.preset, tuple(path for path, _ in load.loras))
    store = JobStore(options.jobs_dir)  # a folder that cannot hold the records fails before loading
    sock = listen(options.host, options.port)  # and a taken port
    if load.checkpoint is None:
        typer.secho(
            f"Using the embedded default checkpoint ({PUBLIC_NAME}): tiny, RANDOM weights, so the videos "
            "are noise. Pass --checkpoint PATH for real weights.",
            fg=typer.colors.YELLOW,
            err=True,
        )
    mesh = None
    if any(size is not None for size in load.sizes):  # a wrong mesh lists the sizes the configs' heads split over
        mesh = mesh_from_sizes(*load.sizes, heads=plan.heads)
    plan = with_placement(
        plan, dtype=load.dtype, mesh=mesh, offload=load.offload, matmul_precision=load.matmul_precision
    )
    pipe = plan.pipeline.from_plan(plan)
    apply_loras(pipe, load.loras)
    runner = JobRunner(
        pipe,
        model,
        store,
        options.queue_size,
        max_batch=options.max_batch,
        batch_window_ms=options.batch_window_ms,
        save_every=options.save_every,
        preview_every=options.preview_every,
        recognised=recognised,
    )
    _serve(runner, store, sock, options, model)


def ready_line(model: str, url: str, folder: str, api_key: str | None, preset) -> str:
    """The line saying the server is ready: the model, its URL, the jobs folder, whether requests
    need the API key, and the preset its jobs run under (``preset``; None: none)."""
    access = "API key required" if api_key else "no API key"
    runs = (
        "" if preset is None else f'; jobs run preset {preset.name} unless a request\'s "preset" says another or "none"'
    )
    return f"vidax serve: {model} on {url} (jobs in {folder}; {access}{runs})"


def _serve(runner, store, sock: socket.socket, options: ServeOptions, model: str) -> None:
    """Serve ``runner``'s app on ``sock`` with uvicorn until SIGINT / SIGTERM, then close the
    socket and ``store`` and say the server stopped (and by which signal)."""
    import uvicorn

    from vidax.serve.app import Server, create_app

    bound = sock.getsockname()
    config = uvicorn.Config(
        create_app(runner, bound[0], bound[1], options.api_key),
        log_level="info" if options.verbose else "warning",
        timeout_graceful_shutdown=5,
    )
    logging.getLogger("vidax.serve.jobs").setLevel(logging.INFO)  # the job event lines, without --verbose
    if options.access_log:  # uvicorn's access lines, whatever --verbose sets for its other loggers
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    typer.echo(
        ready_line(model, f"http://{shown}:{bound[1]}/", store.folder, options.api_key, runner.pipe.preset), err=True
    )
    received: list[int] = []
    # uvicorn handles SIGINT / SIGTERM itself (a graceful shutdown, whose lifespan end cancels the
    # jobs), then raises the signal again for the handler it found: this one, which only records it.
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: received.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        Server(config, runner).run(sockets=[sock])  # a signal stops the job and the event streams first
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        store.close()
    how = f" ({signal.Signals(received[0]).name})" if received else ""
    typer.echo(f"vidax serve: stopped{how}", err=True)
