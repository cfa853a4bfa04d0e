"""A new family is its folder plus one registry line: ``tests/toy_family`` is registered from
outside vidax (``VIDAX_FAMILIES``) and runs through ``load_pipeline``, the CLI and ``inspect``
with no shared vidax file edited; it shares the Wan VAE, UMT5 and UniPC through the registry,
and the shared block streaming and staging work for it unchanged."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx

import vidax
from vidax.default_checkpoint import random_module
from vidax.io.video import read_video
from vidax.parallel.offload import OffloadConfig, offloaded_stacks
from vidax.weights import export_state_dict, save_safetensors

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = {"_class_name": "ToyTransformer3DModel", "in_channels": 16, "dim": 32, "text_dim": 64, "num_layers": 3,
       "num_single_layers": 2}


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    """The embedded Wan checkpoint's tokenizer, UMT5, VAE and scheduler, plus a random toy transformer."""
    from tests.toy_family import FAMILY
    from tests.toy_family.config import ToyConfig
    from tests.toy_family.transformer import ToyTransformer3DModel
    from vidax.default_checkpoint import default_checkpoint

    wan = default_checkpoint(str(tmp_path_factory.mktemp("cache")))
    root = tmp_path_factory.mktemp("toy") / "ckpt"
    for name in ("tokenizer", "text_encoder", "vae", "scheduler"):
        shutil.copytree(os.path.join(wan, name), root / name)
    with open(os.path.join(wan, "model_index.json")) as f:
        index = json.load(f)
    index.update({"_class_name": "ToyVideoPipeline", "transformer": ["vidax_toy", "ToyTransformer3DModel"]})
    index.pop("_vidax_call_defaults")
    (root / "model_index.json").write_text(json.dumps(index))
    (root / "transformer").mkdir()
    (root / "transformer" / "config.json").write_text(json.dumps(TOY))
    cfg = ToyConfig.from_config_dict(TOY)
    model = random_module(lambda: ToyTransformer3DModel(cfg, rngs=nnx.Rngs(0)), np.random.default_rng(1))
    state = export_state_dict(model, FAMILY.components[0].rules(cfg))
    save_safetensors({k: np.asarray(v, np.float32) for k, v in state.items()},
                     str(root / "transformer" / "diffusion_pytorch_model.safetensors"))
    return str(root)


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setenv("VIDAX_FAMILIES", "tests.toy_family")
    monkeypatch.syspath_prepend(REPO)


def test_unregistered_family_is_refused(toy_checkpoint, monkeypatch):
    monkeypatch.delenv("VIDAX_FAMILIES", raising=False)
    with pytest.raises(vidax.ConfigError, match="pipeline 'ToyVideoPipeline' is not supported"):
        vidax.load_pipeline(toy_checkpoint)


def test_toy_family_runs_through_load_pipeline(toy_checkpoint, toy_registered):
    pipe = vidax.load_pipeline(toy_checkpoint)
    assert type(pipe).__name__ == "ToyVideoPipeline" and pipe.defaults.num_frames == 5
    out = pipe("a toy boat", seed=0, progress=False)
    assert out.frames.shape == (1, 5, 32, 48, 3) and np.isfinite(out.frames).all()
    other = pipe("a toy boat", seed=1, progress=False).frames
    assert np.abs(other - out.frames).max() > 1e-3  # the video depends on the noise
    # The shared block streaming (both of its stacks) and staging run the new family unchanged,
    # and equal resident bit for bit.
    streamed = vidax.load_pipeline(toy_checkpoint, offload=OffloadConfig(chunk=2, keep_text_encoder=False,
                                                                         keep_vae=False))
    stacks = offloaded_stacks(streamed.transformer)
    assert [(b.attr, b.sizes) for b in stacks] == [("blocks", [2, 1]), ("single_blocks", [2])]
    np.testing.assert_array_equal(streamed("a toy boat", seed=0, progress=False).frames, out.frames)
    with pytest.raises(vidax.InputError, match="takes no 'use_dynamic_cfg'; it takes prompt, negative_prompt"):
        pipe("a toy boat", use_dynamic_cfg=True)


def test_toy_family_runs_through_the_cli_and_inspect(toy_checkpoint, tmp_path):
    env = {**os.environ, "VIDAX_FAMILIES": "tests.toy_family",
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "toy.mp4"
    r = subprocess.run([sys.executable, "-m", "vidax", "generate", "-p", "a toy boat", "--checkpoint", toy_checkpoint,
                        "-o", str(out), "--no-progress", "--offload-blocks", "1"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert read_video(out).shape == (5, 32, 48, 3)
    r = subprocess.run([sys.executable, "-m", "vidax", "inspect", toy_checkpoint, "--mesh", "1x1x1"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "variant: Toy T2V: 3 layers" in r.stdout and "num_layers=3, num_single_layers=2, dim=32" in r.stdout

