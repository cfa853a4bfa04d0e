"""Configuration of the LTX-Video 0.9.x family (Lightricks): the denoising transformer
(``transformer/config.json``, :class:`LTXTransformerConfig`) and the latent upsampler
(``latent_upsampler/config.json``, :class:`LTXLatentUpsamplerConfig`)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from vidax.config import ConfigBase
from vidax.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# The transformer (``transformer/config.json``)

#: ``activation_fn`` of the blocks' feed-forward network -> tanh approximation of GELU or not
#: (diffusers ``FeedForward``; other activations change its structure and are not implemented).
LTX_FFN_ACTIVATIONS = {"gelu-approximate": True, "gelu": False}


@dataclasses.dataclass(frozen=True)
class LTXTransformerConfig(ConfigBase):
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
        activation_fn: feed-forward activation, ``"gelu-approximate"`` or ``"gelu"``.
        qk_norm: only ``"rms_norm_across_heads"`` (the reference's ``LTXAttention`` refuses others).
        norm_elementwise_affine: weights in the blocks' RMSNorms; only ``False`` (every release)
            is implemented.
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

    @property
    def inner_dim(self) -> int:
        """Model width D = num_attention_heads * attention_head_dim."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def out_dim(self) -> int:
        """Output channels (``out_channels or in_channels`` as in the reference)."""
        return self.out_channels or self.in_channels

    def validate(self, source: str) -> None:
        def bad(key, value, want):
            raise ConfigError(f"{source}: {key}={value!r} is not valid for LTXTransformerConfig; {want}.")

        positive = (
            "in_channels", "patch_size", "patch_size_t", "num_attention_heads", "attention_head_dim",
            "cross_attention_dim", "num_layers", "caption_channels",
        )
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                bad(key, value, "expected a positive int")
        if self.out_channels is not None and (
            not isinstance(self.out_channels, int) or isinstance(self.out_channels, bool) or self.out_channels < 1
        ):
            bad("out_channels", self.out_channels, "expected a positive int or null")
        if self.activation_fn not in LTX_FFN_ACTIVATIONS:
            bad("activation_fn", self.activation_fn, f"vidax implements {sorted(LTX_FFN_ACTIVATIONS)}")
        if self.qk_norm != "rms_norm_across_heads":
            bad("qk_norm", self.qk_norm, "diffusers' LTXAttention implements only 'rms_norm_across_heads'")
        if self.norm_elementwise_affine is not False:
            bad(
                "norm_elementwise_affine", self.norm_elementwise_affine,
                "vidax implements the blocks' RMSNorms without weights (false, as every LTX-Video release)",
            )
        if not isinstance(self.norm_eps, (int, float)) or isinstance(self.norm_eps, bool) or self.norm_eps <= 0:
            bad("norm_eps", self.norm_eps, "expected a positive float")
        for key in ("attention_bias", "attention_out_bias"):
            if not isinstance(getattr(self, key), bool):
                bad(key, getattr(self, key), "expected true or false")
        if self.cross_attention_dim != self.inner_dim:
            bad(
                "cross_attention_dim", self.cross_attention_dim,
                f"the reference feeds the cross-attention the caption projection's output, of width "
                f"num_attention_heads*attention_head_dim={self.inner_dim}",
            )
        if self.inner_dim % 2:
            bad(
                "attention_head_dim", self.attention_head_dim,
                f"the rotary embedding rotates pairs of the whole width D={self.inner_dim}, which must be even",
            )


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
