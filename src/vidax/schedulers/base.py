"""Shared pieces of the vidax samplers (schedulers).

A vidax scheduler mirrors one diffusers scheduler class and keeps its public names
(``timesteps``, ``sigmas``, ``num_inference_steps``, ``flow_shift`` / ``shift``, ``mu``). It is
split into two halves:

* ``set_timesteps(...)`` runs on the host, in numpy, with the same operations and dtypes as
  diffusers (so ``timesteps`` and ``sigmas`` are equal to diffusers', not merely close), and
  returns a frozen *state*: a registered JAX pytree holding the schedule, any per-step
  coefficients precomputed on the host, the multistep history and a traced ``step_index``.
* ``step(state, model_output, sample) -> (prev_sample, new_state)`` is a pure function with no
  Python branching on the step index, so one ``jax.jit`` of it serves every step of a run.

The scheduler object itself only holds its frozen config; calling ``set_timesteps`` twice gives
equal states.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from vidax.config import ConfigBase
from vidax.errors import Arg, InputError

T = TypeVar("T")


def register_state(cls: type[T]) -> type[T]:
    """Register a frozen dataclass as a JAX pytree whose fields are all array leaves."""
    names = [f.name for f in dataclasses.fields(cls)]
    return jax.tree_util.register_dataclass(cls, data_fields=names, meta_fields=[])


def is_number(x: Any) -> bool:
    """True for a real Python/numpy number that is not a bool."""
    numeric = isinstance(x, (int, float, np.integer, np.floating))
    return numeric and not isinstance(x, (bool, np.bool_))


def is_int_at_least(x: Any, low: int) -> bool:
    """True for an int (not a bool) >= ``low``."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and x >= low


def check_num_inference_steps(num_inference_steps: Any) -> int:
    """Return ``num_inference_steps`` as an int, or raise InputError if it is not an int >= 1."""
    try:
        n = operator.index(num_inference_steps)
    except TypeError:
        n = None
    if n is None or isinstance(num_inference_steps, bool) or n < 1:
        raise InputError(Arg("num_inference_steps", num_inference_steps), " is not valid; it must be an int >= 1.")
    return n


def check_sample_shape(sample_shape: Any) -> tuple[int, ...]:
    """Return ``sample_shape`` as a tuple of ints >= 1, or raise InputError."""
    try:
        shape = tuple(operator.index(d) for d in sample_shape)
    except TypeError:
        shape = None
    if shape is None or any(d < 1 for d in shape):
        raise InputError(
            f"sample_shape={sample_shape!r} is not valid; it must be the latent shape as a tuple "
            "of positive ints, e.g. (B, T, H, W, C)."
        )
    return shape


def check_step_inputs(model_output: jax.Array, sample: jax.Array, state_shape: tuple | None = None) -> None:
    """Static checks of ``step`` arguments (shapes and dtypes are known at trace time);
    ``state_shape``: the sample shape the state was made for (its history arrays), or None."""
    if model_output.shape != sample.shape:
        raise InputError(
            f"model_output has shape {model_output.shape} but sample has shape {sample.shape}; "
            "step() needs both of the same shape."
        )
    for name, x in (("model_output", model_output), ("sample", sample)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise InputError(f"{name} has dtype {x.dtype}; step() needs a floating dtype.")
    if state_shape is not None and sample.shape != tuple(state_shape):
        raise InputError(
            f"sample has shape {sample.shape} but the state was made for sample_shape="
            f"{tuple(state_shape)}; call set_timesteps with the latents' shape."
        )


def shift_override(name: str, value: Any, config_value: Any, dynamic: bool) -> Any:
    """The shift a ``set_timesteps`` call uses: the config's ``config_value`` when ``value`` is
    None, else ``value`` as a Python float (so float32 sigmas stay float32, as in diffusers).

    Raises:
        InputError: naming ``name=``: given while the config uses dynamic shifting (``mu``), or
            not a number > 0.
    """
    if value is None:
        return config_value
    if dynamic:
        raise InputError(
            f"{name}={value!r} was given but the config uses dynamic shifting (mu); pass one or the other."
        )
    if not (is_number(value) and value > 0):
        raise InputError(f"{name}={value!r} is not valid; it must be a number > 0.")
    return float(value)


def shift_sigmas(sigmas: np.ndarray, shift: float, mu: float | None, time_shift_type: str, dynamic: bool) -> np.ndarray:
    """diffusers' shift of flow sigmas: :func:`time_shift` with ``mu`` when the config uses
    dynamic shifting, else ``shift · s / (1 + (shift - 1) · s)``; the dtype of ``sigmas`` kept."""
    if dynamic:
        return time_shift(time_shift_type, mu, 1.0, sigmas)
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def time_shift(time_shift_type: str, mu: float, sigma: float, t: np.ndarray) -> np.ndarray:
    """Resolution-dependent shift of flow sigmas, as diffusers' ``time_shift`` (same numpy ops).

    ``exponential``: ``e^mu / (e^mu + (1/t - 1)^sigma)``;
    ``linear``: ``mu / (mu + (1/t - 1)^sigma)``.
    The dtype of ``t`` is kept (float32 stays float32, as in diffusers).
    """
    if time_shift_type == "exponential":
        return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)
    if time_shift_type == "linear":
        return mu / (mu + (1 / t - 1) ** sigma)
    raise InputError(f"time_shift_type={time_shift_type!r}; valid: 'exponential', 'linear'.")


