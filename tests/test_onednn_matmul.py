"""vidax.cpu.onednn: the oneDNN matmul custom call against XLA's dot, and its switch.

Tolerance. Both sides take the same operands and sum their products in float32: a product of two
bf16 values (8-bit significands) is exact in float32, so the two results differ only by the
float32 rounding of the sums, which oneDNN and XLA add in different orders and blockings. The
classic bound for a K-term float32 sum is ``K * 2^-24 * sum_k |x_k w_k|`` per side; the test
allows twice that (both sides round), ``K * 2^-23 * (|x| @ |w|)``, elementwise. For float32
operands the products are rounded too, which the same bound covers (one more rounding per term).
"""

import logging
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from vidax.cpu import onednn
from vidax.errors import SetupError
from vidax.nn.layers import Linear


@pytest.fixture(scope="module")
def built():
    why = onednn.load()
    if why is not None:
        pytest.skip(f"the oneDNN custom call cannot be built here: {why}")


def _close_to_xla_dot(got, x, w):
    x32, w32 = np.asarray(x, np.float32), np.asarray(w, np.float32)
    want = np.asarray(
        jax.lax.dot_general(
            x, w, (((x.ndim - 1,), (0,)), ((), ())), precision="highest", preferred_element_type=jnp.float32
        )
    )
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == want.shape
    bound = w.shape[0] * 2.0**-23 * (np.abs(x32) @ np.abs(w32))
    assert np.all(np.abs(got - want) <= bound + 1e-30), np.max(np.abs(got - want) - bound)
    assert np.abs(want).max() > 0.1  # a non-trivial product


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_matches_xla_dot_on_odd_and_batched_shapes(built, dtype):
    rng = np.random.default_rng(0)
    # (x shape, N): tiny, odd sizes, a K that no vector width divides, leading batch dims.
    for xs, n in [((1, 3), 1), ((7, 13), 5), ((33, 257), 129), ((2, 3, 17, 64), 40)]:
        x = jnp.asarray(rng.standard_normal(xs), dtype)
        w = jnp.asarray(rng.standard_normal((xs[-1], n)), dtype)
        _close_to_xla_dot(jax.jit(onednn.onednn_dot)(x, w), x, w)


