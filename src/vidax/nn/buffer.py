"""Checkpoint tensors that are not parameters."""

from __future__ import annotations

from flax import nnx


class Buffer(nnx.Variable):
    """A tensor the checkpoint holds that is not a parameter (a torch ``register_buffer``): the
    loader fills it from the checkpoint like a parameter, and ``nnx.Param`` filters leave it out."""
