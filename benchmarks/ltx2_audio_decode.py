"""Audio decode time, vidax vs diffusers: LTX-2's audio latents -> mel (``AutoencoderKLLTX2Audio``)
-> waveform (``LTX2Vocoder``, or LTX-2.3's ``LTX2VocoderWithBWE``), at the released widths.

Real configs (``reference_configs/Lightricks__LTX-2`` / ``diffusers__LTX-2.3-Diffusers``), the
reference's default weights saved with ``save_pretrained`` and read by vidax's component loader
(so both sides run the same weights; the script also prints their largest difference), one
clip's audio latents at the pipeline's rate (25 latent frames per second: 16 kHz, hop 160, 4x),
the same thread count on both sides (torch ``set_num_threads``, XLA's intra-op threads), fp32.
Times are the median of ``--repeats`` calls after one warm-up call (vidax's compile is reported
apart).

    python benchmarks/ltx2_audio_decode.py                        # LTX-2, 5 s of audio
    python benchmarks/ltx2_audio_decode.py --model ltx2.3 --seconds 2 --threads 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from attention_memory import median_seconds
from step_bench import configure_xla_threads, cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

REPOS = {"ltx2": "Lightricks__LTX-2", "ltx2.3": "diffusers__LTX-2.3-Diffusers"}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(REPOS), default="ltx2")
    p.add_argument("--seconds", type=float, default=5.0, help="audio length (LTX-2's default clip: ~5 s)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)

    configure_xla_threads(args.threads)
    import diffusers
    import jax
    import numpy as np
    import torch
    from diffusers.pipelines.ltx2 import vocoder as ref_vocoders

    from vidax.weights.component import load_component

    jax.config.update("jax_default_matmul_precision", "highest")
    torch.set_num_threads(args.threads)
    folder = os.path.join(ROOT, "reference_configs", REPOS[args.model])
    import json

    with open(os.path.join(folder, "vocoder", "config.json")) as f:
        voc_cls = getattr(ref_vocoders, json.load(f)["_class_name"])
    torch.manual_seed(0)
    ref_vae = diffusers.AutoencoderKLLTX2Audio.from_config(
        diffusers.AutoencoderKLLTX2Audio.load_config(os.path.join(folder, "audio_vae"))
    ).eval()
    ref_voc = voc_cls.from_config(voc_cls.load_config(os.path.join(folder, "vocoder"))).eval()
    with torch.no_grad():  # the released STFT bases and mel filterbank are not zeros
        if hasattr(ref_voc, "mel_stft"):
            for b in (ref_voc.mel_stft.stft_fn.forward_basis, ref_voc.mel_stft.mel_basis):
                b.copy_(torch.rand(b.shape) * 0.05)
    with tempfile.TemporaryDirectory() as tmp:
        ref_vae.save_pretrained(os.path.join(tmp, "audio_vae"))
        ref_voc.save_pretrained(os.path.join(tmp, "vocoder"))
        vae = load_component("AutoencoderKLLTX2Audio", os.path.join(tmp, "audio_vae"))
        voc = load_component(voc_cls.__name__, os.path.join(tmp, "vocoder"))

    cfg = vae.config
    length = round(args.seconds * cfg.sample_rate / cfg.mel_hop_length / cfg.latent_downsample)
    z = (
        np.random.default_rng(0)
        .standard_normal((1, cfg.latent_channels, length, cfg.mel_bins // cfg.latent_downsample))
        .astype(np.float32)
    )

    def ours():
        mel = vae.decode(z)
        return np.asarray(voc(mel).block_until_ready()), mel

    def theirs():
        with torch.no_grad():
            mel = ref_vae.decode(torch.from_numpy(z)).sample
            return ref_voc(mel).numpy(), mel

    t0 = time.perf_counter()
    wave, mel = ours()
    compile_s = time.perf_counter() - t0
    want, want_mel = theirs()
    err = float(np.abs(wave - want).max() / max(np.abs(want).max(), 1e-12))
    mel_err = float(np.abs(np.asarray(mel) - want_mel.numpy()).max() / np.abs(want_mel.numpy()).max())
    rows = dict(
        vidax_vae_s=median_seconds(lambda: vae.decode(z).block_until_ready(), args.repeats),
        vidax_vocoder_s=median_seconds(lambda: voc(mel).block_until_ready(), args.repeats),
    )
    with torch.no_grad():
        rows["diffusers_vae_s"] = median_seconds(lambda: ref_vae.decode(torch.from_numpy(z)), args.repeats)
        rows["diffusers_vocoder_s"] = median_seconds(lambda: ref_voc(want_mel), args.repeats)
    out = dict(
        model=args.model,
        cpu=cpu_model(),
        threads=args.threads,
        seconds=args.seconds,
        latent_frames=length,
        mel=tuple(mel.shape),
        waveform=tuple(wave.shape),
        sample_rate=voc.sample_rate,
        vidax_first_call_s=compile_s,
        mel_rel_err=mel_err,
        wave_rel_err=err,
        **rows,
    )
    print(
        f"CPU: {out['cpu']} ({args.threads} threads), fp32, {args.model}: {args.seconds:g} s of audio = "
        f"{length} latent frames -> mel {out['mel']} -> waveform {out['waveform']} at {voc.sample_rate} Hz"
    )
    print(f"{'':10s} {'audio VAE':>10s} {'vocoder':>10s} {'total':>10s}")
    for side in ("vidax", "diffusers"):
        a, b = rows[f"{side}_vae_s"], rows[f"{side}_vocoder_s"]
        print(f"{side:10s} {a:9.3f}s {b:9.3f}s {a + b:9.3f}s")
    print(
        f"vidax first call (compile + run): {compile_s:.1f} s; max rel. difference mel {mel_err:.1e}, "
        f"waveform {err:.1e}"
    )
    return out


if __name__ == "__main__":
    main()
