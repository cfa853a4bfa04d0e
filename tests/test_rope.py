"""vidax.nn.rope against diffusers' ``get_1d_rotary_pos_embed`` / ``apply_rotary_emb`` /
``HunyuanVideoRotaryPosEmbed`` and transformers' ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``,
float32, random inputs, both pair layouts; config parsing refuses what it does not implement."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.errors import ConfigError, InputError
from vidax.nn.rope import TextRope, apply_rope, grid_position_ids, rope_inv_freq, rope_tables

# Tables: vidax's float32 inverse frequencies are correctly rounded, torch's float32 pow can be one
# ulp off (6e-8 relative): with positions up to ~50 that moves an angle by up to 3e-6, plus an ulp
# of cos / sin between libms (measured: 6e-8). Rotations with the *same* tables differ only in
# float32 rounding of |x| <= ~5 values (measured: 0); with vidax's vs the reference's tables the
# table error times |x| adds (measured: 2.4e-7).
TABLE_ATOL = 4e-6
ROT_ATOL = 1e-6
ROT_OWN_TABLES_ATOL = ROT_ATOL + 5 * TABLE_ATOL


def _rng(seed):
    return np.random.default_rng(seed)


def test_inv_freq_within_an_ulp_of_torch():
    for dim, theta in [(16, 10000.0), (44, 10000.0), (56, 256.0), (128, 500000.0), (12, 1e6)]:
        ref = (1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))).numpy()
        ours = rope_inv_freq(dim, theta)
        assert ours.dtype == np.float32 and ours.shape == (dim // 2,)
        np.testing.assert_allclose(ours, ref, rtol=1.2e-7, atol=0)


def test_multi_axis_tables_match_hunyuan_video():
    """HunyuanVideo's (T, H, W) RoPE: axis shares (8, 12, 12) of K=32, theta 256, integer grid."""
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed

    ref = HunyuanVideoRotaryPosEmbed(patch_size=2, patch_size_t=1, rope_dim=[8, 12, 12], theta=256.0)
    cos_ref, sin_ref = (t.numpy() for t in ref(torch.zeros(1, 4, 3, 10, 14)))  # grid (3, 5, 7)
    cos, sin = rope_tables(grid_position_ids((3, 5, 7)), (8, 12, 12), 256.0)
    assert cos.shape == (105, 16) and cos.dtype == jnp.float32
    for ours, full in ((cos, cos_ref), (sin, sin_ref)):  # the reference repeats each pair's angle
        np.testing.assert_allclose(np.asarray(ours), full[:, 0::2], rtol=0, atol=TABLE_ATOL)
        np.testing.assert_array_equal(full[:, 0::2], full[:, 1::2])


@pytest.mark.parametrize("freqs_dtype", ["float32", "float64"])
def test_per_axis_theta_and_fractional_positions_match_get_1d_rotary_pos_embed(freqs_dtype):
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    dims, thetas = (6, 10, 16), (10000.0, 300.0, 1e5)
    pos = (_rng(1).random((2, 19, 3)) * 40.0).astype(np.float32)  # e.g. LTX-style scaled positions
    cos, sin = rope_tables(pos, dims, thetas, freqs_dtype=freqs_dtype)
    assert cos.shape == (2, 19, 16)
    tdt = torch.float32 if freqs_dtype == "float32" else torch.float64
    flat = pos.reshape(-1, 3)
    parts = [
        get_1d_rotary_pos_embed(d, torch.from_numpy(flat[:, a].astype(freqs_dtype)), t, use_real=True, freqs_dtype=tdt)
        for a, (d, t) in enumerate(zip(dims, thetas))
    ]
    cos_ref = torch.cat([p[0] for p in parts], dim=1).numpy()[:, 0::2].reshape(2, 19, 16)
    sin_ref = torch.cat([p[1] for p in parts], dim=1).numpy()[:, 0::2].reshape(2, 19, 16)
    # float64 angles rounded once: agree to float32 rounding; float32: see TABLE_ATOL.
    atol = 1e-6 if freqs_dtype == "float64" else TABLE_ATOL
    np.testing.assert_allclose(np.asarray(cos), cos_ref, rtol=0, atol=atol)
    np.testing.assert_allclose(np.asarray(sin), sin_ref, rtol=0, atol=atol)


def test_float64_needs_concrete_positions():
    with pytest.raises(InputError, match="needs concrete position_ids"):
        jax.jit(lambda p: rope_tables(p, (8,), freqs_dtype="float64"))(jnp.zeros((4, 1)))
    cos, _ = jax.jit(lambda p: rope_tables(p, (8,)))(jnp.arange(4.0)[:, None])  # float32 traces
    assert cos.shape == (4, 4)


