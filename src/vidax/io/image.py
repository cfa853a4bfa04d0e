"""Reading conditioning images, and the image preprocessing of diffusers' image-to-video pipelines.

* :func:`load_image` follows ``diffusers.utils.load_image``: open with PIL, apply the EXIF
  orientation, convert to RGB.
* :func:`to_rgb_image` accepts what the pipelines accept as ``image`` (a PIL image or a uint8
  array) and returns an RGB PIL image; :func:`video_frames` does it for each frame of a
  conditioning video, :func:`one_image` refuses a list where a pipeline takes one image.
* :func:`vae_image_preprocess` follows ``VideoProcessor.preprocess(image, height, width)`` (the
  ``VaeImageProcessor`` defaults every diffusers video pipeline uses): resize to exactly
  ``height x width`` with PIL's Lanczos filter (no crop, the aspect ratio is not kept; another
  PIL filter where the pipeline's processor sets ``resample``), scale to ``[0, 1]`` in float32,
  then ``2 x - 1``.
* :func:`nearest_resize` is ``torch.nn.functional.interpolate(x, size)`` (mode ``"nearest"``),
  what ``VaeImageProcessor.preprocess`` does to tensor input.
* :func:`h264_recompress` re-compresses one frame as H.264 at a CRF (PyAV / libx264), as LTX-2's
  pipelines condition on images (``apply_image_conditioning_crf`` in diffusers' ``ltx2/utils.py``).
* :func:`cover_crop_bilinear` resizes frames to cover a size and centre-crops them, with
  ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``'s arithmetic
  (LTX2ConditionPipeline's ``preprocess_conditions``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vidax.errors import Arg, InputError

#: Why a float pixel array is refused (docs/diffusers.md "Refused keywords", REFUSED_VALUES).
FLOAT_ARRAY_REASON = (
    "diffusers takes a numpy array as a tensor, resized nearest-neighbour instead of a PIL image's "
    "Lanczos (and Wan2.1's CLIP processor rescales floats by 1/255 once more), so its result is not "
    "that of the image; vidax takes images as PIL images or uint8 arrays only"
)


def load_image(path: str | os.PathLike, name: str = "image") -> Any:
    """Read an image file as an RGB ``PIL.Image.Image`` (as ``diffusers.utils.load_image``).

    Args:
        path: an image file PIL can read (PNG, JPEG, WebP, ...).
        name: the argument that gave it, for the messages.

    Returns:
        The RGB image, EXIF orientation applied, pixels decoded (the file is closed).

    Raises:
        InputError: the path does not exist, is a folder, or is not an image PIL can decode.
    """
    import PIL.Image
    import PIL.ImageOps

    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(Arg(name, path), ": no such file")
    if os.path.isdir(path):
        raise InputError(Arg(name, path), " is a folder; give an image file (PNG, JPEG, WebP, ...)")
    try:
        with PIL.Image.open(path) as image:
            image = PIL.ImageOps.exif_transpose(image)
            image = image.convert("RGB")  # decodes every pixel, so a truncated file fails here
    except (PIL.UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise InputError(
            Arg(name, path),
            f" could not be read as an image ({type(e).__name__}: {e}); give a "
            "PNG, JPEG, WebP or another format PIL reads",
        ) from None
    return image


def to_rgb_image(image: Any, name: str = "image") -> Any:
    """An RGB ``PIL.Image.Image`` from a PIL image (any mode) or a uint8 array.

    Args:
        image: ``PIL.Image.Image``, or a uint8 numpy array ``(H, W)``, ``(H, W, 3)`` or
            ``(H, W, 4)`` (alpha is dropped, as PIL's RGB conversion does).
        name: argument name used in error messages.

    Raises:
        InputError: another type, dtype or shape, or an empty image.
    """
    import PIL.Image

    if isinstance(image, PIL.Image.Image):
        if image.width < 1 or image.height < 1:
            raise InputError(f"{name} is an empty image ({image.width}x{image.height})")
        return image.convert("RGB")
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise InputError(
                f"{name} is a {image.dtype} array; give a PIL image or a uint8 (H, W, 3) array "
                "(pixel values 0..255; (x * 255).round().astype(np.uint8) of floats in [0, 1]): " + FLOAT_ARRAY_REASON
            )
        if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[-1] not in (3, 4)) or 0 in image.shape:
            raise InputError(f"{name} has shape {image.shape}; give a uint8 array (H, W, 3), (H, W, 4) or (H, W)")
        return PIL.Image.fromarray(image).convert("RGB")
    if type(image).__module__ == "torch":  # diffusers takes a (C, H, W) float tensor in [0, 1]
        raise InputError(
            f"{name} is a torch tensor; give a PIL image or a uint8 (H, W, 3) array ((t.permute(1, 2, 0) * 255)"
            ".round().to(torch.uint8).numpy() of a (C, H, W) tensor in [0, 1]): " + FLOAT_ARRAY_REASON
        )
    raise InputError(f"{name} must be a PIL image or a uint8 numpy array (H, W, 3); got {type(image).__name__}")


def one_image(image: Any, takes: str, name: str = "image", *, list_of_one: bool = False, what: str = "image") -> Any:
    """``image`` (the call's ``name``) as one image for the whole batch: a list or tuple is refused
    (``list_of_one``: a list of exactly one is taken, and its image returned).

    Args:
        takes: the subject and verb of the message (``"LTXImageToVideoPipeline takes"``).
        what: what the one value is, in the message (``"last frame"``).

    Raises:
        InputError: ``"image is a list of 2; {takes} one {what} for the whole batch"``.
    """
    if not isinstance(image, (list, tuple)):
        return image
    if list_of_one and len(image) == 1:
        return image[0]
    raise InputError(
        Arg(name),
        f" is a list of {len(image)}; {takes} one {what} for the whole batch"
        + (" (or a list of one)" if list_of_one else ""),
    )


def video_frames(video: Any, name: str = "video") -> list:
    """A conditioning video as a list of RGB ``PIL.Image.Image`` frames.

    Args:
        video: a uint8 array ``(F, H, W, 3)`` (or ``(F, H, W, 4)``: alpha is dropped), or a
            non-empty list / tuple of frames, each what :func:`to_rgb_image` takes.
        name: the argument that gave it, for the messages (``"conditions[0].video"``).

    Raises:
        InputError: another type, a float array (with :data:`FLOAT_ARRAY_REASON`), no frames, or
            a frame :func:`to_rgb_image` refuses (named ``video[i]``).
    """
    if isinstance(video, np.ndarray) and video.ndim == 4:
        if video.dtype != np.uint8:
            raise InputError(
                f"{name} is a {video.dtype} array; give uint8 frames (F, H, W, 3) (pixel values 0..255) "
                "or a list of PIL images: " + FLOAT_ARRAY_REASON
            )
        video = list(video)
    if not isinstance(video, (list, tuple)):
        shape = f" of shape {video.shape}" if isinstance(video, np.ndarray) else ""
        raise InputError(
            f"{name} must be a uint8 (F, H, W, 3) array or a list of frames (PIL images / uint8 "
            f"(H, W, 3) arrays); got {type(video).__name__}{shape}"
        )
    if not video:
        raise InputError(f"{name} has no frames")
    return [to_rgb_image(f, f"{name}[{i}]") for i, f in enumerate(video)]


def vae_image_preprocess(
    image: Any, height: int, width: int, resample: str = "lanczos", name: str = "image"
) -> np.ndarray:
    """``VideoProcessor.preprocess(image, height, width)`` of diffusers, for one image.

    Args:
        image: a PIL image or uint8 array (see :func:`to_rgb_image`).
        height, width: output size in pixels.
        resample: the processor's ``resample`` (``"lanczos"``, diffusers' default, or
            ``"bilinear"``, e.g. the Cosmos-Predict2.5 ``VideoProcessor``).
        name: argument name used in error messages.

    Returns:
        float32 ``(height, width, 3)`` in ``[-1, 1]``: the image resized to exactly
        ``height x width`` with that PIL filter (stretched, not cropped), divided by 255, then
        ``2 x - 1``.

    Raises:
        InputError: an image :func:`to_rgb_image` refuses.
    """
    import PIL.Image

    filters = {"lanczos": PIL.Image.Resampling.LANCZOS, "bilinear": PIL.Image.Resampling.BILINEAR}
    rgb = to_rgb_image(image, name)
    resized = rgb.resize((int(width), int(height)), resample=filters[resample])
    pixels = np.asarray(resized).astype(np.float32) / np.float32(255.0)
    return np.float32(2.0) * pixels - np.float32(1.0)


def resize_and_crop(image: Any, height: int, width: int, name: str = "image") -> Any:
    """``VaeImageProcessor.resize(image, height, width, resize_mode="crop")`` of diffusers (its
    ``_resize_and_crop``, Lanczos, the processor's default filter): the image scaled with its
    aspect ratio kept until it covers ``height x width`` (integer sizes as the reference floors
    them), pasted centred on a black ``height x width`` RGB canvas, the excess cut.

    Args:
        image: a PIL image or uint8 array (see :func:`to_rgb_image`).
        height, width: output size in pixels.
        name: argument name used in error messages.

    Returns:
        an RGB ``PIL.Image.Image`` of ``width x height``.

    Raises:
        InputError: an image :func:`to_rgb_image` refuses.
    """
    import PIL.Image

    rgb = to_rgb_image(image, name)
    height, width = int(height), int(width)
    ratio, src_ratio = width / height, rgb.width / rgb.height
    src_w = width if ratio > src_ratio else rgb.width * height // rgb.height
    src_h = height if ratio <= src_ratio else rgb.height * width // rgb.width
    resized = rgb.resize((src_w, src_h), resample=PIL.Image.Resampling.LANCZOS)
    out = PIL.Image.new("RGB", (width, height))
    out.paste(resized, box=(width // 2 - src_w // 2, height // 2 - src_h // 2))
    return out


def nearest_resize(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """``torch.nn.functional.interpolate(x, size=(height, width))`` (mode ``"nearest"``) of an
    image ``(H, W, C)`` (any dtype): output pixel ``(i, j)`` is input pixel
    ``(min(floor(i * s_h), H - 1), min(floor(j * s_w), W - 1))`` with the float32 scales
    ``s_h = H / height``, ``s_w = W / width`` (PyTorch's ``nearest_idx``). Returns
    ``(height, width, C)``."""

    def index(n_in: int, n_out: int) -> np.ndarray:
        scale = np.float32(n_in) / np.float32(n_out)
        return np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64), n_in - 1)

    pixels = np.asarray(pixels)
    return pixels[index(pixels.shape[0], int(height))][:, index(pixels.shape[1], int(width))]


def h264_recompress(image: np.ndarray, crf: int) -> np.ndarray:
    """One RGB frame through an H.264 encode and decode at ``crf`` (libx264, preset ``veryfast``,
    yuv420p, as diffusers' ``apply_image_conditioning_crf``): the compression LTX-2 was trained
    on. ``crf`` 0 returns the frame as it is.

    Args:
        image: uint8 ``(H, W, 3)``, H and W >= 2 (cropped to even sizes, as the reference).
        crf: the constant rate factor, 0..51.

    Returns:
        uint8 ``(H // 2 * 2, W // 2 * 2, 3)``.
    """
    if crf == 0:
        return image
    import io

    import av

    image = np.ascontiguousarray(image[: image.shape[0] // 2 * 2, : image.shape[1] // 2 * 2])
    with io.BytesIO() as buffer:
        with av.open(buffer, "w", format="mp4") as container:
            stream = container.add_stream("libx264", rate=1, options={"crf": str(int(crf)), "preset": "veryfast"})
            stream.height, stream.width = image.shape[:2]
            frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
            container.mux(stream.encode(frame))
            container.mux(stream.encode())
        data = buffer.getvalue()
    with io.BytesIO(data) as buffer, av.open(buffer) as container:
        stream = next(s for s in container.streams if s.type == "video")
        return next(container.decode(stream)).to_ndarray(format="rgb24")


def _bilinear_axis(x: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``interpolate(mode="bilinear", align_corners=False)`` along one axis, float32: source
    position ``(i + 0.5) in / out - 0.5`` clamped at 0, linear between its two neighbours (the
    upper one clamped to the last)."""
    n = x.shape[axis]
    scale = np.float32(n / size)
    src = np.maximum((np.arange(size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5), np.float32(0))
    lo = np.minimum(src.astype(np.int64), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    w = (src - lo.astype(np.float32)).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = size
    w = w.reshape(shape)
    a, b = np.take(x, lo, axis=axis), np.take(x, hi, axis=axis)
    return (np.float32(1) - w) * a + w * b


def cover_crop_bilinear(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """Frames ``(F, H, W, 3)`` (uint8 or float, 0..255) resized by ``max(height / H, width / W)``
    to ``(ceil(H s), ceil(W s))`` with torch's bilinear interpolation (no anti-aliasing), then
    centre-cropped to ``height x width`` (top / left offsets rounded down): float32 0..255."""
    import math

    f, h, w = frames.shape[:3]
    scale = max(height / h, width / w)
    new_h, new_w = math.ceil(h * scale), math.ceil(w * scale)
    x = _bilinear_axis(_bilinear_axis(np.asarray(frames, np.float32), new_h, 1), new_w, 2)
    top, left = (new_h - height) // 2, (new_w - width) // 2
    return np.ascontiguousarray(x[:, top : top + height, left : left + width])
