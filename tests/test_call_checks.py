"""Call arguments refused before any work, output errors, size limits, non-finite values, and
the CLI's wording of them (issue 11). In-process CLI runs (``typer.testing.CliRunner``) on the
embedded tiny checkpoint at small sizes."""

import os
import re
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from vidax.cli import app
from vidax.errors import CheckpointError, InputError, NumericalError

SMALL = dict(height=32, width=48, num_frames=5, num_inference_steps=2, max_sequence_length=16)
SMALL_FLAGS = ["--height", "32", "--width", "48", "--num-frames", "5", "--num-inference-steps", "2",
               "--max-sequence-length", "16", "--no-progress"]


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


# --------------------------------------------------------------------------- item 4: outputs
def test_unusable_output_refused_up_front(ckpt, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for output, message in (("", "is empty"), (str(afile / "v.mp4"), f"{str(afile)!r} is a file, not a folder"),
                            (str(afile / "sub" / "v.mp4"), f"{str(afile)!r} is a file, not a folder")):
        r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", output, *SMALL_FLAGS)
        assert r.exit_code == 2, r.output
        lines = _error_lines(r)
        assert len(lines) == 1 and "--output" in lines[0] and message in lines[0], r.output
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def test_failed_write_keeps_the_frames(ckpt, tmp_path, monkeypatch):
    """The mp4 writer fails after generation (disk full): the frames are saved beside the
    requested path as .npy, the one-line error says where, exit 1, no mp4 or temporary left."""
    import vidax.io.video as video

    seen = []

    def full_disk(frames, path, fps):
        seen.append(frames)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(video, "_write_mp4", full_disk)
    out = tmp_path / "v.mp4"
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(out), *SMALL_FLAGS)
    assert r.exit_code == 1, r.output
    kept = tmp_path / "v.unwritten.npy"
    lines = _error_lines(r)
    assert len(lines) == 1 and "No space left on device" in lines[0] and str(kept) in lines[0], r.output
    assert sorted(os.listdir(tmp_path)) == ["v.unwritten.npy"]
    frames = np.load(kept)
    assert frames.shape == (1, 5, 32, 48, 3) and frames.dtype == np.float32
    np.testing.assert_array_equal(video.to_uint8(frames[0]), seen[0])


def test_unwritten_frames_go_elsewhere_when_the_folder_is_gone(tmp_path, monkeypatch):
    from vidax.io.video import save_unwritten

    frames = np.random.default_rng(0).random((1, 2, 4, 6, 3), dtype=np.float32)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    kept = save_unwritten(frames, tmp_path / "gone" / "v.mp4")
    assert kept == str(cwd / "v.unwritten.npy")
    np.testing.assert_array_equal(np.load(kept), frames)
    assert save_unwritten(frames, tmp_path / "gone" / "v.mp4") == str(cwd / "v.unwritten-1.npy")
    assert sorted(os.listdir(cwd)) == ["v.unwritten-1.npy", "v.unwritten.npy"]


# --------------------------------------------------------------------------- item 11: wording
@pytest.mark.parametrize("args, message, python_name", [
    (["--num-inference-steps", "0"], "--num-inference-steps must be a positive integer, got 0", "num_inference_steps"),
    (["--guidance-scale", "-1"], "--guidance-scale must be a finite number >= 0, got -1.0", "guidance_scale"),
    (["--height", "40"], "--height and --width must be multiples of 16", "height="),
    (["--width", "50"], "got --height 96, --width 50; nearest valid: --width in [48, 64]", "width="),
    (["--guidance-scale-2", "2"], "--guidance-scale-2 2.0 is only used by checkpoints with two experts",
     "guidance_scale_2"),
    (["--max-sequence-length", "0"], "--max-sequence-length must be a positive integer", "max_sequence"),
    (["--dtype", "float16"], "--dtype 'float16' is not supported", "dtype="),
    (["-p", ""], "--prompt is empty ('')", "prompt is"),
    (["-p", "  "], "--prompt is empty ('  ')", "prompt is"),
])
def test_cli_errors_name_flags(ckpt, tmp_path, args, message, python_name):
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(tmp_path / "v.npy"), "--no-progress", *args)
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and message in lines[0], r.output
    assert not re.search(r"(?<![-\w])" + re.escape(python_name), lines[0])  # no Python keyword left
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt=""), r"^prompt is empty \(''\); describe the video$"),
    (dict(prompt=None), "^prompt is required"),
    (dict(prompt=["a cat", " "]), r"^prompt is empty \(\['a cat', ' '\]\)"),
    (dict(prompt="a cat", num_inference_steps=0), "^num_inference_steps must be a positive integer, got 0"),
    (dict(prompt="a cat", height=40), "^height and width must be multiples of 16 .* got height=40, width=48"),
])
def test_api_errors_name_keywords(pipe, kwargs, message):
    with pytest.raises(InputError, match=message):
        pipe(**{**SMALL, **kwargs})


