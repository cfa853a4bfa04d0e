"""Configuration of the LTX-Video 0.9.x family (Lightricks), built from each component's own
``config.json``: the denoising transformer (:class:`LTXTransformerConfig`), the VAE
(:class:`LTXVAEConfig`), the latent upsampler (:class:`LTXLatentUpsamplerConfig`); and the whole
checkpoint (:func:`read_ltx_checkpoint`, configs only)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import FFN_ACTIVATIONS, ConfigBase, TransformerConfig
from vidax.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# The transformer (``transformer/config.json``)


#: The positive sizes of the video tokens' patching and attention, named as the LTX-Video and
#: LTX-2 transformers' configs both name them (each config checks them with its own others).
LTX_VIDEO_TOKEN_SIZES = (
    "in_channels",
    "patch_size",
    "patch_size_t",
    "num_attention_heads",
    "attention_head_dim",
    "cross_attention_dim",
)


@dataclasses.dataclass(frozen=True)
class LTXTransformerConfig(TransformerConfig):
    """Settings of ``diffusers.LTXVideoTransformer3DModel`` (diffusers 0.42.1
    ``models/transformers/transformer_ltx.py``), with its ``__init__`` defaults.

    Covers the released LTX-Video transformers: 0.9.0 / 0.9.1 / 0.9.5 (2B: 28 layers, 32 heads of
    64) and 0.9.7-dev (13B: 48 layers, 32 heads of 128).

    Attributes:
        in_channels: channels of the packed latent tokens ``(B, N, C_in)`` (``proj_in``'s input).
        out_channels: channels of the prediction; ``None`` means ``in_channels`` (as the reference).
        patch_size, patch_size_t: the spatial / temporal patch the pipeline packed into each
            token; the transformer only uses them to scale the RoPE coordinates of the
            ``rope_interpolation_scale`` path.
        num_attention_heads: N.
        attention_head_dim: K; the model width is ``D = N * K``.
        cross_attention_dim: input width of the cross-attention keys / values; the reference feeds
            them the caption projection's output (width D), so it must equal D.
        num_layers: number of transformer blocks.
        activation_fn: feed-forward activation, one of :data:`vidax.config.FFN_ACTIVATIONS`.
        qk_norm: only ``"rms_norm_across_heads"`` (the reference's ``LTXAttention`` refuses others).
        norm_elementwise_affine: weights in the blocks' RMSNorms (false in every release).
        norm_eps: epsilon of the blocks' RMSNorms (the q/k RMSNorms use 1e-5, the output
            LayerNorm 1e-6, fixed in the reference).
        caption_channels: width of the text-encoder states (T5-XXL: 4096).
        attention_bias: bias in the q/k/v projections.
        attention_out_bias: bias in the attention output projections.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    in_channels: int = 128
    out_channels: int | None = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 64
    cross_attention_dim: int = 2048
    num_layers: int = 28
    activation_fn: str = "gelu-approximate"
    qk_norm: str = "rms_norm_across_heads"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 4096
    attention_bias: bool = True
    attention_out_bias: bool = True

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (*LTX_VIDEO_TOKEN_SIZES, "num_layers", "caption_channels"),
            nullable=("out_channels",),
        )
        if self.activation_fn not in FFN_ACTIVATIONS:
            self.invalid(source, "activation_fn", self.activation_fn, f"vidax implements {sorted(FFN_ACTIVATIONS)}")
        if self.qk_norm != "rms_norm_across_heads":
            self.invalid(
                source, "qk_norm", self.qk_norm, "diffusers' LTXAttention implements only 'rms_norm_across_heads'"
            )
        if not isinstance(self.norm_elementwise_affine, bool):
            self.invalid(source, "norm_elementwise_affine", self.norm_elementwise_affine, "expected true or false")
        if not isinstance(self.norm_eps, (int, float)) or isinstance(self.norm_eps, bool) or self.norm_eps <= 0:
            self.invalid(source, "norm_eps", self.norm_eps, "expected a positive float")
        for key in ("attention_bias", "attention_out_bias"):
            if not isinstance(getattr(self, key), bool):
                self.invalid(source, key, getattr(self, key), "expected true or false")
        if self.cross_attention_dim != self.inner_dim:
            self.invalid(
                source,
                "cross_attention_dim",
                self.cross_attention_dim,
                f"the reference feeds the cross-attention the caption projection's output, of width "
                f"num_attention_heads*attention_head_dim={self.inner_dim}",
            )
        if self.inner_dim % 2:
            self.invalid(
                source,
                "attention_head_dim",
                self.attention_head_dim,
                f"the rotary embedding rotates pairs of the whole width D={self.inner_dim}, which must be even",
            )


