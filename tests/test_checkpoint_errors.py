"""Broken checkpoints on the command line: partly written safetensors files and bad configs are
one ``error: ...`` line naming the file, exit status 2, never a traceback or a healthy report."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from vidax.errors import CheckpointError
from vidax.weights import CheckpointReader, save_safetensors

TINY = (
    "--height",
    "32",
    "--width",
    "32",
    "--num-frames",
    "5",
    "--num-inference-steps",
    "1",
    "--max-sequence-length",
    "16",
    "--no-progress",
)
WEIGHTS = os.path.join("transformer", "diffusion_pytorch_model.safetensors")


@pytest.fixture
def copy(ckpt, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(ckpt, dst)
    return dst


def _vidax(*args):
    return subprocess.run([sys.executable, "-m", "vidax", *args], capture_output=True, text=True, timeout=600)


def _one_error_line(r, *words):
    """``r`` failed the vidax way: exit 2, a single ``error:`` line holding ``words``."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, r.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _cut(file, size):
    with open(file, "r+b") as f:
        f.truncate(size)


def _generate(path, tmp_path):
    return _vidax("generate", "-p", "x", "--checkpoint", str(path), *TINY, "-o", str(tmp_path / "v.npy"))


def test_truncated_data_names_file_and_sizes(copy, tmp_path):
    file = copy / WEIGHTS
    full = file.stat().st_size
    _cut(file, full - 3000)
    with pytest.raises(CheckpointError) as e:
        CheckpointReader(file)
    assert str(file) in str(e.value) and str(full) in str(e.value) and str(full - 3000) in str(e.value)
    for r in (_vidax("inspect", str(copy)), _generate(copy, tmp_path)):
        _one_error_line(r, str(file), f"{full} bytes", f"{full - 3000}", "truncated")
    assert not (tmp_path / "v.npy").exists()


def test_truncated_header_is_an_error_not_left_out(copy, tmp_path):
    file = copy / WEIGHTS
    _cut(file, 1000)  # inside the JSON header
    for r in (_vidax("inspect", str(copy)), _generate(copy, tmp_path)):
        _one_error_line(r, str(file), "header", "truncated", "1000")


def test_trailing_bytes_and_inconsistent_offsets(tmp_path):
    file = tmp_path / "m.safetensors"
    save_safetensors({"x": np.zeros((4, 4), np.float32)}, file)
    with open(file, "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(CheckpointError, match=r"m\.safetensors.* is \d+ bytes, but its safetensors header says"):
        CheckpointReader(file)
    raw = json.dumps({"x": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 60]}}).encode()
    raw += b" " * (-len(raw) % 8)
    file.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 60)
    with pytest.raises(CheckpointError, match=r"tensor 'x' .*\(4, 4\) float32 needs 64 bytes.* 60"):
        CheckpointReader(file)


def test_folders_without_weights_are_still_listed(ckpt):
    """scheduler/ and tokenizer/ hold no safetensors: inspect shows them and stays healthy."""
    r = _vidax("inspect", ckpt)
    assert r.returncode == 0, r.stderr
    assert "scheduler/  UniPCMultistepScheduler" in r.stdout and "tokenizer/  T5TokenizerFast" in r.stdout
    assert r.stdout.count("parameters in") == 3  # text encoder, transformer, VAE


@pytest.mark.parametrize("text, what", [('{"num_layers": 2,', "not valid JSON"), ("[1, 2]", "not a JSON object")])
@pytest.mark.fast
def test_bad_transformer_config(copy, tmp_path, text, what):
    file = copy / "transformer" / "config.json"
    file.write_text(text)
    for r in (_vidax("inspect", str(copy)), _generate(copy, tmp_path)):
        _one_error_line(r, str(file), what)


@pytest.mark.parametrize(
    "component, name",
    [("scheduler", "scheduler_config.json"), ("tokenizer", "tokenizer_config.json"), ("vae", "config.json")],
)
def test_other_bad_configs(copy, tmp_path, component, name):
    file = copy / component / name
    file.write_text("{oops")
    r = _generate(copy, tmp_path)
    _one_error_line(r, str(file), "not valid JSON")


