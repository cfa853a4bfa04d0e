"""Side-by-side denoising-step benchmark: vidax vs diffusers, LTX-Video 2B transformer (0.9.5).

Real transformer config (``reference_configs/Lightricks__LTX-Video-0.9.5``, embedded below),
random weights, one small latent, the same thread count on both sides. A "step" is what
``LTXPipeline`` does per denoising step with classifier-free guidance: the transformer on the
cond + uncond batch of 2 (both sides: one call, as the reference), the CFG combination and one
flow-match Euler update.

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/ltx_step.json`` and ``.md``.

    python benchmarks/ltx_step.py                       # fp32 and bf16, latent 3x16x16 (T x H x W)
    python benchmarks/ltx_step.py --latent 2 8 8 --steps 2 --dtypes float32 --num-layers 4
"""

from __future__ import annotations

from step_bench import StepBench, configure_xla_threads, main, prepare_jax, run_jax_steps, run_torch_steps

# Lightricks/LTX-Video-0.9.5 transformer/config.json (see reference_configs/).
CONFIG_2B = {
    "activation_fn": "gelu-approximate",
    "attention_bias": True,
    "attention_head_dim": 64,
    "attention_out_bias": True,
    "caption_channels": 4096,
    "cross_attention_dim": 2048,
    "in_channels": 128,
    "norm_elementwise_affine": False,
    "norm_eps": 1e-06,
    "num_attention_heads": 32,
    "num_layers": 28,
    "out_channels": 128,
    "patch_size": 1,
    "patch_size_t": 1,
    "qk_norm": "rms_norm_across_heads",
}
# Lightricks/LTX-Video-0.9.5 scheduler_config.json (no dynamic shifting).
SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": False,
}
TEXT_LEN = 128
# LTXPipeline's RoPE scale at its default frame rate (25) and the 8 x 32 x 32 VAE.
ROPE_SCALE = (8 / 25, 32, 32)


def _config(num_layers):
    return CONFIG_2B if num_layers is None else dict(CONFIG_2B, num_layers=num_layers)


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto") -> dict:
    """The vidax side; ``threads`` 0 leaves XLA's thread settings alone (GPU)."""
    if threads > 0:
        configure_xla_threads(threads)
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.ltx.config import LTXTransformerConfig
    from vidax.models.ltx.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.ltx.transformer import LTXVideoTransformer3DModel

    cfg = LTXTransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: LTXVideoTransformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t * h * w, cfg.in_channels),
        (2, TEXT_LEN, cfg.caption_channels),
        SCHEDULER,
        steps,
    )
    mask = jnp.ones((2, TEXT_LEN), bool)
    scale = jnp.asarray(ROPE_SCALE, jnp.float32)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        xin = jnp.concatenate([latents, latents]).astype(b.dtype)
        out = model(xin, context, jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,)), mask, t, h, w, scale)
        cond, uncond = jnp.split(out.astype(jnp.float32), 2)
        return b.sched.step(state, uncond + 3.0 * (cond - uncond), latents)

    return run_jax_steps(step, b.params, b.x, b.state, b.context, steps, LTXVideoTransformer3DModel.block_stacks)


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu") -> dict:
    """The diffusers side, on ``device`` ("cpu" or "cuda"; ``threads`` 0 leaves torch's)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, LTXVideoTransformer3DModel

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:  # random initialisation where the model runs; weights are not compared
        model = LTXVideoTransformer3DModel.from_config(_config(num_layers))
    model = model.to(dtype).eval()
    sched = FlowMatchEulerDiscreteScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    t, h, w = latent
    x = torch.randn(1, t * h * w, 128, device=dev)
    context = (0.1 * torch.randn(2, TEXT_LEN, 4096, device=dev)).to(dtype)
    mask = torch.ones(2, TEXT_LEN, device=dev)

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        xin = torch.cat([x, x]).to(dtype)
        out = model(
            hidden_states=xin,
            encoder_hidden_states=context,
            timestep=ts.expand(2),
            encoder_attention_mask=mask,
            num_frames=t,
            height=h,
            width=w,
            rope_interpolation_scale=ROPE_SCALE,
            return_dict=False,
        )[0].float()
        uncond, cond = out.chunk(2)
        return sched.step(uncond + 3.0 * (cond - uncond), ts, x, return_dict=False)[0], i + 1

    return run_torch_steps(step, x, steps)


BENCH = StepBench(
    script=__file__,
    title="LTX-Video 2B (0.9.5) denoising step",
    model="LTX-Video 0.9.5 transformer (random weights)",
    step="the transformer on the cond + uncond batch of 2 (one call on both sides, as LTXPipeline), "
    "CFG and one flow-match Euler update.",
    default_latent=(3, 16, 16),
    default_out="ltx_step",
    tokens=lambda thw: thw[0] * thw[1] * thw[2],
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
)

if __name__ == "__main__":
    main(BENCH)
