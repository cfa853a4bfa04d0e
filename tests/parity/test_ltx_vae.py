"""Parity of vidax's LTX-Video VAE with diffusers ``AutoencoderKLLTXVideo`` (tiny, CPU, fp32).

Two tiny structures, every parameter and buffer randomised (``save_random_vae``), saved with
``save_pretrained`` and loaded with the production loader
(:func:`~vidax.weights.component.load_component`, so the key rules and the ``latents_mean`` /
``latents_std`` buffers are exercised):

* ``V091``: 0.9.0/0.9.1-style ``LTXVideoDownBlock3D`` encoder (strided causal convs, width-changing
  ``conv_out`` resnets), a decoder with timestep conditioning (per-block time embeddings, scale /
  shift tables, learned ``timestep_scale_multiplier``), noise injection, residual and plain
  up-samplers with channel reduction (``upsample_factor`` 2).
* ``V095``: 0.9.5-style ``LTXVideo095DownBlock3D`` encoder with spatial, temporal and
  spatiotemporal ``LTXVideoDownsampler3d`` and the released configs' explicit compression ratios.

Noise injection: the reference draws its noise from torch's global RNG, which JAX cannot
reproduce, so the ``per_channel_scale1/2`` weights are present but zero in the parity runs (the
draws still run and are multiplied by zero); ``test_noise_injection_uses_the_key`` checks the
JAX-key path with non-zero scales.

Tiling: tiles of 16 x 16 pixels every 8 (2 x 2 latents every 1 at 8x spatial compression) and
of 8 frames every 4 (2 latent frames every 1 at 4x), so the reference's ``tiled_decode`` /
``tiled_encode`` / ``_temporal_tiled_decode`` / ``_temporal_tiled_encode`` run several blended
tiles on tiny inputs. Input shapes are chosen so that most tiles reuse the untiled call's compile.

fp32 tolerance 1e-5 (max |err| / max |ref|): both sides compute the same convolutions and norms in
fp32 with different summation orders; measured 1e-6..4e-6. A wrong tap, frame, channel order,
blend weight or scale/shift gives errors above 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

from tests.parity.helpers import (  # noqa: E402
    channels_first,
    channels_last,
    check_enable_tiling_decode,
    check_tiled_decode_memory_flat,
    check_tiling_switches,
    max_rel_err,
    randomize_torch_module,
    reference_decoder,
)
from vidax.compile_cache import count_compiles  # noqa: E402
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.ltx import vae as ltx_vae  # noqa: E402
from vidax.models.ltx.config import LTXVAEConfig  # noqa: E402
from vidax.models.ltx.vae import LTXTiling  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5

V091 = dict(
    block_out_channels=[8, 12, 16],
    down_block_types=["LTXVideoDownBlock3D"] * 3,
    spatio_temporal_scaling=[True, True, False],
    layers_per_block=[1, 2, 1, 1],
    decoder_block_out_channels=[8, 16],
    decoder_layers_per_block=[1, 2, 1],
    decoder_spatio_temporal_scaling=[True, True],
    decoder_inject_noise=[True, False, True],
    upsample_residual=[True, False],
    upsample_factor=[2, 2],
    timestep_conditioning=True,
    latent_channels=5,
    patch_size=2,
    scaling_factor=0.8,
    resnet_norm_eps=1e-4,
)
V095 = dict(
    block_out_channels=[6, 12, 12, 24],
    down_block_types=["LTXVideo095DownBlock3D"] * 3,
    downsample_type=["spatial", "temporal", "spatiotemporal"],
    spatio_temporal_scaling=[True, True, True],
    layers_per_block=[1, 1, 2, 1],
    decoder_block_out_channels=[16, 32],
    decoder_layers_per_block=[1, 1, 2],
    decoder_spatio_temporal_scaling=[True, True],
    decoder_inject_noise=[False, False, False],
    upsample_residual=[True, True],
    upsample_factor=[2, 2],
    timestep_conditioning=True,
    latent_channels=6,
    patch_size=2,
    spatial_compression_ratio=8,
    temporal_compression_ratio=4,
)
TILES = dict(
    tile_sample_min_height=16,
    tile_sample_min_width=16,
    tile_sample_stride_height=8,
    tile_sample_stride_width=8,
    tile_sample_min_num_frames=8,
    tile_sample_stride_num_frames=4,
)
TIMESTEP = np.array([0.05, 0.4], np.float32)  # one decode timestep per batch entry


def _save(tmp_path_factory, config: dict, seed: int, name: str):
    ref = diffusers.AutoencoderKLLTXVideo(**config).eval()
    # Every tensor random, as save_random_vae (small biases, gain 0.7: the input still reaches the output).
    randomize_torch_module(ref, seed, scale=0.1, gain=0.7)
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if "per_channel_scale" in n:  # torch-RNG noise cannot be reproduced: weights kept, zero
                p.zero_()
        g = torch.Generator().manual_seed(seed)
        ref.latents_mean.copy_(torch.randn(ref.latents_mean.shape, generator=g))
        ref.latents_std.copy_(torch.rand(ref.latents_std.shape, generator=g) + 0.5)
    path = tmp_path_factory.mktemp(name)
    ref.save_pretrained(path)
    return ref, path, load_component("AutoencoderKLLTXVideo", path)


@pytest.fixture(scope="module")
def v091(tmp_path_factory):
    return _save(tmp_path_factory, V091, 0, "ltx_vae_091")


@pytest.fixture(scope="module")
def v095(tmp_path_factory):
    return _save(tmp_path_factory, V095, 1, "ltx_vae_095")


def _set_ref_tiling(ref, spatial: bool, temporal: bool):
    ref.use_tiling, ref.use_framewise_decoding = spatial, temporal
    for k, v in TILES.items():
        setattr(ref, k, v)


def _ref_encode(ref, x, spatial=False, temporal=False):
    _set_ref_tiling(ref, spatial, temporal)
    with torch.no_grad():
        dist = ref.encode(torch.from_numpy(channels_first(x))).latent_dist
    return channels_last(dist.mean), channels_last(dist.logvar)


def _ref_decode(ref, z, spatial=False, temporal=False):
    _set_ref_tiling(ref, spatial, temporal)
    with torch.no_grad():
        return channels_last(ref.decode(torch.from_numpy(channels_first(z)), torch.from_numpy(TIMESTEP)).sample)


def _video(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _latents(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err


def _sensitive(a, b):
    # The reference's output depends on its input: another input moves it by far more than the
    # tolerance (else the parity would be vacuous).
    assert max_rel_err(a, b) > 0.05, max_rel_err(a, b)


# ---- 0.9.1-style ---------------------------------------------------------------------------


def test_v091_encode_matches_reference(v091):
    ref, _, vae = v091
    x = _video((2, 9, 16, 16, 3), 0)  # 9 frames -> 3 latent frames of 2 x 2
    mean, logvar = vae.encode(x)
    want_mean, want_logvar = _ref_encode(ref, x)
    _close(mean, want_mean)
    _close(logvar, want_logvar)
    _sensitive(want_mean, _ref_encode(ref, _video(x.shape, 1))[0])


def test_v091_temporal_tiled_encode_matches_reference(v091):
    """9 frames in tiles of 9 (0..8) and 5 (4..8) frames, one latent frame blended."""
    ref, _, vae = v091
    x = _video((2, 9, 16, 16, 3), 2)
    tiling = LTXTiling(spatial=True, temporal=True, **TILES)
    mean, logvar = vae.encode(x, tiling=tiling)
    want_mean, want_logvar = _ref_encode(ref, x, spatial=True, temporal=True)
    _close(mean, want_mean)
    _close(logvar, want_logvar)
    # The blend (one latent frame, weight 1 on the first tile) is what makes the tiled result
    # equal the whole clip's here: the second tile on its own sees only frames 4..8 (causal
    # padding from frame 4) and encodes the last latent frame differently.
    alone = vae.encode(x[:, 4:])[0][:, 1:]
    assert max_rel_err(alone, want_mean[:, 2:]) > 1e-3


def test_v091_decode_with_timestep_matches_reference(v091):
    ref, _, vae = v091
    z = _latents((2, 2, 2, 2, 5), 3)  # 2 latent frames -> 5 frames of 16 x 16
    want = _ref_decode(ref, z)
    got = vae.decode(z, TIMESTEP)
    _close(got, want)
    assert got.shape == (2, 5, 16, 16, 3) and got.dtype == np.float32
    _sensitive(want, _ref_decode(ref, _latents(z.shape, 4)))
    # The decode timestep matters (per-block scale / shift and the final modulation).
    other = vae.decode(z, TIMESTEP[::-1].copy())
    assert max_rel_err(other, got) > 1e-3
    with pytest.raises(InputError, match="timestep"):
        vae.decode(z)


def test_v091_spatial_tiled_decode_matches_reference(v091):
    """3 x 3 latents in 2 x 2 tiles every 1: a 3 x 3 tile layout, 8-pixel blends both ways."""
    ref, _, vae = v091
    z = _latents((2, 2, 3, 3, 5), 5)
    want = _ref_decode(ref, z, spatial=True)
    got = vae.decode(z, TIMESTEP, tiling=LTXTiling(spatial=True, **TILES))
    _close(got, want)
    assert got.shape == (2, 5, 24, 24, 3)
    assert max_rel_err(got, vae.decode(z, TIMESTEP)) > 1e-3


def test_v091_enable_tiling_decode_matches_reference(v091):
    """``enable_tiling(**TILES)`` on both sides (the shapes above: no new compile), then plain
    ``decode`` calls: 3 x 3 tiles, the untiled decode's shape."""
    ref, _, vae = v091
    z = _latents((2, 2, 3, 3, 5), 6)
    ref.use_framewise_decoding = False
    check_enable_tiling_decode(
        ref,
        vae,
        z,
        TILES,
        reference_decoder(ref, torch.from_numpy(TIMESTEP)),
        lambda x: vae.decode(x, TIMESTEP),
        FP32_TOL,
    )


