"""Long videos on a diffusion-forcing (SkyReels-V2 DF) checkpoint: device memory independent of
the length, each chunk decoded as it ends (``on_chunk``) equal to the whole video's decode,
``vidax generate --seconds`` and the growing mp4 kept on Ctrl-C, chunk events in ``vidax serve``.

The checkpoint and pipeline: ``skyreels_df`` / ``skyreels_df_pipe`` of tests/conftest.py."""

from __future__ import annotations

import dataclasses
import gc
import os

import jax
import numpy as np
import pytest

import vidax
from vidax.models.skyreels_v2.long_video import FinishedChunk

#: Chunks of 9 frames (3 latent) repeating 5 (2 latent): each chunk adds one latent frame (4 frames).
CALL = dict(
    height=32,
    width=48,
    num_inference_steps=2,
    guidance_scale=1.0,
    base_num_frames=9,
    overlap_history=5,
    seed=3,
    progress=False,
    max_sequence_length=16,
)


@pytest.fixture
def df_path(skyreels_df):
    return skyreels_df


@pytest.fixture
def pipe(skyreels_df_pipe):
    return skyreels_df_pipe


def _live_bytes() -> int:
    return sum(a.nbytes for a in jax.live_arrays())


def _run_measured(pipe, num_frames: int) -> tuple[int, list, np.ndarray]:
    """(the most bytes of live device arrays seen at any step or chunk end, the chunks
    ``on_chunk`` got, the frames returned)."""
    seen, chunks = [], []

    def on_chunk(chunk: FinishedChunk) -> None:
        chunks.append(chunk)
        seen.append(_live_bytes())

    gc.collect()
    out = pipe(
        "a cat", num_frames=num_frames, callback=lambda i, n: seen.append(_live_bytes()), on_chunk=on_chunk, **CALL
    )
    return max(seen), chunks, out.frames


def test_device_memory_does_not_grow_with_the_length(pipe):
    """2 chunks and 6 chunks: the same peak of live device bytes (sampled after every step and
    chunk). Keeping the finished latents on the device grows it by one latent frame (1536 bytes
    here) per chunk: the tolerance is below that."""
    short, _, _ = _run_measured(pipe, 13)
    long, chunks, frames = _run_measured(pipe, 29)
    print(f"peak live device bytes: 13 frames {short}, 29 frames {long}")
    assert len(chunks) == 6 and frames.shape == (1, 29, 32, 48, 3)
    assert abs(long - short) < 1536 // 2


def test_chunks_streamed_equal_the_whole_decode(pipe):
    """``on_chunk`` gets every chunk's frames as it ends (the VAE's cache carried across chunks):
    together they are the video decoded at once, bit for bit, and the call returns them."""
    got: list[FinishedChunk] = []
    streamed = pipe("a cat", num_frames=21, on_chunk=got.append, **CALL).frames
    whole = pipe("a cat", num_frames=21, **CALL).frames
    assert [(c.index, c.count, c.frames.shape[1], c.frames_done, c.frames_total) for c in got] == [
        (0, 4, 9, 9, 21),
        (1, 4, 4, 13, 21),
        (2, 4, 4, 17, 21),
        (3, 4, 4, 21, 21),
    ]
    assert np.array_equal(np.concatenate([c.frames for c in got], axis=1), whole)
    assert np.array_equal(streamed, whole)
    assert np.abs(whole[0, 0] - whole[0, -1]).max() > 1e-3  # the frames differ: equality means something
    # keep_chunks=False (vidax generate's): the same chunks, and the call keeps none of them to return
    kept: list[FinishedChunk] = []
    none = pipe("a cat", num_frames=21, on_chunk=kept.append, keep_chunks=False, **CALL).frames
    assert none.shape == (1, 0, 32, 48, 3)
    assert np.array_equal(np.concatenate([c.frames for c in kept], axis=1), whole)
    # Tiled as the memory plan tiles (a 540P / 720P chunk's decode does not fit a 16 GB chip
    # untiled: larger tiles, all of one shape): each tile's cache carried from chunk to chunk in
    # host memory; the chunks equal the whole video's tiled decode. (2 tiles of 4 x 4 latent
    # pixels, the second ending at the edge: one tile program; 3 chunks)
    from vidax.models.wan.vae import WanTiling

    pipe.vae.tiling = WanTiling(32, 32, 16, 16, use_tiling=True, same_shape_tiles=True)
    try:
        tiles: list[FinishedChunk] = []
        pipe("a cat", num_frames=17, on_chunk=tiles.append, **CALL)
        tiled = pipe("a cat", num_frames=17, **CALL).frames
    finally:
        pipe.vae.disable_tiling()
    assert len(tiles) == 3 and np.array_equal(np.concatenate([c.frames for c in tiles], axis=1), tiled)
    assert np.abs(tiled - whole[:, :17]).max() > 1e-4  # tiles blended: not the untiled decode


