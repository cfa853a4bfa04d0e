"""Attention memory and time, ``blockwise`` (online-softmax flash in plain JAX) vs ``xla``
(materialised scores), on the CPU, for growing sequence lengths.

For each length L and implementation the script compiles ``dot_product_attention`` on
``(B, L, N, K)`` q/k/v and reports XLA's buffer assignment for it (temporary bytes: the scores
for ``xla``, one block of them for ``blockwise``) and, when that fits under ``--max-run-gib``,
the measured time per call (median of ``--repeats``). Lengths whose temporaries exceed the
limit are compiled but not run ("skipped").

    python benchmarks/attention_memory.py                          # L = 4k ... 64k, N=12, K=128
    python benchmarks/attention_memory.py --lengths 256 512 --heads 2 --head-dim 16 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_seconds(call, repeats: int) -> float:
    """Median wall time of ``call()`` (which blocks until its result is ready) over ``repeats``."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def save_json(path: str | None, args, rows: list[dict]) -> None:
    """Write the settings and rows to ``path`` (nothing when None)."""
    if path:
        with open(path, "w") as f:
            json.dump(dict(settings=vars(args), rows=rows), f, indent=2)


def measure(impl: str, length: int, args) -> dict:
    import jax
    import jax.numpy as jnp

    from vidax.nn.attention import dot_product_attention

    dtype = jnp.dtype(args.dtype)
    shape = (args.batch, length, args.heads, args.head_dim)
    sds = jax.ShapeDtypeStruct(shape, dtype)
    fn = jax.jit(lambda q, k, v: dot_product_attention(q, k, v, implementation=impl, block_size=args.block_size))
    t0 = time.perf_counter()
    compiled = fn.lower(sds, sds, sds).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    temp = int(getattr(mem, "temp_size_in_bytes", 0))
    io = int(getattr(mem, "argument_size_in_bytes", 0)) + int(getattr(mem, "output_size_in_bytes", 0))
    row = dict(impl=impl, length=length, temp_gib=temp / 2**30, args_out_gib=io / 2**30, compile_s=compile_s)
    if (temp + io) / 2**30 > args.max_run_gib:
        row["step_s"] = None
        return row
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, shape, jnp.float32).astype(dtype) for key in keys)
    compiled(q, k, v).block_until_ready()  # warm-up
    row["step_s"] = median_seconds(lambda: compiled(q, k, v).block_until_ready(), args.repeats)
    return row


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536])
    p.add_argument("--impls", nargs="+", default=["blockwise", "xla"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=12, help="N (Wan2.1 1.3B: 12)")
    p.add_argument("--head-dim", type=int, default=128, help="K")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--block-size", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-run-gib", type=float, default=8.0, help="do not run configurations needing more")
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)

    import jax

    print(
        f"attention on {jax.default_backend()} ({os.cpu_count()} CPUs): B={args.batch} N={args.heads} "
        f"K={args.head_dim} {args.dtype}, block {args.block_size}"
    )
    print(f"{'L':>7} {'impl':>10} {'temp GiB':>10} {'q/k/v/out GiB':>14} {'compile s':>10} {'time s':>10}")
    rows = []
    for length in args.lengths:
        for impl in args.impls:
            row = measure(impl, length, args)
            rows.append(row)
            step = "skipped" if row["step_s"] is None else f"{row['step_s']:.4f}"
            print(
                f"{length:>7} {impl:>10} {row['temp_gib']:>10.3f} {row['args_out_gib']:>14.3f} "
                f"{row['compile_s']:>10.2f} {step:>10}",
                flush=True,
            )
    save_json(args.json, args, rows)
    return rows


if __name__ == "__main__":
    main()
