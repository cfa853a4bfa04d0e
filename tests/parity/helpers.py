"""Helpers for parity tests against the PyTorch references."""

from __future__ import annotations

import numpy as np


def randomize_torch_module(module, seed: int, scale: float = 0.5, gain: float | None = None) -> None:
    """Give **every** parameter and floating buffer of a torch module random values.

    Zero or one initialisation (biases, norm weights, modulation tables) hides bugs such as a
    missing bias or a swapped shift/scale, so nothing keeps its default. Norm weights get
    ``1 + scale * N(0, 1)`` so activations stay of order one; everything else
    ``scale * N(0, 1) / sqrt(fan_in)`` for matrices and ``scale * N(0, 1)`` for vectors.
    ``gain`` (default ``scale``) replaces ``scale`` for matrices: deep conv stacks (VAEs) need a
    gain near 1.5 so the input still reaches the output past the biases.
    """
    gain = scale if gain is None else gain
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if p.ndim == 1 and ("norm" in name or leaf in ("gamma", "scale")) and "bias" not in leaf:
                value = 1.0 + scale * noise
            elif p.ndim >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                value = gain * noise / np.sqrt(fan_in) * (1.0 if "embedding" not in name else np.sqrt(fan_in))
            else:
                value = scale * noise
            p.copy_(value.to(p.dtype))


def max_rel_err(a, b) -> float:
    """max |a - b| / max |b|: a relative error that does not blow up on near-zero entries."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def psnr(a, b, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB of ``a`` against reference ``b``."""
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(data_range**2 / mse)
