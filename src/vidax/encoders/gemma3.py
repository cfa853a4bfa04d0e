"""Gemma 3's language model as a text encoder (LTX-2's ``Gemma3ForConditionalGeneration``), run by
the one decoder-LM module (:class:`vidax.encoders.decoder_lm.DecoderLM`) with the options this
config turns on.

Reference: transformers 5.24 ``models/gemma3/modeling_gemma3.py`` (``Gemma3TextModel``, reached
through ``Gemma3ForConditionalGeneration.forward`` with text only) and diffusers 0.42.1
``LTX2Pipeline._get_gemma_prompt_embeds``. What Gemma 3 differs in from Llama:

* token embeddings times ``sqrt(hidden_size)`` (a float32 scalar cast to the table's dtype, so
  62.0 rather than 61.97 in bf16, multiplied in the table's dtype);
* every RMS norm is ``(x̂ · (1 + w)).to(dtype)`` in float32 (``Gemma3RMSNorm``), including the
  ``q_norm`` / ``k_norm`` over the head dim of each query / key head (before RoPE);
* four norms per layer: ``input_layernorm`` before attention, ``post_attention_layernorm`` on
  its output, ``pre_feedforward_layernorm`` / ``post_feedforward_layernorm`` around the MLP;
* GELU-tanh gated MLP (``hidden_activation="gelu_pytorch_tanh"``), no biases;
* scores scaled by ``query_pre_attn_scalar ** -0.5`` (not ``1 / sqrt(head_dim)``);
* two kinds of layer (``layer_types``): ``"sliding_attention"`` (query ``i`` sees keys
  ``i - sliding_window < j <= i``, RoPE base ``rope_local_base_freq``) and ``"full_attention"``
  (causal, RoPE base ``rope_theta``, with linear RoPE scaling when the config has it: the
  released 12B checkpoint's ``factor: 8``).

Positions are ``arange(L)`` for every prompt, padded or not: diffusers passes no
``position_ids``, ``Gemma3Model`` passes None on and ``Gemma3TextModel`` then takes
``arange(L)``; with left padding the first real token of a short prompt is at position
``L - length``, here as in the reference. Key padding masks both kinds of layer
(``create_masks_for_generate``); a query that sees no key (a left pad before the prompt's first
token) gets a zero attention output, as torch's SDPA gives it, so every hidden state, padded rows
included, is the reference's.

Hidden states: ``output_hidden_states=True`` gives ``num_hidden_layers + 1`` entries (embeddings,
each layer; the last after the final norm), as for Llama; LTX-2 stacks them on a new last axis and
flattens that into the width, ``(B, L, D · (n + 1))`` with the layer index fastest:
:func:`gemma_prompt_embeds`.

Checkpoint: ``Gemma3ForConditionalGeneration`` holds a SigLIP vision tower and a projector beside
the language model; LTX-2 runs text only, so their tensors are declared unused by the key rules
(:attr:`Gemma3TextConfig.LAYOUTS`) and never read; any other tensor the module does not have is
an error of the strict loader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax

from vidax.encoders.decoder_lm import DecoderLM, encode_hidden_states
from vidax.encoders.decoder_lm_config import META_KEYS, AttentionKind, DecoderLMConfig
from vidax.encoders.tokenizer import TextTokenizer, Tokens, Truncation
from vidax.errors import ConfigError

LAYER_TYPES = ("sliding_attention", "full_attention")
_ROPE_TYPES = ("default", "linear")


def _rope_kind(source: str, name: str, params: Any) -> tuple[float | None, float]:
    """``(rope_theta or None, linear factor)`` of one layer type's RoPE dict.

    Raises:
        ConfigError: not a dict, a RoPE type other than default / linear, a linear type without
            a positive factor, ``partial_rotary_factor`` != 1, or an unknown key.
    """
    if params is None:
        return None, 1.0
    if not isinstance(params, Mapping):
        raise ConfigError(f"{source}: {name}={params!r} must be a JSON object.")
    unknown = sorted(set(params) - {"rope_type", "type", "rope_theta", "factor", "partial_rotary_factor"})
    if unknown:
        raise ConfigError(f"{source}: {name} has settings vidax's Gemma 3 does not implement: {unknown}.")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in _ROPE_TYPES:
        raise ConfigError(
            f"{source}: {name}.rope_type={rope_type!r} is not implemented by vidax's Gemma 3; valid: "
            f"{list(_ROPE_TYPES)}."
        )
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ConfigError(
            f"{source}: {name}.partial_rotary_factor={params['partial_rotary_factor']!r} is not "
            "implemented; vidax rotates the whole head dim (1.0)."
        )
    factor = 1.0
    if rope_type == "linear":
        factor = params.get("factor")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
            raise ConfigError(f"{source}: {name}.factor={factor!r} must be a number > 0 for linear RoPE.")
    theta = params.get("rope_theta")
    return (None if theta is None else float(theta)), float(factor)


@dataclasses.dataclass(frozen=True)
class Gemma3TextConfig(DecoderLMConfig):
    """``transformers.Gemma3TextConfig``: the ``text_config`` of a ``Gemma3ForConditionalGeneration``
    config.json (model_type ``"gemma3"``), or a ``gemma3_text`` one.

    RoPE is read in both forms transformers accepts: transformers 5's ``rope_parameters`` nested
    per layer type, or the older ``rope_theta`` / ``rope_local_base_freq`` / ``rope_scaling`` (the
    scaling applies to the global layers). ``layer_types`` absent: every ``sliding_window_pattern``-th
    layer (default 6) global, the others sliding, as transformers derives them.

    Attributes (beyond :class:`DecoderLMConfig`'s; defaults are transformers'):
        query_pre_attn_scalar: the scores are scaled by its ``-1/2`` power.
        sliding_window: keys a sliding layer's query sees (itself included).
        layer_types: per layer ``"sliding_attention"`` or ``"full_attention"``.
        rope_local_base_freq: RoPE base of the sliding layers (``rope_theta``: the global ones).
        rope_scaling_factor / rope_local_scaling_factor: linear RoPE scaling of the global /
            sliding layers (1.0: none).

    Refuses: ``use_bidirectional_attention``, ``attn_logit_softcapping`` (transformers 5.24's
    ``Gemma3Attention`` never passes it to the attention, so a file setting it means something
    the reference does not do), RoPE types other than default / linear, activations other than
    GELU-tanh, unknown layer types.
    """

    IGNORED: ClassVar[frozenset[str]] = META_KEYS | {
        # applied to the LM head's logits only (not run here)
        "final_logit_softcapping",
        # generation settings
        "cache_implementation",
        "attn_implementation",
    }
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "use_bidirectional_attention": (False, None),
        "attn_logit_softcapping": (None,),
    }
    #: Top-level keys of a Gemma3ForConditionalGeneration config.json beside text_config: the
    #: image part's, not read (text only).
    OUTER: ClassVar[frozenset[str]] = META_KEYS | {
        "vision_config",
        "mm_tokens_per_image",
        "boi_token_index",
        "eoi_token_index",
        "image_token_index",
        "boi_token_id",
        "eoi_token_id",
        "image_token_id",
        "processor_class",
    }
    LAYOUTS: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "": (),  # Gemma3TextModel.save_pretrained
        # Gemma3ForConditionalGeneration as transformers >= 4.52 holds and writes it ...
        "model.language_model.": ("model.vision_tower.", "model.multi_modal_projector.", "lm_head."),
        # ... and as transformers < 4.52 wrote it (google's released Gemma 3 checkpoints)
        "language_model.model.": ("vision_tower.", "multi_modal_projector.", "language_model.lm_head."),
    }

    model_type: str = "gemma3_text"
    vocab_size: int = 262208
    hidden_size: int = 2304
    intermediate_size: int = 9216
    num_hidden_layers: int = 26
    num_attention_heads: int = 8
    num_key_value_heads: int | None = 4
    head_dim: int | None = 256
    hidden_act: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    query_pre_attn_scalar: float = 256
    sliding_window: int = 4096
    layer_types: tuple[str, ...] | None = None
    rope_local_base_freq: float = 10_000.0
    rope_scaling_factor: float = 1.0
    rope_local_scaling_factor: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if self.layer_types is None and isinstance(self.num_hidden_layers, int):
            object.__setattr__(self, "layer_types", _pattern_layer_types(self.num_hidden_layers, 6))

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        raw = dict(config)
        if raw.get("model_type") == "gemma3" or "text_config" in raw:
            text = cls.outer_text_config(raw, source)
            raw = {"model_type": "gemma3_text", **text}
            source = f"{source} (text_config)"
        if raw.get("model_type", "gemma3_text") != "gemma3_text":
            raise ConfigError(
                f"{source}: model_type={raw.get('model_type')!r} is not Gemma 3; Gemma3TextConfig reads "
                "'gemma3' (its text_config) or 'gemma3_text'."
            )
        raw.pop("model_type", None)
        if "hidden_activation" in raw:
            raw["hidden_act"] = raw.pop("hidden_activation")
        elif "hidden_act" in raw:
            # Gemma3's MLP reads hidden_activation only (older Gemma files carry both keys).
            raw.pop("hidden_act")
        pattern = raw.pop("sliding_window_pattern", 6)
        if raw.get("layer_types") is None and isinstance(raw.get("num_hidden_layers", cls.num_hidden_layers), int):
            raw.pop("layer_types", None)
            if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
                raise ConfigError(f"{source}: sliding_window_pattern={pattern!r} must be a positive integer.")
            raw["layer_types"] = _pattern_layer_types(raw.get("num_hidden_layers", cls.num_hidden_layers), pattern)
        raw.update(_pop_gemma_rope(raw, source))
        return super().from_config_dict(raw, source=source)

    def validate(self, source: str) -> None:
        super().validate(source)
        types = self.layer_types
        if (
            not isinstance(types, Sequence)
            or len(types) != self.num_hidden_layers
            or any(t not in LAYER_TYPES for t in types)
        ):
            raise ConfigError(
                f"{source}: layer_types={types!r} must list one of {list(LAYER_TYPES)} for each of the "
                f"num_hidden_layers={self.num_hidden_layers} layers."
            )
        if "sliding_attention" in types:
            if (
                isinstance(self.sliding_window, bool)
                or not isinstance(self.sliding_window, int)
                or self.sliding_window < 1
            ):
                raise ConfigError(f"{source}: sliding_window={self.sliding_window!r} must be a positive integer.")
        for name in (
            "query_pre_attn_scalar",
            "rope_theta",
            "rope_local_base_freq",
            "rope_scaling_factor",
            "rope_local_scaling_factor",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{source}: {name}={value!r} must be a number > 0.")

    # The decoder-LM options Gemma 3 turns on.
    @property
    def attention_kinds(self) -> tuple[AttentionKind, ...]:
        """``(sliding, global)`` (:data:`LAYER_TYPES` order)."""
        return (
            AttentionKind(self.rope_local_base_freq, self.rope_local_scaling_factor, self.sliding_window),
            AttentionKind(self.rope_theta, self.rope_scaling_factor),
        )

    @property
    def layer_kinds(self) -> tuple[int, ...]:
        return tuple(LAYER_TYPES.index(t) for t in self.layer_types)

    norm_weight = "1+w"
    norm_weight_after_cast = False
    sandwich_norms = True
    qk_norm = True

    @property
    def attention_scale(self) -> float:
        return float(self.query_pre_attn_scalar) ** -0.5

    @property
    def embed_scale(self) -> float:
        return self.hidden_size**0.5


def _pattern_layer_types(num_layers: int, pattern: int) -> tuple[str, ...]:
    """transformers' default ``layer_types``: layer ``i`` global iff ``(i + 1) % pattern == 0``."""
    return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers))


