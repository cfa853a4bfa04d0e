"""CLIP vision tower (transformers ``CLIPVisionModel``), text tower (``CLIPTextModel``) and the
image preprocessing, in JAX. Both towers run the same encoder layers (:class:`CLIPEncoderLayer`).

Vision: the Wan2.1 image-to-video pipelines condition on ``CLIPVisionModel(pixel_values,
output_hidden_states=True).hidden_states[-2]``: the full token sequence (class token first) after
the second-to-last encoder layer, without the post layernorm; LLaVA (:mod:`vidax.encoders.llava`)
takes the same entry without the class token. :class:`CLIPVisionEncoder` returns any entry of
that ``hidden_states`` tuple (``output_layer``) and runs only the layers it needs.

Vision model: patch embedding (a stride-``p`` convolution without bias), class token, learned
position embedding, ``pre_layrnorm``, ``num_hidden_layers`` pre-norm blocks (multi-head
self-attention with biases, MLP ``fc2(act(fc1 x))``) stacked on a leading layer axis and run with
a scan, and ``post_layernorm`` (loaded so the checkpoint maps 1:1; it only feeds the pooled
output, which the Wan pipelines do not use and this module does not compute). Images must be
``image_size`` square, as the reference requires without ``interpolate_pos_encoding`` (which the
pipelines never set).

Text model (:class:`CLIPTextEncoder`, HunyuanVideo's ``text_encoder_2``): token + position
embedding, the same blocks with *causal* self-attention, ``final_layer_norm``, and the pooled
output taken at the EOS token by the reference's rule for the config's ``eos_token_id``.
HunyuanVideo uses only the pooled output (``pooler_output``) and passes no attention mask.

Checkpoint keys: transformers 5 names the trees ``embeddings.*``, ``pre_layrnorm.*``,
``encoder.layers.{i}.*``, ``post_layernorm.*`` (vision) and ``embeddings.*``,
``encoder.layers.{i}.*``, ``final_layer_norm.*`` (text); files written by transformers 4 (the
released Wan and HunyuanVideo checkpoints) prefix every key with ``vision_model.`` /
``text_model.``. :func:`clip_key_rules` handles both.

Precision (every parameter in the load dtype): ``float32`` (the Wan pipelines load the image encoder in
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
import functools
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.config import ConfigBase
from vidax.errors import ConfigError, InputError
from vidax.nn.attention import dot_product_attention
from vidax.nn.inputs import compute_dtype
from vidax.nn.kernels import from_stack_bits, stack_bits_state
from vidax.nn.layers import Linear
from vidax.nn.stack import scan_layers, stacked
from vidax.parallel.offload import streams_layers
from vidax.parallel.rules import column_parallel, row_parallel
from vidax.weights.loader import KeyRules

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

# PretrainedConfig keys that neither tower reads: metadata, generation settings, decoder /
# cross-attention flags (CLIP layers have neither), FFN chunking (not used by CLIPMLP), the width
# of the projection heads of CLIPModel / CLIP*ModelWithProjection (CLIPTextModel and
# CLIPVisionModel have none), and training-only settings (dropout is off at inference; the
# checkpoint replaces the init). transformers 4 wrote all of them into a CLIPConfig's sub-configs.
_TOWER_IGNORED = frozenset(
    {
        "architectures", "dtype", "torch_dtype", "transformers_version", "name_or_path",
        "output_attentions", "output_hidden_states", "return_dict", "use_return_dict",
        "id2label", "label2id", "problem_type", "finetuning_task", "tokenizer_class",
        "prefix", "torchscript", "use_bfloat16", "tf_legacy_loss",
        "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
        "cross_attention_hidden_size", "tie_encoder_decoder", "tie_word_embeddings",
        "bos_token_id", "pad_token_id", "sep_token_id",
        "decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id",
        "bad_words_ids", "begin_suppress_tokens", "suppress_tokens", "diversity_penalty",
        "do_sample", "early_stopping", "encoder_no_repeat_ngram_size",
        "exponential_decay_length_penalty", "length_penalty", "max_length", "min_length",
        "no_repeat_ngram_size", "num_beam_groups", "num_beams", "num_return_sequences",
        "output_scores", "remove_invalid_values", "repetition_penalty",
        "return_dict_in_generate", "task_specific_params", "temperature", "top_k", "top_p",
        "typical_p",
        "projection_dim",
        "dropout", "attention_dropout", "initializer_range", "initializer_factor",
        "gradient_checkpointing",
    }
)  # fmt: skip


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass(frozen=True)
class _CLIPTowerConfig(ConfigBase):
    """Settings shared by CLIP's text and vision towers (the encoder layers they both run).

    Subclasses name their ``model_type``, the ``CLIPConfig`` entry that holds them
    (``_SUB_CONFIG``) and the integer fields that must be positive (``_POSITIVE``).
    """

    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        # removed attention heads would change the q/k/v/out shapes
        "pruned_heads": ({}, ()),
    }
    _SUB_CONFIG: ClassVar[str] = ""
    _MODEL_TYPE: ClassVar[str] = ""
    _POSITIVE: ClassVar[tuple[str, ...]] = (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    )  # fmt: skip

    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        """Build from the tower's own config dict, or from a full ``CLIPConfig`` (``model_type``
        ``"clip"``), of which the ``_SUB_CONFIG`` entry is used, as the tower's
        ``from_pretrained`` does.

        Raises:
            ConfigError: an unknown key, an unsupported value (see :meth:`validate`), or a
                ``CLIPConfig`` without the sub-config dict.
        """
        if config.get("model_type") == "clip" or cls._SUB_CONFIG in config:
            sub = config.get(cls._SUB_CONFIG)
            if not isinstance(sub, Mapping):
                raise ConfigError(
                    f"{source}: a CLIPConfig (model_type 'clip') needs a {cls._SUB_CONFIG!r} dict; got {sub!r}"
                )
            return super().from_config_dict(sub, source=f"{source} ({cls._SUB_CONFIG})")
        return super().from_config_dict(config, source=source)

    def validate(self, source: str) -> None:
        for name in self._POSITIVE:
            value = getattr(self, name)
            if not _positive_int(value):
                raise ConfigError(f"{source}: {name}={value!r} must be a positive integer.")
        if getattr(self, "model_type", None) != self._MODEL_TYPE:
            raise ConfigError(
                f"{source}: model_type={getattr(self, 'model_type', None)!r} is not a "
                f"{self._MODEL_TYPE!r} config; vidax's {type(self).__name__} reads "
                f"{self._MODEL_TYPE!r} (or 'clip' with a {self._SUB_CONFIG})."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"{source}: hidden_size={self.hidden_size} is not a multiple of "
                f"num_attention_heads={self.num_attention_heads}."
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ConfigError(
                f"{source}: hidden_act={self.hidden_act!r} is not implemented by vidax's CLIP "
                f"encoder layers; supported: {sorted(_ACTIVATIONS)}."
            )
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps < 0:
            raise ConfigError(f"{source}: layer_norm_eps={self.layer_norm_eps!r} must be >= 0.")

    @property
    def head_dim(self) -> int:
        """K = hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads


