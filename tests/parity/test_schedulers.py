"""Parity of vidax's samplers with diffusers' UniPCMultistepScheduler and FlowMatchEuler.

Schedules (``timesteps``, ``sigmas``) must be *equal* to diffusers' (both are computed with the
same numpy/float32 operations). Sampling trajectories: the same random sample and the same
deterministic, nonlinear pseudo-model ``v = f(x, t)`` (evaluated in numpy on each side's own
sample, so multistep history and error feedback both matter) are run through every step by
diffusers (torch, channels-first) and by vidax (one jitted ``step``, channels-last); every
intermediate sample is compared.

Tolerances (max |a - b| / max |b| per step, float32):
* jitted step: 2e-6. XLA fuses ``x - s * m`` into a fused multiply-add and turns a division by a
  broadcast scalar into a multiplication by its reciprocal; each is a <= 1 ulp (6e-8) difference
  per operation, a few per step, carried through up to 100 steps (measured <= 9e-7).
* op-by-op (un-jitted) step: 5e-7. Same operations as torch except the reciprocal rewrite and
  rare 1-ulp differences of float32 log in lambda = log(alpha/sigma) (measured <= 2.2e-7).
* bf16 model output: see the bf16 tests.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.parity.helpers import max_rel_err
from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError, InputError
from vidax.registry import registry
from vidax.schedulers import (
    FlowMatchEulerDiscreteScheduler,
    UniPCMultistepScheduler,
    scheduler_from_config,
)

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

REF_DIR = REFERENCE_CONFIGS
WAN_UNIPC = {  # flow_shift -> a released Wan scheduler config with that shift
    3.0: "Wan-AI__Wan2.1-T2V-1.3B-Diffusers",
    5.0: "Wan-AI__Wan2.2-TI2V-5B-Diffusers",
}
STEPS = (1, 2, 3, 10, 49, 50, 51, 100)
SHAPE = (2, 3, 4, 5, 6)  # (B, C, T, H, W) as diffusers; vidax runs channels-last (B, T, H, W, C)
JIT_TOL = 2e-6
EAGER_TOL = 5e-7


def _load(repo: str) -> dict:
    with open(os.path.join(REF_DIR, repo, "scheduler", "scheduler_config.json")) as f:
        return json.load(f)


def _torch_config(config: dict) -> dict:
    """The dict diffusers gets: without the reconstruction notes (keys starting with ``_``)."""
    return {k: v for k, v in config.items() if not k.startswith("_")}


def _euler_config(**overrides) -> dict:
    """A FlowMatchEulerDiscreteScheduler config with every key diffusers writes (its defaults)."""
    config = {
        "_class_name": "FlowMatchEulerDiscreteScheduler",
        "base_image_seq_len": 256,
        "base_shift": 0.5,
        "invert_sigmas": False,
        "max_image_seq_len": 4096,
        "max_shift": 1.15,
        "num_train_timesteps": 1000,
        "shift": 1.0,
        "shift_terminal": None,
        "stochastic_sampling": False,
        "time_shift_type": "exponential",
        "use_beta_sigmas": False,
        "use_dynamic_shifting": False,
        "use_exponential_sigmas": False,
        "use_karras_sigmas": False,
    }
    config.update(overrides)
    return config


def _reference(config: dict):
    cls = getattr(diffusers, config["_class_name"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_config(_torch_config(config))


def _pseudo_model(x: np.ndarray, t: float) -> np.ndarray:
    """Deterministic nonlinear 'velocity' f(x, t), elementwise (so layout-independent)."""
    x = np.asarray(x, np.float64)
    v = np.tanh(1.3 * x + t / 700.0) * 0.8 - 0.5 * x * np.cos(t / 300.0) + 0.1 * np.sin(3.0 * x)
    return v.astype(np.float32)


def _x0(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


def _to_cl(x):  # (B, C, T, H, W) -> (B, T, H, W, C)
    return np.moveaxis(np.asarray(x), 1, -1)


def _to_cf(x):  # (B, T, H, W, C) -> (B, C, T, H, W)
    return np.moveaxis(np.asarray(x), -1, 1)


def _run_reference(ref, x0: np.ndarray, mo_dtype=None, **set_timesteps_kwargs) -> list[np.ndarray]:
    """diffusers' sampling loop (as WanPipeline: set_begin_index(0), step(v, t, x))."""
    ref.set_timesteps(**set_timesteps_kwargs)
    ref.set_begin_index(0)
    x = torch.from_numpy(x0.copy())
    out = []
    for t in ref.timesteps:
        v = torch.from_numpy(_pseudo_model(x.float().numpy(), float(t)))
        if mo_dtype is not None:
            v = v.to(mo_dtype)
        x = ref.step(v, t, x, return_dict=False)[0]
        out.append(x.float().numpy())
    return out


