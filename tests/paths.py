"""Where the released checkpoints' configs are: ``reference_configs/`` in this repository.

They are config facts of released checkpoints (``reference_configs/SOURCES.md`` records where
each file comes from), kept in the repository so that a fresh clone runs its tests with nothing
beside it. ``VIDAX_REFERENCE_CONFIGS`` points the tests at another copy (e.g. a newer one).
"""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _reference_configs() -> str:
    folder = os.environ.get("VIDAX_REFERENCE_CONFIGS") or str(REPO / "reference_configs")
    # Full-size tests must not pass vacuously on an empty glob: fail at collection instead.
    if not os.path.isfile(os.path.join(folder, "SOURCES.md")):
        raise RuntimeError(f"{folder} holds no reference configs (SOURCES.md missing)")
    return folder


REFERENCE_CONFIGS = _reference_configs()


def project_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore, relative to :data:`REPO` (what a
    clone of this work holds)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    return [f for f in out.stdout.decode().split("\0") if f and os.path.isfile(REPO / f)]
