"""Parity of vidax's Gemma 4 text encoder with the language model of transformers'
``Gemma4UnifiedForConditionalGeneration`` (LTX-2.5's text encoder), called as diffusers'
``LTX2Pipeline._get_gemma_prompt_embeds`` calls it: ``input_ids`` and a left-padding
``attention_mask``, ``output_hidden_states=True``, no ``position_ids``.

Tiny model with distinct sizes turning on every option Gemma 4 has over Gemma 3: D 48, N 4 query
heads, sliding layers N_kv 2 / K 12, full layers K 16 / N_kv 1 (``global_head_dim``,
``num_global_key_value_heads``) with ``attention_k_eq_v`` (no ``v_proj``), MLP 40 (80 on the two
KV-sharing layers: ``use_double_wide_mlp``), V 97, 7 layers S F S S F S F whose last two reuse the
keys / values of layers 3 (sliding) and 4 (full), a sliding window of 5 tokens (prompts of 13),
RoPE base 100 on the sliding layers and a proportional RoPE (a quarter of the pairs rotated, base
1e4, factor 2) on the full ones. A tiny vision embedder and audio embedder make the checkpoint
whole (their tensors are declared unused). Every parameter and every ``layer_scalar`` is
randomised. One prompt holds an image-placeholder id (embedded as ``<pad>`` by both).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from flax import nnx
from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.encoders.decoder_lm import encode_hidden_states
from vidax.encoders.gemma3 import gemma_prompt_embeds
from vidax.encoders.gemma4 import Gemma4TextConfig, Gemma4TextEncoder
from vidax.errors import ConfigError
from vidax.weights import CheckpointReader
from vidax.weights.component import load_component

S, F = "sliding_attention", "full_attention"
TYPES = [S, F, S, S, F, S, F]
TEXT = dict(
    vocab_size=97,
    hidden_size=48,
    intermediate_size=40,
    num_hidden_layers=7,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=12,
    global_head_dim=16,
    num_global_key_value_heads=1,
    attention_k_eq_v=True,
    num_kv_shared_layers=2,
    use_double_wide_mlp=True,
    sliding_window=5,
    layer_types=TYPES,
    rms_norm_eps=1e-6,
    rope_parameters={
        S: {"rope_type": "default", "rope_theta": 100.0},
        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e4, "factor": 2.0},
    },
)
VISION = dict(patch_size=4, pooling_kernel_size=1, mm_embed_dim=16, mm_posemb_size=8, output_proj_dims=48)
IMAGE_TOKEN = 90
B, L, LENGTHS = 2, 13, (13, 7)
# fp32 on both sides; only summation order and the cos / sin / exp / tanh / pow kernels differ.
# Measured max_rel_err: 6.9e-7 after layer 1, growing by ~1.5e-6 per randomised layer to 1.1e-5
# after the first KV-sharing layer (7.1e-6 after the final norm): fp32 noise of 7 layers, hence
# 2e-5; a wrong key / value source, norm or RoPE pair costs > 1e-1.
FP32_TOL = 2e-5


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    torch.manual_seed(0)
    cfg = Gemma4UnifiedConfig(
        text_config=TEXT,
        vision_config=VISION,
        audio_config=dict(audio_embed_dim=8),
        image_token_id=IMAGE_TOKEN,
        video_token_id=91,
        audio_token_id=92,
        boi_token_id=93,
        eoi_token_id=94,
        boa_token_id=95,
        eoa_token_index=96,
    )
    ref = Gemma4UnifiedForConditionalGeneration(cfg).eval()
    randomize_torch_module(ref, seed=5)
    with torch.no_grad():
        for i, layer in enumerate(ref.model.language_model.layers):
            layer.layer_scalar.fill_(0.6 + 0.1 * i)
    path = tmp_path_factory.mktemp("gemma4")
    ref.save_pretrained(path)
    return ref, path, load_component("Gemma4UnifiedForConditionalGeneration", path)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 89, (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, L - n :] = 1  # left padding, as LTX-2's tokenizer call
    ids[mask == 0] = 0  # Gemma's <pad>
    ids[0, 4] = IMAGE_TOKEN
    return ids, mask


def _ref_states(ref, ids, mask):
    with torch.no_grad():
        return ref(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states


def test_every_hidden_state_matches(gemma):
    ref, path, enc = gemma
    keys = CheckpointReader(path).keys()
    assert any(".embed_vision." in k for k in keys) and any(".embed_audio." in k for k in keys)
    assert not any("layers.1.self_attn.v_proj" in k or "layers.5.self_attn.k_proj" in k for k in keys)
    ids, mask = _inputs()
    states = _ref_states(ref, ids, mask)
    want = np.stack([h.numpy() for h in states])
    assert want.shape == (TEXT["num_hidden_layers"] + 1, B, L, TEXT["hidden_size"])
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    assert got.shape == want.shape
    for i in range(len(want)):  # padded rows included
        assert max_rel_err(got[i], want[i]) < FP32_TOL, f"hidden_states[{i}]: {max_rel_err(got[i], want[i]):.2e}"
    # As LTX-2.5 takes them: stacked on a last axis, flattened into the width.
    embeds = np.asarray(gemma_prompt_embeds(enc, ids.numpy(), mask.numpy()))
    stacked = torch.stack(states, dim=-1).flatten(2, 3).numpy()
    assert embeds.shape == stacked.shape == (B, L, TEXT["hidden_size"] * (TEXT["num_hidden_layers"] + 1))
    assert max_rel_err(embeds, stacked) < FP32_TOL
    # The reference depends on the input ...
    assert max_rel_err(want[-1, 0], want[-1, 1]) > 0.1
    # ... the window is shorter than the prompt: without it the last states differ ...
    wide = Gemma4TextEncoder(dataclasses.replace(enc.config, sliding_window=L), rngs=nnx.Rngs(0))
    nnx.update(wide, nnx.state(enc))
    unwindowed = np.asarray(encode_hidden_states(wide, ids.numpy(), mask.numpy(), output_layer=None))
    assert max_rel_err(unwindowed[-1], want[-1]) > 1e-2
    # ... and the placeholder id is the pad's embedding, not its own row.
    assert max_rel_err(want[0, 0, 4], want[0, 1, 0]) < FP32_TOL


def test_config_forms_and_refusals(gemma):
    """The saved config (``per_layer_config`` by layer index) and the constructor's form
    (``global_head_dim``) give the same settings; what vidax does not implement is refused."""
    _, _, enc = gemma
    c = enc.config
    assert c.layer_head_dims == (12, 16, 12, 12, 16, 12, 16) and c.layer_kv_heads == (2, 1, 2, 2, 1, 2, 1)
    assert c.kv_sharing_modes == (None, None, None, "store", "store", "reuse", "reuse")
    direct = Gemma4TextConfig.from_config_dict(dict(TEXT, model_type="gemma4_unified_text"))
    assert (direct.layer_head_dims, direct.layer_kv_heads, direct.rope_full) == (
        c.layer_head_dims,
        c.layer_kv_heads,
        c.rope_full,
    )
    # transformers' defaults: every 6th layer global and the last forced global, 512-wide globals.
    d = Gemma4TextConfig.from_config_dict(dict(model_type="gemma4_unified_text", num_hidden_layers=8))
    assert d.layer_types == (S,) * 5 + (F, S, F) and d.layer_head_dims[5] == 512
    assert (d.rope_full.rope_type, d.rope_full.partial_rotary_factor) == ("proportional", 0.25)
    for key, value, match in (
        ("use_bidirectional_attention", "all", "use_bidirectional_attention"),
        ("rope_parameters", {S: {"rope_type": "yarn"}, F: {}}, "yarn"),
        ("hidden_activation", "not_an_activation", "hidden_act"),
        ("num_kv_shared_layers", 7, "num_kv_shared_layers"),
        ("per_layer_config", {"1": {"intermediate_size": 3}}, "per_layer_config"),
    ):
        with pytest.raises(ConfigError, match=match):
            Gemma4TextConfig.from_config_dict(dict(TEXT, model_type="gemma4_unified_text", **{key: value}))
    with pytest.raises(ConfigError, match="model_type"):
        Gemma4TextConfig.from_config_dict(dict(model_type="gemma4_text"))


def test_streamed_layers_equal_resident(gemma):
    """Gemma 4's layer groups (sliding and full attention, interleaved) read from the files 2
    layers of a group a chunk, each layer run as the scan runs it, the KV-sharing tail fed from
    the streamed layers: the resident hidden states, bit for bit on the CPU (the same layer
    programs on the same values; float32, tolerance 1e-6 relative for other backends' fusion)."""
    from vidax.parallel.offload import OffloadConfig, offloaded_stacks, streams_layers

    _, path, enc = gemma
    streamed = load_component("Gemma4UnifiedForConditionalGeneration", path, offload=OffloadConfig(chunk=2))
    assert streams_layers(streamed) and len(offloaded_stacks(streamed)) == len(enc.config.layer_groups) > 1
    assert all(b.memory_kind == "files" for b in offloaded_stacks(streamed))
    ids, mask = _inputs(seed=2)
    want = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    got = np.asarray(encode_hidden_states(streamed, ids.numpy(), mask.numpy(), output_layer=None))
    assert got.shape == want.shape and max_rel_err(got, want) < 1e-6, max_rel_err(got, want)