@dataclasses.dataclass(frozen=True)
class CLIPVisionConfig(_CLIPTowerConfig):
    """Settings of ``transformers.CLIPVisionConfig`` that the vision tower uses, with its defaults.

    Built from ``image_encoder/config.json``: a ``CLIPVisionConfig`` file (``model_type``
    ``"clip_vision_model"``, as Wan ships) or a full ``CLIPConfig`` (``model_type`` ``"clip"``),
    of which the ``vision_config`` entry is used, as ``CLIPVisionConfig.from_pretrained`` does.

    Attributes:
        hidden_size: D, token width.
        intermediate_size: hidden width of each MLP.
        num_hidden_layers: encoder blocks.
        num_attention_heads: N; D must be a multiple of N (head dim K = D / N).
        hidden_act: MLP activation: ``quick_gelu``, ``gelu``, ``gelu_new``, ``gelu_pytorch_tanh``.
        layer_norm_eps: epsilon of every LayerNorm.
        num_channels: image channels (3).
        image_size: the square input size in pixels; H = W = image_size.
        patch_size: p, pixels per patch side; (image_size / p)^2 patch tokens plus the class token.
        model_type: ``"clip_vision_model"``.
    """

    # The vision tower reads no token id and has no vocabulary (LLaVA configs carry a
    # vocab_size in their vision_config, LlavaConfig's own default does too).
    IGNORED: ClassVar[frozenset[str]] = _TOWER_IGNORED | {"eos_token_id", "vocab_size"}
    _SUB_CONFIG: ClassVar[str] = "vision_config"
    _MODEL_TYPE: ClassVar[str] = "clip_vision_model"
    _POSITIVE: ClassVar[tuple[str, ...]] = _CLIPTowerConfig._POSITIVE + (
        "num_channels", "image_size", "patch_size",
    )  # fmt: skip

    num_channels: int = 3
    image_size: int = 224
    patch_size: int = 32
    model_type: str = "clip_vision_model"

    @property
    def num_patches(self) -> int:
        """Patch tokens per image: ``(image_size // patch_size) ** 2`` (the reference's count)."""
        return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True)
