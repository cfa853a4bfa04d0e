"""The released Wan VAE configs parse, build abstractly, and match diffusers' parameters 1:1.

The reference is built on torch's ``meta`` device (no memory), vidax's with ``nnx.eval_shape``;
every diffusers key must map to a vidax parameter of the same shape (after the loader's kernel
layout change) and the counts must agree.
"""

from __future__ import annotations

import glob
import json

import pytest
from flax import nnx

from tests.parity.helpers import assert_reference_parameters
from tests.paths import REFERENCE_CONFIGS
from vidax.models.wan.config import WanVAEConfig
from vidax.models.wan.vae import WanVAE
from vidax.weights.loader import KeyRules

CONFIGS = sorted(glob.glob(f"{REFERENCE_CONFIGS}/Wan-AI__*/vae/config.json"))
WAN22_VAE = [p for p in CONFIGS if json.load(open(p)).get("is_residual")]
WAN21_VAE = [p for p in CONFIGS if p not in WAN22_VAE]


def _name(path: str) -> str:
    return path.split("/")[-3]


def test_configs_found():
    assert len(WAN21_VAE) >= 6 and WAN22_VAE, CONFIGS


def _assert_matches_reference(path: str, config: WanVAEConfig) -> int:
    """Every diffusers key maps to a vidax parameter of the same shape; returns the count."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")

    abstract = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    with open(path) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with torch.device("meta"):
        ref = diffusers.AutoencoderKLWan.from_config(raw)
    return assert_reference_parameters(abstract, ref, KeyRules())


@pytest.mark.parametrize("path", WAN21_VAE, ids=_name)
def test_wan21_vae_builds_with_reference_parameters(path):
    config = WanVAEConfig.from_json_file(path)
    assert (config.z_dim, config.base_dim) == (16, 96)
    assert (config.temporal_compression, config.spatial_compression) == (4, 8)
    _assert_matches_reference(path, config)


@pytest.mark.parametrize("path", WAN22_VAE, ids=_name)
def test_wan22_vae_builds_with_reference_parameters(path):
    """The TI2V-5B VAE: residual blocks, patch size 2 (12 channels), z_dim 48, 16x spatial."""
    config = WanVAEConfig.from_json_file(path)
    assert (config.z_dim, config.base_dim, config.decoder_base_dim) == (48, 160, 256)
    assert config.is_residual and config.patch_size == 2
    assert (config.video_in_channels, config.video_out_channels) == (3, 3)
    assert (config.temporal_compression, config.spatial_compression) == (4, 16)
    n = _assert_matches_reference(path, config)
    assert 700e6 < n < 710e6, n  # ~705M parameters
