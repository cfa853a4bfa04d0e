"""bf16 stacks on CPU passed into jitted code as uint16 views, before / after: text encoders, streamed blocks.

Text encoders: their stacked layers passed into the jitted forward as bf16
(the whole-stack uint16 copy XLA:CPU makes in ``scan_layers``) or as uint16 views
(:func:`vidax.nn.kernels.stacks.as_stack_bits` of the encoder's ``stacked_paths``, bitcast back by
:func:`vidax.nn.kernels.stacks.from_stack_bits`: no copy).

Each encoder (random weights: ``step_bench.fill_params``; real widths, ``--layers`` layers) is
compiled once per form through the same jitted ``(params, ids, mask) -> hidden``; printed per
form: the compiled HLO's whole-stack instructions (``wrapped_bitcast-convert`` of a stack
parameter), the median of ``--repeats`` forwards (forms interleaved, so load drifts hit both)
and whether the outputs are bit-identical; the load average before and after.

``--streamed``: the Wan2.1-1.3B transformer (random weights, ``--layers`` layers, bf16) with its
blocks streamed from host memory in chunks of ``--chunk`` (``offload_module``), one forward of a
CFG batch of 2 on a 2x8x8 latent (``streamed_call``) with the chunks fetched as bf16 (as before:
the fetch copies each chunk, the chunk jit copies it again as uint16) and as uint16 views
(``OffloadedBlocks.fetch`` on CPU); two models, forms interleaved.

    python benchmarks/cpu_stack_bits.py                       # umt5 llama gemma3 clip, 4 layers
    python benchmarks/cpu_stack_bits.py --encoders umt5 --layers 2 --tokens 64
    python benchmarks/cpu_stack_bits.py --encoders --streamed --layers 8 --chunk 2
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

# Widths of the released checkpoints' text encoders (layer counts set by --layers).
ENCODERS = {
    # Wan / LTX-Video / CogVideoX: UMT5-XXL / T5-XXL encoder (4096 wide, 10240 FFN)
    "umt5": (
        "vidax.encoders.t5",
        "T5EncoderConfig",
        "vidax.encoders.t5",
        "T5Encoder",
        dict(
            model_type="umt5",
            vocab_size=1000,
            d_model=4096,
            d_kv=64,
            num_heads=64,
            d_ff=10240,
            num_layers=None,
            feed_forward_proj="gated-gelu",
        ),
    ),
    # HunyuanVideo: Llama 3 8B (llava-llama-3) text part
    "llama": (
        "vidax.encoders.decoder_lm",
        "LlamaTextConfig",
        "vidax.encoders.decoder_lm",
        "DecoderLM",
        dict(
            model_type="llama",
            vocab_size=1000,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=None,
            num_attention_heads=32,
            num_key_value_heads=8,
        ),
    ),
    # LTX-2: Gemma 3 12B text part
    "gemma3": (
        "vidax.encoders.gemma3",
        "Gemma3TextConfig",
        "vidax.encoders.decoder_lm",
        "DecoderLM",
        dict(
            model_type="gemma3_text",
            vocab_size=1000,
            hidden_size=3840,
            intermediate_size=15360,
            num_hidden_layers=None,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=256,
        ),
    ),
    # HunyuanVideo's second encoder: CLIP ViT-L/14 text
    "clip": (
        "vidax.encoders.clip",
        "CLIPTextConfig",
        "vidax.encoders.clip",
        "CLIPTextEncoder",
        dict(
            vocab_size=1000,
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=None,
            num_attention_heads=12,
            max_position_embeddings=77,
        ),
    ),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encoders", nargs="*", default=list(ENCODERS), choices=list(ENCODERS))
    p.add_argument("--streamed", action="store_true", help="also the streamed Wan transformer")
    p.add_argument("--chunk", type=int, default=2, help="blocks per streamed chunk")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()
    configure_xla_threads(args.threads)
    import importlib

    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from step_bench import fill_params

    from vidax.nn.kernels import as_stack_bits, from_stack_bits
    from vidax.weights.loader import DtypePolicy

    print(
        f"CPU: {cpu_model()}, {args.threads} threads; bf16, {args.layers} layers, {args.tokens} tokens, "
        f"median of {args.repeats}"
    )
    for name in args.encoders:
        config_module, config_cls, model_module, model_cls, raw = ENCODERS[name]
        key = "num_layers" if "num_layers" in raw else "num_hidden_layers"
        cfg = getattr(importlib.import_module(config_module), config_cls).from_config_dict({**raw, key: args.layers})
        model_type = getattr(importlib.import_module(model_module), model_cls)
        graphdef, state = fill_params(
            lambda: model_type(cfg, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16), DtypePolicy(jnp.bfloat16)
        )
        load0 = os.getloadavg()[0]
        tokens = min(args.tokens, raw.get("max_position_embeddings", args.tokens))  # CLIP: 77 at most
        ids = jnp.asarray(np.random.default_rng(0).integers(1, 1000, (1, tokens)), jnp.int32)
        mask = jnp.ones((1, tokens), jnp.int32)
        fn = jax.jit(lambda p, i, m: nnx.merge(graphdef, from_stack_bits(p))(i, m))
        forms = {"bf16_in": state, "bits_in": as_stack_bits(state, model_type.stacked_paths)}
        compiled, times, outs = {}, {f: [] for f in forms}, {}
        for form, params in forms.items():
            c = fn.lower(params, ids, mask).compile()
            copies = [
                ln
                for ln in c.as_text().splitlines()
                if re.search(rf"wrapped_bitcast-convert\S* = u16\[{args.layers},", ln)
            ]
            compiled[form] = c
            outs[form] = np.asarray(jax.tree.leaves(c(params, ids, mask))[0], np.float32)
            print(f"  {name} {form}: {len(copies)} whole-stack copies in the HLO")
        for _ in range(args.repeats):
            for form, params in forms.items():
                t0 = time.perf_counter()
                jax.block_until_ready(compiled[form](params, ids, mask))
                times[form].append(time.perf_counter() - t0)
        same = np.array_equal(outs["bf16_in"], outs["bits_in"])
        medians = ", ".join(f"{f} {statistics.median(t) * 1e3:.0f} ms" for f, t in times.items())
        print(
            f"{name} ({tokens} tokens): "
            + medians
            + f" ({statistics.median(times['bits_in']) / statistics.median(times['bf16_in']):.2f}x), "
            f"bit-identical {same}; load {load0:.1f} -> {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        del state, forms, compiled
    if args.streamed:
        streamed(args)


def streamed(args) -> None:
    """The streamed Wan forward with the chunks fetched as bf16 and as uint16 views."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from step_bench import fill_params
    from wan_step import CONFIG_1_3B, TEXT_LEN

    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.wan.transformer import WanTransformer3DModel
    from vidax.parallel.chunked_step import streamed_call
    from vidax.parallel.offload import offload_module, offloaded_blocks
    from vidax.weights.loader import DtypePolicy

    cfg = WanTransformerConfig.from_config_dict(dict(CONFIG_1_3B, num_layers=args.layers))
    models = {}
    for form in ("bf16_in", "bits_in"):
        graphdef, params = fill_params(
            lambda: WanTransformer3DModel(cfg, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0)),
            DtypePolicy(jnp.bfloat16, TRANSFORMER_FP32_PARAMS),
        )
        model = offload_module(nnx.merge(graphdef, params), args.chunk)
        if form == "bf16_in":  # the fetch as it was: every leaf device_put as it is
            blocks = offloaded_blocks(model)
            blocks._putters = [None] * len(blocks._putters)
        models[form] = model
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 2, 8, 8, cfg.in_channels)).astype(jnp.bfloat16)
    t = jnp.asarray([500.0, 500.0], jnp.float32)
    ctx = (0.1 * jax.random.normal(jax.random.PRNGKey(2), (2, TEXT_LEN, cfg.text_dim))).astype(jnp.bfloat16)
    load0 = os.getloadavg()[0]
    outs = {f: np.asarray(streamed_call(m, x, t, ctx), np.float32) for f, m in models.items()}
    for form, model in models.items():
        blocks = offloaded_blocks(model)
        # the compiled pieces of streamed_call's step (blocks.call_step): (pre, chunk programs, post, first)
        ((_, (chunks,), _, _),) = [
            v for k, v in blocks.call_step._shared["compiled"].items() if k[2] == (blocks.signature,)
        ]
        copies = [
            ln
            for fn in chunks.values()
            for ln in fn.as_text().splitlines()
            if re.search(rf"wrapped_bitcast-convert\S* = u16\[{args.chunk},", ln)
        ]
        print(f"  streamed {form}: {len(copies)} whole-chunk copies in the chunk jit's HLO")
    times = {f: [] for f in models}
    for _ in range(args.repeats):
        for form, model in models.items():
            t0 = time.perf_counter()
            jax.block_until_ready(streamed_call(model, x, t, ctx))
            times[form].append(time.perf_counter() - t0)
    med = {f: statistics.median(v) for f, v in times.items()}
    print(
        f"streamed Wan 1.3B, {args.layers} layers in chunks of {args.chunk}: "
        + ", ".join(f"{f} {m * 1e3:.0f} ms" for f, m in med.items())
        + f" ({med['bits_in'] / med['bf16_in']:.2f}x), bit-identical {np.array_equal(*outs.values())}; "
        f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
