"""The released LTX-Video 0.9.x VAE configs parse, build abstractly and match diffusers 1:1.

The reference ``AutoencoderKLLTXVideo`` is built on torch's ``meta`` device from the same
``config.json``, vidax's with ``nnx.eval_shape``; every diffusers state-dict key (the
``latents_mean`` / ``latents_std`` buffers included) must map to a vidax tensor of the same shape
after the loader's layout change, and the parameter counts (buffers excluded, as
``ref.parameters()``) must agree. One decoder tile is traced abstractly at a released size.
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
from vidax.models.ltx.config import LTXVAEConfig
from vidax.models.ltx.tiles import Tile
from vidax.models.ltx.vae import LTXVideoVAE
from vidax.nn.buffer import Buffer
from vidax.weights.loader import KeyRules

# LTX-Video 0.9.x only (Lightricks__LTX-Video, -0.9.1, -0.9.5, -0.9.7-dev), not LTX-2.
CONFIGS = sorted(glob.glob(f"{REFERENCE_CONFIGS}/Lightricks__LTX-Video*/vae/config.json"))


def _name(path: str) -> str:
    return path.split("/")[-3]


def test_configs_found():
    assert {_name(p) for p in CONFIGS} == {
        "Lightricks__LTX-Video",
        "Lightricks__LTX-Video-0.9.1",
        "Lightricks__LTX-Video-0.9.5",
        "Lightricks__LTX-Video-0.9.7-dev",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=_name)
def test_vae_builds_with_reference_parameters(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")

    config = LTXVAEConfig.from_json_file(path)
    with open(path) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with torch.device("meta"):
        ref = diffusers.AutoencoderKLLTXVideo.from_config(raw)
    assert (
        (config.spatial_compression, config.temporal_compression)
        == (ref.spatial_compression_ratio, ref.temporal_compression_ratio)
        == (32, 8)
    )
    abstract = nnx.eval_shape(lambda: LTXVideoVAE(config, rngs=nnx.Rngs(0)))
    n = assert_reference_parameters(abstract, ref, KeyRules(), buffers=Buffer)
    assert n > 400e6, n


def test_decoder_tile_traces_at_released_size():
    """0.9.5: 3 latent frames of 16 x 24 -> 17 frames of 512 x 768, abstractly (no compile)."""
    config = LTXVAEConfig.from_json_file([p for p in CONFIGS if "0.9.5" in p][0])
    vae = nnx.eval_shape(lambda: LTXVideoVAE(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(vae.decoder)

    def decode(state, z, t):
        return nnx.merge(graphdef, state)(z, t, Tile(None))

    out = jax.eval_shape(
        decode, state, jax.ShapeDtypeStruct((1, 3, 16, 24, 128), jnp.float32), jax.ShapeDtypeStruct((1,), jnp.float32)
    )
    assert out.shape == (1, 17, 512, 768, 3)
