"""End-to-end parity of vidax's ``LTX2ImageToVideoPipeline`` and ``LTX2ConditionPipeline`` with
diffusers 0.42.1's on the tiny random LTX-2 checkpoint of ``test_ltx2_pipeline.py`` (its module
fixture, every parameter and latent statistic randomised), 2 steps in float32.

* I2V: the image (another size and aspect than the video) H.264 re-compressed at CRF 33, resized,
  encoded at its posterior mode; CFG on (video 3, audio 7, rescale 0.7), so the per-token
  timestep runs through the CFG batch. The reference draws its initial noise with torch: its
  module's ``randn_tensor`` is patched (these tests only) to return vidax's noise for that shape
  (vidax's ``initial_noise`` of the call) and zeros for every other draw, each of which the
  reference scales by 0 here (``noise_scale`` 0, decode noise 0).
* Conditions: an image at latent frame 0 (strength 1), a 6-frame video at latent frame 2 (trimmed
  to 5 frames: 2 latent frames appended as tokens, strength 0.6) and an image at latent frame -1
  (appended, strength 0.8, CRF 0), on given clean ``latents`` with ``noise_scale`` 0 (the
  reference's own noise then counts 0 times); without CFG (its batch is tested by the I2V run).

Video PSNR >= 60 dB and audio SNR >= 60 dB: float32 on both sides, only the order of additions,
the transcendental kernels and the image resize's rounding differ (~1e-6 relative per component);
a wrong mask, timestep, coordinate or normalisation costs tens of dB. Each test checks that the
reference's output depends on the condition (another image / another strength moves the video
and the sound far more than vidax differs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.parity.helpers import max_rel_err
from tests.parity.test_ltx2_pipeline import CALL, NEGATIVE, OFF, PROMPT, _noise, _psnr, _snr, checkpoint  # noqa: F401
from vidax.errors import InputError

diffusers = pytest.importorskip("diffusers")
from diffusers.pipelines.ltx2 import pipeline_ltx2_condition as ref_condition  # noqa: E402
from diffusers.pipelines.ltx2 import pipeline_ltx2_image2video as ref_i2v  # noqa: E402


def _image(seed: int, h: int, w: int) -> np.ndarray:
    """A smooth random uint8 image (H.264 keeps most of it), (h, w, 3)."""
    g = np.random.default_rng(seed)
    y, x = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    a, b, c = g.uniform(1, 6, 3)
    img = np.stack([np.sin(a * x + b * y), np.cos(b * x * y + c), np.sin(c * x - a * y)], -1)
    return ((img + 1) * 127.5).astype(np.uint8)


def _reference(ref, **kwargs):
    with torch.no_grad():
        out = ref(prompt=PROMPT, negative_prompt=NEGATIVE, output_type="np", **CALL, **OFF, **kwargs)
    return np.asarray(out.frames, np.float32), out.audio.float().numpy()


def _match(got, ref_video, ref_audio, other):
    psnr, snr = _psnr(got.frames, ref_video), _snr(got.audio, ref_audio)
    moved = _psnr(other[0], ref_video), _snr(other[1], ref_audio)
    print(f"video PSNR {psnr:.1f} dB, audio SNR {snr:.1f} dB; another condition: {moved[0]:.1f}, {moved[1]:.1f} dB")
    assert got.frames.shape == ref_video.shape and got.audio.shape == ref_audio.shape
    assert psnr >= 60 and snr >= 60
    # The decoders squash the latents' differences and the sound depends on the video only
    # through the audio<->video attention: the other condition moves both far more than vidax differs.
    assert moved[0] < psnr - 20 and moved[1] < snr - 20


@pytest.fixture(scope="module")
def pipes(checkpoint):  # noqa: F811
    """vidax's I2V pipeline as ``load_pipeline(task="i2v")`` loads it, and the condition pipeline
    on the same loaded components (one load; the encoders' and decoders' compiles are shared)."""
    import vidax
    from vidax.models.ltx2.pipeline_condition import LTX2ConditionPipeline

    i2v = vidax.load_pipeline(checkpoint[1], task="i2v")
    names = ("tokenizer", "scheduler", "text_encoder", "connectors", "transformer", "vae", "audio_vae", "vocoder")
    return i2v, LTX2ConditionPipeline(i2v.info, {n: getattr(i2v, n) for n in names}, dtype=i2v.dtype)


def test_cli_tasks_pick_the_pipelines(checkpoint):  # noqa: F811
    """``vidax generate --image`` asks for i2v, ``--video`` for v2v: the LTX-2 folder's classes."""
    from vidax.checkpoint import Checkpoint
    from vidax.pipelines.loading import pipeline_class

    ckpt = Checkpoint.open(checkpoint[1])
    names = [pipeline_class(ckpt, task=t).__name__ for t in ("t2v", "i2v", "v2v")]
    assert names == ["LTX2Pipeline", "LTX2ImageToVideoPipeline", "LTX2ConditionPipeline"]


