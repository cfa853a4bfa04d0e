"""What vidax runs on top of a pipeline, on the SkyReels-V2 diffusion-forcing line (a long video of
two chunks on the tiny DF checkpoint, tests/conftest.py's ``skyreels_df``): the mesh and blocks streamed
from host memory equal the resident run, a LoRA merges and unloads, a step cache runs per chunk.
``vidax serve`` on the line: tests/test_long_video.py (its chunk events)."""

from __future__ import annotations

import numpy as np
import pytest

import vidax
from tests.test_long_video import CALL

LONG = dict(CALL, num_frames=13)  # two chunks


@pytest.fixture(scope="module")
def resident(skyreels_df_pipe):
    return skyreels_df_pipe, skyreels_df_pipe("a cat", **LONG).frames


@pytest.mark.parametrize("layout", ["mesh", "streamed"])
def test_mesh_and_streamed_blocks_equal_the_resident_run(skyreels_df, resident, layout):
    """A (2, 2, 2) mesh of the 8 fake CPU devices, or the blocks streamed one at a time from host
    memory: the resident video (float32 summation order: 1e-5)."""
    options = dict(mesh=(2, 2, 2)) if layout == "mesh" else dict(offload=1)
    got = vidax.load_pipeline(skyreels_df, dtype="float32", **options)("a cat", **LONG).frames
    np.testing.assert_allclose(got, resident[1], atol=1e-5)


def test_lora_merges_and_unloads(resident, tmp_path):
    """A diffusers-layout LoRA on one projection changes the video; unloading restores it bit for bit."""
    from safetensors.numpy import save_file

    pipe, base = resident
    rng = np.random.default_rng(0)
    dim = pipe.transformer.blocks.attn1.to_q.kernel.get_value().shape[-1]
    save_file(
        {
            "transformer.blocks.0.attn1.to_q.lora_A.weight": rng.normal(size=(4, dim)).astype(np.float32),
            "transformer.blocks.0.attn1.to_q.lora_B.weight": rng.normal(size=(dim, 4)).astype(np.float32),
        },
        str(tmp_path / "lora.safetensors"),
    )
    pipe.load_lora_weights(str(tmp_path / "lora.safetensors"))
    try:
        assert np.abs(pipe("a cat", **LONG).frames - base).max() > 1e-2
    finally:
        pipe.unload_lora_weights()
    np.testing.assert_array_equal(pipe("a cat", **LONG).frames, base)


def test_first_block_cache_runs_on_every_chunk(resident):
    """First-Block Cache (a threshold that reuses every step it may) on the chunked loop: each
    chunk starts a fresh cache state, so steps are skipped in both chunks and the video differs."""
    from vidax.pipelines.cache_configs import FirstBlockCacheConfig

    pipe, base = resident
    pipe.enable_cache(FirstBlockCacheConfig(threshold=1e9))
    try:
        out = pipe("a cat", **LONG)
    finally:
        pipe.disable_cache()
    report = out.stats.cache
    print(report.describe(), report.patterns)
    # per chunk: the first step computed (a fresh state), the next skipped
    assert report.patterns == {"all": "CSCS"} and np.abs(out.frames - base).max() > 1e-3
