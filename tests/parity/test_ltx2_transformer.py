"""Parity of vidax's LTX-2 transformer with ``diffusers.LTX2VideoTransformer3DModel`` (tiny
configs of ``tests/parity/ltx2_reference.py``: distinct head counts and widths for the two
streams; every parameter randomised, saved with ``save_pretrained`` and loaded with the production
loader :func:`~vidax.weights.component.load_component`), video and audio outputs both.

Variants: LTX-2 (2.0, "split" RoPE as released), LTX-2.3's layers (gated
attention, cross-attention AdaLN, perturbed attention with STG on block 1, ``use_cross_timestep``)
and LTX-2.5's (no FFN bias, keyframe embedding, static prompt table). Latent grid (T, H, W) =
(2, 3, 5) (non-square, two latent frames), 7 audio frames, text of 8 tokens left-padded.

fp32 tolerance 1e-5 relative: both sides compute the same float32 arithmetic in another order
(XLA vs torch kernels, einsum vs SDPA, float32 sums); the RoPE tables are the reference's float32
operations on the host (equal up to the cos / sin implementations, ~1 ulp). Measured errors are
~5e-7 (printed); a wrong table, modulation row, mask or gate is off by > 1e-2.
"""

from __future__ import annotations

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import max_rel_err, randomize_torch_module
from tests.parity.ltx2_reference import TRANSFORMERS
from vidax.errors import InputError
from vidax.models.ltx2 import rope as ltx2_rope
from vidax.models.ltx2.convert import TRANSFORMER_PARAM_AXES
from vidax.models.ltx2.transformer import LTX2Forward
from vidax.parallel.chunked_step import ChunkedStep
from vidax.parallel.mesh import make_mesh
from vidax.parallel.offload import offloaded_stacks
from vidax.parallel.placement import check_sharded
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

B, T, H, W, M, L_TXT = 2, 2, 3, 5, 7, 8
N = T * H * W
FPS = 25.0
FP32_TOL = 1e-5
NAME = "LTX2VideoTransformer3DModel"


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """variant -> (reference module, checkpoint folder), built once per variant."""
    cache = {}

    def get(variant):
        if variant not in cache:
            torch.manual_seed(0)
            ref = diffusers.LTX2VideoTransformer3DModel(**TRANSFORMERS[variant]).eval()
            randomize_torch_module(ref, seed=0)
            path = tmp_path_factory.mktemp("ltx2_" + variant.replace(".", ""))
            ref.save_pretrained(path, safe_serialization=True)
            cache[variant] = ref, path
        return cache[variant]

    return get


def _inputs(variant, seed, grid=(T, H, W), m=M):
    cfg = TRANSFORMERS[variant]
    prompt = cfg.get("use_prompt_embeddings", True)
    g = np.random.default_rng(seed)
    n = math.prod(grid)
    x = g.standard_normal((B, n, cfg["in_channels"]), dtype=np.float32)
    a = g.standard_normal((B, m, cfg["audio_in_channels"]), dtype=np.float32)
    txt = g.standard_normal(
        (B, L_TXT, cfg["caption_channels"] if prompt else cfg["cross_attention_dim"]), dtype=np.float32
    )
    atxt = g.standard_normal(
        (B, L_TXT, cfg["caption_channels"] if prompt else cfg["audio_cross_attention_dim"]), dtype=np.float32
    )
    mask = (np.arange(L_TXT)[None] >= np.array([3, 0])[:, None]).astype(np.int64)  # left padding
    return dict(
        hidden_states=x,
        audio_hidden_states=a,
        encoder_hidden_states=txt,
        audio_encoder_hidden_states=atxt,
        timestep=np.array([300.0, 820.0], np.float32),
        audio_timestep=np.array([450.0, 90.0], np.float32),
        sigma=np.array([0.35, 0.8], np.float32),
        audio_sigma=np.array([0.6, 0.15], np.float32),
        encoder_attention_mask=mask,
        audio_encoder_attention_mask=mask[::-1].copy(),
    )


