"""The LTX-Video VAE's tiles (LTX-2's video VAE shares them): the reference's tiling switches and
sizes (:class:`LTXTiling`, ``AutoencoderKLLTXVideo.__init__``'s), and one decoder call's tile
context (:class:`Tile`: the noise draws and the real tile inside a padded one, so that one compiled
program decodes every tile of a padded size)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import InputError
from vidax.models.ltx.config import LTXVAEConfig
from vidax.nn import tiling as tile_loop

_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class LTXTiling(tile_loop.StridedTiling):
    """The reference's tiling switches and sizes (``AutoencoderKLLTXVideo.__init__`` defaults).

    Attributes:
        spatial: ``use_tiling`` (``enable_tiling()``): tiles when a frame is larger than a tile.
        temporal: ``use_framewise_decoding``: temporal tiles when the clip is longer than one
            (the reference uses this one switch for encode and decode).
        tile_sample_min_height, tile_sample_min_width, tile_sample_min_num_frames: tile size in
            pixels / frames (512, 512, 16).
        tile_sample_stride_height, tile_sample_stride_width, tile_sample_stride_num_frames:
            distance between tiles (448, 448, 8); ``min - stride`` is the blend width.
    """

    spatial: bool = True
    temporal: bool = False
    tile_sample_min_height: int = 512
    tile_sample_min_width: int = 512
    tile_sample_min_num_frames: int = 16
    tile_sample_stride_height: int = 448
    tile_sample_stride_width: int = 448
    tile_sample_stride_num_frames: int = 8

    def check(self, config: LTXVAEConfig) -> None:
        """Raises InputError when a size is not a positive integer or a latent stride is 0."""
        tile_loop.check_tiling_fields(self, "LTXTiling.")
        s, t = config.spatial_compression, config.temporal_compression
        for name, v, k in (
            ("tile_sample_stride_height", self.tile_sample_stride_height, s),
            ("tile_sample_stride_width", self.tile_sample_stride_width, s),
            ("tile_sample_stride_num_frames", self.tile_sample_stride_num_frames, t),
            ("tile_sample_min_height", self.tile_sample_min_height, s),
            ("tile_sample_min_width", self.tile_sample_min_width, s),
            ("tile_sample_min_num_frames", self.tile_sample_min_num_frames, t),
        ):
            if v // k < 1:
                raise InputError(
                    f"LTXTiling.{name}={v} is smaller than the VAE's compression {k}; the "
                    "latent tile / stride would be 0"
                )


class Tile:
    """One encoder or decoder call's context: the decoder's noise draws, handed out in call
    order, and the real tile inside a padded one.

    :meth:`prepare` makes all of one decoder call's draws with a single ``jax.random.normal``
    over their total size (one random-bits computation to compile instead of one per draw) and
    :meth:`normal` returns the next ``(h, w)`` draw of it.

    ``extent`` (None: the whole input is the tile) is a traced int32 ``(3,)``: the frames, rows
    and columns of the real tile, which starts at the padded input's first frame, row and column.
    The convolutions then give the real tile's values exactly as if it were decoded alone (see
    :meth:`fix`), and the noise draws are the real tile's: a padded tile's ``(H, W)`` draw holds
    the real ``(h, w)`` draw's values at its first rows and columns (the draws read one flat
    normal array of the real sizes' offsets; JAX's partitionable threefry gives the same values
    for a prefix of a longer draw). Every up-sampler multiplies the extent (:meth:`upsample`), so
    one compiled program serves every tile of a padded size.
    """

    def __init__(self, key: jax.Array | None, extent: jax.Array | None = None):
        self.key = key
        self.extent = None if extent is None else tuple(extent[i] for i in range(3))
        self.draws: list[jax.Array] = []

    def prepare(self, shapes: list[tuple[int, int]], real: list | None = None) -> None:
        """Make the draws of ``shapes`` (the padded input's); ``real``: the real tile's (traced
        sizes, in the same order), given with an extent."""
        if not shapes:
            return
        if self.key is None:
            raise ValueError("this decoder injects noise; pass a noise key")
        flat = jax.random.normal(self.key, (sum(h * w for h, w in shapes),), _F32)
        if self.extent is None:
            offsets = np.cumsum([0] + [h * w for h, w in shapes])
            self.draws = [flat[a:b].reshape(hw) for a, b, hw in zip(offsets[:-1], offsets[1:], shapes)]
            return
        # The real tile's draws: (h, w) at each up-sampler's scale of the real extent, at their
        # offsets in a flat draw of the real sizes; rows and columns past them are never read.
        offset = jnp.asarray(0, jnp.int32)
        for (hh, ww), (rh, rw) in zip(shapes, real):
            index = offset + jnp.arange(hh, dtype=jnp.int32)[:, None] * rw + jnp.arange(ww, dtype=jnp.int32)[None]
            self.draws.append(jnp.take(flat, index, mode="clip"))
            offset = offset + rh * rw

    def normal(self, shape, dtype) -> jax.Array:
        draw = self.draws.pop(0)
        if draw.shape != tuple(shape):
            raise ValueError(f"noise draw of shape {draw.shape} prepared, {tuple(shape)} asked for")
        return draw.astype(dtype)

    def upsample(self, stride: tuple[int, int, int]) -> None:
        """The extent after an up-sampler of ``stride`` (``T -> st T - st + 1``, ``H -> sh H``, ...)."""
        if self.extent is not None:
            t, h, w = self.extent
            self.extent = (t * stride[0] - (stride[0] - 1), h * stride[1], w * stride[2])

    def fix(self, x: jax.Array, pad_mode: str | None, is_causal: bool, kt: int) -> jax.Array:
        """``x (B, T, H, W, C)`` with the entries just past the real tile that a ``kt``-tap
        convolution reads set to what its padding of the real tile alone would put there:
        zeros (``pad_mode`` None), the reflection of the tile's last rows / columns
        (``"reflect"``), and (not causal) copies of its last frame. Unchanged without an
        extent."""
        if self.extent is None or kt == 1:
            return x
        t, h, w = self.extent
        p = kt // 2
        for axis, n in ((2, h), (3, w)):
            index = index_along(x, axis)
            if pad_mode is None:
                x = jnp.where(index < n, x, jnp.zeros((), x.dtype))
            else:  # reflect: entry n - 1 + j is entry n - 1 - j
                for j in range(1, p + 1):
                    x = jnp.where(index == n - 1 + j, jax.lax.dynamic_slice_in_dim(x, n - 1 - j, 1, axis), x)
        if not is_causal:  # replicate: entries t - 1 + j are entry t - 1
            index = index_along(x, 1)
            last = jax.lax.dynamic_slice_in_dim(x, t - 1, 1, 1)
            x = jnp.where((index >= t) & (index < t + (kt - 1) // 2), last, x)
        return x


def index_along(x: jax.Array, axis: int) -> jax.Array:
    """The int32 positions along ``axis``, shaped to broadcast against ``x``."""
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return jnp.arange(x.shape[axis], dtype=jnp.int32).reshape(shape)
