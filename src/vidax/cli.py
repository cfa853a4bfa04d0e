"""The ``vidax`` command line: ``vidax generate``, ``vidax inspect`` and ``vidax serve``."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

import typer
from typer.core import TyperCommand

from vidax.cli_flags import _frame_rate_words, _lora_files, _offload_config, apply_loras, call_options

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
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the versions of vidax, JAX and flax, and the JAX backend.",
    ),
) -> None:
    """vidax: open video-generation models (diffusers checkpoints) in JAX."""


DTYPE_CHOICES = ("float32", "bfloat16")
#: The original layouts ``--transformer`` reads, as :func:`vidax.weights.single_file.single_file_layouts`
#: names them (that table imports every family's convert.py, too slow for the help; a test keeps
#: the two the same).
SINGLE_FILE_LAYOUTS = ("Wan", "LTX-Video", "LTX-2", "HunyuanVideo", "Cosmos-Predict2/2.5")


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


#: The keywords of vidax's functions that ``generate``'s own flags set, where the flag is not
#: the keyword's name (the others are: ``dtype`` is ``--dtype``).
KEYWORD_FLAGS = {
    "timeout_s": "--distributed-timeout",
    "memory_check": "--no-memory-check",
    "decode_audio": "--no-audio",
    "weight_dtype": "--weights",
}


class NumberCommand(TyperCommand):
    """A typer command whose number flags (int or float) are read by one rule,
    :func:`vidax.errors.typed_number` (``16.0`` and ``1e3`` are integers; ``2.50``, ``1_0``,
    ``0x10`` are refused), before typer parses them: a text that spells no number of the flag's
    kind is one error line naming the flag, what is valid and the text as typed
    (``--num-inference-steps must be a positive integer, got 2.50``), not typer's usage error,
    which shows no value. The arguments as typed are ``ctx.meta["argv"]`` (the values errors echo,
    :class:`_Spelling`)."""

    def valid(self, param) -> str:
        """What ``param``'s flag takes, in words."""
        return "an integer" if _kind(param) is int else "a number"

    def bounded(self, param) -> bool:
        """Whether :meth:`valid` gives the largest value (then int64's is not said)."""
        return False

    def parse_args(self, ctx: typer.Context, args: list) -> list:
        ctx.meta["argv"] = list(args)
        numbers = {opt: p for p in self.get_params(ctx) if _kind(p) is not None for opt in p.opts}
        return super().parse_args(ctx, [_read_number(args, i, numbers, self) for i in range(len(args))])


def _kind(param) -> type | None:
    """``int`` or ``float`` for an option taking one number (typer names its type), else None."""
    if getattr(param, "param_type_name", "") != "option" or param.is_flag or param.multiple:
        return None
    return {"int": int, "float": float}.get(str(param.bare_type()))


def _read_number(args: list, i: int, numbers: dict, command: NumberCommand) -> str:
    """``args[i]``, or where it is the value of a number flag (``--seed 1e3``, ``--seed=1e3``)
    the number it spells in Python's digits (``--seed 1000``); exits with the one error line of
    :class:`NumberCommand` where it spells none."""
    from vidax.errors import MAX_TYPED_INT, typed_number

    flag, eq, text = args[i].partition("=")
    if eq and flag in numbers:
        param = numbers[flag]
    elif i > 0 and args[i - 1] in numbers and args[i - 1] != "--":
        param, flag, eq, text = numbers[args[i - 1]], args[i - 1], "", args[i]
    else:
        return args[i]
    number = typed_number(text, integer=_kind(param) is int)
    if number is None or _kind(param) is int and isinstance(number, float):  # a float here: an integer past int64
        cap = "" if number is None or command.bounded(param) else f" (at most {MAX_TYPED_INT} in magnitude)"
        _fail(f"{param.opts[0]} must be {command.valid(param)}{cap}, got {text}")
    return f"{flag}={number!r}" if eq else repr(number)


