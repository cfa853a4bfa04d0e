"""CLIP vision tower (transformers ``CLIPVisionModel``) and its image preprocessing, in JAX.

The Wan2.1 image-to-video pipelines condition on ``CLIPVisionModel(pixel_values,
output_hidden_states=True).hidden_states[-2]``: the full token sequence (class token first) after
the second-to-last encoder layer, without the post layernorm. :class:`CLIPVisionEncoder` returns
any entry of that ``hidden_states`` tuple (``output_layer``) and runs only the layers it needs.

Model: patch embedding (a stride-``p`` convolution without bias), class token, learned position
embedding, ``pre_layrnorm``, ``num_hidden_layers`` pre-norm blocks (multi-head self-attention
with biases, MLP ``fc2(act(fc1 x))``) stacked on a leading layer axis and run with a scan, and
``post_layernorm`` (loaded so the checkpoint maps 1:1; it only feeds the pooled output, which the
Wan pipelines do not use and this module does not compute). Images must be ``image_size`` square,
as the reference requires without ``interpolate_pos_encoding`` (which the pipelines never set).

Checkpoint keys: transformers 5 names the tree ``embeddings.*``, ``pre_layrnorm.*``,
``encoder.layers.{i}.*``, ``post_layernorm.*``; files written by transformers 4 (the released
Wan checkpoints) prefix every key with ``vision_model.``. :func:`clip_key_rules` handles both.

Precision (:func:`clip_dtype_policy`): ``float32`` (the Wan pipelines load the image encoder in
fp32) or ``bfloat16`` parameters and matmuls; layer-norm statistics and the attention softmax are
fp32 in both, and the residual stream is kept in fp32 (the bf16 reference rounds it to bf16 after
every sub-layer; fp32 costs ``B*L*D*4`` bytes and stays closer to the fp32 result). transformers
has no ``_keep_in_fp32_modules`` for CLIP, so every parameter follows ``dtype``.

Preprocessing: :func:`clip_preprocess` reproduces ``transformers.CLIPImageProcessor`` as
transformers 5.24 runs it without torchvision installed (its PIL backend,
``CLIPImageProcessorPil``: PIL resize of the uint8 image, numpy crop / rescale / normalise). With
torchvision installed transformers uses a torchvision backend whose bicubic resize differs from
PIL's by a few uint8 levels; vidax follows the PIL backend.
"""

from __future__ import annotations

import dataclasses
import math
import os
from functools import partial
from typing import Any, Callable, ClassVar, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.nn.inputs import compute_dtype
from vidax.config import ConfigBase
from vidax.errors import ConfigError, InputError
from vidax.nn.layers import Linear
from vidax.nn.attention import dot_product_attention
from vidax.nn.stack import scan_layers, stacked
from vidax.weights.loader import DtypePolicy, KeyRules, Placement, load_module
from vidax.weights.safetensors_io import CheckpointReader

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    # transformers QuickGELUActivation: x * sigmoid(1.702 x)
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
    # transformers GELUActivation (exact erf form); "gelu" is what ViT-H/14 (Wan) uses
    "gelu": partial(jax.nn.gelu, approximate=False),
    # tanh approximations (NewGELUActivation / PytorchGELUTanh)
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": partial(jax.nn.gelu, approximate=True),
}

_PREFIX = "vision_model."
_TOP_LEVEL = ("embeddings", "pre_layrnorm", "encoder", "post_layernorm")


