"""The denoising loop every pipeline shares: compile once, step, time, show progress.

A family's pipeline supplies a jitted ``step(params, latents, state, *args) -> (latents, state)``
(its model call, guidance and scheduler update); this module runs it ``num_inference_steps``
times with the latents buffer donated, recording compile time and per-step times in
:class:`~vidax.stats.RunStats`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, Cancelled, InputError, Message, NumericalError
from vidax.parallel.distributed import to_local
from vidax.parallel.step import shard_step
from vidax.pipelines.common import progress_bar
from vidax.stats import RunStats


@dataclasses.dataclass(frozen=True)
class LoopHooks:
    """What :func:`run_denoising_loop` reports to and asks between steps (each None: none).

    Attributes:
        progress: show a progress bar on stderr.
        callback: ``callback(i, num_inference_steps)`` after step ``i``.
        cancel: ``cancel()`` is asked before the compile, before every step and, in a streamed
            step, after every chunk of blocks is dispatched; True stops the loop there
            (:class:`~vidax.errors.Cancelled`).
        cache: a step cache (:class:`vidax.pipelines.step_cache.StepCache`; the state is then its
            :class:`~vidax.pipelines.step_cache.CacheCarry`): ``cache.before_step`` sets the host's
            decision in the state before each step and ``cache.after_step`` records what ran.
        on_step_end: ``on_step_end(i, latents)`` runs after step ``i`` and before ``callback``; a
            value it returns (not None) replaces the latents.
        interrupt: diffusers' ``pipe.interrupt``, asked before the compile and before every step:
            True skips the remaining steps (no error); the latents of the last step run are
            returned, as diffusers' loop ``continue``s to its end and decodes them.
        on_state: ``on_state(i, latents, state)`` runs after ``on_step_end``, with the latents
            and state the next step starts from.
        first_step, total_steps: steps are named ``first_step + i + 1`` of ``total_steps``
            (None: ``num_inference_steps``), so a call split over experts names the step of the
            whole call.
    """

    progress: bool = True
    callback: Callable[[int, int], None] | None = None
    cancel: Callable[[], bool] | None = None
    cache: Any = None
    on_step_end: Callable[[int, Any], Any] | None = None
    interrupt: Callable[[], bool] | None = None
    on_state: Callable[[int, Any, Any], None] | None = None
    first_step: int = 0
    total_steps: int | None = None


def run_denoising_loop(
    step: Any,
    params: Any,
    latents: jax.Array,
    state: Any,
    args: tuple,
    num_inference_steps: int,
    stats: RunStats,
    hooks: LoopHooks = LoopHooks(),
    *,
    mesh: Any = None,
    arg_axes: tuple | None = None,
) -> tuple[jax.Array, Any]:
    """Run ``latents, state = step(params, latents, state, *args)`` for every step, with ``hooks``
    (:class:`LoopHooks`) between them.

    ``latents`` is one array or a pytree of latent streams (video and audio: each checked,
    sharded and returned the same way). ``step`` is a ``jax.jit`` function (with
    ``donate_argnums=(1,)``); it is compiled ahead of
    time once, so ``stats.compile_s`` is compile time alone and every ``stats.step_s`` entry is
    one step's wall time (the step index lives in ``state``, so no step recompiles).

    With a ``mesh`` (:mod:`vidax.parallel`), the latents and batched ``args`` are split over its
    ``data`` axis (:func:`vidax.parallel.step.shard_step`; ``arg_axes`` names the layout of
    arguments whose leading axis is not the batch) and the final latents come back whole on
    this process's first device.

    ``step`` may also be a :class:`vidax.parallel.chunked_step.ChunkedStep` (blocks streamed from host
    memory), which compiles and runs the same way; memory is then sampled after every chunk of
    the first step.

    After every step the latents are checked for NaN/Inf (one ``isfinite().all()`` reduction
    over the latents, a bool read on the host: the step has already been waited for, so it
    costs one small kernel over the latents, not over the transformer's activations).

    Raises:
        NumericalError: a step's latents hold NaN/Inf (e.g. a bfloat16 overflow in the
            transformer); the loop stops there.
        Cancelled: ``hooks.cancel()`` returned True (``done`` names the last step completed).
    """
    h = hooks
    total_steps = num_inference_steps if h.total_steps is None else h.total_steps
    check_cancel(h.cancel, h.first_step, total_steps)
    if h.interrupt is not None and h.interrupt():
        return latents, state
    if mesh is not None:
        step, latents, state, args = shard_step(step, latents, state, args, mesh, arg_axes)
    # The bar shows from before the compile, which can take a while with nothing else on screen.
    bar = progress_bar(num_inference_steps, "denoising (compiling the step)", disable=not h.progress, unit="step")
    try:
        with stats.timed("compile_s"):
            compiled = step.lower(params, latents, state, *args).compile()
        bar.set_description("denoising", refresh=False)
        bar.reset()  # the rate and the time left count the steps only
        for i in range(num_inference_steps):
            check_cancel(h.cancel, h.first_step + i, total_steps)
            if h.interrupt is not None and h.interrupt():
                break
            latents, state = _run_step(
                compiled, params, latents, state, args, i, stats, h.cache, h.cancel, h.first_step, total_steps
            )
            bar.update()
            latents = _after_step(i, latents, state, num_inference_steps, h.on_step_end, h.on_state, h.callback)
    finally:
        bar.close()
    if mesh is not None:
        latents = jax.tree.map(to_local, latents)
    return latents, state


def _after_step(
    i: int,
    latents: Any,
    state: Any,
    num_inference_steps: int,
    on_step_end: Callable[[int, Any], Any] | None,
    on_state: Callable[[int, Any, Any], None] | None,
    callback: Callable[[int, int], None] | None,
) -> Any:
    """The hooks after step ``i`` of :func:`run_denoising_loop`, in order: ``on_step_end`` (its
    latents, when not None, replace the loop's), ``on_state``, ``callback``; the latents."""
    if on_step_end is not None:
        new = on_step_end(i, latents)
        latents = latents if new is None else new
    if on_state is not None:
        on_state(i, latents, state)
    if callback is not None:
        callback(i, num_inference_steps)
    return latents


def _run_step(
    compiled: Any,
    params: Any,
    latents: Any,
    state: Any,
    args: tuple,
    i: int,
    stats: RunStats,
    cache: Any,
    cancel: Callable[[], bool] | None,
    first_step: int,
    total_steps: int,
) -> tuple[Any, Any]:
    """Step ``i`` of :func:`run_denoising_loop`: run, waited for and timed, the step cache told
    before and after, the latents checked for NaN/Inf, memory sampled after the first."""
    t0 = time.perf_counter()
    if hasattr(compiled, "on_chunk"):  # a streamed step: sample memory inside the first one
        compiled.on_chunk = _on_chunk(stats.sample_memory if i == 0 else None, cancel, first_step + i, total_steps)
    if cache is not None:
        state = cache.before_step(i, state)
    latents, state = compiled(params, latents, state, *args)
    jax.block_until_ready(latents)
    stats.step_s.append(time.perf_counter() - t0)
    if cache is not None:
        cache.after_step(i, state, stats.step_s[-1])
    if not bool(all_finite(latents)):
        raise NumericalError(
            f"denoising step {first_step + i + 1} of {total_steps} (the transformer and the scheduler "
            f"update) produced NaN/Inf latents; stopped there, nothing was written ",
            nonfinite_advice(params),
        )
    if i == 0:
        stats.sample_memory()
    return latents, state


def restore_denoising_state(arrays: Any, like: Any) -> Any:
    """The pytree ``like`` (the loop's fresh ``(latents, state)``) with its leaves replaced by
    ``arrays``, the leaves of such a pytree saved after some step (numpy arrays, in
    ``jax.tree.leaves`` order).

    Raises:
        InputError: ``arrays`` do not match ``like``'s leaves in number, shape or dtype (saved by
            another call or another version).
    """
    leaves, treedef = jax.tree.flatten(like)
    arrays = list(arrays)
    if len(arrays) != len(leaves) or any(
        np.shape(a) != np.shape(b) or np.asarray(a).dtype != b.dtype for a, b in zip(arrays, leaves)
    ):
        got = [(tuple(np.shape(a)), str(np.asarray(a).dtype)) for a in arrays]
        want = [(tuple(np.shape(b)), str(b.dtype)) for b in leaves]
        raise InputError(
            f"the saved denoising state does not fit this call: its arrays are {got[:4]}"
            f"{'...' if len(got) > 4 else ''} ({len(got)}), the call's {want[:4]}"
            f"{'...' if len(want) > 4 else ''} ({len(want)})"
        )
    return jax.tree.unflatten(treedef, [jnp.asarray(a) for a in arrays])


def check_cancel(cancel: Callable[[], bool] | None, done: int, total: int) -> None:
    """Raise :class:`~vidax.errors.Cancelled` when ``cancel()`` says so, ``done`` of ``total``
    denoising steps completed."""
    if cancel is not None and cancel():
        raise Cancelled(f"after denoising step {done} of {total}" if done else f"before denoising step 1 of {total}")


def _on_chunk(
    sample: Callable[[], None] | None, cancel: Callable[[], bool] | None, done: int, total: int
) -> Callable[[], None] | None:
    """The hook a streamed step runs after each chunk: memory sampling, the cancel check."""
    if cancel is None:
        return sample

    def hook() -> None:
        if sample is not None:
            sample()
        check_cancel(cancel, done, total)

    return hook


def nonfinite_advice(params: Any) -> Message:
    """What to try when a run went NaN/Inf, from the dtype its weights ran in (``params``: a
    pytree of them, or that dtype; None: unknown): in bfloat16, float32; in float32 precision is
    not the cause, so the weights and inputs are. A parenthesised clause for the end of a
    :class:`NumericalError` message, naming the dtype argument as data (``dtype=float32`` in
    Python, ``--dtype float32`` on the command line)."""
    float32 = Arg("dtype", np.dtype(np.float32))
    if params is None:
        return Message("(try other settings, or ", float32, " if it ran in bfloat16)")
    if isinstance(params, (str, type, np.dtype)):
        dtypes = {jnp.dtype(params)}
    else:
        dtypes = {
            jnp.dtype(x.dtype)
            for x in jax.tree.leaves(params)
            if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)
        }
    if jnp.dtype(jnp.bfloat16) in dtypes:
        return Message("(it ran in bfloat16: try ", float32, ", or other settings)")
    names = ", ".join(sorted(d.name for d in dtypes)) or "float32"
    return Message(
        f"(it ran in {names}, so not for lack of precision: check the checkpoint's weights and the "
        "inputs (latents, image) for NaN/Inf, or try other settings)"
    )


