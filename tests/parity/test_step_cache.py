"""Step caching (First-Block Cache, MagCache, TaylorSeer) against diffusers 0.42.1's hooks.

Both sides run the tiny random pipelines of the parity tests with the same config and latents.
The reference's decisions are read from the last block's attention, per transformer call: it runs
only when the blocks really compute (a skipped block returns its input, a First-Block Cache skip
runs the first block alone). Wan and HunyuanVideo call the transformer for cond and uncond
separately (one cache state each), LTX-Video batches them (one state); HunyuanVideo runs two block
stacks over two streams (video, text). vidax must make
the same decisions step by step and branch by branch, and give the same video (>= 60 dB fp32).
Every config parameter is set to a non-default value, and each threshold is one at which the
reference really skips.
"""

import re

import numpy as np
import pytest

from tests.parity.helpers import psnr
from tests.parity.hunyuan_reference import build_reference_hunyuan_pipeline
from tests.parity.ltx_reference import build_reference_ltx_pipeline, packed_noise
from tests.parity.wan_reference import build_reference_wan_pipeline

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
from diffusers.hooks import FirstBlockCacheConfig as RefFBC  # noqa: E402
from diffusers.hooks import MagCacheConfig as RefMag  # noqa: E402
from diffusers.hooks import TaylorSeerCacheConfig as RefTS  # noqa: E402

import vidax  # noqa: E402
from vidax.errors import InputError  # noqa: E402

STEPS = 8


class Family:
    """A reference pipeline, the vidax one loaded from the same folder, the call, and the
    per-call block evaluation counter."""

    def __init__(self, name, path, ref, call, latents, separate):
        self.name, self.path, self.ref, self.call, self.latents, self.separate = name, path, ref, call, latents, separate
        t = ref.transformer
        stacks = [getattr(t, n) for n in ("blocks", "transformer_blocks", "single_transformer_blocks") if hasattr(t, n)]
        tail = stacks[-1][-1]
        self._count = []
        (getattr(tail, "attn1", None) or tail.attn).register_forward_hook(lambda *a: self._count.append(1))
        self.pipe = vidax.load_pipeline(path, dtype="float32")
        self.uncached = self.run_ref(None)[0]

    def run_ref(self, config):
        """(frames, per-branch pattern) of the reference with ``config`` (None: no cache)."""
        t = self.ref.transformer
        if config is not None:
            t.enable_cache(config)
        per_call, orig = [], t.forward

        def forward(*a, **k):
            n0 = len(self._count)
            out = orig(*a, **k)
            per_call.append(len(self._count) - n0)
            return out

        t.forward = forward
        try:
            with torch.no_grad():
                frames = self.ref(latents=self.latents.clone(), output_type="np", **self.call).frames
        finally:
            del t.forward
            if config is not None:
                t.disable_cache()
        letters = "".join("C" if n else "S" for n in per_call)
        pats = {"cond": letters[0::2], "uncond": letters[1::2]} if self.separate else {"all": letters}
        return np.asarray(frames, np.float32), pats

    def run(self, config, pipe=None):
        pipe = pipe or self.pipe
        pipe.enable_cache(config)
        try:
            out = pipe(latents=self.latents.numpy(), progress=False, **self.call)
        finally:
            pipe.disable_cache()
        return out.frames, out.stats


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("wan_cache"))
    ref = build_reference_wan_pipeline(path)
    call = dict(prompt=["a red car walking over the sea"], negative_prompt=["blue sky"], height=32, width=48,
                num_frames=9, num_inference_steps=STEPS, guidance_scale=4.5, max_sequence_length=16)
    latents = torch.randn(1, 12, 3, 4, 6, generator=torch.Generator().manual_seed(7))
    return Family("wan", path, ref, call, latents, separate=True)


