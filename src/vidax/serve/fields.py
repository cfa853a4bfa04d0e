"""A ``POST /v1/videos`` request's fields -> the pipeline's call keywords.

The fields are OpenAI's ``/v1/videos`` names where it has one (``prompt``, ``model``, ``size``
"WIDTHxHEIGHT", ``seconds``, ``input_reference``), vidax's ``input_video`` (the video to extend,
where the checkpoint does video-to-video) and ``fps`` (the mp4's frame rate, which ``seconds``
counts in, and the call's ``fps`` where the model conditions on it, as ``vidax generate --fps``)
and, for the rest, the call keywords the loaded pipeline declares
(:class:`vidax.pipelines.options.CallOption`, those ``vidax generate`` offers as flags): the shared
ones (``negative_prompt``, ``height``, ``num_inference_steps``, ``seed``, ...)
and the family's own (LTX-Video's ``frame_rate``, HunyuanVideo's ``true_cfg_scale``, ...), each
checked by its declaration. They come as JSON, or as form fields (strings, read as the declared
type) with the image as the multipart file ``input_reference``, the video as the multipart file
``input_video`` (read with PyAV: mp4, webm, mov, ...) and the pipeline's other image keywords (Wan FLF2V's ``last_image``) as multipart files of their own names (:class:`Upload`).

An error of the pipeline's checks names its arguments as data (:class:`vidax.errors.Arg`); the
400 answer spells them as the request's fields (:meth:`Fields.spell`), a value as the request
sent it (a JSON number's text, :func:`number_texts`; a form field's text), and takes its
``param`` from them (:meth:`Fields.field`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from vidax.errors import MAX_TYPED_INT, Arg, ArgValue, VidaxError, typed_number
from vidax.pipelines.options import IMAGE_FILE, OBJECT, VIDEO_FILE, CallOption


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


#: OpenAI's fields that are no call keyword, by the keywords they stand for (``model`` for none;
#: ``cache``, vidax's step cache with the CLI's ``--cache`` syntax, and ``preset``, a preset's
#: name as ``vidax generate --preset`` takes it, are read by the job runner).
STANDS_FOR = {
    "model": (),
    "size": ("height", "width"),
    "seconds": ("num_frames",),
    "input_reference": ("image",),
    "input_video": ("video",),
    "cache": (),
    "preset": (),
    "fps": (),
}

_SIZE = re.compile(r"\s*(\d+)\s*[xX\u00d7]\s*(\d+)\s*")
_BOOL = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def _typed(option: CallOption, value: Any, text: str | None = None) -> Any:
    """A field's value as the declared type's value it spells: a form's text (or a JSON string)
    as the number or bool it spells, a JSON number of integral value (``9.0``, ``1e3``; ``text``:
    the number as sent) as an int for an int keyword, numbers read by vidax's one rule
    (:func:`~vidax.errors.typed_number`, as ``vidax generate`` reads its flags). Anything else
    stays as it is, so the declaration's check names the field and its value."""
    if option.type in (int, float) and isinstance(value, (str, float)):
        number = typed_number(
            text if text is not None else value if isinstance(value, str) else repr(value), integer=option.type is int
        )
        return value if number is None or option.type is int and isinstance(number, float) else number
    if option.type is bool and isinstance(value, str):
        return _BOOL.get(value.strip().lower(), value)
    return value


class Upload:
    """A multipart file field other than ``input_reference`` (``input_video``, or an image
    keyword of the pipeline, e.g. ``last_image``): where the upload was saved and its file name
    as sent."""

    def __init__(self, path: str, name: str):
        self.path, self.name = path, name

    def __repr__(self) -> str:
        return repr(self.name)


class _Number(str):
    """A JSON number's text as sent (:func:`number_texts`' parse hook)."""


def number_texts(body: bytes | str) -> dict[str, str]:
    """The text of each number the JSON object ``body`` gives a field, as the request sent it
    (``1e30``, which Python writes 1e+30; ``2.50``; ``NaN``), by field; a list's numbers as
    ``field[i]``. Fields of other values are left out."""
    fields = json.loads(body, parse_float=_Number, parse_int=_Number, parse_constant=_Number)
    texts = {}
    for key, value in fields.items() if isinstance(fields, dict) else ():
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
        texts.update((name, str(v)) for name, v in items if isinstance(v, _Number))
    return texts


