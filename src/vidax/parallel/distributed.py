"""Multi-host runs through ``jax.distributed``, and moving arrays between host, mesh and one device.

Every process runs the same program on its own devices; ``jax.devices()`` then lists the devices
of all processes and one mesh spans them. :func:`initialize` connects the processes (a process
that cannot reach the coordinator, or a process 0 that the others do not reach, fails with a clear
:class:`~vidax.errors.InputError` within ``timeout_s`` instead of hanging or aborting);
:func:`check_backend` turns a ``JAX_PLATFORMS`` this machine cannot start into one line;
:func:`put` places a value every process holds identically onto a global sharding;
:func:`to_local` brings a global result back to one device of this process (every process gets
the whole value).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from vidax.errors import Arg, InputError, Message, SetupError, joined

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
        raise InputError(Arg("coordinator", address), " must be HOST:PORT (e.g. 10.0.0.1:1234).")
    return host.strip("[]"), int(port)


#: What a process other than 0 sends process 0 in the rendezvous before JAX's (one line, ASCII).
_HELLO = "vidax-rendezvous"


def wait_for_coordinator(address: str, timeout_s: float, process_id: int, num_processes: int) -> None:
    """Reach process 0 at ``address`` within ``timeout_s`` seconds (processes other than 0).

    Polls until the port accepts a TCP connection, then says which process this is (process 0's
    :func:`host_rendezvous` counts them; any other listener, e.g. JAX's own service, is taken as
    the coordinator being up).

    Raises:
        InputError: nothing listens there within ``timeout_s`` seconds.
    """
    host, port = _split_address(address)
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, max(timeout_s, 0.1))) as conn:
                conn.sendall(f"{_HELLO} {process_id} {num_processes}\n".encode())
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    reply = conn.recv(4096)  # "ok": process 0 counted this process; b"": another listener
                    while reply.startswith(b"refused") and (more := conn.recv(4096)):
                        reply += more
                except OSError:
                    reply = b""
                if not reply.startswith(b"refused"):
                    return
                raise InputError(
                    f"process {process_id} of {num_processes}: process 0 at ",
                    Arg("coordinator", address),
                    f" refused it: {reply[8:].decode(errors='replace').strip()}",
                )
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise InputError(
                f"process {process_id} of {num_processes}: no coordinator answered at ",
                Arg("coordinator", address),
                f" within {timeout_s:g} s ({type(last).__name__}: {last}). "
                "Start process 0 (which hosts the coordinator) with the same --coordinator, and "
                "check the host name, port and firewall.",
            )
        time.sleep(0.25)


def host_rendezvous(address: str, timeout_s: float, num_processes: int) -> None:
    """Process 0: listen on ``address``'s port until every other process has said which it is
    (:func:`wait_for_coordinator`), within ``timeout_s`` seconds; then free the port for JAX.

    JAX's coordination service ends the whole process (a C++ abort) when a process does not join
    in time; this rendezvous turns the usual causes into one error line first.

    Raises:
        InputError: ``address`` is not an address of this machine, its port is taken, a process id
            came twice or with another process count, or processes are missing after
            ``timeout_s`` (the message lists them).
    """
    host, port = _split_address(address)
    head = Message(f"process 0 of {num_processes}: ", Arg("coordinator", address))
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, 0))
    except OSError as e:
        raise InputError(
            head,
            f" is not an address of this machine ({e.strerror or e}); process 0 runs the "
            "coordinator, so start it on that host (or give one of this machine's addresses)",
        ) from None
    try:  # every interface, as JAX's service listens
        listener = (
            socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
            if socket.has_dualstack_ipv6()
            else socket.create_server(("", port))
        )
    except OSError as e:
        raise InputError(
            head, f": port {port} cannot be listened on here ({e.strerror or e}); give a free port"
        ) from None
    joined: dict[int, socket.socket] = {}
    try:
        try:
            _gather(listener, joined, head, timeout_s, num_processes)
        except InputError as e:  # the processes that came stop too, told why
            for conn in joined.values():
                with contextlib.suppress(OSError):
                    conn.sendall(f"refused {str(e)[len(str(head)) + 2 :]}".encode())
            raise
        for conn in joined.values():
            conn.sendall(b"ok")
        for conn in joined.values():  # the other side closes first, so the port is free at once
            conn.recv(1)
    except OSError:  # a process went away meanwhile: JAX's own rendezvous reports it
        pass
    finally:
        for conn in joined.values():
            conn.close()
        listener.close()


def _gather(listener: socket.socket, joined: dict, head: str, timeout_s: float, num_processes: int) -> None:
    # Accept the hellos of processes 1..N-1 into ``joined`` (id -> connection), within timeout_s.
    deadline = time.monotonic() + timeout_s
    while len(joined) < num_processes - 1:
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [i for i in range(1, num_processes) if i not in joined]
            raise InputError(
                head,
                f": process(es) {', '.join(map(str, missing))} did not reach it within {timeout_s:g} s; "
                f"start every process 1..{num_processes - 1} with the same --coordinator and --num-processes "
                f"{num_processes} (or give them more time with --distributed-timeout)",
            )
        listener.settimeout(left)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
        try:
            words = conn.recv(128).decode(errors="replace").split()
        except OSError:
            words = []
        if len(words) != 3 or words[0] != _HELLO or not words[1].isdigit() or not words[2].isdigit():
            conn.close()  # not a vidax process: ignored
            continue
        pid, n = int(words[1]), int(words[2])
        problem = (
            f"it has --num-processes {n}, process 0 has {num_processes}"
            if n != num_processes
            else f"process id {pid} came twice"
            if pid in joined
            else f"process id {pid} is not in 1..{num_processes - 1}"
            if not 0 < pid < num_processes
            else None
        )
        if problem:
            conn.sendall(f"refused {problem}".encode())
            conn.close()
            raise InputError(
                head,
                f": {problem}; give each process its own --process-id in "
                f"0..{num_processes - 1} and the same --num-processes",
            )
        joined[pid] = conn


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
    Before JAX's own rendezvous (which aborts the process when it fails), processes other than 0
    wait at most ``timeout_s`` to reach process 0 (:func:`wait_for_coordinator`) and process 0
    waits as long for all of them (:func:`host_rendezvous`), so an unreachable coordinator, a
    missing process or a wrong address is one clear error instead of JAX's abort. Call it
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
        InputError: incomplete or invalid settings, the coordinator cannot be reached in time, or
            (process 0) another process did not arrive in time.
    """
    # checked even for a single process, where it is unused: a nan or negative timeout is a mistake
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise InputError(Arg("timeout_s", timeout_s), " must be a finite number of seconds > 0.")
    coordinator = coordinator or os.environ.get(ENV_COORDINATOR) or None
    num_processes = num_processes if num_processes is not None else _env_int(ENV_NUM_PROCESSES)
    process_id = process_id if process_id is not None else _env_int(ENV_PROCESS_ID)
    given = {"coordinator": coordinator, "num_processes": num_processes, "process_id": process_id}
    if all(v is None for v in given.values()):
        return False
    if num_processes is not None and (
        isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1
    ):
        raise InputError(Arg("num_processes", num_processes), " must be an int >= 1.")
    if process_id is not None and (
        isinstance(process_id, bool)
        or not isinstance(process_id, int)
        or not 0 <= process_id < (num_processes or 2**31)
    ):
        valid = ("in [0, ", Arg("num_processes", num_processes), ")") if num_processes else (">= 0",)
        raise InputError(Arg("process_id", process_id), " must be an int ", *valid, ".")
    if num_processes == 1 and coordinator is None:
        return False
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise InputError(
            "multi-process run: ",
            *joined([Arg(k) for k in missing]),
            " not given (got ",
            *joined([Arg(k, v) for k, v in given.items() if v is not None]),
            "); pass --coordinator "
            f"HOST:PORT --num-processes N --process-id I, or set {ENV_COORDINATOR}, "
            f"{ENV_NUM_PROCESSES}, {ENV_PROCESS_ID}.",
        )
    _split_address(coordinator)
    if process_id != 0:
        wait_for_coordinator(coordinator, timeout_s, process_id, num_processes)
    elif num_processes > 1:
        host_rendezvous(coordinator, timeout_s, num_processes)
    logger.info(
        "jax.distributed: process %d of %d, coordinator %s (waiting up to %g s for all processes)",
        process_id,
        num_processes,
        coordinator,
        timeout_s,
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
