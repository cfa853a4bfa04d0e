"""Cosmos-Predict2.5 (NVIDIA): text/image/video-to-world (``Cosmos2_5_PredictBasePipeline``).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the transformer
config and the checkpoint reading), ``transformer.py`` and ``rope.py`` (model code only),
``convert.py`` (key rules, parameter axes, fp32 parameters: the tables the registry entries name
for the one component loader) and ``pipeline.py``. The VAE of the checkpoints
(``AutoencoderKLWan``) is the Wan family's, the Qwen2.5-VL text tower is ``vidax.encoders``', both
registered there. No safety checker is run or downloaded.
"""

from vidax.registry import Family, PipelineSpec, family_component

_PKG = "vidax.models.cosmos"

FAMILY = Family(
    name="cosmos",
    pipelines=(PipelineSpec("Cosmos2_5_PredictBasePipeline", "vidax.models.cosmos.pipeline:CosmosPredictPipeline"),),
    components=(
        family_component(
            _PKG,
            "transformer",
            "CosmosTransformer3DModel",
            "transformer:CosmosTransformer3DModel",
            "CosmosTransformerConfig",
            block_stacks=("transformer_blocks",),
            key_configs=(
                "num_layers",
                "num_attention_heads",
                "attention_head_dim",
                "mlp_ratio",
                "in_channels",
                "out_channels",
                "patch_size",
                "text_embed_dim",
                "adaln_lora_dim",
                "use_crossattn_projection",
                "crossattn_proj_in_channels",
                "extra_pos_embed_type",
            ),
        ),
    ),
)
