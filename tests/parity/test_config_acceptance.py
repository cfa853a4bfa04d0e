"""Config acceptance: configs that diffusers' ``from_config`` builds and runs load in vidax and
compute what the reference computes.

A seeded generator draws small configs from the parameter space the reference accepts (channel
and head counts that are not powers of two, odd kernels, optional keys left out); each is built
with diffusers, every parameter randomised, saved with ``save_pretrained``, loaded with vidax's
production loader (``load_component``) and compared on one float32 forward pass. The reference's
output is checked to depend on its input, so a constant output cannot pass.

Tolerance: both sides run the same float32 arithmetic in another order (XLA vs torch kernels), a
few ulps amplified through at most two blocks: 1e-5 of the output's largest magnitude, as the
per-component parity tests (``tests/parity/test_wan_transformer.py``); a wrong operation shows
at > 1e-2.

Sizes are tiny and the counts small: the file runs in well under a minute on 2 CPU cores.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import assert_close, assert_input_sensitive, randomize_torch_module, standard_normal
from vidax.config import FFN_ACTIVATIONS
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

FP32_TOL = 1e-5
SEED = 20260
N_CONFIGS = 4  # per component: the file's time budget (~2 min on 2 cores) over ~10 components
#: XLA's CPU backend at optimisation level 0 compiles these tiny graphs in ~half the time (the
#: file's budget is mostly compiles) and computes the same float32 operations.
_FAST_COMPILE = {"xla_backend_optimization_level": 0}


def _save(tmp_path_factory, ref, seed: int, name: str, **randomize):
    randomize_torch_module(ref.eval(), seed, **randomize)
    path = tmp_path_factory.mktemp(name)
    ref.save_pretrained(path, safe_serialization=True)
    return path


def _draw(seed: int, n: int, one) -> list[dict]:
    """``n`` configs ``one(rng, i)`` (``i`` = 0 .. n-1, to cycle structural variants) from numpy's
    generator seeded ``seed``."""
    rng = np.random.default_rng(seed)
    return [one(rng, i) for i in range(n)]


def _drop(rng, config: dict, keys) -> dict:
    """``config`` with each of ``keys`` left out (the reference's default) with probability 1/2."""
    return {k: v for k, v in config.items() if k not in keys or rng.integers(2)}


def _ids(config: dict) -> str:
    return "-".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in config.values())


def _jit(model, fn):
    """``x -> fn(model, x)`` (numpy in and out, or tuples of them) compiled once (:data:`_FAST_COMPILE`)."""
    graphdef, state = nnx.split(model)
    compiled = jax.jit(lambda state, x: fn(nnx.merge(graphdef, state), x), compiler_options=_FAST_COMPILE)
    return lambda x: jax.tree.map(np.asarray, compiled(state, jax.tree.map(jnp.asarray, x)))


def _check(reference, ours, x, seed: int, min_err: float = 0.05) -> None:
    """``ours(x)`` equals ``reference(x)`` (numpy in, numpy out; or tuples of arrays, each output
    compared) to :data:`FP32_TOL`, and the reference's outputs for another input (standard
    normal, ``seed``, ``seed + 1``, ... for a tuple's arrays) differ from them by ``min_err``."""
    want, got = reference(x), ours(x)
    other = (
        tuple(standard_normal(a.shape, seed + k) for k, a in enumerate(x))
        if isinstance(x, tuple)
        else standard_normal(x.shape, seed)
    )
    changed = reference(other)
    if not isinstance(want, tuple):
        want, got, changed = (want,), (got,), (changed,)
    assert len(got) == len(want)
    for w, g, c in zip(want, got, changed):
        assert_close(g, w, FP32_TOL)
        assert_input_sensitive(w, c, min_err)


# ---------------------------------------------------------------------------------------- Wan DiT


def wan_configs(n: int) -> list[dict]:
    """Wan transformer configs: 1-3 heads of an even head dim (the reference's complex RoPE pairs)
    from 4 to 14, any channel counts, odd or even ``freq_dim``, each patch axis 1 or 2, with or
    without the cross-attention norm; ``rope_max_seq_len`` and ``eps`` left out. ``qk_norm`` other
    than ``"rms_norm_across_heads"`` is a silent no-op in the reference (it applies the norms
    whatever the setting says): vidax refuses it (:func:`test_wan_qk_norm_no_op_is_refused`)."""
    return _draw(
        SEED,
        n,
        lambda rng, i: dict(
            patch_size=tuple(int(p) for p in rng.choice([1, 2], 3)),
            num_attention_heads=int(rng.integers(1, 4)),
            attention_head_dim=int(rng.choice([4, 6, 8, 10, 12, 14])),
            in_channels=int(rng.integers(1, 9)),
            out_channels=int(rng.integers(1, 9)),
            text_dim=int(rng.integers(3, 20)),
            freq_dim=int(rng.integers(3, 12)),
            ffn_dim=int(rng.integers(5, 40)),
            num_layers=int(rng.integers(1, 3)),
            cross_attn_norm=bool(rng.integers(2)),
        ),
    )


@pytest.mark.parametrize("config", wan_configs(N_CONFIGS), ids=_ids)
def test_wan_transformer_configs(tmp_path_factory, config):
    ref = diffusers.WanTransformer3DModel(**config)
    model = load_component("WanTransformer3DModel", _save(tmp_path_factory, ref, 1, "wan_config"))
    pt, ph, pw = config["patch_size"]
    txt = standard_normal((2, 5, config["text_dim"]), 2)
    ts = np.array([37.5, 912.25], np.float32)

    def reference(x):
        with torch.no_grad():
            out = ref(torch.from_numpy(x), torch.from_numpy(ts), torch.from_numpy(txt), return_dict=False)[0]
        return out.numpy().transpose(0, 2, 3, 4, 1)

    ours = _jit(model, lambda m, x: m(x.transpose(0, 2, 3, 4, 1), ts, txt, None))
    _check(reference, ours, standard_normal((2, config["in_channels"], 2 * pt, 3 * ph, 2 * pw), 1), 3)


