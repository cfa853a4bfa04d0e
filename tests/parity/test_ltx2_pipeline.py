"""End-to-end parity of vidax's ``LTX2Pipeline`` with ``diffusers.LTX2Pipeline`` (text-to-video
with its soundtrack) on a tiny random checkpoint written by diffusers' / transformers'
``save_pretrained``: Gemma 3 (2 layers, width 12, so 3 stacked hidden states), the LTX-2.0 text
connectors and transformer (``tests/parity/ltx2_reference.py``'s, caption width 12, 6 video / 15
audio latent channels), the released-layout video VAE of ``test_ltx2_vae.py`` (8x spatial, 4x
temporal), the audio VAE and vocoder of ``test_ltx2_audio.py``'s kind (vocoder upsampling 80x to
8000 Hz, so the waveform lasts as long as the mel spectrogram), the LTX-2 scheduler config (dynamic
shift, ``shift_terminal``), a tiny T5-style tokenizer. Every parameter and latent statistic
randomised.

Both run 2 steps in float32 on the same ``latents`` (packed) and ``audio_latents`` with the
reference's guidance defaults (CFG 3 video / 7 audio on x0, STG 1 on block 28 (the 2.0 layers
have no perturbed attention: the reference's STG pass is the prompt's pass again), modality
guidance 3, rescale 0.7). Video PSNR >= 60 dB and audio SNR >= 60 dB: float32 on both sides, only
the order of additions and the transcendental kernels differ (~1e-6 relative per component); a
wrong guidance term, sigma or normalisation costs tens of dB.

The LTX-2.3 variant (gated attention, cross-attention AdaLN, perturbed attention, per-modality
connector projections, ``LTX2VocoderWithBWE``) runs end to end at the reference's defaults with
STG on block 1, so every guidance branch is active; each branch turned off moves the reference's
output far more than vidax differs from it (the test is not vacuous).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import av
import numpy as np
import pytest
import torch

from tests.parity.helpers import max_rel_err, model_batches, randomize_torch_module, transformer_calls
from tests.parity.ltx2_reference import CONNECTORS_20, CONNECTORS_23, TRANSFORMER_20, TRANSFORMER_23
from tests.parity.test_ltx2_audio import BWE, _perturb_buffers
from tests.parity.test_ltx2_vae import RELEASED
from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors  # noqa: E402
from diffusers.pipelines.ltx2.pipeline_ltx2 import LTX2Pipeline  # noqa: E402
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEMMA = dict(
    vocab_size=97,
    hidden_size=12,
    intermediate_size=20,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=6,
    sliding_window=5,
    layer_types=["sliding_attention", "full_attention"],
    query_pre_attn_scalar=6,
    rms_norm_eps=1e-6,
    rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    },
)
VISION = dict(
    hidden_size=16, intermediate_size=20, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
)
TRANSFORMER = dict(
    TRANSFORMER_20, in_channels=6, out_channels=6, audio_in_channels=15, audio_out_channels=15, caption_channels=12
)
# 16 kHz mel with hop 160: 100 mel frames / s, 25 audio latents / s; 3 latent channels x 5 mel bins.
AUDIO = dict(
    base_channels=15,
    ch_mult=[1, 2, 3],
    num_res_blocks=1,
    latent_channels=3,
    mel_bins=20,
    in_channels=2,
    output_channels=2,
    norm_type="pixel",
    causality_axis="height",
    sample_rate=16000,
    mel_hop_length=160,
)
VOCODER = dict(
    in_channels=40,
    hidden_channels=16,
    out_channels=2,
    upsample_kernel_sizes=[20, 16],
    upsample_factors=[10, 8],
    resnet_kernel_sizes=[3],
    resnet_dilations=[[1, 2]],
    leaky_relu_negative_slope=0.1,
    output_sampling_rate=8000,
)
SCHEDULER = dict(
    base_image_seq_len=1024,
    base_shift=0.95,
    max_image_seq_len=4096,
    max_shift=2.05,
    shift_terminal=0.1,
    use_dynamic_shifting=True,
    time_shift_type="exponential",
)
# 17 frames of 32 x 32 at 24 fps (0.708 s): 5 x 4 x 4 video tokens, round(0.708 x 25) = 18 audio latents.
# The extra guidance passes off: the runs of the other tests that do not test guidance are
# cheaper (2 rows, not 4); test_ltx23_every_guidance_branch_matches_diffusers runs them all.
OFF = dict(stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0, audio_modality_scale=1.0)
CALL = dict(height=32, width=32, num_frames=17, frame_rate=24.0, num_inference_steps=2, max_sequence_length=8)
PROMPT, NEGATIVE = "a red car on the sea", "blue"
# LTX-2.3: the connectors' per-modality widths are the streams' (40 video = 10 heads of 4, 16 audio
# = 8 heads of 2), as 2.3's transformer takes them without a caption projection.
TRANSFORMER_2_3 = dict(TRANSFORMER_23, in_channels=6, out_channels=6, audio_in_channels=15, audio_out_channels=15)
CONNECTORS_2_3 = dict(
    CONNECTORS_23,
    video_hidden_dim=40,
    video_connector_num_attention_heads=10,
    audio_hidden_dim=16,
    audio_connector_num_attention_heads=8,
)
STG_BLOCKS = dict(spatio_temporal_guidance_blocks=[1])  # the tiny transformer's 3 blocks (the default 28 is past them)


def vae_and_sound(vocoder_class=LTX2Vocoder, vocoder_config=VOCODER):
    """The randomised video VAE (latent statistics too), audio VAE and vocoder of the tiny LTX-2."""
    vae = diffusers.AutoencoderKLLTX2Video(**RELEASED).eval()
    randomize_torch_module(vae, seed=4, scale=0.1, gain=0.7)
    audio_vae = diffusers.AutoencoderKLLTX2Audio(**AUDIO).eval()
    randomize_torch_module(audio_vae, seed=5, scale=0.1, gain=0.9)
    vocoder = vocoder_class(**vocoder_config).eval()
    randomize_torch_module(vocoder, seed=6, scale=0.1, gain=0.9)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        vae.latents_mean.copy_(torch.randn(vae.latents_mean.shape, generator=g))
        vae.latents_std.copy_(torch.rand(vae.latents_std.shape, generator=g) + 0.5)
    _perturb_buffers(audio_vae, 8)
    return vae, audio_vae, vocoder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(diffusers pipeline, checkpoint folder) of the tiny LTX-2."""
    return _build(tmp_path_factory.mktemp("ltx2_pipe"), TRANSFORMER, CONNECTORS_20, LTX2Vocoder, VOCODER)


