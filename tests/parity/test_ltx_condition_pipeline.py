"""LTXConditionPipeline and LTXLatentUpsamplePipeline end to end vs diffusers 0.42.1 (fp32).

The tiny random LTX-Video of tests/parity/ltx_reference.py (0.9.7's scheduler: shift 1, no
dynamic shifting, as LTXConditionPipeline needs) is saved as an ``LTXConditionPipeline`` folder;
a tiny random latent upsampler with the same VAE as an ``LTXLatentUpsamplePipeline`` folder.

The reference draws torch noise where vidax draws jax noise; the comparisons are exact by
construction, not by luck:

* ``randn_tensor`` of the reference's module is patched (pytest monkeypatch, these tests only):
  the initial noise is the latents vidax is given (or, for ``denoise_strength < 1``, vidax's
  re-noising noise), every other draw is zeros. Zeros are harmless where they go: the later-frame
  condition has strength 1 (``lerp(noise, c, 1) == c`` exactly), ``image_cond_noise_scale`` is 0,
  ``decode_noise_scale`` is 0 (the per-step noise is tested on its own against
  ``add_noise_to_image_conditioning_latents`` with the same noise).
* The VAE posterior (``retrieve_latents`` samples it, diffusers' own RNG) is made
  near-deterministic: the encoder's logvar channel (the last output channel of ``conv_out``)
  has bias -1e4, so logvar clamps at -30 and std = exp(-15) = 3e-7 on both sides; the samples
  then differ by ~1e-6 of the latents, far below the 60 dB bound.

Frames must agree to >= 60 dB (float32 rounding through T5, 3 transformer steps with per-token
timesteps and the VAE; measured 125-129 dB), latents to 1e-5 relative (measured 8e-7, 1.1e-6).
"""

import numpy as np
import pytest

from tests.parity.helpers import max_rel_err, psnr, randomize_torch_module
from tests.parity.ltx_reference import LATENT_CHANNELS, build_reference_ltx_pipeline
from tests.parity.wan_reference import random_image

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
ref_condition = pytest.importorskip("diffusers.pipelines.ltx.pipeline_ltx_condition")
ref_upsample = pytest.importorskip("diffusers.pipelines.ltx.pipeline_ltx_latent_upsample")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import vidax  # noqa: E402
from vidax.errors import InputError  # noqa: E402
from vidax.models.ltx.pipeline import LTXConditionPipeline, LTXVideoCondition  # noqa: E402

SIZE = dict(height=32, width=64, num_frames=17)
LATENT = (1, LATENT_CHANNELS, 5, 4, 8)  # (B, C, F', H', W') of SIZE
CALL = dict(
    prompt="a red fox in the snow",
    negative_prompt="blurry",
    num_inference_steps=3,
    guidance_scale=3.0,
    guidance_rescale=0.7,
    frame_rate=24,
    max_sequence_length=16,
    image_cond_noise_scale=0.0,
    decode_timestep=0.05,
    decode_noise_scale=0.0,
    **SIZE,
)