class GenerateCommand(NumberCommand):
    """``vidax generate``: typer's command plus one flag per call keyword of :func:`call_options`,
    added when first asked for (``--help`` or a run). Their values reach the command as
    ``ctx.meta["call"]`` (name -> value, None where not given)."""

    def declared(self) -> list:
        """The flags of the declared call keywords (in :attr:`params` from the first call on)."""
        if not hasattr(self, "_declared"):
            self._declared = _declared_params(call_options().values())
            self.params[:0] = self._declared
        return self._declared

    def get_params(self, ctx: typer.Context) -> list:
        self.declared()
        return super().get_params(ctx)

    def invoke(self, ctx: typer.Context):
        ctx.meta["call"] = {p.name: ctx.params.pop(p.name) for p in self.declared()}
        return super().invoke(ctx)

    def valid(self, param) -> str:
        """What a flag takes, in words: a call keyword's as its declaration says (``--fps``: the
        frame rates of :data:`~vidax.pipelines.options.FRAME_RATE_RANGE`)."""
        from vidax.pipelines.base import MAX_SEED

        option = call_options().get(param.name)
        if param.name == "seed":
            return f"an integer in [0, {MAX_SEED}]"
        return (
            option.describe_valid()
            if option is not None
            else _frame_rate_words()
            if param.name == "fps"
            else super().valid(param)
        )

    def bounded(self, param) -> bool:
        option = call_options().get(param.name)
        if param.name in ("fps", "seed"):
            return True
        return option is not None and (option.high is not None or option.choices is not None)


def _declared_params(options) -> list:
    """typer's options for declared call keywords (:class:`~vidax.pipelines.options.CallOption`),
    made by typer from a signature holding one ``typer.Option`` per keyword: a bool keyword is
    ``--x/--no-x``; a file kind takes the file's path."""
    import inspect

    from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE

    params = []
    for o in options:
        names = [f"{o.flag_name}/--no-{o.flag_name[2:]}" if o.type is bool else o.flag_name, *o.short]
        default = f" [default: {o.default}]" if o.default and o.cli_default is None else ""
        kind = str if o.type in (IMAGE_FILE, VIDEO_FILE) or o.cli is not None else o.type
        option = typer.Option(
            ... if o.required else o.cli_default,
            *names,
            help=o.help + default,
            show_default=o.cli_default is not None,
            metavar="FILE" if o.type in (IMAGE_FILE, VIDEO_FILE) else "LIST" if o.cli else None,
        )
        params.append(
            inspect.Parameter(
                o.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=option,
                annotation=kind if o.required else Optional[kind],
            )
        )

    def flags(**values):
        return values

    flags.__signature__ = inspect.Signature(params)
    holder = typer.Typer(add_completion=False)
    holder.command()(flags)
    return list(typer.main.get_command(holder).params)


