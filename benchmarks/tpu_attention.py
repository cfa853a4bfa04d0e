"""TPU attention tiles: the Pallas flash and splash kernels at the video models' shapes.

For each shape (B, L, N, K) and each tile setting, the forward attention's time (best of
``--repeats`` after a warm-up) and its rate: 4·B·N·Lq·Lk·K FLOPs (the two products), against the
datasheet peak and an 8192³ bfloat16 matmul timed in the same run. Shows which tiles
``vidax.nn.attention``'s ``pallas_tpu`` should use on this TPU generation.

    python benchmarks/tpu_attention.py                       # Wan 480p and 720p shapes
    python benchmarks/tpu_attention.py --shapes 2 32760 12 128 --out /tmp/att

Each setting is ``flash:BQ,BKMAJOR,BK`` (``jax.experimental.pallas.ops.tpu.flash_attention``),
``splash:BQ,BKV,BKVCOMPUTE`` (``splash_attention``) or ``vidax[:IMPLEMENTATION]`` (vidax's
dispatch, ``pallas_tpu`` by default); a setting that fails to compile (tiles over the scoped
VMEM) is reported as such. ``--tiny``: one small shape through vidax's ``xla`` and
``blockwise`` attention and a 256³ matmul (a CPU smoke run of the script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_common import device_summary, matmul_peak, time_fn  # noqa: E402

DEFAULT_SETTINGS = (
    "flash:512,512,512",
    "flash:1024,1024,512",
    "flash:1024,1024,1024",
    "flash:2048,1024,512",
    "splash:512,512,512",
    "splash:1024,1024,512",
    "splash:1024,1024,1024",
    "splash:2048,1024,512",
    "splash:2048,2048,512",
    "vidax",
)


def run_setting(setting: str, q, k, v):
    """A jitted ``(q, k, v) -> out`` for ``setting`` on (B, L, N, K) inputs."""
    import jax
    import jax.numpy as jnp

    from vidax.nn.attention import dot_product_attention

    if setting == "vidax" or setting.startswith("vidax:"):
        impl = setting.partition(":")[2] or "pallas_tpu"
        return jax.jit(lambda q, k, v: dot_product_attention(q, k, v, implementation=impl))
    kind, sizes = setting.split(":")
    a, b, c = (int(x) for x in sizes.split(","))
    scale = 1.0 / q.shape[-1] ** 0.5
    if kind == "flash":
        from jax.experimental.pallas.ops.tpu import flash_attention as fa

        bs = fa.BlockSizes(block_q=a, block_k_major=b, block_k=c, block_b=1)

        def f(q, k, v):
            t = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
            return t(fa.flash_attention(t(q), t(k), t(v), sm_scale=scale, block_sizes=bs))

        return jax.jit(f)
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    n, lq, lk = q.shape[2], q.shape[1], k.shape[1]
    mask = sm.MultiHeadMask([sm.FullMask((lq, lk)) for _ in range(n)])
    kernel = sk.make_splash_mha_single_device(
        mask, block_sizes=sk.BlockSizes(block_q=a, block_kv=b, block_kv_compute=c)
    )

    def g(q, k, v):
        t = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
        out = jax.vmap(kernel)(t(q * jnp.asarray(scale, q.dtype)), t(k), t(v))
        return t(out)

    return jax.jit(g)


def main(argv: list[str] | None = None) -> list[dict]:
    """Run with ``argv`` (None: the command line); print and return the rows."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--shapes",
        nargs="+",
        type=int,
        default=[2, 32768, 12, 128, 2, 75776, 12, 128],
        help="B L N K quadruples, a flat list (L a multiple of 2048 for the largest tiles)",
    )
    p.add_argument("--settings", nargs="+", default=list(DEFAULT_SETTINGS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write JSON here")
    p.add_argument("--tiny", action="store_true", help="one small shape, vidax's xla and blockwise (CPU smoke run)")
    args = p.parse_args(argv)
    if args.tiny:
        args.shapes, args.settings, args.repeats = [1, 256, 2, 64], ["vidax:xla", "vidax:blockwise"], 1
    import jax
    import jax.numpy as jnp

    dev = device_summary()
    peak = matmul_peak(256, 1) if args.tiny else matmul_peak()
    print(json.dumps({"device": dev, "matmul_8192_tflops": peak}), flush=True)
    rows = []
    for i in range(0, len(args.shapes), 4):
        b, l, n, d = args.shapes[i : i + 4]
        keys = jax.random.split(jax.random.PRNGKey(0), 3)
        q, k, v = (jax.random.normal(key, (b, l, n, d), jnp.bfloat16) for key in keys)
        flops = 4 * b * n * l * l * d
        ref = None
        for setting in args.settings:
            row = {"shape_BLNK": [b, l, n, d], "setting": setting}
            try:
                fn = run_setting(setting, q, k, v)
                t0 = time.perf_counter()
                out = jax.block_until_ready(fn(q, k, v))
                row["compile_s"] = round(time.perf_counter() - t0, 2)
                best = time_fn(lambda: fn(q, k, v), args.repeats)
                row.update(
                    ms=round(best * 1e3, 2),
                    tflops=round(flops / best / 1e12, 1),
                    of_datasheet=round(flops / best / dev["peak_flops"], 3) if dev["peak_flops"] else None,
                    of_matmul=round(flops / best / 1e12 / peak, 3) if peak else None,
                )
                if ref is None:
                    ref = out
                else:  # the same attention: agree to bf16 rounding
                    err = float(jnp.max(jnp.abs(out.astype(jnp.float32) - ref.astype(jnp.float32))))
                    row["max_abs_diff_vs_first"] = round(err, 4)
            except Exception as e:  # noqa: BLE001 - a setting that cannot compile is a result
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": dev, "matmul_8192_tflops": peak, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
