"""A tiny diffusers WanPipeline with every parameter randomised, saved in the diffusers layout."""

from __future__ import annotations

import os

from tests.parity.helpers import randomize_torch_module
from vidax.default_checkpoint import SCHEDULER
from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

# Distinct sizes everywhere, so a swapped axis cannot pass unnoticed.
TRANSFORMER = dict(
    patch_size=(1, 2, 2), num_attention_heads=3, attention_head_dim=14, in_channels=12,
    out_channels=12, text_dim=20, freq_dim=10, ffn_dim=44, num_layers=2, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None,
    rope_max_seq_len=1024,
)
VAE = dict(
    base_dim=8, z_dim=12, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
    temperal_downsample=[False, True, True], dropout=0.0,
    latents_mean=[0.1 * i - 0.5 for i in range(12)], latents_std=[0.5 + 0.15 * i for i in range(12)],
)
TEXT_ENCODER = dict(
    vocab_size=256, d_model=20, d_kv=6, d_ff=28, num_layers=2, num_heads=3,
    relative_attention_num_buckets=8, relative_attention_max_distance=20, feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
)


def build_reference_wan_pipeline(path: str, seed: int = 0):
    """Save a tiny random diffusers WanPipeline to ``path``; return the torch pipeline."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    build_tiny_t5_tokenizer(os.path.join(path, "_tok"), vocab_size=TEXT_ENCODER["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(path, "_tok"))
    text_encoder = UMT5EncoderModel(UMT5Config(**TEXT_ENCODER)).eval()
    transformer = WanTransformer3DModel(**TRANSFORMER).eval()
    vae = AutoencoderKLWan(**VAE).eval()
    randomize_torch_module(text_encoder, seed=seed)
    randomize_torch_module(transformer, seed=seed + 1)
    # Small biases and unit-ish gain keep the decoded frames sensitive to the latents (with the
    # default randomisation two unrelated latents decode to frames 80 dB apart).
    randomize_torch_module(vae, seed=seed + 2, scale=0.1, gain=0.7)
    scheduler = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if not k.startswith("_")})
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer)
    pipe.save_pretrained(path, safe_serialization=True)
    return pipe
