"""The step caches' configs, as diffusers 0.42.1's (:class:`FirstBlockCacheConfig`,
:class:`MagCacheConfig`, :class:`TaylorSeerCacheConfig`), checked when made; ``--cache`` values
parsed into them; a call's checks against the enabled one. :mod:`vidax.pipelines.step_cache`
runs them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import shlex
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import InputError

logger = logging.getLogger("vidax.pipeline")


def _number(
    owner: str, name: str, value: Any, *, minimum: float = 0.0, integer: bool = False, open_min: bool = False
) -> Any:
    # The cache's decisions compare in float32: beyond its range a number is not finite there.
    kind = "an integer" if integer else "a finite number"
    ok = not isinstance(value, bool) and isinstance(
        value, (int, np.integer) if integer else (int, float, np.integer, np.floating)
    )
    f32 = ""
    if ok and not integer:
        ok = bool(np.isfinite(value))
        if ok and abs(float(value)) > float(np.finfo(np.float32).max):
            ok, f32 = False, f" (in float32, at most {float(np.finfo(np.float32).max):.4g})"
    if ok:
        ok = value > minimum if open_min else value >= minimum
    if not ok:
        bound = f"> {minimum:g}" if open_min else f">= {minimum:g}"
        raise InputError(f"{owner}: {name}= must be {kind} {bound}{f32}, got {value!r}")
    return int(value) if integer else float(value)


@dataclasses.dataclass
class FirstBlockCacheConfig:
    """First-Block Cache (diffusers' ``FirstBlockCacheConfig``).

    Attributes:
        threshold: the largest relative change of the first block's residual
            (``mean|r - r_prev| / mean|r_prev|``) for which the other blocks are skipped; >= 0.

    Raises:
        InputError: a negative or non-finite threshold.
    """

    threshold: float = 0.05

    def __post_init__(self):
        self.threshold = _number("FirstBlockCacheConfig", "threshold", self.threshold)


#: What MagCache's ratios must be, in words (``mag_ratios=``, ``--cache mag:FILE``).
MAG_RATIOS_VALID = "a flat list of finite numbers >= 0 (ratios of residual norms, one per step)"


def mag_ratios_problem(ratios: Any) -> str | None:
    """What is wrong with MagCache ratios, in words (``"entry 1 is [3, 4], not a number"``), or
    None when they are :data:`MAG_RATIOS_VALID` (a 1-D array counts as a list; ``True`` is not a
    number; a value beyond float32's range is not finite, as the ratios are float32)."""
    if isinstance(ratios, (np.ndarray, jax.Array)):
        if ratios.ndim != 1:
            return f"got an array of shape {tuple(ratios.shape)}"
        ratios = np.asarray(ratios).tolist()
    if not isinstance(ratios, (list, tuple)):
        return f"got {type(ratios).__name__} {ratios!r:.60}"
    if not ratios:
        return "got an empty list"
    for i, r in enumerate(ratios):
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, float, np.integer, np.floating)):
            return f"entry {i} is {r!r:.40}, not a number"
        if not (math.isfinite(r) and abs(r) <= np.finfo(np.float32).max):
            return f"entry {i} is {r!r}, not finite (in float32)"
        if r < 0:
            return f"entry {i} is {r!r}, below 0"
    return None


