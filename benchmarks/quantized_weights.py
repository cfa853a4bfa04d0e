"""8-bit and GGUF weights of Wan2.1-T2V-14B: bytes per device, and the speed of an int8 step.

1. Parameter bytes per device of the full-size transformer (abstract shapes via ``eval_shape``,
   no weights) on one device and on ``tp`` = 2 / 4 / 8, for bfloat16, int8 and fp8 weights
   (:func:`vidax.parallel.placement.per_device_bytes`, what ``vidax inspect --mesh`` prints), and
   the size of the transformer as Q8_0 / Q4_K GGUF files (city96's layout: every 2-D weight
   whose rows split in the type's blocks quantized, the rest float32). vidax dequantizes a GGUF
   file as it reads it, so on the device it holds what ``--dtype`` / ``--weights`` say; the
   GGUF figure is the file (and the host memory a reader maps).
2. One transformer call with CFG's batch of 2 at the 14B width, reduced depth, bfloat16 vs int8
   weights, on this machine (CPU by default).

    python benchmarks/quantized_weights.py                 # 2 layers, latent 1x16x16, 3 timed steps
    python benchmarks/quantized_weights.py --layers 1 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "reference_configs", "Wan-AI__Wan2.1-T2V-14B-Diffusers", "transformer", "config.json")
#: GGUF types: (values per block, bytes per block).
GGUF = {"Q8_0": (32, 34), "Q4_K": (256, 144)}


def wan_config(**overrides):
    from vidax.models.wan.config import WanTransformerConfig

    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg.update(overrides)
    return WanTransformerConfig.from_config_dict(cfg, source=CONFIG)


def gguf_bytes(make, kind: str) -> int:
    """Bytes of the transformer as a GGUF file of ``kind`` (tensor data only)."""
    import numpy as np

    from vidax.weights.loader import abstract_params

    block, size = GGUF[kind]
    total = 0
    for path, var in abstract_params(make)[1].items():
        shape = var.get_value().shape
        n = int(np.prod(shape))
        d_in = shape[-2] if path[-1] == "kernel" and len(shape) >= 2 else None
        if path[-1] == "kernel" and len(shape) in (2, 3) and d_in % block == 0:
            total += n // block * size
        else:
            total += 4 * n
    return total


def sizes(spec) -> list[str]:
    import jax.numpy as jnp
    from flax import nnx

    from vidax.parallel.placement import per_device_bytes

    cfg = wan_config()
    make = lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0))  # noqa: E731
    lines = ["| weights | 1 device | tp=2 | tp=4 | tp=8 |", "|---|---|---|---|---|"]
    for name, fmt in (("bfloat16", None), ("int8", "int8"), ("fp8 (float8_e4m3fn)", "float8_e4m3fn")):
        row = [per_device_bytes(make, spec.axes(), {"tp": tp}, jnp.bfloat16, spec.fp32(), fmt) for tp in (1, 2, 4, 8)]
        lines.append(f"| {name} | " + " | ".join(f"{b / 2**30:.2f} GiB" for b in row) + " |")
    for kind in GGUF:
        lines.append(f"| GGUF {kind} file (loads as bf16 / --weights int8) | {gguf_bytes(make, kind) / 2**30:.2f} GiB "
                     "| | | |")
    return lines


def step_speed(spec, layers: int, latent: tuple[int, int, int], steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from step_bench import fill_params, time_steps
    from vidax.nn.quant import quantize_module
    from vidax.weights.loader import DtypePolicy

    cfg = wan_config(num_layers=layers)
    make = lambda: spec.model_class()(cfg, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))  # noqa: E731
    t, h, w = latent
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, t, h, w, cfg.in_channels)), jnp.bfloat16)
    ts = jnp.asarray([500.0, 500.0], jnp.float32)
    ctx = jnp.asarray(rng.standard_normal((2, 512, cfg.text_dim)) * 0.1, jnp.bfloat16)
    out = {}
    for fmt in (None, "int8"):
        graphdef, params = fill_params(make, DtypePolicy(jnp.bfloat16, spec.fp32()))
        model = nnx.merge(graphdef, params)
        if fmt:
            quantize_module(model, fmt, spec.fp32())
        gd, state = nnx.split(model)
        fwd = jax.jit(lambda s, x: nnx.merge(gd, s)(x, ts, ctx).astype(x.dtype))
        t0 = time.perf_counter()
        y = fwd(state, x)
        y.block_until_ready()
        compile_s = time.perf_counter() - t0
        _, times = time_steps(lambda v: fwd(state, v), x, steps, lambda v: v.block_until_ready())
        out[fmt or "bfloat16"] = dict(compile_s=round(compile_s, 1), step_s=round(min(times), 3))
        del model, state, params
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--latent", type=int, nargs=3, default=(1, 16, 16), metavar=("T", "H", "W"))
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    from step_bench import cpu_model
    from vidax.registry import registry

    spec = registry().component("WanTransformer3DModel")
    print("Wan2.1-T2V-14B transformer parameters per device (full size, from shapes):")
    print("\n".join(sizes(spec)))
    import jax

    print(f"\nOne transformer call, CFG batch 2, 14B width, {args.layers} of 40 layers, latent "
          f"{tuple(args.latent)}, 512 text tokens, {jax.devices()[0].platform} ({cpu_model()}):")
    for name, r in step_speed(spec, args.layers, tuple(args.latent), args.steps).items():
        print(f"  {name}: {r['step_s']} s per call (compile {r['compile_s']} s)")


if __name__ == "__main__":
    main()
