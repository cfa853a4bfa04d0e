"""Gemma 4's language model as a text encoder (LTX-2.5's ``Gemma4UnifiedForConditionalGeneration``,
model_type ``"gemma4_unified"``), built from the decoder-LM parts (:mod:`vidax.encoders.decoder_lm`).

Reference: transformers 5.24 ``models/gemma4_unified/modeling_gemma4_unified.py``
(``Gemma4UnifiedTextModel``, reached through ``Gemma4UnifiedModel.forward`` with text only) and
diffusers 0.42.1 ``LTX2Pipeline._get_gemma_prompt_embeds`` (the same call as for Gemma 3). What
Gemma 4 differs in from Gemma 3 (:mod:`vidax.encoders.gemma3`):

* every RMS norm is ``(x̂ · w).to(dtype)`` in float32 (``Gemma4UnifiedRMSNorm``: weight ``w``, not
  ``1 + w``); the values get an RMS norm too (``v_norm``, no weight);
* scores are not scaled (``scaling = 1.0``: the q / k norms set their size);
* the two layer types have their own shapes: ``"full_attention"`` layers use ``global_head_dim``
  (default 512) and, where ``num_global_key_value_heads`` is set with ``attention_k_eq_v``, their
  own K/V head count (transformers' ``per_layer_config``, written to config.json by layer index);
* ``attention_k_eq_v``: the full-attention layers have no ``v_proj``; the values are the key
  projection's output (before ``k_norm`` and RoPE) through ``v_norm``;
* KV sharing (``num_kv_shared_layers``): the last ``num_kv_shared_layers`` layers have no K/V
  projections and attend to the keys / values (normed, rotated) of the last earlier layer of their
  type; with ``use_double_wide_mlp`` their MLP is twice ``intermediate_size`` wide;
* each layer's output is multiplied by its ``layer_scalar`` (a stored ``(1,)`` tensor);
* RoPE per layer type from ``rope_parameters``: ``"default"`` (all pairs) or ``"proportional"``
  (the first ``int(partial_rotary_factor · K / 2)`` pairs at ``theta ** (-2i / K)``, the others
  not rotated), both divided by ``factor``;
* token ids of image / video / audio placeholders are embedded as ``pad_token_id``
  (``Gemma4UnifiedModel.forward``; text-only here, so nothing is scattered in).

Unchanged from Gemma 3: embeddings times ``sqrt(hidden_size)`` (cast to the table's dtype), four
norms per layer, GELU-tanh gated MLP, sliding layers see keys ``i - sliding_window < j <= i``,
positions ``arange(L)``, the key-padding mask with a zero output for a query that sees no key.
``use_bidirectional_attention="vision"`` (the default) is causal for text, as here; ``"all"`` is
refused. Hidden states: ``num_hidden_layers + 1`` entries (embeddings, each layer, the last after
the final norm), stacked as LTX-2 takes them by :func:`vidax.encoders.gemma3.gemma_prompt_embeds`.

Layout: the layers differ in shape by type (and the KV-sharing ones by what they hold), so the
non-sharing layers are stacked by shape (``groups/{g}``, one stack per (type, head dim, K/V heads),
layer ``i`` at its index in its group) and run by one ``lax.scan`` over the layers that switches to
the layer's group (each group traced once: compile time does not grow with depth); the KV-sharing
tail (``num_kv_shared_layers`` layers, none in most configs) is an ``nnx.List`` (``shared/{j}``)
run after it on the keys / values the scan carries out of each group. Keys ``layers.{i}.…`` map
there by renames (:func:`gemma4_key_rules`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.encoders.decoder_lm import (
    DecoderLM,
    DecoderMLP,
    _rms_norm,
    decoder_lm_key_rules,
    init_decoder,
    mask_segments,
)
from vidax.encoders.decoder_lm_config import META_KEYS, DecoderLMConfig
from vidax.errors import ConfigError, InputError
from vidax.nn.attention import dot_product_attention
from vidax.nn.kernels import from_stack_bits, xla_cpu_upcasts
from vidax.nn.layers import Linear, RMSNorm
from vidax.nn.rope import apply_rope
from vidax.nn.stack import stacked
from vidax.parallel.offload import streamed_stack, streams_layers
from vidax.parallel.rules import column_parallel, row_parallel
from vidax.weights.loader import KeyRules

_F32 = jnp.float32
LAYER_TYPES = ("sliding_attention", "full_attention")
_ROPE_TYPES = ("default", "proportional")

_LAYER_AXES = (
    *column_parallel(r"^layers/self_attn/(q_proj|k_proj|v_proj)", "heads"),
    *row_parallel(r"^layers/self_attn/o_proj", "heads"),
    *column_parallel(r"^layers/mlp/(gate_proj|up_proj)", "mlp"),
    *row_parallel(r"^layers/mlp/down_proj", "mlp"),
)
#: Parameter axes (:mod:`vidax.parallel.rules`): as
#: :data:`~vidax.encoders.decoder_lm.DECODER_LM_PARAM_AXES` for the stacked groups, and without
#: the layer axis for the KV-sharing tail's per-layer modules.
GEMMA4_PARAM_AXES = (
    tuple((pattern.replace("^layers/", r"^groups/\d+/"), axes) for pattern, axes in _LAYER_AXES)
    + tuple((pattern.replace("^layers/", r"^shared/\d+/"), axes[1:]) for pattern, axes in _LAYER_AXES)
    + ((r"^embed_tokens/embedding$", ("vocab", "embed")),)
)


@dataclasses.dataclass(frozen=True)
class RopeKind:
    """One layer type's RoPE: ``rope_parameters[layer_type]``.

    Attributes:
        rope_type: ``"default"`` or ``"proportional"``.
        theta: base.
        partial_rotary_factor: proportional: the share of pairs rotated.
        factor: the inverse frequencies are divided by it.
    """

    rope_type: str = "default"
    theta: float = 10000.0
    partial_rotary_factor: float = 1.0
    factor: float = 1.0

    def tables(self, length: int, head_dim: int) -> tuple[jax.Array, jax.Array]:
        """``(cos, sin)`` of positions ``0 .. length-1``, each ``(length, head_dim // 2)`` float32,
        from the float32 inverse frequencies transformers computes (zero past the rotated pairs of
        a proportional RoPE: cos 1, sin 0)."""
        pairs = head_dim // 2 if self.rope_type == "default" else int(self.partial_rotary_factor * head_dim // 2)
        exponent = np.arange(0, 2 * pairs, 2, dtype=np.float32) / np.float32(head_dim)
        inv = np.zeros(head_dim // 2, np.float32)
        inv[:pairs] = (1.0 / (np.float64(self.theta) ** exponent.astype(np.float64))).astype(np.float32)
        inv = inv / np.float32(self.factor)
        ang = jnp.arange(length, dtype=_F32)[:, None] * jnp.asarray(inv)
        return jnp.cos(ang), jnp.sin(ang)


def _rope_kind(source: str, name: str, params: Any) -> RopeKind:
    if not isinstance(params, Mapping):
        raise ConfigError(f"{source}: {name}={params!r} must be a JSON object.")
    unknown = sorted(set(params) - {"rope_type", "rope_theta", "factor", "partial_rotary_factor"})
    if unknown:
        raise ConfigError(f"{source}: {name} has settings vidax's Gemma 4 does not implement: {unknown}.")
    kind = RopeKind(
        params.get("rope_type", "default"),
        params.get("rope_theta", 10000.0),
        params.get("partial_rotary_factor", 1.0),
        params.get("factor", 1.0),
    )
    if kind.rope_type not in _ROPE_TYPES:
        raise ConfigError(
            f"{source}: {name}.rope_type={kind.rope_type!r} is not implemented by vidax's Gemma 4; "
            f"valid: {list(_ROPE_TYPES)}."
        )
    for key, value in (("rope_theta", kind.theta), ("factor", kind.factor)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"{source}: {name}.{key}={value!r} must be a number > 0.")
    p = kind.partial_rotary_factor
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
        raise ConfigError(f"{source}: {name}.partial_rotary_factor={p!r} must be a number in [0, 1].")
    return kind


@dataclasses.dataclass(frozen=True)
class Gemma4TextConfig(DecoderLMConfig):
    """``transformers.Gemma4UnifiedTextConfig``: the ``text_config`` of a
    ``Gemma4UnifiedForConditionalGeneration`` config.json (model_type ``"gemma4_unified"``), or a
    ``gemma4_unified_text`` one. Defaults are transformers'.

    Attributes (beyond :class:`DecoderLMConfig`'s):
        sliding_window: keys a sliding layer's query sees (itself included).
        layer_types: per layer ``"sliding_attention"`` or ``"full_attention"`` (the last is forced
            to ``"full_attention"``, as transformers does).
        rope_sliding / rope_full: the RoPE of each layer type.
        layer_head_dims / layer_kv_heads: per layer K and N_kv (``per_layer_config``).
        attention_k_eq_v, num_kv_shared_layers, use_double_wide_mlp: see the module docstring.
        pad_token_id: the id multimodal placeholders are embedded as.
        placeholder_token_ids: image / video / audio placeholder ids of the outer config.

    Refuses: ``use_bidirectional_attention="all"``, RoPE types other than default / proportional,
    ``per_layer_config`` overrides other than ``head_dim`` / ``num_key_value_heads``, activations
    other than GELU-tanh, unknown layer types, KV sharing whose reused layer types have no earlier
    producer.
    """

    IGNORED: ClassVar[frozenset[str]] = (META_KEYS - {"pad_token_id"}) | {
        # applied to the LM head's logits only (not run here)
        "final_logit_softcapping",
        # generation settings
        "cache_implementation",
        "attn_implementation",
    }
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {"use_bidirectional_attention": ("vision", None)}
    #: Top-level keys of a Gemma4UnifiedForConditionalGeneration config.json beside text_config.
    OUTER: ClassVar[frozenset[str]] = META_KEYS | {
        "vision_config",
        "audio_config",
        "boi_token_id",
        "eoi_token_id",
        "boa_token_id",
        "eoa_token_index",
        "image_token_id",
        "video_token_id",
        "audio_token_id",
        "processor_class",
    }
    LAYOUTS: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "": (),  # Gemma4UnifiedTextModel.save_pretrained
        "model.": ("lm_head.",),  # Gemma4UnifiedForCausalLM
        # Gemma4UnifiedForConditionalGeneration: no vision / audio tower, only their embedders
        "model.language_model.": ("model.embed_vision.", "model.vision_embedder.", "model.embed_audio.", "lm_head."),
    }

    model_type: str = "gemma4_unified_text"
    vocab_size: int = 262_144
    hidden_size: int = 2304
    intermediate_size: int = 9216
    num_hidden_layers: int = 30
    num_attention_heads: int = 8
    num_key_value_heads: int | None = 4
    head_dim: int | None = 256
    hidden_act: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    sliding_window: int = 1024
    layer_types: tuple[str, ...] | None = None
    rope_sliding: RopeKind = RopeKind("default", 10_000.0)
    rope_full: RopeKind = RopeKind("proportional", 1_000_000.0, 0.25)
    layer_head_dims: tuple[int, ...] | None = None
    layer_kv_heads: tuple[int, ...] | None = None
    attention_k_eq_v: bool = False
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False
    pad_token_id: int | None = 0
    placeholder_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        raw = dict(config)
        placeholders: tuple[int, ...] = ()
        if raw.get("model_type") == "gemma4_unified" or "text_config" in raw:
            text = cls.outer_text_config(raw, source)
            # Gemma4UnifiedConfig's defaults for the placeholder ids.
            ids = {"image_token_id": 258_880, "video_token_id": 258_884, "audio_token_id": 258_881}
            placeholders = tuple(int(raw.get(k, v)) for k, v in ids.items() if raw.get(k, v) is not None)
            raw = {"model_type": "gemma4_unified_text", **text}
            source = f"{source} (text_config)"
        if raw.get("model_type", "gemma4_unified_text") != "gemma4_unified_text":
            raise ConfigError(
                f"{source}: model_type={raw.get('model_type')!r} is not Gemma 4 unified; Gemma4TextConfig reads "
                "'gemma4_unified' (its text_config) or 'gemma4_unified_text'."
            )
        raw.pop("model_type", None)
        if "hidden_activation" in raw:
            raw["hidden_act"] = raw.pop("hidden_activation")
        n = raw.get("num_hidden_layers", cls.num_hidden_layers)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{source}: num_hidden_layers={n!r} must be a positive integer.")
        types = raw.pop("layer_types", None)
        if types is None:
            types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
        if (
            not isinstance(types, Sequence)
            or isinstance(types, str)
            or len(types) != n
            or any(t not in LAYER_TYPES for t in types)
        ):
            raise ConfigError(
                f"{source}: layer_types={types!r} must list one of {list(LAYER_TYPES)} for each of the "
                f"num_hidden_layers={n} layers."
            )
        types = (*types[:-1], "full_attention")  # transformers forces the last layer global
        rope = raw.pop("rope_parameters", None)
        if rope is None:
            rope = {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 1_000_000.0,
                },
            }
        if not isinstance(rope, Mapping) or set(rope) - set(LAYER_TYPES):
            raise ConfigError(f"{source}: rope_parameters={rope!r} must be nested per layer type {list(LAYER_TYPES)}.")
        head_dim = raw.get("head_dim", cls.head_dim)
        kv = raw.get("num_key_value_heads", cls.num_key_value_heads)
        per_layer = raw.pop("per_layer_config", None)
        global_head_dim = raw.pop("global_head_dim", 512)
        global_kv = raw.pop("num_global_key_value_heads", None)
        if per_layer is None:
            override = {"head_dim": global_head_dim}
            if global_kv is not None and raw.get("attention_k_eq_v", False):
                override["num_key_value_heads"] = global_kv
            per_layer = {str(i): override for i, t in enumerate(types) if t == "full_attention"}
        if not isinstance(per_layer, Mapping):
            raise ConfigError(f"{source}: per_layer_config={per_layer!r} must be a JSON object by layer index.")
        dims, heads = [head_dim] * n, [kv] * n
        for index, override in per_layer.items():
            i = int(index) if str(index).isdigit() else -1
            if (
                not 0 <= i < n
                or not isinstance(override, Mapping)
                or set(override) - {"head_dim", "num_key_value_heads"}
            ):
                raise ConfigError(
                    f"{source}: per_layer_config[{index!r}]={override!r}: vidax's Gemma 4 reads layer "
                    f"indices 0..{n - 1} overriding head_dim / num_key_value_heads only."
                )
            dims[i] = override.get("head_dim", dims[i])
            heads[i] = override.get("num_key_value_heads", heads[i])
        return super().from_config_dict(
            dict(
                raw,
                layer_types=tuple(types),
                layer_head_dims=tuple(dims),
                layer_kv_heads=tuple(heads),
                rope_sliding=_rope_kind(source, "rope_parameters.sliding_attention", rope.get("sliding_attention", {})),
                rope_full=_rope_kind(source, "rope_parameters.full_attention", rope.get("full_attention", {})),
                placeholder_token_ids=placeholders,
            ),
            source=source,
        )

    def __post_init__(self):
        super().__post_init__()
        n = self.num_hidden_layers
        if self.layer_types is None and isinstance(n, int):
            object.__setattr__(
                self,
                "layer_types",
                tuple("sliding_attention" if (i + 1) % 6 and i < n - 1 else "full_attention" for i in range(n)),
            )
        if self.layer_head_dims is None and self.layer_types is not None:
            object.__setattr__(
                self,
                "layer_head_dims",
                tuple(self.head_dim if t == "sliding_attention" else 512 for t in self.layer_types),
            )
        if self.layer_kv_heads is None and self.layer_types is not None:
            object.__setattr__(self, "layer_kv_heads", (self.num_key_value_heads,) * len(self.layer_types))

    def validate(self, source: str) -> None:
        super().validate(source)
        n = self.num_hidden_layers
        for name in ("layer_head_dims", "layer_kv_heads"):
            values = getattr(self, name)
            if len(values) != n or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise ConfigError(f"{source}: per-layer {name}={values!r} must be {n} positive integers.")
        for i, (k, nkv) in enumerate(zip(self.layer_head_dims, self.layer_kv_heads)):
            if k % 2 or self.num_attention_heads % nkv:
                raise ConfigError(
                    f"{source}: layer {i}: head_dim={k} must be even and num_key_value_heads={nkv} "
                    f"divide num_attention_heads={self.num_attention_heads}."
                )
        if isinstance(self.sliding_window, bool) or not isinstance(self.sliding_window, int) or self.sliding_window < 1:
            raise ConfigError(f"{source}: sliding_window={self.sliding_window!r} must be a positive integer.")
        s = self.num_kv_shared_layers
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= n:
            raise ConfigError(f"{source}: num_kv_shared_layers={s!r} must be an integer in [0, {n}].")
        if 0 < s < n and set(self.layer_types[n - s :]) - set(self.layer_types[: n - s]):
            raise ConfigError(
                f"{source}: num_kv_shared_layers={s}: the shared layers' types "
                f"{sorted(set(self.layer_types[n - s :]))} need an earlier layer of each type."
            )
        if s == n:
            raise ConfigError(f"{source}: num_kv_shared_layers={s} shares every layer's keys; no layer computes them.")
        for name in ("attention_k_eq_v", "use_double_wide_mlp"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r} must be true or false.")

    @property
    def kv_sharing_modes(self) -> tuple[str | None, ...]:
        """Per layer None, ``"store"`` (the last non-shared layer of its type: its keys / values
        are reused) or ``"reuse"`` (``Gemma4UnifiedTextConfig.kv_sharing_modes``)."""
        n, s = self.num_hidden_layers, self.num_kv_shared_layers
        first = n - s
        modes: list[str | None] = [None if i < first else "reuse" for i in range(n)]
        if s:
            for t in set(self.layer_types):
                modes[max(i for i in range(first) if self.layer_types[i] == t)] = "store"
        return tuple(modes)

    @property
    def layer_groups(self) -> tuple[tuple[int, ...], ...]:
        """The non-sharing layers (``0 .. n - num_kv_shared_layers - 1``) grouped by shape (type,
        head dim, K/V heads), groups in the order of their first layer."""
        groups: dict[tuple, list[int]] = {}
        for i in range(self.num_hidden_layers - self.num_kv_shared_layers):
            groups.setdefault((self.layer_types[i], self.layer_head_dims[i], self.layer_kv_heads[i]), []).append(i)
        return tuple(tuple(g) for g in groups.values())

    def rope_of(self, layer_type: str) -> RopeKind:
        return self.rope_sliding if layer_type == "sliding_attention" else self.rope_full

    norm_weight = "w"
    norm_weight_after_cast = False
    sandwich_norms = True
    qk_norm = True
    attention_scale = 1.0

    @property
    def embed_scale(self) -> float:
        return self.hidden_size**0.5


# ----------------------------------------------------------------------------- modules


class Gemma4Attention(nnx.Module):
    """``Gemma4UnifiedTextAttention`` of layer ``index``: q (and, unless the layer reuses another's,
    k / v) projected, RMS-normed per head (v without weight), q / k rotated (rotate-half, fp32),
    causal GQA attention with scale 1."""

    def __init__(self, cfg: Gemma4TextConfig, index: int, attention: str, *, dtype, param_dtype, rngs):
        n, k, d = cfg.num_attention_heads, cfg.layer_head_dims[index], cfg.hidden_size
        nkv = cfg.layer_kv_heads[index]
        lin = partial(Linear, use_bias=cfg.attention_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.reuse = cfg.kv_sharing_modes[index] == "reuse"
        self.q_proj = lin(d, n * k)
        self.q_norm = _rms_norm(cfg, dtype, param_dtype, k)
        if not self.reuse:
            self.k_norm = _rms_norm(cfg, dtype, param_dtype, k)
            self.v_norm = RMSNorm(k, cfg.rms_norm_eps, weight=None, dtype=dtype)
            self.k_proj = lin(d, nkv * k)
            if not (cfg.attention_k_eq_v and cfg.layer_types[index] == "full_attention"):
                self.v_proj = lin(d, nkv * k)
        self.o_proj = lin(n * k, d)
        self.shape = (n, nkv, k)
        self.attention = attention

    def __call__(self, x, cos, sin, segment_ids, bias, shared):
        """x (B, L, D), cos / sin (L, K/2) f32, bias (1, 1, L, L) f32 or None, shared: the (k, v)
        of the producing layer (reused layers) -> (out (B, L, D), (k, v) (B, L, N_kv, K))."""
        b, length, _ = x.shape
        n, nkv, k = self.shape
        q = apply_rope(self.q_norm(self.q_proj(x).reshape(b, length, n, k)), cos, sin, layout="rotate_half")
        if self.reuse:
            key, v = shared
        else:
            key = self.k_proj(x).reshape(b, length, nkv, k)
            v = self.v_proj(x).reshape(b, length, nkv, k) if hasattr(self, "v_proj") else key
            key = apply_rope(self.k_norm(key), cos, sin, layout="rotate_half")
            v = self.v_norm(v)
        out = dot_product_attention(
            q, key, v, causal=True, segment_ids=segment_ids, bias=bias, scale=1.0, implementation=self.attention
        )
        return self.o_proj(out.reshape(b, length, n * k)), (key, v)


class Gemma4Layer(nnx.Module):
    """``Gemma4UnifiedTextDecoderLayer``: Gemma 3's sandwich-normed attention and MLP, then the
    whole stream times ``layer_scalar``. The residual stream ``h`` is fp32."""

    def __init__(self, cfg: Gemma4TextConfig, index: int, attention: str, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = Gemma4Attention(cfg, index, attention, **kw)
        wide = cfg.use_double_wide_mlp and cfg.kv_sharing_modes[index] == "reuse"
        mlp_cfg = dataclasses.replace(cfg, intermediate_size=cfg.intermediate_size * 2) if wide else cfg
        self.mlp = DecoderMLP(mlp_cfg, **kw)
        self.input_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.post_attention_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.pre_feedforward_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.post_feedforward_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.layer_scalar = nnx.Param(jnp.ones((1,), param_dtype))

    def __call__(self, h, cos, sin, segment_ids, bias, shared):
        attn, kv = self.self_attn(self.input_layernorm(h), cos, sin, segment_ids, bias, shared)
        h = h + self.post_attention_layernorm(attn).astype(h.dtype)
        h = h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h))).astype(h.dtype)
        # torch multiplies in the stream's dtype by the scalar cast to it.
        return h * self.layer_scalar[...].astype(h.dtype), kv


class Gemma4TextEncoder(nnx.Module):
    """``Gemma4UnifiedTextModel`` run as a text encoder (the module docstring lists what differs
    from Gemma 3).

    Parameters: ``embed_tokens/embedding`` (V, D); per layer (``self_attn/{q,k,v,o}_proj``,
    ``self_attn/{q,k}_norm``, ``mlp/{gate,up,down}_proj``, four layer norms, ``layer_scalar``
    (1,)) stacked by shape in ``groups/{g}/…`` (leading axis: the group's layers in order;
    :attr:`Gemma4TextConfig.layer_groups`), the KV-sharing tail in ``shared/{j}/…``;
    ``norm/scale`` (D,).

    The arguments and errors are :class:`~vidax.encoders.decoder_lm.DecoderLM`'s (``config`` a
    :class:`Gemma4TextConfig`); the constructor is its (:func:`~vidax.encoders.decoder_lm.init_decoder`)
    with Gemma 4's layers.
    """

    #: Its stacked layers (as :attr:`DecoderLM.stacked_paths`): the groups.
    stacked_paths: ClassVar[tuple[str, ...]] = ("groups",)

    def __init__(
        self,
        config: Gemma4TextConfig,
        *,
        dtype: Any = _F32,
        param_dtype: Any = None,
        rngs: nnx.Rngs | None = None,
        attention: str = "auto",
    ):
        n = config.num_hidden_layers

        def layers(kw):
            groups = [
                stacked(
                    lambda r, i=group[0]: Gemma4Layer(config, i, attention, **{**kw, "rngs": r}), len(group), kw["rngs"]
                )
                for group in config.layer_groups
            ]
            shared = [Gemma4Layer(config, i, attention, **kw) for i in range(n - config.num_kv_shared_layers, n)]
            return dict(groups=nnx.List(groups), shared=nnx.List(shared))

        init_decoder(self, config, "Gemma 4 text encoder", dtype, param_dtype, rngs, layers)

    def embed(self, input_ids: jax.Array) -> jax.Array:
        """(B, L) int ids -> (B, L, D) in the compute dtype: placeholder ids embedded as
        ``pad_token_id``, times ``sqrt(D)`` cast to the table's dtype.

        Raises:
            InputError: ``input_ids`` is not a 2-D integer array.
        """
        ids = jnp.asarray(input_ids)
        cfg = self.config
        if cfg.placeholder_token_ids and cfg.pad_token_id is not None and jnp.issubdtype(ids.dtype, jnp.integer):
            ids = jnp.where(jnp.isin(ids, jnp.asarray(cfg.placeholder_token_ids)), cfg.pad_token_id, ids)
        return DecoderLM.embed(self, ids)

    def all_hidden_states(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array:
        """The reference's ``output_hidden_states=True`` tuple, stacked.

        Args:
            input_ids: (B, L) integer token ids.
            attention_mask: (B, L), nonzero for real tokens (left or right padding); None: none.

        Returns:
            (n + 1, B, L, D) in the compute dtype: 0 the embeddings, ``i`` layer ``i``'s output,
            ``n`` after the final norm.

        Raises:
            InputError: malformed inputs.
        """
        cfg = self.config
        h = self.embed(input_ids).astype(_F32)
        b, length = h.shape[:2]
        segments = mask_segments(attention_mask, (b, length))
        q = jnp.arange(length, dtype=jnp.int32)
        window = jnp.where((q[:, None] - q[None, :]) < cfg.sliding_window, 0.0, -jnp.inf).astype(_F32)[None, None]
        tables = {(t, k): cfg.rope_of(t).tables(length, k) for t, k in set(zip(cfg.layer_types, cfg.layer_head_dims))}

        def inputs(i):
            kind = cfg.layer_types[i]
            return (*tables[kind, cfg.layer_head_dims[i]], segments, window if kind == "sliding_attention" else None)

        groups = cfg.layer_groups
        tail = len(self.shared) > 0
        # Each group's stacked leaves (16-bit floats sliced as integers on CPU: see scan_layers).
        split = []
        for stack in self.groups:
            graphdef, state = nnx.split(stack)
            leaves, treedef = jax.tree.flatten(state)
            split.append((graphdef, treedef, leaves, [xla_cpu_upcasts(a.dtype) for a in leaves]))

        def branch(g):
            graphdef, treedef, leaves, bits = split[g]
            args = inputs(groups[g][0])

            def run(operand):
                x, kvs, j = operand
                layer = [
                    jax.lax.dynamic_index_in_dim(
                        jax.lax.bitcast_convert_type(a, jnp.uint16) if b else a, j, 0, keepdims=False
                    )
                    for a, b in zip(leaves, bits)
                ]
                layer = [jax.lax.bitcast_convert_type(a, d.dtype) if b else a for a, d, b in zip(layer, leaves, bits)]
                x, kv = nnx.merge(graphdef, jax.tree.unflatten(treedef, layer))(x, *args, None)
                return x, (kvs[:g] + (kv,) + kvs[g + 1 :]) if tail else kvs

            return run

        def body(carry, xs):
            x, kvs = carry
            g, j = xs
            if len(groups) == 1:
                x, kvs = branch(0)((x, kvs, j))
            else:
                x, kvs = jax.lax.switch(g, [branch(i) for i in range(len(groups))], (x, kvs, j))
            return (x, kvs), x

        # Scan the non-sharing layers in order, each picking its group's stack and index there.
        order = sorted((i, g, j) for g, group in enumerate(groups) for j, i in enumerate(group))
        kvs0 = ()
        if tail:  # the last keys / values of each group, for the KV-sharing layers
            kvs0 = tuple(
                (jnp.zeros((b, length, cfg.layer_kv_heads[gr[0]], cfg.layer_head_dims[gr[0]]), self.dtype),) * 2
                for gr in groups
            )
        h0 = h
        xs = (jnp.asarray([g for _, g, _ in order], jnp.int32), jnp.asarray([j for _, _, j in order], jnp.int32))
        if streams_layers(self):  # outside a jit: each layer from its group's chunk, read from the files
            (h, kvs), main = self._streamed_layers(h, kvs0, order, inputs, tail)
        else:
            (h, kvs), main = jax.lax.scan(body, (h, kvs0), xs)
        states = [h0[None], main]
        # The KV-sharing tail: each reuses the keys / values of the last non-sharing layer of its
        # type (that layer is the last of its group).
        modes = cfg.kv_sharing_modes
        store = {
            cfg.layer_types[i]: next(g for g, gr in enumerate(groups) if i in gr)
            for i in range(cfg.num_hidden_layers)
            if modes[i] == "store"
        }
        first = cfg.num_hidden_layers - len(self.shared)
        for j, layer in enumerate(self.shared):
            i = first + j
            h, _ = layer(h, *inputs(i), kvs[store[cfg.layer_types[i]]])
            states.append(h[None])
        out = jnp.concatenate(states)
        return out.at[-1].set(self.norm(h).astype(out.dtype)).astype(self.dtype)

    def _streamed_layers(self, h, kvs, order, inputs, tail):
        """The non-sharing layers of ``order`` ((i, group, index in group)) one jitted call each,
        as the scan runs them, with each group's layers streamed (its chunks fetched as its layers
        come: one chunk of each group on the device at a time). -> ((h, kvs), (n, B, L, D))."""
        held: dict = {}
        outs = []
        for i, g, j in order:
            blocks = streamed_stack(self.groups[g])
            k = int(np.searchsorted(np.cumsum(blocks.sizes), j, side="right"))
            if held.get(g, (None,))[0] != k:
                held[g] = (k, blocks.fetch(k))
            h, kv = _streamed_layer(blocks.graphdef, held[g][1], j - sum(blocks.sizes[:k]), h, *inputs(i))
            kvs = (kvs[:g] + (kv,) + kvs[g + 1 :]) if tail else kvs
            outs.append(h)
        return (h, kvs), jnp.stack(outs)

    def __call__(
        self, input_ids: jax.Array, attention_mask: jax.Array | None = None, *, output_layer: int = -1
    ) -> jax.Array:
        """One entry of :meth:`all_hidden_states` (``output_layer`` a static int in
        ``[-(n + 1), n]``): (B, L, D)."""
        n = self.config.num_hidden_layers
        if not isinstance(output_layer, int) or isinstance(output_layer, bool) or not -(n + 1) <= output_layer <= n:
            raise InputError(f"output_layer={output_layer!r} must be an int in [{-(n + 1)}, {n}].")
        return self.all_hidden_states(input_ids, attention_mask)[output_layer]


@partial(jax.jit, static_argnums=0)
def _streamed_layer(graphdef, chunk, j, x, cos, sin, segments, window):
    """Layer ``j`` of a streamed chunk of a group (``graphdef``: the group's stack) on ``x``."""
    leaves, treedef = jax.tree.flatten(from_stack_bits(chunk))
    layer = [jax.lax.dynamic_index_in_dim(a, j, 0, keepdims=False) for a in leaves]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, layer))(x, cos, sin, segments, window, None)


def gemma4_key_rules(config: Gemma4TextConfig, keys: Any) -> KeyRules:
    """Key mapping of a checkpoint holding the Gemma 4 language model: the prefix and unused parts
    as :func:`vidax.encoders.decoder_lm.decoder_lm_key_rules`; ``layers.{i}.`` renamed to
    ``groups.{g}.{j}.`` (layer ``i`` is the ``j``-th of group ``g``, a stacked prefix) or, for the
    KV-sharing tail, ``shared.{i - first}.``.

    Raises:
        CheckpointError: no ``embed_tokens.weight`` key under a known prefix.
    """
    renames = [
        (f"layers.{i}.", f"groups.{g}.{j}.") for g, group in enumerate(config.layer_groups) for j, i in enumerate(group)
    ]
    first = config.num_hidden_layers - config.num_kv_shared_layers
    renames += [(f"layers.{i}.", f"shared.{i - first}.") for i in range(first, config.num_hidden_layers)]
    return dataclasses.replace(
        decoder_lm_key_rules(config, keys),
        renames=tuple(renames),
        stacked=tuple(f"groups.{g}" for g in range(len(config.layer_groups))),
    )
