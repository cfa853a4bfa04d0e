"""Wan2.1 text-to-video, mirroring ``diffusers.WanPipeline``.

Flow per call: clean + tokenize prompts -> UMT5 (outputs past each prompt's real length zeroed)
-> initial noise (or the given ``latents``) -> ``num_inference_steps`` jitted denoising steps
(cond and uncond as one batch of 2B, guidance, scheduler update) -> latents * std + mean ->
frame-chunked VAE decode -> frames in [0, 1].
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from vidax.encoders.t5 import load_t5_encoder
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import ConfigError, InputError
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.transformer import load_wan_transformer
from vidax.models.wan.vae import WanVAEConfig, denormalize_latents, load_wan_vae
from vidax.pipelines.common import (
    VideoPipelineOutput,
    as_prompt_list,
    check_positive_int,
    parse_dtype,
    prompt_clean,
)
from vidax.pipelines.loading import read_model_index, require_component
from vidax.schedulers import scheduler_from_config
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


class WanPipeline:
    """Wan2.1 text-to-video (reference: ``diffusers.WanPipeline``).

    Build with :meth:`from_pretrained` (or :func:`vidax.load_pipeline`) and call like the
    diffusers pipeline.
    """

    vae_scale_factor_temporal = 4
    vae_scale_factor_spatial = 8

    def __init__(self, tokenizer, text_encoder, transformer, transformer_config, vae, vae_config,
                 scheduler, dtype, root: str = ""):
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.transformer = transformer
        self.transformer_config: WanTransformerConfig = transformer_config
        self.vae = vae
        self.vae_config: WanVAEConfig = vae_config
        self.scheduler = scheduler
        self.dtype = dtype
        self.root = root
        self.vae_scale_factor_temporal = 2 ** sum(vae_config.temperal_downsample)
        self.vae_scale_factor_spatial = 2 ** len(vae_config.temperal_downsample)
        self._encode_fn = None
        self._step_fns: dict[Any, Any] = {}

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, root: str, dtype: Any = "float32", vae_dtype: Any = "float32",
                        stats: RunStats | None = None) -> "WanPipeline":
        """Load every component of a Wan2.1 T2V diffusers folder.

        Args:
            root: folder with ``model_index.json``, ``tokenizer/``, ``text_encoder/``,
                ``transformer/``, ``vae/``, ``scheduler/``.
            dtype: transformer and text-encoder dtype, ``"float32"`` or ``"bfloat16"``.
            vae_dtype: VAE dtype (float32 by default, as the diffusers Wan examples load it).

        Raises:
            CheckpointError, ConfigError, InputError (see :func:`vidax.load_pipeline`).
        """
        dtype = parse_dtype(dtype)
        vae_dtype = parse_dtype(vae_dtype)
        stats = stats or RunStats()
        t0 = time.perf_counter()
        index = read_model_index(root)
        for key, neutral in (("boundary_ratio", None), ("expand_timesteps", False)):
            if index.get(key, neutral) != neutral:
                raise ConfigError(
                    f"{root}/model_index.json sets {key}={index[key]!r} (Wan2.2); this vidax "
                    f"version runs Wan2.1 text-to-video only ({key} must be {neutral!r})"
                )
        if index.get("transformer_2") not in (None, [None, None]):
            raise ConfigError(f"{root}/model_index.json has a transformer_2 (Wan2.2 A14B); not supported yet")
        paths = {n: require_component(root, n, index) for n in
                 ("tokenizer", "text_encoder", "transformer", "vae", "scheduler")}
        tokenizer = TextTokenizer(paths["tokenizer"])
        text_encoder = load_t5_encoder(paths["text_encoder"], dtype=dtype)
        transformer_config = WanTransformerConfig.from_json_file(os.path.join(paths["transformer"], "config.json"))
        if transformer_config.image_dim is not None or transformer_config.added_kv_proj_dim is not None:
            raise ConfigError(
                f"{paths['transformer']}/config.json is an image-to-video transformer "
                f"(image_dim={transformer_config.image_dim}); this pipeline is text-to-video"
            )
        transformer = load_wan_transformer(paths["transformer"], dtype=dtype)
        vae_config = WanVAEConfig.from_json_file(os.path.join(paths["vae"], "config.json"))
        vae = load_wan_vae(paths["vae"], dtype=vae_dtype)
        scheduler_file = os.path.join(paths["scheduler"], "scheduler_config.json")
        if not os.path.isfile(scheduler_file):
            raise ConfigError(f"{paths['scheduler']} has no scheduler_config.json")
        with open(scheduler_file) as f:
            scheduler = scheduler_from_config(json.load(f), source=scheduler_file)
        pipe = cls(tokenizer, text_encoder, transformer, transformer_config, vae, vae_config,
                   scheduler, dtype, root)
        stats.load_s += time.perf_counter() - t0
        pipe._load_stats = stats
        return pipe

    # ------------------------------------------------------------------ text
    def encode_prompt(self, prompts: Sequence[str], max_sequence_length: int = 512) -> jax.Array:
        """UMT5 embeddings (B, L, D) with L = ``max_sequence_length``, zero past each prompt's
        real token count (as ``WanPipeline._get_t5_prompt_embeds``)."""
        tokens = self.tokenizer([prompt_clean(p) for p in prompts], max_sequence_length)
        if self._encode_fn is None:
            graphdef, params = nnx.split(self.text_encoder)

            @jax.jit
            def encode(params, ids, mask):
                hidden = nnx.merge(graphdef, params)(ids, mask)
                return jnp.where(mask[..., None] > 0, hidden, jnp.zeros((), hidden.dtype))

            self._encode_fn = lambda ids, mask: encode(params, ids, mask)
        return self._encode_fn(jnp.asarray(tokens.input_ids), jnp.asarray(tokens.attention_mask))

    # ------------------------------------------------------------------ sampling
    def _step_fn(self, do_cfg: bool):
        if do_cfg in self._step_fns:
            return self._step_fns[do_cfg]
        graphdef, params = nnx.split(self.transformer)
        scheduler = self.scheduler
        compute_dtype = self.dtype

        def step(params, latents, state, context, guidance_scale):
            model = nnx.merge(graphdef, params)
            t = state.timestep
            x = latents.astype(compute_dtype)
            if do_cfg:
                x = jnp.concatenate([x, x], axis=0)
            timestep = jnp.broadcast_to(t.astype(jnp.float32), (x.shape[0],))
            noise_pred = model(x, timestep, context)
            if do_cfg:
                cond, uncond = jnp.split(noise_pred, 2, axis=0)
                noise_pred = uncond + guidance_scale.astype(cond.dtype) * (cond - uncond)
            return scheduler.step(state, noise_pred, latents)

        fn = (jax.jit(step, donate_argnums=(1,)), params)
        self._step_fns[do_cfg] = fn
        return fn

    def check_inputs(self, height, width, num_frames, num_inference_steps, guidance_scale,
                     output_type, max_sequence_length) -> int:
        """Validate call arguments; returns the num_frames the reference would use."""
        for name, v in (("height", height), ("width", width)):
            check_positive_int(name, v)
        mult = self.vae_scale_factor_spatial * self.transformer_config.patch_size[1]
        if height % 16 or width % 16 or height % mult or width % mult:
            raise InputError(
                f"height and width must be multiples of {max(16, mult)}, got height={height}, width={width}"
            )
        check_positive_int("num_inference_steps", num_inference_steps)
        check_positive_int("max_sequence_length", max_sequence_length)
        num_frames = check_positive_int("num_frames", num_frames)
        if not isinstance(guidance_scale, (int, float)) or guidance_scale < 0 or not np.isfinite(guidance_scale):
            raise InputError(f"guidance_scale must be a finite number >= 0, got {guidance_scale!r}")
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

    def __call__(
        self,
        prompt: str | Sequence[str],
        negative_prompt: str | Sequence[str] | None = None,
        height: int = 480,
        width: int = 832,
        num_frames: int = 81,
        num_inference_steps: int = 50,
        guidance_scale: float = 5.0,
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
            height, width: pixels, multiples of 16.
            num_frames: F, of the form 4k+1 (others are rounded down to it, with a warning).
            num_inference_steps: denoising steps (> 0).
            guidance_scale: classifier-free guidance weight (>= 0); > 1 enables CFG, run as one
                batch of cond + uncond.
            num_videos_per_prompt: videos per prompt.
            seed: seed of the initial noise (``jax.random``); random when None and no latents.
            latents: initial noise, float32 (B, C, T, H/8, W/8) in the diffusers layout, with
                T = (F - 1) / 4 + 1; overrides ``seed``.
            max_sequence_length: text tokens L (longer prompts are truncated with a warning).
            output_type: ``"np"`` (frames) or ``"latent"``.
            progress: show progress bars.
            callback: called as ``callback(step_index, num_inference_steps)`` after each step.

        Returns:
            :class:`VideoPipelineOutput` with ``frames`` float32 (B, F, H, W, 3) in [0, 1], or
            latents (B, C, T, H/8, W/8).

        Raises:
            InputError: invalid argument (the message names it and the valid values).
        """
        stats = RunStats(load_s=getattr(self, "_load_stats", RunStats()).load_s)
        num_frames = self.check_inputs(height, width, num_frames, num_inference_steps, guidance_scale,
                                       output_type, max_sequence_length)
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

        c = self.transformer_config.in_channels
        t_lat = (num_frames - 1) // self.vae_scale_factor_temporal + 1
        shape = (batch, c, t_lat, height // self.vae_scale_factor_spatial, width // self.vae_scale_factor_spatial)
        if latents is None:
            key = jax.random.PRNGKey(seed if seed is not None else np.random.SeedSequence().entropy % 2**31)
            latents = jax.random.normal(key, shape, jnp.float32)
        else:
            latents = jnp.asarray(latents, jnp.float32)
            if latents.shape != shape:
                raise InputError(
                    f"latents have shape {tuple(latents.shape)}, expected {shape} = (batch, channels, "
                    f"(num_frames-1)/{self.vae_scale_factor_temporal}+1, height/{self.vae_scale_factor_spatial}, "
                    f"width/{self.vae_scale_factor_spatial}) for these arguments"
                )
        x = jnp.transpose(latents, (0, 2, 3, 4, 1))  # (B, T, H, W, C)

        state = self.scheduler.set_timesteps(num_inference_steps, sample_shape=x.shape)
        step, params = self._step_fn(do_cfg)
        gs = jnp.asarray(guidance_scale, jnp.float32)
        with stats.timed("compile_s"):
            compiled = step.lower(params, x, state, embeds, gs).compile()
        bar = tqdm(total=num_inference_steps, desc="denoising", disable=not progress, unit="step")
        for i in range(num_inference_steps):
            t0 = time.perf_counter()
            x, state = compiled(params, x, state, embeds, gs)
            x.block_until_ready()
            stats.step_s.append(time.perf_counter() - t0)
            if i == 0:
                stats.sample_memory()
            bar.update()
            if callback is not None:
                callback(i, num_inference_steps)
        bar.close()

        if output_type == "latent":
            frames = np.asarray(jnp.transpose(x, (0, 4, 1, 2, 3)))
        else:
            with stats.timed("decode_s"):
                z = denormalize_latents(x.astype(self.vae.dtype), self.vae_config)
                chunks = []
                for chunk in tqdm(self.vae.iter_decode(z), total=z.shape[1], desc="vae decode",
                                  disable=not progress, unit="latent frame"):
                    chunks.append(chunk)
                    stats.sample_memory()
                video = np.concatenate(chunks, axis=1)
                frames = np.clip(video / 2.0 + 0.5, 0.0, 1.0).astype(np.float32)
        stats.sample_memory()
        return VideoPipelineOutput(frames=frames, stats=stats)
