"""GPU attention: cuDNN flash (``cudnn``) vs materialised (``xla``) vs ``blockwise``, bf16.

Needs an NVIDIA GPU (exits with a message elsewhere). For each sequence length and
implementation: the numerical difference from ``blockwise`` in float32 (the reference), XLA's
temporary bytes for the compiled call, the device's peak bytes in use around it (each
configuration runs in a fresh subprocess, so peaks do not mix) and the median time per call.
``xla`` above ``--max-xla-gib`` of scores is skipped. Also runs the padded form
(``SegmentIds.for_padding``, cuDNN's sequence lengths) at each length.

    python benchmarks/gpu_cudnn_vs_xla.py                                 # L = 4k ... 64k, N=12, K=128
    python benchmarks/gpu_cudnn_vs_xla.py --lengths 1024 --repeats 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from attention_memory import median_seconds, save_json  # noqa: E402 (this folder is on sys.path)


def one(impl: str, length: int, padded: bool, args) -> dict:
    """Run in a child process: one implementation at one length."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.nn.attention import SegmentIds, dot_product_attention

    shape = (args.batch, length, args.heads, args.head_dim)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, shape, jnp.float32) for key in keys)
    seg = SegmentIds.for_padding(args.batch, length, length, length - 17, length - 17) if padded else None
    qb, kb, vb = (t.astype(jnp.bfloat16) for t in (q, k, v))
    fn = jax.jit(lambda q, k, v, s: dot_product_attention(q, k, v, implementation=impl, segment_ids=s))
    compiled = fn.lower(qb, kb, vb, seg).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    out = compiled(qb, kb, vb, seg).block_until_ready()
    step_s = median_seconds(lambda: compiled(qb, kb, vb, seg).block_until_ready(), args.repeats)
    ref = dot_product_attention(q, k, v, implementation="blockwise", segment_ids=seg)
    valid = length - 17 if padded else length
    diff = np.abs(np.asarray(out[:, :valid], np.float32) - np.asarray(ref[:, :valid]))
    stats = jax.local_devices()[0].memory_stats() or {}
    return dict(
        impl=impl,
        length=length,
        padded=padded,
        temp_gib=temp / 2**30,
        peak_gib=stats.get("peak_bytes_in_use", 0) / 2**30,
        step_s=step_s,
        max_abs_err_vs_fp32=float(diff.max()),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536])
    p.add_argument("--impls", nargs="+", default=["cudnn", "xla", "blockwise"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-xla-gib", type=float, default=40.0, help="skip xla when its fp32 scores exceed this")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--child", nargs=3, metavar=("IMPL", "L", "PADDED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:
        impl, length, padded = args.child[0], int(args.child[1]), args.child[2] == "1"
        print("ROW " + json.dumps(one(impl, length, padded, args)))
        return None

    import jax

    if jax.default_backend() != "gpu":
        print(f"no GPU here (backend {jax.default_backend()!r}); this benchmark needs an NVIDIA GPU")
        return []
    print(f"{jax.devices()[0].device_kind}: B={args.batch} N={args.heads} K={args.head_dim} bfloat16")
    print(f"{'L':>7} {'impl':>10} {'pad':>4} {'temp GiB':>9} {'peak GiB':>9} {'time ms':>9} {'err vs fp32':>12}")
    rows = []
    base = [
        sys.executable,
        os.path.abspath(__file__),
        "--batch",
        str(args.batch),
        "--heads",
        str(args.heads),
        "--head-dim",
        str(args.head_dim),
        "--repeats",
        str(args.repeats),
    ]
    for length in args.lengths:
        for impl in args.impls:
            scores_gib = args.batch * args.heads * length * length * 4 / 2**30
            for padded in (False, True):
                if impl == "xla" and scores_gib > args.max_xla_gib:
                    print(f"{length:>7} {impl:>10} {int(padded):>4}   skipped ({scores_gib:.0f} GiB of scores)")
                    continue
                r = subprocess.run(
                    base + ["--child", impl, str(length), str(int(padded))], capture_output=True, text=True, cwd=ROOT
                )
                line = next((ln for ln in r.stdout.splitlines() if ln.startswith("ROW ")), None)
                if line is None:
                    print(f"{length:>7} {impl:>10} {int(padded):>4}   failed: {r.stderr.strip().splitlines()[-1:]}")
                    continue
                row = json.loads(line[4:])
                rows.append(row)
                print(
                    f"{length:>7} {impl:>10} {int(padded):>4} {row['temp_gib']:>9.3f} {row['peak_gib']:>9.3f} "
                    f"{1e3 * row['step_s']:>9.2f} {row['max_abs_err_vs_fp32']:>12.2e}",
                    flush=True,
                )
    save_json(args.json, args, rows)
    return rows


if __name__ == "__main__":
    main()
