"""Parity of vidax's T5/UMT5 encoder with transformers' T5EncoderModel / UMT5EncoderModel.

Tiny models of distinct sizes (D 40, K 12, N 3, d_ff 56, 3 layers, V 101, 8 buckets, max distance
20), every parameter randomised, written with ``save_pretrained`` and read back with
``load_component``. Inputs: batch 2 with real lengths 29 and 13 (padding has attention_mask 0),
L = 29 > max_distance so the saturated bucket is used. All positions are compared, padded ones
included.
"""

from __future__ import annotations

import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel
from transformers.models.t5.modeling_t5 import T5Attention

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.encoders.t5 import T5EncoderConfig, relative_position_bucket
from vidax.errors import CheckpointError, ConfigError, InputError
from vidax.weights import CheckpointReader, save_safetensors
from vidax.weights.component import load_component

TINY = dict(
    vocab_size=101,
    d_model=40,
    d_kv=12,
    num_heads=3,
    d_ff=56,
    num_layers=3,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
)
MODELS = {"umt5": (UMT5Config, UMT5EncoderModel), "t5": (T5Config, T5EncoderModel)}
B, L, LENGTHS = 2, 29, (29, 13)

# fp32 on both sides; only summation order differs (measured max_rel_err ~6e-7).
FP32_TOL = 1e-5
# bf16 parameters and matmuls against the fp32 reference: each rounding costs ~2^-9 relative and
# 3 blocks compound them. Over 10 seeds vidax measured 0.9e-2..2.3e-2 (these fixtures: t5 2.3e-2,
# umt5 1.0e-2) and transformers' own bf16 run 0.8e-2..2.3e-2 away from its fp32 output.
BF16_TOL = 4e-2


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, TINY["vocab_size"], (B, L), generator=g)
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
    return ids, mask


def _run(encoder, ids, mask):
    fn = nnx.jit(lambda e, i, m: e(i, m))
    out = fn(encoder, jnp.asarray(ids.numpy(), jnp.int32), jnp.asarray(mask.numpy(), jnp.int32))
    return np.asarray(out.astype(jnp.float32))


def _build(tmp_path_factory, kind: str, seed: int, **overrides):
    config_cls, model_cls = MODELS[kind]
    cfg = config_cls(**{**TINY, "feed_forward_proj": "gated-gelu", **overrides})
    model = model_cls(cfg).eval()
    randomize_torch_module(model, seed)
    path = tmp_path_factory.mktemp(f"{kind}_text_encoder")
    model.save_pretrained(path)
    return model, str(path)


@pytest.fixture(scope="module", params=sorted(MODELS))
def saved(request, tmp_path_factory):
    """(kind, torch model, checkpoint folder, input_ids, attention_mask, fp32 reference output)."""
    kind = request.param
    model, path = _build(tmp_path_factory, kind, seed={"umt5": 11, "t5": 12}[kind])
    ids, mask = _inputs(seed=3)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    return kind, model, path, ids, mask, ref


