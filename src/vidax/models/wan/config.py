"""Configuration of the Wan 2.1 / 2.2 diffusion transformer (``transformer/config.json``), of the
Wan VAE (``vae/config.json``, :class:`WanVAEConfig`) and of a whole Wan checkpoint folder
(:func:`read_wan_checkpoint`, configs only)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from vidax.checkpoint import TASK_NAMES, CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import ConfigBase, TransformerConfig
from vidax.errors import ConfigError

logger = logging.getLogger("vidax.pipeline")


@dataclasses.dataclass(frozen=True)
class WanTransformerConfig(TransformerConfig):
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
    def rope_split(self) -> tuple[int, int, int]:
        """Head-dim channels given to the (T, H, W) rotary axes, as ``WanRotaryPosEmbed``."""
        h = w = 2 * (self.attention_head_dim // 6)
        return self.attention_head_dim - h - w, h, w

    def validate(self, source: str) -> None:
        p = self.patch_size
        if not (isinstance(p, tuple) and len(p) == 3 and all(isinstance(x, int) and x > 0 for x in p)):
            self.invalid(source, "patch_size", p, "expected three positive ints (p_t, p_h, p_w)")
        self.check_positive(
            source,
            (
                "num_attention_heads",
                "attention_head_dim",
                "in_channels",
                "text_dim",
                "freq_dim",
                "ffn_dim",
                "num_layers",
                "rope_max_seq_len",
            ),
            nullable=("out_channels", "image_dim", "added_kv_proj_dim", "pos_embed_seq_len"),
        )
        if self.freq_dim < 2:
            self.invalid(source, "freq_dim", self.freq_dim, "expected at least 2 (half of it are frequencies)")
        t, h, w = self.rope_split
        if self.attention_head_dim % 2:
            self.invalid(
                source,
                "attention_head_dim",
                self.attention_head_dim,
                f"the reference splits it into rotary (T, H, W) parts {(t, h, w)} that must all be even",
            )
        if self.qk_norm != "rms_norm_across_heads":
            self.invalid(
                source,
                "qk_norm",
                self.qk_norm,
                "diffusers' WanTransformer3DModel always applies RMSNorm across heads; only "
                "'rms_norm_across_heads' is accepted",
            )
        if not isinstance(self.cross_attn_norm, bool):
            self.invalid(source, "cross_attn_norm", self.cross_attn_norm, "expected true or false")
        if not isinstance(self.eps, (int, float)) or isinstance(self.eps, bool) or self.eps <= 0:
            self.invalid(source, "eps", self.eps, "expected a positive float")
        if self.pos_embed_seq_len is not None and self.image_dim is None:
            self.invalid(source, "pos_embed_seq_len", self.pos_embed_seq_len, "it needs image_dim (the image embedder)")
        if (
            self.image_dim is not None
            and self.added_kv_proj_dim is not None
            and self.added_kv_proj_dim != self.inner_dim
        ):
            self.invalid(
                source,
                "added_kv_proj_dim",
                self.added_kv_proj_dim,
                f"the image embedder outputs num_attention_heads*attention_head_dim={self.inner_dim} "
                "features, which the image key/value projections take",
            )


# ---------------------------------------------------------------------------------------------
# The VAE (``vae/config.json``)


_WAN21_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)  # fmt: skip
_WAN21_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class WanVAEConfig(ConfigBase):
    """Settings of ``diffusers.AutoencoderKLWan`` (its ``vae/config.json``), with its defaults.

    Attributes:
        base_dim: channels of the encoder's first level (96 for Wan2.1, 160 for Wan2.2).
        decoder_base_dim: channels of the decoder's last level; ``None`` = ``base_dim``.
        z_dim: latent channels ``C_z`` (16 for Wan2.1, 48 for Wan2.2).
        dim_mult: channel multipliers per level; ``len(dim_mult) - 1`` spatial 2x resamplings.
        num_res_blocks: residual blocks per encoder level (the decoder has one more).
        temperal_downsample: per resampling level, whether it also halves time (the decoder
            mirrors it). The reference's spelling.
        latents_mean, latents_std: per-channel latent statistics (length ``z_dim``), used by
            :func:`~vidax.models.wan.vae.normalize_latents` / ``denormalize_latents``.
        in_channels, out_channels: channels of the encoder's input / decoder's output after
            patchifying: video channels times ``patch_size ** 2`` (3 for Wan2.1, 12 for Wan2.2).
        is_residual: Wan2.2's residual down / up blocks (see :mod:`vidax.models.wan.vae`).
        patch_size: p of the pixel-to-channel folding, ``None`` (or 1) for none.
        scale_factor_temporal, scale_factor_spatial: the compression factors the pipelines read
            (4 and 8 for Wan2.1, 4 and 16 for Wan2.2); checked against the architecture when not
            ``None``.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {
            "dropout",  # a no-op at inference
            # Not a diffusers 0.42.1 setting: from_config drops it and decode always clamps
            # (see the vidax.models.wan.vae docstring).
            "clip_output",
        }
    )
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {"attn_scales": ([], ())}

    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = _WAN21_MEAN
    latents_std: tuple[float, ...] = _WAN21_STD
    in_channels: int = 3
    out_channels: int = 3
    is_residual: bool = False
    patch_size: int | None = None
    scale_factor_temporal: int | None = 4
    scale_factor_spatial: int | None = 8

    @property
    def latent_channels(self) -> int:
        """``z_dim`` under the name the other video VAE configs give it."""
        return self.z_dim

    @property
    def temporal_compression(self) -> int:
        """Frames per latent frame after the first: ``2 ** sum(temperal_downsample)``."""
        return 2 ** sum(bool(t) for t in self.temperal_downsample)

    @property
    def patch(self) -> int:
        """The pixel-folding factor p (1 when ``patch_size`` is ``None``)."""
        return self.patch_size or 1

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W: ``2 ** (len(dim_mult) - 1) * p``."""
        return 2 ** (len(self.dim_mult) - 1) * self.patch

    @property
    def video_in_channels(self) -> int:
        """Channels of the video :meth:`WanVAE.encode` takes: ``in_channels / p**2`` (3)."""
        return self.in_channels // self.patch**2

    @property
    def video_out_channels(self) -> int:
        """Channels of the video :meth:`WanVAE.decode` returns: ``out_channels / p**2`` (3)."""
        return self.out_channels // self.patch**2

    @property
    def pixel_multiple(self) -> int:
        """H and W of an encoded video must be multiples of this: p, times the spatial
        down-sampling for the residual encoder (whose shortcut folds 2 x 2 blocks exactly)."""
        return self.spatial_compression if self.is_residual else self.patch

    def validate(self, source: str) -> None:
        def positive_int(name: str, value: Any) -> None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{source}: {name}={value!r} must be a positive integer")

        for name in ("base_dim", "z_dim", "num_res_blocks", "in_channels", "out_channels"):
            positive_int(name, getattr(self, name))
        if self.decoder_base_dim is not None:
            positive_int("decoder_base_dim", self.decoder_base_dim)
        if self.patch_size is not None:
            positive_int("patch_size", self.patch_size)
            for name in ("in_channels", "out_channels"):
                if getattr(self, name) % self.patch_size**2:
                    raise ConfigError(
                        f"{source}: {name}={getattr(self, name)} is not a multiple of "
                        f"patch_size**2={self.patch_size**2}; with patch_size it counts the "
                        "video channels folded with each p x p pixel block"
                    )
        if not isinstance(self.is_residual, bool):
            raise ConfigError(f"{source}: is_residual={self.is_residual!r} must be true or false")
        if not isinstance(self.dim_mult, tuple) or not self.dim_mult:
            raise ConfigError(f"{source}: dim_mult={self.dim_mult!r} must be a non-empty list")
        for m in self.dim_mult:
            positive_int("dim_mult entry", m)
        if (
            not isinstance(self.temperal_downsample, tuple)
            or len(self.temperal_downsample) != len(self.dim_mult) - 1
            or not all(isinstance(t, bool) for t in self.temperal_downsample)
        ):
            raise ConfigError(
                f"{source}: temperal_downsample={self.temperal_downsample!r} must be a list of "
                f"{len(self.dim_mult) - 1} booleans (len(dim_mult) - 1)"
            )
        for name in ("latents_mean", "latents_std"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or len(value) != self.z_dim:
                raise ConfigError(
                    f"{source}: {name} has {len(value) if isinstance(value, tuple) else value!r} "
                    f"entries; it needs z_dim={self.z_dim}"
                )
        if any(s == 0 for s in self.latents_std):
            raise ConfigError(f"{source}: latents_std={self.latents_std!r} has a zero entry")
        if self.is_residual:
            self._validate_residual(source)
        for name, want in (
            ("scale_factor_temporal", self.temporal_compression),
            ("scale_factor_spatial", self.spatial_compression),
        ):
            value = getattr(self, name)
            if value is not None and value != want:
                raise ConfigError(
                    f"{source}: {name}={value!r} disagrees with the architecture, which "
                    f"compresses by {want} (from dim_mult / temperal_downsample / patch_size)"
                )

    def _validate_residual(self, source: str) -> None:
        """The channel divisibility ``AvgDown3D`` / ``DupUp3D`` require (the reference raises)."""
        for kind, in_dim, out_dim, factor in _residual_shortcuts(self):
            ok = (in_dim * factor) % out_dim == 0 if kind == "down" else (
                out_dim * factor) % in_dim == 0  # fmt: skip
            if not ok:
                raise ConfigError(
                    f"{source}: is_residual=True needs each {kind}-block shortcut to fold "
                    f"channels evenly, but {in_dim} -> {out_dim} channels with a "
                    f"{factor}x space-time factor does not divide (from base_dim / "
                    "decoder_base_dim / dim_mult / temperal_downsample)"
                )


def encoder_levels(config: WanVAEConfig) -> list[tuple[int, int, bool, bool]]:
    """Per encoder level: (in channels, out channels, halves time, halves space)."""
    dims = [config.base_dim * u for u in (1,) + tuple(config.dim_mult)]
    last = len(config.dim_mult) - 1
    return [
        (a, b, i != last and bool(config.temperal_downsample[i]), i != last)
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))
    ]


def decoder_levels(config: WanVAEConfig) -> list[tuple[int, int, bool, bool]]:
    """Per decoder level: (in channels, out channels, doubles time, doubles space).

    Wan2.1's up-samplers halve the channels, so levels after the first take half their nominal
    input; Wan2.2's residual up-samplers keep them.
    """
    mult = tuple(config.dim_mult)
    dims = [(config.decoder_base_dim or config.base_dim) * u for u in (mult[-1],) + mult[::-1]]
    temperal_upsample = tuple(config.temperal_downsample)[::-1]
    last = len(mult) - 1
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        if i > 0 and not config.is_residual:
            a //= 2
        out.append((a, b, i != last and bool(temperal_upsample[i]), i != last))
    return out


def _residual_shortcuts(config: WanVAEConfig) -> Iterator[tuple[str, int, int, int]]:
    """(``"down"`` / ``"up"``, in channels, out channels, space-time factor) of each shortcut."""
    for a, b, t, sp in encoder_levels(config):
        yield "down", a, b, (2 if t else 1) * (4 if sp else 1)
    for a, b, t, sp in decoder_levels(config):
        if sp:
            yield "up", a, b, (2 if t else 1) * 4


# ---------------------------------------------------------------------------------------------
# The whole checkpoint (configs only)


#: ``WanPipeline.__call__``'s defaults in diffusers, and the fps of its examples.
WAN_DEFAULTS = CallDefaults(
    height=480, width=832, num_frames=81, num_inference_steps=50, guidance_scale=5.0, max_sequence_length=512, fps=16
)


@dataclasses.dataclass(frozen=True)
class WanInfo(CheckpointInfo):
    """A Wan folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`).

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
        name = (
            "Wan2.1 FLF2V (CLIP features of the first and last frames)"
            if configs[0].pos_embed_seq_len
            else "Wan2.1 I2V (CLIP image encoder)"
            if configs[0].image_dim is not None
            else "Wan I2V (no image encoder)"
        )
    else:
        name = "Wan2.1 T2V"
    return f"{name}: {names}"


def _experts(ckpt: Checkpoint) -> tuple[list[str], Any, bool]:
    """``(names, boundary_ratio, expand_timesteps)`` of model_index.json: the transformers
    loaded (``transformer_2`` too where a ``boundary_ratio`` hands it the low-noise steps).

    Raises:
        ConfigError: a setting of another type or range; a boundary without ``transformer_2``.
    """
    src = ckpt.source
    boundary = ckpt.index.get("boundary_ratio")
    expand = ckpt.index.get("expand_timesteps", False)
    if not isinstance(expand, bool):
        raise ConfigError(f"{src}: expand_timesteps={expand!r} must be true or false")
    if boundary is not None and (
        isinstance(boundary, bool) or not isinstance(boundary, (int, float)) or not 0.0 <= boundary <= 1.0
    ):
        raise ConfigError(f"{src}: boundary_ratio={boundary!r} must be null or a number in [0, 1]")
    names = ["transformer"]
    if boundary is not None and not ckpt.has("transformer_2"):
        raise ConfigError(
            f"{src}: boundary_ratio={boundary!r} hands the low-noise steps to transformer_2, "
            "but the checkpoint has no transformer_2; set boundary_ratio to null or add it"
        )
    if ckpt.has("transformer_2") and boundary is None:
        logger.warning(
            "%s: transformer_2 is never used without a boundary_ratio (as in diffusers); not loading it", src
        )
    elif ckpt.has("transformer_2"):
        ckpt.folder("transformer_2")
        names.append("transformer_2")
    return names, boundary, expand


def _check_expert(ckpt: Checkpoint, file: str, c: WanTransformerConfig, first: WanTransformerConfig, z: int) -> None:
    """Transformer config ``c`` (of ``file``) against the VAE's ``z`` channels, the first
    transformer's ``first`` and the image encoder.

    Raises:
        ConfigError: naming ``file``, the key and what fits.
    """
    if c.pos_embed_seq_len is not None and ckpt.has("image_encoder"):
        # FLF2V: the reference regroups the CLIP tokens of the first and last image (2 x L_img) and
        # adds the position embedding to them, so it must span exactly two images' tokens.
        vision = ckpt.config("image_encoder")
        vision = vision.get("vision_config", vision)
        size, patch = vision.get("image_size"), vision.get("patch_size")
        if isinstance(size, int) and isinstance(patch, int) and patch > 0:
            tokens = (size // patch) ** 2 + 1
            if c.pos_embed_seq_len != 2 * tokens:
                raise ConfigError(
                    f"{file}: pos_embed_seq_len={c.pos_embed_seq_len} must be twice the CLIP tokens of one "
                    f"image ({tokens}: image_size={size} / patch_size={patch}, squared, + 1, in "
                    f"{ckpt.config_file('image_encoder')}): the first and the last image's features"
                )
    if c.out_dim != z:
        raise ConfigError(f"{file}: out_channels={c.out_dim} must equal the VAE's z_dim={z}")
    if (c.in_channels, tuple(c.patch_size)) != (first.in_channels, tuple(first.patch_size)):
        raise ConfigError(
            f"{file}: in_channels={c.in_channels}, patch_size={list(c.patch_size)} differ from "
            f"transformer/config.json ({first.in_channels}, {list(first.patch_size)}); both "
            "experts denoise the same latents"
        )
    if c.image_dim is not None and not ckpt.has("image_encoder"):
        raise ConfigError(
            f"{file}: image_dim={c.image_dim} takes CLIP image features, but {ckpt.source} names "
            "no image_encoder (the reference pipeline cannot run this combination either)"
        )


def _tasks(ckpt: Checkpoint, first: WanTransformerConfig, z: int, expand: bool) -> tuple[str, ...]:
    """The tasks the transformer's input channels fit: text-to-video (``z``), image-to-video
    (``2 z + 4``: the latents, the image's and its mask) or both (``expand_timesteps``: Wan2.2 TI2V).

    Raises:
        ConfigError: ``in_channels`` fits none.
    """
    want = {z: ("t2v",), 2 * z + 4: ("i2v",)}
    if expand:
        if first.in_channels != z:
            raise ConfigError(
                f"{ckpt.config_file('transformer')}: in_channels={first.in_channels}; with "
                f"expand_timesteps the latents go in as they are, so it must be z_dim={z}"
            )
        tasks = ("t2v", "i2v")
    elif first.in_channels in want:
        tasks = want[first.in_channels]
    else:
        raise ConfigError(
            f"{ckpt.config_file('transformer')}: in_channels={first.in_channels} fits neither "
            f"text-to-video (z_dim={z}) nor image-to-video (2 * z_dim + 4 = {2 * z + 4})"
        )
    return tasks


def read_wan_checkpoint(
    checkpoint: Checkpoint, *, transformer_config: type = WanTransformerConfig, defaults: CallDefaults = WAN_DEFAULTS
) -> WanInfo:
    """Read and cross-check a Wan folder's configs.

    Args:
        checkpoint: the folder.
        transformer_config: the transformer's config class (a :class:`WanTransformerConfig`, or a
            subclass for a family on Wan's layout: SkyReels-V2).
        defaults: the call defaults of the reference pipeline.

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: a setting vidax does not implement, or components that do not fit
            together (the message names the file, the key and what is valid).
    """
    ckpt = checkpoint
    ckpt.require("tokenizer", "text_encoder", "transformer", "vae", "scheduler")
    names, boundary, expand = _experts(ckpt)
    configs = tuple(ckpt.typed_config(n, transformer_config) for n in names)
    vae = ckpt.typed_config("vae", WanVAEConfig)
    z, first = vae.z_dim, configs[0]
    for name, c in zip(names, configs):
        _check_expert(ckpt, ckpt.config_file(name), c, first, z)
    tasks = _tasks(ckpt, first, z, expand)
    s = vae.spatial_compression
    _, ph, pw = first.patch_size
    multiple = (int(np.lcm(16, s * ph)), int(np.lcm(16, s * pw)))
    reason = f"the VAE's {s}x spatial compression times the transformer's {ph}x{pw} patches"
    if multiple != (s * ph, s * pw):  # vidax's multiple of 16 (the product alone is smaller or other)
        reason += ", and multiples of 16"
    return WanInfo(
        checkpoint=ckpt,
        tasks=tasks,
        variant=_variant(tasks, configs, vae, boundary, expand),
        defaults=defaults.for_checkpoint(ckpt),
        transformers=tuple(names),
        size_multiple=multiple,
        size_reason=reason,
        transformer_configs=configs,
        vae_config=vae,
        boundary_ratio=boundary,
        expand_timesteps=expand,
    )
