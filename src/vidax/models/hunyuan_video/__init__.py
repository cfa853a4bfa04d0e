"""HunyuanVideo 1.0 (Tencent; ``hunyuanvideo-community/HunyuanVideo``, ``-I2V``, ``-I2V-33ch``).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py``, ``transformer.py``,
``rope.py``, ``vae.py`` (model code only), ``convert.py`` (key rules, parameter axes, fp32
parameters: the tables the registry entries name for the one component loader) and ``pipeline.py``
(the T2V and I2V pipeline hooks).
"""

from vidax.registry import TRANSFORMER_SHAPE_KEYS, VAE_SHAPE_KEYS, Family, family_component, family_pipelines

_PKG = "vidax.models.hunyuan_video"

FAMILY = Family(
    name="hunyuan_video",
    pipelines=family_pipelines(_PKG, "HunyuanVideoPipeline", "HunyuanVideoImageToVideoPipeline"),
    components=(
        family_component(
            _PKG,
            "transformer",
            "HunyuanVideoTransformer3DModel",
            "transformer:HunyuanVideoTransformer3DModel",
            "HunyuanVideoTransformerConfig",
            block_stacks=("transformer_blocks", "single_transformer_blocks"),
            key_configs=(
                "num_layers",
                "num_single_layers",
                "num_refiner_layers",
                *TRANSFORMER_SHAPE_KEYS,
                "patch_size",
                "patch_size_t",
                "text_embed_dim",
                "guidance_embeds",
                "image_condition_type",
            ),
        ),
        family_component(
            _PKG,
            "vae",
            "AutoencoderKLHunyuanVideo",
            "vae:HunyuanVideoVAE",
            "HunyuanVideoVAEConfig",
            key_configs=(
                *VAE_SHAPE_KEYS,
                "spatial_compression_ratio",
                "temporal_compression_ratio",
                "scaling_factor",
            ),
        ),
    ),
)
