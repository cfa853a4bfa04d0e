"""The Wan2.2 VAE's parameter-free foldings of pixels into channels and back: the residual
shortcuts of its levels (diffusers' ``AvgDown3D`` / ``DupUp3D``) and its patchify of the image
(diffusers' Wan ``patchify`` / ``unpatchify``). Arrays are channels-last ``(B, T, H, W, C)``."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def avg_down_3d(x: jax.Array, out_channels: int, factor_t: int, factor_s: int) -> jax.Array:
    """Fold ``factor_t x factor_s x factor_s`` blocks into channels and average groups of them.

    Follows diffusers ``AvgDown3D``: time is zero-padded in front to a multiple of ``factor_t``;
    the folded channel index is ``c * F + (t_i * f_s + h_i) * f_s + w_i`` (F the block size) and
    consecutive groups of ``C * F / out_channels`` folded channels are averaged (in fp32).

    ``x (B, T, H, W, C)`` -> ``(B, ceil(T / f_t), H / f_s, W / f_s, out_channels)``; H and W
    must be multiples of ``factor_s``.
    """
    b, t, h, w, c = x.shape
    pad_t = (-t) % factor_t
    if pad_t:
        x = jnp.pad(x, ((0, 0), (pad_t, 0), (0, 0), (0, 0), (0, 0)))
        t += pad_t
    ft, fs = factor_t, factor_s
    y = x.reshape(b, t // ft, ft, h // fs, fs, w // fs, fs, c)
    y = y.transpose(0, 1, 3, 5, 7, 2, 4, 6)  # (B, T', H', W', C, ft, fs_h, fs_w)
    y = y.reshape(b, t // ft, h // fs, w // fs, out_channels, -1)
    return jnp.mean(y.astype(jnp.float32), axis=-1).astype(x.dtype)


def dup_up_3d(x: jax.Array, out_channels: int, factor_t: int, factor_s: int,
              first_chunk: bool) -> jax.Array:  # fmt: skip
    """Repeat channels and unfold them into ``factor_t x factor_s x factor_s`` blocks.

    Follows diffusers ``DupUp3D``: each channel is repeated ``out_channels * F / C`` times in
    place, the result is read as ``(out_channels, f_t, f_s, f_s)`` per position and unfolded
    into time and space; on the clip's first chunk the first ``factor_t - 1`` frames are
    dropped.

    ``x (B, T, H, W, C)`` -> ``(B, T f_t (- f_t + 1 if first_chunk), H f_s, W f_s, out_channels)``.
    """
    b, t, h, w, c = x.shape
    ft, fs = factor_t, factor_s
    y = jnp.repeat(x, out_channels * ft * fs * fs // c, axis=-1)
    y = y.reshape(b, t, h, w, out_channels, ft, fs, fs)
    y = y.transpose(0, 1, 5, 2, 6, 3, 7, 4)  # (B, T, ft, H, fs_h, W, fs_w, C_out)
    y = y.reshape(b, t * ft, h * fs, w * fs, out_channels)
    return y[:, ft - 1 :] if first_chunk else y


def patchify(x: jax.Array, p: int) -> jax.Array:
    """``(B, T, H, W, C)`` -> ``(B, T, H/p, W/p, C p^2)``, the inverse of :func:`unpatchify`.

    Channel order as diffusers' Wan ``patchify``: ``c * p^2 + w_i * p + h_i`` (the column offset
    before the row offset).
    """
    if p == 1:
        return x
    b, t, h, w, c = x.shape
    y = x.reshape(b, t, h // p, p, w // p, p, c).transpose(0, 1, 2, 4, 6, 5, 3)
    return y.reshape(b, t, h // p, w // p, c * p * p)


def unpatchify(x: jax.Array, p: int) -> jax.Array:
    """``(B, T, H, W, C p^2)`` -> ``(B, T, H p, W p, C)`` (diffusers' Wan ``unpatchify``)."""
    if p == 1:
        return x
    b, t, h, w, cp = x.shape
    y = x.reshape(b, t, h, w, cp // (p * p), p, p).transpose(0, 1, 2, 6, 3, 5, 4)
    return y.reshape(b, t, h * p, w * p, cp // (p * p))