@pytest.mark.fast
def test_wan_qk_norm_no_op_is_refused():
    from vidax.errors import ConfigError
    from vidax.models.wan.config import WanTransformerConfig

    with pytest.raises(ConfigError, match=r"qk_norm=None is not valid .* always applies RMSNorm across heads"):
        WanTransformerConfig.from_config_dict(dict(wan_configs(1)[0], qk_norm=None))


# ----------------------------------------------------------------------------------- LTX-2 vocoder


def vocoder_configs(n: int) -> list[dict]:
    """LTX-2 vocoder configs: 1-3 upsamplers with any kernel (>= the stride) and stride, a hidden
    width that halves (rounding down) to at least 1, 1-2 resnet kernels (odd or even: torch's
    padding='same' pads an even one's odd total one more on the right) with 1-2 dilations each,
    leaky ReLU or snake / snake-beta activations."""

    def one(rng, i):
        ups = int(rng.integers(1, 4))
        factors = [int(f) for f in rng.integers(1, 4, ups)]
        kernels = [f + int(rng.integers(0, 4)) for f in factors]
        resnets = [int(k) for k in rng.choice([1, 2, 3, 4, 5], int(rng.integers(1, 3)), replace=False)]
        act = ["leaky_relu", "snake", "snakebeta"][int(rng.integers(3))]
        mel, channels = int(rng.integers(3, 9)), int(rng.integers(1, 3))
        return dict(
            in_channels=mel * channels,
            hidden_channels=int(rng.integers(2**ups, 2**ups + 20)),
            out_channels=int(rng.integers(1, 3)),
            upsample_kernel_sizes=kernels,
            upsample_factors=factors,
            resnet_kernel_sizes=resnets,
            resnet_dilations=[[int(d) for d in rng.integers(1, 4, int(rng.integers(1, 3)))] for _ in resnets],
            act_fn=act,
            antialias=act != "leaky_relu" and bool(rng.integers(2)),
            final_act_fn=["tanh", "clamp", None][int(rng.integers(3))],
            final_bias=bool(rng.integers(2)),
            _mel=(channels, mel),
        )

    return _draw(SEED + 1, n, one)


@pytest.mark.parametrize("config", vocoder_configs(N_CONFIGS), ids=_ids)
def test_ltx2_vocoder_configs(tmp_path_factory, config):
    config = dict(config)
    channels, mel = config.pop("_mel")
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    ref = LTX2Vocoder(**config)
    voc = load_component("LTX2Vocoder", _save(tmp_path_factory, ref, 2, "vocoder_config", scale=0.1, gain=0.9))

    def reference(x):
        with torch.no_grad():
            return ref(torch.from_numpy(x)).numpy()

    _check(reference, _jit(voc, lambda m, x: m(x)), standard_normal((1, channels, 7, mel), 4), 5)


# -------------------------------------------------------------------------------- CogVideoX DiT


def cogvideox_configs(n: int) -> list[dict]:
    """CogVideoX transformer configs: the sincos table (``D`` a multiple of 16, the reference's
    3-D sincos split), RoPE (head dim 16 or 32, its even (T, H, W) split) with or without the
    learned table, or RoPE with ``patch_size_t=2`` (1.5); any channel and timestep widths, an ofs
    embedding or not, ``flip_sin_to_cos`` / ``freq_shift`` either way, every FFN activation diffusers builds (cycled over the draws of the three transformers), any
    timestep activation, norms with or without affine, the patch conv with or without bias."""

    def one(rng, i):
        kind = ["sincos", "rope", "learned", "rope_t"][i % 4]
        heads, dim = (
            [(2, 8), (4, 12), (1, 16), (3, 16)][int(rng.integers(4))]
            if kind == "sincos"
            else (int(rng.integers(1, 4)), int(rng.choice([16, 32])))
        )
        time_dim, compression = int(rng.integers(4, 20)), int(rng.integers(1, 5))  # width 3 with freq_shift 1: refused
        return dict(
            num_attention_heads=heads,
            attention_head_dim=dim,
            in_channels=int(rng.integers(1, 9)),
            out_channels=int(rng.integers(1, 9)),
            flip_sin_to_cos=bool(rng.integers(2)),
            freq_shift=int(rng.integers(2)),
            time_embed_dim=time_dim,
            ofs_embed_dim=time_dim if rng.integers(2) else None,
            text_embed_dim=int(rng.integers(3, 20)),
            num_layers=int(rng.integers(1, 3)),
            attention_bias=bool(rng.integers(2)),
            sample_width=int(rng.integers(2, 7)) * 2,
            sample_height=int(rng.integers(2, 5)) * 2,
            # the learned table is for one size: sample_frames = (T - 1) * compression + 1
            sample_frames=compression + 1 if kind == "learned" else int(rng.integers(1, 14)),
            patch_size=int(rng.integers(1, 3)),
            patch_size_t=2 if kind == "rope_t" else None,
            temporal_compression_ratio=compression,
            max_text_seq_length=int(rng.integers(2, 7)),
            activation_fn=FFN_ACTIVATIONS[(i + 4) % len(FFN_ACTIVATIONS)],
            timestep_activation_fn=["silu", "swish", "gelu", "relu", "mish"][int(rng.integers(5))],
            norm_elementwise_affine=bool(rng.integers(2)),
            norm_eps=float(rng.choice([1e-5, 1e-6, 1e-3])),
            spatial_interpolation_scale=float(rng.uniform(0.5, 2)),
            temporal_interpolation_scale=float(rng.uniform(0.5, 2)),
            use_rotary_positional_embeddings=kind != "sincos",
            use_learned_positional_embeddings=kind == "learned",
            patch_bias=bool(rng.integers(2)),
        )

    return _draw(SEED + 2, n, one)


