"""UniPC multistep sampler with flow sigmas, following diffusers' ``UniPCMultistepScheduler``.

This is the sampler Wan ships (``prediction_type="flow_prediction"``, ``use_flow_sigmas=true``,
``flow_shift`` 3.0 or 5.0, ``solver_type="bh2"``, ``solver_order=2``, ``lower_order_final=true``,
``predict_x0=true``, ``final_sigmas_type="zero"``) and the one Cosmos-Predict2.5 ships, which adds
``use_karras_sigmas=true`` with ``sigma_max=200``, ``sigma_min=0.01``: Karras sigmas
``s_i = (s_max^(1/7) + i/(N-1) (s_min^(1/7) - s_max^(1/7)))^7`` mapped to flow sigmas
``s / (s + 1)`` (diffusers' ``set_timesteps`` Karras branch with ``use_flow_sigmas``; ``flow_shift``,
dynamic shifting and ``shift_terminal`` have no effect there, in diffusers and here). Public names mirror diffusers: ``timesteps``
(model input, integers on the 0..``num_train_timesteps`` scale), ``sigmas`` (noise level in
[0, 1], one more entry than ``timesteps``), ``num_inference_steps``, ``flow_shift``, ``mu``.

Each step converts the velocity prediction to a data prediction ``m = x - sigma * v``, corrects
the incoming sample with UniC (using ``m`` and the previous step's history), then predicts the
next sample with UniP. Every scalar the update needs (step order, ``sigma_t / sigma_s0``,
``alpha_t * h * phi_1(h)``, ``alpha_t * B(h)``, the ratios ``r_k`` and the weights ``rho``) depends
only on the schedule, so :meth:`UniPCMultistepScheduler.set_timesteps` computes them on the host,
in float32 with the same operations as diffusers' torch code, and stores them as per-step tables
in the state; the jitted ``step`` only indexes them with the traced step index.

The ``log(0)`` trap: a flow grid that starts at exactly ``sigma = 1`` has ``alpha = 0`` and
``lambda = log(alpha) - log(sigma) = -inf``. diffusers moves the first sigma to ``1 - 1e-6`` (in
float64, before rounding to float32); vidax does exactly the same. The final ``sigma = 0`` gives
``lambda = +inf`` in the last predictor step, where with ``lower_order_final`` and ``bh2`` the
formulas reduce to ``x_next = m`` (as in diffusers); the two configurations for which diffusers
produces NaN/inf there (``bh1`` or ``lower_order_final=false`` with ``final_sigmas_type="zero"``)
are refused.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, ConfigError, InputError
from vidax.schedulers import base
from vidax.schedulers.base import SchedulerBase, SchedulerConfig, StepIndexed

_SOLVER_TYPE_ALIASES = ("midpoint", "heun", "logrho")  # diffusers rewrites these to "bh2"


@dataclasses.dataclass(frozen=True)
class UniPCMultistepSchedulerConfig(SchedulerConfig):
    """Settings of diffusers' ``UniPCMultistepScheduler`` that vidax implements.

    Field names and defaults are diffusers' (so a config that omits ``prediction_type`` or
    ``use_flow_sigmas`` gets diffusers' ``"epsilon"`` / ``false`` and is refused). Only the flow
    parametrisation is implemented: ``use_flow_sigmas`` must be true and ``prediction_type``
    ``"flow_prediction"``. With flow sigmas the variance-preserving settings (``beta_*``,
    ``trained_betas``, ``rescale_betas_zero_snr``, ``timestep_spacing``, ``steps_offset``) have no
    effect in diffusers either. ``use_karras_sigmas`` is implemented with both ``sigma_min`` and
    ``sigma_max`` given (diffusers otherwise takes them from the beta schedule: refused);
    ``sigma_min``/``sigma_max`` are read only then. Exponential/beta sigmas, ``thresholding``,
    ``solver_p`` and ``predict_x0=false`` are refused.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {
            "beta_start",
            "beta_end",
            "trained_betas",
            "rescale_betas_zero_snr",
            "steps_offset",
            "dynamic_thresholding_ratio",  # only used with thresholding (refused)
            "sample_max_value",  # only used with thresholding (refused)
        }
    )
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "thresholding": (False,),
        "predict_x0": (True,),
        "solver_p": (None,),
        "use_exponential_sigmas": (False,),
        "use_beta_sigmas": (False,),
        # Overwritten by the flow-sigma branch of diffusers' set_timesteps: valid values agree.
        "timestep_spacing": ("linspace", "leading", "trailing"),
        "beta_schedule": ("linear", "scaled_linear", "squaredcos_cap_v2"),
    }

    num_train_timesteps: int = 1000
    solver_order: int = 2
    prediction_type: str = "epsilon"
    solver_type: str = "bh2"
    lower_order_final: bool = True
    disable_corrector: tuple[int, ...] = ()
    use_flow_sigmas: bool = False
    flow_shift: float = 1.0
    final_sigmas_type: str = "zero"
    use_dynamic_shifting: bool = False
    time_shift_type: str = "exponential"
    shift_terminal: float | None = None
    use_karras_sigmas: bool = False
    sigma_min: float | None = None
    sigma_max: float | None = None

    def validate(self, source: str) -> None:
        def bad(key: str, valid: str) -> ConfigError:
            return ConfigError(f"{source}: {key}={getattr(self, key)!r} is not supported; {valid}.")

        if not self.use_flow_sigmas:
            raise bad("use_flow_sigmas", "vidax implements UniPC with flow sigmas only (true)")
        if self.prediction_type != "flow_prediction":
            raise bad("prediction_type", "vidax implements 'flow_prediction' only")
        if not isinstance(self.use_karras_sigmas, bool):
            raise bad("use_karras_sigmas", "it must be true or false")
        for key in ("sigma_min", "sigma_max"):
            value = getattr(self, key)
            if value is not None and not (base.is_number(value) and value > 0):
                raise bad(key, "it must be null or a number > 0")
        if self.use_karras_sigmas:
            if self.sigma_min is None or self.sigma_max is None:
                raise ConfigError(
                    f"{source}: use_karras_sigmas=True with sigma_min={self.sigma_min!r}, "
                    f"sigma_max={self.sigma_max!r} is not supported: vidax builds Karras sigmas from "
                    "both given values (diffusers otherwise derives them from the beta schedule)."
                )
            if not self.sigma_max > self.sigma_min:
                raise bad("sigma_max", f"it must be greater than sigma_min={self.sigma_min!r}")
        if not base.is_int_at_least(self.num_train_timesteps, 1):
            raise bad("num_train_timesteps", "it must be an int >= 1")
        if not base.is_int_at_least(self.solver_order, 1):
            raise bad("solver_order", "it must be an int >= 1")
        if self.solver_type not in ("bh1", "bh2") + _SOLVER_TYPE_ALIASES:
            raise bad("solver_type", "valid: 'bh1', 'bh2' (and 'midpoint'/'heun'/'logrho', read as 'bh2')")
        if not (base.is_number(self.flow_shift) and self.flow_shift > 0):
            raise bad("flow_shift", "it must be a number > 0")
        if self.final_sigmas_type not in ("zero", "sigma_min"):
            raise bad("final_sigmas_type", "valid: 'zero', 'sigma_min'")
        if self.time_shift_type not in ("exponential", "linear"):
            raise bad("time_shift_type", "valid: 'exponential', 'linear'")
        steps = self.disable_corrector
        if not isinstance(steps, tuple) or not all(isinstance(i, int) and not isinstance(i, bool) for i in steps):
            raise bad("disable_corrector", "it must be a list of step indices (ints)")
        if self.shift_terminal is not None and not (base.is_number(self.shift_terminal) and self.shift_terminal != 1):
            raise bad("shift_terminal", "it must be null or a number != 1")
        if self.final_sigmas_type == "zero" and self.solver_type == "bh1":
            raise ConfigError(
                f"{source}: solver_type='bh1' with final_sigmas_type='zero' is not supported: "
                "B(h) = h is infinite in the last step and diffusers returns NaN there. "
                "Use solver_type='bh2' or final_sigmas_type='sigma_min'."
            )
        zero_final = self.final_sigmas_type == "zero"
        if zero_final and not self.lower_order_final and self.solver_order > 1:
            raise ConfigError(
                f"{source}: lower_order_final=false with final_sigmas_type='zero' and "
                f"solver_order={self.solver_order} is not supported: the last multistep update "
                "divides by r_k = 0 and diffusers returns inf/NaN there. "
                "Use lower_order_final=true."
            )

    @property
    def bh1(self) -> bool:
        """True for B(h) = h ("bh1"); False for B(h) = e^h - 1 ("bh2" and its diffusers aliases)."""
        return self.solver_type == "bh1"