@jax.jit
def all_finite(x: Any) -> jax.Array:
    """() bool: no NaN or Inf in ``x`` (an array, or a pytree of them: every latent stream)."""
    return jnp.all(jnp.stack([jnp.isfinite(a).all() for a in jax.tree.leaves(x)]))


def classifier_free_guidance(noise_pred: jax.Array, guidance_scale: jax.Array) -> jax.Array:
    """Split a (2B, ...) prediction into cond (first B) and uncond and combine them as
    ``uncond + guidance_scale * (cond - uncond)`` (diffusers' formula, in the prediction's dtype);
    ``guidance_scale`` () or (B,), one weight per video."""
    cond, uncond = jnp.split(noise_pred, 2, axis=0)
    weight = guidance_scale.astype(cond.dtype)
    weight = weight.reshape(weight.shape + (1,) * (cond.ndim - weight.ndim)) if weight.ndim else weight
    return uncond + weight * (cond - uncond)


def rescale_noise_cfg(noise_cfg: jax.Array, noise_pred_text: jax.Array, guidance_rescale: Any) -> jax.Array:
    """Guidance rescale (Lin et al. 2023, sec. 3.4): pull the guided prediction's spread back
    towards the conditional one's.

    ``rescaled = noise_cfg * std(noise_pred_text) / std(noise_cfg)`` with the standard deviation
    over every axis but the first (per sample, unbiased like torch's ``Tensor.std``), then
    ``guidance_rescale * rescaled + (1 - guidance_rescale) * noise_cfg``. Follows diffusers'
    ``rescale_noise_cfg`` (pipelines/stable_diffusion/pipeline_stable_diffusion.py, copied into
    the LTX-Video pipelines); as there it is applied after :func:`classifier_free_guidance` when
    ``guidance_rescale > 0``. The reductions cover all non-batch axes, so any latent layout works
    ((B, T, H, W, C) or packed (B, L, D)).

    Args:
        noise_cfg: (B, ...) the guided prediction, floating.
        noise_pred_text: (B, ...) the conditional prediction, same shape.
        guidance_rescale: scalar (Python number or () array) in [0, 1]; 0 returns ``noise_cfg``
            unchanged in value.

    Returns:
        (B, ...) in ``noise_cfg.dtype`` (the standard deviations are taken in that dtype, as in
        torch).

    Raises:
        InputError: the shapes differ or have no non-batch axis (checked at trace time).
    """
    if noise_cfg.shape != noise_pred_text.shape or noise_cfg.ndim < 2:
        raise InputError(
            f"rescale_noise_cfg: noise_cfg {noise_cfg.shape} and noise_pred_text {noise_pred_text.shape} "
            "must have the same shape (B, ...) with at least one axis after the batch."
        )
    axes = tuple(range(1, noise_cfg.ndim))
    std_text = jnp.std(noise_pred_text, axis=axes, keepdims=True, ddof=1)
    std_cfg = jnp.std(noise_cfg, axis=axes, keepdims=True, ddof=1)
    rescaled = noise_cfg * (std_text / std_cfg)
    g = jnp.asarray(guidance_rescale, noise_cfg.dtype)
    return g * rescaled + (1 - g) * noise_cfg
