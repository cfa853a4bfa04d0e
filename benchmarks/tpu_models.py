"""The models of the TPU benchmarks: each family's pipeline at its reference size, weights built
on the host, and the model FLOPs of one denoising step counted from the config.

A :class:`Preset` names a folder of ``reference_configs/`` (the released configs), the text the
family's prompt encoding hands the step (random arrays of the shapes the pipeline's encoders
make), a tiny variant of the transformer config (for CPU smoke runs and the FLOP cross-check) and
the FLOP formula. :func:`build_step` then runs the family's own pipeline code for everything but
the encoders: its ``check_call`` at the checkpoint's default size, ``condition``,
``prepare_latents``, ``set_timesteps``, ``step_args`` and ``step_fn`` (the transformer call on
the CFG batch where the family runs CFG, the guidance and the scheduler update; a
:class:`~vidax.parallel.chunked_step.ChunkedStep` when the blocks are streamed). So a step here is
the step a real run of that checkpoint compiles, with random weights.

Weights are made on the host (:func:`build_transformer`): each parameter from one tiled
pseudo-random block in its dtype (the registry's ``fp32_params`` kept float32), then moved to
the device; the stacked blocks of a streamed model go into ``pinned_host`` chunks instead and
never touch the device outside a step.

The reference folders hold configs, not weights, and some lack the tokenizer / text-encoder
entries a pipeline's ``read_checkpoint`` asks for (their class names were not recorded):
:func:`configs_only` opens a temporary overlay of the folder with those entries added as empty
components (the benchmark never loads them).

FLOPs (:func:`step_flops`): the matrix products of one transformer call, ``2·m·k·n`` each (the
linear layers, the patch embedding and output projection, the text / timestep projections run
per call) and the two products of every attention, ``4·Lq·Lk·d`` over the sequence the kernel
computes (padding included: a masked key is still computed), on the batch the step runs.
Elementwise work (norms, RoPE, softmax, modulation, the scheduler) is not counted, as MFU
conventionally does not. The formulas per family are in each ``*_flops`` function and in
``docs/benchmarks/tpu.md``; ``tpu_step.py --check-flops`` compares them with XLA's count of
the lowered step (attention ``xla``, so every product is a dot XLA sees).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "reference_configs")
PROMPT = "A cat and a dog baking a cake together in a kitchen"


# ------------------------------------------------------------------ the reference folders


def scaled_folder(folder: str, components: dict[str, dict] | None = None) -> str:
    """A temporary overlay (removed at exit) of the reference folder ``folder`` (a name under
    ``reference_configs/``, or a path): each component folder linked, the configs of
    ``components`` (name -> config keys) rewritten with those keys replaced."""
    src = folder if os.path.isdir(folder) else os.path.join(REFERENCE, folder)
    components = components or {}
    tmp = tempfile.mkdtemp(prefix="vidax-tpu-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if os.path.isdir(path) and name not in components:
            os.symlink(path, os.path.join(tmp, name))
        elif not os.path.isdir(path):
            shutil.copy(path, tmp)
    for name, overrides in components.items():
        os.makedirs(os.path.join(tmp, name))
        for f in os.listdir(os.path.join(src, name)):
            if f != "config.json":
                os.symlink(os.path.join(src, name, f), os.path.join(tmp, name, f))
        with open(os.path.join(src, name, "config.json")) as f:
            config = dict(json.load(f), **overrides)
        with open(os.path.join(tmp, name, "config.json"), "w") as f:
            json.dump(config, f)
    return tmp


def configs_only(folder: str, overrides: dict | None = None, components: dict | None = None):
    """``(pipeline class, CheckpointInfo)`` of the reference folder ``folder`` (a name under
    ``reference_configs/``), its transformer config updated with ``overrides`` (and the other
    components' configs with ``components``: name -> keys).

    The folder is read through a temporary overlay (:func:`scaled_folder`) where every
    component the family's ``read_checkpoint`` asks for but the folder does not have is added to
    ``model_index.json`` as an empty folder."""
    from vidax.checkpoint import Checkpoint
    from vidax.errors import CheckpointError
    from vidax.registry import registry

    tmp = scaled_folder(folder, {**(components or {}), **({"transformer": overrides} if overrides else {})})
    with open(os.path.join(tmp, "model_index.json")) as f:
        index = json.load(f)
    missing = re.compile(r"names no '(\w+)' component|component folder (\w+)/ is missing")
    for _ in range(8):
        with open(os.path.join(tmp, "model_index.json"), "w") as f:
            json.dump(index, f)
        ckpt = Checkpoint.open(tmp)
        cls = registry().pipeline(ckpt.pipeline_class_name).load()
        try:
            return cls, cls.family.read_checkpoint(ckpt)
        except CheckpointError as e:
            m = missing.search(str(e))
            if m is None:
                raise
            name = m.group(1) or m.group(2)
            index.setdefault(name, ["transformers", "NotLoadedByTheBenchmark"])
            os.makedirs(os.path.join(tmp, name), exist_ok=True)
    raise RuntimeError(f"{folder}: read_checkpoint kept asking for components")


def preset_of(checkpoint) -> str | None:
    """The name of the preset whose reference folder has the transformer class of
    ``checkpoint`` (an opened :class:`~vidax.checkpoint.Checkpoint`), or None."""
    cls = checkpoint.class_of("transformer")
    for name, preset in PRESETS.items():
        with open(os.path.join(REFERENCE, preset.folder, "model_index.json")) as f:
            if json.load(f).get("transformer", [None, None])[1] == cls:
                return name
    return None


# ------------------------------------------------------------------ weights on the host


def host_values(shape, dtype, seed: int):
    """Small pseudo-random values of ``shape`` in ``dtype``, made on the host from one 1 Mi-value
    random block (tiled: fast, and no device memory)."""
    import numpy as np

    size = int(np.prod(shape))
    base = (np.random.default_rng(seed).standard_normal(1 << 20) * 0.02).astype(dtype)
    return np.resize(base, size).reshape(shape)


def build_transformer(
    info,
    dtype,
    blocks: int | None = None,
    reuse_chunks: bool = False,
    attention: str = "auto",
    name: str = "transformer",
):
    """The checkpoint's transformer ``name`` (its registry entry: config class, model, the
    parameters kept float32, the block stacks) with host-made weights on this process's first
    device; ``blocks``: every block stack in host-memory chunks of N blocks, streamed each step
    (None: resident). ``reuse_chunks``: one host chunk's buffers for every chunk of a stack (the
    bytes streamed per step are unchanged; the host holds one chunk)."""
    import jax
    import numpy as np
    from flax import nnx

    from vidax.parallel.offload import attach_chunks, host_memory_kind
    from vidax.registry import registry
    from vidax.weights.loader import DtypePolicy, abstract_params

    ckpt = info.checkpoint
    spec = registry().component(ckpt.class_of(name), "transformer")
    cfg = spec.config_class().from_config_dict(ckpt.config(name), source=ckpt.config_file(name))
    model_cls = spec.model_class()
    policy = DtypePolicy(dtype, spec.fp32())
    graphdef, flat = abstract_params(
        lambda: model_cls(cfg, dtype=dtype, param_dtype=dtype, attention=attention, rngs=nnx.Rngs(0), mesh=None)
    )
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    kind = host_memory_kind()
    stacks = spec.block_stacks if blocks is not None else ()
    chunks = {a: {} for a in stacks}
    filled = []
    for i, (path, var) in enumerate(flat.items()):
        sds = var.get_value()
        dt = np.dtype(policy.dtype_for(path))
        if path[0] in stacks:
            placed, n = [], sds.shape[0]
            for start in range(0, n, blocks):
                size = min(blocks, n - start)
                if reuse_chunks and placed and placed[0].shape[0] == size:
                    placed.append(placed[0])
                else:
                    host = host_values((size,) + tuple(sds.shape[1:]), dt, 1000 * i + start)
                    placed.append(jax.device_put(host, sharding.with_memory_kind(kind)) if kind else host)
            chunks[path[0]][path[1:]] = placed
            value = jax.ShapeDtypeStruct(sds.shape, dt)
        else:
            value = jax.device_put(host_values(sds.shape, dt, i), sharding)
        filled.append((path, var.replace(value)))
    module = nnx.merge(graphdef, nnx.from_flat_state(filled))
    for attr in stacks:
        attach_chunks(module, attr, chunks[attr], {p: sharding for p in chunks[attr]}, kind)
    return cfg, module


def param_count(info, name: str = "transformer") -> int:
    """Parameters of the checkpoint's transformer ``name`` (built abstractly)."""
    import math

    from flax import nnx

    from vidax.registry import registry
    from vidax.weights.loader import abstract_params

    ckpt = info.checkpoint
    spec = registry().component(ckpt.class_of(name), "transformer")
    cfg = spec.config_class().from_config_dict(ckpt.config(name), source=ckpt.config_file(name))
    _, flat = abstract_params(lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0)))
    return sum(math.prod(v.get_value().shape) for v in flat.values())