def test_inspect_parses_mesh_first(ckpt):
    r = _cli("inspect", ckpt, "--mesh", "3xfoo")
    assert r.exit_code == 2 and "--mesh '3xfoo' is not a mesh description" in r.stderr
    assert r.stdout == ""  # nothing of the description printed before the refusal


# --------------------------------------------------------------------------- item 10: NaN / Inf
def _poison_step(update, k):
    """``scheduler_update`` whose latents go NaN at (1-based) step ``k``."""
    import jax.numpy as jnp

    def poisoned(self, state, pred, latents, args):
        x, new_state = update(self, state, pred, latents, args)
        return jnp.where(state.step_index == k - 1, jnp.nan, x), new_state

    return poisoned


def test_nan_at_a_step_stops_the_run(pipe, monkeypatch):
    from vidax.models.wan.pipeline import WanPipeline

    monkeypatch.setattr(pipe, "_step_fns", {})  # the poisoned step compiles afresh
    monkeypatch.setattr(WanPipeline, "scheduler_update", _poison_step(WanPipeline.scheduler_update, 2))
    steps = []
    with pytest.raises(NumericalError, match=r"^denoising step 2 of 3 \(the transformer and the scheduler update\) "
                                             "produced NaN/Inf latents; stopped there"):
        pipe("a cat", **{**SMALL, "num_inference_steps": 3}, progress=False,
             callback=lambda i, n: steps.append(i))
    assert steps == [0]  # stopped at the step that went NaN
    assert issubclass(NumericalError, FloatingPointError)


def test_nan_in_the_vae_decode_is_named(pipe, monkeypatch):
    vae_cls = type(pipe.vae)
    decode = vae_cls.iter_decode

    def poisoned(self, z, **kwargs):
        for i, chunk in enumerate(decode(self, z, **kwargs)):
            yield chunk * np.float32("nan") if i == 1 else chunk

    monkeypatch.setattr(vae_cls, "iter_decode", poisoned)
    with pytest.raises(NumericalError, match=r"^the VAE decode \(chunk 2 of 2\) produced NaN/Inf values"):
        pipe("a cat", **SMALL, progress=False)


def test_cli_nan_is_one_line_and_writes_nothing(ckpt, tmp_path, monkeypatch):
    from vidax.models.wan.pipeline import WanPipeline

    monkeypatch.setattr(WanPipeline, "scheduler_update", _poison_step(WanPipeline.scheduler_update, 1))
    out = tmp_path / "v.mp4"
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(out), *SMALL_FLAGS)
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and "denoising step 1 of 2" in lines[0] and "NaN/Inf" in lines[0], r.output
    assert not os.listdir(tmp_path)


def _reference_info(name, task):
    from tests.paths import REFERENCE_CONFIGS
    from vidax.pipelines.checkpoint import Checkpoint
    from vidax.pipelines.loading import pipeline_class

    ckpt = Checkpoint.open(os.path.join(REFERENCE_CONFIGS, name))
    cls = pipeline_class(ckpt, task=task)
    return cls, cls.read_checkpoint(ckpt)


