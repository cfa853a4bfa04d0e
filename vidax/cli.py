"""The ``vidax`` command line: ``vidax generate`` and ``vidax inspect``."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="vidax: open video-generation models (diffusers checkpoints) in JAX.",
)

DTYPE_CHOICES = ("float32", "bfloat16")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


@app.command()
def generate(
    prompt: str = typer.Option(..., "--prompt", "-p", help="What the video shows."),
    negative_prompt: str = typer.Option("", help="What to steer away from (used when guidance-scale > 1)."),
    checkpoint: Optional[str] = typer.Option(
        None, help="Diffusers-format pipeline folder or hub id. Default: the embedded tiny random checkpoint."
    ),
    height: Optional[int] = typer.Option(None, help="Pixels, multiple of 16 [default: 480; 96 for the embedded checkpoint]."),
    width: Optional[int] = typer.Option(None, help="Pixels, multiple of 16 [default: 832; 160 for the embedded checkpoint]."),
    num_frames: Optional[int] = typer.Option(None, help="Frames, 4k+1 [default: 81; 17 for the embedded checkpoint]."),
    num_inference_steps: Optional[int] = typer.Option(None, help="Denoising steps [default: 50; 10 for the embedded checkpoint]."),
    guidance_scale: float = typer.Option(5.0, help="Classifier-free guidance weight (>= 0; > 1 enables CFG)."),
    seed: int = typer.Option(0, help="Seed of the initial noise."),
    max_sequence_length: int = typer.Option(512, help="Text tokens; longer prompts are truncated with a warning."),
    dtype: str = typer.Option("float32", help=f"Transformer/text-encoder dtype: {' or '.join(DTYPE_CHOICES)}."),
    output: str = typer.Option("vidax-output.mp4", "--output", "-o", help="Output: *.mp4, *.npy, or a folder for PNG frames."),
    fps: int = typer.Option(16, help="Frames per second of the mp4."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what vidax does (attention implementation, ...)."),
) -> None:
    """Generate a video from a text prompt and write it to --output."""
    args = dict(locals())
    _setup_logging(verbose)
    from vidax.errors import VidaxError

    try:
        _generate(**args)
    except VidaxError as e:
        _fail(str(e))


def _generate(prompt, negative_prompt, checkpoint, height, width, num_frames, num_inference_steps,
              guidance_scale, seed, max_sequence_length, dtype, output, fps, progress, verbose) -> None:
    from vidax.errors import InputError
    from vidax.io.video import check_output_path, write_video
    from vidax.pipelines.common import parse_dtype
    from vidax.stats import RunStats

    parse_dtype(dtype)
    fmt = check_output_path(output)
    if fps <= 0:
        raise InputError(f"--fps must be > 0, got {fps}")
    stats = RunStats()
    if checkpoint is None:
        from vidax.default_checkpoint import DEFAULT_CALL, default_checkpoint

        checkpoint = default_checkpoint()
        typer.secho(
            f"Using the embedded default checkpoint ({checkpoint}): Wan2.1 layout with tiny, RANDOM "
            "weights, so the video is noise. Pass --checkpoint PATH for real weights.",
            fg=typer.colors.YELLOW, err=True,
        )
        height = height or DEFAULT_CALL["height"]
        width = width or DEFAULT_CALL["width"]
        num_frames = num_frames or DEFAULT_CALL["num_frames"]
        num_inference_steps = num_inference_steps or DEFAULT_CALL["num_inference_steps"]
    from vidax.pipelines.loading import load_pipeline

    pipe = load_pipeline(checkpoint, dtype=dtype, stats=stats)
    out = pipe(
        prompt=prompt,
        negative_prompt=negative_prompt,
        height=height or 480,
        width=width or 832,
        num_frames=num_frames or 81,
        num_inference_steps=num_inference_steps or 50,
        guidance_scale=guidance_scale,
        seed=seed,
        max_sequence_length=max_sequence_length,
        progress=progress,
    )
    written = []
    for i, video in enumerate(out.frames):
        path = output if len(out.frames) == 1 else _indexed(output, i)
        written.append(write_video(video, path, fps=fps))
    typer.echo(f"wrote {', '.join(written)} ({out.frames.shape[1]} frames, "
               f"{out.frames.shape[3]}x{out.frames.shape[2]}, {fmt})", err=True)
    typer.echo("summary:\n" + out.stats.summary(), err=True)


def _indexed(path: str, i: int) -> str:
    stem, ext = os.path.splitext(path.rstrip(os.sep))
    return f"{stem}_{i}{ext}"


@app.command()
def inspect(path: str = typer.Argument(..., help="Diffusers-format pipeline folder or hub id.")) -> None:
    """Print a checkpoint's components, classes, key configs, parameter counts and dtypes."""
    _setup_logging(False)
    from vidax.errors import VidaxError
    from vidax.inspect import describe_checkpoint

    try:
        typer.echo(describe_checkpoint(path))
    except VidaxError as e:
        _fail(str(e))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
