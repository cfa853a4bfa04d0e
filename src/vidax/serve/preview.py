"""Preview images of a running job: the latents projected to RGB by a fixed per-VAE linear map
(a cheap look at the current latents, not a VAE decode).

The maps are ComfyUI's ``latent_rgb_factors`` / ``latent_rgb_factors_bias``
(``comfy/latent_formats.py``: ``Wan21``, ``Wan22``, ``HunyuanVideo``), made for the latents as
the denoising loop holds them (the Wan VAE's normalised ``(z - mean) / std``; HunyuanVideo's
``z * scaling_factor``), as diffusers' loop holds them too. Which map a checkpoint gets is read
from its VAE: ``AutoencoderKLWan`` with ``z_dim`` 16 (Wan2.1, Wan2.2 A14B, Cosmos-Predict2.5) or
48 (Wan2.2 TI2V-5B, Cosmos 3), ``AutoencoderKLHunyuanVideo`` (HunyuanVideo 1.0). The other
VAEs get no preview: CogVideoX's, HunyuanVideo 1.5's and LTX-2's have no published map, and
LTX-Video's loop holds packed tokens (its map would need the patch unpacking first).

The image is the middle latent frame, ``(rgb + 1) / 2`` clipped to [0, 1], as ComfyUI shows
it, at the latent resolution (e.g. 104 x 60 for 832 x 480), as a PNG data URL.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

WAN21 = ([[-0.1299, -0.1692, 0.2932], [0.0671, 0.0406, 0.0442], [0.3568, 0.2548, 0.1747],
          [0.0372, 0.2344, 0.1420], [0.0313, 0.0189, -0.0328], [0.0296, -0.0956, -0.0665],
          [-0.3477, -0.4059, -0.2925], [0.0166, 0.1902, 0.1975], [-0.0412, 0.0267, -0.1364],
          [-0.1293, 0.0740, 0.1636], [0.0680, 0.3019, 0.1128], [0.0032, 0.0581, 0.0639],
          [-0.1251, 0.0927, 0.1699], [0.0060, -0.0633, 0.0005], [0.3477, 0.2275, 0.2950],
          [0.1984, 0.0913, 0.1861]],
         [-0.1835, -0.0868, -0.3360])

WAN22 = ([[0.0119, 0.0103, 0.0046], [-0.1062, -0.0504, 0.0165], [0.0140, 0.0409, 0.0491],
          [-0.0813, -0.0677, 0.0607], [0.0656, 0.0851, 0.0808], [0.0264, 0.0463, 0.0912],
          [0.0295, 0.0326, 0.0590], [-0.0244, -0.0270, 0.0025], [0.0443, -0.0102, 0.0288],
          [-0.0465, -0.0090, -0.0205], [0.0359, 0.0236, 0.0082], [-0.0776, 0.0854, 0.1048],
          [0.0564, 0.0264, 0.0561], [0.0006, 0.0594, 0.0418], [-0.0319, -0.0542, -0.0637],
          [-0.0268, 0.0024, 0.0260], [0.0539, 0.0265, 0.0358], [-0.0359, -0.0312, -0.0287],
          [-0.0285, -0.1032, -0.1237], [0.1041, 0.0537, 0.0622], [-0.0086, -0.0374, -0.0051],
          [0.0390, 0.0670, 0.2863], [0.0069, 0.0144, 0.0082], [0.0006, -0.0167, 0.0079],
          [0.0313, -0.0574, -0.0232], [-0.1454, -0.0902, -0.0481], [0.0714, 0.0827, 0.0447],
          [-0.0304, -0.0574, -0.0196], [0.0401, 0.0384, 0.0204], [-0.0758, -0.0297, -0.0014],
          [0.0568, 0.1307, 0.1372], [-0.0055, -0.0310, -0.0380], [0.0239, -0.0305, 0.0325],
          [-0.0663, -0.0673, -0.0140], [-0.0416, -0.0047, -0.0023], [0.0166, 0.0112, -0.0093],
          [-0.0211, 0.0011, 0.0331], [0.1833, 0.1466, 0.2250], [-0.0368, 0.0370, 0.0295],
          [-0.3441, -0.3543, -0.2008], [-0.0479, -0.0489, -0.0420], [-0.0660, -0.0153, 0.0800],
          [-0.0101, 0.0068, 0.0156], [-0.0690, -0.0452, -0.0927], [-0.0145, 0.0041, 0.0015],
          [0.0421, 0.0451, 0.0373], [0.0504, -0.0483, -0.0356], [-0.0837, 0.0168, 0.0055]],
         [0.0317, -0.0878, -0.1388])

HUNYUAN_VIDEO = ([[-0.0395, -0.0331, 0.0445], [0.0696, 0.0795, 0.0518], [0.0135, -0.0945, -0.0282],
                  [0.0108, -0.0250, -0.0765], [-0.0209, 0.0032, 0.0224], [-0.0804, -0.0254, -0.0639],
                  [-0.0991, 0.0271, -0.0669], [-0.0646, -0.0422, -0.0400], [-0.0696, -0.0595, -0.0894],
                  [-0.0799, -0.0208, -0.0375], [0.1166, 0.1627, 0.0962], [0.1165, 0.0432, 0.0407],
                  [-0.2315, -0.1920, -0.1355], [-0.0270, 0.0401, -0.0821], [-0.0616, -0.0997, -0.0727],
                  [0.0249, -0.0469, -0.1703]],
                 [0.0259, -0.0192, -0.0761])

#: The map of each VAE class by its latent channels.
FACTORS = {("AutoencoderKLWan", 16): WAN21, ("AutoencoderKLWan", 48): WAN22,
           ("AutoencoderKLHunyuanVideo", 16): HUNYUAN_VIDEO}


def latent_rgb_factors(checkpoint: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(factors (C, 3), bias (3,))`` float32 for the checkpoint's VAE (a
    :class:`vidax.checkpoint.Checkpoint`), or None where there is no map (see the module)."""
    vae = checkpoint.class_of("vae")
    if vae is None:
        return None
    config = checkpoint.config("vae")
    channels = config.get("z_dim", config.get("latent_channels"))
    found = FACTORS.get((vae, channels))
    return None if found is None else (np.asarray(found[0], np.float32), np.asarray(found[1], np.float32))


def preview_images(latents: np.ndarray, factors: np.ndarray, bias: np.ndarray) -> list[str]:
    """One PNG data URL per video of ``latents`` ((B, C, T, H, W), the diffusers layout, as
    :meth:`~vidax.pipelines.base.VideoPipeline.loop_latents_to_diffusers` gives): the middle
    frame through the map."""
    from PIL import Image

    frame = np.asarray(latents[:, :, latents.shape[2] // 2], np.float32)  # (B, C, H, W)
    rgb = np.einsum("bchw,cr->bhwr", frame, factors) + bias
    pixels = np.round(np.clip((rgb + 1) / 2, 0, 1) * 255).astype(np.uint8)
    urls = []
    for image in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="PNG")
        urls.append("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
    return urls
