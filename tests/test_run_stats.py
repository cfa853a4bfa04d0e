"""The run summary says what happened in this call: the load on the call that paid for it,
only the phases that ran, and whether the step was compiled now or reused."""

import re

import pytest

import vidax
from vidax.default_checkpoint import default_checkpoint
from vidax.pipelines.memory import check_memory, memory_estimate
from vidax.stats import RunStats

TINY = dict(height=32, width=32, num_frames=5, num_inference_steps=1, max_sequence_length=16, progress=False)


def summary_rows(summary: str) -> dict[str, str]:
    """``RunStats.summary()`` text -> {row name: the rest of its line}."""
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in summary.splitlines())


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return default_checkpoint(str(tmp_path_factory.mktemp("cache")))


def test_repeated_calls_report_what_each_call_did(ckpt):
    pipe = vidax.load_pipeline(ckpt)
    out = pipe("a cat", **TINY)  # no seed: drawn at random, and reported
    again = pipe("a cat", **TINY, seed=out.stats.seed)
    first, second = out.stats, again.stats
    latent = pipe("a cat", **TINY, output_type="latent", seed=5).stats
    rows = [summary_rows(s.summary()) for s in (first, second, latent)]
    # The seed used, so that a run can be repeated: the same seed gives the same video.
    assert first.seed_random
    assert rows[0]["seed"] == f"{first.seed} (drawn at random: seed={first.seed} repeats this run)"
    assert rows[1]["seed"] == str(first.seed) and rows[2]["seed"] == "5" and latent.seed == 5
    assert (out.frames == again.frames).all()
    # The total: the load (on the call that paid for it) and the call's wall time, every phase in it.
    for s, r in zip((first, second, latent), rows):
        assert s.total_s >= s.load_s + s.compile_s + s.text_encode_s + sum(s.step_s) + s.decode_s
        assert r["total"] == f"{s.total_s:.2f} s" + ("  (load included)" if s.load_s else "")
    # The load: on the first call only.
    assert first.load_s > 0 and "load" in rows[0]
    assert second.load_s == latent.load_s == 0 and "load" not in rows[1] and "load" not in rows[2]
    # The step compiled by the first call (or an earlier pipeline of this structure) is reused.
    assert rows[1]["compile"].endswith("(denoising step: compiled by an earlier call, reused)")
    assert second.compiles["compile_s"].compiled == 0
    assert "(with" not in rows[1]["text encode"] and "(with" not in rows[1]["vae decode"]
    assert not any("first call in a process" in v for r in rows for v in r.values())
    # No VAE decode with output_type="latent".
    assert "vae decode" in rows[1] and "vae decode" not in rows[2]
    assert "decode_s" not in latent.timed_phases and "decode_s" in second.timed_phases
    for r in rows:
        assert r["compile cache"] == "off"  # the suite runs without the persistent cache
        assert {"text encode", "denoise", "peak device memory", "peak host RSS"} <= set(r)


def test_summary_of_fields_set_by_the_caller():
    """A RunStats filled in by hand (no timed phases) still gives its table."""
    rows = summary_rows(
        RunStats(load_s=1.5, compile_s=2.0, text_encode_s=0.5, step_s=[0.25, 0.75], decode_s=3.0).summary()
    )
    assert rows["load"] == "1.50 s" and rows["compile"] == "2.00 s  (denoising step)"
    assert rows["denoise"] == "1.00 s  (2 steps, 0.500 s/step)" and rows["vae decode"] == "3.00 s"
    assert rows["total"] == "8.00 s  (load included)" and "seed" not in rows  # no call_s: the phases
    assert "compile cache" not in rows
    assert set(summary_rows(RunStats().summary())) == {"peak device memory", "peak host RSS"}
    assert summary_rows(RunStats(step_s=[0.5]).summary())["denoise"] == "0.50 s  (1 step, 0.500 s/step)"


