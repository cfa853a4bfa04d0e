"""What ``vidax generate`` (:func:`vidax.cli.app.generate`, its flags) runs: read the input files,
plan the call from the checkpoint's configs (:mod:`vidax.pipelines.plan`: every flag checked and
the memory estimated before any weight is read), check the outputs, load, generate, write the
videos and say what was written."""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import typer

from vidax.cli.flags import GenerateFlags, LoadFlags, call_options
from vidax.cli.records import GenerateRequest, apply_loras, generate_request


def generate(load: LoadFlags, own: GenerateFlags, call: dict, output_given: bool, stop, spelling) -> None:
    """Run ``vidax generate``: its flags (``load``, ``own``; ``call``: the call keywords' flags,
    None where not given; ``output_given``: --output typed) checked into a
    :class:`~vidax.cli.records.GenerateRequest`, then :func:`run`. ``stop``: the run's
    :class:`~vidax.interrupt.Stop`; ``spelling``: how errors name the flags
    (:class:`~vidax.cli.commands.Spelling`).

    Raises:
        VidaxError: a bad flag, checkpoint or call (naming the flag), a run gone NaN/Inf;
            Cancelled: a signal stopped the run.
    """
    from vidax.compile_cache import setup_compile_cache
    from vidax.stats import process_start

    # The process is the run's when vidax.__main__ installed its signal handling (not in-process).
    started = process_start() if stop is not None and stop.installed else None
    setup_compile_cache(enabled=load.compile_cache)  # before anything compiles
    request = generate_request(load, own, call, output_given)
    if stop is None:
        from vidax.interrupt import Stop

        stop = Stop()
    run(request, stop, spelling, started)


def run(request: GenerateRequest, stop, spelling, started: float | None = None) -> None:
    """Plan the call of ``request`` from the checkpoint's configs (every flag checked and the
    memory estimated before any weight is read), check the outputs, load, generate and write
    (:func:`generate_and_write`). ``started``: the process's start (time.time()), for the
    summary's startup time (None: not counted).

    Raises:
        VidaxError: a bad checkpoint or call (naming the flag), a run gone NaN/Inf; Cancelled: a
            signal stopped the run.
    """
    from vidax.errors import Cancelled
    from vidax.io.video import free_output_name
    from vidax.parallel.distributed import check_backend, initialize
    from vidax.parallel.mesh import mesh_from_sizes
    from vidax.pipelines.plan import with_memory, with_placement
    from vidax.stats import RunStats

    load, output = request.load, request.output
    coordinator, num_processes, process_id, timeout_s = request.distributed
    multi = initialize(coordinator, num_processes, process_id, timeout_s=timeout_s)
    check_backend()  # JAX_PLATFORMS naming a backend this machine lacks: one line, before any loading
    stats = RunStats()
    plan = _plan_call(request, stop)
    default = output.path
    if not output.given and not output.overwrite:  # the default vidax-output.mp4: an earlier run's is kept
        output = dataclasses.replace(output, path=free_output_name(output.path, plan.call.batch))
    preset_line = _preset_line(plan, request.call, request.cache is not None)
    sound = _makes_sound(plan, output.audio, output.format, output.path)
    # The valid --dp/--tp/--sp a wrong mesh error lists are those the configs' heads split over.
    mesh = mesh_from_sizes(*load.sizes, always=multi, heads=plan.heads)
    # the scheduler, the heads against --tp / --sp, the offloading and staging
    plan = with_placement(
        plan, dtype=load.dtype, mesh=mesh, offload=load.offload, matmul_precision=load.matmul_precision
    )
    cache_config = _cache_config(plan, request.cache)
    paths = _check_outputs(plan, output, sound, request)
    _check_vae_tiling(plan, request.vae_tiling)
    plan = with_memory(plan, refuse=request.memory_check, vae_tiling=request.vae_tiling)  # before any weight is read
    if output.path != default and not output.given:  # said once every flag is checked: no line before an error
        typer.echo(
            f"{default} exists (an earlier run's): writing {output.path} (--output names the file, --overwrite "
            f"replaces {default})",
            err=True,
        )
    if stop():
        raise Cancelled("before loading")
    startup_s = time.time() - started if started is not None else 0.0
    cache_flag = f"--cache {request.cache}" if request.cache else f"--preset {plan.preset and plan.preset.name}"
    pipe = _load(plan, stats, request, cache_config, cache_flag)
    if stop():
        raise Cancelled("after loading the checkpoint")
    if request.verbose:
        _report_placement(pipe, plan)
    from vidax.cli.long_video import generate_streamed, streams

    streamed = streams(pipe, plan.call, output)  # a long video: its chunks written as each ends
    if streamed:
        out, written, frames = generate_streamed(_run, pipe, plan.call, output, paths[0], stop)
    else:
        out = _run(pipe, plan.call, output.format, output.path)
    out.stats.startup_s = startup_s
    out.stats.preset = preset_line
    if not streamed:
        generate_and_write(pipe, plan.call, out, output, paths, stop, spelling)
        return
    _report_written(out, [written], output.format, output.path, frames)
    if stop():
        stop.exit(f"while writing --output: wrote {written} (complete)")
    typer.echo("summary:\n" + out.stats.summary(), err=True)


