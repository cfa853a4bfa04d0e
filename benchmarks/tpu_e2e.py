"""Time to video on one accelerator: one process = one row of the table in docs/benchmarks/tpu.md.

Runs a checkpoint end to end through vidax's own plan (``read_plan`` -> ``with_call`` ->
``with_placement`` -> ``with_memory``), load (``from_plan``), call (``generate``) and video
writing, with **random weights made on the device from the configs**
(``random_weights=True``: the folder needs only its configs, e.g. ``reference_configs/NAME``;
the video is noise), at the checkpoint's call defaults or the given size / steps, and prints
(``--out``: appends) one JSON row:

* ``process_wall_s`` (from the process's start to the row), ``startup_s`` (process start to JAX
  and vidax ready), ``plan_s``, ``load_s``, ``text_encode_s``, ``compile_s`` (the step's),
  ``step_s`` (each step; ``s_per_step`` their median), ``decode_s`` (VAE, compiles included),
  ``audio_decode_s``, ``write_s``, ``total_s`` (load + call + writing);
* ``peak_hbm_gib`` (the device allocator's ``peak_bytes_in_use``; None on a CPU) beside the
  plan's estimate ``estimate_gib``; ``peak_rss_anon_gib`` / ``peak_rss_file_gib`` (host RSS,
  anonymous and file-backed, sampled every 50 ms) and ``peak_rss_gib`` (VmHWM); ``host_used_gib``:
  the host's RAM in use (total less available, every process's) when the load began and at its
  peak (what a plan's host memory is checked against; the TPU machine's RSS counts mappings);
* ``step_flops`` / ``step_tflop`` and ``mfu`` of the median step (``tpu_models``' FLOP formula of the family,
  against the datasheet peak of the device; None where either is unknown);
* ``refused``: the memory plan's refusal (made before any weight is read, naming what fits) where
  the call does not fit and ``--anyway`` is not given: the row has the plan and no timings;
* ``failed``: the exception that ended the call (e.g. out of device memory in the VAE decode), with
  the steps that ran before it;
* ``default_steps`` (the checkpoint's step count) and ``video_s_default_steps``: the process's time to
  the video at that step count, from the run's median step (a row may run fewer steps to fit a call);
* a long video (a diffusion-forcing checkpoint, ``--call overlap_history=17 --frames 721``): the
  mp4 is written chunk by chunk as ``vidax generate`` writes it (no frames kept), ``chunks`` lists
  ``[frames it added, seconds since the call began when it was written]``; ``frames`` and
  ``frames_per_wall_s`` (the video's frames over the process wall) for every row with a video;
* ``cache``: ``cold`` (``--compile-cache DIR`` empty or new), ``warm`` (DIR holds entries) or
  ``off``; ``device_kind``, ``jax``, what vidax chose (staging, tiling) in ``placement``.

``--budget-s S`` stops the call when S seconds have passed since the process started (before the
next step or VAE chunk) and still writes the row, with ``stopped`` saying where (a row must fit
one 10-minute device call); a stage the budget cannot stop (a compile, one long program) is ended
:data:`HARD_STOP_GRACE_S` seconds later with the row so far (``killed``) and every thread's stack
on stderr. ``--table ROWS.jsonl`` renders rows as the markdown table of
docs/benchmarks/tpu.md instead of running anything.

    python benchmarks/tpu_e2e.py --model wan-1.3b --compile-cache /tmp/cc --out rows.jsonl   # cold
    python benchmarks/tpu_e2e.py --model wan-1.3b --compile-cache /tmp/cc --out rows.jsonl   # warm
    python benchmarks/tpu_e2e.py --checkpoint reference_configs/nvidia__Cosmos3-Edge --steps 4 --budget-s 540
    python benchmarks/tpu_e2e.py --model wan-1.3b --tiny                # CPU smoke: tiny configs, a small video
    python benchmarks/tpu_e2e.py --table rows.jsonl                     # the markdown table
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: the released lines

from tpu_common import device_summary, peak_hbm_gib, report  # noqa: E402
from tpu_models import PRESETS, PROMPT, REFERENCE, preset_of, scaled_folder, step_parts  # noqa: E402

GIB = 2**30


def _line_labels() -> list[str]:
    from tests.test_device_plan_full_size import LINES

    return [label for label, _, _ in LINES]


LINE_LABELS = _line_labels()


class RssSampler:
    """Peak anonymous and file-backed resident memory of this process (``/proc/self/status``
    ``RssAnon`` / ``RssFile``, where the kernel tells them apart) and the host's RAM in use
    (``psutil``: total less available, every process's; ``used_at_start`` when sampling began),
    sampled every ``period`` seconds on a thread while running."""

    def __init__(self, period: float = 0.05):
        self.period = period
        self.anon = self.file = 0
        self.host_used = self.used_at_start = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        import psutil

        memory = psutil.virtual_memory()
        used = memory.total - memory.available
        self.used_at_start = used if self.used_at_start is None else self.used_at_start
        self.host_used = max(self.host_used or 0, used)
        if self.anon is None:
            return
        try:
            with open("/proc/self/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # not Linux
            return
        if "RssAnon" not in fields:  # a kernel that does not tell them apart (the TPU machine's sandbox)
            self.anon = self.file = None
            return
        kib = lambda key: int(fields[key].split()[0])  # noqa: E731
        self.anon = max(self.anon, kib("RssAnon") * 1024)
        self.file = max(self.file, kib("RssFile") * 1024)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def process_age_s() -> float:
    """Seconds since this process started (:func:`vidax.stats.process_start`)."""
    from vidax.stats import process_start

    return time.time() - process_start()


#: Seconds past ``--budget-s`` after which a call that has not stopped (a stage the budget cannot
#: interrupt: a compile, one long decode program) is ended by :func:`watchdog` with its row.
HARD_STOP_GRACE_S = 40.0


def _end_process(row: dict, out: str | None, why: str, status: int) -> None:
    """Every thread's stack on stderr (where the run was), the row so far with ``killed = why``
    appended to ``out``, and the process ended with ``status`` at once."""
    import faulthandler

    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    row["killed"] = why
    row["process_wall_s"] = round(process_age_s(), 2)
    report(row, out)
    sys.stderr.flush()
    os._exit(status)


def watchdog(row: dict, out: str | None, deadline: float) -> threading.Thread:
    """A daemon thread that, at ``deadline`` (``time.perf_counter()``) plus
    :data:`HARD_STOP_GRACE_S`, prints every thread's stack (where the call was) and the row so far
    (``killed``), appends it to ``out`` and ends the process (exit status 3): the row and the
    stack come back inside the device call instead of being lost to its time limit."""

    def fire() -> None:
        time.sleep(max(0.0, deadline + HARD_STOP_GRACE_S - time.perf_counter()))
        _end_process(row, out, f"still running {HARD_STOP_GRACE_S:.0f} s after --budget-s (stacks on stderr)", 3)

    thread = threading.Thread(target=fire, name="tpu_e2e-watchdog", daemon=True)
    thread.start()
    return thread


#: Host memory available below which :func:`host_guard` ends the run with its row: a TPU machine
#: whose RAM runs out is taken away whole, with nothing of the call coming back.
HOST_FLOOR_BYTES = 3 * 2**30


def host_guard(row: dict, out: str | None, floor: int = HOST_FLOOR_BYTES, period: float = 0.1) -> threading.Thread:
    """A daemon thread that, when the host's available memory (``psutil``) falls below ``floor``,
    prints every thread's stack (where the run was), appends the row so far (``killed``, with the
    memory left) to ``out`` and ends the process (exit status 4), before the machine's own
    out-of-memory killer takes everything."""
    import psutil

    def watch() -> None:
        while (available := psutil.virtual_memory().available) >= floor:
            time.sleep(period)
        why = (
            f"host memory available fell to {available / 2**30:.1f} GiB (floor {floor / 2**30:.1f}) "
            f"{process_age_s():.0f} s into the process (stacks on stderr)"
        )
        _end_process(row, out, why, 4)

    thread = threading.Thread(target=watch, name="tpu_e2e-host-guard", daemon=True)
    thread.start()
    return thread


def run(args, hard_stop: bool = False) -> dict:
    """One end-to-end run (see the module docstring); the row. ``hard_stop``: a :func:`watchdog`
    ends the process past ``--budget-s`` (the command line's runs; a caller's process is not ended)."""
    cache_dir = args.compile_cache
    cache = "off"
    if cache_dir:
        cache = "warm" if os.path.isdir(cache_dir) and os.listdir(cache_dir) else "cold"
        os.environ["VIDAX_COMPILE_CACHE"] = cache_dir
    import numpy as np

    from vidax.checkpoint import Checkpoint
    from vidax.compile_cache import setup_compile_cache
    from vidax.errors import Cancelled, OutOfMemoryError
    from vidax.io.video import write_video
    from vidax.pipelines.plan import read_plan, with_call, with_memory, with_placement
    from vidax.stats import host_peak_rss_bytes

    cache_used = setup_compile_cache() if cache_dir else None
    dev = device_summary()
    row: dict = {"device_kind": dev["device_kind"], "platform": dev["platform"], "jax": dev["jax"], "cache": cache}
    row["startup_s"] = round(process_age_s(), 2)
    preset_name = args.model
    line_call: dict = {}
    if args.line:  # a released line of issue 46: its reference configs as a folder, its call
        from tests.test_device_plan_full_size import LINES, released_folder

        label, repo, line_call = next(line for line in LINES if line[0] == args.line)
        args.checkpoint = released_folder(repo, pathlib.Path(tempfile.mkdtemp(prefix="vidax-e2e-configs-")))
    elif args.released:  # any released configuration of reference_configs/, at its own call defaults
        from tests.test_device_plan_full_size import released_folder

        repo = args.released
        args.checkpoint = released_folder(repo, pathlib.Path(tempfile.mkdtemp(prefix="vidax-e2e-configs-")))
    if args.checkpoint:
        folder = args.checkpoint
        preset_name = preset_name or preset_of(Checkpoint.open(folder))
    else:
        folder = os.path.join(REFERENCE, PRESETS[preset_name].folder)
    preset = PRESETS.get(preset_name) if preset_name else None
    call = dict(line_call)
    if args.tiny:
        if preset is None:
            raise SystemExit("--tiny needs --model (the preset's tiny configs)")
        components = {"transformer": preset.tiny, **preset.tiny_components}
        folder = scaled_folder(folder, components)
        call.update(preset.tiny_call)
    call.update(args.call)
    for key, value in (
        ("height", args.height),
        ("width", args.width),
        ("num_frames", args.frames),
        ("num_inference_steps", args.steps),
    ):
        if value is not None:
            call[key] = value
    row.update(
        line=args.line or args.released or (preset.note if preset else os.path.basename(os.path.normpath(folder))),
        model=preset_name,
        checkpoint=repo if args.line or args.released else args.checkpoint or PRESETS[preset_name].folder,
        call=dict(args.call) or None,
        tiny=args.tiny,
        dtype=args.dtype,
        weights=args.weights,
    )
    deadline = None if args.budget_s is None else time.perf_counter() - process_age_s() + args.budget_s
    if deadline is not None and hard_stop:
        watchdog(row, args.out, deadline)
    if hard_stop:
        host_guard(row, args.out)
    marks: list[float] = []

    def on_step_end(pipe, i, t, kwargs):
        marks.append(time.perf_counter())
        return kwargs

    extra = {"callback_on_step_end": on_step_end}
    if deadline is not None:
        extra["cancel"] = lambda: time.perf_counter() > deadline
    t0 = time.perf_counter()
    plan = read_plan(folder, random_weights=True, weight_dtype=args.weights)
    default_steps = with_call(plan, prompt=args.prompt, output_type="np", progress=False).call.num_inference_steps
    plan = with_call(plan, prompt=args.prompt, output_type="np", progress=args.progress, **call, **extra)
    offload = None if args.offload_blocks is None else int(args.offload_blocks)
    plan = with_placement(plan, dtype=args.dtype, offload=offload)
    try:
        plan = with_memory(plan, refuse=not args.anyway, vae_tiling=args.vae_tiling)
    except OutOfMemoryError as e:  # refused before any weight is read: the row says why and what fits
        c = plan.call
        row.update(
            size_HxWxF=[c.height, c.width, c.num_frames],
            steps=c.num_inference_steps,
            default_steps=default_steps,
            plan=None if plan.device_plan is None else plan.device_plan.line(),
            refused=str(e),
            plan_s=round(time.perf_counter() - t0, 2),
            process_wall_s=round(process_age_s(), 2),
        )
        return row
    c = plan.call
    row.update(
        size_HxWxF=[c.height, c.width, c.num_frames],
        steps=c.num_inference_steps,
        default_steps=default_steps,
        estimate_gib=None if plan.memory is None else round(plan.memory.total / GIB, 2),
        placement={"staging": plan.staging.describe(), "vae_tiling": plan.vae_tiling, "offload_blocks": offload},
        plan=None if plan.device_plan is None else plan.device_plan.line(),
        plan_s=round(time.perf_counter() - t0, 2),
    )
    with RssSampler() as rss:
        t0 = time.perf_counter()
        pipe = plan.pipeline.from_plan(plan, progress=args.progress)
        row["load_s"] = round(time.perf_counter() - t0, 2)
        path = args.output or os.path.join(tempfile.mkdtemp(prefix="vidax-e2e-"), "video.mp4")
        writer, chunks, finite = None, [], []
        if getattr(pipe.family, "CHUNK_CALLBACK", None):  # a long video: written chunk by chunk, as vidax generate does
            from vidax.io.growing import GrowingMp4

            writer = GrowingMp4(path, pipe.video_fps(c), overwrite=True)

            def chunk_done(chunk) -> None:
                writer.append(chunk.frames[0])
                finite.append(bool(np.isfinite(chunk.frames).all()))
                chunks.append([chunk.frames.shape[1], round(time.perf_counter() - t_call, 2)])
                if args.progress:
                    print(f"chunk {chunk.index + 1} of {chunk.count}: {chunks[-1]}", file=sys.stderr, flush=True)

            c = dataclasses.replace(
                c, extra={**c.extra, pipe.family.CHUNK_CALLBACK: chunk_done, pipe.family.CHUNK_KEEP: False}
            )
        t_call = time.perf_counter()
        try:
            out = pipe.generate(c)
        except Cancelled as e:
            out = None
            row["stopped"] = f"--budget-s {args.budget_s}: stopped {e.done}"
        except Exception as e:  # e.g. out of device memory in a stage: the row says where, with what ran
            out = None
            row["failed"] = f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
        if out is None:
            steps = [b - a for a, b in zip(marks, marks[1:])]
            row.update(steps_done=len(marks), step_s=[round(s, 3) for s in steps])
        if out is not None:
            st = out.stats
            row.update(
                text_encode_s=round(st.text_encode_s, 2),
                compile_s=round(st.compile_s, 2),
                step_s=[round(s, 3) for s in st.step_s],
                decode_s=round(st.decode_s, 2),
                audio_decode_s=round(st.audio_decode_s, 2),
                compiles={k: v.compiled for k, v in st.compiles.items()},
                from_cache={k: v.from_cache for k, v in st.compiles.items()},
                # the plan's estimate of each stage beside the device's peak so far at its end
                stages={
                    name: {
                        "estimate_gib": round(est / GIB, 2),
                        "measured_gib": (
                            round(st.stage_measured[name][0] / GIB, 2) if name in st.stage_measured else None
                        ),
                    }
                    for name, est in st.stage_estimates.items()
                },
            )
            t0 = time.perf_counter()
            if writer is not None:
                frames = writer.frames
                writer.finish()
                row["chunks"] = chunks  # [frames it added, seconds since the call began when it was written]
            else:
                audio = None if out.audio is None else out.audio[0]
                write_video(
                    out.frames[0],
                    path,
                    fps=pipe.video_fps(c),
                    overwrite=True,
                    audio=audio,
                    sample_rate=out.audio_sample_rate,
                )
                frames = out.frames.shape[1]
            row["write_s"] = round(time.perf_counter() - t0, 2)
            row["output"] = path
            row["finite"] = all(finite) if writer is not None else bool(np.isfinite(out.frames).all())
            row["frames"] = frames  # frames_per_wall_s: below, from the process wall
        elif writer is not None:
            writer.abort()
        call_s = time.perf_counter() - t_call
    row["total_s"] = round(row["load_s"] + call_s, 2)
    if row.get("step_s"):
        row["s_per_step"] = round(statistics.median(row["step_s"]), 3)
        if row.get("write_s") is not None:  # the video at the checkpoint's own step count, from the median step
            calls = len(row["step_s"]) / row["steps"]  # transformer steps a step: a long video's chunks
            row["video_s_default_steps"] = round(
                row["total_s"] + row["startup_s"] + (default_steps - row["steps"]) * calls * row["s_per_step"], 1
            )
    row.update(
        peak_hbm_gib=peak_hbm_gib(),
        peak_rss_anon_gib=None if rss.anon is None else round(rss.anon / GIB, 2),
        peak_rss_file_gib=None if rss.file is None else round(rss.file / GIB, 2),
        peak_rss_gib=round(host_peak_rss_bytes() / GIB, 2),
        host_used_gib=[round(rss.used_at_start / GIB, 2), round(rss.host_used / GIB, 2)],
        compile_cache=cache_used,
    )
    if preset is not None and row.get("s_per_step"):
        one = c  # a long video's step runs on one chunk: at most base_num_frames
        if writer is not None:
            one = dataclasses.replace(c, num_frames=min(c.num_frames, c.extra.get("base_num_frames", 97)))
        flops = float(preset.flops(pipe.transformer.config, step_parts(preset, pipe, one)[4]))
        row["step_flops"], row["step_tflop"] = flops, round(flops / 1e12, 3)
        row["mfu"] = round(flops / row["s_per_step"] / dev["peak_flops"], 3) if dev["peak_flops"] else None
    row["process_wall_s"] = round(process_age_s(), 2)
    if row.get("frames"):
        row["frames_per_wall_s"] = round(row["frames"] / row["process_wall_s"], 3)
    return row


#: The table's columns: (header, row -> cell text).
COLUMNS = (
    (
        "line",
        lambda r: (
            (r.get("line") or r.get("checkpoint", "")) + (f", {r['weights']} weights" if r.get("weights") else "")
        ),
    ),
    ("size HxWxF", lambda r: "x".join(str(v) for v in r.get("size_HxWxF", []))),
    ("steps", lambda r: str(r.get("steps", ""))),
    ("cache", lambda r: r.get("cache", "")),
    ("start-up s", lambda r: _num(r.get("startup_s"))),
    ("load s", lambda r: _num(r.get("load_s"))),
    ("text s", lambda r: _num(r.get("text_encode_s"))),
    ("compile s", lambda r: _num(r.get("compile_s"))),
    ("s/step", lambda r: _num(r.get("s_per_step"), 3)),
    ("decode s", lambda r: _num(r.get("decode_s"))),
    ("write s", lambda r: _num(r.get("write_s"))),
    ("total s", lambda r: _num(r.get("total_s"))),
    ("wall s", lambda r: _num(r.get("process_wall_s"))),
    ("HBM GiB (est.)", lambda r: f"{_num(r.get('peak_hbm_gib'))} ({_num(_estimate(r))})"),
    (
        "RSS GiB (anon / file)",
        lambda r: (
            f"{_num(r.get('peak_rss_gib'))} ({_num(r.get('peak_rss_anon_gib'))} / {_num(r.get('peak_rss_file_gib'))})"
        ),
    ),
    ("MFU", lambda r: "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f} %"),
    ("device, JAX", lambda r: f"{r.get('device_kind', '')}, {r.get('jax', '')}"),
    ("video s at default steps", lambda r: _num(r.get("video_s_default_steps"))),
    (
        "note",
        lambda r: (
            r.get("refused", "")
            or r.get("stopped", "")
            or r.get("killed", "")
            or ("" if r.get("finite", True) else "not finite")
        ),
    ),
)


def _estimate(row: dict) -> float | None:
    """The plan's estimated peak: the largest stage's estimate, else the memory check's total."""
    stages = [v["estimate_gib"] for v in (row.get("stages") or {}).values()]
    return max(stages) if stages else row.get("estimate_gib")