# ------------------------------------------------------------------ the step of a pipeline


@dataclasses.dataclass
class Step:
    """One family's denoising step, ready to compile: ``fn.lower(params, x, state, inputs)``."""

    pipe: Any
    call: Any
    cfg: Any
    fn: Any
    params: Any
    x: Any
    state: Any
    inputs: Any  # the pipeline's StepInputs (a pytree the step takes whole)
    shapes: dict  # what the FLOP formula reads: batch, tokens, text lengths...


def build_step(
    preset: Preset,
    dtype,
    *,
    blocks=None,
    reuse_chunks=False,
    attention="auto",
    tiny=False,
    num_layers=None,
    call: dict | None = None,
    steps: int = 4,
    micro_batch: int | None = None,
) -> Step:
    """The preset's pipeline with host-made transformer weights and the step of a call at the
    checkpoint's default size (``call``: keywords that replace it, e.g. ``height``), its
    schedule set for ``steps`` steps."""
    import jax

    from vidax.nn.kernels import as_stack_bits
    from vidax.parallel.offload import offloaded_stacks
    from vidax.pipelines.loading import load_component

    overrides = dict(preset.tiny if tiny else {})
    if num_layers is not None:
        overrides[preset.layers_key] = num_layers
    cls, info = configs_only(preset.folder, overrides)
    cfg, module = build_transformer(info, dtype, blocks, reuse_chunks, attention)
    module.set_micro_batch(micro_batch)  # the CFG batch in parts of this many rows per layer (None: whole)
    modules = {"transformer": module, "scheduler": load_component(info, "scheduler")}
    pipe = cls(info, modules, dtype=dtype)
    kwargs = dict(preset.tiny_call if tiny else {}, **(call or {}))
    kwargs.setdefault("num_inference_steps", steps)
    if preset.text_len is not None:
        kwargs.setdefault("max_sequence_length", preset.text_len)
    c = cls.check_call(info, PROMPT, **kwargs)
    x, state, embeds, inputs, shapes = step_parts(preset, pipe, c)
    x, state = jax.device_put((x, state), jax.local_devices()[0])
    params = pipe.experts.params(0)
    if not offloaded_stacks(module):
        params = as_stack_bits(params, getattr(module, "block_stacks", ()))
    return Step(pipe, c, cfg, pipe.denoiser.step_fn(pipe, c.do_cfg), params, x, state, inputs, shapes)


