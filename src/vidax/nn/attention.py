"""Scaled dot-product attention: one dispatch function over interchangeable implementations.

Layout everywhere: queries ``(B, Lq, N, K)``, keys and values ``(B, Lk, N_kv, K)`` (B batch, L
tokens, N query heads, N_kv key/value heads with ``N % N_kv == 0``, K head dim), output
``(B, Lq, N, K)`` in the query dtype. Softmax statistics and the value accumulation are float32
whatever the input dtype.

Grouped-query heads (``N_kv < N``) follow torch SDPA's ``enable_gqa=True``: query head ``n`` uses
key/value head ``n // (N / N_kv)`` (K/V heads repeated with ``repeat_interleave``). ``xla`` and
``blockwise`` reshape the queries to ``(B, Lq, N_kv, G, K)`` instead of repeating K/V; ``cudnn``
takes the grouped K/V natively; ``pallas_tpu`` repeats K/V (its kernel needs equal head counts).

Masks, all optional and combined (a key is attended when every one allows it):

* ``segment_ids`` (:class:`SegmentIds`): query i attends to key j iff their ids are equal. Key
  padding is a segment: :meth:`SegmentIds.for_padding` (right padding) or
  :meth:`SegmentIds.for_mask` (any 0/1 attention mask, e.g. left padding). Never a dense L x L
  mask.
* ``causal=True``: query i attends to key j iff ``j <= i + (Lk - Lq)``: the *bottom-right*
  alignment, as Llama / Qwen2 with a KV cache (the queries are the last Lq of the Lk positions;
  ``torch.nn.attention.bias.causal_lower_right``). With ``Lq == Lk`` this is torch SDPA's
  ``is_causal=True`` (``j <= i``); with ``Lq > Lk`` the first ``Lq - Lk`` queries see no key.
  With ``causal_block=n`` the positions are counted in blocks of n tokens: query i attends key j
  iff ``j // n <= (i + Lk - Lq) // n`` (block-causal attention, SkyReels-V2's diffusion forcing:
  every frame block sees itself and the blocks before it). ``xla`` and ``blockwise`` only.
* ``bias``: an additive float ``(B or 1, N or 1, Lq, Lk)`` added to the scaled scores (torch
  SDPA's float ``attn_mask``); ``-inf`` entries mask. It is dense, so for small problems only.

Implementations (the ``implementation`` argument):

``"xla"``
    Materialises the ``(B, N, Lq, Lk)`` score matrix. Fastest for short sequences, memory
    ``O(B·N·Lq·Lk)``: only for small problems. Forcing it above :data:`AUTO_XLA_MAX_SCORES`
    scores per batch element and head logs a WARNING with the size of the temporary.
``"blockwise"``
    Online-softmax ("flash") attention in plain JAX: a ``lax.scan`` over key blocks of
    ``block_size`` tokens keeps running max / sum / output accumulators in float32, so memory is
    ``O(B·N·Lq·block_size)`` (plus the bias, when one is given). Keys are padded to a multiple of
    the block and the padding is masked out. Runs on every backend. Causal blocks above the
    diagonal are computed and masked, not skipped.
``"pallas_tpu"``
    The Pallas TPU flash-attention kernel (``jax.experimental.pallas.ops.tpu.flash_attention``):
    sequences are padded to its tile multiples and the padding (and any user segments) is masked
    with segment ids, never a dense bias. Its causal mask is top-left aligned, so for ``Lq != Lk``
    the shorter side is padded at the front to align the ends. A ``bias`` is broadcast to
    ``(B, N, Lq, Lk)`` float32 for the kernel. TPU only, or any backend with ``interpret=True``
    (Pallas interpret mode, for tests). Inside a partitioned program call it from a
    ``shard_map`` (:mod:`vidax.parallel.ulysses` does).
``"cudnn"``
    cuDNN flash attention through ``jax.nn.dot_product_attention(implementation="cudnn")``: GPU
    only, bfloat16 / float16 inputs, K <= 128 and a multiple of 8; padding only as
    :meth:`SegmentIds.for_padding` (cuDNN's per-sequence lengths); ``causal`` only with
    ``Lq == Lk`` (cuDNN's causal mask is top-left aligned); a ``bias`` is cast to the input dtype
    with ``-inf`` raised to the large negative number JAX's cuDNN wrapper uses for masks.
``"auto"``
    ``"xla"`` when ``Lq·Lk <= AUTO_XLA_MAX_SCORES`` (2**22 scores per batch element and head, e.g.
    2048 x 2048); above it ``"pallas_tpu"`` on TPU, ``"cudnn"`` on GPU when the inputs fit it,
    else ``"blockwise"`` (the CPU default).

A query that no key is allowed for (by segments, ``causal`` or ``-inf`` bias) gets zeros from
``xla`` / ``blockwise``; ``pallas_tpu`` / ``cudnn`` leave such rows unspecified (vidax never
produces them: padded queries carry the padding id of the padded keys).

A forced implementation that cannot run here (``pallas_tpu`` off TPU without ``interpret``,
``cudnn`` off GPU, with float32 inputs or with a causal mask and ``Lq != Lk``) raises
:class:`~vidax.errors.InputError`; it never falls back silently. Which implementation ran is
logged on the ``"vidax.attention"`` logger at INFO level each time the call is traced (once per
jit trace).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from vidax.errors import InputError
from vidax.nn import kernels

logger = logging.getLogger("vidax.attention")

#: ``"auto"`` materialises the scores when ``Lq * Lk`` is at most this many (per batch and head).
AUTO_XLA_MAX_SCORES = 1 << 22
#: Default number of key tokens per step of the blockwise scan.
DEFAULT_BLOCK_SIZE = 512
#: ``pallas_tpu``'s tiles for 16-bit inputs by TPU generation (a substring of ``device_kind``,
#: lower case): ``(block_q, block_k_major, block_k)``, the fastest of those measured with
#: ``benchmarks/tpu_attention.py`` (docs/benchmarks/tpu.md: on a v5e, B=2, L=32,768 and 75,776,
#: 12 heads x 128, bf16: 150 TFLOP/s against 125 with 512 tiles; 2048 x 2048 exceeds the
#: default scoped VMEM). Other generations take the v5e's until measured.
TPU_TILES = {"v5 lite": (2048, 1024, 512)}
_DEFAULT_TPU_TILES = (2048, 1024, 512)
#: The tiles for float32 inputs (twice the bytes a tile: the 16-bit tiles above do not compile
#: in the default scoped VMEM on a v5e).
TPU_TILES_FLOAT32 = (512, 512, 512)
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
        padding: static flag, True when built by :meth:`for_padding` (id 1 for a prefix of real
            tokens, 0 for the trailing padding); only this form can run on ``cudnn``.
    """

    q: jax.Array
    kv: jax.Array
    padding: bool = dataclasses.field(default=False, metadata=dict(static=True))

    @classmethod
    def for_padding(cls, batch: int, q_len: int, kv_len: int, q_valid, kv_valid) -> SegmentIds:
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
            return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32)[None] < valid, (batch, length)).astype(
                jnp.int32
            )

        return cls(ids(q_len, q_valid), ids(kv_len, kv_valid), padding=True)

    @classmethod
    def for_mask(cls, q_mask, kv_mask=None) -> SegmentIds:
        """Ids of a tokenizer-style attention mask, any pattern (left or right padding): real
        tokens (mask 1 / True) get id 1, padding id 0.

        Padded queries then attend to padded keys only (their output is meant to be dropped; the
        reference masks such rows differently, e.g. fully, so compare real rows only), and real
        queries to real keys only, as torch SDPA with the key-padding mask
        ``attn_mask[b, :, :, j] = mask[b, j]``.

        Args:
            q_mask: ``(B, Lq)`` bool or int 0/1.
            kv_mask: ``(B, Lk)``; default ``q_mask`` (self-attention).

        Returns:
            :class:`SegmentIds` with ``padding=False`` (the real tokens need not be a prefix, so
            ``cudnn`` refuses it; use :meth:`for_padding` for right padding there).
        """
        kv_mask = q_mask if kv_mask is None else kv_mask
        return cls((jnp.asarray(q_mask) != 0).astype(jnp.int32), (jnp.asarray(kv_mask) != 0).astype(jnp.int32))


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
    block_size: int | None = None,
    scale: float | None = None,
    segment_ids: SegmentIds | None = None,
    interpret: bool = False,
    causal: bool = False,
    bias: jax.Array | None = None,
    causal_block: int = 1,
) -> jax.Array:
    """Softmax attention ``softmax(q·kᵀ·scale + bias [masked])·v`` over all heads independently.

    Follows ``torch.nn.functional.scaled_dot_product_attention`` (no dropout) in the token-major
    layout used across vidax: ``segment_ids`` replaces a boolean mask, ``causal`` is its
    ``is_causal`` (bottom-right aligned when ``Lq != Lk``, see the module docstring), ``bias`` its
    float ``attn_mask``, and ``N_kv < N`` its ``enable_gqa=True``.

    Args:
        q: queries ``(B, Lq, N, K)``, float (fp32 / bf16 / fp16).
        k: keys ``(B, Lk, N_kv, K)``, same dtype as ``q``; ``N % N_kv == 0``.
        v: values ``(B, Lk, N_kv, K)``, same dtype as ``q``.
        implementation: ``"auto"``, ``"xla"``, ``"blockwise"``, ``"pallas_tpu"`` or ``"cudnn"``
            (see module docstring).
        block_size: key tokens per scan step of ``"blockwise"`` (any ``Lk`` works: the last
            block is padded and masked; default :data:`DEFAULT_BLOCK_SIZE`); every tile of
            ``"pallas_tpu"`` (rounded up to its hardware multiples; default: the tiles of this
            TPU generation, :data:`TPU_TILES`).
        scale: multiplier of the scores; default ``1 / sqrt(K)``.
        segment_ids: optional :class:`SegmentIds` (``(B, Lq)`` and ``(B, Lk)``).
        interpret: run ``"pallas_tpu"`` in Pallas interpret mode (any backend; slow, for tests).
        causal: query i attends only keys ``j <= i + Lk - Lq`` (Llama's causal mask).
        causal_block: with ``causal``, positions counted in blocks of this many tokens (module
            docstring); 1: token by token.
        bias: optional float ``(B or 1, N or 1, Lq, Lk)`` added to the scaled scores (in float32);
            dense, for small problems.

    Returns:
        ``(B, Lq, N, K)`` in ``q.dtype``. With ``Lk == 0`` the output is zeros (as torch's SDPA).

    Raises:
        InputError: unknown ``implementation``, one that cannot run on this backend or with
            these inputs, non-positive ``block_size``, or shapes that do not fit the layout above.
    """
    _check_options(implementation, block_size, causal, causal_block)
    # Block-causal is causal on block indices: only the implementations that build the mask.
    causal_block = causal_block if causal else 1
    _check_shapes(q, k, v, segment_ids, bias)
    lk = k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    masks = dict(k=k, causal=causal, bias=bias, causal_block=causal_block)
    impl = _resolve_implementation(implementation, q, segment_ids, interpret, masks)
    _log_implementation(impl, implementation, q, segment_ids, masks)
    if lk == 0:
        return jnp.zeros(q.shape, q.dtype)
    return _IMPLEMENTATIONS[impl](
        q,
        k,
        v,
        scale=scale,
        block_size=block_size,
        segment_ids=segment_ids,
        interpret=interpret,
        causal=causal,
        bias=bias,
        causal_block=causal_block,
    )


