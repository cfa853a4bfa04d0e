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


# ---------------------------------------------------------------------------------------------
# Single-file checkpoints (the original Wan repository's layout: GGUF / fp8 scaled files)

#: The keys every original-layout Wan transformer has (``model.diffusion_model.`` stripped): how a
#: file's layout is told (:func:`vidax.weights.single_file.detect_layout`).
SINGLE_FILE_LAYOUT = ("Wan", ("patch_embedding.weight", "blocks.0.self_attn.q.weight"))

#: diffusers' ``convert_wan_transformer_to_diffusers`` renames (loaders/single_file_utils.py),
#: applied in order; ``norm2`` / ``norm3`` swap through a placeholder as there.
SINGLE_FILE_RENAMES = {
    "time_embedding.0": "condition_embedder.time_embedder.linear_1",
    "time_embedding.2": "condition_embedder.time_embedder.linear_2",
    "text_embedding.0": "condition_embedder.text_embedder.linear_1",
    "text_embedding.2": "condition_embedder.text_embedder.linear_2",
    "time_projection.1": "condition_embedder.time_proj",
    "cross_attn": "attn2",
    "self_attn": "attn1",
    ".o.": ".to_out.0.",
    ".q.": ".to_q.",
    ".k.": ".to_k.",
    ".v.": ".to_v.",
    ".k_img.": ".add_k_proj.",
    ".v_img.": ".add_v_proj.",
    ".norm_k_img.": ".norm_added_k.",
    "head.modulation": "scale_shift_table",
    "head.head": "proj_out",
    "modulation": "scale_shift_table",
    "ffn.0": "ffn.net.0.proj",
    "ffn.2": "ffn.net.2",
    "norm2": "norm__placeholder",
    "norm3": "norm2",
    "norm__placeholder": "norm3",
    "img_emb.proj.0": "condition_embedder.image_embedder.norm1",
    "img_emb.proj.1": "condition_embedder.image_embedder.ff.net.0.proj",
    "img_emb.proj.3": "condition_embedder.image_embedder.ff.net.2",
    "img_emb.proj.4": "condition_embedder.image_embedder.norm2",
}


def single_file_keys(keys: list[str]) -> dict[str, str]:
    """Original-layout transformer key -> diffusers key, as diffusers' ``from_single_file``
    converts a Wan2.1 / 2.2 T2V / I2V file (``model.diffusion_model.`` stripped)."""
    from vidax.weights.single_file import rename_keys

    return rename_keys(keys, SINGLE_FILE_RENAMES)
