"""The user-facing paths: `vidax generate` on the embedded default, `vidax inspect`, bad input."""

import json
import logging
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import vidax
from tests.paths import REFERENCE_CONFIGS
from tests.test_run_stats import summary_rows
from vidax.default_checkpoint import NAME
from vidax.errors import CheckpointError, ConfigError, InputError
from vidax.io.video import read_video
from vidax.weights import CheckpointReader, save_safetensors

SMALL = dict(height=32, width=48, num_frames=5, num_inference_steps=2, max_sequence_length=16)


@pytest.fixture(scope="module")
def pipe(ckpt):
    return vidax.load_pipeline(ckpt)


def _vidax(*args, env_extra=None, cwd=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "vidax", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def _vidax_here(*args):
    """``vidax ARGS`` run in this process (refusals, inspect): an object with ``returncode``,
    ``stdout`` and ``stderr`` as :func:`_vidax`'s; an exception other than the
    exit is re-raised (a traceback in a real process)."""
    import types

    from typer.testing import CliRunner

    from vidax.cli import app

    r = CliRunner().invoke(app, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return types.SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def test_generate_on_embedded_default(tmp_path):
    """A new user's first run: no --checkpoint (the embedded one, said RANDOM) and no --output,
    in a folder holding an earlier run's vidax-output.mp4: that file is kept, the video goes to
    vidax-output-1.mp4, said in one line naming --output and --overwrite."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "vidax-output.mp4").write_bytes(b"an earlier run")
    out = run / "vidax-output-1.mp4"
    # --no-audio is accepted by a model without sound (and changes nothing).
    t0 = time.time()
    r = _vidax(
        "generate",
        "--prompt",
        "a red car",
        "--num-inference-steps",
        "2",
        "--no-progress",
        "--no-audio",
        env_extra={"VIDAX_CACHE_DIR": str(tmp_path / "cache")},
        cwd=run,
    )
    wall = time.time() - t0
    assert r.returncode == 0, r.stderr
    assert "RANDOM" in r.stderr and "--checkpoint" in r.stderr
    for phase in ("load", "compile", "text encode", "s/step", "vae decode", "peak device memory", "peak host RSS"):
        assert phase in r.stderr
    # The summary accounts for the whole process: its start-up row (process start to the load)
    # and the rows after it add up to the wall time seen from outside, less the exit after the
    # summary and the fork before the process exists (well under 5 s, or 15 %).
    rows = summary_rows(r.stderr.split("summary:\n")[1])
    startup = float(rows["start-up"].split()[0])
    total = float(rows["total"].split()[0])
    assert rows["total"].endswith("(start-up, load and write included)"), rows
    # total counts from the process's creation time (psutil: kernel clock ticks, 10 ms) and is
    # printed to 10 ms: it may pass the test's own timer by up to ~20 ms (measured 20.74 vs 20.725)
    assert 0 < startup < total <= wall + 0.05 and total >= wall - max(5.0, 0.15 * wall), (startup, total, wall)
    assert "audio decode" not in r.stderr and "sound" not in r.stderr
    line = (
        "vidax-output.mp4 exists (an earlier run's): writing vidax-output-1.mp4 "
        "(--output names the file, --overwrite replaces vidax-output.mp4)\n"
    )
    assert line in r.stderr and "wrote vidax-output-1.mp4 (" in r.stderr, r.stderr
    assert (run / "vidax-output.mp4").read_bytes() == b"an earlier run"
    frames = read_video(out)
    assert frames.shape == (17, 96, 160, 3)
    import av

    with av.open(str(out)) as c:
        assert len(c.streams.video) == 1 and not c.streams.audio  # a silent video
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # a normal file, not mkstemp's 0600
    assert sorted(os.listdir(run)) == ["vidax-output-1.mp4", "vidax-output.mp4"]  # no temporary left behind
    # Built once: a second call reuses the cached checkpoint folder.
    assert os.listdir(tmp_path / "cache") == [NAME]


def test_free_output_name_counts_a_batchs_files(tmp_path):
    """The default output's free name: every file of the batch's videos must be free."""
    from vidax.io.video import free_output_name

    for name in ("vidax-output.mp4", "vidax-output_1.mp4", "vidax-output-1_1.mp4"):
        (tmp_path / name).write_bytes(b"an earlier run")
    path = str(tmp_path / "vidax-output.mp4")
    assert free_output_name(path, 1) == str(tmp_path / "vidax-output-1.mp4")
    assert free_output_name(path, 2) == str(tmp_path / "vidax-output-2.mp4")  # writes -2_0, -2_1


def test_a_seed_draws_the_video_noise_from_its_own_key(pipe):
    """seed=s is latents=jax.random.normal(PRNGKey(s), shape): the video's noise is drawn as it
    was before latents became a pytree of streams, so every existing seed gives the same video."""
    import jax

    call = pipe.check_call(pipe.info, "a red car", seed=11, **SMALL)
    noise = np.asarray(jax.random.normal(jax.random.PRNGKey(11), pipe.family.latent_shape(pipe.info, call)))
    seeded = pipe("a red car", seed=11, progress=False, **SMALL)
    given = pipe("a red car", latents=noise, progress=False, **SMALL)
    np.testing.assert_array_equal(seeded.frames, given.frames)
    assert seeded.audio is None and seeded.audio_sample_rate is None and not pipe.capabilities.audio
    assert pipe("a red car", seed=11, decode_audio=False, progress=False, **SMALL).audio is None


@pytest.mark.parametrize("flag", ["--num-inference-steps", "--num-frames", "--height"])
def test_zero_on_embedded_default_is_an_error(flag, tmp_path):
    """The embedded default fills in only what was left out: a given 0 is refused, not replaced."""
    r = _vidax(
        "generate",
        "--prompt",
        "x",
        flag,
        "0",
        "--output",
        str(tmp_path / "v.npy"),
        "--no-progress",
        env_extra={"VIDAX_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{flag} must be a positive integer, got 0" in r.stderr  # the flag, not the Python keyword
    assert not (tmp_path / "v.npy").exists()


def test_inspect_lists_components(ckpt):
    r = _vidax("inspect", ckpt)
    assert r.returncode == 0, r.stderr
    for word in (
        "WanPipeline",
        "WanTransformer3DModel",
        "AutoencoderKLWan",
        "UMT5EncoderModel",
        "UniPCMultistepScheduler",
        "parameters",
        "float32",
    ):
        assert word in r.stdout
    assert "sound:" not in r.stdout  # only models that make sound say so


def test_generation_imports_no_torch(ckpt, tmp_path):
    code = f"""
import sys, vidax
pipe = vidax.load_pipeline({ckpt!r})
out = pipe("a cat", height=32, width=48, num_frames=5, num_inference_steps=1, progress=False)
from vidax.io.video import write_video
write_video(out.frames[0], {str(tmp_path / "v.mp4")!r})
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
        (dict(output_type="pandas"), "output_type must be 'np' or 'pil' or 'latent'"),
        (
            dict(latents=np.zeros((1, 16, 3, 4, 6), np.float32)),
            r"latents have shape \(1, 16, 3, 4, 6\), expected \(1, 16, 2, 4, 6\)",
        ),
        (dict(negative_prompt=["a", "b"]), "negative_prompt has 2 entries but prompt has 1"),
    ],
)
@pytest.mark.fast
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


