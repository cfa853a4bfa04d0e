"""Parity of vidax's HunyuanVideo 1.0 transformer with ``diffusers.HunyuanVideoTransformer3DModel``.

Tiny configs with distinct dimensions: 3 heads of 18 (D = 54; RoPE axes (4, 6, 8), uneven),
2 double + 2 single blocks, 1 refiner block, mlp_ratio 2.5 (the refiner keeps its fixed 4.0),
in 5 / out 7 channels, Llama width 20, pooled width 12, latent (B=2, T=3, H=6, W=10) with patch 2
-> 45 video tokens, text L=7 with 5 and 3 real tokens. Every parameter is randomised; the
reference is saved with ``save_pretrained`` and loaded with the production loader.

fp32 tolerance: both sides compute the same float32 arithmetic in a different order (XLA vs torch
kernels), amplified through 4 blocks and the refiner; 1e-5 relative to the output's max is ~100
ulps of headroom and far below what a wrong operation gives (>1e-2, checked by the
input-sensitivity assertions).
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
    num_single_layers=2,
    num_refiner_layers=1,
    mlp_ratio=2.5,
    patch_size=2,
    patch_size_t=1,
    qk_norm="rms_norm",
    guidance_embeds=True,
    text_embed_dim=20,
    pooled_projection_dim=12,
    rope_theta=256.0,
    rope_axes_dim=(4, 6, 8),
)
# token_replace I2V (guidance embedded, as HunyuanVideo-I2V); temporal patch 2 checks the
# (C, p_t, p, p) unpatchify order along time too.
TINY_TR = dict(TINY, image_condition_type="token_replace", patch_size_t=2)
B, T, H, W, L_TXT = 2, 3, 6, 10, 7
LENGTHS = (5, 3)
FP32_TOL = 1e-5


def _reference(tmp_path_factory, cfg, seed):
    torch.manual_seed(seed)
    ref = diffusers.HunyuanVideoTransformer3DModel(**cfg).eval()
    randomize_torch_module(ref, seed=seed)
    path = tmp_path_factory.mktemp(f"hunyuan_{seed}")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, load_component("HunyuanVideoTransformer3DModel", path)


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    return _reference(tmp_path_factory, TINY, 0)


@pytest.fixture(scope="module")
def i2v(tmp_path_factory):
    return _reference(tmp_path_factory, TINY_TR, 1)


def _inputs(seed, t=T):
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, TINY["in_channels"], t, H, W), dtype=np.float32)
    txt = g.standard_normal((B, L_TXT, TINY["text_embed_dim"]), dtype=np.float32)
    mask = (np.arange(L_TXT)[None] < np.array(LENGTHS)[:, None]).astype(np.int64)
    pooled = g.standard_normal((B, TINY["pooled_projection_dim"]), dtype=np.float32)
    ts = np.array([37.5, 912.25], np.float32)
    guidance = np.array([6000.0, 3500.0], np.float32)  # 1000 * guidance_scale, as the pipeline
    return x, ts, txt, mask, pooled, guidance


def _ref(ref, x, ts, txt, mask, pooled, guidance):
    with torch.no_grad():
        out = ref(
            torch.from_numpy(x),
            torch.from_numpy(ts),
            torch.from_numpy(txt),
            torch.from_numpy(mask),
            torch.from_numpy(pooled),
            guidance=torch.from_numpy(guidance),
            return_dict=False,
        )[0]
    return out.numpy().transpose(0, 2, 3, 4, 1)


_FWD = nnx.jit(lambda m, *a: m(*a))


def _args(x, ts, txt, mask, pooled, guidance):
    return (
        jnp.asarray(x.transpose(0, 2, 3, 4, 1)),
        jnp.asarray(ts),
        jnp.asarray(txt),
        jnp.asarray(mask),
        jnp.asarray(pooled),
        jnp.asarray(guidance),
    )


def _run(model, *a):
    return np.asarray(_FWD(model, *_args(*a)))


def test_t2v_guidance_batch_of_two_prompts(t2v):
    ref, model = t2v
    inputs = _inputs(1)
    want = _ref(ref, *inputs)
    got = _run(model, *inputs)
    assert got.shape == (B, T, H, W, TINY["out_channels"])
    err = max_rel_err(got, want)
    print(f"t2v fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    # The reference depends on each input (so the comparison is not vacuous): the latents, the
    # timestep, the guidance, a real text token, the pooled text; and not on a padded text token.
    x, ts, txt, mask, pooled, guidance = inputs
    txt_pad = txt.copy()
    txt_pad[1, LENGTHS[1] :] += 5.0
    txt_real = txt.copy()
    txt_real[1, 0] += 1.0
    for changed in (
        (x + 0.5, ts, txt, mask, pooled, guidance),
        (x, ts[::-1].copy(), txt, mask, pooled, guidance),
        (x, ts, txt, mask, pooled, guidance * 0.5),
        (x, ts, txt_real, mask, pooled, guidance),
        (x, ts, txt, mask, pooled[::-1].copy(), guidance),
    ):
        assert max_rel_err(_ref(ref, *changed), want) > 1e-3
    assert max_rel_err(_ref(ref, x, ts, txt_pad, mask, pooled, guidance), want) < 1e-6
    np.testing.assert_allclose(
        _run(model, x, ts, txt_pad, mask, pooled, guidance), got, rtol=0, atol=1e-5 * np.abs(got).max()
    )


def test_batch_equals_each_prompt_alone(t2v):
    """Each prompt of a batch with different mask lengths gives what it gives alone (vidax and the
    reference, item by item)."""
    ref, model = t2v
    inputs = _inputs(2)
    got = _run(model, *inputs)
    for i in range(B):
        one = tuple(a[i : i + 1] for a in inputs)
        alone = _run(model, *one)
        assert max_rel_err(alone[0], got[i]) < FP32_TOL
        assert max_rel_err(alone[0], _ref(ref, *one)[0]) < FP32_TOL


def test_token_replace_i2v(i2v):
    ref, model = i2v
    inputs = _inputs(3, t=4)
    want = _ref(ref, *inputs)
    got = _run(model, *inputs)
    assert got.shape == (B, 4, H, W, TINY["out_channels"])
    err = max_rel_err(got, want)
    print(f"token_replace fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    # The first-frame tokens' timestep-0 modulation matters: the reference with the same weights
    # but without token replace differs.
    ref.time_text_embed.image_condition_type = None
    for blocks in (ref.transformer_blocks, ref.single_transformer_blocks):
        assert type(blocks[0]).__name__.startswith("HunyuanVideoTokenReplace")
    try:
        plain = diffusers.HunyuanVideoTransformer3DModel(**dict(TINY_TR, image_condition_type=None)).eval()
        plain.load_state_dict(ref.state_dict())
        assert max_rel_err(_ref(plain, *inputs), want) > 1e-3
    finally:
        ref.time_text_embed.image_condition_type = "token_replace"


def test_stages_equal_the_call(t2v):
    """``head(run_blocks(*embed(...)))`` per stack equals the call (block streaming's contract)."""
    _, model = t2v
    args = _args(*_inputs(4))
    whole = np.asarray(_FWD(model, *args))

    @nnx.jit
    def staged(m, *a):
        x, inputs = m.embed(*a)
        for name in m.block_stacks:
            x = m.run_blocks(x, inputs, stack=name)
        return m.head(x, inputs)

    np.testing.assert_allclose(np.asarray(staged(model, *args)), whole, rtol=0, atol=1e-6 * np.abs(whole).max())


def test_streamed_blocks_equal_resident(t2v, tmp_path_factory):
    """Both stacks streamed from host memory (one 2-layer chunk each, so one executable per
    stack) equal the resident model."""
    from vidax.parallel.chunked_step import streamed_call

    ref, model = t2v
    path = tmp_path_factory.mktemp("hunyuan_stream")
    ref.save_pretrained(path, safe_serialization=True)
    streamed = load_component("HunyuanVideoTransformer3DModel", path, offload=2)
    args = _args(*_inputs(5))
    want = np.asarray(_FWD(model, *args))
    got = np.asarray(streamed_call(streamed, *args))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
