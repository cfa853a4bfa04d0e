"""Where a vidax denoising step's time goes on CPU, per op class, from XLA's own profiler.

For each family (``ltx``: ``ltx_step.py``, ``wan``: ``wan_step.py``) and dtype, the vidax side of
the step benchmark runs in a child process with ``VIDAX_BENCH_PROFILE`` set: after its timed
steps it writes the compiled HLO and a ``jax.profiler`` trace of ``steps + 1`` more steps. XLA:CPU
records one trace event per executed thunk, named after its HLO instruction; each instruction is
put in one class from the HLO (what it computes) and its source location (which vidax function
it came from, the stack frames XLA keeps in the HLO):

* ``attention``: anything from :mod:`vidax.nn.attention` (Q K^T, softmax, P V);
* ``matmul``: the other dots and convolutions (YNNPACK / XNNPACK fusions holding a dot included);
* ``norms``: LayerNorm / RMSNorm / GroupNorm / ``rms_norm`` code;
* ``copies``: copy, transpose, concatenate, (dynamic-)slice / update-slice, pad, gather,
  broadcast, reshape, bitcast and fusions made only of these;
* ``elementwise``: the rest (activations, bias / residual adds, modulation, RoPE, reductions).

Container thunks (while / call / conditional) are not counted; their bodies' thunks are. The
table gives each class's share of the summed thunk time and its ms per step; XLA may run
independent thunks at the same time, so the sum can exceed the step's wall time (printed too).

    python benchmarks/cpu_profile.py                        # ltx + wan, fp32 + bf16, latent 2x8x8, 8 layers
    python benchmarks/cpu_profile.py --families wan --dtypes bfloat16 --extra-xla-flags=--xla_cpu_use_xnnpack=false
"""

from __future__ import annotations

import argparse
import collections
import datetime
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_bench import ROOT, cpu_model  # noqa: E402

