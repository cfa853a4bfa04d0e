"""Matmul micro-benchmark on CPU: XLA:CPU and oneDNN (as vidax calls them) vs torch, float32 and bfloat16.

Each ``--variant`` (a set of ``XLA_FLAGS``, or a form of the bf16 dot) runs in its own child
process, since XLA reads its flags once at start-up. Inside a child, XLA, vidax's oneDNN custom
call (:mod:`vidax.cpu.onednn`, the same operand / result forms as XLA's side; skipped with a note
where it cannot be built) and torch take turns (XLA, oneDNN, torch, XLA, ...) on every shape, so a
load spike on a shared machine hits every side of a round; the figure is the median over the
rounds of each side's GFLOP/s, and a ratio is the median of the per-round ratios.

Shapes: ``2048^3`` and the GEMMs of a denoising step at the step benchmarks' size
(``ltx_step.py --latent 2 8 8``: 2 x 128 tokens, dim 2048, FF 8192, text 2 x 128 x 4096;
``wan_step.py --latent 2 8 8``: 2 x 32 tokens, dim 1536, FF 8960, text 2 x 512 x 4096;
``cogvideox_step.py --latent 2 8 8``: 2 x (32 video + 226 text) tokens, dim 3072, FF 12288).

bf16 forms on the XLA side (``--bf16-form``):
  ``f32acc`` (default, what vidax runs on CPU, :func:`vidax.nn.layers.matmul`): bf16 operands,
  float32 result (``preferred_element_type``) rounded once to bf16 after;
  ``bf16``: plain ``jnp.dot`` of two bf16 arrays (XLA's own bf16 result);
  ``upcast``: both operands cast to float32 in the jitted function, a float32 dot.

    python benchmarks/cpu_matmul.py                                   # default flags
    python benchmarks/cpu_matmul.py --variant "" --variant "--xla_cpu_use_onednn=true"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_bench import configure_xla_threads, cpu_model  # noqa: E402

# (name, M, K, N): y (M, N) = x (M, K) @ w (K, N).
SHAPES = [
    ("square 2048", 2048, 2048, 2048),
    ("ltx qkv/out 256x2048x2048", 256, 2048, 2048),
    ("ltx ff up 256x2048x8192", 256, 2048, 8192),
    ("ltx ff down 256x8192x2048", 256, 8192, 2048),
    ("ltx text kv 256x2048x2048", 256, 2048, 2048),
    ("wan qkv 64x1536x1536", 64, 1536, 1536),
    ("wan ff up 64x1536x8960", 64, 1536, 8960),
    ("wan text kv 1024x4096x1536", 1024, 4096, 1536),
    ("cog qkv/out 516x3072x3072", 516, 3072, 3072),
    ("cog ff up 516x3072x12288", 516, 3072, 12288),
    ("cog ff down 516x12288x3072", 516, 12288, 3072),
]


def _child(args) -> None:
    if args.threads > 0:
        configure_xla_threads(args.threads)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from vidax.cpu import onednn

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dnn = None
    if onednn.available():
        if args.dtype == "float32":
            dnn = jax.jit(onednn.onednn_dot)
        else:  # f32acc: oneDNN's float32 result rounded once, as vidax runs it
            dnn = jax.jit(lambda a, b: onednn.onednn_dot(a, b).astype(a.dtype))
    dtype = {"float32": (jnp.float32, torch.float32), "bfloat16": (jnp.bfloat16, torch.bfloat16)}[args.dtype]
    if args.dtype == "float32" or args.bf16_form == "bf16":
        fn = jax.jit(lambda a, b: jnp.dot(a, b))
    elif args.bf16_form == "f32acc":
        fn = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype))
    else:  # upcast
        fn = jax.jit(lambda a, b: jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32)).astype(a.dtype))
    rows = []
    for name, m, k, n in SHAPES:
        if args.shapes and name.split()[0] not in args.shapes and name not in args.shapes:
            continue
        rng = np.random.default_rng(0)
        a32, b32 = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32) / k**0.5
        ja, jb = jnp.asarray(a32, dtype[0]), jnp.asarray(b32, dtype[0])
        ta, tb = torch.from_numpy(a32).to(dtype[1]), torch.from_numpy(b32).to(dtype[1])
        flop = 2.0 * m * k * n
        # Repeat each timed call so one call takes >= ~20 ms at 300 GFLOP/s.
        reps = max(1, int(6e9 / flop))
        fn(ja, jb).block_until_ready()
        if dnn is not None:
            dnn(ja, jb).block_until_ready()
        torch.matmul(ta, tb)
        xs, ds, ts = [], [], []
        for _ in range(args.pairs):
            for f, out in ((fn, xs), (dnn, ds)):
                if f is None:
                    continue
                t0 = time.perf_counter()
                for _ in range(reps):
                    y = f(ja, jb)
                y.block_until_ready()
                out.append(flop * reps / (time.perf_counter() - t0) / 1e9)
            t0 = time.perf_counter()
            with torch.inference_mode():
                for _ in range(reps):
                    torch.matmul(ta, tb)
            ts.append(flop * reps / (time.perf_counter() - t0) / 1e9)
        rows.append(
            {
                "shape": name,
                "m": m,
                "k": k,
                "n": n,
                "xla_gflops": statistics.median(xs),
                "torch_gflops": statistics.median(ts),
                "ratio": statistics.median(x / t for x, t in zip(xs, ts)),
                "onednn_gflops": statistics.median(ds) if ds else None,
                "onednn_ratio": statistics.median(d / t for d, t in zip(ds, ts)) if ds else None,
                "onednn_xla": statistics.median(d / x for d, x in zip(ds, xs)) if ds else None,
            }
        )
    print("RESULT " + json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--variant", action="append", default=None, help="extra XLA_FLAGS for one run (repeatable; '' = default flags)"
    )
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--bf16-form", choices=["f32acc", "bf16", "upcast"], default="f32acc")
    p.add_argument("--shapes", nargs="*", default=None, help="shape names or prefixes (square, ltx, wan)")
    p.add_argument("--pairs", type=int, default=5, help="XLA/oneDNN/torch rounds per shape")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--json", default=None, help="append the results to this JSON-lines file")
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args)
        return
    from vidax.cpu.onednn import cpu_flags  # jax is imported in the children only after their XLA_FLAGS

    flags = cpu_flags()
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    print(f"CPU: {cpu_model()} ({', '.join(isa)}), {args.threads} threads; load {os.getloadavg()}", flush=True)
    print(f"CPU flags: {' '.join(sorted(flags))}", flush=True)
    for variant in args.variant if args.variant is not None else [""]:
        for dtype in args.dtypes:
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                "--dtype",
                dtype,
                "--bf16-form",
                args.bf16_form,
                "--pairs",
                str(args.pairs),
                "--threads",
                str(args.threads),
            ]
            if args.shapes:
                cmd += ["--shapes", *args.shapes]
            env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + variant).strip())
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if r.returncode != 0 or not line:
                print(f"variant {variant!r} {dtype}: failed\n{r.stderr[-2000:]}")
                continue
            rows = json.loads(line[0][len("RESULT ") :])
            form = "" if dtype == "float32" else f" ({args.bf16_form})"
            print(f"\n[{variant or 'default flags'}] {dtype}{form}; load {os.getloadavg()}")
            if rows and rows[0]["onednn_gflops"] is None:
                print("  (oneDNN: not available here, see vidax.cpu.onednn; its columns read -)")
            print(
                f"  {'shape':32s} {'XLA':>7s} {'oneDNN':>7s} {'torch':>7s} (GFLOP/s) {'XLA/torch':>9s} "
                f"{'oneDNN/torch':>12s} {'oneDNN/XLA':>10s}"
            )
            for row in rows:
                d = [
                    "-" if row[c] is None else f"{row[c]:.{p}f}"
                    for c, p in (("onednn_gflops", 1), ("onednn_ratio", 2), ("onednn_xla", 2))
                ]
                print(
                    f"  {row['shape']:32s} {row['xla_gflops']:7.1f} {d[0]:>7s} {row['torch_gflops']:7.1f}"
                    f"           {row['ratio']:9.2f} {d[1]:>12s} {d[2]:>10s}"
                )
            if args.json:
                with open(args.json, "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "cpu": cpu_model(),
                                "variant": variant,
                                "dtype": dtype,
                                "bf16_form": args.bf16_form,
                                "threads": args.threads,
                                "load": os.getloadavg(),
                                "rows": rows,
                            }
                        )
                        + "\n"
                    )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
