"""HunyuanVideo 1.5 text-to-video end to end against diffusers 0.42.1 ``HunyuanVideo15Pipeline`` on a
tiny random checkpoint written with ``save_pretrained`` (every parameter randomised), the same
initial latents, fp32, 2 steps.

The checkpoint: the tiny Qwen2.5-VL text tower and byte-level BPE tokenizer with the chat template
and the tiny byT5 encoder / ``ByT5Tokenizer`` of ``test_hunyuan_video15_text.py`` (no hub
download), a 1-block transformer (2 heads of 8, RoPE axes (2, 2, 4), text / glyph / image widths
40 / 24 / 12, 9 = 2 x 4 + 1 input channels), the tiny 16x / 4x VAE of ``test_hunyuan15_vae.py``,
the flow-match Euler scheduler (shift 5) and a ``ClassifierFreeGuidance`` guider (4.0). Both
sides crop the tiny template's own prefix (the released tokenizer's is 108) and keep 24 text
tokens; the glyph path keeps its 256 tokens.

Covered: a prompt with quoted text (glyph path) in landscape and one without in portrait, both
with CFG (a negative prompt, and the default empty one); the CFG-distilled guider (1.0: no
negative branch) with custom sigmas; a mesh and block streaming equal to one device; the reference's output depends on the prompt's quoted text (else the glyph
comparison would be vacuous); bad input named before any weight is read; ``vidax generate``.

Image-to-video against ``HunyuanVideo15ImageToVideoPipeline`` (same encoders and VAE, an I2V
transformer and a tiny SigLIP tower): a 40 x 70 image to a 48 x 80 portrait video with CFG, fp32
and bf16; the step-distilled config (MeanFlow ``timestep_r``, guider 1.0, shift 7); the bad-input
refusals and the CLI's choice of the I2V class. The fp32 bar (:data:`MIN_PSNR`) sees the I2V
path: the image stretched instead of cropped gives 68 dB, the step-distilled run without
``timestep_r`` 49 dB (both measured).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

import vidax  # noqa: E402
from tests.parity.cosmos_reference import TEXT, build_qwen_tokenizer  # noqa: E402
from tests.parity.helpers import model_batches, psnr, randomize_torch_module  # noqa: E402
from vidax.errors import InputError  # noqa: E402
from vidax.models.hunyuan_video15 import text as hv15_text  # noqa: E402
from vidax.models.hunyuan_video15.pipeline import HunyuanVideo15Pipeline  # noqa: E402

GLYPH_PROMPT = 'A neon shop sign that reads "OPEN 24h" above a door'
PLAIN_PROMPT = "A cat walks on the grass"
NEGATIVE = "blurry, low quality"
T5_TINY = dict(d_model=24, d_kv=8, num_heads=3, d_ff=40, num_layers=2, num_decoder_layers=1,
               feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
               relative_attention_max_distance=20, layer_norm_epsilon=1e-6)  # fmt: skip
VAE = dict(block_out_channels=[6, 8, 16, 32, 32], latent_channels=4, layers_per_block=1, scaling_factor=0.7)
TRANSFORMER = dict(in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=1,
                   num_refiner_layers=1, mlp_ratio=2.5, text_embed_dim=TEXT["hidden_size"],
                   text_embed_2_dim=T5_TINY["d_model"], image_embed_dim=12, rope_axes_dim=(2, 2, 4),
                   target_size=64, task_type="t2v")  # fmt: skip
TEXT_LEN = 24
#: 2 steps, 5 frames (2 latent frames): every stage runs, compiles stay small.
CALL = dict(num_frames=5, num_inference_steps=2)
#: fp32 on both sides, the same operations in another order (XLA vs torch kernels) through the
#: encoders, 2 steps and the VAE: measured 141-142 dB. The bar is 110 dB, not the brief's 60:
#: on this tiny random model the conditioning moves the video little (another quoted text: 75 dB,
#: the guider's other formulation: 77 dB), so 60 dB would not see a wrong glyph or guidance path.
MIN_PSNR = 110.0


def build_reference(path, tok_dir):
    """Save the tiny diffusers ``HunyuanVideo15Pipeline`` (every parameter randomised, its
    tokenizer built in ``tok_dir``) to ``path``; return it and the length of the chat template's
    prefix (the reference's ``prompt_template_encode_start_idx`` for this tokenizer)."""
    build_qwen_tokenizer(str(tok_dir), [hv15_text.SYSTEM_MESSAGE, GLYPH_PROMPT, PLAIN_PROMPT, NEGATIVE])
    tokenizer = transformers.AutoTokenizer.from_pretrained(tok_dir)
    tokenizer_2 = transformers.ByT5Tokenizer()
    text_encoder = transformers.Qwen2_5_VLTextModel(transformers.Qwen2_5_VLTextConfig(**TEXT)).eval()
    text_encoder_2 = transformers.T5EncoderModel(transformers.T5Config(vocab_size=len(tokenizer_2), **T5_TINY)).eval()
    torch.manual_seed(0)
    transformer = diffusers.HunyuanVideo15Transformer3DModel(**TRANSFORMER).eval()
    vae = diffusers.AutoencoderKLHunyuanVideo15(**VAE).eval()
    for i, m in enumerate((text_encoder, text_encoder_2, transformer, vae)):
        randomize_torch_module(m, seed=20 + i)
    ref = diffusers.HunyuanVideo15Pipeline(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0),
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        guider=diffusers.ClassifierFreeGuidance(guidance_scale=4.0),
    )
    ref.save_pretrained(path, safe_serialization=True)
    prefix = f"<|im_start|>system\n{hv15_text.SYSTEM_MESSAGE}<|im_end|>\n<|im_start|>user\n"
    return ref, len(tokenizer(prefix, add_special_tokens=False)["input_ids"])


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    """``(path, diffusers pipeline, vidax pipeline)`` of the tiny checkpoint."""
    path = tmp_path_factory.mktemp("hv15_t2v")
    ref, crop = build_reference(path, tmp_path_factory.mktemp("hv15_tok"))
    ref.prompt_template_encode_start_idx = crop
    ref.tokenizer_max_length = TEXT_LEN
    pipe = vidax.load_pipeline(str(path))
    pipe.hooks.crop_start = crop  # the tiny template's prefix, as the reference's attribute above
    return str(path), ref, pipe


