"""Released HunyuanVideo configs of the CLIP text tower and of LLaVA's vision tower + projector:
parse, build abstractly (``nnx.eval_shape``), match transformers 5.24 1:1 (meta device).

* every ``text_encoder_2/config.json`` under reference_configs/ that is a ``CLIPTextModel``
  (HunyuanVideo, -I2V, -I2V-33ch: openai/clip-vit-large-patch14's text tower);
* the I2V checkpoints' ``text_encoder`` (``LlavaForConditionalGeneration``): reference_configs/
  holds its ``text_config`` numbers only (``arch_essentials.json``; the hub config.json was not
  seen), so the LlavaConfig is built by transformers from them, its vision tower and projector
  settings being ``LlavaConfig``'s own defaults (CLIP ViT-L/14 at 336 px, layer -2, "default"),
  those of xtuner/llava-llama-3-8b-v1_1-transformers; its 576 image tokens are checked against
  the pipeline's ``image_emb_len`` recorded there.
"""

from __future__ import annotations

import glob
import json
import math
import os

import pytest

from tests.paths import REFERENCE_CONFIGS
from vidax.encoders.clip import CLIPTextConfig, CLIPTextEncoder, clip_text_key_rules
from vidax.encoders.llava import LlavaVisionConfig, LlavaVisionEncoder, llava_vision_key_rules
from vidax.weights.loader import _target_shape_of, abstract_params, path_str

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _paths(pattern: str, pred) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(REFERENCE_CONFIGS, "*", pattern))):
        with open(path) as f:
            if pred(json.load(f)):
                out.append(path)
    return out


CLIP_TEXT = _paths(os.path.join("text_encoder_2", "config.json"), lambda c: c.get("model_type") == "clip_text_model")
LLAVA = _paths(os.path.join("text_encoder", "arch_essentials.json"),
               lambda c: c.get("hf_class_in_model_index") == "LlavaForConditionalGeneration")  # fmt: skip


def test_reference_configs_present():
    assert len(CLIP_TEXT) >= 3 and len(LLAVA) >= 2, (CLIP_TEXT, LLAVA)


def _match(make, ref, rules, stacked_layers: int) -> int:
    """Every reference key the rules do not declare unused maps to a parameter of the same shape, every
    parameter is filled, and the counts agree. Returns the count."""
    _, abstract = abstract_params(make)
    ours = {path_str(p): tuple(v.get_value().shape) for p, v in abstract.items()}
    covered: dict[str, set] = {}
    n_ref = 0
    for key, tensor in ref.state_dict().items():
        if rules.is_unused(key):
            continue
        n_ref += tensor.numel()
        target, layer = rules.split(key)
        if target[-1] == "weight":
            target = next(target[:-1] + (leaf,) for leaf in ("kernel", "scale", "embedding", "weight")
                          if path_str(target[:-1] + (leaf,)) in ours)  # fmt: skip
        name = path_str(target)
        want = ours[name][1:] if layer is not None else ours[name]
        assert _target_shape_of(tuple(tensor.shape), target) == want, key
        covered.setdefault(name, set()).add(layer)
    assert set(covered) == set(ours)
    assert all(layers in ({None}, set(range(stacked_layers))) for layers in covered.values())
    count = sum(math.prod(s) for s in ours.values())
    assert count == n_ref, (count, n_ref)
    return count


@pytest.mark.parametrize("path", CLIP_TEXT, ids=lambda p: p.split(os.sep)[-3])
def test_clip_text_full_size(path):
    cfg = CLIPTextConfig.from_json_file(path)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.eos_token_id, cfg.legacy_eos_pooling) == (768, 12, 2, True)
    with open(path) as f:
        raw = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with torch.device("meta"):
        ref = transformers.CLIPTextModel(transformers.CLIPTextConfig(**raw))
    count = _match(lambda: CLIPTextEncoder(cfg), ref, clip_text_key_rules(cfg, ()), cfg.num_hidden_layers)
    assert count == sum(p.numel() for p in ref.parameters())
    assert 123.0e6 < count < 123.1e6  # clip-vit-large-patch14 text tower: 123,060,480


@pytest.mark.parametrize("path", LLAVA, ids=lambda p: p.split(os.sep)[-3])
def test_llava_vision_full_size(path):
    with open(path) as f:
        essentials = json.load(f)
    text = transformers.LlamaConfig(**essentials["text_config"])
    ref_cfg = transformers.LlavaConfig(text_config=text)
    cfg = LlavaVisionConfig.from_config_dict(json.loads(json.dumps(ref_cfg.to_dict())), source=path)
    assert cfg.num_image_tokens == essentials["image_emb_len"] == 576
    assert (cfg.text_hidden_size, cfg.vision_feature_layer, cfg.vision_config.image_size) == (4096, -2, 336)
    with torch.device("meta"):
        ref = transformers.LlavaForConditionalGeneration(ref_cfg)
    rules = llava_vision_key_rules(cfg, ref.state_dict().keys())  # in-memory keys: model.vision_tower.*
    count = _match(lambda: LlavaVisionEncoder(cfg), ref, rules, cfg.vision_config.num_hidden_layers)
    tower = sum(p.numel() for p in ref.model.vision_tower.parameters())
    projector = sum(p.numel() for p in ref.model.multi_modal_projector.parameters())
    assert count == tower + projector
    assert 303.5e6 < tower < 303.6e6 and projector == 1024 * 4096 + 4096 + 4096 * 4096 + 4096
