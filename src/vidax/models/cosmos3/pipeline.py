"""Cosmos 3 omni text/image/video-to-video with its soundtrack: the hooks of
:class:`~vidax.pipelines.base.VideoPipeline`.

Reference: diffusers 0.42.1 ``pipelines/cosmos/pipeline_cosmos3_omni.py`` (``Cosmos3OmniPipeline``),
followed step by step:

* Prompting (:mod:`vidax.models.cosmos3.prompt`): no text encoder; the token ids go into the
  transformer's understanding pathway. The negative prompt defaults to ``""`` (with the inverse
  templates). ``fps=`` (float, default 24) is the reference's: the duration sentence, the
  positions, the sound length and the mp4's rate (``vidax generate --fps`` sets it and the mp4's).
  Departure: the reference takes a prompt of any length (its tokens join every step's attention);
  vidax cuts each prompt and negative prompt to ``max_sequence_length`` tokens (1024 by default)
  with a warning naming its length, before the templates are added.
* Tasks, picked as the reference picks them: ``video=`` video-to-video, ``image=``
  image-to-video, else text-to-video (text-to-image at ``num_frames=1``). Image-to-video: the
  image scaled to cover ``height x width`` (bilinear, antialiased, as torch's
  ``interpolate(antialias=True)``), centre-cropped, rounded to integers; latent frame 0 is the
  condition. Video-to-video: the first (``condition_video_keep="first"``) or last
  ``4 max(condition_frame_indexes_vision) + 1`` frames of ``video`` (each resized bilinearly to
  ``height x width`` with PIL, as the reference's ``VideoProcessor``), padded with the last one;
  the latent frames ``condition_frame_indexes_vision`` are the condition. The conditioning latents
  are the VAE posterior's mean, normalised; only the frames that reach them are encoded (the Wan
  VAE is causal). Drawn noise is ``mask x0 + (1 - mask) noise``; given ``latents=`` are used as
  they are (as the reference's ``latents=``).
* Steps: the checkpoint's UniPC; with ``use_native_flow_schedule`` (model_index.json) the base
  sigmas are ``linspace(1 - 1/T, 0, N + 1)[:-1]`` (then shifted by ``flow_shift`` where Karras
  sigmas are off, as diffusers' ``set_timesteps(sigmas=)``). Each step the transformer runs on the
  packed sequence of the prompt's tokens and the latents' (the scheduler's integer timestep on the
  noisy frames), cond and uncond as one batch: the shorter prompt is padded and its padding masked
  as keys, its positions offset by its own length (equal to the reference's two calls). The
  velocity of the condition frames is zero (the transformer's head), guidance is
  ``uncond + scale (cond - uncond)`` in float32, on whenever ``guidance_scale != 1``; the sound
  stream is guided alike and stepped with its own copy of the scheduler.
* Sound (``enable_sound=True``): latents ``(B, sound_dim, ceil(int(num_frames / fps x rate) /
  hop))`` (``sound_latents=`` gives them), decoded by the ``sound_tokenizer`` component (contract
  :class:`~vidax.pipelines.contracts.AudioDecoder`, output ``"waveform"``) into ``out.audio``.
* Decode: latents de-normalised, the Wan2.2 VAE, ``(x / 2 + 0.5)`` clipped.

Not implemented: action-conditioned generation (``action=`` is refused), FP8 mixed precision,
the safety checker (vidax never downloads or runs one; complying with the NVIDIA Open Model
License is up to the user).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import Checkpoint
from vidax.encoders.tokenizer import TextTokenizer
from vidax.errors import Arg, InputError
from vidax.io.image import one_image, to_rgb_image, vae_image_preprocess, video_frames
from vidax.models.cosmos.pipeline import refuse_image_and_video
from vidax.models.cosmos3.config import Cosmos3Info, read_cosmos3_checkpoint
from vidax.models.cosmos3.prompt import grid_positions, prompt_token_ids, templated_prompt
from vidax.pipelines.base import ModelSize, VideoPipeline, cfg_pair, prompt_texts, text_truncation
from vidax.pipelines.call import CallRule, default_negative_prompt
from vidax.pipelines.diffusers_keywords import refused_value_reason
from vidax.pipelines.hooks import FamilyHooks
from vidax.pipelines.loading import TRANSFORMER, VAE, ComponentTable, Weighted
from vidax.pipelines.options import FRAME_RATE_RANGE, OBJECT, VIDEO_FILE, CallOption
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.step_inputs import StepInputs

_F32 = jnp.float32
#: The reference's ``fps=`` default.
FRAME_RATE = 24.0
#: Tokens the chat template adds to a prompt, at most (system turn, metadata sentences, markers;
#: about 60 with the Qwen template): the memory estimate's allowance.
TEMPLATE_TOKENS = 256


@dataclasses.dataclass(frozen=True)
class Layout:
    """The static layout of one call's packed sequence (hashable: a compiled step depends on it).

    Attributes:
        text: U, the padded prompt length (the longest of the call's prompts and negatives).
        grid: ``(T, h', w')`` latent frames and patches per frame (``h' = ceil(h / p)``).
        noisy: the latent frames that are denoised (the others are the condition).
        sound: T_s sound latents, or None without sound.
        fps: the call's ``fps=`` (positions).
    """

    text: int
    grid: tuple[int, int, int]
    noisy: tuple[int, ...]
    sound: int | None
    fps: float


def preprocess_conditioning_image(image: Any, height: int, width: int) -> np.ndarray:
    """``_preprocess_conditioning_image`` of the reference for a PIL image / uint8 array: scaled
    by ``max(width / W, height / H)`` to ``ceil`` sizes with torch's antialiased bilinear filter
    (triangle of support ``max(scale, 1)`` around ``scale (i + 0.5)``, weights normalised; rows and
    columns separately), centre-cropped (``round((size - target) / 2)``), rounded, clipped to
    [0, 255], ``/ 127.5 - 1``. Returns float32 ``(height, width, 3)`` in [-1, 1]."""
    rgb = np.asarray(to_rgb_image(image), np.float32)
    sh, sw = rgb.shape[:2]
    scale = max(width / sw, height / sh)
    rh, rw = math.ceil(scale * sh), math.ceil(scale * sw)
    out = np.einsum("oh,hwc->owc", _aa_weights(sh, rh), rgb)
    out = np.einsum("pw,owc->opc", _aa_weights(sw, rw), out.astype(np.float32)).astype(np.float32)
    top, left = round((rh - height) / 2), round((rw - width) / 2)
    out = out[top : top + height, left : left + width]
    return (np.clip(np.round(out), 0, 255) / np.float32(127.5) - np.float32(1.0)).astype(np.float32)


def _aa_weights(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` float32 rows of torch's antialiased bilinear resampling (``_compute_weights_aa``)."""
    scale = n_in / n_out
    support = scale if scale >= 1.0 else 1.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    w = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        j = np.arange(lo, hi)
        f = np.maximum(0.0, 1.0 - np.abs((j - center + 0.5) * inv))
        w[i, lo:hi] = f / f.sum() if f.sum() else f
    return w.astype(np.float32)


#: diffusers' Cosmos 3 mixed W8A8/W8A16 schedule applies to serialized ModelOpt FP8 checkpoints only and
#: resolves to a no-op on every other checkpoint (``Cosmos3MixedPrecisionConfig.resolve``); vidax
#: reads no ModelOpt FP8 checkpoint, so these are checked as diffusers checks them and change nothing.
MIXED_PRECISION_OPTIONS = (
    CallOption(
        "mixed_precision_format",
        str,
        "diffusers' Cosmos 3 FP8 schedule: 'none' or 'fp8' (a no-op on the "
        "checkpoints vidax reads, as in diffusers on all but ModelOpt FP8 ones).",
        "None (auto)",
        choices=("none", "fp8"),
        flag=False,
    ),
    CallOption(
        "mixed_precision_first_steps",
        int,
        "First steps of the FP8 schedule (no-op, see mixed_precision_format).",
        "None",
        low=0,
        flag=False,
    ),
    CallOption(
        "mixed_precision_last_steps",
        int,
        "Last steps of the FP8 schedule (no-op, see mixed_precision_format).",
        "None",
        low=0,
        flag=False,
    ),
    CallOption(
        "mixed_precision_reasoner_policy",
        str,
        "The reasoner's precision in the FP8 schedule (no-op, see mixed_precision_format).",
        "None",
        choices=("high_precision", "base_precision"),
        flag=False,
    ),
    CallOption(
        "enable_safety_check",
        bool,
        "diffusers' Cosmos guardrail: only False runs in vidax.",
        "False",
        choices=(False,),
        flag=False,
        valid="False (vidax runs no safety checker: Cosmos' guardrail is a torch package)",
    ),
)


#: The components: the transformer, the Wan2.2 VAE in ``vae_dtype`` (float32 by default) and,
#: where the checkpoint has one that vidax implements, the sound tokenizer (in its own dtype).
COMPONENTS = ComponentTable(
    files={"text_tokenizer": TextTokenizer},
    weighted={"transformer": TRANSFORMER, "vae": VAE, "sound_tokenizer": Weighted(dtype=None, staged=True)},
)


def _refused_first(family: Any, info: Cosmos3Info, keywords: dict) -> dict:
    """Before the shared checks, Cosmos 3's refusals: ``action=``; ``enable_sound`` on a checkpoint
    without sound; ``sound_latents=`` without ``enable_sound``. 2-dimensional ``sound_latents``
    (the reference's one-video layout) get their batch axis."""
    if keywords.get("action") is not None:
        raise InputError(Arg("action", keyword=True), ": ", refused_value_reason("action"))
    keywords.pop("action", None)
    sound = keywords.get("enable_sound")
    if sound:
        if info.sound_config is None or not info.transformer_config.sound_gen:
            raise InputError(
                Arg("enable_sound", sound),
                f": {info.checkpoint.root} has no sound "
                f"{'tokenizer (sound_tokenizer)' if info.sound_config is None else 'head (sound_gen false in its transformer config)'}; "
                "leave it off",
            )
    elif keywords.get("sound_latents") is not None:
        raise InputError(
            Arg("sound_latents", keyword=True),
            " is given but ",
            Arg("enable_sound", keyword=True),
            " is not; the reference uses sound latents only with enable_sound=True",
        )
    if keywords.get("sound_latents") is not None and np.ndim(keywords["sound_latents"]) == 2:
        # the reference's layout (sound_dim, T_sound), which it uses as they are: one video's
        keywords["sound_latents"] = np.asarray(keywords["sound_latents"])[None]
    return keywords


def _cfg_unless_one(family: Any, info: Cosmos3Info, call: Any, keywords: Any) -> Any:
    """After the shared checks: CFG runs whenever ``guidance_scale != 1`` (as the reference)."""
    return dataclasses.replace(call, cfg=call.guidance_scale != 1.0)


class Cosmos3OmniHooks(FamilyHooks):
    """The hooks of :class:`Cosmos3OmniPipeline`."""

    pipeline_name = "Cosmos3OmniPipeline"
    takes_image = True  # image- and video-to-video as conditioning frames, as diffusers'

    latent_streams = ("latents", "sound_latents")
    #: Cosmos 3's refusals first; ``negative_prompt=None`` is ``""``; CFG unless guidance is 1.
    call_rules = (CallRule(_refused_first, _cfg_unless_one), default_negative_prompt(""))
    audio_stream = "sound_latents"
    audio_latents_layout = (
        "(batch, sound_dim, sound latent frames), or (sound_dim, sound latent frames) for one "
        "video as the reference takes them"
    )
    audio_decoder_name = "sound_tokenizer"
    vocoder_name = None
    latents_layout = "(batch, z_dim, latent frames, height / 16, width / 16)"
    scheduler_classes = ("UniPCMultistepScheduler",)
    guidance_dtype = jnp.float32  # the reference casts both predictions to float32 before guiding
    stageable = ("vae",)
    separate_cfg_passes = True  # the reference calls the transformer once per branch
    # diffusers 0.42.1's metadata for Cosmos3VLTextMoTDecoderLayer names its arguments gen_seq / und_seq,
    # while its First-Block Cache asks for hidden_states and MagCache (on a skip) for
    # encoder_hidden_states: both raise there. TaylorSeer runs.
    cache_block_metadata = False
    cache_metadata_problem = (
        "diffusers 0.42.1's block metadata for {pipeline}'s decoder layers "
        "(Cosmos3VLTextMoTDecoderLayer) names their inputs gen_seq / und_seq, which its {config} "
        "hooks do not read (they look for hidden_states / encoder_hidden_states and raise there)"
    )
    unsupported_call_args = ("guidance_scale_2",)
    call_options = MIXED_PRECISION_OPTIONS + (
        CallOption(
            "video",
            VIDEO_FILE,
            "Video to condition on (Cosmos 3 video-to-video keeps its first frames clean). No safety checker runs.",
            task="v2v",
        ),
        CallOption(
            "condition_frame_indexes_vision", OBJECT, "Latent frames of video= kept clean (Cosmos 3).", "[0, 1]"
        ),
        CallOption(
            "condition_video_keep",
            str,
            "Which end of video= the conditioning frames come from (Cosmos 3).",
            "first",
            choices=("first", "last"),
        ),
        # The flag is vidax generate's own --fps (the mp4's rate), which the CLI passes on as fps= to a
        # pipeline that takes it: the video is written at the rate the model conditioned on.
        CallOption(
            "fps",
            float,
            "Frame rate of the video (Cosmos 3: in the duration sentence, the positions and the sound length).",
            "24.0",
            low=FRAME_RATE_RANGE[0],
            high=FRAME_RATE_RANGE[1],
            flag=False,
        ),
        CallOption(
            "enable_sound", bool, "Generate the soundtrack too (Cosmos 3 checkpoints with a sound tokenizer).", "False"
        ),
        CallOption(
            "use_system_prompt",
            bool,
            "Put the system turn before the prompt (Cosmos 3).",
            "the checkpoint's default_use_system_prompt",
        ),
        CallOption(
            "add_resolution_template", bool, "Append the resolution sentence to the prompts (Cosmos 3).", "True"
        ),
        CallOption("add_duration_template", bool, "Append the duration sentence to the prompts (Cosmos 3).", "True"),
        CallOption("action", OBJECT, "Action-conditioned generation (Cosmos 3): not implemented, refused."),
    )

    # ------------------------------------------------------------------ configs
    @classmethod
    def read_checkpoint(cls, checkpoint: Checkpoint) -> Cosmos3Info:
        return read_cosmos3_checkpoint(checkpoint)

    @classmethod
    def makes_audio(cls, info: Cosmos3Info) -> bool:
        return info.sound_config is not None and info.transformer_config.sound_gen

    @classmethod
    def silent_call(cls, info: Cosmos3Info, call) -> tuple | None:
        """As :meth:`FamilyHooks.silent_call`: a checkpoint with sound makes it only with
        ``enable_sound=True``."""
        if not cls.makes_audio(info) or call.extra.get("enable_sound"):
            return super().silent_call(info, call)
        return (
            f"{cls.pipeline_name} makes sound only when asked: add ",
            Arg("enable_sound", python="enable_sound=True"),
        )

    @classmethod
    def latent_shapes(cls, info: Cosmos3Info, call) -> dict[str, tuple[int, ...]]:
        shapes = {"latents": tuple(cls.latent_shape(info, call))}
        if call.extra.get("enable_sound"):
            shapes["sound_latents"] = (
                call.batch,
                info.transformer_config.sound_dim,
                info.sound_length(call.num_frames, call.extra.get("fps", FRAME_RATE)),
            )
        return shapes

    @classmethod
    def check_family_call(cls, info: Cosmos3Info, call) -> None:
        extra = call.extra
        video = extra.get("video")
        one_image(call.image, "Cosmos 3 takes")
        if call.image is not None and call.num_frames == 1:
            raise InputError(
                Arg("image", keyword=True),
                " with ",
                Arg("num_frames", 1),
                ": the reference ignores the "
                "image when it makes one frame (text-to-image); give more frames or no image",
            )
        if "condition_frame_indexes_vision" in extra and video is None:
            raise InputError(
                Arg("condition_frame_indexes_vision", keyword=True), " is only used with ", Arg("video", keyword=True)
            )
        if video is None:
            return
        refuse_image_and_video(call, "image-to-video", "video-to-video")
        if call.num_frames == 1:
            raise InputError(Arg("video", keyword=True), " needs ", Arg("num_frames"), " > 1, got 1")
        video_frames(video)
        idx = extra.get("condition_frame_indexes_vision", (0, 1))
        if (
            isinstance(idx, (str, bytes))
            or not isinstance(idx, (list, tuple))
            or not idx
            or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0 for i in idx)
        ):
            raise InputError(
                Arg("condition_frame_indexes_vision", idx),
                " must be a non-empty list of non-negative ints, e.g. [0, 1]",
            )
        t = cls.latent_shape(info, call)[2]
        if max(idx) >= t:
            raise InputError(
                Arg("condition_frame_indexes_vision", list(idx)),
                f" reaches past the {t} latent frames of ",
                Arg("num_frames", call.num_frames),
                f"; valid indexes are 0..{t - 1}",
            )
        if set(range(t)) <= set(int(i) for i in idx):
            raise InputError(
                Arg("condition_frame_indexes_vision", list(idx)),
                f" keeps all {t} latent frames clean; leave at least one to generate",
            )

    @classmethod
    def model_size(cls, info: Cosmos3Info, call) -> ModelSize:
        from vidax.models.wan.pipeline import wan_vae_decode_size

        cfg = info.transformer_config
        _, _, t, h, w = cls.latent_shape(info, call)
        p = cfg.latent_patch_size
        # The longest prompt's tokens (at most one per UTF-8 byte: byte-level BPE, and at most
        # max_sequence_length) and the chat template's, metadata sentences and system turn included.
        texts = call.prompts + (call.negatives if call.do_cfg else [])
        prompt = min(call.max_sequence_length, max(len(text.encode()) for text in texts))
        tokens = t * -(-h // p) * -(-w // p) + prompt + TEMPLATE_TOKENS
        if call.extra.get("enable_sound"):  # the sound's latent frames join the sequence
            tokens += cls.latent_shapes(info, call)["sound_latents"][-1]
        return ModelSize(
            tokens=tokens,
            hidden_size=cfg.hidden_size,
            ffn_dim=cfg.intermediate_size,
            num_layers=cfg.num_hidden_layers,
            num_heads=cfg.num_attention_heads,
            **wan_vae_decode_size(info.vae_config),
        )

    def video_fps(self, call) -> Any:
        """The ``fps`` the model conditioned on, when given (else the checkpoint's 24)."""
        rate = call.extra.get("fps")
        return super().video_fps(call) if rate is None else Fraction(rate).limit_denominator(1001)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load_components(
        cls, info: Cosmos3Info, *, dtype, mesh, offload, staging, offload_experts=True, vae_dtype: Any = jnp.float32
    ) -> dict[str, Any]:
        """The tokenizer, the transformer, the Wan2.2 VAE (``vae_dtype``, float32 by default),
        the scheduler and, where the checkpoint has one that vidax implements, the sound
        tokenizer; every checkpoint checked against its model before the first weight is read."""
        skip = ("sound_tokenizer",) if info.sound_config is None else ()
        modules = COMPONENTS.load(
            info, dtype=dtype, mesh=mesh, offload=offload, staging=staging, skip=skip, vae_dtype=vae_dtype
        )
        return {"sound_tokenizer": None} | modules

    # ------------------------------------------------------------------ call hooks
    def encode_call(self, call) -> dict:
        """``{"ids": (n, U) int32, "lengths": (n,) int32}``: each prompt's (then each negative's,
        with CFG) templated token ids, padded with 0 to the longest (:mod:`vidax.models.cosmos3.prompt`);
        a prompt of more than ``max_sequence_length`` tokens is cut to them first (warned)."""
        extra = call.extra
        use_system = extra.get("use_system_prompt")
        use_system = self.pipe.info.default_use_system_prompt if use_system is None else use_system
        kw = dict(
            num_frames=call.num_frames,
            height=call.height,
            width=call.width,
            fps=extra.get("fps", FRAME_RATE),
            add_resolution_template=extra.get("add_resolution_template", True),
            add_duration_template=extra.get("add_duration_template", True),
        )
        truncation = dataclasses.replace(
            text_truncation(call),
            why="by vidax (Cosmos 3's reference takes any length; the metadata sentences and chat template are kept)",
        )
        cut = self.pipe.text_tokenizer.truncate_texts(prompt_texts(call), call.max_sequence_length, truncation)
        texts = [templated_prompt(p, negative=i >= len(call.prompts), **kw) for i, p in enumerate(cut)]
        ids = prompt_token_ids(
            self.pipe.text_tokenizer, texts, num_frames=call.num_frames, use_system_prompt=use_system
        )
        u = max(len(i) for i in ids)
        padded = np.zeros((len(ids), u), np.int32)
        for row, i in zip(padded, ids):
            row[: len(i)] = i
        return {"ids": jnp.asarray(padded), "lengths": jnp.asarray([len(i) for i in ids], jnp.int32)}

    def condition_frames(self, call) -> tuple[np.ndarray | None, tuple[int, ...]]:
        """The pixels to encode, float32 ``(1, F_c, H, W, 3)`` in [-1, 1] (None for text-to-video),
        and the condition latent frames."""
        k = self.pipe.info.vae_config.temporal_compression
        if call.image is not None:
            return preprocess_conditioning_image(call.image, call.height, call.width)[None, None], (0,)
        video = call.extra.get("video")
        if video is None:
            return None, ()
        idx = tuple(sorted({int(i) for i in call.extra.get("condition_frame_indexes_vision", (0, 1))}))
        need = max(idx) * k + 1
        frames = video_frames(video)
        frames = frames[:need] if call.extra.get("condition_video_keep", "first") == "first" else frames[-need:]
        frames = frames + [frames[-1]] * (need - len(frames))
        pixels = np.stack(
            [vae_image_preprocess(f, call.height, call.width, resample="bilinear", name="video") for f in frames]
        )
        return pixels[None], idx

    def condition(self, call, stats) -> dict:
        """``{"x0": (B, T, h, w, C)}`` the normalised conditioning latents (zeros off the condition
        frames); sets the call's :class:`Layout`."""
        _, c, t, h, w = self.latent_shape(self.pipe.info, call)
        p = self.pipe.info.transformer_config.latent_patch_size
        pixels, idx = self.condition_frames(call)
        x0 = jnp.zeros((call.batch, t, h, w, c), _F32)
        if pixels is not None:
            with stats.timed("text_encode_s"):  # conditioning encoders are timed with the text encoder
                mean, _ = encode_with(self.pipe, "vae", self.pipe.vae.encode, pixels)  # the posterior's mode ("argmax")
                z = self.pipe.vae.normalize_latents(mean)
                for i in idx:
                    x0 = x0.at[:, i].set(jnp.broadcast_to(z[:, i], (call.batch,) + z.shape[2:]))
            stats.sample_memory()
        sound = None
        if call.extra.get("enable_sound"):
            sound = self.latent_shapes(self.pipe.info, call)["sound_latents"][-1]
        self._layout = Layout(
            text=0,
            grid=(t, -(-h // p), -(-w // p)),
            noisy=tuple(i for i in range(t) if i not in idx),
            sound=sound,
            fps=float(call.extra.get("fps", FRAME_RATE)),
        )
        return {
            "x0": x0,
            "mask": jnp.zeros((t,), _F32).at[jnp.asarray(idx, jnp.int32)].set(1.0) if idx else jnp.zeros((t,), _F32),
        }

    def prepare_latents(self, call, noise, cond) -> dict:
        """``{"latents": (B, T, h, w, C) channels-last[, "sound_latents": (B, C_s, T_s)]}``: drawn
        noise mixed with the condition (``mask x0 + (1 - mask) noise``), given ``latents=`` as
        they are (as the reference)."""
        streams = noise if isinstance(noise, dict) else {"latents": noise}
        x = jnp.transpose(streams["latents"], (0, 2, 3, 4, 1))
        if call.latents is None:
            m = cond["mask"][None, :, None, None, None]
            x = m * cond["x0"] + (1.0 - m) * x
        return {**streams, "latents": x}

    def set_timesteps(self, call, latents):
        """One UniPC state per stream; the native flow schedule where the checkpoint asks for it."""
        sched = self.pipe.scheduler
        base = None
        if self.pipe.info.use_native_flow_schedule:
            base = np.linspace(1.0 - 1.0 / sched.config.num_train_timesteps, 0.0, call.num_inference_steps + 1)[:-1]
        return {
            k: sched.set_timesteps(call.num_inference_steps, sample_shape=v.shape, base_sigmas=base)
            for k, v in latents.items()
        }

    def step_key(self) -> Any:
        return type(self.pipe.scheduler), self._layout

    def step_args(self, call, embeds, cond, state, expert):
        self._layout = dataclasses.replace(self._layout, text=int(embeds["ids"].shape[1]))
        return StepInputs(embeds, jnp.asarray(call.guidance_scale, _F32)), None

    def positions(self, lengths: jax.Array) -> jax.Array:
        """``(n, 3, L)`` float32 positions of the packed sequences whose prompts have ``lengths``
        real tokens (:mod:`vidax.models.cosmos3.prompt`)."""
        cfg, lay = self.pipe.info.transformer_config, self._layout
        fps_mod = cfg.enable_fps_modulation
        parts = [
            grid_positions(
                *lay.grid,
                fps=lay.fps if fps_mod else None,
                base_fps=float(cfg.base_fps),
                temporal_compression=self.pipe.info.vae_config.temporal_compression,
                reset_spatial_ids=cfg.unified_3d_mrope_reset_spatial_ids,
            )
        ]
        if lay.sound is not None:
            parts.append(
                grid_positions(
                    lay.sound,
                    1,
                    1,
                    fps=float(cfg.sound_latent_fps) if fps_mod else None,
                    base_fps=float(cfg.base_fps),
                    temporal_compression=1,
                    reset_spatial_ids=cfg.unified_3d_mrope_reset_spatial_ids,
                )
            )
        gen = np.concatenate([p for p, _ in parts], axis=1)
        axes = parts[0][1]
        start = (lengths + cfg.unified_3d_mrope_temporal_modality_margin).astype(_F32)
        gen = jnp.asarray(gen)[None] + start[:, None, None] * jnp.asarray(axes)[None, :, None]
        text = jnp.broadcast_to(jnp.arange(lay.text, dtype=_F32), (lengths.shape[0], 3, lay.text))
        return jnp.concatenate([text, gen], axis=-1)

    def model_args(self, latents, state, inputs, do_cfg) -> tuple:
        """The transformer's packed-sequence arguments (see :meth:`Cosmos3OmniTransformer.embed`)."""
        embeds = inputs.embeds
        lay = self._layout
        t_steps = self.step_state(state)
        timestep = t_steps.timesteps[t_steps.step_index].astype(_F32)
        x, sound = cfg_pair(do_cfg, latents["latents"], latents.get("sound_latents"))
        n = x.shape[0]
        u = lay.text
        t, hp, wp = lay.grid
        per = hp * wp
        vis_idx = np.arange(u, u + t * per)
        vis_mse = (u + np.asarray(lay.noisy, np.int64)[:, None] * per + np.arange(per)).reshape(-1)
        vis_ts = jnp.full((n, len(lay.noisy) * per), timestep)
        snd = [None] * 5
        if sound is not None:
            s_idx = np.arange(u + t * per, u + t * per + lay.sound)
            snd = [
                sound.astype(self.pipe.dtype),
                s_idx,
                s_idx,
                jnp.full((n, lay.sound), timestep),
                tuple(range(lay.sound)),
            ]
        return (
            embeds["ids"],
            np.arange(u),
            self.positions(embeds["lengths"]),
            u,
            x.astype(self.pipe.dtype),
            vis_idx,
            vis_mse,
            vis_ts,
            lay.noisy,
            *snd,
            None,
            None,
            None,
            None,
            None,
            None,
            embeds["lengths"],
        )

    def latents_output(self, latents) -> np.ndarray:
        return np.asarray(jnp.transpose(latents, (0, 4, 1, 2, 3)))


class Cosmos3OmniPipeline(VideoPipeline):
    """Cosmos 3 (Nano / Super / Edge) text-, image- and video-to-video with optional sound
    (reference: ``diffusers.Cosmos3OmniPipeline``; see the module docstring). Build with
    :meth:`from_pretrained` or :func:`vidax.load_pipeline`.

    Call keywords beyond the shared ones: ``video``, ``condition_frame_indexes_vision`` (default
    ``[0, 1]``), ``condition_video_keep`` (``"first"``), ``fps`` (float,
    24), ``enable_sound``, ``sound_latents``, ``use_system_prompt`` (default: the checkpoint's
    ``default_use_system_prompt``), ``add_resolution_template``, ``add_duration_template``.
    ``action`` is refused.
    """

    family = Cosmos3OmniHooks
