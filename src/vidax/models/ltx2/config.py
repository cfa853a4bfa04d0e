"""Configuration of the LTX-2 family's autoencoders and vocoders (Lightricks LTX-2 / LTX-2.3), built
from each component's own ``config.json``, with diffusers 0.42.1's ``__init__`` defaults:

* :class:`LTX2AudioVAEConfig`: ``AutoencoderKLLTX2Audio`` (``audio_vae/config.json``);
* :class:`LTX2VocoderConfig`: ``LTX2Vocoder`` (LTX-2's ``vocoder/config.json``);
* :class:`LTX2VocoderWithBWEConfig`: ``LTX2VocoderWithBWE`` (LTX-2.3's ``vocoder/config.json``);
* :class:`LTX2VideoVAEConfig`: ``AutoencoderKLLTX2Video`` (``vae/config.json``);
* :class:`LTX2LatentUpsamplerConfig`: ``LTX2LatentUpsamplerModel`` (``latent_upsampler/config.json``).

Settings vidax does not implement are refused with a :class:`~vidax.errors.ConfigError` naming
the key, its value and the file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.config import ConfigBase, is_positive_int
from vidax.errors import ConfigError
from vidax.models.ltx.config import LTX_DOWNSAMPLE_STRIDES, LTXLatentUpsamplerConfig, LTXVAEConfig

# ---------------------------------------------------------------------------------------------
# Audio VAE

#: ``causality_axis`` values of the reference (``AutoencoderKLLTX2Audio.__init__``).
AUDIO_CAUSALITY_AXES = ("none", "width", "height", "width-compatibility")

#: The reference's fixed latent down-sampling factor of time and mel bins
#: (``autoencoder_kl_ltx2_audio.LATENT_DOWNSAMPLE_FACTOR``).
AUDIO_LATENT_DOWNSAMPLE_FACTOR = 4


@dataclasses.dataclass(frozen=True)
class LTX2AudioVAEConfig(ConfigBase):
    """Settings of ``diffusers.AutoencoderKLLTX2Audio`` (names and defaults as its ``__init__``).

    The mel spectrogram is ``(B, in_channels / output_channels, frames, mel_bins)``; the latents
    ``(B, latent_channels, L, mel_bins / 4)`` with ``frames = 4 L - 3`` (causal) decoded frames.

    Attributes:
        base_channels: width of the first level; also the length of the latent statistics
            ``latents_mean`` / ``latents_std`` (one per packed latent feature
            ``latent_channels * mel_bins / 4``, as the pipeline uses them).
        output_channels, in_channels: mel channels (stereo: 2).
        ch_mult: width multiplier per level (``len(ch_mult) - 1`` 2x resamplings).
        num_res_blocks: resnets per encoder level (``+ 1`` per decoder level).
        latent_channels: ``C_z``.
        norm_type: ``"pixel"`` (per-location RMS over channels) or ``"group"`` (32 groups; only
            with ``causality_axis="none"``, as the reference).
        causality_axis: which conv axis is causal (``"height"``: time).
        sample_rate, mel_hop_length: of the mel spectrogram (16000 Hz, 160).
        mel_bins: mel bins of the decoded spectrogram (None: the latent's).
        double_z: the encoder predicts mean and log-variance.
        attn_resolutions: a level whose nominal size (``resolution`` halved per encoder
            down-sampling) is listed gets an attention block after each resnet (the reference's
            ``LTX2AudioAttnBlock``: over all time x mel positions, not causal).
        mid_block_add_attention: the mid blocks' attention between their two resnets.
        resolution: the nominal size ``attn_resolutions`` counts from.
        dropout, is_causal: accepted, no effect on inference (as the reference).
    """

    base_channels: int = 128
    output_channels: int = 2
    ch_mult: tuple[int, ...] = (1, 2, 4)
    num_res_blocks: int = 2
    attn_resolutions: tuple[int, ...] | None = None
    in_channels: int = 2
    resolution: int = 256
    latent_channels: int = 8
    norm_type: str = "pixel"
    causality_axis: str = "height"
    dropout: float = 0.0
    mid_block_add_attention: bool = False
    sample_rate: int = 16000
    mel_hop_length: int = 160
    is_causal: bool = True
    mel_bins: int | None = 64
    double_z: bool = True

    @property
    def latent_downsample(self) -> int:
        """Time and mel-bin compression of the latents (the reference's fixed 4)."""
        return AUDIO_LATENT_DOWNSAMPLE_FACTOR

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "base_channels",
                "output_channels",
                "num_res_blocks",
                "in_channels",
                "latent_channels",
                "sample_rate",
                "mel_hop_length",
            ),
            ("mel_bins",),
        )
        if not isinstance(self.ch_mult, tuple) or not self.ch_mult or not all(map(is_positive_int, self.ch_mult)):
            self.invalid(source, "ch_mult", self.ch_mult, "expected a non-empty list of positive ints")
        if self.causality_axis not in AUDIO_CAUSALITY_AXES:
            self.invalid(source, "causality_axis", self.causality_axis, f"expected one of {AUDIO_CAUSALITY_AXES}")
        if self.norm_type not in ("pixel", "group"):
            self.invalid(source, "norm_type", self.norm_type, "expected 'pixel' or 'group'")
        if self.norm_type == "group":
            if self.causality_axis != "none":
                self.invalid(
                    source,
                    "norm_type",
                    self.norm_type,
                    "the reference refuses GroupNorm in causal resnets; use causality_axis='none' with it",
                )
            if any((self.base_channels * m) % 32 for m in self.ch_mult):
                self.invalid(
                    source,
                    "base_channels",
                    self.base_channels,
                    "GroupNorm(32) needs every level's width to be a multiple of 32",
                )
        if self.attn_resolutions is not None and (
            not isinstance(self.attn_resolutions, tuple) or not all(map(is_positive_int, self.attn_resolutions))
        ):
            self.invalid(source, "attn_resolutions", self.attn_resolutions, "expected null or a list of positive ints")
        if not isinstance(self.mid_block_add_attention, bool):
            self.invalid(source, "mid_block_add_attention", self.mid_block_add_attention, "expected true or false")
        self.check_positive(source, ("resolution",))
        if not isinstance(self.double_z, bool):
            self.invalid(source, "double_z", self.double_z, "expected true or false")


