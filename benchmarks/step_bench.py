"""Shared runner of the side-by-side denoising-step benchmarks (vidax vs diffusers).

A family's script (``wan_step.py``, ``cogvideox_step.py``) supplies a :class:`StepBench`: how to
build and time one side (``run_vidax`` / ``run_diffusers``, each returning a result dict with
``compile_s``, ``step_s``, ``step_s_all``, ``peak_rss_gib``) and how to describe the run. This
module does the rest: the command line, one subprocess per (side, dtype) so each side's peak RSS
is its own, the same thread count on both sides, and the JSON + markdown report.

Helpers for the sides: :func:`configure_xla_threads`, :func:`fill_params` (random parameters
without large temporaries), :func:`prepare_jax`, :func:`run_jax_steps` / :func:`run_torch_steps` (compile, warm up,
time, check the result is finite) on top of :func:`time_steps`, and :func:`peak_rss_gib`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class StepBench:
    """What one family's benchmark runs.

    Attributes:
        script: the family script's ``__file__`` (re-run as the child process of each side).
        title: markdown title, e.g. ``"Wan2.1-T2V-1.3B denoising step"``.
        model: one-line model description for the JSON ``meta``.
        step: what one timed step is (markdown text).
        default_latent: ``(T, H, W)`` latent size by default.
        default_out: output path without extension (``docs/benchmarks/<name>``).
        tokens: ``(T, H, W) -> video tokens`` of the model.
        text_tokens: text tokens per prompt.
        run_vidax, run_diffusers: ``(dtype_name, latent, steps, threads, num_layers) -> result``;
            ``num_layers`` None = the real config's.
        batch: samples per transformer call (2: the CFG pair; 1: embedded guidance).
    """

    script: str
    title: str
    model: str
    step: str
    default_latent: tuple[int, int, int]
    default_out: str
    tokens: Callable[[tuple[int, int, int]], int]
    text_tokens: int
    run_vidax: Callable[..., dict]
    run_diffusers: Callable[..., dict]
    batch: int = 2


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_gib() -> float:
    """Peak resident set size of this process in GiB (vidax's own measure, see
    :func:`vidax.stats.host_peak_rss_bytes`; imported here, after the thread flags are set)."""
    from vidax.stats import host_peak_rss_bytes

    return host_peak_rss_bytes() / 2**30


def configure_xla_threads(threads: int) -> None:
    """Run this process (XLA's CPU thread pools and torch's alike) on ``threads`` CPU cores: the
    process's CPU affinity, which XLA:CPU sizes its pools from (call before importing jax). XLA has
    no flag for its intra-op thread count; the token this function used to append to XLA_FLAGS
    (``intra_op_parallelism_threads=N``, a TensorFlow option) was not an XLA flag."""
    cores = sorted(os.sched_getaffinity(0))
    if threads < len(cores):
        os.sched_setaffinity(0, cores[:threads])


def fill_params(make: Callable[[], Any], policy: Any) -> tuple[Any, Any]:
    """``(graphdef, params)`` of ``make()`` filled with small pseudo-random values in the dtypes of
    ``policy`` (a :class:`vidax.weights.loader.DtypePolicy`).

    Values come from one fused elementwise pass per parameter: no temporaries the size of the
    parameter (``jax.random`` would hold its uint32 bits and an fp32 copy, inflating peak RSS).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from vidax.weights.loader import abstract_params

    graphdef, flat = abstract_params(make)
    filled = []
    for i, (path, var) in enumerate(flat.items()):
        shape = var.get_value().shape
        fn = jax.jit(
            lambda s=shape, d=policy.dtype_for(path), i=i: (
                (0.02 * jnp.sin(jax.lax.iota(jnp.float32, int(np.prod(s))) * 12.9898 + 78.233 * i)).astype(d).reshape(s)
            )
        )
        filled.append((path, var.replace(fn())))
    return graphdef, nnx.from_flat_state(filled)


LOCKSTEP_ENV = "VIDAX_BENCH_LOCKSTEP"


