"""The flags of ``vidax generate`` and ``vidax serve``, declared once as the fields of frozen
dataclasses (:class:`LoadFlags`, shared; :class:`GenerateFlags`, :class:`ServeFlags`): each
field's default is the flag's, its metadata the rest of its ``typer.Option``. A command's
signature is built from them (:func:`signature`) and its values split back into the records
(:func:`split`); the call keywords offered as flags (:func:`call_options`) come from the
registered pipelines' declarations."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Optional

import typer

DTYPE_CHOICES = ("float32", "bfloat16")
#: The original layouts ``--transformer`` reads, as :func:`vidax.weights.single_file.single_file_layouts`
#: names them (that table imports every family's convert.py, too slow for the help; a test keeps
#: the two the same).
SINGLE_FILE_LAYOUTS = ("Wan", "LTX-Video", "LTX-2", "HunyuanVideo", "Cosmos-Predict2/2.5")


def flag(default, *decls: str, **option):
    """A dataclass field declaring a flag: ``default`` is the field's and the flag's default,
    ``decls`` (``"--output", "-o"``) and ``option`` (``help=...``) the rest of its ``typer.Option``."""
    return dataclasses.field(default=default, metadata={"decls": decls, "option": option})


def preset_help() -> str:
    """``--preset``'s help: what a preset is, and each preset with its family and what it does."""
    from vidax.pipelines.presets import PRESETS

    return (
        "A named settings bundle of the checkpoint's family (steps, guidance, sampler, shift, sigmas as its "
        "model card / diffusers documents them), applied before loading; every flag given still wins; "
        "names match in any case. "
        "Presets: " + "; ".join(f"{p.name} ({p.family}): {p.doc}" for p in PRESETS) + "."
    )


