"""CogVideoX / CogVideoX1.5 pipelines: the hooks of :class:`~vidax.pipelines.base.VideoPipeline`.

References: ``diffusers.CogVideoXPipeline`` and ``CogVideoXImageToVideoPipeline`` (0.42.1).
Text: the prompts as given, padded to ``max_sequence_length``, T5 *without* an attention mask
(padded positions attended, outputs not zeroed). Steps: cond and uncond as one batch of 2B,
guidance in float32 (optionally the reference's dynamic guidance), DDIM or DPM update on float32
latents (the reference rounds its latents to the text embeddings' dtype after every step, bf16
with a bf16 T5; vidax keeps them float32, and loads the T5 in float32 by default); I2V: the
image latent padded with zero frames, concatenated in channels. CogVideoX1.5 (``patch_size_t =
2``) pads the latent frames to even by prepending noise frames, dropped before decoding.

Layouts at the boundary are the reference's: ``latents`` (B, T, C, H/8, W/8) frame-major,
``step_noise`` (steps, B, T, C, H/8, W/8), ``image_noise`` (B, C, 1, H/8, W/8) (the VAE
posterior's layout). The VAE decodes T latent frames to ``4 T`` frames (T even) or
``4 (T - 1) + 1`` (T odd); when that differs from ``num_frames`` the pipeline warns and returns
what the reference returns.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import Arg, InputError
from vidax.io.image import vae_image_preprocess
from vidax.models.cogvideox.config import CogVideoXInfo, read_cogvideox_checkpoint
from vidax.models.cogvideox.transformer import rope_axis_tables
from vidax.models.cogvideox.vae import CogVideoXTiling, decoded_frames
from vidax.pipelines.base import (
    ModelSize,
    SizeLimits,
    VideoPipeline,
    as_list,
    cfg_pair,
    finite_array,
    image_first_call,
    tokenizer_token_limit,
)
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TRANSFORMER, VAE, ComponentTable, Weighted
from vidax.pipelines.options import OBJECT, CallOption
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.step_inputs import StepInputs, step_inputs
from vidax.schedulers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler

logger = logging.getLogger("vidax.pipeline")

_SCHEDULERS = (CogVideoXDDIMScheduler, CogVideoXDPMScheduler)


def dynamic_guidance_scales(guidance_scale: float, timesteps: Sequence[int], num_inference_steps: int) -> np.ndarray:
    """The reference's ``use_dynamic_cfg`` guidance per step (Python float math, then float32):
    ``1 + g (1 - cos(π ((n - t) / n) ** 5)) / 2`` with the integer timestep ``t`` and the
    requested step count ``n``."""
    n = num_inference_steps
    return np.array(
        [1 + guidance_scale * ((1 - math.cos(math.pi * ((n - int(t)) / n) ** 5.0)) / 2) for t in timesteps],
        np.float32,
    )


@step_inputs
class CogVideoXStepInputs(StepInputs):
    """The step inputs of CogVideoX: ``guidance`` is the CFG weight of every step (steps,)
    (``use_dynamic_cfg``); ``ofs`` the (1,) input of the transformer's ofs embedding (None
    where it has none, ``has_ofs``), ``image_latents`` the I2V image latents concatenated on channels, ``step_noise``
    CogVideoXDPMScheduler's per-step noise (steps, B, T, h, w, C) when given."""

    ofs: Any = None
    image_latents: Any = None
    step_noise: Any = None


#: The components: T5 in ``text_encoder_dtype`` (float32 by default, because the reference attends
#: the padded positions, where a bf16 T5 drifts), the transformer, the VAE in ``vae_dtype``.
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer},
    weighted={
        "text_encoder": Weighted(dtype="text_encoder_dtype", mesh=True, staged=True),
        "transformer": TRANSFORMER,
        "vae": VAE,
    },
)


