"""Parity of vidax's HunyuanVideo VAE with diffusers ``AutoencoderKLHunyuanVideo`` (tiny, CPU, fp32).

Every parameter (group-norm weights and biases, attention projections included) is randomised,
saved with ``save_pretrained`` and loaded with the production loader
(:func:`~vidax.weights.component.load_component`). The reference runs its own paths: plain
``encoder`` / ``decoder``, ``tiled_encode`` / ``tiled_decode`` after ``enable_tiling`` and
``_temporal_tiled_encode`` / ``_temporal_tiled_decode`` (framewise), here at tiny tile sizes; each
test checks (by counting calls) that the reference really took the path under test. The tile sizes
are chosen so that tiles of different tests share shapes: the whole module compiles 9 tile
functions.

fp32 tolerance 1e-5 (max |err| / max |ref|): both sides compute the same convolutions, group norms
(statistics over whole tiles) and the attention in fp32 with different summation orders; measured
1e-6..3e-6. Any wrong tap, padding mode, frame, tile boundary or blend weight gives errors above
1e-2: the reference itself with per-frame group norms or zero padding moves by more than that on
these inputs (asserted below), so the parity would fail for either mistake.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import jax.numpy as jnp  # noqa: E402
from diffusers.models.autoencoders.autoencoder_kl_hunyuan_video import HunyuanVideoCausalConv3d  # noqa: E402

from tests.parity.helpers import (  # noqa: E402
    assert_input_sensitive,
    check_enable_tiling_decode,
    check_tiled_decode_memory_flat,
    check_tiling_switches,
    max_rel_err,
    reference_decoder,
    reference_vae_decode,
    reference_vae_encode,
    save_random_vae,
)
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.hunyuan_video import vae as hv_vae  # noqa: E402
from vidax.models.hunyuan_video.config import HunyuanVideoVAEConfig  # noqa: E402
from vidax.models.hunyuan_video.vae import HunyuanVideoTiling  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5

# The released structure (four blocks: space resampled by the first three, time by the middle
# two, none by the last; equal channels at the last two levels; the mid blocks' attention) with
# distinct small channels 6 / 8 / 10 / 10, 4 latent channels, group size 3..5, one resnet per
# encoder block (two per decoder block) and a non-default scaling factor.
TINY = dict(
    block_out_channels=[6, 8, 10, 10],
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=2,
    scaling_factor=0.6,
)
Z_SHAPE = (1, 3, 3, 5, 4)  # 3 latent frames of 3 x 5 -> 9 frames of 24 x 40
X_SHAPE = (1, 9, 24, 40, 3)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    ref = diffusers.AutoencoderKLHunyuanVideo(**TINY).eval()
    path = tmp_path_factory.mktemp("hunyuan_vae")
    save_random_vae(ref, 0, path)
    return ref, load_component("AutoencoderKLHunyuanVideo", path)


def _latents(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _video(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


_TILED_PATHS = ("tiled_encode", "tiled_decode", "_temporal_tiled_encode", "_temporal_tiled_decode")


def _ref_decode(ref, z, tiling=HunyuanVideoTiling()):
    return reference_vae_decode(ref, z, tiling, _TILED_PATHS)


def _ref_encode(ref, x, tiling=HunyuanVideoTiling()):
    return reference_vae_encode(ref, x, tiling, _TILED_PATHS)


# -- untiled ----------------------------------------------------------------------------------


def test_decode_matches_reference(model):
    ref, vae = model
    z = _latents(Z_SHAPE, seed=1)
    want, calls = _ref_decode(ref, z)
    assert not any(calls.values()), calls  # plain decoder (3 latent frames <= 4)
    assert_input_sensitive(want, _ref_decode(ref, _latents(Z_SHAPE, seed=2))[0], 0.1)
    got = vae.decode(z)
    assert got.shape == want.shape == (1, 9, 24, 40, 3) and got.dtype == np.float32
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err
    assert vae.decode_chunks(z) == 1


def test_parity_would_catch_per_frame_group_norm_and_zero_padding(model):
    """The decode parity above fails for a VAE whose group norms take per-frame statistics or
    whose causal convolutions pad with zeros: on the same latents the reference itself, changed
    that way, moves by far more than FP32_TOL (and vidax matches the unchanged reference)."""
    ref, vae = model
    z = _latents(Z_SHAPE, seed=1)
    want, _ = _ref_decode(ref, z)
    assert max_rel_err(vae.decode(z), want) < FP32_TOL

    group_norm = torch.nn.GroupNorm.forward

    def per_frame(self, x):
        if x.ndim != 5:
            return group_norm(self, x)
        b, c, t, h, w = x.shape
        y = group_norm(self, x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w))
        return y.reshape(b, t, c, h, w).permute(0, 2, 1, 3, 4)

    with mock.patch.object(torch.nn.GroupNorm, "forward", per_frame):
        per_frame_out, _ = _ref_decode(ref, z)
    assert max_rel_err(per_frame_out, want) > 1e-2

    convs = [m for m in ref.modules() if isinstance(m, HunyuanVideoCausalConv3d)]
    assert convs and all(m.pad_mode == "replicate" for m in convs)
    try:
        for m in convs:
            m.pad_mode = "constant"
        zero_padded, _ = _ref_decode(ref, z)
    finally:
        for m in convs:
            m.pad_mode = "replicate"
    assert max_rel_err(zero_padded, want) > 1e-2


def test_encode_matches_reference(model):
    ref, vae = model
    x = _video(X_SHAPE, seed=3)
    (want_mean, want_logvar), calls = _ref_encode(ref, x)
    assert not any(calls.values()), calls  # 9 frames <= 16, no spatial tiling
    assert np.all((want_logvar > -30) & (want_logvar < 20))  # the clamp hides nothing here
    assert_input_sensitive(want_mean, _ref_encode(ref, _video(X_SHAPE, seed=4))[0][0], 0.1)
    mean, logvar = vae.encode(x)
    assert mean.shape == logvar.shape == want_mean.shape == (1, 3, 3, 5, 4)
    err = max(max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar))
    assert err < FP32_TOL, err


# -- temporal tiling (framewise) --------------------------------------------------------------

# Windows of 8 + 1 frames every 4 (latent: 2 + 1 every 1): encode blends 1 latent frame, decode 4.
TEMPORAL = HunyuanVideoTiling(tile_sample_min_num_frames=8, tile_sample_stride_num_frames=4)


def test_temporal_tiled_decode_matches_reference(model):
    """4 latent frames: windows [0, 3), [1, 4), [2, 4) (and [3, 4), which adds no frame)."""
    ref, vae = model
    z = _latents((1, 4, 3, 5, 4), seed=5)
    want, calls = _ref_decode(ref, z, TEMPORAL)
    assert calls["_temporal_tiled_decode"] == 1 and calls["tiled_decode"] == 0, calls
    assert_input_sensitive(want, _ref_decode(ref, _latents(z.shape, seed=6), TEMPORAL)[0], 0.1)
    # Framewise really differs from decoding the clip whole (which the default tiling does at 4).
    assert max_rel_err(_ref_decode(ref, z)[0], want) > 1e-2
    assert vae.decode_windows(4, TEMPORAL) == [(0, 3), (1, 4), (2, 4)]
    chunks = list(vae.iter_decode(z, tiling=TEMPORAL))
    assert len(chunks) == vae.decode_chunks(z, TEMPORAL) == 3
    assert [c.shape[1] for c in chunks] == [5, 4, 4] and all(isinstance(c, np.ndarray) for c in chunks)
    got = np.concatenate(chunks, axis=1)
    assert got.shape == want.shape == (1, 13, 24, 40, 3)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_temporal_tiled_encode_matches_reference(model):
    """13 frames: windows of frames [0, 9), [4, 13), [8, 13), [12, 13) (9, 9, 5, 1 frames; the
    last is the image-to-video shape). A blend of one latent frame has weight 1 on the previous
    window (``blend_t`` at y = 0), so latent frame 2 is window 0's and frame 3 window 1's."""
    ref, vae = model
    x = _video((1, 13, 24, 40, 3), seed=7)
    (want_mean, want_logvar), calls = _ref_encode(ref, x, TEMPORAL)
    assert calls["_temporal_tiled_encode"] == 1 and calls["tiled_encode"] == 0, calls
    assert max_rel_err(_ref_encode(ref, x)[0][0], want_mean) > 1e-2  # really other than whole
    mean, logvar = vae.encode(x, tiling=TEMPORAL)
    assert mean.shape == want_mean.shape == (1, 4, 3, 5, 4)
    err = max(max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar))
    assert err < FP32_TOL, err
    # One frame (the I2V image): the window shape above, a single latent frame.
    (one_mean, one_logvar), _ = _ref_encode(ref, x[:, :1])
    got_mean, got_logvar = vae.encode(x[:, :1])
    assert got_mean.shape == (1, 1, 3, 5, 4)
    assert max(max_rel_err(got_mean, one_mean), max_rel_err(got_logvar, one_logvar)) < FP32_TOL


# -- spatial tiling ---------------------------------------------------------------------------


def test_spatial_tiled_decode_matches_reference(model):
    """Latent 5 x 8 in tiles of 3 x 5 every 2 x 3 (pixels 24 x 40 every 16 x 24; blends of 8 rows
    and 16 columns): a 3 x 3 layout, so both blends and the corners where they meet run."""
    ref, vae = model
    tiling = HunyuanVideoTiling.enabled(
        tile_sample_min_height=24, tile_sample_min_width=40, tile_sample_stride_height=16, tile_sample_stride_width=24
    )
    z = _latents((1, 3, 5, 8, 4), seed=8)
    want, calls = _ref_decode(ref, z, tiling)
    assert calls["tiled_decode"] == 1 and calls["_temporal_tiled_decode"] == 0, calls
    assert_input_sensitive(want, _ref_decode(ref, _latents(z.shape, seed=9), tiling)[0], 0.1)
    got = vae.decode(z, tiling=tiling)
    assert got.shape == want.shape == (1, 9, 40, 64, 3)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_same_shape_tiles_decode_close_to_the_whole(model):
    """The plan's larger tiles (``same_shape_tiles``: the last tile of a row / column ends at the
    edge): the latent 5 x 8 of the test above in 3 x 5 tiles every 2 x 3 gives tiles at rows 0, 2
    and columns 0, 3 (all 3 x 5: the reference's layout has 3 x 3 tiles in 4 shapes), the video
    of the whole size, as near the untiled decode as the reference's own tiles are (mean error
    within 1.5x: these 3 x 5 latent tiles of a random VAE are far from the whole decode either way;
    where each piece lands is checked exactly by tests/test_layers.py's same-shape test)."""
    ref, vae = model
    sizes = dict(
        tile_sample_min_height=24, tile_sample_min_width=40, tile_sample_stride_height=16, tile_sample_stride_width=24
    )
    z = _latents((1, 3, 5, 8, 4), seed=8)
    whole, _ = _ref_decode(ref, z)
    reference_tiles = vae.decode(z, tiling=HunyuanVideoTiling.enabled(**sizes))
    same = vae.decode(z, tiling=dataclasses.replace(HunyuanVideoTiling.enabled(**sizes), same_shape_tiles=True))
    assert same.shape == whole.shape == (1, 9, 40, 64, 3)
    assert not np.array_equal(same, reference_tiles)
    errors = [float(np.abs(v - whole).mean()) for v in (same, reference_tiles)]
    print("mean abs error vs the whole decode: same-shape %.4f, reference tiles %.4f" % tuple(errors))
    assert errors[0] < 1.5 * errors[1], errors


def test_enable_tiling_decode_matches_reference(model):
    """``enable_tiling`` with the tiles above on both sides (no new compile), plain ``decode``."""
    ref, vae = model
    kw = dict(
        tile_sample_min_height=24, tile_sample_min_width=40, tile_sample_stride_height=16, tile_sample_stride_width=24
    )
    check_enable_tiling_decode(
        ref, vae, _latents((1, 3, 5, 8, 4), seed=12), kw, reference_decoder(ref), vae.decode, FP32_TOL
    )


def test_framewise_decode_device_memory_flat_in_frames(model):
    """4 and 16 latent frames in windows of 3 latent frames every 1 (TEMPORAL's sizes, so the
    compiles of the temporal test): each window goes to host as it ends, so the live device
    bytes right after each window call grow by < 1.3x."""
    _, vae = model
    saved = vae.tiling
    try:
        check_tiled_decode_memory_flat(
            vae,
            hv_vae,
            "_decode_tile",
            vae.decode,
            _latents((1, 4, 3, 5, 4), seed=13),
            _latents((1, 16, 3, 5, 4), seed=14),
            dict(tile_sample_min_num_frames=8, tile_sample_stride_num_frames=4),
        )
    finally:
        vae.tiling = saved


def test_tiling_switches_match_reference(model):
    """``enable_tiling`` / ``disable_tiling`` / ``use_framewise_decoding`` leave the sizes and
    switches of the reference's same calls."""
    _, vae = model
    ref = diffusers.AutoencoderKLHunyuanVideo(**TINY)
    saved = vae.tiling
    vae.tiling = HunyuanVideoTiling()
    try:
        check_tiling_switches(
            ref,
            vae,
            [
                ("enable", dict(tile_sample_min_height=320, tile_sample_stride_num_frames=8)),
                ("framewise", False),
                ("disable", {}),
                ("enable", {}),
                ("framewise", True),
            ],
        )
        with pytest.raises(InputError, match=r"tile_sample_stride_width=300 must be at most tile_sample_min_width=256"):
            vae.enable_tiling(tile_sample_stride_width=300)
    finally:
        vae.tiling = saved


def test_spatial_tiled_encode_matches_reference(model):
    """One frame of 24 x 64 in tiles of 24 x 40 every 24 x 24: three columns (latent blends of
    2 columns), the first two of the untiled image-to-video shape."""
    ref, vae = model
    tiling = HunyuanVideoTiling.enabled(
        tile_sample_min_height=24, tile_sample_min_width=40, tile_sample_stride_height=24, tile_sample_stride_width=24
    )
    x = _video((1, 1, 24, 64, 3), seed=10)
    (want_mean, want_logvar), calls = _ref_encode(ref, x, tiling)
    assert calls["tiled_encode"] == 1 and calls["_temporal_tiled_encode"] == 0, calls
    assert max_rel_err(_ref_encode(ref, x)[0][0], want_mean) > 1e-2  # really other than whole
    mean, logvar = vae.encode(x, tiling=tiling)
    assert mean.shape == want_mean.shape == (1, 1, 3, 8, 4)
    err = max(max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar))
    assert err < FP32_TOL, err


