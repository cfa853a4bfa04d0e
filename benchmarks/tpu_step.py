"""TPU denoising step of a model at its reference size: step time, compile time, peak HBM, MFU.

A step is what the family's pipeline runs per denoising step (``tpu_models.build_step``: its own
``model_args``, guidance and scheduler update; the transformer on the CFG batch where the
family runs CFG), with random weights built on the host, bf16, at the checkpoint's default size
and prompt length. Each row runs in its own process (a process holds the chip alone).

``--blocks N`` streams every block stack from ``pinned_host`` memory, N blocks a chunk (as
``--offload-blocks N`` does): the chunks are written on the host and never sit on the device
outside a step. With ``--reuse-chunks`` every chunk streams the same host buffers (the bytes
crossing the host link per step are unchanged; the host then holds one chunk instead of the
whole model, which a 14B+ model in bf16 next to the TPU runtime's mappings would not fit).

MFU: the model FLOPs of a step (``tpu_models``: counted from the config, per family) over its
time, against the datasheet peak and an 8192³ bfloat16 matmul timed in the same process.
``--check-flops`` instead lowers the step with attention ``xla`` (no run) and prints the
formula's count next to XLA's (``cost_analysis``), to run at ``--tiny`` size on a CPU: there the
scanned blocks count once in XLA's total, so the tiny configs have one block.

    python benchmarks/tpu_step.py --model wan-1.3b                            # 480p x 81 frames
    python benchmarks/tpu_step.py --model wan-14b --height 720 --width 1280 --blocks 2 --reuse-chunks
    python benchmarks/tpu_step.py --model ltx2 --blocks 4 --reuse-chunks     # 19B: streamed
    python benchmarks/tpu_step.py --model hunyuan15-480p --tiny --steps 1    # smoke (any backend)
    python benchmarks/tpu_step.py --model cosmos3-nano --tiny --check-flops  # formula vs XLA (CPU)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_common import device_summary, matmul_peak, peak_hbm_gib, report  # noqa: E402
from tpu_models import PRESETS, build_step, first_leaf, wan_flops  # noqa: E402


def wan_step_flops(config: dict, latent: tuple[int, int, int], text_len: int = 512, batch: int = 2) -> float:
    """Model FLOPs of one Wan transformer call on ``batch`` samples of ``latent`` (T, H, W), from
    the transformer ``config`` dict (:func:`tpu_models.wan_flops`, the formula)."""
    from vidax.models.wan.config import WanTransformerConfig

    cfg = WanTransformerConfig.from_config_dict(config)
    t, h, w = latent
    pt, ph, pw = cfg.patch_size
    return float(
        wan_flops(
            cfg,
            {
                "batch": batch,
                "tokens": (t // pt) * (h // ph) * (w // pw),
                "text": text_len,
                "patch_in": pt * ph * pw * cfg.in_channels,
                "patch_out": pt * ph * pw * cfg.out_channels,
            },
        )
    )


def check_flops(model: str, tiny: bool, num_layers, call: dict) -> dict:
    """The formula's FLOPs of the step against XLA's count of the lowered step (attention
    ``xla``; float32, so nothing runs in a bf16-specific path)."""
    import jax.numpy as jnp

    preset = PRESETS[model]
    s = build_step(preset, jnp.float32, attention="xla", tiny=tiny, num_layers=num_layers, call=call)
    lowered = s.fn.lower(s.params, s.x, s.state, s.inputs)
    xla = float(lowered.cost_analysis()["flops"])
    formula = float(preset.flops(s.cfg, s.shapes))
    return {
        "model": model,
        "tiny": tiny,
        "shapes": s.shapes,
        "xla_flops": xla,
        "formula_flops": formula,
        "formula_over_xla": round(formula / xla, 4),
    }


def run(
    model: str,
    blocks,
    steps: int,
    num_layers,
    reuse_chunks: bool,
    attention: str,
    tiny: bool,
    call: dict,
    micro_batch: int | None = None,
) -> dict:
    import jax
    import jax.numpy as jnp

    from vidax.parallel.offload import offloaded_stacks

    preset = PRESETS[model]
    t_build = time.perf_counter()
    s = build_step(
        preset,
        jnp.bfloat16,
        blocks=blocks,
        reuse_chunks=reuse_chunks,
        attention=attention,
        tiny=tiny,
        num_layers=num_layers,
        call=call,
        steps=steps + 2,
        micro_batch=micro_batch,
    )
    build_s = time.perf_counter() - t_build
    t0 = time.perf_counter()
    compiled = s.fn.lower(s.params, s.x, s.state, s.inputs).compile()
    compile_s = time.perf_counter() - t0
    x, state = s.x, s.state
    times = []
    for i in range(steps + 1):  # the first one warms up
        t0 = time.perf_counter()
        x, state = compiled(s.params, x, state, s.inputs)
        jax.block_until_ready(x)
        if i or not steps:  # --steps 0: the first step alone, warm-up costs included
            times.append(time.perf_counter() - t0)
        if not steps:
            break
    finite = all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(x))
    # Repeated chunks repeat the same blocks, whose random weights then can overflow: only the
    # times of such a run count.
    assert finite or reuse_chunks, "the latents went NaN/Inf"
    layers = getattr(s.cfg, preset.layers_key)
    flops = preset.flops(s.cfg, s.shapes)
    c = s.call
    return {
        "model": model,
        "what": preset.note,
        "tiny": tiny,
        "num_layers": layers,
        "size_HxWxF": [c.height, c.width, c.num_frames],
        "latent": [list(leaf.shape) for leaf in jax.tree.leaves(x)],
        "shapes": s.shapes,
        "blocks_per_chunk": blocks,
        "streamed": bool(offloaded_stacks(s.pipe.transformer)),
        "reuse_chunks": reuse_chunks,
        "micro_batch": micro_batch,
        "attention": attention,
        "build_s": round(build_s, 1),
        "compile_s": round(compile_s, 1),
        "step_s": round(min(times), 3),
        "step_s_all": [round(t, 3) for t in times],
        "per_block_s": round(min(times) / layers, 4),
        "step_flops": float(flops),
        "step_tflop": round(flops / 1e12, 3),
        "peak_hbm_gib": peak_hbm_gib(),
        "finite": finite,
        "first_latent": float(jnp.abs(first_leaf(x)).mean()),
    }


def main(argv: list[str] | None = None) -> dict:
    """Run with ``argv`` (None: the command line); print and return the row."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="wan-1.3b", choices=sorted(PRESETS))
    p.add_argument("--height", type=int, default=None, help="pixels (default: the checkpoint's)")
    p.add_argument("--width", type=int, default=None, help="pixels (default: the checkpoint's)")
    p.add_argument("--frames", type=int, default=None, help="video frames (default: the checkpoint's)")
    p.add_argument("--tiny", action="store_true", help="the tiny config and a small video (CPU smoke runs)")
    p.add_argument("--check-flops", action="store_true", help="formula vs XLA's FLOPs of the lowered step; no run")
    p.add_argument(
        "--blocks", type=int, default=None, help="stream N blocks a chunk from pinned_host (default: resident)"
    )
    p.add_argument("--reuse-chunks", action="store_true", help="every chunk streams the same host buffers")
    p.add_argument("--num-layers", type=int, default=None, help="a subset of the blocks (reported)")
    p.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    p.add_argument(
        "--micro-batch", type=int, default=None, help="each layer runs the CFG batch N rows at a time (default: whole)"
    )
    p.add_argument("--attention", default="auto")
    p.add_argument(
        "--matmul-precision",
        default="highest",
        choices=["highest", "high", "default"],
        help="as the pipeline's matmul_precision (bf16 products are the same in all three)",
    )
    p.add_argument("--no-matmul-peak", action="store_true", help="skip the 8192³ matmul (saves ~10 s)")
    p.add_argument("--out", default=None, help="append the JSON row to this file")
    args = p.parse_args(argv)
    call = {
        k: v for k, v in (("height", args.height), ("width", args.width), ("num_frames", args.frames)) if v is not None
    }
    import jax

    if args.check_flops:
        with jax.default_matmul_precision("highest"):
            row = check_flops(args.model, args.tiny, args.num_layers, call)
        print("RESULT " + json.dumps(row), flush=True)
        return row
    dev = device_summary()
    row = {"device": dev}
    if not args.no_matmul_peak:
        row["matmul_8192_tflops"] = matmul_peak()
    with jax.default_matmul_precision(args.matmul_precision):
        row.update(
            run(
                args.model,
                args.blocks,
                args.steps,
                args.num_layers,
                args.reuse_chunks,
                args.attention,
                args.tiny,
                call,
                args.micro_batch,
            )
        )
    row["matmul_precision"] = args.matmul_precision
    rate = row["step_flops"] / row["step_s"]
    row["tflops"] = round(rate / 1e12, 3)
    if dev["peak_flops"]:
        row["mfu_datasheet"] = round(rate / dev["peak_flops"], 3)
    if "matmul_8192_tflops" in row:
        row["mfu_of_matmul"] = round(rate / 1e12 / row["matmul_8192_tflops"], 3)
    return report(row, args.out)


if __name__ == "__main__":
    main()