# ----------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class CLIPVisionConfig(ConfigBase):
    """Settings of ``transformers.CLIPVisionConfig`` that the vision tower uses, with its defaults.

    Built from ``image_encoder/config.json``: a ``CLIPVisionConfig`` file (``model_type``
    ``"clip_vision_model"``, as Wan ships) or a full ``CLIPConfig`` (``model_type`` ``"clip"``),
    of which the ``vision_config`` entry is used, as ``CLIPVisionConfig.from_pretrained`` does.

    Attributes:
        hidden_size: D, token width.
        intermediate_size: hidden width of each MLP.
        num_hidden_layers: encoder blocks.
        num_attention_heads: N; D must be a multiple of N (head dim K = D / N).
        num_channels: image channels (3).
        image_size: the square input size in pixels; H = W = image_size.
        patch_size: p, pixels per patch side; (image_size / p)^2 patch tokens plus the class token.
        hidden_act: MLP activation: ``quick_gelu``, ``gelu``, ``gelu_new``, ``gelu_pytorch_tanh``.
        layer_norm_eps: epsilon of every LayerNorm.
        model_type: ``"clip_vision_model"``.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {
            # metadata
            "architectures", "dtype", "torch_dtype", "transformers_version", "name_or_path",
            "output_attentions", "output_hidden_states", "return_dict", "use_return_dict",
            "id2label", "label2id", "problem_type", "finetuning_task", "tokenizer_class",
            "prefix", "torchscript", "use_bfloat16", "tf_legacy_loss",
            # generic PretrainedConfig keys that the vision tower never reads (transformers 4
            # wrote all of them into a CLIPConfig's vision_config): generation settings, token
            # ids, decoder / cross-attention flags (CLIP layers have neither) and FFN chunking
            # (not used by CLIPMLP)
            "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
            "cross_attention_hidden_size", "tie_encoder_decoder", "tie_word_embeddings",
            "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
            "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id",
            "bad_words_ids", "begin_suppress_tokens", "suppress_tokens", "diversity_penalty",
            "do_sample", "early_stopping", "encoder_no_repeat_ngram_size",
            "exponential_decay_length_penalty", "length_penalty", "max_length", "min_length",
            "no_repeat_ngram_size", "num_beam_groups", "num_beams", "num_return_sequences",
            "output_scores", "remove_invalid_values", "repetition_penalty",
            "return_dict_in_generate", "task_specific_params", "temperature", "top_k", "top_p",
            "typical_p",
            # width of the projection head of CLIPModel / CLIPVisionModelWithProjection; the
            # CLIPVisionModel has no projection
            "projection_dim",
            # training only (dropout is off at inference; the checkpoint replaces the init)
            "dropout", "attention_dropout", "initializer_range", "initializer_factor",
            "gradient_checkpointing",
        }
    )

    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        # removed attention heads would change the q/k/v/out shapes
        "pruned_heads": ({}, ()),
    }

    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_channels: int = 3
    image_size: int = 224
    patch_size: int = 32
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    model_type: str = "clip_vision_model"

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        """Build from a ``CLIPVisionConfig`` dict, or a ``CLIPConfig``'s ``vision_config``.

        Raises:
            ConfigError: an unknown key, an unsupported value (see :meth:`validate`), or a
                ``CLIPConfig`` without a ``vision_config`` dict.
        """
        if config.get("model_type") == "clip" or "vision_config" in config:
            vision = config.get("vision_config")
            if not isinstance(vision, Mapping):
                raise ConfigError(
                    f"{source}: a CLIPConfig (model_type 'clip') needs a 'vision_config' dict; "
                    f"got {vision!r}"
                )
            return super().from_config_dict(vision, source=f"{source} (vision_config)")
        return super().from_config_dict(config, source=source)

    def validate(self, source: str) -> None:
        ints = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_channels", "image_size", "patch_size")  # fmt: skip
        for name in ints:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"{source}: {name}={value!r} must be a positive integer (vidax supports "
                    "square images and patches only)."
                )
        if self.model_type != "clip_vision_model":
            raise ConfigError(
                f"{source}: model_type={self.model_type!r} is not a CLIP vision tower; vidax's "
                "CLIPVisionConfig reads 'clip_vision_model' (or 'clip' with a vision_config)."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"{source}: hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}."
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ConfigError(
                f"{source}: hidden_act={self.hidden_act!r} is not implemented by vidax's CLIP "
                f"vision tower; supported: {sorted(_ACTIVATIONS)}."
            )
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps < 0:
            raise ConfigError(f"{source}: layer_norm_eps={self.layer_norm_eps!r} must be >= 0.")

    @property
    def num_patches(self) -> int:
        """Patch tokens per image: ``(image_size // patch_size) ** 2`` (the reference's count)."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def head_dim(self) -> int:
        """K = hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads


# ----------------------------------------------------------------------------- modules


def _layer_norm(dim: int, eps: float, dtype, param_dtype, rngs) -> nnx.LayerNorm:
    # Two-pass variance as torch (flax's default fast variance E[x^2] - E[x]^2 loses digits);
    # flax computes the statistics in at least fp32 and returns ``dtype``.
    return nnx.LayerNorm(dim, epsilon=eps, use_fast_variance=False, dtype=dtype,
                         param_dtype=param_dtype, rngs=rngs)  # fmt: skip


class CLIPVisionEmbeddings(nnx.Module):
    """Patch embedding + class token + position embedding (``CLIPVisionEmbeddings``).

    Parameters: ``class_embedding`` (D,), ``patch_embedding`` kernel (p, p, C, D) without bias,
    ``position_embedding`` (1 + P, D).
    """

    def __init__(self, cfg: CLIPVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        d = cfg.hidden_size
        self.class_embedding = nnx.Param(jax.random.normal(rngs.params(), (d,), param_dtype))
        self.patch_embedding = nnx.Conv(
            cfg.num_channels, d, kernel_size=(cfg.patch_size, cfg.patch_size),
            strides=(cfg.patch_size, cfg.patch_size), padding="VALID", use_bias=False,
            dtype=dtype, param_dtype=param_dtype, rngs=rngs,
        )  # fmt: skip
        self.position_embedding = nnx.Embed(
            cfg.num_patches + 1, d, dtype=dtype, param_dtype=param_dtype, rngs=rngs
        )

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        """(B, H, W, C) -> (B, 1 + P, D) float32 (P patches in row-major order, as torch)."""
        patches = self.patch_embedding(pixel_values)  # (B, H/p, W/p, D)
        b, gh, gw, d = patches.shape
        patches = patches.reshape(b, gh * gw, d).astype(jnp.float32)
        cls = jnp.broadcast_to(self.class_embedding[...].astype(jnp.float32), (b, 1, d))
        tokens = jnp.concatenate([cls, patches], axis=1)
        return tokens + self.position_embedding.embedding[...].astype(jnp.float32)[None]


class CLIPAttention(nnx.Module):
    """Multi-head self-attention with q/k/v/out biases, scale ``K**-0.5`` (``CLIPAttention``)."""

    def __init__(self, cfg: CLIPVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        d = cfg.hidden_size
        lin = partial(Linear, d, d, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = lin(), lin(), lin(), lin()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim

    def __call__(self, x: jax.Array) -> jax.Array:
        """(B, L, D) -> (B, L, D); fp32 scores and softmax."""
        b, length, _ = x.shape
        split = lambda t: t.reshape(b, length, self.num_heads, self.head_dim)  # noqa: E731
        out = dot_product_attention(
            split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)),
            scale=self.head_dim**-0.5,
        )  # fmt: skip
        return self.out_proj(out.reshape(b, length, self.num_heads * self.head_dim))


class CLIPMLP(nnx.Module):
    """``fc2(act(fc1 x))`` (``CLIPMLP``)."""

    def __init__(self, cfg: CLIPVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc1 = Linear(cfg.hidden_size, cfg.intermediate_size, **kw)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size, **kw)
        self.act = _ACTIVATIONS[cfg.hidden_act]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(self.act(self.fc1(x)))


class CLIPEncoderLayer(nnx.Module):
    """Pre-norm block: ``h += attn(ln1 h)``; ``h += mlp(ln2 h)`` (``CLIPEncoderLayer``)."""

    def __init__(self, cfg: CLIPVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = CLIPAttention(cfg, **kw)
        self.layer_norm1 = _layer_norm(cfg.hidden_size, cfg.layer_norm_eps, **kw)
        self.mlp = CLIPMLP(cfg, **kw)
        self.layer_norm2 = _layer_norm(cfg.hidden_size, cfg.layer_norm_eps, **kw)

    def __call__(self, h: jax.Array) -> jax.Array:
        """(B, L, D) float32 residual stream -> same."""
        h = h + self.self_attn(self.layer_norm1(h)).astype(h.dtype)
        return h + self.mlp(self.layer_norm2(h)).astype(h.dtype)


class CLIPEncoder(nnx.Module):
    """``encoder.layers``: the blocks, stacked on a leading layer axis and run with a scan."""

    def __init__(self, cfg: CLIPVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.layers = stacked(
            lambda r: CLIPEncoderLayer(cfg, dtype=dtype, param_dtype=param_dtype, rngs=r),
            cfg.num_hidden_layers,
            rngs,
        )

    def __call__(self, h: jax.Array, num_layers: int) -> jax.Array:
        """Run the first ``num_layers`` blocks (a static int, 0 = none) on ``h`` (B, L, D)."""
        if num_layers == 0:
            return h
        graphdef, state = nnx.split(self.layers)
        first = nnx.merge(graphdef, jax.tree.map(lambda a: a[:num_layers], state))
        return scan_layers(first, h, lambda layer, x: layer(x))


class CLIPVisionEncoder(nnx.Module):
    """The CLIP vision tower, following ``transformers.CLIPVisionModel``, channels last.

    Args:
        config: the parsed ``image_encoder/config.json``.
        dtype: compute dtype, ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).
        param_dtype: dtype of freshly built parameters (default ``dtype``; the loader sets the
            stored dtype by :func:`clip_dtype_policy`).
        rngs: initialisers' keys (values are overwritten by the checkpoint).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    def __init__(self, config: CLIPVisionConfig, *, dtype: Any = jnp.float32,
                 param_dtype: Any = None, rngs: nnx.Rngs | None = None):  # fmt: skip
        dtype = compute_dtype(dtype, "CLIP vision encoder")
        param_dtype = dtype if param_dtype is None else param_dtype
        rngs = nnx.Rngs(0) if rngs is None else rngs
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        d, eps = config.hidden_size, config.layer_norm_eps
        self.embeddings = CLIPVisionEmbeddings(config, **kw)
        self.pre_layrnorm = _layer_norm(d, eps, **kw)  # the reference's spelling
        self.encoder = CLIPEncoder(config, **kw)
        self.post_layernorm = _layer_norm(d, eps, **kw)
        self.config = config
        self.dtype = dtype

    def __call__(self, pixel_values: jax.Array, output_layer: int = -1) -> jax.Array:
        """Hidden states of one layer, ``CLIPVisionModel(..., output_hidden_states=True)
        .hidden_states[output_layer]``.

        Args:
            pixel_values: ``(B, H, W, C)`` float, channels last, already normalised (see
                :func:`clip_preprocess`), ``H = W = image_size``.
            output_layer: a static Python int indexing the reference's ``hidden_states`` tuple of
                ``num_hidden_layers + 1`` entries: 0 is the embeddings after ``pre_layrnorm``,
                ``i`` the output of block ``i``; negative values count from the end, so ``-1``
                is ``last_hidden_state`` and ``-2`` (what the Wan I2V pipelines use) the output
                of the second-to-last block. Only the blocks up to that one are run. No post
                layernorm is applied.

        Returns:
            ``(B, 1 + P, D)`` in the compute dtype, P = ``(image_size // patch_size) ** 2``,
            class token first, patches in row-major order.

        Raises:
            InputError: ``pixel_values`` is not a ``(B, image_size, image_size, num_channels)``
                float array, or ``output_layer`` is out of range.
        """
        cfg = self.config
        x = jnp.asarray(pixel_values)
        want = (cfg.image_size, cfg.image_size, cfg.num_channels)
        if x.ndim != 4 or tuple(x.shape[1:]) != want or x.shape[0] < 1:
            raise InputError(
                f"pixel_values must be (B, {want[0]}, {want[1]}, {want[2]}) channels-last "
                f"(image_size={cfg.image_size}); got shape {tuple(x.shape)} (channels-first? "
                "other sizes? see clip_preprocess)."
            )
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise InputError(f"pixel_values must be floating point; got dtype {x.dtype}.")
        n = cfg.num_hidden_layers
        if not isinstance(output_layer, int) or isinstance(output_layer, bool) or not (
            -(n + 1) <= output_layer <= n
        ):
            raise InputError(
                f"output_layer={output_layer!r} must be an int in [{-(n + 1)}, {n}] (an index "
                f"into the {n + 1} hidden states: embeddings, then {n} blocks)."
            )
        num_layers = output_layer % (n + 1)
        h = self.embeddings(x.astype(self.dtype))
        h = self.pre_layrnorm(h).astype(jnp.float32)
        return self.encoder(h, num_layers).astype(self.dtype)