def time_steps(
    step: Callable[[Any], Any], x: Any, steps: int, block: Callable[[Any], None], lockstep: bool = False
) -> tuple[Any, list[float]]:
    """One warm-up call of ``x = step(x)``, then ``steps`` timed calls (``block(x)`` waits for the
    result). Returns the final ``x`` and the per-step seconds.

    ``lockstep`` (a child of ``--lockstep``): print ``READY`` after the warm-up, then run the
    steps in pairs: wait for a ``go`` line on stdin, run two steps and print ``TIME <seconds>`` of
    the second, so that the parent makes the sides take turns (:func:`run_lockstep`). The first
    step of each turn is not reported: after the other sides' turns a process's first step is
    slow again (torch's by up to 10x for LTX-Video here, its freed buffers mapped afresh)."""
    x = step(x)
    block(x)
    if lockstep:
        print("READY", flush=True)
    times = []
    for i in range(steps):
        if lockstep and i % 2 == 0 and sys.stdin.readline().strip() != "go":
            break
        t0 = time.perf_counter()
        x = step(x)
        block(x)
        times.append(time.perf_counter() - t0)
        if lockstep and i % 2 == 1:
            print(f"TIME {times[-1]!r}", flush=True)
    return x, times


def prepare_jax(
    dtype_name: str,
    make: Callable[[Any], Any],
    fp32_params: tuple[str, ...],
    x_shape: tuple,
    text_shape: tuple,
    scheduler: dict,
    steps: int,
) -> Any:
    """The vidax side's inputs: the model ``make(dtype)`` with :func:`fill_params` values under
    ``DtypePolicy(dtype, fp32_params)`` (the registry entry's ``fp32_params`` table), float32
    latents ``x_shape``, text states ``text_shape`` in ``dtype``, and the scheduler of
    ``scheduler`` (a scheduler_config dict) set for ``steps + 1`` steps.

    Returns a namespace with ``dtype``, ``graphdef``, ``params``, ``x``, ``context``, ``sched``,
    ``state``. Call :func:`configure_xla_threads` before (it must precede importing jax).
    """
    import types

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.nn.kernels import lay_out_kernel_stacks
    from vidax.schedulers import scheduler_from_config
    from vidax.weights.loader import DtypePolicy

    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[dtype_name]
    graphdef, params = fill_params(lambda: make(dtype), DtypePolicy(dtype, fp32_params))
    # the stacked kernels in oneDNN's layout where it reads them in place, as the pipeline keeps them
    module = nnx.merge(graphdef, params)
    lay_out_kernel_stacks(module, getattr(module, "block_stacks", ()))
    graphdef, params = nnx.split(module)
    del module
    x = jax.random.normal(jax.random.PRNGKey(1), x_shape, jnp.float32)
    context = (0.1 * jax.random.normal(jax.random.PRNGKey(2), text_shape, jnp.float32)).astype(dtype)
    sched = scheduler_from_config(scheduler)
    state = sched.set_timesteps(steps + 1, sample_shape=x.shape)
    return types.SimpleNamespace(
        dtype=dtype, graphdef=graphdef, params=params, x=x, context=context, sched=sched, state=state
    )


