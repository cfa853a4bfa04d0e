"""The hooks a family implements (or keeps the defaults of): what its checkpoint is, which
components it loads, how a prompt is encoded, a call's conditioning, initial latents, the
transformer's inputs of one step and the scheduler update, what is decoded. :class:`VideoPipeline
<vidax.pipelines.base.VideoPipeline>` takes them from :class:`FamilyHooks`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint, CheckpointInfo
from vidax.encoders.tokenizer import Truncation
from vidax.errors import Arg, ConfigError
from vidax.pipelines.call import Call
from vidax.pipelines.call_checks import SizeLimits
from vidax.pipelines.memory import ModelSize
from vidax.pipelines.output import decode_video
from vidax.pipelines.sampling import classifier_free_guidance
from vidax.pipelines.staging import Staging
from vidax.pipelines.step_inputs import StepInputs
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


def frames_of_form(num_frames: int, k: int, reference: str) -> int:
    """``num_frames`` rounded to the form ``k n + 1`` as diffusers' Wan and LTX pipelines round it
    (``num_frames // k * k + 1``), with a warning naming ``reference``, the pipeline that does so."""
    if num_frames % k == 1:
        return num_frames
    rounded = num_frames // k * k + 1
    logger.warning(
        "%s is not of the form %dk+1; using %d, as diffusers' %s does",
        Arg("num_frames", num_frames),
        k,
        rounded,
        reference,
    )
    return rounded


def video_latent_shape(call: Call, channels: int, temporal: int, spatial: int) -> tuple[int, ...]:
    """The initial noise of a causal video VAE's latents in the diffusers layout
    ``(B, C, (F - 1) // temporal + 1, H // spatial, W // spatial)`` (Wan, Cosmos, HunyuanVideo)."""
    return (call.batch, channels, (call.num_frames - 1) // temporal + 1, call.height // spatial, call.width // spatial)


class FamilyHooks:
    """The family hooks with their defaults; a base of :class:`~vidax.pipelines.base.VideoPipeline`
    (a family overrides them in its subclass of it)."""

    # ================================================================== family hooks (configs)
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> CheckpointInfo:
        """What the checkpoint is, from its configs (no weights).

        Raises:
            CheckpointError, ConfigError: a missing component or a setting vidax does not implement.
        """
        raise NotImplementedError

    @classmethod
    def resolve_num_frames(cls, info: CheckpointInfo, num_frames: int) -> int:
        """The frame count the reference uses for ``num_frames`` (may warn)."""
        return num_frames

    @classmethod
    def check_family_call(cls, info: CheckpointInfo, call: Call) -> None:
        """Family-specific checks of a call (raise InputError)."""

    @classmethod
    def latent_shape(cls, info: CheckpointInfo, call: Call) -> tuple[int, ...]:
        """Shape of the initial noise in the diffusers layout (:attr:`latents_layout`); by default
        a causal video VAE's (:func:`video_latent_shape` of ``info.vae_config``'s
        ``latent_channels``, ``temporal_compression`` and ``spatial_compression``)."""
        v = info.vae_config
        return video_latent_shape(call, v.latent_channels, v.temporal_compression, v.spatial_compression)

    @classmethod
    def latent_shapes(cls, info: CheckpointInfo, call: Call) -> dict[str, tuple[int, ...]]:
        """The initial noise's shape of each of :attr:`latent_streams` (call keyword -> shape, in
        the diffusers layout); by default the one video stream's :meth:`latent_shape`. A family
        with more streams adds theirs (LTX-2's audio latents ``(B, C, L, mel_bins)``)."""
        return {cls.latent_streams[0]: tuple(cls.latent_shape(info, call))}

    @classmethod
    def makes_audio(cls, info: CheckpointInfo) -> bool:
        """Whether the checkpoint's model makes sound: the family has an :attr:`audio_stream` (a
        family whose checkpoints may lack the sound head, as Cosmos 3's, also reads ``info``)."""
        return cls.audio_stream is not None

    @classmethod
    def default_length(cls, info: CheckpointInfo) -> str:
        """The clip length a call without ``num_frames`` gets, as ``vidax inspect`` shows it:
        ``"N frames"`` by default (a family that predicts it, as LTX-2.5, says so)."""
        return f"{info.defaults.num_frames} frames"

    @classmethod
    def silent_call(cls, info: CheckpointInfo, call: Call) -> tuple | None:
        """Why the checked ``call`` makes no sound, as message parts (strings, :class:`Arg`), or
        None when it makes sound; by default it does when :meth:`makes_audio` (a family where
        sound is a call option, as Cosmos 3's ``enable_sound``, also reads ``call``). The output
        checks (a ``.wav`` output, the ``.wav`` beside an ``.npy``) ask this before any weight
        is read."""
        return None if cls.makes_audio(info) else (f"{cls.__name__} ({info.checkpoint.root}) makes no sound",)

    @classmethod
    def size_limits(cls, info: CheckpointInfo) -> SizeLimits:
        """The largest height / width / num_frames the model can represent (e.g. its RoPE
        tables' length); :meth:`check_call` refuses more, naming the largest valid value."""
        return SizeLimits()

    @classmethod
    def model_size(cls, info: CheckpointInfo, call: Call) -> ModelSize | None:
        """The transformer's numbers for :func:`run_size_estimate` (None: no estimate)."""
        return None

    @classmethod
    def text_token_limit(cls, info: CheckpointInfo) -> tuple[int, str] | None:
        """``(largest max_sequence_length, why)`` the checkpoint's tokenizer / text encoders take
        (their position tables, the tokenizer's ``model_max_length``, the reference's bound), or
        None for no limit; :meth:`check_call` refuses more."""
        return None

    @classmethod
    def check_schedule(cls, info: CheckpointInfo, scheduler: Any, call: Call) -> None:
        """Check, from the configs, that ``scheduler`` (built from the checkpoint's config) can
        make the call's schedule, e.g. by computing it on the host as :meth:`set_timesteps` will.
        The default: the scheduler must not need ``mu`` (``use_dynamic_shifting``), which only
        families that compute it from the token count (LTX-Video) pass.

        Raises:
            ConfigError, InputError: the schedule cannot be made (the message says why).
        """
        if getattr(getattr(scheduler, "config", None), "use_dynamic_shifting", False):
            raise ConfigError(
                f"{info.checkpoint.config_file('scheduler')}: use_dynamic_shifting=true needs mu (a shift "
                f"from the token count), which {cls.__name__} does not compute (nor does its diffusers "
                "reference); set use_dynamic_shifting to false"
            )

    # ================================================================== family hooks (loading)
    @classmethod
    def load_components(
        cls, info: CheckpointInfo, *, dtype: Any, mesh: Any, offload: Any, staging: Staging, **options: Any
    ) -> dict[str, Any]:
        """Load the modules the family runs (name -> module); see :func:`~vidax.pipelines.loading.load_component`."""
        raise NotImplementedError

    # ================================================================== family hooks (call)
    def check_components(self) -> None:
        """Checks of the loaded components before a call (raise InputError); the scheduler is the
        one component a user may replace (``pipe.scheduler = ...``), as in diffusers."""

    def encode_text(self, texts: list[str], max_sequence_length: int, truncation: Truncation | None = None) -> Any:
        """Text embeddings (len(texts), L, D) as the reference's prompt encoding (the text
        encoder is on the device meanwhile; ``truncation`` goes to the tokenizer, which names
        the texts it cuts with it), or a tuple / dict of arrays with the batch first
        (e.g. embeddings and their mask (B, L), a pooled embedding (B, D)): every array is repeated
        ``num_videos_per_prompt`` times along the batch, floating ones cast to :attr:`dtype`."""
        raise NotImplementedError

    def condition(self, call: Call, stats: RunStats) -> dict:
        """Per-call conditioning handed to every step (image latents, ...)."""
        return {}

    def prepare_latents(self, call: Call, noise: Any, cond: dict) -> Any:
        """Channels-last latents (B, T, H, W, C) to denoise from the initial noise (diffusers
        layout); with several streams (a dict, see :attr:`latent_streams`) the video's is made
        channels-last and the others are kept as they are."""
        if isinstance(noise, dict):
            return {
                k: self.prepare_latents(call, v, cond) if k == self.latent_streams[0] else v for k, v in noise.items()
            }
        return jnp.transpose(noise, (0, 2, 3, 4, 1))

    def set_timesteps(self, call: Call, latents: Any) -> Any:
        """The scheduler state of the call; with several streams one state per stream (a dict
        keyed like the latents: each stream is updated by its own copy of the scheduler, as
        diffusers' LTX2Pipeline steps its audio with a copy of the video's)."""
        if isinstance(latents, dict):
            return {k: self.set_timesteps(call, v) for k, v in latents.items()}
        return self.scheduler.set_timesteps(call.num_inference_steps, sample_shape=latents.shape)

    def step_args(
        self, call: Call, embeds: jax.Array, cond: dict, state: Any, expert: int
    ) -> tuple[StepInputs, Mapping | None]:
        """``(inputs, axes)``: the :class:`~vidax.pipelines.step_inputs.StepInputs` of every step
        of ``expert`` and the logical axes of those of its fields that are not batch-split on their
        leading axis (field name -> axes, see :func:`vidax.parallel.step.shard_step`), or None."""
        gs = call.guidance_scale if expert == 0 else call.guidance_scale_2
        if call.video_guidance is not None:  # (B,): one weight per video
            gs = [g[expert] for g in call.video_guidance]
        return StepInputs(embeds, jnp.asarray(gs, jnp.float32), cond), None

    def model_args(self, latents: jax.Array, state: Any, inputs: StepInputs, do_cfg: bool) -> tuple:
        """The transformer's arguments at one step (traced), CFG pairs batched."""
        raise NotImplementedError

    def guidance(self, state: Any, inputs: StepInputs) -> jax.Array:
        """The CFG weight of this step (traced)."""
        return inputs.guidance

    def guide(self, pred: jax.Array, state: Any, inputs: StepInputs) -> jax.Array:
        """The guided prediction from the CFG batch (2B, ...) (traced): diffusers' formula with
        the weight :meth:`guidance` gives; families with another rule (guidance rescale, a
        different formula) override it."""
        weight = self.guidance(self.step_state(state), inputs)
        return jax.tree.map(lambda p: classifier_free_guidance(p, weight), pred)

    def scheduler_update(self, state: Any, pred: Any, latents: Any, inputs: StepInputs) -> tuple:
        """``(latents, state)`` after one step (traced); with several streams each stream is
        stepped with its own state (see :meth:`set_timesteps`)."""
        if isinstance(latents, dict):
            new = {k: self.scheduler.step(state[k], pred[k], v) for k, v in latents.items()}
            return {k: v[0] for k, v in new.items()}, {k: v[1] for k, v in new.items()}
        return self.scheduler.step(state, pred, latents)

    def step_state(self, state: Any) -> Any:
        """The scheduler state that counts the steps (its timestep, its step index): ``state``
        itself, or the first stream's where there is one per latent stream (a dict,
        :meth:`set_timesteps`)."""
        return state[self.latent_streams[0]] if isinstance(state, dict) else state

    def expert_plan(self, state: Any) -> list[int]:
        """Which expert runs each step (all 0 with one transformer)."""
        return [0] * int(self.step_state(state).num_inference_steps)

    def denoise(self, call: Call, x: Any, state: Any, embeds: Any, cond: dict, stats: RunStats) -> tuple:
        """``(latents, state)`` after every step: by default each step run by the expert
        :meth:`expert_plan` picks, the steps of one expert as one segment
        (:meth:`Denoiser.segments <vidax.pipelines.run.Denoiser.segments>`)."""
        return self.denoiser.segments(self, call, x, state, embeds, cond, stats)

    def final_latents(self, call: Call, latents: jax.Array, cond: dict) -> jax.Array:
        """Latents after the last step -> what is decoded / returned."""
        return latents

    def latents_output(self, latents: jax.Array) -> np.ndarray:
        """Channels-last latents -> ``output_type="latent"`` in the family's diffusers layout."""
        return np.asarray(jnp.transpose(latents, (0, 4, 1, 2, 3)))

    def latents_to_decode(self, call: Call, latents: jax.Array) -> jax.Array:
        """The latents the VAE decodes (e.g. without padding frames)."""
        return latents

    def decode(self, call: Call, latents: jax.Array, stats: RunStats) -> np.ndarray:
        """Frames float32 (B, F, H, W, 3) in [0, 1] of the final video latents: by default
        :func:`~vidax.pipelines.output.decode_video` (the VAE contract, chunk by chunk).

        Raises:
            NumericalError: a chunk holds NaN/Inf. Cancelled: ``call.cancel()`` returned True.
        """
        return decode_video(self, call, latents, stats)

    def decode_input(self, call: Call, z: jax.Array) -> jax.Array:
        """The de-normalised latents as the VAE decodes them (e.g. with decode noise mixed in)."""
        return z

    def decode_kwargs(self, call: Call) -> dict:
        """Conditioning the VAE decode takes (e.g. a decode timestep)."""
        return {}

    def loop_latents_to_diffusers(self, x: jax.Array) -> jax.Array:
        """The denoising loop's (video) latents as diffusers' pipeline loop holds them, for
        ``callback_on_step_end``: channels-last (B, T, H, W, C) -> (B, C, T, H, W) by default."""
        return jnp.transpose(x, (0, 4, 1, 2, 3))

    def loop_latents_from_diffusers(self, y: jax.Array, like: jax.Array) -> jax.Array:
        """The inverse of :meth:`loop_latents_to_diffusers` (``like``: the loop's latents)."""
        return jnp.transpose(y, (0, 2, 3, 4, 1))

    def step_key(self) -> Any:
        """What else a compiled step depends on (e.g. the scheduler's class)."""
        return type(self.scheduler)

    def audio_latents_to_decode(self, call: Call, latents: jax.Array) -> jax.Array:
        """The audio stream's latents as the audio decoder takes them (e.g. unpacked from tokens)."""
        return latents

    def audio_latents_output(self, latents: jax.Array) -> np.ndarray:
        """The audio stream's final latents -> ``output_type="latent"``'s ``out.audio`` in the
        family's diffusers layout (as diffusers' LTX2Pipeline returns ``audio_latents``)."""
        return np.asarray(latents)
