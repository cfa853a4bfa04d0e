"""Parity of vidax's CogVideoX transformer with ``diffusers.CogVideoXTransformer3DModel``.

One tiny model per released variant: 2B (sincos position table), 5B (3-D RoPE), 5B-I2V (RoPE +
learned position table, twice the input channels), 1.5 (``patch_size_t=2``, linear patch
embedding without conv bias) and 1.5-I2V (+ ``ofs`` embedding). Dimensions are distinct: 3 heads
of 16 (D = 48; RoPE needs K % 16 == 0), text width 20, time width 24, 2 layers, text L = 7. Every
parameter (and the learned position table, a buffer) is randomised, saved with
``save_pretrained`` and loaded with the production loader. The reference gets the RoPE tables
from the pipeline's own ``_prepare_rotary_positional_embeddings``.

fp32 tolerance 2e-5 (relative to the output's max): the same float32 arithmetic in another order
(XLA vs torch kernels, einsum vs SDPA, fused adds), a few ulps amplified through two blocks and
the joint text/video attention; any wrong operation shows up at > 1e-2.
"""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.models.cogvideox.transformer import patchify_channels_first, unpatchify_channels_first
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")
from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline  # noqa: E402

BASE = dict(
    num_attention_heads=3,
    attention_head_dim=16,
    in_channels=6,
    out_channels=5,
    time_embed_dim=24,
    text_embed_dim=20,
    num_layers=2,
    sample_width=10,
    sample_height=6,
    sample_frames=9,
    patch_size=2,
    max_text_seq_length=7,
    temporal_compression_ratio=4,
)
VARIANTS = {
    "2b_sincos": dict(),
    "5b_rope": dict(use_rotary_positional_embeddings=True),
    "5b_i2v_learned": dict(
        use_rotary_positional_embeddings=True, use_learned_positional_embeddings=True, in_channels=10
    ),
    "1.5_patch_t": dict(
        use_rotary_positional_embeddings=True,
        patch_size_t=2,
        patch_bias=False,
        sample_height=12,
        sample_width=14,
        sample_frames=13,
    ),
    "1.5_i2v_ofs": dict(
        use_rotary_positional_embeddings=True,
        patch_size_t=2,
        patch_bias=False,
        sample_height=12,
        sample_width=14,
        sample_frames=13,
        in_channels=10,
        ofs_embed_dim=24,
    ),
}
# (T, H, W) latent sizes per variant: the training size and another one (position tables
# recomputed, RoPE crop region not the identity).
SIZES = {
    "2b_sincos": [(3, 6, 10), (2, 8, 6)],
    "5b_rope": [(3, 6, 10), (2, 8, 6)],
    "5b_i2v_learned": [(3, 6, 10), (2, 6, 10)],
    "1.5_patch_t": [(4, 6, 10), (2, 12, 4)],
    "1.5_i2v_ofs": [(4, 6, 10)],
}
B, L_TXT = 2, 7
FP32_TOL = 2e-5
BF16_TOL = 3e-2  # bf16 matmuls (8-bit mantissa) over two blocks; measured ~1e-2


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory):
    name = request.param
    cfg = dict(BASE, **VARIANTS[name])
    torch.manual_seed(0)
    ref = diffusers.CogVideoXTransformer3DModel(**cfg).eval()
    randomize_torch_module(ref, seed=list(VARIANTS).index(name))
    if cfg.get("use_learned_positional_embeddings"):
        with torch.no_grad():  # a buffer: randomize_torch_module only covers parameters
            pe = ref.patch_embed.pos_embedding
            pe.copy_(torch.randn(pe.shape, generator=torch.Generator().manual_seed(3)))
    path = tmp_path_factory.mktemp(f"cogvideox_{name}")
    ref.save_pretrained(path, safe_serialization=True)
    return name, cfg, ref, path


def _rope(ref, t, h, w):
    fake = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=ref)
    return CogVideoXPipeline._prepare_rotary_positional_embeddings(fake, h * 8, w * 8, t, "cpu")


