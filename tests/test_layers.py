"""vidax.nn.layers.Linear / matmul: the float32-accumulating bf16 path on CPU."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from vidax.nn.kernels import xla_cpu_upcasts
from vidax.nn.layers import Linear, matmul

BF16_EPS = 2.0**-8  # one bf16 ulp, relative


def _pair(dtype, use_bias=True):
    kw = dict(use_bias=use_bias, dtype=dtype, param_dtype=dtype)
    ours, plain = Linear(37, 23, rngs=nnx.Rngs(0), **kw), nnx.Linear(37, 23, rngs=nnx.Rngs(0), **kw)
    if use_bias:
        for m in (ours, plain):
            m.bias[...] = jax.random.normal(jax.random.PRNGKey(3), (23,)).astype(dtype)
    return ours, plain


def test_float32_is_nnx_linear_exactly():
    ours, plain = _pair(jnp.float32)
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 5, 37))
    np.testing.assert_array_equal(np.asarray(ours(x)), np.asarray(plain(x)))


@pytest.mark.parametrize("use_bias", [True, False])
def test_bf16_on_cpu_xla_cpu_upcasts_and_rounds_once(use_bias, monkeypatch):
    monkeypatch.setenv("VIDAX_CPU_MATMUL", "xla")  # XLA's form of the dot (oneDNN's: tests/test_onednn_matmul.py)
    assert jax.default_backend() == "cpu" and xla_cpu_upcasts(jnp.bfloat16)
    assert not xla_cpu_upcasts(jnp.float32)
    ours, _ = _pair(jnp.bfloat16, use_bias)
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 5, 37)).astype(jnp.bfloat16)
    hlo = jax.jit(ours).lower(x).as_text()
    assert "bf16" in hlo and "-> tensor<2x5x23xf32>" in hlo  # the dot's result type is f32
    y = np.asarray(ours(x), np.float32)
    assert ours(x).dtype == jnp.bfloat16
    # torch's bf16 linear: products summed in float32, bias added, rounded once.
    w = torch.from_numpy(np.asarray(ours.kernel[...], np.float32)).bfloat16()
    b = torch.from_numpy(np.asarray(ours.bias[...], np.float32)).bfloat16() if use_bias else None
    ref = torch.nn.functional.linear(torch.from_numpy(np.asarray(x, np.float32)).bfloat16(), w.T, b).float().numpy()
    # Summation order differs: at most one bf16 ulp apart.
    assert np.max(np.abs(y - ref) / np.maximum(np.abs(ref), 1e-2)) <= BF16_EPS
    assert np.abs(ref).max() > 0.5  # a non-trivial output


def test_each_weight_format_is_one_type_behind_the_linear_call():
    """vidax.nn.kernels.formats: a Linear's kernel is read as its format's type (dense, int8,
    fp8, GGUF blocks) and the Linear's call is that type's matmul: in float32 ``x W + b`` with W
    the type's values, to float32 rounding."""
    from vidax.nn.gguf import keep_all
    from vidax.nn.kernels import Dense, GGUFBlocks, Quantized, kept_formats, weight_of
    from vidax.nn.quant import quantize_module

    def make():
        lin = Linear(64, 23, dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
        lin.bias[...] = jax.random.normal(jax.random.PRNGKey(3), (23,))
        return lin

    gguf = keep_all(make(), "Q8_0")  # per output column, 2 blocks of 34 bytes: an fp16 scale, 32 int8
    rng = np.random.default_rng(4)
    blocks = rng.integers(0, 256, gguf.kernel.shape, dtype=np.uint8).T.reshape(23, 2, 34)
    blocks[:, :, :2] = rng.uniform(0.001, 0.01, (23, 2, 1)).astype(np.float16).view(np.uint8)
    gguf.kernel[...] = jnp.asarray(blocks.reshape(23, 68).T)
    cases = [
        (make(), Dense, "dense"),
        (quantize_module(make(), "int8"), Quantized, "int8"),
        (quantize_module(make(), "float8_e4m3fn"), Quantized, "fp8"),
        (gguf, GGUFBlocks, "GGUF"),
    ]
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 5, 64))
    for lin, kind, name in cases:
        weight = weight_of(lin)
        assert type(weight) is kind and weight.name == name
        assert kept_formats(lin) == ([] if name == "dense" else [name])
        w = np.asarray(lin.dense_kernel(), np.float64)
        assert np.isfinite(w).all() and np.abs(w).max() > 0.1
        want = np.asarray(x, np.float64) @ w + np.asarray(lin.bias[...], np.float64)
        # float32 products and sums over 64 terms: within a few float32 ulps of the exact result
        np.testing.assert_allclose(np.asarray(lin(x)), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_matmul_bf16_matches_float32_product_rounded():
    a = jax.random.normal(jax.random.PRNGKey(1), (3, 16, 40)).astype(jnp.bfloat16)
    b = jax.random.normal(jax.random.PRNGKey(2), (40, 24)).astype(jnp.bfloat16)
    got = matmul("blc,cd->bld", a, b, jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    want = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    assert np.max(np.abs(np.asarray(got, np.float32) - want) / np.maximum(np.abs(want), 1e-2)) <= BF16_EPS
    got32 = matmul("blc,cd->bld", a.astype(jnp.float32), b.astype(jnp.float32), jnp.float32)
    np.testing.assert_allclose(np.asarray(got32), want, rtol=1e-5, atol=1e-5)


def test_scan_layers_keeps_bf16_stack_out_of_float32():
    """On CPU the stacked bf16 weights are sliced as uint16: the compiled loop holds no float32
    copy of the stack (XLA:CPU otherwise upcasts the whole stack once, outside the loop), and the
    result equals the layers applied one by one."""
    import re

    from vidax.nn.stack import scan_layers, stacked

    layers = stacked(lambda r: Linear(24, 24, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=r), 5, nnx.Rngs(0))
    graphdef, state = nnx.split(layers)
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 24)).astype(jnp.bfloat16)

    def run(state, x):
        return scan_layers(nnx.merge(graphdef, state), x, lambda layer, h: jax.nn.gelu(layer(h)))

    compiled = jax.jit(run).lower(state, x).compile()
    entry = compiled.as_text()[compiled.as_text().index("ENTRY") :]
    assert not re.search(r"= f32\[5,24,24\]", entry), "a float32 copy of the stacked kernels"
    got = np.asarray(compiled(state, x), np.float32)
    want = x
    for i in range(5):
        layer = nnx.merge(graphdef, jax.tree.map(lambda a: a[i], state))
        want = jax.nn.gelu(layer(want))
    np.testing.assert_array_equal(got, np.asarray(want, np.float32))


