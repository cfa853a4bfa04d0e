"""LTX-Video's frame conditions of a call (diffusers' ``LTXConditionPipeline``): each image or
video placed at a frame of the clip, checked before any weight is read (:func:`condition_items`)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from vidax.errors import Arg, InputError
from vidax.io.image import to_rgb_image, video_frames

logger = logging.getLogger("vidax.pipeline")


def checked_number(name: str, value: Any, low: float = 0.0, high: float | None = None) -> float:
    """``value`` (the call's ``name``) as a float: a finite real number >= ``low`` (and <= ``high``).

    Raises:
        InputError: ``"{name} must be a number in [low, high], got {value!r}"`` (a bool is no number).
    """
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.floating, np.integer))
    if not ok or not np.isfinite(value) or value < low or (high is not None and value > high):
        valid = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InputError(f"{name} must be a number {valid}, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class _Item:
    """A checked condition: ``name`` for messages, ``frames`` (list of RGB PIL images: one for an
    image, the kept ones for a video), ``frame_index``, ``strength``, ``is_video``."""

    name: str
    frames: tuple
    frame_index: int
    strength: float
    is_video: bool


def _listed(name: str, value: Any, n: int) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise InputError(f"{name} is a list of {len(value)}; give one value or one per condition ({n})")
        return list(value)
    return [value] * n


def condition_items(call, temporal: int, warn: bool = True) -> list[_Item]:
    """The call's conditions, checked (raise InputError), in the reference's order (``warn``:
    log the trimming of a video, once per call: the check before loading logs it).

    ``conditions`` (one or a list of :class:`LTXVideoCondition`-like objects), or the flat
    ``image`` (one image or a list) / ``video`` (one video) with ``frame_index`` and ``strength``
    (a value or one per image). A video is trimmed as ``trim_conditioning_sequence`` (to the
    frames left in the clip after ``frame_index``, rounded down to ``temporal * k + 1``), with a
    warning when frames are dropped.
    """
    return [_condition_item(call, *r, temporal, warn) for r in _raw_conditions(call)]


def _raw_conditions(call) -> list[tuple]:
    """``(label, image, video, frame_index, strength)`` of each of the call's conditions, as given."""
    x = call.extra
    conditions, video = x.get("conditions"), x.get("video")
    raw = []
    if conditions is not None:
        given = [
            n
            for n, v in (
                ("image", call.image),
                ("video", video),
                ("frame_index", x.get("frame_index")),
                ("strength", x.get("strength")),
            )
            if v is not None
        ]
        if given:
            raise InputError(
                f"conditions was given together with {', '.join(given)}; give each condition's image "
                "or video, frame_index and strength in its LTXVideoCondition, or use the flat "
                "arguments without conditions"
            )
        items = list(conditions) if isinstance(conditions, (list, tuple)) else [conditions]
        for i, c in enumerate(items):
            if not all(hasattr(c, a) for a in ("image", "video", "frame_index", "strength")):
                raise InputError(
                    f"conditions[{i}] is a {type(c).__name__}; give LTXVideoCondition(image= or "
                    "video=, frame_index=, strength=) objects"
                )
            raw.append((f"conditions[{i}]", c.image, c.video, c.frame_index, c.strength))
    elif call.image is not None and video is not None:
        raise InputError(
            Arg("image"),
            " and ",
            Arg("video"),
            " were both given; give one, or several conditions as "
            "conditions=[LTXVideoCondition(image=...), LTXVideoCondition(video=...)]",
        )
    elif call.image is not None or video is not None:
        media = (
            (list(call.image) if isinstance(call.image, (list, tuple)) else [call.image])
            if call.image is not None
            else [video]
        )
        n = len(media)
        fis = _listed("frame_index", x.get("frame_index", 0), n)
        sts = _listed("strength", x.get("strength", 1.0), n)
        kind = "image" if call.image is not None else "video"
        for i, m in enumerate(media):
            label = kind if n == 1 else f"{kind}[{i}]"
            raw.append((label, m if kind == "image" else None, m if kind == "video" else None, fis[i], sts[i]))
    else:
        for key in ("frame_index", "strength"):
            if x.get(key) is not None:
                raise InputError(f"{key} was given without an image, video or conditions to apply it to")
    return raw


def _condition_item(call, label: str, image, vid, fi, st, temporal: int, warn: bool) -> _Item:
    """One condition of :func:`condition_items`, checked (a video trimmed)."""
    prefix = "" if label in ("image", "video") or label.startswith(("image[", "video[")) else label + "."
    if (image is None) == (vid is None):
        raise InputError(
            f"{label} needs exactly one of image and video (it has {'both' if image is not None else 'neither'})"
        )
    if isinstance(fi, bool) or not isinstance(fi, (int, np.integer)) or not 0 <= fi < call.num_frames:
        raise InputError(
            f"{prefix}frame_index={fi!r} is not a frame of the {call.num_frames}-frame clip; it must "
            f"be an integer in [0, {call.num_frames - 1}]"
        )
    strength = checked_number(f"{prefix}strength", st, 0.0, 1.0)
    if image is not None:
        return _Item(label, (to_rgb_image(image, f"{prefix}image"),), int(fi), strength, False)
    name = f"{prefix}video" if prefix else label
    frames = video_frames(vid, name)
    # diffusers' trim_conditioning_sequence: the frames left after frame_index, to k*temporal + 1.
    keep = (min(len(frames), call.num_frames - int(fi)) - 1) // temporal * temporal + 1
    if keep < len(frames) and warn:
        logger.warning(
            "%s has %d frames; at frame_index=%d of %d frames the first %d are used (the frames "
            "left in the clip, %dk+1, as diffusers' trim_conditioning_sequence)",
            name,
            len(frames),
            fi,
            call.num_frames,
            keep,
            temporal,
        )
    return _Item(name, tuple(frames[:keep]), int(fi), strength, True)
