"""HunyuanVideo 1.0 pipelines at full size, from the released configs alone (no weights):
the checkpoint reading of the three repos and the staging plan with the real parameter sizes
(``jax.eval_shape`` of the transformer, the Llama and CLIP text encoders and the VAE)."""

from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from tests.paths import REFERENCE_CONFIGS
from vidax.checkpoint import Checkpoint
from vidax.errors import ConfigError, InputError
from vidax.models.hunyuan_video.pipeline import HunyuanVideoImageToVideoPipeline, HunyuanVideoPipeline
from vidax.pipelines.staging import RESIDENT_FRACTION, plan_staging

REPOS = {
    "hunyuanvideo-community__HunyuanVideo": (HunyuanVideoPipeline, None),
    "hunyuanvideo-community__HunyuanVideo-I2V": (HunyuanVideoImageToVideoPipeline, "token_replace"),
    "hunyuanvideo-community__HunyuanVideo-I2V-33ch": (HunyuanVideoImageToVideoPipeline, "latent_concat"),
}


def _folder(repo: str, tmp_path) -> str:
    """The reference configs of ``repo`` as a pipeline folder: the component folders the repo
    records no config file for (tokenizers, the image processor) exist, empty."""
    dst = tmp_path / repo
    shutil.copytree(os.path.join(REFERENCE_CONFIGS, repo), dst)
    with open(dst / "model_index.json") as f:
        index = json.load(f)
    for name, value in index.items():
        if isinstance(value, list):
            (dst / name).mkdir(exist_ok=True)
    for name in ("text_encoder", "text_encoder_2"):
        essentials = dst / name / "arch_essentials.json"
        if essentials.exists() and not (dst / name / "config.json").exists():
            # The encoders' configs are recorded as their essential numbers only (SOURCES.md): the
            # I2V repos' LLaVA config as its text_config, HunyuanVideo 1.5's Qwen / byT5 flat.
            recorded = json.loads(essentials.read_text())
            config = {"text_config": recorded["text_config"]} if "text_config" in recorded else recorded
            (dst / name / "config.json").write_text(json.dumps(config))
    return str(dst)


@pytest.mark.parametrize("repo", list(REPOS))
def test_released_checkpoints_read(repo, tmp_path):
    cls, kind = REPOS[repo]
    info = cls.family.read_checkpoint(Checkpoint.open(_folder(repo, tmp_path)))
    assert info.image_condition_type == kind and info.tasks == (("t2v",) if kind is None else ("i2v",))
    d = info.defaults  # the reference __call__ defaults
    assert (d.height, d.width, d.num_frames, d.num_inference_steps, d.max_sequence_length) == (720, 1280, 129, 50, 256)
    assert d.guidance_scale == (6.0 if kind is None else 1.0)
    assert info.size_multiple == (16, 16)
    call = cls.check_call(
        info,
        "a cat",
        height=720,
        width=1280,
        num_frames=129,
        **({} if kind is None else {"image": np.zeros((8, 8, 3), np.uint8)}),
    )
    assert cls.family.latent_shape(info, call) == (1, 16, 33, 90, 160)


def test_mismatched_text_encoder_refused(tmp_path):
    folder = _folder("hunyuanvideo-community__HunyuanVideo", tmp_path)
    index_file = os.path.join(folder, "model_index.json")
    with open(index_file) as f:
        index = json.load(f)
    index["text_encoder"] = ["transformers", "LlavaForConditionalGeneration"]
    with open(index_file, "w") as f:
        json.dump(index, f)
    with pytest.raises(ConfigError, match="text_encoder is 'LlavaForConditionalGeneration'"):
        HunyuanVideoPipeline.family.read_checkpoint(Checkpoint.open(folder))


def _bytes(module, dtype_bytes: int = 2) -> int:
    """Parameter bytes of an abstract module, floating parameters at ``dtype_bytes`` each."""
    return sum(int(np.prod(x.shape)) * dtype_bytes for x in jax.tree.leaves(nnx.state(module)))


