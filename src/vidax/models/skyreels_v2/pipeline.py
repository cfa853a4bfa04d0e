"""SkyReels-V2 text-to-video, plain (:class:`SkyReelsV2Pipeline`) and with diffusion forcing
(:class:`SkyReelsV2DiffusionForcingPipeline`), and image-to-video
(:class:`SkyReelsV2ImageToVideoPipeline`: Wan2.1 I2V's conditioning): the hooks of
:class:`~vidax.pipelines.base.VideoPipeline` on Wan's (:class:`~vidax.models.wan.pipeline.WanPipeline`:
UMT5 prompt encoding, the Wan VAE, CFG as a 2B batch).

References: ``diffusers.SkyReelsV2Pipeline`` and ``diffusers.SkyReelsV2ImageToVideoPipeline``
(Wan's text- and image-to-video loops with this family's transformer) and ``diffusers.SkyReelsV2DiffusionForcingPipeline`` (0.42.1). Diffusion forcing runs chunk by
chunk (:func:`~vidax.models.skyreels_v2.forcing.chunk_plan`: one chunk unless ``num_frames >
base_num_frames``); each chunk iterates its timestep matrix
(:func:`~vidax.models.skyreels_v2.forcing.timestep_matrix`), the model seeing every latent frame
at its own timestep and the block-causal attention of ``causal_block_size`` frames, and every
frame has its own UniPC state (:func:`~vidax.models.skyreels_v2.forcing.per_frame_step`). A chunk
after the first starts from the last ``overlap_history`` frames of the video so far, optionally
re-noised by ``addnoise_condition``. Finished latents wait on the host (device memory of one chunk);
the whole video is decoded at the end, or each chunk as it ends with ``on_chunk``
(:mod:`~vidax.models.skyreels_v2.long_video`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, ConfigError, InputError
from vidax.io.image import one_image, to_rgb_image, vae_image_preprocess, video_frames
from vidax.models.skyreels_v2.config import read_skyreels_v2_checkpoint
from vidax.models.skyreels_v2.forcing import chunk_plan, per_frame_step, timestep_matrix
from vidax.models.skyreels_v2.long_video import CHUNK_OPTIONS, DEFAULT_OVERLAP_HISTORY, LongVideo
from vidax.models.wan.config import WanInfo
from vidax.models.wan.pipeline import WanHooks, WanImageToVideoHooks, WanImageToVideoPipeline
from vidax.pipelines.base import VideoPipeline, cfg_pair, image_first_call
from vidax.pipelines.call import CallRule
from vidax.pipelines.call_checks import SizeLimits
from vidax.pipelines.options import IMAGE_FILE, VIDEO_FILE, CallOption
from vidax.pipelines.prompts import encode_with
from vidax.schedulers.base import StepIndexed, register_state

logger = logging.getLogger("vidax.pipeline")


def read_without_fps(checkpoint, pipeline: str) -> WanInfo:
    """:func:`~vidax.models.skyreels_v2.config.read_skyreels_v2_checkpoint` for ``pipeline``, a
    pipeline that gives the transformer no fps (one timestep for all frames).

    Raises:
        ConfigError: also a transformer with the fps conditioning (``inject_sample_info``), which
            the reference fails on too (the diffusion-forcing pipelines run those checkpoints).
    """
    info = read_skyreels_v2_checkpoint(checkpoint)
    if info.transformer_configs[0].inject_sample_info:
        forcing = "SkyReelsV2DiffusionForcing" + ("ImageToVideo" if "ImageToVideo" in pipeline else "") + "Pipeline"
        raise ConfigError(
            f"{checkpoint.config_file('transformer')}: inject_sample_info=true (fps conditioning) is not run by "
            f"{pipeline}, which gives the transformer no fps (diffusers' fails on it too); load it with {forcing}"
        )
    return info


class SkyReelsV2Hooks(WanHooks):
    """The hooks of :class:`SkyReelsV2Pipeline`: Wan's, with SkyReels-V2's checkpoint reading."""

    pipeline_name = "SkyReelsV2Pipeline"
    unsupported_call_args = ("guidance_scale_2",)  # one transformer, no experts

    @classmethod
    def read_checkpoint(cls, checkpoint) -> WanInfo:
        """:func:`read_without_fps`."""
        return read_without_fps(checkpoint, cls.pipeline_name)

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """``"t2v"`` -> :class:`SkyReelsV2Pipeline`, ``"i2v"`` -> :class:`SkyReelsV2ImageToVideoPipeline`."""
        return SkyReelsV2Pipeline if task == "t2v" else SkyReelsV2ImageToVideoPipeline


class SkyReelsV2ImageToVideoHooks(SkyReelsV2Hooks, WanImageToVideoHooks):
    """The hooks of :class:`SkyReelsV2ImageToVideoPipeline`: SkyReels-V2's checkpoint reading,
    then Wan's image-to-video ones (task, keywords and their checks)."""

    pipeline_name = "SkyReelsV2ImageToVideoPipeline"


