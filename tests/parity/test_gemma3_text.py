"""Parity of vidax's decoder text encoder with the language model of transformers'
``Gemma3ForConditionalGeneration`` (LTX-2's text encoder), called as diffusers'
``LTX2Pipeline._get_gemma_prompt_embeds`` calls it: ``input_ids`` and a left-padding
``attention_mask``, ``output_hidden_states=True``, no ``position_ids``.

Tiny model with distinct sizes: D 48, N 6 query heads, N_kv 2 (grouped-query), K 16 (N·K = 96 !=
D), MLP 80, V 97, 4 layers of types sliding / full / sliding / sliding with a sliding window of 5
tokens (the prompts are 13), ``query_pre_attn_scalar`` 24 (!= K), RoPE base 100 on the sliding
layers and 1e4 with linear scaling 8 on the global one (as the released 12B's global layers); a
tiny SigLIP tower so ``save_pretrained`` writes a whole checkpoint whose vision and projector
tensors the loader declares unused. Every parameter is randomised (the ``1 + w`` norm weights
too). Inputs: a batch of a 13-token and a 7-token prompt, the short one left padded.
"""

from __future__ import annotations

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import Gemma3Config, Gemma3ForConditionalGeneration

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.encoders.decoder_lm import DECODER_LM_PARAM_AXES, DecoderLM, encode_hidden_states
from vidax.encoders.gemma3 import Gemma3TextConfig, gemma_prompt_embeds
from vidax.errors import CheckpointError, ConfigError
from vidax.weights import CheckpointReader, save_safetensors
from vidax.weights.component import load_component

TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
TEXT = dict(
    vocab_size=97,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=4,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=16,
    sliding_window=5,
    layer_types=TYPES,
    query_pre_attn_scalar=24,
    rms_norm_eps=1e-6,
    rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    },
)
VISION = dict(
    hidden_size=16, intermediate_size=20, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
)
B, L, LENGTHS = 2, 13, (13, 7)
# fp32 on both sides; only summation order and the cos / sin / exp / tanh kernels differ
# (measured max_rel_err 1.6e-6 over the hidden states, padded rows included).
FP32_TOL = 1e-5


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    torch.manual_seed(0)
    ref = Gemma3ForConditionalGeneration(
        Gemma3Config(text_config=TEXT, vision_config=VISION, mm_tokens_per_image=4)
    ).eval()
    randomize_torch_module(ref, seed=5)
    path = tmp_path_factory.mktemp("gemma3")
    ref.save_pretrained(path)
    return ref, path, load_component("Gemma3ForConditionalGeneration", path)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, TEXT["vocab_size"], (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, L - n :] = 1  # left padding, as LTX-2's tokenizer call
    ids[mask == 0] = 0  # Gemma's <pad>
    return ids, mask


def _ref_states(ref, ids, mask):
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return out.hidden_states


def test_every_hidden_state_matches(gemma):
    ref, path, enc = gemma
    keys = CheckpointReader(path).keys()
    assert any(k.startswith("vision_tower.") for k in keys) and any(
        k.startswith("multi_modal_projector.") for k in keys
    )
    ids, mask = _inputs()
    states = _ref_states(ref, ids, mask)
    want = np.stack([h.numpy() for h in states])
    assert want.shape == (TEXT["num_hidden_layers"] + 1, B, L, TEXT["hidden_size"])
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    assert got.shape == want.shape
    for i in range(len(want)):  # padded rows included
        assert max_rel_err(got[i], want[i]) < FP32_TOL, f"hidden_states[{i}]: {max_rel_err(got[i], want[i]):.2e}"
    # As LTX-2 takes them: stacked on a last axis, flattened into the width.
    embeds = np.asarray(gemma_prompt_embeds(enc, ids.numpy(), mask.numpy()))
    stacked = torch.stack(states, dim=-1).flatten(2, 3).numpy()
    assert embeds.shape == stacked.shape == (B, L, TEXT["hidden_size"] * (TEXT["num_hidden_layers"] + 1))
    assert max_rel_err(embeds, stacked) < FP32_TOL
    # The reference depends on the input (the two prompts differ well beyond tolerance) ...
    assert max_rel_err(want[-1, 0], want[-1, 1]) > 0.1
    # ... and the window is shorter than the prompt: without it the last states differ.
    wide = DecoderLM(dataclasses.replace(enc.config, sliding_window=L), rngs=nnx.Rngs(0))
    nnx.update(wide, nnx.state(enc))
    unwindowed = np.asarray(encode_hidden_states(wide, ids.numpy(), mask.numpy(), output_layer=None))
    assert max_rel_err(unwindowed[-1], want[-1]) > 1e-2


