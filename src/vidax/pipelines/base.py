"""The pipeline every family shares: load -> check -> encode -> denoise -> decode.

:class:`VideoPipeline` owns what does not depend on the model: reading the checkpoint once
(:class:`~vidax.checkpoint.Checkpoint`), loading components through the registry
(:mod:`vidax.registry`), the device mesh, staging and block streaming, the call's argument checks
(from the configs alone, so a bad argument costs no weight read), CFG batching, the denoising loop
(one jitted step, or the blocks streamed from host memory, in segments of one expert each),
decoding through the VAE contract, the run summary and progress bars. It holds the denoising
loop as a collaborator, :attr:`denoiser` (:class:`~vidax.pipelines.denoiser.Denoiser`: one expert's
segment of steps, its step cache, the compiled steps), and walks a call with
:func:`~vidax.pipelines.run.run_checked`; the decode is :func:`~vidax.pipelines.output.decode_video`.
The family is an object it holds, not a base: a family's pipeline class names its hooks
(``family = WanHooks``, a :class:`~vidax.pipelines.hooks.FamilyHooks` subclass: the family's
declarations, its configs-only hooks and its runtime hooks, in one place) and a loaded pipeline
holds them bound to itself as :attr:`VideoPipeline.hooks`, which the run calls. Its bases are the
diffusers-facing methods, one module each: :class:`~vidax.pipelines.call_checks.CallChecks` (the
call's checks, the declared keywords), :mod:`~vidax.pipelines.memory`'s
:func:`~vidax.pipelines.memory.check_memory` guards a run), :class:`~vidax.pipelines.loading.Loading` (loading from a :mod:`~vidax.pipelines.plan`),
:class:`~vidax.pipelines.caching.StepCaching` (step caches),
:class:`~vidax.pipelines.prompts.PromptEncoding` (the prompts) and
:class:`~vidax.pipelines.adapters.LoraMethods` (LoRA).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax.numpy as jnp

from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo  # noqa: F401 (part of the API)
from vidax.nn.precision import matmul_precision as precision_context
from vidax.nn.precision import parse_matmul_precision, vae_matmul_precision
from vidax.pipelines.adapters import LoraMethods, lora_adapters
from vidax.pipelines.caching import StepCaching
from vidax.pipelines.call import SHARED_CALL_ARGS, Call
from vidax.pipelines.call_checks import MAX_SEED, CallChecks, Capabilities, SizeLimits
from vidax.pipelines.common import VideoPipelineOutput
from vidax.pipelines.denoiser import Denoiser, check_step_dtypes
from vidax.pipelines.diffusers_compat import DiffusersPipelineMethods, vae_scale_factors
from vidax.pipelines.experts import Experts
from vidax.pipelines.hooks import FamilyHooks, frames_of_form, video_latent_shape
from vidax.pipelines.loading import Loading
from vidax.pipelines.memory import (
    MemoryEstimate,
    ModelSize,
    checkpoint_weight_bytes,
    run_memory_estimate,
    run_size_estimate,
    text_encoding_bytes,
)
from vidax.pipelines.output import MAX_DECODE_LATENT, check_finite, finite_array
from vidax.pipelines.prompts import PromptEncoding, prompt_texts, text_truncation, tokenizer_token_limit
from vidax.pipelines.run import run_checked
from vidax.pipelines.staging import Staging

logger = logging.getLogger("vidax.pipeline")


class VideoPipeline(
    CallChecks,
    Loading,
    StepCaching,
    PromptEncoding,
    LoraMethods,
    DiffusersPipelineMethods,
):
    """Base of the family pipelines; build with :meth:`from_pretrained` or :func:`vidax.load_pipeline`.

    Attributes:
        checkpoint: the folder's index and configs. info: what the checkpoint is (the family's
        :class:`CheckpointInfo`). hooks: the family's hooks bound to this pipeline
        (:class:`~vidax.pipelines.hooks.FamilyHooks`; the class's ``family``). defaults: :class:`CallDefaults`. dtype: transformer dtype.
        mesh: the device mesh or None. staging: where the text encoder / VAE wait.
        experts: the denoising transformers (:class:`~vidax.pipelines.experts.Experts`).
        denoiser: the denoising loop (:class:`~vidax.pipelines.denoiser.Denoiser`), which owns the
        compiled steps. capabilities: what the pipeline accepts (:class:`Capabilities`,
        declared). lora: the LoRA adapters (:class:`~vidax.lora.adapters.LoraAdapters`,
        diffusers' LoRA methods act on them). vae_scale_factor_spatial, vae_scale_factor_temporal
        (and the LTX pipelines' ``vae_spatial_compression_ratio``, ...): as diffusers sets them.
    """

    #: The family's hooks class (:class:`~vidax.pipelines.hooks.FamilyHooks`): its declarations
    #: and configs-only hooks describe the family before any weight exists
    #: (``WanPipeline.family.read_checkpoint``); a loaded pipeline holds them bound to itself as
    #: :attr:`hooks`.
    family: ClassVar[type[FamilyHooks]] = FamilyHooks

    def __init__(
        self,
        info: CheckpointInfo,
        modules: Mapping[str, Any],
        *,
        dtype: Any,
        mesh: Any = None,
        staging: Staging | None = None,
        offload: Any = None,
        offload_experts: bool = True,
        load_s: float = 0.0,
        matmul_precision: str | None = None,
    ):
        self.info = info
        #: The family's hooks bound to this pipeline (``type(self).family(self)``): the runtime
        #: side of the family (conditioning, latents, steps, decode) the loop calls.
        self.hooks = self.family(self)
        self.checkpoint = info.checkpoint
        self.root = info.checkpoint.root
        self.defaults = info.defaults
        self.capabilities = self.capabilities_of(info)
        vars(self).update(vae_scale_factors(info))  # diffusers' vae_scale_factor_spatial, ...
        self.dtype = dtype
        self.mesh = mesh
        self.offload = offload
        self.staging = staging or Staging()
        for name, module in modules.items():
            setattr(self, name, module)
        names = [n for n in info.transformers if n in modules]
        self.experts = Experts([modules[n] for n in names], offload=offload_experts, names=names)
        self.denoiser = Denoiser(self.experts, mesh)
        self._pending_load_s = load_s
        self.lora = lora_adapters(self.experts, self.checkpoint)
        self._interrupt = False
        self.matmul_precision = matmul_precision

    @property
    def interrupt(self) -> bool:
        """diffusers' ``pipe.interrupt``: a ``callback_on_step_end`` that sets
        ``pipe._interrupt = True`` makes the call skip its remaining denoising steps and decode
        the latents it has (reset to False when a call starts, as diffusers does)."""
        return self._interrupt

    @property
    def matmul_precision(self) -> str:
        """How float32 matrix products and convolutions run in this pipeline's calls
        (:mod:`vidax.nn.precision`): ``"highest"`` (float32, the default), ``"high"`` or
        ``"default"`` (the backend's fastest: one bfloat16 pass on TPU). Settable (None: not
        given, the default); a new value compiles its own programs. The VAE decode may differ:
        :attr:`vae_matmul_precision`."""
        return self._matmul_precision or "highest"

    @matmul_precision.setter
    def matmul_precision(self, value: str | None) -> None:
        self._matmul_precision = parse_matmul_precision(value)

    @property
    def vae_matmul_precision(self) -> str:
        """The precision of the VAE decode (:func:`vidax.nn.precision.vae_matmul_precision`):
        :attr:`matmul_precision` where one was given; else ``"high"`` in a bfloat16 run (TF32-class,
        as diffusers' float32 VAE on a GPU) and ``"highest"`` in a float32 run."""
        return vae_matmul_precision(self._matmul_precision, self.dtype)

    def precision(self):
        """A context in which the pipeline's work runs at :attr:`matmul_precision`."""
        return precision_context(self.matmul_precision)

    # ================================================================== the call
    #: The :class:`~vidax.pipelines.presets.Preset` given to :func:`vidax.load_pipeline` (``preset=``):
    #: its call keywords are every call's defaults, its scheduler is :attr:`scheduler`. None: none.
    preset: Any = None
    #: The step cache config :attr:`preset` turned on at load (None: none).
    _preset_cache: Any = None

    def __call__(
        self, prompt: Any = None, negative_prompt: Any = None, *, preset: str | None = None, **kwargs: Any
    ) -> VideoPipelineOutput:
        """Generate videos (the keywords of the family's diffusers pipeline; see ``call_args()``).

        ``preset``: a preset of the family (:mod:`vidax.pipelines.presets`) for this call: its
        steps, guidance, sigmas... under the keywords given, its sampler / shift for this call
        only; None: the preset given to :func:`vidax.load_pipeline`, if any. ``out.stats.preset``
        (and ``out.stats.summary()``) says which preset ran and the values it set.

        Shared keywords: ``image`` (PIL image or uint8 (H, W, 3), image-to-video checkpoints),
        ``height``, ``width`` (pixels), ``num_frames``, ``num_inference_steps``,
        ``guidance_scale`` (> 1 enables CFG, cond and uncond as one batch), ``guidance_scale_2``
        (two-expert checkpoints), ``num_videos_per_prompt``, ``seed`` (an integer in [0,
        :data:`MAX_SEED`] for ``jax.random``; replaces torch's generator; None, the default, draws
        one at random, as diffusers without a generator: the seed used is ``out.stats.seed`` and in
        ``out.stats.summary()``, so a run can be repeated), ``latents`` (initial noise, float32,
        diffusers layout), ``max_sequence_length`` (text tokens, at most the family's
        ``text_token_limit``), ``output_type`` (``"np"`` or ``"latent"``), ``progress`` (progress
        bars and status lines on stderr), ``callback(step_index, num_inference_steps)``,
        ``cancel`` (a ``threading.Event``, or a zero-argument callable returning True to stop;
        asked after the prompt encoding, before every denoising step and before every VAE decode
        chunk: a server cancels a running call from another thread), ``decode_audio`` (False:
        skip the sound's decode, ``out.audio`` None; accepted by models without sound). Models of
        several latent streams also take each further stream's initial noise by its keyword
        (the family's ``latent_streams``, e.g. ``audio_latents``). Defaults: :attr:`defaults`.

        Returns:
            :class:`VideoPipelineOutput`: ``frames`` float32 (B, F, H, W, 3) in [0, 1], or the
            final latents with ``output_type="latent"``; for a model that makes sound ``audio``
            float32 (B, channels, samples) in [-1, 1] (or its final latents) and
            ``audio_sample_rate``.

        Raises:
            InputError: an invalid argument (checked before any work); ``preset`` not a preset of
                the family (naming it, its value and the family's presets).
            NumericalError: the latents or the video went NaN/Inf (the message names the denoising
                step or the VAE decode chunk), or the final latents are too large to decode
                (:func:`check_decodable`; the error's ``latents`` holds them).
            Cancelled: ``cancel`` was set (its ``done`` says how far the call got).
        """
        from vidax.pipelines.presets import call_preset, describe

        if not self.progress_default:  # set_progress_bar_config(disable=True)
            kwargs.setdefault("progress", False)
        chosen, kwargs, applied, scheduler, cache = call_preset(self, preset, kwargs)
        call = self.check_call(self.info, prompt, negative_prompt, **kwargs)
        loaded, loaded_cache = self.scheduler, self.cache_config
        try:
            if scheduler is not None:  # this call's preset's sampler / shift, for this call only
                self.scheduler = scheduler
            self.cache_config = cache  # the caller's step cache, else this call's preset's (or none)
            out = self.generate(call)
        finally:
            self.scheduler, self.cache_config = loaded, loaded_cache
        if chosen is not None:
            out.stats.preset = describe(chosen, applied)
        if call.return_dict:
            return out
        return (out.frames, out.audio) if self.family.makes_audio(self.info) else (out.frames,)

    def generate(self, call: Call) -> VideoPipelineOutput:
        """Run a checked :class:`Call` (:func:`~vidax.pipelines.run.run_checked`: refused first
        when it cannot fit, :func:`~vidax.pipelines.memory.check_memory`).

        Raises:
            OutOfMemoryError, NumericalError: see :func:`~vidax.pipelines.run.run_checked`.
        """
        return run_checked(self, self.hooks.prepare_call(call))

    def video_fps(self, call: Call) -> Any:
        """Frames per second the call's video is meant to play at (``vidax generate``'s mp4 without
        ``--fps``): the family's (:meth:`FamilyHooks.video_fps
        <vidax.pipelines.hooks.FamilyHooks.video_fps>`: the checkpoint's, or the call's frame rate
        where the model conditions on one)."""
        return self.hooks.video_fps(call)

    #: Refuse a call whose :meth:`memory_estimate` exceeds the memory there is (False: warn and run
    #: it; None: no check, e.g. where the caller already checked before loading).
    memory_check: bool | None = True
    #: (the call planned, its :class:`~vidax.pipelines.device_plan.StageMemory`) where the load was
    #: planned for a device's memory with a call: the estimates the run's summary shows per stage.
    device_plan: tuple | None = None

    #: The step cache's config (None: off, the default); see :meth:`enable_cache`.
    cache_config: Any = None


def cfg_pair(do_cfg: bool, *xs: Any) -> tuple:
    """Each of ``xs`` (or None) doubled along the batch for the cond/uncond pair when ``do_cfg``."""
    if not do_cfg:
        return xs
    return tuple(None if x is None else jnp.concatenate([x, x], axis=0) for x in xs)


def image_first_call(
    self: VideoPipeline, image: Any = None, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any
) -> Any:
    """diffusers' image-to-video ``__call__(image, prompt, negative_prompt, **kwargs)``: the image
    first, then :meth:`VideoPipeline.__call__` (an image-to-video class's ``__call__``)."""
    return VideoPipeline.__call__(self, prompt, negative_prompt, image=image, **kwargs)


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


__all__: Sequence[str] = (
    "CallDefaults",
    "CheckpointInfo",
    "Capabilities",
    "Call",
    "VideoPipeline",
    "SizeLimits",
    "ModelSize",
    "MemoryEstimate",
    "run_size_estimate",
    "run_memory_estimate",
    "MAX_SEED",
    "tokenizer_token_limit",
    "text_encoding_bytes",
    "checkpoint_weight_bytes",
    "SHARED_CALL_ARGS",
    "frames_of_form",
    "video_latent_shape",
    "cfg_pair",
    "prompt_texts",
    "text_truncation",
    "finite_array",
    "check_finite",
    "MAX_DECODE_LATENT",
    "check_step_dtypes",
    "as_list",
    "image_first_call",
)