def test_host_memory_told_apart_anonymous_and_mapped_files(tmp_path):
    """The summary's host memory: the process's own (anonymous) memory apart from the pages of
    mapped files (a memory-mapped checkpoint's), each seen growing by what was allocated or
    mapped."""
    import mmap

    import numpy as np

    from vidax.stats import host_memory_bytes

    stats, size = RunStats(), 64 * 2**20
    stats.sample_memory()
    before = host_memory_bytes()
    # written: resident anonymous pages (a private mapping of its own: a numpy array could reuse
    # heap pages already resident, freed by a test before, and the process would not grow)
    held = np.frombuffer(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS), np.uint8)
    held[:] = 1
    path = tmp_path / "file"
    path.write_bytes(b"\1" * size)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert sum(mapped[i] for i in range(0, size, mmap.PAGESIZE)) == size // mmap.PAGESIZE  # paged in
        stats.sample_memory()
        now = host_memory_bytes()
    assert now["RssAnon"] - before["RssAnon"] >= 0.9 * size and held.sum() == size
    assert now["RssFile"] - before["RssFile"] >= 0.9 * size
    assert stats.host_peak_anon_bytes >= now["RssAnon"] and stats.host_peak_file_bytes >= now["RssFile"]
    row = summary_rows(stats.summary())["peak host RSS"]
    anon, files = (
        f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"
        for n in (stats.host_peak_anon_bytes, stats.host_peak_file_bytes)
    )
    assert row.endswith(f"(sampled: anonymous {anon}, mapped files {files})")


# One process per measurement: the peak RSS growth (VmHWM, reset through /proc/self/clear_refs
# after loading) of a call on the embedded tiny Wan checkpoint, and the estimate for it.
MEASURE = """
import json, sys
import vidax
from vidax.pipelines.memory import memory_estimate

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

pipe = vidax.load_pipeline(sys.argv[1])
for h, w, f in json.loads(sys.argv[2]):
    call = pipe.check_call(pipe.info, "a cat", height=h, width=w, num_frames=f, num_inference_steps=1, progress=False)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = rss("VmRSS:")
    pipe.generate(call)
    print(json.dumps([h, w, f, rss("VmHWM:") - before, memory_estimate(type(pipe), pipe.info, call).total]))
"""


def test_memory_estimate_within_2x_of_measured_peak(ckpt):
    """The estimate of a call's peak memory (weights excluded: loaded) against the measured peak
    RSS growth, on CPU. Measured on this 2-core machine (measured / estimate):

    =============================================  =====  =====================================
    tiny Wan (embedded; CFG) 96x160, 17 frames     0.98   VAE decode chunk dominates
    tiny Wan 96x160, 65 frames                     1.07
    tiny Wan 192x320, 17 frames                    0.94
    tiny Wan 256x448, 33 frames                    0.82
    Wan, D=512 (8 heads x 64), ffn 2048, 2 layers,
    output_type="latent", 96x160, 17 frames        0.75   runtime overhead dominates
    same, 256x448, 33 frames                       0.92   the denoising step dominates
    same, 384x640, 33 frames                       0.82
    =============================================  =====  =====================================

    Before, the warning's "activations" (one block's q, k, v, FFN) was ~12x below the peak.
    Here the cheapest runs again (the others take minutes of VAE decode on this CPU).
    The estimate is of a call in a fresh process (the CLI's): a later call of the same process
    reuses memory the first one freed (the 128x224 call after the 96x160 one grew RSS by 0.4x
    its estimate)."""
    import json
    import subprocess
    import sys

    for size in ([96, 160, 17],):  # a process each: a later call reuses what the first freed
        r = subprocess.run(
            [sys.executable, "-c", MEASURE, ckpt, json.dumps([size])], capture_output=True, text=True, timeout=600
        )
        assert r.returncode == 0, r.stderr
        h, w, f, measured, estimate = json.loads(r.stdout.strip().splitlines()[-1])
        print(
            f"{h}x{w}, {f} frames: measured {measured / 2**20:.0f} MiB, estimate {estimate / 2**20:.0f} MiB, "
            f"ratio {measured / estimate:.2f}"
        )
        assert 0.5 <= measured / estimate <= 2.0, (h, w, f, measured, estimate)


