"""Step caching, vidax vs diffusers 0.42.1: Wan2.1-T2V-1.3B transformer config at reduced depth.

A diffusers ``WanPipeline`` with the 1.3B transformer config (``num_layers`` reduced), random
weights, a small UMT5 (width 4096, as the transformer's ``text_dim``) and a small VAE is saved and
loaded by vidax. Both sides denoise the same latents with the same prompt, uncached and with
First-Block Cache at a few thresholds, MagCache (ratios from vidax's calibration run) and
TaylorSeer lite. Printed per run and side: the denoising seconds (vidax: the steps, compile
excluded, scheduler update included; diffusers: its transformer calls), the speed-up over the same side's uncached run, the block evaluations skipped, and the PSNR
of the decoded video vs the same side's uncached one; plus vidax vs diffusers on the same config.

    python benchmarks/step_cache.py                       # 4 layers, 10 steps, 64x96x5
    python benchmarks/step_cache.py --layers 6 --steps 20 --size 160 160 17
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from step_bench import cpu_model
from wan_step import CONFIG_1_3B  # noqa: E402


def build(path: str, layers: int) -> None:
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    from tests.parity.helpers import randomize_torch_module
    from tests.parity.wan_reference import TEXT_ENCODER, VAE, _stub_ftfy
    from vidax.default_checkpoint import SCHEDULER
    from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

    _stub_ftfy()
    torch.manual_seed(0)
    build_tiny_t5_tokenizer(os.path.join(path, "_tok"), vocab_size=TEXT_ENCODER["vocab_size"])
    text_encoder = UMT5EncoderModel(
        UMT5Config(**dict(TEXT_ENCODER, d_model=CONFIG_1_3B["text_dim"], num_layers=1))
    ).eval()
    randomize_torch_module(text_encoder, seed=1)
    z = CONFIG_1_3B["in_channels"]
    vae = AutoencoderKLWan(**dict(VAE, z_dim=z, latents_mean=[0.0] * z, latents_std=[1.0] * z)).eval()
    randomize_torch_module(vae, seed=2, scale=0.1, gain=0.7)
    transformer = WanTransformer3DModel.from_config(dict(CONFIG_1_3B, num_layers=layers)).eval()
    scheduler = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if not k.startswith("_")})
    WanPipeline(
        tokenizer=AutoTokenizer.from_pretrained(os.path.join(path, "_tok")),
        text_encoder=text_encoder,
        vae=vae,
        scheduler=scheduler,
        transformer=transformer,
    ).save_pretrained(path, safe_serialization=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", type=int, nargs=3, default=(64, 96, 5), metavar=("H", "W", "F"))
    ap.add_argument("--thresholds", type=float, nargs="+", default=(0.2, 0.5, 1.0))
    a = ap.parse_args()

    os.environ.setdefault("VIDAX_COMPILE_CACHE", "0")
    import jax
    import numpy as np
    import torch
    from diffusers import WanPipeline
    from diffusers.hooks import FirstBlockCacheConfig as RefFBC
    from diffusers.hooks import MagCacheConfig as RefMag
    from diffusers.hooks import TaylorSeerCacheConfig as RefTS

    import vidax
    from tests.parity.helpers import psnr

    jax.config.update("jax_default_matmul_precision", "highest")
    # XLA:CPU flushes denormals; torch does not unless asked, and the random weights make some
    # (one transformer call then took 8 s instead of 0.1 s here).
    torch.set_flush_denormal(True)
    torch.set_num_threads(os.cpu_count() or 1)
    h, w, f = a.size
    call = dict(
        prompt="a red car on a bridge",
        negative_prompt="blurry",
        height=h,
        width=w,
        num_frames=f,
        num_inference_steps=a.steps,
        guidance_scale=5.0,
        max_sequence_length=32,
    )
    with tempfile.TemporaryDirectory() as path:
        build(path, a.layers)
        ref = WanPipeline.from_pretrained(path)
        pipe = vidax.load_pipeline(path, dtype="float32")
        latents = torch.randn(
            1, CONFIG_1_3B["in_channels"], (f - 1) // 4 + 1, h // 8, w // 8, generator=torch.Generator().manual_seed(7)
        )
        calls, spent = [], []
        for block in ref.transformer.blocks:
            block.ffn.register_forward_hook(lambda *x: calls.append(1))
        forward = ref.transformer.forward

        def timed_forward(*args, **kwargs):
            t0 = time.perf_counter()
            out = forward(*args, **kwargs)
            spent.append(time.perf_counter() - t0)
            return out

        ref.transformer.forward = timed_forward

        def run_ref(config):
            if config is not None:
                ref.transformer.enable_cache(config)
            try:
                with torch.no_grad():
                    calls.clear()
                    spent.clear()
                    frames = ref(latents=latents.clone(), output_type="np", **call).frames
                    seconds, evaluated = sum(spent), len(calls)
            finally:
                if config is not None:
                    ref.transformer.disable_cache()
            total = 2 * a.steps * a.layers
            return dict(s=seconds, skipped=total - evaluated, total=total, frames=np.asarray(frames, np.float32))

        def run_vidax(config):
            if config is not None:
                pipe.enable_cache(config)
            try:
                out = pipe(latents=latents.numpy(), progress=False, **call)  # step_s: compile excluded
            finally:
                pipe.disable_cache()
            rep = out.stats.cache
            total = 2 * a.steps * a.layers
            return dict(
                s=sum(out.stats.step_s),
                skipped=rep.blocks_skipped if rep else 0,
                total=total,
                frames=out.frames,
                pattern=rep and rep.patterns,
            )

        import io
        from contextlib import redirect_stdout

        with redirect_stdout(io.StringIO()) as printed:
            run_vidax(vidax.MagCacheConfig(calibrate=True, num_inference_steps=a.steps))
        cond_ratios = json.loads(printed.getvalue().strip().splitlines()[-1])  # the conditional pass's
        runs = [("uncached", None, None)]
        runs += [
            (f"first_block {t:g}", RefFBC(threshold=t), vidax.FirstBlockCacheConfig(threshold=t)) for t in a.thresholds
        ]
        mag = dict(num_inference_steps=a.steps, mag_ratios=cond_ratios, threshold=0.12, max_skip_steps=2)
        runs.append(("mag 0.12", RefMag(**mag), vidax.MagCacheConfig(**mag)))
        runs.append(
            (
                "taylorseer lite",
                RefTS(use_lite_mode=True, taylor_factors_dtype=torch.float32),
                vidax.TaylorSeerCacheConfig(use_lite_mode=True, taylor_factors_dtype="float32"),
            )
        )
        print(
            f"\nWan2.1-T2V-1.3B transformer config, {a.layers} of 30 layers, random weights; {h}x{w}x{f}, "
            f"{a.steps} UniPC steps, CFG; CPU: {cpu_model()} ({os.cpu_count()} cores), float32\n"
        )
        print(
            "| run | diffusers s | speed-up | blocks skipped | PSNR vs uncached | vidax s | speed-up | "
            "blocks skipped | PSNR vs uncached | vidax vs diffusers | vidax pattern |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
        ref0 = v0 = None
        for name, ref_config, config in runs:
            r, v = run_ref(ref_config), run_vidax(config)
            ref0, v0 = ref0 or r, v0 or v
            pr = psnr(r["frames"], ref0["frames"])
            pv = psnr(v["frames"], v0["frames"])
            print(
                f"| {name} | {r['s']:.2f} | {ref0['s'] / r['s']:.2f}x | {r['skipped']}/{r['total']} | {pr:.1f} dB "
                f"| {v['s']:.2f} | {v0['s'] / v['s']:.2f}x | {v['skipped']}/{v['total']} | {pv:.1f} dB | "
                f"{psnr(v['frames'], r['frames']):.1f} dB | {v['pattern'] or ''} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
