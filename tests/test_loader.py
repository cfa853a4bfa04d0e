"""The strict safetensors loader: round trip, sharding, dtype policy and its three failure kinds."""

import json

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from vidax.errors import CheckpointError
from vidax.nn.stack import scan_layers, stacked
from vidax.weights import CheckpointReader, DtypePolicy, KeyRules, export_state_dict, load_module, save_safetensors


class Block(nnx.Module):
    def __init__(self, rngs):
        self.to_q = nnx.Linear(4, 5, rngs=rngs)
        self.norm = nnx.LayerNorm(5, rngs=rngs)


class Toy(nnx.Module):
    def __init__(self, rngs):
        self.blocks = stacked(Block, 3, rngs)
        self.proj = nnx.List([nnx.Conv(3, 6, (2, 2, 2), rngs=rngs)])
        self.table = nnx.Param(jnp.arange(6.0).reshape(1, 6))


RULES = KeyRules(stacked=("blocks",))


def _randomized_toy(seed=0):
    m = Toy(nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    for path, var in nnx.to_flat_state(nnx.state(m)):
        var.set_value(jnp.asarray(rng.normal(size=var.get_value().shape), jnp.float32))
    return m


def _flat(m):
    return {p: np.asarray(v.get_value(), np.float32) for p, v in nnx.to_flat_state(nnx.state(m))}


def test_round_trip_uses_reference_layout(tmp_path):
    m = _randomized_toy()
    sd = export_state_dict(m, RULES)
    # The exported keys and shapes are the PyTorch ones: (O, I) linear, (O, I, T, H, W) conv.
    assert sd["blocks.2.to_q.weight"].shape == (5, 4)
    assert sd["proj.0.weight"].shape == (6, 3, 2, 2, 2)
    assert sd["blocks.1.norm.weight"].shape == (5,)
    save_safetensors(sd, tmp_path / "model.safetensors")
    loaded = load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), RULES)
    a, b = _flat(m), _flat(loaded)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))


def test_sharded_index_and_dtype_policy(tmp_path):
    m = _randomized_toy()
    sd = export_state_dict(m, RULES)
    keys = sorted(sd)
    half = len(keys) // 2
    save_safetensors({k: sd[k] for k in keys[:half]}, tmp_path / "a.safetensors")
    save_safetensors({k: sd[k].astype(ml_dtypes.bfloat16) for k in keys[half:]}, tmp_path / "b.safetensors")
    weight_map = {k: "a.safetensors" for k in keys[:half]} | {k: "b.safetensors" for k in keys[half:]}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    policy = DtypePolicy(jnp.bfloat16, keep_fp32=(r"/norm/",))
    loaded = load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), RULES, policy)
    state = dict(nnx.to_flat_state(nnx.state(loaded)))
    assert state[("blocks", "norm", "scale")].get_value().dtype == jnp.float32
    assert state[("blocks", "to_q", "kernel")].get_value().dtype == jnp.bfloat16
    ref = _flat(m)
    for k, v in state.items():
        # bf16 storage: 8 mantissa bits -> relative rounding error <= 2**-8.
        np.testing.assert_allclose(np.asarray(v.get_value(), np.float32), ref[k], rtol=2**-8, atol=0)


def _bad_checkpoint(tmp_path, mutate):
    sd = export_state_dict(_randomized_toy(), RULES)
    mutate(sd)
    save_safetensors(sd, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError) as e:
        load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), RULES, what="toy")
    return str(e.value)


def test_unused_prefixes_are_another_modules(tmp_path):
    """A file holding two modules: each loader declares the other's keys unused, still strictly 1:1."""
    m = _randomized_toy()
    sd = {f"toy.{k}": v for k, v in export_state_dict(m, RULES).items()}
    other = {"language_model.w": np.ones((2, 2), np.float32)}
    save_safetensors({**sd, **other}, tmp_path / "model.safetensors")
    rules = KeyRules(stacked=("blocks",), renames=(("toy.", ""),), unused=("language_model.",))
    loaded = load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), rules)
    a, b = _flat(m), _flat(loaded)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # Without the declaration the other module's tensor is unexpected; outside it, strictness holds.
    with pytest.raises(CheckpointError, match="language_model.w"):
        load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), KeyRules(stacked=("blocks",), renames=(("toy.", ""),)))
    save_safetensors({**sd, **other, "toy.extra": np.ones(3, np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="toy.extra"):
        load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), rules)