def test_the_plan_streams_gemma_where_its_host_copy_does_not_fit(checkpoint):
    """From the checkpoint's headers: Gemma 3's stacked layers are counted, and where the host
    cannot hold the staged Gemma (a pretend host just short of it) the plan streams its layers
    (read from its files: not waiting in host memory) and says so; an explicit chunk wins; kept
    resident where it does not fit, the refusal names that setting."""
    from vidax.parallel.offload import OffloadConfig
    from vidax.pipelines.device_plan import plan_device, remedies
    from vidax.pipelines.plan import read_plan, with_call, with_placement

    plan = with_placement(with_call(read_plan(checkpoint[1]), prompt=PROMPT, **CALL))
    kw = dict(chunk=1, keep_vae=False)
    asked = plan_device(plan, plan.call, 2**40, None, asked=OffloadConfig(**kw, text_encoder_chunk=1))
    assert asked.text_chunk == {"text_encoder": 1} and "as asked" in asked.line()
    sizes = asked.sizes
    assert sizes.source == "headers" and sizes.text_stacks["text_encoder"][1] == GEMMA["num_hidden_layers"]
    staged = plan_device(plan, plan.call, 2**40, None, asked=OffloadConfig(**kw, keep_text_encoder=False))
    assert staged.text_chunk == {} and staged.host_bytes - asked.host_bytes == sizes.text_stacks["text_encoder"][0]
    dp = plan_device(plan, plan.call, 2**40, asked.host_bytes, asked=OffloadConfig(**kw, keep_text_encoder=False))
    assert dp.fits and dp.text_chunk == {"text_encoder": 1} and "text_chunk" in dp.chosen
    assert "text encoder streamed 1 layer a chunk from its files" in dp.line(), dp.line()
    # kept resident where it does not fit: the refusal offers vidax's own choice
    kept = OffloadConfig(**kw, keep_text_encoder=True)
    refused = plan_device(plan, plan.call, asked.stages.peak, None, asked=kept)
    assert not refused.fits
    fixes = [str(f) for f in remedies(plan, plan.call, refused, asked=kept)]
    assert any("keep_text_encoder" in f and "streams the text encoder's layers" in f for f in fixes), fixes


@pytest.fixture(scope="module")
def checkpoint_23(tmp_path_factory):
    """(diffusers pipeline, checkpoint folder) of the tiny LTX-2.3."""
    return _build(tmp_path_factory.mktemp("ltx23_pipe"), TRANSFORMER_2_3, CONNECTORS_2_3, LTX2VocoderWithBWE, BWE)


def _build(root, transformer_config, connectors_config, vocoder_class, vocoder_config):
    build_tiny_t5_tokenizer(root / "tok", vocab_size=97)
    torch.manual_seed(0)
    gemma = transformers.Gemma3ForConditionalGeneration(
        transformers.Gemma3Config(text_config=GEMMA, vision_config=VISION, mm_tokens_per_image=4)
    ).eval()
    randomize_torch_module(gemma, seed=1)
    connectors = LTX2TextConnectors(**connectors_config).eval()
    randomize_torch_module(connectors, seed=2, scale=1.0)
    transformer = diffusers.LTX2VideoTransformer3DModel(**transformer_config).eval()
    randomize_torch_module(transformer, seed=3)
    vae, audio_vae, vocoder = vae_and_sound(vocoder_class, vocoder_config)
    pipe = LTX2Pipeline(
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(**SCHEDULER),
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=gemma,
        tokenizer=transformers.AutoTokenizer.from_pretrained(root / "tok"),
        connectors=connectors,
        transformer=transformer,
        vocoder=vocoder,
    )
    pipe.set_progress_bar_config(disable=True)
    path = root / "ckpt"
    pipe.save_pretrained(path)
    return pipe, str(path)


def _noise():
    g = np.random.default_rng(11)
    return (
        g.standard_normal((1, 80, 6), dtype=np.float32),  # (B, 5 x 4 x 4 tokens, C)
        g.standard_normal((1, 3, 18, 5), dtype=np.float32),
    )  # (B, C_a, L, M)


def _reference(pipe, prompt, latents, audio_latents, output_type="np", **kwargs):
    with torch.no_grad():
        out = pipe(
            prompt,
            NEGATIVE,
            latents=torch.from_numpy(latents),
            audio_latents=torch.from_numpy(audio_latents),
            output_type=output_type,
            **CALL,
            **kwargs,
        )
    video = out.frames.numpy() if output_type == "latent" else np.asarray(out.frames, np.float32)
    return video, out.audio.float().numpy()


