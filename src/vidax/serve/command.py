"""What ``vidax serve`` (:func:`vidax.cli.serve`, its flags) runs: load one pipeline, then serve
:mod:`vidax.serve.app` with uvicorn."""

from __future__ import annotations

import signal
import socket
from typing import Any, Callable

import typer


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` only."""
    from vidax.errors import Arg, InputError

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
        raise InputError(Arg("host", host), " ", Arg("port", port), f": cannot listen there ({e.strerror or e})") \
            from None
    return sock


def run(checkpoint: str | None, host: str, port: int, jobs_dir: str, queue_size: int, dtype: str,
        sizes: tuple, offload: Any, compile_cache: bool, verbose: bool, load: Callable[[Any], None],
        weight_dtype: str | None = None, transformer: str | None = None, matmul_precision: str = "highest") -> None:
    """Load the pipeline (``load(pipe)`` then adds to it: the LoRAs; ``weight_dtype`` /
    ``transformer`` / ``matmul_precision`` as :func:`vidax.load_pipeline`'s), serve it on ``host:port`` until SIGINT /
    SIGTERM.

    Raises:
        VidaxError: a bad flag (naming it as data), checked before loading where it can be.
    """
    import uvicorn

    from vidax.compile_cache import setup_compile_cache
    from vidax.default_checkpoint import PUBLIC_NAME
    from vidax.nn.inputs import parse_dtype
    from vidax.nn.precision import parse_matmul_precision
    from vidax.parallel.mesh import mesh_from_sizes
    from vidax.pipelines.plan import read_plan, with_placement
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    setup_compile_cache(enabled=compile_cache)
    parse_dtype(dtype)
    parse_matmul_precision(matmul_precision)
    model = checkpoint or PUBLIC_NAME
    # the configs read once; a bad weight format is refused before the port is taken
    plan = read_plan(model, weight_dtype=weight_dtype, transformer=transformer)
    store = JobStore(jobs_dir)  # a folder that cannot hold the records fails before loading
    sock = _listen(host, port)  # and a taken port
    if checkpoint is None:
        typer.secho(f"Using the embedded default checkpoint ({PUBLIC_NAME}): tiny, RANDOM weights, so the videos "
                    "are noise. Pass --checkpoint PATH for real weights.", fg=typer.colors.YELLOW, err=True)
    mesh = None
    if any(size is not None for size in sizes):  # a wrong mesh lists the sizes the configs' heads split over
        mesh = mesh_from_sizes(*sizes, heads=plan.heads)
    plan = with_placement(plan, dtype=dtype, mesh=mesh, offload=offload, matmul_precision=matmul_precision)
    pipe = plan.pipeline.from_plan(plan)
    load(pipe)
    runner = JobRunner(pipe, model, store, queue_size)
    bound = sock.getsockname()
    config = uvicorn.Config(create_app(runner, bound[0], bound[1]), log_level="info" if verbose else "warning",
                            timeout_graceful_shutdown=5)
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
