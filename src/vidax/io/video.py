"""Writing generated videos: mp4 (PyAV/libx264, with an AAC audio track for a model that makes
sound), ``.npy``, or a folder of PNG frames (a ``.wav`` of the sound beside those two), or the
sound alone as ``.wav`` (16-bit PCM, the stdlib ``wave`` module); a one-frame video (text-to-image)
also as an image file, ``.png`` / ``.jpg`` / ``.jpeg`` / ``.webp`` (PIL; several frames refused).

Every writer is atomic: the data goes to a temporary name beside the target, which is renamed
into place only when complete, so an interrupted run never leaves a truncated file.

An output never removes anything vidax did not write: an existing regular file named as an
mp4 / npy output is replaced (atomically, through a symlink to it as ``cp`` writes); PNG frames
go only into a new or empty folder, or one holding nothing but vidax's own ``frame_NNNNN.png``
files (replaced only with ``overwrite=True``, stale frames of the earlier run removed); a
folder is never replaced by a file, nor a file by a folder; a device, FIFO or socket is refused,
except ``os.devnull`` (``/dev/null``), which keeps nothing: the video is not written.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile

import numpy as np

from vidax.errors import Arg, InputError
from vidax.io.atomic import publish

logger = logging.getLogger("vidax.io")

FORMATS = {
    ".mp4": "mp4",
    ".npy": "npy",
    ".wav": "wav",
    "": "png",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".webp": "image",
}
#: PIL's format of each image suffix (the ``"image"`` format: one frame).
IMAGE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}
#: The names of the files a PNG frame folder holds (``frame_00000.png`` ...).
FRAME_FILE = re.compile(r"frame_\d{5,}\.png")
#: The format :func:`check_output_path` returns for ``os.devnull``: nothing is written.
DISCARD = "null"


def output_format(path: str | os.PathLike) -> str:
    """``"mp4"``, ``"npy"``, ``"wav"`` (the sound alone), ``"png"`` (a path without extension,
    or ending in ``/``, is a folder of PNG frames) or ``"image"`` (``.png`` / ``.jpg`` / ``.jpeg``
    / ``.webp``: one frame). Raises InputError for another extension."""
    path = os.fspath(path)
    ext = "" if path.endswith(os.sep) else os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise InputError(
            Arg("output", path),
            f": unknown extension {ext!r}; use .mp4, .npy, .wav (the sound alone), .png / .jpg / "
            ".webp (one frame), or a folder path (no extension) for PNG frames",
        )
    return FORMATS[ext]


def output_paths(path: str | os.PathLike, count: int) -> list[str]:
    """The outputs of ``count`` videos: ``[path]`` for one, else ``<stem>_<i><ext>`` for each
    (``out.mp4`` -> ``out_0.mp4``, ``out_1.mp4``; a folder ``frames/`` -> ``frames_0``, ...; the
    absolute path's name for ``.``, ``..`` and ``/``; ``os.devnull`` itself each time)."""
    path = os.fspath(path)
    if count == 1 or _is_devnull_path(path):
        return [path] * count
    name = path.rstrip(os.sep) or os.sep
    if os.path.basename(name) in ("", ".", ".."):
        name = os.path.abspath(name)
    stem, ext = os.path.splitext(name)
    return [f"{stem}_{i}{ext}" for i in range(count)]


def free_output_name(path: str, count: int) -> str:
    """``path`` where none of its ``count`` videos' files (:func:`output_paths`) exists yet, else
    the first ``<stem>-<n><ext>`` (n = 1, 2, ...) whose files are all free: ``vidax generate``'s
    default output (``vidax-output.mp4`` -> ``vidax-output-1.mp4``) never replaces an earlier run's
    video. A name given with ``--output`` is the user's and is not changed."""
    stem, ext = os.path.splitext(path)
    n = 0
    while True:
        name = path if n == 0 else f"{stem}-{n}{ext}"
        if not any(os.path.lexists(p) for p in output_paths(name, count)):
            return name
        n += 1


def audio_path(path: str | os.PathLike) -> str | None:
    """Where the sound of an ``.npy``, PNG-folder or image output goes: a ``.wav`` beside it
    (``out.npy`` -> ``out.wav``, ``frames/`` -> ``frames.wav``, ``out.png`` -> ``out.wav``); None
    for the formats that hold the sound themselves (mp4, wav) and for ``os.devnull``."""
    path = os.fspath(path)
    if _is_devnull_path(path) or output_format(path) not in ("npy", "png", "image"):
        return None
    name = path.rstrip(os.sep) or os.sep
    if os.path.basename(name) in ("", ".", ".."):
        name = os.path.abspath(name)
    return os.path.splitext(name)[0] + ".wav"


#: How the output checks name leaving the sound out (``--no-audio`` on the command line).
_NO_AUDIO = Arg("decode_audio", python="decode_audio=False")


def check_output_path(path: str | os.PathLike, overwrite: bool = False, audio: bool = False) -> str:
    """Validate before any work is done that ``path`` can be written without removing anything
    vidax did not write; returns its format (``"mp4"``, ``"npy"``, ``"png"``, or
    :data:`DISCARD` for ``os.devnull``: nothing will be written).

    With ``audio`` (the video has sound), the ``.wav`` an ``.npy`` / PNG-folder output gets
    beside it (:func:`audio_path`) is checked too: it is a file vidax writes but the user did not
    name, so an existing one is replaced only with ``overwrite``.

    Raises:
        InputError: an empty path, ``-`` (standard output), unknown extension, a parent that is a file, a missing parent
            folder, a folder that is not writable, an existing folder named as a file, an
            existing file, device, FIFO or socket named as a frame folder, a device, FIFO or
            socket other than ``os.devnull``, a frame folder holding anything but vidax's frame
            files, or holding frame files without ``overwrite``; the sound's ``.wav`` beside it
            existing without ``overwrite``, or not a regular file.
    """
    fmt = _check_output_path(path, overwrite)
    wav = audio_path(path) if audio else None
    if wav is not None and os.path.lexists(wav):
        if os.path.isdir(wav) or (os.path.exists(wav) and not os.path.isfile(wav)):
            raise InputError(
                Arg("output", os.fspath(path)),
                f": its sound goes to {wav!r} beside it, which is not a regular file; give another output name, or ",
                _NO_AUDIO,
            )
        if not overwrite:
            raise InputError(
                Arg("output", os.fspath(path)),
                f": its sound goes to {wav!r} beside it, which exists; pass ",
                Arg("overwrite", python="overwrite=True"),
                " to replace it, give another output name, or ",
                _NO_AUDIO,
            )
    return fmt


def _check_output_path(path: str | os.PathLike, overwrite: bool) -> str:
    path = os.fspath(path)
    if not path.strip():
        raise InputError(Arg("output", path), " is empty; give a file (*.mp4, *.npy) or a folder for PNG frames")
    if path == "-":  # the shell's "standard output": a folder of frames named '-' is not what was meant
        raise InputError(
            Arg("output", path),
            ": vidax does not write the video to standard output; give a file (*.mp4, *.npy) or a folder for "
            "PNG frames",
        )
    fmt = output_format(path)
    target = _target(path)
    try:
        st = os.stat(target)
    except OSError:  # nothing there yet (or a parent is not a folder: below)
        st = None
    if st is None and os.path.islink(path.rstrip(os.sep)):
        # A link whose target has no path of its own (/dev/stdout onto a pipe: "pipe:[123]")
        # still stats through the link: a FIFO or socket, refused below by its kind.
        try:
            st = os.stat(path)
        except OSError:
            st = None
    if st is not None and _is_devnull(st):
        return DISCARD
    if st is not None and stat.S_ISDIR(st.st_mode):
        if fmt != "png":
            raise InputError(Arg("output", path), " is an existing folder; give a file name")
        _check_frame_folder(path, target, overwrite)
        _probe(path, target)  # the frames are written inside it
        return fmt
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(
            Arg("output", path),
            f" is a {_kind(st)}, not a file or folder; give *.mp4, *.npy, a folder "
            f"for PNG frames, or {os.devnull} to keep nothing",
        )
    if st is not None and fmt == "png":
        raise InputError(
            Arg("output", path),
            " is an existing file whose name has no extension (a name without one "
            "is a folder for PNG frames); give *.mp4, *.npy, an image name for one frame, or a new or "
            "empty folder",
        )
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        existing = parent
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise InputError(Arg("output", path), f": {existing!r} is a file, not a folder")
        raise InputError(Arg("output", path), f": folder {parent!r} does not exist")
    _probe(path, parent)
    return fmt


def _target(path: str) -> str:
    """What ``path`` names on disk: trailing separators dropped (``/`` stays), every symlink
    resolved, so a link is written through (as ``cp`` does) and never replaced itself."""
    return os.path.realpath(path.rstrip(os.sep) or os.sep)


def _is_devnull(st: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev


def _is_devnull_path(path: str) -> bool:
    try:
        return _is_devnull(os.stat(_target(path)))
    except OSError:
        return False


def _kind(st: os.stat_result) -> str:
    mode = st.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "special file"


def _probe(path: str, folder: str) -> None:
    try:  # a real file, not os.access: root passes os.access on read-only filesystems (/sys)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".vidax-probe-"):
            pass
    except OSError as e:
        raise InputError(Arg("output", path), f": folder {folder!r} is not writable ({e.strerror})") from None


#: The first bytes of every PNG file.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _is_png(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE
    except OSError:
        return False


def _frame_files(folder: str) -> tuple[list[str], list[str]]:
    """(vidax's frame files, everything else) in ``folder``, sorted; a symlink, a folder named
    like a frame or a file so named that is not a PNG is not a frame file."""
    frames, others = [], []
    for name in sorted(os.listdir(folder)):
        full = os.path.join(folder, name)
        mine = FRAME_FILE.fullmatch(name) and os.path.isfile(full) and not os.path.islink(full) and _is_png(full)
        (frames if mine else others).append(name)
    return frames, others


def _check_frame_folder(path: str, folder: str, overwrite: bool) -> None:
    try:
        frames, others = _frame_files(folder)
    except OSError as e:
        raise InputError(Arg("output", path), f": folder {folder!r} cannot be listed ({e.strerror})") from None
    if others:
        shown = [n + ("/" if os.path.isdir(os.path.join(folder, n)) else "") for n in others[:3]]
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        raise InputError(
            Arg("output", path),
            f" is a folder holding files vidax did not write ({', '.join(shown)}{more}); PNG frames "
            "go only into a new or empty folder, or one holding only vidax's frame_NNNNN.png files: give another "
            "folder, or a *.mp4 / *.npy file",
        )
    if frames and not overwrite:
        raise InputError(
            Arg("output", path),
            f" already holds {len(frames)} frame file(s) of an earlier run ({frames[0]} ...); pass ",
            Arg("overwrite", python="overwrite=True"),
            " to replace them, or give another folder",
        )


def to_uint8(frames: np.ndarray) -> np.ndarray:
    """float frames in [0, 1] (F, H, W, 3) -> uint8, rounding as diffusers' ``numpy_to_pil``."""
    frames = np.asarray(frames)
    if frames.dtype == np.uint8:
        return frames
    return (np.clip(frames, 0.0, 1.0) * 255).round().astype(np.uint8)


def check_image_frames(path: str | os.PathLike, frames: int | None, what: str = "the video") -> None:
    """Refuse an image output (``.png`` / ``.jpg`` / ``.webp``) for anything but one frame.

    Args:
        path: the output. frames: the frame count (None: not known before the run, a length the
            model predicts). what: how the message names the frames' source.

    Raises:
        InputError: one line naming ``--output`` / ``output=``, the count and what to give.
    """
    path = os.fspath(path)
    if frames != 1 and not _is_devnull_path(path) and output_format(path) == "image":
        count = "a length the model predicts" if frames is None else f"{frames} frames"
        raise InputError(
            Arg("output", path),
            f" is an image: it holds one frame, but {what} has {count}; give "
            "*.mp4, *.npy or a folder for PNG frames, or one frame (",
            Arg("num_frames", 1),
            ")",
        )


def write_video(
    frames: np.ndarray,
    path: str | os.PathLike,
    fps: int = 16,
    *,
    overwrite: bool = False,
    audio: np.ndarray | None = None,
    sample_rate: int | None = None,
) -> str:
    """Write one video atomically and return the path written.

    Args:
        frames: (F, H, W, 3) float32 in [0, 1] or uint8.
        path: ``*.mp4`` (H.264, yuv420p, needs even H and W), ``*.npy`` (the float frames as
            given), or a folder that receives ``frame_00000.png`` ... (a new or empty folder, or
            one holding only frame files of an earlier run, with ``overwrite``); an existing
            regular file (or a symlink to one) is replaced atomically; ``os.devnull`` keeps
            nothing (the video is not written). See :func:`check_output_path`. ``*.wav`` takes
            the sound alone: :func:`write_audio`. ``*.png`` / ``*.jpg`` / ``*.jpeg`` / ``*.webp``
            take a video of one frame as an image (PIL's defaults: JPEG quality 75, lossy WebP
            quality 80).
        fps: frames per second of the mp4 (> 0).
        overwrite: replace the frame files a PNG folder already holds (every earlier frame is
            removed, also those beyond the new video's length), and the ``.wav`` beside it.
        audio: the video's sound, float32 (channels, samples) in [-1, 1] (one video of a
            pipeline's ``out.audio``), 1 or 2 channels; None: a silent video. The mp4 gets it as
            an AAC track starting with the first frame; ``.npy``, images and PNG folders get it as a
            16-bit PCM ``.wav`` beside them (:func:`audio_path`), written after the video.
        sample_rate: samples per second of ``audio`` (``out.audio_sample_rate``).

    Raises:
        InputError: bad frame array, fps, audio, or output path (checked before anything is
            written); an image output for more than one frame.
    """
    path = os.fspath(path)
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise InputError(f"frames must have shape (F, H, W, 3), got {frames.shape}")
    check_image_frames(path, frames.shape[0])
    if audio is not None:
        audio = _check_audio(audio, sample_rate)
    fmt = check_output_path(path, overwrite, audio=audio is not None)
    if fmt == "wav":
        raise InputError(Arg("output", path), " is a .wav: write the sound alone with write_audio")
    if fmt == "mp4" and fps <= 0:
        raise InputError(Arg("fps"), f" must be > 0, got {fps}")
    target = _target(path)
    # without overwrite a file that appeared since the check above (another run's) is not replaced
    replace = overwrite or os.path.lexists(target)
    if fmt == "npy":
        _atomic_file(target, lambda tmp: np.save(tmp, frames, allow_pickle=False), replace)
    elif fmt == "mp4":
        _atomic_file(target, lambda tmp: _write_mp4(to_uint8(frames), tmp, fps, audio, sample_rate), replace)
    elif fmt == "png":
        _write_png_folder(to_uint8(frames), target)
    elif fmt == "image":
        _atomic_file(target, lambda tmp: _write_image(to_uint8(frames)[0], tmp, os.path.splitext(path)[1].lower()))
    wav = audio_path(path) if audio is not None else None
    if wav is not None:
        _atomic_file(_target(wav), lambda tmp: _write_wav(audio, tmp, sample_rate))
    return path


def write_audio(audio: np.ndarray, path: str | os.PathLike, sample_rate: int) -> str:
    """Write a sound alone atomically as a 16-bit PCM ``.wav`` (an existing regular file, or a
    symlink to one, is replaced; ``os.devnull`` keeps nothing) and return the path written.

    Args:
        audio: float32 (channels, samples) in [-1, 1] (one video's ``out.audio``); values
            beyond are clipped, then rounded to 16 bits.
        path: ``*.wav``.
        sample_rate: samples per second (``out.audio_sample_rate``).

    Raises:
        InputError: bad audio array or sample rate, or an output path that is not a writable
            ``.wav`` (checked before anything is written).
    """
    path = os.fspath(path)
    audio = _check_audio(audio, sample_rate)
    fmt = check_output_path(path)
    if fmt not in ("wav", DISCARD):
        raise InputError(Arg("output", path), ": write_audio writes a .wav file")
    if fmt == "wav":
        _atomic_file(_target(path), lambda tmp: _write_wav(audio, tmp, sample_rate))
    return path


def _check_audio(audio: np.ndarray, sample_rate: int | None) -> np.ndarray:
    audio = np.asarray(audio, np.float32)
    if audio.ndim != 2 or audio.shape[0] not in (1, 2) or audio.shape[1] == 0:
        raise InputError(f"audio must have shape (channels, samples) with 1 or 2 channels, got {audio.shape}")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise InputError(f"sample_rate must be a positive integer (samples per second), got {sample_rate!r}")
    return audio


def _pcm16(audio: np.ndarray) -> np.ndarray:
    """float (channels, samples) in [-1, 1] -> int16 (samples, channels), as diffusers' encode_video."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16).T


def _write_wav(audio: np.ndarray, path: str, sample_rate: int) -> None:
    import wave

    with wave.open(path, "wb") as f:
        f.setnchannels(audio.shape[0])
        f.setsampwidth(2)
        f.setframerate(int(sample_rate))
        f.writeframes(np.ascontiguousarray(_pcm16(audio)).astype("<i2").tobytes())


def read_audio(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``(float32 (channels, samples) in [-1, 1], sample rate)`` of a 16-bit PCM ``.wav`` (used
    by tests)."""
    import wave

    with wave.open(os.fspath(path), "rb") as f:
        channels, rate = f.getnchannels(), f.getframerate()
        data = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    return (data.reshape(-1, channels).T.astype(np.float32) / 32767.0), rate


def save_unwritten(frames: np.ndarray, path: str | os.PathLike, elsewhere: bool = True) -> str:
    """Keep frames whose output could not be written: ``frames`` saved atomically as ``.npy``
    (as given, e.g. float32 (B, F, H, W, 3) in [0, 1]) beside ``path``, named
    ``<stem>.unwritten.npy`` (``<stem>.unwritten-1.npy``, ... up to ``-99`` when taken: an
    existing name, even a dangling symlink, is never replaced), else (``elsewhere``) in the
    current folder, else in the temporary folder; returns the file written.

    Raises:
        OSError: no folder tried could take the file (the last error).
    """
    path = os.path.abspath(os.fspath(path).rstrip(os.sep) or "vidax-output")
    stem = os.path.splitext(os.path.basename(path))[0] or "vidax-output"
    folders = [os.path.dirname(path)]
    if elsewhere:
        try:
            folders.append(os.getcwd())
        except OSError:  # the current folder was removed meanwhile
            pass
        folders.append(tempfile.gettempdir())
    error: OSError | None = None
    for folder in dict.fromkeys(folders):
        free = (os.path.join(folder, f"{stem}.unwritten{'' if i == 0 else f'-{i}'}.npy") for i in range(100))
        target = next((t for t in free if not os.path.lexists(t)), None)
        if target is None:
            error = FileExistsError(17, "every name up to -99 is taken", os.path.join(folder, f"{stem}.unwritten.npy"))
            continue
        try:
            _atomic_file(target, lambda tmp: np.save(tmp, np.asarray(frames), allow_pickle=False))
            return target
        except OSError as e:
            error = e
    raise error


def _atomic_file(path: str, write, replace: bool = True) -> None:
    """Write ``path`` through ``write(tmp)`` on a temporary file beside it, published atomically;
    ``replace=False``: a ``path`` that another process created meanwhile is kept (InputError)."""
    directory = os.path.dirname(os.path.abspath(path))
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".vidax-", suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        try:
            publish(tmp, path, replace)
        except FileExistsError:
            raise InputError(
                Arg("output", path),
                " was created by another process while this one was written; it was not replaced",
            ) from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_image(frame: np.ndarray, path: str, suffix: str) -> None:
    """One uint8 (H, W, 3) frame as the image format of ``suffix`` (:data:`IMAGE_FORMATS`)."""
    from PIL import Image

    Image.fromarray(frame).save(path, format=IMAGE_FORMATS[suffix])


def _write_mp4(
    frames: np.ndarray, path: str, fps: int, audio: np.ndarray | None = None, sample_rate: int | None = None
) -> None:
    import av

    _, h, w, _ = frames.shape
    if h % 2 or w % 2:
        raise InputError(f"mp4 (yuv420p) needs even height and width, got {h}x{w}; use .npy or PNGs")
    with av.open(path, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = w, h
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "18"}
        rate = None if audio is None else aac_sample_rate(sample_rate)
        sound = None if audio is None else _audio_stream(container, audio.shape[0], rate)
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        if sound is not None:
            _encode_audio(container, sound, audio, sample_rate)


#: The sample rates AAC encodes (its MPEG-4 sampling-frequency table), in Hz.
AAC_SAMPLE_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)


def aac_sample_rate(sample_rate: int) -> int:
    """The rate the mp4's AAC track gets for sound at ``sample_rate`` Hz: itself where AAC
    encodes it, else the nearest rate of :data:`AAC_SAMPLE_RATES` (Cosmos 3's tiny test sound
    tokenizer makes 240 Hz: 7350 Hz), which :func:`_encode_audio` resamples to, saying so in
    a ``vidax.io`` log line."""
    sample_rate = int(sample_rate)
    if sample_rate in AAC_SAMPLE_RATES:
        return sample_rate
    rate = min(AAC_SAMPLE_RATES, key=lambda r: abs(r - sample_rate))
    logger.warning(
        "the sound's %d Hz is not a rate AAC encodes: the mp4's sound track is resampled to %d Hz "
        "(.npy / .wav outputs keep %d Hz)",
        sample_rate,
        rate,
        sample_rate,
    )
    return rate


def _audio_stream(container, channels: int, sample_rate: int):
    """An AAC stream at ``sample_rate`` with the sound's own channels (as diffusers'
    ``encode_video``, which writes stereo; mono stays mono here)."""
    from fractions import Fraction

    stream = container.add_stream("aac", rate=int(sample_rate))
    stream.codec_context.layout = "stereo" if channels == 2 else "mono"
    stream.codec_context.time_base = Fraction(1, int(sample_rate))
    return stream


def _encode_audio(container, stream, audio: np.ndarray, sample_rate: int) -> None:
    """The whole sound as one 16-bit frame from time 0 (PyAV resamples it to the encoder's format
    and cuts it into AAC frames; a rate AAC does not encode is first resampled to the stream's
    with ``av.AudioResampler``), then the encoder flushed."""
    import av

    layout = stream.codec_context.layout.name
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(_pcm16(audio)).reshape(1, -1), format="s16", layout=layout)
    frame.sample_rate = int(sample_rate)
    frame.pts = 0
    frames = [frame]
    if stream.codec_context.sample_rate != int(sample_rate):
        resampler = av.AudioResampler(format="s16", layout=layout, rate=stream.codec_context.sample_rate)
        frames = resampler.resample(frame) + resampler.resample(None)
        for f in frames:
            f.pts = None  # the encoder numbers them in order from 0
    for f in frames:
        for packet in stream.encode(f):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def _write_png_folder(frames: np.ndarray, target: str) -> None:
    """PNG frames into ``target`` (symlinks resolved): a new folder is written as a hidden
    temporary one beside it and renamed into place; an existing one (empty, or holding only
    frame files, checked by :func:`check_output_path`) gets the frames written in a hidden
    temporary folder inside it, then loses its earlier frames and gets the new ones moved in
    (on an error there, the moved ones are removed again: never old and new frames mixed)."""
    from PIL import Image

    exists = os.path.isdir(target)
    tmp = tempfile.mkdtemp(dir=target if exists else os.path.dirname(target), prefix=".vidax-")
    names = [f"frame_{i:05d}.png" for i in range(len(frames))]
    moved = []
    try:
        for name, frame in zip(names, frames):
            Image.fromarray(frame).save(os.path.join(tmp, name))
        if not exists:
            publish(tmp, target)
            return
        for name in _frame_files(target)[0]:
            os.unlink(os.path.join(target, name))
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(target, name))
            moved.append(name)
    except BaseException:
        for name in moved:
            os.unlink(os.path.join(target, name))
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_video(path: str | os.PathLike) -> np.ndarray:
    """Decode an mp4 to uint8 (F, H, W, 3) (used by tests and benchmarks)."""
    import av

    with av.open(os.fspath(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
