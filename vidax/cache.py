"""Where vidax keeps what it builds once per machine (the embedded checkpoint, converted
tokenizers): ``$VIDAX_CACHE_DIR``, else the platform's user cache folder for vidax."""

from __future__ import annotations

import os


def cache_dir() -> str:
    """``$VIDAX_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("vidax")``."""
    import platformdirs

    return os.environ.get("VIDAX_CACHE_DIR") or platformdirs.user_cache_dir("vidax")
