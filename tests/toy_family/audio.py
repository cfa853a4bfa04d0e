"""The sound toy's audio decoder and vocoder: the two sound contracts
(:class:`~vidax.pipelines.contracts.AudioDecoder`, :class:`~vidax.pipelines.contracts.Vocoder`)
in their smallest form, the shapes of LTX-2's audio VAE (latents -> mel) and vocoder (mel ->
waveform at a declared sample rate)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from tests.toy_family.config import ToyAudioVAEConfig, ToyVocoderConfig
from vidax.nn.layers import linear


class ToyAudioVAE(nnx.Module):
    """Audio latents (B, C, L, M) -> mel (B, 1, L x temporal_compression, mel_bins), its latent
    statistics ``latents_mean`` / ``latents_std`` (C·M,) checkpoint tensors, as LTX-2's."""

    output = "mel"

    def __init__(self, config: ToyAudioVAEConfig, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32):
        self.config = config
        width = config.latent_channels * config.latent_mel_bins
        self.latents_mean = nnx.Param(jnp.zeros((width,), jnp.float32))
        self.latents_std = nnx.Param(jnp.ones((width,), jnp.float32))
        self.proj = linear(width, config.temporal_compression * config.mel_bins, jnp.float32, jnp.float32, rngs)

    def denormalize_latents(self, z):
        c = self.config
        shape = (1, c.latent_channels, 1, c.latent_mel_bins)
        return z * self.latents_std[...].reshape(shape) + self.latents_mean[...].reshape(shape)

    def decode(self, z):
        b, _, length, _ = z.shape
        mel = self.proj(jnp.transpose(z, (0, 2, 1, 3)).reshape(b, length, -1))
        return mel.reshape(b, 1, length * self.config.temporal_compression, self.config.mel_bins)


class ToyVocoder(nnx.Module):
    """Mel (B, 1, T, mel_bins) -> waveform (B, out_channels, T x hop_length) in [-1, 1]."""

    def __init__(self, config: ToyVocoderConfig, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32):
        self.config = config
        self.proj = linear(config.mel_bins, config.out_channels * config.hop_length, jnp.float32, jnp.float32, rngs)

    @property
    def sample_rate(self) -> int:
        return self.config.output_sampling_rate

    def __call__(self, mel):
        b, _, t, _ = mel.shape
        c = self.config
        wave = jnp.tanh(self.proj(mel[:, 0])).reshape(b, t, c.out_channels, c.hop_length)
        return jnp.transpose(wave, (0, 2, 1, 3)).reshape(b, c.out_channels, t * c.hop_length)
