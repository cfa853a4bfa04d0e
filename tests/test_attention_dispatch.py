"""Attention implementations and their dispatch: blockwise and Pallas-TPU (interpret mode) equal
materialised attention with and without padding / segments at odd lengths; ``auto`` picks per
backend and length; unavailable forced implementations are errors; Ulysses and local attention
on meshes of 8 fake devices equal the unsharded attention."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.parity.helpers import max_rel_err
from vidax.errors import InputError
from vidax.nn import attention as attn
from vidax.nn.attention import SegmentIds, choose_implementation, dot_product_attention
from vidax.parallel.mesh import make_mesh
from vidax.parallel.ulysses import attention as mesh_attention
from vidax.parallel.ulysses import local_attention, ulysses_attention

# fp32, same terms summed in another order (blocks with rescaling): ~20 float32 ulps.
TOL = 2e-6


def _qkv(b, lq, lk, n=3, k=12, seed=0):
    g = np.random.default_rng(seed)
    q = 3.0 * g.standard_normal((b, lq, n, k))  # large scores: the online max / rescale matters
    return tuple(
        jnp.asarray(a, jnp.float32) for a in (q, g.standard_normal((b, lk, n, k)), g.standard_normal((b, lk, n, k)))
    )


def _run(impl, q, k, v, seg=None, block_size=16):
    fn = jax.jit(
        lambda q, k, v, s: dot_product_attention(
            q, k, v, implementation=impl, block_size=block_size, segment_ids=s, interpret=True
        )
    )
    return np.asarray(fn(q, k, v, seg))


@pytest.mark.parametrize("impl", ["blockwise", "pallas_tpu"])
@pytest.mark.parametrize("lq,lk", [(37, 37), (5, 7), (29, 53)])
def test_equals_xla_without_padding(impl, lq, lk):
    q, k, v = _qkv(2, lq, lk, seed=lq + lk)
    err = max_rel_err(_run(impl, q, k, v), _run("xla", q, k, v))
    assert err < TOL, err


@pytest.mark.parametrize("impl", ["blockwise", "pallas_tpu"])
@pytest.mark.parametrize("lq,lk", [(37, 37), (21, 21)])
def test_equals_xla_with_padding_segments(impl, lq, lk):
    """Right-padded sequences (batch 0 whole, batch 1 padded by 7): padded keys are masked."""
    q, k, v = _qkv(2, lq, lk, seed=lq)
    seg = SegmentIds.for_padding(2, lq, lk, jnp.array([lq, lq - 7]), jnp.array([lk, lk - 7]))
    want = _run("xla", q, k, v, seg)
    err = max_rel_err(_run(impl, q, k, v, seg), want)
    assert err < TOL, err
    # The real queries of batch 1 equal attention over its real tokens alone.
    alone = _run("xla", q[1:, : lq - 7], k[1:, : lk - 7], v[1:, : lk - 7])
    assert max_rel_err(want[1:, : lq - 7], alone) < TOL
    assert max_rel_err(want[1:, : lq - 7], _run("xla", q[1:, : lq - 7], k[1:], v[1:])) > 1e-2


@pytest.mark.parametrize("impl", ["blockwise", "pallas_tpu"])
def test_equals_xla_with_general_segments(impl):
    q, k, v = _qkv(2, 23, 31, seed=9)
    g = np.random.default_rng(1)
    kv_ids = g.integers(0, 3, (2, 31))
    kv_ids[:, :3] = [0, 1, 2]  # every query id has keys
    seg = SegmentIds(jnp.asarray(g.integers(0, 3, (2, 23)), jnp.int32), jnp.asarray(kv_ids, jnp.int32))
    err = max_rel_err(_run(impl, q, k, v, seg), _run("xla", q, k, v, seg))
    assert err < TOL, err


def test_query_without_keys_gives_zeros():
    q, k, v = _qkv(1, 5, 9, seed=2)
    seg = SegmentIds(jnp.asarray([[0, 1, 2, 1, 0]], jnp.int32), jnp.asarray([[0, 0, 1, 1, 1, 0, 1, 0, 1]], jnp.int32))
    for impl in ("xla", "blockwise"):
        out = _run(impl, q, k, v, seg)
        assert np.all(out[0, 2] == 0) and np.all(np.isfinite(out)) and np.abs(out[0, 0]).max() > 0.1


def test_pallas_bf16_close_to_fp32():
    q, k, v = _qkv(2, 33, 45, k=16, seed=5)
    want = _run("xla", q, k, v)
    got = _run("pallas_tpu", *(t.astype(jnp.bfloat16) for t in (q, k, v)))
    # bf16 inputs (2^-9 relative rounding) and bf16 output: ~1e-2 relative.
    assert got.dtype == jnp.bfloat16 and max_rel_err(got.astype(np.float32), want) < 2e-2


def test_pallas_tiles_per_generation_and_dtype():
    """pallas_tpu's tiles (benchmarks/tpu_attention.py on a v5e): the 16-bit ones by generation,
    float32 at 512 (the 16-bit tiles do not fit the default scoped VMEM in float32), and any
    length runs with the default tiles (clamped to it and padded)."""
    assert attn.tpu_tiles("TPU v5 lite") == (2048, 1024, 512)
    assert attn.tpu_tiles("TPU v5 lite", jnp.float32) == attn.TPU_TILES_FLOAT32 == (512, 512, 512)
    q, k, v = _qkv(1, 37, 300, seed=3)
    assert max_rel_err(_run("pallas_tpu", q, k, v, block_size=None), _run("xla", q, k, v)) < TOL


# --------------------------------------------------------------------------- dispatch


def test_auto_per_backend(monkeypatch):
    big = jnp.zeros((1, 4096, 2, 64), jnp.float32)  # 4096^2 = 2^24 scores > AUTO_XLA_MAX_SCORES
    small = jnp.zeros((1, 64, 2, 64), jnp.float32)
    for name, dtype, want in [
        ("cpu", jnp.float32, "blockwise"),
        ("cpu", jnp.bfloat16, "blockwise"),
        ("tpu", jnp.float32, "pallas_tpu"),
        ("tpu", jnp.bfloat16, "pallas_tpu"),
        ("gpu", jnp.bfloat16, "cudnn"),
        ("gpu", jnp.float32, "blockwise"),
    ]:
        monkeypatch.setattr(attn, "backend", lambda name=name: name)
        q = big.astype(dtype)
        assert choose_implementation(q, q) == want, (name, dtype)
        assert choose_implementation(small.astype(dtype), small.astype(dtype)) == "xla"
    # cuDNN flash needs K % 8 == 0 and cannot take general segments: blockwise then.
    odd = jnp.zeros((1, 4096, 2, 12), jnp.bfloat16)
    assert choose_implementation(odd, odd) == "blockwise"
    seg = SegmentIds(jnp.zeros((1, 4096), jnp.int32), jnp.zeros((1, 4096), jnp.int32))
    assert choose_implementation(big.astype(jnp.bfloat16), big, seg) == "blockwise"
    pad = SegmentIds.for_padding(1, 4096, 4096, 4000, 4000)
    assert choose_implementation(big.astype(jnp.bfloat16), big, pad) == "cudnn"


def test_unavailable_forced_implementation_is_an_error(monkeypatch):
    q, k, v = _qkv(1, 8, 8, k=16)
    with pytest.raises(InputError, match=r"'pallas_tpu' cannot run here: it needs a TPU and the backend is 'cpu'"):
        dot_product_attention(q, k, v, implementation="pallas_tpu")
    with pytest.raises(InputError, match=r"'cudnn' cannot run here: it needs an NVIDIA GPU"):
        dot_product_attention(q, k, v, implementation="cudnn")
    monkeypatch.setattr(attn, "backend", lambda: "gpu")
    with pytest.raises(InputError, match="bfloat16 / float16, not float32"):
        dot_product_attention(q, k, v, implementation="cudnn")
    seg = SegmentIds(jnp.zeros((1, 8), jnp.int32), jnp.zeros((1, 8), jnp.int32))
    with pytest.raises(InputError, match="only trailing padding"):
        dot_product_attention(*(t.astype(jnp.bfloat16) for t in (q, k, v)), implementation="cudnn", segment_ids=seg)
    with pytest.raises(InputError, match=r"segment_ids must be q \(1, 8\)"):
        dot_product_attention(q, k, v, segment_ids=SegmentIds(seg.q[:, :5], seg.kv))


def test_cudnn_call_uses_padding_lengths(monkeypatch):
    """No GPU here: check what the cudnn path hands to jax.nn.dot_product_attention."""
    seen = {}

    def fake(q, k, v, **kw):
        seen.update(kw)
        return q

    monkeypatch.setattr(attn, "backend", lambda: "gpu")
    monkeypatch.setattr(jax.nn, "dot_product_attention", fake)
    q, k, v = (t.astype(jnp.bfloat16) for t in _qkv(2, 8, 10, k=16))
    seg = SegmentIds.for_padding(2, 8, 10, jnp.array([8, 5]), jnp.array([10, 6]))
    dot_product_attention(q, k, v, implementation="cudnn", segment_ids=seg, scale=0.5)
    assert seen["implementation"] == "cudnn" and seen["scale"] == 0.5
    assert np.asarray(seen["query_seq_lengths"]).tolist() == [8, 5]
    assert np.asarray(seen["key_value_seq_lengths"]).tolist() == [10, 6]


def test_choice_is_logged_and_forced_materialisation_warns(caplog, monkeypatch):
    q, k, v = _qkv(1, 8, 8)
    with caplog.at_level(logging.INFO, logger="vidax.attention"):
        dot_product_attention(q, k, v, segment_ids=SegmentIds.for_padding(1, 8, 8, 6, 6))
    assert "dot_product_attention: xla (requested auto)" in caplog.text and "segments" in caplog.text
    monkeypatch.setattr(attn, "AUTO_XLA_MAX_SCORES", 32)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vidax.attention"):
        dot_product_attention(q, k, v)
        assert "blockwise (requested auto)" in caplog.text and "WARNING" not in caplog.text
        dot_product_attention(q, k, v, implementation="xla")
    assert any(r.levelno == logging.WARNING and "materialises 8 x 8 scores" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- on a mesh


@pytest.mark.parametrize("sizes", [(1, 2, 4), (2, 2, 2), (1, 1, 8)], ids=lambda s: "dp%d_tp%d_sp%d" % s)
@pytest.mark.parametrize("impl", ["blockwise", "pallas_tpu"])
def test_ulysses_equals_unsharded(sizes, impl):
    """13 real tokens padded to 16 on the mesh; Pallas runs inside the shard_map (interpret)."""
    mesh = make_mesh(*sizes)
    q, k, v = _qkv(2, 16, 16, n=8, seed=3)
    want = _run("xla", q[:, :13], k[:, :13], v[:, :13])
    fn = jax.jit(
        lambda q, k, v: ulysses_attention(
            q, k, v, mesh, valid_length=13, implementation=impl, block_size=8, interpret=True
        )
    )
    got = np.asarray(fn(q, k, v))
    err = max_rel_err(got[:, :13], want)
    assert err < TOL, err


def test_local_attention_and_entry_point():
    mesh = make_mesh(2, 2, 2)
    q, _, _ = _qkv(2, 16, 16, n=8, seed=4)
    _, k, v = _qkv(2, 7, 7, n=8, seed=5)
    want = _run("xla", q, k, v)
    got = jax.jit(lambda q, k, v: local_attention(q, k, v, mesh, implementation="blockwise", block_size=4))(q, k, v)
    assert max_rel_err(np.asarray(got), want) < TOL
    # mesh=None: padded self-attention masks the padded keys with segment ids.
    qq, kk, vv = _qkv(2, 16, 16, n=8, seed=6)
    out = mesh_attention(qq, kk, vv, None, self_attention=True, valid_length=11)
    assert max_rel_err(np.asarray(out)[:, :11], _run("xla", qq[:, :11], kk[:, :11], vv[:, :11])) < TOL


def test_ulysses_bad_sizes():
    mesh = make_mesh(1, 2, 4)
    q, k, v = _qkv(1, 10, 10, n=8)
    with pytest.raises(InputError, match="10 tokens do not split over sequence=4"):
        ulysses_attention(q, k, v, mesh)
    q, k, v = _qkv(1, 12, 12, n=6)
    with pytest.raises(InputError, match="6 heads"):
        ulysses_attention(q, k, v, mesh)
