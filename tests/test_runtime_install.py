"""vidax installed WITHOUT its test extras runs every family's pipeline from the command line.

The rest of the suite runs in the test environment, where torch, diffusers and transformers'
test extras bring in packages vidax also imports at run time (jinja2, through torch, for the chat
templates of Cosmos-Predict2.5's text encoder): a run-time dependency missing from
pyproject.toml's ``dependencies`` passes there and fails only for a user. Here a fresh virtual
environment (``python -m venv``, no system site-packages) gets ``pip install`` of a copy of the
project's files (what a user of ``make demo`` or ``pip install vidax`` gets: the declared
``dependencies`` only), and ``import torch`` / ``import diffusers`` must fail in it. Tiny random
checkpoints of every family, saved with diffusers' ``save_pretrained`` by the parity references in
this (test) environment, then run through that environment's ``vidax generate`` for 2 steps at a
small size, writing each output format (mp4 through PyAV, PNG frames through Pillow, npy), reading
an ``--image`` (Pillow), converting CogVideoX's ``spiece.model``-only tokenizer (transformers,
sentencepiece, protobuf) and rendering Cosmos' chat template (transformers, jinja2); ``vidax
inspect`` reads a hub id through ``huggingface_hub`` (offline, from a hub cache).

Cost (2 CPU cores, measured): about 40 s to build the environment from the local package index or
pip's cache, then a few seconds to build and 15 to 45 s to run each checkpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.paths import REPO, project_files

# Two steps at the tiny checkpoints' smallest usual sizes: enough for every stage (tokenizer, text
# encoder, scheduler with history, transformer, VAE decode, writer) to run once for real.
COMMON = ("--num-inference-steps", "2", "--no-progress")


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.fixture(scope="module")
def runtime_bin(tmp_path_factory):
    """``bin/`` of a fresh virtual environment holding vidax and its run-time dependencies only."""
    root = tmp_path_factory.mktemp("runtime_install")
    src = root / "vidax-src"  # a copy: the build writes build/ and *.egg-info next to the sources
    for f in project_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    venv = root / "venv"
    # sys.executable is the test environment's interpreter; venv makes the new one from its base
    # installation, without the test environment's (or the system's) site-packages.
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            str(src),
        ],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=root, env=_clean_env(root))
        assert r.returncode == 0, (
            f"building the runtime-only environment failed: {' '.join(cmd)}\n{_tail(r.stdout + r.stderr)}"
        )
    python = str(venv / "bin" / "python")
    for module in ("torch", "diffusers"):  # the test extras must not leak into it
        r = subprocess.run(
            [python, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            cwd=root,
            env=_clean_env(root),
            timeout=300,
        )
        assert r.returncode != 0 and f"No module named '{module}'" in r.stderr, (
            f"`import {module}` works in the runtime-only environment; it must not:\n{_tail(r.stderr)}"
        )
    r = subprocess.run(
        [python, "-c", "import vidax; print(vidax.__file__)"],
        capture_output=True,
        text=True,
        cwd=root,
        env=_clean_env(root),
        timeout=300,
    )
    assert r.returncode == 0 and r.stdout.strip().startswith(str(venv)), (
        f"vidax does not import from the runtime-only environment:\n{_tail(r.stdout + r.stderr)}"
    )
    return venv / "bin"


def _clean_env(tmp) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH (this checkout's vidax), no test settings
    (XLA_FLAGS' 8 host devices), a cache folder of its own; the compile cache stays off as in the
    rest of the suite."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "XLA_FLAGS", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("PYTEST_")
    }
    env.update(VIDAX_CACHE_DIR=str(tmp / "vidax-cache"), VIDAX_COMPILE_CACHE="0", JAX_PLATFORMS="cpu")
    return env


def _image(path) -> str:
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(path)
    return str(path)


def _wan(path, **kw):
    from tests.parity.wan_reference import build_reference_wan_pipeline

    build_reference_wan_pipeline(path, **kw)


def _cogvideox(path):
    """The 5B with a tokenizer as released (``spiece.model`` only): vidax converts it with
    transformers, sentencepiece and protobuf."""
    from tests.parity.cogvideox_reference import build_reference
    from tests.parity.helpers import build_sentencepiece_tokenizer

    build_reference(path, "5b")
    shutil.rmtree(os.path.join(path, "tokenizer"))
    build_sentencepiece_tokenizer(os.path.join(path, "tokenizer"))


def _ltx(path):
    from tests.parity.ltx_reference import build_reference_ltx_pipeline

    build_reference_ltx_pipeline(path)


def _hunyuan(path):
    from tests.parity.hunyuan_reference import build_reference_hunyuan_pipeline

    build_reference_hunyuan_pipeline(path, None)


def _cosmos(path):
    from tests.parity.cosmos_reference import build_reference_cosmos_pipeline
    from vidax.models.cosmos.pipeline import DEFAULT_NEGATIVE_PROMPT, SYSTEM_PROMPT

    build_reference_cosmos_pipeline(path, ["a red car", SYSTEM_PROMPT, DEFAULT_NEGATIVE_PROMPT])


# name: (builder of the tiny checkpoint (None: the embedded default, as `make demo` runs it), CLI
# arguments, output file name, whether it takes --image)
FAMILIES = {
    "embedded-default": (None, ("--height", "32", "--width", "48", "--num-frames", "5"), "video.mp4", False),
    "wan2.1-i2v-clip": (
        lambda p: _wan(p, image_to_video=True, clip=True),
        ("--height", "32", "--width", "48", "--num-frames", "5"),
        "frames",
        True,
    ),
    "wan2.2-t2v-a14b": (
        lambda p: _wan(p, boundary_ratio=0.875),
        ("--height", "32", "--width", "48", "--num-frames", "5"),
        "video.npy",
        False,
    ),
    "wan2.2-ti2v-5b": (
        lambda p: _wan(p, image_to_video=True, ti2v=True),
        ("--height", "64", "--width", "96", "--num-frames", "5"),
        "video.mp4",
        True,
    ),
    "cogvideox-5b": (
        _cogvideox,
        ("--height", "32", "--width", "48", "--num-frames", "9", "--max-sequence-length", "16"),
        "video.mp4",
        False,
    ),
    "ltx-video": (_ltx, ("--height", "32", "--width", "64", "--num-frames", "9"), "video.mp4", False),
    "hunyuanvideo-t2v": (
        _hunyuan,
        ("--height", "32", "--width", "48", "--num-frames", "5", "--max-sequence-length", "24"),
        "video.mp4",
        False,
    ),
    "cosmos-predict2.5": (
        _cosmos,
        ("--height", "32", "--width", "48", "--num-frames", "9", "--max-sequence-length", "64"),
        "video.mp4",
        False,
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generate_without_test_extras(runtime_bin, family, tmp_path):
    """``vidax generate`` of the runtime-only environment on the family's tiny diffusers checkpoint
    exits 0 and writes the video (a missing run-time dependency fails here with its import error)."""
    build, args, output, takes_image = FAMILIES[family]
    out = tmp_path / output
    cmd = [str(runtime_bin / "vidax"), "generate", "--prompt", "a red car", "--output", str(out), *COMMON, *args]
    if build is not None:
        build(str(tmp_path / "checkpoint"))
        cmd += ["--checkpoint", str(tmp_path / "checkpoint")]
    if takes_image:
        cmd += ["--image", _image(tmp_path / "first.png")]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=_clean_env(tmp_path), timeout=900)
    assert r.returncode == 0, (
        f"{family}: `vidax generate` failed in the environment that has vidax's declared run-time "
        f"dependencies only (is an import missing from pyproject.toml's dependencies?):\n{_tail(r.stderr)}"
    )
    frames = int(args[args.index("--num-frames") + 1])
    if output.endswith(".npy"):
        assert np.load(out).shape[0] == frames
    elif output.endswith(".mp4"):
        from vidax.io.video import read_video

        assert read_video(out).shape[0] == frames
    else:
        assert len([f for f in os.listdir(out) if f.endswith(".png")]) == frames


def test_version_and_inspect_without_test_extras(runtime_bin, tmp_path):
    """The other commands of the runtime-only environment: ``--version``, ``inspect`` of the
    embedded default checkpoint (which it builds without torch), and ``inspect`` of a hub id, read
    by ``huggingface_hub`` (offline) from a hub cache holding that checkpoint."""
    from vidax.default_checkpoint import NAME

    def vidax(*args, expect, **env_extra):
        r = subprocess.run(
            [str(runtime_bin / "vidax"), *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=dict(_clean_env(tmp_path), **env_extra),
            timeout=600,
        )
        assert r.returncode == 0 and expect in r.stdout.lower(), (
            f"`vidax {' '.join(args)}` failed in the runtime-only environment:\n{_tail(r.stdout + r.stderr)}"
        )

    vidax("--version", expect="backend cpu")
    vidax("serve", "--help", expect="/v1/videos")
    # vidax serve's server, app and multipart reader are run-time dependencies, and its page is packaged.
    code = (
        "import uvicorn, multipart, vidax.serve.app; from importlib.resources import files; "
        "print(files('vidax.serve').joinpath('page.html').read_text()[:15])"
    )
    r = subprocess.run(
        [str(runtime_bin / "python"), "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        timeout=300,
    )
    assert r.returncode == 0 and "<!doctype html>" in r.stdout, _tail(r.stdout + r.stderr)
    vidax("inspect", "vidax/tiny-random-wan", expect="wanpipeline")
    repo = tmp_path / "hub" / "models--vidax-test--tiny"
    shutil.copytree(tmp_path / "vidax-cache" / NAME, repo / "snapshots" / ("0" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    vidax(
        "inspect",
        "vidax-test/tiny",
        expect=str(repo / "snapshots").lower(),
        HF_HUB_OFFLINE="1",
        HF_HUB_CACHE=str(tmp_path / "hub"),
    )
