"""SkyReels-V2 (Skywork): the Wan2.1 architecture trained for diffusion forcing (per-frame noise
levels, block-causal attention, fps conditioning). Its transformer is here; the VAE, UMT5 and CLIP
are Wan's registered components.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer
config and the whole-checkpoint reading), ``transformer.py`` (model code only), ``convert.py`` (the
tables the registry entry names: Wan's), ``forcing.py`` (the diffusion-forcing schedule),
``pipeline.py`` (the pipeline hooks) and ``long_video.py`` (a long video's finished chunks: off the
device, decoded as each ends with ``on_chunk``).
"""

from vidax.models.wan import TRANSFORMER_KEY_CONFIGS
from vidax.registry import Family, family_component, family_pipelines

_PKG = "vidax.models.skyreels_v2"

FAMILY = Family(
    name="skyreels_v2",
    pipelines=family_pipelines(
        _PKG,
        "SkyReelsV2Pipeline",
        "SkyReelsV2ImageToVideoPipeline",
        "SkyReelsV2DiffusionForcingPipeline",
        "SkyReelsV2DiffusionForcingImageToVideoPipeline",
        "SkyReelsV2DiffusionForcingVideoToVideoPipeline",
    ),
    components=(
        family_component(
            _PKG,
            "transformer",
            "SkyReelsV2Transformer3DModel",
            "transformer:SkyReelsV2Transformer3DModel",
            "SkyReelsV2TransformerConfig",
            key_rules="transformer_key_rules",
            block_stacks=("blocks",),
            key_configs=(*TRANSFORMER_KEY_CONFIGS, "inject_sample_info"),
        ),
    ),
)
