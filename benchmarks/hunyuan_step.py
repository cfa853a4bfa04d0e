"""Side-by-side denoising-step benchmark: vidax vs diffusers, HunyuanVideo transformer.

The real HunyuanVideo (T2V) transformer config (``reference_configs/hunyuanvideo-community__
HunyuanVideo``, embedded below) at reduced depth by default — the 13B model in float32 (52 GB) does
not fit a small machine: ``--num-layers N`` keeps N double-stream and 2N single-stream blocks (the
released 20 : 40), default 2; widths, heads, RoPE and the token refiner are the real ones. Random
weights, one small latent, the same thread count on both sides. A "step" is what
``HunyuanVideoPipeline`` does per step by default: one transformer call with the embedded guidance
(no CFG batch) and one flow-match Euler update (shift 7).

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/hunyuan_step.json`` and ``.md``.

    python benchmarks/hunyuan_step.py                       # fp32 and bf16, latent 3x16x16, 2 + 4 blocks
    python benchmarks/hunyuan_step.py --latent 2 8 8 --steps 1 --dtypes float32 --num-layers 1
"""

from __future__ import annotations

from step_bench import StepBench, configure_xla_threads, main, prepare_jax, run_jax_steps, run_torch_steps

# hunyuanvideo-community/HunyuanVideo transformer/config.json (see reference_configs/).
CONFIG = {
    "attention_head_dim": 128,
    "guidance_embeds": True,
    "in_channels": 16,
    "mlp_ratio": 4.0,
    "num_attention_heads": 24,
    "num_layers": 20,
    "num_refiner_layers": 2,
    "num_single_layers": 40,
    "out_channels": 16,
    "patch_size": 2,
    "patch_size_t": 1,
    "pooled_projection_dim": 768,
    "qk_norm": "rms_norm",
    "rope_axes_dim": [16, 56, 56],
    "rope_theta": 256.0,
    "text_embed_dim": 4096,
}
SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 7.0}
TEXT_LEN = 256  # the pipeline's max_sequence_length (after the template's crop)
GUIDANCE = 6.0 * 1000.0  # the pipeline's default guidance_scale, scaled as it does before embedding
DEFAULT_LAYERS = 2


def _config(num_layers):
    n = DEFAULT_LAYERS if num_layers is None else num_layers
    return dict(CONFIG, num_layers=n, num_single_layers=2 * n)


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto") -> dict:
    """The vidax side; ``threads`` 0 leaves XLA's thread settings alone (GPU)."""
    if threads > 0:
        configure_xla_threads(threads)
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.hunyuan_video.config import HunyuanVideoTransformerConfig
    from vidax.models.hunyuan_video.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.hunyuan_video.transformer import HunyuanVideoTransformer3DModel

    cfg = HunyuanVideoTransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: HunyuanVideoTransformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t, h, w, cfg.in_channels),
        (1, TEXT_LEN, cfg.text_embed_dim),
        SCHEDULER,
        steps,
    )
    mask = jnp.ones((1, TEXT_LEN), jnp.int32)
    pooled = (0.1 * jax.random.normal(jax.random.PRNGKey(3), (1, cfg.pooled_projection_dim))).astype(b.dtype)
    guidance = jnp.full((1,), GUIDANCE, jnp.float32)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        t_in = jnp.broadcast_to(state.timestep.astype(jnp.float32), (1,))
        out = model(latents.astype(b.dtype), t_in, context, mask, pooled, guidance)
        return b.sched.step(state, out.astype(jnp.float32), latents)

    return run_jax_steps(step, b.params, b.x, b.state, b.context, steps)


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu") -> dict:
    """The diffusers side, on ``device`` ("cpu" or "cuda"; ``threads`` 0 leaves torch's)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoTransformer3DModel

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:  # random initialisation where the model runs; weights are not compared
        model = HunyuanVideoTransformer3DModel.from_config(_config(num_layers))
    model = model.to(dtype).eval()
    sched = FlowMatchEulerDiscreteScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    t, h, w = latent
    x = torch.randn(1, 16, t, h, w, device=dev)
    context = (0.1 * torch.randn(1, TEXT_LEN, 4096, device=dev)).to(dtype)
    mask = torch.ones(1, TEXT_LEN, device=dev, dtype=torch.int64)
    pooled = (0.1 * torch.randn(1, 768, device=dev)).to(dtype)
    guidance = torch.full((1,), GUIDANCE, device=dev, dtype=dtype)

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        out = model(
            hidden_states=x.to(dtype),
            timestep=ts.expand(1).to(dtype),
            encoder_hidden_states=context,
            encoder_attention_mask=mask,
            pooled_projections=pooled,
            guidance=guidance,
            return_dict=False,
        )[0].float()
        return sched.step(out, ts, x, return_dict=False)[0], i + 1

    return run_torch_steps(step, x, steps)


BENCH = StepBench(
    script=__file__,
    title="HunyuanVideo denoising step (real widths, reduced depth)",
    model=f"HunyuanVideo T2V transformer (random weights), {DEFAULT_LAYERS} double + {2 * DEFAULT_LAYERS} single "
    "blocks unless --num-layers",
    step="one transformer call with embedded guidance (as HunyuanVideoPipeline without true CFG) and one "
    "flow-match Euler update.",
    default_latent=(3, 16, 16),
    default_out="hunyuan_step",
    tokens=lambda thw: thw[0] * (thw[1] // 2) * (thw[2] // 2),
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
    batch=1,
)

if __name__ == "__main__":
    main(BENCH)