def stretch_shift_to_terminal(t: np.ndarray, shift_terminal: float) -> np.ndarray:
    """Stretch a sigma schedule so it ends at ``shift_terminal`` (diffusers' numpy ops)."""
    one_minus_z = 1 - t
    scale_factor = one_minus_z[-1] / (1 - shift_terminal)
    return 1 - (one_minus_z / scale_factor)


def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """``mu`` for resolution-dependent (dynamic) shifting: linear in the token count.

    The line through ``(base_seq_len, base_shift)`` and ``(max_seq_len, max_shift)`` evaluated at
    ``image_seq_len`` (not clamped), with the same Python float operations as diffusers'
    ``calculate_shift`` (pipelines/flux/pipeline_flux.py, copied into the LTX-Video, Wan-style
    and other pipelines), so the result is equal to diffusers'. Pipelines pass the scheduler
    config's ``base_image_seq_len``, ``max_image_seq_len``, ``base_shift``, ``max_shift`` (these
    defaults are diffusers'); ``image_seq_len`` is the transformer's token count of one sample
    (LTX-Video: latent ``T * H * W``).

    Raises:
        InputError: ``image_seq_len`` is not an int >= 1, or ``base_seq_len == max_seq_len``.
    """
    if not is_int_at_least(image_seq_len, 1):
        raise InputError(f"image_seq_len={image_seq_len!r} is not valid; it must be an int >= 1.")
    if base_seq_len == max_seq_len:
        raise InputError(
            f"base_seq_len={base_seq_len!r} equals max_seq_len; they must differ to define the shift line."
        )
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    return image_seq_len * m + b


def check_mu(mu: Any, use_dynamic_shifting: bool) -> float | None:
    """``mu`` must be a finite number with dynamic shifting; otherwise ignored (as diffusers)."""
    if not use_dynamic_shifting:
        return None
    if mu is None:
        raise InputError(
            "mu=None: this scheduler's config has use_dynamic_shifting=true, so set_timesteps() "
            "needs mu (the resolution-dependent shift, e.g. from the pipeline's calculate_shift)."
        )
    try:
        value = float(mu)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise InputError(f"mu={mu!r} is not valid; it must be a finite number.")
    return value


def replicated_sharding(sharding: jax.sharding.Sharding) -> jax.sharding.Sharding:
    """A fully replicated sharding over the same devices as ``sharding``."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    devices = sorted(sharding.device_set, key=lambda d: d.id)
    mesh = jax.sharding.Mesh(np.array(devices), ("replica",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


@dataclasses.dataclass(frozen=True)
class SchedulerConfig(ConfigBase, dict):
    """A sampler's settings: a frozen dataclass (``config.shift``) that is also a read-only dict of
    its fields, as diffusers' ``scheduler.config`` (a ``FrozenDict``) is, so that a diffusers script's
    ``NewScheduler.from_config(pipe.scheduler.config, shift=5.0)`` takes vidax's config as it takes
    diffusers' (diffusers' ``from_config`` reads a dict only)."""

    def __post_init__(self) -> None:
        dict.update(self, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    def __reduce__(self):  # copies and pickles are rebuilt from the fields (the dict holds them)
        return _rebuild_config, (type(self), dict(self))

    def _frozen(self, *args: Any, **kwargs: Any):
        raise TypeError(f"{type(self).__name__} is frozen; build a new one (dataclasses.replace or from_config)")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _frozen


def _rebuild_config(cls: type, fields: dict[str, Any]) -> SchedulerConfig:
    return cls(**fields)


class Scheduler(Protocol):
    """What every vidax scheduler offers (see the module docstring)."""

    config: Any
    init_noise_sigma: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, source: str = ...) -> Scheduler: ...

    def set_timesteps(self, num_inference_steps: int, **kwargs: Any) -> Any: ...

    def step(self, state: Any, model_output: jax.Array, sample: jax.Array) -> tuple[jax.Array, Any]: ...


@dataclasses.dataclass(frozen=True)
class SchedulerBase:
    """What every sampler shares: its frozen ``config`` (an instance of ``config_class``, a
    :class:`~vidax.config.ConfigBase`), ``from_config``, ``init_noise_sigma`` 1 and the identity
    ``scale_model_input`` (none of vidax's samplers scales the model input)."""

    config: Any
    config_class: ClassVar[type]
    init_noise_sigma: ClassVar[float] = 1.0

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, source: str = "scheduler_config.json"):
        """Build from a diffusers ``scheduler_config.json`` dict (ConfigError as in ConfigBase)."""
        return cls(cls.config_class.from_config_dict(config, source=source))

    def scale_model_input(self, sample: jax.Array, timestep: Any = None) -> jax.Array:
        """Identity, as the reference; for interface parity."""
        return sample


class StepIndexed:
    """``num_inference_steps`` and the next ``timestep`` of a state with ``timesteps`` and
    ``step_index`` (every sampler state)."""

    timesteps: jax.Array
    step_index: jax.Array

    @property
    def num_inference_steps(self) -> int:
        return self.timesteps.shape[0]

    @property
    def timestep(self) -> jax.Array:
        """() float32: the model input for the next ``step`` (``timesteps[step_index]``; the
        last one again once every step has been taken)."""
        return self.timesteps[jnp.minimum(self.step_index, self.num_inference_steps - 1)].astype(jnp.float32)
