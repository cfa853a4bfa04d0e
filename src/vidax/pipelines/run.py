"""One call's run after its checks: encode, condition, the initial noise, the family's
``denoise`` (the schedule and ``pipe.denoiser``'s loop, :mod:`vidax.pipelines.denoiser`), decode.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from vidax.errors import Arg, Cancelled, NumericalError, OutOfMemoryError
from vidax.nn.precision import describe_matmul_precision
from vidax.pipelines.call import Call
from vidax.pipelines.common import VideoPipelineOutput, status
from vidax.pipelines.memory import _gib, available_memory, check_memory, size_words
from vidax.pipelines.output import check_decodable, check_finite, decode_audio, frames_as_pil
from vidax.pipelines.prompts import call_embeds
from vidax.pipelines.staging import transformers_of
from vidax.pipelines.step_cache import check_cache_call
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


def warn_if_data_axis_idle(mesh: Any, call: Call) -> None:
    """Warn when ``mesh``'s data axis cannot split the denoising batch (the videos, times two
    with CFG): the batch is then replicated over it, and its devices add no speed."""
    dp = 1 if mesh is None else dict(mesh.shape).get("data", 1)
    batch = call.batch * (2 if call.do_cfg else 1)
    if dp > 1 and batch % dp:
        logger.warning(
            "the denoising batch of %d (%d video(s)%s) does not split over the mesh's %d data-parallel "
            "devices: it is replicated there, which adds no speed; a data-parallel size dividing %d "
            "(--dp, mesh=) would split it",
            batch,
            call.batch,
            ", CFG doubles it" if call.do_cfg else "",
            dp,
            batch,
        )


def run_checked(pipe: Any, call: Call) -> VideoPipelineOutput:
    """Run a checked :class:`Call` on ``pipe`` (its :meth:`~vidax.pipelines.base.VideoPipeline.generate`),
    refused first when it cannot fit (:func:`~vidax.pipelines.memory.check_memory`).

    Raises:
        OutOfMemoryError: the call's memory estimate is more than there is (before any work),
            or an allocation failed during the run (the message names the phase and the estimate).
        NumericalError: the run went NaN/Inf (see ``pipe.__call__``); with LoRA adapters active
            the message also names those of large scale (past
            :data:`vidax.lora.adapters.LARGE_SCALE`), a likely cause.
    """
    pipe.hooks.check_components()
    check_cache_call(pipe.cache_config, call.num_inference_steps)
    warn_if_data_axis_idle(pipe.mesh, call)
    tiling = getattr(pipe.vae, "use_tiling", False)
    est = (
        None
        if pipe.memory_check is None
        else check_memory(
            type(pipe),
            pipe.info,
            call,
            dtype=pipe.dtype,
            loaded=True,
            refuse=pipe.memory_check,
            devices=1 if pipe.mesh is None else pipe.mesh.size,
            vae_tiling=tiling,
        )
    )
    auto_tiling = est is not None and est.vae_tiling and not tiling
    if auto_tiling:  # for this call only
        saved_tiling = pipe.vae.tiling
        pipe.vae.enable_tiled_decode(scale=est.vae_tile_scale)
    phase = ["text encoding"]
    pipe._interrupt = False
    try:
        scale = contextlib.nullcontext() if call.lora_scale is None else pipe.lora.call_scale(call.lora_scale)
        with pipe.precision(), scale:
            return run_call(pipe, call, phase)
    except NumericalError as e:
        from vidax.lora.adapters import LARGE_SCALE

        scales = pipe.lora.scales_in_use(at_least=LARGE_SCALE)
        if scales is None:
            raise
        error = NumericalError(
            e.message,
            "; the large LoRA scale(s) in use may be the cause (they make the merged weights overflow): ",
            scales,
            ": try smaller ones",
        )
        error.latents = getattr(e, "latents", None)
        raise error from None
    except Exception as e:
        if not (isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in str(e)) or isinstance(e, OutOfMemoryError):
            raise
        what = " ".join(f"{type(e).__name__}: {e}".split())[:300] if str(e) else type(e).__name__
        estimate = f"the estimate was {est.describe()}" if est is not None else "no estimate"
        free, where = available_memory()
        advice = (
            ("try a smaller ", Arg("max_sequence_length", call.max_sequence_length))
            if phase[0] == "text encoding"
            else ("try a smaller size or fewer ", Arg("num_frames"), ", bfloat16, or offloading")
        )
        raise OutOfMemoryError(
            f"ran out of memory during the {phase[0]} at ",
            size_words(call),
            f" ({what}); {estimate}, {where} now {_gib(free)}; ",
            *advice,
        ) from None
    finally:
        if auto_tiling:
            pipe.vae.tiling = saved_tiling


def run_call(pipe: Any, call: Call, phase: list) -> VideoPipelineOutput:
    """The walk of a checked call through ``pipe``'s hooks: the prompt encoding, the conditioning,
    the initial noise, ``pipe.hooks.denoise`` (the schedule and the loop), the final latents, the
    decode (video, then sound);
    ``phase[0]`` names the part running (for an out-of-memory message)."""
    t0 = time.perf_counter()
    # The load is reported by the first call that completes.
    stats = RunStats(
        load_s=pipe._pending_load_s,
        seed=call.seed,
        seed_random="seed" not in call.given,
        matmul_precision=describe_matmul_precision(pipe.matmul_precision)
        + (
            f"; VAE decode {describe_matmul_precision(pipe.vae_matmul_precision)}"
            if pipe.vae_matmul_precision != pipe.matmul_precision
            else ""
        ),
    )
    with (
        stats.timed("text_encode_s"),
        status("encoding the prompt", call.progress),
        pipe.staging.off_device(transformers_of(pipe)),
    ):
        embeds = call_embeds(pipe, call)
        embeds = jax.tree.map(lambda e: repeat_embeds(e, call.num_videos_per_prompt, pipe.dtype), embeds)
        jax.block_until_ready(embeds)
    stats.sample_stage("text encoding")
    stats.stage_estimates = stage_estimates(pipe.device_plan, call)
    if call.cancel is not None and call.cancel():
        raise Cancelled("after encoding the prompt")
    cond = pipe.hooks.condition(call, stats)
    x = pipe.hooks.prepare_latents(call, pipe.hooks.initial_noise(call), cond)
    phase[0] = "denoising loop"
    x = pipe.hooks.denoise(call, x, embeds, cond, stats)
    stats.sample_stage("steps")
    check_finite(f"the denoising loop ({call.num_inference_steps} steps)", x, pipe.dtype)
    x = pipe.hooks.final_latents(call, x, cond)
    video, streams = (x, {}) if not isinstance(x, dict) else (x[pipe.family.latent_streams[0]], x)
    audio = streams.get(pipe.family.audio_stream) if pipe.family.audio_stream is not None else None
    rate = None
    if call.output_type == "latent":
        frames = pipe.hooks.latents_output(video)
        audio = None if audio is None else pipe.hooks.audio_latents_output(audio)
    else:
        phase[0] = "VAE decode"
        check_decodable(call, video, lambda: pipe.hooks.latents_output(video))
        frames = pipe.hooks.decode(call, video, stats)
        if audio is not None and call.decode_audio:
            phase[0] = "audio decode"
            audio, rate = decode_audio(pipe, call, audio, stats)
        else:
            audio = None
    if call.output_type == "pil":
        frames = frames_as_pil(frames)
    if call.output_type != "latent":
        stats.sample_stage("VAE decode")
    stats.sample_memory()
    pipe._pending_load_s = 0.0
    stats.call_s = time.perf_counter() - t0
    return VideoPipelineOutput(frames=frames, stats=stats, audio=audio, audio_sample_rate=rate)


def stage_estimates(device_plan: tuple | None, call: Call) -> dict[str, int]:
    """Stage -> device bytes the device plan (``(call planned, stage -> bytes)``, a pipeline's
    ``device_plan``) estimated before loading, for the call it was planned for (its sizes,
    frames, batch and text length); empty for any other call or without a device plan."""
    if device_plan is None:
        return {}
    plan_call, stages = device_plan
    keys = ("height", "width", "num_frames", "batch", "max_sequence_length", "do_cfg", "output_type")
    if any(getattr(plan_call, k) != getattr(call, k) for k in keys):
        return {}
    return {name: b for name, b in stages.items() if name != "VAE decode" or call.output_type != "latent"}


def initial_noise(latent_shapes: Mapping[str, tuple[int, ...]], first: str, call: Call) -> Any:
    """The initial noise of each latent stream (``latent_shapes``: call keyword -> shape;
    ``first``: the video stream's keyword, ``latents``), float32, in the diffusers layout: the given ``latents=`` /
    ``audio_latents=``..., else drawn from the seed with one key per stream: the first (video)
    stream's from ``jax.random.PRNGKey(seed)`` itself (so a seed gives the same video whatever
    other streams a family has), stream ``i`` > 0 from ``jax.random.fold_in(PRNGKey(seed), i)``.
    One stream: its array; several: a dict keyed like ``latent_shapes``."""
    key = jax.random.PRNGKey(call.seed)
    given = {first: call.latents, **call.stream_latents}
    noise = {}
    for i, (name, shape) in enumerate(latent_shapes.items()):
        value = given.get(name)
        noise[name] = (
            jnp.asarray(value)
            if value is not None
            else jax.random.normal(key if i == 0 else jax.random.fold_in(key, i), shape, jnp.float32)
        )
    return noise[first] if len(noise) == 1 else noise


def repeat_embeds(e: jax.Array, n: int, dtype: Any) -> jax.Array:
    """Each prompt's embeddings ``n`` times in a row; floating arrays in ``dtype`` (masks and
    token ids keep theirs)."""
    e = jnp.repeat(e, n, axis=0)
    return e.astype(dtype) if jnp.issubdtype(e.dtype, jnp.floating) else e
