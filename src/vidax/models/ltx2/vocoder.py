"""LTX-2's vocoders in Flax NNX, following diffusers 0.42.1 ``pipelines/ltx2/vocoder.py``:
:class:`LTX2Vocoder` (LTX-2: a HiFi-GAN generator, mel -> 24 kHz) and :class:`LTX2VocoderWithBWE`
(LTX-2.3: a BigVGAN-style generator at 16 kHz, a causal log-mel STFT of its waveform, a
bandwidth-extension generator whose output is added to the Hann-resampled waveform, 48 kHz).

Layouts. At the boundary, the diffusers layouts: mel ``(B, C, frames, M)`` (the audio VAE's
decode; ``C * M`` must be ``in_channels``), waveform float32 ``(B, out_channels, samples)``.
Inside, channels last: a signal is ``(B, time, channels)``; the mel's ``C * M`` features are
ordered ``c * M + m`` as the reference's ``transpose(2, 3).flatten(1, 2)``.

The module trees mirror the reference (``resnets.4.acts1.2.act.alpha``,
``upsamplers.0.weight``), so the checkpoint maps by the loader's default rule: a
``ConvTranspose1d`` weight ``(C_in, C_out, K)`` is laid out ``(K, C_out, C_in)`` by the rank rule
and :class:`ConvTranspose1d` uses it so. The anti-aliasing filters (``upsample.filter``,
``downsample.filter``), the STFT bases and the mel filterbank are checkpoint buffers
(:class:`~vidax.nn.buffer.Buffer`); the BWE's Hann resampler filter is not in the checkpoint
(``persistent=False``) and is computed here as the reference computes it.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import InputError
from vidax.models.ltx2.config import LTX2VocoderConfig, LTX2VocoderWithBWEConfig
from vidax.nn.buffer import Buffer
from vidax.nn.layers import Conv

_F32 = jnp.float32
_DN = ("NWC", "WIO", "NWC")


# ---------------------------------------------------------------------------------------------
# Filters


def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> np.ndarray:
    """``kaiser_sinc_filter1d``: a Kaiser-windowed sinc low-pass, ``(kernel_size,)`` float32."""
    delta_f = 4 * half_width
    half = kernel_size // 2
    amplitude = 2.285 * (half - 1) * math.pi * delta_f + 7.95
    if amplitude > 50.0:
        beta = 0.1102 * (amplitude - 8.7)
    elif amplitude >= 21.0:
        beta = 0.5842 * (amplitude - 21) ** 0.4 + 0.07886 * (amplitude - 21.0)
    else:
        beta = 0.0
    window = np.kaiser(kernel_size, beta)
    time = np.arange(-half, half) + 0.5 if kernel_size % 2 == 0 else np.arange(kernel_size) - half
    if cutoff == 0.0:
        return np.zeros(kernel_size, np.float32)
    f = 2 * cutoff * window * np.sinc(2 * cutoff * time)
    return (f / f.sum()).astype(np.float32)


def hann_resampler(ratio: int) -> tuple[np.ndarray, int, int, int]:
    """``UpSample1d(ratio, window_type="hann")``'s filter ``(K,)`` float32 and its paddings
    ``(pad, pad_left, pad_right)`` (rolloff 0.99, 6 zero crossings)."""
    rolloff, zeros = 0.99, 6
    width = math.ceil(zeros / rolloff)
    k = 2 * width * ratio + 1
    t = (np.arange(k) / ratio - width) * rolloff
    window = np.cos(np.clip(t, -zeros, zeros) * math.pi / zeros / 2) ** 2
    return (np.sinc(t) * window * rolloff / ratio).astype(np.float32), width, 2 * width * ratio, k - ratio


def _fir(x: jax.Array, f: jax.Array, stride: int = 1) -> jax.Array:
    """One filter ``f (K,)`` over every channel of ``x (B, T, C)`` (torch ``conv1d`` with
    ``groups=C``, no padding): ``y[n] = sum_k f[k] x[n stride + k]``, ``(B, (T - K) // stride + 1,
    C)``. Written as ``K`` shifted multiply-adds, which XLA fuses into one loop (a grouped
    convolution is several times slower on the CPU)."""
    k = f.shape[0]
    n = (x.shape[1] - k) // stride + 1
    f = f.astype(x.dtype)
    out = f[0] * x[:, 0 : stride * (n - 1) + 1 : stride]
    for j in range(1, k):
        out = out + f[j] * x[:, j : j + stride * (n - 1) + 1 : stride]
    return out


def _upsample(x: jax.Array, f: jax.Array, ratio: int, pad: int, pad_left: int, pad_right: int) -> jax.Array:
    """``UpSample1d.forward``: replicate padding, ``ratio *`` a depthwise transposed conv of
    stride ``ratio`` (``y[t] = sum_s x[s] f[t - s ratio]``), cropped ``[pad_left : -pad_right]``.

    Computed by phases: output ``n ratio + p`` is a plain filter of ``x`` with the taps
    ``f[p::ratio]``; the phases are interleaved."""
    x = jnp.pad(x, ((0, 0), (pad, pad), (0, 0)), mode="edge")
    k, length = f.shape[0], x.shape[1]
    q = -(-k // ratio)  # taps per phase (the last ones zero when ratio does not divide k)
    taps = jnp.pad(f, (0, q * ratio - k)).reshape(q, ratio)  # taps[i, p] = f[i ratio + p]
    xz = jnp.pad(x, ((0, 0), (q - 1, q - 1), (0, 0)))
    phases = [_fir(xz, taps[::-1, p]) for p in range(ratio)]  # each (B, length + q - 1, C)
    y = jnp.stack(phases, axis=2).reshape(x.shape[0], -1, x.shape[2])[:, : (length - 1) * ratio + k]
    return ratio * y[:, pad_left : y.shape[1] - pad_right]


# ---------------------------------------------------------------------------------------------
# Layers


class ConvTranspose1d(nnx.Module):
    """torch ``nn.ConvTranspose1d`` on ``(B, T, C_in)`` -> ``(B, (T - 1) s - 2 p + K, C_out)``;
    ``kernel (K, C_out, C_in)`` (the torch weight ``(C_in, C_out, K)`` reversed), ``bias (C_out,)``."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, padding: int, *, dtype, param_dtype, rngs: nnx.Rngs
    ):
        self.stride, self.pad, self.dtype = stride, padding, dtype
        self.kernel = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (kernel, cout, cin), param_dtype))
        self.bias = nnx.Param(jnp.zeros((cout,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.kernel[...].astype(self.dtype)
        k = w.shape[0]
        y = jax.lax.conv_general_dilated(
            x.astype(self.dtype),
            jnp.transpose(w[::-1], (0, 2, 1)),
            (1,),
            [(k - 1 - self.pad, k - 1 - self.pad)],
            lhs_dilation=(self.stride,),
            dimension_numbers=_DN,
        )
        return y + self.bias[...].astype(self.dtype)


class SnakeBeta(nnx.Module):
    """``SnakeBeta`` (log-scale parameters): ``x + sin(x e^alpha)^2 / (e^beta + 1e-9)``, or with
    ``e^alpha`` in the denominator without ``beta`` (``"snake"``); computed in float32."""

    def __init__(self, channels: int, use_beta: bool):
        self.alpha = nnx.Param(jnp.zeros((channels,), _F32))
        self.beta = nnx.Param(jnp.zeros((channels,), _F32)) if use_beta else None

    def __call__(self, x: jax.Array) -> jax.Array:
        alpha = jnp.exp(self.alpha[...].astype(_F32))
        amp = jnp.exp(self.beta[...].astype(_F32)) if self.beta is not None else alpha
        xf = x.astype(_F32)
        return (xf + (1.0 / (amp + 1e-9)) * jnp.square(jnp.sin(xf * alpha))).astype(x.dtype)


class LeakyReLU(nnx.Module):
    """``nn.LeakyReLU(negative_slope)`` (no parameters)."""

    def __init__(self, slope: float):
        self.slope = slope

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.leaky_relu(x, self.slope)


class _Filter(nnx.Module):
    """The ``filter`` buffer ``(1, 1, K)`` of an ``UpSample1d`` / ``DownSample1d``."""

    def __init__(self, f: np.ndarray):
        self.filter = Buffer(jnp.asarray(f.reshape(1, 1, -1)))

    def taps(self) -> jax.Array:
        return self.filter[...].reshape(-1).astype(_F32)


class AntiAliasAct1d(nnx.Module):
    """``AntiAliasAct1d``: Kaiser up-sampling by ``ratio``, the activation, Kaiser down-sampling."""

    def __init__(self, act: nnx.Module, ratio: int, kernel_size: int):
        self.ratio, self.k = ratio, kernel_size
        f = kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size)
        self.upsample = _Filter(f)
        self.act = act
        self.downsample = _Filter(f)

    def __call__(self, x: jax.Array) -> jax.Array:
        r, k = self.ratio, self.k
        pad = k // r - 1
        x = _upsample(x, self.upsample.taps(), r, pad, pad * r + (k - r) // 2, pad * r + (k - r + 1) // 2)
        x = self.act(x)
        x = jnp.pad(x, ((0, 0), (k // 2 + k % 2 - 1, k // 2), (0, 0)), mode="edge")
        return _fir(x, self.downsample.taps(), stride=r)


def _activation(cfg: LTX2VocoderConfig, channels: int, *, final: bool = False) -> nnx.Module:
    """A resnet activation (``final``: the vocoder's ``act_out``), as ``ResBlock`` /
    ``LTX2Vocoder`` build them."""
    if cfg.act_fn == "leaky_relu":
        return LeakyReLU(0.01 if final else cfg.leaky_relu_negative_slope)
    act = SnakeBeta(channels, use_beta=final or cfg.act_fn == "snakebeta")
    if final or cfg.antialias:
        return AntiAliasAct1d(act, cfg.antialias_ratio, cfg.antialias_kernel_size)
    return act


def _same(kernel: int, dilation: int) -> tuple[int, int]:
    """torch ``padding='same'`` of a stride-1 convolution: ``(total // 2, total - total // 2)``,
    ``total = dilation * (kernel - 1)``."""
    total = dilation * (kernel - 1)
    return total // 2, total - total // 2


class ResBlock(nnx.Module):
    """``ResBlock``: per dilation, ``x += conv2(act2(conv1(act1(x))))`` (``conv1`` dilated,
    'same' padding: torch's, whose odd total ``d (k - 1)`` of an even kernel pads one more on the right)."""

    def __init__(
        self,
        cfg: LTX2VocoderConfig,
        channels: int,
        kernel: int,
        dilations: tuple[int, ...],
        *,
        dtype,
        param_dtype,
        rngs: nnx.Rngs,
    ):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.convs1 = nnx.List(
            [Conv(channels, channels, (kernel,), dilation=(d,), padding=(_same(kernel, d),), **kw) for d in dilations]
        )
        self.acts1 = nnx.List([_activation(cfg, channels) for _ in dilations])
        self.convs2 = nnx.List(
            [Conv(channels, channels, (kernel,), padding=(_same(kernel, 1),), **kw) for _ in dilations]
        )
        self.acts2 = nnx.List([_activation(cfg, channels) for _ in dilations])

    def __call__(self, x: jax.Array) -> jax.Array:
        for act1, conv1, act2, conv2 in zip(self.acts1, self.convs1, self.acts2, self.convs2):
            x = x + conv2(act2(conv1(act1(x))))
        return x


def _vocode(model: nnx.Module, mel) -> jax.Array:
    """A vocoder of this module (its ``__call__``) run jitted on ``mel``, checked as its input
    (:func:`_mel_features`) and cast to its compute dtype."""
    x = _mel_features(mel, model.config.in_channels, "mel").astype(model.dtype)
    graphdef, state = nnx.split(model)
    return _run_fn(graphdef, state, x)


def _mel_features(mel, features: int, name: str) -> jax.Array:
    """Mel ``(B, C, frames, M)`` with ``C * M == features`` -> channels last ``(B, frames, C M)``.

    Raises:
        InputError: another shape, or not floating point.
    """
    mel = jnp.asarray(mel)
    if (
        mel.ndim != 4
        or mel.shape[1] * mel.shape[3] != features
        or min(mel.shape) < 1
        or not jnp.issubdtype(mel.dtype, jnp.floating)
    ):
        raise InputError(
            f"{name} must be a floating point mel spectrogram (batch, channels, frames, mel_bins) with "
            f"channels * mel_bins = {features}; got shape {tuple(mel.shape)} dtype {mel.dtype}"
        )
    b, c, t, m = mel.shape
    return jnp.transpose(mel, (0, 2, 1, 3)).reshape(b, t, c * m)


# ---------------------------------------------------------------------------------------------
# The vocoders


class LTX2Vocoder(nnx.Module):
    """``LTX2Vocoder``: mel -> waveform (see the module docstring for layouts).

    Args:
        config: its :class:`~vidax.models.ltx2.config.LTX2VocoderConfig`.
        dtype: compute dtype (float32 or bfloat16); param_dtype: storage dtype when building.
        rngs: initialiser keys (values are replaced when loading a checkpoint).

    Attributes:
        sample_rate: Hz of the waveform (``output_sampling_rate``).
        hop: waveform samples per mel frame (``prod(upsample_factors)``).
    """

    def __init__(self, config: LTX2VocoderConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        cfg = config
        self.config, self.dtype = cfg, dtype
        self.conv_in = Conv(cfg.in_channels, cfg.hidden_channels, (7,), padding=((3, 3),), **kw)
        ups, resnets, width = [], [], cfg.hidden_channels
        for stride, k in zip(cfg.upsample_factors, cfg.upsample_kernel_sizes):
            ups.append(ConvTranspose1d(width, width // 2, k, stride, (k - stride) // 2, **kw))
            width //= 2
            resnets += [
                ResBlock(cfg, width, rk, d, **kw) for rk, d in zip(cfg.resnet_kernel_sizes, cfg.resnet_dilations)
            ]
        self.upsamplers = nnx.List(ups)
        self.resnets = nnx.List(resnets)
        self.act_out = _activation(cfg, width, final=True)
        self.conv_out = Conv(width, cfg.out_channels, (7,), padding=((3, 3),), use_bias=cfg.final_bias, **kw)

    @property
    def sample_rate(self) -> int:
        return self.config.output_sampling_rate

    @property
    def hop(self) -> int:
        return math.prod(self.config.upsample_factors)

    def forward(self, x: jax.Array) -> jax.Array:
        """Channels last: ``(B, frames, in_channels)`` -> ``(B, frames * hop, out_channels)``."""
        cfg = self.config
        x = self.conv_in(x)
        n = len(cfg.resnet_kernel_sizes)
        for i, up in enumerate(self.upsamplers):
            if cfg.act_fn == "leaky_relu":
                x = jax.nn.leaky_relu(x, cfg.leaky_relu_negative_slope)
            x = up(x)
            outs = [self.resnets[j](x) for j in range(i * n, (i + 1) * n)]
            x = jnp.mean(jnp.stack(outs), axis=0)
        x = self.conv_out(self.act_out(x))
        if cfg.final_act_fn == "tanh":
            x = jnp.tanh(x)
        elif cfg.final_act_fn == "clamp":
            x = jnp.clip(x, -1, 1)
        return x

    def __call__(self, mel) -> jax.Array:
        """Mel ``(B, C, frames, M)`` (``C * M == in_channels``; numpy or jax) -> waveform float32
        ``(B, out_channels, frames * hop)`` at :attr:`sample_rate` Hz.

        Raises:
            InputError: ``mel`` of another shape or not floating point.
        """
        return _vocode(self, mel)


class CausalSTFT(nnx.Module):
    """``CausalSTFT``'s buffers: ``forward_basis`` / ``inverse_basis`` ``(2 F, 1, filter_length)``
    (``F = filter_length / 2 + 1``; Hann-windowed DFT bases from the checkpoint)."""

    def __init__(self, filter_length: int):
        n = filter_length // 2 + 1
        self.forward_basis = Buffer(jnp.zeros((2 * n, 1, filter_length), _F32))
        self.inverse_basis = Buffer(jnp.zeros((2 * n, 1, filter_length), _F32))


class MelSTFT(nnx.Module):
    """``MelSTFT``: causal STFT magnitude, the ``mel_basis (M, F)`` filterbank, ``log(max(., 1e-5))``."""

    def __init__(self, cfg: LTX2VocoderWithBWEConfig):
        self.hop, self.left = cfg.hop_length, max(0, cfg.window_length - cfg.hop_length)
        self.stft_fn = CausalSTFT(cfg.filter_length)
        self.mel_basis = Buffer(jnp.zeros((cfg.num_mel_channels, cfg.filter_length // 2 + 1), _F32))

    def __call__(self, wave: jax.Array) -> jax.Array:
        """``(N, samples)`` -> log-mel ``(N, samples / hop, M)`` float32."""
        x = jnp.pad(wave.astype(_F32), ((0, 0), (self.left, 0)))[..., None]
        basis = jnp.transpose(self.stft_fn.forward_basis[...].astype(_F32), (2, 1, 0))  # (L, 1, 2F)
        spec = jax.lax.conv_general_dilated(x, basis, (self.hop,), "VALID", dimension_numbers=_DN)
        n = spec.shape[-1] // 2
        magnitude = jnp.sqrt(jnp.square(spec[..., :n]) + jnp.square(spec[..., n:]))
        mel = jnp.einsum("ntf,mf->ntm", magnitude, self.mel_basis[...].astype(_F32))
        return jnp.log(jnp.maximum(mel, 1e-5))


class LTX2VocoderWithBWE(nnx.Module):
    """``LTX2VocoderWithBWE`` (LTX-2.3): mel -> waveform at ``output_sampling_rate``.

    Attributes:
        vocoder, bwe_generator: the two :class:`LTX2Vocoder` s; mel_stft: :class:`MelSTFT`.
        sample_rate: Hz of the waveform (``output_sampling_rate``).
    """

    def __init__(self, config: LTX2VocoderWithBWEConfig, *, dtype=_F32, param_dtype=_F32, rngs: nnx.Rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        cfg = config
        self.config, self.dtype = cfg, dtype
        self.vocoder = LTX2Vocoder(cfg.generator("", cfg.input_sampling_rate), **kw)
        self.bwe_generator = LTX2Vocoder(cfg.generator("bwe_", cfg.output_sampling_rate), **kw)
        self.mel_stft = MelSTFT(cfg)
        self.ratio = cfg.output_sampling_rate // cfg.input_sampling_rate
        f, self.pad, self.pad_left, self.pad_right = hann_resampler(self.ratio)
        self.resampler_filter = tuple(f.tolist())  # a constant (the reference's non-persistent buffer)

    @property
    def sample_rate(self) -> int:
        return self.config.output_sampling_rate

    def forward(self, x: jax.Array) -> jax.Array:
        """Channels last: mel features ``(B, frames, in_channels)`` -> ``(B, samples, out_channels)``."""
        cfg = self.config
        wave = self.vocoder.forward(x)  # (B, N, C)
        b, n, c = wave.shape
        hop = cfg.hop_length
        if n % hop:
            wave = jnp.pad(wave, ((0, 0), (0, hop - n % hop), (0, 0)))
        mel = self.mel_stft(jnp.transpose(wave, (0, 2, 1)).reshape(b * c, -1))  # (B C, frames, M)
        frames, m = mel.shape[1], mel.shape[2]
        mel = jnp.transpose(mel.reshape(b, c, frames, m), (0, 2, 1, 3)).reshape(b, frames, c * m)
        residual = self.bwe_generator.forward(mel.astype(self.dtype))
        skip = _upsample(
            wave.astype(_F32),
            jnp.asarray(self.resampler_filter, _F32),
            self.ratio,
            self.pad,
            self.pad_left,
            self.pad_right,
        )
        out = jnp.clip(residual.astype(_F32) + skip, -1, 1)
        return out[:, : n * cfg.output_sampling_rate // cfg.input_sampling_rate]

    def __call__(self, mel) -> jax.Array:
        """Mel ``(B, C, frames, M)`` (``C * M == in_channels``) -> waveform float32
        ``(B, out_channels, samples)`` at :attr:`sample_rate` Hz, ``samples = frames *
        prod(upsample_factors) * output_sampling_rate / input_sampling_rate``.

        Raises:
            InputError: ``mel`` of another shape or not floating point.
        """
        return _vocode(self, mel)


@functools.partial(jax.jit, static_argnums=(0,))
def _run_fn(graphdef, state, x):
    """A vocoder's :meth:`forward`, to ``(B, channels, samples)`` float32."""
    return jnp.transpose(nnx.merge(graphdef, state).forward(x).astype(_F32), (0, 2, 1))