def _run_reference(ref, cfg, x, ts, txt, ofs):
    t, h, w = x.shape[1], x.shape[3], x.shape[4]
    rope = _rope(ref, t, h, w) if cfg.get("use_rotary_positional_embeddings") else None
    with torch.no_grad():
        out = ref(
            hidden_states=torch.from_numpy(x),
            encoder_hidden_states=torch.from_numpy(txt),
            timestep=torch.from_numpy(ts),
            ofs=None if ofs is None else torch.from_numpy(ofs),
            image_rotary_emb=rope,
            return_dict=False,
        )[0]
    return out.numpy()  # (B, T, C, H, W)


def _inputs(cfg, size, seed):
    g = np.random.default_rng(seed)
    t, h, w = size
    x = g.standard_normal((B, t, cfg["in_channels"], h, w), dtype=np.float32)
    txt = g.standard_normal((B, L_TXT, cfg["text_embed_dim"]), dtype=np.float32)
    ts = np.array([37.0, 912.0], np.float32)
    ofs = np.array([2.0], np.float32) if cfg.get("ofs_embed_dim") else None
    return x, ts, txt, ofs


def _run_vidax(model, x, ts, txt, ofs):
    out = model(
        jnp.asarray(x.transpose(0, 1, 3, 4, 2)),
        jnp.asarray(ts),
        jnp.asarray(txt),
        None if ofs is None else jnp.asarray(ofs),
    )
    return np.asarray(out.astype(jnp.float32)).transpose(0, 1, 4, 2, 3)


def test_fp32_matches_reference(variant):
    name, cfg, ref, path = variant
    model = load_component("CogVideoXTransformer3DModel", path)
    for k, size in enumerate(SIZES[name]):
        x, ts, txt, ofs = _inputs(cfg, size, seed=k)
        want = _run_reference(ref, cfg, x, ts, txt, ofs)
        got = _run_vidax(model, x, ts, txt, ofs)
        assert got.shape == want.shape == (B, size[0], cfg["out_channels"], size[1], size[2])
        err = max_rel_err(got, want)
        print(f"{name} {size}: fp32 max rel err {err:.2e}")
        assert err < FP32_TOL
        # The comparison is meaningful: another input gives a clearly different output.
        x2 = np.random.default_rng(99).standard_normal(x.shape, dtype=np.float32)
        other = _run_reference(ref, cfg, x2, ts, txt, ofs)
        assert max_rel_err(other, want) > 0.1


def test_bf16_close_to_fp32_reference(variant):
    name, cfg, ref, path = variant
    model = load_component("CogVideoXTransformer3DModel", path, dtype=jnp.bfloat16)
    size = SIZES[name][0]
    x, ts, txt, ofs = _inputs(cfg, size, seed=5)
    err = max_rel_err(_run_vidax(model, x, ts, txt, ofs), _run_reference(ref, cfg, x, ts, txt, ofs))
    print(f"{name}: bf16 max rel err vs fp32 reference {err:.2e}")
    assert err < BF16_TOL


