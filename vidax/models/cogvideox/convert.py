"""Reading a CogVideoX checkpoint's tensors: key rules, parameter axes, precision policies, loaders.

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

from vidax.models.cogvideox.config import CogVideoXTransformerConfig, CogVideoXVAEConfig
from vidax.models.cogvideox.transformer import CogVideoXTransformer3DModel
from vidax.models.cogvideox.vae import CogVideoXVAE
from vidax.nn.inputs import parse_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module
from vidax.weights.transformer import load_transformer_model

_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Transformer

#: Parameters kept float32 under any dtype: the timestep / ofs MLPs and every LayerNorm's affine.
TRANSFORMER_FP32_PARAMS = (
    r"(^|/)(time_embedding|ofs_embedding)(/|$)",
    r"(^|/)(norm|norm_final|norm_q|norm_k)/(scale|bias)$",
)

_TRANSFORMER_KEY_RULES = KeyRules(stacked=("transformer_blocks",))

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v and FFN-in are column-parallel (output over ``heads`` /
#: ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``, bias
#: replicated and added once after the reduction). The q/k LayerNorms act per head over K, so
#: they are local under the head split and replicated. The blocks' modulation layers
#: (``norm1``/``norm2.linear``, 14 % of the 5B model) are split by output column and their small
#: ``(B, 6D)`` result gathered. Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^transformer_blocks/attn1/(to_q|to_k|to_v)/kernel$", ("layers", "embed", "heads")),
    (r"^transformer_blocks/attn1/(to_q|to_k|to_v)/bias$", ("layers", "heads")),
    (r"^transformer_blocks/attn1/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/ff/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/ff/net/0/proj/bias$", ("layers", "mlp")),
    (r"^transformer_blocks/ff/net/2/kernel$", ("layers", "mlp", "embed")),
    (r"^transformer_blocks/norm[12]/linear/kernel$", ("layers", None, "modulation")),
    (r"^transformer_blocks/norm[12]/linear/bias$", ("layers", "modulation")),
)


def transformer_policy(dtype: Any = _F32) -> DtypePolicy:
    """Storage dtypes for a CogVideoX transformer run in ``dtype``: the timestep / ofs MLPs and
    the LayerNorm weights stay float32 (:data:`TRANSFORMER_FP32_PARAMS`), the rest is ``dtype``."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=TRANSFORMER_FP32_PARAMS)


def transformer_key_rules(config: CogVideoXTransformerConfig) -> KeyRules:
    """Key mapping of the diffusers CogVideoX transformer state dict: the blocks are stacked,
    everything else maps by the default rule (the same for every config)."""
    return _TRANSFORMER_KEY_RULES


def load_transformer(
    path: str | os.PathLike,
    dtype: Any = jnp.float32,
    placement: Placement | None = None,
    *,
    residual_dtype: Any = jnp.float32,
    attention: str = "auto",
    mesh: jax.sharding.Mesh | None = None,
    offload: Any = None,
    config: CogVideoXTransformerConfig | None = None,
    defer: bool = False,
) -> CogVideoXTransformer3DModel:
    """Load a diffusers ``CogVideoXTransformer3DModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``transformer/`` folder of a diffusers CogVideoX checkpoint.
        dtype: compute and storage dtype (float32 or bfloat16); see :func:`transformer_policy`
            for what stays float32.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default: first device.
        residual_dtype: see :class:`~vidax.models.cogvideox.transformer.CogVideoXTransformer3DModel`.
        attention: attention implementation (``"auto"``, ``"xla"``, ``"blockwise"``).
        mesh: run on this ``(data, tensor, sequence)`` mesh; the parameters are placed straight
            into their shards (:data:`TRANSFORMER_PARAM_AXES`) unless ``placement`` is given.
        offload: ``OffloadConfig`` / chunk size (:func:`vidax.parallel.offload.resolve_offload`):
            when it streams blocks, ``transformer_blocks`` go straight from the files into host
            memory chunks and the model holds placeholders (run it with
            :class:`vidax.parallel.offload.ChunkedStep`).
        config: the parsed ``config.json`` when the caller has read it already (the pipelines
            pass the checkpoint's, read once); None: read from ``path``.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

    Raises:
        ConfigError: ``config.json`` missing or asking for something not implemented.
        CheckpointError: tensors missing, unexpected or mis-shaped.
        InputError: ``dtype`` is not a floating dtype, or the heads do not split over ``mesh``.
    """
    path = os.fspath(path)
    config = config or CogVideoXTransformerConfig.from_json_file(os.path.join(path, "config.json"))
    return load_transformer_model(
        CogVideoXTransformer3DModel, config, path, transformer_key_rules(config), transformer_policy, TRANSFORMER_PARAM_AXES,
        dtype=dtype, placement=placement, mesh=mesh, offload=offload, what="CogVideoX transformer",
        residual_dtype=residual_dtype, attention=attention, defer=defer,
    )


# ---------------------------------------------------------------------------------------------
# VAE

VAE_KEY_RULES = KeyRules()
"""diffusers ``AutoencoderKLCogVideoX`` keys map to NNX paths by the loader's default rule (the
module tree mirrors the reference's)."""

#: The group norms' scale and bias stay float32 (their statistics and affine run in float32).
VAE_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)


def vae_policy(dtype: Any = _F32) -> DtypePolicy:
    """Parameters in ``dtype`` except the group norms' scale and bias (:data:`VAE_FP32_PARAMS`)."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=VAE_FP32_PARAMS)


def build_vae(config: CogVideoXVAEConfig, dtype: Any = _F32, seed: int = 0) -> CogVideoXVAE:
    """A randomly initialised :class:`~vidax.models.cogvideox.vae.CogVideoXVAE` (compute and
    parameters in ``dtype``, checked as :func:`load_vae` checks it)."""
    d = parse_dtype(dtype)
    return CogVideoXVAE(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(seed))


def load_vae(path: str | os.PathLike, dtype: Any = _F32, placement: Placement | None = None,
             config: CogVideoXVAEConfig | None = None, defer: bool = False) -> CogVideoXVAE:
    """Load a diffusers ``AutoencoderKLCogVideoX`` folder (``config.json`` + safetensors).

    Args:
        path: the ``vae/`` folder of a diffusers CogVideoX checkpoint.
        dtype: compute and parameter dtype, ``float32`` (default) or ``bfloat16`` (group-norm
            parameters stay float32, see :func:`vae_policy`); a jnp dtype or its name.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

    Raises:
        InputError: unsupported ``dtype``.
        ConfigError: the config asks for something not implemented (e.g. ``use_quant_conv``).
        CheckpointError: the tensors do not match the model 1:1.
    """
    d = parse_dtype(dtype)
    path = os.fspath(path)
    config = config or CogVideoXVAEConfig.from_json_file(os.path.join(path, "config.json"))
    return load_module(
        lambda: CogVideoXVAE(config, dtype=d, param_dtype=d, rngs=nnx.Rngs(0)),
        path,
        VAE_KEY_RULES,
        vae_policy(d),
        placement,
        what="vae", defer=defer,
    )
