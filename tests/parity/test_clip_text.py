"""Parity of vidax's CLIP text tower (HunyuanVideo's ``text_encoder_2``) and its tokenizer with
transformers 5.24.

Model: tiny ``CLIPTextModel``s (D 36, N 3, K 12, MLP 50, 3 layers, V 97, 16 positions), every
parameter randomised (LayerNorm weights and biases, token and position embeddings included),
written with ``save_pretrained`` and read back with :func:`~vidax.weights.component.load_component`. Two configs: the
legacy ``eos_token_id=2`` (pool at the largest id, openai/clip-vit-large-patch14 and
HunyuanVideo) with ``quick_gelu``, and ``eos_token_id=5`` (pool at the first id 5) with ``gelu``.
Compared: ``last_hidden_state`` and ``pooler_output`` for a batch of prompts of different
lengths, without the attention mask (what HunyuanVideo passes) and with it.

Tokenizer: a tiny byte-level BPE ``CLIPTokenizer`` written by transformers, read by
:class:`TextTokenizer` with the pipeline's settings (max_length 77, padding to it, truncation).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from tests.parity.helpers import build_clip_tokenizer, max_rel_err, randomize_torch_module  # noqa: E402
from vidax.encoders.clip import CLIPTextConfig, encode_clip_text  # noqa: E402
from vidax.encoders.tokenizer import TextTokenizer, Tokens  # noqa: E402
from vidax.errors import CheckpointError, ConfigError, InputError  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

TINY = dict(
    vocab_size=97, hidden_size=36, intermediate_size=50, num_hidden_layers=3, num_attention_heads=3,
    max_position_embeddings=16, projection_dim=17, layer_norm_eps=1e-5,
)  # fmt: skip
L = 16

# fp32 on both sides, the same operations; only summation orders differ (measured max_rel_err
# 1.4e-7..1.9e-7 on these fixtures). A wrong weight, transpose, mask or pooled row gives errors of order 0.1.
FP32_TOL = 1e-5
# bf16 parameters and matmuls (~2^-9 relative per op) through 3 blocks against the fp32
# reference: measured 5.4e-3 (hidden) / 5.0e-3 (pooled); 3e-2 leaves margin and stays far below
# a structural error (order 0.1 or more).
BF16_TOL = 3e-2

# (eos_token_id, hidden_act, pad id): the legacy rule needs the eos to be the largest id (as
# CLIP's <|endoftext|> 49407 is; its tokenizer pads with it too); the new rule any id.
CASES = {"legacy_eos2": (2, "quick_gelu", 96), "eos5": (5, "gelu", 1)}


def _save(tmp_path_factory, case: str):
    """(torch model, folder, eos id used in the prompts, pad id) of one of CASES."""
    eos_cfg, act, pad = CASES[case]
    ref = transformers.CLIPTextModel(
        transformers.CLIPTextConfig(**TINY, eos_token_id=eos_cfg, bos_token_id=95, pad_token_id=pad, hidden_act=act)
    ).eval()
    randomize_torch_module(ref, seed=11 + eos_cfg)
    path = tmp_path_factory.mktemp("clip_text")
    ref.save_pretrained(path)
    eos = 96 if eos_cfg == 2 else eos_cfg
    return ref, path, eos, pad


@pytest.fixture(scope="module", params=list(CASES))
def saved(request, tmp_path_factory):
    return _save(tmp_path_factory, request.param)


def _prompts(eos: int, pad: int, lengths=(3, 9, 14), seed: int = 0):
    """(B, L) ids ``bos, words..., eos, pad...`` with words that are neither eos nor pad, and mask."""
    rng = np.random.default_rng(seed)
    ids = np.full((len(lengths), L), pad, np.int64)
    mask = np.zeros((len(lengths), L), np.int64)
    words = np.array([i for i in range(6, 95) if i not in (eos, pad)])
    for row, n in enumerate(lengths):
        ids[row, 0] = 95
        ids[row, 1 : n - 1] = rng.choice(words, n - 2)
        ids[row, n - 1] = eos
        mask[row, :n] = 1
    return ids, mask


def _ref(ref, ids, mask=None):
    with torch.no_grad():
        out = ref(torch.from_numpy(ids), attention_mask=None if mask is None else torch.from_numpy(mask))
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


def _vidax(enc, ids, mask=None):
    tokens = Tokens(ids.astype(np.int32), (np.ones_like(ids) if mask is None else mask).astype(np.int32), None)
    hidden, pooled = encode_clip_text(enc, tokens, use_attention_mask=mask is not None)
    return np.asarray(hidden.astype(jnp.float32)), np.asarray(pooled.astype(jnp.float32))


@pytest.fixture(scope="module")
def loaded(saved):
    return load_component("CLIPTextModel", saved[1])


def test_fp32_hidden_and_pooled_match_reference(saved, loaded):
    ref, _, eos, pad = saved
    ids, mask = _prompts(eos, pad)
    for m in (None, mask):  # HunyuanVideo passes no mask; the masked form is the reference's too
        want_h, want_p = _ref(ref, ids, m)
        got_h, got_p = _vidax(loaded, ids, m)
        assert got_h.shape == want_h.shape == (3, L, 36) and got_p.shape == want_p.shape == (3, 36)
        assert max_rel_err(got_h, want_h) < FP32_TOL, max_rel_err(got_h, want_h)
        assert max_rel_err(got_p, want_p) < FP32_TOL, max_rel_err(got_p, want_p)
    # The pooled row is each prompt's eos position (not the last token, not row 0).
    np.testing.assert_allclose(got_p, got_h[np.arange(3), [2, 8, 13]], rtol=0, atol=0)
    # Not vacuous: the mask changes the padded positions, and other prompts give other outputs.
    unmasked_h, _ = _ref(ref, ids)
    assert max_rel_err(unmasked_h[0, 3:], want_h[0, 3:]) > 1e-2
    other_h, other_p = _ref(ref, *_prompts(eos, pad, seed=1))
    assert max_rel_err(other_p, want_p) > 1e-2


def test_causal_mask_is_applied(saved, loaded):
    """Changing token 6 leaves positions 0..5 of the reference unchanged (causality); vidax
    matches, and the same vidax blocks run without the causal mask would not."""
    ref, _, eos, pad = saved
    ids, _ = _prompts(eos, pad, lengths=(12, 12, 5))
    ids[1] = ids[0]
    ids[1, 6] = 7 if ids[0, 6] != 7 else 8  # row 1 = row 0 with a later token changed
    want, _ = _ref(ref, ids)
    # Same inputs through the same operations: earlier positions agree to rounding, later differ.
    assert np.abs(want[1, :6] - want[0, :6]).max() < 1e-6
    assert max_rel_err(want[1, 6:], want[0, 6:]) > 1e-2
    got, _ = _vidax(loaded, ids)
    assert max_rel_err(got, want) < FP32_TOL
    assert np.abs(got[1, :6] - got[0, :6]).max() < 1e-6

    # Without the causal mask positions 0..5 would see token 6: the checks above can fail.
    def bidirectional(enc, x):
        h = enc.embeddings(x)
        return enc.final_layer_norm(enc.encoder(h, enc.config.num_hidden_layers, causal=False))

    full = np.asarray(nnx.jit(bidirectional)(loaded, jnp.asarray(ids, jnp.int32)))
    assert max_rel_err(full[1, :6], full[0, :6]) > 1e-3  # measured 6e-3..3e-2
    assert max_rel_err(full, want) > 1e-2


def test_eos_rule(saved, loaded):
    """eos_token_id == 2: the largest id of the row (first of equals); else the first eos."""
    ref, _, eos, pad = saved
    cfg = loaded.config
    ids, _ = _prompts(eos, pad, lengths=(5, 10, 7))
    if cfg.eos_token_id == 2:
        ids[0, 3] = 96  # the row's largest id before its eos: the legacy rule pools here
        ids[1, 1:] = 96  # padding with the eos id (as CLIP's tokenizer): first of the equal maxima
        expect = [3, 1, 6]
    else:
        ids[0, 2] = 5  # two eos tokens: the first one
        ids[1, :] = 1  # no eos at all: argmax of all-False is 0
        expect = [2, 0, 6]
    want_h, want_p = _ref(ref, ids)
    got_h, got_p = _vidax(loaded, ids)
    assert max_rel_err(got_p, want_p) < FP32_TOL
    np.testing.assert_allclose(want_p, want_h[np.arange(3), expect], rtol=0, atol=1e-6)
    assert cfg.legacy_eos_pooling == (cfg.eos_token_id == 2)


def test_bf16_close_to_reference(tmp_path_factory):
    """One case (a compile each): HunyuanVideo's legacy-eos quick_gelu tower."""
    ref, path, eos, pad = _save(tmp_path_factory, "legacy_eos2")
    enc = load_component("CLIPTextModel", path, dtype=jnp.bfloat16)
    assert enc.encoder.layers.mlp.fc1.kernel[...].dtype == jnp.bfloat16
    ids, _ = _prompts(eos, pad, seed=3)
    want_h, want_p = _ref(ref, ids)
    got_h, got_p = _vidax(enc, ids)
    assert max_rel_err(got_h, want_h) < BF16_TOL and max_rel_err(got_p, want_p) < BF16_TOL