def test_missing_tensor_is_named(tmp_path):
    msg = _bad_checkpoint(tmp_path, lambda sd: sd.pop("blocks.1.to_q.bias"))
    assert "missing" in msg and "blocks.1.to_q.bias" in msg and "toy checkpoint" in msg


def test_unexpected_tensor_is_named(tmp_path):
    msg = _bad_checkpoint(tmp_path, lambda sd: sd.update({"blocks.7.to_q.bias": np.zeros(5, np.float32)}))
    assert "unexpected" in msg and "blocks.7.to_q.bias" in msg


def test_wrong_shape_is_named_with_file(tmp_path):
    msg = _bad_checkpoint(tmp_path, lambda sd: sd.update({"proj.0.weight": np.zeros((6, 3, 2, 2, 1), np.float32)}))
    assert "wrong shape" in msg and "proj.0.weight" in msg and "model.safetensors" in msg
    # Both shapes in the file's (torch) layout; the kernel's own layout is named once, not as
    # a second copy of the file's shape.
    assert "shape (6, 3, 2, 2, 1), expected (6, 3, 2, 2, 2) (vidax stores it as proj/0/kernel (2, 2, 2, 3, 6))" in msg


def test_transposed_linear_names_the_file_layout(tmp_path):
    # A Linear weight saved transposed: its shape is the kernel's, so "expected" must say the
    # torch layout (out, in), not repeat the file's shape.
    msg = _bad_checkpoint(tmp_path, lambda sd: sd.update({"blocks.0.to_q.weight": sd["blocks.0.to_q.weight"].T}))
    w = _randomized_toy().blocks.to_q.kernel.get_value().shape[1:]
    assert f"model.safetensors: shape {w}, expected {w[::-1]} (vidax stores it as blocks/to_q/kernel {w})" in msg
    assert "blocks.0.to_q.weight" in msg


def test_missing_files_are_clear(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointReader(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        CheckpointReader(tmp_path)
    (tmp_path / "x.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(CheckpointError, match="gone.safetensors, which is missing"):
        CheckpointReader(tmp_path)


def test_reader_is_memory_mapped(tmp_path):
    save_safetensors({"x": np.arange(12, dtype=np.float32).reshape(3, 4)}, tmp_path / "m.safetensors")
    arr = CheckpointReader(tmp_path).get("x")
    assert isinstance(arr.base, np.memmap) or isinstance(arr, np.memmap) or not arr.flags.owndata
    np.testing.assert_array_equal(arr, np.arange(12).reshape(3, 4))


def test_scan_layers_runs_each_layer_in_order():
    m = _randomized_toy()
    x = jnp.ones((2, 4))

    def body(block, h):
        return jnp.tanh(block.to_q(h))[:, :4]

    got = scan_layers(m.blocks, x, body)
    ref = x
    flat = _flat(m)
    for i in range(3):
        ref = np.tanh(np.asarray(ref) @ flat[("blocks", "to_q", "kernel")][i] + flat[("blocks", "to_q", "bias")][i])[
            :, :4
        ]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_scan_layers_first_layers_and_collected_carries():
    m = _randomized_toy()
    x = jnp.ones((2, 4))
    flat = _flat(m)

    def body(block, h):
        return jnp.tanh(block.to_q(h))[:, :4]

    refs = [np.asarray(x)]
    for i in range(3):
        refs.append(
            np.tanh(refs[-1] @ flat[("blocks", "to_q", "kernel")][i] + flat[("blocks", "to_q", "bias")][i])[:, :4]
        )
    for n in (0, 2, 3):
        got, carries = scan_layers(m.blocks, x, body, num_layers=n, collect=True)
        np.testing.assert_allclose(got, refs[n], rtol=1e-6)
        assert carries.shape == (n, 2, 4)
        for i in range(n):
            np.testing.assert_allclose(carries[i], refs[i + 1], rtol=1e-6)
    with pytest.raises(ValueError, match="num_layers=4"):
        scan_layers(m.blocks, x, body, num_layers=4)


class Outer(nnx.Module):
    """A toy whose checkpoint nests it under ``model.inner.`` beside a part it does not run."""

    def __init__(self, rngs):
        self.blocks = stacked(Block, 2, rngs)
        self.proj = nnx.Linear(3, 2, rngs=rngs)


def test_prefix_and_unused_keys(tmp_path):
    m = Outer(nnx.Rngs(3))
    rules = KeyRules(stacked=("blocks",), prefix="model.inner.", unused=("model.other.", "head."))
    sd = export_state_dict(m, rules)
    assert "model.inner.blocks.1.to_q.weight" in sd and "model.inner.proj.bias" in sd
    unused = {"model.other.w": np.ones((7, 3), np.float32), "head.weight": np.ones(2, np.float32)}
    save_safetensors({**sd, **unused}, tmp_path / "model.safetensors")
    loaded = load_module(lambda: Outer(nnx.Rngs(0)), str(tmp_path), rules)
    a, b = _flat(m), _flat(loaded)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))
    # A key outside the prefix that is not declared unused is unexpected, even when its rest
    # names a real parameter.
    save_safetensors({**sd, **unused, "proj.bias": np.ones(2, np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="unexpected.*proj.bias"):
        load_module(lambda: Outer(nnx.Rngs(0)), str(tmp_path), rules)
    # Without the unused declaration, those tensors are reported.
    save_safetensors({**sd, **unused}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="2 unexpected"):
        load_module(lambda: Outer(nnx.Rngs(0)), str(tmp_path), KeyRules(stacked=("blocks",), prefix="model.inner."))


def test_plain_weights_are_read_beside_a_variant(tmp_path):
    """A component folder as ``save_pretrained(d)`` then ``save_pretrained(d, variant="fp16")``
    leave it (the plain file or shards beside ``<name>.fp16.safetensors`` or
    ``<name>.fp16-0000k-of-0000n.safetensors`` with ``<name>.safetensors.index.fp16.json``) is
    read from its plain weights, as diffusers' ``from_pretrained`` without ``variant=``; a folder
    holding one variant alone (single file or shards) is read as it is; with ``variant=``
    (``load_pipeline(..., variant=)``) that variant's files are read."""
    plain = {"a": np.ones(3, np.float32), "b": np.zeros(2, np.float32)}
    half = {k: v.astype(np.float16) + 1 for k, v in plain.items()}

    def folder(name, files):
        path = tmp_path / name
        path.mkdir()
        for file, tensors in files.items():
            save_safetensors(tensors, path / file)
        return path

    def index(path, name, shards):
        weight_map = {k: shard for shard, keys in shards.items() for k in keys}
        (path / name).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    both = folder("both", {"model.safetensors": plain, "model.fp16.safetensors": half})
    assert CheckpointReader(both).get("a").dtype == np.float32
    sharded = folder(
        "sharded",
        {
            "model.safetensors": plain,
            "model.fp16-00001-of-00002.safetensors": {"a": half["a"]},
            "model.fp16-00002-of-00002.safetensors": {"b": half["b"]},
        },
    )
    index(
        sharded,
        "model.safetensors.index.fp16.json",
        {"model.fp16-00001-of-00002.safetensors": ["a"], "model.fp16-00002-of-00002.safetensors": ["b"]},
    )
    assert CheckpointReader(sharded).get("b").dtype == np.float32
    # load_pipeline(..., variant="fp16"): that variant's shards, by their index
    assert CheckpointReader(sharded, variant="fp16").get("b").dtype == np.float16
    assert CheckpointReader(both, variant="bf16").get("a").dtype == np.float32  # no such variant: its plain file
    assert CheckpointReader(sharded).get("b").dtype == np.float32
    (sharded / "model.safetensors").unlink()
    reader = CheckpointReader(sharded)  # the variant's shards alone: its index names them
    assert sorted(reader.keys()) == ["a", "b"] and reader.get("a").dtype == np.float16
    alone = folder("alone", {"diffusion_pytorch_model.fp16.safetensors": half})
    (alone / "config.json").write_text("{}")  # a component folder's config is no index
    assert CheckpointReader(alone).get("a").dtype == np.float16
    (alone / "diffusion_pytorch_model.fp16.safetensors").unlink()
    (alone / "diffusion_pytorch_model.bin").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors file \(vidax reads safetensors only"):
        CheckpointReader(alone)
    two = folder("two", {"model.fp16.safetensors": half, "model.bf16.safetensors": half})
    with pytest.raises(CheckpointError, match="several safetensors files"):
        CheckpointReader(two)


def test_variant_is_the_checkpoints_own(tmp_path):
    """``load_pipeline(..., variant=)`` is a field of the :class:`~vidax.checkpoint.Checkpoint`,
    not of the process: two checkpoints of one folder, one with ``variant="fp16"``, read their own
    files side by side; a component folder given in place of the checkpoint's (``with_folder``)
    is read from its plain files."""
    import dataclasses

    from vidax.checkpoint import Checkpoint

    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "P", "transformer": ["diffusers", "T"]}))
    folder = tmp_path / "transformer"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"_class_name": "T"}))
    save_safetensors({"a": np.ones(3, np.float32)}, folder / "model.safetensors")
    save_safetensors({"a": np.ones(3, np.float16)}, folder / "model.fp16.safetensors")
    plain = Checkpoint.open(tmp_path)
    fp16 = dataclasses.replace(plain, variant="fp16")
    assert fp16.reader("transformer").get("a").dtype == np.float16
    assert plain.reader("transformer").get("a").dtype == np.float32
    assert fp16.reader("transformer").get("a").dtype == np.float16
    assert fp16.with_folder("transformer", str(folder)).reader("transformer").get("a").dtype == np.float32


def test_read_into_fills_the_tensor_rows_and_converts(tmp_path):
    """``read_into``: the file's bytes straight into a host array (no mapping of the file), a
    range of rows, and a conversion to another dtype (through the mapping, released after)."""
    a = np.random.default_rng(0).standard_normal((7, 3, 5)).astype(ml_dtypes.bfloat16)
    save_safetensors({"a": a}, tmp_path / "model.safetensors")
    reader = CheckpointReader(tmp_path)
    out = np.empty_like(a)
    reader.read_into("a", out)
    assert out.tobytes() == a.tobytes() and not reader._maps  # read, not mapped
    rows = np.empty((3, 3, 5), a.dtype)
    reader.read_into("a", rows, rows=(2, 5))
    assert rows.tobytes() == a[2:5].tobytes()
    wide = np.empty((7, 3, 5), np.float32)
    reader.read_into("a", wide)
    np.testing.assert_array_equal(wide, a.astype(np.float32))


def test_stacks_sent_in_pieces_are_bit_exact(tmp_path, monkeypatch):
    """Where the device does not take host buffers over (a stack split over two devices here),
    a stack goes in pieces of whole layers through reused host buffers: one layer a piece and
    one piece in flight here (the sizes shrunk to force it), the values those of the file."""
    import jax

    from vidax.weights import loader

    monkeypatch.setattr(loader, "PIECE_BYTES", 1)
    monkeypatch.setattr(loader, "IN_FLIGHT_BYTES", 1)
    m = _randomized_toy()
    save_safetensors(export_state_dict(m, RULES), tmp_path / "model.safetensors")
    mesh = jax.make_mesh((2,), ("tensor",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices()[:2])
    taken = []
    take = loader._PieceBuffers.take
    monkeypatch.setattr(loader._PieceBuffers, "take", lambda self, n: taken.append(take(self, n)) or taken[-1])

    def placement(path, sds):
        spec = (None, "tensor") if path == ("blocks", "to_q", "kernel") else ()
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))

    loaded = load_module(lambda: Toy(nnx.Rngs(1)), str(tmp_path), RULES, placement=placement)
    kernel = nnx.state(loaded)["blocks"]["to_q"]["kernel"].get_value()
    assert kernel.sharding.is_equivalent_to(placement(("blocks", "to_q", "kernel"), kernel), 3)
    assert len(kernel.sharding.device_set) == 2 and not kernel.sharding.is_fully_replicated
    a, b = _flat(m), _flat(loaded)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))
    stacks = [p for p in a if p[0] == "blocks"]
    assert len(taken) == 3 * len(stacks)  # a piece per layer (3 layers a stack)...
    assert len({raw.ctypes.data for raw in taken}) <= len(stacks) < len(taken)  # ...through reused buffers
