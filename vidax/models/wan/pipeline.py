"""Wan2.1 / Wan2.2 pipelines: the hooks of :class:`~vidax.pipelines.base.VideoPipeline`.

References: ``diffusers.WanPipeline`` and ``diffusers.WanImageToVideoPipeline`` (0.42.1).
Text: clean + tokenize -> UMT5 with its mask, outputs past each prompt's length zeroed. Steps: cond
and uncond as one batch of 2B, guidance, scheduler update; Wan2.2 A14B hands the steps whose
timestep is ``< boundary_ratio * num_train_timesteps`` to ``transformer_2`` with
``guidance_scale_2``. Decode: latents * std + mean, one latent frame per VAE chunk.

Image-to-video, by checkpoint (:class:`WanInfo`):

* Wan2.1 I2V 14B: CLIP ViT-H penultimate hidden states go to the transformer's image embedder;
  the latents are concatenated (channels) with a 4-channel first-frame mask and the VAE encoding
  of ``[image, 0, 0, ...]`` (``num_frames`` frames): 16 + 4 + 16 = 36 input channels.
* Wan2.2 I2V A14B: the same 36-channel input, no image encoder, two experts.
* Wan2.2 TI2V-5B (``expand_timesteps``, both tasks on one checkpoint): the VAE encoding of the
  image is the first latent frame; every step replaces the model input's first frame with it and
  gives its tokens timestep 0; it is put back once more after the last step, as the reference.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import CheckpointError, ConfigError
from vidax.io.image import to_rgb_image, vae_image_preprocess
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.vae import WanVAEConfig
from vidax.pipelines.base import CallDefaults, CheckpointInfo, VideoPipeline, cfg_pair
from vidax.pipelines.checkpoint import Checkpoint
from vidax.pipelines.common import TASK_NAMES, check_task, prompt_clean
from vidax.pipelines.experts import Experts, expert_for_steps

logger = logging.getLogger("vidax.pipeline")

#: ``WanPipeline.__call__``'s defaults in diffusers, and the fps of its examples.
WAN_DEFAULTS = CallDefaults(height=480, width=832, num_frames=81, num_inference_steps=50, guidance_scale=5.0,
                            max_sequence_length=512, fps=16)


@dataclasses.dataclass(frozen=True)
class WanInfo(CheckpointInfo):
    """A Wan folder's configs (see :class:`~vidax.pipelines.base.CheckpointInfo`).

    Attributes:
        transformer_configs: of ``transformer`` (and ``transformer_2`` with a ``boundary_ratio``).
        vae_config: the VAE's.
        boundary_ratio: switch point of the two experts (fraction of ``num_train_timesteps``).
        expand_timesteps: one timestep per token (TI2V-5B).
    """

    transformer_configs: tuple
    vae_config: WanVAEConfig
    boundary_ratio: float | None
    expand_timesteps: bool

    @property
    def has_image_encoder(self) -> bool:
        """The transformer takes CLIP image features (Wan2.1 I2V)."""
        return self.transformer_configs[0].image_dim is not None


def _variant(tasks, configs, vae: WanVAEConfig, boundary, expand) -> str:
    names = " + ".join(TASK_NAMES[t] for t in tasks)
    if expand:
        name = "Wan2.2 TI2V (per-token timesteps, 16x VAE)" if vae.spatial_compression == 16 else "Wan TI2V"
    elif len(configs) == 2:
        name = f"Wan2.2 A14B {'T2V' if tasks == ('t2v',) else 'I2V'} (two experts, boundary_ratio={boundary})"
    elif tasks == ("i2v",):
        name = "Wan2.1 I2V (CLIP image encoder)" if configs[0].image_dim is not None else "Wan I2V (no image encoder)"
    else:
        name = "Wan2.1 T2V"
    return f"{name}: {names}"


class WanPipeline(VideoPipeline):
    """Wan text-to-video, and image-to-video on TI2V-5B (``image=``) (reference:
    ``diffusers.WanPipeline``). Build with :meth:`from_pretrained` or :func:`vidax.load_pipeline`."""

    latents_layout = "(batch, z_dim, latent frames, height / vae_scale, width / vae_scale)"

    #: The CLIP image encoder (Wan2.1 I2V checkpoints), else None.
    image_encoder = None

    def __init__(self, info: WanInfo, modules, **kwargs):
        super().__init__(info, modules, **kwargs)
        #: Where the experts switch (model_index.json's); None runs ``transformer`` at every step.
        self.boundary_ratio = info.boundary_ratio

    @property
    def expand_timesteps(self) -> bool:
        """One timestep per token (TI2V-5B)."""
        return self.info.expand_timesteps

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> WanInfo:
        """Read and cross-check a Wan folder's configs.

        Raises:
            CheckpointError: a required component folder is missing.
            ConfigError: a setting vidax does not implement, or components that do not fit
                together (the message names the file, the key and what is valid).
        """
        ckpt, src = checkpoint, checkpoint.source
        for name in ("tokenizer", "text_encoder", "transformer", "vae", "scheduler"):
            ckpt.folder(name)
        boundary = ckpt.index.get("boundary_ratio")
        expand = ckpt.index.get("expand_timesteps", False)
        if not isinstance(expand, bool):
            raise ConfigError(f"{src}: expand_timesteps={expand!r} must be true or false")
        if boundary is not None and (isinstance(boundary, bool) or not isinstance(boundary, (int, float))
                                     or not 0.0 <= boundary <= 1.0):
            raise ConfigError(f"{src}: boundary_ratio={boundary!r} must be null or a number in [0, 1]")
        names = ["transformer"]
        if boundary is not None and not ckpt.has("transformer_2"):
            raise ConfigError(f"{src}: boundary_ratio={boundary!r} hands the low-noise steps to transformer_2, "
                              "but the checkpoint has no transformer_2; set boundary_ratio to null or add it")
        if ckpt.has("transformer_2") and boundary is None:
            logger.warning("%s: transformer_2 is never used without a boundary_ratio (as in diffusers); "
                           "not loading it", src)
        elif ckpt.has("transformer_2"):
            ckpt.folder("transformer_2")
            names.append("transformer_2")
        configs = tuple(ckpt.typed_config(n, WanTransformerConfig) for n in names)
        vae = ckpt.typed_config("vae", WanVAEConfig)
        z, first = vae.z_dim, configs[0]
        for name, c in zip(names, configs):
            file = ckpt.config_file(name)
            if c.pos_embed_seq_len is not None:
                raise ConfigError(f"{file}: pos_embed_seq_len={c.pos_embed_seq_len} is the first-last-frame "
                                  "(FLF2V) model; vidax does not implement first-last-frame-to-video")
            if c.out_dim != z:
                raise ConfigError(f"{file}: out_channels={c.out_dim} must equal the VAE's z_dim={z}")
            if (c.in_channels, tuple(c.patch_size)) != (first.in_channels, tuple(first.patch_size)):
                raise ConfigError(
                    f"{file}: in_channels={c.in_channels}, patch_size={list(c.patch_size)} differ from "
                    f"transformer/config.json ({first.in_channels}, {list(first.patch_size)}); both "
                    "experts denoise the same latents")
            if c.image_dim is not None and not ckpt.has("image_encoder"):
                raise ConfigError(f"{file}: image_dim={c.image_dim} takes CLIP image features, but {src} names "
                                  "no image_encoder (the reference pipeline cannot run this combination either)")
        want = {z: ("t2v",), 2 * z + 4: ("i2v",)}
        if expand:
            if first.in_channels != z:
                raise ConfigError(f"{ckpt.config_file('transformer')}: in_channels={first.in_channels}; with "
                                  f"expand_timesteps the latents go in as they are, so it must be z_dim={z}")
            tasks = ("t2v", "i2v")
        elif first.in_channels in want:
            tasks = want[first.in_channels]
        else:
            raise ConfigError(f"{ckpt.config_file('transformer')}: in_channels={first.in_channels} fits neither "
                              f"text-to-video (z_dim={z}) nor image-to-video (2 * z_dim + 4 = {2 * z + 4})")
        s = vae.spatial_compression
        _, ph, pw = first.patch_size
        return WanInfo(
            checkpoint=ckpt, tasks=tasks, variant=_variant(tasks, configs, vae, boundary, expand),
            defaults=WAN_DEFAULTS.for_checkpoint(ckpt), transformers=tuple(names),
            size_multiple=(int(np.lcm(16, s * ph)), int(np.lcm(16, s * pw))),
            size_reason=f"the VAE's {s}x spatial compression times the transformer's {ph}x{pw} patches, "
                        "and at least 16",
            transformer_configs=configs, vae_config=vae, boundary_ratio=boundary, expand_timesteps=expand)

    @classmethod
    def for_task(cls, checkpoint: Checkpoint, task: str) -> type:
        """``"t2v"`` -> :class:`WanPipeline`, ``"i2v"`` -> :class:`WanImageToVideoPipeline`
        (TI2V-5B, a ``WanPipeline`` in model_index.json, does both, as in diffusers)."""
        info = cls.read_checkpoint(checkpoint)
        check_task(checkpoint.root, task, info.tasks, info.variant)
        return WanPipeline if task == "t2v" else WanImageToVideoPipeline

    @classmethod
    def resolve_num_frames(cls, info: WanInfo, num_frames: int) -> int:
        k = info.vae_config.temporal_compression
        if num_frames % k != 1:
            rounded = num_frames // k * k + 1
            logger.warning("num_frames=%d is not of the form %dk+1; using %d, as diffusers' WanPipeline does",
                           num_frames, k, rounded)
            return rounded
        return num_frames

    @classmethod
    def latent_shape(cls, info: WanInfo, call) -> tuple[int, ...]:
        v = info.vae_config
        s = v.spatial_compression
        return (call.batch, v.z_dim, (call.num_frames - 1) // v.temporal_compression + 1,
                call.height // s, call.width // s)

    @classmethod
    def check_family_call(cls, info: WanInfo, call) -> None:
        if call.image is not None and info.has_image_encoder and call.max_sequence_length != 512:
            logger.warning(
                "max_sequence_length=%s: diffusers' WanImageToVideoPipeline assumes 512 text tokens when it "
                "separates the image tokens, so its output differs from vidax's (which keeps them apart at "
                "any length) unless max_sequence_length=512", call.max_sequence_length)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(cls, info: WanInfo, *, dtype, mesh, offload, staging, offload_experts=True,
                        vae_dtype: Any = "float32") -> dict[str, Any]:
        """Tokenizer, UMT5, the transformer(s), VAE (``vae_dtype``, float32 by default as the
        diffusers Wan examples load it), scheduler; Wan2.1 I2V also the CLIP image encoder
        (float32) and its preprocessing config."""
        from vidax.nn.inputs import parse_dtype

        ckpt = info.checkpoint
        load = cls.load_component
        modules: dict[str, Any] = {"tokenizer": TextTokenizer(ckpt.folder("tokenizer"))}
        modules["text_encoder"] = load(info, "text_encoder", dtype=dtype, mesh=mesh, staging=staging)
        if "transformer_2" in info.transformers:
            # Loaded first and moved to host memory at once, so the device never holds both.
            modules["transformer_2"] = load(info, "transformer_2", dtype=dtype, mesh=mesh, offload=offload)
            if offload_experts:
                Experts.move_to_host(modules["transformer_2"])
        modules["transformer"] = load(info, "transformer", dtype=dtype, mesh=mesh, offload=offload)
        modules["vae"] = load(info, "vae", dtype=parse_dtype(vae_dtype), staging=staging)
        modules["scheduler"] = load(info, "scheduler")
        if info.has_image_encoder:
            modules["image_encoder"] = load(info, "image_encoder", dtype=jnp.float32)
            if not ckpt.config_files.get("image_processor", "").endswith("preprocessor_config.json"):
                raise CheckpointError(f"{ckpt.folder('image_processor')} has no preprocessor_config.json "
                                      "(the CLIP image preprocessing)")
            modules["image_processor_config"] = dict(ckpt.config("image_processor"))
        return modules

    # ------------------------------------------------------------------ call hooks
    def encode_text(self, texts, max_sequence_length) -> jax.Array:
        """UMT5 embeddings (B, L, D), L = max_sequence_length, zero past each prompt's real token
        count (as ``WanPipeline._get_t5_prompt_embeds``)."""
        tokens = self.tokenizer([prompt_clean(p) for p in texts], max_sequence_length)
        return encode_tokens(self.text_encoder, tokens, zero_padding=True)

    def encode_image(self, image: Any) -> jax.Array:
        """CLIP penultimate hidden states (1, L_img, D_img) float32 of one image, as
        ``WanImageToVideoPipeline.encode_image`` (the CLIP preprocessing resizes and crops)."""
        from vidax.encoders.clip import clip_preprocess

        pixels = clip_preprocess(to_rgb_image(image), self.image_processor_config)
        return self.image_encoder(jnp.asarray(pixels, jnp.float32)[None], output_layer=-2)

    def condition(self, call, stats) -> dict:
        """The reference's ``encode_image`` + ``prepare_latents`` conditioning, channels last:
        ``image`` (B, L_img, D_img) CLIP features (Wan2.1 I2V), and ``concat`` (B, T, h, w, 4 + C)
        mask + image latents, or ``first_frame`` (B, 1, h, w, C) (``expand_timesteps``)."""
        if call.image is None:
            return {}
        info, batch = self.info, call.batch
        rgb = to_rgb_image(call.image)
        cond: dict[str, jax.Array] = {}
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            if info.has_image_encoder:
                cond["image"] = jnp.repeat(self.encode_image(rgb), batch, axis=0).astype(self.dtype)
            pixels = vae_image_preprocess(rgb, call.height, call.width)  # (H, W, 3) in [-1, 1]
            if info.expand_timesteps:
                video = pixels[None, None]
            else:
                video = np.zeros((1, call.num_frames, call.height, call.width, 3), np.float32)
                video[0, 0] = pixels
            mean, _ = self.encode_with("vae", self.vae.encode, video)  # the posterior's mode ("argmax")
            z = jnp.repeat(self.vae.normalize_latents(mean), batch, axis=0)
            if info.expand_timesteps:
                cond["first_frame"] = z
            else:
                mask = jnp.zeros(z.shape[:-1] + (info.vae_config.temporal_compression,), jnp.float32)
                mask = mask.at[:, 0].set(1.0)  # the first latent frame holds the given image
                cond["concat"] = jnp.concatenate([mask, z], axis=-1)
        stats.sample_memory()
        return cond

    def model_args(self, latents, state, args, do_cfg) -> tuple:
        """``(x, timestep, context, image)`` of the Wan transformer: the latents (with the I2V
        channels, or TI2V's first frame and per-token timesteps), a timestep per sample (B,)."""
        context, _, cond = args
        b, t = latents.shape[0], state.timestep.astype(jnp.float32)
        if "concat" in cond:
            x, timestep = jnp.concatenate([latents, cond["concat"]], axis=-1), jnp.broadcast_to(t, (b,))
        elif "first_frame" in cond:
            x = jnp.concatenate([cond["first_frame"].astype(latents.dtype), latents[:, 1:]], axis=1)
            pt, ph, pw = self.info.transformer_configs[0].patch_size
            grid = (latents.shape[1] // pt, latents.shape[2] // ph, latents.shape[3] // pw)
            per_frame = jnp.where(jnp.arange(grid[0]) == 0, 0.0, t)
            per_token = jnp.broadcast_to(per_frame[:, None, None], grid).reshape(-1)  # frame-major
            timestep = jnp.broadcast_to(per_token, (b, per_token.shape[0]))
        else:  # text-to-video: with expand_timesteps the per-token timesteps are all equal to it
            x, timestep = latents, jnp.broadcast_to(t, (b,))
        x, timestep, image = cfg_pair(do_cfg, x.astype(self.dtype), timestep, cond.get("image"))
        return x, timestep, context, image

    def expert_plan(self, state) -> list[int]:
        return expert_for_steps(np.asarray(state.timesteps), self.boundary_ratio,
                                self.scheduler.config.num_train_timesteps)

    def final_latents(self, call, latents, cond) -> jax.Array:
        if "first_frame" not in cond:
            return latents
        return jnp.concatenate([cond["first_frame"].astype(latents.dtype), latents[:, 1:]], axis=1)


class WanImageToVideoPipeline(WanPipeline):
    """Wan image-to-video (reference: ``diffusers.WanImageToVideoPipeline``): ``pipe(image, prompt, ...)``.

    ``image``: the first frame, a PIL image or uint8 array (H, W, 3) (see
    :func:`vidax.io.image.load_image`), resized to exactly height x width (Lanczos, no crop) for
    the VAE; the CLIP encoder (Wan2.1 I2V) sees it through its own resize and center crop.
    ``latents`` has the VAE's z_dim channels. (With CLIP features, diffusers repeats them per
    prompt only and fails for ``num_videos_per_prompt > 1``; vidax repeats them for every video.)
    """

    task = "i2v"

    def __call__(self, image: Any = None, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any):
        return super().__call__(prompt, negative_prompt, image=image, **kwargs)
