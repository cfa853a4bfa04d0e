"""Timing and memory accounting for one generation: what the end-of-run summary prints."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import time
from typing import Iterator

import jax


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


@dataclasses.dataclass
class RunStats:
    """Seconds per phase and memory peaks of one pipeline call (see :meth:`summary`)."""

    load_s: float = 0.0
    compile_s: float = 0.0
    text_encode_s: float = 0.0
    step_s: list[float] = dataclasses.field(default_factory=list)
    decode_s: float = 0.0
    device_peak_bytes: int = 0
    device_peak_source: str = ""
    host_peak_rss_bytes: int = 0

    @contextlib.contextmanager
    def timed(self, field: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, field, getattr(self, field) + time.perf_counter() - t0)

    def sample_memory(self) -> None:
        peak, source = device_memory_bytes()
        if peak is not None and peak >= self.device_peak_bytes:
            self.device_peak_bytes, self.device_peak_source = peak, source
        self.host_peak_rss_bytes = host_peak_rss_bytes()

    def summary(self) -> str:
        steps = self.step_s
        per_step = sum(steps) / len(steps) if steps else 0.0
        rows = [
            ("load", f"{self.load_s:8.2f} s"),
            ("compile", f"{self.compile_s:8.2f} s  (denoising step)"),
            ("text encode", f"{self.text_encode_s:8.2f} s  (first call in a process: with its compile)"),
            ("denoise", f"{sum(steps):8.2f} s  ({len(steps)} steps, {per_step:.3f} s/step)"),
            ("vae decode", f"{self.decode_s:8.2f} s  (first call in a process: with its compile)"),
            ("peak device memory", f"{_fmt_bytes(self.device_peak_bytes)} ({self.device_peak_source})"),
            ("peak host RSS", _fmt_bytes(self.host_peak_rss_bytes)),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**30:8.2f} GiB" if n >= 2**30 else f"{n / 2**20:8.1f} MiB"


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
