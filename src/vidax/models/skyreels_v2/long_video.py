"""Long videos from the diffusion-forcing pipelines: finished chunks leave the device, and with
``on_chunk`` each chunk is decoded as soon as it is done.

A diffusion-forcing video is made chunk by chunk (:func:`~vidax.models.skyreels_v2.forcing.chunk_plan`);
once a chunk is denoised its new latent frames are final (the next chunk repeats only the last
``overlap_history`` of them, as its finished prefix). So the device holds one chunk's latents and
the frames the next chunk repeats (:class:`FinishedLatents`), whatever the length; the finished
latents wait on the host.

With the call keyword ``on_chunk`` (a callable, vidax's own: diffusers has none) every chunk's
new latent frames are decoded right away (:class:`ChunkDecoder`: the Wan VAE is causal, so frame
by frame with its cache carried from chunk to chunk is the same decode as the whole video's at
once, tiled where the VAE's tiling applies; between chunks the caches wait in host memory, and a
transformer the plan stages waits there while a chunk decodes) and handed to
``on_chunk(FinishedChunk)``: ``vidax generate`` appends them to the growing mp4, ``vidax serve``
reports the chunk in its events. The call then returns these frames instead of decoding again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import Arg, Message
from vidax.pipelines.options import OBJECT, CallOption
from vidax.pipelines.output import check_finite, decoding

#: The call keyword of the chunk callback (an ``OBJECT`` option: no flag).
ON_CHUNK = CallOption(
    "on_chunk",
    OBJECT,
    "Long video (vidax's, not diffusers'): on_chunk(chunk) after each chunk is denoised, with chunk a "
    "vidax.models.skyreels_v2.long_video.FinishedChunk holding its frames decoded (float32 (B, n, H, W, 3) in "
    "[0, 1]); the call returns the same frames, concatenated (keep_chunks=False: none).",
)

#: Whether a call with ``on_chunk`` keeps the chunks' frames to return them (no flag: ``vidax
#: generate`` writes each chunk as it ends and passes False).
KEEP_CHUNKS = CallOption(
    "keep_chunks",
    bool,
    "Long video with on_chunk (vidax's, not diffusers'): False returns no frames (B, 0, H, W, 3; on_chunk had "
    "them) instead of keeping every chunk's frames in host memory until the call returns (float32: 6.3 MB a "
    "544x960 frame, 4.5 GB for 30 s at 24 fps), so a video of any length takes the host memory of one chunk.",
    "True",
    flag=False,
)

#: The chunk streaming keywords of the diffusion-forcing pipelines.
CHUNK_OPTIONS = (ON_CHUNK, KEEP_CHUNKS)


#: The frames each chunk repeats where ``overlap_history`` is not given (video-to-video, and a
#: command-line video longer than one chunk): SkyReels-V2's recommended 17 (or 37), in video
#: frames as diffusers' keyword counts them (5 latent frames).
DEFAULT_OVERLAP_HISTORY = 17


@dataclasses.dataclass(frozen=True)
class FinishedChunk:
    """One finished chunk of a long video, as ``on_chunk`` gets it.

    Attributes:
        index: the chunk, 0-based.
        count: the chunks of the call.
        frames: float32 numpy (B, n, H, W, 3) in [0, 1], the video's next n frames (for
            video-to-video the first chunk's start with the given video's frames).
        frames_done: the video's frames so far, these included.
        frames_total: the frames the finished call returns.
    """

    index: int
    count: int
    frames: np.ndarray
    frames_done: int
    frames_total: int

    def progress(self) -> dict:
        """``{"chunk", "of", "frames", "num_frames"}``: the chunk and the chunks (1-based), the
        video's frames done and its frames (``vidax serve``'s ``chunk`` event)."""
        return {"chunk": self.index + 1, "of": self.count, "frames": self.frames_done, "num_frames": self.frames_total}


class ChunkDecoder:
    """The Wan VAE's decode of a video's latents given a few frames at a time
    (:meth:`~vidax.models.wan.vae.WanVAE.decode_stream`): the frames of all calls together equal
    ``vae.decode`` of all the latents at once (tiled where the VAE's tiling applies), and between
    calls its causal caches wait in host memory (the device holds nothing of the decode while
    the next chunk is denoised).

    Args:
        vae: the pipeline's ``AutoencoderKLWan`` (where the pipeline stages it, it is placed for
            each call).
    """

    def __init__(self, vae: Any):
        self.vae = vae
        self.caches: dict = {}

    def __call__(self, z: jax.Array) -> np.ndarray:
        """``z``: de-normalised latents (B, n, h, w, C_z), the video's next n latent frames ->
        float32 numpy (B, frames, H, W, 3) in [-1, 1] (1 + 4 (n - 1) frames for the first call,
        4 n after)."""
        return self.vae.decode_stream(z, self.caches)


class FinishedLatents:
    """A call's finished latent frames: on the host, and the last ``keep`` of them also on the
    device (what the next chunk repeats). Device memory: ``keep`` latent frames."""

    def __init__(self, keep: int):
        self.keep = keep
        self.host: list[np.ndarray] = []
        self.tail: jax.Array | None = None

    def add(self, latents: jax.Array) -> None:
        """Append a chunk's new frames (B, n, h, w, C) (channels-last, float32)."""
        self.host.append(np.array(latents))  # a copy: a CPU array view would keep the device buffer
        tail = latents if self.tail is None else jnp.concatenate([self.tail, latents], axis=1)
        self.tail = tail[:, -self.keep :] if self.keep else None

    def last(self, n: int) -> jax.Array:
        """The last ``n`` (<= ``keep``) finished frames, on the device."""
        return self.tail[:, -n:]

    def video(self) -> np.ndarray:
        """Every finished frame, host float32 (B, T, h, w, C)."""
        return np.concatenate(self.host, axis=1)


