"""LoRA (vidax.lora): every layout merges to the same weights, the merged weights and the video
equal diffusers' load_lora_weights + fuse_lora, adapters switch and unload bit for bit, on a
mesh and with streamed blocks, and bad files are refused in one line before anything changes.

Every parameter and every LoRA factor is random. Tolerances: merged weights against diffusers'
fused ones 1e-5 relative (float32; diffusers folds alpha / rank into the two factors, vidax
multiplies the product, so they differ by rounding only); videos >= 60 dB (the issue's bar).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import vidax
from tests.parity.helpers import psnr, randomize_torch_module
from vidax.errors import InputError
from vidax.weights.loader import export_state_dict

RANK = 4
WAN_BLOCK_MODULES = (
    "attn1.to_q",
    "attn1.to_k",
    "attn1.to_v",
    "attn1.to_out.0",
    "attn2.to_q",
    "attn2.to_k",
    "attn2.to_v",
    "attn2.to_out.0",
    "ffn.net.0.proj",
    "ffn.net.2",
)
WAN_TOP_MODULES = ("proj_out", "condition_embedder.time_proj", "condition_embedder.text_embedder.linear_1")
CALL = dict(
    prompt=["a cat", "a dog on a boat"],
    negative_prompt=["blurry", ""],
    num_frames=9,
    num_inference_steps=2,
    guidance_scale=4.5,
    guidance_scale_2=2.5,
    max_sequence_length=16,
    height=32,
    width=48,
)


#: The Wan repository's names of the diffusers modules the LoRAs here touch (as diffusers'
#: _convert_non_diffusers_wan_lora_to_diffusers renames them).
WAN_ORIGINAL = {
    **{
        f"{b}.{c}": f"{a}.{o}"
        for a, b in (("self_attn", "attn1"), ("cross_attn", "attn2"))
        for o, c in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("o", "to_out.0"))
    },
    "ffn.net.0.proj": "ffn.0",
    "ffn.net.2": "ffn.2",
    "proj_out": "head.head",
    "condition_embedder.time_proj": "time_projection.1",
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
}


def _original(name: str) -> str:
    if name.startswith("blocks."):
        _, i, rest = name.split(".", 2)
        return f"blocks.{i}.{WAN_ORIGINAL[rest]}"
    return WAN_ORIGINAL[name]


def wan_lora(shapes: dict[str, tuple[int, int]], seed: int, alpha: float | None = None, bias: bool = True):
    """A random LoRA over ``shapes`` (diffusers module -> (out, in)) as
    ``{module: (down, up, alpha, diff_b)}``."""
    rng = np.random.default_rng(seed)
    out = {}
    for j, (m, (o, i)) in enumerate(sorted(shapes.items())):
        r = RANK if j % 3 else RANK - 1  # per-module ranks differ
        down = (rng.standard_normal((r, i)) * 0.3).astype(np.float32)
        up = (rng.standard_normal((o, r)) * 0.3).astype(np.float32)
        diff_b = (rng.standard_normal(o) * 0.1).astype(np.float32) if bias and j % 2 else None
        out[m] = (down, up, alpha, diff_b)
    return out


def write(lora: dict, layout: str) -> dict[str, np.ndarray]:
    """The LoRA as a state dict in ``layout``: diffusers, original (ComfyUI), lightx2v
    (original names, lora_A/B, diff/diff_b, zero norm diffs) or kohya (musubi)."""
    sd = {}
    for m, (down, up, alpha, diff_b) in lora.items():
        if layout == "diffusers":
            assert alpha is None
            sd[f"transformer.{m}.lora_A.weight"], sd[f"transformer.{m}.lora_B.weight"] = down, up
            if diff_b is not None:
                sd[f"transformer.{m}.lora_B.bias"] = diff_b
            continue
        name = _original(m)
        if layout == "kohya":
            key = "lora_unet_" + name.replace(".", "_")
            sd[f"{key}.lora_down.weight"], sd[f"{key}.lora_up.weight"] = down, up
            sd[f"{key}.alpha"] = np.float32(alpha if alpha is not None else down.shape[0])
            if diff_b is not None:
                sd[f"{key}.diff_b"] = diff_b
            continue
        a, b = ("lora_down", "lora_up") if layout == "original" else ("lora_A", "lora_B")
        key = f"diffusion_model.{name}"
        sd[f"{key}.{a}.weight"], sd[f"{key}.{b}.weight"] = down, up
        if alpha is not None:
            sd[f"{key}.alpha"] = np.float32(alpha)
        if diff_b is not None:
            sd[f"{key}.diff_b"] = diff_b
    if layout == "lightx2v":
        for i in range(2):  # LightX2V's norm diffs are zeros (diffusers drops them)
            sd[f"diffusion_model.blocks.{i}.norm3.diff"] = np.zeros(42, np.float32)
            sd[f"diffusion_model.blocks.{i}.norm3.diff_b"] = np.zeros(42, np.float32)
    return sd


def wan_shapes(transformer) -> dict[str, tuple[int, int]]:
    import torch

    names = [f"blocks.{i}.{m}" for i in range(2) for m in WAN_BLOCK_MODULES] + list(WAN_TOP_MODULES)
    return {
        n: tuple(transformer.get_submodule(n).weight.shape)
        for n in names
        if isinstance(transformer.get_submodule(n), torch.nn.Linear)
    }


def merged(pipe, expert: int = 0) -> dict[str, np.ndarray]:
    lora = pipe.lora
    return export_state_dict(pipe.experts.modules[expert], lora._targets[expert].rules)


@pytest.fixture(scope="module")
def wan22(tmp_path_factory):
    """A tiny random Wan2.2 A14B text-to-video checkpoint, its torch pipeline and two LoRAs."""
    from tests.parity.wan_reference import build_reference_wan_pipeline

    path = str(tmp_path_factory.mktemp("wan22_lora"))
    ref = build_reference_wan_pipeline(path, boundary_ratio=0.875)
    shapes = wan_shapes(ref.transformer)
    return path, ref, wan_lora(shapes, 1, alpha=8.0), wan_lora(shapes, 2, alpha=None, bias=False)


@pytest.fixture(scope="module")
def wan_pipe(wan22):
    return vidax.load_pipeline(wan22[0], dtype="float32")


def test_wan_layouts_merge_bit_equal(wan_pipe, wan22):
    """The same LoRA in the diffusers, original, LightX2V and kohya layouts gives bit-equal
    weights, and unloading restores the checkpoint's bit for bit."""
    _, _, lora, _ = wan22
    base = merged(wan_pipe)
    results = {}
    # The diffusers layout has no alpha: every layout gets the LoRA without one (kohya's files
    # carry alpha = rank, scale 1).
    halved = {m: (d, u, None, b) for m, (d, u, _, b) in lora.items()}
    for layout in ("diffusers", "original", "lightx2v", "kohya"):
        wan_pipe.load_lora_weights(write(halved, layout), adapter_name=layout)
        results[layout] = merged(wan_pipe)
        wan_pipe.unload_lora_weights()
        after = merged(wan_pipe)
        assert all(np.array_equal(after[k], base[k]) for k in base), layout
    changed = [k for k in base if not np.array_equal(results["diffusers"][k], base[k])]
    assert len(changed) == len(lora) + sum(b is not None for *_, b in lora.values())  # weights + biases
    for layout in ("original", "lightx2v", "kohya"):
        assert all(np.array_equal(results[layout][k], results["diffusers"][k]) for k in base), layout
    # alpha scales as alpha / rank: alpha 2 x rank is twice the delta
    doubled = {m: (d, u, 2.0 * d.shape[0], None) for m, (d, u, _, _) in lora.items()}
    wan_pipe.load_lora_weights(write(doubled, "original"))
    two = merged(wan_pipe)
    wan_pipe.unload_lora_weights()
    key = "blocks.1.attn1.to_q.weight"
    d, u, _, _ = lora["blocks.1.attn1.to_q"]
    np.testing.assert_allclose(two[key] - base[key], 2.0 * (u @ d), rtol=1e-4, atol=1e-5)


