"""Parity of vidax's Wan2.1 VAE with diffusers ``AutoencoderKLWan`` (tiny configs, CPU, fp32/bf16).

Every parameter (norm gammas included) is randomised, saved with ``save_pretrained`` and loaded
with the production loader (:func:`~vidax.weights.component.load_component`). The reference runs its own frame-chunked
encode/decode (``feat_cache``), so multi-chunk cases check that the functional cache carries the
same frames (including the first-chunk zero / "Rep" cases).

fp32 tolerance 1e-5 (max |err| / max |ref|): both sides compute the same convolutions in fp32 with
different summation orders; the measured error is 0.6e-7..3.3e-7, 1e-5 leaves margin for other
CPUs / thread counts while any wrong tap, frame or channel gives errors of order 1e-1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from tests.parity.helpers import (  # noqa: E402
    check_enable_tiling_decode,
    check_tiled_decode_memory_flat,
    check_tiling_switches,
    max_rel_err,
    psnr,
    randomize_torch_module,
    reference_decoder,
)
from vidax.compile_cache import count_compiles  # noqa: E402
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.wan import vae as wan_vae  # noqa: E402
from vidax.models.wan.config import WanVAEConfig  # noqa: E402
from vidax.models.wan.vae import denormalize_latents, normalize_latents  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5
# bf16 weights and activations (8-bit mantissa, rel. rounding 2^-9 ~ 2e-3 per op) through ~20
# convolutions and norms with an input-sensitive random VAE: measured max error 3.0e-2 (decode,
# PSNR 53 dB on [-1, 1]); 6e-2 leaves 2x margin and stays below the ~1 of a structural error
# (unrelated latents differ by > 0.1 relative, see _assert_meaningful).
BF16_TOL = 6e-2

# Wan2.1 structure (dim_mult of 4 levels, temporal down-sampling on the last two), distinct
# channel counts 6 / 12 / 18 / 9 (decoder after up-sampling), z_dim 4.
TINY = dict(
    base_dim=6,
    z_dim=4,
    dim_mult=[1, 2, 3, 3],
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[False, True, True],
    dropout=0.0,
    latents_mean=[0.3, -0.7, 1.1, 0.05],
    latents_std=[1.7, 0.6, 2.3, 1.2],
)
# Second structure: the optional settings vidax implements (decoder_base_dim, in/out channels)
# and temporal down-sampling at other levels.
TINY_B = dict(
    base_dim=5,
    decoder_base_dim=4,
    z_dim=3,
    dim_mult=[1, 2, 3],
    num_res_blocks=2,
    temperal_downsample=[True, True],
    latents_mean=[0.0, 0.1, 0.2],
    latents_std=[1.0, 2.0, 3.0],
    in_channels=2,
    out_channels=5,
    scale_factor_spatial=4,
)


def _save(tmp_path_factory, config: dict, seed: int, name: str):
    ref = diffusers.AutoencoderKLWan(**config).eval()
    # Small biases and gain 0.7: with larger biases (or the default 0.5/0.5) a deep random conv stack forgets its input
    # (unrelated latents decode to nearly the same frames), which would make parity vacuous.
    randomize_torch_module(ref, seed, scale=0.1, gain=0.7)
    path = tmp_path_factory.mktemp(name)
    ref.save_pretrained(path)
    return ref, path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    ref, path = _save(tmp_path_factory, TINY, 0, "wan_vae_tiny")
    return ref, path, load_component("AutoencoderKLWan", path)


def _to_ncthw(x):
    return np.transpose(np.asarray(x), (0, 4, 1, 2, 3))


def _to_nthwc(x):
    return np.transpose(np.asarray(x), (0, 2, 3, 4, 1))


def _ref_decode(ref, z_nthwc):
    with torch.no_grad():
        return _to_nthwc(ref.decode(torch.from_numpy(_to_ncthw(z_nthwc))).sample.numpy())


def _ref_encode(ref, x_nthwc):
    with torch.no_grad():
        dist = ref.encode(torch.from_numpy(_to_ncthw(x_nthwc))).latent_dist
    return _to_nthwc(dist.mean.numpy()), _to_nthwc(dist.logvar.numpy())


def _latents(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _video(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _assert_meaningful(video, other=None):
    # A random VAE that saturates would make the clamp hide errors: most values must be inside.
    assert np.mean(np.abs(video) >= 1.0) < 0.05 and np.abs(video).mean() > 0.1
    # And the output must depend on the input: another input gives a clearly different video.
    if other is not None:
        assert max_rel_err(other, video) > 0.1


@pytest.mark.parametrize("frames", [1, 4])
def test_decode_matches_reference(tiny, frames):
    """One latent frame (first chunk only) and four (three cached chunks after it)."""
    ref, _, vae = tiny
    z = _latents((2, frames, 3, 5, 4), seed=frames)  # 24 x 40 pixels, non-square
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == want.shape == (2, 1 + 4 * (frames - 1), 24, 40, 3)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    _assert_meaningful(want, _ref_decode(ref, _latents(z.shape, seed=frames + 10)))
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def test_encode_matches_reference_and_compiles_twice(tiny):
    ref, _, vae = tiny
    x = _video((2, 9, 24, 40, 3), seed=3)  # first frame + 2 chunks of 4; shape used only here
    want_mean, want_logvar = _ref_encode(ref, x)
    before = wan_vae._encode_chunk._cache_size()  # the programs jax compiled of it (its own cache)
    mean, logvar = vae.encode(x)
    assert wan_vae._encode_chunk._cache_size() - before == 2  # first chunk + all others
    assert mean.shape == logvar.shape == want_mean.shape == (2, 3, 3, 5, 4)
    err_mean = max_rel_err(mean, want_mean)
    err_logvar = max_rel_err(logvar, want_logvar)
    assert err_mean < FP32_TOL and err_logvar < FP32_TOL, (err_mean, err_logvar)


def test_cache_changes_later_chunks(tiny):
    """The chunk cache is live: a frame decoded after others differs from it decoded alone."""
    _, _, vae = tiny
    z = _latents((2, 3, 3, 5, 4), seed=7)
    alone = vae.decode(z[:, 2:3])
    after = vae.decode(z)[:, -4:]
    assert alone.shape[1] == 1 and np.abs(after[:, :1] - alone).max() > 1e-2


def test_second_structure_matches_reference(tmp_path_factory):
    """decoder_base_dim, in/out channels, other temporal levels, 2 res blocks."""
    ref, path = _save(tmp_path_factory, TINY_B, 1, "wan_vae_tiny_b")
    vae = load_component("AutoencoderKLWan", path)
    z = _latents((1, 3, 3, 2, 3), seed=11)
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == want.shape == (1, 9, 12, 8, 5)
    assert max_rel_err(got, want) < FP32_TOL, max_rel_err(got, want)
    x = _video((1, 5, 12, 8, 2), seed=12)
    want_mean, want_logvar = _ref_encode(ref, x)
    mean, logvar = vae.encode(x)
    assert mean.shape == want_mean.shape == (1, 2, 3, 2, 3)
    assert max_rel_err(mean, want_mean) < FP32_TOL and max_rel_err(logvar, want_logvar) < FP32_TOL


def test_bf16_close_to_reference(tiny):
    ref, path, _ = tiny
    vae = load_component("AutoencoderKLWan", path, dtype=jnp.bfloat16)
    gamma = vae.decoder.norm_out.gamma[...]
    assert gamma.dtype == jnp.float32 and vae.decoder.conv_in.kernel[...].dtype == jnp.bfloat16
    z = _latents((1, 2, 3, 5, 4), seed=5)
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.dtype == np.float32
    err = max_rel_err(got, want)
    assert err < BF16_TOL and psnr(got, want, 2.0) > 45.0, (err, psnr(got, want, 2.0))
    # One frame: the encoder's layers in bf16 (bf16 compiles are slow on CPU; the multi-chunk
    # structure is covered in fp32).
    x = _video((1, 1, 24, 40, 3), seed=6)
    want_mean, _ = _ref_encode(ref, x)
    mean, _ = vae.encode(x)
    err = max_rel_err(mean, want_mean)
    assert err < BF16_TOL, err


def test_decode_compiles_one_program_and_streams_to_host(tiny):
    """Every chunk, the first latent frame's included, runs the one compiled decode program."""
    _, _, vae = tiny
    z = _latents((1, 6, 2, 3, 4), seed=9)  # a shape no other test uses
    live = []
    chunks = []
    with count_compiles() as counts:
        for chunk in vae.iter_decode(z):
            assert isinstance(chunk, np.ndarray)  # on host as soon as it is yielded
            chunks.append(chunk)
            live.append(sum(a.nbytes for a in jax.live_arrays()))
    assert [c.shape[1] for c in chunks] == [1, 4, 4, 4, 4, 4]
    assert counts.programs["jit(_decode_chunk)"] == 1, counts.programs
    # Device memory after each chunk (weights + cache) does not grow with the chunk index.
    assert max(live[1:]) <= live[1], live
    with count_compiles() as again_counts:
        again = vae.decode(z)
        one = vae.decode(z[:, :1])  # the first chunk alone: the same program
    assert again_counts.programs["jit(_decode_chunk)"] == 0, again_counts.programs
    np.testing.assert_array_equal(again, np.concatenate(chunks, axis=1))
    np.testing.assert_array_equal(one, chunks[0])


