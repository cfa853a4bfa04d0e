"""Several latent streams and sound through the shared pipeline: the toy family's sound variant
(``tests.toy_family``: ``ToySoundPipeline``, video and audio latents denoised together by a joint
attention transformer, an audio VAE to mel and a vocoder to a waveform at its declared sample rate)
runs through the API, the CLI (mp4 with a video and an AAC stream, ``.wav``), ``vidax inspect``,
a mesh and block streaming, with no shared vidax file naming it."""

import os
import subprocess
import sys

import av
import jax
import numpy as np
import pytest

import vidax
from tests.test_cli import _vidax_here
from vidax.io.video import read_audio, read_video, write_video
from vidax.parallel.offload import OffloadConfig, offloaded_stacks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRANSFORMER = {
    "_class_name": "ToySoundTransformer3DModel",
    "in_channels": 16,
    "audio_in_channels": 32,
    "dim": 32,
    "text_dim": 64,
    "num_attention_heads": 4,
    "num_layers": 2,
}
AUDIO_VAE = {
    "_class_name": "ToyAudioVAE",
    "latent_channels": 4,
    "latent_mel_bins": 8,
    "mel_bins": 16,
    "temporal_compression": 4,
}
VOCODER = {
    "_class_name": "ToyVocoder",
    "mel_bins": 16,
    "hop_length": 375,
    "out_channels": 2,
    "output_sampling_rate": 24000,
}
#: The toy's default video: 5 frames at 8 fps (0.625 s) -> 0.625 s x 24000 / (375 x 4) = 10
#: audio latents -> 40 mel frames -> 15000 samples (0.625 s).
SAMPLES = 15000


@pytest.fixture(scope="module")
def registered():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VIDAX_FAMILIES", "tests.toy_family")
        mp.syspath_prepend(REPO)
        yield


@pytest.fixture(scope="module")
def sound_checkpoint(tmp_path_factory, registered):
    from tests.toy_family.checkpoint import write_toy_checkpoint

    return write_toy_checkpoint(
        tmp_path_factory.mktemp("sound") / "ckpt",
        str(tmp_path_factory.mktemp("cache")),
        "ToySoundPipeline",
        {"transformer": TRANSFORMER, "audio_vae": AUDIO_VAE, "vocoder": VOCODER},
    )


@pytest.fixture(scope="module")
def pipe(sound_checkpoint):
    return vidax.load_pipeline(sound_checkpoint)


@pytest.fixture(scope="module")
def out(pipe):
    return pipe("a toy drum", seed=3, progress=False)


def test_video_and_sound_through_the_api(pipe, out):
    from vidax.pipelines.contracts import PROTOCOLS

    for name, kind in (("transformer", "transformer"), ("audio_vae", "audio_decoder"), ("vocoder", "vocoder")):
        assert isinstance(getattr(pipe, name), PROTOCOLS[kind]), name  # the sound contracts, kept
    assert pipe.capabilities.audio and "audio_latents" in pipe.capabilities.call_args
    assert out.frames.shape == (1, 5, 32, 48, 3)
    assert out.audio.shape == (1, 2, SAMPLES) and out.audio.dtype == np.float32
    assert np.abs(out.audio).max() <= 1.0 and np.abs(out.audio).std() > 1e-3
    assert out.audio_sample_rate == 24000  # the vocoder's declared output_sampling_rate
    assert "audio decode" in out.stats.summary() and out.stats.audio_decode_s > 0


