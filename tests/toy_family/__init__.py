"""A toy family, registered from outside vidax (``VIDAX_FAMILIES=tests.toy_family``): the proof
that a new family is its folder plus one registry line (docs/adding_a_family.md).

Its folder has the layout of every family: ``config.py``, ``transformer.py`` (model code only),
``convert.py`` (the tables its registry entry names: fp32 parameters, parameter axes),
``pipeline.py``. It reuses the Wan VAE, the UMT5 encoder and UniPC through the registry and brings
its own transformer (``ToyTransformer3DModel``: per-token linear in, two stacks of MLP blocks
conditioned on the timestep and the mean text embedding, linear out).
"""

from vidax.registry import ComponentSpec, Family, PipelineSpec

FAMILY = Family(
    name="toy",
    pipelines=(PipelineSpec("ToyVideoPipeline", "tests.toy_family.pipeline:ToyVideoPipeline"),),
    components=(
        ComponentSpec("ToyTransformer3DModel", "transformer", config="tests.toy_family.config:ToyConfig",
                      model="tests.toy_family.transformer:ToyTransformer3DModel",
                      param_axes="tests.toy_family.convert:TRANSFORMER_PARAM_AXES",
                      fp32_params="tests.toy_family.convert:TRANSFORMER_FP32_PARAMS",
                      key_configs=("num_layers", "num_single_layers", "dim", "in_channels"),
                      block_stacks=("blocks", "single_blocks")),
    ),
)
