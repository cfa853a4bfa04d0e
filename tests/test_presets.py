"""Presets (issue 41): each preset's values are the documented recipe, explicit keywords win,
a preset of another family is refused naming the argument, and the scheduler it asks for is
built from the checkpoint's config before any weight is read."""

import re

import pytest

from vidax.errors import InputError
from vidax.pipelines import presets
from vidax.pipelines.plan import read_plan


@pytest.fixture(scope="module")
def wan_plan():
    return read_plan("vidax/tiny-random-wan")


def by_name(family, name):
    return next(p for p in presets.PRESETS if p.family == family and p.name == name)


def test_ltx2_distilled_sigmas_are_diffusers_constant():
    utils = pytest.importorskip("diffusers.pipelines.ltx2.utils")
    p = by_name("ltx2", "distilled")
    assert p.call["sigmas"] == list(utils.DISTILLED_SIGMA_VALUES)
    assert p.call["num_inference_steps"] == len(utils.DISTILLED_SIGMA_VALUES) == 8
    assert p.call["guidance_scale"] == p.call["audio_guidance_scale"] == 1.0


def test_lightx2v_is_its_config_recipe():
    # LightX2V configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json: infer_steps 4,
    # enable_cfg false, sample_shift 5 (its Euler flow-matching step scheduler).
    p = by_name("wan", "lightx2v")
    assert p.settings() == {
        "num_inference_steps": 4,
        "guidance_scale": 1.0,
        "scheduler": "FlowMatchEulerDiscreteScheduler",
        "shift": 5.0,
    }


def test_causvid_is_its_card_recipe():
    # The CausVid LoRA card (Kijai): CFG 1; LoRA weight 0.3 with UniPC, about 12 steps.
    assert by_name("wan", "causvid").settings() == {
        "num_inference_steps": 12,
        "guidance_scale": 1.0,
        "scheduler": "UniPCMultistepScheduler",
    }
    assert "0.3" in by_name("wan", "causvid").doc


def test_hunyuan15_distilled_recipes():
    # The HV1.5 card: 8 or 12 steps (8 here); diffusers' conversion script: distilled and
    # step-distilled guiders at guidance_scale 1.0, step-distilled shift 7.0.
    assert by_name("hunyuan_video15", "step-distilled").settings() == {
        "num_inference_steps": 8,
        "guidance_scale": 1.0,
        "shift": 7.0,
    }
    assert by_name("hunyuan_video15", "cfg-distilled").settings() == {"guidance_scale": 1.0}


def test_every_preset_has_a_family_doc_and_source():

    names = [(p.family, p.name) for p in presets.PRESETS]
    assert len(set(names)) == len(names)
    for p in presets.PRESETS:
        assert p.doc and "\n" not in p.doc and p.source, p
        assert p.family in {
            "wan",
            "ltx2",
            "hunyuan_video15",
            "hunyuan_video",
            "cogvideox",
            "ltx",
            "cosmos",
            "cosmos3",
            "skyreels_v2",
        }


def test_explicit_keywords_win():
    p = by_name("wan", "lightx2v")
    kwargs, applied = presets.preset_call(p, {"num_inference_steps": 6, "prompt": "a cat"})
    assert kwargs == {"num_inference_steps": 6, "guidance_scale": 1.0, "prompt": "a cat"}
    assert applied == {"guidance_scale": 1.0}
    assert presets.describe(p, applied) == (
        "preset lightx2v: guidance_scale=1, scheduler=FlowMatchEulerDiscreteScheduler, shift=5"
    )


def test_preset_of_another_family_is_refused_naming_the_argument(wan_plan):
    with pytest.raises(
        InputError,
        match=r"--preset 'distilled' is not a preset of WanPipeline \(it is ltx2's\); "
        r"its presets: lightx2v, causvid",
    ):
        presets.find_preset("distilled", wan_plan.pipeline, "--preset")


