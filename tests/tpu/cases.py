"""The runs the TPU lane compares with the CPU: one per model line, and the features on one.

A case loads a tiny checkpoint (:mod:`tests.tpu.checkpoints` builds them, with torch, on any
machine; the lane itself needs no torch), sets it up and calls it; :func:`run_case` returns its
float32 outputs. The lane runs every case on the TPU in its own process and, through
``python -m tests.tpu.cases LANE_DIR OUT_DIR`` with ``JAX_PLATFORMS=cpu``, on the CPU backend,
then compares the two.

Cases: each model line of ``LANE_DIR/manifest.json`` (its checkpoint, call and pipeline
attributes), and on the embedded tiny Wan checkpoint (``LANE_DIR/tiny-wan``, built without
torch): blocks streamed from host memory, a one-device mesh, a LoRA, a step cache, int8 weights.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

#: The call of the feature cases on the embedded tiny Wan checkpoint.
WAN_CALL = dict(
    prompt="a red car at night",
    height=32,
    width=48,
    num_frames=5,
    num_inference_steps=3,
    seed=0,
    max_sequence_length=16,
)
#: Feature cases: the load keywords and what is done to the pipeline before the call.
FEATURES = ("wan_streamed", "wan_mesh", "wan_lora", "wan_first_block_cache", "wan_int8")


def tiny_wan(lane_dir: str) -> str:
    """The embedded tiny Wan checkpoint, built (without torch) into ``lane_dir`` on first use."""
    from vidax.default_checkpoint import default_checkpoint

    return default_checkpoint(os.path.join(lane_dir, "tiny-wan-cache"))


#: The model lines (the checkpoints :mod:`tests.tpu.checkpoints` builds; its manifest's keys).
MODEL_LINES = ("cogvideox", "cosmos", "cosmos3", "hunyuan", "hunyuan15", "ltx", "ltx2", "wan21", "wan22")
#: Every case: the model lines, then :data:`FEATURES`.
CASES = MODEL_LINES + FEATURES


def case_names(lane_dir: str) -> list[str]:
    """The model lines of the manifest, then :data:`FEATURES`."""
    with open(os.path.join(lane_dir, "manifest.json")) as f:
        return sorted(json.load(f)) + list(FEATURES)


def load_case(name: str, lane_dir: str, dtype: str = "float32", **load: Any):
    """``(pipeline, call keywords)`` of case ``name``, set up and ready to call."""
    import vidax
    from vidax.parallel.offload import OffloadConfig

    if name in FEATURES:
        path, call, attrs = tiny_wan(lane_dir), dict(WAN_CALL), {}
        load.update(
            {
                "wan_streamed": dict(offload=OffloadConfig(chunk=1)),
                "wan_mesh": dict(mesh=(1, 1, 1)),
                "wan_int8": dict(weight_dtype="int8"),
            }.get(name, {})
        )
    else:
        with open(os.path.join(lane_dir, "manifest.json")) as f:
            entry = json.load(f)[name]
        path, call, attrs = os.path.join(lane_dir, entry["path"]), dict(entry["call"]), entry.get("attrs", {})
    pipe = vidax.load_pipeline(path, dtype=dtype, progress=False, **load)
    for key, value in attrs.items():
        setattr(pipe.hooks, key, value)
    if name == "wan_lora":
        from tests.test_lora import random_lora

        pipe.load_lora_weights(random_lora(pipe, seed=5), adapter_name="lane")
    if name == "wan_first_block_cache":
        pipe.enable_cache(vidax.FirstBlockCacheConfig(threshold=0.2))
    return pipe, call


def run_case(
    name: str, lane_dir: str, dtype: str = "float32", output_type: str = "np", **load: Any
) -> dict[str, np.ndarray]:
    """Case ``name``'s outputs: ``frames`` float32 (B, F, H, W, 3) in [0, 1] and, for a model
    that makes sound, ``audio`` float32 (B, channels, samples) (their final latents with
    ``output_type="latent"``)."""
    pipe, call = load_case(name, lane_dir, dtype, **load)
    out = pipe(**call, output_type=output_type, progress=False)
    result = {"frames": np.asarray(out.frames, np.float32)}
    if out.audio is not None:
        result["audio"] = np.asarray(out.audio, np.float32)
    return result


def main(argv: list[str]) -> None:
    """``python -m tests.tpu.cases LANE_DIR OUT_DIR [CASE ...]``: every case (or the ones named) in
    float32 on this process's backend, each case's outputs as ``OUT_DIR/<case>.npz``."""
    lane_dir, out_dir, *names = argv
    os.makedirs(out_dir, exist_ok=True)
    for name in names or case_names(lane_dir):
        np.savez(os.path.join(out_dir, f"{name}.npz"), **run_case(name, lane_dir))
        print(f"{name}: done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
