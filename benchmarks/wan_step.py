"""Side-by-side denoising-step benchmark: vidax vs diffusers, Wan2.1-T2V-1.3B transformer.

Real transformer config (``../shared/reference_configs`` or the copy embedded below), random
weights, one small latent, the same thread count on both sides. A "step" is what the pipelines do
per denoising step with classifier-free guidance: the transformer on cond and uncond (vidax: one
batch of 2; diffusers: two calls, as ``WanPipeline`` does) plus one UniPC update.

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/wan_step.json`` and ``.md``.

    python benchmarks/wan_step.py                       # fp32 and bf16, latent 5x32x32 (T x H x W)
    python benchmarks/wan_step.py --latent 3 16 16 --steps 2 --dtypes float32
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Wan-AI/Wan2.1-T2V-1.3B-Diffusers transformer/config.json (see shared/reference_configs).
CONFIG_1_3B = {
    "added_kv_proj_dim": None, "attention_head_dim": 128, "cross_attn_norm": True, "eps": 1e-06,
    "ffn_dim": 8960, "freq_dim": 256, "image_dim": None, "in_channels": 16, "num_attention_heads": 12,
    "num_layers": 30, "out_channels": 16, "patch_size": [1, 2, 2], "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024, "text_dim": 4096,
}
SCHEDULER = {
    "_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction", "use_flow_sigmas": True,
    "num_train_timesteps": 1000, "flow_shift": 3.0, "solver_order": 2, "solver_type": "bh2",
    "lower_order_final": True, "final_sigmas_type": "zero",
}
TEXT_LEN = 512


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_vidax(dtype_name: str, latent, steps: int, threads: int) -> dict:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    )
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.transformer import WanTransformer3DModel, wan_transformer_policy
    from vidax.schedulers import scheduler_from_config
    from vidax.weights.loader import abstract_params

    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[dtype_name]
    cfg = WanTransformerConfig.from_config_dict(CONFIG_1_3B)
    graphdef, flat = abstract_params(
        lambda: WanTransformer3DModel(cfg, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
    )
    policy = wan_transformer_policy(dtype)
    filled = []
    for i, (path, var) in enumerate(flat.items()):
        # Pseudo-random values from one fused elementwise pass: no temporaries the size of the
        # parameter (jax.random would hold its uint32 bits and an fp32 copy, inflating peak RSS).
        shape = var.get_value().shape
        make = jax.jit(lambda s=shape, d=policy.dtype_for(path), i=i: (0.02 * jnp.sin(
            jax.lax.iota(jnp.float32, int(np.prod(s))) * 12.9898 + 78.233 * i)).astype(d).reshape(s))
        filled.append((path, var.replace(make())))
    params = nnx.from_flat_state(filled)
    t, h, w = latent
    x = jax.random.normal(jax.random.PRNGKey(1), (1, t, h, w, cfg.in_channels), jnp.float32)
    context = (0.1 * jax.random.normal(jax.random.PRNGKey(2), (2, TEXT_LEN, cfg.text_dim), jnp.float32)).astype(dtype)
    sched = scheduler_from_config(SCHEDULER)
    state = sched.set_timesteps(steps + 1, sample_shape=x.shape)

    def step(params, latents, state, context):
        model = nnx.merge(graphdef, params)
        xin = jnp.concatenate([latents, latents]).astype(dtype)
        out = model(xin, jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,)), context)
        cond, uncond = jnp.split(out, 2)
        return sched.step(state, uncond + 5.0 * (cond - uncond), latents)

    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(1,)).lower(params, x, state, context).compile()
    compile_s = time.perf_counter() - t0
    x, state = compiled(params, x, state, context)  # warm-up
    x.block_until_ready()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        x, state = compiled(params, x, state, context)
        x.block_until_ready()
        times.append(time.perf_counter() - t0)
    assert bool(jnp.isfinite(x).all())
    return {"compile_s": compile_s, "step_s": min(times), "step_s_all": times, "peak_rss_gib": _peak_rss_gib(),
            "jax": jax.__version__}


def run_diffusers(dtype_name: str, latent, steps: int, threads: int) -> dict:
    import torch
    from diffusers import UniPCMultistepScheduler, WanTransformer3DModel
    import diffusers

    torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    model = WanTransformer3DModel.from_config(CONFIG_1_3B).to(dtype).eval()
    sched = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1)
    t, h, w = latent
    x = torch.randn(1, 16, t, h, w)
    context = 0.1 * torch.randn(2, TEXT_LEN, 4096)
    cond_ctx, uncond_ctx = context[:1].to(dtype), context[1:].to(dtype)

    def step(x, ts):
        xin = x.to(dtype)
        tt = ts.expand(1)
        cond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=cond_ctx, return_dict=False)[0]
        uncond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=uncond_ctx, return_dict=False)[0]
        return sched.step(uncond + 5.0 * (cond - uncond), ts, x, return_dict=False)[0]

    times = []
    with torch.inference_mode():
        x = step(x, sched.timesteps[0])  # warm-up
        for i in range(steps):
            t0 = time.perf_counter()
            x = step(x, sched.timesteps[i + 1])
            times.append(time.perf_counter() - t0)
    assert torch.isfinite(x).all()
    return {"compile_s": 0.0, "step_s": min(times), "step_s_all": times, "peak_rss_gib": _peak_rss_gib(),
            "torch": torch.__version__, "diffusers": diffusers.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--latent", nargs=3, type=int, default=[5, 32, 32], metavar=("T", "H", "W"))
    p.add_argument("--steps", type=int, default=2, help="timed steps per side (after one warm-up)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "wan_step"))
    p.add_argument("--side", choices=["vidax", "diffusers"], help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.side:  # child process: one side, one dtype
        fn = run_vidax if args.side == "vidax" else run_diffusers
        print("RESULT " + json.dumps(fn(args.dtype, tuple(args.latent), args.steps, args.threads)))
        return

    t, h, w = args.latent
    tokens = t * (h // 2) * (w // 2)
    rows = []
    for dtype in args.dtypes:
        row = {"dtype": dtype}
        for side in ("diffusers", "vidax"):
            cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--dtype", dtype,
                   "--latent", str(t), str(h), str(w), "--steps", str(args.steps), "--threads", str(args.threads)]
            print(f"running {side} {dtype} ...", flush=True)
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                raise SystemExit(f"{side} {dtype} failed:\n{r.stderr[-3000:]}")
            row[side] = json.loads(line[0][7:])
            print(f"  {side}: {row[side]['step_s']:.2f} s/step, compile {row[side]['compile_s']:.1f} s, "
                  f"peak RSS {row[side]['peak_rss_gib']:.2f} GiB", flush=True)
        row["ratio_vidax_over_diffusers"] = row["vidax"]["step_s"] / row["diffusers"]["step_s"]
        rows.append(row)

    meta = {"model": "Wan2.1-T2V-1.3B transformer (random weights)", "latent_THW": [t, h, w],
            "tokens": tokens, "text_tokens": TEXT_LEN, "cfg_batch": 2, "threads": args.threads,
            "cpu": platform.processor() or platform.machine(), "timed_steps": args.steps}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    lines = [
        f"# Wan2.1-T2V-1.3B denoising step: vidax vs diffusers (CPU, {args.threads} threads)", "",
        f"Latent {t}x{h}x{w} (T x H x W) = {tokens} video tokens, {TEXT_LEN} text tokens, CFG (batch 2), "
        f"random weights; best of {args.steps} timed steps after one warm-up; each side in its own process.", "",
        "| dtype | diffusers s/step | vidax s/step | vidax / diffusers | vidax compile s | diffusers peak RSS GiB | vidax peak RSS GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['diffusers']['step_s']:.2f} | {r['vidax']['step_s']:.2f} | "
                     f"{r['ratio_vidax_over_diffusers']:.2f} | {r['vidax']['compile_s']:.1f} | "
                     f"{r['diffusers']['peak_rss_gib']:.2f} | {r['vidax']['peak_rss_gib']:.2f} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
