"""Configuration of the Cosmos 3 components: the denoising transformer (``transformer/config.json``
of a diffusers ``Cosmos3OmniTransformer`` export: Nano / Super on the Qwen3-VL backbone, Edge on
the Nemotron dense one) and the sound tokenizer (``sound_tokenizer/config.json``,
``Cosmos3AVAEAudioTokenizer``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from vidax.checkpoint import CallDefaults, Checkpoint, CheckpointInfo
from vidax.config import ConfigBase, TransformerConfig, is_positive_int

#: ``hidden_act`` values and what they select (diffusers ``Cosmos3VLTextMLP`` / the norm type).
HIDDEN_ACTS = ("silu", "relu2")


@dataclasses.dataclass(frozen=True)
class Cosmos3TransformerConfig(TransformerConfig):
    """Settings of ``diffusers.Cosmos3OmniTransformer`` (diffusers 0.42.1
    ``models/transformers/transformer_cosmos3.py``), with its ``__init__`` defaults.

    Implemented: the Mixture-of-Transformers layers (an understanding and a generation pathway,
    each with its own attention projections, norms and MLP), GQA, the interleaved 3-axis mRoPE,
    the token embedding, the vision / sound / action projections and the timestep embedding.
    ``hidden_act="relu2"`` (Edge) selects the squared-ReLU MLP without ``gate_proj`` and the
    Nemotron RMS norms (the same arithmetic as the Qwen3 ones in diffusers 0.42.1).

    The released Nano / Super files carry keys of NVIDIA's exporter that diffusers does not read
    (:attr:`IGNORED`), and some that describe the model: those are accepted only with the value
    diffusers implements (:attr:`NEUTRAL`).

    Attributes (widths: ``D = hidden_size``, ``K = head_dim``):
        hidden_size, intermediate_size: D and the MLP width.
        head_dim, num_attention_heads, num_key_value_heads: K, query heads N, key / value heads.
        num_hidden_layers: MoT layers.
        rms_norm_eps: epsilon of every RMS norm.
        attention_bias: q / k / v / out projection biases.
        rope_theta, rope_axes_dim: RoPE base and the (T, H, W) pairs of the interleaved mRoPE
            (``rope_axes_dim`` null: ``rope_scaling["mrope_section"]``, else (24, 20, 20)); pair
            ``j`` of the ``head_dim / 2`` is H's when ``j % 3 == 1`` and ``j < 3·H``, W's when
            ``j % 3 == 2`` and ``j < 3·W``, else T's, so the T count is not read and the counts
            need not sum to ``head_dim / 2`` (the reference runs any).
        rope_scaling: the transformers-style RoPE dict (only ``mrope_section`` is read).
        latent_channel, latent_patch_size, patch_latent_dim: vision latent channels C, spatial
            patch p and ``p·p·C`` (the width of ``proj_in`` / ``proj_out``).
        vocab_size: the token embedding's rows (and ``lm_head``'s, which this transformer holds
            but does not run).
        timestep_scale: the timesteps are multiplied by it before the sinusoid.
        sound_gen, sound_dim: the sound projections (``audio_proj_in`` / ``audio_proj_out``).
        action_gen, action_dim, num_embodiment_domains: the domain-aware action projections.
        qk_norm_for_text: the understanding pathway's q / k are RMS-normed.
        use_und_k_norm_for_gen: (with ``qk_norm_for_text`` False) the understanding keys seen by the
            generation pathway pass through ``k_norm_und_for_gen``.
        base_fps, enable_fps_modulation, sound_latent_fps, unified_3d_mrope_reset_spatial_ids,
        unified_3d_mrope_temporal_modality_margin: read by the pipeline (position ids), not here.
    """

    IGNORED: ClassVar[frozenset[str]] = frozenset(
        {
            # Loader hints and training settings of the exporter; diffusers' __init__ ignores them.
            "dtype",
            "freeze_und",
            "initializer_range",
            "model_type",
            "max_position_embeddings",
            "use_cache",
            "attention_dropout",
            "max_action_dim",
            "temporal_compression_factor_sound",
            "temporal_compression_factor",
            # diffusers 0.42.1 reads qk_norm_for_text (the released Nano carries qk_norm False next to
            # qk_norm_for_text True: the text q / k norms exist in its checkpoint).
            "qk_norm",
        }
    )
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "joint_attn_implementation": ("two_way",),
        "qk_norm_for_diffusion": (True,),
        "video_temporal_causal": (False,),
        "use_moe": (True,),
        "position_embedding_type": ("unified_3d_mrope",),
        "backbone_type": ("cosmos3_edge_nemotron_dense",),
    }

    attention_bias: bool = False
    head_dim: int = 128
    hidden_size: int = 4096
    intermediate_size: int = 12288
    base_fps: int = 24
    enable_fps_modulation: bool = True
    latent_channel: int = 48
    unified_3d_mrope_reset_spatial_ids: bool = True
    unified_3d_mrope_temporal_modality_margin: int = 15000
    latent_patch_size: int = 2
    num_attention_heads: int = 32
    num_hidden_layers: int = 36
    num_key_value_heads: int = 8
    patch_latent_dim: int = 192
    rms_norm_eps: float = 1e-6
    rope_scaling: tuple | None = None
    rope_theta: float = 5000000.0
    action_dim: int | None = None
    action_gen: bool = False
    num_embodiment_domains: int = 32
    sound_dim: int | None = None
    sound_gen: bool = False
    sound_latent_fps: float = 25.0
    timestep_scale: float = 0.001
    vocab_size: int = 151936
    hidden_act: str = "silu"
    qk_norm_for_text: bool = True
    use_und_k_norm_for_gen: bool = False
    rope_axes_dim: tuple[int, int, int] | None = None

    @property
    def attention_head_dim(self) -> int:
        """K (diffusers names it ``head_dim`` here)."""
        return self.head_dim

    @property
    def in_channels(self) -> int:
        """Width of a patch token ``p·p·C`` (``proj_in``'s input)."""
        return self.patch_latent_dim

    @property
    def out_channels(self) -> int:
        """Width of a predicted patch token (``proj_out``'s output)."""
        return self.patch_latent_dim

    @property
    def rope_scaling_dict(self) -> dict:
        return dict(self.rope_scaling or ())

    @property
    def mrope_section(self) -> tuple[int, int, int]:
        """The (T, H, W) RoPE pairs as diffusers derives them (``rope_axes_dim``, else
        ``rope_scaling["mrope_section"]``, else (24, 20, 20))."""
        if self.rope_axes_dim is not None:
            return tuple(self.rope_axes_dim)
        return tuple(self.rope_scaling_dict.get("mrope_section", (24, 20, 20)))

    @property
    def nemotron(self) -> bool:
        """Edge's variant layers (``hidden_act="relu2"``): squared-ReLU MLP without ``gate_proj``."""
        return self.hidden_act == "relu2"

    @property
    def has_und_k_norm_for_gen(self) -> bool:
        """``k_norm_und_for_gen`` exists (diffusers: ``use_und_k_norm_for_gen and not qk_norm_for_text``)."""
        return self.use_und_k_norm_for_gen and not self.qk_norm_for_text

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "head_dim",
                "hidden_size",
                "intermediate_size",
                "num_attention_heads",
                "num_hidden_layers",
                "num_key_value_heads",
                "latent_channel",
                "latent_patch_size",
                "patch_latent_dim",
                "vocab_size",
                "num_embodiment_domains",
            ),
            nullable=("action_dim", "sound_dim"),
        )
        if self.hidden_act not in HIDDEN_ACTS:
            self.invalid(source, "hidden_act", self.hidden_act, f"valid: {list(HIDDEN_ACTS)}")
        if self.num_attention_heads % self.num_key_value_heads:
            self.invalid(
                source,
                "num_key_value_heads",
                self.num_key_value_heads,
                f"num_attention_heads={self.num_attention_heads} must divide by it",
            )
        if self.patch_latent_dim != self.latent_patch_size**2 * self.latent_channel:
            self.invalid(
                source, "patch_latent_dim", self.patch_latent_dim, "expected latent_patch_size**2 * latent_channel"
            )
        sec = self.mrope_section
        if len(sec) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sec):
            self.invalid(source, "rope_axes_dim", sec, "expected three pair counts >= 0 (T, H, W)")
        if self.head_dim % 2:
            self.invalid(
                source,
                "head_dim",
                self.head_dim,
                "the reference's RoPE table is 2 x ceil(head_dim / 2) wide and fails on an odd head_dim",
            )
        rs = self.rope_scaling_dict
        if rs.get("rope_type", "default") != "default" or not rs.get("mrope_interleaved", True):
            self.invalid(source, "rope_scaling", rs, "only the default interleaved mRoPE is implemented")
        if self.sound_gen and self.sound_dim is None:
            self.invalid(source, "sound_dim", None, "sound_gen needs it")
        if self.action_gen and self.action_dim is None:
            self.invalid(source, "action_dim", None, "action_gen needs it")


