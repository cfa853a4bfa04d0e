"""The run summary says what happened in this call: the load on the call that paid for it,
only the phases that ran, and whether the step was compiled now or reused."""

import re

import pytest

import vidax
from vidax.default_checkpoint import default_checkpoint
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
    rows = summary_rows(RunStats(load_s=1.5, compile_s=2.0, text_encode_s=0.5, step_s=[0.25, 0.75],
                                 decode_s=3.0).summary())
    assert rows["load"] == "1.50 s" and rows["compile"] == "2.00 s  (denoising step)"
    assert rows["denoise"] == "1.00 s  (2 steps, 0.500 s/step)" and rows["vae decode"] == "3.00 s"
    assert rows["total"] == "8.00 s  (load included)" and "seed" not in rows  # no call_s: the phases
    assert "compile cache" not in rows
    assert set(summary_rows(RunStats().summary())) == {"peak device memory", "peak host RSS"}
