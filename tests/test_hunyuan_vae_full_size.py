"""Every released HunyuanVideo 1.0 VAE config parses, builds abstractly, and has diffusers' parameters.

Covers ``hunyuanvideo-community__HunyuanVideo``, ``-I2V`` and ``-I2V-33ch`` ``vae/config.json`` in
``reference_configs/`` (HunyuanVideo-1.5 uses another VAE class). The reference is
``diffusers.AutoencoderKLHunyuanVideo`` built on the meta device from the same file; every
state-dict key must map by the default key rules onto one parameter of the same (re-laid-out)
shape, and the counts must be equal.
"""

from __future__ import annotations

import glob
import json
import os

import jax.numpy as jnp
import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.models.hunyuan_video.config import HunyuanVideoVAEConfig
from vidax.models.hunyuan_video.convert import VAE_FP32_PARAMS
from vidax.models.hunyuan_video.vae import HunyuanVideoVAE
from vidax.weights.loader import DtypePolicy, KeyRules

CONFIGS = sorted(
    p
    for p in glob.glob(os.path.join(REFERENCE_CONFIGS, "hunyuanvideo-community__HunyuanVideo*", "vae", "config.json"))
    if "HunyuanVideo-1.5" not in p
)


def _id(path: str) -> str:
    return os.path.relpath(path, REFERENCE_CONFIGS).split(os.sep)[0]


def test_all_configs_found():
    assert sorted(_id(p) for p in CONFIGS) == [
        "hunyuanvideo-community__HunyuanVideo",
        "hunyuanvideo-community__HunyuanVideo-I2V",
        "hunyuanvideo-community__HunyuanVideo-I2V-33ch",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=[_id(p) for p in CONFIGS])
def test_vae_builds_with_reference_parameters(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    from tests.parity.helpers import assert_reference_parameters

    with open(path) as f:
        raw = json.load(f)
    cfg = HunyuanVideoVAEConfig.from_json_file(path)
    assert (cfg.spatial_compression, cfg.temporal_compression, cfg.latent_channels) == (8, 4, 16)
    assert cfg.scaling_factor == 0.476986
    model = nnx.eval_shape(lambda: HunyuanVideoVAE(cfg, rngs=nnx.Rngs(0)))
    with torch.device("meta"):
        ref = diffusers.AutoencoderKLHunyuanVideo.from_config(raw)
    n = assert_reference_parameters(model, ref, KeyRules())
    print(f"{_id(path)}: {n / 1e6:.2f} M parameters")
    assert n == sum(p.numel() for p in ref.parameters())
    # The group norms (all of them, and only they) stay float32 under a bf16 policy.
    policy = DtypePolicy(jnp.bfloat16, VAE_FP32_PARAMS)
    flat = [p for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    kept = {"/".join(map(str, p)) for p in flat if policy.dtype_for(p) == "float32"}
    norms = {k for k in ref.state_dict() if isinstance(ref.get_submodule(k.rsplit(".", 1)[0]), torch.nn.GroupNorm)}
    assert len(kept) == len(norms) > 0
    assert "decoder/mid_block/attentions/0/group_norm/scale" in kept
    assert "decoder/conv_norm_out/bias" in kept and "decoder/conv_out/conv/kernel" not in kept
