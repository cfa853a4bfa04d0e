"""The Cosmos 3 pipeline against diffusers' ``Cosmos3OmniPipeline`` (tiny random checkpoint): the
prompt token ids, text-, image- and video-to-video from the same noise (the reference's drawn
noise replaced by vidax's seed noise: given ``latents=`` skip the condition mix in the reference,
so only drawn noise tests it), the sound stream on the same given ``latents`` / ``sound_latents``,
block streaming, bad input.

The checkpoint (every parameter randomised): a 2-layer Nano-style transformer (hidden 40, 4 query
/ 2 key-value heads of 12, mRoPE (2, 2, 2), latent 12 channels, patch 2, sound 6, vocab 400), the
byte-level BPE tokenizer with the Qwen chat template of the Cosmos-Predict2.5 tests, the tiny
Wan2.2 VAE of the Wan tests (16x spatial), Nano's scheduler config (Karras UniPC) and a tiny
``Cosmos3AVAEAudioTokenizer`` (decoder only, hop 6 at 240 Hz). 32 x 48 pixels (latent 2 x 3, the
width padded to the patch), 9 frames (3 latent frames), 2 UniPC steps with CFG.

fp32 both sides; differences are summation order (transformer, VAE): 60 dB is the issue's bar.
"""

from __future__ import annotations

import json
import os

import numpy as np
import PIL.Image
import pytest
import torch

import vidax
from tests.parity.cosmos_reference import build_qwen_tokenizer
from tests.parity.helpers import model_batches, psnr, randomize_torch_module, transformer_calls
from tests.parity.wan_reference import VAE22, random_image
from tests.paths import REFERENCE_CONFIGS
from vidax.errors import InputError, VidaxError
from vidax.models.cosmos3.pipeline import Cosmos3OmniPipeline, preprocess_conditioning_image
from vidax.models.cosmos3.prompt import SYSTEM_PROMPT_IMAGE, SYSTEM_PROMPT_VIDEO

diffusers = pytest.importorskip("diffusers")
from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as reference_module  # noqa: E402

PROMPT = "a red car driving over a bridge at night"
OTHER = "a cat sleeping on a sofa"
NEGATIVE = "blurry static frames"
H, W, F = 32, 48, 9
CALL = dict(height=H, width=W, num_frames=F, num_inference_steps=2, guidance_scale=3.0)
LATENT = (1, 12, 3, 2, 3)
TRANSFORMER = dict(
    hidden_size=40,
    head_dim=12,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=36,
    num_hidden_layers=2,
    rms_norm_eps=1e-6,
    rope_theta=5000000.0,
    rope_scaling={"mrope_section": [2, 2, 2], "mrope_interleaved": True, "rope_type": "default"},
    latent_channel=12,
    latent_patch_size=2,
    patch_latent_dim=48,
    vocab_size=400,
    sound_gen=True,
    sound_dim=6,
    timestep_scale=0.001,
)
SOUND = dict(
    sampling_rate=240,
    vocoder_input_dim=6,
    dec_dim=4,
    dec_c_mults=(1, 2),
    dec_strides=(2, 3),
    dec_out_channels=2,
    encoder_enabled=False,
)
PSNR_MIN = 60.0
SEED = 11


