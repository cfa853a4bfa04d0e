"""The toy family's checkpoint tables, under the names every family's ``convert.py`` uses
(docs/adding_a_family.md): what its registry entry names for the one component loader. Its keys
map by the default rule (both block stacks stacked), so it has no key-rules function."""

#: Kept float32 under any dtype: the output projection.
TRANSFORMER_FP32_PARAMS = (r"^proj_out/",)

#: Logical axes on a mesh: the blocks' MLPs column- then row-parallel; everything else replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^(blocks|single_blocks)/fc1/kernel$", ("layers", "embed", "mlp")),
    (r"^(blocks|single_blocks)/fc1/bias$", ("layers", "mlp")),
    (r"^(blocks|single_blocks)/fc2/kernel$", ("layers", "mlp", "embed")),
)

#: The sound toy's audio decoder and vocoder: nothing kept float32 beyond their float32 default.
AUDIO_DECODER_FP32_PARAMS = ()
VOCODER_FP32_PARAMS = ()