def _latents(height, width, seed=0):
    return np.random.default_rng(seed).standard_normal((1, 4, 2, height // 16, width // 16)).astype(np.float32)


def _run_both(t2v, height, width, seed, vidax_kw=None, **kw):
    """``(diffusers frames, vidax frames)`` of one call on the same latents."""
    _, ref, pipe = t2v
    lat = _latents(height, width, seed)
    with torch.no_grad():
        want = ref(latents=torch.from_numpy(lat), height=height, width=width, output_type="np", **CALL, **kw).frames
    got = pipe(
        latents=lat,
        height=height,
        width=width,
        max_sequence_length=TEXT_LEN,
        seed=0,
        progress=False,
        **CALL,
        **kw,
        **(vidax_kw or {}),
    ).frames
    return np.asarray(want), got


@pytest.mark.fast(family="hunyuan_video15")
def test_t2v_glyph_prompt_landscape_matches_diffusers(t2v):
    want, got = _run_both(t2v, 32, 48, 1, prompt=GLYPH_PROMPT, negative_prompt=NEGATIVE)
    assert got.shape == want.shape == (1, 5, 32, 48, 3)
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 T2V glyph prompt, CFG 4, landscape: {value:.1f} dB")
    assert value >= MIN_PSNR
    # The reference's video depends on the quoted text (the glyph path is not vacuous): another
    # quote moves it far more than vidax's error (measured 74.7 dB against 141.7 dB; the tiny
    # random glyph projection is a small part of the conditioning).
    other = t2v[1](
        latents=torch.from_numpy(_latents(32, 48, 1)),
        height=32,
        width=48,
        output_type="np",
        prompt=GLYPH_PROMPT.replace("OPEN 24h", "CLOSED"),
        negative_prompt=NEGATIVE,
        **CALL,
    ).frames
    assert psnr(other, want) < value - 40


def test_t2v_plain_prompt_portrait_matches_diffusers(t2v):
    want, got = _run_both(t2v, 48, 32, 2, prompt=PLAIN_PROMPT)  # negative: the reference's empty prompt
    assert got.shape == want.shape == (1, 5, 48, 32, 3)
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 T2V plain prompt, CFG 4, portrait: {value:.1f} dB")
    assert value >= MIN_PSNR


def test_t2v_cfg_distilled_guider_and_sigmas_match_diffusers(t2v):
    """The CFG-distilled checkpoints' guider (guidance_scale 1.0): one branch, no negative; with
    custom ``sigmas`` (their number is the step count)."""
    _, ref, pipe = t2v
    guider = ref.guider
    ref.guider = diffusers.ClassifierFreeGuidance(guidance_scale=1.0)
    try:
        want, got = _run_both(t2v, 32, 48, 3, prompt=GLYPH_PROMPT, sigmas=[1.0, 0.4], vidax_kw=dict(guidance_scale=1.0))
    finally:
        ref.guider = guider
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 T2V without CFG (distilled guider): {value:.1f} dB")
    assert value >= MIN_PSNR


def test_guider_settings_match_diffusers(t2v, tmp_path):
    """A checkpoint whose guider sets ``use_original_formulation`` and ``guidance_rescale``:
    vidax reads them from ``guider/guider_config.json`` as diffusers does."""
    import json
    import shutil

    path, ref, pipe = t2v
    settings = dict(guidance_scale=3.0, guidance_rescale=0.7, use_original_formulation=True)
    folder = tmp_path / "guided"
    shutil.copytree(path, folder)
    config_file = folder / "guider" / "guider_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **settings}))
    other = vidax.load_pipeline(str(folder))
    other.hooks.crop_start = pipe.hooks.crop_start
    assert other.info.defaults.guidance_scale == 3.0
    lat = _latents(32, 48, 6)
    kw = dict(prompt=PLAIN_PROMPT, negative_prompt=NEGATIVE, height=32, width=48, **CALL)
    guider = ref.guider
    ref.guider = diffusers.ClassifierFreeGuidance(**settings)
    try:
        with torch.no_grad():
            want = ref(latents=torch.from_numpy(lat), output_type="np", **kw).frames
    finally:
        ref.guider = guider
    got = other(latents=lat, max_sequence_length=TEXT_LEN, progress=False, **kw).frames
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 T2V, guider with rescale and the original formulation: {value:.1f} dB")
    assert value >= MIN_PSNR
    plain = pipe(latents=lat, max_sequence_length=TEXT_LEN, progress=False, guidance_scale=3.0, **kw).frames
    assert psnr(plain, want) < value - 40  # the settings change the video


def test_defaults_come_from_the_checkpoint(t2v):
    info = t2v[2].info
    assert info.defaults.guidance_scale == 4.0  # the guider's
    assert (info.defaults.height, info.defaults.width) == t2v[1].video_processor.calculate_default_height_width(
        9, 16, TRANSFORMER["target_size"]
    )


def test_bad_input_names_the_argument(t2v):
    info = HunyuanVideo15Pipeline.family.read_checkpoint(t2v[2].checkpoint)
    with pytest.raises(InputError, match="height"):
        HunyuanVideo15Pipeline.check_call(info, "a", height=40, width=48)
    with pytest.raises(InputError, match="guidance_scale"):
        HunyuanVideo15Pipeline.check_call(info, "a", guidance_scale=-1.0)
    with pytest.raises(InputError, match="true_cfg_scale"):
        HunyuanVideo15Pipeline.check_call(info, "a", true_cfg_scale=2.0)
    with pytest.raises(InputError, match="sigmas"):
        HunyuanVideo15Pipeline.check_call(info, "a", num_inference_steps=3, sigmas=[1.0, 0.5])
    assert HunyuanVideo15Pipeline.check_call(info, "a", sigmas=[1.0, 0.5, 0.2]).num_inference_steps == 3
    assert not HunyuanVideo15Pipeline.check_call(info, "a", guidance_scale=1.0).do_cfg
    assert HunyuanVideo15Pipeline.check_call(info, "a", guidance_scale=0.5).do_cfg  # the guider's rule: scale != 1


@pytest.mark.parametrize("setting", [dict(start=0.2), dict(stop=0.5), dict(guidance_scale=-1.0), dict(rescale=1)])
def test_guider_settings_not_implemented_are_refused(setting):
    from vidax.errors import ConfigError
    from vidax.models.hunyuan_video15.config import ClassifierFreeGuidanceConfig

    key = next(iter(setting))
    with pytest.raises(ConfigError, match=f"{key}="):
        ClassifierFreeGuidanceConfig.from_config_dict({"guidance_scale": 6.0, **setting}, source="guider_config.json")


def test_mesh_and_block_streaming_equal_single_device(t2v):
    """The pipeline on a mesh (CFG batch over data, Ulysses over sequence) and with its blocks
    streamed from host memory gives the single-device latents (float32 summation order only)."""
    path, _, pipe = t2v
    kw = dict(
        prompt=GLYPH_PROMPT,
        negative_prompt=NEGATIVE,
        latents=_latents(32, 48, 5),
        height=32,
        width=48,
        max_sequence_length=TEXT_LEN,
        output_type="latent",
        progress=False,
        **CALL,
    )
    _streamed_and_mesh_equal_single_device(path, pipe, kw)


def _streamed_and_mesh_equal_single_device(path, pipe, kw):
    """``pipe(**kw)``'s latents again with streamed blocks (chunks of 1) and on a (2, 1, 2) mesh:
    equal within float32 summation order (1e-5 of the largest latent)."""
    import jax

    from vidax.parallel.mesh import make_mesh

    want = pipe(**kw).frames
    for options in (dict(offload=1), dict(mesh=make_mesh(2, 1, 2, devices=jax.devices()[:4]))):
        other = vidax.load_pipeline(path, **options)
        other.hooks.crop_start = pipe.hooks.crop_start
        got = other(**kw).frames
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()), err_msg=str(options))