def _rel_l2(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(np.asarray(b, np.float64)))


def test_bf16_close_to_transformers_bf16(gemma):
    """bf16 parameters and matmuls against ``from_pretrained(dtype=torch.bfloat16)``'s run."""
    ref, path, _ = gemma
    enc = load_component("Gemma3ForConditionalGeneration", path, dtype=jnp.bfloat16)
    ids, mask = _inputs(seed=1)
    want32 = np.stack([h.numpy() for h in _ref_states(ref, ids, mask)])
    want16 = np.stack([h.float().numpy() for h in _ref_states(copy.deepcopy(ref).to(torch.bfloat16), ids, mask)])
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None).astype(jnp.float32))
    # The embeddings are bf16 products (table times sqrt(D) rounded to bf16) in both: equal.
    np.testing.assert_array_equal(got[0], want16[0])
    # Each bf16 rounding costs ~2^-9 relative and Gemma rounds often (q/k norms, four norms per
    # layer whose 1 + w weights are ~2 here); transformers also rounds the residual stream to
    # bf16 after every sub-layer, vidax keeps it in fp32. Relative L2 errors measured (3 seeds):
    # vidax bf16 from transformers bf16 1.2e-2 .. 3.2e-2; from fp32 vidax 1.0e-2 .. 2.9e-2 and
    # transformers bf16 1.2e-2 .. 3.6e-2 (per state, vidax / transformers 0.83 .. 1.0).
    for i in range(1, len(got)):
        assert _rel_l2(got[i], want16[i]) < 5e-2, (i, _rel_l2(got[i], want16[i]))
        assert _rel_l2(got[i], want32[i]) < 1.2 * _rel_l2(want16[i], want32[i]), i


def test_tensor_parallel_equals_single_device(gemma):
    """(data=2, tensor=2) mesh: q/k/v and gate/up column-parallel, o/down row-parallel (6 query and
    2 key/value heads over tensor=2), the embedding by vocabulary rows (97 does not divide: left
    replicated), the batch over data; every hidden state equals the single-device one."""
    from vidax.parallel.mesh import make_mesh
    from vidax.parallel.placement import check_sharded, logical_placement

    _, path, enc = gemma
    mesh = make_mesh(2, 2, 1, devices=jax.devices()[:4])
    sharded = load_component(
        "Gemma3ForConditionalGeneration", path, placement=logical_placement(mesh, DECODER_LM_PARAM_AXES), mesh=mesh
    )
    check_sharded(sharded, DECODER_LM_PARAM_AXES, mesh, "text_encoder")
    assert len(sharded.layers.self_attn.q_proj.kernel[...].sharding.device_set) == 4
    ids, mask = _inputs()
    want = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    got = np.asarray(encode_hidden_states(sharded, ids.numpy(), mask.numpy(), output_layer=None))
    # fp32; the row-parallel sums add their halves in another order: ~1e-7.
    assert max_rel_err(got, want) < FP32_TOL


def test_other_layouts_and_strictness(gemma, tmp_path):
    """transformers' in-memory layout (``model.language_model.*``, ``model.vision_tower.*``) loads
    the same tensors; a tensor outside the language model and the declared unused prefixes is
    reported, not dropped."""
    _, path, enc = gemma
    reader = CheckpointReader(path)
    config = (path / "config.json").read_text()

    def write(rename):
        save_safetensors({rename(k): np.asarray(reader.get(k)) for k in reader.keys()}, tmp_path / "model.safetensors")
        (tmp_path / "config.json").write_text(config)

    write(
        lambda k: (
            "model.language_model." + k[len("language_model.model.") :]
            if k.startswith("language_model.model.")
            else "model." + k
        )
    )
    again = load_component("Gemma3ForConditionalGeneration", tmp_path)
    for (p, a), (_, b) in zip(nnx.to_flat_state(nnx.state(enc)), nnx.to_flat_state(nnx.state(again))):
        np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()), err_msg=str(p))
    write(lambda k: k.replace("multi_modal_projector.", "projector.", 1))
    with pytest.raises(CheckpointError, match="unexpected.*projector"):
        load_component("Gemma3ForConditionalGeneration", tmp_path)


