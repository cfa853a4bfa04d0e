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
* Wan2.1 FLF2V 14B (first and last frame, ``last_image=``): the video condition is ``[image, 0,
  ..., 0, last_image]``, the mask also marks the last frame, and the CLIP features of both images
  go to the transformer as one sequence (its ``pos_embed_seq_len`` image position embedding
  spans the two).
* Wan2.2 I2V A14B: the same 36-channel input, no image encoder, two experts; ``last_image=``
  enters the video condition and the mask alone.
* Wan2.2 TI2V-5B (``expand_timesteps``, both tasks on one checkpoint): the VAE encoding of the
  image is the first latent frame; every step replaces the model input's first frame with it and
  gives its tokens timestep 0; it is put back once more after the last step, as the reference.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import Arg, CheckpointError, InputError
from vidax.io.image import one_image, to_rgb_image, vae_image_preprocess
from vidax.models.wan.config import WanInfo, read_wan_checkpoint
from vidax.pipelines.base import ModelSize, SizeLimits, VideoPipeline, cfg_pair, frames_of_form, image_first_call
from vidax.pipelines.common import prompt_clean
from vidax.pipelines.experts import expert_for_steps
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TEXT_ENCODER, TRANSFORMER, VAE, ComponentTable, Weighted
from vidax.pipelines.options import IMAGE_FILE, OBJECT, CallOption
from vidax.pipelines.prompts import encode_with

logger = logging.getLogger("vidax.pipeline")


#: The components: UMT5, the transformer(s) (Wan2.2 A14B's ``transformer_2`` read first and moved
#: to host memory at once), the VAE in ``vae_dtype``, and Wan2.1 I2V's CLIP image encoder (float32).
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer},
    weighted={
        "text_encoder": TEXT_ENCODER,
        "transformer_2": Weighted(mesh=True, offload=True, expert_to_host=True),
        "transformer": TRANSFORMER,
        "vae": VAE,
        "image_encoder": Weighted(dtype=jnp.float32),
    },
)


#: The keywords of Wan's image-to-video pipelines (SkyReels-V2's too) beyond the shared ones.
WAN_I2V_OPTIONS = (
    CallOption(
        "last_image",
        IMAGE_FILE,
        "The last frame (diffusers' last_image): a video from --image to it "
        "(Wan first-and-last-frame: FLF2V, and the 36-channel I2V checkpoints without an image encoder). "
        "Resized to height x width like the first.",
    ),
    CallOption(
        "image_embeds",
        OBJECT,
        "diffusers' image_embeds: the CLIP features ((1 or B,) L_img, D_img) of the "
        "image (Wan2.1 I2V; pipe.encode_image(image) makes them), or (2 or 2B, L_img, D_img) of the first "
        "and last images (FLF2V; pipe.encode_image([image, last_image])), instead of encoding them; "
        "ignored by checkpoints without an image encoder, as diffusers.",
    ),
)


