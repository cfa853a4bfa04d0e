"""Exceptions raised by vidax for bad input, bad checkpoints and bad configs.

Every error names the argument (or file / key), the value it got and what is valid, so that
a user can fix the call without reading vidax's source. An argument is named as data
(:class:`Arg` among the message's parts): Python reads it as the keyword (``num_frames=3``),
``vidax generate`` as the flag the user typed (``--num-frames 3``).
"""

import dataclasses
import decimal
import math
import numbers
import re
from collections.abc import Callable
from typing import Any

_NO_VALUE = object()

#: A number as vidax reads typed text: decimal digits with an optional point and exponent.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NOT_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
#: The largest magnitude of an integer read from text (int64's): what numpy and JAX hold.
MAX_TYPED_INT = 2**63 - 1


def typed_number(text: str, integer: bool = False) -> int | float | None:
    """The number ``text`` spells, by the one rule of vidax's front ends (a flag of ``vidax
    generate`` / ``serve``, a form field or a JSON number's text sent to ``vidax serve``):
    decimal digits with an optional point and exponent (``16``, ``2.50``, ``1e3``, ``-1E0``), or
    nan / inf / infinity in any case, spaces around them ignored, as a float. Python's other
    spellings (``1_0``, ``0x10``, non-ASCII digits) spell no number: None.

    integer: the int of an integral value (``16``, ``16.0``, ``1e3``) of magnitude at most
    :data:`MAX_TYPED_INT`; an integral value beyond it (``1e99``) as inf with its sign; None for
    any other (``2.50``, ``nan``, ``inf``)."""
    text = text.strip()
    if _NOT_FINITE.fullmatch(text):
        return None if integer else float(text)
    if not _DECIMAL.fullmatch(text):
        return None
    if not integer:
        return float(text)
    exact = decimal.Decimal(text)  # exact, also for 1e999999999 (float() would round, int() would be huge)
    if exact != exact.to_integral_value():
        return None
    return int(exact) if abs(exact) <= MAX_TYPED_INT else math.copysign(math.inf, exact)


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

    def shown_as(self, text: str | None) -> str:
        """The value as the user gave it: ``text`` (what was typed after the flag, a JSON number
        as the request sent it) when it spells the value, a number (``1e30`` for 1e+30, ``2``
        for 2.0, ``NaN`` for nan); else :meth:`shown_value`."""
        value = self.value
        if (
            text is not None
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and typed_number(text) is not None
        ):
            if isinstance(value, int):  # exactly: 1e99 spells 10**99, not the int nearest to float 1e99
                same = decimal.Decimal(text.strip()) == value
            else:
                same = float(text) == value or math.isnan(float(text)) and math.isnan(value)
            if same:
                return text
        return self.shown_value()

    def spelled(self, flag: str, text: str | None = None) -> str:
        """The argument as the flag ``flag``: ``--flag value`` (the value as :meth:`shown_as`
        ``text``), or ``--flag``."""
        return f"{flag} {self.shown_as(text)}" if self.has_value else flag

    def __str__(self) -> str:
        if self.python is not None:
            return self.python
        if self.has_value:
            return f"{self.name}={self.shown_value()}"
        return f"{self.name}=" if self.keyword else self.name


@dataclasses.dataclass(frozen=True)
class ArgValue(Arg):
    """The value an argument got, alone in a message (``"seed must be an integer, got 2.5"``):
    each front end writes it as the user gave it (``vidax generate`` as typed after the flag,
    ``vidax serve`` as the request sent it, :meth:`Arg.shown_as`), Python as :meth:`shown_value`.
    Not counted among a message's ``arguments``."""

    def shown_value(self) -> str:
        """A number as its digits (a numpy number too: ``1e+39``, not ``np.float64(1e+39)``);
        anything else as its repr, so that its type shows (``'2'``, ``array(5)``)."""
        value = self.value
        number = isinstance(value, numbers.Number) or (
            type(value).__module__ == "numpy" and not hasattr(value, "__len__")
        )  # a numpy scalar
        return str(value) if number else repr(value)

    def __str__(self) -> str:
        return self.shown_value()


class Message:
    """Message parts (strings, :class:`Arg`, nested messages) kept apart until they are written:
    ``str()`` names arguments as Python keywords, :meth:`render` as a front end spells them. A
    log record's argument may be one (``logger.warning("%s is far beyond ...", message)``)."""

    def __init__(self, *parts: Any):
        self.parts = tuple(parts)

    def render(self, spell: Callable[[Arg], str]) -> str:
        """The text with each :class:`Arg` written as ``spell(arg)``."""
        return "".join(
            spell(p) if isinstance(p, Arg) else p.render(spell) if isinstance(p, Message) else str(p)
            for p in self.parts
        )

    @property
    def arguments(self) -> tuple[str, ...]:
        named = lambda p: isinstance(p, Arg) and not isinstance(p, ArgValue)  # noqa: E731
        return tuple(
            a for p in self.parts for a in ((p.name,) if named(p) else p.arguments if isinstance(p, Message) else ())
        )

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
