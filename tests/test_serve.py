"""`vidax serve` against a real server: started as `python -m vidax serve` on 127.0.0.1 (a free
port) with the tiny checkpoint, driven through httpx (and the page through headless Chromium),
stopped with SIGTERM at the end (asserting it exits 0).

One server serves the module; the restart test runs its own. Every vidax process here shares
one JAX compile-cache folder of the module's own, so a shape compiled by one (the server, the
`vidax generate` it is compared with, the restarted server) is read by the others.
"""

import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from tests.test_new_family import toy_checkpoint, toy_registered  # noqa: F401 (fixtures)
from vidax.errors import InputError
from vidax.io.video import read_video

# The shape most tests use (compiled once); the page test uses another so that its job compiles
# while the page shows it running.
SHAPE = dict(size="48x32", num_frames=5, num_inference_steps=2)
SMALL_CALL = dict(height=32, width=48, num_frames=5)  # SHAPE as pipeline call keywords
TIMEOUT = 600  # seconds a job of the tiny checkpoint may take on a loaded 2-core machine
FINAL = ("completed", "failed")


class Server:
    """``python -m vidax serve`` in a subprocess, on a free port of 127.0.0.1."""

    def __init__(self, ckpt: str, jobs_dir: Path, compile_cache: Path, *args: str, env: dict | None = None):
        self.log = jobs_dir.parent / f"{jobs_dir.name}-server-{time.monotonic_ns()}.log"
        env = dict(os.environ, VIDAX_COMPILE_CACHE=str(compile_cache), **(env or {}))
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vidax",
                    "serve",
                    "--checkpoint",
                    ckpt,
                    "--port",
                    "0",
                    "--jobs-dir",
                    str(jobs_dir),
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + TIMEOUT
        while not (m := re.search(r"on (http://127\.0\.0\.1:\d+)/", self.output())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"vidax serve did not start:\n{self.output()}")
            time.sleep(0.2)
        self.url = m.group(1)
        self.http = httpx.Client(base_url=self.url, timeout=120)
        assert self.http.get("/health").json()["status"] == "ok"

    def output(self) -> str:
        return self.log.read_text()

    def post(self, **fields) -> httpx.Response:
        return self.http.post("/v1/videos", json=fields)

    def wait(self, job_id: str, until=lambda job: job["status"] in FINAL) -> dict:
        """The job once ``until(job)``, polled; fails saying so when :data:`TIMEOUT` passes or
        the server has exited (with its output)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"vidax serve exited ({self.proc.returncode}) while job {job_id} was awaited:\n{self.output()}"
                )
            if until(job := self.http.get(f"/v1/videos/{job_id}").json()):
                return job
            assert time.monotonic() < deadline, f"job {job_id} is still {job} after {TIMEOUT} s"
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait for the process; its exit status."""
        self.http.close()
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="module")
def server(ckpt, tmp_path_factory, compile_cache):
    s = Server(ckpt, tmp_path_factory.mktemp("serve") / "jobs", compile_cache, "--queue-size", "2", "--access-log")
    yield s
    assert s.stop() == 0, s.output()
    assert "Traceback" not in s.output(), s.output()
    # Its log is a file: whole lines (the load's status line too), no tqdm bar redrawn with \r.
    assert "\r" not in s.output() and re.search(r"\nloading .*: \d+\.\d s\n", s.output()), s.output()
    assert '"GET /health HTTP/1.1" 200' in s.output()  # --access-log


def _frames(content: bytes, tmp_path: Path) -> np.ndarray:
    path = tmp_path / f"content-{time.monotonic_ns()}.mp4"
    path.write_bytes(content)
    return read_video(path)


def test_job_runs_to_completion_and_equals_vidax_generate(server, ckpt, compile_cache, tmp_path):
    r = server.post(prompt="a red car at night", seed=7, **SHAPE)
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "queued" and job["object"] == "video" and job["size"] == "48x32"
    assert job["seed"] == 7 and job["num_frames"] == 5 and job["model"] == ckpt
    assert job["fps"] == 16 and type(job["fps"]) is int  # the checkpoint's 16 fps, not 16.0
    done = server.wait(job["id"])
    assert done["status"] == "completed", done
    assert done["progress"] == 100 and done["step"] == done["num_inference_steps"] == 2
    content = server.http.get(f"/v1/videos/{job['id']}/content")
    assert content.status_code == 200 and content.headers["content-type"] == "video/mp4"
    served = _frames(content.content, tmp_path)
    assert served.shape == (5, 32, 48, 3)

    out = tmp_path / "cli.mp4"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vidax",
            "generate",
            "--checkpoint",
            ckpt,
            "--prompt",
            "a red car at night",
            "--seed",
            "7",
            "--width",
            "48",
            "--height",
            "32",
            "--num-frames",
            "5",
            "--num-inference-steps",
            "2",
            "--output",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=dict(os.environ, VIDAX_COMPILE_CACHE=str(compile_cache)),
    )
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(served, read_video(out))  # the same video, through the same writer
    # Another prompt gives another video (the comparison above is not between two constant videos).
    assert np.abs(served.astype(int) - served[:1].astype(int)).max() > 0
    # A request's step cache (the CLI's --cache syntax) runs for that job only: its second step
    # skips (any change is under the threshold), and the job's stats say so.
    job = server.post(prompt="a red car at night", seed=7, cache="first_block:1e9", **SHAPE).json()
    done = server.wait(job["id"])
    assert done["status"] == "completed", done
    assert "2 skipped (per step: cond CS, uncond CS)" in done["stats"]["cache"], done["stats"]


def test_three_concurrent_requests_complete_and_a_fourth_gets_429(server, tmp_path):
    # 20 steps each, so the first job still runs when the fourth request comes (milliseconds after).
    fields = dict(SHAPE, num_inference_steps=20)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda seed: server.post(prompt="a boat", seed=seed, **fields), (1, 2, 3)))
    assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
    full = server.post(prompt="a boat", seed=4, **fields)
    assert full.status_code == 429, full.text
    assert full.json()["error"]["code"] == "queue_full" and "queue is full" in full.json()["error"]["message"]
    jobs = [server.wait(a.json()["id"]) for a in answers]
    assert [j["status"] for j in jobs] == ["completed"] * 3, jobs
    assert sorted(j["seed"] for j in jobs) == [1, 2, 3]
    listed = {j["id"] for j in server.http.get("/v1/videos", params={"limit": 100}).json()["data"]}
    assert {j["id"] for j in jobs} <= listed
    # A finished job is deleted with its video (OpenAI's DELETE).
    gone = server.http.delete(f"/v1/videos/{jobs[0]['id']}").json()
    assert gone == {"id": jobs[0]["id"], "object": "video.deleted", "deleted": True}
    assert server.http.get(f"/v1/videos/{jobs[0]['id']}").status_code == 404
    assert server.http.get(f"/v1/videos/{jobs[1]['id']}/content").status_code == 200


BAD_FIELDS = [
    (dict(size="48x40"), "size", "size's height and size's width must be multiples of 16"),
    (dict(size="big"), "size", "size must be 'WIDTHxHEIGHT'"),
    (dict(height=40, width=48, size=None), "height", "height and width must be multiples of 16 (the VAE"),
    (dict(seconds=300, num_frames=None), "seconds", "seconds=300 (4801 frames at 16 fps) is more than"),
    (dict(num_inference_steps=0), "num_inference_steps", "num_inference_steps must be a positive integer, got 0"),
    (dict(num_inference_steps=2000), "num_inference_steps", "num_inference_steps=2000 is more than"),
    (dict(seconds="abc", num_frames=None), "seconds", 'seconds must be a number > 0, got "abc"'),
    (dict(seconds=1), "seconds", "seconds and num_frames are both given"),
    (dict(seed=-1), "seed", "seed=-1 is out of range"),
    (dict(seed="x"), "seed", "seed must be an integer"),
    (dict(prompt=" "), "prompt", "prompt is empty"),
    (dict(prompt=["a", "b"]), "prompt", "prompt must be a string"),
    (dict(prompt=None), "prompt", "prompt is required: describe the video (a string)"),
    (dict(negative_prompt=["a"]), "negative_prompt", "negative_prompt must be a string"),
    # Refused at the door: the memory estimate runs at POST, naming the field and what fits.
    (dict(size="16000x16000"), "size", "fits at num_frames=5; or try fewer num_frames"),
    (
        dict(max_sequence_length=100000),
        "max_sequence_length",
        "give a smaller max_sequence_length; max_sequence_length=",
    ),
    (dict(preset="nope"), "preset", "preset='nope' is not a preset of WanPipeline; its presets: lightx2v, causvid"),
    (dict(guidance_scale=-1), "guidance_scale", "guidance_scale must be a finite number >= 0"),
    (dict(model="someone/else"), "model", "model='someone/else' is not loaded"),
    (dict(frame_rate=24), "frame_rate", "unknown field 'frame_rate'"),
    (
        dict(guidance_scale_2=2.0),
        "guidance_scale_2",
        "guidance_scale_2=2.0 is only used by checkpoints with two experts",
    ),
    # The step cache: the CLI's --cache syntax, checked as it is (SHAPE has 2 steps).
    (dict(cache="first_block:-0.1"), "cache", "THRESHOLD must be a finite number >= 0, got -0.1"),
    (dict(cache="mag:[1.0, 0.9, 0.8]"), "cache", "the list holds 3 ratios, the call has 2 steps"),
    (
        dict(cache="mag:[1.0, -0.9]"),
        "cache",
        "the list must hold a flat list of finite numbers >= 0 (ratios of "
        "residual norms, one per step): a JSON list, or numbers separated by spaces or commas, as cache='mag' prints "
        "them; entry 1 is -0.9, below 0",
    ),
    (dict(cache="mag:/etc/hostname"), "cache", "give the ratios inline"),
    (dict(cache="fast"), "cache", "cache='fast': valid values are first_block:THRESHOLD"),
    (dict(cache=0.05), "cache", "cache=0.05 must be a string"),
]


