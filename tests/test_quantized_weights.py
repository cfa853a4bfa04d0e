"""8-bit weights (int8 / fp8 kernels with per-output-channel scales) and the quantized files users
have: fp8 "scaled" safetensors and GGUF transformers in the original repositories' layouts."""

import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity.helpers import psnr
from vidax.errors import CheckpointError, InputError
from vidax.nn.layers import Linear
from vidax.nn.quant import quantizable_kernels
from vidax.registry import registry
from vidax.weights.component import load_component
from vidax.weights.loader import KeyRules
from vidax.weights.safetensors_io import CheckpointReader, save_safetensors

CALL = dict(prompt="a red fox", height=32, width=32, num_frames=5, num_inference_steps=2, progress=False)


def _flat(module):
    return {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(module))}


def _at(module, path):
    for p in path:
        module = module[p] if isinstance(p, int) else getattr(module, p)
    return module


@pytest.fixture(scope="module")
def transformers(ckpt):
    """The embedded tiny Wan transformer in bfloat16 and with int8 / fp8 kernels."""
    folder = os.path.join(ckpt, "transformer")
    return {
        w: load_component("WanTransformer3DModel", folder, jnp.bfloat16, weights=w)
        for w in (None, "int8", "float8_e4m3fn")
    }, folder


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3fn"])
def test_per_layer_error_within_the_format_bound(transformers, fmt):
    """Each quantized Linear's output against the bf16 model's, within the bound the format
    gives, element by element.

    Per output channel j the stored weight is ``q_ij s_j``. int8 rounds ``W/s`` to the nearest
    integer: ``|W - q s| <= s/2``. float8_e4m3fn has 3 mantissa bits: ``|W - q s| <= 2^-4 |W|``
    for normal values, ``<= 2^-10 s`` in its subnormal range. So ``|Δy_j| <= Σ_i |x_i|
    |ΔW_ij|``, plus the bf16 model's own rounding of W (``2^-9 |W|``, taken as 2^-8) and of
    both outputs (``2^-8 |y|`` each). A wrong scale axis, a missing scale or a transposed kernel
    breaks the bound by orders of magnitude."""
    models, _ = transformers
    ref, q = models[None], models[fmt]
    paths = quantizable_kernels(q, registry().component("WanTransformer3DModel").fp32())
    assert len(paths) >= 10  # every block projection and FFN, the text / time / output linears
    fq, fr = _flat(q), _flat(ref)
    x = np.random.default_rng(3).standard_normal((5, 1024)).astype(np.float32)
    worst = 0.0
    for path in paths:
        kq, s, w = (
            np.asarray(fq[path]),
            np.asarray(fq[path[:-1] + ("kernel_scale",)]),
            np.asarray(fr[path], np.float32),
        )
        assert kq.dtype == np.dtype(fmt)
        layer_r, layer_q = _at(ref, path[:-1]), _at(q, path[:-1])
        if kq.ndim == 3:  # a stacked layer: its first one, as a plain Linear
            kq, s, w = kq[0], s[0], w[0]
        d_in, d_out = w.shape
        one_r = Linear(d_in, d_out, use_bias=False, dtype=layer_r.dtype, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        one_q = Linear(d_in, d_out, use_bias=False, dtype=layer_q.dtype, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        one_r.kernel.set_value(jnp.asarray(w, layer_r.kernel.get_value().dtype))
        one_q.kernel = one_q.kernel.replace(jnp.asarray(kq))
        one_q.kernel_scale = nnx.Param(jnp.asarray(s))
        xs = x[:, :d_in]
        yr = np.asarray(one_r(jnp.asarray(xs)), np.float32)
        yq = np.asarray(one_q(jnp.asarray(xs)), np.float32)
        if fmt == "int8":
            dw = np.broadcast_to(s / 2, w.shape)
        else:
            dw = np.maximum(np.abs(w) * 2.0**-4, s * 2.0**-10)
        bound = np.abs(xs) @ (dw + np.abs(w) * 2.0**-8) + 2.0**-8 * (np.abs(yr) + np.abs(yq)) + 1e-6
        assert np.all(np.abs(yq - yr) <= bound), path
        worst = max(worst, float(np.max(np.abs(yq - yr) / bound)))
    print(f"{fmt}: largest per-layer error {worst:.2f} of its bound")


def test_quantized_kernels_are_8_bit_and_policy_kept(transformers):
    models, _ = transformers
    q = _flat(models["int8"])
    assert q[("blocks", "attn1", "to_q", "kernel")].dtype == np.int8
    assert q[("blocks", "attn1", "to_q", "kernel_scale")].shape == (2, 64)  # (layers, D_out)
    # The precision policy's float32 linears (the timestep MLP) stay float32, unquantized.
    assert q[("condition_embedder", "time_embedder", "linear_1", "kernel")].dtype == np.float32
    assert ("condition_embedder", "time_embedder", "linear_1", "kernel_scale") not in q


def test_pipeline_psnr_int8_fp8(ckpt):
    """End to end against the bf16 pipeline, same seed: printed, and far above what unrelated
    videos of this model score."""
    pipe = vidax.load_pipeline(ckpt, dtype="bfloat16")
    ref, other = pipe(seed=0, **CALL).frames, pipe(seed=1, **CALL).frames
    base = psnr(ref, other)
    for fmt in ("int8", "fp8"):
        got = vidax.load_pipeline(ckpt, dtype="bfloat16", weight_dtype=fmt)(seed=0, **CALL).frames
        value = psnr(got, ref)
        print(f"{fmt} weights vs bf16 weights: {value:.1f} dB (another seed: {base:.1f} dB)")
        # measured 45.9 dB int8, 42.0 dB fp8 (bf16 vs fp32 on this model: ~45 dB).
        assert value >= 35.0 and base < 30.0


def test_weight_format_refused_in_one_line(ckpt):
    with pytest.raises(InputError) as e:
        vidax.load_pipeline(ckpt, weight_dtype="int4")
    assert str(e.value).startswith("weight_dtype='int4' is not a weight format") and "\n" not in str(e.value)
    with pytest.raises(
        InputError, match="weight_dtype='bf16' is a dtype, not a weight format .* the weights' dtype is dtype="
    ):  # it was taken as none: a flag that did nothing
        vidax.load_pipeline(ckpt, weight_dtype="bf16")
    with pytest.raises(InputError, match="transformer='nope.bin' is not a .gguf or .safetensors file"):
        vidax.load_pipeline(ckpt, transformer="nope.bin")


def test_transformer_path_checked_in_one_line(ckpt, tmp_path, monkeypatch):
    """``transformer=``: a missing .gguf is said to be missing (not of a wrong suffix), a folder
    to be a folder, a non-path named with what is valid; ``~`` is expanded and the suffix is
    read in any case. All before any weight is read."""
    from vidax.checkpoint import Checkpoint
    from vidax.pipelines.weight_formats import with_weights

    for value, message in (
        ("nope.gguf", "transformer='nope.gguf': no such file"),
        (
            str(tmp_path),
            f"transformer={str(tmp_path)!r} is a folder without a config.json; give one .gguf or .safetensors "
            "file, or a transformer folder in diffusers' layout (config.json and its safetensors)",
        ),
        (123, "transformer=123 is not a path (int); give one .gguf or .safetensors file's path (str or os.PathLike)"),
        (
            ["a.gguf"],
            "transformer=['a.gguf'] is not a path (list); give one .gguf or .safetensors file's path "
            "(str or os.PathLike)",
        ),
    ):
        with pytest.raises(InputError) as e:
            vidax.load_pipeline(ckpt, transformer=value)
        assert str(e.value) == message
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "x.GGUF").write_bytes(b"")
    (tmp_path / "y.SafeTensors").write_bytes(b"")
    opened = Checkpoint.open(ckpt)
    assert with_weights(opened, transformer="~/x.GGUF").files["transformer"] == str(tmp_path / "x.GGUF")
    assert with_weights(opened, transformer=tmp_path / "y.SafeTensors").files["transformer"] == str(
        tmp_path / "y.SafeTensors"
    )


# ------------------------------------------------------------------------------ fp8 scaled


def _fp8_folder(src, dst, drop_scale=None, nan_at=None):
    """The transformer of ``src`` with every 2-D weight float8 + a scale: per tensor under
    ``scale_weight`` for half of them, per row under ``weight_scale`` for the others, with
    ``input_scale`` activation scales beside them (``nan_at``: that weight gets a NaN)."""
    reader = CheckpointReader(src)
    out, expect = {}, {}
    rng = np.random.default_rng(0)
    for i, key in enumerate(sorted(reader.keys())):
        w = np.asarray(reader.get(key), np.float32)
        if w.ndim != 2 or not key.endswith(".weight"):
            out[key] = w
            continue
        stem = key[: -len("weight")]
        # scale >= max |w| / 448 (float8_e4m3fn's largest value): w / scale never overflows to NaN
        scale = (
            np.float32(rng.uniform(1.0, 2.0) * np.abs(w).max() / 448)
            if i % 2
            else (rng.uniform(1.0, 2.0, (w.shape[0], 1)) * np.abs(w).max(1, keepdims=True) / 448).astype(np.float32)
        )
        v = (w / scale).astype(ml_dtypes.float8_e4m3fn)
        if key == nan_at:
            v.reshape(-1)[1] = np.nan
        out[key] = v
        if key != drop_scale:
            out[stem + ("scale_weight" if i % 2 else "weight_scale")] = np.asarray(scale, np.float32).reshape(
                () if i % 2 else (-1,)
            )
        out[stem + "input_scale"] = np.float32(1.0)
        expect[key] = v.astype(np.float32) * scale
    os.makedirs(dst, exist_ok=True)
    save_safetensors(out, os.path.join(dst, "diffusion_pytorch_model.safetensors"))
    with open(os.path.join(src, "config.json")) as f, open(os.path.join(dst, "config.json"), "w") as g:
        g.write(f.read())
    return expect


def test_fp8_scaled_files_both_spellings(transformers, tmp_path):
    _, folder = transformers
    expect = _fp8_folder(folder, str(tmp_path / "fp8"))
    model = load_component("WanTransformer3DModel", str(tmp_path / "fp8"), jnp.float32)
    flat = _flat(model)
    rules = KeyRules(stacked=("blocks",))
    assert len(expect) >= 20  # both spellings, per-tensor and per-row scales
    assert all(np.isfinite(want).all() for want in expect.values())  # assert_array_equal takes NaN == NaN
    for key, want in expect.items():
        path, layer = rules.split(key)
        got = np.asarray(flat[path[:-1] + ("kernel",)])
        np.testing.assert_array_equal(got if layer is None else got[layer], want.T)


def test_fp8_weight_without_scale_refused(transformers, tmp_path):
    _, folder = transformers
    _fp8_folder(folder, str(tmp_path / "fp8"), drop_scale="blocks.0.attn2.to_k.weight")
    with pytest.raises(CheckpointError) as e:
        load_component("WanTransformer3DModel", str(tmp_path / "fp8"), jnp.float32)
    assert "'blocks.0.attn2.to_k.weight' has no scale" in str(e.value) and "\n" not in str(e.value)


def test_fp8_weight_with_nan_refused(transformers, tmp_path):
    _, folder = transformers
    _fp8_folder(folder, str(tmp_path / "fp8"), nan_at="blocks.0.attn2.to_k.weight")
    with pytest.raises(CheckpointError) as e:
        load_component("WanTransformer3DModel", str(tmp_path / "fp8"), jnp.float32)
    assert "tensor 'blocks.0.attn2.to_k.weight' holds 1 NaN or Inf value(s) once dequantized" in str(e.value)
    assert "diffusion_pytorch_model.safetensors" in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ GGUF

#: Byte offsets of the float16 fields (scales, minimums) in one block of each GGUF type.
_F16_FIELDS = {
    "Q8_0": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
    "IQ4_NL": (0,),
    "IQ4_XS": (0,),
}
#: Their magnitude: the largest code product of the type times it stays O(0.1).
_F16_SIZE = {
    "Q8_0": 1e-3,
    "Q4_0": 1e-2,
    "Q4_1": 1e-2,
    "Q5_0": 5e-3,
    "Q5_1": 5e-3,
    "Q2_K": 1e-3,
    "Q3_K": 1e-3,
    "Q4_K": 2e-4,
    "Q5_K": 1e-4,
    "Q6_K": 5e-5,
    "IQ4_NL": 1e-3,
    "IQ4_XS": 5e-5,
}
GGUF_TYPES = ("BF16", *_F16_FIELDS)


def _gguf_bytes(kind, w, rng):
    """A ``(rows, cols)`` tensor of GGUF type ``kind`` as its bytes ``(rows, n_bytes)``: random
    codes with float16 scales of a size that keeps the values O(0.1) (BF16: ``w`` itself)."""
    import gguf

    qtype = gguf.GGMLQuantizationType[kind]
    if kind == "BF16":
        return gguf.quants.quantize(np.asarray(w, np.float32), qtype)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = w.shape
    raw = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    for off in _F16_FIELDS[kind]:
        raw[:, off : off + 2] = (
            (rng.uniform(0.5, 1.0, (raw.shape[0], 1)) * _F16_SIZE[kind]).astype(np.float16).view(np.uint8)
        )
    return raw.reshape(rows, -1)


def _write_gguf(path, tensors):
    """``tensors``: name -> (array, GGUF type or None for F32)."""
    import gguf

    writer = gguf.GGUFWriter(path, arch="wan")
    for name, (arr, kind) in tensors.items():
        if kind is None:
            writer.add_tensor(name, np.ascontiguousarray(arr, np.float32))
        else:
            writer.add_tensor(name, arr, raw_dtype=gguf.GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def gguf_types(tmp_path_factory):
    """A GGUF file with a ``(3, 512)`` tensor of every type diffusers' loader reads (``w_<type>``)
    and a float32 one (``plain``); its path and tensors."""
    rng = np.random.default_rng(0)
    tensors = {f"w_{k}": (_gguf_bytes(k, rng.standard_normal((3, 512)) * 0.1, rng), k) for k in GGUF_TYPES}
    tensors["plain"] = (rng.standard_normal((4, 5)), None)
    path = str(tmp_path_factory.mktemp("gguf") / "types.gguf")
    _write_gguf(path, tensors)
    return path, tensors


def test_gguf_types_dequantize_as_diffusers(gguf_types):
    """Every GGUF type diffusers' loader reads gives the weights diffusers' loader gives."""
    import torch
    from diffusers.models.model_loading_utils import load_gguf_checkpoint
    from diffusers.quantizers.gguf.utils import SUPPORTED_GGUF_QUANT_TYPES, dequantize_gguf_tensor

    from vidax.weights.single_file import gguf_reader

    assert {t.name for t in SUPPORTED_GGUF_QUANT_TYPES} == set(GGUF_TYPES)  # no type left out
    path, tensors = gguf_types
    ours = gguf_reader(path)
    theirs = load_gguf_checkpoint(path)
    for name in tensors:
        want = dequantize_gguf_tensor(theirs[name])
        got = ours.get(name)
        assert got.shape == tuple(want.shape) and got.dtype == np.dtype(str(want.dtype).replace("torch.", ""))
        # The same float16 operations in the same order: equal up to how torch and numpy round a
        # float16 product (both once, to nearest): within one float16 ulp, measured equal.
        np.testing.assert_allclose(got.astype(np.float32), want.float().numpy(), rtol=2**-10, atol=0)
        assert np.abs(want.float().numpy()).max() > 0
    assert torch.is_tensor(want)


def test_gguf_blocks_kept_on_device_dequantize_bit_for_bit(gguf_types):
    """Each type's blocks, kept on the device as a kernel (:mod:`vidax.nn.gguf`), dequantize
    inside jit to the host's dequantized weight in float32 and in bfloat16, bit for bit (the
    same float16 operations: numpy and XLA's CPU each round every one once from float32), and a
    Linear holding them computes what the Linear holding the host's weight does."""
    import gguf

    from vidax.nn.gguf import BLOCKS, dequantize_kernel, keep_gguf
    from vidax.weights.single_file import gguf_reader

    path, _ = gguf_types
    reader = gguf_reader(path)
    assert BLOCKS == {k: gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[k]] for k in GGUF_TYPES}
    dtypes = (jnp.float32, jnp.bfloat16)
    blocks = {k: jnp.asarray(reader.raw(f"w_{k}").T) for k in GGUF_TYPES}  # (512 // block * size, 3) uint8
    got = jax.jit(lambda b: [[dequantize_kernel(b[k], k, d) for d in dtypes] for k in GGUF_TYPES])(blocks)
    for kind, values in zip(GGUF_TYPES, got):
        for dtype, value in zip(dtypes, values):
            want = reader.get(f"w_{kind}").T.astype(dtype)  # (512, 3): the kernel layout
            assert value.dtype == want.dtype and value.shape == want.shape == (512, 3), kind
            bits = np.uint16 if dtype == jnp.bfloat16 else np.uint32
            np.testing.assert_array_equal(np.asarray(value).view(bits), want.view(bits), kind)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 512))
    pairs = []
    for dtype in dtypes:  # bfloat16 on CPU: the float32-accumulating path
        plain = Linear(512, 3, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
        plain.kernel = plain.kernel.replace(jnp.asarray(reader.get("w_Q4_K").T, dtype))
        kept = keep_gguf(Linear(512, 3, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0)), {("kernel",): "Q4_K"})
        kept.kernel = kept.kernel.replace(jnp.asarray(reader.raw("w_Q4_K").T))
        assert kept.kernel_gguf == "Q4_K" and kept.kernel[...].dtype == jnp.uint8
        for m in (kept, plain):
            m.bias = m.bias.replace(jnp.asarray([0.5, -1.0, 2.0], dtype))
        pairs.append((kept, plain))
    for kept_y, plain_y in jax.jit(lambda ps, x: [(k(x), p(x)) for k, p in ps])(pairs, x):
        np.testing.assert_array_equal(np.asarray(kept_y), np.asarray(plain_y))


