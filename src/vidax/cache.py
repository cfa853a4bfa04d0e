"""Where vidax keeps what it builds once per machine (the embedded checkpoint, converted
tokenizers, JAX's compilation cache): ``$VIDAX_CACHE_DIR``, else the platform's user cache folder
for vidax."""

from __future__ import annotations

import errno
import os
import tempfile

from vidax.errors import SetupError

ENV = "VIDAX_CACHE_DIR"

_REASONS = {
    errno.EEXIST: "it is a file, not a folder",
    errno.ENOTDIR: "a folder on its path is a file",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOENT: "it cannot be created there",
    errno.ENOSPC: "no space left on the device",
}


def cache_dir() -> str:
    """``$VIDAX_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("vidax")``."""
    import platformdirs

    return os.environ.get(ENV) or platformdirs.user_cache_dir("vidax")


def usable_folder(path: str, setting: str, fix: str) -> str:
    """``path``, created if needed, after checking that a file can be made in it.

    Args:
        path: the folder. setting: what chose it, for the error (``"VIDAX_CACHE_DIR='/x'"``).
        fix: what to do, for the error (``"set VIDAX_CACHE_DIR to a writable folder"``).

    Raises:
        SetupError: ``path`` or a folder above it is a file, or it cannot be created or written
            (one line: ``setting``, the folder, why, ``fix``).
    """
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        reason = _REASONS.get(e.errno, e.strerror or str(e))
        raise SetupError(f"{setting} cannot be used: cannot write into {path!r} ({reason}); {fix}") from None
    return path


def cache_subdir(*parts: str) -> str:
    """``<cache_dir()>/<parts...>``, created and checked writable (:func:`usable_folder`).

    Raises:
        SetupError: the folder cannot be used; names ``VIDAX_CACHE_DIR`` and its value (or the
            platform's default folder) and says to set ``VIDAX_CACHE_DIR`` to a writable folder.
    """
    root = cache_dir()
    setting = f"{ENV}={os.environ[ENV]!r}" if os.environ.get(ENV) else f"the user cache folder {root!r}"
    return usable_folder(os.path.join(root, *parts), setting, f"set {ENV} to a writable folder")
