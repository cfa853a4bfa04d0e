"""Tiny random diffusers HunyuanVideo pipelines (T2V, I2V token_replace, I2V latent_concat) saved
as diffusers folders, for the vidax pipeline parity tests.

Every torch parameter and buffer is randomised (:func:`tests.parity.helpers.randomize_torch_module`).
Dimensions are distinct: Llama D 32 / 4 heads of 8 / 2 KV heads / 3 layers, CLIP text D 12 / 2
heads / 2 layers, transformer 2 heads of 10 with RoPE axes (2, 4, 4), 1 + 1 blocks, VAE channels
(6, 8, 10, 10), 4 latent channels.

The Llama tokenizer is a word-level tokenizer over the Llama-3 pre-tokenizer regex with the
Llama-3 special tokens, its vocabulary every pre-token of both prompt templates plus the test
prompts' words: the T2V template's system part is then exactly 95 tokens and the I2V template's 103
with ``<image>`` at token 5, as with the real tokenizer (the pipelines' ``crop_start`` and
``image_emb_start`` constants), so the crops cut where they do at full size. The LLaVA vision
tower sees 48 px images in 2 px patches: 576 image tokens, the ``image_emb_len`` of the template.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from tests.parity.helpers import build_clip_tokenizer, randomize_torch_module

SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<image>",
    "<pad>",
    "<unk>",
]
#: Llama 3's pre-tokenizer split (tokenizer.json of meta-llama/Meta-Llama-3-8B).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
WORDS = (
    "a cat walks on the grass red sky over city at night slowly dog runs blurry low quality video of and "
    "in with blue sea"
)

TRANSFORMER = dict(
    num_attention_heads=2,
    attention_head_dim=10,
    num_layers=1,
    num_single_layers=1,
    num_refiner_layers=1,
    mlp_ratio=2.0,
    patch_size=2,
    patch_size_t=1,
    text_embed_dim=32,
    pooled_projection_dim=12,
    rope_axes_dim=(2, 4, 4),
    rope_theta=256.0,
)
VAE = dict(block_out_channels=(6, 8, 10, 10), latent_channels=4, layers_per_block=1, norm_num_groups=2)
LLAMA = dict(
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
)


def build_llama_tokenizer(path: str):
    """The word-level Llama-3-style tokenizer (see the module docstring), saved by transformers."""
    import tokenizers
    import transformers
    from tokenizers import Regex, models, pre_tokenizers, processors

    from vidax.models.hunyuan_video.pipeline import I2V_PROMPT_TEMPLATE, T2V_PROMPT_TEMPLATE

    pre = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated")
    vocab = {s: i for i, s in enumerate(SPECIAL)}
    texts = [T2V_PROMPT_TEMPLATE["template"], I2V_PROMPT_TEMPLATE["template"], WORDS, WORDS.capitalize()]
    for text in texts:
        for seg in re.split(r"(<\|[a-z_]+\|>|<image>|\{\})", text):
            if seg and seg not in SPECIAL and seg != "{}":
                for piece, _ in pre.pre_tokenize_str(seg) + pre.pre_tokenize_str(" " + seg):
                    vocab.setdefault(piece, len(vocab))
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre
    tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="right",
    )
    fast.save_pretrained(path)
    return fast


def build_reference_hunyuan_pipeline(path: str, kind: str | None, seed: int = 0):
    """A tiny random diffusers HunyuanVideo pipeline saved at ``path``, and the pipeline.

    Args:
        kind: None (``HunyuanVideoPipeline``), ``"token_replace"`` or ``"latent_concat"``
            (``HunyuanVideoImageToVideoPipeline``).
    """
    import torch
    import transformers
    from diffusers import (
        AutoencoderKLHunyuanVideo,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideoImageToVideoPipeline,
        HunyuanVideoPipeline,
        HunyuanVideoTransformer3DModel,
    )

    torch.manual_seed(seed)
    os.makedirs(path, exist_ok=True)
    tok = build_llama_tokenizer(os.path.join(path, "_tok"))
    tok2 = build_clip_tokenizer(os.path.join(path, "_tok2"))
    llama_cfg = dict(LLAMA, vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=0, eos_token_id=1)
    if kind is None:
        text_encoder = transformers.LlamaModel(transformers.LlamaConfig(**llama_cfg))
    else:
        cfg = transformers.LlavaConfig(
            text_config=transformers.LlamaConfig(**llama_cfg),
            vision_config=transformers.CLIPVisionConfig(
                hidden_size=16,
                intermediate_size=24,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=48,
                patch_size=2,
                projection_dim=16,
            ),
            image_token_index=tok.convert_tokens_to_ids("<image>"),
            vision_feature_layer=-2,
            vision_feature_select_strategy="default",
            projector_hidden_act="gelu",
        )
        cfg.pad_token_id = tok.pad_token_id
        text_encoder = transformers.LlavaForConditionalGeneration(cfg)
    text_encoder_2 = transformers.CLIPTextModel(
        transformers.CLIPTextConfig(
            vocab_size=len(tok2),
            hidden_size=12,
            intermediate_size=20,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=77,
            eos_token_id=2,
            bos_token_id=0,
            pad_token_id=1,
            hidden_act="quick_gelu",
        )
    )
    latent = VAE["latent_channels"]
    in_channels = 2 * latent + 1 if kind == "latent_concat" else latent
    transformer = HunyuanVideoTransformer3DModel(
        **TRANSFORMER,
        in_channels=in_channels,
        out_channels=latent,
        guidance_embeds=kind != "latent_concat",
        image_condition_type=kind,
    )
    vae = AutoencoderKLHunyuanVideo(
        **VAE, down_block_types=("HunyuanVideoDownBlock3D",) * 4, up_block_types=("HunyuanVideoUpBlock3D",) * 4
    )
    # The transformer's weights at 1.5x the default scale and the VAE at gain 1 (not saturating):
    # at the default scale the tiny model's video barely depends on the prompt (2 % in the latents,
    # 57 dB between two prompts' videos), which would leave the parity check little to see.
    randomize_torch_module(text_encoder, seed)
    randomize_torch_module(text_encoder_2, seed + 1)
    randomize_torch_module(transformer, seed + 2, scale=1.5)
    randomize_torch_module(vae, seed + 7, gain=1.0)
    for m in (text_encoder, text_encoder_2, transformer, vae):
        m.eval()
    scheduler = FlowMatchEulerDiscreteScheduler(shift=7.0)
    parts = dict(
        text_encoder=text_encoder,
        tokenizer=tok,
        transformer=transformer,
        vae=vae,
        scheduler=scheduler,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tok2,
    )
    if kind is None:
        pipe = HunyuanVideoPipeline(**parts)
    else:
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": 48}, crop_size={"height": 48, "width": 48})
        pipe = HunyuanVideoImageToVideoPipeline(**parts, image_processor=processor)
    pipe.save_pretrained(path)
    # The released folders name the Llama tokenizer LlamaTokenizerFast (a fast tokenizer with this
    # tokenizer.json); save_pretrained wrote the class of the object built here.
    index_file = os.path.join(path, "model_index.json")
    with open(index_file) as f:
        index = json.load(f)
    index["tokenizer"] = ["transformers", "LlamaTokenizerFast"]
    with open(index_file, "w") as f:
        json.dump(index, f)
    return pipe


def smooth_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth random uint8 RGB image (resizing it keeps most of its content)."""
    rng = np.random.default_rng(seed)
    small = rng.uniform(0, 255, (4, 5, 3))
    ys, xs = np.linspace(0, 3, height), np.linspace(0, 4, width)
    y0, x0 = np.floor(ys).astype(int).clip(0, 2), np.floor(xs).astype(int).clip(0, 3)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    img = (
        small[y0][:, x0] * (1 - fy) * (1 - fx)
        + small[y0 + 1][:, x0] * fy * (1 - fx)
        + small[y0][:, x0 + 1] * (1 - fy) * fx
        + small[y0 + 1][:, x0 + 1] * fy * fx
    )
    return img.astype(np.uint8)