#: A Wan transformer whose linears take 256 (or 512) features, so the K-quant types (blocks of
#: 256) apply; one block; the text width is the reference text encoder's.
GG_TRANSFORMER = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=128,
    in_channels=12,
    out_channels=12,
    text_dim=20,
    freq_dim=256,
    ffn_dim=512,
    num_layers=1,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    image_dim=None,
    added_kv_proj_dim=None,
    rope_max_seq_len=1024,
)


def _original_keys(keys):
    """diffusers Wan keys -> the original repository's (the inverse of diffusers' conversion,
    checked against vidax's forward one)."""
    from vidax.models.wan.convert import SINGLE_FILE_RENAMES, single_file_keys

    out = {}
    for key in keys:
        orig = key
        for a, b in reversed(list(SINGLE_FILE_RENAMES.items())):
            orig = orig.replace(b, a)
        out[key] = orig
    assert single_file_keys(list(out.values())) == {v: k for k, v in out.items()}
    return out


@pytest.fixture(scope="module")
def gguf_wan(tmp_path_factory):
    """A tiny Wan checkpoint and a GGUF transformer file for it (original layout, a type per
    linear: every type diffusers reads), diffusers' pipeline with that file (from_single_file +
    GGUFQuantizationConfig, fp32), vidax's (load_pipeline(folder, transformer=FILE)), the call
    and diffusers' video."""
    import torch
    from diffusers import GGUFQuantizationConfig, WanPipeline, WanTransformer3DModel

    from tests.parity.helpers import randomize_torch_module
    from tests.parity.wan_reference import build_reference_wan_pipeline

    tmp_path = tmp_path_factory.mktemp("gguf_wan")
    path = str(tmp_path / "wan")
    build_reference_wan_pipeline(path)
    model = WanTransformer3DModel(**GG_TRANSFORMER).eval()
    randomize_torch_module(model, seed=11)
    model.save_pretrained(os.path.join(path, "transformer"), safe_serialization=True)
    rng = np.random.default_rng(1)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    names = _original_keys(state)
    tensors, types = {}, iter(GGUF_TYPES * 4)
    for key, value in state.items():
        kind = next(types) if value.ndim == 2 and value.shape[1] % 256 == 0 else None
        tensors[names[key]] = (_gguf_bytes(kind, value, rng), kind) if kind else (value, None)
    used = {k for _, k in tensors.values() if k}
    assert used == set(GGUF_TYPES)
    file = str(tmp_path / "wan-mixed.gguf")
    _write_gguf(file, tensors)

    gguf_model = WanTransformer3DModel.from_single_file(
        file,
        quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32),
        config=path,
        subfolder="transformer",
        torch_dtype=torch.float32,
    )
    ref = WanPipeline.from_pretrained(path, transformer=gguf_model, torch_dtype=torch.float32)
    latents = torch.randn(1, 12, 2, 4, 4, generator=torch.Generator().manual_seed(5))
    call = dict(
        prompt="a red fox",
        negative_prompt="blur",
        height=32,
        width=32,
        num_frames=5,
        num_inference_steps=2,
        guidance_scale=4.0,
        max_sequence_length=16,
    )
    with torch.no_grad():
        want = ref(latents=latents.clone(), output_type="np", **call).frames
    pipe = vidax.load_pipeline(path, dtype="float32", transformer=file)
    return dict(
        file=file,
        state=state,
        names=names,
        tensors=tensors,
        ref=ref,
        latents=latents,
        call=call,
        want=np.asarray(want),
        pipe=pipe,
    )


