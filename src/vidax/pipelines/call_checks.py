"""A call's arguments checked against the checkpoint's configs alone, before any weight is read
(:meth:`CallChecks.check_call` -> :class:`Call`, the defaults filled), and what a pipeline
declares it takes (:class:`Capabilities`, the keywords and options).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vidax.checkpoint import TASK_NAMES, Checkpoint, CheckpointInfo
from vidax.errors import Arg, ArgValue, InputError, Message, joined
from vidax.pipelines.call import Call, cancel_check
from vidax.pipelines.common import check_task
from vidax.pipelines.options import (
    OBJECT,
    SHARED_OPTIONS,
    CallOption,
    check_options,
    options_by_name,
    untaken_shared_args,
)
from vidax.pipelines.output import finite_array
from vidax.pipelines.spec import diffusers_classes, embeds_options, read_scheduler

logger = logging.getLogger("vidax.pipeline")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a loaded pipeline accepts, declared (never probed from signatures).

    Attributes:
        tasks: the tasks of its checkpoint. image: takes ``image=``. video: takes ``video=``.
        guidance_scale_2: takes ``guidance_scale_2=`` (two experts). audio: makes sound.
        offload: streams its transformer blocks / stages components. call_args: every keyword
        its ``__call__`` takes.
    """

    tasks: tuple[str, ...]
    image: bool
    video: bool
    guidance_scale_2: bool
    audio: bool
    offload: bool
    call_args: tuple[str, ...]


_SHARED = options_by_name(SHARED_OPTIONS)


@dataclasses.dataclass(frozen=True)
class SizeLimits:
    """The largest sizes a checkpoint's model can represent (None: no limit), each already a
    valid value (a multiple of ``size_multiple``; frames of the form the family rounds to).

    Attributes:
        height, width: pixels. num_frames: frames. reason: why (for the error message).
    """

    height: int | None = None
    width: int | None = None
    num_frames: int | None = None
    reason: str = ""


#: Seeds are integers in ``[0, MAX_SEED]``: ``jax.random.PRNGKey`` keeps the low 32 bits of a
#: seed (without ``jax_enable_x64``), so a larger or a negative seed would repeat one of these.
MAX_SEED = 2**32 - 1


def _prompts(name: str, prompt: Any, batch: int | None = None) -> list[str]:
    arg = Arg(name)
    if prompt is None and batch is not None:
        return [""] * batch
    if prompt is None:
        raise InputError(arg, " is required: describe the video (a string or a list of strings)")
    if isinstance(prompt, str):
        prompt = [prompt] * (batch or 1)
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(p, str) for p in prompt):
        raise InputError(arg, f" must be a string or a list of strings, got {type(prompt).__name__}")
    if not prompt:
        raise InputError(arg, " is an empty list")
    if batch is not None and len(prompt) != batch:
        raise InputError(arg, f" has {len(prompt)} entries but ", Arg("prompt"), f" has {batch}; give one per prompt")
    if batch is None and not all(p.strip() for p in prompt):
        raise InputError(arg, f" is empty ({(prompt[0] if len(prompt) == 1 else prompt)!r}); describe the video")
    return list(prompt)


def _given_prompt_parts(cls: type, extra: dict, negative: bool) -> tuple | None:
    """The call's precomputed prompt encoding (``prompt_embeds=`` and its partners, or the
    ``negative_`` ones), taken out of ``extra``, as numpy arrays in the order of
    ``cls.family.prompt_embeds_args``: floating ones float32 and finite, masks ``cls.family.prompt_mask_dtype``;
    None when none is given.

    Raises:
        InputError: only some of them given (they come together, as diffusers' encode_prompt
            makes them), a value that is not an array of real numbers, another number of axes
            than diffusers' ((B, L, D) embeddings, (B, L) masks, (B, D) pooled embeddings), or
            batch sizes that differ.
    """
    names = [("negative_" if negative else "") + n for n in cls.family.prompt_embeds_args]
    values = {n: extra.pop(n) for n in names if n in extra}
    given = [n for n in names if values.get(n) is not None]
    if not given:
        return None
    missing = [n for n in names if n not in given]
    if missing:
        raise InputError(
            Arg(given[0]),
            " is given without ",
            *joined(Arg(m) for m in missing),
            f": {cls.__name__} takes them together (as encode_prompt_embeds returns them)",
        )
    out = []
    for n in names:
        v = values[n]
        if "mask" in n:
            kind = np.asarray(v).dtype.kind
            if kind not in "biuf":
                raise InputError(Arg(n), f" must be an array of 0 / 1 (or bool), got {type(v).__name__}")
            arr = (np.asarray(v) != 0).astype(cls.family.prompt_mask_dtype)
        else:
            arr = finite_array(n, v)
        want = 2 if "mask" in n or "pooled" in n else 3
        if arr.ndim != want:
            layout = "(batch, tokens)" if "mask" in n else "(batch, width)" if want == 2 else "(batch, tokens, width)"
            raise InputError(Arg(n), f" has shape {tuple(arr.shape)}; diffusers' layout is {layout}")
        if out and arr.shape[0] != out[0].shape[0]:
            raise InputError(Arg(n), f" has {arr.shape[0]} rows but ", Arg(names[0]), f" has {out[0].shape[0]}")
        out.append(arr)
    return tuple(out)


