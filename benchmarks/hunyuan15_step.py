"""Side-by-side denoising-step benchmark: vidax vs diffusers, HunyuanVideo 1.5 transformer.

The real HunyuanVideo 1.5 480p T2V transformer config (``reference_configs/hunyuanvideo-community__
HunyuanVideo-1.5-Diffusers-480p_t2v``, embedded below) at reduced depth by default — the 8.3B model
in float32 (33 GB) does not fit a small machine: ``--num-layers N`` keeps N of the 54 double-stream
blocks, default 2; widths, heads, RoPE, the token refiner and the glyph / image projections are the
real ones. Random weights, one small latent, the same thread count on both sides.

The conditioning is what ``HunyuanVideo15Pipeline`` passes: Qwen2.5-VL states padded to 1000
tokens (120 real), byT5 states padded to 256 (12 real) and 729 all-zero SigLIP tokens (T2V), so
the joint attention runs over the video tokens and 1985 conditioning tokens of which 132 are
real. A "step" is one transformer call (one branch: the reference's guider runs the conditional
and unconditional branches as two such calls) and one flow-match Euler update (shift 5).

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/hunyuan15_step.json`` and ``.md``.

``benchmarks/hunyuan15_i2v_step.py`` runs the same with the 480p I2V transformer config
(``task_type`` "i2v") and what ``HunyuanVideo15ImageToVideoPipeline`` passes: 729 non-zero SigLIP
tokens, which the transformer attends to (all-zero ones it leaves out), so the joint attention
has 729 more real tokens; results in ``docs/benchmarks/hunyuan15_i2v_step.*``.

    python benchmarks/hunyuan15_step.py                       # fp32 and bf16, latent 2x16x16, 2 blocks
    python benchmarks/hunyuan15_step.py --latent 1 8 8 --steps 1 --dtypes float32 --num-layers 1
"""

from __future__ import annotations

from step_bench import StepBench, configure_xla_threads, main, prepare_jax, run_jax_steps, run_torch_steps

# hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v transformer/config.json (see reference_configs/).
CONFIG = {
    "attention_head_dim": 128,
    "image_embed_dim": 1152,
    "in_channels": 65,
    "mlp_ratio": 4.0,
    "num_attention_heads": 16,
    "num_layers": 54,
    "num_refiner_layers": 2,
    "out_channels": 32,
    "patch_size": 1,
    "patch_size_t": 1,
    "qk_norm": "rms_norm",
    "rope_axes_dim": [16, 56, 56],
    "rope_theta": 256.0,
    "target_size": 640,
    "task_type": "t2v",
    "text_embed_2_dim": 1472,
    "text_embed_dim": 3584,
    "use_meanflow": False,
}
SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 5.0}
TEXT_LEN, TEXT_REAL = 1000, 120  # the pipeline's tokenizer_max_length (after the template's crop)
GLYPH_LEN, GLYPH_REAL = 256, 12  # tokenizer_2_max_length
IMAGE_LEN = 729  # vision_num_semantic_tokens (all zero for T2V)
DEFAULT_LAYERS = 2


def _config(num_layers, i2v=False):
    return dict(
        CONFIG, num_layers=DEFAULT_LAYERS if num_layers is None else num_layers, task_type="i2v" if i2v else "t2v"
    )


def _mask(n, real):
    import numpy as np

    return (np.arange(n)[None] < real).astype(np.int64)


