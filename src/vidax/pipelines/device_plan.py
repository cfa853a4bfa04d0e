"""What a run needs on a device with a memory limit, chosen before any weight is read.

:func:`choose` takes the parameter bytes of every component (:func:`parameter_sizes`: from the
safetensors headers, or from the configs' abstract shapes where a folder has no weights) and
the call's activations (:func:`~vidax.pipelines.memory.memory_estimate`), and
picks, in this order, the least that makes every stage (text encoding, the denoising steps, the
VAE decode) fit in the device's memory:

1. nothing: every component resident, the VAE decoding whole;
2. the text encoders staged (on the device only while they encode: run first, then freed);
3. the VAE decoding in tiles (where it has a tiled decode; once the rest is chosen, the tile grown
   to the fewest tiles per frame that still fits: ``enable_tiled_decode(scale=k)``);
4. the VAE (and the sound's decoders) staged;
5. the transformer's blocks streamed from host memory, the largest chunk that fits;
   then whatever of 2 and 4 is no longer needed is undone.

An explicit setting wins over each of these (``offload=`` / ``--offload-blocks N``, the
``keep_*`` fields / ``--keep-*`` / ``--offload-*`` flags, ``--vae-tiling``). Host memory must
hold what waits there (streamed blocks, staged components, the expert not in use). What fits
in neither is refused before any weight is read, naming the settings that would make it fit
(:func:`remedies`). :meth:`DevicePlan.line` says what was chosen and why, in one line.

The device's memory is the smallest ``bytes_limit`` of ``device.memory_stats()`` (GPU, TPU);
for planning and tests, ``VIDAX_DEVICE_MEMORY`` (``"15.7GiB"``, ``"512MiB"``, bytes) pretends
a device of that size on any backend, the CPU's included (:func:`pretend_device_memory`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from vidax.errors import CheckpointError
from vidax.pipelines.memory import (  # the pretend device size lives with the memory checks, which read it too
    DEVICE_MEMORY_ENV,
    RUNTIME_OVERHEAD_BYTES,
    DecodeTile,
    MemoryEstimate,
    memory_estimate,
    pretend_device_memory,
)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Parameter bytes of a pipeline's components as they load (per device of the mesh's tensor axis).

    Attributes:
        transformers: name -> (all bytes, bytes of the stacked blocks, layers).
        text_encoders, decoders: name -> bytes of the stageable text encoders / decoders (VAE,
            the sound's audio decoder and vocoder).
        other: bytes of every other component with weights (connectors, image encoders), resident.
        source: ``"headers"`` (the safetensors files) or ``"configs"`` (abstract shapes).
        text_stacks: text encoder whose layers can stream -> (bytes of its stacked layers, layers,
            chunks on the device at once: 2, the next one's copy beside this one's compute; a
            model of G interleaved stacks, Gemma 4's layer groups, holds one of each, G + 1).
    """

    transformers: Mapping[str, tuple[int, int, int]]
    text_encoders: Mapping[str, int]
    decoders: Mapping[str, int]
    other: int = 0
    source: str = "headers"
    text_stacks: Mapping[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)

    @property
    def layers(self) -> int:
        return max((layers for _, _, layers in self.transformers.values()), default=0)


@functools.lru_cache(maxsize=32)  # pure in its arguments; the families share their text encoders and VAEs
def _abstract_bytes(spec: Any, config: Any, dtype: Any, weights: str | None) -> tuple[int, int, int]:
    """(all bytes, block bytes, layers) of the model ``spec`` builds from ``config``, from its
    abstract shapes: floating parameters in ``dtype`` (the registry's float32 ones in float32),
    the 8-bit ``weights`` format's kernels as :func:`vidax.parallel.placement.per_device_bytes`;
    the blocks of a model without ``block_stacks`` are the stacks its ``stacked_paths`` names
    (a text encoder's layers)."""
    from flax import nnx

    from vidax.parallel.layer_streaming import stack_of
    from vidax.weights.loader import DtypePolicy, abstract_params

    def make():
        module = spec.model_class()(config, rngs=nnx.Rngs(0))
        if weights is not None:
            from vidax.nn.quant import quantize_structure

            module = quantize_structure(module, weights, spec.fp32())
        return module

    _, flat = abstract_params(make)
    policy = DtypePolicy(dtype, spec.fp32())
    stacks = spec.block_stacks or getattr(spec.model_class(), "stacked_paths", ())
    total = blocks = layers = 0
    for path, var in flat.items():
        sds = var.get_value()
        stored = not np.issubdtype(sds.dtype, np.floating) or sds.dtype.itemsize == 1 or path[-1] == "kernel_scale"
        n = int(np.prod(sds.shape)) * np.dtype(sds.dtype if stored else policy.dtype_for(path)).itemsize
        total += n
        if stack_of(path, stacks) is not None and sds.shape:
            blocks += n
            layers = max(layers, int(sds.shape[0]))
    return total, blocks, layers