def _whole_stack_copies(compiled, layers):
    """Instructions of ``compiled``'s HLO (fusions included) that make a whole ``(layers, ...)``
    array other than by passing one in (parameters, tuple plumbing)."""
    import re

    return [
        ln.strip()
        for ln in compiled.as_text().splitlines()
        if re.search(rf"= \w+\[{layers},", ln) and not re.search(r" (parameter|get-tuple-element|tuple)\(", ln)
    ]


def test_stack_bits_pass_bf16_stacks_into_the_jit_without_a_copy():
    """vidax.nn.kernels.stacks.as_stack_bits: on CPU the bf16 stacks (and only those: not the other bf16
    leaves, not float32 or int8 stacks) become uint16 views sharing the arrays' buffers; a jitted
    scan that takes them through from_stack_bits compiles with no whole-stack copy, where the
    same scan taking the bf16 stack copies it (as uint16) on every call; the results are
    bit-identical."""
    from vidax.nn.kernels import StackBits, as_stack_bits, from_stack_bits
    from vidax.nn.stack import scan_layers, stacked

    class Model(nnx.Module):
        def __init__(self):
            self.blocks = stacked(
                lambda r: Linear(24, 24, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=r), 5, nnx.Rngs(0)
            )
            self.wide = stacked(
                lambda r: Linear(24, 24, dtype=jnp.float32, param_dtype=jnp.float32, rngs=r), 5, nnx.Rngs(1)
            )
            self.codes = nnx.Param(jnp.ones((5, 24), jnp.int8))
            self.out = Linear(24, 8, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(2))

        def __call__(self, x):
            h = scan_layers(self.blocks, x, lambda layer, h: jax.nn.gelu(layer(h)))
            h = scan_layers(self.wide, h.astype(jnp.float32), lambda layer, h: layer(h)).astype(jnp.bfloat16)
            return self.out(h * self.codes[0].astype(jnp.bfloat16))

    graphdef, state = nnx.split(Model())
    bits = as_stack_bits(state, ("blocks", "wide", "codes"))
    kinds = {k: type(v.get_value()).__name__ for k, v in nnx.to_flat_state(bits)}
    assert kinds == {
        ("blocks", "kernel"): "StackBits",
        ("blocks", "bias"): "StackBits",
        ("wide", "kernel"): "ArrayImpl",
        ("wide", "bias"): "ArrayImpl",
        ("codes",): "ArrayImpl",
        ("out", "kernel"): "ArrayImpl",
        ("out", "bias"): "ArrayImpl",
    }, kinds
    view, kernel = bits["blocks"]["kernel"].get_value(), state["blocks"]["kernel"].get_value()
    assert isinstance(view, StackBits) and view.bits.dtype == jnp.uint16 and view.float_dtype == jnp.bfloat16
    assert view.bits.unsafe_buffer_pointer() == kernel.unsafe_buffer_pointer(), "the view copied the stack"
    assert as_stack_bits(state, ()) is state

    x = jax.random.normal(jax.random.PRNGKey(1), (3, 24)).astype(jnp.bfloat16)
    step = jax.jit(lambda p, x: nnx.merge(graphdef, from_stack_bits(p))(x))
    before, after = step.lower(state, x).compile(), step.lower(bits, x).compile()
    assert _whole_stack_copies(before, 5), "the bf16 stack is no longer copied: this check sees nothing"
    assert not _whole_stack_copies(after, 5), _whole_stack_copies(after, 5)
    np.testing.assert_array_equal(np.asarray(after(bits, x), np.float32), np.asarray(before(state, x), np.float32))