@dataclasses.dataclass(frozen=True)
class Cosmos3SoundTokenizerConfig(ConfigBase):
    """Settings of ``diffusers.Cosmos3AVAEAudioTokenizer`` (diffusers 0.42.1
    ``models/autoencoders/autoencoder_cosmos3_audio.py``, ``sound_tokenizer/config.json``), with its
    ``__init__`` defaults.

    Implemented: the ``spec_convnext`` encoder (STFT features, ConvNeXt blocks, strided
    weight-normed convolutions, the VAE bottleneck's mean / scale halves) and the ``oobleck``
    decoder (weight-normed convolutions, log-scale SnakeBeta, transposed-convolution upsampling,
    dilated residual units). The switches of the reference that only have the shipped value
    (:attr:`NEUTRAL`) are refused with any other, as diffusers refuses them; ``padding_mode`` other
    than ``"zeros"`` (torch would run it) is refused too.

    Attributes (latents ``(B, vocoder_input_dim, T)``, waveforms ``(B, channels, T·hop)``):
        sampling_rate: Hz of the waveform.
        vocoder_input_dim: the decoder's latent channels (the transformer's ``sound_dim``).
        dec_dim, dec_c_mults, dec_strides: decoder base width, width multipliers and upsampling
            strides (applied in reverse order); one multiplier per stride.
        dec_out_channels: channels of the decoded waveform (2: stereo).
        stereo, input_channels: the encoder's waveform channels ``input_channels · (2 if stereo)``.
        normalize_volume: :meth:`encode` divides the waveform by its peak (times 0.95).
        hop_size: waveform samples per latent frame for the encode padding (null: ``prod(dec_strides)``).
        enc_dim, enc_c_mults, enc_strides, enc_num_blocks: encoder base width, multipliers,
            downsampling strides and ConvNeXt blocks per stage.
        enc_n_fft, enc_hop_length: the encoder's STFT size and hop.
        enc_latent_dim: encoder output channels (mean and scale halves: ``2 · vocoder_input_dim``).
        enc_use_snake: the ConvNeXt blocks' activation is SnakeBeta (else exact GELU).
        enc_intermediate_dim, enc_num_layers, enc_identity_init: accepted, unused by the reference's
            inference (widths derive from ``enc_dim``; the last is an initialisation).
        bottleneck: the bottleneck dict (only ``type`` ``"vae"``).
        encoder_enabled: the encoder exists (False: a decoder-only checkpoint; no :meth:`encode`).
    """

    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {
        "model_type": ("autoencoder_v2",),
        "use_wav_as_input": (True,),
        "enc_type": ("spec_convnext",),
        "dec_type": ("oobleck",),
        "bottleneck_type": ("vae",),
        "dec_use_snake": (True,),
        "dec_final_tanh": (False,),
        "dec_anti_aliasing": (False,),
        "dec_use_nearest_upsample": (False,),
        "dec_use_tanh_at_final": (False,),
        "activation": ("snakebeta",),
        "snake_logscale": (True,),
        "anti_aliasing": (False,),
        "use_cuda_kernel": (False,),
        "causal": (False,),
        "padding_mode": ("zeros",),
        "latent_mean": (None,),
        "latent_std": (None,),
    }

    sampling_rate: int = 48000
    vocoder_input_dim: int = 64
    dec_dim: int = 320
    dec_c_mults: tuple[int, ...] = (1, 2, 4, 8, 16)
    dec_strides: tuple[int, ...] = (2, 4, 5, 6, 8)
    dec_out_channels: int = 2
    stereo: bool = True
    normalize_volume: bool = True
    hop_size: int | None = None
    input_channels: int = 1
    enc_dim: int = 192
    enc_intermediate_dim: int = 768
    enc_num_layers: int = 12
    enc_num_blocks: int = 2
    enc_n_fft: int = 64
    enc_hop_length: int = 16
    enc_latent_dim: int = 128
    enc_c_mults: tuple[int, ...] = (1, 2, 4)
    enc_strides: tuple[int, ...] = (4, 5, 6)
    enc_identity_init: bool = False
    enc_use_snake: bool = True
    bottleneck: tuple | None = None
    encoder_enabled: bool = True

    @property
    def hop(self) -> int:
        """Waveform samples per latent frame (``hop_size``, else ``prod(dec_strides)``; the
        reference's ``_hop_size``)."""
        return self.hop_size if self.hop_size is not None else math.prod(self.dec_strides)

    @property
    def encoder_channels(self) -> int:
        """Waveform channels :meth:`encode` takes (``input_channels``, doubled when ``stereo``)."""
        return self.input_channels * (2 if self.stereo else 1)

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "sampling_rate",
                "vocoder_input_dim",
                "dec_dim",
                "dec_out_channels",
                "input_channels",
                "enc_dim",
                "enc_num_blocks",
                "enc_n_fft",
                "enc_hop_length",
                "enc_latent_dim",
            ),
            nullable=("hop_size",),
        )
        for key in ("dec_c_mults", "dec_strides", "enc_c_mults", "enc_strides"):
            value = getattr(self, key)
            if not isinstance(value, tuple) or not value or not all(map(is_positive_int, value)):
                self.invalid(source, key, value, "expected a non-empty list of positive ints")
        if len(self.dec_c_mults) != len(self.dec_strides):
            self.invalid(
                source,
                "dec_c_mults",
                self.dec_c_mults,
                f"expected one multiplier per stride of dec_strides={list(self.dec_strides)}",
            )
        if len(self.enc_c_mults) != len(self.enc_strides):
            self.invalid(
                source,
                "enc_c_mults",
                self.enc_c_mults,
                f"expected one multiplier per stride of enc_strides={list(self.enc_strides)}",
            )
        if dict(self.bottleneck or ()).get("type", "vae") != "vae":
            self.invalid(source, "bottleneck", dict(self.bottleneck), "only the 'vae' bottleneck is implemented")
        if self.enc_latent_dim % 2:
            self.invalid(
                source,
                "enc_latent_dim",
                self.enc_latent_dim,
                "expected an even number (the VAE bottleneck's mean and scale halves)",
            )
        if self.enc_n_fft < self.enc_hop_length:
            self.invalid(source, "enc_n_fft", self.enc_n_fft, f"expected at least enc_hop_length={self.enc_hop_length}")


