"""``vidax inspect``: what a diffusers-layout checkpoint holds, read from headers only."""

from __future__ import annotations

import os
from collections import Counter

from vidax.config import read_json_object
from vidax.errors import VidaxError
from vidax.pipelines.loading import pipeline_class, read_model_index, resolve_checkpoint
from vidax.weights.safetensors_io import CheckpointReader, has_safetensors

# config keys worth showing per component class.
_KEY_CONFIGS = {
    "WanTransformer3DModel": ("num_layers", "num_attention_heads", "attention_head_dim", "ffn_dim",
                              "in_channels", "out_channels", "patch_size", "text_dim", "image_dim"),
    "AutoencoderKLWan": ("base_dim", "z_dim", "dim_mult", "num_res_blocks", "temperal_downsample",
                         "is_residual", "patch_size"),
    "CLIPVisionModel": ("hidden_size", "num_hidden_layers", "num_attention_heads", "image_size", "patch_size"),
    "UMT5EncoderModel": ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size"),
    "T5EncoderModel": ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size"),
    "UniPCMultistepScheduler": ("prediction_type", "flow_shift", "solver_order", "solver_type"),
    "FlowMatchEulerDiscreteScheduler": ("shift", "num_train_timesteps"),
    "CogVideoXTransformer3DModel": ("num_layers", "num_attention_heads", "attention_head_dim", "in_channels",
                                    "out_channels", "patch_size", "patch_size_t", "use_rotary_positional_embeddings",
                                    "use_learned_positional_embeddings", "ofs_embed_dim", "sample_height",
                                    "sample_width", "sample_frames", "max_text_seq_length"),
    "CogVideoXDDIMScheduler": ("prediction_type", "snr_shift_scale", "timestep_spacing", "rescale_betas_zero_snr"),
    "CogVideoXDPMScheduler": ("prediction_type", "snr_shift_scale", "timestep_spacing", "rescale_betas_zero_snr"),
}


def describe_checkpoint(path_or_hub_id: str) -> str:
    """A human-readable summary of every component: class, key configs, parameters, dtypes.

    Raises:
        CheckpointError: no such folder or hub id, no model_index.json, or a component's
            safetensors file is unreadable or truncated (folders without any, like
            ``scheduler/``, are listed without parameters). ConfigError: a config file that is
            not a JSON object.
    """
    root = resolve_checkpoint(path_or_hub_id)
    index = read_model_index(root)
    lines = [f"{root}", f"  pipeline: {index.get('_class_name')}", f"  variant: {_variant(root, index)}"]
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
        if not has_safetensors(folder):  # scheduler/, tokenizer/: configs only, no weights
            continue
        reader = CheckpointReader(folder)  # a broken weights file is an error, not left out
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


def _variant(root: str, index: dict) -> str:
    """What the checkpoint is and does, from its configs (the pipeline class's
    ``describe_variant(root, index)`` when it has one), or why vidax cannot run it."""
    try:
        cls = pipeline_class(root, index)
        describe = getattr(cls, "describe_variant", None)
        return describe(root, index) if describe else f"{cls.__name__} ({getattr(cls, 'task', 'task unknown')})"
    except VidaxError as e:
        return f"not runnable by vidax: {e}"


def _read_config(folder: str) -> dict:
    for name in ("config.json", "scheduler_config.json"):
        file = os.path.join(folder, name)
        if os.path.isfile(file):
            return read_json_object(file)
    return {}


def _human(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def describe_mesh_plan(path_or_hub_id: str, mesh: str) -> str:
    """How the components vidax shards would be laid out on a ``(dp, tp, sp)`` mesh.

    Computed from the configs alone (abstract shapes, no weights read, no devices needed): the
    per-device float32 parameter bytes and the largest replicated tensors of each Wan or
    CogVideoX transformer and T5/UMT5 text encoder, and whether the transformer's heads split over
    ``tp x sp`` (which Ulysses needs).

    Args:
        path_or_hub_id: the checkpoint.
        mesh: ``"DPxTPxSP"`` or ``"dp=..,tp=..,sp=.."``.

    Raises:
        InputError: a malformed ``mesh``. CheckpointError / ConfigError: as :func:`describe_checkpoint`.
    """
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import AbstractMesh

    from vidax.encoders.t5 import T5_PARAM_AXES, T5Encoder, T5EncoderConfig
    from vidax.errors import InputError
    from vidax.models.cogvideox.config import CogVideoXTransformerConfig
    from vidax.models.cogvideox.transformer import COGVIDEOX_PARAM_AXES, CogVideoXTransformer3DModel
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.transformer import WAN_PARAM_AXES, WanTransformer3DModel

    # Transformer class name in model_index.json -> (config class, model class, parameter axes).
    transformers = {
        "WanTransformer3DModel": (WanTransformerConfig, WanTransformer3DModel, WAN_PARAM_AXES),
        "CogVideoXTransformer3DModel": (CogVideoXTransformerConfig, CogVideoXTransformer3DModel,
                                        COGVIDEOX_PARAM_AXES),
    }
    from vidax.parallel.mesh import MESH_AXES, SIZE_NAMES, check_heads, parse_mesh_sizes
    from vidax.parallel.placement import plan_report

    sizes = parse_mesh_sizes(mesh)
    abstract = AbstractMesh(tuple(sizes[k] for k in SIZE_NAMES), MESH_AXES)
    root = resolve_checkpoint(path_or_hub_id)
    index = read_model_index(root)
    components, notes = {}, []
    for key, value in index.items():
        if key.startswith("_") or not isinstance(value, list) or value[0] is None:
            continue
        file = os.path.join(root, key, "config.json")
        if value[1] in transformers and os.path.isfile(file):
            config_cls, model_cls, axes = transformers[value[1]]
            cfg = config_cls.from_json_file(file)
            components[key] = (lambda c=cfg, m=model_cls: m(c, rngs=nnx.Rngs(0)), axes, jnp.float32)
            try:  # Ulysses needs whole heads per device
                check_heads(abstract, cfg.num_attention_heads, f"{key}/config.json")
            except InputError as e:
                notes.append(f"  NOT RUNNABLE: {e}")
        elif value[1] in ("UMT5EncoderModel", "T5EncoderModel") and os.path.isfile(file):
            cfg = T5EncoderConfig.from_json_file(file)
            components[key] = (lambda c=cfg: T5Encoder(c, rngs=nnx.Rngs(0)), T5_PARAM_AXES, jnp.float32)
    if not components:
        return f"{root}: no component vidax shards (Wan / CogVideoX transformer, T5/UMT5 text encoder)"
    return "\n".join([plan_report(components, sizes)] + notes)
