"""A tiny diffusers ``Cosmos2_5_PredictBasePipeline`` with every parameter randomised, saved in
the diffusers layout for vidax, and the stand-ins the reference needs to run here.

Components (distinct sizes): a Qwen2.5-VL with a 3-layer text tower (D 40, 5 query heads, 1 K/V
head, MLP 44; a 1-block vision tower so the checkpoint is a full
``Qwen2_5_VLForConditionalGeneration``), a byte-level BPE tokenizer with the Qwen2.5-VL chat
template, the tiny Wan VAE of the Wan parity tests (z_dim 12, 8x spatial, 4x temporal), a
2-block Cosmos transformer (4 heads of 12, RoPE split (4, 4, 4), AdaLN-LoRA 10, mlp_ratio 2.5, text 3 x 40 = 120 ->
20) and the 2B checkpoint's scheduler config (UniPC, Karras flow sigmas).

What the reference needs that is not installed here, given in the test only:

* ``safety_checker``: the reference's ``__init__`` builds ``CosmosSafetyChecker()`` when given
  None, which raises without ``cosmos_guardrail``, and ``__call__`` refuses a None checker. The
  test passes :class:`NoSafetyChecker` (passes every prompt; not a ``CosmosSafetyChecker``, so
  the reference's video check is skipped).
* torchvision: the pipeline calls ``torchvision.transforms.functional.to_tensor`` (image2world)
  and the transformer ``transforms.functional.resize(NEAREST)`` (padding mask). :func:`torchvision_stand_ins`
  patches the two modules with the same operations (``to_tensor``: uint8 HWC -> float CHW / 255;
  tensor ``resize`` NEAREST: ``F.interpolate(mode="nearest")``, as torchvision's tensor path).
"""

from __future__ import annotations

import contextlib
import json
import os
import types

import numpy as np

from tests.parity.helpers import randomize_torch_module
from tests.parity.wan_reference import VAE

# The Qwen2.5-VL chat template (as in transformers' Qwen2-VL processor tests and the released
# Qwen2.5-VL-7B-Instruct tokenizer): list contents, an optional default system turn, vision ids.
QWEN_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
VOCAB = 400
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=40,
    intermediate_size=44,
    num_hidden_layers=3,
    num_attention_heads=5,
    num_key_value_heads=1,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "mrope_section": [1, 1, 2]},
)
VISION = dict(depth=1, hidden_size=16, intermediate_size=20, num_heads=2, out_hidden_size=40, fullatt_block_indexes=[0])
TRANSFORMER = dict(
    in_channels=VAE["z_dim"] + 1,
    out_channels=VAE["z_dim"],
    num_attention_heads=4,
    attention_head_dim=12,
    num_layers=2,
    mlp_ratio=2.5,
    text_embed_dim=20,
    adaln_lora_dim=10,
    max_size=(8, 16, 24),
    patch_size=(1, 2, 2),
    rope_scale=(1.0, 3.0, 3.0),
    concat_padding_mask=True,
    extra_pos_embed_type=None,
    use_crossattn_projection=True,
    crossattn_proj_in_channels=3 * 40,
    encoder_hidden_states_channels=20,
)


def build_qwen_tokenizer(path: str, corpus: list[str]) -> None:
    """A byte-level BPE tokenizer (Qwen2-style specials, pad ``<|endoftext|>``, right padding)
    trained here on ``corpus``, with the Qwen2.5-VL chat template in tokenizer_config.json."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIALS, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus + ["system user assistant"], trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>", padding_side="right"
    ).save_pretrained(path)
    file = os.path.join(path, "tokenizer_config.json")
    with open(file) as f:
        config = json.load(f)
    config["chat_template"] = QWEN_CHAT_TEMPLATE
    with open(file, "w") as f:
        json.dump(config, f)
    jinja = os.path.join(path, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)


def _no_safety_checker_class():
    import torch

    class NoSafetyChecker(torch.nn.Module):
        """Stands in for ``cosmos_guardrail.CosmosSafetyChecker`` in the reference (test only);
        parameter-free, so it reports the device the pipeline's ``device`` property asks of it."""

        device = torch.device("cpu")

        def check_text_safety(self, prompt: str) -> bool:
            return True

    return NoSafetyChecker


