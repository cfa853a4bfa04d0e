"""Parity of vidax's LTX-Video transformer with ``diffusers.LTXVideoTransformer3DModel`` (tiny
config, every parameter randomised, saved with ``save_pretrained`` and loaded with the production
loader :func:`~vidax.weights.component.load_component`).

Dimensions are all distinct: 4 heads of 7 (D = 28: the RoPE table has D // 6 = 4 frequencies and
(D mod 6) / 2 = 2 unrotated pairs at the front, and its pairs straddle head boundaries, so a
per-head table would fail), caption_channels 20, in 6 / out 9 channels, 2 layers, FFN 112;
latent grid (T, H, W) = (3, 3, 5) -> N = 45 tokens (H != W), text L = 7 with valid lengths 5 and 2.

fp32 tolerances: both sides compute the same float32 arithmetic in a different order (XLA vs
torch kernels, einsum vs SDPA); the RoPE angles are built op for op as the reference, but reach a
few hundred radians here, where XLA's and torch's float32 cos / sin may differ by an ulp of the
angle. Measured errors are ~1e-6 relative (printed); 1e-5 relative of the output's max is ~10x
headroom and far below what any wrong operation gives (those show up at >1e-2).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import max_rel_err, randomize_torch_module
from vidax.models.ltx.convert import TRANSFORMER_PARAM_AXES
from vidax.models.ltx.rope import grid_coords, ltx_rope, rope_frequencies, video_coords_to_grid
from vidax.parallel.chunked_step import ChunkedStep
from vidax.parallel.mesh import make_mesh
from vidax.parallel.offload import offloaded_stacks
from vidax.parallel.placement import check_sharded
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

TINY = dict(
    in_channels=6,
    out_channels=9,
    patch_size=1,
    patch_size_t=1,
    num_attention_heads=4,
    attention_head_dim=7,
    cross_attention_dim=28,
    num_layers=2,
    activation_fn="gelu-approximate",
    qk_norm="rms_norm_across_heads",
    norm_elementwise_affine=False,
    norm_eps=1e-6,
    caption_channels=20,
    attention_bias=True,
    attention_out_bias=True,
)
B, T, H, W = 2, 3, 3, 5
N = T * H * W
L_TXT = 7
VALID = (5, 2)
FRAME_RATE = 25
SCALE = (8 / FRAME_RATE, 32, 32)  # (vae temporal compression / fps, spatial, spatial), as LTXPipeline
FP32_TOL = 1e-5


@pytest.fixture(scope="module")
def ref_and_path(tmp_path_factory):
    torch.manual_seed(0)
    ref = diffusers.LTXVideoTransformer3DModel(**TINY).eval()
    randomize_torch_module(ref, seed=0)
    path = tmp_path_factory.mktemp("ltx_ref")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, path


@pytest.fixture(scope="module")
def model(ref_and_path):
    return load_component("LTXVideoTransformer3DModel", ref_and_path[1])


def _inputs(seed):
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, N, TINY["in_channels"]), dtype=np.float32)
    txt = g.standard_normal((B, L_TXT, TINY["caption_channels"]), dtype=np.float32)
    mask = (np.arange(L_TXT)[None] < np.array(VALID)[:, None]).astype(np.int64)
    return x, txt, mask


def _condition_coords():
    """``LTXConditionPipeline``-style ``video_coords`` (B, 3, N): pixel coordinates of each latent
    (frame ``max(8f + 1 - 8, 0)`` in seconds, rows / columns x 32), the second sample shifted."""
    f, h, w = np.meshgrid(np.arange(T), np.arange(H), np.arange(W), indexing="ij")
    coords = np.stack([np.maximum(f * 8 + 1 - 8, 0) / FRAME_RATE, h * 32.0, w * 32.0]).reshape(3, N)
    coords = np.stack([coords, coords + np.array([[0.4], [64.0], [96.0]])]).astype(np.float32)
    return coords


def _ref_forward(ref, x, txt, ts, mask, coords=None):
    kw = (
        dict(video_coords=torch.from_numpy(coords))
        if coords is not None
        else dict(num_frames=T, height=H, width=W, rope_interpolation_scale=SCALE)
    )
    with torch.no_grad():
        out = ref(
            torch.from_numpy(x),
            torch.from_numpy(txt),
            torch.from_numpy(ts),
            torch.from_numpy(mask),
            return_dict=False,
            **kw,
        )[0]
    return out.numpy()


_GRID = nnx.jit(lambda m, x, c, t, k: m(x, c, t, k, T, H, W, SCALE))
_COORDS = nnx.jit(lambda m, x, c, t, k, v: m(x, c, t, k, video_coords=v))


def _run(model, x, txt, ts, mask, coords=None):
    args = [jnp.asarray(a) for a in (x, txt, ts, mask)]
    out = _GRID(model, *args) if coords is None else _COORDS(model, *args, jnp.asarray(coords))
    return np.asarray(out.astype(jnp.float32))


def test_interpolation_scale_padded_mask_per_sample_timestep(ref_and_path, model):
    """(a) LTXPipeline's call: rope_interpolation_scale, text padded to different lengths, (B,) timesteps."""
    ref = ref_and_path[0]
    x, txt, mask = _inputs(1)
    ts = np.array([37.5, 912.25], np.float32)
    want = _ref_forward(ref, x, txt, ts, mask)
    got = _run(model, x, txt, ts, mask)
    assert got.shape == (B, N, TINY["out_channels"])
    err = max_rel_err(got, want)
    print(f"(a) interpolation-scale path fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    # The comparison is not vacuous: the reference's output depends on every input we feed it.
    for changed in (
        _ref_forward(ref, x[::-1].copy(), txt, ts, mask),
        _ref_forward(ref, x, txt, ts[::-1].copy(), mask),
        _ref_forward(ref, x, txt, ts, np.ones_like(mask)),  # the mask matters
    ):
        assert max_rel_err(changed, want) > 1e-2
    # Padded text tokens are not attended: changing them changes nothing.
    txt2 = txt.copy()
    txt2[1, VALID[1] :] += 3.0
    assert max_rel_err(_run(model, x, txt2, ts, mask), got) < 1e-6


def test_per_token_timesteps_and_video_coords(ref_and_path, model):
    """(b) the condition pipeline's call: (B, N) timesteps with the first latent frame at t=0
    and explicit video_coords."""
    ref = ref_and_path[0]
    x, txt, mask = _inputs(2)
    ts = np.empty((B, N), np.float32)
    ts[0], ts[1] = 700.0, 250.0
    ts[:, : H * W] = 0.0  # conditioning tokens sit at their own timestep
    coords = _condition_coords()
    want = _ref_forward(ref, x, txt, ts, mask, coords)
    got = _run(model, x, txt, ts, mask, coords)
    err = max_rel_err(got, want)
    print(f"(b) per-token timesteps + video_coords fp32 max_rel_err={err:.2e}")
    assert err < FP32_TOL
    flat = np.full((B,), 700.0, np.float32)
    assert max_rel_err(_ref_forward(ref, x, txt, flat, mask, coords), want) > 1e-2
    assert max_rel_err(_ref_forward(ref, x, txt, ts, mask, coords[::-1].copy()), want) > 1e-3


def test_streamed_stages_equal_the_call(ref_and_path, model):
    """Block streaming runs ``embed``, ``run_blocks`` on one-layer chunks from host memory and
    ``head`` as separate executables (vidax.parallel.chunked_step.ChunkedStep); that equals the
    resident model call."""
    x, txt, mask = _inputs(3)
    ts = np.array([10.0, 600.0], np.float32)
    resident = _run(model, x, txt, ts, mask)
    streamed = load_component("LTXVideoTransformer3DModel", ref_and_path[1], offload=1)
    stacks = offloaded_stacks(streamed)
    assert [s.attr for s in stacks] == ["transformer_blocks"] and stacks[0].sizes == [1, 1]
    graphdef, params = nnx.split(streamed)
    step = ChunkedStep(
        graphdef, stacks, lambda latents, state, *a: (*a, T, H, W, SCALE), lambda out, latents, state, *a: (out, None)
    )
    args = tuple(jnp.asarray(a) for a in (x, txt, ts, mask))
    out, _ = step.compile_for(params, None, None, *args)(params, None, None, *args)
    err = max_rel_err(np.asarray(out), resident)
    print(f"streamed vs resident max_rel_err={err:.2e}")
    # The same float32 per-layer computations cut at other jit boundaries.
    assert err < 1e-6 and float(np.abs(resident).max()) > 1e-3


def test_sharded_equals_single_device(ref_and_path, model):
    """dp=2 x tp=2 x sp=2 at once: Ulysses SP (45 tokens padded to 46, the padded keys masked),
    TP over the 4 heads, DP over the batch, with the padded text mask: equal to the single-device
    model (fp32; the sharded program sums matmul partials and norm statistics in another order)."""
    sizes = (2, 2, 2)
    x, txt, mask = _inputs(4)
    ts = np.array([123.0, 456.0], np.float32)
    want = _run(model, x, txt, ts, mask)
    mesh = make_mesh(*sizes, devices=jax.devices()[: math.prod(sizes)])
    sharded = load_component("LTXVideoTransformer3DModel", ref_and_path[1], mesh=mesh)
    check_sharded(sharded, TRANSFORMER_PARAM_AXES, mesh, "transformer")
    err = max_rel_err(_run(sharded, x, txt, ts, mask), want)
    print(f"{sizes}: max_rel_err={err:.2e}")
    assert err < FP32_TOL


@pytest.mark.parametrize("dim", [28, 2048, 4096])
def test_rope_tables_match_reference(dim):
    """The cos / sin tables at the tiny and the released widths (2048: 0.9.0-0.9.5, 4096:
    0.9.7), on a 768 x 512 x 97-frame latent grid's scale. Coordinates and angles are the
    reference's float32 operations (equal bit for bit: the tiny width's tables differ only by the
    cos / sin implementations, ~1e-7). At full size a few frequencies are 1 ulp off torch's
    (SLEEF) pow; the angles reach ~1.6e4 rad, where that ulp moves cos / sin by up to ~2.4e-4
    (measured), in a small fraction of the entries."""
    rope = diffusers.models.transformers.transformer_ltx.LTXVideoRotaryPosEmbed(dim=dim)
    grid = (4, 6, 8)  # the largest angles (~1.6e4 rad) are at coordinate 0 already
    hs = torch.zeros(B, math.prod(grid), dim)
    with torch.no_grad():
        cos_ref, sin_ref = rope(hs, *grid, rope_interpolation_scale=SCALE)
        vc = torch.from_numpy(_condition_coords()) if dim == 28 else None
        vcos_ref, vsin_ref = rope(torch.zeros(B, N, dim), video_coords=vc) if vc is not None else (None, None)
    cos, sin = ltx_rope(grid_coords(B, grid, SCALE), dim)
    np.testing.assert_array_equal(cos_ref[..., 0::2].numpy(), cos_ref[..., 1::2].numpy())
    for mine, theirs in ((cos, cos_ref), (sin, sin_ref)):
        diff = np.abs(np.asarray(mine) - theirs[..., 0::2].numpy())
        print(f"D={dim}: max |table diff| {diff.max():.1e}, > 1e-5: {np.mean(diff > 1e-5):.1e}")
        assert diff.max() < (1e-6 if dim == 28 else 5e-4) and np.mean(diff > 1e-5) < 1e-2
    if vc is not None:
        vcos, vsin = ltx_rope(video_coords_to_grid(jnp.asarray(vc.numpy())), dim)
        np.testing.assert_allclose(np.asarray(vcos), vcos_ref[..., 0::2].numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(np.asarray(vsin), vsin_ref[..., 0::2].numpy(), rtol=0, atol=1e-6)
    # The frequencies follow torch's float32 linspace exactly.
    f_ref = (10000.0 ** torch.linspace(0.0, 1.0, dim // 6)) * math.pi / 2.0
    assert np.abs(rope_frequencies(dim) / f_ref.numpy() - 1).max() < 2.5e-7  # <= 1 ulp (pow)
