"""Every LTX-2 transformer and connectors config in ``reference_configs/`` (LTX-2, LTX-2.3,
LTX-2.5) parses, builds abstractly (``jax.eval_shape``), and has diffusers 0.42.1's parameter
count, with the key rules mapping every reference key onto one parameter (the loader's strict
1:1 check). The reference is built without memory (accelerate's ``init_empty_weights``).
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
from vidax.models.ltx2.config import LTX2ConnectorsConfig, LTX2TransformerConfig
from vidax.models.ltx2.connectors import LTX2TextConnectors
from vidax.models.ltx2.convert import TRANSFORMER_FP32_PARAMS
from vidax.models.ltx2.transformer import LTX2VideoTransformer3DModel
from vidax.registry import registry
from vidax.weights.loader import DtypePolicy

REPOS = ("Lightricks__LTX-2", "diffusers__LTX-2.3-Diffusers", "Lightricks__LTX-2.5-Diffusers")
#: (component folder, vidax config, vidax model, registry class, stacked module paths)
COMPONENTS = {
    "transformer": (
        LTX2TransformerConfig,
        LTX2VideoTransformer3DModel,
        "LTX2VideoTransformer3DModel",
        ("transformer_blocks",),
    ),
    "connectors": (
        LTX2ConnectorsConfig,
        LTX2TextConnectors,
        "LTX2TextConnectors",
        ("video_connector/transformer_blocks", "audio_connector/transformer_blocks"),
    ),
}
CASES = [(repo, comp) for repo in REPOS for comp in COMPONENTS]


def test_every_ltx2_config_is_covered():
    found = {
        os.path.relpath(p, REFERENCE_CONFIGS).split(os.sep)[0]
        for p in glob.glob(os.path.join(REFERENCE_CONFIGS, "*", "transformer", "config.json"))
        if json.load(open(p)).get("_class_name") == "LTX2VideoTransformer3DModel"
    }
    assert found == set(REPOS)


def _reference(comp, raw):
    accelerate = pytest.importorskip("accelerate")
    diffusers = pytest.importorskip("diffusers")
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors as RefConnectors

    cls = diffusers.LTX2VideoTransformer3DModel if comp == "transformer" else RefConnectors
    with accelerate.init_empty_weights():
        return cls.from_config(raw)


@pytest.mark.parametrize("repo, comp", CASES, ids=[f"{r}/{c}" for r, c in CASES])
def test_param_count_and_keys_match_reference(repo, comp):
    path = os.path.join(REFERENCE_CONFIGS, repo, comp, "config.json")
    with open(path) as f:
        raw = json.load(f)
    config_cls, model_cls, name, stacks = COMPONENTS[comp]
    cfg = config_cls.from_json_file(path)
    model = nnx.eval_shape(lambda: model_cls(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    ref = _reference(comp, raw)
    theirs = sum(p.numel() for p in ref.parameters())
    print(f"{repo}/{comp}: {ours / 1e9:.3f} B parameters")
    assert ours == theirs
    rules = registry().component(name).rules(cfg)
    keys = set()
    for p, v in flat:
        stacked = next((s for s in stacks if "/".join(map(str, p)).startswith(s + "/")), None)
        n = v.get_value().shape[0] if stacked else None
        keys |= {rules.join(p, i) for i in range(n)} if stacked else {rules.join(p, None)}
    assert keys == set(ref.state_dict())
    if comp == "transformer":  # float32 under bf16: the timestep MLPs and the modulation tables, nothing else
        policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
        kept = {".".join(map(str, p)) for p, _ in flat if policy.dtype_for(p) == "float32"}
        assert kept and all("timestep_embedder" in k or k.endswith("scale_shift_table") for k in kept)
        assert sum("scale_shift_table" in k for k in kept) == sum(
            "scale_shift_table" in k for k in ref.state_dict() if k.startswith("transformer_blocks.0.") or "." not in k
        )
