"""CogVideoXDDIMScheduler / CogVideoXDPMScheduler against diffusers, step for step.

For each scheduler, step count (1, 2, 10, 50) and ``snr_shift_scale`` (1.0: 5B, 3.0: 2B) the
released (zero-terminal-SNR, v-prediction, trailing) config runs a whole trajectory on both sides
with the same deterministic stand-in for the model (a nonlinear function of the sample and the
timestep), each side on its own samples, so errors accumulate as in a real run. The DPM
scheduler's fresh noise is recorded from the reference (which draws it from the generator) and
passed to vidax's ``step``.

Tolerance 1e-5 relative: the per-step coefficients are the reference's, rounded to float32 as
torch rounds a 0-d float64 tensor in a float32 product; what remains is float32 rounding of the
elementwise updates (~1e-7 per step), here over up to 50 steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.parity.helpers import max_rel_err
from vidax.errors import ConfigError, InputError
from vidax.schedulers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler, scheduler_from_config
from vidax.schedulers.ddim_cogvideox import CogVideoXSchedulerConfig, alphas_cumprod

diffusers = pytest.importorskip("diffusers")
import diffusers.schedulers.scheduling_dpm_cogvideox as dpm_module  # noqa: E402

# THUDM/CogVideoX-2b scheduler/scheduler_config.json (snr_shift_scale 3.0; 5B uses 1.0).
RELEASED = {
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "clip_sample_range": 1.0,
    "num_train_timesteps": 1000,
    "prediction_type": "v_prediction",
    "rescale_betas_zero_snr": True,
    "sample_max_value": 1.0,
    "set_alpha_to_one": True,
    "snr_shift_scale": 3.0,
    "steps_offset": 0,
    "timestep_spacing": "trailing",
    "trained_betas": None,
}
SHAPE = (2, 3, 4, 5, 6)
TOL = 1e-5
CLASSES = {
    "ddim": (diffusers.CogVideoXDDIMScheduler, CogVideoXDDIMScheduler),
    "dpm": (diffusers.CogVideoXDPMScheduler, CogVideoXDPMScheduler),
}


def _model(x, t, lib):
    """A stand-in model output: nonlinear in the sample, depends on the timestep."""
    if lib is torch:
        return torch.tanh(0.7 * x) * 0.9 + 0.2 * torch.sin(x * 3.0 + t / 100.0)
    return jnp.tanh(0.7 * x) * 0.9 + 0.2 * jnp.sin(x * 3.0 + t / 100.0)


def _reference_run(kind, config, n, x0):
    cls = CLASSES[kind][0]
    sched = cls.from_config(config)
    sched.set_timesteps(n)
    x = torch.from_numpy(x0)
    gen = torch.Generator().manual_seed(11)
    drawn = []
    original = dpm_module.randn_tensor

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        drawn.append(out.clone())
        return out

    xs, noises, old = [], [], None
    dpm_module.randn_tensor = recording
    try:
        for i, t in enumerate(sched.timesteps):
            out = _model(x, float(t), torch)
            if kind == "ddim":
                x = sched.step(out, t, x, return_dict=False)[0]
            else:
                drawn.clear()
                back = sched.timesteps[i - 1] if i > 0 else None
                x, old = sched.step(out, old, t, back, x, generator=gen, return_dict=False)
                noises.append(drawn[-1].numpy())  # the draw the step adds
            xs.append(x.numpy().copy())
    finally:
        dpm_module.randn_tensor = original
    return sched.timesteps.numpy(), xs, noises


def _vidax_run(kind, config, n, x0, noises):
    sched = scheduler_from_config({"_class_name": CLASSES[kind][1].__name__, **config})
    assert isinstance(sched, CLASSES[kind][1])
    state = sched.set_timesteps(n, sample_shape=x0.shape)

    @jax.jit
    def step(state, x, noise):
        out = _model(x, state.timestep, jnp)
        if kind == "ddim":
            return sched.step(state, out, x)
        return sched.step(state, out, x, noise)

    x, xs = jnp.asarray(x0), []
    for i in range(state.num_inference_steps):
        x, state = step(state, x, None if kind == "ddim" else jnp.asarray(noises[i]))
        xs.append(np.asarray(x))
    return np.asarray(state.timesteps), xs


@pytest.mark.parametrize("kind", ["ddim", "dpm"])
@pytest.mark.parametrize("snr", [1.0, 3.0])
@pytest.mark.parametrize("n", [1, 2, 10, 50])
def test_trajectory_matches_reference(kind, snr, n):
    config = dict(RELEASED, snr_shift_scale=snr)
    x0 = np.random.default_rng(n).standard_normal(SHAPE, dtype=np.float32)
    ref_ts, ref_xs, noises = _reference_run(kind, config, n, x0)
    ts, xs = _vidax_run(kind, config, n, x0, noises)
    np.testing.assert_array_equal(ts, ref_ts)
    errs = [max_rel_err(a, b) for a, b in zip(xs, ref_xs)]
    assert len(xs) == len(ref_xs) == n
    print(f"{kind} snr={snr} n={n}: max rel err over the trajectory {max(errs):.1e}")
    assert max(errs) < TOL
    # The trajectory moves (the comparison is not of constants).
    assert max_rel_err(ref_xs[-1], x0) > 0.1


@pytest.mark.parametrize(
    "override",
    [
        {},
        {"rescale_betas_zero_snr": False},
        {"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02, "snr_shift_scale": 2.0},
        {"beta_schedule": "squaredcos_cap_v2", "rescale_betas_zero_snr": False},
        {"set_alpha_to_one": False, "rescale_betas_zero_snr": False},
    ],
)
def test_noise_schedule_matches_reference(override):
    config = dict(RELEASED, **override)
    ref = diffusers.CogVideoXDDIMScheduler.from_config(config)
    ac, final = alphas_cumprod(CogVideoXSchedulerConfig.from_config_dict(config))
    want = ref.alphas_cumprod.numpy()
    assert ac.dtype == want.dtype
    # scaled_linear is float64 on both sides; float32 schedules differ by torch's vectorised
    # linspace rounding at most (an ulp of the betas).
    assert max_rel_err(ac, want) < (1e-12 if ac.dtype == np.float64 else 1e-6)
    assert float(final) == float(ref.final_alpha_cumprod)


@pytest.mark.parametrize("kind", ["ddim", "dpm"])
@pytest.mark.parametrize(
    "override",
    [
        {
            "prediction_type": "epsilon",
            "rescale_betas_zero_snr": False,
            "timestep_spacing": "leading",
            "steps_offset": 1,
        },
        {"prediction_type": "sample", "timestep_spacing": "linspace"},
    ],
)
def test_other_settings_match_reference(kind, override):
    config = dict(RELEASED, **override)
    x0 = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    ref_ts, ref_xs, noises = _reference_run(kind, config, 7, x0)
    ts, xs = _vidax_run(kind, config, 7, x0, noises)
    np.testing.assert_array_equal(ts, ref_ts)
    assert max(max_rel_err(a, b) for a, b in zip(xs, ref_xs)) < TOL


def test_broken_reference_grids_are_refused():
    # trailing spacing: np.arange(1000, 0, -1000/61) has 62 entries ending at timestep -1.
    ref = diffusers.CogVideoXDDIMScheduler.from_config(RELEASED)
    ref.set_timesteps(61)
    assert len(ref.timesteps) == 62 and int(ref.timesteps[-1]) == -1
    for cls in (CogVideoXDDIMScheduler, CogVideoXDPMScheduler):
        with pytest.raises(InputError, match="num_inference_steps=61"):
            cls.from_config(RELEASED).set_timesteps(61, sample_shape=SHAPE)
        with pytest.raises(InputError, match="num_train_timesteps"):
            cls.from_config(RELEASED).set_timesteps(1001, sample_shape=SHAPE)


def test_default_noise_is_fresh_per_step_and_seeded():
    sched = CogVideoXDPMScheduler.from_config(RELEASED)
    x = jnp.zeros(SHAPE)
    a = sched.set_timesteps(3, sample_shape=SHAPE, seed=1)
    b = sched.set_timesteps(3, sample_shape=SHAPE, seed=2)
    a1, a = sched.step(a, x, x)
    a2, _ = sched.step(a, x, x)
    b1, _ = sched.step(b, x, x)
    assert np.std(np.asarray(a1)) > 0.1
    assert not np.allclose(a1, b1)  # seed matters
    c = sched.set_timesteps(3, sample_shape=SHAPE, seed=1)
    np.testing.assert_array_equal(sched.step(c, x, x)[0], a1)  # and reproduces
    # step 2 adds other noise than step 1 (its own fold_in), not the same draw again
    assert abs(np.corrcoef(np.asarray(a1).ravel(), np.asarray(a2).ravel())[0, 1]) < 0.9


def test_dpm_step_names_a_sample_of_another_shape():
    """A sample of another shape than the state was made for is refused in one line naming
    ``sample_shape`` (the DPM state keeps the previous x0)."""
    sched = CogVideoXDPMScheduler.from_config(RELEASED)
    state = sched.set_timesteps(3, sample_shape=SHAPE)
    other = jnp.zeros(SHAPE[:-1] + (SHAPE[-1] + 1,))
    with pytest.raises(InputError, match=r"but the state was made for sample_shape="):
        sched.step(state, other, other)


@pytest.mark.parametrize(
    "override,match",
    [
        ({"beta_schedule": "sigmoid"}, "beta_schedule"),
        ({"prediction_type": "flow"}, "prediction_type"),
        ({"timestep_spacing": "karras"}, "timestep_spacing"),
        ({"thresholding": True}, "unknown setting thresholding"),
        ({"trained_betas": [0.1, 0.2]}, "trained_betas"),
    ],
)
def test_config_refuses(override, match):
    with pytest.raises(ConfigError, match=match):
        CogVideoXDDIMScheduler.from_config({**RELEASED, **override})


def test_config_defaults_are_diffusers():
    import inspect

    for cls in (diffusers.CogVideoXDDIMScheduler, diffusers.CogVideoXDPMScheduler):
        sig = inspect.signature(cls.__init__)
        defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
        ours = CogVideoXSchedulerConfig().to_dict()
        assert set(ours) | CogVideoXSchedulerConfig.IGNORED == set(defaults)
        for key, value in ours.items():
            assert value == defaults[key], key
