"""Reading an LTX-Video checkpoint's tensors: key rules, parameter axes, precision policies,
loaders (the names every family's ``convert.py`` uses, see ``docs/adding_a_family.md``).

Transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES`,
:func:`transformer_key_rules`, :func:`transformer_policy`, :func:`load_transformer`.
VAE: :data:`VAE_KEY_RULES`, :data:`VAE_FP32_PARAMS`, :func:`vae_policy`, :func:`build_vae`,
:func:`load_vae`.
Latent upsampler: :data:`UPSAMPLER_KEY_RULES`, :data:`UPSAMPLER_FP32_PARAMS`,
:func:`upsampler_policy`, :func:`build_latent_upsampler`, :func:`load_latent_upsampler`.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.models.ltx.config import LTXLatentUpsamplerConfig, LTXTransformerConfig, LTXVAEConfig
from vidax.models.ltx.transformer import LTXVideoTransformer3DModel
from vidax.models.ltx.upsampler import LTXLatentUpsamplerModel
from vidax.models.ltx.vae import LTXVideoVAE
from vidax.nn.inputs import compute_dtype
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module
from vidax.weights.transformer import load_transformer_model

_F32 = jnp.float32

# ---------------------------------------------------------------------------------------------
# Transformer

#: Regexes of the transformer parameters kept float32 under any dtype: the timestep MLP
#: (``time_embed.emb.timestep_embedder``) and the modulation tables (``scale_shift_table``, the
#: model's and every block's), matched as whole path segments. The reference declares no
#: ``_keep_in_fp32_modules`` and casts them with the model; vidax keeps these small tensors fp32
#: as it does for the other families (the modulation arithmetic is float32 anyway).
TRANSFORMER_FP32_PARAMS = (r"(^|/)(timestep_embedder|scale_shift_table)(/|$)",)

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v and FFN-in are column-parallel (output over ``heads`` /
#: ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``, bias
#: replicated and added once after the reduction); the q/k RMSNorm weights follow the split
#: activation. Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^transformer_blocks/attn[12]/(to_q|to_k|to_v)/kernel$", ("layers", "embed", "heads")),
    (r"^transformer_blocks/attn[12]/(to_q|to_k|to_v)/bias$", ("layers", "heads")),
    (r"^transformer_blocks/attn[12]/(norm_q|norm_k)/scale$", ("layers", "heads")),
    (r"^transformer_blocks/attn[12]/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/ff/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/ff/net/0/proj/bias$", ("layers", "mlp")),
    (r"^transformer_blocks/ff/net/2/kernel$", ("layers", "mlp", "embed")),
)


def transformer_policy(dtype: Any = _F32) -> DtypePolicy:
    """Storage dtypes for an LTX transformer run in ``dtype``: :data:`TRANSFORMER_FP32_PARAMS`
    stay float32, every other floating parameter is stored in ``dtype``."""
    return DtypePolicy(param_dtype=dtype, keep_fp32=TRANSFORMER_FP32_PARAMS)


def transformer_key_rules(config: LTXTransformerConfig) -> KeyRules:
    """Key mapping of the diffusers ``LTXVideoTransformer3DModel`` state dict: the module tree
    mirrors the reference's, ``transformer_blocks.<i>.`` is the stacked layer axis; no aliases
    (every checkpoint tensor is used exactly once)."""
    del config  # the rules are the same for every released config
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
    config: LTXTransformerConfig | None = None,
    defer: bool = False,
) -> LTXVideoTransformer3DModel:
    """Load a diffusers ``LTXVideoTransformer3DModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``transformer/`` folder of a diffusers LTX-Video checkpoint.
        dtype: compute and storage dtype (``jnp.float32``, ``jnp.bfloat16`` or ``jnp.float16``);
            :data:`TRANSFORMER_FP32_PARAMS` stay float32 (:func:`transformer_policy`).
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default: first device.
        residual_dtype: see :class:`~vidax.models.ltx.transformer.LTXVideoTransformer3DModel`.
        attention: attention implementation (see :func:`vidax.nn.attention.dot_product_attention`).
        mesh: run on this ``(data, tensor, sequence)`` mesh; the parameters are placed straight
            into their shards (:data:`TRANSFORMER_PARAM_AXES`) unless ``placement`` is given.
        offload: ``OffloadConfig`` / chunk size (:func:`vidax.parallel.offload.resolve_offload`):
            when it streams blocks, ``transformer_blocks`` go straight from the files into host
            memory chunks and the model holds placeholders (run it with
            :class:`vidax.parallel.offload.ChunkedStep`).
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
    config = config or LTXTransformerConfig.from_json_file(os.path.join(path, "config.json"))
    return load_transformer_model(
        LTXVideoTransformer3DModel, config, path, transformer_key_rules(config), transformer_policy,
        TRANSFORMER_PARAM_AXES, dtype=dtype, placement=placement, mesh=mesh, offload=offload,
        what="LTX transformer", residual_dtype=residual_dtype, attention=attention, defer=defer,
    )


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
             config: LTXVAEConfig | None = None, defer: bool = False) -> LTXVideoVAE:
    """Load a diffusers ``AutoencoderKLLTXVideo`` folder (``config.json`` + safetensors).

    Args:
        path: the ``vae/`` folder of a diffusers LTX-Video checkpoint.
        dtype: compute and parameter dtype, float32 (default) or bfloat16 (see :func:`vae_policy`
            for what stays float32); a jnp dtype or its name.
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        config: the parsed ``config.json`` when the caller has read it; None: read from ``path``.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

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
        what="vae", defer=defer,
    )


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
                          config: LTXLatentUpsamplerConfig | None = None, defer: bool = False) -> LTXLatentUpsamplerModel:
    """Load a diffusers ``LTXLatentUpsamplerModel`` folder (``config.json`` + safetensors).

    Args:
        path: the ``latent_upsampler/`` folder (e.g. of an ``LTXLatentUpsamplePipeline`` repo
            such as Lightricks/ltxv-spatial-upscaler-0.9.7).
        dtype: compute and conv-parameter dtype, ``jnp.float32`` (default) or ``jnp.bfloat16``
            (GroupNorm parameters stay float32, :func:`upsampler_policy`).
        placement: ``(path, ShapeDtypeStruct) -> Sharding`` per parameter; default first device.
        config: the parsed config when the caller has read it; None: read ``path/config.json``.
        defer: check the checkpoint against the model (headers only) and return a
            :class:`~vidax.weights.loader.PendingLoad` that reads it later.

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
        what="latent_upsampler", defer=defer,
    )
