"""Call arguments refused before any work, output errors, size limits, non-finite values, and
the CLI's wording of them (issue 11). In-process CLI runs (``typer.testing.CliRunner``) on the
embedded tiny checkpoint at small sizes."""

import json
import os
import re
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from vidax.cli import app
from vidax.errors import CheckpointError, ConfigError, InputError, NumericalError
from vidax.pipelines.memory import check_memory

SMALL = dict(height=32, width=48, num_frames=5, num_inference_steps=2, max_sequence_length=16)
#: A frame file of an "earlier run": a PNG by its signature (vidax replaces nothing else).
OLD_FRAME = b"\x89PNG\r\n\x1a\nold"
SMALL_FLAGS = [
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
    "--no-progress",
]


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
    from vidax.checkpoint import Checkpoint
    from vidax.pipelines.loading import pipeline_class

    ckpt = Checkpoint.open(broken)
    cls = pipeline_class(ckpt, task="t2v")
    info = cls.family.read_checkpoint(ckpt)
    with pytest.raises(InputError, match="height=100"):
        cls.check_call(info, "a cat", height=100)
    call = cls.check_call(info, "a cat", **SMALL)  # a good call is checked without weights too
    assert (call.height, call.width, call.num_frames) == (32, 48, 5)


# --------------------------------------------------------------------------- item 4: outputs
def test_unusable_output_refused_up_front(ckpt, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for output, message in (
        ("", "is empty"),
        (str(afile / "v.mp4"), f"{str(afile)!r} is a file, not a folder"),
        (str(afile / "sub" / "v.mp4"), f"{str(afile)!r} is a file, not a folder"),
    ):
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

    def full_disk(frames, path, fps, audio=None, sample_rate=None):
        assert audio is None  # a model without sound: a silent mp4
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
@pytest.mark.parametrize(
    "args, message, python_name",
    [
        (
            ["--num-inference-steps", "0"],
            "--num-inference-steps must be a positive integer, got 0",
            "num_inference_steps",
        ),
        (
            ["--guidance-scale", "-1"],
            "--guidance-scale must be a finite number >= 0 (at most 3.403e+38, float32's largest), got -1",
            "guidance_scale",
        ),
        # the value as typed after the flag (1e39, not Python's 1e+39; -0.5E1, not -5.0; NaN, not nan)
        (
            ["--guidance-scale=1e39"],
            "--guidance-scale must be a finite number >= 0 (at most 3.403e+38, float32's largest), got 1e39",
            "guidance_scale",
        ),
        (["--guidance-scale", "-0.5E1"], "float32's largest), got -0.5E1", "guidance_scale"),
        (["--guidance-scale", "NaN"], "float32's largest), got NaN", "guidance_scale"),
        (
            ["--distributed-timeout", "-1"],
            "--distributed-timeout -1 must be a finite number of seconds > 0",
            "timeout_s",
        ),
        (["--height", "40"], "--height and --width must be multiples of 16", "height="),
        (["--width", "50"], "got --height 96, --width 50; nearest valid: --width in [48, 64]", "width="),
        (
            ["--guidance-scale-2", "2"],
            "--guidance-scale-2 2 is only used by checkpoints with two experts",
            "guidance_scale_2",
        ),
        (["--max-sequence-length", "0"], "--max-sequence-length must be a positive integer", "max_sequence"),
        (["--dtype", "float16"], "--dtype 'float16' is not supported", "dtype="),
        (["-p", ""], "--prompt is empty ('')", "prompt is"),
        (["-p", "  "], "--prompt is empty ('  ')", "prompt is"),
        (["--tp", "-1"], "--tp -1 is not valid: each mesh axis size must be a positive integer", "tp="),
        (["--dp", "0"], "--dp 0 is not valid: each mesh axis size must be a positive integer", "dp="),
        (["--dtype", "int8"], "--dtype 'int8' is not supported; use float32 or bfloat16 (or fp32, bf16)", "dtype="),
    ],
)
def test_cli_errors_name_flags(ckpt, tmp_path, args, message, python_name):
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(tmp_path / "v.npy"), "--no-progress", *args)
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and message in lines[0], r.output
    assert not re.search(r"(?<![-\w])" + re.escape(python_name), lines[0])  # no Python keyword left
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt=""), r"^prompt is empty \(''\); describe the video$"),
        (dict(prompt=None), "^prompt is required"),
        (dict(prompt=["a cat", " "]), r"^prompt is empty \(\['a cat', ' '\]\)"),
        (dict(prompt="a cat", num_inference_steps=0), "^num_inference_steps must be a positive integer, got 0"),
        (dict(prompt="a cat", height=40), "^height and width must be multiples of 16 .* got height=40, width=48"),
    ],
)
def test_api_errors_name_keywords(pipe, kwargs, message):
    with pytest.raises(InputError, match=message):
        pipe(**{**SMALL, **kwargs})


def test_inspect_parses_mesh_first(ckpt):
    r = _cli("inspect", ckpt, "--mesh", "3xfoo")
    assert r.exit_code == 2 and "--mesh '3xfoo' is not a mesh description" in r.stderr
    assert r.stdout == ""  # nothing of the description printed before the refusal


def test_size_output_and_component_folder_errors_say_what_is_valid(ckpt, tmp_path):
    """Wan2.2 TI2V's size rule names its multiple of 32 alone (it read "multiples of 32 (... and at
    least 16)"); --height past what the model can represent names the largest valid one before
    any "nearest valid" (which was 1e11 for --height 99999999999); -o naming an existing file
    without extension (/proc/version) says so, not only that PNG frames go into folders; a
    component folder (<ckpt>/transformer) points to the pipeline folder above it."""
    from tests.paths import REFERENCE_CONFIGS
    from vidax.checkpoint import Checkpoint
    from vidax.models.wan.pipeline import WanPipeline

    ti2v = WanPipeline.family.read_checkpoint(
        Checkpoint.open(os.path.join(REFERENCE_CONFIGS, "Wan-AI__Wan2.2-TI2V-5B-Diffusers"))
    )
    with pytest.raises(InputError) as e:
        WanPipeline.check_call(ti2v, "a cat", height=700, width=1280)
    assert str(e.value) == (
        "height and width must be multiples of 32 (the VAE's 16x spatial compression times the "
        "transformer's 2x2 patches), got height=700, width=1280; nearest valid: height in [672, 704]"
    )
    lines = _error_lines(_cli("generate", "-p", "a cat", "--checkpoint", ckpt, "--height", "99999999999"))
    assert len(lines) == 1 and lines[0].startswith(
        "error: --height 99999999999 is more than this checkpoint's model can "
        "represent: the largest valid --height is 16384 ("
    ), lines
    (tmp_path / "version").write_text("mine")
    lines = _error_lines(_cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(tmp_path / "version")))
    assert lines == [
        f"error: --output {str(tmp_path / 'version')!r} is an existing file whose name has no extension (a "
        "name without one is a folder for PNG frames); give *.mp4, *.npy, an image name for one frame, or "
        "a new or empty folder"
    ]
    r = _cli("inspect", os.path.join(ckpt, "transformer"))
    assert r.exit_code == 2 and _error_lines(r) == [
        f"error: {os.path.join(ckpt, 'transformer')} is the 'transformer' component of the pipeline folder {ckpt}; give "
        "that folder (vidax loads diffusers-layout pipeline folders, with model_index.json)"
    ], r.output


# --------------------------------------------------------------------------- issue 18, item 1: no user file lost
def _one_line(r, *words):
    lines = _error_lines(r)
    assert r.exit_code == 2 and len(lines) == 1 and all(w in lines[0] for w in words), r.output
    return lines[0]


