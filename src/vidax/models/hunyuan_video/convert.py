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

from vidax.models.hunyuan_video.original_names import ORIGINAL_EMBEDDER_NAMES

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
    (
        r"^(transformer_blocks|single_transformer_blocks)/attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/kernel$",
        ("layers", "embed", "heads"),
    ),
    (
        r"^(transformer_blocks|single_transformer_blocks)/attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/bias$",
        ("layers", "heads"),
    ),
    (r"^transformer_blocks/attn/(to_out/0|to_add_out)/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/(ff|ff_context)/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/(ff|ff_context)/net/0/proj/bias$", ("layers", "mlp")),
    (r"^transformer_blocks/(ff|ff_context)/net/2/kernel$", ("layers", "mlp", "embed")),
    (r"^single_transformer_blocks/proj_mlp/kernel$", ("layers", "embed", "mlp")),
    (r"^single_transformer_blocks/proj_mlp/bias$", ("layers", "mlp")),
    (r"^single_transformer_blocks/proj_out/kernel$", ("layers", "mlp", "embed")),
    (
        r"^(transformer_blocks/(norm1|norm1_context)|single_transformer_blocks/norm)/linear/kernel$",
        ("layers", None, "modulation"),
    ),
    (
        r"^(transformer_blocks/(norm1|norm1_context)|single_transformer_blocks/norm)/linear/bias$",
        ("layers", "modulation"),
    ),
)


# ---------------------------------------------------------------------------------------------
# VAE

#: The group norms' scale and bias stay float32 (their statistics and affine run in float32):
#: ``norm1`` / ``norm2`` of the resnets, ``conv_norm_out``, the attention's ``group_norm``.
VAE_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)


# ---------------------------------------------------------------------------------------------
# Single-file checkpoints (the original HunyuanVideo repository's layout: GGUF / fp8 scaled files)

#: The keys every original-layout HunyuanVideo transformer has (``model.diffusion_model.``
#: stripped): how a file's layout is told (:func:`vidax.weights.single_file.detect_layout`).
SINGLE_FILE_LAYOUT = ("HunyuanVideo", ("img_in.proj.weight", "double_blocks.0.img_attn_qkv.weight"))

#: diffusers' ``convert_hunyuan_video_transformer_to_diffusers`` renames, applied in order.
SINGLE_FILE_RENAMES = {
    "img_in": "x_embedder",
    **ORIGINAL_EMBEDDER_NAMES,
    "double_blocks": "transformer_blocks",
    "img_attn_q_norm": "attn.norm_q",
    "img_attn_k_norm": "attn.norm_k",
    "img_attn_proj": "attn.to_out.0",
    "txt_attn_q_norm": "attn.norm_added_q",
    "txt_attn_k_norm": "attn.norm_added_k",
    "txt_attn_proj": "attn.to_add_out",
    "img_mod.linear": "norm1.linear",
    "img_norm1": "norm1.norm",
    "img_norm2": "norm2",
    "img_mlp": "ff",
    "txt_mod.linear": "norm1_context.linear",
    "txt_norm1": "norm1.norm",
    "txt_norm2": "norm2_context",
    "txt_mlp": "ff_context",
    "self_attn_proj": "attn.to_out.0",
    "modulation.linear": "norm.linear",
    "pre_norm": "norm.norm",
    "final_layer.norm_final": "norm_out.norm",
    "final_layer.linear": "proj_out",
    "fc1": "net.0.proj",
    "fc2": "net.2",
    "input_embedder": "proj_in",
}

#: The token refiner's renames (diffusers' ``remap_txt_in_``), in order.
_TXT_IN_RENAMES = {
    "individual_token_refiner.blocks": "token_refiner.refiner_blocks",
    "adaLN_modulation.1": "norm_out.linear",
    "txt_in": "context_embedder",
    "t_embedder.mlp.0": "time_text_embed.timestep_embedder.linear_1",
    "t_embedder.mlp.2": "time_text_embed.timestep_embedder.linear_2",
    "c_embedder": "time_text_embed.text_embedder",
    "mlp": "ff",
}
#: The single blocks' renames (diffusers' ``remap_single_transformer_blocks_``), in order.
_SINGLE_RENAMES = {
    "single_blocks": "single_transformer_blocks",
    "linear2": "proj_out",
    "q_norm": "attn.norm_q",
    "k_norm": "attn.norm_k",
}


def single_file_keys(shapes) -> dict:
    """Original-layout transformer key -> diffusers key (a fused tensor: its parts, each a
    :class:`~vidax.weights.single_file.Part`), as diffusers' ``from_single_file`` converts a HunyuanVideo file: the
    fused ``img_attn_qkv`` / ``txt_attn_qkv`` / refiner ``self_attn_qkv`` cut in three, each single
    block's ``linear1`` cut into q, k, v (the block width each) and the MLP input, the final
    modulation's ``shift, scale`` halves swapped.

    Args:
        shapes: the file's tensor names -> shapes (the single blocks' width is read from
            ``linear1.weight``'s input axis; diffusers takes 3072, the released models' width).
    """
    from vidax.weights.single_file import Part, rename_keys, renamed

    out = {}
    for key, new in rename_keys(list(shapes), SINGLE_FILE_RENAMES).items():
        if "txt_in" in new:
            if "self_attn_qkv" in new:
                names = [renamed(new.replace("self_attn_qkv", f"attn.to_{x}"), _TXT_IN_RENAMES) for x in "qkv"]
                out[key] = _thirds(names, shapes[key][0])
            else:
                out[key] = renamed(new, _TXT_IN_RENAMES)
        elif "img_attn_qkv" in new:
            out[key] = _thirds([new.replace("img_attn_qkv", f"attn.to_{x}") for x in "qkv"], shapes[key][0])
        elif "txt_attn_qkv" in new:
            out[key] = _thirds([new.replace("txt_attn_qkv", f"attn.add_{x}_proj") for x in "qkv"], shapes[key][0])
        elif "single_blocks" in new and ("linear1.weight" in new or "linear1.bias" in new):
            leaf = new.rsplit(".", 1)[1]
            stem = new.replace("single_blocks", "single_transformer_blocks").removesuffix(f".linear1.{leaf}")
            width = shapes[key.removesuffix(leaf) + "weight"][1]
            names = [f"{stem}.attn.to_{x}.{leaf}" for x in "qkv"] + [f"{stem}.proj_mlp.{leaf}"]
            out[key] = tuple(Part(n, i * width, (i + 1) * width if i < 3 else None) for i, n in enumerate(names))
        elif "single_blocks" in new:
            out[key] = renamed(new, _SINGLE_RENAMES)
        elif "final_layer.adaLN_modulation.1" in new:
            out[key] = (Part(new.replace("final_layer.adaLN_modulation.1", "norm_out.linear"), swap=True),)
        else:
            out[key] = new
    return out


def _thirds(names: list, rows: int) -> tuple:
    from vidax.weights.single_file import Part

    third = rows // 3
    return tuple(Part(n, i * third, (i + 1) * third) for i, n in enumerate(names))