def _video(seed: int, n: int, size=(32, 64)):
    return [random_image(seed + i, size) for i in range(n)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(condition folder, upsample folder, reference LTXConditionPipeline, reference upsample pipeline)."""
    t2v = str(tmp_path_factory.mktemp("ltx_t2v"))
    base = build_reference_ltx_pipeline(t2v, release="Lightricks__LTX-Video-0.9.7-dev")
    with torch.no_grad():  # the logvar channel: std 3e-7 (see the module docstring)
        base.vae.encoder.conv_out.conv.bias[-1] = -1e4
    ref = diffusers.LTXConditionPipeline(**base.components)
    cond_path = str(tmp_path_factory.mktemp("ltx_condition"))
    ref.save_pretrained(cond_path, safe_serialization=True)
    up = ref_upsample.LTXLatentUpsamplerModel(
        in_channels=LATENT_CHANNELS,
        mid_channels=32,
        num_blocks_per_stage=1,
        dims=3,
        spatial_upsample=True,
        temporal_upsample=False,
    ).eval()
    randomize_torch_module(up, seed=21)
    ref_up = ref_upsample.LTXLatentUpsamplePipeline(vae=base.vae, latent_upsampler=up)
    up_path = str(tmp_path_factory.mktemp("ltx_upsample"))
    ref_up.save_pretrained(up_path, safe_serialization=True)
    return cond_path, up_path, ref, ref_up


@pytest.fixture(scope="module")
def pipe(folders):
    return vidax.load_pipeline(folders[0])


def _patched(monkeypatch, initial):
    """The reference module's randn_tensor: ``initial`` for the initial-noise shape, zeros otherwise."""

    def randn(shape, generator=None, device=None, dtype=None, layout=None):
        if tuple(shape) == tuple(initial.shape):
            return initial.clone().to(dtype or torch.float32)
        return torch.zeros(shape, dtype=dtype or torch.float32)

    monkeypatch.setattr(ref_condition, "randn_tensor", randn)


def _reference(ref, **call):
    with torch.no_grad():
        out = ref(**{**CALL, "output_type": "np", **call}).frames
    return np.asarray(out, np.float32) if call.get("output_type", "np") == "np" else out.numpy()


def _two_conditions(cls):
    # An image of another size at frame 0 (strength 0.8: its tokens' timesteps are min(t, 200)),
    # a 13-frame video at frame 4: latent frames 0-1 become extra tokens, 2-3 are lerped into
    # latent frames 3-4.
    return [
        cls(image=random_image(3, (40, 50)), frame_index=0, strength=0.8),
        cls(video=_video(10, 13), frame_index=4, strength=1.0),
    ]


def test_two_conditions_match_diffusers(folders, pipe, monkeypatch):
    _, _, ref, _ = folders
    noise = torch.randn(LATENT, generator=torch.Generator().manual_seed(7))
    _patched(monkeypatch, noise)
    want = _reference(ref, conditions=_two_conditions(ref_condition.LTXVideoCondition))
    plain = _reference(ref)
    assert psnr(plain, want) < 40  # the conditions change the reference's video

    assert type(pipe).__name__ == "LTXConditionPipeline"
    got = pipe(
        conditions=_two_conditions(LTXVideoCondition), latents=noise.numpy(), seed=0, progress=False, **CALL
    ).frames
    assert got.shape == want.shape == (1, 17, 32, 64, 3)
    assert psnr(got, want) >= 60, psnr(got, want)
    # diffusers' own condition objects are taken too; the final latents (B, C, F', H', W').
    want_z = _reference(ref, conditions=_two_conditions(ref_condition.LTXVideoCondition), output_type="latent")
    got_z = pipe(
        conditions=_two_conditions(ref_condition.LTXVideoCondition),
        latents=noise.numpy(),
        seed=0,
        progress=False,
        output_type="latent",
        **CALL,
    ).frames
    assert got_z.shape == want_z.shape == LATENT and max_rel_err(got_z, want_z) < 1e-5, max_rel_err(got_z, want_z)


def test_denoise_strength_with_latents_matches_diffusers(folders, pipe, monkeypatch):
    """Given clean latents, denoise_strength 0.34 of 6 steps runs the last int(2.04) = 2 (sigmas
    0.861, 0.536) from sigma * noise + (1 - sigma) * latents (the reference's noise patched to
    vidax's); flat image= at frame 0."""
    _, _, ref, _ = folders
    clean = np.random.default_rng(5).standard_normal(LATENT).astype(np.float32)
    noise = torch.from_numpy(np.asarray(LTXConditionPipeline.family.renoise_noise(4, LATENT)))
    _patched(monkeypatch, noise)
    image = random_image(8, (32, 64))
    call = dict(denoise_strength=0.34, num_inference_steps=6)
    want = _reference(ref, image=image, latents=torch.from_numpy(clean), **call)
    other = _reference(ref, image=image, latents=torch.from_numpy(-clean), **call)
    assert psnr(other, want) < 40  # the reference's frames depend on the given latents
    got = pipe(image=image, latents=clean, seed=4, progress=False, **{**CALL, **call}).frames
    assert psnr(got, want) >= 60, psnr(got, want)


def test_hard_condition_noise_matches_diffusers(monkeypatch):
    rng = np.random.default_rng(2)
    latents, init, noise = (rng.standard_normal((2, 6, 4)).astype(np.float32) for _ in range(3))
    mask = np.asarray([[1.0, 1.0, 0.5, 0.0, 1.0 - 1e-7, 0.0]] * 2, np.float32)
    monkeypatch.setattr(ref_condition, "randn_tensor", lambda shape, **_: torch.from_numpy(noise))
    t = np.float32(0.7)
    want = ref_condition.LTXConditionPipeline.add_noise_to_image_conditioning_latents(
        t, torch.from_numpy(init), torch.from_numpy(latents), 0.15, torch.from_numpy(mask), None
    ).numpy()
    got = LTXConditionPipeline.family.noise_hard_conditions(
        jnp.asarray(latents),
        jnp.asarray(init),
        jnp.asarray(mask),
        jnp.float32(0.15),
        jnp.float32(t),
        jnp.asarray(noise),
    )
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(want, latents)


def test_per_token_euler_step_matches_diffusers():
    """FlowMatchEuler.step(per_token_timesteps=) as diffusers' (tokens at their own sigma step to
    the next lower one of the schedule; t = 0 stays), inside jit."""
    from vidax.models.ltx.pipeline import linear_quadratic_schedule
    from vidax.schedulers import FlowMatchEulerDiscreteScheduler

    ts = linear_quadratic_schedule(4) * np.float32(1000)
    ref = diffusers.FlowMatchEulerDiscreteScheduler(shift=1.0)
    ref.set_timesteps(timesteps=torch.from_numpy(ts))
    ours = FlowMatchEulerDiscreteScheduler.from_config({"shift": 1.0})
    state = ours.set_timesteps(timesteps=list(ts))
    rng = np.random.default_rng(0)
    x, v = (rng.standard_normal((2, 5, 3)).astype(np.float32) for _ in range(2))
    ptt = np.minimum(ts[1], np.asarray([[0, 1000, 200, 500, 1000]] * 2, np.float32))
    ref._step_index = 1
    want = ref.step(
        torch.from_numpy(v),
        ref.timesteps[1],
        torch.from_numpy(x),
        per_token_timesteps=torch.from_numpy(ptt),
        return_dict=False,
    )[0].numpy()
    state = jax.tree.map(lambda a: a, state)
    got, _ = jax.jit(ours.step)(state, jnp.asarray(v), jnp.asarray(x), jnp.asarray(ptt))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got)[:, 0], x[:, 0])  # t = 0: unchanged


