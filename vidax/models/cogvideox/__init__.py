"""CogVideoX and CogVideoX1.5 (THUDM): transformer, 3D VAE, pipelines.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer and
VAE configs, whole-checkpoint reading), ``transformer.py``, ``vae.py`` (model code only),
``convert.py`` (key rules, parameter axes, fp32 parameters: the tables the registry entries name
for the one component loader) and ``pipeline.py`` (the pipeline hooks).
"""

from vidax.registry import ComponentSpec, Family, PipelineSpec

_PIPE = "vidax.models.cogvideox.pipeline"

FAMILY = Family(
    name="cogvideox",
    pipelines=(
        PipelineSpec("CogVideoXPipeline", f"{_PIPE}:CogVideoXPipeline"),
        PipelineSpec("CogVideoXImageToVideoPipeline", f"{_PIPE}:CogVideoXImageToVideoPipeline"),
    ),
    components=(
        ComponentSpec("CogVideoXTransformer3DModel", "transformer",
                      config="vidax.models.cogvideox.config:CogVideoXTransformerConfig",
                      model="vidax.models.cogvideox.transformer:CogVideoXTransformer3DModel",
                      param_axes="vidax.models.cogvideox.convert:TRANSFORMER_PARAM_AXES",
                      fp32_params="vidax.models.cogvideox.convert:TRANSFORMER_FP32_PARAMS",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "in_channels",
                                   "out_channels", "patch_size", "patch_size_t", "use_rotary_positional_embeddings",
                                   "use_learned_positional_embeddings", "ofs_embed_dim", "sample_height",
                                   "sample_width", "sample_frames", "max_text_seq_length"),
                      block_stacks=("transformer_blocks",)),
        ComponentSpec("AutoencoderKLCogVideoX", "vae", config="vidax.models.cogvideox.config:CogVideoXVAEConfig",
                      fp32_params="vidax.models.cogvideox.convert:VAE_FP32_PARAMS",
                      model="vidax.models.cogvideox.vae:CogVideoXVAE",
                      key_configs=("latent_channels", "block_out_channels", "layers_per_block",
                                   "temporal_compression_ratio", "scaling_factor")),
    ),
)
