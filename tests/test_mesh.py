"""vidax.parallel: mesh construction and validation, the logical-axis rule table, placement plans,
and ``vidax inspect --mesh`` (8 fake CPU devices)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec
from typer.testing import CliRunner

from vidax.cli import app
from vidax.default_checkpoint import default_checkpoint
from vidax.errors import InputError
from vidax.parallel import rules
from vidax.parallel.mesh import (
    check_heads,
    describe_mesh,
    make_mesh,
    mesh_from_sizes,
    mesh_sizes,
    parse_mesh_sizes,
    resolve_mesh,
    valid_factorizations,
)
from vidax.parallel.placement import logical_placement, param_axes, param_spec


def test_eight_fake_devices():
    assert jax.device_count() == 8  # tests/conftest.py sets XLA_FLAGS


def test_make_mesh():
    mesh = make_mesh(2, 2, 2)
    assert mesh.axis_names == ("data", "tensor", "sequence")
    assert dict(mesh.shape) == {"data": 2, "tensor": 2, "sequence": 2}
    assert mesh.axis_types == (AxisType.Auto,) * 3  # not the Explicit default of jax.make_mesh
    assert mesh_sizes(mesh) == (2, 2, 2) and mesh_sizes(None) == (1, 1, 1)
    assert describe_mesh(mesh) == "mesh: data=2 x tensor=2 x sequence=2 over 8 cpu devices in 1 process(es)"
    sub = make_mesh(1, 2, 2, devices=jax.devices()[:4])
    assert sub.devices.size == 4


def test_valid_factorizations():
    f = valid_factorizations(8)
    assert len(f) == 10 and all(np.prod(t) == 8 for t in f) and len(set(f)) == 10
    assert (1, 2, 4) in f and (8, 1, 1) in f
    assert valid_factorizations(1) == [(1, 1, 1)]
    # Every triple of a larger n, against the definition, and in the order the errors list them.
    n = 360
    brute = [
        (d, t, n // d // t) for d in range(1, n + 1) if n % d == 0 for t in range(1, n // d + 1) if (n // d) % t == 0
    ]
    assert valid_factorizations(n) == brute


def test_huge_mesh_is_refused_at_once():
    # "1x1x100000000000000" hung enumerating 1e14 candidate divisors (vidax inspect --mesh).
    with pytest.raises(
        InputError,
        match=r"mesh='1x1x100000000000000' asks for 100000000000000 devices; a mesh has at "
        r"most 1048576 \(dp \* tp \* sp\)\.",
    ):
        parse_mesh_sizes("1x1x100000000000000")
    assert parse_mesh_sizes("1024x1024x1") == {"dp": 1024, "tp": 1024, "sp": 1}
    assert len(valid_factorizations(2**20)) == 231


def test_bad_mesh_lists_valid_factorizations():
    with pytest.raises(InputError) as e:
        make_mesh(3, 2, 2)
    msg = str(e.value)
    assert msg.startswith("dp=3, tp=2, sp=2: the mesh dp 3 x tp 2 x sp 2 needs 12 devices, but there are 8; ")
    assert "valid (dp, tp, sp) for 8 devices: (1, 1, 8), (1, 2, 4), (1, 4, 2), (1, 8, 1), (2, 1, 4)" in msg
    with pytest.raises(InputError, match="tp=0 must be a positive int"):
        make_mesh(1, 0, 8)


def test_valid_layouts_split_the_heads():
    """The layouts a mesh error lists for a model: tp x sp divides each of its head counts."""
    from vidax.parallel.mesh import valid_layouts

    assert valid_layouts(8) == valid_factorizations(8)
    assert valid_layouts(8, [12]) == [(2, 1, 4), (2, 2, 2), (2, 4, 1), (4, 1, 2), (4, 2, 1), (8, 1, 1)]
    assert valid_layouts(8, [40, 5]) == [(8, 1, 1)]  # the heads of every config must split
    with pytest.raises(InputError) as e:
        make_mesh(3, 4, 1, heads=[12])
    assert str(e.value).endswith(
        "valid (dp, tp, sp) for 8 devices and 12 attention heads: (2, 1, 4), (2, 2, 2), "
        "(2, 4, 1), (4, 1, 2), (4, 2, 1), (8, 1, 1)."
    )
    with pytest.raises(InputError) as e:
        mesh_from_sizes(4, 3, None, heads=[12, 40])
    assert str(e.value).endswith(
        "there are 8; valid (dp, tp, sp) for 8 devices and 12 / 40 attention heads: "
        "(2, 1, 4), (2, 2, 2), (2, 4, 1), (4, 1, 2), (4, 2, 1), (8, 1, 1)."
    )


def test_resolve_mesh_forms():
    assert resolve_mesh(None) is None
    mesh = make_mesh(2, 2, 2)
    assert resolve_mesh(mesh) is mesh
    for form in ("2x2x2", "dp=2,tp=2,sp=2", {"dp": 2, "tp": 2, "sp": 2}, (2, 2, 2)):
        assert mesh_sizes(resolve_mesh(form)) == (2, 2, 2), form
    assert parse_mesh_sizes("sp=8") == {"dp": 1, "tp": 1, "sp": 8}
    for bad in ("2x2", "dp=2;tp=4", "", "pp=2"):
        with pytest.raises(InputError, match="is not a mesh description"):
            parse_mesh_sizes(bad)
    # The message says which form may leave sizes out (it once said "missing sizes are 1" of both).
    with pytest.raises(InputError) as e:
        parse_mesh_sizes("2x2")
    assert str(e.value) == (
        "mesh='2x2' is not a mesh description; use 'DPxTPxSP' with all three sizes (e.g. '2x2x1'), "
        "or keys, where a size left out is 1 (e.g. 'dp=2,tp=2')."
    )
    for zero in ("0x1x1", "dp=2,tp=0"):
        with pytest.raises(InputError, match=r"sizes must be >= 1, got \{'(dp|tp)': 0\}"):
            parse_mesh_sizes(zero)
    with pytest.raises(InputError, match=r"unknown keys \['pp'\]"):
        resolve_mesh({"pp": 8})
    with pytest.raises(InputError, match="is not valid"):
        resolve_mesh(8)


def test_mesh_from_sizes_missing_sizes_are_one():
    """A size not given is 1 for each of --dp / --tp / --sp alike: --dp 16 alone, --tp 16 alone
    and --sp 16 alone on 8 devices get the same refusal (naming only what was given), --tp 8
    alone and --dp 8 alone run; several processes with no size: all data-parallel."""
    assert mesh_from_sizes(None, None, None) is None
    assert mesh_sizes(mesh_from_sizes(None, 8, None)) == (1, 8, 1)
    assert mesh_sizes(mesh_from_sizes(8, None, None)) == (8, 1, 1)
    assert mesh_sizes(mesh_from_sizes(None, 2, 4)) == (1, 2, 4)
    assert mesh_sizes(mesh_from_sizes(None, None, None, always=True)) == (8, 1, 1)
    tail = (
        r": the mesh dp {} x tp {} x sp {} \(a size not given is 1\) needs 16 devices, but there are 8; "
        r"valid \(dp, tp, sp\) for 8 devices: \(1, 1, 8\)"
    )
    for sizes, name in (((16, None, None), "dp=16"), ((None, 16, None), "tp=16"), ((None, None, 16), "sp=16")):
        with pytest.raises(InputError, match="^" + name + tail.format(*(s or 1 for s in sizes))):
            mesh_from_sizes(*sizes)
    with pytest.raises(
        InputError, match=r"^tp=3 sp=4: the mesh dp 1 x tp 3 x sp 4 \(a size not given is 1\) needs 12 "
    ):
        mesh_from_sizes(None, 3, 4)


def test_mesh_of_fewer_devices_takes_the_first_ones():
    """Sizes of fewer devices than there are (--dp 2 on 8) run on the first ones, as a run
    without a mesh runs on the first device (they were refused: the product had to be the
    device count); --dp 1 is that single-device run."""
    assert mesh_from_sizes(1, None, None) is None and mesh_from_sizes(None, 1, 1) is None
    for mesh, sizes in (
        (mesh_from_sizes(2, None, None), (2, 1, 1)),
        (mesh_from_sizes(None, 3, 2), (1, 3, 2)),
        (make_mesh(1, 2, 2), (1, 2, 2)),
        (resolve_mesh("1x1x1"), (1, 1, 1)),
    ):
        assert mesh_sizes(mesh) == sizes and list(mesh.devices.flat) == jax.devices()[: math.prod(sizes)]
    with pytest.raises(
        InputError,
        match=r"^dp=2 tp=2: the mesh .* splits attention heads over tp x sp = 2, which does "
        r"not divide the model's 3; valid \(dp, tp, sp\) for 4 devices and 3 ",
    ):
        mesh_from_sizes(2, 2, None, heads=[3])


def test_check_heads():
    check_heads(make_mesh(1, 2, 4), 40, "x")  # Wan 14B: 40 heads on tp=2 x sp=4
    with pytest.raises(InputError) as e:
        check_heads(make_mesh(1, 2, 4), 12, "WanTransformer3DModel")
    msg = str(e.value)
    # it reads as the device-count refusal does: what was given, the mesh, the valid (dp, tp, sp)
    assert msg == (
        "WanTransformer3DModel: the mesh dp 1 x tp 2 x sp 4 splits attention heads over tp x sp = 8, which "
        "does not divide the model's 12; valid (dp, tp, sp) for 8 devices and 12 attention heads: (2, 1, 4), "
        "(2, 2, 2), (2, 4, 1), (4, 1, 2), (4, 2, 1), (8, 1, 1)."
    )
    # sizes that fit the devices but not the heads are refused from the sizes as given
    with pytest.raises(
        InputError,
        match=r"^tp=2 sp=4: the mesh dp 1 x tp 2 x sp 4 \(a size not given is 1\) splits "
        r"attention heads over tp x sp = 8, which does not divide the model's 12; "
        r"valid \(dp, tp, sp\) for 8 devices and 12 attention heads: \(2, 1, 4\)",
    ):
        mesh_from_sizes(None, 2, 4, heads=[12])
    # one device: "1 device"
    with pytest.raises(
        InputError,
        match=r"needs 2 devices, but there are 1; valid \(dp, tp, sp\) for 1 device: "
        r"\(1, 1, 1\)\.$",
    ):
        make_mesh(2, 1, 1, devices=jax.devices()[:1])


def test_logical_rules():
    mesh = make_mesh(2, 2, 2)
    assert rules.logical_spec(("batch", "seq", "heads", "kv")) == PartitionSpec("data", "sequence", "tensor")
    assert rules.logical_spec(("embed", "mlp"), mesh, (8, 6)) == PartitionSpec(None, "tensor")
    # Dimensions that do not divide, and mesh axes of size 1, are replicated.
    assert rules.logical_spec(("batch", "seq", "embed"), mesh, (3, 8, 4)) == PartitionSpec(None, "sequence")
    assert rules.logical_spec(("batch", "heads"), make_mesh(8, 1, 1), (8, 4)) == PartitionSpec("data")
    with pytest.raises(InputError, match="logical axis 'width' is not in the rule table"):
        rules.logical_spec(("batch", "width"))
    with pytest.raises(InputError, match="rank differs"):
        rules.logical_spec(("batch",), mesh, (2, 3))
    x = jax.numpy.zeros((4, 8, 6))
    assert rules.constrain(x, ("batch", "seq", "embed"), None) is x
    y = jax.jit(lambda a: rules.constrain(a, ("batch", "seq", "embed"), mesh))(x)
    assert y.sharding.spec == PartitionSpec("data", "sequence")


def test_placement_from_param_axes():
    mesh = make_mesh(1, 2, 4)
    table = (
        (r"^blocks/attn1/to_q/kernel$", ("layers", "embed", "heads")),
        (r"^blocks/ffn/kernel$", ("layers", "mlp", "embed")),
    )
    assert param_axes(("blocks", "attn1", "to_q", "kernel"), 3, table) == ("layers", "embed", "heads")
    assert param_axes("blocks/norm/scale", 1, table) is None
    with pytest.raises(InputError, match="has rank 2 but its placement rule"):
        param_axes("blocks/ffn/kernel", 2, table)
    place = logical_placement(mesh, table)
    sds = jax.ShapeDtypeStruct((2, 8, 8), np.float32)
    assert place(("blocks", "attn1", "to_q", "kernel"), sds).spec == PartitionSpec(None, None, "tensor")
    assert place(("blocks", "ffn", "kernel"), sds).spec == PartitionSpec(None, "tensor")
    assert place(("other",), sds).spec == PartitionSpec()
    assert param_spec("blocks/ffn/kernel", (2, 7, 8), table, mesh) == PartitionSpec()  # 7 % 2
    assert logical_placement(None, table) is None


def test_inspect_mesh_plan(tmp_path_factory):
    ckpt = default_checkpoint(str(tmp_path_factory.mktemp("cache")))
    r = CliRunner().invoke(app, ["inspect", ckpt, "--mesh", "1x2x2"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "mesh (planned): data=1 x tensor=2 x sequence=2 = 4 devices" in out
    assert "transformer: 0.6 MiB of parameters, 0.4 MiB per device (21 of 42 tensors sharded)" in out
    assert "largest replicated: condition_embedder/time_proj/kernel (64, 384)" in out
    assert "NOT RUNNABLE" not in out
    r = CliRunner().invoke(app, ["inspect", ckpt, "--mesh", "dp=1,tp=1,sp=8"])
    assert (
        "NOT RUNNABLE: transformer/config.json: the mesh dp 1 x tp 1 x sp 8 splits attention heads over tp x sp = 8, which does not divide the model's 4; "
        in r.stdout
    )
    r = CliRunner().invoke(app, ["inspect", ckpt, "--mesh", "2by2"])
    assert r.exit_code == 2 and "is not a mesh description" in r.stderr


def test_shard_step_places_arguments_by_their_axes():
    """Default: an argument's leading axis is the batch (split over data when it divides);
    ``arg_axes`` places per-step tables whole and per-step noise ``(steps, B, ...)`` on B."""
    from vidax.parallel.step import shard_step

    mesh = make_mesh(2, 2, 2)
    latents = np.zeros((2, 3, 4), np.float32)
    context = np.ones((2, 5), np.float32)
    table = np.arange(4, dtype=np.float32)  # (steps,)
    noise = np.zeros((4, 2, 3, 4), np.float32)  # (steps, B, ...)
    step = lambda p, x, s, *a: (x, s)  # noqa: E731
    _, _, _, (c, t, n) = shard_step(step, latents, None, (context, table, noise), mesh)
    assert c.sharding.spec == PartitionSpec("data") and t.sharding.spec == PartitionSpec("data")
    assert n.sharding.spec == PartitionSpec("data")  # the steps axis: what arg_axes corrects
    _, _, _, (c, t, n) = shard_step(
        step, latents, None, (context, table, noise), mesh, arg_axes=(None, (None,), (None, "batch", None, None))
    )
    assert c.sharding.spec == PartitionSpec("data")
    assert t.sharding.spec == PartitionSpec() and n.sharding.spec == PartitionSpec(None, "data")
    with pytest.raises(ValueError):
        shard_step(step, latents, None, (context, table, noise), mesh, arg_axes=(None,))


def test_data_axis_that_cannot_split_the_batch_is_warned_about(caplog):
    """--dp 3 on the CFG pair of one video replicates the batch over the data axis (correct, but
    its devices add nothing): one warning says so and what would split it (trial 8: silent)."""
    import types

    from vidax.parallel.mesh import make_mesh
    from vidax.pipelines.run import warn_if_data_axis_idle

    call = types.SimpleNamespace(batch=1, do_cfg=True)
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        warn_if_data_axis_idle(make_mesh(3, 1, 1), call)
        warn_if_data_axis_idle(make_mesh(2, 1, 1), call)
        warn_if_data_axis_idle(None, call)
    assert [r.getMessage() for r in caplog.records] == [
        "the denoising batch of 2 (1 video(s), CFG doubles it) does not split over the mesh's 3 data-parallel "
        "devices: it is replicated there, which adds no speed; a data-parallel size dividing 2 (--dp, mesh=) would "
        "split it"
    ]
