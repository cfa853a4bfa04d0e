"""CogVideoX frame counts against diffusers: num_frames 16, 17, 49 on CogVideoX (5B)
and CogVideoX1.5 (``patch_size_t = 2``: odd latent counts padded to even in front, the padding
dropped before decoding).

``T = (num_frames - 1) // 4 + 1`` latent frames; the VAE decodes them to ``4 T`` (T even) or
``4 (T - 1) + 1`` frames (T odd), so 16 gives 16 frames but e.g. 18 would give 17. 16 (T even), 17
(T odd) and the default 49 (T 13, more than one VAE frame batch) cover both rules and the padding.
vidax must return the reference's clip (same count, same frames: PSNR >= 60 dB in fp32) and warn
exactly when that count is not ``num_frames``. Tiny checkpoints (tests/parity/cogvideox_reference.py),
one 16 x 16 pixel video, one step without guidance, so the long clips stay cheap.
"""

from __future__ import annotations

import pytest
import torch

import vidax
from tests.parity.cogvideox_reference import CALL, PROMPTS, build_reference, run_reference
from tests.parity.helpers import psnr
from vidax.errors import InputError
from vidax.models.cogvideox.vae import decoded_frames

FRAME_COUNTS = (16, 17, 49)


@pytest.mark.parametrize("variant", ["5b", "1.5"])
def test_frame_counts_behave_as_reference(tmp_path, variant, caplog):
    ref = build_reference(str(tmp_path), variant)
    pipe = vidax.load_pipeline(str(tmp_path))
    call = dict(CALL, height=16, width=16, num_inference_steps=1, guidance_scale=1.0)
    for n in FRAME_COUNTS:
        t, pad = pipe.hooks.latent_frames(n)
        unpadded = (n - 1) // 4 + 1
        assert pad == (unpadded % 2 if variant == "1.5" else 0) and t == unpadded + pad
        latents = torch.randn(1, t, 4, 2, 2, generator=torch.Generator().manual_seed(n)).numpy()
        ref_frames, _ = run_reference(
            ref, variant, "ddim", False, latents, prompts=PROMPTS[:1], **dict(call, num_frames=n)
        )
        caplog.clear()
        frames = pipe(prompt=PROMPTS[:1], latents=latents, progress=False, **dict(call, num_frames=n)).frames
        assert frames.shape == ref_frames.shape, n
        assert frames.shape[1] == decoded_frames(t - pad, 4)
        assert psnr(frames, ref_frames) >= 60.0, n
        warned = any(f"num_frames={n} " in r.getMessage() for r in caplog.records)
        assert warned == (frames.shape[1] != n), (n, frames.shape)


def test_decoded_frame_rule():
    assert [decoded_frames((n - 1) // 4 + 1, 4) for n in (1, 16, 17, 18, 40, 41, 49, 81)] == [
        1,
        16,
        17,
        17,
        40,
        41,
        49,
        81,
    ]


def test_bad_frame_count(tmp_path):
    build_reference(str(tmp_path), "5b")
    pipe = vidax.load_pipeline(str(tmp_path))
    with pytest.raises(InputError, match="num_frames"):
        pipe("a cat", num_frames=0)
