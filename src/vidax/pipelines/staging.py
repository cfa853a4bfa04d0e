"""Staged components: a text encoder or VAE that waits in host memory and is on the device only
while it runs.

A staged component is loaded straight from its files into host memory (``pinned_host`` where the
backend has it, each tensor with the sharding it will have on the device). :meth:`Staging.on_device`
copies its parameters to the device for one use (prompt encoding; image encoding and decoding
for the VAE), swaps them into the module, and afterwards swaps the host copies back and deletes
the device copies explicitly, so nothing (no cached closure, no stale reference) keeps them in
device memory during sampling.

Whether a component is staged (:func:`plan_staging`): an explicit ``keep_*`` of the
:class:`~vidax.parallel.offload.OffloadConfig` wins; otherwise (``None``, the default) a
component stays resident unless the device reports a memory limit (``memory_stats()
["bytes_limit"]``, GPU and TPU) and the parameters meant to stay on it (the transformer's
resident part, the text encoder, the VAE: sizes read from the checkpoint headers, at the run's
dtypes, per device) exceed :data:`RESIDENT_FRACTION` of that limit; then the text encoder (used
once per call) is staged first and the VAE only if that is not enough. The rest of the memory is
left to activations. CPU backends report no limit, so everything stays resident there unless
asked otherwise. Without a host memory kind nothing can be staged (a warning says so).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
from flax import nnx

from vidax.nn.gguf import BLOCKS as GGUF_BLOCKS
from vidax.nn.gguf import padded_stack_bytes
from vidax.nn.kernels import with_layout_of
from vidax.parallel.mesh import TENSOR, axis_size
from vidax.parallel.offload import OffloadConfig, device_memory_kind, host_memory_kind
from vidax.stats import device_memory_stats
from vidax.weights.safetensors_io import CheckpointReader

logger = logging.getLogger("vidax.pipeline")

#: At most this fraction of a device's memory limit goes to resident parameters by default.
RESIDENT_FRACTION = 0.6
#: Components that can be staged, in the order they are staged when memory is short (a
#: pipeline with more text encoders lists them in its ``stageable``, text encoders first).
STAGEABLE = ("text_encoder", "vae")
#: The stageable components that decode (the VAE, and the sound's audio decoder and vocoder:
#: staged like the VAE): ``keep_vae`` applies to them, and they count at the VAE's dtype.
DECODERS = ("vae", "audio_vae", "vocoder")


def device_memory_limit() -> int | None:
    """Smallest ``bytes_limit`` over this process's devices, or None where none is reported (CPU)."""
    limits = [int(s["bytes_limit"]) for s in device_memory_stats() if s.get("bytes_limit")]
    return min(limits) if limits else None


def component_bytes(
    folder: Any, dtype: Any, blocks_prefixes: tuple[str, ...] = (), weights: str | None = None
) -> dict[str, Any]:
    """Parameter bytes of a component read from its safetensors headers (no tensor is read),
    floating tensors counted at ``dtype``; ``folder`` may also be a reader of a single-file
    checkpoint (:func:`vidax.weights.single_file.open_single_file`: its tensors as loaded), or
    a function of no argument returning either.
    With ``weights`` (an 8-bit format) every 2-D floating ``*.weight`` (a Linear's, in the
    diffusers layout) counts 1 byte a value plus a float32 scale per output row (the Linears
    the family keeps float32 are few and small, and counted so too). Without, a GGUF file's
    2-D block-quantized tensors count their bytes in the file, as the loader keeps them on the
    device (:mod:`vidax.nn.gguf`; the few it dequantizes on the host instead, those the family
    keeps float32, are counted so too), the layers of a stack whose types differ (keys equal
    but for their first layer index) at the widest type's bytes, as the loader pads them.

    Returns ``{"total": ..}``, plus ``"stacks"``: ``{prefix: (bytes, layers)}`` for each stacked
    layer prefix of ``blocks_prefixes`` (e.g. ``"blocks"`` for keys ``blocks.<i>.*``).
    """
    if callable(folder):  # opened when needed (plan_pipeline_staging's paths)
        folder = folder()
    reader = CheckpointReader(folder) if isinstance(folder, (str, os.PathLike)) else folder
    itemsize = np.dtype(dtype).itemsize
    total = 0
    stacks = {p: [0, 0] for p in blocks_prefixes}
    patterns = [(p, re.compile(rf"^{re.escape(p)}\.(\d+)\.")) for p in blocks_prefixes]
    padded = padded_stack_bytes(reader)
    for key in reader.keys():
        info = reader.info(key)
        size = int(np.prod(info.shape)) * (itemsize if np.issubdtype(info.dtype, np.floating) else info.dtype.itemsize)
        if (
            weights is not None
            and len(info.shape) == 2
            and key.endswith(".weight")
            and np.issubdtype(info.dtype, np.floating)
        ):
            size = int(np.prod(info.shape)) + 4 * info.shape[0]
        elif len(info.shape) == 2 and getattr(info, "stored", "") in GGUF_BLOCKS:
            size = padded.get(key, int(info.end - info.start))  # a GGUF Linear weight kept as the file's blocks
        total += size
        for prefix, pattern in patterns:
            m = pattern.match(key)
            if m:
                stacks[prefix][0] += size
                stacks[prefix][1] = max(stacks[prefix][1], int(m.group(1)) + 1)
                break
    out: dict[str, Any] = {"total": total}
    if blocks_prefixes:
        out["stacks"] = {p: tuple(v) for p, v in stacks.items()}
    return out


