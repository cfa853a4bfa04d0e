"""benchmarks/load_speed.py runs (at its tiny size) and measures what it says it does."""

import importlib.util

from tests.paths import REPO


def test_load_speed_benchmark_runs_at_tiny_size(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("load_speed", REPO / "benchmarks" / "load_speed.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (warm,) = bench.main(["--tiny", "--no-cold", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "GB/s" in out and "CPU: " in out and "anon peak" in out and "file-mapped peak" in out
    files = sum(p.stat().st_size for p in tmp_path.rglob("*.safetensors"))
    assert files == 0  # the folder is deleted afterwards (no --keep)
    assert warm["bytes"] > 0 and warm["seconds"] > 0 and warm["placed_bytes"] > 0
    assert warm["anon_peak"] >= warm["anon_before"] > 0 and warm["file_peak"] > 0