# ---------------------------------------------------------------------------------------- checkpoint

#: ``Cosmos3OmniPipeline.__call__`` defaults (diffusers 0.42.1): 720 x 1280, 189 frames, 35
#: steps, guidance 6.0, 24 fps (the ``fps`` keyword's default). The reference takes a prompt of
#: any length (its tokens join every step's attention); vidax cuts each prompt and negative prompt
#: to ``max_sequence_length`` tokens, 1024 by default, with a warning, before the metadata
#: sentences and the chat template are added (which stay whole). The prompt is not padded to it.
COSMOS3_DEFAULTS = CallDefaults(
    height=720, width=1280, num_frames=189, num_inference_steps=35, guidance_scale=6.0, max_sequence_length=1024, fps=24
)


@dataclasses.dataclass(frozen=True)
class Cosmos3Info(CheckpointInfo):
    """A Cosmos 3 folder's configs (see :class:`~vidax.checkpoint.CheckpointInfo`).

    Attributes:
        transformer_config: :class:`Cosmos3TransformerConfig`.
        vae_config: the Wan2.2 VAE's (:class:`vidax.models.wan.config.WanVAEConfig`).
        sound_config: ``sound_tokenizer/config.json`` (``sampling_rate``, ``hop_size`` /
            ``dec_strides``), or None where the checkpoint has no sound tokenizer.
        default_use_system_prompt, use_native_flow_schedule: the pipeline settings of
            ``model_index.json`` (diffusers' ``register_to_config``; defaults True and False).
    """

    transformer_config: Cosmos3TransformerConfig = None
    vae_config: Any = None
    sound_config: Mapping[str, Any] | None = None
    default_use_system_prompt: bool = True
    use_native_flow_schedule: bool = False

    @property
    def sound_hop(self) -> int:
        """Waveform samples per sound latent (the tokenizer's ``hop_size``, else the product of
        its decoder strides, as ``Cosmos3AVAEAudioTokenizer._hop_size``)."""
        c = self.sound_config
        return int(c["hop_size"]) if c.get("hop_size") is not None else int(np.prod(c.get("dec_strides")))

    def sound_length(self, num_frames: int, fps: float) -> int:
        """Sound latents of a ``num_frames`` video at ``fps`` (``prepare_latents``:
        ``ceil(int(num_frames / fps * sampling_rate) / hop)``)."""
        samples = int(num_frames / fps * self.sound_config["sampling_rate"])
        return (samples + self.sound_hop - 1) // self.sound_hop


