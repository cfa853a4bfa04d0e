"""vidax places a run for the device's memory by itself (``vidax.pipelines.device_plan``), on the
CPU with a pretend device size (``VIDAX_DEVICE_MEMORY``) on the tiny 5-layer Wan checkpoint:
where everything fits nothing changes, where it does not the blocks stream and the frames are
the resident run's, where nothing fits the run is refused before any weight is read, naming
what would fit; explicit settings win."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from tests.test_offload import PROMPT, write_offload_checkpoint
from vidax.cli import app
from vidax.errors import SetupError
from vidax.pipelines.device_plan import Activations, Sizes, choose, plan_device, stage_memory
from vidax.pipelines.memory import (
    CALIBRATIONS,
    DEVICE_MEMORY_ENV,
    calibration,
    memory_estimate,
    parse_memory_size,
    pretend_device_memory,
    run_memory_estimate,
)
from vidax.pipelines.plan import read_plan, with_call, with_placement

ARGS = dict(height=32, width=48, num_frames=5, num_inference_steps=2, max_sequence_length=16)
FLAGS = [f"--{k.replace('_', '-')}" if i % 2 == 0 else str(v) for k, v in ARGS.items() for i in (0, 1)]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_offload_checkpoint(str(tmp_path_factory.mktemp("device_plan")))


@pytest.fixture(scope="module")
def roomy(ckpt, tmp_path_factory):
    """(frames, output) of the run on a pretend device where everything fits."""
    out = tmp_path_factory.mktemp("roomy") / "roomy.npy"
    with pytest.MonkeyPatch.context() as mp:
        r = _generate(ckpt, out, mp, "64GiB")
    assert r.exit_code == 0, r.output
    return np.load(out), r.output


def _plan(ckpt):
    return with_placement(with_call(read_plan(ckpt), prompt=PROMPT, **ARGS))


def _generate(ckpt, out, monkeypatch, memory, *extra):
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(memory))
    return CliRunner().invoke(
        app, ["generate", "-p", PROMPT, "--checkpoint", ckpt, "-o", str(out), "--no-progress", *FLAGS, *extra]
    )


def test_memory_sizes_and_a_bad_setting(ckpt, tmp_path, monkeypatch):
    assert parse_memory_size("15.7GiB") == int(15.7 * 2**30)
    assert parse_memory_size("512 MiB") == 512 * 2**20 and parse_memory_size("16e9") == 16 * 10**9
    for bad in ("", "lots", "-1GiB", "5 parsecs", "0"):
        with pytest.raises(ValueError):
            parse_memory_size(bad)
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "lots")
    with pytest.raises(SetupError, match=f"{DEVICE_MEMORY_ENV}='lots' is not a memory size"):
        pretend_device_memory()
    r = _generate(ckpt, tmp_path / "x.npy", monkeypatch, "lots")  # one line, before loading
    assert r.exit_code == 2 and r.output.startswith(f"error: {DEVICE_MEMORY_ENV}='lots' is not a memory size")


def test_the_choice_order_and_explicit_settings_win():
    """Text encoder staged first, then a resident transformer off the device while the VAE
    decodes, tiling, the VAE, then blocks streamed (largest chunk that fits), what streaming made
    unneeded undone (tiling included); an explicit setting is never overridden."""
    gb = 10**9
    sizes = Sizes({"transformer": (20 * gb, 19 * gb, 40)}, {"text_encoder": 11 * gb}, {"vae": gb // 2})
    act = Activations(text=gb, step=8 * gb, decode=12 * gb, decode_tiled=3 * gb, latents=0)
    roomy = choose(sizes, act, 80 * gb)
    assert (roomy.chunk, roomy.vae_tiling, any(roomy.staged.values()), roomy.fits) == (None, False, False, True)
    tight = choose(sizes, act, 16 * gb)
    assert tight.fits and tight.staged == {"text_encoder": True, "vae": False} and not tight.free_transformer
    assert not tight.vae_tiling  # tiled while the transformer was resident; streaming left room for the frame
    assert tight.chunk is not None and tight.chunk > 1  # the largest chunk that fits, not 1
    bigger = dataclasses.replace(tight, chunk=tight.chunk + 1)
    assert stage_memory(sizes, act, bigger.chunk, tight.staged, False)[0].peak > 16 * gb
    small = Sizes({"transformer": (6 * gb, 5 * gb, 40)}, {"text_encoder": 5 * gb}, {"vae": gb // 2})
    freed = choose(small, act, 16 * gb)  # the steps fit resident; the decode fits without the transformer
    assert freed.fits and freed.free_transformer and freed.chunk is None and not freed.vae_tiling
    assert "transformer off the device while the text encoder and the VAE run" in freed.line()
    assert freed.offload_config(None).keep_transformer is False
    held = choose(small, act, 16 * gb, keep={"transformer": True})  # asked to stay: the VAE tiles instead
    assert held.fits and not held.free_transformer and held.vae_tiling
    assert "transformer streamed" in tight.line() and "text encoder run first and freed" in tight.line()
    kept = choose(sizes, act, 16 * gb, keep={"text_encoder": True})
    assert kept.staged["text_encoder"] is False and kept.fits is False  # asked to stay: it stays, and does not fit
    asked = choose(sizes, act, 16 * gb, chunk=2)
    assert asked.chunk == 2 and "chunk" not in asked.chosen and "as asked" in asked.line()
    assert choose(sizes, act, 16 * gb, host=10 * gb).fits is False  # the streamed blocks do not fit the host


def test_chosen_tiles_grow_to_the_fewest_a_frame_that_fit():
    """Where the plan chose tiling, the tile grows to the scale of fewest tiles per frame whose
    decode still fits (a tie to the smaller tile); asked-for tiling keeps the reference's tile; a
    placement that does not fit keeps it too."""
    from vidax.pipelines.memory import DecodeTile

    gb = 10**9
    sizes = Sizes({"transformer": (gb, 0, 0)}, {}, {})
    tiles = (DecodeTile(1, 256, 28, gb), DecodeTile(2, 512, 6, 3 * gb), DecodeTile(3, 768, 4, 5 * gb))
    tiles += (DecodeTile(4, 1024, 4, 7 * gb),)
    act = Activations(text=gb, step=2 * gb, decode=20 * gb, decode_tiled=gb, latents=0, decode_tiles=tiles)
    for device, scale in ((4 * gb, 1), (5 * gb, 2), (8 * gb, 3), (12 * gb, 3)):  # 12 GB: 4 fits, 4 tiles as 3
        dp = choose(sizes, act, device)
        assert (dp.vae_tiling, dp.vae_tile_scale, dp.fits) == (True, scale, True), device
        assert dp.stages.decode == stage_memory(sizes, act, None, dp.staged, scale)[0].decode <= device
        assert f"VAE tiled, {256 * scale} px tiles" in dp.line()
    asked = choose(sizes, act, 12 * gb, vae_tiling=True)
    assert (asked.vae_tiling, asked.vae_tile_scale, asked.vae_tile_side) == (True, 1, 256)
    refused = choose(sizes, dataclasses.replace(act, step=20 * gb), 8 * gb)
    assert not refused.fits and refused.vae_tiling and refused.vae_tile_scale == 1


def test_the_batch_runs_in_parts_where_only_parts_fit():
    """Where a step's activations do not fit even with one block a chunk, each layer runs the
    CFG batch in parts (the largest part that fits); a given micro_batch is kept."""
    gb = 10**9
    sizes = Sizes({"transformer": (28 * gb, 27 * gb, 40)}, {}, {"vae": gb // 2})
    act = Activations(text=gb, step=13 * gb, decode=2 * gb, decode_tiled=None, latents=0, rows=2)
    plan = choose(sizes, act, 15 * gb)
    assert plan.fits and plan.micro_batch == 1 and "micro_batch" in plan.chosen
    assert "runs the step's 2 batch rows 1 at a time" in plan.line()
    assert stage_memory(sizes, act, plan.chunk, plan.staged, False, micro_batch=None)[0].steps > 15 * gb
    four = choose(sizes, dataclasses.replace(act, step=20 * gb, rows=4), 15 * gb)
    assert four.fits and four.micro_batch == 2  # 4 rows: the largest part that fits (3 rows: 15 GB)
    roomy = choose(sizes, act, 80 * gb)
    assert roomy.micro_batch is None and roomy.chunk is None
    asked = choose(sizes, act, 80 * gb, micro_batch=1)
    assert asked.micro_batch == 1 and "micro_batch" not in asked.chosen and "as asked" in asked.line()


def test_a_tpu_plan_counts_the_tpu_calibration(ckpt):
    """The activations of a plan for a TPU are counted with the TPU's figures (measured by its
    compiler, benchmarks/tpu_memory_aot.py), a CPU's with the CPU's, by the device platform the
    plan is for (an argument: no TPU needed); a platform without figures of its own gets the
    CPU's, and a plan for this process's device (None) gets those of its platform."""
    plan = _plan(ckpt)
    cls, info, call = plan.pipeline, plan.info, plan.call
    tpu, cpu = CALIBRATIONS["tpu"], CALIBRATIONS["cpu"]
    assert tpu.step_width_buffers != cpu.step_width_buffers and tpu.step_ffn_buffers != cpu.step_ffn_buffers
    assert tpu.decode_bytes_per_element != cpu.decode_bytes_per_element
    assert calibration("tpu") is tpu and calibration("gpu") is cpu and calibration("cpu") is cpu
    assert calibration(None) is calibration(jax.devices()[0].platform)
    size = cls.family.model_size(info, call)
    latents = int(np.prod(cls.family.latent_shape(info, call)))
    for platform, figures in (("tpu", tpu), ("cpu", cpu)):
        est = memory_estimate(cls, info, call, flash=True, platform=platform)
        want = run_memory_estimate(
            size, 2 * call.batch if call.do_cfg else call.batch, latents, call.num_frames, call.height,
            call.width, videos=call.batch, flash=True, calibration=figures,
        )  # fmt: skip
        assert (est.step, est.decode, est.decode_tiled) == (want.step, want.decode, want.decode_tiled), platform
    on_tpu = plan_device(plan, call, 2**40, None, platform="tpu")
    on_cpu = plan_device(plan, call, 2**40, None, platform="cpu", sizes=on_tpu.sizes)
    dec = on_tpu.stages.decode - on_cpu.stages.decode
    assert dec == memory_estimate(cls, info, call, platform="tpu").decode - memory_estimate(cls, info, call).decode != 0


def test_roomy_device_changes_nothing(ckpt, roomy, monkeypatch, capsys):
    """Where everything fits, the plan places the run exactly as without a device limit (no
    offloading, nothing staged, no tiling: the same load and the same programs, so the same
    frames), and says so in one line."""
    plain = _plan(ckpt)  # the CPU reports no limit: nothing planned
    assert plain.device_plan is None
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "64GiB")
    planned = _plan(ckpt)
    assert planned.device_plan is not None and planned.device_plan.fits
    assert (planned.offload, planned.vae_tiling) == (plain.offload, plain.vae_tiling) == (None, False)
    assert planned.staging.staged == plain.staging.staged == {"text_encoder": False, "vae": False}
    line = next(x for x in roomy[1].splitlines() if x.startswith("plan:"))
    assert "transformer resident" in line and "streamed" not in line and "tiled" not in line
    assert "run first" not in line
    # load_pipeline (no call yet) plans for the checkpoint's default call and says so
    vidax.load_pipeline(ckpt, progress=False)
    said = capsys.readouterr().err
    assert said.startswith("plan: transformer resident") and "(for the checkpoint's default call)" in said, said


def test_small_device_streams_blocks(ckpt, roomy, tmp_path, monkeypatch):
    """At the size where two-block chunks fit and the resident transformer does not, the plan
    streams 2 blocks a chunk, and the frames equal the resident run's (bit for bit on CPU)."""
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "64GiB")
    plan = _plan(ckpt)
    dp = plan.device_plan
    staged = dict.fromkeys(dp.staged, True)
    two, _ = stage_memory(dp.sizes, _activations(plan), 2, staged, True)
    resident_peak, _ = stage_memory(dp.sizes, _activations(plan), None, staged, True)
    assert two.peak < resident_peak.peak
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(two.peak))
    asked = with_placement(with_call(read_plan(ckpt), prompt=PROMPT, **ARGS), offload=1)  # an explicit chunk wins
    assert asked.offload.chunk == 1 and "streamed 1 block a chunk" in asked.device_plan.line()
    assert "as asked" in asked.device_plan.line()
    out = tmp_path / "streamed.npy"
    # (with the tiny transformer's 1 MiB off the device while the VAE decodes, resident fits too)
    r = _generate(ckpt, out, monkeypatch, two.peak, "--keep-transformer")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("plan:"))
    assert "transformer streamed 2 blocks a chunk" in line, line
    # the summary: each stage's estimate, beside the measure the CPU cannot give
    rows = [x for x in r.output.splitlines() if x.strip().startswith("memory: ")]
    assert [x.split(":")[1].split("  ")[0].strip() for x in rows] == ["text encoding", "steps", "VAE decode"]
    assert all("estimated " in x and "not measured (the backend reports no device peak)" in x for x in rows)
    np.testing.assert_array_equal(np.load(out), roomy[0])


