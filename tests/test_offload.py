"""Transformer blocks streamed from host memory (``vidax.parallel.offload``): the output equals the
resident run bit for bit (N = 1, 2, all; one device and the (2, 2, 2) mesh of 8 fake CPU
devices), the device never holds more than the non-block weights plus two chunks, and one
executable serves every chunk of a size."""

from __future__ import annotations

import gc
import json
import os
import shutil
import weakref

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from vidax.default_checkpoint import TRANSFORMER, random_module, write_tiny_wan_checkpoint
from vidax.errors import InputError
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.convert import transformer_key_rules
from vidax.models.wan.transformer import WanTransformer3DModel
from vidax.parallel.chunked_step import ChunkedStep, streamed_call
from vidax.parallel.offload import (
    OffloadConfig,
    host_memory_kind,
    offload_module,
    offloaded_blocks,
    offloaded_stacks,
    resolve_offload,
)
from vidax.weights import export_state_dict, save_safetensors
from vidax.weights.component import load_component

LAYERS = 5  # chunks of 2 leave a final chunk of 1
PROMPT, NEGATIVE = "a red car on a bridge", "blurry"
# 48x48 pixels, 9 frames -> latents (3, 6, 6) -> 27 tokens: the sequence axis (2) pads them to 28.
CALL = dict(
    height=48,
    width=48,
    num_frames=9,
    num_inference_steps=2,
    guidance_scale=4.0,
    max_sequence_length=16,
    seed=3,
    output_type="latent",
    progress=False,
)
MESHES = [None, (2, 2, 2)]


def write_offload_checkpoint(path: str, seed: int = 0) -> str:
    """The embedded tiny Wan2.1 pipeline with a 5-layer transformer whose every tensor is random
    and non-zero (biases, norm weights and modulation tables included), so each layer changes
    the output differently and a skipped, repeated or reordered chunk shows."""
    write_tiny_wan_checkpoint(path, seed=seed)
    config = dict(TRANSFORMER, num_layers=LAYERS)
    cfg = WanTransformerConfig.from_config_dict(config)
    rng = np.random.default_rng(seed + 7)
    module = random_module(lambda: WanTransformer3DModel(cfg, rngs=nnx.Rngs(0)), rng)
    tensors = {}
    for key, value in export_state_dict(module, transformer_key_rules(cfg)).items():
        if value.ndim == 1 or "scale_shift_table" in key:
            base = 1.0 if key.endswith(("norm_q.weight", "norm_k.weight", "norm2.weight")) else 0.0
            value = base + 0.3 * rng.standard_normal(value.shape)
        tensors[key] = np.asarray(value, np.float32)
    folder = os.path.join(path, "transformer")
    shutil.rmtree(folder)
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    save_safetensors(tensors, os.path.join(folder, "diffusion_pytorch_model.safetensors"))
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_offload_checkpoint(str(tmp_path_factory.mktemp("offload")))


def _per_device_bytes(arrays) -> int:
    """Largest per-device total of the device-memory buffers of ``arrays`` (each buffer once)."""
    kind = jax.local_devices()[0].default_memory().kind
    buffers = {}
    for a in arrays:
        if a.sharding.memory_kind == kind:
            for s in a.addressable_shards:
                buffers[(s.device, s.data.unsafe_buffer_pointer())] = s.data.nbytes
    per_device = {}
    for (device, _), n in buffers.items():
        per_device[device] = per_device.get(device, 0) + n
    return max(per_device.values(), default=0)


@pytest.fixture(scope="module")
def reference(ckpt):
    """Per mesh: the resident run's latents and the per-device bytes of its transformer."""
    cache = {}

    def get(mesh):
        if mesh not in cache:
            pipe = vidax.load_pipeline(ckpt, mesh=mesh)
            ref = pipe(PROMPT, NEGATIVE, **CALL).frames
            # Not vacuous: the result depends on the prompt, and is far from zero.
            other = pipe("a dog", NEGATIVE, **CALL).frames
            assert np.abs(other - ref).max() > 1e-2 and np.abs(ref).max() > 1.0
            cache[mesh] = ref, _per_device_bytes(jax.tree.leaves(nnx.state(pipe.transformer)))
        return cache[mesh]

    return get


def _compiled_chunk_sizes(pipe) -> set:
    """Chunk sizes compiled for the (single) streamed stack."""
    (step,) = pipe.denoiser.step_fns.values()
    return {size for _, (chunks,), _, _ in step._shared["compiled"].values() for size in chunks}