@pytest.mark.parametrize("config", cogvideox_configs(N_CONFIGS), ids=_ids)
def test_cogvideox_transformer_configs(tmp_path_factory, config):
    import types

    from diffusers import CogVideoXPipeline

    ref = diffusers.CogVideoXTransformer3DModel(**config).eval()
    if config["use_learned_positional_embeddings"]:
        with torch.no_grad():  # a persistent buffer, not a parameter
            ref.patch_embed.pos_embedding.copy_(
                torch.from_numpy(standard_normal(ref.patch_embed.pos_embedding.shape, 6))
            )
    model = load_component("CogVideoXTransformer3DModel", _save(tmp_path_factory, ref, 3, "cogvideox_config"))
    p, pt = config["patch_size"], config["patch_size_t"] or 1
    if config["use_learned_positional_embeddings"]:  # the learned table fixes the latent size
        t = (config["sample_frames"] - 1) // config["temporal_compression_ratio"] + 1
        h, w = config["sample_height"], config["sample_width"]
    else:
        t, h, w = 2 * pt, (config["sample_height"] // p - 1) * p, config["sample_width"]
    rope = None
    if config["use_rotary_positional_embeddings"]:
        fake = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=ref)
        rope = CogVideoXPipeline._prepare_rotary_positional_embeddings(fake, h * 8, w * 8, t, "cpu")
    txt = standard_normal((2, config["max_text_seq_length"], config["text_embed_dim"]), 7)
    ts = np.array([37.5, 912.25], np.float32)
    ofs = np.array([2.0], np.float32) if config["ofs_embed_dim"] else None

    def reference(x):
        with torch.no_grad():
            return ref(
                hidden_states=torch.from_numpy(x),
                encoder_hidden_states=torch.from_numpy(txt),
                timestep=torch.from_numpy(ts),
                ofs=None if ofs is None else torch.from_numpy(ofs),
                image_rotary_emb=rope,
                return_dict=False,
            )[0].numpy()

    ours = _jit(model, lambda m, x: m(x.transpose(0, 1, 3, 4, 2), ts, txt, ofs).transpose(0, 1, 4, 2, 3))
    _check(reference, ours, standard_normal((2, t, config["in_channels"], h, w), 8), 9)


# ------------------------------------------------------------------------------ LTX-Video DiT


def ltx_configs(n: int) -> list[dict]:
    """LTX-Video transformer configs: 1-3 heads of any head dim with an even width (the RoPE
    pairs span the whole width), ``cross_attention_dim`` equal to it (the reference feeds the
    caption projection's output there), any channel counts, patch sizes 1-3 (they scale the RoPE
    coordinates), every FFN activation diffusers builds, the block RMSNorms with or without weights, any biases;
    ``out_channels`` sometimes left to default to ``in_channels``."""

    def one(rng, i):
        heads = int(rng.integers(1, 4))
        dim = int(rng.choice([d for d in range(3, 15) if heads * d % 2 == 0]))
        return _drop(
            rng,
            dict(
                in_channels=int(rng.integers(1, 9)),
                out_channels=int(rng.integers(1, 9)),
                patch_size=int(rng.integers(1, 4)),
                patch_size_t=int(rng.integers(1, 4)),
                num_attention_heads=heads,
                attention_head_dim=dim,
                cross_attention_dim=heads * dim,
                num_layers=int(rng.integers(1, 3)),
                activation_fn=FFN_ACTIVATIONS[i % len(FFN_ACTIVATIONS)],
                norm_elementwise_affine=i % 2 == 0,
                norm_eps=float(rng.choice([1e-6, 1e-5, 1e-3])),
                caption_channels=int(rng.integers(3, 20)),
                attention_bias=bool(rng.integers(2)),
                attention_out_bias=bool(rng.integers(2)),
            ),
            ("out_channels",),
        )

    return _draw(SEED + 3, n, one)


@pytest.mark.parametrize("config", ltx_configs(N_CONFIGS), ids=_ids)
def test_ltx_transformer_configs(tmp_path_factory, config):
    ref = diffusers.LTXVideoTransformer3DModel(**config)
    model = load_component("LTXVideoTransformer3DModel", _save(tmp_path_factory, ref, 4, "ltx_config"))
    t, h, w = 2, 3, 2
    txt = standard_normal((2, 5, config["caption_channels"]), 10)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)
    ts = np.array([37.5, 912.25], np.float32)
    scale = (8 / 25, 32, 32)

    def reference(x):
        with torch.no_grad():
            return ref(
                torch.from_numpy(x),
                torch.from_numpy(txt),
                torch.from_numpy(ts),
                torch.from_numpy(mask),
                num_frames=t,
                height=h,
                width=w,
                rope_interpolation_scale=scale,
                return_dict=False,
            )[0].numpy()

    ours = _jit(model, lambda m, x: m(x, txt, ts, mask, t, h, w, scale))
    _check(reference, ours, standard_normal((2, t * h * w, config["in_channels"]), 11), 12)


# --------------------------------------------------------------------------- HunyuanVideo DiT


def _rope_axes(rng) -> list[int]:
    """Three positive even RoPE axis widths (T, H, W); the head dim is their sum."""
    return [2 * int(a) for a in rng.integers(1, 4, 3)]


