"""The configurations of the decoder-only language models vidax runs as text encoders
(:mod:`vidax.encoders.decoder_lm`): what every one has (:class:`DecoderLMConfig`), Llama's and
Qwen2.5-VL's text model's, each read from a transformers ``config.json`` refusing what vidax does
not implement; and the attention kinds their layers take (:class:`AttentionKind`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.config import TRANSFORMERS_METADATA_KEYS, ConfigBase
from vidax.errors import ConfigError
from vidax.nn.rope import TextRope, rope_inv_freq

_F32 = jnp.float32

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
META_KEYS = TRANSFORMERS_METADATA_KEYS | {
    "model_type",
    # training only (dropout is off at inference; init is overwritten by the checkpoint)
    "initializer_range",
    "attention_dropout",
    # default RoPE does not depend on the context length it was trained for
    "max_position_embeddings",
}


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

    #: Top-level keys of a multimodal config.json beside its ``text_config`` (not read; the
    #: Gemma configs name theirs): :meth:`outer_text_config`.
    OUTER: ClassVar[frozenset[str]] = frozenset()

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

    @classmethod
    def outer_text_config(cls, raw: Mapping[str, Any], source: str) -> dict[str, Any]:
        """The ``text_config`` of a multimodal model's config.json ``raw`` (``{}`` when absent),
        beside which ``raw`` may hold only the keys of ``cls.OUTER`` and ``_``-prefixed ones
        (the Gemma 3 / Gemma 4 ``*ForConditionalGeneration`` files).

        Raises:
            ConfigError: ``text_config`` is not a JSON object, or ``raw`` has another key.
        """
        text = raw.get("text_config") or {}
        if not isinstance(text, Mapping):
            raise ConfigError(f"{source}: text_config={text!r} must be a JSON object.")
        unknown = sorted(k for k in raw if k != "text_config" and not k.startswith("_") and k not in cls.OUTER)
        if unknown:
            raise ConfigError(f"{source}: unknown top-level settings {unknown} beside text_config for {cls.__name__}.")
        return text

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

    IGNORED: ClassVar[frozenset[str]] = META_KEYS | {
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

    IGNORED: ClassVar[frozenset[str]] = META_KEYS | {
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
