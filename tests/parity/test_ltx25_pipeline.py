"""End-to-end parity of vidax's ``LTX2Pipeline`` with ``diffusers.LTX2Pipeline`` on a tiny LTX-2.5
style checkpoint written by ``save_pretrained``: a Gemma 4 (``gemma4_unified``) text encoder (2
layers, width 12: 3 stacked hidden states; a 8-wide global layer with K = V and a proportional
RoPE), LTX-2.3/2.5's per-modality text connectors (video 40 wide, audio 16: the transformer's
widths), the LTX-2.5 transformer settings (no video FFN bias, the keyframe embedding), the duration
head, and ``test_ltx2_pipeline.py``'s convolutional video VAE, audio VAE, vocoder, scheduler and
tokenizer. Every parameter randomised.

* ``num_frames=None``: vidax's frame count (the latents it returns) is the one the reference's
  ``duration_head.predict_num_frames`` makes of the reference's own connector outputs, with the
  ``min_seconds`` / ``max_seconds`` bounds the call gives.
* A 2-step float32 run at that frame count on the same ``latents`` / ``audio_latents``: video PSNR
  >= 60 dB and audio SNR >= 60 dB (float32 on both sides, only summation order and the
  transcendental kernels differ; measured 133.8 dB and 134.7 dB at the head's 2.0 s -> 13 frames).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.parity.helpers import randomize_torch_module
from tests.parity.ltx2_reference import CONNECTORS_23, TRANSFORMER_25
from tests.parity.test_ltx2_pipeline import NEGATIVE, OFF, PROMPT, SCHEDULER, _psnr, _snr, vae_and_sound
from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
from diffusers.pipelines.ltx2 import LTX2DurationHead  # noqa: E402
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors  # noqa: E402
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline  # noqa: E402

S, F = "sliding_attention", "full_attention"
GEMMA4 = dict(
    vocab_size=97,
    hidden_size=12,
    intermediate_size=20,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=6,
    global_head_dim=8,
    num_global_key_value_heads=1,
    attention_k_eq_v=True,
    sliding_window=5,
    layer_types=[S, F],
    rms_norm_eps=1e-6,
    rope_parameters={
        S: {"rope_type": "default", "rope_theta": 100.0},
        F: {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1e4},
    },
)
CONNECTORS = dict(
    CONNECTORS_23,
    video_hidden_dim=40,
    audio_hidden_dim=16,
    video_connector_num_attention_heads=10,
    audio_connector_num_attention_heads=8,
)
TRANSFORMER = dict(
    TRANSFORMER_25, in_channels=6, out_channels=6, audio_in_channels=15, audio_out_channels=15, caption_channels=12
)
HEAD = dict(
    video_cross_attention_dim=40,
    audio_cross_attention_dim=16,
    pooler_hidden_dim=8,
    num_queries=1,
    num_pooler_heads=2,
    mlp_hidden_dim=6,
)
# 32 x 32 at 8 fps (the head's ~1.9 s are then 13 frames: 4 latent frames), 2 steps; 8 tokens of text.
RATE = 8.0
CALL = dict(height=32, width=32, frame_rate=RATE, num_inference_steps=2, max_sequence_length=8)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(diffusers pipeline, checkpoint folder) of the tiny LTX-2.5."""
    root = tmp_path_factory.mktemp("ltx25_pipe")
    build_tiny_t5_tokenizer(root / "tok", vocab_size=97)
    torch.manual_seed(0)
    gemma = transformers.Gemma4UnifiedForConditionalGeneration(
        transformers.Gemma4UnifiedConfig(text_config=GEMMA4)
    ).eval()
    randomize_torch_module(gemma, seed=1)
    connectors = LTX2TextConnectors(**CONNECTORS).eval()
    randomize_torch_module(connectors, seed=2, scale=1.0)
    transformer = diffusers.LTX2VideoTransformer3DModel(**TRANSFORMER).eval()
    randomize_torch_module(transformer, seed=3)
    vae, audio_vae, vocoder = vae_and_sound()
    head = LTX2DurationHead(**HEAD).eval()
    randomize_torch_module(head, seed=9, scale=1.0)
    pipe = LTX2Pipeline(
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=gemma,
        tokenizer=transformers.AutoTokenizer.from_pretrained(root / "tok"),
        connectors=connectors,
        transformer=transformer,
        vocoder=vocoder,
        duration_head=head,
    )
    pipe.set_progress_bar_config(disable=True)
    path = root / "ckpt"
    pipe.save_pretrained(path)
    return pipe, str(path)


@pytest.fixture(scope="module")
def vidax_pipe(checkpoint):
    import vidax

    return vidax.load_pipeline(checkpoint[1])


