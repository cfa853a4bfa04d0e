"""Named settings bundles (``--preset NAME`` / ``preset=``): the recipes users copy from model
cards, one frozen :class:`Preset` per recipe, with the family it applies to, a one-line doc and
where its numbers come from.

A preset sets call keywords (``num_inference_steps``, ``guidance_scale``, ``sigmas``...) and
scheduler settings (``flow_shift`` / ``shift``, the sampler class); every keyword the caller gives
still wins (:func:`preset_call`). ``vidax generate --preset NAME`` and
``vidax.load_pipeline(path, preset=NAME)`` apply it in the plan, before any weight is read
(:func:`with_preset`); ``pipe(..., preset=NAME)`` for one call (:func:`call_preset`: its sampler and
step cache for that call only). The run summary's ``preset`` row (``out.stats.preset``) says which
values it set (:func:`describe`).

A preset may also turn on a step cache (``cache``, in ``--cache``'s spelling), unless the caller
turned one on. ``vidax inspect CHECKPOINT`` lists the presets of the checkpoint's family.

Only recipes with a source are here. Where a source gives no number for a setting, the preset
leaves it to the checkpoint and its doc says so. ``quality`` (the model card's / README's
recommended steps, guidance, shift) and ``fast`` (a documented speed recipe) exist where a source
gives the numbers: ``quality`` for HunyuanVideo and CogVideoX, ``fast`` (First-Block Cache) for
HunyuanVideo; SkyReels-V2's diffusion forcing has ``async`` (diffusers' example) and ``long`` (its
README's long-video recipe), on the pipelines that take their keywords (:attr:`Preset.tasks`). None are defined for Wan (its cards' recommended shift and guidance differ per
checkpoint and resolution, not per family; its few-step recipes are ``lightx2v`` / ``causvid``),
LTX-Video, LTX-2, HunyuanVideo 1.5, Cosmos-Predict2.5 and Cosmos 3: the sources found give no
family-wide quality settings or step-cache threshold for them.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from vidax.errors import InputError
from vidax.schedulers import scheduler_from_config

#: diffusers 0.42.1 ``diffusers.pipelines.ltx2.utils.DISTILLED_SIGMA_VALUES`` (the LTX-2 distilled
#: checkpoints' fixed sigmas; a test compares them with diffusers' constant).
LTX2_DISTILLED_SIGMAS = (1.0, 0.99375, 0.9875, 0.98125, 0.975, 0.909375, 0.725, 0.421875)


@dataclasses.dataclass(frozen=True)
class Preset:
    """One recipe.

    Attributes:
        name: what ``--preset`` takes.
        family: the pipeline package it applies to (``"wan"``, ``"ltx2"``, ``"hunyuan_video15"``...).
        doc: one line: what it is for, and what its source leaves open.
        source: where the numbers come from (model card, diffusers docs or source, URL).
        call: call keywords it sets (under the caller's).
        scheduler: scheduler config settings it sets (``_class_name`` picks the sampler).
        cache: the step cache it turns on, in ``--cache``'s spelling (``"first_block:0.035"``;
            None: none); a step cache the caller turned on (``--cache``, ``pipe.enable_cache``) wins.
        lora_weight: the weight its source merges the recipe's LoRA at (CausVid: 0.3; None: the
            source gives none); a recognised LoRA given at another weight is said in the
            recognition line (:func:`recognise`).
        tasks: the tasks it is a recipe for (``("t2v",)``; empty: every task). A pipeline runs
            it where it does one of them and takes every call keyword it sets (SkyReels-V2's
            diffusion-forcing ``ar_step`` is not ``SkyReelsV2Pipeline``'s); elsewhere
            :func:`find_preset` refuses it saying why.
    """

    name: str
    family: str
    doc: str
    source: str
    call: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    scheduler: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    cache: str | None = None
    lora_weight: float | None = None
    tasks: tuple[str, ...] = ()

    def settings(self) -> dict[str, Any]:
        """Every value it sets: the call keywords, the step cache, then the scheduler's
        (``scheduler`` for the class)."""
        sched = {("scheduler" if k == "_class_name" else k): v for k, v in self.scheduler.items()}
        return {**dict(self.call), **({"cache": self.cache} if self.cache else {}), **sched}

    def cache_config(self, pipeline: type, num_inference_steps: int) -> Any:
        """The step cache config of :attr:`cache` (None: none), checked against ``pipeline``
        (:func:`~vidax.pipelines.caching.check_cache_kind`, configs only).

        Raises:
            InputError: the family's reference cannot hook this cache (naming the preset).
        """
        from vidax.pipelines.caching import check_cache_kind
        from vidax.pipelines.step_cache import parse_cache_option

        if self.cache is None:
            return None
        config = parse_cache_option(self.cache, num_inference_steps, name=f"preset {self.name}: cache")
        check_cache_kind(pipeline, config, f"preset {self.name!r} (cache {self.cache})")
        return config


_LIGHTX2V = (
    "https://github.com/ModelTC/LightX2V configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json "
    "(infer_steps 4, enable_cfg false, sample_shift 5, denoising_step_list [1000, 750, 500, 250])"
)

PRESETS: tuple[Preset, ...] = (
    Preset(
        "lightx2v",
        "wan",
        "LightX2V step+CFG-distilled Wan2.1/2.2 (LoRA or merged): 4 Euler flow-matching steps, no CFG, shift 5. "
        "LightX2V's own sampler steps at sigmas [1, .75, .5, .25] before the shift; diffusers' Euler "
        "steps at linspace(1, 1/1000, 4) (the same shift and steps, not the same 4 points)",
        _LIGHTX2V,
        call={"num_inference_steps": 4, "guidance_scale": 1.0},
        scheduler={"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 5.0},
    ),
    Preset(
        "causvid",
        "wan",
        "Kijai's CausVid LoRA on Wan2.1 (LoRA weight 0.3: give it with --lora FILE:0.3): CFG 1, about 12 "
        "UniPC steps; the card gives no flow shift (the checkpoint's stays)",
        "https://civitai.com/models/1585622 (CausVid LoRA, made by Kijai): CFG 1; weight 0.3 with UniPC, "
        "about 12 steps",
        call={"num_inference_steps": 12, "guidance_scale": 1.0},
        scheduler={"_class_name": "UniPCMultistepScheduler"},
        lora_weight=0.3,
    ),
    Preset(
        "distilled",
        "ltx2",
        "LTX-2 distilled checkpoints: their 8 fixed sigmas, CFG off on both streams",
        "diffusers 0.42.1 diffusers/pipelines/ltx2/utils.py DISTILLED_SIGMA_VALUES; "
        "https://huggingface.co/docs/diffusers/api/pipelines/ltx2 (distilled: guidance_scale=1.0)",
        call={
            "sigmas": list(LTX2_DISTILLED_SIGMAS),
            "num_inference_steps": len(LTX2_DISTILLED_SIGMAS),
            "guidance_scale": 1.0,
            "audio_guidance_scale": 1.0,
        },
    ),
    Preset(
        "step-distilled",
        "hunyuan_video15",
        "HunyuanVideo 1.5 480p step-distilled: 8 steps (the card: 8 or 12 recommended, 4 faster), the "
        "guider's guidance 1.0, shift 7 (diffusers' conversion of 480p_i2v_step_distilled)",
        "https://huggingface.co/tencent/HunyuanVideo-1.5 (step_distillation_comparison.md: 8 or 12 steps); "
        "diffusers scripts/convert_hunyuan_video1_5_to_diffusers.py (huggingface/diffusers#12802: "
        "guidance_scale 1.0, shift 7.0)",
        call={"num_inference_steps": 8, "guidance_scale": 1.0},
        scheduler={"shift": 7.0},
    ),
    Preset(
        "cfg-distilled",
        "hunyuan_video15",
        "HunyuanVideo 1.5 CFG-distilled checkpoints: guidance 1.0 (one pass per step); the steps stay the "
        "checkpoint's 50, their shift the checkpoint's scheduler's",
        "diffusers scripts/convert_hunyuan_video1_5_to_diffusers.py GUIDANCE_CONFIGS (*_distilled: guidance_scale 1.0)",
        call={"guidance_scale": 1.0},
    ),
    Preset(
        "quality",
        "hunyuan_video",
        "HunyuanVideo as its README samples it: 50 steps, embedded guidance 6.0, flow shift 7.0",
        "https://github.com/Tencent/HunyuanVideo README (sample_video.py --infer-steps 50 --embedded-cfg-scale 6.0 "
        "--flow-shift 7.0 --flow-reverse; diffusers' guidance_scale is the embedded guidance)",
        call={"num_inference_steps": 50, "guidance_scale": 6.0},
        scheduler={"shift": 7.0},
    ),
    Preset(
        "fast",
        "hunyuan_video",
        "HunyuanVideo with First-Block Cache at threshold 0.035 and 30 steps, as ParaAttention's HunyuanVideo "
        "recipe runs it (text-to-video; diffusers runs no step cache on its image-to-video)",
        "https://github.com/chengzeyi/ParaAttention doc/fastest_hunyuan_video.md (apply_cache_on_pipe("
        "residual_diff_threshold=0.035, 'the default value for HunyuanVideo'; runs of 30 inference steps); "
        "diffusers' FirstBlockCacheConfig threshold is the same relative mean-absolute residual difference, "
        "ported from ParaAttention",
        call={"num_inference_steps": 30},
        cache="first_block:0.035",
    ),
    Preset(
        "async",
        "skyreels_v2",
        "SkyReels-V2 diffusion forcing, asynchronous, as diffusers' example runs it: 30 UniPC steps, guidance 6, "
        "flow shift 8, ar_step 5 in causal blocks of 5 latent frames, addnoise_condition 20 (text-to-video: "
        "diffusers' image-to-video example takes shift 5 and guidance 5)",
        "diffusers 0.42.1 SkyReelsV2DiffusionForcingPipeline EXAMPLE_DOC_STRING (flow_shift 8.0 'for T2V', "
        "num_inference_steps=30, guidance_scale=6.0, ar_step=5, causal_block_size=5, addnoise_condition=20)",
        call={
            "num_inference_steps": 30,
            "guidance_scale": 6.0,
            "ar_step": 5,
            "causal_block_size": 5,
            "addnoise_condition": 20,
        },
        scheduler={"flow_shift": 8.0},
        tasks=("t2v",),
    ),
    Preset(
        "long",
        "skyreels_v2",
        "SkyReels-V2 long video as its README runs it: synchronous diffusion forcing (ar_step 0), 17 frames of "
        "overlap between windows, addnoise_condition 20, 30 UniPC steps, guidance 6, flow shift 8 (the README's "
        "text-, image- and video-to-video alike); the window (base_num_frames) stays the pipeline's 97: give 121 "
        "at 720P",
        "https://github.com/SkyworkAI/SkyReels-V2 README (generate_video_df.py --ar_step 0 --base_num_frames 97 "
        "--num_frames 257 --overlap_history 17; '--addnoise_condition 20 is recommanded ... for better long "
        "video consistency'; 'add --image' for image-to-video; the script's defaults --inference_steps 30 "
        "--guidance_scale 6.0 --shift 8.0)",
        call={
            "num_inference_steps": 30,
            "guidance_scale": 6.0,
            "ar_step": 0,
            "overlap_history": 17,
            "addnoise_condition": 20,
        },
        scheduler={"flow_shift": 8.0},
    ),
    Preset(
        "quality",
        "cogvideox",
        "CogVideoX as its model card runs it: 50 steps, guidance 6",
        "https://huggingface.co/THUDM/CogVideoX-5b model card (pipe(..., num_inference_steps=50, guidance_scale=6))",
        call={"num_inference_steps": 50, "guidance_scale": 6.0},
    ),
)


def family_of(pipeline: type) -> str:
    """The family a pipeline class belongs to: its package under ``vidax.models`` (``"wan"``)."""
    parts = pipeline.__module__.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "models" else parts[-1]


def presets_for(family: str) -> tuple[Preset, ...]:
    return tuple(p for p in PRESETS if p.family == family)


def presets_of(pipeline: type) -> tuple[Preset, ...]:
    """The presets ``pipeline`` runs: its family's, less those made for its other pipelines."""
    return tuple(p for p in presets_for(family_of(pipeline)) if _not_for(p, pipeline) is None)


def find_preset(name: Any, pipeline: type, spelling: str = "preset=") -> Preset:
    """The preset ``name`` of ``pipeline``'s family, matched case-insensitively (``"LightX2V"``
    is ``lightx2v``; preset names are lower case).

    Raises:
        InputError: no such preset for this family, naming ``spelling`` (``"preset="`` in Python,
            ``"--preset"`` on the command line), the value and the family's presets, with the
            closest of them (:func:`difflib.get_close_matches`) as "did you mean" where one is close.
    """
    family = family_of(pipeline)
    key = name.lower() if isinstance(name, str) else name
    given = f"{spelling}{name!r}" if spelling.endswith("=") else f"{spelling} {name!r}"
    for p in presets_for(family):
        if p.name == key:
            if (why := _not_for(p, pipeline)) is not None:
                others = ", ".join(q.name for q in presets_of(pipeline)) or "none"
                raise InputError(f"{given} {why}; {pipeline.__name__}'s presets: {others}")
            return p
    others = [p for p in PRESETS if p.name == key]
    names = [p.name for p in presets_for(family)]
    where = f" (it is {', '.join(p.family for p in others)}'s)" if others else ""
    close = difflib.get_close_matches(key, names, n=1) if isinstance(key, str) and not others else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InputError(
        f"{given} is not a preset of {pipeline.__name__}{where}; its presets: {', '.join(names) or 'none'}{hint}"
    )


def _not_for(preset: Preset, pipeline: type) -> str | None:
    """Why ``pipeline`` does not run ``preset`` (None: it does)."""
    missing = [k for k in preset.call if k not in pipeline.call_args()]
    if missing:
        return f"sets {', '.join(missing)}, which {pipeline.__name__} does not take"
    if preset.tasks and pipeline.family.task not in preset.tasks:
        return f"is a recipe for {', '.join(preset.tasks)}; {pipeline.__name__} does {pipeline.family.task}"
    return None


def preset_call(
    preset: Preset | None, given: Mapping[str, Any], cache_given: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(kwargs, applied)``: the call keywords ``given`` over the preset's; ``applied`` the
    preset's values that ran (those the caller did not give; its ``cache`` unless the caller
    turned a step cache on, ``cache_given``)."""
    if preset is None:
        return dict(given), {}
    applied = {k: v for k, v in preset.call.items() if given.get(k) is None}
    kwargs = {**applied, **{k: v for k, v in given.items() if v is not None or k not in applied}}
    if preset.cache is not None and not cache_given:
        applied["cache"] = preset.cache
    return kwargs, applied


def preset_scheduler(preset: Preset | None, pipeline: type, checkpoint: Any) -> Any:
    """The scheduler the preset asks for, built from the checkpoint's scheduler config with the
    preset's settings over it (None: the preset sets none). Where the preset changes the sampler
    class, as diffusers' ``NewScheduler.from_config(old.config, **settings)``: every key of the
    checkpoint's config the new class takes is kept (:func:`~vidax.schedulers.scheduler_from_config_of`).
    Checked against the family's samplers.

    Raises:
        InputError: the family does not run the preset's sampler. ConfigError: a setting the
            scheduler does not take.
    """
    from vidax.schedulers import scheduler_from_config_of

    if preset is None or not preset.scheduler:
        return None
    config = dict(checkpoint.config("scheduler"))
    settings = {k: v for k, v in preset.scheduler.items() if k != "_class_name"}
    name = preset.scheduler.get("_class_name", config.get("_class_name"))
    allowed = pipeline.family.scheduler_classes
    if allowed is not None and name not in allowed:
        raise InputError(f"preset {preset.name!r} samples with {name}; {pipeline.__name__} runs {' or '.join(allowed)}")
    if name == config.get("_class_name"):
        return scheduler_from_config(config, source=f"preset {preset.name!r}", **settings)
    return scheduler_from_config_of(name, config, source=f"preset {preset.name!r}", **settings)


def call_scheduler(preset: Preset | None, pipe: Any) -> Any:
    """The scheduler a call with ``preset`` runs on the loaded ``pipe`` where it is not
    ``pipe.scheduler`` (None: ``pipe.scheduler``): the preset's (:func:`preset_scheduler`), or,
    where a preset of the load set one that this call's preset (or ``preset`` None, no preset, a
    ``vidax serve`` request's ``"preset": "none"``) does not, the checkpoint's.

    Raises:
        InputError, ConfigError: as :func:`preset_scheduler`.
    """
    if preset is pipe.preset:
        return None
    built = None if preset is None else preset_scheduler(preset, type(pipe), pipe.checkpoint)
    if built is None and pipe.preset is not None and pipe.preset.scheduler:
        ckpt = pipe.checkpoint
        return scheduler_from_config(ckpt.config("scheduler"), source=ckpt.config_file("scheduler"))
    return built


def call_preset(pipe: Any, name: str | None, kwargs: Mapping[str, Any]) -> tuple:
    """``(preset, kwargs, applied, scheduler, cache)`` of a call ``pipe(..., preset=name, **kwargs)``:
    the preset (``name``'s, else the load's ``pipe.preset``; None: none), the call keywords over its
    (:func:`preset_call`), the values it set, the scheduler of the call where it is not
    ``pipe.scheduler`` (:func:`call_scheduler`) and the step cache the call runs: the caller's
    (``pipe.enable_cache``, or ``pipe.disable_cache()`` after a load preset's), else the preset's.

    Raises:
        InputError: ``name`` not a preset of the family (naming ``preset=``, the value and the
            family's presets); the family cannot run the preset's sampler or step cache.
    """
    chosen = pipe.preset if name is None else find_preset(name, type(pipe))
    scheduler = call_scheduler(chosen, pipe)
    changed = pipe.cache_config is not pipe._preset_cache
    own = changed if chosen is pipe.preset else changed and pipe.cache_config is not None
    kwargs, applied = preset_call(chosen, kwargs, cache_given=own)
    if own or "cache" not in applied:
        return chosen, kwargs, applied, scheduler, pipe.cache_config if own else None
    steps = kwargs.get("num_inference_steps") or pipe.defaults.num_inference_steps
    return chosen, kwargs, applied, scheduler, chosen.cache_config(type(pipe), steps)


def describe(preset: Preset, applied: Mapping[str, Any]) -> str:
    """One line: which preset ran and the values it set."""
    values = {**applied, **{("scheduler" if k == "_class_name" else k): v for k, v in preset.scheduler.items()}}
    return f"preset {preset.name}: " + ", ".join(f"{k}={_short(v)}" for k, v in values.items())


def _short(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v) + "]"
    return f"{v:g}" if isinstance(v, float) else str(v)


def listing(family: str | None = None) -> str:
    """The presets (of ``family``), one line each: name, family and doc."""
    rows = [p for p in PRESETS if family is None or p.family == family]
    return "\n".join(f"  {p.name} ({p.family}): {p.doc}" for p in rows)


def with_preset(plan: Any, name: str | None, spelling: str = "preset=") -> Any:
    """``plan`` (:class:`~vidax.pipelines.plan.Plan`) with the preset ``name`` of its family and the
    scheduler it asks for, before any weight is read (None: ``plan`` as it is).

    Raises:
        InputError: not a preset of the plan's family (naming ``spelling``).
    """
    if name is None:
        return plan
    preset = find_preset(name, plan.pipeline, spelling)
    preset.cache_config(plan.pipeline, plan.info.defaults.num_inference_steps)  # refused here, before any weight
    return dataclasses.replace(plan, preset=preset, scheduler=preset_scheduler(preset, plan.pipeline, plan.checkpoint))


def with_preset_call(plan: Any, given: Mapping[str, Any]) -> Any:
    """``plan`` with its call (as :func:`~vidax.pipelines.plan.with_call`: checked by its
    :class:`~vidax.pipelines.spec.FamilySpec`): ``given`` over the plan's preset's keywords,
    checked against the preset's scheduler where it sets one."""
    kwargs, _ = preset_call(plan.preset, given)
    return dataclasses.replace(plan, call=plan.spec.check_call(**kwargs))


def preset_summary(plan: Any, given: Mapping[str, Any], cache_given: bool = False) -> str | None:
    """The run summary's line for ``plan``'s preset (None: no preset)."""
    if plan.preset is None:
        return None
    return describe(plan.preset, preset_call(plan.preset, given, cache_given)[1])


def recognise(plan: Any, lora_paths: Any = ()) -> tuple[Preset, str] | None:
    """``(preset, why)`` where the checkpoint's configs or a LoRA file say which recipe they need:
    a LoRA with LightX2V's ``diff_m`` keys, or metadata / a file name naming LightX2V or CausVid;
    a HunyuanVideo 1.5 transformer with ``use_meanflow`` (step-distilled) or a guider at
    guidance 1.0 (CFG-distilled). None: nothing says so (nothing changes).

    ``lora_paths``: the LoRA files, each a path (merged at weight 1.0) or a ``(path, weight)``
    pair as ``--lora FILE:WEIGHT`` gives it. A recognised LoRA whose weight is not its recipe's
    (:attr:`Preset.lora_weight`: CausVid's 0.3) says so in ``why``, with the flag that gives the
    recipe's weight."""
    family = family_of(plan.pipeline)
    own = {p.name: p for p in presets_for(family)}
    if family == "hunyuan_video15":
        info = plan.info
        if getattr(info.transformer_config, "use_meanflow", False):
            return own["step-distilled"], "transformer/config.json use_meanflow=true (step-distilled)"
        if getattr(info.guider_config, "guidance_scale", None) == 1.0:
            return own["cfg-distilled"], "guider/guider_config.json guidance_scale=1.0 (CFG-distilled)"
    for item in lora_paths:
        path, weight = item if isinstance(item, (tuple, list)) else (item, 1.0)
        found = _lora_marker(str(path))
        if found in own:
            return own[found], f"--lora {path} ({_LORA_WHY[found]}{lora_weight_note(own[found], path, weight)})"
    return None


def lora_weight_note(preset: Preset, path: Any, weight: float) -> str:
    """``"; merged at weight 1, its recipe's is 0.3: --lora PATH:0.3"`` where ``weight`` is not the
    preset's :attr:`~Preset.lora_weight` ("" where it is, or the recipe gives none)."""
    if preset.lora_weight is None or abs(float(weight) - preset.lora_weight) < 1e-9:
        return ""
    return (
        f"; merged at weight {float(weight):g}, its recipe's is {preset.lora_weight:g}: "
        f"--lora {path}:{preset.lora_weight:g}"
    )


def recognise_lora(path: str, family: str | None) -> tuple[Preset, str] | None:
    """``(preset, why)`` of a LoRA file alone (``vidax inspect LORA``): the recipe its keys,
    metadata or file name name, among the presets of ``family`` (the family whose transformer
    takes its modules; None: any). None: it names none."""
    found = _lora_marker(path)
    match = [p for p in PRESETS if p.name == found and (family is None or p.family == family)]
    if not match:
        return None
    weight = match[0].lora_weight
    note = "" if weight is None else f" (its recipe merges it at weight {weight:g}: --lora FILE:{weight:g})"
    return match[0], _LORA_WHY[found] + note


_LORA_WHY = {"lightx2v": "LightX2V step/CFG-distilled LoRA", "causvid": "CausVid LoRA"}


def _lora_marker(path: str) -> str | None:
    """``"lightx2v"`` / ``"causvid"`` where the LoRA file says so: LightX2V's ``diff_m`` keys or
    its name in the safetensors metadata or the file name; None otherwise."""
    import os

    from safetensors import safe_open

    try:
        with safe_open(path, "np") as f:
            keys, metadata = list(f.keys()), f.metadata() or {}
    except Exception:  # not a safetensors file: the LoRA reader says why
        return None
    text = (" ".join(f"{k} {v}" for k, v in metadata.items()) + " " + os.path.basename(path)).lower()
    if any(k.endswith(".diff_m") for k in keys) or "lightx2v" in text:
        return "lightx2v"
    if "causvid" in text:
        return "causvid"
    return None


def distilled_warning(preset: Preset, why: str, call: Any) -> str | None:
    """One line when a recognised distilled recipe runs with >= 20 steps and CFG on (None: not so)."""
    if call.num_inference_steps >= 20 and call.do_cfg:
        return (
            f"{why} is distilled, yet this call runs {call.num_inference_steps} steps with classifier-free "
            f"guidance (guidance_scale={call.guidance_scale:g}): --preset {preset.name} sets "
            + ", ".join(f"{k}={_short(v)}" for k, v in preset.settings().items())
        )
    return None
