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

Weight layout. oneDNN's bf16 matmul is 10-25 % faster with each layer's (K, N) weights stored
column-major (oneDNN's ``ba``, torch's (N, K) ``nn.Linear`` weight) than row-major (``ab``):
516x3072x12288 took 57.3 ms ``ab``, 52.4 ``ba`` and torch's ``F.linear`` 55.4 on an AVX512-BF16
EPYC (2 threads). So the kernel stacks that oneDNN reads in place are kept in
:data:`KERNEL_LAYOUT` (an XLA device-local layout: the array's shape and values are unchanged):
the loader reads them so from the file's (N, K) tensors, and
:func:`vidax.nn.kernels.stacks.lay_out_kernel_stacks` lays out any other; the call declares that layout
to XLA (``transposed``).

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
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import SetupError

log = logging.getLogger(__name__)

ENV = "VIDAX_CPU_MATMUL"
MODES = ("auto", "onednn", "xla")
TARGET = "vidax_onednn_matmul"
BATCHED_TARGET = "vidax_onednn_batched_matmul"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onednn_matmul.cc")
#: The device-local layout (major to minor) of a (L, K, N) kernel stack that oneDNN reads in
#: place: each layer's (K, N) column-major, its bytes those of torch's (L, N, K).
KERNEL_LAYOUT = (0, 2, 1)

try:  # the layout API; without it the stacks stay row-major
    from jax.experimental.layout import Format, Layout
except ImportError:  # pragma: no cover - a JAX without it
    Format = Layout = None


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


def _build(lib_dir: str, stale: str | None = None) -> str:
    """The compiled custom call for ``lib_dir``'s oneDNN: from the cache (no compiler needed),
    else built into it with ``$CXX`` (split like a shell word list: ``ccache g++`` works) or
    ``g++``. ``stale``: a cached library that failed to load, removed and built again.

    Raises:
        RuntimeError: no compiler, or the build failed (the compiler's last output lines, or its
            exit status when it printed nothing).
        SetupError: the cache folder cannot be used.
    """
    from vidax.cache import cache_subdir

    lib = os.path.realpath(os.path.join(lib_dir, "libdnnl.so.3"))
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read())
    for part in (lib, str(os.stat(lib).st_size), jax.ffi.include_dir(), jax.__version__):
        key.update(b"\0" + part.encode())
    folder = cache_subdir("onednn", key.hexdigest()[:16])
    target = os.path.join(folder, "vidax_onednn_matmul.so")
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stale == target and os.path.exists(target):
            os.remove(target)
        if os.path.exists(target):  # built before, or by another process while this one waited
            return target
        words = shlex.split(os.environ.get("CXX", "g++")) or ["g++"]
        cxx = shutil.which(words[0])
        if cxx is None:
            raise RuntimeError(f"no C++ compiler ({os.environ.get('CXX', 'g++')!r} not found) to build it")
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".so.tmp")
        os.close(fd)
        cmd = [
            cxx,
            *words[1:],
            "-O2",
            "-std=c++17",
            "-shared",
            "-fPIC",
            "-w",
            "-I",
            jax.ffi.include_dir(),
            SOURCE,
            "-o",
            tmp,
            lib,
            f"-Wl,-rpath,{os.path.dirname(lib)}",
        ]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:]) or f"exit status {r.returncode}"
                raise RuntimeError(f"the build failed ({' '.join(cmd)}): {tail}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        log.info("vidax: built the oneDNN CPU matmul (%s) into %s", lib, target)
    return target


def _would_use() -> bool:
    """Whether this process would run its bf16 CPU matmuls through oneDNN if it were available:
    asked for by name, or ``auto`` where :func:`wins`."""
    choice = mode()
    return choice == "onednn" or (choice == "auto" and wins(cpu_flags(), jax.default_backend(), jax.device_count()))


@functools.lru_cache(maxsize=1)
def load() -> str | None:
    """Builds (or finds in the cache), loads and registers the custom call with XLA, once per
    process: None when that worked, else why not. A cached library that fails to load is built
    again once. The reason is logged once: a WARNING where oneDNN would be used
    (:func:`_would_use`: bf16 matmuls then run slower on XLA's dot), else INFO."""
    lib_dir = library_dir()
    if lib_dir is None:
        why = "libdnnl.so.3 not found (pip install 'vidax[onednn]', or set VIDAX_ONEDNN_ROOT)"
    else:
        try:
            path = _build(lib_dir)
            try:
                so = ctypes.cdll.LoadLibrary(path)
            except OSError as e:
                log.info("vidax: the cached oneDNN CPU matmul %s does not load (%s); building it again", path, e)
                so = ctypes.cdll.LoadLibrary(_build(lib_dir, stale=path))
            jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(so.VidaxOnednnMatmul), platform="cpu")
            jax.ffi.register_ffi_target(BATCHED_TARGET, jax.ffi.pycapsule(so.VidaxOnednnBatchedMatmul), platform="cpu")
            return None
        except (OSError, RuntimeError, SetupError, subprocess.SubprocessError) as e:
            why = str(e)
    if _would_use():
        log.warning(
            "vidax: oneDNN CPU matmul unavailable: %s; XLA's dot is used (slower for bfloat16 here; "
            "%s=xla chooses it and silences this line)",
            why,
            ENV,
        )
    else:
        log.info("vidax: oneDNN CPU matmul unavailable: %s; XLA's dot is used", why)
    return why