def _run_vidax(sched, state, x0: np.ndarray, *, jit: bool = True, mo_dtype=None, sample_dtype=None):
    """vidax's loop, channels-last, one jitted step for all steps. Returns (samples, traces)."""
    traces = []

    def step(state, v, x):
        traces.append(1)
        return sched.step(state, v, x)

    step_fn = jax.jit(step) if jit else step
    x = jnp.asarray(_to_cl(x0), sample_dtype)
    out = []
    for i in range(state.num_inference_steps):
        t = float(state.timesteps[i])
        v = jnp.asarray(_pseudo_model(np.asarray(x.astype(jnp.float32)), t))
        if mo_dtype is not None:
            v = v.astype(mo_dtype)
        x, state = step_fn(state, v, x)
        out.append(_to_cf(x.astype(jnp.float32)))
    return out, len(traces), x, state


def _assert_trajectory(ours, ref, tol):
    assert len(ours) == len(ref)
    errs = [max_rel_err(a, b) for a, b in zip(ours, ref)]
    assert max(errs) < tol, f"per-step max rel err {errs} (tolerance {tol})"
    return max(errs)


# ------------------------------------------------------------------------------------------------
# UniPC (Wan)


@pytest.mark.parametrize("n", STEPS)
@pytest.mark.parametrize("flow_shift", sorted(WAN_UNIPC))
def test_unipc_wan_schedule_equal(flow_shift, n):
    config = _load(WAN_UNIPC[flow_shift])
    assert config["flow_shift"] == flow_shift
    ref = _reference(config)
    ref.set_timesteps(n)
    state = scheduler_from_config(config).set_timesteps(n, sample_shape=(1,))
    # Exact equality (0 ulp): the same float64/float32 numpy operations as diffusers.
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref.timesteps.numpy())
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref.sigmas.numpy())
    assert state.sigmas.dtype == jnp.float32 and state.timesteps.dtype == jnp.int32
    assert state.num_inference_steps == n


@pytest.mark.parametrize("n", STEPS)
@pytest.mark.parametrize("flow_shift", sorted(WAN_UNIPC))
def test_unipc_wan_trajectory(flow_shift, n):
    config = _load(WAN_UNIPC[flow_shift])
    x0 = _x0(n)
    ref = _run_reference(_reference(config), x0, num_inference_steps=n)
    sched = scheduler_from_config(config)
    assert isinstance(sched, UniPCMultistepScheduler)
    state = sched.set_timesteps(n, sample_shape=_to_cl(x0).shape)
    ours, traces, x, final = _run_vidax(sched, state, x0)
    assert traces == 1, "step must trace once for all steps"
    assert x.dtype == jnp.float32 and int(final.step_index) == n
    _assert_trajectory(ours, ref, JIT_TOL)


@pytest.mark.parametrize("n", (3, 10, 49))
@pytest.mark.parametrize("flow_shift", sorted(WAN_UNIPC))
def test_unipc_wan_trajectory_op_by_op(flow_shift, n):
    """Without jit (no FMA contraction): checks the precomputed coefficients at ~ulp level."""
    config = _load(WAN_UNIPC[flow_shift])
    x0 = _x0(n)
    ref = _run_reference(_reference(config), x0, num_inference_steps=n)
    sched = scheduler_from_config(config)
    state = sched.set_timesteps(n, sample_shape=_to_cl(x0).shape)
    ours, *_ = _run_vidax(sched, state, x0, jit=False)
    _assert_trajectory(ours, ref, EAGER_TOL)