@dataclasses.dataclass
class MagCacheConfig:
    """MagCache (diffusers' ``MagCacheConfig``).

    Attributes:
        threshold: the largest accumulated error ``sum |1 - prod(ratios)|`` of skipped steps; >= 0.
        max_skip_steps: the most consecutive steps skipped; >= 0.
        retention_ratio: the fraction of the first steps never skipped (``int(ratio * steps + 0.5)``).
        num_inference_steps: the steps of the run the ratios are for; must equal the call's.
        mag_ratios: the calibrated magnitude ratios (float32), one per step; another length is
            interpolated to ``num_inference_steps`` (nearest) as diffusers does. Required unless
            ``calibrate``.
        calibrate: skip nothing and print the ratios of this run (to pass as ``mag_ratios``).

    Raises:
        InputError: a negative threshold / max_skip_steps, retention_ratio outside [0, 1],
            num_inference_steps < 1, no ratios without ``calibrate``, empty or non-finite ratios.
    """

    threshold: float = 0.06
    max_skip_steps: int = 3
    retention_ratio: float = 0.2
    num_inference_steps: int = 28
    mag_ratios: Any = None
    calibrate: bool = False

    def __post_init__(self):
        owner = "MagCacheConfig"
        self.threshold = _number(owner, "threshold", self.threshold)
        self.max_skip_steps = _number(owner, "max_skip_steps", self.max_skip_steps, integer=True)
        self.retention_ratio = _number(owner, "retention_ratio", self.retention_ratio)
        if self.retention_ratio > 1:
            raise InputError(f"{owner}: retention_ratio= must be in [0, 1], got {self.retention_ratio!r}")
        self.num_inference_steps = _number(
            owner, "num_inference_steps", self.num_inference_steps, minimum=1, integer=True
        )
        if not isinstance(self.calibrate, bool):
            raise InputError(f"{owner}: calibrate= must be True or False, got {self.calibrate!r}")
        if self.mag_ratios is None:
            if not self.calibrate:
                raise InputError(
                    f"{owner}: mag_ratios= is required (one ratio per step, model-dependent); run once "
                    "with calibrate=True to print them"
                )
            return
        problem = mag_ratios_problem(self.mag_ratios)
        if problem:
            raise InputError(f"{owner}: mag_ratios= must be {MAG_RATIOS_VALID}; {problem}")
        ratios = np.asarray(self.mag_ratios, np.float32)
        if ratios.size != self.num_inference_steps:
            logger.warning(
                "MagCacheConfig: interpolating mag_ratios from length %d to num_inference_steps=%d (as diffusers does)",
                ratios.size,
                self.num_inference_steps,
            )
        self.mag_ratios = [float(r) for r in ratios]

    def ratios(self) -> np.ndarray:
        """``mag_ratios`` as the reference uses them: float32, interpolated to
        ``num_inference_steps`` by diffusers' ``nearest_interp`` when the length differs."""
        src = np.asarray(self.mag_ratios, np.float32)
        n = self.num_inference_steps
        if len(src) == n:
            return src
        if n == 1:
            return src[-1:]
        scale = np.float32((len(src) - 1) / (n - 1))
        return src[np.round(np.arange(n, dtype=np.float32) * scale).astype(np.int64)]


_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass
class TaylorSeerCacheConfig:
    """TaylorSeer (diffusers' ``TaylorSeerCacheConfig``; the dtype as a name).

    Attributes:
        cache_interval: steps between full computations; >= 1.
        disable_cache_before_step: the first steps, always computed; >= 0.
        disable_cache_after_step: from this step on always computed (None: never).
        max_order: the Taylor expansion's order; >= 0.
        taylor_factors_dtype: ``"bfloat16"`` (diffusers' default), ``"float32"``, ``"float16"``
            or None (the output's dtype).
        skip_predict_identifiers, cache_identifiers: regular expressions (``re.fullmatch``) of the
            reference's module names that return zeros / are predicted on cached steps.
        use_lite_mode: skip every top-level block and predict ``proj_out`` (overrides the
            identifiers). vidax implements the configurations whose hooks are that (or none);
            others are refused when the cache is enabled.

    Raises:
        InputError: values out of range, an unknown dtype, an invalid regular expression.
    """

    cache_interval: int = 5
    disable_cache_before_step: int = 3
    disable_cache_after_step: int | None = None
    max_order: int = 1
    taylor_factors_dtype: Any = "bfloat16"
    skip_predict_identifiers: list[str] | None = None
    cache_identifiers: list[str] | None = None
    use_lite_mode: bool = False

    def __post_init__(self):
        owner = "TaylorSeerCacheConfig"
        self.cache_interval = _number(owner, "cache_interval", self.cache_interval, minimum=1, integer=True)
        self.disable_cache_before_step = _number(
            owner, "disable_cache_before_step", self.disable_cache_before_step, integer=True
        )
        if self.disable_cache_after_step is not None:
            self.disable_cache_after_step = _number(
                owner, "disable_cache_after_step", self.disable_cache_after_step, integer=True
            )
        self.max_order = _number(owner, "max_order", self.max_order, integer=True)
        d = self.taylor_factors_dtype
        if d is not None:
            name = getattr(d, "name", None) or str(d).replace("torch.", "")
            if name not in _DTYPES:
                raise InputError(f"{owner}: taylor_factors_dtype= must be one of {sorted(_DTYPES)} or None, got {d!r}")
            self.taylor_factors_dtype = name
        for field in ("skip_predict_identifiers", "cache_identifiers"):
            pats = getattr(self, field)
            if pats is None:
                continue
            if isinstance(pats, str) or not all(isinstance(p, str) for p in pats):
                raise InputError(f"{owner}: {field}= must be a list of regular expressions, got {pats!r}")
            for p in pats:
                try:
                    re.compile(p)
                except re.error as e:
                    raise InputError(f"{owner}: {field}= has an invalid regular expression {p!r}: {e}") from None
            setattr(self, field, list(pats))
        if not isinstance(self.use_lite_mode, bool):
            raise InputError(f"{owner}: use_lite_mode= must be True or False, got {self.use_lite_mode!r}")
        first = (
            0 < self.disable_cache_before_step
            or (-self.disable_cache_before_step - 1) % self.cache_interval == 0
            or self.disable_cache_after_step == 0
        )
        if not first:
            raise InputError(
                f"{owner}: disable_cache_before_step={self.disable_cache_before_step} with cache_interval="
                f"{self.cache_interval} predicts step 0 with nothing computed yet (diffusers raises "
                "there); use disable_cache_before_step >= 1"
            )

    def patterns(self) -> tuple[list[str], list[str]]:
        """``(inactive, active)`` patterns as diffusers resolves them (``apply_taylorseer_cache``)."""
        if self.use_lite_mode:
            return list(_BLOCK_IDENTIFIERS), list(_PROJ_OUT_IDENTIFIERS)
        return list(self.skip_predict_identifiers or []), list(self.cache_identifiers or _TRANSFORMER_BLOCK_IDENTIFIERS)


