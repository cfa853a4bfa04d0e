"""FlowMatchEuler as the LTX-Video pipelines drive it, against diffusers 0.42.1.

The four released LTX-Video scheduler configs (0.9.0 and 0.9.1: dynamic shifting with
shift_terminal=0.1; 0.9.5 and 0.9.7: shift=1, no shifting) are run the way each pipeline calls
``retrieve_timesteps``:

* LTXPipeline / LTXImageToVideoPipeline: ``sigmas=np.linspace(1, 1/N, N)`` and
  ``mu=calculate_shift(T*H*W, base_image_seq_len, max_image_seq_len, base_shift, max_shift)``;
* LTXConditionPipeline: ``timesteps=linear_quadratic_schedule(N) * 1000`` alone (no mu);

plus the default grid, ``time_shift_type="linear"``, both ``sigmas`` and ``timesteps``, and a
shift_terminal without dynamic shifting. Schedules must be *equal* to diffusers' (same numpy
float32 operations); trajectories (a nonlinear pseudo-model, one jitted step) agree to the
jitted-step tolerance of tests/parity/test_schedulers.py (2e-6: FMA contraction, <= 1 ulp per
operation). ``rescale_noise_cfg`` and ``calculate_shift`` are checked against diffusers' functions.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tests.parity.test_schedulers import (
    JIT_TOL,
    _assert_trajectory,
    _euler_config,
    _load,
    _reference,
    _run_reference,
    _run_vidax,
    _x0,
)
from vidax.errors import InputError
from vidax.pipelines.sampling import rescale_noise_cfg
from vidax.schedulers import FlowMatchEulerDiscreteScheduler, scheduler_from_config
from vidax.schedulers.base import calculate_shift

torch = pytest.importorskip("torch")
ltx = pytest.importorskip("diffusers.pipelines.ltx.pipeline_ltx")
ltx_condition = pytest.importorskip("diffusers.pipelines.ltx.pipeline_ltx_condition")

LTX_REPOS = (
    "Lightricks__LTX-Video",  # 0.9.0: dynamic shifting, shift_terminal 0.1
    "Lightricks__LTX-Video-0.9.1",  # same scheduler
    "Lightricks__LTX-Video-0.9.5",  # shift 1, no dynamic shifting
    "Lightricks__LTX-Video-0.9.7-dev",
)
SHIFT_KEYS = ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")
# Latent token counts T*H*W: 121 frames at 768x512 (16*16*24), a tiny one, one past max_seq_len.
SEQ_LENS = (16 * 16 * 24, 2 * 3 * 4, 9000)


def _mu(config: dict, seq_len: int) -> float:
    """mu as LTXPipeline computes it (config.get with diffusers' defaults)."""
    defaults = (256, 4096, 0.5, 1.15)
    return ltx.calculate_shift(seq_len, *(config.get(k, d) for k, d in zip(SHIFT_KEYS, defaults)))


def _check(config: dict, n: int, seed: int, **kw):
    """Schedule equal to diffusers' and the jitted trajectory within JIT_TOL; returns the state."""
    ref_sched = _reference(config)
    x0 = _x0(seed)
    ref = _run_reference(ref_sched, x0, num_inference_steps=kw.pop("ref_n", n), **kw)
    sched = scheduler_from_config(config)
    assert isinstance(sched, FlowMatchEulerDiscreteScheduler)
    state = sched.set_timesteps(n, **kw)
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref_sched.timesteps.numpy())
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref_sched.sigmas.numpy())
    assert state.timesteps.dtype == jnp.float32 and state.sigmas.dtype == jnp.float32
    ours, traces, x, final = _run_vidax(sched, state, x0)
    assert traces == 1 and int(final.step_index) == n
    _assert_trajectory(ours, ref, JIT_TOL)
    return state


@pytest.mark.parametrize("repo", LTX_REPOS)
def test_ltx_calculate_shift(repo):
    config = _load(repo)
    sched = scheduler_from_config(config)
    for seq_len in SEQ_LENS:
        expected = _mu(config, seq_len)
        assert sched.calculate_shift(seq_len) == expected
        assert calculate_shift(seq_len, *(config[k] for k in SHIFT_KEYS)) == expected
    # diffusers' keyword defaults are the free function's.
    assert calculate_shift(1234) == ltx.calculate_shift(1234)


