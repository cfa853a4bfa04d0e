"""The arguments every denoising step of one expert takes besides the latents and the scheduler state.

A family's :meth:`~vidax.pipelines.hooks.FamilyHooks.step_args` returns a :class:`StepInputs`
(or a subclass of it with the family's own named fields, declared with :func:`step_inputs`); the
jitted step takes it whole and hands it to the family's ``model_args``, ``guidance``, ``guide`` and
``scheduler_update``. It is a pytree: its array fields are traced, its :func:`static` fields
(Python values) are part of the tree structure.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


def step_inputs(cls: type) -> type:
    """Class decorator: ``cls`` as a frozen dataclass registered as a pytree (the base
    :class:`StepInputs` and every family's subclass of it)."""
    return jax.tree_util.register_dataclass(dataclasses.dataclass(frozen=True)(cls))


def static(default: Any = None) -> Any:
    """A :func:`step_inputs` field that is static (a Python value), default ``default``."""
    return dataclasses.field(default=default, metadata=dict(static=True))


@step_inputs
class StepInputs:
    """What every step of one expert reads besides the latents and the scheduler state.

    Attributes:
        embeds: the prompt encoding (:meth:`~vidax.pipelines.hooks.FamilyHooks.encode_text`'s
            array, tuple or dict, CFG pairs batched).
        guidance: the CFG weight: a float32 scalar, or a family's per-step table or guidance object.
        cond: the call's conditioning (:meth:`~vidax.pipelines.hooks.FamilyHooks.condition`'s dict).
    """

    embeds: Any
    guidance: Any = None
    cond: Any = dataclasses.field(default_factory=dict)
