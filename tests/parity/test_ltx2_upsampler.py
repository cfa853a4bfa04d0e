"""Parity of vidax's ``LTX2LatentUpsamplerModel`` with diffusers 0.42.1's (pipelines/ltx2/
latent_upsampler.py), its config checks and the full-size parameter counts.

Tiny configs with distinct sizes (in_channels 12, mid_channels 64 (32 groups of 2), 1 block per
stage; latents B=2, T=3, H=5, W=7: odd sizes, so the strided blur's rounding up is exercised),
one per up-sampler the LTX-2 config builds: the rational resampler with scale 1.5 (3x up, blur
stride 2: a ratio that is not an integer) and 0.75 (3x up, stride 4) per frame (dims=2), and
LTX-2.3's plain conv + depth-to-space (``use_rational_resampler`` false); scale 2.0 (LTX-2.0's
released layout, the blur skipped) runs in the upsample pipeline's test
(tests/parity/test_ltx2_conditions.py). Every torch parameter and buffer is random
(helpers.randomize_torch_module: the blur kernel too, so its loading is checked), the model is
saved with ``save_pretrained`` and read by ``load_component``.

Tolerance, float32: the convolutions sum in another order on each side (oneDNN vs XLA) over up to
1.7k terms per output through 5 convs and the blur; measured max |a - b| / max |b| <= 1e-6, held
to 1e-5.
"""

from __future__ import annotations

import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.parity.helpers import assert_reference_parameters, max_rel_err, randomize_torch_module
from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError
from vidax.models.ltx2.config import LTX2LatentUpsamplerConfig
from vidax.models.ltx2.convert import UPSAMPLER_KEY_RULES
from vidax.models.ltx2.upsampler import LTX2LatentUpsamplerModel
from vidax.nn.buffer import Buffer
from vidax.weights.component import load_component

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel as RefUpsampler  # noqa: E402

TOL = 1e-5
TINY = dict(in_channels=12, mid_channels=64, num_blocks_per_stage=1)
VARIANTS = {
    "rational_1.5": dict(dims=3, rational_spatial_scale=1.5),
    "rational_0.75_2d": dict(dims=2, rational_spatial_scale=0.75),
    "plain_2.3": dict(dims=3, use_rational_resampler=False),
}
SHAPE = (2, 12, 3, 5, 7)  # (B, C, T, H, W), diffusers' layout
#: The released LTX-2 upsampler configs (LTX-2.0: rational resampler at 2x; LTX-2.3: plain).
RELEASED = ("Lightricks__LTX-2", "diffusers__LTX-2.3-Diffusers")


def _cl(x):  # (B, C, T, H, W) -> (B, T, H, W, C)
    return np.moveaxis(np.asarray(x), 1, -1)


def _latents(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_upsampler_matches_diffusers(name):
    ref = RefUpsampler(**TINY, **VARIANTS[name]).eval()
    randomize_torch_module(ref, seed=sorted(VARIANTS).index(name))
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        ours = load_component("LTX2LatentUpsamplerModel", d)
    assert isinstance(ours, LTX2LatentUpsamplerModel)
    x, y = _latents(0), _latents(1)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
        other = ref(torch.from_numpy(y)).numpy()
    assert max_rel_err(other, want) > 0.1, "the reference output must depend on the input"
    got = jax.jit(ours.__call__)(jnp.asarray(_cl(x)))
    assert got.shape == ours.output_shape(_cl(x).shape) == _cl(want).shape and got.dtype == jnp.float32
    err = max_rel_err(got, _cl(want))
    print(f"{name}: {SHAPE} -> {want.shape}, max rel err {err:.2e}")
    assert err < TOL, f"{name}: max rel err {err}"


@pytest.mark.parametrize("name", RELEASED)
def test_full_size_parameter_count(name):
    """The released configs build abstractly with exactly the reference's parameters and buffers
    (torch on the meta device), key by key and shape by shape (the 2.0 blur kernel included)."""
    path = os.path.join(REFERENCE_CONFIGS, name, "latent_upsampler", "config.json")
    with open(path) as f:
        raw = json.load(f)
    cfg = LTX2LatentUpsamplerConfig.from_json_file(path)
    abstract = nnx.eval_shape(lambda: LTX2LatentUpsamplerModel(cfg, rngs=nnx.Rngs(0)))
    with torch.device("meta"):
        ref = RefUpsampler(**{k: v for k, v in raw.items() if not k.startswith("_")})
    n = assert_reference_parameters(abstract, ref, UPSAMPLER_KEY_RULES, buffers=Buffer)
    buffers = sum(b.numel() for b in ref.buffers())
    print(f"{name}: {n} parameters, {buffers} buffer values")
    assert n == sum(p.numel() for p in ref.parameters()) and n > 400_000_000
    assert buffers == (25 if cfg.rational else 0)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("rational_spatial_scale", 3.0, r"rational_spatial_scale=3\.0.*0\.75, 1\.5, 2\.0, 4\.0"),
        ("use_rational_resampler", "yes", "use_rational_resampler"),
        ("mid_channels", 48, "multiple of 32"),
    ],
)
def test_config_refused(key, value, match):
    base = {"_class_name": "LTX2LatentUpsamplerModel", **TINY}
    with pytest.raises(ConfigError, match=match):
        LTX2LatentUpsamplerConfig.from_config_dict({**base, key: value})
    assert LTX2LatentUpsamplerConfig.from_config_dict(
        {**base, "some_new_key": 1}
    ) == LTX2LatentUpsamplerConfig.from_config_dict(base)  # as diffusers
    with pytest.raises(ConfigError, match="unknown setting some_new_key"):  # naming no diffusers class: strict
        LTX2LatentUpsamplerConfig.from_config_dict({**base, "_class_name": None, "some_new_key": 1})
    # The scale is read only where the rational resampler is built (LTX-2.3's temporal upsampler
    # ships rational_spatial_scale 1.0), as the reference.
    cfg = LTX2LatentUpsamplerConfig.from_config_dict(
        {**base, "spatial_upsample": False, "temporal_upsample": True, "rational_spatial_scale": 1.0}
    )
    assert cfg.rational is None and cfg.scale == (2, 1)
