"""Parity of vidax's Cosmos transformer with ``diffusers.CosmosTransformer3DModel`` (tiny configs).

Two tiny references, every parameter randomised, ``save_pretrained`` -> the production loader:

* ``predict``: the Predict2.5 layout (condition-mask channel, ``concat_padding_mask``,
  ``crossattn_proj``, no learnable position embedding) with distinct dims: 3 heads of 16 (D = 48;
  RoPE split (T, H, W) = (8, 4, 4)), 2 layers, AdaLN-LoRA 10, mlp_ratio 2.5 (FFN 120), 4 latent +
  1 mask channels in, 6 out, text 28 -> 20, rope_scale (1, 3, 2) (a different NTK theta per
  axis), latent (B=2, T=3, H=6, W=10), patch (1, 2, 2) -> 45 tokens, text L=7.
* ``learnable``: ``extra_pos_embed_type="learnable"``, no mask channels, no text projection,
  patch (2, 2, 1) (so the reference's (p_h, p_w, p_t, C) output order is exercised with p_t > 1),
  latent (2, 4, 6, 10) -> 60 tokens.

The reference's padding-mask path calls ``torchvision.transforms.functional.resize(NEAREST)``;
torchvision is not installed here, so the test gives the reference module the same operation:
torchvision's tensor ``resize`` with NEAREST is ``torch.nn.functional.interpolate(img, size,
mode="nearest")`` (``torchvision/transforms/_functional_tensor.py::resize``, antialias off for
nearest).

fp32 tolerance 1e-5 relative (of the output's max): both sides run the same float32 arithmetic
in a different order (XLA vs torch kernels, einsum vs SDPA), a few ulps amplified through 2
blocks; a wrong operation gives > 1e-2.
"""

from __future__ import annotations

import types

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers import transformer_cosmos  # noqa: E402

PREDICT = dict(
    in_channels=5,
    out_channels=6,
    num_attention_heads=3,
    attention_head_dim=16,
    num_layers=2,
    mlp_ratio=2.5,
    text_embed_dim=20,
    adaln_lora_dim=10,
    max_size=(8, 16, 24),
    patch_size=(1, 2, 2),
    rope_scale=(1.0, 3.0, 2.0),
    concat_padding_mask=True,
    extra_pos_embed_type=None,
    use_crossattn_projection=True,
    crossattn_proj_in_channels=28,
    encoder_hidden_states_channels=20,
)
LEARNABLE = dict(
    PREDICT,
    in_channels=4,
    patch_size=(2, 2, 1),
    concat_padding_mask=False,
    extra_pos_embed_type="learnable",
    use_crossattn_projection=False,
    rope_scale=(2.0, 1.0, 1.5),
)
B, T, H, W = 2, 3, 6, 10
L_TXT = 7
FP32_TOL = 1e-5

_TORCHVISION_NEAREST = types.SimpleNamespace(
    functional=types.SimpleNamespace(
        resize=lambda img, size, interpolation: torch.nn.functional.interpolate(img, size=size, mode=interpolation)
    ),
    InterpolationMode=types.SimpleNamespace(NEAREST="nearest"),
)


@pytest.fixture(scope="module", autouse=True)
def _reference_resize():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(transformer_cosmos, "transforms", _TORCHVISION_NEAREST, raising=False)
        yield


def _make(tmp_path_factory, cfg, seed):
    torch.manual_seed(seed)
    ref = diffusers.CosmosTransformer3DModel(**cfg).eval()
    randomize_torch_module(ref, seed=seed)
    path = tmp_path_factory.mktemp(f"cosmos_ref_{seed}")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, load_component("CosmosTransformer3DModel", path), path


@pytest.fixture(scope="module")
def predict(tmp_path_factory):
    return _make(tmp_path_factory, PREDICT, seed=0)


@pytest.fixture(scope="module")
def learnable(tmp_path_factory):
    return _make(tmp_path_factory, LEARNABLE, seed=1)