@pytest.mark.fast
def test_unsupported_dtype(ckpt):
    with pytest.raises(InputError, match="dtype='float16' is not supported"):
        vidax.load_pipeline(ckpt, dtype="float16")
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--dtype", "float16")
    assert r.returncode == 2 and "--dtype 'float16' is not supported" in r.stderr
    assert "Traceback" not in r.stderr


def test_unwritable_output_fails_before_work(ckpt, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", str(tmp_path / "nope" / "v.mp4"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", str(tmp_path / "v.avi"))
    assert r.returncode == 2 and "unknown extension '.avi'" in r.stderr
    # The sound alone of a model without sound: one line naming --output, before any weight is
    # read (a tensor file that does not parse would fail the load).
    broken = _copy(ckpt, tmp_path)
    (broken / "transformer" / "diffusion_pytorch_model.safetensors").write_bytes(b"not a safetensors file")
    r = _vidax("generate", "--prompt", "x", "--checkpoint", str(broken), "--output", str(tmp_path / "v.wav"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: --output '{tmp_path / 'v.wav'}' writes the sound alone, but WanPipeline")
    assert "makes no sound" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    shutil.rmtree(broken)
    if os.geteuid() != 0:  # root can write into a 0500 folder
        locked.chmod(0o500)
        r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", str(locked / "v.mp4"))
        assert r.returncode == 2 and "not writable" in r.stderr
    # Not even root can create a file in /sys, though os.access says it may: checked by trying.
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, "--output", "/sys/v.mp4")
    assert r.returncode == 2 and "not writable" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "v.avi").exists()


def _copy(ckpt, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(ckpt, dst)
    return dst


@pytest.mark.fast
def test_missing_component(ckpt, tmp_path):
    dst = _copy(ckpt, tmp_path)
    shutil.rmtree(dst / "vae")
    with pytest.raises(CheckpointError, match="component folder vae/ is missing"):
        vidax.load_pipeline(str(dst))
    r = _vidax("generate", "--prompt", "x", "--checkpoint", str(dst))
    assert r.returncode == 2 and "vae/ is missing" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.fast
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

    for cls, sub in (
        (WanTransformer3DModel, "transformer"),
        (AutoencoderKLWan, "vae"),
        (UMT5EncoderModel, "text_encoder"),
    ):
        _, info = cls.from_pretrained(ckpt, subfolder=sub, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], (sub, info)


# ---------------------------------------------------------------------------------------------
# Image-to-video checkpoints: --image, the task from the checkpoint's configs, bad images.

# One frame keeps the image-to-video run quick: one VAE chunk to compile for encode and decode.
I2V_ARGS = (
    "--height",
    "32",
    "--width",
    "48",
    "--num-frames",
    "1",
    "--num-inference-steps",
    "2",
    "--max-sequence-length",
    "16",
    "--no-progress",
)


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    from tests.parity.wan_reference import write_tiny_wan_variant

    root = tmp_path_factory.mktemp("variants")
    return {
        "i2v": write_tiny_wan_variant(str(root / "i2v"), image_to_video=True),
        "a14b": write_tiny_wan_variant(str(root / "a14b"), boundary_ratio=0.875),
        "i2v_a14b": write_tiny_wan_variant(str(root / "i2v_a14b"), image_to_video=True, boundary_ratio=0.9),
        "ti2v": write_tiny_wan_variant(str(root / "ti2v"), ti2v=True),
    }


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    file = tmp_path_factory.mktemp("img") / "first.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(file)
    return str(file)


def test_generate_image_to_video(variants, image_file, tmp_path):
    """One frame (I2V_ARGS) written as a PNG image by -o *.png."""
    from PIL import Image

    out = tmp_path / "i2v.png"
    r = _vidax(
        "generate",
        "--prompt",
        "a cat",
        "--checkpoint",
        variants["i2v_a14b"],
        "--image",
        image_file,
        "--guidance-scale-2",
        "3",
        "--output",
        str(out),
        *I2V_ARGS,
        "-v",
    )
    assert r.returncode == 0, r.stderr
    assert "expert swap: transformer_2 now on the device" in r.stderr
    assert f"wrote {out} (1 frame of 32x48 (HxW), image)" in r.stderr
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size == (48, 32) and im.mode == "RGB" and np.asarray(im).std() > 0
    assert os.listdir(tmp_path) == ["i2v.png"]  # no temporary left


def _wan_lora_file(checkpoint: str, path, seed: int = 0) -> str:
    """A random rank-4 LoRA in the original (ComfyUI) layout on every block linear of the
    checkpoint's transformer, written to ``path``."""
    rng = np.random.default_rng(seed)
    reader = CheckpointReader(os.path.join(checkpoint, "transformer"))
    names = {"attn1.to_q": "self_attn.q", "attn2.to_v": "cross_attn.v", "ffn.net.2": "ffn.2"}
    sd = {}
    for key in reader.keys():
        block, i, rest = key.split(".", 2) if key.startswith("blocks.") else ("", "", "")
        module = rest.removesuffix(".weight")
        if block and module in names:
            o, n = reader.info(key).shape
            sd[f"diffusion_model.blocks.{i}.{names[module]}.lora_down.weight"] = rng.standard_normal((4, n)).astype(
                np.float32
            )
            sd[f"diffusion_model.blocks.{i}.{names[module]}.lora_up.weight"] = rng.standard_normal((o, 4)).astype(
                np.float32
            )
            sd[f"diffusion_model.blocks.{i}.{names[module]}.alpha"] = np.float32(8.0)
    save_safetensors(sd, str(path))
    return str(path)


def test_lora_scale_beyond_float32_refused_and_a_huge_one_named_when_the_run_overflows(pipe, ckpt, tmp_path):
    """A LoRA weight / scale that is not finite in float32 (the merge's) is refused in one line
    naming the keyword; a finite huge one (1e38 here; at 1e30 the tiny model's norms absorb it)
    makes the run go NaN/Inf, and that error names the adapter and its scale as the likely cause:
    in Python as the adapter, on the command line as --lora PATH:SCALE (the run stops at its first
    step, on the module's loaded pipeline)."""
    import typer

    from vidax.cli import Spelling, app
    from vidax.errors import NumericalError

    lora = _wan_lora_file(ckpt, tmp_path / "style.safetensors")
    pipe.load_lora_weights(lora, "style")
    try:
        for bad in (float("inf"), float("nan"), 1e39, np.float32("-inf")):
            with pytest.raises(
                InputError,
                match=r"^set_adapters: adapter_weights=.* is not a finite number \(at "
                r"most 3\.403e\+38 in magnitude, float32's largest",
            ):
                pipe.set_adapters("style", bad)
        with pytest.raises(InputError, match=r"^fuse_lora: lora_scale=1e\+39 must be a finite number \(at most"):
            pipe.fuse_lora(1e39)
        # each other kind of bad weight: one line naming the keyword, the value and what is valid
        valid = (
            r"give a finite number \(at most .*\), or a list of one per adapter \(1; None in it counts as 1\); vidax "
            r"does not take diffusers' dicts of per-module scales$"
        )
        for bad, shown in (
            (True, "True"),
            (1 + 0j, r"\(1\+0j\)"),
            ({"style": 0.5}, r"\{'style': 0\.5\}"),
            ([0.5, 1], r"\[0\.5, 1\]"),
        ):
            with pytest.raises(InputError, match=rf"^set_adapters: adapter_weights={shown} is not valid: {valid}"):
                pipe.set_adapters("style", bad)
        for bad in (10**400, [10**400], [1 + 0j]):
            with pytest.raises(InputError, match=r"^set_adapters: adapter_weights=.* is not a finite number \(at most"):
                pipe.set_adapters("style", bad)
        with pytest.raises(
            InputError,
            match=r"^fuse_lora: lora_scale=10000000000000000000\.\.\. \(401 characters\) "
            r"must be a finite number \(at most",
        ):
            pipe.fuse_lora(lora_scale=10**400)
        pipe.set_adapters(["style"], [None])  # diffusers' None: weight 1
        assert pipe.lora.active[0] == [("style", 1.0)]
        pipe.set_adapters("style", np.float32(1e38))
        with pytest.raises(NumericalError) as e:
            pipe("a cat", progress=False, **SMALL)
        assert "NaN/Inf" in str(e.value) and str(e.value).endswith(
            "; the large LoRA scale(s) in use may be the cause (they make the merged weights overflow): adapter "
            "'style' at 1e+38: try smaller ones"
        ), str(e.value)
        flags = Spelling(typer.main.get_command(app).commands["generate"])
        assert f"overflow): --lora '{lora}:1e+38': try smaller ones" in flags.message(e.value)
        # a usual scale is not blamed for a run that a huge guidance scale overflowed
        pipe.set_adapters("style", 0.01)
        with pytest.raises(NumericalError) as e:
            pipe("a cat", progress=False, guidance_scale=1e38, **SMALL)
        assert "guidance_scale=1e+38" in str(e.value) and "LoRA" not in str(e.value), str(e.value)
        # the command line echoes the value as typed (1e38, not Python's 1e+38), in either flag form
        generate = typer.main.get_command(app).commands["generate"]
        for argv in (["-p", "x", "--guidance-scale", "1e38"], ["-p", "x", "--guidance-scale=1e38"]):
            flags = Spelling(generate, generate.make_context("generate", argv).meta["argv"])
            assert "--guidance-scale 1e38: give a smaller one" in flags.message(e.value), flags.message(e.value)
    finally:
        pipe.unload_lora_weights()


def test_lora_flag_and_inspect(variants, tmp_path):
    """--lora PATH:SCALE goes on both Wan2.2 experts (the scale reaches set_adapters: see
    tests/test_lora.py for the merge itself); vidax inspect describes the file; a file
    with a stray key or a truncated one is refused in one line (the truncated one before loading)."""
    lora = _wan_lora_file(variants["a14b"], tmp_path / "style.safetensors")
    r = _vidax_here("inspect", lora)
    assert r.returncode == 0, r.stderr
    for line in (
        "layout: original (lora)",
        "family: wan (WanTransformer3DModel)",
        "rank: 4; alpha 8",
        "tensors: 18 keys, 6 modules",
        "blocks.*.self_attn.q",
    ):
        assert line in r.stdout, r.stdout
    args = ("generate", "--prompt", "a cat", "--checkpoint", variants["a14b"], *I2V_ARGS)
    styled = tmp_path / "styled.npy"
    r = _vidax(*args, "--lora", f"{lora}:0.5", "--output", str(styled), "-v")
    assert r.returncode == 0, r.stderr
    assert "LoRA lora_0 (original layout, rank [4], 18 keys) -> transformer, transformer_2" in r.stderr
    assert np.load(styled).shape == (1, 32, 48, 3)  # (what a LoRA does to the video: tests/test_lora.py)
    stray = tmp_path / "stray.safetensors"
    save_safetensors(
        {
            "diffusion_model.blocks.0.self_attn.x.lora_down.weight": np.zeros((4, 8), np.float32),
            "diffusion_model.blocks.0.self_attn.x.lora_up.weight": np.zeros((8, 4), np.float32),
        },
        str(stray),
    )
    truncated = tmp_path / "truncated.safetensors"
    shutil.copy(lora, truncated)
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) - 64)
    for bad, message in (
        (stray, "fit no parameter of transformer (wan)"),
        (truncated, "not a readable LoRA file"),
        (f"{lora}:x", "give PATH or PATH:SCALE"),
    ):
        r = _vidax_here(*args, "--lora", str(bad), "--output", str(tmp_path / "v.npy"))
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()[-1]) and r.stderr.count("error:") == 1
    assert "loading" not in r.stderr  # refused before the checkpoint is read


