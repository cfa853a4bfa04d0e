"""Side-by-side denoising-step benchmark: vidax vs diffusers, LTX-2 audio-video transformer.

Real transformer config (``reference_configs/Lightricks__LTX-2/transformer/config.json``, read
below: video 32 heads of 128, audio 32 of 64), random weights, as many of its 48 blocks as fit
the machine (``--num-layers``), one small latent, the same dtype and thread count on both sides.
A "step" is what ``LTX2Pipeline`` does per denoising step with classifier-free guidance, minus
its x0-space guidance arithmetic: the transformer on the cond + uncond batch of 2 (video and
audio latents, one call on both sides, as the reference), CFG of both outputs and one
flow-match Euler update of each.

The audio latent length follows the pipeline: ``round(frames / fps · 16000 / 160 / 4)`` for the
``(T − 1)·8 + 1`` video frames at 24 fps. Each side runs in its own subprocess so its peak RSS is
its own. Results go to ``docs/benchmarks/ltx2_step.json`` and ``.md``.

    python benchmarks/ltx2_step.py --num-layers 2                # fp32 and bf16, latent 3x8x12
    python benchmarks/ltx2_step.py --latent 2 4 6 --steps 1 --dtypes float32 --num-layers 1
"""

from __future__ import annotations

import json
import os

from step_bench import ROOT, StepBench, configure_xla_threads, main, peak_rss_gib, prepare_jax, time_steps

with open(os.path.join(ROOT, "reference_configs", "Lightricks__LTX-2", "transformer", "config.json")) as _f:
    CONFIG = {k: v for k, v in json.load(_f).items() if not k.startswith("_")}
# Lightricks/LTX-2's scheduler (FlowMatchEulerDiscreteScheduler; the dynamic shift is a per-call
# sigma grid, not a per-step cost).
SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler",
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": False,
}
TEXT_LEN = 256
FPS = 24.0


def _config(num_layers):
    return CONFIG if num_layers is None else dict(CONFIG, num_layers=num_layers)


def _audio_frames(t: int) -> int:
    frames = (t - 1) * 8 + 1
    return round(
        frames / FPS * CONFIG["audio_sampling_rate"] / CONFIG["audio_hop_length"] / CONFIG["audio_scale_factor"]
    )


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto") -> dict:
    """The vidax side; ``threads`` 0 leaves XLA's thread settings alone (GPU)."""
    if threads > 0:
        configure_xla_threads(threads)
    import time

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.ltx2.config import LTX2TransformerConfig
    from vidax.models.ltx2.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.ltx2.transformer import LTX2VideoTransformer3DModel

    cfg = LTX2TransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    m = _audio_frames(t)
    b = prepare_jax(
        dtype_name,
        lambda d: LTX2VideoTransformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t * h * w, cfg.in_channels),
        (2, TEXT_LEN, cfg.caption_channels),
        SCHEDULER,
        steps,
    )
    xa = jax.random.normal(jax.random.PRNGKey(3), (1, m, cfg.audio_in_channels), jnp.float32)
    mask = jnp.ones((2, TEXT_LEN), jnp.int32)
    static = dict(num_frames=t, height=h, width=w, fps=FPS, audio_num_frames=m)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        xv, xa = latents
        ts = jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,))
        v, a = model(
            jnp.concatenate([xv, xv]).astype(b.dtype),
            jnp.concatenate([xa, xa]).astype(b.dtype),
            context,
            context,
            ts,
            encoder_attention_mask=mask,
            audio_encoder_attention_mask=mask,
            **static,
        )
        guided = []
        for out in (v, a):
            cond, uncond = jnp.split(out.astype(jnp.float32), 2)
            guided.append(uncond + 3.0 * (cond - uncond))
        xv, new_state = b.sched.step(state, guided[0], xv)
        xa, _ = b.sched.step(state, guided[1], xa)
        return (xv, xa), new_state

    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(1,)).lower(b.params, (b.x, xa), b.state, b.context).compile()
    compile_s = time.perf_counter() - t0
    (latents, _), times = time_steps(
        lambda c: compiled(b.params, c[0], c[1], b.context),
        ((b.x, xa), b.state),
        steps,
        lambda c: c[0][0].block_until_ready(),
    )
    assert all(bool(jnp.isfinite(x).all()) for x in latents)
    return {
        "compile_s": compile_s,
        "step_s": min(times),
        "step_s_all": times,
        "peak_rss_gib": peak_rss_gib(),
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "audio_tokens": m,
    }


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu") -> dict:
    """The diffusers side, on ``device`` ("cpu" or "cuda"; ``threads`` 0 leaves torch's)."""
    import copy

    import diffusers
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2VideoTransformer3DModel

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:  # random initialisation where the model runs; weights are not compared
        model = LTX2VideoTransformer3DModel.from_config(_config(num_layers))
    model = model.to(dtype).eval()
    sched = FlowMatchEulerDiscreteScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    audio_sched = copy.deepcopy(sched)  # the pipeline steps the audio latents with its own copy
    t, h, w = latent
    m = _audio_frames(t)
    xv = torch.randn(1, t * h * w, CONFIG["in_channels"], device=dev)
    xa = torch.randn(1, m, CONFIG["audio_in_channels"], device=dev)
    context = (0.1 * torch.randn(2, TEXT_LEN, CONFIG["caption_channels"], device=dev)).to(dtype)
    mask = torch.ones(2, TEXT_LEN, device=dev)
    cuda = dev.type == "cuda"

    def step(c):
        (xv, xa), i = c
        ts = sched.timesteps[i]
        v, a = model(
            hidden_states=torch.cat([xv, xv]).to(dtype),
            audio_hidden_states=torch.cat([xa, xa]).to(dtype),
            encoder_hidden_states=context,
            audio_encoder_hidden_states=context,
            timestep=ts.expand(2),
            encoder_attention_mask=mask,
            audio_encoder_attention_mask=mask,
            num_frames=t,
            height=h,
            width=w,
            fps=FPS,
            audio_num_frames=m,
            return_dict=False,
        )
        out = []
        for o, x, s in ((v, xv, sched), (a, xa, audio_sched)):
            uncond, cond = o.float().chunk(2)
            out.append(s.step(uncond + 3.0 * (cond - uncond), ts, x, return_dict=False)[0])
        return tuple(out), i + 1

    with torch.inference_mode():
        ((xv, xa), _), times = time_steps(
            step, ((xv, xa), 0), steps, lambda c: torch.cuda.synchronize() if cuda else None
        )
    assert torch.isfinite(xv).all() and torch.isfinite(xa).all()
    return {
        "compile_s": 0.0,
        "step_s": min(times),
        "step_s_all": times,
        "peak_rss_gib": peak_rss_gib(),
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "audio_tokens": m,
    }


BENCH = StepBench(
    script=__file__,
    title="LTX-2 audio-video denoising step",
    model="LTX-2 (2.0) transformer (random weights)",
    step="the transformer on the cond + uncond batch of 2 (video and audio; one call on both sides, as "
    "LTX2Pipeline), CFG of both outputs and one flow-match Euler update of each.",
    default_latent=(3, 8, 12),
    default_out="ltx2_step",
    tokens=lambda thw: thw[0] * thw[1] * thw[2],
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
)

if __name__ == "__main__":
    main(BENCH)
