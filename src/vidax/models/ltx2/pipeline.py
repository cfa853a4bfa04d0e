"""LTX-2 text-to-video with its soundtrack: the hooks of :class:`~vidax.pipelines.base.VideoPipeline`.

Reference (diffusers 0.42.1): ``LTX2Pipeline`` (``pipelines/ltx2/pipeline_ltx2.py``).

* Text: Gemma 3 (LTX-2.5: Gemma 4, :mod:`vidax.encoders.gemma4`; the class model_index.json gives
  the text encoder picks it) on ``max_sequence_length`` (1024) left-padded tokens, every hidden
  state stacked (:func:`~vidax.encoders.gemma3.gemma_prompt_embeds`), then the text connectors: one
  context for the video stream, one for the audio stream, and their all-ones mask.
* Length (LTX-2.5, a ``duration_head`` in model_index.json, ``num_frames`` not given): the duration
  head's prediction from the first prompt's connector outputs, clamped to ``[min_seconds,
  max_seconds]`` (1, 20) and snapped to ``8 n + 1`` frames, as the reference. Unlike the reference,
  ``latents=`` / ``audio_latents=`` then need ``num_frames=`` (their shapes are checked before the
  prediction could run).
* Latents, two streams: ``latents=`` packed ``(B, F' x H' x W', C)`` video tokens (taken as the
  reference takes 3-D latents: already normalised) and ``audio_latents=`` ``(B, C_a, L, M)``
  (normalised with the audio VAE's statistics, as the reference does with given audio
  latents); with ``noise_scale`` > 0 each given stream is ``s noise + (1 - s) latents``.
  The audio length is ``round(num_frames / frame_rate x sample_rate / mel_hop / 4)`` latents.
* Schedule: sigmas ``linspace(1, 1/N, N)`` (or ``sigmas=``) shifted by ``mu`` of the video token
  count (LTX-Video's :func:`~vidax.models.ltx.pipeline.shifted_schedule`); each stream steps
  with its own copy of the Euler scheduler.
* Guidance, as the reference, on the predicted x0 (``x - sigma v``) of each stream: CFG, STG on
  ``spatio_temporal_guidance_blocks``, modality-isolation guidance, guidance rescale, each with
  its audio scale (None or 0: the video one), at the reference's defaults (3 / 7, 1, 3, 0.7,
  blocks ``[28]``): :mod:`vidax.models.ltx2.guidance`; back to a velocity for the Euler step.
  ``use_cross_timestep`` (True) as the reference.
* RoPE: video coordinates at ``frame_rate / motion_speed`` fps, audio coordinates from the audio
  length; the tables computed once per call on the host.
* Decode: the video as LTX-2's reference (decode noise ``(1 - s) z + s n`` mixed into the
  normalised latents, then de-normalised, decoded at ``decode_timestep`` where the VAE is
  timestep-conditioned); the sound by the audio VAE (mel) and the vocoder at its sample rate.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import CallDefaults, Checkpoint
from vidax.encoders.gemma3 import gemma_prompt_embeds, gemma_prompt_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import Arg, ConfigError, InputError
from vidax.models.ltx.config import LTXInfo
from vidax.models.ltx.pipeline import (
    LTX_DECODE_OPTIONS,
    LTXHooks,
    check_ltx_args,
    check_shifted_schedule,
    decode_noise,
    decode_timestep_kwargs,
    first_frame_condition,
    frame_rate_fps,
    linspace_sigmas,
    ltx_model_size,
    packed_latent_shape,
    shifted_schedule,
    unpacked_latents,
)
from vidax.models.ltx.upsampler import normalize_latents
from vidax.models.ltx2 import guidance
from vidax.models.ltx2.audio_vae import pack_latents, unpack_latents
from vidax.models.ltx2.config import LTX2AudioVAEConfig, LTX2VideoVAEConfig
from vidax.models.ltx2.config_transformer import LTX2ConnectorsConfig, LTX2TransformerConfig
from vidax.pipelines.base import ModelSize, VideoPipeline, finite_array, frames_of_form, prompt_texts, text_truncation
from vidax.pipelines.call import CallRule
from vidax.pipelines.diffusers_keywords import refused_value_reason
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TEXT_ENCODER, TRANSFORMER, VAE, ComponentTable, Weighted
from vidax.pipelines.options import FRAME_RATE_RANGE, OBJECT, CallOption, int_list
from vidax.pipelines.prompts import encode_prompts, encode_with
from vidax.pipelines.step_inputs import StepInputs, step_inputs

logger = logging.getLogger("vidax.pipeline")

_F32 = jnp.float32

#: The keywords of LTX2Pipeline beyond the shared ones (diffusers' names).
#: Prompt enhancement (diffusers' LTX-2 enable_prompt_enhancement) is refused; these keywords only act
#: with it, so they are taken and checked, and change nothing, as in diffusers without it.
PROMPT_ENHANCEMENT_OPTIONS = (
    CallOption(
        "enable_prompt_enhancement",
        bool,
        "diffusers' prompt enhancement: only False (the default) runs.",
        "False",
        choices=(False,),
        flag=False,
        valid="False (" + refused_value_reason("enable_prompt_enhancement") + ")",
    ),
    CallOption(
        "system_prompt",
        str,
        "The prompt enhancer's system prompt (only read with enable_prompt_enhancement).",
        "None",
        flag=False,
    ),
    CallOption(
        "prompt_max_new_tokens",
        int,
        "The prompt enhancer's token budget (only read with enable_prompt_enhancement).",
        "None",
        low=1,
        flag=False,
    ),
    CallOption(
        "prompt_enhancement_kwargs",
        OBJECT,
        "The prompt enhancer's generation keywords (only read with enable_prompt_enhancement).",
        "None",
    ),
    CallOption(
        "prompt_enhancement_seed",
        int,
        "The prompt enhancer's seed (only read with enable_prompt_enhancement).",
        "10",
        flag=False,
    ),
)

LTX2_OPTIONS = (
    PROMPT_ENHANCEMENT_OPTIONS
    + (
        CallOption(
            "frame_rate",
            float,
            "Frame rate of the video (LTX-2: the model conditions on it, the sound "
            "lasts num_frames / frame_rate seconds, default 24). Also the mp4's unless --fps is given.",
            "24",
            low=FRAME_RATE_RANGE[0],
            high=FRAME_RATE_RANGE[1],
        ),
        CallOption(
            "motion_speed",
            float,
            "Speed of the motion relative to real time (LTX-2): the positions are "
            "conditioned on frame_rate / motion_speed.",
            "1",
            low=0,
            low_open=True,
        ),
        CallOption(
            "guidance_rescale",
            float,
            "Guidance rescale factor phi (LTX-2: of the video, default 0.7).",
            "0.7",
            low=0,
            high=1,
        ),
        CallOption("audio_guidance_scale", float, "CFG scale of the sound (LTX-2); 0: guidance_scale.", "7", low=0),
        CallOption(
            "audio_guidance_rescale",
            float,
            "Guidance rescale factor of the sound (LTX-2); 0: guidance_rescale.",
            "0.7",
            low=0,
            high=1,
        ),
        CallOption(
            "stg_scale",
            float,
            "Spatio-temporal guidance scale of the video (LTX-2): away from the pass "
            "whose spatio_temporal_guidance_blocks' self-attention is perturbed; 0: off.",
            "1",
            low=0,
        ),
        CallOption(
            "audio_stg_scale", float, "Spatio-temporal guidance scale of the sound (LTX-2); 0: stg_scale.", "1", low=0
        ),
        CallOption(
            "modality_scale",
            float,
            "Modality-isolation guidance scale of the video (LTX-2): away from the "
            "pass without audio<->video attention; 1: off.",
            "3",
            low=0,
        ),
        CallOption(
            "audio_modality_scale",
            float,
            "Modality-isolation guidance scale of the sound (LTX-2); 0: modality_scale.",
            "3",
            low=0,
        ),
        CallOption(
            "spatio_temporal_guidance_blocks",
            OBJECT,
            "Transformer blocks STG perturbs (LTX-2: diffusers' "
            "spatio_temporal_guidance_blocks; --stg-blocks 28,29 on the command line, each in [0, the "
            "transformer's num_layers)).",
            "[28]",
            cli=int_list,
            flag_spelling="--stg-blocks",
            valid="transformer block indices separated by commas (28,29)",
        ),
        CallOption(
            "use_cross_timestep",
            bool,
            "Modulate the audio<->video attention with the other modality's sigma (LTX-2).",
            "True",
        ),
        CallOption(
            "noise_scale",
            float,
            "Noise mixed into the given latents / audio_latents, s noise + (1 - s) latents (LTX-2, default 0).",
            "0",
            low=0,
            high=1,
        ),
        CallOption("sigmas", OBJECT, "Custom sigmas before the shift, strictly descending in (0, 1] (LTX-2)."),
        CallOption(
            "min_seconds",
            float,
            "Lower bound of the clip length the duration head predicts when num_frames is not given (LTX-2.5).",
            "1",
            low=0,
            low_open=True,
        ),
        CallOption(
            "max_seconds",
            float,
            "Upper bound of the clip length the duration head predicts when num_frames is not given (LTX-2.5).",
            "20",
            low=0,
            low_open=True,
        ),
    )
    + LTX_DECODE_OPTIONS
)

#: LTX2Pipeline.__call__'s duration bounds (seconds) for the duration head.
MIN_SECONDS, MAX_SECONDS = 1.0, 20.0


@dataclasses.dataclass(frozen=True)
class LTX2Info(LTXInfo):
    """An LTX-2 folder's configs (:class:`~vidax.models.ltx.config.LTXInfo` plus the sound and
    the text connectors).

    Attributes:
        connectors_config, audio_vae_config: the component configs.
        vocoder_config: ``vocoder/config.json`` (its ``output_sampling_rate``).
        duration_head: the checkpoint has LTX-2.5's duration head (``num_frames`` not given: its
            prediction).
    """

    connectors_config: LTX2ConnectorsConfig = None
    audio_vae_config: LTX2AudioVAEConfig = None
    vocoder_config: Mapping[str, Any] = None
    duration_head: bool = False

    def audio_length(self, num_frames: int, frame_rate: float) -> int:
        """Latent audio frames of a ``num_frames`` video at ``frame_rate`` (the reference's
        ``round(duration x sample_rate / mel_hop_length / 4)``)."""
        a = self.audio_vae_config
        per_second = a.sample_rate / a.mel_hop_length / float(a.latent_downsample)
        return round(num_frames / frame_rate * per_second)

    @property
    def audio_mel_bins(self) -> int:
        """Latent mel bins ``M`` (``mel_bins / 4``)."""
        a = self.audio_vae_config
        return a.mel_bins // a.latent_downsample


def read_ltx2_checkpoint(checkpoint: Checkpoint) -> LTX2Info:
    """Read and cross-check an LTX-2 folder's configs.

    Raises:
        CheckpointError: a component folder is missing. ConfigError: a scheduler other than
            FlowMatchEulerDiscreteScheduler, channels that do not fit the VAEs, patch sizes other
            than 1.
    """
    ckpt = checkpoint
    ckpt.require("tokenizer", "text_encoder", "connectors", "transformer", "vae", "audio_vae", "vocoder", "scheduler")
    cfg = ckpt.typed_config("transformer", LTX2TransformerConfig)
    vae = ckpt.typed_config("vae", LTX2VideoVAEConfig)
    audio = ckpt.typed_config("audio_vae", LTX2AudioVAEConfig)
    where = ckpt.config_file("transformer")
    if cfg.in_channels != vae.latent_channels or cfg.out_dim != vae.latent_channels:
        raise ConfigError(
            f"{where}: in_channels={cfg.in_channels}, out_channels={cfg.out_dim} do not fit the VAE's "
            f"latent_channels={vae.latent_channels}"
        )
    if (cfg.patch_size, cfg.patch_size_t) != (1, 1):
        raise ConfigError(
            f"{where}: patch_size={cfg.patch_size}, patch_size_t={cfg.patch_size_t}; LTX2Pipeline "
            "packs latents with patch size 1"
        )
    if audio.mel_bins is None:
        raise ConfigError(f"{ckpt.config_file('audio_vae')}: mel_bins is null; LTX2Pipeline needs the mel bins")
    features = audio.latent_channels * (audio.mel_bins // audio.latent_downsample)
    if cfg.audio_in_channels != features or cfg.audio_out_dim != features:
        raise ConfigError(
            f"{where}: audio_in_channels={cfg.audio_in_channels}, audio_out_channels="
            f"{cfg.audio_out_dim} do not fit the audio VAE's latent_channels x mel_bins / 4 = {features}"
        )
    sched = ckpt.config("scheduler")
    if sched.get("_class_name") != "FlowMatchEulerDiscreteScheduler":
        raise ConfigError(
            f"{ckpt.config_file('scheduler')}: _class_name={sched.get('_class_name')!r}; LTX2Pipeline "
            "runs FlowMatchEulerDiscreteScheduler"
        )
    s, k = vae.spatial_compression, vae.temporal_compression
    variant = (
        f"LTX-2 T2V with sound: {cfg.num_layers} layers, width {cfg.inner_dim} (audio "
        f"{cfg.audio_inner_dim}), VAE {k}x{s}x{s}" + (", duration head" if ckpt.has("duration_head") else "")
    )
    # LTX2Pipeline.__call__'s defaults: 512x768, 121 frames at 24 fps, 30 steps, guidance 3, 1024 tokens.
    defaults = CallDefaults(
        height=512,
        width=768,
        num_frames=121,
        num_inference_steps=30,
        guidance_scale=3.0,
        max_sequence_length=1024,
        fps=24,
    )
    m = max(32, s)
    return LTX2Info(
        checkpoint=ckpt,
        tasks=("t2v", "i2v", "v2v"),
        variant=variant,
        defaults=defaults.for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(m, m),
        size_reason="LTX2Pipeline's check_inputs" if m == 32 else f"the VAE's {s}x",
        transformer_config=cfg,
        vae_config=vae,
        scheduler_config=dict(sched),
        connectors_config=ckpt.typed_config("connectors", LTX2ConnectorsConfig),
        audio_vae_config=audio,
        vocoder_config=dict(ckpt.config("vocoder")),
        duration_head=ckpt.has("duration_head"),
    )


#: The distilled checkpoints' schedule (diffusers' ``pipelines/ltx2/utils.py``), given as
#: ``sigmas=`` with ``guidance_scale=1`` as the reference's examples do; the shift applies as to
#: any ``sigmas=``.
DISTILLED_SIGMA_VALUES = (1.0, 0.99375, 0.9875, 0.98125, 0.975, 0.909375, 0.725, 0.421875)
#: Its second-stage part (after the latent upsampler).
STAGE_2_DISTILLED_SIGMA_VALUES = (0.909375, 0.725, 0.421875)

#: The ``call.extra`` key that marks ``latents=`` given 5-D (the reference normalises those).
UNNORMALIZED = "_latents_unnormalized"


def _frame_rate(info: LTX2Info, call) -> float:
    """``frame_rate=``, else the checkpoint's fps (24, LTX2Pipeline's default)."""
    rate = call.extra.get("frame_rate")
    return float(info.defaults.fps if rate is None else rate)


def _predicts_duration(info: LTX2Info, call) -> bool:
    """``num_frames`` not given on a checkpoint with a duration head."""
    return info.duration_head and "num_frames" not in call.given


@step_inputs
class LTX2StepInputs(StepInputs):
    """The step inputs of LTX-2: ``embeds`` the video context and ``audio_embeds`` the audio
    context of every pass of the batch, ``text_mask`` their attention mask, ``guidance`` the
    call's :class:`~vidax.models.ltx2.guidance.LTX2Guidance`, ``rope`` the RoPE tables of the
    batch; where frames are conditioned (:class:`LTX2Hooks`)
    ``token_mask`` (B, N) and ``clean`` (B, N, C) float32 over the video tokens (else None)."""

    audio_embeds: Any = None
    text_mask: Any = None
    rope: Any = None
    token_mask: Any = None
    clean: Any = None


#: The components: Gemma and the text connectors on the mesh, the duration head (LTX-2.5 only),
#: the transformer, the VAE in ``vae_dtype``, the audio VAE and vocoder in float32.
SOUND = Weighted(dtype=jnp.float32, staged=True)
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer},
    weighted={
        "text_encoder": TEXT_ENCODER,
        "connectors": Weighted(mesh=True),
        "duration_head": Weighted(),
        "transformer": TRANSFORMER,
        "vae": VAE,
        "audio_vae": SOUND,
        "vocoder": SOUND,
    },
)


def _five_dimensional_latents(family: Any, keywords: Mapping) -> Any:
    """The call's ``latents=`` where the family packs them and they are given 5-dimensional
    ``(B, C, F', H', W')`` (else None)."""
    latents = keywords.get("latents")
    return latents if family.packed_latents and latents is not None and np.ndim(latents) == 5 else None


def _ltx2_keywords(family: Any, info: LTX2Info, keywords: dict) -> dict:
    """Before the shared checks: given latents with no ``num_frames`` refused where a duration head
    would predict the length; 5-dimensional ``latents=`` held back (packed by :func:`_ltx2_call`)."""
    given = [n for n in ("latents", "audio_latents") if keywords.get(n) is not None]
    if info.duration_head and keywords.get("num_frames") is None and given:
        # (their shapes are checked against the frame count before a prediction could run)
        raise InputError(
            Arg(given[0]),
            " fixes the clip length: give ",
            Arg("num_frames"),
            " with it (the duration head predicts one only when neither is given)",
        )
    return {**keywords, "latents": None} if _five_dimensional_latents(family, keywords) is not None else keywords


def _ltx2_call(family: Any, info: LTX2Info, call: Any, keywords: Mapping) -> Any:
    """After the shared checks: one prompt where the duration head predicts the length, 5-dimensional
    ``latents=`` packed (normalised in ``prepare_latents``), and CFG where ``guidance_scale`` or
    ``audio_guidance_scale`` is > 1 (the reference's ``do_classifier_free_guidance``)."""
    if _predicts_duration(info, call) and len(call.prompts) > 1:
        raise InputError(
            Arg("num_frames"),
            f" not given asks the duration head for one clip length, but "
            f"{len(call.prompts)} prompts were given; give num_frames= or one prompt (as "
            "LTX2Pipeline)",
        )
    latents = _five_dimensional_latents(family, keywords)
    if latents is not None:
        value = finite_array("latents", latents)
        b, n, c = family.latent_shape(info, call)
        shape = (b, c, *info.latent_grid(call.num_frames, call.height, call.width))
        if value.shape != shape:
            raise InputError(
                f"latents have shape {value.shape}, expected {shape} = (batch, latent channels, "
                f"latent frames, height/{info.vae_config.spatial_compression}, width/"
                f"{info.vae_config.spatial_compression}) or packed {(b, n, c)} for these arguments"
            )
        call = dataclasses.replace(
            call, latents=value.transpose(0, 2, 3, 4, 1).reshape(b, n, c), extra={**call.extra, UNNORMALIZED: True}
        )
    return dataclasses.replace(call, cfg=guidance.does_cfg(call.extra, call.guidance_scale))


class LTX2Hooks(FamilyHooks):
    """The LTX-2 family's hooks, in one place: what :class:`LTX2Pipeline`,
    :class:`~vidax.models.ltx2.pipeline_i2v.LTX2ImageToVideoPipeline` and
    :class:`~vidax.models.ltx2.pipeline_condition.LTX2ConditionPipeline` share (:class:`LTX2Pipeline`'s own; each other class's hooks subclass them and declare
    its task, keywords and own hooks). LTX-Video's
    parts come from the functions of :mod:`vidax.models.ltx.pipeline`.

    A pipeline with ``packed_latents`` False takes 5-D ``latents=`` as they are; where its
    :meth:`condition` returns ``mask`` (B, N) float32 and ``clean`` (B, N, C) float32 over the
    video tokens (N may include appended condition tokens), they go to every step as
    :class:`LTX2StepInputs`' ``token_mask`` and ``clean``: the video tokens' timestep is ``t (1 -
    mask)`` and the guided x0 ``x0 (1 - mask) + clean mask`` (:mod:`vidax.models.ltx2.conditioning`).
    """

    #: diffusers' ``encode_prompt`` output: Gemma's stacked hidden states ``(B, L, D (n + 1))`` and
    #: their mask; the text connectors run on them in the call (:meth:`context_of_parts`).
    pipeline_name = "LTX2Pipeline"
    latents_layout = "(batch, latent frames x height/32 x width/32, latent channels) packed tokens"
    call_options = LTX2_OPTIONS
    prompt_embeds_args = ("prompt_embeds", "prompt_attention_mask")
    prompt_mask_dtype = np.int32
    #: ``latents=`` are packed ``(B, N, C)`` tokens; 5-D ones are packed by the call's check
    #: (:func:`_ltx2_call`; False: the pipeline takes 5-D latents as they are).
    packed_latents = True
    call_rules = (CallRule(_ltx2_keywords, _ltx2_call),)
    latent_streams = ("latents", "audio_latents")
    # diffusers 0.42.1 registers no block metadata for LTX2VideoTransformerBlock: its First-Block
    # Cache and MagCache raise there. TaylorSeer runs.
    cache_block_metadata = False
    audio_stream = "audio_latents"
    stageable = ("text_encoder", "vae", "audio_vae", "vocoder")
    guidance_dtype = _F32

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> LTX2Info:
        return read_ltx2_checkpoint(checkpoint)

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """``t2v``: LTX2Pipeline; ``i2v``: LTX2ImageToVideoPipeline; ``v2v``: LTX2ConditionPipeline
        (the same weights do all three, as in diffusers)."""
        from vidax.registry import registry

        name = {"t2v": "LTX2Pipeline", "i2v": "LTX2ImageToVideoPipeline", "v2v": "LTX2ConditionPipeline"}[task]
        return registry().pipeline(name).load()  # the family's registration (they import this module)

    @classmethod
    def latent_shape(cls, info: LTX2Info, call) -> tuple[int, ...]:
        """Packed video tokens ``(B, F' H' W', C)``."""
        return packed_latent_shape(info, call)

    @classmethod
    def resolve_num_frames(cls, info: LTX2Info, num_frames: int) -> int:
        return frames_of_form(num_frames, info.vae_config.temporal_compression, "LTX2Pipeline")

    @classmethod
    def latent_shapes(cls, info: LTX2Info, call) -> dict[str, tuple[int, ...]]:
        """Video tokens ``(B, F' H' W', C)`` (``packed_latents`` False: ``(B, C, F', H', W')``,
        the reference's 5-D layout) and audio latents ``(B, C_a, L, M)``."""
        a = info.audio_vae_config
        length = info.audio_length(call.num_frames, _frame_rate(info, call))
        if cls.packed_latents:
            video = cls.latent_shape(info, call)
        else:
            video = (
                call.batch,
                info.transformer_config.in_channels,
                *info.latent_grid(call.num_frames, call.height, call.width),
            )
        return {"latents": video, "audio_latents": (call.batch, a.latent_channels, length, info.audio_mel_bins)}

    @classmethod
    def model_size(cls, info: LTX2Info, call) -> ModelSize:
        """LTX-Video's, plus the sound's tokens: every step attends over one token per audio
        latent frame (``num_frames / frame_rate`` seconds of sound, :meth:`LTX2Info.audio_length`);
        the step's batch has one row per guidance pass (:func:`~vidax.models.ltx2.guidance.guidance_passes`)."""
        size = ltx_model_size(info, call)
        return dataclasses.replace(
            size,
            tokens=size.tokens + info.audio_length(call.num_frames, _frame_rate(info, call)),
            passes=guidance.guidance_passes(
                call.extra, call.guidance_scale, call.do_cfg, info.transformer_config.perturbed_attn
            ),
        )

    @classmethod
    def schedule_sigmas(cls, call) -> np.ndarray:
        """``sigmas=`` when given, else ``linspace(1, 1/N, N)``."""
        sigmas = call.extra.get("sigmas")
        return linspace_sigmas(call) if sigmas is None else np.asarray(sigmas, np.float64)

    @classmethod
    def check_schedule(cls, info: LTX2Info, scheduler: Any, call) -> None:
        """LTX-Video's check (:func:`~vidax.models.ltx.pipeline.check_shifted_schedule`) of :meth:`schedule_sigmas`."""
        check_shifted_schedule(info, scheduler, call, cls.schedule_sigmas(call))

    @classmethod
    def schedule(cls, info: LTX2Info, scheduler: Any, call) -> Any:
        """The scheduler state of ``call`` (host arithmetic only): :meth:`schedule_sigmas` shifted
        by ``mu`` of the video token count (:meth:`extra_tokens` included) where the config
        shifts dynamically."""
        f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        return shifted_schedule(scheduler, cls.schedule_sigmas(call), f * h * w + cls.extra_tokens(info, call))

    @classmethod
    def extra_tokens(cls, info: LTX2Info, call) -> int:
        """Video tokens appended after the clip's (conditions past latent frame 0); none here."""
        return 0

    @classmethod
    def default_length(cls, info: LTX2Info) -> str:
        """As :meth:`FamilyHooks.default_length`; with a duration head (LTX-2.5) the length it
        predicts from the prompt."""
        if not info.duration_head:
            return super().default_length(info)
        return f"frames predicted by the duration head ({MIN_SECONDS:g}-{MAX_SECONDS:g} s; --num-frames overrides)"

    @classmethod
    def check_family_call(cls, info: LTX2Info, call) -> None:
        """The STG blocks, ``sigmas`` descending in (0, 1], the decode keywords, a sound at least
        one latent long."""
        x = call.extra
        cfg = info.transformer_config
        guidance.check_guidance(x, call.guidance_scale, cfg.num_layers, cfg.perturbed_attn)
        if x.get("sigmas") is not None:
            try:
                s = np.asarray(x["sigmas"], np.float64)
            except (TypeError, ValueError):
                s = np.asarray([np.nan])
            if (
                s.ndim != 1
                or s.size == 0
                or not np.all(np.isfinite(s))
                or np.any(np.diff(s) >= 0)
                or s[0] > 1
                or s[-1] <= 0
            ):
                raise InputError(Arg("sigmas", x["sigmas"]), " must be a strictly descending list of numbers in (0, 1]")
        for bound in (b for b in ("min_seconds", "max_seconds") if b in call.given):
            if not info.duration_head:
                raise InputError(
                    Arg(bound, x[bound]),
                    f" bounds the clip length LTX-2.5's duration head predicts, but "
                    f"{info.checkpoint.root} has no duration head; leave it out (the length is ",
                    Arg("num_frames"),
                    ")",
                )
            if "num_frames" in call.given:
                raise InputError(
                    Arg(bound, x[bound]),
                    " bounds the length the duration head predicts, which it predicts only without ",
                    Arg("num_frames"),
                    "; give one of them",
                )
        lo, hi = float(x.get("min_seconds", MIN_SECONDS)), float(x.get("max_seconds", MAX_SECONDS))
        if lo >= hi:
            raise InputError(
                Arg("min_seconds", lo),
                " must be less than ",
                Arg("max_seconds", hi),
                " (the range the duration head's prediction is clamped to)",
            )
        check_ltx_args(info, call)
        if info.audio_length(call.num_frames, _frame_rate(info, call)) < 1:
            raise InputError(
                Arg("num_frames", call.num_frames),
                " at ",
                Arg("frame_rate", _frame_rate(info, call)),
                " makes a sound shorter than one audio latent; give more frames or a lower frame rate",
            )

    def video_fps(self, call):
        """The ``frame_rate`` the model conditioned on, when given (else the checkpoint's)."""
        return frame_rate_fps(call, self.pipe.defaults.fps)

    def prepare_call(self, call):
        """As the reference with ``num_frames=None`` on a checkpoint with a duration head: the
        frame count it predicts for the (first) prompt (:meth:`predict_num_frames`), then the run."""
        if _predicts_duration(self.pipe.info, call):
            call = dataclasses.replace(call, num_frames=self.predict_num_frames(call))
        return call

    def predict_num_frames(self, call) -> int:
        """The duration head's frame count for ``call.prompts[0]`` (``LTX2Pipeline.__call__`` with
        ``num_frames=None``): its connector outputs into the head, the seconds clamped to
        ``[min_seconds, max_seconds]`` and snapped to the VAE's ``k n + 1`` frames
        (:func:`~vidax.models.ltx2.duration_head.duration_num_frames`)."""
        from vidax.models.ltx2.duration_head import duration_num_frames

        video, audio, _ = encode_prompts(self.pipe, call.prompts[:1], call.max_sequence_length)
        seconds = float(np.asarray(self.pipe.duration_head(video, audio))[0])
        x = call.extra
        frames = duration_num_frames(
            seconds,
            frame_rate=_frame_rate(self.pipe.info, call),
            temporal_compression_ratio=self.pipe.info.vae_config.temporal_compression,
            min_seconds=float(x.get("min_seconds", MIN_SECONDS)),
            max_seconds=float(x.get("max_seconds", MAX_SECONDS)),
        )
        logger.info("duration head: %.2f s -> %d frames", seconds, frames)
        return frames

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls, info: LTX2Info, *, dtype, mesh, offload, staging, offload_experts=True, vae_dtype: Any = jnp.float32
    ) -> dict[str, Any]:
        """Tokenizer, Gemma 3 / 4, the connectors, the duration head (LTX-2.5), the transformer, the VAE (``vae_dtype``), the audio
        VAE and vocoder (float32), scheduler; every checkpoint checked before the first weight."""
        skip = () if info.duration_head else ("duration_head",)
        return COMPONENTS.load(
            info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, skip=skip, vae_dtype=vae_dtype
        )

    # ------------------------------------------------------------------ call hooks
    def encode_text(self, texts, max_sequence_length, truncation=None):
        """``(video context (B, L, D_v), audio context (B, L, D_a), mask (B, L))``: Gemma 3's
        stacked hidden states of the left-padded prompts through the text connectors."""
        return self.context_of_parts(self.gemma_states(texts, max_sequence_length, truncation))

    def gemma_states(self, texts, max_sequence_length, truncation=None) -> tuple[jax.Array, jax.Array]:
        """``(states (B, L, D (n + 1)), mask (B, L) int32)``: Gemma 3's stacked hidden states of
        the left-padded prompts (diffusers' ``_get_gemma_prompt_embeds``)."""
        tokens = gemma_prompt_tokens(self.pipe.tokenizer, texts, max_sequence_length, truncation=truncation)
        mask = jnp.asarray(tokens.attention_mask, jnp.int32)
        return gemma_prompt_embeds(self.pipe.text_encoder, jnp.asarray(tokens.input_ids), mask), mask

    def encode_prompt_parts(self, call) -> tuple:
        """``prompt_embeds`` / ``prompt_attention_mask`` as diffusers' ``encode_prompt`` makes
        them: :meth:`gemma_states`, before the connectors."""
        return encode_with(
            self.pipe,
            "text_encoder",
            self.gemma_states,
            prompt_texts(call),
            call.max_sequence_length,
            text_truncation(call),
        )

    def context_of_parts(self, parts: tuple) -> tuple:
        """The text connectors on ``(states, mask)`` (left padding, the tokenizer's side, as the
        reference), the states in the pipeline's dtype (the text encoder's)."""
        states, mask = parts
        with self.pipe.precision():
            return self.pipe.connectors(
                jnp.asarray(states, self.pipe.dtype), jnp.asarray(mask, jnp.int32), padding_side="left"
            )

    def condition(self, call, stats) -> dict:
        """``image=`` on the text-to-video class: LTX-Video's first-frame condition
        (:func:`~vidax.models.ltx.pipeline.first_frame_condition`)."""
        return first_frame_condition(self.pipe, call, stats)

    def encode_condition(self, pixels: np.ndarray) -> np.ndarray:
        """Frames ``(F, H, W, 3)`` float32 in [-1, 1] -> their normalised latent ``(1, F', H',
        W', C)``: the VAE posterior's mode (``retrieve_latents(..., "argmax")``), ``(z - mean) /
        std`` (no scaling factor, as the reference's ``_normalize_latents`` default)."""
        mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, jnp.asarray(pixels)[None])
        return normalize_latents(mean.astype(_F32), self.pipe.vae.latents_mean[...], self.pipe.vae.latents_std[...])

    def prepare_latents(self, call, noise, cond):
        """Video tokens -> channels-last ``(B, F', H', W', C)``, normalised when given 5-D;
        audio ``(B, C_a, L, M)`` -> packed ``(B, L, C_a M)``, normalised when given;
        ``noise_scale`` noise mixed into the given streams."""
        video, audio = noise["latents"], pack_latents(noise["audio_latents"])
        if call.extra.get(UNNORMALIZED):
            video = self.pipe.vae.normalize_latents(video)
        if call.stream_latents.get("audio_latents") is not None:
            audio = self.pipe.audio_vae.normalize_latents(audio)
        s = float(call.extra.get("noise_scale", 0.0))
        key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 3)
        for i, given in enumerate((call.latents is not None, call.stream_latents.get("audio_latents") is not None)):
            if given and s > 0:
                x = (video, audio)[i]
                x = s * jax.random.normal(jax.random.fold_in(key, i), x.shape, _F32) + (1 - s) * x
                video, audio = (x, audio) if i == 0 else (video, x)
        return {"latents": unpacked_latents(self.pipe.info, call, video, cond), "audio_latents": audio}

    def set_timesteps(self, call, latents):
        self.check_schedule(self.pipe.info, self.pipe.scheduler, call)  # a replaced scheduler: its own limit, named
        state = self.schedule(self.pipe.info, self.pipe.scheduler, call)
        return {"latents": state, "audio_latents": state}

    def step_args(self, call, embeds, cond, state, expert):
        """:class:`LTX2StepInputs`: the contexts and mask of every pass of the batch
        (:class:`~vidax.models.ltx2.guidance.LTX2Guidance`'s rows), the RoPE tables of that batch;
        with ``cond["mask"]`` the mask ``(B, N)`` and clean latents ``(B, N, C)``."""
        x = call.extra
        model = self.pipe.transformer
        g = guidance.call_guidance(x, call.guidance_scale, call.do_cfg, model.config.perturbed_attn)
        coords = self.rope_coordinates(call, cond, call.batch * g.rows)
        context, audio_context, mask = (g.extend(e, call.batch) for e in embeds)
        inputs = LTX2StepInputs(context, g, audio_embeds=audio_context, text_mask=mask, rope=model.rope_tables(*coords))
        if "mask" in cond:
            inputs = dataclasses.replace(
                inputs, token_mask=jnp.asarray(cond["mask"], _F32), clean=jnp.asarray(cond["clean"], _F32)
            )
        return inputs, None

    def rope_coordinates(self, call, cond, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """The video ``(batch, 3, N, 2)`` and audio ``(batch, 1, M, 2)`` coordinates (numpy float32)
        at ``frame_rate / motion_speed`` fps (a conditioned pipeline appends its extra tokens')."""
        rate = _frame_rate(self.pipe.info, call)
        f, h, w = self.pipe.info.latent_grid(call.num_frames, call.height, call.width)
        return self.pipe.transformer.rope_coords(
            batch,
            f,
            h,
            w,
            rate / float(call.extra.get("motion_speed", 1.0)),
            self.pipe.info.audio_length(call.num_frames, rate),
        )

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """The transformer's positional arguments (:meth:`LTX2VideoTransformer3DModel.embed`):
        packed video / audio tokens, both contexts, timestep (also the sigma LTX-2.3 and the
        cross timestep take), the text mask, the STG blocks and masks, the RoPE tables, the
        cross-modal mask; each pass of the guidance a copy of the batch."""
        g, mask = inputs.guidance, inputs.text_mask
        video, audio = latents["latents"], latents["audio_latents"]
        b, c = video.shape[0], video.shape[-1]
        x = video.reshape(b, -1, c).astype(self.pipe.dtype)
        a = audio.astype(self.pipe.dtype)
        t = jnp.broadcast_to(self.step_state(state).timestep.astype(_F32), (b,))
        tv = self.video_timestep(t, inputs)
        # the rows: prompts, negatives (CFG), then the STG and isolated passes (guidance.py)
        x, a, t, tv = (jnp.concatenate([v] * g.rows, axis=0) for v in (x, a, t, tv))
        perturb, isolate = g.masks(b)
        return (
            x,
            a,
            inputs.embeds,
            inputs.audio_embeds,
            tv,
            t,
            t,
            None,
            mask,
            mask,
            None,
            None,
            None,
            24.0,
            None,
            None,
            None,
            False,
            g.stg_blocks or None,
            perturb,
            g.use_cross_timestep,
            None,
            inputs.rope,
            isolate,
        )

    def video_timestep(self, t, inputs):
        """The video tokens' timestep: ``t`` (B,); where frames are conditioned ``t (1 - mask)``
        per video token, ``(B, N)`` float32."""
        if inputs.token_mask is None:
            return t
        return t[:, None] * (1 - inputs.token_mask)

    def condition_x0(self, name: str, x0, inputs):
        """The guided x0 ``(B, tokens, C)`` of stream ``name`` before its Euler step: where frames
        are conditioned the video's ``x0 (1 - mask) + clean mask``; else as it is."""
        if inputs.token_mask is None or name != self.latent_streams[0]:
            return x0
        m = inputs.token_mask[..., None]
        return x0 * (1 - m) + inputs.clean * m

    def guide(self, pred, state, inputs):
        """Guidance needs the latents (it runs on x0): :meth:`scheduler_update` does it."""
        return pred

    def scheduler_update(self, state, pred, latents, inputs):
        """Per stream: the reference's guidance on the x0 of the passes
        (:meth:`~vidax.models.ltx2.guidance.LTX2Guidance.guide`), the Euler step with the
        stream's state."""
        g = inputs.guidance
        new, states = {}, {}
        for i, name in enumerate(self.latent_streams):
            x = latents[name]
            st = state[name]
            flat = x.reshape(x.shape[0], -1, x.shape[-1]).astype(_F32)
            velocity = g.guide(
                i,
                flat,
                pred[name].astype(_F32),
                st.sigmas[st.step_index],
                lambda x0, name=name: self.condition_x0(name, x0, inputs),
            ).reshape(x.shape)
            new[name], states[name] = self.pipe.scheduler.step(st, velocity, x)
        return new, states

    def latents_to_decode(self, call, latents):
        """LTX-2 mixes the decode noise into the normalised latents (before the de-normalisation)."""
        return decode_noise(self.pipe.info, call, latents)

    def decode_kwargs(self, call) -> dict:
        return decode_timestep_kwargs(self.pipe.info, call)

    # Packed (B, N, C) in the denoising loop, as LTX-Video's (the reference's loops hold them so).
    loop_latents_to_diffusers = LTXHooks.loop_latents_to_diffusers
    loop_latents_from_diffusers = LTXHooks.loop_latents_from_diffusers

    def latents_output(self, latents) -> np.ndarray:
        """De-normalised ``(B, C, F', H', W')``, as the reference's ``output_type="latent"``."""
        return FamilyHooks.latents_output(self, self.pipe.vae.denormalize_latents(latents))

    def audio_latents_output(self, latents) -> np.ndarray:
        """De-normalised ``(B, C_a, L, M)``, as the reference's ``output_type="latent"``."""
        return np.asarray(
            unpack_latents(self.pipe.audio_vae.denormalize_latents(latents), self.pipe.info.audio_mel_bins)
        )


class LTX2Pipeline(VideoPipeline):
    """LTX-2 text-to-video with its soundtrack (reference: ``diffusers.LTX2Pipeline``); ``out.audio``
    is the waveform ``(B, channels, samples)`` at ``out.audio_sample_rate`` (the vocoder's).

    Keywords beyond the shared ones (:data:`LTX2_OPTIONS`): ``frame_rate`` (24), ``motion_speed``
    (1), ``guidance_rescale`` (0.7), ``audio_guidance_scale`` (7; None / 0: ``guidance_scale``),
    ``audio_guidance_rescale`` (None / 0: ``guidance_rescale``), ``stg_scale`` (1),
    ``audio_stg_scale``, ``modality_scale`` (3), ``audio_modality_scale``,
    ``spatio_temporal_guidance_blocks`` ([28]), ``use_cross_timestep`` (True), ``noise_scale``
    (0), ``sigmas``, ``decode_timestep`` (0), ``decode_noise_scale``. ``latents=`` packed
    ``(B, N, C)`` (normalised) or ``(B, C, F', H', W')`` (normalised with the VAE's statistics,
    as the reference).
    """

    family = LTX2Hooks
