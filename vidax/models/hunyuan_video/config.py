"""Configuration of HunyuanVideo 1.0 (``hunyuanvideo-community/HunyuanVideo``, ``-I2V``,
``-I2V-33ch``): the denoising transformer (``transformer/config.json``,
:class:`HunyuanVideoTransformerConfig`). Not HunyuanVideo-1.5, a different model."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from vidax.config import ConfigBase
from vidax.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# The transformer (``transformer/config.json``)

#: ``image_condition_type`` values of diffusers 0.42.1 (None: text-to-video).
IMAGE_CONDITION_TYPES = (None, "latent_concat", "token_replace")

#: The token refiner's feed-forward ratio: ``HunyuanVideoTokenRefiner`` is built with its default
#: ``mlp_ratio=4.0`` whatever the config's ``mlp_ratio`` says.
REFINER_MLP_RATIO = 4.0


@dataclasses.dataclass(frozen=True)
class HunyuanVideoTransformerConfig(ConfigBase):
    """Settings of ``diffusers.HunyuanVideoTransformer3DModel`` (0.42.1), with its defaults.

    Every field is implemented: text-to-video with the embedded guidance (``guidance_embeds``),
    I2V by channel concatenation (``latent_concat``: the model only sees ``in_channels=33``) and
    by first-frame token replacement (``token_replace``: the first frame's tokens are modulated
    with the embedding of timestep 0).

    Attributes:
        in_channels, out_channels: latent channels in / out (``out_channels`` null means
            ``in_channels``, as the reference).
        num_attention_heads, attention_head_dim: N and K; the width is ``D = N·K``.
        num_layers: double-stream blocks (``transformer_blocks``).
        num_single_layers: single-stream blocks (``single_transformer_blocks``).
        num_refiner_layers: blocks of the text token refiner.
        mlp_ratio: feed-forward width ``int(D · mlp_ratio)`` of both block kinds.
        patch_size, patch_size_t: spatial and temporal patch of the patch embedding.
        qk_norm: only ``"rms_norm"`` (RMSNorm over each head's K channels, eps 1e-6).
        guidance_embeds: whether the model embeds a guidance value (guidance-distilled models).
        text_embed_dim: width of the (Llama) text-encoder states.
        pooled_projection_dim: width of the pooled (CLIP) text embedding.
        rope_theta: RoPE base.
        rope_axes_dim: head-dim channels of the (T, H, W) RoPE axes; they sum to K.
        image_condition_type: None, ``"latent_concat"`` or ``"token_replace"``.
    """

    #: ``sample_size`` was proposed for the hub file by a community PR; diffusers 0.42.1's
    #: ``__init__`` has no such argument and ``from_config`` drops it.
    IGNORED: ClassVar[frozenset[str]] = frozenset({"sample_size"})
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    in_channels: int = 16
    out_channels: int | None = 16
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    num_layers: int = 20
    num_single_layers: int = 40
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size: int = 2
    patch_size_t: int = 1
    qk_norm: str = "rms_norm"
    guidance_embeds: bool = True
    text_embed_dim: int = 4096
    pooled_projection_dim: int = 768
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)
    image_condition_type: str | None = None

    @property
    def inner_dim(self) -> int:
        """Model width D = num_attention_heads * attention_head_dim."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def out_dim(self) -> int:
        """Output latent channels (``out_channels or in_channels``)."""
        return self.out_channels or self.in_channels

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the blocks' feed-forward networks, ``int(D * mlp_ratio)``."""
        return int(self.inner_dim * self.mlp_ratio)

    @property
    def refiner_mlp_dim(self) -> int:
        """Hidden width of the token refiner's feed-forward network, ``int(D * 4.0)``."""
        return int(self.inner_dim * REFINER_MLP_RATIO)

    @property
    def patch(self) -> tuple[int, int, int]:
        """``(p_t, p, p)``."""
        return (self.patch_size_t, self.patch_size, self.patch_size)

    @property
    def token_replace(self) -> bool:
        """Whether the first frame's tokens take timestep-0 modulation (``token_replace`` I2V)."""
        return self.image_condition_type == "token_replace"

    def validate(self, source: str) -> None:
        def bad(key, value, want):
            raise ConfigError(
                f"{source}: {key}={value!r} is not valid for HunyuanVideoTransformerConfig; {want}."
            )

        positive = ("in_channels", "num_attention_heads", "attention_head_dim", "num_layers",
                    "num_single_layers", "num_refiner_layers", "patch_size", "patch_size_t",
                    "text_embed_dim", "pooled_projection_dim")
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                bad(key, value, "expected a positive int")
        if self.out_channels is not None and (
                not isinstance(self.out_channels, int) or isinstance(self.out_channels, bool)
                or self.out_channels < 1):
            bad("out_channels", self.out_channels, "expected a positive int or null")
        if not isinstance(self.mlp_ratio, (int, float)) or isinstance(self.mlp_ratio, bool) or self.mlp_ratio <= 0:
            bad("mlp_ratio", self.mlp_ratio, "expected a positive number")
        if self.qk_norm != "rms_norm":
            bad("qk_norm", self.qk_norm, "vidax implements only 'rms_norm' (the released value)")
        if not isinstance(self.guidance_embeds, bool):
            bad("guidance_embeds", self.guidance_embeds, "expected true or false")
        if not isinstance(self.rope_theta, (int, float)) or isinstance(self.rope_theta, bool) or self.rope_theta <= 0:
            bad("rope_theta", self.rope_theta, "expected a positive number")
        dims = self.rope_axes_dim
        if not (isinstance(dims, tuple) and len(dims) == 3
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 and d % 2 == 0 for d in dims)):
            bad("rope_axes_dim", dims, "expected three positive even ints (T, H, W channels)")
        if sum(dims) != self.attention_head_dim:
            bad("rope_axes_dim", dims,
                f"the (T, H, W) RoPE channels must sum to attention_head_dim={self.attention_head_dim}")
        if self.image_condition_type not in IMAGE_CONDITION_TYPES:
            bad("image_condition_type", self.image_condition_type,
                f"diffusers 0.42.1 knows {list(IMAGE_CONDITION_TYPES)}")
