"""Side-by-side transformer benchmark: vidax vs diffusers, Cosmos 3 Edge transformer, per step.

Real transformer config (``reference_configs/nvidia__Cosmos3-Edge``, embedded below) with the
vocabulary cut to 4096 rows on both sides (``embed_tokens`` is a gather, ``lm_head`` is not run;
the full 131072 x 2048 tables would only add memory) and ``--num-layers`` as the machine allows.
Random weights, the same thread count on both sides. A "step" is one ``Cosmos3OmniTransformer``
call on one packed sequence (the Cosmos 3 pipeline calls it once per CFG pass): ``TEXT_LEN``
understanding (text) tokens, then the video latent's patch tokens (frame 0 a clean condition
frame, the others noisy), followed by an Euler update of the latents with the prediction.

Each side runs in its own subprocess so its peak RSS is its own. Results go to
``docs/benchmarks/cosmos3_step.json`` and ``.md``.

    python benchmarks/cosmos3_step.py --num-layers 4 --dtypes float32 bfloat16
"""

from __future__ import annotations

import numpy as np
from step_bench import StepBench, configure_xla_threads, fill_params, main, run_jax_steps, run_torch_steps

# nvidia/Cosmos3-Edge transformer/config.json (reconstructed, see reference_configs/SOURCES.md);
# vocab_size cut to 4096 (see the module docstring).
CONFIG_EDGE = {
    "action_dim": 64,
    "action_gen": True,
    "attention_bias": False,
    "base_fps": 24,
    "enable_fps_modulation": True,
    "head_dim": 128,
    "hidden_act": "relu2",
    "hidden_size": 2048,
    "intermediate_size": 9216,
    "latent_channel": 48,
    "latent_patch_size": 2,
    "num_attention_heads": 16,
    "num_embodiment_domains": 32,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "patch_latent_dim": 192,
    "qk_norm_for_text": False,
    "rms_norm_eps": 1e-05,
    "rope_axes_dim": [24, 20, 20],
    "rope_scaling": {"mrope_section": [24, 20, 20]},
    "rope_theta": 100000000,
    "sound_dim": None,
    "sound_gen": False,
    "sound_latent_fps": 25,
    "timestep_scale": 0.001,
    "unified_3d_mrope_reset_spatial_ids": True,
    "unified_3d_mrope_temporal_modality_margin": 15000,
    "use_und_k_norm_for_gen": True,
    "vocab_size": 4096,
}
TEXT_LEN = 256
C = 48


def _config(num_layers):
    return CONFIG_EDGE if num_layers is None else dict(CONFIG_EDGE, num_hidden_layers=num_layers)


def _layout(latent):
    """The packed sequence: text positions, vision positions, noisy-token positions, (3, L) ids."""
    t, h, w = latent
    hw = (h // 2) * (w // 2)
    n_vis = t * hw
    length = TEXT_LEN + n_vis
    text_idx = np.arange(TEXT_LEN)
    vis_idx = np.arange(TEXT_LEN, length)
    pos = np.zeros((3, length), np.int64)
    pos[:, :TEXT_LEN] = np.arange(TEXT_LEN)
    f, y, x = np.meshgrid(np.arange(t), np.arange(h // 2), np.arange(w // 2), indexing="ij")
    pos[0, TEXT_LEN:] = TEXT_LEN + 15000 + f.reshape(-1)
    pos[1, TEXT_LEN:] = y.reshape(-1)
    pos[2, TEXT_LEN:] = x.reshape(-1)
    return text_idx, vis_idx, vis_idx[hw:], pos, tuple(range(1, t)), hw


def run_vidax(dtype_name: str, latent, steps: int, threads: int, num_layers=None, attention: str = "auto") -> dict:
    if threads > 0:
        configure_xla_threads(threads)
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from vidax.models.cosmos3.config import Cosmos3TransformerConfig
    from vidax.models.cosmos3.convert import TRANSFORMER_FP32_PARAMS
    from vidax.models.cosmos3.transformer import Cosmos3OmniTransformer
    from vidax.weights.loader import DtypePolicy

    cfg = Cosmos3TransformerConfig.from_config_dict(_config(num_layers))
    dtype = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[dtype_name]
    graphdef, params = fill_params(
        lambda: Cosmos3OmniTransformer(
            cfg, dtype=dtype, param_dtype=dtype, residual_dtype=None, attention=attention, rngs=nnx.Rngs(0)
        ),
        DtypePolicy(dtype, TRANSFORMER_FP32_PARAMS),
    )
    t, h, w = latent
    text_idx, vis_idx, mse_idx, pos, noisy, hw = _layout(latent)
    x = jax.random.normal(jax.random.PRNGKey(1), (1, t, h, w, C), jnp.float32)
    ids = jnp.asarray(np.arange(TEXT_LEN)[None] % cfg.vocab_size, jnp.int32)
    arrays = tuple(jnp.asarray(a, jnp.int32) for a in (text_idx, pos, vis_idx, mse_idx))

    def step(params, latents, state, context):
        model = nnx.merge(graphdef, params)
        ti, p, vi, mi = context
        ts = jnp.full((1, len(noisy) * hw), 500.0, jnp.float32)
        pred = model(ids, ti, p, TEXT_LEN, latents.astype(dtype), vi, mi, ts, noisy)[0]
        return latents - 0.05 * pred.astype(jnp.float32), state

    return run_jax_steps(step, params, x, jnp.zeros(()), arrays, steps)


def run_diffusers(dtype_name: str, latent, steps: int, threads: int, num_layers=None, device: str = "cpu") -> dict:
    import torch
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer

    if threads > 0:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    dev = torch.device(device)
    torch.manual_seed(0)
    with dev:
        model = Cosmos3OmniTransformer.from_config(_config(num_layers))
    model = model.to(dtype).eval()
    t, h, w = latent
    text_idx, vis_idx, mse_idx, pos, noisy, hw = _layout(latent)
    tt = lambda a: torch.as_tensor(a, device=dev)  # noqa: E731
    kw = dict(
        input_ids=tt(np.arange(TEXT_LEN) % CONFIG_EDGE["vocab_size"]),
        text_indexes=tt(text_idx),
        position_ids=tt(pos),
        und_len=TEXT_LEN,
        sequence_length=pos.shape[1],
        vision_token_shapes=[(t, h // 2, w // 2)],
        vision_sequence_indexes=tt(vis_idx),
        vision_mse_loss_indexes=tt(mse_idx),
        vision_timesteps=torch.full((len(noisy) * hw,), 500.0, device=dev),
        vision_noisy_frame_indexes=[tt(np.asarray(noisy))],
        return_dict=False,
    )
    x = torch.randn(1, C, t, h, w, device=dev)

    def step(c):
        x, i = c
        pred = model(vision_tokens=[x.to(dtype)], **kw)[0][0].float()
        return x - 0.05 * pred, i + 1

    return run_torch_steps(step, x, steps)


BENCH = StepBench(
    script=__file__,
    title="Cosmos 3 Edge transformer step",
    model="Cosmos3-Edge transformer (random weights, vocab cut to 4096)",
    step="one Cosmos3OmniTransformer call on the packed sequence (256 text tokens + the latent's patch tokens, "
    "frame 0 a clean condition frame) and an Euler update of the latents.",
    default_latent=(3, 16, 16),
    default_out="cosmos3_step",
    tokens=lambda thw: thw[0] * (thw[1] // 2) * (thw[2] // 2),
    text_tokens=TEXT_LEN,
    run_vidax=run_vidax,
    run_diffusers=run_diffusers,
    batch=1,
)

if __name__ == "__main__":
    main(BENCH)
