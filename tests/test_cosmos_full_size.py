"""The released Cosmos-Predict2.5 transformer configs parse, build abstractly, and have diffusers'
parameter count and state-dict keys.

Covers ``nvidia__Cosmos-Predict2.5-{2B,14B}/transformer/config.json`` in ``reference_configs/``
(the Cosmos3 folders hold a different model class and are not this transformer). The reference
count comes from building ``diffusers.CosmosTransformer3DModel`` on the meta device.
"""

from __future__ import annotations

import glob
import inspect
import json
import math
import os

import jax
import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError
from vidax.models.cosmos.config import CosmosTransformerConfig
from vidax.models.cosmos.convert import TRANSFORMER_FP32_PARAMS
from vidax.models.cosmos.transformer import CosmosTransformer3DModel
from vidax.registry import registry
from vidax.weights.loader import DtypePolicy

CONFIGS = sorted(
    glob.glob(os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos-Predict2.5-*", "transformer", "config.json"))
)


def _id(path: str) -> str:
    return os.path.relpath(path, REFERENCE_CONFIGS)


def test_all_predict25_configs_found():
    assert [_id(p).split("/")[0] for p in CONFIGS] == ["nvidia__Cosmos-Predict2.5-14B", "nvidia__Cosmos-Predict2.5-2B"]


@pytest.mark.parametrize("path", CONFIGS, ids=[_id(p) for p in CONFIGS])
def test_param_count_and_keys_match_reference(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    with open(path) as f:
        raw = json.load(f)
    cfg = CosmosTransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: CosmosTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    with torch.device("meta"):
        ref = diffusers.CosmosTransformer3DModel.from_config(raw)
    theirs = sum(p.numel() for p in ref.parameters())
    print(f"{_id(path)}: {ours / 1e9:.3f} B parameters")
    assert ours == theirs
    # The key rules map every reference key onto exactly one of our parameters.
    rules = registry().component("CosmosTransformer3DModel").rules(cfg)
    ours_keys = set()
    for p, _ in flat:
        if p[0] == "transformer_blocks":
            ours_keys |= {rules.join(p, i) for i in range(cfg.num_layers)}
        else:
            ours_keys.add(rules.join(p, None))
    assert ours_keys == set(ref.state_dict())
    policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
    assert all(policy.dtype_for(p) == "bfloat16" for p, _ in flat)  # no learnable_pos_embed here


def test_known_sizes():
    sizes = {}
    for path in CONFIGS:
        cfg = CosmosTransformerConfig.from_json_file(path)
        model = nnx.eval_shape(lambda: CosmosTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
        sizes[_id(path).split("/")[0]] = sum(
            math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
        )
    assert round(sizes["nvidia__Cosmos-Predict2.5-2B"] / 1e9) == 2
    assert round(sizes["nvidia__Cosmos-Predict2.5-14B"] / 1e9) == 14


BASE = {"_class_name": "CosmosTransformer3DModel", "num_attention_heads": 4, "attention_head_dim": 32}


@pytest.mark.parametrize(
    "override,match",
    [
        ({"img_context_dim_in": 1152}, "img_context_dim_in"),
        ({"controlnet_block_every_n": 7}, "controlnet_block_every_n"),
        ({"extra_pos_embed_type": "sincos"}, "extra_pos_embed_type"),
        ({"use_crossattn_projection": True, "encoder_hidden_states_channels": 512}, "encoder_hidden_states_channels"),
        ({"attention_head_dim": 10}, "attention_head_dim"),
        ({"patch_size": [1, 2]}, "patch_size"),
        ({"rope_scale": [1.0, 0.0, 3.0]}, "rope_scale"),
        ({"num_layers": 0}, "num_layers"),
        (
            {"_class_name": None, "backbone_type": "cosmos3_edge_nemotron_dense"},
            "unknown setting backbone_type",
        ),  # naming no diffusers class: strict (a key diffusers ignores is ignored: test_checkpoint_errors.py)
    ],
)
def test_config_refuses(override, match):
    with pytest.raises(ConfigError, match=match):
        CosmosTransformerConfig.from_config_dict({**BASE, **override})


def test_config_accepts_unused_image_context_sizes():
    cfg = CosmosTransformerConfig.from_config_dict(
        {**BASE, "img_context_dim_in": None, "img_context_num_tokens": 7, "img_context_dim_out": 3}
    )
    assert cfg.inner_dim == 128


def test_config_defaults_are_diffusers():
    diffusers = pytest.importorskip("diffusers")
    sig = inspect.signature(diffusers.CosmosTransformer3DModel.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    ours = CosmosTransformerConfig().to_dict()
    skipped = set(CosmosTransformerConfig.IGNORED) | set(CosmosTransformerConfig.NEUTRAL)
    assert set(ours) == set(defaults) - skipped
    for key, value in defaults.items():
        if key in skipped:
            assert key in CosmosTransformerConfig.IGNORED or value in CosmosTransformerConfig.NEUTRAL[key], key
        else:
            assert ours[key] == (tuple(value) if isinstance(value, (list, tuple)) else value), key