def _reference_frames(pipe, **bounds) -> tuple[int, float]:
    """(frames, seconds) of the reference's num_frames=None path: its encode_prompt, connectors
    (CFG batch), the positive half into ``predict_num_frames``."""
    with torch.no_grad():
        embeds, mask, neg, neg_mask = pipe.encode_prompt(PROMPT, NEGATIVE, max_sequence_length=8)
        video, audio, _ = pipe.connectors(torch.cat([neg, embeds]), torch.cat([neg_mask, mask]), padding_side="left")
        seconds = float(pipe.duration_head(video[1:], audio[1:])[0])
        frames = pipe.duration_head.predict_num_frames(
            video[1:],
            audio[1:],
            frame_rate=RATE,
            temporal_compression_ratio=pipe.vae_temporal_compression_ratio,
            **bounds,
        )
    return frames, seconds


def test_predicted_frames_and_video_match_diffusers(checkpoint, vidax_pipe):
    pipe, _ = checkpoint
    # The bounds bracket the tiny head's prediction so that its frame count is not a clamp.
    _, seconds = _reference_frames(pipe)
    bounds = dict(min_seconds=seconds / 2, max_seconds=seconds * 2)
    frames, _ = _reference_frames(pipe, **bounds)
    k = pipe.vae_temporal_compression_ratio
    assert frames > 1 + k and (frames - 1) % k == 0
    out = vidax_pipe(PROMPT, NEGATIVE, output_type="latent", seed=0, **CALL, **OFF, **bounds)
    f_lat = (frames - 1) // k + 1
    assert out.frames.shape == (1, 6, f_lat, 4, 4), (out.frames.shape, frames)  # (B, C, F', H', W')
    assert out.audio.shape == (1, 3, round(frames / RATE * 25), 5), (out.audio.shape, frames)  # (B, C_a, L, M)

    g = np.random.default_rng(11)
    latents = g.standard_normal((1, f_lat * 16, 6), dtype=np.float32)  # packed (B, F' H' W', C)
    audio_latents = g.standard_normal((1, 3, round(frames / RATE * 25), 5), dtype=np.float32)
    with torch.no_grad():
        ref = pipe(
            PROMPT,
            NEGATIVE,
            latents=torch.from_numpy(latents),
            audio_latents=torch.from_numpy(audio_latents),
            num_frames=frames,
            output_type="np",
            **CALL,
            **OFF,
        )
    want_video, want_audio = np.asarray(ref.frames, np.float32), ref.audio.float().numpy()
    got = vidax_pipe(
        PROMPT, NEGATIVE, latents=latents, audio_latents=audio_latents, num_frames=frames, seed=0, **CALL, **OFF
    )
    assert got.frames.shape == want_video.shape and got.audio.shape == want_audio.shape
    assert _psnr(got.frames, want_video) >= 60, _psnr(got.frames, want_video)
    assert _snr(got.audio, want_audio) >= 60, _snr(got.audio, want_audio)


def test_duration_call_checks(vidax_pipe):
    """Refused before any work, one line naming the keyword: several prompts or given latents
    without ``num_frames`` (one prediction / shapes checked before it), bounds that collapse."""
    from vidax.errors import InputError

    pipe = vidax_pipe
    assert pipe.info.duration_head and "duration head" in pipe.info.variant
    for args, kwargs, match in (
        (([PROMPT, "x"],), {}, "num_frames.*2 prompts"),
        ((PROMPT,), dict(latents=np.zeros((1, 16, 6), np.float32)), "latents.*num_frames"),
        ((PROMPT,), dict(min_seconds=2.0, max_seconds=2.0), "min_seconds.*max_seconds"),
        # the bounds act only on a prediction: with num_frames= they would be silently ignored
        (
            (PROMPT,),
            dict(num_frames=9, max_seconds=3.0),
            "max_seconds=3.0 bounds the length the duration head predicts, which it predicts only without num_frames",
        ),
    ):
        with pytest.raises(InputError, match=match):
            pipe.check_call(pipe.info, *args, **CALL, **OFF, **kwargs)
    # vidax inspect says the length is predicted (it once showed the config's 121 frames).
    from vidax.cli.inspecting import describe_checkpoint

    text = describe_checkpoint(pipe.info.checkpoint.root)
    assert (
        "frames predicted by the duration head (1-20 s; --num-frames overrides)" in text and " 121 frames" not in text
    )
    # Given num_frames: used as given (rounded as always), no prediction.
    call = pipe.check_call(pipe.info, PROMPT, num_frames=9, **CALL, **OFF)
    assert call.num_frames == 9 and "num_frames" in call.given
