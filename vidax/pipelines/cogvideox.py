"""CogVideoX / CogVideoX1.5 text-to-video and image-to-video, mirroring diffusers'
``CogVideoXPipeline`` and ``CogVideoXImageToVideoPipeline``.

Flow per call: tokenize prompts (no clean-up, padded to ``max_sequence_length``) -> T5 *without*
an attention mask (padded positions attended, outputs not zeroed, as the reference) -> initial
noise (or the given ``latents``) -> ``len(timesteps)`` jitted denoising steps (cond and uncond as
one batch of 2B, guidance in float32, optionally the reference's dynamic guidance, scheduler
update; I2V: the image latent padded with zero frames and concatenated in channels) -> drop the
CogVideoX1.5 padding frames -> ``latents / scaling_factor`` -> VAE decode -> frames in [0, 1].
With ``mesh=`` the steps run on a ``(data, tensor, sequence)`` mesh (see ``docs/parallelism.md``).

Layouts at the boundary are the reference's: ``latents`` (B, T, C, H/8, W/8) frame-major (the
CogVideoX transformer's layout), ``step_noise`` (steps, B, T, C, H/8, W/8), ``image_noise``
(B, C, 1, H/8, W/8) (the VAE posterior's layout). Inside, latents are channels-last.

Frame counts: ``T = (num_frames - 1) // 4 + 1`` latent frames (rounded down, as the reference);
CogVideoX1.5 (``patch_size_t = 2``) pads T to even by prepending noise frames that are dropped
before decoding. The VAE decodes T latent frames to ``4 T`` frames (T even) or ``4 (T - 1) + 1``
(T odd); when that differs from ``num_frames`` the pipeline warns and returns what the reference
returns.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.encoders.t5 import load_t5_encoder
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import ConfigError, InputError
from vidax.io.image import to_rgb_image, vae_image_preprocess
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.transformer import load_cogvideox_transformer, rope_axis_tables
from vidax.models.cogvideox.vae import CogVideoXVAEConfig, load_cogvideox_vae
from vidax.parallel.mesh import check_heads, resolve_mesh
from vidax.pipelines.common import (
    TASK_NAMES,
    VideoPipelineOutput,
    as_prompt_list,
    check_positive_int,
    check_task,
    parse_dtype,
)
from vidax.pipelines.loading import read_model_index, require_component
from vidax.pipelines.sampling import classifier_free_guidance, initial_latents, run_denoising_loop
from vidax.schedulers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler, scheduler_from_folder
from vidax.stats import RunStats

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


def decoded_frames(latent_frames: int, temporal_compression: int) -> int:
    """Frames the CogVideoX VAE decodes from ``latent_frames``: ``k T`` for even T, ``k (T-1) + 1``
    for odd T (its 2-latent-frame decode chunks, the odd remainder in the first)."""
    t, k = latent_frames, temporal_compression
    return k * t if t % 2 == 0 else k * (t - 1) + 1


@functools.partial(jax.jit, static_argnums=(0,))
def _encode_text(graphdef, params, ids):
    """T5 without an attention mask (one compiled function per encoder structure)."""
    return nnx.merge(graphdef, params)(ids, None)


class CogVideoXPipeline:
    """CogVideoX / CogVideoX1.5 text-to-video (reference: ``diffusers.CogVideoXPipeline``).

    Build with :meth:`from_pretrained` (or :func:`vidax.load_pipeline`) and call like the
    diffusers pipeline. Set ``pipe.scheduler`` to a :class:`~vidax.schedulers.CogVideoXDPMScheduler`
    (e.g. ``CogVideoXDPMScheduler(pipe.scheduler.config)``) to sample with DPM, as the reference
    allows.
    """

    task = "t2v"
    #: the device mesh the transformer and text encoder run on (None: one device).
    mesh = None

    def __init__(self, tokenizer, text_encoder, transformer, transformer_config, vae, vae_config,
                 scheduler, dtype, root: str = ""):
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.transformer = transformer
        self.transformer_config: CogVideoXTransformerConfig = transformer_config
        self.vae = vae
        self.vae_config: CogVideoXVAEConfig = vae_config
        self.scheduler = scheduler
        self.dtype = dtype
        self.root = root
        self.vae_scale_factor_spatial = 2 ** (len(vae_config.block_out_channels) - 1)
        self.vae_scale_factor_temporal = int(vae_config.temporal_compression_ratio)
        self._step_fns: dict[Any, Any] = {}

    # ------------------------------------------------------------------ loading
    @classmethod
    def for_task(cls, root: str, index: dict[str, Any], task: str) -> type:
        """This class if it runs ``task`` (``"t2v"`` or ``"i2v"``): a CogVideoX checkpoint does
        one task, the one its model_index.json names.

        Raises:
            InputError: another task (the message says which one the checkpoint does).
        """
        check_task(root, task, (cls.task,), f"{cls.__name__} ({TASK_NAMES[cls.task]})",
                   "; use a CogVideoX -I2V checkpoint")
        return cls

    @classmethod
    def describe_variant(cls, root: str, index: dict[str, Any]) -> str:
        """One line for ``vidax inspect``: the CogVideoX generation and task from the configs.

        Raises:
            ConfigError, CheckpointError: an unreadable or unsupported transformer config.
        """
        cfg = CogVideoXTransformerConfig.from_json_file(
            os.path.join(require_component(root, "transformer", index), "config.json"))
        version = "CogVideoX1.5" if cfg.patch_size_t else "CogVideoX"
        pos = ("3-D RoPE" + (" + learned position table" if cfg.use_learned_positional_embeddings else "")
               if cfg.use_rotary_positional_embeddings else "sincos position table")
        extra = ", ofs embedding" if cfg.has_ofs else ""
        return (f"{version} {TASK_NAMES[cls.task]} ({cls.__name__}): {cfg.num_layers} layers, width "
                f"{cfg.inner_dim}, {pos}{extra}; default {cfg.sample_height * 8}x{cfg.sample_width * 8}, "
                f"{cfg.sample_frames} frames")

    @classmethod
    def from_pretrained(cls, root: str, dtype: Any = "float32", text_encoder_dtype: Any = "float32",
                        vae_dtype: Any = "float32", stats: RunStats | None = None, mesh: Any = None):
        """Load every component of a CogVideoX diffusers folder.

        Args:
            root: folder with ``model_index.json``, ``tokenizer/`` (with ``tokenizer.json``),
                ``text_encoder/``, ``transformer/``, ``vae/``, ``scheduler/``.
            dtype: transformer dtype, ``"float32"`` or ``"bfloat16"``.
            text_encoder_dtype: T5 dtype; float32 by default because the reference attends the
                padded positions (no mask), where a bf16 T5 drifts.
            vae_dtype: VAE dtype.
            mesh: ``(data, tensor, sequence)`` mesh (:mod:`vidax.parallel`; anything
                :func:`~vidax.parallel.mesh.resolve_mesh` takes) or None (one device):
                the transformer runs data x tensor x sequence parallel (the CFG pair over
                ``data``), the T5 encoder tensor-parallel; the VAE runs on the first device.

        Raises:
            CheckpointError, ConfigError, InputError (see :func:`vidax.load_pipeline`);
            InputError if the transformer's heads do not split over the mesh's tensor x sequence.
        """
        mesh = resolve_mesh(mesh)
        dtype = parse_dtype(dtype)
        text_encoder_dtype = parse_dtype(text_encoder_dtype)
        vae_dtype = parse_dtype(vae_dtype)
        stats = stats or RunStats()
        t0 = time.perf_counter()
        index = read_model_index(root)
        paths = {n: require_component(root, n, index) for n in
                 ("tokenizer", "text_encoder", "transformer", "vae", "scheduler")}
        transformer_config = CogVideoXTransformerConfig.from_json_file(
            os.path.join(paths["transformer"], "config.json"))
        check_heads(mesh, transformer_config.num_attention_heads, f"{paths['transformer']}/config.json")
        vae_config = CogVideoXVAEConfig.from_json_file(os.path.join(paths["vae"], "config.json"))
        latent = vae_config.latent_channels
        want = 2 * latent if cls.task == "i2v" else latent
        if transformer_config.in_channels != want:
            raise ConfigError(
                f"{paths['transformer']}/config.json: in_channels={transformer_config.in_channels}, but "
                f"{cls.__name__} feeds {want} channels ({'noise + image latents' if cls.task == 'i2v' else 'latents'} "
                f"of the VAE's latent_channels={latent}); is this a "
                f"{'text' if cls.task == 'i2v' else 'image'}-to-video checkpoint?"
            )
        scheduler_file = os.path.join(paths["scheduler"], "scheduler_config.json")
        scheduler = scheduler_from_folder(paths["scheduler"])
        if not isinstance(scheduler, _SCHEDULERS):
            raise ConfigError(
                f"{scheduler_file}: {type(scheduler).__name__} is not a CogVideoX sampler; the CogVideoX "
                "pipelines run CogVideoXDDIMScheduler or CogVideoXDPMScheduler"
            )
        tokenizer = TextTokenizer(paths["tokenizer"])
        text_encoder = load_t5_encoder(paths["text_encoder"], dtype=text_encoder_dtype, mesh=mesh)
        transformer = load_cogvideox_transformer(paths["transformer"], dtype=dtype, mesh=mesh)
        vae = load_cogvideox_vae(paths["vae"], dtype=vae_dtype)
        pipe = cls(tokenizer, text_encoder, transformer, transformer_config, vae, vae_config,
                   scheduler, dtype, root)
        pipe.mesh = mesh
        stats.load_s += time.perf_counter() - t0
        pipe._load_stats = stats
        return pipe

    # ------------------------------------------------------------------ defaults
    def call_defaults(self) -> dict[str, Any]:
        """The reference's defaults for this checkpoint: size and frames from the transformer
        config (``sample_height * 8``, ``sample_width * 8``, ``sample_frames``), 50 steps,
        guidance 6, 226 text tokens."""
        cfg = self.transformer_config
        s = self.vae_scale_factor_spatial
        return dict(height=cfg.sample_height * s, width=cfg.sample_width * s, num_frames=cfg.sample_frames,
                    num_inference_steps=50, guidance_scale=6.0, max_sequence_length=226)

    @property
    def default_fps(self) -> int:
        """Frame rate to write videos at: 8 for CogVideoX, 16 for CogVideoX1.5 (the references'
        examples)."""
        return 16 if self.transformer_config.patch_size_t else 8

    # ------------------------------------------------------------------ text
    def encode_prompt(self, prompts: Sequence[str], max_sequence_length: int = 226) -> jax.Array:
        """T5 states ``(B, L, D)``, ``L = max_sequence_length``, as ``_get_t5_prompt_embeds``: the
        prompts as given (no clean-up), padded to L, encoded without an attention mask (padded
        positions take part), nothing zeroed. Every prompt gets the same length L whatever its
        token count. In the text encoder's dtype."""
        tokens = self.tokenizer(list(prompts), max_sequence_length)
        graphdef, params = nnx.split(self.text_encoder)
        return _encode_text(graphdef, params, jnp.asarray(tokens.input_ids))

    # ------------------------------------------------------------------ checks
    def latent_frames(self, num_frames: int) -> tuple[int, int]:
        """``(T, padding)``: latent frames the run denoises and how many of them (in front) are
        CogVideoX1.5 padding dropped before decoding."""
        k = self.vae_scale_factor_temporal
        t = (num_frames - 1) // k + 1
        pt = self.transformer_config.patch_size_t
        pad = pt - t % pt if pt and t % pt else 0
        return t + pad, pad

    def check_inputs(self, height, width, num_frames, num_inference_steps, guidance_scale, output_type,
                     max_sequence_length) -> None:
        """Validate call arguments against this checkpoint (before any work).

        Raises:
            InputError: the argument, its value and what is valid.
        """
        cfg = self.transformer_config
        for name, v in (("height", height), ("width", width), ("num_frames", num_frames)):
            check_positive_int(name, v)
        check_positive_int("num_inference_steps", num_inference_steps)
        check_positive_int("max_sequence_length", max_sequence_length)
        mult = self.vae_scale_factor_spatial * cfg.patch_size
        if height % mult or width % mult:
            raise InputError(
                f"height and width must be multiples of {mult} (VAE x{self.vae_scale_factor_spatial} "
                f"times patch_size {cfg.patch_size}), got height={height}, width={width}"
            )
        if not isinstance(guidance_scale, (int, float)) or isinstance(guidance_scale, bool) or not (
            np.isfinite(guidance_scale) and guidance_scale >= 0
        ):
            raise InputError(f"guidance_scale must be a finite number >= 0, got {guidance_scale!r}")
        if output_type not in ("np", "latent"):
            raise InputError(f"output_type must be 'np' or 'latent', got {output_type!r}")
        s = self.vae_scale_factor_spatial
        if cfg.use_learned_positional_embeddings and (height // s, width // s) != (cfg.sample_height, cfg.sample_width):
            raise InputError(
                f"height={height}, width={width}: this checkpoint's learned position embedding only "
                f"works at {cfg.sample_height * s}x{cfg.sample_width * s} (the reference refuses other sizes)"
            )
        if cfg.uses_position_table and max_sequence_length != cfg.max_text_seq_length:
            raise InputError(
                f"max_sequence_length={max_sequence_length}: this checkpoint adds a position table made "
                f"for {cfg.max_text_seq_length} text tokens; use max_sequence_length={cfg.max_text_seq_length}"
            )
        t, pad = self.latent_frames(num_frames)
        if cfg.use_rotary_positional_embeddings:  # a 1.5 grid past the model's RoPE grid is refused
            rope_axis_tables(cfg, (t // cfg.patch_t, height // mult, width // mult))
        out = decoded_frames(t - pad, self.vae_scale_factor_temporal)
        if out != num_frames:
            logger.warning(
                "num_frames=%d gives %d latent frames, which the VAE decodes to %d frames; returning %d "
                "frames, as diffusers' %s does (use 4k+1 frames, e.g. 49 or 81, to get exactly what you ask)",
                num_frames, t - pad, out, out, type(self).__name__,
            )

    # ------------------------------------------------------------------ sampling
    def _step_fn(self, do_cfg: bool, with_image: bool, with_noise: bool):
        key = (do_cfg, with_image, with_noise, self.scheduler)
        if key in self._step_fns:
            return self._step_fns[key]
        graphdef, params = nnx.split(self.transformer)
        scheduler = self.scheduler
        dpm = isinstance(scheduler, CogVideoXDPMScheduler)
        compute_dtype = self.dtype

        def step(params, latents, state, context, guidance, ofs, image_latents, step_noise):
            model = nnx.merge(graphdef, params)
            i = jnp.minimum(state.step_index, state.num_inference_steps - 1)
            x = latents.astype(compute_dtype)
            if image_latents is not None:
                x = jnp.concatenate([x, image_latents.astype(compute_dtype)], axis=-1)
            if do_cfg:
                x = jnp.concatenate([x, x], axis=0)
            timestep = jnp.broadcast_to(state.timestep, (x.shape[0],))
            pred = model(x, timestep, context, ofs).astype(jnp.float32)
            if do_cfg:
                pred = classifier_free_guidance(pred, guidance[i])
            if dpm:
                return scheduler.step(state, pred, latents, None if step_noise is None else step_noise[i])
            return scheduler.step(state, pred, latents)

        fn = (jax.jit(step, donate_argnums=(1,)), params)
        self._step_fns[key] = fn
        return fn

    def _image_latents(self, image, batch: int, t: int, height: int, width: int, noise, key) -> jax.Array:
        """The reference's I2V ``prepare_latents`` conditioning, channels-last ``(B, T, h, w, C)``:
        a sample of the VAE posterior of each image, times ``scaling_factor`` (divided, with
        ``invert_scale_latents``), followed by ``T - 1`` zero frames."""
        images = list(image) if isinstance(image, (list, tuple)) else [image]
        if len(images) == 1:
            images = images * batch
        if len(images) != batch:
            raise InputError(f"image has {len(images)} entries but there are {batch} prompts; give one image or one per prompt")
        pixels = np.stack([vae_image_preprocess(im, height, width) for im in images])[:, None]  # (B, 1, H, W, 3)
        mean, logvar = self.vae.encode(pixels)  # (B, 1, h, w, C) each
        c = mean.shape[-1]
        shape = (batch, c, 1) + mean.shape[2:4]
        if noise is None:
            eps = np.asarray(jax.random.normal(key, shape, jnp.float32))
        else:
            eps = np.asarray(noise, np.float32)
            if eps.shape != shape:
                raise InputError(
                    f"image_noise has shape {eps.shape}, expected {shape} = (batch, latent channels, 1, "
                    "height / 8, width / 8) (the VAE posterior's layout)"
                )
        eps = eps.transpose(0, 2, 3, 4, 1)
        z = mean + np.exp(np.float32(0.5) * logvar) * eps  # DiagonalGaussianDistribution.sample
        sf = self.vae_config.scaling_factor
        factor = 1 / sf if self.vae_config.invert_scale_latents else sf
        z = np.float32(factor) * z
        pad = np.zeros((batch, t - 1) + z.shape[2:], np.float32)
        return jnp.asarray(np.concatenate([z, pad], axis=1))

    def _generate(self, *, image, prompt, negative_prompt, height, width, num_frames, num_inference_steps,
                  guidance_scale, use_dynamic_cfg, seed, latents, image_noise, step_noise,
                  max_sequence_length, output_type, progress, callback) -> VideoPipelineOutput:
        if not isinstance(self.scheduler, _SCHEDULERS):
            raise InputError(
                f"pipe.scheduler is a {type(self.scheduler).__name__}; the CogVideoX pipelines run "
                "CogVideoXDDIMScheduler or CogVideoXDPMScheduler"
            )
        defaults = self.call_defaults()
        height = defaults["height"] if height is None else height
        width = defaults["width"] if width is None else width
        num_frames = defaults["num_frames"] if num_frames is None else num_frames
        # The load time is reported by the first call only: it is not part of later calls.
        first, self._load_reported = not getattr(self, "_load_reported", False), True
        stats = RunStats(load_s=getattr(self, "_load_stats", RunStats()).load_s if first else 0.0)
        self.check_inputs(height, width, num_frames, num_inference_steps, guidance_scale, output_type,
                          max_sequence_length)
        prompts = as_prompt_list("prompt", prompt)
        negatives = as_prompt_list("negative_prompt", negative_prompt, len(prompts))
        do_cfg = guidance_scale > 1.0
        batch = len(prompts)
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % 2**31)

        cfg = self.transformer_config
        t, pad = self.latent_frames(num_frames)
        s = self.vae_scale_factor_spatial
        c = cfg.in_channels // 2 if self.task == "i2v" else cfg.in_channels
        shape = (batch, t, c, height // s, width // s)
        layout = "(batch, latent frames (CogVideoX1.5: padded to even), channels, height / 8, width / 8)"
        x = jnp.transpose(initial_latents(shape, seed, latents, layout), (0, 1, 3, 4, 2))  # (B, T, h, w, C)
        dpm = isinstance(self.scheduler, CogVideoXDPMScheduler)
        if dpm:
            state = self.scheduler.set_timesteps(num_inference_steps, sample_shape=x.shape, seed=seed + 1)
        else:
            if step_noise is not None:
                raise InputError("step_noise is only used by CogVideoXDPMScheduler; this pipeline runs "
                                 f"{type(self.scheduler).__name__}")
            state = self.scheduler.set_timesteps(num_inference_steps, sample_shape=x.shape)
        steps = state.num_inference_steps
        if step_noise is not None:
            step_noise = jnp.asarray(step_noise, jnp.float32)
            if step_noise.shape != (steps,) + shape:
                raise InputError(
                    f"step_noise has shape {tuple(step_noise.shape)}, expected {(steps,) + shape} = (steps, "
                    "batch, latent frames, channels, height / 8, width / 8)"
                )
            step_noise = jnp.transpose(step_noise, (0, 1, 2, 4, 5, 3))

        with stats.timed("text_encode_s"):
            embeds = self.encode_prompt(prompts + (negatives if do_cfg else []), max_sequence_length)
            embeds = embeds.astype(self.dtype)
            embeds.block_until_ready()
        stats.sample_memory()

        image_latents = None
        if self.task == "i2v":
            with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
                key = jax.random.fold_in(jax.random.PRNGKey(seed), 2)
                image_latents = self._image_latents(image, batch, t, height, width, image_noise, key)
            stats.sample_memory()

        timesteps = np.asarray(state.timesteps)
        if use_dynamic_cfg:
            guidance = dynamic_guidance_scales(guidance_scale, timesteps, num_inference_steps)
        else:
            guidance = np.full((steps,), guidance_scale, np.float32)
        ofs = jnp.full((1,), 2.0, jnp.float32) if cfg.has_ofs else None
        step, params = self._step_fn(do_cfg, image_latents is not None, step_noise is not None)
        args = (embeds, jnp.asarray(guidance), ofs, image_latents, step_noise)
        # guidance (steps,) is read whole by every device; step_noise (steps, B, ...) splits on B.
        arg_axes = (None, (None,), None, None,
                    None if step_noise is None else (None, "batch") + (None,) * (step_noise.ndim - 2))
        x, state = run_denoising_loop(step, params, x, state, args, steps, stats, progress, callback,
                                      mesh=self.mesh, arg_axes=arg_axes)

        if output_type == "latent":
            frames = np.asarray(jnp.transpose(x, (0, 1, 4, 2, 3)))
        else:
            with stats.timed("decode_s"):
                z = np.float32(1 / self.vae_config.scaling_factor) * np.asarray(x[:, pad:])
                video = self.vae.decode(z)
                frames = np.clip(video / np.float32(2.0) + np.float32(0.5), 0.0, 1.0).astype(np.float32)
        stats.sample_memory()
        return VideoPipelineOutput(frames=frames, stats=stats)

    def __call__(
        self,
        prompt: str | Sequence[str],
        negative_prompt: str | Sequence[str] | None = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float = 6.0,
        use_dynamic_cfg: bool = False,
        seed: int | None = None,
        latents: np.ndarray | jax.Array | None = None,
        step_noise: np.ndarray | jax.Array | None = None,
        max_sequence_length: int = 226,
        output_type: str = "np",
        progress: bool = True,
        callback: Callable[[int, int], None] | None = None,
    ) -> VideoPipelineOutput:
        """Generate videos from text.

        Args:
            prompt: one prompt or a list (batch B). Used as given (no clean-up, as the reference).
            negative_prompt: one or one per prompt; default ``""`` (used when guidance_scale > 1).
            height, width: pixels, multiples of 16; default ``sample_height * 8`` x
                ``sample_width * 8`` of the transformer config (480 x 720 for CogVideoX).
            num_frames: F; default ``sample_frames`` (49). ``(F - 1) // 4 + 1`` latent frames are
                denoised (CogVideoX1.5: padded to even); F not of the form 4k+1 warns (see the
                module docstring for what is returned).
            num_inference_steps: n (> 0); the loop runs the scheduler's timesteps (n of them).
            guidance_scale: classifier-free guidance weight (>= 0); > 1 enables CFG.
            use_dynamic_cfg: the reference's cosine guidance schedule
                (:func:`dynamic_guidance_scales`); CFG still needs guidance_scale > 1.
            seed: seed of the initial noise, and of the DPM step noise and I2V posterior sample
                when those are not given (``jax.random``); random when None.
            latents: initial noise ``(B, T, C, H/8, W/8)`` float32, frame-major as the reference
                (T including CogVideoX1.5's padding frames); overrides ``seed`` for it.
            step_noise: CogVideoXDPMScheduler only: the noise each step adds,
                ``(steps, B, T, C, H/8, W/8)``, entry i the reference's noise of step i.
            max_sequence_length: text tokens L (226; checkpoints with a position table need it).
            output_type: ``"np"`` (frames) or ``"latent"`` (the final latents, padding included,
                ``(B, T, C, H/8, W/8)``, as the reference).
            progress: show progress bars.
            callback: called as ``callback(step_index, steps)`` after each step.

        Returns:
            :class:`VideoPipelineOutput` with ``frames`` float32 (B, F', H, W, 3) in [0, 1].

        Raises:
            InputError: invalid argument (the message names it and the valid values).
        """
        args = dict(locals())
        del args["self"]
        return self._generate(image=None, image_noise=None, **args)


class CogVideoXImageToVideoPipeline(CogVideoXPipeline):
    """CogVideoX-5B-I2V / CogVideoX1.5-5B-I2V (reference: ``diffusers.CogVideoXImageToVideoPipeline``).

    The image's VAE latent (one posterior sample, scaled) is the first of T latent frames, the
    rest zeros; it is concatenated to the noisy latents in channels at every step. CogVideoX1.5-I2V
    also feeds ``ofs = 2.0``. Call as ``pipe(image, prompt, ...)``.
    """

    task = "i2v"

    def call_defaults(self) -> dict[str, Any]:
        """As :meth:`CogVideoXPipeline.call_defaults`, with 49 frames (the reference's I2V default)."""
        return {**super().call_defaults(), "num_frames": 49}

    def __call__(
        self,
        image: Any,
        prompt: str | Sequence[str],
        negative_prompt: str | Sequence[str] | None = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float = 6.0,
        use_dynamic_cfg: bool = False,
        seed: int | None = None,
        latents: np.ndarray | jax.Array | None = None,
        image_noise: np.ndarray | jax.Array | None = None,
        step_noise: np.ndarray | jax.Array | None = None,
        max_sequence_length: int = 226,
        output_type: str = "np",
        progress: bool = True,
        callback: Callable[[int, int], None] | None = None,
    ) -> VideoPipelineOutput:
        """Generate videos that start from ``image``.

        Args:
            image: the conditioning image: a PIL image or uint8 array (H, W, 3) (see
                :func:`vidax.io.image.load_image`), resized to exactly height x width with
                Lanczos as the reference; or a list with one per prompt.
            image_noise: the standard normal noise of the posterior sample, ``(B, C, 1, H/8,
                W/8)`` (the reference draws it from its generator); default from ``seed``.
            Other arguments: as :meth:`CogVideoXPipeline.__call__` (``latents`` has the VAE's
            latent channels, half the transformer's ``in_channels``).

        Raises:
            InputError: no or bad image, or another invalid argument.
        """
        if image is None:
            raise InputError(f"{self.root} is an image-to-video checkpoint: image is required "
                             "(a PIL image or uint8 (H, W, 3) array; --image PATH on the command line)")
        args = dict(locals())
        del args["self"]
        for im in image if isinstance(image, (list, tuple)) else [image]:
            to_rgb_image(im)  # type / shape errors before any work
        return self._generate(**args)