def test_preset_names_are_case_insensitive_with_did_you_mean(wan_plan, tmp_path):
    """``preset="LightX2V"`` is lightx2v (in the plan too); a near miss is refused naming the
    argument as typed, the family's presets and the closest one (difflib); the CLI says the same
    before loading."""
    from typer.testing import CliRunner

    from vidax.cli import app

    assert presets.find_preset("LightX2V", wan_plan.pipeline) is by_name("wan", "lightx2v")
    assert presets.with_preset(wan_plan, "CAUSVID").preset is by_name("wan", "causvid")
    valid = ", ".join(p.name for p in presets.presets_for("wan"))
    with pytest.raises(
        InputError,
        match=rf"^preset='LightX2' is not a preset of WanPipeline; its presets: {valid}; did you mean 'lightx2v'\?$",
    ):
        presets.find_preset("LightX2", wan_plan.pipeline)
    with pytest.raises(InputError, match=rf"its presets: {valid}$"):  # nothing close: no guess
        presets.find_preset("zzz", wan_plan.pipeline)
    r = CliRunner().invoke(
        app,
        ["generate", "--prompt", "a", "--preset", "causvd", "--output", str(tmp_path / "a.npy")],
        terminal_width=400,
    )
    assert r.exit_code == 2 and "--preset 'causvd' is not a preset of WanPipeline" in r.output, r.output
    assert "did you mean 'causvid'?" in r.output and "loading" not in r.output, r.output


def test_recognised_lora_at_another_weight_than_its_recipe_says_so(wan_plan, tmp_path):
    """CausVid's recipe merges its LoRA at 0.3: recognised at weight 1 (a plain path, or
    ``--lora FILE:1``), the recognition line says so and gives the flag; at 0.3 it does not;
    LightX2V's recipe gives no weight (nothing said)."""
    causvid = _tiny_wan_lora(tmp_path / "Wan21_CausVid_14B_T2V_lora_rank32.safetensors")
    note = f"; merged at weight 1, its recipe's is 0.3: --lora {causvid}:0.3)"
    for given in (causvid, (causvid, 1.0)):
        preset, why = presets.recognise(wan_plan, [given])
        assert preset.name == "causvid" and why == f"--lora {causvid} (CausVid LoRA{note}", why
    assert presets.recognise(wan_plan, [(causvid, 0.3)])[1] == f"--lora {causvid} (CausVid LoRA)"
    light = _tiny_wan_lora(tmp_path / "lightx2v_4step.safetensors")
    assert presets.recognise(wan_plan, [(light, 0.7)])[1] == f"--lora {light} (LightX2V step/CFG-distilled LoRA)"


def test_inspect_lora_prints_the_recognition_line(tmp_path):
    """``vidax inspect LORA``: the recipe the file is recognised as and, for CausVid, the weight its
    recipe merges it at; a LoRA that names no recipe, or one of another family: none."""
    from typer.testing import CliRunner

    from vidax.cli import app

    causvid = _tiny_wan_lora(tmp_path / "Wan21_CausVid_14B_T2V_lora_rank32.safetensors")
    r = CliRunner().invoke(app, ["inspect", causvid], terminal_width=400)
    assert r.exit_code == 0, r.output
    want = "\n  recognised: CausVid LoRA (its recipe merges it at weight 0.3: --lora FILE:0.3): --preset causvid\n"
    assert want in r.output + "\n", r.output
    # A LoRA that names no recipe: "recognised: none (...)" (the same function, without the second inspect).
    assert presets.recognise_lora(_tiny_wan_lora(tmp_path / "style.safetensors"), "wan") is None
    assert presets.recognise_lora(causvid, "ltx2") is None  # CausVid is a Wan recipe


def test_scheduler_is_built_before_any_weight(wan_plan):
    p = presets.find_preset("lightx2v", wan_plan.pipeline)
    sched = presets.preset_scheduler(p, wan_plan.pipeline, wan_plan.checkpoint)
    assert type(sched).__name__ == "FlowMatchEulerDiscreteScheduler" and sched.config.shift == 5.0
    plan = presets.with_preset(wan_plan, "lightx2v")
    plan = presets.with_preset_call(plan, {"prompt": "a cat", "guidance_scale": 3.0})
    assert plan.call.num_inference_steps == 4 and plan.call.guidance_scale == 3.0 and plan.call.do_cfg


