"""LTX-Video 0.9.x (Lightricks): the denoising transformer, the VAE and the latent upsampler.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs),
``transformer.py``, ``rope.py``, ``vae.py``, ``upsampler.py`` (model code only; ``upsampler.py``
also the latent-upsample pipeline's latent maths), ``convert.py`` (key rules, parameter axes, fp32
parameters: the tables the registry entries name for the one component loader), ``pipeline.py``
(LTXPipeline, LTXImageToVideoPipeline, LTXConditionPipeline), ``upsample_pipeline.py``
(LTXLatentUpsamplePipeline).
"""

from vidax.registry import TRANSFORMER_SHAPE_KEYS, Family, PipelineSpec, family_component, family_pipelines

_PKG = "vidax.models.ltx"

#: The latent upsampler's config keys ``vidax inspect`` shows (LTX-2's add their own).
UPSAMPLER_KEY_CONFIGS = (
    "in_channels",
    "mid_channels",
    "num_blocks_per_stage",
    "dims",
    "spatial_upsample",
    "temporal_upsample",
)

FAMILY = Family(
    name="ltx",
    pipelines=(
        *family_pipelines(_PKG, "LTXPipeline", "LTXImageToVideoPipeline", "LTXConditionPipeline"),
        PipelineSpec("LTXLatentUpsamplePipeline", "vidax.models.ltx.upsample_pipeline:LTXLatentUpsamplePipeline"),
    ),
    components=(
        family_component(
            _PKG,
            "transformer",
            "LTXVideoTransformer3DModel",
            "transformer:LTXVideoTransformer3DModel",
            "LTXTransformerConfig",
            block_stacks=("transformer_blocks",),
            key_configs=(
                "num_layers",
                *TRANSFORMER_SHAPE_KEYS,
                "caption_channels",
                "cross_attention_dim",
            ),
        ),
        family_component(
            _PKG,
            "vae",
            "AutoencoderKLLTXVideo",
            "vae:LTXVideoVAE",
            "LTXVAEConfig",
            key_configs=(
                "latent_channels",
                "block_out_channels",
                "down_block_types",
                "decoder_block_out_channels",
                "timestep_conditioning",
                "patch_size",
                "scaling_factor",
            ),
        ),
        family_component(
            _PKG,
            "latent_upsampler",
            "LTXLatentUpsamplerModel",
            "upsampler:LTXLatentUpsamplerModel",
            "LTXLatentUpsamplerConfig",
            key_configs=UPSAMPLER_KEY_CONFIGS,
        ),
    ),
)
