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

import dataclasses
import logging
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.t5 import encode_tokens
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import Arg, InputError, Message, joined
from vidax.io.image import one_image, to_rgb_image, vae_image_preprocess
from vidax.models.ltx.conditions import checked_number, condition_items
from vidax.models.ltx.config import LTXInfo, read_ltx_checkpoint
from vidax.models.ltx.upsampler import normalize_latents, torch_lerp
from vidax.pipelines.base import ModelSize, VideoPipeline, cfg_pair, frames_of_form, image_first_call
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TEXT_ENCODER, TRANSFORMER, VAE, ComponentTable
from vidax.pipelines.options import FRAME_RATE_RANGE, OBJECT, VIDEO_FILE, CallOption
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.sampling import classifier_free_guidance, rescale_noise_cfg
from vidax.pipelines.step_inputs import StepInputs, step_inputs

logger = logging.getLogger("vidax.pipeline")


def _per_video(name: str, value: Any, batch: int, prompts: int) -> list[float]:
    """``decode_timestep`` / ``decode_noise_scale``: one number, or one per prompt (diffusers'
    list form), repeated for each video of the prompt."""
    if isinstance(value, (list, tuple)):
        if len(value) != prompts:
            raise InputError(f"{name} is a list of {len(value)}; give one number or one per prompt ({prompts})")
        values = [checked_number(name, v) for v in value]
        return [v for v in values for _ in range(batch // prompts)]
    return [checked_number(name, value)] * batch


#: The keywords every LTX-Video pipeline takes.
LTX_OPTIONS = (
    CallOption(
        "frame_rate",
        float,
        "Frame rate of the video (LTX-Video: the model conditions on it, default the checkpoint's). Also the "
        "mp4's unless --fps is given.",
        "the checkpoint's",
        low=FRAME_RATE_RANGE[0],
        high=FRAME_RATE_RANGE[1],
    ),
    CallOption("guidance_rescale", float, "Guidance rescale factor phi (LTX-Video, default 0).", "0", low=0, high=1),
)
#: The decode keywords of LTX-Video 0.9.1+ (a timestep-conditioned VAE).
LTX_DECODE_OPTIONS = (
    CallOption(
        "decode_timestep",
        float,
        "Timestep the VAE decodes at (LTX-Video 0.9.1+); in Python also one per prompt.",
        "the checkpoint's",
        low=0,
        per_prompt=True,
    ),
    CallOption(
        "decode_noise_scale",
        float,
        "Noise mixed into the latents before decoding (LTX-Video 0.9.1+); in Python also one per prompt.",
        "the decode timestep",
        low=0,
        per_prompt=True,
    ),
)


@step_inputs
class LTXStepInputs(StepInputs):
    """The step inputs of LTX-Video T2V / I2V: ``embeds`` is ``(context, attention mask)``;
    ``guidance_rescale`` the float32 ``rescale_noise_cfg`` factor, ``rope_scale`` the (3,)
    ``rope_interpolation_scale``, ``frame_mask`` the I2V conditioning mask of the latent frames
    (1 on frame 0; None for T2V)."""

    guidance_rescale: Any = None
    rope_scale: Any = None
    frame_mask: Any = None


@step_inputs
class LTXConditionStepInputs(StepInputs):
    """The step inputs of :class:`LTXConditionPipeline`: ``embeds`` and ``guidance_rescale`` as
    :class:`LTXStepInputs`; ``coords`` the tokens' video coordinates (B, 3, N), ``token_mask``
    the conditioning strength of every token (B, N) (None without conditions), ``init`` the
    prepared latents the hard-conditioned tokens start from, ``noise_scale`` the
    ``image_cond_noise_scale``, ``key`` the PRNG key of their per-step noise."""

    guidance_rescale: Any = None
    coords: Any = None
    token_mask: Any = None
    init: Any = None
    noise_scale: Any = None
    key: Any = None


def decode_values(call) -> tuple[np.ndarray, np.ndarray]:
    """``(decode_timestep, decode_noise_scale)`` (B,) float32 of ``call``: one value per video (a
    number, or one per prompt), the noise scale ``decode_timestep`` where not given. Reads
    ``call.extra``, ``call.batch`` and ``call.prompts``."""
    x = call.extra
    timestep = x.get("decode_timestep", 0.0)
    noise_scale = x.get("decode_noise_scale")
    t = _per_video("decode_timestep", timestep, call.batch, len(call.prompts))
    n = t if noise_scale is None else _per_video("decode_noise_scale", noise_scale, call.batch, len(call.prompts))
    return np.asarray(t, np.float32), np.asarray(n, np.float32)


def decode_noise(info: Any, call, z: jax.Array) -> jax.Array:
    """The decode hooks every LTX-Video / LTX-2 pipeline shares (``LTXPipeline.__call__``'s end):
    with a timestep-conditioned VAE (``info.vae_config.timestep_conditioning``) ``(1 - s) z + s
    noise`` per video (s = ``decode_noise_scale``, default ``decode_timestep``; the noise from
    ``call.seed``'s key stream 2), else ``z``."""
    if not info.vae_config.timestep_conditioning:
        return z
    _, scale = decode_values(call)
    key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 2)
    noise = jax.random.normal(key, z.shape, z.dtype)
    s = jnp.asarray(scale, z.dtype).reshape((-1,) + (1,) * (z.ndim - 1))
    return (1 - s) * z + s * noise


def decode_timestep_kwargs(info: Any, call) -> dict:
    """The VAE decode's ``timestep`` (B,) (``decode_timestep``) with a timestep-conditioned VAE, else {}."""
    if not info.vae_config.timestep_conditioning:
        return {}
    timestep, _ = decode_values(call)
    return {"timestep": jnp.asarray(timestep)}


def packed_latent_shape(info: LTXInfo, call) -> tuple[int, ...]:
    """The packed video tokens ``(B, F' H' W', C)`` of ``call`` (LTXPipeline's, LTX2Pipeline's ``latents=``)."""
    f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
    return (call.batch, f * h * w, info.transformer_config.in_channels)


def ltx_model_size(info: LTXInfo, call) -> ModelSize:
    """The transformer's numbers of the memory model (:class:`ModelSize`) for LTX-Video's
    transformer and VAE (LTX-2 adds its sound's tokens)."""
    cfg = info.transformer_config
    f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
    from vidax.models.ltx.vae import LTXTiling

    vae, tiles = info.vae_config, LTXTiling()
    return ModelSize(
        tokens=f * h * w,
        hidden_size=cfg.inner_dim,
        ffn_dim=4 * cfg.inner_dim,
        num_layers=cfg.num_layers,
        # the whole clip at once, or one temporal tile of --vae-tiling (17 frames: 3 latent ones)
        decode_frames=call.num_frames,
        # the decoder's last level: its first channels at 1 / patch_size of the pixels a side
        decode_channels=max(1, vae.decoder_block_out_channels[0] // vae.patch_size**2),
        decode_tile=tiles.tile_sample_min_height,
        decode_tile_stride=tiles.tile_sample_stride_height,
        decode_tile_frames=tiles.tile_sample_min_num_frames + 1,
        decoder="ltx",
    )


def frame_rate_fps(call, fps: Any) -> Any:
    """The ``frame_rate`` the model conditioned on as the video's fps, when given (else ``fps``,
    the checkpoint's)."""
    rate = call.extra.get("frame_rate")
    return fps if rate is None else Fraction(rate).limit_denominator(1001)


def check_ltx_args(info: LTXInfo, call) -> None:
    """The keywords every LTX-Video / LTX-2 pipeline checks the same way: ``decode_timestep`` /
    ``decode_noise_scale``, ``timesteps`` (``frame_rate`` and ``guidance_rescale``: by their
    declarations).

    Raises:
        InputError: a value out of range (naming it).
    """
    x = call.extra
    for name in ("decode_timestep", "decode_noise_scale"):
        if x.get(name) is not None:
            _per_video(name, x[name], call.batch, len(call.prompts))
    if x.get("timesteps") is not None:
        t = np.asarray(x["timesteps"], np.float64)
        n = info.scheduler_config.get("num_train_timesteps", 1000)
        if (
            t.ndim != 1
            or t.size == 0
            or not np.all(np.isfinite(t))
            or np.any(np.diff(t) >= 0)
            or t[0] > n
            or t[-1] <= 0
        ):
            raise InputError(
                f"timesteps must be a strictly descending list of numbers in (0, {n}], got {x['timesteps']!r}"
            )


def linspace_sigmas(call) -> np.ndarray:
    """The sigmas before the shift: ``linspace(1, 1/N, N)`` (N = ``num_inference_steps``)."""
    n = call.num_inference_steps
    return np.linspace(1.0, 1 / n, n)


def shifted_schedule(scheduler: Any, sigmas: np.ndarray, tokens: int) -> Any:
    """The scheduler state of ``sigmas`` (host arithmetic only), shifted by ``mu`` =
    ``calculate_shift`` of the video token count where the config shifts dynamically."""
    mu = scheduler.calculate_shift(tokens) if scheduler.config.use_dynamic_shifting else None
    return scheduler.set_timesteps(len(sigmas), sigmas=sigmas, mu=mu)


def check_shifted_schedule(info: LTXInfo, scheduler: Any, call, sigmas: np.ndarray) -> None:
    """Build the call's schedule of ``sigmas`` (:func:`shifted_schedule`) with ``scheduler`` (the
    checkpoint's, built from its config, or one the user set), from configs alone. Where the
    config shifts dynamically, ``mu`` grows with the video's token count; past
    :meth:`~vidax.schedulers.FlowMatchEulerDiscreteScheduler.largest_seq_len` every sigma is 1.0
    and the error names that limit and a size within it.

    Raises:
        InputError: the schedule is not valid (the scheduler's reason, or the size limit).
    """
    n = len(sigmas)
    f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
    tokens = f * h * w
    mu = scheduler.calculate_shift(tokens) if scheduler.config.use_dynamic_shifting else None
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # e^mu past float32: sigmas of 1 or NaN, named below
            scheduler.set_timesteps(n, sigmas=sigmas, mu=mu)
        return
    except (InputError, OverflowError):  # OverflowError: e^mu past a float64 (math.exp), as in diffusers
        top = scheduler.largest_seq_len(n, sigmas=sigmas) if mu is not None else None
        if not top or tokens <= top:
            raise  # not the size (e.g. one step, which shift_terminal cannot stretch)
    c, v = scheduler.config, info.vae_config
    s, k = v.spatial_compression, v.temporal_compression
    fit = (
        [Message(Arg("num_frames", (top // (h * w) - 1) * k + 1), " at this height and width")]
        if top // (h * w) >= 1
        else []
    )
    scale = (top / tokens) ** 0.5
    hs, ws = int(h * scale), int(w * scale)
    while hs >= 1 and ws >= 1 and f * hs * ws > top:
        hs, ws = hs - 1, max(1, int(hs * w / h))
    if hs >= 1 and ws >= 1:
        fit.append(Message(Arg("height", hs * s), ", ", Arg("width", ws * s), " at this ", Arg("num_frames")))
    raise InputError(
        Arg("height", call.height),
        ", ",
        Arg("width", call.width),
        ", ",
        Arg("num_frames", call.num_frames),
        f" make {tokens} latent tokens ({f} x {h} x {w}), more than this scheduler config's dynamic shift allows with ",
        Arg("num_inference_steps", n),
        ": "
        f"its largest valid size is {top} latent tokens. mu grows with the token count along the line from "
        f"base_shift={c.base_shift} at base_image_seq_len={c.base_image_seq_len} to max_shift={c.max_shift} at "
        f"max_image_seq_len={c.max_image_seq_len}, extended without a limit as in diffusers; at mu={mu:.1f} every "
        "float32 sigma of the schedule is 1.0, so nothing would be denoised. Within the limit: ",
        *(joined(fit, " or ") or ["a smaller ", Arg("height"), ", ", Arg("width"), " or ", Arg("num_frames")]),
    )


def encode_latents(pipe: Any, pixels: np.ndarray, key: jax.Array) -> jax.Array:
    """Frames ``(F, H, W, 3)`` float32 in [-1, 1] -> their normalised latent ``(1, F', H', W',
    C)`` by ``pipe.vae``: a posterior sample ``mean + std * noise`` (``retrieve_latents``, noise
    from ``key``), normalised as the reference's ``_normalize_latents(z, latents_mean,
    latents_std)``: without the scaling factor (the reference's default 1.0 there; every released
    config has 1.0)."""
    mean, logvar = encode_with(pipe, "vae", pipe.vae.encode, jnp.asarray(pixels)[None])
    z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)
    return normalize_latents(z.astype(jnp.float32), pipe.vae.latents_mean[...], pipe.vae.latents_std[...])


def first_frame_condition(pipe: Any, call, stats) -> dict:
    """Image-to-video (``call.image``; {} without one): ``frame_mask`` (F',) float32, 1 on latent
    frame 0 (the reference's conditioning mask), and ``first_frame`` (1, 1, H', W', C), the
    image's normalised latent (unless ``latents`` were given, as the reference)."""
    if call.image is None:
        return {}
    f, _, _ = pipe.info.latent_grid(call.num_frames, call.height, call.width)
    cond = {"frame_mask": jnp.zeros((f,), jnp.float32).at[0].set(1.0)}
    if call.latents is not None:
        return cond
    with stats.timed("text_encode_s"):
        pixels = vae_image_preprocess(to_rgb_image(call.image), call.height, call.width)
        first = encode_latents(pipe, pixels[None], jax.random.fold_in(jax.random.PRNGKey(call.seed), 1))
    stats.sample_memory()
    return {**cond, "first_frame": first}


def unpacked_latents(info: LTXInfo, call, noise: jax.Array, cond: dict) -> jax.Array:
    """Packed (B, N, C) -> channels-last (B, F', H', W', C); I2V (``cond["first_frame"]``): frame 0
    is the image latent."""
    f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
    x = noise.reshape(noise.shape[0], f, h, w, noise.shape[-1])
    if "first_frame" in cond:
        x = x.at[:, :1].set(jnp.broadcast_to(cond["first_frame"], x[:, :1].shape))
    return x


#: The components: the text encoder and the transformer in the pipeline's dtype, the VAE in
#: ``vae_dtype`` (float32 by default).
COMPONENTS = ComponentTable(
    files={"tokenizer": TextTokenizer},
    weighted={"text_encoder": TEXT_ENCODER, "transformer": TRANSFORMER, "vae": VAE},
)


class LTXHooks(FamilyHooks):
    """The LTX-Video family's hooks, in one place: what :class:`LTXPipeline`,
    :class:`LTXImageToVideoPipeline` and :class:`LTXConditionPipeline` share (:class:`LTXPipeline`'s own; the other classes' hooks subclass
    them). The functions above (decode noise, schedule, packed latents) also serve LTX-2.
    """

    pipeline_name = "LTXPipeline"

    latents_layout = "(batch, latent frames x height/32 x width/32, latent channels) packed tokens"
    call_options = LTX_OPTIONS + LTX_DECODE_OPTIONS
    prompt_embeds_args = ("prompt_embeds", "prompt_attention_mask")
    #: diffusers casts the prediction to float32 before the CFG combination.
    guidance_dtype = jnp.float32

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> LTXInfo:
        return read_ltx_checkpoint(checkpoint)

    @classmethod
    def class_for_task(cls, task: str) -> type:
        return LTXPipeline if task == "t2v" else LTXImageToVideoPipeline

    @classmethod
    def resolve_num_frames(cls, info: LTXInfo, num_frames: int) -> int:
        return frames_of_form(num_frames, info.vae_config.temporal_compression, "LTXPipeline")

    @classmethod
    def latent_shape(cls, info: LTXInfo, call) -> tuple[int, ...]:
        return packed_latent_shape(info, call)

    @classmethod
    def model_size(cls, info: LTXInfo, call) -> ModelSize:
        return ltx_model_size(info, call)

    @classmethod
    def check_family_call(cls, info: LTXInfo, call) -> None:
        one_image(call.image, "LTXImageToVideoPipeline takes")
        check_ltx_args(info, call)
        if call.image is not None and call.latents is not None:
            logger.warning(
                "latents were given: their first latent frame is the conditioning frame and image is "
                "not encoded, as in diffusers' LTXImageToVideoPipeline"
            )

    def video_fps(self, call):
        """The ``frame_rate`` the model conditioned on, when given (else the checkpoint's)."""
        return frame_rate_fps(call, self.pipe.defaults.fps)

    @classmethod
    def check_schedule(cls, info: LTXInfo, scheduler: Any, call) -> None:
        """:func:`check_shifted_schedule` of :meth:`schedule_sigmas`.

        Raises:
            InputError: the schedule is not valid (the scheduler's reason, or the size limit).
        """
        check_shifted_schedule(info, scheduler, call, cls.schedule_sigmas(call))

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls, info: LTXInfo, *, dtype, mesh, offload, staging, offload_experts=True, vae_dtype: Any = jnp.float32
    ) -> dict[str, Any]:
        """Tokenizer, T5, the transformer, the VAE (``vae_dtype``, float32 by default), scheduler;
        every checkpoint checked against its model before the first weight is read."""
        return COMPONENTS.load(info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, vae_dtype=vae_dtype)

    # ------------------------------------------------------------------ call hooks
    #: The T5 sees the attention mask (LTXConditionPipeline) or not (LTXPipeline, I2V).
    text_attention_mask = False

    def encode_text(self, texts, max_sequence_length, truncation=None):
        """``(embeds (B, L, D), mask (B, L) bool)`` as ``_get_t5_prompt_embeds``: L =
        max_sequence_length padded tokens; the embeddings of padded positions are kept."""
        tokens = self.pipe.tokenizer(texts, max_sequence_length, truncation=truncation)
        embeds = encode_tokens(self.pipe.text_encoder, tokens, attend_padding=not self.text_attention_mask)
        return embeds, jnp.asarray(tokens.attention_mask, bool)

    def condition(self, call, stats) -> dict:
        """Image-to-video: :func:`first_frame_condition`."""
        return first_frame_condition(self.pipe, call, stats)

    def encode_latents(self, pixels, key) -> jax.Array:
        """:func:`encode_latents` by this pipeline's VAE."""
        return encode_latents(self.pipe, pixels, key)

    def prepare_latents(self, call, noise, cond) -> jax.Array:
        """Packed (B, N, C) -> channels-last (B, F', H', W', C); I2V: frame 0 is the image latent."""
        return unpacked_latents(self.pipe.info, call, noise, cond)

    @classmethod
    def schedule_sigmas(cls, call) -> np.ndarray:
        """The sigmas before the shift: ``linspace(1, 1/N, N)`` (N = ``num_inference_steps``)."""
        return linspace_sigmas(call)

    @classmethod
    def schedule(cls, info: LTXInfo, scheduler, call):
        """The scheduler state of ``call`` (host arithmetic only): :meth:`schedule_sigmas`,
        shifted by ``mu`` of the video token count where the config shifts dynamically."""
        f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        return shifted_schedule(scheduler, cls.schedule_sigmas(call), f * h * w)

    def set_timesteps(self, call, latents):
        self.check_schedule(self.pipe.info, self.pipe.scheduler, call)  # a replaced scheduler: its own limit, named
        return self.schedule(self.pipe.info, self.pipe.scheduler, call)

    def step_args(self, call, embeds, cond, state, expert):
        v = self.pipe.info.vae_config
        rate = float(call.extra.get("frame_rate", 25))
        rope_scale = jnp.asarray(
            [v.temporal_compression / rate, v.spatial_compression, v.spatial_compression], jnp.float32
        )
        rescale = jnp.asarray(call.extra.get("guidance_rescale", 0.0), jnp.float32)
        return LTXStepInputs(
            embeds,
            jnp.asarray(call.guidance_scale, jnp.float32),
            guidance_rescale=rescale,
            rope_scale=rope_scale,
            frame_mask=cond.get("frame_mask"),
        ), None

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(hidden_states (B, N, C), encoder_hidden_states, timestep, encoder_attention_mask, F', H',
        W', rope_interpolation_scale)``; I2V: timestep (B, N), 0 on frame-0 tokens."""
        context, mask = inputs.embeds
        frame_mask = inputs.frame_mask
        b, f, h, w, c = latents.shape
        x = latents.reshape(b, f * h * w, c).astype(self.pipe.dtype)
        t = state.timestep.astype(jnp.float32)
        if frame_mask is None:
            timestep = jnp.broadcast_to(t, (b,))
        else:  # t * (1 - conditioning_mask), per token
            timestep = jnp.broadcast_to(jnp.repeat(t * (1 - frame_mask), h * w), (b, f * h * w))
        x, timestep = cfg_pair(do_cfg, x, timestep)
        return x, context, timestep, mask, f, h, w, inputs.rope_scale

    def guide(self, pred, state, inputs):
        """diffusers' CFG, then ``rescale_noise_cfg`` with ``guidance_rescale`` where it is > 0."""
        guided = classifier_free_guidance(pred, inputs.guidance)
        cond = jnp.split(pred, 2, axis=0)[0]
        rescale = inputs.guidance_rescale
        return jnp.where(rescale > 0, rescale_noise_cfg(guided, cond, rescale), guided)

    def scheduler_update(self, state, pred, latents, inputs):
        pred = pred.reshape(latents.shape)
        new, state = self.pipe.scheduler.step(state, pred, latents)
        if inputs.frame_mask is not None:  # I2V: the Euler step leaves latent frame 0 (the image) as it is
            new = jnp.concatenate([latents[:, :1].astype(new.dtype), new[:, 1:]], axis=1)
        return new, state

    def loop_latents_to_diffusers(self, x):
        """Packed (B, N, C), as the reference's denoising loop holds them."""
        return x.reshape(x.shape[0], -1, x.shape[-1])

    def loop_latents_from_diffusers(self, y, like):
        return y.reshape(like.shape)

    def latents_output(self, latents) -> np.ndarray:
        """Packed (B, N, C), as the reference's ``output_type="latent"``."""
        b, f, h, w, c = latents.shape
        return np.asarray(latents.reshape(b, f * h * w, c))

    def decode_input(self, call, z):
        """:func:`decode_noise`."""
        return decode_noise(self.pipe.info, call, z)

    def decode_kwargs(self, call) -> dict:
        return decode_timestep_kwargs(self.pipe.info, call)


class LTXPipeline(VideoPipeline):
    """LTX-Video text-to-video (reference: ``diffusers.LTXPipeline``); with ``image=`` image-to-video
    as ``diffusers.LTXImageToVideoPipeline`` (the same weights do both).

    Keywords beyond the shared ones: ``frame_rate`` (fps the model conditions on, 25),
    ``guidance_rescale`` (phi in [0, 1], 0), ``decode_timestep`` (0.0) and
    ``decode_noise_scale`` (None: ``decode_timestep``), each a number or one per prompt.
    """

    family = LTXHooks


class LTXImageToVideoHooks(LTXHooks):
    """The hooks of :class:`LTXImageToVideoPipeline`."""

    pipeline_name = "LTXImageToVideoPipeline"

    task = "i2v"


class LTXImageToVideoPipeline(VideoPipeline):
    """LTX-Video image-to-video (reference: ``diffusers.LTXImageToVideoPipeline``):
    ``pipe(image, prompt, ...)``. ``image`` (PIL or uint8 (H, W, 3)) is resized to exactly height x
    width (Lanczos, no crop) and encoded as latent frame 0."""

    family = LTXImageToVideoHooks
    __call__ = image_first_call


# ====================================================================== LTXConditionPipeline
@dataclasses.dataclass(frozen=True)
class LTXVideoCondition:
    """One conditioning item of :class:`LTXConditionPipeline` (diffusers' ``LTXVideoCondition``;
    the pipeline also takes diffusers' objects, read by these attribute names).

    Attributes:
        image: a PIL image or uint8 ``(H, W, 3)`` array, or None.
        video: frames: a uint8 ``(F, H, W, 3)`` array or a list of PIL images / uint8 arrays, or None.
            Exactly one of ``image`` and ``video``.
        frame_index: the output frame the item starts at (0 <= frame_index < num_frames).
        strength: in [0, 1]; 1 holds the item's latents fixed while denoising.
    """

    image: Any = None
    video: Any = None
    frame_index: int = 0
    strength: float = 1.0


def linear_quadratic_schedule(num_steps: int, threshold_noise: float = 0.025, linear_steps: int | None = None):
    """The LTX-Video sigma schedule (N,) float32, as diffusers' ``linear_quadratic_schedule``
    (pipeline_ltx_condition.py; LTX-Video ``rf.py``): linear to ``threshold_noise`` over the first
    half, quadratic to 1 after, as ``1 - x`` without the final 0. Python floats, then float32."""
    if linear_steps is None:
        linear_steps = num_steps // 2
    if num_steps < 2:
        return np.asarray([1.0], np.float32)
    linear = [i * threshold_noise / linear_steps for i in range(linear_steps)]
    step_diff = linear_steps - threshold_noise * num_steps
    quadratic_steps = num_steps - linear_steps
    quadratic_coef = step_diff / (linear_steps * quadratic_steps**2)
    linear_coef = threshold_noise / linear_steps - 2 * step_diff / (quadratic_steps**2)
    const = quadratic_coef * (linear_steps**2)
    quadratic = [quadratic_coef * (i**2) + linear_coef * i + const for i in range(linear_steps, num_steps)]
    schedule = [1.0 - x for x in linear + quadratic + [1.0]]
    return np.asarray(schedule[:-1], np.float32)


class LTXConditionHooks(LTXHooks):
    """The hooks of :class:`LTXConditionPipeline`."""

    pipeline_name = "LTXConditionPipeline"
    takes_image = True  # one condition at frame_index, as diffusers'

    task = "t2v"
    latents_layout = "(batch, latent channels, latent frames, height/32, width/32)"
    call_options = (
        (
            CallOption("conditions", OBJECT, "LTXVideoCondition objects (image or video, frame_index, strength)."),
            CallOption(
                "video",
                VIDEO_FILE,
                "Video to condition on (LTX-Video condition pipeline: its frames from frame_index on).",
                task="v2v",
            ),
            CallOption("frame_index", OBJECT, "The frame each image / video conditions (one, or one per image)."),
            CallOption("strength", OBJECT, "How strongly each condition holds, in [0, 1] (one, or one per image)."),
            CallOption(
                "denoise_strength",
                float,
                "The fraction of the steps that run, from latents= (LTX-Video condition pipeline).",
                "1",
                low=0,
                high=1,
            ),
            CallOption("timesteps", OBJECT, "Custom timesteps, strictly descending."),
        )
        + LTX_OPTIONS
        + (
            CallOption(
                "image_cond_noise_scale",
                float,
                "Noise added to the conditioning latents each step (LTX-Video condition pipeline).",
                "0.15",
                low=0,
            ),
        )
        + LTX_DECODE_OPTIONS
    )
    text_attention_mask = True
    #: torch's ``prepare_latents(num_prefix_latent_frames=2)``: a later-frame video's first two
    #: latent frames become extra tokens.
    num_prefix_latent_frames = 2

    @classmethod
    def class_for_task(cls, task: str) -> type | None:
        """None: the condition pipeline runs every task of its checkpoint itself."""
        return None

    @classmethod
    def latent_shape(cls, info: LTXInfo, call) -> tuple[int, ...]:
        f, h, w = info.latent_grid(call.num_frames, call.height, call.width)
        return (call.batch, info.transformer_config.in_channels, f, h, w)

    @classmethod
    def check_family_call(cls, info: LTXInfo, call) -> None:
        check_ltx_args(info, call)
        x = call.extra
        if info.scheduler_config.get("use_dynamic_shifting"):
            raise InputError(
                f"{info.checkpoint.config_file('scheduler')} uses dynamic shifting, which needs mu; "
                "LTXConditionPipeline passes timesteps alone (diffusers refuses this scheduler too)"
            )
        ds = x.get("denoise_strength", 1.0)  # in [0, 1] by its declaration
        n = len(x["timesteps"]) if x.get("timesteps") is not None else call.num_inference_steps
        if min(int(n * ds), n) < 1:
            raise InputError(
                Arg("denoise_strength", ds), f" runs int({n} x {ds}) = 0 of the {n} steps; give a larger one"
            )
        if ds < 1 and call.latents is None:
            logger.warning(
                "%s without latents: the run starts from noise and only the last %d of %d steps run (as diffusers)",
                Arg("denoise_strength", ds),
                int(n * ds),
                n,
            )
        condition_items(call, info.vae_config.temporal_compression)

    # ------------------------------------------------------------------ schedule
    @classmethod
    def check_schedule(cls, info: LTXInfo, scheduler, call) -> None:
        cls.condition_schedule(scheduler, call)

    def _schedule(self, call):
        return self.condition_schedule(self.pipe.scheduler, call)

    @staticmethod
    def condition_schedule(scheduler, call):
        """``(state, sigma)``: the scheduler state of the steps that run and the sigma the given
        latents are re-noised to (``get_timesteps``); host arithmetic only."""
        timesteps = call.extra.get("timesteps")
        if timesteps is None:
            timesteps = linear_quadratic_schedule(call.num_inference_steps) * np.float32(1000)
        state = scheduler.set_timesteps(timesteps=list(timesteps))
        n = state.num_inference_steps
        ds = float(call.extra.get("denoise_strength", 1.0))
        start = max(n - min(int(n * ds), n), 0) if ds < 1 else 0
        state = dataclasses.replace(state, timesteps=state.timesteps[start:], sigmas=state.sigmas[start:])
        return state, state.sigmas[0]

    def set_timesteps(self, call, latents):
        return self._schedule(call)[0]

    @staticmethod
    def renoise_noise(seed: int, shape: tuple[int, ...]) -> jax.Array:
        """The noise given ``latents`` are re-noised with when ``denoise_strength < 1``:
        standard normal float32 of ``shape`` (B, C, F', H', W') from ``seed``'s key stream 3."""
        return jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(seed), 3), shape, jnp.float32)

    # ------------------------------------------------------------------ conditions
    def condition(self, call, stats) -> dict:
        """Encode the conditions: ``frames`` (start, end, latent (1, n, H', W', C), strength) to
        lerp into the video latents in order, ``extras`` (latent (1, n, H', W', C), strength) for
        the extra tokens, ``mask`` (B, N_total) float32 or None, ``coords`` (B, 3, N_total) float32
        (time in seconds), ``n_extra`` tokens."""
        v = self.pipe.info.vae_config
        k, s = v.temporal_compression, v.spatial_compression
        f, h, w = self.pipe.info.latent_grid(call.num_frames, call.height, call.width)
        items = condition_items(call, k, warn=False)  # check_call has warned
        frame_mask = np.zeros((f,), np.float32)
        frames, extras, extra_mask, extra_coords = [], [], [], []
        root = jax.random.fold_in(jax.random.PRNGKey(call.seed), 4)
        with stats.timed("text_encode_s"):
            for i, item in enumerate(items):
                pixels = np.stack([vae_image_preprocess(im, call.height, call.width) for im in item.frames])
                z = self.encode_latents(pixels, jax.random.fold_in(root, i))  # (1, n, h, w, C)
                n = z.shape[1]
                if item.frame_index == 0:
                    frames.append((0, n, z, item.strength))
                    frame_mask[:n] = item.strength
                    continue
                p = self.num_prefix_latent_frames
                if item.is_video and n > p:
                    start = item.frame_index // k + p
                    frames.append((start, start + n - p, z[:, p:], item.strength))
                    frame_mask[start : start + n - p] = item.strength
                    z = z[:, :p]
                extras.append((z, item.strength))
                extra_mask.append(np.full((z.shape[1] * h * w,), item.strength, np.float32))
                extra_coords.append(_scaled_ids(z.shape[1], h, w, s, k, item.frame_index))
        stats.sample_memory()
        coords = np.concatenate(extra_coords + [_scaled_ids(f, h, w, s, k, 0)], axis=1).astype(np.float32)
        coords[0] = coords[0] * np.float32(1.0 / float(call.extra.get("frame_rate", 25)))
        b = call.batch
        mask = None
        if items:
            mask = np.concatenate(extra_mask + [np.repeat(frame_mask, h * w)])
            mask = jnp.asarray(np.broadcast_to(mask, (b,) + mask.shape))
        return {
            "frames": frames,
            "extras": extras,
            "mask": mask,
            "n_extra": sum(m.size for m in extra_mask),
            "coords": jnp.asarray(np.broadcast_to(coords, (b,) + coords.shape)),
        }

    def prepare_latents(self, call, noise, cond) -> jax.Array:
        """(B, C, F', H', W') noise (or given latents) -> packed tokens (B, N_extra + F' H' W', C):
        re-noised when ``denoise_strength < 1``, the conditions lerped in, the extra tokens first."""
        x = jnp.transpose(noise, (0, 2, 3, 4, 1))
        b, _, _, _, c = x.shape
        if call.latents is not None and float(call.extra.get("denoise_strength", 1.0)) < 1:
            sigma = self._schedule(call)[1]
            eps = jnp.transpose(self.renoise_noise(call.seed, noise.shape), (0, 2, 3, 4, 1))
            x = sigma * eps + (1 - sigma) * x
        for start, end, z, strength in cond["frames"]:
            x = x.at[:, start:end].set(torch_lerp(x[:, start:end], z, strength))
        tokens = []
        root = jax.random.fold_in(jax.random.PRNGKey(call.seed), 5)
        for j, (z, strength) in enumerate(cond["extras"]):
            z = jnp.broadcast_to(z.reshape(1, -1, c), (b, z[0].size // c, c))
            tokens.append(torch_lerp(jax.random.normal(jax.random.fold_in(root, j), z.shape, jnp.float32), z, strength))
        return jnp.concatenate(tokens + [x.reshape(b, -1, c)], axis=1)

    def denoise(self, call, x, embeds, cond, stats):
        # The per-step noise of the hard-conditioned tokens starts from the prepared latents (a
        # copy: the step donates the latents' buffer).
        return super().denoise(call, x, embeds, {**cond, "init": jnp.array(x, copy=True)}, stats)

    # ------------------------------------------------------------------ steps
    def step_args(self, call, embeds, cond, state, expert):
        rescale = jnp.asarray(call.extra.get("guidance_rescale", 0.0), jnp.float32)
        scale = jnp.asarray(call.extra.get("image_cond_noise_scale", 0.15), jnp.float32)
        key = jax.random.fold_in(jax.random.PRNGKey(call.seed), 6)
        init = cond["init"] if cond["mask"] is not None else None
        return LTXConditionStepInputs(
            embeds,
            jnp.asarray(call.guidance_scale, jnp.float32),
            guidance_rescale=rescale,
            coords=cond["coords"],
            token_mask=cond["mask"],
            init=init,
            noise_scale=scale,
            key=key,
        ), None

    @staticmethod
    def noise_hard_conditions(latents, init, mask, scale, t, noise, eps: float = 1e-6):
        """``add_noise_to_image_conditioning_latents``: tokens with ``mask > 1 - eps`` become
        ``init + scale noise t^2`` (``t`` = timestep / 1000), the others stay. ``latents``,
        ``init``, ``noise`` (B, N, C); ``mask`` (B, N)."""
        noised = init + scale * noise * (t**2)
        return jnp.where((mask > 1.0 - eps)[..., None], noised, latents)

    def _step_latents(self, latents, state, inputs):
        """The latents a step starts from: with conditions, the hard-conditioned tokens noised
        (a no-op at ``image_cond_noise_scale`` 0: those tokens never leave ``init``). The noise is
        a function of the step index, so model_args and scheduler_update see the same values."""
        if inputs.token_mask is None:
            return latents
        noise = jax.random.normal(jax.random.fold_in(inputs.key, state.step_index), latents.shape, jnp.float32)
        t = state.timestep.astype(jnp.float32) / jnp.float32(1000.0)
        return self.noise_hard_conditions(latents, inputs.init, inputs.token_mask, inputs.noise_scale, t, noise)

    def _token_timesteps(self, latents, state, mask):
        t = state.timestep.astype(jnp.float32)
        if mask is None:
            return jnp.broadcast_to(t, (latents.shape[0], 1))
        return jnp.minimum(t, (1 - mask) * jnp.float32(1000.0))

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """``(hidden_states (B, N, C), encoder_hidden_states, timestep (B, N) or (B, 1),
        encoder_attention_mask, None, None, None, None, video_coords (B, 3, N))``."""
        context, text_mask = inputs.embeds
        x = self._step_latents(latents, state, inputs)
        timestep = self._token_timesteps(x, state, inputs.token_mask)
        x, timestep, coords = cfg_pair(do_cfg, x.astype(self.pipe.dtype), timestep, inputs.coords)
        return x, context, timestep, text_mask, None, None, None, None, coords

    def scheduler_update(self, state, pred, latents, inputs):
        """The per-token Euler step on the negated prediction; with conditions only the tokens
        whose ``t / 1000 - 1e-6 < 1 - mask`` take it."""
        mask = inputs.token_mask
        x = self._step_latents(latents, state, inputs).astype(jnp.float32)
        ptt = self._token_timesteps(x, state, mask)
        new, state_next = self.pipe.scheduler.step(state, -pred.reshape(x.shape), x, per_token_timesteps=ptt)
        if mask is not None:
            t = state.timestep.astype(jnp.float32) / jnp.float32(1000.0)
            new = jnp.where((t - jnp.float32(1e-6) < (1.0 - mask))[..., None], new, x)
        return new, state_next

    def final_latents(self, call, latents, cond) -> jax.Array:
        """Drop the extra tokens; (B, F', H', W', C)."""
        f, h, w = self.pipe.info.latent_grid(call.num_frames, call.height, call.width)
        x = latents[:, cond["n_extra"] :]
        return x.reshape(x.shape[0], f, h, w, x.shape[-1])

    def latents_output(self, latents) -> np.ndarray:
        """(B, C, F', H', W'), as the reference's ``output_type="latent"``."""
        return FamilyHooks.latents_output(self, latents)


class LTXConditionPipeline(VideoPipeline):
    """LTX-Video with frame conditions (reference: ``diffusers.LTXConditionPipeline``,
    pipelines/ltx/pipeline_ltx_condition.py; the 0.9.5+ checkpoints): text-to-video, or images
    and videos placed at frames of the clip.

    ``pipe(prompt, conditions=[LTXVideoCondition(image=im), LTXVideoCondition(video=v,
    frame_index=40)], ...)`` or the flat ``image=`` / ``video=`` with ``frame_index`` and
    ``strength``. What the reference does, here channels last on packed tokens ``(B, N, C)``:

    * T5 with its attention mask; the mask also goes to the transformer.
    * Schedule: ``timesteps`` (default ``linear_quadratic_schedule(N) * 1000``); with
      ``denoise_strength < 1`` only the last ``int(N * denoise_strength)`` steps run and given
      ``latents`` (clean, normalised) are re-noised to the first of their sigmas: ``sigma noise +
      (1 - sigma) latents``.
    * Each condition is VAE-encoded (a posterior sample) and normalised. ``frame_index == 0``:
      lerped (``strength``) into the leading latent frames. Later: a video's latent frames past
      the first two are lerped into the latents from ``frame_index // temporal + 2``; the first
      two (an image's one) become extra tokens, ``lerp(noise, latent, strength)``, prepended to
      the sequence with their own coordinates (``_prepare_video_ids`` / ``_scale_video_ids`` at
      ``frame_index``). Coordinates go to the transformer as ``video_coords``, time in seconds.
    * Per token: timestep ``min(t, (1 - mask) 1000)`` (mask = strength on conditioned tokens),
      with ``image_cond_noise_scale`` the hard-conditioned tokens (mask 1) are
      ``init + scale noise (t / 1000)^2`` at each step, the Euler step is per token on the
      negated prediction, and only tokens with ``t / 1000 - 1e-6 < 1 - mask`` take it.
    * The extra tokens are dropped; the latents decoded as :class:`LTXPipeline` does.

    Differences from the reference, each because it would fail or drop input: ``latents`` with
    ``denoise_strength == 1`` are the initial noise (the reference draws its own and ignores
    them); later-frame conditions work with batch > 1 (the reference's concatenation fails);
    ``image`` with ``video``, a condition with both, ``frame_index`` / ``strength`` with nothing
    to apply to, and a frame_index past the clip are refused (the reference ignores or fails).
    A flat ``video=`` is one video (the reference reads a list of frames as one-frame videos).

    Randomness: ``jax.random`` keys from ``seed`` (posterior samples, the extra tokens' noise,
    the re-noising, the per-step noise, the decode noise).
    """

    family = LTXConditionHooks


def _scaled_ids(f: int, h: int, w: int, spatial: int, temporal: int, frame_index: int) -> np.ndarray:
    """``_scale_video_ids(_prepare_video_ids(...))`` of one sample: (3, f h w) int64 pixel
    coordinates (frame, row, column) of a latent grid placed at ``frame_index``: the frame
    ``max(i temporal + 1 - temporal, 0) + frame_index``, rows and columns ``i spatial``."""
    grid = np.stack(np.meshgrid(np.arange(f), np.arange(h), np.arange(w), indexing="ij")).reshape(3, -1)
    scaled = grid * np.asarray([temporal, spatial, spatial])[:, None]
    scaled[0] = np.maximum(scaled[0] + 1 - temporal, 0) + frame_index
    return scaled
