"""Parity of LTX-2.5's duration head with diffusers 0.42.1's ``LTX2DurationHead``: the predicted
seconds, and the frame count ``predict_num_frames`` makes of them (``LTX2Pipeline`` with
``num_frames=None``): inside the bounds, clamped at ``min_seconds`` and at ``max_seconds``, and with
bounds narrower than one grid step.

Tiny head with distinct sizes (video width 24, audio 20, pooler 16 with 4 heads and 2 queries,
MLP 12), every parameter randomised; video tokens of 7 and audio tokens of 5 positions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.models.ltx2.duration_head import duration_num_frames
from vidax.weights.component import load_component

HEAD = dict(
    video_cross_attention_dim=24,
    audio_cross_attention_dim=20,
    pooler_hidden_dim=16,
    num_queries=2,
    num_pooler_heads=4,
    mlp_hidden_dim=12,
)
# fp32 on both sides; the exp of the log-duration carries the small summation-order differences.
FP32_TOL = 1e-5


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    from diffusers.pipelines.ltx2 import LTX2DurationHead

    ref = LTX2DurationHead(**HEAD).eval()
    randomize_torch_module(ref, seed=3, scale=1.0)
    path = tmp_path_factory.mktemp("duration_head")
    ref.save_pretrained(path)
    return ref, load_component("LTX2DurationHead", path)


def _tokens(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 7, 24, generator=g), torch.randn(2, 5, 20, generator=g)


def test_seconds_match(head):
    ref, ours = head
    video, audio = _tokens(0)
    with torch.no_grad():
        want = {"both": ref(video, audio), "video": ref(video, None), "audio": ref(None, audio)}
    got = {
        "both": ours(video.numpy(), audio.numpy()),
        "video": ours(video.numpy(), None),
        "audio": ours(None, audio.numpy()),
    }
    for name in want:
        assert max_rel_err(np.asarray(got[name]), want[name].numpy()) < FP32_TOL, name
    # The reference depends on its input (each prompt, each modality).
    assert max_rel_err(want["both"][0].numpy(), want["both"][1].numpy()) > 1e-2
    assert max_rel_err(want["video"].numpy(), want["both"].numpy()) > 1e-2


def test_frame_counts_match_predict_num_frames(head):
    """num_frames=None: the reference's ``predict_num_frames`` on one prompt against
    :func:`duration_num_frames` of vidax's seconds, at 24 and 25 fps, with bounds around the
    prediction (no clamp), above it (the ``min_seconds`` clamp), below it (``max_seconds``) and a
    window holding no grid point."""
    ref, ours = head
    video, audio = _tokens(1)
    seconds = float(np.asarray(ours(video[:1].numpy(), audio[:1].numpy()))[0])
    seen = set()
    for rate in (24.0, 25.0):
        for lo, hi, clamp in (
            (seconds / 3, seconds * 3, None),
            (seconds * 2, seconds * 4, "min"),
            (seconds / 4, seconds / 2, "max"),
            (1.0, 1.02, "window"),
        ):
            kw = dict(frame_rate=rate, temporal_compression_ratio=8, min_seconds=lo, max_seconds=hi)
            with torch.no_grad():
                want = ref.predict_num_frames(video[:1], audio[:1], **kw)
            got = duration_num_frames(seconds, **kw)
            assert got == want, (rate, lo, hi, got, want)
            assert (got - 1) % 8 == 0
            if clamp == "min":
                assert got >= round(lo * rate) > seconds * rate
            elif clamp == "max":
                assert got <= round(hi * rate) < seconds * rate
            seen.add(got)
    assert len(seen) >= 4  # the cases give different counts
