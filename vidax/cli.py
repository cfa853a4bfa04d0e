"""The ``vidax`` command line: ``vidax generate`` and ``vidax inspect``."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
from typing import Optional

import typer

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
            _fail(str(e))
        typer.echo(f"vidax {__version__} (jax {jax.__version__}, flax {flax.__version__}, backend {backend})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the versions of vidax, JAX and flax, and the JAX backend."),
) -> None:
    """vidax: open video-generation models (diffusers checkpoints) in JAX."""

DTYPE_CHOICES = ("float32", "bfloat16")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # JAX logs every backend it probes and cannot start (no libtpu on a CPU machine) at INFO.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


#: The Python keywords of ``vidax generate``'s arguments that errors name, by their flag (the
#: mesh sizes as :func:`vidax.parallel.mesh.mesh_from_sizes` names them).
GENERATE_FLAGS = {name: "--" + name.replace("_", "-") for name in (
    "prompt", "negative_prompt", "image", "checkpoint", "height", "width", "num_frames", "num_inference_steps",
    "guidance_scale", "guidance_scale_2", "seed", "max_sequence_length", "dtype", "output", "fps",
    "video", "frame_rate", "decode_timestep", "decode_noise_scale", "guidance_rescale", "true_cfg_scale",
    "dp", "tp", "sp", "coordinator", "num_processes", "process_id",
)} | {"timeout_s": "--distributed-timeout"}
#: The call keywords some families take, as ``vidax generate`` flags; passed only when given, so
#: a pipeline that does not take one names the flag in its error.
FAMILY_CALL_FLAGS = ("video", "frame_rate", "decode_timestep", "decode_noise_scale", "guidance_rescale",
                     "true_cfg_scale")
# ``name=value`` -> ``--flag value``; a keyword with "_" wherever it stands as a word; "prompt",
# "image", "height", "width" and "seed" also where a message names them as the argument (before
# "must", "and", "in [", "is", "has"), so prose ("an image", "per prompt", "this checkpoint")
# keeps its words.
_WORD = r"(?<![\w.\-/])({names})(?![\w\-/])"
_ASSIGN = re.compile(_WORD.format(names="|".join(map(re.escape, sorted(GENERATE_FLAGS, key=len, reverse=True))))
                     + "=")
_MULTI = re.compile(_WORD.format(names="|".join(sorted((n for n in GENERATE_FLAGS if "_" in n), key=len,
                                                        reverse=True))))
_SINGLE = re.compile(_WORD.format(names="prompt|image|height|width|seed")
                     + r"(?= (?:must |and |in \[|is |has ))")
_QUOTED = re.compile("'({names})'".format(names="|".join(sorted(GENERATE_FLAGS, key=len, reverse=True))))


_SWITCH = re.compile(_WORD.format(names="overwrite") + "=True")
_NO_VALUE = re.compile(r"[\s)\]]|$")
_TWICE = re.compile(r"(--[a-z0-9-]+) / \1(?![\w-])")


def flag_names(message: str) -> str:
    """``message`` with the call keywords of ``generate`` spelled as its flags
    (``num_inference_steps=0`` -> ``--num-inference-steps 0``), for errors on the command line."""
    message = _QUOTED.sub(lambda m: GENERATE_FLAGS[m.group(1)], message)
    message = _SWITCH.sub(lambda m: "--" + m.group(1), message)  # "overwrite=True" is the bare switch
    # "name=" with no value after it (a hint: "give image= (image2world)") is the bare flag.
    message = _ASSIGN.sub(lambda m: GENERATE_FLAGS[m.group(1)] + ("" if _NO_VALUE.match(message, m.end()) else " "),
                          message)
    message = _MULTI.sub(lambda m: GENERATE_FLAGS[m.group(1)], message)
    message = _SINGLE.sub(lambda m: GENERATE_FLAGS[m.group(1)], message)
    # "drop --video / video=" (the flag, then the keyword) names one flag twice once converted.
    return _TWICE.sub(r"\1", message)


def _flag_filter(record: logging.LogRecord) -> bool:
    """A logging filter: the record's message with :func:`flag_names` applied."""
    record.msg, record.args = flag_names(record.getMessage()), None
    return True