def test_output_folder_of_other_files_refused_before_loading(broken, tmp_path, monkeypatch):
    """A frame folder holding anything vidax did not write is refused in one line naming
    --output and what is in the way, before any weight is read (the broken checkpoint is
    never reached); nothing in it is touched. ``-o .``, a hidden file among frame files (even
    with --overwrite), and frame files without --overwrite are refused too."""
    import signal

    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    d = tmp_path / "d"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    _one_line(
        _cli("generate", "-p", "a cat", "--checkpoint", broken, "-o", str(d), *SMALL_FLAGS),
        "--output",
        "keep.txt",
        "did not write",
    )
    _one_line(
        _cli("generate", "-p", "a cat", "--checkpoint", broken, "-o", str(d) + "/", *SMALL_FLAGS),
        "--output",
        "keep.txt",
    )
    monkeypatch.chdir(d)
    _one_line(
        _cli("generate", "-p", "a cat", "--checkpoint", broken, "-o", ".", *SMALL_FLAGS), "--output '.'", "keep.txt"
    )
    frames = tmp_path / "frames"
    frames.mkdir()
    (frames / "frame_00000.png").write_bytes(OLD_FRAME)
    _one_line(
        _cli("generate", "-p", "a cat", "--checkpoint", broken, "-o", str(frames), *SMALL_FLAGS),
        "--output",
        "1 frame file(s) of an earlier run",
        "pass --overwrite",
    )
    (frames / ".hidden").write_text("mine")
    _one_line(
        _cli("generate", "-p", "a cat", "--checkpoint", broken, "-o", str(frames), "--overwrite", *SMALL_FLAGS),
        "--output",
        ".hidden",
    )
    assert sorted(os.listdir(tmp_path)) == ["d", "frames"]
    assert os.listdir(d) == ["keep.txt"] and (d / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(frames)) == [".hidden", "frame_00000.png"]
    assert (frames / "frame_00000.png").read_bytes() == OLD_FRAME
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # given back


def test_overwrite_replaces_every_earlier_frame(ckpt, tmp_path):
    """--overwrite on a folder of 9 frames of an earlier run leaves exactly the new video's 5
    frames: no stale frame mixed in."""
    from PIL import Image

    d = tmp_path / "frames"
    d.mkdir()
    for i in range(9):
        (d / f"frame_{i:05d}.png").write_bytes(OLD_FRAME)
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(d), "--overwrite", *SMALL_FLAGS)
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(d)) == [f"frame_{i:05d}.png" for i in range(5)]
    assert all(np.asarray(Image.open(d / f"frame_{i:05d}.png")).shape == (32, 48, 3) for i in range(5))
    assert sorted(os.listdir(tmp_path)) == ["frames"]  # no temporary left beside it


def test_files_and_symlinks_written_through(tmp_path):
    """An existing file is replaced atomically (a reader holding the old one still reads it
    whole); a symlink is written through, never replaced (to a file: the file gets the video;
    to a folder: the frames go into it, with the same rule about what it holds)."""
    from vidax.io.video import write_video

    frames = np.random.default_rng(0).random((2, 4, 6, 3), dtype=np.float32)
    real = tmp_path / "real.npy"
    np.save(real, np.zeros(3))
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    with open(real, "rb") as old:
        assert write_video(frames, link) == str(link)
        assert np.load(old).shape == (3,)  # the earlier file, intact under the reader
    assert link.is_symlink() and os.readlink(link) == str(real)
    np.testing.assert_array_equal(np.load(real), frames)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    flink = tmp_path / "flink"
    flink.symlink_to(folder)
    with pytest.raises(InputError, match="output='.*flink' is a folder holding files vidax did not write"):
        write_video(frames, flink)
    (folder / "keep.txt").unlink()
    write_video(frames, flink)
    assert flink.is_symlink() and sorted(os.listdir(folder)) == ["frame_00000.png", "frame_00001.png"]
    (folder / "keep.txt").write_text("mine")  # arrived during the run: the write checks again
    with pytest.raises(InputError, match=r"did not write \(keep.txt\)"):
        write_video(frames, flink, overwrite=True)
    assert sorted(os.listdir(folder)) == ["frame_00000.png", "frame_00001.png", "keep.txt"]
    assert sorted(os.listdir(tmp_path)) == ["flink", "folder", "link.npy", "real.npy"]


def test_devices_never_replaced(tmp_path):
    """/dev/null keeps nothing (nothing created in /dev, the device stays); a FIFO, another
    device, ``-`` (standard output: it made a frame folder named '-'), or a file named as a
    frame folder is refused."""
    import stat

    from vidax.io.video import check_output_path, output_paths, write_video

    frames = np.zeros((1, 2, 2, 3), np.float32)
    assert output_paths(os.devnull, 2) == [os.devnull] * 2  # several videos: each discarded, none in /dev
    null = os.stat(os.devnull)
    before = sorted(os.listdir(os.path.dirname(os.devnull)))
    assert check_output_path(os.devnull) == "null"
    assert write_video(frames, os.devnull) == os.devnull
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (null.st_ino, null.st_rdev)
    assert sorted(os.listdir(os.path.dirname(os.devnull))) == before
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="output='.*pipe.mp4' is a FIFO, not a file or folder"):
        write_video(frames, fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    # /dev/stdout onto a pipe: the link's target ("pipe:[N]") has no path, so it is named by
    # its kind (it was blamed on an unwritable /proc/PID/fd folder).
    r, w = os.pipe()
    try:
        link = tmp_path / "stdout.mp4"
        os.symlink(f"/proc/self/fd/{w}", link)
        with pytest.raises(InputError, match="output='.*stdout.mp4' is a FIFO, not a file or folder"):
            check_output_path(link)
    finally:
        os.close(r), os.close(w)
    with pytest.raises(InputError, match="output='-': vidax does not write the video to standard output"):
        check_output_path("-")
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for name in (str(afile), str(afile) + "/"):
        with pytest.raises(InputError, match="is an existing file whose name has no extension"):
            write_video(frames, name)
    assert afile.read_text() == "mine"


def test_cli_dev_null_writes_nothing(ckpt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(os.path.dirname(os.devnull)))
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", os.devnull, *SMALL_FLAGS)
    assert r.exit_code == 0, r.output
    assert f"wrote nothing: --output {os.devnull} keeps nothing" in r.stderr
    assert sorted(os.listdir(os.path.dirname(os.devnull))) == before and not os.listdir(tmp_path)


def test_unwritten_frames_never_replace_a_name(tmp_path, monkeypatch):
    """The .npy fallback takes a free name: a dangling symlink counts as taken, and a folder
    whose 100 names are all taken is passed over for the current one."""
    from vidax.io.video import save_unwritten

    frames = np.zeros((1, 1, 2, 2, 3), np.float32)
    (tmp_path / "v.unwritten.npy").symlink_to(tmp_path / "nowhere")
    assert save_unwritten(frames, tmp_path / "v.mp4") == str(tmp_path / "v.unwritten-1.npy")
    assert (tmp_path / "v.unwritten.npy").is_symlink()
    full = tmp_path / "full"
    full.mkdir()
    for i in range(100):
        (full / f"v.unwritten{'' if i == 0 else f'-{i}'}.npy").write_text("mine")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert save_unwritten(frames, full / "v.mp4") == str(cwd / "v.unwritten.npy")
    assert {(full / n).read_text() for n in os.listdir(full)} == {"mine"}


# --------------------------------------------------------------------------- issue 18, item 4: cancel, SIGINT / SIGTERM
def test_cancel_stops_between_steps(pipe):
    """``cancel=`` (an Event set from the step callback, as a server's DELETE would from another
    thread) stops the call before the next step: Cancelled names the steps done. Set after the
    last step, it stops before the VAE decode; a callable works as well."""
    import threading

    from vidax.errors import Cancelled, VidaxError

    event, steps = threading.Event(), []

    def callback(i, n):
        steps.append(i)
        if i == 0:
            event.set()

    with pytest.raises(Cancelled, match=r"^cancelled after denoising step 1 of 3$") as e:
        pipe("a cat", **{**SMALL, "num_inference_steps": 3}, progress=False, callback=callback, cancel=event)
    assert steps == [0] and e.value.done == "after denoising step 1 of 3" and isinstance(e.value, VidaxError)
    flag = []
    with pytest.raises(Cancelled, match=r"^cancelled before the VAE decode \(all 2 denoising steps done\)$"):
        pipe(
            "a cat",
            **SMALL,
            progress=False,
            callback=lambda i, n: flag.append(i) if i == n - 1 else None,
            cancel=lambda: bool(flag),
        )
    with pytest.raises(InputError, match="cancel must be a threading.Event, a callable returning True"):
        pipe("a cat", **SMALL, cancel=True)


@pytest.mark.parametrize("sigs, code", [(["SIGINT"], 130), (["SIGTERM"], 143), (["SIGINT", "SIGTERM"], 143)])
def test_signal_stops_the_cli_at_the_next_step(ckpt, tmp_path, sigs, code):
    """SIGINT / SIGTERM to a real ``python -m vidax generate`` once its denoising has started:
    it stops at the next step, prints one line saying after which step and that nothing was
    written, exits 128 + the signal, and leaves no output or temporary file. A second signal
    (SIGTERM right after SIGINT, so the two are not merged into one) stops it at once."""
    import signal
    import subprocess
    import sys

    steps = 1000  # never reached: the run stops at the step after the signal
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
            "--height",
            "32",
            "--width",
            "48",
            "--num-frames",
            "5",
            "--num-inference-steps",
            str(steps),
            "--max-sequence-length",
            "16",
            "-o",
            str(tmp_path / "v.mp4"),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        seen = b""
        while not re.search(rb"[1-9]\d*/%d" % steps, seen):  # the progress bar after the first step
            chunk = proc.stderr.read1(4096)
            assert chunk, seen.decode(errors="replace")  # the run ended before denoising
            seen += chunk
        for sig in sigs:
            proc.send_signal(getattr(signal, sig))
        _, rest = proc.communicate(timeout=300)
    finally:
        proc.kill()
    err = (seen + rest).decode(errors="replace")
    assert proc.returncode == code, err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    expected = (
        rf"interrupted \({sigs[0]}\) after denoising step \d+ of {steps}; nothing was written"
        if len(sigs) == 1
        else rf"interrupted again \({sigs[1]}\): stopped at once; nothing was written"
    )
    assert re.fullmatch(expected, lines[0]), lines
    assert not os.listdir(tmp_path)


# --------------------------------------------------------------------------- item 10: NaN / Inf
def _poison_step(update, k):
    """``scheduler_update`` whose latents go NaN at (1-based) step ``k``."""
    import jax.numpy as jnp

    def poisoned(self, state, pred, latents, inputs):
        x, new_state = update(self, state, pred, latents, inputs)
        return jnp.where(state.step_index == k - 1, jnp.nan, x), new_state

    return poisoned


def test_nan_at_a_step_stops_the_run(pipe, monkeypatch):
    from vidax.models.wan.pipeline import WanPipeline

    monkeypatch.setattr(pipe.denoiser, "step_fns", {})  # the poisoned step compiles afresh
    monkeypatch.setattr(WanPipeline.family, "scheduler_update", _poison_step(WanPipeline.family.scheduler_update, 2))
    steps = []
    with pytest.raises(
        NumericalError,
        match=r"^denoising step 2 of 3 \(the transformer and the scheduler update\) "
        r"produced NaN/Inf latents; stopped there, nothing was written "
        r"\(it ran in float32, so not for lack of precision: check the "
        r"checkpoint's weights",
    ):
        pipe("a cat", **{**SMALL, "num_inference_steps": 3}, progress=False, callback=lambda i, n: steps.append(i))
    assert steps == [0]  # stopped at the step that went NaN
    assert issubclass(NumericalError, FloatingPointError)


def test_nan_in_the_vae_decode_is_named(pipe, monkeypatch):
    vae_cls = type(pipe.vae)
    decode = vae_cls.iter_decode

    def poisoned(self, z, **kwargs):
        for i, chunk in enumerate(decode(self, z, **kwargs)):
            yield chunk * np.float32("nan") if i == 1 else chunk

    monkeypatch.setattr(vae_cls, "iter_decode", poisoned)
    with pytest.raises(
        NumericalError,
        match=r"^the VAE decode \(chunk 2 of 2\) produced NaN/Inf values; .*"
        r"\(it ran in float32, so not for lack of precision",
    ):
        pipe("a cat", **SMALL, progress=False)


def test_cli_nan_is_one_line_and_writes_nothing(ckpt, tmp_path, monkeypatch):
    from vidax.models.wan.pipeline import WanPipeline

    monkeypatch.setattr(WanPipeline.family, "scheduler_update", _poison_step(WanPipeline.family.scheduler_update, 1))
    out = tmp_path / "v.mp4"
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, "-o", str(out), *SMALL_FLAGS)
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and "denoising step 1 of 2" in lines[0] and "NaN/Inf" in lines[0], r.output
    assert not os.listdir(tmp_path)


