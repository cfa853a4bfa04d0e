"""Call keywords declared once: :class:`CallOption` gives a keyword's name, type, valid values,
default and help. The declarations drive the type and range checks of a call (before any weight
is read), ``vidax generate``'s flags (built from every registered pipeline's declarations, so a
family's keyword is a flag without editing the CLI) and how errors name the argument
(:class:`vidax.errors.Arg`: the keyword in Python, the flag on the command line).

The shared keywords are :data:`SHARED_OPTIONS`; a family declares its own in its pipeline
class's ``call_options``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from vidax.errors import Arg, ArgValue, InputError

#: The kinds of value a call keyword takes beyond a plain int / float / str / bool (``type``):
#: frames the CLI reads from a video file, an image it reads from an image file, or anything
#: the family checks itself (arrays, objects, lists): no flag.
VIDEO_FILE, IMAGE_FILE, OBJECT = "video file", "image file", "object"

_NUMBER = (int, float, np.integer, np.floating)
#: The largest magnitude of a ``float`` keyword: float32's largest value (vidax computes the
#: guidance, shifts and scales in float32; a larger number would be inf there).
MAX_FLOAT = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class CallOption:
    """One call keyword of a pipeline.

    Attributes:
        name: the Python keyword; the flag of ``vidax generate`` is ``--`` + it with ``-`` for ``_``.
        type: ``int``, ``float`` (a finite number of magnitude at most float32's largest,
            :data:`MAX_FLOAT`, within ``low`` / ``high``: one check for every family's float
            keyword, so ``inf`` / ``nan`` / ``1e39`` are refused naming the flag), ``str``, ``bool``, or a kind: ``VIDEO_FILE``
            (uint8 (F, H, W, 3) frames in Python, a video file on the command line),
            ``IMAGE_FILE`` (a PIL image or uint8 (H, W, 3); an image file), ``OBJECT`` (checked
            by the family only, no flag).
        help: what it does, for ``--help`` and the docs.
        default: what the call uses when it is not given, in words for ``--help`` (the value
            itself is the pipeline's: it may come from the checkpoint).
        low, high: the valid range of a number, inclusive (``low_open``: ``> low``).
        choices: the valid values (instead of a range).
        valid: how the message of a bad value says what is valid (default: from the above).
        per_prompt: a list with one value per prompt is also valid (each value is checked; the
            family checks the list's length).
        task: giving it asks for this task (``"v2v"`` for a conditioning video).
        flag: offered by ``vidax generate`` (never for ``OBJECT``).
        cli_default: the value ``vidax generate`` passes when the flag is not given.
        required: ``vidax generate`` needs the flag.
        short: other spellings of the flag (``("-p",)``).
        cli: for an ``OBJECT`` keyword the command line spells as text: the function turning the
            flag's text into the value (``"28,29"`` -> ``[28, 29]``; a ValueError: refused naming
            the flag and ``valid``); such a keyword has a flag.
        flag_spelling: the flag where it is not ``--`` + the name (``"--stg-blocks"``).
    """

    name: str
    type: Any
    help: str
    default: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple | None = None
    valid: str = ""
    per_prompt: bool = False
    task: str | None = None
    flag: bool = True
    cli_default: Any = None
    required: bool = False
    short: tuple[str, ...] = ()
    cli: Callable[[str], Any] | None = None
    flag_spelling: str | None = None

    @property
    def is_flag(self) -> bool:
        return self.flag and (self.type is not OBJECT or self.cli is not None)

    @property
    def flag_name(self) -> str:
        return self.flag_spelling or "--" + self.name.replace("_", "-")

    def from_cli(self, text: str) -> Any:
        """The value of the flag's ``text``: ``text`` itself, or :attr:`cli`'s value of it.

        Raises:
            InputError: :attr:`cli` refused it (naming the argument, the text and :meth:`describe_valid`).
        """
        if self.cli is None:
            return text
        try:
            return self.cli(text)
        except ValueError:
            raise InputError(Arg(self.name, text), f" must be {self.describe_valid()}") from None

    def describe_valid(self) -> str:
        """What is valid, in words (``"a positive integer"``, ``"a number in [0, 1]"``)."""
        if self.valid:
            return self.valid
        if self.choices is not None:
            return " or ".join(map(repr, self.choices))
        if self.type is bool:
            return "True or False"
        if self.type is str:
            return "a string"
        if self.type is int:
            if self.low == 1 and self.high is None:
                return "a positive integer"
            what = "an integer"
        elif self.type is float:
            what = "a finite number"
        else:
            return ""
        cap = f" (at most {MAX_FLOAT:.4g}, float32's largest)" if self.type is float else ""
        if self.low is not None and self.high is not None:  # a bounded range says finite already
            return (
                f"{'a number' if cap else what} in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}]"
            )
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {_num(self.low)}{cap}"
        if self.high is not None:
            return f"{what} <= {_num(self.high)}" + (f" (at least {-MAX_FLOAT:.4g})" if cap else "")
        return what + (f" (at most {MAX_FLOAT:.4g} in magnitude, float32's largest)" if cap else "")

    def check(self, value: Any, label: Arg | None = None) -> Any:
        """``value`` checked against the type, range and choices (None passes: not given); a
        number comes back as a Python int / float.

        Raises:
            InputError: ``"<name> must be <valid>, got <value>"``, the argument and its value as
                data (:class:`~vidax.errors.ArgValue`: each front end writes the value as the
                user gave it).
        """
        if value is None or self.type in (OBJECT, VIDEO_FILE, IMAGE_FILE):
            return value
        if self.per_prompt and isinstance(value, (list, tuple)):
            return [self.check(v, Arg(f"{self.name}[{i}]")) for i, v in enumerate(value)]
        if not self._valid(value):
            label = label or Arg(self.name)
            raise InputError(label, f" must be {self.describe_valid()}, got ", ArgValue(label.name, value))
        return int(value) if self.type is int else float(value) if self.type is float else value

    def _valid(self, value: Any) -> bool:
        if self.type is bool:
            ok = isinstance(value, (bool, np.bool_))
        elif self.type is str:
            ok = isinstance(value, str)
        elif isinstance(value, (bool, np.bool_)):
            ok = False
        elif self.type is int:
            ok = isinstance(value, (int, np.integer))
        else:
            ok = isinstance(value, _NUMBER) and bool(np.isfinite(value)) and abs(float(value)) <= MAX_FLOAT
        if not ok:
            return False
        if self.choices is not None:
            return value in self.choices
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def int_list(text: str) -> list[int]:
    """``"28,29"`` -> ``[28, 29]`` (integers separated by commas, spaces around them allowed);
    a ValueError for anything else (an empty text, ``"28,"``, ``"a"``, ``"1.5"``)."""
    return [int(t) for t in text.split(",")]


def untaken_shared_args(cls: type) -> tuple[str, ...]:
    """The shared keywords pipeline class ``cls``'s call does not take: its family's
    ``unsupported_call_args``, and ``image`` where the class takes no image (its hooks'
    ``takes_image``, as its diffusers namesake's ``__call__``)."""
    takes_image = cls.family.takes_image
    if takes_image is None:
        takes_image = cls.family.task == "i2v"
    return tuple(cls.family.unsupported_call_args) + (() if takes_image else ("image",))


def options_by_name(options: Iterable[CallOption]) -> dict[str, CallOption]:
    return {o.name: o for o in options}


def check_options(options: Mapping[str, CallOption], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each declared keyword checked (:meth:`CallOption.check`); the others as given."""
    return {k: options[k].check(v) if k in options else v for k, v in values.items()}


#: The valid frame rates (fps) of a video: every family's ``frame_rate=`` and ``vidax generate
#: --fps``. What a family does with the rate makes its size matter: LTX-2's and Cosmos 3's sound
#: lasts ``num_frames / frame_rate`` seconds (0.01 fps makes 900 s of sound from 9 frames, and
#: every step attends over all of it), LTX-Video's RoPE scales time by ``1 / frame_rate`` and
#: Cosmos 3 writes the rate in the prompt's duration sentence. Real footage runs from time-lapse
#: (1 fps) to high-speed cameras (1000 fps); the models were trained at 24-30 fps.
FRAME_RATE_RANGE = (1, 1000)

#: The largest guidance weight: float32's largest value (guidance is applied in float32).
MAX_GUIDANCE = MAX_FLOAT

#: The keywords every pipeline takes (a family may leave out some: ``unsupported_call_args``);
#: their checks against the checkpoint are :meth:`vidax.pipelines.base.VideoPipeline.check_call`'s.
SHARED_OPTIONS: tuple[CallOption, ...] = (
    CallOption(
        "prompt",
        str,
        "What the video shows (a string, or in Python a list of strings).",
        required=True,
        short=("-p",),
        per_prompt=True,
    ),
    CallOption(
        "negative_prompt",
        str,
        "What to steer away from (used when the guidance scale is > 1).",
        "the pipeline's: empty, or the reference's built-in negative prompt (Cosmos)",
        per_prompt=True,
    ),
    CallOption(
        "image",
        IMAGE_FILE,
        "The first frame, for checkpoints that do image-to-video (vidax inspect lists "
        "a checkpoint's tasks); resized to height x width (HunyuanVideo 1.5 instead sizes the video from the image's "
        "aspect ratio and takes no height / width with it). No safety checker runs (Cosmos' reference "
        "requires one).",
        task="i2v",
    ),
    CallOption(
        "height",
        int,
        "Pixels (a multiple of what the checkpoint needs, e.g. 16).",
        "the checkpoint's, see vidax inspect",
        low=1,
    ),
    CallOption("width", int, "Pixels.", "the checkpoint's", low=1),
    CallOption("num_frames", int, "Frames, 4k+1 for the released models.", "the checkpoint's", low=1),
    CallOption("num_inference_steps", int, "Denoising steps.", "the checkpoint's", low=1),
    CallOption(
        "guidance_scale", float, "Classifier-free guidance weight (>= 0; > 1 enables CFG).", "the checkpoint's", low=0
    ),
    CallOption(
        "guidance_scale_2",
        float,
        "Guidance weight of the second expert of two-expert checkpoints.",
        "the guidance scale",
        low=0,
    ),
    CallOption("num_videos_per_prompt", int, "Videos per prompt.", "1", low=1, flag=False),
    CallOption("seed", int, "Seed of the initial noise.", "random in Python, 0 on the command line", cli_default=0),
    CallOption("latents", OBJECT, "Initial noise, float32, in the family's diffusers layout."),
    CallOption(
        "max_sequence_length",
        int,
        "Text tokens; longer prompts are truncated with a warning.",
        "the checkpoint's",
        low=1,
    ),
    CallOption(
        "output_type",
        str,
        "'np' (frames), 'pil' (a list of PIL images per video) or 'latent' (the final latents).",
        "'np'",
        choices=("np", "pil", "latent"),
        flag=False,
    ),
    CallOption("progress", bool, "Progress bars and status lines on stderr.", "True", flag=False),
    CallOption(
        "decode_audio",
        bool,
        "Decode the sound of a model that makes sound (False skips its decode; "
        "accepted, changing nothing, by models without sound). The command line's --no-audio.",
        "True",
        flag=False,
    ),
    CallOption("callback", OBJECT, "callback(step_index, num_inference_steps), after every step."),
    CallOption(
        "callback_on_step_end",
        OBJECT,
        "diffusers' step callback: callback_on_step_end(pipe, i, t, "
        "callback_kwargs) after every step, callback_kwargs = {'latents': the loop's latents, a jax.Array in "
        "the layout of the diffusers pipeline's loop}; a returned dict's 'latents' replace them.",
    ),
    CallOption(
        "callback_on_step_end_tensor_inputs",
        OBJECT,
        "The keys of callback_kwargs: ['latents'] (vidax's only one).",
        "['latents']",
    ),
    CallOption(
        "attention_kwargs",
        OBJECT,
        "diffusers' attention_kwargs: {'scale': s} scales the loaded LoRA "
        "adapters for this call; other keys are ignored with a warning, as diffusers' attention processors.",
    ),
    CallOption(
        "return_dict",
        bool,
        "False: a tuple, (frames,) or (frames, audio) for models that make sound, as diffusers.",
        "True",
        flag=False,
    ),
    CallOption("cancel", OBJECT, "A threading.Event, or a callable returning True to stop."),
)


def read_input_file(kind: str, name: str, path: str):
    """The value of a call keyword whose flag names a file: an image file as an RGB PIL image,
    a video file as uint8 (F, H, W, 3) frames (decoded with PyAV).

    Raises:
        InputError: no such file, or not an image / a video with frames (naming the flag).
    """
    from vidax.io.image import load_image
    from vidax.io.video import read_video

    if kind == IMAGE_FILE:
        return load_image(path, name)
    if not os.path.isfile(path):
        raise InputError(Arg(name, path), ": no such file")
    try:
        frames = read_video(path)
    except Exception as e:  # PyAV's errors for files that are not videos
        raise InputError(Arg(name, path), f" could not be read as a video ({type(e).__name__}: {e})") from None
    if frames.shape[0] == 0:
        raise InputError(Arg(name, path), " has no frames")
    return frames
