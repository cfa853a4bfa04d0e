"""Samplers (schedulers) as pure functions plus a frozen state, matching diffusers numerically.

Each class mirrors the diffusers scheduler of the same name and keeps its public names
(``timesteps``, ``sigmas``, ``num_inference_steps``, ``flow_shift`` / ``shift``, ``mu``);
see :mod:`vidax.schedulers.base` for the ``set_timesteps`` / ``step`` contract.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from vidax.config import read_json_object
from vidax.errors import ConfigError
from vidax.schedulers.base import Scheduler
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

SCHEDULERS: dict[str, type] = {
    "UniPCMultistepScheduler": UniPCMultistepScheduler,
    "FlowMatchEulerDiscreteScheduler": FlowMatchEulerDiscreteScheduler,
    "CogVideoXDDIMScheduler": CogVideoXDDIMScheduler,
    "CogVideoXDPMScheduler": CogVideoXDPMScheduler,
}


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
        ConfigError: ``_class_name`` missing or not in :data:`SCHEDULERS`, or a setting the class
            does not implement (see the class's config).
    """
    name = config.get("_class_name")
    if name not in SCHEDULERS:
        raise ConfigError(
            f"{source}: _class_name={name!r} is not a scheduler vidax implements; "
            f"valid: {sorted(SCHEDULERS)}."
        )
    return SCHEDULERS[name].from_config({**config, **overrides}, source=source)


def scheduler_from_folder(folder: str | os.PathLike, **overrides: Any) -> Scheduler:
    """The scheduler of a diffusers ``scheduler/`` folder, from its ``scheduler_config.json``
    (see :func:`scheduler_from_config`).

    Raises:
        ConfigError: the folder has no ``scheduler_config.json``, the file is not a JSON object
            (:func:`vidax.config.read_json_object`), or :func:`scheduler_from_config` refuses it.
    """
    file = os.path.join(os.fspath(folder), "scheduler_config.json")
    if not os.path.isfile(file):
        raise ConfigError(f"{os.fspath(folder)} has no scheduler_config.json")
    return scheduler_from_config(read_json_object(file), source=file, **overrides)


__all__ = [
    "SCHEDULERS",
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
    "scheduler_from_config",
    "scheduler_from_folder",
]
