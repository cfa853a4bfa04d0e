"""Reading a HunyuanVideo checkpoint's tensors: key rules, precision policies, loaders.

The model files hold only the modules; everything that maps the diffusers state dict onto them
lives here, under the names every family's ``convert.py`` uses (``docs/adding_a_family.md``):

* VAE: :data:`VAE_KEY_RULES`, :data:`VAE_FP32_PARAMS`, :func:`vae_policy`, :func:`build_vae`,
  :func:`load_vae`.
"""

from __future__ import annotations

import os
from typing import Any

import jax.numpy as jnp
from flax import nnx

from vidax.models.hunyuan_video.config import HunyuanVideoVAEConfig
from vidax.models.hunyuan_video.vae import HunyuanVideoVAE
from vidax.nn.inputs import compute_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module

_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# VAE

VAE_KEY_RULES = KeyRules()
"""diffusers ``AutoencoderKLHunyuanVideo`` keys map to NNX paths by the loader's default rule (the
module tree mirrors the reference's: ``...conv1.conv.weight`` -> ``.../conv1/conv/kernel``,
group norms' ``weight`` -> ``scale``, attention linears ``(O, I)`` -> ``(I, O)``)."""

#: The group norms' scale and bias stay float32 (their statistics and affine run in float32):
#: ``norm1`` / ``norm2`` of the resnets, ``conv_norm_out``, the attention's ``group_norm``.
VAE_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)


def vae_policy(dtype: Any = _F32) -> DtypePolicy:
    """Parameters in ``dtype`` except the group norms' scale and bias (:data:`VAE_FP32_PARAMS`)."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=VAE_FP32_PARAMS)


def build_vae(config: HunyuanVideoVAEConfig, dtype: Any = _F32, seed: int = 0,
              attention: str = "auto") -> HunyuanVideoVAE:
    """A randomly initialised :class:`~vidax.models.hunyuan_video.vae.HunyuanVideoVAE` (compute
    and parameters in ``dtype``, checked as :func:`load_vae` checks it)."""
    d = compute_dtype(dtype, "HunyuanVideo VAE")
    return HunyuanVideoVAE(config, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(seed))


def load_vae(path: str | os.PathLike, dtype: Any = _F32, placement: Placement | None = None,
             config: HunyuanVideoVAEConfig | None = None, attention: str = "auto") -> HunyuanVideoVAE:
    """Load a diffusers ``AutoencoderKLHunyuanVideo`` folder (``config.json`` + safetensors).

    Args:
        path: the ``vae/`` folder of a diffusers HunyuanVideo checkpoint.
        dtype: compute and parameter dtype, ``float32`` (default) or ``bfloat16`` (group-norm
            parameters stay float32, see :func:`vae_policy`); a jnp dtype or its name.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        config: the parsed ``config.json`` when the caller has read it; None: read from ``path``.
        attention: the mid blocks' attention implementation
            (:func:`vidax.nn.attention.dot_product_attention`).

    Raises:
        InputError: unsupported ``dtype``.
        ConfigError: the config asks for something not implemented (e.g. another
            ``temporal_compression_ratio``).
        CheckpointError: the tensors do not match the model 1:1.
    """
    d = compute_dtype(dtype, "HunyuanVideo VAE")
    path = os.fspath(path)
    config = config or HunyuanVideoVAEConfig.from_json_file(os.path.join(path, "config.json"))
    return load_module(
        lambda: HunyuanVideoVAE(config, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        path,
        VAE_KEY_RULES,
        vae_policy(d),
        placement,
        what="vae",
    )
