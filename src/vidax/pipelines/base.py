"""The pipeline every family shares: load -> check -> encode -> denoise -> decode.

:class:`VideoPipeline` owns what does not depend on the model: reading the checkpoint once
(:class:`~vidax.checkpoint.Checkpoint`), loading components through the registry
(:mod:`vidax.registry`), the device mesh, staging and block streaming, the call's argument checks
(from the configs alone, so a bad argument costs no weight read), CFG batching, the denoising loop
(one jitted step, or the blocks streamed from host memory, in segments of one expert each),
decoding through the VAE contract, the run summary and progress bars.

A family subclasses it and provides hooks (see "Family hooks" below): what its checkpoint is
(:meth:`VideoPipeline.read_checkpoint`, configs only), which components it loads, how a prompt is
encoded, the conditioning of a call, the initial latents, the transformer's inputs of one step and
the scheduler update. Call arguments beyond the shared ones are declared in ``call_options``;
a keyword that is neither is a one-line error naming what the pipeline takes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import time
from typing import Any, Callable, ClassVar, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from vidax.config import read_json_object
from vidax.encoders.tokenizer import Truncation
from vidax.errors import (Arg, ArgValue, Cancelled, Message, joined, ConfigError, InputError, NumericalError,
                          OutOfMemoryError, VidaxError)
from vidax.nn.inputs import parse_dtype
from vidax.nn.precision import describe_matmul_precision, parse_matmul_precision
from vidax.nn.precision import matmul_precision as precision_context
from vidax.nn.layers import quantized_weight_formats
from vidax.cpu.onednn import describe as describe_cpu_matmul
from vidax.nn.stack import as_stack_bits, from_stack_bits
from vidax.parallel.offload import ChunkedStep, offloaded_stacks
from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo  # noqa: F401 (part of the API)
from vidax.pipelines.common import VideoPipelineOutput, check_task, status
from vidax.pipelines.experts import Experts, segments
from vidax.pipelines.options import OBJECT, SHARED_OPTIONS, CallOption, check_options, options_by_name
from vidax.pipelines.sampling import all_finite, classifier_free_guidance, nonfinite_advice, run_denoising_loop
from vidax.pipelines.staging import Staging, plan_pipeline_staging
from vidax.pipelines.plan import Plan, read_plan, with_placement
from vidax.pipelines.step_inputs import StepInputs
from vidax.pipelines.weight_formats import transformer_source
from vidax.pipelines.step_cache import (CacheCarry, CacheReport, CacheSpec, StepCache, TaylorSeerCacheConfig,
                                        check_cache_call, check_cache_config, describe_config, step_shapes, taylorseer_mode)
from vidax.registry import registry
from vidax.schedulers import scheduler_from_config
from vidax.stats import RunStats
from vidax.weights.component import Request, load_components

logger = logging.getLogger("vidax.pipeline")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a loaded pipeline accepts, declared (never probed from signatures).

    Attributes:
        tasks: the tasks of its checkpoint. image: takes ``image=``. video: takes ``video=``.
        guidance_scale_2: takes ``guidance_scale_2=`` (two experts). audio: makes sound.
        offload: streams its transformer blocks / stages components. call_args: every keyword
        its ``__call__`` takes.
    """

    tasks: tuple[str, ...]
    image: bool
    video: bool
    guidance_scale_2: bool
    audio: bool
    offload: bool
    call_args: tuple[str, ...]


#: Call keywords every pipeline takes (:data:`~vidax.pipelines.options.SHARED_OPTIONS`), with
#: their meaning in :meth:`VideoPipeline.__call__`.
SHARED_CALL_ARGS = tuple(o.name for o in SHARED_OPTIONS)
_SHARED = options_by_name(SHARED_OPTIONS)


@dataclasses.dataclass(frozen=True)
class Call:
    """One call's arguments after the checks, defaults filled in (see :meth:`VideoPipeline.__call__`).

    ``prompts`` and ``negatives`` are lists of B0 strings; ``batch`` = B0 x num_videos_per_prompt;
    ``extra`` holds the family's own keywords. ``cfg`` says whether the cond/uncond pair runs
    when the family decides it by its own rule (HunyuanVideo: ``true_cfg_scale > 1`` with a
    negative prompt); None: ``guidance_scale > 1``. ``cancel`` is the zero-argument check of the
    call's ``cancel`` keyword (None: not cancellable). ``given``: the keywords the caller passed
    (not None), so that warnings name only arguments the user gave (``"seed"`` missing: the seed
    was drawn at random). ``latents`` holds the first (video) stream's given latents;
    ``stream_latents`` those of the other streams, by their keyword (``audio_latents``).
    ``decode_audio``: decode the sound (the ``decode_audio`` keyword; False skips its decode).
    ``step_end``: diffusers' ``callback_on_step_end`` (None: none). ``lora_scale``: the
    ``attention_kwargs`` ``"scale"`` (None: not given). ``return_dict``: False returns a tuple.
    ``prompt_parts`` / ``negative_parts``: the given ``prompt_embeds`` (and masks, pooled
    embeddings...) as float32 / integer numpy arrays in the order of the family's
    :attr:`VideoPipeline.prompt_embeds_args` (None: encode the texts).
    """

    prompts: list
    negatives: list
    image: Any
    height: int
    width: int
    num_frames: int
    num_inference_steps: int
    guidance_scale: float
    guidance_scale_2: float
    num_videos_per_prompt: int
    seed: int
    latents: Any
    max_sequence_length: int
    output_type: str
    progress: bool
    callback: Any
    extra: Mapping[str, Any]
    cfg: bool | None = None
    cancel: Callable[[], bool] | None = None
    given: frozenset = frozenset()
    stream_latents: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    decode_audio: bool = True
    step_end: Callable | None = None
    lora_scale: float | None = None
    return_dict: bool = True
    prompt_parts: tuple | None = None
    negative_parts: tuple | None = None

    @property
    def batch(self) -> int:
        return len(self.prompts) * self.num_videos_per_prompt

    @property
    def do_cfg(self) -> bool:
        return self.guidance_scale > 1.0 if self.cfg is None else self.cfg

    @property
    def task(self) -> str:
        """``"i2v"`` with an image, ``"v2v"`` with a ``video`` keyword, else ``"t2v"``."""
        if self.image is not None:
            return "i2v"
        return "v2v" if self.extra.get("video") is not None else "t2v"


@dataclasses.dataclass(frozen=True)
class SizeLimits:
    """The largest sizes a checkpoint's model can represent (None: no limit), each already a
    valid value (a multiple of ``size_multiple``; frames of the form the family rounds to).

    Attributes:
        height, width: pixels. num_frames: frames. reason: why (for the error message).
    """

    height: int | None = None
    width: int | None = None
    num_frames: int | None = None
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """What the run-size estimate of :func:`run_size_estimate` reads about the transformer and VAE.

    Attributes:
        tokens: tokens one sample's transformer sequence has for the call (video patches, plus
            text tokens where they join the sequence). hidden_size: model width D.
        ffn_dim: the feed-forward hidden width. num_layers: transformer blocks.
        num_heads: attention heads (0: ``hidden_size // 64``).
        decode_frames: video frames one VAE decode chunk makes (Wan: 4, one latent frame).
        decode_channels: the VAE decoder's channel width at full resolution.
        decode_tile: pixels per side of the VAE's default decode tile (its ``enable_tiling()``,
            the longer side where tiles are not square); 0 where the VAE has no tiled decode.
    """

    tokens: int
    hidden_size: int
    ffn_dim: int
    num_layers: int
    num_heads: int = 0
    decode_frames: int = 4
    decode_channels: int = 128
    decode_tile: int = 0


#: A call whose transformer sequence has more than this many times the tokens of the
#: checkpoint's default size (what it was made for) logs the run-size estimate as a WARNING.
LARGE_RUN_FACTOR = 4