def step_parts(preset: Preset, pipe, call):
    """``(latents, scheduler state, embeds, step inputs, FLOP shapes)`` of the first step of
    ``call`` on ``pipe``: the family's own ``condition``, ``prepare_latents``,
    ``set_timesteps`` and ``step_args``, with prompt encodings of the encoders' shapes
    (:attr:`Preset.embeds`, CFG pairs batched). No transformer runs."""
    import jax
    import jax.numpy as jnp

    from vidax.pipelines.run import repeat_embeds
    from vidax.stats import RunStats

    embeds = preset.embeds(pipe.transformer.config, call)
    if call.do_cfg:
        embeds = jax.tree.map(lambda e: jnp.concatenate([e, e]), embeds)
    embeds = jax.tree.map(lambda e: repeat_embeds(e, call.num_videos_per_prompt, pipe.dtype), embeds)
    cond = pipe.hooks.condition(call, RunStats())
    x = pipe.hooks.prepare_latents(call, pipe.hooks.initial_noise(call), cond)
    state = pipe.hooks.set_timesteps(call, x)
    inputs, _ = pipe.hooks.step_args(call, embeds, cond, state, 0)
    return x, state, embeds, inputs, preset.shapes(pipe, call, x, embeds, inputs)


def build_vae(info, dtype, name: str = "vae"):
    """The checkpoint's VAE (its registry entry) with host-made weights on the device."""
    import jax
    import numpy as np
    from flax import nnx

    from vidax.registry import registry
    from vidax.weights.loader import DtypePolicy, abstract_params

    ckpt = info.checkpoint
    spec = registry().component(ckpt.class_of(name), "vae")
    cfg = spec.config_class().from_config_dict(ckpt.config(name), source=ckpt.config_file(name))
    policy = DtypePolicy(dtype, spec.fp32())
    graphdef, flat = abstract_params(lambda: spec.model_class()(cfg, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0)))
    filled = [
        (path, var.replace(jax.device_put(host_values(var.get_value().shape, np.dtype(policy.dtype_for(path)), i))))
        for i, (path, var) in enumerate(flat.items())
    ]
    return nnx.merge(graphdef, nnx.from_flat_state(filled))


