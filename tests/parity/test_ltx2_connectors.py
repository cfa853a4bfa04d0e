"""Parity of vidax's LTX-2 text connectors with ``diffusers``' ``LTX2TextConnectors`` (tiny configs
of ``tests/parity/ltx2_reference.py``, every parameter randomised, loaded with the production
loader): LTX-2 (per-layer masked mean / range normalisation, one projection) and LTX-2.3
(per-token RMS, per-modality projections, gated attention), with learnable registers (that
replace the padding) and without (2.0: the padded keys masked), left and right padding (the
side only matters to 2.0's normalisation).

fp32 tolerance 1e-5 relative: the same float32 arithmetic in another order (masked sums over the
sequence and width, einsum vs SDPA); measured ~2e-7 (printed).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.parity.helpers import max_rel_err, randomize_torch_module
from tests.parity.ltx2_reference import CONNECTORS_20, CONNECTORS_23
from vidax.errors import InputError
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors  # noqa: E402

B, L = 2, 8
REAL = np.array([5, 8])  # real tokens per prompt (the second unpadded)
FP32_TOL = 1e-5

CASES = {
    "2.0-registers-left": (CONNECTORS_20, "left"),
    "2.0-no-registers-right": (
        {
            **CONNECTORS_20,
            "video_connector_num_learnable_registers": None,
            "audio_connector_num_learnable_registers": None,
        },
        "right",
    ),
    "2.3-registers-left": (CONNECTORS_23, "left"),
}


def _inputs(cfg, side, seed):
    g = np.random.default_rng(seed)
    h = 3 * g.standard_normal((B, L, cfg["caption_channels"], cfg["text_proj_in_factor"]), dtype=np.float32)
    pos = np.arange(L)[None]
    real = pos >= (L - REAL)[:, None] if side == "left" else pos < REAL[:, None]
    return h, real.astype(np.int64)


def _ref(ref, h, mask, side):
    with torch.no_grad():
        return tuple(o.numpy() for o in ref(torch.from_numpy(h), torch.from_numpy(mask), padding_side=side))


@pytest.mark.parametrize("case", list(CASES))
def test_connectors_match_reference(case, tmp_path):
    cfg, side = CASES[case]
    torch.manual_seed(0)
    ref = LTX2TextConnectors(**cfg).eval()
    randomize_torch_module(ref, seed=0)
    ref.save_pretrained(tmp_path, safe_serialization=True)
    model = load_component("LTX2TextConnectors", tmp_path)
    h, mask = _inputs(cfg, side, 1)
    want = _ref(ref, h, mask, side)
    got = model(jnp.asarray(h), jnp.asarray(mask), padding_side=side)
    for name, g, w in zip(("video", "audio", "mask"), got, want):
        g = np.asarray(g)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        err = max_rel_err(g, w)
        print(f"{case} {name}: max_rel_err={err:.2e}")
        assert err < FP32_TOL if name != "mask" else np.array_equal(g, w)
    # Flattened (B, L, C·layers) input, channel-major as the reference unflattens it.
    flat = model(jnp.asarray(h.reshape(B, L, -1)), jnp.asarray(mask), padding_side=side)
    assert max_rel_err(np.asarray(flat[0]), want[0]) < FP32_TOL
    # The reference depends on the hidden states and on the mask; the padded rows' values do not
    # matter (normalisation statistics over real tokens; registers or masked keys replace them).
    changed = _ref(ref, h[::-1].copy(), mask, side)
    assert all(max_rel_err(c, w) > 1e-2 for c, w in zip(changed[:2], want[:2]))
    other = mask.copy()
    other[0] = 1
    assert max_rel_err(_ref(ref, h, other, side)[0], want[0]) > 1e-2
    h2 = h.copy()
    h2[0][mask[0] == 0] += 5.0
    got2 = model(jnp.asarray(h2), jnp.asarray(mask), padding_side=side)
    for g2, w in zip(got2[:2], want[:2]):
        rows = slice(None) if cfg["video_connector_num_learnable_registers"] else mask[0] == 1
        assert max_rel_err(np.asarray(g2)[0][rows], w[0][rows]) < FP32_TOL


def test_connectors_refuse_bad_input(tmp_path):
    torch.manual_seed(0)
    LTX2TextConnectors(**CONNECTORS_20).save_pretrained(tmp_path, safe_serialization=True)
    model = load_component("LTX2TextConnectors", tmp_path)
    h, mask = _inputs(CONNECTORS_20, "left", 2)
    with pytest.raises(InputError, match=r"padding_side='middle'; valid: \['left', 'right'\]"):
        model(jnp.asarray(h), jnp.asarray(mask), padding_side="middle")
    with pytest.raises(InputError, match=r"text length 6 must be a multiple of the 4 learnable registers"):
        model(jnp.asarray(h[:, :6]), jnp.asarray(mask[:, :6]))
    with pytest.raises(InputError, match=r"text_encoder_hidden_states must be \(B, L, 12, 3\)"):
        model(jnp.asarray(h[..., :2]), jnp.asarray(mask))