class LongVideo:
    """The diffusion-forcing pipelines' chunk streaming (mixed into
    :class:`~vidax.models.skyreels_v2.pipeline.SkyReelsV2DiffusionForcingPipeline`): the
    finished chunk's decode and ``on_chunk``, and :meth:`decode` returning what was decoded."""

    #: The frames ``on_chunk`` was given in the call running now (None: it streams nothing).
    _streamed: list | None = None
    #: The call keyword a caller streams the finished chunks through (``vidax generate``'s mp4).
    CHUNK_CALLBACK = ON_CHUNK.name
    #: The call keyword that, False, keeps no chunk's frames for the call's return (the caller
    #: wrote them as they ended).
    CHUNK_KEEP = KEEP_CHUNKS.name
    #: A call's ``on_state`` / ``resume`` (the denoising loop's saved state, ``vidax serve``'s
    #: restarts) are not carried across chunks: a stopped video starts over.
    RESUMES_STATE = False

    @classmethod
    def chunked_length(cls, info, given: dict) -> tuple[dict, Message | None]:
        """``(given, what was set)``: a front end's call keywords (``vidax generate``'s flags,
        ``vidax serve``'s fields) with ``overlap_history`` :data:`DEFAULT_OVERLAP_HISTORY` where a
        video longer than one chunk does not give it (less where ``base_num_frames`` is too small
        for it to leave a chunk a new latent frame; the video-to-video pipeline has its own
        default), and the line that says so, its arguments for the front end to spell (None:
        nothing set)."""
        if "overlap_history" in given or cls.task == "v2v":
            return given, None
        frames = given.get("num_frames", info.defaults.num_frames)
        base = given.get("base_num_frames", 97)
        t = info.vae_config.temporal_compression
        # 17, or for a small --base-num-frames the most that leaves each chunk a new latent frame
        overlap = min(DEFAULT_OVERLAP_HISTORY, ((base - 1) // t - 1) * t + 1)
        if frames <= base or overlap < 1:
            return given, None
        said = Message(
            f"a video of {frames} frames in chunks of at most {base} (",
            Arg("base_num_frames"),
            f"): each chunk repeats the last {overlap} frames of the one before (",
            Arg("overlap_history", overlap),
            "; SkyReels-V2 recommends 17 or 37)",
        )
        return {**given, "overlap_history": overlap}, said

    def start_chunks(self, call, chunks: list) -> tuple[FinishedLatents, Callable | None]:
        """Before the first chunk: where its finished latents go, and the chunk streaming of
        ``on_chunk`` (None without it, or with ``output_type="latent"``)."""
        keep = max((c.overlap for c in chunks), default=0)
        finished = FinishedLatents(keep)
        on_chunk = call.extra.get("on_chunk")
        self._streamed = None
        if on_chunk is None or call.output_type == "latent":
            return finished, None
        self._streamed = []
        keep = call.extra.get("keep_chunks", True)
        decoder = ChunkDecoder(self.pipe.vae)
        t = self.pipe.info.vae_config.temporal_compression
        latent_total = sum(c.num_latent_frames - c.overlap for c in chunks)
        prefix = self.stream_prefix(call)
        total = prefix.shape[1] + 1 + t * (latent_total - 1)  # the last image's latent frame is not in the chunks
        count, done = len(chunks), [0]

        def chunk_done(index: int, new: jax.Array, end: int, stats) -> None:
            with stats.timed("decode_s"), decoding(self.pipe):
                z = self.decode_input(call, self.pipe.vae.denormalize_latents(new[:, : new.shape[1] - end]))
                video = decoder(z)
                check_finite(
                    f"the VAE decode (chunk {index + 1} of {count})", video, nnx.state(self.pipe.vae, nnx.Param)
                )
            frames = np.clip(video / np.float32(2.0) + np.float32(0.5), 0.0, 1.0).astype(np.float32)
            if index == 0 and prefix.shape[1]:
                frames = np.concatenate([np.broadcast_to(prefix, (frames.shape[0], *prefix.shape[1:])), frames], 1)
            self._streamed.append(frames if keep else frames[:, :0])  # (B, 0, H, W, 3): the shape, no frames
            stats.sample_memory()
            done[0] += frames.shape[1]
            on_chunk(FinishedChunk(index, count, frames, done[0], total))

        return finished, chunk_done

    def stream_prefix(self, call) -> np.ndarray:
        """Frames the streamed video starts with before the decoded ones, float32 (1, P, H, W, 3)
        in [0, 1] (none; video-to-video: the given video)."""
        return np.zeros((1, 0, call.height, call.width, 3), np.float32)

    def decode(self, call, latents, stats) -> np.ndarray:
        """The frames ``on_chunk`` was given, where it was (none with ``keep_chunks=False``); else :meth:`stream_prefix` followed
        by the VAE decode of the whole video's latents."""
        streamed, self._streamed = self._streamed, None
        if streamed:
            return np.concatenate(streamed, axis=1)
        frames = super().decode(call, latents, stats)
        prefix = self.stream_prefix(call)
        return np.concatenate([np.broadcast_to(prefix, (frames.shape[0], *prefix.shape[1:])), frames], axis=1)
