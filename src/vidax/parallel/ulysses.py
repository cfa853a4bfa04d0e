"""Attention on the mesh: DeepSpeed-Ulysses sequence parallelism and tensor-parallel heads.

Tokens ``(B, L, N, K)`` arrive split over ``data`` (batch), ``sequence`` (tokens) and ``tensor``
(heads). Inside one ``shard_map`` per attention call:

* self-attention (:func:`ulysses_attention`): an all-to-all over ``sequence`` turns the local
  ``(B/dp, L/sp, N/tp, K)`` q, k, v into ``(B/dp, L, N/(tp·sp), K)``, each device attends over
  the whole sequence for its heads, and the inverse all-to-all restores the token split.
  Requires ``N % (tp·sp) == 0`` and ``L % sp == 0`` (models pad with :func:`pad_tokens`; the
  padded keys are masked with segment ids via ``valid_length``, or with the caller's full-length
  per-token ``segment_ids`` when the real tokens differ per batch element, e.g. a joint
  video + text sequence with prompts of different lengths).
* two-pathway attention (:func:`two_pathway_attention`, Cosmos 3): a joint ``[x1; x2]`` whose
  first stream attends itself causally and whose second attends both (keys masked by a
  ``(B, L1 + L2)`` key mask); each stream goes through the same all-to-all, the masks apply to the
  whole sequence per head group. Grouped key/value heads that do not split over
  ``tensor x sequence`` are repeated first (:func:`mesh_kv_heads`).
* cross-attention (:func:`local_attention`): queries stay token-split, the short context
  (text / image tokens) is whole on every device, so attention is local; no communication. A
  context padding mask ``kv_mask`` ``(B, Lk)`` masks the padded context keys (segment ids).

Every attention kernel (Pallas included) therefore runs inside its own ``shard_map`` on local
shards, as a partitioned program needs. Which single-device implementation runs is
:func:`vidax.nn.attention.dot_product_attention`'s choice (``implementation``), made on the
local shapes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from vidax.errors import InputError
from vidax.nn.attention import SegmentIds, dot_product_attention
from vidax.parallel.mesh import SEQUENCE, TENSOR, axis_size
from vidax.parallel.rules import logical_spec

_TOKENS = ("batch", "seq", "heads", "kv")
_CONTEXT = ("batch", "text_seq", "heads", "kv")


def padded_length(length: int, mesh: Mesh | None) -> int:
    """``length`` rounded up to a multiple of the mesh's ``sequence`` size."""
    sp = axis_size(mesh, SEQUENCE)
    return -(-length // sp) * sp


def pad_tokens(x: jax.Array, length: int, axis: int = 1) -> jax.Array:
    """Zero-pad ``x`` along ``axis`` to ``length`` (no-op when already that long)."""
    extra = length - x.shape[axis]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mesh: Mesh | None,
    *,
    self_attention: bool,
    valid_length: int | None = None,
    segment_ids: SegmentIds | None = None,
    kv_mask: jax.Array | None = None,
    implementation: str = "auto",
    block_size: int | None = None,
    interpret: bool = False,
) -> jax.Array:
    """Attention of a model that may run on a mesh: the one entry point model code calls.

    Args:
        q: ``(B, Lq, N, K)`` queries (video tokens).
        k, v: ``(B, Lk, N, K)``: the same tokens (``self_attention``) or a context.
        mesh: the ``(data, tensor, sequence)`` mesh, or None for the single-device path.
        self_attention: True: keys are the (token-split) video tokens -> Ulysses; False: keys
            are a context held whole on every device -> local attention.
        valid_length: tokens before it are real, the rest padding (self-attention only):
            padded keys are masked.
        segment_ids: self-attention only, instead of ``valid_length``: per-token ids of the whole
            sequence, ``(B, Lq)`` and ``(B, Lk)`` (:class:`~vidax.nn.attention.SegmentIds`; on a
            mesh they are split over the batch only and read after the all-to-all).
        kv_mask: ``(B, Lk)`` 0/1 (or bool) mask of the context keys (cross-attention only):
            keys with 0 are not attended (a tokenizer's attention mask); None = all attended.
        implementation, block_size, interpret: see :func:`vidax.nn.attention.dot_product_attention`.

    Returns:
        ``(B, Lq, N, K)`` in ``q.dtype``.

    Raises:
        InputError: ``segment_ids`` with ``valid_length`` or with ``self_attention=False``;
            ``kv_mask`` with ``self_attention``, or not ``(B, Lk)``.
    """
    kw = dict(implementation=implementation, block_size=block_size, interpret=interpret)
    if segment_ids is not None and (valid_length is not None or not self_attention):
        raise InputError("attention: segment_ids is for self-attention and replaces valid_length; pass one.")
    if kv_mask is not None:
        if self_attention:
            raise InputError("attention: kv_mask masks a context; self-attention takes valid_length.")
        if tuple(kv_mask.shape) != (k.shape[0], k.shape[1]):
            raise InputError(
                f"attention: kv_mask must be (B, Lk)={(k.shape[0], k.shape[1])}; got {tuple(kv_mask.shape)}."
            )
    if mesh is None:
        seg = segment_ids
        if self_attention and valid_length is not None and valid_length < k.shape[1]:
            seg = SegmentIds.for_padding(q.shape[0], q.shape[1], k.shape[1], valid_length, valid_length)
        if kv_mask is not None:
            seg = _context_segments(q, kv_mask)
        return dot_product_attention(q, k, v, segment_ids=seg, **kw)
    if self_attention:
        return ulysses_attention(q, k, v, mesh, valid_length=valid_length, segment_ids=segment_ids, **kw)
    return local_attention(q, k, v, mesh, kv_mask=kv_mask, **kw)


