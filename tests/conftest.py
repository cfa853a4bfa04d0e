"""Shared test set-up.

Parity tests compare against diffusers/transformers (torch, CPU) in float32. JAX's default
matmul precision on CPU is already full fp32, but it is pinned to "highest" so the comparison
means the same on every backend.
"""

import os
import sys

# This checkout's vidax (src/ layout), in the suite and in every vidax process it starts, whatever
# else is installed.
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
sys.path.insert(0, _SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# vidax turns JAX's persistent compilation cache on by default, in the user's cache folder; the
# suite (and every vidax process it starts, which inherits this) runs without it, so that it
# writes nothing there and each test compiles as a fresh process would. The compile-cache tests
# give their subprocesses a folder of their own.
os.environ["VIDAX_COMPILE_CACHE"] = "0"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    try:
        import torch
    except ImportError:  # tests that need torch import it themselves and fail loudly
        return
    torch.set_num_threads(max(1, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    """The embedded tiny checkpoint, built once per session into a temporary cache (tests only
    read it; a module needing another checkpoint defines its own ``ckpt``)."""
    from vidax.default_checkpoint import default_checkpoint

    return default_checkpoint(str(tmp_path_factory.mktemp("cache")))