class _Spelling:
    """How a command's errors and warnings name arguments: an :class:`~vidax.errors.Arg` as the
    flag that sets it (``--num-inference-steps 0``), as in Python where no flag does."""

    def __init__(self, command, argv: list | None = None) -> None:
        if isinstance(command, GenerateCommand):
            command.declared()
        options = [p for p in command.params if getattr(p, "param_type_name", "") == "option"]
        self.flags = {p.name: p.opts[0] for p in options if p.opts[0].startswith("--")}
        self.flags.update(KEYWORD_FLAGS)
        # keywords whose flag spells a list as "28,29" (--stg-blocks): their values echoed so
        self.listed = (
            {o.name for o in call_options().values() if o.cli is not None}
            if isinstance(command, GenerateCommand)
            else set()
        )
        # the text typed after each flag (``argv``: the command's arguments), by the flag's first spelling
        first = {opt: p.opts[0] for p in options for opt in p.opts}
        self.typed: dict[str, str] = {}
        for i, token in enumerate(argv or []):
            flag, eq, text = token.partition("=")
            if flag in first and (eq or i + 1 < len(argv)):
                self.typed[first[flag]] = text if eq else argv[i + 1]

    def __call__(self, arg) -> str:
        from vidax.errors import ArgValue

        flag = self.flags.get(arg.name)
        typed = self.typed.get(flag)  # a number is echoed as typed (1e30), not as Python writes it (1e+30)
        if isinstance(arg, ArgValue):  # the value alone ("got 1e39")
            return arg.shown_as(typed)
        if flag is not None and arg.name in self.listed and isinstance(arg.value, (list, tuple)):
            return f"{flag} {','.join(map(str, arg.value))}"
        return str(arg) if flag is None else arg.spelled(flag, typed)

    def message(self, error: BaseException) -> str:
        """An error's message, the arguments a vidax error names spelled as flags."""
        from vidax.errors import VidaxError

        return error.render(self) if isinstance(error, VidaxError) else str(error)

    def filter(self, record: logging.LogRecord) -> bool:
        """A logging filter: the record's :class:`~vidax.errors.Arg` / :class:`~vidax.errors.Message`
        arguments named as flags ("num_frames=7 is not ..." -> "--num-frames 7 is not ...")."""
        from vidax.errors import Arg, Message

        if isinstance(record.args, tuple):
            record.args = tuple(
                self(a) if isinstance(a, Arg) else a.render(self) if isinstance(a, Message) else a for a in record.args
            )
        return True


#: The flags that load the pipeline, shared by ``generate`` and ``serve`` (:func:`load_flag`).
_LOAD_FLAGS = {
    "checkpoint": (
        (None,),
        dict(help="Diffusers-format pipeline folder or hub id. Default: the embedded tiny random checkpoint."),
    ),
    "dtype": (
        ("float32",),
        dict(help=f"Transformer/text-encoder dtype: {' or '.join(DTYPE_CHOICES)} (also spelled fp32, bf16)."),
    ),
    "matmul_precision": (
        (None, "--matmul-precision"),
        dict(
            help="Float32 matmuls and convolutions: highest (in float32, as torch), high, or default (the backend's "
            "fastest: one bfloat16 pass on TPU, TF32 on GPU; float32 runs then have bfloat16-like accuracy). "
            "bfloat16 products are the same in all three. Not given: highest, except the float32 VAE decode of a "
            "bfloat16 run at high (TF32-class, as diffusers' convolutions on a GPU)."
        ),
    ),
    "dp": (
        (None,),
        dict(
            help="Data-parallel size (batch, CFG pair) [default: 1 when --tp or --sp is given]; "
            "--dp x --tp x --sp devices are used (the first ones; at most the device count, all of them with several "
            "processes), a size not given is 1."
        ),
    ),
    "tp": ((None,), dict(help="Tensor-parallel size (heads, FFN) [default: 1 when --dp or --sp is given].")),
    "sp": (
        (None,),
        dict(
            help="Sequence-parallel size (Ulysses over the transformer's tokens) [default: 1 when --dp "
            "or --tp is given]."
        ),
    ),
    "offload_blocks": (
        (None,),
        dict(
            help="Keep the transformer blocks in host memory and stream N per chunk to the device each step "
            "('all': the whole stack), transfers overlapped with compute: models larger than device memory."
        ),
    ),
    "offload_text_encoder_layers": (
        (None,),
        dict(
            help="Stream the text encoder's layers N per chunk to the device while it encodes, read from the "
            "checkpoint's files (nothing held in host memory between calls): text encoders larger than device "
            "memory [default: decided from device memory, see docs/offloading.md]."
        ),
    ),
    "keep_text_encoder": (
        (None, "--keep-text-encoder/--offload-text-encoder"),
        dict(
            help="Keep the text encoder on the device, or keep it in host memory and place it only to encode "
            "[default: decided from device memory, see docs/offloading.md]."
        ),
    ),
    "keep_vae": (
        (None, "--keep-vae/--offload-vae"),
        dict(
            help="Keep the VAE on the device, or place it only to encode / decode [default: decided from device "
            "memory]."
        ),
    ),
    "lora": (
        (None, "--lora"),
        dict(
            help="LoRA file PATH[:SCALE] (.safetensors: diffusers/PEFT, kohya, original/ComfyUI or LightX2V layout), "
            "merged into the transformer at SCALE [default: 1]; repeatable (the LoRAs add up). On two-expert "
            "checkpoints (Wan2.2 A14B) it goes on both experts (a file with transformer_2 keys: each part on its "
            "expert)."
        ),
    ),
    "weights": (
        (None, "--weights"),
        dict(
            help="Store the transformer's linear weights 8-bit: int8 or fp8 (float8_e4m3fn), a scale per output "
            "channel, quantized as they are read, computed in --dtype (half the bytes of bfloat16) [default: "
            "--dtype's]."
        ),
    ),
    "transformer": (
        (None, "--transformer"),
        dict(
            help="A single-file transformer checkpoint read instead of the checkpoint's transformer/ weights: "
            ".gguf (Q8_0, Q5_K, Q4_K, ...) or .safetensors (fp8 scaled or not) in the original repository's "
            "layout ("
            + ", ".join(SINGLE_FILE_LAYOUTS)
            + "); a .gguf file's linear weights stay quantized on the device (dequantized "
            "inside each matmul)."
        ),
    ),
    "compile_cache": (
        (True, "--compile-cache/--no-compile-cache"),
        dict(
            help="Reuse compiled functions across runs (JAX's persistent cache in the user cache folder; env "
            "VIDAX_COMPILE_CACHE: 0 turns it off, a path moves it)."
        ),
    ),
}


