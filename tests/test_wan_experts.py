"""Wan2.2 A14B's two experts: the step where ``transformer_2`` takes over, and that only the
expert in use is in device memory."""

import gc
import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity.wan_reference import write_tiny_wan_variant
from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError, InputError
from vidax.pipelines.experts import expert_for_steps
from vidax.schedulers import scheduler_from_config
from vidax.stats import live_array_bytes

# The released A14B scheduler (the embedded default's UniPC settings when it is not available).
SCHEDULER_FILE = os.path.join(
    REFERENCE_CONFIGS, "Wan-AI__Wan2.2-T2V-A14B-Diffusers", "scheduler", "scheduler_config.json"
)
SMALL = dict(height=32, width=48, num_frames=5, max_sequence_length=16, guidance_scale=3.0)


def _scheduler_config():
    from vidax.default_checkpoint import SCHEDULER

    if os.path.isfile(SCHEDULER_FILE):
        with open(SCHEDULER_FILE) as f:
            return {k: v for k, v in json.load(f).items() if not k.startswith("_") or k == "_class_name"}
    return dict(SCHEDULER)


def _reference_plan(steps, flow_shift, boundary):
    """The expert of each step as diffusers.WanPipeline picks it (``t >= boundary_timestep``)."""
    from diffusers import UniPCMultistepScheduler

    config = {k: v for k, v in _scheduler_config().items() if not k.startswith("_")}
    scheduler = UniPCMultistepScheduler.from_config(config, flow_shift=flow_shift)
    scheduler.set_timesteps(steps)
    boundary_timestep = boundary * scheduler.config.num_train_timesteps
    return [0 if t >= boundary_timestep else 1 for t in scheduler.timesteps]


@pytest.fixture(scope="module")
def a14b(tmp_path_factory):
    return write_tiny_wan_variant(str(tmp_path_factory.mktemp("a14b")), boundary_ratio=0.875)


@pytest.fixture(scope="module")
def pipe(a14b):
    return vidax.load_pipeline(a14b)


CASES = [(40, 12.0, 0.875), (40, 5.0, 0.9), (50, 3.0, 0.875)]


@pytest.mark.parametrize("steps, flow_shift, boundary", CASES)
def test_switch_step_matches_diffusers(pipe, steps, flow_shift, boundary):
    """The step at which transformer_2 takes over equals the reference's, in the function and in
    a whole pipeline run (the expert on the device at each step, seen from the callback)."""
    ref = _reference_plan(steps, flow_shift, boundary)
    switch = ref.index(1)
    assert 0 < switch < steps and ref == [0] * switch + [1] * (steps - switch)
    print(f"steps={steps} flow_shift={flow_shift} boundary={boundary}: transformer_2 from step {switch}")

    scheduler = scheduler_from_config(_scheduler_config(), flow_shift=flow_shift)
    state = scheduler.set_timesteps(steps, sample_shape=(1,))
    assert expert_for_steps(np.asarray(state.timesteps), boundary, 1000) == ref

    pipe.scheduler, pipe.hooks.boundary_ratio = scheduler, boundary
    seen = []
    pipe(
        "a cat",
        num_inference_steps=steps,
        seed=0,
        output_type="latent",
        progress=False,
        callback=lambda i, n: seen.append(
            (i, n, pipe.experts.active, pipe.experts.memory_kind(1 - pipe.experts.active))
        ),
        **SMALL,
    )
    assert [s[0] for s in seen] == list(range(steps)) and {s[1] for s in seen} == {steps}
    assert [s[2] for s in seen] == ref
    assert {s[3] for s in seen} == {"pinned_host"}  # the other expert waits in host memory


def test_expert_for_steps_edges():
    # torch compares int64 900 with 0.9 * 1000 = 900.0000000000001 in float32: 900 is high noise.
    assert expert_for_steps([999, 900, 750], 0.9, 1000) == [0, 0, 1]
    assert expert_for_steps([999, 900, 750], None, 1000) == [0, 0, 0]
    assert expert_for_steps(np.array([999.0, 874.9], np.float32), 0.875, 1000) == [0, 1]


def _device_bytes():
    """Bytes of the distinct device-memory buffers (pinned host memory excluded) of all live arrays."""
    return live_array_bytes("device")


def _params_bytes(module):
    return sum(x.nbytes for x in jax.tree.leaves(nnx.state(module)))


