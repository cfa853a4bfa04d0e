"""The toy family's pipelines: only the hooks the base pipeline asks for (and, for the sound
variant, those of a second latent stream)."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from tests.toy_family.config import ToyAudioVAEConfig, ToyConfig, ToySoundConfig, ToyVocoderConfig
from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.models.wan.config import WanVAEConfig
from vidax.pipelines.base import CallDefaults, CheckpointInfo, VideoPipeline, cfg_pair
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import load_component, load_weighted
from vidax.pipelines.options import CallOption


@dataclasses.dataclass(frozen=True)
class ToyInfo(CheckpointInfo):
    transformer_config: ToyConfig
    vae_config: WanVAEConfig


class ToyHooks(FamilyHooks):
    """The toy family's hooks: only those the base pipeline asks for."""

    pipeline_name = "ToyVideoPipeline"
    #: The toy's own call keyword: declared here only, it is checked with the shared keywords and
    #: offered by ``vidax generate`` as ``--toy-repeat``.
    call_options = (CallOption("toy_repeat", int, "Show each decoded frame this many times (toy family).", "1", low=1),)

    @classmethod
    def transformer_config(cls, checkpoint):
        return checkpoint.typed_config("transformer", ToyConfig)

    @classmethod
    def read_checkpoint(cls, checkpoint):
        cfg = cls.transformer_config(checkpoint)
        vae = checkpoint.typed_config("vae", WanVAEConfig)
        s = vae.spatial_compression
        return ToyInfo(
            checkpoint=checkpoint,
            tasks=("t2v",),
            variant=f"Toy T2V: {cfg.num_layers} layers",
            defaults=CallDefaults(32, 48, 5, 3, 4.0, 16, 8).for_checkpoint(checkpoint),
            transformers=("transformer",),
            size_multiple=(s, s),
            size_reason=f"the VAE's {s}x",
            transformer_config=cfg,
            vae_config=vae,
        )

    @classmethod
    def load_components(cls, info, *, dtype, mesh, offload, staging, **options):
        return dict(
            tokenizer=TextTokenizer(info.checkpoint.folder("tokenizer")),
            scheduler=load_component(info, "scheduler"),
            **load_weighted(
                info,
                dict(
                    text_encoder=dict(dtype=dtype, mesh=mesh, staging=staging),
                    transformer=dict(dtype=dtype, mesh=mesh, offload=offload),
                    vae=dict(dtype=jnp.float32, staging=staging),
                ),
            ),
        )

    def encode_text(self, texts, max_sequence_length, truncation=None):
        tokens = self.pipe.tokenizer(texts, max_sequence_length, truncation=truncation)
        return encode_tokens(self.pipe.text_encoder, tokens, zero_padding=True)

    def model_args(self, latents, state, inputs, do_cfg):
        context = inputs.embeds
        timestep = jnp.broadcast_to(state.timestep.astype(jnp.float32), (latents.shape[0],))
        x, timestep = cfg_pair(do_cfg, latents, timestep)
        return x, timestep, context

    def decode(self, call, latents, stats):
        return np.repeat(super().decode(call, latents, stats), call.extra.get("toy_repeat", 1), axis=1)

    def scheduler_update(self, state, pred, latents, inputs):
        return self.pipe.scheduler.step(state, pred.reshape(latents.shape), latents)


@dataclasses.dataclass(frozen=True)
class ToySoundInfo(ToyInfo):
    audio_vae_config: ToyAudioVAEConfig
    vocoder_config: ToyVocoderConfig


class ToyVideoPipeline(VideoPipeline):
    family = ToyHooks


class ToySoundHooks(ToyHooks):
    """Video with sound: two latent streams (video, and audio latents (B, C, L, M) as LTX-2's)
    denoised together by one transformer, the sound decoded by an audio VAE to a mel spectrogram
    and by a vocoder to a waveform. Only the hooks of a second stream are its own."""

    pipeline_name = "ToySoundPipeline"
    latent_streams = ("latents", "audio_latents")
    audio_stream = "audio_latents"
    stageable = ("text_encoder", "vae", "audio_vae", "vocoder")

    @classmethod
    def read_checkpoint(cls, checkpoint):
        info = super().read_checkpoint(checkpoint)
        return ToySoundInfo(
            **{f.name: getattr(info, f.name) for f in dataclasses.fields(info)},
            audio_vae_config=checkpoint.typed_config("audio_vae", ToyAudioVAEConfig),
            vocoder_config=checkpoint.typed_config("vocoder", ToyVocoderConfig),
        )

    @classmethod
    def transformer_config(cls, checkpoint):
        return checkpoint.typed_config("transformer", ToySoundConfig)

    @classmethod
    def latent_shapes(cls, info, call):
        """The audio latents cover the video's duration at the checkpoint's frame rate (rounded
        up to whole latents, as LTX-2's audio length)."""
        a, v = info.audio_vae_config, info.vocoder_config
        seconds = call.num_frames / info.defaults.fps
        length = math.ceil(seconds * v.output_sampling_rate / (v.hop_length * a.temporal_compression))
        return {
            **super().latent_shapes(info, call),
            "audio_latents": (call.batch, a.latent_channels, length, a.latent_mel_bins),
        }

    @classmethod
    def load_components(cls, info, *, dtype, mesh, offload, staging, **options):
        sound = dict(dtype=jnp.float32, staging=staging)
        return {
            **super().load_components(info, dtype=dtype, mesh=mesh, offload=offload, staging=staging),
            **load_weighted(info, dict(audio_vae=sound, vocoder=sound)),
        }

    def model_args(self, latents, state, inputs, do_cfg):
        video, audio = latents["latents"], latents["audio_latents"]
        timestep = jnp.broadcast_to(self.step_state(state).timestep.astype(jnp.float32), (video.shape[0],))
        video, audio, timestep = cfg_pair(do_cfg, video, audio, timestep)
        return video, audio, timestep, inputs.embeds

    def scheduler_update(self, state, pred, latents, inputs):
        audio = latents["audio_latents"]
        b, c, length, m = audio.shape
        pred = {
            "latents": pred["latents"].reshape(latents["latents"].shape),
            "audio_latents": jnp.transpose(pred["audio_latents"].reshape(b, length, c, m), (0, 2, 1, 3)),
        }
        return FamilyHooks.scheduler_update(self, state, pred, latents, inputs)


class ToySoundPipeline(VideoPipeline):
    family = ToySoundHooks
