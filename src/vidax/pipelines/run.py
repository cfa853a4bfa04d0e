"""One call's run after its checks: encode, condition, the initial noise, the denoising loop (in
segments of one expert each, one jitted step or the blocks streamed from host memory), decode.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import Arg, Cancelled, InputError, NumericalError, OutOfMemoryError
from vidax.nn.kernels import as_stack_bits, describe_matmul, from_stack_bits
from vidax.nn.precision import describe_matmul_precision
from vidax.parallel.chunked_step import ChunkedStep
from vidax.parallel.offload import offloaded_stacks
from vidax.pipelines.call import Call
from vidax.pipelines.common import VideoPipelineOutput, status
from vidax.pipelines.experts import segments
from vidax.pipelines.memory import _gib, available_memory, check_memory, size_words
from vidax.pipelines.output import check_decodable, check_finite, decode_audio, finite_array, frames_as_pil
from vidax.pipelines.prompts import call_embeds
from vidax.pipelines.sampling import LoopHooks, restore_denoising_state, run_denoising_loop
from vidax.pipelines.staging import transformers_of
from vidax.pipelines.step_cache import (
    CacheCarry,
    CacheReport,
    CacheSpec,
    StepCache,
    TaylorSeerCacheConfig,
    check_cache_call,
    describe_config,
    step_shapes,
    taylorseer_mode,
)
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")


def check_step_dtypes(owner: str, taken: Any, returned: Any) -> None:
    """A denoising step must return its ``(latents, scheduler state)`` with the shapes and dtypes
    it took (checked at trace time): the loop runs one compiled step for every step, so a step
    whose latents came back in another dtype (e.g. bfloat16 from a bfloat16 prediction) would fail
    from the second step on, and a silent cast back would hide the rounding.

    Raises:
        TypeError: a leaf whose dtype or shape changed (a bug of ``owner``'s step hooks).
    """

    def sig(tree):
        return [(jax.tree_util.keystr(p), x.shape, x.dtype) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]

    before, after = sig(taken), sig(returned)
    if before != after:
        diff = [
            f"{name}: {s0} {d0} -> {s1} {d1}"
            for (name, s0, d0), (_, s1, d1) in zip(before, after)
            if (s0, d0) != (s1, d1)
        ] or [f"{len(before)} leaves -> {len(after)}"]
        raise TypeError(
            f"{owner}'s denoising step returns (latents, state) in other shapes/dtypes than it takes "
            f"({'; '.join(diff)}); every step must keep them"
        )


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
    the initial noise, ``pipe.hooks.denoise``, the final latents, the decode (video, then sound);
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
    state = pipe.hooks.set_timesteps(call, x)
    phase[0] = "denoising loop"
    x, state = pipe.hooks.denoise(call, x, state, embeds, cond, stats)
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


class Denoiser:
    """The denoising loop of one pipeline (``pipe.denoiser``): one expert's segment of steps
    (:meth:`run_expert`) with its step cache, and the compiled steps (:meth:`step_fn`), kept in
    :attr:`step_fns` for the pipeline's life.

    Args:
        experts: the pipeline's denoising transformers (:class:`~vidax.pipelines.experts.Experts`).
        mesh: the device mesh, or None (one device).
    """

    def __init__(self, experts: Any, mesh: Any = None):
        self.experts = experts
        self.mesh = mesh
        #: The compiled steps, keyed by CFG, the transformer's structure, the pipe's step key,
        #: the streamed stacks and the step cache's spec.
        self.step_fns: dict[Any, Any] = {}

    def segments(self, pipe: Any, call: Call, x: Any, state: Any, embeds: Any, cond: dict, stats: RunStats) -> tuple:
        """``(latents, state)`` after every step of ``call``, each run by the expert
        ``pipe.hooks.expert_plan`` picks; the steps of one expert run as one :func:`run_denoising_loop`
        (its parameters on the device only meanwhile). The default of ``pipe.hooks.denoise``."""
        total = int(pipe.hooks.step_state(state).num_inference_steps)
        plan = pipe.hooks.expert_plan(state)
        done, resume_cache = 0, None
        if call.resume is not None:
            done, (x, state) = call.resume[0], restore_denoising_state(call.resume[1], (x, state))
            # the step cache's saved state (or None), and whether the resumed step's transformer
            # is the one whose run was saved (its cache state goes on; another expert's starts afresh)
            saved = call.resume[2] if len(call.resume) > 2 else None
            resume_cache = (saved, 0 < done < total and plan[done - 1] == plan[done])
        if self.mesh is None:
            # Committed to the device like a step's outputs, so every segment's inputs match and
            # experts of one architecture reuse one compiled step.
            x, state = jax.device_put((x, state), jax.local_devices()[0])
        for expert, count in segments(plan[done:]):
            inputs, axes = pipe.hooks.step_args(call, embeds, cond, state, expert)
            x, state = self.run_expert(
                pipe, expert, call, x, state, (inputs,), (axes,), (count, done, total), stats, resume_cache
            )
            done, resume_cache = done + count, None
        return x, state

    def run_expert(self, pipe, expert, call, x, state, args, arg_axes, steps, stats, resume_cache=None):
        """``(latents, state)`` after ``steps`` = ``(count, done, total)``: ``count`` steps of
        ``expert`` from step ``done`` of ``total``, the step inputs ``args`` (their logical axes
        ``arg_axes``) from ``pipe.hooks.step_args``. ``resume_cache``: (the step cache's saved
        CacheState or None, whether it goes on here) for the first segment of a resumed call."""
        # The expert's device parameters live only in this frame, so they are released before
        # the next segment asks for the other expert.
        count, done, total = steps
        params = self.experts.params(expert)
        module = self.experts.modules[expert]
        if stats.cpu_matmul is None:
            stats.cpu_matmul = describe_matmul(module, pipe.dtype)
        cache = self.step_cache(pipe, call, expert, total, stats)
        step = self.step_fn(pipe, call.do_cfg, expert, None if cache is None else cache.spec)
        cb = None if call.callback is None else (lambda i, _n: call.callback(done + i, total))
        step_end = None if call.step_end is None else self.step_end_hook(pipe, call, state, done)
        on_state = None
        if call.on_state is not None and cache is None:
            on_state = lambda i, latents, st: call.on_state(done + i + 1, latents, st)  # noqa: E731
        elif call.on_state is not None:  # the scheduler state, and the cache's beside it
            on_state = lambda i, latents, st: call.on_state(done + i + 1, latents, st.sched, cache=cache.state(st))  # noqa: E731
        if cache is None and resume_cache is not None and resume_cache[0] is not None:
            raise InputError(
                "the saved denoising state does not fit this call: it holds a step cache's state "
                "and the call runs without one"
            )
        if cache is not None:
            # A fresh state for every expert segment: each of the reference's experts has its own hooks.
            shapes = step_shapes(
                module,
                params,
                lambda _p, lat, st, inputs: pipe.hooks.model_args(lat, st, inputs, call.do_cfg),
                x,
                state,
                args,
                cache.spec.taps,
                rows=cache.spec.kind != "taylorseer",
            )
            state = CacheCarry(state, cache.initial(shapes))
            if resume_cache is not None:
                state = CacheCarry(state.sched, cache.restore(*resume_cache, state.cache))
        if not offloaded_stacks(module):
            # bf16 stacks on CPU enter the jitted step as uint16 views (no copy of them per step).
            params = as_stack_bits(params, getattr(module, "block_stacks", ()))
        hooks = LoopHooks(
            progress=call.progress,
            callback=cb,
            cancel=call.cancel,
            cache=cache,
            on_step_end=step_end,
            interrupt=lambda: pipe._interrupt,
            on_state=on_state,
            first_step=done,
            total_steps=total,
        )
        x, state = run_denoising_loop(
            step, params, x, state, args, count, stats, hooks, mesh=self.mesh, arg_axes=arg_axes
        )
        return (x, state.sched) if cache is not None else (x, state)

    def step_cache(self, pipe: Any, call: Call, expert: int, total: int, stats: RunStats) -> StepCache | None:
        """The step cache of ``expert``'s segment (``pipe.cache_config``; None: uncached), one
        state per CFG branch where ``pipe.family.separate_cfg_passes``."""
        config = pipe.cache_config
        module = self.experts.modules[expert]
        if config is None or (isinstance(config, TaylorSeerCacheConfig) and taylorseer_mode(config, module) == "none"):
            return None
        if stats.cache is None:
            stats.cache = CacheReport(describe_config(config), module.num_blocks())
        branches = 2 if call.do_cfg and pipe.family.separate_cfg_passes else 1
        return StepCache(config, module, branches, total, stats.cache)

    def step_end_hook(self, pipe: Any, call: Call, state: Any, done: int) -> Callable:
        """diffusers' ``callback_on_step_end(pipe, i, t, {"latents": ...})`` after step ``done + i``
        (``pipe``: the pipeline), its returned ``"latents"`` put back in the loop's layout, dtype and
        sharding."""
        timesteps = np.asarray(pipe.hooks.step_state(state).timesteps)
        first = pipe.family.latent_streams[0]

        def hook(i: int, latents: Any) -> Any:
            x = latents[first] if isinstance(latents, dict) else latents
            view = jnp.array(pipe.hooks.loop_latents_to_diffusers(x))  # a copy: the loop donates its buffers
            out = call.step_end(pipe, done + i, jnp.asarray(timesteps[done + i]), {"latents": view})
            if not isinstance(out, Mapping) or out.get("latents") is None:
                return None
            new = finite_array("callback_on_step_end's returned latents", out["latents"])
            if new.shape != view.shape:
                raise InputError(
                    f"callback_on_step_end returned latents of shape {tuple(new.shape)}; they must keep "
                    f"the shape it was given, {tuple(view.shape)}"
                )
            new = jax.device_put(
                pipe.hooks.loop_latents_from_diffusers(jnp.asarray(new), x).astype(x.dtype), x.sharding
            )
            return {**latents, first: new} if isinstance(latents, dict) else new

        return hook

    def step_fn(self, pipe: Any, do_cfg: bool, expert: int = 0, cache: CacheSpec | None = None):
        """The step ``(params, latents, state, inputs) -> (latents, state)`` of ``expert`` with
        ``pipe``'s step hooks: one jit (latents donated), or a
        :class:`~vidax.parallel.chunked_step.ChunkedStep` when its blocks are streamed from host
        memory (every declared stack). Experts of one structure share one trace. The latents
        (float32) and the scheduler state come back in the dtypes they went in: the guided
        prediction is upcast to the latents' dtype before ``pipe.hooks.scheduler_update``, and
        :func:`check_step_dtypes` raises TypeError at trace time for a step that changes one.
        With a step ``cache`` (:class:`~vidax.pipelines.step_cache.CacheSpec`) the state is a
        :class:`~vidax.pipelines.step_cache.CacheCarry` and the model runs as ``embed``, then
        ``cache.forward`` (the blocks or the cached result, and ``head``)."""
        module = self.experts.modules[expert]
        graphdef = nnx.graphdef(module)
        stacks = offloaded_stacks(module)
        key = (do_cfg, graphdef, pipe.hooks.step_key(), len(stacks), cache)
        if key in self.step_fns:
            fn = self.step_fns[key]
            return fn.for_blocks(stacks) if stacks else fn
        gdtype = pipe.family.guidance_dtype

        def model_args(latents, state, inputs):
            return pipe.hooks.model_args(latents, state, inputs, do_cfg)

        def finish(pred, latents, state, inputs):
            if isinstance(latents, dict) and isinstance(pred, (tuple, list)):
                # a model of several streams predicts them in the order of latent_streams (a dict
                # through jax comes back with its keys sorted)
                # (streams the call does not run, e.g. Cosmos 3's sound without enable_sound, left out)
                pred = {k: p for k, p in zip(pipe.family.latent_streams, pred) if k in latents}
            if do_cfg:
                pred = pipe.hooks.guide(
                    pred if gdtype is None else jax.tree.map(lambda p: p.astype(gdtype), pred), state, inputs
                )
            # The scheduler updates the latents in their own dtype (float32): a bfloat16 prediction
            # is upcast first, so the update is not rounded to bfloat16 (schedulers return the
            # prediction's dtype, as diffusers'). Several streams: each stream's own.
            pred = jax.tree.map(lambda p, x: p.astype(x.dtype), pred, latents)
            new = pipe.hooks.scheduler_update(state, pred, latents, inputs)
            check_step_dtypes(type(pipe).__name__, (latents, state), new)
            return new

        def step(params, latents, state, inputs):
            model = nnx.merge(graphdef, from_stack_bits(params))
            if cache is None:
                return finish(model(*model_args(latents, state, inputs)), latents, state, inputs)
            x, block_inputs = model.embed(*model_args(latents, state.sched, inputs))
            pred, cs = cache.forward(model, x, block_inputs, state.cache)
            latents, sched = finish(pred, latents, state.sched, inputs)
            return latents, CacheCarry(sched, cs)

        if stacks:
            fn = ChunkedStep(graphdef, stacks, model_args, finish, cache=cache)
        else:
            fn = jax.jit(step, donate_argnums=(1,))
        self.step_fns[key] = fn
        return fn
