"""LTX-2's audio VAE in Flax NNX, following ``diffusers.AutoencoderKLLTX2Audio`` (diffusers 0.42.1,
``models/autoencoders/autoencoder_kl_ltx2_audio.py``): mel spectrograms <-> audio latents.

Layouts. At the boundary, the diffusers layouts: latents ``(B, C_z, L, M_z)`` (``M_z = mel_bins /
4``), or packed as the transformer's audio tokens ``(B, L, C_z * M_z)`` (:func:`pack_latents`,
the pipeline's ``_pack_audio_latents`` without patching); mel spectrograms ``(B, channels,
frames, mel_bins)``. Inside, channels last: a spectrogram is an image ``(B, frames, mel_bins, C)``
(height = time, width = mel bins, as the reference's ``Conv2d`` s see it).

The module tree mirrors the reference (``decoder.up.1.block.0.conv1.conv.weight`` is the NNX path
``decoder/up/1/block/0/conv1/conv/kernel``), so the checkpoint maps by the loader's default rule.
The latent statistics ``latents_mean`` / ``latents_std`` (``(base_channels,)``, one per packed
latent feature ``c * M_z + m``) are checkpoint buffers (:class:`~vidax.nn.buffer.Buffer`).

Decode: ``L`` latent frames give ``4 L - 3`` mel frames (causal), cropped / zero-padded to that
length and to ``mel_bins``, as the reference. Precision: float32 or bfloat16 compute, norm
statistics in float32, outputs float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import InputError
from vidax.models.ltx2.config import LTX2AudioVAEConfig
from vidax.nn.buffer import Buffer
from vidax.nn.layers import Conv, GroupNorm, rms_norm

_F32 = jnp.float32
_NORM_EPS = 1e-6  # LTX2AudioPixelNorm(eps=1e-6) and GroupNorm(eps=1e-6) of every block


def pack_latents(z: jax.Array) -> jax.Array:
    """``(B, C, L, M)`` -> the transformer's audio tokens ``(B, L, C * M)`` (feature ``c * M + m``;
    the pipeline's ``_pack_audio_latents`` without patching)."""
    b, c, length, m = z.shape
    return jnp.transpose(z, (0, 2, 1, 3)).reshape(b, length, c * m)


