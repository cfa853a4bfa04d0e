"""Parity of vidax's LTX-Video latent upsampler with diffusers' ``LTXLatentUpsamplerModel`` and
of the latent-upsample pipeline's latent maths with ``LTXLatentUpsamplePipeline``.

Tiny configs with distinct sizes (in_channels 12, mid_channels 64 (32 groups of 2), 2 blocks per
stage; latents B=2, T=3, H=4, W=5), one per upsampling the config allows: dims=3 spatial (the
released 0.9.7 layout), dims=3 temporal, dims=3 spatial+temporal, dims=2 spatial. Every torch
parameter is random (helpers.randomize_torch_module: norm weights 1 + N, biases N), the model is
saved with ``save_pretrained`` and read by ``load_component``.

Tolerances, float32: the reference and vidax sum the 3x3x3 conv products in different orders
(oneDNN vs XLA) over up to 1.7k terms per output, through 7 convs (the upsampler's and the
final one included); measured max |a - b| / max |b| <= 2.7e-6, held to 1e-5.
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.parity.helpers import assert_reference_parameters, max_rel_err, randomize_torch_module
from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError, InputError
from vidax.models.ltx.config import LTXLatentUpsamplerConfig
from vidax.models.ltx.upsampler import (
    LTXLatentUpsamplerModel,
    adain_filter_latent,
    denormalize_latents,
    normalize_latents,
    tone_map_latents,
    upsample_latents,
)
from vidax.weights.component import load_component
from vidax.weights.loader import KeyRules

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.pipelines.ltx.modeling_latent_upsampler import LTXLatentUpsamplerModel as RefUpsampler  # noqa: E402
from diffusers.pipelines.ltx.pipeline_ltx_latent_upsample import LTXLatentUpsamplePipeline  # noqa: E402

TOL = 1e-5
TINY = dict(in_channels=12, mid_channels=64, num_blocks_per_stage=2)
VARIANTS = {
    "3d_spatial": dict(dims=3, spatial_upsample=True, temporal_upsample=False),
    "3d_temporal": dict(dims=3, spatial_upsample=False, temporal_upsample=True),
    "3d_spatiotemporal": dict(dims=3, spatial_upsample=True, temporal_upsample=True),
    "2d_spatial": dict(dims=2, spatial_upsample=True, temporal_upsample=False),
}
SHAPE = (2, 12, 3, 4, 5)  # (B, C, T, H, W), diffusers' layout
RELEASED = os.path.join(REFERENCE_CONFIGS, "Lightricks__LTX-Video-0.9.7-dev", "latent_upsampler", "config.json")


def _cl(x):  # (B, C, T, H, W) -> (B, T, H, W, C)
    return np.moveaxis(np.asarray(x), 1, -1)


class _Jitted:
    """A model whose call is jitted once; :func:`upsample_latents` reads ``.dtype`` and calls it
    (eager JAX compiles every conv on its own: several seconds a call on CPU)."""

    def __init__(self, model):
        self.dtype, self.config, self._call = model.dtype, model.config, jax.jit(model.__call__)

    def __call__(self, x):
        return self._call(x)


def _latents(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (reference torch model, vidax model loaded from its save_pretrained folder)."""
    out = {}
    for i, (name, variant) in enumerate(sorted(VARIANTS.items())):
        ref = RefUpsampler(**TINY, **variant).eval()
        randomize_torch_module(ref, seed=10 + i)
        path = tmp_path_factory.mktemp(name)
        ref.save_pretrained(path)
        out[name] = (ref, load_component("LTXLatentUpsamplerModel", path))
    return out


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_upsampler_matches_diffusers(models, name):
    ref, ours = models[name]
    x, y = _latents(0), _latents(1)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
        other = ref(torch.from_numpy(y)).numpy()
    assert max_rel_err(other, want) > 0.1, "the reference output must depend on the input"
    st, ss = ours.config.scale
    b, c, t, h, w = SHAPE
    assert want.shape == (b, c, st * t - (st - 1), ss * h, ss * w)
    got = jax.jit(ours.__call__)(jnp.asarray(_cl(x)))
    assert got.shape == ours.output_shape(_cl(x).shape) == _cl(want).shape and got.dtype == jnp.float32
    err = max_rel_err(got, _cl(want))
    assert err < TOL, f"{name}: max rel err {err}"