class SkyReelsV2Pipeline(VideoPipeline):
    """SkyReels-V2 text-to-video (reference: ``diffusers.SkyReelsV2Pipeline``): Wan's loop, one
    timestep for all frames, with the SkyReels-V2 transformer (its config's causal blocks). Build
    with :meth:`from_pretrained` or :func:`vidax.load_pipeline`."""

    family = SkyReelsV2Hooks
    image_encoder = None


class SkyReelsV2ImageToVideoPipeline(VideoPipeline):
    """SkyReels-V2 image-to-video (reference: ``diffusers.SkyReelsV2ImageToVideoPipeline``):
    ``pipe(image, prompt, ...)``, Wan2.1 I2V's conditioning and loop
    (:class:`~vidax.models.wan.pipeline.WanImageToVideoPipeline`: CLIP penultimate hidden states
    of ``image``, the VAE encoding of ``[image, 0, ..., 0]`` and its mask beside the latents,
    ``last_image`` and ``image_embeds`` as there) with the SkyReels-V2 transformer, one timestep
    for all frames. The image encoder is a ``CLIPVisionModelWithProjection`` (its projection is
    not run: the pipeline reads the penultimate hidden states)."""

    family = SkyReelsV2ImageToVideoHooks
    image_encoder = None
    __call__ = image_first_call
    encode_image = WanImageToVideoPipeline.encode_image


@register_state
@dataclasses.dataclass(frozen=True)
class ForcingState(StepIndexed):
    """The state of one chunk's denoising (a JAX pytree).

    Attributes:
        timesteps: (I, F) float32, each iteration's timestep of every latent frame.
        step_index: () int32, iterations done.
        update: (I, F) bool, the frames each iteration's scheduler step updates.
        frames: every frame's own scheduler state (step index (F,), history like the latents).
        key: the PRNG key of ``addnoise_condition``'s noise (one draw per iteration).
    """

    timesteps: jax.Array
    step_index: jax.Array
    update: jax.Array
    frames: Any
    key: jax.Array


@dataclasses.dataclass(frozen=True)
class _ChunkRun:
    """What a chunk's compiled step depends on beyond the arrays (static)."""

    causal_block_size: int
    prefix: int
    addnoise_condition: float
    fps_index: int


#: The keywords of the diffusion-forcing pipelines beyond the shared ones.
FORCING_OPTIONS = (
    CallOption(
        "ar_step",
        int,
        "Diffusion forcing: steps each causal block lags the one before it (0: all frames together; "
        "5 with causal_block_size 5 for the asynchronous mode).",
        "0",
        low=0,
    ),
    CallOption(
        "causal_block_size",
        int,
        "Latent frames per causal block of the attention (the block-causal mask; 1: full attention).",
        "the transformer's num_frame_per_block",
        low=1,
    ),
    CallOption(
        "base_num_frames",
        int,
        "The most frames one chunk of a long video has (97 for 540P, 121 for 720P).",
        "97",
        low=1,
    ),
    CallOption(
        "overlap_history",
        int,
        "Frames each chunk after the first repeats from the video so far (a long video: num_frames > "
        "base_num_frames; 17 or 37 recommended).",
        "none: one chunk; 17 for a longer video on the command line and for video-to-video",
        low=1,
    ),
    CallOption(
        "addnoise_condition",
        float,
        "Noise added to the repeated frames of a long video's chunks (0-1000, the scheduler's timesteps; 20 "
        "recommended, diffusers warns above 60).",
        "0",
        low=0,
        high=1000,
    ),
    # vidax generate passes its --fps (the mp4's rate) on as fps=, so the video is written at
    # the rate the model conditioned on.
    CallOption(
        "fps",
        float,
        "Frame rate the model conditions on (16, or any other for its second embedding).",
        "24",
        low=0,
        low_open=True,
        flag=False,
    ),
    *CHUNK_OPTIONS,
)