def test_tiling_switches_match_reference(v095):
    """``enable_tiling`` / ``disable_tiling`` / ``use_framewise_decoding`` leave the reference's
    sizes and switches; ``enable_tiled_decode`` (``--vae-tiling``) turns both tilings on."""
    ref, _, vae = v095
    try:
        check_tiling_switches(
            ref,
            vae,
            [
                ("enable", TILES),
                ("framewise", True),
                ("disable", {}),
                ("enable", dict(tile_sample_stride_num_frames=8)),
                ("framewise", False),
                ("enable", TILES),
            ],
        )
        vae.disable_tiling()
        vae.enable_tiled_decode()
        assert vae.use_tiling and vae.use_framewise_decoding
        with pytest.raises(InputError, match=r"^LTXTiling.tile_sample_stride_width=4 is smaller than"):
            vae.enable_tiling(tile_sample_stride_width=4)
        with pytest.raises(InputError, match=r"^use_framewise_decoding='yes' must be True or False"):
            vae.use_framewise_decoding = "yes"
    finally:
        vae.disable_tiling()
        vae.use_framewise_decoding = False


def test_temporal_tiled_decode_device_memory_flat_in_frames(v095):
    """3 and 12 latent frames in temporal tiles of 3 latent frames every 1 (TILES, the compile of
    the test above): each tile goes to host as it ends, so the live device bytes right after each
    tile call grow by < 1.3x."""
    _, _, vae = v095
    check_tiled_decode_memory_flat(
        vae,
        ltx_vae,
        "_decode_fn",
        lambda x: vae.decode(x, TIMESTEP),
        _latents((2, 3, 2, 2, 6), 12),
        _latents((2, 12, 2, 2, 6), 13),
        TILES,
        framewise=True,
    )


