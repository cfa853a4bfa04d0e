"""Scaled dot-product attention: one dispatch function over interchangeable implementations.

Layout everywhere: queries ``(B, Lq, N, K)``, keys and values ``(B, Lk, N, K)`` (B batch, L tokens,
N heads, K head dim), output ``(B, Lq, N, K)`` in the query dtype. Softmax statistics and the
value accumulation are float32 whatever the input dtype.

Implementations (the ``implementation`` argument):

``"xla"``
    Materialises the ``(B, N, Lq, Lk)`` score matrix. Fastest for short sequences, memory
    ``O(B·N·Lq·Lk)``: only for small problems. Forcing it above :data:`AUTO_XLA_MAX_SCORES`
    scores per batch element and head logs a WARNING with the size of the temporary.
``"blockwise"``
    Online-softmax ("flash") attention in plain JAX: a ``lax.scan`` over key blocks of
    ``block_size`` tokens keeps running max / sum / output accumulators in float32, so memory is
    ``O(B·N·Lq·block_size)``. Keys are padded to a multiple of the block and the padding is
    masked out. Runs on every backend.
``"pallas_tpu"``
    The Pallas TPU flash-attention kernel (``jax.experimental.pallas.ops.tpu.flash_attention``):
    sequences are padded to its tile multiples and the padding (and any user segments) is masked
    with segment ids, never a dense bias. TPU only, or any backend with ``interpret=True``
    (Pallas interpret mode, for tests). Inside a partitioned program call it from a
    ``shard_map`` (:mod:`vidax.parallel.ulysses` does).
``"cudnn"``
    cuDNN flash attention through ``jax.nn.dot_product_attention(implementation="cudnn")``: GPU
    only, bfloat16 / float16 inputs, K <= 128 and a multiple of 8; padding only as
    :meth:`SegmentIds.padding` (cuDNN's per-sequence lengths).
``"auto"``
    ``"xla"`` when ``Lq·Lk <= AUTO_XLA_MAX_SCORES`` (2**22 scores per batch element and head, e.g.
    2048 x 2048); above it ``"pallas_tpu"`` on TPU, ``"cudnn"`` on GPU when the inputs fit it,
    else ``"blockwise"`` (the CPU default).

Masking uses segment ids (:class:`SegmentIds`): query i attends to key j iff their ids are equal.
A query whose id matches no key gets zeros from ``xla`` / ``blockwise``; ``pallas_tpu`` /
``cudnn`` leave such rows unspecified (vidax never produces them: padded queries carry the
padding id of the padded keys).

A forced implementation that cannot run here (``pallas_tpu`` off TPU without ``interpret``,
``cudnn`` off GPU or with float32 inputs) raises :class:`~vidax.errors.InputError`; it never
falls back silently. Which implementation ran is logged on the ``"vidax.attention"`` logger at
INFO level each time the call is traced (once per jit trace).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from typing import Callable

import jax
import jax.numpy as jnp

from vidax.errors import InputError

logger = logging.getLogger("vidax.attention")

#: ``"auto"`` materialises the scores when ``Lq * Lk`` is at most this many (per batch and head).
AUTO_XLA_MAX_SCORES = 1 << 22
#: Default number of key tokens per step of the blockwise scan (and tile of ``pallas_tpu``).
DEFAULT_BLOCK_SIZE = 512
#: Lane width of TPU tiles: ``pallas_tpu`` key tiles are multiples of it.
_TPU_LANES = 128
#: Sublane width: ``pallas_tpu`` query tiles are multiples of it.
_TPU_SUBLANES = 8


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SegmentIds:
    """Per-token segment ids: query i attends to key j iff ``q[b, i] == kv[b, j]``.

    Attributes:
        q: ``(B, Lq)`` int32, ids >= 0.
        kv: ``(B, Lk)`` int32, ids >= 0.
        padding: static flag, True when built by :meth:`padding` (id 1 for a prefix of real
            tokens, 0 for the trailing padding); only this form can run on ``cudnn``.
    """

    q: jax.Array
    kv: jax.Array
    padding: bool = dataclasses.field(default=False, metadata=dict(static=True))

    @classmethod
    def for_padding(cls, batch: int, q_len: int, kv_len: int, q_valid, kv_valid) -> "SegmentIds":
        """Ids of right-padded sequences: tokens before ``*_valid`` are real (id 1), the rest
        padding (id 0; padded queries attend to padded keys only, their output is meant to be
        dropped).

        Args:
            batch: B.
            q_len, kv_len: padded lengths Lq, Lk.
            q_valid, kv_valid: real lengths, ints or int ``(B,)`` arrays.
        """
        def ids(length, valid):
            valid = jnp.asarray(valid, jnp.int32).reshape(-1, 1)
            return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32)[None] < valid, (batch, length)).astype(jnp.int32)

        return cls(ids(q_len, q_valid), ids(kv_len, kv_valid), padding=True)


def backend() -> str:
    """The platform attention runs on: ``"cpu"``, ``"gpu"`` or ``"tpu"`` (``jax.default_backend``)."""
    name = jax.default_backend()
    return "gpu" if name in ("cuda", "rocm", "gpu") else name


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    implementation: str = "auto",
    block_size: int = DEFAULT_BLOCK_SIZE,
    scale: float | None = None,
    segment_ids: SegmentIds | None = None,
    interpret: bool = False,
) -> jax.Array:
    """Softmax attention ``softmax(q·kᵀ·scale [masked by segments])·v`` over all heads independently.

    Follows ``torch.nn.functional.scaled_dot_product_attention`` (no dropout, not causal) in the
    token-major layout used across vidax; ``segment_ids`` replaces a boolean mask.

    Args:
        q: queries ``(B, Lq, N, K)``, float (fp32 / bf16 / fp16).
        k: keys ``(B, Lk, N, K)``, same dtype as ``q``.
        v: values ``(B, Lk, N, K)``, same dtype as ``q``.
        implementation: ``"auto"``, ``"xla"``, ``"blockwise"``, ``"pallas_tpu"`` or ``"cudnn"``
            (see module docstring).
        block_size: key tokens per scan step of ``"blockwise"`` (any ``Lk`` works: the last
            block is padded and masked); tile size of ``"pallas_tpu"`` (rounded up to its
            hardware multiples).
        scale: multiplier of the scores; default ``1 / sqrt(K)``.
        segment_ids: optional :class:`SegmentIds` (``(B, Lq)`` and ``(B, Lk)``).
        interpret: run ``"pallas_tpu"`` in Pallas interpret mode (any backend; slow, for tests).

    Returns:
        ``(B, Lq, N, K)`` in ``q.dtype``. With ``Lk == 0`` the output is zeros (as torch's SDPA).

    Raises:
        InputError: unknown ``implementation``, one that cannot run on this backend or with
            these inputs, non-positive ``block_size``, or shapes that do not fit the layout above.
    """
    if implementation not in _IMPLEMENTATIONS and implementation != "auto":
        raise InputError(
            f"dot_product_attention: implementation={implementation!r} is not known; valid: "
            f"{['auto'] + sorted(_IMPLEMENTATIONS)}."
        )
    if not isinstance(block_size, int) or block_size < 1:
        raise InputError(f"dot_product_attention: block_size={block_size!r} must be a positive int.")
    _check_shapes(q, k, v, segment_ids)
    b, lq, n, d = q.shape
    lk = k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    impl = implementation
    if impl == "auto":
        impl = choose_implementation(q, k, segment_ids)
    else:
        problem = unavailable_reason(impl, q, segment_ids, interpret)
        if problem:
            raise InputError(
                f"dot_product_attention: implementation={impl!r} cannot run here: {problem}. "
                f"Use implementation='auto' or one of {available_implementations(q, segment_ids)}."
            )
    logger.info(
        "dot_product_attention: %s (requested %s) q=%s kv=%s %s%s",
        impl, implementation, tuple(q.shape), tuple(k.shape), jnp.dtype(q.dtype).name,
        " segments" if segment_ids is not None else "",
    )
    if impl == "xla" and lq * lk > AUTO_XLA_MAX_SCORES:
        gib = b * n * lq * lk * 4 / 2**30
        logger.warning(
            "dot_product_attention: implementation='xla' materialises %d x %d scores per head "
            "(%.2f GiB float32 for B=%d, N=%d); 'blockwise' needs O(Lq·block) memory",
            lq, lk, gib, b, n,
        )
    if lk == 0:
        return jnp.zeros(q.shape, q.dtype)
    return _IMPLEMENTATIONS[impl](
        q, k, v, scale=scale, block_size=block_size, segment_ids=segment_ids, interpret=interpret
    )


def unavailable_reason(impl: str, q: jax.Array, segment_ids: SegmentIds | None = None,
                       interpret: bool = False) -> str | None:
    """Why ``impl`` cannot run on this backend with queries like ``q`` (None when it can)."""
    where = backend()
    if impl == "pallas_tpu":
        if where != "tpu" and not interpret:
            return f"it needs a TPU and the backend is {where!r} (pass interpret=True to emulate it)"
        try:
            from jax.experimental.pallas.ops.tpu import flash_attention  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the JAX build
            return f"the Pallas TPU kernels do not import ({e})"
    elif impl == "cudnn":
        if where != "gpu":
            return f"it needs an NVIDIA GPU and the backend is {where!r}"
        if jnp.dtype(q.dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
            return f"cuDNN flash attention takes bfloat16 / float16, not {jnp.dtype(q.dtype).name}"
        d = q.shape[-1]
        if d > 128 or d % 8:
            return f"cuDNN flash attention needs head dim K <= 128 and a multiple of 8, got K={d}"
        if segment_ids is not None and not segment_ids.padding:
            return "cuDNN masks only trailing padding (SegmentIds.for_padding), not general segments"
    return None


def available_implementations(q: jax.Array, segment_ids: SegmentIds | None = None) -> list[str]:
    """The implementations that can run here for queries like ``q`` (interpret mode excluded)."""
    return [name for name in sorted(_IMPLEMENTATIONS) if unavailable_reason(name, q, segment_ids) is None]


def choose_implementation(q: jax.Array, k: jax.Array, segment_ids: SegmentIds | None = None) -> str:
    """What ``implementation="auto"`` runs for these inputs on this backend (module docstring)."""
    if q.shape[1] * k.shape[1] <= AUTO_XLA_MAX_SCORES:
        return "xla"
    for fast in {"tpu": ("pallas_tpu",), "gpu": ("cudnn",)}.get(backend(), ()):
        if unavailable_reason(fast, q, segment_ids) is None:
            return fast
    return "blockwise"


def _check_shapes(q, k, v, segment_ids) -> None:
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
    if segment_ids is not None:
        want_q, want_kv = (q.shape[0], q.shape[1]), (k.shape[0], k.shape[1])
        if tuple(segment_ids.q.shape) != want_q or tuple(segment_ids.kv.shape) != want_kv:
            raise InputError(
                f"dot_product_attention: segment_ids must be q {want_q} and kv {want_kv} (B, L); got "
                f"{tuple(segment_ids.q.shape)} and {tuple(segment_ids.kv.shape)}."
            )


def _segment_mask(segment_ids: SegmentIds | None, kv_ids=None):
    """(B, 1, Lq, Lk') bool: query and key in the same segment (``kv_ids`` overrides the keys)."""
    kv = segment_ids.kv if kv_ids is None else kv_ids
    return (segment_ids.q[:, None, :, None] == kv[:, None, None, :])


def _xla(q, k, v, *, scale: float, segment_ids, **_) -> jax.Array:
    """Materialised attention: fp32 scores and softmax, fp32 accumulation of the values."""
    s = jnp.einsum("bqnd,bknd->bnqk", q, k, preferred_element_type=jnp.float32) * scale
    if segment_ids is None:
        p = jax.nn.softmax(s, axis=-1)
    else:
        s = jnp.where(_segment_mask(segment_ids), s, -jnp.inf)
        m = s.max(axis=-1, keepdims=True)
        e = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
        total = e.sum(axis=-1, keepdims=True)
        p = e / jnp.where(total > 0, total, 1.0)  # a row with no key in its segment: zeros
    out = jnp.einsum("bnqk,bknd->bqnd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.astype(q.dtype)


def _blockwise(q, k, v, *, scale: float, block_size: int, segment_ids, **_) -> jax.Array:
    """Online-softmax attention: ``lax.scan`` over key blocks with fp32 running statistics."""
    b, lq, n, d = q.shape
    lk = k.shape[1]
    bs = min(block_size, lk)
    num_blocks = -(-lk // bs)
    pad = num_blocks * bs - lk
    kv_ids = None if segment_ids is None else segment_ids.kv
    if pad:
        k = jnp.pad(k, ((0, 0), (0, pad), (0, 0), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, pad), (0, 0), (0, 0)))
        if kv_ids is not None:
            kv_ids = jnp.pad(kv_ids, ((0, 0), (0, pad)))
    # (num_blocks, B, bs, N, K) so that scan walks the blocks.
    kb = k.reshape(b, num_blocks, bs, n, d).swapaxes(0, 1)
    vb = v.reshape(b, num_blocks, bs, n, d).swapaxes(0, 1)
    starts = jnp.arange(num_blocks, dtype=jnp.int32) * bs
    idb = None if kv_ids is None else kv_ids.reshape(b, num_blocks, bs).swapaxes(0, 1)

    def step(carry, xs):
        m, l, acc = carry  # (B, N, Lq), (B, N, Lq), (B, Lq, N, K) all fp32
        kj, vj, start, ids_j = xs
        s = jnp.einsum("bqnd,bknd->bnqk", q, kj, preferred_element_type=jnp.float32) * scale
        if pad:
            valid = (start + jnp.arange(bs, dtype=jnp.int32)) < lk
            s = jnp.where(valid, s, -jnp.inf)
        if segment_ids is not None:
            s = jnp.where(_segment_mask(segment_ids, ids_j), s, -jnp.inf)
            # A row can see no key of this block (or of any block yet): keep its max finite.
            m_new = jnp.maximum(m, s.max(axis=-1))
            m_use = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
        else:
            # Every block holds at least one real key, so m_new is finite.
            m_new = m_use = jnp.maximum(m, s.max(axis=-1))
        p = jnp.exp(s - m_use[..., None])
        corr = jnp.exp(m - m_use)  # exp(-inf) = 0 on the first block
        l = l * corr + p.sum(axis=-1)
        pv = jnp.einsum("bnqk,bknd->bqnd", p.astype(v.dtype), vj, preferred_element_type=jnp.float32)
        acc = acc * corr.transpose(0, 2, 1)[..., None] + pv
        return (m_new, l, acc), None

    init = (
        jnp.full((b, n, lq), -jnp.inf, jnp.float32),
        jnp.zeros((b, n, lq), jnp.float32),
        jnp.zeros((b, lq, n, d), jnp.float32),
    )
    (m, l, acc), _ = jax.lax.scan(step, init, (kb, vb, starts, idb))
    if segment_ids is not None:
        l = jnp.where(l > 0, l, 1.0)  # rows with no key in their segment: acc is 0 -> zeros
    out = acc / l.transpose(0, 2, 1)[..., None]
    return out.astype(q.dtype)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _pallas_tpu(q, k, v, *, scale: float, block_size: int, segment_ids, interpret: bool, **_) -> jax.Array:
    """Pallas TPU flash attention; lengths padded to tile multiples, padding masked by segment ids."""
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    b, lq, n, d = q.shape
    lk = k.shape[1]
    block_k = min(_round_up(block_size, _TPU_LANES), _round_up(lk, _TPU_LANES))
    block_q = min(_round_up(block_size, _TPU_SUBLANES), _round_up(lq, _TPU_SUBLANES))
    lq_p, lk_p = _round_up(lq, block_q), _round_up(lk, block_k)
    ids = None
    if segment_ids is not None or lq_p != lq or lk_p != lk:
        q_ids = segment_ids.q if segment_ids is not None else jnp.zeros((b, lq), jnp.int32)
        kv_ids = segment_ids.kv if segment_ids is not None else jnp.zeros((b, lk), jnp.int32)
        # Padding gets id -1: real ids are >= 0, so padded keys are never attended by real queries.
        ids = fa.SegmentIds(
            jnp.pad(q_ids.astype(jnp.int32), ((0, 0), (0, lq_p - lq)), constant_values=-1),
            jnp.pad(kv_ids.astype(jnp.int32), ((0, 0), (0, lk_p - lk)), constant_values=-1),
        )

    def heads_major(x, length):  # (B, L, N, K) -> (B, N, L_padded, K)
        return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
    mode = pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext()
    with mode:
        out = fa.flash_attention(
            heads_major(q, lq_p), heads_major(k, lk_p), heads_major(v, lk_p), segment_ids=ids,
            sm_scale=float(scale), block_sizes=sizes,
        )
    return out.transpose(0, 2, 1, 3)[:, :lq].astype(q.dtype)


def _cudnn(q, k, v, *, scale: float, segment_ids, **_) -> jax.Array:
    """cuDNN flash attention (``jax.nn.dot_product_attention(implementation="cudnn")``)."""
    lengths = {}
    if segment_ids is not None:  # padding form (checked): lengths = number of real tokens
        lengths = dict(
            query_seq_lengths=(segment_ids.q != 0).sum(axis=1).astype(jnp.int32),
            key_value_seq_lengths=(segment_ids.kv != 0).sum(axis=1).astype(jnp.int32),
        )
    out = jax.nn.dot_product_attention(q, k, v, scale=float(scale), implementation="cudnn", **lengths)
    return out.astype(q.dtype)


_IMPLEMENTATIONS: dict[str, Callable[..., jax.Array]] = {
    "xla": _xla,
    "blockwise": _blockwise,
    "pallas_tpu": _pallas_tpu,
    "cudnn": _cudnn,
}
