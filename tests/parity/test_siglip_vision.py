"""Parity of vidax's SigLIP vision tower and image processor with transformers (HunyuanVideo
1.5's ``image_encoder`` / ``feature_extractor``).

Model: tiny ``SiglipVisionModel`` (D 36, N 3, K 12, MLP 50, 3 layers, 30 px images in 6 px
patches -> 25 tokens, the attention-pooling head on), every parameter randomised (the head's
probe and fused in-projection included), written with ``save_pretrained`` and read back with the
one component loader. Compared: ``last_hidden_state`` (what HunyuanVideo 1.5 takes) and
``pooler_output``.

Processor: :func:`siglip_preprocess` against ``SiglipImageProcessor`` (transformers 5.24 without
torchvision: its PIL backend) on images of other sizes and aspect ratios; both run the same PIL
resize and numpy float arithmetic, so the results must be identical.

Full size: the so400m-patch14-384 tower of FLUX.1-Redux-dev, which HunyuanVideo 1.5's converter
loads (reference_configs/*1.5*i2v*/image_encoder/source.json names it; its config.json is not in
reference_configs, so the values below are that released config's, checked here against what the
reference configs do fix: the transformer's ``image_embed_dim`` 1152 and the pipeline's
``vision_num_semantic_tokens`` 729).
"""

from __future__ import annotations

import glob
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from flax import nnx  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from tests.parity.helpers import max_rel_err, randomize_torch_module, source_key_shapes  # noqa: E402
from tests.paths import REFERENCE_CONFIGS  # noqa: E402
from vidax.encoders.siglip import (  # noqa: E402
    SiglipVisionConfig,
    SiglipVisionEncoder,
    siglip_preprocess,
    siglip_vision_key_rules,
)
from vidax.errors import ConfigError, InputError  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402
from vidax.weights.loader import abstract_params, path_str  # noqa: E402

TINY = dict(
    hidden_size=36, intermediate_size=50, num_hidden_layers=3, num_attention_heads=3,
    image_size=30, patch_size=6, layer_norm_eps=1e-6,
)  # fmt: skip

# fp32 on both sides, the same operations; only summation orders differ (measured max_rel_err
# ~1.2e-7 for both outputs). A wrong weight, transpose, head split or q/k/v order gives ~1e-1.
FP32_TOL = 1e-5
BF16_TOL = 2e-2

# SiglipImageProcessor config of google/siglip-so400m-patch14-384 (FLUX.1-Redux-dev's
# feature_extractor); do_convert_rgb null as in that file (the pipeline passes True).
HV15_PREPROCESSOR = {
    "do_convert_rgb": None,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "SiglipImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "SiglipProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 384, "width": 384},
}

# FLUX.1-Redux-dev image_encoder/config.json (SiglipVisionModel, so400m-patch14-384).
SO400M = {
    "architectures": ["SiglipVisionModel"], "attention_dropout": 0.0,
    "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "image_size": 384,
    "intermediate_size": 4304, "layer_norm_eps": 1e-06, "model_type": "siglip_vision_model",
    "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 27, "patch_size": 14,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.3",
}  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    ref = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**TINY)).eval()
    randomize_torch_module(ref, 7)
    path = tmp_path_factory.mktemp("siglip_vision")
    ref.save_pretrained(path)
    return ref, path


def _pixels(seed: int, batch: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 30, 30, 3)).astype(np.float32)


def _ref(ref, pixels):
    with torch.no_grad():
        out = ref(torch.from_numpy(pixels.transpose(0, 3, 1, 2)))
    return out.last_hidden_state.numpy(), out.pooler_output.numpy()


def test_fp32_matches_reference(saved):
    ref, path = saved
    enc = load_component("SiglipVisionModel", path)
    pixels = _pixels(0)
    want_last, want_pooled = _ref(ref, pixels)
    last, pooled = nnx.jit(lambda e, x: e.encode(x))(enc, jnp.asarray(pixels))
    assert last.shape == (2, 25, 36) and pooled.shape == (2, 36)
    assert max_rel_err(np.asarray(last), want_last) < FP32_TOL
    assert max_rel_err(np.asarray(pooled), want_pooled) < FP32_TOL
    # __call__ is last_hidden_state (the head not run)
    assert max_rel_err(np.asarray(nnx.jit(lambda e, x: e(x))(enc, jnp.asarray(pixels))), want_last) < FP32_TOL
    # another image changes the output: the comparison is not vacuous
    other, _ = _ref(ref, _pixels(1))
    assert max_rel_err(other, want_last) > 0.1


def test_bf16_close_to_reference(saved):
    """bf16 parameters and matmuls (as the pipeline usually loads it) against the fp32 reference:
    bf16 rounding (~2^-9 relative per op) through 3 blocks and the final norm."""
    ref, path = saved
    enc = load_component("SiglipVisionModel", path, dtype=jnp.bfloat16)
    pixels = _pixels(3)
    want_last, want_pooled = _ref(ref, pixels)
    last, pooled = nnx.jit(lambda e, x: e.encode(x))(enc, jnp.asarray(pixels))
    assert last.dtype == pooled.dtype == jnp.bfloat16
    assert max_rel_err(np.asarray(last.astype(jnp.float32)), want_last) < BF16_TOL
    assert max_rel_err(np.asarray(pooled.astype(jnp.float32)), want_pooled) < BF16_TOL


