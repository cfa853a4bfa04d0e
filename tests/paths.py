"""Where the released checkpoint configs are: ``shared/reference_configs`` beside the repo."""

import os
from pathlib import Path


def _reference_configs() -> str:
    env = os.environ.get("VIDAX_REFERENCE_CONFIGS")
    if env:
        return env
    repo = Path(__file__).resolve().parent.parent
    for candidate in (repo.parent / "shared" / "reference_configs", repo / "shared" / "reference_configs"):
        if candidate.is_dir():
            return str(candidate)
    # Full-size tests must not pass vacuously on an empty glob: fail at collection instead.
    raise RuntimeError(
        f"shared/reference_configs not found beside {repo}; set VIDAX_REFERENCE_CONFIGS to its path"
    )


REFERENCE_CONFIGS = _reference_configs()
