"""``vidax inspect``: what a diffusers-layout checkpoint holds, read from headers only
(:func:`describe`: a checkpoint folder, a single-file transformer or a LoRA file)."""

from __future__ import annotations

import math
import os
from collections import Counter

from vidax.checkpoint import Checkpoint
from vidax.errors import VidaxError
from vidax.pipelines.plan import read_plan
from vidax.pipelines.weight_formats import with_weights
from vidax.registry import registry
from vidax.weights.safetensors_io import CheckpointReader, has_safetensors


def describe_checkpoint(path_or_hub_id: str) -> str:
    """A human-readable summary of every component: class, key configs, parameter counts, dtypes.

    ``path_or_hub_id``: a folder, a hub id, or ``"vidax/tiny-random-wan"`` (the embedded checkpoint).

    Raises:
        CheckpointError: no such folder or hub id, no model_index.json, or a component's
            safetensors file is unreadable or truncated (folders without any, like
            ``scheduler/``, are listed without parameters). ConfigError: a config file that is
            not a JSON object.
    """
    from vidax.default_checkpoint import resolve_named_checkpoint

    ckpt = Checkpoint.open(resolve_named_checkpoint(path_or_hub_id))
    root, index = ckpt.root, ckpt.index
    lines = [f"{root}", f"  pipeline: {index.get('_class_name')}", *_variant(ckpt)]
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
        config = ckpt.configs.get(key, {})
        spec = registry().find_component(cls)
        shown = {k: config[k] for k in (spec.key_configs if spec else ()) if k in config}
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


def _variant(ckpt: Checkpoint) -> list[str]:
    """What the checkpoint is, its tasks, whether it makes sound and its call defaults, from its
    configs (the pipeline's ``read_checkpoint``), or why vidax cannot run it."""
    try:
        plan = read_plan(ckpt)
        cls, info = plan.pipeline, plan.info
        if not registry().pipeline(ckpt.pipeline_class_name).generates:  # for_task says what it does
            cls.for_task(ckpt, "t2v", info)
    except VidaxError as e:
        return [f"  variant: not runnable by vidax generate: {e}"]
    d = info.defaults
    sound = (
        [f"  sound: yes (latent streams {', '.join(cls.family.latent_streams)}; --no-audio leaves it out)"]
        if cls.family.makes_audio(info)
        else []
    )
    # A pipeline that takes no max_sequence_length= (Cosmos 3: the prompt is as long as it is) has no text length.
    text = "" if "max_sequence_length" in cls.family.unsupported_call_args else f"{d.max_sequence_length} text tokens, "
    return [
        f"  variant: {info.variant}",
        f"  tasks: {', '.join(info.tasks)}",
        *sound,
        f"  defaults: {d.height}x{d.width} (HxW), {cls.family.default_length(info)}, {d.num_inference_steps} step{'s' * (d.num_inference_steps != 1)}, "
        f"guidance {d.guidance_scale}, {text}{d.fps} fps",
        *_presets(plan),
    ]


def _presets(plan) -> list[str]:
    """The presets of the checkpoint's family (``--preset`` / ``preset=``), one line each with the
    values it sets, and the one recognition picks from the checkpoint's configs (if any)."""
    from vidax.pipelines.presets import describe, presets_of, recognise

    own = presets_of(plan.pipeline)
    if not own:
        return [f"  presets: none for {plan.pipeline.__name__} (no source gives a recipe)"]
    found = recognise(plan)
    picked = f"{found[0].name} ({found[1]})" if found else "none (nothing in the configs names a recipe)"
    return [
        f"  presets (--preset / preset=): {', '.join(p.name for p in own)}",
        *(f"    {describe(p, p.call).removeprefix('preset ')}" for p in own),
        f"  recognised: {picked}",
    ]


