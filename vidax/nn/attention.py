"""Scaled dot-product attention: one dispatch function over interchangeable implementations.

Layout everywhere: queries ``(B, Lq, N, K)``, keys and values ``(B, Lk, N, K)`` (B batch, L tokens,
N heads, K head dim), output ``(B, Lq, N, K)`` in the query dtype. Softmax statistics and the
value accumulation are float32 whatever the input dtype.

Implementations (the ``implementation`` argument):

``"xla"``
    Materialises the ``(B, N, Lq, Lk)`` score matrix. Fastest for short sequences, memory
    ``O(B·N·Lq·Lk)``: only for small problems.
``"blockwise"``
    Online-softmax ("flash") attention in plain JAX: a ``lax.scan`` over key blocks of
    ``block_size`` tokens keeps running max / sum / output accumulators in float32, so memory is
    ``O(B·N·Lq·block_size)``. Keys are padded to a multiple of the block and the padding is
    masked out. Runs on every backend.
``"auto"``
    ``"xla"`` when ``Lq·Lk <= AUTO_XLA_MAX_SCORES`` (2**22 scores per batch element and head, e.g.
    2048 x 2048), else ``"blockwise"``.

New implementations (cuDNN, Pallas TPU kernels, padding segment ids) register a function in
:data:`_IMPLEMENTATIONS` with the same keyword interface. Which implementation ran is logged on
the ``"vidax.attention"`` logger at INFO level each time the call is traced (once per jit trace),
so a fall-back to materialised attention at video sequence lengths is visible.
"""

from __future__ import annotations

import logging
import math
from typing import Callable

import jax
import jax.numpy as jnp

from vidax.errors import InputError

logger = logging.getLogger("vidax.attention")

#: ``"auto"`` materialises the scores when ``Lq * Lk`` is at most this many (per batch and head).
AUTO_XLA_MAX_SCORES = 1 << 22
#: Default number of key tokens per step of the blockwise scan.
DEFAULT_BLOCK_SIZE = 512


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    implementation: str = "auto",
    block_size: int = DEFAULT_BLOCK_SIZE,
    scale: float | None = None,
) -> jax.Array:
    """Softmax attention ``softmax(q·kᵀ·scale)·v`` without mask, over all heads independently.

    Follows ``torch.nn.functional.scaled_dot_product_attention`` (no mask, no dropout, not
    causal) in the token-major layout used across vidax.

    Args:
        q: queries ``(B, Lq, N, K)``, float (fp32 / bf16 / fp16).
        k: keys ``(B, Lk, N, K)``, same dtype as ``q``.
        v: values ``(B, Lk, N, K)``, same dtype as ``q``.
        implementation: ``"auto"``, ``"xla"`` or ``"blockwise"`` (see module docstring).
        block_size: key tokens per scan step of ``"blockwise"`` (any ``Lk`` works: the last
            block is padded and masked).
        scale: multiplier of the scores; default ``1 / sqrt(K)``.

    Returns:
        ``(B, Lq, N, K)`` in ``q.dtype``. With ``Lk == 0`` the output is zeros (as torch's SDPA).

    Raises:
        InputError: unknown ``implementation``, non-positive ``block_size``, or shapes that do
            not fit the layout above.
    """
    if implementation not in _IMPLEMENTATIONS and implementation != "auto":
        raise InputError(
            f"dot_product_attention: implementation={implementation!r} is not known; valid: "
            f"{['auto'] + sorted(_IMPLEMENTATIONS)}."
        )
    if not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"dot_product_attention: block_size={block_size!r} must be a positive int.")
    _check_shapes(q, k, v)
    b, lq, n, d = q.shape
    lk = k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    impl = implementation
    if impl == "auto":
        impl = "xla" if lq * lk <= AUTO_XLA_MAX_SCORES else "blockwise"
    logger.info(
        "dot_product_attention: %s (requested %s) q=%s kv=%s %s",
        impl, implementation, tuple(q.shape), tuple(k.shape), jnp.dtype(q.dtype).name,
    )
    if lk == 0:
        return jnp.zeros(q.shape, q.dtype)
    return _IMPLEMENTATIONS[impl](q, k, v, scale=scale, block_size=block_size)


def _check_shapes(q, k, v) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise InputError(
            "dot_product_attention: q, k, v must be 4-D (B, L, N, K); got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]:
        raise InputError(
            "dot_product_attention: expected q (B, Lq, N, K) and k, v (B, Lk, N, K); got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
        )


def _xla(q, k, v, *, scale: float, block_size: int) -> jax.Array:
    """Materialised attention: fp32 scores and softmax, fp32 accumulation of the values."""
    del block_size
    s = jnp.einsum("bqnd,bknd->bnqk", q, k, preferred_element_type=jnp.float32) * scale
    p = jax.nn.softmax(s, axis=-1)
    out = jnp.einsum("bnqk,bknd->bqnd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.astype(q.dtype)


def _blockwise(q, k, v, *, scale: float, block_size: int) -> jax.Array:
    """Online-softmax attention: ``lax.scan`` over key blocks with fp32 running statistics."""
    b, lq, n, d = q.shape
    lk = k.shape[1]
    bs = min(block_size, lk)
    num_blocks = -(-lk // bs)
    pad = num_blocks * bs - lk
    if pad:
        k = jnp.pad(k, ((0, 0), (0, pad), (0, 0), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, pad), (0, 0), (0, 0)))
    # (num_blocks, B, bs, N, K) so that scan walks the blocks.
    kb = k.reshape(b, num_blocks, bs, n, d).swapaxes(0, 1)
    vb = v.reshape(b, num_blocks, bs, n, d).swapaxes(0, 1)
    starts = jnp.arange(num_blocks, dtype=jnp.int32) * bs

    def step(carry, xs):
        m, l, acc = carry  # (B, N, Lq), (B, N, Lq), (B, Lq, N, K) all fp32
        kj, vj, start = xs
        s = jnp.einsum("bqnd,bknd->bnqk", q, kj, preferred_element_type=jnp.float32) * scale
        if pad:
            valid = (start + jnp.arange(bs, dtype=jnp.int32)) < lk
            s = jnp.where(valid, s, -jnp.inf)
        # Every block holds at least one real key, so m_new is finite.
        m_new = jnp.maximum(m, s.max(axis=-1))
        p = jnp.exp(s - m_new[..., None])
        corr = jnp.exp(m - m_new)  # exp(-inf) = 0 on the first block
        l = l * corr + p.sum(axis=-1)
        pv = jnp.einsum("bnqk,bknd->bqnd", p.astype(v.dtype), vj, preferred_element_type=jnp.float32)
        acc = acc * corr.transpose(0, 2, 1)[..., None] + pv
        return (m_new, l, acc), None

    init = (
        jnp.full((b, n, lq), -jnp.inf, jnp.float32),
        jnp.zeros((b, n, lq), jnp.float32),
        jnp.zeros((b, lq, n, d), jnp.float32),
    )
    (m, l, acc), _ = jax.lax.scan(step, init, (kb, vb, starts))
    out = acc / l.transpose(0, 2, 1)[..., None]
    return out.astype(q.dtype)


_IMPLEMENTATIONS: dict[str, Callable[..., jax.Array]] = {
    "xla": _xla,
    "blockwise": _blockwise,
}
