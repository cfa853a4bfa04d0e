"""Denoising transformers taking turns (Wan2.2 A14B's two experts): which runs each step, and
only the one in use on the device."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from vidax.nn.kernels import lay_out_kernel_stacks, with_layout_of
from vidax.parallel.offload import host_memory_kind

logger = logging.getLogger("vidax.pipeline")


def expert_for_steps(timesteps: Any, boundary_ratio: float | None, num_train_timesteps: int) -> list[int]:
    """Which transformer runs each step: 0 (``transformer``) or 1 (``transformer_2``).

    As ``diffusers.WanPipeline``: step i uses ``transformer`` when ``boundary_ratio`` is None or
    ``timesteps[i] >= boundary_ratio * num_train_timesteps``, else ``transformer_2``. torch
    compares an int64 timestep with a Python float in float32, so the comparison is done in
    float32 here too (``0.9 * 1000`` is 900.0000000000001, and timestep 900 counts as high noise).

    Args:
        timesteps: (N,) the scheduler's model-input timesteps (int or float).
        boundary_ratio: the checkpoint's ``boundary_ratio`` (model_index.json) or None.
        num_train_timesteps: the scheduler config's ``num_train_timesteps``.

    Returns:
        N ints in {0, 1}.
    """
    t = np.asarray(timesteps)
    if boundary_ratio is None:
        return [0] * len(t)
    boundary = np.float32(boundary_ratio * num_train_timesteps)
    return [0 if v >= boundary else 1 for v in t.astype(np.float32)]


def segments(experts: Sequence[int]) -> list[tuple[int, int]]:
    """Runs of equal expert: ``[0, 0, 1, 1, 1] -> [(0, 2), (1, 3)]`` as (expert, length)."""
    out: list[tuple[int, int]] = []
    for e in experts:
        if out and out[-1][0] == e:
            out[-1] = (e, out[-1][1] + 1)
        else:
            out.append((e, 1))
    return out


def _host_memory_kind() -> str | None:
    """The memory kind for parameters waiting off the device ("pinned_host"), or None if the
    default device has none."""
    kind = host_memory_kind("auto")
    return kind if kind == "pinned_host" else None


def _move(module: nnx.Module, memory_kind: str) -> None:
    """Move every array of ``module`` to ``memory_kind`` on the same devices and sharding, in
    place, each in its own layout; the source buffers are released as soon as the copies exist."""
    state = nnx.state(module)
    # Placeholders of blocks streamed from host memory (vidax.parallel.offload) stay as they are.
    moved = jax.tree.map(
        lambda a: (
            jax.device_put(a, with_layout_of(a, a.sharding.with_memory_kind(memory_kind)))
            if isinstance(a, jax.Array)
            else a
        ),
        state,
    )
    jax.block_until_ready(moved)
    nnx.update(module, moved)


class Experts:
    """The denoising transformers of a pipeline and which of them is on the device.

    One transformer is always on the device. With two (Wan2.2 A14B) and ``offload=True``, only
    the expert in use is on the device and the other one waits in pinned host memory
    (``memory_kind="pinned_host"``, same sharding); :meth:`params` swaps them when the other one
    is asked for (at the boundary step), releasing the device copy of the first before placing
    the second, so the device never holds both. With ``offload=False`` (or a backend without
    host memory) both stay on the device.

    Args:
        modules: the transformers in expert order (any may already be in host memory, see
            :meth:`move_to_host`).
        offload: keep the inactive experts in host memory.
        names: their component names (for the log).
    """

    def __init__(self, modules: Sequence[nnx.Module], offload: bool = True, names: Sequence[str] | None = None):
        self.modules = list(modules)
        self.names = list(names) if names is not None else [f"expert {i}" for i in range(len(self.modules))]
        self.host_kind = _host_memory_kind()
        self.device_kind = jax.local_devices()[0].default_memory().kind
        self.offload = bool(offload) and len(self.modules) > 1 and self.host_kind is not None
        if offload and len(self.modules) > 1 and self.host_kind is None:
            logger.warning("this backend has no pinned host memory; both experts stay on the device")
        self.active = 0
        for i, m in enumerate(self.modules):
            want = self.device_kind if (i == 0 or not self.offload) else self.host_kind
            if self.memory_kind(i) != want:
                _move(m, want)

    def memory_kind(self, i: int) -> str:
        """Where expert ``i``'s parameters are now (``"device"``, ``"pinned_host"``)."""
        leaves = [a for a in jax.tree.leaves(nnx.state(self.modules[i])) if isinstance(a, jax.Array)]
        return leaves[0].sharding.memory_kind if leaves else self.device_kind

    @staticmethod
    def move_to_host(module: nnx.Module) -> None:
        """Move a freshly loaded expert to host memory at once (before the next one is loaded),
        so loading two experts never holds both on the device. No-op without host memory."""
        kind = _host_memory_kind()
        if kind is not None:
            _move(module, kind)

    def params(self, i: int) -> nnx.State:
        """The device parameters of expert ``i``, swapping it onto the device if needed, its
        stacked Linear kernels in the CPU kernel layout where the CPU matmul reads them in place
        (:func:`vidax.nn.kernels.stacks.lay_out_kernel_stacks`, a no-op elsewhere and once done).

        The returned state references the device arrays; drop it before asking for the other
        expert, or both will be alive on the device.
        """
        if self.memory_kind(i) != self.device_kind:
            t0 = time.perf_counter()
            for j in range(len(self.modules)):
                if j != i and self.memory_kind(j) == self.device_kind:
                    _move(self.modules[j], self.host_kind)
            _move(self.modules[i], self.device_kind)
            logger.info("expert swap: %s now on the device (%.2f s)", self.names[i], time.perf_counter() - t0)
        self.active = i
        lay_out_kernel_stacks(self.modules[i], getattr(self.modules[i], "block_stacks", ()))
        return nnx.state(self.modules[i])