@base.register_state
@dataclasses.dataclass(frozen=True)
class UniPCCoefficients:
    """Per-step scalars of one UniP (predictor) or UniC (corrector) update; row i is step i.

    With K = ``solver_order - 1``, ``m0`` the newest data prediction and ``m_k`` older ones:
    ``x_next = ratio * x - alpha_h_phi_1 * m0 - alpha_b_h * res`` where
    ``res = sum_k rho[k] * (m_k - m0) / rk[k]`` (+ ``rho_t * (m_t - m0)`` for the corrector).

    Attributes:
        order: (N,) int32, the UniPC order p used at this step (unused slots: rk 1, rho 0).
        enabled: (N,) bool, whether the update runs (the corrector is off at step 0 and at the
            steps after those listed in ``disable_corrector``).
        ratio: (N,) float32, ``sigma_t / sigma_s0``.
        alpha_h_phi_1: (N,) float32, ``alpha_t * (e^{-h} - 1)``.
        alpha_b_h: (N,) float32, ``alpha_t * B(-h)``.
        rk: (N, K) float32, ``(lambda_{s_k} - lambda_{s0}) / h``.
        rho: (N, K) float32, weights of the history differences.
        rho_t: (N,) float32, corrector weight of ``m_t - m0`` (0 for the predictor).
    """

    order: jax.Array
    enabled: jax.Array
    ratio: jax.Array
    alpha_h_phi_1: jax.Array
    alpha_b_h: jax.Array
    rk: jax.Array
    rho: jax.Array
    rho_t: jax.Array