def first_leaf(x):
    import jax

    return jax.tree.leaves(x)[0]


# ------------------------------------------------------------------ FLOPs


def linear(m: int, k: int, n: int) -> int:
    """``2·m·k·n``: an (m, k) x (k, n) product."""
    return 2 * m * k * n


def attention(lq: int, lk: int, width: int) -> int:
    """``4·Lq·Lk·width``: the scores and the weighted sum over all heads (width = heads x head dim)."""
    return 4 * lq * lk * width


def timestep_mlp(d: int, freq: int = 256) -> int:
    """A TimestepEmbedding (``freq`` sinusoid features -> d -> d), one row."""
    return linear(1, freq, d) + linear(1, d, d)


def wan_flops(cfg, s: dict) -> int:
    """Wan per block (L video tokens, width d, FFN f, text S): self-attention q, k, v, out
    ``4·2·L·d²``, cross-attention q, out ``2·2·L·d²`` and k, v ``2·2·S·d²``, FFN ``2·2·L·d·f``,
    attention ``4·L²·d + 4·L·S·d``; the patch embedding, the output projection, the text
    embedder (``text_dim -> d -> d``) and the time embedder with its 6-fold projection."""
    L, S, d, f = s["tokens"], s["text"], cfg.inner_dim, cfg.ffn_dim
    block = (
        4 * linear(L, d, d)
        + 2 * linear(L, d, d)
        + 2 * linear(S, d, d)
        + 2 * linear(L, d, f)
        + attention(L, L, d)
        + attention(L, S, d)
    )
    patch = s["patch_in"]
    ends = (
        linear(L, patch, d)
        + linear(L, d, s["patch_out"])
        + linear(S, cfg.text_dim, d)
        + linear(S, d, d)
        + timestep_mlp(d, cfg.freq_dim)
        + linear(1, d, 6 * d)
    )
    return s["batch"] * (cfg.num_layers * block + ends)


