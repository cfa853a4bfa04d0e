"""CogVideoX's stochastic DPM-Solver++(2M) sampler, following diffusers' ``CogVideoXDPMScheduler``.

Same noise schedule, timesteps and x0 prediction as :mod:`vidax.schedulers.ddim_cogvideox`. With
``λ(a) = log √(a / (1 - a))``, ``h = λ(a_prev) - λ(a_t)`` and, from the second step on,
``r = (λ(a_t) - λ(a_back)) / h`` where ``a_back`` belongs to the previous timestep of the grid:

* first order (the first step, and the last one where ``t - N // n < 0``)::

      x_prev = m1 x - m2 x0 + m_noise ε
* second order (every other step, with the previous step's ``x0_old``)::

      x_prev = m1 x - m2 (m3 x0 - m4 x0_old) + m_noise ε

  ``m1 = √((1-a_prev)/(1-a_t)) e^{-h}``, ``m2 = expm1(-2h) √a_prev``, ``m3 = 1 + 1/(2r)``,
  ``m4 = 1/(2r)``, ``m_noise = √(1-a_prev) √(1 - e^{-2h})``.

``ε`` is fresh standard normal noise at every step. The reference draws it from the pipeline's
generator (once on first-order steps, twice on second-order steps, using the second draw); here
it comes from ``jax.random`` (``fold_in(key, step_index)`` of the state's key) unless the caller
passes it to :meth:`CogVideoXDPMScheduler.step`, which lets a run reproduce the reference's noise
step for step. All coefficients (including the infinities of a zero-terminal-SNR schedule, which
the reference's formulas resolve to finite values) are computed on the host in the reference's
dtypes and rounded to float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, InputError
from vidax.schedulers import base
from vidax.schedulers.ddim_cogvideox import CogVideoXSchedulerBase, Schedule, StepIndexed, pred_original_sample


@base.register_state
@dataclasses.dataclass(frozen=True)
class CogVideoXDPMState(StepIndexed):
    """Schedule, history and noise key of a CogVideoX DPM run (a JAX pytree of arrays).

    Attributes:
        timesteps: (n,) int32, the model inputs (diffusers' ``scheduler.timesteps``).
        sqrt_alpha, sqrt_beta: (n,) float32 factors of the x0 prediction.
        mult: (n, 5) float32 ``[m1, m2, m3, m4, m_noise]`` per step (m3, m4 zero where unused).
        second_order: (n,) bool, whether step i uses the previous x0.
        prev_x0: (*S) float32, the previous step's x0 prediction (zeros before the first step).
        key: the PRNG key of the default step noise.
        step_index: () int32.
    """

    timesteps: jax.Array
    sqrt_alpha: jax.Array
    sqrt_beta: jax.Array
    mult: jax.Array
    second_order: jax.Array
    prev_x0: jax.Array
    key: jax.Array
    step_index: jax.Array


def _lambda(a):
    return np.log((a / (1 - a)) ** 0.5)


@dataclasses.dataclass(frozen=True)
class CogVideoXDPMScheduler(CogVideoXSchedulerBase):
    """Stochastic DPM-Solver++(2M); follows diffusers' ``CogVideoXDPMScheduler``.

    Use::

        sched = CogVideoXDPMScheduler.from_config(json.load(f))
        state = sched.set_timesteps(50, sample_shape=x.shape, seed=0)
        for i in range(state.num_inference_steps):
            v = model(x, state.timesteps[i])
            x, state = sched.step(state, v, x)          # or step(state, v, x, noise=eps_i)
    """

    def set_timesteps(
        self,
        num_inference_steps: int,
        *,
        sample_shape: Sequence[int] | None = None,
        seed: int | None = 0,
        sharding: jax.sharding.Sharding | None = None,
    ) -> CogVideoXDPMState:
        """Compute the schedule and per-step multipliers on the host; return the initial state.

        Args:
            num_inference_steps: n, an int in ``[1, num_train_timesteps]``.
            sample_shape: shape (*S) of the latents ``step`` will get (sizes the x0 history).
            seed: seed of the default step noise (``jax.random``); a fresh random seed when None.
            sharding: if given, the history is placed with it and the tables replicated.

        Raises:
            InputError: bad ``num_inference_steps`` or ``sample_shape``.
        """
        n = base.check_num_inference_steps(num_inference_steps)
        if sample_shape is None:
            raise InputError(
                "sample_shape=None: CogVideoXDPMScheduler.set_timesteps needs the latent shape to size "
                "its x0 history, e.g. set_timesteps(n, sample_shape=latents.shape)."
            )
        shape = base.check_sample_shape(sample_shape)
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % 2**31)
        sch = Schedule.build(self.config, n)
        ts = sch.timesteps
        mult = np.zeros((n, 5), np.float32)
        second = np.zeros((n,), bool)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for i, (a_t, a_prev) in enumerate(zip(sch.alpha, sch.alpha_prev)):
                lamb, lamb_next = _lambda(a_t), _lambda(a_prev)
                h = lamb_next - lamb
                m1 = ((1 - a_prev) / (1 - a_t)) ** 0.5 * np.exp(-h)
                m2 = np.expm1(-2 * h) * a_prev**0.5
                m_noise = (1 - a_prev) ** 0.5 * (1 - np.exp(-2 * h)) ** 0.5
                m3 = m4 = 0.0
                if i > 0 and sch.prev_timesteps[i] >= 0:
                    r = (lamb - _lambda(sch.alpha[i - 1])) / h
                    m3, m4 = 1 + 1 / (2 * r), 1 / (2 * r)
                    second[i] = True
                mult[i] = [np.float32(v) for v in (m1, m2, m3, m4, m_noise)]
        if not np.all(np.isfinite(mult)):
            raise InputError(
                Arg("num_inference_steps", n),
                ": this scheduler config gives non-finite step multipliers "
                f"{mult.tolist()}; the reference would produce NaN.",
            )
        tables = dict(
            timesteps=jnp.asarray(ts.astype(np.int32)),
            sqrt_alpha=jnp.asarray(sch.sqrt_alpha),
            sqrt_beta=jnp.asarray(sch.sqrt_beta),
            mult=jnp.asarray(mult),
            second_order=jnp.asarray(second),
            key=jax.random.PRNGKey(seed),
            step_index=jnp.zeros((), jnp.int32),
        )
        if sharding is not None:
            tables = jax.device_put(tables, base.replicated_sharding(sharding))
            prev_x0 = jax.device_put(np.zeros(shape, np.float32), sharding)
        else:
            prev_x0 = jnp.zeros(shape, jnp.float32)
        return CogVideoXDPMState(prev_x0=prev_x0, **tables)

    def step(
        self,
        state: CogVideoXDPMState,
        model_output: jax.Array,
        sample: jax.Array,
        noise: jax.Array | None = None,
    ) -> tuple[jax.Array, CogVideoXDPMState]:
        """One DPM-Solver++(2M) step at ``state.timesteps[step_index]``; pure and jittable.

        Args:
            state: from :meth:`set_timesteps` or the previous ``step``.
            model_output: (*S) the model's prediction (``prediction_type``).
            sample: (*S) the current latents.
            noise: (*S) the standard normal noise this step adds (the reference's ε), or None
                for ``normal(fold_in(state.key, step_index))``.

        Returns:
            ``(prev_sample, new_state)``; ``prev_sample`` float32 (NaN past the last step).

        Raises:
            InputError: shapes differ (from each other, the state's ``sample_shape`` or
                ``noise``) or a dtype is not floating (at trace time).
        """
        base.check_step_inputs(model_output, sample, state.prev_x0.shape)
        i = state.step_index
        j = jnp.minimum(i, state.num_inference_steps - 1)
        if noise is None:
            noise = jax.random.normal(jax.random.fold_in(state.key, i), sample.shape, jnp.float32)
        elif noise.shape != sample.shape:
            raise InputError(f"noise has shape {noise.shape}; step() needs the sample's shape {sample.shape}.")
        x = sample.astype(jnp.float32)
        eps = noise.astype(jnp.float32)
        x0 = pred_original_sample(
            self.config.prediction_type, state.sqrt_alpha[j], state.sqrt_beta[j], x, model_output.astype(jnp.float32)
        )
        m1, m2, m3, m4, mn = (state.mult[j, k] for k in range(5))
        d = jnp.where(state.second_order[j], m3 * x0 - m4 * state.prev_x0, x0)
        prev = m1 * x - m2 * d + mn * eps
        prev = jnp.where(i < state.num_inference_steps, prev, jnp.nan)
        return prev, dataclasses.replace(state, prev_x0=x0, step_index=i + 1)