@base.register_state
@dataclasses.dataclass(frozen=True)
class UniPCState(StepIndexed):
    """Schedule, precomputed coefficients and multistep history of one UniPC run (a JAX pytree).

    Attributes:
        timesteps: (N,) int32, the model inputs (diffusers' int64 ``scheduler.timesteps``, same
            values). Feed the model ``timesteps[i]``, never a sigma.
        sigmas: (N + 1,) float32, diffusers' ``scheduler.sigmas``.
        predictor: UniP coefficients, row i used by step i.
        corrector: UniC coefficients, row i used at the start of step i.
        model_outputs: tuple of ``solver_order`` arrays (*S) float32, the converted data
            predictions of the last steps, oldest first (diffusers' ``model_outputs``).
        last_sample: (*S) float32, the sample the previous predictor started from.
        step_index: () int32, how many steps have been taken.
    """

    timesteps: jax.Array
    sigmas: jax.Array
    predictor: UniPCCoefficients
    corrector: UniPCCoefficients
    model_outputs: tuple[jax.Array, ...]
    last_sample: jax.Array
    step_index: jax.Array


@dataclasses.dataclass(frozen=True)
class UniPCMultistepScheduler(SchedulerBase):
    """UniPC multistep sampler (flow sigmas); follows diffusers' ``UniPCMultistepScheduler``.

    Use::

        sched = UniPCMultistepScheduler.from_config(json.load(f))   # Wan's scheduler_config.json
        state = sched.set_timesteps(50, sample_shape=latents.shape)
        step = jax.jit(sched.step)                                  # traced once for all steps
        for i in range(state.num_inference_steps):
            v = model(x, state.timesteps[i])
            x, state = step(state, v, x)

    ``flow_shift`` comes from the config (Wan: 3.0, or 5.0 for TI2V-5B) and is applied exactly once
    in :meth:`set_timesteps`; a different value can be passed there instead of editing the config
    (diffusers: ``UniPCMultistepScheduler.from_config(config, flow_shift=...)``).
    """

    config: UniPCMultistepSchedulerConfig
    config_class: ClassVar[type] = UniPCMultistepSchedulerConfig

    def flow_sigmas(
        self,
        num_inference_steps: int,
        *,
        flow_shift: float | None = None,
        mu: float | None = None,
        base_sigmas: Sequence[float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Host schedule: ``(timesteps (N,) int64, sigmas (N+1,) float32)``, equal to diffusers'.

        See :meth:`set_timesteps` for the arguments and errors.
        """
        c = self.config
        n = base.check_num_inference_steps(num_inference_steps)
        mu = base.check_mu(mu, c.use_dynamic_shifting)
        if base_sigmas is not None:
            base_sigmas = np.asarray(base_sigmas, np.float64)
            if base_sigmas.shape != (n,):
                raise InputError(
                    f"base_sigmas has shape {base_sigmas.shape}; expected ({n},) for num_inference_steps={n}"
                )
        given_shift = flow_shift is not None
        flow_shift = base.shift_override("flow_shift", flow_shift, c.flow_shift, c.use_dynamic_shifting)

        num_train = c.num_train_timesteps
        if c.use_karras_sigmas:
            if given_shift:
                raise InputError(
                    f"flow_shift={flow_shift!r} was given but the config uses Karras sigmas, "
                    "which no shift changes (diffusers ignores it there too)"
                )
            # diffusers set_timesteps, Karras branch (_convert_to_karras, rho 7) with use_flow_sigmas.
            rho = 7.0
            ramp = np.linspace(0, 1, n)
            min_inv_rho = float(c.sigma_min) ** (1 / rho)
            max_inv_rho = float(c.sigma_max) ** (1 / rho)
            sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
            sigmas = sigmas / (sigmas + 1)
        else:
            # diffusers UniPCMultistepScheduler.set_timesteps, use_flow_sigmas branch (float64 numpy).
            sigmas = np.linspace(1, 1 / num_train, n + 1)[:-1] if base_sigmas is None else base_sigmas
            with np.errstate(divide="ignore", invalid="ignore"):
                sigmas = base.shift_sigmas(sigmas, flow_shift, mu, c.time_shift_type, c.use_dynamic_shifting)
                if c.shift_terminal:
                    sigmas = base.stretch_shift_to_terminal(sigmas, c.shift_terminal)
            sigmas = np.array(sigmas, dtype=np.float64)
            eps = 1e-6
            if np.fabs(sigmas[0] - 1) < eps:
                sigmas[0] -= eps  # alpha = 1 - sigma > 0, so lambda = log(alpha / sigma) is finite
        timesteps = (sigmas * num_train).copy()
        sigma_last = sigmas[-1] if c.final_sigmas_type == "sigma_min" else 0
        sigmas = np.concatenate([sigmas, [sigma_last]]).astype(np.float32)
        timesteps = timesteps.astype(np.int64)  # torch .to(int64): truncation toward zero
        inner = sigmas[:-1]
        if not (np.all(np.isfinite(sigmas)) and np.all(inner > 0) and np.all(inner < 1)):
            raise InputError(
                Arg("num_inference_steps", n),
                f", flow_shift={flow_shift!r}, mu={mu!r} give sigmas "
                f"{sigmas.tolist()} outside (0, 1); UniPC needs 0 < sigma < 1 before the last step.",
            )
        return timesteps, sigmas

    def set_timesteps(
        self,
        num_inference_steps: int,
        *,
        sample_shape: Sequence[int] | None = None,
        flow_shift: float | None = None,
        mu: float | None = None,
        sharding: jax.sharding.Sharding | None = None,
        base_sigmas: Sequence[float] | None = None,
    ) -> UniPCState:
        """Compute the schedule and all per-step coefficients on the host; return the initial state.

        Mirrors diffusers' ``set_timesteps(num_inference_steps, mu=)``; pure, so calling it twice
        gives equal states.

        Args:
            num_inference_steps: number of steps N (int >= 1).
            sample_shape: shape (*S) of the latents ``step`` will get (any layout, e.g.
                (B, T, H, W, C)); sizes the multistep history buffers. Required.
            flow_shift: overrides the config's ``flow_shift`` (applied exactly once).
            mu: resolution-dependent shift; required iff the config has ``use_dynamic_shifting``
                (ignored otherwise, as in diffusers).
            base_sigmas: (N,) the sigmas before the shift instead of ``linspace(1, 1/T, N + 1)[:-1]``
                (diffusers' ``set_timesteps(sigmas=)``; Karras sigmas ignore them there too, as
                vidax takes ``sigma_min`` / ``sigma_max`` from the config).
            sharding: if given, the history buffers are placed with it (the sharding of the
                latents) and the tables replicated on its devices, so every step sees the same
                input shardings.

        Returns:
            UniPCState with ``timesteps`` (N,) int32, ``sigmas`` (N+1,) float32, the coefficient
            tables, zeroed float32 history and ``step_index`` 0.

        Raises:
            InputError: bad ``num_inference_steps``, ``sample_shape``, ``flow_shift`` or ``mu``, or
                a schedule with a sigma outside (0, 1) before the last step.
        """
        if sample_shape is None:
            raise InputError(
                "sample_shape=None: UniPCMultistepScheduler.set_timesteps needs the latent shape "
                "to size its multistep history, e.g. set_timesteps(n, sample_shape=latents.shape)."
            )
        shape = base.check_sample_shape(sample_shape)
        timesteps, sigmas = self.flow_sigmas(num_inference_steps, flow_shift=flow_shift, mu=mu, base_sigmas=base_sigmas)
        predictor, corrector = _coefficient_tables(sigmas, self.config)

        def zeros() -> jax.Array:
            if sharding is None:
                return jnp.zeros(shape, jnp.float32)
            return jax.device_put(np.zeros(shape, np.float32), sharding)

        tables = dict(
            timesteps=jnp.asarray(timesteps.astype(np.int32)),
            sigmas=jnp.asarray(sigmas),
            predictor=jax.tree.map(jnp.asarray, predictor),
            corrector=jax.tree.map(jnp.asarray, corrector),
            step_index=jnp.zeros((), jnp.int32),
        )
        if sharding is not None:
            tables = jax.device_put(tables, base.replicated_sharding(sharding))
        return UniPCState(
            model_outputs=tuple(zeros() for _ in range(self.config.solver_order)),
            last_sample=zeros(),
            **tables,
        )

    def step(self, state: UniPCState, model_output: jax.Array, sample: jax.Array) -> tuple[jax.Array, UniPCState]:
        """One UniPC step at ``state.step_index``: UniC corrects ``sample``, then UniP predicts.

        Pure and jittable; the step index is traced and only indexes the precomputed tables, so
        one trace serves all steps. Computed in float32 (inputs upcast; history kept in float32);
        the corrected sample and the result are returned in ``sample.dtype``, as diffusers does.
        Elementwise, so any layout works.

        Args:
            state: from :meth:`set_timesteps` or the previous ``step``.
            model_output: (*S) the model's flow (velocity) prediction at ``state.timesteps[i]``.
            sample: (*S) the current latents.

        Returns:
            ``(prev_sample, new_state)``; ``prev_sample`` is NaN if called more than N times.

        Raises:
            InputError: shapes differ from each other or from ``sample_shape``, or a dtype is not
                floating (checked at trace time).
        """
        base.check_step_inputs(model_output, sample, state.last_sample.shape)
        f32 = jnp.float32
        i = state.step_index
        n = state.num_inference_steps
        x = sample.astype(f32)
        m_t = x - state.sigmas[i] * model_output.astype(f32)  # data prediction x0

        # UniC: correct the incoming sample with m_t (diffusers multistep_uni_c_bh_update).
        c = state.corrector
        hist = state.model_outputs
        m0 = hist[-1]
        x_c = c.ratio[i] * state.last_sample - c.alpha_h_phi_1[i] * m0
        res = _history_sum(hist, m0, c.rk[i], c.rho[i])
        d1_t = c.rho_t[i] * (m_t - m0)
        res = d1_t if res is None else res + d1_t
        x_c = x_c - c.alpha_b_h[i] * res
        x = jnp.where(c.enabled[i], x_c.astype(sample.dtype).astype(f32), x)

        # UniP: predict the next sample from x and the updated history (multistep_uni_p_bh_update).
        hist = hist[1:] + (m_t,)
        p = state.predictor
        x_p = p.ratio[i] * x - p.alpha_h_phi_1[i] * m_t
        res = _history_sum(hist, m_t, p.rk[i], p.rho[i])
        if res is not None:
            x_p = jnp.where(p.order[i] > 1, x_p - p.alpha_b_h[i] * res, x_p)
        x_p = jnp.where(i < n, x_p, jnp.nan)

        new_state = dataclasses.replace(state, model_outputs=hist, last_sample=x, step_index=i + 1)
        return x_p.astype(sample.dtype), new_state


def _history_sum(hist, m0, rk, rho):
    """``sum_k rho[k] * (hist[-(k+2)] - m0) / rk[k]`` (diffusers' einsum of rhos and D1s)."""
    total = None
    for k in range(rk.shape[0]):
        term = rho[k] * ((hist[-(k + 2)] - m0) / rk[k])
        total = term if total is None else total + term
    return total


# ---------------------------------------------------------------------------------------------
# Host-side coefficients. diffusers computes them with 0-dim float32 torch tensors; the same
# operations are done here on float32 numpy scalars. log and expm1 are evaluated in float64 and
# rounded to float32 (correct rounding; torch's CPU float32 log/expm1 are within 1 ulp of it).


def _log(x: np.float32) -> np.float32:
    return np.float32(-np.inf) if x == 0 else np.float32(math.log(float(x)))


def _expm1(x: np.float32) -> np.float32:
    return np.float32(math.expm1(float(x)))


def _lambda(sigma: np.float32) -> np.float32:
    """``log(alpha) - log(sigma)`` with flow ``alpha = 1 - sigma`` (float32)."""
    return _log(np.float32(1) - sigma) - _log(sigma)


def _fma(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """``a * b + c`` rounded once to float32 (a fused multiply-add), exactly."""
    a, b, c = (np.float32(v) for v in (a, b, c))
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        return np.float32(a * b + c)
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    guess = np.float32(float(exact))
    down, up = np.nextafter(guess, np.float32(-np.inf)), np.nextafter(guess, np.float32(np.inf))
    candidates = (down, guess, up)
    finite = [v for v in candidates if np.isfinite(v)]
    return min(finite, key=lambda v: (abs(Fraction(float(v)) - exact), int(v.view(np.uint32)) & 1))


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``a x = b`` in float32 as LAPACK ``sgesv`` does in torch's CPU ``linalg.solve``.

    LU with partial pivoting (``a[i, k] / a[k, k]`` multipliers), forward substitution with fused
    multiply-adds, back substitution multiplying by the reciprocal pivot. For the 2x2 systems of
    UniPC-2 this reproduces torch (MKL) bit for bit; larger systems agree to a few ulp.
    """
    a = a.astype(np.float32).copy()
    x = b.astype(np.float32).copy()
    n = a.shape[0]
    for k in range(n):
        p = k + int(np.argmax(np.abs(a[k:, k])))
        if a[p, k] == 0 or not np.isfinite(a[p, k]):
            return np.full(n, np.nan, np.float32)
        a[[k, p]] = a[[p, k]]
        x[[k, p]] = x[[p, k]]
        for i in range(k + 1, n):
            a[i, k] = a[i, k] / a[k, k]
            for j in range(k + 1, n):
                a[i, j] = a[i, j] - a[i, k] * a[k, j]
    for i in range(1, n):
        for j in range(i):
            x[i] = _fma(-a[i, j], x[j], x[i])
    for i in reversed(range(n)):
        for j in range(i + 1, n):
            x[i] = _fma(-a[i, j], x[j], x[i])
        x[i] = x[i] * (np.float32(1) / a[i, i])
    return x


def _uni_update(sigma_t, sigma_s0, sigma_prev, order: int, bh1: bool, corrector: bool) -> dict:
    """Scalars of one UniP/UniC update, as diffusers' ``multistep_uni_{p,c}_bh_update``."""
    one = np.float32(1)
    alpha_t = one - sigma_t
    lambda_t = _lambda(sigma_t)
    lambda_s0 = _lambda(sigma_s0)
    h = lambda_t - lambda_s0
    rks = [(_lambda(s) - lambda_s0) / h for s in sigma_prev] + [one]
    hh = -h  # predict_x0
    h_phi_1 = _expm1(hh)
    h_phi_k = h_phi_1 / hh - one
    factorial_i = 1
    b_h = hh if bh1 else _expm1(hh)
    rows, b = [], []
    for k in range(1, order + 1):
        row = []
        for rk in rks:
            power = one
            for _ in range(k - 1):
                power = power * rk
            row.append(power)
        rows.append(row)
        b.append(h_phi_k * np.float32(factorial_i) / b_h)
        factorial_i *= k + 1
        h_phi_k = h_phi_k / hh - np.float32(1 / factorial_i)
    r_mat = np.array(rows, np.float32)
    b = np.array(b, np.float32)
    if corrector:
        rhos = np.array([0.5], np.float32) if order == 1 else _solve(r_mat, b)
        rho, rho_t = rhos[:-1], rhos[-1]
    else:
        if order == 1:
            rho = np.zeros(0, np.float32)
        elif order == 2:
            rho = np.array([0.5], np.float32)
        else:
            rho = _solve(r_mat[:-1, :-1], b[:-1])
        rho_t = np.float32(0)
    return dict(
        ratio=sigma_t / sigma_s0,
        alpha_h_phi_1=alpha_t * h_phi_1,
        alpha_b_h=alpha_t * b_h,
        rk=np.array(rks[:-1], np.float32),
        rho=rho,
        rho_t=rho_t,
    )


def _coefficient_tables(
    sigmas: np.ndarray, config: UniPCMultistepSchedulerConfig
) -> tuple[UniPCCoefficients, UniPCCoefficients]:
    """Predictor and corrector tables for the schedule ``sigmas`` (N+1,) float32.

    Replays diffusers' step bookkeeping: at step i the predictor order is
    ``min(solver_order, i + 1, N - i if lower_order_final)``; the corrector at step i > 0 uses the
    previous step's order and runs unless ``i - 1`` is in ``disable_corrector``.
    """
    n = sigmas.shape[0] - 1
    k_max = config.solver_order - 1

    def empty() -> dict:
        return dict(
            order=np.ones(n, np.int32),
            enabled=np.zeros(n, bool),
            ratio=np.zeros(n, np.float32),
            alpha_h_phi_1=np.zeros(n, np.float32),
            alpha_b_h=np.zeros(n, np.float32),
            rk=np.ones((n, k_max), np.float32),
            rho=np.zeros((n, k_max), np.float32),
            rho_t=np.zeros(n, np.float32),
        )

    pred, corr = empty(), empty()

    def fill(table: dict, i: int, order: int, values: dict) -> None:
        table["order"][i] = order
        table["enabled"][i] = True
        for key in ("ratio", "alpha_h_phi_1", "alpha_b_h", "rho_t"):
            table[key][i] = values[key]
        table["rk"][i, : order - 1] = values["rk"]
        table["rho"][i, : values["rho"].shape[0]] = values["rho"]

    disabled = set(config.disable_corrector)
    orders = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n):
            order = min(config.solver_order, i + 1)
            if config.lower_order_final:
                order = min(order, n - i)
            orders.append(order)
            if i > 0 and (i - 1) not in disabled:
                o = orders[i - 1]
                prev = [sigmas[i - 1 - k] for k in range(1, o)]
                fill(corr, i, o, _uni_update(sigmas[i], sigmas[i - 1], prev, o, config.bh1, True))
            prev = [sigmas[i - k] for k in range(1, order)]
            values = _uni_update(sigmas[i + 1], sigmas[i], prev, order, config.bh1, False)
            fill(pred, i, order, values)
    return UniPCCoefficients(**pred), UniPCCoefficients(**corr)