def load_flag(name: str):
    """A new ``typer.Option`` of the load flag ``name`` (``"dtype"``, ``"lora"``, ...): the flags
    that load the pipeline are declared once, here, for ``vidax generate`` and ``vidax serve``."""
    args, kwargs = _LOAD_FLAGS[name]
    return typer.Option(*args, **kwargs)


#: ``vidax generate``'s own flags beyond the call's and the load flags: (typer.Option's positional
#: arguments, its keywords).
_GENERATE_FLAGS = {
    "random_weights": (
        (False, "--random-weights"),
        dict(
            help="Make every weight on the device from the checkpoint's configs instead of reading files (the "
            "video is noise): learn whether a model fits this chip and how long it takes without downloading it. "
            "The folder needs only model_index.json and the component configs (e.g. reference_configs/NAME); a "
            "tokenizer folder without tokenizer files is read from a small stand-in tokenizer."
        ),
    ),
    "output": (
        ("vidax-output.mp4", "--output", "-o"),
        dict(
            help="Output: *.mp4, *.npy (an existing file given here is replaced atomically; without --output an "
            "existing vidax-output.mp4 is kept and the video goes to the first free vidax-output-N.mp4, unless "
            "--overwrite), *.png / *.jpg / *.webp for a "
            "one-frame video (--num-frames 1, text-to-image; several frames are refused), or a folder for PNG frames (a new or "
            "empty folder; one holding only frame_NNNNN.png files of an earlier run with --overwrite; any other "
            "folder is refused, nothing in it is removed); /dev/null: generate, write nothing. A symlink is written "
            "through; other devices, FIFOs and sockets are refused. A model that makes sound (vidax inspect: audio) "
            "puts it in the mp4 as an AAC track, or in a 16-bit PCM .wav beside *.npy / the image / the folder; "
            "*.wav writes the sound alone."
        ),
    ),
    "overwrite": (
        (False, "--overwrite"),
        dict(
            help="Replace the frame_NNNNN.png files an --output folder holds (all of them, "
            "also frames beyond the new video's length), the .wav beside an *.npy / folder output, and "
            "(without --output) an earlier run's vidax-output.mp4."
        ),
    ),
    "audio": (
        (True, "--audio/--no-audio"),
        dict(
            help="Decode and write the sound of a model that makes sound; --no-audio "
            "leaves it out and skips its decode (accepted, and nothing changes, for models without sound)."
        ),
    ),
    "fps": (
        (None,),
        dict(
            help="Frames per second of the mp4 [default: the checkpoint's, as its reference's examples]. A model "
            "that conditions on its frame rate through fps= (Cosmos 3) gets it too."
        ),
    ),
    "verbose": (
        (False, "--verbose", "-v"),
        dict(
            help="Show the INFO log lines on stderr: vidax's (the attention implementation "
            "of each shape, LoRA merges and GGUF densify bytes (GGUF blocks a LoRA merges into), staging and offload "
            "decisions, expert swaps, the compile cache folder, the oneDNN CPU matmul build, ...), and after loading "
            "where each component's weights are (with offloading, where each waits)."
        ),
    ),
    "vae_tiling": (
        (False, "--vae-tiling"),
        dict(
            help="Decode the video in overlapping spatial tiles (the VAE's enable_tiling(), "
            "diffusers' tile sizes; LTX-Video / LTX-2 also in temporal tiles, use_framewise_decoding): device memory of "
            "the decode bounded by one tile [default: on only when the memory estimate says an untiled decode does "
            "not fit; every family]."
        ),
    ),
    "memory_check": (
        (True, "--memory-check/--no-memory-check"),
        dict(
            help="Refuse (before loading) a run whose memory estimate exceeds the device's memory (on CPU the "
            "available RAM); --no-memory-check warns and runs it anyway."
        ),
    ),
    "cache": (
        (None,),
        dict(
            help="Step caching [default: off]: first_block:THRESHOLD (First-Block Cache), mag:RATIOS_FILE "
            "(MagCache; a bare 'mag' calibrates: skips nothing and prints the ratios), taylorseer (TaylorSeer lite)."
        ),
    ),
}