def test_i2v_matches_diffusers(checkpoint, pipes, monkeypatch):  # noqa: F811
    pipe, _ = checkpoint
    ref = diffusers.LTX2ImageToVideoPipeline(**pipe.components)
    ref.set_progress_bar_config(disable=True)
    vx = pipes[0]
    assert type(vx).__name__ == "LTX2ImageToVideoPipeline"
    _, audio_latents = _noise()
    image, other = _image(1, 27, 61), _image(2, 27, 61)
    kw = dict(audio_latents=audio_latents, seed=5, **CALL, **OFF)
    noise = np.asarray(vx.hooks.initial_noise(vx.check_call(vx.info, PROMPT, image=image, **kw))["latents"])

    def randn(shape, generator=None, device=None, dtype=None, layout=None):
        return torch.from_numpy(noise.copy()) if tuple(shape) == noise.shape else torch.zeros(shape, dtype=dtype)

    monkeypatch.setattr(ref_i2v, "randn_tensor", randn)
    a = torch.from_numpy(audio_latents)
    want = _reference(ref, image=_pil(image), audio_latents=a)
    moved = _reference(ref, image=_pil(other), audio_latents=a)
    got = vx(image, PROMPT, NEGATIVE, progress=False, **kw)
    _match(got, *want, moved)

    # The two-stage path's second stage: given 5-D de-normalised latents (e.g. upsampled) are
    # normalised with the scaling factor, their frame 0 is the condition (the image is not
    # encoded) and stays as it is; the reference returns them de-normalised (same compiled step).
    lat = np.random.default_rng(13).standard_normal(noise.shape, dtype=np.float32)
    with torch.no_grad():
        ref_z = ref(
            image=_pil(image),
            prompt=PROMPT,
            negative_prompt=NEGATIVE,
            latents=torch.from_numpy(lat),
            audio_latents=a,
            output_type="latent",
            **CALL,
            **OFF,
        ).frames.numpy()
    z = vx(image, PROMPT, NEGATIVE, latents=lat, output_type="latent", progress=False, **kw).frames
    print(f"given latents: SNR {_snr(z, ref_z):.1f} dB")
    assert _snr(z, ref_z) >= 60
    np.testing.assert_allclose(z[:, :, 0], lat[:, :, 0], rtol=1e-5, atol=1e-5)  # de-normalised(normalised)


def _pil(a):
    import PIL.Image

    return PIL.Image.fromarray(a)


def _conditions(cls):
    video = [_pil(_image(10 + i, 20, 30)) for i in range(6)]
    return [
        cls(frames=_pil(_image(3, 40, 24)), index=0, strength=1.0),
        cls(frames=video, index=2, strength=0.6),
        cls(frames=_pil(_image(4, 30, 30)), index=-1, strength=0.8, crf=0),
    ]


