"""8-bit and GGUF weights of Wan2.1-T2V-14B: bytes per device, and the speed of a step.

1. Parameter bytes per device of the full-size transformer (abstract shapes via ``eval_shape``,
   no weights) on one device and on ``tp`` = 2 / 4 / 8, for bfloat16, int8 and fp8 weights and
   for Q8_0 / Q4_K GGUF files, whose Linear weights stay their blocks on the device
   (:mod:`vidax.nn.gguf`; every Linear kernel whose inputs are whole blocks, as city96's
   files; the rest bfloat16, the precision policy's float32)
   (:func:`vidax.parallel.placement.per_device_bytes`, what ``vidax inspect --mesh`` prints);
   and a Q4_K_M-style file whose value projections and FFN-down mix Q4_K and Q6_K across the
   layers (:func:`q4_k_m_kinds`): kept as blocks padded to Q6_K's rows, against the same file
   before (those stacks dequantized on the host, bfloat16) and its own bytes.
2. One transformer call with CFG's batch of 2 at the 14B width, reduced depth: bfloat16, int8
   and GGUF Q8_0 / Q4_K weights (blocks of random codes with small float16 scales, dequantized
   inside each matmul), on this machine (CPU by default); the CPU model and load average printed.

    python benchmarks/quantized_weights.py                 # 2 layers, latent 1x16x16, 3 timed steps
    python benchmarks/quantized_weights.py --layers 1 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "reference_configs", "Wan-AI__Wan2.1-T2V-14B-Diffusers", "transformer", "config.json")
#: GGUF types timed and their float16 fields (byte offsets in a block: scales, minimums).
GGUF_F16_FIELDS = {"Q8_0": (0,), "Q4_K": (0, 2)}


def wan_config(**overrides):
    from vidax.models.wan.config import WanTransformerConfig

    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg.update(overrides)
    return WanTransformerConfig.from_config_dict(cfg, source=CONFIG)


def random_blocks(shape: tuple[int, ...], kind: str, rng) -> np.ndarray:
    """Kept GGUF kernel bytes ``shape`` (``(..., n_bytes, D_out)``, :mod:`vidax.nn.gguf`) of
    ``kind``: random codes, every float16 field 1e-3 (finite values of a realistic size)."""
    import numpy as np

    from vidax.nn.gguf import BLOCKS

    size = BLOCKS[kind][1]
    out = rng.integers(0, 256, shape, dtype=np.uint8)
    field = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    for off in GGUF_F16_FIELDS[kind]:
        for j in range(2):
            out[..., off + j :: size, :] = field[j]
    return out


#: The stacked Linears a Q4_K_M-style file gives Q6_K on some layers (llama.cpp's Q4_K_M rule for
#: ``attn_v`` / ``ffn_down``, on Wan's value projections and FFN-down).
Q6_K_STACKS = (
    ("blocks", "attn1", "to_v", "kernel"),
    ("blocks", "attn2", "to_v", "kernel"),
    ("blocks", "ffn", "net", 2, "kernel"),
)


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's ``use_more_bits``: the layers a ``*_M`` type gives the larger type."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def q4_k_m_kinds(module, keep_fp32) -> dict:
    """Path -> GGUF type of each kept kernel of a Q4_K_M-style file of ``module``: Q4_K, but
    the :data:`Q6_K_STACKS`, whose layers are Q6_K where :func:`more_bits` (a tuple per layer)."""
    from vidax.nn.gguf import keepable

    kinds = keepable(module, "Q4_K", keep_fp32)
    n = module.config.num_layers
    for path in Q6_K_STACKS:
        kinds[path] = tuple("Q6_K" if more_bits(i, n) else "Q4_K" for i in range(n))
    return kinds


def sizes(spec) -> list[str]:
    import jax.numpy as jnp
    from flax import nnx

    from vidax.nn.gguf import BLOCKS, keep_gguf
    from vidax.parallel.placement import per_device_bytes

    cfg = wan_config()
    make = lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0))  # noqa: E731
    lines = ["| weights | 1 device | tp=2 | tp=4 | tp=8 |", "|---|---|---|---|---|"]
    for name, fmt in (
        ("bfloat16", None),
        ("int8", "int8"),
        ("fp8 (float8_e4m3fn)", "float8_e4m3fn"),
        ("GGUF Q8_0 (blocks on the device)", "Q8_0"),
        ("GGUF Q4_K (blocks on the device)", "Q4_K"),
    ):
        row = [per_device_bytes(make, spec.axes(), {"tp": tp}, jnp.bfloat16, spec.fp32(), fmt) for tp in (1, 2, 4, 8)]
        lines.append(f"| {name} | " + " | ".join(f"{b / 2**30:.2f} GiB" for b in row) + " |")
    # The Q4_K_M-style file: its mixed stacks kept (padded to Q6_K), and as before (dequantized
    # on the host: bfloat16 on the device).
    abstract = nnx.eval_shape(make)
    kinds = q4_k_m_kinds(abstract, spec.fp32())
    before = {p: k for p, k in kinds.items() if isinstance(k, str)}
    for name, ks in (
        ("GGUF Q4_K_M-style mix, mixed stacks kept (padded to Q6_K)", kinds),
        ("GGUF Q4_K_M-style mix, before (mixed stacks dequantized on the host)", before),
    ):
        row = [
            per_device_bytes(lambda k=ks: keep_gguf(make(), k), spec.axes(), {"tp": tp}, jnp.bfloat16, spec.fp32())
            for tp in (1, 2, 4, 8)
        ]
        lines.append(f"| {name} | " + " | ".join(f"{b / 2**30:.2f} GiB" for b in row) + " |")
    # the mixed stacks alone: bytes on one device kept (padded), in the file, dequantized to bfloat16
    d_in = {p: v.get_value().shape[-2:] for p, v in nnx.to_flat_state(nnx.state(abstract)) if p in Q6_K_STACKS}
    per_value = lambda k: BLOCKS[k][1] / BLOCKS[k][0]  # noqa: E731
    padded = sum(len(kinds[p]) * (d * o * per_value("Q6_K") + 4) for p, (d, o) in d_in.items())
    own = sum(sum(d * o * per_value(k) for k in kinds[p]) for p, (d, o) in d_in.items())
    dense = sum(len(kinds[p]) * d * o * 2 for p, (d, o) in d_in.items())
    n6 = sum(k == "Q6_K" for k in kinds[Q6_K_STACKS[0]])
    lines.append(
        f"\nThe {len(d_in)} mixed stacks ({n6} of {cfg.num_layers} layers Q6_K): kept {padded / 2**30:.2f} "
        f"GiB (padded to Q6_K), their bytes in the file {own / 2**30:.2f} GiB, dequantized to bfloat16 "
        f"{dense / 2**30:.2f} GiB"
    )
    return lines


def step_speed(spec, layers: int, latent: tuple[int, int, int], steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from step_bench import fill_params, time_steps

    from vidax.nn.gguf import BLOCKS, keep_all
    from vidax.nn.quant import _at, quantizable_kernels, quantize_module
    from vidax.weights.loader import DtypePolicy

    cfg = wan_config(num_layers=layers)
    make = lambda: spec.model_class()(cfg, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))  # noqa: E731
    t, h, w = latent
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, t, h, w, cfg.in_channels)), jnp.bfloat16)
    ts = jnp.asarray([500.0, 500.0], jnp.float32)
    ctx = jnp.asarray(rng.standard_normal((2, 512, cfg.text_dim)) * 0.1, jnp.bfloat16)
    out = {}
    for fmt in (None, "int8", "Q8_0", "Q4_K"):
        build = make
        if fmt in BLOCKS:
            build = lambda f=fmt: keep_all(make(), f, spec.fp32())  # noqa: E731
        graphdef, params = fill_params(build, DtypePolicy(jnp.bfloat16, spec.fp32()))
        model = nnx.merge(graphdef, params)
        if fmt in BLOCKS:
            for path in quantizable_kernels(model):
                layer = _at(model, path[:-1])
                if layer.kernel_gguf is not None:
                    layer.kernel = layer.kernel.replace(jnp.asarray(random_blocks(layer.kernel[...].shape, fmt, rng)))
        elif fmt:
            quantize_module(model, fmt, spec.fp32())
        gd, state = nnx.split(model)
        fwd = jax.jit(lambda s, x: nnx.merge(gd, s)(x, ts, ctx).astype(x.dtype))
        t0 = time.perf_counter()
        y = fwd(state, x)
        y.block_until_ready()
        compile_s = time.perf_counter() - t0
        _, times = time_steps(lambda v, state=state: fwd(state, v), x, steps, lambda v: v.block_until_ready())
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

    print(
        f"\nOne transformer call, CFG batch 2, 14B width, {args.layers} of 40 layers, latent "
        f"{tuple(args.latent)}, 512 text tokens, {jax.devices()[0].platform} ({cpu_model()}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start):"
    )
    for name, r in step_speed(spec, args.layers, tuple(args.latent), args.steps).items():
        print(f"  {name}: {r['step_s']} s per call (compile {r['compile_s']} s)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