def _preset_help() -> str:
    from vidax.pipelines.presets import PRESETS

    return (
        "A named settings bundle of the checkpoint's family (steps, guidance, sampler, shift, sigmas as its "
        "model card / diffusers documents them), applied before loading; every flag given still wins; "
        "names match in any case. "
        "Presets: " + "; ".join(f"{p.name} ({p.family}): {p.doc}" for p in PRESETS) + "."
    )


def generate_flag(name: str):
    """A new ``typer.Option`` of ``vidax generate``'s flag ``name`` (``"output"``, ``"cache"``, ...)."""
    args, kwargs = _GENERATE_FLAGS[name]
    return typer.Option(*args, **kwargs)


@app.command(cls=GenerateCommand)
def generate(
    ctx: typer.Context,
    checkpoint: Optional[str] = load_flag("checkpoint"),
    dtype: str = load_flag("dtype"),
    matmul_precision: str = load_flag("matmul_precision"),
    output: str = generate_flag("output"),
    overwrite: bool = generate_flag("overwrite"),
    audio: bool = generate_flag("audio"),
    fps: Optional[int] = generate_flag("fps"),
    progress: bool = typer.Option(True, help="Show progress bars."),
    verbose: bool = generate_flag("verbose"),
    dp: Optional[int] = load_flag("dp"),
    tp: Optional[int] = load_flag("tp"),
    sp: Optional[int] = load_flag("sp"),
    coordinator: Optional[str] = typer.Option(
        None, help="Multi-host: HOST:PORT of process 0 [env JAX_COORDINATOR_ADDRESS]."
    ),
    num_processes: Optional[int] = typer.Option(None, help="Multi-host: number of processes [env JAX_NUM_PROCESSES]."),
    process_id: Optional[int] = typer.Option(None, help="Multi-host: this process, 0..N-1 [env JAX_PROCESS_ID]."),
    distributed_timeout: float = typer.Option(
        60.0, help="Multi-host: seconds to wait for the coordinator and the other processes."
    ),
    offload_blocks: Optional[str] = load_flag("offload_blocks"),
    offload_text_encoder_layers: Optional[int] = load_flag("offload_text_encoder_layers"),
    keep_text_encoder: Optional[bool] = load_flag("keep_text_encoder"),
    keep_vae: Optional[bool] = load_flag("keep_vae"),
    vae_tiling: bool = generate_flag("vae_tiling"),
    memory_check: bool = generate_flag("memory_check"),
    lora: Optional[list[str]] = load_flag("lora"),
    cache: Optional[str] = generate_flag("cache"),
    compile_cache: bool = load_flag("compile_cache"),
    weights: Optional[str] = load_flag("weights"),
    transformer: Optional[str] = load_flag("transformer"),
    preset: Optional[str] = typer.Option(None, "--preset", help=_preset_help()),
    random_weights: bool = generate_flag("random_weights"),
) -> None:
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
    args = {k: v for k, v in locals().items() if k != "ctx"}
    source = ctx.get_parameter_source("output")  # typer's own click (0.29+) or click: a ParameterSource
    args["output_given"] = getattr(source, "name", "DEFAULT") != "DEFAULT"
    _setup_logging(verbose)
    from vidax.errors import Cancelled, VidaxError

    # Warnings about the call ("num_frames=7 is not of the form 4k+1") name flags here too.
    spelling = _Spelling(ctx.command, ctx.meta.get("argv"))
    loggers = [logging.getLogger(name) for name in ("vidax.pipeline", "vidax.tokenizer")]
    for logger in loggers:
        logger.addFilter(spelling)
    from vidax.interrupt import Stop

    stop = ctx.obj if isinstance(ctx.obj, Stop) else Stop()  # the process's, where vidax.__main__ installed one
    try:
        with stop.catching():
            from vidax.generate_command import run

            run(ctx.meta["call"], **args, stop=stop, spelling=spelling)
    except Cancelled as e:
        stop.exit(f"{e.done}; nothing was written")
    except VidaxError as e:
        _fail(spelling.message(e))
    finally:
        for logger in loggers:
            logger.removeFilter(spelling)


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
    _setup_logging(False)
    from vidax.errors import Arg, InputError, VidaxError
    from vidax.inspect import describe_checkpoint, describe_mesh_plan, describe_transformer_file

    try:
        if mesh is not None:  # a malformed --mesh is refused before anything is printed
            from vidax.parallel.mesh import parse_mesh_sizes

            parse_mesh_sizes(mesh)
        if path.lower().endswith((".safetensors", ".gguf")) and not os.path.isdir(path):  # a single file
            import shlex

            from vidax.inspect import describe_lora
            from vidax.weights.single_file import describe_single_file

            if not os.path.exists(path):
                raise InputError(f"vidax inspect {path!r}: no such file")
            if transformer is not None:
                raise InputError(
                    Arg("transformer", keyword=True),
                    f" needs a checkpoint folder as PATH: {path} is "
                    f"a single file; run vidax inspect FOLDER --transformer {shlex.quote(transformer)}",
                )
            if mesh is not None:  # a single file has no config.json to build its transformer from
                raise InputError(
                    Arg("mesh", mesh),
                    f" needs the transformer's config.json: {path} is a single "
                    f"file; for a single-file transformer run vidax inspect FOLDER --transformer "
                    f"{shlex.quote(path)} --mesh {shlex.quote(mesh)}, FOLDER a checkpoint folder of its "
                    "model (the bytes per device of this file's own tensor types, GGUF stacks mixing "
                    "types padded to the widest type)",
                )

            typer.echo(describe_single_file(path) or describe_lora(path))
            return
        # every part computed (a --transformer checked against the folder) before any is printed
        parts = [describe_checkpoint(path)]
        if transformer is not None:
            parts.append(describe_transformer_file(path, transformer))
        if mesh is not None:
            parts.append(describe_mesh_plan(path, mesh, transformer))
        typer.echo("\n".join(parts))
    except VidaxError as e:
        spelling = _Spelling(ctx.command, ctx.meta.get("argv"))
        # The folder is the command's PATH argument: named as typed, not as the Python keyword.
        _fail(
            e.render(
                lambda a: f"vidax inspect {a.shown_value()}" if a.name == "checkpoint" and a.has_value else spelling(a)
            )
        )


