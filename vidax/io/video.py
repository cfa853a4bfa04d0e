"""Writing generated videos: mp4 (PyAV/libx264), ``.npy``, or a folder of PNG frames.

Every writer is atomic: the data goes to a temporary name beside the target, which is renamed
into place only when complete, so an interrupted run never leaves a truncated file.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from vidax.errors import InputError
from vidax.io.atomic import publish

FORMATS = {".mp4": "mp4", ".npy": "npy", "": "png"}


def output_format(path: str | os.PathLike) -> str:
    """``"mp4"``, ``"npy"`` or ``"png"`` (a path without extension, or ending in ``/``, is a
    folder of PNG frames). Raises InputError for another extension."""
    path = os.fspath(path)
    ext = "" if path.endswith(os.sep) else os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise InputError(
            f"output={path!r}: unknown extension {ext!r}; use .mp4, .npy, or a folder path "
            "(no extension) for PNG frames"
        )
    return FORMATS[ext]


def check_output_path(path: str | os.PathLike) -> str:
    """Validate before any work is done that ``path`` can be written; returns its format.

    Raises:
        InputError: an empty path, unknown extension, a parent that is a file, a missing parent
            folder, or a parent that is not writable.
    """
    path = os.fspath(path)
    if not path.strip():
        raise InputError(f"output={path!r} is empty; give a file (*.mp4, *.npy) or a folder for PNG frames")
    fmt = output_format(path)
    parent = os.path.dirname(os.path.abspath(path.rstrip(os.sep))) or "."
    if not os.path.isdir(parent):
        existing = parent
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise InputError(f"output={path!r}: {existing!r} is a file, not a folder")
        raise InputError(f"output={path!r}: folder {parent!r} does not exist")
    try:  # a real file, not os.access: root passes os.access on read-only filesystems (/sys)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".vidax-probe-"):
            pass
    except OSError as e:
        raise InputError(f"output={path!r}: folder {parent!r} is not writable ({e.strerror})") from None
    if os.path.isdir(path.rstrip(os.sep)) and fmt != "png":
        raise InputError(f"output={path!r} is an existing folder; give a file name")
    return fmt


def to_uint8(frames: np.ndarray) -> np.ndarray:
    """float frames in [0, 1] (F, H, W, 3) -> uint8, rounding as diffusers' ``numpy_to_pil``."""
    frames = np.asarray(frames)
    if frames.dtype == np.uint8:
        return frames
    return (np.clip(frames, 0.0, 1.0) * 255).round().astype(np.uint8)


def write_video(frames: np.ndarray, path: str | os.PathLike, fps: int = 16) -> str:
    """Write one video atomically and return the path written.

    Args:
        frames: (F, H, W, 3) float32 in [0, 1] or uint8.
        path: ``*.mp4`` (H.264, yuv420p, needs even H and W), ``*.npy`` (the float frames as
            given), or a folder that receives ``frame_00000.png`` ...
        fps: frames per second of the mp4 (> 0).

    Raises:
        InputError: bad frame array, fps, or output path.
    """
    path = os.fspath(path)
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise InputError(f"frames must have shape (F, H, W, 3), got {frames.shape}")
    fmt = check_output_path(path)
    if fmt == "npy":
        _atomic_file(path, lambda tmp: np.save(tmp, frames, allow_pickle=False))
    elif fmt == "mp4":
        if fps <= 0:
            raise InputError(f"fps must be > 0, got {fps}")
        _atomic_file(path, lambda tmp: _write_mp4(to_uint8(frames), tmp, fps))
    else:
        _write_png_folder(to_uint8(frames), path.rstrip(os.sep))
    return path


def save_unwritten(frames: np.ndarray, path: str | os.PathLike) -> str:
    """Keep frames whose output could not be written: ``frames`` saved atomically as ``.npy``
    (as given, e.g. float32 (B, F, H, W, 3) in [0, 1]) beside ``path``, named
    ``<stem>.unwritten.npy`` (``<stem>.unwritten-1.npy``, ... when taken), else in the current
    folder, else in the temporary folder; returns the file written.

    Raises:
        OSError: no folder of the three could take the file (the last error).
    """
    path = os.path.abspath(os.fspath(path).rstrip(os.sep) or "vidax-output")
    stem = os.path.splitext(os.path.basename(path))[0] or "vidax-output"
    folders = [os.path.dirname(path)]
    try:
        folders.append(os.getcwd())
    except OSError:  # the current folder was removed meanwhile
        pass
    folders.append(tempfile.gettempdir())
    error: OSError | None = None
    for folder in dict.fromkeys(folders):
        for i in range(100):
            target = os.path.join(folder, f"{stem}.unwritten{'' if i == 0 else f'-{i}'}.npy")
            if not os.path.exists(target):
                break
        try:
            _atomic_file(target, lambda tmp: np.save(tmp, np.asarray(frames), allow_pickle=False))
            return target
        except OSError as e:
            error = e
    raise error


def _atomic_file(path: str, write) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".vidax-", suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_mp4(frames: np.ndarray, path: str, fps: int) -> None:
    import av

    _, h, w, _ = frames.shape
    if h % 2 or w % 2:
        raise InputError(f"mp4 (yuv420p) needs even height and width, got {h}x{w}; use .npy or PNGs")
    with av.open(path, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = w, h
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "18"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_png_folder(frames: np.ndarray, path: str) -> None:
    from PIL import Image

    parent = os.path.dirname(os.path.abspath(path))
    tmp = tempfile.mkdtemp(dir=parent, prefix=".vidax-")
    try:
        for i, frame in enumerate(frames):
            Image.fromarray(frame).save(os.path.join(tmp, f"frame_{i:05d}.png"))
        if os.path.isdir(path):
            shutil.rmtree(path)
        publish(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_video(path: str | os.PathLike) -> np.ndarray:
    """Decode an mp4 to uint8 (F, H, W, 3) (used by tests and benchmarks)."""
    import av

    with av.open(os.fspath(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
