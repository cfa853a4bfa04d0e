"""Text and image encoders shared by the families (registered once, loaded by any pipeline)."""

from vidax.registry import ComponentSpec, Family

_T5_KEYS = ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size")
_LM_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size")
_LM = "vidax.encoders.decoder_lm:"

FAMILY = Family(
    name="encoders",
    components=tuple(
        ComponentSpec(name, "text_encoder", loader="vidax.encoders.t5:load_t5_encoder",
                      options=("dtype", "mesh", "placement", "defer"), config="vidax.encoders.t5:T5EncoderConfig",
                      model="vidax.encoders.t5:T5Encoder", param_axes="vidax.encoders.t5:T5_PARAM_AXES",
                      key_configs=_T5_KEYS)
        for name in ("UMT5EncoderModel", "T5EncoderModel")
    ) + (
        ComponentSpec("CLIPVisionModel", "image_encoder", loader="vidax.encoders.clip:load_clip_vision",
                      options=("dtype", "placement", "defer"), config="vidax.encoders.clip:CLIPVisionConfig",
                      model="vidax.encoders.clip:CLIPVisionEncoder",
                      key_configs=("hidden_size", "num_hidden_layers", "num_attention_heads", "image_size",
                                   "patch_size")),
        ComponentSpec("CLIPTextModel", "text_encoder", loader="vidax.encoders.clip:load_clip_text",
                      options=("dtype", "mesh", "placement", "defer"), config="vidax.encoders.clip:CLIPTextConfig",
                      model="vidax.encoders.clip:CLIPTextEncoder", param_axes="vidax.encoders.clip:CLIP_PARAM_AXES",
                      key_configs=("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                   "max_position_embeddings", "eos_token_id")),
        ComponentSpec("CLIPImageProcessor", "image_processor"),
        # Decoder-only LMs run as text encoders (hidden states, no LM head).
        ComponentSpec("LlamaModel", "text_encoder", loader=_LM + "load_llama_text_encoder",
                      options=("dtype", "mesh", "placement", "defer"), config=_LM + "LlamaTextConfig",
                      model=_LM + "DecoderLM", param_axes=_LM + "DECODER_LM_PARAM_AXES", key_configs=_LM_KEYS),
        # The whole LLaVA (HunyuanVideo-I2V's text_encoder): its Llama language model and its
        # vision tower + projector, both from the one folder.
        ComponentSpec("LlavaForConditionalGeneration", "text_encoder",
                      loader="vidax.encoders.llava:load_llava_text_encoder", options=("dtype", "mesh", "placement", "defer"),
                      config="vidax.encoders.llava:LlavaTextEncoderConfig",
                      model="vidax.encoders.llava:LlavaTextEncoder",
                      param_axes="vidax.encoders.llava:LLAVA_TEXT_PARAM_AXES",
                      key_configs=("image_token_index", "vision_feature_layer", "vision_feature_select_strategy")),
        # Its text tower only (the vision tower's tensors are declared unused by the key rules).
        ComponentSpec("Qwen2_5_VLForConditionalGeneration", "text_encoder",
                      loader=_LM + "load_qwen25vl_text_encoder", options=("dtype", "mesh", "placement", "defer"),
                      config=_LM + "Qwen25VLTextConfig", model=_LM + "DecoderLM",
                      param_axes=_LM + "DECODER_LM_PARAM_AXES", key_configs=_LM_KEYS),
    ) + tuple(ComponentSpec(name, "tokenizer")
              for name in ("T5TokenizerFast", "T5Tokenizer", "CLIPTokenizer", "CLIPTokenizerFast",
                           "LlamaTokenizerFast")),
)
