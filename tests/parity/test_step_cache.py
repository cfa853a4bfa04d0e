"""Step caching (First-Block Cache, MagCache, TaylorSeer) against diffusers 0.42.1's hooks.

Both sides run the tiny random pipelines of the parity tests with the same config and latents.
The reference's decisions are read from the last block's attention, per transformer call: it runs
only when the blocks (or, for TaylorSeer on the attention modules, the attention) really compute (a skipped block returns its input, a First-Block Cache skip
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

    def __init__(self, name, path, ref, call, latents, separate, dtype="float32"):
        self.name, self.path, self.ref, self.call, self.latents, self.separate = (
            name,
            path,
            ref,
            call,
            latents,
            separate,
        )
        # Wan2.2: two experts, each with its own hooks (diffusers: enable_cache on each).
        self.transformers = [t for t in (ref.transformer, getattr(ref, "transformer_2", None)) if t is not None]
        self._count = []
        for t in self.transformers:
            stacks = [
                getattr(t, n) for n in ("blocks", "transformer_blocks", "single_transformer_blocks") if hasattr(t, n)
            ]
            tail = stacks[-1][-1]
            # The attention's query projection: it runs only when the attention module's own
            # forward does (a TaylorSeer hook on the attention module still fires its forward hooks).
            (getattr(tail, "attn1", None) or tail.attn).to_q.register_forward_hook(lambda *a: self._count.append(1))
        self.pipe = vidax.load_pipeline(path, dtype=dtype)
        self.uncached = self.run_ref(None)[0]

    def run_ref(self, config):
        """(frames, per-branch pattern) of the reference with ``config`` (None: no cache)."""
        per_call = []

        def counted(orig):
            def forward(*a, **k):
                n0 = len(self._count)
                out = orig(*a, **k)
                per_call.append(len(self._count) - n0)
                return out

            return forward

        for t in self.transformers:
            if config is not None:
                t.enable_cache(config)
            t.forward = counted(t.forward)
        try:
            with torch.no_grad():
                frames = self.ref(latents=self.latents.clone(), output_type="np", **self.call).frames
        finally:
            for t in self.transformers:
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


def wan_family(tmp_path_factory, name, boundary_ratio=None, **call):
    path = str(tmp_path_factory.mktemp(f"{name}_cache"))
    ref = build_reference_wan_pipeline(path, boundary_ratio=boundary_ratio)
    call = dict(
        prompt=["a red car walking over the sea"],
        negative_prompt=["blue sky"],
        height=32,
        width=48,
        num_frames=9,
        num_inference_steps=STEPS,
        guidance_scale=4.5,
        max_sequence_length=16,
        **call,
    )
    latents = torch.randn(1, 12, 3, 4, 6, generator=torch.Generator().manual_seed(7))
    return Family(name, path, ref, call, latents, separate=True)


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    return wan_family(tmp_path_factory, "wan")


@pytest.fixture(scope="module")
def ltx(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ltx_cache"))
    ref = build_reference_ltx_pipeline(path)
    size = dict(height=32, width=64, num_frames=9)
    call = dict(
        prompt=["a red fox in the snow"],
        negative_prompt=["blurry"],
        num_inference_steps=STEPS,
        guidance_scale=3.0,
        frame_rate=24,
        max_sequence_length=16,
        decode_timestep=0.05,
        decode_noise_scale=0.0,
        **size,
    )
    return Family("ltx", path, ref, call, packed_noise(1, **size), separate=False)


@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hunyuan_cache"))
    ref = build_reference_hunyuan_pipeline(path, None)
    call = dict(
        prompt="a cat walks on the grass",
        negative_prompt="blurry low quality video",
        true_cfg_scale=3.0,
        guidance_scale=2.0,
        height=48,
        width=32,
        num_frames=9,
        num_inference_steps=STEPS,
        max_sequence_length=24,
    )
    latents = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 4, 3, 6, 4)).astype(np.float32))
    return Family("hunyuan", path, ref, call, latents, separate=True)


@pytest.fixture(scope="module")
def cogvideox(tmp_path_factory):
    """CogVideoX 1.0 (5B layout, rotary): its blocks return (hidden, encoder_hidden) and vidax
    runs them as one [text; video] stream; diffusers batches cond and uncond (one state)."""
    from tests.parity.cogvideox_reference import build_reference

    path = str(tmp_path_factory.mktemp("cogvideox_cache"))
    ref = build_reference(path, "5b", num_layers=2)
    call = dict(
        prompt=["a red car walking over the sea"],
        negative_prompt=["blue sky"],
        height=32,
        width=48,
        num_frames=9,
        num_inference_steps=STEPS,
        guidance_scale=6.0,
        max_sequence_length=16,
    )
    latents = torch.randn(1, 3, 4, 4, 6, generator=torch.Generator().manual_seed(7))
    return Family("cogvideox", path, ref, call, latents, separate=False)


@pytest.fixture(scope="module")
def wan22(tmp_path_factory):
    """Wan2.2 A14B layout: transformer_2 runs the low-noise steps (from step 3 of 8 here)."""
    return wan_family(tmp_path_factory, "wan22", boundary_ratio=0.875, guidance_scale_2=2.5)


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
    print(
        f"{fam.name} {type(config).__name__}: {pats}; vidax vs diffusers {value:.1f} dB, diffusers cached vs "
        f"uncached {cache_effect:.1f} dB"
    )
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
    kw = dict(
        threshold=0.2,
        max_skip_steps=3,
        retention_ratio=0.25,
        num_inference_steps=STEPS,
        mag_ratios=[1.0, 1.05, 0.98, 1.02, 0.99, 1.01, 1.04, 0.97],
    )
    check_parity(hunyuan, RefMag(**kw), vidax.MagCacheConfig(**kw))


def test_cache_refusals_say_the_reason_and_the_loaded_pipeline_class():
    """The refusals before any weight is read (the CLI's --cache, check_cache_kind): Cosmos 3's says
    why diffusers' First-Block Cache / MagCache hooks raise there (its block metadata names
    gen_seq / und_seq, which they do not read; it said "no block metadata"), and each names the
    pipeline class as loaded (Cosmos-Predict2.5's Cosmos2_5_PredictBasePipeline, not vidax's
    CosmosPredictPipeline)."""
    from vidax.models.cosmos.pipeline import CosmosPredictPipeline
    from vidax.models.cosmos3.pipeline import Cosmos3OmniPipeline
    from vidax.models.ltx2.pipeline import LTX2Pipeline
    from vidax.pipelines.caching import check_cache_kind

    with pytest.raises(InputError) as e:
        check_cache_kind(
            Cosmos3OmniPipeline, vidax.MagCacheConfig(calibrate=True), "--cache mag", "Cosmos3OmniDiffusersPipeline"
        )
    assert str(e.value) == (
        "--cache mag: diffusers 0.42.1's block metadata for Cosmos3OmniDiffusersPipeline's "
        "decoder layers (Cosmos3VLTextMoTDecoderLayer) names their inputs gen_seq / und_seq, which "
        "its MagCacheConfig hooks do not read (they look for hidden_states / encoder_hidden_states "
        "and raise there), so there is no reference to match; TaylorSeerCacheConfig runs"
    )
    with pytest.raises(
        InputError,
        match="^--cache first_block:0.1: diffusers 0.42.1 has no block metadata for "
        "LTX2ConditionPipeline's transformer blocks that its FirstBlockCacheConfig "
        "hooks can use",
    ):
        check_cache_kind(
            LTX2Pipeline, vidax.FirstBlockCacheConfig(threshold=0.1), "--cache first_block:0.1", "LTX2ConditionPipeline"
        )
    with pytest.raises(
        InputError, match="^--cache taylorseer: diffusers 0.42.1's Cosmos2_5_PredictBasePipeline cannot run cache hooks"
    ):
        check_cache_kind(
            CosmosPredictPipeline, vidax.TaylorSeerCacheConfig(), "--cache taylorseer", "Cosmos2_5_PredictBasePipeline"
        )


def test_mag_cache_calibration_prints_the_reference_ratios(wan, capsys, tmp_path):
    wan.run_ref(RefMag(calibrate=True, num_inference_steps=STEPS))
    want = [[float(v) for v in m.split(",")] for m in re.findall(r"\[([-0-9., e]+)\]", capsys.readouterr().out)]
    _, stats = wan.run(vidax.MagCacheConfig(calibrate=True, num_inference_steps=STEPS))
    printed = capsys.readouterr()
    assert len(want) == 2 and list(stats.cache.calibration) == ["cond", "uncond"]  # each branch its own state
    # Means of norm ratios of fp32 residuals: fp32 rounding only.
    np.testing.assert_allclose(list(stats.cache.calibration.values()), want, rtol=1e-5)
    assert stats.cache.blocks_skipped == 0 and len(set(map(tuple, want))) == 2
    # One list printed (the conditional pass's), alone on stdout so that `> ratios.txt` saves what
    # --cache mag:FILE reads back; the line saying what it is on stderr.
    assert re.fullmatch(r"\[[^\n]*\]\n", printed.out), printed.out
    assert "MagCache calibration (8 steps, the conditional pass)" in printed.err and "--cache mag:FILE" in printed.err
    (tmp_path / "ratios.json").write_text(printed.out)
    from vidax.pipelines.step_cache import parse_cache_option

    config = parse_cache_option(f"mag:{tmp_path / 'ratios.json'}", STEPS)
    np.testing.assert_allclose(config.mag_ratios, want[0], rtol=1e-5)
    assert config.mag_ratios == stats.cache.calibration["cond"]


# bfloat16 factors on Wan only: their arithmetic is the family-independent end of the step.
@pytest.mark.parametrize("name, dtype", [("wan", "float32"), ("ltx", "float32"), ("wan", "bfloat16")])
def test_taylorseer_lite_matches_diffusers(request, name, dtype):
    family = request.getfixturevalue(name)
    kw = dict(
        cache_interval=2, disable_cache_before_step=2, disable_cache_after_step=7, max_order=2, use_lite_mode=True
    )
    ref = RefTS(taylor_factors_dtype=getattr(torch, dtype), **kw)
    # bfloat16 factors: a prediction that differs by fp32 rounding may round to the neighbouring
    # bfloat16 value (one ulp, 2**-8 relative) in a few elements; measured ~75 dB.
    check_parity(
        family,
        ref,
        vidax.TaylorSeerCacheConfig(taylor_factors_dtype=dtype, **kw),
        min_db=60.0 if dtype == "float32" else 50.0,
    )


def test_wan22_experts_keep_a_state_each(wan22):
    """Each of Wan2.2's experts has its own hooks: MagCache's step counter, retention and
    previous residual start afresh when transformer_2 takes over (its first steps compute; one
    shared state would skip there). First-Block Cache keeps its residual per expert by the same
    fresh state per expert segment (measured: cond/uncond CSSCSSSS at 0.3, 140.3 dB)."""
    kw = dict(
        threshold=0.3,
        max_skip_steps=2,
        retention_ratio=0.25,
        num_inference_steps=STEPS,
        mag_ratios=[1.0, 1.02, 0.97, 1.01, 0.99, 1.0, 1.03, 0.98],
    )
    pats = check_parity(wan22, RefMag(**kw), vidax.MagCacheConfig(**kw))
    wan22.ref.scheduler.set_timesteps(STEPS)
    switch = int(sum(t >= 0.875 * 1000 for t in wan22.ref.scheduler.timesteps))  # transformer_2's first step
    assert 2 <= switch <= STEPS - 2
    assert pats["cond"][switch : switch + 2] == "CC", pats  # transformer_2's retention steps


def test_cogvideox_text_and_video_residuals(cogvideox):
    """CogVideoX's blocks return (hidden, encoder_hidden): First-Block Cache caches the residual
    of both (vidax: of the whole [text; video] stream) and measures the video's; MagCache adds the
    video residual and passes the text on. Same decisions, same video as diffusers."""
    # This random model changes much from step to step (first-block ratios ~0.6 to 2.4): 0.8 skips
    # some steps (measured CCSCCCCS).
    check_parity(cogvideox, RefFBC(threshold=0.8), vidax.FirstBlockCacheConfig(threshold=0.8))
    kw = dict(
        threshold=0.2,
        max_skip_steps=2,
        retention_ratio=0.25,
        num_inference_steps=STEPS,
        mag_ratios=[1.0, 1.05, 0.98, 1.02, 0.99, 1.01, 1.04, 0.97],
    )
    check_parity(cogvideox, RefMag(**kw), vidax.MagCacheConfig(**kw))


def test_taylorseer_default_config_predicts_hunyuan_attention(hunyuan):
    """TaylorSeer's defaults (not lite): its patterns hook the attention modules of both of
    HunyuanVideo's stacks, each predicted from its own Taylor factors on the cached steps while the
    rest of every block runs; cond and uncond keep a state each. With bfloat16 factors (the
    default) and, in float32 with a second order, one module zeroed (skip_predict_identifiers)."""
    # bf16 factors: a prediction may round to the neighbouring bf16 value where the fp32 inputs
    # differ by rounding (see the lite test); measured 101.6 dB here (float32 factors: 132.5 dB).
    check_parity(hunyuan, RefTS(), vidax.TaylorSeerCacheConfig())
    kw = dict(
        cache_interval=2,
        disable_cache_before_step=2,
        max_order=2,
        skip_predict_identifiers=["^single_transformer_blocks.0.attn"],
    )
    check_parity(
        hunyuan,
        RefTS(taylor_factors_dtype=torch.float32, **kw),
        vidax.TaylorSeerCacheConfig(taylor_factors_dtype="float32", **kw),
    )


def test_bf16_cached_run_matches_diffusers_bf16(wan):
    """Wan in bfloat16 (diffusers: from_pretrained(torch_dtype=bfloat16), the VAE float32 as vidax
    loads it) with First-Block Cache: the decisions read bf16 residuals on both sides and must be
    the same step by step; the video is compared with diffusers' cached bf16 run."""
    from tests.parity.helpers import bf16_reference

    fam = Family(
        "wan bf16",
        wan.path,
        bf16_reference(wan.ref),
        wan.call,
        wan.latents.bfloat16().float(),
        separate=True,
        dtype="bfloat16",
    )
    want, pats = fam.run_ref(RefFBC(threshold=0.03))
    got, stats = fam.run(vidax.FirstBlockCacheConfig(threshold=0.03))
    assert stats.cache.patterns == pats and any("S" in p for p in pats.values()), (stats.cache.patterns, pats)
    value, cache_effect = psnr(got, want), psnr(want, fam.uncached)
    print(
        f"bf16 first_block 0.03: {pats}; vidax vs diffusers bf16 {value:.1f} dB; diffusers bf16 cached vs "
        f"uncached {cache_effect:.1f} dB"
    )
    # Two bf16 implementations round in different places (tests.parity.helpers.bf16_reference):
    # measured 63.3 dB, about as far as diffusers' cached bf16 run is from its uncached one
    # (67.2 dB), so the video alone cannot see the cache here; the decisions above can (a ratio
    # that rounds to the other side of the threshold changes the pattern). The bar is the
    # measurement less ~4 dB, as for the other bf16 parity tests.
    assert value >= 59.0


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
    one holding the first block). TaylorSeer on attention modules (the rest of every layer runs
    on every step): every chunk streamed on every step, each with its layers' Taylor factors."""
    from vidax.parallel.offload import OffloadedBlocks

    call = dict(
        prompt="a red car on a bridge",
        negative_prompt="blurry",
        height=48,
        width=48,
        num_frames=9,
        num_inference_steps=STEPS,
        guidance_scale=4.0,
        max_sequence_length=16,
        seed=3,
        progress=False,
        output_type="latent",
    )
    configs = dict(
        fbc=vidax.FirstBlockCacheConfig(threshold=0.5),
        mag=vidax.MagCacheConfig(
            threshold=0.2,
            max_skip_steps=2,
            retention_ratio=0.3,
            num_inference_steps=STEPS,
            mag_ratios=[1.0, 1.02, 0.97, 1.01, 0.99, 1.0, 1.03, 0.98],
        ),
        # TaylorSeer on the attention modules (factors carried through the scan, per layer)
        ts=vidax.TaylorSeerCacheConfig(
            cache_identifiers=["^blocks.*attn1"],
            disable_cache_before_step=1,
            cache_interval=2,
            taylor_factors_dtype="float32",
        ),
    )

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
                # one chunk of both layers: run for TaylorSeer's per-layer factors only
                if options.get("offload") == 2 and k != "ts":
                    continue
                fetched.clear()
                lat, rep = run(pipe, config)
                assert rep.patterns == base[k][1].patterns, (options, k)
                # Other summation orders on the mesh (measured ~1e-6); the streamed step runs
                # the same arithmetic as the resident one.
                np.testing.assert_allclose(lat, base[k][0], atol=1e-4, err_msg=f"{options} {k}")
                if k == "ts" and "offload" in options:  # each chunk's layers as the resident scan's (measured)
                    np.testing.assert_array_equal(lat, base[k][0])
                if "offload" in options:
                    layers, chunk = 2, options["offload"]
                    full = sum("C" in step for step in zip(*rep.patterns.values()))
                    expected = (STEPS if k == "ts" else full) * (layers // chunk) + (STEPS - full) * (k == "fbc")
                    assert len(fetched) == expected, (options, k, fetched, rep.patterns)
    finally:
        OffloadedBlocks.fetch = fetch


def test_bad_configs_are_refused_in_one_line(wan):
    cases = [
        (lambda: vidax.FirstBlockCacheConfig(threshold=-0.1), "threshold="),
        # beyond float32 the threshold the decisions compare with is inf (trial 3: 1e39 skipped every step)
        (lambda: vidax.FirstBlockCacheConfig(threshold=1e39), "threshold= must be a finite number >= 0 (in float32"),
        (lambda: vidax.MagCacheConfig(mag_ratios=[]), "mag_ratios="),
        (lambda: vidax.MagCacheConfig(), "mag_ratios="),
        (lambda: vidax.MagCacheConfig(threshold=-1, mag_ratios=[1.0]), "threshold="),
        (lambda: vidax.TaylorSeerCacheConfig(cache_interval=0), "cache_interval="),
        (lambda: vidax.TaylorSeerCacheConfig(taylor_factors_dtype="int8"), "taylor_factors_dtype="),
        (lambda: vidax.TaylorSeerCacheConfig(disable_cache_before_step=0), "disable_cache_before_step="),
        (lambda: wan.pipe.enable_cache("first_block"), "config="),
        (
            lambda: vidax.MagCacheConfig(mag_ratios=[1.0, -0.5, 1.0]),
            "MagCacheConfig: mag_ratios= must be a flat list "
            "of finite numbers >= 0 (ratios of residual norms, one per step); entry 1 is -0.5, below 0",
        ),
        (
            lambda: vidax.MagCacheConfig(mag_ratios=[[1.0], [0.5]]),
            "mag_ratios= must be a flat list of finite numbers "
            ">= 0 (ratios of residual norms, one per step); entry 0 is [1.0], not a number",
        ),
        (lambda: vidax.MagCacheConfig(mag_ratios=[1.0, True]), "; entry 1 is True, not a number"),
        # TaylorSeer hooks vidax does not place as the reference does.
        (
            lambda: wan.pipe.enable_cache(
                vidax.TaylorSeerCacheConfig(cache_identifiers=["^proj_out$", "^patch_embedding$"])
            ),
            "hooks 'patch_embedding' of WanTransformer3DModel: vidax hooks modules inside the block stacks",
        ),
        (
            lambda: wan.pipe.enable_cache(vidax.TaylorSeerCacheConfig(cache_identifiers=["^blocks.0.ffn"])),
            "hooks 'blocks.0.ffn' of WanTransformer3DModel (a ",
        ),
        (
            lambda: wan.pipe.enable_cache(
                vidax.TaylorSeerCacheConfig(cache_identifiers=["^blocks.1", "^blocks.1.attn1"])
            ),
            "hooks 'blocks.1.attn1' inside 'blocks.1'",
        ),
    ]
    for make, name in cases:
        with pytest.raises(InputError) as e:
            make()
        assert name in str(e.value) and "\n" not in str(e.value)
    # Pipelines whose diffusers reference runs no cache hooks (no cache context): named as the
    # user loads them (model_index.json's _class_name), not by vidax's class.
    from types import SimpleNamespace

    from vidax.models.cosmos.pipeline import CosmosPredictPipeline
    from vidax.models.hunyuan_video.pipeline import HunyuanVideoImageToVideoPipeline

    for cls, loaded in (
        (CosmosPredictPipeline, "Cosmos2_5_PredictBasePipeline"),
        (HunyuanVideoImageToVideoPipeline, "HunyuanVideoImageToVideoPipeline"),
    ):
        pipe = object.__new__(cls)
        pipe.checkpoint = SimpleNamespace(pipeline_class_name=loaded)
        with pytest.raises(
            InputError, match=f"^config=TaylorSeerCacheConfig: diffusers 0.42.1's {loaded} cannot run cache hooks"
        ):
            pipe.enable_cache(vidax.TaylorSeerCacheConfig(use_lite_mode=True))
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
