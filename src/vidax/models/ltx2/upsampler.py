"""LTX-2's latent upsampler, following diffusers 0.42.1's ``LTX2LatentUpsamplerModel``
(``pipelines/ltx2/latent_upsampler.py``), channels last.

It is LTX-Video's upsampler (:class:`vidax.models.ltx.upsampler.LTXLatentUpsamplerModel`: the
same residual blocks, norms, stages and layouts) except for the up-sampler of a spatial-only
config with ``use_rational_resampler`` (LTX-2.0's released upsampler): the reference's
``SpatialRationalResampler``, per frame ``(N, H, W, C)``:

* ``conv``: a 3x3 conv to ``num**2 * mid_channels`` channels, then depth-to-space by ``num``;
* ``blur_down``: a depthwise 5x5 binomial blur (``[1, 4, 6, 4, 1]`` outer itself, / 256; the
  checkpoint's ``blur_down.kernel`` buffer) with stride ``den``, zero padding 2; with ``den = 1``
  (scales 2 and 4) the reference skips it and so does vidax.

so ``H' = ceil(num H / den)``. Keys: ``upsampler.conv.*``, ``upsampler.blur_down.kernel``
(re-laid out ``(1, 1, 5, 5) -> (5, 5, 1, 1)`` as every conv kernel). LTX-2.3's upsampler
(``use_rational_resampler`` false) and temporal ones use LTX-Video's ``upsampler.0.*``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.models.ltx.upsampler import LTXLatentUpsamplerModel, padded_conv
from vidax.models.ltx2.config import LTX2LatentUpsamplerConfig
from vidax.nn.buffer import Buffer
from vidax.nn.layers import pixel_shuffle

_F32 = jnp.float32
_BLUR = 5  # BlurDownsample's kernel_size as SpatialRationalResampler builds it


class BlurDownsample(nnx.Module):
    """The reference's ``BlurDownsample(dims=2, stride)``: a depthwise binomial blur with stride
    ``stride`` on ``(N, H, W, C)``, zero padded by 2; the identity with stride 1.

    ``kernel``: ``(5, 5, 1, 1)`` float32 :class:`~vidax.nn.buffer.Buffer` (the checkpoint's
    ``blur_down.kernel``; built here with the reference's values).
    """

    def __init__(self, stride: int):
        self.stride = stride
        k = jnp.asarray([math.comb(_BLUR - 1, i) for i in range(_BLUR)], _F32)
        k2d = k[:, None] * k[None, :]
        self.kernel = Buffer((k2d / jnp.sum(k2d))[:, :, None, None])

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.stride == 1:
            return x
        c = x.shape[-1]
        kernel = jnp.broadcast_to(self.kernel[...].astype(x.dtype), (_BLUR, _BLUR, 1, c))
        pad = _BLUR // 2
        return jax.lax.conv_general_dilated(
            x,
            kernel,
            (self.stride, self.stride),
            ((pad, pad), (pad, pad)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=c,
        )


class SpatialRationalResampler(nnx.Module):
    """The reference's ``SpatialRationalResampler``: ``(N, H, W, mid)`` -> ``(N, ceil(num H / den),
    ceil(num W / den), mid)`` (conv, depth-to-space by ``num``, blur with stride ``den``)."""

    def __init__(self, mid_channels: int, num: int, den: int, **kw):
        self.num = num
        self.conv = padded_conv(mid_channels, num * num * mid_channels, 2, **kw)
        self.blur_down = BlurDownsample(den)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.blur_down(pixel_shuffle(self.conv(x), (self.num, self.num)))


class LTX2LatentUpsamplerModel(LTXLatentUpsamplerModel):
    """Upsamples LTX-2 VAE latents (diffusers ``LTX2LatentUpsamplerModel``): LTX-Video's model
    (same arguments, layouts and errors) for an
    :class:`~vidax.models.ltx2.config.LTX2LatentUpsamplerConfig`, with the rational resampler
    where the config builds it. Output sizes: :meth:`output_shape`.
    """

    def _make_upsampler(self, config: LTX2LatentUpsamplerConfig, **kw) -> nnx.Module:
        if config.rational is None:
            return super()._make_upsampler(config, **kw)
        self._factors = None
        return SpatialRationalResampler(config.mid_channels, *config.rational, **kw)

    def _upsample(self, x: jax.Array) -> jax.Array:
        if self.config.rational is None:
            return super()._upsample(x)
        return self.upsampler(x)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``(B, T, H, W, C)`` -> ``(B, T', H', W', C)``: LTX-Video's, or with the rational resampler
        ``H' = ceil(num H / den)``, ``W' = ceil(num W / den)``."""
        if self.config.rational is None:
            return super().output_shape(shape)
        num, den = self.config.rational
        b, t, h, w, c = shape
        return (b, t, -(-num * h // den), -(-num * w // den), c)
