"""Presets (issue 41): each preset's values are the documented recipe, explicit keywords win,
a preset of another family is refused naming the argument, and the scheduler it asks for is
built from the checkpoint's config before any weight is read."""

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
        assert p.family in {"wan", "ltx2", "hunyuan_video15", "hunyuan_video", "cogvideox", "ltx", "cosmos", "cosmos3"}


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
    line = (
        "preset lightx2v: num_inference_steps=4, guidance_scale=1, scheduler=FlowMatchEulerDiscreteScheduler, shift=5"
    )
    assert r.output.count(line) == 2 and "(4 steps," in r.output, r.output
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