def test_upsampler_bf16(models):
    """bf16 compute (convs in bf16, GroupNorm statistics and parameters float32): the reference in
    float32 is matched to a few bf16 ulps through the 14 convs (measured ~1e-2), held to 4e-2."""
    ref, _ = models["3d_spatial"]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        ours = load_component("LTXLatentUpsamplerModel", d, dtype=jnp.bfloat16)
    assert ours.initial_norm.scale[...].dtype == jnp.float32
    assert ours.res_blocks[0].conv1.kernel[...].dtype == jnp.bfloat16
    x = _latents(2)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    got = jax.jit(ours.__call__)(jnp.asarray(_cl(x)))
    assert got.dtype == jnp.bfloat16
    err = max_rel_err(np.asarray(got, np.float32), _cl(want))
    assert 0 < err < 4e-2, err


def test_upsample_pipeline_latent_flow(models):
    """upsample_latents == LTXLatentUpsamplePipeline(latents=..., output_type="latent") with a
    tiny LTX VAE whose latents_mean / latents_std / scaling_factor are random, for the plain path
    and with AdaIN and tone mapping on."""
    from diffusers import AutoencoderKLLTXVideo

    ref, ours = models["3d_spatial"]
    ours = _Jitted(ours)
    vae = AutoencoderKLLTXVideo(
        latent_channels=12,
        block_out_channels=(8,) * 4,
        decoder_block_out_channels=(8,) * 4,
        layers_per_block=(1,) * 5,
        decoder_layers_per_block=(1,) * 5,
        scaling_factor=0.7,
    )
    g = torch.Generator().manual_seed(3)
    vae.latents_mean.copy_(torch.randn(12, generator=g))
    vae.latents_std.copy_(torch.rand(12, generator=g) + 0.5)
    pipe = LTXLatentUpsamplePipeline(vae=vae, latent_upsampler=ref)
    x = _latents(4)
    mean, std = vae.latents_mean.numpy(), vae.latents_std.numpy()
    for adain, tone in ((0.0, 0.0), (0.6, 0.0), (1.0, 0.4), (0.3, 1.0)):
        want = pipe(
            latents=torch.from_numpy(x), output_type="latent", adain_factor=adain, tone_map_compression_ratio=tone
        ).frames.numpy()
        got = upsample_latents(
            ours, jnp.asarray(_cl(x)), mean, std, 0.7, adain_factor=adain, tone_map_compression_ratio=tone
        )
        err = max_rel_err(got, _cl(want))
        assert err < TOL, (adain, tone, err)
    # Without the final normalisation: what the pipeline decodes (un-normalised).
    raw = upsample_latents(ours, jnp.asarray(_cl(x)), mean, std, 0.7, normalize_output=False)
    np.testing.assert_allclose(
        np.asarray(normalize_latents(raw, mean, std, 0.7)),
        np.asarray(upsample_latents(ours, jnp.asarray(_cl(x)), mean, std, 0.7)),
        rtol=0,
        atol=0,
    )
    with pytest.raises(InputError, match="tone_map_compression_ratio"):
        upsample_latents(ours, jnp.asarray(_cl(x)), mean, std, tone_map_compression_ratio=1.5)


