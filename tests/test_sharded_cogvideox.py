"""CogVideoX on (data, tensor, sequence) meshes of 8 fake CPU devices equals the single-device run.

The transformer runs one joint [text; video] sequence split over ``sequence`` (Ulysses; the text
tokens are not replicated per shard), Megatron TP over ``tensor``, the batch over ``data``.
Tiny random diffusers checkpoints (every parameter randomised by ``randomize_torch_module``,
biases and modulation tables included, saved with ``save_pretrained``) are loaded by the
production loader with each mesh's placement; outputs are compared in float32.

Variants: 5B-style (3-D RoPE, identity rows on the text) and 1.5-style (``patch_size_t=2``, ofs),
8 heads of 16 (RoPE needs K % 16 == 0; 8 heads split over any tp x sp of 8 devices), 7 text
tokens, joint token counts that the sequence axis does and does not divide. Then the whole
pipelines (5B text-to-video, 1.5 image-to-video) and ``vidax generate --dp --tp --sp`` on
(2, 2, 2) against one device.
"""

from __future__ import annotations

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from typer.testing import CliRunner

import vidax
from tests.parity.helpers import max_rel_err, psnr, randomize_torch_module
from vidax.cli import app
from vidax.encoders.t5 import T5_PARAM_AXES
from vidax.errors import InputError
from vidax.models.cogvideox.config import CogVideoXTransformerConfig
from vidax.models.cogvideox.convert import TRANSFORMER_PARAM_AXES
from vidax.models.cogvideox.transformer import CogVideoXTransformer3DModel
from vidax.parallel.mesh import make_mesh
from vidax.parallel.placement import check_sharded, pipeline_report
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")
import torch  # noqa: E402

BASE = dict(
    num_attention_heads=8,
    attention_head_dim=16,
    in_channels=6,
    out_channels=5,
    time_embed_dim=24,
    text_embed_dim=20,
    num_layers=2,
    sample_width=10,
    sample_height=6,
    sample_frames=9,
    patch_size=2,
    max_text_seq_length=7,
    use_rotary_positional_embeddings=True,
)
VARIANTS = {
    "5b_rope": dict(),
    "1.5_ofs": dict(
        patch_size_t=2, patch_bias=False, sample_height=12, sample_width=14, sample_frames=13, ofs_embed_dim=24
    ),
}
L_TXT = 7
# Latent (T, H, W) per variant, and the joint token count 7 + L: "odd" divides by neither sp=2
# nor sp=4 (padded and masked), "even" by both.
SIZES = {
    "5b_rope": {"odd": (2, 8, 6), "even": (3, 6, 10)},  # 7 + 24 = 31, 7 + 45 = 52
    "1.5_ofs": {"odd": (4, 6, 10), "even": (2, 6, 14)},  # 7 + 30 = 37, 7 + 21 = 28
}
MESHES = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (1, 2, 4), (2, 2, 2)]
# fp32 on both sides; the sharded program sums matmul partials (row-parallel all-reduce) and
# softmax terms in another order: measured <= 5e-7. 1e-5 fails on any real sharding bug (a bias
# added per shard, an unmasked padded key, a text token given the video modulation: > 1e-2).
TOL = 1e-5


def write_transformer(path, config: dict, seed: int) -> None:
    """A diffusers CogVideoX transformer folder with every parameter random and non-zero."""
    torch.manual_seed(seed)
    ref = diffusers.CogVideoXTransformer3DModel(**config).eval()
    randomize_torch_module(ref, seed=seed)
    ref.save_pretrained(path, safe_serialization=True)


def joint_tokens(name: str, kind: str) -> int:
    t, h, w = SIZES[name][kind]
    return L_TXT + t // VARIANTS[name].get("patch_size_t", 1) * (h // 2) * (w // 2)


def mesh_of(sizes):
    return make_mesh(*sizes, devices=jax.devices()[: int(np.prod(sizes))])


def forward(model, x, t, text, ofs):
    graphdef, params = nnx.split(model)
    fn = jax.jit(lambda p, *a: nnx.merge(graphdef, p)(*a))
    return np.asarray(fn(params, x, t, text, ofs))


