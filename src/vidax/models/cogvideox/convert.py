"""Reading a CogVideoX checkpoint's tensors: the tables the registry entries name (``__init__.py``)
for the one component loader (:mod:`vidax.weights.component`), under the names every family's
``convert.py`` uses (``docs/adding_a_family.md``):

* transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES` (its keys map by
  the default rule, ``transformer_blocks`` stacked);
* VAE: :data:`VAE_FP32_PARAMS` (its keys map by the default rule: the module tree mirrors the
  reference's).
"""

from __future__ import annotations

from vidax.parallel.rules import column_parallel, row_parallel

# ---------------------------------------------------------------------------------------------
# Transformer

#: Parameters kept float32 under any dtype: the timestep / ofs MLPs and every LayerNorm's affine.
TRANSFORMER_FP32_PARAMS = (
    r"(^|/)(time_embedding|ofs_embedding)(/|$)",
    r"(^|/)(norm|norm_final|norm_q|norm_k)/(scale|bias)$",
)

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v and FFN-in are column-parallel (output over ``heads`` /
#: ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``, bias
#: replicated and added once after the reduction). The q/k LayerNorms act per head over K, so
#: they are local under the head split and replicated. The blocks' modulation layers
#: (``norm1``/``norm2.linear``, 14 % of the 5B model) are split by output column and their small
#: ``(B, 6D)`` result gathered. Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    *column_parallel(r"^transformer_blocks/attn1/(to_q|to_k|to_v)", "heads"),
    *row_parallel(r"^transformer_blocks/attn1/to_out/0", "heads"),
    *column_parallel(r"^transformer_blocks/ff/net/0/proj", "mlp"),
    *row_parallel(r"^transformer_blocks/ff/net/2", "mlp"),
    (r"^transformer_blocks/norm[12]/linear/kernel$", ("layers", None, "modulation")),
    (r"^transformer_blocks/norm[12]/linear/bias$", ("layers", "modulation")),
)


# ---------------------------------------------------------------------------------------------
# VAE

#: The group norms' scale and bias stay float32 (their statistics and affine run in float32).
VAE_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)