def describe(dtype: Any, kept: Sequence[str] = ()) -> str | None:
    """What a ``dtype`` matmul on this process's CPU backend runs through, in words, for the run
    summary (None off the CPU backend or for dtypes that are not 16-bit floats). ``kept``: the
    formats of the transformer's Linear weights that stay quantized (``"int8"``,
    ``"float8_e4m3fn"``, ``"GGUF"``): those Linears run XLA's dot (dequantized in it), which the
    row says where oneDNN runs the rest."""
    dt = jnp.dtype(dtype)
    if jax.default_backend() != "cpu" or not (jnp.issubdtype(dt, jnp.floating) and dt.itemsize == 2):
        return None
    choice = mode()
    if dt != jnp.bfloat16:
        return f"XLA's dot ({dt.name}: oneDNN is used for bfloat16)"
    if choice == "xla":
        return f"XLA's dot ({ENV}=xla)"
    if not _would_use():
        why = (
            f"{jax.device_count()} CPU devices"
            if jax.device_count() > 1
            else "this CPU has neither AMX-BF16 nor AVX512-BF16"
        )
        return f"XLA's dot ({ENV}=auto: {why})"
    why = load()
    if why is not None:
        return f"XLA's dot (oneDNN unavailable: {why})"
    row = f"oneDNN ({ENV}={choice}" + ("; layer weights read in place)" if reads_stacks_in_place(dt) else ")")
    if kept:
        row += f"; XLA's dot for the {' / '.join(kept)} weights"
    return row


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


@functools.lru_cache(maxsize=16)
def _matmul(out_dtype: Any, transposed: bool = False) -> Callable[..., jax.Array]:
    """The custom call ``(x, w, index, bias) -> y`` (see ``onednn_matmul.cc``) with a result of
    ``out_dtype``, batched under ``vmap``: a mapped axis of ``x`` alone is one more leading (row)
    axis; mapped weights, index or bias run the call once per element (``lax.map``).
    ``transposed``: the call takes ``w`` in :data:`KERNEL_LAYOUT` (each (K, N) matrix stored
    column-major, as torch's (N, K) weight); XLA relays ``w`` out first where it is not."""

    def call(x, w, index, bias):
        out = jax.ShapeDtypeStruct((*x.shape[:-1], w.shape[-1]), out_dtype)
        layouts = None
        if transposed:
            layouts = [None, (*range(w.ndim - 2), w.ndim - 1, w.ndim - 2), None, None]
        return jax.ffi.ffi_call(TARGET, out, input_layouts=layouts)(x, w, index, bias, transposed=transposed)

    return _batched_by_map(call, rows_first=True)


def _batched_by_map(fn: Callable[..., jax.Array], rows_first: bool) -> Callable[..., jax.Array]:
    """``fn`` under ``vmap``: run once per element of the mapped arguments (``lax.map``);
    ``rows_first``: a mapped first argument alone (a matmul's rows) is passed as it is, its
    mapped axis one more leading row axis."""
    call = jax.custom_batching.custom_vmap(fn)

    @call.def_vmap
    def _vmap(axis_size, in_batched, *args):
        if rows_first and not any(in_batched[1:]):
            return call(*args), True
        mapped = tuple(a for a, b in zip(args, in_batched) if b)

        def one(items):
            it = iter(items)
            return call(*[next(it) if b else a for a, b in zip(args, in_batched)])

        return jax.lax.map(one, mapped), True

    return call