def _inputs(cfg: dict, size, seed: int):
    g = np.random.default_rng(seed)
    x = jnp.asarray(g.standard_normal((2, *size, cfg["in_channels"])), jnp.float32)
    t = jnp.asarray([37.0, 912.0], jnp.float32)
    text = jnp.asarray(g.standard_normal((2, L_TXT, cfg["text_embed_dim"])), jnp.float32)
    ofs = jnp.asarray([2.0], jnp.float32) if cfg.get("ofs_embed_dim") else None
    return x, t, text, ofs


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory):
    """(name, config, checkpoint path, {size kind: (inputs, single-device output)})."""
    name = request.param
    cfg = dict(BASE, **VARIANTS[name])
    path = tmp_path_factory.mktemp(f"cogvideox_sharded_{name}")
    write_transformer(path, cfg, seed=list(VARIANTS).index(name))
    model = load_component("CogVideoXTransformer3DModel", path)
    refs = {}
    for k, (kind, size) in enumerate(SIZES[name].items()):
        inputs = _inputs(cfg, size, seed=k)
        refs[kind] = (inputs, forward(model, *inputs))
    return name, cfg, path, refs, model


def test_checkpoint_is_not_vacuous(variant):
    """Biases are non-zero (a row-parallel bias added per shard would show) and the output
    depends on the video and on the text tokens."""
    _, _, _, refs, model = variant
    blocks = model.transformer_blocks
    for bias in (blocks.attn1.to_out[0].bias, blocks.ff.net[2].bias, blocks.norm1.linear.bias):
        assert np.abs(np.asarray(bias[...])).min() > 1e-5
    (x, t, text, ofs), ref = refs["odd"]
    assert max_rel_err(forward(model, x[::-1], t, text, ofs), ref) > 0.1
    other_text = jnp.asarray(np.random.default_rng(9).standard_normal(text.shape), jnp.float32)
    assert max_rel_err(forward(model, x, t, other_text, ofs), ref) > 1e-2


@pytest.mark.parametrize("sizes", MESHES, ids=lambda s: "dp%d_tp%d_sp%d" % s)
def test_sharded_equals_single_device(variant, sizes):
    name, _, path, refs, _ = variant
    mesh = mesh_of(sizes)
    model = load_component("CogVideoXTransformer3DModel", path, mesh=mesh)
    # Weights are placed straight into their shards: nothing meant to be sharded is replicated.
    check_sharded(model, TRANSFORMER_PARAM_AXES, mesh, "transformer")
    # Both token counts where the sequence axis is split, the one it does not divide elsewhere.
    for kind in ("odd", "even") if sizes[2] > 1 else ("odd",):
        inputs, ref = refs[kind]
        out = forward(model, *inputs)
        assert out.shape == ref.shape
        err = max_rel_err(out, ref)
        print(f"{name} {sizes} {kind} ({joint_tokens(name, kind)} tokens): max rel err {err:.2e}")
        assert err < TOL, (name, sizes, kind, err)


def test_weights_are_sharded(variant):
    _, _, path, _, _ = variant
    mesh = mesh_of((2, 2, 2))
    model = load_component("CogVideoXTransformer3DModel", path, mesh=mesh)
    blocks = model.transformer_blocks
    spec = lambda p: p[...].sharding.spec  # noqa: E731
    assert spec(blocks.attn1.to_q.kernel) == PartitionSpec(None, None, "tensor")  # column-parallel
    assert spec(blocks.attn1.to_out[0].kernel) == PartitionSpec(None, "tensor")  # row-parallel
    assert spec(blocks.ff.net[0].proj.kernel) == PartitionSpec(None, None, "tensor")
    assert spec(blocks.ff.net[2].kernel) == PartitionSpec(None, "tensor")
    assert spec(blocks.norm1.linear.kernel) == PartitionSpec(None, None, "tensor")
    assert spec(blocks.attn1.to_out[0].bias) == PartitionSpec()  # added once, after the reduction
    # A replicated load is caught.
    replicate = lambda p, sds: NamedSharding(mesh, PartitionSpec())  # noqa: E731
    model = load_component("CogVideoXTransformer3DModel", path, mesh=mesh, placement=replicate)
    with pytest.raises(InputError, match=r"meant to be sharded.*transformer_blocks/attn1/to_q/kernel"):
        check_sharded(model, TRANSFORMER_PARAM_AXES, mesh, "transformer")


@pytest.mark.parametrize("variant", ["5b_rope"], indirect=True)
def test_bf16_on_mesh_close_to_fp32(variant):
    _, _, path, refs, _ = variant
    inputs, ref = refs["odd"]
    model = load_component("CogVideoXTransformer3DModel", path, dtype=jnp.bfloat16, mesh=mesh_of((2, 2, 2)))
    out = forward(model, *inputs)
    assert out.dtype == jnp.bfloat16
    # bf16 weights and matmuls (8-bit mantissa) over two blocks: the single-device bf16 model is
    # ~1e-2 from fp32 (parity tests); a sharding bug is far above 3e-2.
    err = max_rel_err(out.astype(np.float32), ref)
    print(f"bf16 (2, 2, 2) vs fp32: {err:.2e}")
    assert err < 3e-2


