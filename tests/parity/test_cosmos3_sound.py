"""Parity of vidax's Cosmos 3 sound tokenizer (``Cosmos3AVAEAudioTokenizer``) with diffusers 0.42.1
(tiny, CPU, fp32), its loading from a ``save_pretrained`` folder, its config checks, and the
released ``sound_tokenizer/config.json`` built abstractly with diffusers' parameter count.

Every parameter randomised (``randomize_torch_module``: the weight-norm magnitudes ``weight_g``
and directions ``weight_v``, biases, SnakeBeta ``alpha`` / ``beta``, the ConvNeXt norms), saved
with ``save_pretrained`` and loaded with the production loader
(:func:`~vidax.weights.component.load_component`). Distinct sizes everywhere: latents 5 channels,
decoder widths 6 / 12 / 18 with strides (2, 3, 4) (both output-padding parities), encoder widths
7 / 14 with strides (3, 2), STFT 10 / hop 4 (so ``hop = 24``), stereo. The matrix gain (0.7) puts
the decoded peak just above 1, so the reference's clamp acts on ~1 % of the samples.

Tolerances: the waveform SNR >= 60 dB (issue 24) and max |err| / max |ref| < 1e-5 for decode and
encode: both sides run the same fp32 convolutions (and an STFT, by ``rfft`` against torch's) with
different summation orders (measured ~7e-7 decode, SNR ~130 dB; ~4e-7 encode). A wrong tap, padding side, channel order, crop or
weight-norm axis gives errors above 1e-2; the reference's outputs are checked to depend on their
inputs far beyond that.
"""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from diffusers import Cosmos3AVAEAudioTokenizer as Ref  # noqa: E402

from tests.parity.helpers import (  # noqa: E402
    assert_close,
    assert_input_sensitive,
    randomize_torch_module,
    standard_normal,
)
from tests.paths import REFERENCE_CONFIGS  # noqa: E402
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.models.cosmos3.config import Cosmos3SoundTokenizerConfig  # noqa: E402
from vidax.models.cosmos3.sound_tokenizer import Cosmos3AVAEAudioTokenizer  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

DECODE_TOL = 1e-5
ENCODE_TOL = 1e-5
MIN_SNR_DB = 60.0

TINY = dict(
    sampling_rate=8000,
    vocoder_input_dim=5,
    dec_dim=6,
    dec_c_mults=[1, 2, 3],
    dec_strides=[2, 3, 4],
    dec_out_channels=2,
    enc_dim=7,
    enc_c_mults=[1, 2],
    enc_strides=[3, 2],
    enc_num_blocks=1,
    enc_n_fft=10,
    enc_hop_length=4,
    enc_latent_dim=10,
    stereo=True,
    input_channels=1,
)
RELEASED = os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos3-Nano", "sound_tokenizer", "config.json")


def snr_db(got, want) -> float:
    want = np.asarray(want, np.float64)
    return float(10 * np.log10(np.sum(want**2) / np.sum((np.asarray(got, np.float64) - want) ** 2)))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The randomised reference and vidax's tokenizer loaded from its ``save_pretrained`` folder."""
    ref = Ref(**TINY).eval()
    randomize_torch_module(ref, 0, scale=0.2, gain=0.7)
    folder = tmp_path_factory.mktemp("cosmos3_sound")
    ref.save_pretrained(folder)
    return ref, load_component("Cosmos3AVAEAudioTokenizer", folder)


def test_decode_matches_diffusers(pair):
    ref, ours = pair
    z = standard_normal((2, 5, 7), 1)
    with torch.no_grad():
        want = ref.decode(torch.from_numpy(z)).numpy()
        other = ref.decode(torch.from_numpy(standard_normal((2, 5, 7), 2))).numpy()
    got = np.asarray(ours.decode(ours.denormalize_latents(z)))
    assert got.dtype == np.float32 and got.shape == want.shape == (2, 2, 7 * 24)
    assert 0 < np.mean(np.abs(want) == 1.0) < 0.05  # the clamp acts, on a few samples
    assert_input_sensitive(want, other)
    assert snr_db(got, want) >= MIN_SNR_DB
    assert_close(got, want, DECODE_TOL)
    assert ours.output == "waveform" and ours.sample_rate == 8000 and ours.hop == 24


def test_encode_matches_diffusers(pair):
    """Posterior mean and std of a waveform whose length is not a multiple of the hop (the
    reference pads it) and whose peak is not 1 (``normalize_volume``)."""
    ref, ours = pair
    wave = 0.3 * standard_normal((2, 2, 24 * 6 - 5), 3)
    with torch.no_grad():
        post = ref.encode(torch.from_numpy(wave)).latent_dist
        other = ref.encode(torch.from_numpy(0.3 * standard_normal((2, 2, 24 * 6 - 5), 4))).latent_dist
    mean, std = ours.encode(wave)
    assert_input_sensitive(post.mean.numpy(), other.mean.numpy())
    assert_input_sensitive(post.std.numpy(), other.std.numpy())
    assert_close(mean, post.mean.numpy(), ENCODE_TOL)
    assert_close(std, post.std.numpy(), ENCODE_TOL)