def test_the_transformer_waits_in_host_memory_while_each_chunk_decodes(df_path, pipe, monkeypatch):
    """keep_transformer=False (what the plan chooses where the decode does not fit beside the
    transformer: SkyReels-V2-DF-1.3B at 544x960 on a 16 GB chip): the transformer's weights are in
    host memory while every streamed chunk decodes, as in a whole video's decode, and on the device
    for the steps between; the frames equal the resident pipeline's."""
    from flax import nnx

    from vidax.models.skyreels_v2.long_video import ChunkDecoder
    from vidax.parallel.offload import OffloadConfig

    staged = vidax.load_pipeline(df_path, dtype="float32", offload=OffloadConfig(keep_transformer=False))
    kinds, decode = [], ChunkDecoder.__call__

    def spy(self, z):
        kinds.append({a.sharding.memory_kind for a in jax.tree.leaves(nnx.state(staged.transformer))})
        return decode(self, z)

    monkeypatch.setattr(ChunkDecoder, "__call__", spy)
    got: list[FinishedChunk] = []
    frames = staged("a cat", num_frames=17, on_chunk=got.append, **CALL).frames
    assert len(got) == 3 and kinds == [{"pinned_host"}] * 3
    assert {a.sharding.memory_kind for a in jax.tree.leaves(nnx.state(staged.transformer))} == {"device"}
    monkeypatch.undo()
    assert np.array_equal(frames, pipe("a cat", num_frames=17, **CALL).frames)


def test_an_interrupted_long_video_keeps_the_chunks_done(pipe, tmp_path, capsys):
    """A signal during the third chunk (of four): the mp4 published under --output holds the two
    chunks done (13 frames), a valid video; no temporary file is left. While the run went on, the
    file being written (fragmented) played."""
    import signal

    import typer

    from vidax.cli.long_video import generate_streamed
    from vidax.cli.records import OutputOptions
    from vidax.interrupt import Stop
    from vidax.io.video import read_video

    stop, ends, growing = Stop(), [], []

    def step(i: int, n: int) -> None:  # the step callback restarts with every chunk
        if i == n - 1:
            ends.append(i)
        if len(ends) == 2 and i == 0:  # a step of chunk 3 done: the file being written plays, then Ctrl-C
            (tmp,) = [f for f in os.listdir(tmp_path) if f.startswith(".vidax-")]
            growing.append(read_video(tmp_path / tmp).shape[0])
            assert stop.temporary == {str(tmp_path / tmp)}  # what a second signal's exit removes
            stop.received.append(signal.SIGINT)

    call = pipe.check_call(pipe.info, "a cat", num_frames=21, cancel=stop, callback=step, **CALL)
    path = str(tmp_path / "long.mp4")
    output = OutputOptions(path, True, "mp4", False, True, 16)
    with pytest.raises(typer.Exit) as stopped:
        generate_streamed(lambda pipe, call, *_: pipe.generate(call), pipe, call, output, path, stop)
    assert stopped.value.exit_code == 128 + signal.SIGINT
    assert read_video(path).shape == (13, 32, 48, 3)
    assert os.listdir(tmp_path) == ["long.mp4"]
    said = capsys.readouterr().err
    assert "interrupted (SIGINT) in chunk 3 of 4 (after denoising step 1 of 2)" in said
    print(f"the growing file played {growing[0]} frames while chunk 3 ran")
    assert growing[0] >= 9  # chunk 1 at least (the encoder may hold chunk 2's last frames back)
    assert "(13 of 21 frames, 0.81 s: the 2 chunk(s) finished)" in said
    assert not stop.temporary


