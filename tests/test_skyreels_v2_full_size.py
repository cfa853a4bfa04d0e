"""Every released SkyReels-V2 transformer config parses, builds abstractly, and has diffusers'
parameter count (``Skywork__SkyReels-V2-*`` in ``reference_configs/``: DF-1.3B-540P with the fps
conditioning, DF-14B-540P, DF-14B-720P). The reference count comes from building
``diffusers.SkyReelsV2Transformer3DModel`` on the meta device (no memory)."""

from __future__ import annotations

import glob
import json
import math
import os

import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.models.skyreels_v2.config import SkyReelsV2TransformerConfig
from vidax.models.skyreels_v2.convert import transformer_key_rules
from vidax.models.skyreels_v2.transformer import SkyReelsV2Transformer3DModel

CONFIGS = sorted(glob.glob(os.path.join(REFERENCE_CONFIGS, "Skywork__SkyReels-V2-*", "transformer", "config.json")))
#: Parameters (billions, 3 decimals) of each released transformer.
SIZES = {"DF-1.3B-540P": 1.436, "DF-14B-540P": 14.288, "DF-14B-720P": 14.288}


def _id(path: str) -> str:
    return os.path.basename(os.path.dirname(os.path.dirname(path))).split("SkyReels-V2-")[1].removesuffix("-Diffusers")


def test_all_configs_found():
    assert sorted(_id(p) for p in CONFIGS) == sorted(SIZES)


@pytest.mark.parametrize("path", CONFIGS, ids=[_id(p) for p in CONFIGS])
def test_param_count_matches_reference(path):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    with open(path) as f:
        raw = json.load(f)
    cfg = SkyReelsV2TransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: SkyReelsV2Transformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    with torch.device("meta"):
        ref = diffusers.SkyReelsV2Transformer3DModel.from_config(raw)
    theirs = sum(p.numel() for p in ref.parameters())
    print(f"{_id(path)}: {ours / 1e9:.3f} B parameters")
    assert ours == theirs and round(ours / 1e9, 3) == SIZES[_id(path)]
    # The key rules map every reference key onto exactly one of our parameters.
    rules = transformer_key_rules(cfg)
    keys = set()
    for p, _ in flat:
        keys |= {rules.join(p, i) for i in range(cfg.num_layers)} if p[0] == "blocks" else {rules.join(p, None)}
    assert keys == set(ref.state_dict())
