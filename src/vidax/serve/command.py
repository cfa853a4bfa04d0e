"""What ``vidax serve`` (:func:`vidax.cli.serve`, its flags) runs: load one pipeline, then serve
:mod:`vidax.serve.app` with uvicorn."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

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
        raise InputError(
            Arg("host", host), " ", Arg("port", port), f": cannot listen there ({e.strerror or e})"
        ) from None
    return sock


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only (``localhost``,
    ``127.0.0.0/8``, ``::1``); a wildcard (``0.0.0.0``, ``::``) or any other address is not."""
    import ipaddress

    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_access(host: str, api_key: str | None, insecure_no_auth: bool) -> str | None:
    """The API key the server requires (None: none), after refusing a non-loopback ``host``
    without one.

    Raises:
        InputError: ``host`` is reachable from other machines and no key is set, nor
            ``insecure_no_auth``; an empty key.
    """
    from vidax.errors import Arg, InputError

    if api_key is not None and not api_key.strip():
        raise InputError(
            Arg("api_key"), " is empty; give a secret of some length (or leave it unset on a loopback --host)"
        )
    if api_key is None and not insecure_no_auth and not is_loopback(host):
        raise InputError(
            Arg("host", host),
            " is reachable from other machines and no API key is set: anyone who "
            "reaches it could run jobs; set one with --api-key KEY or the VIDAX_API_KEY environment "
            "variable (clients then send 'Authorization: Bearer KEY'), or pass --insecure-no-auth to "
            "serve it open anyway",
        )
    return api_key


def plan_preset(plan: Any, preset: str | None, loras: Any = ()) -> tuple[Any, Any]:
    """``(plan, recognised)``: ``plan`` with the preset every job of the server runs under its fields: ``preset``
    (``--preset``), else the one the checkpoint's configs or a LoRA file of ``loras`` call for
    (:func:`~vidax.pipelines.presets.recognise`), said in one line on stderr as ``vidax generate``
    says it; ``recognised``: that recognition's ``(preset, why)``, None where ``--preset`` was
    given or nothing calls for one (:class:`~vidax.serve.jobs.JobRunner` warns about the jobs
    that run a recognised distilled recipe with many steps and CFG).

    Raises:
        InputError: ``preset`` is not a preset of the checkpoint's family (naming ``--preset``).
    """
    from vidax.pipelines.presets import recognise, with_preset

    recognised = None if preset is not None else recognise(plan, loras)
    if recognised is not None:
        typer.echo(f"{recognised[1]}: --preset {recognised[0].name}", err=True)
        preset = recognised[0].name
    return with_preset(plan, preset, "--preset"), recognised


def run(
    checkpoint: str | None,
    host: str,
    port: int,
    jobs_dir: str,
    queue_size: int,
    dtype: str,
    sizes: tuple,
    offload: Any,
    compile_cache: bool,
    verbose: bool,
    load: Callable[[Any], None],
    weight_dtype: str | None = None,
    transformer: str | None = None,
    matmul_precision: str | None = None,
    api_key: str | None = None,
    insecure_no_auth: bool = False,
    max_batch: int = 1,
    batch_window_ms: float = 0,
    save_every: int = 5,
    preview_every: int = 0,
    preset: str | None = None,
    loras: tuple = (),
    access_log: bool = False,
) -> None:
    """Load the pipeline (``load(pipe)`` then adds to it: the LoRAs; ``weight_dtype`` /
    ``transformer`` / ``matmul_precision`` as :func:`vidax.load_pipeline`'s), serve it on ``host:port`` until SIGINT /
    SIGTERM, every request needing ``api_key`` when given (:func:`check_access`);
    ``max_batch`` / ``batch_window_ms`` / ``save_every`` / ``preview_every`` as
    :class:`~vidax.serve.jobs.JobRunner`'s. ``preset``: every job's preset (``--preset``; a
    request's ``preset`` field and its other fields win), else the one the checkpoint or a LoRA
    of ``loras`` (their paths) calls for (:func:`plan_preset`). ``access_log``: one line per
    HTTP request (uvicorn's access log) on stdout.

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

    api_key = check_access(host, api_key, insecure_no_auth)
    setup_compile_cache(enabled=compile_cache)
    parse_dtype(dtype)
    parse_matmul_precision(matmul_precision)
    model = checkpoint or PUBLIC_NAME
    # the configs read once; a bad weight format is refused before the port is taken
    plan, recognised = plan_preset(read_plan(model, weight_dtype=weight_dtype, transformer=transformer), preset, loras)
    store = JobStore(jobs_dir)  # a folder that cannot hold the records fails before loading
    sock = _listen(host, port)  # and a taken port
    if checkpoint is None:
        typer.secho(
            f"Using the embedded default checkpoint ({PUBLIC_NAME}): tiny, RANDOM weights, so the videos "
            "are noise. Pass --checkpoint PATH for real weights.",
            fg=typer.colors.YELLOW,
            err=True,
        )
    mesh = None
    if any(size is not None for size in sizes):  # a wrong mesh lists the sizes the configs' heads split over
        mesh = mesh_from_sizes(*sizes, heads=plan.heads)
    plan = with_placement(plan, dtype=dtype, mesh=mesh, offload=offload, matmul_precision=matmul_precision)
    pipe = plan.pipeline.from_plan(plan)
    load(pipe)
    runner = JobRunner(
        pipe,
        model,
        store,
        queue_size,
        max_batch=max_batch,
        batch_window_ms=batch_window_ms,
        save_every=save_every,
        preview_every=preview_every,
        recognised=recognised,
    )
    bound = sock.getsockname()
    config = uvicorn.Config(
        create_app(runner, bound[0], bound[1], api_key),
        log_level="info" if verbose else "warning",
        timeout_graceful_shutdown=5,
    )
    logging.getLogger("vidax.serve.jobs").setLevel(logging.INFO)  # the job event lines, without --verbose
    if access_log:  # uvicorn's access lines, whatever --verbose sets for its other loggers
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    access = "API key required" if api_key else "no API key"
    typer.echo(f"vidax serve: {model} on http://{shown}:{bound[1]}/ (jobs in {store.folder}; {access})", err=True)
    received: list[int] = []
    # uvicorn handles SIGINT / SIGTERM itself (a graceful shutdown, whose lifespan end cancels the
    # jobs), then raises the signal again for the handler it found: this one, which only records it.
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: received.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        store.close()
    how = f" ({signal.Signals(received[0]).name})" if received else ""
    typer.echo(f"vidax serve: stopped{how}", err=True)