def test_wan_two_adapters_weights_and_switching(wan_pipe, wan22):
    _, _, lora_a, lora_b = wan22
    base = merged(wan_pipe)
    wan_pipe.load_lora_weights(write(lora_a, "original"), adapter_name="a")
    only_a = merged(wan_pipe)
    wan_pipe.load_lora_weights(write(lora_b, "diffusers"), adapter_name="b")
    assert wan_pipe.get_active_adapters() == ["b"]  # the adapter loaded last is active, as diffusers'
    wan_pipe.set_adapters(["a", "b"], adapter_weights=[0.5, -1.5])
    assert wan_pipe.get_active_adapters() == ["a", "b"]
    both = merged(wan_pipe)
    key, m = "blocks.0.ffn.net.2.weight", "blocks.0.ffn.net.2"
    (da, ua, alpha, _), (db, ub, _, _) = lora_a[m], lora_b[m]
    want = base[key] + 0.5 * (alpha / da.shape[0]) * (ua @ da) - 1.5 * (ub @ db)
    np.testing.assert_allclose(both[key], want, rtol=1e-5, atol=1e-5)
    wan_pipe.set_adapters("a")
    assert all(np.array_equal(merged(wan_pipe)[k], only_a[k]) for k in base)  # switching back: exact
    wan_pipe.fuse_lora(lora_scale=0.25)
    np.testing.assert_allclose(
        merged(wan_pipe)[key] - base[key], 0.25 * (only_a[key] - base[key]), rtol=1e-4, atol=1e-6
    )
    wan_pipe.unfuse_lora()
    assert all(np.array_equal(merged(wan_pipe)[k], only_a[k]) for k in base)
    with pytest.raises(InputError, match=r"set_adapters: adapter_names=\['a', 'a'\] names 'a' more than once"):
        wan_pipe.set_adapters(["a", "a"], [1.0, 0.25])  # trial 8: it merged 'a' twice
    # diffusers' delete_adapters: 'b' goes, 'a' stays as it was; then none left: the base weights
    wan_pipe.set_adapters(["a", "b"], adapter_weights=[1.0, -1.5])
    wan_pipe.delete_adapters("b")
    assert wan_pipe.get_active_adapters() == ["a"] and wan_pipe.get_list_adapters() == {"transformer": ["a"]}
    assert all(np.array_equal(merged(wan_pipe)[k], only_a[k]) for k in base)
    with pytest.raises(InputError, match=r"delete_adapters: \['b'\] not loaded"):
        wan_pipe.delete_adapters(["b"])
    wan_pipe.delete_adapters(["a"])
    assert wan_pipe.get_active_adapters() == []
    assert all(np.array_equal(merged(wan_pipe)[k], base[k]) for k in base)
    wan_pipe.load_lora_weights(write(lora_a, "original"), adapter_name="a")
    wan_pipe.unload_lora_weights()
    assert wan_pipe.get_active_adapters() == []
    assert all(np.array_equal(merged(wan_pipe)[k], base[k]) for k in base)


