"""Parity of vidax's CLIP vision tower and preprocessing with transformers.

Model: tiny ``CLIPVisionModel``s of distinct sizes (D 36, N 3, K 12, MLP 50, 3 layers, 30 px
images in 6 px patches -> 1 + 25 tokens), every parameter randomised (LayerNorm weights and
biases, class and position embeddings included), written with ``save_pretrained`` and read back
with :func:`~vidax.weights.component.load_component`. Compared: ``hidden_states[-2]`` (what the Wan I2V pipelines use),
``last_hidden_state`` and ``hidden_states[0]``.

Preprocessing: :func:`clip_preprocess` against ``CLIPImageProcessor`` (transformers 5.24 without
torchvision: its PIL backend) on non-square random images; both run the same PIL resize and
the same numpy float arithmetic, so the results must be identical.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from tests.parity.helpers import max_rel_err, randomize_torch_module  # noqa: E402
from vidax.encoders.clip import CLIPVisionConfig, clip_preprocess  # noqa: E402
from vidax.errors import CheckpointError, ConfigError, InputError  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

TINY = dict(
    hidden_size=36, intermediate_size=50, num_hidden_layers=3, num_attention_heads=3,
    image_size=30, patch_size=6, layer_norm_eps=1e-5, projection_dim=17,
)  # fmt: skip

# fp32 on both sides, same operations; only summation orders differ (measured max_rel_err
# 0.8e-7..2.7e-7 on these fixtures). Any wrong weight, transpose, head split or token order gives
# errors of order 1e-1.
FP32_TOL = 1e-5
# bf16 parameters and matmuls (rounding ~2^-9 relative per op) through up to 3 blocks against the
# fp32 reference: measured 4.6e-3..6.6e-3; transformers' own bf16 model is 5.4e-3..6.7e-3 away
# from its fp32 output on the same inputs. 2e-2 leaves 3x margin, far below a structural error.
BF16_TOL = 2e-2

# The Wan checkpoints' processor (laion CLIP-ViT-H-14 / CLIPImageProcessor defaults).
WAN_PREPROCESSOR = {
    "crop_size": {"height": 224, "width": 224},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "CLIPImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 224},
}


def _save(tmp_path_factory, seed: int, **overrides):
    cfg = transformers.CLIPVisionConfig(**{**TINY, **overrides})
    ref = transformers.CLIPVisionModel(cfg).eval()
    randomize_torch_module(ref, seed)
    path = tmp_path_factory.mktemp("clip_vision")
    ref.save_pretrained(path)
    return ref, path


@pytest.fixture(scope="module", params=["quick_gelu", "gelu"])
def saved(request, tmp_path_factory):
    """(torch model, folder): quick_gelu (transformers' default) and gelu (Wan's ViT-H/14)."""
    return _save(tmp_path_factory, seed={"quick_gelu": 3, "gelu": 4}[request.param],
                 hidden_act=request.param)  # fmt: skip


def _pixels(seed: int, batch: int = 2) -> np.ndarray:
    """(B, H, W, 3) channels-last normalised-looking pixels."""
    return np.random.default_rng(seed).standard_normal((batch, 30, 30, 3)).astype(np.float32)


def _ref_hidden(ref, pixels: np.ndarray):
    with torch.no_grad():
        out = ref(torch.from_numpy(pixels.transpose(0, 3, 1, 2)), output_hidden_states=True)
    return [h.numpy() for h in out.hidden_states], out.last_hidden_state.numpy()


def _run(encoder, pixels, layer):
    fn = nnx.jit(lambda e, x: e(x, output_layer=layer))
    return np.asarray(fn(encoder, jnp.asarray(pixels)).astype(jnp.float32))


def test_fp32_hidden_states_match_reference(saved):
    ref, path = saved
    enc = load_component("CLIPVisionModel", path)
    pixels = _pixels(0)
    hidden, last = _ref_hidden(ref, pixels)
    assert len(hidden) == 4 and hidden[-2].shape == (2, 26, 36)
    np.testing.assert_array_equal(hidden[-1], last)  # -1 is last_hidden_state (no post norm)
    for layer in (-2, -1, 0, 1):
        got = _run(enc, pixels, layer)
        assert got.shape == hidden[layer].shape
        err = max_rel_err(got, hidden[layer])
        assert err < FP32_TOL, (layer, err)
    # Another image gives clearly different features: the comparison is not vacuous.
    other, _ = _ref_hidden(ref, _pixels(1))
    assert max_rel_err(other[-2], hidden[-2]) > 0.1
    # Per-image: a batch of one gives the same rows.
    single = _run(enc, pixels[1:], -2)
    assert max_rel_err(single, hidden[-2][1:]) < FP32_TOL


def test_transformers4_prefixed_checkpoint(saved, tmp_path):
    """Files written by transformers 4 (the released Wan ones) prefix keys with vision_model."""
    ref, path = saved
    tensors = load_file(str(path / "model.safetensors"))
    prefixed = {f"vision_model.{k}": v for k, v in tensors.items()}
    save_file(prefixed, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    # transformers reads this layout too (its CLIPVisionModel conversion strips the prefix).
    again = transformers.CLIPVisionModel.from_pretrained(tmp_path).eval()
    pixels = _pixels(2)
    hidden, _ = _ref_hidden(again, pixels)
    got = _run(load_component("CLIPVisionModel", tmp_path), pixels, -2)
    assert max_rel_err(got, hidden[-2]) < FP32_TOL
    # A projection head (CLIPVisionModelWithProjection) is not part of CLIPVisionModel: refused.
    save_file({**tensors, "visual_projection.weight": torch.zeros(17, 36)},
              str(tmp_path / "model.safetensors"))  # fmt: skip
    with pytest.raises(CheckpointError, match="visual_projection"):
        load_component("CLIPVisionModel", tmp_path)
    # CLIPVisionModelWithProjection (SkyReels-V2 I2V) is the same tower, its projection not read.
    got = _run(load_component("CLIPVisionModelWithProjection", tmp_path), pixels, -2)
    assert max_rel_err(got, hidden[-2]) < FP32_TOL


def test_bf16_close_to_reference(saved):
    ref, path = saved
    enc = load_component("CLIPVisionModel", path, dtype=jnp.bfloat16)
    assert enc.encoder.layers.mlp.fc1.kernel[...].dtype == jnp.bfloat16
    pixels = _pixels(5)
    hidden, _ = _ref_hidden(ref, pixels)
    fn = nnx.jit(lambda e, x: e(x, output_layer=-2))
    got = fn(enc, jnp.asarray(pixels))
    assert got.dtype == jnp.bfloat16
    err = max_rel_err(np.asarray(got.astype(jnp.float32)), hidden[-2])
    assert err < BF16_TOL, err


def test_config_forms():
    """A CLIPVisionConfig file and a full CLIPConfig (its vision_config) give the same config."""
    vision = transformers.CLIPVisionConfig(**TINY).to_dict()
    full = transformers.CLIPConfig(vision_config=TINY).to_dict()
    a = CLIPVisionConfig.from_config_dict(json.loads(json.dumps(vision)))
    b = CLIPVisionConfig.from_config_dict(json.loads(json.dumps(full)))
    assert a == b
    assert (a.hidden_size, a.num_patches, a.head_dim, a.hidden_act) == (36, 25, 12, "quick_gelu")
    with pytest.raises(ConfigError, match="hidden_act"):
        CLIPVisionConfig.from_config_dict({**TINY, "hidden_act": "mish"})
    with pytest.raises(ConfigError, match="not a multiple"):
        CLIPVisionConfig.from_config_dict({**TINY, "num_attention_heads": 5})
    with pytest.raises(ConfigError, match="unknown setting"):
        CLIPVisionConfig.from_config_dict({**TINY, "vision_feature_layer": -2})
    with pytest.raises(ConfigError, match="clip_vision_model"):
        CLIPVisionConfig.from_config_dict({**TINY, "model_type": "siglip_vision_model"})


def test_bad_inputs(saved):
    _, path = saved
    enc = load_component("CLIPVisionModel", path)
    with pytest.raises(InputError, match="channels-first"):
        enc(np.zeros((1, 3, 30, 30), np.float32))
    with pytest.raises(InputError, match="channels-last"):
        enc(np.zeros((1, 28, 28, 3), np.float32))
    with pytest.raises(InputError, match="floating"):
        enc(np.zeros((1, 30, 30, 3), np.uint8))
    with pytest.raises(InputError, match="output_layer"):
        enc(np.zeros((1, 30, 30, 3), np.float32), output_layer=4)
    with pytest.raises(InputError, match="dtype"):
        load_component("CLIPVisionModel", path, dtype=jnp.float16)
    with pytest.raises(InputError, match="not a folder"):
        load_component("CLIPVisionModel", str(path / "config.json"))


# ----------------------------------------------------------------------------- preprocessing


def _reference_pixels(image, config) -> np.ndarray:
    processor = transformers.CLIPImageProcessor.from_dict(config)
    out = processor(images=image, return_tensors="np")["pixel_values"]
    assert out.shape[0] == 1
    return out[0].transpose(1, 2, 0)


@pytest.mark.parametrize("shape", [(157, 211), (301, 97)], ids=["wide", "tall"])
def test_preprocess_matches_clip_image_processor(shape):
    rng = np.random.default_rng(shape[0])
    image = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
    want = _reference_pixels(image, WAN_PREPROCESSOR)
    got = clip_preprocess(image, WAN_PREPROCESSOR)
    assert got.shape == want.shape == (224, 224, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # The same image as PIL (the pipelines' usual input), and an RGBA one composited onto white.
    np.testing.assert_array_equal(clip_preprocess(Image.fromarray(image), WAN_PREPROCESSOR), want)
    alpha = rng.integers(0, 256, shape + (1,), dtype=np.uint8)
    rgba = Image.fromarray(np.concatenate([image, alpha], axis=-1), mode="RGBA")
    np.testing.assert_array_equal(clip_preprocess(rgba, WAN_PREPROCESSOR), _reference_pixels(rgba, WAN_PREPROCESSOR))


def test_preprocess_other_settings():
    """Int sizes (the laion file's form), smaller targets than the image, padding crop, floats."""
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (45, 64, 3), dtype=np.uint8)
    cases = [
        {"size": 30, "crop_size": 30, "resample": 3, "feature_extractor_type": "CLIPFeatureExtractor"},
        {"size": {"height": 20, "width": 50}, "crop_size": {"height": 24, "width": 40}, "resample": 2},
        {"do_resize": False, "crop_size": {"height": 50, "width": 33}, "image_mean": 0.5, "image_std": 0.25},
        {"size": 70, "do_center_crop": False, "do_normalize": False},
    ]  # fmt: skip
    for config in cases:
        np.testing.assert_array_equal(
            clip_preprocess(image, config), _reference_pixels(image, config), err_msg=str(config)
        )
    # Float images: integer-valued ones act as uint8; [0, 1] ones take the reference's path
    # (x255 truncated for PIL, /255 after, then rescaled again).
    for float_image in (image.astype(np.float32), image.astype(np.float64) / 255.0):
        np.testing.assert_array_equal(
            clip_preprocess(float_image, WAN_PREPROCESSOR),
            _reference_pixels(float_image, WAN_PREPROCESSOR),
        )


def test_preprocess_bad_inputs():
    with pytest.raises(InputError, match=r"\(H, W, 3\)"):
        clip_preprocess(np.zeros((3, 40, 40), np.uint8), WAN_PREPROCESSOR)
    with pytest.raises(InputError, match="range"):
        clip_preprocess(np.full((40, 40, 3), 1.5, np.float32), WAN_PREPROCESSOR)
    with pytest.raises(InputError, match="uint8 or float"):
        clip_preprocess(np.zeros((40, 40, 3), np.int64), WAN_PREPROCESSOR)
    with pytest.raises(ConfigError, match="do_pad"):
        clip_preprocess(np.zeros((40, 40, 3), np.uint8), {**WAN_PREPROCESSOR, "do_pad": True})
    with pytest.raises(ConfigError, match="longest_edge"):
        clip_preprocess(np.zeros((40, 40, 3), np.uint8), {"size": {"shortest_edge": 9, "longest_edge": 20}})
    with pytest.raises(ConfigError, match="unknown setting"):
        clip_preprocess(np.zeros((40, 40, 3), np.uint8), {"do_flip": True})
