"""The diffusion-forcing schedule (:mod:`vidax.models.skyreels_v2.forcing`) against
``diffusers.SkyReelsV2DiffusionForcingPipeline``'s own functions: the timestep matrix, the chunks of
a long video (its ``prepare_latents``), and one UniPC scheduler per latent frame stepped where the
update mask says (its denoising loop's update)."""

from __future__ import annotations

import copy
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.paths import REFERENCE_CONFIGS
from vidax.errors import InputError
from vidax.models.skyreels_v2.forcing import chunk_plan, per_frame_step, timestep_matrix
from vidax.schedulers.unipc import UniPCMultistepScheduler

diffusers = pytest.importorskip("diffusers")
REF = diffusers.SkyReelsV2DiffusionForcingPipeline
SCHEDULER = f"{REFERENCE_CONFIGS}/Skywork__SkyReels-V2-DF-1.3B-540P-Diffusers/scheduler/scheduler_config.json"


@pytest.mark.parametrize(
    "frames, base, ar_step, pre, block",
    [(6, 6, 0, 0, 1), (6, 6, 2, 0, 2), (9, 9, 3, 0, 3), (8, 8, 1, 3, 1), (8, 8, 2, 4, 2)],
    ids=["sync", "async", "async_blocks_of_3", "prefix", "prefix_async"],
)
def test_timestep_matrix_is_the_reference(frames, base, ar_step, pre, block):
    template = torch.tensor([999, 900, 700, 400, 100])
    want = REF.generate_timestep_matrix(None, frames, template, base, ar_step, pre, block)
    got = timestep_matrix(frames, template.numpy(), base, ar_step, pre, block)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(g, w.numpy())
    assert got[3] == [tuple(int(v) for v in iv) for iv in want[3]]


def test_timestep_matrix_refuses_a_small_ar_step_by_name():
    with pytest.raises(ValueError, match="at least 3"):
        REF.generate_timestep_matrix(None, 8, torch.arange(5), 4, 1, 0, 2)
    with pytest.raises(InputError, match=r"ar_step=1 must be at least 3 for 5 steps over 2 causal blocks"):
        timestep_matrix(8, np.arange(5), 4, 1, 0, 2)


@pytest.mark.parametrize(
    "num_frames, base, overlap, block",
    [(57, 25, 9, 1), (61, 25, 13, 2), (41, 25, 17, 1), (21, 25, 9, 1)],
    ids=["three_chunks", "prefix_trimmed_to_blocks", "short_last_chunk", "short_video"],
)
def test_chunks_are_the_references(num_frames, base, overlap, block):
    """The reference's long-video loop run on its own ``prepare_latents``: the chunks' lengths,
    prefixes and where their new frames go."""
    fake = types.SimpleNamespace(vae_scale_factor_temporal=4, vae_scale_factor_spatial=8)
    lat = lambda n: (num_frames - 1) // 4 + 1 if n is None else (n - 1) // 4 + 1  # noqa: E731
    long = num_frames > base
    base_lat = lat(base)
    n_iter = 1 + (lat(None) - base_lat - 1) // (base_lat - lat(overlap)) + 1 if long else 1
    acc, want = None, []
    for k in range(n_iter):
        _, n, prefix, pre = REF.prepare_latents(
            fake, 1, 1, 16, 16, num_frames, torch.float32, "cpu", None, None,
            base_latent_num_frames=base_lat if long else None, video_latents=acc, causal_block_size=block,
            overlap_history_latent_frames=lat(overlap) if long else None, long_video_iter=k if long else None,
        )  # fmt: skip
        want.append((n, pre, 0 if acc is None else lat(overlap)))
        chunk = torch.arange(n, dtype=torch.float32).view(1, 1, n, 1, 1).expand(1, 1, n, 2, 2)
        acc = chunk if acc is None else torch.cat([acc, chunk[:, :, lat(overlap) :]], dim=2)
    got = chunk_plan(num_frames, base, overlap if long else None, 4, block)
    assert [(c.num_latent_frames, c.prefix, c.overlap) for c in got] == want
    # Every chunk's frames from its overlap on make the reference's video.
    assert sum(c.num_latent_frames - c.overlap for c in got) == acc.shape[2]


def test_one_unipc_per_frame_as_the_reference():
    """An asynchronous schedule (3 frames, blocks of 1, ar_step 1, 4 steps): each frame's own
    UniPC (the reference deep-copies one per frame) stepped only when its mask is set."""
    config = json.load(open(SCHEDULER))
    ref_sched = diffusers.UniPCMultistepScheduler.from_config(config)
    ref_sched.set_timesteps(4)
    f, shape = 3, (1, 2, 3, 4, 5)  # (B, C, F, H, W)
    refs = []
    for _ in range(f):
        s = copy.deepcopy(ref_sched)
        s.set_timesteps(4)
        refs.append(s)
    matrix, _, update, _ = timestep_matrix(f, ref_sched.timesteps.numpy(), f, 1, 0, 1)
    assert update.shape[0] > 4 and not update.all()  # staggered: a real test of the masks
    sched = UniPCMultistepScheduler.from_config(config)
    ours_shape = (1, f, 4, 5, 2)  # channels-last (B, F, H, W, C)
    state = sched.set_timesteps(4, sample_shape=ours_shape)
    state = state.__class__(**{**state.__dict__, "step_index": jnp.zeros((f,), jnp.int32)})
    step = jax.jit(lambda st, m, x, u: per_frame_step(sched.step, st, m, x, u))
    g = np.random.default_rng(0)
    x_ref = torch.from_numpy(g.standard_normal(shape).astype(np.float32))
    x = jnp.asarray(x_ref.numpy().transpose(0, 2, 3, 4, 1))
    for i, t in enumerate(matrix):
        v = g.standard_normal(shape).astype(np.float32)
        for idx in range(f):
            if update[i, idx]:
                x_ref[:, :, idx] = refs[idx].step(torch.from_numpy(v[:, :, idx]), int(t[idx]), x_ref[:, :, idx])[0]
        x, state = step(state, jnp.asarray(v.transpose(0, 2, 3, 4, 1)), x, jnp.asarray(update[i]))
    want = x_ref.numpy().transpose(0, 2, 3, 4, 1)
    np.testing.assert_allclose(np.asarray(x), want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(np.asarray(state.step_index), [4] * f)