@dataclasses.dataclass(frozen=True)
class LoadFlags:
    """The flags that load the pipeline, shared by ``vidax generate`` and ``vidax serve``, as typed
    (checked into a :class:`~vidax.cli.records.LoadOptions`)."""

    checkpoint: Optional[str] = flag(
        None, help="Diffusers-format pipeline folder or hub id. Default: the embedded tiny random checkpoint."
    )
    dtype: str = flag(
        "float32",
        help=f"Transformer/text-encoder dtype: {' or '.join(DTYPE_CHOICES)} (also spelled fp32, bf16).",
    )
    matmul_precision: Optional[str] = flag(
        None,
        "--matmul-precision",
        help="Float32 matmuls and convolutions: highest (in float32, as torch), high, or default (the backend's "
        "fastest: one bfloat16 pass on TPU, TF32 on GPU; float32 runs then have bfloat16-like accuracy). "
        "bfloat16 products are the same in all three. Not given: highest, except the float32 VAE decode of a "
        "bfloat16 run at high (TF32-class, as diffusers' convolutions on a GPU).",
    )
    dp: Optional[int] = flag(
        None,
        help="Data-parallel size (batch, CFG pair) [default: 1 when --tp or --sp is given]; "
        "--dp x --tp x --sp devices are used (the first ones; at most the device count, all of them with several "
        "processes), a size not given is 1.",
    )
    tp: Optional[int] = flag(None, help="Tensor-parallel size (heads, FFN) [default: 1 when --dp or --sp is given].")
    sp: Optional[int] = flag(
        None,
        help="Sequence-parallel size (Ulysses over the transformer's tokens) [default: 1 when --dp or --tp is given].",
    )
    offload_blocks: Optional[str] = flag(
        None,
        help="Keep the transformer blocks in host memory and stream N per chunk to the device each step "
        "('all': the whole stack), transfers overlapped with compute: models larger than device memory.",
    )
    offload_text_encoder_layers: Optional[int] = flag(
        None,
        help="Stream the text encoder's layers N per chunk to the device while it encodes, read from the "
        "checkpoint's files (nothing held in host memory between calls): text encoders larger than device "
        "memory [default: decided from device memory, see docs/offloading.md].",
    )
    keep_text_encoder: Optional[bool] = flag(
        None,
        "--keep-text-encoder/--offload-text-encoder",
        help="Keep the text encoder on the device, or keep it in host memory and place it only to encode "
        "[default: decided from device memory, see docs/offloading.md].",
    )
    keep_vae: Optional[bool] = flag(
        None,
        "--keep-vae/--offload-vae",
        help="Keep the VAE on the device, or place it only to encode / decode [default: decided from device memory].",
    )
    keep_transformer: Optional[bool] = flag(
        None,
        "--keep-transformer/--offload-transformer",
        help="Keep the transformer on the device while the text encoder runs and the VAE decodes, or move it to "
        "host memory meanwhile (back for the steps) [default: decided from device memory].",
    )
    lora: Optional[list[str]] = flag(
        None,
        "--lora",
        help="LoRA file PATH[:SCALE] (.safetensors: diffusers/PEFT, kohya, original/ComfyUI or LightX2V layout), "
        "merged into the transformer at SCALE [default: 1]; repeatable (the LoRAs add up). On two-expert "
        "checkpoints (Wan2.2 A14B) it goes on both experts (a file with transformer_2 keys: each part on its "
        "expert).",
    )
    weights: Optional[str] = flag(
        None,
        "--weights",
        help="Store the transformer's linear weights 8-bit: int8 or fp8 (float8_e4m3fn), a scale per output "
        "channel, quantized as they are read, computed in --dtype (half the bytes of bfloat16) [default: "
        "--dtype's].",
    )
    transformer: Optional[str] = flag(
        None,
        "--transformer",
        help="A single-file transformer checkpoint read instead of the checkpoint's transformer/ weights: "
        ".gguf (Q8_0, Q5_K, Q4_K, ...) or .safetensors (fp8 scaled or not) in the original repository's "
        "layout ("
        + ", ".join(SINGLE_FILE_LAYOUTS)
        + "); a .gguf file's linear weights stay quantized on the device (dequantized "
        "inside each matmul).",
    )
    compile_cache: bool = flag(
        True,
        "--compile-cache/--no-compile-cache",
        help="Reuse compiled functions across runs (JAX's persistent cache in the user cache folder; env "
        "VIDAX_COMPILE_CACHE: 0 turns it off, a path moves it).",
    )