@pytest.mark.parametrize("unbind_dim,layout", [(-1, "interleaved"), (-2, "rotate_half")])
def test_rotation_matches_diffusers_apply_rotary_emb(unbind_dim, layout):
    """Interleaved pairs (Wan / CogVideoX / HunyuanVideo) and the rotate-half form diffusers uses
    for Cosmos, with random tables and inputs."""
    from diffusers.models.embeddings import apply_rotary_emb

    b, l, n, k = 2, 13, 3, 20
    x = _rng(2).standard_normal((b, l, n, k)).astype(np.float32)
    ang = _rng(3).uniform(-7, 7, (l, k // 2)).astype(np.float32)
    cos, sin = np.cos(ang), np.sin(ang)
    rep = (lambda t: np.repeat(t, 2, axis=-1)) if unbind_dim == -1 else (lambda t: np.concatenate([t, t], -1))
    ref = (
        apply_rotary_emb(
            torch.from_numpy(x).permute(0, 2, 1, 3),
            (torch.from_numpy(rep(cos)), torch.from_numpy(rep(sin))),
            use_real=True,
            use_real_unbind_dim=unbind_dim,
        )
        .permute(0, 2, 1, 3)
        .numpy()
    )
    got = np.asarray(apply_rope(jnp.asarray(x), jnp.asarray(cos), jnp.asarray(sin), layout=layout))
    np.testing.assert_allclose(got, ref, rtol=0, atol=ROT_ATOL)
    other = "rotate_half" if layout == "interleaved" else "interleaved"
    assert (
        np.abs(np.asarray(apply_rope(jnp.asarray(x), jnp.asarray(cos), jnp.asarray(sin), layout=other)) - ref).max()
        > 0.1
    )


def test_text_rope_and_rotate_half_match_llama():
    """LlamaRotaryEmbedding (rope_theta 5e5, head_dim 16 != hidden / heads) on random per-batch
    position ids (offset as after left padding), then apply_rotary_pos_emb to random q, k."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=48,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=500000.0,
        max_position_embeddings=128,
    )
    rope = TextRope.from_config_dict(config.to_dict())
    assert rope == TextRope(head_dim=16, theta=500000.0)
    b, l = 2, 11
    pos = np.stack([np.arange(l), np.arange(l) + 37])
    q = _rng(4).standard_normal((b, 4, l, 16)).astype(np.float32)
    k = _rng(5).standard_normal((b, 2, l, 16)).astype(np.float32)
    cos_ref, sin_ref = LlamaRotaryEmbedding(config)(torch.from_numpy(q), torch.from_numpy(pos))
    cos, sin = rope(jnp.asarray(pos))
    assert cos.shape == (b, l, 8)
    for ours, full in ((cos, cos_ref.numpy()), (sin, sin_ref.numpy())):
        np.testing.assert_array_equal(full[..., :8], full[..., 8:])
        np.testing.assert_allclose(np.asarray(ours), full[..., :8], rtol=0, atol=TABLE_ATOL)
    q_ref, k_ref = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k), cos_ref, sin_ref)
    for x, ref in ((q, q_ref), (k, k_ref)):
        got = apply_rope(jnp.asarray(x).transpose(0, 2, 1, 3), cos, sin, layout="rotate_half")
        np.testing.assert_allclose(np.asarray(got).transpose(0, 2, 1, 3), ref.numpy(), rtol=0, atol=ROT_OWN_TABLES_ATOL)


def test_text_rope_config_keys():
    assert TextRope.from_config_dict({"hidden_size": 64, "num_attention_heads": 4}) == TextRope(16, 10000.0)
    old = {"hidden_size": 64, "num_attention_heads": 2, "rope_theta": 1e6, "rope_scaling": None}
    assert TextRope.from_config_dict(old) == TextRope(32, 1e6)
    new = {"head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 250.0}}
    assert TextRope.from_config_dict(new) == TextRope(8, 250.0)
    with pytest.raises(ConfigError, match=r"rope_scaling\.type='linear' is not supported"):
        TextRope.from_config_dict({**old, "rope_scaling": {"type": "linear", "factor": 2.0}})
    with pytest.raises(ConfigError, match=r"rope_parameters\.rope_type='llama3' is not supported"):
        TextRope.from_config_dict({"head_dim": 8, "rope_parameters": {"rope_type": "llama3", "factor": 8.0}})
    with pytest.raises(ConfigError, match="nested per layer type"):
        TextRope.from_config_dict({"head_dim": 8, "rope_parameters": {"full_attention": {"rope_type": "default"}}})
    with pytest.raises(ConfigError, match="partial_rotary_factor=0.5"):
        TextRope.from_config_dict({"head_dim": 8, "partial_rotary_factor": 0.5})
    with pytest.raises(ConfigError, match="no head_dim"):
        TextRope.from_config_dict({"rope_theta": 1e4})


def test_bad_arguments():
    x = jnp.zeros((1, 5, 2, 8))
    with pytest.raises(InputError, match="layout='half'"):
        apply_rope(x, jnp.zeros((5, 4)), jnp.zeros((5, 4)), layout="half")
    with pytest.raises(InputError, match=r"must be \(5, 4\) or \(1, 5, 4\)"):
        apply_rope(x, jnp.zeros((5, 8)), jnp.zeros((5, 8)))
    with pytest.raises(InputError, match="dim=5 must be a positive even int"):
        rope_tables(np.zeros((3, 2)), (4, 5))
    with pytest.raises(InputError, match=r"must end in one position per axis \(3"):
        rope_tables(np.zeros((3, 2)), (4, 4, 4))
    with pytest.raises(InputError, match="one per axis"):
        rope_tables(np.zeros((3, 2)), (4, 4), (1.0, 2.0, 3.0))


def test_bf16_is_rotated_in_float32_and_cast_back():
    x = jnp.asarray(_rng(6).standard_normal((2, 7, 3, 12)), jnp.bfloat16)
    cos, sin = rope_tables(grid_position_ids((7,)), (12,))
    got = apply_rope(x, cos, sin, layout="rotate_half")
    want = apply_rope(x.astype(jnp.float32), cos, sin, layout="rotate_half").astype(jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
