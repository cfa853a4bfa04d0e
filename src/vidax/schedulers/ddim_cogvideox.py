"""CogVideoX's DDIM sampler, following diffusers' ``CogVideoXDDIMScheduler``.

The noise schedule (shared with :mod:`vidax.schedulers.dpm_cogvideox`): betas from
``beta_schedule``; ``alphas_cumprod = cumprod(1 - betas)``, SNR-shifted as
``a / (s + (1 - s) a)`` with ``s = snr_shift_scale``, optionally rescaled to zero terminal SNR
(``rescale_betas_zero_snr``, so ``alphas_cumprod[-1] == 0``). Timesteps are integers from
``timestep_spacing`` (``trailing`` for the released checkpoints: ``round(arange(N, 0, -N/n)) - 1``).

One step at timestep ``t`` (the step index ``i``): ``prev_t = t - N // n`` (the reference's
formula, not the next timestep of the grid), ``a_t = alphas_cumprod[t]``,
``a_prev = alphas_cumprod[prev_t]`` or ``final_alpha_cumprod`` when ``prev_t < 0``;
``x0`` from the model output by ``prediction_type`` (``v_prediction``: ``√a_t x - √(1-a_t) v``);
``x_prev = √((1-a_prev)/(1-a_t)) x + (√a_prev - √a_t √((1-a_prev)/(1-a_t))) x0`` (eta = 0).

Every scalar depends only on the schedule, so :meth:`CogVideoXDDIMScheduler.set_timesteps`
computes the per-step coefficients on the host with the reference's dtypes (float64 for the
``scaled_linear`` schedule, float32 otherwise) and rounds them to float32, as torch does when it
multiplies a float32 tensor by a 0-d float64 tensor; ``step`` is a pure function of the state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, ConfigError, InputError
from vidax.schedulers import base
from vidax.schedulers.base import SchedulerBase, SchedulerConfig, StepIndexed

_BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")
_PREDICTION_TYPES = ("epsilon", "sample", "v_prediction")
_SPACINGS = ("linspace", "leading", "trailing")


@dataclasses.dataclass(frozen=True)
class CogVideoXSchedulerConfig(SchedulerConfig):
    """Settings of diffusers' ``CogVideoXDDIMScheduler`` / ``CogVideoXDPMScheduler`` (same keys and
    defaults). All are implemented; ``clip_sample``, ``clip_sample_range`` and
    ``sample_max_value`` are stored by the reference but never read by its ``step`` (no clipping
    or thresholding happens), so any value is accepted.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset({"clip_sample", "clip_sample_range", "sample_max_value"})

    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    trained_betas: tuple[float, ...] | None = None
    set_alpha_to_one: bool = True
    steps_offset: int = 0
    prediction_type: str = "epsilon"
    timestep_spacing: str = "leading"
    rescale_betas_zero_snr: bool = False
    snr_shift_scale: float = 3.0

    def validate(self, source: str) -> None:
        def bad(key, want):
            raise ConfigError(f"{source}: {key}={getattr(self, key)!r} is not valid; {want}.")

        if not base.is_int_at_least(self.num_train_timesteps, 1):
            bad("num_train_timesteps", "it must be an int >= 1")
        for key in ("beta_start", "beta_end", "snr_shift_scale"):
            if not base.is_number(getattr(self, key)):
                bad(key, "it must be a number")
        if self.beta_schedule not in _BETA_SCHEDULES:
            bad("beta_schedule", f"valid: {list(_BETA_SCHEDULES)}")
        if self.prediction_type not in _PREDICTION_TYPES:
            bad("prediction_type", f"valid: {list(_PREDICTION_TYPES)}")
        if self.timestep_spacing not in _SPACINGS:
            bad("timestep_spacing", f"valid: {list(_SPACINGS)}")
        if not base.is_int_at_least(self.steps_offset, 0):
            bad("steps_offset", "it must be an int >= 0")
        for key in ("set_alpha_to_one", "rescale_betas_zero_snr"):
            if not isinstance(getattr(self, key), bool):
                bad(key, "it must be true or false")
        tb = self.trained_betas
        if tb is not None and (
            not isinstance(tb, tuple) or len(tb) != self.num_train_timesteps or not all(base.is_number(b) for b in tb)
        ):
            bad("trained_betas", f"it must be null or {self.num_train_timesteps} numbers")


def _betas_for_alpha_bar(n: int, max_beta: float = 0.999) -> np.ndarray:
    """diffusers ``betas_for_alpha_bar`` (cosine), Python floats -> float32."""

    def alpha_bar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    return np.array([min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), max_beta) for i in range(n)], np.float32)


