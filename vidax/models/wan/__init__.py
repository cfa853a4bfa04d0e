"""Wan2.1 / Wan2.2 (Wan-AI): transformer, 3D VAE (also Cosmos's), pipelines.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer and
VAE configs, whole-checkpoint reading), ``transformer.py``, ``rope.py``, ``vae.py`` (model code
only), ``convert.py`` (key rules, parameter axes, precision policies and loaders) and
``pipeline.py`` (the pipeline hooks).
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
                      loader="vidax.models.wan.convert:load_transformer",
                      options=("dtype", "mesh", "placement", "offload", "config", "defer"),
                      config="vidax.models.wan.config:WanTransformerConfig",
                      model="vidax.models.wan.transformer:WanTransformer3DModel",
                      param_axes="vidax.models.wan.convert:TRANSFORMER_PARAM_AXES",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "ffn_dim",
                                   "in_channels", "out_channels", "patch_size", "text_dim", "image_dim"),
                      block_stacks=("blocks",)),
        ComponentSpec("AutoencoderKLWan", "vae", loader="vidax.models.wan.convert:load_vae",
                      options=("dtype", "placement", "config", "defer"), config="vidax.models.wan.config:WanVAEConfig",
                      model="vidax.models.wan.vae:WanVAE",
                      key_configs=("base_dim", "z_dim", "dim_mult", "num_res_blocks", "temperal_downsample",
                                   "is_residual", "patch_size")),
    ),
)