def test_transformers4_prefixed_checkpoint_and_no_head(saved, tmp_path):
    """The released files prefix keys with vision_model.; a tower without the head loads too."""
    ref, path = saved
    tensors = load_file(str(path / "model.safetensors"))
    save_file({f"vision_model.{k}": v for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    pixels = _pixels(2)
    want, _ = _ref(ref, pixels)
    got = load_component("SiglipVisionModel", tmp_path)(jnp.asarray(pixels))
    assert max_rel_err(np.asarray(got), want) < FP32_TOL

    headless = tmp_path / "headless"
    headless.mkdir()
    save_file({k: v for k, v in tensors.items() if not k.startswith("head.")}, str(headless / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    (headless / "config.json").write_text(json.dumps({**config, "vision_use_head": False}))
    enc = load_component("SiglipVisionModel", headless)
    last, pooled = enc.encode(jnp.asarray(pixels))
    assert pooled is None and max_rel_err(np.asarray(last), want) < FP32_TOL


def test_config_and_input_errors(saved):
    _, path = saved
    with pytest.raises(ConfigError, match="hidden_act"):
        SiglipVisionConfig.from_config_dict({**TINY, "hidden_act": "mish"})
    with pytest.raises(ConfigError, match="image_size"):
        SiglipVisionConfig.from_config_dict({**TINY, "image_size": [30, 36]})
    with pytest.raises(ConfigError, match="siglip_vision_model"):
        SiglipVisionConfig.from_config_dict({**TINY, "model_type": "clip_vision_model"})
    full = transformers.SiglipConfig(vision_config=TINY).to_dict()
    assert SiglipVisionConfig.from_config_dict(json.loads(json.dumps(full))).num_patches == 25
    enc = load_component("SiglipVisionModel", path)
    with pytest.raises(InputError, match="channels-first"):
        enc(np.zeros((1, 3, 30, 30), np.float32))
    with pytest.raises(InputError, match="floating"):
        enc(np.zeros((1, 30, 30, 3), np.uint8))


def _reference_pixels(image, config):
    processor = transformers.SiglipImageProcessor.from_dict(config)
    # as HunyuanVideo15ImageToVideoPipeline._get_image_embeds calls it
    out = processor.preprocess(images=image, do_resize=True, return_tensors="np", do_convert_rgb=True)
    return out["pixel_values"][0].transpose(1, 2, 0)


@pytest.mark.parametrize("shape", [(360, 640), (211, 157)], ids=["landscape", "portrait"])
def test_preprocess_matches_siglip_image_processor(shape):
    rng = np.random.default_rng(shape[0])
    image = Image.fromarray(rng.integers(0, 256, shape + (3,), dtype=np.uint8))
    want = _reference_pixels(image, HV15_PREPROCESSOR)
    got = siglip_preprocess(image, HV15_PREPROCESSOR, do_resize=True, do_convert_rgb=True)
    assert got.shape == want.shape == (384, 384, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # RGBA is composited onto white by both (the call's do_convert_rgb=True over the file's null)
    rgba = Image.fromarray(rng.integers(0, 256, (50, 70, 4), dtype=np.uint8))
    np.testing.assert_array_equal(siglip_preprocess(rgba, HV15_PREPROCESSOR, do_resize=True, do_convert_rgb=True),
                                  _reference_pixels(rgba, HV15_PREPROCESSOR))  # fmt: skip
    # the class defaults (224 px) when the file gives none; a plain call of the processor
    plain = transformers.SiglipImageProcessor.from_dict({})(images=image, return_tensors="np")["pixel_values"]
    np.testing.assert_array_equal(siglip_preprocess(image, {}), plain[0].transpose(1, 2, 0))
    with pytest.raises(ConfigError, match="do_pad"):
        siglip_preprocess(image, {**HV15_PREPROCESSOR, "do_pad": True})


def test_full_size_matches_transformers():
    """so400m-patch14-384 as HunyuanVideo 1.5 loads it: eval_shape count and keys vs meta-device."""
    configs = sorted(
        glob.glob(os.path.join(REFERENCE_CONFIGS, "*HunyuanVideo-1.5*i2v*", "image_encoder", "source.json"))
    )
    assert len(configs) >= 4, configs
    for path in configs:
        with open(path) as f:
            assert json.load(f)["hf_class"] == "SiglipVisionModel"
        with open(os.path.join(os.path.dirname(os.path.dirname(path)), "transformer", "config.json")) as f:
            assert json.load(f)["image_embed_dim"] == SO400M["hidden_size"]
    cfg = SiglipVisionConfig.from_config_dict(SO400M)
    assert cfg.num_patches == 729  # the pipeline's vision_num_semantic_tokens
    with torch.device("meta"):
        ref = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**SO400M))
    ref_count = sum(p.numel() for p in ref.parameters())
    ref_shapes = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    _, abstract = abstract_params(lambda: SiglipVisionEncoder(cfg))
    ours = {path_str(p): v.get_value() for p, v in abstract.items()}
    assert sum(math.prod(v.shape) for v in ours.values()) == ref_count == 428_225_600
    # every reference key maps 1:1 to a parameter of the right shape (the loader's plan)
    keys = source_key_shapes(abstract, siglip_vision_key_rules(cfg, ref_shapes))
    conv = "embeddings.patch_embedding.weight"  # (O, I, H, W) reported in vidax's (H, W, I, O)
    o, i, h, w = ref_shapes[conv]
    assert keys == {**ref_shapes, conv: (h, w, i, o)}
