"""Exceptions raised by vidax for bad input, bad checkpoints and bad configs.

Every error names the argument (or file / key), the value it got and what is valid, so that
a user can fix the call without reading vidax's source. An argument is named as data
(:class:`Arg` among the message's parts): Python reads it as the keyword (``num_frames=3``),
``vidax generate`` as the flag the user typed (``--num-frames 3``).
"""


import dataclasses
from typing import Any, Callable

_NO_VALUE = object()


@dataclasses.dataclass(frozen=True)
class Arg:
    """An argument named in a message, kept as data so that each front end spells it as the user
    typed it: Python as the keyword (``str(Arg("seed", 5))`` is ``seed=5``), ``vidax generate``
    as its flag (``--seed 5``, :meth:`spelled`).

    Attributes:
        name: the Python keyword (``"num_inference_steps"``).
        value: shown after the name (a string as its repr, anything else as str); left out: the
            name alone (``"num_inference_steps must be ..."``).
        keyword: a hint naming the keyword to give or drop, without a value (``image=`` in
            Python, ``--image`` on the command line).
        python: how Python spells it where that is not the keyword (``"pipe.memory_check = False"``).
    """

    name: str
    value: Any = _NO_VALUE
    keyword: bool = False
    python: str | None = None

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE

    def shown_value(self) -> str:
        return repr(self.value) if isinstance(self.value, str) else str(self.value)

    def spelled(self, flag: str) -> str:
        """The argument as the flag ``flag``: ``--flag value``, or ``--flag``."""
        return f"{flag} {self.shown_value()}" if self.has_value else flag

    def __str__(self) -> str:
        if self.python is not None:
            return self.python
        if self.has_value:
            return f"{self.name}={self.shown_value()}"
        return f"{self.name}=" if self.keyword else self.name


class Message:
    """Message parts (strings, :class:`Arg`, nested messages) kept apart until they are written:
    ``str()`` names arguments as Python keywords, :meth:`render` as a front end spells them. A
    log record's argument may be one (``logger.warning("%s is far beyond ...", message)``)."""

    def __init__(self, *parts: Any):
        self.parts = tuple(parts)

    def render(self, spell: Callable[[Arg], str]) -> str:
        """The text with each :class:`Arg` written as ``spell(arg)``."""
        return "".join(spell(p) if isinstance(p, Arg) else p.render(spell) if isinstance(p, Message) else str(p)
                       for p in self.parts)

    @property
    def arguments(self) -> tuple[str, ...]:
        return tuple(a for p in self.parts for a in ((p.name,) if isinstance(p, Arg) else
                                                      p.arguments if isinstance(p, Message) else ()))

    def __str__(self) -> str:
        return self.render(str)


def joined(items: Any, separator: str = ", ") -> list:
    """Message parts: ``items`` (strings, :class:`Arg`, :class:`Message`) with ``separator``
    between them."""
    parts: list = []
    for item in items:
        parts += [separator] * bool(parts) + [item]
    return parts


class VidaxError(Exception):
    """Base class of every error vidax raises on purpose.

    The message is given as parts: strings, :class:`Arg` (the arguments it names) and
    :class:`Message`, joined;
    ``str(error)`` names each argument as its Python keyword, :meth:`render` as a front end
    spells it (``vidax generate``: its flag). ``arguments``: the names of the arguments the
    message names, in order.
    """

    def __init__(self, *parts: Any):
        self.message = Message(*parts)
        super().__init__(str(self.message))

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.message.arguments

    def render(self, spell: Callable[[Arg], str]) -> str:
        """The message with each :class:`Arg` written as ``spell(arg)``."""
        return self.message.render(spell)


class InputError(VidaxError, ValueError):
    """A call argument (prompt, size, frame count, dtype, output path, ...) is not valid."""


class ConfigError(VidaxError, ValueError):
    """A checkpoint's config.json asks for something vidax does not implement, or is malformed."""


class CheckpointError(VidaxError):
    """A checkpoint is missing files, or its tensors do not match the model 1:1."""


class NumericalError(VidaxError, FloatingPointError):
    """A run's values went NaN/Inf (e.g. a bfloat16 overflow); the message names the step or
    the component (transformer step k, the VAE decode). Also a ``FloatingPointError``."""


#: The line the ``vidax`` command prints for Ctrl-C before a run started (exit status 130).
INTERRUPTED = "interrupted (SIGINT) before the run started; nothing was written"


class Cancelled(VidaxError):
    """A run stopped on request: the call's ``cancel`` (a ``threading.Event`` or a callable
    returning True) was set, or ``vidax generate`` got SIGINT / SIGTERM. It is checked before
    every denoising step (and between the streamed block chunks of an offloaded step), before
    every VAE decode chunk and after the prompt encoding; nothing of the run is returned.

    Attributes:
        done: how far the run got, e.g. ``"after denoising step 3 of 10"``.
    """

    def __init__(self, done: str):
        super().__init__(f"cancelled {done}")
        self.done = done


class SetupError(VidaxError):
    """The process's setting cannot run vidax: an environment variable names a folder or a JAX
    backend that cannot be used (``VIDAX_CACHE_DIR``, ``VIDAX_COMPILE_CACHE``, ``JAX_PLATFORMS``);
    the message names the variable, its value and what to set instead."""


class OutOfMemoryError(VidaxError, MemoryError):
    """A run needs more memory than the device (or, on CPU, the host) has: refused before any work
    from the run-size estimate, or caught when an allocation failed during the run. The message
    gives the estimate and what to try. Also a ``MemoryError``."""