def test_cogvideox_noise_arguments_checked_before_loading():
    """image_noise / step_noise with NaN or Inf (or of another shape) are refused by check_call,
    on the released configs alone (no weights there)."""
    small = dict(height=32, width=32, num_frames=9, num_inference_steps=2)
    cls, info = _reference_info("THUDM__CogVideoX-5b", "t2v")
    good = np.zeros((2, 1, 3, 16, 4, 4), np.float32)  # (steps, B, T, C, h, w)
    cls.check_call(info, "a cat", step_noise=good, **small)
    for bad in (np.nan, np.inf):
        noise = good.copy()
        noise[1, 0, 2] = bad
        with pytest.raises(InputError, match=r"^step_noise has 256 NaN/Inf value\(s\) of 1536"):
            cls.check_call(info, "a cat", step_noise=noise, **small)
    with pytest.raises(InputError, match=r"step_noise has shape \(3, 1, 3, 16, 4, 4\), expected \(2, 1, 3, 16, 4, 4\)"):
        cls.check_call(info, "a cat", step_noise=np.zeros((3, 1, 3, 16, 4, 4), np.float32), **small)
    cls, info = _reference_info("THUDM__CogVideoX-5b-I2V", "i2v")
    image = np.zeros((8, 8, 3), np.uint8)
    noise = np.zeros((1, 16, 1, 60, 90), np.float32)  # at the checkpoint's 480x720
    cls.check_call(info, "a cat", image=image, image_noise=noise)
    noise[0, 3, 0, 5, 7] = np.nan
    with pytest.raises(InputError, match=r"^image_noise has 1 NaN/Inf value"):
        cls.check_call(info, "a cat", image=image, image_noise=noise)
    with pytest.raises(InputError, match=r"image_noise has shape \(1, 16, 1, 4, 4\), expected \(1, 16, 1, 60, 90\)"):
        cls.check_call(info, "a cat", image=image, image_noise=np.zeros((1, 16, 1, 4, 4), np.float32))


# --------------------------------------------------------------------------- item 8: sizes
@pytest.mark.parametrize("flag, value, top", [("--height", "100000", 16384), ("--width", "16400", 16384),
                                              ("--num-frames", "4097", 4093)])
def test_cli_size_beyond_the_model(ckpt, tmp_path, flag, value, top):
    """Past the Wan RoPE tables (rope_max_seq_len=1024 patches per axis): refused before loading,
    naming the flag, its value and the largest valid one."""
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, flag, value, "-o", str(tmp_path / "v.npy"))
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1, r.output
    assert f"{flag} {value} is more than this checkpoint's model can represent: the largest valid {flag} is {top} " \
           "(rope_max_seq_len=1024 patches per axis" in lines[0], lines[0]
    assert not os.listdir(tmp_path)


def test_api_size_beyond_the_model(pipe):
    with pytest.raises(InputError, match=r"^height=100000 is more than .* the largest valid height is 16384 "):
        pipe("a cat", height=100000)
    cls, info = _reference_info("THUDM__CogVideoX1.5-5B", "t2v")
    with pytest.raises(InputError, match=r"^width=2416 is more than .* the largest valid width is 2400 \(the RoPE "
                                         r"position grid of 150x150 patches"):
        cls.check_call(info, "a cat", height=768, width=2416)
    cls.check_call(info, "a cat", height=768, width=2400)
    cls, info = _reference_info("THUDM__CogVideoX-5b", "t2v")  # 1.0: any grid maps onto its base grid
    assert cls.size_limits(info).height is None


def test_large_size_warns_with_an_estimate(caplog):
    cls, info = _reference_info("Wan-AI__Wan2.1-T2V-1.3B-Diffusers", "t2v")
    plenty = (2**60, "test memory")  # the warning of a run that fits (one that does not is refused)
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        cls.check_memory(info, cls.check_call(info, "a cat"), available=plenty)
        # Wan's 720p: 2.3x the tokens, no warning
        cls.check_memory(info, cls.check_call(info, "a cat", height=720, width=1280), available=plenty)
        assert not caplog.records
        cls.check_memory(info, cls.check_call(info, "a cat", height=4096, width=4096), available=plenty)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    # 81 frames -> 21 latent frames; 4096 / 8 / 2 = 256 patches per side; CFG doubles the batch.
    assert message.startswith("height=4096, width=4096, num_frames=81 is far beyond this checkpoint's default "
                              "480x832, 81 frames (42x its tokens): 1376256 tokens per sample x batch 2: peak memory ~")
    # The peak of run_memory_estimate by part: the decode chunk (4 frames x 4096 x 4096 x 96
    # channels x 80 bytes) is the largest phase; latents (x2) and the video (3 float32 copies).
    assert message.endswith(": peak memory ~526.38 GiB (denoising step 435.75 GiB, VAE decode chunk 480.00 GiB, "
                            "latents and video 46.22 GiB), ~698234 TFLOP of attention per step"), message


