"""Configuration of the SkyReels-V2 diffusion transformer (``transformer/config.json`` of a
``SkyReelsV2*Pipeline`` checkpoint). Its VAE (``AutoencoderKLWan``) and text / image encoders are
Wan2.1's and read by their own configs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.checkpoint import CallDefaults, Checkpoint
from vidax.errors import ConfigError
from vidax.models.wan.config import WanInfo, WanTransformerConfig, read_wan_checkpoint


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


#: ``SkyReelsV2DiffusionForcingPipeline.__call__``'s defaults in diffusers (fps: its ``fps=24``);
#: ``SkyReelsV2Pipeline``'s are the same.
SKYREELS_V2_DF_DEFAULTS = CallDefaults(
    height=544, width=960, num_frames=97, num_inference_steps=50, guidance_scale=6.0, max_sequence_length=512, fps=24
)


def read_skyreels_v2_checkpoint(checkpoint: Checkpoint) -> WanInfo:
    """Read and cross-check a SkyReels-V2 folder's configs (Wan's components, this family's
    transformer config): text-to-video (in_channels = the VAE's z_dim) or image-to-video (2 z_dim
    + 4: the latents, the image's and its mask, with Wan2.1 I2V's CLIP image features).

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: a setting vidax does not implement, or components that do not fit together
            (two transformers or per-token timesteps: Wan2.2's, not SkyReels-V2's).
    """
    info = read_wan_checkpoint(
        checkpoint, transformer_config=SkyReelsV2TransformerConfig, defaults=SKYREELS_V2_DF_DEFAULTS
    )
    if len(info.transformers) != 1 or info.expand_timesteps:
        raise ConfigError(
            f"{checkpoint.source}: boundary_ratio / transformer_2 and expand_timesteps are Wan2.2's; a SkyReels-V2 "
            "checkpoint has one transformer taking one timestep per latent frame (set them to null and false)"
        )
    cfg = info.transformer_configs[0]
    fps = "with fps conditioning" if cfg.inject_sample_info else "no fps conditioning"
    task = "image-to-video" if info.tasks == ("i2v",) else "text-to-video"
    return dataclasses.replace(info, variant=f"SkyReels-V2 ({fps}): {task}")
