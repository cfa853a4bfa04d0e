"""Wan2.1 I2V (CLIP image encoder) against diffusers.WanImageToVideoPipeline, and the image
preprocessing of the VAE conditioning against diffusers' VideoProcessor.

The reference's attention processor splits the image tokens off the text at
``L_txt + L_img - 512`` (it assumes 512 text tokens), so the comparison runs with
``max_sequence_length=512``, as the released pipeline does by default.
"""

import numpy as np
import PIL.Image
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
from vidax.errors import InputError
from vidax.io.image import load_image, to_rgb_image, vae_image_preprocess

CALL = dict(
    prompt=PROMPTS,
    negative_prompt=NEGATIVES,
    num_frames=9,
    num_inference_steps=4,
    guidance_scale=4.5,
    max_sequence_length=512,
)
LANDSCAPE = dict(height=32, width=48)
PORTRAIT = dict(height=48, width=32)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    import torch

    path = str(tmp_path_factory.mktemp("wan21_i2v"))
    pipe = build_reference_wan_pipeline(path, image_to_video=True, clip=True)
    runs = [("landscape", (32, 48), "np"), ("portrait", (48, 32), "latent")]
    out = reference_outputs(pipe, runs, image=random_image(0), **CALL)
    with torch.no_grad():
        out["embeds"] = pipe.encode_image(random_image(0), "cpu").numpy()
    return path, {**out, "torch": pipe}


def test_fp32_pipeline_matches_diffusers(reference):
    path, ref = reference
    pipe = vidax.load_pipeline(path, dtype="float32")
    assert type(pipe).__name__ == "WanImageToVideoPipeline" and pipe.image_encoder is not None
    # CLIP penultimate hidden states of the image (resize, crop, normalise, 2 of 3 layers).
    embeds = pipe.encode_image(random_image(0))
    assert embeds.shape == ref["embeds"].shape == (1, 17, 18)
    assert max_rel_err(embeds, ref["embeds"]) < 1e-5  # fp32 rounding only (measured 2e-7)

    latents, frames = ref["landscape"]
    out = pipe(random_image(0), latents=latents, progress=False, **LANDSCAPE, **CALL)
    assert out.frames.shape == frames.shape == (2, 9, 32, 48, 3)
    value = psnr(out.frames, frames)
    print(f"Wan2.1 I2V fp32 video PSNR vs diffusers: {value:.1f} dB")
    assert value >= 60.0  # measured 139 dB: fp32 summation order only
    assert psnr(frames[0], frames[1]) < 30.0  # the videos depend on their inputs
    assert np.mean((frames <= 0.0) | (frames >= 1.0)) < 0.05  # and are not clipped

    # The image steers the video, through both branches: another image in the VAE condition and
    # the CLIP features gives a far-off video, and so does another image in the CLIP branch alone.
    other = pipe(random_image(1), latents=latents, progress=False, **LANDSCAPE, **CALL)
    assert psnr(other.frames, frames) < 45.0  # measured 34 dB
    encode = pipe.hooks.encode_image
    pipe.hooks.encode_image = lambda image: encode(random_image(1))
    try:
        clip_only = pipe(random_image(0), latents=latents, progress=False, **LANDSCAPE, **CALL)
    finally:
        del pipe.hooks.encode_image
    assert psnr(clip_only.frames, frames) < value - 20.0

    # Portrait (H > W), final latents: a height/width swap anywhere would change them.
    latents, lat_ref = ref["portrait"]
    lat = pipe(random_image(0), latents=latents, progress=False, output_type="latent", **PORTRAIT, **CALL).frames
    assert lat.shape == lat_ref.shape == (2, 12, 3, 6, 4)
    assert max_rel_err(lat, lat_ref) < 1e-4  # fp32 rounding through 4 UniPC steps with CFG


def test_bf16_pipeline_matches_diffusers_bf16(reference):
    path, ref = reference
    latents, frames = ref["landscape"]
    value, bf16 = bf16_psnr(
        path, frames, latents, "Wan2.1 I2V", reference=ref["torch"], image=random_image(0), **LANDSCAPE, **CALL
    )
    # bf16 transformer / text encoder (8-bit mantissa) through 4 steps; CLIP and VAE in fp32:
    # measured 71 dB. Unrelated videos of this model are < 35 dB apart, so 50 dB still catches
    # real bugs.
    assert value >= 50.0
    # Against diffusers in bf16 (see WAN_BF16_MIN_PSNR): measured 69.0 dB (diffusers bf16 vs fp32: 68.9 dB).
    assert bf16 >= WAN_BF16_MIN_PSNR


def test_last_image_refused_where_diffusers_fails(reference):
    """Wan2.1 I2V's transformer takes one image's CLIP features: diffusers encodes both images
    for ``last_image`` and its transformer fails on the doubled batch; vidax refuses the call
    before any work, naming the keyword (and runs it with ``image_embeds`` of the first image, as
    diffusers does)."""
    path, ref = reference
    with pytest.raises(RuntimeError):  # torch.cat of the (4, ...) image and (2, ...) text contexts
        ref["torch"](
            image=random_image(0), last_image=random_image(2), height=32, width=48, **{**CALL, "num_inference_steps": 1}
        )
    pipe = vidax.load_pipeline(path, dtype="float32")
    with pytest.raises(InputError, match=r"^last_image is not taken by .*pos_embed_seq_len.*diffusers") as e:
        pipe(random_image(0), last_image=random_image(2), progress=False, **LANDSCAPE, **CALL)
    assert "\n" not in str(e.value)
    # image_embeds without the batch axis (L_img, D_img): diffusers' repeat(batch, 1, 1) adds it;
    # the transformer gets what (1, L_img, D_img) gives.
    from vidax.stats import RunStats

    embeds = np.asarray(pipe.encode_image(random_image(0)))
    conds = [
        pipe.hooks.condition(
            pipe.check_call(pipe.info, image=random_image(0), image_embeds=e, **LANDSCAPE, **CALL), RunStats()
        )["image"]
        for e in (embeds, embeds[0])
    ]
    assert conds[0].shape == (2, 17, 18)
    np.testing.assert_array_equal(conds[0], conds[1])


