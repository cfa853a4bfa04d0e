"""CogVideoX and CogVideoX1.5 (THUDM): transformer, 3D VAE, pipelines.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer and
VAE configs, whole-checkpoint reading), ``transformer.py``, ``vae.py`` (model code only),
``convert.py`` (key rules, parameter axes, fp32 parameters: the tables the registry entries name
for the one component loader) and ``pipeline.py`` (the pipeline hooks).
"""

from vidax.registry import TRANSFORMER_SHAPE_KEYS, VAE_SHAPE_KEYS, Family, family_component, family_pipelines

_PKG = "vidax.models.cogvideox"

FAMILY = Family(
    name="cogvideox",
    pipelines=family_pipelines(_PKG, "CogVideoXPipeline", "CogVideoXImageToVideoPipeline"),
    components=(
        family_component(
            _PKG,
            "transformer",
            "CogVideoXTransformer3DModel",
            "transformer:CogVideoXTransformer3DModel",
            "CogVideoXTransformerConfig",
            block_stacks=("transformer_blocks",),
            key_configs=(
                "num_layers",
                *TRANSFORMER_SHAPE_KEYS,
                "patch_size",
                "patch_size_t",
                "use_rotary_positional_embeddings",
                "use_learned_positional_embeddings",
                "ofs_embed_dim",
                "sample_height",
                "sample_width",
                "sample_frames",
                "max_text_seq_length",
            ),
        ),
        family_component(
            _PKG,
            "vae",
            "AutoencoderKLCogVideoX",
            "vae:CogVideoXVAE",
            "CogVideoXVAEConfig",
            key_configs=(
                *VAE_SHAPE_KEYS,
                "temporal_compression_ratio",
                "scaling_factor",
            ),
        ),
    ),
)
