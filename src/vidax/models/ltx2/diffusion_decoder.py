"""LTX-2.5's diffusion video decoder, following ``diffusers.LTX2VideoDiffusionDecoderModel``
(diffusers 0.42.1, ``models/autoencoders/ltx2_diffusion_decoder.py``).

A decoder that is itself a small diffusion model. Stages 1-4 turn the latents into a context
volume: a linear ``conv_in``, then per stage pre-norm neighbourhood-attention blocks
(:class:`NABlock`: RMS norm, attention over a 3D window with a 3D rotary embedding, SwiGLU) and a
linear pixel shuffle (:class:`PixelShuffleUpsampler`). Stage 5 denoises patchified pixels
(space-to-depth ``patch_size`` on H / W) conditioned on that context (added through each block's
``context_proj``) and on the timestep (one shared AdaLN-Zero, :class:`SharedAdaLN`, plus each
block's ``scale_shift_table``; the residuals are ungated). LTX-2.5 ships a single ``x0`` step:
stage 5 runs once on pure noise and its prediction is the video; more steps take the
reference's reverse Euler updates over ``linspace(1, 1/N, N)``.

Every attention is :class:`vidax.blocks.attention.Attention` with a neighbourhood
:class:`~vidax.blocks.attention.AttentionMask` (blocked, :mod:`vidax.nn.attention_neighbourhood`):
its memory follows the window, not the frame. The reference repeats the last latent frame
``trailing_pad`` times before stage 1 and crops the frames they became off the context, which
moves NATTEN's inward-shifted border past the kept frames.

Decoding is chunked over time (:meth:`LTX2VideoDiffusionDecoderModel.decode`): each chunk of
``chunk_frames`` latent frames is decoded from a window of latents around it wide enough that no
frame it keeps depends on what lies outside the window (:meth:`LTX2VideoDiffusionDecoderModel.halo`,
the blocks' receptive field), so a chunked decode is the whole-clip decode, and each chunk goes to
host memory as it finishes: device memory stays that of one window however long the clip.
Layouts are channels-last inside (``(B, T, H, W, C)``).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.modulation import modulate
from vidax.errors import InputError
from vidax.models.ltx2.config_diffusion_decoder import LTX2DiffusionDecoderConfig
from vidax.nn.buffer import Buffer
from vidax.nn.layers import PixArtTimestepEmbedding, RMSNorm, linear, pixel_shuffle

_F32 = jnp.float32
_EPS = 1e-6


def rope_split(head_dim: int) -> tuple[int, int, int]:
    """The reference's ``rope_dim_split``: a quarter of the head (even) to T, the rest halved
    between H and W, each half even."""
    dim_t = (head_dim // 4) // 2 * 2
    dim_hw = (head_dim - dim_t) // 2
    if dim_hw % 2:
        dim_t -= 2
        dim_hw = (head_dim - dim_t) // 2
    return dim_t, dim_hw, dim_hw


def grid_rope(grid: tuple[int, int, int], head_dim: int, base: float = 10000.0) -> tuple[jax.Array, jax.Array]:
    """``LTX2VideoVaeRotaryPosEmbed3D`` as interleaved ``(cos, sin)`` tables ``(T·H·W, K/2)``
    float32: each token's T, H and W chunks rotated by its own 0-based grid index (the frequencies
    computed in float64 and rounded once, the angles in float32, as the reference)."""
    parts = []
    for axis, (size, dim) in enumerate(zip(grid, rope_split(head_dim))):
        inv = (1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)).astype(np.float32)
        ang = jnp.arange(size, dtype=_F32)[:, None] * jnp.asarray(inv)[None, :]
        shape = [1, 1, 1, inv.shape[0]]
        shape[axis] = size
        parts.append(jnp.broadcast_to(ang.reshape(shape), (*grid, inv.shape[0])))
    angles = jnp.concatenate(parts, axis=-1).reshape(math.prod(grid), head_dim // 2)
    return jnp.cos(angles), jnp.sin(angles)


class SwiGLU(nnx.Module):
    """``LTX2VideoVaeSwiGLU``: ``w_down(silu(w_gate(x)) · w_up(x))``, no biases."""

    def __init__(self, dim: int, hidden: int, dtype, param_dtype, rngs: nnx.Rngs):
        self.w_up = linear(dim, hidden, dtype, param_dtype, rngs, use_bias=False)
        self.w_gate = linear(dim, hidden, dtype, param_dtype, rngs, use_bias=False)
        self.w_down = linear(hidden, dim, dtype, param_dtype, rngs, use_bias=False)

    def __call__(self, x):
        return self.w_down(jax.nn.silu(self.w_gate(x)) * self.w_up(x))


def _attention(dim: int, head_dim: int, dtype, param_dtype, rngs) -> Attention:
    """``LTX2VideoVaeNeighborhoodAttention``'s projections: q / k / v / out with biases, per-head
    RMS norms of q and k, interleaved rotary pairs (the reference scales q before rotating it; the
    rotation is linear, so the shared order norm-rotate-scale differs by float rounding only)."""
    cfg = AttentionConfig(
        dim=dim, heads=dim // head_dim, head_dim=head_dim, qk_norm="rms_head", qk_norm_eps=_EPS, rope="interleaved"
    )
    return Attention(cfg, "xla", dtype, param_dtype, rngs)


class NABlock(nnx.Module):
    """``LTX2VideoVaeNABlock``: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, dim, kernel, head_dim, dtype, param_dtype, rngs):
        self.kernel = tuple(kernel)
        self.norm1 = RMSNorm(dim, _EPS, param_dtype=param_dtype)
        self.attn = _attention(dim, head_dim, dtype, param_dtype, rngs)
        self.norm2 = RMSNorm(dim, _EPS, param_dtype=param_dtype)
        self.mlp = SwiGLU(dim, (int(dim * 4.0) + 15) // 16 * 16, dtype, param_dtype, rngs)

    def __call__(self, x, grid, rope):
        """``x`` ``(B, T·H·W, D)`` tokens of ``grid``."""
        x = x + self.attn(self.norm1(x), rope=rope, mask=AttentionMask(neighbourhood=(grid, self.kernel)))
        return x + self.mlp(self.norm2(x))


class DiffusionNABlock(NABlock):
    """``LTX2VideoVaeDiffusionNABlock``: ``x + context_proj(context)``, then the
    :class:`NABlock` residuals with the norms modulated by the shared AdaLN plus the block's
    ``scale_shift_table`` (rows 0 / 1 scale / shift of the attention, 3 / 4 of the MLP)."""

    def __init__(self, dim, kernel, context_dim, head_dim, chunks, dtype, param_dtype, rngs):
        super().__init__(dim, kernel, head_dim, dtype, param_dtype, rngs)
        self.context_proj = linear(context_dim, dim, dtype, param_dtype, rngs)
        self.scale_shift_table = nnx.Param(jnp.zeros((chunks, dim), _F32))

    def __call__(self, x, context, modulation, grid, rope):
        table = self.scale_shift_table[...].astype(_F32)
        scale_msa, shift_msa, scale_mlp, shift_mlp = (modulation[i] + table[i] for i in (0, 1, 3, 4))
        x = x + self.context_proj(context)
        mask = AttentionMask(neighbourhood=(grid, self.kernel))
        x = x + self.attn(modulate(self.norm1(x), shift_msa, scale_msa, x.dtype), rope=rope, mask=mask)
        return x + self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp, x.dtype))


