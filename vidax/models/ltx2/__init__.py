"""LTX-2 and LTX-2.3 (Lightricks): the audio-video denoising transformer and the text connectors.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs; the
transformer's and connectors' in ``config_transformer.py``), ``transformer.py``, ``connectors.py``,
``rope.py`` (model code only), ``convert.py`` (the tables the registry entries name for the one
component loader). The pipelines are assembled elsewhere (issue 21).
"""

from vidax.registry import Family, family_component

_PKG = "vidax.models.ltx2"

FAMILY = Family(
    name="ltx2",
    components=(
        family_component(_PKG, "transformer", "LTX2VideoTransformer3DModel",
                         "transformer:LTX2VideoTransformer3DModel", "LTX2TransformerConfig",
                         block_stacks=("transformer_blocks",),
                         key_configs=("num_layers", "num_attention_heads", "attention_head_dim",
                                      "audio_num_attention_heads", "audio_attention_head_dim", "in_channels",
                                      "audio_in_channels", "caption_channels", "gated_attn", "cross_attn_mod",
                                      "perturbed_attn", "rope_type")),
        family_component(_PKG, "connectors", "LTX2TextConnectors", "connectors:LTX2TextConnectors",
                         "LTX2ConnectorsConfig", key_rules="connectors_key_rules",
                         key_configs=("caption_channels", "text_proj_in_factor", "per_modality_projections",
                                      "video_connector_num_layers", "audio_connector_num_layers", "rope_type")),
    ),
)