# -- contract, config and input errors (no compiles) ------------------------------------------


def test_latent_normalisation_is_the_pipelines_scaling(model):
    _, vae = model
    z = _latents(Z_SHAPE, seed=11)
    np.testing.assert_allclose(np.asarray(vae.normalize_latents(z)), z * np.float32(0.6), rtol=1e-7)
    np.testing.assert_allclose(vae.denormalize_latents(z), z / np.float32(0.6), rtol=1e-7)
    assert vae.config.spatial_compression == 8 and vae.config.temporal_compression == 4


def test_default_tiling_is_the_references():
    ref = diffusers.AutoencoderKLHunyuanVideo(**TINY)
    default = HunyuanVideoTiling()
    own = {"same_shape_tiles"}  # vidax's (the memory plan's tile layout), not the reference's
    for f in dataclasses.fields(default):
        assert f.name in own or getattr(ref, f.name) == getattr(default, f.name), f.name
    ref.enable_tiling(tile_sample_min_height=64)
    enabled = HunyuanVideoTiling.enabled(tile_sample_min_height=64)
    for f in dataclasses.fields(enabled):
        assert f.name in own or getattr(ref, f.name) == getattr(enabled, f.name), f.name


def test_decode_windows_follow_the_reference_rule(model):
    _, vae = model
    # Defaults: framewise above 4 latent frames, windows of 5 every 3 (33 latent = 129 frames).
    assert vae.decode_windows(4) == [(0, 4)]
    assert vae.decode_windows(5) == [(0, 5), (3, 5)]
    assert vae.decode_windows(33)[-2:] == [(27, 32), (30, 33)] and len(vae.decode_windows(33)) == 11
    off = dataclasses.replace(HunyuanVideoTiling(), use_framewise_decoding=False)
    assert vae.decode_windows(33, off) == [(0, 33)]


