"""LTX-Video 0.9.x (Lightricks): the denoising transformer (VAE, latent upsampler and pipelines
are added by their own parts).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs),
``transformer.py``, ``rope.py`` (model code only), ``convert.py`` (key rules, parameter axes,
precision policies and loaders).
"""

from vidax.registry import ComponentSpec, Family

FAMILY = Family(
    name="ltx",
    pipelines=(),
    components=(
        ComponentSpec("LTXVideoTransformer3DModel", "transformer",
                      loader="vidax.models.ltx.convert:load_transformer",
                      options=("dtype", "mesh", "placement", "offload", "config"),
                      config="vidax.models.ltx.config:LTXTransformerConfig",
                      model="vidax.models.ltx.transformer:LTXVideoTransformer3DModel",
                      param_axes="vidax.models.ltx.convert:TRANSFORMER_PARAM_AXES",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "in_channels",
                                   "out_channels", "caption_channels", "cross_attention_dim"),
                      block_stacks=("transformer_blocks",)),
    ),
)
