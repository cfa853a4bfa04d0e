"""The toy family's checkpoint reading: key rules, precision policy and the transformer loader,
under the names every family's ``convert.py`` uses (docs/adding_a_family.md)."""

from __future__ import annotations

import os

import jax.numpy as jnp
from flax import nnx

from tests.toy_family.config import ToyConfig
from tests.toy_family.transformer import ToyTransformer3DModel
from vidax.parallel.offload import offload_loader
from vidax.weights.loader import DtypePolicy, KeyRules, load_module


def transformer_key_rules(config: ToyConfig) -> KeyRules:
    return KeyRules(stacked=ToyTransformer3DModel.block_stacks)


def transformer_policy(dtype=jnp.float32) -> DtypePolicy:
    return DtypePolicy(param_dtype=dtype)


def load_transformer(path, dtype=jnp.float32, placement=None, offload=None):
    cfg = ToyConfig.from_json_file(os.path.join(path, "config.json"))
    stream = offload_loader(offload, attr=ToyTransformer3DModel.block_stacks)
    module = load_module(lambda: ToyTransformer3DModel(cfg, rngs=nnx.Rngs(0)), path, transformer_key_rules(cfg),
                         transformer_policy(dtype), placement, what="transformer", place_stacked=stream)
    return module if stream is None else stream.attach(module)