def _reference_info(name, task):
    from tests.paths import REFERENCE_CONFIGS
    from vidax.checkpoint import Checkpoint
    from vidax.pipelines.loading import pipeline_class

    ckpt = Checkpoint.open(os.path.join(REFERENCE_CONFIGS, name))
    cls = pipeline_class(ckpt, task=task)
    return cls, cls.family.read_checkpoint(ckpt)


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
@pytest.mark.parametrize(
    "flag, value, top", [("--height", "100000", 16384), ("--width", "16400", 16384), ("--num-frames", "4097", 4093)]
)
def test_cli_size_beyond_the_model(ckpt, tmp_path, flag, value, top):
    """Past the Wan RoPE tables (rope_max_seq_len=1024 patches per axis): refused before loading,
    naming the flag, its value and the largest valid one."""
    r = _cli("generate", "-p", "a cat", "--checkpoint", ckpt, flag, value, "-o", str(tmp_path / "v.npy"))
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1, r.output
    assert (
        f"{flag} {value} is more than this checkpoint's model can represent: the largest valid {flag} is {top} "
        "(rope_max_seq_len=1024 patches per axis" in lines[0]
    ), lines[0]
    assert not os.listdir(tmp_path)


def test_api_size_beyond_the_model(pipe):
    with pytest.raises(InputError, match=r"^height=100000 is more than .* the largest valid height is 16384 "):
        pipe("a cat", height=100000)
    cls, info = _reference_info("THUDM__CogVideoX1.5-5B", "t2v")
    with pytest.raises(
        InputError,
        match=r"^width=2416 is more than .* the largest valid width is 2400 \(the RoPE "
        r"position grid of 150x150 patches",
    ):
        cls.check_call(info, "a cat", height=768, width=2416)
    cls.check_call(info, "a cat", height=768, width=2400)
    cls, info = _reference_info("THUDM__CogVideoX-5b", "t2v")  # 1.0: any grid maps onto its base grid
    assert cls.family.size_limits(info).height is None


def test_large_size_warns_with_an_estimate(caplog):
    cls, info = _reference_info("Wan-AI__Wan2.1-T2V-1.3B-Diffusers", "t2v")
    plenty = (2**60, "test memory")  # the warning of a run that fits (one that does not is refused)
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        check_memory(cls, info, cls.check_call(info, "a cat"), available=plenty)
        # Wan's 720p: 2.3x the tokens, no warning
        check_memory(cls, info, cls.check_call(info, "a cat", height=720, width=1280), available=plenty)
        assert not caplog.records
        check_memory(cls, info, cls.check_call(info, "a cat", height=4096, width=4096), available=plenty)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    # 81 frames -> 21 latent frames; 4096 / 8 / 2 = 256 patches per side; CFG doubles the batch.
    # Only the arguments given are named as such (num_frames is the checkpoint's default here).
    assert message.startswith(
        "height=4096, width=4096: 4096x4096 pixels, 81 frames is far beyond this checkpoint's "
        "default 480x832, 81 frames (42x its tokens): 1376256 tokens per sample x batch 2: "
        "peak memory ~"
    ), message
    # The peak of run_memory_estimate by part: the decode chunk (a later chunk's 4 frames and the
    # 2 cached before them, 6 x 4096 x 4096 x 96 channels x 80 bytes = 720 GiB, plus the cache it
    # carries to the next chunk: 147.78 GiB, 0.55 MiB per latent pixel of 512 x 512) is the
    # largest phase; latents (x2) and the video (3 float32 copies).
    assert message.endswith(
        ": peak memory ~914.16 GiB (denoising step 435.75 GiB, VAE decode chunk 867.78 GiB, "
        "latents and video 46.22 GiB), ~698234 TFLOP of attention per step"
    ), message


