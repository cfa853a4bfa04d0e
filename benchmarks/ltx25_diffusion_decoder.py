"""LTX-2.5 diffusion video decoder: decode time and peak memory, vidax vs diffusers at the same
(reduced) size, and vs the convolutional LTX-2 VAE decoder (vidax) on the same latents.

Reduced size, because diffusers' decoder cannot run the released one on a CPU: its portable
processor is FlexAttention, whose CPU (eager) path materialises every score of the stage-5 grid
(T·H·W squared per head: ~10 GiB at the smallest clip the released 11^3 kernel admits). Here: the
released latent width (128), depths (4, 6, 4, 2, 8), strides and patch 4, widths (256, 128, 64,
64, 32) with head_dim 32, kernels 3 for stages 1-4 and 5 for stage 5; latents ``(1, 128, 4, 3, 4)``
-> 25 frames of 96 x 128. The conv decoder is the released LTX-2 VAE (reference_configs), its
weights pseudo-random (time and memory do not depend on the values). Both decoders' weights are
the reference's default init saved with ``save_pretrained`` and read by vidax's loader; the script
prints their largest difference.

Each side runs in its own process (peak RSS is per process): one warm-up call (vidax: compile),
then the median of ``--repeats``. vidax also prints XLA's compiled decode memory besides the
weights (``window_memory``).

    python benchmarks/ltx25_diffusion_decoder.py [--threads 2] [--repeats 2]

The reference's output reaches the vidax child through a file named per run (``--ref-out``, in a
temporary folder the parent makes and removes), checked for its shape; it used to be one fixed
name in a shared folder, read without a check.

2026-12-02: one run printed a 0.53 vidax-vs-diffusers difference. Not reproduced: rerun, the
script prints 1.0e-06, and per block (every stage-1..4 block, upsample and stage-5 block of both
models on these inputs) the largest relative difference is 1.1e-06; that run's reference output
(left in the repository by commit 4a496b4) is bit-identical to today's, so the difference came
from the vidax side or from the file it read, and the decoder's code has not changed since.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from attention_memory import median_seconds
from step_bench import configure_xla_threads, cpu_model, peak_rss_gib, run_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONFIG = dict(
    out_channels=3,
    latent_channels=128,
    patch_size=4,
    decoder_head_dim=32,
    decoder_stage_channels=[256, 128, 64, 64, 32],
    decoder_stage_depths=[4, 6, 4, 2, 8],
    decoder_stage_kernels=[[3, 3, 3]] * 4,
    decoder_upsample_strides=[[1, 2, 2], [2, 1, 1], [2, 2, 2], [2, 2, 2]],
    decoder_upsample_channel_reductions=[2, 2, 1, 2],
    decoder_stage5_kernel=[5, 5, 5],
)
LATENTS = (1, 128, 4, 3, 4)


def _model(tmp):
    import diffusers
    import torch

    torch.manual_seed(0)
    ref = diffusers.LTX2VideoDiffusionDecoderModel(**CONFIG).eval()
    ref.save_pretrained(tmp)
    return ref


def side(name: str, threads: int, repeats: int, ref_out: str) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    z = np.random.default_rng(0).standard_normal(LATENTS).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        ref = _model(tmp)
        if name == "diffusers":
            call = lambda: ref.decode(torch.from_numpy(z), generator=torch.Generator().manual_seed(0)).sample  # noqa
            with torch.no_grad():
                t0 = time.perf_counter()
                out = call().numpy()
                first = time.perf_counter() - t0
                seconds = median_seconds(call, repeats)
            np.save(ref_out, out)
            return dict(first_s=first, s=seconds, peak_rss_gib=peak_rss_gib())
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
        from vidax.weights.component import load_component

        if name == "vidax":
            model = load_component("LTX2VideoDiffusionDecoderModel", tmp)
            noise = torch.randn(model.pixel_shape(LATENTS), generator=torch.Generator().manual_seed(0)).numpy()
            del ref
            t0 = time.perf_counter()
            out = model.decode(z, noise, chunk_frames=None)
            first = time.perf_counter() - t0
            seconds = median_seconds(lambda: model.decode(z, noise, chunk_frames=None), repeats)
            want = np.load(ref_out)
            if want.shape != out.shape:
                raise SystemExit(f"{ref_out}: shape {want.shape}, expected {out.shape}")
            return dict(
                first_s=first,
                s=seconds,
                peak_rss_gib=peak_rss_gib(),
                rel_err=float(np.abs(out - want).max() / np.abs(want).max()),
                xla_bytes=model.window_memory(LATENTS, None),
                halo=model.halo(),
            )
    import diffusers  # the conv VAE: LTX-2's released decoder

    from vidax.models.ltx2.video_vae import AutoencoderKLLTX2Video  # noqa: F401 (registered class)

    folder = os.path.join(ROOT, "reference_configs", "Lightricks__LTX-2", "vae")
    with tempfile.TemporaryDirectory() as tmp:
        vae_ref = diffusers.AutoencoderKLLTX2Video.from_config(diffusers.AutoencoderKLLTX2Video.load_config(folder))
        vae_ref.save_pretrained(tmp)
        del vae_ref
        vae = load_component("AutoencoderKLLTX2Video", tmp)
    zl = np.moveaxis(z, 1, -1)
    t0 = time.perf_counter()
    np.asarray(vae.decode(zl))
    first = time.perf_counter() - t0
    seconds = median_seconds(lambda: np.asarray(vae.decode(zl)), repeats)
    return dict(first_s=first, s=seconds, peak_rss_gib=peak_rss_gib())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--side", choices=("diffusers", "vidax", "vidax_conv_vae"))
    p.add_argument("--ref-out", help="(children) where the diffusers side leaves its output for the vidax side")
    args = p.parse_args(argv)
    if args.side:
        configure_xla_threads(args.threads)
        print("RESULT " + json.dumps(side(args.side, args.threads, args.repeats, args.ref_out)), flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            s: run_child(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--side",
                    s,
                    "--threads",
                    str(args.threads),
                    "--repeats",
                    str(args.repeats),
                    "--ref-out",
                    os.path.join(tmp, "reference.npy"),
                ],
                s,
            )
            for s in ("diffusers", "vidax", "vidax_conv_vae")
        }
    print(
        f"CPU: {cpu_model()} ({args.threads} threads), fp32; latents {LATENTS} -> 25 x 96 x 128 video; "
        f"diffusion decoder widths {CONFIG['decoder_stage_channels']}"
    )
    print(f"{'':28s} {'decode s':>9s} {'first call s':>13s} {'peak RSS GiB':>13s}")
    for name, label in (
        ("diffusers", "diffusers diffusion decoder"),
        ("vidax", "vidax diffusion decoder"),
        ("vidax_conv_vae", "vidax LTX-2 conv VAE decoder"),
    ):
        r = rows[name]
        print(f"{label:28s} {r['s']:9.2f} {r['first_s']:13.1f} {r['peak_rss_gib']:13.2f}")
    v = rows["vidax"]
    print(
        f"vidax vs diffusers max rel. difference {v['rel_err']:.1e}; XLA decode memory besides weights "
        f"{v['xla_bytes'] / 2**20:.1f} MiB (a chunk's window spans {v['halo']} latent frames each side)"
    )


if __name__ == "__main__":
    main()