def test_upsample_pipeline_matches_diffusers(folders):
    """The same 5-D latents through both upsample pipelines (AdaIN and tone mapping on; decoded
    at a decode timestep without decode noise), and with output_type="latent"."""
    _, up_path, _, ref_up = folders
    z = np.random.default_rng(9).standard_normal(LATENT).astype(np.float32)
    call = dict(adain_factor=0.5, tone_map_compression_ratio=0.3, decode_timestep=0.05, decode_noise_scale=0.0)
    with torch.no_grad():
        want = np.asarray(ref_up(latents=torch.from_numpy(z), output_type="np", **call).frames, np.float32)
        want_z = ref_up(latents=torch.from_numpy(z), output_type="latent", **call).frames.numpy()
        other = np.asarray(ref_up(latents=torch.from_numpy(z * 0.5), output_type="np", **call).frames, np.float32)
    assert psnr(other, want) < 40
    up = vidax.load_pipeline(up_path)
    assert type(up).__name__ == "LTXLatentUpsamplePipeline"
    got = up(latents=z, seed=0, progress=False, **call).frames
    assert got.shape == want.shape == (1, 17, 64, 128, 3)
    assert psnr(got, want) >= 60, psnr(got, want)
    got_z = up(latents=z, seed=0, output_type="latent", **call).frames
    assert got_z.shape == want_z.shape and max_rel_err(got_z, want_z) < 1e-5, max_rel_err(got_z, want_z)
    for kwargs, match in (
        (dict(latents=z.reshape(1, 8, -1)), "expected"),
        (dict(), "exactly one of video"),
        (dict(latents=z, tone_map_compression_ratio=2.0), "tone_map_compression_ratio"),
    ):
        with pytest.raises(InputError, match=match):
            up.check_upsample_call(**kwargs)


def test_upsample_pipeline_refuses_denoising_keywords(folders):
    """A keyword of the denoising pipelines (prompt=, num_inference_steps=) is one InputError
    naming it and what the upsampler takes, not a TypeError; capabilities say the same."""
    up = vidax.load_pipeline(folders[1])
    z = np.zeros(LATENT, np.float32)
    for kwargs in (dict(prompt="a fox"), dict(num_inference_steps=3), dict(guidance_scale=3.0)):
        with pytest.raises(InputError, match=rf"takes no '{next(iter(kwargs))}'; it takes video, height"):
            up(latents=z, **kwargs)
    caps = up.capabilities
    assert caps.video and not caps.image and "prompt" not in caps.call_args
    assert {"latents", "adain_factor", "decode_timestep"} <= set(caps.call_args)


