"""Every released HunyuanVideo 1.0 transformer config parses, builds abstractly, and has diffusers'
parameter count and state-dict keys.

Covers ``hunyuanvideo-community__HunyuanVideo``, ``-I2V`` (token_replace, 16 channels) and
``-I2V-33ch`` (latent_concat, no guidance embedder) in ``reference_configs/`` (HunyuanVideo-1.5
is a different model). The reference count comes from building
``diffusers.HunyuanVideoTransformer3DModel`` on the meta device (no memory).
"""

from __future__ import annotations

import inspect
import json
import math
import os

import jax
import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError
from vidax.models.hunyuan_video.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuan_video.convert import TRANSFORMER_FP32_PARAMS
from vidax.models.hunyuan_video.transformer import HunyuanVideoTransformer3DModel
from vidax.registry import registry
from vidax.weights.loader import DtypePolicy

REPOS = (
    "hunyuanvideo-community__HunyuanVideo",
    "hunyuanvideo-community__HunyuanVideo-I2V",
    "hunyuanvideo-community__HunyuanVideo-I2V-33ch",
)
CONFIGS = [os.path.join(REFERENCE_CONFIGS, r, "transformer", "config.json") for r in REPOS]
STACKS = HunyuanVideoTransformer3DModel.block_stacks


def _reference(cfg: dict):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    with torch.device("meta"):
        ref = diffusers.HunyuanVideoTransformer3DModel.from_config(cfg)
    return sum(p.numel() for p in ref.parameters()), set(ref.state_dict())


@pytest.mark.parametrize("path", CONFIGS, ids=REPOS)
def test_param_count_matches_reference(path):
    with open(path) as f:
        raw = json.load(f)
    cfg = HunyuanVideoTransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: HunyuanVideoTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    theirs, ref_keys = _reference(raw)
    print(f"{os.path.relpath(path, REFERENCE_CONFIGS)}: {ours / 1e9:.4f} B parameters")
    assert ours == theirs
    # The key rules map every reference key onto exactly one of our parameters (both stacks).
    rules = registry().component("HunyuanVideoTransformer3DModel").rules(cfg)
    depth = dict(zip(STACKS, (cfg.num_layers, cfg.num_single_layers)))
    ours_keys = set()
    for p, _ in flat:
        n = depth.get(p[0])
        ours_keys |= {rules.join(p, i) for i in range(n)} if n else {rules.join(p, None)}
    assert ours_keys == ref_keys
    policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
    kept = {".".join(map(str, p)) for p, _ in flat if policy.dtype_for(p) == "float32"}
    assert "time_text_embed.timestep_embedder.linear_1.kernel" in kept
    assert "transformer_blocks.attn.norm_q.scale" in kept
    assert "context_embedder.token_refiner.refiner_blocks.0.norm1.scale" in kept
    assert "transformer_blocks.norm1.linear.kernel" not in kept
    assert ("time_text_embed.guidance_embedder.linear_1.kernel" in kept) == cfg.guidance_embeds


def test_known_size():
    cfg = HunyuanVideoTransformerConfig.from_json_file(CONFIGS[0])
    model = nnx.eval_shape(lambda: HunyuanVideoTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    n = sum(math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert round(n / 1e9, 1) == 12.8  # the published "13B"


@pytest.mark.parametrize(
    "override,match",
    [
        ({"qk_norm": "rms_norm_across_heads"}, "qk_norm"),
        ({"rope_axes_dim": [16, 56, 48]}, "rope_axes_dim"),
        ({"rope_axes_dim": [16, 56]}, "rope_axes_dim"),
        ({"image_condition_type": "ip_adapter"}, "image_condition_type"),
        ({"num_single_layers": 0}, "num_single_layers"),
        (
            {"_class_name": None, "window_size": 3},
            "unknown setting window_size",
        ),  # naming no diffusers class: strict (a key diffusers ignores is ignored: test_checkpoint_errors.py)
    ],
)
def test_config_refuses(override, match):
    with pytest.raises(ConfigError, match=match):
        HunyuanVideoTransformerConfig.from_config_dict({"_class_name": "HunyuanVideoTransformer3DModel", **override})


def test_config_defaults_are_diffusers():
    diffusers = pytest.importorskip("diffusers")
    sig = inspect.signature(diffusers.HunyuanVideoTransformer3DModel.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    ours = HunyuanVideoTransformerConfig().to_dict()
    assert set(ours) == set(defaults)
    for key, value in defaults.items():
        assert ours[key] == (tuple(value) if isinstance(value, (list, tuple)) else value), key
