"""Validation of the arguments models and pipelines share: dtypes and video arrays."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from vidax.errors import Arg, InputError

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
#: Short names accepted for :data:`DTYPES` (as torch / the ML tools spell them).
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16"}
#: Half-precision names, refused with the reason.
_HALF = ("float16", "fp16", "f16", "half")


def parse_dtype(dtype: Any, name: str = "dtype") -> Any:
    """``"float32"`` / ``"bfloat16"`` (or ``"fp32"`` / ``"bf16"``, the jnp dtype, or torch's
    ``torch.float32`` / ``torch.bfloat16`` as diffusers' ``torch_dtype=`` takes them) -> jnp dtype.

    Raises:
        InputError: any other value, naming ``name`` (``dtype=``; diffusers' ``torch_dtype=``)
            and the valid ones (float16 with the reason it is not implemented).
    """
    if isinstance(dtype, str):
        key = dtype.strip().lower()
    elif type(dtype).__module__ == "torch":  # torch.bfloat16 (diffusers' torch_dtype=), read without torch
        key = str(dtype).removeprefix("torch.")
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = repr(dtype)
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        valid = "use float32 or bfloat16 (or fp32, bf16)"
        if key in _HALF:
            raise InputError(
                Arg(name, dtype),
                f" is not supported; {valid}: float16 overflows in these models' "
                "fp32-kept paths and is not implemented",
            )
        raise InputError(Arg(name, dtype), f" is not supported; {valid}")
    return DTYPES[key]


def is_parsed_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is one :func:`parse_dtype` returns (``jnp.float32`` / ``jnp.bfloat16``,
    or their ``np.dtype``), not a name still to parse."""
    if isinstance(dtype, np.dtype):
        return any(dtype == np.dtype(t) for t in DTYPES.values())
    return any(dtype is t for t in DTYPES.values())


def parsed_dtype(dtype: Any, where: str) -> Any:
    """``dtype`` where it is one :func:`parse_dtype` returns (``jnp.float32`` / ``jnp.bfloat16``,
    or their ``np.dtype``): what code behind the front doors takes, the user's value parsed once
    there (``load_pipeline`` / ``from_pretrained``, ``vidax generate``, ``vidax serve``).

    Raises:
        TypeError: anything else (a name such as ``"bf16"``, not parsed at a front door), naming
            ``where``, the function that takes it.
    """
    if is_parsed_dtype(dtype):
        return dtype
    raise TypeError(
        f"{where} takes a parsed dtype (jnp.float32 or jnp.bfloat16: vidax.nn.inputs.parse_dtype of the "
        f"user's value, at the front door), got {dtype!r}"
    )


def compute_dtype(dtype: Any, what: str) -> jnp.dtype:
    """:func:`parse_dtype` for a model: the error names the model (``what``)."""
    try:
        return jnp.dtype(parse_dtype(dtype))
    except InputError:
        raise InputError(f"dtype={dtype!r} is not supported by the {what}; use float32 or bfloat16") from None


def check_video_array(name: str, x: Any, channels: int, what: str) -> tuple[int, ...]:
    """Check a channels-last video / latent array ``(B, T, H, W, C)`` given to a VAE.

    Returns its shape. Raises InputError naming ``name`` when it is not 5-D, its last axis is not
    ``channels`` (the model setting ``what``), an axis is empty, or it is not floating point.
    """
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 5:
        raise InputError(f"{name} must be 5-D (B, T, H, W, C) channels-last; got shape {shape}")
    if shape[-1] != channels:
        raise InputError(
            f"{name} has {shape[-1]} channels (last axis of shape {shape}); the VAE's {what} is "
            f"{channels} (is it channels-first?)"
        )
    if min(shape) < 1:
        raise InputError(f"{name} has an empty axis: shape {shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise InputError(f"{name} must be floating point; got dtype {x.dtype}")
    return shape