def generate_and_write(pipe, call, out, output, paths: list, stop, spelling) -> None:
    """Write the videos ``out`` of ``pipe``'s ``call`` (made by :func:`_run`) to ``paths``
    (``output``: the :class:`~vidax.cli.records.OutputOptions`), say what was written and print
    the run's summary; only process 0 writes. A signal while writing lets the file being written
    complete, writes no more and exits as :meth:`~vidax.interrupt.Stop.exit` says."""
    from vidax.errors import Cancelled
    from vidax.parallel.distributed import is_main_process

    fps_given = output.fps is not None and output.fps != pipe.video_fps(call)  # an --fps other than the model's
    fps = output.fps or pipe.video_fps(call)
    if not is_main_process():
        typer.echo("done (process 0 writes the video)", err=True)
        return
    if stop():
        raise Cancelled(f"after the VAE decode (all {call.num_inference_steps} denoising steps done)")
    t_write = time.perf_counter()
    written = write_outputs(
        out, paths, output.format, output.path, fps, fps_given, output.overwrite, stop, spelling, not output.given
    )
    out.stats.write_s = time.perf_counter() - t_write
    _report_written(out, written, output.format, output.path)
    if stop():
        rest = paths[len(written) :]
        stop.exit(
            f"while writing --output: wrote {', '.join(written) or 'nothing'}"
            + (f"; not written: {', '.join(rest)}" if rest else " (complete)")
        )
    typer.echo("summary:\n" + out.stats.summary(), err=True)


def _preset_line(plan, given: dict, cache_given: bool) -> str | None:
    """Say which preset runs and the values it sets (one line, before loading); None: no preset."""
    from vidax.pipelines.presets import preset_summary

    line = preset_summary(plan, given, cache_given)
    if line:
        typer.echo(line, err=True)
    return line


def _checkpoint_or_default(checkpoint: str | None) -> str:
    """``checkpoint``, or the embedded default's name with a line saying its weights are random."""
    from vidax.default_checkpoint import PUBLIC_NAME

    if checkpoint is not None:
        return checkpoint
    typer.secho(
        f"Using the embedded default checkpoint ({PUBLIC_NAME}): Wan2.1 layout with tiny, RANDOM "
        "weights, so the video is noise. Pass --checkpoint PATH for real weights.",
        fg=typer.colors.YELLOW,
        err=True,
    )
    return PUBLIC_NAME