def test_gguf_wan_pipeline_matches_diffusers(gguf_wan):
    """A Wan GGUF transformer (original layout, a type per linear: every type diffusers reads)
    through vidax.load_pipeline(folder, transformer=FILE) and through diffusers'
    from_single_file + GGUFQuantizationConfig: the same video (fp32)."""
    file, state, names, tensors, want, pipe = (
        gguf_wan[k] for k in ("file", "state", "names", "tensors", "want", "pipe")
    )
    got = pipe(latents=gguf_wan["latents"].numpy(), progress=False, **gguf_wan["call"]).frames
    value = psnr(got, want)
    print(f"GGUF Wan pipeline vs diffusers: {value:.1f} dB")
    assert value >= 60.0  # measured 139.6 dB: fp32 summation order only
    # Every GGUF Linear weight stays the file's blocks on the device (uint8), but the two the
    # precision policy keeps float32 (the timestep MLP, dequantized on the host as diffusers
    # does); every type is among them.
    from vidax.weights.single_file import gguf_reader

    kept = {p: v for p, v in _flat(pipe.transformer).items() if v.dtype == jnp.uint8}
    typed = [k for k, (_, kind) in zip(state, tensors.values()) if kind]
    assert len(kept) == len([k for k in typed if not k.startswith("condition_embedder.time_embedder.")])
    assert {_at(pipe.transformer, p[:-1]).kernel_gguf for p in kept} == set(GGUF_TYPES)
    # The file's weights, not the folder's, are in the pipeline, and the kept blocks dequantize
    # inside the matmul to the host's dequantized values bit for bit.
    layer = pipe.transformer.blocks.attn1.to_k
    kernel = np.asarray(layer.dense_kernel())[0]
    key = "blocks.0.attn1.to_k.weight"
    assert tensors[names[key]][1] == layer.kernel_gguf and not np.allclose(kernel, state[key].T)
    np.testing.assert_array_equal(kernel, gguf_reader(file).get(names[key]).astype(np.float32).T)


