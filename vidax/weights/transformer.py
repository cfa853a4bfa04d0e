"""Loading a denoising transformer: the steps every family's ``convert.load_transformer`` shares."""

from __future__ import annotations

import os
from typing import Any, Callable

import jax.numpy as jnp
from flax import nnx

from vidax.errors import InputError
from vidax.parallel.offload import offload_loader
from vidax.parallel.placement import ParamAxes, logical_placement
from vidax.weights.loader import DtypePolicy, KeyRules, PendingLoad, Placement, load_module


def load_transformer_model(
    model_cls: type,
    config: Any,
    path: str | os.PathLike,
    rules: KeyRules,
    policy: Callable[[Any], DtypePolicy],
    param_axes: ParamAxes,
    *,
    dtype: Any,
    placement: Placement | None = None,
    mesh: Any = None,
    offload: Any = None,
    what: str = "transformer",
    defer: bool = False,
    **model_kwargs: Any,
) -> nnx.Module | PendingLoad:
    """``model_cls(config, dtype=dtype, param_dtype=dtype, mesh=mesh, **model_kwargs)`` filled
    from the safetensors of ``path``.

    Its parameters are placed by ``placement``, else by ``param_axes`` on ``mesh`` (first device
    without one); with an ``offload`` that streams blocks every stack of ``model_cls.block_stacks``
    goes from the files straight into host-memory chunks (:mod:`vidax.parallel.offload`).
    With ``defer`` the plan is checked (building the model abstractly, which checks its heads
    against ``mesh``) and a :class:`~vidax.weights.loader.PendingLoad` of the model returned.

    Raises:
        InputError: ``dtype`` is not a floating dtype (named with ``what``).
        CheckpointError: tensors missing, unexpected or mis-shaped.
    """
    try:
        ok = jnp.issubdtype(jnp.dtype(dtype), jnp.floating)
    except TypeError:
        ok = False
    if not ok:
        raise InputError(f"{what}: dtype={dtype!r} must be a floating dtype (float32, bfloat16).")

    def make():
        return model_cls(config, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0), mesh=mesh, **model_kwargs)

    stream = offload_loader(offload, attr=model_cls.block_stacks)
    pending = load_module(make, os.fspath(path), rules, policy(dtype), placement or logical_placement(mesh, param_axes),
                          what="transformer", place_stacked=stream, defer=True)
    if stream is not None:
        pending = pending.then(stream.attach)
    return pending if defer else pending.read()