@dataclasses.dataclass(frozen=True)
class GenerateFlags:
    """``vidax generate``'s own flags beyond the call's and the load flags, as typed (checked into
    a :class:`~vidax.cli.records.GenerateRequest`)."""

    output: str = flag(
        "vidax-output.mp4",
        "--output",
        "-o",
        help="Output: *.mp4, *.npy (an existing file given here is replaced atomically; without --output an "
        "existing vidax-output.mp4 is kept and the video goes to the first free vidax-output-N.mp4, unless "
        "--overwrite), *.png / *.jpg / *.webp for a "
        "one-frame video (--num-frames 1, text-to-image; several frames are refused), or a folder for PNG frames (a new or "
        "empty folder; one holding only frame_NNNNN.png files of an earlier run with --overwrite; any other "
        "folder is refused, nothing in it is removed); /dev/null: generate, write nothing. A symlink is written "
        "through; other devices, FIFOs and sockets are refused. A model that makes sound (vidax inspect: audio) "
        "puts it in the mp4 as an AAC track, or in a 16-bit PCM .wav beside *.npy / the image / the folder; "
        "*.wav writes the sound alone.",
    )
    overwrite: bool = flag(
        False,
        "--overwrite",
        help="Replace the frame_NNNNN.png files an --output folder holds (all of them, "
        "also frames beyond the new video's length), the .wav beside an *.npy / folder output, and "
        "(without --output) an earlier run's vidax-output.mp4.",
    )
    audio: bool = flag(
        True,
        "--audio/--no-audio",
        help="Decode and write the sound of a model that makes sound; --no-audio "
        "leaves it out and skips its decode (accepted, and nothing changes, for models without sound).",
    )
    fps: Optional[int] = flag(
        None,
        help="Frames per second of the mp4 [default: the checkpoint's, as its reference's examples]. A model "
        "that conditions on its frame rate through fps= (Cosmos 3) gets it too.",
    )
    seconds: Optional[float] = flag(
        None,
        help="The video's length in seconds instead of --num-frames: seconds x --fps (else the checkpoint's fps) "
        "frames, rounded as the pipeline rounds --num-frames. On a diffusion-forcing checkpoint (SkyReels-V2 DF) "
        "a video of any length, made chunk by chunk in the memory of one chunk, the mp4 growing as each ends; "
        "other checkpoints make one pass, up to their default length.",
    )
    progress: bool = flag(True, help="Show progress bars.")
    verbose: bool = flag(
        False,
        "--verbose",
        "-v",
        help="Show the INFO log lines on stderr: vidax's (the attention implementation "
        "of each shape, LoRA merges and GGUF densify bytes (GGUF blocks a LoRA merges into), staging and offload "
        "decisions, expert swaps, the compile cache folder, the oneDNN CPU matmul build, ...), and after loading "
        "where each component's weights are (with offloading, where each waits).",
    )
    coordinator: Optional[str] = flag(None, help="Multi-host: HOST:PORT of process 0 [env JAX_COORDINATOR_ADDRESS].")
    num_processes: Optional[int] = flag(None, help="Multi-host: number of processes [env JAX_NUM_PROCESSES].")
    process_id: Optional[int] = flag(None, help="Multi-host: this process, 0..N-1 [env JAX_PROCESS_ID].")
    distributed_timeout: float = flag(
        60.0, help="Multi-host: seconds to wait for the coordinator and the other processes."
    )
    vae_tiling: bool = flag(
        False,
        "--vae-tiling",
        help="Decode the video in overlapping spatial tiles (the VAE's enable_tiling(), "
        "diffusers' tile sizes; LTX-Video / LTX-2 also in temporal tiles, use_framewise_decoding): device memory of "
        "the decode bounded by one tile [default: on only when the memory estimate says an untiled decode does "
        "not fit; every family].",
    )
    memory_check: bool = flag(
        True,
        "--memory-check/--no-memory-check",
        help="Refuse (before loading) a run whose memory estimate exceeds the device's memory (on CPU the "
        "available RAM); --no-memory-check warns and runs it anyway.",
    )
    cache: Optional[str] = flag(
        None,
        help="Step caching [default: off]: first_block:THRESHOLD (First-Block Cache), mag:RATIOS_FILE "
        "(MagCache; a bare 'mag' calibrates: skips nothing and prints the ratios), taylorseer (TaylorSeer lite).",
    )
    preset: Optional[str] = flag(None, "--preset", help=preset_help())
    random_weights: bool = flag(
        False,
        "--random-weights",
        help="Make every weight on the device from the checkpoint's configs instead of reading files (the "
        "video is noise): learn whether a model fits this chip and how long it takes without downloading it. "
        "The folder needs only model_index.json and the component configs (e.g. reference_configs/NAME); a "
        "tokenizer folder without tokenizer files is read from a small stand-in tokenizer.",
    )