def plan_staging(
    keep: Mapping[str, bool | None],
    resident_bytes: Mapping[str, int],
    limit: int | None,
    fraction: float = RESIDENT_FRACTION,
    stageable: tuple[str, ...] = STAGEABLE,
) -> dict[str, bool]:
    """Which of ``stageable`` (default :data:`STAGEABLE`) to stage, in that order (see the
    module docstring).

    Args:
        keep: component -> True (keep on the device), False (stage), None (decide).
        resident_bytes: per-device parameter bytes of every component that would be resident
            (the transformer's resident part included).
        limit: device memory limit in bytes, or None when unknown.
        fraction: share of ``limit`` parameters may take.
        stageable: the components that may be staged, in the order they are.

    Returns:
        component -> True when it is staged.
    """
    staged = {name: keep.get(name) is False for name in stageable}
    if limit is None:
        return staged
    total = sum(b for name, b in resident_bytes.items() if not staged.get(name, False))
    for name in stageable:
        if total <= fraction * limit:
            break
        if keep.get(name) is None and name in resident_bytes:
            staged[name] = True
            total -= resident_bytes[name]
    return staged


class Staging:
    """Where each stageable component of a pipeline lives between uses.

    Args:
        staged: component name -> True to keep it in host memory between uses.
        memory_kind: requested host memory kind (:attr:`OffloadConfig.memory_kind`).
        streamed: staged text encoder -> layers per chunk: its stacked layers are read from the
            checkpoint's files chunk by chunk while it encodes
            (:attr:`OffloadConfig.text_encoder_chunk`); its other weights are staged.
        free_transformer: the transformers' device weights wait in host memory while the text
            encoders run and the VAE decodes (:meth:`off_device`;
            :attr:`OffloadConfig.keep_transformer` False).
    """

    def __init__(
        self,
        staged: Mapping[str, bool] | None = None,
        memory_kind: str = "auto",
        streamed: Mapping[str, int] | None = None,
        free_transformer: bool = False,
    ):
        self.streamed = {n: int(c) for n, c in (streamed or {}).items() if c}
        staged = {**dict(staged or {}), **dict.fromkeys(self.streamed, True)}
        moves = any(staged.values()) or free_transformer
        self.kind = host_memory_kind(memory_kind) if moves else None
        if moves and self.kind is None:
            logger.warning(
                "no host memory kind to stage components in (memory_kind=%r); %s stay on the device",
                memory_kind,
                ", ".join([n for n, s in staged.items() if s] + ["transformer"] * free_transformer),
            )
            staged = {n: False for n in staged}
            free_transformer = False
        self.staged = staged
        self.free_transformer = bool(free_transformer)
        self._modules: dict[str, nnx.Module] = {}
        #: transformer name -> (its weights' host copy, weak references to the device arrays put
        #: back from it): :meth:`off_device`'s copy kept between blocks.
        self._host_copies: dict[str, tuple[Any, list]] = {}

    def is_staged(self, name: str) -> bool:
        return bool(self.staged.get(name))

    def stream_config(self, name: str) -> OffloadConfig | None:
        """The ``offload`` of component ``name``'s loader: its layers streamed, or None."""
        chunk = self.streamed.get(name)
        return None if chunk is None else OffloadConfig(chunk=chunk)

    def attach(self, **modules: nnx.Module) -> Staging:
        """Register the loaded modules (name=module); returns self."""
        self._modules.update({k: v for k, v in modules.items() if v is not None})
        return self

    @contextlib.contextmanager
    def on_device(self, name: str) -> Iterator[None]:
        """Within the block, component ``name``'s parameters are on the device (no-op when it is
        resident). On exit the module gets its host parameters back and the device copies are
        deleted (any computation using them must have been dispatched before; its results stay
        valid)."""
        module = self._modules.get(name)
        if not self.is_staged(name) or module is None:
            yield
            return
        host = jax.tree.map(lambda a: a, nnx.state(module))  # a snapshot: nnx.state shares the Variables
        kind = device_memory_kind()

        def put(a):  # streamed layers' placeholders stay: their chunks come in as they run
            return (
                jax.device_put(a, with_layout_of(a, a.sharding.with_memory_kind(kind)))
                if isinstance(a, jax.Array)
                else a
            )

        device = jax.tree.map(put, host)
        nnx.update(module, device)
        try:
            yield
        finally:
            nnx.update(module, host)
            for a in jax.tree.leaves(device):
                if isinstance(a, jax.Array):
                    a.delete()

    @contextlib.contextmanager
    def off_device(self, modules: Mapping[str, nnx.Module]) -> Iterator[None]:
        """Within the block (the prompt encoding, the VAE decode), the device weights of ``modules``
        (name -> module: the transformers) wait in host memory when :attr:`free_transformer` (a
        no-op otherwise); on exit they are put back on the device. The module's device arrays are dropped, not
        deleted: their memory is freed when nothing else holds them (results of computations
        dispatched before stay valid). Weights already in host memory (streamed blocks) stay.

        The host copy is kept from one block to the next (host memory the size of the weights,
        which the blocks need anyway): while the module still holds the device arrays put back
        from it, the next block only drops them, so a call copies the weights to the device twice
        and to the host not at all; weights changed since (a LoRA fused) are copied again."""
        if not self.free_transformer or not modules:
            yield
            return
        kind = device_memory_kind()

        def move(a, to):
            if not isinstance(a, jax.Array) or a.sharding.memory_kind == to:
                return a
            return jax.device_put(a, with_layout_of(a, a.sharding.with_memory_kind(to)))

        for name, module in modules.items():
            host = self._kept_host_copy(name, module)
            if host is None:
                host = jax.tree.map(lambda a: move(a, self.kind), nnx.state(module))
                # the copies done before anything else is allocated: the device buffers are freed when
                # their last transfer ends, and a decode's first chunk would otherwise sit beside them
                jax.block_until_ready(jax.tree.leaves(host))
            nnx.update(module, host)
        try:
            yield
        finally:
            for name, module in modules.items():
                host = jax.tree.map(lambda a: a, nnx.state(module))  # a snapshot: nnx.state shares the Variables
                device = jax.tree.map(lambda a: move(a, kind), host)
                nnx.update(module, device)
                refs = [weakref.ref(a) if isinstance(a, jax.Array) else None for a in jax.tree.leaves(device)]
                self._host_copies[name] = (host, refs)

    def _kept_host_copy(self, name: str, module: nnx.Module) -> Any:
        """The host copy of ``module``'s weights kept by :meth:`off_device`, where the module still
        holds the very arrays put back from it (None: none, or the weights changed since)."""
        kept = self._host_copies.pop(name, None)
        if kept is None:
            return None
        host, refs = kept
        leaves = jax.tree.leaves(nnx.state(module))
        same = len(leaves) == len(refs) and all(r is None or r() is a for r, a in zip(refs, leaves, strict=True))
        return host if same else None

    def describe(self, layers: Mapping[str, int] | None = None) -> str:
        """One line: which components wait in host memory; ``layers``: a streamed text encoder's
        layer count by name, where known (a chunk asked beyond it is said as capped there)."""
        staged = [n for n, s in self.staged.items() if s]
        moved = (
            f"transformer in {self.kind} memory while the prompt is encoded and the VAE decodes"
            if self.free_transformer
            else ""
        )
        if not staged:
            return f"staging: {moved or 'text encoder and VAE resident on the device'}"
        counts = layers or {}
        streamed = "".join(
            f"; {n}'s layers streamed "
            + (
                f"{c} a chunk"
                if n not in counts or c <= counts[n]
                else f"all {counts[n]} in one chunk ({c} asked, capped at its layer count)"
            )
            + " while it encodes (not held between calls)"
            for n, c in self.streamed.items()
        )
        moved = f"; {moved}" if moved else ""
        return f"staging: {', '.join(staged)} in {self.kind} memory, on the device only while used{streamed}{moved}"