@pytest.mark.parametrize("dims", [2, 3])
def test_conv_matches_torch(dims):
    """vidax.nn.layers.Conv (channels-last, explicit padding) == torch Conv2d/Conv3d(padding=1),
    float32; summation order differs (XLA vs oneDNN): tolerance 1e-5 relative."""
    from vidax.nn.layers import Conv

    k = (3,) * dims
    ref = (torch.nn.Conv2d if dims == 2 else torch.nn.Conv3d)(5, 7, 3, padding=1)
    ours = Conv(5, 7, k, padding=((1, 1),) * dims, rngs=nnx.Rngs(0))
    perm = (2, 3, 1, 0) if dims == 2 else (2, 3, 4, 1, 0)
    ours.kernel[...] = jnp.asarray(ref.weight.detach().numpy().transpose(perm))
    ours.bias[...] = jnp.asarray(ref.bias.detach().numpy())
    x = np.random.default_rng(0).standard_normal((2, 5) + (4, 6, 3)[-dims:]).astype(np.float32)
    want = np.moveaxis(ref(torch.from_numpy(x)).detach().numpy(), 1, -1)
    got = np.asarray(ours(jnp.asarray(np.moveaxis(x, 1, -1))))
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


def test_group_norm_matches_torch():
    """vidax.nn.layers.GroupNorm over (B, T, H, W, C) == torch GroupNorm on (B, C, T, H, W),
    with random affine; float32 statistics, tolerance 1e-5 relative."""
    from vidax.nn.layers import GroupNorm

    ref = torch.nn.GroupNorm(4, 12, eps=1e-5)
    with torch.no_grad():
        ref.weight.normal_()
        ref.bias.normal_()
    ours = GroupNorm(12, 4, 1e-5)
    ours.scale[...] = jnp.asarray(ref.weight.detach().numpy())
    ours.bias[...] = jnp.asarray(ref.bias.detach().numpy())
    x = (3 * np.random.default_rng(1).standard_normal((2, 12, 3, 4, 5)) + 1).astype(np.float32)
    want = np.moveaxis(ref(torch.from_numpy(x)).detach().numpy(), 1, -1)
    got = ours(jnp.asarray(np.moveaxis(x, 1, -1)).astype(jnp.bfloat16))
    assert got.dtype == jnp.bfloat16  # returns the input dtype
    got = np.asarray(ours(jnp.asarray(np.moveaxis(x, 1, -1))))
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


