"""Every released LTX-Video 0.9.x transformer config parses, builds abstractly, and has diffusers'
parameter count, with the key rules mapping every reference key onto one parameter.

Covers ``Lightricks__LTX-Video*/transformer/config.json`` in ``reference_configs/``: 0.9.0
(``Lightricks__LTX-Video``), 0.9.1, 0.9.5 (2B) and 0.9.7-dev (13B); not LTX-2.x (another model).
The reference count comes from ``diffusers.LTXVideoTransformer3DModel`` built on the meta device.
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
from vidax.models.ltx.config import LTXTransformerConfig
from vidax.models.ltx.convert import TRANSFORMER_FP32_PARAMS
from vidax.models.ltx.transformer import LTXVideoTransformer3DModel
from vidax.registry import registry
from vidax.weights.loader import DtypePolicy

CONFIGS = sorted(glob.glob(os.path.join(REFERENCE_CONFIGS, "Lightricks__LTX-Video*", "transformer", "config.json")))


def _id(path: str) -> str:
    return os.path.relpath(path, REFERENCE_CONFIGS)


def test_all_ltx_video_configs_found():
    assert sorted(_id(p).split(os.sep)[0] for p in CONFIGS) == [
        "Lightricks__LTX-Video",
        "Lightricks__LTX-Video-0.9.1",
        "Lightricks__LTX-Video-0.9.5",
        "Lightricks__LTX-Video-0.9.7-dev",
    ]


@pytest.mark.parametrize("path", CONFIGS, ids=[_id(p) for p in CONFIGS])
def test_param_count_matches_reference(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    with open(path) as f:
        raw = json.load(f)
    cfg = LTXTransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: LTXVideoTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    with torch.device("meta"):
        ref = diffusers.LTXVideoTransformer3DModel.from_config(raw)
    theirs = sum(p.numel() for p in ref.parameters())
    print(f"{_id(path)}: {ours / 1e9:.3f} B parameters")
    assert ours == theirs
    rules = registry().component("LTXVideoTransformer3DModel").rules(cfg)
    ours_keys = set()
    for p, _ in flat:
        if p[0] == "transformer_blocks":
            ours_keys |= {rules.join(p, i) for i in range(cfg.num_layers)}
        else:
            ours_keys.add(rules.join(p, None))
    assert ours_keys == set(ref.state_dict())
    policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
    kept = {".".join(map(str, p)) for p, _ in flat if policy.dtype_for(p) == "float32"}
    assert kept == {
        "scale_shift_table",
        "transformer_blocks.scale_shift_table",
        "time_embed.emb.timestep_embedder.linear_1.kernel",
        "time_embed.emb.timestep_embedder.linear_1.bias",
        "time_embed.emb.timestep_embedder.linear_2.kernel",
        "time_embed.emb.timestep_embedder.linear_2.bias",
    }


def test_known_sizes():
    sizes = {}
    for path in CONFIGS:
        cfg = LTXTransformerConfig.from_json_file(path)
        model = nnx.eval_shape(lambda: LTXVideoTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
        n = sum(math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))
        sizes[_id(path).split(os.sep)[0]] = round(n / 1e9, 2)
    assert sizes == {
        "Lightricks__LTX-Video": 1.92,
        "Lightricks__LTX-Video-0.9.1": 1.92,
        "Lightricks__LTX-Video-0.9.5": 1.92,
        "Lightricks__LTX-Video-0.9.7-dev": 13.04,
    }, sizes


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("qk_norm", "rms_norm", "qk_norm='rms_norm'"),
        ("norm_elementwise_affine", "yes", "norm_elementwise_affine=.yes."),
        ("activation_fn", "relu", "activation_fn='relu'"),  # not a diffusers FeedForward activation
        ("cross_attention_dim", 4096, "cross_attention_dim=4096"),
        ("use_magic", 1, "unknown setting use_magic=1"),
    ],
)
def test_unimplemented_settings_are_refused(key, value, match):
    with open(CONFIGS[0]) as f:
        raw = json.load(f)
    with pytest.raises(ConfigError, match=match):
        LTXTransformerConfig.from_config_dict(
            {**raw, "_class_name": None, key: value}
        )  # naming no diffusers class: strict (a key diffusers ignores is ignored: test_checkpoint_errors.py)