def test_fp32_parity(saved):
    kind, _, path, ids, mask, ref = saved
    encoder = load_component("UMT5EncoderModel", path)
    out = _run(encoder, ids, mask)
    assert out.shape == (B, L, TINY["d_model"])
    err = max_rel_err(out, ref)
    print(f"{kind} fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL, f"{kind}: fp32 max_rel_err {err:.2e}"


def test_bf16_against_fp32_reference(saved):
    kind, _, path, ids, mask, ref = saved
    # transformers keeps `_keep_in_fp32_modules` (wo) in fp32 for float16 loads only.
    ref_bf16 = MODELS[kind][1].from_pretrained(path, dtype=torch.bfloat16)
    assert {p.dtype for p in ref_bf16.parameters()} == {torch.bfloat16}
    encoder = load_component("UMT5EncoderModel", path, dtype=jnp.bfloat16)
    params = nnx.to_flat_state(nnx.state(encoder, nnx.Param))
    assert {str(v.get_value().dtype) for _, v in params} == {"bfloat16"}
    fn = nnx.jit(lambda e, i, m: e(i, m))
    raw = fn(encoder, jnp.asarray(ids.numpy(), jnp.int32), jnp.asarray(mask.numpy(), jnp.int32))
    assert raw.dtype == jnp.bfloat16
    err = max_rel_err(np.asarray(raw.astype(jnp.float32)), ref)
    print(f"{kind} bf16 max_rel_err={err:.2e}")
    assert err < BF16_TOL, f"{kind}: bf16 max_rel_err {err:.2e}"


def test_padding_changes_real_tokens_only_through_mask(saved):
    """The masked keys really are ignored: changing padded token ids leaves row 1's real
    positions unchanged (and the reference agrees on the padded positions)."""
    kind, model, path, ids, mask, ref = saved
    ids2 = ids.clone()
    ids2[1, LENGTHS[1] :] = (ids2[1, LENGTHS[1] :] + 7) % TINY["vocab_size"]
    encoder = load_component("UMT5EncoderModel", path)
    out2 = _run(encoder, ids2, mask)
    n = LENGTHS[1]
    np.testing.assert_allclose(out2[1, :n], ref[1, :n], rtol=0, atol=FP32_TOL * np.abs(ref).max())
    with torch.no_grad():
        ref2 = model(input_ids=ids2, attention_mask=mask).last_hidden_state.numpy()
    assert max_rel_err(out2, ref2) < FP32_TOL
    assert np.abs(ref2[1, n:] - ref[1, n:]).max() > 1e-3  # padded positions did change


def test_all_padding_row_and_no_mask(saved):
    """A row whose mask is all zero attends uniformly (as the reference); mask=None = all ones."""
    kind, model, path, ids, _, _ = saved
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1] = 0
    encoder = load_component("UMT5EncoderModel", path)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        ref_none = model(input_ids=ids).last_hidden_state.numpy()
    assert max_rel_err(_run(encoder, ids, mask), ref) < FP32_TOL
    out_none = np.asarray(nnx.jit(lambda e, i: e(i))(encoder, jnp.asarray(ids.numpy(), jnp.int32)))
    assert max_rel_err(out_none, ref_none) < FP32_TOL


@pytest.mark.parametrize("kind,proj", [("t5", "relu"), ("t5", "gated-silu"), ("umt5", "gelu"), ("umt5", "gated-relu")])
def test_other_feed_forward_variants(tmp_path_factory, kind, proj):
    model, path = _build(tmp_path_factory, kind, seed=21, feed_forward_proj=proj)
    ids, mask = _inputs(seed=4)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    err = max_rel_err(_run(load_component("UMT5EncoderModel", path), ids, mask), ref)
    assert err < FP32_TOL, f"{kind} {proj}: max_rel_err {err:.2e}"


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (32, 64), (16, 100)])
def test_relative_position_bucket_matches_reference(num_buckets, max_distance):
    rel = np.arange(-4096, 4097)
    ref = T5Attention._relative_position_bucket(
        torch.from_numpy(rel),
        bidirectional=True,
        num_buckets=num_buckets,
        max_distance=max_distance,
    ).numpy()
    np.testing.assert_array_equal(relative_position_bucket(rel, num_buckets, max_distance), ref)


def _copy_with(path: str, dst: str, edit) -> str:
    """Copy a checkpoint folder, passing its tensors through ``edit(dict) -> dict``."""
    os.makedirs(dst)
    shutil.copy(os.path.join(path, "config.json"), dst)
    reader = CheckpointReader(path)
    tensors = {k: np.array(reader.get(k)) for k in reader.keys()}
    save_safetensors(edit(tensors), os.path.join(dst, "model.safetensors"))
    return dst


def test_embed_tokens_key_is_what_the_encoder_reads(tmp_path, saved):
    """save_pretrained writes only shared.weight. With encoder.embed_tokens.weight also present
    and different, transformers un-ties them and the encoder reads embed_tokens; alone, it fills
    the embedding. vidax follows both."""
    kind, _, path, ids, mask, _ = saved
    config_cls, model_cls = MODELS[kind]
    assert "encoder.embed_tokens.weight" not in CheckpointReader(path).keys()
    rng = np.random.default_rng(0)

    def both(t):
        shape = t["shared.weight"].shape
        t["encoder.embed_tokens.weight"] = rng.standard_normal(shape).astype(np.float32)
        return t

    def only_embed(t):
        t = both(t)
        del t["shared.weight"]
        return t

    for name, edit in (("both", both), ("only_embed", only_embed)):
        dst = _copy_with(path, str(tmp_path / name), edit)
        ref_model = model_cls.from_pretrained(dst).eval()
        with torch.no_grad():
            ref = ref_model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
        err = max_rel_err(_run(load_component("UMT5EncoderModel", dst), ids, mask), ref)
        assert err < FP32_TOL, f"{kind} {name}: max_rel_err {err:.2e}"