@pytest.mark.parametrize("n", (1, 7, 40))
@pytest.mark.parametrize("repo", LTX_REPOS)
def test_ltx_pipeline_schedule(repo, n):
    """LTXPipeline / LTXImageToVideoPipeline: linspace sigmas + mu from the token count."""
    config = _load(repo)
    sigmas = np.linspace(1.0, 1 / n, n)
    if n == 1 and config["shift_terminal"]:
        # One step: the schedule is [1.0], the stretch to shift_terminal divides 0 by 0 and
        # diffusers returns a NaN sigma; vidax refuses it and says why.
        ref_sched = _reference(config)
        with np.errstate(invalid="ignore"):
            ref_sched.set_timesteps(sigmas=sigmas, mu=_mu(config, SEQ_LENS[0]))
        assert np.isnan(ref_sched.sigmas.numpy()[0])
        with pytest.raises(InputError, match="shift_terminal=0.1.*num_inference_steps >= 2"):
            scheduler_from_config(config).set_timesteps(1, sigmas=sigmas, mu=_mu(config, SEQ_LENS[0]))
        return
    for i, seq_len in enumerate(SEQ_LENS):
        state = _check(config, n, 10 * n + i, sigmas=sigmas, mu=_mu(config, seq_len), ref_n=None)
        if config["use_dynamic_shifting"] and n > 1:  # the shift_terminal stretch is applied
            assert np.isclose(float(state.sigmas[n - 1]), config["shift_terminal"], rtol=1e-6)
        if not config["use_dynamic_shifting"]:  # shift=1: the linspace itself
            np.testing.assert_array_equal(np.asarray(state.sigmas[:-1]), sigmas.astype(np.float32))
            break  # mu is ignored without dynamic shifting; one token count is enough


def _linear_quadratic(n: int) -> np.ndarray:
    return ltx_condition.linear_quadratic_schedule(n).numpy()


@pytest.mark.parametrize("n", (1, 8, 31))
@pytest.mark.parametrize("repo", LTX_REPOS)
def test_ltx_condition_pipeline_timesteps(repo, n):
    """LTXConditionPipeline: custom timesteps (linear-quadratic sigmas * 1000), no sigmas, no mu."""
    config = _load(repo)
    timesteps = torch.from_numpy(_linear_quadratic(n)) * 1000  # as the pipeline builds them
    if config["use_dynamic_shifting"]:
        # diffusers raises ValueError (mu missing): the condition pipeline does not run on these
        # configs as released; vidax names the missing argument. With a mu, both agree.
        with pytest.raises(InputError, match="mu=None"):
            scheduler_from_config(config).set_timesteps(timesteps=timesteps)
        with pytest.raises(ValueError, match="mu"):
            _reference(config).set_timesteps(timesteps=timesteps)
        if n == 1:  # [1000]: sigma 1 cannot be stretched to shift_terminal (diffusers: NaN)
            with pytest.raises(InputError, match="shift_terminal"):
                scheduler_from_config(config).set_timesteps(timesteps=timesteps, mu=1.0)
            return
        _check(config, n, 200 + n, timesteps=timesteps, mu=_mu(config, 4096), ref_n=None)
        return
    state = _check(config, n, 300 + n, timesteps=timesteps, ref_n=None)
    np.testing.assert_array_equal(np.asarray(state.timesteps), timesteps.numpy())
    # shift 1 and no stretch: the sigmas are the timesteps / 1000, consistent with them.
    np.testing.assert_array_equal(np.asarray(state.sigmas[:-1]), timesteps.numpy() / np.float32(1000))
    # num_inference_steps may be given when it equals the length (retrieve_timesteps drops it).
    again = scheduler_from_config(config).set_timesteps(n, timesteps=timesteps)
    np.testing.assert_array_equal(np.asarray(again.sigmas), np.asarray(state.sigmas))