def test_a_second_signal_removes_the_growing_file(tmp_path):
    """A second signal during the run ends the process at once (vidax.interrupt.Stop): the file
    it was growing is removed first, so "nothing was written" holds. (A process of its own: the
    exit is os._exit; only the standard library is imported.)"""
    import subprocess
    import sys

    growing = tmp_path / ".vidax-x.mp4"
    growing.write_bytes(b"fragments")
    script = (
        "import os, signal, time\n"
        "from vidax.interrupt import Stop\n"
        "stop = Stop(); stop.install(); stop.temporary.add(os.environ['GROWING'])\n"
        "with stop.catching():\n"
        "    os.kill(os.getpid(), signal.SIGINT); os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ, GROWING=str(growing)), capture_output=True, timeout=60
    )
    assert done.returncode == 128 + 15, done
    assert done.stderr.decode().strip() == "interrupted again (SIGTERM): stopped at once; nothing was written"
    assert not growing.exists()


def test_seconds_on_the_command_line(df_path, ckpt, tmp_path, caplog):
    """--seconds 1.1 at --fps 16 is 18 frames, made as 17 (4k+1, said naming --seconds) in chunks
    written as they end (said per chunk with --no-progress too), overlap_history chosen for the small --base-num-frames; refused with
    --num-frames, and on a checkpoint that makes one pass beyond its default length."""
    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.io.video import read_video

    base = ["generate", "-p", "a cat", "--height", "32", "--width", "48", "--num-inference-steps", "2"]
    base += ["--guidance-scale", "1", "--fps", "16"]
    out = tmp_path / "s.mp4"
    r = CliRunner().invoke(
        app,
        [*base, "--checkpoint", df_path, "--seconds", "1.1", "--base-num-frames", "9", "--no-progress", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert "--seconds 1.1 at 16 fps is 18 frames" in caplog.text and "using 17 (1.06 s)" in caplog.text
    assert "--overlap-history 5" in r.output and "chunk 3 of 3 done: 17 of 17 frames" in r.output
    assert read_video(out).shape == (17, 32, 48, 3)
    r = CliRunner().invoke(app, [*base, "--checkpoint", df_path, "--seconds", "2", "--num-frames", "9"])
    assert r.exit_code == 2 and "--seconds 2 and --num-frames 9 are both given" in r.output, r.output
    r = CliRunner().invoke(app, [*base, "--checkpoint", ckpt, "--seconds", "5"])
    assert r.exit_code == 2 and "--seconds 5 makes 81 frames at 16 fps; WanPipeline" in r.output, r.output
    r = CliRunner().invoke(app, [*base, "--checkpoint", ckpt, "--seconds", "0"])
    assert r.exit_code == 2 and "--seconds must be a length in seconds > 0, got 0" in r.output, r.output


def test_serve_events_carry_the_chunks(pipe, tmp_path):
    """``vidax serve``: a long video's job streams a ``chunk`` event as its chunks finish (the
    last one, chunk 4 of 4, before ``done``), and its record keeps the last chunk. A request
    without ``overlap_history`` gets the default ``vidax generate`` gives (diffusers' None
    fails), said in the job's warnings in the request's spelling."""
    from starlette.testclient import TestClient

    from tests.test_serve import read_events
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=0)
    fields = {k: v for k, v in CALL.items() if k not in ("progress", "overlap_history")}
    with TestClient(create_app(runner), base_url="http://localhost") as client:
        job = client.post("/v1/videos", json={"prompt": "a cat", "num_frames": 21, **fields}).json()
        events = read_events(client, job["id"])
        record = client.get(f"/v1/videos/{job['id']}").json()
    assert events[-1][0] == "done", events
    chunks = [(d["chunk"], d["of"], d["frames"], d["num_frames"]) for n, d in events if n == "chunk"]
    assert chunks and chunks[-1] == (4, 4, 21, 21) and chunks == sorted(chunks), events
    assert [n for n, _ in events].index("chunk") < len(events) - 1
    assert record["chunk"] == {"chunk": 4, "of": 4, "frames": 21, "num_frames": 21}
    said = "each chunk repeats the last 5 frames of the one before (overlap_history=5;"
    assert any(said in w for w in record["warnings"]), record


def test_serve_saves_no_state_a_long_video_would_not_resume_from(pipe, tmp_path, monkeypatch):
    """The chunk loop does not resume from a saved denoising state (its steps restart in each
    chunk): with ``--save-every 1`` a long video's job saves none, so a restarted server starts
    it over instead of reporting a resume that did not happen."""
    import time

    import vidax.serve.jobs as jobs
    from vidax.serve.jobs import JobRunner, JobStore

    saved = []
    monkeypatch.setattr(jobs, "save_state", lambda *a, **k: saved.append(a[2]))
    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=1)
    runner.start()
    try:
        fields = {k: v for k, v in CALL.items() if k != "progress"}
        job = runner.submit({"prompt": "a cat", "num_frames": 13, **fields})
        deadline = time.monotonic() + 600
        while runner.get(job["id"])["status"] not in ("completed", "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert runner.get(job["id"])["status"] == "completed", runner.get(job["id"])
    finally:
        runner.stop(timeout=60)
        runner.store.close()
    assert saved == []


def test_extend_a_clip_from_the_command_line_and_python(df_path, tmp_path):
    """``vidax generate --video clip.mp4 --num-frames 25`` continues the clip: its 17 frames then
    25 more (the first 17 of them the clip's last, re-made), with no --overlap-history: the
    pipeline's default, SkyReels' 17 frames (diffusers' None fails), which a Python call gets too."""
    from typer.testing import CliRunner

    from vidax.checkpoint import Checkpoint
    from vidax.cli import app
    from vidax.io.video import read_video, write_video
    from vidax.models.skyreels_v2.pipeline import SkyReelsV2DiffusionForcingVideoToVideoPipeline as V2V

    clip = np.random.default_rng(0).integers(0, 256, (17, 32, 48, 3), dtype=np.uint8)
    write_video(clip, tmp_path / "clip.mp4", fps=16)
    out = tmp_path / "longer.npy"
    r = CliRunner().invoke(
        app,
        ["generate", "--checkpoint", df_path, "-p", "a cat", "--video", str(tmp_path / "clip.mp4")]
        + ["--num-frames", "25", "--base-num-frames", "25", "--num-inference-steps", "2", "--guidance-scale", "1"]
        + ["--height", "32", "--width", "48", "--max-sequence-length", "16", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    got = np.load(out)
    assert got.shape == (17 + 25, 32, 48, 3)
    np.testing.assert_allclose(got[:17], read_video(tmp_path / "clip.mp4") / np.float32(255), atol=1e-6)
    info = V2V.family.read_checkpoint(Checkpoint.open(df_path))
    call = V2V.check_call(info, "a cat", video=clip, num_frames=25, base_num_frames=25, height=32, width=48)
    assert call.extra["overlap_history"] == 17


def test_a_video_of_chunks_is_longer_than_the_models_rope_tables(pipe):
    """The RoPE tables span one chunk (diffusers takes their first rows for the chunk it
    denoises): a video of chunks may have more frames than the transformer's
    ``rope_max_seq_len`` latent frames make, a single chunk may not (checked before any work).
    The user test of issue 50 met `--num-frames 4097` refused on a 1024-row checkpoint."""
    from vidax.models.wan.pipeline import WanHooks

    most = WanHooks.size_limits(pipe.info).num_frames  # (rope_max_seq_len - 1) x 4 + 1 frames
    call = pipe.check_call(pipe.info, "a cat", num_frames=most + 4, **CALL)
    assert call.num_frames == most + 4
    assert max(c.num_latent_frames for c in type(pipe).family.chunks(pipe.info, call)) == 3
    # a typo's length is refused at once, before a chunk list is made (24,000,000,001 frames hung)
    with pytest.raises(
        vidax.errors.InputError, match=r"num_frames=24000000001 makes 5,999,999,999 chunks .* at most 10,000"
    ):
        pipe.check_call(pipe.info, "a cat", num_frames=24_000_000_001, **CALL)
    over = dict(CALL, base_num_frames=most + 4)
    with pytest.raises(
        vidax.errors.InputError, match=rf"base_num_frames={most + 4} makes a chunk longer .* {most} frames"
    ):
        pipe.check_call(pipe.info, "a cat", num_frames=most + 8, **over)


def test_the_text_to_video_pipeline_refuses_an_image(pipe):
    """diffusers' SkyReelsV2DiffusionForcingPipeline takes no image (a TypeError); vidax's made a
    text-to-video and dropped it. It is refused, naming the pipeline that takes it."""
    image = np.zeros((32, 48, 3), np.uint8)
    with pytest.raises(
        vidax.errors.InputError,
        match=r"^SkyReelsV2DiffusionForcingPipeline takes no image \(diffusers' does not either\); "
        r"for image-to-video use SkyReelsV2DiffusionForcingImageToVideoPipeline$",
    ):
        pipe("a cat", image=image, num_frames=9, **CALL)


def test_image_to_video_with_a_last_image_counts_its_frames(df_path):
    """Image-to-video with ``last_image`` (its latent frame appended to the chunk, dropped before
    the decode): the chunk's ``frames_total`` is the frames the call returns."""
    pipe = vidax.load_pipeline(df_path, dtype="float32", task="i2v")
    image = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    got: list[FinishedChunk] = []
    frames = pipe(image, "a cat", last_image=image, num_frames=9, on_chunk=got.append, **CALL).frames
    assert frames.shape[1] == 9 and [(c.frames.shape[1], c.frames_done, c.frames_total) for c in got] == [(9, 9, 9)]


def test_serve_progress_is_the_whole_jobs(pipe, tmp_path, monkeypatch):
    """``vidax serve``: a long job's ``progress`` (record and events) is the whole job's, not its
    chunk's: it grows through the chunks, each chunk's steps within its share of the job, below
    100 until the job is done. The user test of 50 saw it restart every chunk."""
    from starlette.testclient import TestClient

    from tests.test_serve import read_events
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    store = JobStore(tmp_path / "jobs")
    recorded = []  # (chunks finished, progress) of each record change that carries a progress
    update = store.update

    def recording(job_id, **changes):
        if "progress" in changes:
            recorded.append((len(chunks_seen), changes["progress"]))
        if "chunk" in changes:
            chunks_seen.append(changes["chunk"])
        return update(job_id, **changes)

    chunks_seen: list = []
    monkeypatch.setattr(store, "update", recording)
    runner = JobRunner(pipe, "df", store, save_every=0)
    with TestClient(create_app(runner), base_url="http://localhost") as client:
        fields = {k: v for k, v in CALL.items() if k != "progress"}
        job = client.post("/v1/videos", json={"prompt": "a cat", "num_frames": 21, **fields}).json()
        events = read_events(client, job["id"])
        record = client.get(f"/v1/videos/{job['id']}").json()
    assert record["status"] == "completed" and record["progress"] == 100, record
    count = len(chunks_seen)
    assert count == 4 and len(recorded) == count * CALL["num_inference_steps"], recorded
    progress = [p for _, p in recorded]
    assert progress == sorted(set(progress)) and progress[-1] < 100, recorded
    for done, p in recorded:  # a step of chunk done + 1 lies in that chunk's share
        assert 100 * done // count < p < 100 * (done + 1) // count + 1, recorded
    streamed = [d["progress"] for n, d in events if n == "progress"]
    assert streamed == sorted(streamed) and max(streamed) < 100, events


def test_serve_shutdown_ends_the_open_event_streams(pipe, tmp_path):
    """A SIGTERM with an events stream open (the user test of 50: the job ran 2 more chunks, the
    stream held the shutdown past uvicorn's grace and was cancelled with a traceback): the
    server's signal handler marks the runner stopping, the stream ends at once with ``stopping``,
    the long job stops at its next step and waits, queued, for the next server."""
    import signal

    import uvicorn
    from starlette.testclient import TestClient

    from vidax.serve.app import Server, create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=0)
    app = create_app(runner)
    server = Server(uvicorn.Config(app), runner)
    fields = {k: v for k, v in CALL.items() if k != "progress"}
    names = []
    with TestClient(app, base_url="http://localhost") as client:
        job = client.post("/v1/videos", json={"prompt": "a cat", "num_frames": 81, **fields}).json()
        with client.stream("GET", f"/v1/videos/{job['id']}/events") as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    names.append(line[7:])
                    if len(names) == 1:
                        server.handle_exit(signal.SIGTERM, None)
    record = runner.store.get(job["id"])
    assert server.should_exit and names[-1] == "stopping" and "done" not in names, names
    assert record["status"] == "queued" and record.get("chunk", {"chunk": 0})["chunk"] < 19, record


def test_serve_cancelled_long_job_says_its_chunk(pipe, tmp_path):
    """A long job cancelled after some chunks (DELETE) says in which chunk it stopped: its error
    and ``/content``'s 409 read "cancelled in chunk K of N (... denoising step ...)", K after the
    chunks it finished (the user test of 50 read only "cancelled before denoising step 1 of 30")."""
    import re
    import time

    from starlette.testclient import TestClient

    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=0)
    fields = {k: v for k, v in CALL.items() if k != "progress"}
    with TestClient(create_app(runner), base_url="http://localhost") as client:
        job_id = client.post("/v1/videos", json={"prompt": "a cat", "num_frames": 81, **fields}).json()["id"]
        deadline = time.monotonic() + 60
        while (runner.store.get(job_id).get("chunk") or {"chunk": 0})["chunk"] < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        finished = runner.store.get(job_id)["chunk"]["chunk"]
        assert client.delete(f"/v1/videos/{job_id}").status_code == 200
        while runner.get(job_id)["status"] != "failed" and time.monotonic() < deadline:
            time.sleep(0.01)
        content = client.get(f"/v1/videos/{job_id}/content")
    message = runner.get(job_id)["error"]["message"]
    found = re.fullmatch(r"cancelled in chunk (\d+) of 19 \((before|after) denoising step \d of 2\)", message)
    assert found and finished < int(found[1]) < 19, (finished, message)
    assert content.status_code == 409 and message in content.json()["error"]["message"], content.json()


def test_serve_fields_of_a_long_video_request(pipe, tmp_path):
    """``vidax serve`` on a diffusion-forcing checkpoint (the user test of 50), checked without
    running: ``fps`` is a field as ``vidax generate --fps`` is a flag (the mp4's rate, which
    ``seconds`` counts in, and the call's ``fps=``); an unknown field's message lists the fields
    of every task (``last_image``, ``input_video`` too); a bad upload is named by its file name,
    not by the server's copy."""
    from vidax.serve.fields import RequestError, Upload
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=0)  # not started: nothing runs
    fields = {k: v for k, v in CALL.items() if k != "progress"}
    job = runner.submit({"prompt": "a cat", "seconds": 2, "fps": 8, **fields})
    assert (job["fps"], job["num_frames"], job["seconds"]) == (8, 17, "2"), job
    assert runner._pending[job["id"]].call.extra["fps"] == 8.0
    with pytest.raises(RequestError) as e:
        runner.submit({"prompt": "a cat", "fps": 0, **fields})
    assert e.value.param == "fps" and "fps must be a number > 0 (frames per second), got 0" in e.value.message
    with pytest.raises(RequestError) as e:
        runner.submit({"prompt": "a cat", "bogus": 1, **fields})
    assert e.value.message.startswith("unknown field 'bogus'; this model takes"), e.value.message
    assert "last_image" in e.value.message and "input_video" in e.value.message, e.value.message
    copy = tmp_path / ".upload-x1y2"
    copy.write_bytes(b"not a video")
    with pytest.raises(RequestError) as e:
        runner.submit({"prompt": "a cat", "input_video": Upload(str(copy), "clip.mp4"), **fields})
    assert e.value.param == "input_video" and "'clip.mp4'" in e.value.message, e.value.message
    assert str(copy) not in e.value.message and ".upload-" not in e.value.message, e.value.message


