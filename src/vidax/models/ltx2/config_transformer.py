"""Configs of LTX-2's denoising transformer and text connectors, from their ``config.json``.

:class:`LTX2TransformerConfig` is ``diffusers.LTX2VideoTransformer3DModel`` (diffusers 0.42.1
``models/transformers/transformer_ltx2.py``), :class:`LTX2ConnectorsConfig` is
``diffusers.pipelines.ltx2.connectors.LTX2TextConnectors``; both with the reference's ``__init__``
defaults, covering LTX-2 (2.0: ``Lightricks/LTX-2``) and LTX-2.3 (gated attention, cross-attention
AdaLN, perturbed attention, per-modality text projections). Settings vidax does not implement are
refused (``NEUTRAL``) with one line naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.config import FFN_ACTIVATIONS, ConfigBase, TransformerConfig
from vidax.models.ltx.config import LTX_VIDEO_TOKEN_SIZES

#: RoPE pair layouts: the reference's name -> :func:`vidax.nn.rope.apply_rope` layout.
LTX2_ROPE_TYPES = {"interleaved": "interleaved", "split": "rotate_half"}


def _check_bools(config: Any, source: str, names: tuple[str, ...]) -> None:
    for key in names:
        if not isinstance(getattr(config, key), bool):
            config.invalid(source, key, getattr(config, key), "expected true or false")


def _check_rope(config: Any, source: str) -> None:
    if config.rope_type not in LTX2_ROPE_TYPES:
        config.invalid(source, "rope_type", config.rope_type, f"expected one of {sorted(LTX2_ROPE_TYPES)}")
    if not isinstance(config.rope_theta, (int, float)) or isinstance(config.rope_theta, bool) or config.rope_theta <= 0:
        config.invalid(source, "rope_theta", config.rope_theta, "expected a positive number")


@dataclasses.dataclass(frozen=True)
class LTX2TransformerConfig(TransformerConfig):
    """Settings of ``diffusers.LTX2VideoTransformer3DModel`` (its ``__init__`` names and defaults).

    Video stream: ``num_attention_heads`` x ``attention_head_dim`` = D; audio stream:
    ``audio_num_attention_heads`` x ``audio_attention_head_dim`` = D_a. ``cross_attention_dim`` /
    ``audio_cross_attention_dim`` are the text widths of the video / audio prompt cross-attention
    (the caption projections' outputs in 2.0, the connectors' in 2.3: D and D_a).
    ``audio_cross_attention_dim`` is also the width of the audio<->video attention's RoPE (= D_a).

    LTX-2.3's layers: ``gated_attn`` / ``audio_gated_attn`` (per-head output gates),
    ``cross_attn_mod`` / ``audio_cross_attn_mod`` (AdaLN of the prompt cross-attention: 9-row
    tables, ``prompt_adaln``), ``perturbed_attn`` (self-attention that STG can replace by its
    values), ``use_prompt_embeddings=false`` (no caption projections).

    LTX-2.5's: ``ff_bias=false``, ``use_keyframes_abs_pos_embedding`` (a learned ``(1, D)``
    embedding added to the tokens a ``video_keyframes_mask`` marks), ``use_prompt_adaln_single=
    false`` (the text keys' / values' modulation is the blocks' static table only).

    ``norm_elementwise_affine``: weights in the blocks' RMSNorms (false in every release).

    Refused: ``qk_norm`` other than ``rms_norm_across_heads`` (the reference refuses it too);
    what the reference builds but fails to run: a video width below 6 (its RoPE is empty), odd
    RoPE pairs (odd widths for "interleaved", odd head dims for "split").
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "qk_norm": ("rms_norm_across_heads",),
    }

    in_channels: int = 128
    out_channels: int | None = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    cross_attention_dim: int = 4096
    vae_scale_factors: tuple = (8, 32, 32)
    pos_embed_max_pos: int = 20
    base_height: int = 2048
    base_width: int = 2048
    gated_attn: bool = False
    cross_attn_mod: bool = False
    audio_in_channels: int = 128
    audio_out_channels: int | None = 128
    audio_patch_size: int = 1
    audio_patch_size_t: int = 1
    audio_num_attention_heads: int = 32
    audio_attention_head_dim: int = 64
    audio_cross_attention_dim: int = 2048
    audio_scale_factor: int = 4
    audio_pos_embed_max_pos: int = 20
    audio_sampling_rate: int = 16000
    audio_hop_length: int = 160
    audio_gated_attn: bool = False
    audio_cross_attn_mod: bool = False
    num_layers: int = 48
    activation_fn: str = "gelu-approximate"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 3840
    attention_bias: bool = True
    attention_out_bias: bool = True
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    causal_offset: int = 1
    timestep_scale_multiplier: int = 1000
    cross_attn_timestep_scale_multiplier: int = 1000
    rope_type: str = "interleaved"
    use_prompt_embeddings: bool = True
    perturbed_attn: bool = False
    ff_bias: bool = True
    audio_ff_bias: bool = True
    use_prompt_adaln_single: bool = True
    use_keyframes_abs_pos_embedding: bool = False

    @property
    def audio_inner_dim(self) -> int:
        """Audio width D_a = audio_num_attention_heads * audio_attention_head_dim."""
        return self.audio_num_attention_heads * self.audio_attention_head_dim

    @property
    def audio_out_dim(self) -> int:
        return self.audio_out_channels or self.audio_in_channels

    @property
    def prompt_modulation(self) -> bool:
        """LTX-2.3's prompt AdaLN (per-block ``prompt_scale_shift_table``)."""
        return self.cross_attn_mod or self.audio_cross_attn_mod

    @property
    def prompt_adaln(self) -> bool:
        """The timestep-dependent part of it (``prompt_adaln``, from ``sigma``)."""
        return self.prompt_modulation and self.use_prompt_adaln_single

    def validate(self, source: str) -> None:
        self._check_values(source)
        self._check_widths(source)
        self._check_rope_pairs(source)

    def _check_values(self, source: str) -> None:
        """Each setting alone: positive sizes, true/false flags, the RoPE, the activation."""
        self.check_positive(
            source,
            (
                *LTX_VIDEO_TOKEN_SIZES,
                "pos_embed_max_pos",
                "base_height",
                "base_width",
                "audio_in_channels",
                "audio_patch_size",
                "audio_patch_size_t",
                "audio_num_attention_heads",
                "audio_attention_head_dim",
                "audio_cross_attention_dim",
                "audio_scale_factor",
                "audio_pos_embed_max_pos",
                "audio_sampling_rate",
                "audio_hop_length",
                "num_layers",
                "caption_channels",
                "timestep_scale_multiplier",
                "cross_attn_timestep_scale_multiplier",
            ),
            nullable=("out_channels", "audio_out_channels"),
        )
        _check_bools(
            self,
            source,
            (
                "gated_attn",
                "cross_attn_mod",
                "audio_gated_attn",
                "audio_cross_attn_mod",
                "norm_elementwise_affine",
                "attention_bias",
                "attention_out_bias",
                "rope_double_precision",
                "use_prompt_embeddings",
                "perturbed_attn",
                "ff_bias",
                "audio_ff_bias",
                "use_prompt_adaln_single",
                "use_keyframes_abs_pos_embedding",
            ),
        )
        _check_rope(self, source)
        if self.activation_fn not in FFN_ACTIVATIONS:
            self.invalid(source, "activation_fn", self.activation_fn, f"vidax implements {sorted(FFN_ACTIVATIONS)}")
        if not isinstance(self.norm_eps, (int, float)) or isinstance(self.norm_eps, bool) or self.norm_eps <= 0:
            self.invalid(source, "norm_eps", self.norm_eps, "expected a positive float")
        vsf = self.vae_scale_factors
        if not (isinstance(vsf, tuple) and len(vsf) == 3 and all(isinstance(v, int) and v > 0 for v in vsf)):
            self.invalid(source, "vae_scale_factors", vsf, "expected 3 positive ints (time, height, width)")
        if not isinstance(self.causal_offset, int) or isinstance(self.causal_offset, bool) or self.causal_offset < 0:
            self.invalid(source, "causal_offset", self.causal_offset, "expected an int >= 0")

    def _check_widths(self, source: str) -> None:
        """The streams' widths against each other, as the reference's layers need them."""
        if self.audio_cross_attention_dim != self.audio_inner_dim:
            self.invalid(
                source,
                "audio_cross_attention_dim",
                self.audio_cross_attention_dim,
                "the audio<->video attention's RoPE is that wide and rotates its "
                f"audio_num_attention_heads x audio_attention_head_dim = {self.audio_inner_dim} queries",
            )
        if self.use_prompt_embeddings and self.cross_attention_dim != self.inner_dim:
            self.invalid(
                source,
                "cross_attention_dim",
                self.cross_attention_dim,
                f"the caption projection feeds the video cross-attention width D = {self.inner_dim}",
            )
        if self.prompt_modulation and self.cross_attention_dim != self.inner_dim:
            self.invalid(
                source,
                "cross_attention_dim",
                self.cross_attention_dim,
                f"the prompt AdaLN table (2, D = {self.inner_dim}) modulates the video text (the reference "
                "fails on another width)",
            )
        if self.inner_dim < 6:
            self.invalid(
                source,
                "attention_head_dim",
                self.attention_head_dim,
                "the reference's video RoPE has inner_dim // 6 frequencies per axis: none at "
                f"num_attention_heads x attention_head_dim = {self.inner_dim} < 6, where it fails",
            )

    def _check_rope_pairs(self, source: str) -> None:
        """The RoPE's channel pairs: whole pairs in each stream (interleaved) or head (split)."""
        if self.rope_type == "interleaved":
            for key, width in (
                ("attention_head_dim", self.inner_dim),
                ("audio_attention_head_dim", self.audio_inner_dim),
            ):
                if width % 2:
                    self.invalid(
                        source,
                        key,
                        getattr(self, key),
                        f"the interleaved RoPE rotates channel pairs of the {width} wide stream (odd: the "
                        "reference fails)",
                    )
        else:
            for key in ("attention_head_dim", "audio_attention_head_dim"):
                if getattr(self, key) % 2:
                    self.invalid(
                        source,
                        key,
                        getattr(self, key),
                        "the split RoPE rotates the halves of each head (odd: the reference fails)",
                    )
        if self.rope_type == "split":
            if (self.audio_cross_attention_dim // 2) % self.num_attention_heads:
                self.invalid(
                    source,
                    "audio_cross_attention_dim",
                    self.audio_cross_attention_dim,
                    "the split video cross-modal RoPE cuts its half width into num_attention_heads "
                    f"= {self.num_attention_heads} chunks",
                )


@dataclasses.dataclass(frozen=True)
class LTX2ConnectorsConfig(ConfigBase):
    """Settings of ``diffusers.pipelines.ltx2.connectors.LTX2TextConnectors`` (its ``__init__``).

    The input is every Gemma 3 hidden state, ``(B, L, caption_channels, text_proj_in_factor)``.
    2.0 (``per_modality_projections=false``): per-layer masked mean / range normalisation, then one
    ``text_proj_in`` to ``caption_channels``; 2.3: per-token RMS normalisation, then
    ``video_text_proj_in`` / ``audio_text_proj_in`` to ``video_hidden_dim`` / ``audio_hidden_dim``.
    Each connector is a 1-D transformer of its own width (heads x head dim) that must equal its
    input width.

    Refused: ``causal_temporal_positioning=true`` (stored, unused by the reference; refused so
    that a checkpoint relying on it is not run silently without it).
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {"causal_temporal_positioning": (False,)}

    caption_channels: int = 3840
    text_proj_in_factor: int = 49
    video_connector_num_attention_heads: int = 30
    video_connector_attention_head_dim: int = 128
    video_connector_num_layers: int = 2
    video_connector_num_learnable_registers: int | None = 128
    video_gated_attn: bool = False
    audio_connector_num_attention_heads: int = 30
    audio_connector_attention_head_dim: int = 128
    audio_connector_num_layers: int = 2
    audio_connector_num_learnable_registers: int | None = 128
    audio_gated_attn: bool = False
    connector_rope_base_seq_len: int = 4096
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    rope_type: str = "interleaved"
    per_modality_projections: bool = False
    video_hidden_dim: int = 4096
    audio_hidden_dim: int = 2048
    proj_bias: bool = False

    def connector(self, modality: str) -> tuple[int, int, int, int | None, bool]:
        """``(heads, head_dim, layers, registers, gated)`` of the ``"video"`` / ``"audio"`` connector."""
        g = lambda k: getattr(self, f"{modality}_connector_{k}")  # noqa: E731
        return (
            g("num_attention_heads"),
            g("attention_head_dim"),
            g("num_layers"),
            g("num_learnable_registers"),
            getattr(self, f"{modality}_gated_attn"),
        )

    def input_width(self, modality: str) -> int:
        """Width of the features the ``modality`` connector takes (its projection's output)."""
        if self.per_modality_projections:
            return getattr(self, f"{modality}_hidden_dim")
        return self.caption_channels

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "caption_channels",
                "text_proj_in_factor",
                "video_connector_num_attention_heads",
                "video_connector_attention_head_dim",
                "video_connector_num_layers",
                "audio_connector_num_attention_heads",
                "audio_connector_attention_head_dim",
                "audio_connector_num_layers",
                "connector_rope_base_seq_len",
                "video_hidden_dim",
                "audio_hidden_dim",
            ),
            nullable=("video_connector_num_learnable_registers", "audio_connector_num_learnable_registers"),
        )
        _check_bools(
            self,
            source,
            ("video_gated_attn", "audio_gated_attn", "rope_double_precision", "per_modality_projections", "proj_bias"),
        )
        _check_rope(self, source)
        for m in ("video", "audio"):
            heads, head_dim, *_ = self.connector(m)
            if heads * head_dim != self.input_width(m):
                key = f"{m}_connector_num_attention_heads"
                self.invalid(
                    source,
                    key,
                    heads,
                    f"{key} x {m}_connector_attention_head_dim must equal the {m} connector's input width "
                    f"{self.input_width(m)} (the reference adds the attention to its input)",
                )
