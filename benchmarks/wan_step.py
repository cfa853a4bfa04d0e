"""Side-by-side denoising-step benchmark: vidax vs diffusers, Wan2.1-T2V-1.3B transformer.

Real transformer config (``reference_configs/`` or the copy embedded below), random
weights, one small latent, the same thread count on both sides. A "step" is what the pipelines do
per denoising step with classifier-free guidance: the transformer on cond and uncond (vidax: one
batch of 2; diffusers: two calls, as ``WanPipeline`` does) plus one UniPC update.

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/wan_step.json`` and ``.md``.

    python benchmarks/wan_step.py                       # fp32 and bf16, latent 5x32x32 (T x H x W)
    python benchmarks/wan_step.py --latent 3 16 16 --steps 2 --dtypes float32
"""

from __future__ import annotations

from step_bench import StepBench, configure_xla_threads, main, prepare_jax, run_jax_steps, run_torch_steps

# Wan-AI/Wan2.1-T2V-1.3B-Diffusers transformer/config.json (see reference_configs/).
CONFIG_1_3B = {
    "added_kv_proj_dim": None,
    "attention_head_dim": 128,
    "cross_attn_norm": True,
    "eps": 1e-06,
    "ffn_dim": 8960,
    "freq_dim": 256,
    "image_dim": None,
    "in_channels": 16,
    "num_attention_heads": 12,
    "num_layers": 30,
    "out_channels": 16,
    "patch_size": [1, 2, 2],
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
    "text_dim": 4096,
}
# Wan-AI/Wan2.1-T2V-14B-Diffusers transformer/config.json: the 1.3B keys with these values.
CONFIG_14B = dict(CONFIG_1_3B, ffn_dim=13824, num_attention_heads=40, num_layers=40)
SCHEDULER = {
    "_class_name": "UniPCMultistepScheduler",
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "num_train_timesteps": 1000,
    "flow_shift": 3.0,
    "solver_order": 2,
    "solver_type": "bh2",
    "lower_order_final": True,
    "final_sigmas_type": "zero",
}
TEXT_LEN = 512


def _config(num_layers):
    return CONFIG_1_3B if num_layers is None else dict(CONFIG_1_3B, num_layers=num_layers)


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto") -> dict:
    """The vidax side; ``threads`` 0 leaves XLA's thread settings alone (GPU)."""
    if threads > 0:
        configure_xla_threads(threads)
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.wan.transformer import WanTransformer3DModel

    cfg = WanTransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: WanTransformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t, h, w, cfg.in_channels),
        (2, TEXT_LEN, cfg.text_dim),
        SCHEDULER,
        steps,
    )

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        xin = jnp.concatenate([latents, latents]).astype(b.dtype)
        out = model(xin, jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,)), context)
        cond, uncond = jnp.split(out, 2)
        return b.sched.step(state, uncond + 5.0 * (cond - uncond), latents)

    return run_jax_steps(step, b.params, b.x, b.state, b.context, steps, WanTransformer3DModel.block_stacks)


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu") -> dict:
    """The diffusers side, on ``device`` ("cpu" or "cuda"; ``threads`` 0 leaves torch's)."""
    import torch
    from diffusers import UniPCMultistepScheduler, WanTransformer3DModel

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:  # random initialisation where the model runs; weights are not compared
        model = WanTransformer3DModel.from_config(_config(num_layers))
    model = model.to(dtype).eval()
    sched = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    t, h, w = latent
    x = torch.randn(1, 16, t, h, w, device=dev)
    context = 0.1 * torch.randn(2, TEXT_LEN, 4096, device=dev)
    cond_ctx, uncond_ctx = context[:1].to(dtype), context[1:].to(dtype)

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        xin = x.to(dtype)
        tt = ts.expand(1)
        cond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=cond_ctx, return_dict=False)[0]
        uncond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=uncond_ctx, return_dict=False)[0]
        return sched.step(uncond + 5.0 * (cond - uncond), ts, x, return_dict=False)[0], i + 1

    return run_torch_steps(step, x, steps)


BENCH = StepBench(
    script=__file__,
    title="Wan2.1-T2V-1.3B denoising step",
    model="Wan2.1-T2V-1.3B transformer (random weights)",
    step="the transformer on cond and uncond (vidax: one batch of 2; diffusers: two calls, as "
    "WanPipeline) plus one UniPC update.",
    default_latent=(5, 32, 32),
    default_out="wan_step",
    tokens=lambda thw: thw[0] * (thw[1] // 2) * (thw[2] // 2),
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
)

if __name__ == "__main__":
    main(BENCH)
