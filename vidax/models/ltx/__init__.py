"""LTX-Video (Lightricks): the latent upsampler so far (transformer, VAE and pipelines follow).

Files as every family (``docs/adding_a_family.md``): ``config.py`` (component configs),
``upsampler.py`` (model code and the latent-upsample pipeline's latent maths), ``convert.py``
(key rules, precision policies, loaders).
"""

from vidax.registry import ComponentSpec, Family

FAMILY = Family(
    name="ltx",
    pipelines=(),
    components=(
        ComponentSpec("LTXLatentUpsamplerModel", "latent_upsampler",
                      loader="vidax.models.ltx.convert:load_latent_upsampler",
                      options=("dtype", "placement", "config"),
                      config="vidax.models.ltx.config:LTXLatentUpsamplerConfig",
                      model="vidax.models.ltx.upsampler:LTXLatentUpsamplerModel",
                      key_configs=("in_channels", "mid_channels", "num_blocks_per_stage", "dims",
                                   "spatial_upsample", "temporal_upsample")),
    ),
)
