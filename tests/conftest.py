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


#: Files that take minutes on one worker (test_serve.py: ~5 min): they are collected first, so that
#: under ``-n 2 --dist loadfile`` (one file, one unit of work, handed out in collection order) they
#: start at once instead of ending the run alone while the other worker waits.
LONG_FILES = ("test_serve.py",)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FILES)  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    try:
        import torch
    except ImportError:  # tests that need torch import it themselves and fail loudly
        return
    torch.set_num_threads(max(1, os.cpu_count() or 1))


def _memory_mappings() -> tuple[int, int] | None:
    """``(mappings, limit)``: this process's memory mappings and the kernel's
    ``vm.max_map_count``; None where /proc does not say (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f), limit
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module", autouse=True)
def _bounded_compiled_programs():
    """After each test file, drop JAX's compiled programs once this process holds more than half
    the memory mappings the kernel allows.

    XLA:CPU keeps about three mappings per compiled program for as long as the program is cached,
    and a test process that runs half the suite compiles tens of thousands of them (every eager op
    on a new shape is one). At ``vm.max_map_count`` (65530 by default) LLVM's next mmap fails and
    the process dies with a segmentation fault inside a compile, taking its xdist worker down.
    ``jax.clear_caches()`` releases them; later files recompile what they use.
    """
    yield
    counted = _memory_mappings()
    if counted is not None and counted[0] > counted[1] // 2:
        import gc

        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def ckpt(tmp_path_factory):
    """The embedded tiny checkpoint, built once per session into a temporary cache (tests only
    read it; a module needing another checkpoint defines its own ``ckpt``)."""
    from vidax.default_checkpoint import default_checkpoint

    return default_checkpoint(str(tmp_path_factory.mktemp("cache")))


def df_checkpoint(wan: str, dest: str) -> str:
    """The tiny Wan checkpoint ``wan`` as a SkyReels-V2 diffusion-forcing one in ``dest`` (its
    weight files linked; the transformer without the fps conditioning has Wan's keys)."""
    import json
    import shutil

    for root, _, files in os.walk(wan):
        out = os.path.join(dest, os.path.relpath(root, wan))
        os.makedirs(out, exist_ok=True)
        for name in files:
            (os.symlink if name.endswith(".safetensors") else shutil.copy)(
                os.path.join(root, name), os.path.join(out, name)
            )
    for path, changes in (
        ("model_index.json", dict(_class_name="SkyReelsV2DiffusionForcingPipeline")),
        ("transformer/config.json", dict(_class_name="SkyReelsV2Transformer3DModel", inject_sample_info=False)),
    ):
        with open(os.path.join(dest, path)) as f:
            config = json.load(f)
        config.update(changes)
        if path == "model_index.json":
            config["transformer"] = ["diffusers", "SkyReelsV2Transformer3DModel"]
        with open(os.path.join(dest, path), "w") as f:
            json.dump(config, f)
    return dest


@pytest.fixture(scope="session")
def skyreels_df(ckpt, tmp_path_factory):
    """A tiny SkyReels-V2 diffusion-forcing checkpoint: the embedded one's files (:func:`df_checkpoint`)."""
    return df_checkpoint(ckpt, str(tmp_path_factory.mktemp("skyreels_df")))


@pytest.fixture(scope="session")
def skyreels_df_pipe(skyreels_df):
    """``skyreels_df`` loaded in float32, once per session (tests leave it as they found it)."""
    import vidax

    return vidax.load_pipeline(skyreels_df, dtype="float32")