def _check_options(implementation: str, block_size: int | None, causal: bool, causal_block: int) -> None:
    """:func:`dot_product_attention`'s options, each of its type and range.

    Raises:
        InputError: naming the option, its value and what is valid.
    """
    if implementation not in _IMPLEMENTATIONS and implementation != "auto":
        raise InputError(
            f"dot_product_attention: implementation={implementation!r} is not known; valid: "
            f"{['auto'] + sorted(_IMPLEMENTATIONS)}."
        )
    if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
        raise InputError(f"dot_product_attention: block_size={block_size!r} must be a positive int.")
    if not isinstance(causal, bool):
        raise InputError(f"dot_product_attention: causal={causal!r} must be a bool.")
    if not isinstance(causal_block, int) or isinstance(causal_block, bool) or causal_block < 1:
        raise InputError(f"dot_product_attention: causal_block={causal_block!r} must be a positive int.")


def _resolve_implementation(
    implementation: str, q: jax.Array, segment_ids: SegmentIds | None, interpret: bool, masks: dict
) -> str:
    """The implementation that runs: ``"auto"``'s choice (:func:`choose_implementation`), else
    the one asked for where it can run (``masks``: ``k``, ``causal``, ``bias``, ``causal_block``).

    Raises:
        InputError: the one asked for cannot run here (why, and those that can).
    """
    if implementation == "auto":
        k, rest = masks["k"], {n: v for n, v in masks.items() if n != "k"}
        return choose_implementation(q, k, segment_ids, **rest)
    problem = unavailable_reason(implementation, q, segment_ids, interpret, **masks)
    if problem:
        raise InputError(
            f"dot_product_attention: implementation={implementation!r} cannot run here: {problem}. "
            f"Use implementation='auto' or one of {available_implementations(q, segment_ids, **masks)}."
        )
    return implementation


