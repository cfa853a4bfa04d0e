"""Parity of vidax's SkyReels-V2 transformer with ``diffusers.SkyReelsV2Transformer3DModel``.

Tiny config with distinct dimensions: 3 heads of 14 (RoPE split (6, 4, 4)), in 5 / out 7
channels, text_dim 17, freq_dim 8, ffn 44, 2 layers, the fps conditioning on; latents
(T=4, H=6, W=10) -> 4 x 3 x 5 = 60 tokens. Every parameter randomised, saved with
``save_pretrained`` and loaded with the production loader. Covers one timestep per sample, one per
latent frame (diffusion forcing), the block-causal self-attention (``num_frame_per_block`` 2) and
the I2V image branch. Tolerance as the Wan transformer's (1e-5 of the output's max in float32).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import assert_input_sensitive, max_rel_err, randomize_torch_module
from vidax.errors import InputError
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

TINY = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=3,
    attention_head_dim=14,
    in_channels=5,
    out_channels=7,
    text_dim=17,
    freq_dim=8,
    ffn_dim=44,
    num_layers=2,
    inject_sample_info=True,
)
T, H, W = 4, 6, 10
L_TXT = 7
TOL = 1e-5


def _reference(tmp_path_factory, seed, **overrides):
    torch.manual_seed(seed)
    ref = diffusers.SkyReelsV2Transformer3DModel(**dict(TINY, **overrides)).eval()
    randomize_torch_module(ref, seed=seed)
    path = tmp_path_factory.mktemp(f"skyreels_v2_{seed}")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, load_component("SkyReelsV2Transformer3DModel", path)


@pytest.fixture(scope="module")
def t2v(tmp_path_factory):
    return _reference(tmp_path_factory, 0)


def _inputs(seed, b, l_txt=L_TXT):
    g = np.random.default_rng(seed)
    x = g.standard_normal((b, TINY["in_channels"], T, H, W), dtype=np.float32)
    txt = g.standard_normal((b, l_txt, TINY["text_dim"]), dtype=np.float32)
    return x, txt


def _ref(ref, x, ts, txt, fps, img=None, causal=1):
    ref._set_ar_attention(causal)
    try:
        with torch.no_grad():
            out = ref(
                torch.from_numpy(x),
                torch.from_numpy(ts),
                torch.from_numpy(txt),
                encoder_hidden_states_image=None if img is None else torch.from_numpy(img),
                enable_diffusion_forcing=ts.ndim == 2,
                fps=fps,
                return_dict=False,
            )[0]
    finally:
        ref._set_ar_attention(1)
    return out.numpy().transpose(0, 2, 3, 4, 1)


_FWD = nnx.jit(lambda m, *a, nfpb=None: m(*a, num_frame_per_block=nfpb), static_argnames="nfpb")


def _ours(model, x, ts, txt, fps, img=None, causal=None):
    args = [jnp.asarray(x.transpose(0, 2, 3, 4, 1)), jnp.asarray(ts), jnp.asarray(txt)]
    args += [None if img is None else jnp.asarray(img), jnp.asarray(np.asarray(fps, np.int32))]
    return np.asarray(_FWD(model, *args, nfpb=causal))


def test_one_timestep_per_sample(t2v):
    ref, model = t2v
    x, txt = _inputs(1, 2)
    ts = np.array([37.5, 912.25], np.float32)
    want = _ref(ref, x, ts, txt, [0, 1])
    got = _ours(model, x, ts, txt, [0, 1])
    err = max_rel_err(got, want)
    print(f"T2V fp32 max_rel_err={err:.2e}")
    assert got.shape == (2, T, H, W, TINY["out_channels"]) and err < TOL
    # The fps index matters (the test can fail on a model that drops the fps conditioning).
    assert_input_sensitive(_ref(ref, x, ts, txt, [1, 0]), want, 1e-2)


def test_diffusion_forcing_block_causal(t2v):
    """One timestep per latent frame (the reference's ``enable_diffusion_forcing``) with the
    block-causal self-attention (2 latent frames a block; full attention with per-frame timesteps
    is in :func:`test_image_branch`). Batch 1: the reference's fps broadcast over frames only works
    for one sample."""
    ref, model = t2v
    x, txt = _inputs(2, 1)
    ts = np.array([[0.0, 250.5, 600.0, 999.0]], np.float32)
    want = _ref(ref, x, ts, txt, [1], causal=2)
    got = _ours(model, x, ts, txt, [1], causal=2)
    err = max_rel_err(got, want)
    print(f"diffusion forcing, causal blocks of 2: max_rel_err={err:.2e}")
    assert err < TOL
    # Per-frame timesteps matter, and so does the causal mask.
    assert_input_sensitive(_ref(ref, x, ts[:, ::-1].copy(), txt, [1], causal=2), want, 1e-2)
    assert_input_sensitive(_ref(ref, x, ts, txt, [1], causal=1), want, 1e-2)
    # Block-causal: the first block's output does not see the later frames.
    x2 = x.copy()
    x2[:, :, 2:] = 0.0
    first = _ours(model, x2, ts, txt, [1], causal=2)[:, :2]
    np.testing.assert_allclose(first, got[:, :2], rtol=0, atol=1e-5 * np.abs(got).max())


def test_image_branch(tmp_path_factory):
    """I2V: CLIP features through the image embedder and the added key/value projections (the
    reference splits them from the text at ``L - 512``, so 512 text tokens)."""
    ref, model = _reference(tmp_path_factory, 3, image_dim=11, added_kv_proj_dim=42, inject_sample_info=False)
    x, txt = _inputs(4, 1, l_txt=512)
    img = np.random.default_rng(5).standard_normal((1, 3, 11), dtype=np.float32)
    ts = np.array([[500.0, 500.0, 10.0, 10.0]], np.float32)
    with torch.no_grad():
        want = (
            ref(
                torch.from_numpy(x),
                torch.from_numpy(ts),
                torch.from_numpy(txt),
                encoder_hidden_states_image=torch.from_numpy(img),
                enable_diffusion_forcing=True,
                return_dict=False,
            )[0]
            .numpy()
            .transpose(0, 2, 3, 4, 1)
        )
    args = [jnp.asarray(x.transpose(0, 2, 3, 4, 1)), jnp.asarray(ts), jnp.asarray(txt), jnp.asarray(img)]
    got = np.asarray(_FWD(model, *args))
    err = max_rel_err(got, want)
    print(f"I2V max_rel_err={err:.2e}")
    assert err < TOL


def test_refuses_inputs_the_reference_cannot_run(t2v):
    _, model = t2v
    x, txt = _inputs(6, 1)
    lat = jnp.asarray(x.transpose(0, 2, 3, 4, 1))
    ts = jnp.full((1, T), 10.0)
    with pytest.raises(InputError, match=r"num_frame_per_block=3 must be a positive int dividing the 4 latent"):
        model.embed(lat, ts, jnp.asarray(txt), None, jnp.ones(1, jnp.int32), 3)
    with pytest.raises(InputError, match=r"pass fps of shape \(B,\)=\(1,\)"):
        model.embed(lat, ts, jnp.asarray(txt))
    with pytest.raises(InputError, match=r"timestep must have shape \(B,\)=\(1,\) or \(B, F\)=\(1, 4\)"):
        model.embed(lat, jnp.full((1, 3), 10.0), jnp.asarray(txt), None, jnp.ones(1, jnp.int32))