def test_conditions_match_diffusers(checkpoint, pipes):  # noqa: F811
    from vidax.models.ltx2.pipeline_condition import LTX2VideoCondition

    pipe, _ = checkpoint
    # The reference's connectors take the padding side the tokenizer has when the pipeline is
    # built: the released Gemma tokenizers' "left" (their class default; the tiny T5-style one
    # here defaults to "right", which the T2V reference sets to "left" only when it encodes).
    pipe.tokenizer.padding_side = "left"
    ref = diffusers.LTX2ConditionPipeline(**pipe.components)
    ref.set_progress_bar_config(disable=True)
    vx = pipes[1]
    g = np.random.default_rng(12)
    latents = g.standard_normal((1, 6, 5, 4, 4), dtype=np.float32)
    _, audio_latents = _noise()
    kw = dict(noise_scale=0.0, guidance_scale=1.0, audio_guidance_scale=1.0)
    t = dict(latents=torch.from_numpy(latents), audio_latents=torch.from_numpy(audio_latents), **kw)
    want = _reference(ref, conditions=_conditions(ref_condition.LTX2VideoCondition), **t)
    moved = _reference(ref, conditions=_conditions(ref_condition.LTX2VideoCondition)[::2], **t)  # no video
    got = vx(
        PROMPT,
        NEGATIVE,
        conditions=_conditions(LTX2VideoCondition),
        latents=latents,
        audio_latents=audio_latents,
        progress=False,
        **kw,
        **CALL,
        **OFF,
    )
    _match(got, *want, moved)


def test_bad_input_is_refused_before_any_weight(checkpoint):  # noqa: F811
    import vidax
    from vidax.checkpoint import Checkpoint
    from vidax.models.ltx2.pipeline_condition import LTX2ConditionPipeline, LTX2VideoCondition
    from vidax.models.ltx2.pipeline_i2v import LTX2ImageToVideoPipeline

    info = LTX2ImageToVideoPipeline.family.read_checkpoint(Checkpoint.open(checkpoint[1]))  # configs only, no weights
    _, audio_latents = _noise()
    image = _image(1, 20, 20)
    i2v = [
        (dict(), "image"),
        (dict(image=[image, image]), "image"),
        (dict(image=image, image_crf=60), "image_crf"),
        (dict(image=image[:1]), "too small for the H.264"),
        (dict(image=image, latents=np.zeros((1, 80, 6), np.float32)), r"latents have shape \(1, 80, 6\)"),
        (dict(image=image, audio_latents=audio_latents[:, :, :17]), r"audio_latents have shape \(1, 3, 17, 5\)"),
    ]
    for kwargs, message in i2v:
        with pytest.raises(vidax.InputError, match=message):
            LTX2ImageToVideoPipeline.check_call(info, PROMPT, **{**CALL, **kwargs})
    video = [image, image[:, :10]]
    cond = [
        (dict(conditions=[LTX2VideoCondition(image, index=5)]), r"conditions\[0\].index=5 is not a latent frame"),
        (dict(conditions=LTX2VideoCondition(image, index=-6)), r"conditions\[0\].index=-6"),
        (dict(video=np.stack([image] * 5), condition_index=7), "condition_index=7"),
        (
            dict(conditions=[LTX2VideoCondition(image), LTX2VideoCondition(video, index=2)]),
            r"conditions\[1\].frames.*must have one size",
        ),
        (dict(conditions=[LTX2VideoCondition(image, strength=1.5)]), r"conditions\[0\].strength"),
        (dict(conditions=[LTX2VideoCondition(image, crf=-1)]), r"conditions\[0\].crf"),
        (dict(conditions=[LTX2VideoCondition(image)], image=image), "conditions.* was given with"),
        (dict(conditions=["x"]), r"conditions\[0\]"),
        (dict(condition_strength=0.5), "condition_strength=0.5 was given without"),
        (dict(video=np.stack([image] * 5), audio_latents=audio_latents[:, :1]), r"audio_latents have shape"),
    ]
    for kwargs, message in cond:
        with pytest.raises(vidax.InputError, match=message):
            LTX2ConditionPipeline.check_call(info, PROMPT, **{**CALL, **kwargs})


