"""The ``vidax`` command line (typer): ``vidax generate``, ``vidax inspect`` and ``vidax serve``.
Each command turns its flags into records (:mod:`vidax.cli.flags`, :mod:`vidax.cli.records`),
runs them (:mod:`vidax.cli.generating`, :mod:`vidax.cli.inspecting`, :mod:`vidax.cli.serving`)
and says a :class:`~vidax.errors.VidaxError` in one line naming the flag (exit status 2)."""

from __future__ import annotations

import logging
from typing import Optional

import typer

from vidax.cli.commands import GenerateCommand, NumberCommand, Spelling, fail, setup_logging
from vidax.cli.flags import GENERATE_ORDER, SERVE_ORDER, GenerateFlags, LoadFlags, ServeFlags, signature, split

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    no_args_is_help=True,
    help="vidax: open video-generation models (diffusers checkpoints) in JAX.",
)


def _print_version(value: bool) -> None:
    if value:
        import flax
        import jax

        from vidax import __version__
        from vidax.errors import SetupError
        from vidax.parallel.distributed import check_backend

        try:
            backend = check_backend()
        except SetupError as e:
            fail(str(e))
        typer.echo(f"vidax {__version__} (jax {jax.__version__}, flax {flax.__version__}, backend {backend})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the versions of vidax, JAX and flax, and the JAX backend.",
    ),
) -> None:
    """vidax: open video-generation models (diffusers checkpoints) in JAX."""


def generate(ctx: typer.Context, **flags) -> None:
    """Generate a video from a text prompt and write it to --output.

    The call's flags (--prompt, --height, ... and each family's own) come from the call keywords
    the registered pipelines declare; a checkpoint whose pipeline does not take one refuses it
    before loading.

    With --dp/--tp/--sp the model runs on a (data, tensor, sequence) mesh of dp x tp x sp devices
    (a size not given is 1; the first devices where there are more, all devices of all processes
    with several processes); only process 0 writes the video.

    SIGINT (Ctrl-C) and SIGTERM stop the run at the next check (before each denoising step,
    between the blocks streamed by --offload-blocks, before each VAE decode chunk, after loading
    and after the prompt encoding), print one line saying how far it got and exit 130 / 143;
    nothing is written (a signal while the video is being written lets that file complete). A
    second signal stops the run at once (not while the video is being written).

    Exit status: 0 written; 2 a bad argument, checkpoint or a run gone NaN/Inf (one error line,
    nothing written); 1 the video could not be written after generation (the frames are kept
    as .npy, the error line says where); 130 / 143 interrupted by SIGINT / SIGTERM."""
    source = ctx.get_parameter_source("output")  # typer's own click (0.29+) or click: a ParameterSource
    output_given = getattr(source, "name", "DEFAULT") != "DEFAULT"
    setup_logging(flags["verbose"])
    from vidax.errors import Cancelled, VidaxError

    # Warnings about the call ("num_frames=7 is not of the form 4k+1") name flags here too.
    spelling = Spelling(ctx.command, ctx.meta.get("argv"))
    loggers = [logging.getLogger(name) for name in ("vidax.pipeline", "vidax.tokenizer")]
    for logger in loggers:
        logger.addFilter(spelling)
    from vidax.interrupt import Stop

    stop = ctx.obj if isinstance(ctx.obj, Stop) else Stop()  # the process's, where vidax.__main__ installed one
    try:
        with stop.catching():
            from vidax.cli.generating import generate as run

            run(split(flags, LoadFlags), split(flags, GenerateFlags), ctx.meta["call"], output_given, stop, spelling)
    except Cancelled as e:
        stop.exit(f"{e.done}; nothing was written")
    except VidaxError as e:
        fail(spelling.message(e))
    finally:
        for logger in loggers:
            logger.removeFilter(spelling)


generate.__signature__ = signature(GENERATE_ORDER, LoadFlags, GenerateFlags)
app.command(cls=GenerateCommand)(generate)