def _plan_call(request: GenerateRequest, stop):
    """The plan of the call ``request``'s flags make (:func:`~vidax.pipelines.plan.read_plan`, then
    :func:`~vidax.pipelines.plan.with_call`), from the configs alone: the task follows --image (or
    another input that asks for one), the flags are those the task's pipeline takes, --fps is the
    call's ``fps`` where the model is conditioned on its frame rate; --preset's values under the
    flags given. ``stop``: the call's ``cancel``."""
    from vidax.checkpoint import TASK_NAMES
    from vidax.cli.long_video import length_call
    from vidax.errors import Arg, InputError, joined
    from vidax.pipelines.plan import read_plan
    from vidax.pipelines.presets import distilled_warning, recognise, with_preset, with_preset_call
    from vidax.pipelines.weight_formats import check_weights_present

    load, given, fps, preset = request.load, request.call, request.output.fps, request.load.preset
    options = call_options()
    inputs = [k for k in given if options[k].task]  # inputs (an image, ...) that each ask for a task
    tasks = [options[k].task for k in inputs]
    task = "i2v" if "i2v" in tasks else tasks[0] if tasks else "t2v"  # an image decides with another input
    plan = read_plan(
        _checkpoint_or_default(load.checkpoint),
        task=task,
        weight_dtype=load.weight_dtype,
        transformer=load.transformer,
        random_weights=request.random_weights,
    )
    check_weights_present(plan.checkpoint)
    plan = with_preset(plan, preset, "--preset")
    cls, root = plan.pipeline, plan.checkpoint.root
    takes = set(cls.call_args())
    untaken = [k for k in inputs if k not in takes]
    if len(inputs) > 1 and untaken:
        chooser = next(k for k in inputs if options[k].task == task)
        raise InputError(
            *joined([Arg(k) for k in inputs], " and "),
            " are both given: with ",
            Arg(chooser),
            f", {root} runs {TASK_NAMES[task]} ({cls.__name__}), which takes no ",
            *joined(Arg(k) for k in untaken),
            "; give one of them",
        )
    unused = [k for k in given if k not in takes]
    if unused:
        own = [Arg(o.name) for o in cls.family.call_options if o.is_flag]
        raise InputError(
            f"{cls.__name__} ({root}) does not use ",
            *joined(Arg(k) for k in unused),
            "; its own flags: ",
            *(joined(own) or ["none beyond the common ones"]),
        )
    given = {k: options[k].from_cli(v) for k, v in given.items()}  # "28,29" -> [28, 29] (--stg-blocks)
    if fps is not None and "fps" in takes:  # a model conditioned on its frame rate (Cosmos 3's fps=): --fps is it
        given["fps"] = float(fps)
    recognised = None if preset is not None else recognise(plan, load.loras)
    if recognised is not None:  # the checkpoint / a LoRA says which recipe it needs: its preset, said in one line
        typer.echo(f"{recognised[1]}: --preset {recognised[0].name}", err=True)
        plan = with_preset(plan, recognised[0].name, "--preset")
    given = length_call(plan, given, request.seconds, fps)  # --seconds; a long video's overlap
    call = dict(progress=request.progress, cancel=stop, decode_audio=request.output.audio)
    plan = with_preset_call(plan, {**call, **given})
    warning = None if recognised is None else distilled_warning(*recognised, plan.call)
    if warning:
        typer.secho(warning, fg=typer.colors.YELLOW, err=True)
    return plan


def _makes_sound(plan, audio: bool, fmt: str, output: str) -> bool:
    """Whether the planned call makes sound (and --audio keeps it); a *.wav --output without it is refused."""
    from vidax.errors import Arg, InputError

    silent = plan.pipeline.family.silent_call(plan.info, plan.call)  # None: this call makes sound
    sound = audio and silent is None
    if fmt == "wav" and not sound:
        why = silent or ("--no-audio leaves the sound out",)
        raise InputError(
            Arg("output", output), " writes the sound alone, but ", *why, "; give *.mp4, *.npy or a folder"
        )
    return sound


def _cache_config(plan, cache: str | None):
    """The step cache --cache asks for (else the preset's; None: off), checked against the planned pipeline."""
    if cache is None:
        return None if plan.preset is None else plan.preset.cache_config(plan.pipeline, plan.call.num_inference_steps)
    from vidax.pipelines.caching import check_cache_kind
    from vidax.pipelines.step_cache import parse_cache_option

    config = parse_cache_option(cache, plan.call.num_inference_steps)
    check_cache_kind(plan.pipeline, config, f"--cache {cache}", plan.checkpoint.pipeline_class_name)
    return config


def _check_outputs(plan, output, sound: bool, request: GenerateRequest) -> list:
    """The output paths of the planned call's videos, each checked writable (with sound, the .wav
    beside each) and none of them an input file, before any weight is read."""
    from vidax.io.clobber import check_inputs_kept
    from vidax.io.video import check_image_frames, check_output_path, output_paths
    from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE

    check_image_frames(output.path, plan.call.num_frames)  # -o x.png for 17 frames
    paths = output_paths(output.path, plan.call.batch)
    for path in paths:  # several videos: each indexed name; with sound, the .wav beside each
        check_output_path(path, output.overwrite, audio=sound)
    options = call_options()
    transformer = request.load.transformer
    files = [(k, v) for k, v in request.files.items() if options[k].type in (IMAGE_FILE, VIDEO_FILE)]
    files += [("lora", path) for path, _ in request.load.loras] + (
        [("transformer", transformer)] if transformer else []
    )
    check_inputs_kept(paths, files, audio=sound)  # -o in.mp4 with --video in.mp4
    return paths


