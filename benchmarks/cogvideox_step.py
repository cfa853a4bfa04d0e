"""Side-by-side denoising-step benchmark: vidax vs diffusers, CogVideoX-5B transformer.

Real transformer config (``THUDM/CogVideoX-5b``, embedded below), random weights, one small
latent, the same thread count on both sides. A "step" is what ``CogVideoXPipeline`` does per
denoising step with classifier-free guidance: the transformer on cond and uncond as one batch of 2
(both sides, as the reference pipeline does; 226 text tokens, 3-D RoPE computed once before the
loop), guidance 6 in float32, and one ``CogVideoXDDIMScheduler`` update.

Each side runs in its own subprocess so its peak RSS is its own (the shared runner is
``benchmarks/step_bench.py``). Results go to ``docs/benchmarks/cogvideox_step.json`` and ``.md``.

    python benchmarks/cogvideox_step.py                    # fp32 and bf16, latent 3x16x16 (T x H x W)
    python benchmarks/cogvideox_step.py --latent 2 4 4 --steps 1 --num-layers 2   # smoke test

The 5B model needs ~22 GB (fp32) / ~11 GB (bf16) per process.
"""

from __future__ import annotations

from step_bench import StepBench, configure_xla_threads, main, prepare_jax, run_jax_steps, run_torch_steps

# THUDM/CogVideoX-5b transformer/config.json (see reference_configs/).
CONFIG_5B = {
    "activation_fn": "gelu-approximate",
    "attention_bias": True,
    "attention_head_dim": 64,
    "dropout": 0.0,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 16,
    "max_text_seq_length": 226,
    "norm_elementwise_affine": True,
    "norm_eps": 1e-05,
    "num_attention_heads": 48,
    "num_layers": 42,
    "out_channels": 16,
    "patch_size": 2,
    "sample_frames": 49,
    "sample_height": 60,
    "sample_width": 90,
    "spatial_interpolation_scale": 1.875,
    "temporal_compression_ratio": 4,
    "temporal_interpolation_scale": 1.0,
    "text_embed_dim": 4096,
    "time_embed_dim": 512,
    "timestep_activation_fn": "silu",
    "use_rotary_positional_embeddings": True,
}
SCHEDULER = {
    "_class_name": "CogVideoXDDIMScheduler",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "clip_sample_range": 1.0,
    "num_train_timesteps": 1000,
    "prediction_type": "v_prediction",
    "rescale_betas_zero_snr": True,
    "sample_max_value": 1.0,
    "set_alpha_to_one": True,
    "snr_shift_scale": 1.0,
    "steps_offset": 0,
    "timestep_spacing": "trailing",
    "trained_betas": None,
}
TEXT_LEN = 226
GUIDANCE = 6.0


def _config(num_layers):
    return CONFIG_5B if num_layers is None else dict(CONFIG_5B, num_layers=num_layers)


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None) -> dict:
    configure_xla_threads(threads)
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.cogvideox.config import CogVideoXTransformerConfig
    from vidax.models.cogvideox.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.cogvideox.transformer import CogVideoXTransformer3DModel
    from vidax.pipelines.sampling import classifier_free_guidance

    cfg = CogVideoXTransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: CogVideoXTransformer3DModel(cfg, dtype=d, param_dtype=d, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t, h, w, cfg.in_channels),
        (2, TEXT_LEN, cfg.text_embed_dim),
        SCHEDULER,
        steps,
    )
    guidance = jnp.asarray(GUIDANCE, jnp.float32)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        xin = jnp.concatenate([latents, latents]).astype(b.dtype)
        out = model(xin, jnp.broadcast_to(state.timestep, (2,)), context).astype(jnp.float32)
        return b.sched.step(state, classifier_free_guidance(out, guidance), latents)

    return run_jax_steps(step, b.params, b.x, b.state, b.context, steps, CogVideoXTransformer3DModel.block_stacks)


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None) -> dict:
    import types

    import torch
    from diffusers import CogVideoXDDIMScheduler, CogVideoXPipeline, CogVideoXTransformer3DModel

    torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the benchmark dtype: no fp32 copy of 5B parameters
    try:
        model = CogVideoXTransformer3DModel.from_config(_config(num_layers)).eval()
    finally:
        torch.set_default_dtype(default)
    sched = CogVideoXDDIMScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1)
    t, h, w = latent
    x = torch.randn(1, t, 16, h, w)
    embeds = (0.1 * torch.randn(2, TEXT_LEN, 4096)).to(dtype)
    # The pipeline's RoPE tables, computed once before its loop.
    fake = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=model)
    rope = CogVideoXPipeline._prepare_rotary_positional_embeddings(fake, h * 8, w * 8, t, "cpu")

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        xin = torch.cat([x] * 2).to(dtype)
        out = model(
            hidden_states=xin,
            encoder_hidden_states=embeds,
            timestep=ts.expand(2),
            image_rotary_emb=rope,
            return_dict=False,
        )[0].float()
        uncond, cond = out.chunk(2)
        return sched.step(uncond + GUIDANCE * (cond - uncond), ts, x, return_dict=False)[0], i + 1

    return run_torch_steps(step, x, steps)


BENCH = StepBench(
    script=__file__,
    title="CogVideoX-5B denoising step",
    model="CogVideoX-5B transformer (random weights)",
    step="the transformer on cond and uncond as one batch of 2 (both sides, as CogVideoXPipeline), "
    "guidance in float32 and one CogVideoXDDIMScheduler update.",
    default_latent=(3, 16, 16),
    default_out="cogvideox_step",
    tokens=lambda thw: thw[0] * (thw[1] // 2) * (thw[2] // 2),
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
)

if __name__ == "__main__":
    main(BENCH)