class CLIPTextConfig(_CLIPTowerConfig):
    """Settings of ``transformers.CLIPTextConfig`` that ``CLIPTextModel`` uses, with its defaults.

    Built from ``text_encoder_2/config.json`` (HunyuanVideo's openai/clip-vit-large-patch14 text
    tower, ``model_type`` ``"clip_text_model"``) or a full ``CLIPConfig``'s ``text_config``.

    Attributes:
        vocab_size: V, rows of the token embedding.
        hidden_size: D.
        intermediate_size: hidden width of each MLP.
        num_hidden_layers: encoder blocks.
        num_attention_heads: N (K = D / N).
        max_position_embeddings: rows of the learned position embedding: the longest L.
        hidden_act: MLP activation (``quick_gelu`` for OpenAI CLIP).
        layer_norm_eps: epsilon of every LayerNorm.
        eos_token_id: selects the pooled token: ``2`` (the legacy value of old configs, e.g.
            clip-vit-large-patch14 and HunyuanVideo's) pools at the *largest* token id of each
            row, any other value at the first occurrence of that id (as
            ``CLIPTextModel.forward``).
        model_type: ``"clip_text_model"``.
    """

    IGNORED: ClassVar[frozenset[str]] = _TOWER_IGNORED
    _SUB_CONFIG: ClassVar[str] = "text_config"
    _MODEL_TYPE: ClassVar[str] = "clip_text_model"
    _POSITIVE: ClassVar[tuple[str, ...]] = _CLIPTowerConfig._POSITIVE + (
        "vocab_size", "max_position_embeddings",
    )  # fmt: skip

    hidden_size: int = 512
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    vocab_size: int = 49408
    max_position_embeddings: int = 77
    eos_token_id: int = 49407
    model_type: str = "clip_text_model"

    def validate(self, source: str) -> None:
        super().validate(source)
        eos = self.eos_token_id
        if not isinstance(eos, int) or isinstance(eos, bool) or eos < 0:
            raise ConfigError(
                f"{source}: eos_token_id={eos!r} must be one non-negative integer (the pooled "
                "token is chosen by it; a list of ids is not implemented)."
            )

    @property
    def legacy_eos_pooling(self) -> bool:
        """True when the pooled token is the row's largest id (``eos_token_id == 2``)."""
        return self.eos_token_id == 2


# ----------------------------------------------------------------------------- modules


