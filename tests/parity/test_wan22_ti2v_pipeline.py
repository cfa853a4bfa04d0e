"""Wan2.2 TI2V-5B against diffusers, same tokenizer, latents and image, every weight random.

One checkpoint folder (model_index.json: ``WanPipeline``, ``expand_timesteps: true``, the Wan2.2
VAE with 2x2 patchify and 16x spatial compression) runs text-to-video through
``diffusers.WanPipeline`` and image-to-video through ``diffusers.WanImageToVideoPipeline`` built
from the same components, as the TI2V-5B model card does; vidax loads them with
``load_pipeline(path)`` and ``load_pipeline(path, task="i2v")``. Sizes are multiples of 32 (16x
VAE times 2x2 patches): 64 x 96 pixels are 4 x 6 latents and 2 x 3 tokens per frame.
"""

import numpy as np
import pytest

import vidax
from tests.parity.helpers import max_rel_err, psnr
from tests.parity.wan_reference import (
    NEGATIVES,
    PROMPTS,
    WAN_BF16_MIN_PSNR,
    bf16_psnr,
    build_reference_wan_pipeline,
    random_image,
    reference_outputs,
)
from vidax.checkpoint import Checkpoint
from vidax.errors import InputError
from vidax.pipelines.plan import pipeline_class
from vidax.stats import RunStats

CALL = dict(
    prompt=PROMPTS,
    negative_prompt=NEGATIVES,
    num_frames=9,
    num_inference_steps=4,
    guidance_scale=4.5,
    max_sequence_length=16,
)
LANDSCAPE = dict(height=64, width=96)
PORTRAIT = dict(height=96, width=64)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from diffusers import WanImageToVideoPipeline

    path = str(tmp_path_factory.mktemp("wan22_ti2v"))
    t2v = build_reference_wan_pipeline(path, ti2v=True)
    i2v = WanImageToVideoPipeline(**t2v.components, expand_timesteps=True)
    out = reference_outputs(t2v, [("t2v", (64, 96), "np")], scale=16, **CALL)
    runs = [("i2v", (64, 96), "np"), ("i2v_portrait", (96, 64), "latent")]
    out.update(reference_outputs(i2v, runs, scale=16, image=random_image(0), **CALL))
    return path, {**out, "torch_i2v": i2v}


def test_t2v_fp32_matches_diffusers(reference):
    path, ref = reference
    pipe = vidax.load_pipeline(path, dtype="float32")
    assert type(pipe).__name__ == "WanPipeline" and pipe.info.expand_timesteps
    assert (pipe.vae.config.spatial_compression, pipe.vae.config.temporal_compression) == (16, 4)
    latents, frames = ref["t2v"]
    out = pipe(latents=latents, progress=False, **LANDSCAPE, **CALL)
    assert out.frames.shape == frames.shape == (2, 9, 64, 96, 3)
    value = psnr(out.frames, frames)
    print(f"TI2V T2V fp32 video PSNR vs diffusers: {value:.1f} dB")
    # Measured 139 dB: fp32 summation order only (vidax feeds the reference's all-equal per-token
    # timesteps as one timestep per sample). 60 dB is the bar.
    assert value >= 60.0
    assert psnr(frames[0], frames[1]) < 30.0  # the frames depend on their inputs
    assert np.mean((frames <= 0.0) | (frames >= 1.0)) < 0.05  # and are not clipped
    with pytest.raises(
        InputError,
        match=r"multiples of 32 \(the VAE's 16x spatial compression times the "
        r"transformer's 2x2 patches.*height=48, width=96.*height in \[32, 64\]",
    ):
        pipe(height=48, width=96, **CALL)


def test_i2v_fp32_matches_diffusers(reference, caplog):
    path, ref = reference
    pipe = vidax.load_pipeline(path, dtype="float32", task="i2v")
    assert type(pipe).__name__ == "WanImageToVideoPipeline" and pipe.info.expand_timesteps
    latents, frames = ref["i2v"]
    out = pipe(random_image(0), latents=latents, progress=False, **LANDSCAPE, **CALL)
    value = psnr(out.frames, frames)
    print(f"TI2V I2V fp32 video PSNR vs diffusers: {value:.1f} dB")
    assert value >= 60.0  # measured 139 dB
    other = pipe(random_image(1), latents=latents, progress=False, **LANDSCAPE, **CALL)
    assert psnr(other.frames, frames) < 40.0  # the image steers the video (measured 25 dB)
    # One checkpoint, two tasks: the class model_index.json names (WanPipeline) takes no image=, as
    # diffusers' (TypeError); its error names the class for image-to-video.
    both = pipeline_class(Checkpoint.open(path))
    assert both.__name__ == "WanPipeline"
    with pytest.raises(
        InputError,
        match=r"^WanPipeline takes no image \(diffusers' does not either\); for image-to-video use WanImageToVideoPipeline$",
    ):
        both.check_call(pipe.info, image=random_image(0), latents=latents, **LANDSCAPE, **CALL)
    with pytest.raises(
        InputError, match=r"WanImageToVideoPipeline takes no 'strength'; it takes prompt, negative_prompt, image"
    ):
        pipe(image=random_image(0), strength=0.5, **LANDSCAPE, **CALL)
    # last_image: diffusers' expand_timesteps path conditions only the first latent frame and never
    # reads it; vidax says so and makes the same video.
    with caplog.at_level("WARNING", logger="vidax"):
        flf = pipe(random_image(0), last_image=random_image(1), latents=latents, progress=False, **LANDSCAPE, **CALL)
    assert "last_image is ignored by" in caplog.text and "TI2V-5B" in caplog.text
    np.testing.assert_array_equal(flf.frames, out.frames)
    # The first latent frame is the image's: replaced at every step and after the last one.
    lat = pipe(random_image(0), latents=latents, progress=False, output_type="latent", **LANDSCAPE, **CALL).frames
    call = pipe.check_call(pipe.info, image=random_image(0), **LANDSCAPE, **CALL)
    cond = pipe.hooks.condition(call, RunStats())["first_frame"]
    np.testing.assert_array_equal(lat[:, :, :1], np.transpose(np.asarray(cond), (0, 4, 1, 2, 3)))
    # Portrait (H > W), final latents: a height/width swap anywhere would change them.
    latents, lat_ref = ref["i2v_portrait"]
    lat = pipe(random_image(0), latents=latents, progress=False, output_type="latent", **PORTRAIT, **CALL).frames
    assert lat.shape == lat_ref.shape == (2, 12, 3, 6, 4)
    assert max_rel_err(lat, lat_ref) < 1e-4  # fp32 rounding through 4 UniPC steps with CFG


def test_i2v_bf16_matches_diffusers_bf16(reference):
    path, ref = reference
    latents, frames = ref["i2v"]
    value, bf16 = bf16_psnr(
        path,
        frames,
        latents,
        "TI2V I2V",
        task="i2v",
        reference=ref["torch_i2v"],
        image=random_image(0),
        **LANDSCAPE,
        **CALL,
    )
    # bf16 transformer / text encoder (8-bit mantissa) through 4 steps, fp32 VAE: measured 65 dB;
    # unrelated videos of this model are < 30 dB apart, so 50 dB still catches real bugs.
    assert value >= 50.0
    # Against diffusers in bf16 (see WAN_BF16_MIN_PSNR): measured 62.7 dB (diffusers bf16 vs fp32: 64.4 dB).
    assert bf16 >= WAN_BF16_MIN_PSNR
