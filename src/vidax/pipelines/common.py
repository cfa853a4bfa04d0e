"""Pieces every pipeline shares: task names, prompt cleaning, dtype parsing, the output, the
status lines of the silent phases."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import logging
import re
import sys
import time
from collections.abc import Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from vidax.checkpoint import TASK_NAMES
from vidax.errors import Arg, InputError
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


def check_task(root: str, task: str, supported: Sequence[str], variant: str, t2v_hint: str = "") -> None:
    """Check that ``task`` is a task name and that the checkpoint at ``root`` runs it.

    Args:
        root: the checkpoint folder (named in the message).
        task: the task asked for (a key of :data:`TASK_NAMES`).
        supported: the tasks the checkpoint runs.
        variant: what the checkpoint is, for the message (e.g. ``"Wan2.1 T2V 1.3B"``).
        t2v_hint: appended to the hint when an image was given to a checkpoint that takes none.

    Raises:
        InputError: an unknown task name, or one the checkpoint does not run (the message says
            what to change: give or drop the image, drop the video).
    """
    if task not in TASK_NAMES:
        raise InputError(Arg("task", task), f" is not valid; use one of {sorted(TASK_NAMES)}")
    if task not in supported:
        if task == "v2v":
            hint = ("it takes no video (drop ", Arg("video", keyword=True), ")")
        elif tuple(supported) == ("i2v",):
            hint = ("it needs an image (give ", Arg("image", keyword=True), ")")
        else:
            hint = ("it takes no image (drop ", Arg("image", keyword=True), ")", t2v_hint)
        raise InputError(f"checkpoint {root} is {variant}; it does not do {TASK_NAMES[task]}: ", *hint)


def prompt_clean(text: str) -> str:
    """The Wan/diffusers prompt clean-up: HTML-unescape twice, strip, collapse whitespace.

    diffusers also runs ``ftfy.fix_text`` when ftfy is installed; vidax does not depend on ftfy,
    so prompts with mojibake can tokenize differently from a reference run that has ftfy.
    """
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


class LineProgress:
    """Progress as whole lines on stderr, one per event, for a stderr that is no terminal (a log
    file, a pipe, a service's journal), where tqdm's ``\r``-redrawn bar would pile up as one long
    line: ``desc`` when it starts, ``desc: n/total units (s)`` after each update, ``desc: s`` at
    the end of a phase without a total. The part of tqdm's interface :func:`progress_bar`'s
    callers use."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", disable: bool = False):
        self.total, self.desc, self.unit, self.disable = total, desc, unit, disable
        self.n, self.t0 = 0, time.perf_counter()
        self._say(desc)

    def _say(self, line: str) -> None:
        if not self.disable:
            print(line, file=sys.stderr, flush=True)

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def reset(self) -> None:
        self.n, self.t0 = 0, time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._say(f"{self.desc}: {self.n}/{self.total} {self.unit}s ({time.perf_counter() - self.t0:.1f} s)")

    def close(self) -> None:
        if self.total is None:
            self._say(f"{self.desc}: {time.perf_counter() - self.t0:.1f} s")
        self.disable = True  # once

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: int | None, desc: str, *, unit: str = "it", disable: bool = False, **tqdm_kwargs):
    """A progress bar on stderr: tqdm's on a terminal (or a notebook's), else :class:`LineProgress`
    (one line per event, no ``\r``), as it is when the bar is made."""
    notebook = any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)  # tqdm.auto's pick in Jupyter
    if sys.stderr is not None and not sys.stderr.isatty() and not notebook:
        return LineProgress(total, desc, unit, disable)
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, **tqdm_kwargs)


@contextlib.contextmanager
def status(text: str, enabled: bool = True) -> Iterator[None]:
    """A status line on stderr (a tqdm line, so it does not break progress bars; two whole lines,
    :class:`LineProgress`, where stderr is no terminal) for a phase that has no progress bar of
    its own (loading the weights, encoding the prompt): ``text`` and the seconds it has taken,
    shown from the start of the ``with`` block, its time when it ends. Nothing when ``enabled``
    is false."""
    line = progress_bar(None, text, bar_format="{desc}: {elapsed}", disable=not enabled)
    try:
        yield
    finally:
        line.close()


@dataclasses.dataclass
class VideoPipelineOutput:
    """Result of a pipeline call.

    Attributes:
        frames: ``output_type="np"``: float32 (B, F, H, W, 3) in [0, 1];
            ``output_type="latent"``: float32 latents in the family's diffusers layout
            (Wan: (B, C, T, H, W); CogVideoX: (B, T, C, H, W)).
        stats: timings and memory of this call.
        audio: a model that makes sound (``pipe.capabilities.audio``): the waveform float32
            (B, channels, samples) in [-1, 1], as diffusers returns it; with
            ``output_type="latent"`` the audio stream's final latents in the family's diffusers
            layout. None for models without sound and with ``decode_audio=False``.
        audio_sample_rate: samples per second of ``audio`` (the vocoder's declared rate); None
            when no waveform was decoded.
    """

    frames: np.ndarray
    stats: RunStats
    audio: np.ndarray | None = None
    audio_sample_rate: int | None = None
