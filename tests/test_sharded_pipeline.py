"""The whole Wan pipeline on a (data=2, tensor=2, sequence=2) mesh of 8 fake CPU devices equals the
single-device pipeline: UMT5 tensor-parallel, DiT data x tensor x sequence parallel with a token
count the sequence axis does not divide, CFG pair split over data. Also the CLI flags."""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from tests.parity.helpers import max_rel_err, psnr
from vidax.cli import app
from vidax.default_checkpoint import write_tiny_wan_checkpoint
from vidax.encoders.t5 import T5_PARAM_AXES
from vidax.errors import InputError
from vidax.models.wan.convert import TRANSFORMER_PARAM_AXES
from vidax.parallel.placement import check_sharded, pipeline_report
from vidax.weights import CheckpointReader, save_safetensors

PROMPT, NEGATIVE = "a red car on a bridge", "blurry"
# 48x48 pixels, 9 frames -> latents (3, 6, 6) -> 3 x 3 x 3 = 27 tokens: sequence=2 pads to 28.
CALL = dict(
    height=48, width=48, num_frames=9, num_inference_steps=2, guidance_scale=4.0, max_sequence_length=16, seed=3
)
# fp32 everywhere; the sharded run sums partial products in another order: measured ~2e-6
# absolute on frames in [0, 1] (PSNR > 110 dB). 1e-4 still fails on any real sharding bug
# (e.g. a bias added per tensor shard, an unmasked padded token), which moves frames by > 1e-2.
TOL = 1e-4