# ----------------------------------------------------------------------------- loading


def clip_key_rules(keys: Any = ()) -> KeyRules:
    """Key mapping of a ``CLIPVisionModel`` checkpoint whose tensor names are ``keys``.

    ``encoder.layers.{i}`` is stacked. When the keys carry the ``vision_model.`` prefix of files
    written by transformers 4 (the released Wan checkpoints), it is renamed away.
    """
    renames: tuple[tuple[str, str], ...] = ()
    if any(str(k).startswith(_PREFIX) for k in keys):
        renames = tuple((_PREFIX + name, name) for name in _TOP_LEVEL)
    return KeyRules(stacked=("encoder.layers",), renames=renames)


def clip_dtype_policy(dtype: Any = jnp.float32) -> DtypePolicy:
    """Every parameter stored in ``dtype`` (transformers keeps no CLIP module in fp32).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """
    return DtypePolicy(param_dtype=compute_dtype(dtype, "CLIP vision encoder"), keep_fp32=())


def load_clip_vision(
    path: str | os.PathLike, dtype: Any = jnp.float32, placement: Placement | None = None
) -> CLIPVisionEncoder:
    """Build the CLIP vision tower of an ``image_encoder/`` folder and load its weights.

    Args:
        path: folder with ``config.json`` and ``model.safetensors`` (or shards + index), as
            ``CLIPVisionModel.save_pretrained`` writes it.
        dtype: compute and storage dtype, ``jnp.float32`` (default, as the Wan pipelines load
            the image encoder) or ``jnp.bfloat16``.
        placement: ``(param path, ShapeDtypeStruct) -> Sharding``; default: the first device.

    Returns:
        The :class:`CLIPVisionEncoder`, parameters placed.

    Raises:
        InputError: ``path`` is not a folder, or ``dtype`` is not supported.
        ConfigError: ``config.json`` is missing or asks for something not implemented.
        CheckpointError: tensors missing, unexpected (e.g. a ``visual_projection`` head) or of
            the wrong shape, checked before any tensor is read.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise InputError(f"path={path!r} is not a folder; pass the image_encoder/ directory.")
    dtype = compute_dtype(dtype, "CLIP vision encoder")
    config = CLIPVisionConfig.from_json_file(os.path.join(path, "config.json"))
    reader = CheckpointReader(path)
    return load_module(
        lambda: CLIPVisionEncoder(config, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0)),
        reader,
        clip_key_rules(reader.keys()),
        clip_dtype_policy(dtype),
        placement=placement,
        what="image_encoder (CLIP vision)",
    )


# ----------------------------------------------------------------------------- preprocessing

# CLIPImageProcessor's class defaults (transformers 5.24), used for keys the file leaves out.
_PREPROCESS_DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "size": {"shortest_edge": 224},
    "resample": 3,  # PIL bicubic
    "do_center_crop": True,
    "crop_size": {"height": 224, "width": 224},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": (0.48145466, 0.4578275, 0.40821073),  # OPENAI_CLIP_MEAN
    "image_std": (0.26862954, 0.26130258, 0.27577711),  # OPENAI_CLIP_STD
    "do_convert_rgb": True,
}
# Keys of a preprocessor_config.json that do not change the result.
_PREPROCESS_IGNORED = frozenset(
    {"image_processor_type", "feature_extractor_type", "processor_class", "default_to_square",
     "return_tensors", "data_format", "input_data_format", "device"}
)  # fmt: skip
# Settings vidax does not implement -> their no-op values.
_PREPROCESS_NEUTRAL: dict[str, tuple[Any, ...]] = {"do_pad": (None, False), "pad_size": (None,)}


def _size_dict(value: Any, key: str, shortest_ok: bool) -> dict[str, int]:
    """transformers ``get_size_dict``: an int is ``{shortest_edge}`` (size) or square (crop)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"shortest_edge": value} if shortest_ok else {"height": value, "width": value}
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return {"height": int(value[0]), "width": int(value[1])}
    if isinstance(value, Mapping):
        keys = {k for k, v in value.items() if v is not None}
        if keys == {"height", "width"} or (shortest_ok and keys == {"shortest_edge"}):
            return {k: int(value[k]) for k in keys}
    valid = "{'shortest_edge': n}, {'height': h, 'width': w} or an int" if shortest_ok else (
        "{'height': h, 'width': w} or an int"
    )
    raise ConfigError(f"preprocessor config: {key}={value!r} is not supported; use {valid}.")


