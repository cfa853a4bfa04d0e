"""Configuration of the Wan 2.1 / 2.2 diffusion transformer (``transformer/config.json``), and of a
whole Wan checkpoint folder (:func:`read_wan_checkpoint`, configs only)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar, Mapping

import numpy as np

from vidax.config import ConfigBase
from vidax.errors import ConfigError
from vidax.models.wan.vae import WanVAEConfig
from vidax.pipelines.checkpoint import CallDefaults, Checkpoint, CheckpointInfo
from vidax.pipelines.common import TASK_NAMES

logger = logging.getLogger("vidax.pipeline")


@dataclasses.dataclass(frozen=True)
class WanTransformerConfig(ConfigBase):
    """Settings of ``diffusers.WanTransformer3DModel``, with its ``__init__`` defaults.

    Every field is implemented: T2V (Wan2.1 1.3B / 14B, Wan2.2 A14B, TI2V-5B with per-token
    timesteps), the I2V image branch (``image_dim`` + ``added_kv_proj_dim``) and the FLF2V image
    position embedding (``pos_embed_seq_len``).

    Attributes:
        patch_size: ``(p_t, p_h, p_w)`` of the patch-embedding Conv3d.
        num_attention_heads: N.
        attention_head_dim: K; the model width is ``D = N * K``.
        in_channels, out_channels: latent channels in / out (``out_channels=None`` means
            ``in_channels``, as in the reference).
        text_dim: width of the text-encoder states (UMT5: 4096).
        freq_dim: width of the sinusoidal timestep features.
        ffn_dim: hidden width of the feed-forward network.
        num_layers: number of transformer blocks.
        cross_attn_norm: affine LayerNorm (``norm2``) before cross-attention, else identity.
        qk_norm: the reference always applies RMSNorm over all heads to q and k whatever this
            says; only its released value ``"rms_norm_across_heads"`` is accepted.
        eps: epsilon of every LayerNorm / RMSNorm.
        image_dim: width of the CLIP image features (I2V) or ``None`` (no image embedder).
        added_kv_proj_dim: input width of the cross-attention image key/value projections or
            ``None``.
        rope_max_seq_len: length of the reference's RoPE tables: the largest number of patches
            along T, H or W.
        pos_embed_seq_len: length of the learned position embedding added to the image tokens
            (FLF2V) or ``None``.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int | None = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    num_layers: int = 40
    cross_attn_norm: bool = True
    qk_norm: str | None = "rms_norm_across_heads"
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_max_seq_len: int = 1024
    pos_embed_seq_len: int | None = None

    @property
    def inner_dim(self) -> int:
        """Model width D = num_attention_heads * attention_head_dim."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def out_dim(self) -> int:
        """Output latent channels (``out_channels or in_channels`` as in the reference)."""
        return self.out_channels or self.in_channels

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Head-dim channels given to the (T, H, W) rotary axes, as ``WanRotaryPosEmbed``."""
        h = w = 2 * (self.attention_head_dim // 6)
        return self.attention_head_dim - h - w, h, w

    def validate(self, source: str) -> None:
        def bad(key, value, want):
            raise ConfigError(f"{source}: {key}={value!r} is not valid for WanTransformerConfig; {want}.")

        p = self.patch_size
        if not (isinstance(p, tuple) and len(p) == 3 and all(isinstance(x, int) and x > 0 for x in p)):
            bad("patch_size", p, "expected three positive ints (p_t, p_h, p_w)")
        positive = (
            "num_attention_heads", "attention_head_dim", "in_channels", "text_dim", "freq_dim",
            "ffn_dim", "num_layers", "rope_max_seq_len",
        )
        for key in positive:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                bad(key, value, "expected a positive int")
        for key in ("out_channels", "image_dim", "added_kv_proj_dim", "pos_embed_seq_len"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                bad(key, value, "expected a positive int or null")
        if self.freq_dim < 2:
            bad("freq_dim", self.freq_dim, "expected at least 2 (half of it are frequencies)")
        t, h, w = self.rope_split
        if self.attention_head_dim % 2:
            bad(
                "attention_head_dim", self.attention_head_dim,
                f"the reference splits it into rotary (T, H, W) parts {(t, h, w)} that must all be even",
            )
        if self.qk_norm != "rms_norm_across_heads":
            bad(
                "qk_norm", self.qk_norm,
                "diffusers' WanTransformer3DModel always applies RMSNorm across heads; only "
                "'rms_norm_across_heads' is accepted",
            )
        if not isinstance(self.cross_attn_norm, bool):
            bad("cross_attn_norm", self.cross_attn_norm, "expected true or false")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or self.eps <= 0:
            bad("eps", self.eps, "expected a positive float")
        if self.pos_embed_seq_len is not None and self.image_dim is None:
            bad("pos_embed_seq_len", self.pos_embed_seq_len, "it needs image_dim (the image embedder)")
        if (
            self.image_dim is not None
            and self.added_kv_proj_dim is not None
            and self.added_kv_proj_dim != self.inner_dim
        ):
            bad(
                "added_kv_proj_dim", self.added_kv_proj_dim,
                f"the image embedder outputs num_attention_heads*attention_head_dim={self.inner_dim} "
                "features, which the image key/value projections take",
            )


# ---------------------------------------------------------------------------------------------
# The whole checkpoint (configs only)


#: ``WanPipeline.__call__``'s defaults in diffusers, and the fps of its examples.
WAN_DEFAULTS = CallDefaults(height=480, width=832, num_frames=81, num_inference_steps=50, guidance_scale=5.0,
                            max_sequence_length=512, fps=16)


@dataclasses.dataclass(frozen=True)
class WanInfo(CheckpointInfo):
    """A Wan folder's configs (see :class:`~vidax.pipelines.checkpoint.CheckpointInfo`).

    Attributes:
        transformer_configs: of ``transformer`` (and ``transformer_2`` with a ``boundary_ratio``).
        vae_config: the VAE's.
        boundary_ratio: switch point of the two experts (fraction of ``num_train_timesteps``).
        expand_timesteps: one timestep per token (TI2V-5B).
    """

    transformer_configs: tuple
    vae_config: WanVAEConfig
    boundary_ratio: float | None
    expand_timesteps: bool

    @property
    def has_image_encoder(self) -> bool:
        """The transformer takes CLIP image features (Wan2.1 I2V)."""
        return self.transformer_configs[0].image_dim is not None


def _variant(tasks, configs, vae: WanVAEConfig, boundary, expand) -> str:
    names = " + ".join(TASK_NAMES[t] for t in tasks)
    if expand:
        name = "Wan2.2 TI2V (per-token timesteps, 16x VAE)" if vae.spatial_compression == 16 else "Wan TI2V"
    elif len(configs) == 2:
        name = f"Wan2.2 A14B {'T2V' if tasks == ('t2v',) else 'I2V'} (two experts, boundary_ratio={boundary})"
    elif tasks == ("i2v",):
        name = "Wan2.1 I2V (CLIP image encoder)" if configs[0].image_dim is not None else "Wan I2V (no image encoder)"
    else:
        name = "Wan2.1 T2V"
    return f"{name}: {names}"


def read_wan_checkpoint(checkpoint: Checkpoint) -> WanInfo:
    """Read and cross-check a Wan folder's configs.

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: a setting vidax does not implement, or components that do not fit
            together (the message names the file, the key and what is valid).
    """
    ckpt, src = checkpoint, checkpoint.source
    for name in ("tokenizer", "text_encoder", "transformer", "vae", "scheduler"):
        ckpt.folder(name)
    boundary = ckpt.index.get("boundary_ratio")
    expand = ckpt.index.get("expand_timesteps", False)
    if not isinstance(expand, bool):
        raise ConfigError(f"{src}: expand_timesteps={expand!r} must be true or false")
    if boundary is not None and (isinstance(boundary, bool) or not isinstance(boundary, (int, float))
                                 or not 0.0 <= boundary <= 1.0):
        raise ConfigError(f"{src}: boundary_ratio={boundary!r} must be null or a number in [0, 1]")
    names = ["transformer"]
    if boundary is not None and not ckpt.has("transformer_2"):
        raise ConfigError(f"{src}: boundary_ratio={boundary!r} hands the low-noise steps to transformer_2, "
                          "but the checkpoint has no transformer_2; set boundary_ratio to null or add it")
    if ckpt.has("transformer_2") and boundary is None:
        logger.warning("%s: transformer_2 is never used without a boundary_ratio (as in diffusers); "
                       "not loading it", src)
    elif ckpt.has("transformer_2"):
        ckpt.folder("transformer_2")
        names.append("transformer_2")
    configs = tuple(ckpt.typed_config(n, WanTransformerConfig) for n in names)
    vae = ckpt.typed_config("vae", WanVAEConfig)
    z, first = vae.z_dim, configs[0]
    for name, c in zip(names, configs):
        file = ckpt.config_file(name)
        if c.pos_embed_seq_len is not None:
            raise ConfigError(f"{file}: pos_embed_seq_len={c.pos_embed_seq_len} is the first-last-frame "
                              "(FLF2V) model; vidax does not implement first-last-frame-to-video")
        if c.out_dim != z:
            raise ConfigError(f"{file}: out_channels={c.out_dim} must equal the VAE's z_dim={z}")
        if (c.in_channels, tuple(c.patch_size)) != (first.in_channels, tuple(first.patch_size)):
            raise ConfigError(
                f"{file}: in_channels={c.in_channels}, patch_size={list(c.patch_size)} differ from "
                f"transformer/config.json ({first.in_channels}, {list(first.patch_size)}); both "
                "experts denoise the same latents")
        if c.image_dim is not None and not ckpt.has("image_encoder"):
            raise ConfigError(f"{file}: image_dim={c.image_dim} takes CLIP image features, but {src} names "
                              "no image_encoder (the reference pipeline cannot run this combination either)")
    want = {z: ("t2v",), 2 * z + 4: ("i2v",)}
    if expand:
        if first.in_channels != z:
            raise ConfigError(f"{ckpt.config_file('transformer')}: in_channels={first.in_channels}; with "
                              f"expand_timesteps the latents go in as they are, so it must be z_dim={z}")
        tasks = ("t2v", "i2v")
    elif first.in_channels in want:
        tasks = want[first.in_channels]
    else:
        raise ConfigError(f"{ckpt.config_file('transformer')}: in_channels={first.in_channels} fits neither "
                          f"text-to-video (z_dim={z}) nor image-to-video (2 * z_dim + 4 = {2 * z + 4})")
    s = vae.spatial_compression
    _, ph, pw = first.patch_size
    return WanInfo(
        checkpoint=ckpt, tasks=tasks, variant=_variant(tasks, configs, vae, boundary, expand),
        defaults=WAN_DEFAULTS.for_checkpoint(ckpt), transformers=tuple(names),
        size_multiple=(int(np.lcm(16, s * ph)), int(np.lcm(16, s * pw))),
        size_reason=f"the VAE's {s}x spatial compression times the transformer's {ph}x{pw} patches, "
                    "and at least 16",
        transformer_configs=configs, vae_config=vae, boundary_ratio=boundary, expand_timesteps=expand)
