"""Parity of vidax's HunyuanVideo 1.5 transformer with ``diffusers.HunyuanVideo15Transformer3DModel``.

Tiny configs with distinct dimensions: 3 heads of 18 (D = 54; RoPE axes (4, 6, 8), uneven),
2 double-stream blocks, 1 refiner block, mlp_ratio 2.5 (the refiner keeps its fixed 4.0), in 5 /
out 7 channels, Qwen width 20, byT5 width 14, SigLIP width 12. Latents (B=2, T=3) in landscape
(H=6, W=10) and portrait (H=10, W=6); Qwen text L1=7 with 5 and 3 real tokens, byT5 L2=6 with 4
and 0 real tokens (a prompt without quoted text), 4 image tokens (all zero for T2V). One model with
patch 2 (the (C, p_t, p, p) unpatchify order), one with the released patch 1 and MeanFlow's
``timestep_r`` (the step-distilled config). Every parameter is randomised; the reference is saved
with ``save_pretrained`` and loaded with the production loader.

fp32 tolerance: both sides compute the same float32 arithmetic in a different order (XLA vs torch
kernels), amplified through the refiner and 2 blocks; 1e-5 relative to the output's max is ~100
ulps of headroom and far below what a wrong operation gives (>1e-3, checked by the
input-sensitivity assertions: each input changes the reference's output by more than that).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

TINY = dict(
    in_channels=5,
    out_channels=7,
    num_attention_heads=3,
    attention_head_dim=18,
    num_layers=2,
    num_refiner_layers=1,
    mlp_ratio=2.5,
    patch_size=2,
    patch_size_t=1,
    qk_norm="rms_norm",
    text_embed_dim=20,
    text_embed_2_dim=14,
    image_embed_dim=12,
    rope_theta=256.0,
    rope_axes_dim=(4, 6, 8),
    task_type="i2v",
)
TINY_MF = dict(TINY, patch_size=1, use_meanflow=True)  # the step-distilled I2V config, tiny
B, T, L1, L2, L3 = 2, 3, 7, 6, 4
LENGTHS, LENGTHS_2 = (5, 3), (4, 0)
FP32_TOL = 1e-5
CLS = "HunyuanVideo15Transformer3DModel"


def _reference(tmp_path_factory, cfg, seed):
    torch.manual_seed(seed)
    ref = diffusers.HunyuanVideo15Transformer3DModel(**cfg).eval()
    randomize_torch_module(ref, seed=seed)
    path = tmp_path_factory.mktemp(f"hunyuan15_{seed}")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, load_component(CLS, path), path


@pytest.fixture(scope="module")
def patch2(tmp_path_factory):
    return _reference(tmp_path_factory, TINY, 0)


@pytest.fixture(scope="module")
def meanflow(tmp_path_factory):
    return _reference(tmp_path_factory, TINY_MF, 1)


def _inputs(seed, hw=(6, 10), image=True, meanflow=False):
    """Reference-layout numpy inputs as keywords."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, TINY["in_channels"], T, *hw), dtype=np.float32)
    out = dict(
        hidden_states=x,
        timestep=np.array([37.5, 912.25], np.float32),
        encoder_hidden_states=g.standard_normal((B, L1, TINY["text_embed_dim"]), dtype=np.float32),
        encoder_attention_mask=(np.arange(L1)[None] < np.array(LENGTHS)[:, None]).astype(np.int64),
        encoder_hidden_states_2=g.standard_normal((B, L2, TINY["text_embed_2_dim"]), dtype=np.float32),
        encoder_attention_mask_2=(np.arange(L2)[None] < np.array(LENGTHS_2)[:, None]).astype(np.int64),
        image_embeds=(
            g.standard_normal((B, L3, TINY["image_embed_dim"]), dtype=np.float32)
            if image
            else np.zeros((B, L3, TINY["image_embed_dim"]), np.float32)
        ),
    )
    if meanflow:
        out["timestep_r"] = np.array([20.0, 850.5], np.float32)
    return out


def _ref(ref, inputs):
    with torch.no_grad():
        out = ref(**{k: torch.from_numpy(v) for k, v in inputs.items()}, return_dict=False)[0]
    return out.numpy().transpose(0, 2, 3, 4, 1)


_FWD = nnx.jit(lambda m, *a: m(*a))
#: vidax's positional order (the reference's keywords; ``timestep_r`` last, optional).
ORDER = (
    "hidden_states",
    "timestep",
    "encoder_hidden_states",
    "encoder_attention_mask",
    "encoder_hidden_states_2",
    "encoder_attention_mask_2",
    "image_embeds",
    "timestep_r",
)


def _args(inputs):
    a = dict(inputs, hidden_states=inputs["hidden_states"].transpose(0, 2, 3, 4, 1))
    return tuple(jnp.asarray(a[k]) for k in ORDER if k in a)


def _run(model, inputs):
    return np.asarray(_FWD(model, *_args(inputs)))


def _changed(inputs, key, index):
    """``inputs`` with noise added to ``inputs[key][index]`` (noise, not a constant: the glyph and
    image projections start with a LayerNorm, which a constant shift of a token does not reach)."""
    v = inputs[key].copy()
    v[index] += np.random.default_rng(9).standard_normal(v[index].shape).astype(v.dtype)
    return {**inputs, key: v}