def _context_segments(q: jax.Array, kv_mask: jax.Array) -> SegmentIds:
    """Every query in segment 1, context key j in segment ``kv_mask[b, j] != 0``."""
    return SegmentIds.for_mask(jnp.ones(q.shape[:2], jnp.int32), kv_mask)


def ulysses_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mesh: Mesh,
    *,
    valid_length: int | None = None,
    segment_ids: SegmentIds | None = None,
    implementation: str = "auto",
    block_size: int | None = None,
    interpret: bool = False,
) -> jax.Array:
    """Sequence-parallel self-attention (DeepSpeed-Ulysses) of token-split q, k, v.

    Args:
        q, k, v: ``(B, L, N, K)`` global arrays (any sharding; they are resharded to batch over
            ``data``, tokens over ``sequence``, heads over ``tensor``).
        mesh: the mesh.
        valid_length: real tokens (the rest is padding, masked as keys); None = all real.
        segment_ids: instead of ``valid_length``, full-length ids ``(B, L)`` (split over
            ``data`` with the batch, whole along L), applied after the all-to-all.
        implementation, block_size, interpret: of the local attention.

    Returns:
        ``(B, L, N, K)``, sharded like the input spec.

    Raises:
        InputError: ``L`` not divisible by ``sequence``, or ``N`` by ``tensor x sequence``.
    """
    sp = axis_size(mesh, SEQUENCE)
    b, length, heads, _ = q.shape
    spec = logical_spec(_TOKENS, mesh, q.shape)
    if length % sp:
        raise InputError(
            f"ulysses_attention: {length} tokens do not split over sequence={sp}; pad them first "
            "(vidax.parallel.ulysses.pad_tokens to padded_length) and pass valid_length."
        )
    local_heads = heads // axis_size(mesh, spec[2]) if len(spec) > 2 and spec[2] else heads
    if local_heads % sp:
        raise InputError(
            f"ulysses_attention: {heads} heads ({local_heads} per tensor shard) do not split over "
            f"sequence={sp}; heads must divide by tensor x sequence."
        )
    mask = valid_length is not None and valid_length < length

    def body(q, k, v, seg=None):
        if sp > 1:  # (b, L/sp, n, K) -> (b, L, n/sp, K)
            q, k, v = (jax.lax.all_to_all(t, SEQUENCE, 2, 1, tiled=True) for t in (q, k, v))
        if mask:
            seg = SegmentIds.for_padding(q.shape[0], length, length, valid_length, valid_length)
        out = dot_product_attention(
            q,
            k,
            v,
            segment_ids=seg,
            implementation=implementation,
            block_size=block_size,
            interpret=interpret,
        )
        if sp > 1:  # back to (b, L/sp, n, K)
            out = jax.lax.all_to_all(out, SEQUENCE, 1, 2, tiled=True)
        return out

    if segment_ids is not None:
        ids = PartitionSpec(spec[0] if len(spec) else None)
        seg_spec = dataclasses.replace(segment_ids, q=ids, kv=ids)
        fn = jax.shard_map(body, mesh=mesh, in_specs=(spec, spec, spec, seg_spec), out_specs=spec, check_vma=False)
        return fn(q, k, v, segment_ids)
    fn = jax.shard_map(body, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    return fn(q, k, v)


def mesh_kv_heads(mesh: Mesh | None, heads: int, kv_heads: int) -> int:
    """How many key/value heads grouped-query attention runs with on ``mesh``: ``kv_heads`` when
    they split over ``tensor x sequence`` (each device then holds the K/V heads of its query
    heads), else the fewest repeats ``r·kv_heads`` (each head repeated ``r`` times in place, as
    ``repeat_interleave``, so query head ``n`` still reads a copy of K/V head ``n // (N / N_kv)``)
    that split and divide ``heads``. ``heads`` itself splits (:func:`~vidax.parallel.mesh.check_heads`)."""
    split = axis_size(mesh, TENSOR) * axis_size(mesh, SEQUENCE)
    for r in range(1, heads // kv_heads + 1):
        n = r * kv_heads
        if n % split == 0 and heads % n == 0:
            return n
    return heads


def repeat_kv_heads(x: jax.Array, heads: int) -> jax.Array:
    """``(B, L, N_kv, K)`` -> ``(B, L, heads, K)``, each head repeated in place (``repeat_interleave``)."""
    return x if x.shape[2] == heads else jnp.repeat(x, heads // x.shape[2], axis=2)


def two_pathway_attention(
    q1: jax.Array,
    k1: jax.Array,
    v1: jax.Array,
    q2: jax.Array,
    k2: jax.Array,
    v2: jax.Array,
    mesh: Mesh | None,
    *,
    k1_for_2: jax.Array | None = None,
    kv_mask: jax.Array | None = None,
    implementation: str = "auto",
    block_size: int | None = None,
    interpret: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """The two-pathway attention of a joint sequence ``[x1; x2]`` (Cosmos 3's understanding and
    generation tokens): ``x1``'s queries attend ``x1``'s keys causally (``j <= i``) and never
    ``x2``'s; ``x2``'s queries attend every key of ``[x1; x2]`` that ``kv_mask`` allows.

    Args:
        q1, k1, v1: the first stream ``(B, L1, N, K)`` / ``(B, L1, N_kv, K)``.
        q2, k2, v2: the second stream ``(B, L2, N, K)`` / ``(B, L2, N_kv, K)``.
        mesh: the mesh (tokens over ``sequence``, heads over ``tensor``, batch over ``data``) or
            None (one device). On a mesh each stream goes through the Ulysses all-to-all and
            both attentions run on whole sequences for the device's heads; grouped K/V heads are
            repeated to :func:`mesh_kv_heads` first.
        k1_for_2: the first stream's keys as the second stream attends them (Cosmos 3 Edge's
            ``k_norm_und_for_gen``), shaped as ``k1``; None: ``k1``.
        kv_mask: ``(B, L1 + L2)`` 0/1 mask of the keys the second stream attends (prompt
            padding, the mesh's sequence padding); None: all. The first stream's causal mask
            needs none as long as its padding is trailing.
        implementation, block_size, interpret: of the local attention.

    Returns:
        ``(o1 (B, L1, N, K), o2 (B, L2, N, K))`` in ``q1.dtype``.

    Raises:
        InputError: on a mesh, ``L1`` or ``L2`` not divisible by ``sequence``; ``kv_mask`` not
            ``(B, L1 + L2)``.
    """
    kw = dict(implementation=implementation, block_size=block_size, interpret=interpret)
    k1_for_2 = k1 if k1_for_2 is None else k1_for_2
    b, l1, l2 = q1.shape[0], q1.shape[1], q2.shape[1]
    if kv_mask is not None and tuple(kv_mask.shape) != (b, l1 + l2):
        raise InputError(
            f"two_pathway_attention: kv_mask must be (B, L1 + L2)={(b, l1 + l2)}; got {tuple(kv_mask.shape)}."
        )
    masks = () if kv_mask is None else (jnp.asarray(kv_mask),)
    if mesh is None:
        return _two_pathways(q1, k1, v1, q2, k2, v2, k1_for_2, *masks, **kw)
    sp = axis_size(mesh, SEQUENCE)
    if l1 % sp or l2 % sp:
        raise InputError(
            f"two_pathway_attention: the streams' {l1} and {l2} tokens must each split over "
            f"sequence={sp}; pad them (vidax.parallel.ulysses.pad_tokens) and mask the padding."
        )
    kv_heads = mesh_kv_heads(mesh, q1.shape[2], k1.shape[2])
    k1, v1, k2, v2, k1_for_2 = (repeat_kv_heads(t, kv_heads) for t in (k1, v1, k2, v2, k1_for_2))
    tensors = (q1, k1, v1, q2, k2, v2, k1_for_2)
    specs = tuple(logical_spec(_TOKENS, mesh, t.shape) for t in tensors)
    batch = specs[0][0] if len(specs[0]) else None
    specs = tuple(PartitionSpec(batch, *tuple(s)[1:]) for s in specs)  # one batch split for all

    def body(*args):
        qkv, mask = args[:7], args[7:]
        if sp > 1:  # (b, L/sp, n, K) -> (b, L, n/sp, K)
            qkv = tuple(jax.lax.all_to_all(t, SEQUENCE, 2, 1, tiled=True) for t in qkv)
        o1, o2 = _two_pathways(*qkv, *mask, **kw)
        if sp > 1:  # back to (b, L/sp, n, K)
            o1, o2 = (jax.lax.all_to_all(o, SEQUENCE, 1, 2, tiled=True) for o in (o1, o2))
        return o1, o2

    mask_specs = (PartitionSpec(batch),) * len(masks)
    fn = jax.shard_map(body, mesh=mesh, in_specs=(*specs, *mask_specs), out_specs=(specs[0], specs[3]), check_vma=False)
    return fn(*tensors, *masks)


def _two_pathways(q1, k1, v1, q2, k2, v2, k1_for_2, *mask, **kw) -> tuple[jax.Array, jax.Array]:
    """:func:`two_pathway_attention` on whole sequences: ``q1`` over ``k1`` causally, ``q2`` over
    ``[k1_for_2; k2]`` (``mask``: the keys' 0/1 mask, or none); ``kw``: of the attention."""
    o1 = dot_product_attention(q1, k1, v1, causal=True, **kw)
    seg = _context_segments(q2, mask[0]) if mask else None
    o2 = dot_product_attention(
        q2, jnp.concatenate([k1_for_2, k2], axis=1), jnp.concatenate([v1, v2], axis=1), segment_ids=seg, **kw
    )
    return o1, o2


def local_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mesh: Mesh,
    *,
    kv_mask: jax.Array | None = None,
    implementation: str = "auto",
    block_size: int | None = None,
    interpret: bool = False,
) -> jax.Array:
    """Cross-attention of token-split queries to a context held whole on every device.

    Args:
        q: ``(B, Lq, N, K)`` (batch over ``data``, tokens over ``sequence``, heads over ``tensor``).
        k, v: ``(B, Lk, N, K)`` context (batch over ``data``, heads over ``tensor``, tokens whole).
        mesh: the mesh.
        kv_mask: ``(B, Lk)`` 0/1 mask of the context keys (batch split as ``k``), or None.
        implementation, block_size, interpret: of the local attention.

    Returns:
        ``(B, Lq, N, K)`` sharded like ``q``.
    """
    q_spec = logical_spec(_TOKENS, mesh, q.shape)
    kv_spec = logical_spec(_CONTEXT, mesh, k.shape)
    # The batch split must agree between queries and context.
    if (q_spec[0] if len(q_spec) else None) != (kv_spec[0] if len(kv_spec) else None):
        q_spec = PartitionSpec(None, *tuple(q_spec)[1:])
        kv_spec = PartitionSpec(None, *tuple(kv_spec)[1:])

    def body(q, k, v, *mask):
        seg = _context_segments(q, mask[0]) if mask else None
        return dot_product_attention(
            q, k, v, segment_ids=seg, implementation=implementation, block_size=block_size, interpret=interpret
        )

    masks, mask_specs = (), ()
    if kv_mask is not None:
        masks, mask_specs = (kv_mask,), (PartitionSpec(*tuple(kv_spec)[:1]),)
    fn = jax.shard_map(
        body, mesh=mesh, in_specs=(q_spec, kv_spec, kv_spec, *mask_specs), out_specs=q_spec, check_vma=False
    )
    return fn(q, k, v, *masks)
