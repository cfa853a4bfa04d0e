"""Golden outputs: every frames / sound array the tiny pipelines of the test suite produce, stored
so that a refactor can be checked bit-identical on the CPU.

``record`` runs pytest (in this process, ``-n 0``) over the tests that run each family's tiny
pipelines (:data:`RUNS`, or the pytest arguments given) with :class:`Recorder` as a plugin: every call
of a :class:`~vidax.pipelines.base.VideoPipeline` (its ``__call__``, wrapped for the session) stores
its ``frames`` and ``audio`` under ``"<test node id>#<call index>/frames"`` (``/audio``), the calls
made by a module's fixtures under the first test that needs them. ``compare`` checks two recordings
key by key, bit for bit, and exits 1 naming what differs (or is missing on one side)::

    PYTHONPATH=$PWD/src python -m tests.tools.golden record /tmp/before.npz
    PYTHONPATH=$PWD/src python -m tests.tools.golden record /tmp/after.npz
    python -m tests.tools.golden compare /tmp/before.npz /tmp/after.npz

Run ``record`` on the commit before a change (e.g. ``git archive BASE | tar -x -C DIR`` and the
same command inside DIR with this file copied there) and after it. Calls without a ``seed`` draw
one at random; they are recorded under ``.../unseeded`` and not compared.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

#: The pytest runs whose pipeline calls are recorded: each family's tiny end-to-end test (the
#: parity tests marked ``fast(family=...)``: one tiny pipeline per family, against diffusers), the
#: toy family (video) and its sound variant (video and sound).
RUNS = (
    (
        "-m",
        "fast",
        "tests/parity/test_wan_pipeline.py",
        "tests/parity/test_skyreels_v2_pipeline.py",
        "tests/parity/test_cogvideox_pipeline.py",
        "tests/parity/test_cosmos_pipeline.py",
        "tests/parity/test_cosmos3_pipeline.py",
        "tests/parity/test_hunyuan_pipeline.py",
        "tests/parity/test_hunyuan15_pipeline.py",
        "tests/parity/test_ltx_pipeline.py",
        "tests/parity/test_ltx2_pipeline.py",
    ),
    (
        "tests/test_new_family.py::test_toy_family_runs_through_load_pipeline",
        "tests/test_sound_family.py::test_video_and_sound_through_the_api",
        "tests/test_sound_family.py::test_latent_output_and_decode_audio_false",
    ),
)


class Recorder:
    """The pytest plugin: wraps ``VideoPipeline.__call__`` for the session and stores its outputs."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.node = "<collection>"
        self.counts: dict[str, int] = {}

    def pytest_configure(self, config):
        from vidax.pipelines.base import VideoPipeline

        original = VideoPipeline.__call__
        recorder = self

        def recorded(pipe, *args, **kwargs):
            out = original(pipe, *args, **kwargs)
            recorder.store(out, kwargs.get("seed") is not None or kwargs.get("latents") is not None)
            return out

        self._restore = (VideoPipeline, original)
        VideoPipeline.__call__ = recorded

    def pytest_unconfigure(self, config):
        cls, original = self._restore
        cls.__call__ = original

    def pytest_runtest_setup(self, item):
        self.node = item.nodeid

    def store(self, out, seeded: bool) -> None:
        index = self.counts.get(self.node, 0)
        self.counts[self.node] = index + 1
        key = f"{self.node}#{index}" + ("" if seeded else "/unseeded")
        if isinstance(out, tuple):  # return_dict=False: (frames,) or (frames, audio)
            frames, audio = out[0], (out[1] if len(out) > 1 else None)
        else:
            frames, audio = out.frames, out.audio
        for name, value in (("frames", frames), ("audio", audio)):
            if value is not None:
                self.arrays[f"{key}/{name}"] = np.asarray(value)


def record(out: str, pytest_args: list[str]) -> int:
    """Run :data:`RUNS` (or one run of ``pytest_args``) with one :class:`Recorder`, then write ``out``."""
    import pytest

    recorder = Recorder()
    codes = [
        pytest.main(["-q", "-n", "0", "-p", "no:cacheprovider", *args], plugins=[recorder])
        for args in ([pytest_args] if pytest_args else RUNS)
    ]
    np.savez_compressed(out, **recorder.arrays)
    print(f"golden: {len(recorder.arrays)} arrays from {len(recorder.counts)} tests -> {out}", file=sys.stderr)
    return max(codes)


def compare(a: str, b: str) -> int:
    """0 where every compared array of ``a`` and ``b`` is bit-identical (dtype, shape, bytes)."""
    x, y = np.load(a), np.load(b)
    keys = sorted(k for k in set(x.files) | set(y.files) if "/unseeded/" not in k)
    bad = []
    for k in keys:
        if k not in x.files or k not in y.files:
            bad.append(f"{k}: only in {'the first' if k in x.files else 'the second'}")
            continue
        p, q = x[k], y[k]
        if p.dtype != q.dtype or p.shape != q.shape or p.tobytes() != q.tobytes():
            diff = np.abs(p.astype(np.float64) - q.astype(np.float64)).max() if p.shape == q.shape else "shape"
            bad.append(f"{k}: differs ({p.dtype}{p.shape} vs {q.dtype}{q.shape}, max |diff| {diff})")
    print(f"{len(keys) - len(bad)} of {len(keys)} arrays bit-identical")
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.tools.golden", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="run the tests and store every pipeline output")
    r.add_argument("out", help="the .npz to write")
    r.add_argument("pytest_args", nargs="*", help="tests / pytest options (default: RUNS)")
    c = sub.add_parser("compare", help="check two recordings bit for bit")
    c.add_argument("a")
    c.add_argument("b")
    args, extra = p.parse_known_args(argv)
    if args.command == "record":
        return record(args.out, args.pytest_args + extra)
    if extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
