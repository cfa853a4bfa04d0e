"""A new family is its folder plus one registry line: ``tests/toy_family`` is registered from
outside vidax (``VIDAX_FAMILIES``) and runs through ``load_pipeline``, the CLI and ``inspect``
with no shared vidax file edited; it shares the Wan VAE, UMT5 and UniPC through the registry,
and the shared block streaming and staging work for it unchanged."""

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

import vidax
from vidax.io.video import read_video
from vidax.parallel.offload import OffloadConfig, offloaded_stacks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = {
    "_class_name": "ToyTransformer3DModel",
    "in_channels": 16,
    "dim": 32,
    "text_dim": 64,
    "num_layers": 3,
    "num_single_layers": 2,
}


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    """The embedded Wan checkpoint's tokenizer, UMT5, VAE and scheduler, plus a random toy transformer."""
    from tests.toy_family.checkpoint import write_toy_checkpoint

    return write_toy_checkpoint(
        tmp_path_factory.mktemp("toy") / "ckpt",
        str(tmp_path_factory.mktemp("cache")),
        "ToyVideoPipeline",
        {"transformer": TOY},
    )


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setenv("VIDAX_FAMILIES", "tests.toy_family")
    monkeypatch.syspath_prepend(REPO)


@pytest.mark.fast
def test_unregistered_family_is_refused(toy_checkpoint, monkeypatch):
    monkeypatch.delenv("VIDAX_FAMILIES", raising=False)
    with pytest.raises(vidax.ConfigError, match="pipeline 'ToyVideoPipeline' is not supported"):
        vidax.load_pipeline(toy_checkpoint)


@pytest.mark.fast
def test_toy_family_spec_comes_from_its_configs(toy_checkpoint, toy_registered):
    """The toy family writes no spec: its FamilySpec follows from its pipeline class and configs,
    and checks a call (its own keyword included) with no weight read."""
    from vidax.pipelines.plan import read_plan

    spec = read_plan(toy_checkpoint).spec
    assert (spec.family, spec.diffusers_classes, spec.latent_streams) == ("toy", ("ToyVideoPipeline",), ("latents",))
    assert [(c.name, c.kind, c.denoises) for c in spec.components if c.weighted] == [
        ("text_encoder", "text_encoder", False),
        ("transformer", "transformer", True),
        ("vae", "vae", False),
    ]
    assert "toy_repeat" in spec.call_args and not spec.makes_audio
    call = spec.check_call("a toy boat", toy_repeat=2)
    assert (call.num_frames, call.extra["toy_repeat"]) == (spec.defaults.num_frames, 2)
    with pytest.raises(vidax.InputError, match="toy_repeat"):
        spec.check_call("a toy boat", toy_repeat=0)


def test_toy_family_runs_through_load_pipeline(toy_checkpoint, toy_registered):
    pipe = vidax.load_pipeline(toy_checkpoint)
    assert type(pipe).__name__ == "ToyVideoPipeline" and pipe.defaults.num_frames == 5
    out = pipe("a toy boat", seed=0, progress=False)
    assert out.frames.shape == (1, 5, 32, 48, 3) and np.isfinite(out.frames).all()
    other = pipe("a toy boat", seed=1, progress=False).frames
    assert np.abs(other - out.frames).max() > 1e-3  # the video depends on the noise
    # The shared block streaming (both of its stacks) and staging run the new family unchanged,
    # and equal resident bit for bit.
    streamed = vidax.load_pipeline(
        toy_checkpoint, offload=OffloadConfig(chunk=2, keep_text_encoder=False, keep_vae=False)
    )
    stacks = offloaded_stacks(streamed.transformer)
    assert [(b.attr, b.sizes) for b in stacks] == [("blocks", [2, 1]), ("single_blocks", [2])]
    np.testing.assert_array_equal(streamed("a toy boat", seed=0, progress=False).frames, out.frames)
    with pytest.raises(vidax.InputError, match="takes no 'use_dynamic_cfg'; it takes prompt, negative_prompt"):
        pipe("a toy boat", use_dynamic_cfg=True)
    # The toy's own keyword, declared in its pipeline only, is checked with the shared ones.
    with pytest.raises(vidax.InputError, match=r"^toy_repeat must be a positive integer, got 0$"):
        pipe("a toy boat", toy_repeat=0)