@pytest.fixture(scope="module")
def vidax_pipe(checkpoint):
    import vidax

    return vidax.load_pipeline(checkpoint[1])


def _psnr(got, want):
    return 10 * np.log10(1.0 / np.mean((got - want) ** 2))


def _snr(got, want):
    return 10 * np.log10(np.sum(want**2) / np.sum((got - want) ** 2))


@pytest.mark.fast(family="ltx2")
def test_video_and_sound_match_diffusers(checkpoint, vidax_pipe):
    pipe, _ = checkpoint
    latents, audio_latents = _noise()
    ref_video, ref_audio = _reference(pipe, PROMPT, latents, audio_latents)
    out = vidax_pipe(PROMPT, NEGATIVE, latents=latents, audio_latents=audio_latents, progress=False, **CALL)
    assert out.frames.shape == ref_video.shape == (1, 17, 32, 32, 3)
    assert out.audio.shape == ref_audio.shape and out.audio_sample_rate == 8000
    psnr, snr = _psnr(out.frames, ref_video), _snr(out.audio, ref_audio)
    print(f"video PSNR {psnr:.1f} dB, audio SNR {snr:.1f} dB")
    assert psnr >= 60 and snr >= 60


def test_latents_match_diffusers_and_depend_on_the_prompt(checkpoint, vidax_pipe, tmp_path):
    """``output_type="latent"``: the de-normalised video (B, C, F', H', W') and audio (B, C_a, L, M)
    latents as the reference returns them, >= 60 dB. The decoders squash differences (a tiny random
    VAE and vocoder), so the reference's dependence on the prompt is checked here, on the latents
    of both streams: another prompt moves them far more than vidax differs (< 55 dB). Then the
    video latents through LTX-2.5's diffusion decoder on both sides (:func:`_diffusion_decode_chained`)."""
    pipe, _ = checkpoint
    latents, audio_latents = _noise()
    ref_video, ref_audio = _reference(pipe, PROMPT, latents, audio_latents, "latent")
    out = vidax_pipe(
        PROMPT, NEGATIVE, latents=latents, audio_latents=audio_latents, output_type="latent", progress=False, **CALL
    )
    assert out.frames.shape == ref_video.shape == (1, 6, 5, 4, 4) and out.audio.shape == ref_audio.shape == (
        1,
        3,
        18,
        5,
    )
    snrs = _snr(out.frames, ref_video), _snr(out.audio, ref_audio)
    other = _reference(pipe, "a dog walking in the city", latents, audio_latents, "latent")
    moved = _snr(other[0], ref_video), _snr(other[1], ref_audio)
    print(
        f"latents SNR video {snrs[0]:.1f} dB, audio {snrs[1]:.1f} dB; another prompt: {moved[0]:.1f}, {moved[1]:.1f} dB"
    )
    assert min(snrs) >= 60 and max(moved) < 55
    _diffusion_decode_chained(out.frames, ref_video, tmp_path)


def test_prompt_embeds_are_diffusers_encode_prompt(checkpoint, vidax_pipe):
    """``prompt_embeds`` / ``prompt_attention_mask`` (and the negative ones) mean what diffusers'
    ``encode_prompt`` returns (Gemma's stacked hidden states, before the connectors): vidax's
    ``encode_prompt_embeds`` equals it (fp32, two Gemma layers: 1e-5 as test_gemma3_text.py), the
    reference's embeddings given to vidax make the reference's latents of the texts (>= 60 dB as
    above), and vidax's own make its latents of the texts bit for bit."""
    pipe, _ = checkpoint
    latents, audio_latents = _noise()
    with torch.no_grad():
        ref = pipe.encode_prompt(PROMPT, NEGATIVE, max_sequence_length=CALL["max_sequence_length"])
    ref = dict(
        zip(
            ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds", "negative_prompt_attention_mask"),
            (t.float().numpy() for t in ref),
        )
    )
    ours = vidax_pipe.encode_prompt_embeds(PROMPT, NEGATIVE, **CALL)
    assert set(ours) == set(ref)
    for name, want in ref.items():
        assert ours[name].shape == want.shape, name
        if "mask" in name:
            np.testing.assert_array_equal(ours[name], want)
        else:
            assert max_rel_err(ours[name].astype(np.float32), want) < 1e-5, name
    kw = dict(latents=latents, audio_latents=audio_latents, output_type="latent", progress=False, **CALL)
    ref_video, ref_audio = _reference(pipe, PROMPT, latents, audio_latents, "latent")
    from_ref = vidax_pipe(**ref, **kw)
    assert min(_snr(from_ref.frames, ref_video), _snr(from_ref.audio, ref_audio)) >= 60
    texts = vidax_pipe(PROMPT, NEGATIVE, **kw)
    again = vidax_pipe(**ours, **kw)
    np.testing.assert_array_equal(again.frames, texts.frames)
    np.testing.assert_array_equal(again.audio, texts.audio)