def unpack_latents(z: jax.Array, mel_bins: int) -> jax.Array:
    """The inverse of :func:`pack_latents`: ``(B, L, C * M)`` -> ``(B, C, L, M)`` with
    ``M = mel_bins`` (latent mel bins)."""
    b, length, f = z.shape
    return jnp.transpose(z.reshape(b, length, f // mel_bins, mel_bins), (0, 2, 1, 3))


def _conv_padding(kernel: int, axis: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """``LTX2AudioCausalConv2d``'s zero padding ``((top, bottom), (left, right))`` of a ``kernel``
    square conv causal along ``axis`` (height: time, width: mel bins)."""
    p = kernel - 1
    centred = (p // 2, p - p // 2)
    if axis == "height":
        return (p, 0), centred
    if axis in ("width", "width-compatibility"):
        return centred, (p, 0)
    return centred, centred


#: ``LTX2AudioDownsample``'s zero padding ``((top, bottom), (left, right))`` before its stride-2 conv.
_DOWN_PADDING = {
    "none": ((0, 1), (0, 1)),
    "width": ((0, 1), (2, 0)),
    "height": ((2, 0), (0, 1)),
    "width-compatibility": ((0, 1), (1, 0)),
}


class LTX2AudioCausalConv2d(nnx.Module):
    """``LTX2AudioCausalConv2d``: zero padding causal along ``causality_axis``, then ``conv``.
    ``(B, H, W, C_in)`` -> ``(B, H, W, C_out)``."""

    def __init__(self, cin: int, cout: int, kernel: int, axis: str, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.conv = Conv(
            cin,
            cout,
            (kernel, kernel),
            padding=_conv_padding(kernel, axis),
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class LTX2AudioPixelNorm(nnx.Module):
    """``LTX2AudioPixelNorm``: ``x / sqrt(mean(x^2 over channels) + 1e-6)`` (no parameters)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return rms_norm(x, _NORM_EPS, x.dtype)


def _norm(channels: int, norm_type: str) -> nnx.Module:
    """The block norm of ``norm_type``: pixel (RMS over channels) or ``GroupNorm(32, eps=1e-6)``."""
    return GroupNorm(channels, 32, _NORM_EPS) if norm_type == "group" else LTX2AudioPixelNorm()


class LTX2AudioResnetBlock(nnx.Module):
    """``LTX2AudioResnetBlock``: norm, SiLU, conv, norm, SiLU, conv, plus the input (through a
    1x1 causal conv ``nin_shortcut`` when the width changes)."""

    def __init__(self, cin: int, cout: int, cfg: LTX2AudioVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        axis = cfg.causality_axis
        self.norm1 = _norm(cin, cfg.norm_type)
        self.conv1 = LTX2AudioCausalConv2d(cin, cout, 3, axis, **kw)
        self.norm2 = _norm(cout, cfg.norm_type)
        self.conv2 = LTX2AudioCausalConv2d(cout, cout, 3, axis, **kw)
        self.nin_shortcut = LTX2AudioCausalConv2d(cin, cout, 1, axis, **kw) if cin != cout else None

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        if self.nin_shortcut is not None:
            x = self.nin_shortcut(x)
        return x + h


class LTX2AudioDownsample(nnx.Module):
    """``LTX2AudioDownsample`` (``with_conv``): zero padding by causality, a 3x3 stride-2 conv."""

    def __init__(self, channels: int, axis: str, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.conv = Conv(
            channels,
            channels,
            (3, 3),
            stride=(2, 2),
            padding=_DOWN_PADDING[axis],
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class LTX2AudioUpsample(nnx.Module):
    """``LTX2AudioUpsample`` (``with_conv``): nearest 2x on both axes, a causal 3x3 conv, then the
    first row (``"height"``) or column (``"width"``) dropped."""

    def __init__(self, channels: int, axis: str, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.axis = axis
        self.conv = LTX2AudioCausalConv2d(channels, channels, 3, axis, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
        x = self.conv(x)
        if self.axis == "height":
            x = x[:, 1:]
        elif self.axis == "width":
            x = x[:, :, 1:]
        return x


class LTX2AudioAttnBlock(nnx.Module):
    """``LTX2AudioAttnBlock``: ``x + proj_out(attention(q, k, v))`` of the normed input, one head
    of all channels over every (time, mel) position (not causal), the 1x1 convs ``q k v``."""

    def __init__(self, channels: int, cfg: LTX2AudioVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.norm = _norm(channels, cfg.norm_type)
        self.q, self.k, self.v, self.proj_out = (Conv(channels, channels, (1, 1), **kw) for _ in range(4))

    def __call__(self, x: jax.Array) -> jax.Array:
        b, h, w, c = x.shape
        n = self.norm(x)
        q, k, v = (f(n).reshape(b, h * w, c) for f in (self.q, self.k, self.v))
        logits = jnp.einsum("bqc,bkc->bqk", q, k, preferred_element_type=_F32) * (c**-0.5)
        out = jnp.einsum("bqk,bkc->bqc", jax.nn.softmax(logits, axis=-1).astype(v.dtype), v)
        return x + self.proj_out(out.reshape(b, h, w, c))


class _Stage(nnx.Module):
    """One level of the encoder (``down.i``) or decoder (``up.i``): ``block`` resnets, each
    followed by its ``attn`` block when the level has them, and the level's resampler
    (``downsample`` / ``upsample``, None at the last / first level)."""

    def __init__(
        self, blocks: list[LTX2AudioResnetBlock], attn: list[LTX2AudioAttnBlock], resample: nnx.Module | None, name: str
    ):
        self.block = nnx.List(blocks)
        self.attn = nnx.List(attn)
        if name == "downsample":
            self.downsample = resample
        else:
            self.upsample = resample

    def blocks(self, x: jax.Array) -> jax.Array:
        for i, block in enumerate(self.block):
            x = block(x)
            if len(self.attn):
                x = self.attn[i](x)
        return x


def _stage_attn(cfg: LTX2AudioVAEConfig, channels: int, count: int, size: int, **kw) -> list[LTX2AudioAttnBlock]:
    """``count`` attention blocks for a level of nominal size ``size`` when ``attn_resolutions``
    lists it, else none."""
    if not cfg.attn_resolutions or size not in cfg.attn_resolutions:
        return []
    return [LTX2AudioAttnBlock(channels, cfg, **kw) for _ in range(count)]


class _Mid(nnx.Module):
    """``mid``: two resnets, with ``attn_1`` between them when ``mid_block_add_attention`` (else
    the reference's ``nn.Identity``)."""

    def __init__(self, channels: int, cfg: LTX2AudioVAEConfig, **kw):
        self.block_1 = LTX2AudioResnetBlock(channels, channels, cfg, **kw)
        self.attn_1 = LTX2AudioAttnBlock(channels, cfg, **kw) if cfg.mid_block_add_attention else None
        self.block_2 = LTX2AudioResnetBlock(channels, channels, cfg, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.block_1(x)
        if self.attn_1 is not None:
            x = self.attn_1(x)
        return self.block_2(x)


class LTX2AudioEncoder(nnx.Module):
    """``LTX2AudioEncoder``: mel ``(B, frames, mel_bins, in_channels)`` -> ``(B, L, M_z, z)`` with
    ``z = 2 latent_channels`` (mean, log-variance) when ``double_z``."""

    def __init__(self, cfg: LTX2AudioVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        axis, n = cfg.causality_axis, len(cfg.ch_mult)
        self.conv_in = LTX2AudioCausalConv2d(cfg.in_channels, cfg.base_channels, 3, axis, **kw)
        stages, cin, size = [], cfg.base_channels, cfg.resolution
        for level in range(n):
            cout = cfg.base_channels * cfg.ch_mult[level]
            blocks = []
            for _ in range(cfg.num_res_blocks):
                blocks.append(LTX2AudioResnetBlock(cin, cout, cfg, **kw))
                cin = cout
            down = LTX2AudioDownsample(cin, axis, **kw) if level != n - 1 else None
            stages.append(_Stage(blocks, _stage_attn(cfg, cin, cfg.num_res_blocks, size, **kw), down, "downsample"))
            size = size // 2 if level != n - 1 else size
        self.down = nnx.List(stages)
        self.mid = _Mid(cin, cfg, **kw)
        self.norm_out = _norm(cin, cfg.norm_type)
        z = 2 * cfg.latent_channels if cfg.double_z else cfg.latent_channels
        self.conv_out = LTX2AudioCausalConv2d(cin, z, 3, axis, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv_in(x)
        for stage in self.down:
            x = stage.blocks(x)
            if stage.downsample is not None:
                x = stage.downsample(x)
        x = self.mid(x)
        return self.conv_out(jax.nn.silu(self.norm_out(x)))


class LTX2AudioDecoder(nnx.Module):
    """``LTX2AudioDecoder``: latents ``(B, L, M_z, C_z)`` -> mel ``(B, frames, mel_bins,
    output_channels)``, ``frames = max(4 L - 3, 1)`` (cropped / zero padded as the reference)."""

    def __init__(self, cfg: LTX2AudioVAEConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = cfg
        axis, n = cfg.causality_axis, len(cfg.ch_mult)
        cin = cfg.base_channels * cfg.ch_mult[-1]
        self.conv_in = LTX2AudioCausalConv2d(cfg.latent_channels, cin, 3, axis, **kw)
        self.mid = _Mid(cin, cfg, **kw)
        stages: list[_Stage | None] = [None] * n
        size = cfg.resolution // 2 ** (n - 1)
        for level in reversed(range(n)):
            cout = cfg.base_channels * cfg.ch_mult[level]
            blocks = []
            for _ in range(cfg.num_res_blocks + 1):
                blocks.append(LTX2AudioResnetBlock(cin, cout, cfg, **kw))
                cin = cout
            up = LTX2AudioUpsample(cin, axis, **kw) if level != 0 else None
            stages[level] = _Stage(blocks, _stage_attn(cfg, cin, cfg.num_res_blocks + 1, size, **kw), up, "upsample")
            size = size * 2 if level != 0 else size
        self.up = nnx.List(stages)
        self.norm_out = _norm(cin, cfg.norm_type)
        self.conv_out = LTX2AudioCausalConv2d(cin, cfg.output_channels, 3, axis, **kw)

    def __call__(self, z: jax.Array) -> jax.Array:
        cfg = self.config
        frames, mel_bins = z.shape[1], z.shape[2]
        target_t = max(frames * cfg.latent_downsample - (cfg.latent_downsample - 1), 1)
        target_m = cfg.mel_bins if cfg.mel_bins is not None else mel_bins
        x = self.mid(self.conv_in(z))
        for stage in reversed(self.up):
            x = stage.blocks(x)
            if stage.upsample is not None:
                x = stage.upsample(x)
        x = self.conv_out(jax.nn.silu(self.norm_out(x)))
        x = x[:, :target_t, :target_m]
        return jnp.pad(x, ((0, 0), (0, target_t - x.shape[1]), (0, target_m - x.shape[2]), (0, 0)))


class AutoencoderKLLTX2Audio(nnx.Module):
    """LTX-2's audio VAE (follows ``diffusers.AutoencoderKLLTX2Audio``).

    Args:
        config: its :class:`~vidax.models.ltx2.config.LTX2AudioVAEConfig`.
        dtype: compute dtype (float32 or bfloat16); param_dtype: storage dtype when building.
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    Attributes:
        output: ``"mel"``: :meth:`decode` gives a mel spectrogram for a vocoder.
        sample_rate, hop_length: of that spectrogram (``config.sample_rate``, ``mel_hop_length``).
        latents_mean, latents_std: ``(base_channels,)`` float32 :class:`Buffer` s (the checkpoint's).

    The audio-decoder contract (``denormalize_latents``, ``decode``) plus :meth:`normalize_latents`
    and :meth:`encode`.
    """

    output = "mel"

    def __init__(self, config: LTX2AudioVAEConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype
        self.encoder = LTX2AudioEncoder(config, **kw)
        self.decoder = LTX2AudioDecoder(config, **kw)
        self.latents_mean = Buffer(jnp.zeros((config.base_channels,), _F32))
        self.latents_std = Buffer(jnp.ones((config.base_channels,), _F32))

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def hop_length(self) -> int:
        return self.config.mel_hop_length

    @property
    def latent_mel_bins(self) -> int | None:
        """``M_z``: mel bins of the latents (``mel_bins / 4``; None when ``mel_bins`` is null)."""
        m = self.config.mel_bins
        return None if m is None else m // self.config.latent_downsample

    # -- latent statistics ------------------------------------------------------------------------

    def _stats(self, z, name: str):
        """``z`` as a jax array and the mean / std broadcast to its layout: packed ``(B, L, F)`` or
        unpacked ``(B, C_z, L, M_z)``, ``F = C_z M_z = base_channels``."""
        z = jnp.asarray(z)
        cfg = self.config
        f = cfg.base_channels
        if not jnp.issubdtype(z.dtype, jnp.floating):
            raise InputError(f"{name} must be floating point; got dtype {z.dtype}")
        mean, std = self.latents_mean[...].astype(z.dtype), self.latents_std[...].astype(z.dtype)
        if z.ndim == 3 and z.shape[-1] == f:
            return z, mean, std
        if z.ndim == 4 and z.shape[1] == cfg.latent_channels and z.shape[1] * z.shape[3] == f:
            m = z.shape[3]
            return z, mean.reshape(1, -1, 1, m), std.reshape(1, -1, 1, m)
        raise InputError(
            f"{name} must be packed (batch, length, {f}) or (batch, {cfg.latent_channels}, length, "
            f"{f // cfg.latent_channels}) audio latents; got shape {tuple(z.shape)}"
        )

    def normalize_latents(self, z) -> jax.Array:
        """Encoder latents -> the transformer's: ``(z - latents_mean) / latents_std`` per packed
        feature (``LTX2Pipeline._normalize_audio_latents``); ``z`` packed ``(B, L, F)`` or
        ``(B, C_z, L, M_z)``, same layout and dtype out.

        Raises:
            InputError: ``z`` not floating point or of neither shape.
        """
        z, mean, std = self._stats(z, "z")
        return (z - mean) / std

    def denormalize_latents(self, z) -> jax.Array:
        """The transformer's audio latents -> what :meth:`decode` takes: ``z * latents_std +
        latents_mean`` (``LTX2Pipeline._denormalize_audio_latents``); layouts as
        :meth:`normalize_latents`.

        Raises:
            InputError: ``z`` not floating point or of neither shape.
        """
        z, mean, std = self._stats(z, "z")
        return z * std + mean

    # -- decode / encode --------------------------------------------------------------------------

    def decode(self, z) -> jax.Array:
        """Audio latents -> mel spectrogram (``AutoencoderKLLTX2Audio.decode(z).sample``).

        Args:
            z: unnormalised latents (see :meth:`denormalize_latents`), ``(B, C_z, L, M_z)`` as the
                reference takes them, or packed ``(B, L, C_z * M_z)`` (unpacked with ``M_z =
                mel_bins / 4``); numpy or jax, floating point.

        Returns:
            float32 ``(B, output_channels, max(4 L - 3, 1), mel_bins)`` (log-mel values).

        Raises:
            InputError: ``z`` of another shape or not floating point.
        """
        z = jnp.asarray(z)
        cfg = self.config
        if z.ndim == 3 and self.latent_mel_bins and z.shape[-1] == cfg.latent_channels * self.latent_mel_bins:
            z = unpack_latents(z, self.latent_mel_bins)
        if (
            z.ndim != 4
            or z.shape[1] != cfg.latent_channels
            or min(z.shape) < 1
            or not jnp.issubdtype(z.dtype, jnp.floating)
        ):
            raise InputError(
                f"z must be floating point audio latents (batch, {cfg.latent_channels}, length, "
                f"mel_bins) or packed (batch, length, {cfg.latent_channels} * mel_bins); got shape "
                f"{tuple(z.shape)} dtype {z.dtype}"
            )
        graphdef, state = nnx.split(self.decoder)
        mel = _decode_fn(graphdef, state, jnp.transpose(z, (0, 2, 3, 1)).astype(self.dtype))
        return jnp.transpose(mel, (0, 3, 1, 2))

    def encode(self, mel) -> jax.Array:
        """Mel spectrogram ``(B, in_channels, frames, mel_bins)`` -> the encoder's raw output
        ``(B, z, L, M_z)`` float32 (``z = 2 C_z``: mean then log-variance channels when
        ``double_z``; the reference's posterior parameters before ``DiagonalGaussianDistribution``).

        Raises:
            InputError: ``mel`` not 4-D floating point with ``in_channels`` channels.
        """
        mel = jnp.asarray(mel)
        cfg = self.config
        if mel.ndim != 4 or mel.shape[1] != cfg.in_channels or not jnp.issubdtype(mel.dtype, jnp.floating):
            raise InputError(
                f"mel must be floating point (batch, {cfg.in_channels}, frames, mel_bins); got shape "
                f"{tuple(mel.shape)} dtype {mel.dtype}"
            )
        graphdef, state = nnx.split(self.encoder)
        h = _encode_fn(graphdef, state, jnp.transpose(mel, (0, 2, 3, 1)).astype(self.dtype))
        return jnp.transpose(h, (0, 3, 1, 2))


@functools.partial(jax.jit, static_argnums=(0,))
def _decode_fn(graphdef, state, z):
    return nnx.merge(graphdef, state)(z).astype(_F32)


@functools.partial(jax.jit, static_argnums=(0,))
def _encode_fn(graphdef, state, x):
    return nnx.merge(graphdef, state)(x).astype(_F32)
