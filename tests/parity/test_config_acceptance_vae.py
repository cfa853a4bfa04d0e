"""Config acceptance for the VAEs (:mod:`tests.parity.test_config_acceptance`'s pattern): configs
that diffusers' ``from_config`` builds and runs load in vidax and compute what the reference
computes, on one float32 pass each (a decode, or every other draw an encode, so a config's
encoder and decoder are both reached over the draws).

Each family's generator draws channel counts that are not powers of two, 2-4 levels, 1-2 resnets,
its optional switches and leaves optional keys out. Cosmos-Predict2.5 runs Wan's VAE.

Tolerance: float32 in both, a conv stack of ~10-20 layers in another summation order: the 1e-5
of the per-family VAE parity tests (``tests/parity/test_wan_vae.py``); a wrong operation shows at
> 1e-2.

Weights: small biases (scale 0.1) and gain 0.7-0.9 as those tests, so a random conv stack still
depends on its input (checked: another input changes the reference's output by > 5 %).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.parity.helpers import channels_first, channels_last, standard_normal
from tests.parity.test_config_acceptance import _check, _draw, _drop, _ids, _jit, _save
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

SEED = 20270
N_CONFIGS = 2  # per VAE: each is a compile of a whole encoder or decoder (~2-4 s on 2 cores)


def _uniform(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _doubling(rng, n: int) -> list[int]:
    """``n`` widths from 8 or 24, each 1 or 2 times the one before."""
    widths = [8 * int(rng.choice([1, 3]))]
    for _ in range(n - 1):
        widths.append(widths[-1] * int(rng.integers(1, 3)))
    return widths


def _vae_ids(v) -> str:
    """Test ids: ``decode`` / ``encode`` (the pass of draw ``i``), then the config's values."""
    return _ids(v) if isinstance(v, dict) else ("decode", "encode")[v % 2]


def _vae_case(tmp_path_factory, cls: str, i: int, config: dict, seed: int, gain: float, timestep: bool = False):
    """Build diffusers' ``cls`` from ``config`` (weights randomised with ``gain``), load it with
    vidax and compare a decode of 2 x 2 x 3 latents (``i`` even) or an encode of ``1 + max(4, r_t)``
    frames of ``2 r_s x 3 r_s`` pixels (``i`` odd; mean and log-variance), channels-last in vidax,
    channels-first in the reference; ``timestep``: the decoder is conditioned on
    :data:`TIMESTEP`."""
    ref = getattr(diffusers, cls)(**config)
    vae = load_component(cls, _save(tmp_path_factory, ref, seed, cls, scale=0.1, gain=gain))
    s, t = vae.config.spatial_compression, vae.config.temporal_compression
    ts = (TIMESTEP,) if timestep else ()
    if i % 2 == 0:

        def reference(z):
            with torch.no_grad():
                return channels_last(
                    ref.decode(torch.from_numpy(channels_first(z)), *(torch.from_numpy(a) for a in ts)).sample
                )

        z_dim = config.get("latent_channels") or config["z_dim"]
        _check(
            reference, lambda z: np.asarray(vae.decode(z, *ts)), standard_normal((1, 2, 2, 3, z_dim), seed), seed + 1
        )
    else:

        def reference(x):
            with torch.no_grad():
                dist = ref.encode(torch.from_numpy(channels_first(x))).latent_dist
            return channels_last(dist.mean), channels_last(dist.logvar)

        # Wan's VAE encodes 1 + 4 k frames in chunks of 4 (the reference drops the rest silently; vidax refuses).
        channels = 3 if config.get("is_residual") else config.get("in_channels", 3)
        _check(
            reference,
            lambda x: tuple(np.asarray(a) for a in vae.encode(x)),
            _uniform((1, 1 + max(4, t), 2 * s, 3 * s, channels), seed),
            seed + 1,
        )


TIMESTEP = np.array([0.05], np.float32)  # the decoder's timestep where it is conditioned


# ---------------------------------------------------------------------------------------- Wan VAE


