"""Wan2.1 / Wan2.2 (Wan-AI): transformer, 3D VAE (also Cosmos's), pipelines.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer and
VAE configs, whole-checkpoint reading), ``transformer.py``, ``rope.py``, ``vae.py`` (model code
only), ``convert.py`` (key rules, parameter axes, fp32 parameters: the tables the registry entries
name for the one component loader) and ``pipeline.py`` (the pipeline hooks).
"""

from vidax.registry import ComponentSpec, Family, PipelineSpec

_PIPE = "vidax.models.wan.pipeline"

FAMILY = Family(
    name="wan",
    pipelines=(
        PipelineSpec("WanPipeline", f"{_PIPE}:WanPipeline"),
        PipelineSpec("WanImageToVideoPipeline", f"{_PIPE}:WanImageToVideoPipeline"),
    ),
    components=(
        ComponentSpec("WanTransformer3DModel", "transformer",
                      config="vidax.models.wan.config:WanTransformerConfig",
                      model="vidax.models.wan.transformer:WanTransformer3DModel",
                      param_axes="vidax.models.wan.convert:TRANSFORMER_PARAM_AXES",
                      key_rules="vidax.models.wan.convert:transformer_key_rules",
                      fp32_params="vidax.models.wan.convert:TRANSFORMER_FP32_PARAMS",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "ffn_dim",
                                   "in_channels", "out_channels", "patch_size", "text_dim", "image_dim"),
                      block_stacks=("blocks",)),
        ComponentSpec("AutoencoderKLWan", "vae", config="vidax.models.wan.config:WanVAEConfig",
                      fp32_params="vidax.models.wan.convert:VAE_FP32_PARAMS",
                      model="vidax.models.wan.vae:WanVAE",
                      key_configs=("base_dim", "z_dim", "dim_mult", "num_res_blocks", "temperal_downsample",
                                   "is_residual", "patch_size")),
    ),
)
