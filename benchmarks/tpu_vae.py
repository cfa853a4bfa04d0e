"""A family's VAE decode at its reference size on one accelerator: cold (compiles) and warm.

The VAE of the model's ``reference_configs/`` folder (``tpu_models.PRESETS`` and :data:`VAE_ONLY`:
CogVideoX, whose step has no preset), random weights
made on the host, float32 by default (as every pipeline runs it, whatever the transformer's
dtype), decoding the latents of the checkpoint's default video through the pipeline's own
decode (``pipe.hooks.decode``: de-normalisation, the family's decode input, its chunks one by
one, each moved to the host). Reported: the first decode's seconds (compiles included), the
number of XLA compilations (``programs``: per jitted function, the VAE's decode program among
them) and how many came from the persistent compile cache, then the best of ``--repeats`` warm
decodes and the peak HBM.

Run it twice with the same ``--cache-dir``: the second process reads the compiled programs back
from the persistent cache (``vidax.compile_cache``) instead of compiling.

    python benchmarks/tpu_vae.py --model wan-1.3b --cache-dir /tmp/vidax-cc   # cold, then again: cached
    python benchmarks/tpu_vae.py --model ltx2 --tiling                        # tiled decode
    python benchmarks/tpu_vae.py --model cogvideox-5b                         # 480x720x49
    python benchmarks/tpu_vae.py --model hunyuan15-480p --tiny                # smoke (any backend)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_common import device_summary, peak_hbm_gib, report  # noqa: E402
from tpu_models import PRESETS, PROMPT, TINY_CALL, build_vae, configs_only  # noqa: E402


@dataclasses.dataclass(frozen=True)
class VAEModel:
    """A model whose VAE this script times.

    Attributes:
        folder: its ``reference_configs/`` folder.
        tiny_vae: config keys of the tiny VAE (``--tiny``); None: the real one.
        tiny_call: call keywords of ``--tiny`` (a small video).
    """

    folder: str
    tiny_vae: dict | None
    tiny_call: dict


#: Models timed here that have no step preset in ``tpu_models.PRESETS``.
VAE_ONLY = {
    "cogvideox-5b": VAEModel(
        "THUDM__CogVideoX-5b",
        {"block_out_channels": [32, 32, 32, 32], "layers_per_block": 1, "norm_num_groups": 8},
        TINY_CALL,
    ),
}
MODELS = {
    **{name: VAEModel(p.folder, p.tiny_components.get("vae"), p.tiny_call) for name, p in PRESETS.items()},
    **VAE_ONLY,
}


def main(argv: list[str] | None = None) -> dict:
    """Run with ``argv`` (None: the command line); print and return the row."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="wan-1.3b", choices=sorted(MODELS))
    p.add_argument("--height", type=int, default=None, help="pixels (default: the checkpoint's)")
    p.add_argument("--width", type=int, default=None, help="pixels (default: the checkpoint's)")
    p.add_argument("--frames", type=int, default=None, help="video frames (default: the checkpoint's)")
    p.add_argument(
        "--tiny",
        action="store_true",
        help="a small video (CPU smoke runs), and the preset's tiny VAE config where it has one (else the real VAE)",
    )
    p.add_argument("--tiling", action="store_true", help="the VAE's tiled decode (vae.enable_tiled_decode())")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the VAE's dtype")
    p.add_argument("--matmul-precision", default="highest", choices=["highest", "high", "default"])
    p.add_argument(
        "--compare-precision",
        default=None,
        choices=["highest", "high", "default"],
        help="decode the same latents again at this precision and report the PSNR between the two videos",
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cache-dir", default=None, help="persistent compile cache folder (default: off)")
    p.add_argument("--out", default=None, help="append the JSON row to this file")
    args = p.parse_args(argv)

    import jax

    if args.cache_dir:
        os.environ["VIDAX_COMPILE_CACHE"] = args.cache_dir
        from vidax.compile_cache import setup_compile_cache

        setup_compile_cache()
    else:
        jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    import numpy as np

    from vidax.compile_cache import count_compiles
    from vidax.pipelines.loading import load_component
    from vidax.stats import RunStats

    model = MODELS[args.model]
    cls, info = configs_only(
        model.folder, components={"vae": model.tiny_vae} if args.tiny and model.tiny_vae is not None else None
    )
    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[args.dtype]
    vae = build_vae(info, dtype)
    if args.tiling:
        vae.enable_tiled_decode()
    pipe = cls(info, {"vae": vae, "scheduler": load_component(info, "scheduler")}, dtype=jnp.bfloat16)
    pipe.matmul_precision = args.matmul_precision  # given: the decode runs at it (not the bf16 run's VAE default)
    call = dict(model.tiny_call if args.tiny else {}, num_inference_steps=2)  # LTX-2 refuses one step
    call.pop("max_sequence_length", None)
    call.update(
        {
            k: v
            for k, v in (("height", args.height), ("width", args.width), ("num_frames", args.frames))
            if v is not None
        }
    )
    c = cls.check_call(info, PROMPT, **call)
    stats = RunStats()
    cond = pipe.hooks.condition(c, stats)
    x = pipe.hooks.final_latents(c, pipe.hooks.prepare_latents(c, pipe.hooks.initial_noise(c), cond), cond)
    z = x[cls.family.latent_streams[0]] if isinstance(x, dict) else x
    row = {
        "device": device_summary(),
        "model": args.model,
        "vae": info.checkpoint.class_of("vae"),
        "size_HxWxF": [c.height, c.width, c.num_frames],
        "latent": list(z.shape),
        "dtype": args.dtype,
        "tiling": args.tiling,
        "matmul_precision": args.matmul_precision,
        "compile_cache": args.cache_dir,
    }
    c = dataclasses.replace(c, progress=False)
    with jax.default_matmul_precision(args.matmul_precision):
        t0 = time.perf_counter()
        with count_compiles() as counts:
            out = pipe.hooks.decode(c, z, stats)
        row.update(
            cold_s=round(time.perf_counter() - t0, 1),
            compiles=counts.compiled,
            programs=dict(counts.programs),
            from_cache=counts.from_cache,
            chunks=int(vae.decode_chunks(vae.denormalize_latents(z))),
        )
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = pipe.hooks.decode(c, z, stats)
            best = min(best, time.perf_counter() - t0)
        row.update(
            warm_s=round(best, 2),
            frames=list(out.shape),
            peak_hbm_gib=peak_hbm_gib(),
            finite=bool(np.isfinite(out).all()),
        )
    if args.compare_precision:
        pipe.matmul_precision = args.compare_precision
        t0 = time.perf_counter()
        other = pipe.hooks.decode(c, z, stats)
        t_other = time.perf_counter() - t0
        t0 = time.perf_counter()
        other = pipe.hooks.decode(c, z, stats)
        mse = float(np.mean((np.asarray(out, np.float64) - np.asarray(other, np.float64)) ** 2))
        row.update(
            compare_precision=args.compare_precision,
            compare_cold_s=round(t_other, 1),
            compare_warm_s=round(time.perf_counter() - t0, 2),
            # frames in [0, 1]: PSNR of the other precision's video against this one's
            psnr_db=round(10 * np.log10(1.0 / mse), 1) if mse > 0 else float("inf"),
            max_abs_diff=float(np.abs(np.asarray(out) - np.asarray(other)).max()),
        )
    return report(row, args.out)


if __name__ == "__main__":
    main()