class WeightMeter:
    """Live-array accounting of a streamed transformer while it samples: after every chunk is
    dispatched, the per-device bytes of its resident (non-block) arrays plus every fetched
    chunk array still alive."""

    def __init__(self, model, monkeypatch):
        self.blocks = offloaded_blocks(model)
        self.rest = [a for a in jax.tree.leaves(nnx.state(model)) if isinstance(a, jax.Array)]
        self.rest_bytes = _per_device_bytes(self.rest)
        self.fetched, self.chunk_bytes, self.seen = [], [], []
        fetch, run = self.blocks.fetch, self.blocks.run

        def recording_fetch(i):
            state = fetch(i)
            leaves = jax.tree.leaves(state)
            self.chunk_bytes.append(_per_device_bytes(leaves))
            self.fetched.extend(weakref.ref(a) for a in leaves)
            return state

        monkeypatch.setattr(self.blocks, "fetch", recording_fetch)
        monkeypatch.setattr(self.blocks, "run", lambda compute, x, on_chunk=None: run(compute, x, self.measure))

    def measure(self):
        gc.collect()
        alive = [a for a in (r() for r in self.fetched) if a is not None and not a.is_deleted()]
        self.seen.append(_per_device_bytes(self.rest + alive))


@pytest.mark.parametrize("mesh", MESHES, ids=["one-device", "dp2-tp2-sp2"])
@pytest.mark.parametrize("chunk", [2, "all"])  # 2: two chunk sizes (5 = 2 + 2 + 1), "all": one
def test_offloaded_equals_resident(ckpt, reference, mesh, chunk, monkeypatch):
    """Bit-exact output, and the device-memory bound measured while sampling: the transformer
    weights on the device never exceed its non-block weights + 2 chunks per device, and reach
    that (chunk i+1 is already placed while chunk i computes), while the resident model holds
    all 5 layers."""
    off = OffloadConfig(chunk=chunk, keep_text_encoder=False, keep_vae=False)
    pipe = vidax.load_pipeline(ckpt, mesh=mesh, offload=off)
    blocks = offloaded_blocks(pipe.transformer)
    expected = {2: [2, 2, 1], "all": [5]}[chunk]
    assert blocks.sizes == expected
    assert blocks.memory_kind == "pinned_host"  # the CPU backend has it, as GPU and TPU do
    # No block parameter is on the device: the model holds placeholders, the chunks wait in host memory.
    assert all(isinstance(v, jax.ShapeDtypeStruct) for v in jax.tree.leaves(nnx.state(pipe.transformer.blocks)))
    chunk0 = jax.tree.leaves(blocks._chunks[0])
    assert {a.sharding.memory_kind for a in chunk0} == {"pinned_host"}
    if mesh is not None:  # each chunk keeps the tensor-parallel split of its parameter
        assert any(any(e is not None for e in a.sharding.spec) for a in chunk0)

    meter = WeightMeter(pipe.transformer, monkeypatch)
    out = pipe(PROMPT, NEGATIVE, **CALL).frames
    ref, resident_bytes = reference(mesh)
    # Bit-exact: the same per-layer computations, only cut at other jit boundaries (measured 0.0
    # on CPU, one device and mesh alike).
    np.testing.assert_array_equal(out, ref)
    assert _compiled_chunk_sizes(pipe) == set(expected)  # one executable per chunk size

    assert len(meter.seen) == CALL["num_inference_steps"] * len(expected)
    bound = meter.rest_bytes + 2 * max(meter.chunk_bytes)
    print(
        f"mesh {mesh}, chunk {chunk}: per device non-block {meter.rest_bytes} B, chunks "
        f"{sorted(set(meter.chunk_bytes))} B, weights on the device after each chunk {meter.seen}, "
        f"resident model {resident_bytes} B"
    )
    assert max(meter.seen) <= bound
    if len(expected) > 1:
        assert max(meter.seen) == bound  # double buffering
        assert resident_bytes > bound
    else:
        assert max(meter.seen) == resident_bytes == meter.rest_bytes + meter.chunk_bytes[0]