# Calibration of :func:`run_size_estimate`, measured as the peak RSS growth of one call on CPU
# (tests/test_run_stats.py::test_memory_estimate_within_2x_of_measured_peak lists the ratios):
#: bytes per element of a decode chunk's full-resolution activations (frames x H x W x channels):
#: XLA's CPU convolutions unfold their 3x3x3 input (27 taps) for part of the network.
DECODE_BYTES_PER_ELEMENT = 80
#: bytes per token and per unit of (4 D + ffn_dim) in the denoising step, per dtype byte: q, k,
#: v, attention output, FFN hidden and the residual stream alive at once, inputs and outputs.
STEP_BUFFERS = 2
#: what every call needs beyond the model's arrays (XLA's compiles and runtime, thread stacks).
RUNTIME_OVERHEAD_BYTES = 160 * 2**20


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Peak memory of one call, in bytes, by part (see :func:`run_size_estimate`).

    Attributes:
        weights: parameters that must be in memory (0 when they are already loaded).
        step: the largest denoising step's activations (attention temporaries included).
        decode: one VAE decode chunk. outputs: latents and the decoded video (float32, host).
        overhead: :data:`RUNTIME_OVERHEAD_BYTES`.
        decode_tiled: one VAE decode chunk of one tile with tiling on (None: the VAE has no tiling).
        vae_tiling: ``decode`` counts the tiled decode (:meth:`with_tiling`).
        text: the text encoder's activations at ``max_sequence_length`` (:func:`text_encoding_bytes`;
            0 where it is not counted).
    """

    weights: int
    step: int
    decode: int
    outputs: int
    overhead: int = RUNTIME_OVERHEAD_BYTES
    decode_tiled: int | None = None
    vae_tiling: bool = False
    text: int = 0

    def with_tiling(self) -> "MemoryEstimate | None":
        """This estimate with the VAE decoding in tiles; None where the VAE has no tiling."""
        if self.decode_tiled is None:
            return None
        return dataclasses.replace(self, decode=min(self.decode, self.decode_tiled), vae_tiling=True)

    @property
    def total(self) -> int:
        """Weights + the largest of the text encoding, the step and the decode (they do not
        overlap) + outputs + overhead."""
        return self.weights + max(self.text, self.step, self.decode) + self.outputs + self.overhead

    def describe(self) -> str:
        parts = [("weights", self.weights)] if self.weights else []
        parts += [("text encoding", self.text)] if self.text else []
        parts += [("denoising step", self.step), ("VAE decode chunk" + (" (tiled)" if self.vae_tiling else ""), self.decode), ("latents and video", self.outputs)]
        return f"~{_gib(self.total)} (" + ", ".join(f"{name} {_gib(b)}" for name, b in parts) + ")"


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def run_memory_estimate(size: ModelSize, batch: int, latent_elements: int, num_frames: int, height: int,
                        width: int, *, videos: int | None = None, dtype_bytes: int = 4,
                        weights: int = 0, decoded: bool = True) -> MemoryEstimate:
    """Peak memory of one call (:class:`MemoryEstimate`), from the sizes alone.

    * step: ``STEP_BUFFERS x batch x tokens x (4 D + ffn_dim) x dtype_bytes`` (blocks run one
      after another), plus attention's temporary: the ``(batch, heads, tokens, tokens)`` float32
      scores and probabilities where the ``"xla"`` implementation runs (up to 2**22 scores per
      head), else the blockwise ``(batch, heads, tokens, 512)`` float32 accumulators.
    * decode: ``decode_frames x height x width x decode_channels x DECODE_BYTES_PER_ELEMENT``;
      tiled (``size.decode_tile``): the same with height and width at most one tile.
    * outputs: latents (float32) and the video, 3 float32 copies (chunks, joined, clipped).

    Args:
        size: the model's numbers (:class:`ModelSize`). batch: samples per transformer call (CFG
            doubles it). latent_elements: elements of the initial latents. num_frames, height,
            width: the decoded video. videos: videos decoded (default ``batch``).
        dtype_bytes: bytes of the transformer's dtype. weights: parameter bytes to count.
        decoded: False when the latents are returned (``output_type="latent"``): no decode, no video.
    """
    from vidax.nn.attention import AUTO_XLA_MAX_SCORES, DEFAULT_BLOCK_SIZE

    heads = size.num_heads or max(1, size.hidden_size // 64)
    t = size.tokens
    attention = batch * heads * t * 2 * (t if t * t <= AUTO_XLA_MAX_SCORES else DEFAULT_BLOCK_SIZE) * 4
    step = STEP_BUFFERS * batch * t * (4 * size.hidden_size + size.ffn_dim) * dtype_bytes + attention
    decode = size.decode_frames * height * width * size.decode_channels * DECODE_BYTES_PER_ELEMENT if decoded else 0
    video = 3 * (videos or batch) * num_frames * height * width * 3 * 4 if decoded else 0
    tile = size.decode_tile
    tiled = (size.decode_frames * min(tile, height) * min(tile, width) * size.decode_channels
             * DECODE_BYTES_PER_ELEMENT if decoded else 0) if tile else None
    return MemoryEstimate(weights=int(weights), step=int(step), decode=int(decode),
                          outputs=int(latent_elements * 4 * 2 + video), decode_tiled=tiled)


def text_encoding_bytes(info: CheckpointInfo, prompts: int, tokens: int, name: str = "text_encoder") -> int:
    """The activations of text encoder ``name`` on ``prompts`` prompts of ``tokens`` tokens, as
    :func:`run_memory_estimate` counts a denoising step (float32: ``STEP_BUFFERS x prompts x
    tokens x (4 D + ffn)`` plus the blockwise attention's accumulators), from its config
    (``hidden_size`` / ``d_model``, ``intermediate_size`` / ``d_ff``, a multimodal model's
    ``text_config``; T5's relative position bias, ``L x L`` per head); 0 where the checkpoint has
    no such component or its config gives no width."""
    from vidax.nn.attention import DEFAULT_BLOCK_SIZE

    if not info.checkpoint.has(name):
        return 0
    config = info.checkpoint.config(name)
    config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config

    def first(*keys):
        return next((v for v in map(config.get, keys) if isinstance(v, int) and not isinstance(v, bool) and v > 0), 0)

    width, ffn, heads = first("hidden_size", "d_model"), first("intermediate_size", "d_ff"), first(
        "num_attention_heads", "num_heads")
    if not width:
        return 0
    attention = prompts * max(1, heads) * tokens * 2 * min(tokens, DEFAULT_BLOCK_SIZE) * 4
    if first("relative_attention_num_buckets"):
        # T5's relative position bias: float32 (heads, L, L), from int64 (L, L) bucket ids.
        attention += tokens * tokens * (4 * max(1, heads) + 8)
    return STEP_BUFFERS * prompts * tokens * (4 * width + ffn) * 4 + attention


def run_size_estimate(size: ModelSize, batch: int, latent_elements: int, num_frames: int, height: int,
                      width: int, videos: int | None = None) -> str:
    """One line of rough float32 numbers of a run, for the warning of a very large call: the
    peak memory of :func:`run_memory_estimate` by part, and ``4 x batch x tokens^2 x D x
    num_layers`` FLOPs of attention per step (QK^T and PV).

    Args: as :func:`run_memory_estimate`.
    """
    flops = 4 * batch * size.tokens ** 2 * size.hidden_size * size.num_layers
    est = run_memory_estimate(size, batch, latent_elements, num_frames, height, width, videos=videos)
    return (f"{size.tokens} tokens per sample x batch {batch}: peak memory {est.describe()}, "
            f"~{flops / 1e12:.0f} TFLOP of attention per step")


def available_memory() -> tuple[int, str]:
    """(bytes a call can still use, what they are): the least free ``bytes_limit -
    bytes_in_use`` over this process's devices where the backend reports it (GPU, TPU), else the
    host's available RAM (``psutil``; CPU, where device arrays live in host memory)."""
    from vidax.stats import device_memory_stats

    free = [int(s["bytes_limit"]) - int(s.get("bytes_in_use", 0)) for s in device_memory_stats() if s.get("bytes_limit")]
    if free:
        return min(free), "free device memory"
    import psutil

    return int(psutil.virtual_memory().available), "available host RAM"


def size_words(call: Call) -> Message:
    """``"height=H, width=W: HxW pixels, F frames"``, the size arguments the caller gave named as
    arguments (:class:`~vidax.errors.Arg`: the CLI names its flags), the others only as numbers."""
    named = joined(Arg(k, getattr(call, k)) for k in ("height", "width", "num_frames") if k in call.given)
    return Message(*named, ": " * bool(named), f"{call.height}x{call.width} pixels, {call.num_frames} frames")


def checkpoint_weight_bytes(checkpoint: Checkpoint, dtype: Any, names: Sequence[str] | None = None) -> int:
    """Bytes of the parameters of components ``names`` (None: every one), from the safetensors
    headers (no tensor is read): the VAE in float32, the others in ``dtype`` (floating tensors;
    the transformers' linear weights in the checkpoint's 8-bit ``weights`` format when it has one;
    a single-file transformer, ``transformer=FILE``, counted from its file as it loads).
    A component whose files cannot be read counts 0 here: loading it reports what is wrong."""
    from vidax.pipelines.staging import component_bytes

    total = 0
    for name in checkpoint.index if names is None else names:
        if name.startswith("_") or not checkpoint.has(name):
            continue
        folder = os.path.join(checkpoint.root, name)
        if name in checkpoint.files:
            try:
                source = transformer_source(checkpoint, name, registry().find_component(checkpoint.class_of(name)))
                total += component_bytes(source, dtype, weights=checkpoint.weights)["total"]
            except VidaxError:
                pass
            continue
        if os.path.isdir(folder) and any(f.endswith(".safetensors") for f in os.listdir(folder)):
            try:
                weights = checkpoint.weights if name.startswith("transformer") else None  # 8-bit kernels
                total += component_bytes(folder, jnp.float32 if name == "vae" else dtype, weights=weights)["total"]
            except VidaxError:
                pass
    return total


#: Seeds are integers in ``[0, MAX_SEED]``: ``jax.random.PRNGKey`` keeps the low 32 bits of a
#: seed (without ``jax_enable_x64``), so a larger or a negative seed would repeat one of these.
MAX_SEED = 2**32 - 1


def _prompts(name: str, prompt: Any, batch: int | None = None) -> list[str]:
    arg = Arg(name)
    if prompt is None and batch is not None:
        return [""] * batch
    if prompt is None:
        raise InputError(arg, " is required: describe the video (a string or a list of strings)")
    if isinstance(prompt, str):
        prompt = [prompt] * (batch or 1)
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(p, str) for p in prompt):
        raise InputError(arg, f" must be a string or a list of strings, got {type(prompt).__name__}")
    if not prompt:
        raise InputError(arg, " is an empty list")
    if batch is not None and len(prompt) != batch:
        raise InputError(arg, f" has {len(prompt)} entries but ", Arg("prompt"), f" has {batch}; give one per prompt")
    if batch is None and not all(p.strip() for p in prompt):
        raise InputError(arg, f" is empty ({(prompt[0] if len(prompt) == 1 else prompt)!r}); describe the video")
    return list(prompt)


def _given_prompt_parts(cls: type, extra: dict, negative: bool) -> tuple | None:
    """The call's precomputed prompt encoding (``prompt_embeds=`` and its partners, or the
    ``negative_`` ones), taken out of ``extra``, as numpy arrays in the order of
    ``cls.prompt_embeds_args``: floating ones float32 and finite, masks ``cls.prompt_mask_dtype``;
    None when none is given.

    Raises:
        InputError: only some of them given (they come together, as diffusers' encode_prompt
            makes them), a value that is not an array of real numbers, another number of axes
            than diffusers' ((B, L, D) embeddings, (B, L) masks, (B, D) pooled embeddings), or
            batch sizes that differ.
    """
    names = [("negative_" if negative else "") + n for n in cls.prompt_embeds_args]
    values = {n: extra.pop(n) for n in names if n in extra}
    given = [n for n in names if values.get(n) is not None]
    if not given:
        return None
    missing = [n for n in names if n not in given]
    if missing:
        raise InputError(Arg(given[0]), " is given without ", *joined(Arg(m) for m in missing), f": {cls.__name__} "
                         "takes them together (as encode_prompt_embeds returns them)")
    out = []
    for n in names:
        v = values[n]
        if "mask" in n:
            kind = np.asarray(v).dtype.kind
            if kind not in "biuf":
                raise InputError(Arg(n), f" must be an array of 0 / 1 (or bool), got {type(v).__name__}")
            arr = (np.asarray(v) != 0).astype(cls.prompt_mask_dtype)
        else:
            arr = finite_array(n, v)
        want = 2 if "mask" in n or "pooled" in n else 3
        if arr.ndim != want:
            layout = "(batch, tokens)" if "mask" in n else "(batch, width)" if want == 2 else "(batch, tokens, width)"
            raise InputError(Arg(n), f" has shape {tuple(arr.shape)}; diffusers' layout is {layout}")
        if out and arr.shape[0] != out[0].shape[0]:
            raise InputError(Arg(n), f" has {arr.shape[0]} rows but ", Arg(names[0]), f" has {out[0].shape[0]}")
        out.append(arr)
    return tuple(out)


def _embeds_prompts(name: str, prompt: Any, parts: tuple, batch: int | None = None) -> list[str]:
    """Placeholder texts for a batch given as embeddings (one empty string per row).

    Raises:
        InputError: the text is given too (diffusers raises for both), or the batch is not
            ``batch`` (the prompts').
    """
    arg = "prompt_embeds" if name == "prompt" else "negative_prompt_embeds"
    if prompt is not None:
        raise InputError("give ", Arg(name), " or ", Arg(arg), ", not both (as diffusers)")
    rows = parts[0].shape[0]
    if batch is not None and rows != batch:
        raise InputError(Arg(arg), f" has {rows} rows but there are {batch} prompts; give one per prompt")
    return [""] * rows


def _step_end(callback: Any, tensor_inputs: Any) -> Callable | None:
    """The call's ``callback_on_step_end`` after checking it and its tensor inputs.

    Raises:
        InputError: not callable; tensor inputs other than ``["latents"]``
            (:data:`~vidax.pipelines.diffusers_keywords.REFUSED_VALUES` says why).
    """
    from vidax.pipelines.diffusers_keywords import refused_value_reason

    if callback is not None and not callable(callback):
        raise InputError(Arg("callback_on_step_end"), f" must be callable or None, got {type(callback).__name__}")
    if tensor_inputs is not None:
        names = list(tensor_inputs) if isinstance(tensor_inputs, (list, tuple)) else None
        if names is None or any(n != "latents" for n in names):
            raise InputError(Arg("callback_on_step_end_tensor_inputs", tensor_inputs), " must be ['latents']: "
                             f"{refused_value_reason('callback_on_step_end_tensor_inputs')}")
    return callback


def _lora_scale(attention_kwargs: Any) -> float | None:
    """The ``"scale"`` of a call's ``attention_kwargs`` (None: not given); other keys are logged
    as ignored, as diffusers' attention processors warn that they are not expected.

    Raises:
        InputError: not a dict, or a scale that is not a finite number.
    """
    if attention_kwargs is None:
        return None
    if not isinstance(attention_kwargs, Mapping):
        raise InputError(Arg("attention_kwargs"), f" must be a dict such as {{'scale': 0.7}} or None, got "
                         f"{type(attention_kwargs).__name__}")
    other = sorted(str(k) for k in attention_kwargs if k != "scale")
    if other:
        logger.warning("attention_kwargs %s are not expected by vidax's attention and are ignored (as diffusers' "
                       "attention processors ignore them)", other)
    scale = attention_kwargs.get("scale")
    if scale is None:
        return None
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not np.isfinite(scale):
        raise InputError(Arg("attention_kwargs", attention_kwargs), " must give 'scale' as a finite number (the LoRA "
                         "scale of this call)")
    return float(scale)


#: A tokenizer_config.json ``model_max_length`` at or above this is transformers' "no limit"
#: placeholder (``int(1e30)``), not a length.
_NO_TOKEN_LIMIT = 10**9


def tokenizer_token_limit(info: CheckpointInfo, fallback: int, fallback_reason: str,
                          name: str = "tokenizer") -> tuple[int, str]:
    """``(largest max_sequence_length, why)`` for a text encoder without a position table
    (T5 / UMT5: relative positions): the tokenizer's ``model_max_length`` in
    ``<name>/tokenizer_config.json``, or ``fallback`` (the family's reference bound) where the
    file gives none or transformers' "no limit"; never below the checkpoint's default."""
    ckpt = info.checkpoint
    file = os.path.join(ckpt.folder(name), "tokenizer_config.json")
    n = read_json_object(file).get("model_max_length") if os.path.isfile(file) else None
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 < n < _NO_TOKEN_LIMIT:
        limit, reason = fallback, fallback_reason
    else:
        limit, reason = int(n), f"model_max_length={int(n)} in {file}"
    default = info.defaults.max_sequence_length
    return (limit, reason) if limit >= default else (default, "the checkpoint's default max_sequence_length")


def frames_as_pil(frames: np.ndarray) -> list:
    """float32 (B, F, H, W, 3) in [0, 1] -> B lists of F PIL images, as diffusers'
    ``output_type="pil"`` (``numpy_to_pil``: ``(x * 255).round()`` as uint8)."""
    from PIL import Image

    pixels = (np.asarray(frames) * 255).round().astype(np.uint8)
    return [[Image.fromarray(frame) for frame in video] for video in pixels]


def host_array(value: Any) -> Any:
    """A torch tensor (told by its ``detach`` / ``cpu`` / ``numpy`` methods: vidax never imports
    torch) as a numpy array, bfloat16 as float32; anything else as it is."""
    if all(callable(getattr(value, a, None)) for a in ("detach", "cpu", "numpy")):
        t = value.detach().cpu()
        return (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()
    return value


def finite_array(name: str, value: Any) -> np.ndarray:
    """``value`` (numpy, JAX, a torch tensor, nested lists) as a float32 numpy array; anything
    but an array of real numbers (a string, a complex array), or NaN / Inf anywhere, is an
    InputError naming ``name``."""
    value = host_array(value)
    kind = np.asarray(value).dtype.kind if not hasattr(value, "dtype") else np.dtype(value.dtype).kind
    if kind not in "biuf" and np.dtype(getattr(value, "dtype", np.float32)).name != "bfloat16":
        raise InputError(Arg(name), f" must be an array of real numbers (float32), got "
                         f"{type(value).__name__} of dtype {np.asarray(value).dtype}")
    arr = np.asarray(value, np.float32)
    if not np.isfinite(arr).all():
        bad = int(arr.size - np.isfinite(arr).sum())
        raise InputError(Arg(name), f" has {bad} NaN/Inf value(s) of {arr.size}; give finite values")
    return arr


def check_finite(what: str, x: Any, params: Any = None) -> None:
    """Stop a run whose values went non-finite (e.g. a bf16 overflow), naming where (``what``:
    the step or the component, e.g. "the VAE decode (chunk 2 of 5)") and what to try, from the
    dtype of the weights that made ``x`` (``params``: a pytree of them, or their dtype; None:
    unknown; :func:`~vidax.pipelines.sampling.nonfinite_advice`).

    Raises:
        NumericalError: ``x`` holds NaN or Inf.
    """
    ok = np.isfinite(x).all() if isinstance(x, np.ndarray) else all_finite(x)
    if not bool(ok):
        raise NumericalError(f"{what} produced NaN/Inf values; stopped there, nothing was written ",
                             nonfinite_advice(params))


#: The largest magnitude of final latents the VAE is given. The VAEs' norm layers (RMS, group,
#: layer norms) sum the squares of their activations in float32; latents far past this (e.g.
#: ~1e28 from guidance_scale=1e30) overflow those sums to Inf, the norm divides by it and the
#: decode is a finite, flat grey video: the NaN/Inf check cannot see it. Below it the sums stay
#: far inside float32 (1e8 squared is 1e16, times a group of 1e7 activations and the convolutions'
#: gains); trained models' final latents are ~N(0, 1) scaled by the VAE's statistics, |x| < 100.
MAX_DECODE_LATENT = 1e8


def check_decodable(call: Call, latents: jax.Array, kept: Callable[[], np.ndarray]) -> None:
    """Refuse final ``latents`` past :data:`MAX_DECODE_LATENT` before the VAE decodes them.

    Raises:
        NumericalError: naming the peak and the likely cause (the guidance scale); its
            ``latents`` attribute holds ``kept()`` (the latents as ``output_type="latent"``).
    """
    peak = float(jnp.max(jnp.abs(latents)))
    if peak > MAX_DECODE_LATENT:
        error = NumericalError(
            f"the final latents reach |x| = {peak:.3g}, past the {MAX_DECODE_LATENT:.0e} the VAE can decode (its norm "
            "layers' float32 sums of squares would overflow to Inf and the video come out flat grey); the likely cause "
            "is ", Arg("guidance_scale", call.guidance_scale), ": give a smaller one; no video was decoded")
        error.latents = kept()
        raise error


#: The config fields of a transformer's attention head counts (each splits over tensor x sequence).
HEAD_FIELDS = ("num_attention_heads", "audio_num_attention_heads")


class VideoPipeline:
    """Base of the family pipelines; build with :meth:`from_pretrained` or :func:`vidax.load_pipeline`.

    Attributes:
        checkpoint: the folder's index and configs. info: what the checkpoint is (the family's
        :class:`CheckpointInfo`). defaults: :class:`CallDefaults`. dtype: transformer dtype.
        mesh: the device mesh or None. staging: where the text encoder / VAE wait.
        experts: the denoising transformers (:class:`~vidax.pipelines.experts.Experts`).
    """

    #: The task this class is for (``"t2v"`` / ``"i2v"``); the checkpoint must do it. A call
    #: with ``image=`` does image-to-video where the checkpoint also does that (Wan2.2 TI2V-5B).
    task: ClassVar[str] = "t2v"
    #: Call keywords this family takes beyond :data:`SHARED_CALL_ARGS`, declared
    #: (:class:`~vidax.pipelines.options.CallOption`): their type and range are checked with the
    #: shared ones, and ``vidax generate`` offers each as a flag.
    call_options: ClassVar[tuple[CallOption, ...]] = ()
    #: The shared keywords this family does not take.
    unsupported_call_args: ClassVar[tuple[str, ...]] = ()
    #: Components staged when device memory is short, in order.
    stageable: ClassVar[tuple[str, ...]] = ("text_encoder", "vae")
    #: The dtype classifier-free guidance combines predictions in (None: the model output's).
    guidance_dtype: ClassVar[Any] = None
    #: How ``latents=`` is laid out, for error messages.
    latents_layout: ClassVar[str] = "(batch, channels, latent frames, height / vae_scale, width / vae_scale)"
    #: The scheduler classes (``scheduler_config.json``'s ``_class_name``) the family's sampling
    #: loop runs; None: any scheduler vidax implements.
    scheduler_classes: ClassVar[tuple[str, ...] | None] = None
    #: The latent streams the model denoises together, by the call keyword that gives each one's
    #: initial noise: the video's (``latents``) first, then e.g. ``audio_latents``. With one
    #: stream the latents are one array everywhere; with several they are a dict keyed by these
    #: names through the loop (noise, checks, the jitted step, sharding, block streaming).
    latent_streams: ClassVar[tuple[str, ...]] = ("latents",)
    #: The stream the audio decoder decodes (one of :attr:`latent_streams`), None: no sound.
    audio_stream: ClassVar[str | None] = None
    #: How the audio stream's latents are laid out, for error messages (LTX-2's).
    audio_latents_layout: ClassVar[str] = "(batch, channels, audio latent length, latent mel bins)"
    #: The pipeline's attributes holding the audio decoder (contract
    #: :class:`~vidax.pipelines.contracts.AudioDecoder`) and the vocoder (contract
    #: :class:`~vidax.pipelines.contracts.Vocoder`; None where the decoder gives a waveform).
    audio_decoder_name: ClassVar[str] = "audio_vae"
    vocoder_name: ClassVar[str | None] = "vocoder"
    #: diffusers' keywords of a prompt's precomputed encoding (``prompt_embeds``, its mask, a
    #: pooled embedding...), in the order of :meth:`encode_prompt_parts`'s arrays; the negative
    #: prompt's are these with ``negative_`` in front. Empty: the family takes none.
    prompt_embeds_args: ClassVar[tuple[str, ...]] = ()
    #: The dtype of the masks among :attr:`prompt_embeds_args` (what the family's encoding makes).
    prompt_mask_dtype: ClassVar[Any] = np.bool_

    def __init__(self, info: CheckpointInfo, modules: Mapping[str, Any], *, dtype: Any, mesh: Any = None,
                 staging: Staging | None = None, offload: Any = None, offload_experts: bool = True,
                 load_s: float = 0.0, matmul_precision: str = "highest"):
        self.info = info
        self.checkpoint = info.checkpoint
        self.root = info.checkpoint.root
        self.defaults = info.defaults
        self.dtype = dtype
        self.mesh = mesh
        self.offload = offload
        self.staging = staging or Staging()
        for name, module in modules.items():
            setattr(self, name, module)
        names = [n for n in info.transformers if n in modules]
        self.experts = Experts([modules[n] for n in names], offload=offload_experts, names=names)
        self._pending_load_s = load_s
        self._step_fns: dict[Any, Any] = {}
        self._lora = None
        self._interrupt = False
        self.matmul_precision = matmul_precision

    @property
    def interrupt(self) -> bool:
        """diffusers' ``pipe.interrupt``: a ``callback_on_step_end`` that sets
        ``pipe._interrupt = True`` makes the call skip its remaining denoising steps and decode
        the latents it has (reset to False when a call starts, as diffusers does)."""
        return self._interrupt

    @property
    def matmul_precision(self) -> str:
        """How float32 matrix products and convolutions run in this pipeline's calls
        (:mod:`vidax.nn.precision`): ``"highest"`` (float32, the default), ``"high"`` or
        ``"default"`` (the backend's fastest: one bfloat16 pass on TPU). Settable; a new value
        compiles its own programs."""
        return self._matmul_precision

    @matmul_precision.setter
    def matmul_precision(self, value: str) -> None:
        self._matmul_precision = parse_matmul_precision(value)

    def precision(self):
        """A context in which the pipeline's work runs at :attr:`matmul_precision`."""
        return precision_context(self.matmul_precision)

    # ================================================================== family hooks (configs)
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> CheckpointInfo:
        """What the checkpoint is, from its configs (no weights).

        Raises:
            CheckpointError, ConfigError: a missing component or a setting vidax does not implement.
        """
        raise NotImplementedError

    @classmethod
    def resolve_num_frames(cls, info: CheckpointInfo, num_frames: int) -> int:
        """The frame count the reference uses for ``num_frames`` (may warn)."""
        return num_frames

    @classmethod
    def check_family_call(cls, info: CheckpointInfo, call: Call) -> None:
        """Family-specific checks of a call (raise InputError)."""

    @classmethod
    def latent_shape(cls, info: CheckpointInfo, call: Call) -> tuple[int, ...]:
        """Shape of the initial noise in the diffusers layout (:attr:`latents_layout`); by default
        a causal video VAE's (:func:`video_latent_shape` of ``info.vae_config``'s
        ``latent_channels``, ``temporal_compression`` and ``spatial_compression``)."""
        v = info.vae_config
        return video_latent_shape(call, v.latent_channels, v.temporal_compression, v.spatial_compression)

    @classmethod
    def latent_shapes(cls, info: CheckpointInfo, call: Call) -> dict[str, tuple[int, ...]]:
        """The initial noise's shape of each of :attr:`latent_streams` (call keyword -> shape, in
        the diffusers layout); by default the one video stream's :meth:`latent_shape`. A family
        with more streams adds theirs (LTX-2's audio latents ``(B, C, L, mel_bins)``)."""
        return {cls.latent_streams[0]: tuple(cls.latent_shape(info, call))}

    @classmethod
    def makes_audio(cls, info: CheckpointInfo) -> bool:
        """Whether the checkpoint's model makes sound: the family has an :attr:`audio_stream` (a
        family whose checkpoints may lack the sound head, as Cosmos 3's, also reads ``info``)."""
        return cls.audio_stream is not None

    @classmethod
    def default_length(cls, info: CheckpointInfo) -> str:
        """The clip length a call without ``num_frames`` gets, as ``vidax inspect`` shows it:
        ``"N frames"`` by default (a family that predicts it, as LTX-2.5, says so)."""
        return f"{info.defaults.num_frames} frames"

    @classmethod
    def silent_call(cls, info: CheckpointInfo, call: Call) -> tuple | None:
        """Why the checked ``call`` makes no sound, as message parts (strings, :class:`Arg`), or
        None when it makes sound; by default it does when :meth:`makes_audio` (a family where
        sound is a call option, as Cosmos 3's ``enable_sound``, also reads ``call``). The output
        checks (a ``.wav`` output, the ``.wav`` beside an ``.npy``) ask this before any weight
        is read."""
        return None if cls.makes_audio(info) else (f"{cls.__name__} ({info.checkpoint.root}) makes no sound",)

    @classmethod
    def size_limits(cls, info: CheckpointInfo) -> SizeLimits:
        """The largest height / width / num_frames the model can represent (e.g. its RoPE
        tables' length); :meth:`check_call` refuses more, naming the largest valid value."""
        return SizeLimits()

    @classmethod
    def model_size(cls, info: CheckpointInfo, call: Call) -> ModelSize | None:
        """The transformer's numbers for :func:`run_size_estimate` (None: no estimate)."""
        return None

    @classmethod
    def text_token_limit(cls, info: CheckpointInfo) -> tuple[int, str] | None:
        """``(largest max_sequence_length, why)`` the checkpoint's tokenizer / text encoders take
        (their position tables, the tokenizer's ``model_max_length``, the reference's bound), or
        None for no limit; :meth:`check_call` refuses more."""
        return None

    @classmethod
    def check_schedule(cls, info: CheckpointInfo, scheduler: Any, call: Call) -> None:
        """Check, from the configs, that ``scheduler`` (built from the checkpoint's config) can
        make the call's schedule, e.g. by computing it on the host as :meth:`set_timesteps` will.
        The default: the scheduler must not need ``mu`` (``use_dynamic_shifting``), which only
        families that compute it from the token count (LTX-Video) pass.

        Raises:
            ConfigError, InputError: the schedule cannot be made (the message says why).
        """
        if getattr(getattr(scheduler, "config", None), "use_dynamic_shifting", False):
            raise ConfigError(f"{info.checkpoint.config_file('scheduler')}: use_dynamic_shifting=true needs mu (a shift "
                              f"from the token count), which {cls.__name__} does not compute (nor does its diffusers "
                              "reference); set use_dynamic_shifting to false")

    # ================================================================== family hooks (loading)
    @classmethod
    def load_components(cls, info: CheckpointInfo, *, dtype: Any, mesh: Any, offload: Any,
                        staging: Staging, **options: Any) -> dict[str, Any]:
        """Load the modules the family runs (name -> module); see :meth:`load_component`."""
        raise NotImplementedError

    # ================================================================== family hooks (call)
    def check_components(self) -> None:
        """Checks of the loaded components before a call (raise InputError); the scheduler is the
        one component a user may replace (``pipe.scheduler = ...``), as in diffusers."""

    def encode_text(self, texts: list[str], max_sequence_length: int, truncation: Truncation | None = None) -> Any:
        """Text embeddings (len(texts), L, D) as the reference's prompt encoding (the text
        encoder is on the device meanwhile; ``truncation`` goes to the tokenizer, which names
        the texts it cuts with it), or a tuple / dict of arrays with the batch first
        (e.g. embeddings and their mask (B, L), a pooled embedding (B, D)): every array is repeated
        ``num_videos_per_prompt`` times along the batch, floating ones cast to :attr:`dtype`."""
        raise NotImplementedError

    def condition(self, call: Call, stats: RunStats) -> dict:
        """Per-call conditioning handed to every step (image latents, ...)."""
        return {}

    def prepare_latents(self, call: Call, noise: Any, cond: dict) -> Any:
        """Channels-last latents (B, T, H, W, C) to denoise from the initial noise (diffusers
        layout); with several streams (a dict, see :attr:`latent_streams`) the video's is made
        channels-last and the others are kept as they are."""
        if isinstance(noise, dict):
            return {k: self.prepare_latents(call, v, cond) if k == self.latent_streams[0] else v
                    for k, v in noise.items()}
        return jnp.transpose(noise, (0, 2, 3, 4, 1))

    def set_timesteps(self, call: Call, latents: Any) -> Any:
        """The scheduler state of the call; with several streams one state per stream (a dict
        keyed like the latents: each stream is updated by its own copy of the scheduler, as
        diffusers' LTX2Pipeline steps its audio with a copy of the video's)."""
        if isinstance(latents, dict):
            return {k: self.set_timesteps(call, v) for k, v in latents.items()}
        return self.scheduler.set_timesteps(call.num_inference_steps, sample_shape=latents.shape)

    def step_args(self, call: Call, embeds: jax.Array, cond: dict, state: Any,
                  expert: int) -> tuple[StepInputs, Mapping | None]:
        """``(inputs, axes)``: the :class:`~vidax.pipelines.step_inputs.StepInputs` of every step
        of ``expert`` and the logical axes of those of its fields that are not batch-split on their
        leading axis (field name -> axes, see :func:`vidax.parallel.step.shard_step`), or None."""
        gs = call.guidance_scale if expert == 0 else call.guidance_scale_2
        return StepInputs(embeds, jnp.asarray(gs, jnp.float32), cond), None

    def model_args(self, latents: jax.Array, state: Any, inputs: StepInputs, do_cfg: bool) -> tuple:
        """The transformer's arguments at one step (traced), CFG pairs batched."""
        raise NotImplementedError

    def guidance(self, state: Any, inputs: StepInputs) -> jax.Array:
        """The CFG weight of this step (traced)."""
        return inputs.guidance

    def guide(self, pred: jax.Array, state: Any, inputs: StepInputs) -> jax.Array:
        """The guided prediction from the CFG batch (2B, ...) (traced): diffusers' formula with
        the weight :meth:`guidance` gives; families with another rule (guidance rescale, a
        different formula) override it."""
        weight = self.guidance(self.step_state(state), inputs)
        return jax.tree.map(lambda p: classifier_free_guidance(p, weight), pred)

    def scheduler_update(self, state: Any, pred: Any, latents: Any, inputs: StepInputs) -> tuple:
        """``(latents, state)`` after one step (traced); with several streams each stream is
        stepped with its own state (see :meth:`set_timesteps`)."""
        if isinstance(latents, dict):
            new = {k: self.scheduler.step(state[k], pred[k], v) for k, v in latents.items()}
            return {k: v[0] for k, v in new.items()}, {k: v[1] for k, v in new.items()}
        return self.scheduler.step(state, pred, latents)

    def step_state(self, state: Any) -> Any:
        """The scheduler state that counts the steps (its timestep, its step index): ``state``
        itself, or the first stream's where there is one per latent stream (a dict,
        :meth:`set_timesteps`)."""
        return state[self.latent_streams[0]] if isinstance(state, dict) else state

    def expert_plan(self, state: Any) -> list[int]:
        """Which expert runs each step (all 0 with one transformer)."""
        return [0] * int(self.step_state(state).num_inference_steps)

    def final_latents(self, call: Call, latents: jax.Array, cond: dict) -> jax.Array:
        """Latents after the last step -> what is decoded / returned."""
        return latents

    def latents_output(self, latents: jax.Array) -> np.ndarray:
        """Channels-last latents -> ``output_type="latent"`` in the family's diffusers layout."""
        return np.asarray(jnp.transpose(latents, (0, 4, 1, 2, 3)))

    def latents_to_decode(self, call: Call, latents: jax.Array) -> jax.Array:
        """The latents the VAE decodes (e.g. without padding frames)."""
        return latents

    def decode_input(self, call: Call, z: jax.Array) -> jax.Array:
        """The de-normalised latents as the VAE decodes them (e.g. with decode noise mixed in)."""
        return z

    def decode_kwargs(self, call: Call) -> dict:
        """Conditioning the VAE decode takes (e.g. a decode timestep)."""
        return {}

    # ================================================================== configs only
    @classmethod
    def for_task(cls, checkpoint: Checkpoint, task: str, info: CheckpointInfo | None = None) -> type:
        """The class that runs ``task`` on ``checkpoint`` (:meth:`class_for_task`; ``info``: its
        :meth:`read_checkpoint`, read here when None).

        Raises:
            InputError: the checkpoint does not do ``task`` (the message says what it does).
        """
        info = info or cls.read_checkpoint(checkpoint)
        check_task(checkpoint.root, task, info.tasks, info.variant)
        return cls.class_for_task(task)

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """The family's class for ``task`` (``"t2v"``, ``"i2v"``, ...), a task the checkpoint does:
        this one by default; a family with a class per task maps them."""
        return cls

    @classmethod
    def call_args(cls) -> tuple[str, ...]:
        """Every keyword the call takes: the shared ones it supports, the other latent streams' (``audio_latents``), then the family's."""
        return tuple(o.name for o in cls.options())

    @classmethod
    def options(cls) -> tuple[CallOption, ...]:
        """The declarations of :meth:`call_args`, in that order."""
        streams = tuple(CallOption(s, OBJECT, f"Initial noise of the {s} stream, float32, in the family's "
                                   "diffusers layout.") for s in cls.latent_streams[1:])
        return (tuple(o for o in SHARED_OPTIONS if o.name not in cls.unsupported_call_args) + streams
                + cls.call_options + cls.embeds_options())

    @classmethod
    def embeds_options(cls) -> tuple[CallOption, ...]:
        """The declarations of :attr:`prompt_embeds_args` and their ``negative_`` twins."""
        return tuple(CallOption(prefix + n, OBJECT, f"diffusers' {prefix + n}: the {what} prompt's precomputed "
                                "encoding (encode_prompt_embeds makes it), instead of the text.")
                     for prefix, what in (("", "positive"), ("negative_", "negative")) for n in cls.prompt_embeds_args)

    @classmethod
    def diffusers_classes(cls) -> tuple[str, ...]:
        """The diffusers pipeline classes (model_index.json's ``_class_name``) registered to run as this class."""
        return tuple(p.class_name for p in registry().pipelines()
                     if p.target == f"{cls.__module__}:{cls.__name__}") or (cls.__name__,)

    @classmethod
    def refused_keyword(cls, keyword: str) -> Any:
        """The :class:`~vidax.pipelines.diffusers_keywords.Refused` entry of a diffusers keyword
        this pipeline refuses (None: not a refused one)."""
        from vidax.pipelines.diffusers_keywords import refused

        return next((e for c in cls.diffusers_classes() if (e := refused(c, keyword)) is not None), None)

    @classmethod
    def capabilities_of(cls, info: CheckpointInfo) -> Capabilities:
        args = cls.call_args()
        return Capabilities(tasks=info.tasks, image="i2v" in info.tasks and "image" in args,
                            video="video" in args, guidance_scale_2=len(info.transformers) > 1,
                            audio=cls.makes_audio(info), offload=True, call_args=args)

    @property
    def capabilities(self) -> Capabilities:
        return self.capabilities_of(self.info)

    def video_fps(self, call: Call) -> Any:
        """Frames per second the call's video is meant to play at (``vidax generate``'s mp4 without
        ``--fps``): the checkpoint's, as its reference's examples export it."""
        return self.defaults.fps

    @classmethod
    def read_scheduler(cls, info: CheckpointInfo) -> Any:
        """The checkpoint's scheduler built from its config (every setting checked), or None
        when the checkpoint has no ``scheduler`` component.

        Raises:
            ConfigError: a scheduler class vidax does not implement or the family does not run
                (:attr:`scheduler_classes`), or a setting it does not implement (e.g. a
                ``prediction_type``).
        """
        ckpt = info.checkpoint
        if not ckpt.has("scheduler"):
            return None
        config, file = ckpt.config("scheduler"), ckpt.config_file("scheduler")
        name = config.get("_class_name")
        if cls.scheduler_classes is not None and name in {s.class_name for s in registry().components("scheduler")} \
                and name not in cls.scheduler_classes:
            raise ConfigError(f"{file}: _class_name={name!r}; {cls.__name__} runs "
                              f"{' or '.join(cls.scheduler_classes)}")
        return scheduler_from_config(config, source=file)

    @classmethod
    def check_checkpoint(cls, info: CheckpointInfo, mesh: Any = None) -> None:
        """The checks of a checkpoint that need no call and no weights: its scheduler
        (:meth:`read_scheduler`) and, on ``mesh``, that each transformer's attention heads split
        over ``tensor x sequence``. :meth:`from_pretrained` runs it first; ``vidax generate``
        runs it with the mesh of ``--dp/--tp/--sp`` before loading.

        Raises:
            ConfigError: see :meth:`read_scheduler`. InputError: heads that do not split (the
                message lists the valid ``(tp, sp)``).
        """
        from vidax.parallel.mesh import check_heads

        cls.read_scheduler(info)
        for what, heads in cls.attention_heads(info):
            check_heads(mesh, heads, what)

    @classmethod
    def attention_heads(cls, info: CheckpointInfo) -> list[tuple[str, int]]:
        """``(config file, heads)`` of each attention head count the transformers' configs declare
        (``num_attention_heads``; LTX-2's ``audio_num_attention_heads`` too): what ``tensor x
        sequence`` must divide. From the configs only: the mesh errors list the valid sizes for them."""
        ckpt = info.checkpoint
        out = []
        for name in info.transformers:
            spec = registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
            config = ckpt.typed_config(name, spec.config_class())
            out += [(ckpt.config_file(name) + ("" if field == HEAD_FIELDS[0] else f" ({field})"), getattr(config, field))
                    for field in HEAD_FIELDS if getattr(config, field, None) is not None]
        return out

    @classmethod
    def check_call(cls, info: CheckpointInfo, prompt: Any = None, negative_prompt: Any = None, *,
                   image: Any = None, height: Any = None, width: Any = None, num_frames: Any = None,
                   num_inference_steps: Any = None, guidance_scale: Any = None, guidance_scale_2: Any = None,
                   num_videos_per_prompt: Any = 1, seed: Any = None, latents: Any = None,
                   max_sequence_length: Any = None, output_type: str = "np", progress: bool = True,
                   callback: Any = None, cancel: Any = None, decode_audio: Any = True, return_dict: Any = True,
                   attention_kwargs: Any = None, callback_on_step_end: Any = None,
                   callback_on_step_end_tensor_inputs: Any = None, **extra: Any) -> Call:
        """Check a call's arguments against the checkpoint's configs and fill in the defaults.

        Needs no weights: ``vidax generate`` runs it before loading.

        Raises:
            InputError: an unknown keyword, or an argument that is not valid (the message names
                it, its value and what is valid).
        """
        given = {k for k, v in dict(
            negative_prompt=negative_prompt, image=image, height=height, width=width, num_frames=num_frames,
            num_inference_steps=num_inference_steps, guidance_scale=guidance_scale, guidance_scale_2=guidance_scale_2,
            seed=seed, latents=latents, max_sequence_length=max_sequence_length, **extra).items() if v is not None}
        streams = {k: extra.pop(k) for k in cls.latent_streams[1:] if k in extra}
        if "generator" in extra and extra["generator"] is None:  # diffusers' "draw at random": no seed=
            del extra["generator"]
        own = options_by_name(cls.call_options + cls.embeds_options())
        unknown = sorted(set(extra) - set(own)) + sorted(given & set(cls.unsupported_call_args))
        for u in unknown:
            entry = cls.refused_keyword(u)
            if entry is not None:
                raise InputError(f"{cls.__name__} takes no ", Arg(u, python=repr(u)), f" (diffusers' {u}=): "
                                 f"{entry.message()}")
        if unknown:
            raise InputError(f"{cls.__name__} takes no ", *joined(Arg(u, python=repr(u)) for u in unknown),
                             "; it takes ", *joined(Arg(a) for a in cls.call_args()))
        extra = check_options(own, extra)
        d = info.defaults
        parts = _given_prompt_parts(cls, extra, negative=False)
        negative_parts = _given_prompt_parts(cls, extra, negative=True)
        prompts = _prompts("prompt", prompt) if parts is None else _embeds_prompts("prompt", prompt, parts)
        if negative_parts is not None:
            _embeds_prompts("negative_prompt", negative_prompt, negative_parts, len(prompts))
            negative_prompt = None
        negatives = _prompts("negative_prompt", negative_prompt, len(prompts))
        height = d.height if height is None else height
        width = d.width if width is None else width
        height = _SHARED["height"].check(d.height if height is None else height)
        width = _SHARED["width"].check(d.width if width is None else width)
        limits = cls.size_limits(info)
        for name, v, top in (("height", height, limits.height), ("width", width, limits.width)):
            if top is not None and v > top:  # before the multiples: no "nearest valid" past what the model takes
                raise InputError(Arg(name, v), " is more than this checkpoint's model can represent: the largest "
                                 "valid ", Arg(name), f" is {top} ({limits.reason})")
        mh, mw = info.size_multiple
        if height % mh or width % mw:
            near = joined(Message(Arg(name), f" in {sorted({max(m, v // m * m), (v // m + 1) * m})}")
                          for name, v, m in (("height", height, mh), ("width", width, mw)) if v % m)
            raise InputError(
                Arg("height"), " and ", Arg("width"), f" must be multiples of {mh}" + ("" if mh == mw else f" and {mw}")
                + f" ({info.size_reason}), got ", Arg("height", height), ", ", Arg("width", width), "; nearest valid: ",
                *near)
        given_frames = _SHARED["num_frames"].check(d.num_frames if num_frames is None else num_frames)
        num_frames = cls.resolve_num_frames(info, given_frames)
        if limits.num_frames is not None and num_frames > limits.num_frames:
            raise InputError(Arg("num_frames", given_frames), " is more than this checkpoint's model can represent: the "
                             "largest valid ", Arg("num_frames"), f" is {limits.num_frames} ({limits.reason})")
        steps = _SHARED["num_inference_steps"].check(d.num_inference_steps if num_inference_steps is None
                                                     else num_inference_steps)
        guidance_scale = _SHARED["guidance_scale"].check(d.guidance_scale if guidance_scale is None else guidance_scale)
        if guidance_scale_2 is not None and len(info.transformers) < 2:
            raise InputError(Arg("guidance_scale_2", guidance_scale_2), " is only used by checkpoints with two "
                             f"experts; {info.checkpoint.root} ({info.variant}) has one transformer")
        guidance_scale_2 = guidance_scale if guidance_scale_2 is None else _SHARED["guidance_scale_2"].check(
            guidance_scale_2)
        max_sequence_length = _SHARED["max_sequence_length"].check(d.max_sequence_length
                                                                   if max_sequence_length is None else max_sequence_length)
        limit = cls.text_token_limit(info)
        if limit is not None and max_sequence_length > limit[0]:
            raise InputError(Arg("max_sequence_length", max_sequence_length), " is more than this checkpoint's text "
                             "encoding takes: the largest valid ", Arg("max_sequence_length"),
                             f" is {limit[0]} ({limit[1]})")
        num_videos_per_prompt = _SHARED["num_videos_per_prompt"].check(num_videos_per_prompt)
        if output_type == "pt":
            from vidax.pipelines.diffusers_keywords import refused_value_reason

            raise InputError(Arg("output_type", output_type), f" is not taken: {refused_value_reason('output_type')}")
        _SHARED["output_type"].check(output_type)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise InputError(Arg("seed"), " must be an integer or ", ArgValue("seed", None), ", got ",
                             ArgValue("seed", seed))  # None as each front end spells it (serve: null)
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise InputError(Arg("seed", seed), f" is out of range: seeds are integers in [0, {MAX_SEED}] (jax.random "
                             "keys take 32 bits; a larger or negative seed would repeat one of these)")
        _SHARED["decode_audio"].check(decode_audio)
        if callback is not None and not callable(callback):
            raise InputError(Arg("callback"), f" must be callable or None, got {type(callback).__name__}")
        _SHARED["return_dict"].check(return_dict)
        step_end = _step_end(callback_on_step_end, callback_on_step_end_tensor_inputs)
        lora_scale = _lora_scale(attention_kwargs)
        cancel = cancel_check(cancel)
        task = "i2v" if image is not None else ("v2v" if extra.get("video") is not None else "t2v")
        if cls.task == "i2v" and image is None:
            raise InputError(f"{info.checkpoint.root} is an image-to-video checkpoint: ", Arg("image"), " is required "
                             "(the first frame: a PIL image or a uint8 (H, W, 3) array)")
        check_task(info.checkpoint.root, task, info.tasks, info.variant)
        if image is not None:
            from vidax.io.image import to_rgb_image

            for im in image if isinstance(image, (list, tuple)) else [image]:
                to_rgb_image(im)
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % 2**31)
        call = Call(prompts, negatives, image, int(height), int(width), num_frames, steps, guidance_scale,
                    guidance_scale_2, num_videos_per_prompt, int(seed), None, max_sequence_length, output_type,
                    bool(progress), callback, dict(extra), cancel=cancel, given=frozenset(given),
                    decode_audio=decode_audio is None or bool(decode_audio),  # None: the default
                    step_end=step_end, lora_scale=lora_scale, return_dict=return_dict is None or bool(return_dict),
                    prompt_parts=parts, negative_parts=negative_parts)
        given_streams = {cls.latent_streams[0]: latents, **streams}
        if any(v is not None for v in given_streams.values()):
            shapes = cls.latent_shapes(info, call)
            checked = {}
            for name, value in given_streams.items():
                if value is None:
                    continue
                value = finite_array(name, value)
                if value.shape != shapes[name]:
                    layout = (cls.latents_layout if name == cls.latent_streams[0] else cls.audio_latents_layout
                              if name == cls.audio_stream else "this stream's layout")
                    raise InputError(f"{name} have shape {tuple(value.shape)}, expected {shapes[name]} = "
                                     f"{layout} for these arguments")
                checked[name] = value
            first = checked.pop(cls.latent_streams[0], None)
            call = dataclasses.replace(call, latents=first, stream_latents=checked)
        scheduler = cls.read_scheduler(info)
        train = getattr(getattr(scheduler, "config", None), "num_train_timesteps", None)
        if train is not None and call.num_inference_steps > train:  # before any schedule is computed
            raise InputError(Arg("num_inference_steps", call.num_inference_steps), f" is more than the {train} "
                             "timesteps this checkpoint's scheduler was trained with (num_train_timesteps in "
                             f"{info.checkpoint.config_file('scheduler')}); give at most {train}")
        cls.check_family_call(info, call)
        if scheduler is not None:
            cls.check_schedule(info, scheduler, call)
        return call

    @classmethod
    def warn_if_large(cls, info: CheckpointInfo, call: Call) -> None:
        """Log a WARNING with :func:`run_size_estimate` when the call's transformer sequence has
        more than :data:`LARGE_RUN_FACTOR` times the tokens of the checkpoint's default size."""
        size = cls.model_size(info, call)
        d = info.defaults
        base = cls.model_size(info, dataclasses.replace(call, height=d.height, width=d.width,
                                                        num_frames=cls.resolve_num_frames(info, d.num_frames)))
        if size is None or base is None or size.tokens <= LARGE_RUN_FACTOR * base.tokens:
            return
        batch = call.batch * (2 if call.do_cfg else 1)
        logger.warning(
            "%s is far beyond this checkpoint's default %dx%d, %d frames (%.0fx its tokens): %s", size_words(call),
            d.height, d.width, d.num_frames, size.tokens / base.tokens,
            run_size_estimate(size, batch, int(np.prod(cls.latent_shape(info, call))), call.num_frames,
                              call.height, call.width, videos=call.batch))

    @classmethod
    def memory_estimate(cls, info: CheckpointInfo, call: Call, *, dtype: Any = "float32",
                        weights: str = "loaded") -> MemoryEstimate | None:
        """Peak memory of ``call`` (:func:`run_memory_estimate`; None where the family gives no
        :meth:`model_size`), from configs and safetensors headers only.

        Args:
            weights: which parameters to count: ``"loaded"`` none (already in memory), ``"all"``
                every component's, ``"transformers"`` the denoising transformers' only.
        """
        size = cls.model_size(info, call)
        if size is None:
            return None
        dtype = parse_dtype(dtype)
        names = {"loaded": (), "transformers": tuple(info.transformers), "all": None}[weights]
        batch = call.batch * (2 if call.do_cfg else 1)
        est = run_memory_estimate(size, batch, int(np.prod(cls.latent_shape(info, call))), call.num_frames,
                                  call.height, call.width, videos=call.batch, dtype_bytes=np.dtype(dtype).itemsize,
                                  weights=checkpoint_weight_bytes(info.checkpoint, dtype, names) if names != () else 0,
                                  decoded=call.output_type != "latent")
        # max_sequence_length has no bound but memory (rotary and relative positions, as the references)
        return dataclasses.replace(est, text=text_encoding_bytes(info, batch, call.max_sequence_length))

    @classmethod
    def check_memory(cls, info: CheckpointInfo, call: Call, *, dtype: Any = "float32", loaded: bool = True,
                     refuse: bool = True, devices: int = 1, offload: Any = None,
                     available: tuple[int, str] | None = None, vae_tiling: bool = False) -> MemoryEstimate | None:
        """Refuse ``call`` when its :meth:`memory_estimate` exceeds the memory there is
        (:func:`available_memory`, or ``available``: (bytes, what they are)), naming the
        estimate and the largest height x width that fits; with ``refuse=False`` log that as a
        WARNING and go on. A call that fits but is far beyond the checkpoint's default size gets
        :meth:`warn_if_large`'s WARNING.

        Where the VAE can decode in tiles and the untiled decode does not fit, the tiled decode
        is counted: the estimate returned then has ``vae_tiling`` set (the caller turns tiling
        on) and a WARNING line says so.

        Args:
            loaded: the weights are in memory already (else they are counted: all of them in host
                RAM; on a device with its own memory the transformers', none with ``offload``).
            devices: devices of the mesh; a device with its own memory holds 1/devices of it.
            vae_tiling: tiling is on already (the tiled decode is counted from the start).

        Raises:
            OutOfMemoryError: the estimate is more than the memory there is (and ``refuse``).
        """
        free, what = available or available_memory()
        host = what != "free device memory"
        weights = "loaded" if loaded else "all" if host else "loaded" if offload is not None else "transformers"
        share = 1 if host else max(1, devices)

        def need(c: Call) -> MemoryEstimate | None:
            est = cls.memory_estimate(info, c, dtype=dtype, weights=weights)
            if est is None or (est.total / share <= free and not vae_tiling):
                return est
            return est.with_tiling() or est

        est = need(call)
        if est is None or est.total / share <= free:
            if est is not None and est.vae_tiling and not vae_tiling:
                logger.warning("%s: an untiled VAE decode would not fit in the %s of %s; decoding in tiles "
                            "(peak %s)", size_words(call), _gib(free), what, est.describe())
            cls.warn_if_large(info, call)
            return est
        mh, mw = info.size_multiple
        fits = None
        text_bound = est.text > max(est.step, est.decode)  # the prompts' tokens, not the video's size
        for h in range(call.height - mh, 0, -mh) if not text_bound else ():
            w = max(mw, round(call.width * h / call.height / mw) * mw)
            if need(dataclasses.replace(call, height=h, width=w)).total / share <= free:
                fits = Message(Arg("height", h), ", ", Arg("width", w), " fits at ", Arg("num_frames", call.num_frames))
                break
        per = "" if share == 1 else f" ({_gib(est.total / share)} per device of {share})"
        if text_bound:
            msg = Message(Arg("max_sequence_length", call.max_sequence_length), f" (batch {call.batch}"
                          f"{', CFG doubles it' if call.do_cfg else ''}) needs {est.describe()}{per}, more than the "
                          f"{_gib(free)} of {what}; give a smaller ", Arg("max_sequence_length"))
        else:
            msg = Message(size_words(call), f" (batch {call.batch}{', CFG doubles it' if call.do_cfg else ''}) needs "
                          f"{est.describe()}{per}, more than the {_gib(free)} of {what}: ",
                          fits or "no size fits at these frames", "; or try fewer ", Arg("num_frames"),
                          ", bfloat16, offloading")
        if refuse:
            raise OutOfMemoryError(msg, " (to run it anyway: ",
                                   Arg("memory_check", python="pipe.memory_check = False"), ")")
        logger.warning("%s; running it anyway", msg)
        return est

    # ================================================================== loading
    @staticmethod
    def load_component(info: CheckpointInfo, name: str, *, dtype: Any = None, mesh: Any = None,
                       offload: Any = None, staging: Staging | None = None) -> Any:
        """Component ``name`` of the checkpoint, by the class model_index.json gives it: a
        scheduler built from its config, any other loaded alone by :meth:`load_weighted`."""
        ckpt = info.checkpoint
        spec = registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
        if spec.kind == "scheduler":
            return scheduler_from_config(ckpt.config(name), source=ckpt.config_file(name))
        options = dict(dtype=dtype, mesh=mesh, offload=offload, staging=staging)
        return VideoPipeline.load_weighted(info, {name: options})[name]

    @staticmethod
    def load_weighted(info: CheckpointInfo, components: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The components with weights named in ``components``, by the classes model_index.json
        gives them, through the one component loader (:func:`vidax.weights.component.load_components`):
        every checkpoint is checked against its model from its config and safetensors headers
        (heads against the mesh, file sizes, the 1:1 key plan, shapes, dtypes) before the first
        weight of any is read; then each is read, in the order given.

        Args:
            info: the checkpoint's configs.
            components: name -> options: ``dtype``, ``mesh``, ``offload`` (blocks streamed),
                ``staging`` (a :class:`Staging`: in host memory when it stages the component),
                ``then`` (called with the module once it is read); None values are left out.

        Returns:
            name -> module.

        Raises:
            ConfigError: a class vidax does not implement. CheckpointError: missing files or
            tensors. InputError: a dtype not supported, heads that do not split over the mesh.
        """
        ckpt = info.checkpoint
        requests = {}
        for name, options in components.items():
            options = {k: v for k, v in options.items() if v is not None}
            spec = registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
            staging, then = options.pop("staging", None), options.pop("then", None)
            if staging is not None and staging.is_staged(name):
                options["memory_kind"] = staging.kind
            if spec.kind == "transformer" and ckpt.weights is not None:
                options["weights"] = ckpt.weights
            if name in ckpt.files:
                options["file"] = ckpt.files[name]
            options["config"] = ckpt.typed_config(name, spec.config_class())
            requests[name] = Request(spec, ckpt.folder(name), options, then)
        return load_components(requests)

    @classmethod
    def from_pretrained(cls, path: Any, dtype: Any = "float32", *, mesh: Any = None, offload: Any = None,
                        stats: RunStats | None = None, offload_experts: bool = True, progress: bool = True,
                        weight_dtype: Any = None, transformer: Any = None, matmul_precision: str = "highest",
                        **options: Any):
        """Load every component of a diffusers-layout folder.

        Args:
            path: the folder (or hub id, or an opened :class:`Checkpoint`).
            dtype: transformer and text-encoder dtype, ``"float32"`` or ``"bfloat16"``.
            mesh: ``(data, tensor, sequence)`` mesh (anything
                :func:`~vidax.parallel.mesh.resolve_mesh` takes) or None (one device).
            offload: weights in host memory (:func:`vidax.parallel.offload.resolve_offload`):
                transformer blocks streamed each step, text encoder / VAE staged
                (``docs/offloading.md``).
            stats: receives the load time.
            offload_experts: with two experts, keep the one not in use in host memory.
            progress: show a status line on stderr while the weights load.
            weight_dtype: None, ``"int8"`` or ``"float8_e4m3fn"`` (``"fp8"``): the transformers'
                Linear kernels (not those kept float32) stored 8-bit with per-output-channel
                scales, quantized as they are read (:mod:`vidax.nn.quant`).
            transformer: a single-file transformer checkpoint (``.gguf``, fp8-scaled or plain
                ``.safetensors`` in the original repository's layout) read instead of the
                folder's ``transformer/`` weights (:mod:`vidax.weights.single_file`).
            matmul_precision: ``"highest"`` (default: float32 products in float32 on every
                backend, as torch), ``"high"`` or ``"default"`` (the backend's fastest: one
                bfloat16 pass on TPU, TF32 on GPU); see :mod:`vidax.nn.precision`.
            **options: the family's loading options (e.g. ``vae_dtype``).

        Raises:
            CheckpointError, ConfigError, InputError (see :func:`vidax.load_pipeline`).
            SetupError: ``JAX_PLATFORMS`` names a backend JAX cannot start here; ``VIDAX_CPU_MATMUL``
                is not ``auto``, ``onednn`` or ``xla``.
        """
        t0 = time.perf_counter()
        cls.check_load_options(options)
        parse_matmul_precision(matmul_precision)
        plan = read_plan(Checkpoint.open(path), pipeline=cls, weight_dtype=weight_dtype, transformer=transformer)
        plan = with_placement(plan, dtype=dtype, mesh=mesh, offload=offload, matmul_precision=matmul_precision,
                              offload_experts=offload_experts, **options)
        return cls.from_plan(plan, stats=stats, progress=progress, t0=t0)

    @classmethod
    def from_plan(cls, plan: Plan, *, stats: RunStats | None = None, progress: bool = True,
                  t0: float | None = None):
        """Load the weights ``plan`` names (:mod:`vidax.pipelines.plan`, placed with
        :func:`~vidax.pipelines.plan.with_placement`) into the pipeline it plans: ``cls`` or a
        subclass of it (``plan.pipeline``); ``stats`` receives the load time (from ``t0``, default
        now), ``progress`` shows a status line on stderr meanwhile. A plan whose memory was checked
        (:func:`~vidax.pipelines.plan.with_memory`) gives a pipeline that does not check it again,
        its VAE tiled where the plan says so."""
        t0 = time.perf_counter() if t0 is None else t0
        pipeline, info, staging = plan.pipeline, plan.info, plan.staging
        if not issubclass(pipeline, cls):
            raise TypeError(f"{cls.__name__}.from_plan: the plan is for {pipeline.__name__}")
        with status(f"loading {plan.checkpoint.root}", progress):
            modules = pipeline.load_components(info, dtype=plan.dtype, mesh=plan.mesh, offload=plan.offload,
                                               staging=staging, offload_experts=plan.offload_experts, **plan.options)
        staging.attach(**{n: modules.get(n) for n in pipeline.stageable})
        load_s = time.perf_counter() - t0
        if stats is not None:
            stats.load_s += load_s
        pipe = pipeline(info, modules, dtype=plan.dtype, mesh=plan.mesh, staging=staging, offload=plan.offload,
                        offload_experts=plan.offload_experts, load_s=load_s, matmul_precision=plan.matmul_precision)
        if plan.memory_checked:
            pipe.memory_check = None  # checked (or warned about) with the plan, the weights counted
        if plan.vae_tiling:
            pipe.vae.enable_tiled_decode()
        return pipe

    @classmethod
    def load_options(cls) -> tuple[str, ...]:
        """The family's loading options :meth:`from_pretrained` passes on (the keywords of its
        :meth:`load_components` beyond the shared ones, e.g. ``vae_dtype``)."""
        shared = {"cls", "info", "dtype", "mesh", "offload", "staging", "offload_experts"}
        params = inspect.signature(cls.load_components).parameters.values()
        return tuple(p.name for p in params if p.kind == p.KEYWORD_ONLY and p.name not in shared)

    @classmethod
    def check_load_options(cls, options: Mapping[str, Any]) -> None:
        """Raise InputError for a loading keyword this pipeline does not take (diffusers'
        ``torch_dtype`` is named as vidax's ``dtype``)."""
        params = inspect.signature(cls.load_components).parameters.values()
        unknown = sorted(set(options) - set(cls.load_options()))
        if not unknown or any(p.kind == p.VAR_KEYWORD for p in params):  # a family taking any option checks its own
            return
        hint = "; vidax's dtype= is diffusers' torch_dtype= (float32 or bfloat16)" if "torch_dtype" in unknown else ""
        takes = ", ".join(f"{n}=" for n in ("dtype", "mesh", "offload", "stats", "offload_experts", "progress",
                                             "matmul_precision",
                                             *cls.load_options()))
        raise InputError(f"{cls.__name__} takes no {', '.join(f'{u}=' for u in unknown)} when loading{hint}; "
                         f"it takes {takes}")

    @classmethod
    def plan_staging(cls, info: CheckpointInfo, dtype: Any, vae_dtype: Any, offload: Any, mesh: Any,
                     text_encoder_dtype: Any = None) -> Staging:
        """Which stageable components wait in host memory (:func:`plan_pipeline_staging`), each
        counted at the dtype it is loaded in."""
        ckpt = info.checkpoint
        spec = registry().component(ckpt.class_of(info.transformers[0]), "transformer", source=ckpt.source)
        paths = {"transformer": transformer_source(ckpt, info.transformers[0], spec)}
        paths.update({n: ckpt.folder(n) for n in cls.stageable if ckpt.has(n)})
        return plan_pipeline_staging(paths, dtype, parse_dtype(vae_dtype), offload, mesh,
                                     blocks_prefixes=spec.block_stacks, weights=ckpt.weights,
                                     text_encoder_dtype=parse_dtype(text_encoder_dtype or dtype),
                                     stageable=tuple(cls.stageable))

    # ================================================================== the call
    def __call__(self, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any) -> VideoPipelineOutput:
        """Generate videos (the keywords of the family's diffusers pipeline; see ``call_args()``).

        Shared keywords: ``image`` (PIL image or uint8 (H, W, 3), image-to-video checkpoints),
        ``height``, ``width`` (pixels), ``num_frames``, ``num_inference_steps``,
        ``guidance_scale`` (> 1 enables CFG, cond and uncond as one batch), ``guidance_scale_2``
        (two-expert checkpoints), ``num_videos_per_prompt``, ``seed`` (an integer in [0,
        :data:`MAX_SEED`] for ``jax.random``; replaces torch's generator; None, the default, draws
        one at random, as diffusers without a generator: the seed used is ``out.stats.seed`` and in
        ``out.stats.summary()``, so a run can be repeated), ``latents`` (initial noise, float32,
        diffusers layout), ``max_sequence_length`` (text tokens, at most
        :meth:`text_token_limit`), ``output_type`` (``"np"`` or ``"latent"``), ``progress``
        (progress bars and status lines on stderr), ``callback(step_index, num_inference_steps)``,
        ``cancel`` (a ``threading.Event``, or a zero-argument callable returning True to stop;
        asked after the prompt encoding, before every denoising step and before every VAE decode
        chunk: a server cancels a running call from another thread), ``decode_audio`` (False:
        skip the sound's decode, ``out.audio`` None; accepted by models without sound). Models of
        several latent streams also take each further stream's initial noise by its keyword
        (:attr:`latent_streams`, e.g. ``audio_latents``). Defaults: :attr:`defaults`.

        Returns:
            :class:`VideoPipelineOutput`: ``frames`` float32 (B, F, H, W, 3) in [0, 1], or the
            final latents with ``output_type="latent"``; for a model that makes sound ``audio``
            float32 (B, channels, samples) in [-1, 1] (or its final latents) and
            ``audio_sample_rate``.

        Raises:
            InputError: an invalid argument (checked before any work).
            NumericalError: the latents or the video went NaN/Inf (the message names the denoising
                step or the VAE decode chunk), or the final latents are too large to decode
                (:func:`check_decodable`; the error's ``latents`` holds them).
            Cancelled: ``cancel`` was set (its ``done`` says how far the call got).
        """
        call = self.check_call(self.info, prompt, negative_prompt, **kwargs)
        out = self.generate(call)
        if call.return_dict:
            return out
        return (out.frames, out.audio) if self.makes_audio(self.info) else (out.frames,)

    #: Refuse a call whose :meth:`memory_estimate` exceeds the memory there is (False: warn and run
    #: it; None: no check, e.g. where the caller already checked before loading).
    memory_check: bool | None = True

    def warn_if_data_axis_idle(self, call: Call) -> None:
        """Warn when the mesh's data axis cannot split the denoising batch (the videos, times two
        with CFG): the batch is then replicated over it, and its devices add no speed."""
        dp = 1 if self.mesh is None else dict(self.mesh.shape).get("data", 1)
        batch = call.batch * (2 if call.do_cfg else 1)
        if dp > 1 and batch % dp:
            logger.warning("the denoising batch of %d (%d video(s)%s) does not split over the mesh's %d data-parallel "
                           "devices: it is replicated there, which adds no speed; a data-parallel size dividing %d "
                           "(--dp, mesh=) would split it", batch, call.batch, ", CFG doubles it" if call.do_cfg else "",
                           dp, batch)

    def generate(self, call: Call) -> VideoPipelineOutput:
        """Run a checked :class:`Call` (refused first when it cannot fit: :meth:`check_memory`).

        Raises:
            OutOfMemoryError: the call's memory estimate is more than there is (before any work),
                or an allocation failed during the run (the message names the phase and the estimate).
            NumericalError: the run went NaN/Inf (see :meth:`__call__`); with LoRA adapters active
                the message also names those of large scale (past
                :data:`vidax.lora.adapters.LARGE_SCALE`), a likely cause.
        """
        self.check_components()
        check_cache_call(self.cache_config, call.num_inference_steps)
        self.warn_if_data_axis_idle(call)
        tiling = getattr(self.vae, "use_tiling", False)
        est = None if self.memory_check is None else self.check_memory(
            self.info, call, dtype=self.dtype, loaded=True, refuse=self.memory_check,
            devices=1 if self.mesh is None else self.mesh.size, vae_tiling=tiling)
        auto_tiling = est is not None and est.vae_tiling and not tiling
        if auto_tiling:  # for this call only
            saved_tiling = self.vae.tiling
            self.vae.enable_tiled_decode()
        phase = ["text encoding"]
        self._interrupt = False
        try:
            scale = (contextlib.nullcontext() if call.lora_scale is None or self._lora is None
                     else self._lora.call_scale(call.lora_scale))
            with self.precision(), scale:
                return self._generate(call, phase)
        except NumericalError as e:
            from vidax.lora.adapters import LARGE_SCALE

            scales = None if self._lora is None else self._lora.scales_in_use(at_least=LARGE_SCALE)
            if scales is None:
                raise
            error = NumericalError(e.message, "; the large LoRA scale(s) in use may be the cause (they make the "
                                   "merged weights overflow): ", scales, ": try smaller ones")
            error.latents = getattr(e, "latents", None)
            raise error from None
        except Exception as e:
            if not (isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in str(e)) or isinstance(e, OutOfMemoryError):
                raise
            what = " ".join(f"{type(e).__name__}: {e}".split())[:300] if str(e) else type(e).__name__
            estimate = f"the estimate was {est.describe()}" if est is not None else "no estimate"
            free, where = available_memory()
            advice = (("try a smaller ", Arg("max_sequence_length", call.max_sequence_length))
                      if phase[0] == "text encoding" else
                      ("try a smaller size or fewer ", Arg("num_frames"), ", bfloat16, or offloading"))
            raise OutOfMemoryError(
                f"ran out of memory during the {phase[0]} at ", size_words(call), f" ({what}); {estimate}, {where} "
                f"now {_gib(free)}; ", *advice
            ) from None
        finally:
            if auto_tiling:
                self.vae.tiling = saved_tiling

    def _generate(self, call: Call, phase: list) -> VideoPipelineOutput:
        t0 = time.perf_counter()
        # The load is reported by the first call that completes.
        stats = RunStats(load_s=self._pending_load_s, seed=call.seed, seed_random="seed" not in call.given,
                         matmul_precision=describe_matmul_precision(self.matmul_precision))
        with stats.timed("text_encode_s"), status("encoding the prompt", call.progress):
            embeds = self.call_embeds(call)
            embeds = jax.tree.map(lambda e: self._repeat_embeds(e, call.num_videos_per_prompt), embeds)
            jax.block_until_ready(embeds)
        stats.sample_memory()
        if call.cancel is not None and call.cancel():
            raise Cancelled("after encoding the prompt")
        cond = self.condition(call, stats)
        x = self.prepare_latents(call, self.initial_noise(call), cond)
        state = self.set_timesteps(call, x)
        phase[0] = "denoising loop"
        x, state = self.denoise(call, x, state, embeds, cond, stats)
        check_finite(f"the denoising loop ({call.num_inference_steps} steps)", x, self.dtype)
        x = self.final_latents(call, x, cond)
        video, streams = (x, {}) if not isinstance(x, dict) else (x[self.latent_streams[0]], x)
        audio = streams.get(self.audio_stream) if self.audio_stream is not None else None
        rate = None
        if call.output_type == "latent":
            frames = self.latents_output(video)
            audio = None if audio is None else self.audio_latents_output(audio)
        else:
            phase[0] = "VAE decode"
            check_decodable(call, video, lambda: self.latents_output(video))
            frames = self.decode(call, video, stats)
            if audio is not None and call.decode_audio:
                phase[0] = "audio decode"
                audio, rate = self.decode_audio(call, audio, stats)
            else:
                audio = None
        if call.output_type == "pil":
            frames = frames_as_pil(frames)
        stats.sample_memory()
        self._pending_load_s = 0.0
        stats.call_s = time.perf_counter() - t0
        return VideoPipelineOutput(frames=frames, stats=stats, audio=audio, audio_sample_rate=rate)

    def initial_noise(self, call: Call) -> Any:
        """The initial noise of each latent stream (:meth:`latent_shapes`), float32, in the
        diffusers layout: the given ``latents=`` / ``audio_latents=``..., else drawn from the seed
        with one key per stream: the first (video) stream's from ``jax.random.PRNGKey(seed)``
        itself (so a seed gives the same video whatever other streams a family has), stream ``i``
        > 0 from ``jax.random.fold_in(PRNGKey(seed), i)``. One stream: its array; several: a
        dict keyed by :attr:`latent_streams`."""
        key = jax.random.PRNGKey(call.seed)
        given = {self.latent_streams[0]: call.latents, **call.stream_latents}
        noise = {}
        for i, (name, shape) in enumerate(self.latent_shapes(self.info, call).items()):
            value = given.get(name)
            noise[name] = (jnp.asarray(value) if value is not None else
                           jax.random.normal(key if i == 0 else jax.random.fold_in(key, i), shape, jnp.float32))
        return noise[self.latent_streams[0]] if len(noise) == 1 else noise

    def _repeat_embeds(self, e: jax.Array, n: int) -> jax.Array:
        # Each prompt's embeddings n times in a row; floating arrays in the pipeline's dtype
        # (masks and token ids keep theirs).
        e = jnp.repeat(e, n, axis=0)
        return e.astype(self.dtype) if jnp.issubdtype(e.dtype, jnp.floating) else e

    def denoise(self, call: Call, x: jax.Array, state: Any, embeds: Any, cond: dict,
                stats: RunStats) -> tuple[jax.Array, Any]:
        """Every step, each run by the expert :meth:`expert_plan` picks; the steps of one expert
        run as one :func:`run_denoising_loop` (its parameters on the device only meanwhile)."""
        total = int(self.step_state(state).num_inference_steps)
        if self.mesh is None:
            # Committed to the device like a step's outputs, so every segment's inputs match and
            # experts of one architecture reuse one compiled step.
            x, state = jax.device_put((x, state), jax.local_devices()[0])
        done = 0
        for expert, count in segments(self.expert_plan(state)):
            inputs, axes = self.step_args(call, embeds, cond, state, expert)
            x, state = self._run_expert(expert, call, x, state, (inputs,), (axes,), count, done, total, stats)
            done += count
        return x, state

    def _run_expert(self, expert, call, x, state, args, arg_axes, count, done, total, stats):
        # The expert's device parameters live only in this frame, so they are released before
        # the next segment asks for the other expert.
        params = self.experts.params(expert)
        module = self.experts.modules[expert]
        if stats.cpu_matmul is None:
            stats.cpu_matmul = describe_cpu_matmul(self.dtype, quantized_weight_formats(module))
        cache = self._step_cache(call, expert, total, stats)
        step = self.step_fn(call.do_cfg, expert, None if cache is None else cache.spec)
        cb = None if call.callback is None else (lambda i, _n: call.callback(done + i, total))
        step_end = None if call.step_end is None else self._step_end_hook(call, state, done)
        if cache is not None:
            # A fresh state for every expert segment: each of the reference's experts has its own hooks.
            shapes = step_shapes(module, params, lambda _p, lat, st, inputs: self.model_args(lat, st, inputs, call.do_cfg),
                                 x, state, args, cache.spec.taps, rows=cache.spec.kind != "taylorseer")
            state = CacheCarry(state, cache.initial(shapes))
        if not offloaded_stacks(module):
            # bf16 stacks on CPU enter the jitted step as uint16 views (no copy of them per step).
            params = as_stack_bits(params, getattr(module, "block_stacks", ()))
        x, state = run_denoising_loop(step, params, x, state, args, count, stats, call.progress, cb,
                                      mesh=self.mesh, arg_axes=arg_axes, first_step=done, total_steps=total,
                                      cancel=call.cancel, cache=cache, on_step_end=step_end,
                                      interrupt=lambda: self._interrupt)
        return (x, state.sched) if cache is not None else (x, state)

    def _step_end_hook(self, call: Call, state: Any, done: int) -> Callable:
        # diffusers' callback_on_step_end(pipe, i, t, {"latents": ...}) after step done + i, its
        # returned "latents" put back in the loop's layout, dtype and sharding.
        timesteps = np.asarray(self.step_state(state).timesteps)
        first = self.latent_streams[0]

        def hook(i: int, latents: Any) -> Any:
            x = latents[first] if isinstance(latents, dict) else latents
            view = jnp.array(self.loop_latents_to_diffusers(x))  # a copy: the loop donates its buffers
            out = call.step_end(self, done + i, jnp.asarray(timesteps[done + i]), {"latents": view})
            if not isinstance(out, Mapping) or out.get("latents") is None:
                return None
            new = finite_array("callback_on_step_end's returned latents", out["latents"])
            if new.shape != view.shape:
                raise InputError(f"callback_on_step_end returned latents of shape {tuple(new.shape)}; they must keep "
                                 f"the shape it was given, {tuple(view.shape)}")
            new = jax.device_put(self.loop_latents_from_diffusers(jnp.asarray(new), x).astype(x.dtype), x.sharding)
            return {**latents, first: new} if isinstance(latents, dict) else new

        return hook

    def loop_latents_to_diffusers(self, x: jax.Array) -> jax.Array:
        """The denoising loop's (video) latents as diffusers' pipeline loop holds them, for
        ``callback_on_step_end``: channels-last (B, T, H, W, C) -> (B, C, T, H, W) by default."""
        return jnp.transpose(x, (0, 4, 1, 2, 3))

    def loop_latents_from_diffusers(self, y: jax.Array, like: jax.Array) -> jax.Array:
        """The inverse of :meth:`loop_latents_to_diffusers` (``like``: the loop's latents)."""
        return jnp.transpose(y, (0, 2, 3, 4, 1))

    #: diffusers' pipeline runs the conditional and unconditional passes as separate transformer
    #: calls (a step cache then keeps one state per branch, :mod:`vidax.pipelines.step_cache`);
    #: False: one batched call, one state.
    separate_cfg_passes: ClassVar[bool] = False
    #: diffusers 0.42.1 runs this pipeline's transformer calls in cache contexts and has hook
    #: metadata for its blocks, so its cache hooks work; False (no reference to match): step
    #: caches are refused.
    cache_reference: ClassVar[bool] = True
    #: diffusers 0.42.1 registers this family's blocks in its ``TransformerBlockRegistry``, which
    #: its First-Block Cache and MagCache hooks need (False: they raise there, so vidax refuses
    #: them; TaylorSeer needs no block metadata).
    cache_block_metadata: ClassVar[bool] = True
    #: Why diffusers 0.42.1's First-Block Cache / MagCache hooks raise on this pipeline when
    #: :attr:`cache_block_metadata` is False (``{pipeline}``: the pipeline's class as the user
    #: loads it; ``{config}``: the config's class).
    cache_metadata_problem: ClassVar[str] = ("diffusers 0.42.1 has no block metadata for {pipeline}'s transformer "
                                             "blocks that its {config} hooks can use (they raise there)")

    @classmethod
    def check_cache_kind(cls, config: Any, name: str = "config", pipeline: str | None = None) -> None:
        """Raise unless diffusers 0.42.1 runs ``config``'s kind of cache hooks on this pipeline
        (before any weight is read; ``name``: how the config is named, ``--cache first_block:0.1``;
        ``pipeline``: the pipeline class as the user loads it, model_index.json's ``_class_name``,
        default this class's name).

        Raises:
            InputError: one line naming ``name``.
        """
        pipeline = pipeline or cls.__name__
        if not cls.cache_reference:
            raise InputError(f"{name}: diffusers 0.42.1's {pipeline} cannot run cache hooks (no cache context "
                             "around its transformer calls, or no block metadata), so there is no reference to match")
        if not cls.cache_block_metadata and not isinstance(config, TaylorSeerCacheConfig):
            problem = cls.cache_metadata_problem.format(pipeline=pipeline, config=type(config).__name__)
            raise InputError(f"{name}: {problem}, so there is no reference to match; TaylorSeerCacheConfig runs")
        if len(cls.latent_streams) > 1 and not isinstance(config, TaylorSeerCacheConfig):
            # vidax's First-Block Cache / MagCache measure and keep one stream's rows.
            raise InputError(f"{name}: {type(config).__name__} on a pipeline with several latent streams "
                             f"({cls.__name__}: {', '.join(cls.latent_streams)}) is not implemented in vidax; "
                             "TaylorSeerCacheConfig runs")

    def enable_cache(self, config: Any) -> None:
        """Turn on step caching for the next calls (``config``: a
        :class:`~vidax.pipelines.step_cache.FirstBlockCacheConfig`, ``MagCacheConfig`` or
        ``TaylorSeerCacheConfig``; diffusers' ``pipe.transformer.enable_cache(config)``); each
        call starts a fresh cache state, as diffusers resets its hooks after a call.

        Raises:
            InputError: not a cache config; a cache already enabled (``disable_cache()`` first,
                as in diffusers); a cache this family's reference cannot hook.
        """
        config = self.check_cache(config)
        if self.cache_config is not None:
            raise InputError(f"a {type(self.cache_config).__name__} is already enabled; call disable_cache() before "
                             f"enable_cache({type(config).__name__}(...))")
        self.cache_config = config

    def check_cache(self, config: Any, name: str = "config") -> Any:
        """``config`` if this pipeline can run it (what :meth:`enable_cache` checks; reads the
        model's structure, no weight), else an InputError naming ``name``."""
        config = check_cache_config(config, name)
        if name == "config":  # the Python keyword; a CLI caller passes its flag as typed
            name = f"{name}={type(config).__name__}"
        self.check_cache_kind(config, name, self.checkpoint.pipeline_class_name)
        model = type(self.experts.modules[0]).__name__
        if isinstance(config, TaylorSeerCacheConfig):
            modes = {taylorseer_mode(config, m) for m in self.experts.modules}
            if modes == {"none"}:
                logger.warning("TaylorSeerCacheConfig's identifiers match no module of %s (as in diffusers): the "
                               "runs are uncached", model)
        elif min(m.num_blocks() for m in self.experts.modules) < 2:
            raise InputError(f"{name} needs at least 2 transformer blocks; {model} has "
                             f"{min(m.num_blocks() for m in self.experts.modules)}")
        return config

    def disable_cache(self) -> None:
        """Turn step caching off (a no-op when it is off)."""
        self.cache_config = None

    #: The step cache's config (None: off, the default); see :meth:`enable_cache`.
    cache_config: Any = None

    def _step_cache(self, call: Call, expert: int, total: int, stats: RunStats) -> StepCache | None:
        config = self.cache_config
        module = self.experts.modules[expert]
        if config is None or (isinstance(config, TaylorSeerCacheConfig) and taylorseer_mode(config, module) == "none"):
            return None
        if stats.cache is None:
            stats.cache = CacheReport(describe_config(config), module.num_blocks())
        branches = 2 if call.do_cfg and self.separate_cfg_passes else 1
        return StepCache(config, module, branches, total, stats.cache)

    def step_key(self) -> Any:
        """What else a compiled step depends on (e.g. the scheduler's class)."""
        return type(self.scheduler)

    def step_fn(self, do_cfg: bool, expert: int = 0, cache: CacheSpec | None = None):
        """The step ``(params, latents, state, inputs) -> (latents, state)`` of ``expert``: one jit
        (latents donated), or a :class:`~vidax.parallel.offload.ChunkedStep` when its blocks are
        streamed from host memory (every declared stack). Experts of one structure share one trace.
        The latents (float32) and the scheduler state come back in the dtypes they went in: the
        guided prediction is upcast to the latents' dtype before :meth:`scheduler_update`, and
        :func:`check_step_dtypes` raises TypeError at trace time for a step that changes one.
        With a step ``cache`` (:class:`~vidax.pipelines.step_cache.CacheSpec`) the state is a
        :class:`~vidax.pipelines.step_cache.CacheCarry` and the model runs as ``embed``, then
        ``cache.forward`` (the blocks or the cached result, and ``head``)."""
        module = self.experts.modules[expert]
        graphdef = nnx.graphdef(module)
        stacks = offloaded_stacks(module)
        key = (do_cfg, graphdef, self.step_key(), len(stacks), cache)
        if key in self._step_fns:
            fn = self._step_fns[key]
            return fn.for_blocks(stacks) if stacks else fn
        gdtype = self.guidance_dtype

        def model_args(latents, state, inputs):
            return self.model_args(latents, state, inputs, do_cfg)

        def finish(pred, latents, state, inputs):
            if isinstance(latents, dict) and isinstance(pred, (tuple, list)):
                # a model of several streams predicts them in the order of latent_streams (a dict
                # through jax comes back with its keys sorted)
                # (streams the call does not run, e.g. Cosmos 3's sound without enable_sound, left out)
                pred = {k: p for k, p in zip(self.latent_streams, pred) if k in latents}
            if do_cfg:
                pred = self.guide(pred if gdtype is None else jax.tree.map(lambda p: p.astype(gdtype), pred),
                                  state, inputs)
            # The scheduler updates the latents in their own dtype (float32): a bfloat16 prediction
            # is upcast first, so the update is not rounded to bfloat16 (schedulers return the
            # prediction's dtype, as diffusers'). Several streams: each stream's own.
            pred = jax.tree.map(lambda p, x: p.astype(x.dtype), pred, latents)
            new = self.scheduler_update(state, pred, latents, inputs)
            check_step_dtypes(type(self).__name__, (latents, state), new)
            return new

        def step(params, latents, state, inputs):
            model = nnx.merge(graphdef, from_stack_bits(params))
            if cache is None:
                return finish(model(*model_args(latents, state, inputs)), latents, state, inputs)
            x, block_inputs = model.embed(*model_args(latents, state.sched, inputs))
            pred, cs = cache.forward(model, x, block_inputs, state.cache)
            latents, sched = finish(pred, latents, state.sched, inputs)
            return latents, CacheCarry(sched, cs)

        if stacks:
            fn = ChunkedStep(graphdef, stacks, model_args, finish, cache=cache)
        else:
            fn = jax.jit(step, donate_argnums=(1,))
        self._step_fns[key] = fn
        return fn

    def decode(self, call: Call, latents: jax.Array, stats: RunStats) -> np.ndarray:
        """Frames float32 (B, F, H, W, 3) in [0, 1] through the VAE contract: its own latent
        de-normalisation, then its chunks decoded one by one (each moved to the host as it ends);
        ``call.cancel`` is asked before each chunk.

        Raises:
            NumericalError: a chunk holds NaN/Inf. Cancelled: ``call.cancel()`` returned True.
        """
        with stats.timed("decode_s"):
            chunks = []
            vae_params = nnx.state(self.vae, nnx.Param)
            with self.staging.on_device("vae"):
                # De-normalised with the VAE on the device: its statistics may be checkpoint buffers.
                z = self.decode_input(call, self.vae.denormalize_latents(self.latents_to_decode(call, latents)))
                n = self.vae.decode_chunks(z)
                decoded = iter(self.vae.iter_decode(z, **self.decode_kwargs(call)))
                with tqdm(total=n, desc="vae decode", disable=not call.progress, unit="chunk") as bar:
                    while True:
                        if call.cancel is not None and len(chunks) < n and call.cancel():
                            steps = f"all {call.num_inference_steps} denoising steps done"
                            raise Cancelled(f"after VAE decode chunk {len(chunks)} of {n} ({steps})" if chunks
                                            else f"before the VAE decode ({steps})")
                        chunk = next(decoded, None)
                        if chunk is None:
                            break
                        chunks.append(np.asarray(chunk))
                        check_finite(f"the VAE decode (chunk {len(chunks)} of {n})", chunks[-1], vae_params)
                        stats.sample_memory()
                        bar.update()
            video = np.concatenate(chunks, axis=1)
            return np.clip(video / np.float32(2.0) + np.float32(0.5), 0.0, 1.0).astype(np.float32)

    def decode_audio(self, call: Call, latents: jax.Array, stats: RunStats) -> tuple[np.ndarray, int]:
        """``(waveform float32 (B, channels, samples) in [-1, 1], sample rate in Hz)`` of the
        audio stream's final latents, as diffusers returns ``audio``: the audio decoder's own
        de-normalisation, its decode (to a mel spectrogram or a waveform), then the vocoder
        (mel -> waveform) where it has one; each component on the device only while it runs
        when staged. Timed as ``audio_decode_s``.

        Raises:
            NumericalError: the decoded sound holds NaN/Inf.
        """
        decoder = getattr(self, self.audio_decoder_name)
        vocoder = getattr(self, self.vocoder_name, None) if self.vocoder_name else None
        with stats.timed("audio_decode_s"), status("decoding the sound", call.progress):
            if call.cancel is not None and call.cancel():
                raise Cancelled(f"before the audio decode (all {call.num_inference_steps} denoising steps done)")
            # De-normalised with the decoder on the device: its statistics may be checkpoint tensors.
            out = self.encode_with(self.audio_decoder_name, lambda z: decoder.decode(decoder.denormalize_latents(z)),
                                   self.audio_latents_to_decode(call, latents))
            check_finite("the audio decode", out, nnx.state(decoder, nnx.Param))
            if vocoder is not None:
                out = self.encode_with(self.vocoder_name, vocoder, out)
                check_finite("the vocoder", out, nnx.state(vocoder, nnx.Param))
                rate = vocoder.sample_rate
            else:
                rate = decoder.sample_rate
            wave = np.clip(np.asarray(out, np.float32), -1.0, 1.0)
            stats.sample_memory()
        return wave, int(rate)

    def audio_latents_to_decode(self, call: Call, latents: jax.Array) -> jax.Array:
        """The audio stream's latents as the audio decoder takes them (e.g. unpacked from tokens)."""
        return latents

    def audio_latents_output(self, latents: jax.Array) -> np.ndarray:
        """The audio stream's final latents -> ``output_type="latent"``'s ``out.audio`` in the
        family's diffusers layout (as diffusers' LTX2Pipeline returns ``audio_latents``)."""
        return np.asarray(latents)

    def call_embeds(self, call: Call) -> Any:
        """The call's text embeddings before the per-video repeat: :meth:`encode_call`, or, with
        ``prompt_embeds=`` (:attr:`Call.prompt_parts`), :meth:`context_of_parts` of the given
        arrays, the negative ones given or encoded from the negative texts when CFG runs."""
        if call.prompt_parts is None:
            return self.encode_call(call)
        parts = tuple(jnp.asarray(p) for p in call.prompt_parts)
        if call.do_cfg:
            negatives = call.negative_parts
            if negatives is None:
                negatives = self.encode_prompt_parts(dataclasses.replace(
                    call, prompts=call.negatives, cfg=False, given=call.given - {"negative_prompt"}))
            parts = tuple(jnp.concatenate([p, jnp.asarray(n).astype(p.dtype)]) for p, n in zip(parts, negatives))
        return self.context_of_parts(parts)

    def encode_prompt_parts(self, call: Call) -> tuple:
        """The arrays of :attr:`prompt_embeds_args` (diffusers' ``encode_prompt``'s) for
        :func:`prompt_texts` of ``call``, batch first: :meth:`encode_call` by default."""
        out = self.encode_call(call)
        return out if isinstance(out, tuple) else (out,)

    def context_of_parts(self, parts: tuple) -> Any:
        """What :meth:`encode_call` returns, from :meth:`encode_prompt_parts`'s arrays (the
        arrays themselves by default; LTX-2 runs its text connectors on them)."""
        return parts if len(parts) > 1 else parts[0]

    def encode_prompt_embeds(self, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any) -> dict:
        """Encode the prompts once, to pass to later calls (diffusers' ``encode_prompt``, whose
        tuple is returned here by keyword): ``pipe(**pipe.encode_prompt_embeds(p, n, ...), ...)``
        makes the video ``pipe(p, n, ...)`` makes, bit for bit.

        Args: the call's keywords (``max_sequence_length``, ``guidance_scale``, ``image`` where
            the image joins the text encoding...): they decide the encoding and whether the
            negative prompt is encoded (only when CFG runs, as diffusers).

        Returns:
            ``{keyword: numpy array}``: :attr:`prompt_embeds_args` (e.g. ``prompt_embeds`` (B, L,
            D) in the pipeline's dtype, masks (B, L)), one row per prompt (not repeated per
            video), and their ``negative_`` twins when CFG runs.

        Raises:
            InputError: an invalid argument; a pipeline that takes no ``prompt_embeds``.
        """
        if not self.prompt_embeds_args:
            raise InputError(f"{type(self).__name__} takes no ", Arg("prompt_embeds"), " (its diffusers pipeline "
                             "takes none)")
        call = self.check_call(self.info, prompt, negative_prompt, **kwargs)
        parts = self.encode_prompt_parts(call)
        b = len(call.prompts)
        out = {n: np.asarray(p[:b]) for n, p in zip(self.prompt_embeds_args, parts)}
        if call.do_cfg:
            out.update({"negative_" + n: np.asarray(p[b:]) for n, p in zip(self.prompt_embeds_args, parts)})
        return out

    def encode_call(self, call: Call) -> Any:
        """The call's text embeddings before the per-video repeat: :meth:`encode_prompt` of
        :func:`prompt_texts`; a family whose prompt encoding also reads the call (an image
        spliced into the text encoder's sequence) overrides it."""
        return self.encode_prompt(prompt_texts(call), call.max_sequence_length, text_truncation(call))

    def encode_prompt(self, prompts: Sequence[str], max_sequence_length: int,
                      truncation: Truncation | None = None) -> jax.Array:
        """Embeddings (B, L, D) of ``prompts`` as the reference encodes them (the family's
        :meth:`encode_text`), a staged text encoder placed on the device for the call only;
        ``truncation``: how a too-long prompt is named in the warning (:func:`text_truncation`)."""
        return self.encode_with("text_encoder", self.encode_text, list(prompts), max_sequence_length, truncation)

    def encode_with(self, name: str, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` with component ``name`` on the device (staged components are placed for
        the call only), its result complete before the weights leave."""
        with self.staging.on_device(name), self.precision():
            out = fn(*args)
            jax.block_until_ready(out)
        return out


    # ================================================================== LoRA
    @property
    def lora(self) -> Any:
        """The pipeline's :class:`~vidax.lora.adapters.LoraAdapters` (built on first use)."""
        if self._lora is None:
            from vidax.lora.adapters import LoraAdapters

            parts = []
            for name, module in zip(self.experts.names, self.experts.modules):
                spec = registry().component(self.checkpoint.class_of(name), source=f"{self.checkpoint.source} ({name})")
                parts.append((name, module, spec, self.checkpoint.typed_config(name, spec.config_class())))
            self._lora = LoraAdapters(parts)
        return self._lora

    def load_lora_weights(self, pretrained_model_name_or_path_or_dict: Any, adapter_name: str | None = None, *,
                          load_into_transformer_2: bool = False, weight_name: str | None = None, **kwargs: Any) -> str:
        """Load a LoRA into the denoising transformer and merge it (diffusers' API; every layout of
        :mod:`vidax.lora.formats`). The adapter loaded last is the active one, at weight 1
        (:meth:`set_adapters` combines several). Switching or unloading restores the base weights
        bit for bit, without reading the checkpoint again.

        Args:
            pretrained_model_name_or_path_or_dict: a ``.safetensors`` file, a folder holding it
                (``weight_name`` picks one), or a state dict of arrays / tensors.
            adapter_name: its name (default ``default_<n>``).
            load_into_transformer_2: into the second expert (Wan2.2 A14B) instead of the first,
                as diffusers. A file with ``transformer_2.`` keys gives those to the second expert.
            weight_name: the file within a folder.

        Returns:
            The adapter's name.

        Raises:
            InputError: the file cannot be read or is truncated, a key lands on no parameter (the
                first few named; a LoRA that fits another family says which), a rank mismatch,
                ``load_into_transformer_2`` without a second expert. Nothing changes then.
        """
        if kwargs:
            raise InputError(f"load_lora_weights takes no {', '.join(f'{k}=' for k in sorted(kwargs))} (vidax reads "
                             "local files: it takes adapter_name=, load_into_transformer_2=, weight_name=)")
        source = pretrained_model_name_or_path_or_dict
        if weight_name is not None:
            source = os.path.join(os.fspath(source), weight_name)
        if load_into_transformer_2 and len(self.experts.modules) < 2:
            raise InputError(f"load_into_transformer_2=True: {type(self).__name__} ({self.root}) has no "
                             "transformer_2 (Wan2.1 and the other families have one transformer)")
        return self.lora.load(source, adapter_name, experts=[1] if load_into_transformer_2 else [0])

    def set_adapters(self, adapter_names: Any, adapter_weights: Any = None) -> None:
        """Activate ``adapter_names`` (a name or a list) with ``adapter_weights`` (a number, or one
        per adapter, None in the list meaning 1; default 1), as diffusers; the weights are re-merged
        from the base ones. diffusers' dicts of per-module scales are not supported.

        Raises:
            InputError: an unknown name, or any other ``adapter_weights`` (one line naming it).
        """
        self.lora.set_adapters(adapter_names, adapter_weights)

    def delete_adapters(self, adapter_names: Any) -> None:
        """diffusers' ``delete_adapters``: remove ``adapter_names`` (a name or a list); the other
        adapters stay (re-merged from the base weights).

        Raises:
            InputError: a name that is not loaded.
        """
        self.lora.delete(adapter_names)

    def get_active_adapters(self) -> list[str]:
        """The names of the active adapters."""
        return [] if self._lora is None else self._lora.active_names()

    def get_list_adapters(self) -> dict[str, list[str]]:
        """Component -> names of the adapters loaded into it (diffusers' ``get_list_adapters``)."""
        if self._lora is None:
            return {}
        out: dict[str, list[str]] = {}
        for name, per_expert in self._lora.terms.items():
            for e, terms in enumerate(per_expert):
                if terms:
                    out.setdefault(self._lora.names[e], []).append(name)
        return out

    def fuse_lora(self, lora_scale: float = 1.0, components: Sequence[str] | None = None,
                  adapter_names: Sequence[str] | None = None) -> None:
        """diffusers' ``fuse_lora``: the active adapters (or ``adapter_names``) at ``lora_scale``
        in ``components`` (default ``["transformer"]``). vidax merges adapters as soon as they are
        loaded, so this only sets the scale."""
        self.lora.fuse(lora_scale, components, adapter_names)

    def unfuse_lora(self, components: Sequence[str] | None = None) -> None:
        """diffusers' ``unfuse_lora``: the scale of :meth:`fuse_lora` back to 1; the adapters stay
        active (as diffusers' unfused adapter layers) until :meth:`unload_lora_weights`."""
        self.lora.unfuse(components)

    def disable_lora(self) -> None:
        """Run with the base weights (the adapters stay loaded; :meth:`enable_lora` brings them back)."""
        self.lora.enable(False)

    def enable_lora(self) -> None:
        self.lora.enable(True)

    def unload_lora_weights(self) -> None:
        """Remove every adapter; the weights are the checkpoint's again, bit for bit."""
        if self._lora is not None:
            self._lora.unload()


def cancel_check(cancel: Any) -> Callable[[], bool] | None:
    """The zero-argument check of a call's ``cancel`` keyword: a ``threading.Event`` (anything
    with ``is_set()``) or a callable returning True to stop; None stays None.

    Raises:
        InputError: anything else.
    """
    if cancel is None:
        return None
    if callable(getattr(cancel, "is_set", None)):
        return cancel.is_set
    if callable(cancel):
        return cancel
    raise InputError(f"cancel must be a threading.Event, a callable returning True to stop, or None, "
                     f"got {type(cancel).__name__}")


def check_step_dtypes(owner: str, taken: Any, returned: Any) -> None:
    """A denoising step must return its ``(latents, scheduler state)`` with the shapes and dtypes
    it took (checked at trace time): the loop runs one compiled step for every step, so a step
    whose latents came back in another dtype (e.g. bfloat16 from a bfloat16 prediction) would fail
    from the second step on, and a silent cast back would hide the rounding.

    Raises:
        TypeError: a leaf whose dtype or shape changed (a bug of ``owner``'s step hooks).
    """
    def sig(tree):
        return [(jax.tree_util.keystr(p), x.shape, x.dtype) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]

    before, after = sig(taken), sig(returned)
    if before != after:
        diff = [f"{name}: {s0} {d0} -> {s1} {d1}" for (name, s0, d0), (_, s1, d1) in zip(before, after)
                if (s0, d0) != (s1, d1)] or [f"{len(before)} leaves -> {len(after)}"]
        raise TypeError(f"{owner}'s denoising step returns (latents, state) in other shapes/dtypes than it takes "
                        f"({'; '.join(diff)}); every step must keep them")


def frames_of_form(num_frames: int, k: int, reference: str) -> int:
    """``num_frames`` rounded to the form ``k n + 1`` as diffusers' Wan and LTX pipelines round it
    (``num_frames // k * k + 1``), with a warning naming ``reference``, the pipeline that does so."""
    if num_frames % k == 1:
        return num_frames
    rounded = num_frames // k * k + 1
    logger.warning("%s is not of the form %dk+1; using %d, as diffusers' %s does",
                   Arg("num_frames", num_frames), k, rounded, reference)
    return rounded


def video_latent_shape(call: Call, channels: int, temporal: int, spatial: int) -> tuple[int, ...]:
    """The initial noise of a causal video VAE's latents in the diffusers layout
    ``(B, C, (F - 1) // temporal + 1, H // spatial, W // spatial)`` (Wan, Cosmos, HunyuanVideo)."""
    return (call.batch, channels, (call.num_frames - 1) // temporal + 1, call.height // spatial,
            call.width // spatial)


def cfg_pair(do_cfg: bool, *xs: Any) -> tuple:
    """Each of ``xs`` (or None) doubled along the batch for the cond/uncond pair when ``do_cfg``."""
    if not do_cfg:
        return xs
    return tuple(None if x is None else jnp.concatenate([x, x], axis=0) for x in xs)


def prompt_texts(call: Call) -> list[str]:
    """The texts to encode: the prompts, then the negatives when CFG runs."""
    return call.prompts + (call.negatives if call.do_cfg else [])


def text_truncation(call: Call, offset: int = 0) -> Truncation:
    """How the tokenizer's truncation warning names each of :func:`prompt_texts` and the limit:
    ``prompt`` (``prompt[i]`` for a list), ``negative_prompt`` (``[i]`` where they differ), or the
    pipeline's default negative prompt when the caller gave none; ``max_sequence_length=L`` when
    the caller gave it, else that L is the checkpoint's default. ``offset``: template tokens
    before each text (:class:`~vidax.encoders.tokenizer.Truncation`)."""
    def names(name: str, texts: list[str]) -> list[Arg]:
        return [Arg(name)] * len(texts) if len(set(texts)) == 1 else [Arg(f"{name}[{i}]") for i in range(len(texts))]

    labels = names("prompt", call.prompts)
    if call.do_cfg:
        labels += (names("negative_prompt", call.negatives) if "negative_prompt" in call.given
                   else ["the pipeline's default negative prompt text"] * len(call.negatives))
    n = call.max_sequence_length
    limit = (Message(Arg("max_sequence_length", n)) if "max_sequence_length" in call.given else
             Message(f"{n} tokens, this checkpoint's default (", Arg("max_sequence_length", keyword=True),
                     " sets another length)"))
    return Truncation(labels, limit, offset)


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


__all__: Sequence[str] = ("CallDefaults", "CheckpointInfo", "Capabilities", "Call", "VideoPipeline", "SizeLimits",
                          "ModelSize", "MemoryEstimate", "run_size_estimate", "run_memory_estimate", "MAX_SEED",
                          "tokenizer_token_limit", "text_encoding_bytes",
                          "SHARED_CALL_ARGS", "frames_of_form", "video_latent_shape", "cfg_pair", "prompt_texts", "text_truncation", "finite_array",
                          "check_finite")
