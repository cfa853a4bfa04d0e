"""A toy family, registered from outside vidax (``VIDAX_FAMILIES=tests.toy_family``): the proof
that a new family is its folder plus one registry line (docs/adding_a_family.md).

Its folder has the layout of every family: ``config.py``, ``transformer.py`` (model code only),
``convert.py`` (the tables its registry entry names: fp32 parameters, parameter axes),
``pipeline.py``. It reuses the Wan VAE, the UMT5 encoder and UniPC through the registry and brings
its own transformer (``ToyTransformer3DModel``: per-token linear in, two stacks of MLP blocks
conditioned on the timestep and the mean text embedding, linear out).
"""

from vidax.registry import Family, PipelineSpec, family_component

_PKG = "tests.toy_family"

FAMILY = Family(
    name="toy",
    pipelines=(PipelineSpec("ToyVideoPipeline", "tests.toy_family.pipeline:ToyVideoPipeline"),),
    components=(
        family_component(_PKG, "transformer", "ToyTransformer3DModel", "transformer:ToyTransformer3DModel", "ToyConfig",
                         block_stacks=("blocks", "single_blocks"),
                         key_configs=("num_layers", "num_single_layers", "dim", "in_channels")),
    ),
)