def test_latent_normalisation_matches_pipeline():
    cfg = WanVAEConfig.from_config_dict(TINY)
    z = _latents((2, 3, 2, 5, 4), seed=8)
    mean = torch.tensor(cfg.latents_mean).view(1, 4, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(cfg.latents_std).view(1, 4, 1, 1, 1)
    zt = torch.from_numpy(_to_ncthw(z))
    # pipeline_wan.py before vae.decode; pipeline_wan_i2v.py after vae.encode. Same fp32 formula;
    # XLA's division may differ from torch's by 1 ulp, hence rtol 1e-6.
    want_de = _to_nthwc(zt / inv_std + mean)
    want_no = _to_nthwc((zt - mean) * inv_std)
    got_de = np.asarray(denormalize_latents(z, cfg))
    got_no = np.asarray(normalize_latents(z, cfg))
    np.testing.assert_allclose(got_de, want_de, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_no, want_no, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(normalize_latents(denormalize_latents(z, cfg), cfg), z, atol=1e-5)
    with pytest.raises(InputError, match="z_dim=4"):
        normalize_latents(np.zeros((1, 1, 1, 1, 16), np.float32), cfg)


def test_bad_inputs(tiny):
    _, _, vae = tiny
    with pytest.raises(InputError, match="T=8"):
        vae.encode(_video((1, 8, 16, 16, 3), 0))
    with pytest.raises(InputError, match="channels-first"):
        vae.encode(_video((1, 3, 5, 16, 16), 0))
    with pytest.raises(InputError, match="5-D"):
        vae.decode(np.zeros((3, 5, 4), np.float32))
    with pytest.raises(InputError, match="floating"):
        vae.decode(np.zeros((1, 1, 3, 5, 4), np.int32))
    with pytest.raises(InputError, match="dtype"):
        load_component("AutoencoderKLWan", "/nonexistent", dtype=jnp.float16)


@pytest.mark.parametrize(
    "key,value",
    [("attn_scales", [0.5]), ("is_residual", True), ("patch_size", 2)],
)
def test_config_refuses_unimplemented(key, value):
    with pytest.raises(ConfigError, match=key):
        WanVAEConfig.from_config_dict({**TINY, key: value})


def test_config_refuses_inconsistent():
    with pytest.raises(ConfigError, match="latents_std"):
        WanVAEConfig.from_config_dict({**TINY, "latents_std": [1.0] * 16})
    with pytest.raises(ConfigError, match="temperal_downsample"):
        WanVAEConfig.from_config_dict({**TINY, "temperal_downsample": [True]})
    with pytest.raises(ConfigError, match="scale_factor_spatial"):
        WanVAEConfig.from_config_dict({**TINY, "scale_factor_spatial": 16})


# ----------------------------------------------------------------------------- tiled decode


def check_tiled_decode(ref, vae, z, tiling: dict, seed: int):
    """``vae`` with ``enable_tiling(**tiling)`` decodes ``z`` as diffusers' ``tiled_decode`` with
    the same settings (>= 60 dB and FP32_TOL: the same convolutions per tile, then the same
    blends), in more than one tile, and to the untiled decode's shape
    (:func:`tests.parity.helpers.check_enable_tiling_decode`); the reference's output is
    meaningful (not clamped flat) and depends on its input."""
    got = check_enable_tiling_decode(ref, vae, z, tiling, reference_decoder(ref), vae.decode, FP32_TOL)
    _assert_meaningful(got, vae.decode(_latents(z.shape, seed=seed + 1)))


# 48 x 40 pixels: latent 6 x 5 in tiles of 4 latent pixels every 3 -> 2 x 2 tiles of 4 sizes.
TILING = dict(
    tile_sample_min_height=32, tile_sample_min_width=32, tile_sample_stride_height=24, tile_sample_stride_width=24
)


def test_tiled_decode_matches_reference_tiled(tiny):
    ref, _, vae = tiny
    vae.enable_tiling(**TILING)
    assert vae.decode_chunks(_latents((1, 2, 6, 5, 4), seed=30)) == 1  # the tiled path: one chunk
    vae.disable_tiling()
    check_tiled_decode(ref, vae, _latents((1, 2, 6, 5, 4), seed=30), TILING, seed=30)


def test_scaled_tiles_decode_as_their_sizes_and_closer_to_the_whole(tiny):
    """``enable_tiled_decode(scale=2)`` from tiles of 2 latent pixels every 1 decodes bit for bit
    as its doubled sizes written out (:data:`TILING`: 4 every 3, the same 8-pixel overlap) with
    every tile of one shape (the last one ending at the edge: 2 tiles of 4 columns instead of
    the reference's 4 + 2, one tile program instead of two), and (2 tiles instead of 5, fewer
    seams) closer to the untiled decode (the reference's) than the reference's own tiles.
    One latent row: the tiles vary along the width alone."""
    ref, _, vae = tiny
    z = _latents((1, 1, 1, 5, 4), seed=33)
    saved = vae.tiling
    try:
        vae.enable_tiling(16, 16, 8, 8)
        vae.enable_tiled_decode()
        one = vae.decode(z)
        vae.enable_tiled_decode(scale=2)
        assert vae.tiling == wan_vae.WanTiling(**TILING, use_tiling=True, same_shape_tiles=True)
        before = wan_vae._decode_chunk._cache_size()
        two = vae.decode(z)
        programs = wan_vae._decode_chunk._cache_size() - before
        vae.tiling = saved
        vae.enable_tiling(**TILING)
        explicit = vae.decode(z)  # the reference's layout of the same sizes: a 4- and a 2-column tile
        vae.tiling = wan_vae.WanTiling(**TILING, use_tiling=True, same_shape_tiles=True)
        same = vae.decode(z)
    finally:
        vae.tiling = saved
    whole = _ref_decode(ref, z)
    assert np.array_equal(two, same) and not np.array_equal(two, explicit)
    assert programs <= 1  # one tile shape (0 where an earlier test compiled it already)
    assert max_rel_err(two, whole) < max_rel_err(one, whole), (max_rel_err(two, whole), max_rel_err(one, whole))


def test_tiled_decode_device_memory_flat_in_frames(tiny):
    """4x the latent frames: the live device bytes during the decode grow by < 1.3x (chunks go
    to host as they finish; one tile's cache and chunk live at a time)."""
    _, _, vae = tiny
    check_tiled_decode_memory_flat(
        vae,
        wan_vae,
        "_decode_chunk",
        vae.decode,
        _latents((1, 2, 6, 5, 4), seed=31),
        _latents((1, 8, 6, 5, 4), seed=32),
        TILING,
    )


def test_enable_tiling_checks_and_keeps_values(tiny):
    """The switches keep sizes as ``AutoencoderKLWan``'s (a size not given stays, also across
    ``disable_tiling``); a bad size is refused naming its keyword, and changes nothing."""
    ref, _, vae = tiny
    defaults = {k: v for k, v in dataclasses.asdict(wan_vae.WanTiling()).items() if k.startswith("tile_")}
    try:
        check_tiling_switches(
            ref,
            vae,
            [
                ("enable", defaults),
                ("enable", dict(tile_sample_min_height=320)),
                ("disable", {}),
                ("enable", dict(tile_sample_min_width=128, tile_sample_stride_width=96)),
            ],
        )
        before = vae.tiling
        with pytest.raises(InputError, match=r"^tile_sample_stride_width=12 must be a multiple of 8"):
            vae.enable_tiling(tile_sample_stride_width=12)
        with pytest.raises(
            InputError, match=r"^tile_sample_stride_height=400 must be at most tile_sample_min_height=320"
        ):
            vae.enable_tiling(tile_sample_stride_height=400)
        with pytest.raises(InputError, match=r"^tile_sample_min_width=0 must be a positive integer"):
            vae.enable_tiling(tile_sample_min_width=0)
        assert vae.tiling == before  # a refused call changes nothing
    finally:  # the default sizes again, switched off
        for m in (ref, vae):
            m.enable_tiling(**defaults)
            m.disable_tiling()
    assert not vae.use_tiling
