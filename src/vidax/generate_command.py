"""What ``vidax generate`` (:func:`vidax.cli.generate`, its flags) runs: read the input files,
plan the call from the checkpoint's configs (:mod:`vidax.pipelines.plan`: every flag checked and
the memory estimated before any weight is read), check the outputs, load, generate, write the
videos and say what was written."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import typer

from vidax.cli_flags import (
    _check_lora_on_streamed_gguf,
    _frame_rate_words,
    _lora_files,
    _offload_config,
    apply_loras,
    call_options,
)


def run(
    given,
    checkpoint,
    dtype,
    output,
    fps,
    progress,
    verbose,
    matmul_precision=None,
    dp=None,
    tp=None,
    sp=None,
    coordinator=None,
    num_processes=None,
    process_id=None,
    distributed_timeout=60.0,
    offload_blocks=None,
    offload_text_encoder_layers=None,
    keep_text_encoder=None,
    keep_vae=None,
    compile_cache=True,
    overwrite=False,
    stop=None,
    memory_check=True,
    lora=None,
    audio=True,
    cache=None,
    spelling=None,
    vae_tiling=False,
    weights=None,
    transformer=None,
    preset=None,
    output_given=True,
    random_weights=False,
) -> None:
    from vidax.compile_cache import setup_compile_cache
    from vidax.errors import Arg, ArgValue, Cancelled, InputError
    from vidax.io.video import check_output_path
    from vidax.nn.inputs import parse_dtype
    from vidax.nn.precision import parse_matmul_precision
    from vidax.parallel.distributed import check_backend, initialize, is_main_process
    from vidax.parallel.mesh import mesh_from_sizes
    from vidax.pipelines.options import FRAME_RATE_RANGE
    from vidax.pipelines.plan import with_memory, with_placement
    from vidax.stats import RunStats, process_start

    # The process is the run's when vidax.__main__ installed its signal handling (not in-process).
    started = process_start() if stop is not None and stop.installed else None
    setup_compile_cache(enabled=compile_cache)  # before anything compiles
    parse_dtype(dtype)
    parse_matmul_precision(matmul_precision)
    offload = _offload_config(offload_blocks, keep_text_encoder, keep_vae, offload_text_encoder_layers)
    fmt = check_output_path(output, overwrite)
    if stop is None:
        from vidax.interrupt import Stop

        stop = Stop()
    if fps is not None and not FRAME_RATE_RANGE[0] <= fps <= FRAME_RATE_RANGE[1]:  # why this range: its comment
        raise InputError(Arg("fps"), f" must be {_frame_rate_words()}, got ", ArgValue("fps", fps))
    given, raw = _read_input_files(given)
    loras = _lora_files(lora or [])  # unreadable, truncated or malformed files: before any loading
    _check_lora_on_streamed_gguf(loras, transformer, weights, offload)
    multi = initialize(coordinator, num_processes, process_id, timeout_s=distributed_timeout)
    check_backend()  # JAX_PLATFORMS naming a backend this machine lacks: one line, before any loading
    stats = RunStats()
    plan = _plan_call(
        _checkpoint_or_default(checkpoint),
        given,
        fps,
        weights,
        transformer,
        progress=progress,
        cancel=stop,
        decode_audio=audio,
        preset=preset,
        loras=loras,
        random_weights=random_weights,
    )
    if not output_given and not overwrite:  # the default vidax-output.mp4: an earlier run's is kept
        output = _free_default_output(output, plan.call.batch)
    preset_line = _preset_line(plan, given, cache is not None)
    sound = _makes_sound(plan, audio, fmt, output)
    # The valid --dp/--tp/--sp a wrong mesh error lists are those the configs' heads split over.
    mesh = mesh_from_sizes(dp, tp, sp, always=multi, heads=plan.heads)
    # the scheduler, the heads against --tp / --sp, the offloading and staging
    plan = with_placement(plan, dtype=dtype, mesh=mesh, offload=offload, matmul_precision=matmul_precision)
    cache_config = _cache_config(plan, cache)
    paths = _check_outputs(plan, output, overwrite, sound, raw, loras, transformer)
    _check_vae_tiling(plan, vae_tiling)
    plan = with_memory(plan, refuse=memory_check, vae_tiling=vae_tiling)  # before any weight is read
    if stop():
        raise Cancelled("before loading")
    startup_s = time.time() - started if started is not None else 0.0
    pipe = _load(
        plan,
        stats,
        progress,
        loras,
        cache_config,
        f"--cache {cache}" if cache else f"--preset {plan.preset and plan.preset.name}",
    )
    if stop():
        raise Cancelled("after loading the checkpoint")
    if verbose:
        _report_placement(pipe, plan)
    call = plan.call
    out = _run(pipe, call, fmt, output)
    fps_given = fps is not None and fps != pipe.video_fps(call)  # an --fps other than the model's
    fps = fps or pipe.video_fps(call)
    if not is_main_process():
        typer.echo("done (process 0 writes the video)", err=True)
        return
    if stop():
        raise Cancelled(f"after the VAE decode (all {call.num_inference_steps} denoising steps done)")
    t_write = time.perf_counter()
    written = _write_outputs(
        out, paths, fmt, output, fps, fps_given, overwrite, stop, spelling, default_output=not output_given
    )
    out.stats.write_s = time.perf_counter() - t_write
    out.stats.startup_s = startup_s
    _report_written(out, written, fmt, output)
    if stop():
        rest = paths[len(written) :]
        stop.exit(
            f"while writing --output: wrote {', '.join(written) or 'nothing'}"
            + (f"; not written: {', '.join(rest)}" if rest else " (complete)")
        )
    out.stats.preset = preset_line
    typer.echo("summary:\n" + out.stats.summary(), err=True)


def _free_default_output(output: str, batch: int) -> str:
    """The default --output where an earlier run's video holds it: the first free
    ``vidax-output-N.mp4`` (:func:`~vidax.io.video.free_output_name`), said in one line."""
    from vidax.io.video import free_output_name

    free = free_output_name(output, batch)
    if free != output:
        typer.echo(
            f"{output} exists (an earlier run's): writing {free} (--output names the file, --overwrite replaces {output})",
            err=True,
        )
    return free


def _preset_line(plan, given: dict, cache_given: bool) -> str | None:
    """Say which preset runs and the values it sets (one line, before loading); None: no preset."""
    from vidax.pipelines.presets import preset_summary

    line = preset_summary(plan, given, cache_given)
    if line:
        typer.echo(line, err=True)
    return line


def _read_input_files(given: dict) -> tuple[dict, dict]:
    """``(given, raw)``: the call flags given (not None), the files they name read (an unreadable
    one fails before any loading); ``raw`` keeps the paths as typed."""
    from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE

    options = call_options()
    given = {k: v for k, v in given.items() if v is not None}
    raw = dict(given)
    given.update(
        {k: _read_file(options[k].type, k, v) for k, v in given.items() if options[k].type in (IMAGE_FILE, VIDEO_FILE)}
    )
    return given, raw


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


def _plan_call(
    checkpoint: str,
    given: dict,
    fps,
    weights,
    transformer,
    preset=None,
    loras=(),
    random_weights=False,
    **call: Any,
):
    """The plan of the call the flags ``given`` make (:func:`~vidax.pipelines.plan.read_plan`, then
    :func:`~vidax.pipelines.plan.with_call`), from the configs alone: the task follows --image (or
    another input that asks for one), the flags are those the task's pipeline takes, --fps is the
    call's ``fps`` where the model is conditioned on its frame rate; --preset's values under the flags given."""
    from vidax.checkpoint import TASK_NAMES
    from vidax.errors import Arg, InputError, joined
    from vidax.pipelines.plan import read_plan
    from vidax.pipelines.presets import distilled_warning, recognise, with_preset, with_preset_call

    options = call_options()
    inputs = [k for k in given if options[k].task]  # inputs (an image, ...) that each ask for a task
    tasks = [options[k].task for k in inputs]
    task = "i2v" if "i2v" in tasks else tasks[0] if tasks else "t2v"  # an image decides with another input
    plan = with_preset(
        read_plan(checkpoint, task=task, weight_dtype=weights, transformer=transformer, random_weights=random_weights),
        preset,
        "--preset",
    )
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
        own = [Arg(o.name) for o in cls.call_options if o.is_flag]
        raise InputError(
            f"{cls.__name__} ({root}) does not use ",
            *joined(Arg(k) for k in unused),
            "; its own flags: ",
            *(joined(own) or ["none beyond the common ones"]),
        )
    given = {k: options[k].from_cli(v) for k, v in given.items()}  # "28,29" -> [28, 29] (--stg-blocks)
    if fps is not None and "fps" in takes:  # a model conditioned on its frame rate (Cosmos 3's fps=): --fps is it
        given["fps"] = float(fps)
    recognised = None if preset is not None else recognise(plan, loras)
    if recognised is not None:  # the checkpoint / a LoRA says which recipe it needs: its preset, said in one line
        typer.echo(f"{recognised[1]}: --preset {recognised[0].name}", err=True)
        plan = with_preset(plan, recognised[0].name, "--preset")
    plan = with_preset_call(plan, {**call, **given})
    warning = None if recognised is None else distilled_warning(*recognised, plan.call)
    if warning:
        typer.secho(warning, fg=typer.colors.YELLOW, err=True)
    return plan


def _makes_sound(plan, audio: bool, fmt: str, output: str) -> bool:
    """Whether the planned call makes sound (and --audio keeps it); a *.wav --output without it is refused."""
    from vidax.errors import Arg, InputError

    silent = plan.pipeline.silent_call(plan.info, plan.call)  # None: this call makes sound
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
    from vidax.pipelines.step_cache import parse_cache_option

    config = parse_cache_option(cache, plan.call.num_inference_steps)
    plan.pipeline.check_cache_kind(config, f"--cache {cache}", plan.checkpoint.pipeline_class_name)
    return config


def _check_outputs(plan, output: str, overwrite: bool, sound: bool, raw: dict, loras: list, transformer) -> list:
    """The output paths of the planned call's videos, each checked writable (with sound, the .wav
    beside each) and none of them an input file, before any weight is read."""
    from vidax.io.clobber import check_inputs_kept
    from vidax.io.video import check_image_frames, check_output_path, output_paths
    from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE

    check_image_frames(output, plan.call.num_frames)  # -o x.png for 17 frames
    paths = output_paths(output, plan.call.batch)
    for path in paths:  # several videos: each indexed name; with sound, the .wav beside each
        check_output_path(path, overwrite, audio=sound)
    options = call_options()
    files = [(k, v) for k, v in raw.items() if options[k].type in (IMAGE_FILE, VIDEO_FILE)]
    files += [("lora", path) for path, _ in loras] + ([("transformer", transformer)] if transformer else [])
    check_inputs_kept(paths, files, audio=sound)  # -o in.mp4 with --video in.mp4
    return paths


def _check_vae_tiling(plan, vae_tiling: bool) -> None:
    """Refuse --vae-tiling where the planned pipeline's VAE has no tiled decode."""
    from vidax.errors import Arg, InputError

    size = plan.pipeline.model_size(plan.info, plan.call)
    if vae_tiling and not (size is not None and size.decode_tile):
        raise InputError(
            Arg("vae_tiling"),
            f": the VAE of {plan.pipeline.__name__} ({plan.checkpoint.root}) has no tiled decode in vidax yet",
        )


