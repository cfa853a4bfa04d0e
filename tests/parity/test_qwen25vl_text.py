"""Parity of vidax's decoder text encoder with the text tower of transformers'
``Qwen2_5_VLForConditionalGeneration`` (Cosmos-Predict2.5's text encoder), text-only input.

Tiny model with distinct sizes: D 40, N 5 query heads, N_kv 1 (grouped-query), K = D / N = 8,
MLP 44, 3 layers, V 89, RoPE theta 1000 with an M-RoPE section (1, 1, 2) (for text the three
position streams are equal, so it is the 1-D RoPE); a tiny vision tower so ``save_pretrained``
writes a full checkpoint whose ``visual.*`` and ``lm_head`` tensors the loader declares unused.
Every parameter is randomised. The model is called as the Cosmos pipeline calls it
(``output_hidden_states=True``; no attention mask: prompts padded to the full length are then
plain causal input) and, separately, with a right-padding attention mask; all hidden states are
compared.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.encoders.decoder_lm import encode_hidden_states
from vidax.encoders.decoder_lm_config import Qwen25VLTextConfig
from vidax.errors import CheckpointError, ConfigError
from vidax.weights import CheckpointReader, save_safetensors
from vidax.weights.component import load_component

TEXT = dict(
    vocab_size=89,
    hidden_size=40,
    intermediate_size=44,
    num_hidden_layers=3,
    num_attention_heads=5,
    num_key_value_heads=1,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "mrope_section": [1, 1, 2]},
)
VISION = dict(depth=1, hidden_size=16, intermediate_size=20, num_heads=2, out_hidden_size=40, fullatt_block_indexes=[0])
B, L, LENGTHS = 2, 21, (21, 7)
# fp32 on both sides; only summation order and the cos / sin / exp kernels differ (measured
# max_rel_err 4.0e-7 over the hidden states, with and without the mask).
FP32_TOL = 1e-5


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    torch.manual_seed(0)
    ref = Qwen2_5_VLForConditionalGeneration(
        Qwen2_5_VLConfig(
            text_config=TEXT,
            vision_config=VISION,
            image_token_id=88,
            video_token_id=87,
            vision_start_token_id=86,
            vision_end_token_id=85,
        )
    ).eval()
    randomize_torch_module(ref, seed=4)
    path = tmp_path_factory.mktemp("qwen25vl")
    ref.save_pretrained(path)
    return ref, path, load_component("Qwen2_5_VLForConditionalGeneration", path)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 80, (B, L), generator=g)  # below the vision token ids: text only
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    return ids, mask


def _ref_states(ref, ids, mask=None):
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return np.stack([h.numpy() for h in out.hidden_states])


def test_checkpoint_holds_vision_weights_that_are_declared_unused(qwen):
    _, path, _ = qwen
    keys = CheckpointReader(path).keys()
    assert any(k.startswith("visual.") for k in keys) and "lm_head.weight" in keys


@pytest.mark.parametrize("masked", [False, True], ids=["cosmos-no-mask", "right-padding-mask"])
def test_all_hidden_states_match(qwen, masked):
    ref, _, enc = qwen
    ids, mask = _inputs()
    want = _ref_states(ref, ids, mask if masked else None)
    assert want.shape == (TEXT["num_hidden_layers"] + 1, B, L, TEXT["hidden_size"])
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy() if masked else None, output_layer=None))
    assert got.shape == want.shape
    for i in range(len(want)):
        assert max_rel_err(got[i], want[i]) < FP32_TOL, f"hidden_states[{i}]: {max_rel_err(got[i], want[i]):.2e}"
    # The reference depends on the input (the two prompts differ well beyond tolerance), and the
    # mask matters for the short prompt's padded rows only.
    assert max_rel_err(want[-1, 0], want[-1, 1]) > 0.1


def test_mask_changes_padded_rows_only(qwen):
    ref, _, _ = qwen
    ids, mask = _inputs()
    free, masked = _ref_states(ref, ids), _ref_states(ref, ids, mask)
    n = LENGTHS[1]
    assert max_rel_err(masked[:, 1, :n], free[:, 1, :n]) < FP32_TOL
    assert max_rel_err(masked[-1, 1, n:], free[-1, 1, n:]) > 0.1


def test_bf16_close_to_fp32_reference(qwen):
    """bf16 parameters and matmuls (fp32 residual, norms, RoPE, softmax) against fp32."""
    ref, path, _ = qwen
    enc = load_component("Qwen2_5_VLForConditionalGeneration", path, dtype=jnp.bfloat16)
    ids, _ = _inputs()
    want = _ref_states(ref, ids)
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), output_layer=None).astype(jnp.float32))
    # Each bf16 rounding costs ~2^-9 relative and three layers compound them: measured 3.7e-3 ..
    # 8.2e-3 over the states, while transformers' own bf16 run is 3.7e-3 .. 9.6e-3 from its fp32.
    for i in range(len(want)):
        assert max_rel_err(got[i], want[i]) < 2e-2, (i, max_rel_err(got[i], want[i]))


def test_other_layouts_and_strictness(qwen, tmp_path):
    """The transformers-5 in-memory layout (``model.language_model.*``, ``model.visual.*``) loads
    the same tensors; a vision tensor outside the declared unused prefixes is reported."""
    _, path, enc = qwen
    reader = CheckpointReader(path)
    config = (path / "config.json").read_text()

    def write(rename):
        save_safetensors({rename(k): np.asarray(reader.get(k)) for k in reader.keys()}, tmp_path / "model.safetensors")
        (tmp_path / "config.json").write_text(config)

    write(
        lambda k: (
            k.replace("model.", "model.language_model.", 1).replace("visual.", "model.visual.", 1)
            if not k.startswith("lm_head")
            else k
        )
    )
    again = load_component("Qwen2_5_VLForConditionalGeneration", tmp_path)
    for (p, a), (_, b) in zip(nnx.to_flat_state(nnx.state(enc)), nnx.to_flat_state(nnx.state(again))):
        np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()), err_msg=str(p))
    write(lambda k: k.replace("visual.", "vision_model.", 1))
    with pytest.raises(CheckpointError, match="unexpected.*vision_model"):
        load_component("Qwen2_5_VLForConditionalGeneration", tmp_path)


def test_config_forms_and_refusals():
    """Flat (transformers 4) and nested (transformers 5) Qwen2.5-VL config.json forms give the
    same config; unimplemented settings are refused."""
    flat = dict(
        model_type="qwen2_5_vl",
        vocab_size=89,
        hidden_size=40,
        intermediate_size=44,
        num_hidden_layers=3,
        num_attention_heads=5,
        num_key_value_heads=1,
        rms_norm_eps=1e-6,
        rope_theta=1000.0,
        rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
        use_sliding_window=False,
        sliding_window=32768,
        max_window_layers=3,
        vision_config=VISION,
        image_token_id=88,
        tie_word_embeddings=False,
        architectures=["Qwen2_5_VLForConditionalGeneration"],
    )
    nested = dict(
        model_type="qwen2_5_vl",
        text_config=dict(TEXT, model_type="qwen2_5_vl_text"),
        vision_config=VISION,
        image_token_id=88,
    )
    a, b = Qwen25VLTextConfig.from_config_dict(flat), Qwen25VLTextConfig.from_config_dict(nested)
    assert a == b and a.head_dim == 8 and a.mrope_section == (1, 1, 2) and a.rope_theta == 1000.0
    assert (a.qkv_bias, a.o_bias, a.mlp_bias) == (True, False, False)
    # Without a rope_theta anywhere, the reference's Qwen2.5-VL default 1e6 (not Llama's 1e4).
    del flat["rope_theta"]
    assert Qwen25VLTextConfig.from_config_dict(flat).rope_theta == 1e6
    for key, value, match in (
        ("use_sliding_window", True, "use_sliding_window"),
        ("rope_scaling", {"type": "yarn", "factor": 4.0}, "yarn"),
        ("rope_scaling", {"type": "mrope", "mrope_section": [1, 1, 1]}, "mrope_section"),
        ("layer_types", ["full_attention", "sliding_attention", "full_attention"], "layer_types"),
        ("head_dim", 16, "head_dim"),
        ("hidden_act", "not_an_activation", "hidden_act"),
    ):
        with pytest.raises(ConfigError, match=match):
            Qwen25VLTextConfig.from_config_dict({**flat, key: value})
