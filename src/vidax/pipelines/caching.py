"""Step caches on a pipeline (First-Block Cache, MagCache, TaylorSeer; :mod:`vidax.pipelines.step_cache`):
which the diffusers reference can run on it, turning them on and off, a call's cache state.
"""

from __future__ import annotations

import logging
from typing import Any

from vidax.errors import InputError
from vidax.pipelines.step_cache import (
    TaylorSeerCacheConfig,
    check_cache_config,
    taylorseer_mode,
)

logger = logging.getLogger("vidax.pipeline")


class StepCaching:
    """The step-cache methods of a pipeline; a base of :class:`~vidax.pipelines.base.VideoPipeline`."""

    def enable_cache(self, config: Any) -> None:
        """Turn on step caching for the next calls (``config``: a
        :class:`~vidax.pipelines.step_cache.FirstBlockCacheConfig`, ``MagCacheConfig`` or
        ``TaylorSeerCacheConfig``; diffusers' ``pipe.transformer.enable_cache(config)``); each
        call starts a fresh cache state, as diffusers resets its hooks after a call.

        Raises:
            InputError: not a cache config; a cache already enabled (``disable_cache()`` first,
                as in diffusers); a cache this family's reference cannot hook.
        """
        config = self.check_cache(config)
        if self.cache_config is not None:
            raise InputError(
                f"a {type(self.cache_config).__name__} is already enabled; call disable_cache() before "
                f"enable_cache({type(config).__name__}(...))"
            )
        self.cache_config = config

    def check_cache(self, config: Any, name: str = "config") -> Any:
        """``config`` if this pipeline can run it (what :meth:`enable_cache` checks; reads the
        model's structure, no weight), else an InputError naming ``name``."""
        config = check_cache_config(config, name)
        if name == "config":  # the Python keyword; a CLI caller passes its flag as typed
            name = f"{name}={type(config).__name__}"
        check_cache_kind(type(self), config, name, self.checkpoint.pipeline_class_name)
        model = type(self.experts.modules[0]).__name__
        if isinstance(config, TaylorSeerCacheConfig):
            modes = {taylorseer_mode(config, m) for m in self.experts.modules}
            if modes == {"none"}:
                logger.warning(
                    "TaylorSeerCacheConfig's identifiers match no module of %s (as in diffusers): the "
                    "runs are uncached",
                    model,
                )
        elif min(m.num_blocks() for m in self.experts.modules) < 2:
            raise InputError(
                f"{name} needs at least 2 transformer blocks; {model} has "
                f"{min(m.num_blocks() for m in self.experts.modules)}"
            )
        return config

    def disable_cache(self) -> None:
        """Turn step caching off (a no-op when it is off)."""
        self.cache_config = None


def check_cache_kind(cls: type, config: Any, name: str = "config", pipeline: str | None = None) -> None:
    """Raise unless diffusers 0.42.1 runs ``config``'s kind of cache hooks on the pipeline class ``cls``
    (before any weight is read; ``name``: how the config is named, ``--cache first_block:0.1``;
    ``pipeline``: the pipeline class as the user loads it, model_index.json's ``_class_name``,
    default ``cls``'s name).

    Raises:
        InputError: one line naming ``name``.
    """
    pipeline, family = pipeline or cls.__name__, cls.family
    if not family.cache_reference:
        raise InputError(
            f"{name}: diffusers 0.42.1's {pipeline} cannot run cache hooks (no cache context "
            "around its transformer calls, or no block metadata), so there is no reference to match"
        )
    if not family.cache_block_metadata and not isinstance(config, TaylorSeerCacheConfig):
        problem = family.cache_metadata_problem.format(pipeline=pipeline, config=type(config).__name__)
        raise InputError(f"{name}: {problem}, so there is no reference to match; TaylorSeerCacheConfig runs")
    if len(family.latent_streams) > 1 and not isinstance(config, TaylorSeerCacheConfig):
        # vidax's First-Block Cache / MagCache measure and keep one stream's rows.
        raise InputError(
            f"{name}: {type(config).__name__} on a pipeline with several latent streams "
            f"({cls.__name__}: {', '.join(family.latent_streams)}) is not implemented in vidax; "
            "TaylorSeerCacheConfig runs"
        )