def build_pipeline_checkpoint(path: str, seed: int = 0) -> str:
    """The embedded tiny Wan2.1 pipeline with every transformer tensor random and non-zero.

    The embedded default has zero biases (invisible to a bias-added-per-shard bug); here
    biases, norm weights and modulation tables are drawn at random too.
    """
    write_tiny_wan_checkpoint(path, seed=seed)
    rng = np.random.default_rng(seed + 1)
    folder = os.path.join(path, "transformer")
    reader = CheckpointReader(folder)
    tensors = {}
    for key in reader.keys():
        value = np.array(reader.get(key), np.float32)
        if value.ndim == 1 or "scale_shift_table" in key:
            value = (
                1.0 if key.endswith("norm_q.weight") or key.endswith("norm_k.weight") else 0.0
            ) + 0.3 * rng.standard_normal(value.shape).astype(np.float32)
        tensors[key] = value
    del reader
    file = os.path.join(folder, "diffusion_pytorch_model.safetensors")
    save_safetensors(tensors, file, metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_pipeline_checkpoint(str(tmp_path_factory.mktemp("sharded_pipeline")))


@pytest.fixture(scope="module")
def reference(ckpt):
    pipe = vidax.load_pipeline(ckpt)
    return pipe(PROMPT, NEGATIVE, progress=False, **CALL).frames


def test_pipeline_on_mesh_equals_single_device(ckpt, reference):
    pipe = vidax.load_pipeline(ckpt, mesh=(2, 2, 2))
    check_sharded(pipe.transformer, TRANSFORMER_PARAM_AXES, pipe.mesh, "transformer")
    check_sharded(pipe.text_encoder, T5_PARAM_AXES, pipe.mesh, "text_encoder")
    report = pipeline_report(pipe)
    assert "data=2 x tensor=2 x sequence=2 over 8 cpu devices" in report
    assert "transformer:" in report and "text_encoder:" in report and "vae:" in report
    frames = pipe(PROMPT, NEGATIVE, progress=False, **CALL).frames
    assert frames.shape == reference.shape == (1, 9, 48, 48, 3)
    err = np.abs(frames - reference).max()
    print(f"(2, 2, 2) pipeline: max abs err {err:.2e}, PSNR {psnr(frames, reference):.1f} dB")
    assert err < TOL
    # Not vacuous: another prompt gives a clearly different video, and frames are not clipped.
    other = pipe("a dog", NEGATIVE, progress=False, **CALL).frames
    assert max_rel_err(other, reference) > 1e-2
    assert np.mean((reference <= 0.0) | (reference >= 1.0)) < 0.2  # measured 9% clipped


def test_cli_generate_on_mesh(ckpt, reference, tmp_path):
    out = tmp_path / "video.npy"
    args = [
        "generate",
        "--prompt",
        PROMPT,
        "--negative-prompt",
        NEGATIVE,
        "--checkpoint",
        ckpt,
        "--dp",
        "2",
        "--tp",
        "2",
        "--sp",
        "2",
        "--verbose",
        "--no-progress",
        "-o",
        str(out),
    ]
    for k, v in CALL.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "mesh: data=2 x tensor=2 x sequence=2" in r.stderr
    assert "MiB per device" in r.stderr and "largest replicated" in r.stderr
    assert np.abs(np.load(out)[None] - reference).max() < TOL


def test_mesh_of_fewer_devices_than_there_are(ckpt, reference, tmp_path):
    """--dp 2 on 8 devices runs on the first 2 of them (it was refused: the product had to be the
    device count); --dp 1 is the single-device run, as no mesh flag."""
    for flags, mesh in (
        (["--dp", "2"], "mesh: data=2 x tensor=1 x sequence=1 over 2 cpu devices"),
        (["--dp", "1"], "mesh: none (single device)"),
    ):
        out = tmp_path / f"video{flags[1]}.npy"
        args = [
            "generate",
            "--prompt",
            PROMPT,
            "--negative-prompt",
            NEGATIVE,
            "--checkpoint",
            ckpt,
            *flags,
            "--verbose",
            "--no-progress",
            "-o",
            str(out),
        ]
        for k, v in CALL.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0 and mesh in r.stderr, r.output
        assert np.abs(np.load(out)[None] - reference).max() < TOL


def test_bad_mesh_errors(ckpt, tmp_path):
    # The valid sizes listed are those whose tp x sp splits the checkpoint's 4 heads (its config,
    # read before any weight): not (1, 1, 8), (1, 2, 4), (1, 4, 2), (1, 8, 1).
    usable = "(2, 1, 4), (2, 2, 2), (2, 4, 1), (4, 1, 2), (4, 2, 1), (8, 1, 1)"
    with pytest.raises(InputError) as e:
        vidax.load_pipeline(ckpt, mesh="4x2x2")
    assert str(e.value).endswith(
        f"needs 16 devices, but there are 8; valid (dp, tp, sp) for 8 devices and 4 attention heads: {usable}."
    )
    with pytest.raises(
        InputError,
        match="^mesh='dp=1,sp=8': the mesh dp 1 x tp 1 x sp 8 splits attention heads over "
        "tp x sp = 8, which does not divide the model's 4; valid",
    ):
        vidax.load_pipeline(ckpt, mesh="dp=1,sp=8")
    r = CliRunner().invoke(app, ["generate", "--prompt", "x", "--checkpoint", ckpt, "--tp", "3", "--dp", "4"])
    assert (
        r.exit_code == 2
        and "--dp 4 --tp 3: the mesh dp 4 x tp 3 x sp 1 (a size not given is 1) needs 12 devices" in r.stderr
        and "--sp" not in r.stderr.split(";")[0]
    )
    assert f"valid (dp, tp, sp) for 8 devices and 4 attention heads: {usable}.\n" in r.stderr, r.stderr
    r = CliRunner().invoke(
        app,
        ["serve", "--checkpoint", ckpt, "--tp", "3", "--dp", "4", "--port", "0", "--jobs-dir", str(tmp_path / "jobs")],
    )
    assert (
        r.exit_code == 2
        and "--dp 4 --tp 3: the mesh dp 4 x tp 3 x sp 1 (a size not given is 1) needs 12 devices" in r.stderr
    ), r.output
    assert f"valid (dp, tp, sp) for 8 devices and 4 attention heads: {usable}.\n" in r.stderr, r.stderr
    # --dp alone is read as --tp / --sp alone are: the sizes not given are 1, the same refusal.
    r = CliRunner().invoke(app, ["generate", "--prompt", "x", "--checkpoint", ckpt, "--dp", "16"])
    assert (
        r.exit_code == 2
        and "--dp 16: the mesh dp 16 x tp 1 x sp 1 (a size not given is 1) needs 16 devices, but there are 8"
        in r.stderr
    )
    # sizes that fit the devices but not the heads: the same form, from the flags as typed
    r = CliRunner().invoke(app, ["generate", "--prompt", "x", "--checkpoint", ckpt, "--tp", "2", "--sp", "4"])
    assert (
        r.exit_code == 2
        and "--tp 2 --sp 4: the mesh dp 1 x tp 2 x sp 4 (a size not given is 1) splits attention "
        "heads over tp x sp = 8, which does not divide the model's 4; valid (dp, tp, sp) for 8 devices and 4 "
        f"attention heads: {usable}.\n"
        in r.stderr
    ), r.stderr
