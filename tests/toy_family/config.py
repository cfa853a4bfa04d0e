"""The toy family's configs: the transformer's ``config.json`` (the VAE is Wan's)."""

from __future__ import annotations

import dataclasses

from vidax.config import ConfigBase


@dataclasses.dataclass(frozen=True)
class ToyConfig(ConfigBase):
    in_channels: int = 16
    dim: int = 32
    text_dim: int = 64
    num_layers: int = 3
    num_single_layers: int = 2


@dataclasses.dataclass(frozen=True)
class ToySoundConfig(ConfigBase):
    """The sound toy's transformer: video tokens of ``in_channels`` and audio tokens of
    ``audio_in_channels`` (= the audio latents' channels x latent mel bins) in one residual pair."""

    in_channels: int = 16
    audio_in_channels: int = 32
    dim: int = 32
    text_dim: int = 64
    num_attention_heads: int = 4
    num_layers: int = 2


@dataclasses.dataclass(frozen=True)
class ToyAudioVAEConfig(ConfigBase):
    """The toy audio decoder: latents (B, latent_channels, L, latent_mel_bins) -> mel
    (B, 1, L x temporal_compression, mel_bins)."""

    latent_channels: int = 4
    latent_mel_bins: int = 8
    mel_bins: int = 16
    temporal_compression: int = 4


@dataclasses.dataclass(frozen=True)
class ToyVocoderConfig(ConfigBase):
    """The toy vocoder: mel (B, 1, T, mel_bins) -> waveform (B, out_channels, T x hop_length) at
    ``output_sampling_rate`` samples per second (the name LTX-2's vocoder config uses)."""

    mel_bins: int = 16
    hop_length: int = 375
    out_channels: int = 2
    output_sampling_rate: int = 24000