def run_vidax(
    dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto", i2v: bool = False
) -> dict:
    """The vidax side; ``threads`` 0 leaves XLA's thread settings alone (GPU); ``i2v``: the I2V
    config with non-zero image tokens."""
    if threads > 0:
        configure_xla_threads(threads)
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.hunyuan_video15.config import HunyuanVideo15TransformerConfig
    from vidax.models.hunyuan_video15.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.hunyuan_video15.transformer import HunyuanVideo15Transformer3DModel

    cfg = HunyuanVideo15TransformerConfig.from_config_dict(_config(num_layers, i2v))
    t, h, w = latent
    b = prepare_jax(
        dtype_name,
        lambda d: HunyuanVideo15Transformer3DModel(cfg, dtype=d, param_dtype=d, attention=attention, rngs=nnx.Rngs(0)),
        TRANSFORMER_FP32_PARAMS,
        (1, t, h, w, cfg.in_channels),
        (1, TEXT_LEN, cfg.text_embed_dim),
        SCHEDULER,
        steps,
    )
    mask = jnp.asarray(_mask(TEXT_LEN, TEXT_REAL), jnp.int32)
    glyph = (0.1 * jax.random.normal(jax.random.PRNGKey(3), (1, GLYPH_LEN, cfg.text_embed_2_dim))).astype(b.dtype)
    glyph_mask = jnp.asarray(_mask(GLYPH_LEN, GLYPH_REAL), jnp.int32)
    image = (
        (0.1 * jax.random.normal(jax.random.PRNGKey(4), (1, IMAGE_LEN, cfg.image_embed_dim)))
        if i2v
        else jnp.zeros((1, IMAGE_LEN, cfg.image_embed_dim))
    ).astype(b.dtype)

    def step(params, latents, state, context):
        model = nnx.merge(b.graphdef, params)
        t_in = jnp.broadcast_to(state.timestep.astype(jnp.float32), (1,))
        out = model(latents.astype(b.dtype), t_in, context, mask, glyph, glyph_mask, image)
        # The reference predicts out_channels=32 for the 32 noisy-latent channels of the 65 in.
        return b.sched.step(state, out.astype(jnp.float32), latents[..., : cfg.out_dim])

    x = b.x[..., : cfg.out_dim]
    cond = jnp.zeros(b.x.shape[:-1] + (cfg.in_channels - cfg.out_dim,), jnp.float32)

    def full_step(params, latents, state, context):  # the pipeline's [latents, cond latents, mask] concat
        return step(params, jnp.concatenate([latents, cond], axis=-1), state, context)

    return run_jax_steps(full_step, b.params, x, b.state, b.context, steps)


def run_diffusers(
    dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu", i2v: bool = False
) -> dict:
    """The diffusers side, on ``device`` ("cpu" or "cuda"; ``threads`` 0 leaves torch's); ``i2v`` as
    :func:`run_vidax`."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideo15Transformer3DModel

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:  # random initialisation where the model runs; weights are not compared
        model = HunyuanVideo15Transformer3DModel.from_config(_config(num_layers, i2v))
    model = model.to(dtype).eval()
    sched = FlowMatchEulerDiscreteScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
    sched.set_timesteps(steps + 1, device=dev)
    t, h, w = latent
    x = torch.randn(1, 32, t, h, w, device=dev)
    cond = torch.zeros(1, 33, t, h, w, device=dev)
    context = (0.1 * torch.randn(1, TEXT_LEN, CONFIG["text_embed_dim"], device=dev)).to(dtype)
    mask = torch.from_numpy(_mask(TEXT_LEN, TEXT_REAL)).to(dev)
    glyph = (0.1 * torch.randn(1, GLYPH_LEN, CONFIG["text_embed_2_dim"], device=dev)).to(dtype)
    glyph_mask = torch.from_numpy(_mask(GLYPH_LEN, GLYPH_REAL)).to(dev)
    image = (
        (0.1 * torch.randn(1, IMAGE_LEN, CONFIG["image_embed_dim"], device=dev))
        if i2v
        else torch.zeros(1, IMAGE_LEN, CONFIG["image_embed_dim"], device=dev)
    ).to(dtype)

    def step(c):
        x, i = c
        ts = sched.timesteps[i]
        out = model(
            hidden_states=torch.cat([x, cond], dim=1).to(dtype),
            timestep=ts.expand(1).to(dtype),
            encoder_hidden_states=context,
            encoder_attention_mask=mask,
            encoder_hidden_states_2=glyph,
            encoder_attention_mask_2=glyph_mask,
            image_embeds=image,
            return_dict=False,
        )[0].float()
        return sched.step(out, ts, x, return_dict=False)[0], i + 1

    return run_torch_steps(step, x, steps)


def make_bench(script: str, i2v: bool = False) -> StepBench:
    """The benchmark of ``script`` (re-run as each side's child): T2V, or with ``i2v`` the I2V
    transformer config and non-zero image tokens."""
    import functools

    kind = "I2V" if i2v else "T2V"
    return StepBench(
        script=script,
        title=f"HunyuanVideo 1.5 {kind} denoising step (real widths, reduced depth)",
        model=f"HunyuanVideo 1.5 480p {kind} transformer (random weights), {DEFAULT_LAYERS} of 54 double-stream "
        "blocks unless --num-layers" + (", 729 non-zero SigLIP tokens" if i2v else ""),
        step="one transformer call (one guidance branch) and one flow-match Euler update.",
        default_latent=(2, 16, 16),
        default_out="hunyuan15_i2v_step" if i2v else "hunyuan15_step",
        tokens=lambda thw: thw[0] * thw[1] * thw[2],
        text_tokens=TEXT_LEN + GLYPH_LEN + IMAGE_LEN,
        run_vidax=functools.partial(run_vidax, i2v=i2v),
        run_diffusers=functools.partial(run_diffusers, i2v=i2v),
        batch=1,
    )


BENCH = make_bench(__file__)

if __name__ == "__main__":
    main(BENCH)
