"""LTX-2's video VAE, following ``diffusers.AutoencoderKLLTX2Video`` (diffusers 0.42.1,
``models/autoencoders/autoencoder_kl_ltx2.py``).

The LTX-2 VAE is the LTX-Video VAE's architecture with other settings, so it is
:class:`vidax.models.ltx.vae.LTXVideoVAE` (same blocks, encode / decode, tiling, latent
normalisation, VAE contract, channels-last layout) built from an
:class:`~vidax.models.ltx2.config.LTX2VideoVAEConfig`, which tells the shared blocks what differs
in LTX-2:

* the convs' spatial padding mode (``encoder_spatial_padding_mode`` /
  ``decoder_spatial_padding_mode``: LTX-2's decoder pads by reflection);
* the resnets' width-changing shortcut is a plain ``nn.Conv3d`` (``conv_shortcut.weight``);
* every encoder block is an ``LTX2VideoDownBlock3D`` (the 0.9.5 block) and the encoder's input
  conv is ``latent_channels`` wide;
* the decoder's up-samplers have a per-block stride (``upsample_type``: spatial, temporal or
  spatiotemporal).

Tiling (``enable_tiling``'s sizes, :class:`~vidax.models.ltx.vae.LTXTiling`) is the reference's,
which is LTX-Video's.
"""

from __future__ import annotations

from vidax.models.ltx.tiles import LTXTiling
from vidax.models.ltx.vae import LTXVideoVAE


class AutoencoderKLLTX2Video(LTXVideoVAE):
    """``AutoencoderKLLTX2Video``: :class:`~vidax.models.ltx.vae.LTXVideoVAE` (same arguments,
    methods and layouts) for an :class:`~vidax.models.ltx2.config.LTX2VideoVAEConfig`."""


__all__ = ["AutoencoderKLLTX2Video", "LTXTiling"]
