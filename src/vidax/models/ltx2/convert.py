"""Reading LTX-2 checkpoints: the tables the registry entries name (``__init__.py``) for the one
component loader (:mod:`vidax.weights.component`), under the names every family's ``convert.py``
uses (``docs/adding_a_family.md``). The module trees mirror the reference's, so every key maps by
rule: ``transformer_blocks`` stacked in the transformer, each connector's ``transformer_blocks``
stacked in the connectors (:func:`connectors_key_rules`); the VAEs and vocoders by the default rule.

Transformer: :data:`TRANSFORMER_FP32_PARAMS`, :data:`TRANSFORMER_PARAM_AXES`.
Connectors: :data:`CONNECTORS_FP32_PARAMS`, :func:`connectors_key_rules`.
Latent upsampler: :data:`UPSAMPLER_FP32_PARAMS`, :data:`UPSAMPLER_KEY_RULES`.
"""

from __future__ import annotations

from vidax.models.ltx.convert import UPSAMPLER_FP32_PARAMS as _LTX_UPSAMPLER_FP32
from vidax.models.ltx.convert import VAE_FP32_PARAMS
from vidax.parallel.rules import column_parallel, row_parallel
from vidax.weights.loader import KeyRules

# ---------------------------------------------------------------------------------------------
# Transformer

#: Kept float32 under any dtype: the timestep MLPs of every AdaLN-single embedding
#: (``time_embed``, ``audio_time_embed``, ``av_cross_attn_*``, ``prompt_adaln``) and every
#: modulation table (``scale_shift_table``, ``audio_scale_shift_table``, the blocks' prompt and
#: audio<->video tables), matched as whole path segments. The reference casts them with the
#: model; vidax keeps these small tensors float32 as for the other families (the modulation
#: arithmetic is float32 anyway).
TRANSFORMER_FP32_PARAMS = (r"(^|/)(timestep_embedder|[a-z0-9_]*scale_shift_table)(/|$)",)

_ATTN = r"^transformer_blocks/(attn1|attn2|audio_attn1|audio_attn2|audio_to_video_attn|video_to_audio_attn)"
_FF = r"^transformer_blocks/(ff|audio_ff)"

#: Logical axes of the parameters (stacked blocks lead with ``layers``; :mod:`vidax.parallel.rules`):
#: q/k/v and FFN-in column-parallel (output over ``heads`` / ``mlp``), attention-out and FFN-out
#: row-parallel (bias added once after the reduction), the q/k RMSNorm weights follow the split
#: activation; the per-head gates (``to_gate_logits``, heads outputs) split with the heads.
#: Everything else is replicated.
TRANSFORMER_PARAM_AXES = (
    *column_parallel(_ATTN + r"/(to_q|to_k|to_v)", "heads"),
    (_ATTN + r"/(norm_q|norm_k)/scale$", ("layers", "heads")),
    *column_parallel(_ATTN + r"/to_gate_logits", "heads"),
    *row_parallel(_ATTN + r"/to_out/0", "heads"),
    *column_parallel(_FF + r"/net/0/proj", "mlp"),
    *row_parallel(_FF + r"/net/2", "mlp"),
)


# ---------------------------------------------------------------------------------------------
# Connectors

#: Kept float32 under any dtype: the learnable registers (they replace the padding as they are).
CONNECTORS_FP32_PARAMS = (r"(^|/)learnable_registers$",)


def connectors_key_rules(config, keys=()) -> KeyRules:
    """Key mapping of ``LTX2TextConnectors``: each connector's blocks stacked (the same for any
    ``keys``)."""
    return KeyRules(stacked=("video_connector.transformer_blocks", "audio_connector.transformer_blocks"))


# ---------------------------------------------------------------------------------------------
# Autoencoders and vocoders

#: The video VAE is LTX-Video's (:mod:`vidax.models.ltx2.video_vae`): the same float32 parameters.
VAE_FP32_PARAMS = VAE_FP32_PARAMS

#: The audio VAE keeps its latent statistics float32 (its norms have no parameters; GroupNorm's
#: affine is float32 by construction).
AUDIO_DECODER_FP32_PARAMS = (r"^latents_(mean|std)$", r"norm[^/]*/(scale|bias)$")

