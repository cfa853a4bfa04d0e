"""The toy family's checkpoint reading: key rules, precision policy and the transformer loader,
under the names every family's ``convert.py`` uses (docs/adding_a_family.md)."""

from __future__ import annotations

import os

import jax.numpy as jnp

from tests.toy_family.config import ToyConfig
from tests.toy_family.transformer import ToyTransformer3DModel
from vidax.weights.loader import DtypePolicy, KeyRules
from vidax.weights.transformer import load_transformer_model


def transformer_key_rules(config: ToyConfig) -> KeyRules:
    return KeyRules(stacked=ToyTransformer3DModel.block_stacks)


def transformer_policy(dtype=jnp.float32) -> DtypePolicy:
    return DtypePolicy(param_dtype=dtype)


def load_transformer(path, dtype=jnp.float32, placement=None, offload=None, config=None):
    config = config or ToyConfig.from_json_file(os.path.join(path, "config.json"))
    return load_transformer_model(ToyTransformer3DModel, config, path, transformer_key_rules(config),
                                  transformer_policy, (), dtype=dtype, placement=placement, offload=offload)
