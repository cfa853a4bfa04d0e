"""CogVideoX and CogVideoX1.5 (THUDM): transformer, config, and (in ``vae``) the 3D VAE."""

from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.transformer import (
    CogVideoXTransformer3DModel,
    cogvideox_transformer_policy,
    load_cogvideox_transformer,
)

__all__ = [
    "CogVideoXTransformer3DModel",
    "CogVideoXTransformerConfig",
    "cogvideox_transformer_policy",
    "load_cogvideox_transformer",
]