def test_cli_generate_writes_an_mp4(t2v, tmp_path):
    """``vidax generate`` (blocks streamed, both text encoders staged) writes an mp4; ``vidax
    inspect`` names the pipeline and its encoders; a bad size is one line naming the flag."""
    pytest.importorskip("av")
    out = tmp_path / "video.mp4"
    args = [
        "--checkpoint",
        t2v[0],
        "--prompt",
        GLYPH_PROMPT,
        "--height",
        "32",
        "--width",
        "48",
        "--num-frames",
        "5",
        "--num-inference-steps",
        "2",
        "--max-sequence-length",
        "16",
        "--seed",
        "3",
        "--offload-blocks",
        "1",
        "--offload-text-encoder",
        "--no-progress",
        "--verbose",
        "-o",
        str(out),
    ]
    r = subprocess.run([sys.executable, "-m", "vidax", "generate", *args], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "transformer.transformer_blocks" in r.stderr  # streamed
    assert "staging: text_encoder, text_encoder_2" in r.stderr
    r = subprocess.run([sys.executable, "-m", "vidax", "inspect", t2v[0]], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "HunyuanVideo15Pipeline" in r.stdout and "Qwen2_5_VLTextModel" in r.stdout and "T5EncoderModel" in r.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "vidax", "generate", *args[:4], "--height", "40", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "--height" in bad.stderr and "Traceback" not in bad.stderr
    assert out.stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# Image-to-video (diffusers 0.42.1 ``HunyuanVideo15ImageToVideoPipeline``) on the T2V fixture's
# text encoders, tokenizers and VAE, with an I2V transformer (``task_type="i2v"``) and a tiny
# SigLIP tower (every parameter randomised) and its processor (30 px, 25 image tokens).

SIGLIP = dict(
    hidden_size=TRANSFORMER["image_embed_dim"],
    intermediate_size=20,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=30,
    patch_size=6,
)
#: A 40 x 70 (w x h) image: the target_size=64 bucket nearest its aspect (1.75) is 48 x 80, a
#: portrait video of another size and aspect (1.67); the crop cuts rows.
IMAGE_SIZE = (40, 70)
I2V_SIZE = (80, 48)  # (height, width), as the reference's calculate_default_height_width


def _image(seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, IMAGE_SIZE[::-1] + (3,), dtype=np.uint8)


def _i2v_reference(t2v, folder, seed, guider, scheduler, **transformer_kw):
    """A diffusers I2V pipeline saved to ``folder``: the T2V fixture's encoders and VAE, a new
    randomised I2V transformer (``transformer_kw`` over :data:`TRANSFORMER`) and SigLIP tower."""
    ref = t2v[1]
    transformer = diffusers.HunyuanVideo15Transformer3DModel(
        **{**TRANSFORMER, "task_type": "i2v", **transformer_kw}
    ).eval()
    image_encoder = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**SIGLIP)).eval()
    randomize_torch_module(transformer, seed=seed)
    randomize_torch_module(image_encoder, seed=seed + 1)
    pipe = diffusers.HunyuanVideo15ImageToVideoPipeline(
        text_encoder=ref.text_encoder,
        tokenizer=ref.tokenizer,
        transformer=transformer,
        vae=ref.vae,
        scheduler=scheduler,
        text_encoder_2=ref.text_encoder_2,
        tokenizer_2=ref.tokenizer_2,
        guider=guider,
        image_encoder=image_encoder,
        feature_extractor=transformers.SiglipImageProcessor(size={"height": 30, "width": 30}),
    )
    pipe.save_pretrained(folder, safe_serialization=True)
    pipe.prompt_template_encode_start_idx = ref.prompt_template_encode_start_idx
    pipe.tokenizer_max_length = TEXT_LEN
    return pipe


