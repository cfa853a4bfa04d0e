"""The base of every family's diffusion transformer: constructor preamble, the three stages
``__call__ = head(run_blocks(*embed(...)))``, one ``run_blocks`` over any pytree of residual
streams and any number of block stacks, and the mesh's sequence padding.

A family subclasses :class:`DiffusionTransformer`, declares ``block_stacks`` (the attributes
holding its stacked layers, in the order they run: what the key rules, placement and block
streaming read) and writes:

* ``build(config, param_dtype, attention, rngs)``: its submodules (``self.config``, ``mesh``,
  ``dtype``, ``residual_dtype`` are set before it runs);
* ``embed(*args) -> (streams, inputs)``: everything before the blocks; ``streams`` a residual
  stream ``(B, L', D)`` or a tuple of them (HunyuanVideo: video and text), ``inputs`` a pytree
  every block and the head read;
* ``run_block(block, streams, inputs) -> streams`` (default ``block(streams, inputs)``): one layer;
* ``head(streams, inputs)``: everything after the blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import Arg, InputError, Message
from vidax.nn.stack import num_layers, scan_layers
from vidax.parallel.mesh import check_heads
from vidax.parallel.rules import constrain
from vidax.parallel.ulysses import padded_length

#: Logical axes of a residual stream ``(B, L, D)``.
TOKENS = ("batch", "seq", "embed")


def block_inputs(cls: type) -> type:
    """Class decorator for the ``inputs`` an ``embed`` returns (what the blocks and the head read
    besides the residual streams): a frozen dataclass registered as a pytree whose array fields
    are traced and whose :func:`static` fields are part of the tree structure."""
    return jax.tree_util.register_dataclass(dataclasses.dataclass(frozen=True)(cls))


def static() -> Any:
    """A :func:`block_inputs` field that is static (a Python value: lengths, the token grid)."""
    return dataclasses.field(metadata=dict(static=True))


def shared(default: Any = dataclasses.MISSING) -> Any:
    """A :func:`block_inputs` array field with no batch axis (the same for every sample: RoPE
    tables of one token grid, per-layer flags, index lists): given whole to every part of the
    batch when the layers run it in parts (:attr:`DiffusionTransformer.micro_batch`), even where
    its leading axis happens to have the batch's length."""
    return dataclasses.field(default=default, metadata=dict(shared=True))


def micro_batch_inputs(inputs: Any, rows: slice, batch: int) -> Any:
    """``inputs`` (a :func:`block_inputs` value or any pytree) for the rows ``rows`` of a batch
    of ``batch``: every array leading with the batch axis sliced to them; the others (leading
    axis 1: the same for every sample; a token table ``(L, K)``) and :func:`shared` fields
    whole."""

    def part(leaf):
        return leaf[rows] if _batched(leaf, batch) else leaf

    if not dataclasses.is_dataclass(inputs):
        return jax.tree.map(part, inputs)
    values = {
        f.name: jax.tree.map(part, getattr(inputs, f.name))
        for f in dataclasses.fields(inputs)
        if not (f.metadata.get("static") or f.metadata.get("shared"))
    }
    return dataclasses.replace(inputs, **values)


def check_micro_batch(rows: Any, mesh: jax.sharding.Mesh | None) -> None:
    """Raise InputError (naming ``micro_batch``) unless ``rows`` is None or a positive int, and
    not given with a mesh whose ``data`` axis already splits the batch."""
    if rows is not None and (not isinstance(rows, int) or isinstance(rows, bool) or rows < 1):
        raise InputError(
            Message(Arg("micro_batch", rows), " must be a positive int (rows of the step's batch at a time) or None")
        )
    if rows is not None and mesh is not None and mesh.shape.get("data", 1) > 1:
        raise InputError(
            Message(
                Arg("micro_batch", rows),
                f" with a data-parallel mesh (data={mesh.shape['data']}): the batch is already split over the "
                "devices; give one or the other",
            )
        )


def _batched(leaf: Any, batch: int) -> bool:
    """Whether an array leads with the batch axis (a layer counter, a token table does not)."""
    return getattr(leaf, "ndim", 0) > 0 and leaf.shape[0] == batch


