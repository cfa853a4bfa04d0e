"""HunyuanVideo's original repository's module names that diffusers renames, where more than one
of vidax's readers needs them: a single-file checkpoint's keys
(:data:`vidax.models.hunyuan_video.convert.SINGLE_FILE_RENAMES`) and a LoRA's module names
(:data:`vidax.lora.targets.ORIGINAL_NAMES`). Data only: it imports nothing."""

#: The original repository's names of the timestep, guidance and pooled-text embedders ->
#: diffusers' (a single file's renames and the LoRA converter's,
#: :data:`vidax.lora.targets.ORIGINAL_NAMES`).
ORIGINAL_EMBEDDER_NAMES = {
    "time_in.mlp.0": "time_text_embed.timestep_embedder.linear_1",
    "time_in.mlp.2": "time_text_embed.timestep_embedder.linear_2",
    "guidance_in.mlp.0": "time_text_embed.guidance_embedder.linear_1",
    "guidance_in.mlp.2": "time_text_embed.guidance_embedder.linear_2",
    "vector_in.in_layer": "time_text_embed.text_embedder.linear_1",
    "vector_in.out_layer": "time_text_embed.text_embedder.linear_2",
}
