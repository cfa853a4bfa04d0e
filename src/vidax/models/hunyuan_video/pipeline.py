"""HunyuanVideo 1.0 pipelines: the hooks of :class:`~vidax.pipelines.base.VideoPipeline`.

References (diffusers 0.42.1): ``HunyuanVideoPipeline`` (``pipeline_hunyuan_video.py``) and
``HunyuanVideoImageToVideoPipeline`` (``pipeline_hunyuan_video_image2video.py``).

Text (both): the prompt in the Llama prompt template, tokenized to ``max_sequence_length +
crop_start`` tokens (padding to it, truncation), hidden state ``-(2 + 1)`` of the text encoder,
embeddings and mask both cropped by ``crop_start`` (95 for T2V); the pooled output of the CLIP
text tower (``text_encoder_2``, 77 tokens, no mask) is ``pooled_projections``.

Image-to-video text (LLaVA): the I2V template holds ``<image>`` at token 5; the token ids are
expanded to ``image_emb_len`` (576) image tokens at positions 5..581, the mask of the expanded
sequence is ``ids != text_encoder.config.pad_token_id``, and the LLaVA model replaces the image
tokens' embeddings by the image features of the CLIP-preprocessed image. The hidden states are then
cut as the reference does: the text from ``crop_start - 1 + 576`` (``crop_start`` 103) without the
4 tokens before the assistant header's end (``<|eot_id|><|start_header_id|>assistant
<|end_header_id|>``; found per prompt from its last ``<|end_header_id|>``), with the mask cut at
the same (unexpanded) positions; the image tokens ``[5:581]`` keep every ``image_embed_interleave``-th
(2 for ``latent_concat``, 4 for ``token_replace``) and go first with mask 1. The negative prompt
(true CFG) is encoded with a black image of ``width x height`` and interleave 2, as the reference.

Guidance: ``guidance_scale`` is embedded (``guidance = guidance_scale * 1000`` rounded to the
transformer dtype, as the reference) when the transformer has a guidance embedder; true CFG runs
when ``true_cfg_scale > 1`` and ``negative_prompt`` is given (not None), combining
``neg + true_cfg_scale * (pos - neg)`` with pos and neg as one batch. Sigmas
``linspace(1, 0, N + 1)[:-1]`` (or ``sigmas=``) through the flow-match Euler scheduler with the
checkpoint's shift.

Image-to-video latents: the VAE mode of the image (resized to height x width) times the scaling
factor, repeated over the latent frames, mixed into the noise as ``noise * 0.999 + image * 0.001``.
``latent_concat``: the transformer takes ``[latents, image latents (frame 0 only), mask (frame 0
= 1)]`` on channels and the decoded video drops its first 4 frames (``output_type="latent"``
drops the first latent frame). ``token_replace``: the first latent frame is the image latent in
every model input and after every step.

Decode: ``latents / scaling_factor`` through the VAE as the reference calls it (framewise decode
on, spatial tiling off: ``AutoencoderKLHunyuanVideo``'s defaults).

vidax differences, each where the reference cannot run: prompts of the I2V pipeline may be a
batch (the reference takes one image for one prompt: its LLaVA call fails for more), and the
image conditioning is repeated for every video. In bfloat16 the latents stay float32 (the Euler
update in fp32, as the original HunyuanVideo code); the reference's T2V scheduler step returns
the bf16 prediction's dtype, so its latents, and the timestep it feeds, are bf16 from the second
step on (docs/architecture.md "Precision" has the measured difference).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.clip import clip_preprocess, encode_clip_text
from vidax.encoders.tokenizer import TextTokenizer, Truncation
from vidax.errors import Arg, CheckpointError, InputError
from vidax.io.image import one_image, to_rgb_image, vae_image_preprocess
from vidax.models.hunyuan_video.config import HunyuanVideoInfo, read_hunyuan_video_checkpoint
from vidax.models.hunyuan_video.vae import HunyuanVideoTiling
from vidax.pipelines.base import ModelSize, VideoPipeline, cfg_pair, image_first_call, prompt_texts, text_truncation
from vidax.pipelines.call import CallRule
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TRANSFORMER, VAE, ComponentTable, Weighted
from vidax.pipelines.options import OBJECT, CallOption
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.spec import read_scheduler
from vidax.pipelines.step_inputs import StepInputs

logger = logging.getLogger("vidax.pipeline")

#: ``DEFAULT_PROMPT_TEMPLATE`` of ``pipeline_hunyuan_video.py`` (verbatim).
T2V_PROMPT_TEMPLATE = {
    "template": (
        "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
        "1. The main content and theme of the video."
        "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
        "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
        "4. background environment, light, style and atmosphere."
        "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    ),
    "crop_start": 95,
}

#: ``DEFAULT_PROMPT_TEMPLATE`` of ``pipeline_hunyuan_video_image2video.py`` (verbatim).
I2V_PROMPT_TEMPLATE = {
    "template": (
        "<|start_header_id|>system<|end_header_id|>\n\n<image>\nDescribe the video by detailing the following aspects according to the reference image: "
        "1. The main content and theme of the video."
        "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
        "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
        "4. background environment, light, style and atmosphere."
        "5. camera angles, movements, and transitions used in the video:<|eot_id|>\n\n"
        "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    ),
    "crop_start": 103,
    "image_emb_start": 5,
    "image_emb_end": 581,
    "image_emb_len": 576,
}

#: ``_get_llama_prompt_embeds(num_hidden_layers_to_skip=2)``: hidden state ``-(2 + 1)``.
LLAMA_OUTPUT_LAYER = -3
#: ``_get_clip_prompt_embeds(max_sequence_length=77)``.
CLIP_MAX_LENGTH = 77
#: Decoded frames the ``latent_concat`` I2V reference drops from the front (``video[:, :, 4:]``).
LATENT_CONCAT_DROPPED = 4
#: ``prepare_latents``'s ``t = 0.999``: the I2V initial latents are ``noise * t + image * (1 - t)``.
IMAGE_NOISE_MIX = 0.999
#: The I2V negative prompt's ``image_embed_interleave`` (``encode_prompt``'s default: the
#: reference does not pass its own value for the negative prompt).
NEGATIVE_INTERLEAVE = 2


def _interleave_default(image_condition_type: str | None) -> int:
    """``image_embed_interleave`` when the call gives none (the reference's rule)."""
    return {"latent_concat": 2, "token_replace": 4}.get(image_condition_type, 1)


def expand_image_tokens(
    input_ids: np.ndarray,
    image_token_index: int,
    image_emb_len: int,
    image_emb_start: int,
    image_emb_end: int,
    pad_token_id: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``_expand_input_ids_with_image_tokens`` of the I2V reference, in numpy: each image token
    becomes ``image_emb_len`` tokens; positions ``[image_emb_start, image_emb_end)`` are set to the
    image token; the mask is ``expanded != pad_token_id``.

    Args:
        input_ids: (B, L) int token ids.

    Returns:
        ``(expanded ids (B, L'), mask (B, L'))`` int32, ``L' = L + max_b(#image tokens) (E - 1)``.
    """
    ids = np.asarray(input_ids)
    special = ids == image_token_index
    length = ids.shape[1] + int(special.sum(axis=1).max(initial=0)) * (image_emb_len - 1)
    positions = np.cumsum(special * (image_emb_len - 1) + 1, axis=-1) - 1
    b, j = np.nonzero(~special)
    out = np.full((ids.shape[0], length), pad_token_id, ids.dtype)
    out[b, positions[b, j]] = ids[b, j]
    out[:, image_emb_start:image_emb_end] = image_token_index
    return out.astype(np.int32), (out != pad_token_id).astype(np.int32)


def checked_prompt_template(value: Any, default: dict) -> dict:
    """The call's ``prompt_template`` (None: ``default``, the pipeline's) as the encoders read it:
    ``template``, ``crop_start`` and, from ``value`` or as diffusers' I2V defaults them, the
    image-token keys of ``default`` (other keys are ignored, as diffusers ignores them).

    Raises:
        InputError: not a dict; ``template`` not a string with one ``{}`` for the prompt (other
            braces fail diffusers' ``str.format``); ``crop_start`` missing or not an int >= 0; an
            image-token key not an int >= 0 (a missing ``{}`` or ``crop_start``: the reason of
            :data:`~vidax.pipelines.diffusers_keywords.REFUSED_VALUES`).
    """
    from vidax.pipelines.diffusers_keywords import refused_value_reason

    if value is None:
        return default
    if not isinstance(value, dict):
        raise InputError(
            Arg("prompt_template", value),
            " must be a dict with 'template' and 'crop_start', as diffusers' DEFAULT_PROMPT_TEMPLATE",
        )
    template = value.get("template")
    try:
        ok = isinstance(template, str) and template.count("{}") == 1 and template.format("") is not None
    except (IndexError, KeyError, ValueError):
        ok = False
    if not ok:
        raise InputError(
            Arg("prompt_template['template']", template),
            " must be a string with one '{}' where "
            "the prompt goes and no other braces; " + refused_value_reason("prompt_template"),
        )
    out = {"template": template}
    for key in ("crop_start",) + tuple(k for k in default if k.startswith("image_emb")):
        v = value.get(key, default[key] if key != "crop_start" else None)
        if v is None and key == "crop_start":
            raise InputError(
                Arg("prompt_template", value), " has no 'crop_start'; " + refused_value_reason("prompt_template")
            )
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InputError(Arg(f"prompt_template['{key}']", v), " must be an integer >= 0")
        out[key] = v
    return out


def i2v_crop_indices(
    input_ids: np.ndarray, end_header_id: int, crop_start: int, image_emb_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """The I2V reference's cut of the text part, as gather indices per prompt.

    For prompt ``b`` with its last ``<|end_header_id|>`` at ``e`` (the assistant header; where the
    prompt was truncated and only the system and user headers remain, ``e = L - 1``, the
    reference's fallback), ``a = e + 1``: the hidden states are taken at expanded positions
    ``[crop_start - 1 + E, a - 5 + E) + [a - 1 + E, L + E - 1)`` and the mask at
    ``[crop_start, a - 4) + [a, L)``, E = ``image_emb_len``.

    Returns:
        ``(hidden-state indices (B, n), mask indices (B, n))``, n = ``L - crop_start - 4``.

    Raises:
        InputError: a prompt whose tokens hold fewer than 2 ``<|end_header_id|>`` (the template's
            system and user headers): ``max_sequence_length`` too small for the template.
    """
    ids = np.asarray(input_ids)
    n_tok = ids.shape[1]
    hid, msk = [], []
    for row in ids:
        heads = np.nonzero(row == end_header_id)[0]
        if len(heads) < 2:
            raise InputError(
                "the prompt template's headers were cut off by truncation; ",
                Arg("max_sequence_length"),
                " is too small for HunyuanVideo's I2V template",
            )
        a = (n_tok - 1 if len(heads) == 2 else int(heads[-1])) + 1
        e = image_emb_len
        hid.append(np.concatenate([np.arange(crop_start - 1 + e, a - 5 + e), np.arange(a - 1 + e, n_tok - 1 + e)]))
        msk.append(np.concatenate([np.arange(crop_start, a - 4), np.arange(a, n_tok)]))
    return np.stack(hid).astype(np.int32), np.stack(msk).astype(np.int32)


#: The ``sigmas`` keyword of the HunyuanVideo pipelines (``retrieve_timesteps(sigmas=...)``).
SIGMAS_OPTION = CallOption("sigmas", OBJECT, "Custom, unshifted noise levels, one per step.")


def steps_of_sigmas(family: Any, info: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call keywords with ``num_inference_steps = len(sigmas)`` where ``sigmas`` is given
    without it (``retrieve_timesteps``: ``len(sigmas)`` steps); a
    :class:`~vidax.pipelines.call.CallRule`'s ``before``."""
    if (
        kwargs.get("sigmas") is not None
        and kwargs.get("num_inference_steps") is None
        and np.ndim(kwargs["sigmas"]) == 1
    ):
        return {**kwargs, "num_inference_steps": len(kwargs["sigmas"])}
    return kwargs


def check_sigmas(call: Any, scheduler: Any, schedule: Any) -> Any:
    """``call`` with its ``sigmas`` (if any) checked and made a tuple of floats, and the schedule
    ``schedule(scheduler, call)`` made once on the host (``scheduler``: the checkpoint's, built
    from its config), as the call's ``set_timesteps`` will make it.

    Raises:
        InputError: ``sigmas`` that are not ``num_inference_steps`` finite numbers.
    """
    extra = dict(call.extra)
    sigmas = extra.get("sigmas")
    if sigmas is not None:
        arr = np.asarray(sigmas, np.float64)
        if arr.ndim != 1 or len(arr) != call.num_inference_steps or not np.isfinite(arr).all():
            raise InputError(
                f"sigmas must be {call.num_inference_steps} finite numbers (one per step, "
                f"num_inference_steps={call.num_inference_steps}), got {sigmas!r:.200}"
            )
        extra["sigmas"] = tuple(float(x) for x in arr)
    call = dataclasses.replace(call, extra=extra)
    schedule(scheduler, call)
    return call


#: The text encoders' row (HunyuanVideo 1.0 and 1.5): ``text_encoder_dtype`` (None: the
#: pipeline's dtype), on the mesh, staged.
TEXT_ENCODERS = Weighted(dtype="text_encoder_dtype", none_is_dtype=True, mesh=True, staged=True)

#: The components: both tokenizers, the Llama (or LLaVA) and CLIP text encoders, the transformer,
#: the VAE in ``vae_dtype`` (float32 by default).
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer, "tokenizer_2": TextTokenizer},
    weighted={"text_encoder": TEXT_ENCODERS, "text_encoder_2": TEXT_ENCODERS, "transformer": TRANSFORMER, "vae": VAE},
)


def _hunyuan_video_call(family: Any, info: HunyuanVideoInfo, call: Any, keywords: Any) -> Any:
    """After the shared checks: ``sigmas`` (:func:`check_sigmas`), the prompt template and
    ``true_cfg_scale``; true CFG runs iff ``true_cfg_scale > 1`` and ``negative_prompt`` is not
    None (the reference's rule).

    Raises:
        InputError: a ``true_cfg_scale`` / ``sigmas`` / ``prompt_template`` that is not valid.
    """
    call = check_sigmas(call, read_scheduler(family, info), family.schedule)
    extra = dict(call.extra)
    extra["prompt_template"] = checked_prompt_template(extra.get("prompt_template"), family.prompt_template)
    scale = extra.get("true_cfg_scale", 1.0)  # a number >= 0 by its declaration
    extra["true_cfg_scale"] = float(scale)
    negative_prompt = keywords.get("negative_prompt")
    cfg = scale > 1.0 and negative_prompt is not None
    if scale > 1.0 and negative_prompt is None:
        logger.warning(
            "%s has no effect without %s (as in diffusers)", Arg("true_cfg_scale", scale), Arg("negative_prompt")
        )
    if cfg and call.guidance_scale > 1.0 and info.transformer_config.guidance_embeds and call.task == "i2v":
        logger.warning(
            "Both %s and %s are greater than 1.0: classifier-free guidance and embedded guidance are "
            "both applied (as the reference warns)",
            Arg("true_cfg_scale"),
            Arg("guidance_scale"),
        )
    return dataclasses.replace(call, extra=extra, cfg=cfg)


class HunyuanVideoHooks(FamilyHooks):
    """The HunyuanVideo family's hooks, in one place: what :class:`HunyuanVideoPipeline` and
    :class:`HunyuanVideoImageToVideoPipeline` share (:class:`HunyuanVideoPipeline`'s own; the image-to-video hooks subclass them)."""

    pipeline_name = "HunyuanVideoPipeline"
    call_rules = (CallRule(steps_of_sigmas, _hunyuan_video_call),)

    separate_cfg_passes = True  # diffusers calls the transformer for cond and uncond separately

    call_options = (
        CallOption(
            "true_cfg_scale",
            float,
            "True classifier-free guidance weight with the negative prompt (HunyuanVideo).",
            "1, off",
            low=0,
        ),
        SIGMAS_OPTION,
        CallOption(
            "prompt_2",
            str,
            "diffusers' prompt_2 (the CLIP text encoder's prompt): diffusers 0.42.1 encodes "
            "prompt with CLIP whatever prompt_2 says, so it changes nothing, as there.",
            "prompt",
            per_prompt=True,
            flag=False,
        ),
        CallOption(
            "negative_prompt_2",
            str,
            "diffusers' negative_prompt_2: unused by diffusers 0.42.1 (CLIP encodes "
            "negative_prompt), so it changes nothing, as there.",
            "negative_prompt",
            per_prompt=True,
            flag=False,
        ),
        CallOption(
            "prompt_template",
            OBJECT,
            "diffusers' prompt_template: a dict with 'template' (the text the "
            "Llama encoder sees, '{}' where the prompt goes) and 'crop_start' (template tokens dropped from "
            "the front of its output); I2V also 'image_emb_len' / 'image_emb_start' / 'image_emb_end'.",
            "the pipeline's DEFAULT_PROMPT_TEMPLATE",
        ),
    )
    unsupported_call_args = ("guidance_scale_2",)
    #: vidax's order of encode_call's arrays (diffusers' encode_prompt returns embeds, pooled, mask).
    prompt_embeds_args = ("prompt_embeds", "prompt_attention_mask", "pooled_prompt_embeds")
    prompt_mask_dtype = np.int32
    scheduler_classes = ("FlowMatchEulerDiscreteScheduler",)
    stageable = ("text_encoder", "text_encoder_2", "vae")
    latents_layout = "(batch, latent_channels, (num_frames - 1) // 4 + 1, height / 8, width / 8)"
    #: The prompt template (the reference's default for this pipeline).
    prompt_template = T2V_PROMPT_TEMPLATE

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> HunyuanVideoInfo:
        return read_hunyuan_video_checkpoint(checkpoint)

    @classmethod
    def resolve_num_frames(cls, info: HunyuanVideoInfo, num_frames: int) -> int:
        k = info.vae_config.temporal_compression
        if num_frames % k != 1:
            rounded = (num_frames - 1) // k * k + 1
            logger.warning(
                "%s is not of the form %dk+1; the reference makes (%d - 1) // %d + 1 latent "
                "frames, i.e. %d frames; using %d",
                Arg("num_frames", num_frames),
                k,
                num_frames,
                k,
                rounded,
                rounded,
            )
            return rounded
        return num_frames

    @classmethod
    def model_size(cls, info: HunyuanVideoInfo, call) -> ModelSize:
        """Video patches of one sample plus its text tokens (one joint sequence)."""
        cfg = info.transformer_config
        _, _, t, h, w = cls.latent_shape(info, call)
        return ModelSize(
            tokens=(t // cfg.patch_size_t) * (h // cfg.patch_size) * (w // cfg.patch_size) + call.max_sequence_length,
            hidden_size=cfg.inner_dim,
            ffn_dim=cfg.mlp_dim,
            num_layers=cfg.num_layers + cfg.num_single_layers,
            decode_tile=HunyuanVideoTiling().tile_sample_min_height,
            decode_tile_stride=HunyuanVideoTiling().tile_sample_stride_height,
        )

    @classmethod
    def check_family_call(cls, info: HunyuanVideoInfo, call) -> None:
        one_image(call.image, "the HunyuanVideo pipelines take")
        if call.image is not None:
            for name, texts in (("prompt", call.prompts), ("negative_prompt", call.negatives)):
                if any("<image>" in t for t in texts):
                    raise InputError(
                        f"{name} contains '<image>', the LLaVA image placeholder the I2V template "
                        "already holds once; remove it from the text"
                    )

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls,
        info: HunyuanVideoInfo,
        *,
        dtype,
        mesh,
        offload,
        staging,
        offload_experts=True,
        vae_dtype: Any = jnp.float32,
        text_encoder_dtype: Any = None,
    ) -> dict[str, Any]:
        """Both tokenizers, the Llama (or LLaVA) and CLIP text encoders (``text_encoder_dtype``,
        default ``dtype``), the transformer, the VAE (``vae_dtype``, float32 by default),
        the scheduler; I2V also the CLIP image preprocessing config. Every checkpoint is checked
        against its model before the first weight is read."""
        ckpt = info.checkpoint
        modules: dict[str, Any] = {}
        if "i2v" in info.tasks:
            if not ckpt.config_files.get("image_processor", "").endswith("preprocessor_config.json"):
                raise CheckpointError(
                    f"{ckpt.folder('image_processor')} has no preprocessor_config.json "
                    "(the CLIP image preprocessing of the LLaVA text encoder)"
                )
            modules["image_processor_config"] = dict(ckpt.config("image_processor"))
        options = dict(vae_dtype=vae_dtype, text_encoder_dtype=text_encoder_dtype)
        return COMPONENTS.load(info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, **options) | modules

    # ------------------------------------------------------------------ text
    def encode_call(self, call) -> tuple:
        """``(embeds (B', L, D), mask (B', L) int32, pooled (B', D_clip))`` of the prompts, then
        the negatives when true CFG runs (B' = 2 B0 then), as the reference's ``encode_prompt``;
        each text encoder on the device only while it runs."""
        texts = prompt_texts(call)
        with self.pipe.staging.on_device("text_encoder"):
            embeds, mask = self.llama_embeds(call, texts)
            jax.block_until_ready(embeds)
        pooled = encode_with(self.pipe, "text_encoder_2", self.clip_pooled, texts, text_truncation(call))
        return embeds, mask, pooled

    def encode_text(self, texts, max_sequence_length, truncation=None) -> tuple:
        """Text-only prompt encoding ``(embeds, mask, pooled)`` (T2V's ``encode_prompt``)."""
        embeds, mask = self._llama_text(texts, max_sequence_length, truncation)
        return embeds, mask, self.clip_pooled(texts, truncation)

    def llama_embeds(self, call, texts: list[str]) -> tuple[jax.Array, jax.Array]:
        """The Llama part of ``encode_prompt`` for the call's ``texts`` (its ``prompt_template``)."""
        return self._llama_text(texts, call.max_sequence_length, text_truncation(call), call.extra["prompt_template"])

    @staticmethod
    def _template_truncation(truncation: Truncation | None, template: dict) -> Truncation:
        """``truncation`` with the template's ``crop_start`` tokens not counted."""
        return dataclasses.replace(truncation or Truncation(), offset=template["crop_start"])

    def _llama_text(
        self,
        texts: list[str],
        max_sequence_length: int,
        truncation: Truncation | None = None,
        template: dict | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """``_get_llama_prompt_embeds`` of ``HunyuanVideoPipeline``: (B, msl, D), mask (B, msl);
        ``template``: the prompt template (None: the pipeline's default)."""
        from vidax.encoders.decoder_lm import encode_hidden_states

        template = template or self.prompt_template
        crop = template["crop_start"]
        tokens = self.pipe.tokenizer(
            [template["template"].format(t) for t in texts],
            max_sequence_length + crop,
            truncation=self._template_truncation(truncation, template),
        )
        h = encode_hidden_states(
            self.pipe.text_encoder, tokens.input_ids, tokens.attention_mask, output_layer=LLAMA_OUTPUT_LAYER
        )
        return h[:, crop:], jnp.asarray(tokens.attention_mask[:, crop:])

    def clip_pooled(self, texts: list[str], truncation: Truncation | None = None) -> jax.Array:
        """``_get_clip_prompt_embeds``: CLIP's pooled output (B, D_clip) of 77 tokens, no mask
        (the reference encodes ``prompt``, not ``prompt_2``); a longer text is warned about with
        ``truncation``'s labels and CLIP's fixed limit, which no argument changes."""
        limit = (
            f"the {CLIP_MAX_LENGTH} tokens of the CLIP text encoder (text_encoder_2, fixed for its pooled embedding)"
        )
        tokens = self.pipe.tokenizer_2(
            list(texts),
            CLIP_MAX_LENGTH,
            truncation=dataclasses.replace(truncation or Truncation(), limit=limit, offset=0),
        )
        return encode_clip_text(self.pipe.text_encoder_2, tokens)[1]

    # ------------------------------------------------------------------ steps
    def condition(self, call, stats) -> dict:
        """``guidance`` (the embedded guidance ``guidance_scale * 1000`` in the transformer dtype,
        when the model embeds one)."""
        cond: dict[str, Any] = {}
        if self.pipe.info.transformer_config.guidance_embeds:
            cond["guidance"] = jnp.asarray(call.guidance_scale, self.pipe.dtype) * 1000.0
        return cond

    @staticmethod
    def schedule(scheduler, call, sample_shape=None):
        """Sigmas ``linspace(1, 0, N + 1)[:-1]`` (or the call's ``sigmas``), shifted by the
        scheduler as ``retrieve_timesteps(scheduler, sigmas=...)`` (host arithmetic only)."""
        sigmas = call.extra.get("sigmas")
        if sigmas is None:
            sigmas = np.linspace(1.0, 0.0, call.num_inference_steps + 1)[:-1]
        return scheduler.set_timesteps(sigmas=sigmas, sample_shape=sample_shape)

    def set_timesteps(self, call, latents):
        return self.schedule(self.pipe.scheduler, call, latents.shape)

    def step_args(self, call, embeds, cond, state, expert):
        """The base's inputs with ``true_cfg_scale`` as the guidance (the true-CFG weight)."""
        return StepInputs(embeds, jnp.asarray(call.extra["true_cfg_scale"], jnp.float32), cond), None

    def model_input(self, latents: jax.Array, cond: dict) -> jax.Array:
        """The transformer's ``hidden_states`` from the latents (T2V: the latents)."""
        return latents

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(hidden_states, timestep, encoder_hidden_states, encoder_attention_mask,
        pooled_projections, guidance)`` of the transformer; cond / uncond batched under CFG."""
        (text, mask, pooled), cond = inputs.embeds, inputs.cond
        b = latents.shape[0]
        x = self.model_input(latents, cond).astype(self.pipe.dtype)
        timestep = jnp.broadcast_to(state.timestep.astype(latents.dtype), (b,))
        guidance = cond.get("guidance")
        guidance = None if guidance is None else jnp.broadcast_to(guidance, (b,))
        x, timestep, guidance = cfg_pair(do_cfg, x, timestep, guidance)
        return x, timestep, text, mask, pooled, guidance


def first_frame_concat(latents: jax.Array, image: jax.Array) -> jax.Array:
    """``[latents, image latents on frame 0 (zeros after), mask (1 on frame 0)]`` on channels, in
    the latents' dtype: the ``latent_concat`` input of HunyuanVideo-I2V-33ch and HunyuanVideo 1.5
    I2V (``prepare_cond_latents_and_mask``). ``latents`` (B, T, h, w, C), ``image`` (B, 1, h, w, C);
    returns (B, T, h, w, 2C + 1)."""
    t = latents.shape[1]
    first = (jnp.arange(t) == 0)[None, :, None, None, None]
    img = jnp.where(first, jnp.broadcast_to(image.astype(latents.dtype), latents.shape), 0.0).astype(latents.dtype)
    mask = jnp.broadcast_to(first, latents.shape[:-1] + (1,)).astype(latents.dtype)
    return jnp.concatenate([latents, img, mask], axis=-1)


class HunyuanVideoPipeline(VideoPipeline):
    """HunyuanVideo 1.0 text-to-video (reference: ``diffusers.HunyuanVideoPipeline``).

    Call keywords beyond the shared ones: ``true_cfg_scale`` (true CFG with ``negative_prompt``;
    default 1.0, off), ``sigmas`` (custom, unshifted noise levels, length num_inference_steps).
    ``guidance_scale`` is the embedded guidance (default 6.0). Build with :meth:`from_pretrained`
    or :func:`vidax.load_pipeline`.
    """

    family = HunyuanVideoHooks


class HunyuanVideoImageToVideoHooks(HunyuanVideoHooks):
    """The hooks of :class:`HunyuanVideoImageToVideoPipeline`."""

    pipeline_name = "HunyuanVideoImageToVideoPipeline"

    # diffusers 0.42.1's image-to-video pipeline calls the transformer outside any cache context.
    cache_reference = False

    task = "i2v"
    call_options = HunyuanVideoHooks.call_options + (
        CallOption(
            "image_embed_interleave",
            int,
            "Keep every n-th image token in the text encoder's sequence (HunyuanVideo I2V).",
            "the checkpoint's",
            low=0,
            valid="an integer >= 0 (1..5 keep every n-th image token, others keep all)",
        ),
    )
    prompt_template = I2V_PROMPT_TEMPLATE

    @classmethod
    def check_family_call(cls, info: HunyuanVideoInfo, call) -> None:
        super().check_family_call(info, call)
        if info.image_condition_type == "latent_concat":
            asked = (
                Arg("num_frames", call.num_frames)
                if "num_frames" in call.given
                else f"this checkpoint's default of {call.num_frames} frames"
            )
            k = info.vae_config.temporal_compression
            least = LATENT_CONCAT_DROPPED + 1 if call.output_type != "latent" else k + 1
            if call.num_frames < least:  # the reference's output would be empty
                raise InputError(
                    asked,
                    " leaves no frame: latent_concat (as diffusers' "
                    "HunyuanVideoImageToVideoPipeline) drops the first "
                    + (f"{LATENT_CONCAT_DROPPED} decoded frames" if call.output_type != "latent" else "latent frame")
                    + "; give ",
                    Arg("num_frames"),
                    f" >= {least}",
                )
            if call.output_type == "latent":
                t = cls.latent_shape(info, call)[2]
                got = f"{t - 1} latent frames, not {t}: the reference drops the first latent frame"
            else:
                got = (
                    f"{call.num_frames - LATENT_CONCAT_DROPPED} frames, not {call.num_frames}: the reference "
                    f"drops the first {LATENT_CONCAT_DROPPED} decoded frames"
                )
            logger.warning(
                "%s returns %s (latent_concat, as diffusers' HunyuanVideoImageToVideoPipeline); "
                "ask for %d frames to get %d",
                asked,
                got,
                call.num_frames + LATENT_CONCAT_DROPPED,
                call.num_frames,
            )

    # ------------------------------------------------------------------ text
    def llama_embeds(self, call, texts: list[str]) -> tuple[jax.Array, jax.Array]:
        """``_get_llama_prompt_embeds`` of the I2V reference: the prompts with the call's image
        and ``image_embed_interleave``, the negatives (true CFG) with a black image and
        interleave 2; the shorter of the two is padded at the end with masked rows so that
        both stack into one batch (the transformer reads only the first ``sum(mask)`` tokens)."""
        n = call.extra.get("image_embed_interleave")
        n = _interleave_default(self.pipe.info.image_condition_type) if n is None else int(n)
        b0 = len(call.prompts)
        names = text_truncation(call)
        tpl = call.extra["prompt_template"]
        parts = [
            self._llava_text(
                texts[:b0],
                call.image,
                n,
                call.max_sequence_length,
                dataclasses.replace(names, labels=names.labels[:b0]),
                tpl,
            )
        ]
        if len(texts) > b0:
            black = np.zeros((call.height, call.width, 3), np.uint8)
            parts.append(
                self._llava_text(
                    texts[b0:],
                    black,
                    NEGATIVE_INTERLEAVE,
                    call.max_sequence_length,
                    dataclasses.replace(names, labels=names.labels[b0:]),
                    tpl,
                )
            )
        length = max(p[0].shape[1] for p in parts)
        embeds = jnp.concatenate([jnp.pad(e, ((0, 0), (0, length - e.shape[1]), (0, 0))) for e, _ in parts])
        mask = jnp.concatenate([jnp.pad(m, ((0, 0), (0, length - m.shape[1]))) for _, m in parts])
        return embeds, mask

    def _llava_text(
        self,
        texts: list[str],
        image: Any,
        interleave: int,
        max_sequence_length: int,
        truncation: Truncation | None,
        tpl: dict,
    ) -> tuple[jax.Array, jax.Array]:
        from vidax.encoders.llava import encode_llava_text

        te = self.pipe.text_encoder
        crop, e_len = tpl["crop_start"], tpl["image_emb_len"]
        start, end = tpl["image_emb_start"], tpl["image_emb_end"]
        pad = te.config.pad_token_id
        if pad is None:
            raise CheckpointError(
                f"{self.pipe.checkpoint.config_file('text_encoder')} has no pad_token_id; the I2V "
                "reference masks the image-expanded sequence with it"
            )
        end_header = self.pipe.tokenizer.token_to_id("<|end_header_id|>")
        if end_header is None:
            raise CheckpointError(
                f"{self.pipe.tokenizer.path}: '<|end_header_id|>' is not in the vocabulary; the I2V "
                "reference cuts the prompt at it"
            )
        tokens = self.pipe.tokenizer(
            [tpl["template"].format(t) for t in texts],
            max_sequence_length + crop,
            truncation=self._template_truncation(truncation, tpl),
        )
        ids, mask = expand_image_tokens(tokens.input_ids, te.config.vision.image_token_index, e_len, start, end, pad)
        pixels = clip_preprocess(to_rgb_image(image), self.pipe.image_processor_config)
        pixels = np.repeat(np.asarray(pixels, np.float32)[None], len(texts), axis=0)
        h = encode_llava_text(te, ids, mask, pixels, output_layer=LLAMA_OUTPUT_LAYER)
        hid, msk = i2v_crop_indices(tokens.input_ids, end_header, crop, e_len)
        text = jnp.take_along_axis(h, jnp.asarray(hid)[..., None], axis=1)
        text_mask = np.take_along_axis(tokens.attention_mask, msk, axis=1)
        img = h[:, start:end]
        if 0 < interleave < 6:
            img = img[:, ::interleave]
        embeds = jnp.concatenate([img, text], axis=1)
        mask = np.concatenate([np.ones(img.shape[:2], text_mask.dtype), text_mask], axis=1)
        return embeds, jnp.asarray(mask)

    # ------------------------------------------------------------------ latents
    def condition(self, call, stats) -> dict:
        """The base's ``guidance`` and ``image`` (B, 1, h, w, C): the VAE mode of the image
        resized to height x width, times the scaling factor (``prepare_latents``)."""
        cond = super().condition(call, stats)
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            pixels = vae_image_preprocess(to_rgb_image(call.image), call.height, call.width)  # (H, W, 3) in [-1, 1]
            mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, pixels[None, None])
            cond["image"] = jnp.repeat(self.pipe.vae.normalize_latents(mean), call.batch, axis=0)
        stats.sample_memory()
        return cond

    def prepare_latents(self, call, noise, cond) -> jax.Array:
        """``noise * 0.999 + image * (1 - 0.999)`` with the image latent on every frame, float32."""
        t = np.float32(IMAGE_NOISE_MIX)
        latents = jnp.transpose(noise, (0, 2, 3, 4, 1)).astype(jnp.float32)
        return latents * t + cond["image"] * (np.float32(1.0) - t)

    def model_input(self, latents, cond) -> jax.Array:
        img = cond["image"].astype(latents.dtype)
        if self.pipe.info.image_condition_type == "token_replace":
            return jnp.concatenate([img, latents[:, 1:]], axis=1)
        return first_frame_concat(latents, img)

    def scheduler_update(self, state, pred, latents, inputs):
        """The Euler step; ``token_replace`` then puts the image latent back on frame 0 (the
        reference steps frames 1: only, elementwise the same)."""
        latents, state = self.pipe.scheduler.step(state, pred, latents)
        if self.pipe.info.image_condition_type == "token_replace":
            latents = jnp.concatenate([inputs.cond["image"].astype(latents.dtype), latents[:, 1:]], axis=1)
        return latents, state

    def latents_output(self, latents) -> np.ndarray:
        out = super().latents_output(latents)
        return out[:, :, 1:] if self.pipe.info.image_condition_type == "latent_concat" else out

    def decode(self, call, latents, stats) -> np.ndarray:
        """The base's decode; ``latent_concat`` drops the first 4 decoded frames (the reference's
        ``video[:, :, 4:]``)."""
        video = super().decode(call, latents, stats)
        return video[:, LATENT_CONCAT_DROPPED:] if self.pipe.info.image_condition_type == "latent_concat" else video


class HunyuanVideoImageToVideoPipeline(VideoPipeline):
    """HunyuanVideo 1.0 image-to-video (reference: ``diffusers.HunyuanVideoImageToVideoPipeline``):
    ``pipe(image, prompt, ...)``; both ``image_condition_type`` s (``token_replace``: HunyuanVideo-I2V,
    ``latent_concat``: HunyuanVideo-I2V-33ch).

    ``image``: a PIL image or uint8 array (H, W, 3); the VAE sees it resized to height x width,
    the LLaVA vision tower through its CLIP preprocessing. Extra keyword ``image_embed_interleave``
    (default 2 for ``latent_concat``, 4 for ``token_replace``). ``guidance_scale`` (default 1.0)
    is embedded only where the transformer has a guidance embedder (not the 33-channel model).

    ``latent_concat`` returns :data:`LATENT_CONCAT_DROPPED` frames fewer than ``num_frames``
    (``num_frames - 4``; with ``output_type="latent"`` one latent frame fewer), as the reference,
    which drops the first decoded frames (``video[:, :, 4:]``); each call logs a warning saying
    so. Ask for ``num_frames + 4`` (still 4k+1) to get ``num_frames``.
    """

    family = HunyuanVideoImageToVideoHooks
    __call__ = image_first_call
