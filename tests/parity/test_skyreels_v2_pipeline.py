"""SkyReels-V2 end to end against ``diffusers.SkyReelsV2DiffusionForcingPipeline`` at a tiny random
checkpoint (float32, the same tokenizer and initial noise): the synchronous schedule, the
asynchronous one with causal blocks, and a long video of two chunks; and ``SkyReelsV2Pipeline``
(plain text-to-video) on the same components with a transformer without the fps conditioning.

The reference's fps conditioning over per-frame timesteps only broadcasts for one video per pass,
so one prompt (its CFG runs the passes apart). The tiny transformer: Wan's tiny pipeline config
with the fps conditioning on."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import vidax
from tests.parity.helpers import max_rel_err, psnr, randomize_torch_module
from tests.parity.wan_reference import (
    CLIP_PROCESSOR,
    CLIP_TRANSFORMER,
    CLIP_VISION,
    TEXT_ENCODER,
    TRANSFORMER,
    VAE,
    random_image,
)

diffusers = pytest.importorskip("diffusers")

PROMPT, NEGATIVE = "a red car over the sea", "blue sky"
CALL = dict(height=32, width=48, num_inference_steps=3, guidance_scale=4.5, max_sequence_length=16)


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    from vidax.default_checkpoint import SCHEDULER
    from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

    tok = str(tmp_path_factory.mktemp("skyreels_v2_tokenizer"))
    torch.manual_seed(0)
    build_tiny_t5_tokenizer(tok, vocab_size=TEXT_ENCODER["vocab_size"])
    text_encoder = UMT5EncoderModel(UMT5Config(**TEXT_ENCODER)).eval()
    vae = diffusers.AutoencoderKLWan(**VAE).eval()
    randomize_torch_module(text_encoder, seed=0)
    randomize_torch_module(vae, seed=2, scale=0.1, gain=0.7)
    config = {k: v for k, v in SCHEDULER.items() if not k.startswith("_")}
    scheduler = diffusers.UniPCMultistepScheduler.from_config(config, flow_shift=8.0)
    return dict(tokenizer=AutoTokenizer.from_pretrained(tok), text_encoder=text_encoder, vae=vae, scheduler=scheduler)


def _checkpoint(tmp_path_factory, components, cls, config=TRANSFORMER, **transformer):
    path = str(tmp_path_factory.mktemp(cls.__name__))
    model = diffusers.SkyReelsV2Transformer3DModel(**{**config, **transformer}).eval()
    randomize_torch_module(model, seed=1)
    pipe = cls(transformer=model, **components)
    pipe.save_pretrained(path, safe_serialization=True)
    return pipe, vidax.load_pipeline(path, dtype="float32")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, components):
    return _checkpoint(
        tmp_path_factory, components, diffusers.SkyReelsV2DiffusionForcingPipeline, inject_sample_info=True
    )


def _noise(frames, seed):
    return torch.randn(1, 12, frames, 4, 6, generator=torch.Generator().manual_seed(seed))


def _both(reference, monkeypatch, frames, chunk_frames, output_type="np", **kw):
    """The reference's and vidax's videos for the same call and noise: every chunk's noise is
    drawn here (the reference's ``latents=`` fails in its ``prepare_latents``, so its draws are
    replaced; vidax gets the first as ``latents=``, the others through ``chunk_noise``)."""
    pipe, ours = reference
    first = _noise(chunk_frames[0], 7)
    later = [_noise(f, 8 + i) for i, f in enumerate(chunk_frames[1:])]
    import diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing as ref_module

    queue = [first.clone()] + [n.clone() for n in later]
    # diffusers' basic_clean calls ftfy.fix_text without checking ftfy is installed: the identity, as vidax.
    monkeypatch.setattr(ref_module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text), raising=False)
    monkeypatch.setattr(ref_module, "randn_tensor", lambda shape, **_: queue.pop(0))
    call = dict(CALL, num_frames=frames, **kw)
    # The reference writes a call's causal_block_size into its transformer's config, where the next
    # call without one finds it; vidax's calls do not leak: start the reference from its config.
    pipe.transformer._set_ar_attention(1)
    with torch.no_grad():
        want = pipe(PROMPT, NEGATIVE, output_type=output_type, **call).frames
    assert not queue
    ours_later = iter(np.transpose(n.numpy(), (0, 2, 3, 4, 1)) for n in later)
    monkeypatch.setattr(type(ours).family, "chunk_noise", lambda self, call, k, shape: next(ours_later))
    got = ours(PROMPT, NEGATIVE, latents=first.numpy(), progress=False, output_type=output_type, **call).frames
    return np.asarray(got), np.asarray(want)


#: Final latents: float32 rounding only (measured 7.6e-7 and 5.6e-7 relative to their peak), the
#: project's float32 bar; a wrong schedule moves them by ~1e-2 (the asynchronous and the
#: synchronous schedule differ by 7e-3).
LATENT_TOL = 1e-5


@pytest.mark.fast(family="skyreels_v2")
def test_synchronous_schedule(reference, monkeypatch):
    got, want = _both(reference, monkeypatch, 9, [3])
    assert got.shape == want.shape == (1, 9, 32, 48, 3)
    value = psnr(got, want)
    print(f"synchronous: PSNR {value:.1f} dB")
    assert value >= 60.0
    assert psnr(want[0, 0], want[0, -1]) < 40.0  # the frames differ: the bar means something


def test_asynchronous_schedule_with_causal_blocks(reference, monkeypatch):
    """ar_step 1 over blocks of 2 latent frames (a staggered wave: more iterations than steps);
    the final latents, where the schedule shows (the tiny VAE flattens it in the frames)."""
    got, want = _both(reference, monkeypatch, 13, [4], "latent", ar_step=1, causal_block_size=2)
    err = max_rel_err(got, want)
    print(f"asynchronous, causal blocks of 2: latents max_rel_err {err:.1e}")
    assert got.shape == want.shape == (1, 12, 4, 4, 6) and err < LATENT_TOL
    sync = reference[1](PROMPT, NEGATIVE, latents=_noise(4, 7).numpy(), progress=False, output_type="latent",
                        **CALL, num_frames=13, causal_block_size=2).frames  # fmt: skip
    assert max_rel_err(sync, want) > 1e-3  # the schedule matters


def test_long_video_in_two_chunks(reference, monkeypatch):
    """21 frames (6 latent) as chunks of 13 (4 latent) with 5 frames (2 latent) of history."""
    got, want = _both(reference, monkeypatch, 21, [4, 4], "latent", base_num_frames=13, overlap_history=5)
    err = max_rel_err(got, want)
    print(f"long video, two chunks: latents max_rel_err {err:.1e}")
    assert got.shape == want.shape == (1, 12, 6, 4, 6) and err < LATENT_TOL


def test_addnoise_condition_renoises_only_the_repeated_frames(reference, monkeypatch):
    """``addnoise_condition`` changes a long video's second chunk (its repeated frames go in
    re-noised), never the first; the reference draws that noise from torch's global generator, so
    this is vidax against itself."""
    _, ours = reference
    call = dict(CALL, num_frames=21, base_num_frames=13, overlap_history=5, output_type="latent", progress=False)
    noise = iter([np.zeros((1, 4, 4, 6, 12), np.float32)] * 2)
    monkeypatch.setattr(type(ours).family, "chunk_noise", lambda self, call, k, shape: next(noise))
    first = _noise(4, 7).numpy()
    plain = ours(PROMPT, NEGATIVE, latents=first, **call).frames
    renoised = ours(PROMPT, NEGATIVE, latents=first, addnoise_condition=20.0, **call).frames
    np.testing.assert_array_equal(renoised[:, :, :4], plain[:, :, :4])
    assert max_rel_err(renoised[:, :, 4:], plain[:, :, 4:]) > 1e-3


def test_refuses_what_the_reference_cannot_run(reference):
    _, ours = reference
    with pytest.raises(vidax.errors.InputError, match=r"overlap_history= is needed when num_frames=21 exceeds"):
        ours(PROMPT, num_frames=21, base_num_frames=13, progress=False)
    with pytest.raises(vidax.errors.InputError, match=r"causal_block_size=3 must divide the 4 latent frames"):
        ours(PROMPT, num_frames=13, causal_block_size=3, progress=False)


def test_plain_text_to_video(tmp_path_factory, components, monkeypatch):
    """SkyReelsV2Pipeline: Wan's loop with this family's transformer (CFG batch of two prompts)."""
    import diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2 as ref_module

    monkeypatch.setattr(ref_module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text), raising=False)
    pipe, ours = _checkpoint(tmp_path_factory, components, diffusers.SkyReelsV2Pipeline)
    assert type(ours).__name__ == "SkyReelsV2Pipeline"
    prompts, negatives = [PROMPT, "the dog"], [NEGATIVE, "a city at night"]
    latents = torch.randn(2, 12, 3, 4, 6, generator=torch.Generator().manual_seed(3))
    call = dict(CALL, num_frames=9)
    with torch.no_grad():
        want = pipe(prompts, negatives, latents=latents.clone(), output_type="np", **call).frames
    got = ours(prompts, negatives, latents=latents.numpy(), progress=False, **call).frames
    value = psnr(got, want)
    print(f"SkyReelsV2Pipeline: PSNR {value:.1f} dB")
    assert got.shape == want.shape == (2, 9, 32, 48, 3) and value >= 60.0
    assert psnr(want[0], want[1]) < 40.0


def test_image_to_video(tmp_path_factory, components, monkeypatch):
    """SkyReelsV2ImageToVideoPipeline: Wan2.1 I2V's conditioning (CLIPVisionModelWithProjection's
    penultimate hidden states, the VAE-encoded first frame and its mask) with this family's
    transformer; one prompt with CFG, a portrait size and 9 frames. The reference's attention
    splits the image tokens off at ``L - 512``, so the text is 512 tokens, as it runs by default."""
    import diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_i2v as ref_module
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    monkeypatch.setattr(ref_module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text), raising=False)
    image_encoder = CLIPVisionModelWithProjection(CLIPVisionConfig(**CLIP_VISION)).eval()
    randomize_torch_module(image_encoder, seed=4)
    vae = diffusers.AutoencoderKLWan(**VAE).eval()  # an encoder of gain 1.5: image latents of order one
    vae.load_state_dict(components["vae"].state_dict())
    randomize_torch_module(vae.encoder, seed=5, scale=0.1, gain=1.5)
    parts = dict(components, vae=vae, image_encoder=image_encoder, image_processor=CLIPImageProcessor(**CLIP_PROCESSOR))
    pipe, ours = _checkpoint(tmp_path_factory, parts, diffusers.SkyReelsV2ImageToVideoPipeline, CLIP_TRANSFORMER)
    assert type(ours).__name__ == "SkyReelsV2ImageToVideoPipeline" and ours.image_encoder is not None
    latents = torch.randn(1, 12, 3, 6, 4, generator=torch.Generator().manual_seed(3))
    call = dict(CALL, height=48, width=32, num_frames=9, max_sequence_length=512)
    with torch.no_grad():
        want = pipe(random_image(0), PROMPT, NEGATIVE, latents=latents.clone(), output_type="np", **call).frames
        embeds = dict(
            zip(("prompt_embeds", "negative_prompt_embeds"), pipe.encode_prompt(PROMPT, NEGATIVE, device="cpu"))
        )
        other = pipe(random_image(1), latents=latents.clone(), output_type="np", **embeds, **call).frames
    got = ours(random_image(0), PROMPT, NEGATIVE, latents=latents.numpy(), progress=False, **call).frames
    value = psnr(got, want)
    print(f"SkyReelsV2ImageToVideoPipeline: PSNR {value:.1f} dB; another image: {psnr(other, want):.1f} dB")
    assert got.shape == want.shape == (1, 9, 48, 32, 3) and value >= 60.0
    assert psnr(other, want) < 40.0  # the reference's video depends on the image
    # A CLIPProcessor saved by transformers 5 nests the same settings in processor_config.json.
    import json
    import os

    processor = os.path.join(ours.info.checkpoint.root, "image_processor")
    settings = json.load(open(os.path.join(processor, "preprocessor_config.json")))
    os.remove(os.path.join(processor, "preprocessor_config.json"))
    with open(os.path.join(processor, "processor_config.json"), "w") as f:
        json.dump({"image_processor": settings, "processor_class": "CLIPProcessor"}, f)
    again = vidax.load_pipeline(ours.info.checkpoint.root, dtype="float32")
    assert again.image_processor_config == ours.image_processor_config == settings
    # A SkyReels-V2 folder runs the task asked: --image picks this class from the T2V one's too.
    assert vidax.SkyReelsV2Pipeline.class_for_task("i2v") is type(ours)
    assert type(ours).class_for_task("t2v") is vidax.SkyReelsV2Pipeline


def test_diffusion_forcing_image_to_video(reference, tmp_path, monkeypatch):
    """SkyReelsV2DiffusionForcingImageToVideoPipeline on the diffusion-forcing checkpoint (its
    model_index naming that class): the image's latent frame first, the last image's appended at
    timestep 0 and dropped before the decode; 13 frames in blocks of 5 latent frames (4 + the
    last image's), asynchronous, the image frame re-noised by addnoise_condition."""
    import diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_i2v as ref_module

    monkeypatch.setattr(ref_module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text), raising=False)
    df, t2v = reference
    pipe = diffusers.SkyReelsV2DiffusionForcingImageToVideoPipeline(**df.components)
    folder = _renamed(t2v.info.checkpoint.root, tmp_path, "SkyReelsV2DiffusionForcingImageToVideoPipeline")
    ours = vidax.load_pipeline(folder, dtype="float32")
    assert type(ours).__name__ == "SkyReelsV2DiffusionForcingImageToVideoPipeline"
    latents = torch.randn(1, 12, 4, 6, 4, generator=torch.Generator().manual_seed(5))
    call = dict(CALL, height=48, width=32, num_frames=13, ar_step=1, causal_block_size=5, fps=16)
    images = dict(image=random_image(0), last_image=random_image(2))
    want = {}
    with torch.no_grad():
        for name, first in (("video", random_image(0)), ("other", random_image(1))):
            pipe.transformer._set_ar_attention(1)
            want[name] = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, output_type="np", latents=latents.clone(),
                              **{**images, "image": first}, **call).frames  # fmt: skip
    got = ours(
        prompt=PROMPT, negative_prompt=NEGATIVE, latents=latents.numpy(), progress=False, **images, **call
    ).frames
    value = psnr(got, want["video"])
    print(f"DF image-to-video: PSNR {value:.1f} dB; another image: {psnr(want['other'], want['video']):.1f} dB")
    assert got.shape == want["video"].shape == (1, 13, 48, 32, 3) and value >= 60.0
    # The reference's video depends on the image (through one latent frame of a VAE encoder of gain
    # 0.7: measured 41 dB apart, against 130+ dB of float32 rounding).
    assert psnr(want["other"], want["video"]) < value - 40.0
    # --image on the text-to-video folder runs this class; last_image on a long video is refused.
    assert vidax.SkyReelsV2DiffusionForcingPipeline.class_for_task("i2v") is type(ours)
    with pytest.raises(vidax.errors.InputError, match=r"^last_image is taken for a video of one chunk"):
        long = dict(call, num_frames=21, base_num_frames=13, overlap_history=5, ar_step=0, causal_block_size=1)
        ours(prompt=PROMPT, progress=False, **images, **long)