def _preprocess_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise InputError(
            f"preprocessor_config must be a dict (the parsed preprocessor_config.json); got "
            f"{type(config).__name__}"
        )
    s = dict(_PREPROCESS_DEFAULTS)
    for key, value in config.items():
        if key.startswith("_") or key in _PREPROCESS_IGNORED:
            continue
        if key in _PREPROCESS_NEUTRAL:
            if value not in _PREPROCESS_NEUTRAL[key]:
                raise ConfigError(
                    f"preprocessor config: {key}={value!r} is not implemented by vidax's "
                    f"clip_preprocess; only {_PREPROCESS_NEUTRAL[key]} is supported."
                )
            continue
        if key == "use_square_size":  # CLIPImageProcessor.__init__ (KOSMOS-2 compatibility)
            continue
        if key not in s:
            raise ConfigError(
                f"preprocessor config: unknown setting {key}={value!r}; vidax's clip_preprocess "
                f"knows {sorted(s) + sorted(_PREPROCESS_NEUTRAL) + ['use_square_size']}."
            )
        s[key] = value
    s["size"] = _size_dict(s["size"], "size", shortest_ok=True)
    if config.get("use_square_size") and "shortest_edge" in s["size"]:
        n = s["size"]["shortest_edge"]
        s["size"] = {"height": n, "width": n}
    s["crop_size"] = _size_dict(s["crop_size"], "crop_size", shortest_ok=False)
    for key in ("image_mean", "image_std"):
        value = s[key]
        value = [value] * 3 if isinstance(value, (int, float)) else list(value)
        if len(value) != 3:
            raise ConfigError(f"preprocessor config: {key}={s[key]!r} needs 3 entries (RGB).")
        s[key] = value
    return s


