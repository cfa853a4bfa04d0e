"""LTX-Video through the shared systems code (nothing LTX-specific there): the pipeline on a
(data=2, tensor=2, sequence=2) mesh of fake CPU devices and with its blocks streamed from host
memory equals the single-device run; ``vidax generate`` with the LTX flags and ``vidax inspect``
on a tiny LTX folder."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from tests.parity.ltx_reference import build_reference_ltx_pipeline, packed_noise
from tests.parity.wan_reference import random_image
from vidax.cli import app
from vidax.io.video import read_video
from vidax.parallel.offload import OffloadConfig, offloaded_blocks

SIZE = dict(height=32, width=64, num_frames=9)
RUN = dict(
    num_inference_steps=2,
    guidance_scale=3.0,
    guidance_rescale=0.5,
    max_sequence_length=16,
    output_type="latent",
    seed=0,
    progress=False,
    **SIZE,
)
PROMPTS, NEGATIVES = ["a red fox", "waves at night"], ["blurry", "dark"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ltx_system"))
    build_reference_ltx_pipeline(path, seed=11)
    return path


@pytest.fixture(scope="module")
def resident(ckpt):
    pipe = vidax.load_pipeline(ckpt)
    latents = packed_noise(2, **SIZE).numpy()
    out = pipe(PROMPTS, NEGATIVES, latents=latents, **RUN).frames
    other = pipe(PROMPTS[::-1], NEGATIVES, latents=latents, **RUN).frames
    assert np.abs(other - out).max() > 1e-2  # the prompts reach the latents: not vacuous
    return latents, out


def test_mesh_equals_single_device(ckpt, resident):
    latents, want = resident
    pipe = vidax.load_pipeline(ckpt, mesh=(2, 2, 2))
    got = pipe(PROMPTS, NEGATIVES, latents=latents, **RUN).frames
    # fp32; partial products summed in another order across shards: measured ~1e-6.
    assert np.abs(got - want).max() < 1e-4


def test_streamed_blocks_equal_resident(ckpt, resident):
    latents, want = resident
    pipe = vidax.load_pipeline(ckpt, offload=OffloadConfig(chunk=1, keep_text_encoder=False, keep_vae=False))
    assert offloaded_blocks(pipe.transformer).sizes == [1, 1]
    assert pipe.staging.is_staged("text_encoder") and pipe.staging.is_staged("vae")
    got = pipe(PROMPTS, NEGATIVES, latents=latents, **RUN).frames
    np.testing.assert_array_equal(got, want)  # the same per-layer computations cut at other jit boundaries


def test_cli_generate_and_inspect(ckpt, tmp_path):
    image = tmp_path / "first.png"
    random_image(2, (40, 56)).save(image)
    out = tmp_path / "video.mp4"
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "a red fox",
            "--checkpoint",
            ckpt,
            "--image",
            str(image),
            "--height",
            "32",
            "--width",
            "64",
            "--num-frames",
            "9",
            "--num-inference-steps",
            "2",
            "--frame-rate",
            "24",
            "--decode-timestep",
            "0.05",
            "--guidance-rescale",
            "0.3",
            "--max-sequence-length",
            "16",
            "--no-progress",
            "--vae-tiling",
            "-o",
            str(out),
        ],
    )
    # --vae-tiling is taken for LTX (enable_tiling() + use_framewise_decoding: 512 px tiles, 16-frame
    # windows, so this small video decodes in one piece, as diffusers' would with those switches).
    assert r.exit_code == 0, r.output
    assert read_video(out).shape == (9, 32, 64, 3)
    import av

    with av.open(str(out)) as container:  # --frame-rate is the mp4's rate unless --fps is given
        assert container.streams.video[0].average_rate == 24
    r = CliRunner().invoke(app, ["inspect", ckpt])
    assert r.exit_code == 0, r.output
    assert "pipeline: LTXPipeline" in r.output and "LTX-Video 0.9.1" in r.output and "tasks: t2v, i2v" in r.output
    r = CliRunner().invoke(
        app, ["generate", "-p", "x", "--checkpoint", ckpt, "--height", "48", "-o", str(tmp_path / "v.mp4")]
    )
    assert r.exit_code == 2 and "--height and --width must be multiples of 32" in r.output
