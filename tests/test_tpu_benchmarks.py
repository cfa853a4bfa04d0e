"""Every ``benchmarks/tpu_*.py`` runs at ``--tiny`` on the CPU (issue 46: the TPU benchmarks
cannot rot): each script's ``main`` in this process, with the tiny configs and a small video.
``tpu_common`` and ``tpu_models`` are the scripts' shared modules, run through them. What runs
on a TPU only (the TPU lane, ``tests/tpu``) is skipped elsewhere by its own marker."""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np
import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCHMARKS)

import tpu_attention  # noqa: E402
import tpu_e2e  # noqa: E402
import tpu_memory_aot  # noqa: E402
import tpu_step  # noqa: E402
import tpu_vae  # noqa: E402

#: The scripts this file runs; a new benchmarks/tpu_*.py must be added here (and run below).
SCRIPTS = {"tpu_attention", "tpu_e2e", "tpu_memory_aot", "tpu_step", "tpu_vae"}
SHARED = {"tpu_common", "tpu_models"}
#: A smaller video than the presets' tiny one where the VAE decodes (fewer chunks to compile).
SMALL = ["--height", "32", "--width", "48", "--frames", "5"]


def test_every_tpu_script_is_run_here():
    found = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(BENCHMARKS, "tpu_*.py"))}
    assert found == SCRIPTS | SHARED


def test_tpu_step_runs_a_tiny_ltx2_step():
    """LTX-2's step: its inputs a StepInputs with the guidance's passes as the batch, each layer
    running them one at a time (``--micro-batch 1``: the video, audio and STG-counter streams
    and LTX-2's per-layer STG flags split or shared as declared)."""
    row = tpu_step.main(["--model", "ltx2", "--tiny", "--steps", "0", "--no-matmul-peak", "--micro-batch", "1"])
    assert row["finite"] and row["step_s"] > 0 and row["step_flops"] > 0 and row["micro_batch"] == 1
    assert row["size_HxWxF"] == [256, 384, 17]
    assert row["shapes"]["batch"] == 3  # prompt, negative, STG: LTX-2's default guidance passes


def test_tpu_memory_aot_compiles_a_tiny_step_beside_the_plans_estimate():
    """The step program compiled for this process's device (the CPU: no libtpu), its compiler's
    bytes beside the plan's estimate for that platform, as a table row."""
    row = tpu_memory_aot.main(["--model", "wan-1.3b", "--tiny", "--programs", "step"])
    assert row["target"].startswith("cpu") and row["step"]["blocks"] == 1
    assert row["step"]["temp_bytes"] > 0 and row["step"]["argument_bytes"] > 0 and row["estimate"]["step"] > 0
    assert row["step"]["estimate_over_compiler"] == round(row["estimate"]["step"] / row["step"]["temp_bytes"], 3)
    assert "decode" not in row and "| wan-1.3b 64x96x9 | step, 1 block(s) |" in tpu_memory_aot.table(row)


@pytest.mark.parametrize("model", ["wan-1.3b", "ltx2"])
def test_tpu_memory_aot_compiles_the_decode_programs(model):
    """The decode chunk program (the Wan VAE's: a chunk after the first, with its cache) and one
    tile's, compiled for this process's device: the causal-cache kind and LTX's (HunyuanVideo 1.5's
    whole-clip tile, the third, is LTX's shape of program)."""
    row = tpu_memory_aot.main(["--model", model, "--tiny", "--programs", "decode", "decode_tiled"])
    assert row["decode"]["temp_bytes"] > 0 and row["decode_tiled"]["temp_bytes"] > 0
    assert row["estimate"]["decode"] > 0 and "| decode |" in tpu_memory_aot.table(row)


def test_tpu_vae_decodes_a_tiny_video():
    row = tpu_vae.main(["--model", "wan-1.3b", "--tiny", "--repeats", "1", *SMALL])
    assert row["finite"] and row["frames"][:2] == [1, 5] and row["compiles"] > 0


def test_tpu_vae_times_ltx2_and_cogvideox():
    """LTX-2's tiled decode (5 latent frames in temporal tiles of 3, the last ones padded): one
    decode program; CogVideoX, a VAE-only model of the script (3 latent frames: its first chunk
    alone)."""
    row = tpu_vae.main(["--model", "ltx2", "--tiny", "--tiling", "--repeats", "1", "--height", "64",
                        "--width", "96", "--frames", "33"])  # fmt: skip
    assert row["finite"] and row["frames"][:2] == [1, 33] and row["chunks"] == 4
    assert row["programs"]["jit(_decode_fn)"] == 1, row["programs"]
    row = tpu_vae.main(["--model", "cogvideox-5b", "--tiny", "--repeats", "1", *SMALL[:4], "--frames", "9"])
    assert row["vae"] == "AutoencoderKLCogVideoX" and row["finite"] and row["frames"][:2] == [1, 9]


def test_tpu_attention_runs_vidax_attention():
    rows = tpu_attention.main(["--tiny"])
    assert [r["setting"] for r in rows] == ["vidax:xla", "vidax:blockwise"]
    assert all("error" not in r and r["ms"] > 0 for r in rows)
    assert rows[1]["max_abs_diff_vs_first"] < 1e-2  # the same attention, bfloat16


