"""Timing and memory accounting for one generation: what the end-of-run summary prints."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import jax

from vidax.compile_cache import CompileCounts, compile_cache_dir, count_compiles


def device_memory_bytes() -> tuple[int | None, str]:
    """(peak device bytes, how it was measured) over all local devices.

    Uses ``device.memory_stats()["peak_bytes_in_use"]`` where the backend reports it (GPU, TPU);
    elsewhere (CPU) the bytes of the arrays alive right now in device memory (not those waiting in
    host memory kinds), which callers sample at the points where memory peaks.
    """
    peaks = [s["peak_bytes_in_use"] for s in device_memory_stats() if "peak_bytes_in_use" in s]
    if peaks:
        return max(peaks), "peak_bytes_in_use"
    return live_array_bytes(), "live arrays"


def device_memory_stats() -> list[dict]:
    """``device.memory_stats()`` of each local device; ``{}`` where the backend reports none (CPU)."""
    out = []
    for d in jax.local_devices():
        try:
            stats = d.memory_stats()
        except Exception:  # some backends raise instead of returning None
            stats = None
        out.append(dict(stats or {}))
    return out


def live_array_bytes(memory_kind: str | None = "device") -> int:
    """Bytes of the JAX arrays alive now in ``memory_kind``, per-device maximum.

    Sharded arrays are counted per shard and each buffer once (told apart by address: an
    ``addressable_shards`` entry is a second array over the same buffer). ``memory_kind``:
    ``"device"`` (the default: device memory; weights waiting in ``pinned_host`` memory do not
    count), another memory kind, or None for all.
    """
    buffers: dict = {}
    for a in jax.live_arrays():
        try:
            if memory_kind is not None and a.sharding.memory_kind != memory_kind:
                continue
            shards = a.addressable_shards
        except Exception:  # deleted while iterating, or no sharding
            continue
        for s in shards:
            try:
                key = s.data.unsafe_buffer_pointer()
            except Exception:  # backends without raw pointers: count per array and shard
                key = (id(a), str(s.index))
            buffers[(s.device, key)] = s.data.nbytes
    per_device: dict = {}
    for (device, _), nbytes in buffers.items():
        per_device[device] = per_device.get(device, 0) + nbytes
    return max(per_device.values(), default=0)


def host_peak_rss_bytes() -> int:
    """Peak resident set size of this process (bytes).

    ``VmHWM`` of ``/proc/self/status`` where there is one (Linux): ``ru_maxrss`` survives
    ``exec`` there, so a process started by a larger one would report its parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def host_memory_bytes() -> dict[str, int]:
    """This process's resident host memory now, in bytes: ``{"RssAnon": .., "RssFile": ..}``.

    ``RssAnon``: anonymous pages (heap, buffers: what the process itself holds; on the CPU
    backend the arrays too); ``RssFile``: pages of mapped files (the memory-mapped checkpoint
    among them), which the OS can drop and read again. From ``/proc/self/status`` (Linux);
    elsewhere the whole resident set counts as anonymous.
    """
    out = {"RssAnon": 0, "RssFile": 0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in out:
                    out[key] = int(line.split()[1]) * 1024
        return out
    except OSError:
        pass
    import psutil

    out["RssAnon"] = psutil.Process().memory_info().rss
    return out


@dataclasses.dataclass
class RunStats:
    """Seconds per phase and memory peaks of one pipeline call (see :meth:`summary`).

    Attributes:
        load_s: seconds spent loading the pipeline, set only on the call that paid for it (the
            first call of a pipeline; 0 on later calls, and then not shown).
        compile_s: seconds compiling the denoising step (0 when it was compiled by an earlier call).
        text_encode_s: seconds encoding the prompts (and conditioning images), compiles included.
        step_s: seconds of each denoising step.
        decode_s: seconds of the VAE decode, its compile included.
        audio_decode_s: seconds of the sound's decode (audio decoder and vocoder, compiles
            included); not timed (and not in the summary) when no sound was decoded.
        device_peak_bytes, device_peak_source, host_peak_rss_bytes, host_peak_anon_bytes,
            host_peak_file_bytes: see :meth:`sample_memory`.
        timed_phases: the fields :meth:`timed` measured in this call, in order; a phase that did
            not run (the VAE decode with ``output_type="latent"``) is not in it.
        compiles: per field timed, the XLA compilations made meanwhile and how many of them came
            from the persistent compilation cache (:func:`vidax.compile_cache.count_compiles`).
        seed: the seed of the initial noise (None: not recorded). seed_random: it was drawn at
            random because the call gave none (pass it as ``seed=`` to repeat the run).
        call_s: wall seconds of the call, from the argument checks' end to the frames (the
            phases above and what lies between them); the summary's total adds ``load_s``.
        cpu_matmul: what the denoising step's 16-bit matmuls ran through on the CPU backend
            (:func:`vidax.nn.kernels.cpu.describe_matmul`: which kernel, and why); None elsewhere.
        matmul_precision: how float32 products ran (:func:`vidax.nn.precision.describe_matmul_precision`).
        preset: which preset ran and the values it set (:func:`vidax.pipelines.presets.describe`:
            ``"preset lightx2v: num_inference_steps=4, ..."``); None: none.
        stage_estimates: stage -> device bytes the plan estimated before loading
            (:class:`~vidax.pipelines.device_plan.StageMemory`; empty: no device plan for this call).
        stage_measured: stage -> (device bytes, how measured) sampled as each stage ended
            (:meth:`sample_stage`).
        startup_s: seconds from the process's start (its creation, :func:`process_start`) to
            the load's start: the interpreter, imports, the backend's opening, the checks and
            the plan; set by ``vidax generate`` (0 in-process, where the process is not the run's).
        write_s: seconds writing the output files (``vidax generate``; 0 otherwise).
        With both set, :attr:`total_s` is the process's wall time up to the summary.
    """

    load_s: float = 0.0
    compile_s: float = 0.0
    text_encode_s: float = 0.0
    step_s: list[float] = dataclasses.field(default_factory=list)
    decode_s: float = 0.0
    audio_decode_s: float = 0.0
    device_peak_bytes: int = 0
    device_peak_source: str = ""
    host_peak_rss_bytes: int = 0
    host_peak_anon_bytes: int = 0
    host_peak_file_bytes: int = 0
    timed_phases: list[str] = dataclasses.field(default_factory=list)
    compiles: dict[str, CompileCounts] = dataclasses.field(default_factory=dict)
    seed: int | None = None
    seed_random: bool = False
    call_s: float = 0.0
    cache: Any = None
    cpu_matmul: str | None = None
    matmul_precision: str | None = None
    preset: str | None = None
    stage_estimates: dict[str, int] = dataclasses.field(default_factory=dict)
    stage_measured: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)
    startup_s: float = 0.0
    write_s: float = 0.0

    @property
    def total_s(self) -> float:
        """Seconds of the start-up and the load (where set) plus the call's wall time
        (:attr:`call_s`; where no one set it, the sum of the phases) and the writing."""
        call = self.call_s or (
            self.compile_s + self.text_encode_s + sum(self.step_s) + self.decode_s + self.audio_decode_s
        )
        return self.startup_s + self.load_s + call + self.write_s

    @contextlib.contextmanager
    def timed(self, field: str) -> Iterator[None]:
        """Add the seconds the ``with`` block takes to ``field`` (e.g. ``"decode_s"``), and count
        the compilations made in it into ``compiles[field]``."""
        t0 = time.perf_counter()
        with count_compiles() as counts:
            try:
                yield
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - t0)
                if field not in self.timed_phases:
                    self.timed_phases.append(field)
                self.compiles.setdefault(field, CompileCounts()).add(counts)

    def sample_memory(self) -> tuple[int | None, str]:
        """Take the memory figures now: the device peak (:func:`device_memory_bytes`), the
        process's peak RSS (``host_peak_rss_bytes``, the kernel's high-water mark), and the
        largest anonymous and file-mapped resident memory seen at these samples
        (``host_peak_anon_bytes``: the process's own buffers, the weights themselves on the CPU
        backend; ``host_peak_file_bytes``: pages of mapped files, the checkpoint's among them,
        which the OS can drop; :func:`host_memory_bytes`). Returns the device's ``(bytes, source)``."""
        peak, source = device_memory_bytes()
        if peak is not None and peak >= self.device_peak_bytes:
            self.device_peak_bytes, self.device_peak_source = peak, source
        self.host_peak_rss_bytes = host_peak_rss_bytes()
        now = host_memory_bytes()
        self.host_peak_anon_bytes = max(self.host_peak_anon_bytes, now["RssAnon"])
        self.host_peak_file_bytes = max(self.host_peak_file_bytes, now["RssFile"])
        return peak, source

    def sample_stage(self, stage: str) -> None:
        """:meth:`sample_memory`, its device bytes recorded as ``stage``'s measure."""
        peak, source = self.sample_memory()
        if peak is not None:
            self.stage_measured[stage] = (peak, source)

    def stage_rows(self) -> list[tuple[str, str]]:
        """One summary row per stage the plan estimated: the estimate before loading and what
        was measured. ``peak_bytes_in_use`` (GPU, TPU) only grows, so a stage's measure is the
        largest so far; the CPU reports no device peak (the arrays alive at a stage's end are
        not one), so there the measured column is left out, saying why."""
        rows = []
        for stage, est in self.stage_estimates.items():
            peak, source = self.stage_measured.get(stage, (None, ""))
            if peak is None:
                measured = "not run"
            elif source != "peak_bytes_in_use":
                measured = "not measured (the backend reports no device peak)"
            else:
                measured = f"measured {_fmt_bytes(peak).strip()} (peak so far)"
            rows.append((f"memory: {stage}", f"estimated {_fmt_bytes(est).strip()}, {measured}"))
        return rows

    def ran(self, field: str) -> bool:
        """Whether phase ``field`` happened in this call: timed by :meth:`timed`, or given a
        non-zero value by the caller (``step_s``: any step)."""
        return field in self.timed_phases or bool(getattr(self, field))

    def summary(self) -> str:
        """The end-of-run table: the seed, one row per phase that ran in this call (load only on
        the call that loaded), what each compiled and whether from the persistent cache, the
        total time, memory peaks."""
        steps = self.step_s
        per_step = sum(steps) / len(steps) if steps else 0.0
        rows = []
        if self.seed is not None:
            rows.append(
                (
                    "seed",
                    f"{self.seed}"
                    + (f" (drawn at random: seed={self.seed} repeats this run)" if self.seed_random else ""),
                )
            )
        if self.startup_s:
            rows.append(
                ("start-up", f"{self.startup_s:8.2f} s  (process start to the load: imports, backend, checks, plan)")
            )
        if self.load_s:
            rows.append(("load", f"{self.load_s:8.2f} s"))
        if self.ran("compile_s"):
            rows.append(("compile", f"{self.compile_s:8.2f} s  ({_step_compile_note(self.compiles.get('compile_s'))})"))
        if self.ran("text_encode_s"):
            rows.append(
                ("text encode", f"{self.text_encode_s:8.2f} s" + _compile_note(self.compiles.get("text_encode_s")))
            )
        if steps:
            rows.append(
                ("denoise", f"{sum(steps):8.2f} s  ({len(steps)} step{'s' * (len(steps) != 1)}, {per_step:.3f} s/step)")
            )
        if self.matmul_precision:
            rows.append(("matmul precision", self.matmul_precision))
        if self.cpu_matmul:
            rows.append(("cpu matmul", self.cpu_matmul))
        if self.cache is not None:
            rows.append(("step cache", self.cache.describe()))
        if self.preset is not None:
            rows.append(("preset", self.preset.removeprefix("preset ")))
        if self.ran("decode_s"):
            rows.append(("vae decode", f"{self.decode_s:8.2f} s" + _compile_note(self.compiles.get("decode_s"))))
        if self.ran("audio_decode_s"):
            rows.append(
                ("audio decode", f"{self.audio_decode_s:8.2f} s" + _compile_note(self.compiles.get("audio_decode_s")))
            )
        if self.write_s:
            rows.append(("write", f"{self.write_s:8.2f} s"))
        if self.compiles:
            rows.append(("compile cache", _cache_note(self.compiles.values())))
        if self.total_s:
            parts = [
                name for name, v in (("start-up", self.startup_s), ("load", self.load_s), ("write", self.write_s)) if v
            ]
            named = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)
            rows.append(("total", f"{self.total_s:8.2f} s" + (f"  ({named} included)" if parts else "")))
        rows += self.stage_rows()
        rows += [
            ("peak device memory", f"{_fmt_bytes(self.device_peak_bytes)} ({self.device_peak_source})"),
            ("peak host RSS", _fmt_bytes(self.host_peak_rss_bytes) + _host_split(self)),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _host_split(stats: RunStats) -> str:
    """``"  (sampled: anonymous 1.20 GiB, mapped files 310.0 MiB)"``: what the peak RSS is made
    of, the process's own memory apart from the page cache it maps; empty when never sampled."""
    if not stats.host_peak_anon_bytes and not stats.host_peak_file_bytes:
        return ""
    anon, files = _fmt_bytes(stats.host_peak_anon_bytes).strip(), _fmt_bytes(stats.host_peak_file_bytes).strip()
    return f"  (sampled: anonymous {anon}, mapped files {files})"


def _step_compile_note(counts: CompileCounts | None) -> str:
    if counts is None:  # compile_s given by the caller, not timed
        return "denoising step"
    if counts.compiled == 0:
        return "denoising step: compiled by an earlier call, reused"
    if counts.from_cache >= counts.compiled:
        return "denoising step: read from the persistent compilation cache"
    if counts.from_cache:
        return f"denoising step: {counts.compiled} compiles, {counts.from_cache} from the persistent cache"
    return "denoising step: compiled"


def _compile_note(counts: CompileCounts | None) -> str:
    if counts is None or counts.compiled == 0:
        return ""
    cached = f", {counts.from_cache} from the persistent cache" if counts.from_cache else ""
    return f"  (with {counts.compiled} compile{'s' if counts.compiled > 1 else ''}{cached})"


def _cache_note(counts) -> str:
    total = CompileCounts()
    for c in counts:
        total.add(c)
    folder = compile_cache_dir()
    if folder is None:
        return "off"
    return (
        f"{folder}: {total.from_cache} of {total.compiled} compiles in this call read from it, {total.written} written"
    )


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**30:8.2f} GiB" if n >= 2**30 else f"{n / 2**20:8.1f} MiB"


def process_start() -> float:
    """When this process was created, in ``time.time()`` seconds: the kernel's record, so the
    interpreter's start and the imports before any vidax code count too. On Linux from
    ``/proc/self/stat``'s start time (clock ticks since boot, 10 ms) against ``CLOCK_BOOTTIME``;
    elsewhere ``psutil``'s ``create_time`` (on Linux that adds the boot time, which the kernel
    gives in whole seconds: up to a second off)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, after pid and (comm)
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        import psutil

        return psutil.Process().create_time()


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