@pytest.mark.parametrize("factor", (0.3, 1.0, -2.0))
def test_adain_tone_map_normalize_match_diffusers(factor):
    """The pipeline's functions one by one (float32; per-channel reductions summed in another
    order: tolerance 1e-6 relative, measured <= 1.7e-7)."""
    rng = np.random.default_rng(7)
    lat = (2.0 * rng.standard_normal((2, 5, 3, 8, 10)) + 0.5).astype(np.float32)
    ref_lat = (0.5 * rng.standard_normal((2, 5, 3, 4, 5)) - 1.0).astype(np.float32)
    want = LTXLatentUpsamplePipeline.adain_filter_latent(
        None, torch.from_numpy(lat), torch.from_numpy(ref_lat), factor
    ).numpy()
    assert max_rel_err(want, lat) > 0.1  # really changes the latents
    got = adain_filter_latent(jnp.asarray(_cl(lat)), jnp.asarray(_cl(ref_lat)), factor)
    assert max_rel_err(got, _cl(want)) < 1e-6
    for compression in (0.0, 0.5, 1.0):
        want = LTXLatentUpsamplePipeline.tone_map_latents(None, torch.from_numpy(lat), compression).numpy()
        got = tone_map_latents(jnp.asarray(_cl(lat)), compression)
        assert max_rel_err(got, _cl(want)) < 1e-6
    mean, std = rng.standard_normal(5).astype(np.float32), (rng.random(5) + 0.5).astype(np.float32)
    for ours, theirs in (
        (normalize_latents, LTXLatentUpsamplePipeline._normalize_latents),
        (denormalize_latents, LTXLatentUpsamplePipeline._denormalize_latents),
    ):
        want = theirs(torch.from_numpy(lat), torch.from_numpy(mean), torch.from_numpy(std), 0.9).numpy()
        assert max_rel_err(ours(jnp.asarray(_cl(lat)), mean, std, 0.9), _cl(want)) < 1e-6
    with pytest.raises(InputError, match="same B and C"):
        adain_filter_latent(jnp.zeros((2, 3, 4, 4, 5)), jnp.zeros((2, 3, 4, 4, 6)))
    with pytest.raises(InputError, match="one entry per latent channel"):
        normalize_latents(jnp.zeros((1, 2, 2, 2, 5)), np.zeros(4), np.ones(4))


def test_full_size_parameter_count():
    """The released 0.9.7 spatial upsampler config builds abstractly with exactly the
    reference's parameters (torch on the meta device), key by key and shape by shape."""
    with open(RELEASED) as f:
        raw = json.load(f)
    cfg = LTXLatentUpsamplerConfig.from_json_file(RELEASED)
    abstract = nnx.eval_shape(lambda: LTXLatentUpsamplerModel(cfg, rngs=nnx.Rngs(0)))
    with torch.device("meta"):
        ref = RefUpsampler(**{k: v for k, v in raw.items() if not k.startswith("_")})
    n = assert_reference_parameters(abstract, ref, KeyRules())
    assert n == sum(p.numel() for p in ref.parameters()) and n > 50_000_000


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("dims", 1, "dims=1"),
        ("mid_channels", 48, "multiple of 32"),
        ("spatial_upsample", False, "at least one must be true"),
        ("temporal_upsample", True, "needs dims=3"),
        ("num_blocks_per_stage", 0, "num_blocks_per_stage=0"),
    ],
)
def test_config_refused(key, value, match):
    base = {"_class_name": "LTXLatentUpsamplerModel", **TINY, "dims": 2, "spatial_upsample": True}
    if key == "spatial_upsample":
        base["temporal_upsample"] = False
    with pytest.raises(ConfigError, match=match):
        LTXLatentUpsamplerConfig.from_config_dict({**base, key: value})
    assert LTXLatentUpsamplerConfig.from_config_dict(
        {**base, "some_new_key": 1}
    ) == LTXLatentUpsamplerConfig.from_config_dict(base)  # as diffusers
    with pytest.raises(ConfigError, match="unknown setting some_new_key"):  # naming no diffusers class: strict
        LTXLatentUpsamplerConfig.from_config_dict({**base, "_class_name": None, "some_new_key": 1})


def test_input_errors(models):
    _, ours = models["2d_spatial"]
    with pytest.raises(InputError, match="channels"):
        ours(jnp.zeros((1, 2, 3, 4, 5)))
    with pytest.raises(InputError, match="5-D"):
        ours(jnp.zeros((2, 3, 4, 12)))
