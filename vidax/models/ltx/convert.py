"""Reading LTX-Video checkpoints' tensors: key rules, precision policies, loaders.

The model files hold only the modules; what maps the diffusers state dicts onto them lives here,
under the names every family's ``convert.py`` uses (``docs/adding_a_family.md``). Sections (each
self-contained): the VAE (:data:`VAE_KEY_RULES`, :data:`VAE_FP32_PARAMS`, :func:`vae_policy`,
:func:`build_vae`, :func:`load_vae`).
"""

from __future__ import annotations

import os
from typing import Any

import jax.numpy as jnp
from flax import nnx

from vidax.models.ltx.config import LTXVAEConfig
from vidax.models.ltx.vae import LTXVideoVAE
from vidax.nn.inputs import compute_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module

# ---------------------------------------------------------------------------------------------
# VAE

VAE_KEY_RULES = KeyRules()
"""diffusers ``AutoencoderKLLTXVideo`` keys (``latents_mean`` / ``latents_std`` buffers included)
map to NNX paths by the loader's default rule (the module tree mirrors the reference's)."""

#: Kept float32 under any dtype: the shortcut LayerNorms' affine, the time embeddings (computed in
#: float32), the timestep multiplier and the latent statistics.
VAE_FP32_PARAMS = (
    r"norm3/(scale|bias)$",
    r"(^|/)time_embedder/",
    r"timestep_scale_multiplier$",
    r"^latents_(mean|std)$",
)


def vae_policy(dtype: Any = jnp.float32) -> DtypePolicy:
    """Parameters in ``dtype`` except :data:`VAE_FP32_PARAMS` (float32)."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=VAE_FP32_PARAMS)


def build_vae(config: LTXVAEConfig, dtype: Any = jnp.float32, seed: int = 0) -> LTXVideoVAE:
    """A randomly initialised :class:`~vidax.models.ltx.vae.LTXVideoVAE` (compute and parameters
    in ``dtype``, checked as :func:`load_vae` checks it)."""
    d = compute_dtype(dtype, "LTX VAE")
    return LTXVideoVAE(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(seed))


def load_vae(path: str | os.PathLike, dtype: Any = jnp.float32, placement: Placement | None = None,
             config: LTXVAEConfig | None = None) -> LTXVideoVAE:
    """Load a diffusers ``AutoencoderKLLTXVideo`` folder (``config.json`` + safetensors).

    Args:
        path: the ``vae/`` folder of a diffusers LTX-Video checkpoint.
        dtype: compute and parameter dtype, float32 (default) or bfloat16 (see :func:`vae_policy`
            for what stays float32); a jnp dtype or its name.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        config: the parsed ``config.json`` when the caller has read it; None: read from ``path``.

    Raises:
        InputError: unsupported ``dtype``.
        ConfigError: ``config.json`` missing or asking for something not implemented.
        CheckpointError: the tensors (``latents_mean`` / ``latents_std`` included) do not match
            the model 1:1.
    """
    d = compute_dtype(dtype, "LTX VAE")
    path = os.fspath(path)
    config = config or LTXVAEConfig.from_json_file(os.path.join(path, "config.json"))
    return load_module(
        lambda: LTXVideoVAE(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(0)),
        path,
        VAE_KEY_RULES,
        vae_policy(d),
        placement,
        what="vae",
    )