@pytest.mark.fast
def test_bad_fields_get_400_naming_the_field(server):
    before = len(server.http.get("/v1/videos", params={"limit": 100}).json()["data"])
    for change, field, message in BAD_FIELDS:
        fields = {k: v for k, v in {"prompt": "a cat", **SHAPE, **change}.items() if v is not None}
        r = server.post(**fields)
        assert r.status_code == 400, (change, r.text)
        error = r.json()["error"]
        assert error["param"] == field and message in error["message"], (change, error)
        assert "\n" not in error["message"] and "memory_check" not in error["message"]
    # Form fields (the page's requests) are read as the numbers they spell, else named as given.
    r = server.http.post("/v1/videos", data={"prompt": "a cat", "num_inference_steps": "two"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "num_inference_steps"
    assert "got two" in r.json()["error"]["message"]  # a form's text unquoted, as sent
    # An image for a text-to-video model.
    r = server.http.post(
        "/v1/videos",
        data={"prompt": "a cat"},
        files={"input_reference": ("first.png", b"\x89PNG not really", "image/png")},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_reference", r.text
    assert "does not do image-to-video" in r.json()["error"]["message"]
    r = server.http.post("/v1/videos", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    # JSON sent as a form (curl -d without a content-type): the answer names the header to send.
    r = server.http.post(
        "/v1/videos", content=b'{"prompt": "a cat"}', headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 415 and "'content-type: application/json'" in r.json()["error"]["message"], r.text
    # Nothing was queued.
    assert len(server.http.get("/v1/videos", params={"limit": 100}).json()["data"]) == before


def test_cancel_stops_a_running_job_between_steps(server):
    running = server.post(prompt="a long one", seed=5, **dict(SHAPE, num_inference_steps=500)).json()
    queued = server.post(prompt="never runs", seed=6, **SHAPE).json()
    server.wait(running["id"], until=lambda job: job["step"] >= 1)
    # The queued job is cancelled at once.
    cancelled = server.http.delete(f"/v1/videos/{queued['id']}").json()
    assert cancelled["status"] == "failed" and cancelled["error"] == {
        "code": "cancelled",
        "message": "cancelled before it started",
    }
    cancelling = server.http.delete(f"/v1/videos/{running['id']}")
    assert cancelling.status_code == 200 and cancelling.json()["cancel_requested"] is True, cancelling.text
    job = server.wait(running["id"])
    assert job["status"] == "failed" and job["error"]["code"] == "cancelled", job
    m = re.fullmatch(r"cancelled after denoising step (\d+) of 500", job["error"]["message"])
    assert m and 1 <= int(m.group(1)) < 500 and job["step"] == int(m.group(1)), job
    content = server.http.get(f"/v1/videos/{running['id']}/content")
    assert content.status_code == 409 and content.json()["error"]["code"] == "video_failed", content.text
    assert content.json()["error"]["message"] == f"{running['id']} failed, so it has no video (cancelled: {m.group()})"
    # One line per job event in the server's log, at the default verbosity.
    for line in (
        f"{queued['id']} queued: 48x32, 5 frames, 2 steps (position ",
        f"{queued['id']} cancelled before it started",
        f"{running['id']} started: denoising step 1 of 500",
        f"{running['id']} cancelling: stops at the next step",
        f"{running['id']} {m.group()}",
    ):
        assert f"INFO vidax.serve.jobs: {line}" in server.output(), (line, server.output())
    assert server.http.get("/health").json() == {
        "status": "ok",
        "model": running["model"],
        "queued": 0,
        "running": None,
    }


@pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")  # the SDK's notice about OpenAI's own service
def test_openai_sdk_pages_through_every_job(server):
    """The official ``openai`` client's ``videos.list()`` iterates past its first page: the list
    object carries ``last_id`` (and ``first_id``), which its pager asks the next page after."""
    import openai

    for seed in range(5):  # cancelled at once: listed jobs, no run
        job = server.post(prompt="listed", seed=seed, **dict(SHAPE, num_inference_steps=500)).json()
        assert server.http.delete(f"/v1/videos/{job['id']}").status_code == 200
    listed = server.http.get("/v1/videos", params={"limit": 100}).json()
    ids = [j["id"] for j in listed["data"]]
    assert len(ids) >= 5 and (listed["first_id"], listed["last_id"], listed["has_more"]) == (ids[0], ids[-1], False)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    page = client.videos.list(limit=2)
    assert [v.id for v in page.data] == ids[:2] and page.has_more and page.last_id == ids[1]
    assert [v.id for v in client.videos.list(limit=2)] == ids  # every page, newest first
    assert [v.id for v in client.videos.list(limit=3, order="asc")] == ids[::-1]


@pytest.mark.fast
def test_a_failed_jobs_error_code_is_snake_case_as_the_apis_others():
    from vidax.errors import NumericalError, OutOfMemoryError
    from vidax.serve.records import error_code

    assert [error_code(e) for e in (OutOfMemoryError("x"), NumericalError("x"), InputError("x"))] == [
        "out_of_memory_error",
        "numerical_error",
        "input_error",
    ]


@pytest.mark.fast
def test_unknown_id_is_404(server):
    for method, path in (
        ("GET", "/v1/videos/video_nope"),
        ("GET", "/v1/videos/video_nope/content"),
        ("DELETE", "/v1/videos/video_nope"),
    ):
        r = server.http.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"] == {
            "message": "no video with id 'video_nope'",
            "type": "invalid_request_error",
            "param": "video_id",
            "code": "not_found",
        }


def test_listens_only_on_the_given_host(server):
    listening = [
        c.laddr for c in psutil.Process(server.proc.pid).net_connections("inet") if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening


def test_models_and_health(server, ckpt):
    model = server.http.get("/v1/models").json()["data"][0]
    assert model["id"] == ckpt and model["tasks"] == ["t2v"] and model["image"] is False
    assert model["defaults"]["height"] == 96 and model["size_multiple"] == [16, 16]


def _columns_of_color(image, box, color, tolerance=8):
    """How many pixel columns of ``box`` (left, top, right, bottom) have ``color`` in their middle row."""
    left, top, right, bottom = (round(v) for v in box)
    row = np.asarray(image)[(top + bottom) // 2, left:right].astype(int)
    return int((np.abs(row - color).max(axis=1) <= tolerance).sum()), right - left


FILL = (37, 99, 235)  # the page's progress bar fill


def test_page_in_headless_chromium(server, tmp_path):
    from tests.webdriver import Chromium

    # An earlier job that failed (cancelled), with a long prompt: its row says why, the prompt cut.
    failed = server.post(prompt="a very long prompt " * 50, seed=9, **dict(SHAPE, num_inference_steps=500)).json()
    assert server.http.delete(f"/v1/videos/{failed['id']}").status_code == 200
    failed = server.wait(failed["id"])
    browser = Chromium()
    try:
        browser.get(server.url + "/")
        row = browser.wait_for(
            f"const r = document.querySelector('#jobs tr[data-id=\"{failed['id']}\"]');"
            "return r && [r.cells[1].textContent, r.querySelector('.reason').textContent, "
            "r.cells[2].textContent]",
            60,
            "the failed job's row",
        )
        assert row == [
            f"failed: {failed['error']['message']}",
            failed["error"]["message"],
            ("a very long prompt " * 50)[:199] + "…",
        ], row
        browser.wait_for("return document.getElementById('num_frames').placeholder", 60, "the model's defaults")
        # Wan2.1 text-to-video takes neither a first frame nor a clip: the page offers neither.
        assert browser.script(
            "return ['input_reference', 'input_video'].map(i => document.getElementById(i).offsetParent)"
        ) == [None, None]
        browser.type("#prompt", "a lighthouse in a storm")
        for name, value in (
            ("width", "64"),
            ("height", "32"),
            ("num_frames", "5"),
            ("num_inference_steps", "2"),
            ("seed", "11"),
        ):
            browser.type(f"#{name}", value)
        browser.click("#submit")
        accepted = browser.wait_for(
            "return document.getElementById('status').dataset.status", 60, "the page to send the request"
        )
        assert accepted in ("queued", "in_progress"), browser.script("return document.body.innerText")
        # A new shape: the job compiles while the page shows it running; take the screenshot when
        # the bar shows progress, and the same progress before and after it.
        read = (
            "const s = document.getElementById('status'), b = document.getElementById('bar');"
            "return s.dataset.status === 'in_progress' && +b.dataset.progress > 0 ? "
            "[+b.dataset.progress, s.textContent] : null"
        )
        # The job moves on by itself (step 1 -> decoding): a screenshot taken across a change is
        # taken again, at the next stage (decoding compiles a new shape, seconds).
        for _ in range(3):
            progress, words = browser.wait_for(read, TIMEOUT, "the progress bar")
            shot = browser.screenshot()
            if browser.script(read) == [progress, words]:
                break
        else:
            raise AssertionError(f"the page changed during each of 3 screenshots (last: {progress}%, {words!r})")
        shot.save(tmp_path / "progress.png")
        box = browser.script(
            "const r = document.getElementById('bar').getBoundingClientRect();"
            "return [r.left + 1, r.top + 1, r.right - 1, r.bottom - 1]"
        )
        filled, width = _columns_of_color(shot, box, FILL)
        assert abs(filled / width - progress / 100) < 0.03, (filled, width, progress)
        assert re.search(r"in_progress — (denoising step \d of 2|decoding the video)", words), words

        # Then the video plays in the page.
        src = browser.wait_for(
            "const v = document.getElementById('video');"
            "return v && v.readyState >= 2 && v.videoWidth === 64 ? v.dataset.src : null",
            TIMEOUT,
            "the video element",
        )
        job_id = browser.script("return document.getElementById('status').dataset.id")
        assert src == f"/v1/videos/{job_id}/content"
        assert browser.script("return document.getElementById('status').dataset.status") == "completed"
        browser.script("const v = document.getElementById('video'); v.pause(); v.currentTime = 0;")
        browser.wait_for("return document.getElementById('video').seeking === false", 30, "the video to seek")
        shot = browser.screenshot()
        shot.save(tmp_path / "video.png")
        left, top, right, bottom = browser.script(
            "const r = document.getElementById('video').getBoundingClientRect();"
            "return [r.left, r.top, r.right, r.bottom]"
        )
        # The tiny random checkpoint's video is coloured noise: many colours where the video is
        # (a blank or black element has one or two).
        region = np.asarray(shot)[round(top) + 4 : round(bottom) - 40, round(left) + 4 : round(right) - 4]
        assert region.size and len(np.unique(region.reshape(-1, 3), axis=0)) > 50
        rows = browser.script("return [...document.querySelectorAll('#jobs tr')].map(r => r.dataset.id)")
        assert job_id in rows
        assert server.http.get(f"/v1/videos/{job_id}").json()["size"] == "64x32"
    finally:
        browser.quit()


def test_restart_loses_nothing_and_a_killed_job_resumes_to_the_same_video(ckpt, tmp_path, compile_cache):
    """A stop (SIGTERM) and a crash (SIGKILL) lose no job: finished videos stay, queued jobs run
    after the restart, and the job that was running resumes from its last saved denoising state
    (``--save-every 2``) and ends with the mp4 of the same request run without interruption."""
    jobs_dir = tmp_path / "jobs"
    slow = dict(SHAPE, num_inference_steps=80)
    first = Server(ckpt, jobs_dir, compile_cache, "--save-every", "2")
    try:
        done = first.wait(first.post(prompt="kept", seed=3, **SHAPE).json()["id"])
        assert done["status"] == "completed", done
        video = first.http.get(f"/v1/videos/{done['id']}/content").content
        stopped = first.post(prompt="stopped", seed=4, **slow).json()
        first.wait(stopped["id"], until=lambda job: job["step"] >= 1)
    finally:
        code = first.stop(signal.SIGTERM)  # stops the running job between steps, exits cleanly
    assert code == 0 and "Traceback" not in first.output(), first.output()

    second = Server(ckpt, jobs_dir, compile_cache, "--save-every", "2")
    try:
        assert second.http.get(f"/v1/videos/{done['id']}").json() == done
        assert second.http.get(f"/v1/videos/{done['id']}/content").content == video
        finished = second.wait(stopped["id"])  # queued again, run to its end
        assert finished["status"] == "completed", finished
        killed = second.post(prompt="cut short", seed=5, **slow).json()
        behind = second.post(prompt="behind it", seed=6, **SHAPE).json()
        killed_at = second.wait(killed["id"], until=lambda job: job.get("saved_step", 0) >= 4)["step"]
    finally:
        second.stop(signal.SIGKILL)  # a crash: no chance to record anything
    assert killed_at < 80

    third = Server(ckpt, jobs_dir, compile_cache, "--save-every", "2")
    try:
        resumed = third.wait(killed["id"])
        assert resumed["status"] == "completed", resumed
        assert 4 <= resumed["batch"]["resumed_from_step"] <= killed_at + 2, (resumed["batch"], killed_at)
        assert third.wait(behind["id"])["status"] == "completed"
        again = third.wait(third.post(prompt="cut short", seed=5, **slow).json()["id"])
        assert again["batch"]["resumed_from_step"] is None
        assert (
            third.http.get(f"/v1/videos/{killed['id']}/content").content
            == third.http.get(f"/v1/videos/{again['id']}/content").content
        )
        listed = [j["id"] for j in third.http.get("/v1/videos").json()["data"]]
        assert listed == [again["id"], behind["id"], killed["id"], stopped["id"], done["id"]]
        assert not list((jobs_dir / "states").glob("*")) and not list(jobs_dir.glob("*.input.png"))
    finally:
        assert third.stop() == 0, third.output()


def test_image_to_video_requests_checked_before_queueing(tmp_path):
    """An image-to-video checkpoint: the image is the multipart file input_reference, required,
    checked (a file that is no image is named by its file name) before the job is queued. The
    app is driven in-process without its lifespan, so the worker never starts and no job runs."""
    from PIL import Image
    from starlette.testclient import TestClient

    import vidax
    from tests.parity.wan_reference import write_tiny_wan_variant
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    pipe = vidax.load_pipeline(write_tiny_wan_variant(str(tmp_path / "i2v"), image_to_video=True), progress=False)
    runner = JobRunner(pipe, "tiny-i2v", JobStore(tmp_path / "jobs"), queue_size=2)
    client = TestClient(create_app(runner), base_url="http://localhost")
    assert client.get("/v1/models").json()["data"][0]["image"] is True
    fields = {"prompt": "a cat", "size": "48x32", "num_frames": "1", "num_inference_steps": "2"}
    r = client.post("/v1/videos", data=fields)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_reference", r.text
    assert "input_reference is required" in r.json()["error"]["message"]
    r = client.post("/v1/videos", data=fields, files={"input_reference": ("first.png", b"not a png", "image/png")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_reference", r.text
    assert r.json()["error"]["message"].startswith("input_reference 'first.png' could not be read as an image")
    png = tmp_path / "first.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(png)
    r = client.post("/v1/videos", data=fields, files={"input_reference": ("first.png", png.read_bytes(), "image/png")})
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "queued" and job["input_reference"] == "first.png" and job["size"] == "48x32"
    assert [j["id"] for j in client.get("/v1/videos").json()["data"]] == [job["id"]]
    assert not [f for f in os.listdir(tmp_path / "jobs") if f.startswith(".upload-")]  # the upload is not kept
    assert client.delete(f"/v1/videos/{job['id']}").json()["error"]["code"] == "cancelled"
    # The last frame (Wan FLF2V's last_image) is a multipart file of its own name, read as image is.
    two = dict(fields, num_frames="5")
    first = ("first.png", png.read_bytes(), "image/png")
    last = tmp_path / "last.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (30, 50, 3), dtype=np.uint8)).save(last)
    r = client.post(
        "/v1/videos", data=two, files={"input_reference": first, "last_image": ("last.png", b"nope", "image/png")}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "last_image", r.text
    assert r.json()["error"]["message"].startswith("last_image 'last.png' could not be read as an image"), r.text
    r = client.post("/v1/videos", data=dict(two, last_image="last.png"), files={"input_reference": first})
    assert r.status_code == 400 and "last_image must be sent as a file" in r.json()["error"]["message"], r.text
    r = client.post("/v1/videos", json={"prompt": "a cat", "last_image": "last.png"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "last_image", r.text
    r = client.post(
        "/v1/videos",
        data=two,
        files={"input_reference": first, "last_image": ("last.png", last.read_bytes(), "image/png")},
    )
    assert r.status_code == 200, r.text
    taken = runner._pending[r.json()["id"]].call.extra["last_image"]
    assert np.array_equal(np.asarray(taken), np.asarray(Image.open(last)))
    assert not [f for f in os.listdir(tmp_path / "jobs") if f.startswith(".upload-")]
    # Kept for a restart: a new server on the same jobs folder queues the job again with its last_image.
    job_id = r.json()["id"]
    assert os.path.isfile(runner.store.upload_path(job_id, "last_image"))
    runner.store.close()
    runner = JobRunner(pipe, "tiny-i2v", JobStore(tmp_path / "jobs"), queue_size=2)
    again = runner._pending[job_id].call.extra["last_image"]
    assert np.array_equal(np.asarray(again), np.asarray(Image.open(last)))
    runner.store.forget_request(job_id)
    assert not os.path.exists(runner.store.upload_path(job_id, "last_image"))
    runner.store.close()


def test_family_keyword_is_a_field_checked_by_its_declaration(toy_checkpoint, toy_registered, tmp_path):
    """A family's own call keyword (the toy family's ``toy_repeat``, which vidax.serve does not
    name) is a request field: accepted, typed from a form's text and passed to the call; a bad
    value is 400 with its declaration's message and ``param`` the field. In-process without the
    worker: no job runs."""
    from starlette.testclient import TestClient

    import vidax
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(vidax.load_pipeline(toy_checkpoint, progress=False), "toy", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner), base_url="http://localhost")
    assert "toy_repeat" in client.get("/v1/models").json()["data"][0]["fields"]
    r = client.post("/v1/videos", json={"prompt": "a toy boat", "toy_repeat": 2, **SHAPE})
    assert r.status_code == 200, r.text
    assert runner._pending[r.json()["id"]].call.extra["toy_repeat"] == 2
    r = client.post("/v1/videos", data={"prompt": "a toy boat", "toy_repeat": "3"})
    assert r.status_code == 200 and runner._pending[r.json()["id"]].call.extra["toy_repeat"] == 3, r.text
    for value, shown in ((0, "0"), (1.5, "1.5"), ("two", "two")):
        r = (
            client.post("/v1/videos", data={"prompt": "a toy boat", "toy_repeat": value})
            if isinstance(value, str)
            else client.post("/v1/videos", json={"prompt": "a toy boat", "toy_repeat": value})
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "toy_repeat", r.text
        assert r.json()["error"]["message"] == f"toy_repeat must be a positive integer, got {shown}", r.text
    runner.store.close()


@pytest.mark.fast
def test_bad_numbers_are_named_as_sent(toy_checkpoint, toy_registered, tmp_path):
    """A refused number is echoed as the client sent it (the JSON text: 1e39, not Python's 1e+39;
    2.50, not 2.5), after the field's name and what is valid, as ``vidax generate`` echoes the
    text typed after a flag; a form field's text likewise. In-process without the worker: no
    job runs."""
    import json

    from starlette.testclient import TestClient

    import vidax
    from vidax.errors import Arg, NumericalError
    from vidax.serve.app import create_app
    from vidax.serve.fields import Fields, number_texts
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(vidax.load_pipeline(toy_checkpoint, progress=False), "toy", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner), base_url="http://localhost")
    finite = "must be a finite number >= 0 (at most 3.403e+38, float32's largest)"
    for field, sent, message in (
        ("guidance_scale", "1e39", f"guidance_scale {finite}, got 1e39"),
        ("guidance_scale", "-1E0", f"guidance_scale {finite}, got -1E0"),
        ("guidance_scale", "NaN", f"guidance_scale {finite}, got NaN"),
        ("num_frames", "2.50", "num_frames must be a positive integer, got 2.50"),
        ("num_inference_steps", "1e400", "num_inference_steps must be a positive integer, got 1e400"),
        ("toy_repeat", "0.0", "toy_repeat must be a positive integer, got 0.0"),
        ("seed", "7.5e0", "seed must be an integer or null, got 7.5e0"),
        ("seconds", "-2E0", "seconds must be a number > 0, got -2E0"),
        # a frame count no int64 holds is not spelled out (1e300 x 8 fps: 301 digits)
        (
            "seconds",
            "1e300",
            "seconds must be a number > 0 of at most 1.153e+18 (seconds x 8 fps + 1 frames, an int64), got 1e300",
        ),
        # JSON's own values as JSON spells them; a string sent for a number said to be one
        ("seed", "true", "seed must be an integer or null, got true"),
        ("num_frames", "false", "num_frames must be a positive integer, got false"),
        ("guidance_scale", '"1e39"', f'guidance_scale {finite}, got "1e39" (a string)'),
        ("seconds", '"1_0"', 'seconds must be a number > 0, got "1_0"'),
        ("num_inference_steps", "1e999", "num_inference_steps must be a positive integer, got 1e999"),
        ("guidance_scale", '"abc"', f'guidance_scale {finite}, got "abc" (a string)'),
    ):
        r = client.post(
            "/v1/videos",
            content=f'{{"prompt": "a toy boat", "{field}": {sent}}}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
        assert r.json()["error"]["message"] == message, r.text
    # A form field's text is echoed unquoted as sent, whatever refused it; Python's 1_0 is no number.
    for field, sent, message in (
        ("guidance_scale", " 1e39", f"guidance_scale {finite}, got 1e39"),
        ("guidance_scale", "1_0", f"guidance_scale {finite}, got 1_0"),
        ("num_frames", "2.50", "num_frames must be a positive integer, got 2.50"),
        ("num_inference_steps", "0x10", "num_inference_steps must be a positive integer, got 0x10"),
        ("toy_repeat", "1e99", "toy_repeat must be a positive integer, got 1e99"),
    ):
        r = client.post("/v1/videos", data={"prompt": "a toy boat", field: sent})
        assert r.status_code == 400 and r.json()["error"]["message"] == message, r.text
    assert runner.list()[0] == []  # nothing was queued
    # An int field takes a number of integral value, as vidax generate's flags do (9.0, 1e0, "2.0").
    r = client.post(
        "/v1/videos",
        content='{"prompt": "a toy boat", "num_inference_steps": 1e0, "toy_repeat": 2.0, '
        '"seed": 7E0, "num_frames": 9.0}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 200, r.text
    call = runner._pending[r.json()["id"]].call
    assert (call.num_inference_steps, call.extra["toy_repeat"], call.seed, call.num_frames) == (1, 2, 7, 9)
    assert type(call.seed) is int and type(call.extra["toy_repeat"]) is int
    r = client.post("/v1/videos", data={"prompt": "a toy boat", "toy_repeat": "3.0", "height": "3.2e1"})
    assert r.status_code == 200 and runner._pending[r.json()["id"]].call.extra["toy_repeat"] == 3, r.text
    # A failed job's message names a valid field as sent too (guidance 1e30 overflowing bfloat16).
    body = '{"prompt": "a toy boat", "guidance_scale": 1e30}'
    request = Fields(json.loads(body), runner.options, 16, texts=number_texts(body))
    error = NumericalError("the latents went NaN/Inf; the likely cause is ", Arg("guidance_scale", 1e30))
    assert request.error(error).message == "the latents went NaN/Inf; the likely cause is guidance_scale=1e30"
    runner.store.close()


def test_lists_cut_long_prompts_and_interrupted_jobs_are_queued_again(toy_checkpoint, toy_registered, tmp_path):
    """A 600 KB prompt is whole in its job (``GET /v1/videos/{id}``) but cut to 200 characters in
    lists (``?limit=1`` was 600 KB); ``after`` naming no job is 400; the step a job reached is in
    its record as it runs; a job whose server died is queued again by the next. In-process
    without the worker: the call's step callback is called as the denoising loop calls it."""
    from starlette.testclient import TestClient

    import vidax
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    pipe = vidax.load_pipeline(toy_checkpoint, progress=False)
    runner = JobRunner(pipe, "toy", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner), base_url="http://localhost")
    prompt = "a toy boat on a pond " * 30000
    job = client.post("/v1/videos", json={"prompt": prompt, **SHAPE, "num_inference_steps": 3}).json()
    r = client.get("/v1/videos", params={"limit": 1})
    assert len(r.content) < 2000 and r.json()["data"][0]["prompt"] == prompt[:199] + "…", len(r.content)
    assert client.get(f"/v1/videos/{job['id']}").json()["prompt"] == prompt
    r = client.get("/v1/videos", params={"after": "video_nope"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "after", r.text
    assert r.json()["error"]["message"] == (
        "after='video_nope' is no job's id; give the id of a listed job (the last of a page, to get the next)"
    )
    runner._pending[job["id"]].call.callback(1, 3)  # denoising step 2 of 3 done; then the process dies
    assert client.get(f"/v1/videos/{job['id']}").json()["step"] == 2
    runner.store.close()
    # No state was saved (the worker never ran): the job is queued again from its start, its prompt whole.
    restarted = JobRunner(pipe, "toy", JobStore(tmp_path / "jobs"))
    again = restarted.get(job["id"])
    assert (again["status"], again["step"], again["progress"], again["prompt"]) == ("queued", 0, 0, prompt)
    assert restarted.counts() == {"queued": 1, "running": None}
    restarted.store.close()


def test_bad_serve_flags_are_one_line_before_loading(tmp_path):
    """Each bad flag: exit 2 and one line naming it, before any weight is read (in-process; the
    first also as its own process, where a traceback would show)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    (tmp_path / "file").write_text("")
    try:
        for args, message in (
            (
                ["--jobs-dir", str(tmp_path / "file")],
                f"--jobs-dir {str(tmp_path / 'file')!r} is a file, not a folder; give "
                "a folder for the job records (created if missing)",
            ),
            (["--port", "70000"], "--port must be in [0, 65535], got 70000"),
            (["--jobs-dir", ""], "--jobs-dir '' is empty; give a folder for the job records"),
            (["--weights", "int4"], "--weights 'int4' is not a weight format"),
            (["--transformer", "x.bin"], "--transformer 'x.bin' is not a .gguf or .safetensors file"),
            (["--queue-size", "-1"], "--queue-size must be >= 0, got -1"),
            (["--dtype", "float16"], "--dtype 'float16' is not supported"),
            (["--lora", str(tmp_path / "no.safetensors")], f"--lora {tmp_path / 'no.safetensors'}: no such file"),
            (["--lora", f"{tmp_path / 'file'}:x"], "give PATH or PATH:SCALE with SCALE a number"),
            (["--port", str(taken.getsockname()[1])], f"--port {taken.getsockname()[1]}: cannot listen there"),
            (
                ["--host", "0.0.0.0"],
                "--host '0.0.0.0' is reachable from other machines and no API key is set: "
                "anyone who reaches it could run jobs; set one with --api-key KEY or the VIDAX_API_KEY environment "
                "variable (clients then send 'Authorization: Bearer KEY'), or pass --insecure-no-auth",
            ),
            (["--api-key", " "], "--api-key is empty"),
            (["--preset", "distilled"], "--preset 'distilled' is not a preset of WanPipeline (it is ltx2's)"),
        ):
            r = _serve_cli("--jobs-dir", str(tmp_path / "jobs"), *args)
            assert r.exit_code == 2 and message in r.stderr, (args, r.stderr, r.exception)
            assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)  # no traceback
            assert "loading" not in r.stderr, r.stderr  # refused before any weight is read
        r = subprocess.run(
            [sys.executable, "-m", "vidax", "serve", "--jobs-dir", str(tmp_path / "file")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 2 and "is a file, not a folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    finally:
        taken.close()


def _serve_cli(*args):
    """``vidax serve`` run in-process (refused before it listens): click's result."""
    from typer.testing import CliRunner

    from vidax.cli import app

    return CliRunner().invoke(app, ["serve", *args])


def test_a_host_that_is_no_address_is_said_so(tmp_path):
    """--host not_a_host (no address, no name that resolves) is refused as that, before the
    question whether other machines reach it."""
    r = _serve_cli("--host", "not_a_host", "--jobs-dir", str(tmp_path / "jobs"))
    assert r.exit_code == 2 and "--host 'not_a_host' is not an IP address and does not resolve to one" in r.stderr
    assert "reachable from other machines" not in r.stderr, r.output


def test_unwritten_video_keeps_the_frames_in_the_jobs_folder(tmp_path, monkeypatch):
    """A job whose mp4 cannot be written fails with one line saying where its frames are kept:
    in the jobs folder only (never the working or temporary folder), named relative to it (no
    server path reaches the client), and deleted with the job."""
    from vidax.serve.records import Unwritten
    from vidax.serve.store import JobStore

    monkeypatch.chdir(tmp_path)
    store = JobStore(tmp_path / "jobs")
    frames = np.random.default_rng(0).random((1, 5, 32, 48, 3), dtype=np.float32)
    error = PermissionError(13, "Permission denied", store.folder + "/.vidax-x.mp4")
    message = str(Unwritten(store.folder, "video_x", frames, error))
    assert message == (
        "could not write video_x.mp4 (PermissionError: [Errno 13] Permission denied: '.vidax-x.mp4'); "
        "the frames are kept in video_x.unwritten.npy in the jobs folder (float32 (videos, frames, "
        "height, width, RGB) in [0, 1], numpy.load)"
    )
    np.testing.assert_array_equal(np.load(tmp_path / "jobs" / "video_x.unwritten.npy"), frames)
    # A jobs folder that cannot take the file (here: gone): nothing is written elsewhere.
    gone = str(tmp_path / "gone")
    message = str(Unwritten(gone, "video_y", frames, FileNotFoundError(2, "No such file", gone + "/.vidax-y.mp4")))
    assert "saving the frames as .npy failed too" in message and str(tmp_path) not in message, message
    assert sorted(os.listdir(tmp_path)) == ["jobs"]
    store.put({"id": "video_x", "status": "failed"})
    store.delete("video_x")
    assert store.get("video_x") is None and not [f for f in os.listdir(tmp_path / "jobs") if f.startswith("video_")]
    store.close()


def test_a_growing_video_whose_end_cannot_be_written_is_kept_as_far_as_it_went(tmp_path, monkeypatch):
    """A long video's mp4 that cannot be published (disk full as its file ends) is kept in the
    jobs folder as written, the error says where; a job dropped (cancelled) leaves no file."""
    from types import SimpleNamespace

    import vidax.io.growing
    from vidax.serve.long_video import GrowingVideos
    from vidax.serve.records import Unwritten
    from vidax.serve.store import JobStore

    store = JobStore(tmp_path / "jobs")
    grown = GrowingVideos(store, [SimpleNamespace(id="video_x", fps=16), SimpleNamespace(id="video_y", fps=16)])
    frames = np.random.default_rng(0).random((2, 4, 32, 48, 3), dtype=np.float32)
    for i, job in enumerate(("video_x", "video_y")):
        grown.append(job, frames[i])
    grown.drop("video_y")

    publish, calls = vidax.io.growing.publish, []

    def full_disk(*args):  # the finished file's publish fails; moving it aside (keep) does not
        calls.append(args)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return publish(*args)

    monkeypatch.setattr(vidax.io.growing, "publish", full_disk)
    with pytest.raises(Unwritten) as e:
        grown.publish("video_x")
    assert str(e.value) == (
        "could not write video_x.mp4 (OSError: [Errno 28] No space left on device); its first 4 frames are kept in "
        "video_x.unwritten.mp4 in the jobs folder (the mp4 as far as it was written)"
    )
    monkeypatch.undo()
    assert read_video(tmp_path / "jobs" / "video_x.unwritten.mp4").shape == (4, 32, 48, 3)
    assert [f for f in os.listdir(tmp_path / "jobs") if f.startswith(("video_", ".vidax-"))] == [
        "video_x.unwritten.mp4"
    ]
    store.put({"id": "video_x", "status": "failed"})
    store.delete("video_x")  # with the frames kept
    assert not [f for f in os.listdir(tmp_path / "jobs") if f.startswith("video_")]
    store.close()


def test_jobs_dir_is_held_by_one_server_and_its_schema_checked(tmp_path):
    """The jobs folder is locked while a store has it open (a second server would mark the
    first's running job interrupted, delete its jobs); a jobs.sqlite3 of another schema is
    refused when the store opens (before the server loads weights), both in one line."""
    import sqlite3

    from vidax.serve.jobs import JobStore

    first = JobStore(tmp_path / "jobs")
    with pytest.raises(InputError) as e:
        JobStore(tmp_path / "jobs")
    assert str(e.value) == (
        f"jobs_dir={str(tmp_path / 'jobs')!r} is in use by another vidax serve, pid {os.getpid()}; "
        "stop it or give another --jobs-dir"
    )
    first.close()
    JobStore(tmp_path / "jobs").close()  # free once the first has closed

    (tmp_path / "other").mkdir()
    db = sqlite3.connect(tmp_path / "other" / "jobs.sqlite3")
    db.execute("CREATE TABLE jobs (name TEXT, payload BLOB)")
    db.commit()
    db.close()
    with pytest.raises(InputError) as e:
        JobStore(tmp_path / "other")
    assert str(e.value).startswith(
        f"jobs_dir={str(tmp_path / 'other')!r}: jobs.sqlite3 there is not vidax serve's "
        "(its table jobs has the columns name, payload;"
    ), e.value


def test_temporary_files_of_a_killed_server_are_deleted_at_start(tmp_path):
    """A server killed while it saved a denoising state or wrote a video leaves its temporary
    file (``states/<id>.npz.<pid>.tmp``, ``.vidax-*.mp4``); the next store on the folder
    deletes them once it holds the folder's lock (not while another server holds it, whose
    writes they may be), and keeps the finished files."""
    from vidax.serve.jobs import JobStore

    jobs = tmp_path / "jobs"
    first = JobStore(jobs)
    (jobs / "states").mkdir()
    kept = [jobs / "states" / "video_a.npz", jobs / "video_b.mp4", jobs / "video_c.input.png"]
    stale = [jobs / "states" / "video_a.npz.4242.tmp", jobs / ".vidax-x1y2.mp4", jobs / ".vidax-z3.npy"]
    for path in kept + stale:
        path.write_bytes(b"partial")
    with pytest.raises(InputError, match="in use by another vidax serve"):
        JobStore(jobs)
    assert all(p.exists() for p in stale)  # the holder's, maybe being written
    first.close()
    JobStore(jobs).close()
    assert [p.exists() for p in kept + stale] == [True] * 3 + [False] * 3


def test_cross_site_and_malformed_requests_are_refused_in_the_error_shape(toy_checkpoint, toy_registered, tmp_path):
    """A Host other than the bound address / localhost names (DNS rebinding) and a POST / DELETE
    from another Origin (a cross-site form) are 403; JSON nested deeper than Python's stack is
    400, a body over the cap 413, unknown paths and methods 404 / 405, all OpenAI's error object.
    In-process without the worker: no job runs."""
    from starlette.testclient import TestClient

    import vidax
    from vidax.serve.app import MAX_BODY, create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(vidax.load_pipeline(toy_checkpoint, progress=False), "toy", JobStore(tmp_path / "jobs"))
    app = create_app(runner, "127.0.0.1", 8123)
    client = TestClient(app, base_url="http://127.0.0.1:8123")
    fields = {"prompt": "a toy boat", **SHAPE}

    def refused(r, status, code):
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["code"] == code and error["type"] == "invalid_request_error" and "\n" not in error["message"], (
            error
        )

    for host in ("127.0.0.1:8123", "localhost:8123", "[::1]:8123"):
        assert client.get("/health", headers={"host": host}).status_code == 200, host
    for host in ("evil.example:8123", "127.0.0.1:9999", "127.0.0.1", "localhost.evil.example:8123"):
        refused(client.get("/v1/videos", headers={"host": host}), 403, "forbidden_host")
    refused(client.post("/v1/videos", data=fields, headers={"origin": "http://evil.example"}), 403, "forbidden_origin")
    refused(client.delete("/v1/videos/video_x", headers={"origin": "null"}), 403, "forbidden_origin")
    # The page's own requests (same origin) pass.
    r = client.post("/v1/videos", data=fields, headers={"origin": "http://127.0.0.1:8123"})
    assert r.status_code == 200, r.text
    assert client.delete(f"/v1/videos/{r.json()['id']}", headers={"origin": "http://127.0.0.1:8123"}).status_code == 200

    r = client.post("/v1/videos", content=b"[" * 100000 + b"]" * 100000, headers={"content-type": "application/json"})
    refused(r, 400, None)
    assert r.json()["error"]["message"] == "the body is not valid JSON (nested too deeply)"
    refused(client.post("/v1/videos", content=b"\xff\xfe{", headers={"content-type": "application/json"}), 400, None)
    refused(
        client.post("/v1/videos", content=b" " * (MAX_BODY + 1), headers={"content-type": "application/json"}),
        413,
        "too_large",
    )
    refused(client.get("/v1/nothing"), 404, "not_found")
    refused(client.put("/v1/videos"), 405, "method_not_allowed")
    jobs, _ = runner.list()
    assert [j["status"] for j in jobs] == ["failed"]  # only the job accepted above was queued (then cancelled)
    runner.store.close()


def test_page_asks_for_the_key_and_forgets_the_refusal_once_given(toy_checkpoint, toy_registered, tmp_path):
    """The page of a server with an API key: its first requests are refused (the key form shows,
    the refusal in the page's error line); once the key is given the error line is cleared and
    the model is described. A real HTTP server (uvicorn in a thread, no worker: nothing runs)."""
    import uvicorn

    import vidax
    from tests.webdriver import Chromium
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(vidax.load_pipeline(toy_checkpoint, progress=False), "toy", JobStore(tmp_path / "jobs"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    http = uvicorn.Server(uvicorn.Config(create_app(runner, api_key="s3cret-key"), port=port, log_level="warning"))
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    browser = None
    try:
        deadline = time.monotonic() + 30
        while not http.started:
            assert time.monotonic() < deadline, "the keyed server did not start in 30 s"
            time.sleep(0.05)
        browser = Chromium()
        browser.get(f"http://127.0.0.1:{port}/")
        refused = browser.wait_for(
            "const f = document.getElementById('keyform'), e = document.getElementById('error');"
            "return !f.classList.contains('hidden') && e.textContent ? e.textContent : null",
            30,
            "the key form and the refusal",
        )
        assert "Authorization" in refused, refused
        browser.type("#apikey", "s3cret-key")
        browser.click("#keysubmit")
        model = browser.wait_for(
            "const m = document.getElementById('model').textContent; return m.startsWith('Model ') ? m : null",
            30,
            "the model described with the key",
        )
        assert "toy" in model, model
        browser.wait_for(
            "return document.getElementById('error').textContent === '' ? true : null", 30, "the error line cleared"
        )
        assert browser.script("return document.getElementById('keyform').classList.contains('hidden')")
    finally:
        if browser is not None:
            browser.quit()
        http.should_exit = True
        thread.join(30)


def test_api_key_is_required_on_every_request_but_the_page(toy_checkpoint, toy_registered, tmp_path):
    """With an API key every request (reads, the API's writes, /health, the events stream) needs
    ``Authorization: Bearer <key>``: without it, with another key or another scheme, 401 in
    OpenAI's error shape with a ``WWW-Authenticate: Bearer`` header, before the body is read; the
    page itself (static) loads without it. In-process without the worker: no job runs."""
    from starlette.testclient import TestClient

    import vidax
    from vidax.serve.app import create_app
    from vidax.serve.command import check_access, is_loopback
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(vidax.load_pipeline(toy_checkpoint, progress=False), "toy", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner, api_key="s3cret-key"), base_url="http://localhost")
    good = {"authorization": "Bearer s3cret-key"}
    for headers, reason in (
        ({}, "no Authorization header"),
        ({"authorization": "Bearer s3cret-kez"}, "the Authorization header's key is not this server's"),
        ({"authorization": "Bearer s3cret-key "}, "the Authorization header's key is not this server's"),
        ({"authorization": "Basic czNjcmV0LWtleQ=="}, "the Authorization header is not 'Bearer <key>'"),
    ):
        for method, path in (
            ("GET", "/v1/videos"),
            ("GET", "/v1/models"),
            ("GET", "/health"),
            ("POST", "/v1/videos"),
            ("DELETE", "/v1/videos/video_x"),
            ("GET", "/v1/videos/video_x/events"),
            ("GET", "/v1/videos/video_x/content"),
        ):
            r = client.request(method, path, headers=headers, json={"prompt": "a toy boat"})
            assert r.status_code == 401, (method, path, r.text)
            assert r.headers["www-authenticate"] == 'Bearer realm="vidax"'
            assert r.json()["error"]["code"] == "invalid_api_key" and r.json()["error"]["message"].startswith(reason)
    assert runner.list()[0] == []  # nothing was queued
    assert client.get("/").status_code == 200 and "<title>vidax serve</title>" in client.get("/").text
    assert client.get("/health", headers=good).json()["status"] == "ok"
    for given in ("bearer s3cret-key", "BEARER s3cret-key", "Bearer  s3cret-key"):  # any case; 1*SP (RFC 9110)
        assert client.get("/health", headers={"authorization": given}).status_code == 200, given
    r = client.post("/v1/videos", headers=good, json={"prompt": "a toy boat", **SHAPE})
    assert r.status_code == 200, r.text
    assert client.get(f"/v1/videos/{r.json()['id']}", headers=good).json()["status"] == "queued"
    runner.store.close()

    assert [
        is_loopback(h)
        for h in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]", "0.0.0.0", "::", "192.168.1.5", "example.com")
    ] == [True] * 5 + [False] * 4
    assert check_access("0.0.0.0", "k", False) == "k" and check_access("0.0.0.0", None, True) is None
    assert check_access("127.0.0.1", None, False) is None


def read_events(client, job_id: str) -> list[tuple[str, dict]]:
    """``(event name, data)`` of a job's ``/events`` stream, read to its end (a text/event-stream)."""
    events, name = [], None
    with client.stream("GET", f"/v1/videos/{job_id}/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events


def _wait_in_process(runner, job_id, until=lambda job: job["status"] in FINAL):
    """The job once ``until(job)``, polled; fails saying so when :data:`TIMEOUT` passes or the
    worker has ended."""
    deadline = time.monotonic() + TIMEOUT
    while not until(job := runner.get(job_id)):
        assert time.monotonic() < deadline, f"job {job_id} is still {job} after {TIMEOUT} s"
        assert runner._thread is None or runner._thread.is_alive(), f"the worker ended; job {job_id} is still {job}"
        time.sleep(0.02)
    return job


@pytest.fixture(scope="module")
def tiny_pipe(ckpt):
    import vidax

    return vidax.load_pipeline(ckpt, progress=False)


#: How far a job's frames (float32 in [0, 1]) run in a batch may be from the same job run alone:
#: XLA's CPU matmuls accumulate in another order at another batch size (measured: 2e-6 after 3
#: steps and the VAE at the test's size); 1e-5 leaves 5x room and is 400x below one 8-bit level.
BATCH_ATOL = 1e-5


def _stop(runner) -> None:
    """Stop the runner's worker, failing if it has not ended within :data:`TIMEOUT` (it stops at
    its call's next check)."""
    runner.stop(TIMEOUT)
    assert runner._thread is None or not runner._thread.is_alive(), f"the worker did not stop in {TIMEOUT} s"


def _run_all(runner, jobs: list[dict]) -> list[dict]:
    """Start the runner's worker, wait for every job to end, stop it; the jobs' records."""
    runner.start()
    try:
        return [_wait_in_process(runner, j["id"]) for j in jobs]
    finally:
        _stop(runner)


def _batch_frames(pipe, runner, pendings: list) -> np.ndarray:
    """The frames of the call the runner makes of ``pendings``, run here (the same inputs and
    compiled program as the runner's run, so the same frames)."""
    import dataclasses

    call = runner._batched_call(pendings, os.devnull)
    return pipe.generate(dataclasses.replace(call, on_state=None, callback=None, cancel=None)).frames


def _alone(pipe, pending) -> np.ndarray:
    """The frames of a queued job's own call run alone (on ``pipe``), without its callbacks."""
    import dataclasses

    return pipe.generate(dataclasses.replace(pending.call, callback=None, cancel=None)).frames[0]


def _assert_mp4_of(runner, job: dict, frames: np.ndarray, tmp_path: Path) -> None:
    """The job's mp4 is ``frames`` through the same writer (its row of the batch, which the
    test compares with the job run alone at :data:`BATCH_ATOL`), to a mean difference under 2
    levels: libx264 does not code the same frames the same way every time (measured: two
    writes of the same frames in one process differ in 10% of the values, by 0.4 level on
    average); another job's video differs by ~50."""
    from vidax.io.video import write_video

    path = tmp_path / f"{job['id']}-expected.mp4"
    write_video(frames, str(path), fps=job["fps"])
    diff = np.abs(read_video(runner.store.video_path(job["id"])).astype(int) - read_video(path).astype(int))
    assert diff.mean() < 2, (job["id"], diff.mean(), diff.max())


def test_a_job_stopped_in_its_decode_resumes_with_no_step_run_again(tiny_pipe, tmp_path, caplog):
    """The state is saved after the last denoising step (here the only save: --save-every 5, 2
    steps), so a server that goes down while the VAE decodes redoes only the decode: the next
    server resumes the job after its last step, runs no step, and writes the video of the job
    run without interruption. In-process with the worker; the server stops (as on SIGTERM, its
    saved state what a crash leaves) when the last step's callback has run."""
    from vidax.serve.jobs import JobRunner, JobStore

    first = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"), save_every=5)
    job = first.submit({"prompt": "a decode cut short", "seed": 3, **SHAPE})
    stepped = first._stepped

    def stop_in_the_decode(batch, step, steps):
        stepped(batch, step, steps)
        if step == steps:
            first.stopping = True  # the call stops at its next check: before the first VAE decode chunk

    first._stepped = stop_in_the_decode
    first.start()
    first._thread.join(TIMEOUT)
    assert (first.get(job["id"])["status"], first.get(job["id"])["step"]) == ("queued", 2)
    first.store.close()

    second = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"), save_every=5)
    expected = _alone(tiny_pipe, second._pending[job["id"]])
    steps = []
    stepped_again = second._stepped
    second._stepped = lambda batch, step, n: (steps.append(step), stepped_again(batch, step, n))
    with caplog.at_level("INFO", logger="vidax.serve.jobs"):
        done = _run_all(second, [job])[0]
    assert f"{job['id']} resumed after denoising step 2 of 2" in caplog.text
    assert done["status"] == "completed" and done["batch"]["resumed_from_step"] == 2, done
    assert steps == []  # no denoising step ran again
    _assert_mp4_of(second, done, expected, tmp_path)
    second.store.close()


def test_a_request_is_checked_against_the_memory_there_is_with_no_job_running(tiny_pipe, tmp_path):
    """The POST-time memory check counts the memory there was when no job ran (a running job's
    activations are free again when the new job runs): measured at the request when none runs,
    else the last such measure. In-process without the worker; a batch is marked running."""
    from starlette.testclient import TestClient

    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner), base_url="http://localhost")
    huge = {"prompt": "a cat", "size": "16000x16000", "num_frames": 5}
    r = client.post("/v1/videos", json=huge)  # measured now: does not fit
    assert r.status_code == 400 and r.json()["error"]["param"] == "size" and runner.idle_memory[0] > 0, r.text
    runner._running = [object()]  # a job runs: what it holds is not measured as taken
    runner.idle_memory = (2**62, "memory with no job running")
    assert client.post("/v1/videos", json=huge).status_code == 200
    runner._running = []
    assert client.post("/v1/videos", json=huge).status_code == 400
    runner.store.close()


def test_one_is_singular_in_the_servers_words(tiny_pipe, tmp_path, caplog):
    """A queue of one job and a job of one frame and one step say "1 job", "1 frame", "1 step"."""
    from starlette.testclient import TestClient

    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"), queue_size=1)
    client = TestClient(create_app(runner), base_url="http://localhost")
    one = {"prompt": "a cat", **dict(SHAPE, num_frames=1, num_inference_steps=1)}
    with caplog.at_level("INFO", logger="vidax.serve.jobs"):
        job = client.post("/v1/videos", json=one).json()
    assert f"{job['id']} queued: 48x32, 1 frame, 1 step (position 1)" in caplog.text
    client.post("/v1/videos", json=one)  # the running one (no worker: it waits) and one waiting
    full = client.post("/v1/videos", json=one).json()
    assert full["error"]["message"].startswith("the queue is full (1 job waiting"), full
    runner.store.close()


def test_a_rounded_num_frames_is_said_in_the_job(tiny_pipe, tmp_path):
    """num_frames=2 runs 1 frame, as vidax generate runs it: the job record says so in its
    ``warnings`` (the field as sent), as generate's warning line does; a request run as asked has
    none. In-process without the worker."""
    from starlette.testclient import TestClient

    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner), base_url="http://localhost")
    job = client.post("/v1/videos", json={"prompt": "a cat", **dict(SHAPE, num_frames=2)}).json()
    assert job["num_frames"] == 1 and job["warnings"] == [
        "num_frames=2 is not of the form 4k+1; using 1, as diffusers' WanPipeline does"
    ], job
    assert client.get(f"/v1/videos/{job['id']}").json()["warnings"] == job["warnings"]
    assert "warnings" not in client.post("/v1/videos", json={"prompt": "a cat", **SHAPE}).json()
    runner.store.close()


#: A diffusion-forcing call of the tiny SkyReels-V2 checkpoint (``skyreels_df`` of tests/conftest.py):
#: one chunk of 5 frames (2 latent), the first latent frame the image's or the clip's last frame's, 2
#: steps, no CFG.
DF_CALL = dict(
    num_inference_steps=2,
    guidance_scale=1.0,
    base_num_frames=5,
    overlap_history=1,
    seed=3,
    max_sequence_length=16,
    num_frames=5,
)


def test_image_and_video_to_video_on_a_diffusion_forcing_checkpoint(
    skyreels_df, skyreels_df_pipe, tmp_path, monkeypatch
):
    """A diffusion-forcing checkpoint (model_index.json: SkyReelsV2DiffusionForcingPipeline):
    ``input_reference`` runs its image-to-video pipeline and ``input_video`` (a multipart file)
    extends the clip with its video-to-video pipeline, both over the loaded weights; each job's
    frames are those the Python pipeline of the task gives (vidax.load_pipeline(task=...)),
    bit for bit, the extended video the clip then the new frames. The uploads are kept for a
    restart: a second runner on the jobs folder queues both jobs again and runs them. A video
    that is no video, sent as JSON or beside an image is a 400 naming input_video."""
    from PIL import Image
    from starlette.testclient import TestClient

    import vidax
    from vidax.io.growing import GrowingMp4
    from vidax.io.video import write_video
    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    pipe = skyreels_df_pipe
    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=0)
    client = TestClient(create_app(runner), base_url="http://localhost")  # no lifespan: no job runs here
    model = client.get("/v1/models").json()["data"][0]
    assert model["image"] is True and model["video"] is True and model["tasks"] == ["t2v", "i2v", "v2v"]
    assert {"input_reference", "input_video", "last_image", "overlap_history"} <= set(model["fields"])
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    png = tmp_path / "first.png"
    Image.fromarray(image).save(png)
    write_video(rng.integers(0, 256, (5, 32, 48, 3), dtype=np.uint8), tmp_path / "clip.mp4", fps=16)
    clip = read_video(tmp_path / "clip.mp4")
    fields = {"prompt": "a cat", "size": "48x32", **{k: str(v) for k, v in DF_CALL.items()}}
    video = ("clip.mp4", (tmp_path / "clip.mp4").read_bytes(), "video/mp4")

    r = client.post("/v1/videos", data=fields, files={"input_video": ("clip.mp4", b"no video", "video/mp4")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_video", r.text
    assert r.json()["error"]["message"].startswith("input_video 'clip.mp4' could not be read as a video"), r.text
    r = client.post("/v1/videos", json={"prompt": "a cat", "input_video": "clip.mp4"})
    assert r.status_code == 400 and "input_video must be sent as a file" in r.json()["error"]["message"], r.text
    r = client.post("/v1/videos", data=fields, files={"input_video": video, "input_reference": png.open("rb")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_video", r.text
    i2v = client.post("/v1/videos", data=fields, files={"input_reference": ("first.png", png.read_bytes())}).json()
    v2v = client.post("/v1/videos", data=fields, files={"input_video": video}).json()
    assert (i2v["task"], i2v["pipeline"]) == ("i2v", "SkyReelsV2DiffusionForcingImageToVideoPipeline"), i2v
    assert (v2v["task"], v2v["pipeline"], v2v["input_video"]) == (
        "v2v",
        "SkyReelsV2DiffusionForcingVideoToVideoPipeline",
        "clip.mp4",
    ), v2v
    assert runner.tasks.pipe_for("v2v").transformer is pipe.transformer  # no second load
    runner.store.close()

    runner = JobRunner(pipe, "df", JobStore(tmp_path / "jobs"), save_every=0)  # a restart
    written = {}
    append = GrowingMp4.append

    def keep(self, frames):  # each job's mp4 grows chunk by chunk
        written[os.path.basename(self.path)] = np.concatenate(
            [written.get(os.path.basename(self.path), frames[:0]), frames]
        )
        return append(self, frames)

    monkeypatch.setattr(GrowingMp4, "append", keep)
    done = _run_all(runner, [i2v, v2v])
    assert [j["status"] for j in done] == ["completed", "completed"], done
    assert not [f for f in os.listdir(tmp_path / "jobs") if f.endswith((".upload", ".input.png"))]
    runner.store.close()

    call = dict(DF_CALL, height=32, width=48, progress=False)
    want = vidax.load_pipeline(skyreels_df, task="i2v", progress=False)(image, "a cat", **call).frames[0]
    np.testing.assert_array_equal(written[f"{i2v['id']}.mp4"], want)
    want = vidax.load_pipeline(skyreels_df, task="v2v", progress=False)(clip, "a cat", **call).frames[0]
    assert want.shape == (5 + 5, 32, 48, 3)
    np.testing.assert_array_equal(written[f"{v2v['id']}.mp4"], want)


def test_only_a_silent_video_of_frames_made_in_chunks_grows(skyreels_df_pipe, tiny_pipe):
    """serve writes a job's mp4 chunk by chunk where its pipeline makes it in chunks and the call
    decodes frames without sound; a video with sound (muxed with its frames at the end), latents,
    or a pipeline of one pass keeps the one write at the end."""
    from types import SimpleNamespace

    from vidax.serve.long_video import grows

    frames, latents = SimpleNamespace(output_type="np"), SimpleNamespace(output_type="latent")
    assert grows(skyreels_df_pipe, frames) and not grows(skyreels_df_pipe, latents)
    assert not grows(tiny_pipe, frames)

    def chunked(sound: bool):
        family = type(skyreels_df_pipe).family

        class Pipe:  # the diffusion-forcing pipeline's chunk keywords, with or without sound
            call_args = type(skyreels_df_pipe).call_args

        Pipe.family = SimpleNamespace(
            CHUNK_CALLBACK=family.CHUNK_CALLBACK,
            CHUNK_KEEP=family.CHUNK_KEEP,
            silent_call=lambda info, call: None if sound else ("makes no sound",),
        )
        pipe = Pipe()
        pipe.info = skyreels_df_pipe.info
        return pipe

    assert grows(chunked(sound=False), frames) and not grows(chunked(sound=True), frames)


def test_a_long_video_grows_chunk_by_chunk_and_a_failed_write_loses_nothing(skyreels_df_pipe, tmp_path, monkeypatch):
    """A diffusion-forcing job of 3 chunks: each chunk is appended to the job's growing mp4 as it
    finishes (a .vidax-*.mp4 in the jobs folder when its chunk event is recorded, none after),
    the call keeps no chunk's frames (its CHUNK_KEEP keyword False: it returns none), and the
    mp4 is the video the pipeline makes unstreamed: its frames bit for bit, as many as
    write_video writes, the mp4 the same as those frames appended in the same chunks. A chunk
    that cannot be appended (disk full) loses nothing: the job fails write_failed saying where
    the mp4 so far (the first chunk) and the frames after it (.npy) are kept. A job cancelled
    after its first chunk leaves no file; one whose server stops then leaves none either, and
    the next server on the folder runs it to the same video."""
    from vidax.io.growing import GrowingMp4
    from vidax.io.video import write_video
    from vidax.serve.jobs import JobRunner, JobStore

    pipe, family = skyreels_df_pipe, type(skyreels_df_pipe).family
    folder = tmp_path / "jobs"
    runner = JobRunner(pipe, "df", JobStore(folder), save_every=0)
    fields = {"prompt": "a cat", "size": "48x32", **DF_CALL, "num_frames": 13}
    ok, full, cancelled, stopped = (runner.submit(fields) for _ in range(4))
    appended, seen, calls = {}, [], []
    append, chunked, generate = GrowingMp4.append, runner._chunked, pipe.generate

    def disk_full_at_the_second_chunk(self, frames):
        job = os.path.basename(self.path)[: -len(".mp4")]
        appended.setdefault(job, []).append(np.array(frames))
        if job == full["id"] and len(appended[job]) == 2:
            raise OSError(28, "No space left on device")
        return append(self, frames)

    def observed(batch, chunk, grown=None):
        chunked(batch, chunk, grown)
        growing = {f.name: f.stat().st_size for f in folder.glob(".vidax-*.mp4")}
        seen.append((batch[0].id, chunk.index, chunk.count, growing, runner.get(batch[0].id)["chunk"]))
        if batch[0].id == cancelled["id"]:
            runner.cancel(batch[0].id)
        if batch[0].id == stopped["id"]:  # a server stopped (SIGTERM) mid-job: the worker joined from another thread
            threading.Thread(target=runner.stop).start()

    def recorded(call):
        out = generate(call)
        calls.append((call.extra, out.frames.shape))
        return out

    monkeypatch.setattr(GrowingMp4, "append", disk_full_at_the_second_chunk)
    monkeypatch.setattr(runner, "_chunked", observed)
    monkeypatch.setattr(pipe, "generate", recorded)
    runner.start()
    done = [_wait_in_process(runner, j["id"]) for j in (ok, full, cancelled)]
    runner._thread.join(TIMEOUT)
    assert not runner._thread.is_alive() and runner.get(stopped["id"])["status"] == "queued"
    runner.store.close()

    assert [(j["status"], (j["error"] or {}).get("code")) for j in done] == [
        ("completed", None),
        ("failed", "write_failed"),
        ("failed", "cancelled"),
    ], done
    assert [s[:3] for s in seen] == [(ok["id"], i, 3) for i in range(3)] + [(full["id"], i, 3) for i in range(3)] + [
        (cancelled["id"], 0, 3),
        (stopped["id"], 0, 3),
    ]
    for job, index, _, growing, event in seen:  # the chunk is in the growing file when its event is recorded
        assert len(growing) == 1 and min(growing.values()) > 0, (job, index, growing)
        assert event == {"chunk": index + 1, "of": 3, "frames": [5, 9, 13][index], "num_frames": 13}
    assert not list(folder.glob(".vidax-*"))
    again = JobRunner(pipe, "df", JobStore(folder), save_every=0)  # the next server
    assert [j["status"] for j in _run_all(again, [stopped])] == ["completed"]
    again.store.close()
    assert [(extra[family.CHUNK_KEEP], shape[1]) for extra, shape in calls] == [(False, 0)] * 3

    want = pipe("a cat", **dict(DF_CALL, num_frames=13, height=32, width=48, progress=False)).frames[0]
    np.testing.assert_array_equal(np.concatenate(appended[ok["id"]]), want)
    # the frames write_video wrote, through the growing file's encode (x264 without look-ahead, a
    # keyframe a chunk: deterministic, so bit for bit where write_video's own encode differs)
    write_video(want, tmp_path / "whole.mp4", fps=done[0]["fps"])
    same = GrowingMp4(tmp_path / "same.mp4", done[0]["fps"])
    for start, end in ((0, 5), (5, 9), (9, 13)):
        append(same, want[start:end])
    same.finish()
    served = read_video(runner.store.video_path(ok["id"]))
    assert served.shape == read_video(tmp_path / "whole.mp4").shape == (13, 32, 48, 3)
    np.testing.assert_array_equal(served, read_video(tmp_path / "same.mp4"))
    np.testing.assert_array_equal(read_video(runner.store.video_path(stopped["id"])), served)

    message = done[1]["error"]["message"]
    assert message == (
        f"could not write {full['id']}.mp4 (OSError: [Errno 28] No space left on device); its first 5 frames are kept "
        f"in {full['id']}.unwritten.mp4 in the jobs folder (the mp4 as far as it was written); the frames after them "
        f"are kept in {full['id']}.unwritten.npy in the jobs folder (float32 (videos, frames, height, width, RGB) in "
        "[0, 1], numpy.load)"
    )
    assert read_video(folder / f"{full['id']}.unwritten.mp4").shape == (5, 32, 48, 3)
    np.testing.assert_array_equal(np.load(folder / f"{full['id']}.unwritten.npy"), want[None, 5:])
    assert not os.path.exists(runner.store.video_path(full["id"]))


def test_page_extends_a_clip_on_a_diffusion_forcing_checkpoint(skyreels_df, tmp_path, compile_cache):
    """The page of a server on a diffusion-forcing checkpoint offers a first frame and a clip to
    extend; a clip chosen there goes up as input_video and the job runs the video-to-video
    pipeline (the job record says so; the job is cancelled: its run is the test above's)."""
    from tests.webdriver import Chromium
    from vidax.io.video import write_video

    clip = tmp_path / "clip.mp4"
    # 21 frames: more than the 17 of overlap the extension takes by default
    write_video(np.random.default_rng(0).integers(0, 256, (21, 32, 48, 3), dtype=np.uint8), clip, fps=16)
    server = Server(skyreels_df, tmp_path / "jobs", compile_cache)
    browser = Chromium()
    try:
        browser.get(server.url + "/")
        browser.wait_for("return document.getElementById('num_frames').placeholder", 60, "the model's defaults")
        shown = "return ['input_reference', 'input_video'].map(i => document.getElementById(i).offsetParent !== null)"
        assert browser.script(shown) == [True, True]
        browser.type("#prompt", "a cat")
        for name, value in (("width", "48"), ("height", "32"), ("num_frames", "25"), ("num_inference_steps", "1")):
            browser.type(f"#{name}", value)
        browser.choose_file("#input_video", str(clip))
        browser.click("#submit")
        job_id = browser.wait_for("return document.getElementById('status').dataset.id", 60, "the job's id")
        job = server.http.get(f"/v1/videos/{job_id}").json()
        assert (job["task"], job["pipeline"], job["input_video"]) == (
            "v2v",
            "SkyReelsV2DiffusionForcingVideoToVideoPipeline",
            "clip.mp4",
        ), job
        assert server.http.delete(f"/v1/videos/{job_id}").status_code == 200
    finally:
        browser.quit()
        code = server.stop()
    assert code == 0 and "Traceback" not in server.output(), server.output()


def test_a_video_on_a_checkpoint_without_video_to_video_is_400(tiny_pipe, tmp_path):
    """Wan2.1 text-to-video extends no clip: input_video is refused naming the field."""
    from starlette.testclient import TestClient

    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"))
    client = TestClient(create_app(runner), base_url="http://localhost")
    assert client.get("/v1/models").json()["data"][0]["video"] is False
    r = client.post(
        "/v1/videos", data={"prompt": "a cat", **SHAPE}, files={"input_video": ("clip.mp4", b"x", "video/mp4")}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_video", r.text
    assert "input_video is given but tiny does not do video-to-video" in r.json()["error"]["message"], r.text
    runner.store.close()


def test_presets_through_the_server(ckpt, tiny_pipe, tmp_path, capsys, caplog):
    """A LoRA whose file names its recipe (LightX2V) gives the server that preset, said in the one
    line vidax generate prints; --preset given, none is recognised. Every job runs its request's
    preset, else the server's, under its own fields, with that preset's sampler; the job record
    and /v1/models name the preset; a recognised distilled recipe run with many steps and CFG is
    warned about in the log. In-process: the worker runs two jobs."""
    from safetensors.numpy import save_file
    from starlette.testclient import TestClient

    from vidax.cli.serving import ready_line
    from vidax.pipelines.plan import read_plan, with_placement
    from vidax.serve.app import create_app
    from vidax.serve.command import plan_preset
    from vidax.serve.jobs import JobRunner, JobStore

    lora = tmp_path / "wan2.1_t2v_lightx2v_4step_lora.safetensors"
    save_file({"diffusion_model.blocks.0.self_attn.q.lora_down.weight": np.zeros((2, 2), np.float32)}, str(lora))
    plan, recognised = plan_preset(read_plan(ckpt), None, [str(lora)])
    assert capsys.readouterr().err == f"--lora {lora} (LightX2V step/CFG-distilled LoRA): --preset lightx2v\n"
    assert plan.preset.name == "lightx2v" and recognised[0] is plan.preset
    chosen, none = plan_preset(read_plan(ckpt), "causvid", [str(lora)])
    assert (chosen.preset.name, none, capsys.readouterr().err) == ("causvid", None, "")

    pipe = plan.pipeline.from_plan(with_placement(plan), progress=False)
    runner = JobRunner(pipe, "tiny", JobStore(tmp_path / "jobs"), recognised=recognised)
    client = TestClient(create_app(runner), base_url="http://localhost")
    model = client.get("/v1/models").json()["data"][0]
    assert (model["preset"], model["presets"]) == ("lightx2v", ["lightx2v", "causvid"]) and "preset" in model["fields"]
    assert model["preset_recognised_from"] == f"--lora {lora} (LightX2V step/CFG-distilled LoRA)"
    small = {"prompt": "a fox", "size": "48x32", "num_frames": 5}
    default = client.post("/v1/videos", json=small).json()
    assert (default["preset"], default["num_inference_steps"]) == ("lightx2v", 4)
    assert "is distilled" not in caplog.text
    with caplog.at_level("WARNING", logger="vidax.serve.jobs"):
        many = client.post("/v1/videos", json={**small, "num_inference_steps": 30, "guidance_scale": 5.0}).json()
    assert (
        f"{many['id']}: --lora {lora} (LightX2V step/CFG-distilled LoRA) is distilled, yet this call runs 30 steps"
        in (caplog.text)
    )
    causvid = client.post("/v1/videos", json={**small, "preset": "causvid"}).json()
    assert (causvid["preset"], causvid["num_inference_steps"]) == ("causvid", 12)
    # "none": no preset for this job (the checkpoint's steps and sampler), under the server's
    plain = client.post("/v1/videos", json={**small, "preset": "None"})
    assert plain.status_code == 200 and plain.json()["preset"] is None, plain.text
    plain = plain.json()
    assert plain["num_inference_steps"] == pipe.info.defaults.num_inference_steps
    own = read_plan(ckpt).checkpoint.config("scheduler")["_class_name"]  # the checkpoint's sampler
    assert type(runner._pending[plain["id"]].scheduler).__name__ == own != type(pipe.scheduler).__name__
    assert "preset lightx2v unless a request" in ready_line("tiny", "http://127.0.0.1:1/", "jobs", None, pipe.preset)
    for j in (default, many, causvid, plain):
        assert client.delete(f"/v1/videos/{j['id']}").status_code == 200
    jobs = [
        client.post("/v1/videos", json={**small, "preset": name, "num_inference_steps": 2}).json()
        for name in ("causvid", "lightx2v")
    ]
    samplers = []
    stepped = runner._stepped
    runner._stepped = lambda batch, step, n: (samplers.append(type(pipe.scheduler).__name__), stepped(batch, step, n))
    done = _run_all(runner, jobs)
    assert [d["status"] for d in done] == ["completed"] * 2, done
    assert samplers == ["UniPCMultistepScheduler"] * 2 + ["FlowMatchEulerDiscreteScheduler"] * 2
    assert pipe.scheduler is plan.scheduler  # the server's preset's, back after each job
    runner.store.close()


def test_batched_jobs_equal_each_job_alone(tiny_pipe, tmp_path):
    """Jobs that differ only in prompt, negative prompt, seed and guidance run as one denoising
    batch (``--max-batch 4``, the window long enough for all four; the tiny Wan's guidance is
    plain CFG, each video weighed by its own); each job's frames equal the same job run alone
    within :data:`BATCH_ATOL`, its mp4 is its row of the batch, and its record says how it was
    batched. A job without CFG (``guidance_scale`` 1) runs in its own batch. In-process with
    the worker."""
    from vidax.serve.jobs import JobRunner, JobStore, per_video_guidance

    assert per_video_guidance(tiny_pipe)
    requests = [
        dict(prompt="a red car", negative_prompt="blurry", seed=1),
        dict(prompt="a boat on a lake at dawn", seed=2),
        dict(prompt="a fox", negative_prompt="low quality, noise", seed=3, guidance_scale=3.0),
        dict(prompt="a fox", negative_prompt="low quality, noise", seed=3),
        dict(prompt="a fox", seed=5, guidance_scale=1.0),
    ]
    batched = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "batched"), max_batch=4, batch_window_ms=3000)
    jobs = [batched.submit({**r, **SHAPE, "num_inference_steps": 3}) for r in requests]
    pendings = [batched._pending[j["id"]] for j in jobs]
    assert [p.key == pendings[0].key for p in pendings] == [True, True, True, True, False]
    # The batched call's frames against each job's own call.
    call = batched._batched_call(pendings[:4], os.devnull)
    assert call.video_guidance == ((5.0, 5.0), (5.0, 5.0), (3.0, 3.0), (5.0, 5.0))
    together = _batch_frames(tiny_pipe, batched, pendings[:4])
    for row in range(4):
        np.testing.assert_allclose(together[row], _alone(tiny_pipe, pendings[row]), atol=BATCH_ATOL, rtol=0)
        assert np.abs(together[row] - together[row][:1]).max() > 0.01  # not a constant video
    assert np.abs(together[0] - together[1]).max() > 0.01  # each row its own prompt and seed
    assert np.abs(together[2] - together[3]).max() > 0.01  # and its own guidance
    last = _alone(tiny_pipe, pendings[4])
    done = _run_all(batched, jobs)
    assert [d["status"] for d in done] == ["completed"] * 5, done
    ids = [j["id"] for j in jobs]
    assert [d["batch"] for d in done] == [
        *({"size": 4, "index": i, "jobs": ids[:4], "resumed_from_step": None, "data_parallel": None} for i in range(4)),
        {"size": 1, "index": 0, "jobs": [ids[4]], "resumed_from_step": None, "data_parallel": None},
    ]
    for d, frames in zip(done, [*together, last]):
        _assert_mp4_of(batched, d, frames, tmp_path)
    batched.store.close()


def test_cancelling_one_job_of_a_running_batch(tiny_pipe, tmp_path):
    """A job cancelled while its batch runs is failed (``cancelled``, the step it reached, the
    batch it ran in) at once; the batch runs on, and the other jobs complete with their rows of the batch, which
    equal their runs alone within :data:`BATCH_ATOL`."""
    from vidax.serve.jobs import JobRunner, JobStore

    steps = 30  # the cancel comes after step 1, well before the end
    runner = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "batched"), max_batch=3, batch_window_ms=3000)
    jobs = [
        runner.submit({"prompt": p, "seed": i, **SHAPE, "num_inference_steps": steps})
        for i, p in enumerate(("a red car", "a boat", "a fox"))
    ]
    pendings = [runner._pending[j["id"]] for j in jobs]
    runner.start()
    try:
        _wait_in_process(runner, jobs[1]["id"], until=lambda job: job["step"] >= 1)
        cancelled = runner.cancel(jobs[1]["id"])
        done = [_wait_in_process(runner, j["id"]) for j in jobs]
    finally:
        _stop(runner)
    assert cancelled["status"] == "failed" and cancelled["error"]["code"] == "cancelled", cancelled
    step = cancelled["step"]
    assert 1 <= step < steps and cancelled["error"]["message"] == f"cancelled after denoising step {step} of {steps}"
    assert done[1] == cancelled  # the batch's end does not overwrite it
    assert [d["status"] for d in (done[0], done[2])] == ["completed"] * 2, done
    ids = [j["id"] for j in jobs]
    assert [d["batch"] for d in done] == [
        {"size": 3, "index": i, "jobs": ids, "resumed_from_step": None, "data_parallel": None} for i in range(3)
    ]
    assert not os.path.exists(runner.store.video_path(ids[1]))
    together = _batch_frames(tiny_pipe, runner, pendings)
    for row in (0, 2):
        np.testing.assert_allclose(together[row], _alone(tiny_pipe, pendings[row]), atol=BATCH_ATOL, rtol=0)
        _assert_mp4_of(runner, done[row], together[row], tmp_path)
    runner.store.close()


def test_data_parallel_batches_split_over_the_mesh(ckpt, tiny_pipe, tmp_path):
    """With the pipeline on a data-parallel mesh (``--dp 2``; 2 of the suite's 8 fake CPU
    devices) a batch's denoising rows split over the devices: two CFG jobs are 4 rows, 2 per
    device; a job without CFG (1 row) is padded with a copy of itself to 2. Each job's frames
    equal its run alone on one device within :data:`BATCH_ATOL`, its mp4 is its row of the
    batch, and its record says how it ran."""
    import vidax
    from vidax.serve.jobs import JobRunner, JobStore

    pipe = vidax.load_pipeline(ckpt, mesh=(2, 1, 1), progress=False)
    requests = [
        dict(prompt="a red car", seed=1),
        dict(prompt="a boat", seed=2),
        dict(prompt="a fox", seed=3, guidance_scale=1.0),
    ]
    runner = JobRunner(pipe, "tiny", JobStore(tmp_path / "dp"), max_batch=2, batch_window_ms=3000)
    jobs = [runner.submit({**r, **SHAPE}) for r in requests]
    pendings = [runner._pending[j["id"]] for j in jobs]
    padded = runner._batched_call(pendings[2:], os.devnull)
    assert padded.prompts == ["a fox", "a fox"] and not padded.do_cfg
    rows = [*_batch_frames(pipe, runner, pendings[:2]), _batch_frames(pipe, runner, pendings[2:])[0]]
    for frames, pending in zip(rows, pendings):
        np.testing.assert_allclose(frames, _alone(tiny_pipe, pending), atol=BATCH_ATOL, rtol=0)
    done = _run_all(runner, jobs)
    assert [d["status"] for d in done] == ["completed"] * 3, done
    ids = [j["id"] for j in jobs]
    assert [d["batch"] for d in done] == [
        *(
            {
                "size": 2,
                "index": i,
                "jobs": ids[:2],
                "resumed_from_step": None,
                "data_parallel": {"devices": 2, "rows": 4, "padding": 0, "split": True},
            }
            for i in range(2)
        ),
        {
            "size": 1,
            "index": 0,
            "jobs": ids[2:],
            "resumed_from_step": None,
            "data_parallel": {"devices": 2, "rows": 2, "padding": 1, "split": True},
        },
    ]
    for d, frames in zip(done, rows):
        _assert_mp4_of(runner, d, frames, tmp_path)
    runner.store.close()


def test_events_stream_progress_previews_and_the_end(tiny_pipe, preview_map, tmp_path):
    """``GET /v1/videos/{id}/events``: server-sent events of a job's place in the queue, its
    steps, a preview every ``preview_every`` steps (the middle latent frame of UniPC's data
    prediction through the map fit to the VAE, a PNG at the latent size), then ``done`` with the job; 404 for an
    unknown id. In-process, the worker started by the app's lifespan."""
    import base64
    import io

    from PIL import Image
    from starlette.testclient import TestClient

    from vidax.serve.app import create_app
    from vidax.serve.jobs import JobRunner, JobStore

    runner = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"), preview_every=2, preview_map=preview_map)
    with TestClient(create_app(runner), base_url="http://localhost") as client:
        assert client.get("/v1/videos/video_nope/events").status_code == 404
        job = client.post(
            "/v1/videos", json={"prompt": "a lighthouse", "seed": 4, **dict(SHAPE, num_inference_steps=4)}
        ).json()
        # A deadline: the stream ends with the job or with the runner, stopped after TIMEOUT.
        watchdog = threading.Timer(TIMEOUT, runner.stop, (0,))
        watchdog.start()
        try:
            events = read_events(client, job["id"])
        finally:
            watchdog.cancel()
    names = [n for n, _ in events]
    assert names and names[-1] == "done", f"the stream ended without done (after {TIMEOUT} s?): {names}"
    assert events[-1][1]["status"] == "completed" and events[-1][1]["id"] == job["id"]
    # Each progress event is news: its (status, step) differs from the last one (step 0 comes
    # twice when the stream sees the job queued, then in progress, before its first step).
    progress = [(d["status"], d["step"]) for n, d in events if n == "progress"]
    steps = [step for _, step in progress]
    assert steps == sorted(steps) and len(set(progress)) == len(progress) and steps[-1] >= 3, events
    previews = [d for n, d in events if n == "preview"]
    assert [(p["step"], p["of"]) for p in previews] == [(2, "estimate"), (4, "estimate")], names
    for p in previews:
        assert p["image"].startswith("data:image/png;base64,")
        image = Image.open(io.BytesIO(base64.b64decode(p["image"].split(",", 1)[1])))
        assert image.size == (48 // 8, 32 // 8) and image.mode == "RGB"  # the latent frame's size
    assert all(d.get("position") in (None, 1) for n, d in events if n == "queued")


@pytest.fixture(scope="module")
def preview_map(tiny_pipe):
    from vidax.serve.preview import fit_preview_map

    return fit_preview_map(tiny_pipe)


#: The tiny checkpoint's fit map's correlation with the pooled decode of held-out random latents
#: (seed 1; :func:`vidax.serve.preview.correlation`), and the bar a wrong map must stay under.
#: Measured 0.07: its random-weight VAE is far from linear per latent pixel (its attention and
#: norms mix the frame), a trained VAE's is not; the wrong maps measured within 0.04 of 0.
PREVIEW_R_MIN, WRONG_MAP_R_MAX = 0.05, 0.045


def test_events_are_sent_in_step_order():
    """A poll that finds step 3 reached and the previews of steps 1-3 made sends the previews,
    then step 3's progress (it sent the progress first); a preview made before its step's
    progress is recorded waits for it."""
    import asyncio

    from vidax.serve import app

    def job(step, status="in_progress"):
        return {"id": "j", "status": status, "step": step, "num_inference_steps": 4, "progress": 25 * step}

    shots = [
        {
            "job": job(3),
            "position": None,
            "previews": [{"step": s, "of": "estimate", "image": ""} for s in (1, 2, 3, 4)],
        },
        {"job": job(4), "position": None, "previews": [{"step": 4, "of": "estimate", "image": ""}]},
        {"job": job(4, "completed"), "position": None, "previews": []},
    ]

    class Runner:
        stopping = False

        def events(self, job_id):
            return shots.pop(0)

    async def collect():
        return [e async for e in app._event_stream(Runner(), "j")]

    sent = [(e.split("\n")[0][7:], json.loads(e.split("\n")[1][6:]).get("step")) for e in asyncio.run(collect())]
    assert sent == [
        ("preview", 1),
        ("preview", 2),
        ("preview", 3),
        ("progress", 3),
        ("preview", 4),
        ("progress", 4),
        ("done", 4),
    ], sent


def test_preview_map_is_fit_to_the_checkpoints_own_vae(tiny_pipe, preview_map):
    """The latent-to-RGB map fit through the tiny checkpoint's decode predicts the pooled decode
    of other random latents (seed 1, never fit) better than the same map with its latent
    channels rolled or its colours swapped, which predict nothing."""
    from vidax.serve.preview import FIT_VIDEOS, PreviewMap, correlation, decoded_samples

    latents, rgb = decoded_samples(tiny_pipe, seed=1)
    assert latents.shape == (FIT_VIDEOS * 2 * 8 * 8, 16) and rgb.shape == (len(latents), 3)
    r = correlation(preview_map, latents, rgb)
    assert r > PREVIEW_R_MIN and preview_map.r > PREVIEW_R_MIN, (r, preview_map.r)
    w, b = preview_map.weights, preview_map.bias
    for wrong in (w[np.roll(np.arange(16), 1)], w[np.roll(np.arange(16), 5)], w[:, [1, 2, 0]], w[::-1]):
        assert abs(correlation(PreviewMap(wrong, b, 0.0), latents, rgb)) < WRONG_MAP_R_MAX


class _LinearDecodeHooks:
    """The hooks of a pipeline whose decode is a known linear map per latent pixel, with a causal
    temporal compression of 4 (latent frame 0 -> 1 frame, others -> 4), spatial 8, and one padding
    latent frame in front that ``latents_to_decode`` drops (as CogVideoX's): the fit must find the map."""

    latent_streams = ("latents",)
    weights = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32) * 0.2
    bias = np.float32([0.1, -0.2, 0.05])

    @classmethod
    def size_limits(cls, info):
        from vidax.pipelines.base import SizeLimits

        return SizeLimits()

    def condition(self, call, stats):
        return {}

    def initial_noise(self, call):
        t = (call.num_frames - 1) // 4 + 2  # one padding frame
        shape = (len(call.prompts), t, call.height // 8, call.width // 8, 6)
        return np.random.default_rng(call.seed).normal(size=shape).astype(np.float32)

    def prepare_latents(self, call, noise, cond):
        return noise

    def final_latents(self, call, x, cond):
        return x

    def latents_to_decode(self, call, z):
        return z[:, 1:]

    def decode(self, call, z, stats):
        rgb = z[:, 1:] @ self.weights + self.bias  # (B, T, h, w, 3)
        frames = np.concatenate([rgb[:, :1], np.repeat(rgb[:, 1:], 4, axis=1)], axis=1)
        return np.repeat(np.repeat(frames, 8, axis=2), 8, axis=3) / 2 + 0.5


class _LinearDecodePipe:
    """The pipeline of :class:`_LinearDecodeHooks` (its family, and them bound as ``hooks``)."""

    family = _LinearDecodeHooks

    class info:  # noqa: N801 (the attribute a pipeline has)
        class vae_config:  # noqa: N801
            spatial_compression, temporal_compression = 8, 4

    def __init__(self):
        self.hooks = _LinearDecodeHooks()

    @classmethod
    def check_call(cls, info, prompts, **kw):
        from types import SimpleNamespace

        return SimpleNamespace(prompts=prompts, **kw)

    def precision(self):
        import contextlib

        return contextlib.nullcontext()


def test_preview_fit_pools_each_latent_pixel_with_the_pixels_it_decodes_to():
    from vidax.serve.preview import fit_preview_map

    found = fit_preview_map(_LinearDecodePipe())
    np.testing.assert_allclose(found.weights, _LinearDecodeHooks.weights, atol=1e-5)
    np.testing.assert_allclose(found.bias, _LinearDecodeHooks.bias, atol=1e-5)
    assert found.r > 0.9999


def test_preview_of_the_estimate_from_the_scheduler_state():
    """Flow-matching Euler and CogVideoX's DDIM: two consecutive latents give the step's x0
    exactly (``x_t - sigma v``; the DDIM's ``pred_original_sample``); the first step after a gap
    (a resume) shows the latents."""
    import jax.numpy as jnp

    from vidax.schedulers.ddim_cogvideox import CogVideoXDDIMScheduler, pred_original_sample
    from vidax.schedulers.flow_match_euler import FlowMatchEulerDiscreteScheduler
    from vidax.serve.preview import Previewer

    class Hooks:
        latent_streams = ("latents",)

        @staticmethod
        def step_state(state):
            return state

    class Pipe:
        family, hooks, info = Hooks, Hooks(), None

    rng = np.random.default_rng(0)
    x, model_output = (jnp.asarray(rng.normal(size=(2, 3, 4, 5, 6)), jnp.float32) for _ in range(2))
    euler = FlowMatchEulerDiscreteScheduler.from_config({"shift": 3.0})
    ddim = CogVideoXDDIMScheduler.from_config(
        {"prediction_type": "v_prediction", "timestep_spacing": "trailing", "rescale_betas_zero_snr": True}
    )
    for sched, step in ((euler, 1), (ddim, 2)):
        state = sched.set_timesteps(4, sample_shape=x.shape)
        for _ in range(step):
            _, state = sched.step(state, model_output, x)
        previewer = Previewer(Pipe(), None, None, every=step + 1)
        assert previewer.estimate(step, x, state) is None  # kept for the next step's preview
        new, after = sched.step(state, model_output, x)
        frame, of = previewer.estimate(step + 1, new, after)
        if sched is euler:
            want = x - state.sigmas[step] * model_output
        else:
            want = pred_original_sample("v_prediction", state.sqrt_alpha[step], state.sqrt_beta[step], x, model_output)
        assert of == "estimate"
        np.testing.assert_allclose(frame, np.asarray(want)[:, 1], atol=2e-5)
        assert np.abs(frame - np.asarray(new)[:, 1]).max() > 0.1  # not the latents
        gap = Previewer(Pipe(), None, None, every=step + 1)
        frame, of = gap.estimate(step + 1, new, after)
        assert of == "latents"
        np.testing.assert_array_equal(frame, np.asarray(new)[:, 1])


def test_preview_frame_of_packed_tokens():
    """LTX-Video's conditioned pipelines hold packed tokens (B, F' H' W', C): the middle frame is
    cut from them by the latent grid; with appended tokens (another count) there is none."""
    from types import SimpleNamespace

    from vidax.serve.preview import middle_frame

    pipe = SimpleNamespace(
        family=SimpleNamespace(latent_streams=("latents",)),
        info=SimpleNamespace(latent_grid=lambda frames, height, width: (3, 2, 4)),
    )
    call = SimpleNamespace(num_frames=17, height=64, width=128)
    grid = np.arange(2 * 3 * 2 * 4 * 5, dtype=np.float32).reshape(2, 3, 2, 4, 5)
    np.testing.assert_array_equal(middle_frame(pipe, call, grid.reshape(2, 24, 5)), grid[:, 1])
    np.testing.assert_array_equal(middle_frame(pipe, call, {"latents": grid}), grid[:, 1])
    assert middle_frame(pipe, call, np.zeros((2, 25, 5), np.float32)) is None


def test_preview_of_unipc_is_its_data_prediction_nearer_the_end_than_the_latents(tiny_pipe, preview_map):
    """UniPC (the tiny Wan): the preview shows its last converted model output, the data
    prediction: after the last step (first order, to sigma 0) it is the final latents; after step
    2 of 4 it is nearer them than that step's latents are (mean distance measured 0.49 vs
    0.61 with the tiny model's random velocities)."""
    import dataclasses

    from vidax.serve.preview import Previewer, middle_frame

    call = tiny_pipe.check_call(
        tiny_pipe.info,
        "a lighthouse",
        seed=4,
        height=32,
        width=48,
        num_frames=5,
        num_inference_steps=4,
        output_type="latent",
        progress=False,
    )
    previewer = Previewer(tiny_pipe, call, preview_map, every=2)
    seen = {}

    def on_state(done, latents, state):
        seen[done] = (previewer.estimate(done, latents, state), middle_frame(tiny_pipe, call, latents))

    final = tiny_pipe.generate(dataclasses.replace(call, on_state=on_state)).frames  # (B, C, T, h, w)
    assert [k for k, v in seen.items() if v[0] is not None] == [2, 4]
    (estimate, of), latents = seen[2]
    assert of == "estimate" and estimate.shape == latents.shape == (1, 4, 6, 16)
    end = np.moveaxis(final[:, :, final.shape[2] // 2], 1, -1)
    np.testing.assert_allclose(seen[4][0][0], end, atol=1e-5)
    assert np.abs(estimate - end).mean() < 0.9 * np.abs(latents - end).mean()


#: Steps of the job that holds the worker while requests are queued behind it (the most the tiny
#: checkpoint's scheduler takes): it is cancelled once they are answered, long before its end.
HOLD_STEPS = 1000


def _held(server: Server, send):
    """``send()``'s result, sent while a long job holds the server's worker (so what it queues
    waits, and the queue's capacity, not the timing of the requests against the jobs, decides
    which are refused); the holding job is cancelled then (failing if it ended first) and
    returned with the result."""
    holder = server.post(prompt="holding the worker", seed=0, **dict(SHAPE, num_inference_steps=HOLD_STEPS)).json()
    server.wait(holder["id"], until=lambda job: job["step"] >= 1)
    result = send()
    cancelled = server.http.delete(f"/v1/videos/{holder['id']}").json()
    assert cancelled.get("status") == "in_progress", (
        f"the holding job ended before the requests were answered: {cancelled}"
    )
    ended = server.wait(holder["id"])
    assert ended["error"]["code"] == "cancelled", ended
    return result, holder["id"]


def test_load_200_requests_from_20_clients(ckpt, tmp_path, compile_cache):
    """A bounded load test on loopback: 20 clients send 10 requests each, at once, to a server
    that batches (``--max-batch 4``) and queues 16. Every request is answered 200 (queued) or
    429 in OpenAI's error shape; every accepted job completes, each id once in the listing, no
    other job appears; the server's resident memory over the second half of the load stays
    within 64 MB of the first half's (the warm-up compiles the batch sizes; glibc's arenas capped
    at 2, so that RSS measures what the server holds). One denoising step
    at 48x32: about a minute on 2 busy cores.

    Nothing here depends on how fast the machine is: each half's 100 requests are sent while a
    long job holds the worker (:func:`_held`), so exactly 19 are accepted (the holder and 19
    fill the 16 + 4 places) and 81 refused, and the 19 then run as batches of 4, 4, 4, 4, 3;
    every wait has a deadline (:data:`TIMEOUT`) and fails saying what it waited for."""
    server = Server(
        ckpt,
        tmp_path / "jobs",
        compile_cache,
        "--queue-size",
        "16",
        "--max-batch",
        "4",
        "--batch-window-ms",
        "50",
        "--save-every",
        "0",
        # glibc's malloc gives each thread that allocates (uvicorn's and the request threads) an
        # arena of its own and returns little of them: with the default (8 per core) the RSS
        # moved by 2-110 MB between identical halves (measured), with 2 it stays within a few
        # MB, so the RSS follows what the server holds and a leak shows.
        env={"MALLOC_ARENA_MAX": "2"},
    )
    fields = dict(SHAPE, num_inference_steps=1)
    places = 16 + 4 - 1  # the queue and the batch, less the holding job
    proc = psutil.Process(server.proc.pid)
    try:

        def client(c, half):
            with httpx.Client(base_url=server.url, timeout=TIMEOUT) as http:
                return [
                    http.post("/v1/videos", json={"prompt": f"client {c} request {i}", "seed": 100 * c + i, **fields})
                    for i in range(5 * half, 5 * half + 5)
                ]

        warmed, holders = [], []
        for k in range(1, 5):  # compile the batch sizes first: k jobs queued behind a holder run as one batch
            warm, holder = _held(
                server, lambda k=k: [server.post(prompt=f"warm {i}", seed=i, **fields).json()["id"] for i in range(k)]
            )
            assert [server.wait(i)["batch"]["size"] for i in warm] == [k] * k
            warmed, holders = warmed + warm, holders + [holder]
        answers, rss = [], [proc.memory_info().rss]
        for half in (0, 1):

            def load(half=half):
                with concurrent.futures.ThreadPoolExecutor(20) as pool:
                    return [a for got in pool.map(lambda c: client(c, half), range(20)) for a in got]

            got, holder = _held(server, load)
            answers, holders = answers + got, holders + [holder]
            assert sum(a.status_code == 200 for a in got) == places, [a.status_code for a in got]
            accepted = [a.json()["id"] for a in answers if a.status_code == 200]
            for job_id in accepted:
                assert server.wait(job_id)["status"] == "completed", server.http.get(f"/v1/videos/{job_id}").json()
            rss.append(proc.memory_info().rss)
        assert len(answers) == 200 and {a.status_code for a in answers} <= {200, 429}, {
            a.status_code: a.text for a in answers
        }
        refused = [a.json()["error"] for a in answers if a.status_code == 429]
        assert len(refused) == 200 - 2 * places and all(
            e["code"] == "queue_full"
            and e["type"] == "invalid_request_error"
            and e["message"].startswith("the queue is full")
            for e in refused
        ), refused[:3]
        assert len(accepted) == len(set(accepted)) == 2 * places
        listed, after = [], None
        while True:
            page = server.http.get("/v1/videos", params={"limit": 100, **({"after": after} if after else {})}).json()
            listed += [j["id"] for j in page["data"]]
            if not page["has_more"]:
                break
            after = listed[-1]
        assert sorted(listed) == sorted(accepted + warmed + holders)
        sizes = [server.http.get(f"/v1/videos/{i}").json()["batch"]["size"] for i in accepted]
        assert sorted(sizes) == [3] * 6 + [4] * 32, sizes  # each half: 4, 4, 4, 4, 3
        print("server RSS MiB after warm-up, first half, second half:", [r / 2**20 for r in rss])
        assert rss[2] - rss[1] < 64 * 2**20, [r / 2**20 for r in rss]
    finally:
        assert server.stop() == 0, server.output()


#: The step caches a job may ask for, as its ``cache`` field, at 8 steps of the tiny Wan:
#: First-Block Cache skipping every step after the first (its cached residual carried), MagCache
#: with flat ratios (steps 3-5 and 7-8 skipped: its host-side accumulators decide) and
#: TaylorSeer's lite mode (steps 4 and 6-8 predicted from its bfloat16 factors).
CACHES = ("first_block:1e9", "mag:" + str([1.0] * 8), "taylorseer")


@pytest.mark.parametrize("cache", CACHES)
def test_a_cached_call_resumed_from_its_saved_state_ends_as_the_uninterrupted_call(tiny_pipe, cache):
    """With a step cache, ``on_state`` also hands the cache's state (its arrays and the host's
    counters); a call resumed from step k with it ends with the latents of the uninterrupted
    call, bit for bit on CPU (the same compiled step on the same inputs), and its cache report
    counts every step as the uninterrupted one's. The cache state is what makes it so: resumed
    with it zeroed and step 1's counters the latents differ, and without one the resume is
    refused (the server then starts the job over)."""
    import dataclasses

    import jax

    from vidax.pipelines.step_cache import CacheState, parse_cache_option

    call = tiny_pipe.check_call(
        tiny_pipe.info, "a fox", seed=3, num_inference_steps=8, output_type="latent", progress=False, **SMALL_CALL
    )
    saved = {}

    def keep(done, latents, state, cache=None):
        arrays = [np.array(a) for a in jax.tree.leaves((latents, state))]
        saved[done] = (arrays, CacheState([np.array(a) for a in cache.arrays], cache.host))

    tiny_pipe.enable_cache(parse_cache_option(cache, 8))
    try:
        whole = tiny_pipe.generate(dataclasses.replace(call, on_state=keep))
        assert sorted(saved) == list(range(1, 9))
        for k in (3, 5):
            resumed = tiny_pipe.generate(dataclasses.replace(call, resume=(k, *saved[k])))
            np.testing.assert_array_equal(resumed.frames, whole.frames)
            assert resumed.stats.cache.describe().split(",")[0] == whole.stats.cache.describe().split(",")[0]
            assert resumed.stats.cache.step_kind == whole.stats.cache.step_kind
        fresh = CacheState([np.zeros_like(a) for a in saved[3][1].arrays], saved[1][1].host)
        other = tiny_pipe.generate(dataclasses.replace(call, resume=(3, saved[3][0], fresh)))
        assert np.abs(other.frames - whole.frames).max() > 0
        with pytest.raises(InputError, match="holds no step cache state"):
            tiny_pipe.generate(dataclasses.replace(call, resume=(5, saved[5][0])))
    finally:
        tiny_pipe.disable_cache()
    with pytest.raises(InputError, match="holds a step cache's state and the call runs without one"):
        tiny_pipe.generate(dataclasses.replace(call, resume=(5, *saved[5])))


@pytest.mark.parametrize("cache", CACHES)
def test_a_job_with_a_step_cache_resumes_after_a_restart_to_the_same_video(tiny_pipe, cache, tmp_path, monkeypatch):
    """A job with a step cache, its server stopped after step 5 (``--save-every 2``: step 4
    saved, with the cache's state beside the latents), is queued again by the next server on
    the folder and resumes at step 4; its frames equal those of the same request run through,
    bit for bit (CPU: the same compiled steps on the same inputs), and its cache report counts
    all 8 steps as that run's. In-process: the worker stops itself at the step, as a SIGTERM
    stops it (the kill -9 test above covers losing the process)."""
    import vidax.io.video
    from vidax.serve.jobs import JobRunner, JobStore

    written = {}
    write = vidax.io.video.write_video

    def keep(frames, path, **kw):  # the frames each job's mp4 is written from
        written[os.path.basename(path).split(".")[0]] = np.array(frames)
        return write(frames, path, **kw)

    monkeypatch.setattr(vidax.io.video, "write_video", keep)
    request = {"prompt": "a fox", "seed": 3, **SHAPE, "num_inference_steps": 8, "cache": cache}
    first = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"), save_every=2)
    job = first.submit(request)
    stepped = first._stepped

    def stop_after_5(batch, step, steps):
        stepped(batch, step, steps)
        first.stopping = first.stopping or step == 5  # the worker's next check stops the batch

    first._stepped = stop_after_5
    first.start()
    deadline = time.monotonic() + TIMEOUT
    while first._thread.is_alive():  # the worker ends once stopped
        assert first.get(job["id"])["status"] not in FINAL, f"the job ended before step 5: {first.get(job['id'])}"
        assert time.monotonic() < deadline, f"the worker did not stop after step 5: {first.get(job['id'])}"
        first._thread.join(0.05)
    first.store.close()
    assert job["id"] not in written  # it did not finish
    second = JobRunner(tiny_pipe, "tiny", JobStore(tmp_path / "jobs"), save_every=2)
    queued = second.get(job["id"])
    assert queued["status"] == "queued" and queued["step"] == queued["saved_step"] == 4, queued
    again = second.submit(request)
    resumed, through = _run_all(second, [job, again])
    assert resumed["status"] == through["status"] == "completed", (resumed, through)
    assert resumed["batch"]["resumed_from_step"] == 4 and through["batch"]["resumed_from_step"] is None
    np.testing.assert_array_equal(written[job["id"]], written[again["id"]])
    assert resumed["stats"]["cache"].split(",")[0] == through["stats"]["cache"].split(",")[0]
    assert not list((tmp_path / "jobs" / "states").glob("*"))
    second.store.close()


def test_a_cached_call_of_two_experts_resumes_in_either_experts_run(tmp_path):
    """Wan2.2's two experts each start a fresh cache state (their hooks are their own): a cached
    call resumed inside the first expert's run, at the step where the second takes over, or
    inside the second's ends with the uninterrupted call's latents, bit for bit on CPU, and the
    same skip record (First-Block Cache at a threshold that skips every step after each
    expert's first: a state carried into the wrong expert, or lost inside one, changes both)."""
    import dataclasses

    import jax

    import vidax
    from tests.parity.wan_reference import write_tiny_wan_variant
    from vidax.pipelines.step_cache import CacheState, parse_cache_option

    pipe = vidax.load_pipeline(write_tiny_wan_variant(str(tmp_path / "a14b"), boundary_ratio=0.875), progress=False)
    call = pipe.check_call(
        pipe.info, "a fox", seed=3, num_inference_steps=6, output_type="latent", progress=False, **SMALL_CALL
    )
    plan = pipe.hooks.expert_plan(
        pipe.hooks.set_timesteps(call, np.zeros(pipe.family.latent_shape(pipe.info, call), np.float32))
    )
    switch = plan.index(1)
    assert 1 < switch < 5, plan  # steps of each expert before and after every resume point below
    saved = {}

    def keep(done, latents, state, cache=None):
        arrays = [np.array(a) for a in jax.tree.leaves((latents, state))]
        saved[done] = (arrays, CacheState([np.array(a) for a in cache.arrays], cache.host))

    pipe.enable_cache(parse_cache_option("first_block:1e9", 6))
    whole = pipe.generate(dataclasses.replace(call, on_state=keep))
    assert whole.stats.cache.step_kind == ["full"] + ["skipped"] * (switch - 1) + ["full"] + ["skipped"] * (5 - switch)
    for k in (switch - 1, switch, switch + 1):
        resumed = pipe.generate(dataclasses.replace(call, resume=(k, *saved[k])))
        np.testing.assert_array_equal(resumed.frames, whole.frames)
        assert resumed.stats.cache.step_kind == whole.stats.cache.step_kind, k