@dataclasses.dataclass(frozen=True)
class ServeFlags:
    """``vidax serve``'s own flags beyond the load flags, as typed (checked into a
    :class:`~vidax.cli.records.ServeOptions`)."""

    host: str = flag(
        "127.0.0.1",
        help="Address to listen on (only this one; 0.0.0.0 for every IPv4 "
        "interface). An address other machines reach needs --api-key (or --insecure-no-auth).",
    )
    api_key: Optional[str] = flag(
        None,
        envvar="VIDAX_API_KEY",
        show_envvar=True,
        help="Require "
        "'Authorization: Bearer KEY' on every request (401 otherwise); the page "
        "asks for the key. Prefer the environment variable: a flag's value shows "
        "in the process list.",
    )
    insecure_no_auth: bool = flag(
        False,
        "--insecure-no-auth",
        help="Serve a non-loopback --host without an API key (anyone who reaches the port can run and delete jobs).",
    )
    port: int = flag(8000, help="Port to listen on (0: a free one, printed when the server is ready).")
    jobs_dir: str = flag(
        "vidax-jobs",
        help="Folder of the job records (jobs.sqlite3) and the videos "
        "(<id>.mp4); a restart keeps every finished video.",
    )
    queue_size: int = flag(8, help="Jobs that may wait behind the running batch; a request beyond them gets 429.")
    max_batch: int = flag(
        1,
        help="Run up to this many queued jobs as one denoising batch when they differ "
        "only in prompt, negative prompt and seed (same size, frames, steps, guidance, "
        "options); 1: one at a time. Each job's video equals it run alone (see docs/serving.md).",
    )
    batch_window_ms: float = flag(
        0.0,
        help="With --max-batch > 1: how long (ms) a free worker waits for more jobs to join a batch that is not full.",
    )
    save_every: int = flag(
        5,
        help="Save a running job's denoising state (with its step cache's) every this many steps "
        "(under --jobs-dir/states, atomically), so a restart resumes it there; 0: never (it "
        "starts over).",
    )
    preview_every: int = flag(
        0,
        help="Make a preview image of a running job every this many steps "
        "(the current clean-sample estimate through a latent-to-RGB map fit to the VAE at "
        "start, for GET /v1/videos/ID/events and the page); 0: never.",
    )
    preset: Optional[str] = flag(
        None,
        "--preset",
        help=preset_help().replace("every flag given still wins", "a request's fields (its own preset too) still win")
        + " Without it, a checkpoint or --lora file that names its recipe (a LightX2V or CausVid LoRA, a "
        "distilled HunyuanVideo 1.5) runs under that recipe's preset, said in one line at start.",
    )
    access_log: bool = flag(
        False, "--access-log", help="One line per HTTP request on stdout (method, path, status), without --verbose."
    )
    verbose: bool = flag(
        False,
        "--verbose",
        "-v",
        help="Show the INFO log lines on stderr: uvicorn's (every request) and vidax's "
        "(as vidax generate --verbose: the attention implementation, LoRA merges and GGUF densify bytes, staging "
        "and offload decisions, the compile cache folder, the oneDNN CPU matmul build, ...).",
    )


#: ``vidax generate``'s flags in the order its --help lists them (after the call's).
GENERATE_ORDER = (
    *("checkpoint", "dtype", "matmul_precision", "output", "overwrite", "audio", "fps", "seconds", "progress"),
    "verbose",
    *("dp", "tp", "sp", "coordinator", "num_processes", "process_id", "distributed_timeout", "offload_blocks"),
    *(
        "offload_text_encoder_layers",
        "keep_text_encoder",
        "keep_vae",
        "keep_transformer",
        "vae_tiling",
        "memory_check",
        "lora",
        "cache",
        "compile_cache",
        "weights",
    ),
    *("transformer", "preset", "random_weights"),
)
#: ``vidax serve``'s flags in the order its --help lists them.
SERVE_ORDER = (
    *("checkpoint", "host", "api_key", "insecure_no_auth", "port", "jobs_dir", "queue_size", "max_batch"),
    *("batch_window_ms", "save_every", "preview_every", "dtype", "matmul_precision", "dp", "tp", "sp"),
    *("offload_blocks", "offload_text_encoder_layers", "keep_text_encoder", "keep_vae", "keep_transformer"),
    *("lora", "compile_cache"),
    *("weights", "transformer"),
    *("preset", "access_log", "verbose"),
)


