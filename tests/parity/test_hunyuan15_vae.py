"""Parity of vidax's HunyuanVideo 1.5 VAE with diffusers ``AutoencoderKLHunyuanVideo15`` (tiny, CPU, fp32).

Every parameter (RMS-norm gammas, attention projections, resampler convs included) is randomised,
saved with ``save_pretrained`` and loaded with the production loader
(:func:`~vidax.weights.component.load_component`). The reference runs its own paths: plain
``encoder`` / ``decoder``, and ``tiled_encode`` / ``tiled_decode`` after ``enable_tiling`` at tiny
tile sizes giving 2 x 2 tiles; each tiled test checks (by counting calls) that the reference
really took the tiled path.

The tiny config has the released structure (16x spatial / 4x temporal: five blocks, the first
four resampling space, the middle two of those time, a last plain block with the channels of the
one before) with distinct small channels 6 / 8 / 16 / 32 / 32 and 4 latent channels (the
reference's channel folds need these divisibilities), one resnet per encoder block and a
non-default scaling factor.

fp32 tolerance 1e-5 (max |err| / max |ref|): both sides compute the same convolutions, RMS norms
and frame-causal attention in fp32 with different summation orders (XLA vs oneDNN
convolutions); measured ~3e-6 decode, ~6e-7 encode. A wrong fold order, tap, padding or blend
weight moves the output by far more (a transposed space-to-channel fold is checked below).
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.parity.helpers import (  # noqa: E402
    assert_input_sensitive,
    check_enable_tiling_decode,
    check_tiling_switches,
    max_rel_err,
    reference_decoder,
    reference_vae_decode,
    reference_vae_encode,
    save_random_vae,
)
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.hunyuan_video15.config import HunyuanVideo15VAEConfig  # noqa: E402
from vidax.models.hunyuan_video15.vae import HunyuanVideo15Tiling  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5

TINY = dict(
    block_out_channels=[6, 8, 16, 32, 32],
    latent_channels=4,
    layers_per_block=1,
    scaling_factor=0.7,
)
Z_SHAPE = (1, 3, 3, 5, 4)  # 3 latent frames of 3 x 5 -> 9 frames of 48 x 80
X_SHAPE = (1, 9, 48, 80, 3)

# Sample tiles of 64 every 48 pixels, latent tiles of 4 every 3 (overlap 0.25): 6 x 6 latents
# decode as 2 x 2 tiles (blends of 16 pixels, 48 kept); 96 x 96 pixels encode as 2 x 2 tiles
# (blends of 1 latent row / column, 3 kept).
TILED = HunyuanVideo15Tiling.enabled(
    tile_sample_min_height=64, tile_sample_min_width=64, tile_latent_min_height=4, tile_latent_min_width=4
)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    ref = diffusers.AutoencoderKLHunyuanVideo15(**TINY).eval()
    path = tmp_path_factory.mktemp("hunyuan15_vae")
    save_random_vae(ref, 0, path)
    return ref, load_component("AutoencoderKLHunyuanVideo15", path)


def _latents(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _video(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


_TILED_PATHS = ("tiled_encode", "tiled_decode")


def _ref_decode(ref, z, tiling=HunyuanVideo15Tiling()):
    return reference_vae_decode(ref, z, tiling, _TILED_PATHS)


def _ref_encode(ref, x, tiling=HunyuanVideo15Tiling()):
    return reference_vae_encode(ref, x, tiling, _TILED_PATHS)


# -- untiled ----------------------------------------------------------------------------------


def test_decode_matches_reference(model):
    ref, vae = model
    z = _latents(Z_SHAPE, seed=1)
    want, calls = _ref_decode(ref, z)
    assert not any(calls.values()), calls
    assert_input_sensitive(want, _ref_decode(ref, _latents(Z_SHAPE, seed=2))[0], 0.1)
    chunks = list(vae.iter_decode(z))
    assert len(chunks) == vae.decode_chunks(z) == 1 and isinstance(chunks[0], np.ndarray)
    got = vae.decode(z)
    assert got.shape == want.shape == (1, 9, 48, 80, 3) and got.dtype == np.float32
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_encode_matches_reference(model):
    ref, vae = model
    x = _video(X_SHAPE, seed=3)
    (want_mean, want_logvar), calls = _ref_encode(ref, x)
    assert not any(calls.values()), calls
    assert np.all((want_logvar > -30) & (want_logvar < 20))  # the clamp hides nothing here
    assert_input_sensitive(want_mean, _ref_encode(ref, _video(X_SHAPE, seed=4))[0][0], 0.1)
    mean, logvar = vae.encode(x)
    assert mean.shape == logvar.shape == want_mean.shape == (1, 3, 3, 5, 4)
    err = max(max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar))
    assert err < FP32_TOL, err


def test_encode_one_frame_matches_reference(model):
    """The I2V pipeline encodes the conditioning image as a single frame."""
    ref, vae = model
    x = _video((1, 1, 48, 80, 3), seed=5)
    (want_mean, _), _ = _ref_encode(ref, x)
    mean, _ = vae.encode(x)
    assert mean.shape == want_mean.shape == (1, 1, 3, 5, 4)
    assert max_rel_err(mean, want_mean) < FP32_TOL


def test_parity_would_catch_a_transposed_fold(model):
    """The decode parity fails for an up-sampler that unfolds channels to (W, H) instead of
    (H, W): the reference itself, changed that way, moves by far more than FP32_TOL."""
    from diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15 import HunyuanVideo15Upsample

    ref, _ = model
    z = _latents((1, 3, 4, 4, 4), seed=11)  # square, so the transposed unfold keeps the shapes
    right, _ = _ref_decode(ref, z)
    original = HunyuanVideo15Upsample._dcae_upsample_rearrange

    def transposed(tensor, r1=1, r2=2, r3=2):
        return original(tensor, r1, r2, r3).transpose(-1, -2).contiguous()

    with mock.patch.object(HunyuanVideo15Upsample, "_dcae_upsample_rearrange", staticmethod(transposed)):
        wrong, _ = _ref_decode(ref, z)
    assert max_rel_err(wrong, right) > 1e-2


# -- spatial tiling ---------------------------------------------------------------------------


def test_tiled_decode_matches_reference(model):
    ref, vae = model
    z = _latents((1, 2, 6, 6, 4), seed=6)
    want, calls = _ref_decode(ref, z, TILED)
    assert calls["tiled_decode"] == 1, calls
    assert_input_sensitive(want, _ref_decode(ref, _latents(z.shape, seed=7), TILED)[0], 0.1)
    # Tiling really changes the result (the blends differ from one whole decode).
    assert max_rel_err(_ref_decode(ref, z)[0], want) > 1e-3
    got = vae.decode(z, tiling=TILED)
    assert got.shape == want.shape == (1, 5, 96, 96, 3)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_enable_tiling_decode_matches_reference(model):
    """``enable_tiling`` with TILED's keywords on both sides (its shapes: no new compile)."""
    ref, vae = model
    kw = dict(
        tile_sample_min_height=64,
        tile_sample_min_width=64,
        tile_latent_min_height=4,
        tile_latent_min_width=4,
        tile_overlap_factor=0.25,
    )
    check_enable_tiling_decode(
        ref, vae, _latents((1, 2, 6, 6, 4), seed=11), kw, reference_decoder(ref), vae.decode, FP32_TOL
    )


