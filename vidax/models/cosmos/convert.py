"""Reading a Cosmos-Predict2.5 transformer's tensors: key rules, parameter axes, precision policy,
loader (the names every family's ``convert.py`` uses, see ``docs/adding_a_family.md``).

Cosmos has no VAE of its own: its ``model_index.json`` names ``AutoencoderKLWan``, registered by
the Wan family (:mod:`vidax.models.wan`), so there are no ``VAE_*`` names here.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp

from vidax.models.cosmos.config import CosmosTransformerConfig
from vidax.models.cosmos.transformer import CosmosTransformer3DModel
from vidax.weights.loader import DtypePolicy, KeyRules, Placement
from vidax.weights.transformer import load_transformer_model

_F32 = jnp.float32

#: Regexes of the parameter paths kept float32: diffusers' ``_keep_in_fp32_modules``
#: (``learnable_pos_embed``), matched against whole path segments.
TRANSFORMER_FP32_PARAMS = (r"(^|/)learnable_pos_embed(/|$)",)

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v and FFN-in are column-parallel (output over ``heads`` /
#: ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``; none has a
#: bias). The per-head q/k RMSNorm weights ``(K,)``, the AdaLN-LoRA layers, the patch / time /
#: text embeddings and ``proj_out`` are replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^transformer_blocks/attn[12]/(to_q|to_k|to_v)/kernel$", ("layers", "embed", "heads")),
    (r"^transformer_blocks/attn[12]/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/ff/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/ff/net/2/kernel$", ("layers", "mlp", "embed")),
)


def transformer_policy(dtype: Any = _F32) -> DtypePolicy:
    """Storage dtypes for a Cosmos transformer run in ``dtype``: ``learnable_pos_embed`` stays
    float32 (:data:`TRANSFORMER_FP32_PARAMS`), every other floating parameter is ``dtype``."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=TRANSFORMER_FP32_PARAMS)


def transformer_key_rules(config: CosmosTransformerConfig) -> KeyRules:
    """Key mapping of the diffusers ``CosmosTransformer3DModel`` state dict: the
    ``transformer_blocks.<i>.`` layers stacked; every other key maps by the default rule (the
    config does not change the rules)."""
    del config
    return KeyRules(stacked=("transformer_blocks",))


def load_transformer(
    path: str | os.PathLike,
    dtype: Any = jnp.float32,
    placement: Placement | None = None,
    *,
    residual_dtype: Any = jnp.float32,
    attention: str = "auto",
    mesh: jax.sharding.Mesh | None = None,
    offload: Any = None,
    config: CosmosTransformerConfig | None = None,
    defer: bool = False,
) -> CosmosTransformer3DModel:
    """Load a diffusers ``CosmosTransformer3DModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``transformer/`` folder of a diffusers Cosmos-Predict2.5 checkpoint.
        dtype: compute and storage dtype (``jnp.float32`` or ``jnp.bfloat16``); the learnable
            position embedding stays float32 (:func:`transformer_policy`).
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default: first device
            (or :data:`TRANSFORMER_PARAM_AXES` on ``mesh``).
        residual_dtype: see :class:`~vidax.models.cosmos.transformer.CosmosTransformer3DModel`.
        attention: attention implementation (see :func:`vidax.nn.attention.dot_product_attention`).
        mesh: run on this ``(data, tensor, sequence)`` mesh.
        offload: ``OffloadConfig`` / chunk size (:func:`vidax.parallel.offload.resolve_offload`):
            when it streams blocks, ``transformer_blocks`` goes from the files into host memory.
        config: the parsed ``config.json`` when the caller has read it already; None: read from
            ``path``.
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
    config = config or CosmosTransformerConfig.from_json_file(os.path.join(path, "config.json"))
    return load_transformer_model(
        CosmosTransformer3DModel, config, path, transformer_key_rules(config), transformer_policy,
        TRANSFORMER_PARAM_AXES, dtype=dtype, placement=placement, mesh=mesh, offload=offload,
        what="Cosmos transformer", residual_dtype=residual_dtype, attention=attention, defer=defer,
    )
