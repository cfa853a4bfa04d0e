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
    env["PYTHONPATH"] = os.pathsep.join([str(clone / "src"), str(clone)])  # the copy's vidax, not this checkout's
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
    assert res.returncode == 0, f"collection failed in a clone with nothing beside it:\n{tail}"
    last = tail.splitlines()[-1] if tail else ""
    assert "tests collected" in last and "error" not in last, tail


def test_import_from_the_folder_above_a_clone_named_vidax(tmp_path):
    """From the folder above a clone named vidax (what ``git clone`` makes), ``import vidax`` is
    vidax, not the clone's folder as a namespace package (``no attribute 'load_pipeline'``): with
    the src/ layout setuptools' editable install is a path entry naming src/ (a .pth line), where
    Python's import finds the regular package ahead of the namespace portion the clone's folder
    is; the flat layout's editable install was a finder that came after it. The editable wheel of
    a copy is built, its .pth put on a site folder, and vidax imported from the folder above."""
    import zipfile

    clone = tmp_path / "vidax"
    for f in project_files():
        if f in ("pyproject.toml", "README.md") or f.startswith("src/"):
            (clone / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, clone / f)
    code = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "wheel")], cwd=clone, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / "wheel" / r.stdout.split()[-1]) as wheel:
        wheel.extractall(site, [n for n in wheel.namelist() if "/" not in n])  # the .pth (and a finder, if any)
    code = "import site, sys; site.addsitedir(sys.argv[1]); import vidax; print(vidax.__file__, vidax.__all__[-1])"
    r = subprocess.run(
        [sys.executable, "-S", "-c", code, str(site)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=300,
    )
    assert r.stdout.split() == [str(clone / "src" / "vidax" / "__init__.py"), "load_pipeline"], r.stdout + r.stderr
