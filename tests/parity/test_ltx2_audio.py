"""Parity of vidax's LTX-2 sound path with diffusers 0.42.1 (tiny, CPU, fp32): the audio VAE
(``AutoencoderKLLTX2Audio``: latent statistics, decode, encode), ``LTX2Vocoder`` (LTX-2: leaky
ReLU, tanh) and ``LTX2VocoderWithBWE`` (LTX-2.3: anti-aliased snake-beta generators, the causal
log-mel STFT, the Hann resampler).

Every parameter and buffer randomised (``randomize_torch_module`` for the parameters; the latent
statistics, anti-aliasing filters, STFT bases and mel filterbank perturbed or drawn here so the
buffers' load path is checked), saved with ``save_pretrained`` and loaded with the production
loader (:func:`~vidax.weights.component.load_component`). Distinct sizes everywhere (latent 3
channels x 5 mel bins, widths 15 / 30 / 45, mel 2 x 20, vocoder widths 24 / 12 / 6).

fp32 tolerance 1e-5 (max |err| / max |ref|): both sides compute the same convolutions, norms and
STFT in fp32 with different summation orders (measured ~1e-7..1e-6); a wrong tap, padding side,
channel order, crop or filter gives errors above 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline  # noqa: E402
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE  # noqa: E402

from tests.parity.helpers import (  # noqa: E402
    assert_close,
    assert_input_sensitive,
    max_rel_err,
    randomize_torch_module,
    standard_normal,
)
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.ltx2.audio_vae import pack_latents, unpack_latents  # noqa: E402
from vidax.models.ltx2.config import LTX2AudioVAEConfig, LTX2VocoderWithBWEConfig  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

FP32_TOL = 1e-5

# Pixel norm, causal along time (the released setting); F = 3 x 5 = 15 latent statistics.
AUDIO = dict(
    base_channels=15,
    ch_mult=[1, 2, 3],
    num_res_blocks=1,
    latent_channels=3,
    mel_bins=20,
    in_channels=2,
    output_channels=2,
    norm_type="pixel",
    causality_axis="height",
)
# GroupNorm(32), no causality (crops 24 -> 21 frames); F = 4 x 8 = 32.
AUDIO_GROUP = dict(
    base_channels=32,
    ch_mult=[1, 1, 2],
    num_res_blocks=1,
    latent_channels=4,
    mel_bins=32,
    in_channels=3,
    output_channels=1,
    norm_type="group",
    causality_axis="none",
)
VOCODER = dict(
    in_channels=40,
    hidden_channels=24,
    out_channels=2,
    upsample_kernel_sizes=[6, 4],
    upsample_factors=[3, 2],
    resnet_kernel_sizes=[3, 5],
    resnet_dilations=[[1, 2], [1, 3]],
    leaky_relu_negative_slope=0.2,
    output_sampling_rate=12000,
)
VOCODER_SNAKE = dict(
    VOCODER, act_fn="snakebeta", antialias=True, antialias_kernel_size=8, final_act_fn="clamp", final_bias=False
)
BWE = dict(
    in_channels=40,
    hidden_channels=16,
    out_channels=2,
    upsample_kernel_sizes=[4, 4],
    upsample_factors=[2, 2],
    resnet_kernel_sizes=[3],
    resnet_dilations=[[1, 2]],
    act_fn="snakebeta",
    antialias=True,
    antialias_kernel_size=12,
    final_act_fn=None,
    final_bias=False,
    bwe_in_channels=16,
    bwe_hidden_channels=12,
    bwe_out_channels=2,
    bwe_upsample_kernel_sizes=[5, 4],
    bwe_upsample_factors=[3, 2],
    bwe_resnet_kernel_sizes=[3, 5],
    bwe_resnet_dilations=[[1], [1, 2]],
    bwe_act_fn="snake",
    bwe_antialias=False,
    bwe_final_act_fn="tanh",
    bwe_final_bias=True,
    filter_length=12,
    hop_length=3,
    window_length=12,
    num_mel_channels=8,
    input_sampling_rate=8000,
    output_sampling_rate=16000,
)


def _perturb_buffers(ref, seed: int) -> None:
    """Random values for the checkpoint buffers ``randomize_torch_module`` leaves alone (not the
    BWE's Hann resampler filter: it is not in the checkpoint, both sides compute it)."""
    g = torch.Generator().manual_seed(seed)
    saved = set(ref.state_dict())
    with torch.no_grad():
        for name, b in ref.named_buffers():
            if name not in saved:
                continue
            leaf = name.rsplit(".", 1)[-1]
            noise = torch.randn(b.shape, generator=g)
            if leaf == "latents_mean":
                b.copy_(noise)
            elif leaf == "latents_std":
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif leaf == "filter":  # anti-aliasing low-pass: keep its shape, move every tap
                b.copy_(b * (1 + 0.1 * noise))
            elif leaf == "forward_basis":  # Hann-windowed DFT bases (cos, then -sin), as the checkpoint's
                n_freq, length = b.shape[0] // 2, b.shape[-1]
                t = np.arange(length)
                window = np.hanning(length + 1)[:-1]
                k = np.arange(n_freq)[:, None]
                basis = np.concatenate([np.cos(2 * np.pi * k * t / length), -np.sin(2 * np.pi * k * t / length)])
                b.copy_(torch.from_numpy(basis * window)[:, None, :] * (1 + 0.05 * noise))
            elif leaf == "inverse_basis":
                b.copy_(noise)
            elif leaf == "mel_basis":  # a non-negative filterbank
                b.copy_(torch.rand(b.shape, generator=g) * 0.5)


def _save(tmp_path_factory, cls, config: dict, seed: int, name: str, class_name: str):
    ref = cls(**config).eval()
    randomize_torch_module(ref, seed, scale=0.1, gain=0.9)
    _perturb_buffers(ref, seed + 100)
    path = tmp_path_factory.mktemp(name)
    ref.save_pretrained(path)
    return ref, load_component(class_name, path)


@pytest.fixture(scope="module")
def audio_vae(tmp_path_factory):
    return _save(tmp_path_factory, diffusers.AutoencoderKLLTX2Audio, AUDIO, 0, "ltx2_audio", "AutoencoderKLLTX2Audio")


@pytest.fixture(scope="module")
def vocoder(tmp_path_factory):
    return _save(tmp_path_factory, LTX2Vocoder, VOCODER, 2, "ltx2_vocoder", "LTX2Vocoder")


@pytest.fixture(scope="module")
def bwe(tmp_path_factory):
    return _save(tmp_path_factory, LTX2VocoderWithBWE, BWE, 3, "ltx2_bwe", "LTX2VocoderWithBWE")


def _close(got, want):
    assert_close(got, want, FP32_TOL)


def _ref(module, *args):
    with torch.no_grad():
        out = module(*(torch.from_numpy(np.asarray(a)) for a in args))
    return (out.sample if hasattr(out, "sample") else out).numpy()


# ---- audio VAE -----------------------------------------------------------------------------------


def test_audio_latent_statistics_match_pipeline(audio_vae):
    """The pipeline denormalises packed ``(B, L, C M)`` latents then unpacks them; vidax does the
    same on packed latents and gives the same values on unpacked ones."""
    ref, vae = audio_vae
    z = standard_normal((2, 6, 15), 0)
    want = LTX2Pipeline._unpack_audio_latents(
        LTX2Pipeline._denormalize_audio_latents(torch.from_numpy(z), ref.latents_mean, ref.latents_std), 6, 5
    )
    _close(unpack_latents(vae.denormalize_latents(z), 5), want.numpy())
    _close(vae.denormalize_latents(unpack_latents(z, 5)), want.numpy())
    np.testing.assert_array_equal(np.asarray(pack_latents(unpack_latents(z, 5))), z)
    np.testing.assert_array_equal(
        LTX2Pipeline._pack_audio_latents(want).numpy(), np.asarray(pack_latents(want.numpy()))
    )
    _close(vae.normalize_latents(vae.denormalize_latents(z)), z)
    with pytest.raises(InputError, match="z must be packed"):
        vae.denormalize_latents(np.zeros((2, 6, 14), np.float32))


def test_audio_decode_matches_reference(audio_vae):
    ref, vae = audio_vae
    z = standard_normal((2, 3, 6, 5), 1)  # 6 latent frames -> 21 mel frames of 20 bins
    want = _ref(ref.decode, z)
    got = vae.decode(z)
    assert got.shape == (2, 2, 21, 20) and got.dtype == np.float32
    _close(got, want)
    _close(vae.decode(pack_latents(z)), want)  # packed latents are unpacked first
    assert_input_sensitive(want, _ref(ref.decode, standard_normal(z.shape, 2)))
    with pytest.raises(InputError, match="z must be floating point audio latents"):
        vae.decode(np.zeros((2, 4, 6, 5), np.float32))


def test_audio_encode_matches_reference(audio_vae):
    ref, vae = audio_vae
    mel = standard_normal((2, 2, 17, 20), 3)
    with torch.no_grad():
        h = ref.encoder(torch.from_numpy(mel)).numpy()  # the posterior's parameters
    _close(vae.encode(mel), h)


def test_audio_group_norm_uncausal_decode_matches_reference(tmp_path_factory):
    """GroupNorm(32) and ``causality_axis="none"`` (24 decoded frames cropped to 21); 7 latent mel
    bins decode to 28, zero padded to ``mel_bins=32`` as the reference pads them."""
    ref, vae = _save(
        tmp_path_factory, diffusers.AutoencoderKLLTX2Audio, AUDIO_GROUP, 1, "ltx2_audio_group", "AutoencoderKLLTX2Audio"
    )
    z = standard_normal((1, 4, 6, 7), 4)
    want = _ref(ref.decode, z)
    assert want.shape == (1, 1, 21, 32) and not want[..., 28:].any()
    _close(vae.decode(z), want)


def test_audio_config_refuses_bad_values():
    with pytest.raises(ConfigError, match="mid_block_add_attention=1 .* expected true or false"):
        LTX2AudioVAEConfig.from_config_dict(dict(AUDIO, mid_block_add_attention=1))
    with pytest.raises(ConfigError, match="attn_resolutions=.* expected null or a list of positive ints"):
        LTX2AudioVAEConfig.from_config_dict(dict(AUDIO, attn_resolutions=[0]))
    with pytest.raises(ConfigError, match="GroupNorm in causal"):
        LTX2AudioVAEConfig.from_config_dict(dict(AUDIO_GROUP, causality_axis="height"))


# ---- vocoders ------------------------------------------------------------------------------------


def test_vocoder_matches_reference(vocoder):
    ref, voc = vocoder
    mel = standard_normal((2, 2, 7, 20), 5)  # 2 x 20 = 40 features; 7 frames -> 22 -> 44 samples (kernel 6,
    want = _ref(ref, mel)  # stride 3 gives 3 L + 1: not frames x hop, as the reference)
    got = voc(mel)
    assert got.shape == (2, 2, 44) and got.dtype == np.float32 and voc.sample_rate == 12000
    _close(got, want)
    assert_input_sensitive(want, _ref(ref, standard_normal(mel.shape, 6)))
    with pytest.raises(InputError, match="mel must be a floating point mel spectrogram"):
        voc(np.zeros((2, 2, 7, 19), np.float32))


def test_snake_vocoder_matches_reference(tmp_path_factory):
    """LTX-2.3's generator settings: anti-aliased snake-beta activations, clamp, no final bias."""
    ref, voc = _save(tmp_path_factory, LTX2Vocoder, VOCODER_SNAKE, 4, "ltx2_snake", "LTX2Vocoder")
    mel = standard_normal((1, 2, 6, 20), 7)
    want = _ref(ref, mel)
    _close(voc(mel), want)
    assert_input_sensitive(want, _ref(ref, standard_normal(mel.shape, 8)))


def test_bwe_vocoder_matches_reference(bwe):
    """16 mel frames -> 64 samples at 8 kHz (not a multiple of hop 3: padded to 66 for the STFT) ->
    128 samples at 16 kHz."""
    ref, voc = bwe
    mel = standard_normal((2, 2, 16, 20), 9)
    want = _ref(ref, mel)
    got = voc(mel)
    assert got.shape == (2, 2, 128) and voc.sample_rate == 16000
    _close(got, want)
    assert_input_sensitive(want, _ref(ref, standard_normal(mel.shape, 10)))
    # The bandwidth extender contributes (its residual is not negligible next to the resampled skip).
    with torch.no_grad():
        skip = ref.resampler(ref.vocoder(torch.from_numpy(mel)))[..., :128].clamp(-1, 1).numpy()
    assert max_rel_err(skip, want) > 0.05


def test_bwe_with_channels_no_power_of_two_divides_matches_reference(tmp_path_factory):
    """hidden_channels 18 and bwe_hidden_channels 13 over two upsamplers each: the reference
    floor-divides at each one (18 -> 9 -> 4, 13 -> 6 -> 3) and runs; so does vidax. A width that
    reaches 0 channels is refused (the reference would build empty convolutions)."""
    config = dict(BWE, hidden_channels=18, bwe_hidden_channels=13)
    ref, voc = _save(tmp_path_factory, LTX2VocoderWithBWE, config, 11, "ltx2_bwe_odd", "LTX2VocoderWithBWE")
    mel = standard_normal((1, 2, 16, 20), 12)
    want = _ref(ref, mel)
    _close(voc(mel), want)
    assert_input_sensitive(want, _ref(ref, standard_normal(mel.shape, 13)))
    with pytest.raises(ConfigError, match=r"bwe_hidden_channels=3 .*expected at least 2 \*\* 2"):
        LTX2VocoderWithBWEConfig.from_config_dict(dict(BWE, bwe_hidden_channels=3))


def test_bwe_config_refuses_inconsistent_settings():
    with pytest.raises(ConfigError, match="bwe_in_channels"):
        LTX2VocoderWithBWEConfig.from_config_dict(dict(BWE, num_mel_channels=9))
    with pytest.raises(ConfigError, match="antialias=true with act_fn='leaky_relu' is not implemented"):
        LTX2VocoderWithBWEConfig.from_config_dict(dict(BWE, act_fn="leaky_relu"))