def _log_implementation(
    impl: str, implementation: str, q: jax.Array, segment_ids: SegmentIds | None, masks: dict
) -> None:
    """Log which implementation runs on what (INFO), and a WARNING where ``"xla"`` materialises
    more than :data:`AUTO_XLA_MAX_SCORES` scores per head."""
    k, causal, causal_block, bias = masks["k"], masks["causal"], masks["causal_block"], masks["bias"]
    logger.info(
        "dot_product_attention: %s (requested %s) q=%s kv=%s %s%s%s%s",
        impl,
        implementation,
        tuple(q.shape),
        tuple(k.shape),
        jnp.dtype(q.dtype).name,
        " segments" if segment_ids is not None else "",
        (" causal" if causal_block == 1 else f" block-causal({causal_block})") if causal else "",
        f" bias{tuple(bias.shape)}" if bias is not None else "",
    )
    b, lq, n, _ = q.shape
    lk = k.shape[1]
    if impl == "xla" and lq * lk > AUTO_XLA_MAX_SCORES:
        gib = b * n * lq * lk * 4 / 2**30
        logger.warning(
            "dot_product_attention: implementation='xla' materialises %d x %d scores per head "
            "(%.2f GiB float32 for B=%d, N=%d); 'blockwise' needs O(Lq·block) memory",
            lq,
            lk,
            gib,
            b,
            n,
        )