def _embeds_prompts(name: str, prompt: Any, parts: tuple, batch: int | None = None) -> list[str]:
    """Placeholder texts for a batch given as embeddings (one empty string per row).

    Raises:
        InputError: the text is given too (diffusers raises for both), or the batch is not
            ``batch`` (the prompts').
    """
    arg = "prompt_embeds" if name == "prompt" else "negative_prompt_embeds"
    if prompt is not None:
        raise InputError("give ", Arg(name), " or ", Arg(arg), ", not both (as diffusers)")
    rows = parts[0].shape[0]
    if batch is not None and rows != batch:
        raise InputError(Arg(arg), f" has {rows} rows but there are {batch} prompts; give one per prompt")
    return [""] * rows


def _step_end(callback: Any, tensor_inputs: Any) -> Callable | None:
    """The call's ``callback_on_step_end`` after checking it and its tensor inputs.

    Raises:
        InputError: not callable; tensor inputs other than ``["latents"]``
            (:data:`~vidax.pipelines.diffusers_keywords.REFUSED_VALUES` says why).
    """
    from vidax.pipelines.diffusers_keywords import refused_value_reason

    if callback is not None and not callable(callback):
        raise InputError(Arg("callback_on_step_end"), f" must be callable or None, got {type(callback).__name__}")
    if tensor_inputs is not None:
        names = list(tensor_inputs) if isinstance(tensor_inputs, (list, tuple)) else None
        if names is None or any(n != "latents" for n in names):
            raise InputError(
                Arg("callback_on_step_end_tensor_inputs", tensor_inputs),
                f" must be ['latents']: {refused_value_reason('callback_on_step_end_tensor_inputs')}",
            )
    return callback


def _lora_scale(attention_kwargs: Any) -> float | None:
    """The ``"scale"`` of a call's ``attention_kwargs`` (None: not given); other keys are logged
    as ignored, as diffusers' attention processors warn that they are not expected.

    Raises:
        InputError: not a dict, or a scale that is not a finite number.
    """
    if attention_kwargs is None:
        return None
    if not isinstance(attention_kwargs, Mapping):
        raise InputError(
            Arg("attention_kwargs"),
            f" must be a dict such as {{'scale': 0.7}} or None, got {type(attention_kwargs).__name__}",
        )
    other = sorted(str(k) for k in attention_kwargs if k != "scale")
    if other:
        logger.warning(
            "attention_kwargs %s are not expected by vidax's attention and are ignored (as diffusers' "
            "attention processors ignore them)",
            other,
        )
    scale = attention_kwargs.get("scale")
    if scale is None:
        return None
    if (
        isinstance(scale, (bool, np.bool_))
        or not isinstance(scale, (int, float, np.integer, np.floating))
        or not np.isfinite(scale)
    ):
        raise InputError(
            Arg("attention_kwargs", attention_kwargs),
            " must give 'scale' as a finite number (the LoRA scale of this call)",
        )
    return float(scale)


def refused_keyword(cls: type, keyword: str) -> Any:
    """The :class:`~vidax.pipelines.diffusers_keywords.Refused` entry of a diffusers keyword
    the pipeline class ``cls`` refuses (None: not a refused one)."""
    from vidax.pipelines.diffusers_keywords import refused

    return next((e for c in diffusers_classes(cls) if (e := refused(c, keyword)) is not None), None)