def test_gguf_wan_with_loras_matches_diffusers(gguf_wan, caplog):
    """Two random diffusers-layout LoRAs (every Linear; the blocks' only) at weights 0.7 and
    -0.4 on the GGUF Wan: vidax densifies the kept GGUF kernels they touch (dequantized on the
    device, deltas added in float32) and gives the video of diffusers' pipeline with the same
    file and LoRAs (peft's unmerged LoRA layers around its GGUFLinear); unloading puts the
    blocks back, uint8, bit for bit, dequantized in the matmul again."""
    import torch

    from tests.test_lora import random_lora

    ref, pipe, call, latents = gguf_wan["ref"], gguf_wan["pipe"], gguf_wan["call"], gguf_wan["latents"]
    before = {p: np.asarray(v) for p, v in _flat(pipe.transformer).items()}
    kinds = {p: _at(pipe.transformer, p[:-1]).kernel_gguf for p, v in before.items() if v.dtype == np.uint8}
    first, second = random_lora(pipe, 7), random_lora(pipe, 8, blocks_only=True)
    for name, sd in (("a", first), ("b", second)):
        ref.load_lora_weights({k: torch.from_numpy(v) for k, v in sd.items()}, adapter_name=name)
    ref.set_adapters(["a", "b"], [0.7, -0.4])
    try:
        with torch.no_grad():
            want = ref(latents=latents.clone(), output_type="np", **call).frames
    finally:
        ref.unload_lora_weights()
    with caplog.at_level("INFO", logger="vidax.lora"):
        pipe.load_lora_weights(first, adapter_name="a")
        pipe.load_lora_weights(second, adapter_name="b")
        pipe.set_adapters(["a", "b"], [0.7, -0.4])
    got = pipe(latents=latents.numpy(), progress=False, **call).frames
    value = psnr(got, want)
    print(f"GGUF Wan + 2 LoRAs vs diffusers: {value:.1f} dB")
    assert psnr(want, gguf_wan["want"]) < 40.0  # the LoRAs change diffusers' video clearly
    assert value >= 60.0  # fp32: vidax adds the merged delta, diffusers the low-rank branch (rounding only)
    # every kept kernel was densified (the first LoRA touches every Linear), once, with its bytes said
    q = ("blocks", "attn1", "to_q", "kernel")
    assert _at(pipe.transformer, q[:-1]).kernel_gguf is None and _flat(pipe.transformer)[q].dtype == jnp.float32
    said = {
        r.getMessage().split(" kernel ")[1].split(" densified")[0]
        for r in caplog.records
        if "densified to float32 on the device: +" in r.getMessage()
    }
    assert said == {"/".join(map(str, p)) for p in kinds}
    pipe.unload_lora_weights()
    after = _flat(pipe.transformer)
    assert all(np.array_equal(np.asarray(after[p]), v) and after[p].dtype == v.dtype for p, v in before.items())
    assert {p: _at(pipe.transformer, p[:-1]).kernel_gguf for p in kinds} == kinds
    base = pipe(latents=latents.numpy(), progress=False, **call).frames
    assert psnr(base, gguf_wan["want"]) >= 60.0  # the step runs the blocks again, without the LoRAs