# diffusers/hooks/taylorseer_cache.py's module name patterns.
_TRANSFORMER_BLOCK_IDENTIFIERS = (
    "^blocks.*attn",
    "^transformer_blocks.*attn",
    "^single_transformer_blocks.*attn",
    "^temporal_transformer_blocks.*attn",
)


_BLOCK_IDENTIFIERS = ("^[^.]*block[^.]*\\.[^.]+$",)


_PROJ_OUT_IDENTIFIERS = ("^proj_out$",)


CacheConfig = FirstBlockCacheConfig | MagCacheConfig | TaylorSeerCacheConfig


def check_cache_config(config: Any, name: str = "config") -> CacheConfig:
    """``config`` if it is one of the three cache configs, else an InputError naming ``name``."""
    if not isinstance(config, (FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig)):
        raise InputError(
            f"{name}= must be a vidax.FirstBlockCacheConfig, MagCacheConfig or TaylorSeerCacheConfig, "
            f"got {type(config).__name__}"
        )
    return config


def parse_cache_option(
    value: str, num_inference_steps: int, *, name: str = "--cache", files: bool = True
) -> CacheConfig:
    """A ``--cache`` value (the CLI's flag, ``vidax serve``'s ``cache`` field): ``first_block:THRESHOLD``,
    ``mag:RATIOS`` (MagCache; ``RATIOS`` a file holding the ratios as a JSON list or numbers separated
    by spaces / commas, or the JSON list itself, ``mag:[1.0, 0.98, ...]``), ``mag`` (calibration:
    skips nothing and prints the ratios as one list, what ``mag:RATIOS`` reads back) or
    ``taylorseer`` (its lite mode, the default settings otherwise).

    Unlike ``MagCacheConfig(mag_ratios=...)`` (which interpolates ratios of another length, as
    diffusers does), the ratios given here must be one per step: a list calibrated for another
    number of steps is refused.

    Args:
        value: the option's text. num_inference_steps: the call's steps.
        name: how the option is named in errors (``--cache``; ``cache`` for a request field).
        files: whether ``mag:FILE`` may name a file (False: the ratios must be inline).

    Raises:
        InputError: one line naming the option, its value and what is valid.
    """
    shown = (
        f"{name} {shlex.quote(str(value))}" if name.startswith("-") else f"{name}={value!r}"
    )  # an empty value: --cache ''
    kind, colon, arg = str(value).strip().partition(":")
    valid = f"first_block:THRESHOLD, mag[:RATIOS{'_FILE' if files else ''}] or taylorseer"
    if kind == "first_block":
        try:
            threshold = float(arg)
        except ValueError:
            raise InputError(f"{shown}: THRESHOLD must be a number >= 0 (first_block:0.05)") from None
        try:
            return FirstBlockCacheConfig(threshold=threshold)
        except InputError:  # the config's own message names its class and keyword: say it as the option's
            raise InputError(f"{shown}: THRESHOLD must be a finite number >= 0, got {arg.strip()}") from None
    if kind == "mag":
        return _mag_option(shown, name, colon, arg.strip(), num_inference_steps, files)
    if kind == "taylorseer" and not arg:
        return TaylorSeerCacheConfig(use_lite_mode=True)
    raise InputError(f"{shown}: valid values are {valid}")


