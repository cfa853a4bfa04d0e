"""Parity of LTX-2.5's diffusion video decoder with diffusers ``LTX2VideoDiffusionDecoderModel`` /
``LTX2VideoDiffusionDecodePipeline`` (0.42.1; tiny, CPU, fp32).

The checkpoint is the reference pipeline's ``save_pretrained`` folder (``model_index.json``,
``diffusion_decoder/``, ``scheduler/``), every parameter and the latent statistics randomised,
loaded by the shared component loader. Tiny config: distinct widths per stage, the released
temporal strides (so the causal 1 -> 8 frame mapping, the dropped leading frames and the trailing
pad are those of LTX-2.5), stage kernels 3 and a stage-5 kernel 5 smaller than its 49..57 x 6 x 8
grid in every axis.

Tolerances: fp32 on both sides; the attention sums and softmax run in another order (blocked
tiles vs FlexAttention's blocks), measured ~3e-7 relative; 1e-5 relative per forward / >= 60 dB
on the [0, 1] video. A wrong window border, rotary split, modulation row or frame offset costs
errors above 1e-2.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from tests.parity.helpers import assert_close, assert_input_sensitive, psnr, randomize_torch_module  # noqa: E402
from vidax.errors import InputError  # noqa: E402
from vidax.models.ltx2.diffusion_decode import LTX2VideoDiffusionDecodePipeline  # noqa: E402
from vidax.nn.attention_neighbourhood import neighbourhood_attention  # noqa: E402

FP32_TOL = 1e-5
CONFIG = dict(
    out_channels=3,
    latent_channels=8,
    patch_size=2,
    scaling_factor=0.8,
    decoder_head_dim=8,
    decoder_stage_channels=[32, 16, 16, 16, 16],
    decoder_stage_depths=[1, 1, 1, 1, 1],
    decoder_stage_kernels=[[3, 3, 3]] * 4,
    decoder_upsample_strides=[[1, 2, 1], [2, 1, 1], [2, 1, 2], [2, 1, 1]],
    decoder_upsample_channel_reductions=[2, 1, 1, 1],
    decoder_stage5_kernel=[5, 5, 5],
    decoder_t_emb_dim=24,
    spatial_compression_ratio=8,
    temporal_compression_ratio=8,
)
LATENTS = (1, 8, 8, 3, 4)  # 8 latent frames -> 57 frames of 12 x 16 (stage 5: 57 x 6 x 8 tokens)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    ref = diffusers.LTX2VideoDiffusionDecoderModel(**CONFIG).eval()
    randomize_torch_module(ref, 0, scale=0.5)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        ref.latents_mean.copy_(torch.randn(ref.latents_mean.shape, generator=g))
        ref.latents_std.copy_(torch.rand(ref.latents_std.shape, generator=g) + 0.5)
    pipe = diffusers.LTX2VideoDiffusionDecodePipeline(
        diffusion_decoder=ref, scheduler=diffusers.FlowMatchEulerDiscreteScheduler()
    )
    path = tmp_path_factory.mktemp("ltx25_decode")
    pipe.save_pretrained(path)
    return pipe, path


@pytest.fixture(scope="module")
def vidax_pipe(checkpoint):
    """The folder diffusers' save_pretrained wrote (model_index.json names
    LTX2VideoDiffusionDecodePipeline), loaded as a diffusers script loads it."""
    import vidax

    pipe = vidax.load_pipeline(str(checkpoint[1]))
    assert type(pipe) is LTX2VideoDiffusionDecodePipeline
    return pipe


def _window_mask(grid, kernel):
    """The reference's ``mask_mod`` as a dense (L, L) bool array (numpy)."""
    t, h, w = grid
    kt, kh, kw = (min(k, s) for k, s in zip(kernel, grid))
    idx = np.arange(t * h * w)
    qt, qh, qw = idx // (h * w), idx % (h * w) // w, idx % w
    st, sh, sw = (np.clip(q - k // 2, 0, s - k)[:, None] for q, k, s in ((qt, kt, t), (qh, kh, h), (qw, kw, w)))
    return (
        (qt[None] >= st)
        & (qt[None] < st + kt)
        & (qh[None] >= sh)
        & (qh[None] < sh + kh)
        & (qw[None] >= sw)
        & (qw[None] < sw + kw)
    )


@pytest.mark.parametrize("block", [None, (2, 4, 3)])
def test_neighbourhood_attention_matches_dense_masked_attention(block):
    """Blocked tiles vs torch SDPA with the dense window mask, the window smaller than the grid in
    every axis (borders shifted inward on all six faces); default and ragged query tiles."""
    grid, kernel = (5, 6, 7), (3, 5, 3)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 5 * 6 * 7, 2, 8)).astype(np.float32) for _ in range(3))
    mask = _window_mask(grid, kernel)
    assert mask.sum(1).min() == mask.sum(1).max() == 45 and not mask.all()  # every window full, none global
    th = [torch.from_numpy(x).transpose(1, 2) for x in (q, k, v)]
    want = torch.nn.functional.scaled_dot_product_attention(*th, attn_mask=torch.from_numpy(mask))
    want = want.transpose(1, 2).numpy()
    got = np.asarray(neighbourhood_attention(q, k, v, grid, kernel, block=block))
    assert_close(got, want, FP32_TOL)
    full = torch.nn.functional.scaled_dot_product_attention(*th).transpose(1, 2).numpy()
    assert_input_sensitive(want, full)  # the mask matters


