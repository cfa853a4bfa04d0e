"""The toy family's transformer: the denoising-transformer contract in ~70 lines, with two block
stacks (as HunyuanVideo's double- and single-stream blocks) that block streaming runs in turn."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from tests.toy_family.config import ToyConfig
from vidax.nn.layers import linear, timestep_sinusoid
from vidax.nn.stack import scan_layers, stacked


class ToyBlock(nnx.Module):
    def __init__(self, cfg: ToyConfig, rngs: nnx.Rngs, mult: int = 2):
        self.fc1 = linear(cfg.dim, mult * cfg.dim, jnp.float32, jnp.float32, rngs)
        self.fc2 = linear(mult * cfg.dim, cfg.dim, jnp.float32, jnp.float32, rngs)

    def __call__(self, x, cond):
        return x + self.fc2(jax.nn.gelu(self.fc1(x + cond)))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ToyInputs:
    cond: jax.Array


class ToyTransformer3DModel(nnx.Module):
    block_stacks = ("blocks", "single_blocks")

    def __init__(self, config: ToyConfig, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32, mesh=None):
        self.config = config
        self.proj_in = linear(config.in_channels, config.dim, jnp.float32, jnp.float32, rngs)
        self.text = linear(config.text_dim, config.dim, jnp.float32, jnp.float32, rngs)
        self.blocks = stacked(lambda r: ToyBlock(config, r), config.num_layers, rngs)
        self.single_blocks = stacked(lambda r: ToyBlock(config, r, mult=3), config.num_single_layers, rngs)
        self.proj_out = linear(config.dim, config.in_channels, jnp.float32, jnp.float32, rngs)

    def __call__(self, x, timestep, context):
        h, inputs = self.embed(x, timestep, context)
        return self.head(self.run_blocks(h, inputs), inputs)

    def embed(self, x, timestep, context):
        b = x.shape[0]
        cond = self.text(context.mean(axis=1)) + timestep_sinusoid(timestep.reshape(b), self.config.dim)
        return self.proj_in(x.reshape(b, -1, x.shape[-1])), ToyInputs(cond[:, None])

    def run_blocks(self, x, inputs, blocks=None, stack=None):
        """Stack ``stack`` (its layers, or the chunk ``blocks`` of it); both stacks when None."""
        for name in self.block_stacks if stack is None else (stack,):
            layers = getattr(self, name) if blocks is None else blocks
            x = scan_layers(layers, x, lambda blk, h: blk(h, inputs.cond))
        return x

    def head(self, x, inputs):
        return self.proj_out(x)