class SharedAdaLN(nnx.Module):
    """``LTX2VideoVaeAdaLNZero``: ``proj(silu(t_emb))`` cut into ``chunks`` ``(B, 1, D)``
    float32 modulations."""

    def __init__(self, dim, t_emb_dim, chunks, dtype, param_dtype, rngs):
        self.chunks = chunks
        self.proj = linear(t_emb_dim, chunks * dim, dtype, param_dtype, rngs)

    def __call__(self, t_emb):
        e = self.proj(jax.nn.silu(t_emb)).astype(_F32)
        return [c[:, None] for c in jnp.split(e, self.chunks, axis=-1)]


class PixelShuffleUpsampler(nnx.Module):
    """``LTX2VideoVaePixelShuffleUpsampler``: ``proj`` to ``prod(stride)·C/r`` channels, a
    channel-major pixel shuffle; a temporal stride 2 drops the duplicate leading frame when
    ``drop_leading_frame`` (the window holds the clip's first frame)."""

    def __init__(self, cin, stride, reduction, dtype, param_dtype, rngs):
        self.stride = tuple(stride)
        self.proj = linear(cin, math.prod(self.stride) * cin // reduction, dtype, param_dtype, rngs)

    def __call__(self, x, drop_leading_frame: bool):
        x = pixel_shuffle(self.proj(x), self.stride)
        return x[:, 1:] if self.stride[0] == 2 and drop_leading_frame else x


def patchify_pixels(x: jax.Array, p: int) -> jax.Array:
    """The reference's ``_patchify`` channels-last: ``(B, F, H, W, C)`` -> ``(B, F, H/p, W/p,
    C·p·p)``, channels ordered ``(c, w offset, h offset)``."""
    b, f, h, w, c = x.shape
    x = x.reshape(b, f, h // p, p, w // p, p, c).transpose(0, 1, 2, 4, 6, 5, 3)
    return x.reshape(b, f, h // p, w // p, c * p * p)


def unpatchify_pixels(x: jax.Array, p: int) -> jax.Array:
    """Inverse of :func:`patchify_pixels`."""
    b, f, h, w, cpp = x.shape
    c = cpp // (p * p)
    x = x.reshape(b, f, h, w, c, p, p).transpose(0, 1, 2, 6, 3, 5, 4)
    return x.reshape(b, f, h * p, w * p, c)


class LTX2VideoDiffusionDecoder3d(nnx.Module):
    """``LTX2VideoDiffusionDecoder3d``: the stages (module docstring); parameters named as the
    reference's."""

    def __init__(self, cfg: LTX2DiffusionDecoderConfig, dtype, param_dtype, rngs: nnx.Rngs):
        self.cfg = cfg
        ch, hd = cfg.decoder_stage_channels, cfg.decoder_head_dim
        self.conv_in = linear(cfg.latent_channels, ch[0], dtype, param_dtype, rngs)
        self.det_stages = nnx.List(
            [
                nnx.List(
                    [
                        NABlock(ch[i], cfg.decoder_stage_kernels[i], hd, dtype, param_dtype, rngs)
                        for _ in range(cfg.decoder_stage_depths[i])
                    ]
                )
                for i in range(len(cfg.decoder_upsample_strides))
            ]
        )
        self.upsamples = nnx.List(
            [
                PixelShuffleUpsampler(ch[i], s, cfg.decoder_upsample_channel_reductions[i], dtype, param_dtype, rngs)
                for i, s in enumerate(cfg.decoder_upsample_strides)
            ]
        )
        self.t_embedder = PixArtTimestepEmbedding(cfg.decoder_t_emb_dim, rngs)
        pixel_ch = cfg.out_channels * cfg.patch_size**2
        self.conv_in_x_t = linear(pixel_ch, ch[-1], dtype, param_dtype, rngs)
        self.shared_adaln = SharedAdaLN(ch[-1], cfg.decoder_t_emb_dim, 7, dtype, param_dtype, rngs)
        self.diff_blocks = nnx.List(
            [
                DiffusionNABlock(ch[-1], cfg.decoder_stage5_kernel, ch[-1], hd, 7, dtype, param_dtype, rngs)
                for _ in range(cfg.decoder_stage_depths[-1])
            ]
        )
        self.norm_out = RMSNorm(ch[-1], _EPS, param_dtype=param_dtype)
        self.conv_out = linear(ch[-1], pixel_ch, dtype, param_dtype, rngs)

    def context(self, z: jax.Array, *, origin: bool, end: bool) -> jax.Array:
        """Stages 1-4: latents ``(B, T, H, W, C_z)`` (de-normalised) -> context ``(B, F, H·s,
        W·s, C_5)``. ``origin``: the window starts the clip (the temporal upsamples drop their
        leading frame); ``end``: it ends the clip (the trailing frames are padded, then cropped)."""
        pad = self.cfg.trailing_pad
        if end and pad:
            z = jnp.concatenate([z, jnp.repeat(z[:, -1:], pad, axis=1)], axis=1)
        x = self.conv_in(z)
        for blocks, up in zip(self.det_stages, self.upsamples):
            grid = tuple(x.shape[1:4])
            rope = grid_rope(grid, self.cfg.decoder_head_dim)
            h = x.reshape(x.shape[0], -1, x.shape[-1])
            for block in blocks:
                h = block(h, grid, rope)
            x = up(h.reshape(x.shape), drop_leading_frame=origin)
        if end and pad:
            x = x[:, : x.shape[1] - pad * self.cfg.temporal_compression_ratio]
        return x

    def predict(self, context: jax.Array, x_t: jax.Array, t: jax.Array) -> jax.Array:
        """One stage-5 step: pixels ``x_t`` ``(B, F, H, W, C)`` at time ``t`` ``(B,)`` in [0, 1]
        -> the model output (``x0`` or velocity) in the same layout."""
        cfg, p = self.cfg, self.cfg.patch_size
        emb = self.t_embedder(cfg.decoder_timestep_scale_multiplier * t.astype(_F32)).astype(context.dtype)
        modulation = self.shared_adaln(emb)
        x = self.conv_in_x_t(patchify_pixels(x_t.astype(context.dtype), p))
        grid = tuple(x.shape[1:4])
        rope = grid_rope(grid, cfg.decoder_head_dim)
        b, d = x.shape[0], x.shape[-1]
        h, ctx = x.reshape(b, -1, d), context.reshape(b, -1, context.shape[-1])
        for block in self.diff_blocks:
            h = block(h, ctx, modulation, grid, rope)
        h = self.conv_out(self.norm_out(h))
        return unpatchify_pixels(h.reshape(*x.shape[:4], -1), p)

    def denoise(self, context: jax.Array, x_t: jax.Array, steps: int) -> jax.Array:
        """The reference's ``denoise``: one ``x0`` step returns the prediction; otherwise reverse
        Euler steps over ``t = linspace(1, 1/steps, steps)`` then 0, float32 updates."""
        b = x_t.shape[0]
        ts = np.linspace(1.0, 1.0 / steps, steps, dtype=np.float32)
        if steps == 1 and self.cfg.decoder_model_output_type == "x0":
            return self.predict(context, x_t, jnp.full((b,), ts[0], _F32))
        for i in range(steps):
            t_now = jnp.full((b,), ts[i], _F32)
            t_next = np.float32(ts[i + 1] if i + 1 < steps else 0.0)
            out = self.predict(context, x_t, t_now).astype(_F32)
            x32 = x_t.astype(_F32)
            if self.cfg.decoder_model_output_type == "x0":
                out = (x32 - out) / t_now[:, None, None, None, None]
            x_t = (x32 - (t_now - t_next)[:, None, None, None, None] * out).astype(x_t.dtype)
        return x_t


@dataclasses.dataclass(frozen=True)
class Window:
    """One chunk of a chunked decode: latents ``[start, stop)`` are decoded, pixel frames
    ``[keep_start, keep_stop)`` of the clip are kept from the window's ``[pixel_start, ...)``."""

    start: int
    stop: int
    origin: bool
    end: bool
    pixel_start: int
    pixel_frames: int
    keep_start: int
    keep_stop: int


class LTX2VideoDiffusionDecoderModel(nnx.Module):
    """``LTX2VideoDiffusionDecoderModel``: ``decoder`` (:class:`LTX2VideoDiffusionDecoder3d`) and
    the latent statistics ``latents_mean`` / ``latents_std`` (``(C_z,)`` float32 buffers).

    Args:
        config: :class:`~vidax.models.ltx2.config_diffusion_decoder.LTX2DiffusionDecoderConfig`.
        dtype: compute dtype; param_dtype: parameters' initial dtype; rngs: initialisation.
    """

    def __init__(self, config: LTX2DiffusionDecoderConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        self.config = config
        self.dtype = dtype
        self.decoder = LTX2VideoDiffusionDecoder3d(config, dtype, param_dtype, rngs)
        self.latents_mean = Buffer(jnp.zeros((config.latent_channels,), _F32))
        self.latents_std = Buffer(jnp.ones((config.latent_channels,), _F32))

    # -- frame arithmetic ----------------------------------------------------------------------

    def pixel_frames(self, latent_frames: int) -> int:
        """Frames decoded from ``latent_frames`` (``(n - 1)·8 + 1`` with the released strides)."""
        return self._frames(latent_frames, True, True)

    def _frames(self, n: int, origin: bool, end: bool) -> int:
        for s in self.config.decoder_upsample_strides:
            n = n * s[0] - (1 if s[0] == 2 and origin else 0)
        return n

    def _pixel_offset(self, start: int) -> int:
        """First clip pixel frame a window starting at latent ``start`` decodes (no leading drop)."""
        if start == 0:
            return 0
        for s in self.config.decoder_upsample_strides:
            start = start * s[0] - (1 if s[0] == 2 else 0)
        return start

    def halo(self) -> int:
        """Latent frames on each side of a chunk within which its pixels depend on the latents:
        the receptive field of the blocks (``depth·(k_t // 2)`` frames of each stage's grid, grown
        by the later upsamples) in latent frames, rounded up."""
        cfg = self.config
        reach = 0
        for i, s in enumerate(cfg.decoder_upsample_strides):
            reach = (reach + cfg.decoder_stage_depths[i] * (cfg.decoder_stage_kernels[i][0] // 2)) * s[0]
        reach += cfg.decoder_stage_depths[-1] * (cfg.decoder_stage5_kernel[0] // 2)
        return -(-reach // math.prod(s[0] for s in cfg.decoder_upsample_strides))

    def windows(self, latent_frames: int, chunk_frames: int | None) -> list[Window]:
        """The chunks of a decode of ``latent_frames``: each ``chunk_frames`` latents (None: one
        chunk) decoded from the window of ``chunk_frames + 2·halo`` latents around it (all of the
        same length, moved inward at the clip's ends)."""
        n = latent_frames
        if chunk_frames is None or chunk_frames >= n:
            return [Window(0, n, True, True, 0, self.pixel_frames(n), 0, self.pixel_frames(n))]
        length = min(n, chunk_frames + 2 * self.halo())
        out = []
        for s in range(0, n, chunk_frames):
            e = min(s + chunk_frames, n)
            start = min(max(s - self.halo(), 0), n - length)
            origin, end = start == 0, start + length == n
            out.append(
                Window(
                    start,
                    start + length,
                    origin,
                    end,
                    self._pixel_offset(start),
                    self._frames(length, origin, end),
                    self._pixel_offset(s),
                    self._pixel_offset(e) if e < n else self.pixel_frames(n),
                )
            )
        return out

    def check_grid(self, latent_shape: tuple[int, ...], chunk_frames: int | None, name: str = "latents") -> None:
        """Refuse (``InputError``) latents whose grid at some stage is smaller than that stage's
        kernel (the reference's ``ValueError``), for every window of the decode."""
        cfg = self.config
        _, _, t, h, w = latent_shape
        kernels = list(cfg.decoder_stage_kernels) + [cfg.decoder_stage5_kernel]
        for win in self.windows(t, chunk_frames):
            n = win.stop - win.start + (cfg.trailing_pad if win.end else 0)
            hh, ww = h, w
            for i, k in enumerate(kernels):
                if i == len(kernels) - 1 and win.end:
                    n -= cfg.trailing_pad * cfg.temporal_compression_ratio
                if n < k[0] or hh < k[1] or ww < k[2]:
                    raise InputError(
                        f"{name}: shape {tuple(latent_shape)} is too small for the diffusion decoder: "
                        f"stage {i + 1} sees a {n} x {hh} x {ww} grid, its neighbourhood is "
                        f"{tuple(k)}; give at least that many frames / rows / columns at that stage."
                    )
                if i < len(cfg.decoder_upsample_strides):
                    s = cfg.decoder_upsample_strides[i]
                    n, hh, ww = n * s[0] - (1 if s[0] == 2 and win.origin else 0), hh * s[1], ww * s[2]

    # -- decoding ------------------------------------------------------------------------------

    def pixel_shape(self, latent_shape: tuple[int, ...]) -> tuple[int, int, int, int, int]:
        """``(B, C, F, H, W)`` of the video decoded from latents ``(B, C_z, T, H', W')``."""
        b, _, t, h, w = latent_shape
        s = np.prod(np.array(self.config.decoder_upsample_strides), axis=0)
        p = self.config.patch_size
        return (b, self.config.out_channels, self.pixel_frames(t), h * int(s[1]) * p, w * int(s[2]) * p)

    def _compiled(self, win: Window, steps: int, z, noise):
        """The compiled ``(state, z, noise) -> pixels`` of one window (channels-last), shared by
        :meth:`decode` and :meth:`window_memory` (one compile per window shape)."""
        graphdef, state = nnx.split(self)
        leaves, treedef = jax.tree.flatten(state)
        abstract = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves)
        return _compile(
            graphdef,
            win.origin,
            win.end,
            steps,
            treedef,
            abstract,
            jax.ShapeDtypeStruct(z.shape, z.dtype),
            jax.ShapeDtypeStruct(noise.shape, noise.dtype),
        )

    def decode(self, z, noise, *, num_inference_steps: int | None = None, chunk_frames: int | None = 16) -> np.ndarray:
        """Decode de-normalised latents.

        Args:
            z: ``(B, C_z, T, H', W')`` float (the reference's layout), already de-normalised.
            noise: the pixel noise ``(B, C, F, H, W)`` float32 (:meth:`pixel_shape`), the
                reference's ``randn_tensor`` draw.
            num_inference_steps: stage-5 steps; None: ``decoder_num_inference_steps``.
            chunk_frames: latent frames decoded per chunk (None: the clip at once).

        Returns:
            ``(B, C, F, H, W)`` float32 numpy, assembled in host memory chunk by chunk.

        Raises:
            InputError: shapes that do not fit (checked before anything runs).
        """
        steps = num_inference_steps or self.config.decoder_num_inference_steps
        z = np.asarray(z)
        noise = np.asarray(noise)
        if noise.shape != self.pixel_shape(z.shape):
            raise InputError(
                f"decoder_noise: shape {noise.shape} does not fit latents {z.shape}; "
                f"expected {self.pixel_shape(z.shape)}."
            )
        self.check_grid(z.shape, chunk_frames)
        _, state = nnx.split(self)
        out = np.empty(noise.shape, np.float32)
        zl = np.moveaxis(z, 1, -1)
        nl = np.moveaxis(noise, 1, -1)
        for win in self.windows(z.shape[2], chunk_frames):
            frames = self._frames(win.stop - win.start, win.origin, win.end)
            zw = jnp.asarray(zl[:, win.start : win.stop], self.dtype)
            nw = jnp.asarray(nl[:, win.pixel_start : win.pixel_start + frames], self.dtype)
            video = np.asarray(self._compiled(win, steps, zw, nw)(state, zw, nw))
            a, b = win.keep_start - win.pixel_start, win.keep_stop - win.pixel_start
            out[:, :, win.keep_start : win.keep_stop] = np.moveaxis(video[:, a:b], -1, 1)
        return out

    def window_memory(
        self, latent_shape: tuple[int, ...], chunk_frames: int | None, num_inference_steps: int | None = None
    ) -> int:
        """Device bytes of a chunked decode besides the weights, from XLA's compiled memory
        analysis: the largest over the decode's windows of its latents, noise, output and
        temporaries (the weights are the same for any clip; the host assembly is not on device)."""
        steps = num_inference_steps or self.config.decoder_num_inference_steps
        b, c, t, h, w = latent_shape
        _, state = nnx.split(self)
        state_sds = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
        weights = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state_sds))
        _, pc, _, ph, pw = self.pixel_shape(latent_shape)
        peak = 0
        for win in self.windows(t, chunk_frames):
            frames = self._frames(win.stop - win.start, win.origin, win.end)
            zs = jax.ShapeDtypeStruct((b, win.stop - win.start, h, w, c), self.dtype)
            ns = jax.ShapeDtypeStruct((b, frames, ph, pw, pc), self.dtype)
            m = self._compiled(win, steps, zs, ns).memory_analysis()
            peak = max(peak, m.temp_size_in_bytes + m.argument_size_in_bytes - weights + m.output_size_in_bytes)
        return peak


@functools.lru_cache(maxsize=16)
def _compile(graphdef, origin, end, steps, treedef, abstract, z, noise):
    return _window.lower(graphdef, origin, end, steps, jax.tree.unflatten(treedef, abstract), z, noise).compile()


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _window(graphdef, origin, end, steps, state, z, noise):
    model = nnx.merge(graphdef, state)
    context = model.decoder.context(z, origin=origin, end=end)
    return model.decoder.denoise(context, noise, steps).astype(_F32)
