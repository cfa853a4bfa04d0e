"""Stacked layers: N identical blocks held as one module with a leading layer axis, run by scan.

Compile time then does not grow with depth, the stacked arrays are what the loader fills layer
by layer, and what offloading streams and sharding rules see.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.cpu.onednn import (StackedKernel, has_kernel_layout, has_layout_api, reads_stacks_in_place,
                              to_kernel_layout)
from vidax.nn.layers import Linear, xla_cpu_upcasts

M = TypeVar("M", bound=nnx.Module)


def stacked(make: Callable[[nnx.Rngs], M], num_layers: int, rngs: nnx.Rngs) -> M:
    """Build ``num_layers`` copies of ``make(rngs)`` as one module whose params lead with L."""

    @nnx.split_rngs(splits=num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def create(r: nnx.Rngs) -> M:
        return make(r)

    return create(rngs)


def scan_layers(layers: nnx.Module, carry: Any, body: Callable[..., Any], *,
                num_layers: int | None = None, collect: bool = False, start: int = 0, per_layer: Any = None) -> Any:
    """Run ``carry = body(layer_i, carry)`` for each layer of a :func:`stacked` module.

    ``body`` sees one layer as an ordinary module (params without the L axis). Implemented with
    ``jax.lax.scan`` over the split state, so it traces the block once.

    Args:
        layers: a :func:`stacked` module of L layers.
        carry: the initial carry (any pytree).
        body: ``(layer, carry) -> carry``.
        num_layers: a static int in ``[0, L]``: run only the first ``num_layers`` layers (default
            all). The loop then indexes the whole stack layer by layer (no sliced copy of the
            first layers' weights is made).
        start: a static int: run layers ``[start, num_layers)`` (default 0), indexed from the
            whole stack like ``num_layers`` (a step cache runs the first layer alone, then the rest).
        collect: also return the carry after every layer run, stacked along a new leading axis.
        per_layer: a pytree of arrays with a leading axis of L (one entry per layer, e.g. a step
            cache's state of a module inside each layer): ``body`` is then
            ``(layer_i, carry, entry_i) -> (carry, new entry_i)``.

    Returns:
        The final carry; with ``collect``, ``(carry, carries)`` where ``carries`` has the carry's
        structure with a leading axis of ``num_layers`` (entry ``i`` is the carry after layer
        ``i``, so entry ``-1`` equals the final carry). With ``per_layer``: ``(that,
        new per_layer)``, the entries of the layers not run unchanged.

    Raises:
        ValueError: ``num_layers`` is not an int in ``[0, L]``.

    bf16 / fp16 parameters are sliced as 16-bit integers on CPU and reinterpreted inside the
    loop, so XLA:CPU keeps no float32 copy of the stack (see
    :func:`vidax.nn.layers.xla_cpu_upcasts`). A stack that enters the jitted function as bf16
    is still copied whole, as uint16, on every call; one passed in as :class:`StackBits` (see
    :func:`as_stack_bits`) is not: its bitcast to bf16 and back folds away. Where oneDNN reads
    stacks in place (:func:`vidax.cpu.onednn.reads_stacks_in_place`), each Linear's bf16 kernel
    is not sliced at all: ``body``'s layer holds a :class:`~vidax.cpu.onednn.StackedKernel` (the
    stack and the layer index), which the Linear's matmul reads in the stack and which gives the
    slice when indexed. A kernel stack that :func:`lay_out_kernel_stacks` keeps in oneDNN's layout
    is handed over as the bfloat16 stack itself (no uint16 view), and the call declares that
    layout.
    """
    graphdef, state = nnx.split(layers)
    paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    leaves = [leaf for _, leaf in paths]
    dtypes = [leaf.dtype for leaf in leaves]
    in_place = _kernels_read_in_place(layers, [p for p, _ in paths], leaves)
    as_bits = [xla_cpu_upcasts(d) and p != _TRANSPOSED for d, p in zip(dtypes, in_place)]
    xs = [jax.lax.bitcast_convert_type(a, jnp.uint16) if b else a for a, b in zip(leaves, as_bits)]
    total = leaves[0].shape[0]
    count = total if num_layers is None else num_layers
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= total:
        raise ValueError(f"scan_layers: num_layers={num_layers!r} must be an int in [0, {total}].")
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start <= count:
        raise ValueError(f"scan_layers: start={start!r} must be an int in [0, num_layers={count}].")

    def step(c, layer_leaves, entry=None):
        layer = [jax.lax.bitcast_convert_type(a, d) if b and not isinstance(a, StackedKernel) else a
                 for a, d, b in zip(layer_leaves, dtypes, as_bits)]
        module = nnx.merge(graphdef, jax.tree.unflatten(treedef, layer))
        if per_layer is None:
            c = body(module, c)
            return c, (c if collect else None)
        c, entry = body(module, c, entry)
        return c, ((c if collect else None), entry)

    if count == total and start == 0 and not any(in_place):
        carry, carries = jax.lax.scan(lambda c, xe: step(c, *xe), carry, (xs, per_layer))
    else:
        def indexed(c, i):
            entry = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False), per_layer)
            return step(c, [StackedKernel(a, i, d, p == _TRANSPOSED) if p
                            else jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False)
                            for a, d, p in zip(xs, dtypes, in_place)], entry)

        carry, carries = jax.lax.scan(indexed, carry, jnp.arange(start, count, dtype=jnp.int32))
        if per_layer is not None:
            carries = (carries[0], jax.tree.map(lambda a, e: a.at[start:count].set(e), per_layer, carries[1]))
    if per_layer is None:
        return (carry, carries) if collect else carry
    carries, entries = carries
    return ((carry, carries) if collect else carry), entries


_IN_PLACE, _TRANSPOSED = 1, 2


def _kernels_read_in_place(layers: nnx.Module, paths: Sequence[tuple], leaves: Sequence[Any]) -> list[int]:
    """For each state leaf of ``layers`` (its key path, the stacked array): whether it is the
    (L, K, N) kernel of a :class:`~vidax.nn.layers.Linear` (not 8-bit, not GGUF) of a dtype whose
    stacks oneDNN reads in place (:func:`vidax.cpu.onednn.reads_stacks_in_place`), handed to the
    layer as a :class:`~vidax.cpu.onednn.StackedKernel`: 0 (no), ``_IN_PLACE`` (read as its
    uint16 bits) or ``_TRANSPOSED`` (its Linear's ``kernel_transposed``: the bfloat16 stack in
    oneDNN's layout)."""
    if not any(reads_stacks_in_place(a.dtype) for a in leaves):
        return [0] * len(paths)
    kernels = {tuple(node_path) + ("kernel",): _TRANSPOSED if node.kernel_transposed else _IN_PLACE
               for node_path, node in nnx.iter_graph(layers)
               if isinstance(node, Linear) and node.kernel_scale is None and node.kernel_gguf is None}

    def keys(path: tuple) -> tuple:
        return tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))

    return [kernels.get(keys(p), 0) if a.ndim == 3 and reads_stacks_in_place(a.dtype) else 0
            for p, a in zip(paths, leaves)]