def alphas_cumprod(config: CogVideoXSchedulerConfig) -> tuple[np.ndarray, Any]:
    """The reference's ``alphas_cumprod`` (float64 for ``scaled_linear``, else float32) and its
    ``final_alpha_cumprod`` (a float32 1.0, or ``alphas_cumprod[0]``)."""
    c = config
    n = c.num_train_timesteps
    if c.trained_betas is not None:
        betas = np.asarray(c.trained_betas, np.float32)
    elif c.beta_schedule == "linear":
        betas = np.linspace(c.beta_start, c.beta_end, n, dtype=np.float64).astype(np.float32)
    elif c.beta_schedule == "scaled_linear":
        betas = np.linspace(c.beta_start**0.5, c.beta_end**0.5, n, dtype=np.float64) ** 2
    else:
        betas = _betas_for_alpha_bar(n)
    dt = betas.dtype
    alphas = (1.0 - betas).astype(dt)
    # torch's cumprod accumulates float32 in float64 and rounds each product.
    ac = np.cumprod(alphas.astype(np.float64)).astype(dt)
    # Python-float scalars, rounded to the array dtype where they meet it (as torch does).
    ac = (ac / (dt.type(c.snr_shift_scale) + dt.type(1 - c.snr_shift_scale) * ac)).astype(dt)
    if c.rescale_betas_zero_snr:
        sq = np.sqrt(ac)
        sq0, sqt = sq[0].copy(), sq[-1].copy()
        sq = sq - sqt
        sq = sq * (sq0 / (sq0 - sqt))
        ac = (sq**2).astype(dt)
    final = np.float32(1.0) if c.set_alpha_to_one else ac[0]
    return ac, final