def test_decoder_only_folder_loads(tmp_path):
    """A decoder-only checkpoint (no ``encoder.*`` tensors) whose config.json does not say so (no
    ``encoder_enabled``, as the released hand-written folder) loads as diffusers loads it, with the
    encoder disabled; it decodes as the reference and refuses to encode in one line."""
    ref = Ref(**TINY, encoder_enabled=False).eval()
    randomize_torch_module(ref, 5, scale=0.1, gain=0.5)
    ref.save_pretrained(tmp_path)
    with open(tmp_path / "config.json") as f:
        raw = json.load(f)
    del raw["encoder_enabled"]
    with open(tmp_path / "config.json", "w") as f:
        json.dump(raw, f)
    assert Ref.from_pretrained(tmp_path).encoder is None  # the reference reads it decoder-only too
    ours = load_component("Cosmos3AVAEAudioTokenizer", tmp_path)
    assert ours.encoder is None
    z = standard_normal((1, 5, 3), 6)
    with torch.no_grad():
        want = ref.decode(torch.from_numpy(z)).numpy()
    assert_close(ours.decode(z), want, DECODE_TOL)
    with pytest.raises(InputError, match="no encoder"):
        ours.encode(np.zeros((1, 2, 24), np.float32))


@pytest.mark.parametrize(
    "call, arg, match",
    [
        (
            "decode",
            np.zeros((1, 4, 3), np.float32),
            r"z must be floating point sound latents \(batch, 5, frames\); "
            r"got shape \(1, 4, 3\)",
        ),
        ("decode", np.zeros((5, 3), np.float32), r"got shape \(5, 3\)"),
        ("denormalize_latents", np.zeros((1, 5, 3), np.int32), r"got shape \(1, 5, 3\) dtype int32"),
        ("encode", np.zeros((1, 1, 48), np.float32), r"waveform must be floating point \(batch, 2, samples\)"),
    ],
)
def test_bad_input_is_refused_in_one_line(call, arg, match):
    cfg = Cosmos3SoundTokenizerConfig.from_config_dict(TINY)
    model = nnx.eval_shape(lambda: Cosmos3AVAEAudioTokenizer(cfg, rngs=nnx.Rngs(0)))
    with pytest.raises(InputError, match=match) as e:
        getattr(model, call)(arg)
    assert "\n" not in str(e.value)


def test_released_config_builds_with_reference_parameters():
    """The released Nano / Super ``sound_tokenizer`` (byte-identical files) built abstractly: the
    parameter count and every shape equal diffusers' (built on ``meta``), and the decoder traced
    at its real size: 64 latent channels x 10 frames -> 48 kHz stereo, 1920 samples a frame."""
    from tests.parity.helpers import assert_reference_parameters
    from vidax.weights.loader import KeyRules

    with open(RELEASED) as f:
        raw = json.load(f)
    cfg = Cosmos3SoundTokenizerConfig.from_json_file(RELEASED)
    model = nnx.eval_shape(lambda: Cosmos3AVAEAudioTokenizer(cfg, rngs=nnx.Rngs(0)))
    with torch.device("meta"):
        ref = Ref.from_config(raw)
    n = assert_reference_parameters(model, ref, KeyRules())
    print(f"Cosmos3AVAEAudioTokenizer: {n / 1e6:.2f} M parameters")
    assert n > 50e6, n
    assert (cfg.hop, model.sample_rate, model.output) == (1920, 48000, "waveform")
    graphdef, state = nnx.split(model.decoder)
    wave = jax.eval_shape(lambda s, z: nnx.merge(graphdef, s)(z), state, jax.ShapeDtypeStruct((1, 10, 64), jnp.float32))
    assert wave.shape == (1, 10 * 1920, 2)
    graphdef, state = nnx.split(model.encoder)
    moments = jax.eval_shape(
        lambda s, x: nnx.merge(graphdef, s)(x), state, jax.ShapeDtypeStruct((1, 10 * 1920, 2), jnp.float32)
    )
    assert moments.shape == (1, 10, 128)
    assert math.prod(cfg.enc_strides) * cfg.enc_hop_length == cfg.hop


@pytest.mark.parametrize(
    "change, match",
    [
        ({"latent_mean": 0.5}, r"latent_mean=0.5 is not implemented"),
        ({"dec_type": "dac"}, r"dec_type='dac' is not implemented"),
        ({"padding_mode": "reflect"}, r"padding_mode='reflect' is not implemented"),
        ({"causal": True}, r"causal=True is not implemented"),
        ({"dec_final_tanh": True}, r"dec_final_tanh=True is not implemented"),
        ({"bottleneck": {"type": "rvq"}}, r"bottleneck=\{'type': 'rvq'\} is not valid"),
        ({"dec_c_mults": [1, 2, 4]}, r"dec_c_mults=\(1, 2, 4\) is not valid .* one multiplier per stride"),
        ({"enc_latent_dim": 127}, r"enc_latent_dim=127 is not valid"),
        ({"fancy": 1}, r"unknown setting fancy=1"),
    ],
)
def test_config_refuses_what_is_not_implemented(change, match):
    """The released config with one setting changed is refused in one line naming it."""
    with open(RELEASED) as f:
        raw = json.load(f)
    with pytest.raises(ConfigError, match=match) as e:
        Cosmos3SoundTokenizerConfig.from_config_dict({**raw, **change}, source="s.json")
    assert "\n" not in str(e.value)
