"""What ``vidax serve`` holds for a job it has accepted and not finished (:class:`Pending`), and
the warnings the pipeline's checks log for a request, spelled as its fields (:class:`CheckWarnings`)."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from vidax.serve.fields import Fields

#: Previews kept per running job for its event streams (a client polling slower than the
#: previews come sees the latest ones).
KEPT_PREVIEWS = 4


class Pending:
    """A job accepted and not finished: its checked call, its cancel event, its live step, the
    batch it may join (``key``: jobs of one key share a denoising batch; None: it runs alone),
    its latest previews (the last :data:`KEPT_PREVIEWS`), and the saved state it resumes from
    (``resume``: a state file)."""

    def __init__(self, job_id: str, call: Any):
        self.id, self.call, self.fps, self.cache = job_id, call, None, None
        self.pipe: Any = None  # the pipeline that runs it (TaskPipes.request_pipe)
        self.preset: Any = None  # the Preset the job runs under (None: none)
        self.scheduler: Any = None  # its preset's scheduler where not the pipeline's (None: the pipeline's)
        self.request: Fields | None = None  # spells the run's errors as the request's fields
        self.cancel = threading.Event()
        self.step = 0  # denoising steps done in the chunk being denoised
        self.chunks = 1  # the chunks its video is made in (a long video's; 1: made at once)
        self.chunk_index = 0  # the chunk being denoised, 0-based
        self.progress = 0  # the whole job's percentage (records.progress_percent)
        self.key: tuple | None = None
        self.previews: collections.deque = collections.deque(maxlen=KEPT_PREVIEWS)
        # what the request's checks changed, as vidax generate warns (the job's "warnings")
        self.warnings: list[str] = []
        self.resume: str | None = None
        self.chunk: dict | None = None  # a long video's last chunk finished (its record's "chunk")

    def in_chunk(self, message: str) -> str:
        """``message``, where the job stopped (``"cancelled before denoising step 1 of 30"``), for
        a long video's job with its chunk: ``"cancelled in chunk 4 of 12 (before denoising step 1
        of 30)"`` (the chunk after the last finished one, or the one whose steps ran)."""
        if self.chunks == 1:
            return message
        finished = 0 if self.chunk is None else self.chunk["chunk"]
        chunk = min(self.chunks, max(self.chunk_index, finished) + 1)
        verb, _, where = message.rpartition("cancelled ")
        return f"{verb}cancelled in chunk {chunk} of {self.chunks} ({where})"

    def reached(self) -> dict:
        """The record's ``step`` and ``progress`` where the job is (or stopped)."""
        return {"step": self.step, "progress": self.progress}


class CheckWarnings(logging.Handler):
    """The warnings the pipeline's checks log in this thread while a request is checked
    (``num_frames=2 is not of the form 4k+1; using 1``), each with its arguments spelled as the
    request's fields (:meth:`~vidax.serve.fields.Fields.spell`): ``messages``."""

    def __init__(self, request: Fields):
        super().__init__(logging.WARNING)
        self.request, self.thread, self.messages = request, threading.get_ident(), []
        self.logger = logging.getLogger("vidax.pipeline")

    def __enter__(self) -> CheckWarnings:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        from vidax.errors import Arg, Message

        if record.thread != self.thread:
            return
        spell = self.request.spell
        args = record.args if isinstance(record.args, tuple) else ()
        shown = tuple(
            spell(a) if isinstance(a, Arg) else a.render(spell) if isinstance(a, Message) else a for a in args
        )
        self.messages.append(str(record.msg) % shown if shown else record.getMessage())
