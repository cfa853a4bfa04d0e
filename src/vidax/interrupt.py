"""SIGINT / SIGTERM in the ``vidax`` command, from its first instruction to its exit.

Standard library only: :mod:`vidax.__main__` installs :class:`Stop` before it imports anything
else (typer, JAX), so that no signal ever reaches Python's default handler, whose
KeyboardInterrupt a callback can swallow (JAX's garbage-collection callback, an atexit function)
and the command then runs on.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys

#: What a signal before the run ends with (the line says which signal).
BEFORE_THE_RUN = "before the run started; nothing was written"


class Stop:
    """The SIGINT / SIGTERM a command received; calling it is the run's ``cancel`` check.

    Installed for the whole process (:meth:`install`, the ``vidax`` command), a signal:

    - before the run (the imports, the flags, ``vidax inspect``, ``vidax serve``'s loading):
      ends the process at once with one line, ``interrupted (SIGINT) before the run started;
      nothing was written``, exit 128 + the signal's number;
    - during the run (:meth:`catching`): is recorded, and the run stops at its next check; a
      second one, unless the video is being written (``writing``), ends the process at once;
    - after the run, while its outcome is reported: is recorded only;
    - from :meth:`exiting` on (Python's teardown: atexit functions, JAX's among them): ends the
      process at once with the status the command already chose;
    - after the last atexit function (where CPython gives the signals back to their default
      action, which would end the process by the signal after a run that succeeded): ignored.

    Not installed (a command invoked in-process, e.g. by a test), :meth:`catching` installs the
    recording handler for the run only and gives the previous ones back.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[int] = []
        self.writing = False
        self.installed = False
        self.phase = "before"  # "before", "running", "after", "exiting"
        self.status = 0
        #: Files the run is writing that a second signal's immediate exit removes (a long video's
        #: growing mp4): what it leaves is then what it says, nothing.
        self.temporary: set[str] = set()

    def __call__(self) -> bool:
        return bool(self.received)

    def install(self) -> None:
        """Handle SIGINT and SIGTERM for the rest of the process, and a KeyboardInterrupt that
        Python reports as unraisable (raised inside a callback, which cannot propagate it) as a
        SIGINT."""
        for sig in self.SIGNALS:
            signal.signal(sig, self._signal)
        previous = sys.unraisablehook

        def unraisable(info) -> None:
            if isinstance(info.exc_value, KeyboardInterrupt):
                self._signal(signal.SIGINT, None)
            else:
                previous(info)

        sys.unraisablehook = unraisable
        # Registered before any other module is imported, so run after every other atexit function
        # (they run last-registered first): from then on the exit status is settled.
        atexit.register(self.ignore_signals)
        self.installed = True

    def ignore_signals(self) -> None:
        """Ignore SIGINT and SIGTERM (the end of Python's teardown: see the class docstring)."""
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    @contextlib.contextmanager
    def catching(self):
        """While the run lasts, SIGINT and SIGTERM are only recorded (the run's checks stop it).
        Not installed, the recording handler is in place for the run only; outside the main
        thread (where Python takes no handler) the signals then stay as they are."""
        previous = {}
        if not self.installed:
            try:
                for sig in self.SIGNALS:
                    previous[sig] = signal.signal(sig, self._signal)
            except ValueError:  # not the main thread
                pass
        self.phase = "running"
        try:
            yield self
        finally:
            self.phase = "after"
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def exiting(self, status: int) -> None:
        """The command is done and exits with ``status``: a signal from now on ends the process
        at once with it (what the command printed is flushed first)."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or replaced stream
                stream.flush()
        self.status, self.phase = status, "exiting"

    def _signal(self, signum: int, frame) -> None:
        self.received.append(signum)
        name = signal.Signals(signum).name
        if self.phase == "exiting":
            os._exit(self.status)
        first = len(self.received) == 1  # (a signal during this handler runs it again inside it)
        if self.phase == "before" and self.installed:
            # Nothing has been written yet. os.write and os._exit: the main thread may be anywhere
            # (inside a print, an import, a callback).
            if first:
                os.write(2, f"interrupted ({name}) {BEFORE_THE_RUN}\n".encode())
            os._exit(128 + self.received[0])
        if self.phase == "running" and not first and not self.writing:
            # A run stuck where no check comes (a long compile, a weight file being read, a hung
            # collective): the second signal ends it now. Nothing is being written, so nothing
            # partial is left; a progress bar may have the line: a new one first.
            if len(self.received) == 2:
                for path in list(self.temporary):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                os.write(2, f"\ninterrupted again ({name}): stopped at once; nothing was written\n".encode())
            os._exit(128 + self.received[1])

    def exit(self, what: str) -> None:
        """Print the one line ``interrupted (SIGINT) <what>`` and exit 128 + the signal's number."""
        import typer

        sig = self.received[0] if self.received else signal.SIGINT
        typer.secho(f"interrupted ({signal.Signals(sig).name}) {what}", fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(128 + sig)
