"""Wan VAE decode at the reference size on one accelerator: cold (compiles) and warm.

The released Wan2.1 VAE config (``reference_configs/``), random weights, latents of a
480x832x81 video (21x60x104, 16 channels) by default. Reported: the first decode's seconds
(compiles included) with the time of each chunk's first call (chunk 0 is the first latent frame,
its own program; the later chunks share one), the number of XLA compilations and how many came
from the persistent compile cache, then the best of ``--repeats`` warm decodes and the peak HBM.

Run it twice with the same ``--cache-dir``: the second process reads the compiled programs back
from the persistent cache (``vidax.compile_cache``) instead of compiling.

    python benchmarks/tpu_vae.py --cache-dir /tmp/vidax-cc          # cold, then again: cached
    python benchmarks/tpu_vae.py --latent 2 8 8 --dtype float32       # smoke (any backend)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tpu_common import device_summary, peak_hbm_gib  # noqa: E402

VAE_CONFIG = os.path.join(ROOT, "reference_configs", "Wan-AI__Wan2.1-T2V-1.3B-Diffusers", "vae", "config.json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latent", nargs=3, type=int, default=[21, 60, 104], metavar=("T", "H", "W"))
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the VAE's dtype")
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "default"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cache-dir", default=None, help="persistent compile cache folder (default: off)")
    args = p.parse_args()

    import jax

    if args.cache_dir:
        os.environ["VIDAX_COMPILE_CACHE"] = args.cache_dir
        from vidax.compile_cache import setup_compile_cache

        setup_compile_cache()
    else:
        jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from vidax.compile_cache import count_compiles
    from vidax.models.wan import vae as mod
    from vidax.models.wan.config import WanVAEConfig

    with open(VAE_CONFIG) as f:
        config = WanVAEConfig.from_config_dict(json.load(f))
    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[args.dtype]
    graphdef, state = nnx.split(nnx.eval_shape(lambda: mod.WanVAE(config, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(0)
    state = jax.tree.map(lambda s: jax.device_put((rng.standard_normal(s.shape) * 0.05).astype(s.dtype)), state)
    vae = nnx.merge(graphdef, state)
    t, h, w = args.latent
    z = rng.standard_normal((1, t, h, w, config.z_dim)).astype(np.float32)
    row = {"device": device_summary(), "latent_THW": [t, h, w], "dtype": args.dtype,
           "matmul_precision": args.matmul_precision, "compile_cache": args.cache_dir}
    with jax.default_matmul_precision(args.matmul_precision):
        first = []
        t0 = time.perf_counter()
        with count_compiles() as counts:
            for chunk in vae.iter_decode(z):
                first.append(round(time.perf_counter() - t0 - sum(first), 2))
        row.update(cold_s=round(time.perf_counter() - t0, 1), cold_chunk_s=first[:4] + (["..."] if len(first) > 4 else []),
                   compiles=counts.compiled, from_cache=counts.from_cache)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = vae.decode(z)
            best = min(best, time.perf_counter() - t0)
        row.update(warm_s=round(best, 2), frames=int(out.shape[1]), peak_hbm_gib=peak_hbm_gib(),
                   finite=bool(np.isfinite(out).all()))
    print("RESULT " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