def test_inside_scan_and_vmap(built):
    """Under jit in lax.scan over stacked weights (as scan_layers runs the blocks), and vmapped
    over x alone (folded into the rows) and over x and w together (one call per element)."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((4, 9, 48)), jnp.bfloat16)
    ws = jnp.asarray(rng.standard_normal((4, 48, 31)), jnp.bfloat16)

    @jax.jit
    def scanned(x, ws):
        return jax.lax.scan(lambda c, xw: (c, onednn.onednn_dot(*xw)), 0, (x, ws))[1]

    for got in (scanned(x, ws), jax.jit(jax.vmap(onednn.onednn_dot))(x, ws)):
        for i in range(4):
            _close_to_xla_dot(got[i], x[i], ws[i])
    _close_to_xla_dot(jax.vmap(onednn.onednn_dot, in_axes=(0, None))(x, ws[0]), x, ws[0])


def test_switch_chooses_the_custom_call(built, monkeypatch):
    """VIDAX_CPU_MATMUL=onednn puts bf16 Linear layers on the custom call (float32 stays on XLA's
    dot); xla never does; auto on this process (8 host devices in the tests) neither; a wrong
    value is one line naming the variable."""
    lin = Linear(24, 8, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    lin32 = Linear(24, 8, rngs=nnx.Rngs(0))
    x = jnp.ones((2, 3, 24), jnp.bfloat16)

    def lowered(module, x):
        return jax.jit(lambda m, x: m(x)).lower(module, x).as_text()

    monkeypatch.setenv(onednn.ENV, "onednn")
    assert onednn.TARGET in lowered(lin, x) and onednn.TARGET not in lowered(lin32, x.astype(jnp.float32))
    y = lin(x)
    assert y.dtype == jnp.bfloat16 and y.shape == (2, 3, 8)
    monkeypatch.setenv(onednn.ENV, "xla")
    assert onednn.TARGET not in lowered(lin, x)
    monkeypatch.setenv(onednn.ENV, "auto")
    assert jax.device_count() > 1 and onednn.TARGET not in lowered(lin, x)
    monkeypatch.setenv(onednn.ENV, "mkl")
    with pytest.raises(SetupError, match="VIDAX_CPU_MATMUL='mkl' .* valid: auto, onednn, xla"):
        lin(x)


def test_auto_turns_on_with_native_bf16_on_one_cpu_device():
    amx = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    assert onednn.wins(amx, "cpu", 1)
    assert onednn.wins(amx - {"amx_bf16", "amx_tile"}, "cpu", 1)  # AVX512-BF16 (cpu_speed.md section 8)
    assert not onednn.wins({"avx2", "avx512f"}, "cpu", 1)
    assert not onednn.wins(amx, "cpu", 8)  # several devices: GSPMD cannot split the custom call
    assert not onednn.wins(amx, "gpu", 1) and not onednn.wins(amx, "tpu", 1)


def test_build_cache_needs_no_compiler_and_heals(built, monkeypatch, tmp_path):
    """In a fresh cache a missing compiler is the reason (load() logs it, XLA's dot is used);
    ``$CXX`` is split like shell words (``env g++``, as ``ccache g++``); a cached library is used
    with no compiler on the machine (trial 5: a deploy image without g++ lost oneDNN), and one
    that does not load (truncated) is built again."""
    import ctypes

    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path))
    lib = onednn.library_dir()
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler .*no-such-c\\+\\+-compiler"):
        onednn._build(lib)
    monkeypatch.setenv("CXX", "env g++")
    path = onednn._build(lib)
    assert path.startswith(str(tmp_path))
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    assert onednn._build(lib) == path  # from the cache, no compiler asked for
    open(path, "w").close()  # a truncated library
    with pytest.raises(OSError):
        ctypes.cdll.LoadLibrary(path)
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):  # rebuilding it needs one
        onednn._build(lib, stale=path)
    monkeypatch.setenv("CXX", "g++")
    assert onednn._build(lib, stale=path) == path and os.path.getsize(path) > 0
    ctypes.cdll.LoadLibrary(path)


def test_fallback_is_a_warning_where_onednn_would_be_used(monkeypatch, caplog):
    """When oneDNN cannot be used the fallback to XLA's dot is a WARNING where it would have been
    used (VIDAX_CPU_MATMUL=onednn, or auto on a CPU where it wins: trial 5 saw only an INFO line
    there, hidden by default); INFO elsewhere (auto with 8 host devices, as in the tests)."""
    monkeypatch.setattr(onednn, "library_dir", lambda: None)
    try:
        for setting, one_device, level in (
            ("onednn", False, logging.WARNING),
            ("auto", False, logging.INFO),
            ("auto", True, logging.WARNING),
        ):
            monkeypatch.setenv(onednn.ENV, setting)
            if one_device:
                monkeypatch.setattr(onednn, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
                monkeypatch.setattr(jax, "device_count", lambda *a, **k: 1)
            onednn.load.cache_clear()
            caplog.clear()
            with caplog.at_level(logging.INFO, logger=onednn.__name__):
                assert onednn.load() is not None
            assert [r.levelno for r in caplog.records if "unavailable" in r.message] == [level], caplog.records
        assert onednn.describe(jnp.bfloat16).startswith("XLA's dot (oneDNN unavailable: libdnnl.so.3 not found")
    finally:
        onednn.load.cache_clear()  # the next test finds the real library again


def test_describe_says_what_the_matmuls_ran_through(built, monkeypatch):
    """The run summary's ``cpu matmul`` row (trial 5: nothing said whether oneDNN ran)."""
    from vidax.stats import RunStats

    assert onednn.describe(jnp.float32) is None
    monkeypatch.setenv(onednn.ENV, "xla")
    assert onednn.describe(jnp.bfloat16) == "XLA's dot (VIDAX_CPU_MATMUL=xla)"
    assert onednn.describe(jnp.float16) == "XLA's dot (float16: oneDNN is used for bfloat16)"
    monkeypatch.setenv(onednn.ENV, "auto")
    assert onednn.describe(jnp.bfloat16) == f"XLA's dot (VIDAX_CPU_MATMUL=auto: {jax.device_count()} CPU devices)"
    monkeypatch.setenv(onednn.ENV, "onednn")
    assert onednn.describe(jnp.bfloat16) == "oneDNN (VIDAX_CPU_MATMUL=onednn)"
    monkeypatch.setattr(jax, "device_count", lambda *a, **k: 1)
    row = onednn.describe(jnp.bfloat16)
    assert row == "oneDNN (VIDAX_CPU_MATMUL=onednn; layer weights read in place)"
    # kept 8-bit / GGUF Linears run XLA's dot (trial 6: the row claimed oneDNN for them too)
    assert onednn.describe(jnp.bfloat16, ["GGUF", "int8"]) == (
        "oneDNN (VIDAX_CPU_MATMUL=onednn; layer weights read in place); XLA's dot for the GGUF / int8 weights"
    )
    assert [
        line.split(None, 2)[2]
        for line in RunStats(step_s=[1.0], cpu_matmul=row).summary().splitlines()
        if line.split()[:2] == ["cpu", "matmul"]
    ] == [row]


def test_bias_and_rounding_inside_the_call(built):
    """onednn_linear: ``x @ w + bias`` summed in float32 (XLA's dot plus the bias, within the
    summation bound above), and its bfloat16 result that sum rounded once: within half a bf16
    ulp (at most 2^-8 relative: 8 significant bits) of the float32 result, plus the bound (the
    two calls may block the sum differently). Weights given 2-D and as layer i of a stack (also as uint16 bits) agree."""
    rng = np.random.default_rng(2)
    for xs, n in [((5, 40), 24), ((2, 3, 17, 64), 40)]:
        x = jnp.asarray(rng.standard_normal(xs), jnp.bfloat16)
        stack = jnp.asarray(rng.standard_normal((3, xs[-1], n)), jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((n,)), jnp.bfloat16)
        w = stack[1]
        want = np.asarray(
            jax.lax.dot_general(
                x, w, (((x.ndim - 1,), (0,)), ((), ())), precision="highest", preferred_element_type=jnp.float32
            )
        ) + np.asarray(b, np.float32)
        bound = w.shape[0] * 2.0**-23 * (np.abs(np.asarray(x, np.float32)) @ np.abs(np.asarray(w, np.float32)))
        y32 = np.asarray(jax.jit(onednn.onednn_linear, static_argnums=3)(x, w, b, jnp.float32))
        assert y32.dtype == np.float32 and np.all(np.abs(y32 - want) <= bound + 1e-30)
        y16 = jax.jit(onednn.onednn_linear, static_argnums=3)(x, w, b, jnp.bfloat16)
        assert y16.dtype == jnp.bfloat16
        assert np.all(np.abs(np.asarray(y16, np.float32) - y32) <= 2.0**-8 * np.abs(y32) + bound + 1e-30)
        bits = jax.lax.bitcast_convert_type(stack, jnp.uint16)
        for weights in (stack, bits):
            got = jax.jit(onednn.onednn_linear, static_argnums=3)(x, weights, b, jnp.bfloat16, jnp.int32(1))
            np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(y16, np.float32))


