"""Decoder-only language models used as text encoders: Llama (HunyuanVideo's ``LlamaModel``, the
language model of its I2V ``LlavaForConditionalGeneration``), the Qwen2.5-VL text tower
(Cosmos-Predict2.5's ``Qwen2_5_VLForConditionalGeneration``) and Gemma 3's language model
(LTX-2's ``Gemma3ForConditionalGeneration``, config in :mod:`vidax.encoders.gemma3`), one
implementation for all three.

References: transformers 5.24 ``models/llama/modeling_llama.py`` ``LlamaModel``,
``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` ``Qwen2_5_VLTextModel`` and
``models/gemma3/modeling_gemma3.py`` ``Gemma3TextModel``. All are: token embedding, pre-norm
decoder layers (RMS norm, causal self-attention with rotate-half RoPE and grouped-query K/V
heads, gated MLP ``down(act(gate(x)) * up(x))``), a final RMS norm. Their differences are
config-driven options of the one module (:class:`DecoderLMConfig` properties):

=================  =====================  ======================  ==================================
option             Llama                  Qwen2.5-VL text         Gemma 3
=================  =====================  ======================  ==================================
q/k/v bias         ``attention_bias``     always                  ``attention_bias``
o bias             ``attention_bias``     never                   ``attention_bias``
MLP bias           ``mlp_bias``           never                   never
head dim           ``head_dim`` or D / N  always D / N            ``head_dim`` (default 256)
MLP act            silu                   silu                    GELU-tanh
RMS norm weight    ``w · x̂.to(dtype)``    ``w · x̂.to(dtype)``     ``(x̂ · (1 + w)).to(dtype)``
norms per layer    before attn / MLP      before attn / MLP       also on their outputs; q/k norms
score scale        ``K ** -0.5``          ``K ** -0.5``           ``query_pre_attn_scalar ** -0.5``
embeddings         as stored              as stored               times ``sqrt(D)``
attention kinds    one: global            one: global             sliding / global per layer
RoPE               1-D, ``rope_theta``    M-RoPE, see below       per kind: base, linear scaling
=================  =====================  ======================  ==================================

An *attention kind* (:class:`AttentionKind`) is a RoPE (base, linear scaling factor) and an
optional sliding window; each layer has one (``DecoderLMConfig.layer_kinds``) and the layer scan
picks its kind's RoPE tables and window by the layer's index. The window is a dense 0 / -inf bias
(query ``i`` sees key ``j`` only if ``i - j < window``, transformers' ``sliding_window_overlay``),
on top of the causal and padding masks.

Positions are ``arange(L)`` for every prompt, with or without padding, as both references
compute them for text-only input without a cache (``LlamaModel.forward``; for Qwen2.5-VL,
``Qwen2_5_VLModel.compute_3d_position_ids`` returns None without image / video grids and
``Qwen2_5_VLTextModel.forward`` then uses ``arange(L)`` for all three M-RoPE streams). M-RoPE
takes pair ``i`` of the head dim from stream ``s(i)`` (the ``mrope_section`` split), each with the
ordinary frequency ``theta ** (-2i / K)``; with the three streams equal, that is exactly the 1-D
RoPE, which is what runs here. Image / video tokens (unequal streams) are not implemented: the
Qwen2.5-VL vision tower is not part of this module and its weights are declared unused by the
key rules (:func:`decoder_lm_key_rules`).

Attention mask: causal, plus the key-padding mask when ``attention_mask`` is given: query ``i``
attends key ``j`` iff ``j <= i`` and ``attention_mask[j] != 0`` (transformers'
``create_causal_mask``: ``causal_mask_function`` and ``padding_mask_function``). With right
padding every row is then the reference's, padded rows included (they attend to all real tokens
before them). A query with no allowed key (left padding: padded positions before the first real
token) gets a zero attention output here, as torch's SDPA (the default implementation of
transformers) gives it, so with left padding too every row is the reference's (Gemma 3's test).

Hidden states: the reference's ``output_hidden_states=True`` tuple has ``num_hidden_layers + 1``
entries: ``[0]`` the token embeddings, ``[i]`` the output of layer ``i`` (1-based) for ``i < n``,
and ``[n]`` the output of the last layer *after the final norm* (``capture_outputs`` replaces it
by ``last_hidden_state``). :meth:`DecoderLM.__call__` returns one entry (``output_layer``, e.g.
HunyuanVideo's ``-(num_hidden_layers_skip + 1) = -3``, running only the layers it needs);
:meth:`DecoderLM.all_hidden_states` returns all of them stacked (Cosmos-Predict2.5).

Precision (every parameter in the load dtype): with ``dtype=float32`` everything is fp32. With
``dtype=bfloat16`` parameters and matmuls are bf16, as ``from_pretrained(dtype=torch.bfloat16)``;
norm statistics, RoPE and the softmax are fp32, and the residual stream is kept in fp32 (the
reference rounds it to bf16 after every sub-layer), so the returned hidden states are rounded
once, to bf16, at the end.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.config import ConfigBase
from vidax.errors import CheckpointError, ConfigError, InputError
from vidax.nn.attention import SegmentIds, dot_product_attention
from vidax.nn.inputs import compute_dtype
from vidax.nn.kernels import from_stack_bits, stack_bits_state
from vidax.nn.layers import Linear, RMSNorm
from vidax.nn.rope import TextRope, apply_rope, rope_inv_freq
from vidax.nn.stack import scan_layers, stacked
from vidax.parallel.rules import column_parallel, row_parallel
from vidax.weights.loader import KeyRules

_F32 = jnp.float32

#: Logical axes of the parameters (see :mod:`vidax.parallel.rules`): q/k/v and the MLP's gate / up
#: column-parallel (output split over ``heads`` / ``mlp``, their biases with it), ``o_proj`` and
#: ``down_proj`` row-parallel (input split; their biases replicated, added once after the
#: reduction), the token embedding split by vocabulary rows. Norm scales are replicated.
DECODER_LM_PARAM_AXES = (
    *column_parallel(r"^layers/self_attn/(q_proj|k_proj|v_proj)", "heads"),
    *row_parallel(r"^layers/self_attn/o_proj", "heads"),
    *column_parallel(r"^layers/mlp/(gate_proj|up_proj)", "mlp"),
    *row_parallel(r"^layers/mlp/down_proj", "mlp"),
    (r"^embed_tokens/embedding$", ("vocab", "embed")),
)

#: MLP activations (transformers' ``ACT2FN`` names). The GELUs are computed in float32 and rounded
#: once, as torch's bf16 ``gelu`` does.
ACTIVATIONS = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x.astype(_F32), approximate=False).astype(x.dtype),
    "gelu_new": lambda x: jax.nn.gelu(x.astype(_F32), approximate=True).astype(x.dtype),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x.astype(_F32), approximate=True).astype(x.dtype),
    "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
}


@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """One kind of self-attention layer: its RoPE and its mask.

    Attributes:
        theta: RoPE base.
        factor: linear RoPE scaling (transformers' ``rope_type="linear"``: the inverse frequencies
            divided by it); 1.0: none.
        window: sliding window: query ``i`` attends key ``j`` only if ``i - j < window``
            (transformers' ``sliding_window_overlay``); None: global.
    """

    theta: float
    factor: float = 1.0
    window: int | None = None

    def tables(self, length: int, head_dim: int) -> tuple[jax.Array, jax.Array]:
        """``(cos, sin)`` of positions ``0 .. length-1``, each ``(length, head_dim // 2)`` float32:
        angles ``p · inv_freq / factor`` in float32, as transformers (``inv_freq /= factor``)."""
        inv = rope_inv_freq(head_dim, self.theta)
        if self.factor != 1.0:
            inv = inv / np.float32(self.factor)
        ang = jnp.arange(length, dtype=_F32)[:, None] * jnp.asarray(inv)
        return jnp.cos(ang), jnp.sin(ang)


#: Keys of a transformers config.json that do not change a text encoder's hidden states.
_META = frozenset(
    {
        "architectures",
        "dtype",
        "torch_dtype",
        "transformers_version",
        "model_type",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "id2label",
        "label2id",
        "problem_type",
        "tokenizer_class",
        "chunk_size_feed_forward",
        # training only (dropout is off at inference; init is overwritten by the checkpoint)
        "initializer_range",
        "attention_dropout",
        "gradient_checkpointing",
        # the LM head is not run (hidden states only), tied or not
        "tie_word_embeddings",
        # default RoPE does not depend on the context length it was trained for
        "max_position_embeddings",
    }
)


# ----------------------------------------------------------------------------- config


def _positive_int(source: str, name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{source}: {name}={value!r} must be a positive integer.")


def _pop_rope(raw: dict[str, Any], source: str, mrope: bool = False) -> dict[str, Any]:
    """Remove the RoPE keys (``rope_scaling`` / ``rope_parameters`` / ``rope_theta`` /
    ``partial_rotary_factor``) from ``raw``; return ``{"rope_theta": ...}`` when the file gives
    one (and, with ``mrope``, the ``mrope_section`` found in the RoPE dict).

    With ``mrope`` (Qwen2.5-VL) a ``rope_type`` / ``type`` of ``"mrope"`` is read as
    ``"default"``, as transformers' ``Qwen2_5_VLTextConfig`` does. The rest is checked by
    :meth:`vidax.nn.rope.TextRope.from_config_dict`, which refuses RoPE scaling types.
    """
    rope_keys = {
        k: raw.pop(k) for k in ("rope_scaling", "rope_parameters", "rope_theta", "partial_rotary_factor") if k in raw
    }
    out: dict[str, Any] = {}
    for key in ("rope_scaling", "rope_parameters"):
        params = rope_keys.get(key)
        if mrope and isinstance(params, Mapping):
            params = dict(params)
            if "mrope_section" in params:
                out["mrope_section"] = params.pop("mrope_section")
            for type_key in ("rope_type", "type"):
                if params.get(type_key) == "mrope":
                    params[type_key] = "default"
            rope_keys[key] = params
    # The head dim is checked by the config itself; TextRope here only reads the RoPE dict.
    view = {**rope_keys, "head_dim": 2}
    try:
        rope = TextRope.from_config_dict(view)
    except ConfigError as e:
        raise ConfigError(f"{source}: {str(e).removeprefix('config.json: ')}") from None
    given = "rope_theta" in rope_keys or any(
        isinstance(rope_keys.get(k), Mapping) and "rope_theta" in rope_keys[k]
        for k in ("rope_scaling", "rope_parameters")
    )
    if given:  # else the config class's default (the reference's: Llama 1e4, Qwen2.5-VL 1e6)
        out["rope_theta"] = rope.theta
    return out


@dataclasses.dataclass(frozen=True)
class DecoderLMConfig(ConfigBase):
    """Settings of a decoder-only text encoder, shared by :class:`LlamaTextConfig` and
    :class:`Qwen25VLTextConfig` (build one of those from a config.json; they know the keys).

    Attributes:
        model_type: ``"llama"`` or ``"qwen2_5_vl_text"``.
        vocab_size: V, rows of ``embed_tokens``.
        hidden_size: D.
        intermediate_size: hidden width of the MLP.
        num_hidden_layers: n, decoder layers.
        num_attention_heads: N, query heads.
        num_key_value_heads: N_kv (GQA; ``N % N_kv == 0``), None = N.
        head_dim: K (Llama: ``head_dim`` or ``D // N``; Qwen2.5-VL: always ``D // N``).
        hidden_act: MLP activation (``"silu"``).
        rms_norm_eps: epsilon of every RMS norm.
        rope_theta: RoPE base.
        attention_bias: Llama: bias on q/k/v/o (Qwen2.5-VL: ignored, see :attr:`qkv_bias`).
        mlp_bias: Llama: bias on the MLP projections.
        mrope_section: Qwen2.5-VL: pairs of the head dim per M-RoPE stream (sum = K / 2).
    """

    model_type: str = "llama"
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    mlp_bias: bool = False
    mrope_section: tuple[int, ...] | None = None

    #: Source-key prefix of the language model -> prefixes of the other tensors such a
    #: checkpoint holds that this module does not run (see :func:`decoder_lm_key_rules`).
    LAYOUTS: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def __post_init__(self):
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if (
            self.head_dim is None
            and isinstance(self.hidden_size, int)
            and isinstance(self.num_attention_heads, int)
            and self.num_attention_heads > 0
        ):
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    def validate(self, source: str) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
        ):
            _positive_int(source, name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"{source}: num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads} (grouped-query attention)."
            )
        if self.head_dim % 2:
            raise ConfigError(f"{source}: head_dim={self.head_dim} must be even for RoPE.")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(
                f"{source}: hidden_act={self.hidden_act!r} is not implemented by vidax's decoder "
                f"text encoder; valid: {sorted(ACTIVATIONS)} (gated MLP down(act(gate(x)) * up(x)))."
            )
        if not isinstance(self.rms_norm_eps, (int, float)) or self.rms_norm_eps < 0:
            raise ConfigError(f"{source}: rms_norm_eps={self.rms_norm_eps!r} must be a number >= 0.")
        for name in ("attention_bias", "mlp_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r} must be true or false.")

    # Config-driven options of the one module.
    @property
    def qkv_bias(self) -> bool:
        """Whether q/k/v projections have a bias."""
        return self.attention_bias

    @property
    def o_bias(self) -> bool:
        """Whether the attention output projection has a bias."""
        return self.attention_bias

    @property
    def rope(self) -> TextRope:
        """The 1-D RoPE of the text positions."""
        return TextRope(head_dim=self.head_dim, theta=self.rope_theta)

    @property
    def attention_kinds(self) -> tuple[AttentionKind, ...]:
        """The kinds of self-attention layer (their RoPE and window); Llama / Qwen2.5-VL: one, global."""
        return (AttentionKind(theta=self.rope_theta),)

    @property
    def layer_kinds(self) -> tuple[int, ...]:
        """Per layer, its index into :attr:`attention_kinds`."""
        return (0,) * self.num_hidden_layers

    @property
    def norm_weight(self) -> str:
        """The RMS norms' weight convention (:data:`vidax.nn.layers.RMS_WEIGHTS`): ``"w"``."""
        return "w"

    @property
    def norm_weight_after_cast(self) -> bool:
        """Llama / Qwen2: ``weight * x̂.to(dtype)`` (True); Gemma: ``(x̂ * (1 + w)).to(dtype)``."""
        return True

    @property
    def sandwich_norms(self) -> bool:
        """Gemma: the attention and MLP outputs are normed too (``post_attention_layernorm`` on
        the attention output, ``pre_`` / ``post_feedforward_layernorm`` around the MLP)."""
        return False

    @property
    def qk_norm(self) -> bool:
        """Gemma 3: an RMS norm over the head dim of every query and key head (``q_norm`` / ``k_norm``)."""
        return False

    @property
    def attention_scale(self) -> float | None:
        """Multiplier of the attention scores; None: ``1 / sqrt(head_dim)``."""
        return None

    @property
    def embed_scale(self) -> float | None:
        """Gemma: the token embeddings are multiplied by ``sqrt(hidden_size)``; None: not scaled."""
        return None


@dataclasses.dataclass(frozen=True)
class LlamaTextConfig(DecoderLMConfig):
    """``transformers.LlamaConfig`` read from a ``LlamaModel`` / ``LlamaForCausalLM``
    config.json, or the ``text_config`` of a ``LlavaForConditionalGeneration`` one (model_type
    ``"llava"``: only its language model is described; the vision tower / projector settings are
    the LLaVA image part's and are not read here).

    Refuses RoPE scaling (``rope_scaling`` / ``rope_parameters`` of a type other than
    ``"default"``), activations other than silu, and a ``text_config`` that is not Llama.
    """

    IGNORED: ClassVar[frozenset[str]] = _META | {
        # transformers 4 split the projections' matmuls into pretraining_tp slices and summed
        # them (the same product up to summation order); transformers 5 no longer reads it.
        "pretraining_tp",
    }
    LAYOUTS: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "": (),  # LlamaModel.save_pretrained
        "model.": ("lm_head.",),  # LlamaForCausalLM
        # LlavaForConditionalGeneration as transformers 5 writes it ...
        "model.language_model.": ("model.vision_tower.", "model.multi_modal_projector.", "lm_head."),
        # ... and as transformers 4 (< 4.52) wrote it (the released LLaVA checkpoints)
        "language_model.model.": ("vision_tower.", "multi_modal_projector.", "language_model.lm_head."),
    }

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        raw = dict(config)
        if raw.get("model_type") == "llava":
            text = raw.get("text_config") or {}
            if not isinstance(text, Mapping):
                raise ConfigError(f"{source}: text_config={text!r} must be a JSON object.")
            raw = {"model_type": "llama", **text}
            source = f"{source} (text_config)"
        if raw.get("model_type", "llama") != "llama":
            raise ConfigError(
                f"{source}: model_type={raw.get('model_type')!r} is not a Llama language model; "
                "vidax's LlamaTextConfig reads model_type 'llama' (or a 'llava' config's "
                "text_config)."
            )
        raw.update(_pop_rope(raw, source))
        raw.pop("model_type", None)
        return super().from_config_dict(raw, source=source)


@dataclasses.dataclass(frozen=True)
class Qwen25VLTextConfig(DecoderLMConfig):
    """``transformers.Qwen2_5_VLTextConfig``: the text tower of a
    ``Qwen2_5_VLForConditionalGeneration`` config.json (its ``text_config``, or the top-level
    keys of files written by transformers 4, which stored the text settings flat), or a
    ``Qwen2_5_VLTextModel`` one.

    The vision settings (``vision_config``, the image / video token ids) are not read: this module
    runs text only. Refuses sliding-window attention, layer types other than full attention,
    RoPE types other than ``"mrope"`` / ``"default"``, a ``head_dim`` other than D / N, and an
    ``mrope_section`` whose sum is not K / 2.
    """

    IGNORED: ClassVar[frozenset[str]] = _META | {
        # used by the reference only when use_sliding_window is true (refused below)
        "sliding_window",
        "max_window_layers",
        # multimodal settings of the outer config: the vision tower is not run (text only)
        "vision_config",
        "image_token_id",
        "video_token_id",
        "vision_start_token_id",
        "vision_end_token_id",
        "vision_token_id",
    }
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {"use_sliding_window": (False, None)}
    LAYOUTS: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "": (),  # Qwen2_5_VLTextModel.save_pretrained
        # Qwen2_5_VLForConditionalGeneration as transformers 5 writes it ...
        "model.language_model.": ("model.visual.", "lm_head."),
        # ... and as transformers 4 (< 4.52) wrote it (the released Qwen2.5-VL checkpoints)
        "model.": ("visual.", "lm_head."),
    }
    # transformers' Qwen2_5_VLTextConfig defaults
    model_type: str = "qwen2_5_vl_text"
    vocab_size: int = 152064
    hidden_size: int = 8192
    intermediate_size: int = 29568
    num_hidden_layers: int = 80
    num_attention_heads: int = 64
    num_key_value_heads: int | None = 8
    rms_norm_eps: float = 1e-5
    rope_theta: float = 1000000.0
    # (the reference falls back to [16, 24, 24] when absent; text-only results do not depend on it)
    mrope_section: tuple[int, ...] | None = None

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        raw = dict(config)
        if raw.get("model_type") == "qwen2_5_vl" and raw.get("text_config") is not None:
            text = raw["text_config"]
            if not isinstance(text, Mapping):
                raise ConfigError(f"{source}: text_config={text!r} must be a JSON object.")
            outer = {k: v for k, v in raw.items() if k != "text_config"}
            unknown = sorted(k for k in outer if not k.startswith("_") and k not in cls.IGNORED)
            if unknown:
                raise ConfigError(
                    f"{source}: unknown top-level settings {unknown} beside text_config for {cls.__name__}."
                )
            raw = dict(text)
            source = f"{source} (text_config)"
        if raw.get("model_type", "qwen2_5_vl_text") not in ("qwen2_5_vl", "qwen2_5_vl_text"):
            raise ConfigError(
                f"{source}: model_type={raw.get('model_type')!r} is not Qwen2.5-VL; "
                "Qwen25VLTextConfig reads 'qwen2_5_vl' or 'qwen2_5_vl_text'."
            )
        raw.pop("model_type", None)
        hidden, heads = raw.get("hidden_size", cls.hidden_size), raw.get("num_attention_heads", cls.num_attention_heads)
        head_dim = raw.pop("head_dim", None)
        if head_dim is not None and (
            not isinstance(hidden, int) or not isinstance(heads, int) or head_dim != hidden // heads
        ):
            raise ConfigError(
                f"{source}: head_dim={head_dim!r} differs from hidden_size // num_attention_heads "
                f"= {hidden!r} // {heads!r}; Qwen2.5-VL's attention always uses the latter and its "
                "RoPE the former, so such a file is inconsistent."
            )
        layer_types = raw.pop("layer_types", None)
        if layer_types is not None and any(t != "full_attention" for t in layer_types):
            raise ConfigError(
                f"{source}: layer_types={layer_types!r}: only 'full_attention' layers are "
                "implemented (no sliding-window attention)."
            )
        if "attention_bias" in raw or "mlp_bias" in raw:
            raise ConfigError(
                f"{source}: attention_bias / mlp_bias are not Qwen2.5-VL settings (its q/k/v "
                "always have a bias, o_proj and the MLP never)."
            )
        raw.update(_pop_rope(raw, source, mrope=True))
        return super().from_config_dict(raw, source=source)

    def validate(self, source: str) -> None:
        super().validate(source)
        section = self.mrope_section
        if section is not None and (
            not all(isinstance(s, int) and s >= 0 for s in section) or sum(section) != self.head_dim // 2
        ):
            raise ConfigError(
                f"{source}: mrope_section={section!r} must be non-negative ints summing to "
                f"head_dim // 2 = {self.head_dim // 2}."
            )

    @property
    def qkv_bias(self) -> bool:
        return True

    @property
    def o_bias(self) -> bool:
        return False


# ----------------------------------------------------------------------------- modules


def _rms_norm(cfg: DecoderLMConfig, dtype: Any, param_dtype: Any, dim: int | None = None) -> RMSNorm:
    """``LlamaRMSNorm`` / ``Qwen2RMSNorm`` (fp32 statistics, rounded to ``dtype``, then times the
    weight: ``weight * x̂.to(dtype)``, as T5's) or ``Gemma3RMSNorm`` (``(x̂ · (1 + w)).to(dtype)``,
    all in fp32), over ``dim`` (default the hidden size)."""
    return RMSNorm(
        cfg.hidden_size if dim is None else dim,
        cfg.rms_norm_eps,
        weight=cfg.norm_weight,
        dtype=dtype,
        weight_after_cast=cfg.norm_weight_after_cast,
        param_dtype=param_dtype,
    )


class DecoderAttention(nnx.Module):
    """``LlamaAttention`` / ``Qwen2_5_VLAttention`` / ``Gemma3Attention``: causal GQA
    self-attention with RoPE.

    q ``(B, L, N, K)``, k / v ``(B, L, N_kv, K)`` (not repeated: the attention dispatch groups
    the query heads); with ``qk_norm`` (Gemma 3) q and k are RMS-normed per head first;
    rotate-half RoPE on q and k in fp32; scores scaled by ``config.attention_scale``
    (``1 / sqrt(K)`` by default; Gemma 3: ``query_pre_attn_scalar ** -0.5``).
    """

    def __init__(self, cfg: DecoderLMConfig, attention: str, *, dtype, param_dtype, rngs):
        n, nkv, k, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        lin = partial(Linear, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = lin(d, n * k, use_bias=cfg.qkv_bias)
        self.k_proj = lin(d, nkv * k, use_bias=cfg.qkv_bias)
        self.v_proj = lin(d, nkv * k, use_bias=cfg.qkv_bias)
        self.o_proj = lin(n * k, d, use_bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = _rms_norm(cfg, dtype, param_dtype, k)
            self.k_norm = _rms_norm(cfg, dtype, param_dtype, k)
        self.qk_norm = cfg.qk_norm
        self.scale = cfg.attention_scale
        self.shape = (n, nkv, k)
        self.attention = attention

    def __call__(self, x, cos, sin, segment_ids, bias=None):
        """x (B, L, D) compute dtype, cos / sin (L, K/2) f32, segment_ids or None, bias (1, 1, L, L)
        f32 or None (the sliding window: 0 or -inf) -> (B, L, D)."""
        b, length, _ = x.shape
        n, nkv, k = self.shape
        q = self.q_proj(x).reshape(b, length, n, k)
        key = self.k_proj(x).reshape(b, length, nkv, k)
        if self.qk_norm:
            q, key = self.q_norm(q), self.k_norm(key)
        q = apply_rope(q, cos, sin, layout="rotate_half")
        key = apply_rope(key, cos, sin, layout="rotate_half")
        v = self.v_proj(x).reshape(b, length, nkv, k)
        out = dot_product_attention(
            q, key, v, causal=True, segment_ids=segment_ids, bias=bias, scale=self.scale, implementation=self.attention
        )
        return self.o_proj(out.reshape(b, length, n * k))


class DecoderMLP(nnx.Module):
    """``LlamaMLP`` / ``Qwen2MLP`` / ``Gemma3MLP``: ``down_proj(act(gate_proj(x)) * up_proj(x))``
    (act: silu, Gemma: GELU-tanh)."""

    def __init__(self, cfg: DecoderLMConfig, *, dtype, param_dtype, rngs):
        bias = cfg.mlp_bias
        lin = partial(Linear, use_bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.gate_proj = lin(cfg.hidden_size, cfg.intermediate_size)
        self.up_proj = lin(cfg.hidden_size, cfg.intermediate_size)
        self.down_proj = lin(cfg.intermediate_size, cfg.hidden_size)
        self.act = cfg.hidden_act

    def __call__(self, x):
        return self.down_proj(ACTIVATIONS[self.act](self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    """``LlamaDecoderLayer`` / ``Qwen2_5_VLDecoderLayer``: pre-norm attention and MLP, each with
    a residual; ``Gemma3DecoderLayer`` (``sandwich_norms``): the attention and MLP outputs normed
    too before their residuals. The residual stream ``h`` is fp32."""

    def __init__(self, cfg: DecoderLMConfig, attention: str, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = DecoderAttention(cfg, attention, **kw)
        self.mlp = DecoderMLP(cfg, **kw)
        self.input_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.post_attention_layernorm = _rms_norm(cfg, dtype, param_dtype)
        if cfg.sandwich_norms:
            self.pre_feedforward_layernorm = _rms_norm(cfg, dtype, param_dtype)
            self.post_feedforward_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.sandwich = cfg.sandwich_norms

    def __call__(self, h, cos, sin, segment_ids, bias=None):
        attn = self.self_attn(self.input_layernorm(h), cos, sin, segment_ids, bias)
        if not self.sandwich:
            h = h + attn.astype(h.dtype)
            return h + self.mlp(self.post_attention_layernorm(h)).astype(h.dtype)
        h = h + self.post_attention_layernorm(attn).astype(h.dtype)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h))).astype(h.dtype)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Positions:
    """What every layer needs besides ``h``: per attention kind the RoPE tables ``cos`` / ``sin``
    (T, L, K/2) f32 and the window (T,) int32 (L for a global kind, never binding), the kind of
    each layer (n,) int32, the key-padding segments; ``windowed``: whether a mask bias is built."""

    cos: jax.Array
    sin: jax.Array
    windows: jax.Array
    kinds: jax.Array
    segments: SegmentIds | None
    windowed: bool = dataclasses.field(metadata=dict(static=True))

    @classmethod
    def build(cls, config: DecoderLMConfig, length: int, segments: SegmentIds | None) -> _Positions:
        kinds = config.attention_kinds
        tables = [kind.tables(length, config.head_dim) for kind in kinds]
        windows = [length if kind.window is None else kind.window for kind in kinds]
        return cls(
            jnp.stack([c for c, _ in tables]),
            jnp.stack([s for _, s in tables]),
            jnp.asarray(windows, jnp.int32),
            jnp.asarray(config.layer_kinds, jnp.int32),
            segments,
            any(kind.window is not None for kind in kinds),
        )

    def of_layer(self, i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """(cos, sin, bias) of layer ``i`` (traced): bias (1, 1, L, L) f32, 0 where ``q - k <
        window`` and -inf elsewhere (causality and padding are the attention's own masks)."""
        kind = self.kinds[i]
        bias = None
        if self.windowed:
            length = self.cos.shape[1]
            q = jnp.arange(length, dtype=jnp.int32)
            inside = (q[:, None] - q[None, :]) < self.windows[kind]
            bias = jnp.where(inside, 0.0, -jnp.inf).astype(_F32)[None, None]
        return self.cos[kind], self.sin[kind], bias


def init_decoder(
    module: nnx.Module,
    config: Any,
    what: str,
    dtype: Any,
    param_dtype: Any,
    rngs: nnx.Rngs | None,
    layers: Callable[[dict], dict],
) -> None:
    """The constructor every decoder-LM text encoder shares (:class:`DecoderLM`, Gemma 4's):
    ``module.embed_tokens`` (V, D), then the attributes ``layers(kw)`` returns (``kw``: the
    ``dtype`` / ``param_dtype`` / ``rngs`` keywords of a layer), then ``module.norm`` (D,),
    ``module.config`` and ``module.dtype`` (the compute dtype).

    Args:
        what: the module, named in the dtype error. param_dtype: None: ``dtype``. rngs: None:
            ``nnx.Rngs(0)`` (values are overwritten by the checkpoint).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """
    dtype = compute_dtype(dtype, what)
    param_dtype = dtype if param_dtype is None else param_dtype
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0) if rngs is None else rngs)
    module.embed_tokens = nnx.Embed(config.vocab_size, config.hidden_size, **kw)
    for name, value in layers(kw).items():
        setattr(module, name, value)
    module.norm = _rms_norm(config, dtype, param_dtype)
    module.config = config
    module.dtype = dtype


class DecoderLM(nnx.Module):
    """A decoder-only language model run as a text encoder: ``transformers.LlamaModel``,
    ``Qwen2_5_VLTextModel`` or ``Gemma3TextModel`` (the module docstring lists what differs and
    what stays fp32).

    Parameters mirror the reference tree: ``embed_tokens/embedding`` (V, D), ``layers/...``
    stacked on a leading axis of n (``self_attn/{q,k,v,o}_proj``, ``mlp/{gate,up,down}_proj``,
    ``input_layernorm``, ``post_attention_layernorm``; Gemma 3 also ``self_attn/{q,k}_norm``,
    ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``), ``norm/scale`` (D,).

    Args:
        config: a :class:`LlamaTextConfig`, :class:`Qwen25VLTextConfig` or
            :class:`vidax.encoders.gemma3.Gemma3TextConfig`.
        dtype: compute dtype, float32 or bfloat16.
        param_dtype: dtype of freshly built parameters (the loader sets the stored dtype).
        rngs: initialisers' keys (values are overwritten by the checkpoint).
        attention: implementation for :func:`vidax.nn.attention.dot_product_attention`.

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    #: Its stacked layers (dotted attribute paths): passed into its jitted forward as uint16 views
    #: on CPU (:func:`vidax.nn.kernels.stacks.as_stack_bits`).
    stacked_paths: ClassVar[tuple[str, ...]] = ("layers",)

    def __init__(
        self,
        config: DecoderLMConfig,
        *,
        dtype: Any = _F32,
        param_dtype: Any = None,
        rngs: nnx.Rngs | None = None,
        attention: str = "auto",
    ):
        init_decoder(
            self,
            config,
            "decoder text encoder",
            dtype,
            param_dtype,
            rngs,
            lambda kw: dict(
                layers=stacked(
                    lambda r: DecoderLayer(config, attention, **{**kw, "rngs": r}), config.num_hidden_layers, kw["rngs"]
                )
            ),
        )

    def embed(self, input_ids: jax.Array) -> jax.Array:
        """``embed_tokens(input_ids)``: (B, L) int ids -> (B, L, D) in the compute dtype.

        Raises:
            InputError: ``input_ids`` is not a 2-D integer array.
        """
        ids = jnp.asarray(input_ids)
        if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise InputError(f"input_ids must be a (B, L) integer array; got shape {ids.shape}, dtype {ids.dtype}.")
        table = self.embed_tokens.embedding[...]
        h = jnp.take(table, ids, axis=0)
        if self.config.embed_scale is not None:
            # Gemma's scale is a float32 tensor cast to the table's dtype (sqrt(3840) = 61.97 is
            # 62.0 in bf16) and multiplied in it, as Gemma3TextScaledWordEmbedding.
            h = h * jnp.asarray(np.float32(self.config.embed_scale)).astype(table.dtype)
        return h.astype(self.dtype)

    def _prepare(self, input_ids, attention_mask, inputs_embeds):
        """-> (h0 (B, L, D) fp32, :class:`_Positions`)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError("pass exactly one of input_ids and inputs_embeds.")
        if inputs_embeds is None:
            h = self.embed(input_ids)
        else:
            h = jnp.asarray(inputs_embeds)
            d = self.config.hidden_size
            if h.ndim != 3 or h.shape[-1] != d or not jnp.issubdtype(h.dtype, jnp.floating):
                raise InputError(
                    f"inputs_embeds must be a (B, L, {d}) float array; got shape {h.shape}, dtype {h.dtype}."
                )
        b, length = h.shape[:2]
        segments = None
        if attention_mask is not None:
            mask = jnp.asarray(attention_mask)
            if mask.shape != (b, length):
                raise InputError(f"attention_mask must have shape (B, L) = {(b, length)}; got {mask.shape}.")
            # Every query may attend every real key (and causality limits it to earlier ones).
            segments = SegmentIds(jnp.ones((b, length), jnp.int32), (mask != 0).astype(jnp.int32))
        return h.astype(_F32), _Positions.build(self.config, length, segments)

    def _run(self, h, pos: _Positions, num_layers: int, collect: bool):
        """The first ``num_layers`` layers on ``h``; with ``collect`` also every layer's output
        stacked (n, B, L, D). Each layer picks its kind's RoPE tables and window mask by its index
        (carried beside ``h``)."""

        def body(layer, carry):
            x, i = carry
            cos, sin, bias = pos.of_layer(i)
            return layer(x, cos, sin, pos.segments, bias), i + 1

        out = scan_layers(self.layers, (h, jnp.zeros((), jnp.int32)), body, num_layers=num_layers, collect=collect)
        if collect:
            (last, _), (states, _) = out
            return last, states
        return out[0]

    def __call__(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        *,
        inputs_embeds: jax.Array | None = None,
        output_layer: int = -1,
    ) -> jax.Array:
        """One entry of the reference's ``output_hidden_states=True`` tuple.

        Args:
            input_ids: (B, L) integer token ids in ``[0, vocab_size)``; or None with
                ``inputs_embeds``.
            attention_mask: (B, L), nonzero for real tokens, 0 for padding (right padding; see
                the module docstring); None = no padding (causal only).
            inputs_embeds: (B, L, D) float token embeddings instead of ``input_ids`` (e.g.
                :meth:`embed` with image features scattered in, as LLaVA does).
            output_layer: a static int indexing the ``num_hidden_layers + 1`` hidden states: 0 is
                the embeddings, ``i`` the output of layer ``i``, ``n`` (= ``-1``, the default)
                ``last_hidden_state`` (after the final norm); negative values count from the
                end, so HunyuanVideo's ``hidden_states[-(2 + 1)]`` is ``output_layer=-3``. Only
                the layers up to that one run.

        Returns:
            (B, L, D) in the compute dtype.

        Raises:
            InputError: malformed inputs, both or neither of ``input_ids`` / ``inputs_embeds``,
                ``output_layer`` out of range.
        """
        n = self.config.num_hidden_layers
        if not isinstance(output_layer, int) or isinstance(output_layer, bool) or not -(n + 1) <= output_layer <= n:
            raise InputError(
                f"output_layer={output_layer!r} must be an int in [{-(n + 1)}, {n}] (an index "
                f"into the {n + 1} hidden states: embeddings, then {n} layers, the last normed)."
            )
        index = output_layer % (n + 1)
        h, pos = self._prepare(input_ids, attention_mask, inputs_embeds)
        h = self._run(h, pos, index, collect=False)
        if index == n:
            return self.norm(h).astype(self.dtype)
        return h.astype(self.dtype)

    def all_hidden_states(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        *,
        inputs_embeds: jax.Array | None = None,
    ) -> jax.Array:
        """All of the reference's ``output_hidden_states=True`` tuple, stacked.

        Args: as :meth:`__call__` (without ``output_layer``).

        Returns:
            (n + 1, B, L, D) in the compute dtype, n = ``num_hidden_layers``: entry ``i`` is the
            reference's ``hidden_states[i]`` (0 the embeddings, ``n`` after the final norm).
            Cosmos-Predict2.5 normalises and concatenates entries 1..n.

        Raises:
            InputError: malformed inputs.
        """
        h, pos = self._prepare(input_ids, attention_mask, inputs_embeds)
        n = self.config.num_hidden_layers
        last, states = self._run(h, pos, n, collect=True)
        return jnp.concatenate(
            [h[None].astype(self.dtype), states[:-1].astype(self.dtype), self.norm(last)[None].astype(self.dtype)]
        )


# ----------------------------------------------------------------------------- loading


def decoder_lm_key_rules(config: DecoderLMConfig, keys: Any) -> KeyRules:
    """Key mapping of a checkpoint holding the language model described by ``config``.

    The language model's keys are ``<prefix>embed_tokens.weight``, ``<prefix>layers.{i}....``
    (stacked) and ``<prefix>norm.weight``; ``<prefix>`` is found from the
    ``embed_tokens.weight`` key among ``keys`` and must be one of ``config.LAYOUTS``, which also
    names the other parts such a checkpoint holds that this module does not run (vision tower,
    projector, LM head): those are declared unused and never read.

    Raises:
        CheckpointError: no ``embed_tokens.weight`` key under a known prefix.
    """
    keys = set(keys)
    layouts = type(config).LAYOUTS
    found = [p for p in sorted(layouts, key=len, reverse=True) if f"{p}embed_tokens.weight" in keys]
    if not found:
        seen = sorted(k for k in keys if k.endswith("embed_tokens.weight"))[:4]
        raise CheckpointError(
            f"no language-model embedding among the checkpoint's tensors: expected one of "
            f"{[p + 'embed_tokens.weight' for p in layouts]}, found {seen or 'none'}."
        )
    prefix = found[0]
    return KeyRules(stacked=("layers",), prefix=prefix, unused=layouts[prefix])


@functools.cache
def _hidden_fn(graphdef, output_layer: int | None, masked: bool, stack_axis: int = 0):
    """The jitted ``(params, ids, mask) -> hidden`` of one encoder structure; parameters are an
    argument (no closure holds them), so pipelines of one structure share the compiled function."""

    @jax.jit
    def run(params, ids, mask):
        model = nnx.merge(graphdef, from_stack_bits(params))
        mask = mask if masked else None
        if output_layer is None:
            return jnp.moveaxis(model.all_hidden_states(ids, mask), 0, stack_axis)
        return model(ids, mask, output_layer=output_layer)

    return run


def encode_hidden_states(
    encoder: DecoderLM,
    input_ids: Any,
    attention_mask: Any = None,
    *,
    output_layer: int | None = -1,
    stack_axis: int = 0,
) -> jax.Array:
    """Jitted :meth:`DecoderLM.__call__` (``output_layer`` an int: (B, L, D)) or
    :meth:`DecoderLM.all_hidden_states` (``output_layer=None``: (n + 1, B, L, D), the layer axis
    moved to ``stack_axis``: -1 gives (B, L, D, n + 1), ``torch.stack(hidden_states, dim=-1)``)
    of token ids (B, L) and an optional mask (B, L), in the encoder's dtype."""
    ids = jnp.asarray(input_ids)
    fn = _hidden_fn(nnx.graphdef(encoder), output_layer, attention_mask is not None, stack_axis)
    mask = jnp.zeros((), jnp.int32) if attention_mask is None else jnp.asarray(attention_mask)
    return fn(stack_bits_state(encoder), ids, mask)