def wan_vae_configs(n: int) -> list[dict]:
    """Wan VAE configs: 2-3 levels of any multipliers, 1-2 resnets, time halved at any levels,
    any latent width and statistics; Wan2.1's plain or Wan2.2's residual, patchified layout (its
    own in / out channels, 12 = 3 x 2 x 2), the decoder's own base width or not; the
    ``scale_factor_*`` the pipelines read set to the architecture's (vidax refuses others: the
    pipelines would size latents the VAE does not decode to the asked size)."""

    def one(rng, i):
        levels = int(rng.integers(2, 4))
        z = int(rng.integers(2, 6))
        residual = i % 2 == 1
        config = dict(
            base_dim=int(rng.integers(3, 8)),
            decoder_base_dim=int(rng.integers(3, 8)),
            z_dim=z,
            dim_mult=[int(m) for m in rng.integers(1, 4, levels)],
            num_res_blocks=int(rng.integers(1, 3)),
            temperal_downsample=[bool(b) for b in rng.integers(0, 2, levels - 1)],
            latents_mean=[float(m) for m in rng.normal(0, 1, z)],
            latents_std=[float(s) for s in rng.uniform(0.5, 2, z)],
        )
        if residual:  # its shortcuts average channel groups: each width divides the one before it x the down factor
            mults = sorted(int(m) for m in rng.choice([1, 2, 4], levels - 1))
            config.update(is_residual=True, patch_size=2, in_channels=12, out_channels=12, dim_mult=mults + mults[-1:])
        config.update(
            scale_factor_temporal=2 ** sum(config["temperal_downsample"]),
            scale_factor_spatial=2 ** (levels - 1) * (2 if residual else 1),
        )
        return _drop(rng, config, ("decoder_base_dim",))

    return _draw(SEED, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(wan_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_wan_vae_configs(tmp_path_factory, i, config):
    _vae_case(tmp_path_factory, "AutoencoderKLWan", i, config, 40, gain=0.7)


# ---------------------------------------------------------------------------------- CogVideoX VAE


def cogvideox_vae_configs(n: int) -> list[dict]:
    """CogVideoX VAE configs: 2-3 blocks of widths that are multiples of 1-3 norm groups, 1-2
    resnets, time compressed 2 or 4 (at most once per down-sampling block), any latent and video
    channels and norm eps, any resnet activation, the 1x1x1 quant convolutions or not (the reference sizes them by
    ``out_channels``: drawn equal to ``latent_channels`` with them)."""

    def one(rng, i):
        blocks, groups = int(rng.integers(2, 4)), int(rng.integers(1, 4))
        config = _drop(
            rng,
            dict(
                block_out_channels=[groups * int(c) for c in rng.integers(2, 5, blocks)],
                down_block_types=["CogVideoXDownBlock3D"] * blocks,
                up_block_types=["CogVideoXUpBlock3D"] * blocks,
                latent_channels=int(rng.integers(2, 6)),
                layers_per_block=int(rng.integers(1, 3)),
                norm_num_groups=groups,
                temporal_compression_ratio=int(rng.choice([2, 4][: blocks - 1])),
                in_channels=int(rng.integers(1, 5)),
                out_channels=int(rng.integers(1, 5)),
                norm_eps=float(rng.choice([1e-6, 1e-3])),
                use_quant_conv=bool(rng.integers(2)),
                use_post_quant_conv=bool(rng.integers(2)),
                act_fn=["mish", "gelu", "relu", "silu"][i % 4],
            ),
            ("norm_eps",),
        )
        if config["use_quant_conv"] or config["use_post_quant_conv"]:
            config["out_channels"] = config["latent_channels"]
        return config

    return _draw(SEED + 1, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(cogvideox_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_cogvideox_vae_configs(tmp_path_factory, i, config):
    _vae_case(tmp_path_factory, "AutoencoderKLCogVideoX", i, config, 42, gain=0.9)


# ---------------------------------------------------------------------------------- LTX-Video VAE


def ltx_vae_configs(n: int) -> list[dict]:
    """LTX-Video VAE configs: 0.9.0/0.9.1's blocks (stride-2 conv down-samplers, 3 levels, any
    widths; decoder blocks of one width: the reference cannot run a width change with timestep
    conditioning) or 0.9.5's (spatial / temporal / spatio-temporal down-samplers in any order,
    residual up-samplers or not by a depth-to-space factor 2; widths the reference's channel
    folds divide), 1-2 resnets, patch 1-2, timestep conditioning or not, any latent width, norm
    eps and scaling. The decoder's noise injection is off: the reference draws it from torch's
    generator."""

    def one(rng, i):
        v095, k = i % 2 == 1, int(rng.choice([1, 3]))
        if v095:  # its down-samplers fold 2-8 pixels into channels: widths of 8 k, each 1 or 2 times the last
            widths = _doubling(rng, 4)
        else:
            widths = [int(c) for c in rng.integers(3, 13, 3)]
        config = dict(
            block_out_channels=widths,
            layers_per_block=[int(c) for c in rng.integers(1, 3, 4)],
            # a residual up-sampler folds 8 channels (2 x 2 x 2) and, with factor 2, each block's
            # input is half its width (the depth-to-space): widths 16 k, 32 k
            decoder_block_out_channels=[16 * k, 32 * k] if v095 else [int(rng.integers(3, 13))] * 2,
            decoder_layers_per_block=[int(c) for c in rng.integers(1, 3, 3)],
            decoder_spatio_temporal_scaling=[True, True],
            decoder_inject_noise=[False] * 3,
            upsample_residual=[bool(b) for b in rng.integers(0, 2, 2)] if v095 else [False, False],
            upsample_factor=[2, 2] if v095 else [1, 1],
            timestep_conditioning=bool(rng.integers(2)),
            latent_channels=int(rng.integers(2, 7)),
            patch_size=int(rng.integers(1, 3)),
            resnet_norm_eps=float(rng.choice([1e-6, 1e-4])),
            scaling_factor=float(rng.uniform(0.5, 1.5)),
        )
        if v095:
            kinds = ["spatial", "temporal", "spatiotemporal"]
            config.update(
                down_block_types=["LTXVideo095DownBlock3D"] * 3,
                spatio_temporal_scaling=[True] * 3,
                downsample_type=[kinds[int(k)] for k in rng.permutation(3)],
            )
        else:
            config.update(down_block_types=["LTXVideoDownBlock3D"] * 3, spatio_temporal_scaling=[True, True, False])
        return config

    return _draw(SEED + 2, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(ltx_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_ltx_vae_configs(tmp_path_factory, i, config):
    _vae_case(
        tmp_path_factory, "AutoencoderKLLTXVideo", i, config, 44, gain=0.9, timestep=config["timestep_conditioning"]
    )


# -------------------------------------------------------------------------------- HunyuanVideo VAE


def hunyuan_vae_configs(n: int) -> list[dict]:
    """HunyuanVideo VAE configs: 3-4 levels of widths that are multiples of 1-3 norm groups, 1-2
    resnets, space halved at every level but the last, time at two of them (the reference takes
    no other temporal ratio than 4), any resnet activation, the mid blocks' attention or not, any latent and video channels."""

    def one(rng, i):
        levels, groups = int(rng.integers(3, 5)), int(rng.integers(1, 4))
        return _drop(
            rng,
            dict(
                block_out_channels=[groups * int(c) for c in rng.integers(2, 5, levels)],
                down_block_types=["HunyuanVideoDownBlock3D"] * levels,
                up_block_types=["HunyuanVideoUpBlock3D"] * levels,
                latent_channels=int(rng.integers(2, 6)),
                layers_per_block=int(rng.integers(1, 3)),
                norm_num_groups=groups,
                spatial_compression_ratio=2 ** (levels - 1),
                temporal_compression_ratio=4,
                in_channels=int(rng.integers(1, 5)),
                out_channels=int(rng.integers(1, 5)),
                mid_block_add_attention=bool(rng.integers(2)),
                act_fn=["relu", "mish", "gelu", "swish"][i % 4],
            ),
            ("mid_block_add_attention",),
        )

    return _draw(SEED + 3, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(hunyuan_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_hunyuan_vae_configs(tmp_path_factory, i, config):
    _vae_case(tmp_path_factory, "AutoencoderKLHunyuanVideo", i, config, 46, gain=0.9)


# --------------------------------------------------------------------------- HunyuanVideo 1.5 VAE


def hunyuan15_vae_configs(n: int) -> list[dict]:
    """HunyuanVideo 1.5 VAE configs: 3-5 levels (space halved at each but the last, time at 0-2 of
    them) of widths of 8 k, each 1 or 2 times the last (the resamplers' channel folds divide), 1-2 resnets, the
    down / up samplers matching channels or not, any latent and video channels."""

    def one(rng, i):
        levels = int(rng.integers(3, 6))
        widths = _doubling(rng, levels)
        latent = int(rng.choice([z for z in (2, 3, 4, 6) if widths[-1] % (2 * z) == 0]))
        return _drop(
            rng,
            dict(
                block_out_channels=widths,
                latent_channels=latent,
                layers_per_block=int(rng.integers(1, 3)),
                spatial_compression_ratio=2 ** (levels - 1),
                temporal_compression_ratio=2 ** int(rng.integers(0, 3)),
                in_channels=int(rng.integers(1, 5)),
                out_channels=int(rng.integers(1, 5)),
                downsample_match_channel=bool(rng.integers(2)),
                upsample_match_channel=bool(rng.integers(2)),
            ),
            ("downsample_match_channel", "upsample_match_channel"),
        )

    return _draw(SEED + 4, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(hunyuan15_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_hunyuan15_vae_configs(tmp_path_factory, i, config):
    _vae_case(tmp_path_factory, "AutoencoderKLHunyuanVideo15", i, config, 48, gain=0.9)


# ------------------------------------------------------------------------------ LTX-2 video VAE


def ltx2_vae_configs(n: int) -> list[dict]:
    """LTX-2 video VAE configs: the released layout (spatial / temporal / spatio-temporal
    down-samplers; spatio-temporal / temporal / spatial up-samplers, residual or not) or the
    other one of the parity tests (a stride-2 conv down-sampler first, which keeps its width: the
    latent width, the reference's encoder ``conv_in`` output), widths scaled by 1 or 3, the latent
    width an even one the first down-sampler's channel fold divides, decoder widths whose one
    change (at the temporal up-sampler, factor 1) the reference runs with timestep conditioning, 1-2 resnets, patch 1-2, a causal or not decoder, zero or
    reflection padding on either side, timestep conditioning or not, any latent width."""

    def one(rng, i):
        k = int(rng.choice([1, 3]))
        lay = lambda m: [int(c) for c in rng.integers(1, 3, m)]  # noqa: E731
        pads = ["zeros", "reflect"]
        latent = int(rng.choice([2, 4, 6]))
        if i % 2 == 0:
            latent, widths = 2 * k * int(rng.integers(1, 4)), [8 * k, 16 * k, 16 * k]
        else:
            widths = [latent, 2 * latent, 2 * latent]
        return _drop(
            rng,
            dict(
                latent_channels=latent,
                block_out_channels=widths,
                downsample_type=["spatial", "temporal", "spatiotemporal"]
                if i % 2 == 0
                else ["conv", "spatial", "temporal"],
                down_block_types=["LTX2VideoDownBlock3D"] * 3,
                spatio_temporal_scaling=[True, True, True],
                layers_per_block=lay(4),
                decoder_block_out_channels=[8 * k, 8 * k, 16 * k],
                decoder_layers_per_block=lay(4),
                decoder_spatio_temporal_scaling=[True, True, True],
                decoder_inject_noise=[False] * 4,
                upsample_type=["spatiotemporal", "temporal", "spatial"],
                upsample_residual=[bool(b) for b in rng.integers(0, 2, 3)],
                upsample_factor=[2, 1, 2],
                timestep_conditioning=bool(rng.integers(2)),
                patch_size=int(rng.integers(1, 3)),
                decoder_causal=bool(rng.integers(2)),
                encoder_spatial_padding_mode=pads[int(rng.integers(2))],
                decoder_spatial_padding_mode=pads[int(rng.integers(2))],
                scaling_factor=float(rng.uniform(0.5, 1.5)),
            ),
            ("encoder_spatial_padding_mode", "decoder_spatial_padding_mode"),
        )

    return _draw(SEED + 5, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(ltx2_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_ltx2_vae_configs(tmp_path_factory, i, config):
    _vae_case(
        tmp_path_factory, "AutoencoderKLLTX2Video", i, config, 50, gain=0.9, timestep=config["timestep_conditioning"]
    )


# ------------------------------------------------------------------------------ LTX-2 audio VAE


def ltx2_audio_vae_configs(n: int) -> list[dict]:
    """LTX-2 audio VAE configs: 2-3 levels of any multipliers of a base width (a multiple of 32
    with GroupNorm's 32 groups, else any), 1-2 resnets, pixel norm with a causal time axis or
    GroupNorm without causality, any latent, mel-bin and audio channel counts; attention blocks at
    a drawn level (by the nominal ``resolution``: every resnet of that level), in the mid blocks
    on the decode draws."""

    def one(rng, i):
        group = i % 2 == 1
        levels = int(rng.integers(2, 4))
        resolution = int(rng.integers(3, 10)) * 2 ** (levels - 1)  # halves evenly: encoder and decoder levels agree
        return dict(
            resolution=resolution,
            attn_resolutions=[resolution // 2 ** int(rng.integers(0, levels))],
            mid_block_add_attention=i % 2 == 0,
            base_channels=32 if group else int(rng.integers(3, 12)),
            ch_mult=[int(m) for m in rng.integers(1, 4, levels)],
            num_res_blocks=int(rng.integers(1, 3)),
            latent_channels=int(rng.integers(2, 6)),
            mel_bins=int(rng.integers(3, 9)) * 2 ** (levels - 1),
            in_channels=int(rng.integers(1, 4)),
            output_channels=int(rng.integers(1, 4)),
            norm_type="group" if group else "pixel",
            causality_axis="none" if group else "height",
        )

    return _draw(SEED + 6, n, one)


@pytest.mark.parametrize("i, config", list(enumerate(ltx2_audio_vae_configs(N_CONFIGS))), ids=_vae_ids)
def test_ltx2_audio_vae_configs(tmp_path_factory, i, config):
    ref = diffusers.AutoencoderKLLTX2Audio(**config)
    vae = load_component(
        "AutoencoderKLLTX2Audio", _save(tmp_path_factory, ref, 52, "ltx2_audio_vae_config", scale=0.1, gain=0.9)
    )
    f = 2 ** (len(config["ch_mult"]) - 1)
    if i % 2 == 0:

        def reference(z):
            with torch.no_grad():
                return ref.decode(torch.from_numpy(z)).sample.numpy()

        _check(
            reference,
            lambda z: np.asarray(vae.decode(z)),
            standard_normal((1, config["latent_channels"], 5, config["mel_bins"] // f), 53),
            54,
        )
    else:

        def reference(mel):
            with torch.no_grad():
                return ref.encoder(torch.from_numpy(mel)).numpy()  # the posterior's parameters

        _check(
            reference,
            lambda mel: np.asarray(vae.encode(mel)),
            standard_normal((1, config["in_channels"], 4 * f + 1, config["mel_bins"]), 53),
            54,
        )


# ------------------------------------------------------------------------- latent upsamplers


def upsampler_configs(n: int) -> list[dict]:
    """LTX-Video / LTX-2 latent upsampler configs (cycled): any latent channels, a middle width
    of 32 or 96 (its GroupNorm has 32 groups), 1-2 resnets per stage, 2-D or 3-D convolutions,
    LTX-Video's spatial / temporal / both up-sampling, LTX-2's rational spatial scale (0.75, 1.5,
    2, 4) or its plain 2x."""

    def one(rng, i):
        config = dict(
            in_channels=int(rng.integers(1, 9)),
            mid_channels=int(rng.choice([32, 96])),
            num_blocks_per_stage=int(rng.integers(1, 3)),
            dims=int(rng.choice([2, 3])),
        )
        if i % 2 == 0:
            up = [(True, False), (False, True), (True, True)][int(rng.integers(3))]
            config.update(
                _cls="LTXLatentUpsamplerModel",
                dims=3 if up[1] else config["dims"],
                spatial_upsample=up[0],
                temporal_upsample=up[1],
            )
        else:
            config.update(
                _cls="LTX2LatentUpsamplerModel",
                rational_spatial_scale=float(rng.choice([0.75, 1.5, 2.0, 4.0])),
                use_rational_resampler=bool(rng.integers(2)),
            )
        return config

    return _draw(SEED + 7, n, one)


@pytest.mark.parametrize("config", upsampler_configs(4), ids=_ids)
def test_latent_upsampler_configs(tmp_path_factory, config):
    from diffusers.pipelines.ltx.modeling_latent_upsampler import LTXLatentUpsamplerModel
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel

    config = dict(config)
    cls = config.pop("_cls")
    ref = {"LTXLatentUpsamplerModel": LTXLatentUpsamplerModel, "LTX2LatentUpsamplerModel": LTX2LatentUpsamplerModel}[
        cls
    ](**config)
    model = load_component(cls, _save(tmp_path_factory, ref, 55, "upsampler_config"))

    def reference(x):
        with torch.no_grad():
            return channels_last(ref(torch.from_numpy(channels_first(x))))

    _check(reference, _jit(model, lambda m, x: m(x)), standard_normal((1, 3, 4, 6, config["in_channels"]), 56), 57)