class _Block(nnx.Module):
    """Two Linears (with and without bias) and a parameter named ``kernel`` that is not a
    Linear's (read with ``[...]``, as other modules read theirs)."""

    def __init__(self, rngs):
        self.up = Linear(24, 40, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=rngs)
        self.down = Linear(40, 24, use_bias=False, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=rngs)
        self.gate = _Gate(rngs)

    def __call__(self, x):
        return x + self.gate(self.down(jax.nn.gelu(self.up(x))))


class _Gate(nnx.Module):
    def __init__(self, rngs):
        self.kernel = nnx.Param(jax.random.normal(rngs.params(), (24, 24)).astype(jnp.bfloat16))

    def __call__(self, x):
        return x * jnp.tanh(self.kernel[...].astype(jnp.float32).sum(0)).astype(x.dtype)


def test_scan_layers_reads_linear_kernels_in_place(built, monkeypatch):
    """With oneDNN on one device, scan_layers hands each Linear kernel to the layer as a
    StackedKernel: the custom call takes the whole uint16 stack and the layer index (no
    per-layer copy of the kernel out of the stack), and the result equals the oneDNN run on
    per-layer slices bit for bit (the same primitive on the same values). Also the partial
    range (start / num_layers), the per-layer entries, vmap over the input, and the other
    ``kernel`` parameter read by indexing."""
    from vidax.nn.stack import scan_layers, stacked

    monkeypatch.setenv(onednn.ENV, "onednn")
    layers = stacked(_Block, 4, nnx.Rngs(3))
    graphdef, state = nnx.split(layers)
    # Every parameter random (the Linears' biases start at zero): the bias add inside the call is compared too.
    keys = iter(jax.random.split(jax.random.PRNGKey(5), len(jax.tree.leaves(state))))
    state = jax.tree.map(lambda a: (0.3 * jax.random.normal(next(keys), a.shape)).astype(a.dtype), state)
    x = jax.random.normal(jax.random.PRNGKey(4), (2, 5, 24)).astype(jnp.bfloat16)
    entries = jnp.arange(4, dtype=jnp.float32)

    def make_run():  # a new function per switch setting: JAX caches traces by function
        def run(state, x):
            m = nnx.merge(graphdef, state)
            full = scan_layers(m, x, lambda layer, c: layer(c))
            part = scan_layers(m, x, lambda layer, c: layer(c), start=1, num_layers=3)
            with_entries = scan_layers(
                m, x, lambda layer, c, e: (layer(c) * e.astype(c.dtype), e + 1), per_layer=entries
            )
            batched = jax.vmap(lambda xi: scan_layers(m, xi, lambda layer, c: layer(c)))(jnp.stack([x, -x]))
            return full, part, with_entries, batched

        return jax.jit(run)

    def stack_operands(run):
        return [
            ln
            for ln in run.lower(state, x).as_text().splitlines()
            if onednn.TARGET in ln and "tensor<4x24x40xui16>" in ln
        ]

    run = make_run()  # 8 host devices in the tests: kernels sliced, oneDNN on the copies
    sliced = run(state, x)
    assert not stack_operands(run)
    monkeypatch.setattr(jax, "device_count", lambda *a, **k: 1)
    assert onednn.reads_stacks_in_place(jnp.bfloat16)
    run = make_run()
    in_place = run(state, x)
    assert stack_operands(run)
    for a, b in zip(jax.tree.leaves(in_place), jax.tree.leaves(sliced)):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    assert float(jnp.abs(in_place[0].astype(jnp.float32) - x.astype(jnp.float32)).max()) > 0.1  # the layers act


