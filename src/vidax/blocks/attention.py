"""One attention module for every family's transformer, configured by data (:class:`AttentionConfig`).

Parameter names are diffusers' (``to_q``, ``to_k``, ``to_v``, ``to_out.0``, ``norm_q``, ``norm_k``,
``add_q_proj``, ``add_k_proj``, ``add_v_proj``, ``norm_added_q``, ``norm_added_k``,
``to_add_out``, ``to_gate_logits``), so a family's checkpoint key rules stay rules. What each
family's attention is, as data::

    Wan self        AttentionConfig(D, N, K, qk_norm="rms", rope="interleaved")
    Wan cross (I2V) AttentionConfig(D, N, K, qk_norm="rms", added="image_kv")
    CogVideoX       AttentionConfig(D, N, K, bias=..., qk_norm="layer_head", rope="interleaved")
    Cosmos          AttentionConfig(D, N, K, kv_dim=..., bias=False, out_bias=False, qk_norm="rms_head",
                                    rope="rotate_half")
    LTX-Video       AttentionConfig(D, N, K, kv_dim=..., qk_norm="rms", rope="interleaved",
                                    rope_full_width=True)
    HunyuanVideo    double: AttentionConfig(D, N, K, qk_norm="rms_head", rope=..., added="joint")
                    single: AttentionConfig(D, N, K, qk_norm="rms_head", rope=..., out=None)
                    refiner: AttentionConfig(D, N, K)
    LTX-2 a2v/v2a   AttentionConfig(D_q, N, K, kv_dim=D_kv, qk_norm="rms", rope="interleaved",
    (issue 21)                      rope_full_width=True, gate=True, context_tokens="seq")
                    with ``rope=`` (query table) and ``key_rope=`` (key table) per call
    Cosmos 3 MoT    AttentionConfig(D, N, K, kv_heads=N_kv, bias=..., out="linear", qk_norm="rms_head",
    (issue 24)                      rope="rotate_half", added="joint")
                    with ``AttentionMask(first_stream_causal=True)`` and ``added_rope=``
    Cosmos 3 Edge   the same with first_stream_qk_norm=False, first_key_norm_for_second=True

Data flow of one call (``B`` batch, ``L`` tokens, ``N`` heads, ``N_kv`` key/value heads, ``K``
head dim)::

    q = to_q(x); k, v = to_k(kv), to_v(kv)            (B, L, N·K), column-parallel (``heads``)
    qk_norm "rms": RMSNorm over N·K (all heads)        rope_full_width: rotate (B, L, N·K) as one head
    split heads (B, L, N, K)
    qk_norm "rms_head" / "layer_head[_plain]": per head over K rope: rotate per head (interleaved / rotate-half)
    attention (mesh mode from the token layouts, mask from :class:`AttentionMask`)
    [added="image_kv": + attention of q over add_k_proj / add_v_proj (norm_added_k) of the image]
    [gate: per head · 2·sigmoid(to_gate_logits(x))]
    to_out.0 (row-parallel)                            [joint: second stream through to_add_out]

Joint attention: ``x`` is a pair of streams ``(x1, x2)`` (HunyuanVideo ``(video, text)``, Cosmos 3
``(understanding, generation)``); each is projected (``added="joint"``: the second with the
``add_*`` projections and norms, else with the same ``to_*``), the RoPE ``rope`` rotates the
first stream and ``added_rope`` the second, and one attention runs over the concatenation
``[x1; x2]`` (or the two-pathway form, see :class:`AttentionMask`). The outputs are split back to
the pair.

Mesh modes, picked from the token layouts (all through :mod:`vidax.parallel.ulysses`):

* keys are the queries' own tokens (self- and joint attention): Ulysses all-to-all over
  ``sequence``, heads over ``tensor``;
* keys are a context held whole on every device (text, image; ``context_tokens="replicated"``):
  local attention, no communication;
* two-pathway joint attention (``AttentionMask(first_stream_causal=True)``, Cosmos 3): both
  streams through the Ulysses all-to-all, the first's causal mask and the second's key mask on
  the whole sequence per head group (:func:`vidax.parallel.ulysses.two_pathway_attention`);
  grouped K/V heads that do not split over ``tensor x sequence`` are repeated in place;
* keys are another token-split stream (``context_tokens="seq"``, LTX-2 audio <-> video): Ulysses
  all-to-all of both sides (each length a multiple of ``sequence``); with a ``kv_mask`` (padded
  keys) the keys are gathered whole and attended locally instead.

Precision: projections in the compute dtype, norm statistics, the RoPE rotation and the softmax in
float32 (see :mod:`vidax.nn.layers`, :func:`vidax.nn.rope.apply_rope`,
:func:`vidax.nn.attention.dot_product_attention`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import InputError
from vidax.nn.attention import SegmentIds, dot_product_attention
from vidax.nn.attention_neighbourhood import neighbourhood_attention
from vidax.nn.layers import Identity, LayerNorm, RMSNorm, linear
from vidax.nn.rope import apply_rope
from vidax.parallel.rules import constrain
from vidax.parallel.ulysses import attention as mesh_attention
from vidax.parallel.ulysses import two_pathway_attention, ulysses_attention

#: q / k norms: over all heads (diffusers ``rms_norm_across_heads``, weight ``(N·K,)``), RMS per
#: head (weight ``(K,)``), affine LayerNorm per head (CogVideoX).
QK_NORMS = (None, "rms", "rms_head", "layer_head", "layer_head_plain")
#: RoPE pair layouts (:func:`vidax.nn.rope.apply_rope`).
ROPE_LAYOUTS = (None, "interleaved", "rotate_half")
#: Extra keys / values: ``"image_kv"`` (Wan I2V: a second attention of the same queries over the
#: image tokens, summed), ``"joint"`` (the second stream of a joint attention has its own q/k/v).
ADDED = (None, "image_kv", "joint")
#: Output projection: diffusers' ``to_out = [Linear, Dropout]`` (``to_out.0``), a plain ``to_out``
#: linear (Cosmos 3), or none (HunyuanVideo single blocks, ``pre_only``).
OUTS = ("list", "linear", None)
#: Where a cross-attention context lives on a mesh.
CONTEXT_TOKENS = ("replicated", "seq")


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """What one attention layer is (static, hashable).

    Attributes:
        dim: query input width D.
        heads: query heads N.
        head_dim: K.
        kv_heads: key / value heads (GQA, ``heads % kv_heads == 0``); None = ``heads``.
        kv_dim: key / value input width (cross-attention context); None = ``dim``.
        out_dim: output width; None = ``dim``.
        bias: q / k / v (and ``add_*``) projection biases.
        out_bias: ``to_out`` / ``to_add_out`` bias.
        out: see :data:`OUTS`.
        qk_norm: see :data:`QK_NORMS`.
        qk_norm_eps: epsilon of the q / k norms.
        rope: pair layout of the rotation, or None (no RoPE).
        rope_full_width: the table ``(.., L, N·K/2)`` covers the whole width (LTX; LTX-2), each
            head rotated by its slice, after an ``"rms"`` norm; else one ``(.., L, K/2)`` table for
            every head.
        added: see :data:`ADDED`.
        added_kv_dim: input width of ``add_k_proj`` / ``add_v_proj`` (``"image_kv"``); None = ``dim``.
        gate: ``to_gate_logits`` ``Linear(dim, heads)``: each head's output times
            ``2·sigmoid(logits)`` (LTX-2 gated attention).
        context_tokens: see :data:`CONTEXT_TOKENS` (mesh layout of a cross-attention context).
        first_stream_qk_norm: joint attention: the first stream's q / k are normed (``norm_q`` /
            ``norm_k``); False: only the second stream's are (Cosmos 3 Edge, ``qk_norm_for_text``
            False).
        first_key_norm_for_second: two-pathway joint attention (``qk_norm="rms_head"``): the first
            stream's keys, as the second stream attends them, pass through their own per-head RMS
            norm ``k_norm_und_for_gen`` before the RoPE (Cosmos 3 Edge ``use_und_k_norm_for_gen``);
            the first stream's own attention uses them without it.
    """

    dim: int
    heads: int
    head_dim: int
    kv_heads: int | None = None
    kv_dim: int | None = None
    out_dim: int | None = None
    bias: bool = True
    out_bias: bool = True
    out: str | None = "list"
    qk_norm: str | None = None
    qk_norm_eps: float = 1e-6
    rope: str | None = None
    rope_full_width: bool = False
    added: str | None = None
    added_kv_dim: int | None = None
    gate: bool = False
    context_tokens: str = "replicated"
    first_stream_qk_norm: bool = True
    first_key_norm_for_second: bool = False

    def __post_init__(self):
        for name, value, valid in (
            ("qk_norm", self.qk_norm, QK_NORMS),
            ("rope", self.rope, ROPE_LAYOUTS),
            ("added", self.added, ADDED),
            ("out", self.out, OUTS),
            ("context_tokens", self.context_tokens, CONTEXT_TOKENS),
        ):
            if value not in valid:
                raise InputError(f"AttentionConfig: {name}={value!r} is not known; valid: {list(valid)}.")
        if self.heads % self.n_kv:
            raise InputError(f"AttentionConfig: heads={self.heads} must divide by kv_heads={self.kv_heads}.")
        if self.rope_full_width and self.qk_norm not in (None, "rms"):
            raise InputError(
                "AttentionConfig: rope_full_width rotates before the head split; it needs "
                f"qk_norm None or 'rms', got {self.qk_norm!r}."
            )
        if self.first_key_norm_for_second and (self.added != "joint" or self.qk_norm != "rms_head"):
            raise InputError(
                "AttentionConfig: first_key_norm_for_second needs added='joint' and qk_norm='rms_head'; "
                f"got added={self.added!r}, qk_norm={self.qk_norm!r}."
            )

    @property
    def n_kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AttentionMask:
    """Which keys each query attends (all given parts combined); a pytree (arrays traced).

    Attributes:
        valid_length: static; self-attention: tokens before it are real, the rest padding (masked
            as keys). None: all real.
        segment_ids: :class:`~vidax.nn.attention.SegmentIds` of the whole (joint) self-attention
            sequence, instead of ``valid_length`` (each prompt's real text in a joint sequence).
        kv_mask: ``(B, Lk)`` 0/1 mask of a cross-attention context's keys (a tokenizer mask).
        causal: static; query i attends keys ``j <= i + Lk - Lq`` (single device only).
        causal_block: static; with ``causal``, positions counted in blocks of this many tokens
            (block-causal: ``j // n <= (i + Lk - Lq) // n``, SkyReels-V2's frame blocks).
        window: static; query i attends keys ``|i - j| <= window`` only (a dense bias: single
            device and small problems only).
        bias: a dense additive float ``(B or 1, N or 1, Lq, Lk)`` (``-inf`` masks), single device
            and short sequences only (HunyuanVideo's token refiner).
        neighbourhood: static ``((T, H, W), (k_t, k_h, k_w))``; self-attention of row-major grid
            tokens: each query attends its 3D window, shifted inward at the borders
            (:func:`~vidax.nn.attention_neighbourhood.neighbourhood_attention`, blocked: no mask
            over the grid; single device only).
        first_stream_causal: static; joint attention of ``(x1, x2)``: ``x1`` attends itself
            causally and never ``x2``; ``x2`` attends ``[x1; x2]`` (Cosmos 3's two pathways: the
            understanding tokens' keys and values do not depend on the generation tokens), the
            keys masked by ``kv_mask`` ``(B, L1 + L2)`` when given; on a mesh too.
    """

    valid_length: int | None = dataclasses.field(default=None, metadata=dict(static=True))
    segment_ids: SegmentIds | None = None
    kv_mask: jax.Array | None = None
    causal: bool = dataclasses.field(default=False, metadata=dict(static=True))
    causal_block: int = dataclasses.field(default=1, metadata=dict(static=True))
    window: int | None = dataclasses.field(default=None, metadata=dict(static=True))
    bias: jax.Array | None = None
    first_stream_causal: bool = dataclasses.field(default=False, metadata=dict(static=True))
    neighbourhood: tuple | None = dataclasses.field(default=None, metadata=dict(static=True))


_NO_MASK = AttentionMask()


class Attention(nnx.Module):
    """One attention layer as :class:`AttentionConfig` describes it (see the module docstring).

    Args:
        config: the :class:`AttentionConfig`.
        attention: implementation for :func:`vidax.nn.attention.dot_product_attention`.
        dtype: compute dtype of the projections; param_dtype: initial parameter dtype.
        rngs: initialisation randomness.
        mesh: ``(data, tensor, sequence)`` mesh or None.
    """

    def __init__(self, config: AttentionConfig, attention: str, dtype, param_dtype, rngs: nnx.Rngs, mesh=None):
        c = self.config = config
        self.attention = attention
        self.mesh = mesh
        inner, inner_kv = c.heads * c.head_dim, c.n_kv * c.head_dim
        kv_dim = c.dim if c.kv_dim is None else c.kv_dim
        out_dim = c.dim if c.out_dim is None else c.out_dim

        def proj(din, dout, bias=c.bias):
            return linear(din, dout, dtype, param_dtype, rngs, use_bias=bias)

        def norm(width_all):
            if c.qk_norm == "rms":
                return RMSNorm(width_all, c.qk_norm_eps, param_dtype=param_dtype)
            if c.qk_norm == "rms_head":
                return RMSNorm(c.head_dim, c.qk_norm_eps, param_dtype=param_dtype)
            if c.qk_norm in ("layer_head", "layer_head_plain"):
                return LayerNorm(c.head_dim, c.qk_norm_eps, c.qk_norm == "layer_head")
            return None

        self.to_q = proj(c.dim, inner)
        self.to_k = proj(kv_dim, inner_kv)
        self.to_v = proj(kv_dim, inner_kv)
        self.norm_q = norm(inner) if c.first_stream_qk_norm else None
        self.norm_k = norm(inner_kv) if c.first_stream_qk_norm else None
        self.k_norm_und_for_gen = norm(inner_kv) if c.first_key_norm_for_second else None
        self.to_gate_logits = linear(c.dim, c.heads, dtype, param_dtype, rngs) if c.gate else None
        # Each attribute is assigned once (nnx fixes a None attribute as static).
        image, joint = c.added == "image_kv", c.added == "joint"
        added_dim = c.dim if c.added_kv_dim is None or joint else c.added_kv_dim
        self.add_q_proj = proj(c.dim, inner) if joint else None
        self.add_k_proj = proj(added_dim, inner_kv) if image or joint else None
        self.add_v_proj = proj(added_dim, inner_kv) if image or joint else None
        self.norm_added_q = norm(inner) if joint else None
        self.norm_added_k = norm(inner_kv) if image or joint else None
        self.to_add_out = proj(inner, out_dim, c.out_bias) if joint and c.out is not None else None
        if c.out == "list":
            self.to_out = nnx.List([proj(inner, out_dim, c.out_bias), Identity()])
        elif c.out == "linear":
            self.to_out = proj(inner, out_dim, c.out_bias)
        else:
            self.to_out = None

    # -- projections ---------------------------------------------------------------------------

    def _project(self, layer, norm, x, seq_axis, heads, rope):
        """``layer(x)`` (column-parallel), q/k norm, RoPE, split into heads: ``(B, L, heads, K)``."""
        c = self.config
        y = constrain(layer(x), ("batch", seq_axis, "heads"), self.mesh)
        if norm is not None and c.qk_norm == "rms":
            y = norm(y)
        if rope is not None and c.rope_full_width and c.rope == "interleaved":
            y = apply_rope(y[:, :, None], *rope, layout=c.rope)[:, :, 0]  # pairs never cross heads: one "head"
        if rope is not None and c.rope_full_width and c.rope == "rotate_half":
            # Each chunk's slice of the table (LTX-2 "split"): tokens x chunks as one axis (free
            # reshapes). The chunks are the heads, or the C of a (.., L, C, r) table (LTX-2's video
            # cross-modal table is cut into the video head count whatever the attention's heads).
            b, l, w = y.shape
            chunks = rope[0].shape[-2] if rope[0].ndim == 4 else heads
            lead = rope[0].shape[:-3] if rope[0].ndim == 4 else rope[0].shape[:-2]
            y = apply_rope(
                y.reshape(b, l * chunks, 1, w // chunks),
                *(r.reshape(*lead, l * chunks, -1) for r in rope),
                layout="rotate_half",
            ).reshape(b, l, w)
        y = y.reshape(*y.shape[:2], heads, c.head_dim)
        if norm is not None and c.qk_norm in ("layer_head", "layer_head_plain"):
            y = norm(y, y.dtype)
        elif norm is not None and c.qk_norm == "rms_head":
            y = norm(y)
        if rope is not None and not c.rope_full_width:
            y = apply_rope(y, *rope, layout=c.rope)
        return y

    def _qkv(self, x, kv, kv_axis, rope, key_rope, added: bool = False):
        c = self.config
        q_proj, k_proj, v_proj = self.to_q, self.to_k, self.to_v
        nq, nk = self.norm_q, self.norm_k
        if added:
            q_proj, k_proj, v_proj = self.add_q_proj, self.add_k_proj, self.add_v_proj
            nq, nk = self.norm_added_q, self.norm_added_k
        use_rope = c.rope is not None
        q = self._project(q_proj, nq, x, "seq", c.heads, rope if use_rope else None)
        k = self._project(
            k_proj, nk, kv, kv_axis, c.n_kv, (rope if key_rope is None else key_rope) if use_rope else None
        )
        v = self._project(v_proj, None, kv, kv_axis, c.n_kv, None)
        return q, k, v

    # -- attention -----------------------------------------------------------------------------

    def _attend(self, q, k, v, *, own_tokens: bool, mask: AttentionMask, causal: bool | None = None):
        """Attention of q over k, v with the mesh mode of the token layouts (module docstring)."""
        causal = mask.causal if causal is None else causal
        if mask.neighbourhood is not None:
            if self.mesh is not None or not own_tokens:
                raise InputError("Attention: a neighbourhood mask is a self-attention on a single device (mesh=None).")
            return neighbourhood_attention(q, k, v, *mask.neighbourhood)
        if causal or mask.window is not None or mask.bias is not None:
            if self.mesh is not None:
                raise InputError(
                    "Attention: causal, windowed and dense-bias masks run on a single device only (mesh=None)."
                )
            seg = mask.segment_ids
            if seg is None and own_tokens and mask.valid_length is not None and mask.valid_length < k.shape[1]:
                seg = SegmentIds.for_padding(q.shape[0], q.shape[1], k.shape[1], mask.valid_length, mask.valid_length)
            if seg is None and mask.kv_mask is not None and not own_tokens:
                seg = SegmentIds.for_mask(jnp.ones(q.shape[:2], jnp.int32), mask.kv_mask)
            bias = mask.bias
            if mask.window is not None:
                i = jnp.arange(q.shape[1])[:, None] + (k.shape[1] - q.shape[1])
                window = jnp.where(jnp.abs(i - jnp.arange(k.shape[1])[None]) <= mask.window, 0.0, -jnp.inf)[None, None]
                bias = window if bias is None else bias + window
            return dot_product_attention(
                q,
                k,
                v,
                implementation=self.attention,
                segment_ids=seg,
                causal=causal,
                bias=bias,
                causal_block=mask.causal_block,
            )
        if not own_tokens and self.config.context_tokens == "seq" and self.mesh is not None and mask.kv_mask is None:
            return ulysses_attention(q, k, v, self.mesh, implementation=self.attention)
        if own_tokens:
            return mesh_attention(
                q,
                k,
                v,
                self.mesh,
                self_attention=True,
                valid_length=mask.valid_length,
                segment_ids=mask.segment_ids,
                implementation=self.attention,
            )
        return mesh_attention(
            q, k, v, self.mesh, self_attention=False, kv_mask=mask.kv_mask, implementation=self.attention
        )

    def _out(self, out, x, layer):
        """Gate, merge heads, output projection (``layer``; None: none)."""
        if self.to_gate_logits is not None:  # out (B, L, N, K)
            gates = 2.0 * jax.nn.sigmoid(self.to_gate_logits(x).astype(jnp.float32))  # (B, L, N)
            out = (out.astype(jnp.float32) * gates[..., None]).astype(out.dtype)
        out = out.reshape(*out.shape[:2], -1)
        if layer is None:
            return out
        return layer(out)

    def _out_layer(self, second: bool = False):
        if second and self.config.added == "joint":
            return self.to_add_out
        return self.to_out[0] if self.config.out == "list" else self.to_out

    def __call__(
        self,
        x,
        context=None,
        *,
        rope=None,
        key_rope=None,
        added_rope=None,
        mask: AttentionMask | None = None,
        image=None,
        perturb=None,
    ):
        """One attention.

        Args:
            x: queries' tokens ``(B, L, dim)`` in the compute dtype, or a pair ``(x1, x2)`` of
                streams for joint attention (``(B, L1, dim)``, ``(B, L2, dim)``).
            context: cross-attention context ``(B, Lk, kv_dim)``; None = self-attention.
            rope: ``(cos, sin)`` float32 of the queries (and of the keys unless ``key_rope``):
                ``(L, K/2)`` or ``(B, L, K/2)`` per head, ``(.., N·K/2)`` with ``rope_full_width``;
                joint attention: of the first stream.
                A ``rotate_half`` full-width table may also be ``(.., L, C, r)``: the width cut into
                C chunks of ``2r`` channels each rotated by its row (instead of one per head).
            key_rope: the keys' own table (LTX-2 cross-modal attention), or None.
            added_rope: joint attention: the second stream's table, or None (not rotated).
            mask: :class:`AttentionMask`; None = every key attended.
            image: ``added="image_kv"``: image tokens ``(B, L_img, added_kv_dim)``, or None (then
                the image attention is skipped).
            perturb: self-attention only: ``(B,)`` float weights ``w`` that mix each sample's
                attention output ``a`` with its values ``v`` (per head, before the gate) as torch's
                ``lerp(v, a, w)``: 1 keeps the attention, 0 replaces it by the values (LTX-2's
                spatio-temporal guidance, ``LTX2PerturbedAttnProcessor``); None: the attention.

        Returns:
            ``(B, L, out_dim)`` in the compute dtype (``out=None``: the merged heads ``(B, L, N·K)``);
            a pair for joint attention.

        Raises:
            InputError: a causal or windowed mask on a mesh; a joint mask on a single stream.
        """
        mask = _NO_MASK if mask is None else mask
        if isinstance(x, (tuple, list)):
            return self._joint(x, rope, added_rope, mask)
        if mask.first_stream_causal:
            raise InputError("Attention: first_stream_causal needs a joint call with a pair of streams.")
        own = context is None
        kv = x if own else context
        kv_axis = "seq" if own or self.config.context_tokens == "seq" else "text_seq"
        q, k, v = self._qkv(x, kv, kv_axis, rope, key_rope)
        out = self._attend(q, k, v, own_tokens=own, mask=mask)
        if perturb is not None:
            if not own or self.config.n_kv != self.config.heads:
                raise InputError(
                    "Attention: perturb= mixes a self-attention's output with its values (kv_heads = heads)."
                )
            out = _lerp(v, out, perturb)
        if image is not None and self.config.added == "image_kv":
            k_img = self._project(self.add_k_proj, self.norm_added_k, image, "text_seq", self.config.n_kv, None)
            v_img = self._project(self.add_v_proj, None, image, "text_seq", self.config.n_kv, None)
            out = out + self._attend(q, k_img, v_img, own_tokens=False, mask=_NO_MASK)
        return self._out(out, x, self._out_layer())

    def _joint(self, streams, rope, added_rope, mask):
        x1, x2 = streams
        c = self.config
        q1, k1, v1 = self._qkv(x1, x1, "seq", rope if self.k_norm_und_for_gen is None else None, None)
        q2, k2, v2 = self._qkv(x2, x2, "seq", added_rope, None, added=c.added == "joint")
        k1_for_2 = k1
        if self.k_norm_und_for_gen is not None:  # q1, k1 came unrotated: norm the second pathway's copy, rotate
            k1_for_2 = self.k_norm_und_for_gen(k1)
            if c.rope is not None and rope is not None:
                q1, k1, k1_for_2 = (apply_rope(t, *rope, layout=c.rope) for t in (q1, k1, k1_for_2))
        if mask.first_stream_causal:
            if (
                mask.valid_length is not None
                or mask.segment_ids is not None
                or mask.causal
                or mask.window is not None
                or mask.bias is not None
            ):
                raise InputError(
                    "Attention: first_stream_causal combines with kv_mask only (the second stream's "
                    "key mask); got other masks too."
                )
            o1, o2 = two_pathway_attention(
                q1,
                k1,
                v1,
                q2,
                k2,
                v2,
                self.mesh,
                k1_for_2=k1_for_2,
                kv_mask=mask.kv_mask,
                implementation=self.attention,
            )
        else:
            cat = (jnp.concatenate(p, axis=1) for p in ((q1, q2), (k1, k2), (v1, v2)))
            out = self._attend(*cat, own_tokens=True, mask=mask)
            if self.to_gate_logits is None:  # merge the heads once, before the split
                out = out.reshape(*out.shape[:2], -1)
            n = x1.shape[1]
            o1, o2 = out[:, :n], out[:, n:]
        return self._out(o1, x1, self._out_layer()), self._out(o2, x2, self._out_layer(second=True))


def _lerp(start: jax.Array, end: jax.Array, weight: jax.Array) -> jax.Array:
    """torch's ``lerp(start, end, w)`` per sample (``weight`` ``(B,)``) in float32, rounded to
    ``end``'s dtype: ``start + w·(end - start)`` for ``w < 0.5``, else ``end - (end - start)·(1 - w)``
    (so ``w = 0`` gives ``start`` and ``w = 1`` gives ``end`` exactly)."""
    w = jnp.asarray(weight, jnp.float32).reshape((-1,) + (1,) * (end.ndim - 1))
    a, b = start.astype(jnp.float32), end.astype(jnp.float32)
    return jnp.where(w < 0.5, a + w * (b - a), b - (b - a) * (1 - w)).astype(end.dtype)