class CallChecks:
    """A pipeline's call checks and declared keywords; a base of
    :class:`~vidax.pipelines.base.VideoPipeline`."""

    # ================================================================== configs only
    @classmethod
    def for_task(cls, checkpoint: Checkpoint, task: str, info: CheckpointInfo | None = None) -> type:
        """The class that runs ``task`` on ``checkpoint`` (:meth:`class_for_task`; ``info``: its
        :meth:`read_checkpoint`, read here when None).

        Raises:
            InputError: the checkpoint does not do ``task`` (the message says what it does).
        """
        info = info or cls.family.read_checkpoint(checkpoint)
        check_task(checkpoint.root, task, info.tasks, info.variant)
        return cls.class_for_task(task)

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """The family's class for ``task`` (``"t2v"``, ``"i2v"``, ...), a task the checkpoint does:
        this one by default; a family with a class per task maps them (its hooks'
        ``class_for_task``)."""
        return cls.family.class_for_task(task) or cls

    @classmethod
    def call_args(cls) -> tuple[str, ...]:
        """Every keyword the call takes: the shared ones it supports, the other latent streams' (``audio_latents``), then the family's."""
        return tuple(o.name for o in cls.options())

    @classmethod
    def options(cls) -> tuple[CallOption, ...]:
        """The declarations of :meth:`call_args`, in that order."""
        streams = tuple(
            CallOption(s, OBJECT, f"Initial noise of the {s} stream, float32, in the family's diffusers layout.")
            for s in cls.family.latent_streams[1:]
        )
        untaken = untaken_shared_args(cls)
        return (
            tuple(o for o in SHARED_OPTIONS if o.name not in untaken)
            + streams
            + cls.family.call_options
            + embeds_options(cls)
        )

    @classmethod
    def capabilities_of(cls, info: CheckpointInfo) -> Capabilities:
        """What this class accepts on the checkpoint of ``info`` (a loaded pipeline's
        ``capabilities``)."""
        args = cls.call_args()
        return Capabilities(
            tasks=info.tasks,
            image="i2v" in info.tasks and "image" in args,
            video="video" in args,
            guidance_scale_2=len(info.transformers) > 1,
            audio=cls.family.makes_audio(info),
            offload=True,
            call_args=args,
        )

    @classmethod
    def check_call(cls, info: CheckpointInfo, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any) -> Call:
        """Check a call's arguments against the checkpoint's configs and fill in the defaults:
        :func:`check_shared_call` inside the family's declared
        :attr:`~vidax.pipelines.hooks.FamilyHooks.call_rules` (each rule's ``before`` in order,
        the shared checks, each rule's ``after`` in the reverse order).

        ``kwargs``: the shared keywords (:class:`SharedArgs`) and the family's own.
        Needs no weights: ``vidax generate`` runs it before loading.

        Raises:
            InputError: an unknown keyword, or an argument that is not valid (the message names
                it, its value and what is valid).
        """
        keywords = {"prompt": prompt, "negative_prompt": negative_prompt, **kwargs}
        seen = []  # the keywords each rule's before was given, for its after
        for rule in cls.family.call_rules:
            seen.append(keywords)
            keywords = keywords if rule.before is None else rule.before(cls.family, info, dict(keywords))
        call = check_shared_call(cls, info, **keywords)
        for rule, given in reversed(list(zip(cls.family.call_rules, seen))):
            call = call if rule.after is None else rule.after(cls.family, info, call, given)
        return call