def test_staging_plan_at_full_size():
    """bf16: transformer 12.8 B params (25.6 GB), Llama 7.5 B (15 GB), CLIP 123 M, VAE 246 M (fp32):
    on a device where the transformer fits (with the resident fraction) but not beside the Llama
    encoder, the default plan stages the text encoders and keeps the transformer and VAE; on a
    device with room for all, nothing is staged."""
    from vidax.encoders.clip import CLIPTextConfig, CLIPTextEncoder
    from vidax.encoders.decoder_lm import DecoderLM
    from vidax.encoders.decoder_lm_config import LlamaTextConfig
    from vidax.models.hunyuan_video.config import HunyuanVideoTransformerConfig, HunyuanVideoVAEConfig
    from vidax.models.hunyuan_video.transformer import HunyuanVideoTransformer3DModel
    from vidax.models.hunyuan_video.vae import HunyuanVideoVAE

    root = os.path.join(REFERENCE_CONFIGS, "hunyuanvideo-community__HunyuanVideo")
    tcfg = HunyuanVideoTransformerConfig.from_json_file(os.path.join(root, "transformer", "config.json"))
    lcfg = LlamaTextConfig.from_json_file(os.path.join(root, "text_encoder", "config.json"))
    ccfg = CLIPTextConfig.from_json_file(os.path.join(root, "text_encoder_2", "config.json"))
    vcfg = HunyuanVideoVAEConfig.from_json_file(os.path.join(root, "vae", "config.json"))
    sizes = {
        "transformer": _bytes(nnx.eval_shape(lambda: HunyuanVideoTransformer3DModel(tcfg, rngs=nnx.Rngs(0)))),
        "text_encoder": _bytes(nnx.eval_shape(lambda: DecoderLM(lcfg, rngs=nnx.Rngs(0)))),
        "text_encoder_2": _bytes(nnx.eval_shape(lambda: CLIPTextEncoder(ccfg, rngs=nnx.Rngs(0)))),
        "vae": _bytes(nnx.eval_shape(lambda: HunyuanVideoVAE(vcfg, rngs=nnx.Rngs(0))), 4),
    }
    gb = {k: v / 1e9 for k, v in sizes.items()}
    assert 25 < gb["transformer"] < 26.5 and 14.5 < gb["text_encoder"] < 15.5, gb
    stageable = HunyuanVideoPipeline.family.stageable
    assert stageable == ("text_encoder", "text_encoder_2", "vae")
    keep = {n: None for n in stageable}  # the default: decided from the device's memory
    # 48 GB: the transformer and VAE fit in 60 % of it, the Llama encoder beside them does not
    limit = 48e9
    assert sizes["transformer"] + sizes["vae"] <= RESIDENT_FRACTION * limit < sum(sizes.values())
    staged = plan_staging(keep, sizes, int(limit), stageable=stageable)
    assert staged == {"text_encoder": True, "text_encoder_2": False, "vae": False}
    resident = sum(v for k, v in sizes.items() if not staged.get(k))
    assert resident <= RESIDENT_FRACTION * limit
    # the largest single component (the transformer) alone decides: with room for everything
    # (80 GB) nothing waits in host memory
    assert not any(plan_staging(keep, sizes, int(80e9), stageable=stageable).values())
    # short of room even then, CLIP and the VAE follow in order
    tight = int((sizes["transformer"] + 1e8) / RESIDENT_FRACTION)
    assert plan_staging(keep, sizes, tight, stageable=stageable) == {n: True for n in stageable}


def test_latent_concat_says_it_returns_fewer_frames(tmp_path, caplog):
    """HunyuanVideo-I2V-33ch returns num_frames - 4 frames, as diffusers (video[:, :, 4:]): the
    call says so, naming num_frames only when it was given."""
    cls = HunyuanVideoImageToVideoPipeline
    info = cls.family.read_checkpoint(
        Checkpoint.open(_folder("hunyuanvideo-community__HunyuanVideo-I2V-33ch", tmp_path))
    )
    image = np.zeros((32, 32, 3), np.uint8)
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        cls.check_call(info, "a cat", image=image, height=64, width=64, num_frames=33)
        cls.check_call(info, "a cat", image=image, height=64, width=64)
        cls.check_call(info, "a cat", image=image, height=64, width=64, num_frames=33, output_type="latent")
    messages = [r.getMessage() for r in caplog.records if "latent_concat" in r.getMessage()]
    assert messages[0].startswith(
        "num_frames=33 returns 29 frames, not 33: the reference drops the first 4 decoded "
        "frames (latent_concat, as diffusers' HunyuanVideoImageToVideoPipeline); ask for "
        "37 frames to get 33"
    ), messages
    d = info.defaults.num_frames
    assert messages[1].startswith(f"this checkpoint's default of {d} frames returns {d - 4} frames"), messages
    assert messages[2].startswith("num_frames=33 returns 8 latent frames, not 9"), messages
    for output_type in ("np", "latent"):  # fewer than 5 frames would return none (an empty mp4 before)
        with pytest.raises(InputError, match=r"^num_frames=1 leaves no frame: latent_concat .* give num_frames >= 5$"):
            cls.check_call(info, "a cat", image=image, height=64, width=64, num_frames=1, output_type=output_type)
    cls.check_call(info, "a cat", image=image, height=64, width=64, num_frames=5)
    token_replace = cls.family.read_checkpoint(
        Checkpoint.open(_folder("hunyuanvideo-community__HunyuanVideo-I2V", tmp_path))
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        cls.check_call(token_replace, "a cat", image=image, height=64, width=64, num_frames=33)
    assert not [r for r in caplog.records if "latent_concat" in r.getMessage()]