# ---------------------------------------------------------------------------------------------
# Vocoders

#: ``act_fn`` of the vocoder resnets (``LTX2Vocoder.__init__``).
VOCODER_ACTIVATIONS = ("snakebeta", "snake", "leaky_relu")
#: ``final_act_fn``: tanh, clamp to [-1, 1], or none.
VOCODER_FINAL_ACTIVATIONS = ("tanh", "clamp", None)


def _check_generator(cfg: Any, source: str, prefix: str) -> None:
    """The checks of one ``LTX2Vocoder`` generator's settings (``prefix`` ``""`` or ``"bwe_"``)."""

    def get(name):
        return getattr(cfg, prefix + name)

    cfg.check_positive(
        source,
        tuple(
            prefix + n
            for n in ("in_channels", "hidden_channels", "out_channels", "antialias_ratio", "antialias_kernel_size")
        ),
    )
    for name in ("upsample_kernel_sizes", "upsample_factors", "resnet_kernel_sizes"):
        v = get(name)
        if not isinstance(v, tuple) or not v or not all(map(is_positive_int, v)):
            cfg.invalid(source, prefix + name, v, "expected a non-empty list of positive ints")
    if len(get("upsample_kernel_sizes")) != len(get("upsample_factors")):
        cfg.invalid(
            source,
            prefix + "upsample_kernel_sizes",
            get("upsample_kernel_sizes"),
            f"expected one per {prefix}upsample_factors entry",
        )
    dil = get("resnet_dilations")
    if (
        not isinstance(dil, tuple)
        or len(dil) != len(get("resnet_kernel_sizes"))
        or not all(isinstance(d, tuple) and d and all(map(is_positive_int, d)) for d in dil)
    ):
        cfg.invalid(
            source,
            prefix + "resnet_dilations",
            dil,
            f"expected one non-empty list of positive ints per {prefix}resnet_kernel_sizes entry",
        )
    if get("hidden_channels") < 2 ** len(get("upsample_factors")):  # the reference's last convolutions get 0 channels
        cfg.invalid(
            source,
            prefix + "hidden_channels",
            get("hidden_channels"),
            f"expected at least 2 ** {len(get('upsample_factors'))} (each upsampler halves it, rounding down)",
        )
    if get("act_fn") not in VOCODER_ACTIVATIONS:
        cfg.invalid(source, prefix + "act_fn", get("act_fn"), f"expected one of {VOCODER_ACTIVATIONS}")
    if get("act_fn") == "leaky_relu" and get("antialias"):
        raise ConfigError(
            f"{source}: {prefix}antialias=true with {prefix}act_fn='leaky_relu' is not implemented "
            "by vidax (the reference nests its anti-aliasing there); only false is supported."
        )
    if get("final_act_fn") not in VOCODER_FINAL_ACTIVATIONS:
        cfg.invalid(
            source, prefix + "final_act_fn", get("final_act_fn"), f"expected one of {VOCODER_FINAL_ACTIVATIONS}"
        )


