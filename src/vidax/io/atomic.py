"""Publishing a finished temporary file under its final name."""

from __future__ import annotations

import os


def publish(tmp: str, path: str) -> None:
    """Give ``tmp`` (a file or folder) the permissions a newly created one gets under the
    current umask (``tempfile.mkstemp`` / ``mkdtemp`` create them private), then rename it to
    ``path`` atomically."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, (0o777 if os.path.isdir(tmp) else 0o666) & ~umask)
    os.replace(tmp, path)
