"""vidax.nn.attention: blockwise (online softmax) == materialised == torch SDPA; dispatch rules."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.parity.helpers import max_rel_err
from vidax.errors import InputError
from vidax.nn import attention as attn
from vidax.nn.attention import dot_product_attention


def _qkv(b, lq, lk, n, k, seed=0, dtype=np.float32):
    g = np.random.default_rng(seed)
    q = g.standard_normal((b, lq, n, k)).astype(dtype)
    kk = g.standard_normal((b, lk, n, k)).astype(dtype)
    v = g.standard_normal((b, lk, n, k)).astype(dtype)
    return jnp.asarray(q), jnp.asarray(kk), jnp.asarray(v)


# fp32: blockwise and materialised attention sum the same terms in a different order (per block
# with rescaling), which costs a few float32 ulps: 2e-6 relative is ~20 ulps.
FP32_TOL = 2e-6


@pytest.mark.parametrize(
    "lq,lk,block",
    [(37, 53, 16), (5, 7, 3), (29, 16, 16), (13, 100, 7), (11, 1, 4), (9, 40, 64)],
)
def test_blockwise_equals_xla_odd_lengths(lq, lk, block):
    q, k, v = _qkv(2, lq, lk, 3, 12, seed=lq * 1000 + lk)
    # Make the scores large so the online max/rescale path is exercised.
    q = q * 3.0
    want = dot_product_attention(q, k, v, implementation="xla")
    got = jax.jit(lambda *a: dot_product_attention(*a, implementation="blockwise", block_size=block))(q, k, v)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_xla_matches_torch_sdpa():
    torch = pytest.importorskip("torch")
    q, k, v = _qkv(2, 19, 23, 3, 12, seed=3)
    want = (
        torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(np.array(t)).permute(0, 2, 1, 3) for t in (q, k, v))
        )
        .permute(0, 2, 1, 3)
        .numpy()
    )
    for impl in ("xla", "blockwise"):
        got = dot_product_attention(q, k, v, implementation=impl, block_size=8)
        assert max_rel_err(got, want) < FP32_TOL, impl


def test_custom_scale():
    q, k, v = _qkv(1, 6, 9, 2, 4, seed=4)
    a = dot_product_attention(q, k, v, implementation="blockwise", block_size=4, scale=0.3)
    b = dot_product_attention(q * 0.3 * 2.0, k, v, implementation="xla")  # 1/sqrt(4) = 0.5
    assert max_rel_err(a, b) < FP32_TOL
    c = dot_product_attention(q, k, v, implementation="xla")
    assert max_rel_err(a, c) > 1e-2


def test_bf16_blockwise_close_to_fp32():
    q, k, v = _qkv(2, 33, 45, 3, 16, seed=5)
    want = dot_product_attention(q, k, v, implementation="xla")
    got = dot_product_attention(
        q.astype(jnp.bfloat16),
        k.astype(jnp.bfloat16),
        v.astype(jnp.bfloat16),
        implementation="blockwise",
        block_size=8,
    )
    assert got.dtype == jnp.bfloat16
    # bf16 inputs (2^-9 relative rounding) and bf16 output rounding: ~1e-2 relative.
    assert max_rel_err(got.astype(jnp.float32), want) < 2e-2


def test_empty_keys_give_zeros():
    q, k, v = _qkv(1, 4, 0, 2, 8)
    for impl in ("xla", "blockwise", "auto"):
        out = dot_product_attention(q, k, v, implementation=impl)
        assert out.shape == q.shape and not np.any(np.asarray(out))


def test_auto_threshold_and_logging(caplog, monkeypatch):
    q, k, v = _qkv(1, 8, 8, 1, 4)
    with caplog.at_level(logging.INFO, logger="vidax.attention"):
        dot_product_attention(q, k, v)
    assert "dot_product_attention: xla (requested auto)" in caplog.text
    caplog.clear()
    monkeypatch.setattr(attn, "AUTO_XLA_MAX_SCORES", 63)  # 8 * 8 = 64 scores: above
    with caplog.at_level(logging.INFO, logger="vidax.attention"):
        jax.jit(lambda *a: dot_product_attention(*a))(q, k, v)
    assert "dot_product_attention: blockwise (requested auto)" in caplog.text
    # Logged at trace time: once per trace, not per call of the compiled function.
    caplog.clear()
    f = jax.jit(lambda *a: dot_product_attention(*a, implementation="xla"))
    with caplog.at_level(logging.INFO, logger="vidax.attention"):
        f(q, k, v)
        f(q, k, v)
    assert caplog.text.count("dot_product_attention: xla") == 1


def test_bad_arguments():
    q, k, v = _qkv(1, 4, 5, 2, 8)
    with pytest.raises(InputError, match="implementation='flash'"):
        dot_product_attention(q, k, v, implementation="flash")
    with pytest.raises(InputError, match="block_size=0"):
        dot_product_attention(q, k, v, block_size=0)
    with pytest.raises(InputError, match="expected q"):  # head dims differ
        dot_product_attention(q, k[..., :4], v[..., :4])
    # One K/V head for two query heads is grouped-query attention now (tests/test_attention_masks.py);
    # three query heads over two K/V heads do not group.
    with pytest.raises(InputError, match="N a multiple of N_kv"):
        dot_product_attention(jnp.concatenate([q, q[:, :, :1]], axis=2), k, v)
    with pytest.raises(InputError, match="4-D"):
        dot_product_attention(q[0], k[0], v[0])
