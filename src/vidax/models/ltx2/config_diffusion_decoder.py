"""Settings of LTX-2.5's diffusion video decoder, ``diffusers.LTX2VideoDiffusionDecoderModel``
(diffusers 0.42.1, ``models/autoencoders/ltx2_diffusion_decoder.py``; names and defaults as its
``__init__``)."""

from __future__ import annotations

import dataclasses
import math

from vidax.config import ConfigBase

#: What stage 5 predicts: the clean pixels or the flow velocity.
MODEL_OUTPUT_TYPES = ("x0", "v")


@dataclasses.dataclass(frozen=True)
class LTX2DiffusionDecoderConfig(ConfigBase):
    """``LTX2VideoDiffusionDecoderModel``: latents ``(B, C, F', H', W')`` -> pixels
    ``(B, out_channels, (F' - 1)·8 + 1, H'·32, W'·32)`` with the released strides.

    Attributes:
        out_channels, latent_channels, patch_size: pixel channels, latent channels, stage 5's
            space-to-depth patch (H and W only).
        scaling_factor: of the latent statistics (the decode pipeline's de-normalisation).
        decoder_head_dim: attention head width of every stage (a multiple of 8).
        decoder_stage_channels: width of stages 1-5; each upsample divides it by
            ``decoder_upsample_channel_reductions``.
        decoder_stage_depths: blocks per stage (stages 1-4 deterministic, stage 5 diffusion).
        decoder_stage_kernels: ``(k_t, k_h, k_w)`` neighbourhood of stages 1-4.
        decoder_upsample_strides: ``(s_t, s_h, s_w)`` pixel shuffle after stages 1-4 (a temporal 2
            drops the duplicate leading frame: the causal frame mapping).
        decoder_stage5_kernel: stage 5's neighbourhood.
        decoder_t_emb_dim: width of stage 5's timestep embedding.
        decoder_timestep_scale_multiplier: the timestep in [0, 1] times this enters the sinusoid.
        decoder_model_output_type: see :data:`MODEL_OUTPUT_TYPES`.
        decoder_num_inference_steps: default stage-5 steps.
        spatial_compression_ratio, temporal_compression_ratio: pixels per latent; the temporal one
            also sizes the trailing frames cropped off the context.
    """

    out_channels: int = 3
    latent_channels: int = 128
    patch_size: int = 4
    scaling_factor: float = 1.0
    decoder_head_dim: int = 64
    decoder_stage_channels: tuple[int, ...] = (2048, 1024, 512, 512, 256)
    decoder_stage_depths: tuple[int, ...] = (4, 6, 4, 2, 8)
    decoder_stage_kernels: tuple[tuple[int, int, int], ...] = ((3, 7, 7), (3, 7, 7), (3, 5, 5), (3, 5, 5))
    decoder_upsample_strides: tuple[tuple[int, int, int], ...] = ((1, 2, 2), (2, 1, 1), (2, 2, 2), (2, 2, 2))
    decoder_upsample_channel_reductions: tuple[int, ...] = (2, 2, 1, 2)
    decoder_stage5_kernel: tuple[int, int, int] = (11, 11, 11)
    decoder_t_emb_dim: int = 384
    decoder_timestep_scale_multiplier: float = 1000.0
    decoder_model_output_type: str = "x0"
    decoder_num_inference_steps: int = 1
    spatial_compression_ratio: int = 32
    temporal_compression_ratio: int = 8

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            (
                "out_channels",
                "latent_channels",
                "patch_size",
                "decoder_head_dim",
                "decoder_t_emb_dim",
                "decoder_num_inference_steps",
                "spatial_compression_ratio",
                "temporal_compression_ratio",
            ),
        )
        if self.decoder_head_dim % 8:
            self.invalid(source, "decoder_head_dim", self.decoder_head_dim, "a multiple of 8 (the 3D rotary split)")
        if self.decoder_model_output_type not in MODEL_OUTPUT_TYPES:
            self.invalid(
                source, "decoder_model_output_type", self.decoder_model_output_type, f"one of {MODEL_OUTPUT_TYPES}"
            )
        n = len(self.decoder_upsample_strides)
        for key, want in (
            ("decoder_stage_channels", n + 1),
            ("decoder_stage_depths", n + 1),
            ("decoder_stage_kernels", n),
            ("decoder_upsample_channel_reductions", n),
        ):
            if len(getattr(self, key)) != want:
                self.invalid(
                    source,
                    key,
                    getattr(self, key),
                    f"{want} entries (one per upsample stride, {'plus stage 5' if want == n + 1 else 'stages 1-4'})",
                )
        for key in ("decoder_stage_kernels", "decoder_upsample_strides"):
            for entry in getattr(self, key):
                if len(entry) != 3 or min(entry) < 1:
                    self.invalid(source, key, getattr(self, key), "(t, h, w) triples of positive ints")
        if len(self.decoder_stage5_kernel) != 3 or min(self.decoder_stage5_kernel) < 1:
            self.invalid(source, "decoder_stage5_kernel", self.decoder_stage5_kernel, "(t, h, w) positive ints")
        for i, reduction in enumerate(self.decoder_upsample_channel_reductions):
            if self.decoder_stage_channels[i + 1] != self.decoder_stage_channels[i] // reduction:
                self.invalid(
                    source,
                    "decoder_stage_channels",
                    self.decoder_stage_channels,
                    f"stage {i + 2} = stage {i + 1} // decoder_upsample_channel_reductions[{i}]",
                )
        for c in self.decoder_stage_channels:
            if c % self.decoder_head_dim:
                self.invalid(
                    source,
                    "decoder_stage_channels",
                    self.decoder_stage_channels,
                    f"multiples of decoder_head_dim={self.decoder_head_dim}",
                )
        if math.prod(s[0] for s in self.decoder_upsample_strides) != self.temporal_compression_ratio:
            self.invalid(
                source,
                "temporal_compression_ratio",
                self.temporal_compression_ratio,
                "the product of the upsample strides' t entries",
            )

    @property
    def trailing_pad(self) -> int:
        """Latent frames the last one is repeated by before stage 1 (the reference's
        ``trailing_pad_latent_frames``: NATTEN's inward border shift moved past the kept frames)."""
        return (self.decoder_stage_kernels[0][0] // 2) * 2
