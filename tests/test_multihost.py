"""Multi-host through jax.distributed: two local processes x 4 CPU devices make the same video as
one process with 8 devices (same (2, 2, 2) mesh); only process 0 writes; an unreachable
coordinator is a clear error within a bounded time."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import vidax
from tests.test_sharded_pipeline import CALL, NEGATIVE, PROMPT, TOL, build_pipeline_checkpoint
from vidax.cli import app
from vidax.errors import InputError
from vidax.parallel import distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build_pipeline_checkpoint(str(tmp_path_factory.mktemp("multihost")))


def _generate_args(ckpt, out):
    args = [
        "generate",
        "--prompt",
        PROMPT,
        "--negative-prompt",
        NEGATIVE,
        "--checkpoint",
        ckpt,
        "--dp",
        "2",
        "--tp",
        "2",
        "--sp",
        "2",
        "--no-progress",
        "-o",
        str(out),
    ]
    for k, v in CALL.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def test_two_processes_equal_one_process(ckpt, tmp_path):
    port = _free_port()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    outs = [tmp_path / f"video_{i}.npy" for i in range(2)]
    logs = [open(tmp_path / f"log_{i}.txt", "w+") for i in range(2)]
    procs = {}
    for i in (1, 0):  # the non-coordinator first: it waits for process 0's port
        procs[i] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vidax",
                *_generate_args(ckpt, outs[i]),
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--distributed-timeout",
                "120",
            ],
            env=env,
            stdout=logs[i],
            stderr=subprocess.STDOUT,
            text=True,
        )
    for i in (0, 1):
        code = procs[i].wait(timeout=600)
        logs[i].seek(0)
        text = logs[i].read()
        assert code == 0, f"process {i}:\n{text[-3000:]}"
    assert "done (process 0 writes the video)" in text  # process 1's log
    assert outs[0].exists() and not outs[1].exists()  # only process 0 writes

    # The same mesh in this one process with 8 devices.
    pipe = vidax.load_pipeline(ckpt, mesh=(2, 2, 2))
    want = pipe(PROMPT, NEGATIVE, progress=False, **CALL).frames[0]
    got = np.load(outs[0])
    err = np.abs(got - want).max()
    print(f"2 processes x 4 devices vs 1 x 8: max abs err {err:.2e}")
    assert got.shape == want.shape and err < TOL


def _generate_as(tmp_path, port, *, num_processes, process_id):
    """``vidax generate`` as one process of a multi-host run at 127.0.0.1:``port`` with a 1.5 s
    --distributed-timeout: (the CLI result, seconds it took)."""
    t0 = time.monotonic()
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "--prompt",
            "x",
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            str(num_processes),
            "--process-id",
            str(process_id),
            "--distributed-timeout",
            "1.5",
            "-o",
            str(tmp_path / "v.npy"),
        ],
    )
    return r, time.monotonic() - t0


def test_unreachable_coordinator_fails_fast(tmp_path):
    port = _free_port()  # nothing listens there
    r, elapsed = _generate_as(tmp_path, port, num_processes=2, process_id=1)
    assert r.exit_code == 2, r.output
    assert f"process 1 of 2: no coordinator answered at --coordinator '127.0.0.1:{port}' within 1.5 s" in r.stderr
    assert elapsed < 15, elapsed


def test_coordinator_without_the_other_processes_fails_in_one_line(tmp_path):
    """Process 0 alone: JAX's service aborted the process (a C++ stack, SIGABRT) after its
    timeout; vidax's own rendezvous says which processes did not come, within
    --distributed-timeout; an address not of this machine is refused at once."""
    port = _free_port()
    r, elapsed = _generate_as(tmp_path, port, num_processes=3, process_id=0)
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        f"error: process 0 of 3: --coordinator '127.0.0.1:{port}': process(es) 1, 2 did not reach "
        "it within 1.5 s; start every process 1..2 with the same --coordinator and --num-processes 3 "
        "(or give them more time with --distributed-timeout)\n"
    ), r.stderr
    assert elapsed < 15, elapsed
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "--prompt",
            "x",
            "--coordinator",
            "192.0.2.1:1234",
            "--num-processes",
            "2",
            "--process-id",
            "0",
            "-o",
            str(tmp_path / "v.npy"),
        ],
    )
    assert r.exit_code == 2 and r.stderr.startswith(
        "error: process 0 of 2: --coordinator '192.0.2.1:1234' is not an address of this machine ("
    ), r.stderr


def test_rendezvous_counts_processes_and_refuses_mismatches():
    """Process 0's rendezvous returns once every other process said hello (threads stand for the
    processes); a process with another --num-processes, or an id twice, is refused on both sides."""
    import threading

    def run(fn, *args):
        box = {}

        def target():
            try:
                fn(*args)
                box["ok"] = True
            except InputError as e:
                box["error"] = str(e)

        t = threading.Thread(target=target)
        t.start()
        return t, box

    address = f"127.0.0.1:{_free_port()}"
    host, joiners = run(distributed.host_rendezvous, address, 20, 3), []
    for pid in (2, 1):
        joiners.append(run(distributed.wait_for_coordinator, address, 20, pid, 3))
    for t, box in [host] + joiners:
        t.join(30)
        assert box == {"ok": True}, box
    for pids, counts, problem in (
        ((1,), (4,), "it has --num-processes 4, process 0 has 3"),
        ((1, 1), (3, 3), "process id 1 came twice"),
    ):
        address = f"127.0.0.1:{_free_port()}"
        host = run(distributed.host_rendezvous, address, 20, 3)
        joiners = []
        for pid, n in zip(pids, counts):
            joiners.append(run(distributed.wait_for_coordinator, address, 20, pid, n))
            time.sleep(0.5)  # in this order
        for t, _ in [host] + joiners:
            t.join(30)
        assert problem in host[1]["error"], host[1]
        for _, box in joiners:  # the one refused, and the one that came first, are told why
            assert f"refused it: {problem}" in box["error"], box


def test_distributed_settings(monkeypatch):
    for name in (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES, distributed.ENV_PROCESS_ID):
        monkeypatch.delenv(name, raising=False)
    assert distributed.initialize() is False  # nothing given: single process
    with pytest.raises(InputError, match="coordinator, process_id not given"):
        distributed.initialize(num_processes=2)
    with pytest.raises(InputError, match="must be HOST:PORT"):
        distributed.initialize("localhost", 2, 1)
    with pytest.raises(InputError, match=r"process_id=2 must be an int in \[0, num_processes=2\)"):
        distributed.initialize("localhost:1234", 2, 2)
    # Ranges are checked whatever else is given, and before what is missing.
    with pytest.raises(InputError, match=r"process_id=3 must be an int in \[0, num_processes=1\)"):
        distributed.initialize(num_processes=1, process_id=3)
    with pytest.raises(InputError, match=r"process_id=-1 must be an int >= 0"):
        distributed.initialize(process_id=-1)
    with pytest.raises(InputError, match=r"num_processes=0 must be an int >= 1"):
        distributed.initialize(num_processes=0)
    with pytest.raises(InputError, match=r"timeout_s=0 must be a finite number of seconds > 0"):
        distributed.initialize("localhost:1234", 2, 1, timeout_s=0)
    for bad in (float("nan"), -1.0):  # refused for one process too, where it is unused
        with pytest.raises(InputError, match=r"timeout_s=(nan|-1.0) must be a finite number of seconds > 0"):
            distributed.initialize(timeout_s=bad)
    # The usual environment variables are read when the arguments are absent.
    monkeypatch.setenv(distributed.ENV_COORDINATOR, f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv(distributed.ENV_NUM_PROCESSES, "2")
    monkeypatch.setenv(distributed.ENV_PROCESS_ID, "1")
    with pytest.raises(InputError, match="process 1 of 2: no coordinator answered"):
        distributed.initialize(timeout_s=0.5)
    monkeypatch.setenv(distributed.ENV_PROCESS_ID, "one")
    with pytest.raises(InputError, match="JAX_PROCESS_ID='one' must be an integer"):
        distributed.initialize()