@pytest.fixture(scope="module")
def i2v(t2v, tmp_path_factory):
    """``(path, diffusers I2V pipeline, vidax pipeline)``: CFG 4 (the released I2V guider's kind)."""
    path = tmp_path_factory.mktemp("hv15_i2v")
    ref = _i2v_reference(
        t2v,
        path,
        40,
        diffusers.ClassifierFreeGuidance(guidance_scale=4.0),
        diffusers.FlowMatchEulerDiscreteScheduler(shift=5.0),
    )
    pipe = vidax.load_pipeline(str(path))
    pipe.hooks.crop_start = t2v[2].hooks.crop_start
    return str(path), ref, pipe


I2V_CALL = dict(prompt=PLAIN_PROMPT, negative_prompt=NEGATIVE, **CALL)


def _i2v_reference_frames(ref, image, lat, **kw):
    from PIL import Image

    with torch.no_grad():
        return np.asarray(
            ref(
                image=Image.fromarray(image), latents=torch.from_numpy(lat), output_type="np", **{**I2V_CALL, **kw}
            ).frames
        )


@pytest.fixture(scope="module")
def i2v_fp32(i2v):
    """``(image, latents, diffusers fp32 frames, vidax fp32 frames)`` of :data:`I2V_CALL`."""
    _, ref, pipe = i2v
    image, lat = _image(7), _latents(*I2V_SIZE, seed=8)
    want = _i2v_reference_frames(ref, image, lat)
    got = pipe(image=image, latents=lat, max_sequence_length=TEXT_LEN, progress=False, **I2V_CALL).frames
    return image, lat, want, got