def plan_pipeline_staging(
    paths: Mapping[str, str],
    dtype: Any,
    vae_dtype: Any,
    offload: OffloadConfig | None,
    mesh: Any = None,
    blocks_prefixes: tuple[str, ...] = ("blocks",),
    text_encoder_dtype: Any = None,
    stageable: tuple[str, ...] = STAGEABLE,
    weights: str | None = None,
) -> Staging:
    """The :class:`Staging` of a pipeline whose component folders are ``paths`` (keys
    ``transformer``, the text encoders of ``stageable`` (``text_encoder``, ``text_encoder_2``,
    ...), ``vae``), decided by :func:`plan_staging` from the checkpoint headers: the transformer
    and text encoders at ``dtype`` divided over the mesh's ``tensor`` axis (their weights are
    tensor-parallel; the text encoders at ``text_encoder_dtype`` when they load in another one),
    the VAE and the sound's decoders (:data:`DECODERS`) at ``vae_dtype``; with streamed blocks
    the transformer counts its non-block weights plus two chunks of each of its block stacks (``blocks_prefixes``, the registry's
    ``ComponentSpec.block_stacks``). ``keep_text_encoder`` of ``offload`` applies to every text
    encoder. ``weights``: the transformer's 8-bit format (:func:`component_bytes`); its
    ``paths`` entry may be a single-file reader, and any entry a function returning one (opened
    only where a device memory limit makes the staging read the headers)."""
    offload = offload or OffloadConfig()
    keep = {name: offload.keep_vae if name in DECODERS else offload.keep_text_encoder for name in stageable}
    streamed = dict.fromkeys((n for n in stageable if n not in DECODERS), offload.text_encoder_chunk)
    limit = device_memory_limit()
    free = offload.keep_transformer is False
    if limit is None or all(v is not None for v in keep.values()):
        return Staging(plan_staging(keep, {}, None, stageable=stageable), offload.memory_kind, streamed, free)
    tp = axis_size(mesh, TENSOR)
    tr = component_bytes(paths["transformer"], dtype, blocks_prefixes, weights)
    resident = tr["total"]
    if offload.streams_blocks:
        for nbytes, layers in tr["stacks"].values():
            if layers:
                resident += 2 * nbytes / layers * offload.layers_per_chunk(layers) - nbytes
    sizes = {"transformer": resident / tp}
    for name in stageable:
        if name in paths and name not in DECODERS:
            sizes[name] = component_bytes(paths[name], text_encoder_dtype or dtype)["total"] / tp
        elif name in paths:
            sizes[name] = component_bytes(paths[name], vae_dtype)["total"]
    staged = plan_staging(keep, sizes, limit, stageable=stageable)
    logger.info(
        "staging: device limit %.2f GiB, resident parameters %s GiB -> staged %s",
        limit / 2**30,
        {k: round(v / 2**30, 2) for k, v in sizes.items()},
        [n for n, s in staged.items() if s] or "none",
    )
    return Staging(staged, offload.memory_kind, streamed, free)


def transformers_of(pipe: Any) -> dict[str, nnx.Module]:
    """The denoising transformers of a pipeline (name -> module; the experts of two-expert
    checkpoints), for :meth:`Staging.off_device`."""
    names = getattr(getattr(pipe, "info", None), "transformers", ())
    return {n: getattr(pipe, n) for n in names if getattr(pipe, n, None) is not None}


def offload_report(pipe: Any) -> str:
    """Where a pipeline's weights wait: staged components and streamed transformer blocks."""
    from vidax.parallel.offload import offloaded_stacks

    stacks = [
        (name, blocks)
        for name, value in vars(pipe).items()
        for blocks in (offloaded_stacks(value) if isinstance(value, nnx.Module) else ())
    ]
    layers: dict[str, int] = {}
    for name, blocks in stacks:
        layers[name] = max(layers.get(name, 0), blocks.num_layers)
    lines = [getattr(pipe, "staging", Staging()).describe(layers)]
    lines += [f"{name}.{blocks.attr}: {blocks.describe()}" for name, blocks in stacks]
    return "\n".join("  " + line for line in lines)