@pytest.fixture(scope="module")
def flf2v(tmp_path_factory):
    """Wan2.1 FLF2V (CLIP features of the first and last image, pos_embed over both) and
    diffusers' final latents from ``random_image(0)`` to ``random_image(2)``."""
    import torch

    path = str(tmp_path_factory.mktemp("wan21_flf2v"))
    pipe = build_reference_wan_pipeline(path, image_to_video=True, clip=True, flf2v=True)
    images = dict(image=random_image(0), last_image=random_image(2))
    out = reference_outputs(pipe, [("landscape", (32, 48), "latent")], **images, **CALL)
    with torch.no_grad():
        out["embeds"] = pipe.encode_image([random_image(0), random_image(2)], "cpu").numpy()
    return path, out


def test_flf2v_last_image_matches_diffusers(flf2v):
    """diffusers' ``last_image`` on Wan2.1 FLF2V, two prompts: the last frame in the VAE
    condition and mask, the CLIP features of both images paired per video. Compared on the
    final latents (this tiny VAE's decoder hardly sees the last latent frame)."""
    path, ref = flf2v
    pipe = vidax.load_pipeline(path, dtype="float32")
    assert pipe.transformer.config.pos_embed_seq_len == 34
    embeds = pipe.encode_image([random_image(0), random_image(2)])
    assert embeds.shape == ref["embeds"].shape == (2, 17, 18)
    assert max_rel_err(embeds, ref["embeds"]) < 1e-5
    latents, want = ref["landscape"]
    scale = float(np.ptp(want))
    call = dict(latents=latents, progress=False, output_type="latent", **LANDSCAPE, **CALL)
    lat = pipe(random_image(0), last_image=random_image(2), **call).frames
    value = psnr(lat, want, scale)
    print(f"Wan2.1 FLF2V fp32 final latents PSNR vs diffusers: {value:.1f} dB")
    assert value >= 60.0 and max_rel_err(lat, want) < 1e-4
    # The last image steers the video (through the VAE condition and the CLIP features): another
    # one is far off. (The pos_embed, of order one here, makes the features' order matter: a
    # pairing of the two images' features other than diffusers' would fail the match above.)
    other = pipe(random_image(0), last_image=random_image(3), **call).frames
    print(f"... with another last image: {psnr(other, want, scale):.1f} dB")
    assert psnr(other, want, scale) < value - 20.0
    # An FLF2V checkpoint needs the last image (diffusers fails without it); wrong embeds shapes
    # are refused before any work.
    with pytest.raises(InputError, match="first-and-last-frame checkpoint.*last_image is required"):
        pipe(random_image(0), **call)
    with pytest.raises(InputError, match=r"image_embeds has shape \(1, 17, 18\).*\(2 or 4, 17, 18\)"):
        pipe(random_image(0), last_image=random_image(2), image_embeds=embeds[:1], **call)


@pytest.mark.parametrize("size", [(32, 48), (48, 32), (720, 1280)])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
def test_vae_image_preprocess_matches_diffusers(size, mode):
    """``VideoProcessor.preprocess(image, height, width)``: Lanczos resize to exactly
    height x width (stretched, not cropped), [0, 1], then 2 x - 1; bit for bit."""
    from diffusers.video_processor import VideoProcessor

    image = random_image(3, (61, 45)).convert(mode)
    rgb = to_rgb_image(image)
    ref = VideoProcessor(vae_scale_factor=8).preprocess(rgb, height=size[0], width=size[1])
    got = vae_image_preprocess(image, *size)
    assert got.shape == (*size, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, ref[0].permute(1, 2, 0).numpy())
    # Swapping height and width gives another image (the test can see a swap).
    if size[0] != size[1]:
        assert vae_image_preprocess(image, size[1], size[0]).shape == (size[1], size[0], 3)


def test_load_image(tmp_path):
    """``load_image`` follows diffusers.utils.load_image (EXIF orientation, RGB) and refuses
    what PIL cannot read with an InputError naming the file."""
    from diffusers.utils import load_image as reference_load

    image = random_image(4, (20, 30)).convert("RGBA")
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees: the loaders must transpose
    file = tmp_path / "x.png"
    image.save(file, exif=exif)
    got = load_image(file)
    assert got.mode == "RGB" and got.size == (20, 30)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(reference_load(str(file))))
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(InputError, match="could not be read as an image"):
        load_image(tmp_path / "bad.png")
    with pytest.raises(InputError, match="no such file"):
        load_image(tmp_path / "missing.png")
    with pytest.raises(InputError, match="is a folder"):
        load_image(tmp_path)
    with pytest.raises(InputError, match="uint8"):
        to_rgb_image(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(InputError, match="shape"):
        to_rgb_image(np.zeros((4, 4, 2), np.uint8))
