"""LTX-Video 0.9.x pipelines: the hooks of :class:`~vidax.pipelines.base.VideoPipeline`.

References (diffusers 0.42.1): ``LTXPipeline`` (text-to-video) and ``LTXImageToVideoPipeline``
(``pipelines/ltx/pipeline_ltx.py``, ``pipeline_ltx_image2video.py``).

* Text: T5 v1.1 on ``max_sequence_length`` (128) padded tokens, run without the attention mask
  (these two pipelines do not pass it); the mask goes to the transformer's cross-attention.
* Latents: ``latents=`` is packed ``(B, F' x H' x W', C)`` as the reference takes it (patch size 1,
  frame-major tokens); vidax denoises them channels-last ``(B, F', H', W', C)``.
* Schedule: sigmas ``linspace(1, 1/N, N)`` shifted by ``mu`` = ``calculate_shift`` of the video
  token count (0.9.0/0.9.1: dynamic shifting to ``shift_terminal``; 0.9.5+: no shift); CFG with
  ``guidance_rescale``; Euler steps.
* RoPE: ``rope_interpolation_scale = (temporal compression / frame_rate, spatial, spatial)``.
* Image-to-video: the VAE encoding of the image (a posterior sample, as ``retrieve_latents``) is
  latent frame 0; its tokens get timestep 0 and the Euler step leaves that frame as it is.
* Decode (0.9.1+ VAEs with timestep conditioning): the de-normalised latents are mixed with
  noise, ``(1 - decode_noise_scale) z + decode_noise_scale n``, and decoded at ``decode_timestep``.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import InputError
from vidax.io.image import to_rgb_image, vae_image_preprocess
from vidax.models.ltx.config import LTXInfo, read_ltx_checkpoint
from vidax.pipelines.base import ModelSize, VideoPipeline, cfg_pair
from vidax.pipelines.checkpoint import Checkpoint
from vidax.pipelines.common import check_task
from vidax.pipelines.sampling import classifier_free_guidance, rescale_noise_cfg

logger = logging.getLogger("vidax.pipeline")


def _number(name: str, value: Any, low: float = 0.0, high: float | None = None) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.floating, np.integer))
    if not ok or not np.isfinite(value) or value < low or (high is not None and value > high):
        valid = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InputError(f"{name} must be a number {valid}, got {value!r}")
    return float(value)


def _per_video(name: str, value: Any, batch: int, prompts: int) -> list[float]:
    """``decode_timestep`` / ``decode_noise_scale``: one number, or one per prompt (diffusers'
    list form), repeated for each video of the prompt."""
    if isinstance(value, (list, tuple)):
        if len(value) != prompts:
            raise InputError(f"{name} is a list of {len(value)}; give one number or one per prompt ({prompts})")
        values = [_number(name, v) for v in value]
        return [v for v in values for _ in range(batch // prompts)]
    return [_number(name, value)] * batch


class LTXPipeline(VideoPipeline):
    """LTX-Video text-to-video (reference: ``diffusers.LTXPipeline``); with ``image=`` image-to-video
    as ``diffusers.LTXImageToVideoPipeline`` (the same weights do both).

    Keywords beyond the shared ones: ``frame_rate`` (fps the model conditions on, 25),
    ``guidance_rescale`` (phi in [0, 1], 0), ``decode_timestep`` (0.0) and
    ``decode_noise_scale`` (None: ``decode_timestep``), each a number or one per prompt.
    """

    latents_layout = "(batch, latent frames x height/32 x width/32, latent channels) packed tokens"
    extra_call_args = ("frame_rate", "guidance_rescale", "decode_timestep", "decode_noise_scale")
    #: diffusers casts the prediction to float32 before the CFG combination.
    guidance_dtype = jnp.float32

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> LTXInfo:
        return read_ltx_checkpoint(checkpoint)

    @classmethod
    def for_task(cls, checkpoint: Checkpoint, task: str) -> type:
        info = cls.read_checkpoint(checkpoint)
        check_task(checkpoint.root, task, info.tasks, info.variant)
        return LTXPipeline if task == "t2v" else LTXImageToVideoPipeline

    @classmethod
    def resolve_num_frames(cls, info: LTXInfo, num_frames: int) -> int:
        k = info.vae_config.temporal_compression
        if num_frames % k != 1:
            rounded = num_frames // k * k + 1
            logger.warning("num_frames=%d is not of the form %dk+1; the reference makes %d frames of it "
                           "((num_frames - 1) // %d + 1 latent frames); using %d", num_frames, k, rounded, k, rounded)
            return rounded
        return num_frames

    @classmethod
    def latent_shape(cls, info: LTXInfo, call) -> tuple[int, ...]:
        f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        return (call.batch, f * h * w, info.transformer_config.in_channels)

    @classmethod
    def model_size(cls, info: LTXInfo, call) -> ModelSize:
        cfg = info.transformer_config
        f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        return ModelSize(tokens=f * h * w, hidden_size=cfg.inner_dim, ffn_dim=4 * cfg.inner_dim,
                         num_layers=cfg.num_layers)

    @classmethod
    def check_family_call(cls, info: LTXInfo, call) -> None:
        x = call.extra
        if isinstance(call.image, (list, tuple)):
            raise InputError(f"image is a list of {len(call.image)}; LTXImageToVideoPipeline takes one image "
                             "for the whole batch")
        if "frame_rate" in x:
            _number("frame_rate", x["frame_rate"], low=1e-6)
        if "guidance_rescale" in x:
            _number("guidance_rescale", x["guidance_rescale"], 0.0, 1.0)
        for name in ("decode_timestep", "decode_noise_scale"):
            if x.get(name) is not None:
                _per_video(name, x[name], call.batch, len(call.prompts))
        if x.get("timesteps") is not None:
            t = np.asarray(x["timesteps"], np.float64)
            n = info.scheduler_config.get("num_train_timesteps", 1000)
            if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)) or np.any(np.diff(t) >= 0) \
                    or t[0] > n or t[-1] <= 0:
                raise InputError(f"timesteps must be a strictly descending list of numbers in (0, {n}], got "
                                 f"{x['timesteps']!r}")
        if call.image is not None and call.latents is not None:
            logger.warning("latents were given: their first latent frame is the conditioning frame and image is "
                           "not encoded, as in diffusers' LTXImageToVideoPipeline")

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(cls, info: LTXInfo, *, dtype, mesh, offload, staging, offload_experts=True,
                        vae_dtype: Any = "float32") -> dict[str, Any]:
        """Tokenizer, T5, the transformer, the VAE (``vae_dtype``, float32 by default), scheduler."""
        from vidax.nn.inputs import parse_dtype

        load = cls.load_component
        modules: dict[str, Any] = {"tokenizer": TextTokenizer(info.checkpoint.folder("tokenizer"))}
        modules["text_encoder"] = load(info, "text_encoder", dtype=dtype, mesh=mesh, staging=staging)
        modules["transformer"] = load(info, "transformer", dtype=dtype, mesh=mesh, offload=offload)
        modules["vae"] = load(info, "vae", dtype=parse_dtype(vae_dtype), staging=staging)
        modules["scheduler"] = load(info, "scheduler")
        return modules

    # ------------------------------------------------------------------ call hooks
    #: The T5 sees the attention mask (LTXConditionPipeline) or not (LTXPipeline, I2V).
    text_attention_mask = False

    def encode_text(self, texts, max_sequence_length):
        """``(embeds (B, L, D), mask (B, L) bool)`` as ``_get_t5_prompt_embeds``: L =
        max_sequence_length padded tokens; the embeddings of padded positions are kept."""
        tokens = self.tokenizer(texts, max_sequence_length)
        embeds = encode_tokens(self.text_encoder, tokens, attend_padding=not self.text_attention_mask)
        return embeds, jnp.asarray(tokens.attention_mask, bool)

    def condition(self, call, stats) -> dict:
        """Image-to-video: ``frame_mask`` (F',) float32, 1 on latent frame 0 (the reference's
        conditioning mask), and ``first_frame`` (1, 1, H', W', C), the image's normalised latent
        (unless ``latents`` were given, as the reference)."""
        if call.image is None:
            return {}
        f, _, _ = self.info.latent_grid(call.num_frames, call.height, call.width)
        cond = {"frame_mask": jnp.zeros((f,), jnp.float32).at[0].set(1.0)}
        if call.latents is not None:
            return cond
        with stats.timed("text_encode_s"):
            pixels = vae_image_preprocess(to_rgb_image(call.image), call.height, call.width)
            mean, logvar = self.encode_with("vae", self.vae.encode, pixels[None, None])
            key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 1)
            z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)
            first = self.vae.normalize_latents(z.astype(jnp.float32))
        stats.sample_memory()
        return {**cond, "first_frame": first}

    def prepare_latents(self, call, noise, cond) -> jax.Array:
        """Packed (B, N, C) -> channels-last (B, F', H', W', C); I2V: frame 0 is the image latent."""
        f, h, w = self.info.latent_grid(call.num_frames, call.height, call.width)
        x = noise.reshape(noise.shape[0], f, h, w, noise.shape[-1])
        if "first_frame" in cond:
            x = x.at[:, :1].set(jnp.broadcast_to(cond["first_frame"], x[:, :1].shape))
        return x

    def set_timesteps(self, call, latents):
        """``mu`` = ``calculate_shift`` of the video token count (used where the config shifts
        dynamically); sigmas ``linspace(1, 1/N, N)``, or the call's ``timesteps``."""
        n = call.num_inference_steps
        f, h, w = latents.shape[1:4]
        mu = self.scheduler.calculate_shift(f * h * w) if self.scheduler.config.use_dynamic_shifting else None
        timesteps = call.extra.get("timesteps")
        if timesteps is not None:
            return self.scheduler.set_timesteps(timesteps=list(timesteps), mu=mu)
        sigmas = np.linspace(1.0, 1 / n, n)
        return self.scheduler.set_timesteps(n, sigmas=sigmas, mu=mu)

    def step_args(self, call, embeds, cond, state, expert):
        v = self.info.vae_config
        rate = float(call.extra.get("frame_rate", 25))
        rope_scale = jnp.asarray([v.temporal_compression / rate, v.spatial_compression, v.spatial_compression],
                                 jnp.float32)
        rescale = jnp.asarray(call.extra.get("guidance_rescale", 0.0), jnp.float32)
        return (embeds, jnp.asarray(call.guidance_scale, jnp.float32), rope_scale, rescale,
                cond.get("frame_mask")), None

    def model_args(self, latents, state, args, do_cfg) -> tuple:
        """``(hidden_states (B, N, C), encoder_hidden_states, timestep, encoder_attention_mask, F', H',
        W', rope_interpolation_scale)``; I2V: timestep (B, N), 0 on frame-0 tokens."""
        (context, mask), _, rope_scale, _, frame_mask = args
        b, f, h, w, c = latents.shape
        x = latents.reshape(b, f * h * w, c).astype(self.dtype)
        t = state.timestep.astype(jnp.float32)
        if frame_mask is None:
            timestep = jnp.broadcast_to(t, (b,))
        else:  # t * (1 - conditioning_mask), per token
            timestep = jnp.broadcast_to(jnp.repeat(t * (1 - frame_mask), h * w), (b, f * h * w))
        x, timestep = cfg_pair(do_cfg, x, timestep)
        return x, context, timestep, mask, f, h, w, rope_scale

    def guide(self, pred, state, args):
        """diffusers' CFG, then ``rescale_noise_cfg`` with ``guidance_rescale`` where it is > 0."""
        guided = classifier_free_guidance(pred, args[1])
        cond = jnp.split(pred, 2, axis=0)[0]
        rescale = args[3]
        return jnp.where(rescale > 0, rescale_noise_cfg(guided, cond, rescale), guided)

    def scheduler_update(self, state, pred, latents, args):
        pred = pred.reshape(latents.shape)
        new, state = self.scheduler.step(state, pred, latents)
        if args[4] is not None:  # I2V: the Euler step leaves latent frame 0 (the image) as it is
            new = jnp.concatenate([latents[:, :1].astype(new.dtype), new[:, 1:]], axis=1)
        return new, state

    def latents_output(self, latents) -> np.ndarray:
        """Packed (B, N, C), as the reference's ``output_type="latent"``."""
        b, f, h, w, c = latents.shape
        return np.asarray(latents.reshape(b, f * h * w, c))

    def _decode_values(self, call):
        x = call.extra
        timestep = x.get("decode_timestep", 0.0)
        noise_scale = x.get("decode_noise_scale")
        t = _per_video("decode_timestep", timestep, call.batch, len(call.prompts))
        n = t if noise_scale is None else _per_video("decode_noise_scale", noise_scale, call.batch, len(call.prompts))
        return np.asarray(t, np.float32), np.asarray(n, np.float32)

    def decode_input(self, call, z):
        """With a timestep-conditioned VAE: ``(1 - s) z + s noise`` per video, s = decode_noise_scale."""
        if not self.info.vae_config.timestep_conditioning:
            return z
        _, scale = self._decode_values(call)
        key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 2)
        noise = jax.random.normal(key, z.shape, z.dtype)
        s = jnp.asarray(scale, z.dtype).reshape((-1,) + (1,) * (z.ndim - 1))
        return (1 - s) * z + s * noise

    def decode_kwargs(self, call) -> dict:
        if not self.info.vae_config.timestep_conditioning:
            return {}
        timestep, _ = self._decode_values(call)
        return {"timestep": jnp.asarray(timestep)}


class LTXImageToVideoPipeline(LTXPipeline):
    """LTX-Video image-to-video (reference: ``diffusers.LTXImageToVideoPipeline``):
    ``pipe(image, prompt, ...)``. ``image`` (PIL or uint8 (H, W, 3)) is resized to exactly height x
    width (Lanczos, no crop) and encoded as latent frame 0."""

    task = "i2v"

    def __call__(self, image: Any = None, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any):
        return super().__call__(prompt, negative_prompt, image=image, **kwargs)