def run_jax_steps(
    step: Callable, params: Any, x: Any, state: Any, context: Any, steps: int, stacks: tuple[str, ...] = ()
) -> dict:
    """Compile ``x, state = step(params, x, state, context)`` (latents donated), time it with
    :func:`time_steps` and return the vidax side's result dict (with the device's peak memory:
    the allocator's ``peak_bytes_in_use`` on GPU / TPU, live arrays on CPU). ``stacks``: the
    model's ``block_stacks``, passed in as the pipeline passes them
    (:func:`vidax.nn.kernels.stacks.as_stack_bits`: uint16 views of bf16 stacks on CPU)."""
    import jax
    import jax.numpy as jnp

    from vidax.nn.kernels import as_stack_bits, from_stack_bits
    from vidax.stats import device_memory_bytes

    params = as_stack_bits(params, stacks)
    t0 = time.perf_counter()
    compiled = (
        jax.jit(lambda p, *a: step(from_stack_bits(p), *a), donate_argnums=(1,))
        .lower(params, x, state, context)
        .compile()
    )
    compile_s = time.perf_counter() - t0
    (x, state), times = time_steps(
        lambda c: compiled(params, c[0], c[1], context),
        (x, state),
        steps,
        lambda c: c[0].block_until_ready(),
        os.environ.get(LOCKSTEP_ENV) == "1",
    )
    assert bool(jnp.isfinite(x).all())
    profile_dir = os.environ.get("VIDAX_BENCH_PROFILE")
    if profile_dir:  # benchmarks/cpu_profile.py: the compiled HLO and a trace of `steps` + 1 more steps
        # (past the scheduler's last step: the latents are not checked again)
        with open(os.path.join(profile_dir, "step.hlo.txt"), "w") as f:
            f.write(compiled.as_text())
        with jax.profiler.trace(profile_dir, create_perfetto_trace=True):
            (x, state), _ = time_steps(
                lambda c: compiled(params, c[0], c[1], context), (x, state), steps, lambda c: c[0].block_until_ready()
            )
    peak, how = device_memory_bytes()
    return {
        "compile_s": compile_s,
        "step_s": min(times),
        "step_s_all": times,
        "peak_rss_gib": peak_rss_gib(),
        "peak_device_gib": peak / 2**30,
        "peak_measured_by": how,
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "onednn_calls": compiled.as_text().count('"vidax_onednn_matmul"'),
    }


def run_torch_steps(step: Callable[[Any], Any], x: Any, steps: int) -> dict:
    """Time ``(x, i) = step((x, i))`` under ``torch.inference_mode`` (i: the step index, from 0)
    on ``x``'s device (a CUDA device is synchronised after each step and its peak memory
    reported); return the diffusers side's result dict."""
    import diffusers
    import torch

    cuda = x.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        (x, _), times = time_steps(
            step,
            (x, 0),
            steps,
            lambda c: torch.cuda.synchronize() if cuda else None,
            os.environ.get(LOCKSTEP_ENV) == "1",
        )
    assert torch.isfinite(x).all()
    return {
        "compile_s": 0.0,
        "step_s": min(times),
        "step_s_all": times,
        "peak_rss_gib": peak_rss_gib(),
        "peak_device_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
        "peak_measured_by": "torch.cuda.max_memory_allocated",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
    }


