"""HunyuanVideo 1.5 text-to-video and image-to-video: the hooks of
:class:`~vidax.pipelines.base.VideoPipeline`.

Reference (diffusers 0.42.1): ``HunyuanVideo15Pipeline`` (``pipeline_hunyuan_video1_5.py``) and
``HunyuanVideo15ImageToVideoPipeline`` (``pipeline_hunyuan_video1_5_image2video.py``; what it
adds is in :class:`HunyuanVideo15ImageToVideoPipeline`'s docstring).

Text (:mod:`vidax.models.hunyuan_video15.text`): the Qwen2.5-VL states of the chat-templated
prompt, ``max_sequence_length`` (the reference's ``tokenizer_max_length``, 1000) tokens after the
``crop_start`` (108) template tokens, with their mask; the byT5 states of the quoted text (256
tokens; zeros and an all-zero mask for a prompt without quoted text) with their mask. The negative
branch encodes ``negative_prompt`` (``""`` when not given) the same way.

Guidance: the checkpoint's ``guider`` (``ClassifierFreeGuidance``): ``guidance_scale`` defaults
to the guider's (6.0 for the released T2V, 1.0 for the CFG-distilled ones), a call's
``guidance_scale`` replaces it; CFG runs unless the scale is 1 (0 with
``use_original_formulation``) or the guider is disabled, as ``_is_cfg_enabled``; the reference
runs the conditional and unconditional passes as separate transformer calls (vidax batches them).
``guidance_rescale`` > 0 applies ``rescale_noise_cfg`` after the combination.

Steps: sigmas ``linspace(1, 0, N + 1)[:-1]`` (or the call's ``sigmas``) through the flow-match Euler scheduler with the
checkpoint's shift. The transformer takes ``[latents, zeros (C), zeros (1)]`` on channels (T2V's
condition latents and mask), the timestep in the latents' dtype, and all-zero SigLIP tokens
``(B, 729, image_embed_dim)``; ``timestep_r`` is not passed (the T2V reference never passes it).

Decode: ``latents / scaling_factor`` through the VAE (tiling as the reference's default: off).

vidax differences: the SigLIP zeros are made for every video (the reference makes
``batch_size`` of them, one per prompt, for ``batch_size x num_videos_per_prompt`` latents; not
checked against the reference with more than one video per prompt); in bfloat16 the latents, the Euler update and the timestep stay float32 (the
reference's are in the transformer dtype), as HunyuanVideo 1.0's pipeline in vidax.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.tokenizer import ByteTokenizer, TextTokenizer, Truncation
from vidax.errors import Arg, InputError
from vidax.io.image import one_image, to_rgb_image
from vidax.models.hunyuan_video.pipeline import (
    SIGMAS_OPTION,
    TEXT_ENCODERS,
    HunyuanVideoHooks,
    check_sigmas,
    first_frame_concat,
    steps_of_sigmas,
)
from vidax.models.hunyuan_video15.config import HunyuanVideo15Info, default_size, read_hunyuan_video15_checkpoint
from vidax.models.hunyuan_video15.text import CROP_START, GLYPH_MAX_LENGTH, encode_glyph_prompts, encode_text_prompts
from vidax.models.hunyuan_video15.vae import TILED_DECODE_SAMPLE_TILE
from vidax.pipelines.base import ModelSize, VideoPipeline, cfg_pair, image_first_call, prompt_texts, text_truncation
from vidax.pipelines.call import CallRule
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TRANSFORMER, VAE, ComponentTable
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.sampling import classifier_free_guidance, rescale_noise_cfg
from vidax.pipelines.spec import read_scheduler

logger = logging.getLogger("vidax.pipeline")

#: ``vision_num_semantic_tokens``: the SigLIP tokens the transformer takes (zeros for T2V).
IMAGE_TOKENS = 729

#: The components: both tokenizers, the Qwen2.5-VL and byT5 encoders (``text_encoder_dtype``,
#: None: the pipeline's dtype), the transformer, the VAE in ``vae_dtype`` (float32 by default);
#: image-to-video also the SigLIP ``image_encoder`` in the text encoders' dtype.
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer, "tokenizer_2": ByteTokenizer},
    weighted={"text_encoder": TEXT_ENCODERS, "text_encoder_2": TEXT_ENCODERS, "transformer": TRANSFORMER, "vae": VAE},
)
COMPONENTS_I2V = dataclasses.replace(COMPONENTS, weighted={**COMPONENTS.weighted, "image_encoder": TEXT_ENCODERS})


def _guider_call(family: Any, info: HunyuanVideo15Info, call: Any, keywords: Any) -> Any:
    """After the shared checks: ``sigmas`` (``num_inference_steps`` of them; their number when it
    is not given, :func:`~vidax.models.hunyuan_video.pipeline.steps_of_sigmas`); CFG runs by the
    guider's rule (``_is_cfg_enabled``).

    Raises:
        InputError: ``sigmas`` that are not valid.
    """
    call = check_sigmas(call, read_scheduler(family, info), HunyuanVideoHooks.schedule)
    g = info.guider_config
    off = 0.0 if g.use_original_formulation else 1.0
    cfg = bool(g.enabled) and not math.isclose(call.guidance_scale, off)
    if not cfg and "negative_prompt" in call.given:
        logger.warning(
            "%s has no effect: classifier-free guidance is off (%s, as the checkpoint's guider decides)",
            Arg("negative_prompt"),
            Arg("guidance_scale", call.guidance_scale),
        )
    return dataclasses.replace(call, cfg=cfg)


def _size_of_image(family: Any, info: HunyuanVideo15Info, keywords: dict) -> dict:
    """Before the shared checks of image-to-video: ``image`` required (one image), ``height`` /
    ``width`` refused, the size taken from the image (:meth:`HunyuanVideo15ImageToVideoHooks.video_size`).

    Raises:
        InputError: no ``image``, several, or a malformed one; ``height`` or ``width`` given.
    """
    for name in ("height", "width"):
        if keywords.get(name) is not None:
            raise InputError(
                f"{family.pipeline_name} takes no ",
                Arg(name, keywords[name]),
                ": the video's size is the "
                f"target_size={info.transformer_config.target_size} bucket nearest the image's aspect "
                "ratio (as diffusers' HunyuanVideo15ImageToVideoPipeline); crop the ",
                Arg("image"),
                " to choose another",
            )
    image = keywords.get("image")
    one_image(image, f"{family.pipeline_name} takes")
    size = {} if image is None else dict(zip(("height", "width"), family.video_size(info, image)))
    return {**keywords, **size}


def _size_not_given(family: Any, info: HunyuanVideo15Info, call: Any, keywords: Any) -> Any:
    """After the shared checks of image-to-video: the size taken from the image is not counted as given."""
    return dataclasses.replace(call, given=call.given - {"height", "width"})


class HunyuanVideo15Hooks(FamilyHooks):
    """The HunyuanVideo 1.5 family's hooks, in one place: what :class:`HunyuanVideo15Pipeline` and
    :class:`HunyuanVideo15ImageToVideoPipeline` share (:class:`HunyuanVideo15Pipeline`'s own; the image-to-video hooks subclass them)."""

    pipeline_name = "HunyuanVideo15Pipeline"

    separate_cfg_passes = True  # the guider calls the transformer once per branch
    cache_block_metadata = False  # diffusers' TransformerBlockRegistry lacks its blocks: TaylorSeer only
    call_options = (SIGMAS_OPTION,)
    unsupported_call_args = ("guidance_scale_2",)
    prompt_embeds_args = ("prompt_embeds", "prompt_embeds_mask", "prompt_embeds_2", "prompt_embeds_mask_2")
    prompt_mask_dtype = np.int32
    scheduler_classes = ("FlowMatchEulerDiscreteScheduler",)
    call_rules = (CallRule(steps_of_sigmas, _guider_call),)
    stageable = ("text_encoder", "text_encoder_2", "vae")
    latents_layout = "(batch, latent_channels, (num_frames - 1) // 4 + 1, height / 16, width / 16)"
    crop_start: int = CROP_START
    glyph_max_length: int = GLYPH_MAX_LENGTH

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> HunyuanVideo15Info:
        return read_hunyuan_video15_checkpoint(checkpoint)

    resolve_num_frames = HunyuanVideoHooks.resolve_num_frames  # the same (F - 1) // 4 * 4 + 1 rule

    @classmethod
    def class_for_task(cls, task: str) -> type:
        """``"i2v"`` -> :class:`HunyuanVideo15ImageToVideoPipeline`, else the text-to-video class."""
        return HunyuanVideo15ImageToVideoPipeline if task == "i2v" else HunyuanVideo15Pipeline

    @classmethod
    def model_size(cls, info: HunyuanVideo15Info, call) -> ModelSize:
        """Video patches of one sample plus its text, glyph and image tokens (one joint sequence)."""
        cfg = info.transformer_config
        _, _, t, h, w = cls.latent_shape(info, call)
        video = (t // cfg.patch_size_t) * (h // cfg.patch_size) * (w // cfg.patch_size)
        return ModelSize(
            tokens=video + call.max_sequence_length + cls.glyph_max_length + IMAGE_TOKENS,
            hidden_size=cfg.inner_dim,
            ffn_dim=cfg.mlp_dim,
            num_layers=cfg.num_layers,
            decode_frames=call.num_frames,  # no temporal tiles: the whole clip decodes at once
            decode_tile=TILED_DECODE_SAMPLE_TILE,
            # the reference's overlap 0.25 of 8-latent tiles: one every int(8 * 0.75) latents
            decode_tile_stride=int(TILED_DECODE_SAMPLE_TILE // info.vae_config.spatial_compression * 0.75)
            * info.vae_config.spatial_compression,
            decode_tile_keeps_factor=True,
        )

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls,
        info: HunyuanVideo15Info,
        *,
        dtype,
        mesh,
        offload,
        staging,
        offload_experts=True,
        vae_dtype: Any = jnp.float32,
        text_encoder_dtype: Any = None,
    ) -> dict[str, Any]:
        """Both tokenizers, the Qwen2.5-VL and byT5 encoders (``text_encoder_dtype``, default
        ``dtype``; image-to-video also the SigLIP ``image_encoder``), the transformer, the VAE (``vae_dtype``, float32 by default), the scheduler.
        Every checkpoint is checked against its model before the first weight is read."""
        options = dict(vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype)
        if cls.task != "i2v":
            return COMPONENTS.load(info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, **options)
        # the SigLIP tower in the text encoders' dtype, and its processor's settings
        modules = COMPONENTS_I2V.load(info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, **options)
        return modules | {"feature_extractor_config": dict(info.checkpoint.config("feature_extractor"))}

    # ------------------------------------------------------------------ text
    def encode_call(self, call) -> tuple:
        """``(text (B', L1, D), mask (B', L1), glyph (B', L2, D2), glyph mask (B', L2))`` of the
        prompts, then the negatives when CFG runs; each encoder on the device only while it runs."""
        texts = prompt_texts(call)
        text, mask = encode_with(
            self.pipe, "text_encoder", self.text_states, texts, call.max_sequence_length, text_truncation(call)
        )
        glyph, glyph_mask = encode_with(self.pipe, "text_encoder_2", self.glyph_states, texts)
        return text, jnp.asarray(mask), glyph, jnp.asarray(glyph_mask)

    def encode_text(self, texts, max_sequence_length, truncation=None) -> tuple:
        """``encode_prompt``'s four arrays for ``texts`` (see :meth:`encode_call`)."""
        text, mask = self.text_states(texts, max_sequence_length, truncation)
        glyph, glyph_mask = self.glyph_states(texts)
        return text, jnp.asarray(mask), glyph, jnp.asarray(glyph_mask)

    def text_states(self, texts: list[str], max_sequence_length: int, truncation: Truncation | None = None):
        """``_get_mllm_prompt_embeds`` (:func:`~vidax.models.hunyuan_video15.text.encode_text_prompts`)."""
        return encode_text_prompts(
            self.pipe.text_encoder,
            self.pipe.tokenizer,
            texts,
            max_length=max_sequence_length,
            crop_start=self.crop_start,
            truncation=truncation,
        )

    def glyph_states(self, texts: list[str]):
        """``_get_byt5_prompt_embeds`` (:func:`~vidax.models.hunyuan_video15.text.encode_glyph_prompts`)."""
        return encode_glyph_prompts(
            self.pipe.text_encoder_2, self.pipe.tokenizer_2, texts, max_length=self.glyph_max_length
        )

    # ------------------------------------------------------------------ steps
    def set_timesteps(self, call, latents):
        return HunyuanVideoHooks.schedule(self.pipe.scheduler, call, latents.shape)

    def model_input(self, latents: jax.Array, cond: dict) -> jax.Array:
        """``[latents, condition latents (zeros), mask (zeros)]`` on channels (T2V)."""
        zeros = jnp.zeros(latents.shape[:-1] + (latents.shape[-1] + 1,), latents.dtype)
        return jnp.concatenate([latents, zeros], axis=-1)

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(hidden_states, timestep, encoder_hidden_states, encoder_attention_mask,
        encoder_hidden_states_2, encoder_attention_mask_2, image_embeds)`` of the transformer;
        cond / uncond batched under CFG."""
        text, mask, glyph, glyph_mask = inputs.embeds
        b = latents.shape[0]
        x = self.model_input(latents, inputs.cond).astype(self.pipe.dtype)
        timestep = jnp.broadcast_to(state.timestep.astype(latents.dtype), (b,))
        x, timestep = cfg_pair(do_cfg, x, timestep)
        image = jnp.zeros(
            (x.shape[0], IMAGE_TOKENS, self.pipe.info.transformer_config.image_embed_dim), self.pipe.dtype
        )
        return x, timestep, text, mask, glyph, glyph_mask, image

    def guide(self, pred, state, inputs):
        """``ClassifierFreeGuidance.forward`` of the checkpoint's guider on the (2B, ...) batch."""
        g = self.pipe.info.guider_config
        weight = self.guidance(self.step_state(state), inputs)
        cond, uncond = jnp.split(pred, 2, axis=0)
        if g.use_original_formulation:
            guided = cond + weight.astype(cond.dtype) * (cond - uncond)
        else:
            guided = classifier_free_guidance(pred, weight)
        if g.guidance_rescale > 0.0:
            guided = rescale_noise_cfg(guided, cond, g.guidance_rescale)
        return guided


class HunyuanVideo15Pipeline(VideoPipeline):
    """HunyuanVideo 1.5 text-to-video (reference: ``diffusers.HunyuanVideo15Pipeline``).

    ``guidance_scale`` is the ``ClassifierFreeGuidance`` weight (default: the checkpoint's guider);
    ``max_sequence_length`` the Qwen2.5-VL tokens after the template (default 1000); call keyword
    beyond the shared ones: ``sigmas`` (custom, unshifted noise levels, one per step). Build with
    :meth:`from_pretrained` or :func:`vidax.load_pipeline`.

    Attributes:
        crop_start: template tokens cut from the text states (the reference's
            ``prompt_template_encode_start_idx``, 108 for the released tokenizer).
        glyph_max_length: byT5 tokens (``tokenizer_2_max_length``, 256).
    """

    family = HunyuanVideo15Hooks


class HunyuanVideo15ImageToVideoHooks(HunyuanVideo15Hooks):
    """The hooks of :class:`HunyuanVideo15ImageToVideoPipeline`."""

    pipeline_name = "HunyuanVideo15ImageToVideoPipeline"

    task = "i2v"
    stageable = HunyuanVideo15Hooks.stageable + ("image_encoder",)
    call_rules = (CallRule(_size_of_image, _size_not_given), *HunyuanVideo15Hooks.call_rules)

    @classmethod
    def video_size(cls, info: HunyuanVideo15Info, image: Any) -> tuple[int, int]:
        """``(height, width)`` of the video for ``image`` (PIL or uint8 array):
        ``calculate_default_height_width(image height, image width, target_size)``.

        Raises:
            InputError: a malformed image, or one whose bucket the model cannot take.
        """
        rgb = to_rgb_image(image)
        tr = info.transformer_config
        height, width = default_size(tr.target_size, info.vae_config.spatial_compression, (rgb.width, rgb.height))
        mh, mw = info.size_multiple
        if height % mh or width % mw:
            raise InputError(
                Arg("image"),
                f" ({rgb.width}x{rgb.height}) maps to the {width}x{height} bucket of "
                f"target_size={tr.target_size}, which is not a multiple of {mh}x{mw} ({info.size_reason})",
            )
        return height, width

    def condition(self, call, stats) -> dict:
        """``image`` (B, 1, h, w, C) float32: the VAE mode of the cropped image times the scaling
        factor; ``image_embeds`` (B, L3, image_embed_dim): its SigLIP ``last_hidden_state``."""
        from vidax.encoders.siglip import siglip_preprocess
        from vidax.io.image import resize_and_crop, vae_image_preprocess

        cond = super().condition(call, stats)
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            image = resize_and_crop(call.image, call.height, call.width)
            pixels = siglip_preprocess(image, self.pipe.feature_extractor_config, do_resize=True, do_convert_rgb=True)
            tokens = encode_with(
                self.pipe, "image_encoder", self.pipe.image_encoder, jnp.asarray(pixels, jnp.float32)[None]
            )
            cond["image_embeds"] = jnp.repeat(tokens, call.batch, axis=0).astype(self.pipe.dtype)
            video = vae_image_preprocess(image, call.height, call.width)[None, None]  # already that size: no resize
            mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, video)
            cond["image"] = jnp.repeat(self.pipe.vae.normalize_latents(mean), call.batch, axis=0)
        stats.sample_memory()
        return cond

    def model_input(self, latents: jax.Array, cond: dict) -> jax.Array:
        """``[latents, image latents on frame 0 (zeros after), mask (1 on frame 0)]`` on channels."""
        return first_frame_concat(latents, cond["image"])

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """As :meth:`HunyuanVideo15Hooks.model_args` with the image's SigLIP tokens (the same
        for both branches) and, with ``use_meanflow``, ``timestep_r``: the next step's timestep,
        0 at the last step."""
        x, timestep, text, mask, glyph, glyph_mask, _ = super().model_args(latents, state, inputs, do_cfg)
        tokens = inputs.cond["image_embeds"]
        image = jnp.tile(tokens, (x.shape[0] // tokens.shape[0], 1, 1))
        if not self.pipe.info.transformer_config.use_meanflow:
            return x, timestep, text, mask, glyph, glyph_mask, image
        s = self.step_state(state)
        following = jnp.append(s.timesteps.astype(jnp.float32), jnp.float32(0.0))[s.step_index + 1]
        return x, timestep, text, mask, glyph, glyph_mask, image, jnp.broadcast_to(following, (x.shape[0],))


class HunyuanVideo15ImageToVideoPipeline(VideoPipeline):
    """HunyuanVideo 1.5 image-to-video (reference: ``diffusers.HunyuanVideo15ImageToVideoPipeline``):
    ``pipe(image, prompt, ...)``.

    The video's size is the reference's: the ``target_size`` bucket (:func:`default_size`) nearest
    the image's aspect ratio; ``height`` / ``width`` are refused. The image is scaled to cover
    that size and centre-cropped (:func:`vidax.io.image.resize_and_crop`, Lanczos); the VAE
    encodes it (the posterior's mode times ``scaling_factor``) for the condition latents on frame
    0 with mask 1 (``prepare_cond_latents_and_mask``: ``[latents, condition, mask]`` on channels),
    and SigLIP encodes the cropped image through its processor (``do_resize=True,
    do_convert_rgb=True``) for the ``image_embeds`` of both guidance branches. With
    ``use_meanflow`` (the step-distilled checkpoint) the transformer also takes ``timestep_r``, the
    next step's timestep (0 at the last step). Text, guidance and steps as
    :class:`HunyuanVideo15Pipeline`.

    vidax differences: ``timestep_r``, like the timestep, stays float32 in bfloat16 (the
    reference casts it to the latents' dtype).
    """

    family = HunyuanVideo15ImageToVideoHooks
    image_encoder: Any = None
    feature_extractor_config: Any = None
    __call__ = image_first_call
