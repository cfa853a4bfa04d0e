"""``LTX2VideoDiffusionDecodePipeline`` (diffusers 0.42.1,
``pipelines/ltx2/pipeline_ltx2_diffusion_decode.py``): LTX-2 latents -> video with LTX-2.5's
diffusion decoder (:mod:`vidax.models.ltx2.diffusion_decoder`).

Chained as diffusers chains it: an LTX-2 pipeline run with ``output_type="latent"`` returns
de-normalised latents ``(B, C, F', H', W')``, and this pipeline, loaded from its own folder,
decodes them with ``denormalize=False``. The reference registers a ``scheduler``
(``FlowMatchEulerDiscreteScheduler``) but never calls it: the decoder's own loop
(:meth:`~vidax.models.ltx2.diffusion_decoder.LTX2VideoDiffusionDecoder3d.denoise`) is the
schedule, as here.
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import numpy as np

from vidax.errors import InputError
from vidax.nn.precision import matmul_precision, parse_matmul_precision
from vidax.weights.component import load_component

_CLASS = "LTX2VideoDiffusionDecoderModel"


@dataclasses.dataclass
class LTX2VideoDecodeOutput:
    """``frames``: ``(B, F, H, W, C)`` float32 in [0, 1] (``output_type="np"``, the reference's
    ``postprocess_video``) or the raw decoder output ``(B, C, F, H, W)`` in about [-1, 1]
    (``output_type="raw"``)."""

    frames: np.ndarray


def _decoder_folder(path: str) -> str:
    index = os.path.join(path, "model_index.json")
    if os.path.isfile(index):
        with open(index) as f:
            entry = json.load(f).get("diffusion_decoder")
        if not entry:
            raise InputError(
                f"{index} has no diffusion_decoder component; give the decode pipeline's folder or "
                "a diffusion_decoder/ folder"
            )
        return os.path.join(path, "diffusion_decoder")
    return path


class LTX2VideoDiffusionDecodePipeline:
    """Decode LTX-2 latents with the diffusion decoder.

    Args:
        diffusion_decoder: a loaded
            :class:`~vidax.models.ltx2.diffusion_decoder.LTX2VideoDiffusionDecoderModel`.
    """

    def __init__(self, diffusion_decoder, matmul_precision: str = "highest"):
        self.diffusion_decoder = diffusion_decoder
        #: How float32 products run (:mod:`vidax.nn.precision`), as a video pipeline's.
        self.matmul_precision = parse_matmul_precision(matmul_precision)

    @classmethod
    def from_pretrained(
        cls, path, dtype="float32", mesh=None, *, matmul_precision: str = "highest"
    ) -> LTX2VideoDiffusionDecodePipeline:
        """From a folder with ``model_index.json`` naming ``diffusion_decoder/`` (the decode
        pipeline's, as ``save_pretrained`` writes it, or LTX-2.5's), a
        :class:`~vidax.checkpoint.Checkpoint` of one (what :func:`vidax.load_pipeline` passes), or
        the ``diffusion_decoder/`` folder itself, by the shared component loader;
        ``matmul_precision`` as :meth:`VideoPipeline.from_pretrained`'s.

        Raises:
            InputError: ``mesh`` given (the decoder runs on one device), or a bad ``matmul_precision``.
        """
        if mesh is not None:
            raise InputError(f"mesh={mesh!r}: {cls.__name__} runs on one device; leave mesh out")
        matmul_precision = parse_matmul_precision(matmul_precision)
        from vidax.checkpoint import Checkpoint

        variant = path.variant if isinstance(path, Checkpoint) else None
        path = path.root if isinstance(path, Checkpoint) else path  # (a pathlib.Path's .root is "/")
        decoder = load_component(_CLASS, _decoder_folder(os.fspath(path)), dtype, variant=variant)
        return cls(decoder, matmul_precision)

    @classmethod
    def for_task(cls, checkpoint, task: str, info=None):
        """Never a generation task: ``vidax generate`` gets one line saying how to run it."""
        raise InputError(
            f"checkpoint {checkpoint.root} is {cls.__name__}: it decodes the latents of an LTX-2 run "
            '(output_type="latent") into video with LTX-2.5\'s diffusion decoder, it does not generate '
            "from a prompt; run it from Python: vidax.load_pipeline(path)(latents, denormalize=False)"
        )

    def __call__(
        self,
        latents,
        *,
        decoder_noise=None,
        seed: int | None = None,
        output_type: str = "np",
        denormalize: bool = True,
        num_inference_steps: int | None = None,
        chunk_frames: int | None = 16,
    ) -> LTX2VideoDecodeOutput:
        """Decode.

        Args:
            latents: ``(B, C_z, F', H', W')`` float; an LTX-2 ``output_type="latent"`` result is
                de-normalised already: pass ``denormalize=False``.
            decoder_noise: the pixel noise ``(B, 3, F, H, W)`` float32 that stage 5 denoises (as
                ``latents=`` is for the denoiser: a run reproducible against the reference's
                ``generator`` draw); None: drawn from ``seed``.
            seed: of the drawn noise (int, default 0).
            output_type: ``"np"`` or ``"raw"`` (:class:`LTX2VideoDecodeOutput`).
            denormalize: ``latents · std / scaling_factor + mean`` with the decoder's statistics.
            num_inference_steps: stage-5 steps; None: the config's.
            chunk_frames: latent frames per chunk (None: the clip at once); the result is the same.

        Raises:
            InputError: a bad argument (named as the keyword), before anything is decoded.
        """
        model = self.diffusion_decoder
        cfg = model.config
        z = np.asarray(latents)
        if z.ndim != 5 or z.shape[1] != cfg.latent_channels or not np.issubdtype(z.dtype, np.floating):
            raise InputError(
                f"latents=: shape {z.shape} {z.dtype}; expected float (B, {cfg.latent_channels}, F', H', W')."
            )
        if output_type not in ("np", "raw"):
            raise InputError(f"output_type={output_type!r}; valid: 'np', 'raw'.")
        if num_inference_steps is not None and (
            isinstance(num_inference_steps, bool) or not isinstance(num_inference_steps, int) or num_inference_steps < 1
        ):
            raise InputError(f"num_inference_steps={num_inference_steps!r}; expected a positive int or None.")
        if chunk_frames is not None and (
            isinstance(chunk_frames, bool) or not isinstance(chunk_frames, int) or chunk_frames < 1
        ):
            raise InputError(f"chunk_frames={chunk_frames!r}; expected a positive int or None.")
        shape = model.pixel_shape(z.shape)
        if decoder_noise is None:
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise InputError(f"seed={seed!r}; expected an int.")
            noise = np.asarray(jax.random.normal(jax.random.key(seed or 0), shape, np.float32))
        else:
            noise = np.asarray(decoder_noise)
            if noise.shape != shape or noise.dtype != np.float32:
                raise InputError(
                    f"decoder_noise=: shape {noise.shape} {noise.dtype}; expected float32 {shape} "
                    f"for latents of shape {z.shape}."
                )
        model.check_grid(z.shape, chunk_frames, name="latents=")
        z = z.astype(np.float32)
        if denormalize:
            mean = np.asarray(model.latents_mean[...], np.float32).reshape(1, -1, 1, 1, 1)
            std = np.asarray(model.latents_std[...], np.float32).reshape(1, -1, 1, 1, 1)
            z = z * std / np.float32(cfg.scaling_factor) + mean
        with matmul_precision(self.matmul_precision):
            video = model.decode(z, noise, num_inference_steps=num_inference_steps, chunk_frames=chunk_frames)
        if output_type == "np":
            video = np.clip(np.moveaxis(video, 1, -1) / 2 + 0.5, 0.0, 1.0)
        return LTX2VideoDecodeOutput(frames=video)
