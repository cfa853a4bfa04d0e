"""Wan text-to-video, mirroring ``diffusers.WanPipeline`` (Wan2.1 T2V, Wan2.2 T2V A14B, TI2V-5B).

Flow per call: clean + tokenize prompts -> UMT5 (outputs past each prompt's real length zeroed)
-> initial noise (or the given ``latents``) -> ``num_inference_steps`` jitted denoising steps
(cond and uncond as one batch of 2B, guidance, scheduler update) -> latents * std + mean ->
frame-chunked VAE decode -> frames in [0, 1].

Wan2.2 A14B checkpoints have two experts: ``transformer`` denoises the steps whose timestep is
``>= boundary_ratio * num_train_timesteps`` (high noise), ``transformer_2`` the rest, with its
own guidance weight ``guidance_scale_2``. Only the expert in use is on the device; the other
waits in host memory (:class:`WanExperts`). TI2V-5B (``expand_timesteps``) feeds the model one
timestep per token; in text-to-video they are all equal, so the scalar timestep is used.
Image-to-video lives in :mod:`vidax.pipelines.wan_i2v` and reuses this class.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from vidax.encoders.t5 import T5_PARAM_AXES, load_t5_encoder
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import ConfigError, InputError
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.transformer import load_wan_transformer
from vidax.models.wan.vae import WanVAEConfig, denormalize_latents, load_wan_vae
from vidax.pipelines.common import (
    TASK_NAMES,
    VideoPipelineOutput,
    as_prompt_list,
    check_positive_int,
    check_task,
    parse_dtype,
    prompt_clean,
)
from vidax.pipelines.loading import read_model_index, require_component
from vidax.parallel.offload import ChunkedStep, host_memory_kind, offloaded_blocks, resolve_offload
from vidax.parallel.placement import logical_placement
from vidax.pipelines.sampling import classifier_free_guidance, initial_latents, run_denoising_loop
from vidax.pipelines.staging import Staging, plan_pipeline_staging
from vidax.schedulers import scheduler_from_folder
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


# ---------------------------------------------------------------------------------------------
# Two experts (Wan2.2 A14B)


def expert_for_steps(timesteps: Any, boundary_ratio: float | None, num_train_timesteps: int) -> list[int]:
    """Which transformer runs each step: 0 (``transformer``) or 1 (``transformer_2``).

    As ``diffusers.WanPipeline``: step i uses ``transformer`` when ``boundary_ratio`` is None or
    ``timesteps[i] >= boundary_ratio * num_train_timesteps``, else ``transformer_2``. torch
    compares an int64 timestep with a Python float in float32, so the comparison is done in
    float32 here too (``0.9 * 1000`` is 900.0000000000001, and timestep 900 counts as high noise).

    Args:
        timesteps: (N,) the scheduler's model-input timesteps (int or float).
        boundary_ratio: the checkpoint's ``boundary_ratio`` (model_index.json) or None.
        num_train_timesteps: the scheduler config's ``num_train_timesteps``.

    Returns:
        N ints in {0, 1}.
    """
    t = np.asarray(timesteps)
    if boundary_ratio is None:
        return [0] * len(t)
    boundary = np.float32(boundary_ratio * num_train_timesteps)
    return [0 if v >= boundary else 1 for v in t.astype(np.float32)]


def _segments(experts: Sequence[int]) -> list[tuple[int, int]]:
    """Runs of equal expert: ``[0, 0, 1, 1, 1] -> [(0, 2), (1, 3)]`` as (expert, length)."""
    out: list[tuple[int, int]] = []
    for e in experts:
        if out and out[-1][0] == e:
            out[-1] = (e, out[-1][1] + 1)
        else:
            out.append((e, 1))
    return out


def _host_memory_kind() -> str | None:
    """The memory kind for parameters waiting off the device ("pinned_host"), or None if the
    default device has none."""
    kind = host_memory_kind("auto")
    return kind if kind == "pinned_host" else None


def _move(module: nnx.Module, memory_kind: str) -> None:
    """Move every array of ``module`` to ``memory_kind`` on the same devices and sharding, in
    place; the source buffers are released as soon as the copies exist."""
    state = nnx.state(module)
    # Placeholders of blocks streamed from host memory (vidax.parallel.offload) stay as they are.
    moved = jax.tree.map(lambda a: jax.device_put(a, a.sharding.with_memory_kind(memory_kind))
                         if isinstance(a, jax.Array) else a, state)
    jax.block_until_ready(moved)
    nnx.update(module, moved)


class WanExperts:
    """The denoising transformers of a Wan pipeline and which of them is on the device.

    One transformer (Wan2.1, TI2V-5B) is always on the device. With two (Wan2.2 A14B) and
    ``offload=True``, only the expert in use is on the device and the other one waits in pinned
    host memory (``memory_kind="pinned_host"``, same sharding); :meth:`params` swaps them when
    the other one is asked for (at the boundary step), releasing the device copy of the first
    before placing the second, so the device never holds both. With ``offload=False`` (or a
    backend without host memory) both stay on the device.

    Args:
        modules: ``[transformer]`` or ``[transformer, transformer_2]`` (loaded; any of them may
            already have been moved to host memory, see :meth:`move_to_host`).
        offload: keep the inactive expert in host memory.
    """

    def __init__(self, modules: Sequence[nnx.Module], offload: bool = True):
        self.modules = list(modules)
        self.host_kind = _host_memory_kind()
        self.device_kind = jax.local_devices()[0].default_memory().kind
        self.offload = bool(offload) and len(self.modules) > 1 and self.host_kind is not None
        if offload and len(self.modules) > 1 and self.host_kind is None:
            logger.warning("this backend has no pinned host memory; both experts stay on the device")
        self.active = 0
        for i, m in enumerate(self.modules):
            want = self.device_kind if (i == 0 or not self.offload) else self.host_kind
            if self.memory_kind(i) != want:
                _move(m, want)

    def memory_kind(self, i: int) -> str:
        """Where expert ``i``'s parameters are now (``"device"``, ``"pinned_host"``)."""
        leaves = [a for a in jax.tree.leaves(nnx.state(self.modules[i])) if isinstance(a, jax.Array)]
        return leaves[0].sharding.memory_kind if leaves else self.device_kind

    @staticmethod
    def move_to_host(module: nnx.Module) -> None:
        """Move a freshly loaded expert to host memory at once (before the next one is loaded),
        so loading two experts never holds both on the device. No-op without host memory."""
        kind = _host_memory_kind()
        if kind is not None:
            _move(module, kind)

    def params(self, i: int) -> nnx.State:
        """The device parameters of expert ``i``, swapping it onto the device if needed.

        The returned state references the device arrays; drop it before asking for the other
        expert, or both will be alive on the device.
        """
        if self.memory_kind(i) != self.device_kind:
            t0 = time.perf_counter()
            for j in range(len(self.modules)):
                if j != i and self.memory_kind(j) == self.device_kind:
                    _move(self.modules[j], self.host_kind)
            _move(self.modules[i], self.device_kind)
            logger.info("expert swap: transformer%s now on the device (%.2f s)",
                        "" if i == 0 else f"_{i + 1}", time.perf_counter() - t0)
        self.active = i
        return nnx.state(self.modules[i])


