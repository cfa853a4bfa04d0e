"""vidax's CPU matmul through oneDNN: an XLA custom call (``jax.ffi``) built on the machine.

:class:`vidax.nn.layers.Linear` computes a bf16 ``x W + b`` on the CPU backend with the products
summed in float32, the bias added in float32 and the sum rounded once (torch's CPU bf16 linear);
:func:`linear` runs it either as XLA's own dot (float32 result, then the bias add and the cast) or
as oneDNN's matmul with the bias and the rounding inside the call, whichever :func:`enabled`
chooses; :func:`dot_f32` does the same for :func:`vidax.nn.layers.matmul`'s bias-free products.

In place. Inside :func:`vidax.nn.stack.scan_layers` a layer's weights are a slice of the stack,
and XLA:CPU copies each slice out of the stack before its dot, every layer of every step (for
LTX-Video 2B about 130 MB per layer, ~15 % of a bf16 step). Where :func:`reads_stacks_in_place`,
scan_layers gives each Linear a :class:`StackedKernel` instead, and the custom call reads layer
``i``'s weights in the stack itself: nothing is copied.

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

* ``auto`` (default): oneDNN for bfloat16 on a CPU with native bf16 dot products (``amx_bf16`` or
  ``avx512_bf16`` in ``/proc/cpuinfo``), the CPU backend, one device in the process (XLA's SPMD
  partitioner cannot split an opaque custom call, so a multi-device process keeps XLA's dot).
  On AMX XLA's bf16 dot reaches an eighth of torch's, which is oneDNN (issue 29); on an
  AVX512-BF16 AMD EPYC, with the weights read in place, LTX-Video's and Wan's bf16 steps take
  13 % and 33 % less time than with XLA's dot and CogVideoX's the same
  (docs/benchmarks/cpu_speed.md section 8). Off on AVX2-only CPUs, GPU and TPU.
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
from typing import Any, Callable

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
    """Whether ``auto`` picks oneDNN: native bf16 dot products in ``flags`` (AMX-BF16 or
    AVX512-BF16), the CPU ``backend``, one device."""
    return backend == "cpu" and devices == 1 and bool({"amx_bf16", "avx512_bf16"} & set(flags))


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


@functools.lru_cache(maxsize=None)
def _matmul(out_dtype: Any) -> Callable[..., jax.Array]:
    """The custom call ``(x, w, index, bias) -> y`` (see ``onednn_matmul.cc``) with a result of
    ``out_dtype``, batched under ``vmap``: a mapped axis of ``x`` alone is one more leading (row)
    axis; mapped weights, index or bias run the call once per element (``lax.map``)."""

    @jax.custom_batching.custom_vmap
    def call(x, w, index, bias):
        out = jax.ShapeDtypeStruct((*x.shape[:-1], w.shape[-1]), out_dtype)
        return jax.ffi.ffi_call(TARGET, out)(x, w, index, bias)

    @call.def_vmap
    def _vmap(axis_size, in_batched, *args):
        if not any(in_batched[1:]):
            return call(*args), True
        mapped = tuple(a for a, b in zip(args, in_batched) if b)

        def one(items):
            it = iter(items)
            return call(*[next(it) if b else a for a, b in zip(args, in_batched)])

        return jax.lax.map(one, mapped), True

    return call


def onednn_dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """oneDNN's ``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, ``x`` and ``w`` both bfloat16
    or both float32, K > 0 (needs :func:`available`); works under jit, scan and vmap."""
    return _matmul(jnp.dtype(jnp.float32))(x, w, jnp.zeros((), jnp.int32), jnp.zeros((0,), jnp.float32))


def onednn_linear(x: jax.Array, w: jax.Array, bias: jax.Array | None, out_dtype: Any,
                  index: jax.Array | None = None) -> jax.Array:
    """oneDNN's ``x (..., K) @ w + bias`` -> ``(..., N)`` in ``out_dtype`` (float32 or
    bfloat16): the products summed in float32, ``bias`` (N,) added in float32 and the sum rounded
    once. ``w`` is (K, N), or a stack (L, K, N) read in place at layer ``index`` (int32 scalar);
    ``x`` and ``w`` both bfloat16 (``w`` may be its uint16 bits) or both float32, K > 0 (needs
    :func:`available`)."""
    bias = jnp.zeros((0,), jnp.float32) if bias is None else bias.astype(jnp.float32)
    index = jnp.zeros((), jnp.int32) if index is None else jnp.asarray(index, jnp.int32)
    return _matmul(jnp.dtype(out_dtype))(x, w, index, bias)


class StackedKernel:
    """Layer ``index`` of a stack of Linear kernels, left in the stack so that
    :class:`vidax.nn.layers.Linear` reads it in place (:func:`linear`) instead of XLA:CPU copying
    each layer's weights out of the stack on every layer of every step.

    Made by :func:`vidax.nn.stack.scan_layers` where :func:`reads_stacks_in_place`; ``stack``
    (L, K, N) holds ``dtype`` (bfloat16) as its uint16 bits. Indexing it (``kernel[...]``, as
    every other reader of a parameter does) gives the layer's (K, N) array in ``dtype``: the
    slice XLA would have made.
    """

    def __init__(self, stack: jax.Array, index: jax.Array, dtype: Any):
        self.stack, self.index, self.dtype = stack, index, jnp.dtype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.stack.shape[1:])

    @property
    def ndim(self) -> int:
        return self.stack.ndim - 1

    def layer(self) -> jax.Array:
        """The layer's kernel (K, N) in ``dtype`` (a slice of the stack)."""
        w = jax.lax.dynamic_index_in_dim(self.stack, self.index, 0, keepdims=False)
        return w if w.dtype == self.dtype else jax.lax.bitcast_convert_type(w, self.dtype)

    def __getitem__(self, key: Any) -> jax.Array:
        return self.layer()[key]