# ---------------------------------------------------------------------------------------------
# VAE

#: Down-block types of ``LTXVideoEncoder3d``.
LTX_DOWN_BLOCK_TYPES = ("LTXVideoDownBlock3D", "LTXVideo095DownBlock3D")
#: ``downsample_type`` of an ``LTXVideo095DownBlock3D`` -> the stride ``(t, h, w)`` of its
#: ``LTXVideoDownsampler3d`` (``"conv"``: a stride-2 causal conv instead, marked ``None``).
LTX_DOWNSAMPLE_STRIDES = {"conv": None, "spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}


@dataclasses.dataclass(frozen=True)
class LTXVAEConfig(ConfigBase):
    """Settings of ``diffusers.AutoencoderKLLTXVideo`` (``vae/config.json``), with its ``__init__``
    defaults (diffusers 0.42.1, ``models/autoencoders/autoencoder_kl_ltx.py``).

    Covers LTX-Video 0.9.0 (``LTXVideoDownBlock3D`` encoder, plain decoder), 0.9.1 (decoder with
    timestep conditioning, noise injection, residual up-samplers with channel reduction) and
    0.9.5 / 0.9.7 (``LTXVideo095DownBlock3D`` encoder with spatial / temporal / spatiotemporal
    ``LTXVideoDownsampler3d``). Names as in diffusers:

    Attributes:
        in_channels, out_channels: video channels (3).
        latent_channels: ``C_z`` (128).
        block_out_channels: encoder widths; ``len - 1`` blocks for the 0.9.5 encoder (the last
            ``down_block_types`` entry decides, as the reference), ``len`` blocks otherwise.
        down_block_types, downsample_type, spatio_temporal_scaling, layers_per_block: per encoder
            block (``layers_per_block[-1]``: the mid block).
        decoder_block_out_channels, decoder_layers_per_block, decoder_spatio_temporal_scaling,
            decoder_inject_noise, upsample_residual, upsample_factor: the decoder's, in encoder
            order (the decoder reverses them, as the reference; ``decoder_layers_per_block[-1]``
            and ``decoder_inject_noise[-1]`` are the mid block's).
        timestep_conditioning: the decoder takes a decode timestep (0.9.1+): per-block time
            embeddings, scale/shift tables and the learned ``timestep_scale_multiplier``.
        patch_size: spatial pixel patch folded into channels (4).
        patch_size_t: must be 1 (the reference's encoder input conv is sized for
            ``in_channels * patch_size**2`` channels, so other values do not run there).
        resnet_norm_eps: epsilon of the shortcut LayerNorms (the RMS norms use 1e-8).
        scaling_factor: the pipelines' latent scale (``_normalize_latents``).
        encoder_causal, decoder_causal: causal (first-frame replicate in front) or centred
            (first / last frame replicated) time padding.
        spatial_compression_ratio, temporal_compression_ratio: as the reference: when None,
            ``patch_size * 2 ** sum(spatio_temporal_scaling)`` /
            ``patch_size_t * 2 ** sum(spatio_temporal_scaling)``; they size the tiles.

    The latents' per-channel mean / std are not settings: they are the tensors ``latents_mean``
    / ``latents_std`` of the weights file.
    """

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    down_block_types: tuple[str, ...] = ("LTXVideoDownBlock3D",) * 4
    decoder_block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    decoder_layers_per_block: tuple[int, ...] = (4, 3, 3, 3, 4)
    spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, False)
    decoder_inject_noise: tuple[bool, ...] = (False, False, False, False, False)
    downsample_type: tuple[str, ...] = ("conv", "conv", "conv", "conv")
    upsample_residual: tuple[bool, ...] = (False, False, False, False)
    upsample_factor: tuple[int, ...] = (1, 1, 1, 1)
    timestep_conditioning: bool = False
    patch_size: int = 4
    patch_size_t: int = 1
    resnet_norm_eps: float = 1e-6
    scaling_factor: float = 1.0
    encoder_causal: bool = True
    decoder_causal: bool = False
    spatial_compression_ratio: int | None = None
    temporal_compression_ratio: int | None = None

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    #: The ``down_block_types`` this config accepts.
    DOWN_BLOCK_TYPES: ClassVar[tuple[str, ...]] = LTX_DOWN_BLOCK_TYPES

    # -- derived --------------------------------------------------------------------------------

    @property
    def encoder_padding(self) -> str:
        """:func:`jax.numpy.pad` mode of the encoder convs' spatial padding (zeros here)."""
        return "constant"

    @property
    def decoder_padding(self) -> str:
        """:func:`jax.numpy.pad` mode of the decoder convs' spatial padding (zeros here)."""
        return "constant"

    @property
    def plain_conv_shortcut(self) -> bool:
        """Whether the resnets' width-changing shortcut is a plain ``nn.Conv3d`` (LTX-2) rather
        than a causal conv wrapper (``conv_shortcut.conv``, here)."""
        return False

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W (the reference's ``spatial_compression_ratio``)."""
        if self.spatial_compression_ratio is not None:
            return int(self.spatial_compression_ratio)
        return self.patch_size * 2 ** sum(self.spatio_temporal_scaling)

    @property
    def temporal_compression(self) -> int:
        """Frames per latent frame after the first (``temporal_compression_ratio``):
        ``F = 1 + temporal_compression * (T - 1)``."""
        if self.temporal_compression_ratio is not None:
            return int(self.temporal_compression_ratio)
        return self.patch_size_t * 2 ** sum(self.spatio_temporal_scaling)

    @property
    def is_ltx_095(self) -> bool:
        """The reference's ``down_block_types[-1] == "LTXVideo095DownBlock3D"``."""
        return self.down_block_types[-1] == "LTXVideo095DownBlock3D"

    def encoder_blocks(self) -> list[dict[str, Any]]:
        """Per encoder down block, as ``LTXVideoEncoder3d.__init__`` builds them: ``type``,
        ``cin``, ``cout``, ``layers``, ``scale`` (spatio_temporal_scaling), ``stride`` (the
        ``LTXVideoDownsampler3d`` stride or None for a stride-2 causal conv)."""
        boc = self.block_out_channels
        n = len(boc) - (1 if self.is_ltx_095 else 0)
        out, blocks = boc[0], []
        for i in range(n):
            cin = out
            if self.is_ltx_095:
                out = boc[i + 1]
            else:
                out = boc[i + 1] if i + 1 < n else boc[i]
            kind = self.down_block_types[i]
            stride = LTX_DOWNSAMPLE_STRIDES[self.downsample_type[i]] if kind == "LTXVideo095DownBlock3D" else None
            blocks.append(
                dict(
                    type=kind,
                    cin=cin,
                    cout=out,
                    layers=self.layers_per_block[i],
                    scale=bool(self.spatio_temporal_scaling[i]),
                    stride=stride,
                )
            )
        return blocks

    @property
    def encoder_out_width(self) -> int:
        """Channels of the encoder's mid block (the last down block's output)."""
        blocks = self.encoder_blocks()
        return blocks[-1]["cout"] if blocks else self.block_out_channels[0]

    def decoder_blocks(self) -> list[dict[str, Any]]:
        """Per decoder up block, as ``LTXVideoDecoder3d.__init__`` builds them (reversed lists):
        ``cin``, ``cout``, ``layers``, ``scale``, ``inject_noise``, ``residual``, ``factor``,
        ``stride`` (the up-sampler's, (2, 2, 2) here)."""
        boc = tuple(reversed(self.decoder_block_out_channels))
        sts = tuple(reversed(self.decoder_spatio_temporal_scaling))
        layers = tuple(reversed(self.decoder_layers_per_block))
        noise = tuple(reversed(self.decoder_inject_noise))
        res = tuple(reversed(self.upsample_residual))
        fac = tuple(reversed(self.upsample_factor))
        out, blocks = boc[0], []
        for i in range(len(boc)):
            cin = out // fac[i]
            out = boc[i] // fac[i]
            blocks.append(
                dict(
                    cin=cin,
                    cout=out,
                    layers=layers[i + 1],
                    scale=bool(sts[i]),
                    inject_noise=bool(noise[i + 1]),
                    residual=bool(res[i]),
                    factor=fac[i],
                    stride=(2, 2, 2),
                )
            )
        return blocks

    def validate(self, source: str) -> None:
        self._check_values(source)
        self._check_block_counts(source)
        self._check_block_channels(source)

    def _bad(self, source: str, key: str, why: str) -> None:
        raise ConfigError(f"{source}: {key}={getattr(self, key)!r} {why}")

    def _check_values(self, source: str) -> None:
        """Each setting alone: channels, patch sizes, the block lists' types, the flags."""
        for name in ("in_channels", "out_channels", "latent_channels", "patch_size"):
            if not _positive_int(getattr(self, name)):
                self._bad(source, name, "must be a positive integer")
        if self.patch_size_t != 1:
            self._bad(
                source,
                "patch_size_t",
                "is not implemented by vidax's LTXVAEConfig (the reference's encoder input conv "
                "is sized for patch_size_t=1); only 1 is supported",
            )
        for name in (
            "block_out_channels",
            "decoder_block_out_channels",
            "layers_per_block",
            "decoder_layers_per_block",
            "upsample_factor",
        ):
            v = getattr(self, name)
            if not isinstance(v, tuple) or not v or not all(_positive_int(c) for c in v):
                self._bad(source, name, "must be a non-empty list of positive integers")
        for name in ("down_block_types",):
            v = self.down_block_types
            if not isinstance(v, tuple) or not v or any(t not in self.DOWN_BLOCK_TYPES for t in v):
                self._bad(source, name, f"must list block types of {self.DOWN_BLOCK_TYPES}")
        for name in ("timestep_conditioning", "encoder_causal", "decoder_causal"):
            if not isinstance(getattr(self, name), bool):
                self._bad(source, name, "must be true or false")

    def _check_block_counts(self, source: str) -> None:
        """Enough entries in each per-block list for the encoder's and decoder's blocks."""
        n_enc = len(self.block_out_channels) - (1 if self.is_ltx_095 else 0)
        if n_enc < 1:
            self._bad(source, "block_out_channels", "needs at least 2 entries for LTXVideo095DownBlock3D encoders")
        for name, need in (
            ("down_block_types", n_enc),
            ("spatio_temporal_scaling", n_enc),
            ("layers_per_block", n_enc),
        ):
            if len(getattr(self, name)) < need:
                self._bad(source, name, f"needs at least {need} entries (one per encoder block)")
        if any(t == "LTXVideo095DownBlock3D" for t in self.down_block_types[:n_enc]):
            dt = self.downsample_type
            if (
                not isinstance(dt, tuple)
                or len(dt) < n_enc
                or any(
                    dt[i] not in LTX_DOWNSAMPLE_STRIDES
                    for i in range(n_enc)
                    if self.down_block_types[i] == "LTXVideo095DownBlock3D"
                )
            ):
                self._bad(
                    source, "downsample_type", f"must give one of {sorted(LTX_DOWNSAMPLE_STRIDES)} per encoder block"
                )
        n_dec = len(self.decoder_block_out_channels)
        for name, need in (
            ("decoder_spatio_temporal_scaling", n_dec),
            ("decoder_layers_per_block", n_dec + 1),
            ("decoder_inject_noise", n_dec + 1),
            ("upsample_residual", n_dec),
            ("upsample_factor", n_dec),
        ):
            if not isinstance(getattr(self, name), tuple) or len(getattr(self, name)) < need:
                self._bad(source, name, f"needs at least {need} entries for {n_dec} decoder blocks")

    def _check_block_channels(self, source: str) -> None:
        """Each block's channels against its sampler, as the reference can run them."""
        for block in self.encoder_blocks():
            s = block["stride"]
            if block["scale"] and s is not None:
                k = math.prod(s)
                if block["cout"] % k or (block["cin"] * k) % block["cout"]:
                    self._bad(
                        source,
                        "block_out_channels",
                        f"gives a {s} LTXVideoDownsampler3d {block['cin']} -> "
                        f"{block['cout']} channels that the reference cannot group (needs cout % {k} == 0 "
                        f"and cin * {k} % cout == 0)",
                    )
        for i, block in enumerate(self.decoder_blocks()):
            if block["cin"] != block["cout"]:
                # The reference's up block runs conv_in on the un-embedded timestep and before
                # the channel-reducing up-sampler: it only runs without those features.
                if self.timestep_conditioning or block["factor"] > 1 or block["inject_noise"]:
                    self._bad(
                        source,
                        "decoder_block_out_channels",
                        f"gives up block {i} a conv_in ({block['cin']} -> "
                        f"{block['cout']} channels) together with timestep_conditioning, upsample_factor > 1 "
                        "or inject_noise, which the reference cannot run",
                    )
            k = math.prod(block["stride"])
            if block["scale"] and block["residual"] and (block["cout"] * block["factor"]) % k:
                self._bad(
                    source,
                    "decoder_block_out_channels",
                    f"gives up block {i} a residual up-sampler of "
                    f"{block['cout'] * block['factor']} channels, not a multiple of {k} (the reference folds "
                    f"them into {' x '.join(map(str, block['stride']))} blocks)",
                )
        if self.spatial_compression < 1 or self.temporal_compression < 1:
            self._bad(source, "spatial_compression_ratio", "and temporal_compression_ratio must be positive")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# ---------------------------------------------------------------------------------------------
# Latent upsampler


@dataclasses.dataclass(frozen=True)
class LTXLatentUpsamplerConfig(ConfigBase):
    """Settings of diffusers' ``LTXLatentUpsamplerModel`` (pipelines/ltx/modeling_latent_upsampler.py,
    ``latent_upsampler/config.json``), with its ``__init__`` defaults.

    Attributes:
        in_channels: latent channels C (128 for the LTX-Video VAE).
        mid_channels: width of the residual stages; a multiple of 32 (every GroupNorm has 32
            groups).
        num_blocks_per_stage: residual blocks before and after the upsampling.
        dims: 3 (Conv3d over (T, H, W); the spatial upsampler is still a per-frame Conv2d) or 2
            (every conv and GroupNorm per frame).
        spatial_upsample: H and W doubled.
        temporal_upsample: frames ``T -> 2 T - 1`` (doubled, first dropped); needs ``dims=3``.

    Refused (ConfigError): neither upsampling, ``temporal_upsample`` with ``dims=2`` (the
    reference then applies a Conv3d to per-frame 4-D input, which torch reads as one unbatched
    volume: not a model), ``dims`` other than 2/3, ``mid_channels`` not a multiple of 32.
    """

    in_channels: int = 128
    mid_channels: int = 512
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False

    @property
    def scale(self) -> tuple[int, int]:
        """``(temporal, spatial)`` factor: output ``(T', H', W') = (st*T - (st-1), ss*H, ss*W)``."""
        return (2 if self.temporal_upsample else 1, 2 if self.spatial_upsample else 1)

    def validate(self, source: str) -> None:
        for name in ("in_channels", "mid_channels", "num_blocks_per_stage"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"{source}: {name}={value!r}; it must be an int >= 1.")
        for name in ("spatial_upsample", "temporal_upsample"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{source}: {name}={getattr(self, name)!r}; it must be true or false.")
        if self.dims not in (2, 3) or isinstance(self.dims, bool):
            raise ConfigError(f"{source}: dims={self.dims!r}; valid: 2, 3.")
        if self.mid_channels % 32:
            raise ConfigError(
                f"{source}: mid_channels={self.mid_channels!r}; it must be a multiple of 32 "
                "(the GroupNorms have 32 groups)."
            )
        if not (self.spatial_upsample or self.temporal_upsample):
            raise ConfigError(
                f"{source}: spatial_upsample=False and temporal_upsample=False; at least one must be true."
            )
        if self.temporal_upsample and self.dims == 2:
            raise ConfigError(
                f"{source}: temporal_upsample=True with dims=2 is not a working model in the reference "
                "(a Conv3d on per-frame input); temporal upsampling needs dims=3."
            )


# ---------------------------------------------------------------------------------------------
# The whole checkpoint
# ---------------------------------------------------------------------------------------------

#: The pipelines of model_index.json vidax runs on LTX-Video 0.9.x folders.
LTX_PIPELINES = ("LTXPipeline", "LTXImageToVideoPipeline", "LTXConditionPipeline")


@dataclasses.dataclass(frozen=True)
class LTXInfo(CheckpointInfo):
    """An LTX-Video 0.9.x folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`).

    Attributes:
        transformer_config, vae_config: the component configs.
        scheduler_config: ``scheduler_config.json`` (its ``base_image_seq_len``, ... give ``mu``).
        condition: the folder's pipeline is ``LTXConditionPipeline`` (0.9.5+ releases).
    """

    transformer_config: LTXTransformerConfig = None
    vae_config: LTXVAEConfig = None
    scheduler_config: Mapping[str, Any] = None
    condition: bool = False

    def latent_grid(self, num_frames: int, height: int, width: int) -> tuple[int, int, int]:
        """``(F', H', W')`` latent frames, rows and columns of a video (the reference's
        ``(num_frames - 1) // temporal + 1``, ``height // spatial``, ``width // spatial``)."""
        v = self.vae_config
        return (
            (num_frames - 1) // v.temporal_compression + 1,
            height // v.spatial_compression,
            width // v.spatial_compression,
        )


def read_ltx_checkpoint(checkpoint: Checkpoint) -> LTXInfo:
    """Read and cross-check an LTX-Video 0.9.x folder's configs.

    Raises:
        CheckpointError: a component folder is missing. ConfigError: an unsupported setting, a
            scheduler other than FlowMatchEulerDiscreteScheduler, channels that do not fit the VAE.
    """
    ckpt = checkpoint
    ckpt.require("tokenizer", "text_encoder", "transformer", "vae", "scheduler")
    cfg = ckpt.typed_config("transformer", LTXTransformerConfig)
    vae = ckpt.typed_config("vae", LTXVAEConfig)
    if cfg.in_channels != vae.latent_channels or cfg.out_dim != vae.latent_channels:
        raise ConfigError(
            f"{ckpt.config_file('transformer')}: in_channels={cfg.in_channels}, out_channels="
            f"{cfg.out_dim} do not fit the VAE's latent_channels={vae.latent_channels}"
        )
    if (cfg.patch_size, cfg.patch_size_t) != (1, 1):
        raise ConfigError(
            f"{ckpt.config_file('transformer')}: patch_size={cfg.patch_size}, patch_size_t="
            f"{cfg.patch_size_t}; the LTX-Video pipelines pack latents with patch size 1"
        )
    sched = ckpt.config("scheduler")
    if sched.get("_class_name") != "FlowMatchEulerDiscreteScheduler":
        raise ConfigError(
            f"{ckpt.config_file('scheduler')}: _class_name={sched.get('_class_name')!r}; the "
            "LTX-Video pipelines run FlowMatchEulerDiscreteScheduler"
        )
    condition = ckpt.pipeline_class_name == "LTXConditionPipeline"
    s, k = vae.spatial_compression, vae.temporal_compression
    version = (
        "LTX-Video 0.9.5+"
        if vae.is_ltx_095
        else ("LTX-Video 0.9.1" if vae.timestep_conditioning else "LTX-Video 0.9.0")
    )
    variant = (
        f"{version} {'condition' if condition else 'T2V/I2V'}: {cfg.num_layers} layers, width "
        f"{cfg.inner_dim}, VAE {k}x{s}x{s}{', decode timestep' if vae.timestep_conditioning else ''}"
    )
    # LTXPipeline.__call__'s defaults: 512x704, 161 frames, 50 steps, guidance 3, 128 tokens,
    # frame_rate 25 (also the fps of its examples' export_to_video).
    defaults = CallDefaults(
        height=512,
        width=704,
        num_frames=161,
        num_inference_steps=50,
        guidance_scale=3.0,
        max_sequence_length=128,
        fps=25,
    )
    # The condition pipeline also takes a video as its condition (video-to-video).
    tasks = ("t2v", "i2v", "v2v") if condition else ("t2v", "i2v")
    return LTXInfo(
        checkpoint=ckpt,
        tasks=tasks,
        variant=variant,
        defaults=defaults.for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(32, 32),
        size_reason="the LTX-Video pipelines' check_inputs",
        transformer_config=cfg,
        vae_config=vae,
        scheduler_config=dict(sched),
        condition=condition,
    )


@dataclasses.dataclass(frozen=True)
class LTXUpsampleInfo(CheckpointInfo):
    """An ``LTXLatentUpsamplePipeline`` folder (model_index + ``vae/`` + ``latent_upsampler/``).

    Attributes:
        vae_config, upsampler_config: the component configs.
    """

    vae_config: LTXVAEConfig = None
    upsampler_config: LTXLatentUpsamplerConfig = None


def read_ltx_upsample_checkpoint(
    checkpoint: Checkpoint,
    *,
    vae_config: type = LTXVAEConfig,
    upsampler_config: type = LTXLatentUpsamplerConfig,
    name: str = "LTX-Video",
    pipeline: str = "LTXLatentUpsamplePipeline",
    defaults: CallDefaults | None = None,
) -> LTXUpsampleInfo:
    """Read an LTX-Video latent-upsampler folder's configs (diffusers' ``LTXLatentUpsamplePipeline``;
    LTX-2's ``LTX2LatentUpsamplePipeline`` with its config classes, ``name``, ``pipeline`` and call
    ``defaults``).

    Raises:
        CheckpointError: ``vae/`` or ``latent_upsampler/`` is missing. ConfigError: an unsupported
            setting, or an upsampler whose channels do not fit the VAE.
    """
    ckpt = checkpoint
    vae = ckpt.typed_config("vae", vae_config)
    up = ckpt.typed_config("latent_upsampler", upsampler_config)
    if up.in_channels != vae.latent_channels:
        raise ConfigError(
            f"{ckpt.config_file('latent_upsampler')}: in_channels={up.in_channels} does not fit the "
            f"VAE's latent_channels={vae.latent_channels}"
        )
    st, ss = up.scale
    variant = f"{name} latent upsampler ({ss:g}x spatial, {st}x temporal)"
    # LTXLatentUpsamplePipeline.__call__'s defaults: 512x704; the rest is unused.
    defaults = defaults or CallDefaults(
        height=512, width=704, num_frames=161, num_inference_steps=1, guidance_scale=1.0, max_sequence_length=1, fps=25
    )
    s = vae.spatial_compression
    return LTXUpsampleInfo(
        checkpoint=ckpt,
        tasks=("upsample",),
        variant=variant,
        defaults=defaults.for_checkpoint(ckpt),
        transformers=(),
        size_multiple=(s, s),
        size_reason=f"{pipeline}.check_inputs",
        vae_config=vae,
        upsampler_config=up,
    )
