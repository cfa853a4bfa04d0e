"""T5 v1.1 / UMT5 text encoder (CogVideoX's and LTX-Video's ``T5EncoderModel``, Wan's
``UMT5EncoderModel``), one implementation for both.

The two references differ in one place: UMT5 has a relative-position bias table in the
self-attention of *every* layer, T5 only in layer 0, whose bias is then shared by all layers.
Everything else is the same: token embedding (no scaling), pre-norm blocks with T5LayerNorm (RMS
norm without mean subtraction or bias), self-attention without ``1/sqrt(K)`` scaling whose scores
get the bucketed relative-position bias and the padding mask, a (gated) feed-forward network, a
final T5LayerNorm. Dropout is inference-off.

Parameters mirror ``transformers``' module tree, so checkpoint keys map by rule
(:func:`t5_key_rules`): the blocks ``encoder.block.{i}`` are stacked along a leading layer axis
and run with a scan; T5's single bias table ``encoder.block.0.layer.0.SelfAttention.
relative_attention_bias`` lives outside the stack at ``encoder/relative_attention_bias``.

Precision (every parameter in the load dtype): with ``dtype=float32`` everything is fp32. With
``dtype=bfloat16`` parameters and matmuls are bf16, as in ``from_pretrained(dtype=torch.bfloat16)``
(transformers keeps the ``_keep_in_fp32_modules`` ``wo`` in fp32 only for float16 loads, which
vidax does not offer); norm statistics and the softmax are fp32, and the residual stream is kept
in fp32 (the bf16 reference rounds it to bf16 after every sub-layer; fp32 costs ``B*L*D*4`` bytes
and keeps the bf16 result closer to the fp32 one).
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

from vidax.config import TRANSFORMERS_METADATA_KEYS, ConfigBase
from vidax.errors import ConfigError, InputError
from vidax.nn.inputs import compute_dtype
from vidax.nn.kernels import from_stack_bits, stack_bits_state
from vidax.nn.layers import Linear, RMSNorm, matmul
from vidax.nn.stack import scan_layers, stacked
from vidax.parallel.offload import streams_layers
from vidax.weights.loader import KeyRules

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    # transformers NewGELUActivation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    "gelu_new": partial(jax.nn.gelu, approximate=True),
    # transformers GELUActivation (torch.nn.functional.gelu, exact erf form)
    "gelu": partial(jax.nn.gelu, approximate=False),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}

_MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers T5Config / UMT5Config defaults of the fields whose defaults differ.
    "t5": dict(vocab_size=32128, d_ff=2048, num_layers=6, num_heads=8, feed_forward_proj="relu"),
    "umt5": dict(vocab_size=250112, d_ff=1024, num_layers=8, num_heads=6, feed_forward_proj="gated-gelu"),
}


#: Logical axes of the parameters (see :mod:`vidax.parallel.rules`): q/k/v and FFN-in
#: column-parallel, ``o`` and ``wo`` row-parallel, the position-bias tables split by head, the
#: token embedding split by vocabulary rows. Norm scales are replicated.
T5_PARAM_AXES = (
    (r"SelfAttention/(q|k|v)/kernel$", ("layers", "embed", "heads")),
    (r"SelfAttention/o/kernel$", ("layers", "heads", "embed")),
    (r"^encoder/block/.*relative_attention_bias/embedding$", ("layers", None, "heads")),
    (r"^encoder/relative_attention_bias/embedding$", (None, "heads")),
    (r"DenseReluDense/(wi|wi_0|wi_1)/kernel$", ("layers", "embed", "mlp")),
    (r"DenseReluDense/wo/kernel$", ("layers", "mlp", "embed")),
    (r"^shared/embedding$", ("vocab", "embed")),
)


# ----------------------------------------------------------------------------- config


@dataclasses.dataclass(frozen=True)
class T5EncoderConfig(ConfigBase):
    """Settings of ``transformers.T5Config`` / ``UMT5Config`` that the encoder uses.

    Built from ``text_encoder/config.json``. ``model_type`` (``"t5"`` or ``"umt5"``) selects the
    reference; fields left ``None`` take that reference's default. As in transformers,
    ``dense_act_fn`` / ``is_gated_act`` from the file win over what ``feed_forward_proj``
    implies; when absent they are derived from it (``"gated-gelu"`` means gated ``gelu_new``).

    Attributes:
        model_type: ``"t5"`` (bias table in layer 0, shared) or ``"umt5"`` (one per layer).
        vocab_size: V, rows of the token embedding ``shared``.
        d_model: D, model width.
        d_kv: K, per-head width of q/k/v (``N * K`` need not equal D).
        d_ff: hidden width of the feed-forward network.
        num_layers: number of encoder blocks.
        num_heads: N.
        relative_attention_num_buckets: rows of each relative-position bias table.
        relative_attention_max_distance: distance (tokens) beyond which positions share a bucket.
        layer_norm_epsilon: epsilon of every T5LayerNorm.
        feed_forward_proj: ``"gated-{act}"`` or ``"{act}"``.
        dense_act_fn: activation name (``gelu_new``, ``gelu``, ``relu``, ``silu``, ``swish``).
        is_gated_act: gated FFN ``wo(act(wi_0 x) * wi_1 x)`` instead of ``wo(act(wi x))``.
    """

    IGNORED: ClassVar[frozenset[str]] = TRANSFORMERS_METADATA_KEYS | {
        # generation settings
        "decoder_start_token_id",
        "output_past",
        "task_specific_params",
        "n_positions",
        # training only (dropout is off at inference; init is overwritten by the checkpoint)
        "dropout_rate",
        "classifier_dropout",
        "initializer_factor",
        # decoder / seq2seq settings: the encoder does not read them
        "is_encoder_decoder",
        "num_decoder_layers",
        "scale_decoder_outputs",
        # stored by UMT5 configs, read by no transformers code path
        "scalable_attention",
    }
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        # True would make the "encoder" causal with unidirectional position buckets.
        "is_decoder": (False,),
    }

    model_type: str
    vocab_size: int | None = None
    d_model: int = 512
    d_kv: int = 64
    d_ff: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    feed_forward_proj: str | None = None
    dense_act_fn: str | None = None
    is_gated_act: bool | None = None

    def __post_init__(self):
        # Fill the model-dependent defaults and derive the activation as transformers does;
        # anything malformed is left for validate() to report with the file name.
        for name, value in _MODEL_DEFAULTS.get(self.model_type, {}).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        parts = _split_proj(self.feed_forward_proj)
        if parts is not None:
            if self.dense_act_fn is None:
                act = "gelu_new" if self.feed_forward_proj == "gated-gelu" else parts[-1]
                object.__setattr__(self, "dense_act_fn", act)
            if self.is_gated_act is None:
                object.__setattr__(self, "is_gated_act", parts[0] == "gated")

    def validate(self, source: str) -> None:
        if self.model_type not in _MODEL_DEFAULTS:
            raise ConfigError(
                f"{source}: model_type={self.model_type!r} is not a T5-family encoder; vidax's "
                f"T5EncoderConfig accepts {sorted(_MODEL_DEFAULTS)}."
            )
        proj = self.feed_forward_proj
        if _split_proj(proj) is None:
            raise ConfigError(
                f"{source}: feed_forward_proj={proj!r} is malformed; expected 'gated-<act>' or "
                "'<act>' (e.g. 'gated-gelu', 'relu')."
            )
        if self.dense_act_fn not in _ACTIVATIONS:
            raise ConfigError(
                f"{source}: dense_act_fn={self.dense_act_fn!r} (feed_forward_proj={proj!r}) "
                "is not implemented by vidax's T5 encoder; supported: {sorted(_ACTIVATIONS)}."
            )
        if not isinstance(self.is_gated_act, bool):
            raise ConfigError(f"{source}: is_gated_act={self.is_gated_act!r} must be true or false.")
        for name in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{source}: {name}={value!r} must be a positive integer.")
        nb, md = self.relative_attention_num_buckets, self.relative_attention_max_distance
        if not isinstance(nb, int) or nb < 4:
            raise ConfigError(
                f"{source}: relative_attention_num_buckets={nb!r} must be an integer >= 4 "
                "(half per direction, half of those exact)."
            )
        if not isinstance(md, int) or md <= nb // 4:
            raise ConfigError(
                f"{source}: relative_attention_max_distance={md!r} must be an integer > "
                f"relative_attention_num_buckets // 4 = {nb // 4} (else the log-spaced buckets "
                "divide by log(1) = 0)."
            )
        if not isinstance(self.layer_norm_epsilon, (int, float)) or self.layer_norm_epsilon < 0:
            raise ConfigError(f"{source}: layer_norm_epsilon={self.layer_norm_epsilon!r} must be a number >= 0.")

    @property
    def bias_per_layer(self) -> bool:
        """True for UMT5 (a bias table in every layer), False for T5 (layer 0's, shared)."""
        return self.model_type == "umt5"


def _split_proj(proj: Any) -> list[str] | None:
    """``"gated-gelu"`` -> ``["gated", "gelu"]``; None when not of the reference's form."""
    if not isinstance(proj, str):
        return None
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or not parts[-1]:
        return None
    return parts


# ----------------------------------------------------------------------------- position bias


def relative_position_bucket(relative_position: np.ndarray, num_buckets: int, max_distance: int) -> np.ndarray:
    """Bidirectional T5 bucket of each relative position (key index - query index).

    Follows ``T5Attention._relative_position_bucket(bidirectional=True)``: half the buckets per
    sign; in each half, distances below ``num_buckets // 4`` get their own bucket, larger ones
    log-spaced buckets up to ``max_distance``, beyond which they share the last. The log ratio is
    computed in float32 on the host, operation by operation as the reference does (the truncation
    to int is sensitive to the last bit at exact bucket boundaries).

    Args:
        relative_position: integer array of any shape.
        num_buckets: buckets in both directions together.
        max_distance: tokens.

    Returns:
        int32 array of the same shape, values in ``[0, num_buckets)``.
    """
    rel = np.asarray(relative_position, np.int64)
    half = num_buckets // 2
    max_exact = half // 2
    buckets = (rel > 0).astype(np.int64) * half
    dist = np.abs(rel)
    is_small = dist < max_exact
    safe = np.maximum(dist, 1).astype(np.float32)  # log(0) only occurs where is_small
    ratio = np.log(safe / np.float32(max_exact)) / np.float32(math.log(max_distance / max_exact))
    ratio = ratio * np.float32(half - max_exact)
    large = np.minimum(max_exact + ratio.astype(np.int64), half - 1)
    return (buckets + np.where(is_small, dist, large)).astype(np.int32)


def _bucket_matrix(length: int, num_buckets: int, max_distance: int) -> np.ndarray:
    """(L, L) int32 bucket of (key j, query i) at [i, j], a constant of the trace."""
    pos = np.arange(length)
    return relative_position_bucket(pos[None, :] - pos[:, None], num_buckets, max_distance)


def _position_bias(table: jax.Array, buckets: np.ndarray) -> jax.Array:
    """Bias table (num_buckets, N) + (L, L) buckets -> (1, N, L, L) float32."""
    values = jnp.take(table.astype(jnp.float32), jnp.asarray(buckets), axis=0)  # (L, L, N)
    return jnp.transpose(values, (2, 0, 1))[None]


# ----------------------------------------------------------------------------- modules


def t5_layer_norm(cfg: T5EncoderConfig, dtype: Any, param_dtype: Any) -> RMSNorm:
    """``T5LayerNorm``: an RMS norm (no mean, no bias) with fp32 statistics, rounded to ``dtype``
    before the weight multiplies (``weight * x̂.to(dtype)``)."""
    return RMSNorm(cfg.d_model, cfg.layer_norm_epsilon, dtype=dtype, weight_after_cast=True, param_dtype=param_dtype)


def _relative_attention_bias(cfg: T5EncoderConfig, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> nnx.Embed:
    """The learned relative-position bias: one ``(num_heads,)`` row per bucket."""
    return nnx.Embed(cfg.relative_attention_num_buckets, cfg.num_heads, dtype=dtype, param_dtype=param_dtype, rngs=rngs)


class T5Attention(nnx.Module):
    """Self-attention of ``T5Attention`` / ``UMT5Attention`` (encoder, bidirectional).

    No ``1/sqrt(K)`` scaling; scores get ``position_bias`` and, where the key is padding, are set
    to float32's lowest value (as the reference's mask), so a row without any real key attends
    uniformly, like the reference. Scores and softmax in fp32.
    """

    def __init__(self, cfg: T5EncoderConfig, has_bias: bool, *, dtype, param_dtype, rngs):
        inner = cfg.num_heads * cfg.d_kv
        lin = partial(Linear, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q = lin(cfg.d_model, inner)
        self.k = lin(cfg.d_model, inner)
        self.v = lin(cfg.d_model, inner)
        self.o = lin(inner, cfg.d_model)
        if has_bias:
            self.relative_attention_bias = _relative_attention_bias(cfg, dtype, param_dtype, rngs)
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.d_kv
        self.dtype = dtype

    def __call__(self, x: jax.Array, key_valid: jax.Array, position_bias: jax.Array) -> jax.Array:
        """x (B, L, D), key_valid (B, L) bool, position_bias (1, N, L, L) f32 -> (B, L, D)."""
        b, length, _ = x.shape
        split = lambda t: t.reshape(b, length, self.num_heads, self.head_dim)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = jnp.einsum("bqnk,bsnk->bnqs", q, k, preferred_element_type=jnp.float32)
        scores = jnp.where(key_valid[:, None, None, :], scores + position_bias, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = matmul("bnqs,bsnk->bqnk", probs, v, v.dtype)
        out = out.reshape(b, length, self.num_heads * self.head_dim)
        return self.o(out.astype(self.dtype))


class T5LayerSelfAttention(nnx.Module):
    """Pre-norm self-attention sub-layer; returns the attention output (caller adds residual)."""

    def __init__(self, cfg: T5EncoderConfig, has_bias: bool, *, dtype, param_dtype, rngs):
        self.SelfAttention = T5Attention(cfg, has_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.layer_norm = t5_layer_norm(cfg, dtype, param_dtype)

    def __call__(self, x, key_valid, position_bias):
        return self.SelfAttention(self.layer_norm(x), key_valid, position_bias)


class T5DenseGatedActDense(nnx.Module):
    """``wo(act(wi_0 x) * wi_1 x)``; the product is cast to ``wo``'s dtype first (reference)."""

    def __init__(self, cfg: T5EncoderConfig, *, dtype, param_dtype, rngs):
        lin = partial(Linear, use_bias=False, param_dtype=param_dtype, rngs=rngs)
        self.wi_0 = lin(cfg.d_model, cfg.d_ff, dtype=dtype)
        self.wi_1 = lin(cfg.d_model, cfg.d_ff, dtype=dtype)
        self.wo = lin(cfg.d_ff, cfg.d_model)
        self.act = _ACTIVATIONS[cfg.dense_act_fn]

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.act(self.wi_0(x)) * self.wi_1(x)
        return self.wo(h.astype(self.wo.kernel.dtype))


class T5DenseActDense(nnx.Module):
    """``wo(act(wi x))``; the activation is cast to ``wo``'s dtype first (reference)."""

    def __init__(self, cfg: T5EncoderConfig, *, dtype, param_dtype, rngs):
        lin = partial(Linear, use_bias=False, param_dtype=param_dtype, rngs=rngs)
        self.wi = lin(cfg.d_model, cfg.d_ff, dtype=dtype)
        self.wo = lin(cfg.d_ff, cfg.d_model)
        self.act = _ACTIVATIONS[cfg.dense_act_fn]

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.act(self.wi(x))
        return self.wo(h.astype(self.wo.kernel.dtype))


class T5LayerFF(nnx.Module):
    """Pre-norm feed-forward sub-layer; returns the FFN output (residual added by caller)."""

    def __init__(self, cfg: T5EncoderConfig, *, dtype, param_dtype, rngs):
        ffn = T5DenseGatedActDense if cfg.is_gated_act else T5DenseActDense
        self.DenseReluDense = ffn(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.layer_norm = t5_layer_norm(cfg, dtype, param_dtype)

    def __call__(self, x):
        return self.DenseReluDense(self.layer_norm(x))


class T5Block(nnx.Module):
    """``layer[0]`` self-attention + ``layer[1]`` feed-forward, each with a residual (fp32)."""

    def __init__(self, cfg: T5EncoderConfig, *, dtype, param_dtype, rngs):
        self.layer = nnx.List(
            [
                T5LayerSelfAttention(cfg, cfg.bias_per_layer, dtype=dtype, param_dtype=param_dtype, rngs=rngs),
                T5LayerFF(cfg, dtype=dtype, param_dtype=param_dtype, rngs=rngs),
            ]
        )

    def __call__(self, h: jax.Array, key_valid: jax.Array, position_bias: jax.Array) -> jax.Array:
        h = h + self.layer[0](h, key_valid, position_bias).astype(h.dtype)
        return h + self.layer[1](h).astype(h.dtype)


class T5Stack(nnx.Module):
    """``encoder``: the stacked blocks, the final norm and (T5 only) layer 0's bias table."""

    def __init__(self, cfg: T5EncoderConfig, *, dtype, param_dtype, rngs):
        self.block = stacked(
            lambda r: T5Block(cfg, dtype=dtype, param_dtype=param_dtype, rngs=r),
            cfg.num_layers,
            rngs,
        )
        self.final_layer_norm = t5_layer_norm(cfg, dtype, param_dtype)
        if not cfg.bias_per_layer:
            self.relative_attention_bias = _relative_attention_bias(cfg, dtype, param_dtype, rngs)
        self.cfg = cfg

    def __call__(self, h: jax.Array, key_valid: jax.Array) -> jax.Array:
        cfg = self.cfg
        buckets = _bucket_matrix(h.shape[1], cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance)
        if cfg.bias_per_layer:

            def body(block, h):
                table = block.layer[0].SelfAttention.relative_attention_bias.embedding[...]
                return block(h, key_valid, _position_bias(table, buckets))

        else:
            shared_bias = _position_bias(self.relative_attention_bias.embedding[...], buckets)

            def body(block, h):
                return block(h, key_valid, shared_bias)

        h = scan_layers(self.block, h, body)
        return self.final_layer_norm(h)


class T5Encoder(nnx.Module):
    """T5 v1.1 / UMT5 encoder: ``transformers.T5EncoderModel`` / ``UMT5EncoderModel``.

    Args:
        config: the parsed ``text_encoder/config.json``.
        dtype: compute dtype, float32 or bfloat16 (see the module docstring for what stays fp32).
        param_dtype: dtype of freshly built parameters (the loader sets the stored dtype).
        rngs: initialisers' keys (values are overwritten by the checkpoint).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    #: Its stacked layers (dotted attribute paths): passed into its jitted forward as uint16 views
    #: on CPU (:func:`vidax.nn.kernels.stacks.as_stack_bits`).
    stacked_paths: ClassVar[tuple[str, ...]] = ("encoder.block",)

    def __init__(
        self,
        config: T5EncoderConfig,
        *,
        dtype: Any = jnp.float32,
        param_dtype: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        dtype = compute_dtype(dtype, "T5 encoder")
        param_dtype = dtype if param_dtype is None else param_dtype
        rngs = nnx.Rngs(0) if rngs is None else rngs
        self.shared = nnx.Embed(config.vocab_size, config.d_model, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.encoder = T5Stack(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        """Encode token ids.

        Args:
            input_ids: (B, L) integer token ids in ``[0, vocab_size)`` (ids outside give NaN
                rows, jnp.take's fill mode).
            attention_mask: (B, L), nonzero for real tokens, 0 for padding; ``None`` = all real.
                Padded positions are still computed (they attend to the real tokens), as in the
                reference; callers zero them if they need to.

        Returns:
            ``last_hidden_state`` (B, L, D) in the compute dtype.

        Raises:
            InputError: ``input_ids`` is not a 2-D integer array, or ``attention_mask`` does not
                have its shape.
        """
        ids = jnp.asarray(input_ids)
        if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise InputError(f"input_ids must be a (B, L) integer array; got shape {ids.shape}, dtype {ids.dtype}.")
        if attention_mask is None:
            key_valid = jnp.ones(ids.shape, bool)
        else:
            mask = jnp.asarray(attention_mask)
            if mask.shape != ids.shape:
                raise InputError(f"attention_mask must have the shape of input_ids {ids.shape}; got {mask.shape}.")
            key_valid = mask != 0
        h = jnp.take(self.shared.embedding[...], ids, axis=0).astype(jnp.float32)
        return self.encoder(h, key_valid).astype(self.dtype)


# ----------------------------------------------------------------------------- loading


def t5_key_rules(config: T5EncoderConfig, keys: Any = ()) -> KeyRules:
    """Key mapping for a T5/UMT5 encoder checkpoint whose tensor names are ``keys``.

    ``encoder.block.{i}`` is stacked. For T5, layer 0's bias table is renamed to
    ``encoder.relative_attention_bias`` (outside the stack). The encoder reads its embedding
    through ``encoder.embed_tokens``, tied to ``shared``: ``save_pretrained`` writes only
    ``shared.weight``; when a checkpoint holds ``encoder.embed_tokens.weight`` too, transformers
    uses it (it un-ties them if the values differ), so that key is the one read and
    ``shared.weight`` becomes its alias; alone it fills the embedding as well.
    """
    renames: list[tuple[str, str]] = []
    aliases: dict[str, str] = {}
    if not config.bias_per_layer:
        renames.append(
            (
                "encoder.block.0.layer.0.SelfAttention.relative_attention_bias",
                "encoder.relative_attention_bias",
            )
        )
    if "encoder.embed_tokens.weight" in set(keys):
        renames.append(("encoder.embed_tokens.weight", "shared.weight"))
        aliases["shared.weight"] = "encoder.embed_tokens.weight"
    return KeyRules(stacked=("encoder.block",), renames=tuple(renames), aliases=aliases)


@functools.lru_cache(maxsize=16)  # one entry per encoder structure and switches in use
def _encode_fn(graphdef, attend_padding: bool, zero_padding: bool):
    """The jitted ``(params, ids, mask) -> hidden`` of one encoder structure. Parameters are an
    argument (no closure holds them, so a staged encoder leaves the device); pipelines of one
    structure share the compiled function."""

    @jax.jit
    def encode(params, ids, mask):
        return _encode(nnx.merge(graphdef, from_stack_bits(params)), ids, mask, attend_padding, zero_padding)

    return encode


def _encode(model, ids, mask, attend_padding: bool, zero_padding: bool) -> jax.Array:
    hidden = model(ids, None if attend_padding else mask)
    if zero_padding:
        hidden = jnp.where(mask[..., None] > 0, hidden, jnp.zeros((), hidden.dtype))
    return hidden


def encode_tokens(
    encoder: T5Encoder, tokens: Any, *, attend_padding: bool = False, zero_padding: bool = False
) -> jax.Array:
    """Encoder hidden states (B, L, D) of tokenized prompts, in the encoder's dtype.

    Args:
        encoder: a loaded :class:`T5Encoder`.
        tokens: ``input_ids`` and ``attention_mask``, (B, L) int (``vidax.encoders.tokenizer.Tokens``).
        attend_padding: run without the attention mask, padded positions attended (CogVideoX's
            ``_get_t5_prompt_embeds``); else the mask is applied (Wan's).
        zero_padding: zero the outputs past each prompt's length (Wan's).

    An encoder whose layers stream (:func:`~vidax.parallel.offload.streams_layers`) runs outside
    a jit, a jitted program per chunk of layers.
    """
    if streams_layers(encoder):
        ids, mask = jnp.asarray(tokens.input_ids), jnp.asarray(tokens.attention_mask)
        return _encode(encoder, ids, mask, bool(attend_padding), bool(zero_padding))
    fn = _encode_fn(nnx.graphdef(encoder), bool(attend_padding), bool(zero_padding))
    return fn(stack_bits_state(encoder), jnp.asarray(tokens.input_ids), jnp.asarray(tokens.attention_mask))
