"""Parity of vidax's CogVideoX VAE with diffusers ``AutoencoderKLCogVideoX`` (tiny, CPU, fp32/bf16).

Every parameter (group-norm weights and biases included) is randomised, saved with
``save_pretrained`` and loaded with the production loader (:func:`~vidax.weights.component.load_component`). The
reference runs its own temporal chunking (8 frames per encoder chunk, 2 latent frames per decoder
chunk, remainders in the first chunk) with its conv cache, and its own ``tiled_decode`` /
``tiled_encode`` after ``enable_tiling()``; the clips here span several chunks and odd
remainders, and the tiled cases use a 2 x 2 tile layout so that both blends and their corner meet.

fp32 tolerance 1e-5 (max |err| / max |ref|): both sides compute the same convolutions and group
norms in fp32 with different summation orders; measured 0.8e-6..2.4e-6 (the group-norm variance
over a whole chunk is the largest term). Any wrong tap, frame, chunk boundary, blend weight or
channel gives errors above 1e-2 (an off-by-one blend neighbour: 6e-2).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import jax.numpy as jnp  # noqa: E402

from tests.parity.helpers import (  # noqa: E402
    channels_first,
    channels_last,
    check_enable_tiling_decode,
    check_tiled_decode_memory_flat,
    check_tiling_switches,
    max_rel_err,
    psnr,
    reference_decoder,
    save_random_vae,
)
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.cogvideox import vae as cvx_vae  # noqa: E402
from vidax.models.cogvideox.config import CogVideoXVAEConfig  # noqa: E402
from vidax.models.cogvideox.vae import CogVideoXTiling, temporal_chunks  # noqa: E402
from vidax.nn import tiling as tiling_mod  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5
# bf16 weights and activations (8-bit mantissa, rel. rounding 2^-9 ~ 2e-3 per op) through ~30
# convolutions and group norms of an input-sensitive random VAE: measured max error 2.6e-2 for
# decode (PSNR 57 dB over the output range) and 0.8e-2 for the encoder's mean; 6e-2 leaves 2x
# margin and stays far below the 0.86..0.99 by which unrelated inputs' outputs differ.
BF16_TOL = 6e-2

# The released structure (four blocks, time resampled by the first two levels, equal channels
# at the middle levels) with distinct small channels 8 / 16 / 16 / 24, 4 latent channels, group
# size 2..6, a non-default norm_eps (used only by the encoder's resnets).
TINY = dict(
    block_out_channels=[8, 16, 16, 24],
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=4,
    norm_eps=1e-4,
    scaling_factor=0.7,
    invert_scale_latents=True,
)
# Second structure: three blocks, time halved once (ratio 2), two resnets per block, other video
# channel counts.
TINY_B = dict(
    block_out_channels=[6, 9, 12],
    down_block_types=["CogVideoXDownBlock3D"] * 3,
    up_block_types=["CogVideoXUpBlock3D"] * 3,
    latent_channels=5,
    layers_per_block=2,
    norm_num_groups=3,
    temporal_compression_ratio=2,
    in_channels=2,
    out_channels=4,
)


# For the tiling tests (8 compiles per tiled decode: 4 tile shapes x first / later chunk), a
# two-block model, cheaper to compile: spatial factor 2, time halved once. sample_height /
# sample_width make tiles of 12 x 10 pixels (6 x 5 latents) whose step and crop agree, so tiled
# and untiled outputs have the same size.
TINY_TILE = dict(
    block_out_channels=[8, 12],
    down_block_types=["CogVideoXDownBlock3D"] * 2,
    up_block_types=["CogVideoXUpBlock3D"] * 2,
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=4,
    temporal_compression_ratio=2,
    sample_height=24,
    sample_width=20,
)


def _save(tmp_path_factory, config: dict, seed: int, name: str):
    ref = diffusers.AutoencoderKLCogVideoX(**config).eval()
    path = tmp_path_factory.mktemp(name)
    save_random_vae(ref, seed, path)
    return ref, path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    ref, path = _save(tmp_path_factory, TINY, 0, "cogvideox_vae_tiny")
    return ref, path, load_component("AutoencoderKLCogVideoX", path)


@pytest.fixture(scope="module")
def tile_model(tmp_path_factory):
    ref, path = _save(tmp_path_factory, TINY_TILE, 2, "cogvideox_vae_tile")
    return ref, path, load_component("AutoencoderKLCogVideoX", path)


def _to_ncthw(x):
    return torch.from_numpy(channels_first(x))


def _ref_decode(ref, z, tiled=False):
    ref.enable_tiling() if tiled else ref.disable_tiling()
    with torch.no_grad():
        return channels_last(ref.decode(_to_ncthw(z)).sample)


def _ref_encode(ref, x, tiled=False):
    ref.enable_tiling() if tiled else ref.disable_tiling()
    with torch.no_grad():
        dist = ref.encode(_to_ncthw(x)).latent_dist
    return channels_last(dist.mean), channels_last(dist.logvar)


def _latents(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _video(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _assert_sensitive(out, other):
    # The output must depend on the input: another input gives a clearly different output
    # (computed with vidax, same shapes and so no new compile, once vidax matches the reference).
    assert max_rel_err(other, out) > 0.1, max_rel_err(other, out)


# 5 latent frames (chunks of 3 then 2: an odd first chunk and a cached one) of 8 x 7 (16 x 14
# pixels with TINY_TILE, non-square): with 6 x 5 latent tiles every 5 x 4, a 2 x 2 tile layout.
BIG = (1, 5, 8, 7, 4)


@pytest.fixture(scope="module")
def big_reference(tile_model):
    ref, _, _ = tile_model
    z = _latents(BIG, seed=1)
    return z, _ref_decode(ref, z), _ref_decode(ref, z, tiled=True)


def test_temporal_chunks_match_reference_loop():
    # The reference's own examples (AutoencoderKLCogVideoX.__init__ comment) and small counts.
    assert temporal_chunks(12, 2) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 12)]
    assert temporal_chunks(13, 2) == [(0, 3), (3, 5), (5, 7), (7, 9), (9, 11), (11, 13)]
    assert temporal_chunks(49, 8) == [(0, 9)] + [(9 + 8 * k, 17 + 8 * k) for k in range(5)]
    assert temporal_chunks(1, 2) == [(0, 1)] and temporal_chunks(5, 8) == [(0, 5)]
    assert temporal_chunks(21, 8) == [(0, 13), (13, 21)]


def test_decode_one_latent_frame_matches_reference(tiny):
    """One latent frame (the 1-frame paths of the up-samplers and spatial norms), batch of 2."""
    ref, _, vae = tiny
    z = _latents((2, 1, 3, 5, 4), seed=2)  # 24 x 40 pixels, non-square
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == want.shape == (2, 1, 24, 40, 3)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    _assert_sensitive(want, vae.decode(_latents(z.shape, seed=3)))
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_decode_with_two_chunks_matches_reference(tiny):
    """5 latent frames: chunks of 3 (odd: first frames kept apart) and 2 (with the conv cache)."""
    ref, _, vae = tiny
    z = _latents((1, 5, 3, 5, 4), seed=1)
    want = _ref_decode(ref, z)
    before = cvx_vae._decode_chunk._cache_size()  # the programs jax compiled of it (its own cache)
    got = vae.decode(z)  # tiled=None: not tiled at this size, as the reference pipelines
    assert cvx_vae._decode_chunk._cache_size() - before == 2  # first chunk + all later ones
    assert got.shape == want.shape == (1, 17, 24, 40, 3)
    _assert_sensitive(want, vae.decode(_latents(z.shape, seed=11)))
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err
    # A longer clip compiles nothing new, and (causal) starts with the shorter clip's frames.
    longer = vae.decode(np.concatenate([z, _latents((1, 4, 3, 5, 4), seed=12)], axis=1))
    assert cvx_vae._decode_chunk._cache_size() - before == 2
    assert longer.shape == (1, 33, 24, 40, 3)
    np.testing.assert_array_equal(longer[:, :17], got)


def test_tiled_decode_matches_reference_tiled(tile_model, big_reference):
    """2 x 2 tiles (latent 6/3 x 5/3), each decoded in 2 temporal chunks, blended as the reference.

    Tiled and untiled decodes are not equal, in the reference as here: each tile has its own
    group-norm statistics and zero padding at its borders, which with this random VAE moves the
    output by 0.50 relative (PSNR 31.5 dB). What the reference defines is tiled == reference
    tiled and untiled == reference untiled, both to FP32_TOL; the tiled-minus-untiled difference
    then agrees too (to 10 FP32_TOL, as it subtracts two outputs of nearly equal size).
    """
    _, _, vae = tile_model
    z, want_untiled, want = big_reference
    got = vae.decode(z, tiled=True)
    assert got.shape == want.shape == want_untiled.shape == (1, 9, 16, 14, 3)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err
    untiled = vae.decode(z, tiled=False)
    assert max_rel_err(untiled, want_untiled) < FP32_TOL
    _assert_sensitive(untiled, vae.decode(_latents(BIG, seed=13), tiled=False))
    gap = max_rel_err(want, want_untiled)
    assert gap > 1e-2, gap  # the reference really tiled
    assert max_rel_err(got - untiled, want - want_untiled) < 10 * FP32_TOL


def test_enable_tiling_decode_matches_reference(tile_model, big_reference):
    """``enable_tiling`` with the same keywords on both sides (the tile sizes this model's
    defaults give, so the compiles of the test above serve: 2 x 2 tiles of 6 x 5 latents every
    5 x 4), then ``decode`` with ``tiled`` left to the switch."""
    ref, _, vae = tile_model
    z = big_reference[0]
    kw = dict(
        tile_sample_min_height=12,
        tile_sample_min_width=10,
        tile_overlap_factor_height=1 / 6,
        tile_overlap_factor_width=1 / 5,
    )
    check_enable_tiling_decode(ref, vae, z, kw, reference_decoder(ref), vae.decode, FP32_TOL)


def test_tiled_decode_device_memory_flat_in_frames(tile_model):
    """3 and 13 latent frames (chunks 3 + 2 k, as BIG: no new compile), tiled: the live device
    bytes right after each chunk call (weights, the chunk's output, the cache handed on) grow by
    < 1.3x: each chunk goes to host as it ends, one tile's cache lives at a time."""
    _, _, vae = tile_model
    check_tiled_decode_memory_flat(
        vae,
        cvx_vae,
        "_decode_chunk",
        vae.decode,
        _latents((1, 3, 8, 7, 4), seed=21),
        _latents((1, 13, 8, 7, 4), seed=22),
    )


def test_tiled_decode_blends_from_neighbours_as_blended_in_place(tile_model, big_reference):
    """The reference blends each tile with its neighbours *after* their own blends (in place), so
    the corner where four tiles meet depends on it; blending from pristine copies differs."""
    _, _, vae = tile_model
    z, _, want = big_reference
    original = tiling_mod.blend
    pristine = {}

    def blend_from_copy(a, b, extent, axis):
        # A copy of each tile before it is first written to; the top-left tile is never written.
        pristine.setdefault(id(b), b.copy())
        original(pristine.get(id(a), a), b, extent, axis)

    tiling_mod.blend = blend_from_copy
    try:
        other = vae.decode(z, tiled=True)
    finally:
        tiling_mod.blend = original
    assert max_rel_err(other, want) > 1e-2


@pytest.mark.parametrize("frames", [1, 17, 21])
def test_encode_matches_reference(tiny, frames):
    """1 frame (image-to-video), 17 = 9 + 8 (the pipelines' 8 k + 1), 21 = 13 + 8 (remainder 5)."""
    ref, _, vae = tiny
    x = _video((1, frames, 24, 40, 3), seed=frames)
    want_mean, want_logvar = _ref_encode(ref, x)
    mean, logvar = vae.encode(x)
    assert mean.shape == logvar.shape == want_mean.shape
    assert mean.shape[1] == {1: 1, 17: 5, 21: 6}[frames]
    assert np.all((want_logvar > -30) & (want_logvar < 20))  # the clamp hides nothing here
    _assert_sensitive(want_mean, vae.encode(_video(x.shape, seed=frames + 10))[0])
    err_mean, err_logvar = max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar)
    assert err_mean < FP32_TOL and err_logvar < FP32_TOL, (err_mean, err_logvar)