class _Holder(nnx.Module):
    """A model holding one stack of _Block layers under ``blocks`` (its ``block_stacks``)."""

    def __init__(self, layers):
        self.blocks = layers


def _random_blocks(seed: int = 3):
    from vidax.nn.stack import stacked

    layers = stacked(_Block, 4, nnx.Rngs(seed))
    graphdef, state = nnx.split(layers)
    keys = iter(jax.random.split(jax.random.PRNGKey(seed + 2), len(jax.tree.leaves(state))))
    state = jax.tree.map(lambda a: (0.3 * jax.random.normal(next(keys), a.shape)).astype(a.dtype), state)
    return nnx.merge(graphdef, state)


def _scan_fn():  # a new function per setting: JAX caches traces by function
    from vidax.nn.stack import scan_layers

    def run(state, graphdef, x):
        m = nnx.merge(graphdef, state)
        full = scan_layers(m, x, lambda layer, c: layer(c))
        part = scan_layers(m, x, lambda layer, c: layer(c), start=1, num_layers=3)
        batched = jax.vmap(lambda xi: scan_layers(m, xi, lambda layer, c: layer(c)))(jnp.stack([x, -x]))
        return full, part, batched

    return jax.jit(run, static_argnums=1)


def _close_through_layers(got, want):
    """Two runs of the blocks whose Linears differ only in oneDNN's float32 summation order
    (its ``ab`` and ``ba`` weight layouts block the sums differently): each Linear's sum differs
    by far less than half a bf16 ulp before its rounding, so an output differs by at most one
    bf16 ulp (2^-8 of its magnitude's power of two) per Linear, and that through 4 blocks of
    2 Linears with gains about 1: 2^-4 of the largest output bounds it with room."""
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.abs(b).max() > 0.1
        np.testing.assert_allclose(a, b, rtol=0, atol=2.0**-4 * np.abs(b).max())