@pytest.mark.parametrize("model_type, crf", [("gemma3", 33), ("gemma4_unified", 18), ("gemma4", 18), (None, 33)])
def test_default_image_crf_follows_the_text_encoder(model_type, crf):
    """diffusers' ``resolve_default_image_crf``: 18 for LTX-2.5's Gemma 4 text encoders, else 33
    (None: a folder without the text encoder's config)."""
    from types import SimpleNamespace

    from diffusers.pipelines.ltx2.utils import resolve_default_image_crf

    from vidax.models.ltx2.conditioning import default_image_crf

    class Ckpt:
        config_files = {"text_encoder": "config.json"} if model_type else {}

        def config(self, name):
            return {"model_type": model_type}

    assert default_image_crf(SimpleNamespace(checkpoint=Ckpt())) == crf
    encoder = SimpleNamespace(config=SimpleNamespace(model_type=model_type))
    assert resolve_default_image_crf(encoder) == crf


# ---------------------------------------------------------------------------------------------
# The two-stage path: LTX2LatentUpsamplePipeline, then a few refining steps

UPSAMPLED = (1, 6, 5, 8, 8)  # the 32 x 32 clip's (1, 6, 5, 4, 4) latents at 2x


@pytest.fixture(scope="module")
def upsample(checkpoint, tmp_path_factory):  # noqa: F811
    """(reference, vidax) ``LTX2LatentUpsamplePipeline`` of the tiny LTX-2's VAE and a random
    upsampler in LTX-2.0's released layout (rational resampler at 2x), saved as the reference's
    folder (model_index + vae/ + latent_upsampler/)."""
    from diffusers.pipelines.ltx2 import LTX2LatentUpsamplePipeline
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel

    import vidax
    from tests.parity.helpers import randomize_torch_module

    up = LTX2LatentUpsamplerModel(in_channels=6, mid_channels=32, num_blocks_per_stage=1).eval()
    randomize_torch_module(up, seed=21)
    ref = LTX2LatentUpsamplePipeline(vae=checkpoint[0].vae, latent_upsampler=up)
    ref.set_progress_bar_config(disable=True)
    path = tmp_path_factory.mktemp("ltx2_upsample")
    ref.save_pretrained(path)
    return ref, vidax.load_pipeline(str(path))