def test_heads_not_divisible_by_tp_sp():
    cfg = CogVideoXTransformerConfig.from_config_dict(dict(BASE, num_attention_heads=6))
    with pytest.raises(
        InputError,
        match=r": the mesh dp 1 x tp 2 x sp 4 splits attention heads over tp x sp = 8, "
        r"which does not divide the model's 6; ",
    ) as e:
        nnx.eval_shape(lambda: CogVideoXTransformer3DModel(cfg, mesh=mesh_of((1, 2, 4)), rngs=nnx.Rngs(0)))
    assert str(e.value).endswith(
        "valid (dp, tp, sp) for 8 devices and 6 attention heads: (4, 1, 2), (4, 2, 1), (8, 1, 1)."
    )


# ----------------------------------------------------------------------------- pipeline

PROMPT, NEGATIVE = "a red car walking over the sea", "blue sky"
# 32x48 pixels, 9 frames -> latents (3, 4, 6) -> 5B: 3 x 2 x 3 = 18 video tokens + 15 text tokens
# = 33, 1.5 (3 frames padded to 4, p_t = 2): 12 + 15 = 27; sequence=2 pads to 34 / 28. CFG batch
# 2 over data=2.
CALL = dict(
    height=32, width=48, num_frames=9, num_inference_steps=2, guidance_scale=4.5, max_sequence_length=15, seed=3
)
# fp32 everywhere; measured 2.4e-6 (5B T2V) and 5.6e-6 (1.5 I2V) absolute on frames in [0, 1]
# (sums in another order through T5, two steps, the VAE). A sharding bug moves frames by > 1e-2.
PIPE_TOL = 1e-4


@pytest.fixture(scope="module", params=["5b", "1.5_i2v"])
def pipeline_ckpt(request, tmp_path_factory):
    """A tiny random CogVideoX pipeline of the parity tests (5B text-to-video; 1.5 image-to-video
    with ofs) with an 8-head transformer."""
    from tests.parity.cogvideox_reference import TRANSFORMER, VARIANTS, build_reference

    path = str(tmp_path_factory.mktemp(f"cogvideox_sharded_pipeline_{request.param}"))
    build_reference(path, request.param)
    config = dict(TRANSFORMER, **VARIANTS[request.param]["transformer"], num_attention_heads=8)
    shutil.rmtree(os.path.join(path, "transformer"))
    write_transformer(os.path.join(path, "transformer"), config, seed=5)
    return path


def _call_pipeline(pipe, prompt=PROMPT):
    from tests.parity.cogvideox_reference import condition_image

    image = dict(image=condition_image()) if pipe.family.task == "i2v" else {}
    return pipe(prompt=prompt, negative_prompt=NEGATIVE, progress=False, **image, **CALL).frames


@pytest.fixture(scope="module")
def pipeline_reference(pipeline_ckpt):
    return _call_pipeline(vidax.load_pipeline(pipeline_ckpt))


def test_pipeline_on_mesh_equals_single_device(pipeline_ckpt, pipeline_reference):
    ref = pipeline_reference
    pipe = vidax.load_pipeline(pipeline_ckpt, mesh=(2, 2, 2))
    check_sharded(pipe.transformer, TRANSFORMER_PARAM_AXES, pipe.mesh, "transformer")
    check_sharded(pipe.text_encoder, T5_PARAM_AXES, pipe.mesh, "text_encoder")
    report = pipeline_report(pipe)
    assert "data=2 x tensor=2 x sequence=2 over 8 cpu devices" in report
    assert "transformer:" in report and "text_encoder:" in report and "vae:" in report
    frames = _call_pipeline(pipe)
    assert frames.shape == ref.shape == (1, 9, 32, 48, 3)
    err = np.abs(frames - ref).max()
    print(f"(2, 2, 2) {type(pipe).__name__}: max abs err {err:.2e}, PSNR {psnr(frames, ref):.1f} dB")
    assert err < PIPE_TOL
    # Not vacuous: another prompt gives a clearly different video, and frames are not clipped.
    other = _call_pipeline(pipe, "the dog")
    assert max_rel_err(other, ref) > 1e-2
    assert np.mean((ref <= 0.0) | (ref >= 1.0)) < 0.2


