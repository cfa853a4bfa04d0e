"""Time to a finished video on CPU: the ``lightx2v`` preset (4 Euler steps, no CFG) vs the default
50 steps (diffusers' WanPipeline defaults: 50 UniPC steps, guidance 5, so CFG doubles every step).

The embedded tiny Wan checkpoint (``vidax/tiny-random-wan``, random weights) at a small size. Each
setting runs in its own fresh process (``--one``), so neither reuses the other's compiled programs;
the persistent compilation cache is off (``VIDAX_COMPILE_CACHE=0``). Printed per setting: the
first video from nothing (``load_pipeline`` + the first call: load, compiles, text encoding, steps,
VAE decode) and a later call's video (the same pipeline, compiled programs reused; the fastest of
``--repeat``), with its steps' and its VAE decode's seconds, and the speed-up of the preset.

    python benchmarks/presets.py                     # 96x160, 17 frames (the checkpoint's defaults)
    python benchmarks/presets.py --size 64 96 9
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from step_bench import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: (label, load_pipeline's preset=, the call's keywords beyond the size)
SETTINGS = (
    ("default, 50 steps", None, dict(num_inference_steps=50, guidance_scale=5.0)),
    ("--preset lightx2v", "lightx2v", {}),
)


def one(index: int, size: tuple[int, int, int], repeat: int) -> dict:
    """Run setting ``index`` in this process: the first video from nothing, then the fastest of
    ``repeat`` later calls."""
    import vidax

    label, preset, call = SETTINGS[index]
    h, w, f = size
    kwargs = dict(prompt="a red car on a road", height=h, width=w, num_frames=f, seed=0, progress=False, **call)
    t0 = time.perf_counter()
    pipe = vidax.load_pipeline("vidax/tiny-random-wan", preset=preset, progress=False)
    pipe(**kwargs)
    first_s = time.perf_counter() - t0
    runs = []
    for _ in range(repeat):  # the fastest of `repeat` later calls (the machine may be shared)
        t1 = time.perf_counter()
        out = pipe(**kwargs)
        runs.append((time.perf_counter() - t1, out))
    second_s, second = min(runs, key=lambda r: r[0])
    return dict(
        label=label,
        steps=len(second.stats.step_s),
        preset=second.stats.preset,
        first_video_s=first_s,
        second_video_s=second_s,
        second_steps_s=sum(second.stats.step_s),
        second_decode_s=second.stats.decode_s,
        frames=list(second.frames.shape),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, nargs=3, default=(96, 160, 17), metavar=("H", "W", "FRAMES"))
    parser.add_argument("--repeat", type=int, default=3, help="later calls timed (the fastest is shown)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = tuple(args.size)
    if args.one is not None:
        print(json.dumps(one(args.one, size, args.repeat)))
        return
    env = dict(os.environ, VIDAX_COMPILE_CACHE="0", PYTHONPATH=os.path.join(ROOT, "src"))
    rows = []
    for i in range(len(SETTINGS)):
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(i), "--size", *map(str, size), "--repeat", str(args.repeat)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores visible, load average {os.getloadavg()[0]:.1f})")
    print(f"vidax/tiny-random-wan, {size[0]}x{size[1]}, {size[2]} frames, float32")
    print(
        f"{'setting':<20} {'steps':>5} {'first video s':>14} {'later video s':>15} {'its steps s':>12} "
        f"{'its VAE decode s':>17}"
    )
    for r in rows:
        print(
            f"{r['label']:<20} {r['steps']:>5} {r['first_video_s']:>14.2f} {r['second_video_s']:>15.2f} "
            f"{r['second_steps_s']:>12.2f} {r['second_decode_s']:>17.2f}"
        )
    base, fast = rows
    print(
        f"speed-up of the preset: first video {base['first_video_s'] / fast['first_video_s']:.1f}x, "
        f"later video {base['second_video_s'] / fast['second_video_s']:.1f}x, "
        f"steps {base['second_steps_s'] / fast['second_steps_s']:.1f}x"
    )
    print(f"({fast['preset']})")


if __name__ == "__main__":
    main()
