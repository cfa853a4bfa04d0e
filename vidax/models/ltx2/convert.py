"""Reading LTX-2 autoencoder and vocoder checkpoints: the tables the registry entries name
(``__init__.py``) for the one component loader (:mod:`vidax.weights.component`), under the names
every family's ``convert.py`` uses (``docs/adding_a_family.md``). Every key maps by the default rule
(the module trees mirror the reference's).
"""

from __future__ import annotations

from vidax.models.ltx.convert import VAE_FP32_PARAMS

#: The video VAE is LTX-Video's (:mod:`vidax.models.ltx2.video_vae`): the same float32 parameters.
VAE_FP32_PARAMS = VAE_FP32_PARAMS

#: The audio VAE keeps its latent statistics float32 (its norms have no parameters; GroupNorm's
#: affine is float32 by construction).
AUDIO_DECODER_FP32_PARAMS = (r"^latents_(mean|std)$", r"norm[^/]*/(scale|bias)$")

#: The vocoders keep the snake parameters (exponentiated), the anti-aliasing filters, the STFT
#: bases and the mel filterbank float32.
VOCODER_FP32_PARAMS = (r"(^|/)(alpha|beta|filter)$", r"(^|/)(forward_basis|inverse_basis|mel_basis)$")
