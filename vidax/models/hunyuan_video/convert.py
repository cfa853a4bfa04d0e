"""Reading a HunyuanVideo 1.0 checkpoint's tensors: the tables the registry entries name
(``__init__.py``) for the one component loader (:mod:`vidax.weights.component`), under the names
every family's ``convert.py`` uses (``docs/adding_a_family.md``).

Transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES` (the keys map by the
default rule: both block stacks stacked, the refiner blocks a list).

VAE: :data:`VAE_FP32_PARAMS` (the keys map by the default rule: ``...conv1.conv.weight`` ->
``.../conv1/conv/kernel``, group norms' ``weight`` -> ``scale``, attention linears ``(O, I)`` ->
``(I, O)``).
"""

from __future__ import annotations


# ---------------------------------------------------------------------------------------------
# Transformer

#: Parameters kept float32 under any dtype: the timestep / guidance MLPs (the model's and the
#: token refiner's; they run in float32) and the weights of every LayerNorm / RMSNorm (the
#: refiner's affine ``norm1``/``norm2`` and the per-head q/k RMSNorms). diffusers declares no
#: ``_keep_in_fp32_modules`` for this model; these are vidax's choice (see the transformer docstring).
TRANSFORMER_FP32_PARAMS = (
    r"(^|/)(timestep_embedder|guidance_embedder)(/|$)",
    r"(^|/)(norm1|norm2|norm_q|norm_k|norm_added_q|norm_added_k)/(scale|bias)$",
)

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v (video and text), FFN-in and the single blocks' ``proj_mlp``
#: are column-parallel (output over ``heads`` / ``mlp``); attention-out (``to_out``,
#: ``to_add_out``), FFN-out and the single blocks' ``proj_out`` (input ``[attention; mlp]``)
#: row-parallel, the partitioner adding the bias once after the reduction. The q/k RMSNorms act per
#: head over K and are replicated. The modulation layers are split by output column. Everything
#: else (embedders, token refiner, head) is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^(transformer_blocks|single_transformer_blocks)/attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/kernel$",
     ("layers", "embed", "heads")),
    (r"^(transformer_blocks|single_transformer_blocks)/attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/bias$",
     ("layers", "heads")),
    (r"^transformer_blocks/attn/(to_out/0|to_add_out)/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/(ff|ff_context)/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/(ff|ff_context)/net/0/proj/bias$", ("layers", "mlp")),
    (r"^transformer_blocks/(ff|ff_context)/net/2/kernel$", ("layers", "mlp", "embed")),
    (r"^single_transformer_blocks/proj_mlp/kernel$", ("layers", "embed", "mlp")),
    (r"^single_transformer_blocks/proj_mlp/bias$", ("layers", "mlp")),
    (r"^single_transformer_blocks/proj_out/kernel$", ("layers", "mlp", "embed")),
    (r"^(transformer_blocks/(norm1|norm1_context)|single_transformer_blocks/norm)/linear/kernel$",
     ("layers", None, "modulation")),
    (r"^(transformer_blocks/(norm1|norm1_context)|single_transformer_blocks/norm)/linear/bias$",
     ("layers", "modulation")),
)


# ---------------------------------------------------------------------------------------------
# VAE

#: The group norms' scale and bias stay float32 (their statistics and affine run in float32):
#: ``norm1`` / ``norm2`` of the resnets, ``conv_norm_out``, the attention's ``group_norm``.
VAE_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)
