"""LTX-Video 0.9.x (Lightricks): the denoising transformer, the VAE and the latent upsampler.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs),
``transformer.py``, ``rope.py``, ``vae.py``, ``upsampler.py`` (model code only; ``upsampler.py``
also the latent-upsample pipeline's latent maths), ``convert.py`` (key rules, parameter axes,
precision policies and loaders), ``pipeline.py`` (LTXPipeline, LTXImageToVideoPipeline,
LTXConditionPipeline), ``upsample_pipeline.py`` (LTXLatentUpsamplePipeline).
"""

from vidax.registry import ComponentSpec, Family, PipelineSpec

FAMILY = Family(
    name="ltx",
    pipelines=(
        PipelineSpec("LTXPipeline", "vidax.models.ltx.pipeline:LTXPipeline"),
        PipelineSpec("LTXImageToVideoPipeline", "vidax.models.ltx.pipeline:LTXImageToVideoPipeline"),
        PipelineSpec("LTXConditionPipeline", "vidax.models.ltx.pipeline:LTXConditionPipeline"),
        PipelineSpec("LTXLatentUpsamplePipeline", "vidax.models.ltx.upsample_pipeline:LTXLatentUpsamplePipeline"),
    ),
    components=(
        ComponentSpec("LTXVideoTransformer3DModel", "transformer",
                      loader="vidax.models.ltx.convert:load_transformer",
                      options=("dtype", "mesh", "placement", "offload", "config", "defer"),
                      config="vidax.models.ltx.config:LTXTransformerConfig",
                      model="vidax.models.ltx.transformer:LTXVideoTransformer3DModel",
                      param_axes="vidax.models.ltx.convert:TRANSFORMER_PARAM_AXES",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "in_channels",
                                   "out_channels", "caption_channels", "cross_attention_dim"),
                      block_stacks=("transformer_blocks",)),
        ComponentSpec("AutoencoderKLLTXVideo", "vae", loader="vidax.models.ltx.convert:load_vae",
                      options=("dtype", "placement", "config", "defer"), config="vidax.models.ltx.config:LTXVAEConfig",
                      model="vidax.models.ltx.vae:LTXVideoVAE",
                      key_configs=("latent_channels", "block_out_channels", "down_block_types",
                                   "decoder_block_out_channels", "timestep_conditioning", "patch_size",
                                   "scaling_factor")),
        ComponentSpec("LTXLatentUpsamplerModel", "latent_upsampler",
                      loader="vidax.models.ltx.convert:load_latent_upsampler",
                      options=("dtype", "placement", "config", "defer"),
                      config="vidax.models.ltx.config:LTXLatentUpsamplerConfig",
                      model="vidax.models.ltx.upsampler:LTXLatentUpsamplerModel",
                      key_configs=("in_channels", "mid_channels", "num_blocks_per_stage", "dims",
                                   "spatial_upsample", "temporal_upsample")),
    ),
)