class Fields:
    """A ``POST /v1/videos`` request's fields, read against the loaded pipeline's call keywords.

    Args:
        fields: the request's fields (JSON values, or form texts); ``None`` and empty form
            fields (but ``prompt``) count as not given.
        options: the pipeline's call keyword declarations (``cls.options()``); those with a flag
            are fields (the image keyword as ``input_reference``, the video keyword as
            ``input_video``; other videos are not taken).
        fps: frames per second that ``seconds`` counts in: ``num_frames = seconds x fps + 1``.
        image_name: the file name of the uploaded ``input_reference``, or None.
        cache: whether the pipeline takes a step cache (the ``cache`` field).
        presets: whether the pipeline's family has presets (the ``preset`` field).
        every: the fields of every task of the checkpoint (:meth:`TaskPipes.accepted
            <vidax.serve.tasks.TaskPipes.accepted>`), which the unknown-field message lists
            (empty: this pipeline's).
        texts: the text of each JSON number field as sent (:func:`number_texts`), for the
            messages (:meth:`sent`); None: the fields are a form's texts.
    """

    def __init__(
        self,
        fields: dict[str, Any],
        options: Iterable[CallOption],
        fps: Any,
        image_name: str | None = None,
        cache: bool = False,
        texts: Mapping[str, str] | None = None,
        presets: bool = False,
        every: Iterable[str] = (),
    ):
        options = tuple(options)
        #: whether the pipeline conditions on the frame rate (its ``fps`` keyword, no flag of its own)
        self.takes_fps = any(o.name == "fps" and not o.is_flag for o in options)
        self.every = list(every)
        self.options = {o.name: o for o in options if o.is_flag and o.type not in (VIDEO_FILE, OBJECT)}
        self.video = any(o.name == "video" and o.type is VIDEO_FILE for o in options)
        self.fps, self.image_name, self.cache, self.texts = fps, image_name, cache, dict(texts or {})
        self.presets = presets
        self.form = texts is None
        self.given = {
            k: v
            for k, v in fields.items()
            if v is not None and not (isinstance(v, str) and not v.strip() and k != "prompt")
        }
        if image_name is not None:
            self.given["input_reference"] = image_name

    def accepted(self) -> list[str]:
        """The fields this pipeline accepts: its call keywords (the image as ``input_reference``,
        the video as ``input_video``, its other image keywords as files of their names), OpenAI's
        ``model``, ``size``, ``seconds``, and vidax's ``cache`` and ``preset`` where the pipeline
        takes them."""
        names = [n for n, o in self.options.items() if not (o.type is IMAGE_FILE and n == "image")]
        names[1:1] = ["model", "size", "seconds", "fps"]
        return (
            names
            + ["input_reference"] * any(o.type is IMAGE_FILE for o in self.options.values())
            + ["input_video"] * self.video
            + ["cache"] * self.cache
            + ["preset"] * self.presets
        )

    def call_keywords(self) -> dict[str, Any]:
        """The call keywords of the fields, typed as declared (``model``, ``input_reference`` and
        ``input_video`` are left to the caller).

        Raises:
            RequestError: an unknown field, a field given twice (``size`` and ``height``,
                ``seconds`` and ``num_frames``), a malformed ``size`` or ``seconds``, no prompt,
                a prompt or negative prompt that is not one string.
        """
        given, accepted = self.given, self.accepted()
        every = self.every or accepted
        unknown = sorted(set(given) - set(accepted) - {"input_reference", "input_video"})  # the caller's
        if unknown:
            name = unknown[0]
            if name in every:
                raise RequestError(
                    400,
                    f"field {name!r} is not taken by this request's task (input_reference: image-to-video, "
                    f"input_video: video-to-video, neither: text-to-video), which takes {', '.join(accepted)}",
                    name,
                )
            raise RequestError(400, f"unknown field {name!r}; this model takes {', '.join(every)}", name)
        kw = {k: _typed(self.options[k], v, self.texts.get(k)) for k, v in given.items() if k not in STANDS_FOR}
        if "fps" in given:  # the mp4's frame rate, and the call's where the model conditions on it
            self.fps = self._positive("fps", " (frames per second)")
            if self.takes_fps:
                kw["fps"] = self.fps
        if "prompt" in self.options and "prompt" not in kw:  # as the pipeline's check says it, a string
            raise RequestError(400, "prompt is required: describe the video (a string)", "prompt")
        for name in ("prompt", "negative_prompt"):
            if name in kw and not isinstance(kw[name], str):
                raise RequestError(
                    400, f"{name} must be a string (one video per request), got {type(kw[name]).__name__}", name
                )
        if "size" in given:
            both = [k for k in ("height", "width") if k in given]
            if both:
                raise RequestError(
                    400, f"size and {both[0]} are both given; give size 'WIDTHxHEIGHT' or height and width", "size"
                )
            m = _SIZE.fullmatch(str(given["size"]))
            if m is None:
                raise RequestError(
                    400, f"size must be 'WIDTHxHEIGHT' in pixels (e.g. '160x96'), got {given['size']!r}", "size"
                )
            kw["width"], kw["height"] = int(m.group(1)), int(m.group(2))
        if "seconds" in given:
            if "num_frames" in given:
                raise RequestError(400, "seconds and num_frames are both given; give one of them", "seconds")
            seconds = given["seconds"]
            value = self._positive("seconds", "")
            if value * self.fps >= MAX_TYPED_INT:  # a frame count no int64 holds (1e300: 301 digits)
                raise RequestError(
                    400,
                    f"seconds must be a number > 0 of at most {(MAX_TYPED_INT - 1) / self.fps:.4g} "
                    f"(seconds x {float(self.fps):g} fps + 1 frames, an int64), got "
                    f"{self.as_sent(Arg('seconds', seconds))}",
                    "seconds",
                )
            kw["num_frames"] = round(value * self.fps) + 1
        return kw

    def _positive(self, name: str, unit: str) -> float:
        """The number > 0 the field ``name`` gives (``seconds``, ``fps``: a JSON number or a
        string spelling one); ``unit``: what it counts, for the message.

        Raises:
            RequestError: 400, not a finite number > 0."""
        given = self.given[name]
        value = (
            typed_number(given)
            if isinstance(given, str)
            else float(given)
            if isinstance(given, (int, float)) and not isinstance(given, bool)
            else None
        )
        if value is None or not math.isfinite(value) or value <= 0:
            raise RequestError(400, f"{name} must be a number > 0{unit}, got {self.as_sent(Arg(name, given))}", name)
        return float(value)

    def field(self, name: str) -> str | None:
        """The request field that gave the call keyword ``name`` (``decode_timestep[0]``: the
        field ``decode_timestep``): ``size`` for height / width when the request gave ``size``,
        ``seconds`` for num_frames when it gave ``seconds``, ``input_reference`` for the image,
        ``input_video`` for the video; None for a keyword that is no field."""
        name = name.split("[")[0]
        for field, keywords in STANDS_FOR.items():
            if name in keywords and (field in self.given or field in ("input_reference", "input_video")):
                return field
        return name if name in self.options or name in self.given else None

    def sent(self, name: str) -> str | None:
        """The text the request gave the value of field (or list item, ``field[i]``) ``name``
        in: a JSON number's as sent, a form field's; None for any other."""
        value = self.given.get(name)
        return self.texts.get(name, value.strip() if isinstance(value, str) else None)

    def as_sent(self, arg: Arg) -> str:
        """``arg``'s value as the request sent it where it sent that value: a form field's text
        as sent (``2.50``, ``two``), a JSON number's text (``1e30``), a JSON string given for a
        number as one (``"1e39" (a string)``; ``seconds``, a string in OpenAI's API, quoted:
        ``"abc"``); true / false / null as JSON spells them; else as
        Python writes it (:meth:`~vidax.errors.Arg.shown_as`)."""
        raw = self.given.get(arg.name)
        option = self.options.get(arg.name)
        if isinstance(raw, str) and (
            arg.value is raw or option is not None and arg.value == _typed(option, raw)
        ):  # the value is the field's text
            if self.form:
                return raw.strip()
            if arg.name == "seconds":  # a string in OpenAI's API ("4"): quoted as JSON writes it
                return json.dumps(raw)
            if option is not None and option.type in (int, float):
                return f"{json.dumps(raw)} (a string)"
        if not self.form and (arg.value is None or isinstance(arg.value, bool)):
            return json.dumps(arg.value)
        return arg.shown_as(self.sent(arg.name))

    def spell(self, arg: Arg) -> str:
        """An argument named in an error, as the request gave it: a field as ``name=value`` (as
        JSON's name and the value as sent, :meth:`as_sent`), a value alone as sent, the keywords
        standing for OpenAI's fields through those (``size's height 40``, ``seconds=2 (49
        frames at 24 fps)``, ``input_reference 'cat.png'``)."""
        if isinstance(arg, ArgValue):
            return self.as_sent(arg)
        field = self.field(arg.name)
        if field == "input_reference":
            return f"input_reference {self.image_name!r}" if arg.has_value and self.image_name else field
        if isinstance(self.given.get(field), Upload):  # an uploaded image keyword: its file name
            return f"{field} {self.given[field].name!r}" if arg.has_value else field
        if field == "size":
            return f"size's {arg.name} {arg.shown_value()}" if arg.has_value else f"size's {arg.name}"
        if field == "seconds":
            seconds = self.as_sent(Arg("seconds", self.given["seconds"]))
            return (
                f"seconds={seconds} ({arg.shown_value()} frames at {float(self.fps):g} fps)"
                if arg.has_value
                else "num_frames (seconds x fps + 1)"
            )
        return f"{arg.name}={self.as_sent(arg)}" if arg.has_value and arg.python is None else str(arg)

    def error(self, e: VidaxError) -> RequestError:
        """The 400 answer to an error of the pipeline's checks: its message with the arguments
        spelled as the request's fields, an upload named by its file name as sent (not the
        server's copy), ``param`` the field of the first argument it names that is one."""
        param = next((f for f in map(self.field, e.arguments) if f is not None), None)
        message = e.render(self.spell)
        for upload in self.given.values():
            if isinstance(upload, Upload):
                message = message.replace(upload.path, upload.name)
        return RequestError(400, message, param)