def test_wan_bad_loras_refused_in_one_line(wan_pipe, wan22, tmp_path):
    from vidax.weights.safetensors_io import save_safetensors

    _, _, lora, _ = wan22
    base = merged(wan_pipe)
    good = write(lora, "original")
    stray = dict(
        good,
        **{
            "diffusion_model.blocks.0.self_attn.x.lora_down.weight": np.zeros((4, 42), np.float32),
            "diffusion_model.blocks.0.self_attn.x.lora_up.weight": np.zeros((42, 4), np.float32),
        },
    )
    rank = dict(good)
    rank["diffusion_model.blocks.0.self_attn.q.lora_up.weight"] = np.zeros((42, 5), np.float32)
    other = {
        f"transformer.transformer_blocks.0.{m}.lora_{ab}.weight": np.zeros(
            (4, 48) if ab == "A" else (48, 4), np.float32
        )
        for m in ("attn1.to_q", "attn1.to_k", "norm1.linear", "ff.net.0.proj")
        for ab in "AB"
    }
    # every module of the file at other widths (a LoRA of another Wan size): the names fit wan
    wider = {
        k: np.zeros((v.shape[0] + 6, v.shape[1]) if "lora_up" in k else (v.shape[0], v.shape[1] + 6), np.float32)
        if v.ndim == 2
        else v
        for k, v in good.items()
    }
    file = str(tmp_path / "lora.safetensors")
    save_safetensors(good, file)
    with open(file, "r+b") as f:
        f.truncate(os.path.getsize(file) - 100)
    cases = [
        (
            stray,
            r"2 key\(s\) fit no parameter of transformer \(wan\) \(no such module, or another shape\): diffusion_model\.blocks\.0\.self_attn\.x",
        ),
        (rank, r"blocks\.0\.self_attn\.q: rank mismatch"),
        (other, r"looks like a LoRA for cogvideox"),
        (wider, r"its module names fit wan as well as any family: a LoRA for another size of this model$"),
        (file, r"not a readable LoRA file .*lora\.safetensors"),
        (
            {**good, "diffusion_model.blocks.0.self_attn.q.lora_up.weight": np.full((42, 4), np.nan, np.float32)},
            r"diffusion_model\.blocks\.0\.self_attn\.q\.lora_up\.weight holds NaN or Inf values",
        ),
    ]
    for bad, match in cases:
        with pytest.raises(InputError, match=match) as e:
            wan_pipe.load_lora_weights(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"load_lora_weights takes no hotswap="):
        wan_pipe.load_lora_weights(good, hotswap=True)
    # Metadata whose lora_alpha cannot be read would silently merge at scale 1.
    from vidax.lora.formats import parse

    with pytest.raises(InputError, match=r"x\.safetensors: its lora_adapter_metadata is not a JSON object"):
        parse(good, {"lora_adapter_metadata": "{not json"}, "x.safetensors", "x.safetensors")
    assert wan_pipe.get_active_adapters() == []
    assert all(np.array_equal(merged(wan_pipe)[k], base[k]) for k in base)  # nothing changed


