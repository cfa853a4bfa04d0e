"""Reading a Cosmos-Predict2.5 transformer's tensors: the tables its registry entry names
(``__init__.py``) for the one component loader (:mod:`vidax.weights.component`), under the names
every family's ``convert.py`` uses (``docs/adding_a_family.md``): :data:`TRANSFORMER_FP32_PARAMS`,
:data:`TRANSFORMER_PARAM_AXES` (the keys map by the default rule, ``transformer_blocks`` stacked).

Cosmos has no VAE of its own: its ``model_index.json`` names ``AutoencoderKLWan``, registered by
the Wan family (:mod:`vidax.models.wan`), so there are no ``VAE_*`` names here.
"""

from __future__ import annotations


#: Regexes of the parameter paths kept float32: diffusers' ``_keep_in_fp32_modules``
#: (``learnable_pos_embed``), matched against whole path segments.
TRANSFORMER_FP32_PARAMS = (r"(^|/)learnable_pos_embed(/|$)",)

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v and FFN-in are column-parallel (output over ``heads`` /
#: ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``; none has a
#: bias). The per-head q/k RMSNorm weights ``(K,)``, the AdaLN-LoRA layers, the patch / time /
#: text embeddings and ``proj_out`` are replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^transformer_blocks/attn[12]/(to_q|to_k|to_v)/kernel$", ("layers", "embed", "heads")),
    (r"^transformer_blocks/attn[12]/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/ff/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/ff/net/2/kernel$", ("layers", "mlp", "embed")),
)
