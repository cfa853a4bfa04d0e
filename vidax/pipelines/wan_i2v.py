"""Wan image-to-video, mirroring ``diffusers.WanImageToVideoPipeline``.

Three checkpoint kinds, told apart by their configs (:class:`~vidax.pipelines.wan.WanCheckpoint`):

* Wan2.1 I2V 14B (480P / 720P): CLIP ViT-H penultimate hidden states of the image go to the
  transformer's image embedder and added key/value projections; the latents are concatenated
  (channels) with a 4-channel first-frame mask and the VAE encoding of the video
  ``[image, 0, 0, ...]`` (``num_frames`` frames), 16 + 4 + 16 = 36 input channels.
* Wan2.2 I2V A14B: the same 36-channel input, no image encoder, two experts (see
  :class:`~vidax.pipelines.wan.WanExperts`).
* Wan2.2 TI2V-5B (``expand_timesteps``): the VAE encoding of the image alone is the first latent
  frame. At every step the model input's first latent frame is replaced by it and its tokens get
  timestep 0 (the others the step's timestep); the scheduler still updates the whole latents, and
  the first frame is replaced once more after the last step, as the reference does.

Everything else (prompt encoding, guidance, the experts, decoding) is :class:`WanPipeline`'s.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.config import read_json_object
from vidax.errors import CheckpointError, InputError
from vidax.io.image import to_rgb_image, vae_image_preprocess
from vidax.models.wan.vae import normalize_latents
from vidax.pipelines.common import VideoPipelineOutput
from vidax.pipelines.loading import require_component
from vidax.pipelines.wan import WanCheckpoint, WanPipeline
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


class WanImageToVideoPipeline(WanPipeline):
    """Wan image-to-video (reference: ``diffusers.WanImageToVideoPipeline``).

    Build with :meth:`from_pretrained` or ``vidax.load_pipeline(path, task="i2v")``; call as
    ``pipe(image, prompt, ...)``.
    """

    task = "i2v"
    #: CLIP vision encoder (Wan2.1 I2V) or None; set by :meth:`from_pretrained`.
    image_encoder = None
    #: the checkpoint's ``image_processor/preprocessor_config.json`` (with ``image_encoder``).
    image_processor_config: dict | None = None

    def _load_extra(self, info: WanCheckpoint) -> None:
        """Load the CLIP image encoder and its preprocessing settings when the transformer
        takes image features (Wan2.1 I2V); the reference ignores them otherwise."""
        if not info.has_image_encoder:
            return
        from vidax.encoders.clip import load_clip_vision

        # fp32 whatever the pipeline dtype, as the reference's examples load it (it is small).
        self.image_encoder = load_clip_vision(require_component(info.root, "image_encoder", info.index))
        folder = require_component(info.root, "image_processor", info.index)
        file = os.path.join(folder, "preprocessor_config.json")
        if not os.path.isfile(file):
            raise CheckpointError(f"{folder} has no preprocessor_config.json (the CLIP image preprocessing)")
        self.image_processor_config = read_json_object(file)

    # ------------------------------------------------------------------ conditioning
    def encode_image(self, image: Any) -> jax.Array:
        """CLIP features of one image, as ``WanImageToVideoPipeline.encode_image``.

        Args:
            image: PIL image or uint8 array (H, W, 3), any size (the CLIP preprocessing resizes
                and crops it).

        Returns:
            float32 (1, L_img, D_img): the hidden states before the last CLIP layer.

        Raises:
            InputError: a bad image, or a checkpoint without an image encoder.
        """
        from vidax.encoders.clip import clip_preprocess

        if self.image_encoder is None:
            raise InputError(f"{self.root} has no image encoder; its transformer takes no image features")
        pixels = clip_preprocess(to_rgb_image(image), self.image_processor_config)
        return self.image_encoder(jnp.asarray(pixels, jnp.float32)[None], output_layer=-2)

    def _condition(self, image: Any, batch: int, num_frames: int, height: int, width: int,
                   stats: RunStats) -> dict:
        """The reference's ``encode_image`` + ``prepare_latents`` conditioning, channels last:
        ``image`` (B, L_img, D_img) CLIP features (Wan2.1 I2V), and ``concat`` (B, T, h, w, 4 + C)
        mask + image latents, or ``first_frame`` (B, 1, h, w, C) (``expand_timesteps``)."""
        rgb = to_rgb_image(image)
        cond: dict[str, jax.Array] = {}
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            if self.image_encoder is not None:
                cond["image"] = jnp.repeat(self.encode_image(rgb), batch, axis=0).astype(self.dtype)
            pixels = vae_image_preprocess(rgb, height, width)  # (H, W, 3) in [-1, 1]
            if self.expand_timesteps:
                video = pixels[None, None]
            else:
                video = np.zeros((1, num_frames, height, width, 3), np.float32)
                video[0, 0] = pixels
            with self.staging.on_device("vae"):  # a staged VAE is on the device only while it runs
                mean, _ = self.vae.encode(video)  # the posterior's mode, as retrieve_latents("argmax")
            z = normalize_latents(jnp.asarray(mean, jnp.float32), self.vae_config)
            z = jnp.repeat(z, batch, axis=0)
            if self.expand_timesteps:
                cond["first_frame"] = z
            else:
                mask = jnp.zeros(z.shape[:-1] + (self.vae_scale_factor_temporal,), jnp.float32)
                mask = mask.at[:, 0].set(1.0)  # the first latent frame holds the given image
                cond["concat"] = jnp.concatenate([mask, z], axis=-1)
        stats.sample_memory()
        return cond

    def _model_input(self, latents: jax.Array, t: jax.Array, cond: dict) -> tuple[jax.Array, jax.Array]:
        b = latents.shape[0]
        if not self.expand_timesteps:
            x = jnp.concatenate([latents, cond["concat"]], axis=-1)
            return x, jnp.broadcast_to(t.astype(jnp.float32), (b,))
        x = jnp.concatenate([cond["first_frame"].astype(latents.dtype), latents[:, 1:]], axis=1)
        pt, ph, pw = self.transformer_config.patch_size
        grid = (latents.shape[1] // pt, latents.shape[2] // ph, latents.shape[3] // pw)
        per_frame = jnp.where(jnp.arange(grid[0]) == 0, 0.0, t.astype(jnp.float32))
        per_token = jnp.broadcast_to(per_frame[:, None, None], grid).reshape(-1)  # frame-major
        return x, jnp.broadcast_to(per_token, (b, per_token.shape[0]))

    def _final_latents(self, latents: jax.Array, cond: dict) -> jax.Array:
        if not self.expand_timesteps:
            return latents
        return jnp.concatenate([cond["first_frame"].astype(latents.dtype), latents[:, 1:]], axis=1)

    # ------------------------------------------------------------------ call
    def __call__(
        self,
        image: Any,
        prompt: str | Sequence[str],
        negative_prompt: str | Sequence[str] | None = None,
        height: int = 480,
        width: int = 832,
        num_frames: int = 81,
        num_inference_steps: int = 50,
        guidance_scale: float = 5.0,
        guidance_scale_2: float | None = None,
        num_videos_per_prompt: int = 1,
        seed: int | None = None,
        latents: np.ndarray | jax.Array | None = None,
        max_sequence_length: int = 512,
        output_type: str = "np",
        progress: bool = True,
        callback: Callable[[int, int], None] | None = None,
    ) -> VideoPipelineOutput:
        """Generate videos that start from ``image``.

        Args:
            image: the first frame: a PIL image or a uint8 array (H, W, 3) (see
                :func:`vidax.io.image.load_image` to read a file). It is resized to exactly
                ``height x width`` (Lanczos, no crop) for the VAE; the CLIP encoder (Wan2.1 I2V)
                sees it through its own resize and center crop. One image for the whole batch.
            prompt, negative_prompt, height, width, num_frames, num_inference_steps,
            guidance_scale, guidance_scale_2, num_videos_per_prompt, seed, max_sequence_length,
            output_type, progress, callback: as :meth:`WanPipeline.__call__`. (With CLIP
            features, diffusers repeats them per prompt only and fails for
            ``num_videos_per_prompt > 1``; vidax repeats them for every video.)
            latents: initial noise, float32 (B, C, T, H/s, W/s) (diffusers layout), C the VAE's
                z_dim (not the transformer's input channels).

        Returns:
            :class:`VideoPipelineOutput` with ``frames`` float32 (B, F, H, W, 3) in [0, 1], or
            latents (B, C, T, H/s, W/s) (for TI2V-5B with the image latents as first frame).

        Raises:
            InputError: no image, an image of another type / dtype / shape, or another invalid
                argument (the message names it and the valid values).
        """
        args = dict(locals())  # the call's arguments, before any other local exists
        del args["self"]
        if image is None:
            raise InputError(f"{self.root} is an image-to-video checkpoint: image is required "
                             "(a PIL image or uint8 (H, W, 3) array; --image PATH on the command line)")
        to_rgb_image(image)  # type / shape errors before any work
        if self.image_encoder is not None and max_sequence_length != 512:
            logger.warning(
                "max_sequence_length=%s: diffusers' WanImageToVideoPipeline assumes 512 text tokens "
                "when it separates the image tokens, so its output differs from vidax's (which keeps "
                "them apart at any length) unless max_sequence_length=512", max_sequence_length,
            )
        return self._generate(**args)
