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


# ---------------------------------------------------------------------------------------------
# Single-file checkpoints (the original Cosmos-Predict2 / 2.5 repository's layout: ``net.``
# prefixed; GGUF / fp8 scaled files)

#: The keys every original-layout Cosmos-Predict2 / 2.5 transformer has (prefix stripped): how a
#: file's layout is told (:func:`vidax.weights.single_file.detect_layout`).
SINGLE_FILE_LAYOUT = ("Cosmos-Predict2/2.5", ("x_embedder.proj.1.weight", "blocks.0.self_attn.q_proj.weight"))

#: diffusers' ``convert_cosmos_transformer_checkpoint_to_diffusers`` renames for Cosmos 2.0 / 2.5,
#: applied in order.
SINGLE_FILE_RENAMES = {
    "t_embedder.1": "time_embed.t_embedder",
    "t_embedding_norm": "time_embed.norm",
    "blocks": "transformer_blocks",
    "adaln_modulation_self_attn.1": "norm1.linear_1",
    "adaln_modulation_self_attn.2": "norm1.linear_2",
    "adaln_modulation_cross_attn.1": "norm2.linear_1",
    "adaln_modulation_cross_attn.2": "norm2.linear_2",
    "adaln_modulation_mlp.1": "norm3.linear_1",
    "adaln_modulation_mlp.2": "norm3.linear_2",
    "self_attn": "attn1",
    "cross_attn": "attn2",
    "q_proj": "to_q",
    "k_proj": "to_k",
    "v_proj": "to_v",
    "output_proj": "to_out.0",
    "q_norm": "norm_q",
    "k_norm": "norm_k",
    "mlp.layer1": "ff.net.0.proj",
    "mlp.layer2": "ff.net.2",
    "x_embedder.proj.1": "patch_embed.proj",
    "final_layer.adaln_modulation.1": "norm_out.linear_1",
    "final_layer.adaln_modulation.2": "norm_out.linear_2",
    "final_layer.linear": "proj_out",
}

#: Tensors of the training state diffusers leaves out (a converted key holding one of these).
SINGLE_FILE_DROPPED = (
    "accum_video_sample_counter",
    "accum_image_sample_counter",
    "accum_iteration",
    "accum_train_in_hours",
    "pos_embedder.seq",
    "pos_embedder.dim_spatial_range",
    "pos_embedder.dim_temporal_range",
    "_extra_state",
)


def single_file_keys(keys) -> dict:
    """Original-layout transformer key -> diffusers key (None: left out), as diffusers'
    ``from_single_file`` converts a Cosmos-Predict2 / 2.5 file (``net.`` stripped)."""
    from vidax.weights.single_file import rename_keys

    return {
        k: None if any(d in v for d in SINGLE_FILE_DROPPED) else v
        for k, v in rename_keys(keys, SINGLE_FILE_RENAMES, strip="net.").items()
    }