def schedule_timesteps(config: CogVideoXSchedulerConfig, n: int) -> np.ndarray:
    """``set_timesteps(n)``'s int64 timesteps (descending), with the reference's numpy operations.

    Raises:
        InputError: ``n`` exceeds ``num_train_timesteps``, or the reference's grid for ``n`` is
            broken (``trailing`` spacing gives ``n + 1`` entries ending at -1 for some ``n``, e.g.
            61, through float rounding of ``arange``; ``leading`` with ``steps_offset`` can pass
            the last training timestep).
    """
    c = config
    num_train = c.num_train_timesteps
    if n > num_train:
        raise InputError(
            Arg("num_inference_steps", n), f" cannot exceed the scheduler's num_train_timesteps={num_train}."
        )
    if c.timestep_spacing == "linspace":
        ts = np.linspace(0, num_train - 1, n).round()[::-1].copy().astype(np.int64)
    elif c.timestep_spacing == "leading":
        ratio = num_train // n
        ts = (np.arange(0, n) * ratio).round()[::-1].copy().astype(np.int64)
        ts += c.steps_offset
    else:
        ratio = num_train / n
        ts = np.round(np.arange(num_train, 0, -ratio)).astype(np.int64)
        ts -= 1
    if ts.min() < 0 or ts.max() >= num_train or len(ts) != n:
        raise InputError(
            Arg("num_inference_steps", n),
            f": the reference's {c.timestep_spacing!r} grid for this count is "
            f"{ts.tolist()[:3]}...{ts.tolist()[-3:]} ({len(ts)} entries), which indexes outside the "
            f"training schedule [0, {num_train}); the reference silently runs a wrong schedule. "
            "Pick a neighbouring step count.",
        )
    return ts


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The host-side schedule of ``n`` steps (reference dtypes, see :func:`alphas_cumprod`).

    Attributes:
        alphas_cumprod: (N,) the training schedule.
        timesteps: (n,) int64, descending.
        alpha: per step ``alphas_cumprod[t]`` (0-d values).
        alpha_prev: per step ``alphas_cumprod[t - N // n]``, or ``final_alpha_cumprod`` when that
            index is negative (0-d values).
        prev_timesteps: (n,) ``t - N // n``.
        sqrt_alpha, sqrt_beta: (n,) float32 ``√a_t`` and ``√(1 - a_t)`` (the x0 factors).
    """

    alphas_cumprod: np.ndarray
    timesteps: np.ndarray
    alpha: list
    alpha_prev: list
    prev_timesteps: np.ndarray
    sqrt_alpha: np.ndarray
    sqrt_beta: np.ndarray

    @classmethod
    def build(cls, config: CogVideoXSchedulerConfig, n: int) -> Schedule:
        ac, final = alphas_cumprod(config)
        ts = schedule_timesteps(config, n)
        prev = ts - config.num_train_timesteps // n
        a = ac[ts]
        return cls(
            alphas_cumprod=ac,
            timesteps=ts,
            alpha=list(a),
            alpha_prev=[ac[p] if p >= 0 else final for p in prev],
            prev_timesteps=prev,
            sqrt_alpha=np.sqrt(a).astype(np.float32),
            sqrt_beta=np.sqrt(1 - a).astype(np.float32),
        )


def pred_original_sample(prediction_type: str, sa, sb, sample: jax.Array, model_output: jax.Array) -> jax.Array:
    """x0 from the model output (float32), in the reference's operation order."""
    if prediction_type == "v_prediction":
        return sa * sample - sb * model_output
    if prediction_type == "epsilon":
        return (sample - sb * model_output) / sa
    return model_output


@base.register_state
@dataclasses.dataclass(frozen=True)
class CogVideoXDDIMState(StepIndexed):
    """Schedule and position of a CogVideoX DDIM run (a JAX pytree of arrays).

    Attributes:
        timesteps: (n,) int32, the model inputs (diffusers' ``scheduler.timesteps``).
        sqrt_alpha, sqrt_beta: (n,) float32, ``√a_t`` and ``√(1 - a_t)``.
        coef_sample, coef_x0: (n,) float32, the DDIM update ``x_prev = coef_sample x + coef_x0 x0``.
        step_index: () int32.
    """

    timesteps: jax.Array
    sqrt_alpha: jax.Array
    sqrt_beta: jax.Array
    coef_sample: jax.Array
    coef_x0: jax.Array
    step_index: jax.Array


@dataclasses.dataclass(frozen=True)
class CogVideoXSchedulerBase(SchedulerBase):
    """What the two CogVideoX samplers share: the config (and :class:`SchedulerBase`)."""

    config: CogVideoXSchedulerConfig
    config_class: ClassVar[type] = CogVideoXSchedulerConfig


@dataclasses.dataclass(frozen=True)
class CogVideoXDDIMScheduler(CogVideoXSchedulerBase):
    """DDIM (eta = 0) with the CogVideoX SNR shift; follows diffusers' ``CogVideoXDDIMScheduler``.

    Use::

        sched = CogVideoXDDIMScheduler.from_config(json.load(f))
        state = sched.set_timesteps(50)
        for i in range(state.num_inference_steps):
            v = model(x, state.timesteps[i])
            x, state = sched.step(state, v, x)
    """

    def set_timesteps(
        self,
        num_inference_steps: int,
        *,
        sample_shape: Sequence[int] | None = None,
        sharding: jax.sharding.Sharding | None = None,
    ) -> CogVideoXDDIMState:
        """Compute the schedule and per-step coefficients on the host; return the initial state.

        Args:
            num_inference_steps: n, an int in ``[1, num_train_timesteps]``.
            sample_shape: accepted for interface parity; unused.
            sharding: if given, the state's arrays are placed replicated on its devices.

        Raises:
            InputError: bad ``num_inference_steps`` (see :func:`schedule_timesteps`).
        """
        n = base.check_num_inference_steps(num_inference_steps)
        if sample_shape is not None:
            base.check_sample_shape(sample_shape)
        sch = Schedule.build(self.config, n)
        coef_sample, coef_x0 = [], []
        for a_t, a_prev in zip(sch.alpha, sch.alpha_prev):
            # 0-d arithmetic with numpy's promotion (= torch's for 0-d tensors).
            a_coef = ((1 - a_prev) / (1 - a_t)) ** 0.5
            b_coef = a_prev**0.5 - a_t**0.5 * a_coef
            coef_sample.append(np.float32(a_coef))
            coef_x0.append(np.float32(b_coef))
        state = CogVideoXDDIMState(
            timesteps=jnp.asarray(sch.timesteps.astype(np.int32)),
            sqrt_alpha=jnp.asarray(sch.sqrt_alpha),
            sqrt_beta=jnp.asarray(sch.sqrt_beta),
            coef_sample=jnp.asarray(np.array(coef_sample, np.float32)),
            coef_x0=jnp.asarray(np.array(coef_x0, np.float32)),
            step_index=jnp.zeros((), jnp.int32),
        )
        if sharding is not None:
            state = jax.device_put(state, base.replicated_sharding(sharding))
        return state

    def step(
        self, state: CogVideoXDDIMState, model_output: jax.Array, sample: jax.Array
    ) -> tuple[jax.Array, CogVideoXDDIMState]:
        """One DDIM step at ``state.timesteps[step_index]``; pure and jittable.

        Args:
            state: from :meth:`set_timesteps` or the previous ``step``.
            model_output: (...) the model's prediction (``prediction_type``) at that timestep.
            sample: (...) the current latents, same shape; any layout (elementwise).

        Returns:
            ``(prev_sample, new_state)``; ``prev_sample`` float32 (NaN past the last step).

        Raises:
            InputError: shapes differ or a dtype is not floating (at trace time).
        """
        base.check_step_inputs(model_output, sample)
        i = state.step_index
        j = jnp.minimum(i, state.num_inference_steps - 1)
        x = sample.astype(jnp.float32)
        m = model_output.astype(jnp.float32)
        x0 = pred_original_sample(self.config.prediction_type, state.sqrt_alpha[j], state.sqrt_beta[j], x, m)
        prev = state.coef_sample[j] * x + state.coef_x0[j] * x0
        prev = jnp.where(i < state.num_inference_steps, prev, jnp.nan)
        return prev, dataclasses.replace(state, step_index=i + 1)
