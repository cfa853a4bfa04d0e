"""`vidax serve` throughput and overhead on the tiny embedded checkpoint.

Prints (and writes as JSON with ``--json``): the time of a direct pipeline call plus the mp4
write (what a job does, in this process, the shape compiled first) and of a request to the
server (``python -m vidax serve`` on 127.0.0.1, a free port; the shape compiled by a first request
not counted), 10 of each alternating (POST, poll the status every ``--poll`` s, download the mp4), then
10 concurrent requests (all POSTed at once, queued, run one at a time): requests per minute, the
latency of each, and the service's overhead over the direct call (HTTP, the queue, the SQLite
records, the polling). Then the same concurrent requests against a server that batches them
(``--max-batch``, default 4): videos per minute batched vs one at a time, at the same settings.
Also the CPU model.

    python benchmarks/serve.py [--requests 10] [--size 48x32] [--frames 5] [--steps 2] [--poll 0.01] [--max-batch 4]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from step_bench import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


class Direct:
    """The pipeline loaded in this process: one call plus the mp4 write, as a job does."""

    def __init__(self, ckpt: str, fields: dict, folder: str):
        import vidax

        self.pipe, self.folder = vidax.load_pipeline(ckpt, progress=False), folder
        width, height = map(int, fields["size"].split("x"))
        self.kw = dict(
            height=height,
            width=width,
            num_frames=fields["num_frames"],
            num_inference_steps=fields["num_inference_steps"],
            progress=False,
        )

    def request(self, i: int) -> float:
        from vidax.io.video import write_video

        t0 = time.perf_counter()
        out = self.pipe(f"a boat {i}", seed=i, **self.kw)
        write_video(out.frames[0], os.path.join(self.folder, f"direct-{i}.mp4"), fps=self.pipe.defaults.fps)
        return time.perf_counter() - t0


class Server:
    def __init__(self, ckpt: str, folder: str, queue_size: int, poll: float, *args: str):
        import httpx

        self.poll = poll
        self.log = open(os.path.join(folder, "server.log"), "w+")
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
                os.path.join(folder, "jobs"),
                "--queue-size",
                str(queue_size),
                *args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            # no persistent compile cache: the first request compiles
            env=dict(
                os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]), VIDAX_COMPILE_CACHE="0"
            ),
        )
        while not (m := re.search(r"on (http://127\.0\.0\.1:\d+)/", open(self.log.name).read())):
            if self.proc.poll() is not None:
                raise SystemExit(f"vidax serve did not start:\n{open(self.log.name).read()}")
            time.sleep(0.1)
        self.http = httpx.Client(base_url=m.group(1), timeout=600)

    def request(self, fields: dict) -> tuple[float, dict]:
        """POST, poll until completed, download: (seconds, the job)."""
        t0 = time.perf_counter()
        r = self.http.post("/v1/videos", json=fields)
        r.raise_for_status()
        job_id = r.json()["id"]
        while (job := self.http.get(f"/v1/videos/{job_id}").json())["status"] not in ("completed", "failed"):
            time.sleep(self.poll)
        if job["status"] != "completed":
            raise SystemExit(f"job failed: {job['error']}")
        self.http.get(f"/v1/videos/{job_id}/content").raise_for_status()
        return time.perf_counter() - t0, job

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(120)


def at_once(server: Server, fields: dict, n: int) -> tuple[list, float]:
    """``n`` requests sent at once (prompt "a car i", seed i): their (seconds, job) and the wall time."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        done = list(pool.map(lambda i: server.request({"prompt": f"a car {i}", **fields, "seed": i}), range(n)))
    return done, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--size", default="48x32")
    p.add_argument("--frames", type=int, default=5)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--poll", type=float, default=0.01, help="seconds between a client's status requests")
    p.add_argument("--max-batch", type=int, default=4, help="the batched server's --max-batch")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    from vidax.default_checkpoint import default_checkpoint

    n = args.requests
    fields = dict(size=args.size, num_frames=args.frames, num_inference_steps=args.steps)
    with tempfile.TemporaryDirectory(prefix="vidax-serve-bench-") as folder:
        ckpt = default_checkpoint()
        direct = Direct(ckpt, fields, folder)
        direct.request(0)  # compiles
        server = Server(ckpt, folder, queue_size=n, poll=args.poll)
        try:
            _, first = server.request(dict(fields, prompt="compile", seed=0))  # the first of the shape compiles
            # Direct calls and requests alternate, so both see the same load of a shared machine.
            d, seq = [], []
            for i in range(n):
                d.append(direct.request(i))
                seq.append(server.request(dict(fields, prompt=f"a boat {i}", seed=i)))
            conc, conc_wall = at_once(server, fields, n)
        finally:
            server.stop()
        batched_folder = os.path.join(folder, "batched")
        os.makedirs(batched_folder)
        server = Server(
            ckpt, batched_folder, n, args.poll, "--max-batch", str(args.max_batch), "--batch-window-ms", "200"
        )
        try:
            for k in range(args.max_batch, 0, -1):  # compile every batch size first (once per size)
                at_once(server, dict(fields, prompt="compile"), k)
            batched, batched_wall = at_once(server, fields, n)
        finally:
            server.stop()
    seq_s = [s for s, _ in seq]
    job_s = [j["stats"]["call_s"] + j["stats"]["write_s"] for _, j in seq]
    # The service's own time in each request: its latency less the job's pipeline call and mp4 write.
    own = [s - j["stats"]["call_s"] - j["stats"]["write_s"] for s, j in seq]
    result = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "requests": n,
        **fields,
        "direct_s_median": statistics.median(d),
        "sequential_s_median": statistics.median(seq_s),
        "sequential_wall_s": sum(seq_s),
        "sequential_per_min": 60 * n / sum(seq_s),
        "job_call_and_write_s_median": statistics.median(job_s),
        "overhead_s_median": statistics.median(s - t for s, t in zip(seq_s, d)),
        "service_own_s_median": statistics.median(own),
        "concurrent_wall_s": conc_wall,
        "concurrent_per_min": 60 * n / conc_wall,
        "concurrent_latency_s_max": max(s for s, _ in conc),
        "max_batch": args.max_batch,
        "batched_wall_s": batched_wall,
        "batched_per_min": 60 * n / batched_wall,
        "batched_speedup": conc_wall / batched_wall,
        "batch_sizes": sorted(j["batch"]["size"] for _, j in batched),
        "direct_per_min": 60 / statistics.median(d),
        "first_request_compile_s": first["stats"]["compile_s"],
        "later_compile_s_median": statistics.median(j["stats"]["compile_s"] for _, j in seq),
    }
    print(
        f"CPU: {result['cpu']} ({result['cores']} cores visible); tiny checkpoint, {args.size}, {args.frames} frames, "
        f"{args.steps} steps; {n} requests each"
    )
    print(
        f"direct pipeline call + mp4 write: median {result['direct_s_median']:.3f} s "
        f"({result['direct_per_min']:.1f} per minute)"
    )
    print(
        f"sequential via HTTP: median {result['sequential_s_median']:.3f} s per request "
        f"({result['sequential_per_min']:.1f} requests/min); the pipeline call + mp4 write inside the job: "
        f"median {result['job_call_and_write_s_median']:.3f} s"
    )
    print(
        f"service overhead: {result['overhead_s_median'] * 1000:.0f} ms per request over the direct call before it "
        f"({100 * result['overhead_s_median'] / result['direct_s_median']:.1f} %); the request's latency less its "
        f"job's call and write: median {result['service_own_s_median'] * 1000:.0f} ms (HTTP, queue, records, "
        f"polling every {args.poll * 1000:g} ms)"
    )
    print(
        f"concurrent via HTTP ({n} at once, run one at a time): {result['concurrent_wall_s']:.2f} s wall, "
        f"{result['concurrent_per_min']:.1f} requests/min; the last finished after "
        f"{result['concurrent_latency_s_max']:.2f} s"
    )
    print(
        f"concurrent via HTTP ({n} at once, batched up to {args.max_batch}): {result['batched_wall_s']:.2f} s wall, "
        f"{result['batched_per_min']:.1f} videos/min, {result['batched_speedup']:.2f}x one at a time; batch sizes "
        f"{result['batch_sizes']}"
    )
    print(
        f"compiling in a job: {result['first_request_compile_s']:.2f} s in the first request of the shape, "
        f"median {result['later_compile_s_median']:.3f} s in the later ones (reused)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
