"""Released decoder text-encoder configs: parse, build abstractly, match transformers 1:1.

* HunyuanVideo's ``text_encoder/config.json`` (``LlamaModel``, llava-llama-3-8b's language model).
* HunyuanVideo-I2V / -I2V-33ch: ``LlavaForConditionalGeneration``; only ``arch_essentials.json``
  is known (its ``text_config``), wrapped here as a ``model_type: llava`` config.
* Cosmos-Predict2.5 2B / 14B: ``Qwen2_5_VLForConditionalGeneration`` (Cosmos-Reason1-7B); only
  ``arch_essentials.json`` is known, written here as the flat transformers-4 config.json form
  (``rope_scaling: {type: mrope, mrope_section}``).
* HunyuanVideo 1.5 (480p T2V, 720p I2V distilled): Qwen2.5-VL-7B-Instruct's text tower
  (``Qwen2_5_VLTextModel``); only ``arch_essentials.json`` is known, written as Cosmos's.
* LTX-2 / LTX-2.3: ``Gemma3ForConditionalGeneration`` (gemma-3-12b); only ``arch_essentials.json``
  is known, written here as a ``model_type: gemma3`` config.json with the older text keys
  (``rope_theta`` / ``rope_local_base_freq`` / ``rope_scaling: {rope_type: linear, factor}``) and
  gemma-3-12b's SigLIP vision config (only the unused-prefix check sees it).

Counting: vidax builds the language model alone; transformers builds the whole checkpoint class on
the meta device and the count is over its language-model module (``LlamaModel`` itself, or
``model.language_model`` of the LLaVA / Qwen2.5-VL classes; no tied parameters there). The
other top-level modules of the reference (vision tower, projector, LM head) must be exactly the
ones the key rules declare unused, and the language model's state-dict keys and shapes must be
exactly the ones vidax's key rules produce.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from tests.parity.helpers import source_key_shapes
from tests.paths import REFERENCE_CONFIGS
from vidax.encoders.decoder_lm import DECODER_LM_PARAM_AXES, DecoderLM
from vidax.encoders.decoder_lm_config import AttentionKind, LlamaTextConfig, Qwen25VLTextConfig
from vidax.encoders.gemma3 import Gemma3TextConfig
from vidax.parallel.placement import param_axes
from vidax.weights.loader import KeyRules, abstract_params


def _read(*parts):
    with open(os.path.join(REFERENCE_CONFIGS, *parts)) as f:
        return json.load(f)


def _hunyuan_t2v():
    return _read("hunyuanvideo-community__HunyuanVideo", "text_encoder", "config.json")


def _hunyuan_i2v(repo):
    text = _read(repo, "text_encoder", "arch_essentials.json")["text_config"]
    return {"model_type": "llava", "text_config": {"model_type": "llama", **text}}


def _cosmos(repo):
    e = _read(repo, "text_encoder", "arch_essentials.json")
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "rms_norm_eps",
        "rope_theta",
        "vocab_size",
    )
    return {
        "model_type": "qwen2_5_vl",
        **{k: e[k] for k in keys},
        "rope_scaling": {"type": "mrope", "mrope_section": e["mrope_section"]},
    }


def _ltx2(repo):
    e = _read(repo, "text_encoder", "arch_essentials.json")["text_config"]
    (factor, local_factor), (theta, local_theta) = e["rope_scaling_factor_global_local"], e["rope_theta_global_local"]
    assert local_factor == 1.0  # the sliding layers' RoPE is unscaled
    keys = (
        "head_dim",
        "hidden_size",
        "intermediate_size",
        "max_position_embeddings",
        "num_attention_heads",
        "num_hidden_layers",
        "num_key_value_heads",
        "rms_norm_eps",
        "sliding_window",
        "vocab_size",
    )
    text = {
        "model_type": "gemma3_text",
        **{k: e[k] for k in keys},
        "rope_theta": theta,
        "rope_local_base_freq": local_theta,
        "rope_scaling": {"rope_type": "linear", "factor": factor},
    }
    vision = dict(
        model_type="siglip_vision_model",
        hidden_size=1152,
        image_size=896,
        intermediate_size=4304,
        num_attention_heads=16,
        num_hidden_layers=27,
        patch_size=14,
        vision_use_head=False,
    )
    return {"model_type": "gemma3", "text_config": text, "vision_config": vision, "mm_tokens_per_image": 256}


CASES = {
    "HunyuanVideo": (LlamaTextConfig, _hunyuan_t2v),
    "HunyuanVideo-I2V": (LlamaTextConfig, lambda: _hunyuan_i2v("hunyuanvideo-community__HunyuanVideo-I2V")),
    "HunyuanVideo-I2V-33ch": (LlamaTextConfig, lambda: _hunyuan_i2v("hunyuanvideo-community__HunyuanVideo-I2V-33ch")),
    "Cosmos-Predict2.5-2B": (Qwen25VLTextConfig, lambda: _cosmos("nvidia__Cosmos-Predict2.5-2B")),
    "Cosmos-Predict2.5-14B": (Qwen25VLTextConfig, lambda: _cosmos("nvidia__Cosmos-Predict2.5-14B")),
    # HunyuanVideo 1.5 (Qwen2.5-VL-7B-Instruct's text tower, saved alone as Qwen2_5_VLTextModel)
    **{
        f"HunyuanVideo-1.5-{v}": (
            Qwen25VLTextConfig,
            lambda v=v: _cosmos(f"hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-{v}"),
        )
        for v in ("480p_t2v", "720p_i2v_distilled")
    },
    "LTX-2": (Gemma3TextConfig, lambda: _ltx2("Lightricks__LTX-2")),
    "LTX-2.3": (Gemma3TextConfig, lambda: _ltx2("diffusers__LTX-2.3-Diffusers")),
}


def _reference(raw):
    """(language-model torch module, its in-memory key prefix in the whole model, whole model)."""
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        LlamaConfig,
        LlamaModel,
        LlavaConfig,
        LlavaForConditionalGeneration,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    clean = {k: v for k, v in raw.items() if not k.startswith("_")}
    with torch.device("meta"):
        if raw["model_type"] == "llama":
            model = LlamaModel(LlamaConfig(**clean))
            return model, "", model
        if raw["model_type"] == "llava":
            model = LlavaForConditionalGeneration(LlavaConfig(**clean))
        elif raw["model_type"] == "gemma3":
            model = Gemma3ForConditionalGeneration(Gemma3Config(**clean))
        else:
            model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(**clean))
    return model.model.language_model, "model.language_model.", model


@pytest.mark.parametrize("name", list(CASES))
def test_full_size_matches_transformers(name):
    config_cls, make = CASES[name]
    raw = make()
    cfg = config_cls.from_config_dict(raw, source=name)
    lm, prefix, whole = _reference(raw)
    ref_shapes = {k: tuple(v.shape) for k, v in lm.state_dict().items()}
    ref_count = sum(p.numel() for p in lm.parameters())

    _, abstract = abstract_params(lambda: DecoderLM(cfg))
    count = sum(math.prod(v.get_value().shape) for v in abstract.values())
    assert count == ref_count, f"{name}: vidax {count:,} params, transformers {ref_count:,}"

    ours = source_key_shapes(abstract, KeyRules(stacked=("layers",)))
    assert ours == ref_shapes

    # Everything else in the reference checkpoint class is declared unused for that layout.
    others = {k for k in whole.state_dict() if not k.startswith(prefix)} if prefix else set()
    unused = type(cfg).LAYOUTS[prefix]
    assert all(any(k.startswith(u) for u in unused) for k in others), sorted(others)[:5]
    assert all(any(k.startswith(u) for k in others) for u in unused), unused

    # Tensor parallel: every matrix (and the q/k/v biases) has a rule of its rank whose split axis
    # (heads / mlp / vocab) divides by 8 at full size; only the norm scales are replicated (neither
    # model has the row-parallel o_proj / down_proj biases, which would be too).
    for p, var in abstract.items():
        shape = var.get_value().shape
        axes = param_axes(p, len(shape), DECODER_LM_PARAM_AXES)
        if p[-1] == "scale":
            assert axes is None, p
            continue
        assert axes is not None, p
        split = [d for d, a in zip(shape, axes) if a in ("heads", "mlp", "vocab")]
        assert len(split) == 1 and split[0] % 8 == 0, (p, shape, axes)

    if config_cls is LlamaTextConfig:
        assert (cfg.num_key_value_heads, cfg.head_dim, cfg.rope_theta) == (8, 128, 500000.0)
        assert 7.4e9 < count < 7.6e9  # llava-llama-3-8b's language model without lm_head
    elif config_cls is Gemma3TextConfig:
        # gemma-3-12b: 8 global layers (every 6th) with RoPE 1e6 scaled 8x linearly, 40 sliding
        # ones (window 1024, RoPE 1e4); the same kinds as the transformers model's layers.
        assert cfg.layer_types == tuple(lm.config.layer_types) and cfg.layer_types.count("full_attention") == 8
        assert cfg.attention_kinds == (AttentionKind(1e4, 1.0, 1024), AttentionKind(1e6, 8.0))
        assert (cfg.num_key_value_heads, cfg.head_dim, cfg.attention_scale) == (8, 256, 256**-0.5)
        assert 11.7e9 < count < 11.8e9  # gemma-3-12b's language model without lm_head (tied) and vision
    else:
        assert (cfg.num_key_value_heads, cfg.head_dim, cfg.mrope_section) == (4, 128, (16, 24, 24))
        assert 7.0e9 < count < 7.2e9  # Qwen2.5-VL-7B's language model without lm_head


def test_ltx25_gemma4_full_size_matches_transformers():
    """LTX-2.5's ``gemma4_unified`` text encoder: only ``hidden_size`` 3840 and 48 layers are known
    (``arch_essentials.json``, inferred from the connectors' ``caption_channels`` /
    ``text_proj_in_factor``); the rest is ``Gemma4UnifiedTextConfig``'s defaults, on both sides.
    Counted over the language model's state dict (its ``layer_scalar`` buffers are stored tensors,
    loaded as parameters by vidax)."""
    import torch
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

    from vidax.encoders.gemma4 import GEMMA4_PARAM_AXES, Gemma4TextConfig, Gemma4TextEncoder, gemma4_key_rules

    repo = "Lightricks__LTX-2.5-Diffusers"
    e = _read(repo, "text_encoder", "arch_essentials.json")
    raw = {"model_type": e["hf_model_type"], "text_config": dict(e["text_config"])}
    cfg = Gemma4TextConfig.from_config_dict(raw, source=repo)
    connectors = _read(repo, "connectors", "config.json")
    assert (connectors["caption_channels"], connectors["text_proj_in_factor"]) == (
        cfg.hidden_size,
        cfg.num_hidden_layers + 1,
    )
    with torch.device("meta"):
        whole = Gemma4UnifiedForConditionalGeneration(Gemma4UnifiedConfig(text_config=raw["text_config"]))
    lm = whole.model.language_model
    ref_shapes = {k: tuple(v.shape) for k, v in lm.state_dict().items()}
    ref_count = sum(math.prod(s) for s in ref_shapes.values())
    _, abstract = abstract_params(lambda: Gemma4TextEncoder(cfg))
    count = sum(math.prod(v.get_value().shape) for v in abstract.values())
    assert count == ref_count, f"vidax {count:,} params, transformers {ref_count:,}"
    assert source_key_shapes(abstract, gemma4_key_rules(cfg, ["embed_tokens.weight"])) == ref_shapes
    assert cfg.layer_types == tuple(lm.config.layer_types) and cfg.layer_types.count("full_attention") == 8
    assert set(cfg.layer_head_dims) == {256, 512}
    others = {k for k in whole.state_dict() if not k.startswith("model.language_model.")}
    assert all(any(k.startswith(u) for u in Gemma4TextConfig.LAYOUTS["model.language_model."]) for k in others), sorted(
        others
    )[:5]
    for p, var in abstract.items():  # every matrix has a tensor-parallel rule splitting by 8
        shape = var.get_value().shape
        axes = param_axes(p, len(shape), GEMMA4_PARAM_AXES)
        if p[-1] in ("scale", "layer_scalar"):
            assert axes is None, p
            continue
        assert axes is not None, p
        split = [d for d, a in zip(shape, axes) if a in ("heads", "mlp", "vocab")]
        assert len(split) == 1 and split[0] % 8 == 0, (p, shape, axes)
    assert 7.4e9 < count < 7.5e9, f"{count:,}"  # 7,424,687,920 (no lm_head: tied)