def test_noise_injection_uses_the_key(v091):
    """With non-zero per-channel scales the noise enters: same key, same frames; another key,
    other frames; zero scales (the parity runs), no effect. Same shapes, so no new compile."""
    _, path, _ = v091
    vae = load_component("AutoencoderKLLTXVideo", path)
    z = _latents((2, 2, 2, 2, 5), 3)
    quiet = vae.decode(z, TIMESTEP, noise_key=jax.random.key(1))
    np.testing.assert_array_equal(quiet, vae.decode(z, TIMESTEP, noise_key=jax.random.key(2)))
    for path_, var in nnx.to_flat_state(nnx.state(vae, nnx.Param)):
        if "per_channel_scale" in str(path_[-1]):
            var.set_value(jnp.full(var.get_value().shape, 0.3, jnp.float32))
    a = vae.decode(z, TIMESTEP, noise_key=jax.random.key(1))
    np.testing.assert_array_equal(a, vae.decode(z, TIMESTEP, noise_key=jax.random.key(1)))
    assert max_rel_err(a, vae.decode(z, TIMESTEP, noise_key=jax.random.key(2))) > 1e-3
    assert max_rel_err(a, quiet) > 1e-3


def test_tiled_decode_compiles_one_program(v091):
    """3 latent frames of 3 x 2 in tiles of 2 x 2 every 1 and of 3 frames every 1: tiles of 3 or 2
    frames and of 2 or 1 rows / columns, every one padded to 3 x 2 x 2 and decoded by one compiled
    program. With noise injected (non-zero scales) an edge tile decoded padded equals the tile
    decoded alone, noise draws included (the draws are the real tile's)."""
    _, path, _ = v091
    vae = load_component("AutoencoderKLLTXVideo", path)
    for path_, var in nnx.to_flat_state(nnx.state(vae, nnx.Param)):
        if "per_channel_scale" in str(path_[-1]):
            var.set_value(jnp.full(var.get_value().shape, 0.3, jnp.float32))
    z = _latents((2, 3, 3, 2, 5), 20)  # a shape no other test uses
    tiling = LTXTiling(spatial=True, temporal=True, **TILES)
    with count_compiles() as counts:
        got = vae.decode(z, TIMESTEP, tiling=tiling, noise_key=jax.random.key(3))
    assert counts.programs["jit(_decode_fn)"] == 1, counts.programs
    assert got.shape == (2, 9, 24, 16, 3) and np.isfinite(got).all()
    temb, key = jnp.asarray(TIMESTEP), jax.random.key(4)
    edge = z[:, 1:3, 2:3, 1:2]  # 2 frames, 1 row, 1 column: padded by a frame, a row and a column
    padded = vae._decode_run(temb, key, (3, 2, 2))(edge)
    alone = vae._decode_run(temb, key, None)(edge)
    assert padded.shape == alone.shape == (2, 5, 8, 8, 3)
    assert max_rel_err(padded, alone) < FP32_TOL