@contextlib.contextmanager
def torchvision_stand_ins():
    """The reference modules' torchvision calls, given the same operations (see the module doc)."""
    import pytest
    import torch
    from diffusers.models.transformers import transformer_cosmos
    from diffusers.pipelines.cosmos import pipeline_cosmos2_5_predict

    def to_tensor(pic):  # torchvision.transforms.functional.to_tensor of a PIL RGB / uint8 HWC image
        arr = np.array(pic, dtype=np.uint8, copy=True)
        return torch.from_numpy(arr).permute(2, 0, 1).contiguous().to(torch.float32).div(255)

    functional = types.SimpleNamespace(
        to_tensor=to_tensor,
        resize=lambda img, size, interpolation: torch.nn.functional.interpolate(img, size=size, mode=interpolation),
    )
    transforms = types.SimpleNamespace(
        functional=functional, InterpolationMode=types.SimpleNamespace(NEAREST="nearest")
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transformer_cosmos, "transforms", transforms, raising=False)
        mp.setattr(
            pipeline_cosmos2_5_predict, "torchvision", types.SimpleNamespace(transforms=transforms), raising=False
        )
        yield


def build_reference_cosmos_pipeline(path: str, corpus: list[str], seed: int = 0):
    """Save a tiny random Cosmos-Predict2.5 checkpoint to ``path``; return the torch pipeline
    (with :class:`NoSafetyChecker`). ``model_index.json`` is written as the diffusers converter
    writes it (``safety_checker`` left out: vidax reads none)."""
    import torch
    from diffusers import (
        AutoencoderKLWan,
        Cosmos2_5_PredictBasePipeline,
        CosmosTransformer3DModel,
        UniPCMultistepScheduler,
    )
    from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from tests.paths import REFERENCE_CONFIGS

    torch.manual_seed(seed)
    build_qwen_tokenizer(os.path.join(path, "tokenizer"), corpus)
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(path, "tokenizer"))
    ids = {
        k: tokenizer.convert_tokens_to_ids(t)
        for k, t in (
            ("image_token_id", "<|image_pad|>"),
            ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"),
        )
    }
    text_encoder = Qwen2_5_VLForConditionalGeneration(
        Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION, **ids)
    ).eval()
    transformer = CosmosTransformer3DModel(**TRANSFORMER).eval()
    vae = AutoencoderKLWan(**VAE).eval()
    randomize_torch_module(text_encoder, seed=seed)
    # Matrix gain 1 (not the default 0.5) so the text reaches the frames: prompts then change the
    # video by more than the 60 dB parity bar lets through (measured ~50 dB apart; 70 dB at 0.5).
    randomize_torch_module(transformer, seed=seed + 1, gain=1.0)
    # As the Wan parity tests: small biases keep decoded frames sensitive to the latents, and a
    # larger encoder gain gives conditioning latents of order one.
    randomize_torch_module(vae, seed=seed + 2, scale=0.1, gain=0.7)
    randomize_torch_module(vae.encoder, seed=seed + 5, scale=0.1, gain=1.5)
    with open(
        os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos-Predict2.5-2B", "scheduler", "scheduler_config.json")
    ) as f:
        scheduler = UniPCMultistepScheduler.from_config(
            {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        )
    text_encoder.save_pretrained(os.path.join(path, "text_encoder"))
    transformer.save_pretrained(os.path.join(path, "transformer"), safe_serialization=True)
    vae.save_pretrained(os.path.join(path, "vae"), safe_serialization=True)
    scheduler.save_pretrained(os.path.join(path, "scheduler"))
    index = {
        "_class_name": "Cosmos2_5_PredictBasePipeline",
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2TokenizerFast"],
        "transformer": ["diffusers", "CosmosTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
    }
    with open(os.path.join(path, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return Cosmos2_5_PredictBasePipeline(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=scheduler,
        safety_checker=_no_safety_checker_class()(),
    )