# Cosmos-Predict2.5 (2B and 14B ship the same file): Karras sigmas (200 -> 0.01) as flow sigmas.
COSMOS_UNIPC = "nvidia__Cosmos-Predict2.5-2B"


@pytest.mark.parametrize("n", (1, 2, 7, 35, 36))
def test_unipc_cosmos_karras_schedule_equal(n):
    config = _load(COSMOS_UNIPC)
    assert config["use_karras_sigmas"] and config["sigma_max"] == 200.0
    ref = _reference(config)
    ref.set_timesteps(n)
    state = scheduler_from_config(config).set_timesteps(n, sample_shape=(1,))
    # Exact (0 ulp): the same float64 numpy operations, then float32 / int64 as diffusers.
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref.sigmas.numpy())
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref.timesteps.numpy())
    # Not the plain flow grid: the first sigma is 200 / 201, not 1 - 1e-6.
    assert abs(float(state.sigmas[0]) - 200.0 / 201.0) < 1e-6


@pytest.mark.parametrize("n", (3, 36))
def test_unipc_cosmos_karras_trajectory(n):
    config = _load(COSMOS_UNIPC)
    x0 = _x0(n)
    ref = _run_reference(_reference(config), x0, num_inference_steps=n)
    sched = scheduler_from_config(config)
    state = sched.set_timesteps(n, sample_shape=_to_cl(x0).shape)
    ours, traces, *_ = _run_vidax(sched, state, x0)
    assert traces == 1
    _assert_trajectory(ours, ref, JIT_TOL)


def test_unipc_karras_needs_sigma_range_and_ignores_shift():
    config = _load(COSMOS_UNIPC)
    for drop in ("sigma_min", "sigma_max"):
        with pytest.raises(ConfigError, match=f"use_karras_sigmas=True with .*{drop}=None"):
            scheduler_from_config({k: v for k, v in config.items() if k != drop})
    with pytest.raises(ConfigError, match="sigma_max=0.001"):
        scheduler_from_config({**config, "sigma_max": 0.001})
    with pytest.raises(InputError, match="Karras sigmas"):
        scheduler_from_config(config).set_timesteps(4, sample_shape=(1,), flow_shift=3.0)
    # diffusers ignores flow_shift in the Karras branch; so does vidax.
    shifted = {**config, "flow_shift": 5.0}
    ref = _reference(shifted)
    ref.set_timesteps(9)
    state = scheduler_from_config(shifted).set_timesteps(9, sample_shape=(1,))
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref.sigmas.numpy())


UNIPC_VARIANTS = {
    # name: (config overrides, set_timesteps kwargs for vidax, for diffusers)
    "order3": ({"solver_order": 3}, {}, {}),
    "order1": ({"solver_order": 1}, {}, {}),
    "disable_corrector": ({"disable_corrector": [0, 2, 5]}, {}, {}),
    "bh1_sigma_min": ({"solver_type": "bh1", "final_sigmas_type": "sigma_min"}, {}, {}),
    "no_lower_order_final": (
        {"lower_order_final": False, "final_sigmas_type": "sigma_min"},
        {},
        {},
    ),
    "midpoint_alias": ({"solver_type": "midpoint"}, {}, {}),
    "dynamic_shift_terminal": (
        {"use_dynamic_shifting": True, "shift_terminal": 0.1, "time_shift_type": "linear"},
        {"mu": 1.7},
        {"mu": 1.7},
    ),
}


@pytest.mark.parametrize("name", sorted(UNIPC_VARIANTS))
def test_unipc_variants(name):
    overrides, kw, ref_kw = UNIPC_VARIANTS[name]
    config = {**_load(WAN_UNIPC[3.0]), **overrides}
    n = 13
    x0 = _x0(1)
    ref_sched = _reference(config)
    ref = _run_reference(ref_sched, x0, num_inference_steps=n, **ref_kw)
    sched = scheduler_from_config(config)
    state = sched.set_timesteps(n, sample_shape=_to_cl(x0).shape, **kw)
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref_sched.sigmas.numpy())
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref_sched.timesteps.numpy())
    ours, traces, *_ = _run_vidax(sched, state, x0)
    assert traces == 1
    _assert_trajectory(ours, ref, JIT_TOL)