def lay_out_kernel_stacks(module: nnx.Module, stacks: Sequence[str]) -> None:
    """Keep the stacked Linear kernels of ``module`` under the attributes ``stacks`` (dotted
    names, as :func:`as_stack_bits`'s) in :data:`vidax.cpu.onednn.KERNEL_LAYOUT` where oneDNN
    reads them in place (:func:`vidax.cpu.onednn.reads_stacks_in_place`: bfloat16, the CPU, one
    device), in place on ``module``; each such Linear's static ``kernel_transposed`` says so
    (:func:`scan_layers` then hands the stack to the call as it is). Elsewhere, and for kernels
    that are not resident arrays in the device's memory (streamed blocks, staged components,
    8-bit and GGUF kernels), ``kernel_transposed`` is False.

    Meant to run before every jitted call of ``module``'s layers (:meth:`vidax.pipelines.experts.Experts.params`
    does): a stack already in the layout is left as it is; one replaced since (a LoRA merge, a
    move between memory kinds) is laid out again, once (a transposing copy of that stack). The
    values, shapes and dtypes are unchanged, so the results are those of the row-major stack.
    """
    names = [tuple(s.split(".")) for s in stacks]
    for path, node in nnx.iter_graph(module):
        if not isinstance(node, Linear) or not any(tuple(map(str, path[:len(n)])) == n for n in names):
            continue
        a = node.kernel.get_value()
        want = isinstance(a, jax.Array) and keeps_kernel_layout(node, a.dtype, a.shape, a.sharding)
        if want and not has_kernel_layout(a):
            node.kernel.set_value(to_kernel_layout(a))
        node.kernel_transposed = want