def test_config_refusals():
    ok = HunyuanVideoVAEConfig.from_config_dict(TINY)
    assert ok.resampling() == ((True, False), (True, True), (True, True), (False, False))
    for bad, key in ((dict(TINY, temporal_compression_ratio=8), "temporal_compression_ratio"),
                     (dict(TINY, act_fn="gelux"), "act_fn"),  # not a get_activation name
                     (dict(TINY, down_block_types=["DownEncoderBlock2D"] * 4), "down_block_types"),
                     (dict(TINY, spatial_compression_ratio=12), "spatial_compression_ratio"),
                     (dict(TINY, norm_num_groups=4), "norm_num_groups"),
                     (dict(TINY, block_out_channels=[6, 8], down_block_types=["HunyuanVideoDownBlock3D"] * 2,
                           up_block_types=["HunyuanVideoUpBlock3D"] * 2), "2 blocks resample by 4 in space and 2")):  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            HunyuanVideoVAEConfig.from_config_dict(bad)


def test_input_errors(model):
    _, vae = model
    with pytest.raises(InputError, match="channels"):
        vae.decode(_latents((1, 3, 4, 3, 5), seed=0))  # channels-first by mistake
    with pytest.raises(InputError, match="5-D"):
        vae.encode(_video((9, 24, 40, 3), seed=0))
    with pytest.raises(InputError, match="stride"):
        vae.decode(_latents(Z_SHAPE, 0), tiling=HunyuanVideoTiling(tile_sample_stride_num_frames=20))
    with pytest.raises(InputError, match="tiling"):
        vae.decode(jnp.zeros(Z_SHAPE), tiling="on")