@functools.lru_cache(maxsize=64)  # one entry per batched matmul shape in use
def _batched(out_shape: tuple, out_dtype: Any, dims: tuple, strides: tuple) -> Callable[..., jax.Array]:
    """The batched custom call ``(a, b) -> y`` (``onednn_matmul.cc``: ``y = a @ b`` over (B, H)
    through the given element strides), batched under ``vmap`` by running it once per element."""
    attrs = {
        "dims": np.asarray(dims, np.int64),
        "a_strides": np.asarray(strides[0], np.int64),
        "b_strides": np.asarray(strides[1], np.int64),
        "y_strides": np.asarray(strides[2], np.int64),
    }

    def call(a, b):
        return jax.ffi.ffi_call(BATCHED_TARGET, jax.ShapeDtypeStruct(out_shape, out_dtype))(a, b, **attrs)

    return _batched_by_map(call, rows_first=False)


def attention_scores(q: jax.Array, k: jax.Array) -> jax.Array:
    """``q (B, Lq, H, D) . k (B, Lk, H, D)`` over D -> float32 scores (B, H, Lq, Lk) by oneDNN,
    reading q and k where they are (no transposition to heads-major); both bfloat16 or both
    float32, products summed in float32 (as XLA's ``einsum("bqhd,bkhd->bhqk",
    preferred_element_type=float32)``). Needs :func:`available`."""
    b, lq, h, d = q.shape
    lk = k.shape[1]
    strides = ((lq * h * d, d, h * d, 1), (lk * h * d, d, 1, h * d), (h * lq * lk, lq * lk, lk, 1))
    return _batched((b, h, lq, lk), jnp.dtype(jnp.float32), (b, h, lq, d, lk), strides)(q, k)


def attention_values(p: jax.Array, v: jax.Array, out_dtype: Any) -> jax.Array:
    """``p (B, H, Lq, Lk) @ v (B, Lk, H, D)`` -> (B, Lq, H, D) in ``out_dtype`` (float32 or
    bfloat16, rounded once from the float32 sums) by oneDNN, reading v and writing the result
    in the (B, L, H, D) order directly; p and v both bfloat16 or both float32. Needs
    :func:`available`."""
    b, h, lq, lk = p.shape
    d = v.shape[-1]
    strides = ((h * lq * lk, lq * lk, lk, 1), (lk * h * d, d, h * d, 1), (lq * h * d, d, h * d, 1))
    return _batched((b, lq, h, d), jnp.dtype(out_dtype), (b, h, lq, lk, d), strides)(p, v)


def onednn_dot(x: jax.Array, w: jax.Array) -> jax.Array:
    """oneDNN's ``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, ``x`` and ``w`` both bfloat16
    or both float32, K > 0 (needs :func:`available`); works under jit, scan and vmap."""
    return _matmul(jnp.dtype(jnp.float32))(x, w, jnp.zeros((), jnp.int32), jnp.zeros((0,), jnp.float32))


def onednn_linear(
    x: jax.Array,
    w: jax.Array,
    bias: jax.Array | None,
    out_dtype: Any,
    index: jax.Array | None = None,
    transposed: bool = False,
) -> jax.Array:
    """oneDNN's ``x (..., K) @ w + bias`` -> ``(..., N)`` in ``out_dtype`` (float32 or
    bfloat16): the products summed in float32, ``bias`` (N,) added in float32 and the sum rounded
    once. ``w`` is (K, N), or a stack (L, K, N) read in place at layer ``index`` (int32 scalar);
    ``x`` and ``w`` both bfloat16 (``w`` may be its uint16 bits) or both float32, K > 0 (needs
    :func:`available`). ``transposed``: the call reads ``w`` in :data:`KERNEL_LAYOUT` (XLA
    relays out a ``w`` that is not, a copy of it per call)."""
    bias = jnp.zeros((0,), jnp.float32) if bias is None else bias.astype(jnp.float32)
    index = jnp.zeros((), jnp.int32) if index is None else jnp.asarray(index, jnp.int32)
    return _matmul(jnp.dtype(out_dtype), bool(transposed))(x, w, index, bias)


class StackedKernel:
    """Layer ``index`` of a stack of Linear kernels, left in the stack so that
    :class:`vidax.nn.layers.Linear` reads it in place (:func:`linear`) instead of XLA:CPU copying
    each layer's weights out of the stack on every layer of every step.

    Made by :func:`vidax.nn.stack.scan_layers` where :func:`reads_stacks_in_place`; ``stack``
    (L, K, N) holds ``dtype`` (bfloat16) as its uint16 bits, or (``transposed``) is the bfloat16
    stack kept in :data:`KERNEL_LAYOUT`. Indexing it (``kernel[...]``, as every other reader of
    a parameter does) gives the layer's (K, N) array in ``dtype``: the slice XLA would have made.
    """

    def __init__(self, stack: jax.Array, index: jax.Array, dtype: Any, transposed: bool = False):
        self.stack, self.index, self.dtype, self.transposed = stack, index, jnp.dtype(dtype), transposed

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