def _noise(shape, seed=0):
    """The reference's ``randn_tensor(shape, generator)`` draw on CPU."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).numpy()


def test_chunked_decode_matches_diffusers(checkpoint, vidax_pipe):
    """Decode in chunks of 1 latent frame (windows of 7 around each: the clip's start, its end
    with the trailing pad) against the reference's one-piece decode, same latents and noise;
    raw output per forward and the pipeline's [0, 1] video chained with ``denormalize=False``."""
    pipe, _ = checkpoint
    model = vidax_pipe.diffusion_decoder
    windows = model.windows(LATENTS[2], 1)
    assert {(w.origin, w.end) for w in windows} == {(True, False), (False, True)}
    z = np.random.default_rng(2).standard_normal(LATENTS).astype(np.float32)
    noise = _noise(model.pixel_shape(LATENTS))
    with torch.no_grad():
        want = pipe.diffusion_decoder.decode(torch.from_numpy(z), generator=torch.Generator().manual_seed(0)).sample
        want_video = pipe(
            torch.from_numpy(z), generator=torch.Generator().manual_seed(0), output_type="np", denormalize=False
        ).frames
    got = vidax_pipe(z, decoder_noise=noise, output_type="raw", denormalize=False, chunk_frames=1).frames
    assert got.shape == (1, 3, 57, 12, 16)
    assert_close(got, want.numpy(), FP32_TOL)
    video = vidax_pipe(z, decoder_noise=noise, denormalize=False, chunk_frames=1).frames
    assert video.shape == want_video.shape == (1, 57, 12, 16, 3)
    assert psnr(video, want_video) >= 60
    z2 = np.random.default_rng(3).standard_normal(LATENTS).astype(np.float32)
    with torch.no_grad():  # denormalize=True: the decoder's own latent statistics
        want_denorm = pipe(torch.from_numpy(z2), generator=torch.Generator().manual_seed(0), output_type="np").frames
    assert psnr(vidax_pipe(z2, decoder_noise=noise, chunk_frames=1).frames, want_denorm) >= 60
    assert_input_sensitive(want_video, want_denorm)


def test_decode_memory_stays_flat_over_time(vidax_pipe):
    """XLA's compiled memory (besides the weights) of the largest window: 4x the latent frames
    costs <= 1.3x chunked (measured 1.0x); in one piece it grows with the clip (measured 1.6x)."""
    model = vidax_pipe.diffusion_decoder
    one, four = LATENTS, (1, 8, 32, 3, 4)  # chunks of 1 in windows of 7: the clip's start and end, then also interior
    base = model.window_memory(one, 1)
    print(
        "decode memory besides weights (bytes): 1x",
        base,
        "4x chunked",
        model.window_memory(four, 1),
        "4x one piece",
        model.window_memory(four, None),
    )
    assert model.window_memory(four, 1) <= 1.3 * base
    assert model.window_memory(four, None) > 1.3 * base  # measured 1.6x: the check catches a one-piece decode


