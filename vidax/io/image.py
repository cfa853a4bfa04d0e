"""Reading conditioning images, and the image preprocessing of diffusers' image-to-video pipelines.

* :func:`load_image` follows ``diffusers.utils.load_image``: open with PIL, apply the EXIF
  orientation, convert to RGB.
* :func:`to_rgb_image` accepts what the pipelines accept as ``image`` (a PIL image or a uint8
  array) and returns an RGB PIL image.
* :func:`vae_image_preprocess` follows ``VideoProcessor.preprocess(image, height, width)`` (the
  ``VaeImageProcessor`` defaults every diffusers video pipeline uses): resize to exactly
  ``height x width`` with PIL's Lanczos filter (no crop, the aspect ratio is not kept), scale to
  ``[0, 1]`` in float32, then ``2 x - 1``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from vidax.errors import InputError


def load_image(path: str | os.PathLike) -> Any:
    """Read an image file as an RGB ``PIL.Image.Image`` (as ``diffusers.utils.load_image``).

    Args:
        path: an image file PIL can read (PNG, JPEG, WebP, ...).

    Returns:
        The RGB image, EXIF orientation applied, pixels decoded (the file is closed).

    Raises:
        InputError: the path does not exist, is a folder, or is not an image PIL can decode.
    """
    import PIL.Image
    import PIL.ImageOps

    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"image={path!r}: no such file")
    if os.path.isdir(path):
        raise InputError(f"image={path!r} is a folder; give an image file (PNG, JPEG, WebP, ...)")
    try:
        with PIL.Image.open(path) as image:
            image = PIL.ImageOps.exif_transpose(image)
            image = image.convert("RGB")  # decodes every pixel, so a truncated file fails here
    except (PIL.UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise InputError(
            f"image={path!r} could not be read as an image ({type(e).__name__}: {e}); give a "
            "PNG, JPEG, WebP or another format PIL reads"
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
                "(pixel values 0..255)"
            )
        if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[-1] not in (3, 4)) or 0 in image.shape:
            raise InputError(
                f"{name} has shape {image.shape}; give a uint8 array (H, W, 3), (H, W, 4) or (H, W)"
            )
        return PIL.Image.fromarray(image).convert("RGB")
    raise InputError(
        f"{name} must be a PIL image or a uint8 numpy array (H, W, 3); got {type(image).__name__}"
    )


def vae_image_preprocess(image: Any, height: int, width: int) -> np.ndarray:
    """``VideoProcessor.preprocess(image, height, width)`` of diffusers, for one image.

    Args:
        image: a PIL image or uint8 array (see :func:`to_rgb_image`).
        height, width: output size in pixels.

    Returns:
        float32 ``(height, width, 3)`` in ``[-1, 1]``: the image resized to exactly
        ``height x width`` with ``PIL.Image.Resampling.LANCZOS`` (stretched, not cropped),
        divided by 255, then ``2 x - 1``.

    Raises:
        InputError: an image :func:`to_rgb_image` refuses.
    """
    import PIL.Image

    rgb = to_rgb_image(image)
    resized = rgb.resize((int(width), int(height)), resample=PIL.Image.Resampling.LANCZOS)
    pixels = np.asarray(resized).astype(np.float32) / np.float32(255.0)
    return np.float32(2.0) * pixels - np.float32(1.0)