def test_streamed_steps_keep_a_bounded_compile_cache_of_their_own(ckpt):
    """A streamed step keeps at most ``compiled_shapes`` argument shapes compiled, the least
    recently used dropped first, through a long run of distinct sizes (a ``vidax serve``); the
    compiled pieces are the step's own: another streamed transformer's (its ``streamed_call``)
    is neither shared nor evicted, and runs again without compiling."""
    path = os.path.join(ckpt, "transformer")
    t = np.array([500.0], np.float32)
    ctx = jax.random.normal(jax.random.PRNGKey(1), (1, 7, 64))

    def x(width):
        return jax.random.normal(jax.random.PRNGKey(0), (1, 3, 6, width, 16))

    first = load_component("WanTransformer3DModel", path, offload=2)
    out = np.asarray(streamed_call(first, x(8), t, ctx))
    kept = offloaded_blocks(first).call_step._shared["compiled"]
    (entry,) = kept.values()
    second = load_component("WanTransformer3DModel", path, offload=2)
    graphdef, params = nnx.split(second)
    step = ChunkedStep(
        graphdef,
        offloaded_stacks(second),
        lambda latents, state, *args: args,
        lambda out, latents, state, *args: (out, None),
        compiled_shapes=2,
    )
    compiled = step._shared["compiled"]
    for width in (4, 6, 4, 8):  # 4 used again before 8 comes: 6 is the one dropped
        step.compile_for(params, None, None, x(width), t, ctx)
        assert len(compiled) <= 2
    assert [k[1][-3][0] for k, _ in compiled.items()] == [(1, 3, 6, 4, 16), (1, 3, 6, 8, 16)]
    assert offloaded_blocks(second).call_step is None
    assert kept.values() == [entry]  # the first transformer's: not evicted
    np.testing.assert_array_equal(np.asarray(streamed_call(first, x(8), t, ctx)), out)
    assert kept.values() == [entry]  # run again without compiling
    with pytest.raises(InputError, match=r"^compiled_shapes=0: keep at least 1 compiled shape"):
        ChunkedStep(graphdef, offloaded_stacks(second), None, None, compiled_shapes=0)


def test_streamed_transformer(ckpt):
    """Streamed load, offloading a loaded module, and plain numpy host arrays all equal the
    resident transformer; and the check can fail: chunks streamed in another order differ."""
    path = os.path.join(ckpt, "transformer")
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 6, 8, 16))
    t = np.array([500.0, 300.0], np.float32)
    ctx = jax.random.normal(jax.random.PRNGKey(1), (2, 7, 64))
    ref = np.asarray(jax.jit(lambda m, *a: m(*a))(load_component("WanTransformer3DModel", path), x, t, ctx))
    streamed = load_component("WanTransformer3DModel", path, offload=2)
    np.testing.assert_array_equal(np.asarray(streamed_call(streamed, x, t, ctx)), ref)
    moved = offload_module(load_component("WanTransformer3DModel", path), 2)
    np.testing.assert_array_equal(np.asarray(streamed_call(moved, x, t, ctx)), ref)
    plain = load_component("WanTransformer3DModel", path, offload=OffloadConfig(chunk=2, memory_kind="numpy"))
    blocks = offloaded_blocks(plain)
    assert blocks.memory_kind is None and all(isinstance(a, np.ndarray) for a in blocks._chunks[0])
    np.testing.assert_array_equal(np.asarray(streamed_call(plain, x, t, ctx)), ref)
    blocks._chunks[0], blocks._chunks[1] = blocks._chunks[1], blocks._chunks[0]
    assert np.abs(np.asarray(streamed_call(plain, x, t, ctx)) - ref).max() > 1e-2


def test_two_experts_streamed(tmp_path):
    """Wan2.2 A14B: both experts stream their blocks; the inactive expert's resident weights
    still wait in host memory, and the result equals the resident run."""
    from tests.parity.wan_reference import write_tiny_wan_variant

    path = write_tiny_wan_variant(str(tmp_path / "a14b"), boundary_ratio=0.875)
    small = dict(
        height=32,
        width=48,
        num_frames=5,
        max_sequence_length=16,
        guidance_scale=3.0,
        num_inference_steps=4,
        seed=0,
        output_type="latent",
        progress=False,
    )
    ref = vidax.load_pipeline(path)("a cat", **small).frames
    pipe = vidax.load_pipeline(path, offload=1)
    seen = []
    out = pipe(
        "a cat",
        callback=lambda i, n: seen.append((pipe.experts.active, pipe.experts.memory_kind(1 - pipe.experts.active))),
        **small,
    ).frames
    np.testing.assert_array_equal(out, ref)
    assert [s[0] for s in seen] == [0, 0, 1, 1] and {s[1] for s in seen} == {"pinned_host"}
    assert all(offloaded_blocks(m) is not None for m in (pipe.transformer, pipe.transformer_2))