def hunyuan15_flops(cfg, s: dict) -> int:
    """HunyuanVideo 1.5, per double-stream block (L video tokens, conditioning C = image + glyph
    + text tokens as padded, width d, FFN m = d·mlp_ratio): each stream's q, k, v, out
    ``4·2·L·d² + 4·2·C·d²``, one joint attention ``4·(L + C)²·d``, each stream's FFN
    ``2·2·L·d·m + 2·2·C·d·m``, the two 6-fold modulations of the time embedding. Once per call:
    the patch embedding and output projection, the token refiner over the L1 text tokens
    (``proj_in``, per refiner block q, k, v, out, attention ``4·L1²·d`` and a 4d FFN; its
    pooled-text and timestep MLPs), the glyph MLP (``D_byt5 -> 2048 -> 2048 -> d`` over L2),
    the image MLP (``D_img -> D_img -> d`` over L3, run also on T2V's zero tokens) and the time
    embedder."""
    L, d, m = s["tokens"], cfg.inner_dim, cfg.mlp_dim
    l1, l2, l3 = s["text"], s["glyph"], s["image"]
    c = l1 + l2 + l3
    block = (
        4 * linear(L, d, d)
        + 4 * linear(c, d, d)
        + attention(L + c, L + c, d)
        + 2 * linear(L, d, m)
        + 2 * linear(c, d, m)
        + 2 * linear(1, d, 6 * d)
    )
    rm = cfg.refiner_mlp_dim
    refiner_block = 4 * linear(l1, d, d) + attention(l1, l1, d) + 2 * linear(l1, d, rm) + linear(1, d, 2 * d)
    refiner = (
        linear(l1, cfg.text_embed_dim, d)
        + cfg.num_refiner_layers * refiner_block
        + timestep_mlp(d)
        + linear(1, cfg.text_embed_dim, d)
        + linear(1, d, d)
    )
    glyph = linear(l2, cfg.text_embed_2_dim, 2048) + linear(l2, 2048, 2048) + linear(l2, 2048, d)
    image = linear(l3, cfg.image_embed_dim, cfg.image_embed_dim) + linear(l3, cfg.image_embed_dim, d)
    ends = (
        linear(L, s["patch_in"], d)
        + linear(L, d, s["patch_out"])
        + linear(1, d, 2 * d)
        + timestep_mlp(d)
        + refiner
        + glyph
        + image
    )
    return s["batch"] * (cfg.num_layers * block + ends)


def ltx2_flops(cfg, s: dict) -> int:
    """LTX-2, per block (N video tokens of width D, M audio tokens of width D_a, S text tokens,
    the audio<->video attentions of inner width I = audio heads x audio head dim):
    video self-attention ``4·2·N·D² + 4·N²·D``; audio self-attention ``4·2·M·D_a² + 4·M²·D_a``;
    the prompt cross-attentions (q, out on the tokens, k, v on the projected text)
    ``2·2·N·D² + 2·2·S·D·D + 4·N·S·D`` and the same for the audio with D_a; audio-to-video
    (q and out on the video, k and v on the audio) ``2·2·N·D·I + 2·2·M·D_a·I + 4·N·M·I`` and
    video-to-audio ``2·2·M·D_a·I + 2·2·N·D·I + 4·M·N·I``; the 4x FFNs ``2·2·N·D·4D +
    2·2·M·D_a·4D_a``. Once per call: proj_in / proj_out of both streams, the caption projections
    (``caption_channels -> D -> D`` over S, audio alike) and the timestep MLPs with their
    modulation projections."""
    n, m, t = s["tokens"], s["audio_tokens"], s["text"]
    d, da, i = cfg.inner_dim, cfg.audio_inner_dim, cfg.audio_num_attention_heads * cfg.audio_attention_head_dim
    dc, dac = cfg.cross_attention_dim, cfg.audio_cross_attention_dim
    block = (
        4 * linear(n, d, d)
        + attention(n, n, d)
        + 4 * linear(m, da, da)
        + attention(m, m, da)
        + 2 * linear(n, d, d)
        + 2 * linear(t, dc, d)
        + attention(n, t, d)
        + 2 * linear(m, da, da)
        + 2 * linear(t, dac, da)
        + attention(m, t, da)
        + 2 * (2 * linear(n, d, i) + 2 * linear(m, da, i))
        + 2 * attention(n, m, i)
        + 2 * linear(n, d, 4 * d)
        + 2 * linear(m, da, 4 * da)
    )
    cc = cfg.caption_channels
    modulation = sum(
        timestep_mlp(w) + linear(1, w, k * w) for w, k in ((d, 6), (da, 6), (d, 4), (da, 4), (d, 1), (da, 1))
    )
    ends = (
        linear(n, cfg.in_channels, d)
        + linear(n, d, cfg.out_dim)
        + linear(m, cfg.audio_in_channels, da)
        + linear(m, da, cfg.audio_out_dim)
        + linear(t, cc, d)
        + linear(t, d, d)
        + linear(t, cc, da)
        + linear(t, da, da)
        + modulation
    )
    return s["batch"] * (cfg.num_layers * block + ends)