def test_checkpoint_errors(tmp_path, saved):
    kind, _, path, _, _, _ = saved
    key = "encoder.block.1.layer.1.DenseReluDense.wo.weight"

    def wrong_shape(t):
        t[key] = t[key][:, :-1].copy()
        return t

    def extra_key(t):
        t["encoder.block.1.layer.0.SelfAttention.extra.weight"] = np.zeros((4, 4), np.float32)
        return t

    def missing_key(t):
        del t["encoder.final_layer_norm.weight"]
        return t

    def umt5_bias_in_t5(t):  # a per-layer bias table is unexpected for T5, required for UMT5
        if kind == "t5":
            t["encoder.block.2.layer.0.SelfAttention.relative_attention_bias.weight"] = np.zeros(
                (TINY["relative_attention_num_buckets"], TINY["num_heads"]), np.float32
            )
        else:
            del t["encoder.block.2.layer.0.SelfAttention.relative_attention_bias.weight"]
        return t

    for name, edit, needle in (
        ("wrong_shape", wrong_shape, key),
        ("extra_key", extra_key, "SelfAttention.extra.weight"),
        ("missing_key", missing_key, "encoder.final_layer_norm.weight"),
        ("bias_layout", umt5_bias_in_t5, "block.2.layer.0.SelfAttention.relative_attention_bias"),
    ):
        dst = _copy_with(path, str(tmp_path / name), edit)
        with pytest.raises(CheckpointError, match=needle.replace(".", r"\.")):
            load_component("UMT5EncoderModel", dst)


def test_config_and_input_errors(tmp_path, saved):
    kind, _, path, ids, _, _ = saved
    with open(os.path.join(path, "config.json")) as f:
        base = json.load(f)
    cfg = T5EncoderConfig.from_config_dict(base)
    assert (cfg.model_type, cfg.dense_act_fn, cfg.is_gated_act) == (kind, "gelu_new", True)
    for change, needle in (
        ({"feed_forward_proj": "gated-foo", "dense_act_fn": None}, "foo"),
        ({"dense_act_fn": "quick_gelu"}, "quick_gelu"),
        ({"feed_forward_proj": "swiglu-gelu"}, "feed_forward_proj"),
        ({"is_decoder": True}, "is_decoder"),
        ({"model_type": "mt5"}, "model_type"),
        ({"model_type": None, "some_new_switch": 1}, "some_new_switch"),  # no model_type: strict
        ({"hidden_size": 12}, "hidden_size"),  # transformers' alias of d_model: read there, refused here
        ({"relative_attention_max_distance": 2}, "relative_attention_max_distance"),
    ):
        bad = {k: v for k, v in {**base, **change}.items() if v is not None}
        with pytest.raises(ConfigError, match=needle):
            T5EncoderConfig.from_config_dict(bad)
    # A key transformers keeps and its model never reads is ignored, as there.
    assert T5EncoderConfig.from_config_dict({**base, "some_new_switch": 1}) == cfg
    with pytest.raises(InputError, match="dtype"):
        load_component("UMT5EncoderModel", path, dtype=jnp.float16)
    with pytest.raises(InputError, match="path"):
        load_component("UMT5EncoderModel", os.path.join(path, "model.safetensors"))
    encoder = load_component("UMT5EncoderModel", path)
    with pytest.raises(InputError, match="input_ids"):
        encoder(jnp.zeros((L,), jnp.int32))
    with pytest.raises(InputError, match="input_ids"):
        encoder(jnp.zeros((B, L), jnp.float32))
    with pytest.raises(InputError, match="attention_mask"):
        encoder(jnp.asarray(ids.numpy(), jnp.int32), jnp.ones((B, L - 1), jnp.int32))