def test_wan22_both_experts_match_diffusers_fused(wan_pipe, wan22):
    """Wan2.2 A14B: a LightX2V-style LoRA on each expert (two files) at lora_scale 0.8: the video
    equals diffusers' load_lora_weights(..., load_into_transformer_2=True) + fuse_lora."""
    import torch

    from tests.parity.wan_reference import initial_noise

    path, ref, lora_a, lora_b = wan22

    # diffusers' converter takes an alpha on the blocks' layers only
    def blocks_alpha(lora, alpha):
        return {m: (d, u, alpha if m.startswith("blocks.") else None, b) for m, (d, u, _, b) in lora.items()}

    first = write(blocks_alpha(lora_a, 8.0), "lightx2v")
    second = write(blocks_alpha(lora_b, 2.0), "original")
    noise = initial_noise(32, 48)
    with torch.no_grad():
        plain = np.asarray(ref(latents=noise.clone(), output_type="np", **CALL).frames)
        ref.load_lora_weights({k: torch.from_numpy(np.array(v)) for k, v in first.items()}, adapter_name="a")
        ref.load_lora_weights(
            {k: torch.from_numpy(np.array(v)) for k, v in second.items()},
            adapter_name="b",
            load_into_transformer_2=True,
        )
        ref.fuse_lora(lora_scale=0.8, components=["transformer", "transformer_2"])
        want = np.asarray(ref(latents=noise.clone(), output_type="np", **CALL).frames)
        ref.unfuse_lora(components=["transformer", "transformer_2"])
        ref.unload_lora_weights()
    wan_pipe.load_lora_weights(first, adapter_name="a")
    wan_pipe.load_lora_weights(second, adapter_name="b", load_into_transformer_2=True)
    wan_pipe.fuse_lora(lora_scale=0.8, components=["transformer", "transformer_2"])
    got = wan_pipe(latents=noise.numpy(), progress=False, **CALL).frames
    wan_pipe.unload_lora_weights()
    value = psnr(got, want)
    print(f"Wan2.2 A14B with a LoRA on each expert, fp32 video PSNR vs diffusers: {value:.1f} dB")
    assert value >= 60.0
    assert psnr(want, plain) < 40.0  # the LoRA changes the video clearly


def test_wan22_one_adapter_name_on_both_experts_as_diffusers(wan_pipe, wan22):
    """diffusers' documented Wan2.2 use: ``load_lora_weights(high, adapter_name="a")`` then
    ``load_lora_weights(low, adapter_name="a", load_into_transformer_2=True)`` (adapter names are
    per transformer), and ``set_adapters("a", 0.6)`` weights it on both: the video equals the
    reference's. A third load of "a" into a transformer that has it is refused, as peft's."""
    import torch

    from tests.parity.wan_reference import initial_noise

    path, ref, lora_a, lora_b = wan22
    high, low = (
        write({m: (d, u, None, None) for m, (d, u, _, _) in lora.items()}, "diffusers") for lora in (lora_a, lora_b)
    )
    noise = initial_noise(32, 48)
    with torch.no_grad():
        ref.load_lora_weights({k: torch.from_numpy(np.array(v)) for k, v in high.items()}, adapter_name="a")
        ref.load_lora_weights(
            {k: torch.from_numpy(np.array(v)) for k, v in low.items()}, adapter_name="a", load_into_transformer_2=True
        )
        ref.set_adapters("a", 0.6)
        want = np.asarray(ref(latents=noise.clone(), output_type="np", **CALL).frames)
        ref.set_adapters("a", 1.0)
        full = np.asarray(ref(latents=noise.clone(), output_type="np", **CALL).frames)
        ref.unload_lora_weights()
    wan_pipe.load_lora_weights(high, adapter_name="a")
    wan_pipe.load_lora_weights(low, adapter_name="a", load_into_transformer_2=True)
    assert wan_pipe.get_list_adapters() == {"transformer": ["a"], "transformer_2": ["a"]}
    with pytest.raises(
        InputError,
        match=r"adapter_name='a' is already loaded into transformer_2 \(loaded: 'a' "
        r"\(transformer, transformer_2\)\)",
    ):
        wan_pipe.load_lora_weights(low, adapter_name="a", load_into_transformer_2=True)
    wan_pipe.set_adapters("a", 0.6)
    got = wan_pipe(latents=noise.numpy(), progress=False, **CALL).frames
    wan_pipe.unload_lora_weights()
    assert psnr(got, want) >= 60.0
    assert psnr(want, full) < 40.0  # the weight 0.6 reaches the reference's video