def test_toy_family_runs_through_the_cli_and_inspect(toy_checkpoint, tmp_path):
    env = {
        **os.environ,
        "VIDAX_FAMILIES": "tests.toy_family",
        "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
    }
    out = tmp_path / "toy.mp4"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "vidax",
            "generate",
            "-p",
            "a toy boat",
            "--checkpoint",
            toy_checkpoint,
            "-o",
            str(out),
            "--no-progress",
            "--offload-blocks",
            "1",
            "--toy-repeat",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert read_video(out).shape == (10, 32, 48, 3)  # --toy-repeat reached the toy's call: each frame twice
    r = subprocess.run(
        [sys.executable, "-m", "vidax", "inspect", toy_checkpoint, "--mesh", "1x1x1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "variant: Toy T2V: 3 layers" in r.stdout and "num_layers=3, num_single_layers=2, dim=32" in r.stdout


def test_toy_family_keyword_is_a_flag_without_editing_the_cli(toy_checkpoint, toy_registered, tmp_path):
    """The toy's ``toy_repeat``, declared in its pipeline only, is a ``vidax generate`` flag: in
    --help, and a bad value is one line naming the flag, before any weight is read."""
    from typer.testing import CliRunner

    from vidax.cli import app

    r = CliRunner().invoke(app, ["generate", "--help"])
    assert r.exit_code == 0 and "--toy-repeat" in r.stdout and "Show each decoded frame" in r.stdout, r.output
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "a toy boat",
            "--checkpoint",
            toy_checkpoint,
            "--toy-repeat",
            "0",
            "-o",
            str(tmp_path / "v.npy"),
        ],
    )
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == ["error: --toy-repeat must be a positive integer, got 0"], r.stderr
    # Another family's pipeline does not take it: named as the flag, with the flags it has.
    r = CliRunner().invoke(app, ["generate", "-p", "x", "--toy-repeat", "2", "-o", str(tmp_path / "v.npy")])
    assert r.exit_code == 2 and "does not use --toy-repeat; its own flags: none beyond the common ones" in r.stderr
    # A VAE without a tiled decode (the toy's): --vae-tiling refused before loading, in one line.
    r = CliRunner().invoke(
        app, ["generate", "-p", "x", "--checkpoint", toy_checkpoint, "--vae-tiling", "-o", str(tmp_path / "v.npy")]
    )
    assert r.exit_code == 2 and "--vae-tiling: the VAE of" in r.stderr and "has no tiled decode" in r.stderr, r.output


def test_cli_names_no_family_keyword():
    """``src/vidax/cli/`` builds the family flags from the declarations: the command line's code
    (what ``vidax generate`` runs among it) names no keyword only a family takes (as a name, a
    string or a flag), the list read from the declarations."""
    import ast
    import inspect

    from vidax.cli import generate
    from vidax.pipelines.base import SHARED_CALL_ARGS
    from vidax.registry import registry

    # generate's own flags (--fps, the mp4's rate) are not family flags: a pipeline whose keyword
    # they equal (Cosmos 3's fps=) is handed their value.
    own = set(inspect.signature(generate).parameters)
    family_only = (
        {o.name for p in registry().pipelines() for o in p.load().family.call_options} - set(SHARED_CALL_ARGS) - own
    )
    assert {"frame_rate", "video", "true_cfg_scale", "decode_timestep"} <= family_only  # the list is not empty
    flags = {"--" + k.replace("_", "-") for k in family_only}
    folder = os.path.join(REPO, "src", "vidax", "cli")
    modules = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
    assert {"app.py", "flags.py", "generating.py"} <= set(modules)
    for name in modules:
        path = os.path.join(folder, name)
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        names = (
            _names_in_code(path)
            | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            | {n.arg for n in ast.walk(tree) if isinstance(n, (ast.arg, ast.keyword)) and n.arg}
            | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        )
        strings = [s for s in _names_in_code(path) if isinstance(s, str)]
        assert not family_only & names, (name, sorted(family_only & names))
        assert not [(f, s) for f in flags for s in strings if f in s], name