def _check(ref, model, inputs, label):
    want = _ref(ref, inputs)
    got = _run(model, inputs)
    assert got.shape == want.shape
    err = max_rel_err(got, want)
    print(f"{label} fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    return want, got


def test_t2v_landscape_batch_of_two_prompts(patch2):
    """No image tokens; prompts of 5 and 3 text tokens, 4 and 0 glyph tokens; W > H."""
    ref, model, _ = patch2
    inputs = _inputs(1, image=False)
    want, got = _check(ref, model, inputs, "t2v landscape")
    # The reference depends on the latents, the timestep, a real text token and a real glyph
    # token (so the comparison is not vacuous), and not on a padded text or glyph token.
    for changed in (
        _changed(inputs, "hidden_states", np.s_[:]),
        {**inputs, "timestep": inputs["timestep"][::-1].copy()},
        _changed(inputs, "encoder_hidden_states", np.s_[1, 0]),
        _changed(inputs, "encoder_hidden_states_2", np.s_[0, 1]),
    ):
        assert max_rel_err(_ref(ref, changed), want) > 1e-3
    padded = _changed(
        _changed(inputs, "encoder_hidden_states", np.s_[1, LENGTHS[1] :]), "encoder_hidden_states_2", np.s_[1]
    )
    assert max_rel_err(_ref(ref, padded), want) < 1e-6
    np.testing.assert_allclose(_run(model, padded), got, rtol=0, atol=1e-5 * np.abs(got).max())


def test_i2v_portrait_with_image_tokens(patch2):
    """SigLIP tokens present (valid, first in the joint sequence); H > W; item 1's text mask does
    not start with a real token (the reference gathers the real tokens wherever they are, and its
    refiner, unlike HunyuanVideo 1.0's, does not let every query see the first token)."""
    ref, model, _ = patch2
    inputs = _inputs(2, hw=(10, 6))
    inputs["encoder_attention_mask"][1] = [0, 1, 1, 0, 1, 0, 0]
    want, _ = _check(ref, model, inputs, "i2v portrait")
    assert max_rel_err(_ref(ref, _changed(inputs, "image_embeds", np.s_[0, 2])), want) > 1e-3
    assert max_rel_err(_ref(ref, {**inputs, "image_embeds": np.zeros_like(inputs["image_embeds"])}), want) > 1e-3


def test_meanflow_timestep_r(meanflow):
    """The step-distilled config: patch 1, ``timestep_r`` through its own embedder."""
    ref, model, _ = meanflow
    inputs = _inputs(3, hw=(5, 7), meanflow=True)
    want, _ = _check(ref, model, inputs, "meanflow")
    assert max_rel_err(_ref(ref, {**inputs, "timestep_r": inputs["timestep_r"] * 0.5}), want) > 1e-3
    no_r = {k: v for k, v in inputs.items() if k != "timestep_r"}
    _check(ref, model, no_r, "meanflow without timestep_r")


def test_batch_equals_each_prompt_alone(patch2):
    """Each prompt of a batch with different text and glyph lengths gives what it gives alone."""
    ref, model, _ = patch2
    inputs = _inputs(4)
    got = _run(model, inputs)
    for i in range(B):
        one = {k: v[i : i + 1] for k, v in inputs.items()}
        alone = _run(model, one)
        assert max_rel_err(alone[0], got[i]) < FP32_TOL
        assert max_rel_err(alone[0], _ref(ref, one)[0]) < FP32_TOL


def test_stages_and_streamed_blocks_equal_the_call(patch2):
    """``head(run_blocks(*embed(...)))`` equals the call, and the blocks streamed from host memory
    (one 2-layer chunk: one executable) equal the resident model."""
    from vidax.parallel.chunked_step import streamed_call

    _, model, path = patch2
    args = _args(_inputs(5))
    whole = np.asarray(_FWD(model, *args))

    @nnx.jit
    def staged(m, *a):
        x, inputs = m.embed(*a)
        return m.head(m.run_blocks(x, inputs), inputs)

    np.testing.assert_allclose(np.asarray(staged(model, *args)), whole, rtol=0, atol=1e-6 * np.abs(whole).max())
    streamed = load_component(CLS, path, offload=2)
    got = np.asarray(streamed_call(streamed, *args))
    np.testing.assert_allclose(got, whole, rtol=0, atol=1e-6 * np.abs(whole).max())


@pytest.mark.parametrize(
    "key,value,match",
    [
        (
            "image_embeds",
            np.zeros((B, L3, 5), np.float32),
            r"image_embeds must be \(B=2, L3, image_embed_dim=12\); got \(2, 4, 5\)\.",
        ),
        (
            "encoder_attention_mask_2",
            np.ones((B, L2 + 1), np.int64),
            r"encoder_attention_mask_2 must be \(B, L\) of encoder_hidden_states_2=\(2, 6\); got \(2, 7\)\.",
        ),
        (
            "encoder_hidden_states",
            np.zeros((B, L1, 19), np.float32),
            r"encoder_hidden_states must be \(B=2, L1, text_embed_dim=20\)",
        ),
        ("timestep_r", np.zeros((B,), np.float32), r"timestep_r was given but .*\(use_meanflow=false\)\."),
    ],
)
def test_bad_input_is_named(patch2, key, value, match):
    """A wrong shape is one line naming the argument, its shape and the valid one, raised before
    any computation (the patch-2 model has no MeanFlow embedder)."""
    from vidax.errors import InputError

    _, model, _ = patch2
    inputs = {**_inputs(6), key: value}
    with pytest.raises(InputError, match=match):
        model(*_args(inputs))
