"""JAX's persistent compilation cache, on by default: a later process reads the compiled
denoising step, text encoder and VAE back from disk instead of compiling them again.

:func:`setup_compile_cache` points JAX at ``<user cache dir>/jax_compile_cache`` (the folder of
:func:`vidax.default_checkpoint.cache_dir`: ``$VIDAX_CACHE_DIR`` or
``platformdirs.user_cache_dir("vidax")``). ``VIDAX_COMPILE_CACHE`` changes that: ``0`` / ``off``
/ ``false`` / ``no`` turns it off, a path puts it there. A user who configured JAX's cache
themselves (``jax_compilation_cache_dir``, e.g. ``JAX_COMPILATION_CACHE_DIR``, or
``jax_enable_compilation_cache=False``) keeps their setting.

JAX's configuration is process-global, so the cache is set up once per process: the first
call decides (``vidax generate`` and :func:`vidax.load_pipeline` make it) and later calls see
the folder already configured and keep it, whatever ``VIDAX_COMPILE_CACHE`` says by then.

:func:`count_compiles` counts, from JAX's own monitoring events, the XLA compilations made
while it is active and how many of them were read from the persistent cache; the run summary
(:mod:`vidax.stats`) reports them per phase.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator

import jax

from vidax.errors import SetupError

logger = logging.getLogger("vidax.compile_cache")

ENV = "VIDAX_COMPILE_CACHE"
_OFF = ("0", "off", "false", "no")
# JAX's default for jax_persistent_cache_min_compile_time_secs: a value still at it was not
# chosen by the user. It would leave out every compile under a second (the tiny checkpoint's
# step, and on a fast machine small VAE chunks), so vidax caches every compile instead.
_JAX_DEFAULT_MIN_COMPILE_S = 1.0

# JAX's monitoring events (jax/_src/dispatch.py, compiler.py, compilation_cache.py; the same
# names in JAX 0.10 and 0.11): every XLA compilation that was not in the in-memory cache records
# a backend-compile duration, whether the persistent cache then has it or not; a persistent
# cache hit records cache_hits; writing a new entry records cache_misses.
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_WRITE_EVENT = "/jax/compilation_cache/cache_misses"


def default_compile_cache_dir() -> str:
    """``<vidax user cache dir>/jax_compile_cache``, where the cache goes when nothing else is said."""
    from vidax.cache import cache_dir

    return os.path.join(cache_dir(), "jax_compile_cache")


def setup_compile_cache(enabled: bool = True) -> str | None:
    """Turn on JAX's persistent compilation cache for this process (once; see the module doc).

    Args:
        enabled: False turns the cache off for this process (``jax_enable_compilation_cache``
            set to False: ``vidax generate --no-compile-cache``), whatever else is configured.

    Returns:
        The cache folder JAX now uses, or None when the cache is off (``enabled=False``,
        ``VIDAX_COMPILE_CACHE=0``, the user disabled JAX's cache, or the platform's default user
        cache folder cannot be written: that is logged as a warning and the run goes on compiling).

    Raises:
        SetupError: ``VIDAX_COMPILE_CACHE`` or ``VIDAX_CACHE_DIR`` names a folder that cannot be
            created or written (a file, under a file, read-only); the message names the variable.

    With the cache on, ``jax_persistent_cache_min_compile_time_secs`` still at JAX's default
    (1 s) is set to 0 s and ``jax_persistent_cache_min_entry_size_bytes`` still at its default
    (0) to -1 (no size minimum), so every compile is written, however short or small: on a
    local disk reading an entry back is faster than compiling even a small function. Values the
    user set are kept.
    """
    if not enabled:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    if not jax.config.jax_enable_compilation_cache:
        return None
    configured = jax.config.jax_compilation_cache_dir
    if configured:  # the user's own, or set up earlier in this process
        return configured
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() in _OFF:
        return None
    from vidax.cache import ENV as CACHE_ENV
    from vidax.cache import cache_subdir, usable_folder

    if setting:
        path = usable_folder(
            os.path.abspath(os.path.expanduser(setting)),
            f"{ENV}={setting!r}",
            f"set {ENV} to a writable folder, or to 0 to compile without a cache",
        )
    elif os.environ.get(CACHE_ENV):
        path = cache_subdir("jax_compile_cache")
    else:
        try:
            path = cache_subdir("jax_compile_cache")
        except SetupError as e:  # the platform's default folder: the run goes on without the cache
            logger.warning("%s; compiling without a persistent cache", e)
            return None
    jax.config.update("jax_compilation_cache_dir", path)
    if jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_MIN_COMPILE_S:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if jax.config.jax_persistent_cache_min_entry_size_bytes == 0:  # JAX's default
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    logger.info("persistent compilation cache: %s", path)
    return path


def compile_cache_dir() -> str | None:
    """The folder of JAX's persistent compilation cache in this process, or None when it is off."""
    if not jax.config.jax_enable_compilation_cache:
        return None
    return jax.config.jax_compilation_cache_dir or None


@dataclasses.dataclass
class CompileCounts:
    """XLA compilations seen by :func:`count_compiles`.

    Attributes:
        compiled: compilations that were not in this process's in-memory cache (each a fresh
            compile or a read from the persistent cache).
        from_cache: those of them read from the persistent compilation cache.
        written: new entries written to the persistent cache.
        programs: ``compiled`` by the name of the jitted function (JAX's ``fun_name``; ``"?"``
            where JAX gives none), e.g. ``{"jit(_decode_chunk)": 1, "jit(stage)": 1}``.
    """

    compiled: int = 0
    from_cache: int = 0
    written: int = 0
    programs: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def add(self, other: CompileCounts) -> None:
        """Add ``other``'s counts to these."""
        self.compiled += other.compiled
        self.from_cache += other.from_cache
        self.written += other.written
        self.programs.update(other.programs)


@contextlib.contextmanager
def count_compiles() -> Iterator[CompileCounts]:
    """Count the compilations made inside the ``with`` block (``with count_compiles() as c:``).

    Uses ``jax.monitoring`` listeners, registered for the block and removed after it. JAX's
    listeners are process-wide: compilations made meanwhile by other threads count too.
    """
    counts = CompileCounts()

    def on_event(event: str, **_: object) -> None:
        if event == _HIT_EVENT:
            counts.from_cache += 1
        elif event == _WRITE_EVENT:
            counts.written += 1

    def on_duration(event: str, _duration: float, **kwargs: object) -> None:
        if event == _COMPILE_EVENT:
            counts.compiled += 1
            counts.programs[str(kwargs.get("fun_name", "?"))] += 1

    jax.monitoring.register_event_listener(on_event)
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        yield counts
    finally:
        jax.monitoring.unregister_event_listener(on_event)
        jax.monitoring.unregister_event_duration_listener(on_duration)