def cosmos3_flops(cfg, s: dict) -> int:
    """Cosmos 3 (Mixture-of-Transformers), per layer (U understanding = prompt tokens, G
    generation = video patch tokens (+ sound tokens), width d, H query and K key/value heads of
    k, MLP width f with 3 products for SiLU-gated, 2 for relu2): each pathway's q and out
    ``2·2·n·d·H·k`` and k, v ``2·2·n·d·K·k`` and MLP ``(3 or 2)·2·n·d·f`` for n in (U, G); the
    attention over the packed sequence ``4·(U + G)²·H·k`` (one masked attention: the
    understanding queries see the understanding keys causally, the generation ones all).
    Once per call: ``proj_in`` and ``proj_out`` of the patches (``p²·C <-> d``) and the
    time embedder, which runs per noisy token (``256 -> d -> d`` on each)."""
    u, g, gn = s["text"], s["tokens"], s["noisy_tokens"]
    d, qk, kv, f = (
        cfg.hidden_size,
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
        cfg.intermediate_size,
    )
    mlp = 3 if cfg.hidden_act == "silu" else 2

    def pathway(n):
        return 2 * linear(n, d, qk) + 2 * linear(n, d, kv) + mlp * linear(n, d, f)

    block = pathway(u) + pathway(g) + attention(u + g, u + g, qk)
    ends = linear(g, cfg.patch_latent_dim, d) + linear(gn, d, cfg.patch_latent_dim) + gn * timestep_mlp(d)
    return s["batch"] * (cfg.num_hidden_layers * block + ends)


# ------------------------------------------------------------------ presets


@dataclasses.dataclass(frozen=True)
class Preset:
    """A model of the TPU benchmarks.

    Attributes:
        folder: its ``reference_configs/`` folder.
        embeds: ``(transformer config, call) -> what the family's encode_call returns`` for one
            prompt (random arrays of the encoders' shapes; the negative's are the same).
        shapes: ``(pipe, call, latents, embeds, step inputs) -> dict`` of what :attr:`flops` reads.
        flops: ``(transformer config, shapes) -> FLOPs`` of one transformer call.
        tiny: transformer config keys of the tiny variant (CPU smoke runs, the FLOP check).
        tiny_call: call keywords of the tiny variant (a small video).
        text_len: ``max_sequence_length`` of the call (None: the checkpoint's default).
        layers_key: the config key of the block count (``--num-layers``).
        note: what the row is, for the table.
        tiny_components: config keys of the other components' tiny variants (component name ->
            keys; ``tpu_e2e.py --tiny`` runs the whole pipeline with them).
    """

    folder: str
    embeds: Callable
    shapes: Callable
    flops: Callable
    tiny: dict
    tiny_call: dict
    text_len: int | None = None
    layers_key: str = "num_layers"
    note: str = ""
    tiny_components: dict = dataclasses.field(default_factory=dict)


def _f(shape, dtype=None, seed=0):
    import jax.numpy as jnp

    return jnp.asarray(host_values(shape, "float32", seed) * 5.0, dtype or jnp.float32)


def _mask(length, real, dtype="int32"):
    import numpy as np

    return (np.arange(length)[None] < real).astype(dtype)


def _wan_embeds(cfg, call):
    return _f((1, call.max_sequence_length, cfg.text_dim))