def test_bad_input_is_refused_with_its_keyword(vidax_pipe):
    z = np.zeros(LATENTS, np.float32)
    for kwargs, match in (
        (dict(decoder_noise=np.zeros((1, 3, 56, 12, 16), np.float32)), "decoder_noise="),
        (dict(decoder_noise=np.zeros((1, 3, 57, 12, 16), np.float64)), "decoder_noise="),
        (dict(chunk_frames=0), "chunk_frames=0"),
        (dict(output_type="pil"), "output_type="),
    ):
        with pytest.raises(InputError, match=match):
            vidax_pipe(z, **kwargs)
    with pytest.raises(InputError, match="latents="):
        vidax_pipe(np.zeros((1, 6, 8, 3, 4), np.float32))
    with pytest.raises(InputError, match="latents=.*stage 1"):
        vidax_pipe(np.zeros((1, 8, 8, 2, 4), np.float32))  # 2 rows under a 3-row window


def test_full_size_parameter_count():
    """The released 2.5 config builds abstractly with exactly the reference's parameters and
    latent statistics (torch on the meta device), key by key and shape by shape."""
    from flax import nnx

    from tests.parity.helpers import assert_reference_parameters
    from tests.paths import REFERENCE_CONFIGS
    from vidax.models.ltx2.config import LTX2DiffusionDecoderConfig
    from vidax.models.ltx2.diffusion_decoder import LTX2VideoDiffusionDecoderModel
    from vidax.nn.buffer import Buffer
    from vidax.weights.loader import KeyRules

    path = os.path.join(REFERENCE_CONFIGS, "Lightricks__LTX-2.5-Diffusers", "diffusion_decoder", "config.json")
    cfg = LTX2DiffusionDecoderConfig.from_json_file(path)
    abstract = nnx.eval_shape(lambda: LTX2VideoDiffusionDecoderModel(cfg, rngs=nnx.Rngs(0)))
    with torch.device("meta"):
        ref = diffusers.LTX2VideoDiffusionDecoderModel.from_config(
            diffusers.LTX2VideoDiffusionDecoderModel.load_config(os.path.dirname(path))
        )
    n = assert_reference_parameters(abstract, ref, KeyRules(), buffers=Buffer)
    print(f"LTX-2.5 diffusion decoder: {n} parameters")
    assert n == sum(p.numel() for p in ref.parameters()) == 417_133_616  # diffusers 0.42.1 on meta


def test_inspect_and_released_config(checkpoint):
    from tests.paths import REFERENCE_CONFIGS
    from vidax.cli.inspecting import describe_checkpoint
    from vidax.models.ltx2.config import LTX2DiffusionDecoderConfig

    text = describe_checkpoint(str(checkpoint[1]))
    assert "diffusion_decoder/  LTX2VideoDiffusionDecoderModel" in text and "parameters in" in text
    assert "decoder_stage5_kernel=[5, 5, 5]" in text
    released = os.path.join(REFERENCE_CONFIGS, "Lightricks__LTX-2.5-Diffusers", "diffusion_decoder", "config.json")
    if os.path.isfile(released):  # the reconstructed LTX-2.5 config reads, with the class defaults
        cfg = LTX2DiffusionDecoderConfig.from_json_file(released)
        assert cfg.decoder_stage_channels == (2048, 1024, 512, 512, 256) and cfg.trailing_pad == 2


def test_generate_says_how_to_run_the_decode_pipeline(checkpoint, tmp_path):
    """vidax generate cannot run a decode-only pipeline: one line saying what it does and how to
    run it from Python, before any weight is read."""
    from typer.testing import CliRunner

    from vidax.cli import app

    r = CliRunner().invoke(
        app, ["generate", "-p", "a cat", "--checkpoint", str(checkpoint[1]), "-o", str(tmp_path / "v.mp4")]
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "is LTX2VideoDiffusionDecodePipeline: it decodes the latents of an LTX-2 run" in lines[0]
    assert "vidax.load_pipeline(path)(latents, denormalize=False)" in lines[0] and "not supported" not in lines[0]
