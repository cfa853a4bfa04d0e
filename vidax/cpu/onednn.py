"""vidax's CPU matmul through oneDNN: an XLA custom call (``jax.ffi``) built on the machine.

:func:`vidax.nn.layers.matmul` and :class:`vidax.nn.layers.Linear` compute a bf16 ``x W`` on the
CPU backend as a dot with a float32 result (:func:`vidax.nn.layers.xla_cpu_upcasts`);
:func:`dot_f32` runs that dot either as XLA's own dot or as oneDNN's matmul, whichever
:func:`enabled` chooses.

Build. ``onednn_matmul.cc`` (next to this file) is compiled with the C++ compiler (``$CXX``, else
``g++``) against jaxlib's FFI headers (``jax.ffi.include_dir()``) and linked to ``libdnnl.so.3``
(oneDNN 3.x, e.g. the ``onednn-cpu-gomp`` wheel: ``pip install 'vidax[onednn]'``), once per
source / library / jaxlib / compiler, into ``<vidax cache>/onednn/<hash>/`` (a file lock for
concurrent first uses, an atomic rename of the finished library); one INFO log line says so.
Where the compiler, the library or the cache folder are missing, or the build fails, the reason is
logged once at INFO and XLA's dot is used.

The library is looked for in ``$VIDAX_ONEDNN_ROOT/lib``, ``$DNNLROOT/lib``, then ``lib`` under the
Python environment's prefix and the user base (where the wheels put it).

Switch: ``VIDAX_CPU_MATMUL``

* ``auto`` (default): oneDNN for bfloat16 on a CPU with AMX-BF16 (``amx_bf16`` in
  ``/proc/cpuinfo``: there XLA's bf16 dot reaches an eighth of torch's, which is oneDNN; issue 29), the CPU
  backend, one device in the process (XLA's SPMD partitioner cannot split an opaque custom call,
  so a multi-device process keeps XLA's dot). Off elsewhere: on an AVX512-BF16 AMD EPYC it made
  LTX-Video's and Wan's bf16 steps take 0-43 % less time but CogVideoX's slower in 3 of 4 runs
  (docs/benchmarks/cpu_speed.md section 6); off on AVX2-only CPUs, GPU and TPU.
* ``onednn``: oneDNN for every bfloat16 dot on the CPU backend, whatever the CPU or device count
  (benchmarks, tests); XLA's dot where it cannot be built.
* ``xla``: XLA's dot always.

float32 always uses XLA's dot: oneDNN did not beat it on the CPU measured (and was 2.5x slower
on Wan's 64-row qkv).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import site
import subprocess
import sys
import tempfile
from typing import Any

import jax
import jax.numpy as jnp

from vidax.errors import SetupError

log = logging.getLogger(__name__)

ENV = "VIDAX_CPU_MATMUL"
MODES = ("auto", "onednn", "xla")
TARGET = "vidax_onednn_matmul"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onednn_matmul.cc")


def mode() -> str:
    """``$VIDAX_CPU_MATMUL`` (``auto`` when unset).

    Raises:
        SetupError: a value other than ``auto``, ``onednn``, ``xla`` (one line naming it).
    """
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise SetupError(f"{ENV}={os.environ[ENV]!r} is not a CPU matmul; valid: {', '.join(MODES)}")
    return value


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def wins(flags: frozenset[str] | set[str], backend: str, devices: int) -> bool:
    """Whether ``auto`` picks oneDNN: AMX-BF16 in ``flags``, the CPU ``backend``, one device."""
    return backend == "cpu" and devices == 1 and "amx_bf16" in flags


def library_dir() -> str | None:
    """The folder holding ``libdnnl.so.3`` (see the module's docstring), or None."""
    roots = [os.environ.get("VIDAX_ONEDNN_ROOT"), os.environ.get("DNNLROOT"), sys.prefix, site.getuserbase()]
    for root in filter(None, roots):
        for sub in ("lib", "lib64"):
            folder = os.path.join(root, sub)
            if os.path.exists(os.path.join(folder, "libdnnl.so.3")):
                return folder
    return None


def _build(lib_dir: str) -> str:
    """The compiled custom call for ``lib_dir``'s oneDNN: from the cache, else built into it.

    Raises:
        RuntimeError: no compiler, or the build failed (the compiler's last output lines).
        SetupError: the cache folder cannot be used.
    """
    from vidax.cache import cache_subdir

    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise RuntimeError(f"no C++ compiler ({os.environ.get('CXX', 'g++')!r} not found)")
    lib = os.path.realpath(os.path.join(lib_dir, "libdnnl.so.3"))
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read())
    for part in (lib, str(os.stat(lib).st_size), jax.ffi.include_dir(), jax.__version__, cxx):
        key.update(b"\0" + part.encode())
    folder = cache_subdir("onednn", key.hexdigest()[:16])
    target = os.path.join(folder, "vidax_onednn_matmul.so")
    if os.path.exists(target):
        return target
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(target):  # another process built it while this one waited
            return target
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".so.tmp")
        os.close(fd)
        cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-w", "-I", jax.ffi.include_dir(), SOURCE, "-o", tmp,
               lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
                raise RuntimeError(f"the build failed ({' '.join(cmd)}): {tail}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        log.info("vidax: built the oneDNN CPU matmul (%s) into %s", lib, target)
    return target


@functools.lru_cache(maxsize=1)
def load() -> str | None:
    """Builds (or finds in the cache), loads and registers the custom call with XLA, once per
    process: None when that worked, else why not (also logged once at INFO)."""
    lib_dir = library_dir()
    if lib_dir is None:
        why = "libdnnl.so.3 not found (pip install 'vidax[onednn]', or set VIDAX_ONEDNN_ROOT)"
    else:
        try:
            so = ctypes.cdll.LoadLibrary(_build(lib_dir))
            jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(so.VidaxOnednnMatmul), platform="cpu")
            return None
        except (OSError, RuntimeError, SetupError, subprocess.SubprocessError) as e:
            why = str(e)
    # Asked for by name (VIDAX_CPU_MATMUL=onednn), the fallback is a WARNING; under auto, INFO.
    log.log(logging.WARNING if mode() == "onednn" else logging.INFO,
            "vidax: oneDNN CPU matmul unavailable: %s; XLA's dot is used", why)
    return why


