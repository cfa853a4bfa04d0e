"""SigLIP vision tower (transformers ``SiglipVisionModel``) and its image processor
(``SiglipImageProcessor``), in JAX.

HunyuanVideo 1.5's image-to-video pipeline (diffusers 0.42.1 ``_get_image_embeds``) runs
``SiglipImageProcessor.preprocess(images=image, do_resize=True, do_convert_rgb=True)`` and takes
``SiglipVisionModel(pixel_values).last_hidden_state``: every patch token after
``post_layernorm`` ((384 / 14)^2 = 729 tokens of width 1152 for the so400m tower of its
checkpoints, taken from FLUX.1-Redux-dev).

Model (transformers 5.24 ``models/siglip/modeling_siglip.py``): patch embedding (a stride-``p``
convolution *with* bias), a learned position embedding of ``(image_size // p)^2`` rows (no class
token), ``num_hidden_layers`` pre-norm blocks identical to CLIP's (``SiglipEncoderLayer`` is
``CLIPEncoderLayer``: the same parameters and arithmetic, so vidax runs
:class:`vidax.encoders.clip.CLIPEncoder`), ``post_layernorm``, and with ``vision_use_head`` the
attention-pooling head (``SiglipMultiheadAttentionPoolingHead``: a learned probe attending to the
tokens through ``torch.nn.MultiheadAttention``, a LayerNorm and the MLP), which gives the pooled
output. Images must be ``image_size`` square (the reference without ``interpolate_pos_encoding``,
which the pipeline does not set).

Checkpoint keys: ``embeddings.*``, ``encoder.layers.{i}.*``, ``post_layernorm.*``, ``head.*``
(transformers 5); files written by transformers 4 (FLUX.1-Redux-dev's, HunyuanVideo 1.5's)
prefix them with ``vision_model.``. The head's fused ``attention.in_proj_weight`` (3D, D) /
``in_proj_bias`` (3D,) are kept as stored (q, k, v rows in that order).

Precision as :mod:`vidax.encoders.clip`: parameters and matmuls in the load dtype, layer-norm
statistics, softmax and the residual stream in float32.

Preprocessing: :func:`siglip_preprocess` reproduces ``SiglipImageProcessor`` as transformers
5.24 runs it without torchvision (its PIL backend ``SiglipImageProcessorPil``): PIL resize of the
uint8 image to ``size`` (bicubic by default), rescale, normalise with mean = std = 0.5 by default;
no crop. It shares CLIP's implementation of those steps (:func:`vidax.encoders.clip.preprocess_image`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.encoders.clip import (
    _TOWER_IGNORED,
    CLIP_PARAM_AXES,
    CLIPMLP,
    CLIPEncoder,
    _CLIPTowerConfig,
    _layer_norm,
    _module_kwargs,
    _preprocess_settings,
    checked_pixel_values,
    preprocess_image,
    tower_key_rules,
)
from vidax.errors import ConfigError, InputError
from vidax.nn.layers import Linear
from vidax.weights.loader import KeyRules

_PREFIX = "vision_model."
_TOP_LEVEL = ("embeddings", "encoder", "post_layernorm", "head")


@dataclasses.dataclass(frozen=True)
class SiglipVisionConfig(_CLIPTowerConfig):
    """Settings of ``transformers.SiglipVisionConfig`` that ``SiglipVisionModel`` uses, with its
    defaults (transformers 5.24).

    Built from ``image_encoder/config.json`` (``model_type`` ``"siglip_vision_model"``) or a full
    ``SiglipConfig`` (``model_type`` ``"siglip"``), of which ``vision_config`` is used.

    Attributes:
        hidden_size: D, token width.
        intermediate_size: hidden width of each MLP.
        num_hidden_layers: encoder blocks.
        num_attention_heads: N; D must be a multiple of N.
        hidden_act: MLP activation (``gelu_pytorch_tanh`` for SigLIP).
        layer_norm_eps: epsilon of every LayerNorm.
        num_channels: image channels (3).
        image_size: the square input size in pixels (an int; a (H, W) pair is refused).
        patch_size: p; ``(image_size // p)^2`` patch tokens, no class token.
        vision_use_head: the checkpoint has the attention-pooling head (``head.*``).
        model_type: ``"siglip_vision_model"``.
    """

    IGNORED: ClassVar[frozenset[str]] = _TOWER_IGNORED | {"vocab_size", "eos_token_id"}
    _SUB_CONFIG: ClassVar[str] = "vision_config"
    _MODEL_TYPE: ClassVar[str] = "siglip_vision_model"
    _POSITIVE: ClassVar[tuple[str, ...]] = _CLIPTowerConfig._POSITIVE + (
        "num_channels", "image_size", "patch_size",
    )  # fmt: skip

    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6
    num_channels: int = 3
    image_size: int = 224
    patch_size: int = 16
    vision_use_head: bool = True
    model_type: str = "siglip_vision_model"

    def validate(self, source: str) -> None:
        super().validate(source)
        if not isinstance(self.vision_use_head, bool):
            raise ConfigError(f"{source}: vision_use_head={self.vision_use_head!r} must be true or false.")

    @property
    def num_patches(self) -> int:
        """Tokens per image: ``(image_size // patch_size) ** 2`` (the reference's count)."""
        return (self.image_size // self.patch_size) ** 2


class SiglipVisionEmbeddings(nnx.Module):
    """Patch embedding (with bias) + position embedding (``SiglipVisionEmbeddings``).

    Parameters: ``patch_embedding`` kernel (p, p, C, D) and bias (D,), ``position_embedding``
    (P, D).
    """

    def __init__(self, cfg: SiglipVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        d = cfg.hidden_size
        self.patch_embedding = nnx.Conv(
            cfg.num_channels, d, kernel_size=(cfg.patch_size, cfg.patch_size),
            strides=(cfg.patch_size, cfg.patch_size), padding="VALID", use_bias=True,
            dtype=dtype, param_dtype=param_dtype, rngs=rngs,
        )  # fmt: skip
        self.position_embedding = nnx.Embed(cfg.num_patches, d, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        """(B, H, W, C) -> (B, P, D) float32, patches in row-major order (as torch)."""
        patches = self.patch_embedding(pixel_values)  # (B, H/p, W/p, D)
        b, gh, gw, d = patches.shape
        patches = patches.reshape(b, gh * gw, d).astype(jnp.float32)
        return patches + self.position_embedding.embedding[...].astype(jnp.float32)[None]


class SiglipPoolingAttention(nnx.Module):
    """``torch.nn.MultiheadAttention(D, N, batch_first=True)`` as the pooling head uses it: fused
    ``in_proj_weight`` (3D, D) / ``in_proj_bias`` (3D,) kept in the stored layout, ``out_proj``
    with bias; scale ``K**-0.5``, fp32 scores and softmax."""

    def __init__(self, cfg: SiglipVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        d = cfg.hidden_size
        init = nnx.initializers.lecun_normal()
        self.in_proj_weight = nnx.Param(init(rngs.params(), (3 * d, d), param_dtype))
        self.in_proj_bias = nnx.Param(jnp.zeros((3 * d,), param_dtype))
        self.out_proj = Linear(d, d, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        self.dtype = dtype

    def __call__(self, query: jax.Array, tokens: jax.Array) -> jax.Array:
        """query (B, Q, D), tokens (B, L, D) -> (B, Q, D)."""
        w = self.in_proj_weight[...].astype(self.dtype)
        bias = self.in_proj_bias[...].astype(self.dtype)
        wq, wk, wv = jnp.split(w, 3, axis=0)
        bq, bk, bv = jnp.split(bias, 3)
        n, k = self.num_heads, self.head_dim

        def proj(x, wt, bt):
            y = jnp.einsum("bld,ed->ble", x.astype(self.dtype), wt) + bt
            return y.reshape(*x.shape[:2], n, k)

        q, key, v = proj(query, wq, bq), proj(tokens, wk, bk), proj(tokens, wv, bv)
        scores = jnp.einsum("bqnk,blnk->bnql", q, key, preferred_element_type=jnp.float32) * (k**-0.5)
        probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
        out = jnp.einsum("bnql,blnk->bqnk", probs, v)
        return self.out_proj(out.reshape(*query.shape[:2], n * k))


class SiglipPoolingHead(nnx.Module):
    """``SiglipMultiheadAttentionPoolingHead``: ``h = attn(probe, x, x)``; ``h + mlp(ln h)``,
    first (only) query row."""

    def __init__(self, cfg: SiglipVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.probe = nnx.Param(jax.random.normal(rngs.params(), (1, 1, cfg.hidden_size), param_dtype))
        self.attention = SiglipPoolingAttention(cfg, **kw)
        self.layernorm = _layer_norm(cfg.hidden_size, cfg.layer_norm_eps, **kw)
        self.mlp = CLIPMLP(cfg, **kw)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """(B, L, D) -> (B, D) float32."""
        probe = jnp.broadcast_to(self.probe[...], (tokens.shape[0], 1, tokens.shape[-1]))
        h = self.attention(probe, tokens).astype(jnp.float32)
        h = h + self.mlp(self.layernorm(h)).astype(jnp.float32)
        return h[:, 0]


class SiglipVisionEncoder(nnx.Module):
    """The SigLIP vision tower, following ``transformers.SiglipVisionModel``, channels last.

    Args:
        config: the parsed ``image_encoder/config.json``.
        dtype: compute dtype, ``jnp.float32`` or ``jnp.bfloat16``.
        param_dtype: dtype of freshly built parameters (default ``dtype``).
        rngs: initialisers' keys (values are overwritten by the checkpoint).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    def __init__(self, config: SiglipVisionConfig, *, dtype: Any = jnp.float32,
                 param_dtype: Any = None, rngs: nnx.Rngs | None = None):  # fmt: skip
        dtype, kw = _module_kwargs(dtype, param_dtype, rngs, "SigLIP vision encoder")
        self.embeddings = SiglipVisionEmbeddings(config, **kw)
        self.encoder = CLIPEncoder(config, **kw)
        self.post_layernorm = _layer_norm(config.hidden_size, config.layer_norm_eps, **kw)
        self.head = SiglipPoolingHead(config, **kw) if config.vision_use_head else None
        self.config = config
        self.dtype = dtype

    def _last_hidden(self, pixel_values: Any) -> jax.Array:
        """(B, P, D) float32 after ``post_layernorm``."""
        x = checked_pixel_values(pixel_values, self.config, "siglip_preprocess")
        h = self.embeddings(x.astype(self.dtype))
        return self.post_layernorm(self.encoder(h, self.config.num_hidden_layers))

    def encode(self, pixel_values: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """``SiglipVisionModel(pixel_values)``: ``(last_hidden_state, pooler_output)``.

        Args:
            pixel_values: ``(B, H, W, C)`` float, channels last, normalised (see
                :func:`siglip_preprocess`), ``H = W = image_size``.

        Returns:
            ``last_hidden_state`` (B, P, D) after ``post_layernorm`` (P =
            ``(image_size // patch_size) ** 2``, row-major patches) and the pooled (B, D) from
            the head (None without ``vision_use_head``), in the compute dtype.

        Raises:
            InputError: ``pixel_values`` is not a ``(B, image_size, image_size, num_channels)``
                float array.
        """
        last = self._last_hidden(pixel_values)
        pooled = None if self.head is None else self.head(last).astype(self.dtype)
        return last.astype(self.dtype), pooled

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        """``last_hidden_state`` (B, P, D) of :meth:`encode` (what HunyuanVideo 1.5 takes); the
        head is not run."""
        return self._last_hidden(pixel_values).astype(self.dtype)


#: Logical axes: the encoder layers as CLIP's (:data:`vidax.encoders.clip.CLIP_PARAM_AXES`); the
#: head, norms and embeddings replicated.
SIGLIP_PARAM_AXES = CLIP_PARAM_AXES


def siglip_vision_key_rules(config: Any = None, keys: Any = ()) -> KeyRules:
    """Key mapping of a ``SiglipVisionModel`` checkpoint whose tensor names are ``keys``:
    ``encoder.layers.{i}`` stacked, the transformers 4 ``vision_model.`` prefix renamed away."""
    return tower_key_rules(keys, _PREFIX, _TOP_LEVEL)


# ----------------------------------------------------------------------------- preprocessing

# SiglipImageProcessor's class defaults (transformers 5.24), used for keys the file leaves out.
_SIGLIP_DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "resample": 3,  # PIL bicubic
    "do_center_crop": False,
    "crop_size": None,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": (0.5, 0.5, 0.5),  # IMAGENET_STANDARD_MEAN
    "image_std": (0.5, 0.5, 0.5),  # IMAGENET_STANDARD_STD
    "do_convert_rgb": True,
}


def siglip_preprocess(image: Any, preprocessor_config: Mapping[str, Any], **overrides: Any) -> np.ndarray:
    """One image -> SigLIP ``pixel_values``, as ``SiglipImageProcessor(**preprocessor_config)``
    (the PIL backend of transformers 5.24; see the module docstring).

    Resize to ``size`` (``{"height", "width"}``, or ``{"shortest_edge"}`` keeping the aspect) with
    PIL and ``resample`` on the uint8 image, whatever its aspect ratio (a 640x360 image is
    squashed to 384x384, as the reference); rescale by ``rescale_factor``; ``(x - mean) / std``.

    Args:
        image: ``(H, W, 3)`` RGB array (uint8, or float as :func:`vidax.encoders.clip.clip_preprocess`
            documents) or a ``PIL.Image`` (converted to RGB, transparency onto white).
        preprocessor_config: the parsed ``feature_extractor/preprocessor_config.json``; keys left
            out take ``SiglipImageProcessor``'s defaults (a null is kept as null, as the
            reference keeps it: ``do_convert_rgb: null`` converts nothing unless overridden).
        **overrides: settings given to the call, over the file's, as
            ``processor.preprocess(images=image, **overrides)``; HunyuanVideo 1.5 passes
            ``do_resize=True, do_convert_rgb=True``.

    Returns:
        ``(size_h, size_w, 3)`` float32 numpy, channels last.

    Raises:
        InputError: a malformed image (as ``clip_preprocess``).
        ConfigError: an unknown or unimplemented setting.
    """
    if not isinstance(preprocessor_config, Mapping):
        raise InputError(
            f"preprocessor_config must be a dict (the parsed preprocessor_config.json); got "
            f"{type(preprocessor_config).__name__}"
        )
    settings = _preprocess_settings({**preprocessor_config, **overrides}, _SIGLIP_DEFAULTS, "siglip_preprocess")
    return preprocess_image(image, settings)
