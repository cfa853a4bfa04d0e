"""LTX-Video 0.9.x (Lightricks): the denoising transformer, the VAE and the latent upsampler.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs),
``transformer.py``, ``rope.py``, ``vae.py``, ``upsampler.py`` (model code only; ``upsampler.py``
also the latent-upsample pipeline's latent maths), ``convert.py`` (key rules, parameter axes, fp32
parameters: the tables the registry entries name for the one component loader), ``pipeline.py``
(LTXPipeline, LTXImageToVideoPipeline, LTXConditionPipeline), ``upsample_pipeline.py``
(LTXLatentUpsamplePipeline).
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
                      config="vidax.models.ltx.config:LTXTransformerConfig",
                      model="vidax.models.ltx.transformer:LTXVideoTransformer3DModel",
                      param_axes="vidax.models.ltx.convert:TRANSFORMER_PARAM_AXES",
                      fp32_params="vidax.models.ltx.convert:TRANSFORMER_FP32_PARAMS",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "in_channels",
                                   "out_channels", "caption_channels", "cross_attention_dim"),
                      block_stacks=("transformer_blocks",)),
        ComponentSpec("AutoencoderKLLTXVideo", "vae", config="vidax.models.ltx.config:LTXVAEConfig",
                      fp32_params="vidax.models.ltx.convert:VAE_FP32_PARAMS",
                      model="vidax.models.ltx.vae:LTXVideoVAE",
                      key_configs=("latent_channels", "block_out_channels", "down_block_types",
                                   "decoder_block_out_channels", "timestep_conditioning", "patch_size",
                                   "scaling_factor")),
        ComponentSpec("LTXLatentUpsamplerModel", "latent_upsampler",
                      config="vidax.models.ltx.config:LTXLatentUpsamplerConfig",
                      fp32_params="vidax.models.ltx.convert:UPSAMPLER_FP32_PARAMS",
                      model="vidax.models.ltx.upsampler:LTXLatentUpsamplerModel",
                      key_configs=("in_channels", "mid_channels", "num_blocks_per_stage", "dims",
                                   "spatial_upsample", "temporal_upsample")),
    ),
)