def _load(plan, stats, progress: bool, loras: list, cache_config, cache_flag: str):
    """The planned pipeline loaded, its LoRAs merged and its step cache on (--cache's, which
    replaces the one a preset turned on at load)."""
    pipe = plan.pipeline.from_plan(plan, stats=stats, progress=progress)
    apply_loras(pipe, loras)
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


def _write_outputs(
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
        drift = _drift_warning(out.frames.shape[1] / fps, out.audio.shape[-1] / out.audio_sample_rate, fps, fps_given)
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


def _report_written(out, written: list, fmt: str, output: str) -> None:
    """The line saying what was written (or kept nothing), and a warning for a stale .wav beside a
    silent video."""
    from vidax.io.video import DISCARD, audio_path

    n = out.frames.shape[1]
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


def _drift_warning(video_s: float, sound_s: float, fps: float, fps_given: bool) -> str | None:
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


def _read_file(kind: str, name: str, path: str):
    """The value of a call keyword whose flag names a file: an image file as an RGB PIL image,
    a video file as uint8 (F, H, W, 3) frames (decoded with PyAV).

    Raises:
        InputError: no such file, or not an image / a video with frames (naming the flag).
    """
    from vidax.errors import Arg, InputError
    from vidax.io.image import load_image
    from vidax.io.video import read_video
    from vidax.pipelines.options import IMAGE_FILE

    if kind == IMAGE_FILE:
        return load_image(path, name)
    if not os.path.isfile(path):
        raise InputError(Arg(name, path), ": no such file")
    try:
        frames = read_video(path)
    except Exception as e:  # PyAV's errors for files that are not videos
        raise InputError(Arg(name, path), f" could not be read as a video ({type(e).__name__}: {e})") from None
    if frames.shape[0] == 0:
        raise InputError(Arg(name, path), " has no frames")
    return frames


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
