"""``matmul_precision``: the pipeline's float32 products run at the precision it names.

On the CPU every precision computes float32 in float32, so what these tests can see here is
that a call (its prompt encoding, every denoising step, the VAE decode) runs under the setting
(``jax.default_matmul_precision``, part of JAX's compile key) and that it is reported; the
accuracy it buys is measured on a TPU by the ``tpu`` lane (``tests/tpu/``).
"""

import jax
import pytest

import vidax
from vidax.errors import InputError
from vidax.nn.precision import (
    MATMUL_PRECISIONS,
    describe_matmul_precision,
    parse_matmul_precision,
    vae_matmul_precision,
)
from vidax.pipelines.prompts import encode_prompts

TINY = dict(height=32, width=32, num_frames=5, num_inference_steps=2, max_sequence_length=16, progress=False)


@pytest.fixture(scope="module")
def pipe(ckpt):
    return vidax.load_pipeline(ckpt)


def _seen_precisions(pipe, outer):
    """The ``jax_default_matmul_precision`` in force at each denoising step of a call made
    inside ``jax.default_matmul_precision(outer)`` (the suite pins "highest" globally, so the
    outer value proves the pipeline sets its own)."""
    seen = []
    with jax.default_matmul_precision(outer):
        out = pipe("a cat", seed=0, callback=lambda i, n: seen.append(jax.config.jax_default_matmul_precision), **TINY)
    return seen, out


def test_float32_is_float32_by_default_whatever_jax_default_is(pipe):
    assert pipe.matmul_precision == "highest"
    seen, out = _seen_precisions(pipe, "bfloat16")
    assert seen == ["highest"] * TINY["num_inference_steps"]
    assert "matmul precision    highest (float32 products in float32)" in out.stats.summary()


def test_fast_mode_is_opt_in_and_reported(pipe):
    try:
        pipe.matmul_precision = "default"
        seen, out = _seen_precisions(pipe, "highest")
        assert seen == ["default"] * TINY["num_inference_steps"]
        assert "matmul precision    default" in out.stats.summary()
    finally:
        pipe.matmul_precision = "highest"


def test_encode_prompt_runs_at_the_pipeline_precision(pipe, monkeypatch):
    seen = []
    encode = type(pipe).family.encode_text

    def spy(self, *a, **k):
        seen.append(jax.config.jax_default_matmul_precision)
        return encode(self, *a, **k)

    monkeypatch.setattr(type(pipe).family, "encode_text", spy)
    with jax.default_matmul_precision("bfloat16"):
        encode_prompts(pipe, ["a cat"], 16)
    assert seen == ["highest"]


@pytest.mark.parametrize("bad", ["fast", "float32", "", 3])
def test_bad_precision_is_one_error_naming_the_keyword(ckpt, bad):
    with pytest.raises(
        InputError, match=r"matmul_precision=.* is not a matmul precision; valid: highest, high, default"
    ):
        vidax.load_pipeline(ckpt, matmul_precision=bad)


def test_vae_decode_of_a_bfloat16_run_is_tf32_class_unless_asked(ckpt, pipe, monkeypatch):
    """Not given: float32 everywhere in a float32 run; in a bfloat16 run the (float32) VAE decode
    at "high", as diffusers' convolutions on a GPU (TF32). A precision given applies to all."""
    assert [vae_matmul_precision(None, d) for d in ("float32", "bfloat16", "float16")] == ["highest", "high", "high"]
    assert vae_matmul_precision("highest", "bfloat16") == "highest"
    assert vae_matmul_precision("default", "float32") == "default"
    assert pipe.vae_matmul_precision == pipe.matmul_precision == "highest"
    bf16 = vidax.load_pipeline(ckpt, dtype="bfloat16")
    assert (bf16.matmul_precision, bf16.vae_matmul_precision) == ("highest", "high")
    bf16.matmul_precision = "highest"  # asked for: the VAE too
    assert bf16.vae_matmul_precision == "highest"
    # The decode runs under the VAE's precision, the steps under the pipeline's.
    seen = []
    chunks = type(pipe.vae).decode_chunks

    def spy(self, z):
        seen.append(jax.config.jax_default_matmul_precision)
        return chunks(self, z)

    monkeypatch.setattr(type(pipe.vae), "decode_chunks", spy)
    monkeypatch.setattr(type(pipe), "vae_matmul_precision", property(lambda self: "high"))
    steps, out = _seen_precisions(pipe, "bfloat16")
    assert seen == ["high"] and steps == ["highest"] * TINY["num_inference_steps"]
    assert "highest (float32 products in float32); VAE decode high" in out.stats.summary()


def test_names_and_descriptions():
    assert [parse_matmul_precision(f" {p.upper()} ") for p in MATMUL_PRECISIONS] == list(MATMUL_PRECISIONS)
    assert (
        describe_matmul_precision("default", "tpu") == "default (float32 products as 1 bf16 pass on TPU, TF32 on GPU)"
    )
    assert "the CPU has no faster mode" in describe_matmul_precision("default", "cpu")


def test_cli_flag_reaches_the_pipeline_and_is_checked_before_loading(ckpt, tmp_path):
    from typer.testing import CliRunner

    from vidax.cli import app

    base = [
        "generate",
        "--checkpoint",
        ckpt,
        "-p",
        "a cat",
        "--height",
        "32",
        "--width",
        "32",
        "--num-frames",
        "5",
        "--num-inference-steps",
        "1",
        "--no-progress",
    ]
    r = CliRunner().invoke(app, base + ["--matmul-precision", "high", "--output", str(tmp_path / "a.npy")])
    assert r.exit_code == 0, r.output
    assert "matmul precision    high" in r.output
    r = CliRunner().invoke(app, base + ["--matmul-precision", "fast", "--output", str(tmp_path / "b.npy")])
    assert r.exit_code == 2 and "--matmul-precision 'fast' is not a matmul precision" in r.output
    assert "load " not in r.output and not (tmp_path / "b.npy").exists()
