"""Toy checkpoints for the tests: the embedded Wan checkpoint's tokenizer, UMT5, VAE and
scheduler, plus the toy family's own components with random weights, written by the same key
rules the loader reads them with."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
from flax import nnx

from vidax.default_checkpoint import default_checkpoint, random_module
from vidax.registry import Registry
from vidax.weights import export_state_dict, save_safetensors


def write_toy_checkpoint(root, cache: str, pipeline: str, components: dict[str, dict]) -> str:
    """A checkpoint folder ``root`` of pipeline class ``pipeline`` with the Wan parts and
    ``components`` (name -> its ``config.json``, ``_class_name`` a toy class), each a random
    module (seeded by its position) saved as ``diffusion_pytorch_model.safetensors``."""
    wan = default_checkpoint(cache)
    os.makedirs(root)
    for name in ("tokenizer", "text_encoder", "vae", "scheduler"):
        shutil.copytree(os.path.join(wan, name), os.path.join(root, name))
    with open(os.path.join(wan, "model_index.json")) as f:
        index = json.load(f)
    index.pop("_vidax_call_defaults")
    index["_class_name"] = pipeline
    registry = Registry(("tests.toy_family",))
    for i, (name, config) in enumerate(components.items()):
        spec = registry.component(config["_class_name"])
        index[name] = ["vidax_toy", spec.class_name]
        folder = os.path.join(root, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        cfg = spec.config_class().from_config_dict(config)
        model = random_module(lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0)), np.random.default_rng(i + 1))
        state = export_state_dict(model, spec.rules(cfg))
        save_safetensors(
            {k: np.asarray(v, np.float32) for k, v in state.items()},
            os.path.join(folder, "diffusion_pytorch_model.safetensors"),
        )
    with open(os.path.join(root, "model_index.json"), "w") as f:
        json.dump(index, f)
    return str(root)
