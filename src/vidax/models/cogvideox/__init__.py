"""CogVideoX and CogVideoX1.5 (THUDM): transformer, 3D VAE, pipelines.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer and
VAE configs, whole-checkpoint reading), ``transformer.py``, ``vae.py`` (model code only),
``convert.py`` (key rules, parameter axes, fp32 parameters: the tables the registry entries name
for the one component loader) and ``pipeline.py`` (the pipeline hooks).
"""

from vidax.registry import Family, family_component, family_pipelines

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
                "num_attention_heads",
                "attention_head_dim",
                "in_channels",
                "out_channels",
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
                "latent_channels",
                "block_out_channels",
                "layers_per_block",
                "temporal_compression_ratio",
                "scaling_factor",
            ),
        ),
    ),
)
