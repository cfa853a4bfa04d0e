"""Configuration of HunyuanVideo 1.0 (``hunyuanvideo-community/HunyuanVideo``, ``-I2V``,
``-I2V-33ch``): frozen dataclasses built from each component's ``config.json``: the denoising
transformer (:class:`HunyuanVideoTransformerConfig`) and the VAE (:class:`HunyuanVideoVAEConfig`).
The whole checkpoint (configs only) is :func:`read_hunyuan_video_checkpoint` ->
:class:`HunyuanVideoInfo`. Not HunyuanVideo-1.5, a different model."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import (
    ACTIVATIONS,
    VAE_SIZES,
    ConfigBase,
    TransformerConfig,
    check_positive_ints,
    check_vae_blocks,
)
from vidax.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# The transformer (``transformer/config.json``)

#: ``image_condition_type`` values of diffusers 0.42.1 (None: text-to-video).
IMAGE_CONDITION_TYPES = (None, "latent_concat", "token_replace")

#: diffusers ``Attention``'s ``qk_norm`` values the HunyuanVideo blocks run (per head, eps 1e-6)
#: -> :class:`vidax.blocks.attention.AttentionConfig`'s ``qk_norm``.
QK_NORMS = {"rms_norm": "rms_head", "layer_norm": "layer_head", "fp32_layer_norm": "layer_head_plain", None: None}

#: The token refiner's feed-forward ratio: ``HunyuanVideoTokenRefiner`` is built with its default
#: ``mlp_ratio=4.0`` whatever the config's ``mlp_ratio`` says.
REFINER_MLP_RATIO = 4.0


class HunyuanBlocksConfig(TransformerConfig):
    """What the double-stream blocks, the token refiner and the RoPE of HunyuanVideo read, shared
    by the 1.0 and 1.5 transformer configs (their fields ``mlp_ratio``, ``patch_size``,
    ``patch_size_t``, ``qk_norm``, ``rope_theta``, ``rope_axes_dim``, ``attention_head_dim``)."""

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the blocks' feed-forward networks, ``int(D * mlp_ratio)``."""
        return int(self.inner_dim * self.mlp_ratio)

    @property
    def refiner_mlp_dim(self) -> int:
        """Hidden width of the token refiner's feed-forward network, ``int(D * 4.0)``."""
        return int(self.inner_dim * REFINER_MLP_RATIO)

    @property
    def patch(self) -> tuple[int, int, int]:
        """``(p_t, p, p)``."""
        return (self.patch_size_t, self.patch_size, self.patch_size)

    #: The sizes both transformer configs have, each a positive int (``out_channels``: or null).
    BLOCK_SIZES: ClassVar[tuple[str, ...]] = (
        "in_channels",
        "num_attention_heads",
        "attention_head_dim",
        "num_layers",
        "num_refiner_layers",
        "patch_size",
        "patch_size_t",
        "text_embed_dim",
    )

    def check_blocks(self, source: str, sizes: tuple[str, ...] = ()) -> None:
        """Raise ConfigError (:meth:`invalid`) on a size of :attr:`BLOCK_SIZES` and ``sizes`` (the
        config's own) that is not a positive int, then on a bad ``mlp_ratio``, ``qk_norm``,
        ``rope_theta`` or ``rope_axes_dim``."""
        self.check_positive(source, (*self.BLOCK_SIZES, *sizes), nullable=("out_channels",))
        if not isinstance(self.mlp_ratio, (int, float)) or isinstance(self.mlp_ratio, bool) or self.mlp_ratio <= 0:
            self.invalid(source, "mlp_ratio", self.mlp_ratio, "expected a positive number")
        if self.qk_norm not in QK_NORMS:
            self.invalid(
                source,
                "qk_norm",
                self.qk_norm,
                f"the reference's joint attention runs the per-head norms {list(QK_NORMS)}; with its "
                "added (text) projections the across-heads and l2 norms do not build or run there",
            )
        if not isinstance(self.rope_theta, (int, float)) or isinstance(self.rope_theta, bool) or self.rope_theta <= 0:
            self.invalid(source, "rope_theta", self.rope_theta, "expected a positive number")
        dims = self.rope_axes_dim
        if not (
            isinstance(dims, tuple)
            and len(dims) == 3
            and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 and d % 2 == 0 for d in dims)
        ):
            self.invalid(source, "rope_axes_dim", dims, "expected three positive even ints (T, H, W channels)")
        if sum(dims) != self.attention_head_dim:
            self.invalid(
                source,
                "rope_axes_dim",
                dims,
                f"the (T, H, W) RoPE channels must sum to attention_head_dim={self.attention_head_dim}",
            )