def test_each_stream_gets_its_own_key_the_video_the_seed_itself(pipe, out):
    """seed=s draws the video's noise from PRNGKey(s) as every one-stream family does (so a seed
    gives the same video whatever streams a family adds), the audio's from fold_in(PRNGKey(s), 1);
    and the sound depends on the audio noise."""
    key = jax.random.PRNGKey(3)
    shapes = pipe.family.latent_shapes(pipe.info, pipe.check_call(pipe.info, "a toy drum", seed=3))
    assert shapes == {"latents": (1, 16, 2, 4, 6), "audio_latents": (1, 4, 10, 8)}
    video = np.asarray(jax.random.normal(key, shapes["latents"]))
    audio = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), shapes["audio_latents"]))
    given = pipe("a toy drum", latents=video, audio_latents=audio, progress=False)
    np.testing.assert_array_equal(given.frames, out.frames)
    np.testing.assert_array_equal(given.audio, out.audio)
    other = pipe("a toy drum", latents=video, audio_latents=-audio, progress=False)
    assert np.abs(other.audio - out.audio).max() > 1e-3  # the second stream is denoised and decoded
    with pytest.raises(
        vidax.InputError,
        match=r"audio_latents have shape \(1, 4, 9, 8\), expected "
        r"\(1, 4, 10, 8\) = \(batch, channels, audio latent length",
    ):
        pipe("a toy drum", audio_latents=audio[:, :, :9])
    bad = audio.copy()
    bad[0, 1, 2, 3] = np.nan
    with pytest.raises(vidax.InputError, match="audio_latents has 1 NaN/Inf"):
        pipe("a toy drum", audio_latents=bad)


def test_latent_output_and_decode_audio_false(pipe, out):
    lat = pipe("a toy drum", seed=3, output_type="latent", progress=False)
    assert lat.frames.shape == (1, 16, 2, 4, 6) and lat.audio.shape == (1, 4, 10, 8)
    assert lat.audio_sample_rate is None and "audio_decode_s" not in lat.stats.timed_phases
    silent = pipe("a toy drum", seed=3, decode_audio=False, progress=False)
    np.testing.assert_array_equal(silent.frames, out.frames)
    assert silent.audio is None and "audio decode" not in silent.stats.summary()
    with pytest.raises(vidax.InputError, match="decode_audio must be True or False, got 'no'"):
        pipe("a toy drum", decode_audio="no")


def test_streamed_blocks_and_mesh_equal_one_device(sound_checkpoint, out):
    """Both streams through block streaming (one layer per chunk, the audio VAE and vocoder
    staged) and through a 2x2x2 mesh (batch, heads and sequence split) equal the resident
    single-device run: bit for bit streamed; on the mesh to float32 rounding (the sums of
    tensor-parallel matmuls and the attention split by heads change the order of additions)."""
    streamed = vidax.load_pipeline(sound_checkpoint, offload=OffloadConfig(chunk=1, keep_vae=False))
    assert [(b.attr, b.sizes) for b in offloaded_stacks(streamed.transformer)] == [("blocks", [1, 1])]
    s = streamed("a toy drum", seed=3, progress=False)
    np.testing.assert_array_equal(s.frames, out.frames)
    np.testing.assert_array_equal(s.audio, out.audio)
    del streamed
    sharded = vidax.load_pipeline(sound_checkpoint, mesh="2x2x2")
    m = sharded("a toy drum", seed=3, guidance_scale=4.0, progress=False)
    np.testing.assert_allclose(m.frames, out.frames, atol=2e-5)
    np.testing.assert_allclose(m.audio, out.audio, atol=2e-5)


def test_writers_put_the_sound_beside_npy_and_frames(out, tmp_path):
    """.npy and frame-folder outputs get a 16-bit .wav beside them at the declared rate; an existing
    .wav there (a file the user did not name) is replaced only with overwrite=True."""
    write_video(out.frames[0], tmp_path / "v.npy", audio=out.audio[0], sample_rate=out.audio_sample_rate)
    wave, rate = read_audio(tmp_path / "v.wav")
    assert rate == 24000 and wave.shape == (2, SAMPLES)
    np.testing.assert_allclose(wave, out.audio[0], atol=1 / 32767 + 1e-6)  # 16-bit PCM rounding
    write_video(out.frames[0], tmp_path / "frames", audio=out.audio[0], sample_rate=out.audio_sample_rate)
    assert read_audio(tmp_path / "frames.wav")[1] == 24000 and len(os.listdir(tmp_path / "frames")) == 5
    (tmp_path / "w.wav").write_text("mine")
    with pytest.raises(
        vidax.InputError, match="its sound goes to .*w.wav' beside it, which exists; pass overwrite=True"
    ):
        write_video(out.frames[0], tmp_path / "w.npy", audio=out.audio[0], sample_rate=24000)
    assert (tmp_path / "w.wav").read_text() == "mine" and not (tmp_path / "w.npy").exists()


