"""vidax: open video-generation models (Wan, ...) in JAX, loaded from diffusers checkpoints.

Typical use::

    import vidax
    pipe = vidax.load_pipeline("path/to/Wan2.1-T2V-1.3B-Diffusers", dtype="bfloat16")
    frames = pipe("a cat surfing", num_frames=33, seed=0).frames  # (B, F, H, W, 3) in [0, 1]
"""

from vidax.errors import CheckpointError, ConfigError, InputError, VidaxError
from vidax.pipelines.loading import load_pipeline

__version__ = "0.1.0"
__all__ = ["CheckpointError", "ConfigError", "InputError", "VidaxError", "load_pipeline"]
