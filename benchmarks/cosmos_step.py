"""Side-by-side denoising-step benchmark: vidax vs diffusers, Cosmos-Predict2.5-2B transformer.

Real transformer config (``reference_configs/nvidia__Cosmos-Predict2.5-2B``, embedded below),
random weights, one small latent, the same thread count on both sides. A "step" is what
``Cosmos2_5_PredictBasePipeline`` does per denoising step with guidance: the transformer on the
prompt and the negative prompt (vidax: one batch of 2; diffusers: two calls, as the pipeline),
Cosmos' guidance ``cond + w (cond - uncond)`` and one UniPC update. The text input is the
all-layer Qwen2.5-VL feature (28 x 3584 = 100352 wide) the transformer projects itself.

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/cosmos_step.json`` and ``.md``.

    python benchmarks/cosmos_step.py                      # fp32 and bf16, latent 3x16x16 (T x H x W)
    python benchmarks/cosmos_step.py --latent 2 8 8 --steps 1 --dtypes float32 --num-layers 2
"""

from __future__ import annotations

import os
import sys

from step_bench import StepBench, configure_xla_threads, main, prepare_jax, run_jax_steps, run_torch_steps

# nvidia/Cosmos-Predict2.5-2B transformer/config.json (see reference_configs/).
CONFIG_2B = {
    "adaln_lora_dim": 256,
    "attention_head_dim": 128,
    "concat_padding_mask": True,
    "controlnet_block_every_n": None,
    "crossattn_proj_in_channels": 100352,
    "encoder_hidden_states_channels": 1024,
    "extra_pos_embed_type": None,
    "img_context_dim_in": None,
    "img_context_dim_out": 2048,
    "img_context_num_tokens": 256,
    "in_channels": 17,
    "max_size": [128, 240, 240],
    "mlp_ratio": 4.0,
    "num_attention_heads": 16,
    "num_layers": 28,
    "out_channels": 16,
    "patch_size": [1, 2, 2],
    "rope_scale": [1.0, 3.0, 3.0],
    "text_embed_dim": 1024,
    "use_crossattn_projection": True,
}
# nvidia/Cosmos-Predict2.5-2B scheduler_config.json (UniPC, Karras sigmas as flow sigmas).
SCHEDULER = {
    "_class_name": "UniPCMultistepScheduler",
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "use_karras_sigmas": True,
    "sigma_min": 0.01,
    "sigma_max": 200.0,
}
TEXT_LEN = 512
GUIDANCE = 7.0


def _config(num_layers):
    return CONFIG_2B if num_layers is None else dict(CONFIG_2B, num_layers=num_layers)


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto") -> dict:
    """The vidax side; ``threads`` 0 leaves XLA's thread settings alone (GPU)."""
    if threads > 0:
        configure_xla_threads(threads)
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.cosmos.config import CosmosTransformerConfig
    from vidax.models.cosmos.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.cosmos.transformer import CosmosTransformer3DModel

    cfg = CosmosTransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: CosmosTransformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t, h, w, 16),
        (2, TEXT_LEN, cfg.crossattn_proj_in_channels),
        SCHEDULER,
        steps,
    )
    cond_mask = jnp.zeros((2, t, h, w, 1), b.dtype)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        xin = jnp.concatenate([latents, latents]).astype(b.dtype)
        sigma = state.sigmas[state.step_index].astype(jnp.float32)
        out = model(xin, jnp.broadcast_to(sigma, (2, t)), context, condition_mask=cond_mask)
        cond, uncond = jnp.split(out.astype(jnp.float32), 2)
        return b.sched.step(state, cond + GUIDANCE * (cond - uncond), latents)

    return run_jax_steps(step, b.params, b.x, b.state, b.context, steps)


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu") -> dict:
    """The diffusers side, on ``device`` ("cpu" or "cuda"; ``threads`` 0 leaves torch's)."""
    import torch
    from diffusers import CosmosTransformer3DModel, UniPCMultistepScheduler

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.parity.cosmos_reference import torchvision_stand_ins  # torchvision is not installed

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:  # random initialisation where the model runs; weights are not compared
        model = CosmosTransformer3DModel.from_config(_config(num_layers))
    model = model.to(dtype).eval()
    sched = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    t, h, w = latent
    x = torch.randn(1, 16, t, h, w, device=dev)
    context = (0.1 * torch.randn(2, TEXT_LEN, CONFIG_2B["crossattn_proj_in_channels"], device=dev)).to(dtype)
    cond_mask = torch.zeros(1, 1, t, h, w, device=dev, dtype=dtype)
    padding_mask = torch.zeros(1, 1, 8 * h, 8 * w, device=dev, dtype=dtype)

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        sigma = sched.sigmas[i].to(dtype).view(1, 1, 1, 1, 1).expand(1, 1, t, 1, 1)
        xin = x.to(dtype)
        kw = dict(
            hidden_states=xin, condition_mask=cond_mask, timestep=sigma, padding_mask=padding_mask, return_dict=False
        )
        with torchvision_stand_ins():
            cond = model(encoder_hidden_states=context[:1], **kw)[0].float()
            uncond = model(encoder_hidden_states=context[1:], **kw)[0].float()
        return sched.step(cond + GUIDANCE * (cond - uncond), ts, x, return_dict=False)[0], i + 1

    return run_torch_steps(step, x, steps)


BENCH = StepBench(
    script=__file__,
    title="Cosmos-Predict2.5-2B denoising step",
    model="Cosmos-Predict2.5-2B transformer (random weights)",
    step="the transformer on the prompt and the negative prompt (vidax: one batch of 2; diffusers: two calls, "
    "as Cosmos2_5_PredictBasePipeline), Cosmos guidance and one UniPC update.",
    default_latent=(3, 16, 16),
    default_out="cosmos_step",
    tokens=lambda thw: thw[0] * (thw[1] // 2) * (thw[2] // 2),
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
)

if __name__ == "__main__":
    main(BENCH)
