"""LTX-2 latent upsampling (reference: diffusers 0.42.1 ``LTX2LatentUpsamplePipeline``,
``pipelines/ltx2/pipeline_ltx2_latent_upsample.py``): the middle of LTX-2's two-stage path.

LTX-Video's :class:`~vidax.models.ltx.upsample_pipeline.LTXLatentUpsamplePipeline` (the same
checks, AdaIN, tone mapping, decode hooks and folder layout: model_index + ``vae/`` +
``latent_upsampler/``) with what the LTX-2 reference does differently:

* latents are **un-normalised** VAE latents in and out: ``latents=`` as LTX-2's pipelines return
  them with ``output_type="latent"`` (de-normalised), upsampled as they are, or de-normalised first
  with ``latents_normalized=True``; a video's latents (a posterior sample) are not normalised; the
  ``output_type="latent"`` result is the upsampled latents as they are (what the second stage's
  ``latents=`` takes: LTX-2's pipelines normalise 5-D latents themselves);
* ``latents=`` may also be packed tokens ``(B, F' H' W', C pt p p)``, unpacked with the latent grid
  of ``num_frames`` x ``height`` x ``width`` and ``temporal_patch_size`` / ``spatial_patch_size``
  (the reference's ``_unpack_latents``);
* decoded without a de-normalisation (the decode noise, where the VAE is timestep-conditioned, is
  mixed into the un-normalised latents);
* defaults 512 x 768, 121 frames.

The two-stage path, as diffusers documents it (no CLI form, as LTX-Video's): stage 1
``LTX2Pipeline`` / ``LTX2ImageToVideoPipeline`` with ``output_type="latent"``; this pipeline on its
``frames`` (``output_type="latent"``); stage 2 the same pipeline with ``latents=`` the upsampled
latents, ``audio_latents=`` stage 1's ``audio``, twice the height and width, a few steps on given
``sigmas`` with ``noise_scale`` the first of them and the scheduler's dynamic shift off.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from vidax.checkpoint import CallDefaults, Checkpoint
from vidax.errors import Arg, InputError
from vidax.models.ltx.config import LTXUpsampleInfo, read_ltx_upsample_checkpoint
from vidax.models.ltx.upsample_pipeline import UPSAMPLE_DECODE_ARGS, LTXUpsampleHooks, LTXUpsampling, UpsampleCall
from vidax.models.ltx2.config import LTX2LatentUpsamplerConfig, LTX2VideoVAEConfig
from vidax.pipelines.base import VideoPipeline, finite_array
from vidax.pipelines.common import VideoPipelineOutput


def unpack_video_latents(
    latents: np.ndarray, grid: tuple[int, int, int], patch_size: int, patch_size_t: int
) -> np.ndarray:
    """Packed ``(B, F H W, C pt p p)`` -> ``(B, C, F pt, H p, W p)``: ``LTX2Pipeline._unpack_latents``
    (the inverse of its packing; ``grid`` = ``(F, H, W)``, the token count ``F H W``)."""
    f, h, w = grid
    b, _, d = latents.shape
    c = d // (patch_size_t * patch_size * patch_size)
    x = latents.reshape(b, f, h, w, c, patch_size_t, patch_size, patch_size)
    return x.transpose(0, 4, 1, 5, 2, 6, 3, 7).reshape(b, c, f * patch_size_t, h * patch_size, w * patch_size)


class LTX2UpsampleHooks(LTXUpsampleHooks):
    """The hooks of :class:`LTX2LatentUpsamplePipeline`: LTX-Video's, with LTX-2's checkpoint and
    latents layout, and the decode of un-normalised latents."""

    pipeline_name = "LTX2LatentUpsamplePipeline"
    latents_layout = (
        "(batch, latent channels, latent frames, height/32, width/32) un-normalised, or packed "
        "(batch, latent frames x height/32 x width/32, latent channels)"
    )

    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> LTXUpsampleInfo:
        # LTX2LatentUpsamplePipeline.__call__'s defaults: 512x768, 121 frames; LTX-2's 24 fps.
        defaults = CallDefaults(
            height=512,
            width=768,
            num_frames=121,
            num_inference_steps=1,
            guidance_scale=1.0,
            max_sequence_length=1,
            fps=24,
        )
        return read_ltx_upsample_checkpoint(
            checkpoint,
            vae_config=LTX2VideoVAEConfig,
            upsampler_config=LTX2LatentUpsamplerConfig,
            name="LTX-2",
            pipeline=cls.pipeline_name,
            defaults=defaults,
        )

    def latents_to_decode(self, call, latents):
        """The shared decode de-normalises; the reference decodes the upsampled latents as they
        are, so they are normalised here and come back to float32 rounding (~1e-7 relative)."""
        return self.pipe.vae.normalize_latents(latents)


class LTX2LatentUpsamplePipeline(LTXUpsampling, VideoPipeline):
    """``pipe(latents=z)`` or ``pipe(video=frames, height=, width=)``: LTX-2 VAE latents upsampled
    by the latent upsampler (see the module docstring), then decoded, or returned un-normalised
    ``(B, C, F'', H'', W'')`` with ``output_type="latent"``.

    Keywords beyond LTX-Video's upsample pipeline: ``num_frames`` (121), ``spatial_patch_size``
    (1), ``temporal_patch_size`` (1): the grid of packed ``latents``; ``latents_normalized``
    (False): the given latents are normalised (de-normalised before the upsampler).
    """

    family = LTX2UpsampleHooks
    latents_hint = ""
    normalize_output = False
    upsample_call_args = (
        "video",
        "height",
        "width",
        "num_frames",
        "spatial_patch_size",
        "temporal_patch_size",
        "latents",
        "latents_normalized",
        *UPSAMPLE_DECODE_ARGS,
    )

    def check_upsample_call(
        self,
        video: Any = None,
        height: int = 512,
        width: int = 768,
        num_frames: int = 121,
        spatial_patch_size: int = 1,
        temporal_patch_size: int = 1,
        latents: Any = None,
        latents_normalized: bool = False,
        **kwargs: Any,
    ) -> UpsampleCall:
        """LTX-Video's checks (InputError) with packed ``latents`` unpacked first, and the LTX-2
        keywords: ``num_frames`` and the patch sizes positive integers, ``latents_normalized`` a
        bool (read only with ``latents``, as the reference)."""
        for name, value in (
            ("num_frames", num_frames),
            ("spatial_patch_size", spatial_patch_size),
            ("temporal_patch_size", temporal_patch_size),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(Arg(name, value), " must be a positive integer")
        if not isinstance(latents_normalized, (bool, np.bool_)):
            raise InputError(Arg("latents_normalized", latents_normalized), " must be True or False")
        v = self.info.vae_config
        if latents is not None and np.ndim(latents) == 3:
            latents = finite_array("latents", latents)
            s = v.spatial_compression
            sizes_ok = all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0 and x % s == 0
                for x in (height, width)
            )
            if sizes_ok:  # (else the shared check names the size)
                grid = ((num_frames - 1) // v.temporal_compression + 1, height // s, width // s)
                volume = int(temporal_patch_size) * int(spatial_patch_size) ** 2
                if latents.shape[1] != math.prod(grid) or latents.shape[2] % volume:
                    raise InputError(
                        Arg("latents"),
                        f" have shape {tuple(latents.shape)}; packed latents of ",
                        Arg("num_frames", num_frames),
                        ", ",
                        Arg("height", height),
                        ", ",
                        Arg("width", width),
                        f" are (batch, {math.prod(grid)} tokens ({' x '.join(map(str, grid))}), latent channels x "
                        f"{volume} (temporal_patch_size x spatial_patch_size**2))",
                    )
                latents = unpack_video_latents(latents, grid, int(spatial_patch_size), int(temporal_patch_size))
        call = super().check_upsample_call(video=video, height=height, width=width, latents=latents, **kwargs)
        return dataclasses.replace(call, latents_normalized=latents is not None and bool(latents_normalized))

    def encode_video(self, call: UpsampleCall):
        """The video's posterior sample, un-normalised (the upsampler's input, as the reference)."""
        return self.sample_video_latents(call)

    def __call__(
        self,
        video: Any = None,
        height: int = 512,
        width: int = 768,
        num_frames: int = 121,
        spatial_patch_size: int = 1,
        temporal_patch_size: int = 1,
        latents: Any = None,
        **kwargs: Any,
    ) -> VideoPipelineOutput:
        """Upsample (see the class docstring; keywords of :meth:`check_upsample_call`).

        Returns:
            :class:`VideoPipelineOutput`: ``frames`` float32 (B, F, H, W, 3) in [0, 1], or the
            upsampled un-normalised latents (B, C, F'', H'', W'') with ``output_type="latent"``.

        Raises:
            InputError: an invalid argument (before any work). NumericalError: NaN/Inf in the decode.
        """
        return super().__call__(
            video,
            height,
            width,
            latents,
            num_frames=num_frames,
            spatial_patch_size=spatial_patch_size,
            temporal_patch_size=temporal_patch_size,
            **kwargs,
        )
