"""LTX-2 image-to-video with its soundtrack (reference: diffusers 0.42.1
``LTX2ImageToVideoPipeline``, ``pipelines/ltx2/pipeline_ltx2_image2video.py``).

What differs from :class:`~vidax.models.ltx2.pipeline.LTX2Pipeline` (the rest is the family's,
:class:`~vidax.models.ltx2.pipeline.LTX2Hooks`: text, schedule, guidance on x0, RoPE, sound, decode):

* ``image`` (one PIL image or uint8 array, any size) is H.264 re-compressed at ``image_crf``
  (33, LTX-2.5: 18; 0: not), resized to exactly ``height x width`` with PIL's bilinear filter
  (stretched, not cropped: ``VideoProcessor(resample="bilinear").preprocess``), VAE-encoded at its posterior mode
  and normalised: latent frame 0 of every video; the other frames are the noise.
* Latent frame 0's tokens have conditioning mask 1: timestep ``t (1 - mask)`` = 0, and the
  Euler step leaves them as they are (:mod:`vidax.models.ltx2.conditioning`).
* ``latents=`` are 5-D ``(B, C, F', H', W')`` de-normalised (the reference refuses packed ones
  here): normalised with the VAE's statistics and scaling factor, their frame 0 is the
  condition and ``image`` is not encoded (as the reference; a warning says so); with
  ``noise_scale`` > 0 the other frames are ``s noise + (1 - s) latents``. Without ``latents``
  the noise is drawn in that layout from ``seed``.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, InputError
from vidax.io.image import h264_recompress, one_image, to_rgb_image, vae_image_preprocess
from vidax.models.ltx2.conditioning import IMAGE_CRF, default_image_crf
from vidax.models.ltx2.pipeline import LTX2_OPTIONS, LTX2Hooks
from vidax.pipelines.base import VideoPipeline, image_first_call

logger = logging.getLogger("vidax.pipeline")

_F32 = jnp.float32


class LTX2ImageToVideoHooks(LTX2Hooks):
    """The hooks of :class:`LTX2ImageToVideoPipeline`."""

    pipeline_name = "LTX2ImageToVideoPipeline"

    task = "i2v"
    latents_layout = (
        "(batch, latent channels, latent frames, height/32, width/32), de-normalised (frame 0 is the condition)"
    )
    call_options = LTX2_OPTIONS + (IMAGE_CRF,)
    packed_latents = False

    @classmethod
    def check_family_call(cls, info, call) -> None:
        super().check_family_call(info, call)
        im = to_rgb_image(one_image(call.image, "LTX2ImageToVideoPipeline takes"))
        crf = call.extra.get("image_crf")
        if call.latents is not None:
            logger.warning(
                "latents were given: their first latent frame is the conditioning frame and image is not "
                "encoded, as in diffusers' LTX2ImageToVideoPipeline"
            )
        elif min(im.size) < 2 and (crf is None or crf):
            raise InputError(
                Arg("image", f"{im.width}x{im.height}"),
                " is too small for the H.264 re-compression (at least 2x2); give a larger image or ",
                Arg("image_crf", 0),
            )

    def condition(self, call, stats) -> dict:
        """``frame_mask`` (F',) 1 on frame 0, ``mask`` (1, N) and ``clean`` (B or 1, N, C): the
        image's latent (or the given latents' frame 0) on frame 0's tokens, 0 elsewhere."""
        f, h, w = self.pipe.info.latent_grid(call.num_frames, call.height, call.width)
        c = self.pipe.info.transformer_config.in_channels
        mask = np.zeros((1, f * h * w), np.float32)
        mask[:, : h * w] = 1.0
        if call.latents is not None:
            first = self.pipe.vae.normalize_latents(jnp.transpose(jnp.asarray(call.latents[:, :, :1]), (0, 2, 3, 4, 1)))
        else:
            crf = call.extra.get("image_crf")
            crf = default_image_crf(self.pipe.info) if crf is None else int(crf)
            with stats.timed("text_encode_s"):
                rgb = h264_recompress(np.asarray(to_rgb_image(call.image)), crf)
                pixels = vae_image_preprocess(rgb, call.height, call.width, resample="bilinear")
                first = self.encode_condition(pixels[None])  # (1, 1, H', W', C)
            stats.sample_memory()
        first = first.reshape(first.shape[0], h * w, c)
        clean = jnp.concatenate([first, jnp.zeros((first.shape[0], (f - 1) * h * w, c), _F32)], axis=1)
        return {"first_frame": first, "mask": mask, "clean": clean}

    def step_args(self, call, embeds, cond, state, expert):
        b = call.batch
        cond = {
            **cond,
            "mask": np.broadcast_to(cond["mask"], (b, cond["mask"].shape[1])),
            "clean": jnp.broadcast_to(cond["clean"], (b,) + cond["clean"].shape[1:]),
        }
        return super().step_args(call, embeds, cond, state, expert)

    def prepare_latents(self, call, noise, cond):
        """Channels-last ``(B, F', H', W', C)`` video: the given latents normalised (``noise_scale``
        noise mixed into frames 1:), or the noise with the image latent as frame 0; the audio as
        :class:`LTX2Pipeline`."""
        b, c, f, h, w = noise["latents"].shape
        video = jnp.transpose(noise["latents"], (0, 2, 3, 4, 1))
        given = call.latents is not None
        if given:
            video = self.pipe.vae.normalize_latents(video)
        out = super().prepare_latents(
            dataclasses.replace(call, latents=None), {**noise, "latents": video.reshape(b, f * h * w, c)}, {}
        )
        video = out["latents"]
        s = float(call.extra.get("noise_scale") or 0.0)
        if given and s > 0:
            key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(call.seed), 3), 0)
            eps = jax.random.normal(key, video.shape, _F32)
            video = video.at[:, 1:].set(s * eps[:, 1:] + (1 - s) * video[:, 1:])
        if not given:
            video = video.at[:, :1].set(jnp.broadcast_to(cond["first_frame"].reshape(-1, 1, h, w, c), (b, 1, h, w, c)))
        return {**out, "latents": video}


class LTX2ImageToVideoPipeline(VideoPipeline):
    """LTX-2 image-to-video with its soundtrack: ``pipe(image, prompt, ...)``; keywords as
    :class:`~vidax.models.ltx2.pipeline.LTX2Pipeline`'s plus ``image_crf`` (33, LTX-2.5: 18)."""

    family = LTX2ImageToVideoHooks
    __call__ = image_first_call