def reads_stacks_in_place(dtype: Any) -> bool:
    """Whether :func:`vidax.nn.stack.scan_layers` hands the Linear kernels of a ``dtype`` stack
    to the layers as :class:`StackedKernel`: where :func:`enabled` for ``dtype`` and the process
    has one device (a stack split across devices would have to be gathered whole for the
    custom call)."""
    return jax.device_count() == 1 and enabled(dtype)


def linear(x: jax.Array, w: jax.Array | StackedKernel, bias: jax.Array | None, dtype: Any,
           precision: Any = None) -> jax.Array:
    """``x (..., K) @ w (K, N) + bias (N,)`` in ``dtype`` (bfloat16 / float16 on CPU): the
    products summed in float32, the bias added in float32, the sum rounded once (torch's CPU
    bf16 linear). oneDNN (bias and rounding inside the call) where :func:`enabled` for
    ``dtype``, else XLA's dot (``precision`` passed to it). ``w`` may be a
    :class:`StackedKernel` (read in place by oneDNN, sliced for XLA's dot)."""
    x = x.astype(dtype)
    if enabled(dtype) and x.shape[-1] > 0:
        if isinstance(w, StackedKernel):
            return onednn_linear(x, w.stack, bias, dtype, w.index)
        return onednn_linear(x, w.astype(dtype), bias, dtype)
    w = w.layer() if isinstance(w, StackedKernel) else w
    y = jax.lax.dot_general(x, w.astype(dtype), (((x.ndim - 1,), (0,)), ((), ())), precision=precision,
                            preferred_element_type=jnp.float32)
    return (y if bias is None else y + bias.astype(jnp.float32)).astype(dtype)


def dot_f32(x: jax.Array, w: jax.Array, precision: Any = None) -> jax.Array:
    """``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, both operands in the same dtype: oneDNN
    where :func:`enabled` for their dtype, else XLA's dot (``precision`` is passed to it)."""
    if w.ndim == 2 and x.ndim >= 1 and x.dtype == w.dtype and x.shape[-1] > 0 and enabled(x.dtype):
        return onednn_dot(x, w)
    return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=precision,
                               preferred_element_type=jnp.float32)
