"""The Cosmos-Predict2.5 pipeline against diffusers' ``Cosmos2_5_PredictBasePipeline`` (tiny random
checkpoint, :mod:`tests.parity.cosmos_reference`): text2world, image2world and video2world (n = 1
and 2, from a video longer than the conditioning window whose frames all differ) end to end on
the same latents, the issue's traps one by one, bad input, and the shared machinery (CLI on a
mesh, block streaming, inspect) once each.

One reference checkpoint and one vidax pipeline for the module; every call has batch 1, the same
sizes and CFG, so one compiled step serves all of them.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import PIL.Image
import pytest
import torch
from diffusers.pipelines.cosmos import pipeline_cosmos2_5_predict as reference_module  # noqa: E402

import vidax
from tests.parity.cosmos_reference import build_reference_cosmos_pipeline, torchvision_stand_ins
from tests.parity.helpers import bf16_reference, channels_last, max_rel_err, model_batches, psnr
from tests.parity.wan_reference import random_image
from vidax.errors import InputError
from vidax.models.cosmos.pipeline import (
    DEFAULT_NEGATIVE_PROMPT,
    SYSTEM_PROMPT,
    CosmosPredictPipeline,
    cosmos_guidance,
    match_num_frames,
    normalized_layers,
)
from vidax.pipelines.prompts import encode_prompts
from vidax.pipelines.step_inputs import StepInputs

PROMPT = "a red car driving over a bridge at night"
NEGATIVE = "blurry static frames"
H, W, F = 32, 48, 9  # latents (3, 4, 6): 3 x 2 x 3 = 18 tokens
# 2 UniPC steps (a predictor and a corrector with history; longer schedules are the scheduler
# tests' job) keep the torch reference runs short.
CALL = dict(height=H, width=W, num_frames=F, num_inference_steps=2, guidance_scale=3.0, max_sequence_length=64)
# fp32 both sides; differences are summation order through the text tower, the steps with CFG
# and the VAE (measured ~140 dB). 60 dB is the bar.
PSNR_MIN = 60.0


def _input_video(n: int = 11, seed: int = 5) -> np.ndarray:
    """uint8 (n, 40, 56, 3): every frame different, a size unlike the output's (the resize matters)."""
    return np.random.default_rng(seed).integers(0, 256, (n, 40, 56, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def cosmos(tmp_path_factory):
    """(checkpoint path, reference pipeline, vidax pipeline, initial latents (1, C, T, h, w))."""
    path = str(tmp_path_factory.mktemp("cosmos_pipeline"))
    ref = build_reference_cosmos_pipeline(path, [PROMPT, NEGATIVE, SYSTEM_PROMPT, DEFAULT_NEGATIVE_PROMPT])
    latents = torch.randn(1, 12, 3, 4, 6, generator=torch.Generator().manual_seed(7))
    return path, ref, vidax.load_pipeline(path), latents


def _reference(ref, latents, **kw):
    with torch.no_grad(), torchvision_stand_ins():
        return np.asarray(ref(prompt=PROMPT, latents=latents.clone(), output_type="np", **CALL, **kw).frames)


def _ours(pipe, latents, **kw):
    return pipe(prompt=PROMPT, latents=latents.numpy(), progress=False, **CALL, **kw).frames


@pytest.fixture(scope="module")
def text2world(cosmos):
    _, ref, pipe, latents = cosmos
    return _reference(ref, latents), _ours(pipe, latents)  # default negative prompt on both sides


@pytest.mark.fast(family="cosmos")
def test_text2world_matches_diffusers(text2world):
    want, got = text2world
    assert got.shape == want.shape == (1, F, H, W, 3)
    value = psnr(got, want)
    print(f"text2world fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert np.mean((want <= 0.0) | (want >= 1.0)) < 0.05  # not clipped flat


def test_single_file_transformer_matches_diffusers(cosmos, text2world, tmp_path):
    """A transformer in Cosmos-Predict2.5's original single-file layout (``net.`` keys; other
    random weights than the folder's) through ``load_pipeline(folder, transformer=FILE)`` and
    through diffusers' ``from_single_file`` + ``transformer=``: the same video (fp32)."""
    from diffusers import CosmosTransformer3DModel

    from tests.parity.helpers import randomize_torch_module
    from tests.test_single_file_layouts import cosmos_original
    from vidax.weights.safetensors_io import save_safetensors

    path, ref, _, latents = cosmos
    other = CosmosTransformer3DModel.from_pretrained(path, subfolder="transformer").eval()
    randomize_torch_module(other, seed=9, gain=1.0)
    file = str(tmp_path / "cosmos-predict2.5.safetensors")
    save_safetensors(cosmos_original({k: v.detach().numpy() for k, v in other.state_dict().items()}), file)
    theirs = CosmosTransformer3DModel.from_single_file(
        file, config=path, subfolder="transformer", torch_dtype=torch.float32
    )
    single = type(ref)(
        text_encoder=ref.text_encoder,
        tokenizer=ref.tokenizer,
        transformer=theirs,
        vae=ref.vae,
        scheduler=ref.scheduler,
        safety_checker=ref.safety_checker,
    )
    want = _reference(single, latents)
    got = _ours(vidax.load_pipeline(path, transformer=file), latents)
    value = psnr(got, want)
    print(f"single-file Cosmos transformer vs diffusers from_single_file: {value:.1f} dB")
    assert value >= PSNR_MIN
    assert psnr(want, text2world[0]) < 40.0  # the file's weights, not the folder's, make the video


def test_text2world_bf16_matches_diffusers_bf16(cosmos, text2world):
    """2 UniPC steps with CFG in bf16 (transformer and Qwen2.5-VL bf16, VAE fp32 on both sides)
    against diffusers fp32 and bf16, same latents."""
    path, ref, _, latents = cosmos
    want32 = _reference(ref, latents)
    want16 = _reference(bf16_reference(ref), latents)
    pipe = vidax.load_pipeline(path, dtype="bfloat16")
    assert pipe.transformer.proj_out.kernel[...].dtype == jnp.bfloat16
    got = _ours(pipe, latents)
    value, bf16, theirs = psnr(got, want32), psnr(got, want16), psnr(want16, want32)
    print(
        f"Cosmos text2world bf16 video PSNR: vidax vs diffusers fp32 {value:.1f} dB, vs diffusers bf16 {bf16:.1f} "
        f"dB, diffusers bf16 vs fp32 {theirs:.1f} dB"
    )
    # Both sides bf16 (see tests.parity.helpers.bf16_reference for what the bar sees): measured
    # 55.8 dB (diffusers bf16 vs fp32 56.7 dB, vidax bf16 vs fp32 57.5 dB).
    assert bf16 >= 51.0


def test_text2world_negative_prompt_matters(cosmos, text2world):
    """The text2world parity above used the default negative prompt on both sides; another one
    moves the video past the parity bar (measured ~50 dB), so a wrong default would have failed
    it. (vidax equals the reference at ~140 dB, so its runs stand for the reference's here.)"""
    _, _, pipe, latents = cosmos
    assert psnr(_ours(pipe, latents, negative_prompt=NEGATIVE), text2world[1]) < PSNR_MIN - 3
    assert psnr(_ours(pipe, latents, negative_prompt=""), text2world[1]) < PSNR_MIN - 3


def test_image2world_matches_diffusers(cosmos, text2world):
    _, ref, pipe, latents = cosmos
    image = random_image(3, (37, 53))
    want = _reference(ref, latents, image=image)
    got = _ours(pipe, latents, image=np.asarray(image))
    value = psnr(got, want)
    print(f"image2world fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert psnr(want, text2world[0]) < 40.0  # the image steers the reference's video


@pytest.mark.parametrize("n", [1, 2])
def test_video2world_matches_diffusers(cosmos, text2world, n):
    """An 11-frame video: the reference conditions on its last 4 (n - 1) + 1 frames."""
    _, ref, pipe, latents = cosmos
    video = _input_video()
    want = _reference(ref, latents, video=[PIL.Image.fromarray(f) for f in video], num_latent_conditional_frames=n)
    got = _ours(pipe, latents, video=video, num_latent_conditional_frames=n)
    value = psnr(got, want)
    print(f"video2world n={n} fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert psnr(want, text2world[0]) < 40.0
    if n == 2:
        # Only the last 5 frames count: changing the earlier ones changes nothing; changing the
        # first of the five (not the last, which also pads) changes the video past the bar.
        earlier = video.copy()
        earlier[:-5] = 0
        np.testing.assert_array_equal(_ours(pipe, latents, video=earlier, num_latent_conditional_frames=n), got)
        first = video.copy()
        first[-5] = 255 - first[-5]
        assert psnr(_ours(pipe, latents, video=first, num_latent_conditional_frames=n), got) < PSNR_MIN - 3


# ----------------------------------------------------------------------------- the traps


def test_prompt_embeddings_match_diffusers(cosmos):
    """Chat template, no mask, every layer standardised with the unbiased std, concatenated."""
    _, ref, pipe, _ = cosmos
    with torch.no_grad():
        want, want_neg = ref.encode_prompt(PROMPT, None, max_sequence_length=CALL["max_sequence_length"])
    got = np.asarray(encode_prompts(pipe, [PROMPT, DEFAULT_NEGATIVE_PROMPT], CALL["max_sequence_length"]))
    assert got.shape == (2, 64, 3 * 40)
    # fp32 through 3 decoder layers and a per-row standardisation: measured ~4e-7.
    assert max_rel_err(got[0], want[0].numpy()) < 1e-5
    assert max_rel_err(got[1], want_neg[0].numpy()) < 1e-5  # the reference's default negative prompt
    assert max_rel_err(want[0].numpy(), want_neg[0].numpy()) > 0.1  # the prompts reach the embeddings


def test_unbiased_std():
    states = np.random.default_rng(0).standard_normal((4, 2, 5, 40)).astype(np.float32) * 3 + 1
    got = np.asarray(normalized_layers(states))
    h = states[1:].astype(np.float64)
    want = (h - h.mean(-1, keepdims=True)) / (h.std(-1, ddof=1, keepdims=True) + 1e-8)
    want = np.concatenate(list(want), axis=-1)  # layers 1..n along the features
    assert got.shape == (2, 5, 3 * 40) and max_rel_err(got, want) < 1e-6
    biased = (h - h.mean(-1, keepdims=True)) / (h.std(-1, keepdims=True) + 1e-8)
    assert max_rel_err(got, np.concatenate(list(biased), axis=-1)) > 5e-3  # sqrt(40/39): 1.3 %


def test_default_negative_prompt(cosmos):
    assert DEFAULT_NEGATIVE_PROMPT == reference_module.DEFAULT_NEGATIVE_PROMPT
    info = cosmos[2].info
    assert CosmosPredictPipeline.check_call(info, PROMPT, **CALL).negatives == [DEFAULT_NEGATIVE_PROMPT]
    assert CosmosPredictPipeline.check_call(info, PROMPT, "", **CALL).negatives == [""]  # given, even empty


def test_truncated_default_negative_prompt_is_named_so(cosmos, caplog):
    """The built-in negative prompt, cut at max_sequence_length, is not reported as the user's
    negative_prompt (the CLI would name --negative-prompt, which the user never gave)."""
    pipe = cosmos[2]
    call = CosmosPredictPipeline.check_call(pipe.info, PROMPT, **CALL)
    assert "negative_prompt" not in call.given
    assert "negative_prompt" in CosmosPredictPipeline.check_call(pipe.info, PROMPT, "", **CALL).given
    with caplog.at_level("WARNING", logger="vidax.tokenizer"):
        pipe.hooks.encode_call(call)
    messages = [r.getMessage() for r in caplog.records]  # the chat template's system prompt counts too
    assert len(messages) == 2 and messages[0].startswith("prompt has "), messages
    assert messages[1].startswith("the pipeline's default negative prompt text has "), messages
    assert all("truncated to max_sequence_length=64 " in m for m in messages)


def test_guidance_formula():
    """cond + w (cond - uncond), not diffusers' usual uncond + w (cond - uncond)."""
    from vidax.pipelines.sampling import classifier_free_guidance

    g = np.random.default_rng(1)
    pred = g.standard_normal((4, 3, 5)).astype(np.float32)
    got = np.asarray(cosmos_guidance(pred, np.float32(3.0)))
    np.testing.assert_allclose(got, pred[:2] + 3.0 * (pred[:2] - pred[2:]), rtol=1e-6, atol=1e-6)
    assert np.abs(got - np.asarray(classifier_free_guidance(pred, np.float32(3.0)))).max() > 0.5


def test_per_frame_timesteps_and_condition_mask(cosmos):
    """Noisy frames at the step's flow sigma (scheduler.sigmas[i], in [0, 1]), the conditioning
    frames at conditional_frame_timestep; a negative one gives them the sigma too."""
    from vidax.stats import RunStats

    _, ref, pipe, latents = cosmos
    ref.scheduler.set_timesteps(CALL["num_inference_steps"])
    for cft, n in ((1e-4, 2), (0.3, 1), (-1.0, 2)):
        call = pipe.check_call(
            pipe.info,
            PROMPT,
            video=_input_video(),
            num_latent_conditional_frames=n,
            conditional_frame_timestep=cft,
            latents=latents.numpy(),
            **CALL,
        )
        cond = pipe.hooks.condition(call, RunStats())
        x = pipe.hooks.prepare_latents(call, jnp.asarray(latents.numpy()), cond)
        state = pipe.hooks.set_timesteps(call, x)
        for i in range(CALL["num_inference_steps"]):
            state = dataclasses.replace(state, step_index=jnp.int32(i))
            x_in, timestep, _, fps, cmask, pad = pipe.hooks.model_args(x, state, StepInputs(None, cond=cond), True)
            sigma = float(ref.scheduler.sigmas[i])
            want = [cft if (f < n and cft >= 0) else sigma for f in range(3)]
            np.testing.assert_allclose(np.asarray(timestep), [want, want], rtol=1e-6)
            assert fps is None and pad is None
            assert np.asarray(cmask)[:, :, 0, 0, 0].tolist() == [[1.0] * n + [0.0] * (3 - n)] * 2
            # the conditioning frames hold the conditioning latents, the others the latents
            np.testing.assert_array_equal(np.asarray(x_in)[0, n:], np.asarray(x)[0, n:])
            np.testing.assert_array_equal(np.asarray(x_in)[0, :n], np.asarray(cond["latents"])[0, :n])


def test_image_and_video_preprocessing_match_diffusers(cosmos):
    """image2world: [image, black...] resized NEAREST (the reference's tensor path); video2world:
    every frame resized BILINEAR with PIL (its list-of-PIL path)."""
    from vidax.io.image import nearest_resize, vae_image_preprocess

    _, ref, pipe, _ = cosmos
    image = random_image(4, (37, 53))
    with torchvision_stand_ins():
        frame = reference_module.torchvision.transforms.functional.to_tensor(image)[None]
        video = torch.cat([frame, torch.zeros_like(frame).repeat(F - 1, 1, 1, 1)])[None]
        want = ref.video_processor.preprocess_video(video, H, W)  # (1, 3, F, H, W)
    call = pipe.check_call(pipe.info, PROMPT, image=image, **CALL)
    pixels, n = pipe.hooks.condition_pixels(call)
    assert n == 1 and pixels.shape == (1, 1, H, W, 3)
    np.testing.assert_allclose(pixels[0], channels_last(want)[0, :1], atol=1e-6)
    assert np.all(channels_last(want)[0, 1:] == -1.0)  # the padding frames are black
    for size in ((37, 53), (13, 7), (64, 96)):  # down, up, exactly 2x
        x = np.random.default_rng(1).random((*size, 3)).astype(np.float32)
        ref_x = torch.nn.functional.interpolate(torch.from_numpy(x).permute(2, 0, 1)[None], size=(H, W))
        np.testing.assert_array_equal(nearest_resize(x, H, W), ref_x[0].permute(1, 2, 0).numpy())
    frames = _input_video(3)
    want = ref.video_processor.preprocess_video([PIL.Image.fromarray(f) for f in frames], H, W)
    got = np.stack([vae_image_preprocess(f, H, W, resample="bilinear") for f in frames])
    np.testing.assert_allclose(got, channels_last(want)[0], atol=1e-6)


def test_match_num_frames_as_reference():
    video = np.random.default_rng(2).random((1, 9, 2, 3, 3)).astype(np.float32)
    for target in (9, 10, 7, 40):
        want = reference_module.Cosmos2_5_PredictBasePipeline._match_num_frames(
            type("P", (), {"vae_scale_factor_temporal": 4})(), torch.from_numpy(video).permute(0, 4, 1, 2, 3), target
        )
        np.testing.assert_array_equal(match_num_frames(video, target, 4), want.permute(0, 2, 3, 4, 1).numpy())


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(video=_input_video(4)),
            r"video= has 4 frame\(s\) but video2world with num_latent_conditional_frames=2 "
            r"conditions on its last 5; give a video of at least 5",
        ),
        (dict(video=_input_video(1), num_latent_conditional_frames=1, num_frames=1), None),
        (dict(video=_input_video(), image=np.zeros((8, 8, 3), np.uint8)), "image= and video= are both given"),
        (dict(video=_input_video(), num_latent_conditional_frames=3), "num_latent_conditional_frames must be 1 or 2"),
        (dict(video=_input_video().astype(np.float32)), "video is a float32 array"),
        (dict(video=[]), "video has no frames"),
        (dict(video=_input_video(), num_frames=3), "num_frames=3 is fewer than the 5 conditioning frames"),
        (dict(conditional_frame_timestep=float("nan")), "conditional_frame_timestep must be a finite number"),
        (dict(image=[np.zeros((8, 8, 3), np.uint8)] * 2), "image is a list of 2"),
        (dict(guidance_scale_2=2.0), "takes no 'guidance_scale_2'"),
        (dict(fps=24), "takes no 'fps'"),
    ],
)
def test_bad_input(cosmos, kwargs, message):
    info = cosmos[2].info
    kw = {**CALL, **kwargs}
    if message is None:  # the smallest valid video2world call
        assert CosmosPredictPipeline.check_call(info, PROMPT, **kw).task == "v2v"
        return
    with pytest.raises(InputError, match=message):
        CosmosPredictPipeline.check_call(info, PROMPT, **kw)


def test_video_takes_one_prompt(cosmos):
    with pytest.raises(InputError, match="video is given with 2 prompts"):
        CosmosPredictPipeline.check_call(cosmos[2].info, [PROMPT, NEGATIVE], video=_input_video(), **CALL)


# ----------------------------------------------------------------------------- shared machinery


def test_inspect_and_capabilities(cosmos):
    from vidax.cli.inspecting import describe_checkpoint

    path, _, pipe, _ = cosmos
    text = describe_checkpoint(path)
    assert "variant: Cosmos-Predict2.5 text/image/video-to-world: 2 layers, width 48" in text
    assert "tasks: t2v, i2v, v2v" in text and "defaults: 704x1280 (HxW), 93 frames, 36 steps, guidance 7.0" in text
    caps = pipe.capabilities
    assert caps.image and caps.video and not caps.guidance_scale_2 and "num_latent_conditional_frames" in caps.call_args


def test_block_streaming_equals_resident(cosmos, text2world):
    from vidax.parallel.offload import OffloadConfig

    path, _, _, latents = cosmos
    streamed = vidax.load_pipeline(path, offload=OffloadConfig(chunk=1, keep_text_encoder=False, keep_vae=False))
    np.testing.assert_array_equal(_ours(streamed, latents), text2world[1])


def test_cli_video2world_on_a_mesh(cosmos, tmp_path):
    """``vidax generate --video`` on a (2, 1, 4) mesh (Ulysses over the transformer's 4 heads):
    the CLI picks video2world from --video, writes the frames and the run summary."""
    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.io.video import write_video

    path, _, pipe, latents = cosmos
    mp4 = str(tmp_path / "in.mp4")
    write_video(_input_video(7).astype(np.float32) / 255.0, mp4, fps=8)
    out = tmp_path / "out.npy"
    args = [
        "generate",
        "--prompt",
        PROMPT,
        "--checkpoint",
        path,
        "--video",
        mp4,
        "--dp",
        "2",
        "--tp",
        "1",
        "--sp",
        "4",
        "--no-progress",
        "--seed",
        "3",
        "-o",
        str(out),
    ]
    for k, v in CALL.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "summary:" in r.stderr and "denoise" in r.stderr
    frames = np.load(out)
    assert frames.shape == (F, H, W, 3)
    from vidax.io.video import read_video

    api = pipe(prompt=PROMPT, video=read_video(mp4), seed=3, progress=False, **CALL).frames[0]
    # the mesh splits the CFG pair and the tokens; fp32 reordering only
    assert psnr(frames, api) >= PSNR_MIN


def test_max_sequence_length_past_the_text_towers_positions(cosmos, tmp_path):
    """Rotary positions have no length limit: diffusers runs Cosmos-Predict2.5 at its default 512
    on checkpoints whose text tower config says max_position_embeddings 256. Here the config says
    48 and max_sequence_length=64 is taken, its embeddings the reference's."""
    import json
    import shutil

    path, ref, _, _ = cosmos
    copy = tmp_path / "ckpt"
    shutil.copytree(path, copy)
    file = copy / "text_encoder" / "config.json"
    config = json.loads(file.read_text())
    for c in (config, config.get("text_config") or {}):
        c["max_position_embeddings"] = 48
    file.write_text(json.dumps(config))
    pipe = vidax.load_pipeline(str(copy))
    CosmosPredictPipeline.check_call(pipe.info, PROMPT, **CALL)  # 64 tokens
    CosmosPredictPipeline.check_call(pipe.info, PROMPT, **{**CALL, "max_sequence_length": 512})
    with torch.no_grad():
        want, _ = ref.encode_prompt(PROMPT, None, max_sequence_length=CALL["max_sequence_length"])
    got = np.asarray(encode_prompts(pipe, [PROMPT], CALL["max_sequence_length"]))
    assert got.shape == (1, 64, 3 * 40)
    assert max_rel_err(got[0], want[0].numpy()) < 1e-5  # as test_prompt_embeddings_match_diffusers


def test_text2world_lora_matches_diffusers_fused(cosmos, text2world):
    """A diffusers-layout LoRA on every linear of the blocks, fused at 0.6: the video equals
    diffusers' load_lora_weights + fuse_lora (>= 60 dB) and differs clearly from the one without;
    unloading gives the checkpoint's video back bit for bit."""
    _, ref, pipe, latents = cosmos
    rng = np.random.default_rng(13)
    sd = {}
    for name, module in ref.transformer.named_modules():
        if name.startswith("transformer_blocks.") and isinstance(module, torch.nn.Linear):
            out, inp = module.weight.shape
            sd[f"transformer.{name}.lora_A.weight"] = (rng.standard_normal((4, inp)) * 0.3).astype(np.float32)
            sd[f"transformer.{name}.lora_B.weight"] = (rng.standard_normal((out, 4)) * 0.3).astype(np.float32)
    ref.load_lora_weights({k: torch.from_numpy(v) for k, v in sd.items()}, adapter_name="x")
    ref.fuse_lora(lora_scale=0.6)
    try:
        want = _reference(ref, latents)
    finally:
        ref.unfuse_lora()
        ref.unload_lora_weights()
    pipe.load_lora_weights(sd, adapter_name="x")
    pipe.fuse_lora(lora_scale=0.6)
    try:
        got = _ours(pipe, latents)
    finally:
        pipe.unload_lora_weights()
    value = psnr(got, want)
    print(f"text2world with a LoRA fp32 PSNR {value:.1f} dB")
    assert value >= PSNR_MIN
    assert psnr(want, text2world[0]) < 40  # the LoRA changes the video clearly
    np.testing.assert_array_equal(_ours(pipe, latents), text2world[1])


def test_guidance_one_runs_no_unconditional_pass(cosmos, text2world):
    """guidance_scale 1 (diffusers' Cosmos 2.5: ``guidance_scale > 1``): one call per step of
    batch 1 on both sides, and the same video."""
    path, ref, _, latents = cosmos
    call = dict(CALL, guidance_scale=1.0)
    pipe = vidax.load_pipeline(path)
    with model_batches(pipe, ref.transformer) as (ours, theirs), torch.no_grad(), torchvision_stand_ins():
        want = np.asarray(ref(prompt=PROMPT, latents=latents.clone(), output_type="np", **call).frames)
        got = pipe(prompt=PROMPT, latents=latents.numpy(), progress=False, **call).frames
    assert theirs == [1] * CALL["num_inference_steps"] and ours and set(ours) == {1}, (theirs, ours)
    value = psnr(got, want)
    print(f"Cosmos 2.5 guidance 1: {value:.1f} dB")
    assert value >= PSNR_MIN and psnr(text2world[0], want) < value - 30  # CFG 3 is another video
