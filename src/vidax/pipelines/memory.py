"""A call's peak memory estimated from configs and safetensors headers (:class:`MemoryEstimate`),
checked against the memory there is before any weight is read.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import types
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint, CheckpointInfo
from vidax.errors import Arg, CheckpointError, Message, OutOfMemoryError, SetupError, VidaxError, joined
from vidax.nn.inputs import parse_dtype
from vidax.pipelines.call import Call
from vidax.pipelines.weight_formats import transformer_source, weights_source
from vidax.registry import registry

logger = logging.getLogger("vidax.pipeline")


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
        decode_tile: pixels per side of the VAE's decode tile with ``enable_tiled_decode()``
            (``--vae-tiling``; the longer side where tiles are not square); 0 where the VAE has
            no tiled decode.
        decode_tile_stride: pixels from one such tile to the next (0: ``decode_tile``, no overlap).
        decode_tile_keeps_factor: the VAE's tiles overlap by a factor of their size (CogVideoX,
            HunyuanVideo 1.5): ``enable_tiled_decode(scale=k)`` advances ``k`` strides; else the
            overlap in pixels is kept and the stride grows by ``k - 1`` tiles (:meth:`decode_tile_at`).
        decode_tile_frames: video frames one tiled decode chunk makes (a temporal tile); 0: as
            ``decode_frames``.
        decode_state_bytes_per_pixel: bytes per video pixel (of one sample) of what the decode
            carries from chunk to chunk on the device (the Wan VAE's causal cache), beside a
            chunk's activations.
        decoder: the VAE decoder's kind where a backend measured figures of its own for it
            (:attr:`Calibration.decoder_bytes_per_element`; ``"ltx"``); "": the default figure.
        passes: transformer rows per sample in one step (0: classifier-free guidance's, 2 with
            it and 1 without; LTX-2 runs up to 4 guidance passes as one batch).
    """

    tokens: int
    hidden_size: int
    ffn_dim: int
    num_layers: int
    num_heads: int = 0
    decode_frames: int = 4
    decode_channels: int = 128
    decode_tile: int = 0
    decode_tile_stride: int = 0
    decode_tile_keeps_factor: bool = False
    decode_tile_frames: int = 0
    decode_state_bytes_per_pixel: float = 0.0
    decoder: str = ""
    passes: int = 0

    def rows(self, call: Call) -> int:
        """Transformer rows of one step of ``call``: its batch times the passes."""
        return int(getattr(call, "batch", 1)) * (self.passes or (2 if getattr(call, "do_cfg", False) else 1))

    def decode_tile_at(self, scale: int) -> tuple[int, int]:
        """(pixels a side, pixels from one tile to the next) of the decode tile with
        ``enable_tiled_decode(scale=scale)``."""
        tile, stride = self.decode_tile, self.decode_tile_stride or self.decode_tile
        if self.decode_tile_keeps_factor:
            return scale * tile, scale * stride
        return scale * tile, stride + (scale - 1) * tile


@dataclasses.dataclass(frozen=True)
class DecodeTile:
    """The tiled VAE decode with ``enable_tiled_decode(scale=scale)``.

    Attributes:
        scale: the tile's side in units of the default tile's (:attr:`ModelSize.decode_tile`).
        side: the tile's side in pixels. tiles: tiles per frame (the reference's raster loop:
            ``ceil(side / stride)`` a side of the frame).
        bytes: one tile's decode chunk (as :attr:`MemoryEstimate.decode`).
    """

    scale: int
    side: int
    tiles: int
    bytes: float