def parameter_sizes(
    info: Any,
    pipeline: type,
    dtype: Any,
    vae_dtype: Any,
    text_encoder_dtype: Any,
    mesh: Any = None,
    weights: Any = "checkpoint",
) -> Sizes:
    """The :class:`Sizes` of the checkpoint ``info`` loaded by ``pipeline``: from the
    safetensors headers where every component with weights has them (no tensor is read), else
    from every component's abstract shapes (:func:`jax.eval_shape`: a folder of configs alone,
    e.g. ``reference_configs/``). The transformers and text encoders at ``dtype`` /
    ``text_encoder_dtype`` divided over the mesh's ``tensor`` axis, decoders at ``vae_dtype``;
    the transformers' kernels in the 8-bit format ``weights`` (``"checkpoint"``: the
    checkpoint's own, :func:`~vidax.pipelines.weight_formats.with_weights`)."""
    from vidax.parallel.mesh import TENSOR, axis_size
    from vidax.pipelines.staging import DECODERS, component_bytes
    from vidax.pipelines.weight_formats import transformer_source
    from vidax.registry import registry

    ckpt = info.checkpoint
    tp = axis_size(mesh, TENSOR)
    weighted = {}
    for name in ckpt.configs:
        spec = registry().find_component(ckpt.class_of(name)) if ckpt.has(name) else None
        if spec is not None and spec.model is not None:
            weighted[name] = spec

    def has_headers(name):
        if name in ckpt.files:
            return True
        folder = ckpt.folders.get(name) or os.path.join(ckpt.root, name)
        return os.path.isdir(folder) and any(f.endswith(".safetensors") for f in os.listdir(folder))

    from_headers = bool(weighted) and all(map(has_headers, weighted))
    transformers, encoders, decoders, other, text_stacks = {}, {}, {}, 0, {}
    for name, spec in weighted.items():
        is_decoder = name in DECODERS
        is_transformer = name in info.transformers
        at = vae_dtype if is_decoder else dtype if is_transformer else text_encoder_dtype
        fmt = (ckpt.weights if weights == "checkpoint" else weights) if is_transformer else None
        streams = name in pipeline.family.stageable and not is_decoder and streamable(spec)
        if from_headers:
            source = transformer_source(ckpt, name, spec) if is_transformer else ckpt.reader(name)
            prefixes = spec.block_stacks if is_transformer else _layer_prefixes(spec, ckpt, name) if streams else ()
            counted = component_bytes(source, at, prefixes, fmt)
            stacks = counted.get("stacks", {}).values()
            sizes = (counted["total"], sum(b for b, _ in stacks), max((n for _, n in stacks), default=0))
        else:
            try:
                config = ckpt.typed_config(name, spec.config_class())
            except CheckpointError:  # a component without a config file: counted 0 (loading it says what is wrong)
                continue
            try:
                sizes = _abstract_bytes(spec, config, at, fmt)
            except TypeError:  # a config that cannot be hashed (a list inside): counted uncached
                sizes = _abstract_bytes.__wrapped__(spec, config, at, fmt)
        split = 1 if is_decoder else tp
        if is_transformer:
            transformers[name] = tuple(int(s / split) if i < 2 else s for i, s in enumerate(sizes))
        elif is_decoder and name in pipeline.family.stageable:
            decoders[name] = sizes[0]
        elif name in pipeline.family.stageable:
            encoders[name] = int(sizes[0] / split)
            if streams and sizes[2]:
                groups = getattr(ckpt.typed_config(name, spec.config_class()), "layer_groups", None)
                layers = sizes[2] if from_headers or not groups else sum(map(len, groups))
                text_stacks[name] = (int(sizes[1] / split), layers, len(groups) + 1 if groups else 2)
        else:
            other += int(sizes[0] / split)
    return Sizes(transformers, encoders, decoders, other, "headers" if from_headers else "configs", text_stacks)


def streamable(spec: Any) -> bool:
    """Whether the text encoder of registry entry ``spec`` can stream its layers: it loads
    through the one component loader and its model names its ``stacked_paths``
    (:attr:`~vidax.parallel.offload.OffloadConfig.text_encoder_chunk`)."""
    model = spec.model_class() if spec.model is not None else None
    return spec.loader is None and bool(getattr(model, "stacked_paths", ()))


def _layer_prefixes(spec: Any, ckpt: Any, name: str) -> tuple[str, ...]:
    """The checkpoint key prefixes of text encoder ``name``'s stacked layers (its key rules'
    prefix before each stacked name, and ``layers``: a family renaming them counts the file's)."""
    from vidax.weights.safetensors_io import CheckpointReader

    rules = spec.rules(ckpt.typed_config(name, spec.config_class()), CheckpointReader(ckpt.folder(name)).keys())
    prefix = getattr(rules, "prefix", "") or ""
    return tuple(dict.fromkeys(prefix + s for s in (*rules.stacked, "layers")))