def test_cli_preset_runs_its_steps_and_says_so(tmp_path):
    """--preset lightx2v on the embedded tiny Wan: 4 steps, one line naming the preset and the
    values it set (before loading, and in the summary); an explicit flag wins; a preset of
    another family is one line naming --preset, nothing loaded; --help lists the presets."""
    from typer.testing import CliRunner

    from vidax.cli import app

    base = [
        "generate",
        "--prompt",
        "a red car",
        "--height",
        "32",
        "--width",
        "32",
        "--num-frames",
        "5",
        "--max-sequence-length",
        "8",
        "--no-progress",
        "--preset",
        "lightx2v",
    ]
    r = CliRunner().invoke(app, base + ["--output", str(tmp_path / "a.npy")])
    assert r.exit_code == 0, r.output
    values = "num_inference_steps=4, guidance_scale=1, scheduler=FlowMatchEulerDiscreteScheduler, shift=5"
    assert f"\npreset lightx2v: {values}\n" in r.output and "(4 steps," in r.output, r.output
    assert re.search(rf"\n  preset +lightx2v: {values}\n", r.output.split("summary:")[1]), r.output
    r = CliRunner().invoke(app, base + ["--num-inference-steps", "2", "--output", str(tmp_path / "b.npy")])
    assert r.exit_code == 0 and "(2 steps," in r.output and "num_inference_steps=4" not in r.output, r.output
    r = CliRunner().invoke(app, base[:-1] + ["distilled", "--output", str(tmp_path / "c.npy")])
    assert r.exit_code == 2 and "--preset 'distilled' is not a preset of WanPipeline" in r.output, r.output
    assert "loading" not in r.output
    r = CliRunner().invoke(app, ["generate", "--help"], terminal_width=400)
    assert all(p.name in r.output for p in presets.PRESETS)


@pytest.mark.parametrize(
    "keys,metadata,name,want",
    [
        (
            ["diffusion_model.blocks.0.diff_m", "diffusion_model.blocks.0.self_attn.q.lora_down.weight"],
            {},
            "a.safetensors",
            "lightx2v",
        ),
        (
            ["diffusion_model.blocks.0.self_attn.q.lora_down.weight"],
            {"source": "lightx2v 4step distill"},
            "b.safetensors",
            "lightx2v",
        ),
        (
            ["diffusion_model.blocks.0.self_attn.q.lora_down.weight"],
            {},
            "Wan21_CausVid_14B_T2V_lora_rank32.safetensors",
            "causvid",
        ),
        (
            ["diffusion_model.blocks.0.self_attn.q.lora_down.weight"],
            {"ss_network_dim": "32"},
            "style.safetensors",
            None,
        ),
    ],
)
def test_lora_recognised_by_its_markers(wan_plan, tmp_path, keys, metadata, name, want):
    import numpy as np
    from safetensors.numpy import save_file

    path = tmp_path / name
    save_file({k: np.zeros((2, 2), np.float32) for k in keys}, str(path), metadata=metadata or None)
    found = presets.recognise(wan_plan, [str(path)])
    assert (found and found[0].name) == want
    if want:
        assert found[1].startswith(f"--lora {path}")


def test_distilled_run_with_many_steps_and_cfg_is_warned(wan_plan):
    p = presets.find_preset("lightx2v", wan_plan.pipeline)
    many = presets.with_preset_call(wan_plan, {"prompt": "a", "num_inference_steps": 50, "guidance_scale": 5.0})
    line = presets.distilled_warning(p, "--lora x", many.call)
    assert (
        line.startswith(
            "--lora x is distilled, yet this call runs 50 steps with classifier-free guidance "
            "(guidance_scale=5): --preset lightx2v sets num_inference_steps=4"
        )
        and "\n" not in line
    )
    few = presets.with_preset_call(wan_plan, {"prompt": "a", "num_inference_steps": 50, "guidance_scale": 1.0})
    assert presets.distilled_warning(p, "--lora x", few.call) is None


