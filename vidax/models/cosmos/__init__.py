"""Cosmos-Predict2.5 (NVIDIA): the denoising transformer (``CosmosTransformer3DModel``).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer
config), ``transformer.py`` and ``rope.py`` (model code only) and ``convert.py`` (key rules,
parameter axes, precision policy and loader). The VAE of the checkpoints (``AutoencoderKLWan``)
is the Wan family's, registered there; the pipeline is not implemented yet.
"""

from vidax.registry import ComponentSpec, Family

FAMILY = Family(
    name="cosmos",
    pipelines=(),
    components=(
        ComponentSpec("CosmosTransformer3DModel", "transformer",
                      loader="vidax.models.cosmos.convert:load_transformer",
                      options=("dtype", "mesh", "placement", "offload", "config"),
                      config="vidax.models.cosmos.config:CosmosTransformerConfig",
                      model="vidax.models.cosmos.transformer:CosmosTransformer3DModel",
                      param_axes="vidax.models.cosmos.convert:TRANSFORMER_PARAM_AXES",
                      key_configs=("num_layers", "num_attention_heads", "attention_head_dim", "mlp_ratio",
                                   "in_channels", "out_channels", "patch_size", "text_embed_dim",
                                   "adaln_lora_dim", "use_crossattn_projection", "crossattn_proj_in_channels",
                                   "extra_pos_embed_type"),
                      block_stacks=("transformer_blocks",)),
    ),
)
