"""What vidax's command-line flags turn into, checked once before any weight is read: the load
part shared by ``vidax generate`` and ``vidax serve`` (:class:`LoadOptions`: the dtype and matmul
precision checked, the offloading flags as an ``OffloadConfig``, the ``--lora`` files read), a
``vidax generate`` run (:class:`GenerateRequest`: its output, its call keywords with their files
read) and a ``vidax serve`` server (:class:`ServeOptions`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from vidax.cli.flags import GenerateFlags, LoadFlags, ServeFlags, call_options, frame_rate_words


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """The pipeline a command loads, from :class:`~vidax.cli.flags.LoadFlags` checked.

    ``checkpoint``: the folder or hub id (None: the embedded default); ``dtype``: ``--dtype`` parsed
    (``jnp.float32`` / ``jnp.bfloat16``); ``matmul_precision``: highest / high /
    default (None: not given); ``sizes``: ``(dp, tp, sp)``, None where not given; ``offload``: the
    ``OffloadConfig`` (None: no offloading flag); ``loras``: ``(path, scale)`` of each ``--lora``;
    ``weight_dtype``: ``--weights``; ``transformer``: a single-file transformer; ``preset``:
    ``--preset``."""

    checkpoint: str | None
    dtype: Any
    matmul_precision: str | None
    sizes: tuple
    offload: Any
    loras: tuple
    compile_cache: bool
    weight_dtype: str | None
    transformer: str | None
    preset: str | None


@dataclasses.dataclass(frozen=True)
class OutputOptions:
    """Where a ``vidax generate`` run writes: ``path`` (``--output``; ``given``: typed, not the
    default), its ``format`` (``"mp4"``, ``"npy"``, ``"png"``, ``"wav"``, ... as
    :func:`~vidax.io.video.check_output_path` names it), ``overwrite``, ``audio`` (``--no-audio``:
    False) and ``fps`` (``--fps``; None: the model's)."""

    path: str
    given: bool
    format: str
    overwrite: bool
    audio: bool
    fps: int | None


@dataclasses.dataclass(frozen=True)
class GenerateRequest:
    """One ``vidax generate`` run, its flags checked: ``load`` and ``output`` (above), ``call`` the
    call keywords given (the files they name read: an image as a PIL image, a video as uint8
    (F, H, W, 3) frames), ``files`` the same keywords as typed (paths), and the run's own flags."""

    load: LoadOptions
    output: OutputOptions
    call: dict
    files: dict
    cache: str | None
    vae_tiling: bool
    memory_check: bool
    random_weights: bool
    progress: bool
    verbose: bool
    distributed: tuple  # (coordinator, num_processes, process_id, timeout in seconds)
    seconds: float | None = None  # --seconds: the length in seconds (None: --num-frames or the default)


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """One ``vidax serve`` server, its flags checked: ``load`` (above), where it listens, the API
    key it requires (None: none) and its job queue (as :class:`~vidax.serve.jobs.JobRunner` takes it)."""

    load: LoadOptions
    host: str
    port: int
    api_key: str | None
    jobs_dir: str
    queue_size: int
    max_batch: int
    batch_window_ms: float
    save_every: int
    preview_every: int
    access_log: bool
    verbose: bool


def generate_request(load: LoadFlags, own: GenerateFlags, call: dict, output_given: bool) -> GenerateRequest:
    """``vidax generate``'s flags checked, in the order a run refuses them: ``--dtype``,
    ``--matmul-precision``, the offloading flags, ``--output``, ``--fps``, the files the call
    flags name (``call``: name -> value, None where not given), the ``--lora`` files.

    Raises:
        InputError: a bad flag, naming it as typed.
    """
    from vidax.errors import Arg, ArgValue, InputError
    from vidax.io.video import check_output_path
    from vidax.pipelines.options import FRAME_RATE_RANGE

    dtype, precision = check_precision(load)
    offload = offload_config(load)
    fmt = check_output_path(own.output, own.overwrite)
    fps = own.fps
    if fps is not None and not FRAME_RATE_RANGE[0] <= fps <= FRAME_RATE_RANGE[1]:  # why this range: its comment
        raise InputError(Arg("fps"), f" must be {frame_rate_words()}, got ", ArgValue("fps", fps))
    if own.seconds is not None and not (0 < own.seconds < float("inf")):
        raise InputError(Arg("seconds"), " must be a length in seconds > 0, got ", ArgValue("seconds", own.seconds))
    given, files = read_input_files(call)
    loras = lora_files(load.lora or [])  # unreadable, truncated or malformed files: before any loading
    check_lora_on_streamed_gguf(loras, load.transformer, load.weights, offload)
    return GenerateRequest(
        load=load_options(load, own.preset, (dtype, precision), offload, loras),
        output=OutputOptions(own.output, output_given, fmt, own.overwrite, own.audio, fps),
        call=given,
        files=files,
        cache=own.cache,
        vae_tiling=own.vae_tiling,
        memory_check=own.memory_check,
        random_weights=own.random_weights,
        progress=own.progress,
        verbose=own.verbose,
        distributed=(own.coordinator, own.num_processes, own.process_id, own.distributed_timeout),
        seconds=own.seconds,
    )


def serve_options(load: LoadFlags, own: ServeFlags) -> ServeOptions:
    """``vidax serve``'s flags checked, in the order the server refuses them: its own ranges, the
    offloading flags, the ``--lora`` files, the access (:func:`~vidax.serve.command.check_access`),
    ``--dtype`` and ``--matmul-precision``.

    Raises:
        InputError: a bad flag, naming it as typed.
    """
    from vidax.serve.command import check_access

    check_serve_flags(own)
    offload = offload_config(load)
    loras = lora_files(load.lora or [])  # unreadable or malformed files: before any loading
    api_key = check_access(own.host, own.api_key, own.insecure_no_auth)
    return ServeOptions(
        load=load_options(load, own.preset, check_precision(load), offload, loras),
        host=own.host,
        port=own.port,
        api_key=api_key,
        jobs_dir=own.jobs_dir,
        queue_size=own.queue_size,
        max_batch=own.max_batch,
        batch_window_ms=own.batch_window_ms,
        save_every=own.save_every,
        preview_every=own.preview_every,
        access_log=own.access_log,
        verbose=own.verbose,
    )


def check_precision(load: LoadFlags) -> tuple[Any, str | None]:
    """``(dtype, matmul_precision)``: ``--dtype`` parsed (:func:`~vidax.nn.inputs.parse_dtype`:
    ``jnp.float32`` or ``jnp.bfloat16``, the one parse of the flag, what the plan takes) and
    ``--matmul-precision`` as :func:`~vidax.nn.precision.parse_matmul_precision` names it (None:
    not given).

    Raises:
        InputError: a dtype or precision vidax does not run, naming the flag.
    """
    from vidax.nn.inputs import parse_dtype
    from vidax.nn.precision import parse_matmul_precision

    return parse_dtype(load.dtype), parse_matmul_precision(load.matmul_precision)


def load_options(load: LoadFlags, preset: str | None, precision: tuple, offload, loras: list) -> LoadOptions:
    """The :class:`LoadOptions` of ``load`` whose parts are checked: ``precision`` (of
    :func:`check_precision`), ``offload`` (:func:`offload_config`), ``loras`` (:func:`lora_files`)."""
    return LoadOptions(
        checkpoint=load.checkpoint,
        dtype=precision[0],
        matmul_precision=precision[1],
        sizes=(load.dp, load.tp, load.sp),
        offload=offload,
        loras=tuple(loras),
        compile_cache=load.compile_cache,
        weight_dtype=load.weights,
        transformer=load.transformer,
        preset=preset,
    )


def check_serve_flags(own: ServeFlags) -> None:
    """vidax serve's own flags checked before anything loads.

    Raises:
        InputError: a flag out of its range (naming it), an empty --jobs-dir.
    """
    from vidax.errors import Arg, ArgValue, InputError

    if own.queue_size < 0:
        raise InputError(Arg("queue_size"), " must be >= 0, got ", ArgValue("queue_size", own.queue_size))
    for name, least in (("max_batch", 1), ("save_every", 0), ("preview_every", 0)):
        value = getattr(own, name)
        if value < least:
            raise InputError(Arg(name), f" must be >= {least}, got ", ArgValue(name, value))
    if not 0 <= own.batch_window_ms <= 60000:
        raise InputError(
            Arg("batch_window_ms"), " must be in [0, 60000], got ", ArgValue("batch_window_ms", own.batch_window_ms)
        )
    if not own.jobs_dir.strip():
        raise InputError(
            Arg("jobs_dir", own.jobs_dir),
            " is empty; give a folder for the job records (default vidax-jobs, created if missing)",
        )
    if not 0 <= own.port <= 65535:
        raise InputError(Arg("port"), " must be in [0, 65535], got ", ArgValue("port", own.port))


def lora_files(specs: list[str]) -> list[tuple[str, float]]:
    """``(path, scale)`` of each ``--lora PATH[:SCALE]``, each file read and its keys checked
    for a LoRA layout (not yet against the model)."""
    import math

    from vidax.errors import InputError
    from vidax.lora.formats import parse, read_state_dict
    from vidax.pipelines.options import MAX_FLOAT

    out = []
    for spec in specs:
        path, scale = spec, 1.0
        head, sep, tail = spec.rpartition(":")
        if sep and not os.path.exists(spec):
            try:
                path, scale = head, float(tail)
            except ValueError:
                raise InputError(f"--lora {spec!r}: give PATH or PATH:SCALE with SCALE a number") from None
            if not math.isfinite(scale) or abs(scale) > MAX_FLOAT:  # the merge is float32
                raise InputError(
                    f"--lora {spec!r}: SCALE must be a finite number (at most {MAX_FLOAT:.4g} in "
                    "magnitude, float32's largest)"
                )
        parse(*read_state_dict(path, f"--lora {path}"), what=f"--lora {path}")
        out.append((path, scale))
    return out


def apply_loras(pipe, loras) -> None:
    """Merge the LoRAs of :func:`lora_files` into ``pipe``'s transformer(s) at their scales
    (every key placed and checked before any step runs); nothing for an empty list."""
    if loras:
        names = [
            pipe.lora.load(path, f"lora_{i}", experts=range(len(pipe.experts.modules)), what=f"--lora {path}")
            for i, (path, _) in enumerate(loras)
        ]
        pipe.set_adapters(names, [scale for _, scale in loras])


def check_lora_on_streamed_gguf(loras, transformer, weights, offload) -> None:
    """A LoRA on a .gguf transformer (its linear weights kept as GGUF blocks) with streamed blocks
    is refused by the merge (vidax does not merge into streamed GGUF blocks): refuse it here, before
    any loading, instead of after the transformer is read."""
    if (
        loras
        and transformer
        and weights is None
        and offload is not None
        and offload.streams_blocks
        and str(transformer).lower().endswith(".gguf")
    ):
        from vidax.errors import InputError

        raise InputError(
            f"--lora {loras[0][0]}: vidax does not merge a LoRA into the GGUF blocks of a .gguf "
            "--transformer whose blocks are streamed (--offload-blocks); drop --offload-blocks, or add "
            "--weights int8 (the file re-quantized to int8, which a LoRA merges into)"
        )


def offload_config(load: LoadFlags):
    """The OffloadConfig of --offload-blocks / --offload-text-encoder-layers / --keep-* / --offload-*,
    or None when none is given."""
    chunk, layers, keep_text_encoder = load.offload_blocks, load.offload_text_encoder_layers, load.keep_text_encoder
    keeps = (keep_text_encoder, load.keep_vae, load.keep_transformer)
    if chunk is None and layers is None and all(k is None for k in keeps):
        return None
    from vidax.errors import InputError
    from vidax.parallel.offload import OffloadConfig

    if chunk is not None and chunk != "all":
        if not chunk.isdigit() or int(chunk) < 1:
            raise InputError(f"--offload-blocks must be a positive integer (blocks per chunk) or 'all', got {chunk!r}")
        chunk = int(chunk)
    if layers is not None and layers < 1:
        raise InputError(
            f"--offload-text-encoder-layers must be a positive integer (text encoder layers per chunk), got {layers}"
        )
    if layers is not None and keep_text_encoder:
        raise InputError(
            "--offload-text-encoder-layers streams the text encoder's layers, --keep-text-encoder keeps them on "
            "the device: give one of the two"
        )
    return OffloadConfig(
        chunk=chunk,
        keep_text_encoder=keep_text_encoder,
        keep_vae=load.keep_vae,
        text_encoder_chunk=layers,
        keep_transformer=load.keep_transformer,
    )


def read_input_files(given: dict) -> tuple[dict, dict]:
    """``(given, raw)``: the call flags given (not None), the files they name read (an unreadable
    one fails before any loading); ``raw`` keeps the paths as typed."""
    from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE
    from vidax.pipelines.options import read_input_file as read_file

    options = call_options()
    given = {k: v for k, v in given.items() if v is not None}
    raw = dict(given)
    given.update(
        {k: read_file(options[k].type, k, v) for k, v in given.items() if options[k].type in (IMAGE_FILE, VIDEO_FILE)}
    )
    return given, raw
