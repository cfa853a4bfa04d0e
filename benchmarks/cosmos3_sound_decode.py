"""Sound decode time, vidax vs diffusers: Cosmos 3's sound latents -> 48 kHz stereo waveform
(``Cosmos3AVAEAudioTokenizer.decode``).

The released config (``reference_configs/nvidia__Cosmos3-Nano/sound_tokenizer``: strides
(2, 4, 5, 6, 8), 1920 samples a latent frame, 25 latent frames a second) at a reduced decoder width
by default (``--dec-dim 80``: a quarter of the released 320, ~1/16 of its 496 M parameters, so
both sides fit a shared machine; ``--dec-dim 320`` runs the released width), the reference's
randomised weights saved with ``save_pretrained`` and read by vidax's component loader (so both
sides run the same weights; the script also prints their largest difference), the same thread
count on both sides (torch ``set_num_threads``, XLA's intra-op threads), fp32. Times are the
median of ``--repeats`` calls after one warm-up call (vidax's compile is reported apart).

    python benchmarks/cosmos3_sound_decode.py                       # 2 s of sound, width 80
    python benchmarks/cosmos3_sound_decode.py --seconds 1 --dec-dim 320 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from attention_memory import median_seconds
from step_bench import configure_xla_threads, cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONFIG = os.path.join(ROOT, "reference_configs", "nvidia__Cosmos3-Nano", "sound_tokenizer", "config.json")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=2.0, help="sound length (25 latent frames a second)")
    p.add_argument("--dec-dim", type=int, default=80, help="decoder base width (released: 320)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)

    configure_xla_threads(args.threads)
    import jax
    import numpy as np
    import torch
    from diffusers import Cosmos3AVAEAudioTokenizer as Ref

    from tests.parity.helpers import randomize_torch_module
    from vidax.weights.component import load_component

    jax.config.update("jax_default_matmul_precision", "highest")
    torch.set_num_threads(args.threads)
    with open(CONFIG) as f:
        raw = json.load(f)
    # Decoder only: the pipeline decodes; the encoder's weights would only cost memory here.
    ref = Ref.from_config({**raw, "dec_dim": args.dec_dim, "encoder_enabled": False}).eval()
    randomize_torch_module(ref, 0, scale=0.2, gain=0.7)
    with tempfile.TemporaryDirectory() as tmp:
        ref.save_pretrained(tmp)
        ours = load_component("Cosmos3AVAEAudioTokenizer", tmp)
    n_params = sum(t.numel() for t in ref.parameters())

    cfg = ours.config
    frames = max(1, round(args.seconds * cfg.sampling_rate / cfg.hop))
    z = np.random.default_rng(0).standard_normal((1, cfg.vocoder_input_dim, frames)).astype(np.float32)

    t0 = time.perf_counter()
    wave = np.asarray(ours.decode(z).block_until_ready())
    compile_s = time.perf_counter() - t0
    with torch.no_grad():
        want = ref.decode(torch.from_numpy(z)).numpy()
    err = float(np.abs(wave - want).max() / max(np.abs(want).max(), 1e-12))
    vidax_s = median_seconds(lambda: ours.decode(z).block_until_ready(), args.repeats)
    with torch.no_grad():
        diffusers_s = median_seconds(lambda: ref.decode(torch.from_numpy(z)), args.repeats)
    out = dict(
        cpu=cpu_model(),
        threads=args.threads,
        seconds=args.seconds,
        dec_dim=args.dec_dim,
        decoder_params=n_params,
        latent_frames=frames,
        waveform=tuple(wave.shape),
        sample_rate=ours.sample_rate,
        vidax_first_call_s=compile_s,
        vidax_s=vidax_s,
        diffusers_s=diffusers_s,
        wave_rel_err=err,
    )
    print(
        f"CPU: {out['cpu']} ({args.threads} threads), fp32, Cosmos 3 sound decoder at dec_dim {args.dec_dim} "
        f"({n_params / 1e6:.1f} M parameters): {args.seconds:g} s of sound = {frames} latent frames -> waveform "
        f"{out['waveform']} at {ours.sample_rate} Hz"
    )
    print(
        f"vidax {vidax_s:.3f} s, diffusers {diffusers_s:.3f} s (median of {args.repeats}); vidax first call "
        f"(compile + run) {compile_s:.1f} s; max rel. difference {err:.1e}"
    )
    return out


if __name__ == "__main__":
    main()
