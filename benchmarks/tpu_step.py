"""TPU denoising step of the Wan2.1 transformers: step time, compile time, peak HBM and MFU.

A step is what ``WanPipeline`` runs per denoising step with classifier-free guidance: the
transformer on the cond + uncond batch of 2, the guidance, one UniPC update (bf16, random
weights, 512 text tokens). Each row runs in its own process (a process holds the chip alone).

Weights are built on the host, never on the device first: the blocks of a streamed model
(``--blocks N``: N blocks a chunk, in ``pinned_host`` memory, streamed each step as
``--offload-blocks N`` streams them) are written chunk by chunk into host memory; a resident
model's blocks the same way, then moved to the device. With ``--reuse-chunks`` every chunk
streams the same host buffers (the bytes crossing the host link per step are unchanged; the
host then holds one chunk instead of the whole model, which a 14B model in bf16 (26 GiB) next
to the TPU runtime would not fit).

MFU: the model FLOPs of a step (:func:`wan_step_flops`: the linear layers' ``2·m·k·n``, the two
products of every attention ``4·Lq·Lk·D``, the text encoder excluded) over its time, against
the datasheet peak and an 8192³ bfloat16 matmul timed in the same process.

    python benchmarks/tpu_step.py --model 1.3B --latent 21 60 104                 # 480p x 81 frames
    python benchmarks/tpu_step.py --model 14B --latent 21 90 160 --blocks 4 --reuse-chunks
    python benchmarks/tpu_step.py --model 1.3B --latent 3 8 8 --num-layers 2      # smoke (any backend)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_common import device_summary, matmul_peak, peak_hbm_gib  # noqa: E402
from wan_step import CONFIG_1_3B, CONFIG_14B, SCHEDULER, TEXT_LEN  # noqa: E402

CONFIGS = {"1.3B": CONFIG_1_3B, "14B": CONFIG_14B}


def wan_step_flops(config: dict, latent: tuple[int, int, int], text_len: int = TEXT_LEN, batch: int = 2) -> float:
    """Model FLOPs of one Wan transformer call on ``batch`` samples of ``latent`` (T, H, W).

    Per block and sample, L video tokens of width d, FFN width f, text length S: self-attention
    projections ``8·L·d²`` (q, k, v, out), cross-attention ``4·L·d²`` (q, out) + ``4·S·d²``
    (k, v), FFN ``4·L·d·f``, attention products ``4·L²·d`` (self) + ``4·L·S·d`` (cross); plus
    the patch embedding and the output projection. Elementwise work (norms, RoPE, softmax,
    modulation) is not counted, as MFU conventionally does not.
    """
    t, h, w = latent
    pt, ph, pw = config["patch_size"]
    tokens = (t // pt) * (h // ph) * (w // pw)
    d = config["num_attention_heads"] * config["attention_head_dim"]
    f, s = config["ffn_dim"], text_len
    block = 12 * tokens * d * d + 4 * s * d * d + 4 * tokens * d * f + 4 * tokens * tokens * d + 4 * tokens * s * d
    patch = pt * ph * pw * config["in_channels"]
    ends = 2 * tokens * patch * d + 2 * tokens * d * pt * ph * pw * config["out_channels"]
    text = 2 * s * config["text_dim"] * d + 2 * s * d * d  # the text embedder's two linears
    return float(batch * (config["num_layers"] * block + ends + text))


def _host_values(shape, dtype, seed: int):
    """Small pseudo-random values of ``shape`` in ``dtype``, made on the host from one 1 Mi-value
    random block (tiled: fast, and no device memory)."""
    import numpy as np

    size = int(np.prod(shape))
    base = (np.random.default_rng(seed).standard_normal(1 << 20) * 0.02).astype(dtype)
    return np.resize(base, size).reshape(shape)


def build_model(config: dict, dtype, blocks: int | None, reuse_chunks: bool, attention: str):
    """The Wan transformer with host-made weights; ``blocks``: N blocks a chunk in host memory,
    streamed each step (None: resident). Returns ``(config, module)``."""
    import jax
    import numpy as np
    from flax import nnx

    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.wan.transformer import WanTransformer3DModel
    from vidax.parallel.offload import attach_chunks, host_memory_kind
    from vidax.weights.loader import DtypePolicy, abstract_params

    cfg = WanTransformerConfig.from_config_dict(config)
    policy = DtypePolicy(dtype, TRANSFORMER_FP32_PARAMS)
    graphdef, flat = abstract_params(lambda: WanTransformer3DModel(cfg, dtype=dtype, param_dtype=dtype,
                                                                   attention=attention, rngs=nnx.Rngs(0)))
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    kind = host_memory_kind()
    chunks, shardings, filled = {}, {}, []
    for i, (path, var) in enumerate(flat.items()):
        sds = var.get_value()
        dt = np.dtype(policy.dtype_for(path))
        if blocks is not None and path[0] == "blocks":
            n = sds.shape[0]
            placed = []
            for start in range(0, n, blocks):
                size = min(blocks, n - start)
                if reuse_chunks and placed and placed[0].shape[0] == size:
                    placed.append(placed[0])
                else:
                    host = _host_values((size,) + tuple(sds.shape[1:]), dt, 1000 * i + start)
                    placed.append(jax.device_put(host, sharding.with_memory_kind(kind)) if kind else host)
            chunks[path[1:]], shardings[path[1:]] = placed, sharding
            value = jax.ShapeDtypeStruct(sds.shape, dt)
        else:
            value = jax.device_put(_host_values(sds.shape, dt, i), sharding)
        filled.append((path, var.replace(value)))
    module = nnx.merge(graphdef, nnx.from_flat_state(filled))
    if blocks is not None:
        attach_chunks(module, "blocks", chunks, shardings, kind)
    return cfg, module


def run(model: str, latent, blocks, steps: int, num_layers, reuse_chunks: bool, attention: str) -> dict:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.parallel.offload import ChunkedStep, offloaded_blocks
    from vidax.schedulers import scheduler_from_config

    config = dict(CONFIGS[model], **({} if num_layers is None else {"num_layers": num_layers}))
    dtype = jnp.bfloat16
    t_build = time.perf_counter()
    cfg, module = build_model(config, dtype, blocks, reuse_chunks, attention)
    build_s = time.perf_counter() - t_build
    t, h, w = latent
    sched = scheduler_from_config(SCHEDULER)
    x = jax.random.normal(jax.random.PRNGKey(1), (1, t, h, w, cfg.in_channels), jnp.float32)
    state = sched.set_timesteps(steps + 2, sample_shape=x.shape)
    context = (0.1 * jax.random.normal(jax.random.PRNGKey(2), (2, TEXT_LEN, cfg.text_dim))).astype(dtype)

    def model_args(latents, state, context):
        return (jnp.concatenate([latents, latents]).astype(dtype),
                jnp.broadcast_to(state.timestep.astype(jnp.float32), (2,)), context)

    def finish(out, latents, state, context):
        cond, uncond = jnp.split(out, 2)
        return sched.step(state, uncond + 5.0 * (cond - uncond), latents)

    graphdef, params = nnx.split(module)
    t0 = time.perf_counter()
    if blocks is None:
        def step(params, latents, state, context):
            return finish(nnx.merge(graphdef, params)(*model_args(latents, state, context)), latents, state, context)

        compiled = jax.jit(step, donate_argnums=(1,)).lower(params, x, state, context).compile()
    else:
        compiled = ChunkedStep(graphdef, offloaded_blocks(module), model_args, finish).lower(
            params, x, state, context).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(steps + 1):  # the first one warms up
        t0 = time.perf_counter()
        x, state = compiled(params, x, state, context)
        x.block_until_ready()
        if i or not steps:  # --steps 0: the first step alone, warm-up costs included
            times.append(time.perf_counter() - t0)
        if not steps:
            break
    finite = bool(jnp.isfinite(x).all())
    # Repeated chunks repeat the same blocks, whose random weights then can overflow: only the
    # times of such a run count.
    assert finite or reuse_chunks, "the latents went NaN/Inf"
    flops = wan_step_flops(config, latent)
    return {"model": f"Wan2.1-T2V-{model}", "num_layers": config["num_layers"], "latent_THW": list(latent),
            "tokens": t * (h // 2) * (w // 2), "blocks_per_chunk": blocks, "reuse_chunks": reuse_chunks,
            "attention": attention, "build_s": round(build_s, 1), "compile_s": round(compile_s, 1),
            "step_s": round(min(times), 3), "step_s_all": [round(s, 3) for s in times],
            "per_block_s": round(min(times) / config["num_layers"], 4), "step_tflop": round(flops / 1e12, 1),
            "peak_hbm_gib": peak_hbm_gib(), "finite": finite}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="1.3B", choices=sorted(CONFIGS))
    p.add_argument("--latent", nargs=3, type=int, default=[21, 60, 104], metavar=("T", "H", "W"))
    p.add_argument("--blocks", type=int, default=None, help="stream N blocks a chunk from pinned_host (default: resident)")
    p.add_argument("--reuse-chunks", action="store_true", help="every chunk streams the same host buffers")
    p.add_argument("--num-layers", type=int, default=None, help="a subset of the blocks (reported)")
    p.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    p.add_argument("--attention", default="auto")
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "default"],
                   help="as the pipeline's matmul_precision (bf16 products are the same in all three)")
    p.add_argument("--no-matmul-peak", action="store_true", help="skip the 8192³ matmul (saves ~10 s)")
    p.add_argument("--out", default=None, help="append the JSON row to this file")
    args = p.parse_args()
    dev = device_summary()
    row = {"device": dev}
    if not args.no_matmul_peak:
        row["matmul_8192_tflops"] = matmul_peak()
    import jax

    with jax.default_matmul_precision(args.matmul_precision):
        row.update(run(args.model, tuple(args.latent), args.blocks, args.steps, args.num_layers, args.reuse_chunks,
                       args.attention))
    row["matmul_precision"] = args.matmul_precision
    rate = row["step_tflop"] * 1e12 / row["step_s"]
    row["tflops"] = round(rate / 1e12, 1)
    if dev["peak_flops"]:
        row["mfu_datasheet"] = round(rate / dev["peak_flops"], 3)
    if "matmul_8192_tflops" in row:
        row["mfu_of_matmul"] = round(rate / 1e12 / row["matmul_8192_tflops"], 3)
    print("RESULT " + json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