def test_bad_input_is_refused_before_work(folders, pipe):
    _, _, ref, _ = folders
    info = pipe.info
    video = _video(30, 13)

    def refused(match, **kwargs):
        with pytest.raises(InputError, match=match):
            pipe.check_call(info, "a", **{**SIZE, **kwargs})

    # A frame past the 17-frame clip (the reference makes meaningless coordinates of an image there).
    refused(
        r"frame_index=17 is not a frame of the 17-frame clip",
        conditions=[LTXVideoCondition(image=random_image(1), frame_index=17)],
    )
    # A video the reference's trim leaves with a frame count it rejects (frame_index at the clip's end).
    with pytest.raises(ValueError, match="Number of frames in the video must be of the form"), torch.no_grad():
        ref(
            conditions=[ref_condition.LTXVideoCondition(video=video, frame_index=17)],
            output_type="latent",
            **{**CALL, "num_inference_steps": 1},
        )
    refused(r"conditions\[0\]\.frame_index=17", conditions=[LTXVideoCondition(video=video, frame_index=17)])
    refused("video has no frames", video=[])
    refused(r"expected \(1, 8, 5, 4, 8\)", latents=np.zeros((1, 160, 8), np.float32))
    with pytest.raises(ValueError, match="must not be provided"):
        ref.check_inputs(
            "a", [ref_condition.LTXVideoCondition(image=random_image(1))], random_image(1), None, 0, 1.0, 1.0, 32, 64
        )
    refused(
        "conditions was given together with image",
        image=random_image(1),
        conditions=[LTXVideoCondition(image=random_image(1))],
    )
    refused("image and video were both given", image=random_image(1), video=video)
    refused("exactly one of image and video", conditions=[LTXVideoCondition(frame_index=0)])
    refused("strength must be a number in", image=random_image(1), strength=1.5)
    refused("denoise_strength=0.2 runs int", denoise_strength=0.2, num_inference_steps=3)


def test_video_condition_trimmed_with_warning(pipe, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="vidax.pipeline"):
        pipe.check_call(pipe.info, "a", video=np.zeros((15, 32, 64, 3), np.uint8), frame_index=8, **SIZE)
    assert "video has 15 frames; at frame_index=8 of 17 frames the first 9 are used" in caplog.text


def test_cli_generate_with_image(folders, tmp_path):
    from typer.testing import CliRunner

    from vidax.cli import app

    image = tmp_path / "first.png"
    random_image(4, (40, 50)).save(image)
    out = tmp_path / "out.npy"
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "a fox",
            "--checkpoint",
            folders[0],
            "--image",
            str(image),
            "--height",
            "32",
            "--width",
            "64",
            "--num-frames",
            "9",
            "--num-inference-steps",
            "1",
            "--max-sequence-length",
            "16",
            "--no-progress",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frames = np.load(out)
    assert frames.shape[-4:] == (9, 32, 64, 3) and np.isfinite(frames).all()
    # --video: the video (decoded with PyAV) conditions from frame 0.
    from vidax.io.video import write_video

    clip = write_video(
        np.random.default_rng(5).random((9, 40, 56, 3)).astype(np.float32), str(tmp_path / "c.mp4"), fps=8
    )
    result = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "a fox",
            "--checkpoint",
            folders[0],
            "--video",
            clip,
            "--height",
            "32",
            "--width",
            "64",
            "--num-frames",
            "9",
            "--num-inference-steps",
            "1",
            "--max-sequence-length",
            "16",
            "--no-progress",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert np.load(out).shape[-4:] == (9, 32, 64, 3)
    # inspect on both folder kinds (the upsample one has no transformer).
    for folder, words in (
        (folders[0], ("LTXConditionPipeline", "tasks: t2v, i2v, v2v")),
        (folders[1], ("LTXLatentUpsamplePipeline", "tasks: upsample")),
    ):
        result = CliRunner().invoke(app, ["inspect", folder])
        assert result.exit_code == 0 and all(w in result.output for w in words), result.output
