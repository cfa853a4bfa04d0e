"""Parity of vidax's LTX-2 video VAE with diffusers ``AutoencoderKLLTX2Video`` (tiny, CPU, fp32).

vidax runs it on LTX-Video's VAE blocks (:mod:`vidax.models.ltx2.video_vae`), so these tests check
what LTX-2 changes: reflection padding in the decoder, the plain ``conv_shortcut`` of a
width-changing resnet (an up block's ``conv_in``), the ``latent_channels``-wide encoder input, the
per-block up-sampler strides (``upsample_type``: spatiotemporal, temporal, spatial, not
reversed), ``upsample_factor`` 1 and 2, residual and plain up-samplers, a 'conv' encoder
down-sampler, the decoder with timestep conditioning; and tiling as the reference's
``enable_tiling`` + ``use_framewise_decoding``.

Every parameter and buffer randomised (``randomize_torch_module``, latent statistics drawn),
saved with ``save_pretrained`` and loaded with the production loader. fp32 tolerance 1e-5 (max
|err| / max |ref|): the same convolutions and norms in fp32 with different summation orders
(measured ~1e-6); a wrong padding mode, stride, channel order or shortcut gives errors above 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.parity.helpers import (  # noqa: E402
    assert_close,
    assert_input_sensitive,
    channels_first,
    channels_last,
    max_rel_err,
    randomize_torch_module,
    standard_normal,
)
from vidax.compile_cache import count_compiles  # noqa: E402
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.ltx2.config import LTX2VideoVAEConfig  # noqa: E402
from vidax.models.ltx2.video_vae import LTXTiling  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5

# As released (LTX-2): reflection-padded, non-causal decoder without timestep conditioning.
# Decoder (its order): spatiotemporal x2 (factor 2, residual), temporal (factor 1, conv_in 8 -> 16,
# plain), spatial (factor 2, residual): 8x spatial (patch 2), 4x temporal.
RELEASED = dict(
    latent_channels=6,
    block_out_channels=[8, 16, 16],
    downsample_type=["spatial", "temporal", "spatiotemporal"],
    down_block_types=["LTX2VideoDownBlock3D"] * 3,
    spatio_temporal_scaling=[True, True, True],
    layers_per_block=[1, 2, 1, 1],
    decoder_block_out_channels=[16, 16, 16],
    decoder_layers_per_block=[1, 2, 1, 1],
    decoder_spatio_temporal_scaling=[True, True, True],
    decoder_inject_noise=[False] * 4,
    upsample_type=["spatiotemporal", "temporal", "spatial"],
    upsample_residual=[True, False, True],
    upsample_factor=[2, 1, 2],
    patch_size=2,
    decoder_causal=False,
    decoder_spatial_padding_mode="reflect",
    spatial_compression_ratio=8,
    temporal_compression_ratio=4,
    scaling_factor=0.7,
)
# Timestep conditioning, a 'conv' (stride 2) encoder down-sampler, causal zero-padded decoder.
TIMESTEP_VAE = dict(
    latent_channels=4,
    block_out_channels=[4, 8, 8],
    downsample_type=["conv", "spatial", "temporal"],
    down_block_types=["LTX2VideoDownBlock3D"] * 3,
    spatio_temporal_scaling=[True, True, True],
    layers_per_block=[1, 1, 1, 2],
    decoder_block_out_channels=[8, 8, 16],
    decoder_layers_per_block=[1, 1, 1, 2],
    decoder_spatio_temporal_scaling=[True, True, True],
    decoder_inject_noise=[False] * 4,
    upsample_type=["spatiotemporal", "temporal", "spatial"],
    upsample_residual=[False, True, True],
    upsample_factor=[2, 1, 2],
    timestep_conditioning=True,
    patch_size=2,
    decoder_causal=True,
    decoder_spatial_padding_mode="zeros",
    spatial_compression_ratio=8,
    temporal_compression_ratio=4,
)
# Temporal tiles of 2 latent frames every 1 (the spatial tiling is LTX-Video's code, parity-tested
# in test_ltx_vae.py); spatial tiles of 3 latents every 2 for the reflection-padding guard.
TILES = dict(
    tile_sample_min_height=24,
    tile_sample_min_width=24,
    tile_sample_stride_height=16,
    tile_sample_stride_width=16,
    tile_sample_min_num_frames=8,
    tile_sample_stride_num_frames=4,
)
TIMESTEP = np.array([0.05, 0.3], np.float32)


def _save(tmp_path_factory, config: dict, seed: int, name: str):
    ref = diffusers.AutoencoderKLLTX2Video(**config).eval()
    randomize_torch_module(ref, seed, scale=0.1, gain=0.7)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        ref.latents_mean.copy_(torch.randn(ref.latents_mean.shape, generator=g))
        ref.latents_std.copy_(torch.rand(ref.latents_std.shape, generator=g) + 0.5)
    path = tmp_path_factory.mktemp(name)
    ref.save_pretrained(path)
    return ref, load_component("AutoencoderKLLTX2Video", path)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    return _save(tmp_path_factory, RELEASED, 0, "ltx2_vae")


def _close(got, want):
    assert_close(got, want, FP32_TOL)


def _ref_decode(ref, z, timestep=None, tiled=False):
    ref.use_tiling = ref.use_framewise_decoding = tiled
    for k, v in TILES.items():
        setattr(ref, k, v)
    with torch.no_grad():
        t = None if timestep is None else torch.from_numpy(timestep)
        return channels_last(ref.decode(torch.from_numpy(channels_first(z)), t).sample)


def test_decode_matches_reference(released):
    ref, vae = released
    z = standard_normal((2, 3, 2, 3, 6), 0)  # 3 latent frames -> 9 frames of 16 x 24
    want = _ref_decode(ref, z)
    got = vae.decode(z)
    assert got.shape == (2, 9, 16, 24, 3) and got.dtype == np.float32
    _close(got, want)
    assert_input_sensitive(want, _ref_decode(ref, standard_normal(z.shape, 1)))


def test_temporal_tiled_decode_matches_reference(released):
    """4 latent frames in temporal tiles of 2 (+1) every 1, blended as the reference's
    ``_temporal_tiled_decode`` (its ``use_framewise_decoding``); the last tile (2 latent frames)
    padded to 3 at its end, the copies of its last frame that the non-causal decoder pads with
    reproduced: one compiled program."""
    ref, vae = released
    z = standard_normal((1, 4, 2, 3, 6), 2)
    want = _ref_decode(ref, z, tiled=True)
    vae.enable_tiling(**TILES)  # the switches of the reference (--vae-tiling's enable_tiled_decode)
    vae.use_framewise_decoding = True
    try:
        with count_compiles() as counts:
            got = vae.decode(z)
        assert counts.programs["jit(_decode_fn)"] == 1, counts.programs
    finally:
        vae.disable_tiling()
        vae.use_framewise_decoding = False
    assert vae.tiling == LTXTiling(spatial=False, temporal=False, **TILES)
    _close(got, want)
    assert max_rel_err(got, vae.decode(z)) > 1e-3  # the tiles and blends do change the result


def test_tiled_decode_compiles_one_program(released):
    """4 x 4 latents in tiles of 3 x 3 every 2 (tiles of 3 or 2 rows and columns): every tile
    padded to 3 x 3 and decoded by one compiled program, the reflection padding of each real tile
    reproduced, as the reference's (temporal tiles: the test above)."""
    ref, vae = released
    z = standard_normal((1, 2, 4, 4, 6), 7)  # a shape no other test uses
    want = _ref_decode(ref, z, tiled=True)
    tiling = LTXTiling(spatial=True, temporal=True, **TILES)
    with count_compiles() as counts:
        got = vae.decode(z, tiling=tiling)
    assert counts.programs["jit(_decode_fn)"] == 1, counts.programs
    _close(got, want)