def build_reference(path: str):
    """Save the tiny checkpoint (module docstring) to ``path``; return the torch pipeline."""
    from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer, UniPCMultistepScheduler
    from diffusers import Cosmos3OmniPipeline as Ref
    from diffusers.models.autoencoders.autoencoder_cosmos3_audio import Cosmos3AVAEAudioTokenizer
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    build_qwen_tokenizer(
        os.path.join(path, "text_tokenizer"),
        [
            PROMPT,
            OTHER,
            NEGATIVE,
            SYSTEM_PROMPT_IMAGE,
            SYSTEM_PROMPT_VIDEO,
            "The video is 0.4 seconds long and is of 24 FPS. This video is not of 32x48 resolution.",
        ],
    )
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(path, "text_tokenizer"))
    transformer = Cosmos3OmniTransformer(**TRANSFORMER).eval()
    # Matrix gain 1 so the prompt reaches the frames past the parity bar (as the Predict2.5 tests).
    randomize_torch_module(transformer, seed=1, gain=1.0)
    vae = AutoencoderKLWan(**VAE22).eval()
    randomize_torch_module(vae, seed=2, scale=0.1, gain=0.7)
    randomize_torch_module(vae.encoder, seed=5, scale=0.1, gain=1.5)
    sound = Cosmos3AVAEAudioTokenizer(**SOUND).eval()
    randomize_torch_module(sound, seed=3, gain=1.0)
    with open(os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos3-Nano", "scheduler", "scheduler_config.json")) as f:
        scheduler = UniPCMultistepScheduler.from_config(
            {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        )
    transformer.save_pretrained(os.path.join(path, "transformer"), safe_serialization=True)
    vae.save_pretrained(os.path.join(path, "vae"), safe_serialization=True)
    sound.save_pretrained(os.path.join(path, "sound_tokenizer"), safe_serialization=True)
    scheduler.save_pretrained(os.path.join(path, "scheduler"))
    index = {
        "_class_name": "Cosmos3OmniPipeline",
        "default_use_system_prompt": True,
        "use_native_flow_schedule": False,
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "sound_tokenizer": ["diffusers", "Cosmos3AVAEAudioTokenizer"],
        "text_tokenizer": ["transformers", "Qwen2TokenizerFast"],
        "transformer": ["diffusers", "Cosmos3OmniTransformer"],
        "vae": ["diffusers", "AutoencoderKLWan"],
    }
    with open(os.path.join(path, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return Ref(
        transformer=transformer,
        text_tokenizer=tokenizer,
        vae=vae,
        scheduler=scheduler,
        sound_tokenizer=sound,
        enable_safety_checker=False,
    )


@pytest.fixture(scope="module")
def cosmos3(tmp_path_factory):
    """(checkpoint path, reference pipeline, vidax pipeline, latents (1, C, T, h, w))."""
    path = str(tmp_path_factory.mktemp("cosmos3_pipeline"))
    ref = build_reference(path)
    latents = torch.randn(*LATENT, generator=torch.Generator().manual_seed(7))
    return path, ref, vidax.load_pipeline(path), latents


def _seed_noise(pipe, **kw) -> list[torch.Tensor]:
    """vidax's drawn noise of a call (video, then sound), as torch tensors of the reference's shapes."""
    call = pipe.check_call(pipe.info, PROMPT, seed=SEED, **CALL, **kw)
    noise = pipe.hooks.initial_noise(call)
    noise = noise if isinstance(noise, dict) else {"latents": noise}
    out = [torch.from_numpy(np.asarray(noise["latents"]))]
    if "sound_latents" in noise:
        out.append(torch.from_numpy(np.asarray(noise["sound_latents"]))[0])
    return out


def _reference(ref, noise=None, prompt=PROMPT, output_type="np", **kw):
    """The reference's run; ``noise``: what its ``randn_tensor`` draws, in order."""
    queue = list(noise or [])

    def randn(shape, generator=None, device=None, dtype=None):
        out = queue.pop(0)
        assert tuple(out.shape) == tuple(shape)
        return out.to(dtype)

    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference_module, "randn_tensor", randn)
        out = ref(prompt=prompt, output_type=output_type, **CALL, **kw)
    return out


def _ours(pipe, prompt=PROMPT, **kw):
    return pipe(prompt=prompt, progress=False, **CALL, **kw)


@pytest.fixture(scope="module")
def text2video(cosmos3):
    """(reference video, vidax video): the same seed noise on both sides."""
    _, ref, pipe, _ = cosmos3
    want = np.asarray(_reference(ref, _seed_noise(pipe), negative_prompt=NEGATIVE).video)[None]
    got = _ours(pipe, seed=SEED, negative_prompt=NEGATIVE).frames
    return want, got


# ----------------------------------------------------------------------------- prompting


@pytest.mark.parametrize(
    "kw",
    [
        dict(num_frames=9, height=32, width=48, fps=24.0),
        dict(num_frames=121, height=480, width=832, fps=16.0, use_system_prompt=False),
        dict(num_frames=1, height=640, width=640, fps=24.0),
        dict(num_frames=33, height=32, width=48, fps=30.0, add_resolution_template=False),
        dict(num_frames=57, height=720, width=1280, fps=10.0, add_duration_template=False),
    ],
)
def test_prompt_token_ids_match_diffusers(cosmos3, kw):
    """Templates (duration / resolution, their inverses), system turns (video / image / none),
    chat template, eos and <|vision_start|>: the ids equal the reference's ``tokenize_prompt``."""
    _, ref, pipe, _ = cosmos3
    for prompt, negative in ((PROMPT, NEGATIVE), ("ends with dots...", None), ("short", "")):
        want = ref.tokenize_prompt(prompt, negative, **kw)
        call = pipe.check_call(pipe.info, prompt, negative, guidance_scale=2.0, **kw)
        embeds = pipe.hooks.encode_call(call)
        ids, lengths = np.asarray(embeds["ids"]), np.asarray(embeds["lengths"])
        got = [list(ids[i, : lengths[i]]) for i in range(2)]
        assert got == [list(want[0]), list(want[1])]
        assert len(want[0]) != len(want[1])  # the batch really pads one of them


def test_conditioning_image_matches_diffusers():
    """Cover-scale with torch's antialiased bilinear filter, centre crop, rounding (down- and
    up-scaling)."""
    for size, (h, w) in (((53, 37), (32, 48)), ((200, 90), (32, 48)), ((20, 30), (64, 80))):
        image = random_image(4, size)
        want = reference_module._preprocess_conditioning_image(image, h, w)[0].permute(1, 2, 0).numpy()
        got = preprocess_conditioning_image(image, h, w)
        assert got.shape == want.shape
        # Rounding to integer levels: a value within float error of .5 may land on the other level.
        assert np.mean(np.abs(got - want) > 1e-6) < 1e-3 and np.max(np.abs(got - want)) <= 1 / 127.5 + 1e-6


# ----------------------------------------------------------------------------- tasks


@pytest.mark.fast(family="cosmos3")
def test_text2video_matches_diffusers(cosmos3, text2video):
    want, got = text2video
    assert got.shape == want.shape == (1, F, H, W, 3)
    value = psnr(got, want)
    print(f"Cosmos 3 text-to-video fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert np.mean((want <= 0.0) | (want >= 1.0)) < 0.05  # not clipped flat


def test_text2video_depends_on_the_prompt(cosmos3, text2video):
    """The reference's video moves past the bar with another prompt, so the parity above sees the
    prompt (the negative prompt is seen by the token-id test: it is a row of the same batch)."""
    _, ref, pipe, _ = cosmos3
    want = np.asarray(_reference(ref, _seed_noise(pipe), prompt=OTHER, negative_prompt=NEGATIVE).video)[None]
    assert psnr(want, text2video[0]) < PSNR_MIN - 10


def test_image2video_matches_diffusers(cosmos3, text2video):
    """A 53 x 37 image (cover-scaled and cropped to 32 x 48). Measured ~98 dB: below the other
    tasks' ~137 dB because a conditioning pixel within float error of a .5 level may round to the
    other level (see test_conditioning_image_matches_diffusers)."""
    _, ref, pipe, _ = cosmos3
    image = random_image(3, (53, 37))
    want = np.asarray(
        _reference(ref, _seed_noise(pipe, image=np.asarray(image)), image=image, negative_prompt=NEGATIVE).video
    )[None]
    got = _ours(pipe, image=np.asarray(image), seed=SEED, negative_prompt=NEGATIVE).frames
    value = psnr(got, want)
    print(f"Cosmos 3 image-to-video fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert psnr(want, text2video[0]) < 40.0  # the image steers the reference's video


def test_video2video_matches_diffusers(cosmos3, text2video):
    """A 7-frame video whose frames all differ; the reference keeps latent frames [0, 1] (its
    first 5 frames)."""
    _, ref, pipe, _ = cosmos3
    video = np.random.default_rng(5).integers(0, 256, (7, 40, 56, 3), dtype=np.uint8)
    kw = dict(video=[PIL.Image.fromarray(f) for f in video], negative_prompt=NEGATIVE)
    want = np.asarray(_reference(ref, _seed_noise(pipe, video=video), **kw).video)[None]
    got = _ours(pipe, seed=SEED, video=video, negative_prompt=NEGATIVE).frames
    value = psnr(got, want)
    print(f"Cosmos 3 video-to-video fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert psnr(want, text2video[0]) < 40.0  # the video steers the reference's
    # Only frames 0..4 condition: changing the last two changes nothing.
    later = video.copy()
    later[5:] = 0
    np.testing.assert_array_equal(_ours(pipe, seed=SEED, video=later, negative_prompt=NEGATIVE).frames, got)


def test_condition_video_keep_last_matches_diffusers(cosmos3):
    """``condition_video_keep="last"``: the frames vidax encodes are the reference's (its last
    4 x 1 + 1 = 5, resized with PIL bilinear), checked on the pixels (the run is the one above)."""
    _, ref, pipe, _ = cosmos3
    video = np.random.default_rng(6).integers(0, 256, (8, 40, 56, 3), dtype=np.uint8)
    call = pipe.check_call(pipe.info, PROMPT, video=video, condition_video_keep="last", **CALL)
    pixels, idx = pipe.hooks.condition_frames(call)
    want = ref.video_processor.preprocess_video([PIL.Image.fromarray(f) for f in video], height=H, width=W)
    np.testing.assert_allclose(pixels[0], want[0, :, -5:].permute(1, 2, 3, 0).numpy(), atol=1e-6)
    assert idx == (0, 1)


@pytest.fixture(scope="module")
def with_sound(cosmos3):
    """(sound latents (1, 6, 15) torch, vidax's text-to-video with sound on the given latents)."""
    _, _, pipe, latents = cosmos3
    sound = torch.randn(1, 6, 15, generator=torch.Generator().manual_seed(9))  # 9 / 24 s x 240 Hz / hop 6
    return sound, _ours(pipe, **_sound_call(latents, sound))


def _sound_call(latents, sound):
    return dict(latents=latents.numpy(), sound_latents=sound.numpy(), enable_sound=True)


def test_sound_stream_matches_diffusers(cosmos3, with_sound):
    """``enable_sound`` with given ``latents`` / ``sound_latents``, decoded on both sides: the
    video through the Wan2.2 VAE, the sound through the ``Cosmos3AVAEAudioTokenizer`` into
    ``out.audio`` (B, 2, samples) at its 240 Hz."""
    _, ref, pipe, latents = cosmos3
    sound, got = with_sound
    want = _reference(ref, latents=latents.clone(), sound_latents=sound[0].clone(), enable_sound=True)
    want_v, want_s = np.asarray(want.video)[None], want.sound.numpy()[None]
    assert got.audio.shape == want_s.shape and got.audio_sample_rate == 240
    snr = 10 * np.log10(np.sum(want_s**2) / np.sum((got.audio - want_s) ** 2))
    print(f"Cosmos 3 with sound: video {psnr(got.frames, want_v):.1f} dB, sound SNR {snr:.1f} dB")
    # fp32 both sides; summation order only (module docstring): the 60 dB bars.
    assert psnr(got.frames, want_v) >= PSNR_MIN and snr >= PSNR_MIN
    # The reference's sound depends on its prompt (the joint attention reaches the sound tokens).
    other = _reference(
        ref, prompt=OTHER, latents=latents.clone(), sound_latents=sound[0].clone(), enable_sound=True
    ).sound.numpy()[None]
    assert 10 * np.log10(np.sum(want_s**2) / np.sum((other - want_s) ** 2)) < 40
    # The sound stream changes the video (joint attention): without it the latents move.
    alone = _ours(pipe, latents=latents.numpy(), output_type="latent").frames
    with_sound = _ours(
        pipe, latents=latents.numpy(), sound_latents=sound.numpy(), enable_sound=True, output_type="latent"
    ).frames
    assert np.max(np.abs(alone - with_sound)) / np.max(np.abs(with_sound)) > 1e-2


def test_fps_and_unbatched_sound_latents_as_diffusers_takes_them(cosmos3, with_sound):
    """A diffusers script's call runs unchanged: ``fps=16.0`` (the duration sentence, the
    fps-modulated positions, the sound length) and ``sound_latents`` in the reference's layout
    ``(sound_dim, T_sound)``, no batch axis, used as given."""
    _, ref, pipe, latents = cosmos3
    sound = torch.randn(6, 23, generator=torch.Generator().manual_seed(11))  # int(9 / 16 s x 240 Hz) / hop 6
    want = _reference(ref, latents=latents.clone(), sound_latents=sound.clone(), enable_sound=True, fps=16.0)
    got = _ours(pipe, latents=latents.numpy(), sound_latents=sound.numpy(), enable_sound=True, fps=16.0)
    want_v, want_s = np.asarray(want.video)[None], want.sound.numpy()[None]
    assert got.audio.shape == want_s.shape
    snr = 10 * np.log10(np.sum(want_s**2) / np.sum((got.audio - want_s) ** 2))
    assert psnr(got.frames, want_v) >= PSNR_MIN and snr >= PSNR_MIN  # fp32 both sides, as above
    # fps reaches the reference's video: at its default 24 (other sound, same video latents) it differs.
    assert psnr(with_sound[1].frames, want_v) < 40
    batched = pipe.check_call(pipe.info, PROMPT, sound_latents=sound.numpy()[None], enable_sound=True, fps=16.0, **CALL)
    unbatched = pipe.check_call(pipe.info, PROMPT, sound_latents=sound, enable_sound=True, fps=16.0, **CALL)
    np.testing.assert_array_equal(unbatched.stream_latents["sound_latents"], batched.stream_latents["sound_latents"])
    assert pipe.video_fps(unbatched) == 16


# ----------------------------------------------------------------------------- shared machinery


def test_block_streaming_equals_resident(cosmos3, text2video):
    from vidax.parallel.offload import OffloadConfig

    path = cosmos3[0]
    streamed = vidax.load_pipeline(path, offload=OffloadConfig(chunk=1, keep_text_encoder=False, keep_vae=False))
    np.testing.assert_array_equal(_ours(streamed, seed=SEED, negative_prompt=NEGATIVE).frames, text2video[1])


def test_inspect_and_capabilities(cosmos3):
    from vidax.cli.inspecting import describe_checkpoint

    path, _, pipe, _ = cosmos3
    text = describe_checkpoint(path)
    assert "Cosmos 3 omni text/image/video-to-video with sound: 2 layers, width 40" in text
    assert "tasks: t2v, i2v, v2v" in text
    # max_sequence_length= is vidax's cut of each prompt (the reference takes any length).
    defaults = next(line for line in text.splitlines() if "defaults:" in line)
    assert "steps, guidance" in defaults and "1024 text tokens" in defaults
    caps = pipe.capabilities
    assert caps.image and caps.video and caps.audio and "enable_sound" in caps.call_args


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(action=object()), "action=.*: action-conditioned generation .* is not implemented in vidax"),
        (dict(sound_latents=np.zeros((1, 6, 15), np.float32)), "sound_latents= is given but enable_sound= is not"),
        (dict(image=np.zeros((8, 8, 3), np.uint8), video=np.zeros((5, 8, 8, 3), np.uint8)), "are both given"),
        (
            dict(video=np.zeros((5, 8, 8, 3), np.uint8), condition_frame_indexes_vision=[0, 3]),
            r"condition_frame_indexes_vision=\[0, 3\] reaches past the 3 latent frames",
        ),
        (dict(video=np.zeros((5, 8, 8, 3), np.uint8), condition_frame_indexes_vision=[0, 1, 2]), "leave at least one"),
        (dict(video=np.zeros((5, 8, 8, 3), np.float32)), "video is a float32 array"),
        (dict(condition_video_keep="middle"), "condition_video_keep must be 'first' or 'last'"),
        (dict(image=np.zeros((8, 8, 3), np.uint8), num_frames=1), "ignores the image"),
        (dict(max_sequence_length=0), "max_sequence_length must be a positive integer, got 0"),
    ],
)
def test_bad_input(cosmos3, kwargs, message):
    info = cosmos3[2].info
    with pytest.raises(InputError, match=message):
        Cosmos3OmniPipeline.check_call(info, PROMPT, **{**CALL, **kwargs})


def test_long_prompt_is_cut_to_max_sequence_length(cosmos3, caplog):
    """The reference takes a prompt of any length (its tokens join every step: ~10k made the tiny
    model's step 25 s, silently); vidax cuts each prompt to ``max_sequence_length`` tokens (1024
    by default) with a warning naming its token count, before the metadata sentences and the chat
    template, which stay whole: the ids are the reference's for the cut prompt. The memory
    estimate counts the prompt."""
    import logging

    _, ref, pipe, _ = cosmos3
    long = " ".join([PROMPT] * 300)
    n = len(pipe.text_tokenizer._tok.encode(long, add_special_tokens=False).ids)
    assert n > 1024
    with caplog.at_level(logging.WARNING, logger="vidax.tokenizer"):
        ids = pipe.hooks.encode_call(pipe.check_call(pipe.info, long, NEGATIVE, **CALL))
    assert [r.getMessage() for r in caplog.records] == [
        f"prompt has {n} tokens; truncated to 1024 tokens, this checkpoint's default (max_sequence_length= sets "
        "another length) by vidax (Cosmos 3's reference takes any length; the metadata sentences and chat template "
        "are kept) (the end of the text is dropped)"
    ]
    caplog.clear()
    call = pipe.check_call(pipe.info, long, NEGATIVE, **CALL, max_sequence_length=7)
    embeds = pipe.hooks.encode_call(call)
    assert "prompt has" in caplog.text and "max_sequence_length=7" in caplog.text
    # the text of the first 7 tokens ("over" is two of them)
    want = ref.tokenize_prompt("a red car driving over a", NEGATIVE, num_frames=F, height=H, width=W, fps=24.0)
    got = np.asarray(embeds["ids"])[0, : int(embeds["lengths"][0])]
    assert list(got) == list(want[0])
    assert int(ids["lengths"][0]) - int(embeds["lengths"][0]) == 1024 - 7
    short = Cosmos3OmniPipeline.family.model_size(
        pipe.info, pipe.check_call(pipe.info, PROMPT, NEGATIVE, **CALL)
    ).tokens
    cut = Cosmos3OmniPipeline.family.model_size(pipe.info, pipe.check_call(pipe.info, long, NEGATIVE, **CALL)).tokens
    assert cut - short == 1024 - len(PROMPT)  # the long prompt's 1024 tokens, the short one's at most 1 a byte


def test_enable_sound_without_sound_tokenizer(cosmos3, tmp_path):
    """A checkpoint whose model_index has no sound tokenizer refuses enable_sound in one line,
    from the configs."""
    path = cosmos3[0]
    for name in ("text_tokenizer", "transformer", "vae", "scheduler"):
        os.symlink(os.path.join(path, name), tmp_path / name)
    with open(os.path.join(path, "model_index.json")) as f:
        index = json.load(f)
    index["sound_tokenizer"] = [None, None]
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    info = Cosmos3OmniPipeline.family.read_checkpoint(vidax.checkpoint.Checkpoint.open(str(tmp_path)))
    assert not Cosmos3OmniPipeline.family.makes_audio(info)
    with pytest.raises(InputError, match="enable_sound=True: .* has no sound tokenizer"):
        Cosmos3OmniPipeline.check_call(info, PROMPT, enable_sound=True, **CALL)


def test_edge_converter_scheduler_is_refused_in_one_line(cosmos3, tmp_path):
    """SOURCES.md: NVIDIA's converter writes Edge's scheduler as ``Cosmos3EdgeUniPCMultistepScheduler``
    (a diffusers commit not in 0.42.1, which has no such class: nothing to match). vidax refuses
    that file in one line naming the class, from the configs (no weight read)."""
    assert not hasattr(diffusers, "Cosmos3EdgeUniPCMultistepScheduler")  # revisit when diffusers has it
    path = cosmos3[0]
    for name in ("text_tokenizer", "transformer", "vae", "sound_tokenizer", "model_index.json"):
        os.symlink(os.path.join(path, name), tmp_path / name)
    (tmp_path / "scheduler").mkdir()
    with open(os.path.join(path, "scheduler", "scheduler_config.json")) as f:
        config = json.load(f)
    config.update(_class_name="Cosmos3EdgeUniPCMultistepScheduler", use_karras_sigmas=False, flow_shift=3.0)
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(json.dumps(config))
    with pytest.raises(
        VidaxError,
        match=r"_class_name='Cosmos3EdgeUniPCMultistepScheduler' is not a "
        r"scheduler vidax implements",
    ) as e:
        vidax.load_pipeline(str(tmp_path))
    assert "\n" not in str(e.value)


def test_wav_output_needs_enable_sound(cosmos3, tmp_path):
    """``-o x.wav`` without ``--enable-sound``: one line before any weight is read (the trial ran
    the whole generation, then failed writing an empty sound); the call decides, not the checkpoint."""
    from typer.testing import CliRunner

    from vidax.cli import app

    path, _, pipe, _ = cosmos3
    base = [
        "generate",
        "-p",
        PROMPT,
        "--checkpoint",
        path,
        "--height",
        str(H),
        "--width",
        str(W),
        "--num-frames",
        str(F),
        "--num-inference-steps",
        "1",
        "--no-progress",
    ]
    r = CliRunner().invoke(app, base + ["-o", str(tmp_path / "x.wav")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.output.strip() == (
        f"error: --output '{tmp_path / 'x.wav'}' writes the sound alone, but Cosmos3OmniPipeline "
        "makes sound only when asked: add --enable-sound; give *.mp4, *.npy or a folder"
    )
    assert not (tmp_path / "x.wav").exists()
    info = pipe.info
    assert (
        Cosmos3OmniPipeline.family.silent_call(
            info, Cosmos3OmniPipeline.check_call(info, PROMPT, enable_sound=True, **CALL)
        )
        is None
    )
    assert "enable_sound=True" in str(
        Cosmos3OmniPipeline.family.silent_call(info, Cosmos3OmniPipeline.check_call(info, PROMPT, **CALL))[1]
    )


def test_native_flow_schedule_matches_diffusers():
    """``use_native_flow_schedule``: UniPC from base sigmas ``linspace(1 - 1/T, 0, N + 1)[:-1]``,
    shifted (Karras off, as the docs' recipe) -- equal to diffusers' ``set_timesteps(sigmas=)``."""
    from diffusers import UniPCMultistepScheduler

    from vidax.schedulers import scheduler_from_config

    with open(os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos3-Edge", "scheduler", "scheduler_config.json")) as f:
        config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    for karras, shift in ((False, 12.0), (True, 1.0)):
        cfg = dict(config, use_karras_sigmas=karras, flow_shift=shift)
        ref = UniPCMultistepScheduler.from_config(cfg)
        base = np.linspace(1.0 - 1.0 / 1000, 0.0, 8 + 1)[:-1]
        ref.set_timesteps(8, sigmas=base)
        ours = scheduler_from_config(dict(cfg, _class_name="UniPCMultistepScheduler")).set_timesteps(
            8, sample_shape=(1, 2), base_sigmas=base
        )
        np.testing.assert_array_equal(np.asarray(ours.timesteps), ref.timesteps.numpy())
        np.testing.assert_allclose(np.asarray(ours.sigmas), ref.sigmas.numpy(), rtol=1e-6)


def test_mesh_equals_single_device(cosmos3, with_sound):
    """Text-to-video with sound (the given latents of the sound test), CFG with the default
    negative prompt of another length, on data x tensor x
    sequence = 2 x 2 x 2 of the 8 virtual CPU devices (tests/conftest.py) equals the one-device
    run: the cond / uncond pair over ``data`` (each row its own prompt-length key mask), 4 query
    heads over tensor x sequence with the 2 GQA key/value heads repeated, the 21 generation tokens
    (6 vision + 15 sound) padded to 22 and masked. fp32 both sides; the mesh sums the
    row-parallel projections in another order over 2 steps and the decoders: 1e-4 absolute on
    frames in [0, 1] (measured 1.4e-6) and a sound SNR of 80 dB (measured 95 dB: the vocoder's
    gain turns the latents' ~1e-6 into ~1e-4 at a peak of 1); a wrong mask or head group moves the
    frames by > 1e-2 and the sound below 40 dB."""
    from vidax.models.cosmos3.convert import TRANSFORMER_PARAM_AXES
    from vidax.parallel.placement import check_sharded

    path, _, pipe, latents = cosmos3
    sound, single = with_sound
    embeds = pipe.hooks.encode_call(pipe.check_call(pipe.info, PROMPT, **CALL))
    assert len(set(np.asarray(embeds["lengths"]).tolist())) == 2  # the CFG rows' prompts differ in length
    sharded = vidax.load_pipeline(path, mesh=(2, 2, 2))
    check_sharded(sharded.transformer, TRANSFORMER_PARAM_AXES, sharded.mesh, "transformer")
    got = _ours(sharded, **_sound_call(latents, sound))
    assert got.frames.shape == single.frames.shape and got.audio.shape == single.audio.shape
    err_v = np.abs(got.frames - single.frames).max()
    snr = 10 * np.log10(np.sum(single.audio**2) / np.sum((got.audio - single.audio) ** 2))
    print(
        f"Cosmos 3 T2V + sound on (2, 2, 2): frames max abs err {err_v:.2e} ({psnr(got.frames, single.frames):.1f} dB), "
        f"sound SNR {snr:.1f} dB (peak {np.abs(single.audio).max():.2f})"
    )
    assert err_v < 1e-4 and snr >= 80.0
    assert float(np.abs(single.audio).max()) > 1e-3 and np.std(single.frames) > 1e-2


def test_taylorseer_matches_diffusers_on_both_streams(cosmos3, with_sound):
    """TaylorSeer's lite mode with sound, 4 steps, every setting but the identifiers non-default.
    diffusers 0.42.1 hooks what its lite patterns match: ``proj_out`` (predicted) and no layer
    (its block pattern needs ``block`` in the name; Cosmos 3's are ``layers``), so every layer
    runs on every step, the sound head too, and the video's ``proj_out`` output is predicted on
    the cached steps (one state per cond / uncond call, the same schedule). The same steps are
    predicted (``proj_out``'s calls counted on the reference, per call) and both streams agree
    (>= 60 dB fp32, as the uncached parity tests), far closer than the reference's uncached run
    is to its cached one (the test is not vacuous). First-Block Cache and MagCache raise in the
    reference (its Cosmos 3 block metadata names ``gen_seq`` / ``und_seq``, its hooks read
    ``hidden_states`` / ``encoder_hidden_states``): refused in one line."""
    from diffusers.hooks import TaylorSeerCacheConfig as RefTS

    _, ref, pipe, latents = cosmos3
    sound = with_sound[0]
    settings = dict(cache_interval=2, disable_cache_before_step=1, max_order=2, use_lite_mode=True)
    call = dict(CALL, num_inference_steps=4, prompt=PROMPT, negative_prompt=NEGATIVE)

    def reference(config):
        if config is not None:
            ref.transformer.enable_cache(config)
        try:
            with torch.no_grad():
                out = ref(
                    output_type="np", latents=latents.clone(), sound_latents=sound[0].clone(), enable_sound=True, **call
                )
        finally:
            if config is not None:
                ref.transformer.disable_cache()
        return np.asarray(out.video)[None], out.sound.numpy()[None]

    with transformer_calls(ref.transformer, ref.transformer.proj_out) as per_call:
        want = reference(RefTS(taylor_factors_dtype=torch.float32, **settings))
    uncached = reference(None)
    pipe.enable_cache(vidax.TaylorSeerCacheConfig(taylor_factors_dtype="float32", **settings))
    try:
        got = pipe(progress=False, **_sound_call(latents, sound), **call)
    finally:
        pipe.disable_cache()
    ref_pattern = "".join(per_call)
    assert ref_pattern[0::2] == ref_pattern[1::2] == "CSCS"
    assert got.stats.cache.patterns == {"cond": "CSCS", "uncond": "CSCS"}

    def snr(a, b):
        return 10 * np.log10(np.sum(b**2) / np.sum((a - b) ** 2))

    moved = psnr(uncached[0], want[0]), snr(uncached[1], want[1])
    print(
        f"Cosmos 3 TaylorSeer lite: video {psnr(got.frames, want[0]):.1f} dB, sound SNR {snr(got.audio, want[1]):.1f} "
        f"dB; the reference's cached vs uncached {moved[0]:.1f} / {moved[1]:.1f} dB"
    )
    agree = psnr(got.frames, want[0]), snr(got.audio, want[1])
    assert min(agree) >= PSNR_MIN
    # An uncached vidax run would sit at ``moved``: vidax's cached run must be far closer.
    assert all(a > m + 30 for a, m in zip(agree, moved)), (agree, moved)
    for config in (vidax.FirstBlockCacheConfig(), vidax.MagCacheConfig(calibrate=True)):
        with pytest.raises(
            InputError,
            match="block metadata for Cosmos3OmniPipeline's decoder layers "
            r"\(Cosmos3VLTextMoTDecoderLayer\) names their inputs gen_seq / und_seq",
        ):
            pipe.enable_cache(config)
        assert pipe.cache_config is None


def test_guidance_one_runs_no_unconditional_pass(cosmos3, text2video):
    """guidance_scale 1 (diffusers' Cosmos 3: ``guidance_scale != 1``): the reference calls its
    transformer once per step (its packed conditional sequence alone), vidax with batch 1, and
    the videos agree."""
    path, ref, _, _ = cosmos3
    call = dict(CALL, guidance_scale=1.0)
    pipe = vidax.load_pipeline(path)
    queue = _seed_noise(pipe)

    def randn(shape, generator=None, device=None, dtype=None):
        return queue.pop(0).to(dtype)

    with model_batches(pipe, ref.transformer) as (ours, theirs), torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(reference_module, "randn_tensor", randn)
        want = np.asarray(ref(prompt=PROMPT, negative_prompt=NEGATIVE, output_type="np", **call).video)[None]
        got = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, seed=SEED, progress=False, **call).frames
    assert theirs == [None] * CALL["num_inference_steps"] and ours and set(ours) == {1}, (theirs, ours)
    value = psnr(got, want)
    print(f"Cosmos 3 guidance 1: {value:.1f} dB")
    assert value >= PSNR_MIN and psnr(text2video[0], want) < value - 30  # CFG 3 is another video