@dataclasses.dataclass(frozen=True)
class LTX2VocoderConfig(ConfigBase):
    """Settings of ``diffusers.LTX2Vocoder`` (a HiFi-GAN / BigVGAN generator; names and defaults as
    its ``__init__``): mel ``(B, C, frames, M)`` with ``C * M == in_channels`` -> waveform
    ``(B, out_channels, frames * prod(upsample_factors))`` at ``output_sampling_rate`` Hz.

    Attributes:
        in_channels, hidden_channels, out_channels: mel features, first width, audio channels.
        upsample_kernel_sizes, upsample_factors: one transposed conv per stage (each halves the width).
        resnet_kernel_sizes, resnet_dilations: the multi-receptive-field resnets of each stage.
        act_fn: ``"leaky_relu"`` (LTX-2), ``"snakebeta"`` (LTX-2.3) or ``"snake"``.
        leaky_relu_negative_slope: of the leaky ReLUs (not of the final one, 0.01, as the reference).
        antialias, antialias_ratio, antialias_kernel_size: anti-aliased activations (up-sample,
            activation, down-sample with Kaiser-sinc filters); always on for the snake final one.
        final_act_fn: ``"tanh"``, ``"clamp"`` or None; final_bias: the output conv's bias.
        output_sampling_rate: Hz of the waveform (the ``sample_rate`` vidax exposes).
    """

    in_channels: int = 128
    hidden_channels: int = 1024
    out_channels: int = 2
    upsample_kernel_sizes: tuple[int, ...] = (16, 15, 8, 4, 4)
    upsample_factors: tuple[int, ...] = (6, 5, 2, 2, 2)
    resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    act_fn: str = "leaky_relu"
    leaky_relu_negative_slope: float = 0.1
    antialias: bool = False
    antialias_ratio: int = 2
    antialias_kernel_size: int = 12
    final_act_fn: str | None = "tanh"
    final_bias: bool = True
    output_sampling_rate: int = 24000

    def validate(self, source: str) -> None:
        _check_generator(self, source, "")
        self.check_positive(source, ("output_sampling_rate",))


#: The fields of one generator of :class:`LTX2VocoderWithBWEConfig` (``bwe_`` prefixed for the
#: bandwidth extender), as :class:`LTX2VocoderConfig` names them.
GENERATOR_FIELDS = tuple(f.name for f in dataclasses.fields(LTX2VocoderConfig) if f.name != "output_sampling_rate")


