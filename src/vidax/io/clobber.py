"""Refusing an output that would overwrite one of the run's own input files (``vidax generate
--video in.mp4 -o in.mp4``), checked before any weight is read."""

from __future__ import annotations

import os
from collections.abc import Iterable

from vidax.errors import Arg, InputError
from vidax.io.video import audio_path


def _same(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file: ``os.path.samefile`` where both exist (hard links,
    symlinks, bind mounts), else their resolved paths."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def written_files(path: str, audio: bool) -> list[str]:
    """The files writing the output ``path`` creates or replaces: ``path`` itself and, with
    ``audio``, the ``.wav`` beside an ``.npy`` / PNG-folder output."""
    wav = audio_path(path) if audio else None
    return [path] + ([wav] if wav is not None else [])


def check_inputs_kept(outputs: Iterable[str], inputs: Iterable[tuple[str, str]], audio: bool = False) -> None:
    """Refuse when writing any of ``outputs`` would replace an input file.

    Args:
        outputs: the output paths (``--output`` and its indexed names for several videos).
        inputs: ``(keyword, path)`` of each input file (``("video", "in.mp4")``,
            ``("lora", "style.safetensors")``, ...); the keyword is spelled as its flag on the
            command line.
        audio: the outputs carry sound (a ``.wav`` beside an ``.npy`` / PNG-folder output).

    Raises:
        InputError: one line naming ``--output``, the input's flag and the path.
    """
    inputs = [(k, os.fspath(p)) for k, p in inputs]
    for out in outputs:
        for written in written_files(os.fspath(out), audio):
            folder = os.path.isdir(written)  # a PNG frame folder: its frames are written inside
            for name, path in inputs:
                if _same(written, path) or (folder and _same(written, os.path.dirname(os.path.abspath(path)))):
                    what = (
                        " is the frame folder holding "
                        if folder
                        else " is the same file as "
                        if written == os.fspath(out)
                        else f" writes {written!r} beside it, the same file as "
                    )
                    raise InputError(
                        Arg("output", os.fspath(out)),
                        what,
                        Arg(name, path),
                        "; writing it would destroy that input (with or without ",
                        Arg("overwrite", python="overwrite=True"),
                        "); give another output name",
                    )