def _module_kwargs(dtype: Any, param_dtype: Any, rngs: nnx.Rngs | None, what: str) -> tuple[Any, dict]:
    """(checked compute dtype, ``dtype`` / ``param_dtype`` / ``rngs`` keywords for sub-modules):
    ``param_dtype`` defaults to ``dtype``, ``rngs`` to ``nnx.Rngs(0)``.

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16 (the message names ``what``).
    """
    dtype = compute_dtype(dtype, what)
    rngs = nnx.Rngs(0) if rngs is None else rngs
    return dtype, dict(dtype=dtype, param_dtype=dtype if param_dtype is None else param_dtype, rngs=rngs)


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
        self.position_embedding = nnx.Embed(cfg.num_patches + 1, d, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        """(B, H, W, C) -> (B, 1 + P, D) float32 (P patches in row-major order, as torch)."""
        patches = self.patch_embedding(pixel_values)  # (B, H/p, W/p, D)
        b, gh, gw, d = patches.shape
        patches = patches.reshape(b, gh * gw, d).astype(jnp.float32)
        cls = jnp.broadcast_to(self.class_embedding[...].astype(jnp.float32), (b, 1, d))
        tokens = jnp.concatenate([cls, patches], axis=1)
        return tokens + self.position_embedding.embedding[...].astype(jnp.float32)[None]


class CLIPAttention(nnx.Module):
    """Multi-head self-attention with q/k/v/out biases, scale ``K**-0.5`` (``CLIPAttention``).

    One implementation for both towers: the vision tower attends bidirectionally, the text tower
    with ``causal=True`` (``CLIPTextModel`` passes ``is_causal=True``) and optionally a key
    padding ``bias``.
    """

    def __init__(self, cfg: _CLIPTowerConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        d = cfg.hidden_size
        lin = partial(Linear, d, d, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = lin(), lin(), lin(), lin()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim

    def __call__(self, x: jax.Array, causal: bool = False, bias: jax.Array | None = None) -> jax.Array:
        """(B, L, D) -> (B, L, D); fp32 scores and softmax.

        ``causal``: query i attends keys j <= i. ``bias``: (B, 1, L, L) float32 added to the
        scores (0 or -inf), or None.
        """
        b, length, _ = x.shape
        split = lambda t: t.reshape(b, length, self.num_heads, self.head_dim)  # noqa: E731
        out = dot_product_attention(
            split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)),
            scale=self.head_dim**-0.5, causal=causal, bias=bias,
        )  # fmt: skip
        return self.out_proj(out.reshape(b, length, self.num_heads * self.head_dim))


class CLIPMLP(nnx.Module):
    """``fc2(act(fc1 x))`` (``CLIPMLP``)."""

    def __init__(self, cfg: _CLIPTowerConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.fc1 = Linear(cfg.hidden_size, cfg.intermediate_size, **kw)
        self.fc2 = Linear(cfg.intermediate_size, cfg.hidden_size, **kw)
        self.act = _ACTIVATIONS[cfg.hidden_act]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(self.act(self.fc1(x)))


class CLIPEncoderLayer(nnx.Module):
    """Pre-norm block: ``h += attn(ln1 h)``; ``h += mlp(ln2 h)`` (``CLIPEncoderLayer``)."""

    def __init__(self, cfg: _CLIPTowerConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = CLIPAttention(cfg, **kw)
        self.layer_norm1 = _layer_norm(cfg.hidden_size, cfg.layer_norm_eps, **kw)
        self.mlp = CLIPMLP(cfg, **kw)
        self.layer_norm2 = _layer_norm(cfg.hidden_size, cfg.layer_norm_eps, **kw)

    def __call__(self, h: jax.Array, causal: bool = False, bias: jax.Array | None = None) -> jax.Array:
        """(B, L, D) float32 residual stream -> same (masks as :class:`CLIPAttention`)."""
        h = h + self.self_attn(self.layer_norm1(h), causal, bias).astype(h.dtype)
        return h + self.mlp(self.layer_norm2(h)).astype(h.dtype)


class CLIPEncoder(nnx.Module):
    """``encoder.layers``: the blocks, stacked on a leading layer axis and run with a scan."""

    def __init__(self, cfg: _CLIPTowerConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.layers = stacked(
            lambda r: CLIPEncoderLayer(cfg, dtype=dtype, param_dtype=param_dtype, rngs=r),
            cfg.num_hidden_layers,
            rngs,
        )

    def __call__(self, h: jax.Array, num_layers: int, causal: bool = False,
                 bias: jax.Array | None = None) -> jax.Array:  # fmt: skip
        """Run the first ``num_layers`` blocks (a static int, 0 = none) on ``h`` (B, L, D)."""
        if num_layers == 0:
            return h
        return scan_layers(self.layers, h, lambda layer, x: layer(x, causal, bias), num_layers=num_layers)


def checked_pixel_values(pixel_values: Any, cfg: Any, preprocess: str) -> jax.Array:
    """``pixel_values`` as a jnp array after checking it is ``(B, image_size, image_size,
    num_channels)`` float (``cfg``: a vision tower config; ``preprocess`` names the function that
    makes such arrays, for the message).

    Raises:
        InputError: another shape or an integer dtype.
    """
    x = jnp.asarray(pixel_values)
    want = (cfg.image_size, cfg.image_size, cfg.num_channels)
    if x.ndim != 4 or tuple(x.shape[1:]) != want or x.shape[0] < 1:
        raise InputError(
            f"pixel_values must be (B, {want[0]}, {want[1]}, {want[2]}) channels-last "
            f"(image_size={cfg.image_size}); got shape {tuple(x.shape)} (channels-first? "
            f"other sizes? see {preprocess})."
        )
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise InputError(f"pixel_values must be floating point; got dtype {x.dtype}.")
    return x


class CLIPVisionEncoder(nnx.Module):
    """The CLIP vision tower, following ``transformers.CLIPVisionModel``, channels last.

    Args:
        config: the parsed ``image_encoder/config.json``.
        dtype: compute dtype, ``jnp.float32`` or ``jnp.bfloat16`` (see the module docstring).
        param_dtype: dtype of freshly built parameters (default ``dtype``; the loader sets the
            stored dtype: every parameter in the load dtype).
        rngs: initialisers' keys (values are overwritten by the checkpoint).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    def __init__(self, config: CLIPVisionConfig, *, dtype: Any = jnp.float32,
                 param_dtype: Any = None, rngs: nnx.Rngs | None = None):  # fmt: skip
        dtype, kw = _module_kwargs(dtype, param_dtype, rngs, "CLIP vision encoder")
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
        x = checked_pixel_values(pixel_values, cfg, "clip_preprocess")
        n = cfg.num_hidden_layers
        if not isinstance(output_layer, int) or isinstance(output_layer, bool) or not (-(n + 1) <= output_layer <= n):
            raise InputError(
                f"output_layer={output_layer!r} must be an int in [{-(n + 1)}, {n}] (an index "
                f"into the {n + 1} hidden states: embeddings, then {n} blocks)."
            )
        num_layers = output_layer % (n + 1)
        h = self.embeddings(x.astype(self.dtype))
        h = self.pre_layrnorm(h).astype(jnp.float32)
        return self.encoder(h, num_layers).astype(self.dtype)


class CLIPTextEmbeddings(nnx.Module):
    """Token embedding + learned absolute position embedding (``CLIPTextEmbeddings``).

    Parameters: ``token_embedding`` (V, D), ``position_embedding`` (max_position_embeddings, D).
    """

    def __init__(self, cfg: CLIPTextConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.token_embedding = nnx.Embed(cfg.vocab_size, cfg.hidden_size, **kw)
        self.position_embedding = nnx.Embed(cfg.max_position_embeddings, cfg.hidden_size, **kw)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        """(B, L) int -> (B, L, D) float32; positions ``0 .. L-1`` (the reference's default)."""
        tokens = jnp.take(self.token_embedding.embedding[...], input_ids, axis=0).astype(jnp.float32)
        positions = self.position_embedding.embedding[: input_ids.shape[1]].astype(jnp.float32)
        return tokens + positions[None]


class CLIPTextEncoder(nnx.Module):
    """The CLIP text tower, following ``transformers.CLIPTextModel`` (transformers 5.24).

    Token + position embeddings, ``num_hidden_layers`` pre-norm blocks with *causal*
    self-attention (the same :class:`CLIPEncoderLayer` as the vision tower, stacked and scanned),
    ``final_layer_norm``; the pooled output is the final-normed hidden state of one token per row
    (see :attr:`CLIPTextConfig.eos_token_id`). HunyuanVideo uses the pooled output
    (``pooler_output``) as its transformer's ``pooled_projections``.

    ``config`` is the parsed ``text_encoder_2/config.json``; ``dtype``, ``param_dtype`` and
    ``rngs`` (and the InputError for another dtype) as :class:`CLIPVisionEncoder`'s: layer-norm
    statistics, softmax and the residual stream stay float32.
    """

    #: Its stacked layers (dotted attribute paths): passed into its jitted forward as uint16 views
    #: on CPU (:func:`vidax.nn.kernels.stacks.as_stack_bits`).
    stacked_paths: ClassVar[tuple[str, ...]] = ("encoder.layers",)

    def __init__(self, config: CLIPTextConfig, *, dtype: Any = jnp.float32,
                 param_dtype: Any = None, rngs: nnx.Rngs | None = None):  # fmt: skip
        dtype, kw = _module_kwargs(dtype, param_dtype, rngs, "CLIP text encoder")
        self.embeddings = CLIPTextEmbeddings(config, **kw)
        self.encoder = CLIPEncoder(config, **kw)
        self.final_layer_norm = _layer_norm(config.hidden_size, config.layer_norm_eps, **kw)
        self.config = config
        self.dtype = dtype

    def encode(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """``CLIPTextModel(input_ids, attention_mask)``: ``(last_hidden_state, pooler_output)``.

        Args:
            input_ids: (B, L) integer token ids, ``L <= max_position_embeddings`` (ids outside
                ``[0, vocab_size)`` give NaN rows, jnp.take's fill mode).
            attention_mask: (B, L), nonzero for real tokens; ``None`` (what the HunyuanVideo
                pipelines pass) attends every earlier token, padding included. With a mask,
                padded keys are masked on top of the causal mask for every query, as the
                reference's ``create_causal_mask``; a query with no allowed key (only with left
                padding) gets a zero attention output, where the reference's is unspecified.

        Returns:
            ``last_hidden_state`` (B, L, D) after ``final_layer_norm`` and ``pooled`` (B, D): its
            row at the largest token id (``eos_token_id == 2``, first such position) or at the
            first ``eos_token_id`` (position 0 when a row has none, as the reference's argmax),
            both in the compute dtype.

        Raises:
            InputError: ``input_ids`` is not a 2-D integer array, longer than
                ``max_position_embeddings``, or ``attention_mask`` does not have its shape.
        """
        cfg = self.config
        ids = jnp.asarray(input_ids)
        if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer) or ids.shape[1] < 1:
            raise InputError(
                f"input_ids must be a (B, L) integer array with L >= 1; got shape {ids.shape}, dtype {ids.dtype}."
            )
        if ids.shape[1] > cfg.max_position_embeddings:
            raise InputError(
                f"input_ids has L={ids.shape[1]} tokens, more than max_position_embeddings="
                f"{cfg.max_position_embeddings} (tokenize with truncation to max_length "
                f"{cfg.max_position_embeddings})."
            )
        bias = None
        if attention_mask is not None:
            mask = jnp.asarray(attention_mask)
            if mask.shape != ids.shape:
                raise InputError(f"attention_mask must have the shape of input_ids {ids.shape}; got {mask.shape}.")
            # (B, 1, 1, L) key padding broadcast over the queries: dense but L <= 77.
            keys = jnp.where(mask != 0, 0.0, -jnp.inf).astype(jnp.float32)[:, None, None, :]
            bias = jnp.broadcast_to(keys, (ids.shape[0], 1, ids.shape[1], ids.shape[1]))
        h = self.embeddings(ids)
        h = self.encoder(h, cfg.num_hidden_layers, causal=True, bias=bias)
        hidden = self.final_layer_norm(h).astype(self.dtype)
        if cfg.legacy_eos_pooling:
            index = jnp.argmax(ids, axis=-1)
        else:
            index = jnp.argmax(ids == cfg.eos_token_id, axis=-1)
        pooled = hidden[jnp.arange(ids.shape[0]), index]
        return hidden, pooled

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        """``last_hidden_state`` (B, L, D) of :meth:`encode` (the TextEncoder contract)."""
        return self.encode(input_ids, attention_mask)[0]


# ----------------------------------------------------------------------------- loading


#: Logical axes of the CLIP parameters, text and vision towers alike (see
#: :mod:`vidax.parallel.rules`): q/k/v and ``fc1`` column-parallel, ``out_proj`` and ``fc2``
#: row-parallel (their biases replicated, added once after the reduction), the text token
#: embedding split by vocabulary rows. The patterns are not anchored, so they also place a tower
#: nested in another module (LLaVA's ``vision_tower``). Norms and embeddings are replicated.
CLIP_PARAM_AXES = (
    *column_parallel(r"encoder/layers/self_attn/(q_proj|k_proj|v_proj)", "heads"),
    *row_parallel(r"encoder/layers/self_attn/out_proj", "heads"),
    *column_parallel(r"encoder/layers/mlp/fc1", "mlp"),
    *row_parallel(r"encoder/layers/mlp/fc2", "mlp"),
    (r"embeddings/token_embedding/embedding$", ("vocab", "embed")),
)

_TOWERS = {
    # tower -> (prefix of transformers 4 files, top-level modules)
    "vision": (_PREFIX, _TOP_LEVEL),
    "text": ("text_model.", ("embeddings", "encoder", "final_layer_norm")),
}


def clip_vision_key_rules(config: Any = None, keys: Any = ()) -> KeyRules:
    """Key mapping of a ``CLIPVisionModel`` checkpoint whose tensor names are ``keys`` (see
    :func:`clip_key_rules`; the same for every config)."""
    return clip_key_rules(keys, "vision")


def clip_vision_projection_key_rules(config: Any = None, keys: Any = ()) -> KeyRules:
    """Key mapping of a ``CLIPVisionModelWithProjection`` checkpoint: the tower's
    (:func:`clip_vision_key_rules`); its ``visual_projection`` is not read (the pipelines run the
    tower's hidden states)."""
    return dataclasses.replace(clip_key_rules(keys, "vision"), unused=("visual_projection.",))


def clip_text_key_rules(config: Any = None, keys: Any = ()) -> KeyRules:
    """Key mapping of a ``CLIPTextModel`` checkpoint whose tensor names are ``keys`` (see
    :func:`clip_key_rules`; the same for every config)."""
    return clip_key_rules(keys, "text")


def clip_key_rules(keys: Any, tower: str) -> KeyRules:
    """Key mapping of a ``CLIPVisionModel`` (``tower="vision"``) or ``CLIPTextModel``
    (``tower="text"``) checkpoint whose tensor names are ``keys``.

    ``encoder.layers.{i}`` is stacked. When the keys carry the ``vision_model.`` /
    ``text_model.`` prefix of files written by transformers 4 (the released Wan and HunyuanVideo
    checkpoints), it is renamed away.
    """
    prefix, top_level = _TOWERS[tower]
    return tower_key_rules(keys, prefix, top_level)


def tower_key_rules(keys: Any, prefix: str, top_level: tuple[str, ...]) -> KeyRules:
    """Key mapping of a vision / text tower whose blocks are ``encoder.layers.{i}`` (stacked):
    CLIP's and SigLIP's. When ``keys`` carry ``prefix`` (``vision_model.`` of files written by
    transformers 4) on the ``top_level`` modules, it is renamed away."""
    renames: tuple[tuple[str, str], ...] = ()
    if any(str(k).startswith(prefix) for k in keys):
        renames = tuple((prefix + name, name) for name in top_level)
    return KeyRules(stacked=("encoder.layers",), renames=renames)


@functools.lru_cache(maxsize=16)  # one entry per text-tower structure in use
def _clip_text_fn(graphdef, use_mask: bool):
    """The jitted ``(params, ids, mask) -> (hidden, pooled)`` of one text-tower structure;
    parameters are an argument (no closure holds them), so equal structures share it."""

    @jax.jit
    def encode(params, ids, mask):
        return nnx.merge(graphdef, from_stack_bits(params)).encode(ids, mask if use_mask else None)

    return encode


def encode_clip_text(encoder: CLIPTextEncoder, tokens: Any, *,
                     use_attention_mask: bool = False) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """``(last_hidden_state (B, L, D), pooled (B, D))`` of tokenized prompts, compute dtype.

    Args:
        encoder: a loaded :class:`CLIPTextEncoder`.
        tokens: ``input_ids`` and ``attention_mask``, (B, L) int
            (:class:`vidax.encoders.tokenizer.Tokens`).
        use_attention_mask: mask padded keys; False (default) runs without the mask, as
            HunyuanVideo's ``_get_clip_prompt_embeds`` calls ``text_encoder_2(input_ids)``.

    An encoder whose layers stream (:func:`~vidax.parallel.offload.streams_layers`) runs outside
    a jit, a jitted program per chunk of layers.
    """
    if streams_layers(encoder):
        mask = jnp.asarray(tokens.attention_mask) if use_attention_mask else None
        return encoder.encode(jnp.asarray(tokens.input_ids), mask)
    fn = _clip_text_fn(nnx.graphdef(encoder), bool(use_attention_mask))
    return fn(stack_bits_state(encoder), jnp.asarray(tokens.input_ids), jnp.asarray(tokens.attention_mask))


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
    valid = (
        "{'shortest_edge': n}, {'height': h, 'width': w} or an int"
        if shortest_ok
        else ("{'height': h, 'width': w} or an int")
    )
    raise ConfigError(f"preprocessor config: {key}={value!r} is not supported; use {valid}.")


def _preprocess_settings(
    config: Mapping[str, Any], defaults: Mapping[str, Any] = _PREPROCESS_DEFAULTS, what: str = "clip_preprocess"
) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise InputError(
            f"preprocessor_config must be a dict (the parsed preprocessor_config.json); got {type(config).__name__}"
        )
    s = dict(defaults)
    for key, value in config.items():
        if key.startswith("_") or key in _PREPROCESS_IGNORED:
            continue
        if key in _PREPROCESS_NEUTRAL:
            if value not in _PREPROCESS_NEUTRAL[key]:
                raise ConfigError(
                    f"preprocessor config: {key}={value!r} is not implemented by vidax's "
                    f"{what}; only {_PREPROCESS_NEUTRAL[key]} is supported."
                )
            continue
        if key == "use_square_size":  # CLIPImageProcessor.__init__ (KOSMOS-2 compatibility)
            continue
        if key not in s:
            raise ConfigError(
                f"preprocessor config: unknown setting {key}={value!r}; vidax's {what} "
                f"knows {sorted(s) + sorted(_PREPROCESS_NEUTRAL) + ['use_square_size']}."
            )
        s[key] = value
    s["size"] = _size_dict(s["size"], "size", shortest_ok=True)
    if config.get("use_square_size") and "shortest_edge" in s["size"]:
        n = s["size"]["shortest_edge"]
        s["size"] = {"height": n, "width": n}
    if s["do_center_crop"]:
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
            f"image values outside [0, 255] cannot be resized as uint8: range [{image.min()}, {image.max()}]"
        )
    if np.all(image >= 0) and np.all(image <= 1):
        # rescale(image, 255) (float64 product stored as float32), then a truncating cast.
        return (image.astype(np.float64) * 255).astype(np.float32).astype(np.uint8), True
    raise InputError(
        f"float image values must be in [0, 1] or integers in [0, 255]; got range [{image.min()}, {image.max()}]"
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
    return preprocess_image(image, _preprocess_settings(preprocessor_config))


def preprocess_image(image: Any, s: Mapping[str, Any]) -> np.ndarray:
    """The steps of :func:`clip_preprocess` with settings ``s`` already parsed (by
    :func:`_preprocess_settings` with a processor's defaults): shared by CLIP and SigLIP, whose
    processors run the same PIL backend (SigLIP's without the crop). Returns, raises as
    :func:`clip_preprocess`."""
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
