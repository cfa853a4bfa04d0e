"""Staged components (``vidax.pipelines.staging``): the text encoder and VAE wait in host memory,
are on the device only while they run, and leave nothing on it afterwards; the decision rule;
the CLI flags."""

from __future__ import annotations

import gc
import logging

import jax
import numpy as np
import pytest
from flax import nnx
from typer.testing import CliRunner

import vidax
from tests.test_offload import NEGATIVE, PROMPT, write_offload_checkpoint
from vidax.cli import app
from vidax.parallel.offload import OffloadConfig
from vidax.pipelines import staging as staging_mod
from vidax.pipelines.prompts import encode_prompts
from vidax.pipelines.staging import Staging, component_bytes, plan_pipeline_staging, plan_staging

# The CLI's defaults (negative prompt "", guidance 5.0, seed 0) at a small size.
SMALL = dict(
    height=32,
    width=48,
    num_frames=5,
    num_inference_steps=2,
    guidance_scale=5.0,
    max_sequence_length=16,
    seed=0,
    progress=False,
)
STAGED = OffloadConfig(keep_text_encoder=False, keep_vae=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_offload_checkpoint(str(tmp_path_factory.mktemp("staging")))


@pytest.fixture(scope="module")
def frames(ckpt):
    """Decoded frames of the resident pipeline."""
    return vidax.load_pipeline(ckpt)(PROMPT, "", **SMALL).frames


def _device_buffers() -> dict:
    """(device, address) -> bytes of every live buffer in device memory (not host memory kinds)."""
    gc.collect()
    kind = jax.local_devices()[0].default_memory().kind
    out = {}
    for a in jax.live_arrays():
        if a.sharding.memory_kind == kind:
            for s in a.addressable_shards:
                out[(s.device, s.data.unsafe_buffer_pointer())] = s.data.nbytes
    return out


def _kinds(module) -> set:
    return {a.sharding.memory_kind for a in jax.tree.leaves(nnx.state(module))}


@pytest.mark.parametrize("mesh", [None, (2, 2, 2)], ids=["one-device", "dp2-tp2-sp2"])
def test_text_encoder_released_after_encoding(ckpt, mesh):
    """After encoding, device memory holds exactly what it held before plus the embeddings: no
    text-encoder parameter (nor a closure holding one) stays. During encoding it was on the
    device. With keep_text_encoder=True it stays there."""
    pipe = vidax.load_pipeline(ckpt, mesh=mesh, offload=STAGED)
    assert _kinds(pipe.text_encoder) == {"pinned_host"}  # loaded straight into host memory
    te_bytes = sum(a.nbytes for a in jax.tree.leaves(nnx.state(pipe.text_encoder)))
    seen_kinds = []
    encode_prompts(pipe, ["warm up"], 16)  # compile first, so the cache is not counted below
    encode_text = pipe.hooks.encode_text

    def spy(texts, length, truncation=None):  # where the encoder's parameters are while it runs
        seen_kinds.append(_kinds(pipe.text_encoder))
        return encode_text(texts, length, truncation)

    pipe.hooks.encode_text = spy
    before = _device_buffers()
    embeds = encode_prompts(pipe, [PROMPT, NEGATIVE], 16)
    embeds.block_until_ready()
    after = _device_buffers()
    new = {k: v for k, v in after.items() if k not in before}
    gone = [k for k in before if k not in after]
    embeds_bytes = sum(s.data.nbytes for s in embeds.addressable_shards)  # replicated: per device
    print(
        f"mesh {mesh}: text encoder {te_bytes} B; device buffers +{sum(new.values())} B "
        f"(embeddings {embeds_bytes} B over all devices), {len(gone)} gone"
    )
    assert seen_kinds == [{"device"}]
    assert sum(new.values()) == embeds_bytes and not gone
    assert _kinds(pipe.text_encoder) == {"pinned_host"}
    assert te_bytes > 10 * embeds.nbytes  # a leaked text encoder would show

    kept = vidax.load_pipeline(ckpt, mesh=mesh, offload=OffloadConfig(keep_text_encoder=True, keep_vae=True))
    assert _kinds(kept.text_encoder) == {"device"} and _kinds(kept.vae) == {"device"}
    # Same embeddings either way (bit-exact: the same executable on the same values).
    np.testing.assert_array_equal(np.asarray(encode_prompts(kept, [PROMPT, NEGATIVE], 16)), np.asarray(embeds))


def _spy_on_decode(monkeypatch, vae, look):
    """Calls look() each time `vae` starts decoding. The spy sits on the class: a function set on
    the module instance would be static graph data, which jit's caches keep (and with it every
    array it closes over) for the rest of the process."""
    iter_decode = type(vae).iter_decode

    def spy(self, z):
        look()
        return iter_decode(self, z)

    monkeypatch.setattr(type(vae), "iter_decode", spy)


def test_staged_vae_decode(ckpt, frames, monkeypatch):
    """Frames equal the resident run; the VAE is on the device only while decoding."""
    pipe = vidax.load_pipeline(ckpt, offload=STAGED)
    assert _kinds(pipe.vae) == {"pinned_host"}
    vae_shapes = {(a.shape, a.dtype) for a in jax.tree.leaves(nnx.state(pipe.vae))}
    during = []
    _spy_on_decode(monkeypatch, pipe.vae, lambda: during.append(_kinds(pipe.vae)))
    kind = jax.local_devices()[0].default_memory().kind
    gc.collect()
    before = {id(a) for a in jax.live_arrays()}  # other tests' pipelines may hold a VAE of these shapes
    out = pipe(PROMPT, "", **SMALL)
    np.testing.assert_array_equal(out.frames, frames)
    assert during == [{"device"}] and _kinds(pipe.vae) == {"pinned_host"}
    gc.collect()
    left = [
        a
        for a in jax.live_arrays()
        if id(a) not in before and a.sharding.memory_kind == kind and (a.shape, a.dtype) in vae_shapes and a.ndim >= 4
    ]
    assert not left  # no VAE kernel left on the device
    assert out.stats.device_peak_bytes > 0 and out.stats.host_peak_rss_bytes > 0


def test_transformer_off_the_device_while_encoding_and_decoding(ckpt, frames, monkeypatch):
    """keep_transformer=False: the transformer's weights wait in host memory while the prompt is
    encoded and while the VAE decodes (no transformer buffer on the device then: nothing else
    holds them) and are on the device for the steps; the frames equal the resident run's; a
    second call runs the same. The host copy is made once and kept: a call copies the weights to
    the host only when they changed since (here the first call, and after a weight is replaced)."""
    pipe = vidax.load_pipeline(ckpt, offload=OffloadConfig(keep_transformer=False))
    assert _kinds(pipe.transformer) == {"device"}
    # A weight on the device is found by its shape, dtype and values: a freed weight's address is
    # soon another array's (the prompt embeddings took one), so addresses cannot say it.
    # (Copies, not views of the buffers, and no name left bound to a weight: either keeps it alive.)
    weights = {}
    for shape, dtype, value in [
        (a.shape, a.dtype, np.array(a, copy=True)) for a in jax.tree.leaves(nnx.state(pipe.transformer))
    ]:
        weights.setdefault((shape, dtype), []).append(value)
    during, on_device = [], []

    def look():
        during.append(_kinds(pipe.transformer))
        gc.collect()
        kind = jax.local_devices()[0].default_memory().kind
        on_device.append(
            [
                a.shape
                for a in jax.live_arrays()
                if a.sharding.memory_kind == kind
                and any(np.array_equal(np.asarray(a), w) for w in weights.get((a.shape, a.dtype), ()))
            ]
        )

    encode_text = pipe.hooks.encode_text

    def encode_spy(texts, length, truncation=None):
        look()
        return encode_text(texts, length, truncation)

    _spy_on_decode(monkeypatch, pipe.vae, look)
    pipe.hooks.encode_text = encode_spy
    to_host, device_put = [], jax.device_put

    def counting_put(x, device=None, *args, **kwargs):
        if getattr(device, "memory_kind", None) == "pinned_host":
            to_host.extend([None] * len(jax.tree.leaves(x)))  # counted, not held
        return device_put(x, device, *args, **kwargs)

    monkeypatch.setattr(jax, "device_put", counting_put)
    leaves = len(jax.tree.leaves(nnx.state(pipe.transformer)))
    out = pipe(PROMPT, "", **SMALL)
    np.testing.assert_array_equal(out.frames, frames)
    assert during == [{"pinned_host"}] * 2 and on_device == [[], []]
    assert _kinds(pipe.transformer) == {"device"}
    assert (
        "transformer in pinned_host memory while the prompt is encoded and the VAE decodes" in pipe.staging.describe()
    )
    assert len(to_host) == leaves  # once, in the prompt's stage; the decode's reused it
    np.testing.assert_array_equal(pipe(PROMPT, "", **SMALL).frames, frames)
    assert len(to_host) == leaves and during[2:] == [{"pinned_host"}] * 2 and on_device[2:] == [[], []]
    # A weight replaced (as a LoRA fused replaces them): the next call copies the weights again.
    state = nnx.state(pipe.transformer)
    path, a = jax.tree_util.tree_leaves_with_path(state)[0]
    nnx.update(pipe.transformer, jax.tree_util.tree_map_with_path(lambda p, x: x + 0 if p == path else x, state))
    np.testing.assert_array_equal(pipe(PROMPT, "", **SMALL).frames, frames)
    assert len(to_host) == 2 * leaves


def test_staged_vae_image_to_video(tmp_path):
    """Image-to-video encodes the image with the staged VAE: same latents as resident."""
    from tests.parity.wan_reference import random_image, write_tiny_wan_variant

    path = write_tiny_wan_variant(str(tmp_path / "i2v"), image_to_video=True)
    call = dict(SMALL, output_type="latent")
    image = random_image(0)
    ref = vidax.load_pipeline(path, task="i2v")(image, "a cat", **call).frames
    pipe = vidax.load_pipeline(path, task="i2v", offload=STAGED)
    np.testing.assert_array_equal(pipe(image, "a cat", **call).frames, ref)
    assert _kinds(pipe.vae) == {"pinned_host"}


def test_plan_staging_rule():
    gib = 2**30
    sizes = {"transformer": 8 * gib, "text_encoder": 10 * gib, "vae": 1 * gib}
    auto = {"text_encoder": None, "vae": None}
    # No reported limit (CPU): keep everything unless asked.
    assert plan_staging(auto, sizes, None) == {"text_encoder": False, "vae": False}
    assert plan_staging({"text_encoder": False, "vae": None}, sizes, None) == {"text_encoder": True, "vae": False}
    # 19 GiB of parameters: fit in 0.6 x 80 GiB, not in 0.6 x 24 GiB (text encoder staged
    # first, then 9 GiB <= 14.4), nor in 0.6 x 12 GiB (VAE staged too).
    assert plan_staging(auto, sizes, 80 * gib) == {"text_encoder": False, "vae": False}
    assert plan_staging(auto, sizes, 24 * gib) == {"text_encoder": True, "vae": False}
    assert plan_staging(auto, sizes, 12 * gib) == {"text_encoder": True, "vae": True}
    # Explicit choices win over the rule.
    assert plan_staging({"text_encoder": True, "vae": None}, sizes, 12 * gib) == {"text_encoder": False, "vae": True}
    assert plan_staging({"text_encoder": None, "vae": False}, sizes, 80 * gib) == {"text_encoder": False, "vae": True}


def test_plan_pipeline_staging_from_headers(ckpt, monkeypatch):
    import os

    paths = {n: os.path.join(ckpt, n) for n in ("transformer", "text_encoder", "vae")}
    tr = component_bytes(paths["transformer"], np.float32, ("blocks",))
    blocks, layers = tr["stacks"]["blocks"]
    assert layers == 5 and 0 < blocks < tr["total"]
    te = component_bytes(paths["text_encoder"], np.float32)["total"]
    assert component_bytes(paths["text_encoder"], "bfloat16")["total"] == te // 2
    vae = component_bytes(paths["vae"], np.float32)["total"]
    # Resident total just over 0.6 of the limit -> the text encoder is staged, the VAE is not.
    limit = int((tr["total"] + te + vae) / 0.6) - 1
    monkeypatch.setattr(staging_mod, "device_memory_limit", lambda: limit)
    plan = plan_pipeline_staging(paths, np.float32, np.float32, None, None)
    assert plan.staged == {"text_encoder": True, "vae": False}
    # Streaming the blocks counts 2 chunks instead of 5 layers: now everything fits.
    per_layer = blocks / 5
    limit = int((tr["total"] - 3 * per_layer + te + vae) / 0.6) + 1
    monkeypatch.setattr(staging_mod, "device_memory_limit", lambda: limit)
    assert plan_pipeline_staging(paths, np.float32, np.float32, OffloadConfig(chunk=1), None).staged == {
        "text_encoder": False,
        "vae": False,
    }
    monkeypatch.setattr(staging_mod, "device_memory_limit", lambda: None)
    assert plan_pipeline_staging(paths, np.float32, np.float32, None, None).staged == {
        "text_encoder": False,
        "vae": False,
    }


def test_no_host_memory_keeps_resident(caplog):
    with caplog.at_level(logging.WARNING, logger="vidax.pipeline"):
        s = Staging({"text_encoder": True, "vae": False}, memory_kind="numpy")
    assert not s.is_staged("text_encoder") and "stay on the device" in caplog.text
    with s.on_device("text_encoder"):  # a no-op
        pass


def test_cli_offload_flags(ckpt, frames, tmp_path):
    runner = CliRunner()
    base = [
        "generate",
        "-p",
        PROMPT,
        "--checkpoint",
        ckpt,
        "--height",
        "32",
        "--width",
        "48",
        "--num-frames",
        "5",
        "--num-inference-steps",
        "2",
        "--max-sequence-length",
        "16",
        "--no-progress",
    ]
    r = runner.invoke(
        app,
        base
        + [
            "-o",
            str(tmp_path / "off.npy"),
            "--offload-blocks",
            "2",
            "--offload-text-encoder",
            "--offload-vae",
            "--verbose",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "5 blocks streamed from pinned_host in 3 chunk(s) of 2" in r.output
    assert "staging: text_encoder, vae in pinned_host memory" in r.output
    assert "peak device memory" in r.output and "peak host RSS" in r.output
    np.testing.assert_array_equal(np.load(tmp_path / "off.npy"), frames[0])
    for bad in ("0", "-2", "half"):
        r = runner.invoke(app, base + ["-o", str(tmp_path / "x.npy"), "--offload-blocks", bad])
        assert r.exit_code == 2 and "--offload-blocks must be a positive integer" in r.output