def test_lightx2v_diff_m_is_added_to_the_modulation_table(wan_pipe, wan22, caplog):
    """LightX2V's ``blocks.N.diff_m`` is a delta of block N's modulation table: vidax adds it to
    ``scale_shift_table`` (saying so at INFO). The reference is diffusers' fused LoRA (which
    drops diff_m) with the delta added to each block's ``scale_shift_table`` by hand: every
    merged weight equals it."""
    import logging

    import torch

    _, ref, lora_a, _ = wan22
    sd = write(
        {m: (d, u, 8.0 if m.startswith("blocks.") else None, b) for m, (d, u, _, b) in lora_a.items()}, "lightx2v"
    )
    rng = np.random.default_rng(5)
    tables = {i: ref.transformer.blocks[i].scale_shift_table for i in range(len(ref.transformer.blocks))}
    diff_m = {i: (rng.standard_normal(t.shape) * 0.1).astype(np.float32) for i, t in tables.items()}
    sd.update({f"diffusion_model.blocks.{i}.diff_m": d for i, d in diff_m.items()})
    kept = {k: v.clone() for k, v in ref.transformer.state_dict().items()}
    with torch.no_grad():
        ref.load_lora_weights({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, adapter_name="x")
        ref.fuse_lora(components=["transformer"])
        ref.unload_lora_weights()  # the fused weights stay (diffusers' way to keep a LoRA merged)
        for i, t in tables.items():
            t += torch.from_numpy(diff_m[i])
        want = {k: v.numpy().copy() for k, v in ref.transformer.state_dict().items()}
        ref.transformer.load_state_dict(kept)  # the module-scoped reference back as it was
    base = merged(wan_pipe)
    with caplog.at_level(logging.INFO, logger="vidax.lora"):
        wan_pipe.load_lora_weights(sd, adapter_name="x")
    got = merged(wan_pipe)
    wan_pipe.unload_lora_weights()
    assert "2 diff_m key(s)" in caplog.text and "scale_shift_table" in caplog.text
    assert sorted(got) == sorted(want)
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert not np.array_equal(got["blocks.0.scale_shift_table"], base["blocks.0.scale_shift_table"])


def random_lora(pipe, seed: int, blocks_only: bool = False) -> dict[str, np.ndarray]:
    """A random diffusers-layout LoRA on every linear weight of ``pipe``'s transformer (its
    blocks' only with ``blocks_only``), shapes from vidax's own parameter table."""
    rng = np.random.default_rng(seed)
    sd = {}
    for key, t in sorted(pipe.lora._targets[0].params.items()):
        if t.path[-1] != "kernel" or len(t.shape) != 2 or (blocks_only and t.layer is None):
            continue
        m, (i, o) = key[: -len(".weight")], t.shape
        sd[f"transformer.{m}.lora_A.weight"] = (rng.standard_normal((RANK, i)) * 0.3).astype(np.float32)
        sd[f"transformer.{m}.lora_B.weight"] = (rng.standard_normal((o, RANK)) * 0.3).astype(np.float32)
    return sd


MESH_CALL = dict(
    prompt="a cat",
    num_frames=5,
    num_inference_steps=2,
    height=32,
    width=32,
    seed=3,
    output_type="latent",
    progress=False,
)


def with_loras(pipe, first, second):
    """``pipe``'s latents with two adapters at weights 0.7 and -0.4."""
    pipe.load_lora_weights(first, adapter_name="a")
    pipe.load_lora_weights(second, adapter_name="b")
    pipe.set_adapters(["a", "b"], [0.7, -0.4])
    return pipe(**MESH_CALL).frames


@pytest.fixture(scope="module")
def single_device_loras(ckpt):
    """(two LoRAs for the embedded checkpoint, the single-device latents and merged weights)."""
    single = vidax.load_pipeline(ckpt, dtype="float32")
    first, second = random_lora(single, 1), random_lora(single, 2, blocks_only=True)
    want = with_loras(single, first, second)
    return first, second, want, merged(single), np.asarray(single.transformer.blocks.attn1.to_q.kernel.get_value())


@pytest.mark.parametrize("layout", ["mesh", "streamed"])
def test_lora_on_mesh_and_streamed_equals_single_device(ckpt, single_device_loras, layout):
    """The embedded checkpoint (heads that split over 2 x 2): two adapters at weights merged on a
    (2, 2, 2) mesh (the deltas sharded like the weights) or into blocks streamed from host memory
    give the single-device weights bit for bit and its latents; unloading restores them."""
    call = MESH_CALL
    first, second, want, weights, q_kernel = single_device_loras
    options = dict(mesh=(2, 2, 2)) if layout == "mesh" else dict(offload=1)
    pipe = vidax.load_pipeline(ckpt, dtype="float32", **options)
    base_out = pipe(**call).frames
    compiled = compiled_steps(pipe)
    got = with_loras(pipe, first, second)
    if layout == "mesh":  # the merged weights keep their sharding, and equal the single-device ones
        kernel = pipe.transformer.blocks.attn1.to_q.kernel.get_value()
        assert not kernel.sharding.is_fully_replicated
        sharded = merged(pipe)
        assert all(np.array_equal(sharded[k], weights[k]) for k in weights)
    else:  # the streamed chunks hold the merged layers
        from vidax.parallel.offload import offloaded_blocks

        blocks = offloaded_blocks(pipe.transformer)
        chunk = np.asarray(blocks.chunk_leaf(1, ("attn1", "to_q", "kernel")))
        assert np.array_equal(chunk[0], q_kernel[1])
    # fp32 summation order differs across layouts (sharded matmuls, per-chunk calls)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.abs(got - base_out).max() > 1e-2  # the LoRA mattered
    pipe.unload_lora_weights()
    np.testing.assert_array_equal(pipe(**call).frames, base_out)  # the base weights, bit for bit
    assert compiled_steps(pipe) == compiled  # merging and unloading compiled no step again


def compiled_steps(pipe) -> int:
    """Executables the pipeline's denoising steps hold (jit caches; a streamed step's pieces)."""
    return sum(
        fn._cache_size() if hasattr(fn, "_cache_size") else len(fn._shared["compiled"])
        for fn in pipe.denoiser.step_fns.values()
    )


def test_family_of_a_lora_whose_names_several_families_share(wan_pipe, tmp_path):
    """An LTX-Video LoRA on the attention (finetrainers' to_q / to_k / to_v / to_out.0 of attn1
    and attn2) has module names that CogVideoX, Cosmos and LTX-2 use too: vidax inspect and the
    refusal on another family name every family it fits (LTX-Video among them), not the first
    registered one (one that fits one family best names it alone: test_wan_bad_loras_refused_in_one_line)."""
    from vidax.cli.inspecting import describe_lora
    from vidax.weights.safetensors_io import save_safetensors

    sd = {
        f"transformer.transformer_blocks.{i}.{a}.{m}.lora_{ab}.weight": np.zeros(
            (RANK, 2048) if ab == "A" else (2048, RANK), np.float32
        )
        for i in range(28)
        for a in ("attn1", "attn2")
        for m in ("to_q", "to_k", "to_v", "to_out.0")
        for ab in "AB"
    }
    file = str(tmp_path / "ltx.safetensors")
    save_safetensors(sd, file)
    family = next(line for line in describe_lora(file).splitlines() if "family:" in line)
    assert family == (
        "  family: cosmos (CosmosTransformer3DModel), ltx (LTXVideoTransformer3DModel) or ltx2 "
        "(LTX2VideoTransformer3DModel) (its module names fit each of them alike) (224 of 224 modules "
        "placed)"
    ), family
    with pytest.raises(
        InputError,
        match=r"looks like a LoRA for cosmos \(CosmosTransformer3DModel\), ltx "
        r"\(LTXVideoTransformer3DModel\) or ltx2 \(LTX2VideoTransformer3DModel\) "
        r"\(its module names fit each of them alike\)$",
    ):
        wan_pipe.load_lora_weights(file)


# ---------------------------------------------------------------------------------------------
# Every family with a diffusers LoRA loader: the diffusers layout merged as diffusers fuses it.


def _family_transformer(family: str):
    import diffusers

    if family == "wan":
        from tests.parity.wan_reference import TRANSFORMER

        return diffusers.WanTransformer3DModel(**TRANSFORMER)
    if family == "cogvideox":
        from tests.parity.cogvideox_reference import TRANSFORMER, VARIANTS

        return diffusers.CogVideoXTransformer3DModel(**{**TRANSFORMER, **next(iter(VARIANTS.values()))["transformer"]})
    if family == "ltx":
        from tests.parity.ltx_reference import TRANSFORMER

        return diffusers.LTXVideoTransformer3DModel(**TRANSFORMER)
    if family == "hunyuan_video":
        from tests.parity.hunyuan_reference import TRANSFORMER

        return diffusers.HunyuanVideoTransformer3DModel(**TRANSFORMER, in_channels=4, out_channels=4)
    from tests.parity.cosmos_reference import TRANSFORMER

    return diffusers.CosmosTransformer3DModel(**TRANSFORMER)


def _load_family(family: str, folder):
    """(torch transformer with random weights, the vidax module loaded from its save, its
    LoraAdapters)."""
    import torch

    from vidax.lora.adapters import LoraAdapters
    from vidax.registry import registry
    from vidax.weights.component import load_component

    torch.manual_seed(0)
    model = _family_transformer(family).eval()
    randomize_torch_module(model, seed=3)
    model.save_pretrained(str(folder), safe_serialization=True)
    spec = registry().component(type(model).__name__)
    config = spec.config_class().from_json_file(str(folder / "config.json"))
    module = load_component(spec, str(folder))
    return model, module, LoraAdapters([("transformer", module, spec, config)])


@pytest.mark.parametrize("family", ["wan", "cogvideox", "ltx", "hunyuan_video", "cosmos"])
def test_diffusers_layout_merges_as_diffusers_fuses(family, tmp_path):
    """Every linear layer of the transformer gets a random LoRA (diffusers layout, some with a
    bias delta); vidax's merged weights equal diffusers' load_lora_adapter + fuse_lora at
    lora_scale 0.7, and unloading restores the checkpoint bit for bit."""
    import torch

    model, module, adapters = _load_family(family, tmp_path)
    linears = {n: tuple(m.weight.shape) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    rng = np.random.default_rng(5)
    # peft gives every layer a bias delta once one has it, and refuses to fuse it into a layer
    # without a bias: bias deltas only where every linear has a bias
    biases = all(model.get_submodule(n).bias is not None for n in linears)
    sd = {}
    for j, (n, (o, i)) in enumerate(sorted(linears.items())):
        sd[f"transformer.{n}.lora_A.weight"] = (rng.standard_normal((RANK, i)) * 0.3).astype(np.float32)
        sd[f"transformer.{n}.lora_B.weight"] = (rng.standard_normal((o, RANK)) * 0.3).astype(np.float32)
        if j % 3 == 0 and biases:
            sd[f"transformer.{n}.lora_B.bias"] = (rng.standard_normal(o) * 0.1).astype(np.float32)
    rules = adapters._targets[0].rules
    base = export_state_dict(module, rules)
    adapters.load(sd, "x")
    adapters.fuse(0.7)
    got = export_state_dict(module, rules)
    with torch.no_grad():
        model.load_lora_adapter({k: torch.from_numpy(v) for k, v in sd.items()}, prefix="transformer", adapter_name="x")
        model.fuse_lora(lora_scale=0.7)
        fused = {k.replace(".base_layer", ""): v.numpy() for k, v in model.state_dict().items() if "lora_" not in k}
    assert set(fused) == set(got)
    changed = 0
    for k, want in fused.items():
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-5, err_msg=k)
        changed += not np.array_equal(got[k], base[k])
    assert changed == len(linears) + sum(k.endswith(".bias") for k in sd)
    adapters.unload()
    restored = export_state_dict(module, rules)
    assert all(np.array_equal(restored[k], base[k]) for k in base)
    # The original-repository / ComfyUI prefix with diffusers' module names (LTX-Video's original
    # layout, as diffusers' _convert_non_diffusers_ltxv_lora_to_diffusers reads it) and kohya's
    # underscores: the same weights, bit for bit.
    for prefixed in (
        {k.replace("transformer.", "diffusion_model.", 1): v for k, v in sd.items()},
        {_kohya(k): v for k, v in sd.items()},
    ):
        adapters.load(prefixed, "y")
        adapters.fuse(0.7)
        again = export_state_dict(module, rules)
        adapters.unload()
        assert all(np.array_equal(again[k], got[k]) for k in got)


def _kohya(key: str) -> str:
    """``transformer.a.b.lora_A.weight`` -> ``lora_unet_a_b.lora_down.weight`` (``.lora_B.bias``:
    ``.diff_b``)."""
    module, _, suffix = key.removeprefix("transformer.").partition(".lora_")
    suffix = {"A.weight": "lora_down.weight", "B.weight": "lora_up.weight", "B.bias": "diff_b"}[suffix]
    return "lora_unet_" + module.replace(".", "_") + "." + suffix


def test_hunyuan_original_layout(tmp_path):
    """HunyuanVideo's original layout (fused img/txt qkv, single blocks' linear1 = q, k, v, MLP,
    the final modulation's shift/scale order, the token refiner) merges bit-equal to the same
    LoRA written in the diffusers layout, and as diffusers' converter + fuse_lora does (its
    converter splits linear1 at the 13B model's width, 3072, so the single blocks are left out of
    that comparison, and two factors its converter mishandles, see below)."""
    import torch

    model, module, adapters = _load_family("hunyuan_video", tmp_path)
    rules = adapters._targets[0].rules
    base = export_state_dict(module, rules)
    rng = np.random.default_rng(7)
    hidden = 20
    qkv, add = ["attn.to_q", "attn.to_k", "attn.to_v"], ["attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"]
    fused = {  # original module -> diffusers modules its rows split into ("swap": halves swapped)
        "double_blocks.0.img_attn_qkv": [f"transformer_blocks.0.{n}" for n in qkv],
        "double_blocks.0.txt_attn_qkv": [f"transformer_blocks.0.{n}" for n in add],
        "double_blocks.0.img_mod.linear": ["transformer_blocks.0.norm1.linear"],
        "double_blocks.0.txt_mlp.fc1": ["transformer_blocks.0.ff_context.net.0.proj"],
        "double_blocks.0.img_attn_proj": ["transformer_blocks.0.attn.to_out.0"],
        "txt_in.individual_token_refiner.blocks.0.self_attn_qkv": [
            f"context_embedder.token_refiner.refiner_blocks.0.{n}" for n in qkv
        ],
        "final_layer.adaLN_modulation.1": ["swap", "norm_out.linear"],
        "single_blocks.0.linear1": [f"single_transformer_blocks.0.{n}" for n in qkv + ["proj_mlp"]],
    }
    original, diffusers_layout = {}, {}
    for name, targets in fused.items():
        swap = targets[0] == "swap"
        targets = targets[1:] if swap else targets
        outs = [model.get_submodule(t).weight.shape[0] for t in targets]
        down = (rng.standard_normal((RANK, model.get_submodule(targets[0]).weight.shape[1])) * 0.3).astype(np.float32)
        up = (rng.standard_normal((sum(outs), RANK)) * 0.3).astype(np.float32)
        original[f"diffusion_model.{name}.lora_A.weight"], original[f"diffusion_model.{name}.lora_B.weight"] = down, up
        if swap:
            up = np.concatenate([up[hidden:], up[:hidden]])
        for t, part in zip(targets, np.split(up, np.cumsum(outs)[:-1])):
            diffusers_layout[f"transformer.{t}.lora_A.weight"] = down
            diffusers_layout[f"transformer.{t}.lora_B.weight"] = np.ascontiguousarray(part)
    results = []
    for sd in (
        original,
        diffusers_layout,
        {
            k.replace(".", "_", k.count(".") - 2).replace("diffusion_model_", "lora_unet_"): v
            for k, v in original.items()
        },
    ):
        adapters.load(sd, "x")
        results.append(export_state_dict(module, rules))
        adapters.unload()
    assert all(np.array_equal(results[0][k], results[1][k]) for k in base)
    assert all(np.array_equal(results[2][k], results[1][k]) for k in base)  # kohya's underscores
    changed = {k for k in base if not np.array_equal(results[0][k], base[k])}
    assert len(changed) == len(diffusers_layout) // 2
    # diffusers' own converter (the single block left out) and fuse_lora
    # Its converter was written for full weights and mishandles two LoRA factors, left out too:
    # the token refiner's self_attn_qkv lora_A (split in three along the rank: an error; vidax shares
    # it, as diffusers does for img_attn_qkv) and final_layer.adaLN_modulation.1's lora_A (its rank
    # halves swapped with the output halves of lora_B, which changes the product; vidax swaps the
    # output rows only, as the diffusers-layout LoRA above)
    double_only = {
        k: v for k, v in original.items() if not any(s in k for s in ("single_blocks", "refiner", "final_layer"))
    }
    adapters.load(double_only, "x")
    got = export_state_dict(module, rules)
    with torch.no_grad():
        from diffusers.loaders.lora_conversion_utils import _convert_hunyuan_video_lora_to_diffusers

        converted = _convert_hunyuan_video_lora_to_diffusers({k: torch.from_numpy(v) for k, v in double_only.items()})
        model.load_lora_adapter(converted, prefix="transformer", adapter_name="x")
        model.fuse_lora(lora_scale=1.0)
        want = {k.replace(".base_layer", ""): v.numpy() for k, v in model.state_dict().items() if "lora_" not in k}
    for k in base:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)


