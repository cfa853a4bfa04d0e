"""Configuration of the Wan 2.1 / 2.2 diffusion transformer (``transformer/config.json``)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from vidax.config import ConfigBase
from vidax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class WanTransformerConfig(ConfigBase):
    """Settings of ``diffusers.WanTransformer3DModel``, with its ``__init__`` defaults.

    Every field is implemented: T2V (Wan2.1 1.3B / 14B, Wan2.2 A14B, TI2V-5B with per-token
    timesteps), the I2V image branch (``image_dim`` + ``added_kv_proj_dim``) and the FLF2V image
    position embedding (``pos_embed_seq_len``).

    Attributes:
        patch_size: ``(p_t, p_h, p_w)`` of the patch-embedding Conv3d.
        num_attention_heads: N.
        attention_head_dim: K; the model width is ``D = N * K``.
        in_channels, out_channels: latent channels in / out (``out_channels=None`` means
            ``in_channels``, as in the reference).
        text_dim: width of the text-encoder states (UMT5: 4096).
        freq_dim: width of the sinusoidal timestep features.
        ffn_dim: hidden width of the feed-forward network.
        num_layers: number of transformer blocks.
        cross_attn_norm: affine LayerNorm (``norm2``) before cross-attention, else identity.
        qk_norm: the reference always applies RMSNorm over all heads to q and k whatever this
            says; only its released value ``"rms_norm_across_heads"`` is accepted.
        eps: epsilon of every LayerNorm / RMSNorm.
        image_dim: width of the CLIP image features (I2V) or ``None`` (no image embedder).
        added_kv_proj_dim: input width of the cross-attention image key/value projections or
            ``None``.
        rope_max_seq_len: length of the reference's RoPE tables: the largest number of patches
            along T, H or W.
        pos_embed_seq_len: length of the learned position embedding added to the image tokens
            (FLF2V) or ``None``.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int | None = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    qk_norm: str | None = "rms_norm_across_heads"
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_max_seq_len: int = 1024
    pos_embed_seq_len: int | None = None

    @property
    def inner_dim(self) -> int:
        """Model width D = num_attention_heads * attention_head_dim."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def out_dim(self) -> int:
        """Output latent channels (``out_channels or in_channels`` as in the reference)."""
        return self.out_channels or self.in_channels

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Head-dim channels given to the (T, H, W) rotary axes, as ``WanRotaryPosEmbed``."""
        h = w = 2 * (self.attention_head_dim // 6)
        return self.attention_head_dim - h - w, h, w

    def validate(self, source: str) -> None:
        def bad(key, value, want):
            raise ConfigError(f"{source}: {key}={value!r} is not valid for WanTransformerConfig; {want}.")

        p = self.patch_size
        if not (isinstance(p, tuple) and len(p) == 3 and all(isinstance(x, int) and x > 0 for x in p)):
            bad("patch_size", p, "expected three positive ints (p_t, p_h, p_w)")
        positive = (
            "num_attention_heads", "attention_head_dim", "in_channels", "text_dim", "freq_dim",
            "ffn_dim", "num_layers", "rope_max_seq_len",
        )
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                bad(key, value, "expected a positive int")
        for key in ("out_channels", "image_dim", "added_kv_proj_dim", "pos_embed_seq_len"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                bad(key, value, "expected a positive int or null")
        if self.freq_dim < 2:
            bad("freq_dim", self.freq_dim, "expected at least 2 (half of it are frequencies)")
        t, h, w = self.rope_split
        if self.attention_head_dim % 2:
            bad(
                "attention_head_dim", self.attention_head_dim,
                f"the reference splits it into rotary (T, H, W) parts {(t, h, w)} that must all be even",
            )
        if self.qk_norm != "rms_norm_across_heads":
            bad(
                "qk_norm", self.qk_norm,
                "diffusers' WanTransformer3DModel always applies RMSNorm across heads; only "
                "'rms_norm_across_heads' is accepted",
            )
        if not isinstance(self.cross_attn_norm, bool):
            bad("cross_attn_norm", self.cross_attn_norm, "expected true or false")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or self.eps <= 0:
            bad("eps", self.eps, "expected a positive float")
        if self.pos_embed_seq_len is not None and self.image_dim is None:
            bad("pos_embed_seq_len", self.pos_embed_seq_len, "it needs image_dim (the image embedder)")
        if (
            self.image_dim is not None
            and self.added_kv_proj_dim is not None
            and self.added_kv_proj_dim != self.inner_dim
        ):
            bad(
                "added_kv_proj_dim", self.added_kv_proj_dim,
                f"the image embedder outputs num_attention_heads*attention_head_dim={self.inner_dim} "
                "features, which the image key/value projections take",
            )