def test_gguf_kept_on_a_mesh_and_streamed(transformers, tmp_path, caplog):
    """The tiny Wan transformer as a Q8_0 GGUF file (its Linear weights quantized by the ``gguf``
    package): kept as blocks on a (data 4, tensor 2) mesh, split along the output channels
    (q/k/v column-parallel over ``tensor``), and with its blocks streamed from host memory,
    it computes what it computes on one device."""
    import gguf

    from vidax.parallel.chunked_step import streamed_call
    from vidax.parallel.mesh import make_mesh

    _, folder = transformers
    reader = CheckpointReader(folder)
    state = {k: np.asarray(reader.get(k), np.float32) for k in reader.keys()}
    names = _original_keys(state)
    q8 = {k for k, v in state.items() if v.ndim == 2 and v.shape[1] % 32 == 0}
    file = str(tmp_path / "wan-q8_0.gguf")
    _write_gguf(
        file,
        {
            names[k]: (gguf.quants.quantize(v, gguf.GGMLQuantizationType.Q8_0), "Q8_0") if k in q8 else (v, None)
            for k, v in state.items()
        },
    )
    load = lambda **kw: load_component("WanTransformer3DModel", folder, jnp.float32, file=file, **kw)  # noqa: E731
    with caplog.at_level("INFO", logger="vidax.weights.loader"):
        one = load()
    # the two the precision policy keeps float32 dequantized on the host, in one log line
    assert (
        "2 GGUF block-quantized tensor(s) dequantized on the host: 2 kept float32 by the precision policy "
        "(condition_embedder.time_embedder.linear_1.weight, condition_embedder.time_embedder.linear_2.weight)"
        in caplog.text
    )
    kept = {p for p, v in _flat(one).items() if v.dtype == jnp.uint8}
    # each of the 10 block Linears once (a stack of 2 layers), less the float32 timestep MLP
    assert len(kept) == len(q8) - 10 - 2 and ("blocks", "ffn", "net", 2, "kernel") in kept
    # The bytes it holds, counted before loading: exactly by `vidax inspect --mesh` (shapes);
    # by the staging plan (the file's headers) but for the float32 timestep MLP, which it
    # counts at its Q8_0 bytes in the file (its 2 kernels: 24 KiB of 48 KiB float32).
    from vidax.parallel.placement import per_device_bytes
    from vidax.pipelines.staging import component_bytes
    from vidax.weights.single_file import gguf_reader, open_single_file

    spec = registry().component("WanTransformer3DModel")
    cfg = spec.config_class().from_json_file(os.path.join(folder, "config.json"))
    held = sum(v.size * v.dtype.itemsize for v in _flat(one).values())
    make = lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0))  # noqa: E731
    assert per_device_bytes(make, spec.axes(), {}, jnp.float32, spec.fp32(), "Q8_0") == held
    mlp = [f"condition_embedder.time_embedder.linear_{i}.weight" for i in (1, 2)]
    infos = [gguf_reader(file).info(names[k]) for k in mlp]
    file_bytes = sum(i.end - i.start for i in infos)
    planned = component_bytes(open_single_file(file, spec), jnp.float32)["total"]
    assert (
        planned
        == held - sum(state[k].size * 4 for k in mlp) + file_bytes
        < 0.4 * component_bytes(folder, jnp.float32)["total"]
    )
    # and the memory check before loading a pipeline with transformer=FILE counts the file so
    from vidax.checkpoint import Checkpoint
    from vidax.pipelines.base import checkpoint_weight_bytes
    from vidax.pipelines.weight_formats import with_weights

    ckpt = with_weights(Checkpoint.open(os.path.dirname(folder)), transformer=file)
    assert checkpoint_weight_bytes(ckpt, jnp.float32, ["transformer"]) == planned
    # A LoRA on a kept kernel lands on its values' shape (merged by densifying it, see
    # test_gguf_wan_with_loras_matches_diffusers); in streamed blocks it is refused, naming it.
    from vidax.lora.formats import LoraModule
    from vidax.lora.targets import transformer_targets

    lora = {
        "blocks.0.attn1.to_q": LoraModule(
            down=np.ones((4, 64), np.float32),
            up=np.ones((64, 4), np.float32),
            keys=["blocks.0.attn1.to_q.lora_A.weight"],
        )
    }
    terms, problems = transformer_targets(one, spec, cfg).terms(lora)
    assert not problems and [t.target.shape for t in terms] == [(64, 64)]
    streamed = load(offload=1)
    terms, problems = transformer_targets(streamed, spec, cfg).terms(lora)
    assert not terms and problems == [
        "blocks.0.attn1.to_q.lora_A.weight: blocks.0.attn1.to_q.weight is kept as "
        "GGUF Q8_0 blocks in streamed blocks, which vidax does not merge a LoRA into "
        "(load without offload=/--offload-blocks, with weight_dtype='int8' / --weights "
        "int8, or from safetensors)"
    ]
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 6, 8, 16))
    t = np.array([500.0, 300.0], np.float32)
    ctx = jax.random.normal(jax.random.PRNGKey(1), (2, 7, 64))
    call = jax.jit(lambda m, *a: m(*a))
    ref = np.asarray(call(one, x, t, ctx))
    sharded = load(mesh=make_mesh(4, 2, 1))
    q = _flat(sharded)[("blocks", "attn1", "to_q", "kernel")]
    assert q.dtype == jnp.uint8 and tuple(q.sharding.spec) == (None, None, "tensor")
    # fp32; the sharded matmuls sum in another order: float32 rounding only
    np.testing.assert_allclose(np.asarray(call(sharded, x, t, ctx)), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(streamed_call(streamed, x, t, ctx)), ref)
    # A LoRA on the mesh: the densified kernels keep their kernels' sharding, and compute what
    # they compute on one device (float32 rounding only).
    from vidax.lora.adapters import LoraAdapters

    rng = np.random.default_rng(3)
    sd = {
        f"transformer.blocks.{i}.{m}.lora_{ab}.weight": rng.standard_normal(shape).astype(np.float32) * 0.3
        for i in range(2)
        for m in ("attn1.to_q", "attn1.to_out.0")
        for ab, shape in (("A", (4, 64)), ("B", (64, 4)))
    }
    for module in (one, sharded):
        LoraAdapters([("transformer", module, spec, cfg)]).load(sd)
    q = _flat(sharded)[("blocks", "attn1", "to_q", "kernel")]
    assert q.dtype == jnp.float32 and tuple(q.sharding.spec) == (None, None, "tensor")
    lora_ref = np.asarray(call(one, x, t, ctx))
    assert np.abs(lora_ref - ref).max() > 1e-2  # the LoRA matters
    np.testing.assert_allclose(np.asarray(call(sharded, x, t, ctx)), lora_ref, rtol=1e-5, atol=1e-5)