def hunyuan_configs(n: int) -> list[dict]:
    """HunyuanVideo transformer configs: 1-3 heads whose dim is the sum of three random even RoPE
    axes, 1-2 double / single / refiner blocks, any channel counts and ``mlp_ratio`` (floored
    widths), patches 1-2 in space and time, every per-head ``qk_norm`` the reference's joint
    attention runs (rms, layer, fp32 layer, none), guidance embedded or not, the three image
    condition types; ``out_channels`` sometimes left to default to ``in_channels``."""

    def one(rng, i):
        axes = _rope_axes(rng)
        return _drop(
            rng,
            dict(
                in_channels=int(rng.integers(1, 9)),
                out_channels=int(rng.integers(1, 9)),
                num_attention_heads=int(rng.integers(1, 4)),
                attention_head_dim=sum(axes),
                num_layers=int(rng.integers(1, 3)),
                num_single_layers=int(rng.integers(1, 3)),
                num_refiner_layers=int(rng.integers(1, 3)),
                mlp_ratio=float(rng.choice([1.3, 2.5, 4.0])),
                patch_size=int(rng.integers(1, 3)),
                patch_size_t=int(rng.integers(1, 3)),
                qk_norm=["rms_norm", "layer_norm", "fp32_layer_norm", None][i % 4],
                guidance_embeds=bool(rng.integers(2)),
                text_embed_dim=int(rng.integers(3, 20)),
                pooled_projection_dim=int(rng.integers(3, 20)),
                rope_theta=float(rng.choice([256.0, 1000.0])),
                rope_axes_dim=axes,
                image_condition_type=[None, "latent_concat", "token_replace"][int(rng.integers(3))],
            ),
            ("out_channels",),
        )

    return _draw(SEED + 4, n, one)


@pytest.mark.parametrize("config", hunyuan_configs(N_CONFIGS), ids=_ids)
def test_hunyuan_transformer_configs(tmp_path_factory, config):
    ref = diffusers.HunyuanVideoTransformer3DModel(**config)
    model = load_component("HunyuanVideoTransformer3DModel", _save(tmp_path_factory, ref, 5, "hunyuan_config"))
    pt, p = config["patch_size_t"], config["patch_size"]
    txt = standard_normal((2, 5, config["text_embed_dim"]), 13)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)
    pooled = standard_normal((2, config["pooled_projection_dim"]), 14)
    ts = np.array([37.5, 912.25], np.float32)
    guidance = np.array([6000.0, 3500.0], np.float32) if config["guidance_embeds"] else None

    def reference(x):
        with torch.no_grad():
            out = ref(
                torch.from_numpy(x),
                torch.from_numpy(ts),
                torch.from_numpy(txt),
                torch.from_numpy(mask),
                torch.from_numpy(pooled),
                guidance=None if guidance is None else torch.from_numpy(guidance),
                return_dict=False,
            )[0]
        return out.numpy().transpose(0, 2, 3, 4, 1)

    ours = _jit(model, lambda m, x: m(x.transpose(0, 2, 3, 4, 1), ts, txt, mask, pooled, guidance))
    _check(reference, ours, standard_normal((2, config["in_channels"], 2 * pt, 2 * p, 3 * p), 15), 16)


# ----------------------------------------------------------------------- HunyuanVideo 1.5 DiT


def hunyuan15_configs(n: int) -> list[dict]:
    """HunyuanVideo 1.5 transformer configs: as :func:`hunyuan_configs` (its blocks), with the
    byT5 and image-token widths, MeanFlow or not, either task type; ``qk_norm`` is never null
    (the reference calls ``norm_q`` unconditionally: vidax refuses null)."""

    def one(rng, i):
        axes = _rope_axes(rng)
        return _drop(
            rng,
            dict(
                in_channels=int(rng.integers(1, 9)),
                out_channels=int(rng.integers(1, 9)),
                num_attention_heads=int(rng.integers(1, 4)),
                attention_head_dim=sum(axes),
                num_layers=int(rng.integers(1, 3)),
                num_refiner_layers=int(rng.integers(1, 3)),
                mlp_ratio=float(rng.choice([1.3, 2.5, 4.0])),
                patch_size=int(rng.integers(1, 3)),
                patch_size_t=int(rng.integers(1, 3)),
                qk_norm=["rms_norm", "layer_norm", "fp32_layer_norm"][i % 3],
                text_embed_dim=int(rng.integers(3, 20)),
                text_embed_2_dim=int(rng.integers(3, 20)),
                image_embed_dim=int(rng.integers(3, 20)),
                rope_theta=float(rng.choice([256.0, 1000.0])),
                rope_axes_dim=axes,
                task_type=["t2v", "i2v"][int(rng.integers(2))],
                use_meanflow=bool(rng.integers(2)),
            ),
            ("out_channels", "task_type"),
        )

    return _draw(SEED + 5, n, one)


