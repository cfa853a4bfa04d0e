"""Parity of vidax's Wan transformer with ``diffusers.WanTransformer3DModel`` (tiny configs).

Dimensions are all distinct: 3 heads of 14 (D = 42; RoPE split (T, H, W) = (6, 4, 4), uneven),
in 5 / out 7 channels, text_dim 17, freq_dim 8, ffn 44, 2 layers, latent (B=2, T=3, H=6, W=10)
with patch (1, 2, 2) -> 45 tokens, text L=7. Every parameter is randomised (scale_shift_tables,
norm weights and biases included), the reference is saved with ``save_pretrained`` and loaded
with the production loader.

fp32 tolerances: both sides compute the same float32 arithmetic in a different order (XLA vs
torch kernels, einsum vs SDPA), so errors are a few float32 ulps amplified through 2 blocks;
1e-5 relative (of the output's max) is ~100 ulps of headroom and far below what any wrong
operation gives (those show up at >1e-2).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.models.wan.rope import wan_rope
from vidax.nn.layers import patchify, unpatchify
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

TINY = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=3,
    attention_head_dim=14,
    in_channels=5,
    out_channels=7,
    text_dim=17,
    freq_dim=8,
    ffn_dim=44,
    num_layers=2,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    rope_max_seq_len=1024,
)
B, T, H, W = 2, 3, 6, 10
L_TXT = 7
FP32_TOL = 1e-5


def _make_reference(tmp_path_factory, seed: int, **overrides):
    cfg = dict(TINY, **overrides)
    torch.manual_seed(seed)
    ref = diffusers.WanTransformer3DModel(**cfg).eval()
    randomize_torch_module(ref, seed=seed)
    path = tmp_path_factory.mktemp(f"wan_ref_{seed}")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, path


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    return _make_reference(tmp_path_factory, seed=0)


@pytest.fixture(scope="module")
def model32(t2v):
    return load_component("WanTransformer3DModel", t2v[1])


def _inputs(seed, c_in=TINY["in_channels"], l_txt=L_TXT, h=H, w=W):
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, c_in, T, h, w), dtype=np.float32)
    txt = g.standard_normal((B, l_txt, TINY["text_dim"]), dtype=np.float32)
    # Distinct, fractional timesteps per batch element (the scheduler feeds floats).
    ts = np.array([37.5, 912.25], np.float32)
    return x, ts, txt


def _ref_forward(ref, x, ts, txt, img=None):
    with torch.no_grad():
        out = ref(
            torch.from_numpy(x),
            torch.from_numpy(ts),
            torch.from_numpy(txt),
            encoder_hidden_states_image=None if img is None else torch.from_numpy(img),
            return_dict=False,
        )[0]
    return out.numpy().transpose(0, 2, 3, 4, 1)  # channels-last


_FWD = nnx.jit(lambda m, *a: m(*a))


def _run(model, x, ts, txt, img=None):
    out = _FWD(
        model,
        jnp.asarray(x.transpose(0, 2, 3, 4, 1)),
        jnp.asarray(ts),
        jnp.asarray(txt),
        None if img is None else jnp.asarray(img),
    )
    return np.asarray(out.astype(jnp.float32))


def test_full_model_fp32(t2v, model32):
    ref, model = t2v[0], model32
    x, ts, txt = _inputs(1)
    want = _ref_forward(ref, x, ts, txt)
    got = _run(model, x, ts, txt)
    assert got.shape == (B, T, H, W, TINY["out_channels"])
    err = max_rel_err(got, want)
    print(f"full model fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    # Per-sample timesteps matter: swapping them changes the output (the test can fail).
    got_swapped = _run(model, x, ts[::-1].copy(), txt)
    assert max_rel_err(got_swapped, want) > 1e-2


def test_swapped_height_width_does_not_match(t2v, model32):
    """H != W: a model that confused the H and W axes (RoPE split, patch order) would fail."""
    ref, model = t2v[0], model32
    x, ts, txt = _inputs(2)
    want = _ref_forward(ref, x, ts, txt)
    got = _run(model, x, ts, txt)
    assert max_rel_err(got, want) < FP32_TOL
    # Feed W as H: same tokens, but the rows/columns roles swap; then swap the output back.
    xs = jnp.asarray(x.transpose(0, 2, 4, 3, 1))  # (B, T, W, H, C)
    swapped = np.asarray(_FWD(model, xs, jnp.asarray(ts), jnp.asarray(txt), None)).transpose(0, 1, 3, 2, 4)
    err = max_rel_err(swapped, want)
    print(f"H/W swapped max_rel_err={err:.2e}")
    assert err > 1e-2


def test_rope_tables_match_reference(t2v):
    ref, _ = t2v
    x, _, _ = _inputs(3)
    with torch.no_grad():
        cos_ref, sin_ref = ref.rope(torch.from_numpy(x))  # (1, L, 1, K) repeat-interleaved
    cos, sin = wan_rope(TINY["attention_head_dim"], (T, H // 2, W // 2), TINY["rope_max_seq_len"])
    # Same float64 formula rounded to float32: bit-identical up to 1 ulp of libm cos/sin.
    np.testing.assert_allclose(np.asarray(cos), cos_ref[0, :, 0, 0::2].numpy(), rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(sin), sin_ref[0, :, 0, 1::2].numpy(), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(cos_ref[0, :, 0, 0::2].numpy(), cos_ref[0, :, 0, 1::2].numpy())


def test_single_block_matches_reference(t2v, model32):
    ref, model = t2v[0], model32
    d = TINY["num_attention_heads"] * TINY["attention_head_dim"]
    n_tok = T * (H // 2) * (W // 2)
    g = np.random.default_rng(4)
    hs = g.standard_normal((B, n_tok, d), dtype=np.float32)
    ctx = g.standard_normal((B, L_TXT, d), dtype=np.float32)
    temb = g.standard_normal((B, 6, d), dtype=np.float32)
    x5 = torch.zeros(B, TINY["in_channels"], T, H, W)
    with torch.no_grad():
        rotary = ref.rope(x5)
        want = ref.blocks[1](torch.from_numpy(hs), torch.from_numpy(ctx), torch.from_numpy(temb), rotary).numpy()

    graphdef, state = nnx.split(model.blocks)
    block = nnx.merge(graphdef, jax.tree.map(lambda a: a[1], state))
    rope = wan_rope(TINY["attention_head_dim"], (T, H // 2, W // 2), TINY["rope_max_seq_len"])
    run_block = nnx.jit(lambda blk, *a: blk(*a))
    got = np.asarray(run_block(block, jnp.asarray(hs), jnp.asarray(ctx), jnp.asarray(temb)[:, None], rope))
    err = max_rel_err(got, want)
    print(f"block fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL


def test_per_token_timesteps(t2v, model32):
    """Wan2.2 TI2V ``expand_timesteps``: one timestep per token, (B, L)."""
    ref, model = t2v[0], model32
    x, _, txt = _inputs(5)
    n_tok = T * (H // 2) * (W // 2)
    ts = np.empty((B, n_tok), np.float32)
    ts[0] = 700.0
    ts[1] = 250.0
    ts[:, : (H // 2) * (W // 2)] = 0.0  # first latent frame is the clean conditioning frame
    want = _ref_forward(ref, x, ts, txt)
    got = _run(model, x, ts, txt)
    err = max_rel_err(got, want)
    print(f"per-token timesteps fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL


@pytest.mark.parametrize("residual_dtype", [jnp.float32, None], ids=["fp32_residual", "bf16_residual"])
def test_bf16_against_fp32_reference(t2v, residual_dtype):
    """bf16 weights and matmuls vs the fp32 reference.

    bf16 has an 8-bit mantissa (relative rounding 2^-9 ≈ 2e-3); each of the ~10 rounded matmul
    outputs and activations per block adds such an error and softmax/RMS amplify it somewhat,
    so a few 1e-2 relative is expected; 5e-2 bounds it while a wrong cast (e.g. the fp32 modules
    in bf16 with an unscaled modulation) or a wrong op gives O(1). As a yardstick, the RMS error
    must also stay within 1.5x that of diffusers itself loaded with ``torch_dtype=bfloat16``
    (measured: ours 3.5e-3 fp32 residual / 4.4e-3 bf16 residual, diffusers 4.1e-3).
    """
    ref, path = t2v
    model = load_component("WanTransformer3DModel", path, dtype=jnp.bfloat16, residual_dtype=residual_dtype)
    kernel = model.blocks.attn1.to_q.kernel[...]
    assert kernel.dtype == jnp.bfloat16
    assert model.blocks.scale_shift_table[...].dtype == jnp.float32
    assert model.condition_embedder.time_embedder.linear_1.kernel[...].dtype == jnp.float32
    assert model.blocks.norm2.scale[...].dtype == jnp.float32
    x, ts, txt = _inputs(6)
    want = _ref_forward(ref, x, ts, txt)
    got = _run(model, x, ts, txt)
    err = max_rel_err(got, want)
    with torch.no_grad():
        ref16 = diffusers.WanTransformer3DModel.from_pretrained(path, torch_dtype=torch.bfloat16)
        theirs = (
            ref16(
                torch.from_numpy(x).bfloat16(),
                torch.from_numpy(ts),
                torch.from_numpy(txt).bfloat16(),
                return_dict=False,
            )[0]
            .float()
            .numpy()
            .transpose(0, 2, 3, 4, 1)
        )
    rms = _rms_rel(got, want)
    rms_theirs = _rms_rel(theirs, want)
    print(
        f"bf16 (residual {residual_dtype}) vs fp32 reference max_rel_err={err:.2e} rms_rel={rms:.2e} "
        f"(diffusers bf16: max_rel_err={max_rel_err(theirs, want):.2e} rms_rel={rms_theirs:.2e})"
    )
    assert err < 5e-2
    assert rms < 1.5 * rms_theirs


def _rms_rel(a, b) -> float:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.sqrt(np.mean((a - b) ** 2) / np.mean(b**2)))


@pytest.mark.parametrize(
    "variant",
    ["i2v", "flf2v", "image_without_added_kv"],
)
def test_image_conditioning(tmp_path_factory, variant):
    """Wan2.1 I2V (CLIP image tokens through add_k/add_v), FLF2V (pos_embed), and image tokens
    without added projections (the reference then concatenates them to the text).

    The reference splits image from text context at ``L - 512``, so the text has 512 tokens.
    """
    d = TINY["num_attention_heads"] * TINY["attention_head_dim"]
    extra = dict(image_dim=11, in_channels=9)
    if variant in ("i2v", "flf2v"):
        extra["added_kv_proj_dim"] = d
    n_img = 4
    if variant == "flf2v":
        extra["pos_embed_seq_len"] = 2 * n_img
    ref, path = _make_reference(tmp_path_factory, seed=7, **extra)
    if variant == "i2v":
        # Early I2V conversions carry an unused norm_added_q that diffusers drops: so do we.
        from safetensors.numpy import load_file, save_file

        f = path / "diffusion_pytorch_model.safetensors"
        sd = load_file(f)
        for i in range(TINY["num_layers"]):
            sd[f"blocks.{i}.attn2.norm_added_q.weight"] = np.ones(d, np.float32)
        save_file(sd, f, metadata={"format": "pt"})
    model = load_component("WanTransformer3DModel", path)
    x, ts, txt = _inputs(8, c_in=9, l_txt=512)
    g = np.random.default_rng(9)
    img_batch = 2 * B if variant == "flf2v" else B
    img = g.standard_normal((img_batch, n_img, 11), dtype=np.float32)
    want = _ref_forward(ref, x, ts, txt, img)
    got = _run(model, x, ts, txt, img)
    err = max_rel_err(got, want)
    print(f"{variant} fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    if variant == "i2v":
        # The image branch contributes: without it the output differs.
        got_noimg = _run(model, x, ts, txt)
        assert max_rel_err(got_noimg, want) > 1e-3
        # And no image tokens at all equals the reference with 512 text tokens only (its
        # image split is then empty, contributing zeros).
        np.testing.assert_allclose(
            got_noimg, _ref_forward(ref, x, ts, txt), rtol=0, atol=FP32_TOL * np.abs(got_noimg).max()
        )


def test_patchify_matches_reference_conv_order():
    """Brute force: patchify's feature order is the Conv3d weight's (p_t, p_h, p_w, C) order,
    and unpatchify is the reference's reshape/permute, both exact."""
    pt, ph, pw, c = 2, 3, 2, 5
    b, t, h, w = 2, 4, 6, 8
    x = np.random.default_rng(10).standard_normal((b, c, t, h, w), dtype=np.float32)
    n_feat = pt * ph * pw * c
    # Conv whose output channel o copies input feature o of a patch in (p_t, p_h, p_w, C) order.
    conv = torch.nn.Conv3d(c, n_feat, kernel_size=(pt, ph, pw), stride=(pt, ph, pw), bias=False)
    with torch.no_grad():
        conv.weight.zero_()
        for o, (a, bb, cc, ch) in enumerate(np.ndindex(pt, ph, pw, c)):
            conv.weight[o, ch, a, bb, cc] = 1.0
        want = conv(torch.from_numpy(x)).flatten(2).transpose(1, 2).numpy()
    got = np.asarray(patchify(jnp.asarray(x.transpose(0, 2, 3, 4, 1)), (pt, ph, pw)))
    np.testing.assert_array_equal(got, want)

    # unpatchify vs the reference's code on the same token tensor.
    grid = (t // pt, h // ph, w // pw)
    tok = torch.from_numpy(want)
    ref = tok.reshape(b, *grid, pt, ph, pw, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
    ref = ref.flatten(6, 7).flatten(4, 5).flatten(2, 3).numpy()  # (B, C, T, H, W)
    back = np.asarray(unpatchify(jnp.asarray(want), grid, (pt, ph, pw)))
    np.testing.assert_array_equal(back, ref.transpose(0, 2, 3, 4, 1))
    np.testing.assert_array_equal(back, x.transpose(0, 2, 3, 4, 1))


def test_saved_config_parses(t2v):
    _, path = t2v
    with open(path / "config.json") as f:
        cfg = json.load(f)
    assert cfg["_class_name"] == "WanTransformer3DModel"
    from vidax.models.wan.config import WanTransformerConfig

    parsed = WanTransformerConfig.from_config_dict(cfg)
    assert parsed.attention_head_dim == 14 and parsed.rope_split == (6, 4, 4)