#: The GGUF types of each block Linear of the 2-layer GGUF Wan below, (layer 0, layer 1): stacks
#: mixing types as Q4_K_M / Q5_K_M files do (Q4_K with Q6_K), blocks of 32 with blocks of 256,
#: BF16 (the widest) with a K-quant; one stack of a single type (kept as before: no index).
MIXED = {
    "attn1.to_q": ("Q4_K", "Q6_K"),
    "attn1.to_k": ("Q6_K", "Q4_K"),
    "attn1.to_v": ("Q8_0", "Q5_K"),
    "attn1.to_out.0": ("Q4_K", "Q4_K"),
    "attn2.to_q": ("Q5_0", "Q2_K"),
    "attn2.to_k": ("BF16", "Q3_K"),
    "attn2.to_v": ("IQ4_XS", "Q4_1"),
    "attn2.to_out.0": ("Q5_1", "IQ4_NL"),
    "ffn.net.0.proj": ("Q4_K", "Q6_K"),
    "ffn.net.2": ("Q6_K", "Q4_0"),
}


@pytest.fixture(scope="module")
def gguf_wan_mixed(tmp_path_factory):
    """A 2-layer tiny Wan transformer (diffusers, random) as a GGUF file whose block Linears mix
    types across the layers (:data:`MIXED`; every other tensor F32); diffusers' model from that
    file (from_single_file + GGUFQuantizationConfig, fp32), its output on random inputs, and
    vidax's transformer loaded from the file."""
    import torch
    from diffusers import GGUFQuantizationConfig, WanTransformer3DModel

    from tests.parity.helpers import randomize_torch_module

    tmp_path = tmp_path_factory.mktemp("gguf_wan_mixed")
    folder = str(tmp_path / "transformer")
    model = WanTransformer3DModel(**{**GG_TRANSFORMER, "num_layers": 2}).eval()
    randomize_torch_module(model, seed=12)
    model.save_pretrained(folder, safe_serialization=True)
    rng = np.random.default_rng(2)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    names = _original_keys(state)
    tensors = {}
    for key, value in state.items():
        parts = key.split(".")
        typed = parts[0] == "blocks" and parts[-1] == "weight"
        kind = MIXED.get(".".join(parts[2:-1]), (None, None))[int(parts[1])] if typed else None
        tensors[names[key]] = (_gguf_bytes(kind, value, rng), kind) if kind else (value, None)
    file = str(tmp_path / "wan-mixed-stacks.gguf")
    _write_gguf(file, tensors)
    ref = WanTransformer3DModel.from_single_file(
        file,
        quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32),
        config=str(tmp_path),
        subfolder="transformer",
        torch_dtype=torch.float32,
    )
    g = np.random.default_rng(4)
    x = g.standard_normal((2, 12, 2, 4, 4), dtype=np.float32)
    t = np.array([37.5, 912.25], np.float32)
    ctx = g.standard_normal((2, 7, 20), dtype=np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(ctx), return_dict=False)[0]
    return dict(
        folder=folder,
        file=file,
        names=names,
        state=state,
        want=want.numpy().transpose(0, 2, 3, 4, 1),
        inputs=(x.transpose(0, 2, 3, 4, 1), t, ctx),
    )


def test_gguf_host_dequantization_says_why():
    """The log line of the GGUF tensors dequantized on the host gives each its true reason: a
    stack whose layers mix a float type (F16) with block types is one (a trial's mixed file was
    said to be "not a Linear weight, or kept float32", neither true); from the file's header
    (a stub reader here: no tensor is read)."""
    from types import SimpleNamespace

    from vidax.nn.gguf import kept_candidates
    from vidax.weights.loader import host_reasons

    infos = {
        "q.0": ("Q4_K", 2),
        "q.1": ("F16", 2),
        "k.0": ("Q8_0", 2),
        "k.1": ("Q8_0", 2),
        "t": ("Q8_0", 2),
        "b.0": ("Q8_0", 1),
        "b.1": ("Q8_0", 1),
        "o.0": ("Q4_K", 2),
        "o.1": ("Q6_K", 2),
    }
    reader = SimpleNamespace(
        info=lambda key: SimpleNamespace(stored=infos[key][0], shape=(32,) * infos[key][1]), raw=None
    )
    plan = {
        ("blocks", "q", "kernel"): [(1, "q.1"), (0, "q.0")],
        ("blocks", "k", "kernel"): [(0, "k.0"), (1, "k.1")],
        ("time", "kernel"): [(None, "t")],
        ("blocks", "b", "bias"): [(0, "b.0"), (1, "b.1")],
        ("blocks", "o", "kernel"): [(0, "o.0"), (1, "o.1")],
    }
    kinds, host = kept_candidates(reader, plan, keep_fp32=["^time"])
    assert kinds == {("blocks", "k", "kernel"): "Q8_0", ("blocks", "o", "kernel"): ("Q4_K", "Q6_K")}
    assert host_reasons(host) == (
        "2 not a Linear weight (b.0, b.1); 1 in stacks whose layers mix F16 with block types "
        "(q.0); 1 kept float32 by the precision policy (t)"
    )


