"""The command line's records (:mod:`vidax.cli.flags`, :mod:`vidax.cli.records`): every flag a
command takes is a field of its records and every field a flag, and the flags are checked once,
in the order the commands refuse them, before anything is read."""

import dataclasses

import jax.numpy as jnp
import pytest

from vidax.cli.flags import GENERATE_ORDER, SERVE_ORDER, GenerateFlags, LoadFlags, ServeFlags
from vidax.cli.records import GenerateRequest, ServeOptions, generate_request, serve_options
from vidax.errors import InputError


def _names(*records) -> list[str]:
    return [f.name for r in records for f in dataclasses.fields(r)]


def test_each_command_takes_exactly_its_records_fields():
    """The --help order names each field of the command's records once (a field left out would
    be a flag the command never offers; split() would fail on it)."""
    for order, records in ((GENERATE_ORDER, (LoadFlags, GenerateFlags)), (SERVE_ORDER, (LoadFlags, ServeFlags))):
        assert sorted(order) == sorted(_names(*records)) and len(set(order)) == len(order)


def test_flags_are_checked_into_records_in_the_commands_order(tmp_path):
    """generate: --dtype before --output before --fps; serve: its own ranges before --dtype; a
    clean set of flags becomes frozen records holding the checked values."""
    out = str(tmp_path / "v.npy")
    with pytest.raises(InputError, match="'half'"):
        generate_request(LoadFlags(dtype="half"), GenerateFlags(output="/no/such/dir/v.mp4", fps=0), {}, True)
    with pytest.raises(InputError, match="no/such/dir"):
        generate_request(LoadFlags(), GenerateFlags(output="/no/such/dir/v.mp4", fps=0), {}, True)
    with pytest.raises(InputError) as e:
        serve_options(LoadFlags(dtype="half"), ServeFlags(queue_size=-1))
    assert e.value.render(str).startswith("queue_size")
    request = generate_request(
        LoadFlags(dtype="bf16", matmul_precision=" HIGH ", offload_blocks="2", dp=2),
        GenerateFlags(output=out, fps=12),
        {"prompt": "x", "seed": None},
        False,
    )
    assert isinstance(request, GenerateRequest) and request.call == {"prompt": "x"}
    load = request.load
    assert (load.dtype, load.matmul_precision, load.sizes, load.offload.chunk) == (
        jnp.bfloat16,
        "high",
        (2, None, None),
        2,
    )
    assert (request.output.path, request.output.given, request.output.format, request.output.fps) == (
        out,
        False,
        "npy",
        12,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.load = None
    options = serve_options(LoadFlags(), ServeFlags(port=0, max_batch=2))
    assert isinstance(options, ServeOptions) and (options.port, options.max_batch, options.api_key) == (0, 2, None)
