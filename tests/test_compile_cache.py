"""JAX's persistent compilation cache (vidax.compile_cache): on by default in the user cache
folder, moved or turned off by VIDAX_COMPILE_CACHE or --no-compile-cache, a cache the user
configured for JAX kept, and cache hits reported. Every run here is a subprocess with its own
folders (XDG_CACHE_HOME and VIDAX_CACHE_DIR too), so nothing is written to the real user cache."""

import json
import os
import subprocess
import sys

import pytest

from tests.test_run_stats import summary_rows
from vidax.default_checkpoint import default_checkpoint

# A jitted function and an eager op, compiled under count_compiles; prints what happened.
PROBE = """
import json
import jax, jax.numpy as jnp
from vidax.compile_cache import count_compiles, setup_compile_cache
folder = setup_compile_cache()
with count_compiles() as c:
    jax.jit(lambda x: jnp.sin(x) @ x.T + 1)(jnp.ones((8, 8))).block_until_ready()
print(json.dumps(dict(folder=folder, compiled=c.compiled, from_cache=c.from_cache, written=c.written)))
"""


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("VIDAX_COMPILE_CACHE", "JAX_COMPILATION_CACHE_DIR")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), VIDAX_CACHE_DIR=str(tmp_path / "vidax-cache"), **extra)
    return env


def _probe(env):
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _entries(folder):
    return [e for e in os.listdir(folder) if e.endswith("-cache")] if os.path.isdir(folder) else []


def test_second_process_reads_compiles_from_the_cache(tmp_path):
    env = _env(tmp_path, VIDAX_COMPILE_CACHE=str(tmp_path / "cc"))
    first = _probe(env)
    assert first["folder"] == str(tmp_path / "cc")
    assert first["compiled"] > 0 and first["from_cache"] == 0 and first["written"] == first["compiled"]
    assert len(_entries(tmp_path / "cc")) == first["written"]
    second = _probe(env)
    assert second["compiled"] == first["compiled"] and second["from_cache"] == second["compiled"]
    assert second["written"] == 0


def test_default_folder_off_switch_and_users_own_setting(tmp_path):
    # Default: <vidax cache dir>/jax_compile_cache.
    default = tmp_path / "vidax-cache" / "jax_compile_cache"
    assert _probe(_env(tmp_path))["folder"] == str(default) and _entries(default)
    # VIDAX_COMPILE_CACHE=0 / off: nothing written anywhere.
    for off in ("0", "off"):
        out = _probe(_env(tmp_path / off, VIDAX_COMPILE_CACHE=off))
        assert out["folder"] is None and out["written"] == 0 and out["compiled"] > 0
        assert not (tmp_path / off).exists()
    # The user's own jax_compilation_cache_dir wins over VIDAX_COMPILE_CACHE.
    out = _probe(
        _env(tmp_path, VIDAX_COMPILE_CACHE=str(tmp_path / "ours"), JAX_COMPILATION_CACHE_DIR=str(tmp_path / "users"))
    )
    assert out["folder"] == str(tmp_path / "users") and not (tmp_path / "ours").exists()


@pytest.mark.slow
def test_generate_reports_cache_hits_and_no_compile_cache_flag(tmp_path):
    ckpt = default_checkpoint(str(tmp_path / "ckpt"))
    args = (
        "generate",
        "-p",
        "x",
        "--checkpoint",
        ckpt,
        "--height",
        "32",
        "--width",
        "32",
        "--num-frames",
        "5",
        "--num-inference-steps",
        "1",
        "--max-sequence-length",
        "16",
        "--no-progress",
        "-o",
        str(tmp_path / "v.npy"),
    )

    def run(*extra, **env):
        r = subprocess.run(
            [sys.executable, "-m", "vidax", *args, *extra],
            capture_output=True,
            text=True,
            env=_env(tmp_path, **env),
            timeout=600,
        )
        assert r.returncode == 0, r.stderr
        return summary_rows(r.stderr.split("summary:\n")[1])

    cc = str(tmp_path / "cc")
    first = run(VIDAX_COMPILE_CACHE=cc)
    assert "denoising step: compiled" in first["compile"]
    assert f"{cc}: 0 of " in first["compile cache"]
    second = run(VIDAX_COMPILE_CACHE=cc)
    assert "denoising step: read from the persistent compilation cache" in second["compile"]
    assert "from the persistent cache" in second["vae decode"], second
    hits, total = second["compile cache"].split(f"{cc}: ")[1].split(" compiles")[0].split(" of ")
    assert int(hits) == int(total) > 0, second["compile cache"]
    off = run("--no-compile-cache", VIDAX_COMPILE_CACHE=str(tmp_path / "cc2"))
    assert off["compile cache"].split()[-1] == "off" and not (tmp_path / "cc2").exists()
    assert "denoising step: compiled" in off["compile"]


def test_unusable_cache_folder_is_one_line(tmp_path, monkeypatch):
    """VIDAX_CACHE_DIR / VIDAX_COMPILE_CACHE naming a file, a path under a file or a folder that
    cannot be created (under /proc) is one error line naming the variable, exit 2: both where the
    compile cache is set up and where the embedded checkpoint is built (and in the Python API)."""
    from vidax.errors import SetupError

    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    args = ("generate", "-p", "x", "--num-frames", "1", "--num-inference-steps", "1", "-o", str(tmp_path / "v.npy"))
    cases = [  # (env, what the line names)
        (dict(VIDAX_CACHE_DIR=str(afile)), f"VIDAX_CACHE_DIR='{afile}' cannot be used"),
        (dict(VIDAX_CACHE_DIR="/proc/vidax-cache"), "VIDAX_CACHE_DIR='/proc/vidax-cache' cannot be used"),
        (
            dict(VIDAX_COMPILE_CACHE=str(afile)),
            f"VIDAX_COMPILE_CACHE='{afile}' cannot be used: cannot write into '{afile}' (it is a file, not a folder)",
        ),
        # Compile cache off: the embedded checkpoint's build names the variable.
        (dict(VIDAX_CACHE_DIR=str(afile), VIDAX_COMPILE_CACHE="0"), f"cannot write into '{afile}' (it is a file"),
    ]
    for extra, want in cases:
        env = _env(tmp_path)
        env.update(extra)
        r = subprocess.run([sys.executable, "-m", "vidax", *args], capture_output=True, text=True, env=env, timeout=300)
        lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("Using the embedded default")]
        assert r.returncode == 2 and len(lines) == 1 and want in lines[0], (extra, r.stderr)
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(afile / "sub"))
    with pytest.raises(SetupError, match=r"VIDAX_CACHE_DIR=.* \(a folder on its path is a file\); set VIDAX_CACHE_DIR"):
        import vidax

        vidax.load_pipeline("vidax/tiny-random-wan")
