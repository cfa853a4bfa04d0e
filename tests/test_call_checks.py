"""Call arguments refused before any work, output errors, size limits, non-finite values, and
the CLI's wording of them (issue 11). In-process CLI runs (``typer.testing.CliRunner``) on the
embedded tiny checkpoint at small sizes."""

import os
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from vidax.cli import app
from vidax.default_checkpoint import default_checkpoint
from vidax.errors import CheckpointError, InputError, NumericalError

SMALL = dict(height=32, width=48, num_frames=5, num_inference_steps=2, max_sequence_length=16)
SMALL_FLAGS = ["--height", "32", "--width", "48", "--num-frames", "5", "--num-inference-steps", "2",
               "--max-sequence-length", "16", "--no-progress"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return default_checkpoint(str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def pipe(ckpt):
    return vidax.load_pipeline(ckpt)


@pytest.fixture(scope="module")
def broken(ckpt, tmp_path_factory):
    """A copy of the embedded checkpoint whose transformer weights file is cut to 100 bytes."""
    dst = tmp_path_factory.mktemp("broken") / "ckpt"
    shutil.copytree(ckpt, dst)
    file = dst / "transformer" / "diffusion_pytorch_model.safetensors"
    with open(file, "r+b") as f:
        f.truncate(100)
    return str(dst)


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _error_lines(r):
    return [line for line in r.stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- item 3: no weights read
def test_broken_copy_fails_to_load(broken):
    with pytest.raises(CheckpointError):
        vidax.load_pipeline(broken)


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_call_arguments_checked_before_weights(broken, tmp_path, verbose):
    """A bad --height on a checkpoint whose weights are unreadable is the height error: the
    call is checked from the configs before from_pretrained reads a weight (and -v prints no
    placement report before it)."""
    out = tmp_path / "v.mp4"
    r = _cli("generate", "-p", "a cat", "--checkpoint", broken, "--height", "100", "-o", str(out), *verbose)
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and "height" in lines[0] and "multiples of 16" in lines[0], r.stderr
    assert r.output.strip() == lines[0]  # nothing else: no weights error, no placement report
    assert not out.exists()


def test_check_call_reads_no_weights(broken):
    """The Python path: check_call on the configs of the broken copy refuses height=100."""
    from vidax.pipelines.checkpoint import Checkpoint
    from vidax.pipelines.loading import pipeline_class

    ckpt = Checkpoint.open(broken)
    cls = pipeline_class(ckpt, task="t2v")
    info = cls.read_checkpoint(ckpt)
    with pytest.raises(InputError, match="height=100"):
        cls.check_call(info, "a cat", height=100)
    call = cls.check_call(info, "a cat", **SMALL)  # a good call is checked without weights too
    assert (call.height, call.width, call.num_frames) == (32, 48, 5)