def _diffusion_decode_chained(latents, ref_latents, tmp_path):
    """LTX-2.5's chaining: the ``output_type="latent"`` result into the diffusion decode pipeline
    loaded from its own folder, ``denormalize=False``, the reference's generator draw given as
    ``decoder_noise=`` (the decoder of ``test_ltx25_diffusion_decoder.py`` at this VAE's 6
    latent channels): the videos >= 60 dB."""
    from tests.parity.test_ltx25_diffusion_decoder import CONFIG as DECODER
    from vidax.models.ltx2.diffusion_decode import LTX2VideoDiffusionDecodePipeline

    ref = diffusers.LTX2VideoDiffusionDecoderModel(**dict(DECODER, latent_channels=6)).eval()
    randomize_torch_module(ref, 5, scale=0.5)
    ref_pipe = diffusers.LTX2VideoDiffusionDecodePipeline(
        diffusion_decoder=ref, scheduler=diffusers.FlowMatchEulerDiscreteScheduler()
    )
    ref_pipe.save_pretrained(tmp_path / "decode")
    with torch.no_grad():
        want = ref_pipe(
            torch.from_numpy(ref_latents),
            generator=torch.Generator().manual_seed(0),
            output_type="np",
            denormalize=False,
        ).frames
    pipe = LTX2VideoDiffusionDecodePipeline.from_pretrained(tmp_path / "decode")
    noise = torch.randn(pipe.diffusion_decoder.pixel_shape(latents.shape), generator=torch.Generator().manual_seed(0))
    got = pipe(latents, decoder_noise=noise.numpy(), denormalize=False).frames
    assert got.shape == want.shape == (1, 33, 16, 16, 3)
    print(f"diffusion-decoded video PSNR {_psnr(got, want):.1f} dB")
    assert _psnr(got, want) >= 60


