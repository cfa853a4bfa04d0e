"""Stacked layers streamed onto the device chunk by chunk outside a jit: a text encoder larger
than the device's memory (:attr:`vidax.parallel.offload.OffloadConfig.text_encoder_chunk`).

Such an encoder's stacks are :class:`~vidax.parallel.offload.OffloadedBlocks` whose chunks are
:class:`FileLayers`: nothing of them waits in host memory; each chunk is read from the
checkpoint's memory-mapped files (the OS page cache keeps them while memory allows) when it is
fetched. The encoder's forward then runs outside a jit (its front doors check
:func:`vidax.parallel.offload.streams_layers`), and :func:`vidax.nn.stack.scan_layers` finds the stack streamed and runs
:func:`scan_streamed`: a jitted scan per chunk, the next chunk's copy issued before this one's
compute, so the device holds the encoder's other weights, two chunks and the activations. It
works for every encoder whose layers run through ``scan_layers`` (T5 / UMT5, CLIP's text tower,
the decoder LMs: Llama, Qwen2.5-VL's text model, Gemma 3); Gemma 4, whose layer groups
interleave, fetches each group's chunks itself (:mod:`vidax.encoders.gemma4`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.nn.kernels import from_stack_bits


class MadeLayers:
    """A chunk made anew at each fetch by ``make()`` (a random-weights text encoder's layers,
    made on the device: no host memory held, as :class:`FileLayers`).

    Attributes:
        shape, dtype: of the chunk ``make`` gives.
    """

    def __init__(self, make: Callable[[], Any], shape: tuple, dtype: Any):
        self.read, self.shape, self.dtype = make, tuple(shape), np.dtype(dtype)


class FileLayers:
    """Layers ``[start, stop)`` of one stacked parameter, read from the checkpoint's
    memory-mapped files each time the chunk is fetched
    (:meth:`~vidax.parallel.offload.OffloadedBlocks.fetch`): nothing
    waits in host memory but the OS page cache. A streamed text encoder's chunks are these.

    Attributes:
        shape, dtype: of the chunk as :meth:`read` gives it.
    """

    def __init__(self, read_layer: Callable[[int], np.ndarray], start: int, stop: int, sds: Any):
        self._read_layer, self.start, self.stop = read_layer, start, stop
        self.shape = (stop - start, *sds.shape[1:])
        self.dtype = np.dtype(sds.dtype)

    def read(self) -> np.ndarray:
        """The chunk, (stop - start, ...) in :attr:`dtype`, assembled layer by layer in one host buffer."""
        buf = np.empty(self.shape, self.dtype)
        for j in range(self.stop - self.start):
            buf[j] = self._read_layer(self.start + j)
        return buf


def stack_of(path: tuple, attrs: Sequence[str]) -> str | None:
    """Which stack of the (dotted) attributes ``attrs`` the parameter ``path`` lies under, or
    None; an attribute holding a list of stacks (Gemma 4's ``groups``) gives the item's
    (``"groups.1"``)."""
    names = tuple(map(str, path))
    attr = next((a for a in attrs if names[: a.count(".") + 1] == tuple(a.split("."))), None)
    depth = 0 if attr is None else attr.count(".") + 1
    if attr is not None and len(path) > depth + 1 and isinstance(path[depth], int):
        return f"{attr}.{path[depth]}"
    return attr


def scan_streamed(
    blocks: Any,
    carry: Any,
    body: Callable[..., Any],
    scan: Callable[..., Any],
    num_layers: int | None = None,
    collect: bool = False,
) -> Any:
    """:func:`vidax.nn.stack.scan_layers` over the streamed stack ``blocks``
    (:class:`~vidax.parallel.offload.OffloadedBlocks`) outside a jit: each chunk fetched
    (:meth:`~vidax.parallel.offload.OffloadedBlocks.run`, double buffered) and scanned by one
    jitted program (one per chunk size; ``body``'s closure goes into it as constants, so it is
    compiled once per call), only the
    chunks holding the first ``num_layers`` layers. Same results as the resident scan;
    ``collect`` concatenates the chunks' collected carries. ``scan``: the resident scan each chunk
    runs (:func:`vidax.nn.stack.scan_layers`, which calls this one: passed in, not imported)."""
    count = blocks.num_layers if num_layers is None else num_layers
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= blocks.num_layers:
        raise ValueError(f"scan_layers: num_layers={num_layers!r} must be an int in [0, {blocks.num_layers}].")
    starts = np.cumsum([0, *blocks.sizes])[:-1].tolist()
    used = sum(1 for s in starts if s < count)
    graphdef, collected = blocks.graphdef, []

    @functools.partial(jax.jit, static_argnums=2)
    def scan_chunk(chunk, c, n):
        return scan(nnx.merge(graphdef, from_stack_bits(chunk)), c, body, num_layers=n, collect=collect)

    def compute(i, chunk, c):
        out = scan_chunk(chunk, c, min(blocks.sizes[i], count - starts[i]))
        if collect:
            out, ys = out
            collected.append(ys)
        return out

    carry = blocks.run(compute, carry, chunks=used) if used else carry
    if not collect:
        return carry
    if not collected:
        return carry, jax.tree.map(lambda a: jnp.zeros((0, *jnp.shape(a)), jnp.result_type(a)), carry)
    return carry, jax.tree.map(lambda *ys: jnp.concatenate(ys), *collected)
