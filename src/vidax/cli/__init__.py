"""The ``vidax`` command line: ``vidax generate``, ``vidax inspect`` and ``vidax serve``.

* :mod:`vidax.cli.app`: the typer app, its three commands and :func:`main` (the entry point).
* :mod:`vidax.cli.flags`: the flags, declared once as the fields of frozen dataclasses
  (``LoadFlags``, shared; ``GenerateFlags``; ``ServeFlags``), and the call keywords offered as
  flags (:func:`call_options`).
* :mod:`vidax.cli.records`: the flags checked once into the records the commands run
  (``LoadOptions``, ``GenerateRequest``, ``ServeOptions``).
* :mod:`vidax.cli.commands`: the click commands (number flags read by one rule, the declared
  call keywords as flags) and how errors name flags (:class:`Spelling`).
* :mod:`vidax.cli.generating`, :mod:`vidax.cli.inspecting`, :mod:`vidax.cli.serving`: what
  each command runs.
"""

from vidax.cli.app import app, generate, main, serve
from vidax.cli.commands import Spelling, declared_params
from vidax.cli.flags import DTYPE_CHOICES, SINGLE_FILE_LAYOUTS, call_options
from vidax.cli.records import lora_files

__all__ = [
    "DTYPE_CHOICES",
    "SINGLE_FILE_LAYOUTS",
    "Spelling",
    "app",
    "call_options",
    "declared_params",
    "generate",
    "lora_files",
    "main",
    "serve",
]
