"""Parity of vidax's Wan2.2 VAE settings with diffusers ``AutoencoderKLWan`` (tiny, CPU).

The TI2V-5B VAE's settings: ``is_residual`` (residual down / up blocks with the parameter-free
``AvgDown3D`` / ``DupUp3D`` shortcuts), ``patch_size`` 2 (video folded to 12 channels),
``decoder_base_dim``, ``z_dim`` != 16, ``clip_output`` (unknown to diffusers 0.42.1). Every
parameter is randomised, saved with ``save_pretrained`` and loaded with :func:`~vidax.weights.component.load_component`;
the reference runs its own frame-chunked encode / decode, so the multi-chunk cases check the
cache across chunks, including the residual shortcuts' first-chunk handling.

fp32 tolerance 2e-5 (max |err| / max |ref|): the same fp32 convolutions and averages with other
summation orders; measured 0.3e-6..1.0e-6 (encode) and 0.7e-6..4.3e-6 (decode). These random
residual decoders amplify rounding: diffusers' own fp32 decode is 1.0e-6..1.5e-6 away from its
float64 run (vidax's 1.9e-6..3.1e-6). A wrong channel order, tap or frame gives errors of order
1e-1 (see the input-sensitivity checks).
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import jax.numpy as jnp  # noqa: E402
from diffusers.models.autoencoders import autoencoder_kl_wan as ref_wan  # noqa: E402

from tests.parity.helpers import max_rel_err, psnr  # noqa: E402
from tests.parity.test_wan_vae import (  # noqa: E402  (the Wan2.1 test's reference runners)
    _assert_meaningful,
    _latents,
    _ref_decode,
    _ref_encode,
    _save,
    _to_ncthw,
    _to_nthwc,
    _video,
)
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.wan.config import WanVAEConfig  # noqa: E402
from vidax.models.wan.vae import normalize_latents  # noqa: E402
from vidax.models.wan.vae_folding import avg_down_3d, dup_up_3d, patchify, unpatchify  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 2e-5
# bf16 weights and activations through ~25 convolutions and norms: measured 1.7e-2 max error
# (decode, PSNR 58 dB on [-1, 1]) and 9.4e-3 (encode mean); 6e-2 leaves 3x margin and stays far
# below the > 0.1 relative difference between unrelated inputs (see _assert_meaningful).
BF16_TOL = 6e-2

# TI2V-5B structure (dim_mult [1, 2, 4, 4], temporal down-sampling on the last two levels,
# residual blocks, patch size 2, decoder wider than the encoder) at distinct small widths:
# encoder 6 / 12 / 24, decoder 20 / 10 / 5, z_dim 7, 12 folded channels in and out.
TINY = dict(
    base_dim=6,
    decoder_base_dim=5,
    z_dim=7,
    dim_mult=[1, 2, 4, 4],
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[False, True, True],
    is_residual=True,
    patch_size=2,
    in_channels=12,
    out_channels=12,
    scale_factor_temporal=4,
    scale_factor_spatial=16,
    latents_mean=[0.3, -0.7, 1.1, 0.05, -0.2, 0.4, 0.0],
    latents_std=[1.7, 0.6, 2.3, 1.2, 0.9, 1.4, 0.5],
)
# Second structure: residual without patchifying, 3 levels, both halving time (so the first
# level's shortcut folds time too), 2 residual blocks, other channel counts.
TINY_B = dict(
    base_dim=4,
    decoder_base_dim=3,
    z_dim=5,
    dim_mult=[1, 2, 2],
    num_res_blocks=2,
    temperal_downsample=[True, True],
    is_residual=True,
    in_channels=2,
    out_channels=5,
    scale_factor_spatial=4,
    latents_mean=[0.0] * 5,
    latents_std=[1.0] * 5,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    ref, path = _save(tmp_path_factory, TINY, 3, "wan22_vae_tiny")
    # clip_output as the Wan2.2 converter writes it; unknown to diffusers 0.42.1 (see its test).
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "clip_output": False}))
    return ref, path, load_component("AutoencoderKLWan", path)


# ----------------------------------------------------------------------------- layouts


def test_patchify_channel_order_brute_force():
    """Channel k of patch (i, j) holds pixel (i p + h_i, j p + w_i) of channel c with
    k = c p^2 + w_i p + h_i, as diffusers' ``patchify``; ``unpatchify`` inverts it."""
    p, (b, t, h, w, c) = 2, (2, 3, 6, 10, 3)
    x = np.random.default_rng(0).standard_normal((b, t, h, w, c)).astype(np.float32)
    got = np.array(patchify(jnp.asarray(x), p))
    assert got.shape == (b, t, h // p, w // p, c * p * p)
    for ci in range(c):
        for hi in range(p):
            for wi in range(p):
                k = ci * p * p + wi * p + hi
                np.testing.assert_array_equal(got[..., k], x[:, :, hi::p, wi::p, ci])
    want = _to_nthwc(ref_wan.patchify(torch.from_numpy(_to_ncthw(x)), p).numpy())
    np.testing.assert_array_equal(got, want)
    back = np.asarray(unpatchify(jnp.asarray(got), p))
    np.testing.assert_array_equal(back, x)
    ref_back = _to_nthwc(ref_wan.unpatchify(torch.from_numpy(np.array(_to_ncthw(got))), p).numpy())
    np.testing.assert_array_equal(back, ref_back)


@pytest.mark.parametrize("cin,cout,ft,fs,t", [(6, 12, 2, 2, 4), (6, 12, 2, 2, 1), (6, 6, 1, 2, 3), (8, 8, 1, 1, 2)])
def test_avg_down_matches_reference(cin, cout, ft, fs, t):
    x = _latents((2, t, 4, 6, cin), seed=t)
    want = _to_nthwc(ref_wan.AvgDown3D(cin, cout, ft, fs)(torch.from_numpy(_to_ncthw(x))).numpy())
    got = np.asarray(avg_down_3d(jnp.asarray(x), cout, ft, fs))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # fp32 means, other order


@pytest.mark.parametrize(
    "cin,cout,ft,first", [(12, 12, 2, False), (12, 12, 2, True), (12, 6, 2, True), (12, 6, 1, True)]
)
def test_dup_up_matches_reference(cin, cout, ft, first):
    x = _latents((2, 2, 3, 4, cin), seed=cin + cout)
    mod = ref_wan.DupUp3D(cin, cout, ft, 2)
    want = _to_nthwc(mod(torch.from_numpy(_to_ncthw(x)), first_chunk=first).numpy())
    got = np.asarray(dup_up_3d(jnp.asarray(x), cout, ft, 2, first))
    np.testing.assert_array_equal(got, want)  # pure data movement


# ----------------------------------------------------------------------------- whole VAE


@pytest.mark.parametrize("frames", [1, 3])
def test_decode_matches_reference(tiny, frames):
    """One latent frame (first chunk only) and three (cached chunks after it)."""
    ref, _, vae = tiny
    z = _latents((2, frames, 2, 3, 7), seed=frames)  # 32 x 48 pixels, non-square
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == want.shape == (2, 1 + 4 * (frames - 1), 32, 48, 3)
    _assert_meaningful(want, _ref_decode(ref, _latents(z.shape, seed=frames + 10)))
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_encode_matches_reference(tiny):
    ref, _, vae = tiny
    x = _video((2, 9, 32, 48, 3), seed=3)  # first frame + 2 chunks of 4
    want_mean, want_logvar = _ref_encode(ref, x)
    mean, logvar = vae.encode(x)
    assert mean.shape == logvar.shape == want_mean.shape == (2, 3, 2, 3, 7)
    other, _ = _ref_encode(ref, _video(x.shape, seed=4))
    assert max_rel_err(other, want_mean) > 0.1
    err_mean = max_rel_err(mean, want_mean)
    err_logvar = max_rel_err(logvar, want_logvar)
    assert err_mean < FP32_TOL and err_logvar < FP32_TOL, (err_mean, err_logvar)
    # Latent normalisation with the config's 7-channel statistics.
    np.testing.assert_allclose(
        np.asarray(normalize_latents(mean, vae.config)),
        (mean - np.float32(TINY["latents_mean"])) / np.float32(TINY["latents_std"]),
        rtol=1e-5, atol=1e-6,
    )  # fmt: skip


def test_second_structure_matches_reference(tmp_path_factory):
    """Residual without patchifying, time halved at the first level too, 2 res blocks."""
    ref, path = _save(tmp_path_factory, TINY_B, 1, "wan22_vae_tiny_b")
    vae = load_component("AutoencoderKLWan", path)
    z = _latents((1, 3, 3, 2, 5), seed=11)
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == want.shape == (1, 9, 12, 8, 5)
    _assert_meaningful(want, _ref_decode(ref, _latents(z.shape, seed=12)))
    assert max_rel_err(got, want) < FP32_TOL, max_rel_err(got, want)
    x = _video((1, 5, 12, 8, 2), seed=12)
    want_mean, want_logvar = _ref_encode(ref, x)
    mean, logvar = vae.encode(x)
    assert mean.shape == want_mean.shape == (1, 2, 3, 2, 5)
    assert max_rel_err(mean, want_mean) < FP32_TOL and max_rel_err(logvar, want_logvar) < FP32_TOL


def test_bf16_close_to_reference(tiny):
    ref, path, _ = tiny
    vae = load_component("AutoencoderKLWan", path, dtype=jnp.bfloat16)
    # One latent frame: bf16 compiles are slow on CPU; the multi-chunk path is covered in fp32.
    z = _latents((1, 1, 2, 3, 7), seed=5)
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    err = max_rel_err(got, want)
    assert err < BF16_TOL and psnr(got, want, 2.0) > 45.0, (err, psnr(got, want, 2.0))
    x = _video((1, 1, 32, 48, 3), seed=8)  # the residual encoder's first chunk in bf16
    want_mean, _ = _ref_encode(ref, x)
    mean, _ = vae.encode(x)
    assert max_rel_err(mean, want_mean) < BF16_TOL, max_rel_err(mean, want_mean)


def test_clip_output_is_ignored_like_the_reference(tiny, tmp_path):
    """diffusers 0.42.1 does not know ``clip_output``: it loads the file and still clamps."""
    _, path, _ = tiny
    assert json.loads((path / "config.json").read_text())["clip_output"] is False
    assert "clip_output" not in inspect.signature(diffusers.AutoencoderKLWan.__init__).parameters
    ref = diffusers.AutoencoderKLWan.from_pretrained(path).eval()
    with torch.no_grad():
        ref.decoder.conv_out.weight.mul_(10.0)  # push the output past [-1, 1]
    ref.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    z = _latents((1, 1, 2, 3, 7), seed=6)
    want = _ref_decode(ref, z)
    got = load_component("AutoencoderKLWan", tmp_path).decode(z)
    assert np.mean(np.abs(want) == 1.0) > 0.05  # clamped by the reference despite clip_output
    assert max_rel_err(got, want) < FP32_TOL


def test_config_checks():
    cfg = WanVAEConfig.from_config_dict({**TINY, "clip_output": False})
    assert (cfg.spatial_compression, cfg.pixel_multiple, cfg.video_in_channels) == (16, 16, 3)
    with pytest.raises(ConfigError, match="patch_size"):
        WanVAEConfig.from_config_dict({**TINY, "in_channels": 3})
    with pytest.raises(ConfigError, match="scale_factor_spatial"):
        WanVAEConfig.from_config_dict({**TINY, "scale_factor_spatial": 8})
    # The reference's AvgDown3D refuses 12 -> 18 channels with an 8x fold.
    with pytest.raises(ConfigError, match="is_residual"):
        WanVAEConfig.from_config_dict({**TINY, "dim_mult": [1, 2, 3, 3]})
    with pytest.raises(ValueError, match="divisible"):
        diffusers.AutoencoderKLWan(**{**TINY, "dim_mult": [1, 2, 3, 3]})


def test_bad_inputs(tiny):
    _, _, vae = tiny
    with pytest.raises(InputError, match="multiples of 16"):
        vae.encode(_video((1, 1, 24, 48, 3), 0))
    with pytest.raises(InputError, match="channels-first"):
        vae.encode(_video((1, 1, 32, 48, 12), 0))
    with pytest.raises(InputError, match="z_dim"):
        vae.decode(_latents((1, 1, 2, 3, 48), 0))


def test_tiled_decode_matches_reference_tiled(tiny):
    """Latent 4 x 5 (64 x 80 pixels) in tiles of 3 latent pixels every 2 -> 2 x 3 tiles; the
    reference blends the decoder's folded (p = 2) output before unfolding and clamping."""
    from tests.parity.test_wan_vae import check_tiled_decode

    ref, _, vae = tiny
    tiling = dict(
        tile_sample_min_height=48, tile_sample_min_width=48, tile_sample_stride_height=32, tile_sample_stride_width=32
    )
    check_tiled_decode(ref, vae, _latents((1, 2, 4, 5, 7), seed=40), tiling, seed=40)