@functools.lru_cache(maxsize=None)
def _t5_encode_fn(graphdef) -> Callable:
    """The jitted ``(params, ids, mask) -> embeddings`` of a text-encoder structure, outputs past
    each prompt's length zeroed. Parameters are an argument (no closure holds them, so a staged
    encoder leaves the device); pipelines of one structure share the compiled function."""

    @jax.jit
    def encode(params, ids, mask):
        hidden = nnx.merge(graphdef, params)(ids, mask)
        return jnp.where(mask[..., None] > 0, hidden, jnp.zeros((), hidden.dtype))

    return encode


def _component_present(index: dict[str, Any], name: str) -> bool:
    return index.get(name) not in (None, [None, None])


@dataclasses.dataclass(frozen=True)
class WanCheckpoint:
    """What a diffusers Wan folder holds, read from its JSON files only (no weights).

    Attributes:
        root: the folder.
        index: its ``model_index.json``.
        paths: component name -> folder, for the components the pipelines load.
        transformer_configs: the config of ``transformer`` (and of ``transformer_2`` when the
            checkpoint has two experts and a ``boundary_ratio``).
        vae_config: the VAE's config.
        boundary_ratio: switch point of the two experts, as a fraction of
            ``num_train_timesteps``, or None.
        expand_timesteps: one timestep per token (TI2V-5B).
        tasks: what it generates, a subset of ``("t2v", "i2v")`` (from the configs: a
            transformer with ``in_channels == z_dim`` is text-to-video, ``2 z_dim + 4`` takes
            the image condition; ``expand_timesteps`` does both).
    """

    root: str
    index: dict
    paths: dict
    transformer_configs: tuple
    vae_config: WanVAEConfig
    boundary_ratio: float | None
    expand_timesteps: bool
    tasks: tuple

    @classmethod
    def read(cls, root: str, index: dict[str, Any] | None = None) -> "WanCheckpoint":
        """Read and cross-check the configs of a Wan folder.

        Raises:
            CheckpointError: a required component folder is missing.
            ConfigError: a setting vidax does not implement, or components that do not fit
                together (the message names the file, the key and what is valid).
        """
        index = read_model_index(root) if index is None else index
        src = f"{root}/model_index.json"
        paths = {n: require_component(root, n, index) for n in
                 ("tokenizer", "text_encoder", "transformer", "vae", "scheduler")}
        boundary = index.get("boundary_ratio")
        expand = index.get("expand_timesteps", False)
        if not isinstance(expand, bool):
            raise ConfigError(f"{src}: expand_timesteps={expand!r} must be true or false")
        if boundary is not None and (isinstance(boundary, bool) or not isinstance(boundary, (int, float))
                                     or not 0.0 <= boundary <= 1.0):
            raise ConfigError(f"{src}: boundary_ratio={boundary!r} must be null or a number in [0, 1]")
        has_second = _component_present(index, "transformer_2")
        if boundary is not None and not has_second:
            raise ConfigError(
                f"{src}: boundary_ratio={boundary!r} hands the low-noise steps to transformer_2, "
                "but the checkpoint has no transformer_2; set boundary_ratio to null or add it"
            )
        if has_second and boundary is None:
            logger.warning("%s: transformer_2 is never used without a boundary_ratio (as in diffusers); "
                           "not loading it", src)
        elif has_second:
            paths["transformer_2"] = require_component(root, "transformer_2", index)
        configs = tuple(
            WanTransformerConfig.from_json_file(os.path.join(paths[n], "config.json"))
            for n in ("transformer", "transformer_2") if n in paths
        )
        vae_config = WanVAEConfig.from_json_file(os.path.join(paths["vae"], "config.json"))
        z = vae_config.z_dim
        first = configs[0]
        for name, c in zip(("transformer", "transformer_2"), configs):
            file = f"{paths[name]}/config.json"
            if c.pos_embed_seq_len is not None:
                raise ConfigError(
                    f"{file}: pos_embed_seq_len={c.pos_embed_seq_len} is the first-last-frame (FLF2V) "
                    "model; vidax does not implement first-last-frame-to-video"
                )
            if c.out_dim != z:
                raise ConfigError(f"{file}: out_channels={c.out_dim} must equal the VAE's z_dim={z}")
            if (c.in_channels, tuple(c.patch_size)) != (first.in_channels, tuple(first.patch_size)):
                raise ConfigError(
                    f"{file}: in_channels={c.in_channels}, patch_size={list(c.patch_size)} differ from "
                    f"transformer/config.json ({first.in_channels}, {list(first.patch_size)}); both "
                    "experts denoise the same latents"
                )
            if c.image_dim is not None and not _component_present(index, "image_encoder"):
                raise ConfigError(
                    f"{file}: image_dim={c.image_dim} takes CLIP image features, but {src} names no "
                    "image_encoder (the reference pipeline cannot run this combination either)"
                )
        want = {z: ("t2v",), 2 * z + 4: ("i2v",)}
        if expand:
            if first.in_channels != z:
                raise ConfigError(
                    f"{paths['transformer']}/config.json: in_channels={first.in_channels}; with "
                    f"expand_timesteps the latents go in as they are, so it must be z_dim={z}"
                )
            tasks = ("t2v", "i2v")
        elif first.in_channels in want:
            tasks = want[first.in_channels]
        else:
            raise ConfigError(
                f"{paths['transformer']}/config.json: in_channels={first.in_channels} fits neither "
                f"text-to-video (z_dim={z}) nor image-to-video (2 * z_dim + 4 = {2 * z + 4})"
            )
        return cls(root, index, paths, configs, vae_config, boundary, expand, tasks)

    @property
    def has_image_encoder(self) -> bool:
        """The transformer takes CLIP image features (Wan2.1 I2V)."""
        return self.transformer_configs[0].image_dim is not None

    @property
    def variant(self) -> str:
        """A human-readable name: ``"Wan2.2 A14B T2V (two experts, boundary_ratio=0.875)"`` ..."""
        tasks = " + ".join(TASK_NAMES[t] for t in self.tasks)
        if self.expand_timesteps:
            name = "Wan2.2 TI2V (per-token timesteps, 16x VAE)" if self.vae_config.spatial_compression == 16 else "Wan TI2V"
        elif len(self.transformer_configs) == 2:
            name = f"Wan2.2 A14B {'T2V' if self.tasks == ('t2v',) else 'I2V'} (two experts, " \
                   f"boundary_ratio={self.boundary_ratio})"
        elif self.tasks == ("i2v",):
            name = "Wan2.1 I2V (CLIP image encoder)" if self.has_image_encoder else "Wan I2V (no image encoder)"
        else:
            name = "Wan2.1 T2V"
        return f"{name}: {tasks}"