def test_unipc_bf16_model_output():
    """Wan's pattern: float32 latents, bf16 transformer output. The result stays float32.

    torch evaluates ``sigma * v`` (0-dim float32 sigma, bf16 ``v``) in bf16: a 0-dim tensor does
    not promote, so sigma and the product are rounded to bf16; vidax computes it in float32. The
    difference is that rounding (<= 2^-8 relative of the ``sigma * v`` term) each step, with
    float32 latents otherwise: tolerance 4e-3 (measured 7e-4).
    """
    config = _load(WAN_UNIPC[3.0])
    n = 20
    x0 = _x0(3)
    ref = _run_reference(_reference(config), x0, mo_dtype=torch.bfloat16, num_inference_steps=n)
    sched = scheduler_from_config(config)
    state = sched.set_timesteps(n, sample_shape=_to_cl(x0).shape)
    ours, traces, x, _ = _run_vidax(sched, state, x0, mo_dtype=jnp.bfloat16)
    assert traces == 1 and x.dtype == jnp.float32
    err = _assert_trajectory(ours, ref, 4e-3)
    assert err > 0  # the bf16 path is really exercised


def test_unipc_shift_applied_once_and_pure():
    config = _load(WAN_UNIPC[3.0])
    sched = scheduler_from_config(config)
    n = 50
    a = sched.set_timesteps(n, sample_shape=SHAPE)
    b = sched.set_timesteps(n, sample_shape=SHAPE)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # Independent formula: shift applied once to the linear grid, first sigma moved off 1.0.
    s = np.linspace(1, 1 / 1000, n + 1)[:-1]
    shifted = 3.0 * s / (1 + 2.0 * s)
    shifted[0] -= 1e-6
    np.testing.assert_array_equal(np.asarray(a.sigmas[:-1]), shifted.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(a.timesteps), (shifted * 1000).astype(np.int64))
    assert float(a.sigmas[-1]) == 0.0
    # Overriding flow_shift in set_timesteps == a config with that flow_shift (diffusers'
    # from_config(config, flow_shift=...)), and differs from applying it on top of the config's.
    c = sched.set_timesteps(n, sample_shape=SHAPE, flow_shift=5.0)
    d = scheduler_from_config(config, flow_shift=5.0).set_timesteps(n, sample_shape=SHAPE)
    ref5 = _reference({**config, "flow_shift": 5.0})
    ref5.set_timesteps(n)
    for x, y in zip(jax.tree.leaves(c), jax.tree.leaves(d)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(c.sigmas), ref5.sigmas.numpy())


@pytest.mark.parametrize("n", (1, 2, 1000))
def test_unipc_log0_guard(n):
    """A grid starting at sigma = 1 is moved to 1 - 1e-6 (float64), as diffusers does."""
    sched = scheduler_from_config(_load(WAN_UNIPC[5.0]))
    state = sched.set_timesteps(n, sample_shape=(3,))
    assert float(state.sigmas[0]) == float(np.float32(1 - 1e-6)) and int(state.timesteps[0]) == 999
    for table in (state.predictor, state.corrector):
        on = np.asarray(table.enabled)
        for name in ("ratio", "alpha_h_phi_1", "alpha_b_h", "rk", "rho", "rho_t"):
            assert np.all(np.isfinite(np.asarray(getattr(table, name))[on])), name
    if n == 1:  # one first-order step to sigma = 0 lands on the data prediction x - sigma * v
        x = jnp.asarray([0.3, -1.2, 2.0], jnp.float32)
        v = jnp.asarray([0.5, 0.25, -1.0], jnp.float32)
        out, _ = jax.jit(sched.step)(state, v, x)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(x - state.sigmas[0] * v))


