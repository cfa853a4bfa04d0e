"""What LTX-2's image-to-video and condition pipelines share: clean latents held at conditioned
tokens by a per-token conditioning mask (diffusers 0.42.1 ``LTX2ImageToVideoPipeline`` and
``LTX2ConditionPipeline``, ``pipelines/ltx2/``).

* Each conditioned video token has a mask value ``m`` in [0, 1] (1 on an image's latent frame,
  the condition's ``strength`` elsewhere) and a clean latent ``c`` (the normalised VAE mode of
  the condition). Its timestep is ``t (1 - m)`` (the reference's ``video_timestep``); the audio
  keeps ``t``.
* After guidance, the video's x0 becomes ``x0 (1 - m) + c m`` before the velocity of the Euler
  step, so tokens with ``m = 1`` that start clean stay clean to the last bit (the velocity is
  exactly 0), which is the image-to-video reference's "step frames 1: and keep frame 0".
* Condition images are H.264 re-compressed at ``crf`` (None: 33, LTX-2.5's Gemma 4 checkpoints
  18, as ``resolve_default_image_crf``; 0: not re-compressed) before they are resized; the VAE
  encodes them at their posterior mode, normalised without the scaling factor (the reference's
  ``_normalize_latents`` default).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, InputError
from vidax.models.ltx.upsampler import normalize_latents
from vidax.models.ltx2.pipeline import LTX2Pipeline
from vidax.pipelines.options import CallOption
from vidax.pipelines.prompts import encode_with

_F32 = jnp.float32

#: ``DEFAULT_IMAGE_CRF`` / ``LTX2_5_IMAGE_CRF`` of diffusers' ``ltx2/utils.py``: the H.264 CRF
#: LTX-2.0 / 2.3 (Gemma 3 text encoders) and LTX-2.5 (Gemma 4) were trained with on condition images.
DEFAULT_IMAGE_CRF = 33
LTX2_5_IMAGE_CRF = 18


def default_image_crf(info) -> int:
    """``resolve_default_image_crf``: 18 where the text encoder's ``model_type`` is a Gemma 4 one
    (``gemma4_unified`` / ``gemma4``: LTX-2.5), else 33."""
    ckpt = info.checkpoint
    kind = ckpt.config("text_encoder").get("model_type") if ckpt.config_files.get("text_encoder") else None
    return LTX2_5_IMAGE_CRF if kind in ("gemma4_unified", "gemma4") else DEFAULT_IMAGE_CRF


#: The call keyword of the re-compression of a condition image (the flat image's, in the
#: condition pipeline).
IMAGE_CRF = CallOption(
    "image_crf",
    int,
    "H.264 CRF the conditioning image is re-compressed at before it is "
    "encoded, as LTX-2 was trained (LTX-2); 0: not re-compressed.",
    "33 (LTX-2.5: 18)",
    low=0,
    high=51,
)


def check_crf(arg: Arg, value) -> int:
    """``value`` as a CRF: an integer in [0, 51] (libx264's range; 0: no re-compression)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 51:
        raise InputError(arg, " must be an integer in [0, 51] (the H.264 CRF of the re-compression; 0: none)")
    return int(value)


class LTX2ConditionedPipeline(LTX2Pipeline):
    """:class:`LTX2Pipeline` with a conditioning mask and clean latents on the video tokens.

    The subclass's :meth:`condition` returns ``mask`` (B, N) float32 and ``clean`` (B, N, C)
    float32 over the video stream's tokens (N may include appended condition tokens); they go
    to every step as :class:`~vidax.models.ltx2.pipeline.LTX2StepInputs`' ``token_mask`` and ``clean``.
    """

    packed_latents = False

    @classmethod
    def latent_shapes(cls, info, call):
        """Video latents ``(B, C, F', H', W')`` (the reference's 5-D layout) and audio latents."""
        f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        shapes = super().latent_shapes(info, call)
        return {**shapes, "latents": (call.batch, info.transformer_config.in_channels, f, h, w)}

    def step_args(self, call, embeds, cond, state, expert):
        """The base inputs with the mask ``(B, N)`` and clean latents ``(B, N, C)``."""
        inputs, axes = super().step_args(call, embeds, cond, state, expert)
        return dataclasses.replace(
            inputs, token_mask=jnp.asarray(cond["mask"], _F32), clean=jnp.asarray(cond["clean"], _F32)
        ), axes

    def video_timestep(self, t, inputs):
        """``t (1 - mask)`` per video token, ``(B, N)`` float32."""
        return t[:, None] * (1 - inputs.token_mask)

    def condition_x0(self, name, x0, inputs):
        """The video's ``x0 (1 - mask) + clean mask``; the audio's as it is."""
        if name != self.latent_streams[0]:
            return x0
        m = inputs.token_mask[..., None]
        return x0 * (1 - m) + inputs.clean * m

    def encode_condition(self, pixels: np.ndarray) -> np.ndarray:
        """Frames ``(F, H, W, 3)`` float32 in [-1, 1] -> their normalised latent ``(1, F', H',
        W', C)``: the VAE posterior's mode (``retrieve_latents(..., "argmax")``), ``(z - mean) /
        std`` (no scaling factor, as the reference's ``_normalize_latents`` default)."""
        mean, _ = encode_with(self, "vae", self.vae.encode, jnp.asarray(pixels)[None])
        return normalize_latents(mean.astype(_F32), self.vae.latents_mean[...], self.vae.latents_std[...])