class CogVideoXHooks(FamilyHooks):
    """The CogVideoX family's hooks, in one place: what :class:`CogVideoXPipeline` and
    :class:`CogVideoXImageToVideoPipeline` share (:class:`CogVideoXPipeline`'s own; the image-to-video hooks subclass them)."""

    pipeline_name = "CogVideoXPipeline"

    task = "t2v"
    call_options = (
        CallOption("use_dynamic_cfg", bool, "The reference's cosine guidance schedule (CogVideoX).", "False"),
        CallOption("step_noise", OBJECT, "The noise each CogVideoXDPMScheduler step adds, (steps, B, T, C, H/8, W/8)."),
        CallOption(
            "eta",
            float,
            "diffusers' DDIM eta: its CogVideoXDDIMScheduler and CogVideoXDPMScheduler steps take "
            "it and do not use it (0.42.1), so it changes nothing, as there.",
            "0.0",
            low=0,
            flag=False,
        ),
    )
    unsupported_call_args = ("guidance_scale_2",)
    prompt_embeds_args = ("prompt_embeds",)
    guidance_dtype = jnp.float32
    latents_layout = "(batch, latent frames (CogVideoX1.5: padded to even), channels, height / 8, width / 8)"

    def latent_frames(self, num_frames: int) -> tuple[int, int]:
        """``(T, padding)`` of ``num_frames`` (see :meth:`CogVideoXInfo.latent_frames`)."""
        return self.pipe.info.latent_frames(num_frames)

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> CogVideoXInfo:
        return read_cogvideox_checkpoint(checkpoint)

    @classmethod
    def latent_shape(cls, info: CogVideoXInfo, call) -> tuple[int, ...]:
        s = info.vae_config.spatial_compression
        t, _ = info.latent_frames(call.num_frames)
        return (call.batch, t, info.vae_config.latent_channels, call.height // s, call.width // s)

    @classmethod
    def size_limits(cls, info: CogVideoXInfo) -> SizeLimits:
        """CogVideoX1.5 (``patch_size_t``) with RoPE places integer patch positions in its base
        grid ``(sample_height, sample_width) / patch_size``: height <= sample_height x VAE,
        width <= sample_width x VAE. CogVideoX 1.0 spreads any grid over the base grid
        (``linspace``) and its frames are unbounded: no limit (its learned position embedding,
        where it has one, takes exactly one size: :meth:`check_family_call`)."""
        cfg, s = info.transformer_config, info.vae_config.spatial_compression
        if cfg.patch_size_t is None or not cfg.use_rotary_positional_embeddings:
            return SizeLimits()
        mh, mw = info.size_multiple
        p = cfg.patch_size
        return SizeLimits(
            height=cfg.sample_height // p * p * s // mh * mh,
            width=cfg.sample_width // p * p * s // mw * mw,
            reason=f"the RoPE position grid of {cfg.sample_height // p}x{cfg.sample_width // p} patches: "
            f"sample_height={cfg.sample_height}, sample_width={cfg.sample_width} in "
            f"{info.checkpoint.config_file('transformer')}, patch_size {p}, VAE {s}x",
        )

    @classmethod
    def model_size(cls, info: CogVideoXInfo, call) -> ModelSize:
        """Video patches of one sample plus the text tokens: one joint ``[text; video]`` sequence."""
        cfg, s = info.transformer_config, info.vae_config.spatial_compression
        t, _ = info.latent_frames(call.num_frames)
        mult = s * cfg.patch_size
        video = (t // cfg.patch_t) * (call.height // mult) * (call.width // mult)
        tile = CogVideoXTiling.from_config(info.vae_config)  # the VAE's enable_tiling() defaults
        side = int(tile.tile_sample_min_width >= tile.tile_sample_min_height)  # the longer side's axis
        return ModelSize(
            tokens=video + call.max_sequence_length,
            hidden_size=cfg.inner_dim,
            ffn_dim=4 * cfg.inner_dim,
            num_layers=cfg.num_layers,
            decode_tile=max(tile.tile_sample_min_height, tile.tile_sample_min_width),
            decode_tile_stride=tile.decode_params[1][side] * tile.spatial_compression,
            decode_tile_keeps_factor=True,
        )

    @classmethod
    def text_token_limit(cls, info: CogVideoXInfo) -> tuple[int, str]:
        """T5 has no position table: the tokenizer's ``model_max_length`` (226 in the
        releases), else the transformer's ``max_text_seq_length``."""
        cfg = info.transformer_config
        return tokenizer_token_limit(
            info,
            cfg.max_text_seq_length,
            f"max_text_seq_length={cfg.max_text_seq_length} in "
            f"{info.checkpoint.config_file('transformer')}; T5 has no position table",
        )

    @classmethod
    def check_family_call(cls, info: CogVideoXInfo, call) -> None:
        cfg, s = info.transformer_config, info.vae_config.spatial_compression
        if call.num_videos_per_prompt != 1:
            raise InputError(
                Arg("num_videos_per_prompt", call.num_videos_per_prompt),
                ": the CogVideoX pipelines make one video per prompt (repeat the prompt instead)",
            )
        if cfg.use_learned_positional_embeddings and (call.height // s, call.width // s) != (
            cfg.sample_height,
            cfg.sample_width,
        ):
            raise InputError(
                Arg("height", call.height),
                ", ",
                Arg("width", call.width),
                ": this checkpoint's learned "
                "position embedding "
                f"only works at {cfg.sample_height * s}x{cfg.sample_width * s} (the reference refuses "
                "other sizes)",
            )
        if cfg.uses_position_table and call.max_sequence_length != cfg.max_text_seq_length:
            raise InputError(
                Arg("max_sequence_length", call.max_sequence_length),
                f": this checkpoint adds a position table made for {cfg.max_text_seq_length} text tokens; use ",
                Arg("max_sequence_length", cfg.max_text_seq_length),
            )
        t, pad = info.latent_frames(call.num_frames)
        if cfg.use_rotary_positional_embeddings:  # a 1.5 grid past the model's RoPE grid is refused
            mult = s * cfg.patch_size
            rope_axis_tables(cfg, (t // cfg.patch_t, call.height // mult, call.width // mult))
        if call.image is not None and len(as_list(call.image)) not in (1, call.batch):
            raise InputError(
                f"image has {len(as_list(call.image))} entries but there are {call.batch} prompts; "
                "give one image or one per prompt"
            )
        cls.check_noise(info, call)
        out = decoded_frames(t - pad, info.vae_config.temporal_compression)
        if out != call.num_frames:
            logger.warning(
                "%s gives %d latent frames, which the VAE decodes to %d frames; returning %d frames, "
                "as diffusers' %s does (use 4k+1 frames, e.g. 49 or 81, to get exactly what you ask)",
                Arg("num_frames", call.num_frames),
                t - pad,
                out,
                out,
                cls.pipeline_name,
            )

    @classmethod
    def check_noise(cls, info: CogVideoXInfo, call) -> None:
        """``image_noise`` (B, C, 1, H/8, W/8) and ``step_noise`` (steps, B, T, C, H/8, W/8), when
        given, have their shapes and only finite values (checked before any weight is read).

        Raises:
            InputError: another shape, or NaN/Inf (the message names the argument).
        """
        noise = call.extra.get("image_noise")
        if noise is not None:
            s = info.vae_config.spatial_compression
            want = (call.batch, info.vae_config.latent_channels, 1, call.height // s, call.width // s)
            eps = finite_array("image_noise", noise)
            if eps.shape != want:
                raise InputError(
                    f"image_noise has shape {eps.shape}, expected {want} = (batch, latent channels, "
                    "1, height / 8, width / 8) (the VAE posterior's layout)"
                )
        step_noise = call.extra.get("step_noise")
        if step_noise is not None:
            step_noise = finite_array("step_noise", step_noise)
            want = (call.num_inference_steps,) + cls.latent_shape(info, call)
            if step_noise.shape != want:
                raise InputError(
                    f"step_noise has shape {tuple(step_noise.shape)}, expected {want} = (steps, batch, "
                    "latent frames, channels, height / 8, width / 8)"
                )

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls,
        info: CogVideoXInfo,
        *,
        dtype,
        mesh,
        offload,
        staging,
        offload_experts=True,
        text_encoder_dtype: Any = jnp.float32,
        vae_dtype: Any = jnp.float32,
    ) -> dict[str, Any]:
        """Tokenizer, T5 (``text_encoder_dtype``: float32 by default, because the reference
        attends the padded positions, where a bf16 T5 drifts), transformer, VAE, scheduler;
        every checkpoint checked against its model before the first weight is read."""
        return COMPONENTS.load(
            info,
            dtype=dtype,
            mesh=mesh,
            offload=offload,
            staging=staging,
            text_encoder_dtype=text_encoder_dtype,
            vae_dtype=vae_dtype,
        )

    # ------------------------------------------------------------------ call hooks
    def check_components(self) -> None:
        if not isinstance(self.pipe.scheduler, _SCHEDULERS):
            raise InputError(
                f"pipe.scheduler is a {type(self.pipe.scheduler).__name__}; the CogVideoX pipelines run "
                "CogVideoXDDIMScheduler or CogVideoXDPMScheduler"
            )

    def encode_text(self, texts, max_sequence_length, truncation=None) -> jax.Array:
        """T5 states (B, L, D), L = max_sequence_length, as ``_get_t5_prompt_embeds``: the prompts
        as given, padded to L, encoded without an attention mask, nothing zeroed."""
        tokens = self.pipe.tokenizer(list(texts), max_sequence_length, truncation=truncation)
        return encode_tokens(self.pipe.text_encoder, tokens, attend_padding=True)

    def condition(self, call, stats) -> dict:
        """I2V: ``image_latents`` (B, T, h, w, C): a sample of the VAE posterior of each image,
        scaled, followed by ``T - 1`` zero frames (the reference's ``prepare_latents``)."""
        if call.image is None:
            return {}
        with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
            images = as_list(call.image)
            images = images * call.batch if len(images) == 1 else images
            pixels = np.stack([vae_image_preprocess(im, call.height, call.width) for im in images])[:, None]
            mean, logvar = encode_with(self.pipe, "vae", self.pipe.vae.encode, pixels)  # (B, 1, h, w, C) each
            shape = (call.batch, mean.shape[-1], 1) + mean.shape[2:4]
            noise = call.extra.get("image_noise")  # its shape and values checked by check_noise
            if noise is None:
                key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 2)
                eps = np.asarray(jax.random.normal(key, shape, jnp.float32))
            else:
                eps = np.asarray(noise, np.float32)
            z = mean + np.exp(np.float32(0.5) * logvar) * eps.transpose(0, 2, 3, 4, 1)  # the posterior's sample
            z = np.asarray(self.pipe.vae.normalize_latents(z))
            t, _ = self.pipe.info.latent_frames(call.num_frames)
            pad = np.zeros((call.batch, t - 1) + z.shape[2:], np.float32)
        stats.sample_memory()
        return {"image_latents": jnp.asarray(np.concatenate([z, pad], axis=1))}

    def prepare_latents(self, call, noise, cond) -> jax.Array:
        return jnp.transpose(noise, (0, 1, 3, 4, 2))  # (B, T, C, h, w) -> (B, T, h, w, C)

    def set_timesteps(self, call, latents):
        if isinstance(self.pipe.scheduler, CogVideoXDPMScheduler):
            return self.pipe.scheduler.set_timesteps(
                call.num_inference_steps, sample_shape=latents.shape, seed=call.seed + 1
            )
        if call.extra.get("step_noise") is not None:
            raise InputError(
                f"step_noise is only used by CogVideoXDPMScheduler; this pipeline runs {type(self.pipe.scheduler).__name__}"
            )
        return self.pipe.scheduler.set_timesteps(call.num_inference_steps, sample_shape=latents.shape)

    def step_args(self, call, embeds, cond, state, expert):
        """:class:`CogVideoXStepInputs`; its guidance (steps,) is read whole by every device,
        step_noise (steps, B, ...) splits on B."""
        steps = int(state.num_inference_steps)
        if call.extra.get("use_dynamic_cfg"):
            guidance = dynamic_guidance_scales(
                call.guidance_scale, np.asarray(state.timesteps), call.num_inference_steps
            )
        else:
            guidance = np.full((steps,), call.guidance_scale, np.float32)
        step_noise = call.extra.get("step_noise")  # its shape and values checked by check_noise
        if step_noise is not None:
            step_noise = jnp.transpose(jnp.asarray(step_noise, jnp.float32), (0, 1, 2, 4, 5, 3))
        ofs = jnp.full((1,), 2.0, jnp.float32) if self.pipe.info.transformer_config.has_ofs else None
        inputs = CogVideoXStepInputs(
            embeds, jnp.asarray(guidance), ofs=ofs, image_latents=cond.get("image_latents"), step_noise=step_noise
        )
        axes = {"guidance": (None,)}
        if step_noise is not None:
            axes["step_noise"] = (None, "batch") + (None,) * (step_noise.ndim - 2)
        return inputs, axes

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        x = latents.astype(self.pipe.dtype)
        if inputs.image_latents is not None:
            x = jnp.concatenate([x, inputs.image_latents.astype(self.pipe.dtype)], axis=-1)
        (x,) = cfg_pair(do_cfg, x)
        return x, jnp.broadcast_to(state.timestep, (x.shape[0],)), inputs.embeds, inputs.ofs

    def guidance(self, state, inputs) -> jax.Array:
        return inputs.guidance[jnp.minimum(state.step_index, state.num_inference_steps - 1)]

    def scheduler_update(self, state, pred, latents, inputs):
        pred = pred.astype(jnp.float32)
        step_noise = inputs.step_noise
        if isinstance(self.pipe.scheduler, CogVideoXDPMScheduler):
            i = jnp.minimum(state.step_index, state.num_inference_steps - 1)
            return self.pipe.scheduler.step(state, pred, latents, None if step_noise is None else step_noise[i])
        return self.pipe.scheduler.step(state, pred, latents)

    def step_key(self) -> Any:
        return self.pipe.scheduler

    def latents_output(self, latents) -> np.ndarray:
        return np.asarray(jnp.transpose(latents, (0, 1, 4, 2, 3)))

    def loop_latents_to_diffusers(self, x):
        """(B, T, C, h, w), as the reference's denoising loop holds them."""
        return jnp.transpose(x, (0, 1, 4, 2, 3))

    def loop_latents_from_diffusers(self, y, like):
        return jnp.transpose(y, (0, 1, 3, 4, 2))

    def latents_to_decode(self, call, latents):
        _, pad = self.pipe.info.latent_frames(call.num_frames)
        return latents[:, pad:]


class CogVideoXPipeline(VideoPipeline):
    """CogVideoX / CogVideoX1.5 text-to-video (reference: ``diffusers.CogVideoXPipeline``).

    Family keywords: ``use_dynamic_cfg`` (the reference's cosine guidance schedule,
    :func:`dynamic_guidance_scales`), ``step_noise`` (CogVideoXDPMScheduler only: the noise each
    step adds, (steps, B, T, C, H/8, W/8)). ``latents`` is (B, T, C, H/8, W/8), T including
    CogVideoX1.5's padding frames; ``output_type="latent"`` returns that layout, padding included.
    Set ``pipe.scheduler = CogVideoXDPMScheduler(pipe.scheduler.config)`` to sample with DPM.
    """

    family = CogVideoXHooks


class CogVideoXImageToVideoHooks(CogVideoXHooks):
    """The hooks of :class:`CogVideoXImageToVideoPipeline`."""

    pipeline_name = "CogVideoXImageToVideoPipeline"

    task = "i2v"
    call_options = CogVideoXHooks.call_options + (
        CallOption("image_noise", OBJECT, "The noise of the image's VAE posterior sample, (B, C, 1, H/8, W/8)."),
    )


class CogVideoXImageToVideoPipeline(VideoPipeline):
    """CogVideoX-5B-I2V / CogVideoX1.5-5B-I2V (reference: ``diffusers.CogVideoXImageToVideoPipeline``):
    ``pipe(image, prompt, ...)``.

    ``image``: a PIL image or uint8 array (H, W, 3), resized to exactly height x width (Lanczos,
    as the reference), or a list with one per prompt. Its VAE latent (one posterior sample,
    scaled) is the first of T latent frames, the rest zeros, concatenated to the noisy latents in
    channels at every step; CogVideoX1.5-I2V also feeds ``ofs = 2.0``. ``image_noise``: the
    standard normal noise of that sample, (B, C, 1, H/8, W/8); default from ``seed``.
    """

    family = CogVideoXImageToVideoHooks
    __call__ = image_first_call