def test_bad_model_index_and_shard_index(copy, tmp_path):
    (copy / "model_index.json").write_text("[]")
    for r in (_vidax("inspect", str(copy)), _generate(copy, tmp_path)):
        _one_error_line(r, str(copy / "model_index.json"), "not a JSON object")
    index = tmp_path / "w" / "m.safetensors.index.json"
    index.parent.mkdir()
    index.write_text('{"weight_map": ')
    with pytest.raises(CheckpointError, match="m.safetensors.index.json is not valid JSON"):
        CheckpointReader(index.parent)
    index.write_text("{}")
    with pytest.raises(CheckpointError, match="has no 'weight_map'"):
        CheckpointReader(index.parent)


def test_inspect_missing_path_and_folder_without_model_index(tmp_path):
    nope = str(tmp_path / "nope" / "deeper")
    # The PATH argument is named as the command line has it, not as the keyword checkpoint=.
    _one_error_line(_vidax("inspect", nope), f"error: vidax inspect {nope!r}: no such folder")
    (tmp_path / "x.wav").write_text("")
    _one_error_line(_vidax("inspect", str(tmp_path / "x.wav")), f"vidax inspect {str(tmp_path / 'x.wav')!r} is a file")
    _one_error_line(
        _vidax("inspect", str(tmp_path / "lora.safetensors")),
        f"error: vidax inspect {str(tmp_path / 'lora.safetensors')!r}: no such file",
    )
    _one_error_line(_vidax("inspect", str(tmp_path)), str(tmp_path), "no model_index.json")


@pytest.mark.parametrize(
    "header, what",
    [
        (bytes(range(128, 160)), "its 32-byte header is not UTF-8 JSON text (byte 0x80 at offset 8)"),
        (b"not json at all!", "its 16-byte header is not valid JSON (Expecting value at offset 8)"),
        (b'["a", "list"]', "its header is a JSON list, not an object of tensors"),
    ],
)
@pytest.mark.fast
def test_garbage_header_is_one_checkpoint_error(tmp_path, header, what):
    """A file whose header is not JSON (another format saved as .safetensors, a damaged file):
    one CheckpointError naming the file and what is wrong, never a codec or JSON error."""
    import struct

    file = tmp_path / "m.safetensors"
    file.write_bytes(struct.pack("<Q", len(header)) + header + bytes(64))
    with pytest.raises(CheckpointError) as e:
        CheckpointReader(file)
    assert str(e.value) == f"{file} is not a safetensors file (or is damaged): {what}"
    file.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))  # a PNG: its first 8 bytes as a header length
    with pytest.raises(
        CheckpointError,
        match=r"m\.safetensors is not a safetensors file: its first 8 bytes give a "
        r"header length of \d+ bytes .*; the file is 72 bytes\)",
    ):
        CheckpointReader(file)


@pytest.mark.fast
def test_nan_in_a_config_is_a_config_error():
    """A config.json float that is NaN (Python's json reads it) is refused when the config is read,
    not found as NaN latents after loading that the message blames on the weights."""
    from vidax.errors import ConfigError
    from vidax.models.wan.config import WanTransformerConfig

    with pytest.raises(ConfigError, match=r"^cfg.json: eps=nan is not finite; give a finite number$"):
        WanTransformerConfig.from_config_dict({"eps": float("nan")}, source="cfg.json")


def test_config_reference_table_is_diffusers():
    """:data:`vidax.config_reference.DIFFUSERS_CONFIG_KEYS` is the ``__init__`` parameters of
    every diffusers component class vidax runs (as the installed diffusers has them), and each
    of those keys is implemented, ignored as inert or accepted at its neutral value by vidax's
    config: so the keys vidax ignores as diffusers does are exactly those diffusers ignores."""
    import dataclasses
    import importlib
    import inspect

    pytest.importorskip("diffusers")
    from vidax.config_reference import DIFFUSERS_CONFIG_KEYS, diffusers_config_keys
    from vidax.registry import registry

    want = {}
    for spec in registry().components():
        ref = None
        for module in ("diffusers", "diffusers.pipelines.ltx", "diffusers.pipelines.ltx2"):
            ref = ref or getattr(importlib.import_module(module), spec.class_name, None)
        if spec.config is None or ref is None:
            continue
        params = inspect.signature(ref.__init__).parameters
        assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params.values()), spec.class_name
        want[spec.class_name] = " ".join(sorted(n for n in params if n != "self"))
        config = spec.config_class()
        config = getattr(config, "config_class", config)  # a scheduler: its config class
        known = {f.name for f in dataclasses.fields(config)} | set(config.IGNORED) | set(config.NEUTRAL)
        assert diffusers_config_keys(spec.class_name) <= known, (
            spec.class_name,
            diffusers_config_keys(spec.class_name) - known,
        )
    assert DIFFUSERS_CONFIG_KEYS == dict(sorted(want.items()))
    # The T5 encoders: transformers' config class's parameters and every config attribute its
    # model reads (so a key outside the table is one transformers keeps and never uses).
    import re

    import transformers
    from transformers.models.t5 import modeling_t5
    from transformers.models.umt5 import modeling_umt5

    from vidax.config_reference import TRANSFORMERS_CONFIG_KEYS

    for cls, module in ((transformers.T5Config, modeling_t5), (transformers.UMT5Config, modeling_umt5)):
        keys = set(TRANSFORMERS_CONFIG_KEYS[cls.model_type].split())
        assert {n for n in inspect.signature(cls.__init__).parameters if n != "self"} <= keys, cls
        read = set(re.findall(r"config\.([a-z][a-z_0-9]*)", inspect.getsource(module)))
        assert read <= keys, read - keys