def read_cosmos3_checkpoint(checkpoint: Checkpoint) -> Cosmos3Info:
    """Read and cross-check a Cosmos 3 folder's configs (diffusers ``Cosmos3OmniPipeline``:
    ``text_tokenizer``, ``transformer``, ``vae`` (Wan2.2), ``scheduler``, optional
    ``sound_tokenizer``). The safety checker and the reasoner's ``vision_encoder`` sidecar are not
    read (video generation does not use them).

    Raises:
        CheckpointError: a required component folder is missing.
        ConfigError: components that do not fit together (the transformer's ``latent_channel``
            must be the VAE's ``z_dim``), or a pipeline flag of model_index.json that is not a bool.
    """
    from vidax.errors import ConfigError
    from vidax.models.wan.config import WanVAEConfig

    ckpt = checkpoint
    ckpt.require("text_tokenizer", "transformer", "vae", "scheduler")
    cfg = ckpt.typed_config("transformer", Cosmos3TransformerConfig)
    vae = ckpt.typed_config("vae", WanVAEConfig)
    if cfg.latent_channel != vae.z_dim:
        raise ConfigError(
            f"{ckpt.config_file('transformer')}: latent_channel={cfg.latent_channel} must equal the "
            f"VAE's z_dim={vae.z_dim} ({ckpt.config_file('vae')})"
        )
    flags = {}
    for key, default in (("default_use_system_prompt", True), ("use_native_flow_schedule", False)):
        value = ckpt.index.get(key, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{ckpt.root}/model_index.json: {key}={value!r} must be true or false")
        flags[key] = value
    sound = dict(ckpt.config("sound_tokenizer")) if ckpt.has("sound_tokenizer") else None
    s, p = vae.spatial_compression, cfg.latent_patch_size
    tasks = ("t2v", "i2v", "v2v")
    variant = (
        f"Cosmos 3 omni text/image/video-to-video{' with sound' if sound and cfg.sound_gen else ''}: "
        f"{cfg.num_hidden_layers} layers, width {cfg.hidden_size} ({cfg.hidden_act}), Wan2.2 VAE"
    )
    return Cosmos3Info(
        checkpoint=ckpt,
        tasks=tasks,
        variant=variant,
        defaults=COSMOS3_DEFAULTS.for_checkpoint(ckpt),
        transformers=("transformer",),
        size_multiple=(s, s),
        size_reason=f"the reference requires multiples of the VAE's {s}x spatial compression (the transformer pads "
        f"latents to its {p}x{p} patches)",
        transformer_config=cfg,
        vae_config=vae,
        sound_config=sound,
        **flags,
    )