def _check_serve_flags(
    queue_size: int,
    max_batch: int,
    save_every: int,
    preview_every: int,
    batch_window_ms: float,
    jobs_dir: str,
    port: int,
) -> None:
    """vidax serve's own flags checked before anything loads.

    Raises:
        InputError: a flag out of its range (naming it), an empty --jobs-dir.
    """
    from vidax.errors import Arg, ArgValue, InputError

    if queue_size < 0:
        raise InputError(Arg("queue_size"), " must be >= 0, got ", ArgValue("queue_size", queue_size))
    for name, value, least in (
        ("max_batch", max_batch, 1),
        ("save_every", save_every, 0),
        ("preview_every", preview_every, 0),
    ):
        if value < least:
            raise InputError(Arg(name), f" must be >= {least}, got ", ArgValue(name, value))
    if not 0 <= batch_window_ms <= 60000:
        raise InputError(
            Arg("batch_window_ms"), " must be in [0, 60000], got ", ArgValue("batch_window_ms", batch_window_ms)
        )
    if not jobs_dir.strip():
        raise InputError(
            Arg("jobs_dir", jobs_dir),
            " is empty; give a folder for the job records (default vidax-jobs, created if missing)",
        )
    if not 0 <= port <= 65535:
        raise InputError(Arg("port"), " must be in [0, 65535], got ", ArgValue("port", port))


