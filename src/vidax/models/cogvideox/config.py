"""Configuration of the CogVideoX diffusion transformer (``transformer/config.json``), of its VAE
(``vae/config.json``, :class:`CogVideoXVAEConfig`) and of a whole CogVideoX checkpoint folder
(:func:`read_cogvideox_checkpoint`, configs only)."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from vidax.checkpoint import TASK_NAMES, CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import (
    ACTIVATIONS,
    FFN_ACTIVATIONS,
    VAE_SIZES,
    ConfigBase,
    TransformerConfig,
    check_positive_ints,
    check_vae_blocks,
)
from vidax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CogVideoXTransformerConfig(TransformerConfig):
    """Settings of ``diffusers.CogVideoXTransformer3DModel``, with its ``__init__`` defaults.

    Covers CogVideoX-2B (sincos 3-D position embedding), 5B (3-D RoPE on the video tokens), 5B-I2V
    (RoPE + learned position embedding, 32 input channels), 1.5-5B (``patch_size_t=2``, linear
    patch embedding) and 1.5-5B-I2V (+ the ``ofs`` embedding).

    Attributes:
        num_attention_heads: N.
        attention_head_dim: K; the model width is ``D = N * K``.
        in_channels: latent channels in (I2V: noise + image latent channels).
        out_channels: latent channels out.
        time_embed_dim: width E of the timestep embedding fed to every adaptive norm.
        ofs_embed_dim: width of the ``ofs`` embedding (1.5-I2V) or ``None``/0 (none); when set
            it must equal ``time_embed_dim`` (the reference adds the two).
        text_embed_dim: width of the text-encoder states (T5-XXL: 4096).
        num_layers: number of transformer blocks.
        attention_bias: bias in the q/k/v projections.
        sample_width, sample_height: latent size (after the VAE, before patching) the model was
            trained at: the sincos / learned position tables and the RoPE crop region use it.
        sample_frames: pixel frame count the position tables were built for
            (``(T - 1) * temporal_compression_ratio + 1`` for T latent frames).
        patch_size: p, spatial patch edge.
        patch_size_t: temporal patch length (1.5) or ``None`` (1.0: one frame per patch).
        temporal_compression_ratio: the VAE's frame compression, used with ``sample_frames``.
        max_text_seq_length: text tokens the position table reserves (L_txt must equal it when
            a position table is added).
        activation_fn: feed-forward activation, one of :data:`vidax.config.FFN_ACTIVATIONS`.
        timestep_activation_fn: activation inside the timestep MLPs.
        norm_elementwise_affine: LayerNorms carry weight and bias.
        norm_eps: epsilon of the block, final and output LayerNorms.
        spatial_interpolation_scale, temporal_interpolation_scale: position divisors of the
            sincos table.
        use_rotary_positional_embeddings: 3-D RoPE on the video queries and keys; when false the
            sincos table is added to the tokens.
        use_learned_positional_embeddings: a learned table (checkpoint tensor
            ``patch_embed.pos_embedding``) instead of the sincos one (requires RoPE, as the
            reference).
        patch_bias: bias of the 1.0 patch-embedding convolution (the 1.5 linear patch
            embedding always has one, as in the reference).
        flip_sin_to_cos, freq_shift: the timestep and ofs sinusoids' order (cosines first) and
            frequency denominator shift (:func:`vidax.nn.layers.timestep_sinusoid`).
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset({"dropout"})  # inference: dropout is off
    num_attention_heads: int = 30
    attention_head_dim: int = 64
    in_channels: int = 16
    out_channels: int | None = 16
    time_embed_dim: int = 512
    ofs_embed_dim: int | None = None
    text_embed_dim: int = 4096
    num_layers: int = 30
    attention_bias: bool = True
    sample_width: int = 90
    sample_height: int = 60
    sample_frames: int = 49
    patch_size: int = 2
    patch_size_t: int | None = None
    temporal_compression_ratio: int = 4
    max_text_seq_length: int = 226
    activation_fn: str = "gelu-approximate"
    timestep_activation_fn: str = "silu"
    norm_elementwise_affine: bool = True
    norm_eps: float = 1e-5
    spatial_interpolation_scale: float = 1.875
    temporal_interpolation_scale: float = 1.0
    use_rotary_positional_embeddings: bool = False
    use_learned_positional_embeddings: bool = False
    patch_bias: bool = True
    flip_sin_to_cos: bool = True
    freq_shift: float = 0

    @property
    def sinusoid(self) -> tuple[bool, float]:
        """The ``(flip_sin_to_cos, downscale_freq_shift)`` of the timestep (and ofs) sinusoids."""
        return self.flip_sin_to_cos, self.freq_shift

    @property
    def has_ofs(self) -> bool:
        """Whether the model has the ``ofs`` embedding (the reference tests ``if ofs_embed_dim``)."""
        return bool(self.ofs_embed_dim)

    @property
    def patch_t(self) -> int:
        """Latent frames per patch: ``patch_size_t`` or 1."""
        return self.patch_size_t or 1

    @property
    def uses_position_table(self) -> bool:
        """Whether a sincos or learned table is added to the tokens (the reference's
        ``use_positional_embeddings or use_learned_positional_embeddings``)."""
        return (not self.use_rotary_positional_embeddings) or self.use_learned_positional_embeddings

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Head-dim channels of the (T, H, W) rotary axes: ``(K/4, 3K/8, 3K/8)`` (floored)."""
        k = self.attention_head_dim
        return k // 4, k // 8 * 3, k // 8 * 3

    def validate(self, source: str) -> None:
        self._check_values(source)
        self._check_embeddings(source)

    def _check_values(self, source: str) -> None:
        """Each setting alone: sizes, flags, numbers, activations."""
        self.check_positive(
            source,
            (
                "num_attention_heads",
                "attention_head_dim",
                "in_channels",
                "out_channels",
                "time_embed_dim",
                "text_embed_dim",
                "num_layers",
                "sample_width",
                "sample_height",
                "sample_frames",
                "patch_size",
                "temporal_compression_ratio",
                "max_text_seq_length",
            ),
        )
        for key in ("patch_size_t", "ofs_embed_dim"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                self.invalid(source, key, value, "expected a non-negative int or null")
        if self.patch_size_t == 0:
            self.invalid(source, "patch_size_t", 0, "expected a positive int or null")
        for key in (
            "attention_bias",
            "norm_elementwise_affine",
            "use_rotary_positional_embeddings",
            "use_learned_positional_embeddings",
            "patch_bias",
            "flip_sin_to_cos",
        ):
            if not isinstance(getattr(self, key), bool):
                self.invalid(source, key, getattr(self, key), "expected true or false")
        if not isinstance(self.freq_shift, (int, float)) or isinstance(self.freq_shift, bool):
            self.invalid(source, "freq_shift", self.freq_shift, "expected a number")
        for width in (self.inner_dim, self.ofs_embed_dim) if self.has_ofs else (self.inner_dim,):
            if width // 2 == self.freq_shift:
                self.invalid(
                    source,
                    "freq_shift",
                    self.freq_shift,
                    f"the reference divides by (width // 2 - freq_shift), zero for the sinusoid of "
                    f"width {width}: its timestep embedding is NaN",
                )
        for key in ("norm_eps", "spatial_interpolation_scale", "temporal_interpolation_scale"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                self.invalid(source, key, value, "expected a positive number")
        if self.activation_fn not in FFN_ACTIVATIONS:
            self.invalid(source, "activation_fn", self.activation_fn, f"vidax implements {sorted(FFN_ACTIVATIONS)}")
        if self.timestep_activation_fn not in ACTIVATIONS:
            self.invalid(
                source, "timestep_activation_fn", self.timestep_activation_fn, f"vidax implements {list(ACTIVATIONS)}"
            )

    def _check_embeddings(self, source: str) -> None:
        """The position and timestep embeddings' settings against each other and the sizes."""
        if self.use_learned_positional_embeddings and not self.use_rotary_positional_embeddings:
            self.invalid(
                source,
                "use_learned_positional_embeddings",
                True,
                "the reference refuses learned position embeddings without rotary embeddings",
            )
        if self.has_ofs and self.ofs_embed_dim != self.time_embed_dim:
            self.invalid(
                source,
                "ofs_embed_dim",
                self.ofs_embed_dim,
                f"the reference adds the ofs embedding to the timestep embedding, so it must equal "
                f"time_embed_dim={self.time_embed_dim}",
            )
        if self.use_rotary_positional_embeddings:
            t, h, w = self.rope_split
            if t % 2 or h % 2 or t + h + w != self.attention_head_dim:
                self.invalid(
                    source,
                    "attention_head_dim",
                    self.attention_head_dim,
                    f"3-D RoPE splits it into (T, H, W) parts {(t, h, w)} that must be even and "
                    "sum to it (a multiple of 16)",
                )
            if self.sample_height < self.patch_size or self.sample_width < self.patch_size:
                self.invalid(
                    source,
                    "sample_height/sample_width",
                    (self.sample_height, self.sample_width),
                    f"the RoPE grid needs at least one patch of {self.patch_size}",
                )
        if self.uses_position_table:
            if self.inner_dim % 16:
                self.invalid(
                    source,
                    "num_attention_heads*attention_head_dim",
                    self.inner_dim,
                    "the 3-D sincos table needs a multiple of 16 (even parts of D/4 and 3D/8)",
                )
            if self.patch_size_t is not None:
                self.invalid(
                    source,
                    "patch_size_t",
                    self.patch_size_t,
                    "the reference's position table does not account for temporal patches; "
                    "patch_size_t needs RoPE without a position table (as CogVideoX1.5)",
                )


