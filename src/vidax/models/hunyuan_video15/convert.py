"""Reading a HunyuanVideo 1.5 checkpoint's tensors: the tables the registry entries name
(``__init__.py``) for the one component loader (:mod:`vidax.weights.component`), under the names
every family's ``convert.py`` uses (``docs/adding_a_family.md``).

Transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES` (the keys map by the
default rule: ``transformer_blocks`` stacked, the refiner blocks a list, ``cond_type_embed.weight``
-> ``cond_type_embed/embedding``).

VAE: :data:`VAE_FP32_PARAMS` (the keys map by the default rule: ``...norm1.gamma`` ->
``.../norm1/gamma``, ``...conv1.conv.weight`` -> ``.../conv1/conv/kernel``).
"""

from __future__ import annotations

from vidax.models.hunyuan_video import convert as hunyuan_video
from vidax.models.wan import convert as wan

#: Parameters kept float32 under any dtype: the timestep MLPs (the model's, MeanFlow's and the
#: token refiner's; they run in float32) and the weights of every LayerNorm / RMSNorm (the
#: refiner's ``norm1``/``norm2``, the glyph and image projections' norms, the per-head q/k
#: RMSNorms). diffusers declares no ``_keep_in_fp32_modules`` for this model; these are vidax's
#: choice (see the transformer docstring).
TRANSFORMER_FP32_PARAMS = (
    r"(^|/)(timestep_embedder|timestep_embedder_r)(/|$)",
    r"(^|/)(norm|norm_in|norm_out|norm1|norm2|norm_q|norm_k|norm_added_q|norm_added_k)/(scale|bias)$",
)

#: Logical axes of the parameters (:mod:`vidax.parallel.rules`): the double-stream blocks are
#: HunyuanVideo 1.0's, with its table (its single-stream rows match nothing here): q/k/v and
#: FFN-in column-parallel, attention-out and FFN-out row-parallel, the modulation split by output
#: column; everything else (embedders, token refiner, projections, head) replicated.
TRANSFORMER_PARAM_AXES = hunyuan_video.TRANSFORMER_PARAM_AXES

#: VAE parameters kept float32 under any dtype: the RMS norms' ``gamma`` (the norms are Wan's,
#: :class:`vidax.models.wan.vae.WanRMS_norm`, and run in float32), with Wan's table.
VAE_FP32_PARAMS = wan.VAE_FP32_PARAMS
