"""Configuration of the SkyReels-V2 diffusion transformer (``transformer/config.json`` of a
``SkyReelsV2*Pipeline`` checkpoint). Its VAE (``AutoencoderKLWan``) and text / image encoders are
Wan2.1's and read by their own configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.models.wan.config import WanTransformerConfig


@dataclasses.dataclass(frozen=True)
class SkyReelsV2TransformerConfig(WanTransformerConfig):
    """Settings of ``diffusers.SkyReelsV2Transformer3DModel``, with its ``__init__`` defaults.

    The Wan2.1 transformer (:class:`~vidax.models.wan.config.WanTransformerConfig`, every field
    the same) plus:

    Attributes:
        inject_sample_info: the fps conditioning (``fps_embedding`` + ``fps_projection``, added
            to the time modulation); the model then needs ``fps``.
        num_frame_per_block: latent frames per causal block of the self-attention when the call
            does not say (1: full attention); the diffusion-forcing pipelines pass their
            ``causal_block_size`` instead.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    num_attention_heads: int = 16
    ffn_dim: int = 8192
    num_layers: int = 32
    inject_sample_info: bool = False
    num_frame_per_block: int = 1

    def validate(self, source: str) -> None:
        super().validate(source)
        if not isinstance(self.inject_sample_info, bool):
            self.invalid(source, "inject_sample_info", self.inject_sample_info, "expected true or false")
        self.check_positive(source, ("num_frame_per_block",))