def test_cli_large_size_warning_names_flags(broken, tmp_path, caplog):
    """The warning comes before any weight is read (the broken copy fails to load after it),
    and names flags on the command line."""
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        r = _cli(
            "generate",
            "-p",
            "a cat",
            "--checkpoint",
            broken,
            "--height",
            "384",
            "--width",
            "640",
            "-o",
            str(tmp_path / "v.npy"),
        )
    assert r.exit_code == 2 and "safetensors" in r.stderr, r.output
    warnings = [rec.getMessage() for rec in caplog.records if "far beyond" in rec.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(
        "--height 384, --width 640: 384x640 pixels, 17 frames is far beyond this checkpoint's default 96x160"
    ), warnings
    assert "--num-frames" not in warnings[0]  # not given, so not named


# --------------------------------------------------------------------------- review fixes
def test_configs_only_checks_of_the_review(broken, tmp_path, monkeypatch):
    """Found in review: a Wan image list, a bad _vidax_call_defaults and a family module that
    does not import are each one error before any weight is read (``broken`` has unreadable
    transformer weights), never a traceback."""
    import json

    from vidax.checkpoint import Checkpoint
    from vidax.errors import ConfigError
    from vidax.models.wan.pipeline import WanImageToVideoPipeline, WanPipeline

    img = np.zeros((32, 48, 3), np.uint8)
    import dataclasses

    info = WanPipeline.family.read_checkpoint(Checkpoint.open(broken))
    info = dataclasses.replace(info, tasks=("t2v", "i2v"))  # as TI2V-5B: image-to-video too
    with pytest.raises(InputError, match="one image for the whole batch"):
        WanImageToVideoPipeline.check_call(info, "a cat", image=[img, img], **SMALL)
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


# --------------------------------------------------------------------------- issue 18: before any weight
@pytest.fixture
def weight_reads(monkeypatch):
    """``{"headers": [...], "data": [...]}``: the safetensors files whose header vidax opens and
    those whose tensor bytes it reads (``CheckpointReader.get`` and ``numpy.memmap``, the only
    ways vidax reads a tensor)."""
    from vidax.weights import safetensors_io

    seen = {"headers": [], "data": []}
    real_header, real_get, real_memmap = safetensors_io._read_header, safetensors_io.CheckpointReader.get, np.memmap

    def header(path):
        seen["headers"].append(os.path.relpath(path, os.path.dirname(os.path.dirname(path))))
        return real_header(path)

    def get(self, key):
        seen["data"].append(self.info(key).file)
        return real_get(self, key)

    def memmap(file, *args, **kwargs):
        seen["data"].append(str(file))
        return real_memmap(file, *args, **kwargs)

    monkeypatch.setattr(safetensors_io, "_read_header", header)
    monkeypatch.setattr(safetensors_io.CheckpointReader, "get", get)
    monkeypatch.setattr(np, "memmap", memmap)
    return seen


def _rewrite_transformer(folder, change):
    """Rewrite the transformer's safetensors with ``change(tensors)`` applied (a dict)."""
    from vidax.weights import CheckpointReader, save_safetensors

    file = os.path.join(folder, "transformer", "diffusion_pytorch_model.safetensors")
    reader = CheckpointReader(file)
    tensors = {k: np.array(reader.get(k)) for k in reader.keys()}
    reader.close()
    change(tensors)
    save_safetensors(tensors, file)


def _bad_shape(t):
    t["proj_out.bias"] = np.zeros(t["proj_out.bias"].shape[0] + 1, np.float32)


def _set_scheduler(folder, **config):
    file = os.path.join(folder, "scheduler", "scheduler_config.json")
    with open(file) as f:
        old = json.load(f)
    with open(file, "w") as f:
        json.dump({**old, **config}, f)


# (what is broken, mesh, the error, the words it holds). The transformer is read after the text
# encoder, the scheduler after every weight: each breakage used to show only after weights were read.
_BREAKAGES = {
    "bad shape": (
        lambda d: _rewrite_transformer(d, _bad_shape),
        None,
        CheckpointError,
        ["proj_out.bias", "shape (65,)", "expected (64,)"],
    ),
    "missing key": (
        lambda d: _rewrite_transformer(d, lambda t: t.pop("proj_out.bias")),
        None,
        CheckpointError,
        ["missing tensors", "proj_out.bias"],
    ),
    "truncated": (
        lambda d: open(os.path.join(d, "transformer", "diffusion_pytorch_model.safetensors"), "r+b").truncate(3000),
        None,
        CheckpointError,
        ["is truncated"],
    ),
    "prediction_type": (
        lambda d: _set_scheduler(d, prediction_type="epsilon"),
        None,
        ConfigError,
        ["scheduler_config.json", "prediction_type"],
    ),
    "scheduler class": (
        lambda d: _set_scheduler(d, _class_name="CogVideoXDDIMScheduler"),
        None,
        ConfigError,
        [
            "_class_name='CogVideoXDDIMScheduler'",
            "WanPipeline runs UniPCMultistepScheduler or FlowMatchEulerDiscreteScheduler",
        ],
    ),
    "tp vs heads": (
        lambda d: None,
        "1x8x1",
        InputError,
        ["the mesh dp 1 x tp 8 x sp 1", "splits attention heads over tp x sp = 8, which does not divide the model's 4"],
    ),
}


@pytest.fixture(scope="module")
def _wan_copy(ckpt, tmp_path_factory):
    """The embedded checkpoint's files, copied once; each test of a breakage copies this."""
    dst = tmp_path_factory.mktemp("pristine") / "ckpt"
    shutil.copytree(ckpt, dst)
    return dst


@pytest.mark.parametrize("breakage", list(_BREAKAGES))
def test_no_weight_is_read_before_a_checkpoint_error(_wan_copy, tmp_path, weight_reads, breakage):
    """Issue 18 item 5: load_pipeline checks every component's configs, safetensors headers,
    sizes and 1:1 key plan (and the heads against the mesh) before it reads the first tensor of
    any; a broken transformer (loaded after the text encoder) or scheduler reads no weight."""
    break_it, mesh, error, words = _BREAKAGES[breakage]
    folder = tmp_path / "ckpt"
    shutil.copytree(_wan_copy, folder)
    break_it(str(folder))
    weight_reads["headers"].clear(), weight_reads["data"].clear()
    with pytest.raises(error) as e:
        vidax.load_pipeline(str(folder), mesh=mesh)
    for word in words:
        assert word in str(e.value), (word, str(e.value))
    assert weight_reads["data"] == [], weight_reads
    if breakage in ("bad shape", "missing key"):  # the text encoder's plan was checked before the transformer's
        assert weight_reads["headers"][-2:] == [
            os.path.join("text_encoder", "model.safetensors"),
            os.path.join("transformer", "diffusion_pytorch_model.safetensors"),
        ]


@pytest.mark.parametrize(
    "breakage, flags", [("tp vs heads", ["--tp", "8"]), ("prediction_type", []), ("scheduler class", [])]
)
def test_cli_config_errors_before_any_weight(_wan_copy, tmp_path, weight_reads, breakage, flags):
    """vidax generate: the scheduler and the heads against --tp are config-only checks; one line,
    no weight read, nothing written."""
    break_it, _, _, words = _BREAKAGES[breakage]
    folder = tmp_path / "ckpt"
    shutil.copytree(_wan_copy, folder)
    break_it(str(folder))
    weight_reads["headers"].clear(), weight_reads["data"].clear()
    out = tmp_path / "out"
    out.mkdir()
    r = _cli("generate", "-p", "a cat", "--checkpoint", str(folder), "-o", str(out / "v.npy"), *SMALL_FLAGS, *flags)
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and all(w in lines[0] for w in words), r.output
    assert weight_reads == {"headers": [], "data": []}  # not even a header
    assert not os.listdir(out)


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_seed_out_of_range(pipe, broken, tmp_path, seed):
    """Issue 18 item 6: jax.random keys take 32 bits of a seed (2**63 and up even raise): seeds
    are refused outside [0, 2**32 - 1], naming seed= in Python and --seed on the command line."""
    with pytest.raises(InputError, match=rf"^seed={seed} is out of range: seeds are integers in \[0, 4294967295\]"):
        pipe("a cat", seed=seed, **SMALL)
    r = _cli("generate", "-p", "a cat", "--checkpoint", broken, "--seed", str(seed), "-o", str(tmp_path / "v.npy"))
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    # past int64 the number is refused as it is read, with the same range
    want = (
        f"--seed {seed} is out of range: seeds are integers in [0, 4294967295]"
        if abs(seed) < 2**63
        else f"--seed must be an integer in [0, 4294967295], got {seed}"
    )
    assert len(lines) == 1 and want in lines[0], r.output
    pipe.check_call(pipe.info, "a cat", seed=2**32 - 1, **SMALL)  # the largest is valid


def test_max_sequence_length_past_the_tokenizer_runs_and_memory_bounds_it(pipe, broken, tmp_path):
    """UMT5's relative positions take any length (as diffusers runs it): past the tokenizer's
    model_max_length (512) is taken; what cannot fit in memory is one line naming
    max_sequence_length, before any weight (the broken copy cannot be read)."""
    call = pipe.check_call(pipe.info, "a cat", **{**SMALL, "max_sequence_length": 513})
    assert call.max_sequence_length == 513
    # 100000: UMT5's (heads, L, L) position bias (~150 GiB) alone does not fit (trial 8: it was not
    # counted, the run was let through and failed inside the text encoder)
    for length in ("100000000", "100000"):
        r = _cli(
            "generate",
            "-p",
            "a cat",
            "--checkpoint",
            broken,
            "--max-sequence-length",
            length,
            "-o",
            str(tmp_path / "v.npy"),
        )
        assert r.exit_code == 2, r.output
        lines = _error_lines(r)
        assert (
            len(lines) == 1
            and f"--max-sequence-length {length} (batch 1, CFG doubles it) needs" in lines[0]
            and "text encoding" in lines[0]
            and "give a smaller --max-sequence-length" in lines[0]
            and re.search(r"; --max-sequence-length [1-9]\d* fits \(to run it anyway: --no-memory-check\)$", lines[0])
        ), r.output


@pytest.mark.parametrize(
    "name, task, top, why",
    [
        ("THUDM__CogVideoX-5b", "t2v", 226, "model_max_length=226"),  # T5 into a transformer of 226 text positions
    ],
)
def test_max_sequence_length_of_the_released_configs(tmp_path, name, task, top, why):
    """CogVideoX's transformer has a position table of max_text_seq_length text tokens: its largest
    valid max_sequence_length is accepted, one more refused (configs only, no weights)."""
    cls, info = _released_info(tmp_path, name, task)
    small = _released_call(task)
    cls.check_call(info, "a cat", max_sequence_length=top, **small)
    with pytest.raises(
        InputError,
        match=rf"^max_sequence_length={top + 1} is more .* the largest valid "
        rf"max_sequence_length is {top} \(.*{re.escape(why)}",
    ):
        cls.check_call(info, "a cat", max_sequence_length=top + 1, **small)


@pytest.mark.parametrize(
    "name, task",
    [
        ("Wan-AI__Wan2.1-T2V-1.3B-Diffusers", "t2v"),  # UMT5: relative positions
        ("Lightricks__LTX-Video", "t2v"),  # T5: relative positions
        ("hunyuanvideo-community__HunyuanVideo", "t2v"),  # Llama: rotary
        ("hunyuanvideo-community__HunyuanVideo-I2V", "i2v"),  # LLaVA's Llama: rotary
    ],
)
def test_max_sequence_length_has_no_position_bound_on_rotary_and_relative_encoders(tmp_path, name, task):
    """Past the text encoder's max_position_embeddings / the tokenizer's model_max_length is taken,
    as the references run it (configs only, no weights)."""
    cls, info = _released_info(tmp_path, name, task)
    call = cls.check_call(info, "a cat", max_sequence_length=9000, **_released_call(task))
    assert call.max_sequence_length == 9000


def _released_info(tmp_path, name, task):
    from tests.paths import REFERENCE_CONFIGS

    folder = tmp_path / name
    shutil.copytree(os.path.join(REFERENCE_CONFIGS, name), folder)
    for sub in ("tokenizer", "tokenizer_2"):  # HunyuanVideo's CLIP tokenizer folder is not among the configs
        (folder / sub).mkdir(exist_ok=True)
    essentials = folder / "text_encoder" / "arch_essentials.json"
    if essentials.exists():  # HunyuanVideo-I2V's LLaVA config is recorded as its text_config only
        text_config = json.loads(essentials.read_text())["text_config"]
        (folder / "text_encoder" / "config.json").write_text(json.dumps({"text_config": text_config}))
    return _reference_info(str(folder), task)


def _released_call(task):
    image = dict(image=np.zeros((8, 8, 3), np.uint8)) if task == "i2v" else {}
    return dict(height=64, width=64, num_frames=9, num_inference_steps=2, **image)


def test_ltx_schedule_checked_from_the_configs():
    """Issue 18 item 5: LTX-Video 0.9.1's dynamic shifting at a huge size makes a schedule its
    scheduler cannot use (sigmas at 1, or NaN): refused by check_call (configs only), not after
    the weights are loaded."""
    cls, info = _reference_info("Lightricks__LTX-Video-0.9.1", "t2v")
    cls.check_call(info, "a cat", height=512, width=704, num_frames=161)
    with pytest.raises(InputError, match="more than this scheduler config's dynamic shift allows"):
        cls.check_call(info, "a cat", height=4096, width=4096, num_frames=161)


# --------------------------------------------------------------------------- issue 18: advice and feedback
def test_dtype_names_and_aliases():
    """bf16 / fp32 are the dtypes users mean; other values get the valid ones, and only the
    float16 family is told why it is not implemented."""
    import jax.numpy as jnp

    from vidax.nn.inputs import parse_dtype

    assert parse_dtype("bf16") is jnp.bfloat16 and parse_dtype("fp32") is jnp.float32
    with pytest.raises(InputError) as e:
        parse_dtype("int8")
    assert str(e.value) == "dtype='int8' is not supported; use float32 or bfloat16 (or fp32, bf16)"
    with pytest.raises(InputError, match=r"^dtype='fp16' is not supported; .*: float16 overflows"):
        parse_dtype("fp16")


def test_a_dtype_is_parsed_at_the_front_door_and_taken_parsed_inside(ckpt, monkeypatch):
    """The user's dtype is parsed once, at the front door (``load_pipeline`` / ``from_pretrained``'s
    ``dtype_option``, the command line's ``check_precision``, the plan's ``with_placement`` for a
    name given to it); a parsed dtype passes ``with_placement`` unparsed, and code behind it (the
    staging, the component table) takes only a parsed dtype: a name reaching it (a caller that
    skipped the front doors) is a TypeError naming the function, not a second parse."""
    import vidax.nn.inputs as inputs
    from vidax.cli.flags import LoadFlags
    from vidax.cli.records import check_precision
    from vidax.pipelines.loading import VAE, ComponentTable, dtype_option, plan_staging
    from vidax.pipelines.plan import read_plan, with_placement

    assert dtype_option("bf16", {}) is jnp.bfloat16 and dtype_option(None, {}) is jnp.float32
    assert dtype_option(None, {"torch_dtype": "fp32"}) is jnp.float32
    assert check_precision(LoadFlags(dtype=" BF16 "))[0] is jnp.bfloat16
    plan = read_plan(ckpt)
    assert with_placement(plan, dtype="bf16").dtype is jnp.bfloat16  # the plan's own front door
    parsed = []  # a front door's parsed dtype is not parsed again
    monkeypatch.setattr(inputs, "parse_dtype", lambda *a: parsed.append(a))
    assert with_placement(plan, dtype=jnp.bfloat16).dtype is jnp.bfloat16 and parsed == []
    monkeypatch.undo()
    with pytest.raises(TypeError, match=r"^plan_staging takes a parsed dtype .*got 'bfloat16'"):
        plan_staging(plan.pipeline.family, plan.info, "bfloat16", jnp.float32, None, None)
    table = ComponentTable(files={}, weighted={"vae": VAE})
    with pytest.raises(TypeError, match=r"^ComponentTable.load takes a parsed dtype .*got 'fp32'"):
        table.load(plan.info, dtype="fp32", mesh=None, offload=None, staging=None, vae_dtype=jnp.float32)


def test_the_dtype_options_are_parsed_at_the_front_door(ckpt, weight_reads):
    """``vae_dtype=`` / ``text_encoder_dtype=`` are parsed once, in the plan's ``with_placement``
    (which ``from_pretrained`` and the command line pass), refused there naming the keyword as
    given, before any weight is read; the plan carries them parsed, a None only where the family
    means its dtype by it, and the code behind takes only a parsed dtype."""
    from vidax.models.cogvideox.pipeline import CogVideoXPipeline
    from vidax.models.hunyuan_video.pipeline import HunyuanVideoPipeline
    from vidax.pipelines.loading import plan_staging
    from vidax.pipelines.plan import parsed_dtype_options, read_plan, with_placement

    with pytest.raises(InputError, match=r"^vae_dtype='float16' is not supported; use float32 or bfloat16"):
        vidax.load_pipeline(ckpt, vae_dtype="float16", progress=False)
    assert weight_reads == {"headers": [], "data": []}
    plan = read_plan(ckpt)
    assert with_placement(plan, vae_dtype=" BF16 ").options["vae_dtype"] is jnp.bfloat16
    with pytest.raises(InputError, match=r"^vae_dtype=None is not supported"):
        with_placement(plan, vae_dtype=None)
    assert parsed_dtype_options(HunyuanVideoPipeline, {"text_encoder_dtype": None}) == {"text_encoder_dtype": None}
    with pytest.raises(InputError, match=r"^text_encoder_dtype=None is not supported"):  # CogVideoX's means nothing
        parsed_dtype_options(CogVideoXPipeline, {"text_encoder_dtype": None})
    with pytest.raises(TypeError, match=r"^plan_staging takes a parsed dtype .*got 'bf16'"):
        plan_staging(plan.pipeline.family, plan.info, jnp.float32, "bf16", None, None)


def test_mesh_sizes_are_positive_integers():
    from vidax.parallel.mesh import mesh_from_sizes

    for dp, tp, sp, name in (
        (None, -1, None, "tp=-1"),
        (None, 0, None, "tp=0"),
        (None, None, 0, "sp=0"),
        (-2, None, None, "dp=-2"),
    ):
        with pytest.raises(InputError, match=f"^{name} is not valid: each mesh axis size must be a positive integer"):
            mesh_from_sizes(dp, tp, sp)


def test_nan_advice_follows_the_dtype():
    import jax.numpy as jnp
    import typer

    from vidax.cli import Spelling, app
    from vidax.errors import NumericalError
    from vidax.pipelines.sampling import nonfinite_advice

    bf16 = {"w": jnp.zeros((2,), jnp.bfloat16), "norm": jnp.zeros((2,), jnp.float32)}
    assert str(nonfinite_advice(bf16)) == "(it ran in bfloat16: try dtype=float32, or other settings)"
    assert str(nonfinite_advice(jnp.bfloat16)) == str(nonfinite_advice(bf16))
    for fp32 in ({"w": jnp.zeros((2,), jnp.float32)}, jnp.float32):
        assert "float32" in str(nonfinite_advice(fp32)) and "try dtype=float32" not in str(nonfinite_advice(fp32))
    # the command line names the flag: --dtype float32
    flags = Spelling(typer.main.get_command(app).commands["generate"])
    error = NumericalError("step 1 produced NaN/Inf latents ", nonfinite_advice(None))
    assert flags.message(error) == (
        "step 1 produced NaN/Inf latents (try other settings, or --dtype float32 if it ran in bfloat16)"
    )


def test_api_errors_name_keywords_not_flags(ckpt):
    """Messages made in vidax name the Python keyword; the argument is data the CLI spells as a flag."""
    with pytest.raises(InputError) as e:
        vidax.load_pipeline(ckpt, task="i2v")
    assert "(drop image=)" in str(e.value) and "--" not in str(e.value)
    assert e.value.arguments == ("image",)
    assert e.value.render(lambda a: a.spelled("--" + a.name)).endswith("(drop --image)")
    cls, info = _reference_info("Wan-AI__Wan2.1-I2V-14B-480P-Diffusers", "i2v")
    with pytest.raises(InputError, match="image is required") as e:
        cls.check_call(info, "a cat")
    assert "--" not in str(e.value)
    assert vidax.LTXVideoCondition is __import__("vidax.models.ltx.pipeline", fromlist=["x"]).LTXVideoCondition
    assert "LTXVideoCondition" in vidax.__all__ and "LTXVideoCondition" in dir(vidax)


def test_ltx_large_size_names_the_size_limit():
    """LTX-Video 0.9.1's dynamic shift grows with the token count without a clamp: past the
    limit every sigma is 1.0. The error names the limit (computed from the scheduler config)
    and sizes within it, not "num_inference_steps >= 2" (50 steps were asked for)."""
    cls, info = _reference_info("Lightricks__LTX-Video", "t2v")
    cls.check_call(info, "a cat", height=704, width=1216, num_frames=257)  # 33 x 22 x 38 tokens: valid
    with pytest.raises(InputError) as e:
        cls.check_call(info, "a cat", height=1088, width=1920, num_frames=257)
    msg = str(e.value)
    assert msg.startswith(
        "height=1088, width=1920, num_frames=257 make 67320 latent tokens (33 x 34 x 60), more "
        "than this scheduler config's dynamic shift allows with num_inference_steps=50: its "
        "largest valid size is 56444 latent tokens"
    ), msg
    assert "max_image_seq_len=4096" in msg and "num_inference_steps >= 2" not in msg
    # The sizes it proposes are valid, and the limit is exact.
    cls.check_call(info, "a cat", height=1088, width=1920, num_frames=209)  # 27 x 34 x 60 = 55080 tokens
    cls.check_call(info, "a cat", height=992, width=1728, num_frames=257)
    from vidax.schedulers import scheduler_from_config

    sched = scheduler_from_config(info.scheduler_config)
    sigmas = np.linspace(1.0, 1 / 50, 50)
    sched.set_timesteps(50, sigmas=sigmas, mu=sched.calculate_shift(56444))
    with pytest.raises(InputError, match="ends at 1"):
        sched.set_timesteps(50, sigmas=sigmas, mu=sched.calculate_shift(56445))
    with pytest.raises(InputError, match="num_inference_steps >= 2"):  # one step: the scheduler's own reason
        cls.check_call(info, "a cat", num_inference_steps=1)


def test_cli_truncation_warnings_and_status_lines(ckpt, tmp_path, caplog):
    """A too-long prompt and negative prompt at the checkpoint's default max_sequence_length:
    each is named as what it is, and the limit as a default (the flag only as the way to change
    it). With progress on, loading, the prompt encoding and the compile each show a line before
    the denoising bar; the summary gives the seed and the total time."""
    long_prompt, long_negative = "a cat " * 300, "a dog " * 300
    with caplog.at_level("WARNING", logger="vidax.tokenizer"):
        r = _cli(
            "generate",
            "-p",
            long_prompt,
            "--negative-prompt",
            long_negative,
            "--guidance-scale",
            "5",
            "--checkpoint",
            ckpt,
            "--height",
            "32",
            "--width",
            "48",
            "--num-frames",
            "5",
            "--num-inference-steps",
            "2",
            "-o",
            str(tmp_path / "v.npy"),
        )
    assert r.exit_code == 0, r.output
    warnings = [rec.getMessage() for rec in caplog.records if "truncated" in rec.getMessage()]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(
        "--prompt has 601 tokens; truncated to 512 tokens, this checkpoint's default "
        "(--max-sequence-length sets another length)"
    ), warnings
    assert warnings[1].startswith("--negative-prompt has 601 tokens; truncated to 512 tokens"), warnings
    assert not any("--max-sequence-length 512" in w for w in warnings)  # never given
    err = r.stderr
    starts = [
        err.find(s)
        for s in (f"loading {ckpt}: ", "encoding the prompt", "denoising (compiling the step)", "vae decode")
    ]
    assert -1 not in starts and starts == sorted(starts), err
    # stderr is no terminal here: whole lines, one per event, no tqdm bar redrawn with \r
    assert "\r" not in err and "\ndenoising: 1/2 steps (" in err and "\ndenoising: 2/2 steps (" in err, err
    assert re.search(rf"\nloading {re.escape(ckpt)}: \d+\.\d s\n", err) and "\nvae decode: 1/" in err, err
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in err.split("summary:\n")[1].splitlines())
    assert rows["seed"] == "0" and rows["total"].endswith("s  (load and write included)"), rows
    caplog.clear()
    with caplog.at_level("WARNING", logger="vidax.tokenizer"):
        r = _cli("generate", "-p", long_prompt, "--checkpoint", ckpt, *SMALL_FLAGS, "-o", str(tmp_path / "w.npy"))
    assert r.exit_code == 0, r.output
    warnings = [rec.getMessage() for rec in caplog.records if "truncated" in rec.getMessage()]
    assert [w.split(" as ")[0] for w in warnings] == ["--prompt has 601 tokens; truncated to --max-sequence-length 16"]
    assert "loading" not in r.stderr and "encoding the prompt" not in r.stderr  # --no-progress


