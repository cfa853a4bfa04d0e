"""vidax.nn.attention's causal mask, key-padding segments, grouped-query heads and additive bias on
every implementation against ``torch.nn.functional.scaled_dot_product_attention`` (``is_causal``,
boolean and float ``attn_mask``, ``enable_gqa=True``); the cuDNN path's arguments and refusals
(no GPU here) by what it hands to ``jax.nn.dot_product_attention``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.parity.helpers import max_rel_err
from vidax.errors import InputError
from vidax.nn import attention as attn
from vidax.nn.attention import SegmentIds, choose_implementation, dot_product_attention

# fp32 against torch's math SDPA: the same sums in another order (torch: one softmax over the
# whole row; blockwise / Pallas: per block with rescaling), a few tens of float32 ulps at most.
# 1e-5 relative leaves room for that and is still far below any masking error (>1e-2).
TOL = 1e-5
B, N, N_KV, K = 2, 6, 2, 16
IMPLS = ["xla", "blockwise", "pallas_tpu"]


def _qkv(lq, lk, seed, n_kv=N_KV):
    g = np.random.default_rng(seed)
    q = 2.0 * g.standard_normal((B, lq, N, K))  # large scores: the online max / rescale matters
    k = g.standard_normal((B, lk, n_kv, K))
    v = g.standard_normal((B, lk, n_kv, K))
    return tuple(np.asarray(a, np.float32) for a in (q, k, v))


def _ours(impl, q, k, v, causal=False, **kw):
    """vidax's attention, jitted; ``kw`` (segment_ids, bias) are traced arguments."""
    fn = jax.jit(
        lambda q, k, v, kw: dot_product_attention(
            q, k, v, implementation=impl, block_size=5, interpret=True, causal=causal, **kw
        )
    )
    return np.asarray(fn(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), kw))