@pytest.mark.parametrize("config", hunyuan15_configs(N_CONFIGS), ids=_ids)
def test_hunyuan15_transformer_configs(tmp_path_factory, config):
    ref = diffusers.HunyuanVideo15Transformer3DModel(**config)
    model = load_component("HunyuanVideo15Transformer3DModel", _save(tmp_path_factory, ref, 6, "hunyuan15_config"))
    pt, p = config["patch_size_t"], config["patch_size"]
    rest = dict(  # vidax's positional order after hidden_states (the reference's keywords)
        timestep=np.array([37.5, 912.25], np.float32),
        encoder_hidden_states=standard_normal((2, 5, config["text_embed_dim"]), 17),
        encoder_attention_mask=np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64),
        encoder_hidden_states_2=standard_normal((2, 4, config["text_embed_2_dim"]), 18),
        encoder_attention_mask_2=np.array([[1, 1, 1, 1], [0, 0, 0, 0]], np.int64),
        image_embeds=standard_normal((2, 3, config["image_embed_dim"]), 19),
    )
    if config["use_meanflow"]:
        rest["timestep_r"] = np.array([20.0, 850.5], np.float32)

    def reference(x):
        with torch.no_grad():
            out = ref(torch.from_numpy(x), **{k: torch.from_numpy(v) for k, v in rest.items()}, return_dict=False)[0]
        return out.numpy().transpose(0, 2, 3, 4, 1)

    ours = _jit(model, lambda m, x: m(x.transpose(0, 2, 3, 4, 1), *rest.values()))
    _check(reference, ours, standard_normal((2, config["in_channels"], 2 * pt, 2 * p, 3 * p), 20), 21)


# ------------------------------------------------------------------------- Cosmos-Predict2.5 DiT


def cosmos_configs(n: int) -> list[dict]:
    """Cosmos-Predict2.5 transformer configs: 1-3 heads of an even head dim >= 12 (the
    reference's rotary split ``2 * (K // 6)`` per spatial axis, the rest for time, each above 2),
    any channel, AdaLN-LoRA and text widths and ``mlp_ratio``, each patch axis 1-2, any RoPE
    scales, with or without the padding-mask channel, the learnable position tables and the
    text projection (whose output width is the cross-attention's input, ``text_embed_dim``)."""

    def one(rng, i):
        text, project = int(rng.integers(3, 20)), bool(rng.integers(2))
        return _drop(
            rng,
            dict(
                in_channels=int(rng.integers(1, 9)),
                out_channels=int(rng.integers(1, 9)),
                num_attention_heads=int(rng.integers(1, 4)),
                attention_head_dim=int(rng.choice([12, 14, 16, 18, 20])),
                num_layers=int(rng.integers(1, 3)),
                mlp_ratio=float(rng.choice([1.3, 2.5, 4.0])),
                text_embed_dim=text,
                adaln_lora_dim=int(rng.integers(3, 13)),
                max_size=(4, 8, 12),
                patch_size=tuple(int(p) for p in rng.integers(1, 3, 3)),
                rope_scale=tuple(float(s) for s in rng.choice([1.0, 2.0, 3.0], 3)),
                concat_padding_mask=bool(rng.integers(2)),
                extra_pos_embed_type=[None, "learnable"][i % 2],
                use_crossattn_projection=project,
                crossattn_proj_in_channels=int(rng.integers(3, 20)),
                encoder_hidden_states_channels=text,
            ),
            () if project else ("crossattn_proj_in_channels", "encoder_hidden_states_channels"),
        )

    return _draw(SEED + 6, n, one)


@pytest.mark.parametrize("config", cosmos_configs(N_CONFIGS), ids=_ids)
def test_cosmos_transformer_configs(tmp_path_factory, config):
    from tests.parity.cosmos_reference import torchvision_stand_ins

    ref = diffusers.CosmosTransformer3DModel(**config)
    model = load_component("CosmosTransformer3DModel", _save(tmp_path_factory, ref, 7, "cosmos_config"))
    pt, ph, pw = config["patch_size"]
    t, h, w = 2 * pt, 3 * ph, 2 * pw
    text = config["crossattn_proj_in_channels"] if config["use_crossattn_projection"] else config["text_embed_dim"]
    txt = standard_normal((2, 5, text), 22)
    ts = np.array([0.35, 0.9], np.float32)
    if pt == 1:  # per-frame timesteps (the reference's need p_t = 1; vidax refuses them otherwise)
        ts = ts[:, None, None, None, None] * np.ones((1, 1, t, 1, 1), np.float32)
        ts[:, :, 0] = 1e-4  # the conditioning frame's sigma, as the Predict2.5 pipeline
    pad = None  # the reference ignores a padding mask it does not concatenate; vidax refuses it
    if config["concat_padding_mask"]:
        pad = (np.random.default_rng(23).random((1, 1, 2 * h + 1, 3 * w - 1)) > 0.5).astype(np.float32)

    def reference(x):
        with torch.no_grad(), torchvision_stand_ins():
            out = ref(
                torch.from_numpy(x),
                torch.from_numpy(ts),
                torch.from_numpy(txt),
                padding_mask=None if pad is None else torch.from_numpy(pad),
                return_dict=False,
            )[0]
        return out.numpy().transpose(0, 2, 3, 4, 1)

    pad_cl = None if pad is None else pad.transpose(0, 2, 3, 1)
    ours = _jit(model, lambda m, x: m(x.transpose(0, 2, 3, 4, 1), ts, txt, None, None, pad_cl))
    _check(reference, ours, standard_normal((2, config["in_channels"], t, h, w), 24), 25)


# ------------------------------------------------------------------------------------ LTX-2 DiT


