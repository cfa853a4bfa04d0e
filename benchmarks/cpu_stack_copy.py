"""What XLA:CPU's copy of a stacked bf16 weight costs, and what passing the stack as uint16 saves.

``vidax.nn.stack.scan_layers`` bitcasts each 16-bit stack to uint16 inside the jitted step so that
the per-layer dynamic-slice stays 16-bit on CPU; XLA:CPU materialises that bitcast as a copy of the
whole stack on every call. Here a toy layer loop (``--layers`` layers of two bf16 weights
``D x F`` and ``F x D``, ``--tokens`` rows, the float32-result dots vidax uses) runs three ways:

* ``bf16_in``: the stack comes in as bf16 and is bitcast to uint16 in the jit (today's form);
* ``bits_in``: the stack comes in as uint16 and is bitcast to bf16 then back in the jit (XLA folds
  the two bitcasts: no whole-stack copy);
* ``plain``: bf16 slices without the bitcast (XLA:CPU upcasts the stack to float32).

Each form prints the whole-stack instructions of its compiled HLO and the median of ``--repeats``
calls, forms interleaved so load drifts hit all three.

    python benchmarks/cpu_stack_copy.py
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_bench import configure_xla_threads, cpu_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()
    configure_xla_threads(args.threads)
    import jax
    import jax.numpy as jnp

    def layer(c, a, b):
        h = jnp.dot(c, a, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
        return jnp.dot(h, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)

    def run(form):
        def f(x, w1, w2):
            if form == "bits_in":
                w1, w2 = (jax.lax.bitcast_convert_type(w, jnp.bfloat16) for w in (w1, w2))
            if form == "plain":
                return jax.lax.scan(lambda c, ws: (layer(c, *ws), None), x, (w1, w2))[0]
            bits = tuple(jax.lax.bitcast_convert_type(w, jnp.uint16) for w in (w1, w2))
            return jax.lax.scan(
                lambda c, ws: (layer(c, *(jax.lax.bitcast_convert_type(w, jnp.bfloat16) for w in ws)), None), x, bits
            )[0]

        return f

    w1 = jnp.full((args.layers, args.dim, args.ffn), 0.01, jnp.bfloat16)
    w2 = jnp.full((args.layers, args.ffn, args.dim), 0.01, jnp.bfloat16)
    x = jnp.full((args.tokens, args.dim), 0.01, jnp.bfloat16)
    forms = {}
    for form in ("bf16_in", "bits_in", "plain"):
        ws = tuple(jax.lax.bitcast_convert_type(w, jnp.uint16) for w in (w1, w2)) if form == "bits_in" else (w1, w2)
        compiled = jax.jit(run(form)).lower(x, *ws).compile()
        stack = [
            ln.strip().split(",")[0]
            for ln in compiled.as_text().splitlines()
            if re.search(rf"= \w+\[{args.layers},", ln)
            and "parameter(" not in ln
            and "get-tuple-element(" not in ln
            and " tuple(" not in ln
        ]
        forms[form] = (compiled, ws, stack, [])
        print(f"{form}: whole-stack instructions: {stack or 'none'}")
    out = {f: c(x, *ws).block_until_ready() for f, (c, ws, _, _) in forms.items()}
    assert all(bool(jnp.array_equal(out["bf16_in"], o)) for o in out.values())
    for _ in range(args.repeats):
        for compiled, ws, _, times in forms.values():
            t0 = time.perf_counter()
            compiled(x, *ws).block_until_ready()
            times.append(time.perf_counter() - t0)
    print(
        f"CPU: {cpu_model()}, {args.threads} threads, load {os.getloadavg()[0]:.1f}; {args.layers} layers "
        f"{args.dim}x{args.ffn} bf16, {args.tokens} tokens"
    )
    for form, (_, _, _, times) in forms.items():
        print(f"  {form:8s} median {statistics.median(times) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
