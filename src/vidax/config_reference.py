"""The settings each diffusers 0.42.1 component class that vidax runs takes in its config: the
parameters of its ``__init__`` (``register_to_config``), by the class name its ``config.json`` /
``scheduler_config.json`` gives as ``_class_name``.

diffusers builds a component from the keys of its config that its ``__init__`` takes and ignores
every other key with a warning ("... were passed to <class>, but are not expected and will be
ignored"). :meth:`vidax.config.ConfigBase.from_config_dict` does the same with the keys this table
does not list for the config's class (a newer diffusers' key, a note added by hand), and keeps
refusing a listed key vidax does not implement: diffusers would use it.

The same for the T5 text encoders transformers builds (:data:`TRANSFORMERS_CONFIG_KEYS`, by the
config's ``model_type``): transformers keeps an unknown key as an attribute its model never reads.

Generated from the installed diffusers and transformers; ``tests/test_checkpoint_errors.py``
checks they are current.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

#: diffusers class name -> the config keys its ``__init__`` takes (sorted, space-separated).
DIFFUSERS_CONFIG_KEYS: dict[str, str] = {
    "AutoencoderKLCogVideoX": "act_fn block_out_channels down_block_types force_upcast in_channels invert_scale_latents latent_channels latents_mean latents_std layers_per_block norm_eps norm_num_groups out_channels sample_height sample_width scaling_factor shift_factor temporal_compression_ratio up_block_types use_post_quant_conv use_quant_conv",
    "AutoencoderKLHunyuanVideo": "act_fn block_out_channels down_block_types in_channels latent_channels layers_per_block mid_block_add_attention norm_num_groups out_channels scaling_factor spatial_compression_ratio temporal_compression_ratio up_block_types",
    "AutoencoderKLHunyuanVideo15": "block_out_channels downsample_match_channel in_channels latent_channels layers_per_block out_channels scaling_factor spatial_compression_ratio temporal_compression_ratio upsample_match_channel",
    "AutoencoderKLLTX2Audio": "attn_resolutions base_channels causality_axis ch_mult double_z dropout in_channels is_causal latent_channels mel_bins mel_hop_length mid_block_add_attention norm_type num_res_blocks output_channels resolution sample_rate",
    "AutoencoderKLLTX2Video": "block_out_channels decoder_block_out_channels decoder_causal decoder_inject_noise decoder_layers_per_block decoder_spatial_padding_mode decoder_spatio_temporal_scaling down_block_types downsample_type encoder_causal encoder_spatial_padding_mode in_channels latent_channels layers_per_block out_channels patch_size patch_size_t resnet_norm_eps scaling_factor spatial_compression_ratio spatio_temporal_scaling temporal_compression_ratio timestep_conditioning upsample_factor upsample_residual upsample_type",
    "AutoencoderKLLTXVideo": "block_out_channels decoder_block_out_channels decoder_causal decoder_inject_noise decoder_layers_per_block decoder_spatio_temporal_scaling down_block_types downsample_type encoder_causal in_channels latent_channels layers_per_block out_channels patch_size patch_size_t resnet_norm_eps scaling_factor spatial_compression_ratio spatio_temporal_scaling temporal_compression_ratio timestep_conditioning upsample_factor upsample_residual",
    "AutoencoderKLWan": "attn_scales base_dim decoder_base_dim dim_mult dropout in_channels is_residual latents_mean latents_std num_res_blocks out_channels patch_size scale_factor_spatial scale_factor_temporal temperal_downsample z_dim",
    "CogVideoXDDIMScheduler": "beta_end beta_schedule beta_start clip_sample clip_sample_range num_train_timesteps prediction_type rescale_betas_zero_snr sample_max_value set_alpha_to_one snr_shift_scale steps_offset timestep_spacing trained_betas",
    "CogVideoXDPMScheduler": "beta_end beta_schedule beta_start clip_sample clip_sample_range num_train_timesteps prediction_type rescale_betas_zero_snr sample_max_value set_alpha_to_one snr_shift_scale steps_offset timestep_spacing trained_betas",
    "CogVideoXTransformer3DModel": "activation_fn attention_bias attention_head_dim dropout flip_sin_to_cos freq_shift in_channels max_text_seq_length norm_elementwise_affine norm_eps num_attention_heads num_layers ofs_embed_dim out_channels patch_bias patch_size patch_size_t sample_frames sample_height sample_width spatial_interpolation_scale temporal_compression_ratio temporal_interpolation_scale text_embed_dim time_embed_dim timestep_activation_fn use_learned_positional_embeddings use_rotary_positional_embeddings",
    "Cosmos3AVAEAudioTokenizer": "activation anti_aliasing bottleneck bottleneck_type causal dec_anti_aliasing dec_c_mults dec_dim dec_final_tanh dec_out_channels dec_strides dec_type dec_use_nearest_upsample dec_use_snake dec_use_tanh_at_final enc_c_mults enc_dim enc_hop_length enc_identity_init enc_intermediate_dim enc_latent_dim enc_n_fft enc_num_blocks enc_num_layers enc_strides enc_type enc_use_snake encoder_enabled hop_size input_channels latent_mean latent_std model_type normalize_volume padding_mode sampling_rate snake_logscale stereo use_cuda_kernel use_wav_as_input vocoder_input_dim",
    "Cosmos3OmniTransformer": "action_dim action_gen attention_bias attention_dropout base_fps dtype enable_fps_modulation head_dim hidden_act hidden_size intermediate_size latent_channel latent_patch_size num_attention_heads num_embodiment_domains num_hidden_layers num_key_value_heads patch_latent_dim qk_norm_for_text rms_norm_eps rope_axes_dim rope_scaling rope_theta sound_dim sound_gen sound_latent_fps timestep_scale unified_3d_mrope_reset_spatial_ids unified_3d_mrope_temporal_modality_margin use_und_k_norm_for_gen vocab_size",
    "CosmosTransformer3DModel": "adaln_lora_dim attention_head_dim concat_padding_mask controlnet_block_every_n crossattn_proj_in_channels encoder_hidden_states_channels extra_pos_embed_type img_context_dim_in img_context_dim_out img_context_num_tokens in_channels max_size mlp_ratio num_attention_heads num_layers out_channels patch_size rope_scale text_embed_dim use_crossattn_projection",
    "FlowMatchEulerDiscreteScheduler": "base_image_seq_len base_shift invert_sigmas max_image_seq_len max_shift num_train_timesteps shift shift_terminal stochastic_sampling time_shift_type use_beta_sigmas use_dynamic_shifting use_exponential_sigmas use_karras_sigmas",
    "HunyuanVideo15Transformer3DModel": "attention_head_dim image_embed_dim in_channels mlp_ratio num_attention_heads num_layers num_refiner_layers out_channels patch_size patch_size_t qk_norm rope_axes_dim rope_theta target_size task_type text_embed_2_dim text_embed_dim use_meanflow",
    "HunyuanVideoTransformer3DModel": "attention_head_dim guidance_embeds image_condition_type in_channels mlp_ratio num_attention_heads num_layers num_refiner_layers num_single_layers out_channels patch_size patch_size_t pooled_projection_dim qk_norm rope_axes_dim rope_theta text_embed_dim",
    "LTX2DurationHead": "audio_cross_attention_dim mlp_hidden_dim num_pooler_heads num_queries pooler_hidden_dim video_cross_attention_dim",
    "LTX2LatentUpsamplerModel": "dims in_channels mid_channels num_blocks_per_stage rational_spatial_scale spatial_upsample temporal_upsample use_rational_resampler",
    "LTX2TextConnectors": "audio_connector_attention_head_dim audio_connector_num_attention_heads audio_connector_num_layers audio_connector_num_learnable_registers audio_gated_attn audio_hidden_dim caption_channels causal_temporal_positioning connector_rope_base_seq_len per_modality_projections proj_bias rope_double_precision rope_theta rope_type text_proj_in_factor video_connector_attention_head_dim video_connector_num_attention_heads video_connector_num_layers video_connector_num_learnable_registers video_gated_attn video_hidden_dim",
    "LTX2VideoDiffusionDecoderModel": "decoder_head_dim decoder_model_output_type decoder_num_inference_steps decoder_stage5_kernel decoder_stage_channels decoder_stage_depths decoder_stage_kernels decoder_t_emb_dim decoder_timestep_scale_multiplier decoder_upsample_channel_reductions decoder_upsample_strides latent_channels out_channels patch_size scaling_factor spatial_compression_ratio temporal_compression_ratio",
    "LTX2VideoTransformer3DModel": "activation_fn attention_bias attention_head_dim attention_out_bias audio_attention_head_dim audio_cross_attention_dim audio_cross_attn_mod audio_ff_bias audio_gated_attn audio_hop_length audio_in_channels audio_num_attention_heads audio_out_channels audio_patch_size audio_patch_size_t audio_pos_embed_max_pos audio_sampling_rate audio_scale_factor base_height base_width caption_channels causal_offset cross_attention_dim cross_attn_mod cross_attn_timestep_scale_multiplier ff_bias gated_attn in_channels norm_elementwise_affine norm_eps num_attention_heads num_layers out_channels patch_size patch_size_t perturbed_attn pos_embed_max_pos qk_norm rope_double_precision rope_theta rope_type timestep_scale_multiplier use_keyframes_abs_pos_embedding use_prompt_adaln_single use_prompt_embeddings vae_scale_factors",
    "LTX2Vocoder": "act_fn antialias antialias_kernel_size antialias_ratio final_act_fn final_bias hidden_channels in_channels leaky_relu_negative_slope out_channels output_sampling_rate resnet_dilations resnet_kernel_sizes upsample_factors upsample_kernel_sizes",
    "LTX2VocoderWithBWE": "act_fn antialias antialias_kernel_size antialias_ratio bwe_act_fn bwe_antialias bwe_antialias_kernel_size bwe_antialias_ratio bwe_final_act_fn bwe_final_bias bwe_hidden_channels bwe_in_channels bwe_leaky_relu_negative_slope bwe_out_channels bwe_resnet_dilations bwe_resnet_kernel_sizes bwe_upsample_factors bwe_upsample_kernel_sizes filter_length final_act_fn final_bias hidden_channels hop_length in_channels input_sampling_rate leaky_relu_negative_slope num_mel_channels out_channels output_sampling_rate resnet_dilations resnet_kernel_sizes upsample_factors upsample_kernel_sizes window_length",
    "LTXLatentUpsamplerModel": "dims in_channels mid_channels num_blocks_per_stage spatial_upsample temporal_upsample",
    "LTXVideoTransformer3DModel": "activation_fn attention_bias attention_head_dim attention_out_bias caption_channels cross_attention_dim in_channels norm_elementwise_affine norm_eps num_attention_heads num_layers out_channels patch_size patch_size_t qk_norm",
    "SkyReelsV2Transformer3DModel": "added_kv_proj_dim attention_head_dim cross_attn_norm eps ffn_dim freq_dim image_dim in_channels inject_sample_info num_attention_heads num_frame_per_block num_layers out_channels patch_size pos_embed_seq_len qk_norm rope_max_seq_len text_dim",
    "UniPCMultistepScheduler": "beta_end beta_schedule beta_start disable_corrector dynamic_thresholding_ratio final_sigmas_type flow_shift lower_order_final num_train_timesteps predict_x0 prediction_type rescale_betas_zero_snr sample_max_value shift_terminal sigma_max sigma_min solver_order solver_p solver_type steps_offset thresholding time_shift_type timestep_spacing trained_betas use_beta_sigmas use_dynamic_shifting use_exponential_sigmas use_flow_sigmas use_karras_sigmas",
    "WanTransformer3DModel": "added_kv_proj_dim attention_head_dim cross_attn_norm eps ffn_dim freq_dim image_dim in_channels num_attention_heads num_layers out_channels patch_size pos_embed_seq_len qk_norm rope_max_seq_len text_dim",
}


#: The T5 text encoders' settings (Wan, CogVideoX, LTX-Video), by ``model_type``: what
#: transformers' config class takes plus the attributes its model reads beyond those
#: (``modeling_t5.py`` / ``modeling_umt5.py``: ``dense_act_fn``, ``is_gated_act`` ...). transformers
#: keeps any other key as an attribute its model never reads.
_T5_READ = (
    "dense_act_fn is_gated_act hidden_size num_labels scale_decoder_outputs tie_word_embeddings decoder_start_token_id"
)
TRANSFORMERS_CONFIG_KEYS: dict[str, str] = {
    "t5": "architectures chunk_size_feed_forward classifier_dropout d_ff d_kv d_model dropout_rate dtype eos_token_id feed_forward_proj id2label initializer_factor is_decoder is_encoder_decoder label2id layer_norm_epsilon num_decoder_layers num_heads num_layers output_hidden_states pad_token_id problem_type relative_attention_max_distance relative_attention_num_buckets return_dict transformers_version use_cache vocab_size "
    + _T5_READ,
    "umt5": "architectures chunk_size_feed_forward classifier_dropout d_ff d_kv d_model decoder_start_token_id dropout_rate dtype eos_token_id feed_forward_proj id2label initializer_factor is_decoder is_encoder_decoder label2id layer_norm_epsilon num_decoder_layers num_heads num_layers output_hidden_states pad_token_id problem_type relative_attention_max_distance relative_attention_num_buckets return_dict transformers_version use_cache vocab_size "
    + _T5_READ,
}


@lru_cache(maxsize=256)
def diffusers_config_keys(class_name: str) -> frozenset[str] | None:
    """The config keys diffusers' ``class_name`` takes, or None for a class the table does not hold."""
    keys = DIFFUSERS_CONFIG_KEYS.get(class_name)
    return None if keys is None else frozenset(keys.split())


def reference_config_keys(config: Any) -> tuple[str, frozenset[str]] | None:
    """``(the reference class in words, the keys it uses)`` of a config dict: the diffusers class
    its ``_class_name`` names, else the transformers T5 encoder its ``model_type`` names; None for
    a config of neither (vidax then refuses every key it does not know)."""
    name, model_type = config.get("_class_name"), config.get("model_type")
    if isinstance(name, str) and diffusers_config_keys(name) is not None:
        return f"diffusers' {name}", diffusers_config_keys(name)
    if isinstance(model_type, str) and model_type in TRANSFORMERS_CONFIG_KEYS:
        return f"transformers' {model_type} config", frozenset(TRANSFORMERS_CONFIG_KEYS[model_type].split())
    return None
