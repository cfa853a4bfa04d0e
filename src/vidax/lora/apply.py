"""Adding LoRA deltas to loaded parameters and taking them off again, bit for bit.

Every parameter a loaded adapter touches keeps its base value (the array as loaded, in host
memory: a parameter already there, a streamed chunk or an offloaded expert's, is kept as it is;
a device parameter is copied to the host once). A merge writes ``base + sum of deltas`` as a new
array: the base is copied to the device, each layer's delta is computed there in float32 and
added in float32 to the weight, rounded once to the storage dtype, one layer at a time (a
donated buffer; the delta is sharded like the weight by the compiler), and the result goes back
to the memory the parameter was in, with its sharding. So switching adapters never reads the
checkpoint, unloading restores the base exactly, and the parameters keep shapes, dtypes and
shardings, so the compiled denoising step is reused.

A GGUF kernel kept as the file's blocks on the device (:mod:`vidax.nn.gguf`) is densified when
a LoRA touches it: its blocks dequantized on the device (to the layer's ``param_dtype``, the
values its forward pass uses), the deltas added in float32, the sum kept as a dense kernel of
``param_dtype`` (the Linear's ``kernel_gguf`` set to None, so the step compiles again); an INFO
line says how many bytes that adds. Restoring puts the blocks and ``kernel_gguf`` back. Blocks
streamed from host memory are not densified (:mod:`vidax.lora.targets` refuses such a LoRA).
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.lora.targets import Term
from vidax.nn.gguf import dequantize_kernel
from vidax.nn.kernels import with_layout_of
from vidax.nn.quant import format_of, quantize
from vidax.parallel.offload import host_memory_kind, offloaded_stacks

logger = logging.getLogger("vidax.lora")


def _delta(shape, kernel: bool, lora: Sequence, diffs: Sequence) -> jax.Array:
    """Float32 delta of one layer: ``sum c * up @ down`` (transposed for a ``kernel``) ``+ sum c * diff``."""
    d = jnp.zeros(shape, jnp.float32)
    for down, up, c in lora:
        prod = jnp.einsum("ri,or->io" if kernel else "ri,or->oi", down, up, precision=jax.lax.Precision.HIGHEST)
        d = d + c * prod
    for diff, c in diffs:
        d = d + c * diff
    return d


def _add_layer_fn(buf: jax.Array, layer: jax.Array, lora, diffs, kernel: bool) -> jax.Array:
    w = jax.lax.dynamic_index_in_dim(buf, layer, 0, keepdims=False)
    new = (w.astype(jnp.float32) + _delta(w.shape, kernel, lora, diffs)).astype(buf.dtype)
    return jax.lax.dynamic_update_index_in_dim(buf, new, layer, 0)


def _add_fn(buf: jax.Array, lora, diffs, kernel: bool) -> jax.Array:
    return (buf.astype(jnp.float32) + _delta(buf.shape, kernel, lora, diffs)).astype(buf.dtype)


def _jitted(fns: dict[tuple, Callable], fn: Callable, buf: jax.Array) -> Callable:
    """``fn`` jitted with its first argument (the buffer) donated, its result placed as
    :func:`_out` of ``buf``: a kernel stack in the CPU kernel layout keeps it, which a donated
    buffer must (:func:`vidax.nn.kernels.stacks.with_layout_of`). Held in ``fns`` (a
    :class:`ParamStore`'s, gone with its module), one per function and output placement."""
    out = _out(buf)
    if (fn, out) not in fns:
        placed = {} if out is None else {"out_shardings": out}
        fns[fn, out] = jax.jit(fn, static_argnames=("kernel",), donate_argnums=(0,), **placed)
    return fns[fn, out]


def _out(buf: jax.Array) -> Any:
    """The ``out_sharding`` of :func:`_jitted` for ``buf``: None for a row-major one."""
    out = with_layout_of(buf, buf.sharding)
    return None if out is buf.sharding else out


def _add_layer(fns: dict, buf: jax.Array, layer: jax.Array, lora, diffs, kernel: bool) -> jax.Array:
    """``buf`` (L, ...) with layer ``layer`` plus its float32 delta, in ``buf``'s dtype and layout
    (donated; ``fns``: the jitted functions, :func:`_jitted`)."""
    return _jitted(fns, _add_layer_fn, buf)(buf, layer, lora, diffs, kernel=kernel)


def _add(fns: dict, buf: jax.Array, lora, diffs, kernel: bool) -> jax.Array:
    """``buf`` plus its float32 delta, in ``buf``'s dtype and layout (donated; ``fns`` as :func:`_add_layer`)."""
    return _jitted(fns, _add_fn, buf)(buf, lora, diffs, kernel=kernel)


class _Slab:
    """One array holding (some layers of) a parameter: the module's own, or a streamed chunk.

    Attributes:
        first: the first layer it holds (0 for a resident parameter). layers: how many (None:
        not stacked). get / put: read and replace it. sharding: its device sharding.
    """

    def __init__(
        self,
        first: int,
        layers: int | None,
        get: Callable[[], Any],
        put: Callable[[Any], None],
        sharding: jax.sharding.Sharding,
    ):
        self.first, self.layers, self.get, self.put, self.sharding = first, layers, get, put, sharding


def _device_sharding(sharding: jax.sharding.Sharding) -> jax.sharding.Sharding:
    return sharding.with_memory_kind(jax.local_devices()[0].default_memory().kind)


class ParamStore:
    """The base values of the parameters of one module that LoRA deltas touch, and the merges.

    Args:
        module: a loaded transformer (its stacked blocks resident or streamed).
    """

    def __init__(self, module: nnx.Module):
        self.module = module
        self._base: dict[tuple, Any] = {}  # (path, slab index) -> base array
        self._stacked: dict[tuple, bool] = {}
        self._gguf: dict[tuple, str] = {}  # densified GGUF kernel path -> its blocks' type
        self._update_fns: dict[tuple, Callable] = {}  # the jitted merges (_jitted), this module's
        self._host_kind = host_memory_kind("auto")

    def _slabs(self, path: tuple, stacked: bool) -> list[_Slab]:
        self._stacked[path] = stacked
        stacks = {s.attr: s for s in offloaded_stacks(self.module)}
        if stacked and path[0] in stacks:
            blocks, leaf = stacks[path[0]], path[1:]
            starts = np.cumsum([0] + list(blocks.sizes))
            return [
                _Slab(
                    int(starts[i]),
                    n,
                    functools.partial(blocks.chunk_leaf, i, leaf),
                    functools.partial(blocks.set_chunk_leaf, i, leaf),
                    blocks.leaf_sharding(leaf),
                )
                for i, n in enumerate(blocks.sizes)
            ]
        var = _variable(self.module, path)

        def put(value, var=var):
            var.set_value(value)

        value = var.get_value()
        return [_Slab(0, value.shape[0] if stacked else None, var.get_value, put, _device_sharding(value.sharding))]

    def _base_of(self, key: tuple, slab: _Slab) -> Any:
        if key not in self._base:
            value = slab.get()
            on_device = (
                isinstance(value, jax.Array)
                and value.sharding.memory_kind == jax.local_devices()[0].default_memory().kind
            )
            if on_device:  # keep the base off the device
                value = (
                    jax.device_put(value, with_layout_of(value, value.sharding.with_memory_kind(self._host_kind)))
                    if self._host_kind is not None
                    else np.asarray(value)
                )
            self._base[key] = value
        return self._base[key]

    def merge(self, terms: Sequence[Term]) -> None:
        """Set every parameter a term touches to ``base + its terms`` (terms in the order given;
        the base saved on first touch)."""
        by_path: dict[tuple, list[Term]] = defaultdict(list)
        for t in terms:
            by_path[t.target.path].append(t)
        for path, ts in by_path.items():
            stacked = ts[0].target.layer is not None
            # An 8-bit kernel (vidax.nn.quant) merges as peft merges into 8-bit layers: its base
            # dequantized, the deltas added in float32, then quantized again (new scales).
            scale_path = path[:-1] + ("kernel_scale",)
            scales = self._slabs(scale_path, stacked) if _has_scale(self.module, path) else None
            # A kept GGUF kernel (vidax.nn.gguf) is densified: its blocks dequantized on the
            # device to the layer's param_dtype, the deltas added in float32, kept dense.
            linear = _variable(self.module, path[:-1]) if path[-1] == "kernel" else None
            gguf = self._gguf.get(path) or getattr(linear, "kernel_gguf", None)
            for i, slab in enumerate(self._slabs(path, stacked)):
                layer_terms: dict[int | None, list[Term]] = defaultdict(list)
                for t in ts:
                    if not stacked:
                        layer_terms[None].append(t)
                    elif slab.first <= t.target.layer < slab.first + slab.layers:
                        layer_terms[t.target.layer - slab.first].append(t)
                if not layer_terms:  # a chunk no active term reaches: its base back, if it had one
                    if (path, i) in self._base:
                        slab.put(_like(self._base.pop((path, i)), slab.get()))
                    if scales is not None and (scale_path, i) in self._base:
                        scales[i].put(_like(self._base.pop((scale_path, i)), scales[i].get()))
                    continue
                current = slab.get()
                base = self._base_of((path, i), slab)
                buf = jax.device_put(base, with_layout_of(base, slab.sharding))
                if gguf is not None:
                    self._gguf[path] = gguf
                    buf = _dequantize_gguf(buf, gguf, linear.param_dtype, linear.gguf_index())
                if scales is not None:
                    fmt = format_of(buf.dtype)
                    buf = _dequantize(
                        buf, jax.device_put(self._base_of((scale_path, i), scales[i]), scales[i].sharding)
                    )
                kernel = path[-1] == "kernel" and len(ts[0].target.shape) == 2
                for layer, lt in sorted(layer_terms.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
                    lora = [(jnp.asarray(t.a), jnp.asarray(t.b), jnp.float32(t.scale)) for t in lt if t.kind == "lora"]
                    diffs = [(jnp.asarray(t.a), jnp.float32(t.scale)) for t in lt if t.kind == "diff"]
                    if layer is None:
                        buf = _add(self._update_fns, buf, lora, diffs, kernel=kernel)
                    else:
                        buf = _add_layer(self._update_fns, buf, jnp.int32(layer), lora, diffs, kernel=kernel)
                if scales is not None:
                    buf, scale = _requantize(buf, fmt)
                    scales[i].put(_like(scale, scales[i].get()))
                if gguf is not None and linear.kernel_gguf is not None:
                    logger.info(
                        "LoRA: GGUF %s kernel %s densified to %s on the device: +%s bytes",
                        gguf,
                        "/".join(map(str, path)),
                        np.dtype(buf.dtype).name,
                        f"{buf.nbytes - current.nbytes:,}",
                    )
                    linear.kernel_gguf = None
                slab.put(_like(buf, current))

    def restore(self, keep: Callable[[tuple], bool] = lambda path: False) -> None:
        """Put every saved base back (bit for bit) and forget it, except paths ``keep`` names."""
        for (path, i), base in list(self._base.items()):
            if keep(path):
                continue
            slab = self._slabs(path, self._stacked[path])[i]
            slab.put(_like(base, slab.get()))
            del self._base[(path, i)]
            if path in self._gguf:  # the blocks back, dequantized in the matmul again
                _variable(self.module, path[:-1]).kernel_gguf = self._gguf.pop(path)

    @property
    def touched(self) -> set:
        return {p for p, _ in self._base}

    def base_bytes(self) -> int:
        """Bytes of the saved bases."""
        return sum(int(np.prod(b.shape)) * np.dtype(b.dtype).itemsize for b in self._base.values())


def _like(value: Any, current: Any) -> Any:
    """``value`` placed where ``current`` is (memory kind and sharding), or numpy like a numpy chunk."""
    if isinstance(current, np.ndarray):
        return np.asarray(value)
    if isinstance(value, jax.Array) and value.sharding == current.sharding:
        return value
    return jax.device_put(value, with_layout_of(value, current.sharding))


_dequantize = jax.jit(lambda q, s: q.astype(jnp.float32) * s.astype(jnp.float32)[..., None, :])
_dequantize_gguf = jax.jit(dequantize_kernel, static_argnums=(1, 2))
_requantize = jax.jit(lambda w, fmt: quantize(w, fmt, jnp), static_argnums=1)


def _has_scale(module: nnx.Module, path: tuple) -> bool:
    """Whether ``path`` is an 8-bit kernel (its Linear has a ``kernel_scale``)."""
    try:
        return path[-1] == "kernel" and getattr(_variable(module, path[:-1]), "kernel_scale", None) is not None
    except (AttributeError, IndexError, KeyError, TypeError):
        return False


def _variable(module: nnx.Module, path: tuple) -> nnx.Variable:
    obj: Any = module
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj
