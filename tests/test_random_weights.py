"""Random weights made on the device from the configs (``load_pipeline(..., random_weights=True)``,
``vidax generate --random-weights``, :mod:`vidax.weights.random_weights`).

The folder here is the embedded tiny checkpoint's configs alone (no safetensors, an empty
tokenizer folder); a reference configuration scaled down runs end to end in
``tests/test_tpu_benchmarks.py`` (``tpu_e2e.py --tiny``)."""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax.checkpoint import Checkpoint
from vidax.errors import InputError
from vidax.parallel.offload import offloaded_stacks
from vidax.pipelines.memory import checkpoint_weight_bytes
from vidax.pipelines.staging import component_bytes
from vidax.pipelines.weight_formats import with_random_weights
from vidax.registry import registry
from vidax.weights.component import plan_component
from vidax.weights.random_weights import ConfigReader, random_array


@pytest.fixture(scope="module")
def configs_only(ckpt, tmp_path_factory) -> str:
    """The embedded checkpoint's model_index.json and component configs, no weights, no tokenizer."""
    out = str(tmp_path_factory.mktemp("configs_only"))
    for name in os.listdir(ckpt):
        src = os.path.join(ckpt, name)
        if os.path.isdir(src):
            os.makedirs(os.path.join(out, name))
            if name == "tokenizer":
                continue
            for f in os.listdir(src):
                if f.endswith(".json"):
                    shutil.copy(os.path.join(src, f), os.path.join(out, name, f))
        elif name.endswith(".json"):
            shutil.copy(src, out)
    return out


def test_a_configs_only_folder_loads_and_encodes(configs_only):
    """No file but configs: every weight made from them (finite), the tokenizer the stand-in,
    a finite prompt encoding (a whole video from random weights: ``tpu_e2e.py --tiny`` in
    tests/test_tpu_benchmarks.py)."""
    import vidax

    assert not any(f.endswith(".safetensors") for _, _, fs in os.walk(configs_only) for f in fs)
    pipe = vidax.load_pipeline(configs_only, random_weights=True, progress=False)
    assert pipe.tokenizer.path.endswith("random-weights-stand-in-2")
    for leaf in jax.tree.leaves(nnx.state(pipe.transformer)):
        assert np.isfinite(np.asarray(leaf, np.float32)).all()
    embeds = np.asarray(pipe.hooks.encode_text(["a cat"], 8))
    assert embeds.shape[:2] == (1, 8) and np.isfinite(embeds).all() and embeds.std() > 0


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_memory_plan_counts_the_same_bytes_as_the_files(ckpt, configs_only, dtype):
    """The weights the memory estimate and the staging count: from the configs as from the
    safetensors headers, component by component."""
    files, random = Checkpoint.open(ckpt), with_random_weights(Checkpoint.open(configs_only))
    assert checkpoint_weight_bytes(random, dtype) == checkpoint_weight_bytes(files, dtype) > 0
    for name in ("transformer", "text_encoder", "vae"):
        spec = registry().component(files.class_of(name))
        reader = ConfigReader(spec, files.typed_config(name, spec.config_class()))
        from_files = component_bytes(os.path.join(ckpt, name), dtype, spec.block_stacks)
        assert component_bytes(reader, dtype, spec.block_stacks) == from_files, name


def test_streamed_blocks_hold_the_rows_of_the_resident_stack(configs_only):
    """Streamed (``offload=1``: one block a host chunk) and resident random weights are the same
    values, made where each placement puts them."""
    folder = os.path.join(configs_only, "transformer")
    spec = registry().component(Checkpoint.open(configs_only).class_of("transformer"))
    resident = plan_component(spec, folder, jnp.bfloat16, random_weights=True).read()
    streamed = plan_component(spec, folder, jnp.bfloat16, random_weights=True, offload=1).read()
    (stack,) = offloaded_stacks(streamed)
    assert len(stack.sizes) == stack.num_layers > 1
    kind = stack.chunk_leaf(0, ("attn1", "to_q", "kernel")).sharding.memory_kind
    assert kind == "pinned_host"
    whole = np.asarray(resident.blocks.attn1.to_q.kernel.get_value())
    chunks = [np.asarray(stack.chunk_leaf(i, ("attn1", "to_q", "kernel"))) for i in range(len(stack.sizes))]
    np.testing.assert_array_equal(np.concatenate(chunks), whole)
    assert whole.dtype == jnp.bfloat16 and np.isfinite(whole.astype(np.float32)).all()


def test_a_streamed_text_encoder_is_made_at_each_fetch_with_the_resident_values(configs_only):
    """A random-weights text encoder whose layers stream holds none of them (each chunk made on
    the device when fetched, no host copy) and encodes as the resident one (the same values)."""
    from vidax.encoders.t5 import encode_tokens
    from vidax.encoders.tokenizer import Tokens

    folder = os.path.join(configs_only, "text_encoder")
    spec = registry().component(Checkpoint.open(configs_only).class_of("text_encoder"))
    resident = plan_component(spec, folder, jnp.float32, random_weights=True).read()
    streamed = plan_component(spec, folder, jnp.float32, random_weights=True, offload=1).read()
    (stack,) = offloaded_stacks(streamed)
    assert stack.memory_kind == "made" and len(stack.sizes) > 1
    assert "streamed from the device (made at each fetch: random weights)" in stack.describe()
    ids = np.arange(1, 9, dtype=np.int32)[None]
    tokens = Tokens(ids, np.ones_like(ids), np.array([8]))
    want = np.asarray(encode_tokens(resident, tokens))
    np.testing.assert_allclose(np.asarray(encode_tokens(streamed, tokens)), want, rtol=1e-6, atol=1e-6)


def test_values_have_the_asked_mean_and_spread_on_their_placement():
    device = jax.local_devices()[0]
    where = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    x = random_array((256, 512), jnp.float32, where, seed=3, mean=1.0, std=0.05)
    assert x.sharding.memory_kind == "pinned_host"
    v = np.asarray(x)
    assert abs(v.mean() - 1.0) < 1e-3 and abs(v.std() - 0.05) < 1e-3
    other = np.asarray(random_array((256, 512), jnp.float32, where, seed=4, mean=1.0, std=0.05))
    assert not np.array_equal(v, other)  # another seed, other values
    ints = random_array((3,), jnp.int32, jax.sharding.SingleDeviceSharding(device), seed=3, mean=1.0, std=1.0)
    assert ints.dtype == jnp.int32 and not np.asarray(ints).any()


def test_random_weights_take_an_8bit_format(ckpt, configs_only):
    """``weight_dtype='int8'`` with random weights: the transformer's Linear kernels are made as
    int8 (whole numbers spanning the range) with scales giving the float kernel's spread, the
    memory plan counts the bytes an 8-bit load of the files holds, and a call makes a finite
    video (what ``tpu_e2e.py --weights int8`` measures for a line that needs 8-bit kernels)."""
    import vidax
    from vidax.nn.quant import SCALE
    from vidax.pipelines.weight_formats import with_weights

    plain = with_random_weights(Checkpoint.open(configs_only))
    int8_files = with_weights(Checkpoint.open(ckpt), "int8")
    int8_random = with_random_weights(with_weights(Checkpoint.open(configs_only), "int8"))
    assert checkpoint_weight_bytes(int8_random, jnp.bfloat16) == checkpoint_weight_bytes(int8_files, jnp.bfloat16)
    assert checkpoint_weight_bytes(int8_random, jnp.bfloat16) < checkpoint_weight_bytes(plain, jnp.bfloat16)
    pipe = vidax.load_pipeline(configs_only, random_weights=True, weight_dtype="int8", dtype="bfloat16", progress=False)
    flat = dict(nnx.to_flat_state(nnx.state(pipe.transformer)))
    kernels = [p for p in flat if p[-1] == "kernel" and p[:-1] + (SCALE,) in flat]
    assert kernels
    for path in kernels:
        k = np.asarray(flat[path].get_value())
        scale = np.asarray(flat[path[:-1] + (SCALE,)].get_value())
        fan_in = int(np.prod(k.shape[-2:-1]))
        assert k.dtype == np.int8 and k.min() < -100 and k.max() > 100, path
        # int8 uniform over [-127, 127] times the scale: the float kernel's 1/sqrt(fan_in) std (±10 %)
        assert abs(float((k.astype(np.float32) * scale[..., None, :]).std()) * np.sqrt(fan_in) - 1) < 0.1, path
        assert flat[path[:-1] + (SCALE,)].get_value().dtype == np.float32  # as the loader stores them
    video = pipe("a cat", num_inference_steps=2, height=32, width=32, num_frames=5, output_type="np").frames
    assert np.isfinite(video).all() and video.std() > 0
    # fp8: float8 kernels (a float kernel's spread) and float32 scales of 1, as many as int8's
    fp8 = plan_component(
        registry().component(Checkpoint.open(configs_only).class_of("transformer")),
        os.path.join(configs_only, "transformer"),
        jnp.bfloat16,
        random_weights=True,
        weights="float8_e4m3fn",
    ).read()
    flat8 = dict(nnx.to_flat_state(nnx.state(fp8)))
    kernels8 = [p for p in flat8 if p[-1] == "kernel" and p[:-1] + (SCALE,) in flat8]
    assert len(kernels8) == len(kernels)
    for path in kernels8:
        k = np.asarray(flat8[path].get_value())
        assert k.dtype == jnp.float8_e4m3fn and np.asarray(k, np.float32).std() > 0, path
        assert flat8[path[:-1] + (SCALE,)].get_value().dtype == np.float32, path


def test_random_weights_refuse_a_single_file_transformer(configs_only, tmp_path):
    """A single-file ``transformer=`` holds weights: random ones cannot apply (refused before
    any weight is made, naming both keywords)."""
    import vidax

    file = tmp_path / "t.safetensors"
    file.write_bytes(b"")
    with pytest.raises(InputError, match=r"random_weights makes every weight.*transformer="):
        vidax.load_pipeline(configs_only, random_weights=True, transformer=str(file))


def test_weights_are_made_in_their_mesh_sharding(configs_only):
    """On a mesh each parameter is made in the sharding the loader gives it (the family's axes):
    the tensor-parallel kernels split over ``tensor``, the others as their rule says."""
    from vidax.parallel.mesh import resolve_mesh
    from vidax.parallel.placement import logical_placement

    mesh = resolve_mesh("1x2x1")
    spec = registry().component(Checkpoint.open(configs_only).class_of("transformer"))
    folder = os.path.join(configs_only, "transformer")
    module = plan_component(spec, folder, jnp.bfloat16, random_weights=True, mesh=mesh).read()
    placement = logical_placement(mesh, spec.axes())
    split = 0
    for path, var in nnx.to_flat_state(nnx.state(module)):
        value = var.get_value()
        want = placement(path, jax.ShapeDtypeStruct(value.shape, value.dtype))
        assert value.sharding.is_equivalent_to(want, value.ndim), path
        split += value.addressable_shards[0].data.size < value.size
    assert split > 0  # some parameters are split over the tensor axis


def test_cli_random_weights_flag_reaches_the_plan(configs_only, tmp_path):
    """``vidax generate --random-weights`` plans with random weights: with --transformer FILE it
    is one error line naming both flags as typed, before any weight is read."""
    from typer.testing import CliRunner

    from vidax.cli import app

    file = tmp_path / "t.safetensors"
    file.write_bytes(b"")
    args = ["generate", "--checkpoint", configs_only, "--random-weights", "--transformer", str(file), "--prompt", "a"]
    r = CliRunner().invoke(app, args + ["--output", str(tmp_path / "v.npy")])
    assert r.exit_code == 2, r.output
    assert "error: --random-weights makes every weight from the configs; --transformer" in r.output


def test_a_plan_takes_no_weight_format(configs_only):
    """``from_pretrained(plan)``: the weight format went to ``read_plan``; one given again is
    refused naming where it goes, before any weight is made."""
    from vidax.pipelines.plan import read_plan

    plan = read_plan(configs_only, random_weights=True)
    for given in ({"weight_dtype": "int8"}, {"variant": "fp16"}, {"random_weights": True}, {"transformer": "t.gguf"}):
        with pytest.raises(InputError, match="go to read_plan, which applies the weight format"):
            plan.pipeline.from_pretrained(plan, **given)


def test_a_configs_only_folder_without_random_weights_says_how_to_run_it(configs_only, tmp_path):
    """A folder of configs alone read from files is refused before anything else, saying it holds
    configs only and that random weights run it: ``random_weights=True`` in Python,
    ``--random-weights`` on the command line."""
    from typer.testing import CliRunner

    import vidax
    from vidax.cli import app
    from vidax.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"holds configs only .*: random_weights=True runs it"):
        vidax.load_pipeline(configs_only)
    r = CliRunner().invoke(
        app, ["generate", "--checkpoint", configs_only, "-p", "a cat", "-o", str(tmp_path / "v.npy")]
    )
    assert r.exit_code == 2 and "holds configs only" in r.output and ": --random-weights runs it" in r.output, r.output