def test_tiled_encode_matches_reference_tiled(tile_model):
    """16 x 14 pixels in 12 x 10 tiles every 10 x 8: a 2 x 2 layout; 9 frames."""
    ref, _, vae = tile_model
    x = _video((1, 9, 16, 14, 3), seed=5)
    want_mean, want_logvar = _ref_encode(ref, x, tiled=True)
    mean, logvar = vae.encode(x, tiled=True)
    assert mean.shape == want_mean.shape == (1, 5, 8, 7, 4)
    err = max(max_rel_err(mean, want_mean), max_rel_err(logvar, want_logvar))
    assert err < FP32_TOL, err
    assert max_rel_err(_ref_encode(ref, x)[0], want_mean) > 1e-2  # the reference really tiled


def test_config_exposes_what_pipelines_read(tiny):
    _, _, vae = tiny
    assert vae.scaling_factor == vae.config.scaling_factor == 0.7
    assert vae.config.invert_scale_latents is True
    assert vae.config.compress_time == (True, True, False)
    assert (vae.config.temporal_compression, vae.config.spatial_compression) == (4, 8)


def test_tiling_arguments_match_enable_tiling(tiny):
    """``CogVideoXTiling`` derives the reference's tile attributes, defaults and overrides."""
    _, path, vae = tiny
    cls = diffusers.AutoencoderKLCogVideoX
    ref = cls.from_config(cls.load_config(path))
    sides = ("height", "width")
    names = [f"tile_{kind}_min_{side}" for kind in ("sample", "latent") for side in sides]
    names += ["tile_overlap_factor_height", "tile_overlap_factor_width"]
    override = dict(tile_sample_min_height=64, tile_sample_min_width=80,
                    tile_overlap_factor_height=0.25, tile_overlap_factor_width=0.3)  # fmt: skip
    for kw in ({}, override):
        ref.enable_tiling(**kw)
        ours = CogVideoXTiling.from_config(vae.config, **kw)
        assert [getattr(ours, n) for n in names] == [getattr(ref, n) for n in names], kw
    # The VAE's switches: sizes kept across calls and across disable_tiling, as the reference's.
    fresh = cls.from_config(cls.load_config(path))
    try:
        check_tiling_switches(
            fresh,
            vae,
            [
                ("enable", dict(tile_sample_min_width=40)),
                ("disable", {}),
                ("enable", dict(tile_overlap_factor_height=0.3)),
            ],
        )
        with pytest.raises(InputError, match=r"^tile_overlap_factor_width=1.5 must be a number in \(0, 1\)"):
            vae.enable_tiling(tile_overlap_factor_width=1.5)
    finally:  # the defaults again, off
        default = CogVideoXTiling.from_config(vae.config)
        vae.enable_tiling(**{k: getattr(default, k) for k in override})
        vae.disable_tiling()
    assert not vae.use_tiling and vae.tiling == CogVideoXTiling.from_config(vae.config)