def _torch(q, k, v, attn_mask=None, is_causal=False):
    """torch SDPA in vidax's (B, L, N, K) layout, K/V heads grouped with enable_gqa."""
    t = [torch.from_numpy(np.array(x)).permute(0, 2, 1, 3) for x in (q, k, v)]
    mask = None if attn_mask is None else torch.from_numpy(np.asarray(attn_mask))
    out = F.scaled_dot_product_attention(*t, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
    return out.permute(0, 2, 1, 3).numpy()


def _lower_right(lq, lk):
    """(Lq, Lk) bool: key j visible to query i iff j <= i + Lk - Lq (torch's causal_lower_right)."""
    return np.tril(np.ones((lq, lk), bool), k=lk - lq)


@pytest.mark.parametrize("impl", IMPLS)
def test_causal_gqa_matches_torch_is_causal(impl):
    q, k, v = _qkv(13, 13, seed=1)
    want = _torch(q, k, v, is_causal=True)
    err = max_rel_err(_ours(impl, q, k, v, causal=True), want)
    assert err < TOL, err
    # The test sees the mask: without it the reference moves far more than the tolerance.
    assert max_rel_err(_torch(q, k, v), want) > 1e-1
    assert max_rel_err(_ours(impl, q, k, v), want) > 1e-1


def test_causal_is_bottom_right_as_torch_causal_lower_right():
    """Lq != Lk: the queries are the last Lq of the Lk positions (Llama with a KV cache)."""
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = _qkv(13, 17, seed=2)
    t = [torch.from_numpy(np.array(x)).permute(0, 2, 1, 3) for x in (q, k, v)]
    kv = [torch.repeat_interleave(x, N // N_KV, dim=1) for x in t[1:]]  # the bias class has no GQA
    ref = F.scaled_dot_product_attention(t[0], *kv, attn_mask=causal_lower_right(13, 17))
    ref = ref.permute(0, 2, 1, 3).numpy()
    np.testing.assert_allclose(ref, _torch(q, k, v, attn_mask=_lower_right(13, 17)), rtol=0, atol=1e-6)
    for impl in IMPLS:
        err = max_rel_err(_ours(impl, q, k, v, causal=True), ref)
        assert err < TOL, (impl, err)
    # top-left (torch is_causal) would differ
    assert max_rel_err(_torch(q, k, v, is_causal=True), ref) > 1e-1


@pytest.mark.parametrize("impl", IMPLS)
def test_more_queries_than_keys_causal(impl):
    """Lq > Lk: the first Lq - Lk queries see no key (zeros on xla / blockwise); the rest match."""
    q, k, v = _qkv(17, 13, seed=3)
    got = _ours(impl, q, k, v, causal=True)
    want = _torch(q[:, 4:], k, v, attn_mask=_lower_right(13, 13))
    assert max_rel_err(got[:, 4:], want) < TOL
    if impl != "pallas_tpu":  # rows with no key are unspecified there
        assert np.all(got[:, :4] == 0)


@pytest.mark.parametrize("impl", ["xla", "blockwise"])
def test_block_causal_matches_a_boolean_mask(impl):
    """causal_block=4 over 12 tokens with key padding: query i attends key j iff j // 4 <= i // 4
    (blocks straddle blockwise's key blocks of 5); the TPU and GPU kernels refuse it."""
    q, k, v = _qkv(12, 12, seed=21)
    blocks = np.arange(12) // 4
    seg = SegmentIds.for_padding(B, 12, 12, 10, 10)
    want = _torch(q[:, :10], k[:, :10], v[:, :10], attn_mask=blocks[:10, None] >= blocks[None, :10])
    fn = jax.jit(
        lambda q, k, v, seg: dot_product_attention(
            q, k, v, implementation=impl, block_size=5, causal=True, causal_block=4, segment_ids=seg
        )
    )
    got = np.asarray(fn(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), seg))
    assert max_rel_err(got[:, :10], want) < TOL
    assert max_rel_err(_ours(impl, q, k, v, causal=True, segment_ids=seg)[:, :10], want) > 1e-1
    for fast in ("pallas_tpu", "cudnn"):
        assert "not in blocks of causal_block=4" in attn.unavailable_reason(fast, q, k=k, causal=True, causal_block=4)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("lk", [13, 17])
def test_key_padding_segments_with_causal(impl, lk):
    """Left padding in batch 0, right padding in batch 1, as a tokenizer mask -> segment ids,
    combined with causal: real query rows equal torch SDPA with the boolean mask."""
    lq = 13
    q, k, v = _qkv(lq, lk, seed=4 + lk)
    kv_mask = np.ones((B, lk), bool)
    kv_mask[0, :3] = False  # left padding
    kv_mask[1, lk - 5 :] = False  # right padding
    q_mask = kv_mask[:, lk - lq :]
    bool_mask = _lower_right(lq, lk)[None, None] & kv_mask[:, None, None, :]
    want = _torch(q, k, v, attn_mask=bool_mask)
    seg = SegmentIds.for_mask(q_mask, kv_mask)
    got = _ours(impl, q, k, v, causal=True, segment_ids=seg)
    real = q_mask.astype(bool)
    # Padded query rows: torch gives nan (left) or attends real keys; vidax attends padding. Dropped.
    err = max_rel_err(got[real], want[real])
    assert err < TOL, err
    assert max_rel_err(_torch(q, k, v, attn_mask=_lower_right(lq, lk))[real], want[real]) > 1e-2


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bias_shape", [(1, N, 13, 17), (B, 1, 13, 17), (B, N, 13, 17)])
def test_bias_matches_torch_float_mask(impl, bias_shape):
    q, k, v = _qkv(13, 17, seed=5)
    bias = np.random.default_rng(6).standard_normal(bias_shape).astype(np.float32) * 2.0
    bias[..., 3] = -np.inf  # one masked key everywhere (a -inf bias masks)
    want = _torch(q, k, v, attn_mask=bias)
    err = max_rel_err(_ours(impl, q, k, v, bias=jnp.asarray(bias)), want)
    assert err < TOL, err
    assert max_rel_err(_torch(q, k, v), want) > 1e-1


@pytest.mark.parametrize("impl", IMPLS)
def test_bias_causal_segments_gqa_together(impl):
    q, k, v = _qkv(13, 13, seed=7)
    bias = np.random.default_rng(8).standard_normal((1, N, 13, 13)).astype(np.float32)
    mask = np.ones((B, 13), bool)
    mask[1, :4] = False
    allowed = _lower_right(13, 13)[None, None] & mask[:, None, None, :]
    want = _torch(q, k, v, attn_mask=np.where(allowed, bias, -np.inf).astype(np.float32))
    got = _ours(impl, q, k, v, causal=True, bias=jnp.asarray(bias), segment_ids=SegmentIds.for_mask(mask))
    err = max_rel_err(got[mask], want[mask])
    assert err < TOL, err


@pytest.mark.parametrize("impl", ["xla", "blockwise"])
def test_fully_masked_rows_give_zeros(impl):
    q, k, v = _qkv(13, 17, seed=9)
    bias = np.zeros((1, 1, 13, 17), np.float32)
    bias[..., 5, :] = -np.inf  # query 5 sees nothing
    seg = SegmentIds(jnp.asarray(np.r_[np.zeros(12), 3][None].repeat(B, 0), jnp.int32), jnp.zeros((B, 17), jnp.int32))
    out = _ours(impl, q, k, v, causal=True, bias=jnp.asarray(bias), segment_ids=seg)
    assert np.all(np.isfinite(out))
    assert np.all(out[:, 5] == 0) and np.all(out[:, 12] == 0)  # bias -inf row; no key in segment 3
    assert np.abs(out[:, 4]).max() > 0.1


@pytest.mark.parametrize("impl", ["xla", "blockwise"])
def test_gqa_does_not_repeat_kv(impl):
    """The lowered program holds no (B, Lk, N, K) (or heads-major) copy of K or V."""
    q, k, v = (jnp.asarray(a) for a in _qkv(13, 17, seed=10))
    text = (
        jax.jit(lambda q, k, v: dot_product_attention(q, k, v, implementation=impl, block_size=5))
        .lower(q, k, v)
        .as_text()
    )
    for shape in ("2x17x6x16", "2x6x17x16", "4x2x5x6x16"):
        assert shape not in text, shape
    want = _torch(*(np.asarray(t) for t in (q, k, v)))
    assert max_rel_err(np.asarray(dot_product_attention(q, k, v, implementation=impl, block_size=5)), want) < TOL


def test_mha_is_gqa_with_repeated_heads():
    q, k, v = _qkv(13, 17, seed=11)
    grouped = _ours("xla", q, k, v, causal=True)
    rep = _ours("xla", q, np.repeat(k, 3, axis=2), np.repeat(v, 3, axis=2), causal=True)
    assert max_rel_err(grouped, rep) < TOL


def test_bad_mask_arguments():
    q, k, v = (jnp.asarray(a) for a in _qkv(13, 17, seed=12))
    with pytest.raises(InputError, match=r"bias must be float \(2 or 1, 6 or 1, 13, 17\)"):
        dot_product_attention(q, k, v, bias=jnp.zeros((1, 2, 13, 17)))
    with pytest.raises(InputError, match=r"got int32 \(1, 1, 13, 17\)"):
        dot_product_attention(q, k, v, bias=jnp.zeros((1, 1, 13, 17), jnp.int32))
    with pytest.raises(InputError, match=r"got float32 \(13, 17\)"):
        dot_product_attention(q, k, v, bias=jnp.zeros((13, 17)))
    with pytest.raises(InputError, match="causal=1 must be a bool"):
        dot_product_attention(q, k, v, causal=1)
    with pytest.raises(InputError, match="causal_block=0 must be a positive int"):
        dot_product_attention(q, k, v, causal=True, causal_block=0)


# --------------------------------------------------------------------------- cuDNN (no GPU here)


def _bf16(*arrays):
    return tuple(jnp.asarray(a, jnp.bfloat16) for a in arrays)


def test_cudnn_refuses_bottom_right_causal_and_auto_avoids_it(monkeypatch):
    monkeypatch.setattr(attn, "backend", lambda: "gpu")
    q, k, v = _bf16(*_qkv(13, 17, seed=13))
    with pytest.raises(InputError, match=r"top-left aligned .* Lq=13, Lk=17"):
        dot_product_attention(q, k, v, implementation="cudnn", causal=True)
    big_q = jnp.zeros((1, 4096, N, K), jnp.bfloat16)
    big_k = jnp.zeros((1, 4100, N_KV, K), jnp.bfloat16)
    assert choose_implementation(big_q, big_k, causal=True) == "blockwise"
    assert choose_implementation(big_q, big_k) == "cudnn"
    assert choose_implementation(big_q, big_q[:, :, :N_KV], causal=True) == "cudnn"


def test_cudnn_call_passes_causal_bias_and_grouped_kv(monkeypatch):
    """What the cudnn path hands to jax.nn.dot_product_attention: is_causal, GQA K/V as they are
    (cuDNN groups natively), the bias in the input dtype with -inf raised to the wrapper's mask
    value, padding lengths."""
    seen = {}

    def fake(q, k, v, bias=None, **kw):
        seen.update(kw, k_shape=k.shape, bias=bias)
        return q

    monkeypatch.setattr(attn, "backend", lambda: "gpu")
    monkeypatch.setattr(jax.nn, "dot_product_attention", fake)
    q, k, v = _bf16(*_qkv(16, 16, seed=14))
    bias = np.zeros((B, 1, 16, 16), np.float32)
    bias[:, :, :, 2] = -np.inf
    seg = SegmentIds.for_padding(B, 16, 16, jnp.array([16, 11]), jnp.array([16, 11]))
    dot_product_attention(q, k, v, implementation="cudnn", causal=True, bias=jnp.asarray(bias), segment_ids=seg)
    assert seen["is_causal"] is True and seen["implementation"] == "cudnn"
    assert seen["k_shape"] == (B, 16, N_KV, K)
    assert seen["bias"].dtype == jnp.bfloat16 and seen["bias"].shape == (B, 1, 16, 16)
    b = np.asarray(seen["bias"], np.float32)
    assert np.all(b[..., 2] == -(2 << 40)) and np.all(b[..., 3] == 0)
    assert np.asarray(seen["key_value_seq_lengths"]).tolist() == [16, 11]
    seen.clear()
    dot_product_attention(q, k, v, implementation="cudnn")
    assert seen["is_causal"] is False and seen["bias"] is None


def test_context_key_mask_on_and_off_the_mesh():
    """``vidax.parallel.ulysses.attention(kv_mask=...)``: cross-attention to a padded context
    (valid lengths 5 and 2 of 7) equals torch SDPA with the boolean key mask, on one device and
    inside ``local_attention``'s shard_map (data=2 x tensor=2 x sequence=2 of the fake CPUs)."""
    from vidax.parallel.mesh import make_mesh
    from vidax.parallel.ulysses import attention as mesh_attention

    q, k, v = _qkv(12, 7, seed=11, n_kv=N)
    mask = (np.arange(7)[None] < np.array([5, 2])[:, None]).astype(np.int32)
    with torch.no_grad():
        want = (
            F.scaled_dot_product_attention(
                *(torch.from_numpy(a).transpose(1, 2) for a in (q, k, v)),
                attn_mask=torch.from_numpy(mask.astype(bool))[:, None, None, :],
            )
            .transpose(1, 2)
            .numpy()
        )
    mesh = make_mesh(2, 2, 2, devices=jax.devices()[:8])
    for m in (None, mesh):
        fn = jax.jit(lambda q, k, v, km: mesh_attention(q, k, v, m, self_attention=False, kv_mask=km))
        got = np.asarray(fn(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask)))
        assert max_rel_err(got, want) < TOL, m
    unmasked = np.asarray(mesh_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), None, self_attention=False))
    assert max_rel_err(unmasked, want) > 1e-2  # the mask matters
    with pytest.raises(InputError, match="kv_mask"):
        mesh_attention(
            jnp.asarray(q),
            jnp.asarray(q),
            jnp.asarray(q),
            None,
            self_attention=True,
            kv_mask=jnp.ones((B, 12), jnp.int32),
        )