def _check_vae_tiling(plan, vae_tiling: bool) -> None:
    """Refuse --vae-tiling where the planned pipeline's VAE has no tiled decode."""
    from vidax.errors import Arg, InputError

    size = plan.pipeline.family.model_size(plan.info, plan.call)
    if vae_tiling and not (size is not None and size.decode_tile):
        raise InputError(
            Arg("vae_tiling"),
            f": the VAE of {plan.pipeline.__name__} ({plan.checkpoint.root}) has no tiled decode in vidax yet",
        )


def _load(plan, stats, request: GenerateRequest, cache_config, cache_flag: str):
    """The planned pipeline loaded, ``request``'s LoRAs merged and its step cache on (--cache's,
    which replaces the one a preset turned on at load)."""
    pipe = plan.pipeline.from_plan(plan, stats=stats, progress=request.progress)
    apply_loras(pipe, request.load.loras)
    if cache_config is not None:
        pipe.disable_cache()
        pipe.enable_cache(pipe.check_cache(cache_config, cache_flag))
    return pipe


def _report_placement(pipe, plan) -> None:
    """Where each component's weights are (--verbose); with offloading, where each waits."""
    from vidax.parallel.placement import pipeline_report

    typer.echo(pipeline_report(pipe), err=True)
    if plan.offload is not None:
        from vidax.pipelines.staging import offload_report

        typer.echo(offload_report(pipe), err=True)


def _run(pipe, call, fmt: str, output: str):
    """``pipe.generate(call)``; final latents the VAE cannot decode are kept beside --output (as
    an output error keeps the frames) and the error says where."""
    from vidax.errors import NumericalError
    from vidax.io.video import DISCARD
    from vidax.parallel.distributed import is_main_process

    try:
        return pipe.generate(call)
    except NumericalError as e:
        if getattr(e, "latents", None) is None or fmt == DISCARD or not is_main_process():
            raise
        from vidax.io.video import save_unwritten

        try:
            kept = save_unwritten(e.latents, os.path.splitext(output.rstrip(os.sep))[0] + "-latents")
        except OSError:
            raise e from None
        raise NumericalError(
            e.message,
            f"; the final latents are kept in {kept} (float32 {tuple(e.latents.shape)} "
            'as output_type="latent" gives them, numpy.load)',
        ) from None


def write_outputs(
    out, paths: list, fmt: str, output: str, fps, fps_given: bool, overwrite: bool, stop, spelling, default_output=False
) -> list:
    """Write each video (or its sound alone) to its path; the paths written. A signal meanwhile
    lets the file being written complete and writes no more; a failed write keeps the frames.
    With the default output (``default_output``) a name another run took while this one wrote is
    left to it, and the video goes to the next free name."""
    from vidax.io.video import free_output_name, write_audio, write_video

    written = []
    stop.writing = True  # a second signal now waits for the file being written
    sounds = [None] * len(paths) if out.audio is None else list(out.audio)
    if out.audio is not None and fmt == "mp4":
        drift = drift_warning(out.frames.shape[1] / fps, out.audio.shape[-1] / out.audio_sample_rate, fps, fps_given)
        if drift:
            typer.secho(drift, fg=typer.colors.YELLOW, err=True)
    for clip, path, sound in zip(out.frames, paths, sounds):
        if stop():  # a signal while writing: the files written are complete, the rest is not written
            break
        for attempt in range(3):  # the default output: a name another run takes meanwhile is left to it
            try:
                if fmt == "wav":
                    written.append(write_audio(sound, path, out.audio_sample_rate))
                else:
                    written.append(
                        write_video(
                            clip, path, fps=fps, overwrite=overwrite, audio=sound, sample_rate=out.audio_sample_rate
                        )
                    )
                break
            except Exception as e:  # disk full, permissions changed meanwhile, a codec error, ...
                if default_output and fmt == "mp4" and os.path.lexists(path) and attempt < 2:
                    free = free_output_name(path, 1)
                    typer.echo(f"{path} was written by another run meanwhile: writing {free}", err=True)
                    path = free
                    continue
                _keep_unwritten(out.frames, output, written, e, spelling, out.audio, out.audio_sample_rate)
    return written


