"""The released CogVideoX VAE configs parse, build abstractly, and match diffusers' parameters 1:1.

The reference is built on torch's ``meta`` device (no memory), vidax's with ``nnx.eval_shape``;
every diffusers key must map to a vidax parameter of the same shape (after the loader's kernel
layout change) and the counts must agree. The chunk functions are traced abstractly at the
released size (no compile, no memory), and the tile arithmetic is checked at the released
resolutions.
"""

from __future__ import annotations

import glob
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.parity.helpers import assert_reference_parameters
from tests.paths import REFERENCE_CONFIGS
from vidax.models.cogvideox import vae as cvx_vae
from vidax.models.cogvideox.config import CogVideoXVAEConfig
from vidax.models.cogvideox.vae import CogVideoXTiling, CogVideoXVAE
from vidax.weights.loader import KeyRules

CONFIGS = sorted(glob.glob(f"{REFERENCE_CONFIGS}/THUDM__CogVideoX*/vae/config.json"))


def _name(path: str) -> str:
    return path.split("/")[-3]


def test_configs_found():
    names = {_name(p) for p in CONFIGS}
    assert {"THUDM__CogVideoX-2b", "THUDM__CogVideoX-5b", "THUDM__CogVideoX1.5-5B"} <= names, names


@pytest.mark.parametrize("path", CONFIGS, ids=_name)
def test_vae_builds_with_reference_parameters(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")

    config = CogVideoXVAEConfig.from_json_file(path)
    with open(path) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    assert config.scaling_factor == raw["scaling_factor"]
    assert config.invert_scale_latents == raw.get("invert_scale_latents", False)
    assert (config.temporal_compression, config.spatial_compression) == (4, 8)
    abstract = nnx.eval_shape(lambda: CogVideoXVAE(config, rngs=nnx.Rngs(0)))
    with torch.device("meta"):
        ref = diffusers.AutoencoderKLCogVideoX.from_config(raw)
    assert assert_reference_parameters(abstract, ref, KeyRules()) > 200e6


def test_chunks_trace_at_released_size():
    """480 x 720: the first decoder chunk (3 latent frames -> 9 frames), a later one with its
    cache (2 -> 8), and the first encoder chunk (9 frames -> 3 latent frames), abstractly."""
    config = CogVideoXVAEConfig.from_json_file(CONFIGS[0])
    graphdef, state = nnx.split(nnx.eval_shape(lambda: CogVideoXVAE(config, rngs=nnx.Rngs(0))))

    def decode(state, z, cache):
        return nnx.merge(graphdef, state).decode_chunk(z, cache)

    def encode(state, x):
        return nnx.merge(graphdef, state).encode_chunk(x, None)

    def sds(*shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32)

    frames, cache = jax.eval_shape(decode, state, sds(1, 3, 60, 90, 16), None)
    assert frames.shape == (1, 9, 480, 720, 3) and frames.dtype == jnp.float32
    assert cache and all(c.shape[1] == 2 for c in cache)  # every cached conv carries 2 frames
    later, cache2 = jax.eval_shape(decode, state, sds(1, 2, 60, 90, 16), cache)
    assert later.shape == (1, 8, 480, 720, 3)
    assert [c.shape for c in cache2] == [c.shape for c in cache]  # fixed-shape cache
    h, _ = jax.eval_shape(encode, state, sds(1, 9, 480, 720, 3))
    assert h.shape == (1, 3, 60, 90, 32)


@pytest.mark.parametrize("height,width", [(480, 720), (768, 1360)])
def test_tiled_decode_keeps_released_sizes(height, width):
    """With the default tiles (240 x 360 pixels, 30 x 45 latents) the crops add up exactly."""
    config = CogVideoXVAEConfig.from_json_file(CONFIGS[0])
    tiling = CogVideoXTiling.from_config(config)
    assert tiling.decode_params == ((30, 45), (25, 36), (40, 72), (200, 288))
    assert tiling.encode_params == ((240, 360), (200, 288), (5, 9), (25, 36))
    z = np.zeros((1, 1, height // 8, width // 8, 16), np.float32)
    tiles = []

    def run(tile):
        tiles.append(tile.shape)
        return np.zeros((1, 1, tile.shape[2] * 8, tile.shape[3] * 8, 3), np.float32)

    out = cvx_vae._tiled(run, z, *tiling.decode_params)
    assert out.shape == (1, 1, height, width, 3)
    assert len(tiles) == len(range(0, height // 8, 25)) * len(range(0, width // 8, 36))