def test_python_keywords_of_a_long_video_are_checked(pipe, caplog):
    """``base_num_frames=None`` and ``addnoise_condition`` past the scheduler's 1000 timesteps are
    refused naming the keyword, its value and what is valid (diffusers' check_inputs raises a
    TypeError on None); above 60 the call warns as diffusers does."""
    from vidax.errors import InputError

    kw = {k: v for k, v in CALL.items() if k not in ("progress", "seed")}
    with pytest.raises(InputError, match=r"base_num_frames=None must be an int >= 1"):
        pipe.check_call(pipe.info, "a cat", num_frames=21, **{**kw, "base_num_frames": None})
    with pytest.raises(InputError, match=r"addnoise_condition must be a number in \[0, 1000\], got 2000"):
        pipe.check_call(pipe.info, "a cat", num_frames=21, addnoise_condition=2000, **kw)
    pipe.check_call(pipe.info, "a cat", num_frames=21, addnoise_condition=61, **kw)
    assert "addnoise_condition=61.0 is large" in caplog.text


def test_keep_chunks_false_takes_on_chunk(pipe):
    """``keep_chunks=False`` returns no frames (on_chunk had them): without ``on_chunk`` it is refused naming both."""
    from vidax.errors import InputError

    kw = {k: v for k, v in CALL.items() if k not in ("progress", "seed")}
    with pytest.raises(InputError, match=r"keep_chunks=False without on_chunk would return no frames"):
        pipe.check_call(pipe.info, "a cat", num_frames=21, keep_chunks=False, **kw)


