"""Every released HunyuanVideo 1.5 transformer config parses, builds abstractly, and has diffusers'
parameter count and state-dict keys.

Covers the eight ``hunyuanvideo-community__HunyuanVideo-1.5-Diffusers-*`` transformer configs in
``reference_configs/`` (480p / 720p, T2V / I2V, CFG-distilled, step-distilled with MeanFlow).
The reference is ``diffusers.HunyuanVideo15Transformer3DModel`` built under accelerate's
``init_empty_weights`` (no memory).
"""

from __future__ import annotations

import glob
import inspect
import json
import math
import os

import jax
import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.errors import ConfigError
from vidax.models.hunyuan_video15.config import HunyuanVideo15TransformerConfig
from vidax.models.hunyuan_video15.convert import TRANSFORMER_FP32_PARAMS
from vidax.models.hunyuan_video15.transformer import HunyuanVideo15Transformer3DModel
from vidax.registry import registry
from vidax.weights.loader import DtypePolicy

CONFIGS = sorted(
    glob.glob(
        os.path.join(REFERENCE_CONFIGS, "hunyuanvideo-community__HunyuanVideo-1.5-*", "transformer", "config.json")
    )
)
IDS = [p.split(os.sep)[-3].split("Diffusers-")[-1] for p in CONFIGS]


def test_every_released_config_is_covered():
    assert len(CONFIGS) == 8, CONFIGS


def _reference(cfg: dict):
    pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    accelerate = pytest.importorskip("accelerate")
    with accelerate.init_empty_weights():
        ref = diffusers.HunyuanVideo15Transformer3DModel.from_config(cfg)
    return sum(p.numel() for p in ref.parameters()), set(ref.state_dict())


@pytest.mark.parametrize("path", CONFIGS, ids=IDS)
def test_param_count_matches_reference(path):
    with open(path) as f:
        raw = json.load(f)
    cfg = HunyuanVideo15TransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: HunyuanVideo15Transformer3DModel(cfg, rngs=nnx.Rngs(0)))
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    ours = sum(math.prod(v.get_value().shape) for _, v in flat)
    theirs, ref_keys = _reference(raw)
    print(f"{os.path.relpath(path, REFERENCE_CONFIGS)}: {ours / 1e9:.4f} B parameters")
    assert ours == theirs
    # The key rules map every reference key onto exactly one of our parameters.
    rules = registry().component("HunyuanVideo15Transformer3DModel").rules(cfg)
    ours_keys = set()
    for p, _ in flat:
        ours_keys |= (
            {rules.join(p, i) for i in range(cfg.num_layers)} if p[0] == "transformer_blocks" else {rules.join(p, None)}
        )
    assert ours_keys == ref_keys
    policy = DtypePolicy(jax.numpy.bfloat16, TRANSFORMER_FP32_PARAMS)
    kept = {".".join(map(str, p)) for p, _ in flat if policy.dtype_for(p) == "float32"}
    assert "time_embed.timestep_embedder.linear_1.kernel" in kept
    assert ("time_embed.timestep_embedder_r.linear_1.kernel" in kept) == cfg.use_meanflow
    assert "transformer_blocks.attn.norm_q.scale" in kept
    assert "context_embedder.token_refiner.refiner_blocks.0.norm1.scale" in kept
    assert {"context_embedder_2.norm.scale", "image_embedder.norm_in.bias", "image_embedder.norm_out.scale"} <= kept
    assert "transformer_blocks.norm1.linear.kernel" not in kept and "cond_type_embed.embedding" not in kept