def run_child(cmd: list[str], what: str, env: dict | None = None) -> dict:
    """Run a benchmark child process (``cmd``, environment ``env`` or this one's) and return the
    JSON of its ``RESULT `` line."""
    print(f"running {what} ...", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not line:
        errors = [ln for ln in r.stderr.splitlines() if "Error" in ln or "error:" in ln]
        raise SystemExit(f"{what} failed:\n{r.stderr[-3000:]}\n{errors[-1] if errors else ''}")
    return json.loads(line[0][len("RESULT ") :])


def _read_until(proc: subprocess.Popen, prefix: str, what: str, errlog: str) -> str:
    """The rest of the next line of ``proc``'s stdout that starts with ``prefix`` (other lines
    skipped); :func:`_child_failed` if it ends first."""
    for line in proc.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    _child_failed(proc, what, errlog)


def _child_failed(proc: subprocess.Popen, what: str, errlog: str) -> NoReturn:
    """SystemExit naming the child ``what``, its exit status and the tail of ``errlog`` (its stderr)."""
    proc.wait()
    with open(errlog) as f:
        raise SystemExit(f"{what} failed (exit status {proc.returncode}):\n{f.read()[-3000:]}")


def run_lockstep(
    children: list[tuple[str, list[str], dict | None]], steps: int, pause_s: float = 0.2
) -> tuple[dict[str, dict], dict[str, list[float]]]:
    """Run the benchmark children ``(name, cmd, env)`` side by side, taking turns step by step.

    Each child is started with ``VIDAX_BENCH_LOCKSTEP=1`` once the previous one has compiled and
    run its warm-up step (so that builds do not overlap), all stay resident, then in each of
    ``steps`` rounds every child runs one step in turn, the order rotated by one each round, with
    ``pause_s`` between turns (for the previous side's threads to go idle). Load that drifts during
    the run then hits every side within seconds, which separate runs one after another do not.

    Returns each child's result dict (its ``RESULT`` line) and its per-round step seconds.

    Raises:
        SystemExit: a child ended early (naming it, its exit status and the tail of its stderr);
            the other children are then killed. Each child's stderr goes to a temporary file,
            removed when this returns or raises.
    """
    import tempfile

    procs, logs = [], []
    try:
        for name, cmd, env in children:
            print(f"starting {name} ...", flush=True)
            fd, errlog = tempfile.mkstemp(suffix=".stderr")
            logs.append(errlog)
            with os.fdopen(fd, "w") as err:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    cwd=ROOT,
                    env=dict(env or os.environ, **{LOCKSTEP_ENV: "1"}),
                )
            procs.append((name, proc, errlog))
            _read_until(proc, "READY", name, errlog)
        per_round = {name: [] for name, _, _ in procs}
        for r in range(steps):
            for name, proc, errlog in procs[r % len(procs) :] + procs[: r % len(procs)]:
                time.sleep(pause_s)
                try:
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                except BrokenPipeError:  # the child has ended
                    _child_failed(proc, name, errlog)
                per_round[name].append(float(_read_until(proc, "TIME ", name, errlog)))
            print(
                f"  round {r + 1}: "
                + ", ".join(f"{n} {t[-1]:.3f} s" for n, t in per_round.items())
                + f"; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        results = {}
        for name, proc, errlog in procs:
            proc.stdin.close()
            results[name] = json.loads(_read_until(proc, "RESULT ", name, errlog))
            proc.wait()
        return results, per_round
    finally:
        for _, proc, _ in procs:  # a failed or interrupted run leaves no child behind
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass
        for errlog in logs:
            os.remove(errlog)


def save_report(out: str, meta: dict, rows: list, lines: list[str]) -> None:
    """Write ``out.json`` (``meta`` + ``rows``) and ``out.md`` (``lines``), and print the table."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(bench: StepBench) -> None:
    """The benchmark's command line (see each family script's docstring)."""
    p = argparse.ArgumentParser(description=bench.title)
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--latent", nargs=3, type=int, default=list(bench.default_latent), metavar=("T", "H", "W"))
    p.add_argument("--steps", type=int, default=2, help="timed steps per side (after one warm-up)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument(
        "--num-layers",
        type=int,
        default=None,
        help="override the config's layer count (smoke tests on small machines; reported)",
    )
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks", bench.default_out))
    p.add_argument(
        "--cpu-matmul",
        nargs="+",
        choices=["auto", "xla", "onednn"],
        default=None,
        help="one vidax run per value of VIDAX_CPU_MATMUL (vidax.cpu.onednn), after diffusers' run",
    )
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="all sides resident at once, taking turns step by step (order rotated each round); "
        "vidax / diffusers is then the median of the per-round ratios (for a loaded machine)",
    )
    p.add_argument("--side", choices=["vidax", "diffusers"], help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.side:  # child process: one side, one dtype
        fn = bench.run_vidax if args.side == "vidax" else bench.run_diffusers
        result = fn(args.dtype, tuple(args.latent), args.steps, args.threads, args.num_layers)
        print("RESULT " + json.dumps(result))
        return

    t, h, w = args.latent
    tokens = bench.tokens((t, h, w))
    if "onednn" in (args.cpu_matmul or ()):
        from vidax.cpu import onednn

        if onednn.load() is not None:
            raise SystemExit(f"--cpu-matmul onednn: the custom call cannot be built here: {onednn.load()}")
    rows = []
    for dtype in args.dtypes:
        row = {"dtype": dtype}
        modes = args.cpu_matmul or []  # a value given twice runs twice (alternating runs on a loaded machine)
        vidax_runs = (
            [("vidax", None)]
            if not modes
            else [
                (f"vidax[{m}]" + (f" #{modes[: i + 1].count(m)}" if modes.count(m) > 1 else ""), m)
                for i, m in enumerate(modes)
            ]
        )
        children = []
        for side, matmul in [("diffusers", None), *vidax_runs]:
            steps = 2 * args.steps if args.lockstep else args.steps  # lockstep: two steps a turn, the second timed
            cmd = [
                sys.executable,
                os.path.abspath(bench.script),
                "--side",
                side.split("[")[0],
                "--dtype",
                dtype,
                "--latent",
                str(t),
                str(h),
                str(w),
                "--steps",
                str(steps),
                "--threads",
                str(args.threads),
            ]
            if args.num_layers is not None:
                cmd += ["--num-layers", str(args.num_layers)]
            children.append((side, cmd, None if matmul is None else dict(os.environ, VIDAX_CPU_MATMUL=matmul)))
        if args.lockstep:
            row, per_round = run_lockstep(children, args.steps)
        else:
            row, per_round = {side: run_child(cmd, f"{side} {dtype}", env) for side, cmd, env in children}, None
        for side, _, _ in children:
            dnn = f", {row[side]['onednn_calls']} oneDNN matmuls in the step" if row[side].get("onednn_calls") else ""
            print(
                f"  {side}: {row[side]['step_s']:.2f} s/step, compile {row[side]['compile_s']:.1f} s, "
                f"peak RSS {row[side]['peak_rss_gib']:.2f} GiB{dnn}; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        for side, _ in vidax_runs:
            rows.append(
                {
                    "dtype": dtype if side == "vidax" else f"{dtype} {side}",
                    "diffusers": row["diffusers"],
                    "vidax": row[side],
                    "ratio_vidax_over_diffusers": row[side]["step_s"] / row["diffusers"]["step_s"],
                    "lockstep_rounds_s": None
                    if per_round is None
                    else {"diffusers": per_round["diffusers"], "vidax": per_round[side]},
                    "lockstep_median_round_ratio": None
                    if per_round is None
                    else statistics.median(v / d for v, d in zip(per_round[side], per_round["diffusers"])),
                }
            )

    layers = "" if args.num_layers is None else f", num_layers overridden to {args.num_layers}"
    meta = {
        "model": bench.model + layers,
        "latent_THW": [t, h, w],
        "tokens": tokens,
        "text_tokens": bench.text_tokens,
        "cfg_batch": bench.batch,
        "threads": args.threads,
        "cpu": cpu_model(),
        "timed_steps": args.steps,
        "lockstep": args.lockstep,
    }
    lines = [
        f"# {bench.title}: vidax vs diffusers (CPU, {args.threads} threads)",
        "",
        f"CPU: {meta['cpu']}.",
        "",
        f"Latent {t}x{h}x{w} (T x H x W) = {tokens} video tokens, {bench.text_tokens} text tokens, "
        f"{'CFG (batch 2)' if bench.batch == 2 else f'batch {bench.batch}'}, "
        f"random weights{layers}; best of {args.steps} timed steps after one warm-up; each side in its own "
        f"process"
        + (
            " (all resident at once, taking turns step by step, the order rotated each round; "
            "each turn two steps, the second timed; the last column: the median of the per-round "
            "vidax / diffusers ratios)"
            if args.lockstep
            else ""
        )
        + f". A step: {bench.step}",
        "",
        "| dtype | diffusers s/step | vidax s/step | vidax / diffusers | vidax compile s | diffusers peak RSS GiB | "
        "vidax peak RSS GiB |" + (" median per-round ratio |" if args.lockstep else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if args.lockstep else ""),
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {r['diffusers']['step_s']:.2f} | {r['vidax']['step_s']:.2f} | "
            f"{r['ratio_vidax_over_diffusers']:.2f} | {r['vidax']['compile_s']:.1f} | "
            f"{r['diffusers']['peak_rss_gib']:.2f} | {r['vidax']['peak_rss_gib']:.2f} |"
            + (f" {r['lockstep_median_round_ratio']:.2f} |" if args.lockstep else "")
        )
    save_report(args.out, meta, rows, lines)