#: The setting a refused call names to run it anyway (:func:`check_memory`).
_ANYWAY = Arg("memory_check", python="pipe.memory_check = False")

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


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The activation model's figures on one backend (:func:`calibration`).

    Attributes:
        step_width_buffers, step_ffn_buffers: bytes per token of a denoising step per unit of
            the model width D and of ``ffn_dim``, per byte of the transformer's dtype (the CPU:
            ``4 x STEP_BUFFERS`` and :data:`STEP_BUFFERS`).
        decode_bytes_per_element: bytes per element of a decode chunk's full-resolution
            activations (:data:`DECODE_BYTES_PER_ELEMENT` on the CPU).
        decoder_bytes_per_element: the same for a kind of decoder measured apart
            (:attr:`ModelSize.decoder` -> bytes); a kind not named gets ``decode_bytes_per_element``.
    """

    step_width_buffers: float = 4 * STEP_BUFFERS
    step_ffn_buffers: float = STEP_BUFFERS
    decode_bytes_per_element: float = DECODE_BYTES_PER_ELEMENT
    decoder_bytes_per_element: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )

    def per_element(self, decoder: str) -> float:
        """Bytes per decode element of a decoder of kind ``decoder`` (:attr:`ModelSize.decoder`)."""
        return self.decoder_bytes_per_element.get(decoder, self.decode_bytes_per_element)


#: Each backend's figures; a platform not named here gets the CPU's (the largest). The TPU's are
#: fitted to its compiler's temporaries for one v5e chip (``benchmarks/tpu_memory_aot.py``, the
#: table in docs/benchmarks/tpu.md "Planning"): the step's two figures fit Wan2.1-1.3B's and
#: 14B's exactly, taken 6 % above (Wan2.1-14B 720p's whole CFG batch is at the margin of the chip
#: and did not fit there; HunyuanVideo 1.5 needs 20 % less than they count); the decode's (the
#: convolutions run in place) fits the Wan2.1 VAE's largest chunk program (a later chunk's, at
#: 480 x 832) from below by 1 %, and counts 8-14 % more for the Wan2.2 and HunyuanVideo 1.5 VAEs.
#: LTX's decoder (its last level 1/4 of the pixels a side, then depth-to-space) takes 13.0 bytes
#: an element untiled and 14.2 in one tile (LTX-2's, 512 x 768 x 121): counted as 14.5. On the
#: CPU it has not been measured: the default figure, which counts more.
CALIBRATIONS = {
    "cpu": Calibration(),
    "tpu": Calibration(
        step_width_buffers=6.94,
        step_ffn_buffers=0.97,
        decode_bytes_per_element=41,
        decoder_bytes_per_element=types.MappingProxyType({"ltx": 14.5}),
    ),
}


def calibration(platform: str | None = None) -> Calibration:
    """The :class:`Calibration` of device platform ``platform`` (``"cpu"``, ``"tpu"``,
    ``"gpu"``; None: this process's, :func:`vidax.nn.attention.backend`); the CPU's where the
    platform has none of its own."""
    if platform is None:
        from vidax.nn.attention import backend

        platform = backend()
    return CALIBRATIONS.get(platform, CALIBRATIONS["cpu"])


#: what every call needs beyond the model's arrays (XLA's compiles and runtime, thread stacks).
RUNTIME_OVERHEAD_BYTES = 160 * 2**20


#: The environment variable that pretends a device memory size (:func:`pretend_device_memory`).
DEVICE_MEMORY_ENV = "VIDAX_DEVICE_MEMORY"

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_memory_size(text: str) -> int:
    """Bytes of ``text``: a number with an optional unit (``B``, ``KB``/``MB``/``GB`` powers of
    1000, ``KiB``/``MiB``/``GiB`` powers of 1024; ``"15.7GiB"``, ``"16e9"``).

    Raises:
        ValueError: not such a size, or not positive.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or float(m.group(1)) <= 0:
        raise ValueError(text)
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def pretend_device_memory() -> int | None:
    """The device memory ``VIDAX_DEVICE_MEMORY`` pretends (bytes), or None where it is unset or empty.

    Raises:
        SetupError: the variable is not a size (naming it, its value and what is valid).
    """
    text = os.environ.get(DEVICE_MEMORY_ENV, "").strip()
    if not text:
        return None
    try:
        return parse_memory_size(text)
    except ValueError:
        raise SetupError(
            f"{DEVICE_MEMORY_ENV}={text!r} is not a memory size; give bytes or a number with a unit "
            "(e.g. 15.7GiB, 512MiB, 16GB), or unset it for the device's own"
        ) from None


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Peak memory of one call, in bytes, by part (see :func:`run_size_estimate`).

    Attributes:
        weights: parameters that must be in memory (0 when they are already loaded).
        step: the largest denoising step's activations (attention temporaries included).
        decode: one VAE decode chunk. outputs: latents and the decoded video (float32, host).
        overhead: :data:`RUNTIME_OVERHEAD_BYTES`.
        decode_tiles: the tiled decode at each tile scale k (index k - 1, :class:`DecodeTile`)
            from k = 1 while the tile's side is below the frame's longer side (a tile as large as
            the frame is the untiled decode); empty: the VAE has no tiling.
        vae_tiling: ``decode`` counts the tiled decode (:meth:`with_tiling`).
        vae_tile_scale: the tile scale ``decode`` counts with ``vae_tiling``.
        text: the text encoder's activations at ``max_sequence_length`` (:func:`text_encoding_bytes`;
            0 where it is not counted).
    """

    weights: int
    step: int
    decode: int
    outputs: int
    overhead: int = RUNTIME_OVERHEAD_BYTES
    decode_tiles: tuple[DecodeTile, ...] = ()
    vae_tiling: bool = False
    text: int = 0
    vae_tile_scale: int = 1

    @property
    def decode_tiled(self) -> float | None:
        """One VAE decode chunk of one default tile (scale 1; None: the VAE has no tiling)."""
        return self.decode_tiles[0].bytes if self.decode_tiles else None

    def with_tiling(self, scale: int = 1) -> MemoryEstimate | None:
        """This estimate with the VAE decoding in tiles of ``scale`` (1 .. ``len(decode_tiles)``);
        None where the VAE has no tiling."""
        if not self.decode_tiles:
            return None
        tiled = self.decode_tiles[scale - 1].bytes
        return dataclasses.replace(self, decode=min(self.decode, tiled), vae_tiling=True, vae_tile_scale=scale)

    def largest_tiles(self, fits: Any) -> MemoryEstimate | None:
        """:meth:`with_tiling` at the scale of fewest tiles per frame (ties: the smaller tile)
        among those whose estimate ``fits(estimate)``; scale 1 where none does (None: no tiling)."""
        fitting = [t for t in self.decode_tiles if fits(self.with_tiling(t.scale))]
        return self.with_tiling(min(fitting, key=lambda t: (t.tiles, t.scale)).scale if fitting else 1)

    @property
    def total(self) -> int:
        """Weights + the largest of the text encoding, the step and the decode (they do not
        overlap) + outputs + overhead."""
        return self.weights + max(self.text, self.step, self.decode) + self.outputs + self.overhead

    def describe(self) -> str:
        parts = [("weights", self.weights)] if self.weights else []
        parts += [("text encoding", self.text)] if self.text else []
        parts += [
            ("denoising step", self.step),
            ("VAE decode chunk" + (f" ({self.tile_words()})" if self.vae_tiling else ""), self.decode),
            ("latents and video", self.outputs),
        ]
        return f"~{_gib(self.total)} (" + ", ".join(f"{name} {_gib(b)}" for name, b in parts) + ")"

    def tile_words(self) -> str:
        """``"tiled, 512 px tiles"``: the tiles counted (``"tiled"`` where the size is unknown)."""
        tiles = self.decode_tiles[self.vae_tile_scale - 1 : self.vae_tile_scale]
        return f"tiled, {tiles[0].side} px tiles" if tiles else "tiled"


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def run_memory_estimate(
    size: ModelSize,
    batch: int,
    latent_elements: int,
    num_frames: int,
    height: int,
    width: int,
    *,
    videos: int | None = None,
    dtype_bytes: int = 4,
    weights: int = 0,
    decoded: bool = True,
    flash: bool = False,
    calibration: Calibration = Calibration(),
) -> MemoryEstimate:
    """Peak memory of one call (:class:`MemoryEstimate`), from the sizes alone.

    * step: ``batch x tokens x (step_width_buffers D + step_ffn_buffers ffn_dim) x dtype_bytes``
      (the CPU: ``2 x batch x tokens x (4 D + ffn_dim) x dtype_bytes``; blocks run one
      after another), plus attention's temporary: the ``(batch, heads, tokens, tokens)`` float32
      scores and probabilities where the ``"xla"`` implementation runs (up to 2**22 scores per
      head), else the blockwise ``(batch, heads, tokens, 512)`` float32 accumulators; none with
      ``flash`` (a fused kernel, ``pallas_tpu`` / ``cudnn``, keeps its tiles in on-chip memory).
    * decode: ``decode_frames x height x width x decode_channels x decode_bytes_per_element``
      plus the state carried between chunks (``decode_state_bytes_per_pixel`` per pixel and
      video); tiled (``size.decode_tile``): the same with height and width at most one tile and
      ``decode_tile_frames`` frames, for each tile scale (:func:`decode_tiles`).
    * outputs: latents (float32) and the video, 3 float32 copies (chunks, joined, clipped).

    Args:
        size: the model's numbers (:class:`ModelSize`). batch: samples per transformer call (CFG
            doubles it). latent_elements: elements of the initial latents. num_frames, height,
            width: the decoded video. videos: videos decoded (default ``batch``).
        dtype_bytes: bytes of the transformer's dtype. weights: parameter bytes to count.
        decoded: False when the latents are returned (``output_type="latent"``): no decode, no video.
        calibration: the backend's figures (:func:`calibration`; default the CPU's).
    """
    from vidax.nn.attention import AUTO_XLA_MAX_SCORES, DEFAULT_BLOCK_SIZE

    heads = size.num_heads or max(1, size.hidden_size // 64)
    t = size.tokens
    attention = batch * heads * t * 2 * (t if t * t <= AUTO_XLA_MAX_SCORES else DEFAULT_BLOCK_SIZE) * 4
    attention *= not flash or t * t <= AUTO_XLA_MAX_SCORES
    per_element = calibration.per_element(size.decoder)
    per_token = calibration.step_width_buffers * size.hidden_size + calibration.step_ffn_buffers * size.ffn_dim
    step = batch * t * per_token * dtype_bytes + attention
    state = size.decode_state_bytes_per_pixel * (videos or batch)
    decode = (size.decode_frames * size.decode_channels * per_element + state) * height * width if decoded else 0
    video = 3 * (videos or batch) * num_frames * height * width * 3 * 4 if decoded else 0
    per_pixel = ((size.decode_tile_frames or size.decode_frames) * size.decode_channels * per_element + state) * decoded
    return MemoryEstimate(
        weights=int(weights),
        step=int(step),
        decode=int(decode),
        outputs=int(latent_elements * 4 * 2 + video),
        decode_tiles=decode_tiles(size, height, width, per_pixel),
    )


def decode_tiles(size: ModelSize, height: int, width: int, per_pixel: float) -> tuple[DecodeTile, ...]:
    """The tiled decode of a ``height x width`` video at each tile scale k = 1, 2, ... while the
    tile's side (:meth:`ModelSize.decode_tile_at`) is below ``max(height, width)``: its tiles per
    frame and ``per_pixel`` bytes times the pixels of one tile (clipped to the frame); empty
    where the VAE has no tiled decode (``size.decode_tile`` 0)."""
    out: list[DecodeTile] = []
    while size.decode_tile and (not out or (len(out) + 1) * size.decode_tile < max(height, width)):
        scale = len(out) + 1
        side, stride = size.decode_tile_at(scale)
        tiles = -(-height // stride) * -(-width // stride)
        out.append(DecodeTile(scale, side, tiles, per_pixel * min(side, height) * min(side, width)))
    return tuple(out)


def text_encoding_bytes(info: CheckpointInfo, prompts: int, tokens: int, name: str = "text_encoder") -> int:
    """The activations of text encoder ``name`` on ``prompts`` prompts of ``tokens`` tokens, as
    :func:`run_memory_estimate` counts a denoising step (float32: ``STEP_BUFFERS x prompts x
    tokens x (4 D + ffn)`` plus the blockwise attention's accumulators), from its config
    (``hidden_size`` / ``d_model``, ``intermediate_size`` / ``d_ff``, a multimodal model's
    ``text_config``; T5's relative position bias, ``L x L`` per head); 0 where the checkpoint has
    no such component, no config for it, or one that gives no width."""
    from vidax.nn.attention import DEFAULT_BLOCK_SIZE

    if not info.checkpoint.has(name):
        return 0
    try:
        config = info.checkpoint.config(name)
    except CheckpointError:  # a component folder without a config: loading it says what is wrong
        return 0
    config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config

    def first(*keys):
        return next((v for v in map(config.get, keys) if isinstance(v, int) and not isinstance(v, bool) and v > 0), 0)

    width, ffn, heads = (
        first("hidden_size", "d_model"),
        first("intermediate_size", "d_ff"),
        first("num_attention_heads", "num_heads"),
    )
    if not width:
        return 0
    attention = prompts * max(1, heads) * tokens * 2 * min(tokens, DEFAULT_BLOCK_SIZE) * 4
    if first("relative_attention_num_buckets"):
        # T5's relative position bias: float32 (heads, L, L), from int64 (L, L) bucket ids.
        attention += tokens * tokens * (4 * max(1, heads) + 8)
    return STEP_BUFFERS * prompts * tokens * (4 * width + ffn) * 4 + attention


def run_size_estimate(size: ModelSize, batch: int, estimate: MemoryEstimate) -> str:
    """One line of rough float32 numbers of a run, for the warning of a very large call: its
    peak memory by part (``estimate``, :func:`run_memory_estimate`'s), and ``4 x batch x
    tokens^2 x D x num_layers`` FLOPs of attention per step (QK^T and PV).

    Args: ``size`` and ``batch`` as :func:`run_memory_estimate`'s.
    """
    flops = 4 * batch * size.tokens**2 * size.hidden_size * size.num_layers
    return (
        f"{size.tokens} tokens per sample x batch {batch}: peak memory {estimate.describe()}, "
        f"~{flops / 1e12:.0f} TFLOP of attention per step"
    )


def available_memory() -> tuple[int, str]:
    """(bytes a call can still use, what they are): the least free ``bytes_limit -
    bytes_in_use`` over this process's devices where the backend reports it (GPU, TPU), else the
    host's available RAM (``psutil``; CPU, where device arrays live in host memory).
    ``VIDAX_DEVICE_MEMORY`` pretends a device of that size (less the arrays alive in device
    memory; :func:`pretend_device_memory`)."""
    from vidax.stats import device_memory_stats, live_array_bytes

    pretend = pretend_device_memory()
    if pretend is not None:
        return pretend - live_array_bytes(), f"free device memory ({DEVICE_MEMORY_ENV})"
    free = [
        int(s["bytes_limit"]) - int(s.get("bytes_in_use", 0)) for s in device_memory_stats() if s.get("bytes_limit")
    ]
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
    a single-file transformer, ``transformer=FILE``, counted from its file as it loads; in
    random-weights mode from the configs, :class:`~vidax.weights.random_weights.ConfigReader`).
    A component whose files cannot be read counts 0 here: loading it reports what is wrong."""
    from vidax.pipelines.staging import component_bytes

    total = 0
    for name in checkpoint.index if names is None else names:
        if name.startswith("_") or not checkpoint.has(name):
            continue
        folder = checkpoint.folders.get(name) or os.path.join(checkpoint.root, name)
        spec = registry().find_component(checkpoint.class_of(name))
        if checkpoint.random_weights and spec is not None and spec.model is not None:
            weights = checkpoint.weights if name.startswith("transformer") else None
            total += component_bytes(
                weights_source(checkpoint, name, spec), jnp.float32 if name == "vae" else dtype, weights=weights
            )["total"]
            continue
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
                total += component_bytes(
                    checkpoint.reader(name), jnp.float32 if name == "vae" else dtype, weights=weights
                )["total"]
            except VidaxError:
                pass
    return total


def warn_if_large(cls: type, info: CheckpointInfo, call: Call) -> None:
    """Log a WARNING with :func:`run_size_estimate` when the call's transformer sequence (the
    pipeline class ``cls``'s ``model_size``) has more than :data:`LARGE_RUN_FACTOR` times the
    tokens of the checkpoint's default size."""
    size = cls.family.model_size(info, call)
    d = info.defaults
    base = cls.family.model_size(
        info,
        dataclasses.replace(
            call, height=d.height, width=d.width, num_frames=cls.family.resolve_num_frames(info, d.num_frames)
        ),
    )
    if size is None or base is None or size.tokens <= LARGE_RUN_FACTOR * base.tokens:
        return
    batch = call.batch * (2 if call.do_cfg else 1)
    elements = int(np.prod(cls.family.latent_shape(info, call)))
    est = run_memory_estimate(size, batch, elements, call.num_frames, call.height, call.width, videos=call.batch)
    logger.warning(
        "%s is far beyond this checkpoint's default %dx%d, %d frames (%.0fx its tokens): %s",
        size_words(call),
        d.height,
        d.width,
        d.num_frames,
        size.tokens / base.tokens,
        run_size_estimate(size, batch, est),
    )


def memory_estimate(
    pipeline: type,
    info: CheckpointInfo,
    call: Call,
    *,
    dtype: Any = "float32",
    weights: str = "loaded",
    flash: bool = False,
    platform: str | None = None,
) -> MemoryEstimate | None:
    """Peak memory of ``call`` on the pipeline class ``pipeline`` (:func:`run_memory_estimate`;
    None where the family gives no ``model_size``), from configs and safetensors headers only.

    Args:
        weights: which parameters to count: ``"loaded"`` none (already in memory), ``"all"``
            every component's, ``"transformers"`` the denoising transformers' only.
        flash: attention runs a fused kernel that keeps its tiles on chip (:func:`run_memory_estimate`).
        platform: the device platform whose :func:`calibration` counts the activations
            (None: this process's).
    """
    size = pipeline.family.model_size(info, call)
    if size is None:
        return None
    dtype = parse_dtype(dtype)
    names = {"loaded": (), "transformers": tuple(info.transformers), "all": None}[weights]
    est = run_memory_estimate(
        size,
        size.rows(call),
        int(np.prod(pipeline.family.latent_shape(info, call))),
        call.num_frames,
        call.height,
        call.width,
        videos=call.batch,
        dtype_bytes=np.dtype(dtype).itemsize,
        weights=checkpoint_weight_bytes(info.checkpoint, dtype, names) if names != () else 0,
        decoded=call.output_type != "latent",
        flash=flash,
        calibration=calibration(platform),
    )
    # max_sequence_length has no bound but memory (rotary and relative positions, as the references)
    prompts = call.batch * (2 if call.do_cfg else 1)
    return dataclasses.replace(est, text=text_encoding_bytes(info, prompts, call.max_sequence_length))


def check_memory(
    pipeline: type,
    info: CheckpointInfo,
    call: Call,
    *,
    dtype: Any = "float32",
    loaded: bool = True,
    refuse: bool = True,
    devices: int = 1,
    offload: Any = None,
    available: tuple[int, str] | None = None,
    vae_tiling: bool = False,
    anyway: Arg | None = _ANYWAY,
    also: str | None = None,
) -> MemoryEstimate | None:
    """Refuse ``call`` on the pipeline class ``pipeline`` when its :func:`memory_estimate` exceeds the memory there is
    (:func:`available_memory`, or ``available``: (bytes, what they are)), naming the
    estimate and the largest height x width that fits; with ``refuse=False`` log that as a
    WARNING and go on. A call that fits but is far beyond the checkpoint's default size gets
    :func:`warn_if_large`'s WARNING.

    Where the VAE can decode in tiles and the untiled decode does not fit, the tiled decode
    is counted: the estimate returned then has ``vae_tiling`` set (the caller turns tiling
    on, ``enable_tiled_decode(scale=vae_tile_scale)``: the fewest tiles per frame that fit,
    :meth:`MemoryEstimate.largest_tiles`) and a WARNING line says so.

    Args:
        loaded: the weights are in memory already (else they are counted: all of them in host
            RAM; on a device with its own memory the transformers', none with ``offload``).
        devices: devices of the mesh; a device with its own memory holds 1/devices of it.
        vae_tiling: tiling is on already (the tiled decode is counted from the start).
        anyway: the setting that runs a refused call anyway, named at the end of the error
            (None: none, where the caller cannot change it: a server's request).
        also: what else to try, after "or try fewer num_frames" (where the caller can
            change that); None: a load's ``", bfloat16, offloading"`` (bfloat16 left out
            where ``dtype`` is 16-bit already). Where the weights alone are more than there
            is, neither the size nor the frames are offered: only these.

    Raises:
        OutOfMemoryError: the estimate is more than the memory there is (and ``refuse``).
    """
    free, what = available or available_memory()
    if also is None:
        also = ", offloading" if jnp.dtype(dtype).itemsize == 2 else ", bfloat16, offloading"
    host = not what.startswith("free device memory")
    weights = "loaded" if loaded else "all" if host else "loaded" if offload is not None else "transformers"
    share = 1 if host else max(1, devices)

    def need(c: Call) -> MemoryEstimate | None:
        est = memory_estimate(pipeline, info, c, dtype=dtype, weights=weights)
        if est is None or (est.total / share <= free and not vae_tiling):
            return est
        if vae_tiling:  # asked for: the tiles as set (the reference's sizes, or the caller's)
            return est.with_tiling() or est
        return est.largest_tiles(lambda e: e.total / share <= free) or est

    est = need(call)
    if est is None or est.total / share <= free:
        if est is not None and est.vae_tiling and not vae_tiling:
            logger.warning(
                "%s: an untiled VAE decode would not fit in the %s of %s; decoding in tiles (peak %s)",
                size_words(call),
                _gib(free),
                what,
                est.describe(),
            )
        warn_if_large(pipeline, info, call)
        return est
    per = "" if share == 1 else f" ({_gib(est.total / share)} per device of {share})"
    needs = f"needs {est.describe()}{per}, more than the {_gib(free)} of {what}"
    if est.weights / share > free and also:  # no size makes room: the weights must shrink or move
        msg = _weights_too_large(call, needs, dtype, host)
    else:
        msg = _what_fits(info, call, needs, lambda c: need(c).total / share <= free, est, also)
    if refuse:
        raise OutOfMemoryError(msg, *((" (to run it anyway: ", anyway, ")") if anyway is not None else ()))
    logger.warning("%s; running it anyway", msg)
    return est


def _weights_too_large(call: Call, needs: str, dtype: Any, host: bool) -> Message:
    """The refusal of a call whose weights alone are more than the memory: what shrinks them
    (bfloat16 where the load is wider, 8-bit kernels) or moves them (offloading, where the
    memory short is a device's)."""
    smaller = (Arg("dtype", "bfloat16"), ", ") if jnp.dtype(dtype).itemsize > 2 else ()
    return Message(
        size_words(call),
        f" {needs}; the weights alone are more than that: try ",
        *smaller,
        Arg("weight_dtype", "int8"),
        " (8-bit transformer kernels)",
        # offloaded weights wait in host memory: no help where the host's memory is what is short
        "" if host else ", offloading",
    )


def _what_fits(info: CheckpointInfo, call: Call, needs: str, fits: Any, est: MemoryEstimate, also: str) -> Message:
    """The refusal of a call too large for the memory, naming what fits (``fits(call)``): the
    longest ``max_sequence_length`` where the text encoding is the peak, else the largest
    height x width (the size multiple's steps, the aspect kept) at the same frames."""
    cfg = f" (batch {call.batch}{', CFG doubles it' if call.do_cfg else ''}) {needs}"
    if est.text > max(est.step, est.decode):  # the prompts' tokens, not the video's size, are the peak
        low, high = 0, call.max_sequence_length
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if fits(dataclasses.replace(call, max_sequence_length=mid)) else (low, mid)
        longest = Message("; ", Arg("max_sequence_length", low), " fits") if low else Message()
        return Message(
            Arg("max_sequence_length", call.max_sequence_length),
            cfg,
            "; give a smaller ",
            Arg("max_sequence_length"),
            longest,
        )
    mh, mw = info.size_multiple
    smaller = None
    for h in range(call.height - mh, 0, -mh):
        w = max(mw, round(call.width * h / call.height / mw) * mw)
        if fits(dataclasses.replace(call, height=h, width=w)):
            smaller = Message(Arg("height", h), ", ", Arg("width", w), " fits at ", Arg("num_frames", call.num_frames))
            break
    return Message(
        size_words(call),
        cfg,
        ": ",
        smaller or "no size fits at these frames",
        "; or try fewer ",
        Arg("num_frames"),
        also,
    )
