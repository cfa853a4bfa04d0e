"""Parity of vidax's LLaVA image features (vision tower + projector) with transformers 5.24.

Model: a tiny ``LlavaForConditionalGeneration`` (CLIP vision D 36, N 3, K 12, MLP 50, 3 layers,
30 px images in 6 px patches -> 25 patch tokens; Llama text D 40, 2 layers), every parameter
randomised (the language model's too), written with ``save_pretrained`` and read back with
:func:`~vidax.weights.component.load_component`, which takes only the vision tower and projector tensors. Compared:
``LlavaModel.get_image_features(pixel_values).pooler_output`` (``vision_feature_layer=-2``,
``"default"`` strategy = drop the class token; and ``"full"`` at layer -1).

Preprocessing: :func:`clip_preprocess` against ``CLIPImageProcessor`` on a non-square PIL image
with the settings of a LLaVA-1.5-style processor (shortest edge 336, center crop 336, bicubic,
OpenAI CLIP mean / std), which the HunyuanVideo-I2V pipeline runs on its input image.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from PIL import Image  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from tests.parity.helpers import max_rel_err, randomize_torch_module  # noqa: E402
from tests.parity.test_clip_vision import WAN_PREPROCESSOR  # noqa: E402
from vidax.encoders.clip import clip_preprocess  # noqa: E402
from vidax.encoders.llava import LLAVA_VISION, LlavaVisionConfig, llava_image_features  # noqa: E402
from vidax.errors import CheckpointError, ConfigError  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402

VISION = dict(hidden_size=36, intermediate_size=50, num_hidden_layers=3, num_attention_heads=3,
              image_size=30, patch_size=6)  # fmt: skip
TEXT = dict(hidden_size=40, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=10, vocab_size=300)  # fmt: skip

# fp32 on both sides, same operations, summation order only (measured 1.2e-7 / 2.8e-7); a wrong layer,
# a kept class token or a wrong projector weight gives errors of order 0.1 or shape mismatches.
FP32_TOL = 1e-5


def _config(**overrides):
    return transformers.LlavaConfig(
        vision_config=transformers.CLIPVisionConfig(**VISION), text_config=transformers.LlamaConfig(**TEXT),
        image_token_index=299, **overrides,
    )  # fmt: skip


@pytest.fixture(scope="module", params=["default_-2", "full_-1"])
def saved(request, tmp_path_factory):
    strategy, layer = request.param.split("_")
    ref = transformers.LlavaForConditionalGeneration(
        _config(vision_feature_select_strategy=strategy, vision_feature_layer=int(layer))
    ).eval()
    randomize_torch_module(ref, seed=21 + int(layer))
    path = tmp_path_factory.mktemp("llava")
    ref.save_pretrained(path)
    return ref, path


def _pixels(seed: int, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 30, 30, 3)).astype(np.float32)


def _ref_features(ref, pixels):
    with torch.no_grad():
        out = ref.model.get_image_features(torch.from_numpy(pixels.transpose(0, 3, 1, 2)))
    return torch.stack(list(out.pooler_output)).numpy()


def test_image_features_match_reference(saved):
    ref, path = saved
    keys = set(load_file(str(path / "model.safetensors")))
    assert any(k.startswith("language_model.") for k in keys)  # the file holds the LM too
    enc = load_component(LLAVA_VISION, path)
    cfg = enc.config
    pixels = _pixels(0)
    want = _ref_features(ref, pixels)
    got = np.asarray(llava_image_features(enc, pixels))
    n = 25 if cfg.vision_feature_select_strategy == "default" else 26
    assert got.shape == want.shape == (2, n, 40) == (2, cfg.num_image_tokens, cfg.text_hidden_size)
    err = max_rel_err(got, want)
    assert err < FP32_TOL, err
    # Not vacuous: another image gives other features.
    assert max_rel_err(_ref_features(ref, _pixels(1)), want) > 0.1


def test_other_key_layouts_and_refusals(saved, tmp_path):
    """transformers 4 files (``vision_tower.vision_model.``) and the ``model.``-prefixed layout
    load too; a stray vision tensor is refused, the language model's tensors are not read."""
    ref, path = saved
    tensors = load_file(str(path / "model.safetensors"))
    config = (path / "config.json").read_text()
    pixels = _pixels(2)
    want = _ref_features(ref, pixels)
    layouts = {
        "v4": lambda k: k.replace("vision_tower.", "vision_tower.vision_model.", 1),
        "model": lambda k: "model." + k if k.startswith(("vision_tower.", "multi_modal_projector.")) else k,
    }
    for name, rename in layouts.items():
        folder = tmp_path / name
        folder.mkdir()
        save_file({rename(k): v for k, v in tensors.items()}, str(folder / "model.safetensors"))
        (folder / "config.json").write_text(config)
        got = np.asarray(llava_image_features(load_component(LLAVA_VISION, folder), pixels))
        assert max_rel_err(got, want) < FP32_TOL, name
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(config)
    save_file({**tensors, "multi_modal_projector.linear_3.weight": torch.zeros(2, 2)}, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="linear_3"):
        load_component(LLAVA_VISION, bad)
    del tensors["vision_tower.post_layernorm.bias"]
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="post_layernorm.bias") as e:
        load_component(LLAVA_VISION, bad)
    assert "language_model" not in str(e.value)


def test_config():
    raw = json.loads(json.dumps(_config().to_dict()))
    cfg = LlavaVisionConfig.from_config_dict(raw)
    assert (cfg.text_hidden_size, cfg.vision_feature_layer, cfg.image_token_index) == (40, -2, 299)
    assert cfg.vision_config.hidden_size == 36 and cfg.num_image_tokens == 25
    with pytest.raises(ConfigError, match="several layers"):
        LlavaVisionConfig.from_config_dict({**raw, "vision_feature_layer": [-2, -1]})
    with pytest.raises(ConfigError, match="vision_feature_select_strategy"):
        LlavaVisionConfig.from_config_dict({**raw, "vision_feature_select_strategy": "cls"})
    with pytest.raises(ConfigError, match="vision_feature_layer"):
        LlavaVisionConfig.from_config_dict({**raw, "vision_feature_layer": 4})
    with pytest.raises(ConfigError, match="text_config"):
        LlavaVisionConfig.from_config_dict({k: v for k, v in raw.items() if k != "text_config"})


# A LLaVA-1.5-style CLIPImageProcessor (openai/clip-vit-large-patch14-336 settings): the Wan
# one (OpenAI CLIP mean / std, bicubic) at 336 px.
LLAVA_PREPROCESSOR = {**WAN_PREPROCESSOR, "crop_size": {"height": 336, "width": 336}, "size": {"shortest_edge": 336}}


def test_preprocess_non_square_pil_image():
    rng = np.random.default_rng(5)
    image = Image.fromarray(rng.integers(0, 256, (203, 517, 3), dtype=np.uint8))  # wide, W > H
    processor = transformers.CLIPImageProcessor.from_dict(LLAVA_PREPROCESSOR)
    want = processor(images=image, return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
    got = clip_preprocess(image, LLAVA_PREPROCESSOR)
    assert got.shape == want.shape == (336, 336, 3)
    # The same PIL resize and numpy float arithmetic on both sides: identical results.
    np.testing.assert_array_equal(got, want)
