"""How stacked weights reach the CPU kernels: 16-bit stacks as uint16 views, Linear kernel
stacks read in place and kept in the kernel layout.

On the CPU backend (:func:`~vidax.nn.kernels.cpu.xla_cpu_upcasts`) a bf16 / fp16 stack is
handed to a jitted function as its uint16 bits (:class:`StackBits`) and sliced as integers in
:func:`vidax.nn.stack.scan_layers` (:class:`ScanLeaves`), so XLA:CPU keeps no float32 copy of it
and copies no whole stack per call. Where the CPU matmul reads stacks in place
(:func:`reads_stacks_in_place`), each Linear's bf16 kernel is not sliced at all: the layer holds
a :class:`StackedKernel` (the stack and the layer index), which the Linear's matmul
(:class:`vidax.nn.kernels.formats.InPlace`) reads in the stack, and such stacks are kept in the
kernel layout (:func:`lay_out_kernel_stacks`). On GPU and TPU every function here leaves the
arrays as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.cpu import onednn
from vidax.cpu.onednn import StackedKernel
from vidax.nn.kernels.cpu import xla_cpu_upcasts
from vidax.nn.kernels.formats import KernelOwner

__all__ = [
    "StackedKernel",
    "StackBits",
    "ScanLeaves",
    "reads_stacks_in_place",
    "has_kernel_layout",
    "with_layout_of",
    "from_torch_layout",
    "lay_out_kernel_stacks",
    "keeps_kernel_layout",
    "stack_bits_putter",
    "as_stack_bits",
    "stack_bits_state",
    "from_stack_bits",
]


def reads_stacks_in_place(dtype: Any) -> bool:
    """Whether :func:`vidax.nn.stack.scan_layers` hands the Linear kernels of a ``dtype`` stack
    to the layers as :class:`StackedKernel` (the CPU matmul reads them in the stack)."""
    return onednn.reads_stacks_in_place(dtype)


def has_kernel_layout(a: Any) -> bool:
    """Whether ``a`` is a 3-D ``jax.Array`` held in the kernel layout (:func:`lay_out_kernel_stacks`)."""
    return onednn.has_kernel_layout(a)


def with_layout_of(a: Any, sharding: jax.sharding.Sharding) -> Any:
    """Where ``jax.device_put`` sends a copy of ``a`` to ``sharding`` (e.g. another memory kind)
    keeping ``a``'s layout: ``sharding`` itself for a row-major ``a``, a ``Format`` for a stack in
    the kernel layout (``device_put`` to a plain sharding would make it row-major)."""
    return onednn.with_layout_of(a, sharding)


def from_torch_layout(a: jax.Array) -> jax.Array:
    """A row-major (L, N, K) stack of torch ``nn.Linear`` weights (donated) as the (L, K, N)
    kernel stack in the kernel layout: the same bytes, so the same buffer (no copy)."""
    return onednn.from_torch_layout(a)


_IN_PLACE, _TRANSPOSED = 1, 2


def _dense_linear(node: Any) -> bool:
    """Whether ``node`` is a Linear (:class:`~vidax.nn.kernels.formats.KernelOwner`) whose kernel
    is dense (neither 8-bit nor GGUF)."""
    return isinstance(node, KernelOwner) and node.kernel_scale is None and node.kernel_gguf is None


def _kernels_read_in_place(layers: nnx.Module, paths: Sequence[tuple], leaves: Sequence[Any]) -> list[int]:
    """For each state leaf of ``layers`` (its key path, the stacked array): whether it is the
    (L, K, N) kernel of a dense Linear of a dtype whose stacks are read in place
    (:func:`reads_stacks_in_place`), handed to the layer as a :class:`StackedKernel`: 0 (no),
    ``_IN_PLACE`` (read as its uint16 bits) or ``_TRANSPOSED`` (its Linear's
    ``kernel_transposed``: the bfloat16 stack in the kernel layout)."""
    if not any(reads_stacks_in_place(a.dtype) for a in leaves):
        return [0] * len(paths)
    kernels = {
        tuple(node_path) + ("kernel",): _TRANSPOSED if node.kernel_transposed else _IN_PLACE
        for node_path, node in nnx.iter_graph(layers)
        if _dense_linear(node)
    }

    def keys(path: tuple) -> tuple:
        return tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))

    return [
        kernels.get(keys(p), 0) if a.ndim == 3 and reads_stacks_in_place(a.dtype) else 0 for p, a in zip(paths, leaves)
    ]


class ScanLeaves:
    """How the state leaves of a stack of layers cross :func:`vidax.nn.stack.scan_layers`'s loop.

    bf16 / fp16 leaves on CPU are carried as uint16 (:meth:`carried`) and bitcast back inside
    the loop (:meth:`layer`), so XLA:CPU keeps no float32 copy of the stack; a Linear kernel
    stack read in place is not sliced but handed over as a :class:`StackedKernel`
    (:meth:`at`), as the bfloat16 stack itself where it is kept in the kernel layout.

    Args:
        layers: the stacked module.
        paths: the key path of each of its state leaves (``jax.tree_util`` paths).
        leaves: the stacked arrays, in the same order.
    """

    def __init__(self, layers: nnx.Module, paths: Sequence[tuple], leaves: Sequence[Any]):
        self.dtypes = [leaf.dtype for leaf in leaves]
        self.in_place = _kernels_read_in_place(layers, paths, leaves)
        self.as_bits = [xla_cpu_upcasts(d) and p != _TRANSPOSED for d, p in zip(self.dtypes, self.in_place)]

    @property
    def reads_in_place(self) -> bool:
        """Whether some leaf is read in place (the loop then indexes the stacks)."""
        return any(self.in_place)

    def carried(self, leaves: Sequence[Any]) -> list[Any]:
        """The stacked arrays as the loop carries them."""
        return [jax.lax.bitcast_convert_type(a, jnp.uint16) if b else a for a, b in zip(leaves, self.as_bits)]

    def at(self, carried: Sequence[Any], i: jax.Array) -> list[Any]:
        """Layer ``i`` of each carried array (a :class:`StackedKernel` for a kernel read in place)."""
        return [
            StackedKernel(a, i, d, p == _TRANSPOSED) if p else jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False)
            for a, d, p in zip(carried, self.dtypes, self.in_place)
        ]

    def layer(self, layer_leaves: Sequence[Any]) -> list[Any]:
        """One layer's leaves, as carried, in their own dtypes."""
        return [
            jax.lax.bitcast_convert_type(a, d) if b and not isinstance(a, StackedKernel) else a
            for a, d, b in zip(layer_leaves, self.dtypes, self.as_bits)
        ]


