"""What LTX-2's image-to-video and condition pipelines share: clean latents held at conditioned
tokens by a per-token conditioning mask (diffusers 0.42.1 ``LTX2ImageToVideoPipeline`` and
``LTX2ConditionPipeline``, ``pipelines/ltx2/``). The hooks are :class:`~vidax.models.ltx2.pipeline.LTX2Hooks`'
(``step_args``, ``video_timestep``, ``condition_x0``, ``encode_condition``); this module holds the
condition images' re-compression settings.

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

import numpy as np

from vidax.errors import Arg, InputError
from vidax.pipelines.options import CallOption

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
