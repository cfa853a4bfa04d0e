"""Every released Wan transformer config parses, builds abstractly, and has diffusers' parameter count.

Covers all ``Wan-AI__*/transformer*/config*.json`` in ``reference_configs/``:
Wan2.1 T2V 1.3B / 14B, Wan2.1 I2V 14B 480P / 720P (image embedder + add_k/add_v projections),
Wan2.2 T2V A14B (transformer and transformer_2), Wan2.2 I2V A14B (hub config with the image
branch, the converter variant without it, transformer_2) and Wan2.2 TI2V 5B. The reference count
comes from building ``diffusers.WanTransformer3DModel`` on the meta device (no memory).
"""

from __future__ import annotations

import glob
import json
import math
import os

import jax
import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.convert import TRANSFORMER_FP32_PARAMS, transformer_key_rules
from vidax.models.wan.transformer import WanTransformer3DModel
from vidax.weights.loader import DtypePolicy

CONFIGS = sorted(glob.glob(os.path.join(REFERENCE_CONFIGS, "Wan-AI__*", "transformer*", "config*.json")))


def _id(path: str) -> str:
    return os.path.relpath(path, REFERENCE_CONFIGS)


def test_all_wan_configs_found():
    # 7 repos, 10 transformer config files (A14B repos have transformer_2, I2V-A14B two variants).
    assert len(CONFIGS) == 10, CONFIGS


def _reference_count(cfg: dict) -> int:
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    with torch.device("meta"):
        ref = diffusers.WanTransformer3DModel.from_config(cfg)
    return sum(p.numel() for p in ref.parameters()), set(ref.state_dict())


@pytest.mark.parametrize("path", CONFIGS, ids=[_id(p) for p in CONFIGS])
def test_param_count_matches_reference(path):
    with open(path) as f:
        raw = json.load(f)
    cfg = WanTransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: WanTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    theirs, ref_keys = _reference_count(raw)
    print(f"{_id(path)}: {ours / 1e9:.3f} B parameters")
    assert ours == theirs
    # The key rules map every reference key onto exactly one of our parameters.
    rules = transformer_key_rules(cfg)
    layers = {k.split(".")[1] for k in ref_keys if k.startswith("blocks.")}
    assert len(layers) == cfg.num_layers
    ours_keys = set()
    for p, v in flat:
        if p[0] == "blocks":
            ours_keys |= {rules.join(p, i) for i in range(cfg.num_layers)}
        else:
            ours_keys.add(rules.join(p, None))
    assert ours_keys == ref_keys
    # fp32 modules of the reference stay fp32 under a bf16 policy.
    policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
    kept = {".".join(map(str, p)) for p, _ in flat if policy.dtype_for(p) == "float32"}
    assert "scale_shift_table" in kept and "blocks.norm2.scale" in kept
    assert "condition_embedder.time_embedder.linear_1.kernel" in kept
    assert "blocks.attn1.to_q.kernel" not in kept and "condition_embedder.time_proj.kernel" not in kept


def test_known_sizes():
    sizes = {}
    for path in CONFIGS:
        cfg = WanTransformerConfig.from_json_file(path)
        model = nnx.eval_shape(lambda: WanTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
        sizes[_id(path)] = sum(
            math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
        )
    # Published sizes: 1.3B, 14B, 5B (rounded).
    assert round(sizes["Wan-AI__Wan2.1-T2V-1.3B-Diffusers/transformer/config.json"] / 1e9, 1) == 1.4
    assert round(sizes["Wan-AI__Wan2.1-T2V-14B-Diffusers/transformer/config.json"] / 1e9) == 14
    assert round(sizes["Wan-AI__Wan2.2-TI2V-5B-Diffusers/transformer/config.json"] / 1e9) == 5


BASE = {
    "_class_name": "WanTransformer3DModel",
    "num_attention_heads": 12,
    "attention_head_dim": 128,
}


@pytest.mark.parametrize(
    "override,match",
    [
        ({"qk_norm": "layer_norm"}, "qk_norm"),
        ({"attention_head_dim": 13}, "attention_head_dim"),
        ({"patch_size": [1, 2]}, "patch_size"),
        ({"freq_dim": 1}, "freq_dim"),
        ({"pos_embed_seq_len": 514}, "pos_embed_seq_len"),
        ({"image_dim": 1280, "added_kv_proj_dim": 5120}, "added_kv_proj_dim"),
        (
            {"_class_name": None, "window_size": [-1, -1]},
            "unknown setting window_size",
        ),  # naming no diffusers class: strict (a key diffusers ignores is ignored: test_checkpoint_errors.py)
        ({"num_layers": 0}, "num_layers"),
    ],
)
def test_config_refuses(override, match):
    with pytest.raises(ConfigError, match=match):
        WanTransformerConfig.from_config_dict({**BASE, **override})


def test_config_defaults_are_diffusers():
    diffusers = pytest.importorskip("diffusers")
    import inspect

    sig = inspect.signature(diffusers.WanTransformer3DModel.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    ours = WanTransformerConfig().to_dict()
    assert set(ours) == set(defaults)
    for key, value in defaults.items():
        assert ours[key] == (tuple(value) if isinstance(value, list) else value), key