@pytest.fixture(scope="module")
def ltx(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ltx_cache"))
    ref = build_reference_ltx_pipeline(path)
    size = dict(height=32, width=64, num_frames=9)
    call = dict(prompt=["a red fox in the snow"], negative_prompt=["blurry"], num_inference_steps=STEPS,
                guidance_scale=3.0, frame_rate=24, max_sequence_length=16, decode_timestep=0.05,
                decode_noise_scale=0.0, **size)
    return Family("ltx", path, ref, call, packed_noise(1, **size), separate=False)


@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hunyuan_cache"))
    ref = build_reference_hunyuan_pipeline(path, None)
    call = dict(prompt="a cat walks on the grass", negative_prompt="blurry low quality video", true_cfg_scale=3.0,
                guidance_scale=2.0, height=48, width=32, num_frames=9, num_inference_steps=STEPS,
                max_sequence_length=24)
    latents = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 4, 3, 6, 4)).astype(np.float32))
    return Family("hunyuan", path, ref, call, latents, separate=True)


@pytest.fixture(params=["wan", "ltx"])
def family(request):
    return request.getfixturevalue(request.param)


def check_parity(fam, ref_config, config, *, min_db=60.0):
    """Same decisions, same video (>= ``min_db``), and a cache that changed the reference's
    video (what the decisions are compared for is real); returns the patterns."""
    want, pats = fam.run_ref(ref_config)
    got, stats = fam.run(config)
    assert stats.cache.patterns == pats, (stats.cache.patterns, pats)
    assert any("S" in p for p in pats.values()), f"the reference skipped nothing: {pats}"
    value = psnr(got, want)
    cache_effect = psnr(want, fam.uncached)
    print(f"{fam.name} {type(config).__name__}: {pats}; vidax vs diffusers {value:.1f} dB, diffusers cached vs "
          f"uncached {cache_effect:.1f} dB")
    # Measured ~140 dB (fp32 summation order); the cache's own effect is 30+ dB larger than that
    # error, so the comparison sees the cache.
    assert value >= min_db
    assert cache_effect < value - 30
    assert "step cache" in stats.summary() and stats.cache.blocks_skipped > 0
    return pats


@pytest.mark.parametrize("threshold", [0.03, 0.3])
def test_first_block_cache_matches_diffusers(family, threshold):
    pats = check_parity(family, RefFBC(threshold=threshold), vidax.FirstBlockCacheConfig(threshold=threshold))
    family.patterns = getattr(family, "patterns", {})
    family.patterns[threshold] = pats
    if len(family.patterns) == 2:  # the threshold changes what is skipped
        assert family.patterns[0.03] != family.patterns[0.3]


def test_mag_cache_matches_diffusers(family):
    rng = np.random.default_rng(3)
    # Ratios of a different length than the steps (interpolated, as diffusers does).
    ratios = [1.0] + list(1.0 + 0.03 * rng.standard_normal(STEPS + 2))
    kw = dict(threshold=0.09, max_skip_steps=2, retention_ratio=0.3, num_inference_steps=STEPS, mag_ratios=ratios)
    check_parity(family, RefMag(**kw), vidax.MagCacheConfig(**kw))


@pytest.mark.parametrize("threshold", [0.5])
def test_two_streams_and_two_stacks_hunyuan(hunyuan, threshold):
    """HunyuanVideo: the cached residual covers both streams and both stacks (First-Block
    Cache); MagCache's skip adds the video residual and passes the text stream on."""
    check_parity(hunyuan, RefFBC(threshold=threshold), vidax.FirstBlockCacheConfig(threshold=threshold))
    kw = dict(threshold=0.2, max_skip_steps=3, retention_ratio=0.25, num_inference_steps=STEPS,
              mag_ratios=[1.0, 1.05, 0.98, 1.02, 0.99, 1.01, 1.04, 0.97])
    check_parity(hunyuan, RefMag(**kw), vidax.MagCacheConfig(**kw))


def test_mag_cache_calibration_prints_the_reference_ratios(wan, capsys):
    wan.run_ref(RefMag(calibrate=True, num_inference_steps=STEPS))
    want = [[float(v) for v in m.split(",")] for m in re.findall(r"\[([-0-9., e]+)\]", capsys.readouterr().out)]
    _, stats = wan.run(vidax.MagCacheConfig(calibrate=True, num_inference_steps=STEPS))
    got = [[float(v) for v in m.split(",")] for m in re.findall(r"\[([-0-9., e]+)\]", capsys.readouterr().out)]
    assert len(want) == len(got) == 2  # cond and uncond, each its own state
    # Means of norm ratios of fp32 residuals: fp32 rounding only.
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert stats.cache.blocks_skipped == 0 and len(set(map(tuple, want))) == 2


