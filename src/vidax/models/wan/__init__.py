"""Wan2.1 / Wan2.2 (Wan-AI): transformer, 3D VAE (also Cosmos's), pipelines.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer and
VAE configs, whole-checkpoint reading), ``transformer.py``, ``rope.py``, ``vae.py`` (model code
only), ``convert.py`` (key rules, parameter axes, fp32 parameters: the tables the registry entries
name for the one component loader) and ``pipeline.py`` (the pipeline hooks).
"""

from vidax.registry import TRANSFORMER_SHAPE_KEYS, Family, family_component, family_pipelines

_PKG = "vidax.models.wan"

#: The transformer config keys ``vidax inspect`` shows (SkyReels-V2's add their own).
TRANSFORMER_KEY_CONFIGS = ("num_layers", *TRANSFORMER_SHAPE_KEYS, "ffn_dim", "patch_size", "text_dim", "image_dim")

FAMILY = Family(
    name="wan",
    pipelines=family_pipelines(_PKG, "WanPipeline", "WanImageToVideoPipeline"),
    components=(
        family_component(
            _PKG,
            "transformer",
            "WanTransformer3DModel",
            "transformer:WanTransformer3DModel",
            "WanTransformerConfig",
            key_rules="transformer_key_rules",
            block_stacks=("blocks",),
            key_configs=TRANSFORMER_KEY_CONFIGS,
        ),
        family_component(
            _PKG,
            "vae",
            "AutoencoderKLWan",
            "vae:WanVAE",
            "WanVAEConfig",
            key_configs=(
                "base_dim",
                "z_dim",
                "dim_mult",
                "num_res_blocks",
                "temperal_downsample",
                "is_residual",
                "patch_size",
            ),
        ),
    ),
)