@dataclasses.dataclass(frozen=True)
class HunyuanVideoTransformerConfig(HunyuanBlocksConfig):
    """Settings of ``diffusers.HunyuanVideoTransformer3DModel`` (0.42.1), with its defaults.

    Every field is implemented: text-to-video with the embedded guidance (``guidance_embeds``),
    I2V by channel concatenation (``latent_concat``: the model only sees ``in_channels=33``) and
    by first-frame token replacement (``token_replace``: the first frame's tokens are modulated
    with the embedding of timestep 0).

    Attributes:
        in_channels, out_channels: latent channels in / out (``out_channels`` null means
            ``in_channels``, as the reference).
        num_attention_heads, attention_head_dim: N and K; the width is ``D = N·K``.
        num_layers: double-stream blocks (``transformer_blocks``).
        num_single_layers: single-stream blocks (``single_transformer_blocks``).
        num_refiner_layers: blocks of the text token refiner.
        mlp_ratio: feed-forward width ``int(D · mlp_ratio)`` of both block kinds.
        patch_size, patch_size_t: spatial and temporal patch of the patch embedding.
        qk_norm: a per-head norm of q and k (eps 1e-6, :data:`QK_NORMS`): ``"rms_norm"`` (every
            release), ``"layer_norm"``, ``"fp32_layer_norm"`` (no affine) or null (none).
        guidance_embeds: whether the model embeds a guidance value (guidance-distilled models).
        text_embed_dim: width of the (Llama) text-encoder states.
        pooled_projection_dim: width of the pooled (CLIP) text embedding.
        rope_theta: RoPE base.
        rope_axes_dim: head-dim channels of the (T, H, W) RoPE axes; they sum to K.
        image_condition_type: None, ``"latent_concat"`` or ``"token_replace"``.
    """

    #: ``sample_size`` was proposed for the hub file by a community PR; diffusers 0.42.1's
    #: ``__init__`` has no such argument and ``from_config`` drops it.
    IGNORED: ClassVar[frozenset[str]] = frozenset({"sample_size"})
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    in_channels: int = 16
    out_channels: int | None = 16
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    num_layers: int = 20
    num_single_layers: int = 40
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size: int = 2
    patch_size_t: int = 1
    qk_norm: str | None = "rms_norm"
    guidance_embeds: bool = True
    text_embed_dim: int = 4096
    pooled_projection_dim: int = 768
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)
    image_condition_type: str | None = None

    @property
    def token_replace(self) -> bool:
        """Whether the first frame's tokens take timestep-0 modulation (``token_replace`` I2V)."""
        return self.image_condition_type == "token_replace"

    def validate(self, source: str) -> None:
        self.check_blocks(source, ("num_single_layers", "pooled_projection_dim"))
        if not isinstance(self.guidance_embeds, bool):
            self.invalid(source, "guidance_embeds", self.guidance_embeds, "expected true or false")
        if self.image_condition_type not in IMAGE_CONDITION_TYPES:
            self.invalid(
                source,
                "image_condition_type",
                self.image_condition_type,
                f"diffusers 0.42.1 knows {list(IMAGE_CONDITION_TYPES)}",
            )


# ---------------------------------------------------------------------------------------------
# VAE


