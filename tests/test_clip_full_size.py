"""Released CLIP image-encoder configs: parse, build abstractly, match transformers 1:1.

Every ``image_encoder/config.json`` under reference_configs/ whose model is a CLIP
vision tower (the Wan2.1 I2V 14B checkpoints' ViT-H/14) is parsed with CLIPVisionConfig and built
with ``nnx.eval_shape``. Its parameter count must equal transformers' ``CLIPVisionModel`` (built
on the meta device), and the key rules must give exactly the reference's state-dict keys and
shapes, in both the transformers 5 layout and the ``vision_model.``-prefixed one of the files.
"""

from __future__ import annotations

import glob
import json
import math
import os

import pytest

from tests.paths import REFERENCE_CONFIGS
from vidax.encoders.clip import CLIPVisionConfig, CLIPVisionEncoder, clip_vision_key_rules
from vidax.weights.loader import _target_shape_of, abstract_params, path_str

ROOT = REFERENCE_CONFIGS


def _configs() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "*", "image_encoder", "config.json"))):
        with open(path) as f:
            if json.load(f).get("model_type") in ("clip", "clip_vision_model"):
                out.append(path)
    return out


CONFIGS = _configs()


def test_reference_configs_present():
    assert len(CONFIGS) >= 2, CONFIGS  # Wan2.1 I2V 480P and 720P


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.split(os.sep)[-3])
def test_full_size_matches_transformers(path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    cfg = CLIPVisionConfig.from_json_file(path)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.patch_size, cfg.hidden_act) == (1280, 32, 14, "gelu")
    with open(path) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with torch.device("meta"):
        ref = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**raw))
    ref_count = sum(p.numel() for p in ref.parameters())
    ref_shapes = {k: tuple(v.shape) for k, v in ref.state_dict().items()}

    _, abstract = abstract_params(lambda: CLIPVisionEncoder(cfg))
    ours = {path_str(p): v.get_value() for p, v in abstract.items()}
    count = sum(math.prod(v.shape) for v in ours.values())
    assert count == ref_count, (count, ref_count)
    assert 630e6 < count < 633e6  # ViT-H/14 vision tower, ~632M

    # The rules map every reference key (both layouts) to a parameter of the right shape.
    for prefix in ("", "vision_model."):
        keys = [prefix + k for k in ref_shapes]
        rules = clip_vision_key_rules(cfg, keys)
        covered = {}
        for key in keys:
            target, layer = rules.split(key)
            if target[-1] == "weight":
                target = next(
                    target[:-1] + (leaf,) for leaf in ("kernel", "scale", "embedding", "weight")
                    if path_str(target[:-1] + (leaf,)) in ours
                )  # fmt: skip
            name = path_str(target)
            assert name in ours, key
            want = ours[name].shape[1:] if layer is not None else ours[name].shape
            assert _target_shape_of(ref_shapes[key[len(prefix) :]], target) == tuple(want), key
            covered.setdefault(name, set()).add(layer)
            assert rules.join(target, layer) == key
        assert set(covered) == set(ours)
        assert all(
            layers == ({None} if not name.startswith("encoder/") else set(range(32)))
            for name, layers in covered.items()
        )