def unavailable_reason(
    impl: str,
    q: jax.Array,
    segment_ids: SegmentIds | None = None,
    interpret: bool = False,
    *,
    k: jax.Array | None = None,
    causal: bool = False,
    bias: jax.Array | None = None,
    causal_block: int = 1,
) -> str | None:
    """Why ``impl`` cannot run on this backend with queries like ``q`` (None when it can).

    ``k`` (keys ``(B, Lk, N_kv, K)``), ``causal`` and ``bias`` describe the rest of the call;
    without ``k`` the checks that need ``Lk`` are skipped.
    """
    where = backend()
    if causal and causal_block > 1 and impl in ("pallas_tpu", "cudnn"):
        return f"its causal mask is token by token, not in blocks of causal_block={causal_block} tokens"
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
        if causal and k is not None and k.shape[1] != q.shape[1]:
            return (
                f"cuDNN's causal mask is top-left aligned and vidax's bottom-right (Llama's); they "
                f"agree only for Lq == Lk, got Lq={q.shape[1]}, Lk={k.shape[1]}"
            )
    return None


def available_implementations(
    q: jax.Array,
    segment_ids: SegmentIds | None = None,
    *,
    k: jax.Array | None = None,
    causal: bool = False,
    bias: jax.Array | None = None,
    causal_block: int = 1,
) -> list[str]:
    """The implementations that can run here for queries like ``q`` (interpret mode excluded)."""
    return [
        name
        for name in sorted(_IMPLEMENTATIONS)
        if unavailable_reason(name, q, segment_ids, k=k, causal=causal, bias=bias, causal_block=causal_block) is None
    ]