def available() -> bool:
    """Whether the custom call is registered with XLA (:func:`load`)."""
    return load() is None


def enabled(dtype: Any) -> bool:
    """Whether a ``dtype`` dot on this process's default backend runs through oneDNN
    (:func:`mode`, :func:`wins`, :func:`available`).

    Raises:
        SetupError: ``$VIDAX_CPU_MATMUL`` is not a valid value.
    """
    choice = mode()
    if choice == "xla" or jnp.dtype(dtype) != jnp.bfloat16 or jax.default_backend() != "cpu":
        return False
    if choice == "auto" and not wins(cpu_flags(), "cpu", jax.device_count()):
        return False
    return available()


@jax.custom_batching.custom_vmap
def onednn_dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """oneDNN's ``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, ``x`` and ``w`` both bfloat16
    or both float32 (needs :func:`available`); works under jit, scan and vmap."""
    out = jax.ShapeDtypeStruct((*x.shape[:-1], w.shape[-1]), jnp.float32)
    return jax.ffi.ffi_call(TARGET, out)(x, w)


@onednn_dot.def_vmap
def _onednn_dot_vmap(axis_size, in_batched, x, w):
    x_batched, w_batched = in_batched
    if not w_batched:  # the mapped axis of x is one more leading (row) axis
        return onednn_dot(x, w), True
    x = x if x_batched else jnp.broadcast_to(x, (axis_size, *x.shape))
    return jax.lax.map(lambda xw: onednn_dot(*xw), (x, w)), True


def dot_f32(x: jax.Array, w: jax.Array, precision: Any = None) -> jax.Array:
    """``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, both operands in the same dtype: oneDNN
    where :func:`enabled` for their dtype, else XLA's dot (``precision`` is passed to it)."""
    if w.ndim == 2 and x.ndim >= 1 and x.dtype == w.dtype and enabled(x.dtype):
        return onednn_dot(x, w)
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=precision,
                               preferred_element_type=jnp.float32)
