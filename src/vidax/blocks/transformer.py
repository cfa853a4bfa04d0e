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

from vidax.errors import InputError
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

        def body(block, h):
            return jax.tree.map(lambda s: constrain(s, TOKENS, self.mesh), self.run_block(block, h, inputs))

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