def test_image_arguments_refused_with_the_valid_choice(ckpt, variants, image_file, tmp_path):
    # An image-to-video checkpoint without --image; an image for a text-to-video-only one.
    for args, message in (
        (("--checkpoint", variants["i2v"]), "it does not do text-to-video: it needs an image (give --image)"),
        (
            ("--checkpoint", ckpt, "--image", image_file),
            "it does not do image-to-video: it takes no image (drop --image",
        ),
        (("--checkpoint", variants["a14b"], "--image", image_file), "Wan2.2 A14B T2V"),
        (("--checkpoint", ckpt, "--guidance-scale-2", "2"), "only used by checkpoints with two experts"),
    ):
        r = _vidax_here("generate", "--prompt", "x", *args, *I2V_ARGS, "--output", str(tmp_path / "v.mp4"))
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    # Unreadable and missing image files fail before any model is loaded.
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    for path, message in ((bad, "could not be read as an image"), (tmp_path / "none.png", "no such file")):
        r = _vidax_here(
            "generate",
            "--prompt",
            "x",
            "--checkpoint",
            variants["i2v"],
            "--image",
            str(path),
            *I2V_ARGS,
            "--output",
            str(tmp_path / "v.mp4"),
        )
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    # TI2V-5B (16x VAE, 2x2 patches): sizes must be multiples of 32, the message names them.
    r = _vidax_here(
        "generate",
        "--prompt",
        "x",
        "--checkpoint",
        variants["ti2v"],
        "--image",
        image_file,
        "--height",
        "48",
        "--width",
        "96",
        "--num-frames",
        "5",
        "--num-inference-steps",
        "1",
        "--output",
        str(tmp_path / "v.mp4"),
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--height and --width must be multiples of 32" in r.stderr and "--height in [32, 64]" in r.stderr
    assert not (tmp_path / "v.mp4").exists()


@pytest.mark.parametrize(
    "args, flag",
    [
        (("--true-cfg-scale", "2"), "--true-cfg-scale"),
        (("--frame-rate", "24"), "--frame-rate"),
        (("--decode-timestep", "0.05"), "--decode-timestep"),
        (("--stg-blocks", "abc"), "--stg-blocks"),  # not used here: said before its format
    ],
)
def test_family_flags_refused_by_a_pipeline_without_them(ckpt, args, flag, tmp_path):
    """A family's flag given to a checkpoint whose pipeline does not take it: one line naming the
    flag, before any weight is read."""
    r = _vidax("generate", "--prompt", "x", "--checkpoint", ckpt, *args, "--output", str(tmp_path / "v.mp4"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"WanPipeline ({ckpt}) does not use {flag}; its own flags: none beyond the common ones" in r.stderr, r.stderr
    assert not (tmp_path / "v.mp4").exists()


def test_unreadable_video_is_refused(ckpt, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_text("not a video")
    r = _vidax(
        "generate", "--prompt", "x", "--checkpoint", ckpt, "--video", str(bad), "--output", str(tmp_path / "v.mp4")
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--video" in r.stderr and "could not be read as a video" in r.stderr


def test_task_selection_in_the_api(ckpt, variants):
    from vidax.models.wan.pipeline import WanImageToVideoPipeline, WanPipeline

    with pytest.raises(InputError, match="it takes no image"):
        vidax.load_pipeline(ckpt, task="i2v")
    with pytest.raises(InputError, match="task='x2v' is not valid; use one of"):
        vidax.load_pipeline(ckpt, task="x2v")
    with pytest.raises(InputError, match="does not do video-to-video: it takes no video"):
        vidax.load_pipeline(ckpt, task="v2v")
    with pytest.raises(ConfigError, match="WanPipeline runs text-to-video"):
        WanPipeline.from_pretrained(variants["i2v"])
    pipe = vidax.load_pipeline(variants["i2v"])
    assert isinstance(pipe, WanImageToVideoPipeline)
    with pytest.raises(InputError, match="image is required"):
        pipe(None, "a cat", **SMALL)
    with pytest.raises(InputError, match="uint8"):
        pipe(np.zeros((8, 8, 3), np.float32), "a cat", **SMALL)
    # TI2V-5B does both: WanPipeline by default (as model_index.json says), I2V on request.
    assert type(vidax.load_pipeline(variants["ti2v"])) is WanPipeline
    assert type(vidax.load_pipeline(variants["ti2v"], task="i2v")) is WanImageToVideoPipeline


def test_inspect_names_task_and_variant(ckpt, variants):
    from vidax.cli.inspecting import describe_checkpoint

    assert "variant: Wan2.1 T2V: text-to-video" in describe_checkpoint(ckpt)
    assert "variant: Wan I2V (no image encoder): image-to-video" in describe_checkpoint(variants["i2v"])
    assert "variant: Wan2.2 A14B T2V (two experts, boundary_ratio=0.875): text-to-video" in describe_checkpoint(
        variants["a14b"]
    )
    assert "variant: Wan2.2 TI2V (per-token timesteps, 16x VAE): text-to-video + image-to-video" in describe_checkpoint(
        variants["ti2v"]
    )


WAN_VARIANTS = {
    "Wan-AI__Wan2.1-T2V-1.3B-Diffusers": "Wan2.1 T2V: text-to-video",
    "Wan-AI__Wan2.1-T2V-14B-Diffusers": "Wan2.1 T2V: text-to-video",
    "Wan-AI__Wan2.1-I2V-14B-480P-Diffusers": "Wan2.1 I2V (CLIP image encoder): image-to-video",
    "Wan-AI__Wan2.1-I2V-14B-720P-Diffusers": "Wan2.1 I2V (CLIP image encoder): image-to-video",
    "Wan-AI__Wan2.2-T2V-A14B-Diffusers": "Wan2.2 A14B T2V (two experts, boundary_ratio=0.875): text-to-video",
    "Wan-AI__Wan2.2-TI2V-5B-Diffusers": "Wan2.2 TI2V (per-token timesteps, 16x VAE): text-to-video + image-to-video",
}


def _wan_info(folder):
    from vidax.checkpoint import Checkpoint
    from vidax.models.wan.pipeline import WanPipeline

    return WanPipeline.family.read_checkpoint(Checkpoint.open(folder))


@pytest.mark.parametrize("repo", sorted(WAN_VARIANTS))
def test_released_wan_folders_recognised(repo):
    """Every released Wan pipeline folder's configs give its variant and task(s) (configs only)."""
    folder = os.path.join(REFERENCE_CONFIGS, repo)
    assert _wan_info(folder).variant == WAN_VARIANTS[repo]


def test_released_wan22_i2v_a14b_folder(tmp_path):
    """Wan2.2 I2V A14B: the converter's transformer config is recognised; the hub-edit variant
    that asks for CLIP features without an image encoder (which the reference cannot run
    either) is a clear ConfigError."""
    folder = os.path.join(REFERENCE_CONFIGS, "Wan-AI__Wan2.2-I2V-A14B-Diffusers")
    with pytest.raises(ConfigError, match="image_dim=1280 takes CLIP image features, but .* names no image_encoder"):
        _wan_info(folder)
    dst = tmp_path / "i2v_a14b"
    shutil.copytree(folder, dst)
    shutil.copy(dst / "transformer" / "config.converter_variant.json", dst / "transformer" / "config.json")
    info = _wan_info(str(dst))
    assert info.variant == "Wan2.2 A14B I2V (two experts, boundary_ratio=0.9): image-to-video"
    assert len(info.transformer_configs) == 2 and info.tasks == ("i2v",)


def test_version():
    r = _vidax("--version")
    assert r.returncode == 0 and r.stdout.startswith(f"vidax {vidax.__version__} (jax "), r.stdout


def test_absent_jax_platform_is_one_line(ckpt, tmp_path):
    """JAX_PLATFORMS naming a backend this CPU machine lacks (hardware, plugin, or a typo): one
    line naming it, its value and the backends there are, exit 2, for --version and generate;
    the Python API raises SetupError; inspect needs no backend and works."""
    for value, cmd in (
        ("tpu", ("--version",)),
        ("cpux", ("generate", "-p", "x", "--checkpoint", ckpt, "-o", str(tmp_path / "v.npy"))),
    ):
        r = _vidax(*cmd, env_extra=dict(JAX_PLATFORMS=value))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith(f"error: JAX_PLATFORMS='{value}' names a backend JAX cannot start here ("), r.stderr
        assert "this machine has: cpu; set JAX_PLATFORMS to one of them" in r.stderr, r.stderr
    code = (
        "import vidax\ntry:\n    vidax.load_pipeline(%r)\nexcept vidax.errors.SetupError as e:\n"
        "    print('SetupError', e)" % ckpt
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cuda"),
    )
    assert r.stdout.startswith("SetupError JAX_PLATFORMS='cuda' names a backend"), r.stdout + r.stderr
    r = _vidax("inspect", ckpt, env_extra=dict(JAX_PLATFORMS="cuda"))
    assert r.returncode == 0 and "transformer/" in r.stdout, r.stderr


@pytest.mark.fast
def test_errors_name_arguments_as_data():
    """An error names its arguments as data (:class:`vidax.errors.Arg`): Python reads the keyword
    (``name=value``, a hint ``name=``), a front end spells each as its flag, with no stray space
    after a hint without a value."""
    from vidax.errors import Arg, InputError

    e = InputError(
        Arg("image", keyword=True),
        " and ",
        Arg("video", keyword=True),
        " are both given; give ",
        Arg("image", keyword=True),
        " (image2world); ",
        Arg("num_inference_steps", 0),
        " is bad; ",
        Arg("dtype", "int8"),
        ", ",
        Arg("memory_check", python="pipe.memory_check = False"),
    )
    assert str(e) == (
        "image= and video= are both given; give image= (image2world); num_inference_steps=0 is bad; "
        "dtype='int8', pipe.memory_check = False"
    )
    assert e.arguments == ("image", "video", "image", "num_inference_steps", "dtype", "memory_check")
    flags = {
        "image": "--image",
        "video": "--video",
        "num_inference_steps": "--num-inference-steps",
        "memory_check": "--no-memory-check",
    }
    assert e.render(lambda a: a.spelled(flags[a.name]) if a.name in flags else str(a)) == (
        "--image and --video are both given; give --image (image2world); --num-inference-steps 0 is bad; "
        "dtype='int8', --no-memory-check"
    )


#: SIGINT moments (seconds after the start; two: twice in a row) from vidax's first instruction
#: through typer's imports, JAX's (whose gc callback swallowed a KeyboardInterrupt), the flags and
#: the checks to the loading; the run's later checks: test_ctrl_c_during_exit_is_one_line and
#: tests/test_call_checks.py.
SIGINT_AT = [(0.1,), (0.15, 0.2), (0.25,), (0.4,), (0.6,), (0.9,), (1.3,), (1.0, 1.05), (2.0,), (2.0, 2.05)]


def _generate_process(ckpt, out):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vidax",
            "generate",
            "-p",
            "a cat",
            "--checkpoint",
            ckpt,
            *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()),
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=os.path.dirname(out),
    )


def _one_interrupted_line(err: str, code: int):
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("interrupted")]
    assert code == 130 and len(lines) == 1, (code, err)
    assert not any(w in err for w in ("Traceback", "KeyboardInterrupt", "Exception ignored")), err


def test_ctrl_c_at_any_moment_is_one_line(ckpt, tmp_path):
    """SIGINT (default disposition, as a terminal sends it) to ``python -m vidax generate`` at
    staggered moments of its start-up, once or twice in a row: every run ends with exit 130, one
    line ``interrupted (SIGINT) ...`` and no traceback, and writes nothing."""
    import signal
    import time

    done = []
    for i, moments in enumerate(SIGINT_AT):
        if moments[0] < 0.5 and done:  # Python's own start-up (before vidax's first instruction) unhurried
            done[-1].wait(timeout=300)
        proc, started = _generate_process(ckpt, tmp_path / f"v{i}.npy"), time.monotonic()
        for moment in moments:
            time.sleep(max(0.0, started + moment - time.monotonic()))
            proc.send_signal(signal.SIGINT)
        done.append(proc)
    for proc in done:
        _, err = proc.communicate(timeout=300)
        _one_interrupted_line(err.decode(errors="replace"), proc.returncode)
    assert not os.listdir(tmp_path)


def test_ctrl_c_during_exit_is_one_line(ckpt, tmp_path):
    """SIGINT once the run is under way (loading), then again and again after its ``interrupted``
    line, while Python tears down (JAX's atexit clean-up): still exit 130 and the one line."""
    import signal
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vidax",
            "generate",
            "-p",
            "a cat",
            "--checkpoint",
            ckpt,
            *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()),
            "-o",
            str(tmp_path / "v.npy"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    seen, sent = b"", 0
    while b"loading " not in seen:  # the status line while the weights load
        chunk = proc.stderr.read1(4096)
        assert chunk, seen.decode(errors="replace")
        seen += chunk
    proc.send_signal(signal.SIGINT)
    while b"\ninterrupted" not in seen.replace(b"\r", b"\n"):
        seen += proc.stderr.read1(4096)
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        sent += 1
        time.sleep(0.002)
    err = (seen + proc.stderr.read()).decode(errors="replace")
    _one_interrupted_line(err, proc.returncode)
    assert sent > 1 and not os.listdir(tmp_path), sent


def test_keyboard_interrupt_lost_in_a_callback_ends_the_command():
    """A KeyboardInterrupt raised inside a callback, which Python reports as unraisable and
    ignores (as JAX's gc callback did), ends the ``vidax`` command as a SIGINT does."""
    code = (
        "from vidax.interrupt import Stop\nStop().install()\nimport gc\n"
        "class Lost:\n    def __del__(self):\n        raise KeyboardInterrupt\n"
        "Lost()\ngc.collect()\nprint('ran on')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        130,
        "",
        "interrupted (SIGINT) before the run started; nothing was written\n",
    )
    scripts = __import__("tomllib").loads(open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")).read())
    assert scripts["project"]["scripts"]["vidax"] == "vidax.__main__:run"  # the command installs it first


def test_signal_at_the_end_of_teardown_keeps_the_exit_status():
    """After the last atexit function (where CPython gives the signals back to their default
    action) a SIGINT no longer decides the exit status: a run that succeeded exits 0 (trial 8:
    a signal 0.2-0.5 s after the summary gave -2)."""
    code = (
        "import atexit, os, signal\nfrom vidax.interrupt import Stop\nstop = Stop()\nstop.install()\n"
        "stop.exiting(0)\natexit._run_exitfuncs()\nos.kill(os.getpid(), signal.SIGINT)\nprint('exited 0')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "exited 0\n", "")


def test_cache_flag(ckpt, tmp_path):
    """--cache first_block:THRESHOLD runs First-Block Cache and the summary says what it skipped;
    bad values are one line naming --cache, before any weight is read."""
    from typer.testing import CliRunner

    from vidax.cli import app

    base = [
        "generate",
        "--checkpoint",
        ckpt,
        "--prompt",
        "a red car",
        "--height",
        "48",
        "--width",
        "48",
        "--num-frames",
        "9",
        "--num-inference-steps",
        "6",
        "--max-sequence-length",
        "16",
        "--no-progress",
    ]
    out = tmp_path / "v.npy"
    r = CliRunner().invoke(app, base + ["--cache", "first_block:2.0", "--output", str(out)])
    assert r.exit_code == 0, r.output
    # A threshold of 2: every step after the first skips the second block of both branches.
    assert "first_block threshold=2: 14 of 24 block evaluations run, 10 skipped" in r.output, r.output
    assert "cond CSSSSS, uncond CSSSSS" in r.output and out.exists()
    from vidax.pipelines.step_cache import MagCacheConfig, TaylorSeerCacheConfig, parse_cache_option

    # A calibration run's stdout is the list alone (`--cache mag > ratios.txt` saves what
    # --cache mag:FILE reads back); what it is, the "wrote" line and the summary are on stderr.
    r = CliRunner().invoke(app, base + ["--cache", "mag", "--output", str(tmp_path / "c.npy")])
    assert r.exit_code == 0, r.output
    assert r.stdout.count("\n") == 1 and r.stdout.startswith("["), r.stdout
    assert "MagCache calibration (6 steps, the conditional pass)" in r.stderr and "wrote " in r.stderr
    (tmp_path / "calibrated.txt").write_text(r.stdout)
    assert parse_cache_option(f"mag:{tmp_path / 'calibrated.txt'}", 6).mag_ratios == json.loads(r.stdout)

    ratios = tmp_path / "ratios.txt"
    ratios.write_text("1.0 0.9, 1.1\n1.0 0.9 1.1")
    (tmp_path / "ratios.json").write_text("[1.0, 0.9, 1.1, 1.0, 0.9, 1.1]")
    for value in (
        f"mag:{tmp_path / 'ratios.txt'}",
        f"mag:{tmp_path / 'ratios.json'}",
        "mag:[1.0, 0.9, 1.1, 1.0, 0.9, 1.1]",
    ):
        config = parse_cache_option(value, 6)
        assert config == MagCacheConfig(num_inference_steps=6, mag_ratios=[1.0, 0.9, 1.1] * 2)
    (tmp_path / "short.txt").write_text("1.0 0.9 1.1")
    (tmp_path / "negative.txt").write_text("1.0 0.9 1.1 1.0 -0.9 1.1")
    (tmp_path / "nested.json").write_text("[[1.0, 0.9]" + ", [1.1, 1.0]" * 5 + "]")
    assert parse_cache_option("mag", 6) == MagCacheConfig(num_inference_steps=6, calibrate=True)
    assert parse_cache_option("taylorseer", 6) == TaylorSeerCacheConfig(use_lite_mode=True)
    for value, message in (
        ("first_block:-1", "--cache first_block:-1: THRESHOLD must be a finite number >= 0, got -1"),
        ("mag:" + str(tmp_path / "none.txt"), "cannot read the ratios file"),
        ("magic", "valid values are first_block:THRESHOLD, mag[:RATIOS_FILE] or taylorseer"),
        # ratios for another number of steps: refused before any weight is read
        (
            "mag:" + str(tmp_path / "short.txt"),
            "holds 3 ratios, the call has 6 steps; give one per step (calibrate with --cache mag at 6 steps)",
        ),
        (
            "mag:" + str(tmp_path / "negative.txt"),
            f"--cache mag:{tmp_path / 'negative.txt'}: "
            f"{tmp_path / 'negative.txt'} must hold a flat list of finite numbers >= 0 (ratios of "
            "residual norms, one per step): a JSON list, or numbers separated by spaces or commas, "
            "as --cache mag prints them; entry 4 is -0.9, below 0",
        ),
        # a nested list (of the right length): the file and what it must hold, not mag_ratios=
        (
            "mag:" + str(tmp_path / "nested.json"),
            f"--cache mag:{tmp_path / 'nested.json'}: "
            f"{tmp_path / 'nested.json'} must hold a flat list of finite numbers >= 0",
        ),
        ("mag:" + str(tmp_path / "nested.json"), "; entry 0 is [1.0, 0.9], not a number"),
    ):
        r = CliRunner().invoke(app, base + ["--cache", value, "--output", str(tmp_path / "w.npy")])
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
        assert not (tmp_path / "w.npy").exists()


def test_cache_mag_file_is_read_as_text_or_refused_in_one_line(tmp_path):
    """--cache mag:FILE (no weights needed): a binary file is one line (was a UnicodeDecodeError
    traceback), a UTF-8 file with a byte-order mark (as some editors save) is read, and 'mag:'
    with no file name is refused (it silently ran a calibration)."""
    from vidax.errors import InputError
    from vidax.pipelines.step_cache import MagCacheConfig, parse_cache_option

    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf[1.0, 0.9, 1.1]\n")
    assert parse_cache_option(f"mag:{bom}", 3) == MagCacheConfig(num_inference_steps=3, mag_ratios=[1.0, 0.9, 1.1])
    binary = tmp_path / "ratios.bin"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(InputError) as e:
        parse_cache_option(f"mag:{binary}", 3)
    assert str(e.value) == (
        f"--cache mag:{binary}: the ratios file '{binary}' is not UTF-8 text; it must hold a flat "
        "list of finite numbers >= 0 (ratios of residual norms, one per step) as a JSON list or "
        "numbers separated by spaces or commas"
    )
    for value in ("mag:", "mag: "):
        with pytest.raises(
            InputError,
            match=r"^--cache (mag:|'mag: '): nothing after 'mag:'; give the ratios "
            r"\(mag:\[r1, r2, \.\.\.\] or mag:FILE\), or 'mag' alone to calibrate$",
        ):
            parse_cache_option(value, 3)
    with pytest.raises(
        InputError,
        match=r"^cache='mag:': nothing after 'mag:'; give the ratios \(mag:\[r1, r2, "
        r"\.\.\.\]\), or 'mag' alone",
    ):
        parse_cache_option("mag:", 3, name="cache", files=False)


def test_output_never_replaces_an_input_file(variants, image_file, tmp_path):
    """-o naming an input file (--image here; --video / --lora / --transformer alike) is one line
    naming both flags and the path, with or without --overwrite, and the input is kept."""
    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.io.clobber import check_inputs_kept

    image = tmp_path / "in.npy"  # PIL reads an image whatever its name; .npy is a valid --output
    shutil.copy(image_file, image)
    before = image.read_bytes()
    for extra in ([], ["--overwrite"]):
        r = CliRunner().invoke(
            app,
            [
                "generate",
                "-p",
                "x",
                "--checkpoint",
                variants["i2v"],
                "--image",
                str(image),
                "-o",
                str(image),
                *I2V_ARGS,
                *extra,
            ],
        )
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.output.strip() == (
            f"error: --output '{image}' is the same file as --image '{image}'; writing it would "
            "destroy that input (with or without --overwrite); give another output name"
        )
        assert image.read_bytes() == before
    # The same for an image output of one frame (-o in.png with --image in.png).
    png = tmp_path / "in.png"
    shutil.copy(image_file, png)
    before = png.read_bytes()
    r = CliRunner().invoke(
        app, ["generate", "-p", "x", "--checkpoint", variants["i2v"], "--image", str(png), "-o", str(png), *I2V_ARGS]
    )
    assert r.exit_code == 2 and r.output.strip().startswith(f"error: --output '{png}' is the same file as --image"), (
        r.output
    )
    assert png.read_bytes() == before
    # A link to the input, and the .wav a sounding .npy output writes beside it.
    link = tmp_path / "link.npy"
    link.symlink_to(image)
    with pytest.raises(InputError, match="is the same file as lora="):
        check_inputs_kept([str(link)], [("lora", str(image))])
    wav = tmp_path / "in.wav"
    wav.write_bytes(b"x")
    with pytest.raises(InputError, match=r"writes '.*in.wav' beside it, the same file as video="):
        check_inputs_kept([str(image)], [("video", str(wav))], audio=True)
    check_inputs_kept([str(image)], [("video", str(wav))], audio=False)  # no sound: no .wav written


@pytest.mark.fast
def test_number_flags_are_read_by_one_rule(tmp_path):
    """Every number flag is read by one rule (vidax.errors.typed_number): a number of integral
    value (16.0, 1e3) is an integer; any other text (2.50, 1e99 past int64, 0x10, Python's 1_0,
    nan, text) is one error line naming the flag, what is valid and the text as typed (not
    typer's usage error showing no value), before any checkpoint is read (there is none here).
    A range checked later (--fps) still echoes the text as typed."""
    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.errors import MAX_TYPED_INT, typed_number

    def run(*flags, command="generate"):
        base = ["-p", "a cat", "-o", str(tmp_path / "v.npy")] if command == "generate" else []
        r = CliRunner().invoke(app, [command, "--checkpoint", str(tmp_path / "none"), *base, *flags])
        return r, [line for line in r.stderr.splitlines() if line.strip()]

    positive, fps = "a positive integer", "an integer frame rate in [1, 1000] fps"
    guidance = "a finite number >= 0 (at most 3.403e+38, float32's largest)"
    for flag, value, valid in (
        ("--num-inference-steps", "2.50", positive),
        ("--seed", "0x10", "an integer in [0, 4294967295]"),
        ("--seed", "1e99", "an integer in [0, 4294967295]"),
        ("--seed", "nan", "an integer in [0, 4294967295]"),
        ("--num-frames", "1e999", f"{positive} (at most {MAX_TYPED_INT} in magnitude)"),
        ("--max-sequence-length", "1e39", f"{positive} (at most {MAX_TYPED_INT} in magnitude)"),
        ("--height", "1_0", positive),
        ("--width", "inf", positive),
        ("--dp", "1.5", "an integer"),
        ("--num-processes", "two", "an integer"),
        ("--fps", "2.5", fps),
        ("--fps", "0", fps),
        ("--fps", "1e4", fps),
        ("--fps", "1e30", fps),
        ("--guidance-scale", "1_0", guidance),
        ("--guidance-scale", "0x10", guidance),
        ("--distributed-timeout", "1_0", "a number"),
    ):
        for flags in ([flag, value], [f"{flag}={value}"]):
            r, lines = run(*flags)
            assert r.exit_code == 2 and lines == [f"error: {flag} must be {valid}, got {value}"], (flags, r.output)
    r, lines = run("--port", "80.5", command="serve")
    assert r.exit_code == 2 and lines == ["error: --port must be an integer, got 80.5"], r.output
    r, lines = run("--port", "7e4", command="serve")  # serve's own range check echoes the text too
    assert r.exit_code == 2 and lines == ["error: --port must be in [0, 65535], got 7e4"], r.output
    # Integral numbers are accepted as ints: on to the checkpoint, which is not there.
    r, lines = run("--num-frames", "9.0", "--seed=1e3", "--fps", "16.0", "--height", "3.2e1", "--guidance-scale", "5")
    assert r.exit_code == 2 and len(lines) == 1 and "none" in lines[0] and "must be" not in lines[0], r.output
    for text, integer, number in (
        ("16.0", True, 16),
        ("1e3", True, 1000),
        ("-2E0", True, -2),
        (" 7 ", True, 7),
        ("2.50", True, None),
        ("1_0", True, None),
        ("nan", True, None),
        ("1e99", True, float("inf")),
        ("1_0", False, None),
        ("0x10", False, None),
        ("\u0661", False, None),
        ("2.50", False, 2.5),
        ("-Infinity", False, float("-inf")),
        (".5e1", False, 5.0),
    ):
        got = typed_number(text, integer=integer)
        assert got == number and type(got) is type(number), (text, integer, got)


def test_verbose_help_says_what_it_shows():
    """--verbose's help on generate and serve says it shows the INFO log lines and which: a user
    looking for the GGUF densify bytes or the oneDNN build finds the flag (trial: they were hidden)."""
    import typer

    from vidax.cli import app

    commands = typer.main.get_command(app).commands
    for command in ("generate", "serve"):
        verbose = next(p for p in commands[command].params if p.name == "verbose")
        assert verbose.opts == ["--verbose", "-v"] and verbose.help.startswith("Show the INFO log lines on stderr")
        for shown in ("GGUF densif", "oneDNN CPU matmul build", "compile cache folder", "attention implementation"):
            assert shown in verbose.help, (command, verbose.help)


def test_sound_drift_warning_blames_only_a_given_fps():
    """LTX-2 at its own 24 fps: 9 frames (0.38 s) and whole audio latents of sound (0.33 s) are
    the model's own rounding, not an --fps; only an --fps the user gave is named."""
    from vidax.cli.generating import drift_warning

    assert drift_warning(9 / 24, 0.33, 24, fps_given=False) is None
    assert drift_warning(9 / 24, 0.37, 12, fps_given=True) is None  # within a frame
    assert drift_warning(5 / 16, 0.625, 16, fps_given=True) == (
        "warning: at --fps 16 the video lasts 0.31 s but its sound 0.62 s; they drift apart (leave --fps out for "
        "the model's frame rate)"
    )


def test_joined_flag_helps_read_as_one_text():
    """A keyword several families declare: one generic sentence, each family's parenthetical
    joined, nothing repeated (--video once said "Video to condition on (...). No safety checker
    runs." four times over)."""
    from vidax.cli import call_options
    from vidax.pipelines.option_help import join_helps

    assert join_helps(
        [
            "Video to condition on (A continues its last frames). No safety checker runs (A's "
            "reference requires a guardrail).",
            "Video to condition on (B keeps its first frames). No safety checker runs.",
            "Video to condition on (C: from frame_index on).",
        ]
    ) == (
        "Video to condition on (A continues its last frames; B keeps its first frames; C: from frame_index on). "
        "No safety checker runs (A's reference requires a guardrail)."
    )
    options = call_options()
    for name in ("video", "frame_rate", "image"):
        text = options[name].help
        sentences = [s for s in text.split(". ") if s]
        assert len(sentences) == len(set(sentences)) and text.count("No safety checker runs") <= 1, text
    assert options["video"].help.startswith("Video to condition on (") and "HunyuanVideo 1.5" in options["image"].help


def test_a_flag_whose_families_differ_in_default_says_each_default():
    """--guidance-rescale is 0 on LTX-Video, 0.7 on LTX-2: no single "[default: 0]" (one family's)
    but each family's default in the joined help; the LTX-2 sound scales fall back only at 0
    (unset is their own default)."""
    from vidax.cli import call_options, declared_params
    from vidax.registry import registry

    options = call_options()
    defaults: dict[str, set] = {}
    for spec in registry().pipelines():
        for o in spec.load().family.call_options:
            if o.is_flag:
                defaults.setdefault(o.name, set()).add(o.default)
    differ = [name for name, d in defaults.items() if len(d) > 1]
    assert "guidance_rescale" in differ and "frame_rate" in differ
    for name in differ:
        assert options[name].default == "", name
        assert all(f"default {d}" in options[name].help for d in defaults[name]), options[name].help
    help_of = {p.name: p.help for p in declared_params(options.values())}
    assert (
        "[default:" not in help_of["guidance_rescale"]
        and "LTX-2: of the video, default 0.7" in help_of["guidance_rescale"]
    )
    for name, fallback in (
        ("audio_guidance_scale", "guidance_scale"),
        ("audio_stg_scale", "stg_scale"),
        ("audio_modality_scale", "modality_scale"),
        ("audio_guidance_rescale", "guidance_rescale"),
    ):
        assert f"(LTX-2); 0: {fallback}." in help_of[name] and "unset" not in help_of[name], help_of[name]


def test_latents_past_what_the_vae_decodes_are_an_error_and_kept(pipe, ckpt, tmp_path):
    """guidance_scale=1e30 on Wan: the final latents reach ~1e27, the VAE's float32 norms overflow
    and the decode was a finite, flat 0.5 grey video written with exit 0. Now: one error line
    naming the peak and the guidance scale, the latents kept (as output_type="latent"), no video."""
    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.errors import NumericalError
    from vidax.pipelines.base import MAX_DECODE_LATENT

    with pytest.raises(NumericalError, match=r"the likely cause is guidance_scale=1e\+30") as e:
        pipe("a red car", guidance_scale=1e30, seed=0, progress=False, **SMALL)
    latent = pipe("a red car", guidance_scale=1e30, seed=0, progress=False, output_type="latent", **SMALL).frames
    np.testing.assert_array_equal(e.value.latents, latent)
    assert np.abs(latent).max() > MAX_DECODE_LATENT
    out = tmp_path / "v.mp4"
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "a red car",
            "--checkpoint",
            ckpt,
            "-o",
            str(out),
            "--no-progress",
            "--guidance-scale",
            "1e30",
            "--seed",
            "0",
            *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()),
        ],
    )
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    kept = tmp_path / "v-latents.unwritten.npy"
    assert "the likely cause is --guidance-scale 1e30" in lines[0] and f"kept in {kept}" in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == [kept.name]
    np.testing.assert_array_equal(np.load(kept), latent)


def test_lora_on_streamed_gguf_transformer_refused_before_loading(tmp_path):
    """--lora with a .gguf --transformer and --offload-blocks: the merge refuses GGUF blocks that
    are streamed, so the CLI refuses the combination in one line before the checkpoint (or the
    file) is read (trial 4: it came after loading, as a repeated per-key line)."""
    from typer.testing import CliRunner

    from vidax.cli import app

    lora = tmp_path / "l.safetensors"
    save_safetensors(
        {
            "transformer.blocks.0.attn1.to_q.lora_A.weight": np.ones((2, 8), np.float32),
            "transformer.blocks.0.attn1.to_q.lora_B.weight": np.ones((8, 2), np.float32),
        },
        str(lora),
    )
    base = [
        "generate",
        "-p",
        "x",
        "--checkpoint",
        str(tmp_path / "missing"),
        "--transformer",
        str(tmp_path / "missing.gguf"),
        "--lora",
        f"{lora}:0.5",
        "-o",
        str(tmp_path / "o.npy"),
    ]
    r = CliRunner().invoke(app, base + ["--offload-blocks", "1"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "--lora" in r.stderr and "--offload-blocks" in r.stderr and "--weights int8" in r.stderr, r.stderr
    r = CliRunner().invoke(app, base)  # without streaming the combination is fine: the next error is the path's
    assert "--offload-blocks" not in r.stderr, r.stderr


def test_generate_reads_the_checkpoint_configs_once(ckpt, tmp_path, monkeypatch):
    """`vidax generate` builds one plan before loading: the family's read_checkpoint runs once
    (task, call check, mesh, memory estimate and the load all use that plan's configs); so does
    vidax.load_pipeline with a task."""
    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.models.wan.pipeline import WanPipeline

    reads = []
    read = WanPipeline.family.read_checkpoint.__func__

    def counted(cls, checkpoint):
        reads.append(cls.pipeline_name)
        return read(cls, checkpoint)

    monkeypatch.setattr(WanPipeline.family, "read_checkpoint", classmethod(counted))
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "--checkpoint",
            ckpt,
            "--prompt",
            "a red car",
            "--height",
            "32",
            "--width",
            "48",
            "--num-frames",
            "5",
            "--num-inference-steps",
            "1",
            "--max-sequence-length",
            "16",
            "--no-progress",
            "--output",
            str(tmp_path / "v.npy"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert reads == ["WanPipeline"]
    reads.clear()
    vidax.load_pipeline(ckpt, task="t2v", progress=False)  # the task's class from the configs read once too
    assert reads == ["WanPipeline"]


def _cli_run(*args):
    """``vidax generate`` / ``serve`` run in-process: click's result (exit_code, stderr, output)."""
    from typer.testing import CliRunner

    from vidax.cli import app

    return CliRunner().invoke(app, list(args))


def test_file_errors_name_the_flag_that_gave_the_file(ckpt, tmp_path):
    """A file that is not what its flag takes (a .gguf that is no GGUF file given to --transformer)
    and a --checkpoint path that does not exist with --random-weights: the error names the flag
    and the value as typed, not the path alone."""
    bad = tmp_path / "notalora.gguf"
    bad.write_bytes(b"GGUFxxxxxxxxxxxx")
    r = _cli_run("generate", "-p", "x", "--checkpoint", ckpt, "--transformer", str(bad), "-o", str(tmp_path / "o.npy"))
    assert r.exit_code == 2 and f"error: --transformer '{bad}' is not a readable GGUF file" in r.stderr, r.output
    r = _cli_run("generate", "-p", "x", "--random-weights", "--checkpoint", "nomi", "-o", str(tmp_path / "o.npy"))
    assert r.exit_code == 2 and "error: --checkpoint 'nomi': no such folder" in r.stderr, r.output


def test_a_bad_flag_is_the_error_alone_without_the_default_output_line(ckpt, tmp_path, monkeypatch):
    """--cache '' in a folder holding an earlier run's vidax-output.mp4: the one error line, its
    empty value quoted; the line about writing vidax-output-1.mp4 comes only once every flag is
    checked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vidax-output.mp4").write_bytes(b"an earlier run")
    r = _cli_run("generate", "-p", "x", "--checkpoint", ckpt, "--cache", "")
    assert (
        r.exit_code == 2 and r.stderr.startswith("error: --cache '': valid values are") and r.stderr.count("\n") == 1
    ), r.output


def test_cli_errors_speak_cli(tmp_path):
    """A CLI error names flags and values as typed, never a Python value or class: a missing
    --num-processes is not echoed as 'None', a bad --cache threshold names THRESHOLD, not
    FirstBlockCacheConfig."""
    r = _cli_run("generate", "-p", "x", "--coordinator", "h:1", "--process-id", "0", "-o", str(tmp_path / "o.npy"))
    assert r.exit_code == 2 and "(got --coordinator 'h:1', --process-id 0)" in r.stderr, r.output
    r = _cli_run("generate", "-p", "x", "--cache", "first_block:-1", "-o", str(tmp_path / "o.npy"))
    assert r.exit_code == 2 and "error: --cache first_block:-1: THRESHOLD must be a finite number >= 0" in r.stderr


def test_help_shows_each_flags_metavar():
    """--help shows a value's placeholder as the field's metavar (--prompt PROMPT, --lora
    PATH[:SCALE], --stg-blocks N[,N]), not the Python type (<str>, <list[str]>)."""
    import re

    generate = _cli_run("generate", "--help").output
    serve = _cli_run("serve", "--help").output
    for shown in (generate, serve):
        assert not re.search(r"<(str|int|float|list\[str\])>", shown), shown
    for want in (
        "--prompt PROMPT",
        "--lora PATH[:SCALE]",
        "--stg-blocks N[,N]",
        "--image FILE",
        "--num-frames NUM_FRAMES",
    ):
        assert want in generate, want
    assert "--host HOST" in serve and "--jobs-dir FOLDER" in serve