def test_hunyuan15_checkpoint_markers(tmp_path):
    """The guider at 1.0 (CFG-distilled) and use_meanflow (step-distilled) pick their presets; a
    plain checkpoint (its guider's CFG on) none."""
    import types

    from vidax.models.hunyuan_video15.pipeline import HunyuanVideo15Pipeline

    def plan(meanflow, scale):
        info = types.SimpleNamespace(
            transformer_config=types.SimpleNamespace(use_meanflow=meanflow),
            guider_config=types.SimpleNamespace(guidance_scale=scale),
        )
        return types.SimpleNamespace(pipeline=HunyuanVideo15Pipeline, info=info)

    assert presets.recognise(plan(True, 1.0))[0].name == "step-distilled"
    assert presets.recognise(plan(False, 1.0))[0].name == "cfg-distilled"
    assert presets.recognise(plan(False, 6.0)) is None


SMALL = dict(prompt="a cat", height=32, width=32, num_frames=5, max_sequence_length=8, progress=False, seed=0)
LIGHTX2V_VALUES = "num_inference_steps=4, guidance_scale=1, scheduler=FlowMatchEulerDiscreteScheduler, shift=5"


@pytest.fixture(scope="module")
def lightx2v_pipe():
    import vidax

    return vidax.load_pipeline("vidax/tiny-random-wan", preset="lightx2v", progress=False)


def test_load_pipeline_preset_sets_the_scheduler_and_each_calls_defaults(lightx2v_pipe):
    """load_pipeline(preset=) applies the preset in the plan: its sampler is the pipeline's, its
    keywords every call's defaults under the keywords given; out.stats says what ran."""
    pipe = lightx2v_pipe
    assert pipe.preset.name == "lightx2v"
    assert type(pipe.scheduler).__name__ == "FlowMatchEulerDiscreteScheduler" and pipe.scheduler.config.shift == 5.0
    out = pipe(**SMALL, output_type="latent")
    assert len(out.stats.step_s) == 4 and out.stats.preset == f"preset lightx2v: {LIGHTX2V_VALUES}"
    assert re.search(rf"\n  preset +lightx2v: {LIGHTX2V_VALUES}\n", out.stats.summary())
    out = pipe(**SMALL, num_inference_steps=2, output_type="latent")
    assert len(out.stats.step_s) == 2
    assert out.stats.preset == "preset lightx2v: guidance_scale=1, scheduler=FlowMatchEulerDiscreteScheduler, shift=5"


def test_call_preset_samples_with_its_scheduler_for_that_call_only(lightx2v_pipe):
    """pipe(preset="causvid") on a pipeline loaded with lightx2v: the call runs the checkpoint's
    UniPC (the causvid preset's sampler), the same latents as the pipeline with that scheduler set
    by hand at the causvid keywords; the loaded scheduler is back afterwards."""
    import numpy as np

    from vidax.schedulers import scheduler_from_config

    seen = []
    pipe, loaded = lightx2v_pipe, lightx2v_pipe.scheduler
    out = pipe(
        **SMALL,
        preset="causvid",
        num_inference_steps=3,
        output_type="latent",
        callback=lambda i, n: seen.append(type(pipe.scheduler)),
    )
    assert [c.__name__ for c in seen] == ["UniPCMultistepScheduler"] * 3
    assert pipe.scheduler is loaded
    assert out.stats.preset == "preset causvid: guidance_scale=1, scheduler=UniPCMultistepScheduler"
    pipe.scheduler = scheduler_from_config(pipe.checkpoint.config("scheduler"))
    try:
        want = pipe(**SMALL, num_inference_steps=3, guidance_scale=1.0, output_type="latent").frames
    finally:
        pipe.scheduler = loaded
    np.testing.assert_array_equal(out.frames, want)