def test_the_frame_rounding_names_the_diffusers_pipeline_that_rounds(pipe, caplog):
    """num_frames=30 is made as 29 frames: the warning names diffusers' diffusion-forcing
    pipeline, which rounds so (the user test saw "as diffusers' WanPipeline does")."""
    kw = {k: v for k, v in CALL.items() if k not in ("progress", "seed")}
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        assert pipe.check_call(pipe.info, "a cat", num_frames=30, **kw).num_frames == 29
    assert "using 29, as diffusers' SkyReelsV2DiffusionForcingPipeline does" in caplog.text, caplog.text


def test_an_overlap_cut_to_whole_causal_blocks_is_said_once(pipe, caplog):
    """overlap_history=9 (3 latent frames) with causal_block_size=2 is cut to 2 latent frames, as
    diffusers does: said once for the video, not once per chunk (the user test saw it twice)."""
    kw = {k: v for k, v in CALL.items() if k not in ("progress", "seed", "overlap_history", "base_num_frames")}
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        call = pipe.check_call(
            pipe.info, "a cat", num_frames=41, base_num_frames=17, overlap_history=9, causal_block_size=1, **kw
        )
        type(pipe).family.chunks(pipe.info, dataclasses.replace(call, extra={**call.extra, "causal_block_size": 2}))
    cut = [r for r in caplog.records if "are cut to 2" in r.getMessage()]
    assert len(cut) == 1 and "causal_block_size=2" in cut[0].getMessage(), caplog.text


def test_causal_block_size_error_names_only_what_was_given(pipe):
    """A causal_block_size that does not divide one chunk's latent frames: the error names the
    arguments of the chunk, leaving out an overlap_history not given (no "overlap_history=None")."""
    from vidax.errors import InputError

    with pytest.raises(InputError) as refused:
        pipe.check_call(pipe.info, "a cat", num_frames=13, height=32, width=48, causal_block_size=3)
    said = str(refused.value)
    assert "causal_block_size=3 must divide the 4 latent frames" in said and "overlap_history" not in said, said