@app.command()
def generate(
    prompt: str = typer.Option(..., "--prompt", "-p", help="What the video shows."),
    negative_prompt: Optional[str] = typer.Option(
        None, help="What to steer away from (used when guidance-scale > 1) [default: the pipeline's: empty, or "
        "the reference's built-in negative prompt (Cosmos)]."),
    image: Optional[str] = typer.Option(
        None, "--image", help="Image file of the first frame, for checkpoints that do image-to-video (vidax inspect "
        "lists a checkpoint's tasks); resized to --height x --width. No safety checker runs (Cosmos' reference "
        "requires one)."
    ),
    checkpoint: Optional[str] = typer.Option(
        None, help="Diffusers-format pipeline folder or hub id. Default: the embedded tiny random checkpoint."
    ),
    video: Optional[str] = typer.Option(
        None, "--video", help="Video file (mp4) to condition on, for checkpoints that take one (vidax inspect "
        "lists a checkpoint's tasks: v2v); Cosmos-Predict2.5 video2world continues its last frames. vidax runs "
        "no safety checker (Cosmos' reference requires NVIDIA's cosmos_guardrail)."),
    frame_rate: Optional[int] = typer.Option(
        None, help="Frame rate the model conditions on (LTX-Video) [default: the checkpoint's]; also the mp4's "
        "unless --fps is given."),
    decode_timestep: Optional[float] = typer.Option(
        None, help="Timestep the VAE decodes at (LTX-Video 0.9.1+) [default: the checkpoint's]."),
    decode_noise_scale: Optional[float] = typer.Option(
        None, help="Noise mixed into the latents before decoding (LTX-Video 0.9.1+) [default: --decode-timestep]."),
    guidance_rescale: Optional[float] = typer.Option(
        None, help="Guidance rescale factor phi in [0, 1] (LTX-Video) [default: 0]."),
    true_cfg_scale: Optional[float] = typer.Option(
        None, help="True classifier-free guidance weight with --negative-prompt (HunyuanVideo) [default: 1, off]."),
    height: Optional[int] = typer.Option(None, help="Pixels (a multiple of what the checkpoint needs, e.g. 16) [default: the checkpoint's, see vidax inspect]."),
    width: Optional[int] = typer.Option(None, help="Pixels [default: the checkpoint's]."),
    num_frames: Optional[int] = typer.Option(None, help="Frames, 4k+1 for the released models [default: the checkpoint's]."),
    num_inference_steps: Optional[int] = typer.Option(None, help="Denoising steps [default: the checkpoint's]."),
    guidance_scale: Optional[float] = typer.Option(None, help="Classifier-free guidance weight (>= 0; > 1 enables CFG) [default: the checkpoint's]."),
    guidance_scale_2: Optional[float] = typer.Option(
        None, "--guidance-scale-2", help="Guidance weight of the second expert of two-expert checkpoints "
        "[default: the --guidance-scale value]."
    ),
    seed: int = typer.Option(0, help="Seed of the initial noise."),
    max_sequence_length: Optional[int] = typer.Option(None, help="Text tokens; longer prompts are truncated with a warning [default: the checkpoint's]."),
    dtype: str = typer.Option("float32", help=f"Transformer/text-encoder dtype: {' or '.join(DTYPE_CHOICES)} "
                                 "(also spelled fp32, bf16)."),
    output: str = typer.Option(
        "vidax-output.mp4", "--output", "-o",
        help="Output: *.mp4, *.npy (an existing file is replaced atomically), or a folder for PNG frames (a new or "
        "empty folder; one holding only frame_NNNNN.png files of an earlier run with --overwrite; any other "
        "folder is refused, nothing in it is removed); /dev/null: generate, write nothing. A symlink is written "
        "through; other devices, FIFOs and sockets are refused."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace the frame_NNNNN.png files an --output folder holds (all of them, "
        "also frames beyond the new video's length)."),
    fps: Optional[int] = typer.Option(None, help="Frames per second of the mp4 [default: the checkpoint's, as its reference's examples]."),
    progress: bool = typer.Option(True, help="Show progress bars."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what vidax does (attention implementation, ...)."),
    dp: Optional[int] = typer.Option(None, help="Data-parallel size (batch, CFG pair) [default: the devices left by tp x sp]."),
    tp: Optional[int] = typer.Option(None, help="Tensor-parallel size (heads, FFN) [default: 1]."),
    sp: Optional[int] = typer.Option(None, help="Sequence-parallel size (Ulysses over the transformer's tokens) [default: 1]."),
    coordinator: Optional[str] = typer.Option(None, help="Multi-host: HOST:PORT of process 0 [env JAX_COORDINATOR_ADDRESS]."),
    num_processes: Optional[int] = typer.Option(None, help="Multi-host: number of processes [env JAX_NUM_PROCESSES]."),
    process_id: Optional[int] = typer.Option(None, help="Multi-host: this process, 0..N-1 [env JAX_PROCESS_ID]."),
    distributed_timeout: float = typer.Option(60.0, help="Multi-host: seconds to wait for the coordinator and the other processes."),
    offload_blocks: Optional[str] = typer.Option(
        None, help="Keep the transformer blocks in host memory and stream N per chunk to the device each step "
        "('all': the whole stack), transfers overlapped with compute: models larger than device memory."),
    keep_text_encoder: Optional[bool] = typer.Option(
        None, "--keep-text-encoder/--offload-text-encoder",
        help="Keep the text encoder on the device, or keep it in host memory and place it only to encode "
        "[default: decided from device memory, see docs/offloading.md]."),
    keep_vae: Optional[bool] = typer.Option(
        None, "--keep-vae/--offload-vae",
        help="Keep the VAE on the device, or place it only to encode / decode [default: decided from device memory]."),
    memory_check: bool = typer.Option(
        True, "--memory-check/--no-memory-check",
        help="Refuse (before loading) a run whose memory estimate exceeds the device's memory (on CPU the "
        "available RAM); --no-memory-check warns and runs it anyway."),
    cache: Optional[str] = typer.Option(
        None, help="Step caching [default: off]: first_block:THRESHOLD (First-Block Cache), mag:RATIOS_FILE "
        "(MagCache; a bare 'mag' calibrates: skips nothing and prints the ratios), taylorseer (TaylorSeer lite)."),
    compile_cache: bool = typer.Option(
        True, "--compile-cache/--no-compile-cache",
        help="Reuse compiled functions across runs (JAX's persistent cache in the user cache folder; "
        "env VIDAX_COMPILE_CACHE: 0 turns it off, a path moves it)."),
) -> None:
    """Generate a video from a text prompt and write it to --output.

    With --dp/--tp/--sp the model runs on a (data, tensor, sequence) mesh over all devices of all
    processes; only process 0 writes the video.

    SIGINT (Ctrl-C) and SIGTERM stop the run at the next check (before each denoising step,
    between the blocks streamed by --offload-blocks, before each VAE decode chunk, after loading
    and after the prompt encoding), print one line saying how far it got and exit 130 / 143;
    nothing is written (a signal while the video is being written lets that file complete). A
    second signal stops the run at once (not while the video is being written).

    Exit status: 0 written; 2 a bad argument, checkpoint or a run gone NaN/Inf (one error line,
    nothing written); 1 the video could not be written after generation (the frames are kept
    as .npy, the error line says where); 130 / 143 interrupted by SIGINT / SIGTERM."""
    args = dict(locals())
    _setup_logging(verbose)
    from vidax.errors import Cancelled, VidaxError

    # Warnings about the call ("num_frames=7 is not of the form 4k+1") name flags here too.
    loggers = [logging.getLogger(name) for name in ("vidax.pipeline", "vidax.tokenizer")]
    for logger in loggers:
        logger.addFilter(_flag_filter)
    stop = _Stop()
    try:
        with stop.catching():
            _generate(**args, stop=stop)
    except Cancelled as e:
        stop.exit(f"{e.done}; nothing was written")
    except VidaxError as e:
        _fail(flag_names(str(e)))
    finally:
        for logger in loggers:
            logger.removeFilter(_flag_filter)


class _Stop:
    """The SIGINT / SIGTERM a run received; calling it is the run's ``cancel`` check. A second
    signal, unless the video is being written (``writing``), ends the process at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[int] = []
        self.writing = False

    def __call__(self) -> bool:
        return bool(self.received)

    @contextlib.contextmanager
    def catching(self):
        """While the run lasts, SIGINT and SIGTERM are only recorded (no KeyboardInterrupt is
        raised inside JAX's callbacks); the previous handlers come back afterwards. Outside the
        main thread (where Python takes no handler) the signals stay as they are."""
        previous = {}
        try:
            for sig in self.SIGNALS:
                previous[sig] = signal.signal(sig, self._record)
        except ValueError:  # not the main thread
            pass
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _record(self, signum: int, frame) -> None:
        self.received.append(signum)
        if len(self.received) > 1 and not self.writing:
            # A run stuck where no check comes (a long compile, a weight file being read, a hung
            # collective): the second signal ends it now. Nothing is being written, so nothing
            # partial is left; os.write, as the main thread may be inside a print (a progress bar
            # may have the line: a new one first).
            os.write(2, f"\ninterrupted again ({signal.Signals(signum).name}): stopped at once; nothing was "
                        "written\n".encode())
            os._exit(128 + signum)

    def exit(self, what: str) -> None:
        """Print the one line ``interrupted (SIGINT) <what>`` and exit 128 + the signal's number."""
        sig = self.received[0] if self.received else signal.SIGINT
        typer.secho(f"interrupted ({signal.Signals(sig).name}) {what}", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(128 + sig)


def _generate(prompt, negative_prompt, checkpoint, height, width, num_frames, num_inference_steps,
              guidance_scale, seed, max_sequence_length, dtype, output, fps, progress, verbose,
              dp=None, tp=None, sp=None, coordinator=None, num_processes=None, process_id=None,
              distributed_timeout=60.0, image=None, guidance_scale_2=None, offload_blocks=None,
              keep_text_encoder=None, keep_vae=None, compile_cache=True, overwrite=False, stop=None,
              memory_check=True, cache=None, **family) -> None:
    from vidax.compile_cache import setup_compile_cache
    from vidax.errors import Cancelled, InputError, OutOfMemoryError
    from vidax.parallel.distributed import check_backend, initialize, is_main_process
    from vidax.parallel.mesh import mesh_from_sizes
    from vidax.io.video import DISCARD, check_output_path, output_paths, write_video
    from vidax.nn.inputs import parse_dtype
    from vidax.stats import RunStats

    setup_compile_cache(enabled=compile_cache)  # before anything compiles
    parse_dtype(dtype)
    offload = _offload_config(offload_blocks, keep_text_encoder, keep_vae)
    fmt = check_output_path(output, overwrite)
    stop = stop or _Stop()
    if fps is not None and fps <= 0:
        raise InputError(f"--fps must be > 0, got {fps}")
    call_image = {}
    if image is not None:
        from vidax.io.image import load_image

        call_image["image"] = load_image(image)  # an unreadable file fails before any loading
    family = {k: v for k, v in family.items() if v is not None}
    if "video" in family:
        call_image["video"] = _load_video(family.pop("video"))
    multi = initialize(coordinator, num_processes, process_id, timeout_s=distributed_timeout)
    check_backend()  # JAX_PLATFORMS naming a backend this machine lacks: one line, before any loading
    mesh = mesh_from_sizes(dp, tp, sp, always=multi)
    stats = RunStats()
    from vidax.default_checkpoint import PUBLIC_NAME, resolve_named_checkpoint
    from vidax.checkpoint import Checkpoint
    from vidax.pipelines.loading import pipeline_class

    if checkpoint is None:
        checkpoint = PUBLIC_NAME
        typer.secho(
            f"Using the embedded default checkpoint ({PUBLIC_NAME}): Wan2.1 layout with tiny, RANDOM "
            "weights, so the video is noise. Pass --checkpoint PATH for real weights.",
            fg=typer.colors.YELLOW, err=True,
        )
    # Configs only: the task follows --image, and every call argument is checked against the
    # checkpoint's configs before any weight is read.
    ckpt = Checkpoint.open(resolve_named_checkpoint(checkpoint))
    task = "i2v" if "image" in call_image else ("v2v" if "video" in call_image else "t2v")
    cls = pipeline_class(ckpt, task=task)
    takes = set(cls.call_args())
    if "image" in call_image and "video" in call_image and "video" not in takes:
        raise InputError(f"--image and --video are both given: with --image, {ckpt.root} runs image-to-video "
                         f"({cls.__name__}), which takes no --video; give one of them")
    unused = [k for k in family if k not in takes]
    if unused:
        has = [GENERATE_FLAGS[k] for k in FAMILY_CALL_FLAGS if k in takes and k != "video"]
        raise InputError(f"{cls.__name__} ({ckpt.root}) does not use {', '.join(GENERATE_FLAGS[k] for k in unused)}; "
                         f"its own flags: {', '.join(has) if has else 'none beyond the common ones'}")
    given = dict(height=height, width=width, num_frames=num_frames, num_inference_steps=num_inference_steps,
                 guidance_scale=guidance_scale, max_sequence_length=max_sequence_length,
                 guidance_scale_2=guidance_scale_2)
    info = cls.read_checkpoint(ckpt)
    call = cls.check_call(info, prompt=prompt, negative_prompt=negative_prompt, seed=seed,
                          progress=progress, cancel=stop, **call_image, **family,
                          **{k: v for k, v in given.items() if v is not None})
    cls.check_checkpoint(info, mesh)  # the scheduler, and the heads against --tp / --sp
    cache_config = None
    if cache is not None:
        from vidax.pipelines.step_cache import parse_cache_option

        cache_config = parse_cache_option(cache, call.num_inference_steps)
        if not cls.cache_reference:
            raise InputError(f"--cache {cache}: diffusers 0.42.1's {cls.__name__} cannot run cache hooks (no cache "
                             "context around its transformer calls, or no block metadata), so there is no reference "
                             "to match")
    paths = output_paths(output, call.batch)
    if len(paths) > 1:  # several videos: each indexed name is checked too
        for path in paths:
            check_output_path(path, overwrite)
    try:  # before any weight is read
        cls.check_memory(info, call, dtype=dtype, loaded=False, refuse=memory_check,
                               devices=1 if mesh is None else mesh.size, offload=offload)
    except OutOfMemoryError as e:
        raise OutOfMemoryError(str(e).replace("pipe.memory_check = False", "--no-memory-check")) from None
    if stop():
        raise Cancelled("before loading")
    pipe = cls.from_pretrained(ckpt, dtype=dtype, stats=stats, mesh=mesh, offload=offload, progress=progress)
    pipe.memory_check = None  # checked (or warned about) above, with the weights counted
    if cache_config is not None:
        pipe.enable_cache(cache_config)
    if stop():
        raise Cancelled("after loading the checkpoint")
    if verbose:
        from vidax.parallel.placement import pipeline_report

        typer.echo(pipeline_report(pipe), err=True)
        if offload is not None:
            from vidax.pipelines.staging import offload_report

            typer.echo(offload_report(pipe), err=True)
    out = pipe.generate(call)
    fps = fps or call.extra.get("frame_rate") or pipe.defaults.fps
    if not is_main_process():
        typer.echo("done (process 0 writes the video)", err=True)
        return
    if stop():
        raise Cancelled(f"after the VAE decode (all {call.num_inference_steps} denoising steps done)")
    written = []
    stop.writing = True  # a second signal now waits for the file being written
    for video, path in zip(out.frames, paths):
        if stop():  # a signal while writing: the files written are complete, the rest is not written
            break
        try:
            written.append(write_video(video, path, fps=fps, overwrite=overwrite))
        except Exception as e:  # disk full, permissions changed meanwhile, a codec error, ...
            _keep_unwritten(out.frames, output, written, e)
    size = f"{out.frames.shape[1]} frames, {out.frames.shape[3]}x{out.frames.shape[2]}"
    if fmt == DISCARD:
        typer.echo(f"wrote nothing: --output {output} keeps nothing ({size})", err=True)
    else:
        typer.echo(f"wrote {', '.join(written)} ({size}, {fmt})", err=True)
    if stop():
        rest = paths[len(written):]
        stop.exit(f"while writing --output: wrote {', '.join(written) or 'nothing'}"
                  + (f"; not written: {', '.join(rest)}" if rest else " (complete)"))
    typer.echo("summary:\n" + out.stats.summary(), err=True)


def _load_video(path: str):
    """uint8 (F, H, W, 3) frames of --video, decoded with PyAV."""
    from vidax.errors import InputError
    from vidax.io.video import read_video

    if not os.path.isfile(path):
        raise InputError(f"--video {path!r}: no such file")
    try:
        frames = read_video(path)
    except Exception as e:  # PyAV's errors for files that are not videos
        raise InputError(f"--video {path!r} could not be read as a video ({type(e).__name__}: {e})") from None
    if frames.shape[0] == 0:
        raise InputError(f"--video {path!r} has no frames")
    return frames


def _keep_unwritten(frames, output, written, error) -> None:
    """Writing the video failed after generation: save the frames as .npy (see
    :func:`vidax.io.video.save_unwritten`), say where in one line and exit 1."""
    from vidax.io.video import save_unwritten

    reason = flag_names(" ".join(f"{type(error).__name__}: {error}".split()))
    done = f"; wrote {', '.join(written)}" if written else ""
    try:
        kept = save_unwritten(frames, output)
    except OSError as e:
        typer.secho(f"error: could not write --output {output!r} ({reason}){done}; saving the frames as .npy "
                    f"failed too ({type(e).__name__}: {e})", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    typer.secho(f"error: could not write --output {output!r} ({reason}){done}; the frames are kept in {kept} "
                f"(float32 {tuple(frames.shape)} = (videos, frames, height, width, RGB) in [0, 1], numpy.load)",
                fg=typer.colors.RED, err=True)
    raise typer.Exit(1) from None


def _offload_config(offload_blocks, keep_text_encoder, keep_vae):
    """The OffloadConfig of --offload-blocks / --keep-* / --offload-*, or None when none is given."""
    if offload_blocks is None and keep_text_encoder is None and keep_vae is None:
        return None
    from vidax.errors import InputError
    from vidax.parallel.offload import OffloadConfig

    chunk = offload_blocks
    if chunk is not None and chunk != "all":
        if not chunk.isdigit() or int(chunk) < 1:
            raise InputError(f"--offload-blocks must be a positive integer (blocks per chunk) or 'all', got {chunk!r}")
        chunk = int(chunk)
    return OffloadConfig(chunk=chunk, keep_text_encoder=keep_text_encoder, keep_vae=keep_vae)


@app.command()
def inspect(
    path: str = typer.Argument(..., help="Diffusers-format pipeline folder or hub id."),
    mesh: Optional[str] = typer.Option(
        None, help="Also show the sharding plan on a mesh, 'DPxTPxSP' or 'dp=..,tp=..,sp=..' (no devices needed)."
    ),
) -> None:
    """Print a checkpoint's components, classes, key configs, parameter counts and dtypes."""
    _setup_logging(False)
    from vidax.errors import VidaxError
    from vidax.inspect import describe_checkpoint, describe_mesh_plan

    try:
        if mesh is not None:  # a malformed --mesh is refused before anything is printed
            from vidax.parallel.mesh import parse_mesh_sizes

            parse_mesh_sizes(mesh)
        typer.echo(describe_checkpoint(path))
        if mesh is not None:
            typer.echo(describe_mesh_plan(path, mesh))
    except VidaxError as e:
        _fail(re.sub(r"\bmesh=", "--mesh ", str(e)))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C before generate's own handler is in place (while Python imports)
        typer.secho("interrupted (SIGINT) before the run started; nothing was written", fg=typer.colors.RED, err=True)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
