"""The toy family's pipeline: only the hooks the base pipeline asks for."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from tests.toy_family.config import ToyConfig
from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.models.wan.config import WanVAEConfig
from vidax.pipelines.base import CallDefaults, CheckpointInfo, VideoPipeline, cfg_pair
from vidax.pipelines.options import CallOption


@dataclasses.dataclass(frozen=True)
class ToyInfo(CheckpointInfo):
    transformer_config: ToyConfig
    vae_config: WanVAEConfig


class ToyVideoPipeline(VideoPipeline):
    #: The toy's own call keyword: declared here only, it is checked with the shared keywords and
    #: offered by ``vidax generate`` as ``--toy-repeat``.
    call_options = (CallOption("toy_repeat", int, "Show each decoded frame this many times (toy family).", "1",
                               low=1),)

    @classmethod
    def read_checkpoint(cls, checkpoint):
        cfg = checkpoint.typed_config("transformer", ToyConfig)
        vae = checkpoint.typed_config("vae", WanVAEConfig)
        s = vae.spatial_compression
        return ToyInfo(checkpoint=checkpoint, tasks=("t2v",), variant=f"Toy T2V: {cfg.num_layers} layers",
                       defaults=CallDefaults(32, 48, 5, 3, 4.0, 16, 8).for_checkpoint(checkpoint),
                       transformers=("transformer",), size_multiple=(s, s), size_reason=f"the VAE's {s}x",
                       transformer_config=cfg, vae_config=vae)

    @classmethod
    def load_components(cls, info, *, dtype, mesh, offload, staging, **options):
        return dict(tokenizer=TextTokenizer(info.checkpoint.folder("tokenizer")),
                    scheduler=cls.load_component(info, "scheduler"),
                    **cls.load_weighted(info, dict(text_encoder=dict(dtype=dtype, mesh=mesh, staging=staging),
                                                   transformer=dict(dtype=dtype, mesh=mesh, offload=offload),
                                                   vae=dict(dtype=jnp.float32, staging=staging))))

    def encode_text(self, texts, max_sequence_length, truncation=None):
        tokens = self.tokenizer(texts, max_sequence_length, truncation=truncation)
        return encode_tokens(self.text_encoder, tokens, zero_padding=True)

    def model_args(self, latents, state, args, do_cfg):
        context = args[0]
        timestep = jnp.broadcast_to(state.timestep.astype(jnp.float32), (latents.shape[0],))
        x, timestep = cfg_pair(do_cfg, latents, timestep)
        return x, timestep, context

    def decode(self, call, latents, stats):
        return np.repeat(super().decode(call, latents, stats), call.extra.get("toy_repeat", 1), axis=1)

    def scheduler_update(self, state, pred, latents, args):
        return self.scheduler.step(state, pred.reshape(latents.shape), latents)
