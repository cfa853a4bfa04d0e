"""Cosmos 3's sound tokenizer in Flax NNX, following diffusers 0.42.1
``models/autoencoders/autoencoder_cosmos3_audio.py`` (``Cosmos3AVAEAudioTokenizer``): sound
latents -> a stereo waveform (the Oobleck decoder), and a waveform -> the latent posterior (the
SpecConvNeXt encoder: STFT features, ConvNeXt blocks, strided convolutions).

Layouts. At the boundary, the diffusers layouts: latents ``(B, vocoder_input_dim, T)`` (as the
transformer's sound stream gives them), waveforms float32 ``(B, channels, samples)``. Inside,
channels last: a signal is ``(B, time, channels)``.

The module trees mirror the reference (``decoder.block.2.res_unit3.conv1.weight_v``,
``encoder.layers.3.dwconv.1.weight``), so the checkpoint maps by the loader's default rule. The
weight-normed convolutions keep the checkpoint's ``weight_g`` / ``weight_v`` in the reference's
layout (``(C_out, 1, 1)`` / ``(C_out, C_in, K)``; a transposed convolution's ``(C_in, 1, 1)`` /
``(C_in, C_out, K)``) and form ``g · v / ||v||`` (norm over all but the first axis, torch's
``weight_norm(dim=0)``) when they run; the SnakeBeta parameters keep their ``(1, C, 1)``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.errors import InputError
from vidax.models.cosmos3.config import Cosmos3SoundTokenizerConfig
from vidax.nn.layers import Conv, LayerNorm, gelu

_F32 = jnp.float32
_DN = ("NWC", "WIO", "NWC")


class Snake1d(nnx.Module):
    """Log-scale SnakeBeta: ``x + sin(x e^alpha)^2 / (e^beta + 1e-9)`` per channel, computed in
    float32; ``alpha`` / ``beta`` ``(1, C, 1)`` as the checkpoint's."""

    def __init__(self, channels: int):
        self.alpha = nnx.Param(jnp.zeros((1, channels, 1), _F32))
        self.beta = nnx.Param(jnp.zeros((1, channels, 1), _F32))

    def __call__(self, x: jax.Array) -> jax.Array:
        alpha = jnp.exp(self.alpha[...].astype(_F32).reshape(-1))
        beta = jnp.exp(self.beta[...].astype(_F32).reshape(-1))
        xf = x.astype(_F32)
        return (xf + (1.0 / (beta + 1e-9)) * jnp.square(jnp.sin(xf * alpha))).astype(x.dtype)


class WNConv1d(nnx.Module):
    """``weight_norm(nn.Conv1d(...))`` (zero padding) on ``(B, T, C_in)`` -> ``(B, T', C_out)``;
    ``transpose``: ``weight_norm(nn.ConvTranspose1d(...))`` with ``output_padding`` (no dilation).

    Args:
        cin, cout: channels; kernel, stride, padding, dilation: as torch's.
        output_padding: extra samples at the end of a transposed convolution's output.
        use_bias: torch ``bias=``.
    """

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        output_padding: int = 0,
        use_bias: bool = True,
        transpose: bool = False,
        dtype,
        param_dtype,
        rngs: nnx.Rngs,
    ):
        self.stride, self.padding, self.dilation, self.output_padding = stride, padding, dilation, output_padding
        self.transpose, self.dtype = transpose, dtype
        first = cin if transpose else cout
        shape = (cin, cout, kernel) if transpose else (cout, cin, kernel)
        self.weight_g = nnx.Param(jnp.ones((first, 1, 1), param_dtype))
        self.weight_v = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), shape, param_dtype))
        self.bias = nnx.Param(jnp.zeros((cout,), param_dtype)) if use_bias else None

    def weight(self) -> jax.Array:
        """``g · v / ||v||`` in the reference's layout, float32."""
        v = self.weight_v[...].astype(_F32)
        norm = jnp.sqrt(jnp.sum(jnp.square(v), axis=(1, 2), keepdims=True))
        return v * (self.weight_g[...].astype(_F32) / norm)

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.weight().astype(self.dtype)
        x = x.astype(self.dtype)
        k = w.shape[-1]
        if self.transpose:
            y = _conv_transpose(x, w, self.stride, self.padding, self.output_padding)
        elif k == 1 and self.stride == 1 and self.padding == 0:
            y = jnp.einsum("bti,oi->bto", x, w[:, :, 0])
        else:
            y = jax.lax.conv_general_dilated(
                x,
                jnp.transpose(w, (2, 1, 0)),
                (self.stride,),
                [(self.padding, self.padding)],
                rhs_dilation=(self.dilation,),
                dimension_numbers=_DN,
            )
        return y if self.bias is None else y + self.bias[...].astype(self.dtype)