def test_call_beyond_memory_refused_before_any_work(ckpt, tmp_path, caplog):
    """A size whose estimate exceeds the memory there is: one line with the estimate and the
    largest size that fits, exit 2, before any weight is read; warned and run with the override."""
    from typer.testing import CliRunner

    from vidax.checkpoint import Checkpoint
    from vidax.cli import app
    from vidax.errors import OutOfMemoryError
    from vidax.pipelines.loading import pipeline_class

    # 2048 x 2048 x 4093 frames: ~600 GiB of decoded video alone, more than any host here.
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "x",
            "--checkpoint",
            ckpt,
            "--height",
            "2048",
            "--width",
            "2048",
            "--num-frames",
            "4093",
            "-o",
            str(tmp_path / "v.npy"),
        ],
    )
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(
        "error: --height 2048, --width 2048, --num-frames 4093: 2048x2048 pixels, 4093 frames "
        "(batch 1, CFG doubles it) needs ~"
    ), r.stderr
    assert re.search("GiB of (available host RAM|free device memory): ", r.stderr), r.stderr
    assert "(to run it anyway: --no-memory-check)" in r.stderr and "pipe.memory_check" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "v.npy").exists()
    # What fits is the largest size whose estimate is within the memory given.
    cls = pipeline_class(Checkpoint.open(ckpt), task="t2v")
    info = cls.family.read_checkpoint(Checkpoint.open(ckpt))
    call = cls.check_call(info, "a cat", height=480, width=800, num_frames=17)
    need = memory_estimate(cls, info, call).with_tiling().total  # the least: the VAE decoding in tiles
    free = need // 2
    with pytest.raises(
        OutOfMemoryError,
        match=r"^height=480, width=800, num_frames=17: 480x800 pixels, 17 frames "
        r"\(batch 1, CFG doubles it\) needs .* more than the .* of test "
        r"memory: height=(\d+), width=(\d+) fits at num_frames=17",
    ) as e:
        check_memory(cls, info, call, available=(free, "test memory"))
    assert str(e.value).endswith("(to run it anyway: pipe.memory_check = False)")  # Python's words, not a flag
    h, w = map(int, re.search(r"height=(\d+), width=(\d+) fits", str(e.value)).groups())
    import dataclasses

    assert memory_estimate(cls, info, dataclasses.replace(call, height=h, width=w)).with_tiling().total <= free
    # the next size up the search tried: 16 pixels taller, the width keeping the 480 x 800 aspect
    taller = dataclasses.replace(call, height=h + 16, width=round(800 * (h + 16) / 480 / 16) * 16)
    assert memory_estimate(cls, info, taller).with_tiling().total > free
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        assert check_memory(cls, info, call, available=(free, "test memory"), refuse=False).total == need
    assert "running it anyway" in caplog.records[-1].getMessage()
    # Weights alone over the memory: no size or frame count is offered (none makes room), only
    # what shrinks the weights: dtype bfloat16 for a float32 load (named as the argument), 8-bit kernels; offloading only where
    # the memory short is a device's (offloaded weights wait in host memory).
    for dtype, what, counted, tried in (
        (
            "float32",
            "available host RAM",
            "all",
            "try dtype='bfloat16', weight_dtype='int8' (8-bit transformer kernels)",
        ),
        (
            "bfloat16",
            "free device memory",
            "transformers",  # a device holds the transformers' weights (the rest may be staged)
            "try weight_dtype='int8' (8-bit transformer kernels), offloading",
        ),
    ):
        weights = memory_estimate(cls, info, call, dtype=dtype, weights=counted).weights
        with pytest.raises(OutOfMemoryError) as e:
            check_memory(cls, info, call, dtype=dtype, loaded=False, available=(weights // 4, what))
        text = str(e.value)
        assert "the weights alone are more than that: " + tried + " (to run it anyway" in text, text
        assert "num_frames" not in text.split("GiB)", 1)[1] and "fits" not in text, text


def test_vae_tiling_turns_itself_on_when_an_untiled_decode_does_not_fit(ckpt, monkeypatch, caplog):
    """Memory between the tiled and the untiled estimate: the plan counts the tiled decode in the
    largest tiles that fit (the fewest a frame), says so in one WARNING line, and the call decodes
    in those tiles (then tiling is off again); with memory for the untiled decode nothing
    changes, with room for the reference's tiles only those are taken."""
    from vidax.models.wan.vae import WanTiling
    from vidax.pipelines import memory

    pipe = vidax.load_pipeline(ckpt)
    call = type(pipe).check_call(pipe.info, "a cat", height=144, width=544, num_frames=5)
    est = memory_estimate(type(pipe), pipe.info, call)
    one, two = est.with_tiling(1), est.with_tiling(2)
    # 256 px tiles every 192 (1 x 3 a frame), 512 every 448 (1 x 2); 768 px would be the whole frame
    assert [(t.scale, t.side, t.tiles) for t in est.decode_tiles] == [(1, 256, 3), (2, 512, 2)]
    assert not est.vae_tiling and one.vae_tiling and one.total < two.total < est.total
    assert not check_memory(type(pipe), pipe.info, call, available=(est.total, "test memory")).vae_tiling
    assert check_memory(type(pipe), pipe.info, call, available=((one.total + two.total) // 2, "test memory")) == one
    free = (est.total + two.total) // 2
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        got = check_memory(type(pipe), pipe.info, call, available=(free, "test memory"))
    assert got == two and got.vae_tile_scale == 2
    said = [r.getMessage() for r in caplog.records if "untiled" in r.getMessage()]
    assert re.search(
        r"an untiled VAE decode would not fit in the .* of test memory; decoding in tiles \(peak .*"
        r"VAE decode chunk \(tiled, 512 px tiles\)",
        said[-1],
    )
    # asked for (tiling on already): the reference's tiles, whatever the room
    assert check_memory(type(pipe), pipe.info, call, available=(free, "test memory"), vae_tiling=True) == one
    # The pipeline call: it decodes in those tiles (the VAE's state seen at decode time), for this call only.
    seen = []
    decode = pipe.hooks.decode
    monkeypatch.setattr(pipe.hooks, "decode", lambda *a: seen.append(pipe.vae.tiling) or decode(*a))
    monkeypatch.setattr(memory, "available_memory", lambda: (free, "test memory"))
    out = pipe("a cat", **{**TINY, "height": 144, "width": 544}, seed=0)
    assert seen == [WanTiling(512, 512, 448, 448, use_tiling=True, same_shape_tiles=True)]
    assert not pipe.vae.use_tiling and out.frames.shape == (1, 5, 144, 544, 3)


def test_out_of_memory_during_the_run_is_one_line(ckpt, monkeypatch):
    """An allocation that fails during the run (XLA's RESOURCE_EXHAUSTED, or a MemoryError)
    becomes OutOfMemoryError naming the phase, the estimate and what to try."""
    from vidax.errors import OutOfMemoryError

    pipe = vidax.load_pipeline(ckpt)
    for error, name in (
        (
            RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 123456789 bytes."),
            "RuntimeError: RESOURCE_EXHAUSTED: Out of memory ",
        ),
        (MemoryError(), "MemoryError"),
    ):

        def fail(*_, error=error, **__):
            raise error

        monkeypatch.setattr(pipe.hooks, "encode_text", fail)
        with pytest.raises(
            OutOfMemoryError,
            match=r"^ran out of memory during the text encoding at height=32, "
            rf"width=32, num_frames=5: 32x32 pixels, 5 frames \({name}.*\); "
            r"the estimate was ~.* GiB "
            r"\(text encoding .*, denoising step .*; try a smaller "
            r"max_sequence_length=16",
        ):
            pipe("a cat", **TINY)


def test_cache_summary_says_predicted_when_only_hooked_modules_are_skipped():
    """TaylorSeer's module modes run every block and predict the hooked modules: the summary must
    not call those steps skipped blocks (a new user read it as blocks saved); the lite/FBC/MagCache
    wording is kept for blocks."""
    from vidax.pipelines.step_cache import CacheReport

    modules = CacheReport("taylorseer", num_blocks=4, unit="hooked module")
    blocks = CacheReport("taylorseer", num_blocks=4)
    for report in (modules, blocks):
        for computed in (True, False, True, False):
            report.record("all", computed, head_only=False)
        report.step_kind += ["full", "skipped", "full", "skipped"]
        report.step_s += [1.0, 0.5, 1.0, 0.5]
    assert "8 of 16 hooked module evaluations run, 8 predicted instead" in modules.describe()
    # Hooked modules may be whole blocks (cache_identifiers=[r'^transformer_blocks\.\d+$']): only the
    # modules not hooked are sure to run on every step.
    assert (
        "predicted instead (per step: all CSCS, S = predicted); the modules not hooked ran on every step, "
        "~1.00 s saved" in modules.describe()
    )
    assert "every block ran" not in modules.describe()
    assert "skipped the blocks" not in modules.describe()
    assert "8 of 16 block evaluations run, 8 skipped" in blocks.describe()
    assert "2 of 4 steps skipped the blocks, ~1.00 s saved" in blocks.describe()
    # Only proj_out predicted (lite mode on Cosmos 3's layers): every block ran, nothing is saved
    # whatever the step times say.
    modules.blocks_always = True
    assert modules.saved_s is None
    assert modules.describe().endswith("S = predicted); every block ran on every step, no time saved")


def test_cache_summary_leaves_warm_up_steps_out_of_time_saved():
    """The first step of each call / expert segment is its warm-up (first execution after the
    compile): counted among the computed steps it made a new user's LTX-2 TaylorSeer run (steps
    below, offload=1) report "~0.27 s saved" where the skipped steps were no faster. Left out,
    with skipped steps no faster than the computed ones, the summary says so instead of a figure."""
    from vidax.pipelines.step_cache import CacheReport

    def report(step_s, kinds, warm):
        r = CacheReport("taylorseer", num_blocks=4)
        for k in kinds:
            r.record("all", k == "full", head_only=False)
        r.step_kind, r.step_s, r.step_warm = list(kinds), list(step_s), list(warm)
        return r

    kinds = ["full", "full", "full", "skipped", "full", "skipped"]
    trial = report([0.44, 0.154, 0.029, 0.032, 0.0315, 0.0288], kinds, [True] + [False] * 5)
    assert trial.saved_s is None
    assert trial.describe().endswith(
        "2 of 6 steps skipped the blocks, time saved not measurable (first steps "
        "left out, the skipped steps were not all faster)"
    )
    # Two segments (experts), each with a slow first step; the skipped steps clearly faster: the
    # figure is (median computed - median skipped) x skipped steps from the other steps.
    two = report([5.0, 1.0, 0.25, 4.0, 1.0, 0.25], kinds, [True, False, False, True, False, False])
    two.step_kind = ["full", "full", "skipped", "full", "full", "skipped"]
    assert two.saved_s == pytest.approx(1.5)
    assert "~1.50 s saved" in two.describe()


def test_cache_summary_without_a_skipped_step_says_no_time_saved():
    """A run that skipped no step (a MagCache calibration, a threshold nothing reaches) has no
    time saved to measure; trial 4 read 'not measurable (the skipped steps were not all faster)'."""
    from vidax.pipelines.step_cache import CacheReport

    report = CacheReport("first_block threshold=0.5", num_blocks=4)
    for _ in range(6):
        report.record("all", True, head_only=True)
    report.step_kind += ["full"] * 6
    report.step_s += [1.0, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert report.describe().endswith("0 of 6 steps skipped the blocks, no time saved"), report.describe()


def test_stage_rows_estimate_beside_measured():
    """Each planned stage's estimate beside its measure: the device peak so far where the backend
    reports one, else said not measured; a stage that did not run says so."""
    from vidax.stats import RunStats

    stats = RunStats(stage_estimates={"text encoding": 3 * 2**30, "steps": 5 * 2**30, "VAE decode": 2**30})
    stats.stage_measured = {"text encoding": (2 * 2**30, "peak_bytes_in_use"), "steps": (100, "live arrays")}
    rows = dict(stats.stage_rows())
    assert rows["memory: text encoding"] == "estimated 3.00 GiB, measured 2.00 GiB (peak so far)"
    assert rows["memory: steps"] == "estimated 5.00 GiB, not measured (the backend reports no device peak)"
    assert rows["memory: VAE decode"] == "estimated 1.00 GiB, not run"
    assert "memory: steps" in stats.summary()