def _activations(plan):
    est = memory_estimate(plan.pipeline, plan.info, plan.call, dtype=plan.dtype, weights="loaded")
    return Activations.of(est, int(np.prod(plan.pipeline.family.latent_shape(plan.info, plan.call))) * 4 * 2)


def test_the_plans_larger_tiles_reach_the_vae(ckpt, monkeypatch):
    """Where the plan tiles the decode and 512-pixel tiles fit (144 x 544: 2 a frame instead of
    3), the plan carries that scale, says the tile, and the loaded VAE decodes in those tiles;
    ``vae_tiling`` asked for keeps the reference's 256-pixel tiles."""
    from vidax.models.wan.vae import WanTiling
    from vidax.pipelines.plan import with_memory

    monkeypatch.setenv(DEVICE_MEMORY_ENV, "64GiB")
    plan = with_call(read_plan(ckpt), prompt=PROMPT, **{**ARGS, "height": 144, "width": 544})
    roomy = with_placement(plan).device_plan
    staged = dict.fromkeys(roomy.staged, True)
    act = _activations(with_placement(plan))
    one, two, whole = (stage_memory(roomy.sizes, act, None, staged, k)[0].decode for k in (1, 2, 0))
    assert one < two < whole
    monkeypatch.setenv(DEVICE_MEMORY_ENV, str(two))
    placed = with_memory(with_placement(plan))
    assert (placed.vae_tiling, placed.vae_tile_scale) == (True, 2), placed.device_plan.line()
    assert "VAE tiled, 512 px tiles" in placed.device_plan.line()
    asked = with_memory(with_placement(plan), vae_tiling=True)
    assert (asked.vae_tiling, asked.vae_tile_scale) == (True, 1)
    # the line and the decode's estimate are those of the tiles that run (the reference's)
    assert "VAE tiled, 256 px tiles" in asked.device_plan.line(), asked.device_plan.line()
    assert asked.device_plan.stages.decode < placed.device_plan.stages.decode
    # 8-bit kernels are said in the line
    eight = with_placement(with_call(read_plan(ckpt, weight_dtype="int8"), prompt=PROMPT, **ARGS))
    assert "int8 kernels, the rest float32" in eight.device_plan.line(), eight.device_plan.line()
    pipe = placed.pipeline.from_plan(placed, progress=False)
    assert pipe.vae.tiling == WanTiling(512, 512, 448, 448, use_tiling=True, same_shape_tiles=True)