def _mag_option(shown: str, name: str, colon: str, arg: str, num_inference_steps: int, files: bool) -> CacheConfig:
    """:func:`parse_cache_option` of ``mag`` / ``mag:RATIOS`` (``arg``: the text after the colon,
    stripped; ``shown``: the option as errors show it)."""
    if not colon:
        return MagCacheConfig(num_inference_steps=num_inference_steps, calibrate=True)
    if not arg:
        raise InputError(
            f"{shown}: nothing after 'mag:'; give the ratios (mag:[r1, r2, ...]"
            f"{' or mag:FILE' if files else ''}), or 'mag' alone to calibrate"
        )
    if arg.startswith("["):
        text, where = arg, "the list"
    elif not files:
        raise InputError(
            f"{shown}: give the ratios inline, mag:[r1, r2, ...] (one per step); no file is read for a request"
        )
    else:
        try:
            with open(arg, encoding="utf-8-sig") as f:  # a byte-order mark is read past
                text = f.read()
        except OSError as e:
            raise InputError(f"{shown}: cannot read the ratios file {arg!r} ({e.strerror})") from None
        except UnicodeDecodeError:
            raise InputError(
                f"{shown}: the ratios file {arg!r} is not UTF-8 text; it must hold "
                f"{MAG_RATIOS_VALID} as a JSON list or numbers separated by spaces or commas"
            ) from None
        where = arg
    calibrate = f"{name} mag" if name.startswith("-") else f"{name}='mag'"
    expected = (
        f"{where} must hold {MAG_RATIOS_VALID}: a JSON list, or numbers separated by spaces or commas, "
        f"as {calibrate} prints them"
    )
    try:
        ratios = (
            json.loads(text) if text.lstrip().startswith("[") else [float(t) for t in re.split(r"[\s,]+", text.strip())]
        )
    except ValueError:
        raise InputError(f"{shown}: {expected}") from None
    problem = mag_ratios_problem(ratios)
    if problem:
        raise InputError(f"{shown}: {expected}; {problem}")
    if len(ratios) != num_inference_steps:
        count = f"{len(ratios)} ratios"
        raise InputError(
            f"{shown}: {where} holds {count}, the call has {num_inference_steps} steps; give one "
            f"per step (calibrate with {calibrate} at {num_inference_steps} steps)"
        )
    try:
        return MagCacheConfig(num_inference_steps=num_inference_steps, mag_ratios=ratios)
    except InputError as e:
        raise InputError(f"{shown}: {e}") from None


def describe_config(config: CacheConfig) -> str:
    """A short name of ``config`` for the run summary."""
    if isinstance(config, FirstBlockCacheConfig):
        return f"first_block threshold={config.threshold:g}"
    if isinstance(config, MagCacheConfig):
        return "mag calibration" if config.calibrate else f"mag threshold={config.threshold:g}"
    return (
        f"taylorseer interval={config.cache_interval} order={config.max_order}{' lite' if config.use_lite_mode else ''}"
    )


def check_cache_call(config: CacheConfig | None, num_inference_steps: int) -> None:
    """A call's checks against the enabled cache (before any work).

    Raises:
        InputError: MagCacheConfig's num_inference_steps differs from the call's (the
            reference's step counter would wrap around mid-run and its ratios be misaligned).
    """
    if isinstance(config, MagCacheConfig) and config.num_inference_steps != num_inference_steps:
        raise InputError(
            f"num_inference_steps={num_inference_steps} differs from the enabled "
            f"MagCacheConfig(num_inference_steps={config.num_inference_steps}); make them equal (the "
            "ratios are interpolated to the config's steps)"
        )