def test_second_structure_matches_reference(tmp_path_factory):
    ref, path = _save(tmp_path_factory, TINY_B, 1, "cogvideox_vae_tiny_b")
    vae = load_component("AutoencoderKLCogVideoX", path)
    assert (vae.config.temporal_compression, vae.config.spatial_compression) == (2, 4)
    z = _latents((1, 3, 3, 2, 5), seed=7)  # one chunk of 3: the odd first-frame paths
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == want.shape == (1, 5, 12, 8, 4)
    assert max_rel_err(got, want) < FP32_TOL, max_rel_err(got, want)
    x = _video((1, 11, 12, 8, 2), seed=8)  # one chunk of 11: odd, halved to 6
    want_mean, want_logvar = _ref_encode(ref, x)
    mean, logvar = vae.encode(x)
    assert mean.shape == want_mean.shape == (1, 6, 3, 2, 5)
    assert max_rel_err(mean, want_mean) < FP32_TOL and max_rel_err(logvar, want_logvar) < FP32_TOL


def test_bf16_close_to_reference(tiny):
    ref, path, _ = tiny
    vae = load_component("AutoencoderKLCogVideoX", path, dtype="bfloat16")
    norm = vae.decoder.norm_out.norm_layer.scale[...]
    assert norm.dtype == jnp.float32 and vae.decoder.conv_in.conv.kernel[...].dtype == jnp.bfloat16
    # One decoder chunk of 3 latent frames and one encoder chunk of 5 frames (bf16 compiles are
    # slow on CPU; the chunk structure is covered in fp32).
    z = _latents((1, 3, 2, 3, 4), seed=9)
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.dtype == np.float32
    err = max_rel_err(got, want)
    assert err < BF16_TOL and psnr(got, want, 2 * np.abs(want).max()) > 45.0, (err, psnr(got, want))
    x = _video((1, 5, 16, 24, 3), seed=10)
    want_mean, _ = _ref_encode(ref, x)
    mean, _ = vae.encode(x)
    err = max_rel_err(mean, want_mean)
    assert err < BF16_TOL, err