def _static(grid=(T, H, W), m=M, **kw):
    return {**dict(num_frames=grid[0], height=grid[1], width=grid[2], fps=FPS, audio_num_frames=m), **kw}


def _ref(ref, arrays, **static):
    with torch.no_grad():
        out = ref(
            **{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()},
            **static,
            return_dict=False,
        )
    return tuple(o.numpy() for o in out)


def _ours(model, arrays, **static):
    coords = {k: static.pop(k) for k in ("video_coords", "audio_coords") if k in static}
    f = nnx.jit(lambda mdl, kw: mdl(**kw, **static, **coords))
    return tuple(np.asarray(o) for o in f(model, {k: jnp.asarray(v) for k, v in arrays.items()}))


def _check(got, want, what):
    for name, g, w in zip(("video", "audio"), got, want):
        assert g.shape == w.shape, (name, g.shape, w.shape)
        err = max_rel_err(g, w)
        print(f"{what} {name}: max_rel_err={err:.2e}")
        assert err < FP32_TOL, (what, name, err)


def _variant_static(variant):
    if variant in ("2.3", "2.5"):  # STG on block 1, the first sample perturbed; 2.3's cross timestep
        return dict(
            spatio_temporal_guidance_blocks=[1],
            perturbation_mask=np.array([0.0, 1.0], np.float32),
            use_cross_timestep=True,
        )
    return {}


@pytest.mark.parametrize("variant", list(TRANSFORMERS))
def test_transformer_matches_reference(refs, variant):
    ref, path = refs(variant)
    model = load_component(NAME, path)
    arrays = _inputs(variant, 1)
    extra = _variant_static(variant)
    pm = extra.pop("perturbation_mask", None)
    if pm is not None:
        arrays["perturbation_mask"] = pm
    if variant == "2.5":
        arrays["video_keyframes_mask"] = (np.arange(N) < H * W).astype(np.float32)[None, :, None].repeat(B, 0)
    want = _ref(ref, arrays, **_static(**extra))
    _check(_ours(model, arrays, **_static(**extra)), want, variant)
    # The reference's video and audio outputs both depend on each input: video latents, audio
    # latents, either text (the other stream's inputs act through the audio<->video attention,
    # ~4e-3 here: 100x the tolerance).
    for key in ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "audio_encoder_hidden_states"):
        changed = _ref(ref, {**arrays, key: arrays[key][::-1].copy()}, **_static(**extra))
        assert all(max_rel_err(c, w) > 1e-3 for c, w in zip(changed, want)), key
    if variant == "2.3":
        # STG perturbs only the sample whose perturbation_mask is 0.
        plain = _ref(
            ref, {k: v for k, v in arrays.items() if k != "perturbation_mask"}, **_static(use_cross_timestep=True)
        )
        for p, w in zip(plain, want):
            assert max_rel_err(p[0], w[0]) > 1e-2 and max_rel_err(p[1], w[1]) < 1e-6
        # Modality isolation (no audio<->video attention) as the reference.
        iso = dict(extra, isolate_modalities=True)
        want_iso = _ref(ref, arrays, **_static(**iso))
        assert all(max_rel_err(i, w) > 1e-2 for i, w in zip(want_iso, want))
        _check(_ours(model, arrays, **_static(**iso)), want_iso, "2.3 isolate_modalities")