def test_unipc_step_past_end_is_nan():
    sched = scheduler_from_config(_load(WAN_UNIPC[3.0]))
    state = sched.set_timesteps(2, sample_shape=(4,))
    step = jax.jit(sched.step)
    x = jnp.ones(4)
    for _ in range(2):
        x, state = step(state, x * 0.1, x)
    assert np.all(np.isfinite(np.asarray(x)))
    y, _ = step(state, x, x)
    assert np.all(np.isnan(np.asarray(y)))


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="bitwise match is to MKL LAPACK")
def test_unipc_rho_solve_matches_torch():
    """The UniC-2 weights solve [[1, 1], [r, 1]] rho = b in float32 as torch.linalg.solve does.

    Not bit for bit: torch calls the BLAS/LAPACK of the machine, whose kernels (and their use of
    fused multiply-adds) differ between CPUs, and on an AVX2 AMD EPYC they land one ulp away from
    the same algorithm written out here. What an LU solve in float32 guarantees is a backward
    error of a few units of rounding, i.e. a forward error bounded by ``cond(a) * eps`` times a
    small constant; both solutions are held to that bound against the exact (float64) solution,
    and to each other. A wrong formula (e.g. a missing pivot or a swapped row) misses by orders of
    magnitude more.
    """
    from vidax.schedulers.unipc import _solve

    eps = float(np.finfo(np.float32).eps)
    rng = np.random.default_rng(0)
    for _ in range(300):
        r = np.float32(-rng.uniform(0.05, 5.0))
        a = np.array([[1, 1], [r, 1]], np.float32)
        b = rng.uniform(-1, 1, 2).astype(np.float32)
        exact = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
        ref = torch.linalg.solve(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        ours = _solve(a, b)
        bound = 4 * eps * np.linalg.cond(a.astype(np.float64)) * np.abs(exact).max()
        assert np.abs(ours - exact).max() <= bound, (a, b, ours, exact)
        assert np.abs(ref - exact).max() <= bound, (a, b, ref, exact)
        assert np.abs(ours - ref).max() <= 2 * bound, (a, b, ours, ref)


@pytest.mark.skipif(jax.device_count() < 2, reason="needs 2 (fake) devices")
def test_unipc_sharded_state_traces_once():
    """Latents sharded over batch: buffers follow the sharding, result equals the unsharded run."""
    mesh = jax.make_mesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:2])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    sched = scheduler_from_config(_load(WAN_UNIPC[3.0]))
    x0 = _x0(4)
    n = 6
    plain, *_ = _run_vidax(sched, sched.set_timesteps(n, sample_shape=_to_cl(x0).shape), x0)
    state = sched.set_timesteps(n, sample_shape=_to_cl(x0).shape, sharding=sharding)
    traces = []

    def step(state, v, x):
        traces.append(1)
        return sched.step(state, v, x)

    step = jax.jit(step)
    x = jax.device_put(_to_cl(x0), sharding)
    for i in range(n):
        v = jax.device_put(_pseudo_model(np.asarray(x), float(state.timesteps[i])), sharding)
        x, state = step(state, v, x)
        np.testing.assert_array_equal(_to_cf(x), plain[i])
    assert len(traces) == 1
    assert x.sharding.is_equivalent_to(sharding, x.ndim)


# ------------------------------------------------------------------------------------------------
# FlowMatchEuler (original Wan2.1 upload, HunyuanVideo, LTX-Video)


EULER_CONFIGS = {
    "shift3": _euler_config(shift=3.0),
    "shift5": _euler_config(shift=5.0),
    "hunyuan_shift7": "hunyuanvideo-community__HunyuanVideo",
}


def _euler(name: str) -> dict:
    config = EULER_CONFIGS[name]
    return _load(config) if isinstance(config, str) else config


@pytest.mark.parametrize("n", STEPS)
@pytest.mark.parametrize("name", sorted(EULER_CONFIGS))
def test_euler_trajectory(name, n):
    config = _euler(name)
    x0 = _x0(100 + n)
    ref_sched = _reference(config)
    ref = _run_reference(ref_sched, x0, num_inference_steps=n)
    sched = scheduler_from_config(config)
    assert isinstance(sched, FlowMatchEulerDiscreteScheduler)
    state = sched.set_timesteps(n)
    # Exact equality of the schedule (same numpy/float32 operations as diffusers).
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref_sched.timesteps.numpy())
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref_sched.sigmas.numpy())
    ours, traces, x, _ = _run_vidax(sched, state, x0)
    assert traces == 1 and x.dtype == jnp.float32
    _assert_trajectory(ours, ref, JIT_TOL)


