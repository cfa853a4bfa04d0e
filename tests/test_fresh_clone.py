"""A user's clone has nothing beside it: the test suite must collect from the repository alone."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.paths import REPO, project_files


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="runs on a git checkout of vidax")
def test_suite_collects_with_nothing_beside_the_repo(tmp_path):
    """Copies the project into an empty folder (no ``../shared``, no VIDAX_REFERENCE_CONFIGS) and
    collects the whole suite there: a test that reads a file outside the repository fails here."""
    clone = tmp_path / "vidax"
    for f in project_files():
        (clone / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, clone / f)
    env = {k: v for k, v in os.environ.items() if k != "VIDAX_REFERENCE_CONFIGS"}
    env["PYTHONPATH"] = str(clone)  # the copy's vidax, not this checkout's editable install
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
    assert res.returncode == 0, f"collection failed in a clone with nothing beside it:\n{tail}"
    last = tail.splitlines()[-1] if tail else ""
    assert "tests collected" in last and "error" not in last, tail