def test_per_token_timesteps_and_explicit_coords(refs):
    """The I2V / condition pipelines' call: (B, N) video timesteps with the first latent frame at
    t = 0, (B,) audio timesteps, explicit coordinates (the second sample's shifted) as numpy, or
    their tables from ``rope_tables`` as jit arguments."""
    ref, path = refs("2.0")
    model = load_component(NAME, path)
    arrays = _inputs("2.0", 2)
    ts = np.empty((B, N), np.float32)
    ts[0], ts[1] = 700.0, 250.0
    ts[:, : H * W] = 0.0
    arrays["timestep"] = ts
    vc, ac = model.rope_coords(B, T, H, W, FPS, M)
    vc[1] += np.array([0.5, 64.0, 96.0], np.float32)[:, None, None]
    ac[1] += np.float32(0.25)
    coords = dict(video_coords=vc, audio_coords=ac)
    want = _ref(ref, arrays, **{k: torch.from_numpy(v) for k, v in coords.items()})
    got = _ours(model, arrays, **coords)
    _check(got, want, "per-token + coords")
    # The same tables computed once on the host and passed as jit arguments (as a denoising
    # step would, instead of constants in each trace).
    tables = model.rope_tables(vc, ac)
    step = nnx.jit(lambda mdl, kw, r: mdl(**kw, rope=r))
    passed = step(model, {k: jnp.asarray(v) for k, v in arrays.items()}, tables)
    assert all(max_rel_err(np.asarray(p), g) < 1e-6 for p, g in zip(passed, got))
    flat = _ref(
        ref,
        {**arrays, "timestep": np.array([700.0, 250.0], np.float32)},
        **{k: torch.from_numpy(v) for k, v in coords.items()},
    )
    assert max_rel_err(flat[0], want[0]) > 1e-2
    # The coordinates are the reference's prepare_video_coords / prepare_audio_coords.
    with torch.no_grad():
        rvc = ref.rope.prepare_video_coords(B, T, H, W, "cpu", fps=FPS).numpy()
        rac = ref.audio_rope.prepare_audio_coords(B, M, "cpu").numpy()
    np.testing.assert_array_equal(model.rope_coords(B, T, H, W, FPS, M)[0], rvc)
    np.testing.assert_array_equal(model.rope_coords(B, T, H, W, FPS, M)[1], rac)


@pytest.mark.parametrize("rope_type", ["split", "interleaved"])
def test_rope_tables_at_full_width(rope_type):
    """The host tables at the released widths (video 32 heads of 128, audio 32 of 64, the
    cross-modal time tables 2048 wide), 121 frames at 768 x 512 with its 126 audio latents: the
    reference's float64 frequencies and float32 positions reproduced (angles up to ~1.6e4 rad,
    where one float32 ulp of an angle moves cos / sin by ~1e-3)."""
    from diffusers.models.transformers.transformer_ltx2 import LTX2AudioVideoRotaryPosEmbed

    t, h, w, m, heads = 16, 16, 24, 126, 32
    common = dict(theta=10000.0, causal_offset=1, double_precision=True, rope_type=rope_type, num_attention_heads=heads)
    video = LTX2AudioVideoRotaryPosEmbed(4096, modality="video", scale_factors=(8, 32, 32), **common)
    audio = LTX2AudioVideoRotaryPosEmbed(2048, modality="audio", scale_factors=[4], **common)
    cross = LTX2AudioVideoRotaryPosEmbed(2048, modality="video", **common)
    vc = video.prepare_video_coords(1, t, h, w, "cpu", fps=24.0)
    ac = audio.prepare_audio_coords(1, m, "cpu")
    ours_vc = ltx2_rope.video_coords(1, t, h, w, 24.0)
    np.testing.assert_array_equal(ours_vc, vc.numpy())
    np.testing.assert_array_equal(ltx2_rope.audio_coords(1, m), ac.numpy())
    cases = ((video, vc, 4096, (20, 2048, 2048)), (audio, ac, 2048, (20,)), (cross, vc[:, :1], 2048, (20,)))
    for rope, coords, dim, base in cases:
        with torch.no_grad():
            cos_ref, sin_ref = rope(coords)
        cos, sin = ltx2_rope.rope_table(coords.numpy(), dim, base, 10000.0)
        for mine, theirs in ((cos, cos_ref), (sin, sin_ref)):
            theirs = theirs.numpy()
            if rope_type == "interleaved":
                theirs = theirs[..., 0::2]
            else:  # (B, heads, L, r) -> (B, L, heads·r)
                theirs = theirs.transpose(0, 2, 1, 3).reshape(*mine.shape)
            diff = np.abs(mine - theirs).max()
            print(f"{rope_type} dim {dim}: max |table diff| {diff:.1e}")
            assert diff < 2e-6