def test_i2v_portrait_from_another_aspect_matches_diffusers(i2v, i2v_fp32):
    """A 40 x 70 image -> a 48 x 80 video: the bucket, the crop, the VAE condition latents and
    mask, the SigLIP tokens in both CFG branches. fp32 both sides; the bar as :data:`MIN_PSNR`."""
    image, lat, want, got = i2v_fp32
    assert got.shape == want.shape == (1, 5, *I2V_SIZE, 3)
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 I2V, 40x70 image -> 48x80 video, CFG 4: {value:.1f} dB")
    assert value >= MIN_PSNR
    # The reference's video depends on the image (else the comparison would not see the image
    # path): another image of the same size moves it far more than vidax's error.
    other = _i2v_reference_frames(i2v[1], _image(9), lat)
    assert psnr(other, want) < value - 40


def test_i2v_mesh_and_block_streaming_equal_single_device(i2v, i2v_fp32):
    """I2V's per-call inputs (the condition latents and mask, the SigLIP tokens) on a mesh (CFG
    batch over data, Ulysses over sequence) and with the blocks streamed from host memory give
    the single-device latents (float32 summation order only, as the T2V test)."""
    path, _, pipe = i2v
    image, lat, _, _ = i2v_fp32
    kw = dict(image=image, latents=lat, max_sequence_length=TEXT_LEN, output_type="latent", progress=False, **I2V_CALL)
    _streamed_and_mesh_equal_single_device(path, pipe, kw)