def test_bfloat16_weights_merge_in_float32_and_restore_exactly(ckpt):
    """bfloat16 weights: the delta is added in float32 and rounded once to bfloat16 (the weights
    keep their dtype), and unloading gives the loaded bfloat16 weights back bit for bit."""
    import ml_dtypes

    pipe = vidax.load_pipeline(ckpt, dtype="bfloat16")
    sd = random_lora(pipe, 4)
    kernel = pipe.transformer.blocks.ffn.net[2].kernel
    base = np.asarray(kernel.get_value())
    assert base.dtype == ml_dtypes.bfloat16
    pipe.load_lora_weights(sd)
    got = np.asarray(kernel.get_value())
    assert got.dtype == ml_dtypes.bfloat16
    for layer in range(base.shape[0]):
        m = f"transformer.blocks.{layer}.ffn.net.2"
        delta = (sd[f"{m}.lora_B.weight"].astype(np.float64) @ sd[f"{m}.lora_A.weight"]).T
        want = (base[layer].astype(np.float64) + delta).astype(np.float32).astype(ml_dtypes.bfloat16)
        # one rounding to bfloat16 of the float32 sum: at most one bfloat16 step apart where the
        # float32 delta's last bit tips the rounding
        np.testing.assert_allclose(got[layer].astype(np.float32), want.astype(np.float32), rtol=2**-7, atol=1e-6)
        assert np.mean(got[layer] == want) > 0.99
    pipe.unload_lora_weights()
    assert np.array_equal(np.asarray(kernel.get_value()).view(np.uint16), base.view(np.uint16))