def test_latent_normalisation_matches_pipeline(v091):
    """``normalize_latents`` / ``denormalize_latents`` equal ``LTXPipeline._normalize_latents`` /
    ``_denormalize_latents`` with the checkpoint's (random) buffers and scaling factor."""
    from diffusers.pipelines.ltx.pipeline_ltx import LTXPipeline

    ref, _, vae = v091
    np.testing.assert_array_equal(np.asarray(vae.latents_mean[...]), ref.latents_mean.numpy())
    np.testing.assert_array_equal(np.asarray(vae.latents_std[...]), ref.latents_std.numpy())
    z = _latents((2, 3, 2, 4, 5), 6)
    zt = torch.from_numpy(channels_first(z))
    sf = ref.config.scaling_factor
    want = channels_last(LTXPipeline._normalize_latents(zt, ref.latents_mean, ref.latents_std, sf))
    np.testing.assert_allclose(np.asarray(vae.normalize_latents(z)), want, rtol=1e-6, atol=1e-6)
    back = channels_last(LTXPipeline._denormalize_latents(zt, ref.latents_mean, ref.latents_std, sf))
    np.testing.assert_allclose(np.asarray(vae.denormalize_latents(z)), back, rtol=1e-6, atol=1e-6)
    assert max_rel_err(want, z) > 0.1  # the statistics are not the identity


# ---- 0.9.5-style ---------------------------------------------------------------------------


def test_v095_encode_matches_reference(v095):
    ref, _, vae = v095
    x = _video((2, 9, 16, 8, 3), 7)
    mean, logvar = vae.encode(x)
    want_mean, want_logvar = _ref_encode(ref, x)
    assert mean.shape == (2, 3, 2, 1, 6)
    _close(mean, want_mean)
    _close(logvar, want_logvar)
    _sensitive(want_mean, _ref_encode(ref, _video(x.shape, 8))[0])
    with pytest.raises(InputError, match="down-sampler"):  # 8 frames: the reference fails too
        vae.encode(x[:, :8])


def test_v095_spatial_tiled_encode_matches_reference(v095):
    """24 x 8 pixels in 16 x 8 tiles every 8 rows (tiles at rows 0, 8, 16), one latent row blended."""
    ref, _, vae = v095
    x = _video((2, 9, 24, 8, 3), 9)
    mean, logvar = vae.encode(x, tiling=LTXTiling(spatial=True, **TILES))
    want_mean, want_logvar = _ref_encode(ref, x, spatial=True)
    _close(mean, want_mean)
    _close(logvar, want_logvar)


def test_v095_decode_and_temporal_tiled_decode_match_reference(v095):
    """3 latent frames: whole, then in temporal tiles z[0:3] and z[1:3], 4 frames blended; the
    tiled decode yields one chunk per tile, as decode_chunks says."""
    ref, _, vae = v095
    z = _latents((2, 3, 2, 2, 6), 10)
    want = _ref_decode(ref, z)
    got = vae.decode(z, TIMESTEP)
    _close(got, want)
    assert got.shape == (2, 9, 16, 16, 3)
    _sensitive(want, _ref_decode(ref, _latents(z.shape, 11)))

    tiling = LTXTiling(spatial=True, temporal=True, **TILES)
    want_tiled = _ref_decode(ref, z, spatial=True, temporal=True)
    chunks = list(vae.iter_decode(z, TIMESTEP, tiling=tiling))
    assert len(chunks) == vae.decode_chunks(z, tiling=tiling) == 2
    assert [c.shape[1] for c in chunks] == [5, 4]
    _close(np.concatenate(chunks, axis=1), want_tiled)
    assert max_rel_err(want_tiled, want) > 1e-3


def test_config_refuses_what_the_reference_cannot_run():
    with pytest.raises(ConfigError, match="patch_size_t"):
        LTXVAEConfig.from_config_dict({**V091, "patch_size_t": 2})
    with pytest.raises(ConfigError, match="down_block_types"):
        LTXVAEConfig.from_config_dict({**V091, "down_block_types": ["LTXVideoDownBlock3Dx"] * 3})
    with pytest.raises(ConfigError, match="conv_in"):  # width change + timestep conditioning
        LTXVAEConfig.from_config_dict({**V091, "decoder_block_out_channels": [8, 24], "upsample_factor": [1, 1]})
    with pytest.raises(ConfigError, match="unknown setting"):
        LTXVAEConfig.from_config_dict({**V091, "not_a_setting": 1})
