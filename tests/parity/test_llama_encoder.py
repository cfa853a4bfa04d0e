"""Parity of vidax's decoder text encoder with transformers' ``LlamaModel`` (HunyuanVideo's text
encoder) and the Llama language model of a ``LlavaForConditionalGeneration`` (its I2V one).

Tiny models with distinct sizes: D 36, N 4 query heads, N_kv 2 (grouped-query), K 8 (so N·K = 32
!= D), MLP 52, 3 layers, V 97, RoPE theta 1000 (angles vary a lot over a few tokens); every
parameter randomised, written with ``save_pretrained`` and read back with the production loader.
Inputs: a batch of a long (23 tokens) and a short (9 tokens) prompt, right padded to 23, with the
attention mask. All ``output_hidden_states`` entries are compared (the selected HunyuanVideo layer
``-3`` and ``last_hidden_state`` among them), padded rows included: with right padding the
reference's padded rows attend to every real token, and so do vidax's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flax import nnx
from transformers import LlamaConfig, LlamaModel, LlavaConfig, LlavaForConditionalGeneration

from tests.parity.helpers import max_rel_err, randomize_torch_module
from tests.paths import REFERENCE_CONFIGS
from vidax.encoders.decoder_lm import encode_hidden_states
from vidax.encoders.decoder_lm_config import LlamaTextConfig
from vidax.errors import ConfigError
from vidax.weights import CheckpointReader, save_safetensors
from vidax.weights.component import load_component

TEXT = dict(
    vocab_size=97,
    hidden_size=36,
    intermediate_size=52,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    rms_norm_eps=1e-5,
    rope_theta=1000.0,
)
B, L, LENGTHS = 2, 23, (23, 9)
# fp32 on both sides; only summation order and the cos / sin / exp kernels differ (measured
# max_rel_err 1.9e-7 over the hidden states).
FP32_TOL = 1e-5


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, TEXT["vocab_size"], (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    return ids, mask


def _ref_states(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    return [h.numpy() for h in out.hidden_states]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """LlamaModel with q/k/v/o and MLP biases (every optional parameter present)."""
    torch.manual_seed(0)
    ref = LlamaModel(LlamaConfig(**TEXT, attention_bias=True, mlp_bias=True)).eval()
    randomize_torch_module(ref, seed=1)
    path = tmp_path_factory.mktemp("llama")
    ref.save_pretrained(path)
    return ref, path, load_component("LlamaModel", path)


def test_all_hidden_states_match_llama(llama):
    ref, _, enc = llama
    ids, mask = _inputs()
    want = _ref_states(ref, ids, mask)
    assert len(want) == TEXT["num_hidden_layers"] + 1
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    assert got.shape == (4, B, L, TEXT["hidden_size"])
    for i, w in enumerate(want):
        assert max_rel_err(got[i], w) < FP32_TOL, f"hidden_states[{i}]: {max_rel_err(got[i], w):.2e}"
    # The reference depends on the input: the two prompts' states differ well beyond tolerance.
    assert max_rel_err(want[-1][0], want[-1][1]) > 0.1


def test_selected_layer_and_last(llama):
    """HunyuanVideo's ``hidden_states[-(num_hidden_layers_skip + 1)]`` (skip 2) is the output of
    layer n - 2 *before* any norm; ``-1`` is after the final norm."""
    ref, _, enc = llama
    ids, mask = _inputs()
    want = _ref_states(ref, ids, mask)
    for layer in (-3, -1):
        got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=layer))
        assert max_rel_err(got, want[layer]) < FP32_TOL, (layer, max_rel_err(got, want[layer]))


def test_padded_batch_equals_each_prompt_alone_and_is_causal(llama):
    _, _, enc = llama
    ids, mask = _inputs()
    batch = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=-3))
    n = LENGTHS[1]
    alone = np.asarray(encode_hidden_states(enc, ids.numpy()[1:, :n], output_layer=-3))
    # Same math on fewer (masked) keys: only summation order differs.
    assert max_rel_err(batch[1, :n], alone[0]) < FP32_TOL
    # Causality: changing token 5 changes positions >= 5 only.
    changed = ids.numpy()[1:, :n].copy()
    changed[0, 5] = (changed[0, 5] + 1) % TEXT["vocab_size"]
    other = np.asarray(encode_hidden_states(enc, changed, output_layer=-3))
    np.testing.assert_array_equal(other[0, :5], alone[0, :5])
    assert np.abs(other[0, 5:] - alone[0, 5:]).min(axis=-1).max() > 0


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    """A LLaVA checkpoint (tiny CLIP vision tower) whose language model is the released one's
    kind: no attention / MLP biases."""
    torch.manual_seed(0)
    cfg = LlavaConfig(
        text_config=dict(TEXT, model_type="llama"),
        vision_config=dict(
            model_type="clip_vision_model",
            hidden_size=16,
            intermediate_size=20,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=28,
            patch_size=14,
        ),
        image_token_index=TEXT["vocab_size"] - 1,
    )
    ref = LlavaForConditionalGeneration(cfg).eval()
    randomize_torch_module(ref, seed=2)
    path = tmp_path_factory.mktemp("llava")
    ref.save_pretrained(path)
    return ref, path


def test_llava_language_model(llava, tmp_path):
    ref, path = llava
    keys = CheckpointReader(path).keys()
    assert any(k.startswith("vision_tower.") for k in keys) and "language_model.lm_head.weight" in keys
    enc = load_component("LlamaModel", path)
    ids, mask = _inputs(seed=3)
    ids = ids % (TEXT["vocab_size"] - 1)  # text only: no image token
    want = _ref_states(ref, ids, mask)
    got = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=None))
    for i, w in enumerate(want):
        assert max_rel_err(got[i], w) < FP32_TOL, f"hidden_states[{i}]: {max_rel_err(got[i], w):.2e}"

    # The same tensors in the layout transformers 5 keeps in memory (model.language_model.*, ...).
    reader = CheckpointReader(path)
    renamed = {}
    for k in reader.keys():
        if k.startswith("language_model.lm_head."):
            new = k.replace("language_model.lm_head.", "lm_head.")
        elif k.startswith("language_model.model."):
            new = "model.language_model." + k[len("language_model.model.") :]
        else:
            new = "model." + k
        renamed[new] = np.asarray(reader.get(k))
    save_safetensors(renamed, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    again = load_component("LlamaModel", tmp_path)
    for (p, a), (_, b) in zip(nnx.to_flat_state(nnx.state(enc)), nnx.to_flat_state(nnx.state(again))):
        np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()), err_msg=str(p))


def test_config_reads_released_file_and_refuses_what_it_lacks():
    with open(f"{REFERENCE_CONFIGS}/hunyuanvideo-community__HunyuanVideo/text_encoder/config.json") as f:
        raw = json.load(f)
    cfg = LlamaTextConfig.from_config_dict(raw)
    assert (cfg.head_dim, cfg.num_key_value_heads, cfg.rope_theta, cfg.qkv_bias) == (128, 8, 500000.0, False)
    for key, value, match in (
        ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}, "llama3"),
        ("hidden_act", "not_an_activation", "hidden_act"),
        ("num_key_value_heads", 5, "multiple"),
        ("sliding_window", 8, "sliding_window"),
    ):
        with pytest.raises(ConfigError, match=match):
            LlamaTextConfig.from_config_dict({**raw, key: value})
    with pytest.raises(ConfigError, match="mistral"):
        LlamaTextConfig.from_config_dict({"model_type": "llava", "text_config": {"model_type": "mistral"}})


def test_tensor_parallel_equals_single_device(llama):
    """HunyuanVideo's 8B Llama on a (data=2, tensor=2) mesh: q/k/v and gate/up column-parallel,
    o/down row-parallel (4 query and 2 key/value heads split over tensor=2), the padded batch over
    data; the selected layer equals the single-device one."""
    import jax

    from vidax.encoders.decoder_lm import DECODER_LM_PARAM_AXES
    from vidax.parallel.mesh import make_mesh
    from vidax.parallel.placement import check_sharded, logical_placement

    _, path, enc = llama
    mesh = make_mesh(2, 2, 1, devices=jax.devices()[:4])
    sharded = load_component("LlamaModel", path, placement=logical_placement(mesh, DECODER_LM_PARAM_AXES), mesh=mesh)
    check_sharded(sharded, DECODER_LM_PARAM_AXES, mesh, "text_encoder")
    ids, mask = _inputs()
    want = np.asarray(encode_hidden_states(enc, ids.numpy(), mask.numpy(), output_layer=-3))
    got = np.asarray(encode_hidden_states(sharded, ids.numpy(), mask.numpy(), output_layer=-3))
    # fp32; the row-parallel sums add their halves in another order: ~1e-7.
    assert max_rel_err(got, want) < FP32_TOL
