"""The embedded default checkpoint: a tiny Wan2.1 T2V pipeline with random weights.

It lets ``vidax generate`` run end to end on a fresh machine with no download: the folder has
the exact diffusers layout of ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` (``model_index.json``,
``tokenizer/``, ``text_encoder/``, ``transformer/``, ``vae/``, ``scheduler/``; the same config
keys, tensor names and layouts; diffusers and transformers load it), only with small dimensions
and randomly initialised weights, so its videos are noise. It is written once, with safetensors
and without torch, into the user cache folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile

import numpy as np
from flax import nnx

from vidax.cache import cache_dir, cache_subdir, usable_folder

logger = logging.getLogger("vidax.default_checkpoint")

NAME = "wan2.1-t2v-tiny-random-v2"

#: The name ``vidax.load_pipeline`` and ``vidax inspect`` know the embedded checkpoint by.
PUBLIC_NAME = "vidax/tiny-random-wan"

#: What a call on the embedded checkpoint uses when it is not told otherwise (a video in seconds
#: on a CPU), kept in its model_index.json (``_vidax_call_defaults``) so the CLI and the Python
#: API agree.
DEFAULT_CALL = {"height": 96, "width": 160, "num_frames": 17, "num_inference_steps": 10}

MODEL_INDEX = {
    "_class_name": "WanPipeline",
    "_diffusers_version": "0.33.0.dev0",
    "_vidax_call_defaults": DEFAULT_CALL,
    "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "text_encoder": ["transformers", "UMT5EncoderModel"],
    "tokenizer": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "WanTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLWan"],
}

TEXT_ENCODER = {
    "architectures": ["UMT5EncoderModel"],
    "classifier_dropout": 0.0,
    "d_ff": 96,
    "d_kv": 16,
    "d_model": 64,
    "decoder_start_token_id": 0,
    "dense_act_fn": "gelu_new",
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0,
    "is_encoder_decoder": True,
    "is_gated_act": True,
    "layer_norm_epsilon": 1e-06,
    "model_type": "umt5",
    "num_decoder_layers": 2,
    "num_heads": 4,
    "num_layers": 2,
    "pad_token_id": 0,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "scalable_attention": True,
    "tie_word_embeddings": False,
    "tokenizer_class": "T5Tokenizer",
    "use_cache": True,
    "vocab_size": 256,
}

TRANSFORMER = {
    "_class_name": "WanTransformer3DModel",
    "_diffusers_version": "0.33.0.dev0",
    "added_kv_proj_dim": None,
    "attention_head_dim": 16,
    "cross_attn_norm": True,
    "eps": 1e-06,
    "ffn_dim": 128,
    "freq_dim": 32,
    "image_dim": None,
    "in_channels": 16,
    "num_attention_heads": 4,
    "num_layers": 2,
    "out_channels": 16,
    "patch_size": [1, 2, 2],
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
    "text_dim": 64,
}

VAE = {
    "_class_name": "AutoencoderKLWan",
    "_diffusers_version": "0.33.0.dev0",
    "attn_scales": [],
    "base_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    # The real Wan2.1 VAE statistics (reference_configs), so latents are scaled as in the release.
    "latents_mean": [
        -0.7571,
        -0.7089,
        -0.9113,
        0.1075,
        -0.1745,
        0.9653,
        -0.1517,
        1.5508,
        0.4134,
        -0.0715,
        0.5517,
        -0.3632,
        -0.1922,
        -0.9497,
        0.2503,
        -0.2921,
    ],
    "latents_std": [
        2.8184,
        1.4541,
        2.3275,
        2.6558,
        1.2196,
        1.7708,
        2.6052,
        2.0743,
        3.2687,
        2.1526,
        2.8652,
        1.5579,
        1.6382,
        1.1253,
        2.8251,
        1.916,
    ],
    "num_res_blocks": 2,
    "temperal_downsample": [False, True, True],
    "z_dim": 16,
}

SCHEDULER = {
    "_class_name": "UniPCMultistepScheduler",
    "_diffusers_version": "0.33.0.dev0",
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "disable_corrector": [],
    "dynamic_thresholding_ratio": 0.995,
    "final_sigmas_type": "zero",
    "flow_shift": 3.0,
    "lower_order_final": True,
    "num_train_timesteps": 1000,
    "predict_x0": True,
    "prediction_type": "flow_prediction",
    "rescale_betas_zero_snr": False,
    "sample_max_value": 1.0,
    "solver_order": 2,
    "solver_p": None,
    "solver_type": "bh2",
    "steps_offset": 0,
    "thresholding": False,
    "timestep_spacing": "linspace",
    "trained_betas": None,
    "use_beta_sigmas": False,
    "use_exponential_sigmas": False,
    "use_flow_sigmas": True,
    "use_karras_sigmas": False,
}


def resolve_named_checkpoint(path_or_hub_id):
    """:data:`PUBLIC_NAME` -> the embedded checkpoint's folder (built on first use); anything
    else as given."""
    return default_checkpoint() if str(path_or_hub_id) == PUBLIC_NAME else path_or_hub_id


def default_checkpoint(root: str | None = None) -> str:
    """Path of the embedded default checkpoint, building it on first use (about a second).

    Args:
        root: the folder to keep it in; None: the user cache folder (:mod:`vidax.cache`).

    Raises:
        SetupError: the user cache folder cannot be written (``VIDAX_CACHE_DIR`` is a file, under
            a file, or not writable), on the first use.
    """
    path = os.path.join(root or cache_dir(), NAME)
    if os.path.isfile(os.path.join(path, "model_index.json")):
        return path
    root = usable_folder(root, f"root={root!r}", "give a writable folder") if root else cache_subdir()
    tmp = tempfile.mkdtemp(dir=root, prefix=f".{NAME}-")
    try:
        write_tiny_wan_checkpoint(tmp)
        try:
            os.replace(tmp, path)
        except OSError:  # another process built it first
            if not os.path.isfile(os.path.join(path, "model_index.json")):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    logger.info("built the embedded default checkpoint at %s", path)
    return path


def _write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")


def random_module(make, rng: np.random.Generator) -> nnx.Module:
    """``make()`` with numpy-random float32 parameters (host arrays, no device work).

    Kernels ``N(0, 1/fan_in)``, embeddings ``N(0, 1)``, norm scales 1, biases 0, other tables
    ``N(0, 0.02^2)``: an untrained network whose activations stay of order one.
    """
    from vidax.weights.loader import abstract_params

    graphdef, flat = abstract_params(make)
    filled = []
    for path, var in flat.items():
        shape, leaf = var.get_value().shape, str(path[-1])
        if leaf == "kernel":
            # (.., I, O) linear, possibly layer-stacked; (T, H, W, I, O) / (H, W, I, O) conv.
            fan_in = int(np.prod(shape[:-1])) if len(shape) >= 4 else shape[-2]
            value = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        elif leaf == "embedding" or "embed_tokens" in str(path) or leaf == "shared":
            value = rng.standard_normal(shape)
        elif leaf in ("scale", "gamma") or (leaf == "weight" and "norm" in "/".join(map(str, path))):
            value = np.ones(shape)
        elif leaf == "bias":
            value = np.zeros(shape)
        else:
            value = 0.02 * rng.standard_normal(shape)
        filled.append((path, var.replace(value.astype(np.float32))))
    return nnx.merge(graphdef, nnx.from_flat_state(filled))


def write_tiny_wan_checkpoint(path: str, seed: int = 0) -> None:
    """Write the tiny random Wan2.1 T2V pipeline folder to ``path`` (created if needed)."""
    from vidax.encoders.t5 import T5Encoder, T5EncoderConfig, t5_key_rules
    from vidax.encoders.tokenizer import build_tiny_t5_tokenizer
    from vidax.models.wan.config import WanTransformerConfig, WanVAEConfig
    from vidax.models.wan.transformer import WanTransformer3DModel
    from vidax.models.wan.vae import WanVAE
    from vidax.registry import registry
    from vidax.weights import export_state_dict, save_safetensors

    os.makedirs(path, exist_ok=True)
    _write_json(os.path.join(path, "model_index.json"), MODEL_INDEX)
    build_tiny_t5_tokenizer(os.path.join(path, "tokenizer"), vocab_size=TEXT_ENCODER["vocab_size"])

    def component(name: str, config: dict, config_name: str, state: dict, file: str) -> None:
        folder = os.path.join(path, name)
        os.makedirs(folder, exist_ok=True)
        _write_json(os.path.join(folder, config_name), config)
        if state:
            tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in sorted(state.items())}
            save_safetensors(tensors, os.path.join(folder, file), metadata={"format": "pt"})

    rng = np.random.default_rng(seed)
    te_cfg = T5EncoderConfig.from_config_dict(TEXT_ENCODER)
    te = random_module(lambda: T5Encoder(te_cfg, rngs=nnx.Rngs(0)), rng)
    component(
        "text_encoder", TEXT_ENCODER, "config.json", export_state_dict(te, t5_key_rules(te_cfg)), "model.safetensors"
    )
    tr_cfg = WanTransformerConfig.from_config_dict(TRANSFORMER)
    tr = random_module(lambda: WanTransformer3DModel(tr_cfg, rngs=nnx.Rngs(0)), rng)
    tr_rules = registry().component("WanTransformer3DModel").rules(tr_cfg)
    component(
        "transformer",
        TRANSFORMER,
        "config.json",
        export_state_dict(tr, tr_rules),
        "diffusion_pytorch_model.safetensors",
    )
    vae_cfg = WanVAEConfig.from_config_dict(VAE)
    vae = random_module(lambda: WanVAE(vae_cfg, rngs=nnx.Rngs(0)), rng)
    vae_rules = registry().component("AutoencoderKLWan").rules(vae_cfg)
    component("vae", VAE, "config.json", export_state_dict(vae, vae_rules), "diffusion_pytorch_model.safetensors")
    component("scheduler", SCHEDULER, "scheduler_config.json", {}, "")