def test_reflection_padding_needs_two_latents_per_tile(released):
    """The reference fails on a 1-latent-wide tile (torch cannot reflect-pad it); vidax refuses it
    before decoding anything: untiled, and as the last tile of a row of 5 in tiles of 3 every 2."""
    _, vae = released
    with pytest.raises(InputError, match="1 x 4 latents"):
        vae.decode(np.zeros((1, 2, 1, 4, 6), np.float32))
    with pytest.raises(InputError, match="tile of 3 x 1 latents"):
        vae.decode(np.zeros((1, 2, 4, 5, 6), np.float32), tiling=LTXTiling(spatial=True, **TILES))


def test_encode_matches_reference(released):
    ref, vae = released
    x = np.random.default_rng(3).uniform(-1, 1, (2, 9, 16, 16, 3)).astype(np.float32)
    mean, logvar = vae.encode(x)
    with torch.no_grad():
        dist = ref.encode(torch.from_numpy(channels_first(x))).latent_dist
    _close(mean, channels_last(dist.mean))
    _close(logvar, channels_last(dist.logvar))


def test_latent_statistics_match_pipeline(released):
    from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline

    ref, vae = released
    z = standard_normal((2, 3, 2, 3, 6), 4)
    want = LTX2Pipeline._denormalize_latents(
        torch.from_numpy(channels_first(z)), ref.latents_mean, ref.latents_std, ref.config.scaling_factor
    )
    _close(np.asarray(vae.denormalize_latents(z)), channels_last(want))


def test_timestep_conditioned_decode_matches_reference(tmp_path_factory):
    ref, vae = _save(tmp_path_factory, TIMESTEP_VAE, 1, "ltx2_vae_timestep")
    z = standard_normal((2, 2, 2, 2, 4), 5)  # 2 latent frames -> 5 frames of 16 x 16
    want = _ref_decode(ref, z, TIMESTEP)
    got = vae.decode(z, TIMESTEP)
    _close(got, want)
    # The decode timestep matters: another one moves the frames by well over the tolerance (the
    # random time-embedding weights are small, so the effect is ~1e-3 rather than ~1).
    assert max_rel_err(vae.decode(z, np.array([0.9, 0.6], np.float32)), got) > 50 * FP32_TOL
    x = np.random.default_rng(6).uniform(-1, 1, (1, 9, 16, 16, 3)).astype(np.float32)
    with torch.no_grad():
        mean = ref.encode(torch.from_numpy(channels_first(x))).latent_dist.mean
    _close(vae.encode(x)[0], channels_last(mean))


def test_config_refuses_what_the_reference_cannot_run():
    with pytest.raises(ConfigError, match="upsample_type"):
        LTX2VideoVAEConfig.from_config_dict(dict(RELEASED, upsample_type=["spatial", "sideways", "spatial"]))
    with pytest.raises(ConfigError, match="decoder_spatial_padding_mode"):
        LTX2VideoVAEConfig.from_config_dict(dict(RELEASED, decoder_spatial_padding_mode="mirror"))
    with pytest.raises(ConfigError, match="down_block_types"):
        LTX2VideoVAEConfig.from_config_dict(dict(RELEASED, down_block_types=["LTXVideo095DownBlock3D"] * 3))