class DiffusionTransformer(nnx.Module):
    """A diffusion transformer: ``embed`` -> the block stacks in order -> ``head``.

    Args:
        config: the checkpoint's transformer config (``num_attention_heads`` is read here).
        dtype: compute dtype of the matmuls (float32, bfloat16 or float16).
        param_dtype: initial dtype of the parameters (the loader replaces them with the dtype of
            its :class:`~vidax.weights.loader.DtypePolicy`).
        residual_dtype: dtype of the residual stream(s) between operations; ``None`` = ``dtype``
            (diffusers' behaviour when the model is cast to bf16). See the family's module docstring.
        attention: implementation for :func:`vidax.nn.attention.dot_product_attention`.
        rngs: initialisation randomness (unused when built by the loader).
        mesh: ``(data, tensor, sequence)`` mesh (:mod:`vidax.parallel`) or None (single device):
            batch over ``data``, Megatron tensor parallelism over ``tensor``, Ulysses sequence
            parallelism over ``sequence`` (tokens padded to a multiple of it and masked).

    Raises:
        InputError: ``num_attention_heads`` does not divide by the mesh's ``tensor x sequence``.

    Call ``model(*args)`` with the arguments of the family's :meth:`embed`.
    """

    #: The attributes holding stacked layers (leading layer axis), in the order they run: what
    #: the key rules, placement, the staging plan and block streaming read.
    block_stacks: tuple[str, ...] = ()

    #: Rows of the batch each layer runs at a time (None: the whole batch at once). With CFG the
    #: step's batch is two or more passes of each prompt; running them one after the other in
    #: every layer divides the layer's activations (what bounds a long video on one device:
    #: Wan2.1-14B at 720p x 81 needs 13.0 GiB of temporaries in one layer on the CFG batch, 7.9
    #: GiB on one pass) at the cost of smaller matmuls. Set with :meth:`set_micro_batch`.
    micro_batch: int | None = None

    def set_micro_batch(self, rows: int | None) -> None:
        """Run each layer on ``rows`` rows of the batch at a time (None: all at once); the
        results equal the whole batch's up to the matmuls' summation order.

        Raises:
            InputError: ``rows`` is not a positive int or None, or the model is on a mesh whose
                ``data`` axis splits the batch.
        """
        check_micro_batch(rows, self.mesh)
        self.micro_batch = rows

    # The constructor every family's transformer has (vidax.weights.transformer.load_transformer_model
    # builds it): config, then dtype / param_dtype / residual_dtype / attention / rngs / mesh.
    def __init__(
        self,
        config: Any,
        *,
        dtype: Any = jnp.float32,
        param_dtype: Any = jnp.float32,
        residual_dtype: Any = jnp.float32,
        attention: str = "auto",
        rngs: nnx.Rngs,
        mesh: jax.sharding.Mesh | None = None,
    ):
        check_heads(mesh, config.num_attention_heads, type(self).__name__)
        self.config = config
        self.mesh = mesh
        self.dtype = dtype
        self.residual_dtype = residual_dtype
        self.build(config, param_dtype, attention, rngs)

    def build(self, config: Any, param_dtype: Any, attention: str, rngs: nnx.Rngs) -> None:
        """The family's submodules (``self.config``, ``mesh``, ``dtype``, ``residual_dtype`` set)."""
        raise NotImplementedError(f"{type(self).__name__} must define build()")

    @property
    def res_dtype(self) -> Any:
        """The residual streams' dtype: ``residual_dtype``, or the compute dtype when None."""
        return self.residual_dtype or self.dtype

    def __call__(self, *args: Any, **kwargs: Any) -> jax.Array:
        """The prediction for noisy latents: ``head(run_blocks(*embed(*args, **kwargs)))``.

        Arguments, result and errors as the family's :meth:`embed` and :meth:`head`. The three
        stages also run one by one when the blocks are streamed from host memory
        (:mod:`vidax.parallel.offload`).
        """
        x, inputs = self.embed(*args, **kwargs)
        return self.head(self.run_blocks(x, inputs), inputs)

    def embed(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Everything before the blocks: ``(streams, inputs)``."""
        raise NotImplementedError(f"{type(self).__name__} must define embed()")

    def head(self, x: Any, inputs: Any) -> jax.Array:
        """Everything after the blocks: the prediction in the latents' layout."""
        raise NotImplementedError(f"{type(self).__name__} must define head()")

    def run_block(self, block: nnx.Module, x: Any, inputs: Any) -> Any:
        """One layer of a stack over the streams ``x``; the streams in the residual dtype."""
        return block(x, inputs)

    def run_blocks(
        self,
        x: Any,
        inputs: Any,
        blocks: nnx.Module | None = None,
        stack: str | None = None,
        layers: tuple[int, int] | None = None,
        hooks: dict | None = None,
    ) -> Any:
        """The block stacks in order over the streams ``x`` (a ``(B, L', D)`` array or a tuple of
        them), one scan per stack, each layer's streams constrained to ``(batch, seq, embed)``.

        Args:
            x: the streams from :meth:`embed` (or from the previous stack / chunk).
            inputs: the pytree from :meth:`embed`.
            blocks: a run of consecutive layers of one stack (as the offload runner passes them)
                instead of the stack's own; with several stacks it needs ``stack``.
            stack: run only this stack (one of ``block_stacks``); None: every stack in order.
            layers: ``(start, stop)``: run only these layers, counted over the stacks in order as
                one sequence (with ``blocks``: over that run of layers); a step cache
                (:mod:`vidax.pipelines.step_cache`) runs ``(0, 1)`` then ``(1, L)``.
            hooks: per stack attribute, ``(state, hook)``: ``state`` a pytree with a leading axis of
                the stack's layers, ``hook(layer, streams, state_i, run) -> (streams, new state_i)``
                runs the layer through ``run(layer, streams)`` (a step cache's per-module state,
                :mod:`vidax.pipelines.step_cache`).

        Returns:
            The streams, same structure and shapes, in the residual dtype; with ``hooks``,
            ``(streams, {attribute: new state})``.

        Raises:
            InputError: ``stack`` is not one of ``block_stacks``; ``blocks`` without ``stack``
                when there are several stacks.
        """
        name = type(self).__name__
        if stack is not None and stack not in self.block_stacks:
            raise InputError(f"{name}.run_blocks: stack={stack!r}; valid: {self.block_stacks}.")
        if blocks is not None and stack is None and len(self.block_stacks) > 1:
            raise InputError(f"{name}.run_blocks: blocks= needs stack= (one of {self.block_stacks}).")

        def layer(block, h):
            return jax.tree.map(lambda s: constrain(s, TOKENS, self.mesh), self.run_block(block, h, inputs))

        body = layer if self.micro_batch is None else self._micro_batched(inputs, layer)

        new_states = {}
        offset = 0
        for attr in self.block_stacks if stack is None else (stack,):
            layer_stack = getattr(self, attr) if blocks is None else blocks
            n = num_layers(layer_stack)
            start, stop = (0, n) if layers is None else (max(layers[0] - offset, 0), min(layers[1] - offset, n))
            offset += n
            if start >= stop:
                continue
            span = {} if layers is None else dict(start=start, num_layers=stop)
            if hooks is None or attr not in hooks:
                x = scan_layers(layer_stack, x, body, **span)
                continue
            state, hook = hooks[attr]
            x, new_states[attr] = scan_layers(
                layer_stack, x, lambda b, h, e, hook=hook: hook(b, h, e, body), per_layer=state, **span
            )
        return x if hooks is None else (x, {**{a: hooks[a][0] for a in hooks}, **new_states})

    def _micro_batched(self, inputs: Any, layer):
        """One layer over the batch ``micro_batch`` rows at a time: each part's rows read from
        the streams, run, and written back in place; an optimization barrier after each write
        makes the next part wait for it (otherwise XLA may run the parts side by side and keep
        every part's temporaries at once). A stream leaf without the batch axis (a layer
        counter) goes to every part as it came in and is taken from the last."""
        rows = self.micro_batch

        def body(block, h):
            leaves = jax.tree.leaves(h)
            batch = leaves[0].shape[0]
            if batch <= rows:
                return layer(block, h)
            out = h
            for start in range(0, batch, rows):
                part = slice(start, min(start + rows, batch))
                if start:
                    out = jax.lax.optimization_barrier(out)
                h_part = jax.tree.map(lambda s, o: o[part] if _batched(s, batch) else s, h, out)
                y = self.run_block(block, h_part, micro_batch_inputs(inputs, part, batch))
                out = jax.tree.map(
                    lambda o, s, r: (
                        jax.lax.dynamic_update_slice_in_dim(o, r.astype(o.dtype), start, 0) if _batched(s, batch) else r
                    ),
                    out,
                    h,
                    y,
                )
            return jax.tree.map(lambda s: constrain(s, TOKENS, self.mesh), out)

        return body

    def num_blocks(self) -> int:
        """Layers of all the block stacks together."""
        return sum(num_layers(getattr(self, attr)) for attr in self.block_stacks)

    def hidden_rows(self, inputs: Any) -> tuple[int, int]:
        """Which rows ``[start, stop)`` of the first residual stream are the reference blocks'
        ``hidden_states`` (the video tokens, without text rows or the mesh's sequence padding):
        what a step cache measures and keeps residuals of. Default ``(0, inputs.n_tok)``; a
        family whose first stream holds other rows overrides it."""
        return 0, inputs.n_tok

    def check_latents(
        self,
        x: jax.Array,
        channels: int,
        patch: tuple[int, int, int],
        note: str = "",
        patch_name: str = "patch_size",
        hint: str = "",
    ) -> tuple[int, int, int]:
        """Raise unless ``hidden_states`` ``x`` is ``(B, T, H, W, channels)`` channels-last with
        ``(T, H, W)`` divisible by ``patch`` ``(p_t, p_h, p_w)``; returns the token grid
        ``(T/p_t, H/p_h, W/p_w)``. ``note`` ends the channel message, ``patch_name`` names the
        config fields of ``patch`` in the divisibility message and ``hint`` ends it.

        Raises:
            InputError: naming ``hidden_states``, its shape and what is valid.
        """
        name = type(self).__name__
        if x.ndim != 5 or x.shape[-1] != channels:
            raise InputError(
                f"{name}: hidden_states must be (B, T, H, W, C={channels}){note} channels-last; "
                f"got shape {tuple(x.shape)}."
            )
        thw = tuple(x.shape[1:4])
        if any(n % q for n, q in zip(thw, patch)):
            raise InputError(
                f"{name}: hidden_states (T, H, W)={thw} must be divisible by {patch_name}={tuple(patch)}{hint}."
            )
        return tuple(n // q for n, q in zip(thw, patch))

    def check_text(self, text: jax.Array, b: int, dim: int, dim_name: str, length: str = "L_txt") -> None:
        """Raise unless ``encoder_hidden_states`` ``text`` is ``(b, length, dim)``.

        Raises:
            InputError: naming ``encoder_hidden_states``, its shape and the valid one.
        """
        if text.ndim != 3 or text.shape[0] != b or text.shape[-1] != dim:
            raise InputError(
                f"{type(self).__name__}: encoder_hidden_states must be (B={b}, {length}, {dim_name}{dim}); "
                f"got {tuple(text.shape)}."
            )

    def sequence_length(self, n_tok: int) -> tuple[int, int | None]:
        """Sequence padding for the mesh: ``n_tok`` tokens -> ``(L', valid_length)``, ``L'`` a
        multiple of the mesh's ``sequence`` axis and ``valid_length`` ``n_tok`` when padding was
        added (the padded keys are masked, the padded rows dropped by the head), else None."""
        length = padded_length(n_tok, self.mesh)
        return length, (n_tok if length != n_tok else None)

    def stream(self, x: jax.Array) -> jax.Array:
        """A residual stream ``(B, L', D)`` in the residual dtype, constrained to the mesh."""
        return constrain(x.astype(self.res_dtype), TOKENS, self.mesh)