# ---------------------------------------------------------------------------------------------
# The VAE (``vae/config.json``)


@dataclasses.dataclass(frozen=True)
class CogVideoXVAEConfig(ConfigBase):
    """Settings of ``diffusers.AutoencoderKLCogVideoX`` (its ``vae/config.json``) and defaults.

    Attributes:
        in_channels, out_channels: video channels (3).
        down_block_types, up_block_types: one entry per block, all ``CogVideoXDownBlock3D`` /
            ``CogVideoXUpBlock3D`` (the only types the reference accepts).
        block_out_channels: channels per encoder block (the decoder mirrors them); there are
            ``len(block_out_channels) - 1`` spatial 2x resamplings.
        latent_channels: latent channels ``C_z`` (16).
        layers_per_block: resnets per encoder block (decoder blocks have one more).
        norm_eps: epsilon of the encoder's resnet group norms (the decoder's spatial norms and
            both ``norm_out`` use 1e-6 whatever this is, as the reference does).
        norm_num_groups: groups of every group norm; must divide every block's channels.
        temporal_compression_ratio: a power of two; the first ``log2`` of it blocks also
            resample time.
        sample_height, sample_width: the training size; tiles are half of it (see
            :class:`CogVideoXTiling`).
        scaling_factor: latents are ``z * scaling_factor`` in the transformer's space; the
            pipelines divide by it before :meth:`CogVideoXVAE.decode`.
        act_fn: the resnets' activation (diffusers ``get_activation`` names; the output
            activation is SiLU whatever it says, as the reference).
        use_quant_conv, use_post_quant_conv: a 1x1x1 convolution on the encoder's output / on
            the latents before the decoder; the reference sizes both by ``out_channels``, so they
            need ``out_channels == latent_channels``.
        invert_scale_latents: CogVideoX 1.5 image-to-video divides the encoded image latents by
            ``scaling_factor`` instead of multiplying (read by the pipeline, not the VAE).
        shift_factor, latents_mean, latents_std: carried as read; neither this VAE nor the
            diffusers CogVideoX pipelines use them.
    """

    # force_upcast asks SD-style pipelines to run the VAE in fp32; no CogVideoX pipeline reads it.
    IGNORED: ClassVar[frozenset[str]] = frozenset({"force_upcast"})

    in_channels: int = 3
    out_channels: int = 3
    down_block_types: tuple[str, ...] = ("CogVideoXDownBlock3D",) * 4
    up_block_types: tuple[str, ...] = ("CogVideoXUpBlock3D",) * 4
    block_out_channels: tuple[int, ...] = (128, 256, 256, 512)
    latent_channels: int = 16
    layers_per_block: int = 3
    norm_eps: float = 1e-6
    norm_num_groups: int = 32
    temporal_compression_ratio: float = 4
    sample_height: int = 480
    sample_width: int = 720
    scaling_factor: float = 1.15258426
    shift_factor: float | None = None
    latents_mean: tuple[float, ...] | None = None
    latents_std: tuple[float, ...] | None = None
    invert_scale_latents: bool = False
    use_quant_conv: bool = False
    use_post_quant_conv: bool = False
    act_fn: str = "silu"

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent pixel along H and W: ``2 ** (len(block_out_channels) - 1)``."""
        return 2 ** (len(self.block_out_channels) - 1)

    @property
    def compress_time(self) -> tuple[bool, ...]:
        """Per resampling level (encoder order): whether it also halves / doubles time."""
        level = int(math.log2(self.temporal_compression_ratio))
        return tuple(i < level for i in range(len(self.block_out_channels) - 1))

    @property
    def temporal_compression(self) -> int:
        """Frames per latent frame after the first: ``2 ** sum(compress_time)``."""
        return 2 ** sum(self.compress_time)

    def validate(self, source: str) -> None:
        check_positive_ints(
            source,
            self,
            (
                *VAE_SIZES,
                "sample_height",
                "sample_width",
            ),
        )
        check_vae_blocks(
            source,
            self.block_out_channels,
            self.norm_num_groups,
            {
                "down_block_types": (self.down_block_types, "CogVideoXDownBlock3D"),
                "up_block_types": (self.up_block_types, "CogVideoXUpBlock3D"),
            },
        )
        ratio = self.temporal_compression_ratio
        if (
            isinstance(ratio, bool)
            or not isinstance(ratio, (int, float))
            or ratio < 1
            or 2 ** round(math.log2(ratio)) != ratio
        ):
            raise ConfigError(f"{source}: temporal_compression_ratio={ratio!r} must be a power of two (1, 2, 4, ...)")
        if not isinstance(self.norm_eps, (int, float)) or self.norm_eps <= 0:
            raise ConfigError(f"{source}: norm_eps={self.norm_eps!r} must be a positive number")
        if not isinstance(self.act_fn, str) or self.act_fn.lower() not in ACTIVATIONS:
            self.invalid(
                source, "act_fn", self.act_fn, f"expected one of diffusers' get_activation names {list(ACTIVATIONS)}"
            )
        for key in ("use_quant_conv", "use_post_quant_conv"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{source}: {key}={getattr(self, key)!r} must be true or false")
            if getattr(self, key) and self.out_channels != self.latent_channels:
                raise ConfigError(
                    f"{source}: {key}=true needs out_channels == latent_channels (here {self.out_channels} and "
                    f"{self.latent_channels}): the reference sizes that 1x1x1 convolution by out_channels and "
                    "applies it to the latents"
                )
        if not isinstance(self.scaling_factor, (int, float)) or self.scaling_factor <= 0:
            raise ConfigError(f"{source}: scaling_factor={self.scaling_factor!r} must be a positive number")


# ---------------------------------------------------------------------------------------------
# The whole checkpoint (configs only)

#: The schedulers the CogVideoX pipelines sample with.
SAMPLERS = ("CogVideoXDDIMScheduler", "CogVideoXDPMScheduler")


@dataclasses.dataclass(frozen=True)
class CogVideoXInfo(CheckpointInfo):
    """A CogVideoX folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`)."""

    transformer_config: CogVideoXTransformerConfig
    vae_config: CogVideoXVAEConfig

    def latent_frames(self, num_frames: int) -> tuple[int, int]:
        """``(T, padding)``: latent frames denoised and how many of them (in front) are
        CogVideoX1.5 padding dropped before decoding."""
        t = (num_frames - 1) // self.vae_config.temporal_compression + 1
        pt = self.transformer_config.patch_size_t
        pad = pt - t % pt if pt and t % pt else 0
        return t + pad, pad


def read_cogvideox_checkpoint(checkpoint: Checkpoint) -> CogVideoXInfo:
    """Read and cross-check a CogVideoX folder's configs.

    Raises:
        CheckpointError: a component folder is missing. ConfigError: an unsupported setting,
            a scheduler that is not a CogVideoX sampler, or channels that do not fit the VAE.
    """
    ckpt = checkpoint
    ckpt.require("tokenizer", "text_encoder", "transformer", "vae", "scheduler")
    cfg = ckpt.typed_config("transformer", CogVideoXTransformerConfig)
    vae = ckpt.typed_config("vae", CogVideoXVAEConfig)
    latent = vae.latent_channels
    tasks = {latent: ("t2v",), 2 * latent: ("i2v",)}.get(cfg.in_channels)
    if tasks is None:
        raise ConfigError(
            f"{ckpt.config_file('transformer')}: in_channels={cfg.in_channels} fits neither "
            f"text-to-video (latent_channels={latent}) nor image-to-video ({2 * latent})"
        )
    sched = ckpt.config("scheduler").get("_class_name")
    if sched not in SAMPLERS:
        raise ConfigError(
            f"{ckpt.config_file('scheduler')}: {sched} is not a CogVideoX sampler; the CogVideoX "
            "pipelines run CogVideoXDDIMScheduler or CogVideoXDPMScheduler"
        )
    s = vae.spatial_compression
    version = "CogVideoX1.5" if cfg.patch_size_t else "CogVideoX"
    pos = (
        "3-D RoPE" + (" + learned position table" if cfg.use_learned_positional_embeddings else "")
        if cfg.use_rotary_positional_embeddings
        else "sincos position table"
    )
    variant = (
        f"{version} {TASK_NAMES[tasks[0]]}: {cfg.num_layers} layers, width {cfg.inner_dim}, {pos}"
        f"{', ofs embedding' if cfg.has_ofs else ''}; default {cfg.sample_height * s}x"
        f"{cfg.sample_width * s}, {cfg.sample_frames} frames"
    )
    defaults = CallDefaults(
        height=cfg.sample_height * s,
        width=cfg.sample_width * s,
        num_frames=cfg.sample_frames if tasks == ("t2v",) else 49,
        num_inference_steps=50,
        guidance_scale=6.0,
        max_sequence_length=226,
        fps=16 if cfg.patch_size_t else 8,
    )
    mult = s * cfg.patch_size
    return CogVideoXInfo(
        checkpoint=ckpt,
        tasks=tasks,
        variant=variant,
        defaults=defaults.for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(mult, mult),
        size_reason=f"VAE x{s} times patch_size {cfg.patch_size}",
        transformer_config=cfg,
        vae_config=vae,
    )