#: The vocoders keep the snake parameters (exponentiated), the anti-aliasing filters, the STFT
#: bases and the mel filterbank float32.
VOCODER_FP32_PARAMS = (r"(^|/)(alpha|beta|filter)$", r"(^|/)(forward_basis|inverse_basis|mel_basis)$")


# ---------------------------------------------------------------------------------------------
# Diffusion video decoder (LTX-2.5)

#: Kept float32 under any dtype: the timestep MLP, the blocks' modulation tables and the latent
#: statistics (the modulation arithmetic is float32 anyway).
DIFFUSION_DECODER_FP32_PARAMS = (r"(^|/)(timestep_embedder|scale_shift_table)(/|$)", r"^latents_(mean|std)$")


# Latent upsampler

#: LTX-Video's (GroupNorm affine) plus the rational resampler's blur kernel (a fixed binomial
#: filter, exact in float32).
UPSAMPLER_FP32_PARAMS = (*_LTX_UPSAMPLER_FP32, r"(^|/)blur_down/kernel$")

#: The default rule, and the rational resampler's ``blur_down.kernel`` buffer read as the
#: ``kernel`` it is (a conv-like ``(1, 1, 5, 5)`` tensor, re-laid out ``(5, 5, 1, 1)``): without the
#: rename the rules would name it ``blur_down.weight`` when they map a path back to a key.
UPSAMPLER_KEY_RULES = KeyRules(renames=(("blur_down.kernel", "blur_down.weight"),))


# ---------------------------------------------------------------------------------------------
# Single-file checkpoints (the original LTX-2 repository's layout: GGUF / fp8 scaled files)

#: The keys every original-layout LTX-2 transformer has (``model.diffusion_model.`` stripped): how
#: a file's layout is told (:func:`vidax.weights.single_file.detect_layout`; an LTX-Video file
#: has the first two, not the audio one).
SINGLE_FILE_LAYOUT = ("LTX-2", ("patchify_proj.weight", "adaln_single.linear.weight", "audio_patchify_proj.weight"))

#: diffusers' ``convert_ltx2_transformer_to_diffusers`` renames, applied in order.
SINGLE_FILE_RENAMES = {
    "patchify_proj": "proj_in",
    "audio_patchify_proj": "audio_proj_in",
    "av_ca_video_scale_shift_adaln_single": "av_cross_attn_video_scale_shift",
    "av_ca_a2v_gate_adaln_single": "av_cross_attn_video_a2v_gate",
    "av_ca_audio_scale_shift_adaln_single": "av_cross_attn_audio_scale_shift",
    "av_ca_v2a_gate_adaln_single": "av_cross_attn_audio_v2a_gate",
    "scale_shift_table_a2v_ca_video": "video_a2v_cross_attn_scale_shift_table",
    "scale_shift_table_a2v_ca_audio": "audio_a2v_cross_attn_scale_shift_table",
    "q_norm": "norm_q",
    "k_norm": "norm_k",
}
#: Original prefixes of the timestep embedders, renamed at the start of a key only (they are
#: substrings of other modulation tensors' names).
_TIME_EMBEDS = (("adaln_single.", "time_embed."), ("audio_adaln_single.", "audio_time_embed."))


def single_file_keys(keys) -> dict:
    """Original-layout transformer key -> diffusers key (None: left out), as diffusers'
    ``from_single_file`` converts an LTX-2 file (``model.diffusion_model.`` stripped; the text
    connectors, which vidax reads from the folder's ``connectors/``, left out, as there; in a
    combined file, the tensors outside ``model.diffusion_model.`` (VAEs, vocoder) left out)."""
    from vidax.weights.single_file import rename_keys

    combined = any(k.startswith("model.diffusion_model.") for k in keys)
    out = {}
    for key, new in rename_keys(keys, SINGLE_FILE_RENAMES).items():
        if "embeddings_connector" in new or (combined and not key.startswith("model.diffusion_model.")):
            out[key] = None
            continue
        if "adaln_single" in new and (".weight" in new or ".bias" in new):
            for old, to in _TIME_EMBEDS:
                new = to + new.removeprefix(old) if new.startswith(old) else new
        out[key] = new
    return out
