"""Reading Cosmos 3's tensors: the tables its registry entries name (``__init__.py``) for the one
component loader (:mod:`vidax.weights.component`), under the names every family's ``convert.py``
uses (``docs/adding_a_family.md``). The transformer's keys map 1:1 by the default rule
(``layers`` stacked: both pathways' weights of a layer are one layer of the stack, so they are
read, placed and streamed together); so do the sound tokenizer's (its weight-normed convolutions
keep ``weight_g`` / ``weight_v`` as the checkpoint has them).

Cosmos 3 has no VAE of its own (the Wan2.2 ``AutoencoderKLWan``, registered by the Wan family).
"""

from __future__ import annotations

import dataclasses

#: diffusers' ``_keep_in_fp32_modules`` (``time_embedder``), matched against whole path segments.
TRANSFORMER_FP32_PARAMS = (r"(^|/)time_embedder(/|$)",)

#: Logical axes of the parameters (stacked layers lead with ``layers``); see
#: :mod:`vidax.parallel.rules`. Both pathways' q/k/v and MLP-in are column-parallel (output over
#: ``heads`` / ``mlp``), attention-out and MLP-out row-parallel. The per-head norms, the layer
#: norms, the embeddings, ``lm_head`` and the modality projections are replicated.
TRANSFORMER_PARAM_AXES = (
    (r"^layers/self_attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/kernel$", ("layers", "embed", "heads")),
    (r"^layers/self_attn/(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)/bias$", ("layers", "heads")),
    (r"^layers/self_attn/(to_out|to_add_out)/kernel$", ("layers", "heads", "embed")),
    (r"^layers/(mlp|mlp_moe_gen)/(gate_proj|up_proj)/kernel$", ("layers", "embed", "mlp")),
    (r"^layers/(mlp|mlp_moe_gen)/down_proj/kernel$", ("layers", "mlp", "embed")),
)

#: The sound tokenizer's SnakeBeta parameters (``alpha`` / ``beta``, log-scale) stay float32: the
#: activation is computed in float32 (:class:`~vidax.models.cosmos3.sound_tokenizer.Snake1d`).
AUDIO_DECODER_FP32_PARAMS = (r"(^|/)(alpha|beta)$",)


def plan_sound_tokenizer(folder: str, *, dtype, placement, mesh, config, variant=None):
    """The sound tokenizer's load (the registry entry's ``loader``): as every component's
    (:func:`~vidax.weights.component.plan_component`), except that a checkpoint without any
    ``encoder.*`` tensor is a decoder-only tokenizer, as diffusers reads it
    (``Cosmos3AVAEAudioTokenizer._fix_state_dict_keys_on_load`` disables the encoder): the config's
    ``encoder_enabled`` is then taken as false. ``variant``: the weights variant read
    (:class:`~vidax.weights.safetensors_io.CheckpointReader`).

    Returns:
        A :class:`~vidax.weights.loader.PendingLoad`.

    Raises:
        as :func:`~vidax.weights.component.plan_component`.
    """
    from vidax.registry import registry
    from vidax.weights.component import plan_component
    from vidax.weights.safetensors_io import CheckpointReader

    if config.encoder_enabled and not any(k.startswith("encoder.") for k in CheckpointReader(folder, variant).keys()):
        config = dataclasses.replace(config, encoder_enabled=False)
    spec = dataclasses.replace(registry().component("Cosmos3AVAEAudioTokenizer"), loader=None)
    return plan_component(spec, folder, dtype, placement, mesh=mesh, config=config, variant=variant)