VARIANTS = {
    # name: (config overrides over the LTX-Video 0.9.0 config, set_timesteps kwargs)
    "dynamic_default_grid": ({}, {"mu": 1.3}),
    "dynamic_linear": ({"time_shift_type": "linear"}, {"mu": 2.1}),
    "dynamic_linear_sigmas": ({"time_shift_type": "linear"}, {"mu": 0.8, "sigmas": "linspace"}),
    "dynamic_no_terminal": ({"shift_terminal": None}, {"mu": 1.7, "sigmas": "linspace"}),
    "dynamic_timesteps": ({}, {"mu": 1.1, "timesteps": "linear_quadratic"}),
    "dynamic_sigmas_and_timesteps": ({}, {"mu": 0.9, "sigmas": "linspace", "timesteps": "linear_quadratic"}),
    "static_shift_terminal": ({"use_dynamic_shifting": False, "shift": 3.0}, {}),
    "static_shift_terminal_sigmas": ({"use_dynamic_shifting": False, "shift": 2.5}, {"sigmas": "linspace"}),
    "static_shift_timesteps": (
        {"use_dynamic_shifting": False, "shift": 4.0, "shift_terminal": None},
        {"timesteps": "linear_quadratic"},
    ),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_flow_match_variants(name):
    overrides, kw = VARIANTS[name]
    config = {**_load("Lightricks__LTX-Video"), **overrides}
    n = 12
    kw = dict(kw)
    if kw.get("sigmas") == "linspace":
        kw["sigmas"] = np.linspace(1.0, 1 / n, n)
    if kw.get("timesteps") == "linear_quadratic":
        kw["timesteps"] = _linear_quadratic(n) * 1000
    state = _check(config, n, 400 + len(name), **kw)
    if "timesteps" in kw:  # used as given
        np.testing.assert_array_equal(np.asarray(state.timesteps), kw["timesteps"].astype(np.float32))
    if config["shift_terminal"]:
        assert np.isclose(float(state.sigmas[n - 1]), config["shift_terminal"], rtol=1e-6)


def test_flow_match_custom_input_errors():
    dyn = scheduler_from_config(_load("Lightricks__LTX-Video"))
    static = scheduler_from_config(_load("Lightricks__LTX-Video-0.9.7-dev"))
    lin = np.linspace(1.0, 0.1, 4)
    with pytest.raises(InputError, match=r"len\(sigmas\)=4 but len\(timesteps\)=3"):
        static.set_timesteps(sigmas=lin, timesteps=[900.0, 500.0, 100.0])
    with pytest.raises(InputError, match=r"num_inference_steps=5 but len\(timesteps\)=4"):
        static.set_timesteps(5, timesteps=lin * 1000)
    with pytest.raises(InputError, match=r"num_inference_steps=3 but len\(sigmas\)=4"):
        static.set_timesteps(3, sigmas=lin, timesteps=lin * 1000)
    for bad in ([], [1.0, float("nan")], "abc", [[1.0, 2.0]], 3.0):
        with pytest.raises(InputError, match="timesteps=.*finite numbers"):
            static.set_timesteps(timesteps=bad)
        with pytest.raises(InputError, match="sigmas=.*finite numbers"):
            static.set_timesteps(sigmas=bad)
    with pytest.raises(InputError, match="num_inference_steps=None"):
        static.set_timesteps()
    # shift=3 maps sigma -0.5 to 3 * -0.5 / 0: refused, saying what is valid.
    shift3 = FlowMatchEulerDiscreteScheduler.from_config(_euler_config(shift=3.0))
    with pytest.raises(InputError, match=r"non-finite sigmas.*\[0, 1\]"):
        shift3.set_timesteps(sigmas=[1.0, 0.5, -0.5])
    with pytest.raises(InputError, match="dynamic shifting"):
        dyn.set_timesteps(4, mu=1.0, shift=2.0)
    with pytest.raises(InputError, match="image_seq_len=0"):
        dyn.calculate_shift(0)
    with pytest.raises(InputError, match="base_shift=None"):
        FlowMatchEulerDiscreteScheduler.from_config(_euler_config(base_shift=None)).calculate_shift(100)
    with pytest.raises(InputError, match="must differ"):
        calculate_shift(100, 256, 256)


@pytest.mark.parametrize("guidance_rescale", (0.0, 0.3, 0.7, 1.0))
def test_rescale_noise_cfg(guidance_rescale):
    """vs diffusers' rescale_noise_cfg on (B, C, T, H, W) torch tensors; vidax gets (B, T, H, W, C)
    (per-sample reductions over all non-batch axes are layout-free). float32; the std reductions
    are summed in a different order (torch vs XLA), a few ulps: tolerance 2e-6 relative
    (measured <= 1.6e-7)."""
    rng = np.random.default_rng(5)
    shape = (3, 4, 2, 5, 6)
    text = rng.standard_normal(shape).astype(np.float32)
    uncond = (0.6 * rng.standard_normal(shape) + 0.2).astype(np.float32)
    cfg = uncond + 5.0 * (text - uncond)
    # Make the per-sample spreads differ, so the rescale is not one factor for the batch.
    cfg = cfg * np.array([1.0, 2.5, 0.4], np.float32)[:, None, None, None, None]
    ref = ltx.rescale_noise_cfg(torch.from_numpy(cfg), torch.from_numpy(text), guidance_rescale).numpy()
    to_cl = (0, 2, 3, 4, 1)
    ours = rescale_noise_cfg(jnp.asarray(cfg.transpose(to_cl)), jnp.asarray(text.transpose(to_cl)), guidance_rescale)
    assert ours.dtype == jnp.float32
    ours = np.moveaxis(np.asarray(ours), -1, 1)
    scale = np.abs(ref).max()
    assert np.abs(ours - ref).max() / scale < 2e-6
    if guidance_rescale > 0:  # the reference really rescales (not the identity)
        assert np.abs(ref - cfg).max() / scale > 1e-2
    # Packed (B, L, D) layout and a traced scale give the same result.
    packed = rescale_noise_cfg(
        jnp.asarray(cfg.reshape(3, -1, 4)), jnp.asarray(text.reshape(3, -1, 4)), jnp.float32(guidance_rescale)
    )
    assert np.abs(np.asarray(packed).reshape(shape) - ref).max() / scale < 2e-6
    with pytest.raises(InputError, match="same shape"):
        rescale_noise_cfg(jnp.zeros((2, 3)), jnp.zeros((2, 4)), guidance_rescale)