def _resize_shape(height: int, width: int, size: dict[str, int]) -> tuple[int, int]:
    """``get_resize_output_image_size(default_to_square=False)``: (new height, new width)."""
    if "height" in size:
        return size["height"], size["width"]
    n = size["shortest_edge"]
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(n * long / short)
    return (new_long, n) if width <= height else (n, new_long)


def _to_uint8_for_pil(image: np.ndarray) -> tuple[np.ndarray, bool]:
    """``to_pil_image``'s conversion: (uint8 image, whether it was scaled by 255 first)."""
    if image.dtype == np.uint8:
        return image, False
    if np.allclose(image, image.astype(int)):
        if np.all(image >= 0) and np.all(image <= 255):
            return image.astype(np.uint8), False
        raise InputError(
            f"image values outside [0, 255] cannot be resized as uint8: range "
            f"[{image.min()}, {image.max()}]"
        )
    if np.all(image >= 0) and np.all(image <= 1):
        # rescale(image, 255) (float64 product stored as float32), then a truncating cast.
        return (image.astype(np.float64) * 255).astype(np.float32).astype(np.uint8), True
    raise InputError(
        f"float image values must be in [0, 1] or integers in [0, 255]; got range "
        f"[{image.min()}, {image.max()}]"
    )


def _center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """``image_transforms.center_crop`` on (H, W, C): crop, zero-padding images that are smaller."""
    h, w = image.shape[:2]
    top, left = (h - height) // 2, (w - width) // 2
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return image[top : top + height, left : left + width]
    new_h, new_w = max(height, h), max(width, w)
    out = np.zeros((new_h, new_w) + image.shape[2:], image.dtype)
    top_pad, left_pad = math.ceil((new_h - h) / 2), math.ceil((new_w - w) / 2)
    out[top_pad : top_pad + h, left_pad : left_pad + w] = image
    top, left = top + top_pad, left + left_pad
    return out[max(0, top) : min(new_h, top + height), max(0, left) : min(new_w, left + width)]


