"""LTX-Video latent upsampling (reference: diffusers 0.42.1 ``LTXLatentUpsamplePipeline``,
pipelines/ltx/pipeline_ltx_latent_upsample.py).

Not a denoising pipeline: no text, no transformer, no scheduler. It is a
:class:`~vidax.pipelines.base.VideoPipeline` only for what the base already owns and it needs
(the registry contract, ``from_pretrained`` / :func:`~vidax.pipelines.loading.load_component`, the VAE
decode loop with its staging and NaN checks) and overrides ``__call__`` with the reference's
signature; the LTX decode hooks (decode noise, decode timestep) are
:func:`~vidax.models.ltx.pipeline.decode_noise` and :func:`~vidax.models.ltx.pipeline.decode_timestep_kwargs`.
The latent maths is :func:`vidax.models.ltx.upsampler.upsample_latents`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.checkpoint import Checkpoint
from vidax.errors import InputError
from vidax.io.image import vae_image_preprocess, video_frames
from vidax.models.ltx.config import LTXUpsampleInfo, read_ltx_upsample_checkpoint
from vidax.models.ltx.pipeline import checked_number, decode_noise, decode_timestep_kwargs, decode_values
from vidax.models.ltx.upsampler import normalize_latents, upsample_latents
from vidax.nn.precision import describe_matmul_precision
from vidax.pipelines.base import VideoPipeline, finite_array
from vidax.pipelines.call_checks import refused_keyword
from vidax.pipelines.common import VideoPipelineOutput
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import load_weighted
from vidax.pipelines.options import SHARED_OPTIONS, options_by_name
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.staging import Staging
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")

#: The keywords of an LTX latent-upsample call after its input (the video or latents and its
#: size): the decode's and the output's, in the order of the LTX-Video and LTX-2 pipelines.
UPSAMPLE_DECODE_ARGS = (
    "decode_timestep",
    "decode_noise_scale",
    "adain_factor",
    "tone_map_compression_ratio",
    "seed",
    "output_type",
    "progress",
)


@dataclasses.dataclass(frozen=True)
class UpsampleCall:
    """One checked call of :class:`LTXLatentUpsamplePipeline` (what the decode hooks read).

    Attributes:
        latents: (B, C, F', H', W') float32 normalised latents, or None. video: RGB PIL frames
        (trimmed to k*temporal + 1), or None. height, width: pixels of the video's frames.
        seed: the key of the posterior sample and the decode noise. extra: ``decode_timestep``,
        ``decode_noise_scale``. adain_factor, tone_map_compression_ratio: as the reference.
        latents_normalized: ``latents`` (or the video's latents) are normalised with the VAE's
        statistics and are de-normalised before the upsampler (always, in LTX-Video).
    """

    latents: Any
    video: Any
    height: int
    width: int
    seed: int
    output_type: str
    progress: bool
    adain_factor: float
    tone_map_compression_ratio: float
    extra: Mapping[str, Any]
    cancel: Any = None  # the shared decode asks it between chunks; this pipeline takes no cancel=
    latents_normalized: bool = True

    @property
    def batch(self) -> int:
        return 1 if self.latents is None else int(self.latents.shape[0])

    @property
    def prompts(self) -> list:  # decode_timestep / decode_noise_scale lists: one per video
        return [""] * self.batch


SHARED = options_by_name(SHARED_OPTIONS)


class LTXUpsampleHooks(FamilyHooks):
    """The hooks of :class:`LTXLatentUpsamplePipeline` (LTX-2's build on them): what its checkpoint
    is and loads, the input latents' shape, the decode's noise and timestep."""

    pipeline_name = "LTXLatentUpsamplePipeline"
    task = "upsample"

    stageable = ("vae",)

    latents_layout = "(batch, latent channels, latent frames, height/32, width/32)"

    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> LTXUpsampleInfo:
        return read_ltx_upsample_checkpoint(checkpoint)

    @classmethod
    def latent_shape(cls, info: LTXUpsampleInfo, call: Any) -> tuple[int, ...]:
        """The input latents' shape for a video of ``num_frames`` x ``height`` x ``width``."""
        f, h, w = (
            (call.num_frames - 1) // info.vae_config.temporal_compression + 1,
            call.height // info.vae_config.spatial_compression,
            call.width // info.vae_config.spatial_compression,
        )
        return (call.batch, info.vae_config.latent_channels, f, h, w)

    @classmethod
    def load_components(
        cls, info: LTXUpsampleInfo, *, dtype, mesh, offload, staging, offload_experts=True, vae_dtype: Any = jnp.float32
    ) -> dict[str, Any]:
        """The VAE (``vae_dtype``, float32 by default) and the latent upsampler (``dtype``), both
        checked against their models before either is read."""
        from vidax.nn.inputs import parsed_dtype

        vae_dtype = parsed_dtype(vae_dtype, "LTXUpsampleHooks.load_components")
        return load_weighted(info, {"vae": dict(dtype=vae_dtype), "latent_upsampler": dict(dtype=dtype)})

    @classmethod
    def plan_staging(cls, info, dtype, vae_dtype, offload, mesh, text_encoder_dtype=None) -> Staging:
        return Staging()  # two small modules, both on the device

    def decode_input(self, call, z):
        return decode_noise(self.pipe.info, call, z)

    def decode_kwargs(self, call) -> dict:
        return decode_timestep_kwargs(self.pipe.info, call)


class LTXUpsampling:
    """What the latent upsample pipelines share, in one place: :class:`LTXLatentUpsamplePipeline`
    and :class:`~vidax.models.ltx2.upsample_pipeline.LTX2LatentUpsamplePipeline` (each is
    ``(LTXUpsampling, VideoPipeline)`` with its hooks as ``family``, and declares what its own
    upsampler differs in): the call's checks, encoding a video, the upsample and the decode.
    They take the upsample keywords, not the denoising ones, so the call is theirs."""

    #: What :meth:`check_upsample_call`'s refusal of other latents adds.
    latents_hint = " (LTXPipeline's packed latents: unpack them first)"

    #: The upsampled latents come out normalised (LTX-Video; LTX-2's come out as the upsampler makes them).
    normalize_output = True

    def __init__(self, info: LTXUpsampleInfo, modules: Mapping[str, Any], **kwargs: Any):
        super().__init__(info, modules, **kwargs)
        graphdef = nnx.graphdef(self.latent_upsampler)
        self._upsample = jax.jit(
            lambda state, z, adain, tone, denormalize: upsample_latents(
                nnx.merge(graphdef, state),
                z,
                self.vae.latents_mean[...],
                self.vae.latents_std[...],
                self.info.vae_config.scaling_factor,
                adain_factor=adain,
                tone_map_compression_ratio=tone,
                normalize_output=self.normalize_output,
                denormalize_input=denormalize,
            ),
            static_argnums=(2, 3, 4),
        )

    @classmethod
    def for_task(cls, checkpoint: Checkpoint, task: str, info=None) -> type:
        if task != "upsample":
            info = info or cls.family.read_checkpoint(checkpoint)
            raise InputError(
                f"checkpoint {checkpoint.root} is {info.variant} ({cls.__name__}): it "
                "upsamples the latents of a first-stage run or a video, it does not generate from "
                "a prompt; run it from Python: vidax.load_pipeline(path)(latents=...)"
            )
        return cls

    #: The keywords ``__call__`` takes (those of :meth:`check_upsample_call`): not the shared
    #: denoising ones (prompt, steps, guidance, ...), which this pipeline has no use for.
    upsample_call_args = ("video", "height", "width", "latents", *UPSAMPLE_DECODE_ARGS)

    @classmethod
    def call_args(cls) -> tuple[str, ...]:
        return cls.upsample_call_args + ("return_dict",)

    @classmethod
    def capabilities_of(cls, info: LTXUpsampleInfo):
        return dataclasses.replace(super().capabilities_of(info), image=False, video=True)

    def check_upsample_call(
        self,
        video: Any = None,
        height: int = 512,
        width: int = 704,
        latents: Any = None,
        decode_timestep: Any = 0.0,
        decode_noise_scale: Any = None,
        adain_factor: float = 0.0,
        tone_map_compression_ratio: float = 0.0,
        seed: int | None = None,
        output_type: str = "np",
        progress: bool = True,
    ) -> UpsampleCall:
        """Check the arguments (InputError) as the reference's ``check_inputs``, and more."""
        v = self.info.vae_config
        for name, value in (("height", height), ("width", width)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, np.integer))
                or value <= 0
                or value % v.spatial_compression
            ):
                raise InputError(f"{name} must be a positive multiple of {v.spatial_compression}, got {value!r}")
        if (video is None) == (latents is None):
            raise InputError(
                "give exactly one of video and latents" + (" (both were given)" if video is not None else "")
            )
        if output_type not in ("np", "latent"):
            raise InputError(f"output_type must be 'np' or 'latent', got {output_type!r}")
        adain = checked_number("adain_factor", adain_factor, -10.0, 10.0)
        tone = checked_number("tone_map_compression_ratio", tone_map_compression_ratio, 0.0, 1.0)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise InputError(f"seed must be an integer or None, got {seed!r}")
        seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
        frames = None
        if latents is not None:
            latents = finite_array("latents", latents)
            if latents.ndim != 5 or latents.shape[1] != v.latent_channels:
                raise InputError(
                    f"latents have shape {tuple(latents.shape)}; expected {self.family.latents_layout} with "
                    f"{v.latent_channels} channels{self.latents_hint}"
                )
        else:
            frames = video_frames(video, "video")
            k = v.temporal_compression
            if len(frames) % k != 1:
                keep = len(frames) // k * k + 1
                if keep > len(frames):
                    raise InputError(f"video has {len(frames)} frames; it needs {k}k+1 (at least 1)")
                logger.warning(
                    "video has %d frames, not of the form %dk+1; using the first %d (as diffusers)",
                    len(frames),
                    k,
                    keep,
                )
                frames = frames[:keep]
        call = UpsampleCall(
            latents,
            frames,
            int(height),
            int(width),
            seed,
            output_type,
            bool(progress),
            adain,
            tone,
            {"decode_timestep": decode_timestep, "decode_noise_scale": decode_noise_scale},
        )
        decode_values(call)  # the decode lists' lengths
        return call

    def encode_video(self, call: UpsampleCall) -> jax.Array:
        """The video's latents ``(1, F', H', W', C)`` float32: a posterior sample (key from
        ``call.seed``) of its frames resized to ``height x width``, normalised without the
        scaling factor (as the reference's ``prepare_latents``)."""
        z = self.sample_video_latents(call)
        return normalize_latents(z, self.vae.latents_mean[...], self.vae.latents_std[...])

    def sample_video_latents(self, call: UpsampleCall) -> jax.Array:
        """A VAE posterior sample ``(1, F', H', W', C)`` float32 of the video's frames resized to
        ``height x width`` (the reference's ``retrieve_latents(vae.encode(video), generator)``)."""
        pixels = np.stack([vae_image_preprocess(f, call.height, call.width) for f in call.video])
        mean, logvar = encode_with(self, "vae", self.vae.encode, jnp.asarray(pixels)[None])
        key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 1)
        z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)
        return z.astype(jnp.float32)

    def __call__(
        self, video: Any = None, height: int = 512, width: int = 704, latents: Any = None, **kwargs: Any
    ) -> VideoPipelineOutput:
        """Upsample (see the class docstring; keywords of :meth:`check_upsample_call`).

        Returns:
            :class:`VideoPipelineOutput`: ``frames`` float32 (B, F, H, W, 3) in [0, 1], or the
            upsampled normalised latents (B, C, F'', H'', W'') with ``output_type="latent"``;
            ``return_dict=False``: the tuple ``(frames,)``, as diffusers.

        Raises:
            InputError: an invalid argument (before any work). NumericalError: NaN/Inf in the decode.
        """
        return_dict = kwargs.pop("return_dict", True)
        SHARED["return_dict"].check(return_dict)
        unknown = sorted(set(kwargs) - set(self.upsample_call_args))
        for u in unknown:
            entry = refused_keyword(type(self), u)
            if entry is not None:
                raise InputError(f"{type(self).__name__} takes no {u!r} (diffusers' {u}=): {entry.message()}")
        out = self._upsample_call(video, height, width, latents, unknown, kwargs)
        return out if return_dict is None or return_dict else (out.frames,)

    def _upsample_call(self, video, height, width, latents, unknown, kwargs) -> VideoPipelineOutput:
        if unknown:  # a denoising keyword (prompt=, num_inference_steps=, ...) or a typo
            raise InputError(
                f"{type(self).__name__} takes no {', '.join(repr(u) for u in unknown)}; it takes "
                f"{', '.join(self.upsample_call_args)}"
            )
        call = self.check_upsample_call(video=video, height=height, width=width, latents=latents, **kwargs)
        stats = RunStats(load_s=self._pending_load_s, matmul_precision=describe_matmul_precision(self.matmul_precision))
        with self.precision():
            if call.latents is not None:
                z = jnp.transpose(jnp.asarray(call.latents), (0, 2, 3, 4, 1))
            else:
                with stats.timed("text_encode_s"):
                    z = self.encode_video(call)
            t0 = time.perf_counter()  # the upsampler's one call, reported as one step
            up = self._upsample(
                nnx.state(self.latent_upsampler),
                z,
                call.adain_factor,
                call.tone_map_compression_ratio,
                call.latents_normalized,
            )
            jax.block_until_ready(up)
            stats.step_s.append(time.perf_counter() - t0)
            stats.sample_memory()
            self._pending_load_s = 0.0
            if call.output_type == "latent":
                return VideoPipelineOutput(frames=self.hooks.latents_output(up.astype(jnp.float32)), stats=stats)
            # decode() de-normalises (LTXPipeline's _denormalize_latents): the un-normalised upsampled
            # latents the reference decodes, to float32 rounding.
            return VideoPipelineOutput(frames=self.hooks.decode(call, up.astype(jnp.float32), stats), stats=stats)


class LTXLatentUpsamplePipeline(LTXUpsampling, VideoPipeline):
    """``pipe(latents=z)`` or ``pipe(video=frames, height=, width=)``: the latents (or the video's
    VAE latents) upsampled by the latent upsampler, AdaIN-matched to the input
    (``adain_factor``), tone-mapped (``tone_map_compression_ratio``), then decoded (or returned
    with ``output_type="latent"``, normalised, (B, C, F'', H'', W'')).

    ``latents``: (B, C, F', H', W') normalised, what :class:`LTXConditionPipeline` returns with
    ``output_type="latent"`` (the reference's 5-D layout; ``LTXPipeline``'s packed tokens must be
    unpacked first). ``video``: a uint8 (F, H, W, 3) array or list of frames, trimmed to
    ``k * temporal + 1`` frames with a warning (as the reference); its latent is a posterior sample
    normalised without the scaling factor and de-normalised with it, as the reference does.
    """

    family = LTXUpsampleHooks