#: bf16 bar: measured 63.2 dB (vidax bf16 vs diffusers bf16; diffusers bf16 is 65.2 dB from its
#: fp32 video, vidax's 68.4 dB), less ~4 dB.
BF16_MIN_PSNR = 59.0


def test_i2v_bf16_matches_diffusers_bf16(i2v, i2v_fp32):
    """The I2V call in bfloat16 (transformer, Qwen2.5-VL, byT5 and SigLIP bf16, VAE fp32 on both
    sides) against diffusers in bfloat16.

    bf16 keeps 8 mantissa bits (relative rounding 2^-9 ~ 0.2 %), so two bf16 implementations that
    round in different places (op order, fused kernels) differ by about as much as either differs
    from fp32. Here diffusers also rounds what vidax keeps float32: the given latents (its
    ``prepare_latents`` casts them to the transformer's dtype), the Euler update and the timestep
    (see the module docstring of ``vidax.models.hunyuan_video15.pipeline``). The bar is the
    measured distance less ~4 dB (the margin of the other families' bf16 tests); a component in
    the wrong dtype or a bf16 latent state on the vidax side shows as the fp32 check below."""
    from tests.parity.helpers import bf16_reference

    path, ref, _ = i2v
    image, lat, want32, got32 = i2v_fp32
    want16 = _i2v_reference_frames(bf16_reference(ref), image, lat)
    pipe = vidax.load_pipeline(path, dtype="bfloat16")
    pipe.hooks.crop_start = i2v[2].hooks.crop_start
    import jax.numpy as jnp

    assert pipe.transformer.proj_out.kernel[...].dtype == jnp.bfloat16
    got16 = pipe(image=image, latents=lat, max_sequence_length=TEXT_LEN, progress=False, **I2V_CALL).frames
    values = psnr(got16, want16), psnr(want16, want32), psnr(got16, want32)
    print(
        "HunyuanVideo 1.5 I2V bf16: vidax vs diffusers bf16 %.1f dB, diffusers bf16 vs fp32 %.1f dB, vidax bf16 "
        "vs diffusers fp32 %.1f dB" % values
    )
    assert values[0] >= BF16_MIN_PSNR
    assert values[2] >= values[1] - 3.0  # vidax's bf16 video is no further from fp32 than diffusers'