def test_gguf_stacks_mixing_types_kept_on_device(gguf_wan_mixed, caplog):
    """A GGUF Wan whose stacked Linears mix types across layers (Q4_K with Q6_K...) keeps every
    one as the file's blocks on the device (uint8, padded to the widest type's rows, a per-layer
    type index), as diffusers' GGUFParameter keeps each layer's own type: no tensor is
    dequantized on the host; each layer dequantizes to the host's values bit for bit; the
    transformer computes what the host-dequantized one computes and what diffusers' computes
    from the same file; streamed blocks, a mesh and a LoRA work on it; the staging plan counts
    the padded bytes."""
    from vidax.lora.adapters import LoraAdapters
    from vidax.nn.gguf import BLOCKS
    from vidax.parallel.chunked_step import streamed_call
    from vidax.parallel.mesh import make_mesh
    from vidax.pipelines.staging import component_bytes
    from vidax.weights.single_file import gguf_reader, open_single_file

    folder, file, names, state = (gguf_wan_mixed[k] for k in ("folder", "file", "names", "state"))
    load = lambda **kw: load_component("WanTransformer3DModel", folder, jnp.float32, file=file, **kw)  # noqa: E731
    with caplog.at_level("INFO", logger="vidax.weights.loader"):
        kept = load()
    assert "dequantized on the host" not in caplog.text  # the mixed stacks were, in one line, before
    # The transformer as loaded before: the mixed stacks' kernels as the host dequantizes them
    # (gguf_dequant in numpy), the single-type one kept.
    host = load()
    reader = gguf_reader(file)
    flat = _flat(kept)
    for name, types in MIXED.items():
        path = ("blocks", *(int(p) if p.isdigit() else p for p in name.split(".")), "kernel")
        layer = _at(kept, path[:-1])
        values = np.stack([reader.get(names[f"blocks.{i}.{name}.weight"]).astype(np.float32).T for i in (0, 1)])
        if types[0] != types[1]:
            before = _at(host, path[:-1])
            before.kernel, before.kernel_gguf = before.kernel.replace(jnp.asarray(values)), None
            before.kernel_gguf_index = nnx.data(None)
        d_in, d_out = values.shape[1:]
        rows = max(d_in // BLOCKS[k][0] * BLOCKS[k][1] for k in types)
        assert flat[path].dtype == jnp.uint8 and flat[path].shape == (2, rows, d_out), name
        if types[0] == types[1]:  # one type: as before, no index
            assert layer.kernel_gguf == types[0] and layer.kernel_gguf_index is None
        else:
            assert layer.kernel_gguf == tuple(sorted(types))
            assert [layer.kernel_gguf[i] for i in np.asarray(layer.kernel_gguf_index[...])] == list(types)
        np.testing.assert_array_equal(np.asarray(layer.dense_kernel()), values, name)
    call = jax.jit(lambda m, *a: m(*a))
    inputs = [jnp.asarray(a) for a in gguf_wan_mixed["inputs"]]
    got = np.asarray(call(kept, *inputs))
    # the same kernels' values in the same matmuls: the same bits
    np.testing.assert_array_equal(got, np.asarray(call(host, *inputs)))
    value = psnr(got, gguf_wan_mixed["want"], data_range=np.ptp(gguf_wan_mixed["want"]))
    print(f"GGUF Wan with mixed-type stacks vs diffusers (transformer output): {value:.1f} dB")
    assert value >= 60.0  # fp32: summation order only
    # The bytes the staging plan counts before loading: those the kept transformer holds (the
    # padding and the indices included).
    spec = registry().component("WanTransformer3DModel")
    held = sum(v.size * v.dtype.itemsize for v in flat.values())
    assert component_bytes(open_single_file(file, spec), jnp.float32)["total"] == held
    # and `vidax inspect FILE` says what the padding and the indices add to the file's bytes
    from vidax.weights.single_file import describe_single_file

    own = lambda k, d_in: d_in // BLOCKS[k][0] * BLOCKS[k][1]  # noqa: E731
    extra = sum(
        (
            flat[("blocks", *(int(p) if p.isdigit() else p for p in name.split(".")), "kernel")].shape[1]
            - own(k, state[f"blocks.0.{name}.weight"].shape[1])
        )
        * state[f"blocks.0.{name}.weight"].shape[0]
        + 4
        for name, types in MIXED.items()
        if types[0] != types[1]
        for k in types
    )
    assert (
        f"mixed-type stacks: 18 tensors in layer stacks whose layers mix types, kept padded to the widest type's "
        f"bytes: +{extra / 2**20:,.1f} MiB ({extra:,} B) on the device over the file"
    ) in describe_single_file(file)
    # streamed blocks: the same bits; on a (data 4, tensor 2) mesh, split along the output
    # channels: float32 rounding only (the sharded matmuls sum in another order)
    np.testing.assert_array_equal(np.asarray(streamed_call(load(offload=1), *inputs)), got)
    sharded = load(mesh=make_mesh(4, 2, 1))
    q = _flat(sharded)[("blocks", "attn1", "to_q", "kernel")]
    assert q.dtype == jnp.uint8 and tuple(q.sharding.spec) == (None, None, "tensor")
    np.testing.assert_allclose(np.asarray(call(sharded, *inputs)), got, rtol=1e-5, atol=1e-5)
    # A LoRA densifies a mixed stack's kernels to the host's values plus its deltas.
    cfg = spec.config_class().from_json_file(os.path.join(folder, "config.json"))
    rng = np.random.default_rng(3)
    sd = {
        f"transformer.blocks.{i}.{m}.lora_{ab}.weight": rng.standard_normal(shape).astype(np.float32) * 0.3
        for i in range(2)
        for m in ("attn1.to_q", "ffn.net.2")
        for ab, shape in (("A", (4, 256 if m == "attn1.to_q" else 512)), ("B", (256, 4)))
    }
    for module in (kept, host):
        LoraAdapters([("transformer", module, spec, cfg)]).load(sd)
    assert _at(kept, ("blocks", "attn1", "to_q")).kernel_gguf is None
    lora = np.asarray(call(kept, *inputs))
    assert np.abs(lora - got).max() > 1e-2  # the LoRA matters
    np.testing.assert_array_equal(lora, np.asarray(call(host, *inputs)))


def test_inspect_counts_a_mixed_gguf_per_device_as_it_loads(gguf_wan_mixed, tmp_path):
    """``vidax inspect FOLDER --transformer FILE.gguf [--mesh]`` gives the bytes of a GGUF file
    whose stacks mix types as the file loads into the folder's transformer (padded to the widest
    type in each stack), which the folder's own rows (one GGUF type throughout) cannot: those a
    device holds once it is loaded, on one device and on a (4, 2, 1) mesh. ``vidax inspect
    FILE.gguf --mesh`` (a single file: no config to build the transformer from) names the
    command that does this, and that command runs."""
    import json
    import re
    import shlex
    import shutil

    from typer.testing import CliRunner

    from vidax.cli import app
    from vidax.parallel.mesh import make_mesh

    folder, file = gguf_wan_mixed["folder"], gguf_wan_mixed["file"]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(folder, ckpt / "transformer")
    (ckpt / "model_index.json").write_text(
        json.dumps({"_class_name": "WanPipeline", "transformer": ["diffusers", "WanTransformer3DModel"]})
    )
    r = CliRunner().invoke(app, ["inspect", file, "--mesh", "4x2x1"])
    assert r.exit_code == 2, r.output
    command = re.search(r"run (vidax inspect FOLDER .*?), FOLDER a checkpoint folder of its model", r.stderr)
    assert command and "--transformer" in command.group(1), r.stderr
    r = CliRunner().invoke(app, [str(ckpt) if a == "FOLDER" else a for a in shlex.split(command.group(1))[1:]])
    assert r.exit_code == 0, r.output
    device = jax.devices()[0]
    for dtype, mesh, where in ((jnp.float32, None, "on one device"), (jnp.bfloat16, make_mesh(4, 2, 1), "per device")):
        loaded = _flat(load_component("WanTransformer3DModel", folder, dtype, file=file, mesh=mesh))
        held = sum(s.data.nbytes for a in loaded.values() for s in a.addressable_shards if s.device == device)
        name = jnp.dtype(dtype).name
        line = next(ln for ln in r.output.splitlines() if f"read from {file}, {where}" in ln)
        assert f"--dtype {name} {held / 2**20:,.1f} MiB ({held:,} B)" in line, (held, line)
    assert "padded to the widest type" in line


def test_scales_sharded_like_their_kernels(transformers):
    """On a (data 4, tensor 2) mesh: each scale is split as its kernel's output axis (q/k/v
    column-parallel: over ``tensor``; attention-out row-parallel: replicated), same values."""
    from vidax.parallel.mesh import make_mesh

    models, folder = transformers
    sharded = _flat(
        load_component("WanTransformer3DModel", folder, jnp.bfloat16, weights="int8", mesh=make_mesh(4, 2, 1))
    )
    single = _flat(models["int8"])
    q = ("blocks", "attn1", "to_q")
    assert tuple(sharded[q + ("kernel",)].sharding.spec) == (None, None, "tensor")
    assert tuple(sharded[q + ("kernel_scale",)].sharding.spec) == (None, "tensor")
    assert all(e is None for e in sharded[("blocks", "attn1", "to_out", 0, "kernel_scale")].sharding.spec)
    for path in (q + ("kernel",), q + ("kernel_scale",)):
        np.testing.assert_array_equal(np.asarray(sharded[path]), np.asarray(single[path]))


def test_staging_plan_and_inspect_count_8_bit_weights(transformers, ckpt):
    """Before loading: the staging plan's header count and ``vidax inspect --mesh``'s abstract
    count of int8 weights against what the loaded int8 transformer holds."""
    from vidax.checkpoint import Checkpoint
    from vidax.cli.inspecting import describe_mesh_plan
    from vidax.parallel.placement import per_device_bytes
    from vidax.pipelines.staging import component_bytes

    models, folder = transformers
    held = sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in _flat(models["int8"]).values())
    bf16 = sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in _flat(models[None]).values())
    planned = component_bytes(folder, jnp.bfloat16, ("blocks",), weights="int8")["total"]
    # The header count takes every 2-D weight as quantized and every other float as bfloat16;
    # the loaded model keeps its float32 parameters (timestep MLP, modulation tables): 11% of
    # this tiny model (measured), under 1% of a real one. Counting the 8-bit kernels at 2 bytes
    # would be 60% off.
    assert abs(planned - held) / held < 0.15 and held < 0.6 * bf16
    assert planned < 0.6 * component_bytes(folder, jnp.bfloat16, ("blocks",))["total"]
    # and the memory check before loading (checkpoint_weight_bytes) counts them so
    from vidax.pipelines.base import checkpoint_weight_bytes
    from vidax.pipelines.weight_formats import with_weights

    assert (
        checkpoint_weight_bytes(with_weights(Checkpoint.open(ckpt), "int8"), jnp.bfloat16, ["transformer"]) == planned
    )
    ckpt_ = Checkpoint.open(ckpt)
    spec = registry().component("WanTransformer3DModel")
    cfg = ckpt_.typed_config("transformer", spec.config_class())
    make = lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0))  # noqa: E731
    assert per_device_bytes(make, spec.axes(), {}, jnp.bfloat16, spec.fp32(), "int8") == held  # exact
    assert per_device_bytes(make, spec.axes(), {}, jnp.bfloat16, spec.fp32()) == bf16
    text = describe_mesh_plan(ckpt, "1x1x1")
    assert f"int8 {held / 2**20:,.1f} MiB" in text and f"bfloat16 {bf16 / 2**20:,.1f} MiB" in text
    q8 = per_device_bytes(make, spec.axes(), {}, jnp.bfloat16, spec.fp32(), "Q8_0")
    assert f"GGUF Q8_0 {q8 / 2**20:,.1f} MiB" in text and held < q8 < 0.6 * bf16  # Q8_0: 34 bytes per 32 values


