"""The end of a call: the final latents checked and decoded through the VAE contract (and the
audio decoder's), the frames as arrays or PIL images.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import Arg, Cancelled, InputError, NumericalError
from vidax.nn.precision import matmul_precision
from vidax.pipelines.call import Call
from vidax.pipelines.common import progress_bar, status
from vidax.pipelines.prompts import encode_with
from vidax.pipelines.sampling import all_finite, nonfinite_advice
from vidax.pipelines.staging import transformers_of
from vidax.stats import RunStats


def frames_as_pil(frames: np.ndarray) -> list:
    """float32 (B, F, H, W, 3) in [0, 1] -> B lists of F PIL images, as diffusers'
    ``output_type="pil"`` (``numpy_to_pil``: ``(x * 255).round()`` as uint8)."""
    from PIL import Image

    pixels = (np.asarray(frames) * 255).round().astype(np.uint8)
    return [[Image.fromarray(frame) for frame in video] for video in pixels]


def host_array(value: Any) -> Any:
    """A torch tensor (told by its ``detach`` / ``cpu`` / ``numpy`` methods: vidax never imports
    torch) as a numpy array, bfloat16 as float32; anything else as it is."""
    if all(callable(getattr(value, a, None)) for a in ("detach", "cpu", "numpy")):
        t = value.detach().cpu()
        return (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()
    return value


def finite_array(name: str, value: Any) -> np.ndarray:
    """``value`` (numpy, JAX, a torch tensor, nested lists) as a float32 numpy array; anything
    but an array of real numbers (a string, a complex array), or NaN / Inf anywhere, is an
    InputError naming ``name``."""
    value = host_array(value)
    kind = np.asarray(value).dtype.kind if not hasattr(value, "dtype") else np.dtype(value.dtype).kind
    if kind not in "biuf" and np.dtype(getattr(value, "dtype", np.float32)).name != "bfloat16":
        raise InputError(
            Arg(name),
            f" must be an array of real numbers (float32), got "
            f"{type(value).__name__} of dtype {np.asarray(value).dtype}",
        )
    arr = np.asarray(value, np.float32)
    if not np.isfinite(arr).all():
        bad = int(arr.size - np.isfinite(arr).sum())
        raise InputError(Arg(name), f" has {bad} NaN/Inf value(s) of {arr.size}; give finite values")
    return arr


def check_finite(what: str, x: Any, params: Any = None) -> None:
    """Stop a run whose values went non-finite (e.g. a bf16 overflow), naming where (``what``:
    the step or the component, e.g. "the VAE decode (chunk 2 of 5)") and what to try, from the
    dtype of the weights that made ``x`` (``params``: a pytree of them, or their dtype; None:
    unknown; :func:`~vidax.pipelines.sampling.nonfinite_advice`).

    Raises:
        NumericalError: ``x`` holds NaN or Inf.
    """
    ok = np.isfinite(x).all() if isinstance(x, np.ndarray) else all_finite(x)
    if not bool(ok):
        raise NumericalError(
            f"{what} produced NaN/Inf values; stopped there, nothing was written ", nonfinite_advice(params)
        )


#: The largest magnitude of final latents the VAE is given. The VAEs' norm layers (RMS, group,
#: layer norms) sum the squares of their activations in float32; latents far past this (e.g.
#: ~1e28 from guidance_scale=1e30) overflow those sums to Inf, the norm divides by it and the
#: decode is a finite, flat grey video: the NaN/Inf check cannot see it. Below it the sums stay
#: far inside float32 (1e8 squared is 1e16, times a group of 1e7 activations and the convolutions'
#: gains); trained models' final latents are ~N(0, 1) scaled by the VAE's statistics, |x| < 100.
MAX_DECODE_LATENT = 1e8


def check_decodable(call: Call, latents: jax.Array, kept: Callable[[], np.ndarray]) -> None:
    """Refuse final ``latents`` past :data:`MAX_DECODE_LATENT` before the VAE decodes them.

    Raises:
        NumericalError: naming the peak and the likely cause (the guidance scale); its
            ``latents`` attribute holds ``kept()`` (the latents as ``output_type="latent"``).
    """
    peak = float(jnp.max(jnp.abs(latents)))
    if peak > MAX_DECODE_LATENT:
        error = NumericalError(
            f"the final latents reach |x| = {peak:.3g}, past the {MAX_DECODE_LATENT:.0e} the VAE can decode (its norm "
            "layers' float32 sums of squares would overflow to Inf and the video come out flat grey); the likely cause "
            "is ",
            Arg("guidance_scale", call.guidance_scale),
            ": give a smaller one; no video was decoded",
        )
        error.latents = kept()
        raise error


@contextlib.contextmanager
def decoding(pipe: Any) -> Iterator[None]:
    """Where and how ``pipe``'s VAE decodes: the transformers' weights in host memory where the
    plan stages them (:meth:`~vidax.pipelines.staging.Staging.off_device`), the VAE on the device,
    its matmul precision (the whole video's decode and a long video's chunk decodes alike)."""
    with (
        pipe.staging.off_device(transformers_of(pipe)),
        pipe.staging.on_device("vae"),
        matmul_precision(pipe.vae_matmul_precision),
    ):
        yield


def decode_video(pipe: Any, call: Call, latents: jax.Array, stats: RunStats) -> np.ndarray:
    """Frames float32 (B, F, H, W, 3) in [0, 1] of ``pipe``'s final video latents through the VAE
    contract (``pipe.vae``; the default of ``pipe.hooks.decode``): its own latent de-normalisation
    (then the hooks' ``latents_to_decode`` / ``decode_input`` / ``decode_kwargs``), then its chunks
    decoded one by one (each moved to the host as it ends); ``call.cancel`` is asked before each
    chunk.

    Raises:
        NumericalError: a chunk holds NaN/Inf. Cancelled: ``call.cancel()`` returned True.
    """
    with stats.timed("decode_s"):
        chunks = []
        vae_params = nnx.state(pipe.vae, nnx.Param)
        with decoding(pipe):
            # De-normalised with the VAE on the device: its statistics may be checkpoint buffers.
            z = pipe.hooks.decode_input(call, pipe.vae.denormalize_latents(pipe.hooks.latents_to_decode(call, latents)))
            n = pipe.vae.decode_chunks(z)
            decoded = iter(pipe.vae.iter_decode(z, **pipe.hooks.decode_kwargs(call)))
            with progress_bar(n, "vae decode", disable=not call.progress, unit="chunk") as bar:
                while True:
                    if call.cancel is not None and len(chunks) < n and call.cancel():
                        steps = f"all {call.num_inference_steps} denoising steps done"
                        raise Cancelled(
                            f"after VAE decode chunk {len(chunks)} of {n} ({steps})"
                            if chunks
                            else f"before the VAE decode ({steps})"
                        )
                    chunk = next(decoded, None)
                    if chunk is None:
                        break
                    chunks.append(np.asarray(chunk))
                    check_finite(f"the VAE decode (chunk {len(chunks)} of {n})", chunks[-1], vae_params)
                    stats.sample_memory()
                    bar.update()
        video = np.concatenate(chunks, axis=1)
        return np.clip(video / np.float32(2.0) + np.float32(0.5), 0.0, 1.0).astype(np.float32)


def decode_audio(pipe: Any, call: Call, latents: jax.Array, stats: RunStats) -> tuple[np.ndarray, int]:
    """``(waveform float32 (B, channels, samples) in [-1, 1], sample rate in Hz)`` of ``pipe``'s
    audio stream's final latents, as diffusers returns ``audio``: the audio decoder's own
    de-normalisation, its decode (to a mel spectrogram or a waveform), then the vocoder
    (mel -> waveform) where it has one; each component on the device only while it runs
    when staged. Timed as ``audio_decode_s``.

    Raises:
        NumericalError: the decoded sound holds NaN/Inf.
    """
    decoder = getattr(pipe, pipe.family.audio_decoder_name)
    vocoder_name = pipe.family.vocoder_name
    vocoder = getattr(pipe, vocoder_name, None) if vocoder_name else None
    with stats.timed("audio_decode_s"), status("decoding the sound", call.progress):
        if call.cancel is not None and call.cancel():
            raise Cancelled(f"before the audio decode (all {call.num_inference_steps} denoising steps done)")
        # De-normalised with the decoder on the device: its statistics may be checkpoint tensors.
        out = encode_with(
            pipe,
            pipe.family.audio_decoder_name,
            lambda z: decoder.decode(decoder.denormalize_latents(z)),
            pipe.hooks.audio_latents_to_decode(call, latents),
        )
        check_finite("the audio decode", out, nnx.state(decoder, nnx.Param))
        if vocoder is not None:
            out = encode_with(pipe, vocoder_name, vocoder, out)
            check_finite("the vocoder", out, nnx.state(vocoder, nnx.Param))
            rate = vocoder.sample_rate
        else:
            rate = decoder.sample_rate
        wave = np.clip(np.asarray(out, np.float32), -1.0, 1.0)
        stats.sample_memory()
    return wave, int(rate)
