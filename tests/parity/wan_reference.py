"""Tiny diffusers Wan pipelines with every parameter randomised, saved in the diffusers layout.

:func:`build_reference_wan_pipeline` builds the text-to-video ``WanPipeline`` (Wan2.1, or two
experts as Wan2.2 A14B) and the ``WanImageToVideoPipeline`` (Wan2.2 A14B I2V without an image
encoder, or Wan2.1 I2V with a CLIP vision encoder).
"""

from __future__ import annotations

import os

from tests.parity.helpers import randomize_torch_module
from vidax.default_checkpoint import SCHEDULER
from vidax.encoders.tokenizer import build_tiny_t5_tokenizer
from vidax.weights.loader import KeyRules

# Distinct sizes everywhere, so a swapped axis cannot pass unnoticed.
TRANSFORMER = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=3,
    attention_head_dim=14,
    in_channels=12,
    out_channels=12,
    text_dim=20,
    freq_dim=10,
    ffn_dim=44,
    num_layers=2,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    image_dim=None,
    added_kv_proj_dim=None,
    rope_max_seq_len=1024,
)
VAE = dict(
    base_dim=8,
    z_dim=12,
    dim_mult=[1, 2, 2, 2],
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[False, True, True],
    dropout=0.0,
    latents_mean=[0.1 * i - 0.5 for i in range(12)],
    latents_std=[0.5 + 0.15 * i for i in range(12)],
)
# Wan2.2 TI2V-5B VAE structure (residual blocks, 2x2 patchify, 16x spatial compression) at
# small distinct widths; z_dim 12 so the same transformer fits.
VAE22 = dict(
    base_dim=6,
    decoder_base_dim=5,
    z_dim=12,
    dim_mult=[1, 2, 4, 4],
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[False, True, True],
    is_residual=True,
    patch_size=2,
    in_channels=12,
    out_channels=12,
    scale_factor_temporal=4,
    scale_factor_spatial=16,
    dropout=0.0,
    latents_mean=[0.05 * i - 0.3 for i in range(12)],
    latents_std=[0.6 + 0.1 * i for i in range(12)],
)
# Image-to-video transformers take latents + 4 mask channels + image latents.
I2V_TRANSFORMER = dict(TRANSFORMER, in_channels=2 * 12 + 4)
# Wan2.1 I2V: CLIP features (width 18) through the image embedder and added k/v projections.
CLIP_TRANSFORMER = dict(I2V_TRANSFORMER, image_dim=18, added_kv_proj_dim=3 * 14)
CLIP_VISION = dict(
    hidden_size=18,
    intermediate_size=30,
    num_hidden_layers=3,
    num_attention_heads=3,
    image_size=28,
    patch_size=7,
    projection_dim=10,
    layer_norm_eps=1e-5,
    hidden_act="gelu",
)
#: CLIP tokens of one image: the patches of the 28 px image and the class token.
CLIP_TOKENS = (CLIP_VISION["image_size"] // CLIP_VISION["patch_size"]) ** 2 + 1
# CLIPImageProcessor settings of the Wan2.1 I2V checkpoints, at the tiny encoder's 28 px.
CLIP_PROCESSOR = dict(
    size={"shortest_edge": 28},
    crop_size={"height": 28, "width": 28},
    image_mean=[0.48145466, 0.4578275, 0.40821073],
    image_std=[0.26862954, 0.26130258, 0.27577711],
)
TEXT_ENCODER = dict(
    vocab_size=256,
    d_model=20,
    d_kv=6,
    d_ff=28,
    num_layers=2,
    num_heads=3,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=20,
    feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)


def build_reference_wan_pipeline(
    path: str,
    seed: int = 0,
    *,
    image_to_video: bool = False,
    boundary_ratio: float | None = None,
    clip: bool = False,
    ti2v: bool = False,
    flf2v: bool = False,
):
    """Save a tiny random diffusers Wan pipeline to ``path``; return the torch pipeline.

    Args:
        image_to_video: a ``WanImageToVideoPipeline`` (with a 36-channel style transformer input
            unless ``ti2v``).
        boundary_ratio: two experts (``transformer_2`` with other random weights) switched at
            this ratio, as Wan2.2 A14B; None: one transformer.
        clip: with ``image_to_video``, a CLIP vision encoder + processor and a transformer that
            takes its features (Wan2.1 I2V).
        flf2v: with ``clip``, Wan2.1 FLF2V: the transformer's image embedder has a position
            embedding over the CLIP tokens of two images (``pos_embed_seq_len``), given values of
            order one so that the order of the first and last image's features matters.
        ti2v: Wan2.2 TI2V-5B: the Wan2.2 VAE, ``expand_timesteps=True`` and a transformer that
            takes the latents alone (``image_to_video`` picks the pipeline class, as a user of the
            TI2V-5B folder does).
    """
    import torch
    from diffusers import (
        AutoencoderKLWan,
        UniPCMultistepScheduler,
        WanImageToVideoPipeline,
        WanPipeline,
        WanTransformer3DModel,
    )
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    _stub_ftfy()  # also for a WanImageToVideoPipeline a test builds from these components
    torch.manual_seed(seed)
    build_tiny_t5_tokenizer(os.path.join(path, "_tok"), vocab_size=TEXT_ENCODER["vocab_size"])
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(path, "_tok"))
    text_encoder = UMT5EncoderModel(UMT5Config(**TEXT_ENCODER)).eval()
    config = (CLIP_TRANSFORMER if clip else I2V_TRANSFORMER) if image_to_video and not ti2v else TRANSFORMER
    if flf2v:
        config = dict(config, pos_embed_seq_len=2 * CLIP_TOKENS)
    transformer = WanTransformer3DModel(**config).eval()
    vae = AutoencoderKLWan(**(VAE22 if ti2v else VAE)).eval()
    randomize_torch_module(text_encoder, seed=seed)
    randomize_torch_module(transformer, seed=seed + 1)
    if flf2v:  # the default randomisation (fan-in scaled) makes it ~0.02, next to features of order one
        with torch.no_grad():
            pos = transformer.condition_embedder.image_embedder.pos_embed
            pos.copy_(torch.randn(pos.shape, generator=torch.Generator().manual_seed(seed + 6)))
    # Small biases and unit-ish gain keep the decoded frames sensitive to the latents (with the
    # default randomisation two unrelated latents decode to frames 80 dB apart).
    randomize_torch_module(vae, seed=seed + 2, scale=0.1, gain=0.7)
    if image_to_video or ti2v:
        # A larger encoder gain gives image latents of order one (0.15 with gain 0.7), so the
        # conditioning image visibly steers the video and the parity tests can see it.
        randomize_torch_module(vae.encoder, seed=seed + 5, scale=0.1, gain=1.5)
    scheduler = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if not k.startswith("_")})
    parts = dict(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler, transformer=transformer)
    if ti2v:
        parts["expand_timesteps"] = True
    if boundary_ratio is not None:
        transformer_2 = WanTransformer3DModel(**config).eval()
        randomize_torch_module(transformer_2, seed=seed + 3)
        parts.update(transformer_2=transformer_2, boundary_ratio=boundary_ratio)
    if image_to_video:
        if clip:
            from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

            image_encoder = CLIPVisionModel(CLIPVisionConfig(**CLIP_VISION)).eval()
            randomize_torch_module(image_encoder, seed=seed + 4)
            parts.update(image_encoder=image_encoder, image_processor=CLIPImageProcessor(**CLIP_PROCESSOR))
        pipe = WanImageToVideoPipeline(**parts)
    else:
        pipe = WanPipeline(**parts)
    pipe.save_pretrained(path, safe_serialization=True)
    return pipe