def lay_out_kernel_stacks(module: nnx.Module, stacks: Sequence[str]) -> None:
    """Keep the stacked Linear kernels of ``module`` under the attributes ``stacks`` (dotted
    names, as :func:`as_stack_bits`'s) in the kernel layout where the CPU matmul reads them in
    place (:func:`reads_stacks_in_place`: bfloat16, the CPU, one device), in place on
    ``module``; each such Linear's static ``kernel_transposed`` says so (``scan_layers`` then
    hands the stack to the call as it is). Elsewhere, and for kernels that are not resident
    arrays in the device's memory (streamed blocks, staged components, 8-bit and GGUF kernels),
    ``kernel_transposed`` is False.

    Meant to run before every jitted call of ``module``'s layers (:meth:`vidax.pipelines.experts.Experts.params`
    does): a stack already in the layout is left as it is; one replaced since (a LoRA merge, a
    move between memory kinds) is laid out again, once (a transposing copy of that stack). The
    values, shapes and dtypes are unchanged, so the results are those of the row-major stack.
    """
    names = [tuple(s.split(".")) for s in stacks]
    for path, node in nnx.iter_graph(module):
        if not isinstance(node, KernelOwner) or not any(tuple(map(str, path[: len(n)])) == n for n in names):
            continue
        a = node.kernel.get_value()
        want = isinstance(a, jax.Array) and keeps_kernel_layout(node, a.dtype, a.shape, a.sharding)
        if want and not has_kernel_layout(a):
            node.kernel.set_value(onednn.to_kernel_layout(a))
        node.kernel_transposed = want


def keeps_kernel_layout(linear: KernelOwner, dtype: Any, shape: Sequence[int], sharding: jax.sharding.Sharding) -> bool:
    """Whether ``linear``'s stacked kernel, of ``dtype`` and ``shape`` placed on ``sharding``, is
    kept in the kernel layout (:func:`lay_out_kernel_stacks`, and the loader, which reads it so):
    a kernel neither 8-bit nor GGUF, (L, K, N), of a dtype whose stacks are read in place
    (:func:`reads_stacks_in_place`), in one device's default memory, with JAX's layout API."""
    devices = sharding.device_set
    return (
        _dense_linear(linear)
        and len(shape) == 3
        and reads_stacks_in_place(dtype)
        and len(devices) == 1
        and sharding.memory_kind in (None, next(iter(devices)).default_memory().kind)
        and onednn.has_layout_api()
    )


@jax.tree_util.register_pytree_node_class
class StackBits:
    """A 16-bit float array held as its bit pattern: ``bits`` uint16 of the same shape,
    ``float_dtype`` (static, part of the pytree structure) the dtype it stands for.

    Made by :func:`as_stack_bits` outside a jitted step and turned back by
    :func:`from_stack_bits` inside it.
    """

    def __init__(self, bits: Any, float_dtype: Any):
        self.bits = bits
        self.float_dtype = jnp.dtype(float_dtype)

    def tree_flatten(self) -> tuple[tuple[Any], Any]:
        return (self.bits,), self.float_dtype

    @classmethod
    def tree_unflatten(cls, float_dtype: Any, children: Sequence[Any]) -> StackBits:
        return cls(children[0], float_dtype)


