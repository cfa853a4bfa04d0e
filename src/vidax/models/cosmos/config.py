"""Configuration of the Cosmos-Predict2.5 denoising transformer (``transformer/config.json`` of a
diffusers ``CosmosTransformer3DModel`` export) and of a whole Cosmos-Predict2.5 checkpoint folder
(:class:`CosmosInfo`, :func:`read_cosmos_checkpoint`, configs only)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import TransformerConfig, is_positive_int
from vidax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CosmosTransformerConfig(TransformerConfig):
    """Settings of ``diffusers.CosmosTransformer3DModel`` (diffusers 0.42.1
    ``models/transformers/transformer_cosmos.py``), with its ``__init__`` defaults.

    Implemented: the Cosmos-Predict2.5 transformer (2B / 14B: condition-mask input channel,
    ``concat_padding_mask``, AdaLN-LoRA, per-head QK RMSNorm, 3-D RoPE with NTK ``rope_scale``,
    the ``crossattn_proj`` text projection) and the learnable position embedding of earlier
    Cosmos checkpoints (``extra_pos_embed_type="learnable"``). Refused: the Cosmos-Transfer2.5
    control branch (``controlnet_block_every_n``) and the image-context cross-attention
    (``img_context_dim_in``); ``img_context_num_tokens`` / ``img_context_dim_out`` are read by the
    reference only with ``img_context_dim_in``, so they are accepted with any value.

    Attributes:
        in_channels: channels of the latents given to the patch embedding, the condition-mask
            channel included (Predict2.5: 16 latent + 1 mask = 17); the padding-mask channel of
            ``concat_padding_mask`` comes on top.
        out_channels: predicted latent channels ``C_out``.
        num_attention_heads: N.
        attention_head_dim: K; the model width is ``D = N * K``.
        num_layers: number of transformer blocks.
        mlp_ratio: feed-forward hidden width ``int(D * mlp_ratio)``.
        text_embed_dim: width of the cross-attention context (after ``crossattn_proj``).
        adaln_lora_dim: hidden width of every AdaLN-LoRA modulation (``norm1/2/3``, ``norm_out``).
        max_size: ``(T, H, W)`` latent size the position tables are built for; per axis at most
            ``max(max_size // patch_size)`` patches (RoPE) and ``max_size // patch_size`` patches
            (learnable embedding).
        patch_size: ``(p_t, p_h, p_w)``.
        rope_scale: ``(t, h, w)`` NTK factors: axis ``a`` of ``d`` channels uses
            ``theta = 10000 * rope_scale[a] ** (d / (d - 2))``.
        concat_padding_mask: a padding-mask channel is concatenated to the input.
        extra_pos_embed_type: ``None`` or ``"learnable"`` (per-axis learned tables, normalised,
            added at the start of every block).
        use_crossattn_projection: ``crossattn_proj = GELU(Linear(crossattn_proj_in_channels ->
            encoder_hidden_states_channels))`` is applied to ``encoder_hidden_states`` first.
        crossattn_proj_in_channels: width of the encoder states given to the model when
            ``use_crossattn_projection`` (Predict2.5: 28 layers x 3584 = 100352).
        encoder_hidden_states_channels: output width of ``crossattn_proj``; must equal
            ``text_embed_dim``.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {
            # Read by diffusers only when img_context_dim_in is set (refused below).
            "img_context_num_tokens",
            "img_context_dim_out",
        }
    )
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        # Cosmos-Transfer2.5 control residuals every n blocks: not implemented.
        "controlnet_block_every_n": (None,),
        # Image-context cross-attention (q_img / k_img / v_img + img_context_proj): not
        # implemented; 0 builds none of it in the reference either.
        "img_context_dim_in": (None, 0),
    }

    in_channels: int = 16
    out_channels: int = 16
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    num_layers: int = 28
    mlp_ratio: float = 4.0
    text_embed_dim: int = 1024
    adaln_lora_dim: int = 256
    max_size: tuple[int, int, int] = (128, 240, 240)
    patch_size: tuple[int, int, int] = (1, 2, 2)
    rope_scale: tuple[float, float, float] = (2.0, 1.0, 1.0)
    concat_padding_mask: bool = True
    extra_pos_embed_type: str | None = "learnable"
    use_crossattn_projection: bool = False
    crossattn_proj_in_channels: int = 1024
    encoder_hidden_states_channels: int = 1024

    @property
    def ffn_dim(self) -> int:
        """Feed-forward hidden width ``int(D * mlp_ratio)`` (diffusers ``FeedForward(mult=...)``)."""
        return int(self.inner_dim * self.mlp_ratio)

    @property
    def patch_in_channels(self) -> int:
        """Channels entering the patch embedding: ``in_channels`` (+1 with ``concat_padding_mask``)."""
        return self.in_channels + (1 if self.concat_padding_mask else 0)

    @property
    def context_dim(self) -> int:
        """Width of ``encoder_hidden_states`` as given to the model (before ``crossattn_proj``)."""
        return self.crossattn_proj_in_channels if self.use_crossattn_projection else self.text_embed_dim

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Head-dim channels of the (T, H, W) rotary axes, as ``CosmosRotaryPosEmbed``:
        ``h = w = 2 * (K // 6)``, ``t = K - h - w``."""
        h = w = self.attention_head_dim // 6 * 2
        return self.attention_head_dim - h - w, h, w

    @property
    def rope_theta(self) -> tuple[float, float, float]:
        """RoPE base of the (T, H, W) axes: ``10000 * rope_scale[a] ** (d / (d - 2))``."""
        return tuple(10000.0 * float(s) ** (d / (d - 2)) for s, d in zip(self.rope_scale, self.rope_split))

    @property
    def patch_grid_max(self) -> tuple[int, int, int]:
        """``max_size // patch_size`` per axis (the learnable tables' lengths)."""
        return tuple(m // p for m, p in zip(self.max_size, self.patch_size))

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "in_channels",
                "out_channels",
                "num_attention_heads",
                "attention_head_dim",
                "num_layers",
                "text_embed_dim",
                "adaln_lora_dim",
                "crossattn_proj_in_channels",
                "encoder_hidden_states_channels",
            ),
        )
        for key in ("max_size", "patch_size"):
            value = getattr(self, key)
            if not (isinstance(value, tuple) and len(value) == 3 and all(is_positive_int(v) for v in value)):
                self.invalid(source, key, value, "expected three positive ints (t, h, w)")
        if any(m < p for m, p in zip(self.max_size, self.patch_size)):
            self.invalid(
                source, "max_size", self.max_size, f"each axis must hold at least one patch of {self.patch_size}"
            )
        rs = self.rope_scale
        if not (
            isinstance(rs, tuple)
            and len(rs) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in rs)
        ):
            self.invalid(source, "rope_scale", rs, "expected three positive numbers (t, h, w)")
        if not (isinstance(self.mlp_ratio, (int, float)) and not isinstance(self.mlp_ratio, bool) and self.ffn_dim > 0):
            self.invalid(source, "mlp_ratio", self.mlp_ratio, "expected a positive number")
        k = self.attention_head_dim
        if k % 2 or k < 12:
            self.invalid(
                source,
                "attention_head_dim",
                k,
                "the reference splits it into rotary (T, H, W) parts "
                f"{self.rope_split} that must be even and above 2 (an even K >= 12)",
            )
        for key in ("concat_padding_mask", "use_crossattn_projection"):
            if not isinstance(getattr(self, key), bool):
                self.invalid(source, key, getattr(self, key), "expected true or false")
        if self.extra_pos_embed_type not in (None, "learnable"):
            self.invalid(source, "extra_pos_embed_type", self.extra_pos_embed_type, "expected null or 'learnable'")
        if self.use_crossattn_projection and self.encoder_hidden_states_channels != self.text_embed_dim:
            self.invalid(
                source,
                "encoder_hidden_states_channels",
                self.encoder_hidden_states_channels,
                f"crossattn_proj's output feeds the cross-attention, whose input is text_embed_dim="
                f"{self.text_embed_dim}; they must be equal",
            )