def has_kernel_layout(a: Any) -> bool:
    """Whether ``a`` is a 3-D ``jax.Array`` held in :data:`KERNEL_LAYOUT`."""
    fmt = getattr(a, "format", None) if isinstance(a, jax.Array) and a.ndim == 3 else None
    layout = getattr(fmt, "layout", None)
    return tuple(getattr(layout, "major_to_minor", ()) or ()) == KERNEL_LAYOUT


def with_layout_of(a: Any, sharding: jax.sharding.Sharding) -> Any:
    """Where ``jax.device_put`` sends a copy of ``a`` to ``sharding`` (e.g. another memory kind)
    keeping ``a``'s layout: ``sharding`` itself for a row-major ``a``, a ``Format`` for a stack
    in :data:`KERNEL_LAYOUT` (``device_put`` to a plain sharding would make it row-major: a
    transposing copy now and another one to lay it out again)."""
    return Format(Layout(major_to_minor=KERNEL_LAYOUT), sharding) if has_kernel_layout(a) else sharding


@functools.lru_cache(maxsize=1)
def has_layout_api() -> bool:
    """Whether this JAX has the layout API the kernel layout needs (``jax.experimental.layout``'s
    ``Format`` / ``Layout``, and arrays that tell their ``format``); without it the stacks stay
    row-major."""
    return Format is not None and hasattr(jnp.zeros(()), "format")


def to_kernel_layout(a: jax.Array) -> jax.Array | None:
    """``a`` (a (L, K, N) array on one device) in :data:`KERNEL_LAYOUT`, the same values (a
    transposing copy: about 2 s per GB of bfloat16 on 2 cores; ``a`` itself when it has the
    layout already), or None where this JAX has no layout API."""
    if not has_layout_api():
        return None
    if has_kernel_layout(a):
        return a
    return jax.device_put(a, Format(Layout(major_to_minor=KERNEL_LAYOUT), a.sharding))


@functools.lru_cache(maxsize=16)
def _swap_into_kernel_layout(sharding: jax.sharding.Sharding) -> Callable[[jax.Array], jax.Array]:
    return jax.jit(
        lambda a: jnp.swapaxes(a, 1, 2),
        donate_argnums=0,
        out_shardings=Format(Layout(major_to_minor=KERNEL_LAYOUT), sharding),
    )


def from_torch_layout(a: jax.Array) -> jax.Array:
    """A row-major (L, N, K) stack of torch ``nn.Linear`` weights (donated) as the (L, K, N)
    kernel stack in :data:`KERNEL_LAYOUT`: the same bytes, so the same buffer (no copy).
    Needs the layout API (:func:`has_layout_api`)."""
    return _swap_into_kernel_layout(a.sharding)(a)


def linear(
    x: jax.Array, w: jax.Array | StackedKernel, bias: jax.Array | None, dtype: Any, precision: Any = None
) -> jax.Array:
    """``x (..., K) @ w (K, N) + bias (N,)`` in ``dtype`` (bfloat16 / float16 on CPU): the
    products summed in float32, the bias added in float32, the sum rounded once (torch's CPU
    bf16 linear). oneDNN (bias and rounding inside the call) where :func:`enabled` for
    ``dtype``, else XLA's dot (``precision`` passed to it). ``w`` may be a
    :class:`StackedKernel` (read in place by oneDNN, sliced for XLA's dot)."""
    x = x.astype(dtype)
    if enabled(dtype) and x.shape[-1] > 0:
        if isinstance(w, StackedKernel):
            return onednn_linear(x, w.stack, bias, dtype, w.index, w.transposed)
        return onednn_linear(x, w.astype(dtype), bias, dtype)
    w = w.layer() if isinstance(w, StackedKernel) else w
    y = jax.lax.dot_general(
        x, w.astype(dtype), (((x.ndim - 1,), (0,)), ((), ())), precision=precision, preferred_element_type=jnp.float32
    )
    return (y if bias is None else y + bias.astype(jnp.float32)).astype(dtype)


def dot_f32(x: jax.Array, w: jax.Array, precision: Any = None) -> jax.Array:
    """``x (..., K) @ w (K, N)`` -> ``(..., N)`` float32, both operands in the same dtype: oneDNN
    where :func:`enabled` for their dtype, else XLA's dot (``precision`` is passed to it)."""
    if w.ndim == 2 and x.ndim >= 1 and x.dtype == w.dtype and x.shape[-1] > 0 and enabled(x.dtype):
        return onednn_dot(x, w)
    return jax.lax.dot_general(
        x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=precision, preferred_element_type=jnp.float32
    )