def test_toy_family_loads_through_the_one_loader_on_a_mesh(toy_checkpoint, toy_registered):
    """The toy's registry entry is all the one loader needs: its ``fp32_params`` keep ``proj_out``
    float32 under bfloat16, its ``param_axes`` place the blocks on the mesh, its ``block_stacks``
    are stacked by the default key rules."""
    from vidax.parallel.mesh import resolve_mesh
    from vidax.weights.component import load_component

    mesh = resolve_mesh("2x2x2")
    model = load_component("ToyTransformer3DModel", os.path.join(toy_checkpoint, "transformer"), "bfloat16", mesh=mesh)
    assert model.proj_out.kernel[...].dtype == np.float32 and model.blocks.fc1.kernel[...].dtype == "bfloat16"
    assert model.single_blocks.fc1.kernel[...].shape[0] == 2  # the second stack, stacked by its entry
    sharding = model.blocks.fc1.kernel[...].sharding
    assert sharding.mesh is mesh and tuple(sharding.spec)[2] == "tensor"  # ("layers", "embed", "mlp")


DOC = os.path.join(REPO, "docs", "adding_a_family.md")


def _doc_shared_files() -> set[str]:
    """The paths of the list under "## Shared files a family edits" in docs/adding_a_family.md."""
    with open(DOC) as f:
        section = f.read().split("## Shared files a family edits", 1)[1].split("\n## ", 1)[0]
    return {line.split("`")[1] for line in section.splitlines() if line.startswith("- `")}


def _names_in_code(path: str) -> set[str]:
    """The module names a file imports and the string constants in its code (docstrings left out)."""
    import ast

    with open(path) as f:
        tree = ast.parse(f.read(), path)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names.add(node.value)
    return names


@pytest.mark.fast
def test_doc_lists_exactly_the_shared_files_a_family_edits():
    """docs/adding_a_family.md's list of shared files is the truth both ways: every shared vidax
    file whose code names a family (its package, a registered class) is listed, and every listed
    file does name families for the reason the list gives."""
    from vidax.registry import FAMILIES

    listed = _doc_shared_files()
    assert "src/vidax/registry.py" in listed and "tests/test_contracts.py" in listed, listed
    families = {m: importlib.import_module(m).FAMILY for m in FAMILIES if m.startswith("vidax.models.")}
    assert sorted(m.rsplit(".", 1)[1] for m in families) == sorted(
        d
        for d in os.listdir(os.path.join(REPO, "src", "vidax", "models"))
        if os.path.isfile(os.path.join(REPO, "src", "vidax", "models", d, "__init__.py"))
    )  # every family folder is in FAMILIES
    # Shared code (vidax outside the family folders) naming a family in code must be a listed file.
    # src/vidax/default_checkpoint.py is not an edit: it builds the embedded tiny checkpoint, a Wan one.
    naming = {}
    for folder, _, files in os.walk(os.path.join(REPO, "src", "vidax")):
        rel_folder = os.path.relpath(folder, REPO)
        if rel_folder.startswith(os.path.join("src", "vidax", "models", "")):
            continue
        for name in files:
            if not name.endswith(".py") or (rel := os.path.join(rel_folder, name)) == "src/vidax/default_checkpoint.py":
                continue
            code = _names_in_code(os.path.join(REPO, rel))
            for module, family in families.items():
                classes = {s.class_name for s in family.pipelines + family.components}
                if classes & code or any(n == module or n.startswith(module + ".") for n in code):
                    naming.setdefault(rel, set()).add(family.name)
    unlisted = {f: sorted(v) for f, v in naming.items() if f not in listed}
    assert not unlisted, f"shared files that name a family but are not in {DOC}'s list: {unlisted}"
    # Each listed file names families for its reason.
    assert naming["src/vidax/registry.py"] == {f.name for f in families.values()}  # FAMILIES names each package
    if "src/vidax/__init__.py" in listed:
        assert "src/vidax/__init__.py" in naming  # _LAZY points into a family
    with open(os.path.join(REPO, "tests", "test_contracts.py")) as f:
        contracts = f.read()
    assert all(f'"{s.class_name}"' in contracts for f in families.values() for s in f.components if s.model)
    assert all(os.path.isfile(os.path.join(REPO, f)) for f in listed), listed