class CompressionRatios:
    """``spatial_compression`` / ``temporal_compression`` of a VAE config that stores them as the
    reference's ``spatial_compression_ratio`` / ``temporal_compression_ratio`` (the HunyuanVideo
    1.0 and 1.5 VAEs)."""

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W (``spatial_compression_ratio``)."""
        return self.spatial_compression_ratio

    @property
    def temporal_compression(self) -> int:
        """Frames per latent frame after the first (``temporal_compression_ratio``)."""
        return self.temporal_compression_ratio


@dataclasses.dataclass(frozen=True)
class HunyuanVideoVAEConfig(CompressionRatios, ConfigBase):
    """Settings of ``diffusers.AutoencoderKLHunyuanVideo`` (its ``vae/config.json``).

    Attributes:
        in_channels, out_channels: video channels (3).
        latent_channels: latent channels ``C_z`` (16).
        down_block_types, up_block_types: one entry per block, all ``HunyuanVideoDownBlock3D`` /
            ``HunyuanVideoUpBlock3D`` (the only types the reference builds).
        block_out_channels: channels per encoder block (the decoder mirrors them).
        layers_per_block: resnets per encoder block (decoder blocks have one more).
        act_fn: the resnets' activation (diffusers ``get_activation`` names; the output
            activation is SiLU whatever it says, as the reference).
        norm_num_groups: groups of every group norm (eps 1e-6 everywhere, as the reference).
        scaling_factor: latents are ``z * scaling_factor`` in the transformer's space; the
            pipelines divide by it before decoding.
        spatial_compression_ratio: pixels per latent pixel along H and W, a power of two; the
            first ``log2`` of it blocks resample space.
        temporal_compression_ratio: 4 (the only value the reference's decoder builds): blocks
            ``n - 3`` and ``n - 2`` of ``n`` resample time.
        mid_block_add_attention: whether the mid blocks have their frame-causal attention.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 16
    down_block_types: tuple[str, ...] = ("HunyuanVideoDownBlock3D",) * 4
    up_block_types: tuple[str, ...] = ("HunyuanVideoUpBlock3D",) * 4
    block_out_channels: tuple[int, ...] = (128, 256, 512, 512)
    layers_per_block: int = 2
    norm_num_groups: int = 32
    scaling_factor: float = 0.476986
    spatial_compression_ratio: int = 8
    temporal_compression_ratio: int = 4
    mid_block_add_attention: bool = True
    act_fn: str = "silu"

    def resampling(self) -> tuple[tuple[bool, bool], ...]:
        """Per encoder block ``(space, time)``: whether its down-sampler halves H/W, T.

        The decoder's block ``i`` up-samples as encoder block ``i`` down-samples (the
        reference's ``HunyuanVideoEncoder3D`` / ``HunyuanVideoDecoder3D`` use the same rule).
        """
        n = len(self.block_out_channels)
        spatial = int(math.log2(self.spatial_compression_ratio))
        time = int(math.log2(self.temporal_compression_ratio))
        return tuple((i < spatial, n - 1 - time <= i < n - 1) for i in range(n))

    def validate(self, source: str) -> None:
        check_positive_ints(
            source,
            self,
            (
                *VAE_SIZES,
                "spatial_compression_ratio",
                "temporal_compression_ratio",
            ),
        )
        if not isinstance(self.act_fn, str) or self.act_fn.lower() not in ACTIVATIONS:
            self.invalid(
                source, "act_fn", self.act_fn, f"expected one of diffusers' get_activation names {list(ACTIVATIONS)}"
            )
        boc = self.block_out_channels
        check_vae_blocks(
            source,
            boc,
            self.norm_num_groups,
            {
                "down_block_types": (self.down_block_types, "HunyuanVideoDownBlock3D"),
                "up_block_types": (self.up_block_types, "HunyuanVideoUpBlock3D"),
            },
        )
        if self.temporal_compression_ratio != 4:
            raise ConfigError(
                f"{source}: temporal_compression_ratio={self.temporal_compression_ratio!r} is not "
                "implemented; only 4 (the reference's decoder refuses other values)"
            )
        scr = self.spatial_compression_ratio
        if scr & (scr - 1):
            raise ConfigError(f"{source}: spatial_compression_ratio={scr!r} must be a power of two")
        # The tiling and the pipelines take the ratios as given: they must be what the blocks do.
        got_s = 2 ** sum(s for s, _ in self.resampling())
        got_t = 2 ** sum(t for _, t in self.resampling())
        if (got_s, got_t) != (scr, self.temporal_compression_ratio):
            raise ConfigError(
                f"{source}: {len(boc)} blocks resample by {got_s} in space and {got_t} in time, "
                f"not the configured spatial_compression_ratio={scr} / "
                f"temporal_compression_ratio={self.temporal_compression_ratio}"
            )
        if not isinstance(self.mid_block_add_attention, bool):
            raise ConfigError(f"{source}: mid_block_add_attention={self.mid_block_add_attention!r} must be a boolean")
        if (
            not isinstance(self.scaling_factor, (int, float))
            or isinstance(self.scaling_factor, bool)
            or not self.scaling_factor > 0
        ):
            raise ConfigError(f"{source}: scaling_factor={self.scaling_factor!r} must be a positive number")


# ---------------------------------------------------------------------------------------------
# The whole checkpoint (``model_index.json`` + the component configs)

#: ``HunyuanVideoPipeline.__call__``'s defaults (diffusers 0.42.1); fps 15 as its docstring
#: example writes the video.
T2V_DEFAULTS = CallDefaults(
    height=720, width=1280, num_frames=129, num_inference_steps=50, guidance_scale=6.0, max_sequence_length=256, fps=15
)
#: ``HunyuanVideoImageToVideoPipeline.__call__``'s: the same, with ``guidance_scale=1.0``.
I2V_DEFAULTS = dataclasses.replace(T2V_DEFAULTS, guidance_scale=1.0)

#: The text encoder class each pipeline's reference takes (model_index.json's class names).
TEXT_ENCODERS = {"t2v": "LlamaModel", "i2v": "LlavaForConditionalGeneration"}


@dataclasses.dataclass(frozen=True)
class HunyuanVideoInfo(CheckpointInfo):
    """A HunyuanVideo 1.0 folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`).

    Attributes:
        transformer_config: ``transformer/config.json``. vae_config: ``vae/config.json``.
        image_condition_type: the transformer's (None: text-to-video; ``"latent_concat"``,
            ``"token_replace"``: image-to-video).
    """

    transformer_config: HunyuanVideoTransformerConfig
    vae_config: HunyuanVideoVAEConfig
    image_condition_type: str | None

    @property
    def latent_channels(self) -> int:
        """Channels of the denoised latents (the VAE's ``latent_channels``)."""
        return self.vae_config.latent_channels


def read_hunyuan_video_checkpoint(checkpoint: Checkpoint) -> HunyuanVideoInfo:
    """Read and cross-check a HunyuanVideo 1.0 folder's configs (no weights).

    Text-to-video: ``image_condition_type`` null, ``in_channels`` = the VAE's latent channels C,
    a ``LlamaModel`` text encoder. Image-to-video: ``token_replace`` (``in_channels`` = C) or
    ``latent_concat`` (``in_channels`` = 2 C + 1: latents, image latents, mask), a
    ``LlavaForConditionalGeneration`` text encoder and an ``image_processor``.

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: a setting vidax does not implement or components that do not fit together
            (the message names the file, the key and what is valid).
    """
    ckpt, src = checkpoint, checkpoint.source
    ckpt.require("tokenizer", "text_encoder", "tokenizer_2", "text_encoder_2", "transformer", "vae", "scheduler")
    tr = ckpt.typed_config("transformer", HunyuanVideoTransformerConfig)
    vae = ckpt.typed_config("vae", HunyuanVideoVAEConfig)
    file, c = ckpt.config_file("transformer"), vae.latent_channels
    kind = tr.image_condition_type
    want_in = {None: c, "token_replace": c, "latent_concat": 2 * c + 1}[kind]
    if tr.in_channels != want_in:
        raise ConfigError(
            f"{file}: in_channels={tr.in_channels} with image_condition_type={kind!r} must be "
            f"{want_in} (the VAE's latent_channels={c}"
            + (")" if kind != "latent_concat" else " x 2 + 1: latents, image latents, mask)")
        )
    if tr.out_dim != c:
        raise ConfigError(f"{file}: out_channels={tr.out_dim} must equal the VAE's latent_channels={c}")
    task = "t2v" if kind is None else "i2v"
    te_class = ckpt.class_of("text_encoder")
    if te_class != TEXT_ENCODERS[task]:
        raise ConfigError(
            f"{src}: text_encoder is {te_class!r}, but a {'text' if task == 't2v' else 'image'}-to-video "
            f"HunyuanVideo (image_condition_type={kind!r}) runs {TEXT_ENCODERS[task]!r} as the reference"
        )
    if task == "i2v":
        ckpt.folder("image_processor")
    te = ckpt.configs.get("text_encoder") or {}
    hidden = (te.get("text_config") or {}).get("hidden_size") if task == "i2v" else te.get("hidden_size")
    if hidden is not None and hidden != tr.text_embed_dim:
        raise ConfigError(
            f"{file}: text_embed_dim={tr.text_embed_dim} must equal the text encoder's hidden_size="
            f"{hidden} ({ckpt.config_files.get('text_encoder')})"
        )
    clip = ckpt.configs.get("text_encoder_2") or {}
    if clip.get("hidden_size") is not None and clip["hidden_size"] != tr.pooled_projection_dim:
        raise ConfigError(
            f"{file}: pooled_projection_dim={tr.pooled_projection_dim} must equal text_encoder_2's "
            f"hidden_size={clip['hidden_size']} (CLIP's pooled output)"
        )
    s, p = vae.spatial_compression, tr.patch_size
    variant = {
        None: "HunyuanVideo 1.0 T2V (embedded guidance)" if tr.guidance_embeds else "HunyuanVideo 1.0 T2V",
        "token_replace": "HunyuanVideo 1.0 I2V (first-frame token replace, 16 channels)",
        "latent_concat": "HunyuanVideo 1.0 I2V (image latents concatenated, 33 channels)",
    }[kind]
    return HunyuanVideoInfo(
        checkpoint=ckpt,
        tasks=(task,),
        variant=variant,
        defaults=(T2V_DEFAULTS if task == "t2v" else I2V_DEFAULTS).for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(math.lcm(16, s * p), math.lcm(16, s * p)),
        size_reason=f"the reference pipeline's multiple of 16, the VAE's {s}x spatial compression times the "
        f"transformer's {p}x{p} patches",
        transformer_config=tr,
        vae_config=vae,
        image_condition_type=kind,
    )