@pytest.mark.parametrize("dims,shape", [(1, (2, 6, 3, 4, 5)), (2, (2, 12, 3, 4)), (3, (2, 16, 3, 4, 5))])
def test_pixel_shuffle_matches_diffusers(dims, shape):
    """vidax.nn.layers.pixel_shuffle (channels-last) == diffusers' PixelShuffleND (channels-first),
    exactly (a permutation); for 2-D also == torch's pixel_shuffle."""
    from diffusers.pipelines.ltx.modeling_latent_upsampler import PixelShuffleND

    from vidax.nn.layers import pixel_shuffle

    x = torch.arange(np.prod(shape), dtype=torch.float32).reshape(shape)
    want = PixelShuffleND(dims)(x).numpy()
    if dims == 2:
        np.testing.assert_array_equal(want, torch.nn.functional.pixel_shuffle(x, 2).numpy())
    got = pixel_shuffle(jnp.asarray(np.moveaxis(x.numpy(), 1, -1)), (2,) * dims)
    np.testing.assert_array_equal(np.asarray(got), np.moveaxis(want, 1, -1))
    with pytest.raises(ValueError, match="do not fit"):
        pixel_shuffle(jnp.zeros((2, 3, 5)), (2,))


def _rms_reference(kind):
    """The reference RMS norm of each convention vidax.nn.layers.RMSNorm covers."""
    from diffusers.models.normalization import RMSNorm as DiffusersRMSNorm
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    if kind == "w":
        return torch.nn.RMSNorm(24, eps=1e-6), dict(weight="w")
    if kind == "1+w":
        return GemmaRMSNorm(24, eps=1e-6), dict(weight="1+w")
    if kind == "llama":
        return LlamaRMSNorm(24, eps=1e-6), dict(weight="w", weight_after_cast=True)
    return DiffusersRMSNorm(24, eps=1e-6, elementwise_affine=False), dict(weight=None)