def test_cli_large_size_warning_names_flags(broken, tmp_path, caplog):
    """The warning comes before any weight is read (the broken copy fails to load after it),
    and names flags on the command line."""
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        r = _cli("generate", "-p", "a cat", "--checkpoint", broken, "--height", "384", "--width", "640",
                 "-o", str(tmp_path / "v.npy"))
    assert r.exit_code == 2 and "safetensors" in r.stderr, r.output
    warnings = [rec.getMessage() for rec in caplog.records if "far beyond" in rec.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("--height 384, --width 640, --num-frames 17 is far beyond "
                                                         "this checkpoint's default 96x160"), warnings


# --------------------------------------------------------------------------- review fixes
def test_configs_only_checks_of_the_review(broken, tmp_path, monkeypatch):
    """Found in review: a Wan image list, a bad _vidax_call_defaults and a family module that
    does not import are each one error before any weight is read (``broken`` has unreadable
    transformer weights), never a traceback."""
    import json

    from vidax.errors import ConfigError
    from vidax.models.wan.pipeline import WanPipeline
    from vidax.pipelines.checkpoint import Checkpoint

    img = np.zeros((32, 48, 3), np.uint8)
    import dataclasses

    info = WanPipeline.read_checkpoint(Checkpoint.open(broken))
    info = dataclasses.replace(info, tasks=("t2v", "i2v"))  # as TI2V-5B: image-to-video too
    with pytest.raises(InputError, match="one image for the whole batch"):
        WanPipeline.check_call(info, "a cat", image=[img, img], **SMALL)
    index = json.loads(open(os.path.join(broken, "model_index.json")).read())
    for bad in ({"height": 96.0}, [96], {"fps": 0}):
        dst = tmp_path / f"bad{len(os.listdir(tmp_path))}"
        shutil.copytree(broken, dst)
        (dst / "model_index.json").write_text(json.dumps({**index, "_vidax_call_defaults": bad}))
        r = _cli("generate", "-p", "a cat", "--checkpoint", str(dst), "-o", str(tmp_path / "x.mp4"))
        assert r.exit_code == 2 and "_vidax_call_defaults" in r.stderr and "Traceback" not in r.stderr, r.stderr
    monkeypatch.setenv("VIDAX_FAMILIES", "no_such_family_module")
    with pytest.raises(ConfigError, match="family module 'no_such_family_module'.*does not import"):
        vidax.load_pipeline(broken)
    r = _cli("inspect", broken)
    assert r.exit_code == 2 and "no_such_family_module" in r.stderr


def test_staging_counts_the_text_encoder_at_its_own_dtype(ckpt, monkeypatch):
    """CogVideoX loads T5 in float32 under a bfloat16 transformer: the staging plan counts it so."""
    from vidax.pipelines import staging as staging_mod

    paths = {n: os.path.join(ckpt, n) for n in ("transformer", "text_encoder", "vae")}
    te32 = staging_mod.component_bytes(paths["text_encoder"], np.float32)["total"]
    seen = []
    real = staging_mod.component_bytes

    def spy(folder, dtype, *args):
        seen.append((os.path.basename(folder), np.dtype(dtype).name))
        return real(folder, dtype, *args)

    monkeypatch.setattr(staging_mod, "component_bytes", spy)
    monkeypatch.setattr(staging_mod, "device_memory_limit", lambda: 10 * te32)
    staging_mod.plan_pipeline_staging(paths, "bfloat16", np.float32, None, text_encoder_dtype=np.float32)
    assert ("text_encoder", "float32") in seen and ("transformer", "bfloat16") in seen