def test_euler_ltx_dynamic_shifting_custom_sigmas():
    """LTX-Video: dynamic shifting (mu from the token count), shift_terminal, custom sigmas."""
    from diffusers.pipelines.ltx.pipeline_ltx import calculate_shift

    config = _load("Lightricks__LTX-Video")
    sched = scheduler_from_config(config)
    c = config
    mu = sched.calculate_shift(4 * 16 * 22)
    keys = ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")
    assert mu == calculate_shift(4 * 16 * 22, *(c[k] for k in keys))
    n = 30
    sigmas = np.linspace(1.0, 1 / n, n)  # as LTXPipeline passes them
    x0 = _x0(7)
    ref_sched = _reference(config)
    ref = _run_reference(ref_sched, x0, num_inference_steps=n, sigmas=sigmas, mu=mu)
    state = sched.set_timesteps(n, sigmas=sigmas, mu=mu)
    np.testing.assert_array_equal(np.asarray(state.timesteps), ref_sched.timesteps.numpy())
    np.testing.assert_array_equal(np.asarray(state.sigmas), ref_sched.sigmas.numpy())
    ours, traces, *_ = _run_vidax(sched, state, x0)
    assert traces == 1
    _assert_trajectory(ours, ref, JIT_TOL)
    # Default grid with mu, too.
    ref_sched.set_timesteps(n, mu=mu)
    ours = sched.set_timesteps(n, mu=mu)
    np.testing.assert_array_equal(np.asarray(ours.sigmas), ref_sched.sigmas.numpy())


def test_euler_shift_override_and_pure():
    config = _euler_config(shift=3.0)
    sched = scheduler_from_config(config)
    a, b = sched.set_timesteps(50), sched.set_timesteps(50)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # set_timesteps(shift=s) == diffusers' set_shift(s) + set_timesteps (the grid's end keeps
    # the config's shift, as in diffusers).
    ref = _reference(config)
    ref.set_shift(5.0)
    ref.set_timesteps(50)
    c = sched.set_timesteps(50, shift=5.0)
    np.testing.assert_array_equal(np.asarray(c.sigmas), ref.sigmas.numpy())
    np.testing.assert_array_equal(np.asarray(c.timesteps), ref.timesteps.numpy())
    # The shift is applied once: sigmas[0] stays exactly 1 and the interior follows shift(s) once.
    assert float(a.sigmas[0]) == 1.0 and float(a.sigmas[-1]) == 0.0
    s = np.asarray(a.sigmas[:-1], np.float64)
    unshifted = s / (3.0 - 2.0 * s)  # inverse of 3 s / (1 + 2 s)
    np.testing.assert_allclose(np.diff(unshifted), np.diff(unshifted)[0], rtol=1e-4)


def test_euler_bf16():
    """bf16 latents and model output (diffusers returns model_output.dtype).

    torch rounds ``dt`` and ``dt * v`` to bf16 (0-dim float32 times bf16 stays bf16), vidax
    computes in float32; both round the new sample to bf16 each step, so the two trajectories
    drift apart by a few bf16 ulps (one ulp is up to 2^-7 of the largest entry): tolerance 2e-2
    (measured 1.3e-2)."""
    config = _euler_config(shift=5.0)
    n = 20
    x0 = _x0(9)
    x0 = torch.from_numpy(x0).to(torch.bfloat16).float().numpy()
    ref_sched = _reference(config)
    ref_sched.set_timesteps(n)
    x = torch.from_numpy(x0).to(torch.bfloat16)
    ref = []
    for t in ref_sched.timesteps:
        v = torch.from_numpy(_pseudo_model(x.float().numpy(), float(t))).to(torch.bfloat16)
        x = ref_sched.step(v, t, x, return_dict=False)[0]
        assert x.dtype == torch.bfloat16
        ref.append(x.float().numpy())
    sched = scheduler_from_config(config)
    ours, traces, x, _ = _run_vidax(sched, sched.set_timesteps(n), x0, mo_dtype=jnp.bfloat16, sample_dtype=jnp.bfloat16)
    assert traces == 1 and x.dtype == jnp.bfloat16
    _assert_trajectory(ours, ref, 2e-2)