def _predict_inputs(seed):
    """Channels-first numpy inputs as the Predict2.5 pipeline builds them: the first latent
    frame is conditioning (mask 1, sigma 1e-4), the rest noisy at a per-sample sigma; a random
    binary padding mask at a pixel-like size that is not a multiple of the latent's."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, 4, T, H, W), dtype=np.float32)
    cond = np.zeros((B, 1, T, H, W), np.float32)
    cond[:, :, 0] = 1.0
    ts = np.empty((B, 1, T, 1, 1), np.float32)
    ts[0], ts[1] = 0.35, 0.9
    ts[:, :, 0] = 1e-4
    pad = (g.random((1, 1, 13, 23)) > 0.5).astype(np.float32)
    txt = g.standard_normal((B, L_TXT, PREDICT["crossattn_proj_in_channels"]), dtype=np.float32)
    return x, ts, txt, cond, pad


def _ref(ref, x, ts, txt, cond=None, pad=None, fps=None):
    t = lambda a: None if a is None else torch.from_numpy(a)
    with torch.no_grad():
        out = ref(t(x), t(ts), t(txt), fps=fps, condition_mask=t(cond), padding_mask=t(pad), return_dict=False)[0]
    return out.numpy().transpose(0, 2, 3, 4, 1)  # channels-last


_FWD = nnx.jit(lambda m, x, ts, txt, cond, pad, fps: m(x, ts, txt, fps, cond, pad), static_argnums=6)


def _run(model, x, ts, txt, cond=None, pad=None, fps=None):
    cl = lambda a: None if a is None else jnp.asarray(a.transpose(0, 2, 3, 4, 1))
    pad_cl = None if pad is None else jnp.asarray(pad.transpose(0, 2, 3, 1))
    return np.asarray(_FWD(model, cl(x), jnp.asarray(ts), jnp.asarray(txt), cl(cond), pad_cl, fps))


def test_predict_fp32_per_frame_timesteps_masks(predict):
    ref, model, _ = predict
    x, ts, txt, cond, pad = _predict_inputs(1)
    want = _ref(ref, x, ts, txt, cond, pad)
    got = _run(model, x, ts, txt, cond, pad)
    assert got.shape == (B, T, H, W, PREDICT["out_channels"])
    err = max_rel_err(got, want)
    print(f"predict fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    # The reference depends on every input we claim to match (the comparison is not vacuous).
    x2, _, txt2, _, _ = _predict_inputs(2)
    ts2 = ts.copy()
    ts2[:, :, 0] = ts[:, :, 1]  # the conditioning frame at the noisy frames' sigma
    for name, args in {
        "latents": (x2, ts, txt, cond, pad),
        "text": (x, ts, txt2, cond, pad),
        "timestep": (x, ts2, txt, cond, pad),
        "condition_mask": (x, ts, txt, 1.0 - cond, pad),
        "padding_mask": (x, ts, txt, cond, 1.0 - pad),
    }.items():
        assert max_rel_err(_ref(ref, *args), want) > 1e-2, name
    assert max_rel_err(_run(model, x, ts2, txt, cond, pad), want) > 1e-2


def test_predict_fps(predict):
    """The reference's RoPE reads fps when it is given (frame positions t / fps * 24) and the
    Predict2.5 pipeline never passes it: vidax matches at fps=16, the reference itself changes with
    fps, and fps=24 (the base fps) is the plain frame index, as fps=None."""
    ref, model, _ = predict
    x, ts, txt, cond, pad = _predict_inputs(3)
    want16 = _ref(ref, x, ts, txt, cond, pad, fps=16)
    got16 = _run(model, x, ts, txt, cond, pad, fps=16)
    err = max_rel_err(got16, want16)
    print(f"predict fps=16 fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    want_none = _ref(ref, x, ts, txt, cond, pad)
    assert max_rel_err(want16, want_none) > 1e-3  # the reference is not fps-invariant
    assert max_rel_err(_ref(ref, x, ts, txt, cond, pad, fps=24), want_none) < 1e-6
    assert max_rel_err(_run(model, x, ts, txt, cond, pad), want_none) < FP32_TOL


def test_predict_stages_equal_the_call(predict):
    """``head(run_blocks(*embed(...)))`` is the model call (what block streaming relies on)."""
    _, model, _ = predict
    x, ts, txt, cond, pad = _predict_inputs(4)
    cl = lambda a: jnp.asarray(a.transpose(0, 2, 3, 4, 1))
    # Per-frame timesteps in the (B, T) layout here, the reference's (B, 1, T, 1, 1) in the call.
    args = (
        cl(x),
        jnp.asarray(ts.reshape(B, T)),
        jnp.asarray(txt),
        None,
        cl(cond),
        jnp.asarray(pad.transpose(0, 2, 3, 1)),
    )

    @nnx.jit
    def staged_fn(m, *a):
        h, inputs = m.embed(*a)
        return m.head(m.run_blocks(h, inputs), inputs)

    whole = _run(model, x, ts, txt, cond, pad)  # the same jitted call as the parity tests
    staged = np.asarray(staged_fn(model, *args))
    np.testing.assert_array_equal(staged, whole)
    assert float(np.abs(whole).max()) > 1e-3


def test_learnable_pos_embed_and_temporal_patch(learnable):
    ref, model, _ = learnable
    g = np.random.default_rng(5)
    x = g.standard_normal((B, 4, 4, H, W), dtype=np.float32)
    ts = np.array([0.2, 0.75], np.float32)
    txt = g.standard_normal((B, L_TXT, LEARNABLE["text_embed_dim"]), dtype=np.float32)
    want = _ref(ref, x, ts, txt)
    got = _run(model, x, ts, txt)
    assert got.shape == (B, 4, H, W, LEARNABLE["out_channels"])
    err = max_rel_err(got, want)
    print(f"learnable fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    assert max_rel_err(_ref(ref, x, ts[::-1].copy(), txt), want) > 1e-2
    # The learnable tables matter: zeroing them changes the reference.
    with torch.no_grad():
        saved = ref.learnable_pos_embed.pos_emb_h.clone()
        ref.learnable_pos_embed.pos_emb_h.mul_(-1.0)
        flipped = _ref(ref, x, ts, txt)
        ref.learnable_pos_embed.pos_emb_h.copy_(saved)
    assert max_rel_err(flipped, want) > 1e-2
    assert model.learnable_pos_embed.pos_emb_t[...].dtype == jnp.float32


def test_bf16_against_fp32_reference(predict, learnable):
    """bf16 weights and matmuls (fp32 masks and timesteps given, as a pipeline would: they must
    not promote the network to fp32) vs the fp32 reference. bf16's 8-bit mantissa gives ~2e-3
    per rounding over ~10 roundings per block: 5e-2 bounds it, a wrong cast gives O(1). The
    learnable position tables load float32 (the reference's ``_keep_in_fp32_modules``)."""
    ref, _, path = predict
    model = load_component("CosmosTransformer3DModel", path, dtype=jnp.bfloat16)
    assert model.transformer_blocks.attn1.to_q.kernel[...].dtype == jnp.bfloat16
    assert model.crossattn_proj[0].kernel[...].dtype == jnp.bfloat16
    x, ts, txt, cond, pad = _predict_inputs(6)
    got = _run(model, x, ts, txt, cond, pad)
    assert got.dtype == jnp.bfloat16
    err = max_rel_err(got.astype(np.float32), _ref(ref, x, ts, txt, cond, pad))
    print(f"predict bf16 max_rel_err={err:.2e}")
    assert err < 5e-2
    tables = load_component("CosmosTransformer3DModel", learnable[2], dtype=jnp.bfloat16)
    assert tables.learnable_pos_embed.pos_emb_w[...].dtype == jnp.float32
    assert tables.transformer_blocks.ff.net[2].kernel[...].dtype == jnp.bfloat16


def test_nearest_resize_matches_torch():
    """The padding-mask resize against torch's nearest interpolation, down and up, odd ratios."""
    from vidax.models.cosmos.transformer import _nearest_resize

    g = np.random.default_rng(7)
    for src, dst in (((13, 23), (6, 10)), ((4, 5), (9, 11)), ((8, 8), (8, 8)), ((3, 7), (6, 14))):
        m = g.standard_normal((2, *src)).astype(np.float32)
        want = torch.nn.functional.interpolate(torch.from_numpy(m)[:, None], size=dst, mode="nearest")[:, 0].numpy()
        np.testing.assert_array_equal(np.asarray(_nearest_resize(m, dst)), want)  # numpy: no compiles


def test_mesh_dp2_tp2_sp2_padded_tokens(tmp_path_factory):
    """On a (data 2, tensor 2, sequence 2) mesh of fake CPU devices (tests/conftest.py), with 4
    heads and 45 tokens (padded to 46 for sp=2, the pad masked and dropped; the per-frame
    modulation gathered onto the padded tokens), the model equals the reference. The sharded
    program sums matmul partials in another order: still within the fp32 tolerance."""
    import jax

    from vidax.models.cosmos.convert import TRANSFORMER_PARAM_AXES
    from vidax.parallel.mesh import make_mesh
    from vidax.parallel.placement import check_sharded

    ref, _, path = _make(tmp_path_factory, dict(PREDICT, num_attention_heads=4), seed=2)
    mesh = make_mesh(2, 2, 2, devices=jax.devices()[:8])
    model = load_component("CosmosTransformer3DModel", path, mesh=mesh)
    check_sharded(model, TRANSFORMER_PARAM_AXES, mesh, "transformer")
    x, ts, txt, cond, pad = _predict_inputs(8)
    err = max_rel_err(_run(model, x, ts, txt, cond, pad), _ref(ref, x, ts, txt, cond, pad))
    print(f"mesh (2, 2, 2) fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
