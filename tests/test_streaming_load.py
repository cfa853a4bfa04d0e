"""Streaming load: a ~1 GB checkpoint in 4 shards is read one tensor at a time from the
memory-mapped files into its final placement, so the loading process's host RSS grows by less
than 1.3x the component (on CPU the device is host memory, so the loaded parameters themselves
count: the bound says no second copy of the checkpoint is ever held). Measured in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx

from vidax.default_checkpoint import TRANSFORMER
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.convert import transformer_key_rules
from vidax.models.wan.transformer import WanTransformer3DModel
from vidax.weights import save_safetensors
from vidax.weights.loader import _KERNEL_PERM, abstract_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 14 layers of width 1024 (FFN 4096): 935 MiB of float32 parameters.
CONFIG = dict(
    TRANSFORMER, num_attention_heads=8, attention_head_dim=128, ffn_dim=4096, num_layers=14, text_dim=1024, freq_dim=256
)
SHARDS = 4
BOUND = 1.3

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")


def _source_shapes(cfg: WanTransformerConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint key -> shape in the diffusers layout, from the abstract model (no weights)."""
    rules = transformer_key_rules(cfg)
    _, flat = abstract_params(lambda: WanTransformer3DModel(cfg, rngs=nnx.Rngs(0)))
    out = {}
    for path, var in flat.items():
        shape = var.get_value().shape
        stacked = path[0] == "blocks"
        layer = shape[1:] if stacked else shape
        if path[-1] == "kernel" and len(layer) in _KERNEL_PERM:
            layer = tuple(layer[i] for i in np.argsort(_KERNEL_PERM[len(layer)]))
        for i in range(shape[0]) if stacked else [None]:
            out[rules.join(path, i)] = tuple(layer)
    return out


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory) -> tuple[str, int]:
    """A Wan transformer folder of ~1 GB in 4 shards + index (constant values: only sizes matter)."""
    path = str(tmp_path_factory.mktemp("big_transformer"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    shapes = _source_shapes(WanTransformerConfig.from_config_dict(CONFIG))
    total = sum(int(np.prod(s)) * 4 for s in shapes.values())
    keys, weight_map = sorted(shapes), {}
    for i in range(SHARDS):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        part = keys[i::SHARDS]
        save_safetensors(((k, np.full(shapes[k], 0.01, np.float32)) for k in part), os.path.join(path, name))
        weight_map.update({k: name for k in part})
    with open(os.path.join(path, "diffusion_pytorch_model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    yield path, total
    shutil.rmtree(path, ignore_errors=True)  # 1 GB: not left for pytest's tmp retention


_CHILD = r"""
import json, os, sys
import jax, jax.numpy as jnp
from flax import nnx
from vidax.parallel.offload import offloaded_blocks
from vidax.stats import host_peak_rss_bytes
from vidax.weights.component import load_component
from vidax.weights.safetensors_io import CheckpointReader

path, mode = sys.argv[1], sys.argv[2]
if mode == "no-release":  # the loader without dropping each tensor's pages once placed
    CheckpointReader.release = lambda self, key: None
jnp.zeros(1).block_until_ready()
base = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
model = load_component("WanTransformer3DModel", path, offload=2 if mode == "offload" else None)
peak = host_peak_rss_bytes()  # VmHWM: ru_maxrss would carry the (large) parent's peak over exec
kinds = sorted({a.sharding.memory_kind for a in jax.tree.leaves(nnx.state(model)) if isinstance(a, jax.Array)})
blocks = offloaded_blocks(model)
host = sorted({a.sharding.memory_kind for a in jax.tree.leaves(blocks._chunks)}) if blocks else []
print("RESULT " + json.dumps({"growth": peak - base, "kinds": kinds, "host": host}))
"""


def _load_in_subprocess(path: str, mode: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, path, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT])),
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    return json.loads(lines[0][len("RESULT ") :])


@pytest.mark.parametrize("mode", ["resident", "offload"])
def test_load_rss_stays_near_the_component(big_checkpoint, mode):
    path, total = big_checkpoint
    result = _load_in_subprocess(path, mode)
    ratio = result["growth"] / total
    print(
        f"{mode}: checkpoint {total / 2**20:.0f} MiB, peak RSS growth {result['growth'] / 2**20:.0f} MiB ({ratio:.2f}x)"
    )
    assert ratio < BOUND
    assert result["kinds"] == ["device"]  # the resident parameters are on the device
    assert result["host"] == (["pinned_host"] if mode == "offload" else [])  # blocks straight to host memory


def test_rss_check_can_fail(big_checkpoint):
    """Keeping every read tensor's pages mapped doubles the growth: the bound above is tight
    enough to see it."""
    path, total = big_checkpoint
    result = _load_in_subprocess(path, "no-release")
    print(f"no-release: peak RSS growth {result['growth'] / total:.2f}x the checkpoint")
    assert result["growth"] / total > 1.6