# bfloat16 factors on Wan only: their arithmetic is the family-independent end of the step.
@pytest.mark.parametrize("name, dtype", [("wan", "float32"), ("ltx", "float32"), ("wan", "bfloat16")])
def test_taylorseer_lite_matches_diffusers(request, name, dtype):
    family = request.getfixturevalue(name)
    kw = dict(cache_interval=2, disable_cache_before_step=2, disable_cache_after_step=7, max_order=2,
              use_lite_mode=True)
    ref = RefTS(taylor_factors_dtype=getattr(torch, dtype), **kw)
    # bfloat16 factors: a prediction that differs by fp32 rounding may round to the neighbouring
    # bfloat16 value (one ulp, 2**-8 relative) in a few elements; measured ~75 dB.
    check_parity(family, ref, vidax.TaylorSeerCacheConfig(taylor_factors_dtype=dtype, **kw),
                 min_db=60.0 if dtype == "float32" else 50.0)


def test_taylorseer_default_identifiers_hook_nothing_here(wan):
    """TaylorSeer's default patterns (``^blocks.*attn``...) match no module of Wan's transformer
    (its attention modules are attn1 / attn2): diffusers' run is the uncached one, and vidax's too."""
    want, _ = wan.run_ref(RefTS())
    assert psnr(want, wan.uncached) == float("inf")
    got, stats = wan.run(vidax.TaylorSeerCacheConfig())
    assert stats.cache is None and psnr(got, want) >= 60.0