def _rgb_from_pil(image, convert: bool) -> np.ndarray:
    """``convert_to_rgb`` of a PIL image: transparency composited onto white, then RGB."""
    from PIL import Image

    if not convert:
        return np.array(image)
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.array(Image.alpha_composite(white, rgba).convert("RGB"))
    return np.array(image.convert("RGB"))


def clip_preprocess(image: Any, preprocessor_config: Mapping[str, Any]) -> np.ndarray:
    """One image -> CLIP ``pixel_values``, as ``CLIPImageProcessor(**preprocessor_config)``.

    Follows transformers 5.24's PIL backend step by step (see the module docstring): resize so
    the shortest edge is ``size["shortest_edge"]`` (longer edge ``int(n * long / short)``) or to
    ``size["height"/"width"]`` with PIL and ``resample`` (3 = bicubic) on the uint8 image; center
    crop to ``crop_size`` (zero-padding a smaller image); ``rescale_factor`` (float64 product,
    stored float32); ``(x - image_mean) / image_std`` in float32. Each step only if its ``do_*``
    flag is on. The result equals the reference's bit for bit.

    Args:
        image: ``(H, W, 3)`` RGB array, ``uint8`` or float, or a ``PIL.Image`` (converted to RGB
            when ``do_convert_rgb``, transparency composited onto white, as the reference). A
            float array with integer values in ``[0, 255]`` is treated as uint8; one with values
            in ``[0, 1]`` is converted for PIL as ``uint8(x * 255)`` (truncated) and brought back
            by ``/ 255`` after the resize, and is then *still* rescaled by ``rescale_factor``,
            exactly as the reference (pass uint8 images to avoid that double scaling).
        preprocessor_config: the parsed ``image_processor/preprocessor_config.json``; keys left
            out take ``CLIPImageProcessor``'s defaults (224 px, bicubic, OpenAI CLIP mean/std).

    Returns:
        ``(crop_h, crop_w, 3)`` float32 numpy, channels last ((224, 224, 3) for Wan); stack a
        batch with ``np.stack`` and pass it to :class:`CLIPVisionEncoder`.

    Raises:
        InputError: ``image`` is not an ``(H, W, 3)`` uint8/float array or PIL image, or a float
            image is outside ``[0, 1]`` and not integer-valued in ``[0, 255]``.
        ConfigError: a setting is unknown or not implemented (e.g. ``do_pad``, a ``size`` with
            ``longest_edge``).
    """
    s = _preprocess_settings(preprocessor_config)
    if hasattr(image, "getbands") and hasattr(image, "convert"):  # a PIL image
        image = _rgb_from_pil(image, bool(s["do_convert_rgb"]))
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != 3 or min(image.shape) < 1:
        raise InputError(
            f"image must be (H, W, 3) RGB channels-last; got shape {image.shape} (convert "
            "grey or RGBA images to RGB first, or pass a PIL image)."
        )
    if image.dtype != np.uint8 and not np.issubdtype(image.dtype, np.floating):
        raise InputError(f"image must be uint8 or float; got dtype {image.dtype}.")
    if s["do_resize"]:
        from PIL import Image

        pixels, scaled = _to_uint8_for_pil(image)
        new_h, new_w = _resize_shape(image.shape[0], image.shape[1], s["size"])
        resized = Image.fromarray(pixels).resize((new_w, new_h), resample=int(s["resample"]))
        image = np.array(resized)
        if scaled:
            image = (image.astype(np.float64) * (1 / 255)).astype(np.float32)
    if s["do_center_crop"]:
        image = _center_crop(image, s["crop_size"]["height"], s["crop_size"]["width"])
    if s["do_rescale"]:
        image = (image.astype(np.float64) * float(s["rescale_factor"])).astype(np.float32)
    if s["do_normalize"]:
        if not np.issubdtype(image.dtype, np.floating):
            image = image.astype(np.float32)
        mean = np.array(s["image_mean"], dtype=image.dtype)
        std = np.array(s["image_std"], dtype=image.dtype)
        image = (image - mean) / std
    return np.ascontiguousarray(image, dtype=np.float32)