@dataclasses.dataclass(frozen=True)
class Activations:
    """Bytes of a call's largest temporaries per stage (from a :class:`MemoryEstimate`) and of
    its latents.

    Attributes:
        text, step: the text encoding's and one denoising step's activations.
        decode: one untiled VAE decode chunk; decode_tiled: one tile's (None: no tiled decode).
        latents: the latents and the step's output (float32).
        rows: the step's batch (prompts x videos x the CFG passes): ``step`` counts them all;
            layers running them ``micro_batch`` rows at a time need that share of it.
        decode_tiles: the tiled decode at each tile scale k, index k - 1
            (:attr:`MemoryEstimate.decode_tiles`; empty: only ``decode_tiled``, at scale 1).
    """

    text: int
    step: int
    decode: int
    decode_tiled: int | None
    latents: int
    rows: int = 1
    decode_tiles: tuple[DecodeTile, ...] = ()

    @classmethod
    def of(cls, est: MemoryEstimate, latents: int) -> Activations:
        return cls(est.text, est.step, est.decode, est.decode_tiled, latents, decode_tiles=est.decode_tiles)

    def tiled(self, scale: int) -> float | None:
        """One tile's decode chunk with tiles of ``scale`` (``decode_tiled`` where no scale is known)."""
        return self.decode_tiles[scale - 1].bytes if scale <= len(self.decode_tiles) else self.decode_tiled


@dataclasses.dataclass(frozen=True)
class StageMemory:
    """Estimated device bytes at the peak of each stage of a call.

    Attributes:
        text: text encoding (every resident weight, a staged text encoder while it runs, its activations).
        steps: a denoising step. decode: the VAE decode (a staged VAE while it runs).
    """

    text: int
    steps: int
    decode: int

    @property
    def peak(self) -> int:
        return max(self.text, self.steps, self.decode)

    def items(self) -> list[tuple[str, int]]:
        return [("text encoding", self.text), ("steps", self.steps), ("VAE decode", self.decode)]


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """What :func:`choose` picked for a device of ``device`` bytes.

    Attributes:
        device, host: the device's and the host's memory in bytes (host None: not checked).
        dtype: the transformer's dtype name (for :meth:`line`).
        chunk: blocks per streamed chunk (None: the transformer is resident).
        staged: stageable component -> True when it waits in host memory between uses.
        vae_tiling: the VAE decodes in tiles.
        vae_tile_scale: their scale (``enable_tiled_decode(scale=...)``): above 1 only where the
            tiling was chosen here and larger tiles fit. vae_tile_side: their side in pixels
            (0: not known).
        stages: the estimated peak of each stage (:class:`StageMemory`).
        host_bytes: what waits in host memory.
        sizes: the parameter bytes it was chosen from.
        chosen: what was decided here and not given (``"chunk"``, ``"staged"``, ``"vae_tiling"``,
            ``"micro_batch"``).
        fits: every stage fits in ``device`` and ``host_bytes`` in ``host``.
        micro_batch: rows of the step's batch each transformer layer runs at a time (None: all;
            :attr:`vidax.blocks.transformer.DiffusionTransformer.micro_batch`).
        rows: the step's batch.
        text_chunk: staged text encoder -> layers per chunk where its layers stream from its files
            while it encodes (``"text_chunk"`` in ``chosen`` where decided here), at most its
            layer count. asked_text_chunk: the layers per chunk asked for (None: not asked).
        free_transformer: the transformer's device weights wait in host memory while the text
            encoders and the VAE run (``"free_transformer"`` in ``chosen`` where decided here).
    """

    device: int
    host: int | None
    dtype: str
    chunk: int | None
    staged: Mapping[str, bool]
    vae_tiling: bool
    stages: StageMemory
    host_bytes: int
    sizes: Sizes
    chosen: frozenset = frozenset()
    fits: bool = True
    micro_batch: int | None = None
    rows: int = 1
    text_chunk: Mapping[str, int] = dataclasses.field(default_factory=dict)
    free_transformer: bool = False
    asked_text_chunk: int | None = None
    vae_tile_scale: int = 1
    vae_tile_side: int = 0
    weights: str | None = None

    def weight_words(self) -> str:
        """``"bfloat16"``, or ``"int8 kernels, the rest bfloat16"`` with 8-bit transformer kernels."""
        return f"{self.weights} kernels, the rest {self.dtype}" if self.weights else self.dtype

    def tile_words(self) -> str:
        """``"tiled, 512 px tiles"`` (``"tiled"`` where the side is not known; ``"whole"`` untiled)."""
        if not self.vae_tiling:
            return "whole"
        return f"tiled, {self.vae_tile_side} px tiles" if self.vae_tile_side else "tiled"

    def line(self, what: str = "device memory") -> str:
        """``plan: transformer streamed 4 blocks a chunk (...); VAE tiled, 512 px tiles; text encoder run first
        and freed; peaks text encoding X, steps Y, VAE decode Z of W GiB``."""
        sizes = self.sizes
        weights = sum(t for t, _, _ in sizes.transformers.values())
        parts = []
        if self.chunk is not None:
            given = "" if "chunk" in self.chosen else ", as asked"
            parts.append(
                f"transformer streamed {self.chunk} block{'s' * (self.chunk != 1)} a chunk "
                f"({_gib(weights)} in {self.weight_words()} with the rest > {_gib(self.device)} {what}{given})"
            )
        else:
            parts.append(f"transformer resident ({_gib(weights)} in {self.weight_words()})")
        if self.micro_batch is not None and self.micro_batch < self.rows:
            given = "" if "micro_batch" in self.chosen else ", as asked"
            parts.append(
                f"each layer runs the step's {self.rows} batch rows {self.micro_batch} at a time "
                f"(the CFG passes one after another{given})"
            )
        if self.free_transformer:
            given = "" if "free_transformer" in self.chosen else ", as asked"
            parts.append(f"transformer off the device while the text encoder and the VAE run{given}")
        if self.vae_tiling:
            parts.append(f"VAE {self.tile_words()}")
        encoders = [n for n in sizes.text_encoders if self.staged.get(n) and n not in self.text_chunk]
        decoders = [n for n in sizes.decoders if self.staged.get(n)]
        for n, c in self.text_chunk.items():
            given = (
                ""
                if "text_chunk" in self.chosen
                else ", as asked"
                if c == self.asked_text_chunk
                else f", all its layers: {self.asked_text_chunk} asked"
            )
            parts.append(
                f"{_names([n], 'text encoder')} streamed {c} layer{'s' * (c != 1)} a chunk from its files while it "
                f"encodes ({_gib(sizes.text_encoders[n])} in all{given})"
            )
        if encoders:
            parts.append(f"{_names(encoders, 'text encoder')} run first and freed (host memory between calls)")
        if decoders:
            parts.append(f"{_names(decoders, 'VAE')} on the device only to decode")
        peaks = ", ".join(f"{n} {_gib(b)}" for n, b in self.stages.items())
        return f"plan: {'; '.join(parts)}; estimated peaks {peaks} of {_gib(self.device)}" + (
            f", {_gib(self.host_bytes)} waiting in host memory" if self.host_bytes else ""
        )

    def offload_config(self, given: Any) -> Any:
        """The :class:`~vidax.parallel.offload.OffloadConfig` of this plan (``given``'s memory
        kind), or None where nothing is offloaded."""
        from vidax.parallel.offload import OffloadConfig
        from vidax.pipelines.staging import DECODERS

        if self.chunk is None and not any(self.staged.values()) and not self.free_transformer and given is None:
            return None
        kind = given.memory_kind if given is not None else "auto"
        te = not any(v for n, v in self.staged.items() if n not in DECODERS)
        vae = not any(v for n, v in self.staged.items() if n in DECODERS)
        return OffloadConfig(
            chunk=self.chunk,
            keep_text_encoder=te,
            keep_vae=vae,
            memory_kind=kind,
            keep_transformer=not self.free_transformer,
        )