@pytest.mark.parametrize("kind", ["w", "1+w", "llama", None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_conventions_match_references(kind, dtype):
    """vidax.nn.layers.RMSNorm with each weight convention == its reference (torch RMSNorm,
    Gemma's ``1 + w``, Llama's weight after the cast, diffusers' weightless one) on inputs far
    from unit scale, random weights; the result in the input's dtype. float32: 1e-6 relative
    (the same float32 formula; only the mean's summation order differs); bfloat16: one bf16 ulp
    (both round the same float32 value once, or multiply two bf16 values once)."""
    from vidax.nn.layers import RMSNorm

    ref, kw = _rms_reference(kind)
    ours = RMSNorm(24, 1e-6, param_dtype=jnp.float32, **kw)
    if kind is not None:
        assert np.all(np.asarray(ours.scale[...]) == (0.0 if kind == "1+w" else 1.0))  # as the reference's init
        with torch.no_grad():
            ref.weight.normal_()
    else:
        assert ours.scale is None
    ref = ref.to(dtype)
    if kind is not None:  # the weight as the reference holds it (bf16-rounded in bf16)
        ours.scale[...] = jnp.asarray(ref.weight.detach().float().numpy())
    x = torch.from_numpy((5 * np.random.default_rng(2).standard_normal((2, 7, 24)) + 3).astype(np.float32)).to(dtype)
    want = ref(x).detach().float().numpy()
    got = ours(jnp.asarray(x.float().numpy()).astype(jnp.bfloat16 if dtype == torch.bfloat16 else jnp.float32))
    assert got.dtype == (jnp.bfloat16 if dtype == torch.bfloat16 else jnp.float32)
    tol = BF16_EPS if dtype == torch.bfloat16 else 1e-6
    assert np.abs(np.asarray(got, np.float32) - want).max() / np.abs(want).max() <= tol


def test_tiling_fields_are_checked_by_name():
    """vidax.nn.tiling.check_tiling_fields (the HunyuanVideo and LTX tilings): a switch that is
    not a bool and a size that is not a positive integer are each refused naming the field."""
    from vidax.errors import InputError
    from vidax.models.hunyuan_video.vae import HunyuanVideoTiling
    from vidax.models.ltx.config import LTXVAEConfig
    from vidax.models.ltx.vae import LTXTiling

    HunyuanVideoTiling().check(8, 4)
    with pytest.raises(InputError, match=r"^tiling use_tiling=1 must be True or False$"):
        HunyuanVideoTiling(use_tiling=1).check(8, 4)
    with pytest.raises(InputError, match=r"^tiling tile_sample_min_width=True must be a positive integer$"):
        HunyuanVideoTiling(tile_sample_min_width=True).check(8, 4)
    LTXTiling().check(LTXVAEConfig())
    with pytest.raises(InputError, match=r"^LTXTiling\.temporal=None must be True or False$"):
        LTXTiling(temporal=None).check(LTXVAEConfig())
    with pytest.raises(InputError, match=r"^LTXTiling\.tile_sample_stride_height=0 must be a positive integer$"):
        LTXTiling(tile_sample_stride_height=0).check(LTXVAEConfig())


#: Tiny VAE configs of each tiling kind (only the tiling switches run: built abstract).
_TILED_VAES = {
    "wan": ("vidax.models.wan", "WanVAE", "WanVAEConfig", dict(base_dim=4, dim_mult=[1, 1, 1, 1])),
    "cogvideox": ("vidax.models.cogvideox", "CogVideoXVAE", "CogVideoXVAEConfig", dict(block_out_channels=[4] * 4, norm_num_groups=2)),
    "ltx": ("vidax.models.ltx", "LTXVideoVAE", "LTXVAEConfig", dict(block_out_channels=[4] * 4, decoder_block_out_channels=[4] * 4)),
    "hunyuan_video": ("vidax.models.hunyuan_video", "HunyuanVideoVAE", "HunyuanVideoVAEConfig", dict(block_out_channels=[4] * 4, norm_num_groups=2)),
    "hunyuan_video15": ("vidax.models.hunyuan_video15", "HunyuanVideo15VAE", "HunyuanVideo15VAEConfig", dict(block_out_channels=[6, 8, 16, 32, 32], latent_channels=4)),
}  # fmt: skip

#: ``enable_tiling`` keywords that write out ``enable_tiled_decode(scale=2)`` from each VAE's
#: default tiled decode: the tile's side doubled; Wan / LTX / HunyuanVideo strides grown by one
#: tile (the same overlap in pixels), CogVideoX / HunyuanVideo 1.5 keep their overlap factors
#: (HunyuanVideo 1.5's default tiled decode: 128-pixel tiles of 8 latents).
_SCALE_2 = {
    "wan": dict(tile_sample_min_height=512, tile_sample_min_width=512, tile_sample_stride_height=448, tile_sample_stride_width=448),
    "cogvideox": dict(tile_sample_min_height=480, tile_sample_min_width=720),
    "ltx": dict(tile_sample_min_height=1024, tile_sample_min_width=1024, tile_sample_stride_height=960, tile_sample_stride_width=960),
    "hunyuan_video": dict(tile_sample_min_height=512, tile_sample_min_width=512, tile_sample_stride_height=448, tile_sample_stride_width=448),
    "hunyuan_video15": dict(tile_sample_min_height=256, tile_sample_min_width=256, tile_latent_min_height=16, tile_latent_min_width=16),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(_TILED_VAES))
def test_tiled_decode_scale_is_enable_tiling_with_larger_tiles(kind):
    """``enable_tiled_decode(scale=2)`` (the memory plan's larger tiles) leaves the VAE in the
    state of ``enable_tiling`` with the doubled sizes written out (:data:`_SCALE_2`), temporal
    tiles as ``enable_tiled_decode()``'s; ``scale=1`` is ``enable_tiled_decode()``; a scale that
    is not a positive integer is refused naming ``scale``, changing nothing."""
    import importlib

    from vidax.errors import InputError

    package, vae_name, config_name, config = _TILED_VAES[kind]
    module = importlib.import_module(f"{package}.vae")
    config = getattr(importlib.import_module(f"{package}.config"), config_name).from_config_dict(config)
    vae = nnx.eval_shape(lambda: getattr(module, vae_name)(config, rngs=nnx.Rngs(0)))
    initial = vae.tiling
    vae.enable_tiled_decode()
    default = vae.tiling
    vae.tiling = initial
    vae.enable_tiled_decode(scale=1)
    assert vae.tiling == default
    vae.tiling = initial
    vae.enable_tiled_decode(scale=2)
    scaled = vae.tiling
    vae.tiling = initial
    vae.enable_tiling(**_SCALE_2[kind])
    if vae.TILING_FRAMEWISE is not None:
        vae.use_framewise_decoding = True
    if kind in ("wan", "hunyuan_video"):  # the plan's larger tiles are all of one shape (one tile program)
        vae.tiling = dataclasses.replace(vae.tiling, same_shape_tiles=True)
    assert scaled == vae.tiling != default
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InputError, match=rf"^scale={bad!r} must be a positive integer"):
            vae.enable_tiled_decode(scale=bad)
        assert vae.tiling == scaled


def _tiny_text_encoders():
    """Builders of tiny bf16 text encoders (random init) and how each is encoded: the public
    ``encode_*`` function, and the jitted function behind it (taking any parameter state)."""
    import types

    from vidax.default_checkpoint import random_module
    from vidax.encoders import clip, decoder_lm, decoder_lm_config, gemma4, t5
    from vidax.encoders.tokenizer import Tokens

    def bf16(cls, config):
        # numpy-random parameters (no op-by-op init on the device), as bf16 jax arrays
        module = random_module(
            lambda: cls(config, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16), np.random.default_rng(3)
        )
        graphdef, state = nnx.split(module)
        return nnx.merge(graphdef, jax.tree.map(lambda a: jnp.asarray(a, jnp.bfloat16), state))

    tokens = lambda ids, mask: Tokens(np.asarray(ids), np.asarray(mask), np.asarray(mask).sum(1))  # noqa: E731
    umt5 = t5.T5EncoderConfig.from_config_dict(
        dict(
            model_type="umt5",
            vocab_size=97,
            d_model=40,
            d_kv=12,
            num_heads=3,
            d_ff=56,
            num_layers=3,
            relative_attention_num_buckets=8,
        )
    )
    llama = decoder_lm_config.LlamaTextConfig.from_config_dict(
        dict(
            model_type="llama",
            vocab_size=97,
            hidden_size=48,
            intermediate_size=40,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    sliding, full = "sliding_attention", "full_attention"  # tests/parity/test_gemma4_text.py's TEXT, 4 layers
    g4 = gemma4.Gemma4TextConfig.from_config_dict(
        dict(
            model_type="gemma4_unified_text",
            vocab_size=97,
            hidden_size=48,
            intermediate_size=40,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            global_head_dim=16,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            num_kv_shared_layers=1,
            use_double_wide_mlp=True,
            sliding_window=5,
            layer_types=[sliding, full, sliding, full],
            rms_norm_eps=1e-6,
            rope_parameters={
                sliding: {"rope_type": "default", "rope_theta": 100.0},
                full: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e4, "factor": 2.0},
            },
        )
    )
    ctext = clip.CLIPTextConfig.from_config_dict(
        dict(
            vocab_size=97,
            hidden_size=36,
            intermediate_size=50,
            num_hidden_layers=3,
            num_attention_heads=3,
            max_position_embeddings=16,
        )
    )
    return {
        "umt5": types.SimpleNamespace(
            make=lambda: bf16(t5.T5Encoder, umt5),
            public=lambda e, i, m: t5.encode_tokens(e, tokens(i, m)),
            jitted=lambda g: t5._encode_fn(g, False, False),
        ),
        "llama": types.SimpleNamespace(
            make=lambda: bf16(decoder_lm.DecoderLM, llama),
            public=lambda e, i, m: decoder_lm.encode_hidden_states(e, i, m, output_layer=None),
            jitted=lambda g: decoder_lm._hidden_fn(g, None, True),
        ),
        "gemma4": types.SimpleNamespace(
            make=lambda: bf16(gemma4.Gemma4TextEncoder, g4),
            public=lambda e, i, m: decoder_lm.encode_hidden_states(e, i, m, output_layer=None),
            jitted=lambda g: decoder_lm._hidden_fn(g, None, True),
        ),
        "clip": types.SimpleNamespace(
            make=lambda: bf16(clip.CLIPTextEncoder, ctext),
            public=lambda e, i, m: clip.encode_clip_text(e, tokens(i, m)),
            jitted=lambda g: clip._clip_text_fn(g, False),
        ),
    }


@pytest.mark.parametrize("kind", ["umt5", "llama", "gemma4", "clip"])
def test_text_encoders_pass_bf16_stacks_as_bits_bit_identically(kind):
    """The text encoders' encode functions pass their bf16 stacked layers (every leaf under the
    class's stacked_paths, and no other) into their jitted forward as StackBits views
    (vidax.nn.kernels.stacks.stack_bits_state: the jitted function given the bf16 state compiles anew);
    the hidden states are bit for bit those of that function given the bf16 state (the form
    before)."""
    from vidax.nn.kernels import StackBits, stack_bits_state

    case = _tiny_text_encoders()[kind]
    encoder = case.make()
    prefixes = [tuple(p.split(".")) for p in type(encoder).stacked_paths]
    kinds = {tuple(map(str, k)): type(v.get_value()).__name__ for k, v in nnx.to_flat_state(stack_bits_state(encoder))}
    under = {k: any(k[: len(p)] == p for p in prefixes) for k in kinds}
    assert any(under.values()) and not any(v == "StackBits" for k, v in kinds.items() if not under[k]), kinds
    dtypes = {tuple(map(str, k)): v.get_value().dtype for k, v in nnx.to_flat_state(nnx.state(encoder))}
    assert all(kinds[k] == "StackBits" for k, u in under.items() if u and dtypes[k] == jnp.bfloat16), kinds
    ids = jnp.asarray(np.random.default_rng(0).integers(1, 97, (2, 11)), jnp.int32)
    mask = jnp.asarray([[1] * 11, [1] * 6 + [0] * 5], jnp.int32)
    got = jax.tree.leaves(case.public(encoder, ids, mask))
    graphdef, state = nnx.split(encoder)
    fn = case.jitted(graphdef)
    compiled = fn._cache_size()
    want = jax.tree.leaves(fn(state, ids, mask))
    # the bf16 state is another input structure than what the public function passed: one more compile
    assert fn._cache_size() == compiled + 1, "the encode function did not pass its stacks as StackBits"
    assert not any(isinstance(a, StackBits) for a in jax.tree.leaves(state, is_leaf=lambda a: isinstance(a, StackBits)))
    assert float(jnp.abs(got[0].astype(jnp.float32)).max()) > 0
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32))


