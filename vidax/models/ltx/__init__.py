"""LTX-Video (Lightricks) 0.9.x: VAE (and, on their branches, transformer, latent upsampler, pipelines).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py``, ``vae.py`` (model
code only), ``convert.py`` (key rules, precision policies and loaders).
"""

from vidax.registry import ComponentSpec, Family

FAMILY = Family(
    name="ltx",
    pipelines=(),
    components=(
        ComponentSpec("AutoencoderKLLTXVideo", "vae", loader="vidax.models.ltx.convert:load_vae",
                      options=("dtype", "placement", "config"), config="vidax.models.ltx.config:LTXVAEConfig",
                      model="vidax.models.ltx.vae:LTXVideoVAE",
                      key_configs=("latent_channels", "block_out_channels", "down_block_types",
                                   "decoder_block_out_channels", "timestep_conditioning", "patch_size",
                                   "scaling_factor")),
    ),
)