def _renamed(root: str, tmp_path, class_name: str) -> str:
    """A folder of the checkpoint at ``root`` (its component folders linked) whose
    model_index.json names ``class_name``."""
    import json
    import os

    index = json.load(open(os.path.join(root, "model_index.json")))
    for name in os.listdir(root):
        if name != "model_index.json":
            os.symlink(os.path.join(root, name), tmp_path / name)
    (tmp_path / "model_index.json").write_text(json.dumps({**index, "_class_name": class_name}))
    return str(tmp_path)


def test_diffusion_forcing_video_to_video(reference, tmp_path, monkeypatch):
    """SkyReelsV2DiffusionForcingVideoToVideoPipeline extends a 9-frame video (its model_index
    naming that class): the video's last 5 frames (2 latent frames) start the first chunk, 21 new
    frames (6 latent) in chunks of 13 (4 latent) repeating 5; the output is the given video then
    the decoded one, as the reference returns it. Every chunk's noise is drawn here (as ``_both``)."""
    import diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_v2v as ref_module
    import PIL.Image

    df, t2v = reference
    pipe = diffusers.SkyReelsV2DiffusionForcingVideoToVideoPipeline(**df.components)
    ours = vidax.load_pipeline(_renamed(t2v.info.checkpoint.root, tmp_path, type(pipe).__name__), dtype="float32")
    assert type(ours) is vidax.SkyReelsV2DiffusionForcingPipeline.class_for_task("v2v")
    assert type(ours).__name__ == "SkyReelsV2DiffusionForcingVideoToVideoPipeline"
    rng = np.random.default_rng(4)
    video = rng.integers(0, 256, (9, 37, 53, 3), dtype=np.uint8)
    noise = [_noise(4, s) for s in (11, 12)]
    # The chunks of test_long_video_in_two_chunks (its compiled step serves both).
    call = dict(CALL, num_frames=21, base_num_frames=13, overlap_history=5)
    monkeypatch.setattr(ref_module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text), raising=False)
    want = {}
    for name, frames in (("video", video), ("other", video[::-1].copy())):
        queue = [n.clone() for n in noise]
        monkeypatch.setattr(ref_module, "randn_tensor", lambda shape, **_: queue.pop(0))
        pipe.transformer._set_ar_attention(1)
        with torch.no_grad():
            want[name] = pipe(video=[PIL.Image.fromarray(f) for f in frames], prompt=PROMPT, negative_prompt=NEGATIVE,
                              output_type="np", **call).frames  # fmt: skip
    later = iter([np.transpose(noise[1].numpy(), (0, 2, 3, 4, 1))])
    monkeypatch.setattr(type(ours).family, "chunk_noise", lambda self, call, k, shape: next(later))
    got = ours(video, PROMPT, NEGATIVE, latents=noise[0].numpy(), progress=False, **call).frames
    value = psnr(got, want["video"])
    print(f"DF video-to-video: PSNR {value:.1f} dB; another video: {psnr(want['other'], want['video']):.1f} dB")
    assert got.shape == want["video"].shape == (1, 9 + 21, 32, 48, 3) and value >= 60.0
    new = slice(9, None)  # the generated frames depend on the given video, not only the copy of it
    assert psnr(want["other"][:, new], want["video"][:, new]) < value - 40.0
    assert ours.info.defaults.num_frames == 121 and t2v.info.defaults.num_frames == 97  # diffusers' 120, rounded
    with pytest.raises(vidax.errors.InputError, match=r"^video has 9 frames, fewer than overlap_history=17"):
        ours(video, PROMPT, progress=False, **dict(call, overlap_history=17, base_num_frames=25))
