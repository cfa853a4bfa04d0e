"""Configuration of HunyuanVideo 1.5 (``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-*``:
480p / 720p, T2V / I2V, CFG-distilled and step-distilled): frozen dataclasses built from each
component's ``config.json``. The denoising transformer is
:class:`HunyuanVideo15TransformerConfig`. Not HunyuanVideo 1.0 (:mod:`vidax.models.hunyuan_video`),
whose double-stream blocks this model shares."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from vidax.models.hunyuan_video.config import HunyuanBlocksConfig

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
        qk_norm: only ``"rms_norm"`` (RMSNorm over each head's K channels, eps 1e-6).
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
    qk_norm: str = "rms_norm"
    text_embed_dim: int = 3584
    text_embed_2_dim: int = 1472
    image_embed_dim: int = 1152
    rope_theta: float = 256.0
    rope_axes_dim: tuple[int, ...] = (16, 56, 56)
    target_size: int = 640
    task_type: str = "i2v"
    use_meanflow: bool = False

    def validate(self, source: str) -> None:
        self.check_positive(
            source,
            ("in_channels", "num_attention_heads", "attention_head_dim", "num_layers", "num_refiner_layers",
             "patch_size", "patch_size_t", "text_embed_dim", "text_embed_2_dim", "image_embed_dim", "target_size"),
            nullable=("out_channels",),
        )
        self.check_blocks(source)
        if self.task_type not in TASK_TYPES:
            self.invalid(source, "task_type", self.task_type, f"diffusers 0.42.1 knows {list(TASK_TYPES)}")
        if not isinstance(self.use_meanflow, bool):
            self.invalid(source, "use_meanflow", self.use_meanflow, "expected true or false")