# --------------------------------------------------------------------------- issue 18: the break-it pass
def test_steps_beyond_the_training_timesteps_refused_before_loading(pipe, broken, tmp_path, weight_reads):
    """More steps than the scheduler's num_train_timesteps (2**31 took 14 GB before any
    message; CogVideoX's DDIM refused only after loading): one line before any weight, and before
    any schedule is computed."""
    with pytest.raises(
        InputError,
        match=r"^num_inference_steps=1001 is more than the 1000 timesteps this checkpoint's "
        r"scheduler was trained with .*; give at most 1000$",
    ):
        pipe("a cat", **{**SMALL, "num_inference_steps": 1001})
    weight_reads["headers"].clear(), weight_reads["data"].clear()
    r = _cli(
        "generate",
        "-p",
        "a cat",
        "--checkpoint",
        broken,
        *SMALL_FLAGS,
        "--num-inference-steps",
        "2147483648",
        "-o",
        str(tmp_path / "v.npy"),
    )
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and lines[0].startswith("error: --num-inference-steps 2147483648 is more than"), r.output
    assert weight_reads["data"] == []
    cls, info = _reference_info("Lightricks__LTX-Video-0.9.1", "t2v")  # a schedule computed in check_call
    with pytest.raises(InputError, match="^num_inference_steps=1001 is more than"):
        cls.check_call(info, "a cat", num_inference_steps=1001)


