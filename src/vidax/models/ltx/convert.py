"""Reading an LTX-Video checkpoint's tensors: the tables the registry entries name (``__init__.py``)
for the one component loader (:mod:`vidax.weights.component`), under the names every family's
``convert.py`` uses (``docs/adding_a_family.md``). Every key maps by the default rule (the module
trees mirror the reference's; ``transformer_blocks`` stacked).

Transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES`.
VAE: :data:`VAE_FP32_PARAMS` (``latents_mean`` / ``latents_std`` included).
Latent upsampler: :data:`UPSAMPLER_FP32_PARAMS`.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Transformer

#: Regexes of the transformer parameters kept float32 under any dtype: the timestep MLP
#: (``time_embed.emb.timestep_embedder``) and the modulation tables (``scale_shift_table``, the
#: model's and every block's), matched as whole path segments. The reference declares no
#: ``_keep_in_fp32_modules`` and casts them with the model; vidax keeps these small tensors fp32
#: as it does for the other families (the modulation arithmetic is float32 anyway).
TRANSFORMER_FP32_PARAMS = (r"(^|/)(timestep_embedder|scale_shift_table)(/|$)",)

#: Logical axes of the parameters (stacked blocks lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. q/k/v and FFN-in are column-parallel (output over ``heads`` /
#: ``mlp``), attention-out and FFN-out row-parallel (input over ``heads`` / ``mlp``, bias
#: replicated and added once after the reduction); the q/k RMSNorm weights follow the split
#: activation. Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^transformer_blocks/attn[12]/(to_q|to_k|to_v)/kernel$", ("layers", "embed", "heads")),
    (r"^transformer_blocks/attn[12]/(to_q|to_k|to_v)/bias$", ("layers", "heads")),
    (r"^transformer_blocks/attn[12]/(norm_q|norm_k)/scale$", ("layers", "heads")),
    (r"^transformer_blocks/attn[12]/to_out/0/kernel$", ("layers", "heads", "embed")),
    (r"^transformer_blocks/ff/net/0/proj/kernel$", ("layers", "embed", "mlp")),
    (r"^transformer_blocks/ff/net/0/proj/bias$", ("layers", "mlp")),
    (r"^transformer_blocks/ff/net/2/kernel$", ("layers", "mlp", "embed")),
)


# ---------------------------------------------------------------------------------------------
# VAE

#: Kept float32 under any dtype: the shortcut LayerNorms' affine, the time embeddings (computed in
#: float32), the timestep multiplier and the latent statistics.
VAE_FP32_PARAMS = (
    r"norm3/(scale|bias)$",
    r"(^|/)time_embedder/",
    r"timestep_scale_multiplier$",
    r"^latents_(mean|std)$",
)


# ---------------------------------------------------------------------------------------------
# Latent upsampler

#: The GroupNorm scales and biases stay float32 (the norms run in float32).
UPSAMPLER_FP32_PARAMS = (r"norm[^/]*/(scale|bias)$",)


# ---------------------------------------------------------------------------------------------
# Single-file checkpoints (the original LTX-Video repository's layout: GGUF / fp8 scaled files)

#: The keys every original-layout LTX-Video transformer has (``model.diffusion_model.`` stripped):
#: how a file's layout is told (:func:`vidax.weights.single_file.detect_layout`).
SINGLE_FILE_LAYOUT = ("LTX-Video", ("patchify_proj.weight", "adaln_single.linear.weight"))

#: diffusers' ``convert_ltx_transformer_checkpoint_to_diffusers`` renames, in order.
SINGLE_FILE_RENAMES = {
    "patchify_proj": "proj_in",
    "adaln_single": "time_embed",
    "q_norm": "norm_q",
    "k_norm": "norm_k",
}


def single_file_keys(keys: list[str]) -> dict[str, str]:
    """Original-layout transformer key -> diffusers key, as diffusers' ``from_single_file``
    converts an LTX-Video file (``model.diffusion_model.`` stripped; the VAE's ``vae.*`` tensors
    of a combined file are left out, as there)."""
    from vidax.weights.single_file import rename_keys

    return {k: None if "vae" in k else v for k, v in rename_keys(keys, SINGLE_FILE_RENAMES).items()}