class SkyReelsV2ForcingHooks(LongVideo, WanHooks):
    """The hooks of SkyReels-V2's diffusion-forcing pipelines, in one place:
    :class:`SkyReelsV2DiffusionForcingPipeline`'s, and what its image- and video-to-video
    siblings' build on (these hooks first, Wan's text encoding, conditioning and model inputs
    after them). Long videos chunk by chunk (:class:`~vidax.models.skyreels_v2.long_video.LongVideo`)."""

    pipeline_name = "SkyReelsV2DiffusionForcingPipeline"
    call_options = FORCING_OPTIONS
    unsupported_call_args = ("guidance_scale_2",)  # one transformer, no experts

    #: The static settings of the chunk being denoised (set by :meth:`denoise`, part of
    #: :meth:`step_key`).
    _chunk_run: _ChunkRun | None = None

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint) -> WanInfo:
        """:func:`~vidax.models.skyreels_v2.config.read_skyreels_v2_checkpoint`; a diffusion-forcing
        checkpoint does text- and image-to-video (the image is the first latent frame).

        Raises:
            ConfigError: also a transformer that takes more than the latents (in_channels other
                than the VAE's z_dim: SkyReelsV2ImageToVideoPipeline's checkpoints).
        """
        info = read_skyreels_v2_checkpoint(checkpoint)
        if info.tasks != ("t2v",):
            z = info.vae_config.z_dim
            raise ConfigError(
                f"{checkpoint.config_file('transformer')}: in_channels={info.transformer_configs[0].in_channels}; "
                f"the diffusion-forcing pipelines give the transformer the latents alone (z_dim={z}); this "
                "image-to-video transformer runs with SkyReelsV2ImageToVideoPipeline"
            )
        return dataclasses.replace(
            info, tasks=("t2v", "i2v", "v2v"), variant=info.variant + ", image- and video-to-video"
        )

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """``"t2v"`` -> :class:`SkyReelsV2DiffusionForcingPipeline`, ``"i2v"`` ->
        :class:`SkyReelsV2DiffusionForcingImageToVideoPipeline`, ``"v2v"`` ->
        :class:`SkyReelsV2DiffusionForcingVideoToVideoPipeline`."""
        return {
            "t2v": SkyReelsV2DiffusionForcingPipeline,
            "i2v": SkyReelsV2DiffusionForcingImageToVideoPipeline,
        }.get(task, SkyReelsV2DiffusionForcingVideoToVideoPipeline)

    @classmethod
    def size_limits(cls, info: WanInfo) -> SizeLimits:
        """Wan's, but for the frames: the RoPE tables span one chunk's latent frames (diffusers
        takes the first ``ppf`` rows for the chunk it denoises), so a video of chunks has no
        length limit; each chunk's frames are checked by :meth:`check_family_call`."""
        return dataclasses.replace(super().size_limits(info), num_frames=None)

    @classmethod
    def chunks(cls, info: WanInfo, call) -> list:
        """The call's :class:`~vidax.models.skyreels_v2.forcing.Chunk` list."""
        e = call.extra
        base = e.get("base_num_frames", 97)
        cb = cls.causal_block_size(info, call)
        return chunk_plan(call.num_frames, base, e.get("overlap_history"), info.vae_config.temporal_compression, cb)

    @classmethod
    def causal_block_size(cls, info: WanInfo, call) -> int:
        given = call.extra.get("causal_block_size")
        return info.transformer_configs[0].num_frame_per_block if given is None else given

    @classmethod
    def latent_shape(cls, info: WanInfo, call) -> tuple[int, ...]:
        b, c, _, h, w = super().latent_shape(info, call)
        return (b, c, cls.chunks(info, call)[0].num_latent_frames, h, w)

    @classmethod
    def check_family_call(cls, info: WanInfo, call) -> None:
        """The Wan checks, then the diffusion-forcing keywords against each other.

        Raises:
            InputError: ``num_frames`` past ``base_num_frames`` without ``overlap_history``; an
                ``overlap_history`` of no fewer latent frames than ``base_num_frames``; chunks whose
                latent frames ``causal_block_size`` does not divide.
        """
        super().check_family_call(info, call)
        e = call.extra
        if "base_num_frames" in e and e["base_num_frames"] is None:  # diffusers' check_inputs fails on None too
            raise InputError(
                Arg("base_num_frames", None), " must be an int >= 1 (the most frames one chunk has; 97 by default)"
            )
        base, overlap = e.get("base_num_frames", 97), e.get("overlap_history")
        if e.get("keep_chunks") is False and e.get("on_chunk") is None:  # the frames would go nowhere
            raise InputError(
                Arg("keep_chunks", False),
                " without ",
                Arg("on_chunk"),
                " would return no frames: give on_chunk=callable (it gets each chunk's frames), or keep_chunks=True",
            )
        if (e.get("addnoise_condition") or 0) > 60:
            logger.warning(
                "%s is large and may cause inconsistencies in a long video; 20 is recommended (as diffusers warns)",
                Arg("addnoise_condition", e["addnoise_condition"]),
            )
        t = info.vae_config.temporal_compression
        if call.num_frames > base and overlap is None:
            raise InputError(
                Arg("overlap_history", keyword=True),
                " is needed when ",
                Arg("num_frames", call.num_frames),
                " exceeds ",
                Arg("base_num_frames", base),
                " (the frames each chunk repeats from the video so far; 17 or 37 recommended)",
            )
        chunked = call.num_frames > base or cls.task == "v2v"  # video-to-video repeats the video's end
        if overlap is not None and chunked and (overlap - 1) // t >= (base - 1) // t:
            raise InputError(
                Arg("overlap_history", overlap),
                f" must span fewer latent frames than base_num_frames={base} ({(base - 1) // t + 1} latent frames), "
                "or no chunk adds a frame",
            )
        cb = cls.causal_block_size(info, call)
        chunks = cls.chunks(info, call)
        most = WanHooks.size_limits(info)
        if max(c.num_latent_frames for c in chunks) > (most.num_frames - 1) // t + 1:
            chunk_arg = Arg("base_num_frames", base) if overlap is not None else Arg("num_frames", call.num_frames)
            raise InputError(
                chunk_arg,
                " makes a chunk longer than this checkpoint's model can represent: a chunk has at most "
                f"{most.num_frames} frames ({most.reason}); give a smaller ",
                Arg("base_num_frames"),
                "" if overlap is not None else " and an overlap_history to make the video in chunks",
            )
        for k, chunk in enumerate(chunks):
            frames = chunk.num_latent_frames + (cls.end_frames(call) if k == len(chunks) - 1 else 0)
            if frames % cb:
                raise InputError(
                    Arg("causal_block_size", cb),
                    f" must divide the {frames} latent frames of each chunk (from ",
                    Arg("num_frames", call.num_frames),
                    ", ",
                    Arg("base_num_frames", base),
                    *([] if overlap is None else [", ", Arg("overlap_history", overlap)]),  # None: not given
                    ")",
                )

    @classmethod
    def end_frames(cls, call) -> int:
        """Latent frames given at the end of the last chunk (none; the image-to-video pipeline's
        ``last_image`` is one)."""
        return 0

    # ------------------------------------------------------------------ the run
    def denoise(self, call, x, embeds, cond, stats):
        """Every chunk in turn (module docstring); returns the whole video's latents (host
        float32: :class:`~vidax.models.skyreels_v2.long_video.FinishedLatents`), each chunk
        decoded as it ends with ``on_chunk`` (:mod:`~vidax.models.skyreels_v2.long_video`)."""
        info, e = self.pipe.info, call.extra
        run = _ChunkRun(
            self.causal_block_size(info, call), 0, float(e.get("addnoise_condition", 0)), int(e.get("fps", 24) != 16)
        )
        template = self.pipe.scheduler.set_timesteps(call.num_inference_steps, sample_shape=(1,)).timesteps
        key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 1)
        chunks = self.chunks(info, call)
        finished, chunk_done = self.start_chunks(call, chunks)
        for k, chunk in enumerate(chunks):
            shape = (x.shape[0], chunk.num_latent_frames, *x.shape[2:])
            lat = x if k == 0 else jnp.asarray(self.chunk_noise(call, k, shape), jnp.float32)
            if k and chunk.prefix:
                lat = lat.at[:, : chunk.prefix].set(finished.last(chunk.overlap)[:, : chunk.prefix])
            lat, chunk, end = self.chunk_latents(call, k == len(chunks) - 1, lat, chunk, cond)
            f = chunk.num_latent_frames
            matrix, _, update, _ = timestep_matrix(
                f, jax.device_get(template), f, e.get("ar_step", 0), chunk.prefix, run.causal_block_size
            )
            if end:  # frames given at the end: timestep 0, never updated
                matrix[:, f - end :], update[:, f - end :] = 0, False
            frames = self.pipe.scheduler.set_timesteps(call.num_inference_steps, sample_shape=lat.shape)
            frames = dataclasses.replace(frames, step_index=jnp.zeros((f,), jnp.int32))
            chunk_state = ForcingState(
                jnp.asarray(matrix, jnp.float32),
                jnp.zeros((), jnp.int32),
                jnp.asarray(update),
                frames,
                jax.random.fold_in(key, k),
            )
            self._chunk_run = dataclasses.replace(run, prefix=chunk.prefix)
            inputs, axes = self.step_args(call, embeds, cond, chunk_state, 0)
            n = len(matrix)
            if self.pipe.mesh is None:
                lat, chunk_state = jax.device_put((lat, chunk_state), jax.local_devices()[0])
            lat, _ = self.pipe.denoiser.run_expert(
                self.pipe, 0, call, lat, chunk_state, (inputs,), (axes,), (n, 0, n), stats
            )
            finished.add(lat[:, chunk.overlap :])
            if chunk_done is not None:
                chunk_done(k, lat[:, chunk.overlap :], end, stats)
            del lat
        return finished.video()

    def chunk_latents(self, call, last: bool, latents, chunk, cond) -> tuple:
        """``(latents, chunk, end)`` of a chunk before its first step: the text-to-video chunk as it
        is (``end`` = 0 frames given at its end); the image-to-video pipeline puts the image
        latents in (``last``: the video's last chunk)."""
        return latents, chunk, 0

    def chunk_noise(self, call, index: int, shape: tuple[int, ...]) -> jax.Array:
        """The initial noise of chunk ``index`` > 0, channels-last ``shape`` float32 (from the
        seed; the first chunk's is the call's ``latents``)."""
        return jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(call.seed), 1000 + index), shape, jnp.float32)

    def step_key(self) -> Any:
        return (super().step_key(), self._chunk_run)

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(x, timestep (B, F), context, None, fps (B,), causal_block_size)``: every latent
        frame at its timestep of this iteration; the repeated frames of a long video's chunk
        re-noised by ``addnoise_condition`` (at that timestep) when it is > 0."""
        run = self._chunk_run
        b = latents.shape[0]
        t = state.timesteps[state.step_index]
        x = latents
        if run.addnoise_condition > 0 and run.prefix:
            p, factor = run.prefix, 0.001 * run.addnoise_condition
            noise = jax.random.normal(jax.random.fold_in(state.key, state.step_index), x[:, :p].shape, x.dtype)
            x = x.at[:, :p].set(x[:, :p] * (1.0 - factor) + noise * factor)
            t = t.at[:p].set(run.addnoise_condition)
        timestep = jnp.broadcast_to(t, (b, t.shape[0]))
        fps = jnp.full((b,), run.fps_index, jnp.int32)
        x, timestep, fps = cfg_pair(do_cfg, x.astype(self.pipe.dtype), timestep, fps)
        return x, timestep, inputs.embeds, None, fps, run.causal_block_size

    def scheduler_update(self, state, pred, latents, inputs) -> tuple:
        i = state.step_index
        new, frames = per_frame_step(self.pipe.scheduler.step, state.frames, pred, latents, state.update[i])
        return new, dataclasses.replace(state, frames=frames, step_index=i + 1)

    def expert_plan(self, state) -> list[int]:
        return [0] * int(state.num_inference_steps)


class SkyReelsV2DiffusionForcingPipeline(VideoPipeline):
    """SkyReels-V2 text-to-video with diffusion forcing (reference:
    ``diffusers.SkyReelsV2DiffusionForcingPipeline``); long videos chunk by chunk. Build with
    :meth:`from_pretrained` or :func:`vidax.load_pipeline`.

    ``latents`` are the first chunk's initial noise ``(B, z_dim, F, H/8, W/8)``, F the latent
    frames of ``min(num_frames, base_num_frames)`` when ``overlap_history`` is given (else of
    ``num_frames``); later chunks draw theirs from the seed.
    """

    family = SkyReelsV2ForcingHooks
    image_encoder = None


class SkyReelsV2DiffusionForcingImageToVideoHooks(SkyReelsV2ForcingHooks):
    """The hooks of :class:`SkyReelsV2DiffusionForcingImageToVideoPipeline`."""

    pipeline_name = "SkyReelsV2DiffusionForcingImageToVideoPipeline"
    task = "i2v"
    call_options = FORCING_OPTIONS + (
        CallOption(
            "last_image",
            IMAGE_FILE,
            "The last frame (diffusers' last_image): a video from --image to it, one chunk (num_frames <= "
            "base_num_frames). Resized to height x width like the first.",
        ),
    )

    @classmethod
    def check_family_call(cls, info: WanInfo, call) -> None:
        """The diffusion-forcing checks, then the images.

        Raises:
            InputError: no ``image``; an image or ``last_image`` that is not one PIL image or uint8
                (H, W[, 3|4]) array; ``last_image`` on a long video (diffusers 0.42.1 fails
                there); a ``causal_block_size`` that does not divide the latent frames
                with the last image's.
        """
        super().check_family_call(info, call)
        if call.image is None:
            raise InputError(Arg("image"), " is required (the first frame: a PIL image or a uint8 (H, W, 3) array)")
        to_rgb_image(call.image[0] if isinstance(call.image, (list, tuple)) else call.image)
        last = call.extra.get("last_image")
        if last is None:
            return
        takes = "SkyReelsV2DiffusionForcingImageToVideoPipeline takes"
        to_rgb_image(one_image(last, takes, "last_image", list_of_one=True, what="last frame"), "last_image")
        chunks = cls.chunks(info, call)
        if len(chunks) > 1:
            raise InputError(
                Arg("last_image"),
                " is taken for a video of one chunk (",
                Arg("num_frames", call.num_frames),
                " <= ",
                Arg("base_num_frames", call.extra.get("base_num_frames", 97)),
                "): diffusers 0.42.1 fails on it (its long-video loop miscounts the frame it appends)",
            )

    @classmethod
    def end_frames(cls, call) -> int:
        """One with ``last_image`` (its latent frame)."""
        return int(call.extra.get("last_image") is not None)

    def condition(self, call, stats) -> dict:
        """``first_latent`` and, with ``last_image``, ``last_latent``: (B, 1, h, w, C) float32, the
        normalised VAE encoding (the posterior's mode) of each image alone, as the reference's
        ``prepare_latents``."""
        images = [call.image[0] if isinstance(call.image, (list, tuple)) else call.image]
        last = call.extra.get("last_image")
        if last is not None:
            images.append(last[0] if isinstance(last, (list, tuple)) else last)
        names = ("image", "last_image")
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            pixels = np.stack(
                [
                    vae_image_preprocess(to_rgb_image(im, n), call.height, call.width, name=n)
                    for im, n in zip(images, names)
                ]
            )
            mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, pixels[:, None])
            z = jnp.repeat(self.pipe.vae.normalize_latents(mean), call.batch, axis=0)
        stats.sample_memory()
        n = call.batch
        return {"first_latent": z[:n]} | ({"last_latent": z[n:]} if last is not None else {})

    def chunk_latents(self, call, last: bool, latents, chunk, cond) -> tuple:
        """The first chunk starts from the image's latent frame (a prefix of one frame); the last
        chunk gets the last image's appended (``end`` = 1)."""
        end = 0
        if not chunk.prefix:
            latents = latents.at[:, :1].set(cond["first_latent"])
            chunk = dataclasses.replace(chunk, prefix=1)
        if last and "last_latent" in cond:
            latents = jnp.concatenate([latents, cond["last_latent"]], axis=1)
            chunk, end = dataclasses.replace(chunk, num_latent_frames=chunk.num_latent_frames + 1), 1
        return latents, chunk, end

    def latents_to_decode(self, call, latents) -> jax.Array:
        """Without the last image's latent frame (the reference drops it before its decode)."""
        return latents if call.extra.get("last_image") is None else latents[:, :-1]


class SkyReelsV2DiffusionForcingImageToVideoPipeline(VideoPipeline):
    """SkyReels-V2 image-to-video with diffusion forcing (reference:
    ``diffusers.SkyReelsV2DiffusionForcingImageToVideoPipeline``): ``pipe(image, prompt, ...)`` on a
    diffusion-forcing checkpoint (no image encoder: the transformer sees the latents alone).

    ``image`` (a PIL image or uint8 array (H, W, 3), resized to height x width as Wan's I2V) is
    VAE-encoded alone, one latent frame, and is the first chunk's first latent frame, finished
    from the start of the schedule (its prefix; ``addnoise_condition`` re-noises it as it does a
    long video's repeated frames). ``last_image``: its latent frame is appended to the last chunk
    at timestep 0, never updated, and dropped before the decode (``output_type="latent"`` keeps
    it, as the reference). Other keywords and ``latents`` as
    :class:`SkyReelsV2DiffusionForcingPipeline`.
    """

    family = SkyReelsV2DiffusionForcingImageToVideoHooks
    image_encoder = None

    __call__ = image_first_call


def _overlap_history_default(family: Any, info: Any, keywords: dict) -> dict:
    """``overlap_history`` :data:`DEFAULT_OVERLAP_HISTORY` where not given (diffusers' default,
    None, fails in its ``prepare_latents``)."""
    if keywords.get("overlap_history") is None:
        keywords["overlap_history"] = DEFAULT_OVERLAP_HISTORY
    return keywords


class SkyReelsV2DiffusionForcingVideoToVideoHooks(SkyReelsV2ForcingHooks):
    """The hooks of :class:`SkyReelsV2DiffusionForcingVideoToVideoPipeline`."""

    pipeline_name = "SkyReelsV2DiffusionForcingVideoToVideoPipeline"
    task = "v2v"
    call_rules = (CallRule(_overlap_history_default),)
    call_options = FORCING_OPTIONS + (
        CallOption(
            "video",
            VIDEO_FILE,
            "The video to extend (SkyReels-V2 diffusion forcing: its last overlap_history frames start the new "
            "frames; the output is the video followed by num_frames frames).",
            task="v2v",
        ),
    )

    @classmethod
    def read_checkpoint(cls, checkpoint) -> WanInfo:
        """As the diffusion-forcing pipeline's, with this pipeline's default of 121 frames
        (diffusers' ``num_frames=120``, which it rounds to 121)."""
        info = super().read_checkpoint(checkpoint)
        return dataclasses.replace(info, defaults=dataclasses.replace(info.defaults, num_frames=121))

    @classmethod
    def chunks(cls, info: WanInfo, call) -> list:
        """Every chunk repeats ``overlap_history`` frames, the first the given video's."""
        e, t = call.extra, info.vae_config.temporal_compression
        overlap = e.get("overlap_history")
        prefix = None if overlap is None else (overlap - 1) // t + 1
        return chunk_plan(
            call.num_frames,
            e.get("base_num_frames", 97),
            overlap,
            t,
            cls.causal_block_size(info, call),
            video_prefix=prefix,
        )

    @classmethod
    def check_family_call(cls, info: WanInfo, call) -> None:
        """The video and ``overlap_history`` first, then the diffusion-forcing checks.

        Raises:
            InputError: no ``video``; a video of fewer frames than
                ``overlap_history``; ``num_frames`` of no more latent frames than
                ``overlap_history`` (no frame to generate); what
                :meth:`SkyReelsV2ForcingHooks.check_family_call` refuses.
        """
        video, overlap = call.extra.get("video"), call.extra.get("overlap_history")
        if video is None:
            raise InputError(Arg("video"), " is required (the video to extend: uint8 frames (F, H, W, 3) or images)")
        frames = video_frames(video)
        if len(frames) < overlap:
            raise InputError(Arg("video"), f" has {len(frames)} frames, fewer than ", Arg("overlap_history", overlap))
        t = info.vae_config.temporal_compression
        if (call.num_frames - 1) // t + 1 <= (overlap - 1) // t + 1:
            raise InputError(
                Arg("num_frames", call.num_frames),
                " must span more latent frames than ",
                Arg("overlap_history", overlap),
                " (num_frames counts the repeated frames and the new ones)",
            )
        super().check_family_call(info, call)

    def condition(self, call, stats) -> dict:
        """``video_latents`` (B, P, h, w, C) float32: the normalised VAE encoding (the
        posterior's mode) of the video's last ``overlap_history`` frames."""
        overlap = call.extra["overlap_history"]
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            pixels = self.video_pixels(call)[-overlap:]
            mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, pixels[None])
            z = jnp.repeat(self.pipe.vae.normalize_latents(mean), call.batch, axis=0)
        stats.sample_memory()
        return {"video_latents": z}

    def video_pixels(self, call) -> np.ndarray:
        """The call's video, each frame resized to height x width, float32 (F, H, W, 3) in [-1, 1]."""
        return np.stack(
            [vae_image_preprocess(f, call.height, call.width, name="video") for f in video_frames(call.extra["video"])]
        )

    def chunk_latents(self, call, last: bool, latents, chunk, cond) -> tuple:
        """The first chunk starts from the video's latents (its prefix)."""
        if not chunk.overlap and chunk.prefix:
            latents = latents.at[:, : chunk.prefix].set(cond["video_latents"][:, : chunk.prefix])
        return latents, chunk, 0

    def stream_prefix(self, call) -> np.ndarray:
        """The given video's frames (as resized, in [0, 1]): the decoded ones follow them."""
        return np.clip(self.video_pixels(call) / np.float32(2.0) + np.float32(0.5), 0.0, 1.0)[None]