def test_known_size():
    cfg = HunyuanVideo15TransformerConfig.from_json_file(CONFIGS[0])
    model = nnx.eval_shape(lambda: HunyuanVideo15Transformer3DModel(cfg, rngs=nnx.Rngs(0)))
    n = sum(math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert round(n / 1e9, 1) == 8.3  # the published "8.3B"


@pytest.mark.parametrize(
    "override,match",
    [
        ({"qk_norm": None}, "qk_norm=None .* attn.norm_q unconditionally"),
        ({"rope_axes_dim": [16, 56, 48]}, "rope_axes_dim"),
        ({"task_type": "v2v"}, "task_type"),
        ({"use_meanflow": 1}, "use_meanflow"),
        ({"image_embed_dim": 0}, "image_embed_dim"),
        (
            {"_class_name": None, "guidance_embeds": True},
            "unknown setting guidance_embeds",
        ),  # naming no diffusers class: strict (a key diffusers ignores is ignored: test_checkpoint_errors.py)
    ],
)
def test_config_refuses(override, match):
    with pytest.raises(ConfigError, match=match):
        HunyuanVideo15TransformerConfig.from_config_dict(
            {"_class_name": "HunyuanVideo15Transformer3DModel", **override}
        )


def test_config_defaults_are_diffusers():
    diffusers = pytest.importorskip("diffusers")
    sig = inspect.signature(diffusers.HunyuanVideo15Transformer3DModel.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    ours = HunyuanVideo15TransformerConfig().to_dict()
    assert set(ours) == set(defaults)
    for key, value in defaults.items():
        assert ours[key] == (tuple(value) if isinstance(value, (list, tuple)) else value), key


# -- the VAE (``vae/config.json``) -------------------------------------------------------------

VAE_CONFIGS = sorted(
    glob.glob(os.path.join(REFERENCE_CONFIGS, "hunyuanvideo-community__HunyuanVideo-1.5-*", "vae", "config.json"))
)
VAE_IDS = [p.split(os.sep)[-3].split("Diffusers-")[-1] for p in VAE_CONFIGS]


def test_every_released_vae_config_is_covered():
    assert len(VAE_CONFIGS) == 8, VAE_CONFIGS


@pytest.mark.parametrize("path", VAE_CONFIGS, ids=VAE_IDS)
def test_vae_param_count_matches_reference(path):
    """The full-size VAE built abstractly has diffusers' parameters 1:1 (keys by the registry's
    rules, shapes after the loader's re-layout, counts equal); the RMS norms' gammas (and only
    they) stay float32 under a bf16 policy."""
    pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    accelerate = pytest.importorskip("accelerate")
    from tests.parity.helpers import assert_reference_parameters
    from vidax.models.hunyuan_video15.config import HunyuanVideo15VAEConfig
    from vidax.models.hunyuan_video15.convert import VAE_FP32_PARAMS
    from vidax.models.hunyuan_video15.vae import HunyuanVideo15VAE

    with open(path) as f:
        raw = json.load(f)
    cfg = HunyuanVideo15VAEConfig.from_json_file(path)
    assert (cfg.spatial_compression, cfg.temporal_compression, cfg.latent_channels) == (16, 4, 32)
    assert cfg.scaling_factor == 1.03682
    model = nnx.eval_shape(lambda: HunyuanVideo15VAE(cfg, rngs=nnx.Rngs(0)))
    with accelerate.init_empty_weights():
        ref = diffusers.AutoencoderKLHunyuanVideo15.from_config(raw)
    rules = registry().component("AutoencoderKLHunyuanVideo15").rules(cfg)
    n = assert_reference_parameters(model, ref, rules)
    print(f"{os.path.relpath(path, REFERENCE_CONFIGS)}: {n / 1e6:.2f} M parameters")
    assert n == sum(p.numel() for p in ref.parameters())
    policy = DtypePolicy(jax.numpy.bfloat16, VAE_FP32_PARAMS)
    flat = [p for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    kept = {".".join(map(str, p)) for p in flat if policy.dtype_for(p) == "float32"}
    gammas = {k for k in ref.state_dict() if k.endswith(".gamma")}
    assert len(kept) == len(gammas) > 0
    assert "decoder.mid_block.attentions.0.norm.gamma" in kept and "decoder.conv_out.conv.kernel" not in kept


def test_vae_config_defaults_are_diffusers():
    diffusers = pytest.importorskip("diffusers")
    from vidax.models.hunyuan_video15.config import HunyuanVideo15VAEConfig

    sig = inspect.signature(diffusers.AutoencoderKLHunyuanVideo15.__init__)
    defaults = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    ours = HunyuanVideo15VAEConfig().to_dict()
    assert set(ours) == set(defaults)
    for key, value in defaults.items():
        assert ours[key] == (tuple(value) if isinstance(value, (list, tuple)) else value), key


REPOS = sorted(os.path.basename(os.path.dirname(os.path.dirname(p))) for p in CONFIGS)
#: The reference's defaults of each released checkpoint: (height, width) of the 16:9 bucket of
#: its target_size, the guider's guidance_scale, the scheduler's shift.
RELEASED = {"480p": ((480, 848), 640), "720p": ((720, 1280), 960)}


def released_folder(repo: str, tmp_path) -> str:
    """The reference configs of the released HunyuanVideo 1.5 ``repo`` as a pipeline folder
    (:func:`tests.test_hunyuan_pipeline_full_size._folder`) whose model_index.json names every
    component the released repo has."""
    from tests.test_hunyuan_pipeline_full_size import _folder

    folder = _folder(repo, tmp_path)
    # The recorded model_index.json omits the components whose class names were not seen
    # (SOURCES.md): the released repos' are these (diffusers' HunyuanVideo15Pipeline signature).
    index_file = os.path.join(folder, "model_index.json")
    with open(index_file) as f:
        index = json.load(f)
    for name, cls in (
        ("text_encoder", "Qwen2_5_VLTextModel"),
        ("tokenizer", "Qwen2Tokenizer"),
        ("tokenizer_2", "ByT5Tokenizer"),
    ):
        index.setdefault(name, ["transformers", cls])
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    with open(index_file, "w") as f:
        json.dump(index, f)
    return folder


@pytest.mark.parametrize("repo", REPOS, ids=IDS)
def test_released_checkpoints_read(repo, tmp_path):
    """Each released folder's configs read (no weights): task, defaults from the guider and the
    target_size bucket; a T2V call's latents at the default size; an I2V folder is refused by
    the T2V pipeline, naming what it does."""
    from vidax.checkpoint import Checkpoint
    from vidax.errors import InputError
    from vidax.models.hunyuan_video15.pipeline import HunyuanVideo15Pipeline

    folder = released_folder(repo, tmp_path)
    if os.path.isdir(os.path.join(folder, "feature_extractor")):
        # The I2V repos' SigLIP configs were not seen (SOURCES.md, image_encoder/source.json):
        # reading the checkpoint needs the processor file to exist and the tower's width, which
        # the recorded note gives (1152 = the transformer's image_embed_dim, SigLIP-so400m).
        with open(os.path.join(folder, "feature_extractor", "preprocessor_config.json"), "w") as f:
            json.dump({"image_processor_type": "SiglipImageProcessor"}, f)
        with open(os.path.join(folder, "image_encoder", "config.json"), "w") as f:
            json.dump({"model_type": "siglip_vision_model", "hidden_size": 1152}, f)
    info = HunyuanVideo15Pipeline.family.read_checkpoint(Checkpoint.open(folder))
    with open(os.path.join(REFERENCE_CONFIGS, repo, "guider", "config.json")) as f:
        scale = json.load(f)["guidance_scale"]
    (h, w), target = RELEASED[repo.split("Diffusers-")[-1][:4]]
    assert info.transformer_config.target_size == target
    d = info.defaults
    assert (d.height, d.width, d.num_frames, d.num_inference_steps, d.max_sequence_length) == (h, w, 121, 50, 1000)
    assert d.guidance_scale == scale
    if "t2v" in repo:
        assert info.tasks == ("t2v",)
        call = HunyuanVideo15Pipeline.check_call(info, "a cat")
        assert HunyuanVideo15Pipeline.family.latent_shape(info, call) == (1, 32, 31, h // 16, w // 16)
        assert call.do_cfg == (scale != 1.0)
    else:
        assert info.tasks == ("i2v",)
        with pytest.raises(InputError, match="does not do text-to-video"):
            HunyuanVideo15Pipeline.check_call(info, "a cat")