def _wan_shapes(pipe, call, x, embeds, inputs):
    cfg = pipe.transformer.config
    b, t, h, w, c = x.shape
    pt, ph, pw = cfg.patch_size
    return {
        "batch": b * (2 if call.do_cfg else 1),
        "tokens": (t // pt) * (h // ph) * (w // pw),
        "text": embeds.shape[1],
        "patch_in": pt * ph * pw * cfg.in_channels,
        "patch_out": pt * ph * pw * cfg.out_channels,
    }


def _hunyuan15_embeds(cfg, call):
    from vidax.models.hunyuan_video15.text import GLYPH_MAX_LENGTH

    l1 = call.max_sequence_length
    return (
        _f((1, l1, cfg.text_embed_dim)),
        _mask(l1, max(1, l1 // 8)),
        _f((1, GLYPH_MAX_LENGTH, cfg.text_embed_2_dim), seed=1),
        _mask(GLYPH_MAX_LENGTH, 12),
    )


def _hunyuan15_shapes(pipe, call, x, embeds, inputs):
    from vidax.models.hunyuan_video15.pipeline import IMAGE_TOKENS

    cfg = pipe.transformer.config
    b, t, h, w, _ = x.shape
    pt, p, _ = cfg.patch
    return {
        "batch": b * (2 if call.do_cfg else 1),
        "tokens": (t // pt) * (h // p) * (w // p),
        "text": embeds[0].shape[1],
        "glyph": embeds[2].shape[1],
        "image": IMAGE_TOKENS,
        "patch_in": pt * p * p * cfg.in_channels,
        "patch_out": pt * p * p * cfg.out_dim,
    }


def _ltx2_embeds(cfg, call):
    s = call.max_sequence_length
    return (_f((1, s, cfg.caption_channels)), _f((1, s, cfg.caption_channels), seed=1), _mask(s, s))


def _ltx2_shapes(pipe, call, x, embeds, inputs):
    v, a = x["latents"], x["audio_latents"]
    # the guidance's passes (LTX2Guidance.rows): prompt, negative, and the STG / modality-isolated
    # ones the call's scales turn on, all in one batch
    return {
        "batch": v.shape[0] * inputs.guidance.rows,
        "tokens": int(np_prod(v.shape[1:-1])),
        "audio_tokens": int(a.shape[1]),
        "text": embeds[0].shape[1],
    }


def _cosmos3_embeds(cfg, call):
    import jax.numpy as jnp

    u = call.max_sequence_length
    return {"ids": jnp.asarray(np_arange(u)[None] % cfg.vocab_size, jnp.int32), "lengths": jnp.asarray([u], jnp.int32)}


def _cosmos3_shapes(pipe, call, x, embeds, inputs):
    lay = pipe.hooks._layout  # the Cosmos 3 hooks: the token layout of the call being run
    t, hp, wp = lay.grid
    sound = lay.sound or 0
    return {
        "batch": x["latents"].shape[0] * (2 if call.do_cfg else 1),
        "text": embeds["ids"].shape[1],
        "tokens": t * hp * wp + sound,
        "noisy_tokens": len(lay.noisy) * hp * wp + sound,
    }


def np_prod(shape) -> int:
    import math

    return math.prod(shape)


def np_arange(n):
    import numpy as np

    return np.arange(n)


TINY_CALL = {"height": 64, "width": 96, "num_frames": 9, "max_sequence_length": 32}
#: LTX-2's VAE compresses 32x in space and 8x in time: a larger tiny video for enough tokens.
LTX2_TINY_CALL = {"height": 256, "width": 384, "num_frames": 17, "max_sequence_length": 32}


WAN_TINY = {
    "num_attention_heads": 2,
    "attention_head_dim": 64,
    "ffn_dim": 512,
    "num_layers": 1,
    "text_dim": 96,
    "freq_dim": 64,
}
WAN_TINY_CALL = {"height": 64, "width": 96, "num_frames": 9, "max_sequence_length": 32}
#: The tiny UMT5 (its width is WAN_TINY's text_dim; its vocabulary the random-weights stand-in
#: tokenizer's) and the tiny Wan VAE (16 latent channels, 8x / 4x compression as the real one).
WAN_TINY_COMPONENTS = {
    "text_encoder": {"d_model": 96, "d_ff": 128, "d_kv": 16, "num_heads": 2, "num_layers": 1, "vocab_size": 256},
    "vae": {"base_dim": 8, "num_res_blocks": 1},
}
#: LTX-2's VAE compresses 32x in space and 8x in time: a larger tiny video for enough tokens.
LTX2_TINY_CALL = {"height": 256, "width": 384, "num_frames": 17, "max_sequence_length": 32}
#: The tiny LTX-2 video VAE: the released structure (compression, padding, up-samplers) narrow and
#: one resnet a block; 128 latent channels, as the transformer's.
LTX2_TINY_VAE = {
    "block_out_channels": [8, 8, 8, 8],
    "decoder_block_out_channels": [16, 32, 64],
    "layers_per_block": [1, 1, 1, 1, 1],
    "decoder_layers_per_block": [1, 1, 1, 1],
}


#: The tiny Cosmos 3 transformer both Cosmos 3 presets run with --tiny.
COSMOS3_TINY = {
    "hidden_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 512,
    "num_hidden_layers": 1,
    "vocab_size": 1024,
}

PRESETS: dict[str, Preset] = {
    "wan-1.3b": Preset(
        "Wan-AI__Wan2.1-T2V-1.3B-Diffusers",
        _wan_embeds,
        _wan_shapes,
        wan_flops,
        WAN_TINY,
        WAN_TINY_CALL,
        note="Wan2.1-T2V-1.3B, 480x832x81, CFG batch 2, UniPC",
        tiny_components=WAN_TINY_COMPONENTS,
    ),
    "wan-14b": Preset(
        "Wan-AI__Wan2.1-T2V-14B-Diffusers",
        _wan_embeds,
        _wan_shapes,
        wan_flops,
        WAN_TINY,
        WAN_TINY_CALL,
        note="Wan2.1-T2V-14B, 480x832x81, CFG batch 2, UniPC",
        tiny_components=WAN_TINY_COMPONENTS,
    ),
    "hunyuan15-480p": Preset(
        "hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-480p_t2v",
        _hunyuan15_embeds,
        _hunyuan15_shapes,
        hunyuan15_flops,
        {
            "num_attention_heads": 2,
            "num_layers": 1,
            "num_refiner_layers": 1,
            "text_embed_dim": 64,
            "text_embed_2_dim": 48,
            "image_embed_dim": 32,
        },
        TINY_CALL,
        note="HunyuanVideo 1.5 480p T2V (8.3B), CFG batch 2, flow-match Euler",
    ),
    "hunyuan15-720p": Preset(
        "hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-720p_t2v",
        _hunyuan15_embeds,
        _hunyuan15_shapes,
        hunyuan15_flops,
        {
            "num_attention_heads": 2,
            "num_layers": 1,
            "num_refiner_layers": 1,
            "text_embed_dim": 64,
            "text_embed_2_dim": 48,
            "image_embed_dim": 32,
        },
        TINY_CALL,
        note="HunyuanVideo 1.5 720p T2V (8.3B), CFG batch 2, flow-match Euler",
    ),
    "ltx2": Preset(
        "Lightricks__LTX-2",
        _ltx2_embeds,
        _ltx2_shapes,
        ltx2_flops,
        {
            "num_attention_heads": 2,
            "attention_head_dim": 64,
            "audio_num_attention_heads": 2,
            "audio_attention_head_dim": 32,
            "cross_attention_dim": 128,
            "audio_cross_attention_dim": 64,
            "caption_channels": 96,
            "num_layers": 1,
        },
        LTX2_TINY_CALL,
        note="LTX-2 (19B) video + audio, the default guidance passes in one batch, flow-match Euler",
        tiny_components={"vae": LTX2_TINY_VAE},
    ),
    "cosmos3-nano": Preset(
        "nvidia__Cosmos3-Nano",
        _cosmos3_embeds,
        _cosmos3_shapes,
        cosmos3_flops,
        COSMOS3_TINY,
        TINY_CALL,
        text_len=256,
        layers_key="num_hidden_layers",
        note="Cosmos3-Nano, 256 prompt tokens, CFG batch 2, UniPC",
    ),
    "cosmos3-edge": Preset(
        "nvidia__Cosmos3-Edge",
        _cosmos3_embeds,
        _cosmos3_shapes,
        cosmos3_flops,
        COSMOS3_TINY,
        TINY_CALL,
        text_len=256,
        layers_key="num_hidden_layers",
        note="Cosmos3-Edge, 256 prompt tokens, CFG batch 2, UniPC",
        tiny_components={"vae": WAN_TINY_COMPONENTS["vae"]},
    ),
    "skyreels-df-1.3b": Preset(
        "Skywork__SkyReels-V2-DF-1.3B-540P-Diffusers",
        _wan_embeds,
        _wan_shapes,
        wan_flops,
        WAN_TINY,
        WAN_TINY_CALL,
        note="SkyReels-V2-DF-1.3B-540P, 544x960, 97-frame chunks, CFG batch 2, UniPC",
        tiny_components=WAN_TINY_COMPONENTS,
    ),
}