def _human(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def describe_mesh_plan(path_or_hub_id: str, mesh: str, transformer: str | None = None) -> str:
    """How the components vidax shards would be laid out on a ``(dp, tp, sp)`` mesh.

    Computed from the configs alone (abstract shapes, no weights read, no devices needed): the
    per-device float32 parameter bytes and the largest replicated tensors of each component the
    registry gives logical parameter axes (transformers, text encoders), and whether a
    transformer's heads split over ``tp x sp`` (which Ulysses needs).

    Args:
        path_or_hub_id: the checkpoint.
        mesh: ``"DPxTPxSP"`` or ``"dp=..,tp=..,sp=.."``.
        transformer: a single-file transformer (``.gguf`` / ``.safetensors``) read instead of the
            checkpoint's ``transformer/`` weights: also its per-device bytes as it loads
            (:func:`single_file_lines`; its header is read).

    Raises:
        InputError: a malformed ``mesh``; ``transformer`` not a single file of the
            checkpoint's transformer. CheckpointError / ConfigError: as :func:`describe_checkpoint`;
            ``transformer``'s tensors not those of the checkpoint's transformer.
    """
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import AbstractMesh

    from vidax.default_checkpoint import resolve_named_checkpoint
    from vidax.errors import InputError
    from vidax.parallel.mesh import MESH_AXES, SIZE_NAMES, check_heads, parse_mesh_sizes
    from vidax.parallel.placement import plan_report

    sizes = parse_mesh_sizes(mesh)
    abstract = AbstractMesh(tuple(sizes[k] for k in SIZE_NAMES), MESH_AXES)
    ckpt = with_weights(Checkpoint.open(resolve_named_checkpoint(path_or_hub_id)), transformer=transformer)
    components, notes = {}, []
    for key in ckpt.configs:
        spec = registry().find_component(ckpt.class_of(key))
        # What vidax shards: components with logical parameter axes (transformers, text encoders).
        if spec is None or spec.param_axes is None or not ckpt.config_files.get(key):
            continue
        cfg = ckpt.typed_config(key, spec.config_class())
        components[key] = (lambda c=cfg, m=spec.model_class(): m(c, rngs=nnx.Rngs(0)), spec.axes(), jnp.float32)
        heads = getattr(cfg, "num_attention_heads", None)
        if spec.kind == "transformer" and heads is not None:
            try:  # Ulysses needs whole heads per device
                check_heads(abstract, heads, f"{key}/config.json")
            except InputError as e:
                notes.append(f"  NOT RUNNABLE: {e}")
    if not components:
        return f"{ckpt.root}: no component vidax shards (none with logical parameter axes in the registry)"
    return "\n".join(
        [plan_report(components, sizes)]
        + weight_format_lines(ckpt, components, sizes)
        + single_file_lines(ckpt, sizes)
        + notes
    )


def weight_format_lines(ckpt: Checkpoint, components: dict, sizes: dict) -> list[str]:
    """Per transformer, its parameter bytes per device in each weight format vidax loads:
    float32, bfloat16, the 8-bit ``int8`` / ``fp8`` kernels (``--weights``) and a Q8_0 / Q4_K
    GGUF file's kernels kept as blocks (``--transformer FILE.gguf``), with bfloat16 for the
    rest; the precision policy's float32 parameters counted as float32."""
    import jax.numpy as jnp

    from vidax.parallel.placement import per_device_bytes

    lines = []
    for key, (make, table, _) in components.items():
        spec = registry().find_component(ckpt.class_of(key))
        if spec.kind != "transformer":
            continue
        counts = [
            (name, per_device_bytes(make, table, sizes, dtype, spec.fp32(), fmt))
            for name, dtype, fmt in (
                ("float32", jnp.float32, None),
                ("bfloat16", jnp.bfloat16, None),
                ("int8", jnp.bfloat16, "int8"),
                ("fp8", jnp.bfloat16, "float8_e4m3fn"),
                ("GGUF Q8_0", jnp.bfloat16, "Q8_0"),
                ("GGUF Q4_K", jnp.bfloat16, "Q4_K"),
            )
        ]
        lines.append(
            f"  {key} per device by weight format: " + ", ".join(f"{name} {n / 2**20:,.1f} MiB" for name, n in counts)
        )
    return lines


def single_file_lines(ckpt: Checkpoint, sizes: dict) -> list[str]:
    """Per transformer read from a single file (``ckpt.files``:
    :func:`~vidax.pipelines.weight_formats.with_weights`), its parameter bytes per device on a
    mesh of ``sizes`` (``{}``: one device) as that file loads into the checkpoint's transformer (the
    loader's plan, checked 1:1 from the file's header: each tensor in its own type, GGUF Linear
    kernels as the file's blocks, those of a stack mixing types padded to the widest type),
    under ``--dtype`` float32 and bfloat16 (the tensors read as floats)."""
    import jax.numpy as jnp

    from vidax.parallel.placement import held_per_device
    from vidax.weights.component import plan_component

    where = "per device" if math.prod(sizes.values()) > 1 else "on one device"
    lines = []
    for key, file in ckpt.files.items():
        spec = registry().find_component(ckpt.class_of(key))
        config = ckpt.typed_config(key, spec.config_class())
        counts = []
        for name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
            load = plan_component(spec, ckpt.folder(key), dtype, config=config, file=file)
            n = held_per_device(load.abstract, spec.axes(), sizes, dtype, spec.fp32())
            counts.append(f"--dtype {name} {n / 2**20:,.1f} MiB ({n:,} B)")
        lines.append(
            f"  {key} read from {file}, {where} as it loads (GGUF stacks mixing types padded to the "
            "widest type): " + ", ".join(counts)
        )
    return lines


def describe_transformer_file(path_or_hub_id: str, file: str) -> str:
    """What the single-file transformer ``file`` is (:func:`~vidax.weights.single_file.describe_single_file`)
    and its bytes on one device as it loads into the checkpoint's transformer
    (:func:`single_file_lines`), checked against that transformer from the file's header first.

    Raises:
        InputError: ``file`` is not a single file of the checkpoint's transformer (named as
            ``transformer=``). CheckpointError: its tensors are not those of that transformer.
    """
    from vidax.default_checkpoint import resolve_named_checkpoint
    from vidax.weights.single_file import describe_single_file

    ckpt = with_weights(Checkpoint.open(resolve_named_checkpoint(path_or_hub_id)), transformer=file)
    lines = single_file_lines(ckpt, {})  # first: it checks the file against the transformer
    return "\n".join([describe_single_file(ckpt.files["transformer"])] + lines)


def describe_lora(path: str) -> str:
    """What a LoRA file is (``vidax inspect FILE.safetensors``): its layout, the family whose
    transformer takes its modules, its ranks and alphas, the modules it targets (layer indices
    folded), how many tensors it holds and the recipe it is recognised as (``vidax generate
    --lora``'s recognition line: the preset, and the LoRA weight of the recipe where it has one).

    Raises:
        InputError: the file cannot be read or holds no LoRA layout vidax knows.
    """
    import re

    from vidax.lora.formats import parse, read_state_dict
    from vidax.lora.targets import family_words, fitting_transformers

    what = f"vidax inspect {path}"
    lora = parse(*read_state_dict(path, what), what=what)
    modules = {n: m for e in lora.experts.values() for n, m in e.items()}
    fitting, placed = fitting_transformers(modules)  # builds each family's transformer abstractly: once
    family = family_words(fitting)
    alphas = sorted({m.alpha for m in modules.values() if m.alpha is not None})
    folded = sorted({re.sub(r"([._])\d+([._])", r"\1*\2", n, count=1) for n in modules})
    experts = ", ".join("transformer" if e == 0 else "transformer_2" for e in sorted(lora.experts))
    lines = [
        f"LoRA file {path}",
        f"  layout: {lora.layout} ({', '.join(lora.kinds())})",
        f"  family: {family or 'none registered takes its modules'}"
        + (f" ({placed} of {len(modules)} modules placed)" if family else ""),
        f"  for: {experts}",
        f"  rank: {', '.join(map(str, lora.ranks)) or '-'}"
        + (f"; alpha {', '.join(f'{a:g}' for a in alphas)}" if alphas else ""),
        f"  tensors: {lora.num_keys} keys, {len(modules)} modules",
        f"  targets ({len(folded)}): "
        + ", ".join(folded[:24])
        + (f" ... and {len(folded) - 24} more" if len(folded) > 24 else ""),
        f"  recognised: {_lora_recognition(path, fitting)}",
    ]
    return "\n".join(lines)


def _lora_recognition(path: str, transformers: list) -> str:
    """The recognition line ``vidax generate --lora`` prints for this file (the preset its keys,
    metadata or name ask for among the families of ``transformers``, the registry's transformer
    specs that take its modules, and the weight its recipe merges it at), or "none"."""
    from vidax.pipelines.presets import recognise_lora

    families = {spec.family for spec in transformers}
    found = recognise_lora(path, families.pop() if len(families) == 1 else None)
    if found is None:
        return "none (nothing in its keys, metadata or file name names a recipe)"
    return f"{found[1]}: --preset {found[0].name}"


def describe(path: str, mesh: str | None = None, transformer: str | None = None) -> str:
    """What ``vidax inspect PATH [--mesh MESH] [--transformer FILE]`` prints: for a single file
    (``.safetensors`` / ``.gguf``) its description as a transformer or a LoRA; for a checkpoint
    folder or hub id its components, then ``transformer`` checked against it, then the plan on
    ``mesh``. Everything is computed before anything is returned.

    Raises:
        VidaxError: a malformed ``mesh`` (before anything else), no such file or folder, a
            ``transformer`` or ``mesh`` given with a single file, a broken checkpoint.
    """
    from vidax.errors import Arg, InputError

    if mesh is not None:  # a malformed --mesh is refused before anything is printed
        from vidax.parallel.mesh import parse_mesh_sizes

        parse_mesh_sizes(mesh)
    if path.lower().endswith((".safetensors", ".gguf")) and not os.path.isdir(path):  # a single file
        import shlex

        from vidax.weights.single_file import describe_single_file

        if not os.path.exists(path):
            raise InputError(f"vidax inspect {path!r}: no such file")
        if transformer is not None:
            raise InputError(
                Arg("transformer", keyword=True),
                f" needs a checkpoint folder as PATH: {path} is "
                f"a single file; run vidax inspect FOLDER --transformer {shlex.quote(transformer)}",
            )
        if mesh is not None:  # a single file has no config.json to build its transformer from
            raise InputError(
                Arg("mesh", mesh),
                f" needs the transformer's config.json: {path} is a single "
                f"file; for a single-file transformer run vidax inspect FOLDER --transformer "
                f"{shlex.quote(path)} --mesh {shlex.quote(mesh)}, FOLDER a checkpoint folder of its "
                "model (the bytes per device of this file's own tensor types, GGUF stacks mixing "
                "types padded to the widest type)",
            )
        return describe_single_file(path) or describe_lora(path)
    # every part computed (a --transformer checked against the folder) before any is printed
    parts = [describe_checkpoint(path)]
    if transformer is not None:
        parts.append(describe_transformer_file(path, transformer))
    if mesh is not None:
        parts.append(describe_mesh_plan(path, mesh, transformer))
    return "\n".join(parts)
