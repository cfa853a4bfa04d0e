"""One call's arguments after the checks (:class:`Call`), the keywords every pipeline takes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from vidax.errors import InputError
from vidax.pipelines.options import SHARED_OPTIONS

#: Call keywords every pipeline takes (:data:`~vidax.pipelines.options.SHARED_OPTIONS`), with
#: their meaning in :meth:`VideoPipeline.__call__`.
SHARED_CALL_ARGS = tuple(o.name for o in SHARED_OPTIONS)


@dataclasses.dataclass(frozen=True)
class Call:
    """One call's arguments after the checks, defaults filled in (see :meth:`VideoPipeline.__call__`).

    ``prompts`` and ``negatives`` are lists of B0 strings; ``batch`` = B0 x num_videos_per_prompt;
    ``extra`` holds the family's own keywords. ``cfg`` says whether the cond/uncond pair runs
    when the family decides it by its own rule (HunyuanVideo: ``true_cfg_scale > 1`` with a
    negative prompt); None: ``guidance_scale > 1``. ``cancel`` is the zero-argument check of the
    call's ``cancel`` keyword (None: not cancellable). ``given``: the keywords the caller passed
    (not None), so that warnings name only arguments the user gave (``"seed"`` missing: the seed
    was drawn at random). ``latents`` holds the first (video) stream's given latents;
    ``stream_latents`` those of the other streams, by their keyword (``audio_latents``).
    ``decode_audio``: decode the sound (the ``decode_audio`` keyword; False skips its decode).
    ``step_end``: diffusers' ``callback_on_step_end`` (None: none). ``lora_scale``: the
    ``attention_kwargs`` ``"scale"`` (None: not given). ``return_dict``: False returns a tuple.
    ``prompt_parts`` / ``negative_parts``: the given ``prompt_embeds`` (and masks, pooled
    embeddings...) as float32 / integer numpy arrays in the order of the family's
    :attr:`FamilyHooks.prompt_embeds_args <vidax.pipelines.hooks.FamilyHooks.prompt_embeds_args>` (None: encode the texts).
    ``on_state(done, latents, state)``: called after every denoising step with the steps done
    and the loop's latents and scheduler state (device arrays the next step donates: copy them
    now); with a step cache also ``cache=``, its
    :class:`~vidax.pipelines.step_cache.CacheState`. ``resume``: ``(done, arrays)``, the leaves
    of ``(latents, state)`` that ``on_state`` was given after step ``done`` (as numpy arrays),
    with a step cache ``(done, arrays, cache)`` (its ``CacheState``, arrays as numpy): the loop
    starts there (:func:`~vidax.pipelines.sampling.restore_denoising_state`,
    :meth:`~vidax.pipelines.step_cache.StepCache.restore`), so the call ends as the one that
    saved them would have. ``video_guidance``: one ``(guidance_scale,
    guidance_scale_2)`` per video, each video guided by its own (jobs of other guidance in one
    batch); None: the call's for every video. Only the default CFG step
    (the family hooks' ``step_args``, ``guidance``, ``guide``)
    reads it.
    """

    prompts: list
    negatives: list
    image: Any
    height: int
    width: int
    num_frames: int
    num_inference_steps: int
    guidance_scale: float
    guidance_scale_2: float
    num_videos_per_prompt: int
    seed: int
    latents: Any
    max_sequence_length: int
    output_type: str
    progress: bool
    callback: Any
    extra: Mapping[str, Any]
    cfg: bool | None = None
    cancel: Callable[[], bool] | None = None
    given: frozenset = frozenset()
    stream_latents: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    decode_audio: bool = True
    step_end: Callable | None = None
    lora_scale: float | None = None
    return_dict: bool = True
    prompt_parts: tuple | None = None
    negative_parts: tuple | None = None
    on_state: Callable[[int, Any, Any], None] | None = None
    resume: tuple | None = None
    video_guidance: tuple | None = None

    @property
    def batch(self) -> int:
        return len(self.prompts) * self.num_videos_per_prompt

    @property
    def do_cfg(self) -> bool:
        return self.guidance_scale > 1.0 if self.cfg is None else self.cfg

    @property
    def task(self) -> str:
        """``"i2v"`` with an image, ``"v2v"`` with a ``video`` keyword, else ``"t2v"``."""
        if self.image is not None:
            return "i2v"
        return "v2v" if self.extra.get("video") is not None else "t2v"


def cancel_check(cancel: Any) -> Callable[[], bool] | None:
    """The zero-argument check of a call's ``cancel`` keyword: a ``threading.Event`` (anything
    with ``is_set()``) or a callable returning True to stop; None stays None.

    Raises:
        InputError: anything else.
    """
    if cancel is None:
        return None
    if callable(getattr(cancel, "is_set", None)):
        return cancel.is_set
    if callable(cancel):
        return cancel
    raise InputError(
        f"cancel must be a threading.Event, a callable returning True to stop, or None, got {type(cancel).__name__}"
    )


@dataclasses.dataclass(frozen=True)
class CallRule:
    """One rule of a family's call check, declared (``FamilyHooks.call_rules``) and run by the
    shared check (:meth:`CallChecks.check_call <vidax.pipelines.call_checks.CallChecks.check_call>`)
    around the checks every family runs, where the family's reference reads a keyword before them
    (a default negative prompt, a size taken from the image, a step count from ``sigmas``) or
    decides something after them (CFG by its own rule, a keyword's default not counted as given).

    ``before(family, info, keywords) -> keywords``: the call's keywords (``prompt`` and
    ``negative_prompt`` among them, None where not given) as the shared checks are to take them;
    it may raise InputError for what the reference refuses first. ``after(family, info, call,
    keywords) -> Call``: the checked :class:`Call` completed, ``keywords`` being those this rule's
    ``before`` was given. ``family``: the pipeline class's hooks class (``cls.family``). Either may
    be None. The rules of a family run in order before the shared checks, and in the reverse
    order after them (the first rule is the outermost)."""

    before: Callable[[Any, Any, dict], dict] | None = None
    after: Callable[[Any, Any, Call, Mapping], Call] | None = None


def default_negative_prompt(text: str) -> CallRule:
    """The rule of a family whose reference fills ``negative_prompt=None`` with ``text`` (Cosmos'
    default negative prompt, Cosmos 3's ``""``): the text is checked as the negative prompt and
    not counted as given (:attr:`Call.given`)."""

    def before(family: Any, info: Any, keywords: dict) -> dict:
        return keywords if keywords.get("negative_prompt") is not None else {**keywords, "negative_prompt": text}

    def after(family: Any, info: Any, call: Call, keywords: Mapping) -> Call:
        if keywords.get("negative_prompt") is not None:
            return call
        return dataclasses.replace(call, given=call.given - {"negative_prompt"})

    return CallRule(before, after)