def choose_implementation(
    q: jax.Array,
    k: jax.Array,
    segment_ids: SegmentIds | None = None,
    *,
    causal: bool = False,
    bias: jax.Array | None = None,
    causal_block: int = 1,
) -> str:
    """What ``implementation="auto"`` runs for these inputs on this backend (module docstring)."""
    if q.shape[1] * k.shape[1] <= AUTO_XLA_MAX_SCORES:
        return "xla"
    for fast in {"tpu": ("pallas_tpu",), "gpu": ("cudnn",)}.get(backend(), ()):
        masks = dict(causal=causal, bias=bias, causal_block=causal_block)
        if unavailable_reason(fast, q, segment_ids, k=k, **masks) is None:
            return fast
    return "blockwise"


def _check_shapes(q, k, v, segment_ids, bias) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise InputError(
            "dot_product_attention: q, k, v must be 4-D (B, L, N, K); got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    if (
        k.shape != v.shape
        or q.shape[0] != k.shape[0]
        or q.shape[3] != k.shape[3]
        or k.shape[2] < 1
        or q.shape[2] % k.shape[2]
    ):
        raise InputError(
            "dot_product_attention: expected q (B, Lq, N, K) and k, v (B, Lk, N_kv, K) with N a "
            f"multiple of N_kv; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
        )
    if segment_ids is not None:
        want_q, want_kv = (q.shape[0], q.shape[1]), (k.shape[0], k.shape[1])
        if tuple(segment_ids.q.shape) != want_q or tuple(segment_ids.kv.shape) != want_kv:
            raise InputError(
                f"dot_product_attention: segment_ids must be q {want_q} and kv {want_kv} (B, L); got "
                f"{tuple(segment_ids.q.shape)} and {tuple(segment_ids.kv.shape)}."
            )
    if bias is not None:
        b, lq, n, _ = q.shape
        shape = tuple(bias.shape)
        if (
            len(shape) != 4
            or shape[0] not in (1, b)
            or shape[1] not in (1, n)
            or shape[2:] != (lq, k.shape[1])
            or not jnp.issubdtype(bias.dtype, jnp.floating)
        ):
            raise InputError(
                f"dot_product_attention: bias must be float ({b} or 1, {n} or 1, {lq}, {k.shape[1]}) "
                f"(B or 1, N or 1, Lq, Lk); got {jnp.dtype(bias.dtype).name} {shape}."
            )