def test_transformers4_prefixed_checkpoint_and_refusals(saved, tmp_path):
    """Files of transformers 4 prefix keys with ``text_model.``; a projection head is refused."""
    ref, path, eos, pad = saved
    tensors = load_file(str(path / "model.safetensors"))
    save_file({f"text_model.{k}": v for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    ids, _ = _prompts(eos, pad, seed=4)
    _, want_p = _ref(transformers.CLIPTextModel.from_pretrained(tmp_path).eval(), ids)
    _, got_p = _vidax(load_component("CLIPTextModel", tmp_path), ids)
    assert max_rel_err(got_p, want_p) < FP32_TOL
    save_file({**tensors, "text_projection.weight": torch.zeros(17, 36)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="text_projection"):
        load_component("CLIPTextModel", tmp_path)


def test_config_and_inputs(saved, loaded):
    full = transformers.CLIPConfig(text_config=TINY).to_dict()
    a = CLIPTextConfig.from_config_dict(transformers.CLIPTextConfig(**TINY).to_dict())
    b = CLIPTextConfig.from_config_dict(full)
    assert a == b and (a.head_dim, a.eos_token_id, a.hidden_act) == (12, 49407, "quick_gelu")
    with pytest.raises(ConfigError, match="eos_token_id"):
        CLIPTextConfig.from_config_dict({**TINY, "eos_token_id": [2, 3]})
    with pytest.raises(ConfigError, match="hidden_act"):
        CLIPTextConfig.from_config_dict({**TINY, "hidden_act": "mish"})
    with pytest.raises(ConfigError, match="clip_text_model"):
        CLIPTextConfig.from_config_dict({**TINY, "model_type": "clip_vision_model"})
    with pytest.raises(InputError, match="max_position_embeddings"):
        loaded.encode(np.zeros((1, L + 1), np.int32))
    with pytest.raises(InputError, match="integer"):
        loaded.encode(np.zeros((1, 4), np.float32))
    with pytest.raises(InputError, match="attention_mask"):
        loaded.encode(np.zeros((1, 4), np.int32), np.ones((1, 5), np.int32))


# ----------------------------------------------------------------------------- tokenizer


@pytest.fixture(scope="module")
def clip_tokenizer(tmp_path_factory):
    """A byte-level BPE CLIPTokenizer (every byte, with and without ``</w>``, a few merges,
    <|startoftext|> / <|endoftext|> last as in CLIP) saved by transformers."""
    path = tmp_path_factory.mktemp("clip_tokenizer")
    tok = build_clip_tokenizer(path)
    return tok, path


def test_tokenizer_matches_clip_tokenizer(clip_tokenizer):
    tok, path = clip_tokenizer
    prompts = ["The cat, under   the SKY!", "a", "a very long prompt " * 12]  # the last is > 77 tokens
    want = tok(prompts, padding="max_length", max_length=77, truncation=True)
    got = TextTokenizer(path)(prompts, 77)
    np.testing.assert_array_equal(got.input_ids, np.array(want["input_ids"]))
    np.testing.assert_array_equal(got.attention_mask, np.array(want["attention_mask"]))
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    assert got.input_ids.shape == (3, 77) and got.input_ids[2, -1] == eos  # truncated, eos kept
    assert (got.input_ids[1, 3:] == eos).all()  # CLIP pads with <|endoftext|>
    assert list(got.lengths[:2]) == [len(tok(p)["input_ids"]) for p in prompts[:2]]
