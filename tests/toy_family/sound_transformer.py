"""The sound toy's transformer: video and audio tokens as a pair of residual streams through
joint attention (:class:`vidax.blocks.attention.Attention`, ``added="joint"``) and an MLP per
stream, on :class:`vidax.blocks.transformer.DiffusionTransformer` (as LTX-2 and Cosmos 3 will)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tests.toy_family.config import ToySoundConfig
from vidax.blocks.attention import Attention, AttentionConfig
from vidax.blocks.transformer import DiffusionTransformer, block_inputs
from vidax.nn.layers import linear, timestep_sinusoid
from vidax.nn.stack import stacked


class ToySoundBlock(nnx.Module):
    def __init__(self, cfg: ToySoundConfig, attention: str, rngs: nnx.Rngs, mesh=None):
        heads = cfg.num_attention_heads
        self.attn = Attention(
            AttentionConfig(cfg.dim, heads, cfg.dim // heads, added="joint"),
            attention,
            jnp.float32,
            jnp.float32,
            rngs,
            mesh,
        )
        self.fc1 = linear(cfg.dim, 2 * cfg.dim, jnp.float32, jnp.float32, rngs)
        self.fc2 = linear(2 * cfg.dim, cfg.dim, jnp.float32, jnp.float32, rngs)
        self.audio_fc1 = linear(cfg.dim, 2 * cfg.dim, jnp.float32, jnp.float32, rngs)
        self.audio_fc2 = linear(2 * cfg.dim, cfg.dim, jnp.float32, jnp.float32, rngs)

    def __call__(self, streams, inputs):
        video, audio = streams
        dv, da = self.attn((video + inputs.cond, audio + inputs.cond))
        video, audio = video + dv, audio + da
        return (
            video + self.fc2(jax.nn.gelu(self.fc1(video))),
            audio + self.audio_fc2(jax.nn.gelu(self.audio_fc1(audio))),
        )


@block_inputs
class ToySoundInputs:
    cond: jax.Array


class ToySoundTransformer3DModel(DiffusionTransformer):
    """``model(video (B, T, H, W, C), audio (B, C_a, L, M), timestep (B,), context (B, L_txt, D_txt))``
    -> ``(video prediction (B, T·H·W, C), audio prediction (B, L, C_a·M))``."""

    block_stacks = ("blocks",)

    def build(self, config, param_dtype, attention, rngs):
        self.proj_in = linear(config.in_channels, config.dim, jnp.float32, jnp.float32, rngs)
        self.audio_proj_in = linear(config.audio_in_channels, config.dim, jnp.float32, jnp.float32, rngs)
        self.text = linear(config.text_dim, config.dim, jnp.float32, jnp.float32, rngs)
        self.blocks = stacked(lambda r: ToySoundBlock(config, attention, r, self.mesh), config.num_layers, rngs)
        self.proj_out = linear(config.dim, config.in_channels, jnp.float32, jnp.float32, rngs)
        self.audio_proj_out = linear(config.dim, config.audio_in_channels, jnp.float32, jnp.float32, rngs)

    def embed(self, video, audio, timestep, context):
        b = video.shape[0]
        cond = self.text(context.mean(axis=1)) + timestep_sinusoid(timestep.reshape(b), self.config.dim)
        audio_tokens = jnp.transpose(audio, (0, 2, 1, 3)).reshape(b, audio.shape[2], -1)  # (B, L, C·M)
        streams = (
            self.stream(self.proj_in(video.reshape(b, -1, video.shape[-1]))),
            self.stream(self.audio_proj_in(audio_tokens)),
        )
        return streams, ToySoundInputs(cond[:, None])

    def head(self, streams, inputs):
        video, audio = streams
        return self.proj_out(video), self.audio_proj_out(audio)