def ltx2_configs(n: int) -> list[dict]:
    """LTX-2 transformer configs: 1-3 video and 1-3 audio heads of their own widths, drawn so the
    streams fit together as the reference needs (``audio_cross_attention_dim`` = the audio width
    D_a: it is the audio text width and the audio<->video RoPE's; even head dims; "split" RoPE: D_a
    / 2 a multiple of the video head count, whose slices the cross-modal video table has; the
    video text width D when a caption projection or a prompt-AdaLN table feeds it, else any),
    either RoPE layout, every 2.3 / 2.5 switch (gates, prompt AdaLN on either stream, with or
    without its timestep MLP, STG-capable attention, FFN biases, the keyframe embedding), patch
    sizes 1-2 (they step the RoPE coordinates), any RoPE scales, bases, offsets and timestep
    multipliers; ``out_channels`` sometimes left to default; the call with or without
    ``use_cross_timestep`` and, with ``perturbed_attn``, STG on the first block. What the
    reference builds but fails to run vidax refuses (:func:`test_ltx2_configs_the_reference_fails_are_refused`)."""

    def one(rng, i):
        rope = ["split", "interleaved"][i % 2]
        hv, ha = (int(h) for h in rng.integers(1, 4, 2))
        kv = int(rng.choice([k for k in (2, 4, 6, 8) if hv * k >= 6]))
        ka = int(rng.choice([k for k in (2, 4, 6, 8, 12) if rope == "interleaved" or ha * k // 2 % hv == 0]))
        prompt, mod, audio_mod = (bool(b) for b in rng.integers(2, size=3))
        return _drop(
            rng,
            dict(
                in_channels=int(rng.integers(1, 9)),
                out_channels=int(rng.integers(1, 9)),
                patch_size=int(rng.integers(1, 3)),
                patch_size_t=int(rng.integers(1, 3)),
                num_attention_heads=hv,
                attention_head_dim=kv,
                cross_attention_dim=hv * kv if prompt or mod or audio_mod else int(rng.integers(3, 20)),
                vae_scale_factors=(int(rng.integers(1, 9)), int(rng.integers(8, 40)), int(rng.integers(8, 40))),
                pos_embed_max_pos=int(rng.integers(5, 30)),
                base_height=int(rng.integers(100, 3000)),
                base_width=int(rng.integers(100, 3000)),
                gated_attn=bool(rng.integers(2)),
                cross_attn_mod=mod,
                audio_in_channels=int(rng.integers(1, 9)),
                audio_out_channels=int(rng.integers(1, 9)),
                audio_patch_size=int(rng.integers(1, 3)),
                audio_patch_size_t=int(rng.integers(1, 3)),
                audio_num_attention_heads=ha,
                audio_attention_head_dim=ka,
                audio_cross_attention_dim=ha * ka,
                audio_scale_factor=int(rng.integers(1, 7)),
                audio_pos_embed_max_pos=int(rng.integers(5, 30)),
                audio_sampling_rate=int(rng.choice([16000, 24000, 44100])),
                audio_hop_length=int(rng.choice([160, 256])),
                audio_gated_attn=bool(rng.integers(2)),
                audio_cross_attn_mod=audio_mod,
                num_layers=int(rng.integers(1, 3)),
                activation_fn=FFN_ACTIVATIONS[(i + 2) % len(FFN_ACTIVATIONS)],
                norm_elementwise_affine=i // 2 == 0,
                norm_eps=float(rng.choice([1e-6, 1e-5, 1e-3])),
                caption_channels=int(rng.integers(3, 20)),
                attention_bias=bool(rng.integers(2)),
                attention_out_bias=bool(rng.integers(2)),
                rope_theta=float(rng.choice([100.0, 10000.0])),
                rope_double_precision=bool(rng.integers(2)),
                causal_offset=int(rng.integers(0, 3)),
                timestep_scale_multiplier=int(rng.choice([1000, 500])),
                cross_attn_timestep_scale_multiplier=int(rng.choice([1000, 250])),
                rope_type=rope,
                use_prompt_embeddings=prompt,
                perturbed_attn=bool(rng.integers(2)),
                ff_bias=bool(rng.integers(2)),
                audio_ff_bias=bool(rng.integers(2)),
                use_prompt_adaln_single=bool(rng.integers(2)),
                use_keyframes_abs_pos_embedding=bool(rng.integers(2)),
                _cross_timestep=bool(rng.integers(2)),
            ),
            ("out_channels", "audio_out_channels"),
        )

    return _draw(SEED + 7, n, one)


@pytest.mark.parametrize("config", ltx2_configs(N_CONFIGS), ids=_ids)
def test_ltx2_transformer_configs(tmp_path_factory, config):
    config = dict(config)
    cross_timestep = config.pop("_cross_timestep")
    ref = diffusers.LTX2VideoTransformer3DModel(**config)
    model = load_component("LTX2VideoTransformer3DModel", _save(tmp_path_factory, ref, 8, "ltx2_config"))
    t, h, w, m = 3, 3, 2, 5
    pt, p, apt = config["patch_size_t"], config["patch_size"], config["audio_patch_size_t"]
    n = -(-t // pt) * -(-h // p) * -(-w // p)  # the reference's coordinates step by the patch
    text = config["caption_channels"] if config["use_prompt_embeddings"] else config["cross_attention_dim"]
    audio_text = config["caption_channels"] if config["use_prompt_embeddings"] else config["audio_cross_attention_dim"]
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], np.int64)
    arrays = dict(
        encoder_hidden_states=standard_normal((2, 5, text), 26),
        audio_encoder_hidden_states=standard_normal((2, 5, audio_text), 27),
        timestep=np.array([300.0, 820.0], np.float32),
        audio_timestep=np.array([450.0, 90.0], np.float32),
        sigma=np.array([0.35, 0.8], np.float32),
        audio_sigma=np.array([0.6, 0.15], np.float32),
        encoder_attention_mask=mask,
        audio_encoder_attention_mask=mask[::-1].copy(),
    )
    if config["use_keyframes_abs_pos_embedding"]:
        arrays["video_keyframes_mask"] = (np.arange(n) < n // 2).astype(np.float32)[None, :, None].repeat(2, 0)
    static = dict(num_frames=t, height=h, width=w, fps=24.0, audio_num_frames=m, use_cross_timestep=cross_timestep)
    if config["perturbed_attn"]:  # STG on the first block, the first sample perturbed
        arrays["perturbation_mask"] = np.array([0.0, 1.0], np.float32)
        static["spatio_temporal_guidance_blocks"] = [0]

    def reference(x):
        with torch.no_grad():
            out = ref(
                torch.from_numpy(x[0]),
                torch.from_numpy(x[1]),
                **{k: torch.from_numpy(v) for k, v in arrays.items()},
                **static,
                return_dict=False,
            )
        return tuple(o.numpy() for o in out)

    ours = _jit(model, lambda mdl, x: mdl(x[0], x[1], **arrays, **static))
    x = (
        standard_normal((2, n, config["in_channels"]), 28),
        standard_normal((2, -(-m // apt), config["audio_in_channels"]), 29),
    )
    _check(reference, ours, x, 30)


@pytest.mark.parametrize(
    "change, match",
    [
        (
            dict(num_attention_heads=1, attention_head_dim=4, cross_attention_dim=4),
            r"attention_head_dim=4 .* RoPE .* < 6",
        ),
        (
            dict(rope_type="interleaved", num_attention_heads=1, attention_head_dim=7, cross_attention_dim=7),
            r"attention_head_dim=7 .* interleaved RoPE rotates channel pairs",
        ),
        (
            dict(
                rope_type="split", audio_num_attention_heads=2, audio_attention_head_dim=3, audio_cross_attention_dim=6
            ),
            r"audio_attention_head_dim=3 .* split RoPE rotates the halves of each head",
        ),
        (
            dict(use_prompt_embeddings=False, cross_attn_mod=True, cross_attention_dim=5),
            r"cross_attention_dim=5 .* prompt AdaLN table",
        ),
    ],
    ids=["narrow", "odd-pairs", "odd-head", "prompt-adaln-width"],
)
@pytest.mark.fast
def test_ltx2_configs_the_reference_fails_are_refused(change, match):
    """Configs diffusers builds but cannot run (its RoPE tables are empty below a video width of
    6, its rotations need channel pairs, its prompt AdaLN table is D wide) are refused with the
    reason."""
    from vidax.errors import ConfigError
    from vidax.models.ltx2.config_transformer import LTX2TransformerConfig

    config = {k: v for k, v in ltx2_configs(1)[0].items() if not k.startswith("_")}
    with pytest.raises(ConfigError, match=match):
        LTX2TransformerConfig.from_config_dict(dict(config, **change))


# ------------------------------------------------------------------------------- Cosmos 3 DiT


def cosmos3_configs(n: int) -> list[dict]:
    """Cosmos 3 transformer configs: 1-2 key/value heads shared by 1-2 query heads each (GQA),
    an even head dim K whose mRoPE section (T, H, W pairs) is drawn whole or short of K / 2
    (the reference's interleave reads only the H and W counts, the rest is T), given as
    ``rope_axes_dim`` or through ``rope_scaling``; any widths, latent channels, patch 1-2, vocab,
    timestep scale and RoPE base; the Qwen3-VL (SiLU-gated) or Edge (squared-ReLU, Nemotron norms)
    layers, the understanding q / k norms or not (then the separate understanding key norm for
    the generation tokens or not), with or without the sound and action heads."""

    def one(rng, i):
        kv_heads = int(rng.integers(1, 3))
        k = int(rng.choice([6, 8, 10, 12]))
        h, w = (int(s) for s in rng.integers(0, k // 6 + 1, 2))
        section = [k // 2 - h - w if i % 2 == 0 else int(rng.integers(0, k // 2 - h - w)), h, w]
        c, p = int(rng.integers(1, 6)), int(rng.integers(1, 3))
        sound, action = bool(rng.integers(2)), bool(rng.integers(2))
        config = dict(
            attention_bias=bool(rng.integers(2)),
            head_dim=k,
            hidden_size=int(rng.integers(4, 24)),
            intermediate_size=int(rng.integers(3, 30)),
            latent_channel=c,
            latent_patch_size=p,
            num_attention_heads=kv_heads * int(rng.integers(1, 3)),
            num_hidden_layers=int(rng.integers(1, 3)),
            num_key_value_heads=kv_heads,
            patch_latent_dim=p * p * c,
            rms_norm_eps=float(rng.choice([1e-6, 1e-5])),
            rope_theta=float(rng.choice([1e4, 5e6])),
            action_gen=action,
            sound_gen=sound,
            timestep_scale=float(rng.choice([0.001, 0.01])),
            vocab_size=int(rng.integers(20, 60)),
            hidden_act=["silu", "relu2"][i % 2],
            qk_norm_for_text=bool(rng.integers(2)),
            use_und_k_norm_for_gen=bool(rng.integers(2)),
        )
        if rng.integers(2):
            config["rope_axes_dim"] = section
        else:
            config["rope_scaling"] = {"mrope_section": section, "mrope_interleaved": True, "rope_type": "default"}
        if sound:
            config["sound_dim"] = int(rng.integers(1, 8))
        if action:
            config.update(action_dim=int(rng.integers(1, 8)), num_embodiment_domains=int(rng.integers(1, 4)))
        return config

    return _draw(SEED + 8, n, one)


@pytest.mark.parametrize("config", cosmos3_configs(N_CONFIGS), ids=_ids)
def test_cosmos3_transformer_configs(tmp_path_factory, config):
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer

    ref = Cosmos3OmniTransformer(**config)
    model = load_component("Cosmos3OmniTransformer", _save(tmp_path_factory, ref, 9, "cosmos3_config"))
    # The packed sequence: 4 understanding text tokens, 3 latent frames (frame 0 a condition), a
    # text token, 3 sound frames, 2 action frames, an empty slot; positions random.
    p, c = config["latent_patch_size"], config["latent_channel"]
    t, h, w = 3, 3, 4
    hw = -(-h // p) * -(-w // p)
    und, noisy = 4, (1, 2)
    vis = np.arange(und, und + t * hw)
    snd = np.arange(vis[-1] + 2, vis[-1] + 5) if config["sound_gen"] else np.zeros(0, np.int64)
    act = np.arange(vis[-1] + 2 + len(snd), vis[-1] + 4 + len(snd)) if config["action_gen"] else np.zeros(0, np.int64)
    length = vis[-1] + 3 + len(snd) + len(act)
    text_idx = np.r_[0:und, vis[-1] + 1]
    g = np.random.default_rng(31)
    arrays = dict(
        input_ids=g.integers(0, config["vocab_size"], (1, und + 1)).astype(np.int32),
        text_indexes=text_idx.astype(np.int32),
        position_ids=np.stack(
            [np.sort(g.integers(0, 16000, length)), g.integers(0, 40, length), g.integers(0, 40, length)]
        ).astype(np.int32),
        vision_sequence_indexes=vis.astype(np.int32),
        vision_mse_loss_indexes=vis[hw:].astype(np.int32),
        vision_timesteps=g.uniform(0, 1000, (1, len(noisy) * hw)).astype(np.float32),
    )
    static = dict(und_len=und, vision_noisy_frames=noisy)
    if config["sound_gen"]:
        arrays.update(
            sound_sequence_indexes=snd.astype(np.int32),
            sound_mse_loss_indexes=snd.astype(np.int32),
            sound_timesteps=g.uniform(0, 1000, (1, 3)).astype(np.float32),
        )
        static["sound_noisy_frames"] = (0, 1, 2)
    if config["action_gen"]:
        arrays.update(
            action_sequence_indexes=act.astype(np.int32),
            action_mse_loss_indexes=act.astype(np.int32),
            action_timesteps=g.uniform(0, 1000, (1, 2)).astype(np.float32),
            action_domain_ids=np.array([config["num_embodiment_domains"] - 1], np.int32),
        )
        static["action_noisy_frames"] = (0, 1)
    x = [standard_normal((1, t, h, w, c), 32)]
    if config["sound_gen"]:
        x.append(standard_normal((1, config["sound_dim"], 3), 33))
    if config["action_gen"]:
        x.append(standard_normal((1, 2, config["action_dim"]), 34))

    def reference(x):
        a = {k: torch.from_numpy(v).long() for k, v in arrays.items() if v.dtype.kind == "i"}
        kw = dict(
            input_ids=a["input_ids"][0],
            text_indexes=a["text_indexes"],
            position_ids=a["position_ids"],
            und_len=und,
            sequence_length=int(length),
            vision_tokens=[torch.from_numpy(x[0]).permute(0, 4, 1, 2, 3)],
            vision_token_shapes=[(t, -(-h // p), -(-w // p))],
            vision_sequence_indexes=a["vision_sequence_indexes"],
            vision_mse_loss_indexes=a["vision_mse_loss_indexes"],
            vision_timesteps=torch.from_numpy(arrays["vision_timesteps"])[0],
            vision_noisy_frame_indexes=[torch.tensor(noisy)],
        )
        rest = list(x[1:])
        if config["sound_gen"]:
            kw.update(
                sound_tokens=[torch.from_numpy(rest.pop(0))[0]],
                sound_token_shapes=[(3, 1, 1)],
                sound_sequence_indexes=a["sound_sequence_indexes"],
                sound_mse_loss_indexes=a["sound_mse_loss_indexes"],
                sound_timesteps=torch.from_numpy(arrays["sound_timesteps"])[0],
                sound_noisy_frame_indexes=[torch.arange(3)],
            )
        if config["action_gen"]:
            kw.update(
                action_tokens=[torch.from_numpy(rest.pop(0))[0]],
                action_token_shapes=[(2, 1, 1)],
                action_sequence_indexes=a["action_sequence_indexes"],
                action_mse_loss_indexes=a["action_mse_loss_indexes"],
                action_timesteps=torch.from_numpy(arrays["action_timesteps"])[0],
                action_noisy_frame_indexes=[torch.arange(2)],
                action_domain_ids=[a["action_domain_ids"][0]],
            )
        with torch.no_grad():
            out = ref(**kw)
        outs = [out.sample[0].numpy().transpose(0, 2, 3, 4, 1)]
        outs += [o[0].numpy()[None] for o in (out.sound, out.action) if o is not None]
        return tuple(outs)

    def ours(m, x):
        rest = list(x[1:])
        sound = rest.pop(0) if config["sound_gen"] else None
        action = rest.pop(0) if config["action_gen"] else None
        out = m(vision=x[0], sound=sound, action=action, **arrays, **static)
        return tuple(o for o in out if o is not None)

    # The action head's prediction moves least (~5e-2 on one draw): still 1000x the tolerance.
    _check(reference, _jit(model, ours), tuple(x), 35, min_err=1e-2)


@pytest.mark.fast
def test_cosmos3_odd_head_dim_is_refused():
    """The reference builds an odd ``head_dim`` but its RoPE table (two copies of ceil(K / 2)
    angles) does not fit the heads: refused with the reason."""
    from vidax.errors import ConfigError
    from vidax.models.cosmos3.config import Cosmos3TransformerConfig

    with pytest.raises(ConfigError, match=r"head_dim=7 .* fails on an odd head_dim"):
        Cosmos3TransformerConfig.from_config_dict(dict(cosmos3_configs(1)[0], head_dim=7))