def test_too_small_is_refused_before_loading_naming_what_fits(ckpt, tmp_path, monkeypatch):
    """Below what the smallest placement needs at 32x48 the run is refused before any weight is
    read; the message names the size flags that fit (the one-device minimum at 16x24)."""
    monkeypatch.setenv(DEVICE_MEMORY_ENV, "64GiB")
    plan = _plan(ckpt)
    small = dataclasses.replace(plan, call=dataclasses.replace(plan.call, height=16, width=24))
    floor = plan_device(small, small.call, 2**40, None, asked=None).sizes
    need = stage_memory(floor, _activations(small), 1, dict.fromkeys(floor.text_encoders | floor.decoders, True), True)
    monkeypatch.setattr("vidax.pipelines.loading.load_weighted", _no_weights)
    r = _generate(ckpt, tmp_path / "x.npy", monkeypatch, need[0].peak)
    assert r.exit_code != 0
    assert "does not fit on one device" in r.output and "--height" in r.output and "--width" in r.output, r.output
    assert "--no-memory-check" in r.output


def _no_weights(*args, **kwargs):
    raise AssertionError("a weight was read")


def test_a_text_encoder_larger_than_the_device_streams_its_layers():
    """A text encoder that does not fit even staged streams its layers (staged first, then
    streamed, the most layers a chunk that fit); its layers count neither on the device beyond
    two chunks nor in host memory (read from the files); a given chunk wins; resident where it fits."""
    gb = 10**9
    sizes = Sizes(
        {"transformer": (10 * gb, 9 * gb, 40)},
        {"text_encoder": 22 * gb},
        {"vae": gb // 2},
        text_stacks={"text_encoder": (20 * gb, 40, 2)},
    )
    act = Activations(text=gb, step=2 * gb, decode=gb, decode_tiled=None, latents=0)
    plan = choose(sizes, act, 15 * gb, host=12 * gb)
    assert plan.fits and plan.staged["text_encoder"] and "text_chunk" in plan.chosen
    c = plan.text_chunk["text_encoder"]
    assert (
        c > 1
        and stage_memory(sizes, act, plan.chunk, plan.staged, False, text_chunk={"text_encoder": c + 1})[0].text
        > 15 * gb
    )  # the largest chunk that fits
    assert plan.host_bytes < 12 * gb and "text encoder streamed" in plan.line() and "as asked" not in plan.line()
    staged_only = stage_memory(sizes, act, plan.chunk, plan.staged, False)
    assert staged_only[0].text > 15 * gb and staged_only[1] > 12 * gb  # staging alone fits neither
    asked = choose(sizes, act, 15 * gb, text_chunk=2)
    assert asked.text_chunk == {"text_encoder": 2} and "as asked" in asked.line()
    roomy = choose(sizes, act, 80 * gb, text_chunk=None)
    assert roomy.text_chunk == {} and not roomy.staged["text_encoder"]
    kept = choose(sizes, act, 15 * gb, keep={"text_encoder": True})
    assert kept.text_chunk == {} and not kept.fits  # asked to stay on the device: it stays
    # two interleaved stacks (Gemma 4's layer groups) hold a chunk of each and the next: 3 chunks
    groups = choose(dataclasses.replace(sizes, text_stacks={"text_encoder": (20 * gb, 40, 3)}), act, 15 * gb)
    assert groups.fits and groups.text_chunk["text_encoder"] < c


def test_text_encoder_layers_flag_wins(ckpt, tmp_path, monkeypatch):
    """--offload-text-encoder-layers N reaches the plan, which streams UMT5's blocks N at a time
    where everything would fit resident and says "as asked" before any weight is read (the
    streamed encoders' outputs: tests/parity/test_gemma3_text.py, test_random_weights.py; a
    video: test_ltx2_pipeline.py); bad values are refused before loading, naming the flag."""
    monkeypatch.setattr("vidax.pipelines.loading.load_weighted", _no_weights)
    r = _generate(ckpt, tmp_path / "x.npy", monkeypatch, "64GiB", "--offload-text-encoder-layers", "1")
    line = next(x for x in r.output.splitlines() if x.startswith("plan:"))
    assert "text encoder streamed 1 layer a chunk from its files while it encodes" in line and "as asked" in line
    assert "transformer resident" in line
    for bad, says in (
        (["--offload-text-encoder-layers", "0"], "--offload-text-encoder-layers must be a positive integer"),
        (["--offload-text-encoder-layers", "2", "--keep-text-encoder"], "--keep-text-encoder keeps them"),
    ):
        r = _generate(ckpt, tmp_path / "x.npy", monkeypatch, "64GiB", *bad)
        assert r.exit_code == 2 and says in r.output, r.output


def test_memory_remedies_are_only_settings_the_run_takes(ckpt):
    """Each remedy of a memory refusal is one the re-planned run takes and fits with (a device
    where everything fits offers them all): 8-bit kernels name --dtype bfloat16 as an argument
    where float32 with them does not fit; random weights take them too (made as 8-bit kernels);
    a plan whose kernels are 8-bit already is not offered them again."""
    from vidax.pipelines.device_plan import remedies

    plan = _plan(ckpt)
    dp = plan_device(plan, plan.call, 2**40, None)
    offered = [str(m) for m in remedies(plan, plan.call, dp)]
    assert "weight_dtype='int8' (8-bit transformer kernels)" in offered, offered
    random = with_placement(with_call(read_plan(ckpt, random_weights=True), prompt=PROMPT, **ARGS))
    offered = [str(m) for m in remedies(random, random.call, plan_device(random, random.call, 2**40, None))]
    assert "weight_dtype='int8' (8-bit transformer kernels)" in offered, offered
    eight = with_placement(with_call(read_plan(ckpt, weight_dtype="int8"), prompt=PROMPT, **ARGS))
    offered = [str(m) for m in remedies(eight, eight.call, plan_device(eight, eight.call, 2**40, None))]
    assert offered and not any("weight_dtype" in m for m in offered), offered


def test_text_encoder_layers_beyond_the_layer_count_are_said_capped(ckpt, tmp_path, monkeypatch):
    """--offload-text-encoder-layers above the encoder's layer count streams all of them in one
    chunk (as --offload-blocks caps at the blocks'), and the plan line and the staging line say
    so, not the number asked."""
    from vidax.pipelines.staging import Staging

    monkeypatch.setattr("vidax.pipelines.loading.load_weighted", _no_weights)
    r = _generate(ckpt, tmp_path / "x.npy", monkeypatch, "64GiB", "--offload-text-encoder-layers", "999")
    line = next(x for x in r.output.splitlines() if x.startswith("plan:"))
    assert "streamed 999" not in line and "all its layers: 999 asked" in line, line
    staging = Staging({"text_encoder": True}, "pinned_host", {"text_encoder": 999}).describe({"text_encoder": 2})
    assert "text_encoder's layers streamed all 2 in one chunk (999 asked, capped at its layer count)" in staging


def test_a_pretend_device_below_the_runtime_floor_is_refused_naming_the_variable(ckpt, tmp_path, monkeypatch):
    """VIDAX_DEVICE_MEMORY=1e3 is 1000 bytes, below what every run needs beyond its arrays: one
    line naming the variable, its value and the floor, before any weight is read (every call
    was refused as not fitting, naming sizes no device that small holds)."""
    monkeypatch.setattr("vidax.pipelines.loading.load_weighted", _no_weights)
    r = _generate(ckpt, tmp_path / "x.npy", monkeypatch, "1e3")
    assert r.exit_code == 2 and r.output.startswith(
        f"error: {DEVICE_MEMORY_ENV}='1e3' is 1,000 bytes, less than the 160 MiB every run needs"
    ), r.output


def test_host_limit_keeps_the_runs_own_memory_free():
    """Weights may wait in what the host has available less the run's own reserve (4 GiB with a
    CPU device, 11 GiB with a TPU's, or a tenth of the host's RAM where that is more): on the v5e
    machine a plan of 37.2 GiB waiting out of 40 GiB was killed for host memory, and one of 28.6
    GiB took 7-11 GiB more."""
    from vidax.pipelines.device_plan import host_limit

    gib = 2**30
    assert host_limit(available=37 * gib, total=40 * gib, platform="cpu") == 33 * gib
    assert host_limit(available=37 * gib, total=40 * gib, platform="tpu") == 26 * gib
    assert host_limit(available=37 * gib, total=40 * gib, platform="gpu") == 33 * gib  # none of its own
    assert host_limit(available=150 * gib, total=200 * gib, platform="tpu") == 130 * gib
    assert host_limit(available=2 * gib, total=16 * gib) == 0
    assert 0 <= host_limit() < host_limit(available=2**50)  # this host's, measured now
