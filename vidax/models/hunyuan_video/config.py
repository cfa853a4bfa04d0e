"""HunyuanVideo (1.0) configs: frozen dataclasses built from each component's ``config.json``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

from vidax.config import ConfigBase, check_positive_ints, check_vae_blocks
from vidax.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# VAE


@dataclasses.dataclass(frozen=True)
class HunyuanVideoVAEConfig(ConfigBase):
    """Settings of ``diffusers.AutoencoderKLHunyuanVideo`` (its ``vae/config.json``).

    Attributes:
        in_channels, out_channels: video channels (3).
        latent_channels: latent channels ``C_z`` (16).
        down_block_types, up_block_types: one entry per block, all ``HunyuanVideoDownBlock3D`` /
            ``HunyuanVideoUpBlock3D`` (the only types the reference builds).
        block_out_channels: channels per encoder block (the decoder mirrors them).
        layers_per_block: resnets per encoder block (decoder blocks have one more).
        act_fn: ``"silu"`` (``"swish"`` is the same function); others are refused.
        norm_num_groups: groups of every group norm (eps 1e-6 everywhere, as the reference).
        scaling_factor: latents are ``z * scaling_factor`` in the transformer's space; the
            pipelines divide by it before decoding.
        spatial_compression_ratio: pixels per latent pixel along H and W, a power of two; the
            first ``log2`` of it blocks resample space.
        temporal_compression_ratio: 4 (the only value the reference's decoder builds): blocks
            ``n - 3`` and ``n - 2`` of ``n`` resample time.
        mid_block_add_attention: whether the mid blocks have their frame-causal attention.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {"act_fn": ("silu", "swish")}

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 16
    down_block_types: tuple[str, ...] = ("HunyuanVideoDownBlock3D",) * 4
    up_block_types: tuple[str, ...] = ("HunyuanVideoUpBlock3D",) * 4
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    norm_num_groups: int = 32
    scaling_factor: float = 0.476986
    spatial_compression_ratio: int = 8
    temporal_compression_ratio: int = 4
    mid_block_add_attention: bool = True

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W (``spatial_compression_ratio``)."""
        return self.spatial_compression_ratio

    @property
    def temporal_compression(self) -> int:
        """Frames per latent frame after the first (``temporal_compression_ratio``)."""
        return self.temporal_compression_ratio

    def resampling(self) -> tuple[tuple[bool, bool], ...]:
        """Per encoder block ``(space, time)``: whether its down-sampler halves H/W, T.

        The decoder's block ``i`` up-samples as encoder block ``i`` down-samples (the
        reference's ``HunyuanVideoEncoder3D`` / ``HunyuanVideoDecoder3D`` use the same rule).
        """
        n = len(self.block_out_channels)
        spatial = int(math.log2(self.spatial_compression_ratio))
        time = int(math.log2(self.temporal_compression_ratio))
        return tuple((i < spatial, n - 1 - time <= i < n - 1) for i in range(n))

    def validate(self, source: str) -> None:
        check_positive_ints(source, self, ("in_channels", "out_channels", "latent_channels", "layers_per_block",
                                           "norm_num_groups", "spatial_compression_ratio",
                                           "temporal_compression_ratio"))
        boc = self.block_out_channels
        check_vae_blocks(source, boc, self.norm_num_groups, {
            "down_block_types": (self.down_block_types, "HunyuanVideoDownBlock3D"),
            "up_block_types": (self.up_block_types, "HunyuanVideoUpBlock3D"),
        })
        if self.temporal_compression_ratio != 4:
            raise ConfigError(
                f"{source}: temporal_compression_ratio={self.temporal_compression_ratio!r} is not "
                "implemented; only 4 (the reference's decoder refuses other values)"
            )
        scr = self.spatial_compression_ratio
        if scr & (scr - 1):
            raise ConfigError(f"{source}: spatial_compression_ratio={scr!r} must be a power of two")
        # The tiling and the pipelines take the ratios as given: they must be what the blocks do.
        got_s = 2 ** sum(s for s, _ in self.resampling())
        got_t = 2 ** sum(t for _, t in self.resampling())
        if (got_s, got_t) != (scr, self.temporal_compression_ratio):
            raise ConfigError(
                f"{source}: {len(boc)} blocks resample by {got_s} in space and {got_t} in time, "
                f"not the configured spatial_compression_ratio={scr} / "
                f"temporal_compression_ratio={self.temporal_compression_ratio}"
            )
        if not isinstance(self.mid_block_add_attention, bool):
            raise ConfigError(
                f"{source}: mid_block_add_attention={self.mid_block_add_attention!r} must be a boolean"
            )
        if not isinstance(self.scaling_factor, (int, float)) or isinstance(self.scaling_factor, bool) \
                or not self.scaling_factor > 0:
            raise ConfigError(f"{source}: scaling_factor={self.scaling_factor!r} must be a positive number")
