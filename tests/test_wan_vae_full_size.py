"""The released Wan VAE configs parse, build abstractly, and match diffusers' parameters 1:1.

The reference is built on torch's ``meta`` device (no memory), vidax's with ``nnx.eval_shape``;
every diffusers key must map to a vidax parameter of the same shape (after the loader's kernel
layout change) and the counts must agree.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
from flax import nnx

from vidax.errors import ConfigError
from vidax.models.wan.vae import KEY_RULES, WanVAE, WanVAEConfig
from vidax.weights.loader import _target_shape_of, path_str

CONFIGS = sorted(glob.glob("/work/shared/reference_configs/Wan-AI__*/vae/config.json"))
WAN22_VAE = [p for p in CONFIGS if json.load(open(p)).get("is_residual")]
WAN21_VAE = [p for p in CONFIGS if p not in WAN22_VAE]


def _name(path: str) -> str:
    return path.split("/")[-3]


def test_configs_found():
    assert len(WAN21_VAE) >= 6 and WAN22_VAE, CONFIGS


@pytest.mark.parametrize("path", WAN21_VAE, ids=_name)
def test_wan21_vae_builds_with_reference_parameters(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")

    config = WanVAEConfig.from_json_file(path)
    assert (config.z_dim, config.base_dim) == (16, 96)
    assert (config.temporal_compression, config.spatial_compression) == (4, 8)
    abstract = nnx.eval_shape(lambda: WanVAE(config, rngs=nnx.Rngs(0)))
    flat = {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(abstract, nnx.Param))}
    ours = {KEY_RULES.join(p, None): (p, tuple(v.shape)) for p, v in flat.items()}

    with open(path) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with torch.device("meta"):
        ref = diffusers.AutoencoderKLWan.from_config(raw)
    theirs = {k: tuple(t.shape) for k, t in ref.state_dict().items()}

    only_ref, only_ours = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    assert not only_ref and not only_ours, (only_ref[:5], only_ours[:5])
    for key, shape in theirs.items():
        p, want = ours[key]
        assert _target_shape_of(shape, p) == want, (key, path_str(p), shape, want)
    n_ours = sum(int(np.prod(s)) for _, s in ours.values())
    n_ref = sum(t.numel() for t in ref.parameters())
    assert n_ours == n_ref, (n_ours, n_ref)


@pytest.mark.parametrize("path", WAN22_VAE, ids=_name)
def test_wan22_vae_is_refused_clearly(path):
    with pytest.raises(ConfigError, match="is_residual|patch_size|clip_output"):
        WanVAEConfig.from_json_file(path)
    assert os.path.isfile(path)