def test_i2v_step_distilled_matches_diffusers(t2v, tmp_path):
    """The step-distilled I2V config (``use_meanflow``: ``timestep_r`` = the next timestep, 0 at
    the last; guider 1.0: no negative branch; shift 7), one run, 2 steps (both kinds of
    ``timestep_r``: a next step's, then the last's 0)."""
    ref = _i2v_reference(
        t2v,
        tmp_path,
        50,
        diffusers.ClassifierFreeGuidance(guidance_scale=1.0),
        diffusers.FlowMatchEulerDiscreteScheduler(shift=7.0),
        use_meanflow=True,
    )
    pipe = vidax.load_pipeline(str(tmp_path))
    pipe.hooks.crop_start = t2v[2].hooks.crop_start
    assert not pipe.check_call(pipe.info, "a", image=_image(1)).do_cfg
    image, lat = _image(3), _latents(*I2V_SIZE, seed=4)
    kw = dict(prompt=GLYPH_PROMPT, **CALL)
    want = _i2v_reference_frames(ref, image, lat, negative_prompt=None, **kw)
    got = pipe(image=image, latents=lat, max_sequence_length=TEXT_LEN, progress=False, **kw).frames
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 I2V step-distilled (MeanFlow, no CFG): {value:.1f} dB")
    assert value >= MIN_PSNR


