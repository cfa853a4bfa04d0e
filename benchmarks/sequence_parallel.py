"""Ulysses sequence parallelism of the Wan transformer: per-device memory and step time for
sp = 1, 2, 4, 8 at one fixed long sequence, on a fake 8-device CPU mesh.

A Wan-shaped transformer (random weights, heads divisible by 8) runs one forward pass over
``T x H x W`` latents (``L = T * H/2 * W/2`` tokens, batch 1) on a ``(data=1, tensor=1,
sequence=sp)`` mesh of the first ``sp`` devices. Reported per configuration:

* XLA's per-device buffer assignment of the compiled step (``memory_analysis``): temporaries
  (activations: should fall roughly as 1/sp) and arguments (weights, replicated here);
* the median wall time of a step. The fake devices share this machine's cores, so the times
  show overheads, not speed-ups; run on a quiet machine.

    python benchmarks/sequence_parallel.py                         # L = 8 x 32 x 32 = 8192 tokens
    python benchmarks/sequence_parallel.py --latent 2 8 8 --dim 64 --sp 1 2 --repeats 1   # smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attention_memory import median_seconds, save_json  # noqa: E402 (this folder is on sys.path)


def build(args, mesh):
    import jax
    import numpy as np
    from flax import nnx

    from vidax.default_checkpoint import random_module
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.convert import TRANSFORMER_PARAM_AXES
    from vidax.models.wan.transformer import WanTransformer3DModel
    from vidax.parallel.placement import logical_placement

    cfg = WanTransformerConfig.from_config_dict(
        dict(
            patch_size=[1, 2, 2],
            num_attention_heads=args.heads,
            attention_head_dim=args.dim // args.heads,
            in_channels=16,
            out_channels=16,
            text_dim=64,
            freq_dim=64,
            ffn_dim=3 * args.dim,
            num_layers=args.layers,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            eps=1e-6,
            image_dim=None,
            added_kv_proj_dim=None,
            rope_max_seq_len=1024,
        )
    )
    make = lambda: WanTransformer3DModel(cfg, attention=args.attention, mesh=mesh, rngs=nnx.Rngs(0))  # noqa: E731
    host = random_module(make, np.random.default_rng(0))
    place = logical_placement(mesh, TRANSFORMER_PARAM_AXES)
    graphdef, state = nnx.split(host)
    flat = []
    for path, var in nnx.to_flat_state(state):
        value = var.get_value()
        flat.append(
            (path, var.replace(jax.device_put(value, place(path, jax.ShapeDtypeStruct(value.shape, value.dtype)))))
        )
    return cfg, graphdef, nnx.from_flat_state(flat)


def measure(sp: int, args) -> dict:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.parallel.mesh import make_mesh

    mesh = make_mesh(1, 1, sp, devices=jax.devices()[:sp])
    cfg, graphdef, params = build(args, mesh)
    t, h, w = args.latent
    x = jax.random.normal(jax.random.PRNGKey(1), (1, t, h, w, cfg.in_channels), jnp.float32)
    ts = jnp.full((1,), 500.0, jnp.float32)
    text = jax.random.normal(jax.random.PRNGKey(2), (1, 32, cfg.text_dim), jnp.float32)
    fn = jax.jit(lambda p, x, t, c: nnx.merge(graphdef, p)(x, t, c))
    t0 = time.perf_counter()
    compiled = fn.lower(params, x, ts, text).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()

    def step():
        compiled(params, x, ts, text).block_until_ready()

    step()  # warm-up
    return dict(
        sp=sp,
        tokens=t * (h // 2) * (w // 2),
        temp_mib=mem.temp_size_in_bytes / 2**20,
        args_mib=mem.argument_size_in_bytes / 2**20,
        out_mib=mem.output_size_in_bytes / 2**20,
        compile_s=compile_s,
        step_s=median_seconds(step, args.repeats),
    )


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latent", type=int, nargs=3, default=[8, 64, 64], metavar=("T", "H", "W"))
    p.add_argument("--sp", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--dim", type=int, default=512, help="model width D (heads x head dim)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--attention", default="blockwise")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)

    import jax

    t, h, w = args.latent
    print(
        f"Wan-shaped DiT D={args.dim} N={args.heads} layers={args.layers}, L={t * (h // 2) * (w // 2)} tokens, "
        f"attention={args.attention}, {jax.device_count()} {jax.default_backend()} devices"
    )
    print(f"{'sp':>3} {'temp MiB/dev':>13} {'args MiB/dev':>13} {'out MiB/dev':>12} {'compile s':>10} {'step s':>8}")
    rows = []
    for sp in args.sp:
        row = measure(sp, args)
        rows.append(row)
        print(
            f"{sp:>3} {row['temp_mib']:>13.1f} {row['args_mib']:>13.1f} {row['out_mib']:>12.2f} "
            f"{row['compile_s']:>10.2f} {row['step_s']:>8.3f}",
            flush=True,
        )
    save_json(args.json, args, rows)
    return rows


if __name__ == "__main__":
    main()