@dataclasses.dataclass(frozen=True)
class LTX2VocoderWithBWEConfig(ConfigBase):
    """Settings of ``diffusers.LTX2VocoderWithBWE`` (LTX-2.3; names and defaults as its
    ``__init__``): a vocoder at ``input_sampling_rate``, a causal log-mel STFT of its waveform
    (``filter_length``, ``hop_length``, ``window_length``, ``num_mel_channels``; the bases are
    checkpoint tensors), a bandwidth-extension generator (the ``bwe_`` settings) whose output is
    added to the Hann-resampled waveform, at ``output_sampling_rate``.
    """

    in_channels: int = 128
    hidden_channels: int = 1536
    out_channels: int = 2
    upsample_kernel_sizes: tuple[int, ...] = (11, 4, 4, 4, 4, 4)
    upsample_factors: tuple[int, ...] = (5, 2, 2, 2, 2, 2)
    resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    act_fn: str = "snakebeta"
    leaky_relu_negative_slope: float = 0.1
    antialias: bool = True
    antialias_ratio: int = 2
    antialias_kernel_size: int = 12
    final_act_fn: str | None = None
    final_bias: bool = False
    bwe_in_channels: int = 128
    bwe_hidden_channels: int = 512
    bwe_out_channels: int = 2
    bwe_upsample_kernel_sizes: tuple[int, ...] = (12, 11, 4, 4, 4)
    bwe_upsample_factors: tuple[int, ...] = (6, 5, 2, 2, 2)
    bwe_resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    bwe_resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    bwe_act_fn: str = "snakebeta"
    bwe_leaky_relu_negative_slope: float = 0.1
    bwe_antialias: bool = True
    bwe_antialias_ratio: int = 2
    bwe_antialias_kernel_size: int = 12
    bwe_final_act_fn: str | None = None
    bwe_final_bias: bool = False
    filter_length: int = 512
    hop_length: int = 80
    window_length: int = 512
    num_mel_channels: int = 64
    input_sampling_rate: int = 16000
    output_sampling_rate: int = 48000

    def generator(self, prefix: str, sampling_rate: int) -> LTX2VocoderConfig:
        """The :class:`LTX2VocoderConfig` of the vocoder (``prefix=""``) or the bandwidth
        extender (``"bwe_"``), as the reference builds its two ``LTX2Vocoder`` s."""
        return LTX2VocoderConfig(
            **{f: getattr(self, prefix + f) for f in GENERATOR_FIELDS}, output_sampling_rate=sampling_rate
        )

    def validate(self, source: str) -> None:
        _check_generator(self, source, "")
        _check_generator(self, source, "bwe_")
        self.check_positive(
            source,
            (
                "filter_length",
                "hop_length",
                "window_length",
                "num_mel_channels",
                "input_sampling_rate",
                "output_sampling_rate",
            ),
        )
        if self.window_length != self.filter_length or self.window_length < self.hop_length:
            self.invalid(
                source,
                "window_length",
                self.window_length,
                f"expected filter_length={self.filter_length} (and at least hop_length={self.hop_length}): "
                "otherwise the reference's bandwidth-extension residual and resampled waveform differ in "
                "length",
            )
        if self.output_sampling_rate % self.input_sampling_rate:
            self.invalid(
                source,
                "output_sampling_rate",
                self.output_sampling_rate,
                f"expected a multiple of input_sampling_rate={self.input_sampling_rate}",
            )
        if self.bwe_in_channels != self.out_channels * self.num_mel_channels:
            self.invalid(
                source,
                "bwe_in_channels",
                self.bwe_in_channels,
                "expected out_channels * "
                f"num_mel_channels = {self.out_channels * self.num_mel_channels} (the BWE reads the "
                "vocoder output's mel)",
            )
        if any((k - s) % 2 for k, s in zip(self.bwe_upsample_kernel_sizes, self.bwe_upsample_factors)):
            self.invalid(
                source,
                "bwe_upsample_kernel_sizes",
                self.bwe_upsample_kernel_sizes,
                "expected kernel - factor even at every stage (otherwise the reference's bandwidth-extension "
                "residual is longer than the resampled waveform)",
            )
        ratio = self.output_sampling_rate // self.input_sampling_rate
        if math.prod(self.bwe_upsample_factors) != self.hop_length * ratio:
            self.invalid(
                source,
                "bwe_upsample_factors",
                self.bwe_upsample_factors,
                f"expected a product of hop_length * {ratio} = {self.hop_length * ratio}",
            )


# ---------------------------------------------------------------------------------------------
# Video VAE