#: The placeholders --help shows for the values of flags whose name says too little.
METAVARS = {
    "checkpoint": "PATH|HUB_ID",
    "output": "PATH",
    "lora": "PATH[:SCALE]",
    "transformer": "FILE",
    "weights": "int8|fp8",
    "dtype": "float32|bfloat16",
    "matmul_precision": "highest|high|default",
    "offload_blocks": "N|all",
    "offload_text_encoder_layers": "N",
    "coordinator": "HOST:PORT",
    "cache": "first_block:THRESHOLD|mag[:RATIOS_FILE]|taylorseer",
    "preset": "NAME",
    "api_key": "KEY",
    "jobs_dir": "FOLDER",
    "distributed_timeout": "SECONDS",
}


def signature(order: tuple[str, ...], *records: type) -> inspect.Signature:
    """The signature typer builds a command from: ``ctx``, then one parameter per flag named in
    ``order``, declared by the field of that name in ``records`` (its type, and a new
    ``typer.Option`` of its default, names and help).

    Raises:
        KeyError: a name of ``order`` no record declares.
    """
    fields = {}
    for record in records:
        hints = typing.get_type_hints(record)
        fields.update({f.name: (f, hints[f.name]) for f in dataclasses.fields(record)})
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    for name in order:
        field, kind = fields[name]
        option = dict(field.metadata["option"])
        if kind is not bool:  # a value's placeholder in --help: the field's metavar, else its name as argparse's
            option.setdefault("metavar", METAVARS.get(name, name.upper()))
        option = typer.Option(field.default, *field.metadata["decls"], **option)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind))
    return inspect.Signature(params, return_annotation=None)


def split(values: dict, record: type):
    """``record`` made of the values of its fields in ``values`` (a command's flags by name)."""
    return record(**{f.name: values[f.name] for f in dataclasses.fields(record)})


def frame_rate_words() -> str:
    """What ``--fps`` takes, in words: ``"an integer frame rate in [1, 1000] fps"``
    (:data:`~vidax.pipelines.options.FRAME_RATE_RANGE`)."""
    from vidax.pipelines.options import FRAME_RATE_RANGE

    return f"an integer frame rate in [{FRAME_RATE_RANGE[0]}, {FRAME_RATE_RANGE[1]}] fps"


def call_options() -> dict:
    """The call keywords ``vidax generate`` offers as flags, by name: the shared ones, then those
    every registered pipeline declares (:class:`vidax.pipelines.options.CallOption`; a keyword
    several pipelines take is one flag, its help theirs joined by :func:`~vidax.pipelines.option_help.join_helps`).

    Raises:
        ConfigError: two pipelines declare one keyword with different types (one flag cannot take both).
    """
    from vidax.errors import ConfigError
    from vidax.pipelines.option_help import join_helps
    from vidax.pipelines.options import SHARED_OPTIONS
    from vidax.registry import registry

    options = {o.name: o for o in SHARED_OPTIONS if o.is_flag}
    helps: dict[str, list[str]] = {}
    differ: set[str] = set()  # keywords whose pipelines' defaults differ
    for spec in registry().pipelines():
        for o in spec.load().family.call_options:
            if not o.is_flag:
                continue
            if o.name not in options:
                options[o.name] = o
            elif o.type != options[o.name].type:
                raise ConfigError(
                    f"{spec.class_name} declares the call keyword {o.name!r} as {o.type}, another "
                    f"pipeline as {options[o.name].type}; one flag cannot take both"
                )
            else:
                helps.setdefault(o.name, [options[o.name].help]).append(o.help)
                if o.default != options[o.name].default:
                    differ.add(o.name)
    for name, texts in helps.items():  # one text: shared sentences once, each family's parenthetical
        options[name] = dataclasses.replace(options[name], help=join_helps(texts))
    for name in differ:  # one "[default: X]" would be one family's: each family's help says its own
        options[name] = dataclasses.replace(options[name], default="")
    return options