class WanPipeline:
    """Wan text-to-video (reference: ``diffusers.WanPipeline``).

    Runs Wan2.1 T2V, Wan2.2 T2V A14B (two experts) and the text-to-video mode of Wan2.2
    TI2V-5B. Build with :meth:`from_pretrained` (or :func:`vidax.load_pipeline`) and call like
    the diffusers pipeline.
    """

    vae_scale_factor_temporal = 4
    vae_scale_factor_spatial = 8
    #: the task of this class ("t2v"); see :meth:`for_task`.
    task = "t2v"
    #: the device mesh the transformer and text encoder run on (None: one device).
    mesh = None
    #: where the text encoder and VAE wait between uses (vidax.pipelines.staging).
    staging = Staging()

    def __init__(self, tokenizer, text_encoder, transformer, transformer_config, vae, vae_config,
                 scheduler, dtype, root: str = "", *, transformer_2=None, boundary_ratio: float | None = None,
                 expand_timesteps: bool = False, offload_experts: bool = True):
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.transformer = transformer
        self.transformer_2 = transformer_2
        self.transformer_config: WanTransformerConfig = transformer_config
        self.vae = vae
        self.vae_config: WanVAEConfig = vae_config
        self.scheduler = scheduler
        self.dtype = dtype
        self.root = root
        self.boundary_ratio = boundary_ratio
        self.expand_timesteps = bool(expand_timesteps)
        self.vae_scale_factor_temporal = vae_config.temporal_compression
        self.vae_scale_factor_spatial = vae_config.spatial_compression
        self.experts = WanExperts([transformer] + ([transformer_2] if transformer_2 is not None else []),
                                  offload=offload_experts)
        self._encode_fn = None
        self._step_fns: dict[Any, Any] = {}

    # ------------------------------------------------------------------ loading
    @classmethod
    def describe_variant(cls, root: str, index: dict[str, Any]) -> str:
        """What the checkpoint is and the tasks it does, e.g. ``"Wan2.2 TI2V (...): text-to-video
        + image-to-video"`` (for ``vidax inspect``; reads configs only).

        Raises:
            ConfigError, CheckpointError: see :meth:`WanCheckpoint.read`.
        """
        return WanCheckpoint.read(root, index).variant

    @classmethod
    def for_task(cls, root: str, index: dict[str, Any], task: str) -> type:
        """The pipeline class that runs ``task`` on this checkpoint.

        ``"t2v"`` -> :class:`WanPipeline`, ``"i2v"`` -> :class:`WanImageToVideoPipeline` (the
        TI2V-5B folder, a ``WanPipeline`` in model_index.json, runs both, as in diffusers).

        Raises:
            InputError: the checkpoint does not do ``task`` (the message says what it does).
            ConfigError, CheckpointError: see :meth:`WanCheckpoint.read`.
        """
        info = WanCheckpoint.read(root, index)
        check_task(root, task, info.tasks, info.variant)
        if task == "t2v":
            return WanPipeline
        from vidax.pipelines.wan_i2v import WanImageToVideoPipeline

        return WanImageToVideoPipeline

    @classmethod
    def from_pretrained(cls, root: str, dtype: Any = "float32", vae_dtype: Any = "float32",
                        stats: RunStats | None = None, offload_experts: bool = True,
                        mesh: Any = None, offload: Any = None) -> "WanPipeline":
        """Load every component of a Wan diffusers folder.

        Args:
            root: folder with ``model_index.json``, ``tokenizer/``, ``text_encoder/``,
                ``transformer/`` (+ ``transformer_2/`` for Wan2.2 A14B), ``vae/``,
                ``scheduler/`` (+ ``image_encoder/``, ``image_processor/`` for Wan2.1 I2V).
            dtype: transformer and text-encoder dtype, ``"float32"`` or ``"bfloat16"``.
            vae_dtype: VAE dtype (float32 by default, as the diffusers Wan examples load it).
            offload_experts: with two experts, keep the one not in use in host memory
                (see :class:`WanExperts`); False keeps both on the device.
            mesh: ``(data, tensor, sequence)`` mesh (:mod:`vidax.parallel`) or None (one device).
            offload: weights in host memory (:func:`vidax.parallel.offload.resolve_offload`: an
                ``OffloadConfig``, a blocks-per-chunk int or ``"all"``): transformer blocks
                streamed each step, text encoder / VAE staged (see ``docs/offloading.md``).

        Raises:
            CheckpointError, ConfigError, InputError (see :func:`vidax.load_pipeline`);
            ConfigError if the checkpoint does not do this class's task.
        """
        dtype = parse_dtype(dtype)
        vae_dtype = parse_dtype(vae_dtype)
        stats = stats or RunStats()
        t0 = time.perf_counter()
        info = WanCheckpoint.read(root)
        if cls.task not in info.tasks:
            raise ConfigError(
                f"{root} is {info.variant}; {cls.__name__} runs {TASK_NAMES[cls.task]} "
                f"(load it with vidax.load_pipeline(path, task={info.tasks[0]!r}))"
            )
        paths = info.paths
        offload = resolve_offload(offload)
        staging = plan_pipeline_staging(paths, dtype, vae_dtype, offload, mesh)
        tokenizer = TextTokenizer(paths["tokenizer"])
        text_encoder = load_t5_encoder(paths["text_encoder"], dtype=dtype, mesh=mesh,
                                       placement=staging.placement("text_encoder", logical_placement(mesh, T5_PARAM_AXES)))
        transformer_2 = None
        if "transformer_2" in paths:
            # Loaded first and moved to host memory at once, so the device never holds both.
            transformer_2 = load_wan_transformer(paths["transformer_2"], dtype=dtype, mesh=mesh, offload=offload)
            if offload_experts:
                WanExperts.move_to_host(transformer_2)
        transformer = load_wan_transformer(paths["transformer"], dtype=dtype, mesh=mesh, offload=offload)
        vae = load_wan_vae(paths["vae"], dtype=vae_dtype, placement=staging.placement("vae"))
        scheduler = scheduler_from_folder(paths["scheduler"])
        pipe = cls(tokenizer, text_encoder, transformer, info.transformer_configs[0], vae, info.vae_config,
                   scheduler, dtype, root, transformer_2=transformer_2, boundary_ratio=info.boundary_ratio,
                   expand_timesteps=info.expand_timesteps, offload_experts=offload_experts)
        pipe.mesh = mesh
        pipe.staging = staging.attach(text_encoder=text_encoder, vae=vae)
        pipe._load_extra(info)
        stats.load_s += time.perf_counter() - t0
        pipe._load_stats = stats
        return pipe

    def _load_extra(self, info: WanCheckpoint) -> None:
        """Hook for components a subclass needs beyond the text-to-video ones."""

    # ------------------------------------------------------------------ text
    def encode_prompt(self, prompts: Sequence[str], max_sequence_length: int = 512) -> jax.Array:
        """UMT5 embeddings (B, L, D) with L = ``max_sequence_length``, zero past each prompt's
        real token count (as ``WanPipeline._get_t5_prompt_embeds``)."""
        tokens = self.tokenizer([prompt_clean(p) for p in prompts], max_sequence_length)
        if self._encode_fn is None:
            self._encode_fn = _t5_encode_fn(nnx.graphdef(self.text_encoder))
        with self.staging.on_device("text_encoder"):
            out = self._encode_fn(nnx.state(self.text_encoder), jnp.asarray(tokens.input_ids),
                                  jnp.asarray(tokens.attention_mask))
            if self.staging.is_staged("text_encoder"):
                out.block_until_ready()  # done before its weights leave the device
        return out

    # ------------------------------------------------------------------ sampling
    def _model_input(self, latents: jax.Array, t: jax.Array, cond: dict) -> tuple[jax.Array, jax.Array]:
        """Transformer input and timestep of one step (traced): text-to-video feeds the latents
        (B, T, H, W, C) as they are and one timestep per sample (B,) float32 (with
        ``expand_timesteps`` the reference's per-token timesteps are all equal to it)."""
        return latents, jnp.broadcast_to(t.astype(jnp.float32), (latents.shape[0],))

    def _final_latents(self, latents: jax.Array, cond: dict) -> jax.Array:
        """Latents after the last step -> the latents to decode (identity for text-to-video)."""
        return latents

    def _step_fn(self, do_cfg: bool, expert: int = 0):
        """The jitted step ``(params, latents, state, context, guidance_scale, cond) -> (latents,
        state)`` of expert ``expert`` (latents donated)."""
        graphdef, _ = nnx.split(self.experts.modules[expert])
        blocks = offloaded_blocks(self.experts.modules[expert])  # None unless blocks are streamed
        # Keyed by structure: experts of one architecture (A14B) share one trace and executable.
        key = (do_cfg, graphdef)
        if key in self._step_fns:
            fn = self._step_fns[key]
            return fn if blocks is None else fn.for_blocks(blocks)
        scheduler = self.scheduler
        compute_dtype = self.dtype
        model_input = self._model_input

        def model_args(latents, state, context, guidance_scale, cond):
            x, timestep = model_input(latents, state.timestep, cond)
            x = x.astype(compute_dtype)
            image = cond.get("image")  # CLIP features (B, L_img, D_img), Wan2.1 I2V only
            if do_cfg:
                x, timestep = jnp.concatenate([x, x], axis=0), jnp.concatenate([timestep, timestep], axis=0)
                if image is not None:
                    image = jnp.concatenate([image, image], axis=0)
            return x, timestep, context, image

        def finish(noise_pred, latents, state, context, guidance_scale, cond):
            if do_cfg:
                noise_pred = classifier_free_guidance(noise_pred, guidance_scale)
            return scheduler.step(state, noise_pred, latents)

        def step(params, latents, state, *args):
            model = nnx.merge(graphdef, params)
            return finish(model(*model_args(latents, state, *args)), latents, state, *args)

        if blocks is None:
            fn = jax.jit(step, donate_argnums=(1,))
        else:  # blocks streamed from host memory: a sequence of jitted calls per step
            fn = ChunkedStep(graphdef, blocks, model_args, finish)
        self._step_fns[key] = fn
        return fn

    def _denoise(self, x, state, context, cond, do_cfg, guidance_scale, guidance_scale_2, stats,
                 progress, callback):
        """All steps, each run by the expert :func:`expert_for_steps` picks, the segments of one
        expert in one :func:`run_denoising_loop`."""
        total = state.num_inference_steps
        if self.mesh is None:
            # Committed to the device like the outputs of a step, so every segment's inputs match
            # and experts of one architecture reuse one compiled step.
            x, state = jax.device_put((x, state), jax.local_devices()[0])
        plan = expert_for_steps(np.asarray(state.timesteps), self.boundary_ratio,
                                self.scheduler.config.num_train_timesteps)
        done = 0
        for expert, count in _segments(plan):
            gs = guidance_scale if expert == 0 else guidance_scale_2
            x, state = self._run_expert(expert, do_cfg, x, state, (context, jnp.asarray(gs, jnp.float32), cond),
                                        count, done, total, stats, progress, callback)
            done += count
        return x, state

    def _run_expert(self, expert, do_cfg, x, state, args, count, done, total, stats, progress, callback):
        # The expert's device parameters live only in this frame, so they are released before
        # the next segment asks for the other expert.
        params = self.experts.params(expert)
        step = self._step_fn(do_cfg, expert)
        cb = None if callback is None else (lambda i, _n: callback(done + i, total))
        return run_denoising_loop(step, params, x, state, args, count, stats, progress, cb, mesh=self.mesh)

    def check_inputs(self, height, width, num_frames, num_inference_steps, guidance_scale,
                     output_type, max_sequence_length) -> int:
        """Validate call arguments; returns the num_frames the reference would use."""
        for name, v in (("height", height), ("width", width)):
            check_positive_int(name, v)
        s = self.vae_scale_factor_spatial
        _, ph, pw = self.transformer_config.patch_size
        mult_h, mult_w = int(np.lcm(16, s * ph)), int(np.lcm(16, s * pw))
        if height % mult_h or width % mult_w:
            near = [f"{name} in {sorted({max(m, v // m * m), (v // m + 1) * m})}"
                    for name, v, m in (("height", height, mult_h), ("width", width, mult_w)) if v % m]
            raise InputError(
                f"height and width must be multiples of {mult_h}"
                + ("" if mult_h == mult_w else f" and {mult_w}")
                + f" (the VAE's {s}x spatial compression times the transformer's {ph}x{pw} patches, "
                f"and at least 16), got height={height}, width={width}; nearest valid: {', '.join(near)}"
            )
        check_positive_int("num_inference_steps", num_inference_steps)
        check_positive_int("max_sequence_length", max_sequence_length)
        num_frames = check_positive_int("num_frames", num_frames)
        _check_guidance("guidance_scale", guidance_scale)
        if output_type not in ("np", "latent"):
            raise InputError(f"output_type must be 'np' or 'latent', got {output_type!r}")
        k = self.vae_scale_factor_temporal
        if num_frames % k != 1:
            rounded = num_frames // k * k + 1
            logger.warning(
                "num_frames=%d is not of the form %dk+1; using %d, as diffusers' WanPipeline does",
                num_frames, k, rounded,
            )
            num_frames = rounded
        return num_frames

    def _guidance_scale_2(self, guidance_scale: float, guidance_scale_2: float | None) -> float:
        """``guidance_scale_2`` checked, defaulting to ``guidance_scale`` (as diffusers)."""
        if guidance_scale_2 is None:
            return guidance_scale
        if self.boundary_ratio is None:
            raise InputError(
                f"guidance_scale_2={guidance_scale_2!r} is only used by checkpoints with two experts "
                "(Wan2.2 A14B, boundary_ratio in model_index.json); this one has a single transformer"
            )
        _check_guidance("guidance_scale_2", guidance_scale_2)
        return guidance_scale_2

    def __call__(
        self,
        prompt: str | Sequence[str],
        negative_prompt: str | Sequence[str] | None = None,
        height: int = 480,
        width: int = 832,
        num_frames: int = 81,
        num_inference_steps: int = 50,
        guidance_scale: float = 5.0,
        guidance_scale_2: float | None = None,
        num_videos_per_prompt: int = 1,
        seed: int | None = None,
        latents: np.ndarray | jax.Array | None = None,
        max_sequence_length: int = 512,
        output_type: str = "np",
        progress: bool = True,
        callback: Callable[[int, int], None] | None = None,
    ) -> VideoPipelineOutput:
        """Generate videos.

        Args:
            prompt: one prompt or a list (batch B).
            negative_prompt: one or one per prompt; default ``""`` (used when guidance_scale > 1).
            height, width: pixels, multiples of 16 (of 32 for TI2V-5B: its VAE compresses 16x).
            num_frames: F, of the form 4k+1 (others are rounded down to it, with a warning).
            num_inference_steps: denoising steps (> 0).
            guidance_scale: classifier-free guidance weight (>= 0); > 1 enables CFG, run as one
                batch of cond + uncond.
            guidance_scale_2: guidance weight of the low-noise expert ``transformer_2`` (Wan2.2
                A14B only); default ``guidance_scale``. CFG runs only if guidance_scale > 1.
            num_videos_per_prompt: videos per prompt.
            seed: seed of the initial noise (``jax.random``); random when None and no latents.
            latents: initial noise, float32 (B, C, T, H/s, W/s) in the diffusers layout, with
                C the VAE's z_dim, s its spatial compression (8; 16 for TI2V-5B) and
                T = (F - 1) / 4 + 1; overrides ``seed``.
            max_sequence_length: text tokens L (longer prompts are truncated with a warning).
            output_type: ``"np"`` (frames) or ``"latent"``.
            progress: show progress bars.
            callback: called as ``callback(step_index, num_inference_steps)`` after each step.

        Returns:
            :class:`VideoPipelineOutput` with ``frames`` float32 (B, F, H, W, 3) in [0, 1], or
            latents (B, C, T, H/s, W/s).

        Raises:
            InputError: invalid argument (the message names it and the valid values).
        """
        args = dict(locals())
        del args["self"]
        return self._generate(**args)

    def _condition(self, image: Any, batch: int, num_frames: int, height: int, width: int,
                   stats: RunStats) -> dict:
        """Per-call conditioning arrays handed to every step (none for text-to-video)."""
        return {}

    def _generate(self, *, prompt, negative_prompt, height, width, num_frames, num_inference_steps,
                  guidance_scale, guidance_scale_2, num_videos_per_prompt, seed, latents,
                  max_sequence_length, output_type, progress, callback, image=None) -> VideoPipelineOutput:
        # The load time is reported by the first call only: it is not part of later calls.
        first, self._load_reported = not getattr(self, "_load_reported", False), True
        stats = RunStats(load_s=getattr(self, "_load_stats", RunStats()).load_s if first else 0.0)
        num_frames = self.check_inputs(height, width, num_frames, num_inference_steps, guidance_scale,
                                       output_type, max_sequence_length)
        guidance_scale_2 = self._guidance_scale_2(guidance_scale, guidance_scale_2)
        num_videos_per_prompt = check_positive_int("num_videos_per_prompt", num_videos_per_prompt)
        prompts = as_prompt_list("prompt", prompt)
        negatives = as_prompt_list("negative_prompt", negative_prompt, len(prompts))
        do_cfg = guidance_scale > 1.0
        batch = len(prompts) * num_videos_per_prompt

        with stats.timed("text_encode_s"):
            texts = prompts + (negatives if do_cfg else [])
            embeds = self.encode_prompt(texts, max_sequence_length)
            embeds = jnp.repeat(embeds, num_videos_per_prompt, axis=0).astype(self.dtype)
            embeds.block_until_ready()
        stats.sample_memory()
        cond = self._condition(image, batch, num_frames, height, width, stats)

        c = self.vae_config.z_dim
        t_lat = (num_frames - 1) // self.vae_scale_factor_temporal + 1
        shape = (batch, c, t_lat, height // self.vae_scale_factor_spatial, width // self.vae_scale_factor_spatial)
        latents = initial_latents(shape, seed, latents)
        x = jnp.transpose(latents, (0, 2, 3, 4, 1))  # (B, T, H, W, C)

        state = self.scheduler.set_timesteps(num_inference_steps, sample_shape=x.shape)
        x, state = self._denoise(x, state, embeds, cond, do_cfg, guidance_scale, guidance_scale_2, stats,
                                 progress, callback)
        x = self._final_latents(x, cond)

        if output_type == "latent":
            frames = np.asarray(jnp.transpose(x, (0, 4, 1, 2, 3)))
        else:
            with stats.timed("decode_s"):
                z = denormalize_latents(x.astype(self.vae.dtype), self.vae_config)
                chunks = []
                with self.staging.on_device("vae"):
                    for chunk in tqdm(self.vae.iter_decode(z), total=z.shape[1], desc="vae decode",
                                      disable=not progress, unit="latent frame"):
                        chunks.append(chunk)
                        stats.sample_memory()
                video = np.concatenate(chunks, axis=1)
                frames = np.clip(video / 2.0 + 0.5, 0.0, 1.0).astype(np.float32)
        stats.sample_memory()
        return VideoPipelineOutput(frames=frames, stats=stats)


def _check_guidance(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not np.isfinite(value):
        raise InputError(f"{name} must be a finite number >= 0, got {value!r}")