def test_tiled_encode_matches_reference(model):
    ref, vae = model
    x = _video((1, 5, 96, 96, 3), seed=8)
    (want_mean, want_logvar), calls = _ref_encode(ref, x, TILED)
    assert calls["tiled_encode"] == 1, calls
    assert_input_sensitive(want_mean, _ref_encode(ref, _video(x.shape, seed=9), TILED)[0][0], 0.1)
    assert max_rel_err(_ref_encode(ref, x)[0][0], want_mean) > 1e-3
    mean, logvar = vae.encode(x, tiling=TILED)
    assert mean.shape == want_mean.shape == (1, 2, 6, 6, 4)
    err = max(max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar))
    assert err < FP32_TOL, err


# -- the contract, defaults and refusals ------------------------------------------------------


def test_latent_normalisation_is_the_pipelines_scaling(model):
    _, vae = model
    z = _latents(Z_SHAPE, seed=10)
    np.testing.assert_allclose(np.asarray(vae.normalize_latents(z)), z * np.float32(0.7), rtol=1e-7)
    np.testing.assert_allclose(vae.denormalize_latents(z), z / np.float32(0.7), rtol=1e-7)


def test_default_tiling_is_the_references(model):
    ref, vae = model
    fresh = diffusers.AutoencoderKLHunyuanVideo15(**TINY)
    default = HunyuanVideo15Tiling().resolved(16)
    for f in dataclasses.fields(default):
        assert getattr(default, f.name) == getattr(fresh, f.name), f.name
    # enable_tiling(sample sizes only) keeps the latent tile size of construction, as the reference.
    fresh.enable_tiling(tile_sample_min_height=128, tile_sample_min_width=96)
    ours = HunyuanVideo15Tiling.enabled(tile_sample_min_height=128, tile_sample_min_width=96).resolved(16)
    for f in dataclasses.fields(ours):
        assert getattr(ours, f.name) == getattr(fresh, f.name), f.name
    # The VAE's switches leave the reference's sizes, call after call.
    saved = vae.tiling
    try:
        check_tiling_switches(
            diffusers.AutoencoderKLHunyuanVideo15(**TINY),
            vae,
            [
                ("enable", dict(tile_sample_min_height=128, tile_sample_min_width=96)),
                ("disable", {}),
                ("enable", dict(tile_latent_min_width=6, tile_overlap_factor=0.5)),
            ],
        )
        with pytest.raises(InputError, match="tile_overlap_factor"):
            vae.enable_tiling(tile_overlap_factor=1.5)
        assert not hasattr(vae, "use_framewise_decoding")  # no temporal tiles in the reference
    finally:
        vae.tiling = saved


