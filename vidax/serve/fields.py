"""A ``POST /v1/videos`` request's fields -> the pipeline's call keywords.

The fields are OpenAI's ``/v1/videos`` names where it has one (``prompt``, ``model``, ``size``
"WIDTHxHEIGHT", ``seconds``, ``input_reference``) and the diffusers call keywords for the rest
(``negative_prompt``, ``height``, ``width``, ``num_frames``, ``num_inference_steps``,
``guidance_scale``, ``seed``, ``max_sequence_length``, ``guidance_scale_2`` and the family's own:
``frame_rate``, ``decode_timestep``, ...). They come as JSON, or as form fields (strings) with
the image as the multipart file ``input_reference``.
"""

from __future__ import annotations

import math
import re
from typing import Any


class RequestError(Exception):
    """A request the service refuses: ``status`` (HTTP), a one-line ``message``, the ``param``
    (request field) it is about, or None, and an error ``code``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        """The OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``."""
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


#: Fields every pipeline takes, by the type a form field's text is read as.
INT_FIELDS = ("height", "width", "num_frames", "num_inference_steps", "seed", "max_sequence_length", "frame_rate")
FLOAT_FIELDS = ("guidance_scale", "guidance_scale_2", "decode_timestep", "decode_noise_scale", "guidance_rescale",
                "true_cfg_scale")
TEXT_FIELDS = ("prompt", "negative_prompt", "model", "size", "seconds")
#: Call keywords only some families take (passed when given, so the pipeline's check names them).
FAMILY_FIELDS = ("frame_rate", "decode_timestep", "decode_noise_scale", "guidance_rescale", "true_cfg_scale")
#: Fields that are not call keywords themselves, by the keywords they stand for.
STANDS_FOR = {"size": ("height", "width"), "seconds": ("num_frames",), "input_reference": ("image",)}

_INT = re.compile(r"[+-]?\d+")
_SIZE = re.compile(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*")


def accepted_fields(call_args: tuple[str, ...]) -> list[str]:
    """The request fields a pipeline taking ``call_args`` accepts."""
    family = [f for f in FAMILY_FIELDS if f in call_args]
    common = [f for f in (*TEXT_FIELDS, *INT_FIELDS, *FLOAT_FIELDS) if f not in FAMILY_FIELDS]
    if "guidance_scale_2" not in call_args:
        common.remove("guidance_scale_2")
    return common + family + (["input_reference"] if "image" in call_args else [])


def _typed(name: str, value: Any) -> Any:
    """A form field's text as the number it spells (JSON values pass as they are); text that is
    not a number stays text, so the pipeline's check names the field and its value."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if name in INT_FIELDS and _INT.fullmatch(text):
        return int(text)
    if name in FLOAT_FIELDS:
        try:
            return float(text)
        except ValueError:
            return value
    return value


def call_keywords(fields: dict[str, Any], call_args: tuple[str, ...], fps: int) -> dict[str, Any]:
    """The call keywords of a request's ``fields`` (``None`` and empty form fields count as not
    given; ``model`` and ``input_reference`` are left to the caller).

    Args:
        fields: the request's fields (JSON values, or form texts).
        call_args: the keywords the loaded pipeline takes (``cls.call_args()``).
        fps: frames per second that ``seconds`` counts in: ``num_frames = seconds x fps + 1``.

    Raises:
        RequestError: an unknown field, a field given twice (``size`` and ``height``, ``seconds``
            and ``num_frames``), a malformed ``size`` or ``seconds``, a prompt that is not one string.
    """
    given = {k: v for k, v in fields.items() if v is not None and not (isinstance(v, str) and not v.strip()
                                                                          and k not in ("prompt",))}
    accepted = accepted_fields(call_args)
    unknown = sorted(set(given) - set(accepted) - {"input_reference"})
    if unknown:
        raise RequestError(400, f"unknown field {unknown[0]!r}; this model takes {', '.join(accepted)}", unknown[0])
    kw = {k: _typed(k, v) for k, v in given.items() if k not in ("model", "size", "seconds", "input_reference")}
    if "prompt" in kw and not isinstance(kw["prompt"], str):
        raise RequestError(400, f"prompt must be a string (one video per request), got {type(kw['prompt']).__name__}",
                           "prompt")
    if "size" in given:
        both = [k for k in ("height", "width") if k in given]
        if both:
            raise RequestError(400, f"size and {both[0]} are both given; give size 'WIDTHxHEIGHT' or height and "
                               "width", "size")
        m = _SIZE.fullmatch(str(given["size"]))
        if m is None:
            raise RequestError(400, f"size must be 'WIDTHxHEIGHT' in pixels (e.g. '160x96'), got {given['size']!r}",
                               "size")
        kw["width"], kw["height"] = int(m.group(1)), int(m.group(2))
    if "seconds" in given:
        if "num_frames" in given:
            raise RequestError(400, "seconds and num_frames are both given; give one of them", "seconds")
        seconds = given["seconds"]
        try:
            value = float(seconds) if isinstance(seconds, (str, int, float)) and not isinstance(seconds, bool) \
                else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise RequestError(400, f"seconds must be a number > 0, got {seconds!r}", "seconds")
        kw["num_frames"] = round(value * fps) + 1
    return kw


# A call keyword wherever it stands as a word (as vidax.cli names flags).
_KEYWORD = r"(?<![\w.\-/])({names})(?![\w\-/])"


def field_of(message: str, given: set[str], call_args: tuple[str, ...]) -> str | None:
    """The request field an error ``message`` of the pipeline's checks is about: the first call
    keyword it names, as the field the request gave it by (``height`` -> ``size`` when ``size``
    was given, ``num_frames`` -> ``seconds``, ``image`` -> ``input_reference``); None when it
    names none."""
    names = sorted(set(call_args) | {"height", "width", "num_frames", "image"}, key=len, reverse=True)
    m = re.search(_KEYWORD.format(names="|".join(map(re.escape, names))), message)
    if m is None:
        return None
    keyword = m.group(1)
    for field, keywords in STANDS_FOR.items():
        if keyword in keywords and (field in given or field == "input_reference"):
            return field
    return keyword


def field_message(message: str, field: str | None, fields: dict[str, Any]) -> str:
    """``message`` with the field and the value the request gave, first, where the message
    names the call keyword the field stands for (``size='48x40': height and width must ...``)."""
    if field in STANDS_FOR and field != "input_reference":
        return f"{field}={fields.get(field)!r}: {message}"
    if field == "input_reference":
        return f"input_reference: {message}"
    return message
