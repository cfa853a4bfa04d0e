"""The released LTX-2 autoencoder and vocoder configs (LTX-2, LTX-2.3, LTX-2.5) parse, build
abstractly and match diffusers 0.42.1 1:1.

The reference (``AutoencoderKLLTX2Video``, ``AutoencoderKLLTX2Audio``, ``LTX2Vocoder``,
``LTX2VocoderWithBWE``) is built on torch's ``meta`` device from the same ``config.json``, vidax's
with ``nnx.eval_shape``; every diffusers state-dict key (buffers included: latent statistics,
anti-aliasing filters, STFT bases) must map by the default key rule to a vidax tensor of the same
shape after the loader's layout change, and the parameter counts (buffers excluded, as
``ref.parameters()``) must agree. The released decoders are traced abstractly at a real size.
"""

from __future__ import annotations

import glob
import json

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from tests.parity.helpers import assert_reference_parameters
from tests.paths import REFERENCE_CONFIGS
from vidax.nn.buffer import Buffer
from vidax.registry import registry
from vidax.weights.loader import KeyRules

CLASSES = ("AutoencoderKLLTX2Video", "AutoencoderKLLTX2Audio", "LTX2Vocoder", "LTX2VocoderWithBWE")


def _configs() -> list[str]:
    out = []
    for path in sorted(glob.glob(f"{REFERENCE_CONFIGS}/*LTX-2*/*/config.json")):
        with open(path) as f:
            if json.load(f).get("_class_name") in CLASSES:
                out.append(path)
    return out


CONFIGS = _configs()


def _name(path: str) -> str:
    return "/".join(path.split("/")[-3:-1])


def _abstract(path: str):
    with open(path) as f:
        spec = registry().component(json.load(f)["_class_name"])
    config = spec.config_class().from_json_file(path)
    return config, nnx.eval_shape(lambda: spec.model_class()(config, rngs=nnx.Rngs(0)))


def test_configs_found():
    assert {_name(p) for p in CONFIGS} == {
        f"{repo}/{c}"
        for repo in ("Lightricks__LTX-2", "diffusers__LTX-2.3-Diffusers", "Lightricks__LTX-2.5-Diffusers")
        for c in ("vae", "audio_vae", "vocoder")
    }


@pytest.mark.parametrize("path", CONFIGS, ids=_name)
def test_builds_with_reference_parameters(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    from diffusers.pipelines.ltx2 import vocoder as ref_vocoders

    with open(path) as f:
        raw = json.load(f)
    cls = getattr(diffusers, raw["_class_name"], None) or getattr(ref_vocoders, raw["_class_name"])
    with torch.device("meta"):
        ref = cls.from_config({k: v for k, v in raw.items() if not k.startswith("_")})
    config, abstract = _abstract(path)
    n = assert_reference_parameters(abstract, ref, KeyRules(), buffers=Buffer)
    assert n > 50e6, n
    if raw["_class_name"] == "AutoencoderKLLTX2Video":
        assert (
            (config.spatial_compression, config.temporal_compression)
            == (ref.spatial_compression_ratio, ref.temporal_compression_ratio)
            == (32, 8)
        )
    if "Vocoder" in raw["_class_name"]:
        assert abstract.sample_rate == raw["output_sampling_rate"]


@pytest.mark.parametrize("repo", ["Lightricks__LTX-2", "diffusers__LTX-2.3-Diffusers"])
def test_decoders_trace_at_released_size(repo):
    """3 latent frames of 16 x 24 -> 17 frames of 512 x 768; 25 audio latent frames (1 s) -> 97 mel
    frames -> the vocoder's 24 / 48 kHz waveform; abstractly (no compile)."""
    from vidax.models.ltx.tiles import Tile

    _, vae = _abstract(f"{REFERENCE_CONFIGS}/{repo}/vae/config.json")
    graphdef, state = nnx.split(vae.decoder)
    out = jax.eval_shape(
        lambda s, z: nnx.merge(graphdef, s)(z, None, Tile(None)),
        state,
        jax.ShapeDtypeStruct((1, 3, 16, 24, 128), jnp.float32),
    )
    assert out.shape == (1, 17, 512, 768, 3)

    _, audio = _abstract(f"{REFERENCE_CONFIGS}/{repo}/audio_vae/config.json")
    graphdef, state = nnx.split(audio.decoder)
    mel = jax.eval_shape(
        lambda s, z: nnx.merge(graphdef, s)(z), state, jax.ShapeDtypeStruct((1, 25, 16, 8), jnp.float32)
    )
    assert mel.shape == (1, 97, 64, 2)

    _, vocoder = _abstract(f"{REFERENCE_CONFIGS}/{repo}/vocoder/config.json")
    graphdef, state = nnx.split(vocoder)
    wave = jax.eval_shape(
        lambda s, x: nnx.merge(graphdef, s).forward(x), state, jax.ShapeDtypeStruct((1, 97, 128), jnp.float32)
    )
    # 97 mel frames of 10 ms -> 0.97 s: 23280 samples at 24 kHz, 46560 at 48 kHz.
    assert wave.shape == (1, 97 * vocoder.sample_rate // 100, 2), wave.shape