#: ``upsample_type`` -> the up-sampler's (t, h, w) stride (``LTX2VideoUpBlock3d``).
LTX2_UPSAMPLE_STRIDES = {"spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
#: torch ``padding_mode`` of the convs -> :func:`jax.numpy.pad` mode.
LTX2_PADDING_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@dataclasses.dataclass(frozen=True)
class LTX2VideoVAEConfig(LTXVAEConfig):
    """Settings of ``diffusers.AutoencoderKLLTX2Video`` (names and defaults as its ``__init__``).

    The same settings as :class:`~vidax.models.ltx.config.LTXVAEConfig` (whose blocks the LTX-2
    VAE reuses) plus: ``upsample_type`` (per decoder block, in the decoder's order: the
    reference does not reverse it), ``encoder_spatial_padding_mode`` /
    ``decoder_spatial_padding_mode`` (the convs' spatial padding: ``"zeros"``, ``"reflect"``,
    ...). Every encoder block is an ``LTX2VideoDownBlock3D`` (resnets, then a down-sampler from
    ``downsample_type``); the encoder's input conv is ``latent_channels`` wide; the resnets'
    width-changing shortcut is a plain 1x1x1 conv.
    """

    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (256, 512, 1024, 2048)
    down_block_types: tuple[str, ...] = ("LTX2VideoDownBlock3D",) * 4
    decoder_block_out_channels: tuple[int, ...] = (256, 512, 1024)
    layers_per_block: tuple[int, ...] = (4, 6, 6, 2, 2)
    decoder_layers_per_block: tuple[int, ...] = (5, 5, 5, 5)
    spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, True)
    decoder_spatio_temporal_scaling: tuple[bool, ...] = (True, True, True)
    decoder_inject_noise: tuple[bool, ...] = (False, False, False, False)
    downsample_type: tuple[str, ...] = ("spatial", "temporal", "spatiotemporal", "spatiotemporal")
    upsample_type: tuple[str, ...] = ("spatiotemporal", "spatiotemporal", "spatiotemporal")
    upsample_residual: tuple[bool, ...] = (True, True, True)
    upsample_factor: tuple[int, ...] = (2, 2, 2)
    decoder_causal: bool = True
    encoder_spatial_padding_mode: str = "zeros"
    decoder_spatial_padding_mode: str = "reflect"

    DOWN_BLOCK_TYPES: ClassVar[tuple[str, ...]] = ("LTX2VideoDownBlock3D",)

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        """As :meth:`ConfigBase.from_config_dict`; a boolean ``spatio_temporal_scaling`` /
        ``decoder_spatio_temporal_scaling`` / ``decoder_inject_noise`` / ``upsample_residual``
        is repeated per block as the reference does."""
        config = dict(config)
        enc = len(config.get("layers_per_block", cls.layers_per_block))
        dec = len(config.get("decoder_layers_per_block", cls.decoder_layers_per_block))
        for key, n in (
            ("spatio_temporal_scaling", enc - 1),
            ("decoder_spatio_temporal_scaling", dec - 1),
            ("decoder_inject_noise", dec),
            ("upsample_residual", dec - 1),
        ):
            if isinstance(config.get(key), bool):
                config[key] = [config[key]] * n
        return super().from_config_dict(config, source=source)

    @property
    def is_ltx_095(self) -> bool:
        return False

    @property
    def encoder_padding(self) -> str:
        return LTX2_PADDING_MODES[self.encoder_spatial_padding_mode]

    @property
    def decoder_padding(self) -> str:
        return LTX2_PADDING_MODES[self.decoder_spatial_padding_mode]

    @property
    def plain_conv_shortcut(self) -> bool:
        return True

    def encoder_blocks(self) -> list[dict[str, Any]]:
        """As ``LTX2VideoEncoder3d.__init__``: block ``i`` from the previous width
        (``latent_channels`` for the first) to ``block_out_channels[i]``."""
        out, blocks = self.latent_channels, []
        for i, cout in enumerate(self.block_out_channels):
            kind = self.downsample_type[i]
            blocks.append(
                dict(
                    type="LTXVideo095DownBlock3D",
                    cin=out,
                    cout=cout,
                    layers=self.layers_per_block[i],
                    scale=bool(self.spatio_temporal_scaling[i]),
                    stride=LTX_DOWNSAMPLE_STRIDES[kind],
                )
            )
            out = cout
        return blocks

    def decoder_blocks(self) -> list[dict[str, Any]]:
        blocks = super().decoder_blocks()
        for block, kind in zip(blocks, self.upsample_type):
            block["stride"] = LTX2_UPSAMPLE_STRIDES[kind]
        return blocks

    def validate(self, source: str) -> None:
        def bad(key: str, why: str):
            raise ConfigError(f"{source}: {key}={getattr(self, key)!r} {why}")

        n_enc, n_dec = len(self.block_out_channels), len(self.decoder_block_out_channels)
        dt = self.downsample_type
        if not isinstance(dt, tuple) or len(dt) < n_enc or any(d not in LTX_DOWNSAMPLE_STRIDES for d in dt[:n_enc]):
            bad("downsample_type", f"must give one of {sorted(LTX_DOWNSAMPLE_STRIDES)} per encoder block")
        ut = self.upsample_type
        if not isinstance(ut, tuple) or len(ut) < n_dec or any(u not in LTX2_UPSAMPLE_STRIDES for u in ut[:n_dec]):
            bad("upsample_type", f"must give one of {sorted(LTX2_UPSAMPLE_STRIDES)} per decoder block")
        for key in ("encoder_spatial_padding_mode", "decoder_spatial_padding_mode"):
            if getattr(self, key) not in LTX2_PADDING_MODES:
                bad(key, f"must be one of {sorted(LTX2_PADDING_MODES)}")
        for key, need in (("layers_per_block", n_enc + 1), ("spatio_temporal_scaling", n_enc)):
            if not isinstance(getattr(self, key), tuple) or len(getattr(self, key)) < need:
                bad(key, f"needs at least {need} entries for {n_enc} encoder blocks")
        super().validate(source)
        for block in self.encoder_blocks():
            if block["scale"] and block["stride"] is None and block["cin"] != block["cout"]:
                bad(
                    "block_out_channels",
                    f"changes the width {block['cin']} -> {block['cout']} in a 'conv' down "
                    "block, whose output the reference's next block cannot take",
                )