def test_ltx_beyond_float64_shift_is_the_size_limit():
    """At 2048 x 2048 x 257 LTX-Video 0.9.1's mu makes math.exp overflow (diffusers raises
    OverflowError there): the same one-line size limit as a smaller oversize, not a traceback."""
    cls, info = _reference_info("Lightricks__LTX-Video-0.9.1", "t2v")
    with pytest.raises(
        InputError,
        match=r"^height=2048, width=2048, num_frames=257 make .* more than this scheduler "
        r"config's dynamic shift allows",
    ):
        cls.check_call(info, "a cat", height=2048, width=2048, num_frames=257)


def test_diffusers_loading_keywords_named(ckpt):
    """A loading keyword no pipeline takes is an InputError naming them, not a TypeError from
    inside the family."""
    with pytest.raises(InputError, match="takes no colour=, size= when loading"):
        vidax.load_pipeline(ckpt, size=3, colour="red")


def test_torch_dtype_and_inert_loading_keywords(ckpt):
    """diffusers' ``torch_dtype=torch.bfloat16`` loads as ``dtype="bfloat16"`` (a torch dtype
    object is read by its name, without importing torch into vidax); giving both is refused,
    float16 keeps its reason. use_safetensors=True and low_cpu_mem_usage= change nothing here."""
    torch = pytest.importorskip("torch")
    pipe = vidax.load_pipeline(ckpt, torch_dtype=torch.bfloat16, progress=False)
    assert pipe.dtype == jnp.bfloat16
    assert vidax.load_pipeline(ckpt, dtype=torch.float32, progress=False).dtype == jnp.float32
    with pytest.raises(InputError, match="^dtype='bf16' and torch_dtype=torch.bfloat16 are the same setting"):
        vidax.load_pipeline(ckpt, dtype="bf16", torch_dtype=torch.bfloat16)
    with pytest.raises(InputError, match="^torch_dtype=torch.float16 is not supported; .*float16 overflows"):
        vidax.load_pipeline(ckpt, torch_dtype=torch.float16)
    # diffusers' keywords asking for what vidax does anyway: taken; a .bin request: refused.
    vidax.load_pipeline(ckpt, use_safetensors=True, low_cpu_mem_usage=False, progress=False)
    with pytest.raises(InputError, match="^use_safetensors=False: vidax reads safetensors weights only"):
        vidax.load_pipeline(ckpt, use_safetensors=False)