@app.command(cls=NumberCommand)
def serve(
    ctx: typer.Context,
    checkpoint: Optional[str] = load_flag("checkpoint"),
    host: str = typer.Option(
        "127.0.0.1",
        help="Address to listen on (only this one; 0.0.0.0 for every IPv4 "
        "interface). An address other machines reach needs --api-key (or --insecure-no-auth).",
    ),
    api_key: Optional[str] = typer.Option(
        None,
        envvar="VIDAX_API_KEY",
        show_envvar=True,
        help="Require "
        "'Authorization: Bearer KEY' on every request (401 otherwise); the page "
        "asks for the key. Prefer the environment variable: a flag's value shows "
        "in the process list.",
    ),
    insecure_no_auth: bool = typer.Option(
        False,
        "--insecure-no-auth",
        help="Serve a non-loopback --host without an API key (anyone who reaches the port can run and delete jobs).",
    ),
    port: int = typer.Option(8000, help="Port to listen on (0: a free one, printed when the server is ready)."),
    jobs_dir: str = typer.Option(
        "vidax-jobs",
        help="Folder of the job records (jobs.sqlite3) and the videos "
        "(<id>.mp4); a restart keeps every finished video.",
    ),
    queue_size: int = typer.Option(
        8, help="Jobs that may wait behind the running batch; a request beyond them gets 429."
    ),
    max_batch: int = typer.Option(
        1,
        help="Run up to this many queued jobs as one denoising batch when they differ "
        "only in prompt, negative prompt and seed (same size, frames, steps, guidance, "
        "options); 1: one at a time. Each job's video equals it run alone (see README).",
    ),
    batch_window_ms: float = typer.Option(
        0.0,
        help="With --max-batch > 1: how long (ms) a free worker waits for more jobs to join a batch that is not full.",
    ),
    save_every: int = typer.Option(
        5,
        help="Save a running job's denoising state (with its step cache's) every this many steps "
        "(under --jobs-dir/states, atomically), so a restart resumes it there; 0: never (it "
        "starts over).",
    ),
    preview_every: int = typer.Option(
        0,
        help="Make a preview image of a running job every this many steps "
        "(the current clean-sample estimate through a latent-to-RGB map fit to the VAE at "
        "start, for GET /v1/videos/ID/events and the page); 0: never.",
    ),
    dtype: str = load_flag("dtype"),
    matmul_precision: str = load_flag("matmul_precision"),
    dp: Optional[int] = load_flag("dp"),
    tp: Optional[int] = load_flag("tp"),
    sp: Optional[int] = load_flag("sp"),
    offload_blocks: Optional[str] = load_flag("offload_blocks"),
    keep_text_encoder: Optional[bool] = load_flag("keep_text_encoder"),
    keep_vae: Optional[bool] = load_flag("keep_vae"),
    lora: Optional[list[str]] = load_flag("lora"),
    compile_cache: bool = load_flag("compile_cache"),
    weights: Optional[str] = load_flag("weights"),
    transformer: Optional[str] = load_flag("transformer"),
    preset: Optional[str] = typer.Option(
        None,
        "--preset",
        help=_preset_help().replace("every flag given still wins", "a request's fields (its own preset too) still win")
        + " Without it, a checkpoint or --lora file that names its recipe (a LightX2V or CausVid LoRA, a "
        "distilled HunyuanVideo 1.5) runs under that recipe's preset, said in one line at start.",
    ),
    access_log: bool = typer.Option(
        False, "--access-log", help="One line per HTTP request on stdout (method, path, status), without --verbose."
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Show the INFO log lines on stderr: uvicorn's (every request) and vidax's "
        "(as vidax generate --verbose: the attention implementation, LoRA merges and GGUF densify bytes, staging "
        "and offload decisions, the compile cache folder, the oneDNN CPU matmul build, ...).",
    ),
) -> None:
    """Serve video generation over HTTP: OpenAI's /v1/videos API and a page at /.

    One pipeline is loaded once (with its --lora files merged) and stays resident; requests are
    checked as vidax generate checks its flags (400 naming the field), then queued and run one
    at a time or, with --max-batch N, in batches of jobs that share their settings (429 when
    --queue-size jobs wait). GET /v1/videos/ID/events streams a job's progress (server-sent
    events). Nothing is lost on a restart: queued jobs are queued again and a running one
    resumes from its last saved step. The request's fields are OpenAI's (size,
    seconds, input_reference, model) and the call keywords the loaded pipeline declares. POST
    /v1/videos, GET /v1/videos[/ID[/content]], DELETE /v1/videos/ID (cancels between steps), GET
    /v1/models, GET /health; see README "Serving". With --api-key (or VIDAX_API_KEY) every
    request needs 'Authorization: Bearer KEY'; a --host other machines reach is refused without
    one unless --insecure-no-auth.

    SIGINT / SIGTERM: stop accepting requests, stop the running job at its next check (it and
    the queued ones wait in --jobs-dir for the next server), and exit 0."""
    from vidax.errors import VidaxError

    _setup_logging(verbose)
    try:
        _check_serve_flags(queue_size, max_batch, save_every, preview_every, batch_window_ms, jobs_dir, port)
        offload = _offload_config(offload_blocks, keep_text_encoder, keep_vae)
        loras = _lora_files(lora or [])  # unreadable or malformed files: before any loading
        from vidax.serve.command import run

        run(
            checkpoint,
            host,
            port,
            jobs_dir,
            queue_size,
            dtype,
            (dp, tp, sp),
            offload,
            compile_cache,
            verbose,
            load=lambda pipe: apply_loras(pipe, loras),
            weight_dtype=weights,
            transformer=transformer,
            matmul_precision=matmul_precision,
            api_key=api_key,
            insecure_no_auth=insecure_no_auth,
            max_batch=max_batch,
            batch_window_ms=batch_window_ms,
            save_every=save_every,
            preview_every=preview_every,
            preset=preset,
            loras=tuple(path for path, _ in loras),
            access_log=access_log,
        )
    except VidaxError as e:
        _fail(_Spelling(ctx.command, ctx.meta.get("argv")).message(e))


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