def test_i2v_bad_input_names_the_argument(t2v, i2v, tmp_path):
    """Refused from the configs alone, naming the argument: an I2V checkpoint without an image or
    with several, with a size; a T2V checkpoint given an image; the CLI picks the I2V class for
    ``--image`` and names its flag."""
    from vidax.checkpoint import Checkpoint
    from vidax.models.hunyuan_video15.pipeline import HunyuanVideo15ImageToVideoPipeline as I2V
    from vidax.pipelines.loading import pipeline_class

    ckpt = Checkpoint.open(i2v[0])
    assert pipeline_class(ckpt, task="i2v") is I2V and pipeline_class(ckpt) is I2V
    info = I2V.family.read_checkpoint(ckpt)
    call = I2V.check_call(info, "a", image=_image(0))
    assert (call.height, call.width) == I2V_SIZE and "height" not in call.given
    with pytest.raises(InputError, match="image is required"):
        I2V.check_call(info, "a")
    with pytest.raises(InputError, match="takes no height=48"):
        I2V.check_call(info, "a", image=_image(0), height=48)
    with pytest.raises(InputError, match="image is a list of 2; HunyuanVideo15ImageToVideoPipeline takes one image"):
        I2V.check_call(info, "a", image=[_image(0), _image(1)])
    with pytest.raises(InputError, match="image"):
        I2V.check_call(info, "a", image=np.zeros((8, 8, 3), np.float32))
    with pytest.raises(InputError, match="image"):
        pipeline_class(Checkpoint.open(t2v[0]), task="i2v")
    with pytest.raises(InputError, match="image"):
        HunyuanVideo15Pipeline.check_call(
            HunyuanVideo15Pipeline.family.read_checkpoint(Checkpoint.open(t2v[0])), "a", image=_image(0)
        )
    # An I2V checkpoint whose SigLIP tower does not fit the transformer, or without its processor
    # settings: refused from the configs (the weights are left out of the copy).
    import json
    import shutil

    from vidax.errors import CheckpointError, ConfigError

    folder = tmp_path / "configs"
    shutil.copytree(i2v[0], folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config_file = folder / "image_encoder" / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "hidden_size": 16}))
    with pytest.raises(ConfigError, match="12-wide image tokens .* hidden_size=16"):
        I2V.family.read_checkpoint(Checkpoint.open(str(folder)))
    shutil.rmtree(folder / "feature_extractor")
    with pytest.raises(CheckpointError, match="feature_extractor"):
        I2V.family.read_checkpoint(Checkpoint.open(str(folder)))
    from PIL import Image

    Image.fromarray(_image(0)).save(tmp_path / "first.png")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vidax",
            "generate",
            "--checkpoint",
            i2v[0],
            "--prompt",
            "a",
            "--image",
            str(tmp_path / "first.png"),
            "--height",
            "48",
            "-o",
            str(tmp_path / "x.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "HunyuanVideo15ImageToVideoPipeline takes no --height" in r.stderr, r.stderr


def test_taylorseer_default_identifiers_predict_the_attention_like_diffusers(t2v):
    """TaylorSeer's default identifiers hook the attention of every HunyuanVideo 1.5 block
    (``transformer_blocks.i.attn``); on the cached steps each returns its own Taylor prediction
    while the rest of the block runs, per CFG branch (the guider's two cache contexts). diffusers
    has no block metadata for these blocks, so its First-Block Cache / MagCache raise and vidax
    refuses them in one line."""
    from diffusers.hooks import FirstBlockCacheConfig as RefFBC
    from diffusers.hooks import TaylorSeerCacheConfig as RefTS

    _, ref, pipe = t2v
    steps = 6  # computes 0, 1, 3, 5; predicts 2, 4
    kw = dict(cache_interval=2, disable_cache_before_step=2, max_order=2)
    call = dict(
        prompt=PLAIN_PROMPT, negative_prompt=NEGATIVE, height=32, width=48, num_frames=5, num_inference_steps=steps
    )
    lat = _latents(32, 48, 3)

    def run_ref(config):
        if config is not None:
            ref.transformer.enable_cache(config)
        try:
            with torch.no_grad():
                return np.asarray(ref(latents=torch.from_numpy(lat), output_type="np", **call).frames)
        finally:
            if config is not None:
                ref.transformer.disable_cache()

    want, uncached = run_ref(RefTS(taylor_factors_dtype=torch.float32, **kw)), run_ref(None)
    pipe.enable_cache(vidax.TaylorSeerCacheConfig(taylor_factors_dtype="float32", **kw))
    try:
        out = pipe(latents=lat, max_sequence_length=TEXT_LEN, seed=0, progress=False, **call)
    finally:
        pipe.disable_cache()
    assert out.stats.cache.patterns == {"cond": "CCSCSC", "uncond": "CCSCSC"}, out.stats.cache.patterns
    value, effect = psnr(out.frames, want), psnr(uncached, want)
    print(
        f"HunyuanVideo 1.5 TaylorSeer (attention modules): {value:.1f} dB vs diffusers; diffusers cached vs "
        f"uncached {effect:.1f} dB"
    )
    # fp32 on both sides (MIN_PSNR's reasoning); the cache's own effect is far larger than the error.
    assert value >= MIN_PSNR and effect < value - 30
    with pytest.raises(IndexError):  # diffusers finds no registered block to hook
        ref.transformer.enable_cache(RefFBC(threshold=0.1))
    with pytest.raises(InputError, match="no block metadata for HunyuanVideo15Pipeline's transformer blocks"):
        pipe.enable_cache(vidax.FirstBlockCacheConfig(threshold=0.1))


def test_guidance_one_runs_no_unconditional_pass(t2v):
    """guidance_scale 1 (the guider's ``_is_cfg_enabled``: off when the scale is close to 1, the
    CFG-distilled checkpoints' setting): one call per step of batch 1 on both sides, and the
    same video as diffusers'."""
    path, ref, pipe0 = t2v
    pipe = vidax.load_pipeline(path)
    pipe.hooks.crop_start = pipe0.hooks.crop_start
    lat = _latents(32, 48, 3)
    kw = dict(prompt=PLAIN_PROMPT, negative_prompt=NEGATIVE, height=32, width=48, **CALL)
    guider = ref.guider
    ref.guider = diffusers.ClassifierFreeGuidance(guidance_scale=1.0)
    try:
        with model_batches(pipe, ref.transformer) as (ours, theirs), torch.no_grad():
            want = np.asarray(ref(latents=torch.from_numpy(lat), output_type="np", **kw).frames)
            got = pipe(latents=lat, max_sequence_length=TEXT_LEN, progress=False, guidance_scale=1.0, **kw).frames
    finally:
        ref.guider = guider
    steps = CALL["num_inference_steps"]
    assert theirs == [1] * steps and ours and set(ours) == {1}, (theirs, ours)
    value = psnr(got, want)
    print(f"HunyuanVideo 1.5 guidance 1: {value:.1f} dB")
    with torch.no_grad():
        cfg = np.asarray(ref(latents=torch.from_numpy(lat), output_type="np", **kw).frames)
    assert value >= MIN_PSNR and psnr(cfg, want) < value - 30  # the checkpoint's CFG is another video
