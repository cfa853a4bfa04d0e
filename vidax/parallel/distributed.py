"""Multi-host runs through ``jax.distributed``, and moving arrays between host, mesh and one device.

Every process runs the same program on its own devices; ``jax.devices()`` then lists the devices
of all processes and one mesh spans them. :func:`initialize` connects the processes (a process
that cannot reach the coordinator fails with a clear :class:`~vidax.errors.InputError` within
``timeout_s`` instead of hanging or aborting); :func:`put` places a value every process holds
identically onto a global sharding; :func:`to_local` brings a global result back to one device
of this process (every process gets the whole value).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.errors import InputError, SetupError

logger = logging.getLogger("vidax.parallel")

#: Environment variables read when the arguments are not given (the JAX names).
ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
DEFAULT_TIMEOUT_S = 60


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise InputError(f"environment variable {name}={value!r} must be an integer.") from None


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"coordinator={address!r} must be HOST:PORT (e.g. 10.0.0.1:1234).")
    return host.strip("[]"), int(port)


def wait_for_coordinator(address: str, timeout_s: float, process_id: int, num_processes: int) -> None:
    """Poll ``address`` until it accepts a TCP connection.

    Raises:
        InputError: nothing listens there within ``timeout_s`` seconds.
    """
    host, port = _split_address(address)
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, max(timeout_s, 0.1))):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise InputError(
                f"process {process_id} of {num_processes}: no coordinator answered at "
                f"coordinator={address!r} within {timeout_s:g} s ({type(last).__name__}: {last}). "
                "Start process 0 (which hosts the coordinator) with the same --coordinator, and "
                "check the host name, port and firewall."
            )
        time.sleep(0.25)


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Connect this process to a multi-process JAX run (``jax.distributed.initialize``).

    Arguments left None are read from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID``. With none of them set anywhere, nothing happens (single process).
    Processes other than 0 first wait (at most ``timeout_s``) for the coordinator's port to
    open, so an unreachable coordinator gives a clear error instead of JAX's abort. Call it
    before anything touches a JAX device. On CPU the cross-process collectives use JAX's
    default (gloo).

    Args:
        coordinator: ``HOST:PORT`` of process 0.
        num_processes: N >= 1.
        process_id: this process, ``0 <= process_id < N``.
        timeout_s: seconds to wait for the coordinator and for all processes to join.

    Returns:
        True when a multi-process run was initialised, False for a single process.

    Raises:
        InputError: incomplete or invalid settings, or the coordinator cannot be reached in time.
    """
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR) or None
    num_processes = num_processes if num_processes is not None else _env_int(ENV_NUM_PROCESSES)
    process_id = process_id if process_id is not None else _env_int(ENV_PROCESS_ID)
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    if all(v is None for v in given.values()):
        return False
    if num_processes == 1 and coordinator is None:
        return False
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise InputError(
            f"multi-process run: {', '.join(missing)} not given (got {given}); pass --coordinator "
            f"HOST:PORT --num-processes N --process-id I, or set {ENV_COORDINATOR}, "
            f"{ENV_NUM_PROCESSES}, {ENV_PROCESS_ID}."
        )
    _split_address(coordinator)
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise InputError(f"num_processes={num_processes!r} must be an int >= 1.")
    if isinstance(process_id, bool) or not isinstance(process_id, int) or not 0 <= process_id < num_processes:
        raise InputError(f"process_id={process_id!r} must be an int in [0, num_processes={num_processes}).")
    if not timeout_s or timeout_s <= 0:
        raise InputError(f"timeout_s={timeout_s!r} must be > 0.")
    if process_id != 0:
        wait_for_coordinator(coordinator, timeout_s, process_id, num_processes)
    logger.info(
        "jax.distributed: process %d of %d, coordinator %s (waiting up to %g s for all processes)",
        process_id, num_processes, coordinator, timeout_s,
    )
    jax.distributed.initialize(
        coordinator, num_processes, process_id, initialization_timeout=max(1, int(round(timeout_s)))
    )
    return True


def check_backend() -> str:
    """The name of JAX's default backend, once JAX has started the backends it is told to.

    Call it after :func:`initialize` (starting a backend ends the chance to join a multi-process
    run).

    Raises:
        SetupError: JAX cannot start a backend ``JAX_PLATFORMS`` (``jax_platforms``) names (absent
            hardware, no plugin, a typo); the message names the setting, its value, JAX's reason
            and the backends this machine has.
    """
    try:
        return jax.default_backend()
    except Exception as e:  # RuntimeError, or an AssertionError for a platform with no plugin
        setting = jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS")
        reason = " ".join(str(e).split("(set JAX_PLATFORMS")[0].split()) or "no JAX plugin for it is installed"
        if not setting:
            raise SetupError(f"JAX cannot start a backend: {reason}") from None
        raise SetupError(
            f"JAX_PLATFORMS={setting!r} names a backend JAX cannot start here ({reason}); this machine has: "
            f"{available_backends()}; set JAX_PLATFORMS to one of them, or unset it to let JAX choose"
        ) from None


def available_backends() -> str:
    """The backends JAX starts on this machine when ``JAX_PLATFORMS`` is unset, comma-separated
    (asked of a fresh Python process, so this process's JAX state is left as it is; a few seconds)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    code = "import jax, jax.extend.backend as b; print(','.join(sorted(b.backends())))"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = r.stdout.strip().splitlines()
    return lines[-1].replace(",", ", ") if r.returncode == 0 and lines else "unknown"


def is_main_process() -> bool:
    """True on process 0 (the one that writes outputs)."""
    return jax.process_index() == 0


def put(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """Place ``x`` (identical on every process) with ``sharding``, which may span processes.

    A global array is resharded; a host value or a process-local array goes through the host,
    each process supplying its own shards.
    """
    if isinstance(x, jax.Array):
        if x.sharding == sharding:
            return x
        if not x.is_fully_addressable or jax.process_count() == 1:
            return jax.device_put(x, sharding)
    return jax.device_put(np.asarray(x), sharding)


def to_local(x: jax.Array) -> jax.Array:
    """The whole value of ``x`` on this process's first device (a single-device array).

    A global array sharded across processes is first replicated (a collective every process
    must join, so call it on all processes).
    """
    device = jax.local_devices()[0]
    if not isinstance(x, jax.Array):
        return jax.device_put(x, device)
    if not x.is_fully_addressable:
        x = jax.jit(lambda a: a, out_shardings=NamedSharding(x.sharding.mesh, PartitionSpec()))(x)
        x = x.addressable_shards[0].data  # the whole value, on one of this process's devices
    return jax.device_put(x, device)