def test_kernel_stacks_in_onednn_layout(built, monkeypatch):
    """lay_out_kernel_stacks keeps each stacked bf16 Linear kernel in oneDNN's weight layout
    (KERNEL_LAYOUT: each layer's (K, N) column-major) where oneDNN reads stacks in place: same
    shape and values, the Linear's kernel_transposed set, other parameters untouched. The scan
    then hands the bf16 stack itself to the custom call, which declares the layout (no copy or
    transpose of a stack in the compiled step), with the results of the row-major stacks. Where
    stacks are not read in place the flag goes off, the run unchanged; a stack replaced by a
    row-major one (a LoRA merge) is laid out again on the next call."""
    from vidax.nn.kernels import lay_out_kernel_stacks

    monkeypatch.setenv(onednn.ENV, "onednn")
    monkeypatch.setattr(jax, "device_count", lambda *a, **k: 1)
    model = _Holder(_random_blocks())
    x = jax.random.normal(jax.random.PRNGKey(4), (2, 5, 24)).astype(jnp.bfloat16)
    before = {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model))}
    graphdef, state = nnx.split(model.blocks)
    row_major = _scan_fn()(state, graphdef, x)  # in place, as uint16 bits

    lay_out_kernel_stacks(model, ("blocks",))
    assert model.blocks.up.kernel_transposed and model.blocks.down.kernel_transposed
    for p, v in nnx.to_flat_state(nnx.state(model)):
        a = v.get_value()
        assert onednn.has_kernel_layout(a) == (p[-1] == "kernel" and p[1] in ("up", "down")), p
        np.testing.assert_array_equal(np.asarray(a), before[p])  # the values, as numpy reads them
    graphdef, state = nnx.split(model.blocks)
    run = _scan_fn()
    laid = run(state, graphdef, x)
    _close_through_layers(laid, row_major)
    lowered = run.lower(state, graphdef, x)
    calls = [ln for ln in lowered.as_text().splitlines() if onednn.TARGET in ln and "tensor<4x24x40xbf16>" in ln]
    assert calls and all("transposed = true" in ln for ln in calls), calls
    hlo = lowered.compile().as_text()
    assert any("bf16[4,24,40]{1,2,0}" in ln and "parameter(" in ln for ln in hlo.splitlines())  # entered laid out
    moved = [
        ln
        for ln in hlo.splitlines()
        if re.search(r"= (bf16|u16)\[4,(24,40|40,24)\]\{[0-9,]+\} (copy|transpose|fusion)", ln)
    ]
    assert not moved, moved  # the stacks are read where they are

    # not in place (8 devices): the flag off, the stacks read by slicing, the same results
    monkeypatch.setattr(jax, "device_count", lambda *a, **k: 8)
    lay_out_kernel_stacks(model, ("blocks",))
    assert not model.blocks.up.kernel_transposed and onednn.has_kernel_layout(model.blocks.up.kernel.get_value())
    graphdef, state = nnx.split(model.blocks)
    _close_through_layers(_scan_fn()(state, graphdef, x), row_major)

    # a merge put a row-major stack in: laid out again, once
    monkeypatch.setattr(jax, "device_count", lambda *a, **k: 1)
    model.blocks.up.kernel.set_value(jnp.asarray(before[("blocks", "up", "kernel")]))
    lay_out_kernel_stacks(model, ("blocks",))
    assert model.blocks.up.kernel_transposed and onednn.has_kernel_layout(model.blocks.up.kernel.get_value())
    kept = model.blocks.up.kernel.get_value()
    lay_out_kernel_stacks(model, ("blocks",))
    assert model.blocks.up.kernel.get_value() is kept