def test_upsample_pipeline_matches_diffusers(upsample):
    """The same un-normalised 5-D latents through both upsample pipelines (AdaIN and tone mapping
    on), decoded (no de-normalisation, as the reference) and as latents; normalised packed tokens
    with ``latents_normalized=True``. Frames >= 60 dB, latents 1e-5 relative (float32; the
    decode's normalise / de-normalise round trip adds ~1e-7)."""
    ref, vx = upsample
    assert type(vx).__name__ == "LTX2LatentUpsamplePipeline"
    assert vx.info.upsampler_config.rational == (2, 1)
    g = np.random.default_rng(21)
    z = g.standard_normal((1, 6, 5, 4, 4), dtype=np.float32)
    call = dict(adain_factor=0.5, tone_map_compression_ratio=0.3, height=32, width=32)
    with torch.no_grad():
        want = np.asarray(ref(latents=torch.from_numpy(z), output_type="np", **call).frames, np.float32)
        want_z = ref(latents=torch.from_numpy(z), output_type="latent", **call).frames.numpy()
        other = np.asarray(ref(latents=torch.from_numpy(z * 0.5), output_type="np", **call).frames, np.float32)
    got = vx(latents=z, seed=0, progress=False, **call).frames
    assert got.shape == want.shape == (1, 17, 64, 64, 3)
    psnr, moved = _psnr(got, want), _psnr(other, want)
    print(f"upsample pipeline: video PSNR {psnr:.1f} dB (other latents: {moved:.1f} dB)")
    assert psnr >= 60 and moved < psnr - 20
    got_z = vx(latents=z, seed=0, output_type="latent", **call).frames
    assert got_z.shape == want_z.shape == UPSAMPLED and max_rel_err(got_z, want_z) < 1e-5, max_rel_err(got_z, want_z)

    # Packed normalised tokens (B, F' H' W', C), de-normalised first (the reference's latents_normalized).
    tokens = g.standard_normal((1, 80, 6), dtype=np.float32)
    with torch.no_grad():
        want_p = ref(
            latents=torch.from_numpy(tokens),
            latents_normalized=True,
            num_frames=17,
            output_type="latent",
            height=32,
            width=32,
        ).frames.numpy()
    got_p = vx(latents=tokens, latents_normalized=True, num_frames=17, output_type="latent", height=32, width=32).frames
    assert max_rel_err(got_p, want_p) < 1e-5, max_rel_err(got_p, want_p)

    for kwargs, match in (
        (
            dict(latents=tokens[:, :79], num_frames=17, height=32, width=32),
            r"latents have shape \(1, 79, 6\); packed latents of num_frames=17, height=32, width=32 "
            r"are \(batch, 80 tokens",
        ),
        (dict(latents=z, latents_normalized="yes"), "latents_normalized='yes'"),
        (dict(latents=tokens, num_frames=0), "num_frames=0"),
        (dict(latents=z, prompt="a fox"), r"takes no 'prompt'"),
        (dict(video=[_image(1, 32, 32)], latents=z), "exactly one of video"),
    ):
        with pytest.raises(InputError, match=match):
            vx(**kwargs)

    # The CLI, as for LTX-Video's upsampler: inspect reads the folder, generate says to use Python.
    from typer.testing import CliRunner

    from vidax.cli import app

    folder = str(vx.checkpoint.root)
    result = CliRunner().invoke(app, ["inspect", folder])
    assert result.exit_code == 0 and "LTX2LatentUpsamplePipeline" in result.output, result.output
    assert "LTX-2 latent upsampler (2x spatial, 1x temporal)" in result.output, result.output
    result = CliRunner().invoke(app, ["generate", "-p", "a fox", "--checkpoint", folder, "-o", "x.npy"])
    assert result.exit_code != 0 and "run it from Python" in result.output, result.output


