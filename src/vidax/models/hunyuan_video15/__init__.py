"""HunyuanVideo 1.5 (Tencent; ``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-*``: 480p and
720p, T2V and I2V, CFG-distilled and step-distilled).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py``, ``transformer.py``
(model code only; its double-stream blocks, token refiner and RoPE are HunyuanVideo 1.0's),
``vae.py`` (its causal convs and frame-causal attention are HunyuanVideo 1.0's, its norms Wan's) and
``convert.py`` (fp32 parameters and parameter axes: the tables the registry entries name for the
one component loader) and ``pipeline.py`` (the text-to-video and image-to-video pipeline hooks).
"""

from vidax.registry import TRANSFORMER_SHAPE_KEYS, VAE_SHAPE_KEYS, Family, family_component, family_pipelines

_PKG = "vidax.models.hunyuan_video15"

FAMILY = Family(
    name="hunyuan_video15",
    pipelines=family_pipelines(_PKG, "HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"),
    components=(
        family_component(
            _PKG,
            "transformer",
            "HunyuanVideo15Transformer3DModel",
            "transformer:HunyuanVideo15Transformer3DModel",
            "HunyuanVideo15TransformerConfig",
            block_stacks=("transformer_blocks",),
            key_configs=(
                "num_layers",
                "num_refiner_layers",
                *TRANSFORMER_SHAPE_KEYS,
                "patch_size",
                "patch_size_t",
                "text_embed_dim",
                "text_embed_2_dim",
                "image_embed_dim",
                "use_meanflow",
            ),
        ),
        family_component(
            _PKG,
            "vae",
            "AutoencoderKLHunyuanVideo15",
            "vae:HunyuanVideo15VAE",
            "HunyuanVideo15VAEConfig",
            key_configs=(
                *VAE_SHAPE_KEYS,
                "spatial_compression_ratio",
                "temporal_compression_ratio",
                "scaling_factor",
            ),
        ),
    ),
)
