"""HunyuanVideo 1.0 (Tencent, diffusers ``hunyuanvideo-community`` checkpoints).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the component
configs), ``vae.py`` (model code only) and ``convert.py`` (key rules, precision policies and
loaders). Registered so far: the VAE (``AutoencoderKLHunyuanVideo``).
"""

from vidax.registry import ComponentSpec, Family

FAMILY = Family(
    name="hunyuan_video",
    pipelines=(),
    components=(
        ComponentSpec("AutoencoderKLHunyuanVideo", "vae", loader="vidax.models.hunyuan_video.convert:load_vae",
                      options=("dtype", "placement", "config"),
                      config="vidax.models.hunyuan_video.config:HunyuanVideoVAEConfig",
                      model="vidax.models.hunyuan_video.vae:HunyuanVideoVAE",
                      key_configs=("latent_channels", "block_out_channels", "layers_per_block",
                                   "spatial_compression_ratio", "temporal_compression_ratio",
                                   "scaling_factor")),
    ),
)
