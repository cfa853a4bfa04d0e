"""LTX-2 / LTX-2.3 (Lightricks): video with its soundtrack.

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs; the
transformer's and connectors' in ``config_transformer.py``), ``transformer.py``, ``connectors.py``,
``rope.py`` (model code only), ``video_vae.py`` (``AutoencoderKLLTX2Video``: LTX-Video's VAE blocks
with LTX-2's settings), ``audio_vae.py`` (``AutoencoderKLLTX2Audio``: audio latents <-> mel
spectrograms), ``vocoder.py`` (``LTX2Vocoder``, LTX-2.3's ``LTX2VocoderWithBWE``: mel -> waveform),
``convert.py`` (the tables the registry entries name for the one component loader),
``duration_head.py`` (LTX-2.5's ``LTX2DurationHead``: clip length from the prompt), ``pipeline.py``
(``LTX2Pipeline``: text-to-video with its soundtrack), ``conditioning.py`` (the conditioning mask
and clean latents the next two share), ``pipeline_i2v.py`` (``LTX2ImageToVideoPipeline``),
``pipeline_condition.py`` (``LTX2ConditionPipeline``: image and video conditions at any latent
frame), ``upsampler.py`` (``LTX2LatentUpsamplerModel``: LTX-Video's upsampler with the rational
resampler), ``upsample_pipeline.py`` (``LTX2LatentUpsamplePipeline``), ``diffusion_decoder.py``
(LTX-2.5's ``LTX2VideoDiffusionDecoderModel``) and ``diffusion_decode.py`` (its
``LTX2VideoDiffusionDecodePipeline``, run on an LTX-2 pipeline's ``output_type="latent"``).
"""

from vidax.models.ltx import UPSAMPLER_KEY_CONFIGS
from vidax.registry import ComponentSpec, Family, PipelineSpec, family_component

_PKG = "vidax.models.ltx2"

FAMILY = Family(
    name="ltx2",
    pipelines=(
        PipelineSpec("LTX2Pipeline", "vidax.models.ltx2.pipeline:LTX2Pipeline"),
        PipelineSpec("LTX2ImageToVideoPipeline", "vidax.models.ltx2.pipeline_i2v:LTX2ImageToVideoPipeline"),
        PipelineSpec("LTX2ConditionPipeline", "vidax.models.ltx2.pipeline_condition:LTX2ConditionPipeline"),
        PipelineSpec("LTX2LatentUpsamplePipeline", "vidax.models.ltx2.upsample_pipeline:LTX2LatentUpsamplePipeline"),
        PipelineSpec(
            "LTX2VideoDiffusionDecodePipeline",
            "vidax.models.ltx2.diffusion_decode:LTX2VideoDiffusionDecodePipeline",
            generates=False,
        ),
    ),
    components=(
        family_component(
            _PKG,
            "transformer",
            "LTX2VideoTransformer3DModel",
            "transformer:LTX2VideoTransformer3DModel",
            "LTX2TransformerConfig",
            block_stacks=("transformer_blocks",),
            key_configs=(
                "num_layers",
                "num_attention_heads",
                "attention_head_dim",
                "audio_num_attention_heads",
                "audio_attention_head_dim",
                "in_channels",
                "audio_in_channels",
                "caption_channels",
                "gated_attn",
                "cross_attn_mod",
                "perturbed_attn",
                "rope_type",
            ),
        ),
        family_component(
            _PKG,
            "connectors",
            "LTX2TextConnectors",
            "connectors:LTX2TextConnectors",
            "LTX2ConnectorsConfig",
            key_rules="connectors_key_rules",
            key_configs=(
                "caption_channels",
                "text_proj_in_factor",
                "per_modality_projections",
                "video_connector_num_layers",
                "audio_connector_num_layers",
                "rope_type",
            ),
        ),
        family_component(
            _PKG,
            "vae",
            "AutoencoderKLLTX2Video",
            "video_vae:AutoencoderKLLTX2Video",
            "LTX2VideoVAEConfig",
            key_configs=(
                "latent_channels",
                "block_out_channels",
                "decoder_block_out_channels",
                "upsample_type",
                "decoder_spatial_padding_mode",
                "timestep_conditioning",
                "patch_size",
            ),
        ),
        family_component(
            _PKG,
            "audio_decoder",
            "AutoencoderKLLTX2Audio",
            "audio_vae:AutoencoderKLLTX2Audio",
            "LTX2AudioVAEConfig",
            key_configs=("latent_channels", "base_channels", "ch_mult", "mel_bins", "sample_rate", "mel_hop_length"),
        ),
        family_component(
            _PKG,
            "vocoder",
            "LTX2Vocoder",
            "vocoder:LTX2Vocoder",
            "LTX2VocoderConfig",
            key_configs=("hidden_channels", "upsample_factors", "act_fn", "output_sampling_rate"),
        ),
        family_component(
            _PKG,
            "latent_upsampler",
            "LTX2LatentUpsamplerModel",
            "upsampler:LTX2LatentUpsamplerModel",
            "LTX2LatentUpsamplerConfig",
            key_rules="UPSAMPLER_KEY_RULES",
            key_configs=(*UPSAMPLER_KEY_CONFIGS, "rational_spatial_scale", "use_rational_resampler"),
        ),
        family_component(
            _PKG,
            "vocoder",
            "LTX2VocoderWithBWE",
            "vocoder:LTX2VocoderWithBWE",
            "LTX2VocoderWithBWEConfig",
            key_configs=(
                "hidden_channels",
                "upsample_factors",
                "bwe_hidden_channels",
                "input_sampling_rate",
                "output_sampling_rate",
            ),
        ),
        family_component(
            _PKG,
            "diffusion_decoder",
            "LTX2VideoDiffusionDecoderModel",
            "diffusion_decoder:LTX2VideoDiffusionDecoderModel",
            "LTX2DiffusionDecoderConfig",
            key_configs=(
                "latent_channels",
                "patch_size",
                "decoder_stage_channels",
                "decoder_stage_depths",
                "decoder_stage5_kernel",
                "decoder_model_output_type",
                "decoder_num_inference_steps",
            ),
        ),
    )
    + tuple(  # LTX-2.5's duration head (diffusers' class; LTX2DurationHeadModel as a fixture names it)
        ComponentSpec(
            name,
            "duration_head",
            config=f"{_PKG}.duration_head:LTX2DurationHeadConfig",
            model=f"{_PKG}.duration_head:LTX2DurationHead",
            key_configs=("pooler_hidden_dim", "num_queries", "num_pooler_heads"),
        )
        for name in ("LTX2DurationHead", "LTX2DurationHeadModel")
    ),
)
