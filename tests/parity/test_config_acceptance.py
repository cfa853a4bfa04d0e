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

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import assert_close, assert_input_sensitive, randomize_torch_module, standard_normal
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")

FP32_TOL = 1e-5
SEED = 20260
_FWD = nnx.jit(lambda m, *a: m(*a))


def _save(tmp_path_factory, ref, seed: int, name: str, **randomize):
    randomize_torch_module(ref.eval(), seed, **randomize)
    path = tmp_path_factory.mktemp(name)
    ref.save_pretrained(path, safe_serialization=True)
    return path


# ---------------------------------------------------------------------------------------- Wan DiT


def wan_configs(n: int) -> list[dict]:
    """Wan transformer configs: 1-3 heads of an even head dim (the reference's complex RoPE pairs)
    from 4 to 14, any channel counts, odd or even ``freq_dim``, each patch axis 1 or 2, with or
    without the cross-attention norm; ``rope_max_seq_len`` and ``eps`` left out. ``qk_norm`` other
    than ``"rms_norm_across_heads"`` is a silent no-op in the reference (it applies the norms
    whatever the setting says): vidax refuses it (:func:`test_wan_qk_norm_no_op_is_refused`)."""
    rng = np.random.default_rng(SEED)
    out = []
    for _ in range(n):
        out.append(dict(
            patch_size=tuple(int(p) for p in rng.choice([1, 2], 3)),
            num_attention_heads=int(rng.integers(1, 4)), attention_head_dim=int(rng.choice([4, 6, 8, 10, 12, 14])),
            in_channels=int(rng.integers(1, 9)), out_channels=int(rng.integers(1, 9)),
            text_dim=int(rng.integers(3, 20)), freq_dim=int(rng.integers(3, 12)), ffn_dim=int(rng.integers(5, 40)),
            num_layers=int(rng.integers(1, 3)), cross_attn_norm=bool(rng.integers(2))))
    return out


@pytest.mark.parametrize("config", wan_configs(8), ids=lambda c: "-".join(str(v) for v in c.values()))
def test_wan_transformer_configs(tmp_path_factory, config):
    ref = diffusers.WanTransformer3DModel(**config)
    path = _save(tmp_path_factory, ref, 1, "wan_config")
    model = load_component("WanTransformer3DModel", path)
    pt, ph, pw = config["patch_size"]
    b, t, h, w = 2, 2 * pt, 3 * ph, 2 * pw
    x = standard_normal((b, config["in_channels"], t, h, w), 1)
    txt = standard_normal((b, 5, config["text_dim"]), 2)
    ts = np.array([37.5, 912.25], np.float32)

    def reference(x):
        with torch.no_grad():
            out = ref(torch.from_numpy(x), torch.from_numpy(ts), torch.from_numpy(txt), return_dict=False)[0]
        return out.numpy().transpose(0, 2, 3, 4, 1)

    want = reference(x)
    got = np.asarray(_FWD(model, jnp.asarray(x.transpose(0, 2, 3, 4, 1)), jnp.asarray(ts), jnp.asarray(txt), None))
    assert got.shape == want.shape
    assert_close(got, want, FP32_TOL)
    assert_input_sensitive(want, reference(standard_normal(x.shape, 3)))


def test_wan_qk_norm_no_op_is_refused():
    from vidax.errors import ConfigError
    from vidax.models.wan.config import WanTransformerConfig

    with pytest.raises(ConfigError, match=r"qk_norm=None is not valid .* always applies RMSNorm across heads"):
        WanTransformerConfig.from_config_dict(dict(wan_configs(1)[0], qk_norm=None))


# ----------------------------------------------------------------------------------- LTX-2 vocoder


def vocoder_configs(n: int) -> list[dict]:
    """LTX-2 vocoder configs: 1-3 upsamplers with any kernel (>= the stride) and stride, a hidden
    width that halves (rounding down) to at least 1, 1-2 resnet kernels (odd: vidax refuses even
    ones, which torch's padding='same' pads asymmetrically) with 1-2 dilations each, leaky ReLU or
    snake / snake-beta activations."""
    rng = np.random.default_rng(SEED + 1)
    out = []
    for _ in range(n):
        ups = int(rng.integers(1, 4))
        factors = [int(f) for f in rng.integers(1, 4, ups)]
        kernels = [f + int(rng.integers(0, 4)) for f in factors]
        resnets = [int(k) for k in rng.choice([1, 3, 5], int(rng.integers(1, 3)), replace=False)]
        act = ["leaky_relu", "snake", "snakebeta"][int(rng.integers(3))]
        mel, channels = int(rng.integers(3, 9)), int(rng.integers(1, 3))
        out.append(dict(
            in_channels=mel * channels, hidden_channels=int(rng.integers(2 ** ups, 2 ** ups + 20)),
            out_channels=int(rng.integers(1, 3)), upsample_kernel_sizes=kernels, upsample_factors=factors,
            resnet_kernel_sizes=resnets,
            resnet_dilations=[[int(d) for d in rng.integers(1, 4, int(rng.integers(1, 3)))] for _ in resnets],
            act_fn=act, antialias=act != "leaky_relu" and bool(rng.integers(2)),
            final_act_fn=["tanh", "clamp", None][int(rng.integers(3))], final_bias=bool(rng.integers(2)),
            _mel=(channels, mel)))
    return out


@pytest.mark.parametrize("config", vocoder_configs(8), ids=lambda c: "-".join(str(v) for v in c.values()))
def test_ltx2_vocoder_configs(tmp_path_factory, config):
    config = dict(config)
    channels, mel = config.pop("_mel")
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    ref = LTX2Vocoder(**config)
    path = _save(tmp_path_factory, ref, 2, "vocoder_config", scale=0.1, gain=0.9)
    voc = load_component("LTX2Vocoder", path)
    x = standard_normal((1, channels, 7, mel), 4)

    def reference(x):
        with torch.no_grad():
            return ref(torch.from_numpy(x)).numpy()

    want = reference(x)
    got = np.asarray(voc(x))
    assert got.shape == want.shape
    assert_close(got, want, FP32_TOL)
    assert_input_sensitive(want, reference(standard_normal(x.shape, 5)))
