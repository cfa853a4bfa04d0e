"""The TPU lane: every model line and the shared features on a TPU, against the CPU backend.

Runs only where JAX's backend is a TPU (``make test-tpu``, one process: a TPU is held by one
process at a time); elsewhere every test here is skipped. It needs the tiny checkpoints of
:mod:`tests.tpu.checkpoints`: ``VIDAX_TPU_LANE`` names a folder that holds them (built on a
machine with torch: ``python -m tests.tpu.checkpoints FOLDER``); unset, they are built here
(which needs the test extras' torch and diffusers).

The CPU side runs in a subprocess on JAX's CPU backend (``JAX_PLATFORMS=cpu``: it never opens the
TPU), every case of :mod:`tests.tpu.cases` once; the TPU side runs them here.

Bars, and why:
* float32 on the TPU equals the CPU's float32 to >= 80 dB PSNR (frames in [0, 1]) / SNR (sound):
  with ``matmul_precision="highest"`` (the default) both compute float32 products in float32, so
  only the order of sums and the transcendental functions' last bits differ (~1e-6 relative,
  well above 100 dB measured); at JAX's default TPU precision (one bfloat16 pass) the same runs
  land at bfloat16 accuracy (~20-40 dB here), which this bar refuses. Each run is made inside
  ``jax.default_matmul_precision("bfloat16")`` so that the pipeline's own setting is what counts
  (the suite's conftest pins "highest" globally).
* bfloat16 runs are finite (their accuracy is measured by the parity tests on the CPU).
* attention implementations against ``xla`` on the same TPU: float32 to 1e-4 absolute on
  outputs of magnitude ~1 (the kernels' products in float32 at highest precision; the order of
  the online softmax's sums differs), bfloat16 to 2e-2 (one bfloat16 rounding of the
  probabilities and of the output).
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tpu.cases import CASES, MODEL_LINES, run_case

pytestmark = [
    pytest.mark.tpu,
    pytest.mark.skipif(jax.default_backend() != "tpu", reason="the TPU lane runs on a TPU (make test-tpu)"),
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIN_DB = 80.0


def _psnr(got: np.ndarray, want: np.ndarray) -> float:
    mse = float(np.mean((got.astype(np.float64) - want) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


def _snr(got: np.ndarray, want: np.ndarray) -> float:
    err = float(np.sum((got.astype(np.float64) - want) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(want.astype(np.float64) ** 2)) / err)


@pytest.fixture(scope="session")
def lane_dir(tmp_path_factory) -> str:
    given = os.environ.get("VIDAX_TPU_LANE")
    if given:
        if not os.path.isfile(os.path.join(given, "manifest.json")):
            pytest.fail(
                f"VIDAX_TPU_LANE={given}: no manifest.json there; build it with python -m tests.tpu.checkpoints {given}"
            )
        return given
    from tests.tpu.checkpoints import build_all  # needs torch and diffusers (the test extras)

    path = str(tmp_path_factory.mktemp("tpu_lane"))
    build_all(path)
    return path


class _CpuRuns:
    """The CPU side: the cases this session runs, in a CPU-only subprocess started at once so that
    it runs while the TPU compiles; :meth:`folder` waits for it."""

    def __init__(self, lane_dir: str, out: str, names: list[str]):
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        env.update(JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([ROOT] + sys.path))
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.tpu.cases", lane_dir, out, *names],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def folder(self) -> str:
        _, err = self.proc.communicate()
        assert self.proc.returncode == 0, err[-4000:]
        return self.out


def _selected_cases(session) -> list[str]:
    """The cases whose CPU outputs the selected tests compare with (``-k`` runs a part of the
    lane, e.g. one device call's worth)."""
    names = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.originalname == "test_case_float32_equals_cpu":
            names.add(params["case"])
        elif item.originalname == "test_fast_precision_is_what_the_highest_default_prevents":
            names.add("wan_mesh")
    return [n for n in CASES if n in names]


@pytest.fixture(scope="session")
def cpu_runs(lane_dir, tmp_path_factory, request) -> _CpuRuns:
    return _CpuRuns(lane_dir, str(tmp_path_factory.mktemp("cpu_outputs")), _selected_cases(request.session))


def _compare(name: str, got: dict, cpu_outputs: str) -> dict[str, float]:
    want = np.load(os.path.join(cpu_outputs, f"{name}.npz"))
    assert set(got) == set(want.files)
    db = {"frames": _psnr(got["frames"], want["frames"])}
    if "audio" in got:
        db["audio"] = _snr(got["audio"], want["audio"])
    return db


@pytest.mark.parametrize("case", CASES)
def test_case_float32_equals_cpu(case, lane_dir, cpu_runs):
    """Each model line and feature case in float32 on the TPU equals the CPU run (>= 80 dB)."""
    with jax.default_matmul_precision("bfloat16"):
        got = run_case(case, lane_dir)
    db = _compare(case, got, cpu_runs.folder())
    print(f"float32 TPU vs CPU, {case}: " + ", ".join(f"{k} {v:.1f} dB" for k, v in db.items()))
    assert min(db.values()) >= MIN_DB, f"{case}: below {MIN_DB} dB: {db}"


def test_fast_precision_is_what_the_highest_default_prevents(lane_dir, cpu_runs):
    """``matmul_precision="default"`` on the TPU gives bfloat16-like accuracy on a float32 run (the
    reason "highest" is the default): far below the default's agreement with the CPU."""
    from tests.tpu.cases import load_case

    pipe, call = load_case("wan_mesh", lane_dir, matmul_precision="default")
    runs = {}
    for precision in ("default", "highest"):
        pipe.matmul_precision = precision
        frames = np.asarray(pipe(**call, progress=False).frames)
        runs[precision] = _compare("wan_mesh", {"frames": frames}, cpu_runs.folder())["frames"]
    fast, full = runs["default"], runs["highest"]
    print(f"tiny Wan float32 vs CPU: matmul_precision default {fast:.1f} dB, highest {full:.1f} dB")
    assert full >= MIN_DB and fast < full - 20


@pytest.mark.parametrize("case", MODEL_LINES)
def test_model_line_in_bfloat16_is_finite(case, lane_dir):
    """A bfloat16 run of each model line, to the final latents (the VAEs stay float32, as in
    float32 runs, and were decoded there)."""
    got = run_case(case, lane_dir, dtype="bfloat16", output_type="latent")
    bad = {k: int((~np.isfinite(v)).sum()) for k, v in got.items() if not np.isfinite(v).all()}
    assert not bad, f"{case}: NaN/Inf in the bfloat16 run: {bad}"


def test_streamed_and_mesh_runs_equal_the_resident_one_on_the_tpu(lane_dir):
    """Blocks streamed from pinned_host and the (1, 1, 1) mesh compute what the resident,
    mesh-free pipeline computes on the TPU (the same programs but for the block loop's split)."""
    import vidax
    from tests.tpu.cases import WAN_CALL, run_case, tiny_wan

    plain = vidax.load_pipeline(tiny_wan(lane_dir), progress=False)(**WAN_CALL, progress=False).frames
    for name in ("wan_streamed", "wan_mesh"):
        got = run_case(name, lane_dir)["frames"]
        assert _psnr(got, plain) >= 120.0, name


def _attention_inputs(dtype, b=2, lq=333, lk=333, n=4, n_kv=4, d=64, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    q = jax.random.normal(keys[0], (b, lq, n, d), jnp.float32).astype(dtype)
    k = jax.random.normal(keys[1], (b, lk, n_kv, d), jnp.float32).astype(dtype)
    v = jax.random.normal(keys[2], (b, lk, n_kv, d), jnp.float32).astype(dtype)
    return q, k, v


ATTENTION_CASES = {
    "plain": dict(),
    "long": dict(lq=2304, lk=2304),
    "padding": dict(segments="padding"),
    "general_segments": dict(segments="mask"),
    "causal_lq_lt_lk": dict(lq=100, lk=333, causal=True),
    "bias": dict(bias=True),
    "gqa": dict(n=8, n_kv=2),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
@pytest.mark.parametrize("impl", ["pallas_tpu", "blockwise"])
def test_attention_implementations_equal_xla(impl, case, dtype):
    from vidax.nn.attention import SegmentIds, dot_product_attention

    spec = dict(ATTENTION_CASES[case])
    segments, causal, bias = spec.pop("segments", None), spec.pop("causal", False), spec.pop("bias", False)
    q, k, v = _attention_inputs(jnp.dtype(dtype), **spec)
    b, lq, lk = q.shape[0], q.shape[1], k.shape[1]
    kw = dict(causal=causal)
    if segments == "padding":
        kw["segment_ids"] = SegmentIds.for_padding(b, lq, lk, jnp.array([lq, lq - 40]), jnp.array([lk, lk - 77]))
    elif segments == "mask":
        mask = np.random.default_rng(1).random((b, lk)) > 0.3
        kw["segment_ids"] = SegmentIds.for_mask(jnp.asarray(mask))
    if bias:
        kw["bias"] = jax.random.normal(jax.random.PRNGKey(9), (1, q.shape[2], lq, lk), jnp.float32)
    want = dot_product_attention(q, k, v, implementation="xla", **kw).astype(jnp.float32)
    got = dot_product_attention(q, k, v, implementation=impl, **kw).astype(jnp.float32)
    if segments == "mask":  # padded queries' rows are unspecified on pallas_tpu (module docstring)
        keep = jnp.asarray(mask)[:, :, None, None]
        want, got = want * keep, got * keep
    err = float(jnp.max(jnp.abs(got - want)))
    assert err <= (1e-4 if dtype == "float32" else 2e-2), f"{impl} {case} {dtype}: max |diff| {err:.2e}"
