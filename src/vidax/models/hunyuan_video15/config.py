"""Configuration of HunyuanVideo 1.5 (``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-*``:
480p / 720p, T2V / I2V, CFG-distilled and step-distilled): frozen dataclasses built from each
component's ``config.json``. The denoising transformer is
:class:`HunyuanVideo15TransformerConfig`. Not HunyuanVideo 1.0 (:mod:`vidax.models.hunyuan_video`),
whose double-stream blocks this model shares."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import ConfigBase, is_positive_int
from vidax.errors import ConfigError
from vidax.models.hunyuan_video.config import CompressionRatios, HunyuanBlocksConfig

# ---------------------------------------------------------------------------------------------
# The transformer (``transformer/config.json``)

#: Hidden width of the byT5 glyph projection (``HunyuanVideo15ByT5TextProjection(..., 2048, D)``,
#: fixed in the reference).
BYT5_PROJECTION_DIM = 2048

#: ``task_type`` values of the released configs.
TASK_TYPES = ("t2v", "i2v")


@dataclasses.dataclass(frozen=True)
class HunyuanVideo15TransformerConfig(HunyuanBlocksConfig):
    """Settings of ``diffusers.HunyuanVideo15Transformer3DModel`` (0.42.1), with its defaults.

    Every field is implemented. ``target_size`` and ``task_type`` do not change the model (the
    reference pipeline reads them: the video's pixel size and whether it encodes an image); they
    are checked and kept for it.

    Attributes:
        in_channels, out_channels: latent channels in (65: latents, condition latents, mask) /
            out (null means ``in_channels``, as the reference).
        num_attention_heads, attention_head_dim: N and K; the width is ``D = N·K``.
        num_layers: double-stream blocks (``transformer_blocks``).
        num_refiner_layers: blocks of the Qwen2.5-VL text token refiner.
        mlp_ratio: feed-forward width ``int(D · mlp_ratio)`` of the blocks (the token refiner's
            is ``4·D`` whatever it says, as HunyuanVideo 1.0's).
        patch_size, patch_size_t: spatial and temporal patch of the patch embedding.
        qk_norm: a per-head norm of q and k, as HunyuanVideo's (not null: the reference calls
            ``norm_q`` unconditionally).
        text_embed_dim: width of the Qwen2.5-VL hidden states.
        text_embed_2_dim: width of the byT5 glyph encoder states.
        image_embed_dim: width of the SigLIP image tokens.
        rope_theta: RoPE base.
        rope_axes_dim: head-dim channels of the (T, H, W) RoPE axes; they sum to K.
        target_size: the pipeline's pixel size bucket (640 for 480p, 960 for 720p).
        task_type: ``"t2v"`` or ``"i2v"`` (read by the pipeline).
        use_meanflow: a second timestep embedder for ``timestep_r`` (MeanFlow, the
            step-distilled checkpoints).
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    in_channels: int = 65
    out_channels: int | None = 32
    num_attention_heads: int = 16
    attention_head_dim: int = 128
    num_layers: int = 54
    num_refiner_layers: int = 2
    mlp_ratio: float = 4.0
    patch_size: int = 1
    patch_size_t: int = 1
    qk_norm: str | None = "rms_norm"
    text_embed_dim: int = 3584
    text_embed_2_dim: int = 1472
    image_embed_dim: int = 1152
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)
    target_size: int = 640
    task_type: str = "i2v"
    use_meanflow: bool = False

    def validate(self, source: str) -> None:
        self.check_blocks(source, ("text_embed_2_dim", "image_embed_dim", "target_size"))
        if self.qk_norm is None:
            self.invalid(
                source,
                "qk_norm",
                None,
                "the reference calls attn.norm_q unconditionally: without a q/k norm it does not run",
            )
        if self.task_type not in TASK_TYPES:
            self.invalid(source, "task_type", self.task_type, f"diffusers 0.42.1 knows {list(TASK_TYPES)}")
        if not isinstance(self.use_meanflow, bool):
            self.invalid(source, "use_meanflow", self.use_meanflow, "expected true or false")


# ---------------------------------------------------------------------------------------------
# The VAE (``vae/config.json``)