def test_int8_weights_merge_as_peft_and_restore_exactly(ckpt):
    """8-bit weights (weight_dtype="int8"): a LoRA merges as peft merges into 8-bit layers, the
    kernel dequantized, the delta added in float32, the sum quantized again with new
    per-channel scales; unloading gives the loaded int8 kernel and scales back bit for bit."""
    from vidax.nn.quant import dequantize, quantize

    pipe = vidax.load_pipeline(ckpt, dtype="bfloat16", weight_dtype="int8")
    sd = random_lora(pipe, 4)
    layer_ = pipe.transformer.blocks.ffn.net[2]
    q0, s0 = np.asarray(layer_.kernel.get_value()), np.asarray(layer_.kernel_scale.get_value())
    assert q0.dtype == np.int8
    pipe.load_lora_weights(sd)
    q1, s1 = np.asarray(layer_.kernel.get_value()), np.asarray(layer_.kernel_scale.get_value())
    assert q1.dtype == np.int8 and not np.array_equal(s1, s0)
    for layer in range(q0.shape[0]):
        m = f"transformer.blocks.{layer}.ffn.net.2"
        delta = (sd[f"{m}.lora_B.weight"].astype(np.float64) @ sd[f"{m}.lora_A.weight"]).T
        want_q, want_s = quantize(dequantize(q0[layer], s0[layer]) + delta.astype(np.float32), "int8")
        # the same float32 arithmetic on the device as on the host, up to summation order:
        # scales to float32 rounding, codes at most one step apart where a value sits on a .5
        np.testing.assert_allclose(s1[layer], want_s, rtol=1e-6)
        assert np.abs(q1[layer].astype(int) - want_q).max() <= 1 and np.mean(q1[layer] == want_q) > 0.99
    pipe.unload_lora_weights()
    assert np.array_equal(np.asarray(layer_.kernel.get_value()), q0)
    assert np.array_equal(np.asarray(layer_.kernel_scale.get_value()), s0)