def test_euler_step_past_end_is_nan():
    sched = scheduler_from_config(_euler_config(shift=3.0))
    state = sched.set_timesteps(1)
    x, state = sched.step(state, jnp.ones(3), jnp.ones(3))
    assert np.all(np.isfinite(np.asarray(x)))
    y, _ = sched.step(state, jnp.ones(3), x)
    assert np.all(np.isnan(np.asarray(y)))


# ------------------------------------------------------------------------------------------------
# Configs and errors


def test_registry_and_reference_configs():
    assert {s.class_name for s in registry().components("scheduler")} == {
        "UniPCMultistepScheduler",
        "FlowMatchEulerDiscreteScheduler",
        "CogVideoXDDIMScheduler",
        "CogVideoXDPMScheduler",
    }
    seen = {}
    for path in sorted(glob.glob(os.path.join(REF_DIR, "*", "scheduler", "scheduler_config.json"))):
        repo = path.split(os.sep)[-3]
        with open(path) as f:
            config = json.load(f)
        name = config["_class_name"]
        if config.get("fixed_step_requires_explicit_sigmas"):  # Cosmos3 distilled: not implemented
            # (fixed_step_requires_explicit_sigmas is no key of diffusers 0.42.1's scheduler, which
            # ignores it, as vidax; the stochastic sampling beside it is refused)
            with pytest.raises(ConfigError, match="stochastic_sampling=True is not implemented"):
                scheduler_from_config(config, source=path)
        else:
            sched = scheduler_from_config(config, source=path)
            assert type(sched).__name__ == name
            kw = {"mu": 1.0} if config.get("use_dynamic_shifting") else {}
            state = sched.set_timesteps(4, sample_shape=(1,), **kw)
            assert state.num_inference_steps == 4 and state.timestep.dtype == jnp.float32
        seen[repo] = name
    assert sum(n == "UniPCMultistepScheduler" for n in seen.values()) >= 7  # every Wan repo
    # Every key of the real configs is a field, IGNORED or NEUTRAL (nothing unknown).
    for repo in WAN_UNIPC.values():
        assert UniPCMultistepScheduler.from_config(_load(repo)).config.flow_shift in (3.0, 5.0)


UNIPC_REFUSED = [
    ("thresholding", True),
    ("use_karras_sigmas", "yes"),
    ("sigma_min", -1.0),
    ("use_exponential_sigmas", True),
    ("use_beta_sigmas", True),
    ("prediction_type", "epsilon"),
    ("prediction_type", "v_prediction"),
    ("use_flow_sigmas", False),
    ("predict_x0", False),
    ("solver_p", "DPMSolverMultistepScheduler"),
    ("solver_type", "bh3"),
    ("final_sigmas_type", "sigma_max"),
    ("time_shift_type", "cubic"),
    ("timestep_spacing", "karras"),
    ("flow_shift", 0.0),
    ("solver_order", 0),
]


@pytest.mark.parametrize("key,value", UNIPC_REFUSED)
def test_unipc_config_refused(key, value):
    config = {**_load(WAN_UNIPC[3.0]), key: value}
    with pytest.raises(ConfigError) as e:
        scheduler_from_config(config)
    assert key in str(e.value) and repr(value) in str(e.value)


def test_unipc_config_refused_combinations():
    base = _load(WAN_UNIPC[3.0])
    with pytest.raises(ConfigError, match="solver_type='bh1' with final_sigmas_type='zero'"):
        scheduler_from_config({**base, "solver_type": "bh1"})
    with pytest.raises(ConfigError, match="lower_order_final=false"):
        scheduler_from_config({**base, "lower_order_final": False})
    # Missing keys take diffusers' defaults (epsilon, no flow sigmas), which vidax refuses.
    with pytest.raises(ConfigError, match="use_flow_sigmas=False"):
        scheduler_from_config({"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction"})
    with pytest.raises(ConfigError, match="_class_name=None"):
        scheduler_from_config({"flow_shift": 3.0})