def test_tpu_e2e_makes_a_video_from_a_scaled_reference_config(tmp_path):
    """The Wan2.1 reference configuration scaled down (tiny transformer, UMT5 and VAE configs),
    random weights made on the device, end to end to an mp4; the row renders as the table."""
    rows = tmp_path / "rows.jsonl"
    row = tpu_e2e.main(["--model", "wan-1.3b", "--tiny", "--steps", "2", *SMALL, "--out", str(rows)])
    assert row["finite"] and os.path.getsize(row["output"]) > 0
    assert len(row["step_s"]) == 2 and row["load_s"] > 0 and row["decode_s"] > 0 and row["write_s"] >= 0
    assert row["estimate_gib"] > 0 and row["peak_rss_anon_gib"] > 0 and row["process_wall_s"] >= row["total_s"]
    assert row["step_flops"] > 0 and row["mfu"] is None  # no datasheet peak on a CPU
    assert row["default_steps"] == 50 and row["video_s_default_steps"] > row["total_s"]
    assert json.loads(rows.read_text()) == row
    table = tpu_e2e.main(["--table", str(rows)])
    lines = table.splitlines()
    assert len(lines) == 3 and lines[0].startswith("| line |") and "32x48x5" in lines[2]
    assert lines[2].count("|") == lines[0].count("|")


def test_tpu_e2e_row_of_a_refused_line_names_the_refusal(monkeypatch):
    """A released line the memory plan refuses (here the full-size Wan2.1-1.3B on a pretended 1 GiB
    device) gives a row with the refusal and its plan, made from the configs alone (nothing loaded)."""
    monkeypatch.setenv("VIDAX_DEVICE_MEMORY", "1GiB")
    row = tpu_e2e.main(["--line", "Wan2.1 T2V 1.3B 480p"])
    assert "1.0 GiB" in row["refused"] and row["plan"].startswith("plan:") and "load_s" not in row
    assert row["size_HxWxF"] == [480, 832, 81] and row["default_steps"] == row["steps"] == 50
    assert tpu_e2e.table([row]).splitlines()[2].endswith(f"{row['refused']} |")
    # Any released configuration (--released: issue 50's long video) with call keywords (--call):
    # the plan of a 721-frame diffusion-forcing video is one chunk's (the same as 97 frames').
    long = ["--released", "Skywork__SkyReels-V2-DF-1.3B-540P-Diffusers", "--call", "overlap_history=17"]
    row = tpu_e2e.main([*long, "--frames", "721"])
    assert row["size_HxWxF"] == [544, 960, 721] and row["call"] == {"overlap_history": 17} and row["refused"]
    assert row["plan"] == tpu_e2e.main([*long, "--frames", "97"])["plan"]
    with pytest.raises(SystemExit):
        tpu_e2e.main([*long, "--call", "overlap history"])
    with pytest.raises(SystemExit):
        tpu_e2e.main(["--released", "Skywork__SkyReels-V2-DF-1.3B"])  # no such folder: one line, no traceback


def test_tpu_e2e_stops_at_its_budget_and_still_reports(capsys):
    """--budget-s 0 stops the call at its first check and still writes the row; --progress says
    where the run is, stage by stage, on stderr (what a row that outlives its device call leaves)."""
    row = tpu_e2e.main(["--model", "wan-1.3b", "--tiny", "--steps", "2", "--budget-s", "0", "--progress"])
    err = capsys.readouterr().err
    assert "loading " in err and "encoding the prompt" in err
    assert row["stopped"].startswith("--budget-s 0.0: stopped") and "output" not in row
    assert np.isfinite(row["total_s"])


def test_tpu_e2e_watchdog_ends_a_stuck_call_with_its_row(tmp_path):
    """Past --budget-s plus the grace, the command line's watchdog prints the threads' stacks and
    the row so far (``killed``), appends it to --out and ends the process: a stage the budget
    cannot stop (a compile, one long program) still leaves its row inside the device call."""
    import subprocess
    import textwrap

    out = tmp_path / "rows.jsonl"
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {os.path.join(os.path.dirname(__file__), "..", "benchmarks")!r})
        import tpu_e2e
        tpu_e2e.HARD_STOP_GRACE_S = 0.2
        tpu_e2e.watchdog({{"line": "stuck"}}, {str(out)!r}, time.perf_counter())
        time.sleep(60)  # a stage that never checks the budget
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "time.sleep(60)" in proc.stderr or "<module>" in proc.stderr  # the main thread's stack
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["line"] == "stuck" and row["killed"].startswith("still running")


def test_tpu_e2e_host_guard_ends_the_run_with_its_row(tmp_path):
    """Below the host-memory floor the guard ends the process (status 4) with the row so far and
    where it was, before the machine's out-of-memory killer would take the whole call (here a floor
    above any machine's memory, in a child process)."""
    import subprocess

    out = tmp_path / "rows.jsonl"
    code = (
        f"import sys, time; sys.path.insert(0, {BENCHMARKS!r}); import tpu_e2e; "
        f"tpu_e2e.host_guard({{'line': 'x'}}, {str(out)!r}, floor=1 << 60); time.sleep(60)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["line"] == "x" and row["killed"].startswith("host memory available fell to")
    assert "tpu_e2e-host-guard" in r.stderr or "Thread" in r.stderr  # the stacks