def test_mp4_sound_at_a_rate_aac_does_not_encode_is_resampled(tmp_path, caplog):
    """Sound at 240 Hz (Cosmos 3's tiny sound tokenizer): the mp4's AAC track is resampled to the
    nearest AAC rate, 7350 Hz, with a log line, instead of failing at the end (avcodec_open2 22)."""
    t = np.arange(480) / 240
    audio = 0.5 * np.stack([np.sin(2 * np.pi * 5 * t), np.cos(2 * np.pi * 3 * t)]).astype(np.float32)
    with caplog.at_level("WARNING", logger="vidax.io"):
        write_video(np.zeros((48, 16, 16, 3), np.float32), tmp_path / "v.mp4", fps=24, audio=audio, sample_rate=240)
    assert "the sound's 240 Hz is not a rate AAC encodes: the mp4's sound track is resampled to 7350 Hz" in caplog.text
    with av.open(str(tmp_path / "v.mp4")) as c:
        sound = c.streams.audio[0]
        assert sound.sample_rate == 7350 and sound.channels == 2
        seconds = float(sound.duration * sound.time_base)
        wave = np.concatenate([f.to_ndarray().reshape(2, -1) for f in c.decode(audio=0)], axis=-1)
    assert abs(seconds - 2.0) <= 1024 / 7350 + 1e-6  # the 2 s of sound, padded to whole AAC frames (1024 samples)
    assert np.max(np.abs(wave)) == pytest.approx(0.5, abs=0.05)  # the sound, not silence


def _vidax(*args):
    env = {
        **os.environ,
        "VIDAX_FAMILIES": "tests.toy_family",
        "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run([sys.executable, "-m", "vidax", *args], capture_output=True, text=True, env=env, timeout=600)


def test_cli_mp4_has_video_and_sound_in_sync(sound_checkpoint, tmp_path):
    mp4 = tmp_path / "toy.mp4"
    r = _vidax(
        "generate",
        "-p",
        "a toy drum",
        "--checkpoint",
        sound_checkpoint,
        "-o",
        str(mp4),
        "--no-progress",
        "--offload-blocks",
        "1",
    )
    assert r.returncode == 0, r.stderr
    assert "audio decode" in r.stderr and "sound 0.62 s at 24000 Hz" in r.stderr
    assert read_video(mp4).shape == (5, 32, 48, 3)
    with av.open(str(mp4)) as c:
        video, sound = c.streams.video[0], c.streams.audio[0]
        seconds = [float(s.duration * s.time_base) for s in (video, sound)]
        assert sound.codec_context.name == "aac" and sound.sample_rate == 24000 and sound.channels == 2
    assert seconds[0] == pytest.approx(5 / 8)
    assert abs(seconds[0] - seconds[1]) < 1 / 8  # within one video frame (8 fps)


def test_cli_wav_alone_and_no_audio(sound_checkpoint, tmp_path):
    wav = tmp_path / "toy.wav"
    r = _vidax_here("generate", "-p", "a toy drum", "--checkpoint", sound_checkpoint, "-o", str(wav), "--no-progress")
    assert r.returncode == 0, r.stderr
    wave, rate = read_audio(wav)
    assert rate == 24000 and wave.shape == (2, SAMPLES)
    assert sorted(os.listdir(tmp_path)) == ["toy.wav"]
    # The line says only the sound was written (the frames were made, not kept).
    assert (
        f"wrote {wav} (the sound only, 0.62 s at 24000 Hz; the video's 5 frames of 32x48 (HxW) were not "
        "written)" in r.stderr
    ), r.stderr
    npy = tmp_path / "toy.npy"
    r = _vidax_here(
        "generate", "-p", "a toy drum", "--checkpoint", sound_checkpoint, "-o", str(npy), "--no-progress", "--no-audio"
    )
    assert r.returncode == 0, r.stderr
    # toy.wav beside toy.npy is the first run's sound: kept (never removed), and said to be stale.
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        f"warning: {wav} beside {npy} is from an earlier run and was not replaced (this run made no "
        "sound); it is not this video's sound"
    ], r.stderr
    assert "vae decode" in r.stderr and "audio decode" not in r.stderr  # its decode skipped
    assert sorted(os.listdir(tmp_path)) == ["toy.npy", "toy.wav"]  # no .wav written beside the .npy
    r = _vidax_here("generate", "-p", "x", "--checkpoint", sound_checkpoint, "-o", str(wav), "--no-audio")
    assert r.returncode == 2 and "error: --output" in r.stderr and "--no-audio leaves the sound out" in r.stderr