def test_streamed_blocks_equal_the_call(refs):
    """Block streaming (one-layer chunks from host memory, ``embed`` / ``run_blocks`` / ``head``
    as separate executables) equals the resident call, with STG's layer index carried across
    the chunks (block 1 perturbed)."""
    ref, path = refs("2.3")
    arrays = _inputs("2.3", 3)
    static = _static(spatio_temporal_guidance_blocks=[1], use_cross_timestep=True)
    resident = _ours(load_component(NAME, path), arrays, **dict(static))
    streamed = load_component(NAME, path, offload=1)
    stacks = offloaded_stacks(streamed)
    assert [s.attr for s in stacks] == ["transformer_blocks"] and stacks[0].sizes == [1, 1, 1]
    graphdef, params = nnx.split(streamed)
    keys = list(arrays)
    signature = inspect.signature(LTX2Forward)  # embed takes its arguments

    def positional(latents, state, *a):  # the stages take embed's arguments positionally
        bound = signature.bind(**dict(zip(keys, a)), **static)
        bound.apply_defaults()
        return bound.args

    step = ChunkedStep(graphdef, stacks, positional, lambda out, latents, state, *a: (out, None))
    args = tuple(jnp.asarray(arrays[k]) for k in keys)
    out, _ = step.compile_for(params, None, None, *args)(params, None, None, *args)
    for o, r in zip(out, resident):
        err = max_rel_err(np.asarray(o), r)
        print(f"streamed vs resident max_rel_err={err:.2e}")
        assert err < 1e-6 and float(np.abs(r).max()) > 1e-3
    # STG changed the result (the index reached block 1 through the chunks).
    plain = _ours(load_component(NAME, path), arrays, **_static(use_cross_timestep=True))
    assert max_rel_err(plain[0], resident[0]) > 1e-2


@pytest.mark.parametrize("grid, m", [((3, 3, 5), 7), ((2, 3, 5), 8)], ids=["padded", "even"])
def test_sharded_equals_single_device(refs, grid, m):
    """tensor 2 x sequence 2 x data 2 on the 8 fake CPU devices, LTX-2.3 with STG: video 45
    tokens and audio 7 padded to 46 and 8 (their padded keys masked in every attention, the
    audio<->video attention then attends locally), or 30 and 8 (Ulysses of both streams); equal
    to the single-device model (float32, partial sums in another order)."""
    _, path = refs("2.3")
    arrays = _inputs("2.3", 4, grid, m)
    static = _static(grid, m, spatio_temporal_guidance_blocks=[1], use_cross_timestep=True)
    want = _ours(load_component(NAME, path), arrays, **dict(static))
    mesh = make_mesh(2, 2, 2, devices=jax.devices()[:8])
    sharded = load_component(NAME, path, mesh=mesh)
    check_sharded(sharded, TRANSFORMER_PARAM_AXES, mesh, "transformer")
    got = _ours(sharded, arrays, **static)
    for g, w in zip(got, want):
        err = max_rel_err(g, w)
        print(f"{grid}, {m}: sharded max_rel_err={err:.2e}")
        assert err < FP32_TOL


def test_bad_calls_are_refused_by_name(refs):
    _, path = refs("2.0")
    model = load_component(NAME, path)
    arrays = {k: jnp.asarray(v) for k, v in _inputs("2.0", 5).items()}
    with pytest.raises(InputError, match=r"spatio_temporal_guidance_blocks=\[1\] needs a perturbed_attn=true"):
        model(**arrays, **_static(spatio_temporal_guidance_blocks=[1]))
    with pytest.raises(InputError, match=r"audio_timestep must be \(B,\)"):
        model(**{**arrays, "audio_timestep": jnp.ones((B, 3))}, **_static())
    with pytest.raises(InputError, match=r"fps=0 must be a positive number"):
        model(**arrays, **_static(fps=0))
    with pytest.raises(InputError, match=r"video_coords must be a concrete \(host\) array"):
        vc, ac = model.rope_coords(B, T, H, W, FPS, M)
        nnx.jit(lambda mdl, v: mdl(**arrays, video_coords=v, audio_coords=ac))(model, jnp.asarray(vc))