def test_bad_inputs(tiny):
    _, _, vae = tiny
    with pytest.raises(InputError, match="channels-first"):
        vae.encode(_video((1, 3, 5, 16, 16), 0))
    with pytest.raises(InputError, match="at least 8"):
        vae.encode(_video((1, 1, 4, 16, 3), 0))
    with pytest.raises(InputError, match="5-D"):
        vae.decode(np.zeros((3, 5, 4), np.float32))
    with pytest.raises(InputError, match="floating"):
        vae.decode(np.zeros((1, 1, 3, 5, 4), np.int32))
    with pytest.raises(InputError, match="tiled"):
        vae.decode(_latents((1, 1, 3, 5, 4), 0), tiled="yes")
    with pytest.raises(InputError, match="tile step"):
        CogVideoXTiling.from_config(vae.config, tile_sample_min_height=8)
    # Tiles that advance 48 px but keep 54 (72 px, factor 1/4): the reference's video comes out
    # the wrong size (trial: 24 x 16 latents -> 330 x 156 pixels), so vidax refuses the setting.
    with pytest.raises(
        InputError,
        match=r"^tile_sample_min_height=72: its tiles advance 48 pixels but each keeps "
        r"54, .* wrong size .*: 32, 64, 96$",
    ):
        vae.enable_tiling(tile_sample_min_height=72, tile_overlap_factor_height=0.25)
    with pytest.raises(InputError, match=r"no size up to 224 tiles exactly with tile_overlap_factor_width=0.34"):
        vae.enable_tiling(tile_sample_min_width=40, tile_overlap_factor_width=0.34)
    # A VAE whose own default tiles do not tile exactly (sample_height 32 -> 16 px tiles; trial 4:
    # enable_tiling() then gave a 50x56 video for 32x48): the sizes not given are checked too.
    with pytest.raises(
        InputError,
        match=r"^tile_sample_min_height=16 \(the VAE's current size, not given here\): "
        r"its tiles advance 8 pixels but each keeps 14",
    ):
        CogVideoXTiling(16, 40, spatial_compression=8).check_exact(given=["tile_sample_min_width"])
    CogVideoXTiling(48, 40, spatial_compression=8).check_exact()
    with pytest.raises(InputError, match="dtype"):
        load_component("AutoencoderKLCogVideoX", "/nonexistent", dtype=jnp.float16)


@pytest.mark.parametrize(
    "key,value",
    [
        ("use_quant_conv", True),
        ("use_post_quant_conv", True),
        ("act_fn", "gelux"),  # not one of diffusers' get_activation names (gelu, mish, relu... are taken)
        ("down_block_types", ["DownEncoderBlock2D"] * 4),
        ("norm_num_groups", 3),
        ("temporal_compression_ratio", 3),
        ("mystery_key", 1),
    ],
)
def test_config_refuses_unimplemented(key, value):
    with pytest.raises(ConfigError, match=key if key != "norm_num_groups" else "divisible"):
        CogVideoXVAEConfig.from_config_dict({**TINY, key: value})