@pytest.mark.parametrize("size", [(9, 13), (7, 4), (12, 10)])
def test_same_shape_tiles_cover_the_frame_exactly(size):
    """:func:`vidax.nn.tiling.tiled` with ``same_shape``: every tile has the tile's shape (the last
    of an axis ends at the edge), and a tile function consistent across tiles (here each latent
    pixel made a 2 x 2 block) gives back exactly the untiled result: the offsets, blends and kept
    parts of the shifted last tiles put every pixel where it belongs. The reference layout on the
    same input does too, with its last tiles cut short."""
    from vidax.nn.tiling import tile_starts, tiled

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, *size, 3)).astype(np.float32)
    up = lambda a: np.repeat(np.repeat(a, 2, axis=2), 2, axis=3)  # noqa: E731
    shapes = set()

    def run(t):
        shapes.add(t.shape)
        return up(np.asarray(t)).copy()

    # tiles of 5 every 3 (an overlap of 2 latent pixels = 4 output pixels; kept 6 of 10)
    same = tiled(run, x, (5, 5), (3, 3), (4, 4), (6, 6), same_shape=True)
    assert shapes == {(1, 2, min(5, size[0]), min(5, size[1]), 3)}
    np.testing.assert_array_equal(same, up(x))
    ref = tiled(run, x, (5, 5), (3, 3), (4, 4), (6, 6))[:, :, : 2 * size[0], : 2 * size[1]]
    np.testing.assert_allclose(ref, up(x), rtol=1e-6, atol=1e-6)
    assert len(tile_starts(size[0], 5, 3, True)) <= len(tile_starts(size[0], 5, 3))
