"""The shared :class:`vidax.blocks.attention.Attention` expresses the attention of the coming
families, checked against their diffusers 0.42.1 modules (tiny, distinct dims, every parameter
randomised and copied by name, which also checks that the parameter names are diffusers').

* LTX-2 audio <-> video cross-attention (``LTX2Attention``): short queries over longer keys from
  another width, separate query and key RoPE tables over the full width (interleaved and split),
  per-head gated output.
* Cosmos 3's two-pathway attention (``Cosmos3PackedMoTAttention``): GQA, per-pathway projections
  and per-head RMS norms, the understanding tokens causal among themselves, the generation tokens
  over both.

The five existing families' attentions are checked by their own parity tests
(tests/parity/test_<family>_transformer.py), which run through this module.

fp32 tolerance 1e-5 relative: the same float32 arithmetic in another order (XLA vs torch), a
few ulps per operation; a wrong mask, table, gate or projection is off by > 1e-2.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.errors import InputError

diffusers = pytest.importorskip("diffusers")
FP32_TOL = 1e-5


def _copy_weights(ref: torch.nn.Module, ours: nnx.Module) -> None:
    """Every torch parameter into the module at the same dotted path (``weight`` -> ``kernel``
    transposed for a linear, ``scale`` for a norm); fails on a name the module lacks."""
    for name, p in ref.named_parameters():
        *path, leaf = name.split(".")
        mod = ours
        for part in path:
            mod = mod[int(part)] if part.isdigit() else getattr(mod, part)
        value = p.detach().numpy()
        if leaf == "weight":
            target, value = ("kernel", value.T) if value.ndim == 2 else ("scale", value)
        else:
            target = leaf
        getattr(mod, target)[...] = jnp.asarray(value)


def _rand(*shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
def test_ltx2_cross_modal_gated_attention(rope_type):
    from diffusers.models.transformers.transformer_ltx2 import LTX2Attention

    b, lq, lk, dq, dkv, heads, k = 2, 5, 11, 12, 10, 3, 4
    ref = LTX2Attention(
        dq,
        heads=heads,
        kv_heads=heads,
        dim_head=k,
        cross_attention_dim=dkv,
        rope_type=rope_type,
        apply_gated_attention=True,
    ).eval()
    randomize_torch_module(ref, seed=1)
    x, ctx = _rand(b, lq, dq, seed=2), _rand(b, lk, dkv, seed=3)
    ang_q, ang_k = _rand(b, lq, heads * k // 2, seed=4), _rand(b, lk, heads * k // 2, seed=5)
    if rope_type == "interleaved":  # (B, L, N·K), each angle twice
        full = lambda a: np.repeat(a, 2, axis=-1)  # noqa: E731
    else:  # (B, N, L, K/2) per head
        full = lambda a: a.reshape(b, a.shape[1], heads, k // 2).transpose(0, 2, 1, 3)  # noqa: E731
    with torch.no_grad():
        want = ref(
            torch.from_numpy(x),
            torch.from_numpy(ctx),
            query_rotary_emb=tuple(torch.from_numpy(full(f(ang_q))) for f in (np.cos, np.sin)),
            key_rotary_emb=tuple(torch.from_numpy(full(f(ang_k))) for f in (np.cos, np.sin)),
        ).numpy()
    cfg = AttentionConfig(
        dq,
        heads,
        k,
        kv_dim=dkv,
        qk_norm="rms",
        qk_norm_eps=1e-6,
        rope="interleaved" if rope_type == "interleaved" else "rotate_half",
        rope_full_width=True,
        gate=True,
        context_tokens="seq",
    )
    ours = Attention(cfg, "xla", jnp.float32, jnp.float32, nnx.Rngs(0))
    _copy_weights(ref, ours)
    got = ours(
        jnp.asarray(x),
        jnp.asarray(ctx),
        rope=(jnp.cos(ang_q), jnp.sin(ang_q)),
        key_rope=(jnp.cos(ang_k), jnp.sin(ang_k)),
    )
    assert max_rel_err(got, want) < FP32_TOL
    # The key table is used (another one gives another result).
    other = ours(
        jnp.asarray(x),
        jnp.asarray(ctx),
        rope=(jnp.cos(ang_q), jnp.sin(ang_q)),
        key_rope=(jnp.cos(2 * ang_k), jnp.sin(2 * ang_k)),
    )
    assert max_rel_err(other, want) > 1e-3


def test_cosmos3_two_pathway_gqa_attention():
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3PackedMoTAttention

    l_und, l_gen, d, heads, kv_heads, k = 6, 9, 16, 4, 2, 6
    ref = Cosmos3PackedMoTAttention(d, k, heads, kv_heads, attention_bias=True, rms_norm_eps=1e-6).eval()
    randomize_torch_module(ref, seed=7)
    und, gen = _rand(l_und, d, seed=8), _rand(l_gen, d, seed=9)
    ang_und, ang_gen = _rand(l_und, k // 2, seed=10), _rand(l_gen, k // 2, seed=11)
    half = lambda f, a: torch.from_numpy(np.concatenate([f(a), f(a)], axis=-1))  # noqa: E731 (rotate-half tables)
    with torch.no_grad():
        want = ref(
            torch.from_numpy(und),
            torch.from_numpy(gen),
            (half(np.cos, ang_und), half(np.sin, ang_und), half(np.cos, ang_gen), half(np.sin, ang_gen)),
        )
    cfg = AttentionConfig(
        d,
        heads,
        k,
        kv_heads=kv_heads,
        out="linear",
        qk_norm="rms_head",
        qk_norm_eps=1e-6,
        rope="rotate_half",
        added="joint",
    )
    ours = Attention(cfg, "xla", jnp.float32, jnp.float32, nnx.Rngs(0))
    _copy_weights(ref, ours)
    got = ours(
        (jnp.asarray(und)[None], jnp.asarray(gen)[None]),
        rope=(jnp.cos(ang_und), jnp.sin(ang_und)),
        added_rope=(jnp.cos(ang_gen), jnp.sin(ang_gen)),
        mask=AttentionMask(first_stream_causal=True),
    )
    for g, w in zip(got, want):
        assert max_rel_err(g[0], w.numpy()) < FP32_TOL
    # Without the two-pathway mask the understanding tokens would see the generation tokens.
    full = ours(
        (jnp.asarray(und)[None], jnp.asarray(gen)[None]),
        rope=(jnp.cos(ang_und), jnp.sin(ang_und)),
        added_rope=(jnp.cos(ang_gen), jnp.sin(ang_gen)),
    )
    assert max_rel_err(full[0][0], want[0].numpy()) > 1e-3


def test_windowed_mask_matches_dense_reference():
    b, length, d, heads, k, window = 1, 9, 8, 2, 4, 2
    ours = Attention(AttentionConfig(d, heads, k), "xla", jnp.float32, jnp.float32, nnx.Rngs(3))
    x = jnp.asarray(_rand(b, length, d, seed=12))
    got = ours(x, mask=AttentionMask(window=window))
    q, kk, v = (np.asarray(layer(x)).reshape(b, length, heads, k) for layer in (ours.to_q, ours.to_k, ours.to_v))
    s = np.einsum("bqnk,bsnk->bnqs", q, kk) / np.sqrt(k)
    i = np.arange(length)
    s = np.where(np.abs(i[:, None] - i[None]) <= window, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    out = np.einsum("bnqs,bsnk->bqnk", p / p.sum(-1, keepdims=True), v).reshape(b, length, -1)
    want = np.asarray(ours.to_out[0](jnp.asarray(out)))
    assert max_rel_err(got, want) < FP32_TOL
    assert max_rel_err(ours(x), want) > 1e-3


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(qk_norm="rms_per_token"), "qk_norm"),
        (dict(rope="half"), "rope"),
        (dict(kv_heads=3), "kv_heads"),
        (dict(qk_norm="rms_head", rope="interleaved", rope_full_width=True), "rope_full_width"),
        (dict(qk_norm="rms", added="joint", first_key_norm_for_second=True), "first_key_norm_for_second"),
    ],
)
def test_config_refuses(kw, match):
    with pytest.raises(InputError, match=match):
        AttentionConfig(8, 2, 4, **kw)
