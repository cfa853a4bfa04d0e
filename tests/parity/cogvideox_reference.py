"""Tiny random diffusers CogVideoX pipelines of every variant, and a reference runner that
records the noise the reference draws from its generator (shared by the CogVideoX pipeline tests).

Variants: 2B (sincos table), 5B (RoPE), 1.5 (``patch_size_t=2``), 5B-I2V (learned table, image
latent in channels), 1.5-I2V (ofs, ``invert_scale_latents``). Distinct small sizes: T5 width 20
(3 heads of 6), transformer 3 heads of 16, time width 24, 4 latent channels, VAE channels
8/16/16/24. Every parameter is randomised (the learned position table, a buffer, too).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tests.parity.helpers import randomize_torch_module
from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

diffusers = pytest.importorskip("diffusers")
import diffusers.models.autoencoders.vae as vae_module  # noqa: E402
import diffusers.schedulers.scheduling_dpm_cogvideox as dpm_module  # noqa: E402

PROMPTS = ["a red car walking over the sea", "the dog"]
NEGATIVES = ["blue sky", "city at night with a cat"]
L_TXT = 16
CALL = dict(height=32, width=48, num_frames=9, num_inference_steps=4, guidance_scale=4.5, max_sequence_length=L_TXT)
TEXT_ENCODER = dict(
    vocab_size=256,
    d_model=20,
    d_kv=6,
    d_ff=28,
    num_layers=2,
    num_heads=3,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)
VAE = dict(
    block_out_channels=[8, 16, 16, 24],
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=4,
    sample_height=32,
    sample_width=48,
)
TRANSFORMER = dict(
    num_attention_heads=3,
    attention_head_dim=16,
    out_channels=4,
    time_embed_dim=24,
    text_embed_dim=20,
    num_layers=1,
    sample_height=4,
    sample_width=6,
    sample_frames=9,
    patch_size=2,
    max_text_seq_length=L_TXT,
)
# released scheduler settings (5B: snr_shift_scale 1.0)
SCHEDULER = dict(
    beta_end=0.012,
    beta_schedule="scaled_linear",
    beta_start=0.00085,
    clip_sample=False,
    num_train_timesteps=1000,
    prediction_type="v_prediction",
    rescale_betas_zero_snr=True,
    set_alpha_to_one=True,
    snr_shift_scale=1.0,
    steps_offset=0,
    timestep_spacing="trailing",
)
# The 1.5 VAE settings; the T2V variants share them (only I2V reads invert_scale_latents), so
# their VAEs have one config and share one compiled decoder.
VAE_15 = dict(scaling_factor=0.7, invert_scale_latents=True)
VARIANTS = {
    "2b": dict(task="t2v", transformer=dict(in_channels=4), vae=VAE_15, scheduler=dict(snr_shift_scale=3.0)),
    "5b": dict(task="t2v", transformer=dict(in_channels=4, use_rotary_positional_embeddings=True), vae=VAE_15),
    "1.5": dict(
        task="t2v",
        transformer=dict(in_channels=4, use_rotary_positional_embeddings=True, patch_size_t=2, patch_bias=False),
        vae=VAE_15,
    ),
    "5b_i2v": dict(
        task="i2v",
        transformer=dict(in_channels=8, use_rotary_positional_embeddings=True, use_learned_positional_embeddings=True),
        vae=dict(scaling_factor=1.15258426, invert_scale_latents=False),
    ),
    "1.5_i2v": dict(
        task="i2v",
        transformer=dict(
            in_channels=8, use_rotary_positional_embeddings=True, patch_size_t=2, patch_bias=False, ofs_embed_dim=24
        ),
        vae=VAE_15,
    ),
}


def build_reference(path: str, variant: str, seed: int = 0, **transformer_overrides):
    """Save a tiny random diffusers CogVideoX pipeline of ``variant`` to ``path``; return it.
    ``transformer_overrides`` replace settings of the transformer config (e.g. ``num_layers``)."""
    from transformers import AutoTokenizer, T5Config, T5EncoderModel

    spec = VARIANTS[variant]
    torch.manual_seed(seed)
    build_tiny_t5_tokenizer(os.path.join(path, "_tok"), vocab_size=TEXT_ENCODER["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(path, "_tok"))
    text_encoder = T5EncoderModel(T5Config(**TEXT_ENCODER)).eval()
    transformer = diffusers.CogVideoXTransformer3DModel(
        **{**TRANSFORMER, **spec["transformer"], **transformer_overrides}
    ).eval()
    vae = diffusers.AutoencoderKLCogVideoX(**VAE, **spec["vae"]).eval()
    randomize_torch_module(text_encoder, seed=seed)
    randomize_torch_module(transformer, seed=seed + 1)
    if spec["transformer"].get("use_learned_positional_embeddings"):
        with torch.no_grad():  # a buffer: randomize_torch_module covers parameters only
            pe = transformer.patch_embed.pos_embedding
            pe.copy_(torch.randn(pe.shape, generator=torch.Generator().manual_seed(seed)))
    # Small biases, gain 0.7: a deep random conv stack keeps depending on its input; a smaller
    # output layer keeps the frames mostly inside [-1, 1] (few clipped pixels).
    randomize_torch_module(vae, seed=seed + 2, scale=0.1, gain=0.7)
    with torch.no_grad():
        vae.decoder.conv_out.conv.weight.mul_(0.4)
    scheduler = diffusers.CogVideoXDDIMScheduler(**dict(SCHEDULER, **spec.get("scheduler", {})))
    cls = diffusers.CogVideoXImageToVideoPipeline if spec["task"] == "i2v" else diffusers.CogVideoXPipeline
    pipe = cls(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer, scheduler=scheduler)
    pipe.save_pretrained(path, safe_serialization=True)
    return pipe


def condition_images(n: int) -> list:
    """The I2V conditioning images of a batch of ``n`` prompts (one each)."""
    return [condition_image(4 + i) for i in range(n)]


def condition_image(seed: int = 4, size=(32, 48)):
    """A PIL image (the reference reads uint8 arrays as unscaled 0..255 floats; PIL it scales)."""
    import PIL.Image

    g = np.random.default_rng(seed)
    base = g.integers(0, 256, size=(4, 6, 3)).astype(np.float32)
    big = np.kron(base, np.ones((8, 8, 1))) + g.normal(0, 20, size=(32, 48, 3))  # smooth-ish image
    image = PIL.Image.fromarray(np.clip(big, 0, 255).astype(np.uint8))
    return image if size == (32, 48) else image.resize(size[::-1])


def run_reference(
    pipe, variant, kind, dynamic, latents, prompts=PROMPTS, negatives=NEGATIVES, latents_dtype=None, **call
):
    """Run the reference with ``kind`` ("ddim" / "dpm") on the given initial latents (I2V: the
    images of :func:`condition_images`); return its frames and the noise its generator gave the
    posterior sample (``image_noise`` (B, C, 1, h, w)) and each step (``step_noise``).
    ``latents_dtype``: the torch dtype the latents are given in (the reference uses them as given;
    in bf16 it draws them in bf16)."""
    spec = VARIANTS[variant]
    if kind == "dpm":
        pipe.scheduler = diffusers.CogVideoXDPMScheduler.from_config(pipe.scheduler.config)
    else:
        pipe.scheduler = diffusers.CogVideoXDDIMScheduler.from_config(pipe.scheduler.config)
    drawn, step_noise, image_noise = [], [], []
    original_randn = vae_module.randn_tensor
    original_dpm_randn = dpm_module.randn_tensor

    def record(store):
        def fn(*args, **kwargs):
            out = (original_randn if store is image_noise else original_dpm_randn)(*args, **kwargs)
            store.append(out.clone())
            return out

        return fn

    original_step = pipe.scheduler.step

    def step(*args, **kwargs):
        drawn.clear()
        out = original_step(*args, **kwargs)
        if drawn:
            step_noise.append(drawn[-1].numpy())  # the draw the step adds
        return out

    vae_module.randn_tensor = record(image_noise)
    dpm_module.randn_tensor = record(drawn)
    pipe.scheduler.step = step
    try:
        extra = dict(image=condition_images(len(prompts))) if spec["task"] == "i2v" else {}
        with torch.no_grad():
            frames = pipe(
                prompt=prompts,
                negative_prompt=negatives,
                latents=torch.from_numpy(latents).to(latents_dtype),
                generator=torch.Generator().manual_seed(1),
                use_dynamic_cfg=dynamic,
                output_type="np",
                **extra,
                **call,
            ).frames
    finally:
        vae_module.randn_tensor = original_randn
        dpm_module.randn_tensor = original_dpm_randn
    noise = dict()
    if step_noise:
        noise["step_noise"] = np.stack(step_noise)
    if image_noise:
        noise["image_noise"] = np.concatenate([n.numpy() for n in image_noise])
    return np.asarray(frames), noise
