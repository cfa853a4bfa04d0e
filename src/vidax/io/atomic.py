"""Publishing a finished temporary file under its final name."""

from __future__ import annotations

import os


def publish(tmp: str, path: str, replace: bool = True) -> None:
    """Give ``tmp`` (a file or folder) the permissions a newly created one gets under the
    current umask (``tempfile.mkstemp`` / ``mkdtemp`` create them private), then rename it to
    ``path`` atomically. ``replace=False`` (a file): never replace a ``path`` that exists by
    then (another process's, created since it was checked): ``tmp`` is linked to ``path``, which
    fails if it exists.

    Raises:
        FileExistsError: ``replace=False`` and ``path`` exists (``tmp`` is left as it was).
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, (0o777 if os.path.isdir(tmp) else 0o666) & ~umask)
    if replace or os.path.isdir(tmp):
        os.replace(tmp, path)
        return
    os.link(tmp, path)
    os.unlink(tmp)