def _report_written(out, written: list, fmt: str, output: str, frames: int | None = None) -> None:
    """The line saying what was written (or kept nothing; ``frames``: the count written chunk by
    chunk, where ``out`` holds none), and a warning for a stale .wav beside a silent video."""
    from vidax.io.video import DISCARD, audio_path

    n = out.frames.shape[1] if frames is None else frames
    size = f"{n} frame{'s' * (n != 1)} of {out.frames.shape[2]}x{out.frames.shape[3]} (HxW)"  # as vidax inspect
    if out.audio is not None:
        size += f", sound {out.audio.shape[-1] / out.audio_sample_rate:.2f} s at {out.audio_sample_rate} Hz"
    if fmt == DISCARD:
        typer.echo(f"wrote nothing: --output {output} keeps nothing ({size})", err=True)
    elif fmt == "wav":  # the frames were made (the sound follows them) but not kept
        typer.echo(
            f"wrote {', '.join(written)} (the sound only, {out.audio.shape[-1] / out.audio_sample_rate:.2f} s "
            f"at {out.audio_sample_rate} Hz; the video's {size.split(',')[0]} were not written)",
            err=True,
        )
    else:
        typer.echo(f"wrote {', '.join(written)} ({size}, {fmt})", err=True)
    for path in written if out.audio is None else ():  # a .wav beside is a run's sound: never this one's
        wav = audio_path(path)
        if wav is not None and os.path.isfile(wav):
            typer.secho(
                f"warning: {wav} beside {path} is from an earlier run and was not replaced (this run made "
                "no sound); it is not this video's sound",
                fg=typer.colors.YELLOW,
                err=True,
            )


def drift_warning(video_s: float, sound_s: float, fps: float, fps_given: bool) -> str | None:
    """The warning line when an mp4's video (``video_s`` seconds at ``fps``) and its sound
    (``sound_s`` seconds) are more than a frame apart because of the ``--fps`` the user gave;
    None otherwise. At the model's own frame rate (no ``--fps``) a gap is the model's own rounding
    of the sound's length (LTX-2: whole audio latents), as the reference writes it: a debug log."""
    if abs(video_s - sound_s) <= 1 / fps:
        return None
    if not fps_given:
        logging.getLogger("vidax.pipeline").debug(
            "the video lasts %.3f s, its sound %.3f s (the model's rounding)", video_s, sound_s
        )
        return None
    return (
        f"warning: at --fps {fps} the video lasts {video_s:.2f} s but its sound {sound_s:.2f} s; they drift "
        "apart (leave --fps out for the model's frame rate)"
    )


def _keep_unwritten(frames, output, written, error, spelling, audio=None, sample_rate=None) -> None:
    """Writing the video failed after generation: save the frames (and the sound, when there is
    one) as .npy (see :func:`vidax.io.video.save_unwritten`), say where in one line and exit 1."""
    from vidax.io.video import save_unwritten

    reason = " ".join(f"{type(error).__name__}: {spelling.message(error)}".split())
    done = f"; wrote {', '.join(written)}" if written else ""
    try:
        kept = save_unwritten(frames, output)
        sound = (
            ""
            if audio is None
            else (
                f"; the sound in {save_unwritten(audio, os.path.splitext(output.rstrip(os.sep))[0] + '-audio')} "
                f"(float32 {tuple(audio.shape)} = (videos, channels, samples) in [-1, 1] at {sample_rate} Hz)"
            )
        )
    except OSError as e:
        typer.secho(
            f"error: could not write --output {output!r} ({reason}){done}; saving the frames as .npy "
            f"failed too ({type(e).__name__}: {e})",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(1) from None
    typer.secho(
        f"error: could not write --output {output!r} ({reason}){done}; the frames are kept in {kept} "
        f"(float32 {tuple(frames.shape)} = (videos, frames, height, width, RGB) in [0, 1], numpy.load)" + sound,
        fg=typer.colors.RED,
        err=True,
    )
    raise typer.Exit(1) from None
