"""A family's declared component list (:class:`vidax.pipelines.loading.ComponentTable`): the
requests it hands the one component loader, row by row, without reading a weight."""

from types import SimpleNamespace

import jax.numpy as jnp
import pytest

from vidax.pipelines.loading import TEXT_ENCODER, TRANSFORMER, VAE, ComponentTable, Weighted


@pytest.fixture
def loads(monkeypatch):
    """The (info, requests) each ``load_weighted`` gets; the scheduler is a name."""
    seen = []
    monkeypatch.setattr("vidax.pipelines.loading.load_component", lambda info, name: f"<{name}>")
    monkeypatch.setattr(
        "vidax.pipelines.loading.load_weighted", lambda info, requests: seen.append(requests) or dict.fromkeys(requests)
    )
    return seen


INFO = SimpleNamespace(checkpoint=SimpleNamespace(folder=lambda name: f"/ckpt/{name}"))


def test_rows_become_loader_requests_in_order(loads):
    table = ComponentTable(
        files={"tokenizer": lambda folder: ("tok", folder)},
        weighted={
            "text_encoder": Weighted(dtype="text_encoder_dtype", none_is_dtype=True, mesh=True, staged=True),
            "image_encoder": Weighted(dtype=jnp.float32),
            "transformer": TRANSFORMER,
            "vae": VAE,
            "connectors": TEXT_ENCODER,
        },
    )
    mesh, offload, staging = object(), object(), object()
    modules = table.load(
        INFO,
        dtype=jnp.bfloat16,
        mesh=mesh,
        offload=offload,
        staging=staging,
        text_encoder_dtype=None,
        vae_dtype=jnp.float32,
    )
    assert modules["tokenizer"] == ("tok", "/ckpt/tokenizer") and modules["scheduler"] == "<scheduler>"
    (requests,) = loads
    assert list(requests) == ["text_encoder", "image_encoder", "transformer", "vae", "connectors"]
    assert requests == {
        "text_encoder": dict(dtype=jnp.bfloat16, mesh=mesh, offload=None, staging=staging),
        "image_encoder": dict(dtype=jnp.float32, mesh=None, offload=None, staging=None),
        "transformer": dict(dtype=jnp.bfloat16, mesh=mesh, offload=offload, staging=None),
        "vae": dict(dtype=jnp.float32, mesh=None, offload=None, staging=staging),
        "connectors": dict(dtype=jnp.bfloat16, mesh=mesh, offload=None, staging=staging),
    }


def test_a_dtype_option_is_taken_parsed_only(loads):
    """The dtype options come parsed from the front door (``parsed_dtype_options``) and a row's
    own dtype is a jnp dtype: a name (or None where the row does not mean the pipeline's dtype
    by it, or an option the family did not pass) is a TypeError naming the table's load, before
    anything is loaded."""
    table = ComponentTable(files={}, weighted={"vae": VAE})
    for value in ("float16", "fp32", None):
        with pytest.raises(TypeError, match=rf"^ComponentTable.load takes a parsed dtype .*got {value!r}"):
            table.load(INFO, dtype=jnp.float32, mesh=None, offload=None, staging=None, vae_dtype=value)
    with pytest.raises(TypeError, match=r"^ComponentTable.load takes a parsed dtype .*got 'vae_dtype'"):
        table.load(INFO, dtype=jnp.float32, mesh=None, offload=None, staging=None)  # the family passed none
    own = ComponentTable(files={}, weighted={"image_encoder": Weighted(dtype="float32")})  # a row's own: jnp.float32
    with pytest.raises(TypeError, match=r"^ComponentTable.load takes a parsed dtype .*got 'float32'"):
        own.load(INFO, dtype=jnp.float32, mesh=None, offload=None, staging=None)
    assert loads == []


def test_skipped_rows_and_a_components_own_dtype(loads):
    """A row the checkpoint lacks is left out (``skip``); ``dtype=None`` leaves the dtype to the
    component's own loader (no ``dtype`` request)."""
    table = ComponentTable(
        files={}, weighted={"duration_head": Weighted(), "sound": Weighted(dtype=None, staged=True), "vae": VAE}
    )
    staging = object()
    table.load(
        INFO,
        dtype=jnp.bfloat16,
        mesh=None,
        offload=None,
        staging=staging,
        skip=("duration_head",),
        vae_dtype=jnp.bfloat16,
    )
    assert loads == [
        {
            "sound": dict(dtype=None, mesh=None, offload=None, staging=staging),
            "vae": dict(dtype=jnp.bfloat16, mesh=None, offload=None, staging=staging),
        }
    ]


def test_a_second_expert_moves_to_host_memory_as_it_is_read(loads):
    """An ``expert_to_host`` row is moved to host memory once read, unless ``offload_experts=False``."""
    from vidax.pipelines.experts import Experts

    table = ComponentTable(files={}, weighted={"transformer_2": Weighted(expert_to_host=True)})
    table.load(INFO, dtype=jnp.float32, mesh=None, offload=None, staging=None)
    table.load(INFO, dtype=jnp.float32, mesh=None, offload=None, staging=None, offload_experts=False)
    assert [r["transformer_2"].get("then") for r in loads] == [Experts.move_to_host, None]