CLASSES = ("matmul", "attention", "norms", "elementwise", "copies")
CONTAINERS = {"while", "call", "conditional"}
COPY_OPS = {
    "copy",
    "transpose",
    "concatenate",
    "slice",
    "dynamic-slice",
    "dynamic-update-slice",
    "pad",
    "gather",
    "scatter",
    "broadcast",
    "reshape",
    "bitcast",
    "tuple",
    "get-tuple-element",
    "parameter",
    "constant",
    "copy-start",
    "copy-done",
    "iota",
    "reverse",
    "bitcast-convert",
}
_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = .*?\b([a-z][a-z0-9\-]*)\(")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_FRAME = re.compile(r"stack_frame_id=(\d+)")
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_COMP = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{\s*$")


def _tables(text: str) -> dict[str, dict[int, str]]:
    """The compiled HLO text's ``FileNames``, ``FunctionNames``, ``FileLocations`` and
    ``StackFrames`` tables, each ``{id: rest of the line}``."""
    tables, cur = {}, None
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            cur = tables.setdefault(line, {})
        elif cur is not None and line[:1].isdigit():
            i, rest = line.split(" ", 1)
            cur[int(i)] = rest.strip().strip('"')
        elif line.strip():
            cur = None
    return tables


def stacks(text: str) -> dict[int, list[tuple[str, str]]]:
    """``{stack_frame_id: [(file, function), ...]}``, innermost frame first."""
    t = _tables(text)
    num = lambda s, key: int(re.search(key + r"=(\d+)", s).group(1))  # noqa: E731
    out = {}
    for fid in t.get("StackFrames", {}):
        frames, seen = [], set()
        while fid not in seen:
            seen.add(fid)
            frame = t["StackFrames"][fid]
            loc = t["FileLocations"][num(frame, "file_location_id")]
            frames.append((t["FileNames"][num(loc, "file_name_id")], t["FunctionNames"][num(loc, "function_name_id")]))
            fid = num(frame, "parent_frame_id")
        out[min(seen)] = frames
    return out


def parse_hlo(text: str) -> dict[str, dict]:
    """``{instruction name: {"op", "calls", "frames": [(file, function), ...], "target"}}`` for
    every instruction of every computation of a compiled HLO module's text (``target``: a custom
    call's target, else None)."""
    frames = stacks(text)
    instrs = {}
    for line in text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        name, op = m.groups()
        sf, target = _FRAME.search(line), _TARGET.search(line)
        instrs[name] = {
            "op": op,
            "calls": _CALLS.findall(line),
            "target": target.group(1) if target else None,
            "frames": frames.get(int(sf.group(1)), []) if sf else [],
        }
    return instrs


def computations(text: str) -> dict[str, list[str]]:
    """``{computation name: [its instruction names]}``."""
    comps, cur = {}, None
    for line in text.splitlines():
        m = _COMP.match(line)
        if m:
            cur = comps.setdefault(m.group(1), [])
            continue
        i = _INSTR.match(line)
        if i and cur is not None:
            cur.append(i.group(1))
    return comps


def classify(name: str, instrs: dict, comps: dict) -> str | None:
    """The class (one of :data:`CLASSES`) of a thunk named ``name``; None for a container."""
    ins = instrs.get(name)
    if ins is None:
        return "elementwise"
    if ins["op"] in CONTAINERS:
        return None
    inner = [ins] + [instrs[n] for c in ins["calls"] for n in comps.get(c, []) if n in instrs]
    frames = {f for i in inner for f in i["frames"]}
    if any(file.endswith("vidax/nn/attention.py") for file, _ in frames):
        return "attention"
    ops = {i["op"] for i in inner}
    if ops & {"dot", "convolution"} or any((i.get("target") or "").startswith("vidax_onednn") for i in inner):
        return "matmul"
    if any("Norm." in fn or "norm" in fn.split(".")[-1] for _, fn in frames):
        return "norms"
    if ops <= COPY_OPS | {"fusion"}:
        return "copies"
    return "elementwise"


def summarise(profile_dir: str, calls: int) -> dict:
    """Per-class thunk milliseconds per step from the trace and HLO in ``profile_dir``."""
    text = open(os.path.join(profile_dir, "step.hlo.txt")).read()
    instrs, comps = parse_hlo(text), computations(text)
    trace = sorted(glob.glob(os.path.join(profile_dir, "**", "*.trace.json.gz"), recursive=True))[-1]
    data = json.load(gzip.open(trace))
    events = data["traceEvents"] if isinstance(data, dict) else data
    per_class = collections.Counter()
    per_op = collections.Counter()
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") != "X" or "hlo_op" not in args or e["name"].startswith("end: "):
            continue
        cls = classify(args["hlo_op"], instrs, comps)
        if cls is None:
            continue
        per_class[cls] += e["dur"] / 1e3 / calls
        per_op[(cls, args["hlo_op"])] += e["dur"] / 1e3 / calls
    return {
        "ms_per_step": {c: per_class[c] for c in CLASSES},
        "top_ops": [[c, n, ms] for (c, n), ms in per_op.most_common(8)],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=["ltx", "wan"], choices=["ltx", "wan", "cogvideox"])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--latent", nargs=3, type=int, default=[2, 8, 8], metavar=("T", "H", "W"))
    p.add_argument("--num-layers", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="timed steps, then as many + 1 traced")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--extra-xla-flags", default="", help="XLA_FLAGS added for the children")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", "cpu_profile"))
    args = p.parse_args()

    cpu = cpu_model()
    rows = []
    for family in args.families:
        for dtype in args.dtypes:
            with tempfile.TemporaryDirectory() as d:
                cmd = [
                    sys.executable,
                    os.path.join(ROOT, "benchmarks", f"{family}_step.py"),
                    "--side",
                    "vidax",
                    "--dtype",
                    dtype,
                    "--latent",
                    *map(str, args.latent),
                    "--steps",
                    str(args.steps),
                    "--threads",
                    str(args.threads),
                    "--num-layers",
                    str(args.num_layers),
                ]
                env = dict(
                    os.environ,
                    VIDAX_BENCH_PROFILE=d,
                    XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + args.extra_xla_flags).strip(),
                )
                print(f"profiling {family} {dtype} ...", flush=True)
                r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
                if r.returncode != 0 or not line:
                    raise SystemExit(f"{family} {dtype} failed:\n{r.stderr[-3000:]}")
                result = json.loads(line[0][len("RESULT ") :])
                row = {
                    "family": family,
                    "dtype": dtype,
                    "step_s": result["step_s"],
                    "load": os.getloadavg()[0],
                    **summarise(d, args.steps + 1),
                }
            rows.append(row)
            total = sum(row["ms_per_step"].values())
            print(
                f"  step {row['step_s'] * 1e3:.0f} ms; thunks "
                + ", ".join(
                    f"{c} {row['ms_per_step'][c]:.0f} ms ({row['ms_per_step'][c] / total:.0%})" for c in CLASSES
                ),
                flush=True,
            )

    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Where the CPU step's time goes (vidax, XLA:CPU)",
        "",
        f"CPU: {cpu}, {args.threads} threads; {date}; XLA_FLAGS extra: `{args.extra_xla_flags or '(none)'}`.",
        "",
        f"Step benchmarks' vidax side (`benchmarks/<family>_step.py --latent {' '.join(map(str, args.latent))} "
        f"--num-layers {args.num_layers}`), {args.steps + 1} steps under `jax.profiler`; one trace event per "
        "XLA thunk, classed by HLO op and vidax source function (see `benchmarks/cpu_profile.py`). "
        "ms = thunk milliseconds per step (threads may overlap, so the sum can exceed the step); "
        "load = 1-minute load average when the row finished (the machine is shared).",
        "",
        "| family | dtype | step ms | " + " | ".join(f"{c} ms (%)" for c in CLASSES) + " | load |",
        "|---|---|---|" + "---|" * len(CLASSES) + "---|",
    ]
    for row in rows:
        total = sum(row["ms_per_step"].values())
        lines.append(
            f"| {row['family']} | {row['dtype']} | {row['step_s'] * 1e3:.0f} | "
            + " | ".join(f"{row['ms_per_step'][c]:.0f} ({row['ms_per_step'][c] / total:.0%})" for c in CLASSES)
            + f" | {row['load']:.1f} |"
        )
    lines += ["", "Largest thunks per row (class, HLO instruction, ms per step):", ""]
    for row in rows:
        lines.append(
            f"- {row['family']} {row['dtype']}: " + "; ".join(f"{c} `{n}` {ms:.0f}" for c, n, ms in row["top_ops"][:5])
        )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(
            {"cpu": cpu, "date": date, "threads": args.threads, "extra_xla_flags": args.extra_xla_flags, "rows": rows},
            f,
            indent=2,
        )
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
