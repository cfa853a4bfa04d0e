"""Single-file transformers in the original-repository layouts diffusers converts beyond Wan and
LTX-Video (the Wan / LTX-Video ones: tests/test_quantized_weights.py): HunyuanVideo (fused q/k/v,
fused single-block input, swapped final modulation), Cosmos-Predict2.5 (``net.`` prefix) and
LTX-2 (video + audio). Each: a tiny random diffusers transformer, its state dict written in the
original layout (the inverse of diffusers' conversion, written here key by key), then the
tensors vidax reads from that file equal those diffusers' ``from_single_file`` loads from it, and
the file loads into vidax's model (checked 1:1 against it). Also: a file of another family is
refused in one line naming the layout found and the one expected, and ``vidax inspect FILE``
describes a single file.
"""

from __future__ import annotations

import os
import re

import ml_dtypes
import numpy as np
import pytest

from vidax.errors import InputError
from vidax.registry import registry
from vidax.weights.safetensors_io import save_safetensors
from vidax.weights.single_file import describe_single_file, open_single_file

torch = pytest.importorskip("torch")


def _tiny(cls, config, folder, seed):
    """A randomised diffusers ``cls(**config)`` saved under ``folder/transformer``; its state dict
    as float32 numpy."""
    from tests.parity.helpers import randomize_torch_module

    model = cls(**config).eval()
    randomize_torch_module(model, seed=seed)
    model.save_pretrained(os.path.join(folder, "transformer"), safe_serialization=True)
    return {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


def _renamed_back(key, renames):
    """``key`` with ``renames`` (original -> diffusers substrings, applied in order by the
    conversion) undone, in reverse order."""
    for a, b in reversed(list(renames.items())):
        key = key.replace(b, a)
    return key


# ------------------------------------------------------------------------------ the layouts

#: diffusers suffix (after the block prefix) -> original, per HunyuanVideo block kind; a tuple of
#: diffusers suffixes is one fused original tensor (concatenated in that order along rows).
_HY_DOUBLE = {
    "attn.norm_q": "img_attn_q_norm",
    "attn.norm_k": "img_attn_k_norm",
    "attn.to_out.0": "img_attn_proj",
    "attn.norm_added_q": "txt_attn_q_norm",
    "attn.norm_added_k": "txt_attn_k_norm",
    "attn.to_add_out": "txt_attn_proj",
    "norm1.linear": "img_mod.linear",
    "norm1_context.linear": "txt_mod.linear",
    "ff.net.0.proj": "img_mlp.fc1",
    "ff.net.2": "img_mlp.fc2",
    "ff_context.net.0.proj": "txt_mlp.fc1",
    "ff_context.net.2": "txt_mlp.fc2",
    ("attn.to_q", "attn.to_k", "attn.to_v"): "img_attn_qkv",
    ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"): "txt_attn_qkv",
}
_HY_SINGLE = {
    "attn.norm_q": "q_norm",
    "attn.norm_k": "k_norm",
    "norm.linear": "modulation.linear",
    "proj_out": "linear2",
    ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"): "linear1",
}
_HY_REFINER = {
    "norm1": "norm1",
    "norm2": "norm2",
    "attn.to_out.0": "self_attn_proj",
    "ff.net.0.proj": "mlp.fc1",
    "ff.net.2": "mlp.fc2",
    "norm_out.linear": "adaLN_modulation.1",
    ("attn.to_q", "attn.to_k", "attn.to_v"): "self_attn_qkv",
}
_HY_TOP = {
    "x_embedder.proj": "img_in.proj",
    "time_text_embed.timestep_embedder.linear_1": "time_in.mlp.0",
    "time_text_embed.timestep_embedder.linear_2": "time_in.mlp.2",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.mlp.0",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.mlp.2",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "proj_out": "final_layer.linear",
    "context_embedder.proj_in": "txt_in.input_embedder",
    "context_embedder.time_text_embed.timestep_embedder.linear_1": "txt_in.t_embedder.mlp.0",
    "context_embedder.time_text_embed.timestep_embedder.linear_2": "txt_in.t_embedder.mlp.2",
    "context_embedder.time_text_embed.text_embedder.linear_1": "txt_in.c_embedder.linear_1",
    "context_embedder.time_text_embed.text_embedder.linear_2": "txt_in.c_embedder.linear_2",
}
_HY_BLOCKS = (
    ("transformer_blocks", "double_blocks", _HY_DOUBLE),
    ("single_transformer_blocks", "single_blocks", _HY_SINGLE),
    ("context_embedder.token_refiner.refiner_blocks", "txt_in.individual_token_refiner.blocks", _HY_REFINER),
)


def hunyuan_original(state):
    """A diffusers HunyuanVideo state dict in the original repository's layout (q/k/v and the
    single blocks' MLP input fused, the final modulation as ``shift, scale``)."""
    out, used = {}, set()
    for key, value in state.items():
        stem, leaf = key.rsplit(".", 1)
        if stem == "norm_out.linear":
            half = value.shape[0] // 2
            out[f"final_layer.adaLN_modulation.1.{leaf}"] = np.concatenate([value[half:], value[:half]])
            used.add(key)
        elif stem in _HY_TOP:
            out[f"{_HY_TOP[stem]}.{leaf}"] = value
            used.add(key)
        for new_prefix, old_prefix, table in _HY_BLOCKS:
            m = re.fullmatch(re.escape(new_prefix) + r"\.(\d+)\.(.+)", stem)
            if not m:
                continue
            for parts, orig in table.items():
                parts = parts if isinstance(parts, tuple) else (parts,)
                if m.group(2) == parts[0]:
                    names = [f"{new_prefix}.{m.group(1)}.{p}.{leaf}" for p in parts]
                    out[f"{old_prefix}.{m.group(1)}.{orig}.{leaf}"] = np.concatenate([state[n] for n in names])
                    used.update(names)
    assert used == set(state), set(state) - used  # every tensor written
    return out


def cosmos_original(state):
    from vidax.models.cosmos.convert import SINGLE_FILE_RENAMES

    return {"net." + _renamed_back(k, SINGLE_FILE_RENAMES): v for k, v in state.items()}


def ltx2_original(state):
    from vidax.models.ltx2.convert import SINGLE_FILE_RENAMES

    out = {}
    for key, value in state.items():
        for new, old in (("time_embed.", "adaln_single."), ("audio_time_embed.", "audio_adaln_single.")):
            key = old + key.removeprefix(new) if key.startswith(new) else key
        out["model.diffusion_model." + _renamed_back(key, SINGLE_FILE_RENAMES)] = value
    # a text connector of the original transformer, which diffusers (and vidax) leave out
    out["model.diffusion_model.video_embeddings_connector.learnable_registers"] = np.ones((2, 4), np.float32)
    return out


def _fp8(tensors):
    """``tensors`` with every 2-D weight float8 + a per-row ``weight_scale``; (the file's tensors,
    the values they stand for)."""
    out, values = {}, {}
    for key, w in tensors.items():
        if w.ndim != 2 or not key.endswith(".weight"):
            out[key] = values[key] = w
            continue
        # scale >= max |w| / 448 (float8_e4m3fn's largest value): w / scale never overflows
        scale = (1.5 * np.abs(w).max(1, keepdims=True) / 448 + 1e-12).astype(np.float32)
        v = (w / scale).astype(ml_dtypes.float8_e4m3fn)
        out[key], out[key[: -len("weight")] + "weight_scale"] = v, scale.reshape(-1)
        values[key] = v.astype(np.float32) * scale
    return out, values


def _gguf(path, tensors):
    """``tensors`` written as GGUF: 2-D weights of a width divisible by 32 as Q8_0, others F32;
    the values they stand for (as diffusers' GGUF loader dequantizes them)."""
    import gguf
    from diffusers.models.model_loading_utils import load_gguf_checkpoint
    from diffusers.quantizers.gguf.utils import dequantize_gguf_tensor

    writer = gguf.GGUFWriter(path, arch="hyvid")
    for key, w in tensors.items():
        if w.ndim == 2 and w.shape[1] % 32 == 0:
            writer.add_tensor(
                key, gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0
            )
        else:
            writer.add_tensor(key, np.ascontiguousarray(w, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {k: dequantize_gguf_tensor(v).float() for k, v in load_gguf_checkpoint(path).items()}


#: HunyuanVideo with widths of 32 (Q8_0 blocks) and a single block.
HUNYUAN = dict(
    num_attention_heads=2,
    attention_head_dim=16,
    num_layers=1,
    num_single_layers=1,
    num_refiner_layers=1,
    mlp_ratio=2.0,
    patch_size=2,
    patch_size_t=1,
    text_embed_dim=32,
    pooled_projection_dim=12,
    rope_axes_dim=(4, 6, 6),
    rope_theta=256.0,
    in_channels=4,
    out_channels=4,
)


@pytest.fixture(scope="module")
def hunyuan_gguf(tmp_path_factory):
    """(folder, GGUF file of the original layout, its tensors converted by diffusers' function)."""
    from diffusers import HunyuanVideoTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_hunyuan_video_transformer_to_diffusers

    folder = str(tmp_path_factory.mktemp("hunyuan_sf"))
    state = _tiny(HunyuanVideoTransformer3DModel, HUNYUAN, folder, seed=3)
    original = hunyuan_original(state)
    file = os.path.join(folder, "hunyuan-Q8_0.gguf")
    values = _gguf(file, original)
    # diffusers cuts a single block's linear1 at 3072 (the released models' width), which this
    # tiny one is not: those two tensors are cut here by the block width, the rest by diffusers.
    linear1 = {k: values.pop(k) for k in list(values) if ".linear1." in k}
    want = {k: v.numpy() for k, v in convert_hunyuan_video_transformer_to_diffusers(values).items()}
    width = HUNYUAN["num_attention_heads"] * HUNYUAN["attention_head_dim"]
    for key, value in linear1.items():
        stem, leaf = (
            key.removesuffix(".linear1." + key.rsplit(".", 1)[1]).replace("single_blocks", "single_transformer_blocks"),
            key.rsplit(".", 1)[1],
        )
        for i, name in enumerate(("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp")):
            want[f"{stem}.{name}.{leaf}"] = value[i * width : (i + 1) * width if i < 3 else None].numpy()
    assert set(want) == set(state)
    return folder, file, want, state


def _read_all(reader):
    return {k: np.asarray(reader.get(k), np.float32) for k in reader.keys()}


def test_hunyuan_gguf_reads_as_diffusers_converts(hunyuan_gguf):
    """A Q8_0 GGUF HunyuanVideo file: the tensors vidax reads (dequantized, fused ones cut, the
    final modulation's halves swapped) equal diffusers' conversion of diffusers' dequantized
    tensors, and load 1:1 into vidax's model."""
    from vidax.weights.component import load_component

    folder, file, want, state = hunyuan_gguf
    spec = registry().component("HunyuanVideoTransformer3DModel")
    got = _read_all(open_single_file(file, spec))
    assert set(got) == set(want)
    for key in want:
        # the same float16 scale times int8 code, cast to float32 on both sides: exact
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # Q8_0 is lossy: the file's weights are the source's within its step (max |w| / 127 a block)
    assert max(np.abs(got[k] - state[k]).max() for k in state) < 0.02
    assert any(not np.array_equal(got[k], state[k]) for k in state)  # quantized weights were read
    model = load_component(spec, os.path.join(folder, "transformer"), "float32", file=file)
    # to_q: rows of the fused qkv's blocks, kept as Q8_0 on the device (vidax.nn.gguf), dequantized
    # there to the same values
    layer = model.transformer_blocks.attn.to_q
    assert layer.kernel_gguf == "Q8_0" and layer.kernel[...].dtype == np.uint8
    q = np.asarray(layer.dense_kernel())[0]
    np.testing.assert_array_equal(q, want["transformer_blocks.0.attn.to_q.weight"].T)


def _from_single_file(cls, file, folder):
    model = cls.from_single_file(file, config=folder, subfolder="transformer", torch_dtype=torch.float32)
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_cosmos_file_loads_as_diffusers_from_single_file(tmp_path):
    """A Cosmos-Predict2.5 file (``net.`` keys): vidax's tensors equal diffusers' from_single_file's
    (same file), and they load 1:1 into vidax's model."""
    from diffusers import CosmosTransformer3DModel

    from tests.parity.cosmos_reference import TRANSFORMER
    from vidax.weights.component import load_component

    folder = str(tmp_path)
    state = _tiny(CosmosTransformer3DModel, dict(TRANSFORMER, num_layers=1), folder, seed=4)
    original = cosmos_original(state)
    original["net.accum_video_sample_counter"] = np.zeros((), np.float32)  # training state, dropped
    file = os.path.join(folder, "cosmos.safetensors")
    save_safetensors(original, file)
    want = _from_single_file(CosmosTransformer3DModel, file, folder)
    spec = registry().component("CosmosTransformer3DModel")
    got = _read_all(open_single_file(file, spec))
    assert set(got) == set(want) == set(state)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    load_component(spec, os.path.join(folder, "transformer"), "float32", file=file)


def test_ltx2_fp8_file_loads_as_diffusers_from_single_file(tmp_path):
    """An fp8-scaled LTX-2.3 file (video + audio streams, a text connector diffusers leaves out):
    vidax's tensors equal diffusers' from_single_file's of the same weights, and load 1:1 into
    vidax's model."""
    from diffusers import LTX2VideoTransformer3DModel

    from tests.parity.ltx2_reference import TRANSFORMER_23
    from vidax.weights.component import load_component

    folder = str(tmp_path)
    state = _tiny(LTX2VideoTransformer3DModel, dict(TRANSFORMER_23, num_layers=1), folder, seed=5)
    stored, values = _fp8(ltx2_original(state))
    fp8 = os.path.join(folder, "ltx2-fp8.safetensors")
    save_safetensors(stored, fp8)
    # diffusers does not read fp8-scaled files: it gets the same values, dequantized, in float32
    save_safetensors(values, os.path.join(folder, "ltx2.safetensors"))
    want = _from_single_file(LTX2VideoTransformer3DModel, os.path.join(folder, "ltx2.safetensors"), folder)
    spec = registry().component("LTX2VideoTransformer3DModel")
    got = _read_all(open_single_file(fp8, spec))
    assert set(got) == set(want) == set(state)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert any(not np.array_equal(got[k], state[k]) for k in state)  # the float8 values were read
    load_component(spec, os.path.join(folder, "transformer"), "float32", file=fp8)
    text = describe_single_file(fp8)
    assert "format: safetensors, fp8 scaled" in text and "layout: LTX-2 " in text and "float8_e4m3fn " in text


def test_layouts_told_apart_by_their_keys():
    """Each family's original keys give its layout; LTX-2's (a superset of LTX-Video's telling
    keys) give LTX-2, LTX-Video's without the audio stream LTX-Video."""
    from tests.test_quantized_weights import LTX_ORIGINAL, WAN_ORIGINAL
    from vidax.weights.single_file import detect_layout

    ltx = LTX_ORIGINAL + ["model.diffusion_model.adaln_single.linear.weight"]
    assert detect_layout(WAN_ORIGINAL) == "Wan" and detect_layout(ltx) == "LTX-Video"
    assert detect_layout(ltx + ["model.diffusion_model.audio_patchify_proj.weight"]) == "LTX-2"
    assert (
        detect_layout(["net.x_embedder.proj.1.weight", "net.blocks.0.self_attn.q_proj.weight"]) == "Cosmos-Predict2/2.5"
    )
    assert detect_layout(["img_in.proj.weight", "double_blocks.0.img_attn_qkv.weight"]) == "HunyuanVideo"
    assert detect_layout(["blocks.0.attn1.to_q.weight"]) is None  # diffusers' own layout: none of these


def test_file_of_another_family_refused_in_one_line(hunyuan_gguf, tmp_path):
    """A HunyuanVideo file given for an LTX-Video transformer (and a file in no layout): one line
    naming transformer=, the layout found and the one the folder takes, before any weight is read."""
    _, file, _, _ = hunyuan_gguf
    with pytest.raises(InputError) as e:
        open_single_file(file, registry().component("LTXVideoTransformer3DModel"))
    msg = str(e.value)
    assert msg == (
        f"transformer={file!r} holds a HunyuanVideo transformer (original layout); this folder's "
        "transformer (LTXVideoTransformer3DModel) takes a file in the original LTX-Video layout"
    )
    other = str(tmp_path / "other.safetensors")
    save_safetensors({"foo.weight": np.zeros((2, 2), np.float32)}, other)
    with pytest.raises(InputError, match="holds no transformer layout vidax reads") as e:
        open_single_file(other, registry().component("WanTransformer3DModel"))
    assert "\n" not in str(e.value)
    lora = str(tmp_path / "lora.safetensors")  # a LoRA given as the transformer (trial 4): point to --lora
    save_safetensors({"transformer.blocks.0.attn1.to_q.lora_A.weight": np.zeros((2, 4), np.float32)}, lora)
    with pytest.raises(InputError, match=r"holds a LoRA .*, not a transformer: give it with --lora"):
        open_single_file(lora, registry().component("WanTransformer3DModel"))


def test_inspect_describes_a_single_file(hunyuan_gguf):
    """``vidax inspect FILE.gguf``: format, tensor types and count, bytes, the layout detected."""
    from typer.testing import CliRunner

    from vidax.cli import app

    _, file, want, _ = hunyuan_gguf
    result = CliRunner().invoke(app, ["inspect", file])
    assert result.exit_code == 0, result.output
    text = result.output
    assert text == describe_single_file(file) + "\n"
    assert (
        "format: GGUF" in text
        and "layout: HunyuanVideo (original repository's keys), read by HunyuanVideoTransformer3DModel" in text
    )
    import gguf

    tensors = gguf.GGUFReader(file).tensors
    kinds = {}
    for t in tensors:
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + 1
    assert f"tensors: {len(tensors)} (" in text and all(f"{k} {v}" in text for k, v in kinds.items())
    assert f"{sum(int(t.n_bytes) for t in tensors):,} B" in text


def test_wrong_family_refused_before_any_weight_is_read(hunyuan_gguf, ckpt, monkeypatch):
    """A HunyuanVideo file given to a Wan folder: load_pipeline(transformer=) and --transformer
    each refuse it in one line, spelled as the user typed it, before any tensor is read."""
    from typer.testing import CliRunner

    import vidax
    from vidax.cli import app
    from vidax.weights.safetensors_io import CheckpointReader

    def no_read(self, key):
        raise AssertionError(f"tensor {key} read before the file was checked")

    monkeypatch.setattr(CheckpointReader, "get", no_read)
    _, file, _, _ = hunyuan_gguf
    tail = (
        " holds a HunyuanVideo transformer (original layout); this folder's transformer "
        "(WanTransformer3DModel) takes a file in the original Wan layout"
    )
    with pytest.raises(InputError) as e:
        vidax.load_pipeline(ckpt, transformer=file)
    assert str(e.value) == f"transformer={file!r}{tail}"
    r = CliRunner().invoke(
        app,
        [
            "generate",
            "-p",
            "x",
            "--checkpoint",
            ckpt,
            "--transformer",
            file,
            "--output",
            os.path.join(os.path.dirname(file), "x.npy"),
        ],
    )
    assert r.exit_code != 0 and f"--transformer {file!r}{tail}" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_diffusers_layout_file_named_with_its_class(ckpt, tmp_path):
    """A transformer's own state dict in one file (diffusers' keys, here the tiny Wan checkpoint's
    transformer/ weights): ``vidax inspect`` and ``transformer=`` both name its class and say
    where it belongs, in one line, rather than "no LoRA layout" / "no transformer layout"."""
    import shutil

    from typer.testing import CliRunner

    from vidax.cli import app

    src = os.path.join(ckpt, "transformer")
    file = str(tmp_path / "wan_diffusers.safetensors")
    shutil.copy(os.path.join(src, next(f for f in sorted(os.listdir(src)) if f.endswith(".safetensors"))), file)
    advice = (
        "a transformer in diffusers' layout (WanTransformer3DModel): put it in a checkpoint's transformer/ "
        "folder with its config.json"
    )
    r = CliRunner().invoke(app, ["inspect", file])
    assert r.exit_code == 0 and r.output == f"{file}: {advice}\n", r.output
    with pytest.raises(InputError) as e:
        open_single_file(file, registry().component("WanTransformer3DModel"))
    assert str(e.value) == (
        f"transformer={file!r} holds a transformer in diffusers' layout (WanTransformer3DModel), "
        "not an original repository's layout: put it in a checkpoint's transformer/ folder "
        "with its config.json"
    )


def test_inspect_single_file_refuses_mesh(tmp_path):
    """``vidax inspect FILE --mesh``: a single file has no config to build a plan from, so --mesh
    is refused in one line (it was ignored), naming the command that gives the file's bytes per
    device (the folder's own rows cannot know a GGUF file's mixed types; that command runs:
    test_quantized_weights.py::test_inspect_counts_a_mixed_gguf_per_device_as_it_loads);
    ``--transformer`` with a single file as PATH is refused likewise."""
    from typer.testing import CliRunner

    from vidax.cli import app

    file = tmp_path / "x y.GGUF"
    file.write_bytes(b"")
    r = CliRunner().invoke(app, ["inspect", str(file), "--mesh", "2x2x2"])
    assert r.exit_code == 2 and r.output.strip() == (
        f"error: --mesh '2x2x2' needs the transformer's config.json: {file} is a single file; for a single-file "
        f"transformer run vidax inspect FOLDER --transformer '{file}' --mesh 2x2x2, FOLDER a checkpoint folder of "
        "its model (the bytes per device of this file's own tensor types, GGUF stacks mixing types padded to the "
        "widest type)"
    ), r.output
    r = CliRunner().invoke(app, ["inspect", str(file), "--transformer", str(file)])
    assert r.exit_code == 2 and r.output.strip() == (
        f"error: --transformer needs a checkpoint folder as PATH: {file} is a single file; run vidax inspect FOLDER "
        f"--transformer '{file}'"
    ), r.output


def test_transformer_help_names_every_layout():
    """``--transformer``'s help lists the layouts the code reads (single_file_layouts())."""
    import inspect as pyinspect

    from vidax import cli
    from vidax.weights.single_file import single_file_layouts

    assert sorted(cli.SINGLE_FILE_LAYOUTS) == sorted(single_file_layouts())
    text = " ".join(pyinspect.signature(cli.generate).parameters["transformer"].default.help.split())
    assert "layout (" + ", ".join(cli.SINGLE_FILE_LAYOUTS) + ")" in text


def test_truncated_gguf_said_to_be_truncated(hunyuan_gguf, tmp_path):
    """A GGUF file cut short: named truncated, with the tensor that ends beyond it and the sizes
    (it was numpy's "cannot reshape array ...")."""
    import gguf

    from vidax.errors import CheckpointError
    from vidax.weights.single_file import gguf_reader

    _, file, _, _ = hunyuan_gguf
    last = max(gguf.GGUFReader(file).tensors, key=lambda t: t.data_offset)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(file, "rb").read()[: int(last.data_offset) + 10])
    with pytest.raises(CheckpointError) as e:
        gguf_reader(str(cut))
    assert str(e.value) == (
        f"{cut} is truncated: it is {int(last.data_offset) + 10:,} bytes, but its tensor table puts tensor "
        f"{last.name!r} at bytes {int(last.data_offset):,} to {int(last.data_offset) + int(last.n_bytes):,} "
        f"({int(last.n_bytes):,} bytes); the file is partly written (an interrupted download or copy): fetch it again"
    )
