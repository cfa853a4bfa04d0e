"""Reading LTX-Video checkpoints' tensors: key rules, precision policies, loaders (one
self-contained section per component, names as every family's ``convert.py``)."""

from __future__ import annotations

import os
from typing import Any

import jax.numpy as jnp
from flax import nnx

from vidax.models.ltx.config import LTXLatentUpsamplerConfig
from vidax.models.ltx.upsampler import LTXLatentUpsamplerModel
from vidax.nn.inputs import compute_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module

_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Latent upsampler

UPSAMPLER_KEY_RULES = KeyRules()
"""diffusers ``LTXLatentUpsamplerModel`` keys map to NNX paths by the loader's default rule (the
module tree mirrors the reference's: ``upsampler.0.weight`` -> ``upsampler/0/kernel``)."""

#: The GroupNorm scales and biases stay float32 (the norms run in float32).
UPSAMPLER_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)


def upsampler_policy(dtype: Any = _F32) -> DtypePolicy:
    """Conv parameters in ``dtype``; GroupNorm scale/bias float32 (:data:`UPSAMPLER_FP32_PARAMS`)."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=UPSAMPLER_FP32_PARAMS)


def build_latent_upsampler(config: LTXLatentUpsamplerConfig, dtype: Any = _F32, seed: int = 0) -> LTXLatentUpsamplerModel:
    """A randomly initialised :class:`~vidax.models.ltx.upsampler.LTXLatentUpsamplerModel`
    (compute and conv parameters in ``dtype``, checked as :func:`load_latent_upsampler` does)."""
    d = compute_dtype(dtype, "LTX latent upsampler")
    return LTXLatentUpsamplerModel(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(seed))


def load_latent_upsampler(path: str | os.PathLike, dtype: Any = _F32, placement: Placement | None = None,
                          config: LTXLatentUpsamplerConfig | None = None) -> LTXLatentUpsamplerModel:
    """Load a diffusers ``LTXLatentUpsamplerModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``latent_upsampler/`` folder (e.g. of an ``LTXLatentUpsamplePipeline`` repo
            such as Lightricks/ltxv-spatial-upscaler-0.9.7).
        dtype: compute and conv-parameter dtype, ``jnp.float32`` (default) or ``jnp.bfloat16``
            (GroupNorm parameters stay float32, :func:`upsampler_policy`).
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        config: the parsed config when the caller has read it; None: read ``path/config.json``.

    Raises:
        InputError: unsupported ``dtype``.
        ConfigError: ``config.json`` missing or asking for something not implemented
            (:class:`~vidax.models.ltx.config.LTXLatentUpsamplerConfig`).
        CheckpointError: the tensors do not match the model 1:1.
    """
    d = compute_dtype(dtype, "LTX latent upsampler")
    path = os.fspath(path)
    config = config or LTXLatentUpsamplerConfig.from_json_file(os.path.join(path, "config.json"))
    return load_module(
        lambda: LTXLatentUpsamplerModel(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(0)),
        path,
        UPSAMPLER_KEY_RULES,
        upsampler_policy(d),
        placement,
        what="latent_upsampler",
    )
