"""Every released CogVideoX transformer config parses, builds abstractly, and has diffusers' size.

Covers ``THUDM__CogVideoX*/transformer/config.json`` in ``reference_configs/``
(2B, 5B, 5B-I2V, 1.5-5B, 1.5-5B-I2V) and the scheduler configs. The reference count comes from
building ``diffusers.CogVideoXTransformer3DModel`` on the meta device: its ``state_dict`` (the
checkpoint: parameters plus the 5B-I2V learned position table, a persistent buffer) must map 1:1
onto vidax's parameters.
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
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.convert import TRANSFORMER_FP32_PARAMS
from vidax.models.cogvideox.transformer import CogVideoXTransformer3DModel
from vidax.registry import registry
from vidax.schedulers import CogVideoXDDIMScheduler, scheduler_from_config
from vidax.weights.loader import DtypePolicy

CONFIGS = sorted(glob.glob(os.path.join(REFERENCE_CONFIGS, "THUDM__CogVideoX*", "transformer", "config.json")))
SCHEDULERS = sorted(
    glob.glob(os.path.join(REFERENCE_CONFIGS, "THUDM__CogVideoX*", "scheduler", "scheduler_config.json"))
)


def _id(path: str) -> str:
    return os.path.relpath(path, REFERENCE_CONFIGS)


def test_all_cogvideox_configs_found():
    assert len(CONFIGS) == 5, CONFIGS
    assert len(SCHEDULERS) == 5, SCHEDULERS


def _reference(cfg: dict):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    with torch.device("meta"):
        ref = diffusers.CogVideoXTransformer3DModel.from_config(cfg)
    return {k: tuple(v.shape) for k, v in ref.state_dict().items()}, sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("path", CONFIGS, ids=[_id(p) for p in CONFIGS])
def test_param_count_matches_reference(path):
    with open(path) as f:
        raw = json.load(f)
    cfg = CogVideoXTransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: CogVideoXTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    ref_shapes, ref_params = _reference(raw)
    theirs = sum(math.prod(s) for s in ref_shapes.values())
    print(f"{_id(path)}: {ours / 1e9:.3f} B (parameters {ref_params / 1e9:.3f} B + buffers)")
    assert ours == theirs
    # The key rules map every reference tensor onto exactly one of our parameters.
    rules = registry().component("CogVideoXTransformer3DModel").rules(cfg)
    ours_keys = set()
    for p, v in flat:
        if p[0] == "transformer_blocks":
            ours_keys |= {rules.join(p, i) for i in range(cfg.num_layers)}
        else:
            ours_keys.add(rules.join(p, None))
    assert ours_keys == set(ref_shapes)
    # fp32 under a bf16 policy: timestep MLPs and LayerNorm weights, not the big matrices.
    policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
    kept = {".".join(map(str, p)) for p, _ in flat if policy.dtype_for(p) == "float32"}
    assert "time_embedding.linear_1.kernel" in kept and "transformer_blocks.norm1.norm.scale" in kept
    assert "transformer_blocks.attn1.norm_q.bias" in kept and "norm_final.scale" in kept
    assert "transformer_blocks.attn1.to_q.kernel" not in kept and "transformer_blocks.norm1.linear.kernel" not in kept


def test_known_sizes():
    sizes = {}
    for path in CONFIGS:
        cfg = CogVideoXTransformerConfig.from_json_file(path)
        model = nnx.eval_shape(lambda: CogVideoXTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
        sizes[_id(path).split("/")[0]] = sum(
            math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))
        )
    assert round(sizes["THUDM__CogVideoX-2b"] / 1e9, 1) == 1.7
    assert round(sizes["THUDM__CogVideoX-5b"] / 1e9, 1) == 5.6


@pytest.mark.parametrize("path", SCHEDULERS, ids=[_id(p) for p in SCHEDULERS])
def test_scheduler_configs_parse(path):
    with open(path) as f:
        sched = scheduler_from_config(json.load(f), source=path)
    assert isinstance(sched, CogVideoXDDIMScheduler)
    state = sched.set_timesteps(50)
    assert int(state.timesteps[0]) == 999 and int(state.timesteps[-1]) == 19


BASE = {"_class_name": "CogVideoXTransformer3DModel", "num_attention_heads": 2, "attention_head_dim": 64}


@pytest.mark.parametrize(
    "override,match",
    [
        ({"use_learned_positional_embeddings": True}, "use_learned_positional_embeddings"),
        ({"use_rotary_positional_embeddings": True, "attention_head_dim": 24}, "attention_head_dim"),
        ({"ofs_embed_dim": 256}, "ofs_embed_dim"),
        ({"patch_size_t": 2}, "patch_size_t"),
        ({"activation_fn": "relu"}, "activation_fn"),  # not a diffusers FeedForward activation
        ({"freq_shift": 64}, "freq_shift"),  # half of D = 128: the reference's sinusoid is NaN
        (
            {"_class_name": None, "use_rotary_positional_embeddings": True, "window": 4},
            "unknown setting window",
        ),  # naming no diffusers class: strict (a key diffusers ignores is ignored: test_checkpoint_errors.py)
        ({"num_layers": 0}, "num_layers"),
    ],
)
def test_config_refuses(override, match):
    with pytest.raises(ConfigError, match=match):
        CogVideoXTransformerConfig.from_config_dict({**BASE, **override})


def test_config_defaults_are_diffusers():
    diffusers = pytest.importorskip("diffusers")
    import inspect

    sig = inspect.signature(diffusers.CogVideoXTransformer3DModel.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    ours = CogVideoXTransformerConfig().to_dict()
    cls = CogVideoXTransformerConfig
    assert set(ours) | cls.IGNORED | set(cls.NEUTRAL) == set(defaults)
    for key, value in ours.items():
        assert value == defaults[key], key
    for key, values in cls.NEUTRAL.items():
        assert defaults[key] in values, key
