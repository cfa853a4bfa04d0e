"""The precision of float32 matrix products and convolutions, one setting per pipeline.

JAX leaves the precision of a float32 ``dot_general`` / ``conv_general_dilated`` to the backend
by default: the CPU computes it in float32, a TPU in one bfloat16 pass (about 8 bits of
mantissa: a float32 Wan transformer then agrees with the CPU's float32 to ~22 dB, as bfloat16
does), a recent NVIDIA GPU in TensorFloat-32 (10 bits). torch computes float32 matmuls in
float32 by default (``torch.backends.cuda.matmul.allow_tf32 = False``), so vidax does too:

* ``"highest"`` (the default): float32 products in full float32 on every backend (TPU: six
  bfloat16 passes, ~3x the time of ``"default"`` for float32 work);
* ``"high"``: bfloat16_3x on TPU (three passes, ~16 bits), TensorFloat-32 on GPU;
* ``"default"``: the backend's fastest (one bfloat16 pass on TPU, TensorFloat-32 on GPU).

Products of bfloat16 / float16 operands are exact in one pass, so the setting does not change
them; it applies to the float32 work of a bfloat16 run too (modulation, timestep embeddings, a
float32 VAE). The pipeline runs each call under :func:`jax.default_matmul_precision`, which is
part of JAX's compile cache key: changing it recompiles, it never reuses the other's programs.

The VAE decode of a bfloat16 run (:func:`vae_matmul_precision`): its VAE is float32, as in
diffusers, where on a GPU torch runs those convolutions in TensorFloat-32
(``torch.backends.cudnn.allow_tf32`` is True by default). Unless the user asked for a precision,
vidax decodes it at ``"high"`` (TF32-class: three bfloat16 passes on TPU, half the passes of
``"highest"``); a float32 run stays at ``"highest"`` everywhere, and a precision the user gave
applies to everything, the VAE included. On the CPU every value computes float32 in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax

from vidax.errors import Arg, InputError

#: The values ``matmul_precision=`` / ``--matmul-precision`` take (JAX's names), best first.
MATMUL_PRECISIONS = ("highest", "high", "default")
#: What each value means, for ``--help`` and the run summary.
_MEANING = {
    "highest": "float32 products in float32",
    "high": "float32 products as 3 bf16 passes on TPU, TF32 on GPU",
    "default": "float32 products as 1 bf16 pass on TPU, TF32 on GPU",
}


def parse_matmul_precision(value: Any) -> str | None:
    """``"highest"`` / ``"high"`` / ``"default"`` (any case, surrounding spaces ignored); None
    (not given: ``"highest"``, the VAE decode of a bfloat16 run ``"high"``) stays None.

    Raises:
        InputError: any other value, naming ``matmul_precision=`` and the valid ones.
    """
    if value is None:
        return None
    key = value.strip().lower() if isinstance(value, str) else None
    if key not in MATMUL_PRECISIONS:
        raise InputError(
            Arg("matmul_precision", value),
            " is not a matmul precision; valid: ",
            ", ".join(MATMUL_PRECISIONS),
            " (highest: float32 products in float32, the default; "
            "default: the backend's fastest, one bfloat16 pass on TPU)",
        )
    return key


@contextlib.contextmanager
def matmul_precision(value: str) -> Iterator[None]:
    """Trace and run what the block calls with float32 products at ``value``
    (:data:`MATMUL_PRECISIONS`)."""
    with jax.default_matmul_precision(value):
        yield


def vae_matmul_precision(given: str | None, dtype: Any) -> str:
    """The precision of the VAE decode: ``given`` (the user's ``matmul_precision``) when not
    None; else ``"high"`` for a run whose ``dtype`` (the transformer's) is 16-bit, as diffusers
    on a GPU (TF32 convolutions), and ``"highest"`` for a float32 run."""
    if given is not None:
        return given
    return "highest" if jax.numpy.dtype(dtype) == jax.numpy.float32 else "high"


def describe_matmul_precision(value: str, backend: str | None = None) -> str:
    """The run summary's line: ``"highest (float32 products in float32)"``; on the CPU, where
    every value computes float32 in float32, it says so."""
    backend = backend or jax.default_backend()
    if backend == "cpu" and value != "highest":
        return f"{value} (float32 products in float32: the CPU has no faster mode)"
    return f"{value} ({_MEANING[value]})"
