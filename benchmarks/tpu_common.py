"""What the TPU benchmarks share: the device and its peak, a measured matmul peak, timing, HBM.

The datasheet peak is the chip's dense bfloat16 rate (:data:`PEAK_BF16_TFLOPS`, by
``device_kind``); the measured peak is an 8192³ bfloat16 matmul timed in the same run, so an
MFU can be read against both.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable

#: Dense bfloat16 TFLOP/s per chip (Google Cloud's TPU datasheets), by a substring of
#: ``jax.devices()[0].device_kind``, most specific first.
PEAK_BF16_TFLOPS = (
    ("v6 lite", 918.0),
    ("v6e", 918.0),
    ("v5 lite", 197.0),
    ("v5e", 197.0),
    ("v5p", 459.0),
    ("v5", 459.0),
    ("v4", 275.0),
    ("v3", 123.0),
    ("v2", 45.0),
)


def device_summary() -> dict:
    """The first device, its datasheet peak FLOP/s (None off TPU), JAX's version, the date."""
    import jax
    from step_bench import cpu_model

    d = jax.devices()[0]
    kind = d.device_kind
    peak = next((t for key, t in PEAK_BF16_TFLOPS if key in kind.lower()), None) if d.platform == "tpu" else None
    return {
        "platform": d.platform,
        "device_kind": kind,
        "devices": jax.device_count(),
        "peak_flops": None if peak is None else peak * 1e12,
        "jax": jax.__version__,
        "host_cpu": cpu_model(),
        "date": datetime.date.today().isoformat(),
    }


def time_fn(fn: Callable, repeats: int) -> float:
    """Best wall seconds of ``fn()`` (its result waited for) over ``repeats`` runs after one warm-up."""
    import jax

    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_peak(n: int = 8192, repeats: int = 5) -> float:
    """TFLOP/s of an ``n``³ bfloat16 matmul (float32 accumulation, bfloat16 result) here."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.PRNGKey(2), (n, n), jnp.bfloat16)
    f = jax.jit(lambda a, b: a @ b)
    return round(2 * n**3 / time_fn(lambda: f(a, b), repeats) / 1e12, 1)


def peak_hbm_gib() -> float | None:
    """The device allocator's peak bytes in use, GiB (None where the backend keeps no statistics)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else round(peak / 2**30, 2)


def report(row: dict, out: str | None) -> dict:
    """Print ``row`` as a ``RESULT {json}`` line and append it to the JSONL file ``out`` (if given)."""
    print("RESULT " + json.dumps(row), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return row
