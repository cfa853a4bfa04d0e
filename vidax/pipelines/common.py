"""Pieces every pipeline shares: prompt cleaning, argument checks, dtype parsing, outputs."""

from __future__ import annotations

import dataclasses
import html
import logging
import re
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from vidax.errors import InputError
from vidax.stats import RunStats

logger = logging.getLogger("vidax.pipeline")

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def parse_dtype(dtype: Any) -> Any:
    """``"float32"`` / ``"bfloat16"`` (or the jnp dtype) -> jnp dtype; anything else is an error."""
    if isinstance(dtype, str):
        key = dtype
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = repr(dtype)
    if key not in DTYPES:
        raise InputError(
            f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)} "
            "(float16 overflows in these models' fp32-kept paths and is not implemented)"
        )
    return DTYPES[key]


def prompt_clean(text: str) -> str:
    """The Wan/diffusers prompt clean-up: HTML-unescape twice, strip, collapse whitespace.

    diffusers also runs ``ftfy.fix_text`` when ftfy is installed; vidax does not depend on ftfy,
    so prompts with mojibake can tokenize differently from a reference run that has ftfy.
    """
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def as_prompt_list(name: str, prompt: str | Sequence[str] | None, batch: int | None = None) -> list[str]:
    if prompt is None:
        prompt = ""
    if isinstance(prompt, str):
        return [prompt] * (batch or 1)
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(p, str) for p in prompt):
        raise InputError(f"{name} must be a string or a list of strings, got {type(prompt).__name__}")
    if not prompt:
        raise InputError(f"{name} is an empty list")
    if batch is not None and len(prompt) != batch:
        raise InputError(f"{name} has {len(prompt)} entries but prompt has {batch}; give one per prompt")
    return list(prompt)


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclasses.dataclass
class VideoPipelineOutput:
    """Result of a pipeline call.

    Attributes:
        frames: ``output_type="np"``: float32 (B, F, H, W, 3) in [0, 1];
            ``output_type="latent"``: float32 latents (B, C, T, H, W) (diffusers layout).
        stats: timings and memory of this call.
    """

    frames: np.ndarray
    stats: RunStats