def _names(names: list[str], word: str) -> str:
    return word if names in ([word.replace(" ", "_")], ["vae"]) else ", ".join(names)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def stage_memory(
    sizes: Sizes,
    act: Activations,
    chunk: int | None,
    staged: Mapping[str, bool],
    vae_tiling: int,
    offload_experts: bool = True,
    micro_batch: int | None = None,
    text_chunk: Mapping[str, int] | None = None,
    free_transformer: bool = False,
) -> tuple[StageMemory, int]:
    """(the device bytes of each stage, the bytes waiting in host memory) for this placement.

    Every stage holds the resident weights (the transformer's resident part: all of it, or its
    non-block weights plus two chunks; one expert of two where the other waits in host memory),
    the resident text encoders and decoders, the other components and
    :data:`~vidax.pipelines.memory.RUNTIME_OVERHEAD_BYTES`; the text encoding adds the staged
    text encoders and the text activations, a step its activations and the latents, the decode the
    staged decoders, one decode chunk (one tile's of scale ``vae_tiling`` where it is not 0 / False;
    True: scale 1) and the latents. A text encoder of ``text_chunk``
    (layers per chunk) counts its weights but its stacked layers plus the chunks it holds in the
    text encoding, and only those other weights in host memory (its layers are read from the
    files at each use). With ``free_transformer`` the text encoding and the decode hold none of a
    resident transformer's weights (they wait in host memory meanwhile, counted there).
    """
    on_device, waiting = [], 0
    for total, blocks, layers in sizes.transformers.values():
        if chunk is None or not layers:
            on_device.append(total)
        else:
            on_device.append(total - blocks + 2 * blocks // layers * min(chunk, layers))
            waiting += blocks
    if offload_experts and len(on_device) > 1:
        waiting += sum(on_device) - max(on_device)
        tr = max(on_device)
    else:
        tr = sum(on_device)
    te_staged = sum(b for n, b in sizes.text_encoders.items() if staged.get(n))
    te_text = te_waiting = te_staged
    for n, c in (text_chunk or {}).items():  # its layers stream: two chunks on the device, none in host memory
        stack, layers, held = sizes.text_stacks[n]
        te_text -= stack - held * stack // layers * min(c, layers)
        te_waiting -= stack
    dec_staged = sum(b for n, b in sizes.decoders.items() if staged.get(n))
    base = (
        tr
        + sum(sizes.text_encoders.values())
        - te_staged
        + sum(sizes.decoders.values())
        - dec_staged
        + sizes.other
        + RUNTIME_OVERHEAD_BYTES
    )
    decode = act.tiled(int(vae_tiling)) if vae_tiling and act.decode_tiled is not None else act.decode
    freed = tr if free_transformer and chunk is None else 0
    stages = StageMemory(
        text=base - freed + te_text + act.text,
        steps=base + act.step * min(micro_batch or act.rows, act.rows) // max(act.rows, 1) + act.latents,
        decode=base - freed + dec_staged + (decode + act.latents if act.decode else 0),
    )
    return stages, waiting + te_waiting + dec_staged + freed


def choose(
    sizes: Sizes,
    act: Activations,
    device: int,
    host: int | None = None,
    *,
    chunk: Any = None,
    keep: Mapping[str, bool | None] | None = None,
    vae_tiling: bool = False,
    offload_experts: bool = True,
    dtype: str = "float32",
    micro_batch: int | None = None,
    text_chunk: int | None = None,
) -> DevicePlan:
    """The least placement (module docstring) whose stages fit in ``device`` bytes and whose
    host part fits in ``host`` bytes (None: not checked); ``fits=False`` with everything the
    settings allow where none does.

    Args:
        chunk: blocks per chunk as given (``"all"``: every layer; None: decide).
        keep: stageable component -> True / False as given (None or missing: decide).
        vae_tiling: tiling asked for (else decided).
        micro_batch: rows each layer runs at a time as given (None: decide: the whole batch
            unless only parts of it fit, tried after streaming).
        text_chunk: layers per chunk of every text encoder whose layers can stream, as given
            (None: decide: streamed, the largest chunk that fits, where staging it is not enough).
    """
    p = _Placing(sizes, act, device, host, dict(keep or {}), offload_experts, micro_batch)
    layers = sizes.layers
    given_chunk = layers if chunk == "all" else None if chunk is None else min(int(chunk), layers or int(chunk))
    p.staged = {n: p.keep.get(n) is False for n in [*sizes.text_encoders, *sizes.decoders]}
    p.tiling, p.chunk = vae_tiling, given_chunk
    if text_chunk is not None:
        # capped at each encoder's layer count (as --offload-blocks at the blocks'), the line says so
        p.streams = {
            n: min(text_chunk, sizes.text_stacks[n][1]) for n in sizes.text_stacks if p.keep.get(n) is not True
        }
        p.staged.update(dict.fromkeys(p.streams, True))
    if not p.fits():
        p.stage(sizes.text_encoders)
    p.free = p.keep.get("transformer") is False
    if not p.fits() and p.keep.get("transformer") is None and given_chunk is None:
        p.free_transformer()
    if not p.fits() and p.measure()[0].decode > device:
        p.tile()
    if not p.fits():
        p.stage(sizes.decoders)
    if not p.fits() and given_chunk is None and layers > 1:
        p.pick_chunk()
    if not p.fits() and text_chunk is None and p.stream_text() and "chunk" in p.chosen:
        p.pick_chunk()  # the text encoder's room no longer bounds the blocks
    if not p.fits() and micro_batch is None and act.rows > 1:
        p.split_batch()
    p.settle()
    p.grow_tiles()
    stages, waiting = p.measure()
    chosen = p.chosen if any(p.staged.values()) else p.chosen - {"staged"}
    return DevicePlan(
        device=device,
        host=host,
        dtype=dtype,
        chunk=p.chunk,
        staged=p.staged,
        vae_tiling=p.tiling,
        stages=stages,
        host_bytes=waiting,
        sizes=sizes,
        chosen=frozenset(chosen if p.streams else chosen - {"text_chunk"}),
        fits=p.fits(),
        micro_batch=p.micro,
        rows=act.rows,
        text_chunk=p.streams,
        free_transformer=p.free,
        asked_text_chunk=text_chunk,
        vae_tile_scale=p.scale if p.tiling else 1,
        vae_tile_side=act.decode_tiles[p.scale - 1].side if p.tiling and act.decode_tiles else 0,
    )


@dataclasses.dataclass
class _Placing:
    """The placement :func:`choose` is building: what is streamed, staged and tiled so far."""

    sizes: Sizes
    act: Activations
    device: int
    host: int | None
    keep: dict
    offload_experts: bool
    micro: int | None
    staged: dict = dataclasses.field(default_factory=dict)
    streams: dict = dataclasses.field(default_factory=dict)
    tiling: bool = False
    chunk: int | None = None
    chosen: set = dataclasses.field(default_factory=set)
    free: bool = False
    scale: int = 1

    def measure(self, **changes: Any) -> tuple[StageMemory, int]:
        at = {
            "staged": self.staged,
            "streams": self.streams,
            "chunk": self.chunk,
            "free": self.free,
            "tiling": self.tiling,
            "scale": self.scale,
            **changes,
        }
        return stage_memory(
            self.sizes,
            self.act,
            at["chunk"],
            at["staged"],
            at["tiling"] and at["scale"],
            self.offload_experts,
            self.micro,
            at["streams"],
            at["free"],
        )

    def fits(self, **changes: Any) -> bool:
        stages, waiting = self.measure(**changes)
        return stages.peak <= self.device and (self.host is None or waiting <= self.host)

    def stage(self, names) -> None:
        free = [n for n in names if self.keep.get(n) is None and not self.staged[n]]
        if free:
            self.staged = {**self.staged, **dict.fromkeys(free, True)}
            self.chosen.add("staged")

    def free_transformer(self) -> None:
        """Move a resident transformer to host memory while the text encoders and the VAE run
        where its steps fit and that makes their stages fit: a copy each way, cheaper than
        streamed blocks or tiles (slower, and a video that differs from the untiled decode's)."""
        stages, freed = self.measure()[0], self.measure(free=True)[0]
        if stages.steps <= self.device and freed.text <= self.device and self.device < max(stages.text, stages.decode):
            self.free = True
            self.chosen.add("free_transformer")

    def tile(self) -> None:
        """Decode the VAE in tiles (where it has a tiled decode)."""
        if not self.tiling and self.act.decode_tiled is not None:
            self.tiling = True
            self.chosen.add("vae_tiling")

    def grow_tiles(self) -> None:
        """Where tiling was chosen here (not asked for) and the placement fits: the tile scale of
        the fewest tiles per frame that still fits (ties: the smaller tile; fewer decoder calls,
        less overlap decoded twice, fewer seams)."""
        if "vae_tiling" not in self.chosen or not self.fits():
            return
        fitting = [t for t in self.act.decode_tiles if self.fits(scale=t.scale)]
        if fitting:
            self.scale = min(fitting, key=lambda t: (t.tiles, t.scale)).scale

    def split_batch(self) -> None:
        """Run each layer on the step's batch in parts: the largest part that fits."""
        for rows in range(self.act.rows // 2, 0, -1):
            self.micro = rows
            if self.fits():
                self.chosen.add("micro_batch")
                return
        self.micro = None

    def settle(self) -> None:
        """Undo what streaming made unneeded (staging, tiling) while it still fits, and the
        transformer's moves where they are not needed or the blocks stream (their chunks leave
        the device anyway)."""
        if self.chunk is not None and self.fits():
            self.undo(self.sizes.decoders, self.sizes.text_encoders)
            if "vae_tiling" in self.chosen and self.fits(tiling=False):  # the whole frame again
                self.tiling = False
                self.chosen.discard("vae_tiling")
        if "free_transformer" in self.chosen and (self.chunk is not None or self.fits(free=False)):
            self.free = False
            self.chosen.discard("free_transformer")
            if not self.fits():
                self.tile()

    def pick_chunk(self) -> None:
        """The most blocks a chunk that fit (1 where none does)."""
        self.chunk = next(n for n in range(max(1, self.sizes.layers // 2), 0, -1) if self.fits(chunk=n) or n == 1)
        self.chosen.add("chunk")

    def stream_text(self) -> bool:
        """Stream the staged text encoders' layers, the largest first, until the placement fits,
        each the most layers a chunk whose text encoding fits (1 where none does)."""
        names = sorted(
            (n for n in self.sizes.text_stacks if self.staged.get(n) and n not in self.streams),
            key=lambda n: -self.sizes.text_encoders[n],
        )
        for name in names:
            layers = self.sizes.text_stacks[name][1]
            for c in range(max(1, layers // 2), 0, -1):
                streams = {**self.streams, name: c}
                if self.measure(streams=streams)[0].text <= self.device or c == 1:
                    self.streams = streams
                    break
            self.chosen.add("text_chunk")
            if self.fits():
                break
        return bool(names)

    def undo(self, *groups) -> None:
        """Undo the streaming of text encoders, then the staging of each group, while it still fits."""
        plain = {n: c for n, c in self.streams.items() if "text_chunk" not in self.chosen}
        if self.streams != plain and self.fits(streams=plain):
            self.streams = plain
        for names in groups:
            undo = {n: False for n in names if self.keep.get(n) is None and self.staged[n] and n not in self.streams}
            if undo and self.fits(staged={**self.staged, **undo}):
                self.staged = {**self.staged, **undo}


def device_limit() -> tuple[int, str] | None:
    """(bytes, what they are) of the device memory a run is planned for: ``VIDAX_DEVICE_MEMORY``
    where set, else the smallest ``bytes_limit`` the devices report; None where neither (CPU).

    Raises:
        SetupError: ``VIDAX_DEVICE_MEMORY`` is not a size, or one below
            :data:`~vidax.pipelines.memory.RUNTIME_OVERHEAD_BYTES` (what every run needs beyond its
            arrays: no run fits), naming the variable, its value and what is valid.
    """
    from vidax.errors import SetupError
    from vidax.pipelines.staging import device_memory_limit

    pretend = pretend_device_memory()
    if pretend is not None and pretend < RUNTIME_OVERHEAD_BYTES:  # "1e3": 1000 bytes, not a device
        raise SetupError(
            f"{DEVICE_MEMORY_ENV}={os.environ.get(DEVICE_MEMORY_ENV, '').strip()!r} is {pretend:,} bytes, less than "
            f"the {RUNTIME_OVERHEAD_BYTES // 2**20} MiB every run needs beyond its arrays (XLA's compiles and "
            "runtime); give a device size with its unit (e.g. 15.7GiB, 512MiB), or unset it for the device's own"
        )
    if pretend is not None:
        return pretend, f"device memory ({DEVICE_MEMORY_ENV})"
    limit = device_memory_limit()
    return None if limit is None else (limit, "device memory")


#: Host RAM a run needs beyond the weights that wait there (Python and JAX, the compiler, the
#: loader's read-ahead, the decoded video): at least this much is kept free, by the device's
#: platform. On the v5e machine the process took 7-11 GiB beyond the 28.6 GiB waiting of
#: Wan2.1-14B 480p (its host's available RAM 10.6 GiB from the text encoding on, 5.7 GiB in the
#: decode's compiles, of 45 GiB), where a plan of 37.2 GiB waiting on 40 GiB had been killed.
HOST_RESERVE_BYTES = {"cpu": 4 * 2**30, "tpu": 11 * 2**30}
#: ... or this fraction of the host's RAM, whichever is more.
HOST_RESERVE_FRACTION = 0.1


def host_limit(available: int | None = None, total: int | None = None, platform: str | None = None) -> int:
    """Bytes of host RAM weights may wait in: ``available`` (default: what ``psutil`` says is
    available now) less :data:`HOST_RESERVE_BYTES` of the device's ``platform`` (default: this
    process's; the CPU's where it has none) or :data:`HOST_RESERVE_FRACTION` of ``total``
    (default: the host's RAM), whichever is more."""
    import psutil

    if platform is None:
        from vidax.nn.attention import backend

        platform = backend()
    memory = psutil.virtual_memory()
    available = int(memory.available if available is None else available)
    total = int(memory.total if total is None else total)
    reserve = HOST_RESERVE_BYTES.get(platform, HOST_RESERVE_BYTES["cpu"])
    return max(0, available - max(reserve, int(HOST_RESERVE_FRACTION * total)))


def plan_device(
    plan: Any,
    call: Any,
    device: int,
    host: int | None,
    *,
    asked: Any = None,
    vae_tiling: bool = False,
    dtype: Any = None,
    weights: Any = "checkpoint",
    sizes: Sizes | None = None,
    platform: str | None = None,
    micro_batch: int | None = None,
) -> DevicePlan:
    """:func:`choose` for ``call`` on the checkpoint and placement of ``plan``
    (:class:`~vidax.pipelines.plan.Plan`), with what the user ``asked``
    (:class:`~vidax.parallel.offload.OffloadConfig` or None) and ``vae_tiling`` winning;
    ``dtype`` / ``weights`` in place of the plan's (to find what would fit); ``sizes`` to reuse;
    ``platform`` (``"tpu"``, ``"gpu"``, ``"cpu"``; None: this process's) decides whether attention
    counts a fused kernel's footprint (TPU, GPU) or the blockwise accumulators (CPU), and whose
    :func:`~vidax.pipelines.memory.calibration` counts the activations."""
    from vidax.nn.inputs import parse_dtype
    from vidax.pipelines.staging import DECODERS

    cls, info = plan.pipeline, plan.info
    dtype = parse_dtype(plan.dtype if dtype is None else dtype)
    if sizes is None:
        options = plan.options
        sizes = parameter_sizes(
            info,
            cls,
            dtype,
            parse_dtype(options.get("vae_dtype", "float32")),
            parse_dtype(options.get("text_encoder_dtype") or dtype),
            plan.mesh,
            weights,
        )
    from vidax.nn.attention import backend

    platform = platform or backend()
    est = memory_estimate(
        cls, info, call, dtype=dtype, weights="loaded", flash=platform in ("tpu", "gpu"), platform=platform
    )
    share = 1 if plan.mesh is None else plan.mesh.size
    latents = int(np.prod(cls.family.latent_shape(info, call))) * 4 * 2
    act = Activations(
        est.text // share,
        est.step // share,
        est.decode,
        est.decode_tiled,
        latents,
        rows=int(getattr(call, "batch", 1)) * (2 if getattr(call, "do_cfg", False) else 1),
        decode_tiles=est.decode_tiles,
    )
    keep = {}
    if asked is not None:
        keep = {n: asked.keep_vae if n in DECODERS else asked.keep_text_encoder for n in cls.family.stageable}
        keep["transformer"] = asked.keep_transformer
    dp = choose(
        sizes,
        act,
        device,
        host,
        chunk=None if asked is None else asked.chunk,
        keep=keep,
        vae_tiling=vae_tiling,
        offload_experts=plan.offload_experts,
        dtype=np.dtype(dtype).name,
        micro_batch=micro_batch,
        text_chunk=None if asked is None else asked.text_encoder_chunk,
    )
    return dataclasses.replace(dp, weights=plan.checkpoint.weights if weights == "checkpoint" else weights)


def remedies(
    plan: Any, call: Any, dp: DevicePlan, *, asked: Any = None, vae_tiling: bool = False, platform: str | None = None
) -> list:
    """The settings that would make ``call`` fit where ``dp`` does not, each as a message part
    (:class:`~vidax.errors.Arg`, so each front door spells its own), each offered only where the
    run re-planned with it fits: bfloat16, 8-bit transformer kernels (not for random weights,
    which take no weight format; with bfloat16 named where float32 with them does not fit), fewer blocks a chunk than asked, the text encoder not kept resident or streamed as
    asked, the largest height x width that fits (``platform``: as :func:`plan_device`)."""
    from vidax.errors import Arg, Message

    device, host = dp.device, dp.host
    out = []

    def fits(asked=asked, **kw):
        return plan_device(plan, call, device, host, asked=asked, vae_tiling=vae_tiling, platform=platform, **kw).fits

    if dp.dtype == "float32" and fits(dtype="bfloat16"):
        out.append(Arg("dtype", "bfloat16"))
    # 8-bit kernels where none are asked for yet, with bfloat16 named as its own argument where
    # the plan's float32 needs it too
    if plan.checkpoint.weights is None:
        if fits(weights="int8"):
            out.append(Message(Arg("weight_dtype", "int8"), " (8-bit transformer kernels)"))
        elif dp.dtype == "float32" and fits(weights="int8", dtype="bfloat16"):
            out.append(
                Message(Arg("weight_dtype", "int8"), " (8-bit transformer kernels) with ", Arg("dtype", "bfloat16"))
            )
    if asked is not None and asked.chunk is not None and fits(asked=dataclasses.replace(asked, chunk=None)):
        out.append(Message("no ", Arg("offload_blocks", python="offload="), " (vidax picks a chunk that fits)"))
    free_text = dict(keep_text_encoder=None, text_encoder_chunk=None)
    if (
        asked is not None
        and (asked.keep_text_encoder or asked.text_encoder_chunk)
        and fits(asked=dataclasses.replace(asked, **free_text))
    ):
        flag = "keep_text_encoder" if asked.keep_text_encoder else "offload_text_encoder_layers"
        out.append(
            Message(
                "no ",
                Arg(
                    flag,
                    python=f"offload=OffloadConfig({'keep_text_encoder' if asked.keep_text_encoder else 'text_encoder_chunk'}=...)",
                ),
                " (vidax streams the text encoder's layers where it does not fit)",
            )
        )
    mh, mw = plan.info.size_multiple
    for h in range(call.height - mh, 0, -mh):
        w = max(mw, round(call.width * h / call.height / mw) * mw)
        smaller = dataclasses.replace(call, height=h, width=w)
        if plan_device(
            plan, smaller, device, host, asked=asked, vae_tiling=vae_tiling, sizes=dp.sizes, platform=platform
        ).fits:
            out.append(Message(Arg("height", h), ", ", Arg("width", w)))
            break
    return out


def refusal(plan: Any, call: Any, dp: DevicePlan, what: str, **kw: Any) -> Any:
    """The :class:`~vidax.errors.Message` of a call that does not fit even with everything
    streamed, staged and tiled that the settings allow: which stage needs what, and
    :func:`remedies` (or that no setting makes it fit)."""
    from vidax.errors import Message, joined
    from vidax.pipelines.memory import size_words

    over = [f"{n} ~{_gib(b)}" for n, b in dp.stages.items() if b > dp.device]
    host = (
        f"; {_gib(dp.host_bytes)} must wait in host memory, more than its {_gib(dp.host)}"
        if dp.host is not None and dp.host_bytes > dp.host
        else ""
    )
    biggest = max(
        [(b, n) for n, (b, _, _) in dp.sizes.transformers.items()]
        + [(b, n) for n, b in {**dp.sizes.text_encoders, **dp.sizes.decoders}.items()]
    )
    fixes = remedies(plan, call, dp, **kw)
    return Message(
        size_words(call),
        f" does not fit on one device of {_gib(dp.device)} {what} even "
        + (f"with the transformer streamed {dp.chunk} block{'s' * (dp.chunk != 1)} a chunk" if dp.chunk else "")
        + (", " if dp.chunk and any(dp.staged.values()) else "")
        + (f"with {', '.join(n for n, s in dp.staged.items() if s)} staged" if any(dp.staged.values()) else "")
        + "".join(f", {n}'s layers streamed {c} a chunk" for n, c in dp.text_chunk.items())
        + (", the VAE tiled" if dp.vae_tiling else "")
        + ": "
        + (", ".join(over) or "every stage fits")
        + host
        + f" (largest component {biggest[1]}, {_gib(biggest[0])} in {dp.dtype})",
        *(("; it fits with ", *joined(fixes, " or ")) if fixes else ("; no setting vidax has makes it fit",)),
    )