def test_bad_input_is_refused_before_any_weight(checkpoint):
    import vidax
    from vidax.checkpoint import Checkpoint
    from vidax.models.ltx2.pipeline import LTX2Pipeline

    info = LTX2Pipeline.family.read_checkpoint(Checkpoint.open(checkpoint[1]))  # configs only, no weights
    latents, audio_latents = _noise()
    cases = [
        (dict(audio_guidance_scale=-1.0), "audio_guidance_scale"),
        (dict(frame_rate=0.0), "frame_rate"),
        (dict(spatio_temporal_guidance_blocks=[]), r"spatio_temporal_guidance_blocks=\[\] is empty while STG runs"),
        (dict(spatio_temporal_guidance_blocks="1"), "spatio_temporal_guidance_blocks='1' must be a list"),
        (dict(use_cross_timestep=1), "use_cross_timestep"),
        (
            dict(latents=latents.reshape(1, 5, 4, 4, 6)),
            r"latents have shape \(1, 5, 4, 4, 6\), expected "
            r"\(1, 6, 5, 4, 4\)",
        ),
        (dict(height=48), "height"),
        (dict(sigmas=[0.5, 0.9]), "sigmas"),
        (
            dict(audio_latents=audio_latents[:, :, :17]),
            r"audio_latents have shape \(1, 3, 17, 5\), expected "
            r"\(1, 3, 18, 5\)",
        ),
        (dict(latents=latents[:, :79]), "latents have shape"),
        (
            dict(min_seconds=2.0),
            "min_seconds=2.0 bounds the clip length LTX-2.5's duration head predicts, but .* has "
            "no duration head; leave it out",
        ),
        (dict(frame_rate=0.01), r"frame_rate must be a number in \[1, 1000\], got 0.01"),
        (
            dict(enable_prompt_enhancement=True),
            r"enable_prompt_enhancement.*torch's global generator.*greedy "
            r"decoding .* not implemented.*pipe.enhance_prompt",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(vidax.InputError, match=message):
            LTX2Pipeline.check_call(info, PROMPT, **{**CALL, **kwargs})
    # The memory estimate counts the sound's tokens: one per audio latent frame, num_frames /
    # frame_rate seconds of it (0.01 fps once made 900 s of sound unnoticed before loading).
    sizes = {
        rate: LTX2Pipeline.family.model_size(
            info, LTX2Pipeline.check_call(info, PROMPT, **{**CALL, "frame_rate": rate})
        )
        for rate in (1.0, 24.0)
    }
    n = CALL["num_frames"]
    assert sizes[1.0].tokens - sizes[24.0].tokens == info.audio_length(n, 1.0) - info.audio_length(n, 24.0) > 0


def test_an_image_is_refused_naming_the_image_to_video_class(checkpoint, vidax_pipe):
    """LTX2Pipeline takes no image= (diffusers' raises TypeError): from the configs and on the
    loaded pipeline, the error names LTX2ImageToVideoPipeline, the class for this checkpoint's
    image-to-video; that class takes the image, and refuses a video naming the class for that."""
    import vidax
    from tests.parity.wan_reference import random_image
    from vidax.checkpoint import Checkpoint
    from vidax.models.ltx2.pipeline import LTX2Pipeline

    ref, path = checkpoint
    image = random_image(0)
    with pytest.raises(TypeError, match="image"):
        ref("a fox", image=image, **CALL)
    message = (
        r"^LTX2Pipeline takes no image \(diffusers' does not either\); for image-to-video use LTX2ImageToVideoPipeline$"
    )
    info = LTX2Pipeline.family.read_checkpoint(Checkpoint.open(path))  # configs only, no weights
    assert "i2v" in info.tasks
    with pytest.raises(vidax.InputError, match=message):
        LTX2Pipeline.check_call(info, PROMPT, image=image, **CALL)
    with pytest.raises(vidax.InputError, match=message):
        vidax_pipe(PROMPT, image=image, **CALL)
    i2v = LTX2Pipeline.class_for_task("i2v")
    assert i2v.__name__ == "LTX2ImageToVideoPipeline"
    assert i2v.check_call(info, PROMPT, image=image, **CALL).image is image
    # Likewise a video: diffusers' LTX2ImageToVideoPipeline takes none either.
    with pytest.raises(
        vidax.InputError,
        match=r"^LTX2ImageToVideoPipeline takes no video \(diffusers' does not either\); "
        r"for video-to-video use LTX2ConditionPipeline$",
    ):
        i2v.check_call(info, PROMPT, image=image, video=np.zeros((9, 32, 32, 3), np.uint8), **CALL)


def test_custom_timesteps_refused_as_diffusers_refuses_them(checkpoint):
    """``timesteps=`` on LTX2Pipeline, LTX2ImageToVideoPipeline and LTX2ConditionPipeline:
    diffusers 0.42.1 always passes sigmas with them (its own linspace where sigmas= is None) and
    retrieve_timesteps takes one of the two, so any value is a ValueError there; vidax refuses
    it in one line with that reason, from the configs."""
    from diffusers.pipelines.ltx2.pipeline_ltx2_condition import LTX2ConditionPipeline
    from diffusers.pipelines.ltx2.pipeline_ltx2_image2video import LTX2ImageToVideoPipeline

    from tests.parity.helpers import diffusers_timesteps_error, vidax_timesteps_error
    from tests.parity.wan_reference import random_image
    from vidax.models.ltx2 import pipeline, pipeline_condition, pipeline_i2v

    ref, path = checkpoint
    call = dict(CALL, guidance_scale=1.0, audio_guidance_scale=1.0)
    for message in (
        diffusers_timesteps_error(ref, "a fox", **call),
        diffusers_timesteps_error(LTX2ImageToVideoPipeline(**ref.components), random_image(0), "a fox", **call),
        diffusers_timesteps_error(LTX2ConditionPipeline(**ref.components), prompt="a fox", **call),
    ):
        assert "Only one of `timesteps` or `sigmas` can be passed" in message, message
    for cls in (pipeline.LTX2Pipeline, pipeline_i2v.LTX2ImageToVideoPipeline, pipeline_condition.LTX2ConditionPipeline):
        assert "only one of timesteps and sigmas" in vidax_timesteps_error(cls, path, prompt="a fox", **call)


def test_stg_blocks_on_ltx20_are_unused_with_a_warning(checkpoint, caplog):
    """LTX-2.0's transformer has no perturbed attention: spatio_temporal_guidance_blocks= is taken
    (as diffusers) but unused, one WARNING says so; not given: no warning."""
    from vidax.checkpoint import Checkpoint
    from vidax.models.ltx2.pipeline import LTX2Pipeline

    info = LTX2Pipeline.family.read_checkpoint(Checkpoint.open(checkpoint[1]))
    assert not info.transformer_config.perturbed_attn
    with caplog.at_level(logging.WARNING, logger="vidax.pipeline"):
        LTX2Pipeline.check_call(info, PROMPT, **CALL)
        assert not [r for r in caplog.records if "not used" in r.getMessage()]
        LTX2Pipeline.check_call(info, PROMPT, **{**CALL, "spatio_temporal_guidance_blocks": [5, 6]})
    warned = [r.getMessage() for r in caplog.records if "not used" in r.getMessage()]
    assert warned == [
        "spatio_temporal_guidance_blocks=[5, 6] is not used: this transformer has no perturbed "
        "attention (perturbed_attn, LTX-2.3's), so its STG pass is the prompt's pass and vidax skips it"
    ]


def test_cli_writes_an_mp4_with_both_streams_in_sync(checkpoint, tmp_path):
    mp4 = tmp_path / "ltx2.mp4"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vidax",
            "generate",
            "-p",
            PROMPT,
            "--checkpoint",
            checkpoint[1],
            "-o",
            str(mp4),
            "--no-progress",
            "--height",
            "32",
            "--width",
            "32",
            "--num-frames",
            "17",
            "--num-inference-steps",
            "2",
            "--max-sequence-length",
            "16",
            "--audio-guidance-scale",
            "5",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    with av.open(str(mp4)) as c:
        video, sound = c.streams.video[0], c.streams.audio[0]
        seconds = [float(s.duration * s.time_base) for s in (video, sound)]
        assert sound.codec_context.name == "aac" and sound.sample_rate == 8000 and sound.channels == 2
        assert video.frames == 17
    assert seconds[0] == pytest.approx(17 / 24, abs=1e-3)  # the mp4 time base rounds
    assert abs(seconds[0] - seconds[1]) < 1 / 24  # within one video frame (24 fps)


@pytest.mark.parametrize("lite", [True, False], ids=["lite", "attention"])
def test_taylorseer_matches_diffusers_on_both_streams(checkpoint, vidax_pipe, lite):
    """TaylorSeer on LTX-2 at the reference's guidance defaults (CFG, STG and modality passes),
    4 steps, every setting but the identifiers non-default. diffusers 0.42.1 runs the batched
    cond / uncond pass, the STG pass and the modality pass in a cache context each (a state
    each, the same schedule); vidax batches all of them (one state: TaylorSeer's decisions
    depend on the step alone and its predictions are per element). Lite mode: the blocks
    return zeros on the predicted steps and ``proj_out``'s output (the video) is predicted;
    the sound head runs on the zeroed audio stream. Default identifiers: each layer's
    ``audio_to_video_attn`` and ``video_to_audio_attn`` predicted (the modality pass, which
    isolates the streams, never calls them). The same steps predicted (the last layer's
    attention counted per reference call) and both streams >= 60 dB (fp32, as the uncached
    test), far closer than the reference's uncached run is to its cached one. First-Block Cache and MagCache
    raise in the reference (no block metadata for LTX2VideoTransformerBlock): refused in one
    line."""
    from diffusers.hooks import TaylorSeerCacheConfig as RefTS

    import vidax

    pipe, _ = checkpoint
    latents, audio_latents = _noise()
    settings = dict(cache_interval=2, disable_cache_before_step=1, max_order=2, use_lite_mode=lite)
    call = dict(CALL, num_inference_steps=4)
    block = pipe.transformer.transformer_blocks[-1]

    def reference(config):
        if config is not None:
            pipe.transformer.enable_cache(config)
        try:
            with torch.no_grad():
                out = pipe(
                    PROMPT,
                    NEGATIVE,
                    latents=torch.from_numpy(latents),
                    audio_latents=torch.from_numpy(audio_latents),
                    output_type="np",
                    **call,
                )
        finally:
            if config is not None:
                pipe.transformer.disable_cache()
        return np.asarray(out.frames, np.float32), out.audio.float().numpy()

    with transformer_calls(pipe.transformer, (block.attn1 if lite else block.audio_to_video_attn).to_q) as per_call:
        want = reference(RefTS(taylor_factors_dtype=torch.float32, **settings))
    uncached = reference(None)
    passes = ["".join(per_call[i:12:3]) for i in range(3)]  # cond / uncond, STG, modality
    assert passes == ["CSCS", "CSCS", "CSCS" if lite else "SSSS"], passes
    vidax_pipe.enable_cache(vidax.TaylorSeerCacheConfig(taylor_factors_dtype="float32", **settings))
    try:
        got = vidax_pipe(PROMPT, NEGATIVE, latents=latents, audio_latents=audio_latents, progress=False, **call)
    finally:
        vidax_pipe.disable_cache()
    assert got.stats.cache.patterns == {"all": "CSCS"}
    moved = _psnr(uncached[0], want[0]), _snr(uncached[1], want[1])
    print(
        f"LTX-2 TaylorSeer {'lite' if lite else 'attention'}: video {_psnr(got.frames, want[0]):.1f} dB, audio SNR "
        f"{_snr(got.audio, want[1]):.1f} dB; the reference's cached vs uncached {moved[0]:.1f} / {moved[1]:.1f} dB"
    )
    agree = _psnr(got.frames, want[0]), _snr(got.audio, want[1])
    assert min(agree) >= 60
    # An uncached vidax run would sit at ``moved`` (measured 42 / 32 dB lite, 64 / 67 dB on the
    # attention modules): vidax's cached run must be far closer to the reference's.
    assert all(a > m + 30 for a, m in zip(agree, moved)), (agree, moved)
    for config in (vidax.FirstBlockCacheConfig(threshold=0.05), vidax.MagCacheConfig(calibrate=True)):
        with pytest.raises(vidax.InputError, match="no block metadata for LTX2Pipeline's transformer blocks that its"):
            vidax_pipe.enable_cache(config)
        assert vidax_pipe.cache_config is None


@pytest.mark.parametrize("name", ["Lightricks__LTX-2", "diffusers__LTX-2.3-Diffusers"])
def test_released_configs_read_and_default_call(name):
    """The released folders' configs (no weights) read as LTX2Pipeline with sound; the default call
    (121 frames of 512 x 768 at 24 fps) makes 16 x 16 x 24 video tokens and round(121 / 24 x
    16000 / 160 / 4) = 126 audio latents of 8 x 16, and runs CFG (audio guidance 7)."""
    from tests.paths import REFERENCE_CONFIGS
    from vidax.checkpoint import Checkpoint
    from vidax.models.ltx2.pipeline import LTX2Pipeline

    info = LTX2Pipeline.family.read_checkpoint(Checkpoint.open(os.path.join(REFERENCE_CONFIGS, name)))
    call = LTX2Pipeline.check_call(info, "a cat", guidance_scale=1.0)
    assert LTX2Pipeline.family.latent_shapes(info, call) == {
        "latents": (1, 6144, 128),
        "audio_latents": (1, 8, 126, 16),
    }
    assert call.do_cfg and LTX2Pipeline.capabilities_of(info).audio
    assert not LTX2Pipeline.check_call(info, "a cat", guidance_scale=1.0, audio_guidance_scale=1.0).do_cfg


def test_gemma_streamed_from_its_files_generates_the_resident_video(checkpoint, vidax_pipe):
    """A generate end to end with Gemma 3's layers streamed from its files one a chunk
    (its other weights staged): the frames and sound equal the resident run's to float32
    rounding (Gemma's embedding and final norm run outside a jit then, op by op instead of
    fused; measured 1.3e-6)."""
    import vidax
    from vidax.parallel.offload import OffloadConfig, offloaded_blocks

    kw = dict(seed=3, progress=False, **CALL)
    out = vidax_pipe(PROMPT, **kw)
    streamed = vidax.load_pipeline(checkpoint[1], offload=OffloadConfig(text_encoder_chunk=1))
    gemma = offloaded_blocks(streamed.text_encoder)
    assert (gemma.sizes, gemma.memory_kind) == ([1] * GEMMA["num_hidden_layers"], "files")
    assert streamed.staging.is_staged("text_encoder") and offloaded_blocks(streamed.transformer) is None
    s = streamed(PROMPT, **kw)
    np.testing.assert_allclose(s.frames, out.frames, atol=1e-5)
    np.testing.assert_allclose(s.audio, out.audio, atol=1e-5)


def test_streamed_blocks_and_mesh_equal_one_device(checkpoint, vidax_pipe):
    """Block streaming (one layer per chunk, the VAE staged in host memory: its latent statistics
    are read on the device) equals the resident run bit for bit; a 2x2x2 mesh (batch, heads and
    sequence split; Gemma 3, the connectors and the transformer sharded) to float32 rounding (the
    tensor-parallel sums and the head split change the order of additions; measured 1.2e-6)."""
    import vidax
    from vidax.parallel.offload import OffloadConfig

    kw = dict(seed=3, progress=False, **CALL)
    out = vidax_pipe(PROMPT, **kw)
    streamed = vidax.load_pipeline(checkpoint[1], offload=OffloadConfig(chunk=1, keep_vae=False))
    s = streamed(PROMPT, **kw)
    np.testing.assert_array_equal(s.frames, out.frames)
    np.testing.assert_array_equal(s.audio, out.audio)
    del streamed
    m = vidax.load_pipeline(checkpoint[1], mesh="2x2x2")(PROMPT, **kw)
    np.testing.assert_allclose(m.frames, out.frames, atol=2e-5)
    np.testing.assert_allclose(m.audio, out.audio, atol=2e-5)


@pytest.fixture(scope="module")
def vidax_pipe_23(checkpoint_23):
    import vidax

    return vidax.load_pipeline(checkpoint_23[1])


def test_ltx23_every_guidance_branch_matches_diffusers(checkpoint_23, vidax_pipe_23):
    """LTX-2.3 end to end at the reference's defaults (CFG 3 video / 7 audio, STG 1 (on block 1),
    modality guidance 3, rescale 0.7, ``use_cross_timestep``), ``latents`` given 5-D ``(B, C, F',
    H', W')`` (both sides normalise them with the VAE's statistics): the decoded video PSNR and
    the waveform SNR (``LTX2VocoderWithBWE``) >= 60 dB, and the de-normalised latents of both
    streams >= 60 dB. Each branch off (CFG: both scales 1; STG: 0; modality: 1; rescale: 0) moves
    the reference's latents to < 50 dB of its default run, so each branch is checked."""
    pipe, _ = checkpoint_23
    latents, audio_latents = _noise()
    latents5 = np.ascontiguousarray(latents.reshape(1, 5, 4, 4, 6).transpose(0, 4, 1, 2, 3))
    kw = dict(latents=latents5, audio_latents=audio_latents, progress=False, **CALL, **STG_BLOCKS)
    ref_video, ref_audio = _reference(pipe, PROMPT, latents5, audio_latents, **STG_BLOCKS)
    out = vidax_pipe_23(PROMPT, NEGATIVE, **kw)
    assert out.frames.shape == ref_video.shape and out.audio.shape == ref_audio.shape
    psnr, snr = _psnr(out.frames, ref_video), _snr(out.audio, ref_audio)
    ref = _reference(pipe, PROMPT, latents5, audio_latents, "latent", **STG_BLOCKS)
    got = vidax_pipe_23(PROMPT, NEGATIVE, output_type="latent", **kw)
    snrs = _snr(got.frames, ref[0]), _snr(got.audio, ref[1])
    moved = {}
    for branch, off in {
        "cfg": dict(guidance_scale=1.0, audio_guidance_scale=1.0),
        "stg": dict(stg_scale=0.0, audio_stg_scale=0.0),
        "modality": dict(modality_scale=1.0, audio_modality_scale=1.0),
        "rescale": dict(guidance_rescale=0.0, audio_guidance_rescale=0.0),
    }.items():
        other = _reference(pipe, PROMPT, latents5, audio_latents, "latent", **STG_BLOCKS, **off)
        moved[branch] = (_snr(other[0], ref[0]), _snr(other[1], ref[1]))
    print(
        f"LTX-2.3 video PSNR {psnr:.1f} dB, audio SNR {snr:.1f} dB, latents {snrs[0]:.1f} / {snrs[1]:.1f} dB; "
        f"each branch off: {moved}"
    )
    assert psnr >= 60 and snr >= 60 and min(snrs) >= 60
    assert all(max(m) < 50 for m in moved.values()), moved


@pytest.mark.parametrize("name", ["Lightricks__LTX-2", "diffusers__LTX-2.3-Diffusers"])
@pytest.mark.parametrize("sigmas", [None, "distilled"])
def test_schedule_matches_diffusers(name, sigmas):
    """The released scheduler configs: the default ``linspace(1, 1/N, N)`` and the distilled
    checkpoints' fixed sigmas (``DISTILLED_SIGMA_VALUES``, as diffusers' utils), each shifted by
    the token count's ``mu`` (6144 video tokens of the default 121 x 512 x 768 call), as
    ``LTX2Pipeline`` sets them: sigmas and timesteps to float32 rounding."""
    from diffusers.pipelines.ltx2 import utils as ltx2_utils
    from diffusers.pipelines.ltx2.pipeline_ltx2 import calculate_shift

    from tests.paths import REFERENCE_CONFIGS
    from vidax.checkpoint import Checkpoint
    from vidax.models.ltx2.pipeline import DISTILLED_SIGMA_VALUES, LTX2Pipeline
    from vidax.pipelines.spec import read_scheduler

    assert list(DISTILLED_SIGMA_VALUES) == ltx2_utils.DISTILLED_SIGMA_VALUES
    folder = os.path.join(REFERENCE_CONFIGS, name)
    info = LTX2Pipeline.family.read_checkpoint(Checkpoint.open(folder))
    given = None if sigmas is None else list(DISTILLED_SIGMA_VALUES)
    call = LTX2Pipeline.check_call(
        info, "a cat", num_inference_steps=30 if given is None else len(given), sigmas=given, guidance_scale=1.0
    )
    state = LTX2Pipeline.family.schedule(info, read_scheduler(LTX2Pipeline.family, info), call)
    ref = diffusers.FlowMatchEulerDiscreteScheduler.from_pretrained(os.path.join(folder, "scheduler"))
    c = ref.config
    mu = calculate_shift(
        6144,
        c.get("base_image_seq_len", 1024),
        c.get("max_image_seq_len", 4096),
        c.get("base_shift", 0.95),
        c.get("max_shift", 2.05),
    )
    ref.set_timesteps(sigmas=np.linspace(1.0, 1 / 30, 30) if given is None else given, mu=mu)
    np.testing.assert_allclose(np.asarray(state.sigmas), ref.sigmas.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(state.timesteps), ref.timesteps.numpy(), rtol=1e-6)


def test_cli_guidance_flags_checked_before_any_weight(checkpoint_23, tmp_path):
    """--stg-blocks 0,2 is the reference's spatio_temporal_guidance_blocks=[0, 2], checked against
    the transformer's 3 blocks from the configs (a copy without transformer weights: a block past
    them, or a malformed list, is one line before any weight is read; a valid one gets as far as
    the weights; the reference's default [28] past them says so, not blaming a flag the user never
    typed); non-finite guidance scales, frame rates that make hours of sound or none (the sound
    lasts num_frames / frame_rate) and a nan --distributed-timeout are one line naming the flag,
    value and range."""
    import shutil

    from typer.testing import CliRunner

    from vidax.cli import app

    copy = tmp_path / "ckpt"
    shutil.copytree(checkpoint_23[1], copy)
    for f in (copy / "transformer").glob("*.safetensors"):
        f.unlink()
    out = tmp_path / "v.mp4"
    base = [
        "generate",
        "-p",
        PROMPT,
        "--checkpoint",
        str(copy),
        "-o",
        str(out),
        "--no-progress",
        "--height",
        "32",
        "--width",
        "32",
        "--num-frames",
        "17",
        "--num-inference-steps",
        "2",
    ]
    guidance = "must be a finite number >= 0 (at most 3.403e+38, float32's largest)"
    for flags, message in (
        (["--stg-blocks", "3"], "--stg-blocks 3 must be a list of transformer block indices in [0, 3)"),
        (
            [],
            "STG (stg_scale, audio_stg_scale > 0) perturbs the reference's default spatio_temporal_guidance_blocks "
            "[28], past this transformer's 3 blocks [0, 3); give --stg-blocks within them, or --stg-scale 0 and "
            "--audio-stg-scale 0 to turn STG off",
        ),
        (["--frame-rate", "0.01"], "--frame-rate must be a number in [1, 1000], got 0.01"),
        (["--frame-rate", "1e-30"], "--frame-rate must be a number in [1, 1000], got 1e-30"),
        (["--fps", "100000000"], "--fps must be an integer frame rate in [1, 1000] fps, got 100000000"),
        (["--distributed-timeout", "nan"], "--distributed-timeout nan must be a finite number of seconds > 0."),
        (["--distributed-timeout", "-1"], "--distributed-timeout -1 must be a finite number of seconds > 0."),
        (["--stg-blocks", "1,x"], "--stg-blocks '1,x' must be transformer block indices separated by commas (28,29)"),
        (["--modality-scale", "inf"], f"--modality-scale {guidance}, got inf"),
        (["--audio-stg-scale", "nan"], f"--audio-stg-scale {guidance}, got nan"),
        (["--stg-scale", "1e39"], f"--stg-scale {guidance}, got 1e39"),  # as typed
        (["--stg-blocks", "0,2"], f"{copy / 'transformer'}: no *.safetensors file"),
    ):  # valid: on to the weights
        r = CliRunner().invoke(app, base + flags)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.exit_code == 2 and len(lines) == 1, r.output
        assert lines[0] == f"error: {message}" or ("safetensors" in message and message in lines[0]), r.output
    assert not out.exists()


def test_guidance_one_runs_no_unconditional_pass(checkpoint):
    """guidance_scale and audio_guidance_scale 1 (diffusers: either > 1 runs CFG), with STG and
    modality isolation off too (their passes are not CFG's; on, diffusers runs them as calls of
    their own): one call per step of batch 1 on both sides, and the same video and sound."""
    import vidax

    pipe, path = checkpoint
    ours_pipe = vidax.load_pipeline(path)
    latents, audio_latents = _noise()
    off = dict(
        guidance_scale=1.0,
        audio_guidance_scale=1.0,
        stg_scale=0.0,
        audio_stg_scale=0.0,
        modality_scale=1.0,
        audio_modality_scale=1.0,
    )
    with model_batches(ours_pipe, pipe.transformer) as (ours, theirs):
        ref_video, ref_audio = _reference(pipe, PROMPT, latents, audio_latents, **off)
        out = ours_pipe(PROMPT, NEGATIVE, latents=latents, audio_latents=audio_latents, progress=False, **CALL, **off)
    assert theirs == [1] * CALL["num_inference_steps"] and ours and set(ours) == {1}, (theirs, ours)
    psnr, snr = _psnr(out.frames, ref_video), _snr(out.audio, ref_audio)
    print(f"LTX-2 guidance 1: video PSNR {psnr:.1f} dB, audio SNR {snr:.1f} dB")
    cfg_video, _ = _reference(pipe, PROMPT, latents, audio_latents, **{**off, "guidance_scale": 4.0})
    assert psnr >= 60 and snr >= 60 and _psnr(cfg_video, ref_video) < psnr - 30
