"""Reading a Wan checkpoint's tensors: key rules, parameter axes, precision policies, loaders.

The model files (``transformer.py``, ``vae.py``) hold only the modules; everything that maps the
diffusers state dict onto them lives here, under the names every family's ``convert.py`` uses
(see ``docs/adding_a_family.md``):

* transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES`,
  :func:`transformer_key_rules`, :func:`transformer_policy`, :func:`load_transformer`;
* VAE: :data:`VAE_KEY_RULES`, :data:`VAE_FP32_PARAMS`, :func:`vae_policy`, :func:`build_vae`,
  :func:`load_vae`.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.models.wan.config import WanTransformerConfig, WanVAEConfig
from vidax.models.wan.transformer import WanTransformer3DModel
from vidax.models.wan.vae import WanVAE
from vidax.nn.inputs import compute_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module
from vidax.weights.transformer import load_transformer_model

_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Transformer

#: Regexes of the parameter paths kept float32: diffusers' ``_keep_in_fp32_modules`` matched, as
#: diffusers does, against whole path segments.
TRANSFORMER_FP32_PARAMS = (r"(^|/)(time_embedder|scale_shift_table|norm1|norm2|norm3)(/|$)",)

# The I2V checkpoints written by early converters carry an unused ``norm_added_q`` that
# diffusers drops (``_keys_to_ignore_on_load_unexpected``).
_IGNORED_KEY = "attn2.norm_added_q.weight"

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v, the image k/v and FFN-in are column-parallel (output over
#: ``heads`` / ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``, bias
#: replicated and added once after the reduction); the q/k RMS-norm weights follow the split
#: activation. Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^blocks/attn[12]/(to_q|to_k|to_v|add_k_proj|add_v_proj)/kernel$", ("layers", "embed", "heads")),
    (r"^blocks/attn[12]/(to_q|to_k|to_v|add_k_proj|add_v_proj)/bias$", ("layers", "heads")),
    (r"^blocks/attn[12]/(norm_q|norm_k|norm_added_k)/scale$", ("layers", "heads")),
    (r"^blocks/attn[12]/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^blocks/ffn/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^blocks/ffn/net/0/proj/bias$", ("layers", "mlp")),
    (r"^blocks/ffn/net/2/kernel$", ("layers", "mlp", "embed")),
)


def transformer_policy(dtype: Any = _F32) -> DtypePolicy:
    """Storage dtypes for a Wan transformer run in ``dtype``.

    Parameters under ``time_embedder``, ``scale_shift_table``, ``norm1``, ``norm2``, ``norm3``
    (matched as whole path segments, like diffusers' ``_keep_in_fp32_modules``) stay float32;
    every other floating parameter is stored in ``dtype``.
    """
    return DtypePolicy(param_dtype=dtype, keep_fp32=TRANSFORMER_FP32_PARAMS)


def transformer_key_rules(config: WanTransformerConfig) -> KeyRules:
    """Key mapping of the diffusers Wan transformer state dict (blocks stacked)."""
    aliases = {}
    if config.added_kv_proj_dim is not None:
        aliases = {
            f"blocks.{i}.{_IGNORED_KEY}": f"blocks.{i}.attn2.norm_added_k.weight" for i in range(config.num_layers)
        }
    return KeyRules(stacked=("blocks",), aliases=aliases)


def load_transformer(
    path: str | os.PathLike,
    dtype: Any = jnp.float32,
    placement: Placement | None = None,
    *,
    residual_dtype: Any = jnp.float32,
    attention: str = "auto",
    mesh: jax.sharding.Mesh | None = None,
    offload: Any = None,
    config: WanTransformerConfig | None = None,
    defer: bool = False,
) -> WanTransformer3DModel:
    """Load a diffusers ``WanTransformer3DModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``transformer/`` (or ``transformer_2/``) folder of a diffusers Wan checkpoint.
        dtype: compute and storage dtype (``jnp.float32``, ``jnp.bfloat16`` or ``jnp.float16``);
            the reference's fp32 modules stay float32 (:func:`transformer_policy`).
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default: first device.
        residual_dtype: see :class:`~vidax.models.wan.transformer.WanTransformer3DModel`.
        attention: attention implementation (see :func:`vidax.nn.attention.dot_product_attention`).
        mesh: run on this ``(data, tensor, sequence)`` mesh; the parameters are placed straight
            into their shards (:data:`TRANSFORMER_PARAM_AXES`) unless ``placement`` is given.
        offload: ``OffloadConfig`` / chunk size (:func:`vidax.parallel.offload.resolve_offload`):
            when it streams blocks, the stacked blocks go straight from the files into host
            memory chunks (each with its device sharding) and the model holds placeholders;
            run it with :class:`vidax.parallel.offload.ChunkedStep` or
            :func:`vidax.parallel.offload.streamed_call`.

        config: the parsed ``config.json`` when the caller has read it already (the pipelines
            pass the checkpoint's, read once); None: read from ``path``.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

    Returns:
        The model with its parameters placed.

    Raises:
        ConfigError: ``config.json`` missing or asking for something not implemented.
        CheckpointError: tensors missing, unexpected or mis-shaped.
        InputError: ``dtype`` is not a floating dtype, or the heads do not split over ``mesh``.
    """
    path = os.fspath(path)
    config = config or WanTransformerConfig.from_json_file(os.path.join(path, "config.json"))
    return load_transformer_model(
        WanTransformer3DModel, config, path, transformer_key_rules(config), transformer_policy, TRANSFORMER_PARAM_AXES,
        dtype=dtype, placement=placement, mesh=mesh, offload=offload, what="Wan transformer",
        residual_dtype=residual_dtype, attention=attention, defer=defer,
    )


# ---------------------------------------------------------------------------------------------
# VAE

VAE_KEY_RULES = KeyRules()
"""diffusers ``AutoencoderKLWan`` keys map to NNX paths by the loader's default rule (the module
tree mirrors the reference's)."""

#: The RMS-norm ``gamma``s stay float32 (the norms run in float32).
VAE_FP32_PARAMS = (r"gamma$",)


def vae_policy(dtype: Any = _F32) -> DtypePolicy:
    """Parameters in ``dtype`` except the RMS-norm ``gamma``s, kept fp32 (:data:`VAE_FP32_PARAMS`)."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=VAE_FP32_PARAMS)


def build_vae(config: WanVAEConfig, dtype: Any = _F32, seed: int = 0) -> WanVAE:
    """A randomly initialised :class:`~vidax.models.wan.vae.WanVAE` (compute and parameters in
    ``dtype``, checked as :func:`load_vae` checks it)."""
    d = compute_dtype(dtype, "Wan VAE")
    return WanVAE(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(seed))


def load_vae(path: str | os.PathLike, dtype: Any = _F32, placement: Placement | None = None,
             config: WanVAEConfig | None = None, defer: bool = False) -> WanVAE:
    """Load a diffusers ``AutoencoderKLWan`` folder (``config.json`` + safetensors) as a WanVAE.

    Args:
        path: the ``vae/`` folder of a diffusers Wan checkpoint.
        dtype: compute and parameter dtype, ``jnp.float32`` (default; the checkpoints are fp32)
            or ``jnp.bfloat16`` (norm gammas stay fp32, see :func:`vae_policy`).
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

    Raises:
        InputError: unsupported ``dtype``.
        ConfigError: the config asks for something not implemented (``attn_scales``).
        CheckpointError: the tensors do not match the model 1:1.
    """
    d = compute_dtype(dtype, "Wan VAE")
    path = os.fspath(path)
    config = config or WanVAEConfig.from_json_file(os.path.join(path, "config.json"))
    return load_module(
        lambda: WanVAE(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(0)),
        path,
        VAE_KEY_RULES,
        vae_policy(d),
        placement,
        what="vae", defer=defer,
    )