def _pop_gemma_rope(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Remove the RoPE keys from ``raw``; return the :class:`Gemma3TextConfig` fields they set.

    As ``Gemma3TextConfig.convert_rope_params_to_dict``: ``rope_parameters`` per layer type
    (``{"full_attention": {...}, "sliding_attention": {...}}``), ``rope_scaling`` updating the
    global one, ``rope_theta`` / ``rope_local_base_freq`` where the dicts give no ``rope_theta``.
    """
    params = raw.pop("rope_parameters", None)
    scaling = raw.pop("rope_scaling", None)
    theta, local_theta = raw.pop("rope_theta", None), raw.pop("rope_local_base_freq", None)
    if params is not None and (not isinstance(params, Mapping) or set(params) - set(LAYER_TYPES)):
        raise ConfigError(
            f"{source}: rope_parameters={params!r} must be nested per layer type {list(LAYER_TYPES)} "
            "(transformers' Gemma 3 form)."
        )
    params = dict(params or {})
    full = dict(params.get("full_attention") or {})
    if scaling is not None:
        if not isinstance(scaling, Mapping):
            raise ConfigError(f"{source}: rope_scaling={scaling!r} must be a JSON object or null.")
        full.update(scaling)
    g_theta, g_factor = _rope_kind(source, "rope_parameters.full_attention", full)
    l_theta, l_factor = _rope_kind(source, "rope_parameters.sliding_attention", params.get("sliding_attention"))
    out: dict[str, Any] = {"rope_scaling_factor": g_factor, "rope_local_scaling_factor": l_factor}
    if (g_theta if g_theta is not None else theta) is not None:
        out["rope_theta"] = g_theta if g_theta is not None else theta
    if (l_theta if l_theta is not None else local_theta) is not None:
        out["rope_local_base_freq"] = l_theta if l_theta is not None else local_theta
    return out


# ----------------------------------------------------------------------------- LTX-2's use

#: ``LTX2Pipeline``'s default ``max_sequence_length``.
MAX_SEQUENCE_LENGTH = 1024


def gemma_prompt_tokens(
    tokenizer: TextTokenizer,
    prompts: Sequence[str],
    max_length: int = MAX_SEQUENCE_LENGTH,
    *,
    truncation: Truncation | None = None,
) -> Tokens:
    """Token ids and mask as ``LTX2Pipeline._get_gemma_prompt_embeds`` makes them: each prompt
    stripped of surrounding whitespace, then ``padding="max_length"``, ``max_length``,
    ``truncation=True``, ``add_special_tokens=True`` (Gemma's ``<bos>`` first) and padding on the
    left (the pipeline forces ``padding_side = "left"``).

    Returns:
        :class:`~vidax.encoders.tokenizer.Tokens` ``(B, max_length)``.

    Raises:
        InputError: ``max_length < 1``.
    """
    return tokenizer([p.strip() for p in prompts], max_length, padding_side="left", truncation=truncation)


def gemma_prompt_embeds(encoder: DecoderLM, input_ids: Any, attention_mask: Any) -> jax.Array:
    """Every hidden state of the Gemma 3 language model, as LTX-2 takes them:
    ``torch.stack(hidden_states, dim=-1).flatten(2, 3)``.

    Args:
        encoder: the loaded ``Gemma3ForConditionalGeneration`` text encoder.
        input_ids: (B, L) int token ids (left padded, :func:`gemma_prompt_tokens`).
        attention_mask: (B, L), 1 for real tokens.

    Returns:
        (B, L, D · (n + 1)) in the encoder's dtype, n = ``num_hidden_layers``: channel
        ``d · (n + 1) + i`` is channel ``d`` of hidden state ``i`` (0 the embeddings, n after the
        final norm).
    """
    states = encode_hidden_states(encoder, input_ids, attention_mask, output_layer=None, stack_axis=-1)
    b, length = states.shape[:2]
    return states.reshape(b, length, -1)