def test_inspect_shows_the_sound_components(sound_checkpoint):
    r = _vidax("inspect", sound_checkpoint)
    assert r.returncode == 0, r.stderr
    assert "ToyAudioVAE" in r.stdout and "ToyVocoder" in r.stdout and "output_sampling_rate=24000" in r.stdout
    assert "sound: yes (latent streams latents, audio_latents" in r.stdout


def test_failed_write_keeps_the_frames_and_the_sound(sound_checkpoint, tmp_path, monkeypatch):
    """The mp4 writer fails after generation (disk full): the frames and the sound are both kept
    as .npy beside the requested path, the one error line says where, exit 1. An --fps other
    than the model's frame rate is warned about (video and sound would drift apart)."""
    from typer.testing import CliRunner

    import vidax.io.video as video
    from vidax.cli import app

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(video, "_write_mp4", full_disk)
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "a toy drum",
            "--checkpoint",
            sound_checkpoint,
            "-o",
            str(tmp_path / "v.mp4"),
            "--no-progress",
            "--fps",
            "16",
        ],
    )
    assert r.exit_code == 1, r.output
    # --fps 16 is not the 8 fps the sound was made for: said before writing.
    assert "warning: at --fps 16 the video lasts 0.31 s but its sound 0.62 s" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["v-audio.unwritten.npy", "v.unwritten.npy"]
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "v-audio.unwritten.npy" in lines[0]
    assert "(videos, channels, samples) in [-1, 1] at 24000 Hz" in lines[0]
    sound = np.load(tmp_path / "v-audio.unwritten.npy")
    assert sound.shape == (1, 2, SAMPLES) and sound.dtype == np.float32 and np.abs(sound).max() > 0


def test_served_video_has_its_sound(pipe, tmp_path):
    # vidax serve writes a job's mp4 with the model's sound as its AAC track (in-process: the
    # worker thread runs the job on the module's pipeline).
    import time

    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(pipe, "toy-sound", JobStore(tmp_path / "jobs"))
    runner.start()
    try:
        job = runner.submit({"prompt": "a toy drum", "num_inference_steps": 1, "seed": 3})
        deadline = time.monotonic() + 600
        while runner.get(job["id"])["status"] not in ("completed", "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert runner.get(job["id"])["status"] == "completed", runner.get(job["id"])
        with av.open(runner.store.video_path(job["id"])) as c:
            video, sound = c.streams.video[0], c.streams.audio[0]
            seconds = [float(s.duration * s.time_base) for s in (video, sound)]
            assert sound.codec_context.name == "aac" and sound.sample_rate == 24000
        assert abs(seconds[0] - seconds[1]) < 1 / 8  # within one video frame (8 fps)
    finally:
        runner.stop(timeout=60)
        runner.store.close()