def check_shared_call(
    cls: type, info: CheckpointInfo, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any
) -> Call:
    """The checks of a call every family runs, for the pipeline class ``cls``: the shared keywords
    (:class:`SharedArgs`) and the family's declared ones, the prompts, size, numbers, inputs and
    initial noise against the configs, the defaults filled.

    Raises:
        InputError: an unknown keyword, or an argument that is not valid (the message names it,
            its value and what is valid).
    """
    a = SharedArgs.take(kwargs)
    extra = kwargs
    given = {k for k in _GIVEN if getattr(a, k) is not None} | {k for k, v in extra.items() if v is not None}
    if negative_prompt is not None:
        given.add("negative_prompt")
    streams = {k: extra.pop(k) for k in cls.family.latent_streams[1:] if k in extra}
    extra = _check_keywords(cls, info, extra, given)
    prompts, negatives, parts, negative_parts = _call_prompts(cls, prompt, negative_prompt, extra)
    height, width, num_frames = _call_size(cls, info, a.height, a.width, a.num_frames)
    steps, guidance_scale, guidance_scale_2, max_sequence_length, num_videos_per_prompt = _call_numbers(
        cls,
        info,
        a.num_inference_steps,
        a.guidance_scale,
        a.guidance_scale_2,
        a.max_sequence_length,
        a.num_videos_per_prompt,
    )
    _check_output_and_seed(a.output_type, a.seed, a.decode_audio, a.callback, a.return_dict)
    step_end = _step_end(a.callback_on_step_end, a.callback_on_step_end_tensor_inputs)
    lora_scale = _lora_scale(a.attention_kwargs)
    cancel = cancel_check(a.cancel)
    _check_task_inputs(cls, info, a.image, extra)
    seed = int(np.random.SeedSequence().entropy % 2**31) if a.seed is None else a.seed
    call = Call(
        prompts,
        negatives,
        a.image,
        int(height),
        int(width),
        num_frames,
        steps,
        guidance_scale,
        guidance_scale_2,
        num_videos_per_prompt,
        int(seed),
        None,
        max_sequence_length,
        a.output_type,
        bool(a.progress),
        a.callback,
        dict(extra),
        cancel=cancel,
        given=frozenset(given),
        decode_audio=a.decode_audio is None or bool(a.decode_audio),  # None: the default
        step_end=step_end,
        lora_scale=lora_scale,
        return_dict=a.return_dict is None or bool(a.return_dict),
        prompt_parts=parts,
        negative_parts=negative_parts,
    )
    call = _with_latents(cls, info, call, {cls.family.latent_streams[0]: a.latents, **streams})
    _check_schedule(cls, info, call)
    return call


@dataclasses.dataclass(frozen=True)
class SharedArgs:
    """The shared keywords of a call as given to :meth:`CallChecks.check_call` (their defaults when
    not given: None, the family's default to come, for most)."""

    image: Any = None
    height: Any = None
    width: Any = None
    num_frames: Any = None
    num_inference_steps: Any = None
    guidance_scale: Any = None
    guidance_scale_2: Any = None
    num_videos_per_prompt: Any = 1
    seed: Any = None
    latents: Any = None
    max_sequence_length: Any = None
    output_type: str = "np"
    progress: bool = True
    callback: Any = None
    cancel: Any = None
    decode_audio: Any = True
    return_dict: Any = True
    attention_kwargs: Any = None
    callback_on_step_end: Any = None
    callback_on_step_end_tensor_inputs: Any = None

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> SharedArgs:
        """The shared keywords popped from ``kwargs`` (what is left: the family's own)."""
        return cls(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(cls) if f.name in kwargs})


#: The shared keywords a call counts as given (:attr:`Call.given`) when not None.
_GIVEN = (
    "image",
    "height",
    "width",
    "num_frames",
    "num_inference_steps",
    "guidance_scale",
    "guidance_scale_2",
    "seed",
    "latents",
    "max_sequence_length",
)


def _check_keywords(cls: type, info: CheckpointInfo, extra: dict, given: set) -> dict:
    """The family's own keywords of a call checked (their types and ranges); a keyword the
    pipeline does not take is refused, naming what it takes (or why diffusers' keyword is refused,
    or the class that takes the input for this checkpoint: :func:`_refuse_untaken_input`)."""
    if "generator" in extra and extra["generator"] is None:  # diffusers' "draw at random": no seed=
        del extra["generator"]
    own = options_by_name(cls.family.call_options + embeds_options(cls))
    unknown = sorted(set(extra) - set(own)) + sorted(given & set(untaken_shared_args(cls)))
    for u in unknown:
        entry = refused_keyword(cls, u)
        if entry is not None:
            raise InputError(
                f"{cls.__name__} takes no ", Arg(u, python=repr(u)), f" (diffusers' {u}=): {entry.message()}"
            )
        _refuse_untaken_input(cls, info, u)
    if unknown:
        raise InputError(
            f"{cls.__name__} takes no ",
            *joined(Arg(u, python=repr(u)) for u in unknown),
            "; it takes ",
            *joined(Arg(a) for a in cls.call_args()),
        )
    return check_options(own, extra)


def _refuse_untaken_input(cls: type, info: CheckpointInfo, keyword: str) -> None:
    """Raise InputError for a keyword the class ``cls`` does not take (nor does its diffusers
    namesake: a keyword it takes is taken or refused, :mod:`~vidax.pipelines.diffusers_keywords`)
    where the family's class for another task of this checkpoint takes it (``image``: the
    image-to-video class; ``video``: the video-to-video one), naming that class; or where it is a
    shared input asking for a task the checkpoint does not do
    (:func:`~vidax.pipelines.common.check_task`'s message). Return otherwise."""
    for task in info.tasks:
        other = cls.class_for_task(task)
        if other is not cls and hasattr(other, "family") and keyword in other.call_args():
            raise InputError(
                f"{cls.__name__} takes no ",
                Arg(keyword),
                f" (diffusers' does not either); for {TASK_NAMES[task]} use {other.__name__}",
            )
    task = _SHARED[keyword].task if keyword in _SHARED else None
    if task is not None:
        check_task(info.checkpoint.root, task, info.tasks, info.variant)


