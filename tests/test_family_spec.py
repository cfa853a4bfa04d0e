"""Every registered family's spec (:class:`vidax.pipelines.spec.FamilySpec`) is built from its
configs alone and runs a call's checks and defaults with no weight: one released configuration per
family (``reference_configs/``, where a folder there lacks a component's config the test adds one
from the folder's own ``arch_essentials.json`` or from the Wan folder it shares it with), every task
each does."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from vidax.errors import InputError
from vidax.pipelines.options import SHARED_OPTIONS
from vidax.pipelines.plan import read_plan
from vidax.pipelines.spec import FamilySpec
from vidax.registry import registry

pytestmark = pytest.mark.fast

REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference_configs")
WAN = "Wan-AI__Wan2.1-T2V-1.3B-Diffusers"
QWEN_ROPE = {"rope_type": "default", "mrope_section": [16, 24, 24]}

#: family -> (reference folder, model_index.json entries to add, component -> config to write).
#: A config is ``("essentials", extra keys)`` (the folder's arch_essentials.json) or ``("wan", name)``.
FOLDERS = {
    "wan": (WAN, {}, {}),
    "cogvideox": ("THUDM__CogVideoX-5b-I2V", {}, {}),
    "cosmos": (
        "nvidia__Cosmos-Predict2.5-2B",
        {"tokenizer": ["transformers", "Qwen2TokenizerFast"]},
        {"text_encoder": ("essentials", {"model_type": "qwen2_5_vl", "rope_parameters": QWEN_ROPE}, True)},
    ),
    "cosmos3": ("nvidia__Cosmos3-Nano", {}, {}),
    "hunyuan_video": ("hunyuanvideo-community__HunyuanVideo-I2V", {}, {}),
    "hunyuan_video15": (
        "hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-480p_t2v",
        {
            "text_encoder": ["transformers", "Qwen2_5_VLTextModel"],
            "tokenizer": ["transformers", "Qwen2Tokenizer"],
            "tokenizer_2": ["transformers", "ByT5Tokenizer"],
        },
        {
            "text_encoder": ("essentials", {"model_type": "qwen2_5_vl_text", "rope_parameters": QWEN_ROPE}, False),
            "text_encoder_2": ("essentials", {"model_type": "t5"}, False),
            "tokenizer_2": None,
        },
    ),
    "ltx": ("Lightricks__LTX-Video-0.9.7-dev", {}, {}),
    "ltx2": ("Lightricks__LTX-2", {}, {}),
    "skyreels_v2": (
        "Skywork__SkyReels-V2-DF-1.3B-540P-Diffusers",
        {},
        {"text_encoder": ("wan", "text_encoder"), "vae": ("wan", "vae"), "tokenizer": None},
    ),
}


def _essentials(path: str, extra: dict, nested: bool) -> dict:
    with open(os.path.join(path, "arch_essentials.json")) as f:
        arch = {
            k: v
            for k, v in json.load(f).items()
            if not k.startswith("_") and not k.startswith(("source", "hf_", "base_"))
        }
    if nested:  # a ForConditionalGeneration class: the language model's numbers under text_config
        return {"model_type": extra["model_type"], "text_config": {**arch, "rope_parameters": extra["rope_parameters"]}}
    return {**arch, **extra}


def configs_folder(root, family: str) -> str:
    """The family's reference folder, completed where it lacks a component's config (no weights)."""
    name, index, components = FOLDERS[family]
    src = os.path.join(REFERENCE, name)
    if not index and not components:
        return src
    dst = os.path.join(str(root), name)
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "model_index.json")) as f:
        model_index = json.load(f)
    with open(os.path.join(dst, "model_index.json"), "w") as f:
        json.dump({**model_index, **index}, f)
    for component, how in components.items():
        folder = os.path.join(dst, component)
        os.makedirs(folder, exist_ok=True)
        if how is None:  # a tokenizer: random weights read a stand-in
            continue
        if how[0] == "wan":
            shutil.copy(os.path.join(REFERENCE, WAN, how[1], "config.json"), folder)
            continue
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(_essentials(folder, how[1], how[2]), f)
    return dst


FAMILIES = sorted({p.family for p in registry().pipelines()})


def test_every_registered_family_has_a_configs_folder_here():
    assert sorted(FOLDERS) == FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_spec_runs_the_call_checks_and_defaults_from_configs_alone(family, tmp_path):
    folder = configs_folder(tmp_path, family)
    assert not any(f.endswith((".safetensors", ".bin")) for _, _, fs in os.walk(folder) for f in fs)
    info = read_plan(folder, random_weights=True).info
    for task in info.tasks:
        plan = read_plan(folder, task=task, random_weights=True)
        spec = plan.spec
        assert isinstance(spec, FamilySpec) and spec is plan.spec and spec.family == family
        assert spec.pipeline is plan.pipeline
        assert all(registry().pipeline(c).load() is spec.pipeline for c in spec.diffusers_classes)
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.task = "x"
        assert [c.name for c in spec.components if c.denoises] == list(info.transformers)
        assert all(c.kind is not None for c in spec.components if c.denoises)
        # Each shared keyword is taken (among the options) or untaken, never both: image for a
        # text-to-video class too.
        shared = {o.name for o in SHARED_OPTIONS}
        assert set(spec.unsupported_call_args) == shared - set(spec.call_args), spec.pipeline
        image = {"image": np.zeros((48, 64, 3), np.uint8)} if "image" in spec.call_args and spec.task == "i2v" else {}
        if spec.task == "v2v" and "overlap_history" in spec.call_args:  # SkyReels-V2's extension needs both
            image = {"video": np.zeros((17, 48, 64, 3), np.uint8), "overlap_history": 17}
        call = spec.check_call("a cat", **image)
        d = spec.defaults
        assert (call.height, call.width, call.num_inference_steps) == (d.height, d.width, d.num_inference_steps)
        assert call.num_frames == plan.pipeline.family.resolve_num_frames(info, d.num_frames)
        assert call.max_sequence_length == d.max_sequence_length and call.prompts == ["a cat"]
        shapes = spec.latent_shapes(call)
        assert spec.latent_streams[0] in shapes and set(shapes) <= set(spec.latent_streams)
        if spec.audio_stream is not None:
            assert spec.audio_stream in spec.latent_streams
        with pytest.raises(InputError, match="takes no 'not_a_keyword'"):
            spec.check_call("a cat", not_a_keyword=1, **image)
        with pytest.raises(InputError, match="num_inference_steps"):
            spec.check_call("a cat", num_inference_steps=0, **image)


def test_hooks_read_the_pipeline_by_name_only():
    """A family's hooks read the pipeline's components and settings as ``self.pipe.X``: an
    attribute the hooks lack raises AttributeError (no forwarding to the pipeline, which let a
    hooks attribute of the same name hide the pipeline's), for every registered pipeline class."""
    from types import SimpleNamespace

    info = SimpleNamespace(boundary_ratio=None)  # what a hooks' __init__ reads (Wan's expert switch)
    pipe = SimpleNamespace(vae="the pipeline's vae", dtype="the pipeline's dtype", info=info, scheduler=None)
    classes = {spec.load().family for spec in registry().pipelines()}
    assert len(classes) > 10
    for hooks_class in classes:
        hooks = hooks_class(pipe)
        assert hooks.pipe is pipe
        for name in ("vae", "dtype", "info", "scheduler"):
            with pytest.raises(AttributeError):
                getattr(hooks, name)


def test_family_call_rules_run_around_the_shared_checks(tmp_path):
    """A family's declared call rules (:class:`~vidax.pipelines.call.CallRule`) run around the
    shared checks, with no callback: each ``before`` in order (the first rule the outermost) on the
    keywords the rules before it made, the shared checks on the last ones, each ``after`` in the
    reverse order with the keywords its own ``before`` was given."""
    from vidax.pipelines.call import CallRule

    plan = read_plan(configs_folder(tmp_path, "wan"), random_weights=True)
    seen = []

    def rule(name, steps):
        def before(family, info, keywords):
            seen.append((name, "before", keywords["num_inference_steps"]))
            return {**keywords, "num_inference_steps": steps}

        def after(family, info, call, keywords):
            seen.append((name, "after", keywords["num_inference_steps"], call.num_inference_steps))
            return dataclasses.replace(call, given=call.given | {name})

        return CallRule(before, after)

    class Hooks(plan.pipeline.family):
        call_rules = (rule("outer", 3), rule("inner", 4))

    class Pipeline(plan.pipeline):
        family = Hooks

    call = Pipeline.check_call(plan.info, "a cat", num_inference_steps=2)
    assert call.num_inference_steps == 4 and {"outer", "inner"} <= call.given
    assert seen == [
        ("outer", "before", 2),
        ("inner", "before", 3),
        ("inner", "after", 3, 4),
        ("outer", "after", 2, 4),
    ]


def test_default_denoise_makes_the_schedule_it_runs():
    """``FamilyHooks.denoise`` makes the call's schedule (``set_timesteps`` of the prepared
    latents) and hands it to ``pipe.denoiser.segments``, so the run enters it once: the latents
    it returns are the loop's."""
    from types import SimpleNamespace

    from vidax.pipelines.hooks import FamilyHooks

    handed = []
    scheduler = SimpleNamespace(set_timesteps=lambda n, sample_shape: ("schedule", n, sample_shape))
    denoiser = SimpleNamespace(segments=lambda *args: handed.append(args) or ("latents after", "state after"))
    pipe = SimpleNamespace(scheduler=scheduler, denoiser=denoiser)
    call = SimpleNamespace(num_inference_steps=2)
    x = np.zeros((1, 2, 4, 4, 3), np.float32)
    assert FamilyHooks(pipe).denoise(call, x, "embeds", {}, "stats") == "latents after"
    assert handed == [(pipe, call, x, ("schedule", 2, x.shape), "embeds", {}, "stats")]