def test_bad_preset_name_is_refused_before_any_weight(lightx2v_pipe, tmp_path):
    """A preset not of the family: InputError naming preset=, the value and the family's presets,
    from load_pipeline before any weight is read (the checkpoint has no transformer weights) and
    from a call before any work."""
    import glob
    import os
    import shutil

    import vidax
    from vidax.default_checkpoint import default_checkpoint

    folder = str(tmp_path / "no_weights")
    shutil.copytree(default_checkpoint(), folder)
    for f in glob.glob(os.path.join(folder, "transformer", "*.safetensors")):
        os.remove(f)
    valid = ", ".join(p.name for p in presets.presets_for("wan"))
    msg = rf"^preset='distilled' is not a preset of WanPipeline \(it is ltx2's\); its presets: {valid}$"
    with pytest.raises(InputError, match=msg):
        vidax.load_pipeline(folder, preset="distilled")
    with pytest.raises(vidax.CheckpointError):  # what the load would have met
        vidax.load_pipeline(folder, progress=False)
    with pytest.raises(InputError, match=rf"^preset='nope' is not a preset of WanPipeline; its presets: {valid}$"):
        lightx2v_pipe(**SMALL, preset="nope")


@pytest.mark.parametrize("extra", [{}, {"shift_terminal": 0.1}])
def test_sampler_switch_keeps_what_diffusers_from_config_keeps(extra):
    """A preset that changes the sampler class builds it as diffusers'
    ``NewScheduler.from_config(old.config, **settings)``: the config and the sigmas / timesteps
    equal diffusers' (with a checkpoint setting the new class shares, shift_terminal, carried over)."""
    import dataclasses
    import types

    import numpy as np

    diffusers = pytest.importorskip("diffusers")
    from vidax.default_checkpoint import SCHEDULER
    from vidax.models.wan.pipeline import WanPipeline

    config = {**SCHEDULER, **extra}
    old = diffusers.UniPCMultistepScheduler.from_config(config)
    ref = diffusers.FlowMatchEulerDiscreteScheduler.from_config(old.config, shift=5.0)
    checkpoint = types.SimpleNamespace(config=lambda name: config)
    got = presets.preset_scheduler(by_name("wan", "lightx2v"), WanPipeline, checkpoint)
    assert {f.name: getattr(got.config, f.name) for f in dataclasses.fields(got.config)} == {
        f.name: ref.config[f.name] for f in dataclasses.fields(got.config)
    }
    ref.set_timesteps(4)
    state = got.set_timesteps(4)
    np.testing.assert_allclose(np.asarray(state.sigmas), ref.sigmas.numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(state.timesteps), ref.timesteps.numpy(), rtol=1e-6)