def _stub_ftfy() -> None:
    """diffusers' ``pipeline_wan_i2v.basic_clean`` calls ``ftfy.fix_text`` without checking that
    ftfy is installed (``pipeline_wan`` checks). Without ftfy, make it the identity, which is what
    the text-to-video pipeline does and what vidax does."""
    import types

    from diffusers.pipelines.wan import pipeline_wan_i2v

    if not hasattr(pipeline_wan_i2v, "ftfy"):
        pipeline_wan_i2v.ftfy = types.SimpleNamespace(fix_text=lambda text: text)


def write_tiny_wan_variant(
    path: str, *, boundary_ratio: float | None = None, image_to_video: bool = False, ti2v: bool = False, seed: int = 0
) -> str:
    """The embedded tiny random Wan2.1 T2V checkpoint (written by vidax, no torch) turned into
    Wan2.2 A14B (``boundary_ratio``: a ``transformer_2`` with other random weights), an
    image-to-video checkpoint (``WanImageToVideoPipeline``, 2 * 16 + 4 input channels, no image
    encoder), or TI2V-5B (``ti2v``: ``expand_timesteps`` and a Wan2.2 VAE with z_dim 16).
    Returns ``path``."""
    import json

    import numpy as np
    from flax import nnx

    from vidax.default_checkpoint import MODEL_INDEX, TRANSFORMER, random_module, write_tiny_wan_checkpoint
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.convert import transformer_key_rules
    from vidax.models.wan.transformer import WanTransformer3DModel
    from vidax.weights import export_state_dict, save_safetensors

    write_tiny_wan_checkpoint(path, seed)
    index, config = dict(MODEL_INDEX), dict(TRANSFORMER)
    names = ["transformer"]
    if image_to_video:
        index["_class_name"] = "WanImageToVideoPipeline"
        config["in_channels"] = 2 * 16 + 4
    if boundary_ratio is not None:
        index.update(boundary_ratio=boundary_ratio, transformer_2=list(index["transformer"]))
        names.append("transformer_2")
    rng = np.random.default_rng(seed + 10)
    cfg = WanTransformerConfig.from_config_dict(config)
    for name in names:
        module = random_module(lambda: WanTransformer3DModel(cfg, rngs=nnx.Rngs(0)), rng)
        os.makedirs(os.path.join(path, name), exist_ok=True)
        with open(os.path.join(path, name, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        save_safetensors(
            export_state_dict(module, transformer_key_rules(cfg)),
            os.path.join(path, name, "diffusion_pytorch_model.safetensors"),
        )
    if ti2v:
        from vidax.models.wan.config import WanVAEConfig
        from vidax.models.wan.vae import WanVAE

        index["expand_timesteps"] = True
        vae_config = {
            **VAE22,
            "z_dim": 16,
            "base_dim": 8,
            "decoder_base_dim": 8,
            "latents_mean": [0.0] * 16,
            "latents_std": [1.0] * 16,
        }
        vcfg = WanVAEConfig.from_config_dict(vae_config)
        vae = random_module(lambda: WanVAE(vcfg, rngs=nnx.Rngs(0)), rng)
        with open(os.path.join(path, "vae", "config.json"), "w") as f:
            json.dump({"_class_name": "AutoencoderKLWan", **vae_config}, f, indent=2)
        save_safetensors(
            export_state_dict(vae, KeyRules()), os.path.join(path, "vae", "diffusion_pytorch_model.safetensors")
        )
    with open(os.path.join(path, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return path


# ---------------------------------------------------------------------------------------------
# Inputs and reference runs shared by the pipeline parity tests.

PROMPTS = ["a red car walking over the sea", "the dog"]
NEGATIVES = ["blue sky", "city at night with a cat"]


def random_image(seed: int, size: tuple[int, int] = (37, 53)):
    """A random RGB PIL image (H, W) = ``size``, unlike the videos' sizes so the resize matters."""
    import numpy as np
    import PIL.Image

    return PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8))


def initial_noise(height: int, width: int, scale: int = 8, seed: int = 7):
    """Initial noise (2, 12, 3, H/scale, W/scale) (torch, diffusers layout) for both sides."""
    import torch

    return torch.randn(2, 12, 3, height // scale, width // scale, generator=torch.Generator().manual_seed(seed))


def reference_outputs(pipe, runs, scale: int = 8, **call) -> dict:
    """Run the torch pipeline once per ``(name, (height, width), output_type)`` in ``runs`` with
    ``call`` (prompts, image, steps...) and fresh :func:`initial_noise`; returns ``{name:
    (noise, frames or latents)}`` as float32 numpy."""
    import numpy as np
    import torch

    out = {}
    with torch.no_grad():
        for name, (height, width), output_type in runs:
            latents = initial_noise(height, width, scale)
            result = pipe(latents=latents.clone(), output_type=output_type, height=height, width=width, **call).frames
            result = result.float().numpy() if output_type == "latent" else np.asarray(result)
            out[name] = (latents.numpy(), result)
    return out


#: vidax bf16 against diffusers bf16 (same component dtypes, same latents) through 4 UniPC steps
#: with CFG: measured 62.7-69.0 dB over Wan2.1 T2V / I2V, Wan2.2 A14B I2V (two experts) and TI2V.
#: The two sides differ by design: vidax keeps the transformer's residual stream fp32 (the
#: original Wan code; docs/architecture.md "Precision"), diffusers rounds it to bf16 after every
#: add, so vidax's bf16 video is the nearer to the fp32 one (66-72 dB against diffusers' 64-68 dB).
#: These tiny models are not very bf16-sensitive (diffusers' own bf16 and fp32 videos are 64-68 dB
#: apart), so the bar cannot tell a bf16 run from an fp32 one; what it catches is a pipeline
#: whose bf16 run goes wrong (a crash at step 2, a dtype-changing step, bf16 rounding of the
#: latents or of the guidance: each a few dB at least), and the tests check the weights are bf16.
WAN_BF16_MIN_PSNR = 58.0


def bf16_psnr(
    path: str, frames, latents, label: str, task: str | None = None, reference=None, **call
) -> tuple[float, float | None]:
    """PSNRs (dB) of the vidax bf16 pipeline at ``path`` against the fp32 reference ``frames``
    and, given the torch pipeline ``reference``, against it run in bf16 on the same ``latents``
    (:func:`tests.parity.helpers.bf16_reference`: transformers and UMT5 in bf16 with the
    transformer's ``_keep_in_fp32_modules``, the VAE and CLIP image encoder fp32, as vidax loads
    them); None without ``reference``."""
    import jax.numpy as jnp
    import numpy as np
    import torch

    import vidax
    from tests.parity.helpers import bf16_reference, psnr

    pipe = vidax.load_pipeline(path, dtype="bfloat16", task=task)
    assert pipe.transformer.proj_out.kernel[...].dtype == jnp.bfloat16
    got = pipe(latents=latents, progress=False, **call).frames
    value = psnr(got, frames)
    print(f"{label} bf16 video PSNR vs diffusers fp32: {value:.1f} dB")
    if reference is None:
        return value, None
    ref16 = bf16_reference(reference, float32=("vae", "image_encoder"))
    with torch.no_grad():
        want16 = np.asarray(ref16(latents=torch.from_numpy(np.asarray(latents)), output_type="np", **call).frames)
    bf16 = psnr(got, want16)
    print(
        f"{label} bf16 video PSNR vs diffusers bf16: {bf16:.1f} dB (diffusers bf16 vs fp32: "
        f"{psnr(want16, frames):.1f} dB)"
    )
    return value, bf16
