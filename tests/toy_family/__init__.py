"""A toy family, registered from outside vidax (``VIDAX_FAMILIES=tests.toy_family``): the proof
that a new family is its folder plus one registry line (docs/adding_a_family.md).

Its folder has the layout of every family: ``config.py``, ``transformer.py`` (model code only),
``convert.py`` (the tables its registry entry names: fp32 parameters, parameter axes),
``pipeline.py``. It reuses the Wan VAE, the UMT5 encoder and UniPC through the registry and brings
its own transformer (``ToyTransformer3DModel``: per-token linear in, two stacks of MLP blocks
conditioned on the timestep and the mean text embedding, linear out).

``ToySoundPipeline`` is the family's video-with-sound variant (the proof that a family with a
second latent stream and sound plugs in): ``ToySoundTransformer3DModel`` denoises video and
audio tokens together (joint attention), ``ToyAudioVAE`` decodes the audio latents to a mel
spectrogram and ``ToyVocoder`` that to a waveform at its declared sample rate.
"""

from vidax.registry import Family, PipelineSpec, family_component

_PKG = "tests.toy_family"

FAMILY = Family(
    name="toy",
    pipelines=(
        PipelineSpec("ToyVideoPipeline", "tests.toy_family.pipeline:ToyVideoPipeline"),
        PipelineSpec("ToySoundPipeline", "tests.toy_family.pipeline:ToySoundPipeline"),
    ),
    components=(
        family_component(
            _PKG,
            "transformer",
            "ToyTransformer3DModel",
            "transformer:ToyTransformer3DModel",
            "ToyConfig",
            block_stacks=("blocks", "single_blocks"),
            key_configs=("num_layers", "num_single_layers", "dim", "in_channels"),
        ),
        family_component(
            _PKG,
            "transformer",
            "ToySoundTransformer3DModel",
            "sound_transformer:ToySoundTransformer3DModel",
            "ToySoundConfig",
            block_stacks=("blocks",),
            key_configs=("num_layers", "dim"),
        ),
        family_component(
            _PKG,
            "audio_decoder",
            "ToyAudioVAE",
            "audio:ToyAudioVAE",
            "ToyAudioVAEConfig",
            key_configs=("latent_channels", "mel_bins"),
        ),
        family_component(
            _PKG, "vocoder", "ToyVocoder", "audio:ToyVocoder", "ToyVocoderConfig", key_configs=("output_sampling_rate",)
        ),
    ),
)