def test_mesh_and_block_streaming_equal_the_single_device_cached_run(ckpt):
    """On the embedded tiny Wan (its heads split over a (2, 2, 2) mesh; 48x48 pixels give 27
    tokens, padded to 28 for sequence=2, so the cache must measure the real rows only) and with
    its blocks streamed in chunks of 1 and 2 layers: the same decisions and the same video as the
    single-device cached run; a step that skips streams no chunk (First-Block Cache: only the
    one holding the first block)."""
    from vidax.parallel.offload import OffloadedBlocks

    call = dict(prompt="a red car on a bridge", negative_prompt="blurry", height=48, width=48, num_frames=9,
                num_inference_steps=STEPS, guidance_scale=4.0, max_sequence_length=16, seed=3, progress=False,
                output_type="latent")
    configs = dict(fbc=vidax.FirstBlockCacheConfig(threshold=0.5), mag=vidax.MagCacheConfig(
        threshold=0.2, max_skip_steps=2, retention_ratio=0.3, num_inference_steps=STEPS,
        mag_ratios=[1.0, 1.02, 0.97, 1.01, 0.99, 1.0, 1.03, 0.98]))

    def run(pipe, config):
        pipe.enable_cache(config)
        try:
            out = pipe(**call)
        finally:
            pipe.disable_cache()
        return out.frames, out.stats.cache

    single = vidax.load_pipeline(ckpt, dtype="float32")
    base = {k: run(single, c) for k, c in configs.items()}
    uncached = single(**call).frames
    for k, (lat, rep) in base.items():
        assert rep.blocks_skipped > 0 and "S" in rep.patterns["cond"], (k, rep.patterns)
        assert np.abs(lat - uncached).max() > 1e-4  # the cache changed the result
    fetched = []
    fetch = OffloadedBlocks.fetch
    OffloadedBlocks.fetch = lambda self, i: fetched.append(i) or fetch(self, i)
    try:
        for options in (dict(mesh=(2, 2, 2)), dict(offload=1), dict(offload=2)):
            pipe = vidax.load_pipeline(ckpt, dtype="float32", **options)
            for k, config in configs.items():
                fetched.clear()
                lat, rep = run(pipe, config)
                assert rep.patterns == base[k][1].patterns, (options, k)
                # Other summation orders on the mesh (measured ~1e-6); the streamed step runs
                # the same arithmetic as the resident one.
                np.testing.assert_allclose(lat, base[k][0], atol=1e-4, err_msg=f"{options} {k}")
                if "offload" in options:
                    layers, chunk = 2, options["offload"]
                    full = sum("C" in step for step in zip(*rep.patterns.values()))
                    expected = full * (layers // chunk) + (STEPS - full) * (k == "fbc")
                    assert len(fetched) == expected, (options, k, fetched, rep.patterns)
    finally:
        OffloadedBlocks.fetch = fetch


def test_bad_configs_are_refused_in_one_line(wan):
    cases = [
        (lambda: vidax.FirstBlockCacheConfig(threshold=-0.1), "threshold="),
        (lambda: vidax.MagCacheConfig(mag_ratios=[]), "mag_ratios="),
        (lambda: vidax.MagCacheConfig(), "mag_ratios="),
        (lambda: vidax.MagCacheConfig(threshold=-1, mag_ratios=[1.0]), "threshold="),
        (lambda: vidax.TaylorSeerCacheConfig(cache_interval=0), "cache_interval="),
        (lambda: vidax.TaylorSeerCacheConfig(taylor_factors_dtype="int8"), "taylor_factors_dtype="),
        (lambda: vidax.TaylorSeerCacheConfig(disable_cache_before_step=0), "disable_cache_before_step="),
        (lambda: wan.pipe.enable_cache("first_block"), "config="),
    ]
    for make, name in cases:
        with pytest.raises(InputError) as e:
            make()
        assert name in str(e.value) and "\n" not in str(e.value)
    # Pipelines whose diffusers reference runs no cache hooks (no cache context).
    from vidax.models.cosmos.pipeline import CosmosPredictPipeline
    from vidax.models.hunyuan_video.pipeline import HunyuanVideoImageToVideoPipeline

    for cls in (CosmosPredictPipeline, HunyuanVideoImageToVideoPipeline):
        with pytest.raises(InputError, match=f"{cls.__name__} cannot run cache hooks"):
            object.__new__(cls).enable_cache(vidax.TaylorSeerCacheConfig(use_lite_mode=True))
    # Ratios for another number of steps than the call's.
    wan.pipe.enable_cache(vidax.MagCacheConfig(num_inference_steps=STEPS + 1, mag_ratios=[1.0] * (STEPS + 1)))
    try:
        with pytest.raises(InputError, match=f"num_inference_steps={STEPS} differs"):
            wan.pipe(latents=wan.latents.numpy(), progress=False, **wan.call)
        with pytest.raises(InputError, match="already enabled"):
            wan.pipe.enable_cache(vidax.FirstBlockCacheConfig())
    finally:
        wan.pipe.disable_cache()


def test_threshold_comparison_and_ratio_interpolation_are_the_references():
    """First-Block Cache compares a float32 ratio's Python float with the threshold: vidax
    compares in float32 with the largest float32 at or below the threshold, the same result for
    every ratio (checked at the float32 neighbours of thresholds that float32 cannot represent).
    MagCache's ratios of another length are interpolated as diffusers' ``nearest_interp``."""
    from diffusers.hooks.mag_cache import nearest_interp

    from vidax.pipelines.step_cache import _threshold_f32

    for t in (0.05, 0.1, 0.3, 1 / 3, 0.5, 0.0):
        f = np.float32(t)
        for r in (np.nextafter(f, np.float32(0)), f, np.nextafter(f, np.float32(1))):
            assert bool(r > _threshold_f32(t)) == (float(r) > t), (t, r)
    rng = np.random.default_rng(0)
    for src, n in ((5, 8), (8, 5), (28, 50), (3, 1), (1, 4), (7, 7)):
        ratios = [float(r) for r in 1 + 0.1 * rng.standard_normal(src)]  # a list of floats: float32 in torch
        want = nearest_interp(torch.tensor(ratios), n).numpy() if src != n else torch.tensor(ratios).numpy()
        got = vidax.MagCacheConfig(num_inference_steps=n, mag_ratios=ratios).ratios()
        np.testing.assert_array_equal(got, want)