def test_lora_merges_keep_the_kernel_layout(built, monkeypatch):
    """A LoRA merge into a kernel stack in oneDNN's layout (vidax.lora.apply, its buffer
    donated) keeps the layout, and the merged values equal those of the same merge into the
    row-major stack (the same float32 arithmetic per element)."""
    from vidax.lora import apply

    rng = np.random.default_rng(0)
    stack = jnp.asarray(rng.standard_normal((3, 24, 40)), jnp.bfloat16)
    down, up = (
        jnp.asarray(rng.standard_normal((4, 24)), jnp.float32),
        jnp.asarray(rng.standard_normal((40, 4)), jnp.float32),
    )
    lora = [(down, up, jnp.float32(0.7))]
    fns = {}  # a ParamStore's jitted merges
    want = apply._add_layer(fns, jnp.array(stack), jnp.int32(1), lora, [], kernel=True)
    laid = onednn.to_kernel_layout(jnp.array(stack))
    got = apply._add_layer(fns, laid, jnp.int32(1), lora, [], kernel=True)
    assert len(fns) == 2  # one merge per output placement: row-major, oneDNN's layout
    assert onednn.has_kernel_layout(got)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
    assert not np.array_equal(np.asarray(want[1], np.float32), np.asarray(stack[1], np.float32))  # it merged


def test_loader_reads_linear_stacks_into_the_kernel_layout(built, monkeypatch, tmp_path):
    """Where oneDNN reads stacks in place, the loader places each stacked Linear kernel from the
    file's (N, K) tensors straight into oneDNN's layout (no transposition, no relayout after) and
    marks its Linear; the values equal a row-major load's bit for bit (the same bytes)."""
    from safetensors.numpy import save_file

    from vidax.weights.loader import DtypePolicy, KeyRules, load_module

    model = _Holder(_random_blocks(seed=7))
    tensors = {}
    for p, v in nnx.to_flat_state(nnx.state(model)):  # torch's names and layouts: (N, K) weights
        a = np.asarray(v.get_value(), np.float32)
        for i in range(a.shape[0]):
            name = "weight" if p[-1] == "kernel" else p[-1]
            tensors[f"blocks.{i}.{p[1]}.{name}"] = np.ascontiguousarray(a[i].T if p[-1] == "kernel" else a[i])
    save_file(tensors, str(tmp_path / "model.safetensors"))
    rules = KeyRules(stacked=("blocks",))
    make = lambda: _Holder(_random_blocks(seed=1))  # noqa: E731
    policy = DtypePolicy(jnp.bfloat16)
    plain = load_module(make, str(tmp_path), rules, policy)
    assert not plain.blocks.up.kernel_transposed  # 8 devices: row-major
    monkeypatch.setenv(onednn.ENV, "onednn")
    monkeypatch.setattr(jax, "device_count", lambda *a, **k: 1)
    laid = load_module(make, str(tmp_path), rules, policy)
    assert laid.blocks.up.kernel_transposed and laid.blocks.down.kernel_transposed
    for (p, a), (_, b) in zip(nnx.to_flat_state(nnx.state(laid)), nnx.to_flat_state(nnx.state(plain))):
        assert onednn.has_kernel_layout(a.get_value()) == (p[-1] == "kernel" and p[1] in ("up", "down")), p
        np.testing.assert_array_equal(np.asarray(a.get_value(), np.float32), np.asarray(b.get_value(), np.float32))


