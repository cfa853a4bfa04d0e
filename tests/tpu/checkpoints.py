"""Tiny random checkpoints of every vidax model line, for the TPU test lane.

The TPU machine has no torch / diffusers, so the checkpoints are built beforehand on a machine
with torch (:func:`build_all`, ``python -m tests.tpu.checkpoints ROOT``) and carried there; the
lane itself (:mod:`tests.tpu.cases`) needs vidax and numpy only.

Each checkpoint is the one the family's parity test builds (its builder imported from
``tests.parity``: diffusers ``save_pretrained``, every parameter randomised), text-to-video, and
``manifest.json`` says how to run it: ``{name: {"path", "call", "attrs"}}``. ``call`` is the
parity test's call (prompts, tiny size, guidance, ``max_sequence_length``) at 2 steps and
``seed=0``; ``attrs`` are attributes of the vidax pipeline's family hooks (``pipe.hooks``) to set after loading.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"


def _wan(path, scratch, boundary_ratio=None):
    from tests.parity.wan_reference import build_reference_wan_pipeline

    build_reference_wan_pipeline(path, boundary_ratio=boundary_ratio)
    shutil.rmtree(os.path.join(path, "_tok"))
    call = dict(
        prompt="a red car walking over the sea",
        negative_prompt="blue sky",
        height=32,
        width=48,
        num_frames=9,
        guidance_scale=4.5,
        max_sequence_length=16,
    )
    return call if boundary_ratio is None else dict(call, guidance_scale_2=2.5), {}


def _cogvideox(path, scratch):
    from tests.parity.cogvideox_reference import CALL, NEGATIVES, PROMPTS, build_reference

    build_reference(path, "1.5")
    shutil.rmtree(os.path.join(path, "_tok"))
    return dict(prompt=PROMPTS[0], negative_prompt=NEGATIVES[0], **CALL), {}


def _ltx(path, scratch):
    from tests.parity.ltx_reference import build_reference_ltx_pipeline

    build_reference_ltx_pipeline(path)
    shutil.rmtree(os.path.join(path, "_tok"))
    return dict(
        prompt="a red fox in the snow",
        negative_prompt="blurry",
        height=32,
        width=64,
        num_frames=9,
        guidance_scale=3.0,
        max_sequence_length=16,
    ), {}


def _ltx2(path, scratch):
    from tests.parity import test_ltx2_pipeline as t

    _, built = t._build(Path(scratch), t.TRANSFORMER, t.CONNECTORS_20, t.LTX2Vocoder, t.VOCODER)
    shutil.move(built, path)
    return dict(prompt=t.PROMPT, negative_prompt=t.NEGATIVE, **t.CALL), {}


def _hunyuan(path, scratch):
    from tests.parity.hunyuan_reference import build_reference_hunyuan_pipeline
    from tests.parity.test_hunyuan_pipeline import CALL, PROMPT

    build_reference_hunyuan_pipeline(path, None)
    for tmp in ("_tok", "_tok2"):
        shutil.rmtree(os.path.join(path, tmp))
    return dict(prompt=PROMPT, height=32, width=48, guidance_scale=4.0, **CALL), {}


def _hunyuan15(path, scratch):
    """The checkpoint of ``tests/parity/test_hunyuan15_pipeline.py``'s ``t2v`` fixture."""
    from tests.parity.test_hunyuan15_pipeline import CALL, GLYPH_PROMPT, NEGATIVE, TEXT_LEN, build_reference

    _, crop = build_reference(path, scratch)
    call = dict(
        prompt=GLYPH_PROMPT, negative_prompt=NEGATIVE, height=32, width=48, max_sequence_length=TEXT_LEN, **CALL
    )
    return call, {"crop_start": crop}


def _cosmos(path, scratch):
    from tests.parity.cosmos_reference import build_reference_cosmos_pipeline
    from tests.parity.test_cosmos_pipeline import CALL, NEGATIVE, PROMPT
    from vidax.models.cosmos.pipeline import DEFAULT_NEGATIVE_PROMPT, SYSTEM_PROMPT

    build_reference_cosmos_pipeline(path, [PROMPT, NEGATIVE, SYSTEM_PROMPT, DEFAULT_NEGATIVE_PROMPT])
    return dict(prompt=PROMPT, **CALL), {}  # the default negative prompt, as the parity test


def _cosmos3(path, scratch):
    from tests.parity.test_cosmos3_pipeline import CALL, NEGATIVE, PROMPT, build_reference

    build_reference(path)
    return dict(prompt=PROMPT, negative_prompt=NEGATIVE, enable_sound=True, **CALL), {}


#: name -> builder(path, scratch folder) -> (call kwargs, attrs).
BUILDERS = {
    "wan21": _wan,
    "wan22": lambda path, scratch: _wan(path, scratch, boundary_ratio=0.875),
    "cogvideox": _cogvideox,
    "ltx": _ltx,
    "ltx2": _ltx2,
    "hunyuan": _hunyuan,
    "hunyuan15": _hunyuan15,
    "cosmos": _cosmos,
    "cosmos3": _cosmos3,
}


def folder_size(path: str) -> int:
    """Bytes of the files under ``path``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def build_all(root: str, names=None) -> dict:
    """Write the tiny checkpoints (all, or ``names``) under ``root`` and ``root/manifest.json``;
    return the manifest. Needs torch, diffusers and transformers."""
    os.makedirs(root, exist_ok=True)
    file = os.path.join(root, MANIFEST)
    manifest = {}
    if names and os.path.isfile(file):  # a partial rebuild keeps the other entries
        with open(file) as f:
            manifest = json.load(f)
    for name in names or BUILDERS:
        path = os.path.join(root, name)
        shutil.rmtree(path, ignore_errors=True)
        with tempfile.TemporaryDirectory() as scratch:
            call, attrs = BUILDERS[name](path, scratch)
        manifest[name] = {"path": name, "call": dict(call, num_inference_steps=2, seed=0), "attrs": attrs}
    with open(file, "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def store_bfloat16(root: str) -> None:
    """Rewrite every float32 tensor of the ``*.safetensors`` files under ``root`` as bfloat16
    (half the bytes to carry to the TPU; the lane compares vidax on the TPU with vidax on the
    CPU on the same files, so how the weights are stored does not matter to it)."""
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import load_file, save_file

    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".safetensors"):
                path = os.path.join(folder, name)
                tensors = {
                    k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in load_file(path).items()
                }
                save_file(tensors, path, metadata={"format": "pt"})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="folder to write the checkpoints and manifest.json into")
    parser.add_argument("--only", nargs="+", choices=list(BUILDERS), help="build these only")
    parser.add_argument("--bfloat16-storage", action="store_true", help="store the float32 weights as bfloat16")
    parser.add_argument("--check", action="store_true", help="then run each with vidax in float32 (finite outputs)")
    args = parser.parse_args(argv)
    manifest = build_all(args.root, args.only)
    if args.bfloat16_storage:
        store_bfloat16(args.root)
    for name, entry in manifest.items():
        print(f"{name:10s} {folder_size(os.path.join(args.root, entry['path'])) / 2**20:7.2f} MiB")
    print(f"{'total':10s} {folder_size(args.root) / 2**20:7.2f} MiB")
    if args.check:
        import numpy as np

        from tests.tpu.cases import run_case

        for name in args.only or manifest:
            out = run_case(name, args.root)
            assert all(np.isfinite(v).all() for v in out.values()), f"{name}: NaN/Inf"
            print(f"{name}: {', '.join(f'{k} {v.shape}' for k, v in out.items())}", flush=True)


if __name__ == "__main__":
    main()