def _conv_transpose(x: jax.Array, w: jax.Array, stride: int, padding: int, output_padding: int) -> jax.Array:
    """torch ``conv_transpose1d`` (no dilation) of ``x (B, L, C_in)`` with the torch weight
    ``w (C_in, C_out, K)``: ``(B, (L - 1) s - 2 p + K + output_padding, C_out)``.

    Computed as one matmul to every input sample's ``K`` output taps, then overlap-add of the
    ``ceil(K / s)`` stride-long groups of taps (input ``l``'s group ``m`` lands on output block
    ``l + m``), cropped by the padding. (An input-dilated convolution would spend ``s`` times the
    multiplies on inserted zeros: XLA's CPU convolution does not skip them.)"""
    b, length, _ = x.shape
    cin, cout, k = w.shape
    q = -(-k // stride)
    w = jnp.transpose(jnp.pad(w, ((0, 0), (0, 0), (0, q * stride - k))), (0, 2, 1))  # (C_in, q s, C_out)
    taps = jnp.einsum("bli,iko->blko", x, w).reshape(b, length, q, stride, cout)
    full = sum(jnp.pad(taps[:, :, m], ((0, 0), (m, q - 1 - m), (0, 0), (0, 0))) for m in range(q))
    full = full.reshape(b, (length + q - 1) * stride, cout)
    return full[:, padding : padding + (length - 1) * stride - 2 * padding + k + output_padding]


# ---------------------------------------------------------------------------------------------
# Decoder (Oobleck)


class ResidualUnit(nnx.Module):
    """``Cosmos3AudioResidualUnit``: ``x + conv2(snake2(conv1(snake1(x))))``, ``conv1`` of kernel 7
    and ``dilation`` ('same' padding), ``conv2`` pointwise."""

    def __init__(self, channels: int, dilation: int, **kw):
        self.snake1 = Snake1d(channels)
        self.conv1 = WNConv1d(channels, channels, 7, dilation=dilation, padding=3 * dilation, **kw)
        self.snake2 = Snake1d(channels)
        self.conv2 = WNConv1d(channels, channels, 1, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.conv2(self.snake2(self.conv1(self.snake1(x))))


class DecoderBlock(nnx.Module):
    """``Cosmos3AudioDecoderBlock``: snake, a transposed convolution (kernel ``2 s``, stride ``s``,
    padding ``ceil(s / 2)``, output padding ``s % 2``: ``T -> s T``), residual units of dilation
    1, 3, 9."""

    def __init__(self, cin: int, cout: int, stride: int, **kw):
        self.snake1 = Snake1d(cin)
        self.conv_t1 = WNConv1d(
            cin,
            cout,
            2 * stride,
            stride=stride,
            padding=math.ceil(stride / 2),
            output_padding=stride % 2,
            transpose=True,
            **kw,
        )
        self.res_unit1 = ResidualUnit(cout, 1, **kw)
        self.res_unit2 = ResidualUnit(cout, 3, **kw)
        self.res_unit3 = ResidualUnit(cout, 9, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv_t1(self.snake1(x))
        return self.res_unit3(self.res_unit2(self.res_unit1(x)))


class Decoder(nnx.Module):
    """``Cosmos3AudioDecoder``: ``(B, T, vocoder_input_dim)`` -> ``(B, T · prod(dec_strides),
    dec_out_channels)`` (not clamped)."""

    def __init__(self, cfg: Cosmos3SoundTokenizerConfig, **kw):
        strides = tuple(reversed(cfg.dec_strides))
        mults = (1, *cfg.dec_c_mults)
        n, c = len(strides), cfg.dec_dim
        self.conv1 = WNConv1d(cfg.vocoder_input_dim, c * mults[-1], 7, padding=3, **kw)
        self.block = nnx.List(
            [DecoderBlock(c * mults[n - i], c * mults[n - i - 1], s, **kw) for i, s in enumerate(strides)]
        )
        self.snake1 = Snake1d(c)
        self.conv2 = WNConv1d(c, cfg.dec_out_channels, 7, padding=3, use_bias=False, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv1(x)
        for block in self.block:
            x = block(x)
        return self.conv2(self.snake1(x))


# ---------------------------------------------------------------------------------------------
# Encoder (SpecConvNeXt)


class ZeroPad(nnx.Module):
    """``nn.ConstantPad1d((left, right), 0)`` along time (no parameters)."""

    def __init__(self, left: int, right: int):
        self.left, self.right = left, right

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.pad(x, ((0, 0), (self.left, self.right), (0, 0)))


class DepthwiseConv1d(nnx.Module):
    """``nn.Conv1d(C, C, kernel, groups=C)`` without padding; kernel ``(K, 1, C)`` (the torch
    ``(C, 1, K)`` by the loader's rank rule), bias ``(C,)``."""

    def __init__(self, channels: int, kernel: int, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.dtype = dtype
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (kernel, 1, channels), param_dtype))
        self.bias = nnx.Param(jnp.zeros((channels,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.kernel[...].astype(self.dtype)
        y = jax.lax.conv_general_dilated(
            x.astype(self.dtype), w, (1,), "VALID", dimension_numbers=_DN, feature_group_count=w.shape[-1]
        )
        return y + self.bias[...].astype(self.dtype)


class ConvNeXtBlock(nnx.Module):
    """``Cosmos3AudioConvNeXtBlock`` (non-causal): ``x + pwconv2(act(pwconv1(norm(dwconv(x)))))``,
    the depthwise kernel 7 zero-padded 3 / 3, the layer norm float32 without bias (eps 1e-5), the
    activation SnakeBeta or exact GELU."""

    def __init__(self, channels: int, intermediate: int, use_snake: bool, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.dtype = dtype
        self.dwconv = nnx.List([ZeroPad(3, 3), DepthwiseConv1d(channels, 7, **kw)])
        self.norm = LayerNorm(channels, 1e-5, affine=True, bias=False, param_dtype=param_dtype)
        self.pwconv1 = Conv(channels, intermediate, (1,), **kw)
        self.act = Snake1d(intermediate) if use_snake else None
        self.pwconv2 = Conv(intermediate, channels, (1,), **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.dwconv[1](self.dwconv[0](x))
        h = self.pwconv1(self.norm(h, self.dtype))
        h = self.act(h) if self.act is not None else gelu(h, False)
        return x + self.pwconv2(h)


class Encoder(nnx.Module):
    """``Cosmos3AudioSpectrogramConvNeXtEncoder``: waveform ``(B, T · hop, channels)`` -> the
    posterior parameters ``(B, T, enc_latent_dim)`` (mean then scale halves)."""

    def __init__(self, cfg: Cosmos3SoundTokenizerConfig, **kw):
        self.n_fft, self.hop = cfg.enc_n_fft, cfg.enc_hop_length
        self.dtype = kw["dtype"]
        c, mults = cfg.enc_dim, cfg.enc_c_mults
        layers: list[nnx.Module] = [
            WNConv1d((cfg.enc_n_fft + 2) * cfg.encoder_channels, mults[0] * c, 1, use_bias=False, **kw)
        ]
        for i, stride in enumerate(cfg.enc_strides):
            cin, cout = mults[i] * c, mults[min(i + 1, len(mults) - 1)] * c
            layers += [ConvNeXtBlock(cin, 4 * cin, cfg.enc_use_snake, **kw) for _ in range(cfg.enc_num_blocks)]
            layers.append(WNConv1d(cin, cout, 2 * stride, stride=stride, padding=math.ceil(stride / 2), **kw))
        layers.append(WNConv1d(mults[-1] * c, cfg.enc_latent_dim, 1, use_bias=False, **kw))
        self.layers = nnx.List(layers)

    def spectrogram(self, wave: jax.Array) -> jax.Array:
        """``(B, samples, C)`` -> ``(B, frames, C · (n_fft + 2))`` float32: per channel the real then
        the imaginary parts of the one-sided STFT (periodic Hann window of ``n_fft``, hop ``hop``,
        ``(n_fft - hop) / 2`` zeros before and the rest after, no centring), as the reference
        orders them (``c · (n_fft + 2) + part · (n_fft / 2 + 1) + f``)."""
        b, n, ch = wave.shape
        pad = self.n_fft - self.hop
        x = jnp.pad(wave.astype(_F32), ((0, 0), (pad // 2, pad - pad // 2), (0, 0)))
        frames = (x.shape[1] - self.n_fft) // self.hop + 1
        index = jnp.arange(frames)[:, None] * self.hop + jnp.arange(self.n_fft)[None, :]
        window = 0.5 - 0.5 * jnp.cos(2 * jnp.pi * jnp.arange(self.n_fft, dtype=_F32) / self.n_fft)
        spec = jnp.fft.rfft(x[:, index, :] * window[None, None, :, None], axis=2)  # (B, frames, F, C)
        parts = jnp.concatenate([spec.real, spec.imag], axis=2).astype(_F32)  # (B, frames, 2F, C)
        return jnp.transpose(parts, (0, 1, 3, 2)).reshape(b, frames, -1)

    def __call__(self, wave: jax.Array) -> jax.Array:
        x = self.spectrogram(wave).astype(self.dtype)
        for layer in self.layers:
            x = layer(x)
        return x


# ---------------------------------------------------------------------------------------------
# The tokenizer


class Cosmos3AVAEAudioTokenizer(nnx.Module):
    """``Cosmos3AVAEAudioTokenizer``: sound latents <-> stereo waveform (see the module docstring).

    The audio-decoder contract (:class:`~vidax.pipelines.contracts.AudioDecoder`): ``output`` is
    ``"waveform"``; :meth:`denormalize_latents` (the tokenizer has no latent statistics: the
    identity) and :meth:`decode`. Plus :meth:`encode` (waveform -> posterior), which the reference
    pipeline does not call.

    Args:
        config: its :class:`~vidax.models.cosmos3.config.Cosmos3SoundTokenizerConfig`.
        dtype: compute dtype (float32 or bfloat16); param_dtype: storage dtype when building.
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    Attributes:
        sample_rate: Hz of the waveform (``sampling_rate``).
        hop: waveform samples per latent frame.
        encoder: None for a decoder-only config (``encoder_enabled`` false).
    """

    output = "waveform"

    def __init__(self, config: Cosmos3SoundTokenizerConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config, self.dtype = config, dtype
        self.encoder = Encoder(config, **kw) if config.encoder_enabled else None
        self.decoder = Decoder(config, **kw)

    @property
    def sample_rate(self) -> int:
        return self.config.sampling_rate

    @property
    def hop(self) -> int:
        return self.config.hop

    def _latents(self, z, name: str) -> jax.Array:
        z = jnp.asarray(z)
        c = self.config.vocoder_input_dim
        if z.ndim != 3 or z.shape[1] != c or min(z.shape) < 1 or not jnp.issubdtype(z.dtype, jnp.floating):
            raise InputError(
                f"{name} must be floating point sound latents (batch, {c}, frames); got shape "
                f"{tuple(z.shape)} dtype {z.dtype}"
            )
        return z

    def denormalize_latents(self, z) -> jax.Array:
        """The transformer's sound latents -> what :meth:`decode` takes: unchanged (the reference
        applies no latent statistics; configs with ``latent_mean`` / ``latent_std`` are refused).

        Raises:
            InputError: ``z`` not floating point ``(B, vocoder_input_dim, T)``.
        """
        return self._latents(z, "z")

    def decode(self, z) -> jax.Array:
        """Sound latents ``(B, vocoder_input_dim, T)`` (numpy or jax) -> waveform float32
        ``(B, dec_out_channels, T · prod(dec_strides))`` in [-1, 1] at :attr:`sample_rate` Hz
        (``Cosmos3AVAEAudioTokenizer.decode``, clamped as it is).

        Raises:
            InputError: ``z`` of another shape or not floating point.
        """
        z = self._latents(z, "z")
        graphdef, state = nnx.split(self.decoder)
        return _decode_fn(graphdef, state, jnp.transpose(z, (0, 2, 1)).astype(self.dtype))

    def encode(self, waveform) -> tuple[jax.Array, jax.Array]:
        """Waveform ``(B, channels, samples)`` -> the posterior's ``(mean, std)``, each float32
        ``(B, enc_latent_dim / 2, ceil(samples / hop))`` (``encode(x).latent_dist``'s ``mean`` and
        ``std = softplus(scale) + 1e-4`` in eval mode: peak-normalised when ``normalize_volume``,
        zero-padded at the end to a multiple of :attr:`hop`).

        Raises:
            InputError: ``waveform`` not floating point with ``channels = input_channels · (2 if
                stereo)``, or a decoder-only tokenizer.
        """
        cfg = self.config
        if self.encoder is None:
            raise InputError(
                "this sound tokenizer has no encoder (encoder_enabled is false: decoder-only weights); "
                "it cannot encode a waveform"
            )
        x = jnp.asarray(waveform)
        c = cfg.encoder_channels
        if x.ndim != 3 or x.shape[1] != c or min(x.shape) < 1 or not jnp.issubdtype(x.dtype, jnp.floating):
            raise InputError(
                f"waveform must be floating point (batch, {c}, samples); got shape {tuple(x.shape)} dtype {x.dtype}"
            )
        graphdef, state = nnx.split(self.encoder)
        return _encode_fn(graphdef, state, jnp.transpose(x, (0, 2, 1)), cfg.normalize_volume, cfg.hop)


@functools.partial(jax.jit, static_argnums=(0,))
def _decode_fn(graphdef, state, z):
    """The decoder on channels-last latents -> clamped waveform ``(B, channels, samples)`` float32."""
    wave = nnx.merge(graphdef, state)(z).astype(_F32)
    return jnp.transpose(jnp.clip(wave, -1.0, 1.0), (0, 2, 1))


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _encode_fn(graphdef, state, wave, normalize_volume: bool, hop: int):
    """Channels-last waveform -> ``(mean, std)`` ``(B, C_z, T)`` float32 (see ``encode``)."""
    encoder = nnx.merge(graphdef, state)
    if normalize_volume:
        wave = wave / (jnp.max(jnp.abs(wave)) + 1e-5) * 0.95
    wave = jnp.pad(wave, ((0, 0), (0, -wave.shape[1] % hop), (0, 0)))
    moments = encoder(wave.astype(encoder.dtype)).astype(_F32)
    mean, scale = jnp.split(moments, 2, axis=-1)
    std = jax.nn.softplus(scale) + 1e-4
    return jnp.transpose(mean, (0, 2, 1)), jnp.transpose(std, (0, 2, 1))
