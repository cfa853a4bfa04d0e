"""Text and image encoders shared by the families (registered once, loaded by any pipeline).

Each weighted entry names its config, model, key rules and parameter axes for the one component
loader (:mod:`vidax.weights.component`); every encoder parameter follows the load dtype
(transformers keeps none of these modules in fp32 for a float32 / bfloat16 load).
"""

from vidax.registry import ComponentSpec, Family

_T5 = "vidax.encoders.t5:"
_CLIP = "vidax.encoders.clip:"
_SIGLIP = "vidax.encoders.siglip:"
_LM = "vidax.encoders.decoder_lm:"
_LM_CONFIG = "vidax.encoders.decoder_lm_config:"
_LLAVA = "vidax.encoders.llava:"
_GEMMA3 = "vidax.encoders.gemma3:"
_GEMMA4 = "vidax.encoders.gemma4:"
_T5_KEYS = ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size")
_LM_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size")


def _decoder_lm(name: str, config: str) -> ComponentSpec:
    """The entry of text encoder ``name`` run by :class:`~vidax.encoders.decoder_lm.DecoderLM`
    (a decoder-only LM's hidden states, no LM head) with the config class ``config``."""
    return ComponentSpec(
        name,
        "text_encoder",
        config=config,
        model=_LM + "DecoderLM",
        key_rules=_LM + "decoder_lm_key_rules",
        param_axes=_LM + "DECODER_LM_PARAM_AXES",
        key_configs=_LM_KEYS,
    )


FAMILY = Family(
    name="encoders",
    components=tuple(
        ComponentSpec(
            name,
            "text_encoder",
            config=_T5 + "T5EncoderConfig",
            model=_T5 + "T5Encoder",
            key_rules=_T5 + "t5_key_rules",
            param_axes=_T5 + "T5_PARAM_AXES",
            key_configs=_T5_KEYS,
        )
        for name in ("UMT5EncoderModel", "T5EncoderModel")
    )
    + (
        # CLIPVisionModelWithProjection (SkyReels-V2 I2V): the same tower, its visual_projection
        # not read (the pipelines run hidden states).
        *(
            ComponentSpec(
                name,
                "image_encoder",
                config=_CLIP + "CLIPVisionConfig",
                model=_CLIP + "CLIPVisionEncoder",
                key_rules=_CLIP + rules,
                key_configs=("hidden_size", "num_hidden_layers", "num_attention_heads", "image_size", "patch_size"),
            )
            for name, rules in (
                ("CLIPVisionModel", "clip_vision_key_rules"),
                ("CLIPVisionModelWithProjection", "clip_vision_projection_key_rules"),
            )
        ),
        ComponentSpec(
            "CLIPTextModel",
            "text_encoder",
            config=_CLIP + "CLIPTextConfig",
            model=_CLIP + "CLIPTextEncoder",
            key_rules=_CLIP + "clip_text_key_rules",
            param_axes=_CLIP + "CLIP_PARAM_AXES",
            key_configs=(
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "vocab_size",
                "max_position_embeddings",
                "eos_token_id",
            ),
        ),
        ComponentSpec("CLIPImageProcessor", "image_processor"),
        ComponentSpec("CLIPProcessor", "image_processor"),  # its image processor's config is read
        # HunyuanVideo 1.5's image_encoder (FLUX.1-Redux-dev's so400m tower) and its processor.
        ComponentSpec(
            "SiglipVisionModel",
            "image_encoder",
            config=_SIGLIP + "SiglipVisionConfig",
            model=_SIGLIP + "SiglipVisionEncoder",
            key_rules=_SIGLIP + "siglip_vision_key_rules",
            param_axes=_SIGLIP + "SIGLIP_PARAM_AXES",
            key_configs=("hidden_size", "num_hidden_layers", "num_attention_heads", "image_size", "patch_size"),
        ),
        ComponentSpec("SiglipImageProcessor", "image_processor"),
        # Decoder-only LMs run as text encoders (hidden states, no LM head).
        _decoder_lm("LlamaModel", _LM_CONFIG + "LlamaTextConfig"),
        # The whole LLaVA (HunyuanVideo-I2V's text_encoder): its Llama language model and its
        # vision tower + projector, two plans of the one loader on the one folder.
        ComponentSpec(
            "LlavaForConditionalGeneration",
            "text_encoder",
            config=_LLAVA + "LlavaTextEncoderConfig",
            model=_LLAVA + "LlavaTextEncoder",
            loader=_LLAVA + "load_llava_text_encoder",
            param_axes=_LLAVA + "LLAVA_TEXT_PARAM_AXES",
            key_configs=("image_token_index", "vision_feature_layer", "vision_feature_select_strategy"),
        ),
        # Its text tower only (the vision tower's tensors are declared unused by the key rules).
        _decoder_lm("Qwen2_5_VLForConditionalGeneration", _LM_CONFIG + "Qwen25VLTextConfig"),
        # HunyuanVideo 1.5's text_encoder: the text tower saved on its own.
        _decoder_lm("Qwen2_5_VLTextModel", _LM_CONFIG + "Qwen25VLTextConfig"),
        # LTX-2's Gemma 3: its language model only (vision tower and projector declared unused).
        _decoder_lm("Gemma3ForConditionalGeneration", _GEMMA3 + "Gemma3TextConfig"),
        # LTX-2.5's Gemma 4 (unified): its language model only (the image / audio embedders unused).
        ComponentSpec(
            "Gemma4UnifiedForConditionalGeneration",
            "text_encoder",
            config=_GEMMA4 + "Gemma4TextConfig",
            model=_GEMMA4 + "Gemma4TextEncoder",
            key_rules=_GEMMA4 + "gemma4_key_rules",
            param_axes=_GEMMA4 + "GEMMA4_PARAM_AXES",
            key_configs=_LM_KEYS,
        ),
    )
    + tuple(
        ComponentSpec(name, "tokenizer")
        for name in (
            "T5TokenizerFast",
            "T5Tokenizer",
            "CLIPTokenizer",
            "CLIPTokenizerFast",
            "LlamaTokenizerFast",
            "GemmaTokenizerFast",
            "GemmaTokenizer",
            "Qwen2Tokenizer",
            "Qwen2TokenizerFast",
            "ByT5Tokenizer",
        )
    ),
)
