"""Block offloading: chunk-size sweep of a Wan2.1 transformer (1.3B on CPU, 14B on a GPU).

For each chunk size N (and the resident model as the baseline), one subprocess builds the real
transformer config (``--model``) with random weights (``step_bench.fill_params``), moves its blocks to
host memory in chunks of N (``vidax.parallel.offload.offload_module``; on CPU the ``pinned_host``
memory kind) and times the streamed denoising step (``ChunkedStep``: the transformer on the cond +
uncond batch of 2, guidance, one UniPC update), exactly what ``WanPipeline`` runs per step with
``offload=N``. Reported per configuration:

* s/step: best of ``--steps`` timed steps after one warm-up;
* peak device memory in use (GPU / TPU: the allocator's ``peak_bytes_in_use``, weights,
  activations and XLA's temporaries);
* peak device-resident bytes: live-array accounting (``vidax.stats.live_array_bytes``: arrays in
  device memory, host memory kinds excluded) sampled after every chunk is dispatched and after
  each step; weights plus the arrays alive between jitted calls (XLA's temporaries inside one
  call are not live arrays);
* the offloaded / resident step-time ratio.

On CPU "host" and "device" are the same memory, so the transfer is a memcpy and the ratio shows
the cost of the chunked execution (more dispatches, a wait per chunk, the copy itself), not a
PCIe link. On a GPU the chunks wait in ``pinned_host`` memory and cross the host link.

    python benchmarks/offload_sweep.py                                  # latent 5x32x32, N = 1 2 4 8 all
    python benchmarks/offload_sweep.py --model 14B --num-layers 12 --dtype bfloat16 --latent 21 60 104 \
        --threads 0 --out docs/benchmarks/offload_sweep_14b_gpu          # on a GPU
    python benchmarks/offload_sweep.py --num-layers 6 --latent 1 8 8 --steps 1 --out /tmp/smoke   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from step_bench import (
    ROOT,
    configure_xla_threads,
    cpu_model,
    peak_rss_gib,
    prepare_jax,
    run_child,
    save_report,
    time_steps,
)
from wan_step import CONFIG_1_3B, CONFIG_14B, SCHEDULER, TEXT_LEN

CONFIGS = {"1.3B": CONFIG_1_3B, "14B": CONFIG_14B}


def run_config(
    chunk: str, dtype_name: str, latent, steps: int, threads: int, num_layers, model_name: str = "1.3B"
) -> dict:
    """One configuration in this process: ``chunk`` is "resident", an int or "all"."""
    if threads > 0:
        configure_xla_threads(threads)
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.wan.transformer import WanTransformer3DModel
    from vidax.parallel.chunked_step import ChunkedStep
    from vidax.parallel.offload import offload_module, offloaded_blocks
    from vidax.stats import device_memory_stats, live_array_bytes

    config = CONFIGS[model_name] if num_layers is None else dict(CONFIGS[model_name], num_layers=num_layers)
    cfg = WanTransformerConfig.from_config_dict(config)
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: WanTransformer3DModel(cfg, dtype=d, param_dtype=d, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t, h, w, cfg.in_channels),
        (2, TEXT_LEN, cfg.text_dim),
        SCHEDULER,
        steps,
    )
    graphdef, context, sched, dtype = b.graphdef, b.context, b.sched, b.dtype
    model = nnx.merge(graphdef, b.params)
    del b  # the model holds the only reference to the weights

    def model_args(latents, state, context):
        xin = jnp.concatenate([latents, latents]).astype(dtype)
        return xin, jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,)), context

    def finish(out, latents, state, context):
        cond, uncond = jnp.split(out, 2)
        return sched.step(state, uncond + 5.0 * (cond - uncond), latents)

    peak = [0]

    def sample():
        peak[0] = max(peak[0], live_array_bytes())

    x = jax.random.normal(jax.random.PRNGKey(1), (1, t, h, w, cfg.in_channels), jnp.float32)
    state = sched.set_timesteps(steps + 1, sample_shape=x.shape)
    t0 = time.perf_counter()
    if chunk == "resident":

        def step(params, latents, state, context):
            m = nnx.merge(graphdef, params)
            return finish(m(*model_args(latents, state, context)), latents, state, context)

        params = nnx.state(model)
        compiled = jax.jit(step, donate_argnums=(1,)).lower(params, x, state, context).compile()
        sizes = [cfg.num_layers]
    else:
        offload_module(model, chunk if chunk == "all" else int(chunk))
        blocks = offloaded_blocks(model)
        sizes = blocks.sizes
        params = nnx.state(model)
        compiled = (
            ChunkedStep(nnx.graphdef(model), blocks, model_args, finish).lower(params, x, state, context).compile()
        )
        compiled.on_chunk = sample
    compile_s = time.perf_counter() - t0
    sample()

    def one(c):
        out = compiled(params, c[0], c[1], context)
        sample()
        return out

    (x, state), times = time_steps(one, (x, state), steps, lambda c: c[0].block_until_ready())
    assert bool(jnp.isfinite(x).all())
    allocator_peak = max((s.get("peak_bytes_in_use", 0) for s in device_memory_stats()), default=0)
    return {
        "chunk": chunk,
        "chunk_sizes": sizes,
        "compile_s": compile_s,
        "step_s": min(times),
        "step_s_all": times,
        "peak_device_bytes": peak[0],
        "peak_allocator_bytes": allocator_peak,
        "peak_rss_gib": peak_rss_gib(),
        "device": jax.devices()[0].device_kind,
        "host_memory_kind": None if chunk == "resident" else blocks.memory_kind,
    }


def main() -> None:
    p = argparse.ArgumentParser(description="Wan2.1 block-offloading chunk sweep")
    p.add_argument("--model", default="1.3B", choices=sorted(CONFIGS), help="Wan2.1-T2V transformer config")
    p.add_argument("--chunks", nargs="+", default=["1", "2", "4", "8", "all"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--latent", nargs=3, type=int, default=[5, 32, 32], metavar=("T", "H", "W"))
    p.add_argument("--steps", type=int, default=2, help="timed steps per configuration (after one warm-up)")
    p.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="XLA CPU threads; 0: leave XLA's defaults (GPU)",
    )
    p.add_argument("--num-layers", type=int, default=None, help="override the layer count (smoke tests; reported)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "offload_sweep"))
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.config:  # child process: one configuration
        result = run_config(
            args.config, args.dtype, tuple(args.latent), args.steps, args.threads, args.num_layers, args.model
        )
        print("RESULT " + json.dumps(result))
        return

    rows = []
    for chunk in ["resident"] + args.chunks:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--config",
            chunk,
            "--dtype",
            args.dtype,
            "--latent",
            *map(str, args.latent),
            "--steps",
            str(args.steps),
            "--threads",
            str(args.threads),
            "--model",
            args.model,
        ]
        if args.num_layers is not None:
            cmd += ["--num-layers", str(args.num_layers)]
        try:
            row = run_child(cmd, chunk)
        except SystemExit as e:  # out of memory, typically: reported, the sweep goes on
            rows.append({"chunk": chunk, "failed": str(e).strip().splitlines()[-1][:300]})
            print(f"  failed: {rows[-1]['failed']}", flush=True)
            continue
        rows.append(row)
        print(
            f"  {row['step_s']:.3f} s/step, peak device-resident {row['peak_device_bytes'] / 2**20:,.1f} MiB, "
            f"chunks {row['chunk_sizes']}",
            flush=True,
        )
    done = [r for r in rows if "failed" not in r]
    base = next((r["step_s"] for r in done if r["chunk"] == "resident"), None)
    for row in done:
        row["ratio_vs_resident"] = row["step_s"] / base if base else None

    t, h, w = args.latent
    layers = "" if args.num_layers is None else f", num_layers overridden to {args.num_layers}"
    device = done[0]["device"] if done else "?"
    where = f"CPU, {args.threads} threads" if device.lower() == "cpu" else device
    meta = {
        "model": f"Wan2.1-T2V-{args.model} transformer (random weights){layers}",
        "dtype": args.dtype,
        "latent_THW": [t, h, w],
        "tokens": t * (h // 2) * (w // 2),
        "text_tokens": TEXT_LEN,
        "cfg_batch": 2,
        "threads": args.threads,
        "device": device,
        "cpu": cpu_model(),
        "timed_steps": args.steps,
    }
    lines = [
        f"# Wan2.1-T2V-{args.model} block offloading: chunk sweep ({where}, {args.dtype})",
        "",
        f"Latent {t}x{h}x{w} = {meta['tokens']} video tokens, {TEXT_LEN} text tokens, CFG batch 2, random "
        f"weights{layers}; best of {args.steps} timed steps after one warm-up; one process per row. Peak "
        "device-resident: live arrays in device memory, sampled after every chunk and step; allocator peak: "
        "the device's `peak_bytes_in_use` (0 where the backend has none, as on CPU).",
        "",
        "| blocks per chunk | chunks | s/step | offloaded / resident | peak device-resident MiB | allocator peak MiB "
        "| compile s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['chunk']} | failed: {r['failed']} | | | | | |")
            continue
        ratio = "n/a" if r["ratio_vs_resident"] is None else f"{r['ratio_vs_resident']:.2f}"
        lines.append(
            f"| {r['chunk']} | {len(r['chunk_sizes'])} | {r['step_s']:.3f} | {ratio} | "
            f"{r['peak_device_bytes'] / 2**20:,.1f} | {r['peak_allocator_bytes'] / 2**20:,.1f} "
            f"| {r['compile_s']:.1f} |"
        )
    save_report(args.out, meta, rows, lines)


if __name__ == "__main__":
    main()