EULER_REFUSED = [
    ("invert_sigmas", True),
    ("stochastic_sampling", True),
    ("use_karras_sigmas", True),
    ("use_exponential_sigmas", True),
    ("use_beta_sigmas", True),
    ("time_shift_type", "cubic"),
    ("shift", -1.0),
]


@pytest.mark.parametrize("key,value", EULER_REFUSED)
def test_euler_config_refused(key, value):
    with pytest.raises(ConfigError) as e:
        scheduler_from_config(_euler_config(**{key: value}))
    assert key in str(e.value) and repr(value) in str(e.value)


def test_key_diffusers_ignores_is_ignored():
    """A scheduler config key diffusers' class does not take (a newer diffusers' key) is ignored,
    as diffusers' ``from_config`` ignores it: the same schedule as without it."""
    import diffusers

    for config in (_load(WAN_UNIPC[3.0]), _euler_config(shift=3.0)):
        with_key = {**config, "some_new_key": 1}
        ref, ref_without = (getattr(diffusers, config["_class_name"]).from_config(c) for c in (with_key, config))
        ref.set_timesteps(4)
        ref_without.set_timesteps(4)
        np.testing.assert_array_equal(ref.sigmas.numpy(), ref_without.sigmas.numpy())  # unused there
        assert scheduler_from_config(with_key).config == scheduler_from_config(config).config


def test_input_errors():
    unipc = scheduler_from_config(_load(WAN_UNIPC[3.0]))
    euler = scheduler_from_config(_euler_config(shift=3.0))
    for bad in (0, -1, 2.5, True, None, "10"):
        with pytest.raises(InputError, match="num_inference_steps"):
            unipc.set_timesteps(bad, sample_shape=(2,))
        with pytest.raises(InputError, match="num_inference_steps"):
            euler.set_timesteps(bad)
    with pytest.raises(InputError, match="sample_shape=None"):
        unipc.set_timesteps(10)
    with pytest.raises(InputError, match="sample_shape"):
        unipc.set_timesteps(10, sample_shape=(2, 0))
    with pytest.raises(InputError, match="flow_shift"):
        unipc.set_timesteps(10, sample_shape=(2,), flow_shift=0)
    with pytest.raises(InputError, match="shift"):
        euler.set_timesteps(10, shift=-2.0)
    with pytest.raises(InputError, match="len\\(sigmas\\)"):
        euler.set_timesteps(10, sigmas=[1.0, 0.5])
    with pytest.raises(InputError, match="sigmas"):
        euler.set_timesteps(None, sigmas=[])
    dyn = scheduler_from_config({**_load(WAN_UNIPC[3.0]), "use_dynamic_shifting": True})
    with pytest.raises(InputError, match="mu=None"):
        dyn.set_timesteps(10, sample_shape=(2,))
    with pytest.raises(InputError, match="mu=None"):
        scheduler_from_config(_load("Lightricks__LTX-Video")).set_timesteps(10)
    state = unipc.set_timesteps(4, sample_shape=(2, 3))
    with pytest.raises(InputError, match="same shape"):
        unipc.step(state, jnp.zeros((2, 3)), jnp.zeros((3, 2)))
    with pytest.raises(InputError, match="sample_shape"):
        unipc.step(state, jnp.zeros((3, 2)), jnp.zeros((3, 2)))
    with pytest.raises(InputError, match="floating"):
        euler.step(euler.set_timesteps(2), jnp.zeros(3, jnp.int32), jnp.zeros(3))


def test_state_is_frozen_pytree():
    sched = scheduler_from_config(_load(WAN_UNIPC[3.0]))
    state = sched.set_timesteps(5, sample_shape=(2,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.step_index = 3
    leaves, treedef = jax.tree.flatten(state)
    assert all(isinstance(x, jax.Array) for x in leaves)
    again = jax.tree.unflatten(treedef, leaves)
    assert type(again) is type(state) and int(again.timestep) == 999
