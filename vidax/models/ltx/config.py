"""Configurations of the LTX-Video (Lightricks) components, one self-contained section each."""

from __future__ import annotations

import dataclasses

from vidax.config import ConfigBase
from vidax.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# Latent upsampler


@dataclasses.dataclass(frozen=True)
class LTXLatentUpsamplerConfig(ConfigBase):
    """Settings of diffusers' ``LTXLatentUpsamplerModel`` (pipelines/ltx/modeling_latent_upsampler.py,
    ``latent_upsampler/config.json``), with its ``__init__`` defaults.

    Attributes:
        in_channels: latent channels C (128 for the LTX-Video VAE).
        mid_channels: width of the residual stages; a multiple of 32 (every GroupNorm has 32
            groups).
        num_blocks_per_stage: residual blocks before and after the upsampling.
        dims: 3 (Conv3d over (T, H, W); the spatial upsampler is still a per-frame Conv2d) or 2
            (every conv and GroupNorm per frame).
        spatial_upsample: H and W doubled.
        temporal_upsample: frames ``T -> 2 T - 1`` (doubled, first dropped); needs ``dims=3``.

    Refused (ConfigError): neither upsampling, ``temporal_upsample`` with ``dims=2`` (the
    reference then applies a Conv3d to per-frame 4-D input, which torch reads as one unbatched
    volume: not a model), ``dims`` other than 2/3, ``mid_channels`` not a multiple of 32.
    """

    in_channels: int = 128
    mid_channels: int = 512
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False

    @property
    def scale(self) -> tuple[int, int]:
        """``(temporal, spatial)`` factor: output ``(T', H', W') = (st*T - (st-1), ss*H, ss*W)``."""
        return (2 if self.temporal_upsample else 1, 2 if self.spatial_upsample else 1)

    def validate(self, source: str) -> None:
        for name in ("in_channels", "mid_channels", "num_blocks_per_stage"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"{source}: {name}={value!r}; it must be an int >= 1.")
        for name in ("spatial_upsample", "temporal_upsample"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r}; it must be true or false.")
        if self.dims not in (2, 3) or isinstance(self.dims, bool):
            raise ConfigError(f"{source}: dims={self.dims!r}; valid: 2, 3.")
        if self.mid_channels % 32:
            raise ConfigError(
                f"{source}: mid_channels={self.mid_channels!r}; it must be a multiple of 32 "
                "(the GroupNorms have 32 groups)."
            )
        if not (self.spatial_upsample or self.temporal_upsample):
            raise ConfigError(
                f"{source}: spatial_upsample=False and temporal_upsample=False; at least one must be true."
            )
        if self.temporal_upsample and self.dims == 2:
            raise ConfigError(
                f"{source}: temporal_upsample=True with dims=2 is not a working model in the reference "
                "(a Conv3d on per-frame input); temporal upsampling needs dims=3."
            )
