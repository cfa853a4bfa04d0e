"""GPU denoising step, Wan2.1-T2V-1.3B transformer, bf16: vidax ``cudnn`` vs vidax ``xla`` vs diffusers.

Needs an NVIDIA GPU (``--allow-cpu`` runs the same code on the CPU, for smoke tests only). Real
1.3B transformer config, random weights, bf16, default latent 21x60x104 (480x832, 81 frames:
32,760 video tokens), 512 text tokens. A step is what ``WanPipeline`` runs per denoising step
with classifier-free guidance: the transformer on cond and uncond (vidax: one batch of 2;
diffusers: two calls, as ``WanPipeline``) plus one UniPC update.

Sides, each in its own process (so each peak is its own):

* ``vidax-cudnn``: attention through cuDNN flash (``jax.nn.dot_product_attention``);
* ``vidax-xla``: attention materialised by XLA (``(B, N, L, L)`` scores; may not fit);
* ``diffusers``: ``diffusers.WanTransformer3DModel`` in bf16 on the same GPU (torch's
  ``scaled_dot_product_attention``, diffusers' default processor).

Per side: best and all per-step seconds (one warm-up step first; the GPU is synchronised
after each step), compile seconds, peak device memory (``peak_bytes_in_use`` /
``torch.cuda.max_memory_allocated``). A side that fails (out of memory) is reported as such.

    python benchmarks/gpu_wan_step.py                                 # 21x60x104 and 9x60x104
    python benchmarks/gpu_wan_step.py --latents 3 8 8 --num-layers 2 --allow-cpu --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from step_bench import ROOT, prepare_jax, run_child, save_report, time_steps
from wan_step import CONFIG_1_3B, SCHEDULER, TEXT_LEN

SIDES = ("vidax-cudnn", "vidax-xla", "diffusers")


def _config(num_layers):
    return CONFIG_1_3B if num_layers is None else dict(CONFIG_1_3B, num_layers=num_layers)


def run_vidax(attention: str, latent, steps: int, num_layers) -> dict:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.transformer import WanTransformer3DModel, wan_transformer_policy
    from vidax.stats import device_memory_bytes

    cfg = WanTransformerConfig.from_config_dict(_config(num_layers))
    t, h, w = latent
    b = prepare_jax("bfloat16", lambda d: WanTransformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention,
                                                                 rngs=nnx.Rngs(0)),
                    wan_transformer_policy, (1, t, h, w, cfg.in_channels), (2, TEXT_LEN, cfg.text_dim),
                    SCHEDULER, steps)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        xin = jnp.concatenate([latents, latents]).astype(b.dtype)
        out = model(xin, jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,)), context)
        cond, uncond = jnp.split(out, 2)
        return b.sched.step(state, uncond + 5.0 * (cond - uncond), latents)

    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(1,)).lower(b.params, b.x, b.state, b.context).compile()
    compile_s = time.perf_counter() - t0
    (x, _), times = time_steps(lambda c: compiled(b.params, c[0], c[1], b.context), (b.x, b.state), steps,
                               lambda c: c[0].block_until_ready())
    assert bool(jnp.isfinite(x).all())
    peak, how = device_memory_bytes()
    return {"compile_s": compile_s, "step_s": min(times), "step_s_all": times, "peak_device_gib": peak / 2**30,
            "peak_measured_by": how, "device": jax.devices()[0].device_kind, "jax": jax.__version__}


def run_diffusers(latent, steps: int, num_layers, allow_cpu: bool) -> dict:
    import diffusers
    import torch
    from diffusers import UniPCMultistepScheduler, WanTransformer3DModel

    if torch.cuda.is_available():
        dev = torch.device("cuda")
    elif allow_cpu:
        dev = torch.device("cpu")
    else:
        raise SystemExit("torch sees no CUDA device")
    torch.manual_seed(0)
    with dev:  # random initialisation on the device (fast); weights are not compared
        model = WanTransformer3DModel.from_config(_config(num_layers))
    model = model.to(torch.bfloat16).eval()
    sched = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    t, h, w = latent
    x = torch.randn(1, 16, t, h, w, device=dev)
    context = (0.1 * torch.randn(2, TEXT_LEN, 4096, device=dev)).to(torch.bfloat16)
    cond_ctx, uncond_ctx = context[:1], context[1:]
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        xin = x.to(torch.bfloat16)
        tt = ts.expand(1)
        cond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=cond_ctx, return_dict=False)[0]
        uncond = model(hidden_states=xin, timestep=tt, encoder_hidden_states=uncond_ctx, return_dict=False)[0]
        return sched.step(uncond + 5.0 * (cond - uncond), ts, x, return_dict=False)[0], i + 1

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        (x, _), times = time_steps(step, (x, 0), steps, lambda c: sync())
    assert torch.isfinite(x).all()
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
    return {"compile_s": 0.0, "step_s": min(times), "step_s_all": times, "peak_device_gib": peak / 2**30,
            "peak_measured_by": "torch.cuda.max_memory_allocated",
            "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
            "torch": torch.__version__, "diffusers": diffusers.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latents", nargs="+", type=int, default=[21, 60, 104, 9, 60, 104],
                   help="latent sizes T H W, several as a flat list")
    p.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    p.add_argument("--steps", type=int, default=2, help="timed steps per side (after one warm-up)")
    p.add_argument("--num-layers", type=int, default=None, help="override the layer count (smoke tests; reported)")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (smoke test)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "gpu_wan_step"))
    p.add_argument("--side", help=argparse.SUPPRESS)
    args = p.parse_args()
    if len(args.latents) % 3:
        p.error(f"--latents takes T H W triples; got {len(args.latents)} numbers")
    latents = [tuple(args.latents[i:i + 3]) for i in range(0, len(args.latents), 3)]

    if args.side:  # child process: one side, one latent size
        if args.side == "diffusers":
            result = run_diffusers(latents[0], args.steps, args.num_layers, args.allow_cpu)
        else:
            result = run_vidax(args.side.split("-", 1)[1], latents[0], args.steps, args.num_layers)
        print("RESULT " + json.dumps(result))
        return

    if not args.allow_cpu:
        import jax

        if jax.default_backend() != "gpu":
            raise SystemExit(f"no GPU here (JAX backend {jax.default_backend()!r}); pass --allow-cpu for a smoke run")
    rows = []
    for latent in latents:
        t, h, w = latent
        row = {"latent_THW": list(latent), "tokens": t * (h // 2) * (w // 2)}
        for side in args.sides:
            cmd = [sys.executable, os.path.abspath(__file__), "--side", side, "--latents", str(t), str(h), str(w),
                   "--steps", str(args.steps)]
            cmd += ["--num-layers", str(args.num_layers)] if args.num_layers is not None else []
            cmd += ["--allow-cpu"] if args.allow_cpu else []
            try:
                row[side] = run_child(cmd, f"{side} {t}x{h}x{w}")
                print(f"  {row[side]['step_s']:.3f} s/step, peak {row[side]['peak_device_gib']:.1f} GiB", flush=True)
            except SystemExit as e:  # out of memory, typically: reported, not fatal
                row[side] = {"failed": str(e).strip().splitlines()[-1][:300]}
                print(f"  failed: {row[side]['failed']}", flush=True)
        rows.append(row)

    def cell(r, side, key, fmt):
        s = r.get(side, {})
        return "n/a" if side not in r else ("failed" if "failed" in s else format(s[key], fmt))

    def ratio(r, a, b):
        try:
            return f"{r[a]['step_s'] / r[b]['step_s']:.2f}"
        except KeyError:
            return "n/a"

    first = next((r[s] for r in rows for s in args.sides if "device" in r.get(s, {})), {})
    layers = "" if args.num_layers is None else f", num_layers overridden to {args.num_layers}"
    meta = {"model": "Wan2.1-T2V-1.3B transformer (random weights)" + layers, "dtype": "bfloat16",
            "device": first.get("device"), "text_tokens": TEXT_LEN, "cfg_batch": 2, "timed_steps": args.steps}
    lines = [
        f"# Wan2.1-T2V-1.3B denoising step on {meta['device']}: vidax cudnn / xla vs diffusers (bf16)", "",
        f"Random weights{layers}, {TEXT_LEN} text tokens, CFG (vidax: batch 2; diffusers: two calls), one UniPC "
        f"update; best of {args.steps} timed steps after one warm-up, each side in its own process. Peak: the "
        "device allocator's peak bytes in use.", "",
        "| latent T×H×W | video tokens | diffusers s/step | vidax cudnn s/step | vidax xla s/step | cudnn / diffusers "
        "| xla / cudnn | peak GiB diffusers / cudnn / xla |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peaks = " / ".join(cell(r, s, "peak_device_gib", ".1f") for s in ("diffusers", "vidax-cudnn", "vidax-xla"))
        lines.append(f"| {'×'.join(map(str, r['latent_THW']))} | {r['tokens']:,} | {cell(r, 'diffusers', 'step_s', '.3f')} "
                     f"| {cell(r, 'vidax-cudnn', 'step_s', '.3f')} | {cell(r, 'vidax-xla', 'step_s', '.3f')} "
                     f"| {ratio(r, 'vidax-cudnn', 'diffusers')} | {ratio(r, 'vidax-xla', 'vidax-cudnn')} | {peaks} |")
    save_report(args.out, meta, rows, lines)


if __name__ == "__main__":
    main()
