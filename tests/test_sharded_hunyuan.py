"""The HunyuanVideo (1.0 and 1.5) transformers on a mesh of fake CPU devices equals the single-device model:
tensor-parallel heads, data-parallel batch, Ulysses over the joint [video; text] sequence with
per-prompt text masks. 45 video and 7 text tokens do not divide by sequence=2 or 4, so both are
padded and the joint attention takes the general segment-id path (token replace on, so the
first-frame modulation rows are padded too)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax.models.hunyuan_video.config import HunyuanVideoTransformerConfig
from vidax.models.hunyuan_video.transformer import HunyuanVideoTransformer3DModel
from vidax.models.hunyuan_video15.config import HunyuanVideo15TransformerConfig
from vidax.models.hunyuan_video15.transformer import HunyuanVideo15Transformer3DModel
from vidax.parallel.mesh import make_mesh

CFG = HunyuanVideoTransformerConfig.from_config_dict(
    dict(
        in_channels=5,
        out_channels=7,
        num_attention_heads=4,
        attention_head_dim=18,
        num_layers=1,
        num_single_layers=1,
        num_refiner_layers=1,
        mlp_ratio=2.5,
        text_embed_dim=20,
        pooled_projection_dim=12,
        rope_axes_dim=[4, 6, 8],
        image_condition_type="token_replace",
    )
)


# HunyuanVideo 1.5: the same blocks over [video; conditioning], the conditioning reordered per item
# (image, glyph, text; valid first). Prompts of 5 and 3 text and 4 and 0 glyph tokens, image tokens
# on item 0 only (item 1 T2V); 45 video and 17 conditioning tokens do not divide by sequence=2 or 4.
CFG15 = HunyuanVideo15TransformerConfig.from_config_dict(
    dict(
        in_channels=5,
        out_channels=7,
        num_attention_heads=4,
        attention_head_dim=18,
        num_layers=2,
        num_refiner_layers=1,
        mlp_ratio=2.5,
        patch_size=2,
        text_embed_dim=20,
        text_embed_2_dim=14,
        image_embed_dim=12,
        rope_axes_dim=[4, 6, 8],
        use_meanflow=True,
    )
)


def _args():
    g = np.random.default_rng(0)
    mask = (np.arange(7)[None] < np.array([5, 3])[:, None]).astype(np.int32)
    return (
        jnp.asarray(g.standard_normal((2, 3, 6, 10, 5)), jnp.float32),
        jnp.asarray([37.5, 900.0]),
        jnp.asarray(g.standard_normal((2, 7, 20)), jnp.float32),
        jnp.asarray(mask),
        jnp.asarray(g.standard_normal((2, 12)), jnp.float32),
        jnp.asarray([6000.0, 3000.0]),
    )


def _args15():
    g = np.random.default_rng(1)
    mask = (np.arange(7)[None] < np.array([5, 3])[:, None]).astype(np.int32)
    mask_2 = (np.arange(6)[None] < np.array([4, 0])[:, None]).astype(np.int32)
    image = g.standard_normal((2, 4, 12)) * np.array([1.0, 0.0])[:, None, None]
    return (
        jnp.asarray(g.standard_normal((2, 3, 6, 10, 5)), jnp.float32),
        jnp.asarray([37.5, 900.0]),
        jnp.asarray(g.standard_normal((2, 7, 20)), jnp.float32),
        jnp.asarray(mask),
        jnp.asarray(g.standard_normal((2, 6, 14)), jnp.float32),
        jnp.asarray(mask_2),
        jnp.asarray(image, jnp.float32),
        jnp.asarray([20.0, 850.0]),
    )


MODELS = {
    "hunyuan_video": (HunyuanVideoTransformer3DModel, CFG, _args),
    "hunyuan_video15": (HunyuanVideo15Transformer3DModel, CFG15, _args15),
}


def _build(name, mesh):
    cls, cfg, _ = MODELS[name]
    model = cls(cfg, rngs=nnx.Rngs(0), mesh=mesh)
    for i, (_, var) in enumerate(nnx.to_flat_state(nnx.state(model))):  # every parameter random, none zero
        var.set_value(jax.random.normal(jax.random.PRNGKey(i), var.get_value().shape) * 0.3)
    return model


def _run(name, mesh):
    return np.asarray(nnx.jit(lambda m, *a: m(*a))(_build(name, mesh), *MODELS[name][2]()))


@pytest.fixture(scope="module")
def single():
    return {}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("sizes", [(2, 2, 2), (1, 1, 4)])
def test_mesh_equals_single_device(single, sizes, name):
    if len(jax.devices()) < int(np.prod(sizes)):
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py sets it)")
    if name not in single:
        single[name] = _run(name, None)
    want = single[name]
    got = _run(name, make_mesh(*sizes, devices=jax.devices()[: int(np.prod(sizes))]))
    # Same float32 arithmetic partitioned differently (reduction order): ~1e-6 relative.
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5
    assert np.abs(want).max() > 1e-3
