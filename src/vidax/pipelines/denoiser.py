"""The denoising loop of a pipeline (:class:`Denoiser`, ``pipe.denoiser``): the steps of one call
in segments of one expert each, each segment one jitted step (or its blocks streamed from host
memory) run by :func:`~vidax.pipelines.sampling.run_denoising_loop`, with its step cache; the
compiled steps are kept for the pipeline's life.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.nn.kernels import as_stack_bits, describe_matmul, from_stack_bits
from vidax.parallel.chunked_step import ChunkedStep
from vidax.parallel.offload import offloaded_stacks
from vidax.pipelines.call import Call
from vidax.pipelines.experts import segments
from vidax.pipelines.output import finite_array
from vidax.pipelines.sampling import LoopHooks, restore_denoising_state, run_denoising_loop
from vidax.pipelines.step_cache import (
    CacheCarry,
    CacheReport,
    CacheSpec,
    StepCache,
    TaylorSeerCacheConfig,
    describe_config,
    step_shapes,
    taylorseer_mode,
)
from vidax.stats import RunStats


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