def _grouped(q, n_kv):
    """``(B, Lq, N, K)`` -> ``(B, Lq, N_kv, G, K)``: query head ``h·G + g`` uses K/V head ``h``."""
    b, lq, n, d = q.shape
    return q.reshape(b, lq, n_kv, n // n_kv, d)


def _grouped_bias(bias, n_kv):
    """float32 ``(B|1, N|1, Lq, Lk)`` -> ``(B|1, N_kv|1, G|1, Lq, Lk)`` (matching :func:`_grouped`)."""
    bb, nb, lq, lk = bias.shape
    bias = bias.astype(jnp.float32)
    if nb == 1:
        return bias.reshape(bb, 1, 1, lq, lk)
    return bias.reshape(bb, n_kv, nb // n_kv, lq, lk)


def _allowed(segment_ids, causal, lq, lk, kv_ids=None, k_pos=None, causal_block=1):
    """(B|1, 1, 1, Lq, Lk') bool, or None when nothing is masked: the key is in the query's
    segment (``kv_ids`` overrides the keys' ids) and, when ``causal``, ``j <= i + Lk - Lq``
    counted in blocks of ``causal_block`` tokens (``k_pos``: the key positions j, default
    ``0 .. Lk-1``)."""
    allowed = None
    if segment_ids is not None:
        kv = segment_ids.kv if kv_ids is None else kv_ids
        allowed = segment_ids.q[:, None, None, :, None] == kv[:, None, None, None, :]
    if causal:
        k_pos = jnp.arange(lk, dtype=jnp.int32) if k_pos is None else k_pos
        q_pos = jnp.arange(lq, dtype=jnp.int32) + (lk - lq)
        below = q_pos[:, None] // causal_block >= k_pos[None, :] // causal_block
        allowed = below if allowed is None else allowed & below
    return allowed


def _scores(qg: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """``qg (B, Lq, N_kv, G, K) . k (B, Lk, N_kv, K)`` -> float32 (B, N_kv, G, Lq, Lk), the
    products summed in float32 (the CPU kernels' batched matmul where
    :func:`vidax.nn.kernels.cpu.fused_attention_products`)."""
    if kernels.fused_attention_products(qg.shape[3], qg, k, v):
        b, lq, n_kv, _, d = qg.shape
        return kernels.attention_scores(qg.reshape(b, lq, n_kv, d), k)[:, :, None]
    return jnp.einsum("bqhgd,bkhd->bhgqk", qg, k, preferred_element_type=jnp.float32)


def _values(p: jax.Array, v: jax.Array, out_dtype=jnp.float32) -> jax.Array:
    """``p (B, N_kv, G, Lq, Lk) @ v (B, Lk, N_kv, K)`` -> (B, Lq, N_kv, G, K) in ``out_dtype``
    (float32 sums rounded once), p in v's dtype (the CPU kernels' batched matmul where
    :func:`vidax.nn.kernels.cpu.fused_attention_products`)."""
    if kernels.fused_attention_products(p.shape[2], p, v):
        return kernels.attention_values(p[:, :, 0], v, out_dtype)[:, :, :, None]
    return jnp.einsum("bhgqk,bkhd->bqhgd", p, v, preferred_element_type=jnp.float32).astype(out_dtype)


def _xla(q, k, v, *, scale: float, segment_ids, causal: bool, bias, causal_block: int = 1, **_) -> jax.Array:
    """Materialised attention: fp32 scores and softmax, fp32 accumulation of the values."""
    b, lq, n, d = q.shape
    lk, n_kv = k.shape[1], k.shape[2]
    s = _scores(_grouped(q, n_kv), k, v) * scale
    if bias is not None:
        s = s + _grouped_bias(bias, n_kv)
    allowed = _allowed(segment_ids, causal, lq, lk, causal_block=causal_block)
    if allowed is None and bias is None:
        p = jax.nn.softmax(s, axis=-1)
    else:
        if allowed is not None:
            s = jnp.where(allowed, s, -jnp.inf)
        m = s.max(axis=-1, keepdims=True)
        e = jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0.0))
        total = e.sum(axis=-1, keepdims=True)
        p = e / jnp.where(total > 0, total, 1.0)  # a row that may see no key: zeros
    return _values(p.astype(v.dtype), v, q.dtype).reshape(b, lq, n, d)


def _blockwise(
    q, k, v, *, scale: float, block_size: int | None, segment_ids, causal: bool, bias, causal_block: int = 1, **_
) -> jax.Array:
    """Online-softmax attention: ``lax.scan`` over key blocks with fp32 running statistics."""
    b, lq, n, d = q.shape
    lk, n_kv = k.shape[1], k.shape[2]
    g = n // n_kv
    qg = _grouped(q, n_kv)
    bs = min(block_size or DEFAULT_BLOCK_SIZE, lk)
    num_blocks = -(-lk // bs)
    pad = num_blocks * bs - lk
    kv_ids = None if segment_ids is None else segment_ids.kv
    bias_g = None if bias is None else _grouped_bias(bias, n_kv)
    if pad:
        k = jnp.pad(k, ((0, 0), (0, pad), (0, 0), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, pad), (0, 0), (0, 0)))
        if kv_ids is not None:
            kv_ids = jnp.pad(kv_ids, ((0, 0), (0, pad)))
        if bias_g is not None:
            bias_g = jnp.pad(bias_g, ((0, 0),) * 4 + ((0, pad),))
    # (num_blocks, B, bs, N_kv, K) so that scan walks the blocks.
    kb = k.reshape(b, num_blocks, bs, n_kv, d).swapaxes(0, 1)
    vb = v.reshape(b, num_blocks, bs, n_kv, d).swapaxes(0, 1)
    starts = jnp.arange(num_blocks, dtype=jnp.int32) * bs
    idb = None if kv_ids is None else kv_ids.reshape(b, num_blocks, bs).swapaxes(0, 1)
    # (num_blocks, B|1, N_kv|1, G|1, Lq, bs)
    biasb = None if bias_g is None else jnp.moveaxis(bias_g.reshape(*bias_g.shape[:4], num_blocks, bs), 4, 0)
    # Some row may see no key of a block (or of any block yet) when anything masks.
    masked = segment_ids is not None or causal or bias is not None

    def step(carry, xs):
        m, l, acc = carry  # (B, N_kv, G, Lq), (B, N_kv, G, Lq), (B, Lq, N_kv, G, K) all fp32
        kj, vj, start, ids_j, bias_j = xs
        s = _scores(qg, kj, vj) * scale
        if bias_j is not None:
            s = s + bias_j
        k_pos = start + jnp.arange(bs, dtype=jnp.int32)
        if pad:
            s = jnp.where(k_pos < lk, s, -jnp.inf)
        allowed = _allowed(segment_ids, causal, lq, lk, kv_ids=ids_j, k_pos=k_pos, causal_block=causal_block)
        if allowed is not None:
            s = jnp.where(allowed, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=-1))
        # Without masks every block holds at least one real key, so m_new is finite.
        m_use = jnp.where(jnp.isfinite(m_new), m_new, 0.0) if masked else m_new
        p = jnp.exp(s - m_use[..., None])
        corr = jnp.exp(m - m_use)  # exp(-inf) = 0 on the first block
        l = l * corr + p.sum(axis=-1)
        pv = _values(p.astype(v.dtype), vj)
        acc = acc * jnp.moveaxis(corr, 3, 1)[..., None] + pv
        return (m_new, l, acc), None

    init = (
        jnp.full((b, n_kv, g, lq), -jnp.inf, jnp.float32),
        jnp.zeros((b, n_kv, g, lq), jnp.float32),
        jnp.zeros((b, lq, n_kv, g, d), jnp.float32),
    )
    (m, l, acc), _ = jax.lax.scan(step, init, (kb, vb, starts, idb, biasb))
    if masked:
        l = jnp.where(l > 0, l, 1.0)  # rows that saw no key: acc is 0 -> zeros
    out = acc / jnp.moveaxis(l, 3, 1)[..., None]
    return out.reshape(b, lq, n, d).astype(q.dtype)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def tpu_tiles(device_kind: str | None = None, dtype=jnp.bfloat16) -> tuple[int, int, int]:
    """``pallas_tpu``'s ``(block_q, block_k_major, block_k)`` on this TPU generation for inputs
    of ``dtype`` (:data:`TPU_TILES`, :data:`TPU_TILES_FLOAT32`; ``device_kind`` default: the
    first device's)."""
    if jnp.dtype(dtype).itemsize > 2:
        return TPU_TILES_FLOAT32
    kind = (device_kind or jax.devices()[0].device_kind).lower()
    return next((t for key, t in TPU_TILES.items() if key in kind), _DEFAULT_TPU_TILES)