# ---------------------------------------------------------------------------------------------
# Latent upsampler

#: ``RATIONAL_RESAMPLER_SCALE_MAPPING`` of diffusers' ``pipelines/ltx2/latent_upsampler.py``: the
#: spatial scales the rational resampler takes -> (up-sampling numerator, blur-stride denominator).
LTX2_RATIONAL_SCALES = {0.75: (3, 4), 1.5: (3, 2), 2.0: (2, 1), 4.0: (4, 1)}


@dataclasses.dataclass(frozen=True)
class LTX2LatentUpsamplerConfig(LTXLatentUpsamplerConfig):
    """Settings of diffusers' ``LTX2LatentUpsamplerModel`` (``pipelines/ltx2/latent_upsampler.py``),
    with its ``__init__`` defaults: LTX-Video's settings
    (:class:`~vidax.models.ltx.config.LTXLatentUpsamplerConfig`, same checks) plus

    Attributes:
        use_rational_resampler: with spatial upsampling only, the upsampler is the rational
            resampler (a 3x3 conv to ``num**2 * mid_channels``, depth-to-space by ``num``, then a
            5x5 binomial blur with stride ``den``); else LTX-Video's conv + depth-to-space.
        rational_spatial_scale: the rational resampler's ``num / den``, one of
            :data:`LTX2_RATIONAL_SCALES` (0.75, 1.5, 2, 4); read only where that resampler is built.

    Refused (ConfigError), besides LTX-Video's: a ``rational_spatial_scale`` the reference's
    table lacks where the rational resampler is built (the reference raises too).
    """

    mid_channels: int = 1024
    rational_spatial_scale: float = 2.0
    use_rational_resampler: bool = True

    @property
    def rational(self) -> tuple[int, int] | None:
        """``(num, den)`` of the rational resampler, or None where the reference builds LTX-Video's
        upsampler (temporal upsampling, or ``use_rational_resampler`` false)."""
        if self.spatial_upsample and not self.temporal_upsample and self.use_rational_resampler:
            return LTX2_RATIONAL_SCALES[self.rational_spatial_scale]
        return None

    @property
    def scale(self) -> tuple[int, float]:
        """``(temporal, spatial)`` factor; the spatial one is ``num / den`` with the rational
        resampler (H' = ceil(num H / den), :meth:`LTX2LatentUpsamplerModel.output_shape`)."""
        st, ss = super().scale
        return (st, self.rational_spatial_scale) if self.rational else (st, ss)

    def validate(self, source: str) -> None:
        super().validate(source)
        if not isinstance(self.use_rational_resampler, bool):
            self.invalid(source, "use_rational_resampler", self.use_rational_resampler, "it must be true or false")
        scale = self.rational_spatial_scale
        if (
            self.spatial_upsample
            and not self.temporal_upsample
            and self.use_rational_resampler
            and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale not in LTX2_RATIONAL_SCALES)
        ):
            self.invalid(
                source,
                "rational_spatial_scale",
                scale,
                f"the rational resampler takes one of {sorted(LTX2_RATIONAL_SCALES)}",
            )


# ---------------------------------------------------------------------------------------------
# Transformer and text connectors (their own file: vidax.models.ltx2.config_transformer)

from vidax.models.ltx2.config_diffusion_decoder import LTX2DiffusionDecoderConfig  # noqa: E402,F401
from vidax.models.ltx2.config_transformer import (  # noqa: E402,F401 (re-exported: the registry reads config.py)
    LTX2_ROPE_TYPES,
    LTX2ConnectorsConfig,
    LTX2TransformerConfig,
)