@pytest.mark.parametrize("impl", ["xla", "blockwise"])
def test_attention_products_through_onednn(built, monkeypatch, impl):
    """bf16 attention on the CPU with oneDNN on: both products run as oneDNN's batched matmul
    on the (B, L, N, K) tensors where they are (no transposition to heads-major), and the
    output is XLA's dot path's within one bf16 rounding: the scores' products are exact in
    float32 on both sides and only their float32 summation order differs (far below the scores'
    bf16-rounded inputs' scale), so an output element may differ by its last bf16 bit,
    2^-8 of its magnitude's power of two; atol 2^-7 of the largest output bounds that. With
    masks, causal, a bias, padding blocks (Lk = 7, blocks of 3) and vmap; grouped queries
    (GQA) keep XLA's dot."""
    from vidax.nn.attention import SegmentIds, dot_product_attention

    keys = jax.random.split(jax.random.PRNGKey(11), 4)
    q = jax.random.normal(keys[0], (2, 5, 3, 8)).astype(jnp.bfloat16)
    k = jax.random.normal(keys[1], (2, 7, 3, 8)).astype(jnp.bfloat16)
    v = jax.random.normal(keys[2], (2, 7, 3, 8)).astype(jnp.bfloat16)
    bias = jax.random.normal(keys[3], (1, 3, 5, 7))
    seg = SegmentIds.for_padding(2, 5, 7, jnp.array([5, 4]), jnp.array([7, 5]))
    cases = [dict(), dict(segment_ids=seg), dict(causal=True), dict(bias=bias)]

    def make():  # a new function per setting: JAX caches traces by function
        def run(q, k, v):
            outs = [dot_product_attention(q, k, v, implementation=impl, block_size=3, **c) for c in cases]
            outs.append(
                jax.vmap(lambda qi: dot_product_attention(qi, k, v, implementation=impl, block_size=3))(
                    jnp.stack([q, -q])
                )
            )
            outs.append(dot_product_attention(q, k[:, :, :1], v[:, :, :1], implementation=impl, block_size=3))
            return outs

        return jax.jit(run)

    monkeypatch.setenv(onednn.ENV, "xla")
    run = make()
    want = run(q, k, v)
    assert onednn.BATCHED_TARGET not in run.lower(q, k, v).as_text()
    monkeypatch.setenv(onednn.ENV, "onednn")
    run = make()
    got = run(q, k, v)
    text = run.lower(q, k, v).as_text()
    assert text.count(onednn.BATCHED_TARGET) >= 2 * (len(cases) + 1), text.count(onednn.BATCHED_TARGET)
    for a, b in zip(got, want):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        assert np.abs(b).max() > 0.3
        np.testing.assert_allclose(a, b, rtol=0, atol=2.0**-7 * np.abs(b).max())
    # the GQA call (one key head for three query heads) kept XLA's dot: its products are einsums
    gqa = jax.jit(lambda q, k, v: dot_product_attention(q, k, v, implementation=impl, block_size=3))
    assert onednn.BATCHED_TARGET not in gqa.lower(q, k[:, :, :1], v[:, :, :1]).as_text()


def test_kept_formats_name_what_runs_xla_dot():
    """The formats the summary row names as XLA's dot: kept 8-bit kernels as --weights names
    them, GGUF ones as GGUF, none for plain weights."""
    from vidax.nn.kernels import kept_formats
    from vidax.nn.quant import quantize_structure

    assert kept_formats(_Holder(_random_blocks())) == []
    for fmt, name in (("int8", "int8"), ("float8_e4m3fn", "fp8")):
        model = nnx.eval_shape(lambda: quantize_structure(_Holder(_random_blocks()), fmt))
        assert kept_formats(model) == [name]
    model = _Holder(_random_blocks())
    model.blocks.up.kernel_gguf = "Q4_K"
    assert kept_formats(model) == ["GGUF"]