def test_config_forms_and_refusals():
    """transformers 5's nested ``rope_parameters`` and the older flat keys (``rope_theta``,
    ``rope_local_base_freq``, ``rope_scaling``, ``sliding_window_pattern``) give the same config;
    what vidax does not implement is refused."""
    nested = dict(
        model_type="gemma3",
        text_config=dict(TEXT, model_type="gemma3_text"),
        vision_config=VISION,
        mm_tokens_per_image=4,
        image_token_index=96,
        boi_token_index=94,
        eoi_token_index=95,
    )
    flat = dict(
        model_type="gemma3_text",
        **{k: v for k, v in TEXT.items() if k not in ("rope_parameters", "layer_types")},
        rope_theta=1e4,
        rope_local_base_freq=100.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        sliding_window_pattern=2,
        hidden_activation="gelu_pytorch_tanh",
        final_logit_softcapping=30.0,
        attn_logit_softcapping=None,
        use_bidirectional_attention=False,
        cache_implementation="hybrid",
    )
    a, b = Gemma3TextConfig.from_config_dict(nested), Gemma3TextConfig.from_config_dict(flat)
    assert a.attention_kinds == b.attention_kinds
    assert (a.rope_theta, a.rope_scaling_factor, a.rope_local_base_freq, a.sliding_window) == (1e4, 8.0, 100.0, 5)
    assert a.layer_types == tuple(TYPES) and a.layer_kinds == (0, 1, 0, 0)
    assert b.layer_types == ("sliding_attention", "full_attention") * 2  # every 2nd global
    # transformers' defaults: pattern 6, head_dim 256 (not D / N), global 1e6 / local 1e4.
    c = Gemma3TextConfig.from_config_dict(
        dict(
            model_type="gemma3_text", num_hidden_layers=7, hidden_size=64, num_attention_heads=2, num_key_value_heads=1
        )
    )
    assert c.layer_types.count("full_attention") == 1 and c.layer_types[5] == "full_attention"
    assert (c.head_dim, c.rope_theta, c.rope_local_base_freq, c.attention_scale) == (256, 1e6, 1e4, 256**-0.5)
    for key, value, match in (
        ("use_bidirectional_attention", True, "use_bidirectional_attention"),
        ("attn_logit_softcapping", 50.0, "attn_logit_softcapping"),
        ("rope_scaling", {"rope_type": "yarn", "factor": 8.0}, "yarn"),
        ("rope_scaling", {"rope_type": "linear"}, "factor"),
        ("rope_scaling", {"rope_type": "linear", "factor": 8.0, "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ("hidden_activation", "not_an_activation", "hidden_act"),
        ("layer_types", ["sliding_attention", "chunked_attention", "full_attention", "full_attention"], "layer_types"),
        ("layer_types", ["full_attention"] * 3, "layer_types"),
        ("sliding_window", 0, "sliding_window"),
        ("num_key_value_heads", 4, "multiple"),
    ):
        with pytest.raises(ConfigError, match=match):
            Gemma3TextConfig.from_config_dict({**flat, key: value})
    with pytest.raises(ConfigError, match="llama"):
        Gemma3TextConfig.from_config_dict({"model_type": "llama"})
    with pytest.raises(ConfigError, match="unknown top-level"):
        Gemma3TextConfig.from_config_dict({**nested, "audio_config": {}})


def test_streamed_layers_equal_resident(gemma):
    """The layers read from the files 3 at a time (chunks of 3 and 1: both chunk programs) while
    the rest stays resident give the resident encoder's hidden states. float32; the chunk programs
    are the resident scan's layers cut at chunk boundaries, so only XLA's fusion choices around a
    boundary can differ (measured: bit-equal on the CPU); tolerance 1e-6 relative."""
    from vidax.parallel.offload import OffloadConfig, offloaded_blocks, streams_layers

    _, path, enc = gemma
    streamed = load_component("Gemma3ForConditionalGeneration", path, offload=OffloadConfig(chunk=3))
    assert streams_layers(streamed) and not streams_layers(enc)
    blocks = offloaded_blocks(streamed)
    assert blocks.sizes == [3, 1] and blocks.memory_kind == "files"
    ids, mask = _inputs(seed=2)
    want = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    got = np.asarray(encode_hidden_states(streamed, ids.numpy(), mask.numpy(), output_layer=None))
    assert got.shape == want.shape and max_rel_err(got, want) < 1e-6, max_rel_err(got, want)
    # one layer: the first chunk cut short, the second not fetched
    first = np.asarray(encode_hidden_states(streamed, ids.numpy(), mask.numpy(), output_layer=1))
    assert max_rel_err(first, want[1]) < 1e-6 and max_rel_err(want[1], want[2]) > 1e-2
