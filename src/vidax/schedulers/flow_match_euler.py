"""Euler sampler for flow-matching models, following diffusers' ``FlowMatchEulerDiscreteScheduler``.

Public names mirror diffusers: ``timesteps`` (model input, 0..``num_train_timesteps`` scale),
``sigmas`` (noise level in [0, 1], one more entry than ``timesteps``: the final 0),
``num_inference_steps``, ``shift``, ``mu``. The model predicts the flow velocity ``v`` and one step
is ``x_next = x + (sigma_next - sigma) * v``.

``set_timesteps`` reproduces diffusers' numpy/float32 arithmetic operation by operation, so the
schedules are bit-equal to diffusers'; ``step`` is a pure, jittable function of a
:class:`FlowMatchEulerState`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, ConfigError, InputError
from vidax.schedulers import base
from vidax.schedulers.base import SchedulerBase, SchedulerConfig, StepIndexed


@dataclasses.dataclass(frozen=True)
class FlowMatchEulerDiscreteSchedulerConfig(SchedulerConfig):
    """Settings of diffusers' ``FlowMatchEulerDiscreteScheduler`` that vidax implements.

    Field names and defaults are diffusers'. ``base_shift``, ``max_shift``, ``base_image_seq_len``
    and ``max_image_seq_len`` do not enter the scheduler itself; pipelines turn them into ``mu``
    (see :meth:`FlowMatchEulerDiscreteScheduler.calculate_shift`). Not implemented, and refused
    unless at their no-op value: ``invert_sigmas`` (Mochi), ``stochastic_sampling``,
    ``use_karras_sigmas``, ``use_exponential_sigmas``, ``use_beta_sigmas``.
    """

    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "invert_sigmas": (False,),
        "stochastic_sampling": (False,),
        "use_karras_sigmas": (False,),
        "use_exponential_sigmas": (False,),
        "use_beta_sigmas": (False,),
    }

    num_train_timesteps: int = 1000
    shift: float = 1.0
    use_dynamic_shifting: bool = False
    base_shift: float | None = 0.5
    max_shift: float | None = 1.15
    base_image_seq_len: int = 256
    max_image_seq_len: int = 4096
    shift_terminal: float | None = None
    time_shift_type: str = "exponential"

    def validate(self, source: str) -> None:
        n = self.num_train_timesteps
        if not base.is_int_at_least(n, 1):
            raise ConfigError(f"{source}: num_train_timesteps={n!r}; it must be an int >= 1.")
        if not (base.is_number(self.shift) and self.shift > 0):
            raise ConfigError(f"{source}: shift={self.shift!r}; it must be a number > 0.")
        if self.time_shift_type not in ("exponential", "linear"):
            raise ConfigError(f"{source}: time_shift_type={self.time_shift_type!r}; valid: 'exponential', 'linear'.")
        if self.shift_terminal is not None and not (base.is_number(self.shift_terminal) and self.shift_terminal != 1):
            raise ConfigError(f"{source}: shift_terminal={self.shift_terminal!r}; it must be null or a number != 1.")


@base.register_state
@dataclasses.dataclass(frozen=True)
class FlowMatchEulerState(StepIndexed):
    """Schedule and position of one Euler sampling run (a JAX pytree; all fields are arrays).

    Attributes:
        timesteps: (N,) float32, the model inputs in ``[0, num_train_timesteps]`` (diffusers'
            ``scheduler.timesteps``). Feed the model ``timesteps[i]``, never a sigma.
        sigmas: (N + 1,) float32, noise levels, ``sigmas[N] == 0`` (diffusers'
            ``scheduler.sigmas``).
        step_index: () int32, how many steps have been taken.
    """

    timesteps: jax.Array
    sigmas: jax.Array
    step_index: jax.Array


@dataclasses.dataclass(frozen=True)
class FlowMatchEulerDiscreteScheduler(SchedulerBase):
    """Flow-matching Euler sampler; follows diffusers' ``FlowMatchEulerDiscreteScheduler``.

    Use::

        sched = FlowMatchEulerDiscreteScheduler.from_config(json.load(f))
        state = sched.set_timesteps(50)
        step = jax.jit(sched.step)
        for i in range(state.num_inference_steps):
            v = model(x, state.timesteps[i])
            x, state = step(state, v, x)
    """

    config: FlowMatchEulerDiscreteSchedulerConfig
    config_class: ClassVar[type] = FlowMatchEulerDiscreteSchedulerConfig

    def _train_sigma_range(self) -> tuple[float, float]:
        """diffusers' ``sigma_max`` / ``sigma_min``, set in ``__init__`` with the *config* shift."""
        n = self.config.num_train_timesteps
        timesteps = np.linspace(1, n, n, dtype=np.float32)[::-1].copy()
        sigmas = timesteps / np.float32(n)
        if not self.config.use_dynamic_shifting:
            shift = self.config.shift
            sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
        return float(sigmas[0]), float(sigmas[-1])

    def calculate_shift(self, image_seq_len: int) -> float:
        """``mu`` for dynamic shifting from the token count, with the config's ``base_shift``,
        ``max_shift``, ``base_image_seq_len`` and ``max_image_seq_len``.

        What the diffusers pipelines compute as ``calculate_shift(image_seq_len,
        scheduler.config.base_image_seq_len, ..., scheduler.config.max_shift)`` (LTX-Video,
        Flux); see :func:`vidax.schedulers.base.calculate_shift`.

        Raises:
            InputError: ``base_shift`` or ``max_shift`` is null in the config, or
                ``image_seq_len`` is not a positive int.
        """
        c = self.config
        if c.base_shift is None or c.max_shift is None:
            raise InputError(
                f"calculate_shift needs base_shift and max_shift in the scheduler config; it has "
                f"base_shift={c.base_shift!r}, max_shift={c.max_shift!r} (pass mu yourself)."
            )
        return base.calculate_shift(image_seq_len, c.base_image_seq_len, c.max_image_seq_len, c.base_shift, c.max_shift)

    def largest_seq_len(self, num_inference_steps: int, sigmas: Any = None) -> int | None:
        """The largest ``image_seq_len`` whose dynamic shift (:meth:`calculate_shift`, which
        diffusers extends past ``max_image_seq_len`` without a clamp) still gives a valid
        schedule of ``num_inference_steps`` (unshifted ``sigmas``, as :meth:`set_timesteps`
        takes them): past it ``mu`` pushes every float32 sigma to 1.0 (then ``shift_terminal``
        cannot stretch the schedule) or ``e^mu`` overflows, and nothing would be denoised.

        Returns:
            The token count (0 when even one token is too many), or None where the token count
            sets no limit: no dynamic shifting, a shift that does not grow with it, or none
            below 2**40 tokens.
        """
        c = self.config
        if (
            not c.use_dynamic_shifting
            or c.base_shift is None
            or c.max_shift is None
            or (c.max_shift - c.base_shift) * (c.max_image_seq_len - c.base_image_seq_len) <= 0
        ):
            return None

        def valid(seq_len: int) -> bool:
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # e^mu past float32 is what is searched for
                    self.set_timesteps(num_inference_steps, sigmas=sigmas, mu=self.calculate_shift(seq_len))
            except (InputError, OverflowError):
                return False
            return True

        if not valid(1):
            return 0
        lo, hi = 1, max(2, int(c.max_image_seq_len))
        while valid(hi):  # the shift line rises with the token count: find an invalid one
            if hi >= 2**40:
                return None
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # valid(lo), not valid(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if valid(mid) else (lo, mid)
        return lo

    def set_timesteps(
        self,
        num_inference_steps: int | None = None,
        *,
        sigmas: Sequence[float] | None = None,
        timesteps: Sequence[float] | None = None,
        mu: float | None = None,
        shift: float | None = None,
        sample_shape: Sequence[int] | None = None,
        sharding: jax.sharding.Sharding | None = None,
    ) -> FlowMatchEulerState:
        """Compute the sampling schedule on the host; return the initial state.

        Mirrors diffusers' ``set_timesteps(num_inference_steps, sigmas=, mu=, timesteps=)``
        (scheduling_flow_match_euler_discrete.py) operation by operation; pure, so calling it
        twice gives equal states. How the LTX-Video pipelines call it (via ``retrieve_timesteps``):
        LTXPipeline / LTXImageToVideoPipeline pass ``sigmas=np.linspace(1, 1/N, N)`` and ``mu``;
        LTXConditionPipeline passes ``timesteps=linear_quadratic_schedule(N) * 1000`` alone.

        Args:
            num_inference_steps: number of steps N (int >= 1). May be None when ``sigmas`` or
                ``timesteps`` is given (N is then their length); if given with them, it must equal
                their length.
            sigmas: optional custom *unshifted* sigmas, length N, in (0, 1]; they go through the
                same shifting (dynamic or ``shift``) and ``shift_terminal`` stretch as the default
                grid. With ``timesteps`` too, the model inputs are ``timesteps`` and the Euler
                steps use these (shifted) sigmas.
            timesteps: optional custom model inputs, length N, on the ``[0, num_train_timesteps]``
                scale. Used as given (float32) for ``state.timesteps``; without ``sigmas`` the
                sigmas are ``timesteps / num_train_timesteps`` *then shifted* (diffusers warns
                that the two may then disagree unless the config's shifting is the identity,
                e.g. ``shift=1`` without dynamic shifting and shift_terminal, as in the
                LTX-Video 0.9.5/0.9.7 configs).
            mu: resolution-dependent shift; required iff the config has ``use_dynamic_shifting``
                (ignored otherwise, as in diffusers); see :meth:`calculate_shift`.
            shift: overrides the config's ``shift`` for this schedule (diffusers' ``set_shift``);
                as in diffusers the end of the default grid still comes from the config's shift.
                Applied exactly once to the sigma grid. Not with dynamic shifting.
            sample_shape: accepted for interface parity with multistep schedulers; unused.
            sharding: if given, the state's arrays are placed replicated on its devices.

        Returns:
            FlowMatchEulerState with ``timesteps`` (N,) float32 and ``sigmas`` (N+1,) float32
            (the last sigma is 0).

        Raises:
            InputError: bad ``num_inference_steps``/``sigmas``/``timesteps``/``mu``/``shift``;
                lengths that disagree; ``shift`` together with dynamic shifting; or a schedule
                with non-finite sigmas (custom sigmas outside [0, 1] can divide by zero in the
                shift), or a schedule ending at sigma 1 with ``shift_terminal`` (diffusers returns
                NaN there).
        """
        c = self.config
        if sample_shape is not None:
            base.check_sample_shape(sample_shape)
        n, sigmas, timesteps, custom = _custom_schedule(num_inference_steps, sigmas, timesteps)
        mu = base.check_mu(mu, c.use_dynamic_shifting)
        shift = base.shift_override("shift", shift, c.shift, c.use_dynamic_shifting)
        timesteps, sigmas = self._schedule(n, sigmas, timesteps, mu, shift)
        if not np.all(np.isfinite(sigmas)):
            raise InputError(
                "the schedule for ",
                Arg("num_inference_steps", n),
                f", mu={mu!r}, shift={shift!r}"
                f"{', custom ' + '/'.join(custom) if custom else ''} has non-finite sigmas "
                f"{sigmas.tolist()}; sigmas are noise levels, custom ones belong in [0, 1].",
            )

        state = FlowMatchEulerState(
            timesteps=jnp.asarray(timesteps),
            sigmas=jnp.asarray(sigmas),
            step_index=jnp.zeros((), jnp.int32),
        )
        if sharding is not None:
            state = jax.device_put(state, base.replicated_sharding(sharding))
        return state

    def _schedule(self, n: int, sigmas: Any, timesteps: Any, mu: Any, shift: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(timesteps (N,), sigmas (N+1,))`` float32, as diffusers'
        ``FlowMatchEulerDiscreteScheduler.set_timesteps`` computes them, step by step (same
        dtypes): the grid (default, or from custom ``sigmas`` / ``timesteps``), shifted,
        stretched to ``shift_terminal``, a final 0 appended.

        Raises:
            InputError: a schedule ending at sigma 1 with ``shift_terminal``.
        """
        c = self.config
        num_train = c.num_train_timesteps
        if timesteps is not None:
            timesteps = np.array(timesteps).astype(np.float32)
        if sigmas is None:
            if timesteps is None:
                sigma_max, sigma_min = self._train_sigma_range()
                grid = np.linspace(sigma_max * num_train, sigma_min * num_train, n)
            else:
                grid = timesteps
            sigmas = grid / num_train
        else:
            sigmas = np.array(sigmas).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            sigmas = base.shift_sigmas(sigmas, shift, mu, c.time_shift_type, c.use_dynamic_shifting)
            if c.shift_terminal:
                if sigmas[-1] == 1:  # diffusers divides 0 by 0 here and returns NaN sigmas
                    raise InputError(
                        f"shift_terminal={c.shift_terminal!r} stretches the schedule to end at that "
                        f"sigma, which needs a last shifted sigma below 1; the schedule "
                        f"{np.asarray(sigmas).tolist()} ends at 1 (e.g. one step of "
                        "linspace(1, 1/N, N)): use num_inference_steps >= 2 or sigmas ending below 1."
                    )
                sigmas = base.stretch_shift_to_terminal(sigmas, c.shift_terminal)
        sigmas = np.asarray(sigmas).astype(np.float32)
        if timesteps is None:
            timesteps = sigmas * np.float32(num_train)
        return timesteps, np.concatenate([sigmas, np.zeros(1, np.float32)])

    def step(
        self,
        state: FlowMatchEulerState,
        model_output: jax.Array,
        sample: jax.Array,
        per_token_timesteps: jax.Array | None = None,
    ) -> tuple[jax.Array, FlowMatchEulerState]:
        """One Euler step ``x + (sigmas[i + 1] - sigmas[i]) * model_output``, i = step_index.

        Pure and jittable; no Python branching on the step index. Computed in float32 (the sample
        and the model output are upcast), returned in ``model_output.dtype`` like diffusers.
        Elementwise, so any layout works.

        With ``per_token_timesteps`` (diffusers' ``step(..., per_token_timesteps=)``, what
        LTXConditionPipeline passes): every token steps from its own sigma ``s = t / num_train``
        to the largest schedule sigma below ``s - 1e-6`` (0 if none), ``x + (s - s_next) *
        model_output`` (the caller passes the negated velocity, as the reference); a token at
        timestep 0 stays. The result stays float32 there, as in diffusers.

        Args:
            state: from :meth:`set_timesteps` or the previous ``step``.
            model_output: (...) the model's flow prediction at ``state.timesteps[i]``.
            sample: (...) the current latents, same shape.
            per_token_timesteps: optional ``(...)`` timesteps on the ``[0, num_train_timesteps]``
                scale, one per token: the leading dimensions of ``sample`` (e.g. ``(B, N)`` for
                packed ``(B, N, C)`` latents; ``(B, 1)`` broadcasts over the tokens).

        Returns:
            ``(prev_sample, new_state)``; ``prev_sample`` is NaN if called more than N times.

        Raises:
            InputError: shapes differ or a dtype is not floating, or ``per_token_timesteps``
                has more dimensions than ``sample`` less one (checked at trace time).
        """
        base.check_step_inputs(model_output, sample)
        i = state.step_index
        n = state.num_inference_steps
        x = sample.astype(jnp.float32)
        v = model_output.astype(jnp.float32)
        if per_token_timesteps is None:
            dt = state.sigmas[i + 1] - state.sigmas[i]
            prev = (x + dt * v).astype(model_output.dtype)
        else:
            t = jnp.asarray(per_token_timesteps, jnp.float32)
            if t.ndim > sample.ndim - 1:
                raise InputError(
                    f"per_token_timesteps has shape {tuple(t.shape)}; it needs one timestep per token "
                    f"of sample {tuple(sample.shape)} (its leading dimensions, channels last)"
                )
            sigma = t / jnp.float32(self.config.num_train_timesteps)
            sigmas = state.sigmas.reshape((-1,) + (1,) * t.ndim)
            lower = jnp.where(sigmas < sigma[None] - jnp.float32(1e-6), sigmas, jnp.float32(0.0))
            dt = (sigma - lower.max(axis=0))[..., None]
            prev = x + dt * v
        prev = jnp.where(i < n, prev, jnp.nan)
        return prev, dataclasses.replace(state, step_index=i + 1)


def _check_values(name: str, values: Any) -> list[float]:
    """Custom ``sigmas`` / ``timesteps`` (a sequence, numpy or torch 1-D array) as floats."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        out = None
    if not out or not all(math.isfinite(v) for v in out):
        raise InputError(f"{name}={values!r} is not valid; it must be a non-empty 1-D sequence of finite numbers.")
    return out


def _custom_schedule(num_inference_steps: Any, sigmas: Any, timesteps: Any) -> tuple[int, Any, Any, dict]:
    """``(N, sigmas, timesteps, custom)``: the steps of ``set_timesteps`` and its custom
    ``sigmas`` / ``timesteps`` checked (as float lists, None where not given; ``custom``: name
    -> values of those given). N is their length where ``num_inference_steps`` is None.

    Raises:
        InputError: bad values; lengths that disagree with each other or with ``num_inference_steps``.
    """
    custom = {}
    if sigmas is not None:
        custom["sigmas"] = sigmas = _check_values("sigmas", sigmas)
    if timesteps is not None:
        custom["timesteps"] = timesteps = _check_values("timesteps", timesteps)
    if len({len(v) for v in custom.values()}) > 1:
        raise InputError(
            f"len(sigmas)={len(sigmas)} but len(timesteps)={len(timesteps)}; when both are "
            "given they must have the same length (one entry per step)."
        )
    if custom:
        name, values = next(iter(custom.items()))
        if num_inference_steps is not None and base.check_num_inference_steps(num_inference_steps) != len(values):
            raise InputError(
                f"num_inference_steps={num_inference_steps!r} but len({name})={len(values)}; "
                "they must agree (or pass num_inference_steps=None)."
            )
        num_inference_steps = len(values)
    return base.check_num_inference_steps(num_inference_steps), sigmas, timesteps, custom
