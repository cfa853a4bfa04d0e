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

import wan_step
from step_bench import ROOT, run_child, save_report
from wan_step import TEXT_LEN

SIDES = ("vidax-cudnn", "vidax-xla", "diffusers")


def run_side(side: str, latent, steps: int, num_layers, allow_cpu: bool) -> dict:
    """One side in this process: ``wan_step``'s sides in bf16 on the GPU, XLA's and torch's
    thread settings left alone."""
    if side != "diffusers":
        return wan_step.run_vidax("bfloat16", latent, steps, 0, num_layers, attention=side.split("-", 1)[1])
    import torch

    if not (torch.cuda.is_available() or allow_cpu):
        raise SystemExit("torch sees no CUDA device")
    return wan_step.run_diffusers(
        "bfloat16", latent, steps, 0, num_layers, device="cuda" if torch.cuda.is_available() else "cpu"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--latents",
        nargs="+",
        type=int,
        default=[21, 60, 104, 9, 60, 104],
        help="latent sizes T H W, several as a flat list",
    )
    p.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    p.add_argument("--steps", type=int, default=2, help="timed steps per side (after one warm-up)")
    p.add_argument("--num-layers", type=int, default=None, help="override the layer count (smoke tests; reported)")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (smoke test)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "gpu_wan_step"))
    p.add_argument("--side", help=argparse.SUPPRESS)
    args = p.parse_args()
    if len(args.latents) % 3:
        p.error(f"--latents takes T H W triples; got {len(args.latents)} numbers")
    latents = [tuple(args.latents[i : i + 3]) for i in range(0, len(args.latents), 3)]

    if args.side:  # child process: one side, one latent size
        print("RESULT " + json.dumps(run_side(args.side, latents[0], args.steps, args.num_layers, args.allow_cpu)))
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
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--side",
                side,
                "--latents",
                str(t),
                str(h),
                str(w),
                "--steps",
                str(args.steps),
            ]
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
    meta = {
        "model": "Wan2.1-T2V-1.3B transformer (random weights)" + layers,
        "dtype": "bfloat16",
        "device": first.get("device"),
        "text_tokens": TEXT_LEN,
        "cfg_batch": 2,
        "timed_steps": args.steps,
    }
    lines = [
        f"# Wan2.1-T2V-1.3B denoising step on {meta['device']}: vidax cudnn / xla vs diffusers (bf16)",
        "",
        f"Random weights{layers}, {TEXT_LEN} text tokens, CFG (vidax: batch 2; diffusers: two calls), one UniPC "
        f"update; best of {args.steps} timed steps after one warm-up, each side in its own process. Peak: the "
        "device allocator's peak bytes in use.",
        "",
        "| latent T×H×W | video tokens | diffusers s/step | vidax cudnn s/step | vidax xla s/step | cudnn / diffusers "
        "| xla / cudnn | peak GiB diffusers / cudnn / xla |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peaks = " / ".join(cell(r, s, "peak_device_gib", ".1f") for s in ("diffusers", "vidax-cudnn", "vidax-xla"))
        lines.append(
            f"| {'×'.join(map(str, r['latent_THW']))} | {r['tokens']:,} | {cell(r, 'diffusers', 'step_s', '.3f')} "
            f"| {cell(r, 'vidax-cudnn', 'step_s', '.3f')} | {cell(r, 'vidax-xla', 'step_s', '.3f')} "
            f"| {ratio(r, 'vidax-cudnn', 'diffusers')} | {ratio(r, 'vidax-xla', 'vidax-cudnn')} | {peaks} |"
        )
    save_report(args.out, meta, rows, lines)


if __name__ == "__main__":
    main()