def _num(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    """The markdown table of ``rows`` (one line a row, in the order given)."""
    lines = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r).replace("|", "/") for _, cell in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def call_item(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--call``: the keyword and its value (JSON where it parses, else the text)."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (overlap_history=17)")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> dict | str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, choices=sorted(PRESETS), help="a preset's reference folder")
    p.add_argument("--checkpoint", default=None, help="a diffusers folder (configs suffice) instead of --model")
    p.add_argument(
        "--line",
        default=None,
        choices=LINE_LABELS,
        help="a released line of tests/test_device_plan_full_size.LINES by its label",
    )
    p.add_argument(
        "--released",
        default=None,
        help="a folder of the reference configs by its name (Skywork__SkyReels-V2-DF-1.3B-540P-Diffusers): "
        "a released configuration outside --line's list, at its own call defaults",
    )
    p.add_argument(
        "--call",
        action="append",
        default=[],
        type=call_item,
        metavar="KEY=VALUE",
        help="a call keyword (repeatable; VALUE read as JSON, else text): overlap_history=17, ar_step=5",
    )
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--height", type=int, default=None, help="pixels (default: the checkpoint's)")
    p.add_argument("--width", type=int, default=None, help="pixels (default: the checkpoint's)")
    p.add_argument("--frames", type=int, default=None, help="video frames (default: the checkpoint's)")
    p.add_argument("--steps", type=int, default=None, help="denoising steps (default: the checkpoint's)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument(
        "--weights",
        default=None,
        choices=["int8", "fp8"],
        help="the transformer's Linear kernels in 8 bits (vidax generate --weights; made random too)",
    )
    p.add_argument(
        "--offload-blocks", default=None, help="stream N transformer blocks a chunk (default: vidax decides)"
    )
    p.add_argument(
        "--anyway", action="store_true", help="run a call the memory plan refuses (default: a row with the refusal)"
    )
    p.add_argument("--vae-tiling", action="store_true", help="decode the VAE in tiles (default: where needed)")
    p.add_argument("--compile-cache", default=None, help="persistent compile cache folder (empty: a cold row)")
    p.add_argument("--budget-s", type=float, default=None, help="stop the call this long after the process started")
    p.add_argument(
        "--progress",
        action="store_true",
        help="the load's and the call's progress on stderr (a line per event off a terminal): where a long row is",
    )
    p.add_argument("--tiny", action="store_true", help="the preset's tiny configs and video (CPU smoke runs)")
    p.add_argument("--output", default=None, help="the video file (default: a temporary .mp4)")
    p.add_argument("--out", default=None, help="append the JSON row to this file")
    p.add_argument("--table", default=None, help="render the rows of this JSONL file as the markdown table; no run")
    args = p.parse_args(argv)
    if args.table:
        with open(args.table) as f:
            text = table([json.loads(line) for line in f if line.strip()])
        print(text)
        return text
    if sum(x is not None for x in (args.model, args.checkpoint, args.line, args.released)) != 1:
        p.error("give one of --model, --checkpoint, --line and --released")
    if args.released is not None and not os.path.isfile(os.path.join(REFERENCE, args.released, "model_index.json")):
        p.error(
            f"--released {args.released!r} is no pipeline folder of {REFERENCE} (its folders are named owner__repo)"
        )
    row = run(args, hard_stop=argv is None)
    return report(row, args.out)


if __name__ == "__main__":
    main()
