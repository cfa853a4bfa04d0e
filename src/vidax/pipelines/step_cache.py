"""Step caching: reuse cached residuals instead of running every transformer block, as diffusers
0.42.1's cache hooks do (``diffusers/hooks/first_block_cache.py``, ``mag_cache.py``,
``taylorseer_cache.py``), with the same configs, the same skip decisions and the same arithmetic.

Enable with ``pipe.enable_cache(config)`` (:class:`FirstBlockCacheConfig`,
:class:`MagCacheConfig`, :class:`TaylorSeerCacheConfig`, :mod:`vidax.pipelines.cache_configs`);
the CLI's ``--cache``. The pipeline's
denoising step then runs ``embed``, :meth:`StepCache.forward` (the blocks, or the cache) and the
scheduler update as one compiled function; the cache's state is carried between steps as arrays
(:class:`CacheCarry`, beside the scheduler state), so no step recompiles:

* First-Block Cache runs the first block, compares the relative mean absolute change of its
  residual with the previous computed step's, and when it is at most ``threshold`` skips the other
  blocks, adding the cached residual of the rest of the blocks (``jax.lax.cond`` on the device:
  the decision is data-dependent).
* MagCache decides from the step index and the calibrated magnitude ratios alone (on the host,
  mirroring the reference's float32 accumulators); a skipped step runs no block and adds the
  previous residual of the whole stack to the video stream.
* TaylorSeer (host-side schedule): in lite mode it runs every block on its compute steps and
  predicts the transformer output by a Taylor expansion on the others; otherwise each module its
  identifiers hook inside the block stacks (its defaults: HunyuanVideo's attention modules) keeps
  its own Taylor factors, carried per layer through the blocks' scan
  (:meth:`~vidax.blocks.transformer.DiffusionTransformer.run_blocks`'s ``hooks``), and on the
  other steps returns its prediction (or zeros, ``skip_predict_identifiers``) without running,
  while the rest of every block runs (with streamed blocks, each chunk carries its layers'
  factors). Where the patterns hook ``proj_out`` alone (lite mode on Cosmos 3, whose ``layers``
  its block pattern does not match) every block runs and ``proj_out``'s output is predicted. A
  head with several outputs (LTX-2's and Cosmos 3's video and sound) has its first, ``proj_out``'s,
  predicted; the others come from the head on the streams the blocks left (zeros where lite mode
  skipped them, as the reference's skipped blocks return zeros).

State per branch where the reference keeps one: diffusers runs the conditional and unconditional
passes as separate calls with a state each for Wan and HunyuanVideo
(``FamilyHooks.separate_cfg_passes``); vidax batches them, so First-Block Cache decides per half
of the batch (the blocks run for the whole batch when either half needs them, and a half that skips
takes its cached result). Each expert of Wan2.2 starts a fresh state, as its hooks are its own.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.pipelines.cache_configs import (
    _DTYPES,
    CacheConfig,
    FirstBlockCacheConfig,
    MagCacheConfig,
    TaylorSeerCacheConfig,
    check_cache_call,
    check_cache_config,
    describe_config,
    parse_cache_option,
)
from vidax.pipelines.cache_report import CacheReport

_F32 = jnp.float32


# ---------------------------------------------------------------------------------------------
# The state carried between steps


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class CacheCarry:
    """The scheduler state and the cache's arrays, carried together by the denoising loop in
    place of the scheduler state (the family hooks see ``sched`` only)."""

    sched: Any
    cache: dict


@dataclasses.dataclass
class CacheState:
    """A step cache's state after a step: what a call's ``on_state`` is handed (``cache=``) and
    its ``resume`` takes back to continue the run exactly (:meth:`StepCache.restore`).

    Attributes:
        arrays: the leaves of the cache arrays the step carries (``jax.tree.leaves`` order;
            device arrays as handed, numpy arrays to resume from).
        host: what the host keeps between steps, in JSON types: ``kind`` (the method),
            ``segment`` (MagCache's accumulators and calibration, TaylorSeer's schedule
            counters) and ``report`` (the call's :class:`CacheReport` records so far).
    """

    arrays: list
    host: dict


def reference_module_names(model: nnx.Module) -> list[str]:
    """The module names the reference model has (``blocks.3.attn1``), from the parameter paths
    (vidax mirrors the reference's module tree; stacked layers expanded by index)."""
    stacks = set(getattr(model, "block_stacks", ()))
    names: set[str] = set()
    counts = {a: int(jax.tree.leaves(nnx.state(getattr(model, a)))[0].shape[0]) for a in stacks}
    for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        parts = [str(p) for p in path[:-1]]
        if parts and parts[0] in stacks:
            for i in range(counts[parts[0]]):
                full = [parts[0], str(i)] + parts[1:]
                names.update(".".join(full[:k]) for k in range(1, len(full) + 1))
        else:
            names.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return sorted(names)


@dataclasses.dataclass(frozen=True)
class TapSpec:
    """TaylorSeer's hook on one module inside the layers of a block stack (hashable: part of
    the compiled step's key).

    Attributes:
        stack: the block stack's attribute (``transformer_blocks``).
        path: the module inside a layer (``("attn",)``); ``()``: the layer itself.
        inactive: a ``skip_predict_identifiers`` module (zeros on predicted steps) rather than a
            predicted one.
        layers: per layer of the stack, whether the module is hooked there.
    """

    stack: str
    path: tuple[str, ...]
    inactive: bool
    layers: tuple[bool, ...]

    @property
    def key(self) -> str:
        """The tap's name in the cache arrays (the module's path, and its mode)."""
        return (".".join(self.path) or "<layer>") + (" skip" if self.inactive else "")


def taylorseer_mode(config: TaylorSeerCacheConfig, model: nnx.Module) -> str:
    """``"none"`` (the reference's patterns match no module of ``model``: an uncached run),
    ``"lite"`` (every top-level block skipped and ``proj_out``'s output predicted), ``"proj_out"``
    (``proj_out``'s output predicted while every block runs: lite mode on a model whose block
    stacks lite mode's block pattern does not match, Cosmos 3's ``layers``) or ``"modules"``
    (the hooked modules inside the block stacks predicted, :func:`taylorseer_taps`).

    Raises:
        InputError: the patterns hook modules vidax cannot hook as the reference does.
    """
    inactive, active = config.patterns()
    names = reference_module_names(model)
    hooked_inactive = {n for n in names if any(re.fullmatch(p, n) for p in inactive)}
    hooked_active = {n for n in names if any(re.fullmatch(p, n) for p in active)} - hooked_inactive
    if not hooked_inactive and not hooked_active:
        return "none"
    blocks = {f"{a}.{i}" for a in model.block_stacks for i in range(_stack_len(model, a))}
    if hooked_active == {"proj_out"} and hooked_inactive == blocks:
        return "lite"
    if hooked_active == {"proj_out"} and not hooked_inactive:
        return "proj_out"
    taylorseer_taps(config, model)
    return "modules"


def taylorseer_taps(config: TaylorSeerCacheConfig, model: nnx.Module) -> tuple[TapSpec, ...]:
    """The modules TaylorSeer's patterns hook in ``model`` (diffusers' ``apply_taylorseer_cache``:
    ``re.fullmatch`` on the reference's module names), grouped per stack and module: its default
    patterns hook the attention modules of HunyuanVideo's two stacks (``transformer_blocks.i.attn``,
    ``single_transformer_blocks.i.attn``); Wan's ``attn1`` / ``attn2`` and the other families'
    match none of them.

    vidax hooks the attention modules (:class:`vidax.blocks.attention.Attention`, called once per
    layer as the reference's) and whole layers inside the block stacks, each either predicted
    (``cache_identifiers``) or zeroed (``skip_predict_identifiers``) on the predicted steps.

    Raises:
        InputError: a hooked module outside the block stacks (other than lite mode's), one that
            is no attention module or layer, or one inside another hooked module.
    """
    from vidax.blocks.attention import Attention

    inactive, active = config.patterns()
    names = reference_module_names(model)
    owner = f"TaylorSeerCacheConfig hooks {{}} of {type(model).__name__}"
    taps: dict[tuple[str, tuple[str, ...], bool], list[bool]] = {}
    hooked = []
    for n in names:
        is_inactive = any(re.fullmatch(p, n) for p in inactive)
        if not (is_inactive or any(re.fullmatch(p, n) for p in active)):
            continue
        hooked.append(n)
        parts = n.split(".")
        if parts[0] not in model.block_stacks or len(parts) < 2:
            raise InputError(
                owner.format(repr(n)) + ": vidax hooks modules inside the block stacks "
                f"({', '.join(model.block_stacks)}) only, or use_lite_mode=True"
            )
        path = tuple(parts[2:])
        module = getattr(model, parts[0])
        for p in path:
            module = getattr(module, p, None)
        if path and not isinstance(module, Attention):
            raise InputError(
                owner.format(repr(n)) + f" (a {type(module).__name__}): vidax hooks attention modules "
                "and whole layers only"
            )
        key = (parts[0], path, bool(is_inactive))
        taps.setdefault(key, [False] * _stack_len(model, parts[0]))[int(parts[1])] = True
    for n in hooked:
        inner = [m for m in hooked if m.startswith(n + ".")]
        if inner:
            raise InputError(
                owner.format(f"{inner[0]!r} inside {n!r}") + ": a hooked module inside another "
                "is not implemented in vidax"
            )
    return tuple(TapSpec(stack, path, inact, tuple(layers)) for (stack, path, inact), layers in sorted(taps.items()))


def _stack_len(model: nnx.Module, attr: str) -> int:
    return int(jax.tree.leaves(nnx.state(getattr(model, attr)))[0].shape[0])


# ---------------------------------------------------------------------------------------------
# The traced forward


class _Tap:
    """A hooked module in a layer's place: calls ``fn`` (the module wrapped by :func:`_tapped`)."""

    def __init__(self, fn: Any):
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _tapped(fn: Any, spec: CacheSpec, tap: TapSpec, cs: dict, entry: dict, new: dict) -> Any:
    """``fn`` (a module's call, or a layer's ``run``) as TaylorSeerCacheHook.new_forward runs it in
    a hooked layer: on a compute step it runs and (active) its outputs update the factors; on the
    others it does not run and returns the prediction (active) or zeros of its outputs' shapes
    (inactive). The new factors go to ``new[tap.key]``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        like = jax.eval_shape(lambda: fn(*args, **kwargs))
        use_cache = entry["hooked"] & jnp.logical_not(cs["compute"])
        if tap.inactive:
            return jax.lax.cond(
                use_cache,
                lambda _: jax.tree.map(lambda o: jnp.zeros(o.shape, o.dtype), like),
                lambda _: fn(*args, **kwargs),
                0,
            )
        factors = entry["factors"]

        def compute(_):
            out = fn(*args, **kwargs)
            return out, spec.tap_factors(out, factors, cs)

        out, f = jax.lax.cond(use_cache, lambda _: (spec.tap_predict(factors, like, cs["coeff"]), factors), compute, 0)
        new[tap.key] = dict(entry, factors=jax.tree.map(lambda a, b: jnp.where(entry["hooked"], a, b), f, factors))
        return out

    return call


def _recorded(fn: Any, key: tuple, shapes: dict) -> Any:
    """``fn`` recording its outputs' shapes in ``shapes[key]`` (for the taps' initial state)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        shapes[key] = jax.tree.map(lambda o: jax.ShapeDtypeStruct(o.shape, o.dtype), out)
        return out

    return call


def tap_shapes(model: Any, x: Any, inputs: Any, taps: Sequence[TapSpec]) -> dict:
    """``{(stack, tap key): outputs' ShapeDtypeStructs}`` of the hooked modules (one layer's),
    from running the blocks on traced streams (inside :func:`jax.eval_shape`)."""
    shapes: dict = {}

    def hook(stack, layer, h, entry, run):
        for t in (t for t in taps if t.stack == stack):
            if not t.path:
                run = _recorded(run, (stack, t.key), shapes)
                continue
            parent = functools.reduce(getattr, t.path[:-1], layer)
            setattr(parent, t.path[-1], _Tap(_recorded(getattr(parent, t.path[-1]), (stack, t.key), shapes)))
        return run(layer, h), entry

    stacks = dict.fromkeys(t.stack for t in taps)
    hooks = {a: (jnp.zeros((_stack_len(model, a),)), functools.partial(hook, a)) for a in stacks}
    model.run_blocks(x, inputs, hooks=hooks)
    return shapes


def _first(x: Any) -> jax.Array:
    return x[0] if isinstance(x, (tuple, list)) else x


def _with_first(x: Any, first: jax.Array) -> Any:
    return (first, *x[1:]) if isinstance(x, (tuple, list)) else first


def _branch_absmean(a: jax.Array, branches: int) -> jax.Array:
    """(branches,) float32: ``mean|a|`` over each equal part of the batch."""
    return jnp.mean(jnp.abs(a.astype(_F32)).reshape(branches, -1), axis=1)


def _rows(mask: jax.Array, like: jax.Array) -> jax.Array:
    """A (B,) mask broadcast against ``like`` (B, ...)."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


@dataclasses.dataclass(frozen=True)
class CacheSpec:
    """What a compiled step depends on (hashable): the method, the branches of the batch, and
    the method's static settings."""

    kind: str  # "first_block" | "mag" | "taylorseer"
    branches: int = 1
    calibrate: bool = False
    max_order: int = 1
    factors_dtype: str | None = "bfloat16"
    taps: tuple[TapSpec, ...] = ()  # TaylorSeer's hooked modules (empty: lite mode)
    # TaylorSeer predicting proj_out alone, or modules inside the layers: the blocks run on every step
    blocks_always: bool = False

    @staticmethod
    def split(carry: CacheCarry) -> tuple[Any, dict]:
        """``(scheduler state, cache arrays)`` of a carry."""
        return carry.sched, carry.cache

    @staticmethod
    def join(stepped: tuple, cs: dict) -> tuple:
        """``(latents, carry)`` from a step's ``(latents, scheduler state)`` and the cache arrays."""
        return stepped[0], CacheCarry(stepped[1], cs)

    @property
    def first_layer_alone(self) -> bool:
        """The first block runs before the decision (First-Block Cache), the rest after it."""
        return self.kind == "first_block"

    def forward(self, model: Any, x: Any, inputs: Any, cs: dict) -> tuple[jax.Array, dict]:
        """The model's prediction from the embedded streams ``x`` with the cache (traced, one
        compiled step): :meth:`begin`, the remaining blocks under ``jax.lax.cond`` of
        :meth:`need_blocks`, :meth:`end`. Returns ``(prediction, new cache arrays)``."""
        if self.taps:
            return self._forward_taps(model, x, inputs, cs)
        start = int(self.first_layer_alone)
        n = model.num_blocks()
        rows = None if self.kind == "taylorseer" else model.hidden_rows(inputs)  # TaylorSeer keeps no residual
        y, aux = self.begin(lambda h: model.run_blocks(h, inputs, layers=(0, 1)), rows, x, cs)
        z = jax.lax.cond(
            self.need_blocks(cs, aux), lambda h: model.run_blocks(h, inputs, layers=(start, n)), lambda h: h, y
        )
        return self.end(model, x, y, z, inputs, cs, aux)

    def _forward_taps(self, model: Any, x: Any, inputs: Any, cs: dict) -> tuple[jax.Array, dict]:
        """TaylorSeer on modules inside the layers: every layer runs; each hooked module runs and
        updates its Taylor factors on a compute step, and on the others returns its prediction
        (or zeros, inactive) without running (``jax.lax.cond`` per layer)."""
        hooks = {}
        for stack in dict.fromkeys(t.stack for t in self.taps):
            hooks.update(self.tap_hooks(cs, stack, cs["taps"][stack]))
        z, states = model.run_blocks(x, inputs, hooks=hooks)
        return model.head(z, inputs), dict(cs, taps=states)

    def tap_hooks(self, cs: dict, stack: str, entries: dict) -> dict:
        """``run_blocks``' ``hooks`` for the hooked modules of ``stack`` over the layers whose
        per-layer ``entries`` (a slice of ``cs["taps"][stack]``: the streamed runner passes one
        chunk's) are given; ``cs``: the step's decision and coefficients."""
        taps = [t for t in self.taps if t.stack == stack]
        return {stack: (entries, functools.partial(self._layer_hook, taps, cs))}

    @staticmethod
    def with_cache(carry: CacheCarry, cs: dict) -> CacheCarry:
        """``carry`` with the cache arrays ``cs``."""
        return CacheCarry(carry.sched, cs)

    def _layer_hook(self, taps: list, cs: dict, layer: Any, h: Any, entry: dict, run: Any) -> tuple[Any, dict]:
        """One layer with its hooked modules wrapped (the layer is this trace's own merged copy,
        so the wrapping ends with it): ``(streams, new entry)``."""
        new = dict(entry)
        for t in taps:
            if not t.path:
                run = _tapped(run, self, t, cs, entry[t.key], new)
                continue
            parent = functools.reduce(getattr, t.path[:-1], layer)
            setattr(parent, t.path[-1], _Tap(_tapped(getattr(parent, t.path[-1]), self, t, cs, entry[t.key], new)))
        return run(layer, h), new

    def tap_factors(self, out: Any, factors: Any, cs: dict) -> Any:
        """TaylorSeerState.update: the new factors from a module's outputs ``out`` (a pytree) and
        the previous ``factors`` (``(orders, ...)`` per output): order 0 the output, order
        ``j + 1`` the divided difference of order ``j`` by the steps since the last update,
        for the orders held before; stored in the factors' dtype."""

        def one(o, f):
            new = [o]
            for j in range(self.max_order):
                nxt = (new[j] - f[j].astype(o.dtype)) / cs["delta"].astype(o.dtype)
                new.append(jnp.where(j < cs["n_prev"], nxt, jnp.zeros_like(nxt)))
            return jnp.stack([v.astype(f.dtype) for v in new])

        return jax.tree.map(one, out, factors)

    def tap_predict(self, factors: Any, like: Any, coeff: jax.Array) -> Any:
        """TaylorSeerState.predict: ``sum_k factor_k x offset**k / k!`` over the orders held, each
        factor cast to the output's dtype and multiplied by the coefficient (a Python float in
        the reference: float32 arithmetic, rounded to the output's dtype), summed in that dtype."""

        def one(f, o):
            out = jnp.zeros(o.shape, o.dtype)
            for k in range(self.max_order + 1):
                out = out + (f[k].astype(o.dtype).astype(_F32) * coeff[k]).astype(o.dtype)
            return out

        return jax.tree.map(one, factors, like)

    def begin(self, run_first: Any, rows: tuple[int, int], x: Any, cs: dict) -> tuple[Any, dict]:
        """Before the remaining blocks: ``(streams, aux)``. First-Block Cache runs the first block
        (``run_first``) and decides per branch whether the rest must run (``aux["compute"]``);
        the others pass ``x`` on."""
        if self.kind != "first_block":
            return x, {}
        s, e = rows
        y = run_first(x)
        r = _first(y)[:, s:e] - _first(x)[:, s:e]
        prev = cs["head_res"]
        dt = r.dtype
        ratio = _branch_absmean(r - prev, self.branches).astype(dt) / _branch_absmean(prev, self.branches).astype(dt)
        compute = jnp.logical_not(cs["has_prev"]) | (ratio.astype(_F32) > cs["threshold"])
        return y, dict(r=r, compute=compute)

    def need_blocks(self, cs: dict, aux: dict) -> jax.Array:
        """() bool: whether the remaining blocks run this step."""
        if self.kind == "first_block":
            return aux["compute"].any()
        if self.kind == "mag":
            return jnp.logical_not(cs["skip"])
        return cs["compute"] | self.blocks_always

    def end(self, model: Any, x: Any, y: Any, z: Any, inputs: Any, cs: dict, aux: dict) -> tuple[jax.Array, dict]:
        """The prediction and the new cache arrays from the streams ``x`` (embedded), ``y``
        (after :meth:`begin`) and ``z`` (after the remaining blocks, or ``y`` where they did not run)."""
        if self.kind == "first_block":
            compute, r, prev = aux["compute"], aux["r"], cs["head_res"]
            rows = jnp.repeat(compute, _first(x).shape[0] // self.branches)

            def sel(new, old):
                return jnp.where(_rows(rows, new), new, old)

            tail = jax.tree.map(lambda zz, yy: zz - yy, z, y)
            cached = jax.tree.map(lambda t, yy: t + yy, cs["tail_res"], y)
            out = jax.tree.map(sel, z, cached)
            new = dict(
                cs,
                head_res=sel(r, prev),
                has_prev=cs["has_prev"] | compute,
                tail_res=jax.tree.map(sel, tail, cs["tail_res"]),
                computed=compute,
            )
            return model.head(out, inputs), new
        if self.kind == "mag":
            s, e = model.hidden_rows(inputs)
            h0, prev, skip = _first(x)[:, s:e], cs["prev_res"], cs["skip"]
            res = _first(z)[:, s:e] - h0
            f = _first(z)
            out = _with_first(z, jnp.where(skip, f.at[:, s:e].set(h0 + prev), f))
            ratio = jnp.ones((self.branches,), _F32)
            if self.calibrate:
                cur = jnp.linalg.norm(res.astype(_F32), axis=-1)
                old = jnp.linalg.norm(prev.astype(_F32), axis=-1)
                ratio = jnp.mean((cur / (old + 1e-8)).reshape(self.branches, -1), axis=1)
            return model.head(out, inputs), dict(cs, prev_res=jnp.where(skip, prev, res), ratio=ratio)
        if self.taps:  # the layers updated the hooked modules' factors (the streamed chunks)
            return model.head(z, inputs), cs
        factors = cs["factors"]
        fdt = factors.dtype

        def compute(h):
            out = model.head(h, inputs)
            pred = _first(out)
            new = [pred]
            for j in range(self.max_order):
                nxt = (new[j] - factors[j].astype(pred.dtype)) / cs["delta"].astype(pred.dtype)
                new.append(jnp.where(j < cs["n_prev"], nxt, jnp.zeros_like(nxt)))
            return out, jnp.stack([f.astype(fdt) for f in new])

        def predict(h):
            pdt = cs["out"].dtype
            out = jnp.zeros(factors.shape[1:], pdt)
            for o in range(self.max_order + 1):  # torch: factor * Python float, in float32, rounded to pdt
                out = out + (factors[o].astype(_F32) * cs["coeff"][o]).astype(pdt)
            if isinstance(jax.eval_shape(lambda: model.head(h, inputs)), (tuple, list)):
                # Several outputs (video first, from proj_out, the one predicted): the others come
                # from the head on what the blocks left, the streams they computed (blocks_always)
                # or zeros (lite mode: the reference's skipped blocks return zeros).
                left = h if self.blocks_always else jax.tree.map(jnp.zeros_like, h)
                out = _with_first(model.head(left, inputs), out)
            return out, factors

        pred, factors = jax.lax.cond(cs["compute"], compute, predict, z)
        return pred, dict(cs, factors=factors)


# ---------------------------------------------------------------------------------------------
# The host side of one run of steps


def _threshold_f32(t: float) -> np.float32:
    """The largest float32 ``f <= t``: for a float32 ratio ``r``, ``r > f`` exactly when
    ``float(r) > t`` (the reference compares the ratio's Python float with the threshold)."""
    f = np.float32(t)
    return np.nextafter(f, np.float32(-np.inf)) if float(f) > t else f


class StepCache:
    """One run of steps of one transformer (an expert segment) with a cache: the arrays the
    step carries, the host-side decisions (MagCache, TaylorSeer) and the record of what ran.

    Args:
        config: the cache config. model: the transformer (names, depth). branches: 2 when the
            reference runs cond and uncond as separate calls (with CFG), else 1.
        num_steps: steps of the call. report: the :class:`CacheReport` to record into.
    """

    def __init__(self, config: CacheConfig, model: Any, branches: int, num_steps: int, report: CacheReport):
        self.config = config
        self.branches = branches
        self.report = report
        self.labels = ["cond", "uncond"] if branches == 2 else ["all"]
        self.num_blocks = model.num_blocks()
        if isinstance(config, FirstBlockCacheConfig):
            self.spec = CacheSpec("first_block", branches)
        elif isinstance(config, MagCacheConfig):
            self.spec = CacheSpec("mag", branches, calibrate=config.calibrate)
            self.ratios = None if config.calibrate else config.ratios()
            self._mag = dict(step=0, acc_ratio=np.float32(1.0), acc_err=np.float32(0.0), acc_steps=0, has_prev=False)
            self.calibration: list[list[float]] = [[] for _ in range(branches)]
        else:
            mode = taylorseer_mode(config, model)
            taps = taylorseer_taps(config, model) if mode == "modules" else ()
            self.spec = CacheSpec(
                "taylorseer",
                1,
                max_order=config.max_order,
                factors_dtype=config.taylor_factors_dtype,
                taps=taps,
                blocks_always=mode != "lite",
            )
            if taps or mode == "proj_out":  # the blocks all run; the hooked modules are what is skipped
                report.num_blocks = self.num_blocks = sum(sum(t.layers) for t in taps) if taps else 1
                report.unit = "hooked module"
                report.blocks_always = not taps
            self._ts = dict(step=-1, last=None, updates=0)
        self._pending: dict = {}

    # -- state ---------------------------------------------------------------------------------

    def initial(self, shapes: dict) -> dict:
        """The cache arrays before the first step, from the shapes of one step
        (``streams``, ``hidden``, ``pred``: ShapeDtypeStructs)."""
        nb = self.branches
        zeros = lambda s: jnp.zeros(s.shape, s.dtype)  # noqa: E731
        if self.spec.kind == "first_block":
            return dict(
                threshold=jnp.asarray(_threshold_f32(self.config.threshold)),
                head_res=zeros(shapes["hidden"]),
                has_prev=jnp.zeros((nb,), bool),
                tail_res=jax.tree.map(zeros, shapes["streams"]),
                computed=jnp.ones((nb,), bool),
            )
        if self.spec.kind == "mag":
            return dict(skip=jnp.asarray(False), prev_res=zeros(shapes["hidden"]), ratio=jnp.ones((nb,), _F32))
        pred = _first(shapes["pred"])  # several outputs: the first (proj_out's) is predicted
        orders = self.spec.max_order + 1

        def factors(o, n=()):
            fdt = _DTYPES[self.spec.factors_dtype] if self.spec.factors_dtype else o.dtype
            return jnp.zeros(n + (orders,) + tuple(o.shape), fdt)

        cs = dict(
            compute=jnp.asarray(True),
            delta=jnp.asarray(1.0, _F32),
            n_prev=jnp.asarray(0, jnp.int32),
            coeff=jnp.zeros((orders,), _F32),
            out=jnp.zeros((), pred.dtype),
            factors=factors(pred) if not self.spec.taps else jnp.zeros((0,), _F32),
        )
        if self.spec.taps:
            cs["taps"] = {}
            for t in self.spec.taps:
                entry = dict(hooked=jnp.asarray(t.layers))
                if not t.inactive:
                    n = (len(t.layers),)
                    entry["factors"] = jax.tree.map(lambda o: factors(o, n), shapes["taps"][(t.stack, t.key)])
                cs["taps"].setdefault(t.stack, {})[t.key] = entry
        return cs

    # -- saving and resuming --------------------------------------------------------------------

    def state(self, carry: CacheCarry) -> CacheState:
        """The cache's state after a step (``carry``: the step's output): its arrays (the device
        arrays, not copied) and the host's counters, in JSON types."""
        segment: dict = {}
        if self.spec.kind == "mag":
            mag = {k: float(v) if isinstance(v, np.floating) else v for k, v in self._mag.items()}
            segment = dict(mag=mag, calibration=self.calibration)
        elif self.spec.kind == "taylorseer":
            segment = dict(ts=self._ts)
        host = dict(kind=self.spec.kind, segment=segment, report=self.report.records())
        return CacheState(jax.tree.leaves(carry.cache), json.loads(json.dumps(host)))

    def restore(self, saved: CacheState | None, continues: bool, initial: dict) -> dict:
        """The cache arrays a resumed run starts from, the host's counters and the report's
        records put back as :meth:`state` took them. ``continues``: the resumed step is run by
        the transformer whose run was saved (the cache state goes on; else this run starts
        afresh, ``initial``, as each expert's hooks are their own, and only the report's records
        are put back). ``initial``: this run's fresh arrays (their shapes and dtypes are what the
        saved ones must have).

        Raises:
            InputError: ``saved`` is None while ``continues``, of another method, or its arrays
                do not fit ``initial`` (saved by another call or another version).
        """
        from vidax.pipelines.sampling import restore_denoising_state

        if saved is None:
            if continues:
                raise InputError(
                    f"the saved denoising state does not fit this call: it holds no step cache state "
                    f"and the call's {self.spec.kind} cache continues from it"
                )
            return initial
        if saved.host.get("kind") != self.spec.kind:
            raise InputError(
                f"the saved denoising state does not fit this call: its step cache is "
                f"{saved.host.get('kind')!r}, the call's {self.spec.kind!r}"
            )
        for name in CacheReport.RECORDS:
            setattr(self.report, name, saved.host["report"][name])
        if not continues:
            return initial
        cs = restore_denoising_state(saved.arrays, initial)
        segment = saved.host["segment"]
        if self.spec.kind == "mag":
            mag = dict(segment["mag"])
            mag["acc_ratio"], mag["acc_err"] = np.float32(mag["acc_ratio"]), np.float32(mag["acc_err"])
            self._mag, self.calibration = mag, segment["calibration"]
        elif self.spec.kind == "taylorseer":
            self._ts = dict(segment["ts"])
        return cs

    # -- host decisions ------------------------------------------------------------------------

    def before_step(self, i: int, carry: CacheCarry) -> CacheCarry:
        """The carry for step ``i`` of this run: the host's decision set in it."""
        cs = carry.cache
        if self.spec.kind == "mag":
            skip = self._mag_decide()
            self._pending = dict(skip=skip)
            cs = dict(cs, skip=_like(skip, cs["skip"]))
        elif self.spec.kind == "taylorseer":
            compute, delta, n_prev, coeff = self._ts_decide()
            self._pending = dict(compute=compute)
            cs = dict(
                cs,
                compute=_like(compute, cs["compute"]),
                delta=_like(np.float32(delta), cs["delta"]),
                n_prev=_like(np.int32(n_prev), cs["n_prev"]),
                coeff=_like(coeff, cs["coeff"]),
            )
        return CacheCarry(carry.sched, cs)

    def after_step(self, i: int, carry: CacheCarry, seconds: float) -> None:
        """Record step ``i``'s decisions (read from the carry for First-Block Cache)."""
        kind = self.spec.kind
        if kind == "first_block":
            computed = [bool(c) for c in np.asarray(carry.cache["computed"])]
            for label, c in zip(self.labels, computed):
                self.report.record(label, c, head_only=True)
            step_kind = "full" if all(computed) else "skipped" if not any(computed) else "partial"
        elif kind == "mag":
            skip = self._pending["skip"]
            for label in self.labels:
                self.report.record(label, not skip, head_only=False)
            step_kind = "skipped" if skip else "full"
            self._mag_after(skip, carry)
        else:
            compute = self._pending["compute"]
            for label in self.labels:
                self.report.record(label, compute, head_only=False)
            step_kind = "full" if compute else "skipped"
            if compute:
                self._ts["updates"] += 1
                self._ts["last"] = self._ts["step"]
        self.report.step_kind.append(step_kind)
        self.report.step_s.append(seconds)
        self.report.step_warm.append(i == 0)

    def _mag_decide(self) -> bool:
        """MagCacheHeadHook.new_forward's decision, its accumulators in float32 as the reference's
        0-d tensors (True: skip)."""
        c, st = self.config, self._mag
        if c.calibrate:
            return False
        step = st["step"]
        scale = self.ratios[step] if step < len(self.ratios) else np.float32(1.0)
        retention = int(c.retention_ratio * c.num_inference_steps + 0.5)
        if step < retention:
            return False
        st["acc_ratio"] = np.float32(st["acc_ratio"] * scale)
        st["acc_steps"] += 1
        st["acc_err"] = np.float32(st["acc_err"] + np.abs(np.float32(1.0) - st["acc_ratio"]))
        if st["has_prev"] and st["acc_err"] <= np.float32(c.threshold) and st["acc_steps"] <= c.max_skip_steps:
            return True
        st["acc_ratio"], st["acc_steps"], st["acc_err"] = np.float32(1.0), 0, np.float32(0.0)
        return False

    def _mag_after(self, skip: bool, carry: CacheCarry) -> None:
        c, st = self.config, self._mag
        if not skip:
            if c.calibrate:
                ratios = np.asarray(carry.cache["ratio"])
                for k in range(self.branches):
                    self.calibration[k].append(1.0 if not st["has_prev"] else float(ratios[k]))
            st["has_prev"] = True
        st["step"] += 1
        if st["step"] >= c.num_inference_steps:
            if c.calibrate:
                self.report.calibration = dict(zip(self.labels, self.calibration))
                heading, listing = calibration_text(self.calibration[0], self.labels[0])
                print(heading, file=sys.stderr)  # stdout holds only what --cache mag:FILE reads back
                print(listing)
            st.update(step=0, acc_ratio=np.float32(1.0), acc_err=np.float32(0.0), acc_steps=0, has_prev=False)
            self.calibration = [[] for _ in range(self.branches)]

    def _ts_decide(self) -> tuple[bool, int, int, np.ndarray]:
        """TaylorSeerCacheHook's schedule: (compute, delta_step, orders held, the prediction's
        coefficients ``offset**k / k!`` for the orders held)."""
        c, st = self.config, self._ts
        st["step"] += 1
        step = st["step"]
        warmup = step < c.disable_cache_before_step
        interval = (step - c.disable_cache_before_step - 1) % c.cache_interval == 0
        cooldown = c.disable_cache_after_step is not None and step >= c.disable_cache_after_step
        compute = warmup or interval or cooldown
        held = min(st["updates"], c.max_order + 1)
        coeff = np.zeros((c.max_order + 1,), np.float32)
        if not compute:
            offset = step - st["last"]
            for o in range(held):
                coeff[o] = np.float32((offset**o) / math.factorial(o))
        delta = 1 if st["last"] is None else step - st["last"]
        return compute, delta, held, coeff


def calibration_text(ratios: Sequence[float], label: str) -> tuple[str, str]:
    """MagCache's calibration result as printed: a line saying what it is (printed on stderr) and
    the ratios as one JSON list (printed alone on stdout, so ``> ratios.txt`` saves what
    ``--cache mag:FILE`` / ``MagCacheConfig(mag_ratios=...)`` take). With CFG the conditional
    branch's ratios (the reference prints one list per branch; one config's ratios serve both,
    and the conditional pass is the one the guidance scales up)."""
    which = "" if label == "all" else f", the {'conditional' if label == 'cond' else label} pass"
    heading = (
        f"MagCache calibration ({len(ratios)} steps{which}): the ratios are printed as one list on stdout; "
        f"save them (e.g. --cache mag > ratios.txt) for --cache mag:FILE, or pass them as "
        f"MagCacheConfig(mag_ratios=...)"
    )
    return heading, json.dumps([float(r) for r in ratios])


def _like(value: Any, old: jax.Array) -> jax.Array:
    """``value`` as an array with ``old``'s dtype and placement (a compiled step takes its inputs
    where it was compiled for them)."""
    return jax.device_put(np.asarray(value, old.dtype), old.sharding)


def step_shapes(
    model: Any,
    params: Any,
    model_args: Any,
    latents: Any,
    state: Any,
    args: tuple,
    taps: Sequence[TapSpec] = (),
    rows: bool = True,
) -> dict:
    """The shapes the cache arrays take from (ShapeDtypeStructs; nothing is computed):
    ``streams`` and ``hidden`` (the rows of
    :meth:`~vidax.blocks.transformer.DiffusionTransformer.hidden_rows`; None without ``rows``,
    for TaylorSeer, which keeps no residual) after ``embed``, the
    prediction ``pred`` and, with TaylorSeer ``taps``, ``taps`` (:func:`tap_shapes`).
    ``model_args(params, latents, state, *args)``: the embed's arguments."""
    graphdef = nnx.graphdef(model)
    recorded: dict = {}

    def fn(p, lat, st, *a):
        m = nnx.merge(graphdef, p)
        x, inputs = m.embed(*model_args(p, lat, st, *a))
        if taps:
            recorded.update(tap_shapes(m, x, inputs, taps))
        if not rows:
            return x, None, m.head(x, inputs)
        s, e = m.hidden_rows(inputs)
        return x, _first(x)[:, s:e], m.head(x, inputs)

    streams, hidden, pred = jax.eval_shape(fn, params, latents, state, *args)
    return dict(streams=streams, hidden=hidden, pred=pred, taps=recorded)


__all__: Sequence[str] = (
    "FirstBlockCacheConfig",
    "MagCacheConfig",
    "TaylorSeerCacheConfig",
    "CacheCarry",
    "CacheState",
    "CacheReport",
    "StepCache",
    "CacheSpec",
    "parse_cache_option",
    "check_cache_config",
    "check_cache_call",
    "describe_config",
    "CacheConfig",
)
