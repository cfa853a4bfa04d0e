"""Samplers (schedulers) as pure functions plus a frozen state, matching diffusers numerically.

Each class mirrors the diffusers scheduler of the same name and keeps its public names
(``timesteps``, ``sigmas``, ``num_inference_steps``, ``flow_shift`` / ``shift``, ``mu``);
see :mod:`vidax.schedulers.base` for the ``set_timesteps`` / ``step`` contract.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vidax.errors import ConfigError
from vidax.registry import ComponentSpec, Family
from vidax.schedulers.base import Scheduler, calculate_shift
from vidax.schedulers.ddim_cogvideox import (
    CogVideoXDDIMScheduler,
    CogVideoXDDIMState,
    CogVideoXSchedulerConfig,
)
from vidax.schedulers.dpm_cogvideox import CogVideoXDPMScheduler, CogVideoXDPMState
from vidax.schedulers.flow_match_euler import (
    FlowMatchEulerDiscreteScheduler,
    FlowMatchEulerDiscreteSchedulerConfig,
    FlowMatchEulerState,
)
from vidax.schedulers.unipc import (
    UniPCCoefficients,
    UniPCMultistepScheduler,
    UniPCMultistepSchedulerConfig,
    UniPCState,
)

_SAMPLING_KEYS = ("prediction_type", "snr_shift_scale", "timestep_spacing", "rescale_betas_zero_snr")

FAMILY = Family(
    name="schedulers",
    components=(
        ComponentSpec(
            "UniPCMultistepScheduler",
            "scheduler",
            config="vidax.schedulers.unipc:UniPCMultistepScheduler",
            key_configs=("prediction_type", "flow_shift", "solver_order", "solver_type"),
        ),
        ComponentSpec(
            "FlowMatchEulerDiscreteScheduler",
            "scheduler",
            config="vidax.schedulers.flow_match_euler:FlowMatchEulerDiscreteScheduler",
            key_configs=("shift", "num_train_timesteps", "use_dynamic_shifting"),
        ),
        ComponentSpec(
            "CogVideoXDDIMScheduler",
            "scheduler",
            config="vidax.schedulers.ddim_cogvideox:CogVideoXDDIMScheduler",
            key_configs=_SAMPLING_KEYS,
        ),
        ComponentSpec(
            "CogVideoXDPMScheduler",
            "scheduler",
            config="vidax.schedulers.dpm_cogvideox:CogVideoXDPMScheduler",
            key_configs=_SAMPLING_KEYS,
        ),
    ),
)


def scheduler_from_config(
    config: Mapping[str, Any], *, source: str = "scheduler_config.json", **overrides: Any
) -> Scheduler:
    """Build the scheduler named by ``config["_class_name"]`` from a diffusers scheduler config.

    Args:
        config: the parsed ``scheduler/scheduler_config.json``.
        source: file name used in error messages.
        **overrides: config keys to replace, as in diffusers'
            ``from_config(config, flow_shift=5.0)``.

    Raises:
        ConfigError: ``_class_name`` missing or not a registered scheduler, or a setting the class
            does not implement (see the class's config).
    """
    from vidax.registry import registry

    name = config.get("_class_name")
    spec = registry().find_component(name)
    if spec is None or spec.kind != "scheduler":
        valid = sorted(s.class_name for s in registry().components("scheduler"))
        raise ConfigError(f"{source}: _class_name={name!r} is not a scheduler vidax implements; valid: {valid}.")
    # the checkpoint's config itself where nothing is replaced: a key its class ignores is warned
    # about once per read of the file (vidax.config.ConfigFile)
    return spec.config_class().from_config({**config, **overrides} if overrides else config, source=source)


def scheduler_from_config_of(
    class_name: str, config: Mapping[str, Any], *, source: str = "scheduler_config.json", **overrides: Any
) -> Scheduler:
    """diffusers' ``NewScheduler.from_config(old.config, **overrides)``: the scheduler ``class_name``
    built from another scheduler's config, keeping every key of ``config`` that ``class_name`` takes
    (diffusers' ``ConfigMixin.extract_init_dict``: the keys of the new class's ``__init__``; the
    others are left out), ``overrides`` over them.

    Raises:
        ConfigError: ``class_name`` is not a scheduler vidax implements, or a kept setting it
            does not implement.
    """
    from vidax.registry import registry

    spec = registry().find_component(class_name)
    if spec is None or spec.kind != "scheduler":
        return scheduler_from_config({"_class_name": class_name}, source=source)  # its ConfigError
    takes = spec.config_class().config_class.init_keys()
    kept = {k: v for k, v in config.items() if k in takes}
    return scheduler_from_config({**kept, "_class_name": class_name}, source=source, **overrides)


__all__ = [
    "FAMILY",
    "CogVideoXDDIMScheduler",
    "CogVideoXDDIMState",
    "CogVideoXDPMScheduler",
    "CogVideoXDPMState",
    "CogVideoXSchedulerConfig",
    "FlowMatchEulerDiscreteScheduler",
    "FlowMatchEulerDiscreteSchedulerConfig",
    "FlowMatchEulerState",
    "Scheduler",
    "UniPCCoefficients",
    "UniPCMultistepScheduler",
    "UniPCMultistepSchedulerConfig",
    "UniPCState",
    "calculate_shift",
    "scheduler_from_config",
    "scheduler_from_config_of",
]