def test_only_the_active_expert_is_on_the_device(a14b):
    """Measured on the live device arrays of the whole process: after the switch to
    transformer_2, device memory has not grown by an expert (transformer went back to host
    memory, and no stale reference keeps it), while with ``offload_experts=False`` both stay.
    The result is the same either way."""
    runs = {}
    for offload in (True, False):
        p = vidax.load_pipeline(a14b, offload_experts=offload)
        expert = _params_bytes(p.transformer)
        if offload:
            assert p.experts.memory_kind(1) == "pinned_host"  # moved off the device at load
        gc.collect()
        before = _device_bytes()
        seen = []

        def record(i, n, p=p):
            on_device = sum(
                _params_bytes(m)
                for m in (p.transformer, p.transformer_2)
                if jax.tree.leaves(nnx.state(m))[0].sharding.memory_kind != "pinned_host"
            )
            seen.append((p.experts.active, on_device, _device_bytes() - before))

        out = p("a cat", num_inference_steps=4, seed=0, output_type="latent", progress=False, callback=record, **SMALL)
        runs[offload] = (out.frames, seen)
        del p, record
    (lat_off, off), (lat_on, on) = runs[True], runs[False]
    np.testing.assert_array_equal(lat_off, lat_on)  # offloading changes where, not what
    assert [s[0] for s in off] == [s[0] for s in on] == [0, 0, 1, 1]
    assert [s[1] for s in off] == [expert] * 4 and [s[1] for s in on] == [2 * expert] * 4
    for _, _, grown in off:
        # Per-call arrays (text embeddings, latents, scheduler state) are a few kB; a second
        # expert on the device would add its whole size.
        assert grown < 0.5 * expert, (grown, expert)


def test_bad_expert_configs(a14b, tmp_path, pipe):
    with pytest.raises(InputError, match=r"guidance_scale_2 must be a finite number >= 0 \(at most .*\), got -1.0"):
        pipe("a cat", num_inference_steps=2, guidance_scale_2=-1.0, **SMALL)
    single = vidax.load_pipeline(write_tiny_wan_variant(str(tmp_path / "one")))
    with pytest.raises(InputError, match="only used by checkpoints with two experts"):
        single("a cat", num_inference_steps=2, guidance_scale_2=2.0, **SMALL)

    index_file = tmp_path / "one" / "model_index.json"
    index = json.loads(index_file.read_text())
    index_file.write_text(json.dumps({**index, "boundary_ratio": 0.875}))
    with pytest.raises(ConfigError, match="no transformer_2"):
        vidax.load_pipeline(str(tmp_path / "one"))
    index_file.write_text(json.dumps({**index, "boundary_ratio": 1.5}))
    with pytest.raises(ConfigError, match=r"boundary_ratio=1.5 must be null or a number in \[0, 1\]"):
        vidax.load_pipeline(str(tmp_path / "one"))

    other = tmp_path / "mismatch"
    write_tiny_wan_variant(str(other), boundary_ratio=0.875)
    config_file = other / "transformer_2" / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "patch_size": [1, 1, 1]}))
    with pytest.raises(ConfigError, match="transformer_2/config.json: in_channels=16, patch_size=.1, 1, 1. differ"):
        vidax.load_pipeline(str(other))


def test_a_call_resumed_from_a_saved_state_ends_as_the_uninterrupted_call(pipe):
    """``on_state`` hands the loop's latents and scheduler state (UniPC's: the model outputs of
    earlier steps, the step index) after each step; a call given them as ``resume`` at step k
    runs steps k+1.. and ends with the same latents, bit for bit, before and after the step
    where the second expert takes over (what ``vidax serve`` does after a restart). A state of
    another call's shape is refused naming both."""
    import dataclasses

    call = pipe.check_call(
        pipe.info, "a fox", seed=3, num_inference_steps=6, output_type="latent", progress=False, **SMALL
    )
    plan = pipe.hooks.expert_plan(
        pipe.hooks.set_timesteps(call, np.zeros(pipe.family.latent_shape(pipe.info, call), np.float32))
    )
    assert 0 < plan.index(1) < 5, plan  # the switch falls inside the run: both resume points below cross it or not
    saved = {}

    def keep(done, latents, state):
        saved[done] = [np.array(a) for a in jax.tree.leaves((latents, state))]

    whole = pipe.generate(dataclasses.replace(call, on_state=keep)).frames
    assert sorted(saved) == [1, 2, 3, 4, 5, 6]
    for k in (1, plan.index(1) + 1):
        resumed = pipe.generate(dataclasses.replace(call, resume=(k, saved[k]))).frames
        np.testing.assert_array_equal(resumed, whole)
    # Other latents with step 1's scheduler state give another result (the resume is not ignored).
    other = pipe.generate(dataclasses.replace(call, resume=(1, saved[2][:1] + saved[1][1:]))).frames
    assert np.abs(other - whole).max() > 0
    small = pipe.check_call(
        pipe.info, "a fox", seed=3, num_inference_steps=6, output_type="latent", progress=False, **dict(SMALL, width=32)
    )
    with pytest.raises(InputError, match="the saved denoising state does not fit this call"):
        pipe.generate(dataclasses.replace(small, resume=(1, saved[1])))