@dataclasses.dataclass(frozen=True)
class HunyuanVideo15VAEConfig(CompressionRatios, ConfigBase):
    """Settings of ``diffusers.AutoencoderKLHunyuanVideo15`` (0.42.1), with its defaults (every
    released ``vae/config.json`` is these defaults).

    Attributes:
        in_channels, out_channels: video channels (3).
        latent_channels: latent channels ``C_z`` (32).
        block_out_channels: channels per encoder block (the decoder mirrors them).
        layers_per_block: resnets per encoder block (decoder blocks have one more).
        spatial_compression_ratio: pixels per latent pixel along H and W (16): encoder blocks
            ``i < log2(ratio)`` halve H and W.
        temporal_compression_ratio: frames per latent frame after the first (4): of the
            space-resampling encoder blocks, those ``i >= log2(spatial / temporal)`` also halve
            time; decoder blocks ``i < log2(ratio)`` double it.
        downsample_match_channel, upsample_match_channel: a resampler outputs the next block's
            channels (True) or keeps its own.
        scaling_factor: latents are ``z * scaling_factor`` in the transformer's space; the
            pipelines divide by it before decoding (no shift, no per-channel statistics).

    Refused (:class:`~vidax.errors.ConfigError`): ratios that are not powers of two, a temporal
    ratio above the spatial one, fewer blocks than space resamplings (the reference indexes
    ``block_out_channels[i + 1]``) and channel counts the reference's channel folds would floor
    (it reshapes by ``//``; such a config does not build or run there).
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 32
    block_out_channels: tuple[int, ...] = (128, 256, 512, 1024, 1024)
    layers_per_block: int = 2
    spatial_compression_ratio: int = 16
    temporal_compression_ratio: int = 4
    downsample_match_channel: bool = True
    upsample_match_channel: bool = True
    scaling_factor: float = 1.03682

    def down_blocks(self) -> tuple[tuple[int, int, int | None, bool], ...]:
        """Per encoder block ``(in, out, downsample_out or None, temporal)``, as
        ``HunyuanVideo15Encoder3D.__init__`` builds them."""
        boc, n_s = self.block_out_channels, _log2(self.spatial_compression_ratio)
        n_st = _log2(self.spatial_compression_ratio // self.temporal_compression_ratio)
        blocks, cin = [], boc[0]
        for i, c in enumerate(boc):
            if i < n_s:
                down = boc[i + 1] if self.downsample_match_channel else c
                blocks.append((cin, c, down, i >= n_st))
                cin = down
            else:
                blocks.append((cin, c, None, False))
                cin = c
        return tuple(blocks)

    def up_blocks(self) -> tuple[tuple[int, int, int | None, bool], ...]:
        """Per decoder block ``(in, out, upsample_out or None, temporal)``, as
        ``HunyuanVideo15Decoder3D.__init__`` builds them (channels ``reversed(block_out_channels)``)."""
        rev = tuple(reversed(self.block_out_channels))
        n_s, n_t = _log2(self.spatial_compression_ratio), _log2(self.temporal_compression_ratio)
        blocks, cin = [], rev[0]
        for i, c in enumerate(rev):
            if i < n_s or i < n_t:
                up = rev[i + 1] if self.upsample_match_channel else c
                blocks.append((cin, c, up, i < n_t))
                cin = up
            else:
                blocks.append((cin, c, None, False))
                cin = c
        return tuple(blocks)

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "in_channels",
                "out_channels",
                "latent_channels",
                "layers_per_block",
                "spatial_compression_ratio",
                "temporal_compression_ratio",
            ),
        )
        boc = self.block_out_channels
        if not isinstance(boc, tuple) or not boc or not all(is_positive_int(c) for c in boc):
            self.invalid(source, "block_out_channels", boc, "expected a non-empty list of positive ints")
        for key in ("downsample_match_channel", "upsample_match_channel"):
            if not isinstance(getattr(self, key), bool):
                self.invalid(source, key, getattr(self, key), "expected true or false")
        for key in ("spatial_compression_ratio", "temporal_compression_ratio"):
            v = getattr(self, key)
            if v & (v - 1):
                self.invalid(source, key, v, "expected a power of two")
        if self.temporal_compression_ratio > self.spatial_compression_ratio:
            self.invalid(
                source,
                "temporal_compression_ratio",
                self.temporal_compression_ratio,
                f"at most spatial_compression_ratio={self.spatial_compression_ratio}",
            )
        if len(boc) <= _log2(self.spatial_compression_ratio):
            self.invalid(
                source,
                "block_out_channels",
                list(boc),
                f"expected more than log2(spatial_compression_ratio)={_log2(self.spatial_compression_ratio)} "
                "blocks (the reference indexes the next block's channels)",
            )
        # The channel folds of the resamplers and the encoder / decoder shortcuts divide exactly.
        folds = [(boc[-1], 2 * self.latent_channels), (boc[-1], self.latent_channels)]
        for cin, cout, down, t in self.down_blocks():
            if down is not None:
                f = 8 if t else 4
                folds += [(down, f), (4 * cout, down)]
        for cin, cout, up, t in self.up_blocks():
            if up is not None:
                f = 8 if t else 4
                folds += [(4 * up, cout), (cout, f)]
        for num, den in folds:
            if num % den:
                self.invalid(
                    source,
                    "block_out_channels",
                    list(boc),
                    f"the reference folds {num} channels into groups of {den} (latent_channels="
                    f"{self.latent_channels}); pick channels that divide",
                )
        if (
            not isinstance(self.scaling_factor, (int, float))
            or isinstance(self.scaling_factor, bool)
            or not self.scaling_factor > 0
        ):
            self.invalid(source, "scaling_factor", self.scaling_factor, "expected a positive number")


def _log2(n: int) -> int:
    """``log2`` of a power of two (the reference compares block indices with ``np.log2``)."""
    return n.bit_length() - 1


# ---------------------------------------------------------------------------------------------
# The guider (``guider/guider_config.json``) and the checkpoint


@dataclasses.dataclass(frozen=True)
class ClassifierFreeGuidanceConfig(ConfigBase):
    """Settings of ``diffusers.ClassifierFreeGuidance`` (0.42.1), with its defaults: the guidance
    of the HunyuanVideo 1.5 pipelines (their ``guider`` component).

    Attributes:
        guidance_scale: the CFG weight ``w`` (the pipeline's default ``guidance_scale``); CFG runs
            unless it is 1 (0 with ``use_original_formulation``), as ``_is_cfg_enabled``.
        guidance_rescale: ``rescale_noise_cfg`` weight after the combination (0: off).
        use_original_formulation: ``cond + w (cond - uncond)`` instead of ``uncond + w (cond - uncond)``.
        start, stop: the fraction of steps CFG runs in; only the whole run (0, 1) is implemented.
        enabled: False: the conditional branch only.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    guidance_scale: float = 7.5
    guidance_rescale: float = 0.0
    use_original_formulation: bool = False
    start: float = 0.0
    stop: float = 1.0
    enabled: bool = True

    def validate(self, source: str) -> None:
        for key in ("guidance_scale", "guidance_rescale"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                self.invalid(source, key, v, "expected a finite number >= 0")
        for key in ("use_original_formulation", "enabled"):
            if not isinstance(getattr(self, key), bool):
                self.invalid(source, key, getattr(self, key), "expected true or false")
        for key, whole in (("start", 0.0), ("stop", 1.0)):
            if getattr(self, key) != whole:
                self.invalid(
                    source,
                    key,
                    getattr(self, key),
                    f"vidax runs guidance over every step ({key}={whole:g}); "
                    "a guider active for part of the steps is not implemented",
                )


#: ``HunyuanVideo15Pipeline.__call__``'s defaults (``num_frames=121``, ``num_inference_steps=50``,
#: ``tokenizer_max_length=1000``; the guidance scale is the guider's, the size the 16:9 bucket
#: of ``target_size``, both filled in per checkpoint; fps 24 as the released examples).
T2V_DEFAULTS = CallDefaults(
    height=480, width=848, num_frames=121, num_inference_steps=50, guidance_scale=6.0, max_sequence_length=1000, fps=24
)


def default_size(target_size: int, spatial: int, aspect: tuple[int, int] = (16, 9)) -> tuple[int, int]:
    """``(height, width)`` the reference picks without a size:
    ``calculate_default_height_width(9, 16, target_size)``: the bucket of
    ``generate_crop_size_list(target_size, spatial)`` (sizes ``(w, h)`` of at most
    ``(target_size / spatial)^2`` patches, aspect ratio at most 4) closest to ``aspect`` (w, h)
    from the landscape side."""
    num_patches = round((target_size / spatial) ** 2)
    buckets, wp, hp = [], num_patches, 1
    while wp > 0:
        if max(wp, hp) / min(wp, hp) <= 4.0:
            buckets.append((wp * spatial, hp * spatial))
        if (hp + 1) * wp <= num_patches:
            hp += 1
        else:
            wp -= 1
    ratio = float(aspect[1]) / float(aspect[0])
    diffs = [round(float(h) / float(w), 5) - ratio for h, w in buckets]
    pick = min((i for i, d in enumerate(diffs) if (d <= 0 if ratio >= 1 else d >= 0)), key=lambda i: abs(diffs[i]))
    return buckets[pick]  # the reference's (height, width) = its bucket's (first, second)


@dataclasses.dataclass(frozen=True)
class HunyuanVideo15Info(CheckpointInfo):
    """A HunyuanVideo 1.5 folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`).

    Attributes:
        transformer_config, vae_config, guider_config: the components' configs.
    """

    transformer_config: HunyuanVideo15TransformerConfig
    vae_config: HunyuanVideo15VAEConfig
    guider_config: ClassifierFreeGuidanceConfig


def read_hunyuan_video15_checkpoint(checkpoint: Checkpoint) -> HunyuanVideo15Info:
    """Read and cross-check a HunyuanVideo 1.5 folder's configs (no weights).

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: a setting vidax does not implement or components that do not fit together.
    """
    ckpt = checkpoint
    ckpt.require(
        "tokenizer", "text_encoder", "tokenizer_2", "text_encoder_2", "transformer", "vae", "scheduler", "guider"
    )
    tr = ckpt.typed_config("transformer", HunyuanVideo15TransformerConfig)
    vae = ckpt.typed_config("vae", HunyuanVideo15VAEConfig)
    guider_class = ckpt.config("guider").get("_class_name")
    if guider_class != "ClassifierFreeGuidance":
        raise ConfigError(
            f"{ckpt.config_file('guider')}: _class_name={guider_class!r}; HunyuanVideo 1.5 runs "
            "'ClassifierFreeGuidance' (its released guider)"
        )
    guider = ckpt.typed_config("guider", ClassifierFreeGuidanceConfig)
    file, c = ckpt.config_file("transformer"), vae.latent_channels
    if tr.in_channels != 2 * c + 1:
        raise ConfigError(
            f"{file}: in_channels={tr.in_channels} must be {2 * c + 1} (the VAE's latent_channels={c} "
            "x 2 + 1: latents, condition latents, mask)"
        )
    if tr.out_dim != c:
        raise ConfigError(f"{file}: out_channels={tr.out_dim} must equal the VAE's latent_channels={c}")
    for name, key, want in (
        ("text_encoder", "hidden_size", tr.text_embed_dim),
        ("text_encoder_2", "d_model", tr.text_embed_2_dim),
    ):
        got = (ckpt.configs.get(name) or {}).get(key)
        if got is not None and got != want:
            raise ConfigError(
                f"{file}: the transformer takes {want}-wide {name} states but "
                f"{ckpt.config_files.get(name)} has {key}={got}"
            )
    task = tr.task_type
    if task == "i2v":  # the image-to-video pipeline's SigLIP tower and its processor
        ckpt.require("image_encoder", "feature_extractor")
        if not ckpt.config_files.get("feature_extractor", "").endswith("preprocessor_config.json"):
            raise ConfigError(
                f"{ckpt.folder('feature_extractor')} has no preprocessor_config.json (the SigLIP "
                "image preprocessing of the image-to-video pipeline)"
            )
        from vidax.encoders.siglip import SiglipVisionConfig

        got = ckpt.typed_config("image_encoder", SiglipVisionConfig).hidden_size
        if got != tr.image_embed_dim:
            raise ConfigError(
                f"{file}: the transformer takes {tr.image_embed_dim}-wide image tokens but "
                f"{ckpt.config_files.get('image_encoder')} has hidden_size={got}"
            )
    s, p = vae.spatial_compression, tr.patch_size
    height, width = default_size(tr.target_size, s)
    kind = "step-distilled" if tr.use_meanflow else "CFG-distilled" if guider.guidance_scale == 1.0 else ""
    variant = f"HunyuanVideo 1.5 {task.upper()} ({tr.target_size}px bucket{', ' + kind if kind else ''})"
    defaults = dataclasses.replace(
        T2V_DEFAULTS, height=height, width=width, guidance_scale=float(guider.guidance_scale)
    )
    return HunyuanVideo15Info(
        checkpoint=ckpt,
        tasks=(task,),
        variant=variant,
        defaults=defaults.for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(s * p, s * p),
        size_reason=f"the VAE's {s}x spatial compression times the transformer's {p}x{p} patches",
        transformer_config=tr,
        vae_config=vae,
        guider_config=guider,
    )