def keeps_kernel_layout(linear: Linear, dtype: Any, shape: Sequence[int], sharding: jax.sharding.Sharding) -> bool:
    """Whether ``linear``'s stacked kernel, of ``dtype`` and ``shape`` placed on ``sharding``, is
    kept in :data:`vidax.cpu.onednn.KERNEL_LAYOUT` (:func:`lay_out_kernel_stacks`, and the loader,
    which reads it so): a kernel neither 8-bit nor GGUF, (L, K, N), of a dtype whose stacks oneDNN
    reads in place (:func:`vidax.cpu.onednn.reads_stacks_in_place`), in one device's default
    memory, with JAX's layout API (:func:`vidax.cpu.onednn.has_layout_api`)."""
    devices = sharding.device_set
    return (linear.kernel_scale is None and linear.kernel_gguf is None and len(shape) == 3
            and reads_stacks_in_place(dtype) and len(devices) == 1
            and sharding.memory_kind in (None, next(iter(devices)).default_memory().kind) and has_layout_api())


def num_layers(layers: nnx.Module) -> int:
    """Length of the leading layer axis of a :func:`stacked` module."""
    leaves = jax.tree.leaves(nnx.state(layers))
    return leaves[0].shape[0]


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
    def tree_unflatten(cls, float_dtype: Any, children: Sequence[Any]) -> "StackBits":
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
    :func:`from_stack_bits`, it reaches :func:`scan_layers` with no copy of the whole chunk (see
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
    view of it, where :func:`vidax.nn.layers.xla_cpu_upcasts` holds (the CPU backend) and the
    array is in CPU devices' default memory; everything else (float32, int8 / fp8 weights,
    placeholders of streamed blocks, arrays in host memory kinds, kernel stacks in oneDNN's layout
    (:func:`lay_out_kernel_stacks`: read by the call as they are), every array on GPU / TPU) as
    it is.

    The views share the arrays' memory (nothing is copied; the arrays must stay alive meanwhile).
    Passed to a jitted function that calls :func:`from_stack_bits` first, the stacks reach
    :func:`scan_layers` as uint16 without XLA:CPU's copy of every whole stack per call (the two
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
        return any(keys[:len(n)] == n for n in names)

    def view(path: tuple, a: Any) -> Any:
        if (names and isinstance(a, jax.Array) and path and under(path)
                and xla_cpu_upcasts(a.dtype) and a.is_fully_addressable and not has_kernel_layout(a)
                and all(d.platform == "cpu" and a.sharding.memory_kind in (None, d.default_memory().kind)
                        for d in a.sharding.device_set)):
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
    return jax.tree.map(lambda a: jax.lax.bitcast_convert_type(a.bits, a.float_dtype) if isinstance(a, StackBits)
                        else a, params, is_leaf=lambda a: isinstance(a, StackBits))
