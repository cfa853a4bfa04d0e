"""``vidax inspect``: what a diffusers-layout checkpoint holds, read from headers only."""

from __future__ import annotations

import json
import os
from collections import Counter

from vidax.errors import CheckpointError
from vidax.pipelines.loading import read_model_index, resolve_checkpoint
from vidax.weights.safetensors_io import CheckpointReader

# config keys worth showing per component class.
_KEY_CONFIGS = {
    "WanTransformer3DModel": ("num_layers", "num_attention_heads", "attention_head_dim", "ffn_dim",
                              "in_channels", "out_channels", "patch_size", "text_dim", "image_dim"),
    "AutoencoderKLWan": ("base_dim", "z_dim", "dim_mult", "num_res_blocks", "temperal_downsample"),
    "UMT5EncoderModel": ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size"),
    "T5EncoderModel": ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size"),
    "UniPCMultistepScheduler": ("prediction_type", "flow_shift", "solver_order", "solver_type"),
    "FlowMatchEulerDiscreteScheduler": ("shift", "num_train_timesteps"),
}


def describe_checkpoint(path_or_hub_id: str) -> str:
    """A human-readable summary of every component: class, key configs, parameters, dtypes."""
    root = resolve_checkpoint(path_or_hub_id)
    index = read_model_index(root)
    lines = [f"{root}", f"  pipeline: {index.get('_class_name')}"]
    for key, value in index.items():
        if key.startswith("_") or not isinstance(value, list) or value[0] is None:
            if not key.startswith("_"):
                lines.append(f"  {key}: {value}")
            continue
        library, cls = value
        folder = os.path.join(root, key)
        lines.append(f"  {key}/  {cls} ({library})")
        if not os.path.isdir(folder):
            lines.append("      MISSING folder")
            continue
        config = _read_config(folder)
        shown = {k: config[k] for k in _KEY_CONFIGS.get(cls, ()) if k in config}
        if shown:
            lines.append("      " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        try:
            reader = CheckpointReader(folder)
        except CheckpointError:
            continue
        count, by_dtype, nbytes = 0, Counter(), 0
        for name in reader.keys():
            info = reader.info(name)
            n = 1
            for d in info.shape:
                n *= d
            count += n
            by_dtype[str(info.dtype)] += n
            nbytes += info.end - info.start
        dtypes = ", ".join(f"{d} {n / count:.0%}" for d, n in by_dtype.most_common())
        lines.append(
            f"      {count:,} parameters in {len(reader)} tensors ({_human(count)}), "
            f"{nbytes / 2**30:.2f} GiB, dtypes: {dtypes}"
        )
    return "\n".join(lines)


def _read_config(folder: str) -> dict:
    for name in ("config.json", "scheduler_config.json"):
        file = os.path.join(folder, name)
        if os.path.isfile(file):
            with open(file) as f:
                return json.load(f)
    return {}


def _human(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)
