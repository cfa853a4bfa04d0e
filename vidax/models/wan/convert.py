"""Reading a Wan checkpoint's tensors: the tables the registry entries name (``__init__.py``) for
the one component loader (:mod:`vidax.weights.component`), under the names every family's
``convert.py`` uses (``docs/adding_a_family.md``):

* transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES`,
  :func:`transformer_key_rules` (the I2V checkpoints' alias);
* VAE: :data:`VAE_FP32_PARAMS` (its keys map by the loader's default rule).
"""

from __future__ import annotations

from vidax.models.wan.config import WanTransformerConfig
from vidax.weights.loader import KeyRules


# ---------------------------------------------------------------------------------------------
# Transformer

#: Regexes of the parameter paths kept float32: diffusers' ``_keep_in_fp32_modules`` matched, as
#: diffusers does, against whole path segments.
TRANSFORMER_FP32_PARAMS = (r"(^|/)(time_embedder|scale_shift_table|norm1|norm2|norm3)(/|$)",)

# The I2V checkpoints written by early converters carry an unused ``norm_added_q`` that
# diffusers drops (``_keys_to_ignore_on_load_unexpected``).
_IGNORED_KEY = "attn2.norm_added_q.weight"

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v, the image k/v and FFN-in are column-parallel (output over
#: ``heads`` / ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``, bias
#: replicated and added once after the reduction); the q/k RMS-norm weights follow the split
#: activation. Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^blocks/attn[12]/(to_q|to_k|to_v|add_k_proj|add_v_proj)/kernel$", ("layers", "embed", "heads")),
    (r"^blocks/attn[12]/(to_q|to_k|to_v|add_k_proj|add_v_proj)/bias$", ("layers", "heads")),
    (r"^blocks/attn[12]/(norm_q|norm_k|norm_added_k)/scale$", ("layers", "heads")),
    (r"^blocks/attn[12]/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^blocks/ffn/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^blocks/ffn/net/0/proj/bias$", ("layers", "mlp")),
    (r"^blocks/ffn/net/2/kernel$", ("layers", "mlp", "embed")),
)


def transformer_key_rules(config: WanTransformerConfig, keys=()) -> KeyRules:
    """Key mapping of the diffusers Wan transformer state dict (blocks stacked; the same for any
    ``keys``)."""
    aliases = {}
    if config.added_kv_proj_dim is not None:
        aliases = {
            f"blocks.{i}.{_IGNORED_KEY}": f"blocks.{i}.attn2.norm_added_k.weight" for i in range(config.num_layers)
        }
    return KeyRules(stacked=("blocks",), aliases=aliases)


# ---------------------------------------------------------------------------------------------
# VAE

#: The RMS-norm ``gamma``s stay float32 (the norms run in float32).
VAE_FP32_PARAMS = (r"gamma$",)