def _tiny_wan_lora(path, metadata=None):
    """A one-module LoRA for the tiny Wan transformer (blocks.0 self-attention q, original layout)."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file(
        {
            "diffusion_model.blocks.0.self_attn.q.lora_down.weight": (rng.standard_normal((2, 64)) * 0.01).astype(
                np.float32
            ),
            "diffusion_model.blocks.0.self_attn.q.lora_up.weight": (rng.standard_normal((64, 2)) * 0.01).astype(
                np.float32
            ),
        },
        str(path),
        metadata=metadata,
    )
    return str(path)


def _generate(tmp_path, *flags):
    from typer.testing import CliRunner

    from vidax.cli import app

    args = ["generate", "--prompt", "a red car", "--height", "32", "--width", "32", "--num-frames", "1"]
    args += ["--max-sequence-length", "8", "--no-progress", "--output", str(tmp_path / "out.npy"), *flags]
    return CliRunner().invoke(app, args, terminal_width=400)


def test_cli_recognises_a_lora_that_says_what_it_is(tmp_path):
    """vidax generate --lora with Kijai's LightX2V file name: one line saying what was recognised
    and which preset, 4 steps, the summary naming the preset; a LoRA that says nothing: nothing
    changes (the checkpoint's 10 steps, no preset line)."""
    lora = _tiny_wan_lora(tmp_path / "Wan21_T2V_14B_lightx2v_cfg_step_distill_lora_rank32.safetensors")
    r = _generate(tmp_path, "--lora", lora)
    assert r.exit_code == 0, r.output
    assert r.output.count("--preset lightx2v") == 1, r.output
    assert f"--lora {lora} (LightX2V step/CFG-distilled LoRA): --preset lightx2v\n" in r.output
    assert "(4 steps," in r.output and re.search(rf"\n  preset +lightx2v: {LIGHTX2V_VALUES}\n", r.output)
    r = _generate(tmp_path, "--lora", _tiny_wan_lora(tmp_path / "style.safetensors"), "--overwrite")
    assert r.exit_code == 0, r.output
    assert "preset" not in r.output and "(10 steps," in r.output, r.output


@pytest.fixture(scope="module")
def a14b(tmp_path_factory):
    from tests.parity.wan_reference import write_tiny_wan_variant

    return write_tiny_wan_variant(str(tmp_path_factory.mktemp("a14b_presets")), boundary_ratio=0.875)


def test_wan22_two_experts_lightx2v(a14b, tmp_path):
    """Wan2.2 A14B (transformer + transformer_2) with the lightx2v preset: no CFG on either expert
    (guidance_scale_2 follows guidance_scale 1, as diffusers), the 4 Euler steps at shift 5 split
    between the experts at boundary_ratio as diffusers' WanPipeline splits them; a LightX2V
    LoRA on the command line is recognised and merged into both experts."""
    diffusers = pytest.importorskip("diffusers")
    import vidax

    pipe = vidax.load_pipeline(a14b, preset="lightx2v", progress=False)
    call = pipe.check_call(pipe.info, **presets.preset_call(pipe.preset, {"prompt": "a cat"})[0])
    assert (call.num_inference_steps, call.guidance_scale, call.guidance_scale_2, call.do_cfg) == (4, 1.0, 1.0, False)
    ref = diffusers.FlowMatchEulerDiscreteScheduler.from_config(
        diffusers.UniPCMultistepScheduler.from_config(pipe.checkpoint.config("scheduler")).config, shift=5.0
    )
    ref.set_timesteps(4)
    want = [0 if t >= 0.875 * 1000 else 1 for t in ref.timesteps]
    got = pipe.hooks.expert_plan(pipe.scheduler.set_timesteps(4))
    assert got == want and set(got) == {0, 1}
    lora = _tiny_wan_lora(tmp_path / "wan22_lightx2v_4step.safetensors")
    r = _generate(tmp_path, "--checkpoint", a14b, "--lora", lora)
    assert r.exit_code == 0, r.output
    assert f"--lora {lora} (LightX2V step/CFG-distilled LoRA): --preset lightx2v\n" in r.output
    assert "(4 steps," in r.output and re.search(rf"\n  preset +lightx2v: {LIGHTX2V_VALUES}\n", r.output)


@pytest.mark.parametrize(
    "repo,picked",
    [
        ("hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-480p_t2v_distilled", "cfg-distilled (guider/"),
        ("hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-480p_t2v", "none"),
    ],
)
def test_inspect_lists_the_family_presets_and_the_recognised_one(repo, picked, tmp_path):
    """vidax inspect: the presets of the checkpoint's family with the values each sets, and the one
    recognition picks from the configs (the released CFG-distilled HV1.5 folder: cfg-distilled; the
    plain one: none); the embedded Wan: Wan's presets."""
    from tests.test_hunyuan15_full_size import released_folder
    from vidax.cli.inspecting import describe_checkpoint

    folder = released_folder(repo, tmp_path)
    text = describe_checkpoint(folder)
    own = presets.presets_for("hunyuan_video15")
    assert f"\n  presets (--preset / preset=): {', '.join(p.name for p in own)}\n" in text, text
    assert "\n    step-distilled: num_inference_steps=8, guidance_scale=1, shift=7\n" in text, text
    assert f"\n  recognised: {picked}" in text, text
    text = describe_checkpoint("vidax/tiny-random-wan")
    assert f"\n    lightx2v: {LIGHTX2V_VALUES}\n" in text and "\n  recognised: none" in text, text


def test_hunyuan_video_quality_is_its_readme_recipe():
    # Tencent/HunyuanVideo README: sample_video.py --infer-steps 50 --embedded-cfg-scale 6.0 --flow-shift 7.0
    assert by_name("hunyuan_video", "quality").settings() == {
        "num_inference_steps": 50,
        "guidance_scale": 6.0,
        "shift": 7.0,
    }


def test_hunyuan_video_fast_is_paraattentions_first_block_cache():
    """ParaAttention's HunyuanVideo recipe: First Block Cache at residual_diff_threshold=0.035, 30
    steps; it is diffusers' FirstBlockCacheConfig(threshold=0.035), which HunyuanVideo text-to-video
    runs and its image-to-video does not (checked from the class alone)."""
    from vidax.models.hunyuan_video.pipeline import HunyuanVideoImageToVideoPipeline, HunyuanVideoPipeline
    from vidax.pipelines.step_cache import FirstBlockCacheConfig

    p = by_name("hunyuan_video", "fast")
    assert p.settings() == {"num_inference_steps": 30, "cache": "first_block:0.035"}
    assert p.cache_config(HunyuanVideoPipeline, 30) == FirstBlockCacheConfig(threshold=0.035)
    # image-to-video: diffusers runs no step cache there; refused naming the preset, from the class alone
    with pytest.raises(InputError, match=r"^preset 'fast' \(cache first_block:0.035\): diffusers 0.42.1's "):
        p.cache_config(HunyuanVideoImageToVideoPipeline, 30)


def test_cogvideox_quality_is_its_card_recipe():
    # THUDM/CogVideoX-5b model card: pipe(..., num_inference_steps=50, guidance_scale=6)
    assert by_name("cogvideox", "quality").settings() == {"num_inference_steps": 50, "guidance_scale": 6.0}


def test_a_presets_step_cache_is_on_unless_the_caller_chose_one(monkeypatch):
    """A preset with a step cache (a Wan one made for this test) turns it on at load and for the
    calls it runs; another preset's call runs without it; the caller's disable_cache() wins."""
    import vidax
    from vidax.pipelines.step_cache import FirstBlockCacheConfig

    cached = presets.Preset(
        "cached", "wan", "a test preset", "this test", call={"num_inference_steps": 3}, cache="first_block:0.05"
    )
    monkeypatch.setattr(presets, "PRESETS", presets.PRESETS + (cached,))
    pipe = vidax.load_pipeline("vidax/tiny-random-wan", preset="cached", progress=False)
    assert pipe.cache_config == FirstBlockCacheConfig(threshold=0.05)
    out = pipe(**SMALL, output_type="latent")
    assert (
        out.stats.cache is not None
        and out.stats.preset == "preset cached: num_inference_steps=3, cache=first_block:0.05"
    )
    out = pipe(**SMALL, preset="lightx2v", output_type="latent")
    assert out.stats.cache is None and pipe.cache_config == FirstBlockCacheConfig(threshold=0.05)
    pipe.disable_cache()
    out = pipe(**SMALL, output_type="latent")
    assert out.stats.cache is None and out.stats.preset == "preset cached: num_inference_steps=3"


def test_docs_list_every_preset():
    import os

    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "presets.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("| preset | family |") :].split("\n\n")[0]  # the presets table
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert sorted(row.split("`")[1] for row in rows) == sorted(p.name for p in presets.PRESETS)


def test_cli_preset_step_cache_and_cache_flag_wins(monkeypatch, tmp_path):
    """vidax generate --preset with a step cache (a Wan one made for this test): the cache runs
    and the summary names it; --cache given replaces it (the summary's preset row without it)."""
    cached = presets.Preset("cached", "wan", "a test preset", "this test", cache="first_block:0.05")
    monkeypatch.setattr(presets, "PRESETS", presets.PRESETS + (cached,))
    r = _generate(tmp_path, "--preset", "cached", "--num-inference-steps", "3")
    assert r.exit_code == 0, r.output
    assert re.search(r"\n  preset +cached: cache=first_block:0.05\n", r.output), r.output
    assert re.search(r"\n  step cache +first_block", r.output), r.output
    r = _generate(
        tmp_path, "--preset", "cached", "--num-inference-steps", "3", "--cache", "first_block:0.1", "--overwrite"
    )
    assert r.exit_code == 0, r.output
    assert "cache=first_block:0.05" not in r.output and re.search(r"\n  step cache +first_block.*0\.1", r.output), (
        r.output
    )


def test_skyreels_presets_are_their_sources_recipes():
    # diffusers 0.42.1 SkyReelsV2DiffusionForcingPipeline's example (T2V): flow_shift 8.0, 30 steps,
    # guidance 6.0, ar_step 5, causal_block_size 5, addnoise_condition 20.
    assert by_name("skyreels_v2", "async").settings() == {
        "num_inference_steps": 30,
        "guidance_scale": 6.0,
        "ar_step": 5,
        "causal_block_size": 5,
        "addnoise_condition": 20,
        "flow_shift": 8.0,
    }
    # SkyReels-V2 README: --ar_step 0 --overlap_history 17, --addnoise_condition 20 for long videos,
    # generate_video_df.py's defaults --inference_steps 30 --guidance_scale 6.0 --shift 8.0.
    assert by_name("skyreels_v2", "long").settings() == {
        "num_inference_steps": 30,
        "guidance_scale": 6.0,
        "ar_step": 0,
        "overlap_history": 17,
        "addnoise_condition": 20,
        "flow_shift": 8.0,
    }


def test_a_preset_runs_only_on_the_pipelines_that_take_its_keywords():
    """SkyReels-V2's diffusion-forcing presets: offered and taken on the DF pipelines (async on
    text-to-video alone, its recipe's task), refused elsewhere naming the preset and why: a
    keyword the pipeline does not take, or another task."""
    from vidax.models.skyreels_v2.pipeline import (
        SkyReelsV2DiffusionForcingImageToVideoPipeline,
        SkyReelsV2DiffusionForcingPipeline,
        SkyReelsV2DiffusionForcingVideoToVideoPipeline,
        SkyReelsV2Pipeline,
    )

    names = lambda cls: [p.name for p in presets.presets_of(cls)]  # noqa: E731
    assert names(SkyReelsV2DiffusionForcingPipeline) == ["async", "long"]
    assert names(SkyReelsV2DiffusionForcingVideoToVideoPipeline) == ["long"]
    assert names(SkyReelsV2DiffusionForcingImageToVideoPipeline) == ["long"]
    assert names(SkyReelsV2Pipeline) == []
    assert presets.find_preset("LONG", SkyReelsV2DiffusionForcingVideoToVideoPipeline).name == "long"
    with pytest.raises(
        InputError,
        match=r"^--preset 'async' is a recipe for t2v; SkyReelsV2DiffusionForcingVideoToVideoPipeline does v2v; "
        r"SkyReelsV2DiffusionForcingVideoToVideoPipeline's presets: long$",
    ):
        presets.find_preset("async", SkyReelsV2DiffusionForcingVideoToVideoPipeline, "--preset")
    with pytest.raises(
        InputError,
        match=r"^preset='long' sets ar_step, overlap_history, addnoise_condition, which SkyReelsV2Pipeline does "
        r"not take; SkyReelsV2Pipeline's presets: none$",
    ):
        presets.find_preset("long", SkyReelsV2Pipeline)
    # Every other preset runs on each pipeline of its family that takes its keywords.
    assert names(type("P", (), {"__module__": "vidax.models.wan.x", "call_args": classmethod(lambda c: ())})) == []


def test_skyreels_long_preset_runs_as_its_keywords_given_by_hand(skyreels_df_pipe):
    """pipe(preset="long") on the tiny DF checkpoint (two windows; the test's overlap_history and
    steps given, so they win): the same frames as the call with the preset's other keywords and its
    flow shift set by hand, and the summary says what it set."""
    import numpy as np

    from tests.test_skyreels_v2_on_top import LONG
    from vidax.schedulers import scheduler_from_config

    pipe = skyreels_df_pipe
    loaded = pipe.scheduler
    out = pipe("a cat", preset="long", **LONG)
    assert out.stats.preset == "preset long: ar_step=0, addnoise_condition=20, flow_shift=8"
    assert pipe.scheduler is loaded
    pipe.scheduler = scheduler_from_config({**pipe.checkpoint.config("scheduler"), "flow_shift": 8.0})
    try:
        want = pipe("a cat", **dict(LONG, ar_step=0, addnoise_condition=20)).frames
    finally:
        pipe.scheduler = loaded
    np.testing.assert_array_equal(out.frames, want)
    assert not np.array_equal(want, pipe("a cat", **LONG).frames)  # the preset's values change the video
