"""Adaptive-norm modulation shared by the diffusion transformers.

Two ways the families make their shift / scale / gate modulations:

* a learned table plus a per-step embedding (Wan, LTX-Video, PixArt-style ``AdaLayerNormSingle``):
  :func:`table_modulation` of the block's ``scale_shift_table`` and the time embedding;
* a layer of the time embedding (diffusers ``AdaLayerNormZero`` / ``AdaLayerNormContinuous`` /
  ``CogVideoXLayerNormZero`` / ``AdaLayerNorm``, and Cosmos's AdaLN-LoRA): :class:`AdaLayerNorm`
  with the checkpoint's parameter names (``linear``, or ``linear_1`` / ``linear_2``; ``norm``).

Then :func:`modulate` (``x·(1+scale)+shift``) and :func:`gated_add` (the residual add) do the
arithmetic, in float32 as the references (modulation tables, their sums and the gated adds are
float32 in every family; only the result is rounded to the compute or residual dtype).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.nn.layers import LayerNorm, PixArtTimestepEmbedding, linear
from vidax.parallel.rules import constrain

_F32 = jnp.float32


def modulate(x: jax.Array, shift: jax.Array, scale: jax.Array, out_dtype=_F32) -> jax.Array:
    """``x·(1+scale)+shift`` in float32 (``x`` the normalised tokens ``(B, L, D)``, ``shift`` /
    ``scale`` ``(B, 1 or L, D)``), rounded to ``out_dtype``."""
    return (x.astype(_F32) * (1 + scale) + shift).astype(out_dtype)


def gated_add(x: jax.Array, y: jax.Array, gate: jax.Array | None, out_dtype) -> jax.Array:
    """The gated residual add ``x + y·gate`` (``x + y`` without a gate) in float32, rounded to
    ``out_dtype`` (the residual dtype)."""
    y = y.astype(_F32)
    if gate is not None:
        y = y * gate
    return (x.astype(_F32) + y).astype(out_dtype)


def table_modulation(table: jax.Array, emb: jax.Array) -> list[jax.Array]:
    """``table + emb`` split into its rows, float32.

    Args:
        table: the learned ``scale_shift_table`` ``(n, D)`` or ``(1, n, D)`` (any dtype).
        emb: ``(B, S, n, D)`` (the time embedding projected to n modulations) or ``(B, S, 1, D)``
            (one embedding added to every row), ``S`` = 1 or one per token.

    Returns:
        n arrays ``(B, S, D)`` float32, in the table's row order.
    """
    n, d = table.shape[-2:]
    e = table.astype(_F32).reshape(n, d)[None, None] + emb.astype(_F32)
    return [e[:, :, i] for i in range(n)]


class AdaLayerNorm(nnx.Module):
    """A modulation layer of an embedding, and optionally its LayerNorm.

    ``modulation(emb)`` is ``linear(silu(emb))`` split into ``chunks`` (diffusers
    ``AdaLayerNormZero``, ``AdaLayerNormZeroSingle``, ``AdaLayerNormContinuous``,
    ``CogVideoXLayerNormZero``, CogVideoX's ``AdaLayerNorm``), or with ``lora_dim`` the AdaLN-LoRA
    ``linear_2(linear_1(silu(emb))) + temb`` (Cosmos). The chunks come in the checkpoint's order;
    the caller names them (``shift, scale, gate``, or ``scale, shift`` for the continuous form).
    ``__call__`` is ``norm(x)·(1+scale)+shift``.

    Args:
        emb_dim: width of the embedding the modulation reads.
        dim: D, the width of each chunk and of the normalised tokens.
        chunks: number of modulations.
        dtype, param_dtype, rngs: of the linear layers.
        norm_eps: the LayerNorm's epsilon, or None (no ``norm``: the block normalises).
        norm_affine: the LayerNorm has a weight and a bias.
        lora_dim: AdaLN-LoRA rank (``linear_1`` / ``linear_2``, no biases), or None (``linear``).
        bias: ``linear``'s bias.
        mesh: given, the modulation (small; its layer is split by output column) is gathered on it.
    """

    def __init__(
        self,
        emb_dim: int,
        dim: int,
        chunks: int,
        *,
        dtype,
        param_dtype,
        rngs: nnx.Rngs,
        norm_eps: float | None = None,
        norm_affine: bool = False,
        lora_dim: int | None = None,
        bias: bool = True,
        mesh=None,
    ):
        self.chunks = chunks
        self.dtype = dtype
        self.mesh = mesh
        if lora_dim is None:
            self.linear = linear(emb_dim, chunks * dim, dtype, param_dtype, rngs, use_bias=bias)
            self.linear_1 = self.linear_2 = None
        else:
            self.linear = None
            self.linear_1 = linear(emb_dim, lora_dim, dtype, param_dtype, rngs, use_bias=False)
            self.linear_2 = linear(lora_dim, chunks * dim, dtype, param_dtype, rngs, use_bias=False)
        self.norm = LayerNorm(dim, norm_eps, norm_affine) if norm_eps is not None else None

    def modulation(self, emb: jax.Array | None, temb: jax.Array | None = None) -> list:
        """The ``chunks`` modulations, float32.

        Args:
            emb: ``(B, E)`` (-> chunks ``(B, 1, D)``) or ``(B, S, E)`` (-> ``(B, S, D)``); None ->
                ``chunks`` Nones.
            temb: AdaLN-LoRA only: ``(B, [S,] >= chunks·D)``, its first ``chunks·D`` added.
        """
        if emb is None:
            return [None] * self.chunks
        h = jax.nn.silu(emb).astype(self.dtype)
        if self.linear is not None:
            e = self.linear(h).astype(_F32)
        else:
            e = self.linear_2(self.linear_1(h)).astype(_F32)
            e = e + temb[..., : e.shape[-1]].astype(_F32)
        if e.ndim == 2:
            e = e[:, None]
        e = constrain(e, ("batch", None, None), self.mesh)
        return jnp.split(e, self.chunks, axis=-1)

    def __call__(self, x: jax.Array, shift: jax.Array, scale: jax.Array, out_dtype) -> jax.Array:
        """``norm(x)·(1+scale)+shift`` in float32, rounded to ``out_dtype``."""
        return modulate(self.norm(x, _F32), shift, scale, out_dtype)


class AdaLayerNormSingle(nnx.Module):
    """diffusers ``AdaLayerNormSingle`` (PixArt-α, LTX-Video): ``e = emb(timestep)`` (the 256-wide
    sinusoid and ``emb.timestep_embedder``, float32) and ``linear(silu(e))``, ``chunks`` modulations
    that each block adds to its ``scale_shift_table`` (:func:`table_modulation`).

    Args:
        dim: D.
        chunks: modulations per block (6).
        dtype, param_dtype, rngs: of ``linear`` (the embedding MLP is float32).
    """

    def __init__(self, dim: int, chunks: int, dtype, param_dtype, rngs: nnx.Rngs):
        self.chunks = chunks
        self.emb = PixArtTimestepEmbedding(dim, rngs)
        self.linear = linear(dim, chunks * dim, dtype, param_dtype, rngs)

    def __call__(self, timestep: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
        """``timestep`` ``(B, S)`` -> modulation ``(B, S, chunks, D)`` and embedding ``(B, S, D)``,
        both in ``dtype`` (the embedding rounded to it first, as the reference's ``.to(dtype)``)."""
        e = self.emb(timestep).astype(dtype)
        mod = self.linear(jax.nn.silu(e))
        return mod.reshape(*mod.shape[:-1], self.chunks, -1), e