def _call_prompts(cls: type, prompt: Any, negative_prompt: Any, extra: dict) -> tuple:
    """``(prompts, negative prompts, prompt parts, negative prompt parts)`` of a call: the texts,
    or the precomputed encodings given (:attr:`~vidax.pipelines.hooks.FamilyHooks.prompt_embeds_args`)."""
    parts = _given_prompt_parts(cls, extra, negative=False)
    negative_parts = _given_prompt_parts(cls, extra, negative=True)
    prompts = _prompts("prompt", prompt) if parts is None else _embeds_prompts("prompt", prompt, parts)
    if negative_parts is not None:
        _embeds_prompts("negative_prompt", negative_prompt, negative_parts, len(prompts))
        negative_prompt = None
    return prompts, _prompts("negative_prompt", negative_prompt, len(prompts)), parts, negative_parts


def _call_size(cls: type, info: CheckpointInfo, height: Any, width: Any, num_frames: Any) -> tuple[int, int, int]:
    """``(height, width, num_frames)`` of a call: the defaults filled, within what the model
    represents, multiples of the checkpoint's size multiple, the frames as the family resolves them."""
    d = info.defaults
    height = _SHARED["height"].check(d.height if height is None else height)
    width = _SHARED["width"].check(d.width if width is None else width)
    limits = cls.family.size_limits(info)
    for name, v, top in (("height", height, limits.height), ("width", width, limits.width)):
        if top is not None and v > top:  # before the multiples: no "nearest valid" past what the model takes
            raise InputError(
                Arg(name, v),
                " is more than this checkpoint's model can represent: the largest valid ",
                Arg(name),
                f" is {top} ({limits.reason})",
            )
    mh, mw = info.size_multiple
    if height % mh or width % mw:
        near = joined(
            Message(Arg(name), f" in {sorted({max(m, v // m * m), (v // m + 1) * m})}")
            for name, v, m in (("height", height, mh), ("width", width, mw))
            if v % m
        )
        raise InputError(
            Arg("height"),
            " and ",
            Arg("width"),
            f" must be multiples of {mh}" + ("" if mh == mw else f" and {mw}") + f" ({info.size_reason}), got ",
            Arg("height", height),
            ", ",
            Arg("width", width),
            "; nearest valid: ",
            *near,
        )
    given_frames = _SHARED["num_frames"].check(d.num_frames if num_frames is None else num_frames)
    num_frames = cls.family.resolve_num_frames(info, given_frames)
    if limits.num_frames is not None and num_frames > limits.num_frames:
        raise InputError(
            Arg("num_frames", given_frames),
            " is more than this checkpoint's model can represent: the largest valid ",
            Arg("num_frames"),
            f" is {limits.num_frames} ({limits.reason})",
        )
    return height, width, num_frames


def _call_numbers(
    cls: type,
    info: CheckpointInfo,
    num_inference_steps: Any,
    guidance_scale: Any,
    guidance_scale_2: Any,
    max_sequence_length: Any,
    num_videos_per_prompt: Any,
) -> tuple:
    """``(steps, guidance_scale, guidance_scale_2, max_sequence_length, num_videos_per_prompt)`` of
    a call, the defaults filled and each checked."""
    d = info.defaults
    steps = _SHARED["num_inference_steps"].check(
        d.num_inference_steps if num_inference_steps is None else num_inference_steps
    )
    guidance_scale = _SHARED["guidance_scale"].check(d.guidance_scale if guidance_scale is None else guidance_scale)
    if guidance_scale_2 is not None and len(info.transformers) < 2:
        raise InputError(
            Arg("guidance_scale_2", guidance_scale_2),
            " is only used by checkpoints with two "
            f"experts; {info.checkpoint.root} ({info.variant}) has one transformer",
        )
    guidance_scale_2 = (
        guidance_scale if guidance_scale_2 is None else _SHARED["guidance_scale_2"].check(guidance_scale_2)
    )
    max_sequence_length = _SHARED["max_sequence_length"].check(
        d.max_sequence_length if max_sequence_length is None else max_sequence_length
    )
    limit = cls.family.text_token_limit(info)
    if limit is not None and max_sequence_length > limit[0]:
        raise InputError(
            Arg("max_sequence_length", max_sequence_length),
            " is more than this checkpoint's text encoding takes: the largest valid ",
            Arg("max_sequence_length"),
            f" is {limit[0]} ({limit[1]})",
        )
    num_videos_per_prompt = _SHARED["num_videos_per_prompt"].check(num_videos_per_prompt)
    return steps, guidance_scale, guidance_scale_2, max_sequence_length, num_videos_per_prompt


