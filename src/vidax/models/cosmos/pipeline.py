"""Cosmos-Predict2.5 text/image/video-to-world: the hooks of :class:`~vidax.pipelines.base.VideoPipeline`.

Reference: diffusers 0.42.1 ``pipelines/cosmos/pipeline_cosmos2_5_predict.py``
(``Cosmos2_5_PredictBasePipeline``), followed step by step:

* Text (``_get_prompt_embeds``): each prompt as the chat ``[system: "You are a helpful assistant
  who will provide prompts to an image generator.", user: prompt]`` through the tokenizer's chat
  template (``add_generation_prompt=False``, ``add_vision_id=False``), padded to
  ``max_sequence_length`` on the tokenizer's padding side (right) and truncated; the Qwen2.5-VL
  text tower runs WITHOUT an attention mask (plain causal over the padded ids); every layer's
  output (hidden states 1..n, the last after the final norm) is standardised over its features
  with the UNBIASED std, ``(h - mean) / (std + 1e-8)``, and the n layers are concatenated
  (``(B, L, n D)``, layer-major); the transformer's ``crossattn_proj`` maps that to its width.
  Without ``negative_prompt`` the reference's :data:`DEFAULT_NEGATIVE_PROMPT` is used.
* Conditioning (``prepare_latents``, ``create_condition_mask``): text2world has no conditioning
  frames; image2world (``image=``) makes the video ``[image, black, black, ...]``, resized with
  torch's NEAREST interpolation (the reference's tensor path) and conditions on 1 latent frame;
  video2world (``video=``) resizes every frame with PIL BILINEAR, keeps the LAST
  ``4 (n - 1) + 1`` frames (n = ``num_latent_conditional_frames``, 1 or 2), pads them with the
  last frame to ``num_frames`` and conditions on n latent frames. The conditioning latents are
  the VAE posterior's mean, normalised. Only the frames that reach the conditioning latents are
  encoded (the Wan VAE is causal: latent frame k depends on frames ``<= 4 k`` only), so the
  padding frames the reference also encodes, and multiplies by a zero mask, are not.
* Steps: the transformer sees ``mask * cond + (1 - mask) * x`` with the condition mask as an
  extra channel, a zero padding mask, and one timestep per latent frame: the step's flow sigma
  (``scheduler.sigmas[i]``, in [0, 1]), the conditioning frames ``conditional_frame_timestep``
  (1e-4; a negative value gives them the sigma too). On the conditioning frames the velocity is
  replaced by ``noise - cond`` (``gt_velocity``, from the initial noise). Guidance is NOT the
  usual CFG: ``v = v_cond + w (v_cond - v_uncond)`` (on the velocity), and it is on whenever
  ``guidance_scale > 1``. fps is not passed to the transformer (the reference passes none).
* Decode: latents x std + mean, the Wan VAE; a frame count that is not ``4 k + 1`` gets the
  reference's ``_match_num_frames`` (each decoded frame repeated 4 times, then cut / padded).

No safety checker: the reference requires NVIDIA's ``cosmos_guardrail`` (text and video checks,
refusing to run without it, as the NVIDIA Open Model License asks); vidax never downloads or runs
one. Complying with the license is up to the user.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.decoder_lm import encode_hidden_states
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import Arg, InputError
from vidax.io.image import nearest_resize, one_image, to_rgb_image, vae_image_preprocess, video_frames
from vidax.models.cosmos.config import CosmosInfo, read_cosmos_checkpoint
from vidax.pipelines.base import ModelSize, SizeLimits, VideoPipeline, cfg_pair
from vidax.pipelines.call import default_negative_prompt
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TEXT_ENCODER, TRANSFORMER, VAE, ComponentTable
from vidax.pipelines.options import VIDEO_FILE, CallOption
from vidax.pipelines.prompts import encode_with

logger = logging.getLogger("vidax.pipeline")

#: ``DEFAULT_NEGATIVE_PROMPT`` of diffusers' ``pipeline_cosmos2_5_predict.py``, verbatim.
DEFAULT_NEGATIVE_PROMPT = (
    "The video captures a series of frames showing ugly scenes, static with no motion, motion blur, "
    "over-saturation, shaky footage, low resolution, grainy texture, pixelated images, poorly lit areas, "
    "underexposed and overexposed scenes, poor color balance, washed out colors, choppy sequences, "
    "jerky movements, low frame rate, artifacting, color banding, unnatural transitions, outdated special effects, "
    "fake elements, unconvincing visuals, poorly edited content, jump cuts, visual noise, and flickering. "
    "Overall, the video is of poor quality."
)
#: The system turn of every prompt's chat (``_get_prompt_embeds``).
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."


def prompt_conversation(prompt: str) -> list[dict]:
    """The chat ``_get_prompt_embeds`` builds for one prompt (system turn, then the prompt)."""
    return [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
        {"role": "user", "content": [{"type": "text", "text": prompt}]},
    ]


@jax.jit
def normalized_layers(states: jax.Array) -> jax.Array:
    """The reference's per-layer standardisation and concatenation of the text tower's states.

    Args:
        states: ``(n + 1, B, L, D)`` all hidden states (entry 0, the embeddings, is dropped).

    Returns:
        float32 ``(B, L, n D)``: layer ``i`` (1..n) standardised over D with the unbiased std
        (``torch.std``'s default, divisor ``D - 1``), ``(h - mean) / (std + 1e-8)``, the layers
        concatenated along the features in order.
    """
    h = states[1:].astype(jnp.float32)
    mean = jnp.mean(h, axis=-1, keepdims=True)
    std = jnp.std(h, axis=-1, keepdims=True, ddof=1)
    z = (h - mean) / (std + 1e-8)
    n, b, length, d = z.shape
    return jnp.transpose(z, (1, 2, 0, 3)).reshape(b, length, n * d)


def cosmos_guidance(pred: jax.Array, scale: jax.Array) -> jax.Array:
    """The Predict2.5 guidance of a CFG batch ``(2B, ...)`` (cond first): ``cond + scale (cond -
    uncond)``, i.e. ``uncond + (scale + 1)(cond - uncond)`` -- not diffusers' usual
    ``uncond + scale (cond - uncond)``."""
    cond, uncond = jnp.split(pred, 2, axis=0)
    return cond + scale * (cond - uncond)


def match_num_frames(video: np.ndarray, num_frames: int, temporal_compression: int) -> np.ndarray:
    """``Cosmos2_5_PredictBasePipeline._match_num_frames`` on decoded frames ``(B, F, H, W, 3)``:
    unchanged when ``F == num_frames``; else each frame repeated ``temporal_compression`` times,
    then cut to ``num_frames`` or padded with the last frame."""
    if num_frames <= 0 or video.shape[1] == num_frames:
        return video
    video = np.repeat(video, max(temporal_compression, 1), axis=1)
    if video.shape[1] < num_frames:
        pad = np.repeat(video[:, -1:], num_frames - video.shape[1], axis=1)
        return np.concatenate([video, pad], axis=1)
    return video[:, :num_frames]


#: The components: the text encoder and the transformer in the pipeline's dtype, the VAE in
#: ``vae_dtype`` (float32 by default).
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer},
    weighted={"text_encoder": TEXT_ENCODER, "transformer": TRANSFORMER, "vae": VAE},
)


def refuse_image_and_video(call: Any, image_task: str, video_task: str) -> None:
    """Raise InputError when ``call`` gives both ``image`` and ``video``, naming the task each
    one makes (``image_task``, ``video_task``)."""
    if call.image is not None:
        raise InputError(
            Arg("image", keyword=True),
            " and ",
            Arg("video", keyword=True),
            " are both given; give ",
            Arg("image", keyword=True),
            f" ({image_task}) or ",
            Arg("video", keyword=True),
            f" ({video_task})",
        )


class CosmosPredictHooks(FamilyHooks):
    """The hooks of :class:`CosmosPredictPipeline`."""

    pipeline_name = "CosmosPredictPipeline"
    takes_image = True  # image- and video-to-video as conditioning frames, as diffusers'

    # diffusers 0.42.1: no cache context around the transformer calls, no block metadata.
    cache_reference = False
    #: ``negative_prompt=None`` is the reference's :data:`DEFAULT_NEGATIVE_PROMPT` (``""`` is an
    #: empty negative prompt, as there).
    call_rules = (default_negative_prompt(DEFAULT_NEGATIVE_PROMPT),)

    call_options = (
        CallOption(
            "video",
            VIDEO_FILE,
            "Video to condition on (Cosmos-Predict2.5 video2world continues its last "
            "frames). No safety checker runs (Cosmos' reference requires NVIDIA's cosmos_guardrail).",
            task="v2v",
        ),
        CallOption(
            "num_latent_conditional_frames",
            int,
            "Latent frames of the video that condition (Cosmos-Predict2.5 video2world).",
            "2",
            choices=(1, 2),
        ),
        CallOption(
            "conditional_frame_timestep",
            float,
            "Timestep of the conditioning frames (Cosmos-Predict2.5; negative: the step's sigma).",
            "1e-4",
        ),
    )
    unsupported_call_args = ("guidance_scale_2",)
    prompt_embeds_args = ("prompt_embeds",)
    scheduler_classes = ("UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler")
    guidance_dtype = jnp.float32  # the reference guides the fp32 sum gt_velocity + prediction
    latents_layout = "(batch, z_dim, latent frames, height / vae_scale, width / vae_scale)"

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> CosmosInfo:
        return read_cosmos_checkpoint(checkpoint)

    @classmethod
    def resolve_num_frames(cls, info: CosmosInfo, num_frames: int) -> int:
        k = info.vae_config.temporal_compression
        if num_frames % k != 1:
            logger.warning(
                "%s is not of the form %dk+1: the %d decoded frames are each repeated %d "
                "times and cut to %d, as diffusers' Cosmos2_5_PredictBasePipeline does",
                Arg("num_frames", num_frames),
                k,
                (num_frames - 1) // k * k + 1,
                k,
                num_frames,
            )
        return num_frames

    @classmethod
    def size_limits(cls, info: CosmosInfo) -> SizeLimits:
        """RoPE positions: at most ``M = max(max_size // patch_size)`` patches along each axis."""
        cfg, vae = info.transformer_config, info.vae_config
        m, (pt, ph, pw), s = max(cfg.patch_grid_max), cfg.patch_size, vae.spatial_compression
        mh, mw = info.size_multiple
        return SizeLimits(
            height=m * s * ph // mh * mh,
            width=m * s * pw // mw * mw,
            num_frames=(m * pt - 1) * vae.temporal_compression + 1,
            reason=f"max(max_size // patch_size) = {m} patches per axis in "
            f"{info.checkpoint.config_file('transformer')}, VAE "
            f"{vae.temporal_compression}x{s}x{s}",
        )

    @classmethod
    def model_size(cls, info: CosmosInfo, call) -> ModelSize:
        from vidax.models.wan.pipeline import wan_model_size

        return wan_model_size(info.transformer_config, cls.latent_shape(info, call), info.vae_config)

    @classmethod
    def conditioning_frames(cls, call) -> int:
        """Pixel frames video2world takes from the end of ``video``: ``4 (n - 1) + 1``."""
        return 4 * (call.extra.get("num_latent_conditional_frames", 2) - 1) + 1

    @classmethod
    def check_family_call(cls, info: CosmosInfo, call) -> None:
        extra = call.extra
        video = extra.get("video")
        # num_latent_conditional_frames and conditional_frame_timestep: checked by their declarations
        n = extra.get("num_latent_conditional_frames", 2)
        one_image(call.image, "image2world takes")
        if video is None:
            return
        refuse_image_and_video(call, "image2world", "video2world")
        if len(call.prompts) != 1:
            raise InputError(
                Arg("video"),
                f" is given with {len(call.prompts)} prompts; video2world takes one prompt "
                "(as diffusers' Cosmos2_5_PredictBasePipeline: batch_size must be 1)",
            )
        frames = video_frames(video)
        need = cls.conditioning_frames(call)
        if len(frames) < need:
            raise InputError(
                Arg("video", keyword=True),
                f" has {len(frames)} frame(s) but video2world with ",
                Arg("num_latent_conditional_frames", n),
                f" conditions on its last {need}; give a video of at least {need} frames (or ",
                Arg("num_latent_conditional_frames", 1),
                ")",
            )
        if call.num_frames < need:
            raise InputError(
                Arg("num_frames", call.num_frames),
                f" is fewer than the {need} conditioning frames video2world takes (",
                Arg("num_latent_conditional_frames", n),
                "); give ",
                Arg("num_frames"),
                f" >= {need}",
            )

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls, info: CosmosInfo, *, dtype, mesh, offload, staging, offload_experts=True, vae_dtype: Any = jnp.float32
    ) -> dict[str, Any]:
        """Tokenizer (with its chat template), the Qwen2.5-VL text tower, the transformer, the
        Wan VAE (``vae_dtype``, float32 by default) and the scheduler; every checkpoint checked
        against its model before the first weight is read."""
        return COMPONENTS.load(info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, vae_dtype=vae_dtype)

    # ------------------------------------------------------------------ call hooks
    def encode_text(self, texts, max_sequence_length, truncation=None) -> jax.Array:
        """``(B, L, n D)`` float32: the chat-formatted prompts through the text tower without a
        mask, every layer standardised (:func:`normalized_layers`), as ``_get_prompt_embeds``."""
        tokens = self.pipe.tokenizer.apply_chat_template(
            [prompt_conversation(t) for t in texts],
            max_sequence_length,
            padding_side=self.pipe.tokenizer.padding_side,
            add_generation_prompt=False,
            truncation=truncation,
            add_vision_id=False,
        )
        states = encode_hidden_states(self.pipe.text_encoder, tokens.input_ids, None, output_layer=None)
        return normalized_layers(states)

    def condition_pixels(self, call) -> tuple[np.ndarray | None, int]:
        """The frames to encode, float32 ``(1, F_c, H, W, 3)`` in [-1, 1], and the number of
        conditioning latent frames (0 for text2world, with None)."""
        if call.image is not None:  # to_tensor -> [image, 0, 0, ...] -> nearest resize -> 2x - 1
            rgb = np.asarray(to_rgb_image(call.image), np.float32) / np.float32(255.0)
            pixels = np.float32(2.0) * nearest_resize(rgb, call.height, call.width) - np.float32(1.0)
            return pixels[None, None], 1
        video = call.extra.get("video")
        if video is None:
            return None, 0
        need = self.conditioning_frames(call)
        frames = video_frames(video)[-need:]
        pixels = np.stack(
            [vae_image_preprocess(f, call.height, call.width, resample="bilinear", name="video") for f in frames]
        )
        return pixels[None], (need - 1) // self.pipe.info.vae_config.temporal_compression + 1

    def condition(self, call, stats) -> dict:
        """Channels-last conditioning of every step: ``indicator`` ``(B, T)`` (1 on the
        conditioning latent frames), ``latents`` ``(B, T, h, w, C)`` (the normalised VAE mean
        there, zeros elsewhere) and ``frame_timestep`` (``conditional_frame_timestep``)."""
        _, c, t, h, w = self.latent_shape(self.pipe.info, call)
        b = call.batch
        cond_latents = jnp.zeros((b, t, h, w, c), jnp.float32)
        pixels, n = self.condition_pixels(call)
        if pixels is not None:
            with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
                mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, pixels)  # the posterior's mode ("argmax")
                z = self.pipe.vae.normalize_latents(mean)[:, :n]
                cond_latents = cond_latents.at[:, :n].set(jnp.broadcast_to(z, (b,) + z.shape[1:]))
            stats.sample_memory()
        indicator = jnp.zeros((b, t), jnp.float32).at[:, :n].set(1.0)
        cft = call.extra.get("conditional_frame_timestep", 1e-4)
        return {"indicator": indicator, "latents": cond_latents, "frame_timestep": jnp.asarray(cft, jnp.float32)}

    def prepare_latents(self, call, noise, cond) -> jax.Array:
        """Channels-last noise; also stores ``cond["velocity"] = (noise - cond latents) * mask``
        (the reference's ``gt_velocity``, from the initial latents) for every step."""
        x = jnp.transpose(noise, (0, 2, 3, 4, 1))
        cond["velocity"] = (x - cond["latents"]) * self._mask(cond)
        return x

    def set_timesteps(self, call, latents):
        state = super().set_timesteps(call, latents)
        if not hasattr(state, "sigmas") or not hasattr(state, "step_index"):
            raise InputError(
                f"{type(self.pipe.scheduler).__name__} has no flow sigmas; Cosmos-Predict2.5 feeds the "
                "transformer scheduler.sigmas[i] (use the checkpoint's UniPCMultistepScheduler)"
            )
        return state

    @staticmethod
    def _mask(cond) -> jax.Array:
        """The condition mask ``(B, T, 1, 1, 1)``, broadcast over h, w, C."""
        return cond["indicator"][:, :, None, None, None]

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(x, timestep, context, fps, condition_mask, padding_mask)`` of the transformer:
        ``x = mask cond + (1 - mask) latents``, per-frame timesteps ``(B, T)`` (sigma, the
        conditioning frames ``conditional_frame_timestep``), the mask channel ``(B, T, h, w, 1)``,
        no fps, a zero padding mask (None)."""
        context, cond = inputs.embeds, inputs.cond
        mask = self._mask(cond)
        x = mask * cond["latents"] + (1.0 - mask) * latents
        sigma = state.sigmas[state.step_index].astype(jnp.float32)
        ind, cft = cond["indicator"], cond["frame_timestep"]
        timestep = jnp.where(cft >= 0, ind * cft + (1.0 - ind) * sigma, sigma)
        cmask = jnp.broadcast_to(mask[..., :1], latents.shape[:-1] + (1,))
        x, timestep, cmask = cfg_pair(do_cfg, x.astype(self.pipe.dtype), timestep, cmask.astype(self.pipe.dtype))
        return x, timestep, context, None, cmask, None

    def guide(self, pred, state, inputs) -> jax.Array:
        """:func:`cosmos_guidance` with ``guidance_scale`` (the reference's formula; see
        :meth:`scheduler_update` for the conditioning frames)."""
        return cosmos_guidance(pred, self.guidance(state, inputs))

    def scheduler_update(self, state, pred, latents, inputs) -> tuple:
        """The velocity on the conditioning frames replaced by ``gt_velocity``, then the
        scheduler step. The reference replaces it in the cond and uncond predictions before
        guiding; ``gt_velocity`` is 0 off the conditioning frames and the mask exactly 0 / 1, so
        replacing after the guidance gives the same values."""
        cond = inputs.cond
        mask = self._mask(cond)
        pred = cond["velocity"] + pred.astype(jnp.float32) * (1.0 - mask)
        return self.pipe.scheduler.step(state, pred, latents)

    def decode(self, call, latents, stats) -> np.ndarray:
        """The base decode, then :func:`match_num_frames` (frames not of the form 4k+1)."""
        video = super().decode(call, latents, stats)
        return match_num_frames(video, call.num_frames, self.pipe.info.vae_config.temporal_compression)


class CosmosPredictPipeline(VideoPipeline):
    """Cosmos-Predict2.5 (2B / 14B): text2world, image2world (``image=``) and video2world
    (``video=``) in one pipeline (reference: ``diffusers.Cosmos2_5_PredictBasePipeline``). Build
    with :meth:`from_pretrained` or :func:`vidax.load_pipeline`.

    Call keywords beyond the shared ones:

    * ``video``: uint8 frames ``(F, H, W, 3)`` or a list of PIL images; video2world conditions on
      its LAST ``4 (n - 1) + 1`` frames (resized bilinearly to height x width), so it needs at
      least that many. Not with ``image``; one prompt only (as the reference).
    * ``num_latent_conditional_frames``: n, 1 or 2 (default 2), for ``video``.
    * ``conditional_frame_timestep``: the conditioning frames' timestep (default 1e-4; negative:
      the step's sigma, as the noisy frames).

    ``image``: one PIL image or uint8 ``(H, W, 3)`` for the whole batch, resized with nearest
    interpolation (as the reference). ``negative_prompt`` defaults to
    :data:`DEFAULT_NEGATIVE_PROMPT` (used when ``guidance_scale > 1``); the guidance is
    ``cond + guidance_scale (cond - uncond)``.

    No safety checker runs (the reference requires ``cosmos_guardrail``; vidax never downloads or
    runs one).
    """

    family = CosmosPredictHooks