def test_local_files_only_as_diffusers(ckpt, monkeypatch):
    """diffusers' ``local_files_only=True``: a hub id is read from the cache only (passed to
    ``snapshot_download``); a local folder loads as it is."""
    import huggingface_hub

    seen = {}

    def fetch(repo, **kwargs):
        seen.update(kwargs, repo=repo)
        raise OSError("not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fetch)
    with pytest.raises(CheckpointError, match="not in the cache"):
        vidax.load_pipeline("owner/model", local_files_only=True)
    assert seen["repo"] == "owner/model" and seen["local_files_only"] is True
    vidax.load_pipeline(ckpt, local_files_only=True, progress=False)


def test_hub_error_is_one_line(monkeypatch):
    """huggingface_hub's multi-line messages are folded into the one error line."""
    import huggingface_hub

    def fail(*_, **__):
        raise OSError("Cannot reach the hub.\nCheck your connection.")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(CheckpointError) as e:
        vidax.load_pipeline("owner/missing-model")
    assert "\n" not in str(e.value) and "Cannot reach the hub. Check your connection." in str(e.value)


def test_tp_not_dividing_heads_names_no_unasked_flag(_wan_copy, tmp_path):
    """The heads check starts from the flag as typed and names the mesh as axes, not as --dp/--sp
    flags the user never gave."""
    r = _cli(
        "generate",
        "-p",
        "a cat",
        "--checkpoint",
        str(_wan_copy),
        *SMALL_FLAGS,
        "--tp",
        "8",
        "-o",
        str(tmp_path / "v.npy"),
    )
    assert r.exit_code == 2, r.output
    lines = _error_lines(r)
    assert len(lines) == 1 and lines[0].startswith(
        "error: --tp 8: the mesh dp 1 x tp 8 x sp 1 (a size not given is 1) splits attention heads"
    ), r.output
    assert "--dp" not in lines[0] and "--sp" not in lines[0], lines[0]


def test_overwrite_keeps_a_file_named_like_a_frame_that_is_no_png(tmp_path):
    """--overwrite replaces the PNG frames of an earlier run only: a file named frame_00042.png
    that is not a PNG is the user's, and the folder is refused naming it (it was deleted before)."""
    from vidax.io.video import check_output_path

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "frame_00042.png").write_text("my thesis")
    with pytest.raises(InputError, match=r"holding files vidax did not write \(frame_00042.png\)"):
        check_output_path(str(folder), overwrite=True)
    assert (folder / "frame_00042.png").read_text() == "my thesis"


def test_guidance_beyond_float32_refused(pipe):
    """guidance_scale=1e39 overflowed float32 in the step and ended in a NaN error after loading
    that blamed the weights: refused with the call's checks."""
    with pytest.raises(InputError, match=r"^guidance_scale must be a finite number >= 0 \(at most 3.403e\+38"):
        pipe("a cat", **{**SMALL, "guidance_scale": 1e39})


def test_latents_of_no_real_numbers_refused(pipe):
    """latents="x" raised numpy's ValueError and complex latents dropped their imaginary part:
    each is one InputError naming latents=; decode_audio=None is the default (True), as every
    keyword's None."""
    with pytest.raises(InputError, match=r"^latents must be an array of real numbers \(float32\), got str"):
        pipe.check_call(pipe.info, "a cat", latents="x", **SMALL)
    with pytest.raises(
        InputError,
        match=r"^latents must be an array of real numbers \(float32\), got ndarray of "
        r"dtype complex128",
    ):
        pipe.check_call(pipe.info, "a cat", latents=np.ones((1, 16, 2, 4, 4)) * 1j, **SMALL)
    assert pipe.check_call(pipe.info, "a cat", decode_audio=None, **SMALL).decode_audio is True


