"""Load + merge time of a rank-64 LoRA on the Wan2.1-14B transformer layout, and the memory the
merge adds.

The transformer is built with Wan2.1-T2V-14B's config (hidden 5120, FFN 13824, 40 heads, text
4096) and random weights; the LoRA is written with the real key set of the LoRAs users have
(original / ComfyUI layout: ``diffusion_model.blocks.N.{self_attn,cross_attn}.{q,k,v,o}`` and
``ffn.{0,2}``, ``lora_down`` / ``lora_up`` / ``alpha``), random values, rank 64. The full model
is 14B parameters (28 GB in bfloat16); ``--layers`` builds fewer blocks (same width) to fit a
small machine, and the figure per block is scaled to 40 blocks.

    python benchmarks/lora_merge.py --layers 2 [--dtype bfloat16]

Prints the time to read, check and merge the file, the per-block time, the base copies kept to
undo the merge (host memory: the bytes of every touched weight) and the peak RSS growth during
the merge (the merge itself works one layer at a time: one float32 delta of the largest weight).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import psutil
from flax import nnx
from step_bench import cpu_model

from vidax.lora.adapters import LoraAdapters
from vidax.models.wan.config import WanTransformerConfig
from vidax.registry import registry
from vidax.weights.safetensors_io import save_safetensors

WAN_14B = dict(
    patch_size=[1, 2, 2],
    num_attention_heads=40,
    attention_head_dim=128,
    in_channels=16,
    out_channels=16,
    text_dim=4096,
    freq_dim=256,
    ffn_dim=13824,
    num_layers=40,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    image_dim=None,
    added_kv_proj_dim=None,
    rope_max_seq_len=1024,
)
MODULES = {f"{a}.{o}": (5120, 5120) for a in ("self_attn", "cross_attn") for o in "qkvo"}
MODULES.update({"ffn.0": (13824, 5120), "ffn.2": (5120, 13824)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=40, help="transformer blocks built (40: the full 14B)")
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    args = ap.parse_args()
    dtype = jnp.dtype(args.dtype)
    spec = registry().component("WanTransformer3DModel")
    config = WanTransformerConfig.from_config_dict(dict(WAN_14B, num_layers=args.layers), source="Wan2.1-14B")
    t0 = time.perf_counter()
    module = spec.model_class()(config, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0), mesh=None)
    jax.block_until_ready(nnx.state(module))
    print(f"built {args.layers} of 40 Wan2.1-14B blocks ({args.dtype}) in {time.perf_counter() - t0:.1f} s")
    rng = np.random.default_rng(0)
    sd = {}
    for i in range(args.layers):
        for name, (o, n) in MODULES.items():
            key = f"diffusion_model.blocks.{i}.{name}"
            sd[f"{key}.lora_down.weight"] = rng.standard_normal((args.rank, n), np.float32).astype(np.float32) * 0.01
            sd[f"{key}.lora_up.weight"] = rng.standard_normal((o, args.rank), np.float32).astype(np.float32) * 0.01
            sd[f"{key}.alpha"] = np.float32(args.rank)
    with tempfile.TemporaryDirectory() as tmp:
        file = os.path.join(tmp, "lora.safetensors")
        save_safetensors({k: v.astype(jnp.bfloat16) if v.ndim else v for k, v in sd.items()}, file)
        size = os.path.getsize(file)
        del sd
        adapters = LoraAdapters([("transformer", module, spec, config)])
        proc = psutil.Process()
        rss0 = proc.memory_info().rss
        peak = [rss0]
        import threading

        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], proc.memory_info().rss)
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        adapters.load(file, "bench")
        jax.block_until_ready(nnx.state(module))
        load_merge = time.perf_counter() - t0
        t0 = time.perf_counter()
        adapters.set_adapters("bench", 0.5)  # a re-merge from the kept base
        jax.block_until_ready(nnx.state(module))
        remerge = time.perf_counter() - t0
        done.set()
        sampler.join()
        kept = adapters._stores[0].base_bytes()
    per_block = load_merge / args.layers
    print(
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); CPU: {cpu_model()}, {os.cpu_count()} cores"
    )
    print(f"LoRA rank {args.rank}, {len(MODULES) * args.layers} modules, {size / 2**20:,.0f} MiB (bf16)")
    print(
        f"load + check + merge: {load_merge:.2f} s ({per_block:.2f} s per block; ~{per_block * 40:.0f} s "
        f"for the 40 blocks of Wan2.1-14B)"
    )
    print(f"re-merge at another weight (set_adapters): {remerge:.2f} s")
    print(
        f"base weights kept to undo the merge: {kept / 2**30:.2f} GiB ({kept / args.layers / 2**20:,.0f} MiB per "
        f"block, ~{kept / args.layers * 40 / 2**30:.1f} GiB for 40) in host memory"
    )
    print(
        f"peak RSS growth during load + merge: {(peak[0] - rss0) / 2**30:.2f} GiB "
        "(on CPU the device arrays are host memory too)"
    )


if __name__ == "__main__":
    main()
