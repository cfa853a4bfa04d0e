"""Cosmos 3 (NVIDIA, omni: video with sound): the ``Cosmos3OmniTransformer`` Mixture-of-Transformers
(Nano / Super on Qwen3-VL, Edge on Nemotron dense), the ``Cosmos3AVAEAudioTokenizer`` sound
tokenizer (``sound_tokenizer``: sound latents -> 48 kHz stereo) and ``Cosmos3OmniPipeline`` (text-,
image- and video-to-video with the soundtrack).

Files (the layout of every family, ``docs/adding_a_family.md``): ``config.py`` (the configs),
``transformer.py``, ``sound_tokenizer.py`` (model code only), ``convert.py`` (parameter axes,
fp32 parameters), ``prompt.py`` (templates, token ids, positions), ``pipeline.py``. The VAE
(``AutoencoderKLWan``) is the Wan family's.
"""

import dataclasses

from vidax.registry import Family, PipelineSpec, family_component

_PKG = "vidax.models.cosmos3"

FAMILY = Family(
    name="cosmos3",
    # Cosmos3OmniDiffusersPipeline: the class name of the released Nano / Super model_index.json
    pipelines=(
        PipelineSpec("Cosmos3OmniPipeline", "vidax.models.cosmos3.pipeline:Cosmos3OmniPipeline"),
        PipelineSpec("Cosmos3OmniDiffusersPipeline", "vidax.models.cosmos3.pipeline:Cosmos3OmniPipeline"),
    ),
    components=(
        family_component(
            _PKG,
            "transformer",
            "Cosmos3OmniTransformer",
            "transformer:Cosmos3OmniTransformer",
            "Cosmos3TransformerConfig",
            block_stacks=("layers",),
            key_configs=(
                "num_hidden_layers",
                "hidden_size",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "hidden_act",
                "vocab_size",
                "sound_gen",
                "action_gen",
            ),
        ),
        # Loaded by its own planner: a checkpoint without encoder tensors is decoder-only (as diffusers).
        dataclasses.replace(
            family_component(
                _PKG,
                "audio_decoder",
                "Cosmos3AVAEAudioTokenizer",
                "sound_tokenizer:Cosmos3AVAEAudioTokenizer",
                "Cosmos3SoundTokenizerConfig",
                key_configs=(
                    "sampling_rate",
                    "vocoder_input_dim",
                    "dec_dim",
                    "dec_strides",
                    "dec_out_channels",
                    "enc_dim",
                    "enc_strides",
                    "encoder_enabled",
                ),
            ),
            loader=f"{_PKG}.convert:plan_sound_tokenizer",
        ),
    ),
)
