"""The HunyuanVideo transformer on a mesh of fake CPU devices equals the single-device model:
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
from vidax.parallel.mesh import make_mesh

CFG = HunyuanVideoTransformerConfig.from_config_dict(dict(
    in_channels=5, out_channels=7, num_attention_heads=4, attention_head_dim=18, num_layers=1,
    num_single_layers=1, num_refiner_layers=1, mlp_ratio=2.5, text_embed_dim=20, pooled_projection_dim=12,
    rope_axes_dim=[4, 6, 8], image_condition_type="token_replace"))


def _build(mesh):
    model = HunyuanVideoTransformer3DModel(CFG, rngs=nnx.Rngs(0), mesh=mesh)
    for i, (_, var) in enumerate(nnx.to_flat_state(nnx.state(model))):  # every parameter random, none zero
        var.set_value(jax.random.normal(jax.random.PRNGKey(i), var.get_value().shape) * 0.3)
    return model


def _args():
    g = np.random.default_rng(0)
    mask = (np.arange(7)[None] < np.array([5, 3])[:, None]).astype(np.int32)
    return (jnp.asarray(g.standard_normal((2, 3, 6, 10, 5)), jnp.float32), jnp.asarray([37.5, 900.0]),
            jnp.asarray(g.standard_normal((2, 7, 20)), jnp.float32), jnp.asarray(mask),
            jnp.asarray(g.standard_normal((2, 12)), jnp.float32), jnp.asarray([6000.0, 3000.0]))


@pytest.fixture(scope="module")
def single():
    return np.asarray(nnx.jit(lambda m, *a: m(*a))(_build(None), *_args()))


@pytest.mark.parametrize("sizes", [(2, 2, 2), (1, 1, 4)])
def test_mesh_equals_single_device(single, sizes):
    if len(jax.devices()) < int(np.prod(sizes)):
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py sets it)")
    mesh = make_mesh(*sizes, devices=jax.devices()[: int(np.prod(sizes))])
    got = np.asarray(nnx.jit(lambda m, *a: m(*a))(_build(mesh), *_args()))
    # Same float32 arithmetic partitioned differently (reduction order): ~1e-6 relative.
    assert np.abs(got - single).max() / np.abs(single).max() < 1e-5
    assert np.abs(single).max() > 1e-3