def test_tiled_decode_is_the_references_tiling_at_half_its_tile(model):
    """``--vae-tiling`` (``enable_tiled_decode``) on the reference's sizes: the reference's tiling
    with 128-pixel sample tiles and 8-latent tiles, as its ``enable_tiling`` takes them (one tile
    of a whole default clip fits a 16 GB chip); sizes set before are kept."""
    ref, vae = model
    saved = vae.tiling
    try:
        vae.tiling = None
        vae.enable_tiled_decode()
        fresh = diffusers.AutoencoderKLHunyuanVideo15(**TINY)
        fresh.enable_tiling(
            tile_sample_min_height=128, tile_sample_min_width=128, tile_latent_min_height=8, tile_latent_min_width=8
        )
        ours = vae.tiling.resolved(16)
        for f in dataclasses.fields(ours):
            assert getattr(ours, f.name) == getattr(fresh, f.name), f.name
        vae.tiling = None
        vae.enable_tiling(tile_sample_min_height=64, tile_latent_min_height=4)
        vae.disable_tiling()
        vae.enable_tiled_decode()
        kept = vae.tiling.resolved(16)
        assert (kept.use_tiling, kept.tile_sample_min_height, kept.tile_latent_min_height) == (True, 64, 4)
        assert (kept.tile_sample_min_width, kept.tile_latent_min_width) == (256, 16)
    finally:
        vae.tiling = saved


@pytest.mark.parametrize(
    "override,match",
    [
        ({"block_out_channels": [6, 8, 12, 32, 32]}, "block_out_channels"),
        ({"block_out_channels": [8, 16, 32, 32]}, "block_out_channels"),
        ({"spatial_compression_ratio": 12}, "spatial_compression_ratio"),
        ({"temporal_compression_ratio": 32}, "temporal_compression_ratio"),
        ({"upsample_match_channel": "yes"}, "upsample_match_channel"),
        # naming no diffusers class: strict (AutoencoderKLHunyuanVideo15 takes no norm_num_groups and
        # ignores it, as vidax does then: tests/test_checkpoint_errors.py)
        ({"_class_name": None, "norm_num_groups": 32}, "unknown setting norm_num_groups"),
    ],
)
def test_config_refusals(override, match):
    with pytest.raises(ConfigError, match=match):
        HunyuanVideo15VAEConfig.from_config_dict({"_class_name": "AutoencoderKLHunyuanVideo15", **TINY, **override})


def test_input_errors(model):
    _, vae = model
    with pytest.raises(InputError, match="z"):
        vae.decode(np.zeros((1, 2, 3, 5, 3), np.float32))
    with pytest.raises(InputError, match="video"):
        vae.encode(np.zeros((1, 5, 48, 80), np.float32))
    with pytest.raises(InputError, match="tile_overlap_factor"):
        vae.decode(_latents(Z_SHAPE, 0), tiling=HunyuanVideo15Tiling(tile_overlap_factor=1.5))
    with pytest.raises(InputError, match="tile_latent_min_height"):
        vae.decode(_latents(Z_SHAPE, 0), tiling=HunyuanVideo15Tiling(tile_latent_min_height=0))
    with pytest.raises(InputError, match="tiling="):
        vae.decode(_latents(Z_SHAPE, 0), tiling="on")
