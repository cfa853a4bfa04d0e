"""Tiled VAE decoding / encoding: the diffusers raster-order tile loop and its linear blends.

The diffusers video VAEs (``AutoencoderKLCogVideoX``, ``AutoencoderKLHunyuanVideo``, ...) split a
large input into overlapping tiles, run each alone, then walk the tiles in raster order: each
tile's first rows are blended with the last rows of the tile above (``blend_v``), its first
columns with the last columns of the tile to the left (``blend_h``), and the first frames of a
temporal tile with the last frames of the previous one (``blend_t``). The blends write into the
tile **in place**, so a neighbour is read with the blends it received itself already applied;
:func:`blend` and :func:`tiled` reproduce that on host (numpy, float32) arrays in the channels-last
layout ``(B, T, H, W, C)`` (axis 1 frames, 2 rows, 3 columns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vidax.errors import InputError


def check_tiling_fields(tiling: Any, what: str) -> None:
    """Raise InputError (``"{what}{field}={value!r} must be ..."``) unless every field of the
    tiling dataclass ``tiling`` whose default is a bool (a switch) is a bool and every other
    field (a tile size or stride) a positive integer."""
    for f in dataclasses.fields(tiling):
        v = getattr(tiling, f.name)
        if isinstance(f.default, bool):
            if not isinstance(v, bool):
                raise InputError(f"{what}{f.name}={v!r} must be True or False")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{what}{f.name}={v!r} must be a positive integer")


def blend(a: np.ndarray, b: np.ndarray, extent: int, axis: int) -> None:
    """``blend_t`` (axis 1) / ``blend_v`` (axis 2) / ``blend_h`` (axis 3): ramp ``b``'s first
    entries along ``axis`` from ``a``'s last, in place:
    ``b[y] = a[-e + y] (1 - y / e) + b[y] y / e`` for ``y < e = min(extent, sizes)``; nothing
    when ``e <= 0``."""
    e = min(a.shape[axis], b.shape[axis], extent)
    if e <= 0:
        return
    shape = [1] * b.ndim
    shape[axis] = e
    ramp = (np.arange(e) / e).reshape(shape)
    tail = np.take(a, np.arange(a.shape[axis] - e, a.shape[axis]), axis=axis)
    head = np.take(b, np.arange(e), axis=axis)
    mixed = tail * (1 - ramp).astype(np.float32) + head * ramp.astype(np.float32)
    index = [slice(None)] * b.ndim
    index[axis] = slice(0, e)
    b[tuple(index)] = mixed


def tile_starts(size: int, tile: int, step: int, same_shape: bool = False) -> list[int]:
    """Where the tiles of one axis of ``size`` start: every ``step`` from 0 (the reference's
    ``range(0, size, step)``: the last tiles cut short by the edge); ``same_shape``: every ``step``
    while a whole tile fits, then one ending at the edge (every tile ``tile`` long where ``size``
    is at least that; never more tiles than the reference's)."""
    if not same_shape:
        return list(range(0, size, step))
    return [0] if size <= tile else list(range(0, size - tile, step)) + [size - tile]


def tiled(
    run: Callable[[Any], np.ndarray],
    x,
    tile: Sequence[int],
    step: Sequence[int],
    extent: Sequence[int],
    limit: Sequence[int],
    same_shape: bool = False,
) -> np.ndarray:
    """The reference's spatial tile loop over ``x (B, T, H, W, C)``.

    ``run`` maps each tile ``x[:, :, i : i + tile[0], j : j + tile[1]]`` (``i`` every ``step[0]``
    rows, ``j`` every ``step[1]`` columns) to a writable host array; then in raster order each
    result is blended with the one above over ``extent[0]`` rows and with the one to its left
    over ``extent[1]`` columns (:func:`blend`, in place), its first ``limit[0]`` x ``limit[1]``
    rows / columns are kept, and the kept pieces are concatenated. Host float32.

    ``same_shape`` (where ``limit + extent`` is a whole output tile): the last tile of an axis
    ends at the edge instead of being cut short (:func:`tile_starts`), so every tile has one
    shape (one compiled program); it overlaps the tile before by more than ``extent``, and its
    output from where that tile's kept part ends is blended there over ``extent`` and kept to
    the edge.
    """
    height, width = x.shape[2:4]
    starts = [tile_starts(n, t, s, same_shape) for n, t, s in zip((height, width), tile, step)]
    rows = [[run(x[:, :, i : i + tile[0], j : j + tile[1]]) for j in starts[1]] for i in starts[0]]
    # where each tile's own part begins in its output (0 but for a same-shape last tile)
    scale = [lim / st for lim, st in zip(limit, step)]
    offset = [
        [0] + [round((a + st - b) * sc) for a, b in zip(st_list, st_list[1:])]
        for st_list, st, sc in zip(starts, step, scale)
    ]
    out_rows = []
    for i, row in enumerate(rows):
        kept = []
        for j, t in enumerate(row):
            oi, oj = offset[0][i], offset[1][j]
            # the tile before is blended from its last ``extent`` entries (only the last tile of an
            # axis starts off the stride, so the tile before ends where its kept part and extent do)
            if i > 0:
                blend(rows[i - 1][j], t[:, :, oi:] if oi else t, extent[0], axis=2)
            if j > 0:
                blend(row[j - 1], t[:, :, :, oj:] if oj else t, extent[1], axis=3)
            # a same-shape last tile is kept to the edge; any other tile its ``limit``
            ei = None if same_shape and i == len(rows) - 1 else oi + limit[0]
            ej = None if same_shape and j == len(row) - 1 else oj + limit[1]
            kept.append(t[:, :, oi:ei, oj:ej])
        out_rows.append(np.concatenate(kept, axis=3))
    return np.concatenate(out_rows, axis=2)


class StridedTiling:
    """A base of the tiling dataclasses whose tiles advance ``tile_sample_stride_*`` pixels and
    overlap by ``tile_sample_min_* - tile_sample_stride_*`` (Wan, LTX, HunyuanVideo)."""

    def scaled(self, scale: int) -> Any:
        """Spatial tiles ``scale`` times as large a side overlapping by the same pixels (temporal
        tiles as they are): ``enable_tiled_decode(scale)``, :func:`scaled_sides`."""
        return scaled_sides(self, scale)


class TilingSettings:
    """A VAE's tiling state (its tiling dataclass, or None), held on the host.

    One holder per VAE, kept as a static attribute of the module and compared by identity: the
    tiling settings change which tiles the host loop cuts, never a traced computation, so
    switching them keeps the module's graph definition (a static argument of the jitted tile
    functions) and so the compiled functions.
    """

    __slots__ = ("state", "slicing")

    def __init__(self, state: Any):
        self.state = state
        self.slicing = False


class TiledVAE:
    """diffusers' tiling switches on a VAE module (``enable_tiling(...)`` / ``disable_tiling()`` /
    ``use_tiling``, and ``use_framewise_decoding`` where the reference has temporal tiles).

    The state is :attr:`tiling`: the VAE's tiling dataclass (the reference's tile sizes and
    switches), or None (off, the dataclass defaults). A subclass sets:

    * ``TILING``: the dataclass (its defaults are the reference's ``__init__`` values);
    * ``TILING_SWITCH``: its bool field that is the reference's ``use_tiling``;
    * ``TILING_FRAMEWISE``: its bool field that is the reference's ``use_framewise_decoding``
      (None where the reference has no temporal tiles);
    * ``self._tiling_settings = TilingSettings(state)`` in ``__init__``;

    and defines ``enable_tiling`` with the reference's keyword names, calling
    :meth:`_enable_tiling`, and ``_checked_tiling(state) -> state`` (raises InputError).
    """

    TILING: Any = None
    TILING_SWITCH = "use_tiling"
    TILING_FRAMEWISE: str | None = None
    _tiling_settings: TilingSettings

    @property
    def tiling(self) -> Any:
        """The tiling state used when a call gives none (the VAE's tiling dataclass, or None)."""
        return self._tiling_settings.state

    def __setattr__(self, name: str, value: Any) -> None:
        # ``vae.tiling = state`` writes the holder: an attribute set through nnx's own
        # ``__setattr__`` is recorded in the module's graph definition, retracing its functions.
        if name == "tiling":
            self._tiling_settings.state = value
        else:
            super().__setattr__(name, value)

    def _checked_tiling(self, state: Any) -> Any:
        """``state`` checked for this VAE (InputError naming the keyword when it is bad)."""
        raise NotImplementedError

    def _state(self) -> Any:
        if self.tiling is not None:
            return self.tiling
        return dataclasses.replace(self.TILING(), **{self.TILING_SWITCH: False})

    def _enable_tiling(self, **given: Any) -> None:
        """The reference's ``enable_tiling(**given)``: the switch on; each size given (not None)
        replaces the current one, the others stay (the reference's ``x or self.x``). Checked
        before anything changes (InputError naming the keyword)."""
        state = dataclasses.replace(
            self._state(), **{k: v for k, v in given.items() if v is not None}, **{self.TILING_SWITCH: True}
        )
        self._tiling_settings.state = self._checked_tiling(state)

    def disable_tiling(self) -> None:
        """Decode (and encode) without spatial tiles again; the tile sizes set are kept, as the
        reference's ``disable_tiling``."""
        self._tiling_settings.state = dataclasses.replace(self._state(), **{self.TILING_SWITCH: False})

    @property
    def use_tiling(self) -> bool:
        """Whether spatial tiling is on (the reference's attribute)."""
        return self.tiling is not None and bool(getattr(self.tiling, self.TILING_SWITCH))

    @property
    def use_framewise_decoding(self) -> bool:
        """Whether long clips decode in blended temporal tiles (the reference's attribute; set it
        to switch them). AttributeError on a VAE whose reference has no temporal tiles."""
        if self.TILING_FRAMEWISE is None:
            raise AttributeError(f"{type(self).__name__} has no temporal tiling (use_framewise_decoding)")
        return self.tiling is not None and bool(getattr(self.tiling, self.TILING_FRAMEWISE))

    @use_framewise_decoding.setter
    def use_framewise_decoding(self, on: bool) -> None:
        if self.TILING_FRAMEWISE is None:
            raise AttributeError(f"{type(self).__name__} has no temporal tiling (use_framewise_decoding)")
        if not isinstance(on, bool):
            raise InputError(f"use_framewise_decoding={on!r} must be True or False")
        self._tiling_settings.state = dataclasses.replace(self._state(), **{self.TILING_FRAMEWISE: on})

    def enable_slicing(self) -> None:
        """diffusers' ``vae.enable_slicing()`` (decode a batch one video at a time, to bound the
        decode's memory): taken, and :attr:`use_slicing` says so; vidax's decode is bounded by its
        chunks along the frames (and tiles, :meth:`enable_tiling`) already, and the video is the
        same either way, so nothing else changes."""
        self._tiling_settings.slicing = True

    def disable_slicing(self) -> None:
        """diffusers' ``vae.disable_slicing()``: :attr:`use_slicing` False again."""
        self._tiling_settings.slicing = False

    @property
    def use_slicing(self) -> bool:
        """Whether :meth:`enable_slicing` was called (the reference's attribute)."""
        return self._tiling_settings.slicing

    def enable_tiled_decode(self, scale: int = 1) -> None:
        """What ``--vae-tiling`` turns on: ``enable_tiling()`` (the sizes set so far, else the
        reference's defaults) and, where the reference has them, temporal tiles
        (``use_framewise_decoding = True``), so that the decode's device memory is bounded by
        one tile whatever the frame size and (with temporal tiles or chunked decoding) the clip
        length.

        ``scale`` k (the memory plan's, where the chip has room for larger tiles) multiplies the
        spatial tile's side by k: each tiling dataclass's ``scaled(k)`` (the blend kept: the same
        overlap in pixels, or the same overlap factor where the reference has one); temporal
        tiles are unchanged. k = 1: the sizes above, unchanged.

        Raises:
            InputError: ``scale`` is not a positive integer (before anything changes).
        """
        check_tile_scale(scale)
        self.enable_tiling()
        if self.TILING_FRAMEWISE is not None:
            self.use_framewise_decoding = True
        if scale > 1:
            self._tiling_settings.state = self._checked_tiling(self.tiling.scaled(scale))


def check_tile_scale(scale: Any) -> None:
    """Raise InputError (naming ``scale``) unless ``scale`` is a positive integer."""
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or scale < 1:
        raise InputError(f"scale={scale!r} must be a positive integer (the tile's side is multiplied by it)")


def scaled_sides(tiling: Any, scale: int, *, strides: bool = True, latent: bool = False) -> Any:
    """``tiling`` (a tiling dataclass) with its spatial tile ``scale`` times as large a side:
    ``tile_sample_min_height`` / ``_width`` (and ``tile_latent_min_*`` with ``latent``) times
    ``scale``; with ``strides``, ``tile_sample_stride_*`` grown by ``(scale - 1)`` tiles, so that
    neighbours still overlap by the same pixels (``min - stride``)."""
    changes = {}
    for axis in ("height", "width"):
        tile = getattr(tiling, f"tile_sample_min_{axis}")
        changes[f"tile_sample_min_{axis}"] = tile * scale
        if strides:
            changes[f"tile_sample_stride_{axis}"] = getattr(tiling, f"tile_sample_stride_{axis}") + (scale - 1) * tile
        if latent:
            changes[f"tile_latent_min_{axis}"] = getattr(tiling, f"tile_latent_min_{axis}") * scale
    return dataclasses.replace(tiling, **changes)
