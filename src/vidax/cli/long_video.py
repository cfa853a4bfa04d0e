"""``vidax generate`` and long videos: ``--seconds`` (the length in seconds instead of frames),
the overlap a long diffusion-forcing video needs, and the mp4 that grows chunk by chunk
(:class:`~vidax.io.growing.GrowingMp4`) and keeps what is finished on Ctrl-C."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

import typer

logger = logging.getLogger("vidax.pipeline")


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def _quiet(log: logging.Logger):
    quiet = _Quiet()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


def length_call(plan, given: dict, seconds: float | None, fps: int | None) -> dict:
    """The call flags ``given`` with ``--seconds`` as ``num_frames`` (seconds x ``--fps``, else
    the checkpoint's fps, rounded as the pipeline rounds ``num_frames``, with a warning naming
    ``--seconds`` where it rounds) and, for a diffusion-forcing video longer than one chunk,
    the defaults of a pipeline that makes its video chunk by chunk (its ``chunked_length``: a
    diffusion-forcing video's overlap), said in one line.

    Raises:
        InputError: ``--seconds`` with ``--num-frames``; ``--seconds`` longer than the
            checkpoint's video on a pipeline that makes a video in one pass (no chunks).
    """
    from vidax.errors import Arg, InputError

    cls, info = plan.pipeline, plan.info
    given = dict(given)
    if seconds is not None:
        if "num_frames" in given:
            raise InputError(
                Arg("seconds", seconds),
                " and ",
                Arg("num_frames", given["num_frames"]),
                " are both given: give one of them (--seconds is the frames divided by --fps)",
            )
        rate = fps or info.defaults.fps
        frames = max(1, round(seconds * rate))
        with _quiet(logger):  # the pipeline's rounding, said below in --seconds' words
            rounded = cls.family.resolve_num_frames(info, frames)
        one_pass = getattr(cls.family, "chunked_length", None) is None
        if one_pass and rounded > info.defaults.num_frames:
            raise InputError(
                Arg("seconds", seconds),
                f" makes {rounded} frames at {rate} fps; {cls.__name__} ({plan.checkpoint.root}) makes a video in one "
                f"pass, {info.defaults.num_frames} frames ({info.defaults.num_frames / rate:.2f} s) by default: a "
                "longer video takes a diffusion-forcing checkpoint (SkyReels-V2 DF), made chunk by chunk in the "
                "memory of one; --num-frames asks this one for more frames in one pass",
            )
        if rounded != frames:
            logger.warning(
                "%s at %s fps is %d frames, which %s does not make; using %d (%.2f s), as diffusers' does",
                Arg("seconds", seconds),
                rate,
                frames,
                cls.__name__,
                rounded,
                rounded / rate,
            )
        given["num_frames"] = rounded
    chunked = getattr(cls.family, "chunked_length", None)  # a pipeline that makes its video chunk by chunk
    if chunked is not None:
        given, said = chunked(info, given)
        if said is not None:  # its arguments as the flags
            options = {o.name: o for o in cls.options()}
            typer.echo(said.render(lambda a: a.spelled(options[a.name].flag_name)), err=True)
    return given


def streams(pipe, call, output) -> bool:
    """Whether ``vidax generate`` writes this run's mp4 chunk by chunk: a pipeline that makes
    its video in chunks (its ``CHUNK_CALLBACK`` keyword), one video, an mp4 output, one process."""
    import jax

    keyword = getattr(pipe.family, "CHUNK_CALLBACK", None)
    return keyword is not None and output.format == "mp4" and call.batch == 1 and jax.process_count() == 1


def generate_streamed(run, pipe, call, output, path: str, stop) -> tuple:
    """``(out, path written, frames written)``: ``run(pipe, call, format, output)`` (the CLI's
    call of the pipeline) with every finished chunk appended to the growing mp4 at ``path`` as it
    ends (said in one line per chunk, --no-progress too), then the mp4 published under its
    name. The pipeline keeps no chunk's frames for its return (its ``CHUNK_KEEP`` keyword): the
    host memory of a video of any length is one chunk's. A signal
    (``stop``) ends the run at its next check, and the chunks finished are published as the video
    (exit 128 + the signal's number, the line says what was written). Any other failure publishes
    nothing."""
    from vidax.errors import Cancelled
    from vidax.io.growing import GrowingMp4

    fps = output.fps or pipe.video_fps(call)
    writer = GrowingMp4(path, fps, overwrite=output.overwrite)
    stop.temporary.add(writer.tmp)  # a second signal exits at once: it takes the unfinished file along
    spent, last = [0.0], []

    def chunk_done(chunk) -> None:
        last[:] = [chunk]
        t0 = time.perf_counter()
        writer.append(chunk.frames[0])
        spent[0] += time.perf_counter() - t0
        typer.echo(  # with --no-progress too: the file grew (the bars are what --no-progress turns off)
            f"chunk {chunk.index + 1} of {chunk.count} done: {chunk.frames_done} of {chunk.frames_total} frames "
            f"({chunk.frames_done / fps:.2f} s of {chunk.frames_total / fps:.2f} s) in {writer.tmp}",
            err=True,
        )

    try:
        extra = {**call.extra, pipe.family.CHUNK_CALLBACK: chunk_done, pipe.family.CHUNK_KEEP: False}
        out = run(pipe, dataclasses.replace(call, extra=extra), output.format, path)
        stop.writing = True  # a second signal now waits for the file
    except Cancelled as e:
        if not writer.frames:
            writer.abort()
            raise
        stop.writing = True
        done, frames = last[0], writer.frames
        written = writer.finish()
        stop.exit(
            f"in chunk {done.index + 2} of {done.count} ({e.done}); wrote {written} ({frames} of "
            f"{done.frames_total} frames, {frames / fps:.2f} s: the {done.index + 1} chunk(s) finished)"
        )
    except BaseException:
        writer.abort()
        raise
    finally:
        stop.temporary.discard(writer.tmp)
    t0 = time.perf_counter()
    frames = writer.frames
    written = writer.finish()
    out.stats.write_s = spent[0] + time.perf_counter() - t0
    return out, written, frames