def test_bad_offload_settings():
    for kwargs, match in [
        (dict(chunk=0), r"offload chunk=0 must be a positive int"),
        (dict(chunk=True), r"offload chunk=True must be a positive int"),
        (dict(chunk="half"), r"offload chunk='half' must be a positive int"),
        (dict(keep_vae="yes"), r"offload keep_vae='yes' must be True, False or None"),
        (dict(memory_kind="gpu"), r"offload memory_kind='gpu' must be one of"),
    ]:
        with pytest.raises(InputError, match=match):
            OffloadConfig(**kwargs)
    for bad, match in [(2.5, "offload=2.5 is not valid"), ({"chunks": 2}, r"unknown keys \['chunks'\]")]:
        with pytest.raises(InputError, match=match):
            resolve_offload(bad)
    assert resolve_offload(3) == OffloadConfig(chunk=3)
    assert resolve_offload({"chunk": "all", "keep_vae": True}) == OffloadConfig(chunk="all", keep_vae=True)
    assert OffloadConfig(chunk=8).layers_per_chunk(5) == 5 and OffloadConfig(chunk="all").layers_per_chunk(30) == 30
    assert host_memory_kind("auto") == "pinned_host" and host_memory_kind("numpy") is None
    with pytest.raises(InputError, match="memory_kind='device'"):
        host_memory_kind("device")


def test_cancel_stops_a_streamed_step_between_chunks(ckpt):
    """With the blocks streamed one per chunk, ``cancel`` is asked after each chunk: set during
    step 2 after its second chunk, the call stops there (step 1 done) instead of running the
    step's other 3 chunks and only then stopping before step 3."""
    from vidax.errors import Cancelled

    pipe = vidax.load_pipeline(ckpt, offload=OffloadConfig(chunk=1, memory_kind="numpy"))
    steps, asked = [], []

    def cancel():
        if steps:  # in step 2: asked before it, then after each chunk
            asked.append(1)
        return len(asked) >= 3

    with pytest.raises(Cancelled, match=r"^cancelled after denoising step 1 of 3$"):
        pipe(
            PROMPT, NEGATIVE, **{**CALL, "num_inference_steps": 3}, callback=lambda i, n: steps.append(i), cancel=cancel
        )
    assert steps == [0] and len(asked) == 3


def test_bf16_chunks_enter_the_chunk_jit_as_bits_bit_identically(ckpt, monkeypatch):
    """On CPU the streamed bf16 chunks are fetched as uint16 views of their host buffers
    (vidax.nn.kernels.stacks.stack_bits_putter: no copy at the fetch, and the chunk jit holds no
    whole-chunk bitcast copy, which it does when the chunks arrive as bf16); the output is bit
    for bit that of the chunks fetched as bf16 (pinned_host and numpy host chunks alike)."""
    import re

    import jax.numpy as jnp

    import vidax.parallel.offload as offload
    from vidax.nn.kernels import StackBits

    path = os.path.join(ckpt, "transformer")
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 6, 8, 16)).astype(jnp.bfloat16)
    t = np.array([500.0, 300.0], np.float32)
    ctx = jax.random.normal(jax.random.PRNGKey(1), (2, 7, 64)).astype(jnp.bfloat16)

    def run(**kw):
        offload_to = OffloadConfig(chunk="all", **kw)
        model = load_component("WanTransformer3DModel", path, dtype=jnp.bfloat16, offload=offload_to)
        blocks = offloaded_blocks(model)
        out = np.asarray(streamed_call(model, x, t, ctx), np.float32)
        compiled = blocks.call_step._shared["compiled"]
        ((_, (chunks,), _, _),) = [v for k, v in compiled.items() if k[2] == (blocks.signature,)]
        # XLA:CPU's whole-chunk copies: a bitcast to uint16 of a (5, ...) chunk parameter (one
        # chunk of all the layers: one chunk executable to compile per run)
        copies = [
            ln
            for fn in chunks.values()
            for ln in fn.as_text().splitlines()
            if re.search(r"wrapped_bitcast-convert\S* = u16\[5,", ln)
        ]
        return blocks, out, copies

    blocks, bits_out, bits_copies = run()
    chunk = blocks.fetch(0)
    leaves = jax.tree.leaves(chunk, is_leaf=lambda a: isinstance(a, StackBits))
    host = jax.tree.leaves(blocks._chunks[0])
    # every bf16 leaf (float32 ones, e.g. the modulation table, stay arrays), on its host buffer
    assert [isinstance(a, StackBits) for a in leaves] == [a.dtype == jnp.bfloat16 for a in host]
    assert any(isinstance(a, StackBits) for a in leaves)
    assert all(
        a.bits.unsafe_buffer_pointer() == h.unsafe_buffer_pointer()
        for a, h in zip(leaves, host)
        if isinstance(a, StackBits)
    )
    _, numpy_out, _ = run(memory_kind="numpy")
    monkeypatch.setattr(offload, "stack_bits_putter", lambda dtype, sharding: None)
    _, bf16_out, bf16_copies = run()
    assert bf16_copies, "the bf16 chunk is no longer copied: this check sees nothing"
    assert not bits_copies, bits_copies
    np.testing.assert_array_equal(bits_out, bf16_out)
    np.testing.assert_array_equal(numpy_out, bf16_out)
