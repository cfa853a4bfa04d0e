"""Tiny diffusers LTX-Video pipelines with every parameter randomised, saved in the diffusers layout.

:func:`build_reference_ltx_pipeline` builds ``LTXPipeline`` (T5 v1.1, the transformer, a 0.9.1-style
VAE with timestep conditioning, the 0.9.1 scheduler config: dynamic shifting to
``shift_terminal``); ``LTXImageToVideoPipeline`` runs on the same components.
"""

from __future__ import annotations

import json
import os

from tests.parity.helpers import randomize_torch_module
from tests.parity.wan_reference import TEXT_ENCODER
from tests.paths import REFERENCE_CONFIGS
from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

LATENT_CHANNELS = 8
# Distinct sizes: 4 heads of 7 (width 28: 4 RoPE frequencies per axis and 2 padded channels in
# front), caption 20 (the tiny T5's d_model), 2 layers.
TRANSFORMER = dict(
    in_channels=LATENT_CHANNELS,
    out_channels=LATENT_CHANNELS,
    num_attention_heads=4,
    attention_head_dim=7,
    cross_attention_dim=28,
    num_layers=2,
    caption_channels=TEXT_ENCODER["d_model"],
)
# 0.9.1 structure (old down blocks, timestep-conditioned decoder, residual up-samplers) at small
# widths: 8x spatial (patch 2, two 2x steps), 4x temporal compression.
VAE = dict(
    block_out_channels=[8, 12, 16],
    down_block_types=["LTXVideoDownBlock3D"] * 3,
    spatio_temporal_scaling=[True, True, False],
    layers_per_block=[1, 1, 1, 1],
    decoder_block_out_channels=[8, 16],
    decoder_layers_per_block=[1, 1, 1],
    decoder_spatio_temporal_scaling=[True, True],
    decoder_inject_noise=[False, False, False],
    upsample_residual=[True, False],
    upsample_factor=[2, 2],
    timestep_conditioning=True,
    latent_channels=LATENT_CHANNELS,
    patch_size=2,
    scaling_factor=0.9,
)
SCALE, TEMPORAL = 8, 4
T5 = dict(TEXT_ENCODER, feed_forward_proj="gated-gelu")


def scheduler_config(release: str = "Lightricks__LTX-Video-0.9.1") -> dict:
    """A released LTX-Video scheduler config (the keys diffusers reads)."""
    with open(os.path.join(REFERENCE_CONFIGS, release, "scheduler", "scheduler_config.json")) as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def build_reference_ltx_pipeline(path: str, seed: int = 0, release: str = "Lightricks__LTX-Video-0.9.1"):
    """Save a tiny random diffusers ``LTXPipeline`` to ``path``; return the torch pipeline."""
    import torch
    from diffusers import (
        AutoencoderKLLTXVideo,
        FlowMatchEulerDiscreteScheduler,
        LTXPipeline,
        LTXVideoTransformer3DModel,
    )
    from transformers import AutoTokenizer, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    build_tiny_t5_tokenizer(os.path.join(path, "_tok"), vocab_size=T5["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(path, "_tok"))
    text_encoder = T5EncoderModel(T5Config(**T5)).eval()
    transformer = LTXVideoTransformer3DModel(**TRANSFORMER).eval()
    vae = AutoencoderKLLTXVideo(**VAE).eval()
    randomize_torch_module(text_encoder, seed=seed)
    randomize_torch_module(transformer, seed=seed + 1)
    # Small biases, gain 0.7 (decoder) and 1.5 (encoder): the latents reach the frames and an
    # image reaches its latents.
    randomize_torch_module(vae, seed=seed + 2, scale=0.1, gain=0.7)
    randomize_torch_module(vae.encoder, seed=seed + 3, scale=0.1, gain=1.5)
    g = torch.Generator().manual_seed(seed + 4)
    with torch.no_grad():  # the latent statistics are buffers in the weights file
        vae.latents_mean.copy_(0.2 * torch.randn(LATENT_CHANNELS, generator=g))
        vae.latents_std.copy_(0.6 + 0.5 * torch.rand(LATENT_CHANNELS, generator=g))
    scheduler = FlowMatchEulerDiscreteScheduler.from_config(scheduler_config(release))
    pipe = LTXPipeline(
        tokenizer=tokenizer, text_encoder=text_encoder, transformer=transformer, vae=vae, scheduler=scheduler
    )
    pipe.save_pretrained(path, safe_serialization=True)
    return pipe


def packed_noise(batch: int, num_frames: int, height: int, width: int, seed: int = 7):
    """Initial latents (B, F' x H' x W', C) torch float32, the layout the T2V / I2V pipelines take."""
    import torch

    n = ((num_frames - 1) // TEMPORAL + 1) * (height // SCALE) * (width // SCALE)
    return torch.randn(batch, n, LATENT_CHANNELS, generator=torch.Generator().manual_seed(seed))
