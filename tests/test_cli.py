"""The user-facing paths: `vidax generate` on the embedded default, `vidax inspect`, bad input."""

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import vidax
from vidax.default_checkpoint import default_checkpoint
from vidax.errors import CheckpointError, ConfigError, InputError
from vidax.io.video import read_video
from vidax.weights import CheckpointReader, save_safetensors

SMALL = dict(height=32, width=48, num_frames=5, num_inference_steps=2, max_sequence_length=16)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return default_checkpoint(str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def pipe(ckpt):
    return vidax.load_pipeline(ckpt)


def _vidax(*args, env_extra=None, cwd=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "vidax", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)


def test_generate_on_embedded_default(tmp_path):
    out = tmp_path / "video.mp4"
    r = _vidax("generate", "--prompt", "a red car", "--num-inference-steps", "2", "--output", str(out),
               "--no-progress", env_extra={"VIDAX_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    assert "RANDOM" in r.stderr and "--checkpoint" in r.stderr
    for phase in ("load", "compile", "text encode", "s/step", "vae decode", "peak device memory", "peak host RSS"):
        assert phase in r.stderr
    frames = read_video(out)
    assert frames.shape == (17, 96, 160, 3)
    assert len(os.listdir(tmp_path)) == 2  # the video and the cache: no temporary left behind
    # Built once: a second call reuses the cached checkpoint folder.
    assert os.listdir(tmp_path / "cache") == ["wan2.1-t2v-tiny-random-v1"]


def test_inspect_lists_components(ckpt):
    r = _vidax("inspect", ckpt)
    assert r.returncode == 0, r.stderr
    for word in ("WanPipeline", "WanTransformer3DModel", "AutoencoderKLWan", "UMT5EncoderModel",
                 "UniPCMultistepScheduler", "parameters", "float32"):
        assert word in r.stdout


def test_generation_imports_no_torch(ckpt, tmp_path):
    code = f"""
import sys, vidax
pipe = vidax.load_pipeline({ckpt!r})
out = pipe("a cat", height=32, width=48, num_frames=5, num_inference_steps=1, progress=False)
from vidax.io.video import write_video
write_video(out.frames[0], {str(tmp_path / 'v.mp4')!r})
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'diffusers', 'transformers', 'accelerate'))
print('IMPORTED', bad)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "IMPORTED []" in r.stdout


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(height=40), "height and width must be multiples of 16"),
        (dict(width=50), "multiples of 16"),
        (dict(num_inference_steps=0), "num_inference_steps must be a positive integer"),
        (dict(num_inference_steps=-3), "num_inference_steps"),
        (dict(guidance_scale=-1.0), "guidance_scale must be a finite number >= 0"),
        (dict(num_frames=0), "num_frames must be a positive integer"),
        (dict(output_type="pil"), "output_type must be 'np' or 'latent'"),
        (dict(latents=np.zeros((1, 16, 3, 4, 6), np.float32)), r"latents have shape \(1, 16, 3, 4, 6\), expected \(1, 16, 2, 4, 6\)"),
        (dict(negative_prompt=["a", "b"]), "negative_prompt has 2 entries but prompt has 1"),
    ],
)
def test_bad_call_arguments(pipe, kwargs, match):
    with pytest.raises(InputError, match=match):
        pipe("a cat", **{**SMALL, **kwargs})


def test_num_frames_rounded_with_warning(pipe, caplog):
    with caplog.at_level(logging.WARNING, logger="vidax.pipeline"):
        out = pipe("a cat", **{**SMALL, "num_frames": 7}, output_type="latent", progress=False)
    assert "num_frames=7 is not of the form 4k+1; using 5" in caplog.text
    assert out.frames.shape[2] == 2  # (5 - 1) / 4 + 1 latent frames


def test_long_prompt_truncated_with_warning(pipe, caplog):
    with caplog.at_level(logging.WARNING, logger="vidax.tokenizer"):
        pipe("the cat and the dog " * 20, **SMALL, output_type="latent", progress=False)
    assert "truncated to max_sequence_length=16" in caplog.text


def test_unsupported_dtype(ckpt):
    with pytest.raises(InputError, match="dtype='float16' is not supported"):
        vidax.load_pipeline(ckpt, dtype="float16")
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--dtype", "float16")
    assert r.returncode == 2 and "dtype='float16' is not supported" in r.stderr
    assert "Traceback" not in r.stderr


def test_unwritable_output_fails_before_work(ckpt, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", str(tmp_path / "nope" / "v.mp4"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", str(tmp_path / "v.avi"))
    assert r.returncode == 2 and "unknown extension '.avi'" in r.stderr
    if os.geteuid() != 0:  # root can write anywhere
        locked.chmod(0o500)
        r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", str(locked / "v.mp4"))
        assert r.returncode == 2 and "not writable" in r.stderr
    assert not (tmp_path / "v.avi").exists()


def _copy(ckpt, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(ckpt, dst)
    return dst


def test_missing_component(ckpt, tmp_path):
    dst = _copy(ckpt, tmp_path)
    shutil.rmtree(dst / "vae")
    with pytest.raises(CheckpointError, match="component folder vae/ is missing"):
        vidax.load_pipeline(str(dst))
    r = _vidax("generate", "--prompt", "x", "--checkpoint", str(dst))
    assert r.returncode == 2 and "vae/ is missing" in r.stderr and "Traceback" not in r.stderr


def test_missing_checkpoint_folder(tmp_path):
    with pytest.raises(CheckpointError, match="no such folder"):
        vidax.load_pipeline(str(tmp_path / "nope" / "deeper"))


def test_unimplemented_config_setting(ckpt, tmp_path):
    dst = _copy(ckpt, tmp_path)
    file = dst / "scheduler" / "scheduler_config.json"
    cfg = json.loads(file.read_text())
    file.write_text(json.dumps({**cfg, "thresholding": True}))
    with pytest.raises(ConfigError, match="thresholding"):
        vidax.load_pipeline(str(dst))
    file.write_text(json.dumps(cfg))
    file = dst / "transformer" / "config.json"
    cfg = json.loads(file.read_text())
    file.write_text(json.dumps({**cfg, "qk_norm": "layer_norm"}))
    with pytest.raises(ConfigError, match="qk_norm"):
        vidax.load_pipeline(str(dst))


def test_tensor_of_wrong_shape(ckpt, tmp_path):
    dst = _copy(ckpt, tmp_path)
    file = dst / "transformer" / "diffusion_pytorch_model.safetensors"
    reader = CheckpointReader(file)
    tensors = {k: np.array(reader.get(k)) for k in reader.keys()}
    reader.close()
    tensors["blocks.1.attn1.to_q.weight"] = tensors["blocks.1.attn1.to_q.weight"][:, :-1]
    save_safetensors(tensors, file)
    with pytest.raises(CheckpointError, match=r"blocks\.1\.attn1\.to_q\.weight .* shape \(64, 63\)"):
        vidax.load_pipeline(str(dst))


def test_embedded_default_loads_in_diffusers(ckpt):
    """The embedded checkpoint is in the exact diffusers layout: diffusers/transformers load
    every component with no missing or unexpected keys."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    for cls, sub in ((WanTransformer3DModel, "transformer"), (AutoencoderKLWan, "vae"),
                     (UMT5EncoderModel, "text_encoder")):
        _, info = cls.from_pretrained(ckpt, subfolder=sub, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], (sub, info)