def test_declared_option_checks_name_the_argument():
    """A declared keyword's check (:class:`vidax.pipelines.options.CallOption`): the valid values
    in words from the declaration, the argument as data (a list's item by its index)."""
    from vidax.pipelines.options import CallOption

    cases = [
        (CallOption("n", int, "", low=1), 0, "n must be a positive integer, got 0"),
        (CallOption("n", int, "", low=1), 2.0, "n must be a positive integer, got 2.0"),
        (CallOption("phi", float, "", low=0, high=1), 1.5, "phi must be a number in [0, 1], got 1.5"),
        (
            CallOption("rate", float, "", low=0, low_open=True),
            0,
            "rate must be a finite number > 0 (at most 3.403e+38, float32's largest), got 0",
        ),
        (
            CallOption("t", float, ""),
            float("nan"),
            "t must be a finite number (at most 3.403e+38 in magnitude, float32's largest), got nan",
        ),
        (CallOption("k", int, "", choices=(1, 2)), 3, "k must be 1 or 2, got 3"),
        (CallOption("on", bool, ""), 1, "on must be True or False, got 1"),
        (
            CallOption("ts", float, "", low=0, per_prompt=True),
            [0.1, -1.0],
            "ts[1] must be a finite number >= 0 (at most 3.403e+38, float32's largest), got -1.0",
        ),
        (
            CallOption("s", float, "", low=0),
            1e39,
            "s must be a finite number >= 0 (at most 3.403e+38, float32's largest), got 1e+39",
        ),
        (
            CallOption("s", float, "", low=0),
            float("inf"),
            "s must be a finite number >= 0 (at most 3.403e+38, float32's largest), got inf",
        ),
        (
            CallOption("t", float, ""),
            -1e39,
            "t must be a finite number (at most 3.403e+38 in magnitude, float32's largest), got -1e+39",
        ),
    ]
    for option, value, message in cases:
        with pytest.raises(InputError) as e:
            option.check(value)
        assert str(e.value) == message
        assert e.value.arguments[0].startswith(option.name)
    # numpy numbers are written as their digits, not their repr (np.float64(1e+39)); an array as
    # its repr (its type shows: "got 5" would read as a valid number)
    for value, kind, shown in (
        (np.float64(1e39), float, "1e+39"),
        (np.float32(-2), float, "-2.0"),
        (np.int64(0), int, "0"),
        (np.array(5), int, "array(5)"),
    ):
        with pytest.raises(InputError) as e:
            CallOption("s", kind, "", low=1).check(value)
        assert str(e.value).endswith(f", got {shown}") and "np." not in str(e.value), str(e.value)
    assert CallOption("ts", float, "", per_prompt=True).check([1, 2]) == [1.0, 2.0]
    assert CallOption("n", int, "", low=1).check(np.int64(3)) == 3 and CallOption("n", int, "").check(None) is None


def test_lora_scale_is_finite_in_float32(tmp_path):
    from vidax.cli import lora_files

    for scale in ("inf", "nan", "1e39"):
        spec = f"{tmp_path / 'style.safetensors'}:{scale}"
        with pytest.raises(
            InputError,
            match=r"^--lora '.*:" + scale + r"': SCALE must be a finite number \(at most "
            r"3.403e\+38 in magnitude, float32's largest\)$",
        ):
            lora_files([spec])


def test_every_float_flag_refuses_non_finite_values():
    """Every float keyword a registered pipeline offers as a flag (guidance, STG, modality,
    rescale, shift, frame rate, ... of each family) goes through one check: inf, -inf, nan and
    1e39 (inf in float32, where vidax computes them) are refused in one line naming the flag,
    the value and the valid range, which says finite."""
    from vidax.cli import call_options
    from vidax.errors import ArgValue

    floats = [o for o in call_options().values() if o.type is float]
    assert {"guidance_scale", "modality_scale", "stg_scale", "frame_rate"} <= {o.name for o in floats}
    for option in floats:
        for value in (float("inf"), float("-inf"), float("nan"), 1e39):
            with pytest.raises(InputError) as e:
                option.check(value)
            line = e.value.render(lambda a: str(a) if isinstance(a, ArgValue) else a.spelled(option.flag_name))
            assert line == f"{option.flag_name} must be {option.describe_valid()}, got {value!r}", line
            # the range: finite, or a bounded interval ("a number in [0, 1]")
            assert "a finite number" in line or (option.low is not None and option.high is not None), line


def test_one_frame_written_as_an_image(broken, tmp_path):
    """write_video of one frame to *.png / .jpg / .jpeg / .webp writes that image (atomically: no
    temporary left; an existing file replaced); several frames are one line, on the command line
    before any weight is read (the broken copy is never loaded); .mp4 of one frame still works.
    (The CLI's end-to-end -o *.png run: test_cli.py::test_generate_image_to_video.)"""
    from PIL import Image

    from vidax.io.video import read_video, to_uint8, write_video

    (tmp_path / "y.png").write_bytes(b"an earlier run")
    frames = np.random.default_rng(0).random((1, 8, 10, 3), dtype=np.float32)
    for name, fmt in (("y.jpg", "JPEG"), ("y.jpeg", "JPEG"), ("y.webp", "WEBP"), ("y.png", "PNG")):
        write_video(frames, tmp_path / name)
        with Image.open(tmp_path / name) as im:
            assert im.format == fmt and im.size == (10, 8)
            if fmt == "PNG":  # lossless: the frame's uint8 values
                np.testing.assert_array_equal(np.asarray(im), to_uint8(frames)[0])
    write_video(frames, tmp_path / "one.mp4")
    assert read_video(tmp_path / "one.mp4").shape == (1, 8, 10, 3)
    assert sorted(os.listdir(tmp_path)) == ["one.mp4", "y.jpeg", "y.jpg", "y.png", "y.webp"]
    with pytest.raises(
        InputError,
        match=r"^output='.*z.webp' is an image: it holds one frame, but the video has 2 "
        r"frames; give \*.mp4, \*.npy or a folder for PNG frames, or one frame "
        r"\(num_frames=1\)$",
    ):
        write_video(np.concatenate([frames, frames]), tmp_path / "z.webp")
    bad = tmp_path / "bad.jpg"
    r = _cli("generate", "-p", "a cat", "--checkpoint", broken, "-o", str(bad), *SMALL_FLAGS)
    assert _one_line(r) == (
        f"error: --output '{bad}' is an image: it holds one frame, but the video has 5 frames; "
        "give *.mp4, *.npy or a folder for PNG frames, or one frame (--num-frames 1)"
    )
    assert not bad.exists() and not (tmp_path / "z.webp").exists()


def test_a_video_never_replaces_a_file_another_run_made_while_it_was_written(tmp_path, monkeypatch):
    """An output name that was free when checked and that another process takes while the video
    is encoded is not replaced (the file is linked into place, which fails on an existing name):
    write_video refuses naming the output; vidax generate's default output then goes to the next
    free name (two runs at once in one folder each keep their video)."""
    import types

    import vidax.io.video as video
    from vidax.cli.generating import write_outputs

    frames = np.zeros((3, 16, 16, 3), np.float32)
    target = tmp_path / "vidax-output.mp4"
    encode = video._write_mp4

    def another_run_takes_the_name(*args):
        if not target.exists():
            target.write_bytes(b"the other run's video")
        return encode(*args)

    monkeypatch.setattr(video, "_write_mp4", another_run_takes_the_name)
    with pytest.raises(InputError, match="was created by another process while this one was written"):
        video.write_video(frames, str(target), fps=8)
    assert target.read_bytes() == b"the other run's video"
    target.unlink()

    class Stop:
        writing = False

        def __call__(self):
            return False

    out = types.SimpleNamespace(frames=frames[None], audio=None, audio_sample_rate=None)
    written = write_outputs(out, [str(target)], "mp4", str(target), 8, False, False, Stop(), None, True)
    assert target.read_bytes() == b"the other run's video"
    assert written == [str(tmp_path / "vidax-output-1.mp4")] and os.path.getsize(written[0]) > 1000
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".vidax-")]  # no temporary file left