#: ``Cosmos2_5_PredictBasePipeline.__call__`` defaults (diffusers 0.42.1): 704 x 1280, 93 frames,
#: 36 steps, guidance 7.0, 512 text tokens; 16 fps as the reference's examples export the videos.
COSMOS_DEFAULTS = CallDefaults(
    height=704, width=1280, num_frames=93, num_inference_steps=36, guidance_scale=7.0, max_sequence_length=512, fps=16
)


@dataclasses.dataclass(frozen=True)
class CosmosInfo(CheckpointInfo):
    """A Cosmos-Predict2.5 folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`).

    Attributes:
        transformer_config: the transformer's (:class:`CosmosTransformerConfig`).
        vae_config: the Wan2.1 VAE's (:class:`vidax.models.wan.config.WanVAEConfig`).
        text_config: the Qwen2.5-VL text tower's
            (:class:`vidax.encoders.decoder_lm_config.Qwen25VLTextConfig`).
    """

    transformer_config: CosmosTransformerConfig
    vae_config: Any
    text_config: Any


def read_cosmos_checkpoint(checkpoint: Checkpoint) -> CosmosInfo:
    """Read and cross-check a Cosmos-Predict2.5 folder's configs (diffusers
    ``Cosmos2_5_PredictBasePipeline``: tokenizer, Qwen2.5-VL text encoder, transformer, Wan VAE,
    scheduler). The safety checker the reference registers is not read (vidax runs none).

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: a setting vidax does not implement, or components that do not fit together
            (the message names the file, the key and what is valid): the transformer must take
            the VAE's latents plus the condition-mask channel (``in_channels = z_dim + 1``) and a
            padding-mask channel, predict ``z_dim`` channels, and project the concatenated text
            layers (``crossattn_proj_in_channels = num_hidden_layers x hidden_size``).
    """
    from vidax.encoders.decoder_lm_config import Qwen25VLTextConfig
    from vidax.models.wan.config import WanVAEConfig

    ckpt = checkpoint
    ckpt.require("tokenizer", "text_encoder", "transformer", "vae", "scheduler")
    cfg = ckpt.typed_config("transformer", CosmosTransformerConfig)
    vae = ckpt.typed_config("vae", WanVAEConfig)
    text = ckpt.typed_config("text_encoder", Qwen25VLTextConfig)
    file, z = ckpt.config_file("transformer"), vae.z_dim
    if cfg.in_channels != z + 1:
        raise ConfigError(
            f"{file}: in_channels={cfg.in_channels} must be the VAE's z_dim + 1 = {z + 1} (the "
            "latents and the condition-mask channel, as Cosmos2_5_PredictBasePipeline feeds them)"
        )
    if cfg.out_channels != z:
        raise ConfigError(f"{file}: out_channels={cfg.out_channels} must equal the VAE's z_dim={z}")
    if not cfg.concat_padding_mask:
        raise ConfigError(
            f"{file}: concat_padding_mask={cfg.concat_padding_mask!r}; the Predict2.5 pipeline "
            "always passes a padding mask, which the reference transformer reads only with true"
        )
    if cfg.patch_size[0] != 1:
        raise ConfigError(
            f"{file}: patch_size={list(cfg.patch_size)}; the pipeline gives one timestep per "
            "latent frame, which needs p_t = 1"
        )
    width = text.num_hidden_layers * text.hidden_size
    if cfg.context_dim != width:
        raise ConfigError(
            f"{file}: crossattn_proj_in_channels={cfg.crossattn_proj_in_channels} (use_crossattn_projection="
            f"{cfg.use_crossattn_projection}) must be {text.num_hidden_layers} text-encoder layers x hidden_size "
            f"{text.hidden_size} = {width} ({ckpt.config_file('text_encoder')}): the pipeline concatenates "
            "every layer's hidden states"
        )
    s = vae.spatial_compression
    _, ph, pw = cfg.patch_size
    variant = (
        f"Cosmos-Predict2.5 text/image/video-to-world: {cfg.num_layers} layers, width {cfg.inner_dim}, "
        f"Qwen2.5-VL text ({text.num_hidden_layers} layers x {text.hidden_size}), Wan2.1 VAE"
    )
    return CosmosInfo(
        checkpoint=ckpt,
        tasks=("t2v", "i2v", "v2v"),
        variant=variant,
        defaults=COSMOS_DEFAULTS.for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(int(np.lcm(16, s * ph)), int(np.lcm(16, s * pw))),
        size_reason=f"the reference requires multiples of 16; the VAE's {s}x spatial compression times the "
        f"transformer's {ph}x{pw} patches",
        transformer_config=cfg,
        vae_config=vae,
        text_config=text,
    )
