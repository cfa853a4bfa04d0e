"""An mp4 written while the video is still being made (a long video's chunks, as each ends).

The frames go to a temporary file beside the target (``.vidax-XXXX.mp4``), a fragmented mp4
(``movflags=frag_every_frame+empty_moov``: the header first, then a fragment per frame, each
written out as it is muxed; the encoder without look-ahead or B-frames, x264's ``zerolatency``;
every chunk starts with a keyframe), so the temporary file plays up to the frames encoded while
the run goes on. :meth:`GrowingMp4.finish` ends the encode and publishes the file under
its final name atomically (:func:`vidax.io.atomic.publish`), as every vidax writer: nothing
half-written is ever under that name. An interrupted run finishes what it has (the chunks done)
and publishes that; :meth:`GrowingMp4.abort` removes the temporary file, and
:meth:`GrowingMp4.keep` moves it aside as far as it was written (``vidax serve``, a write that failed).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from vidax.errors import Arg, InputError
from vidax.io.atomic import publish
from vidax.io.video import to_uint8

#: The muxer options of the growing file: fragments, the header (``moov``) written first.
FRAGMENTED = {"movflags": "frag_every_frame+empty_moov+default_base_moof", "flush_packets": "1"}


class GrowingMp4:
    """An mp4 (H.264, yuv420p, crf 18 as :func:`vidax.io.video.write_video`) that frames are
    appended to.

    Args:
        path: the final name (checked by the caller: :func:`vidax.io.video.check_output_path`).
        fps: frames per second (> 0).
        overwrite: replace a file at ``path`` created after the check (else it is kept and
            :meth:`finish` raises InputError); one existing at the check is replaced as
            :func:`~vidax.io.video.write_video` replaces it.
    """

    def __init__(self, path: str | os.PathLike, fps: float, *, overwrite: bool = False):
        import av

        self.path = os.fspath(path)
        self.target = os.path.realpath(self.path)  # a symlink is written through, as write_video does
        self.replace = overwrite or os.path.lexists(self.target)
        self.frames = 0
        fd, self.tmp = tempfile.mkstemp(dir=os.path.dirname(self.target), prefix=".vidax-", suffix=".mp4")
        os.close(fd)
        self._fps = fps
        self._container = av.open(self.tmp, mode="w", format="mp4", options=dict(FRAGMENTED))
        self._stream = None

    def append(self, frames: np.ndarray) -> None:
        """Encode ``frames`` (N, H, W, 3) float32 in [0, 1] or uint8 after those appended before;
        the first of them a keyframe (a fragment of the file ends before it).

        Raises:
            InputError: odd height or width (yuv420p), or a size other than the first frames'.
        """
        import av
        from av.video.frame import PictureType

        pixels = to_uint8(np.asarray(frames))
        _, h, w, _ = pixels.shape
        if self._stream is None:
            if h % 2 or w % 2:
                raise InputError(f"mp4 (yuv420p) needs even height and width, got {h}x{w}; use .npy or PNGs")
            self._stream = self._container.add_stream("libx264", rate=self._fps)
            self._stream.width, self._stream.height = w, h
            self._stream.pix_fmt = "yuv420p"
            # no look-ahead or B-frames: each frame's packet leaves the encoder (and reaches the file) at once
            self._stream.options = {"crf": "18", "tune": "zerolatency"}
        elif (h, w) != (self._stream.height, self._stream.width):
            raise InputError(f"frames of {h}x{w} appended to an mp4 of {self._stream.height}x{self._stream.width}")
        for i, frame in enumerate(pixels):
            picture = av.VideoFrame.from_ndarray(frame, format="rgb24")
            if i == 0:
                picture.pict_type = PictureType.I
            for packet in self._stream.encode(picture):
                self._container.mux(packet)
        self.frames += len(pixels)

    def finish(self, *, keep_failed: bool = False) -> str:
        """End the encode and publish the file under its name; the path written.

        Args:
            keep_failed: a failure (other than the two below) leaves the temporary file as far
                as it was written, for :meth:`keep` (else it is removed).

        Raises:
            InputError: no frame was appended; the name was taken meanwhile (without ``overwrite``).
        """
        if self._stream is None:
            self.abort()
            raise InputError(Arg("output", self.path), ": no frame was made, nothing to write")
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            publish(self.tmp, self.target, self.replace)
        except FileExistsError:
            self.abort()
            raise InputError(
                Arg("output", self.path),
                " was created by another process while this one was written; it was not replaced",
            ) from None
        except BaseException:
            if not keep_failed:
                self.abort()
            raise
        return self.path

    def keep(self, path: str | os.PathLike) -> str:
        """Stop writing and move the temporary file, as far as it was written, to ``path`` (a
        fragmented mp4 plays up to its last whole fragment: the :attr:`frames` appended whole
        at least); the path. A write that failed (disk full) is where this is called.

        Raises:
            OSError: the file could not be moved (it is removed then).
        """
        try:
            self._container.close()
        except Exception:  # a container already closed, or left broken by the failed write
            pass
        try:
            publish(self.tmp, os.fspath(path))
        except OSError:
            self.abort()
            raise
        return os.fspath(path)

    def abort(self) -> None:
        """Drop the file: nothing is published, the temporary file is removed."""
        try:
            self._container.close()
        except Exception:  # a container already closed, or left broken by a failed encode
            pass
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)