@pytest.mark.parametrize("pipeline_ckpt", ["5b"], indirect=True)
def test_cli_generate_on_mesh(pipeline_ckpt, pipeline_reference, tmp_path):
    out = tmp_path / "video.npy"
    args = [
        "generate",
        "--prompt",
        PROMPT,
        "--negative-prompt",
        NEGATIVE,
        "--checkpoint",
        pipeline_ckpt,
        "--dp",
        "2",
        "--tp",
        "2",
        "--sp",
        "2",
        "--verbose",
        "--no-progress",
        "-o",
        str(out),
    ]
    for k, v in CALL.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "mesh: data=2 x tensor=2 x sequence=2" in r.stderr and "MiB per device" in r.stderr
    assert np.abs(np.load(out)[None] - pipeline_reference).max() < PIPE_TOL


@pytest.mark.parametrize("pipeline_ckpt", ["5b"], indirect=True)
def test_pipeline_bad_mesh_errors(pipeline_ckpt, tmp_path):
    with pytest.raises(
        InputError,
        match=r"^mesh='4x2x2': the mesh dp 4 x tp 2 x sp 2 needs 16 devices, but there are "
        r"8",
    ):
        vidax.load_pipeline(pipeline_ckpt, mesh="4x2x2")
    # Heads that do not split are refused from the config, before any weight is read.
    bad = tmp_path / "bad"
    shutil.copytree(pipeline_ckpt, bad)
    file = bad / "transformer" / "config.json"
    file.write_text(json.dumps(dict(json.loads(file.read_text()), num_attention_heads=6)))
    with pytest.raises(
        InputError,
        match=r"^mesh='dp=1,tp=2,sp=4': the mesh dp 1 x tp 2 x sp 4 splits attention heads "
        r"over tp x sp = 8, which does not divide the model's 6",
    ):
        vidax.load_pipeline(str(bad), mesh="dp=1,tp=2,sp=4")


@pytest.mark.parametrize("pipeline_ckpt", ["5b"], indirect=True)
def test_inspect_mesh_plan(pipeline_ckpt):
    """``vidax inspect --mesh`` plans the CogVideoX transformer (and T5) from the configs."""
    r = CliRunner().invoke(app, ["inspect", pipeline_ckpt, "--mesh", "1x2x2"])
    assert r.exit_code == 0, r.output
    assert "mesh (planned): data=1 x tensor=2 x sequence=2 = 4 devices" in r.stdout
    assert "transformer:" in r.stdout and "text_encoder:" in r.stdout
    assert "tensors sharded" in r.stdout and "NOT RUNNABLE" not in r.stdout
    r = CliRunner().invoke(app, ["inspect", pipeline_ckpt, "--mesh", "1x1x8"])  # 8 heads: fine
    assert "NOT RUNNABLE" not in r.stdout
    r = CliRunner().invoke(app, ["inspect", pipeline_ckpt, "--mesh", "1x2x8"])  # 8 heads on 16
    assert (
        "NOT RUNNABLE: transformer/config.json: the mesh dp 1 x tp 2 x sp 8 splits attention heads over tp x sp = 16, which does not divide the model's 8; "
        in r.stdout
    )


@pytest.mark.parametrize("pipeline_ckpt", ["5b"], indirect=True)
def test_dpm_step_noise_on_mesh(pipeline_ckpt):
    """CogVideoXDPMScheduler with explicit per-step noise ``(steps, B, T, C, h, w)`` on (2, 2, 2)
    equals one device (the noise is split on its batch axis, not its steps axis)."""
    from vidax.schedulers import CogVideoXDPMScheduler

    def run(mesh, seed):
        pipe = vidax.load_pipeline(pipeline_ckpt, mesh=mesh)
        pipe.scheduler = CogVideoXDPMScheduler(pipe.scheduler.config)
        shape = (CALL["num_inference_steps"], 1, 3, pipe.info.vae_config.latent_channels, 4, 6)
        noise = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        return pipe(
            prompt=PROMPT, negative_prompt=NEGATIVE, progress=False, step_noise=noise, output_type="latent", **CALL
        ).frames

    ref = run(None, 0)
    got = run((2, 2, 2), 0)
    # Latents after two DPM steps; the same sums-in-another-order bound as the transformer's.
    assert max_rel_err(got, ref) < 1e-5
    assert max_rel_err(run(None, 1), ref) > 1e-2  # the step noise matters