def test_patchify_order_brute_force():
    """Token features are (C, p_t, p_h, p_w) as the reference's 1.5 patch embedding and proj_out."""
    b, t, h, w, c, pt, p = 1, 4, 6, 4, 3, 2, 2
    x = np.arange(b * t * h * w * c, dtype=np.float32).reshape(b, t, h, w, c)
    cols = np.asarray(patchify_channels_first(jnp.asarray(x), pt, p))
    # Reference order (CogVideoXPatchEmbed, patch_size_t branch) on the frame-major layout.
    ref = torch.from_numpy(x.transpose(0, 1, 4, 2, 3)).permute(0, 1, 3, 4, 2)
    ref = ref.reshape(b, t // pt, pt, h // p, p, w // p, p, c).permute(0, 1, 3, 5, 7, 2, 4, 6)
    ref = ref.flatten(4, 7).flatten(1, 3).numpy()
    np.testing.assert_array_equal(cols, ref)
    back = np.asarray(unpatchify_channels_first(jnp.asarray(cols), (t // pt, h // p, w // p), pt, p))
    np.testing.assert_array_equal(back, x)


def test_bad_inputs(variant):
    from vidax.errors import InputError

    name, cfg, ref, path = variant
    model = load_component("CogVideoXTransformer3DModel", path)
    x, ts, txt, ofs = _inputs(cfg, SIZES[name][0], seed=0)
    xl = jnp.asarray(x.transpose(0, 1, 3, 4, 2))
    with pytest.raises(InputError, match="hidden_states"):
        model(xl[:, :, :5], jnp.asarray(ts), jnp.asarray(txt), None if ofs is None else jnp.asarray(ofs))
    with pytest.raises(InputError, match="ofs"):
        model(xl, jnp.asarray(ts), jnp.asarray(txt), None if ofs is not None else jnp.ones((1,)))
    if name in ("2b_sincos", "5b_i2v_learned"):
        with pytest.raises(InputError, match="max_text_seq_length"):
            model(xl, jnp.asarray(ts), jnp.asarray(txt[:, :5]), None)
    if name == "5b_i2v_learned":
        with pytest.raises(InputError, match="learned position table"):
            model(xl[:, :, :4], jnp.asarray(ts), jnp.asarray(txt), None)


@pytest.mark.parametrize(
    "config,size",
    [
        (dict(attention_head_dim=64, use_rotary_positional_embeddings=True), (13, 480, 720)),  # 5B default
        (dict(attention_head_dim=64, use_rotary_positional_embeddings=True), (7, 768, 1360)),  # crop region
        (dict(attention_head_dim=64, use_rotary_positional_embeddings=True), (4, 320, 240)),  # portrait
        (
            dict(
                attention_head_dim=64,
                use_rotary_positional_embeddings=True,
                patch_size_t=2,
                sample_height=96,
                sample_width=170,
            ),
            (22, 768, 1360),
        ),  # 1.5, 81 frames padded to 22 latent frames
    ],
)
def test_rope_tables_match_pipeline_at_released_sizes(config, size):
    """The RoPE tables at real sizes (the tiny tests cover few crop cases) equal the pipeline's."""
    from vidax.models.cogvideox.config import CogVideoXTransformerConfig
    from vidax.models.cogvideox.transformer import cogvideox_rope

    cfg = CogVideoXTransformerConfig.from_config_dict(dict(num_attention_heads=2, **config))
    t, height, width = size
    fake = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=types.SimpleNamespace(config=cfg))
    cos_ref, sin_ref = CogVideoXPipeline._prepare_rotary_positional_embeddings(fake, height, width, t, "cpu")
    grid = (t // cfg.patch_t, height // 16, width // 16)
    cos, sin = (np.asarray(a) for a in cogvideox_rope(cfg, grid))
    # The reference repeats each pair's value twice. Tolerance: the angles are float32 on both
    # sides, but torch's SIMD pow (the frequencies) and linspace (crop-region positions, computed
    # in blocks as (start + step * i0) + step * k) can differ from numpy's by 1 ulp, which at
    # angles up to ~45 rad is ~4e-6 absolute (measured max 3.5e-6).
    np.testing.assert_allclose(cos, cos_ref.numpy()[:, ::2], atol=1e-5)
    np.testing.assert_allclose(sin, sin_ref.numpy()[:, ::2], atol=1e-5)


@pytest.mark.parametrize("grid", [(13, 30, 45), (2, 4, 7)])
def test_sincos_table_matches_reference(grid):
    from diffusers.models.embeddings import get_3d_sincos_pos_embed

    from vidax.models.cogvideox.config import CogVideoXTransformerConfig
    from vidax.models.cogvideox.transformer import sincos_position_table

    cfg = CogVideoXTransformerConfig()  # 2B: D = 1920, interpolation scales 1.875 / 1.0
    t, h, w = grid
    ref = get_3d_sincos_pos_embed(1920, (w, h), t, 1.875, 1.0).flatten(0, 1).float().numpy()
    ours = np.asarray(sincos_position_table(cfg, grid))
    np.testing.assert_array_equal(ours, ref)  # the same float64 values rounded to float32
