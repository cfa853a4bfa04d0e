"""Released T5 / UMT5 text-encoder configs: parse, build abstractly, match transformers 1:1.

Every ``text_encoder/config.json`` under reference_configs/ whose model_type is t5
or umt5 (Wan's umt5-xxl, CogVideoX's and LTX-Video's t5-v1_1-xxl) is parsed with
T5EncoderConfig and built with ``nnx.eval_shape``. Its parameter count must equal transformers'
(built on the meta device; the tied ``shared`` / ``encoder.embed_tokens`` counted once), and the
key rules must produce exactly the reference's state-dict keys and shapes.
"""

from __future__ import annotations

import glob
import json
import math
import os

import pytest

from tests.parity.helpers import source_key_shapes
from tests.paths import REFERENCE_CONFIGS
from vidax.encoders.t5 import T5Encoder, T5EncoderConfig, t5_key_rules
from vidax.weights.loader import abstract_params

ROOT = REFERENCE_CONFIGS


def _configs() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "*", "text_encoder", "config.json"))):
        with open(path) as f:
            if json.load(f).get("model_type") in ("t5", "umt5"):
                out.append(path)
    return out


CONFIGS = _configs()


def test_reference_configs_present():
    kinds = set()
    for path in CONFIGS:
        with open(path) as f:
            kinds.add(json.load(f)["model_type"])
    assert kinds == {"t5", "umt5"}, f"expected Wan (umt5) and CogVideoX (t5) configs, got {CONFIGS}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.split(os.sep)[-3])
def test_full_size_matches_transformers(path):
    import torch
    from transformers import AutoConfig, T5EncoderModel, UMT5EncoderModel

    cfg = T5EncoderConfig.from_json_file(path)
    with open(path) as f:
        raw = json.load(f)
    ref_cfg = AutoConfig.for_model(**{k: v for k, v in raw.items() if not k.startswith("_")})
    model_cls = UMT5EncoderModel if cfg.model_type == "umt5" else T5EncoderModel
    with torch.device("meta"):
        ref = model_cls(ref_cfg)
    ref_count = sum(p.numel() for p in ref.parameters())  # parameters() yields tied ones once
    ref_shapes = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    # tied to shared.weight; save_pretrained does not write it
    ref_shapes.pop("encoder.embed_tokens.weight")

    _, abstract = abstract_params(lambda: T5Encoder(cfg))
    count = sum(math.prod(v.get_value().shape) for v in abstract.values())
    assert count == ref_count, f"{path}: vidax {count:,} params, transformers {ref_count:,}"

    ours = source_key_shapes(abstract, t5_key_rules(cfg))
    assert ours == ref_shapes
    if cfg.model_type == "umt5":
        assert 5.6e9 < count < 5.8e9  # umt5-xxl encoder, ~5.7B