WAN_ORIGINAL = [
    f"model.diffusion_model.{k}"
    for k in (
        "patch_embedding.weight",
        "patch_embedding.bias",
        "text_embedding.0.weight",
        "text_embedding.2.bias",
        "time_embedding.0.weight",
        "time_embedding.2.weight",
        "time_projection.1.weight",
        "head.head.weight",
        "head.modulation",
        "img_emb.proj.0.weight",
        "img_emb.proj.1.weight",
        "img_emb.proj.3.bias",
        "img_emb.proj.4.weight",
        "blocks.0.modulation",
        "blocks.0.norm3.weight",
        "blocks.0.self_attn.q.weight",
        "blocks.0.self_attn.o.bias",
        "blocks.0.self_attn.norm_k.weight",
        "blocks.0.cross_attn.k_img.weight",
        "blocks.0.cross_attn.v_img.bias",
        "blocks.0.cross_attn.norm_k_img.weight",
        "blocks.0.cross_attn.v.weight",
        "blocks.0.ffn.0.weight",
        "blocks.0.ffn.2.bias",
        "blocks.11.norm3.bias",
    )
]
LTX_ORIGINAL = [
    f"model.diffusion_model.{k}"
    for k in (
        "patchify_proj.weight",
        "adaln_single.emb.timestep_embedder.linear_1.weight",
        "adaln_single.linear.bias",
        "caption_projection.linear_1.weight",
        "scale_shift_table",
        "proj_out.weight",
        "transformer_blocks.0.attn1.q_norm.weight",
        "transformer_blocks.0.attn2.k_norm.weight",
        "transformer_blocks.0.attn1.to_out.0.weight",
        "transformer_blocks.0.ff.net.0.proj.weight",
        "transformer_blocks.3.scale_shift_table",
    )
] + ["vae.decoder.conv_in.conv.weight"]


@pytest.mark.parametrize("family,keys", [("wan", WAN_ORIGINAL), ("ltx", LTX_ORIGINAL)])
def test_single_file_keys_convert_as_diffusers(family, keys):
    """The original-layout key conversion of each family vidax reads single files of equals
    diffusers' (loaders/single_file_utils.py), which is what ``from_single_file`` loads."""
    import importlib

    import torch
    from diffusers.loaders import single_file_utils as sfu

    convert = {
        "wan": sfu.convert_wan_transformer_to_diffusers,
        "ltx": sfu.convert_ltx_transformer_checkpoint_to_diffusers,
    }[family]
    theirs = set(convert({k: torch.zeros(1) for k in keys}))
    ours = importlib.import_module(f"vidax.models.{family}.convert").single_file_keys(keys)
    assert {v for v in ours.values() if v is not None} == theirs
    assert len(theirs) == len([v for v in ours.values() if v is not None])  # none merged