@app.command()
def inspect(
    ctx: typer.Context,
    path: str = typer.Argument(
        ...,
        help="Diffusers-format pipeline folder or hub id, a single-file transformer "
        "(.gguf / .safetensors) or a LoRA .safetensors file.",
    ),
    mesh: Optional[str] = typer.Option(
        None, help="Also show the sharding plan on a mesh, 'DPxTPxSP' or 'dp=..,tp=..,sp=..' (no devices needed)."
    ),
    transformer: Optional[str] = typer.Option(
        None,
        "--transformer",
        help="With a checkpoint folder: also describe this single-file transformer "
        "(.gguf / .safetensors, as vidax generate --transformer reads it; checked against the folder's transformer) "
        "and its bytes on one device, with --mesh per device, as it loads (its own tensor types; a GGUF file mixing "
        "types, Q4_K_M / Q5_K_M, padded to the widest type in each layer stack).",
    ),
) -> None:
    """Print a checkpoint's components, classes, key configs, parameter counts and dtypes; for a
    single-file transformer its format, tensor types and count, bytes and layout; for a LoRA
    file its layout, family, rank, targets and key count."""
    setup_logging(False)
    from vidax.cli.inspecting import describe
    from vidax.errors import VidaxError

    try:
        typer.echo(describe(path, mesh, transformer))
    except VidaxError as e:
        spelling = Spelling(ctx.command, ctx.meta.get("argv"))
        # The folder is the command's PATH argument: named as typed, not as the Python keyword.
        fail(
            e.render(
                lambda a: f"vidax inspect {a.shown_value()}" if a.name == "checkpoint" and a.has_value else spelling(a)
            )
        )


def serve(ctx: typer.Context, **flags) -> None:
    """Serve video generation over HTTP: OpenAI's /v1/videos API and a page at /.

    One pipeline is loaded once (with its --lora files merged) and stays resident; requests are
    checked as vidax generate checks its flags (400 naming the field), then queued and run one
    at a time or, with --max-batch N, in batches of jobs that share their settings (429 when
    --queue-size jobs wait). GET /v1/videos/ID/events streams a job's progress (server-sent
    events). Nothing is lost on a restart: queued jobs are queued again and a running one
    resumes from its last saved step. The request's fields are OpenAI's (size,
    seconds, input_reference, model) and the call keywords the loaded pipeline declares. POST
    /v1/videos, GET /v1/videos[/ID[/content]], DELETE /v1/videos/ID (cancels between steps), GET
    /v1/models, GET /health; see docs/serving.md. With --api-key (or VIDAX_API_KEY) every
    request needs 'Authorization: Bearer KEY'; a --host other machines reach is refused without
    one unless --insecure-no-auth.

    SIGINT / SIGTERM: stop accepting requests, stop the running job at its next check (it and
    the queued ones wait in --jobs-dir for the next server), and exit 0."""
    from vidax.errors import VidaxError

    setup_logging(flags["verbose"])
    try:
        from vidax.cli.serving import serve as run

        run(split(flags, LoadFlags), split(flags, ServeFlags))
    except VidaxError as e:
        fail(Spelling(ctx.command, ctx.meta.get("argv")).message(e))


serve.__signature__ = signature(SERVE_ORDER, LoadFlags, ServeFlags)
app.command(cls=NumberCommand)(serve)


def main(stop=None) -> None:
    """The ``vidax`` command. ``stop``: the process's :class:`vidax.interrupt.Stop`, installed by
    :mod:`vidax.__main__` before this module was imported; after the command, a signal during
    Python's teardown ends the process at once with the command's exit status."""
    try:
        app(obj=stop)
        status = 0
    except SystemExit as e:
        status = e.code
    if stop is not None:
        stop.exiting(status if isinstance(status, int) else 0 if status is None else 1)
    raise SystemExit(status)


if __name__ == "__main__":
    main()
