"""What every registered component provides to the shared pipeline code (``typing.Protocol``).

``tests/test_contracts.py`` checks each component in :mod:`vidax.registry` against these.
Layouts are channels-last inside vidax: latents (B, T, H, W, C), tokens (B, L, D).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np


@runtime_checkable
class DenoisingTransformer(Protocol):
    """A diffusion transformer: embed -> one or more named block stacks -> head.

    ``model(*args) == head(run_blocks(*embed(*args)), inputs)``; block streaming
    (:mod:`vidax.parallel.offload`) runs the three stages one by one, a stack's layers in chunks.
    """

    #: Attributes holding stacked layers (leading layer axis), in the order they run.
    block_stacks: tuple[str, ...]
    config: Any

    def __call__(self, *args: Any) -> jax.Array: ...

    def embed(self, *args: Any) -> tuple[jax.Array, Any]:
        """Everything before the blocks: ``(x (B, L, D), inputs pytree)``."""

    def run_blocks(self, x: jax.Array, inputs: Any, blocks: Any = None) -> jax.Array:
        """The stacked layers (default the model's; or a chunk of consecutive layers) over ``x``."""

    def head(self, x: jax.Array, inputs: Any) -> jax.Array:
        """Everything after the blocks: the prediction in the latents' layout."""


@runtime_checkable
class VAE(Protocol):
    """A video VAE that owns its latent normalisation (mean/std or a scaling factor); its
    ``config`` gives ``spatial_compression`` and ``temporal_compression`` (pixels / frames per
    latent pixel / frame)."""

    config: Any

    def encode(self, video: Any) -> tuple[np.ndarray, np.ndarray]:
        """Video (B, F, H, W, 3) in [-1, 1] -> the posterior's (mean, logvar), (B, T, h, w, C)."""

    def normalize_latents(self, z: Any) -> Any:
        """Encoder latents -> the diffusion model's latents."""

    def denormalize_latents(self, z: Any) -> Any:
        """The diffusion model's latents -> what :meth:`iter_decode` takes."""

    def iter_decode(self, z: Any, **conditioning: Any) -> Iterator[np.ndarray]:
        """Decoded frames (B, f, H, W, 3) in [-1, 1], chunk after chunk along the frames."""

    def decode_chunks(self, z: Any) -> int:
        """How many chunks :meth:`iter_decode` yields for ``z``."""


@runtime_checkable
class TextEncoder(Protocol):
    """A text encoder: token ids (B, L) and mask -> hidden states (B, L, D)."""

    config: Any

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> jax.Array: ...


@runtime_checkable
class PooledTextEncoder(TextEncoder, Protocol):
    """A text encoder that also gives one pooled vector per prompt (CLIP's ``pooler_output``,
    HunyuanVideo's ``pooled_projections``)."""

    def encode(self, input_ids: jax.Array, attention_mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """``(hidden states (B, L, D), pooled (B, D))``; ``__call__`` returns the first."""


@runtime_checkable
class ImageEncoder(Protocol):
    """An image encoder: pixels (B, H, W, 3) -> hidden states (B, L, D) of a chosen layer."""

    config: Any

    def __call__(self, pixels: jax.Array, output_layer: int = -1) -> jax.Array: ...


@runtime_checkable
class LatentUpsampler(Protocol):
    """A latent upsampler (LTX-Video, LTX-2): un-normalised VAE latents (B, T, H, W, C) -> larger ones."""

    config: Any

    def __call__(self, latents: jax.Array) -> jax.Array: ...

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The output's (B, T', H', W', C) for an input of ``shape``."""


@runtime_checkable
class AudioDecoder(Protocol):
    """A sound decoder (LTX-2's audio VAE, a sound tokenizer's decoder) that owns its latent
    statistics: the audio stream's latents -> a mel spectrogram for a :class:`Vocoder`, or a
    waveform (then it declares ``sample_rate``).

    Attributes:
        output: ``"mel"`` (float32 (B, channels, frames, mel_bins), what the vocoder takes) or
            ``"waveform"`` (float32 (B, channels, samples) in [-1, 1]).
    """

    config: Any
    output: str

    def denormalize_latents(self, z: Any) -> Any:
        """The diffusion model's audio latents -> what :meth:`decode` takes (its mean / std)."""

    def decode(self, z: Any) -> jax.Array:
        """Latents -> mel spectrogram or waveform (see :attr:`output`)."""


@runtime_checkable
class Vocoder(Protocol):
    """Mel spectrogram (B, channels, frames, mel_bins) -> waveform float32 (B, audio channels,
    samples) in [-1, 1] at :attr:`sample_rate` samples per second (LTX-2's
    ``output_sampling_rate``)."""

    config: Any
    sample_rate: int

    def __call__(self, mel: jax.Array) -> jax.Array: ...


#: The protocol each registry component kind is held to.
PROTOCOLS = {
    "transformer": DenoisingTransformer,
    "vae": VAE,
    "text_encoder": TextEncoder,
    "image_encoder": ImageEncoder,
    "latent_upsampler": LatentUpsampler,
    "audio_decoder": AudioDecoder,
    "vocoder": Vocoder,
}
