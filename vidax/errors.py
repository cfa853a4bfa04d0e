"""Exceptions raised by vidax for bad input, bad checkpoints and bad configs.

Every error names the argument (or file / key), the value it got and what is valid, so that
a user can fix the call without reading vidax's source.
"""


class VidaxError(Exception):
    """Base class of every error vidax raises on purpose."""


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
