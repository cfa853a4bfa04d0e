"""HunyuanVideo 1.0 (Tencent; ``hunyuanvideo-community/HunyuanVideo``, ``-I2V``, ``-I2V-33ch``).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py``, ``transformer.py``,
``rope.py``, ``vae.py`` (model code only), ``convert.py`` (key rules, parameter axes, fp32
parameters: the tables the registry entries name for the one component loader) and ``pipeline.py``
(the T2V and I2V pipeline hooks).
"""

from vidax.registry import Family, family_component, family_pipelines

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
                "num_attention_heads",
                "attention_head_dim",
                "in_channels",
                "out_channels",
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
                "latent_channels",
                "block_out_channels",
                "layers_per_block",
                "spatial_compression_ratio",
                "temporal_compression_ratio",
                "scaling_factor",
            ),
        ),
    ),
)