def _bits_view(a: jax.Array, sharding: jax.sharding.Sharding | None = None) -> jax.Array:
    """``a`` (16-bit floats on CPU devices) as uint16 sharing its buffers: each shard viewed
    through numpy (XLA:CPU buffers are host memory, whatever their memory kind) and put in its
    device's default memory without a copy; ``sharding``: the result's (``a``'s own by default;
    the same layout in another memory kind)."""
    shards = [jax.device_put(np.asarray(s.data).view(np.uint16), s.device) for s in a.addressable_shards]
    return jax.make_array_from_single_device_arrays(a.shape, sharding or a.sharding, shards)


def stack_bits_putter(dtype: Any, sharding: jax.sharding.Sharding) -> Callable[[Any], StackBits] | None:
    """How a (chunk of a) stack of ``dtype`` waiting in host memory reaches ``sharding`` as a
    :class:`StackBits`, or None where it goes as it is (not 16-bit floats, not the CPU backend,
    a device that is not a CPU).

    The putter takes the host array (a ``jax.Array`` of the same layout as ``sharding`` in any
    memory kind of CPU devices, or a numpy array) and returns its uint16 view on ``sharding``:
    XLA:CPU's host and device memory are the same RAM, so each shard's buffer is put there
    without a copy (a numpy array: one ``device_put``). Passed to a jitted function that calls
    :func:`from_stack_bits`, it reaches ``scan_layers`` with no copy of the whole chunk (see
    :func:`as_stack_bits`); the results are bit-identical.
    """
    if not (xla_cpu_upcasts(dtype) and all(d.platform == "cpu" for d in sharding.device_set)):
        return None
    dtype = jnp.dtype(dtype)

    def put(a: Any) -> StackBits:
        if isinstance(a, jax.Array):
            return StackBits(_bits_view(a, sharding), dtype)
        return StackBits(jax.device_put(np.asarray(a).view(np.uint16), sharding), dtype)

    return put


def as_stack_bits(params: nnx.State, stacks: Sequence[str]) -> nnx.State:
    """``params`` with every bf16 / fp16 array under the top-level keys ``stacks`` (a model's
    stacked layers, e.g. ``DiffusionTransformer.block_stacks``) replaced by a :class:`StackBits`
    view of it, where :func:`~vidax.nn.kernels.cpu.xla_cpu_upcasts` holds (the CPU backend) and
    the array is in CPU devices' default memory; everything else (float32, int8 / fp8 weights,
    placeholders of streamed blocks, arrays in host memory kinds, kernel stacks in the kernel
    layout (:func:`lay_out_kernel_stacks`: read by the call as they are), every array on GPU /
    TPU) as it is.

    The views share the arrays' memory (nothing is copied; the arrays must stay alive meanwhile).
    Passed to a jitted function that calls :func:`from_stack_bits` first, the stacks reach
    ``scan_layers`` as uint16 without XLA:CPU's copy of every whole stack per call (the two
    bitcasts cancel); the results are bit-identical.

    Args:
        params: an ``nnx.State`` of a module (e.g. ``nnx.split(model)[1]``).
        stacks: the names of its stacked-layer attributes; a dotted name (``"encoder.block"``)
            names one inside a submodule (every array under that path: a list of stacks, e.g.
            ``"groups"``, is named once).
    """
    names = [tuple(s.split(".")) for s in stacks]

    def under(path: tuple) -> bool:
        keys = tuple(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        return any(keys[: len(n)] == n for n in names)

    def view(path: tuple, a: Any) -> Any:
        if (
            names
            and isinstance(a, jax.Array)
            and path
            and under(path)
            and xla_cpu_upcasts(a.dtype)
            and a.is_fully_addressable
            and not has_kernel_layout(a)
            and all(
                d.platform == "cpu" and a.sharding.memory_kind in (None, d.default_memory().kind)
                for d in a.sharding.device_set
            )
        ):
            return StackBits(_bits_view(a), a.dtype)
        return a

    return jax.tree_util.tree_map_with_path(view, params) if names else params


def stack_bits_state(module: nnx.Module) -> nnx.State:
    """``nnx.state(module)`` with the stacks that its class attribute ``stacked_paths`` names
    (dotted paths; none without it: the state as it is) as :class:`StackBits` views
    (:func:`as_stack_bits`): the parameters of a jitted forward that merges them through
    :func:`from_stack_bits` (the text encoders' ``encode_*`` functions)."""
    return as_stack_bits(nnx.state(module), getattr(module, "stacked_paths", ()))


def from_stack_bits(params: Any) -> Any:
    """``params`` with every :class:`StackBits` bitcast back to its float dtype (inside a jit:
    the inverse of :func:`as_stack_bits`; anything else is returned as it is)."""
    return jax.tree.map(
        lambda a: jax.lax.bitcast_convert_type(a.bits, a.float_dtype) if isinstance(a, StackBits) else a,
        params,
        is_leaf=lambda a: isinstance(a, StackBits),
    )