@pytest.mark.fast
def test_a_key_diffusers_ignores_is_ignored(caplog):
    """A config key the diffusers class its ``_class_name`` names does not take (a newer
    diffusers' key, a note) is ignored with a warning on every parse of a dict, as diffusers'
    ``from_config`` gives it; a config that names no class vidax knows the reference's keys of
    stays strict."""
    from vidax.config import ConfigFile
    from vidax.errors import ConfigError
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.schedulers import scheduler_from_config

    base = WanTransformerConfig.from_config_dict({"_class_name": "WanTransformer3DModel"}, source="t.json")
    with caplog.at_level("WARNING", logger="vidax.config"):
        for _ in range(2):
            got = WanTransformerConfig.from_config_dict(
                {"_class_name": "WanTransformer3DModel", "future_key": 3}, source="t.json"
            )
        # a checkpoint's config (as Checkpoint.open reads it): once per read, however often parsed
        for _ in range(2):  # two loads, two reads of the file
            read = ConfigFile({"_class_name": "WanTransformer3DModel", "future_key": 3})
            for _ in range(3):  # a load parses it more than once
                WanTransformerConfig.from_config_dict(read, source="t.json")
    assert got == base
    assert [r.getMessage() for r in caplog.records] == 4 * [
        "t.json: future_key=3 is not a setting of diffusers' WanTransformer3DModel, which ignores it; ignored"
    ]
    from vidax.default_checkpoint import SCHEDULER

    scheduler_from_config({**SCHEDULER, "note": "x"}, source="s.json")
    with pytest.raises(ConfigError, match="^t.json: unknown setting future_key=3 for WanTransformerConfig"):
        WanTransformerConfig.from_config_dict({"future_key": 3}, source="t.json")


def test_pipeline_with_keys_diffusers_ignores(copy, caplog):
    """A checkpoint whose text encoder, transformer, VAE, scheduler and model_index.json carry
    keys diffusers (and transformers) ignore loads and makes the video it makes without them,
    warning once per config file and load (as diffusers' one ``from_config`` per component;
    vidax parses a config several times while it loads: the record is the read file's,
    :class:`vidax.config.ConfigFile`)."""
    import vidax

    call = dict(prompt="a cat", height=32, width=32, num_frames=5, num_inference_steps=1, seed=0, progress=False)
    want = vidax.load_pipeline(str(copy), progress=False)(**call).frames
    for component, name in (
        ("text_encoder", "config.json"),
        ("transformer", "config.json"),
        ("vae", "config.json"),
        ("scheduler", "scheduler_config.json"),
        (".", "model_index.json"),
    ):
        file = copy / component / name
        config = json.loads(file.read_text())
        config.update(future_key=3, _name_or_path="someone/model")
        file.write_text(json.dumps(config))
    with caplog.at_level("WARNING", logger="vidax.config"):
        pipe = vidax.load_pipeline(str(copy), progress=False)
    np.testing.assert_array_equal(pipe(**call).frames, want)
    warned = sorted(r.getMessage() for r in caplog.records)
    files = ["scheduler/scheduler_config.json", *(f"{c}/config.json" for c in ("text_encoder", "transformer", "vae"))]
    assert [m.split(": ")[0] for m in warned] == [f"{copy}/{f}" for f in files]
    assert all(": future_key=3 is not a setting of " in m for m in warned)