class SkyReelsV2DiffusionForcingVideoToVideoPipeline(VideoPipeline):
    """SkyReels-V2 video extension with diffusion forcing (reference:
    ``diffusers.SkyReelsV2DiffusionForcingVideoToVideoPipeline``): ``pipe(video, prompt, ...)``
    continues ``video`` on a diffusion-forcing checkpoint.

    ``video`` (uint8 (F, H, W, 3) frames or a list of images, each resized to height x width as
    Wan's I2V image): its last ``overlap_history`` frames (video frames, as diffusers counts them;
    default 17, SkyReels-V2's recommended, where diffusers' None fails) are VAE-encoded and are the first
    chunk's prefix (finished frames, trimmed to whole causal blocks); every chunk has at most
    ``base_num_frames`` frames and repeats ``overlap_history`` of the video so far (the first chunk
    ``min(num_frames, base_num_frames)``), so ``num_frames`` counts the generated video with the
    re-encoded overlap. The decoded video follows the given one: ``len(video) + num_frames``
    frames, as the reference returns (``output_type="latent"``: the generated latents alone).
    The first chunk's noise comes from the seed (the reference fails on ``latents=``).
    """

    family = SkyReelsV2DiffusionForcingVideoToVideoHooks
    image_encoder = None

    def __call__(self, video: Any = None, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any):
        return super().__call__(prompt, negative_prompt, video=video, **kwargs)