def test_two_stage_matches_diffusers(checkpoint, pipes, upsample, monkeypatch):  # noqa: F811
    """diffusers' documented two-stage recipe, image-to-video, on both sides: stage 1 (2 steps,
    CFG) at 32 x 32 with ``output_type="latent"``; the upsample pipeline on its video latents; stage
    2 at 64 x 64 on the upsampled latents and stage 1's audio latents, the scheduler's dynamic shift
    and terminal stretch off, ``STAGE_2_DISTILLED_SIGMA_VALUES`` with ``noise_scale`` its first,
    guidance 1 (the sound's CFG at its default 7); the refined latents of both streams compared
    (stage 2's decode is the I2V test's and the upsample pipeline's). Each side chains its own
    outputs; the reference's noise draws are vidax's (stage 1: the initial noise; stage 2: the noise
    mixed into the given latents, drawn as vidax's I2V pipeline draws it), every other draw zeros
    (scaled by 0). Latent SNR >= 60 dB for both streams (float32 through both chains)."""
    import jax
    from diffusers.pipelines.ltx2.utils import STAGE_2_DISTILLED_SIGMA_VALUES as SIGMAS

    from vidax.schedulers import scheduler_from_config

    pipe, _ = checkpoint
    ref_up, vx_up = upsample
    ref = diffusers.LTX2ImageToVideoPipeline(**pipe.components)
    ref.set_progress_bar_config(disable=True)
    vx = pipes[0]
    image = _image(1, 27, 61)
    _, audio_latents = _noise()
    one = dict(image=image, audio_latents=audio_latents, seed=5, **CALL, **OFF)
    noise1 = np.asarray(vx.hooks.initial_noise(vx.check_call(vx.info, PROMPT, **one))["latents"])
    two = dict(
        height=64,
        width=64,
        num_frames=17,
        frame_rate=24.0,
        max_sequence_length=8,
        num_inference_steps=3,
        sigmas=list(SIGMAS),
        noise_scale=SIGMAS[0],
        guidance_scale=1.0,
    )
    # vidax's stage-2 noise (LTX2ImageToVideoPipeline.prepare_latents / LTX2Pipeline.prepare_latents):
    # key fold_in(seed, 3); the video's fold_in(key, 0) channels last, the packed audio's fold_in(key, 1).
    key = jax.random.fold_in(jax.random.PRNGKey(6), 3)
    video_eps = np.moveaxis(np.asarray(jax.random.normal(jax.random.fold_in(key, 0), (1, 5, 8, 8, 6))), -1, 1)
    audio_eps = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (1, 18, 15)))
    draws = {noise1.shape: noise1, UPSAMPLED: video_eps, audio_eps.shape: audio_eps}

    def randn(shape, generator=None, device=None, dtype=None, layout=None):
        shape = tuple(shape)
        return torch.from_numpy(draws[shape].copy()) if shape in draws else torch.zeros(shape, dtype=dtype)

    monkeypatch.setattr(ref_i2v, "randn_tensor", randn)
    stage2_scheduler = dict(use_dynamic_shifting=False, shift_terminal=None)

    # The reference's chain.
    with torch.no_grad():
        z1, a1 = ref(
            image=_pil(image),
            prompt=PROMPT,
            negative_prompt=NEGATIVE,
            audio_latents=torch.from_numpy(audio_latents),
            output_type="latent",
            return_dict=False,
            **{**CALL, **OFF},
        )
        up = ref_up(latents=z1, output_type="latent", return_dict=False)[0]
        scheduler = pipe.scheduler
        ref.scheduler = diffusers.FlowMatchEulerDiscreteScheduler.from_config(scheduler.config, **stage2_scheduler)
        out = ref(
            image=_pil(image),
            prompt=PROMPT,
            negative_prompt=NEGATIVE,
            latents=up,
            audio_latents=a1,
            output_type="latent",
            **two,
            **OFF,
        )
    want_video, want_audio = out.frames.numpy(), out.audio.float().numpy()

    # vidax's chain.
    s1 = vx(prompt=PROMPT, negative_prompt=NEGATIVE, output_type="latent", progress=False, **one)
    vx_z = vx_up(latents=s1.frames, output_type="latent", seed=0, progress=False).frames
    assert vx_z.shape == up.shape == UPSAMPLED
    print(f"stage 1 latents SNR {_snr(s1.frames, z1.numpy()):.1f} dB, upsampled {_snr(vx_z, up.numpy()):.1f} dB")
    checkpoint_scheduler = vx.scheduler
    vx.scheduler = scheduler_from_config({**vx.info.scheduler_config, **stage2_scheduler})
    try:
        got = vx(
            image,
            PROMPT,
            NEGATIVE,
            latents=vx_z,
            audio_latents=s1.audio,
            seed=6,
            progress=False,
            output_type="latent",
            **two,
            **OFF,
        )
    finally:
        vx.scheduler = checkpoint_scheduler
    assert got.frames.shape == want_video.shape == UPSAMPLED and got.audio.shape == want_audio.shape == (1, 3, 18, 5)
    snrs = _snr(got.frames, want_video), _snr(got.audio, want_audio)
    # The reference's refined latents depend on stage 2 (they are not the upsampled ones).
    moved = _snr(up.numpy(), want_video)
    print(
        f"two-stage latents: video SNR {snrs[0]:.1f} dB, audio {snrs[1]:.1f} dB (upsampled vs refined {moved:.1f} dB)"
    )
    assert min(snrs) >= 60 and moved < min(snrs) - 20