class WanHooks(FamilyHooks):
    """The Wan family's hooks, in one place: :class:`WanPipeline`'s, and what the image-to-video
    class's (:class:`WanImageToVideoHooks`) and SkyReels-V2's (Wan's loop with their transformer)
    build on."""

    pipeline_name = "WanPipeline"
    separate_cfg_passes = True  # diffusers calls the transformer for cond and uncond separately
    prompt_embeds_args = ("prompt_embeds",)

    latents_layout = "(batch, z_dim, latent frames, height / vae_scale, width / vae_scale)"
    scheduler_classes = ("UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler")

    def __init__(self, pipe):
        super().__init__(pipe)
        #: Where the experts switch (model_index.json's); None runs ``transformer`` at every step.
        self.boundary_ratio = pipe.info.boundary_ratio

    @property
    def expand_timesteps(self) -> bool:
        """One timestep per token (TI2V-5B)."""
        return self.pipe.info.expand_timesteps

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> WanInfo:
        return read_wan_checkpoint(checkpoint)

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """``"t2v"`` -> :class:`WanPipeline`, ``"i2v"`` -> :class:`WanImageToVideoPipeline`
        (TI2V-5B, a ``WanPipeline`` in model_index.json, does both, as in diffusers)."""
        return WanPipeline if task == "t2v" else WanImageToVideoPipeline

    @classmethod
    def resolve_num_frames(cls, info: WanInfo, num_frames: int) -> int:
        return frames_of_form(num_frames, info.vae_config.temporal_compression, cls.pipeline_name)

    @classmethod
    def size_limits(cls, info: WanInfo) -> SizeLimits:
        """The RoPE tables have ``rope_max_seq_len`` (M) rows per axis: at most M patches along
        frames, rows and columns, i.e. height <= M x VAE x p_h, width <= M x VAE x p_w (each the
        largest multiple of ``size_multiple`` below), and M x p_t latent frames, i.e.
        ``(M p_t - 1) x temporal compression + 1`` frames."""
        cfg, vae = info.transformer_configs[0], info.vae_config
        m, (pt, ph, pw), s = cfg.rope_max_seq_len, cfg.patch_size, vae.spatial_compression
        mh, mw = info.size_multiple
        return SizeLimits(
            height=m * s * ph // mh * mh,
            width=m * s * pw // mw * mw,
            num_frames=(m * pt - 1) * vae.temporal_compression + 1,
            reason=f"rope_max_seq_len={m} patches per axis in {info.checkpoint.config_file('transformer')}, "
            f"patches {pt}x{ph}x{pw}, VAE {vae.temporal_compression}x{s}x{s}",
        )

    @classmethod
    def model_size(cls, info: WanInfo, call) -> ModelSize:
        """Video patches of one sample (the text goes in through cross-attention)."""
        cfg = info.transformer_configs[0]
        return wan_model_size(cfg, cls.latent_shape(info, call), info.vae_config, num_heads=cfg.num_attention_heads)

    @classmethod
    def check_family_call(cls, info: WanInfo, call) -> None:
        one_image(call.image, "the Wan pipelines take", list_of_one=True)
        if call.image is not None and info.has_image_encoder and call.max_sequence_length != 512:
            logger.warning(
                "%s: diffusers' WanImageToVideoPipeline assumes 512 text tokens when it "
                "separates the image tokens, so its output differs from vidax's (which keeps them apart at "
                "any length) unless %s",
                Arg("max_sequence_length", call.max_sequence_length),
                Arg("max_sequence_length", 512),
            )

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls, info: WanInfo, *, dtype, mesh, offload, staging, offload_experts=True, vae_dtype: Any = jnp.float32
    ) -> dict[str, Any]:
        """Tokenizer, UMT5, the transformer(s), VAE (``vae_dtype``, float32 by default as the
        diffusers Wan examples load it), scheduler; Wan2.1 I2V also the CLIP image encoder
        (float32) and its preprocessing config. Every component's checkpoint is checked against
        its model (headers, sizes, key plan) before the first weight is read."""
        skip = [] if "transformer_2" in info.transformers else ["transformer_2"]
        # the CLIP preprocessing's config, read (and checked) before any weight
        extra = {"image_processor_config": clip_processor_config(info.checkpoint)} if info.has_image_encoder else {}
        if not info.has_image_encoder:
            skip.append("image_encoder")
        modules = COMPONENTS.load(
            info,
            dtype=dtype,
            mesh=mesh,
            offload=offload,
            staging=staging,
            skip=skip,
            offload_experts=offload_experts,
            vae_dtype=vae_dtype,
        )
        return modules | extra

    # ------------------------------------------------------------------ call hooks
    def encode_text(self, texts, max_sequence_length, truncation=None) -> jax.Array:
        """UMT5 embeddings (B, L, D), L = max_sequence_length, zero past each prompt's real token
        count (as ``WanPipeline._get_t5_prompt_embeds``)."""
        tokens = self.pipe.tokenizer([prompt_clean(p) for p in texts], max_sequence_length, truncation=truncation)
        return encode_tokens(self.pipe.text_encoder, tokens, zero_padding=True)

    def encode_image(self, image: Any) -> jax.Array:
        """CLIP penultimate hidden states float32 (N, L_img, D_img) of N images, as
        ``WanImageToVideoPipeline.encode_image`` (the CLIP preprocessing resizes and crops each).

        Args:
            image: one image (N = 1) or a list of them (diffusers passes ``[image, last_image]``
                for a first-and-last-frame call), each a PIL image or uint8 array (H, W, 3)
                (:func:`~vidax.io.image.to_rgb_image`).

        Raises:
            InputError: an image :func:`~vidax.io.image.to_rgb_image` refuses, or an empty list.
        """
        from vidax.encoders.clip import clip_preprocess

        images = list(image) if isinstance(image, (list, tuple)) else [image]
        if not images:
            raise InputError("image is an empty list; give a PIL image or a uint8 (H, W, 3) array")
        pixels = np.stack(
            [
                clip_preprocess(
                    to_rgb_image(im, f"image[{i}]" if len(images) > 1 else "image"), self.pipe.image_processor_config
                )
                for i, im in enumerate(images)
            ]
        )
        return self.pipe.image_encoder(jnp.asarray(pixels, jnp.float32), output_layer=-2)

    def condition(self, call, stats) -> dict:
        """The reference's ``encode_image`` + ``prepare_latents`` conditioning, channels last:
        ``image`` (B x n, L_img, D_img) CLIP features (Wan2.1 I2V: n = 1; FLF2V: n = 2, the first
        and the last image of each sample, the transformer's ``pos_embed_seq_len`` regrouping
        pairs them), and ``concat`` (B, T, h, w, 4 + C) mask + image latents, or ``first_frame``
        (B, 1, h, w, C) (``expand_timesteps``, which leaves ``last_image`` out, as the reference).
        With ``last_image`` the VAE encodes ``[image, 0, ..., 0, last_image]`` and the mask marks
        the last video frame too (the last of the last latent frame's 4 mask channels)."""
        if call.image is None:
            return {}
        info, batch = self.pipe.info, call.batch
        rgb = to_rgb_image(_one(call.image))
        last = _one(call.extra.get("last_image"))
        last_rgb = None if last is None or info.expand_timesteps else to_rgb_image(last, "last_image")
        cond: dict[str, jax.Array] = {}
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            if info.has_image_encoder:
                given = call.extra.get("image_embeds")
                if given is not None:
                    features = jnp.asarray(given, jnp.float32)
                    features = features[None] if features.ndim == 2 else features  # diffusers' repeat adds the axis
                else:
                    features = self.encode_image(rgb if last_rgb is None else [rgb, last_rgb])
                per_sample = 2 if info.transformer_configs[0].pos_embed_seq_len is not None else 1
                if features.shape[0] != per_sample * batch:  # one sample's rows, for every sample (diffusers' repeat)
                    features = jnp.tile(features, (batch, 1, 1))
                cond["image"] = features.astype(self.pipe.dtype)
            pixels = vae_image_preprocess(rgb, call.height, call.width)  # (H, W, 3) in [-1, 1]
            if info.expand_timesteps:
                video = pixels[None, None]
            else:
                video = np.zeros((1, call.num_frames, call.height, call.width, 3), np.float32)
                video[0, 0] = pixels
                if last_rgb is not None:
                    video[0, -1] = vae_image_preprocess(last_rgb, call.height, call.width, name="last_image")
            mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, video)  # the posterior's mode ("argmax")
            z = jnp.repeat(self.pipe.vae.normalize_latents(mean), batch, axis=0)
            if info.expand_timesteps:
                cond["first_frame"] = z
            else:
                mask = jnp.zeros(z.shape[:-1] + (info.vae_config.temporal_compression,), jnp.float32)
                mask = mask.at[:, 0].set(1.0)  # the first latent frame holds the given image
                if last_rgb is not None:  # the last video frame: the last channel of the last latent frame
                    mask = mask.at[:, -1, :, :, -1].set(1.0)
                cond["concat"] = jnp.concatenate([mask, z], axis=-1)
        stats.sample_memory()
        return cond

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(x, timestep, context, image)`` of the Wan transformer: the latents (with the I2V
        channels, or TI2V's first frame and per-token timesteps), a timestep per sample (B,)."""
        context, cond = inputs.embeds, inputs.cond
        b, t = latents.shape[0], state.timestep.astype(jnp.float32)
        if "concat" in cond:
            x, timestep = jnp.concatenate([latents, cond["concat"]], axis=-1), jnp.broadcast_to(t, (b,))
        elif "first_frame" in cond:
            x = jnp.concatenate([cond["first_frame"].astype(latents.dtype), latents[:, 1:]], axis=1)
            pt, ph, pw = self.pipe.info.transformer_configs[0].patch_size
            grid = (latents.shape[1] // pt, latents.shape[2] // ph, latents.shape[3] // pw)
            per_frame = jnp.where(jnp.arange(grid[0]) == 0, 0.0, t)
            per_token = jnp.broadcast_to(per_frame[:, None, None], grid).reshape(-1)  # frame-major
            timestep = jnp.broadcast_to(per_token, (b, per_token.shape[0]))
        else:  # text-to-video: with expand_timesteps the per-token timesteps are all equal to it
            x, timestep = latents, jnp.broadcast_to(t, (b,))
        x, timestep, image = cfg_pair(do_cfg, x.astype(self.pipe.dtype), timestep, cond.get("image"))
        return x, timestep, context, image

    def expert_plan(self, state) -> list[int]:
        return expert_for_steps(
            np.asarray(state.timesteps), self.boundary_ratio, self.pipe.scheduler.config.num_train_timesteps
        )

    def final_latents(self, call, latents, cond) -> jax.Array:
        if "first_frame" not in cond:
            return latents
        return jnp.concatenate([cond["first_frame"].astype(latents.dtype), latents[:, 1:]], axis=1)


class WanImageToVideoHooks(WanHooks):
    """The hooks of :class:`WanImageToVideoPipeline`: Wan's, the image-to-video keywords and their
    checks (SkyReels-V2's image-to-video class builds on them too)."""

    pipeline_name = "WanImageToVideoPipeline"
    task = "i2v"
    call_options = WAN_I2V_OPTIONS

    @classmethod
    def check_family_call(cls, info, call) -> None:
        """The Wan checks, then :func:`check_image_to_video_call`."""
        super().check_family_call(info, call)
        check_image_to_video_call(info, call)


class WanPipeline(VideoPipeline):
    """Wan text-to-video, and image-to-video on TI2V-5B (``image=``) (reference:
    ``diffusers.WanPipeline``). Build with :meth:`from_pretrained` or :func:`vidax.load_pipeline`."""

    family = WanHooks
    #: The CLIP image encoder (Wan2.1 I2V checkpoints), else None.
    image_encoder = None


class WanImageToVideoPipeline(VideoPipeline):
    """Wan image-to-video (reference: ``diffusers.WanImageToVideoPipeline``): ``pipe(image, prompt, ...)``.

    ``image``: the first frame, a PIL image or uint8 array (H, W, 3) (see
    :func:`vidax.io.image.load_image`), resized to exactly height x width (Lanczos, no crop) for
    the VAE; the CLIP encoder (Wan2.1 I2V) sees it through its own resize and center crop.
    ``last_image`` (same types): the last frame, for a video from the first to the last
    (diffusers' ``last_image``): it enters the VAE condition (frame ``num_frames - 1``) and its
    mask on every 36-channel checkpoint, and the CLIP features next to the first image's on
    Wan2.1 FLF2V (a transformer with ``pos_embed_seq_len``, which needs it); Wan2.1 I2V (CLIP
    features of one image) refuses it, as diffusers fails there; TI2V-5B ignores it with a
    warning, as diffusers does.
    ``latents`` has the VAE's z_dim channels. (With CLIP features, diffusers repeats them per
    prompt only and fails for ``num_videos_per_prompt > 1``; vidax repeats them for every video.)
    """

    family = WanImageToVideoHooks
    image_encoder = None
    __call__ = image_first_call

    def encode_image(self, image: Any) -> jax.Array:
        """diffusers' ``encode_image``: the CLIP features float32 (N, L_img, D_img) of N images
        (:meth:`WanHooks.encode_image`)."""
        return self.hooks.encode_image(image)


def check_image_to_video_call(info: WanInfo, call) -> None:
    """``last_image`` and ``image_embeds`` against the checkpoint (Wan's and SkyReels-V2's image-to-video).

    Raises:
        InputError: ``last_image`` not one image (PIL or uint8 (H, W[, 3|4])), with
            ``num_frames`` 1, or on a Wan2.1 I2V checkpoint whose transformer takes one
            image's CLIP features (no ``pos_embed_seq_len``) and no ``image_embeds``; an
            FLF2V checkpoint without ``last_image`` or ``image_embeds``; ``image_embeds`` of
            another shape than the checkpoint's transformer takes.
    """
    cfg = info.transformer_configs[0]
    pairs = cfg.pos_embed_seq_len is not None  # FLF2V: CLIP features of two images per sample
    root = info.checkpoint.root
    given = call.extra.get("image_embeds")
    last = call.extra.get("last_image")
    if last is not None:
        to_rgb_image(
            one_image(last, "the Wan pipelines take", "last_image", list_of_one=True, what="last frame"),
            "last_image",
        )
        if info.expand_timesteps:
            logger.warning(
                "%s is ignored by %s (TI2V-5B: the image is the first latent frame and no other is "
                "conditioned), as diffusers' WanImageToVideoPipeline ignores it",
                Arg("last_image"),
                root,
            )
        elif call.num_frames < 2:
            raise InputError(
                Arg("last_image"),
                " needs a video of at least 2 frames (the first and the last differ), got ",
                Arg("num_frames", call.num_frames),
            )
        elif info.has_image_encoder and not pairs and given is None:
            raise InputError(
                Arg("last_image"),
                f" is not taken by {root}: its transformer takes the CLIP features of one image "
                f"(no pos_embed_seq_len in {info.checkpoint.config_file('transformer')}; the first-and-last-frame "
                "checkpoints, Wan2.1 FLF2V, have it), and diffusers' WanImageToVideoPipeline fails on this call too",
            )
    elif pairs and given is None:
        raise InputError(
            f"{root} is a first-and-last-frame checkpoint (pos_embed_seq_len={cfg.pos_embed_seq_len} "
            "in its transformer: CLIP features of two images): ",
            Arg("last_image"),
            " is required (the last frame: a PIL image or a uint8 (H, W, 3) array)",
        )
    if given is not None:
        from vidax.pipelines.base import finite_array

        features = finite_array("image_embeds", given)
        if features.ndim == 2 and not pairs:  # (L_img, D_img): diffusers' repeat(batch, 1, 1) adds the axis
            features = features[None]
        n = 2 if pairs else 1
        rows = (n, n * call.batch)
        tokens = cfg.pos_embed_seq_len // 2 if pairs else None
        if (
            features.ndim != 3
            or features.shape[0] not in rows
            or (info.has_image_encoder and features.shape[2] != cfg.image_dim)
            or (tokens is not None and features.shape[1] != tokens)
        ):
            width = cfg.image_dim if info.has_image_encoder else "width"
            raise InputError(
                Arg("image_embeds"),
                f" has shape {tuple(features.shape)}; diffusers' layout is "
                f"({' or '.join(map(str, dict.fromkeys(rows)))}, "
                f"{tokens if tokens is not None else 'image tokens'}, {width})"
                + (" (the first and the last image of each video)" if pairs else ""),
            )


def clip_processor_config(ckpt: Checkpoint) -> dict:
    """The CLIP image preprocessing settings of ``image_processor/``: its
    ``preprocessor_config.json`` (a ``CLIPImageProcessor``, or a ``CLIPProcessor`` written by
    transformers 4), else the ``image_processor`` entry of its ``processor_config.json`` (a
    ``CLIPProcessor`` written by transformers 5: SkyReels-V2 I2V saved with diffusers 0.42.1).

    Raises:
        CheckpointError: neither file holds them.
    """
    import os

    from vidax.config import read_json_object

    if ckpt.config_files.get("image_processor", "").endswith("preprocessor_config.json"):
        return dict(ckpt.config("image_processor"))
    folder = ckpt.folder("image_processor")
    processor = os.path.join(folder, "processor_config.json")
    nested = read_json_object(processor, CheckpointError).get("image_processor") if os.path.isfile(processor) else None
    if not isinstance(nested, dict):
        raise CheckpointError(
            f"{folder} has no preprocessor_config.json, nor a processor_config.json with an image_processor entry "
            "(the CLIP image preprocessing)"
        )
    return dict(nested)


def _one(image: Any) -> Any:
    """``image``, or the image of a list of one (diffusers' processors take a list of images)."""
    return image[0] if isinstance(image, (list, tuple)) and len(image) == 1 else image


def wan_model_size(cfg: Any, latent_shape: tuple[int, ...], vae: Any, **extra: Any) -> ModelSize:
    """The :class:`~vidax.pipelines.base.ModelSize` of a Wan-layout transformer (``cfg``: its
    ``patch_size``, ``inner_dim``, ``ffn_dim``, ``num_layers``) on latents of ``latent_shape``
    ``(B, C, T, H, W)``: one token per patch, and the Wan VAE's decode chunk
    (:func:`wan_vae_decode_size`); ``extra``: further fields (``num_heads``)."""
    _, _, t, h, w = latent_shape
    pt, ph, pw = cfg.patch_size
    return ModelSize(
        tokens=(t // pt) * (h // ph) * (w // pw),
        hidden_size=cfg.inner_dim,
        ffn_dim=cfg.ffn_dim,
        num_layers=cfg.num_layers,
        **extra,
        **wan_vae_decode_size(vae),
    )


def wan_vae_decode_size(vae) -> dict:
    """The Wan VAE's decode chunk for :class:`~vidax.pipelines.base.ModelSize`: one latent frame
    (``temporal_compression`` video frames) at the decoder's last level, and its default decode
    tile (:class:`~vidax.models.wan.vae.WanTiling`). The last level is ``(decoder_base_dim or
    base_dim) x dim_mult[0]`` channels at ``1 / patch`` of the pixels a side (Wan2.2's VAE folds
    2 x 2 pixels into channels): counted per pixel as that width over ``patch ** 2``. The cache
    the decode carries from chunk to chunk (:func:`~vidax.models.wan.vae.decode_cache_bytes_per_latent_pixel`)
    is counted per video pixel.

    The decode's largest program is, by the TPU compiler's temporaries for one v5e: for the Wan2.1
    VAE (no patch) a chunk after the first, whose causal convolutions put the ``CACHE_T`` cached
    frames before its own (8.51 GiB at 480 x 832, the first chunk's 5.05): counted as
    ``temporal_compression + CACHE_T`` frames; for the Wan2.2 VAE the first chunk's (7.17 GiB at
    720 x 1280, a later one's 6.37): ``temporal_compression`` frames."""
    from vidax.models.wan.vae import CACHE_T, WanTiling, decode_cache_bytes_per_latent_pixel

    return dict(
        decode_state_bytes_per_pixel=decode_cache_bytes_per_latent_pixel(vae) / vae.spatial_compression**2,
        decode_frames=vae.temporal_compression + (CACHE_T if vae.patch == 1 else 0),
        decode_channels=max(1, (vae.decoder_base_dim or vae.base_dim) * vae.dim_mult[0] // vae.patch**2),
        decode_tile=WanTiling().tile_sample_min_height,
        decode_tile_stride=WanTiling().tile_sample_stride_height,
    )
