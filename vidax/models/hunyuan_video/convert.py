"""Reading a HunyuanVideo 1.0 checkpoint's tensors: key rules, parameter axes, precision policies,
loaders, under the names every family's ``convert.py`` uses (``docs/adding_a_family.md``).

Transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES`,
:func:`transformer_key_rules`, :func:`transformer_policy`, :func:`load_transformer`.

VAE: :data:`VAE_KEY_RULES`, :data:`VAE_FP32_PARAMS`, :func:`vae_policy`, :func:`build_vae`,
:func:`load_vae`.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.models.hunyuan_video.config import HunyuanVideoTransformerConfig, HunyuanVideoVAEConfig
from vidax.models.hunyuan_video.transformer import HunyuanVideoTransformer3DModel
from vidax.models.hunyuan_video.vae import HunyuanVideoVAE
from vidax.nn.inputs import compute_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module
from vidax.weights.transformer import load_transformer_model

_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Transformer

#: Parameters kept float32 under any dtype: the timestep / guidance MLPs (the model's and the
#: token refiner's; they run in float32) and the weights of every LayerNorm / RMSNorm (the
#: refiner's affine ``norm1``/``norm2`` and the per-head q/k RMSNorms). diffusers declares no
#: ``_keep_in_fp32_modules`` for this model; these are vidax's choice (see the transformer docstring).
TRANSFORMER_FP32_PARAMS = (
    r"(^|/)(timestep_embedder|guidance_embedder)(/|$)",
    r"(^|/)(norm1|norm2|norm_q|norm_k|norm_added_q|norm_added_k)/(scale|bias)$",
)

_STACKS = HunyuanVideoTransformer3DModel.block_stacks

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v (video and text), FFN-in and the single blocks' ``proj_mlp``
#: are column-parallel (output over ``heads`` / ``mlp``); attention-out (``to_out``,
#: ``to_add_out``), FFN-out and the single blocks' ``proj_out`` (input ``[attention; mlp]``)
#: row-parallel, the partitioner adding the bias once after the reduction. The q/k RMSNorms act per
#: head over K and are replicated. The modulation layers are split by output column. Everything
#: else (embedders, token refiner, head) is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^(transformer_blocks|single_transformer_blocks)/attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/kernel$",
     ("layers", "embed", "heads")),
    (r"^(transformer_blocks|single_transformer_blocks)/attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/bias$",
     ("layers", "heads")),
    (r"^transformer_blocks/attn/(to_out/0|to_add_out)/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/(ff|ff_context)/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/(ff|ff_context)/net/0/proj/bias$", ("layers", "mlp")),
    (r"^transformer_blocks/(ff|ff_context)/net/2/kernel$", ("layers", "mlp", "embed")),
    (r"^single_transformer_blocks/proj_mlp/kernel$", ("layers", "embed", "mlp")),
    (r"^single_transformer_blocks/proj_mlp/bias$", ("layers", "mlp")),
    (r"^single_transformer_blocks/proj_out/kernel$", ("layers", "mlp", "embed")),
    (r"^(transformer_blocks/(norm1|norm1_context)|single_transformer_blocks/norm)/linear/kernel$",
     ("layers", None, "modulation")),
    (r"^(transformer_blocks/(norm1|norm1_context)|single_transformer_blocks/norm)/linear/bias$",
     ("layers", "modulation")),
)


def transformer_policy(dtype: Any = _F32) -> DtypePolicy:
    """Storage dtypes for a HunyuanVideo transformer run in ``dtype``: float32 for
    :data:`TRANSFORMER_FP32_PARAMS`, ``dtype`` for every other floating parameter."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=TRANSFORMER_FP32_PARAMS)


def transformer_key_rules(config: HunyuanVideoTransformerConfig) -> KeyRules:
    """Key mapping of the diffusers state dict: both block stacks stacked (``transformer_blocks.3.x``
    -> ``transformer_blocks/x`` layer 3); the refiner blocks stay a list. Independent of ``config``."""
    return KeyRules(stacked=_STACKS)


def load_transformer(
    path: str | os.PathLike,
    dtype: Any = jnp.float32,
    placement: Placement | None = None,
    *,
    residual_dtype: Any = jnp.float32,
    attention: str = "auto",
    mesh: jax.sharding.Mesh | None = None,
    offload: Any = None,
    config: HunyuanVideoTransformerConfig | None = None,
    defer: bool = False,
) -> HunyuanVideoTransformer3DModel:
    """Load a diffusers ``HunyuanVideoTransformer3DModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``transformer/`` folder of a diffusers HunyuanVideo 1.0 checkpoint.
        dtype: compute and storage dtype (``jnp.float32`` or ``jnp.bfloat16``); the
            :data:`TRANSFORMER_FP32_PARAMS` stay float32.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default: by
            :data:`TRANSFORMER_PARAM_AXES` on ``mesh`` (first device without one).
        residual_dtype, attention: see :class:`HunyuanVideoTransformer3DModel`.
        mesh: the ``(data, tensor, sequence)`` mesh or None.
        offload: ``OffloadConfig`` / chunk size: when it streams blocks, both stacks
            (``transformer_blocks``, ``single_transformer_blocks``) go from the files straight
            into host-memory chunks (:mod:`vidax.parallel.offload`).
        config: the parsed ``config.json`` when the caller has read it; None: read from ``path``.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

    Raises:
        ConfigError: ``config.json`` missing or asking for something not implemented.
        CheckpointError: tensors missing, unexpected or mis-shaped.
        InputError: ``dtype`` is not a floating dtype, or the heads do not split over ``mesh``.
    """
    path = os.fspath(path)
    config = config or HunyuanVideoTransformerConfig.from_json_file(os.path.join(path, "config.json"))
    return load_transformer_model(
        HunyuanVideoTransformer3DModel, config, path, transformer_key_rules(config), transformer_policy,
        TRANSFORMER_PARAM_AXES, dtype=dtype, placement=placement, mesh=mesh, offload=offload,
        what="HunyuanVideo transformer", residual_dtype=residual_dtype, attention=attention, defer=defer,
    )


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
             config: HunyuanVideoVAEConfig | None = None, attention: str = "auto", defer: bool = False) -> HunyuanVideoVAE:
    """Load a diffusers ``AutoencoderKLHunyuanVideo`` folder (``config.json`` + safetensors).

    Args:
        path: the ``vae/`` folder of a diffusers HunyuanVideo checkpoint.
        dtype: compute and parameter dtype, ``float32`` (default) or ``bfloat16`` (group-norm
            parameters stay float32, see :func:`vae_policy`); a jnp dtype or its name.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        config: the parsed ``config.json`` when the caller has read it; None: read from ``path``.
        attention: the mid blocks' attention implementation
            (:func:`vidax.nn.attention.dot_product_attention`).
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

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
        what="vae", defer=defer,
    )