#: Floor of the bias handed to the Pallas kernel: finite, so that a row whose first key tile is
#: all ``-inf`` does not turn its running max into ``-inf - -inf = nan``.
_PALLAS_BIAS_FLOOR = -1e30


def _pallas_tpu(
    q, k, v, *, scale: float, block_size: int | None, segment_ids, interpret: bool, causal: bool, bias, **_
) -> jax.Array:
    """Pallas TPU flash attention; lengths padded to tile multiples, padding masked by segment ids."""
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    b, lq, n, d = q.shape
    lk, n_kv = k.shape[1], k.shape[2]
    if n_kv != n:  # the kernel needs equal head counts: repeat K/V heads as enable_gqa does
        k, v = (jnp.repeat(t, n // n_kv, axis=2) for t in (k, v))
    # The kernel's causal mask is top-left (j <= i); padding the shorter side at the front puts
    # the last query and the last key at the same position, which makes it bottom-right.
    q_front = max(lk - lq, 0) if causal else 0
    kv_front = max(lq - lk, 0) if causal else 0
    lq_f, lk_f = lq + q_front, lk + kv_front
    tile_q, tile_k_major, tile_k = tpu_tiles(dtype=q.dtype) if block_size is None else (block_size,) * 3
    block_k_major = min(_round_up(tile_k_major, _TPU_LANES), _round_up(lk_f, _TPU_LANES))
    block_k = min(_round_up(tile_k, _TPU_LANES), block_k_major)
    if block_k_major % block_k:
        block_k = block_k_major
    block_q = min(_round_up(tile_q, _TPU_SUBLANES), _round_up(lq_f, _TPU_SUBLANES))
    lq_p, lk_p = _round_up(lq_f, block_q), _round_up(lk_f, block_k_major)
    q_widths, kv_widths = (q_front, lq_p - lq_f), (kv_front, lk_p - lk_f)
    ids = None
    if segment_ids is not None or lq_p != lq or lk_p != lk:
        q_ids = segment_ids.q if segment_ids is not None else jnp.zeros((b, lq), jnp.int32)
        kv_ids = segment_ids.kv if segment_ids is not None else jnp.zeros((b, lk), jnp.int32)
        # Padding gets id -1 (front-padded keys -2): real ids are >= 0, so padded keys are never
        # attended by real queries.
        q_ids = jnp.pad(q_ids.astype(jnp.int32), ((0, 0), q_widths), constant_values=-1)
        kv_ids = jnp.pad(kv_ids.astype(jnp.int32), ((0, 0), (0, kv_widths[1])), constant_values=-1)
        ids = fa.SegmentIds(q_ids, jnp.pad(kv_ids, ((0, 0), (kv_front, 0)), constant_values=-2))
    ab = None
    if bias is not None:
        # The kernel adds ab before multiplying by sm_scale: (q·kᵀ + ab)·scale.
        ab = jnp.maximum(bias.astype(jnp.float32) / scale, _PALLAS_BIAS_FLOOR)
        ab = jnp.pad(jnp.broadcast_to(ab, (b, n, lq, lk)), ((0, 0), (0, 0), q_widths, kv_widths))

    def heads_major(x, widths):  # (B, L, N, K) -> (B, N, L_padded, K)
        return jnp.pad(x, ((0, 0), widths, (0, 0), (0, 0))).transpose(0, 2, 1, 3)

    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k_major, block_k=block_k, block_b=1)
    mode = pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext()
    # Products of 16-bit operands are exact in one pass, and Mosaic refuses a float32 contract
    # precision on them ("Bad lhs type"): the kernel's precision follows the pipeline's only
    # for float32 inputs.
    half = jnp.dtype(q.dtype).itemsize == 2
    with mode, jax.default_matmul_precision("default") if half else contextlib.nullcontext():
        out = fa.flash_attention(
            heads_major(q, q_widths),
            heads_major(k, kv_widths),
            heads_major(v, kv_widths),
            ab=ab,
            segment_ids=ids,
            causal=causal,
            sm_scale=float(scale),
            block_sizes=sizes,
        )
    return out.transpose(0, 2, 1, 3)[:, q_front : q_front + lq].astype(q.dtype)


def _cudnn_mask_value(dtype) -> float:
    """The large negative number ``jax.nn.dot_product_attention``'s cuDNN wrapper gives masked
    scores (``get_large_negative_number``: cuDNN mis-subtracts two larger negatives)."""
    return float(-2 << 40) if jnp.dtype(dtype) == jnp.dtype(jnp.bfloat16) else float(-2 << 14)


def _cudnn(q, k, v, *, scale: float, segment_ids, causal: bool, bias, **_) -> jax.Array:
    """cuDNN flash attention (``jax.nn.dot_product_attention(implementation="cudnn")``); grouped
    K/V heads are passed as they are (cuDNN runs GQA natively)."""
    extra = {}
    if segment_ids is not None:  # padding form (checked): lengths = number of real tokens
        extra.update(
            query_seq_lengths=(segment_ids.q != 0).sum(axis=1).astype(jnp.int32),
            key_value_seq_lengths=(segment_ids.kv != 0).sum(axis=1).astype(jnp.int32),
        )
    if bias is not None:  # cuDNN takes the bias in the input dtype
        extra["bias"] = jnp.maximum(bias.astype(jnp.float32), _cudnn_mask_value(q.dtype)).astype(q.dtype)
    out = jax.nn.dot_product_attention(q, k, v, scale=float(scale), is_causal=causal, implementation="cudnn", **extra)
    return out.astype(q.dtype)


_IMPLEMENTATIONS: dict[str, Callable[..., jax.Array]] = {
    "xla": _xla,
    "blockwise": _blockwise,
    "pallas_tpu": _pallas_tpu,
    "cudnn": _cudnn,
}
