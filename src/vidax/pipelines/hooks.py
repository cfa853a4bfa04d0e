"""The hooks a family implements (or keeps the defaults of): what its checkpoint is, which
components it loads, how a call is checked and a prompt encoded, a call's conditioning, initial
latents, the transformer's inputs of one step and the scheduler update, what is decoded. A
:class:`VideoPipeline <vidax.pipelines.base.VideoPipeline>` class names its family's
:class:`FamilyHooks` (``family``) and a loaded pipeline holds them bound to it (``pipe.hooks``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint, CheckpointInfo
from vidax.encoders.tokenizer import Truncation
from vidax.errors import Arg, ConfigError
from vidax.pipelines.call import Call, CallRule
from vidax.pipelines.call_checks import SizeLimits
from vidax.pipelines.memory import ModelSize
from vidax.pipelines.options import CallOption
from vidax.pipelines.output import decode_video
from vidax.pipelines.prompts import encode_prompts, prompt_texts, text_truncation
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
    """What a family is and how it runs, in one place: the declarations and the hooks of one
    pipeline class, with their defaults. A family subclasses it (``WanHooks``; a task's class of
    the family subclasses that, ``WanImageToVideoHooks``) and its pipeline class names it
    (``class WanPipeline(VideoPipeline): family = WanHooks``).

    Two kinds of member:

    * the declarations (class attributes: :attr:`task`, :attr:`call_options`,
      :attr:`latent_streams`, ...) and the configs-only hooks (class methods of ``(info, call)``:
      :meth:`read_checkpoint`, :attr:`call_rules`, :meth:`latent_shapes`, :meth:`model_size`, ...):
      the family's description, read before any weight exists (``WanPipeline.family.X``; the
      :class:`~vidax.pipelines.spec.FamilySpec` reads them);
    * the runtime hooks (methods: :meth:`condition`, :meth:`prepare_latents`, :meth:`step_args`,
      :meth:`model_args`, :meth:`decode`, ...), called on the instance a loaded pipeline holds,
      ``pipe.hooks = type(pipe).family(pipe)``.

    The instance is bound to its pipeline (:attr:`pipe`) and reads the pipeline's components and
    settings through it, by name (``self.pipe.vae``, ``self.pipe.dtype``, ``self.pipe.info``): an
    attribute the hooks lack raises AttributeError, so a hooks attribute never hides the
    pipeline's of the same name. What a hook sets on ``self`` stays on the hooks (a call's
    layout, a chunk's state).
    """

    # ================================================================== declarations
    #: The name of the pipeline class these hooks are declared for, as messages name it.
    pipeline_name: ClassVar[str] = "VideoPipeline"
    #: The task the class is for (``"t2v"`` / ``"i2v"``); the checkpoint must do it.
    task: ClassVar[str] = "t2v"
    #: The class takes the shared ``image=`` where its diffusers namesake's ``__call__`` does
    #: (None: where :attr:`task` is ``"i2v"``; True for a class that takes it with other tasks,
    #: as LTX-Video's condition pipeline). A class without it refuses an image, naming the
    #: family's class that runs image-to-video on the checkpoint (``class_for_task("i2v")``).
    takes_image: ClassVar[bool | None] = None
    #: Call keywords this family takes beyond :data:`~vidax.pipelines.call.SHARED_CALL_ARGS`,
    #: declared (:class:`~vidax.pipelines.options.CallOption`): their type and range are checked
    #: with the shared ones, and ``vidax generate`` offers each as a flag.
    call_options: ClassVar[tuple[CallOption, ...]] = ()
    #: The shared keywords this family does not take.
    unsupported_call_args: ClassVar[tuple[str, ...]] = ()
    #: The family's own rules of a call's check (:class:`~vidax.pipelines.call.CallRule`), run
    #: by the shared check around the checks every family runs, where its reference reads a
    #: keyword before them (a default negative prompt, a size taken from the image) or decides
    #: CFG by its own rule; none by default.
    call_rules: ClassVar[tuple[CallRule, ...]] = ()
    #: Components staged when device memory is short, in order.
    stageable: ClassVar[tuple[str, ...]] = ("text_encoder", "vae")
    #: The dtype classifier-free guidance combines predictions in (None: the model output's).
    guidance_dtype: ClassVar[Any] = None
    #: How ``latents=`` is laid out, for error messages.
    latents_layout: ClassVar[str] = "(batch, channels, latent frames, height / vae_scale, width / vae_scale)"
    #: The scheduler classes (``scheduler_config.json``'s ``_class_name``) the family's sampling
    #: loop runs; None: any scheduler vidax implements.
    scheduler_classes: ClassVar[tuple[str, ...] | None] = None
    #: The latent streams the model denoises together, by the call keyword that gives each one's
    #: initial noise: the video's (``latents``) first, then e.g. ``audio_latents``. With one
    #: stream the latents are one array everywhere; with several they are a dict keyed by these
    #: names through the loop (noise, checks, the jitted step, sharding, block streaming).
    latent_streams: ClassVar[tuple[str, ...]] = ("latents",)
    #: The stream the audio decoder decodes (one of :attr:`latent_streams`), None: no sound.
    audio_stream: ClassVar[str | None] = None
    #: How the audio stream's latents are laid out, for error messages (LTX-2's).
    audio_latents_layout: ClassVar[str] = "(batch, channels, audio latent length, latent mel bins)"
    #: The pipeline's attributes holding the audio decoder (contract
    #: :class:`~vidax.pipelines.contracts.AudioDecoder`) and the vocoder (contract
    #: :class:`~vidax.pipelines.contracts.Vocoder`; None where the decoder gives a waveform).
    audio_decoder_name: ClassVar[str] = "audio_vae"
    vocoder_name: ClassVar[str | None] = "vocoder"
    #: diffusers' keywords of a prompt's precomputed encoding (``prompt_embeds``, its mask, a
    #: pooled embedding...), in the order of :meth:`encode_prompt_parts`'s arrays; the negative
    #: prompt's are these with ``negative_`` in front. Empty: the family takes none.
    prompt_embeds_args: ClassVar[tuple[str, ...]] = ()
    #: The dtype of the masks among :attr:`prompt_embeds_args` (what the family's encoding makes).
    prompt_mask_dtype: ClassVar[Any] = np.bool_
    #: diffusers' pipeline runs the conditional and unconditional passes as separate transformer
    #: calls (a step cache then keeps one state per branch, :mod:`vidax.pipelines.step_cache`);
    #: False: one batched call, one state.
    separate_cfg_passes: ClassVar[bool] = False
    #: diffusers 0.42.1 runs this pipeline's transformer calls in cache contexts and has hook
    #: metadata for its blocks, so its cache hooks work; False (no reference to match): step
    #: caches are refused.
    cache_reference: ClassVar[bool] = True
    #: diffusers 0.42.1 registers this family's blocks in its ``TransformerBlockRegistry``, which
    #: its First-Block Cache and MagCache hooks need (False: they raise there, so vidax refuses
    #: them; TaylorSeer needs no block metadata).
    cache_block_metadata: ClassVar[bool] = True
    #: Why diffusers 0.42.1's First-Block Cache / MagCache hooks raise on this pipeline when
    #: :attr:`cache_block_metadata` is False (``{pipeline}``: the pipeline's class as the user
    #: loads it; ``{config}``: the config's class).
    cache_metadata_problem: ClassVar[str] = (
        "diffusers 0.42.1 has no block metadata for {pipeline}'s transformer "
        "blocks that its {config} hooks can use (they raise there)"
    )

    def __init__(self, pipe: Any):
        #: The loaded pipeline these hooks run (:class:`~vidax.pipelines.base.VideoPipeline`).
        self.pipe = pipe

    # ================================================================== family hooks (configs)
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> CheckpointInfo:
        """What the checkpoint is, from its configs (no weights).

        Raises:
            CheckpointError, ConfigError: a missing component or a setting vidax does not implement.
        """
        raise NotImplementedError

    @classmethod
    def class_for_task(cls, task: str) -> type | None:
        """The family's pipeline class for ``task`` (``"t2v"``, ``"i2v"``, ...), a task the
        checkpoint does; None (the default): the class these hooks are declared for."""
        return None

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
        return None if cls.makes_audio(info) else (f"{cls.pipeline_name} ({info.checkpoint.root}) makes no sound",)

    @classmethod
    def size_limits(cls, info: CheckpointInfo) -> SizeLimits:
        """The largest height / width / num_frames the model can represent (e.g. its RoPE
        tables' length); the call's check refuses more, naming the largest valid value."""
        return SizeLimits()

    @classmethod
    def model_size(cls, info: CheckpointInfo, call: Call) -> ModelSize | None:
        """The transformer's numbers for :func:`run_size_estimate` (None: no estimate)."""
        return None

    @classmethod
    def text_token_limit(cls, info: CheckpointInfo) -> tuple[int, str] | None:
        """``(largest max_sequence_length, why)`` the checkpoint's tokenizer / text encoders take
        (their position tables, the tokenizer's ``model_max_length``, the reference's bound), or
        None for no limit; the call's check refuses more."""
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
                f"from the token count), which {cls.pipeline_name} does not compute (nor does its diffusers "
                "reference); set use_dynamic_shifting to false"
            )

    # ================================================================== family hooks (loading)
    @classmethod
    def load_components(
        cls, info: CheckpointInfo, *, dtype: Any, mesh: Any, offload: Any, staging: Staging, **options: Any
    ) -> dict[str, Any]:
        """Load the modules the family runs (name -> module); see :func:`~vidax.pipelines.loading.load_component`."""
        raise NotImplementedError

    @classmethod
    def plan_staging(
        cls, info: CheckpointInfo, dtype: Any, vae_dtype: Any, offload: Any, mesh: Any, text_encoder_dtype: Any = None
    ) -> Staging:
        """Which stageable components wait in host memory, each counted at the dtype it is loaded
        in (:func:`~vidax.pipelines.loading.plan_staging`; configs and headers only)."""
        from vidax.pipelines.loading import plan_staging

        return plan_staging(cls, info, dtype, vae_dtype, offload, mesh, text_encoder_dtype)

    # ================================================================== family hooks (call)
    def check_components(self) -> None:
        """Checks of the loaded components before a call (raise InputError); the scheduler is the
        one component a user may replace (``pipe.scheduler = ...``), as in diffusers."""

    def prepare_call(self, call: Call) -> Call:
        """The checked call as it runs (the default: as given; LTX-2.5 fills in the frame count its
        duration head predicts)."""
        return call

    def video_fps(self, call: Call) -> Any:
        """Frames per second the call's video is meant to play at (``vidax generate``'s mp4 without
        ``--fps``): the checkpoint's, as its reference's examples export it."""
        return self.pipe.defaults.fps

    def encode_call(self, call: Call) -> Any:
        """The call's text embeddings before the per-video repeat:
        :func:`~vidax.pipelines.prompts.encode_prompts` of
        :func:`~vidax.pipelines.prompts.prompt_texts`; a family whose prompt encoding also reads
        the call (an image spliced into the text encoder's sequence) overrides it."""
        return encode_prompts(self.pipe, prompt_texts(call), call.max_sequence_length, text_truncation(call))

    def encode_prompt_parts(self, call: Call) -> tuple:
        """The arrays of :attr:`prompt_embeds_args` (diffusers' ``encode_prompt``'s) for
        :func:`~vidax.pipelines.prompts.prompt_texts` of ``call``, batch first: :meth:`encode_call`
        by default."""
        out = self.encode_call(call)
        return out if isinstance(out, tuple) else (out,)

    def context_of_parts(self, parts: tuple) -> Any:
        """What :meth:`encode_call` returns, from :meth:`encode_prompt_parts`'s arrays (the
        arrays themselves by default; LTX-2 runs its text connectors on them)."""
        return parts if len(parts) > 1 else parts[0]

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

    def initial_noise(self, call: Call) -> Any:
        """The initial noise of each latent stream of ``call``, float32, in the diffusers layout
        (:func:`~vidax.pipelines.run.initial_noise` of :meth:`latent_shapes`): one stream's
        array, or a dict keyed by :attr:`latent_streams`."""
        from vidax.pipelines.run import initial_noise

        return initial_noise(self.latent_shapes(self.pipe.info, call), self.latent_streams[0], call)

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
        return self.pipe.scheduler.set_timesteps(call.num_inference_steps, sample_shape=latents.shape)

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
            new = {k: self.pipe.scheduler.step(state[k], pred[k], v) for k, v in latents.items()}
            return {k: v[0] for k, v in new.items()}, {k: v[1] for k, v in new.items()}
        return self.pipe.scheduler.step(state, pred, latents)

    def step_state(self, state: Any) -> Any:
        """The scheduler state that counts the steps (its timestep, its step index): ``state``
        itself, or the first stream's where there is one per latent stream (a dict,
        :meth:`set_timesteps`)."""
        return state[self.latent_streams[0]] if isinstance(state, dict) else state

    def expert_plan(self, state: Any) -> list[int]:
        """Which expert runs each step (all 0 with one transformer)."""
        return [0] * int(self.step_state(state).num_inference_steps)

    def denoise(self, call: Call, x: Any, embeds: Any, cond: dict, stats: RunStats) -> Any:
        """The latents after every step of the call's schedule (:meth:`set_timesteps` of the
        prepared latents ``x``): by default each step run by the expert :meth:`expert_plan` picks,
        the steps of one expert as one segment
        (:meth:`Denoiser.segments <vidax.pipelines.denoiser.Denoiser.segments>`)."""
        state = self.set_timesteps(call, x)
        return self.pipe.denoiser.segments(self.pipe, call, x, state, embeds, cond, stats)[0]

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
        return decode_video(self.pipe, call, latents, stats)

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
        return type(self.pipe.scheduler)

    def audio_latents_to_decode(self, call: Call, latents: jax.Array) -> jax.Array:
        """The audio stream's latents as the audio decoder takes them (e.g. unpacked from tokens)."""
        return latents

    def audio_latents_output(self, latents: jax.Array) -> np.ndarray:
        """The audio stream's final latents -> ``output_type="latent"``'s ``out.audio`` in the
        family's diffusers layout (as diffusers' LTX2Pipeline returns ``audio_latents``)."""
        return np.asarray(latents)