def _check_output_and_seed(output_type: Any, seed: Any, decode_audio: Any, callback: Any, return_dict: Any) -> None:
    """Raise InputError for a call's output type, seed, ``decode_audio``, callback or ``return_dict``
    that is not valid."""
    if output_type == "pt":
        from vidax.pipelines.diffusers_keywords import refused_value_reason

        raise InputError(Arg("output_type", output_type), f" is not taken: {refused_value_reason('output_type')}")
    _SHARED["output_type"].check(output_type)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise InputError(
            Arg("seed"), " must be an integer or ", ArgValue("seed", None), ", got ", ArgValue("seed", seed)
        )  # None as each front end spells it (serve: null)
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise InputError(
            Arg("seed", seed),
            f" is out of range: seeds are integers in [0, {MAX_SEED}] (jax.random "
            "keys take 32 bits; a larger or negative seed would repeat one of these)",
        )
    _SHARED["decode_audio"].check(decode_audio)
    if callback is not None and not callable(callback):
        raise InputError(Arg("callback"), f" must be callable or None, got {type(callback).__name__}")
    _SHARED["return_dict"].check(return_dict)


def _check_task_inputs(cls: type, info: CheckpointInfo, image: Any, extra: dict) -> None:
    """Raise InputError where the call's task (from ``image`` / ``video``) is not one the checkpoint
    does, an image-to-video checkpoint has no image, or an image is not one."""
    task = "i2v" if image is not None else ("v2v" if extra.get("video") is not None else "t2v")
    if cls.family.task == "i2v" and image is None:
        raise InputError(
            f"{info.checkpoint.root} is an image-to-video checkpoint: ",
            Arg("image"),
            " is required (the first frame: a PIL image or a uint8 (H, W, 3) array)",
        )
    check_task(info.checkpoint.root, task, info.tasks, info.variant)
    if image is not None:
        from vidax.io.image import to_rgb_image

        for im in image if isinstance(image, (list, tuple)) else [image]:
            to_rgb_image(im)


def _with_latents(cls: type, info: CheckpointInfo, call: Call, given_streams: dict) -> Call:
    """``call`` with the initial noise given for its latent streams (``latents=``, ``audio_latents=``,
    ...), each finite and of the shape the call's arguments give it."""
    if all(v is None for v in given_streams.values()):
        return call
    shapes = cls.family.latent_shapes(info, call)
    checked = {}
    for name, value in given_streams.items():
        if value is None:
            continue
        value = finite_array(name, value)
        if value.shape != shapes[name]:
            layout = (
                cls.family.latents_layout
                if name == cls.family.latent_streams[0]
                else cls.family.audio_latents_layout
                if name == cls.family.audio_stream
                else "this stream's layout"
            )
            raise InputError(
                f"{name} have shape {tuple(value.shape)}, expected {shapes[name]} = {layout} for these arguments"
            )
        checked[name] = value
    first = checked.pop(cls.family.latent_streams[0], None)
    return dataclasses.replace(call, latents=first, stream_latents=checked)


def _check_schedule(cls: type, info: CheckpointInfo, call: Call) -> None:
    """Raise InputError for more steps than the checkpoint's scheduler was trained with, then the
    family's own checks of the call and its schedule."""
    scheduler = read_scheduler(cls.family, info)
    train = getattr(getattr(scheduler, "config", None), "num_train_timesteps", None)
    if train is not None and call.num_inference_steps > train:  # before any schedule is computed
        raise InputError(
            Arg("num_inference_steps", call.num_inference_steps),
            f" is more than the {train} "
            "timesteps this checkpoint's scheduler was trained with (num_train_timesteps in "
            f"{info.checkpoint.config_file('scheduler')}); give at most {train}",
        )
    cls.family.check_family_call(info, call)
    if scheduler is not None:
        cls.family.check_schedule(info, scheduler, call)
