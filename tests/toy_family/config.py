"""The toy family's configs: the transformer's ``config.json`` (the VAE is Wan's)."""

from __future__ import annotations

import dataclasses

from vidax.config import ConfigBase


@dataclasses.dataclass(frozen=True)
class ToyConfig(ConfigBase):
    in_channels: int = 16
    dim: int = 32
    text_dim: int = 64
    num_layers: int = 3
    num_single_layers: int = 2
