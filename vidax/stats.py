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
    elsewhere (CPU) the bytes of the arrays alive right now, which callers sample at the points
    where memory peaks.
    """
    peaks = []
    for d in jax.local_devices():
        try:
            stats = d.memory_stats()
        except Exception:  # some backends raise instead of returning None
            stats = None
        if stats and "peak_bytes_in_use" in stats:
            peaks.append(stats["peak_bytes_in_use"])
    if peaks:
        return max(peaks), "peak_bytes_in_use"
    return live_array_bytes(), "live arrays"


def live_array_bytes() -> int:
    """Bytes of all JAX arrays alive now, per-device maximum (sharded arrays counted per shard)."""
    per_device: dict = {}
    for a in jax.live_arrays():
        try:
            shards = a.addressable_shards
        except Exception:
            continue
        for s in shards:
            per_device[s.device] = per_device.get(s.device, 0) + s.data.nbytes
    return max(per_device.values(), default=0)


def host_peak_rss_bytes() -> int:
    """Peak resident set size of this process (bytes)."""
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
            ("compile", f"{self.compile_s:8.2f} s"),
            ("text encode", f"{self.text_encode_s:8.2f} s"),
            ("denoise", f"{sum(steps):8.2f} s  ({len(steps)} steps, {per_step:.3f} s/step)"),
            ("vae decode", f"{self.decode_s:8.2f} s"),
            (
                "peak device memory",
                f"{self.device_peak_bytes / 2**30:8.2f} GiB ({self.device_peak_source})",
            ),
            ("peak host RSS", f"{self.host_peak_rss_bytes / 2**30:8.2f} GiB"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
