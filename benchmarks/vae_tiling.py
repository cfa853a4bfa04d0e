"""Peak device memory of a VAE decode at 720p, untiled vs tiled (``--vae-tiling``'s
``enable_tiled_decode()``: diffusers' default tiles, e.g. Wan's 256 px every 192 px), at reduced
channel widths so it runs on a CPU; ``--family`` wan (default; Cosmos-Predict2.5's VAE too),
cogvideox or hunyuan.

The VAE has the released Wan2.1 structure (4 levels, ``dim_mult`` 1, 2, 4, 4, temporal
down-sampling on the last two, ``z_dim`` 16) with ``--base-dim`` channels instead of 96 and random
weights (memory does not depend on the values). Device memory:

* on a GPU / TPU: the allocator's ``peak_bytes_in_use`` (reset by running each case in its own
  process);
* on CPU (no allocator statistics): for every chunk call, the live device arrays before it
  (:func:`vidax.stats.live_array_bytes`: weights, latents, the causal cache) plus XLA's own
  accounting of the compiled chunk function (``memory_analysis()``: temporaries and outputs),
  the largest over the decode.

Both are printed for 1 and 4x the latent frames, with the CPU model and the decode time.

    python benchmarks/vae_tiling.py                      # 1280 x 720, 2 and 8 latent frames
    python benchmarks/vae_tiling.py --height 480 --width 832 --base-dim 8

Measured (AMD EPYC, 2 shared cores, CPU backend, ``--base-dim 4``, 1280 x 720, one case per
``--case`` process; the 8-latent-frame cases took too long on this machine):

    decode    latent frames  frames  peak device MiB  time s
    untiled   1              1         395.6           20.9
    untiled   2              5        1218.2           79.4
    tiled     1              1          35.0           48.7
    tiled     2              5          87.5          159.4

HunyuanVideo VAE (``--family hunyuan --height 480 --width 640 --frames 1 --base-dim 4``, same
machine; tiled = ``enable_tiled_decode()``, 256 px tiles every 192 and framewise windows; 4 latent
frames are still at or below the reference's window threshold (16 frames = 4 latent), so each tile
decodes the whole clip there: beyond it, windows of 5 latent frames every 3 bound the decode):

    decode    latent frames  frames  peak device MiB  time s
    untiled   1              1          66.1           14.1
    untiled   4             13         494.2          100.9
    tiled     1              1          15.0           43.0
    tiled     4             13         106.5          174.1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from step_bench import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _build(family: str, base_dim: int):
    """``(vae, module with the jitted per-chunk decode, its name, spatial compression, C_z)``: the
    released layout of ``family``'s VAE with ``base_dim`` channels at full resolution (group
    norms of 4 groups where the family has group norms) and random weights."""
    from flax import nnx

    c = base_dim
    if family == "wan":
        from vidax.models.wan import vae as mod
        from vidax.models.wan.config import WanVAEConfig

        config = WanVAEConfig(base_dim=c)  # the released Wan2.1 layout but for the width
        return mod.WanVAE(config, rngs=nnx.Rngs(0)), mod, "_decode_chunk", config.spatial_compression, 16
    if family == "cogvideox":
        from vidax.models.cogvideox import vae as mod
        from vidax.models.cogvideox.config import CogVideoXVAEConfig

        config = CogVideoXVAEConfig(block_out_channels=(c, 2 * c, 2 * c, 4 * c), norm_num_groups=4)
        return mod.CogVideoXVAE(config, rngs=nnx.Rngs(0)), mod, "_decode_chunk", config.spatial_compression, 16
    if family == "hunyuan":
        from vidax.models.hunyuan_video import vae as mod
        from vidax.models.hunyuan_video.config import HunyuanVideoVAEConfig

        config = HunyuanVideoVAEConfig(block_out_channels=(c, 2 * c, 4 * c, 4 * c), norm_num_groups=4)
        return mod.HunyuanVideoVAE(config, rngs=nnx.Rngs(0)), mod, "_decode_tile", config.spatial_compression, 16
    raise SystemExit(f"--family {family!r}: one of wan, cogvideox, hunyuan")


def run_case(family: str, height: int, width: int, frames: int, base_dim: int, tiled: bool) -> dict:
    """Decode ``frames`` latent frames of a ``height`` x ``width`` video; the peak device bytes."""
    import jax
    import numpy as np

    from vidax.stats import device_memory_bytes, live_array_bytes

    vae, mod, name, s, z_dim = _build(family, base_dim)
    if tiled:
        vae.enable_tiled_decode()  # what --vae-tiling turns on
    z = np.random.default_rng(0).standard_normal((1, frames, height // s, width // s, z_dim)).astype(np.float32)
    chunk, analysed, peak = getattr(mod, name), {}, [0]

    def measured(*args):
        key = str(jax.tree.map(lambda a: (getattr(a, "shape", None), getattr(a, "dtype", None)), args[1:]))
        key += str([a for a in args[2:] if isinstance(a, (bool, int))])
        if key not in analysed:
            analysis = chunk.lower(*args).compile().memory_analysis()
            analysed[key] = analysis.temp_size_in_bytes + analysis.output_size_in_bytes
        peak[0] = max(peak[0], live_array_bytes() + analysed[key])
        return chunk(*args)

    on_cpu = jax.default_backend() == "cpu"
    if on_cpu:
        setattr(mod, name, measured)  # this process only: the benchmark's own measurement
    t0 = time.perf_counter()
    video = vae.decode(z)
    seconds = time.perf_counter() - t0
    allocator, source = device_memory_bytes()
    return dict(
        height=height,
        width=width,
        latent_frames=frames,
        frames=int(video.shape[1]),
        tiled=tiled,
        peak_bytes=peak[0] if on_cpu else allocator,
        source="live arrays + XLA memory_analysis per chunk" if on_cpu else source,
        decode_s=round(seconds, 1),
        backend=jax.default_backend(),
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--frames", type=int, default=2, help="latent frames of the short clip (the long one has 4x)")
    p.add_argument(
        "--base-dim",
        type=int,
        default=12,
        help="decoder width at full resolution (released: Wan 96, CogVideoX / HunyuanVideo 128)",
    )
    p.add_argument("--family", default="wan", help="wan (also Cosmos-Predict2.5's VAE), cogvideox or hunyuan")
    p.add_argument("--case", help=argparse.SUPPRESS)  # one case, in its own process
    args = p.parse_args(argv)
    if args.case:
        frames, tiled = args.case.split(",")
        print(json.dumps(run_case(args.family, args.height, args.width, int(frames), args.base_dim, tiled == "1")))
        return
    print(
        f"CPU: {cpu_model()}, {os.cpu_count()} cores; {args.family} VAE base_dim={args.base_dim}, "
        f"{args.width} x {args.height}"
    )
    print(f"{'decode':>8} {'latent frames':>14} {'frames':>7} {'peak device MiB':>16} {'time s':>7}  measured by")
    for tiled in (False, True):
        for frames in (args.frames, 4 * args.frames):
            cmd = [
                sys.executable,
                __file__,
                "--height",
                str(args.height),
                "--width",
                str(args.width),
                "--base-dim",
                str(args.base_dim),
                "--family",
                args.family,
                "--case",
                f"{frames},{int(tiled)}",
            ]
            r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=ROOT))
            row = json.loads(r.stdout.strip().splitlines()[-1])
            print(
                f"{'tiled' if tiled else 'untiled':>8} {frames:>14} {row['frames']:>7} "
                f"{row['peak_bytes'] / 2**20:>16.1f} {row['decode_s']:>7}  {row['source']} ({row['backend']})"
            )


if __name__ == "__main__":
    main()
