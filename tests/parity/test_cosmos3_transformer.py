"""Parity of vidax's Cosmos 3 transformer with ``diffusers.Cosmos3OmniTransformer`` (tiny configs).

Two tiny references, every parameter randomised, ``save_pretrained`` -> the production loader:

* ``nano``: the Qwen3-VL layout (SiLU-gated MLPs, q/k RMS norms in both pathways), sound and
  action heads; hidden 40, 4 query heads and 2 key/value heads of 12 (GQA, N·K = 48 != D),
  MLP 36, mRoPE section (2, 2, 2) interleaved, latent 5 channels, patch 2, sound 6, action 7 in 3
  domains, 2 layers (so the understanding tokens' causal attention in layer 1 reaches the
  generation tokens through layer 2's keys).
* ``edge``: Edge's variant layers from its config (``hidden_act="relu2"``: squared-ReLU MLPs
  without ``gate_proj``; ``qk_norm_for_text`` False with ``use_und_k_norm_for_gen``: no
  understanding q/k norms, a separate norm on the understanding keys the generation tokens see).

One packed sequence of 31 tokens: 5 text tokens (understanding, causal), then the generation
part: 3 latent frames of 4x5 (padded to 4x6: 6 patches a frame, frame 0 a clean condition),
a text token, 4 sound frames and 2 action frames; the mRoPE positions are random up to ~16000
(the reference's temporal modality margin is 15000).

fp32 tolerance 1e-5 relative (of the output's max): both sides run the same float32 arithmetic in
another order (XLA vs torch matmuls and SDPA), a few ulps through 2 layers; a wrong mask, norm,
table or projection is off by > 1e-2.
"""

from __future__ import annotations

import glob
import inspect
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from tests.parity.helpers import assert_input_sensitive, max_rel_err, randomize_torch_module
from tests.paths import REFERENCE_CONFIGS
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.transformer import Cosmos3Forward, Cosmos3OmniTransformer
from vidax.parallel.chunked_step import ChunkedStep
from vidax.parallel.mesh import make_mesh
from vidax.parallel.offload import offloaded_stacks
from vidax.weights.component import load_component

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer as Ref  # noqa: E402

NAME = "Cosmos3OmniTransformer"
NANO = dict(
    hidden_size=40,
    head_dim=12,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=36,
    num_hidden_layers=2,
    rms_norm_eps=1e-6,
    attention_bias=False,
    rope_theta=5000000.0,
    rope_scaling={"mrope_section": [2, 2, 2], "mrope_interleaved": True, "rope_type": "default"},
    latent_channel=5,
    latent_patch_size=2,
    patch_latent_dim=20,
    vocab_size=50,
    sound_gen=True,
    sound_dim=6,
    action_gen=True,
    action_dim=7,
    num_embodiment_domains=3,
    timestep_scale=0.001,
)
EDGE = dict(
    NANO,
    hidden_act="relu2",
    qk_norm_for_text=False,
    use_und_k_norm_for_gen=True,
    rms_norm_eps=1e-5,
    rope_theta=1e8,
    sound_gen=False,
    sound_dim=None,
    attention_bias=True,
)
FP32_TOL = 1e-5

# The packed layout (positions in the sequence of L tokens).
T, H, W, C = 3, 4, 5, 5
HW = 2 * 3  # patches per frame (W padded to 6)
N_TXT, UND = 6, 5
TEXT_IDX = np.r_[0:5, 23]
VIS_IDX = np.r_[5:23]
SND_IDX = np.r_[24:28]
ACT_IDX = np.r_[28:30]
L = 31  # position 30 holds no token (zeros), as unfilled packed positions in the reference
NOISY = (1, 2)


def _make(tmp_path_factory, cfg, seed):
    torch.manual_seed(seed)
    ref = Ref(**cfg).eval()
    randomize_torch_module(ref, seed=seed)
    path = tmp_path_factory.mktemp(f"cosmos3_{seed}")
    ref.save_pretrained(path, safe_serialization=True)
    return ref, path


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            made[name] = _make(tmp_path_factory, NANO if name == "nano" else EDGE, seed=len(made) + 1)
        return made[name]

    return get


def _inputs(seed, sound=True, action=True):
    g = np.random.default_rng(seed)
    pos = np.stack([np.sort(g.integers(0, 16000, L)), g.integers(0, 40, L), g.integers(0, 40, L)])
    a = dict(
        input_ids=g.integers(0, 50, (1, N_TXT)),
        text_indexes=TEXT_IDX,
        position_ids=pos,
        vision=g.standard_normal((1, T, H, W, C)).astype(np.float32),
        vision_sequence_indexes=VIS_IDX,
        vision_mse_loss_indexes=VIS_IDX[HW:],
        vision_timesteps=g.uniform(0, 1000, (1, len(NOISY) * HW)),
    )
    if sound:
        a.update(
            sound=g.standard_normal((1, 6, 4)).astype(np.float32),
            sound_sequence_indexes=SND_IDX,
            sound_mse_loss_indexes=SND_IDX,
            sound_timesteps=g.uniform(0, 1000, (1, 4)),
        )
    if action:
        a.update(
            action=g.standard_normal((1, 2, 7)).astype(np.float32),
            action_sequence_indexes=ACT_IDX,
            action_mse_loss_indexes=ACT_IDX,
            action_timesteps=g.uniform(0, 1000, (1, 2)),
            action_domain_ids=np.array([2]),
        )
    return {
        k: np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f" else np.asarray(v, np.int32)
        for k, v in a.items()
    }


def _static(a):
    return dict(
        und_len=UND,
        vision_noisy_frames=NOISY,
        **({"sound_noisy_frames": (0, 1, 2, 3)} if "sound" in a else {}),
        **({"action_noisy_frames": (0, 1)} if "action" in a else {}),
    )


def _ref(ref, a):
    t = lambda k: torch.from_numpy(np.asarray(a[k]))  # noqa: E731
    kw = dict(
        input_ids=t("input_ids")[0].long(),
        text_indexes=t("text_indexes").long(),
        position_ids=t("position_ids").long(),
        und_len=UND,
        sequence_length=L,
        vision_tokens=[t("vision").permute(0, 4, 1, 2, 3)],
        vision_token_shapes=[(T, 2, 3)],
        vision_sequence_indexes=t("vision_sequence_indexes").long(),
        vision_mse_loss_indexes=t("vision_mse_loss_indexes").long(),
        vision_timesteps=t("vision_timesteps")[0],
        vision_noisy_frame_indexes=[torch.tensor(NOISY)],
    )
    if "sound" in a:
        kw.update(
            sound_tokens=[t("sound")[0]],
            sound_token_shapes=[(4, 1, 1)],
            sound_sequence_indexes=t("sound_sequence_indexes").long(),
            sound_mse_loss_indexes=t("sound_mse_loss_indexes").long(),
            sound_timesteps=t("sound_timesteps")[0],
            sound_noisy_frame_indexes=[torch.arange(4)],
        )
    if "action" in a:
        kw.update(
            action_tokens=[t("action")[0]],
            action_token_shapes=[(2, 1, 1)],
            action_sequence_indexes=t("action_sequence_indexes").long(),
            action_mse_loss_indexes=t("action_mse_loss_indexes").long(),
            action_timesteps=t("action_timesteps")[0],
            action_noisy_frame_indexes=[torch.arange(2)],
            action_domain_ids=[t("action_domain_ids")[0].long()],
        )
    with torch.no_grad():
        out = ref(**kw)
    vision = out.sample[0].numpy().transpose(0, 2, 3, 4, 1)
    sound = None if out.sound is None else out.sound[0].numpy()[None]
    action = None if out.action is None else out.action[0].numpy()[None]
    return vision, sound, action


def _ours(model, a):
    static = _static(a)

    @nnx.jit(static_argnames=tuple(static))
    def run(m, arrays, **kw):
        return m(**arrays, **kw)

    out = run(model, {k: jnp.asarray(v) for k, v in a.items()}, **static)
    return tuple(None if o is None else np.asarray(o) for o in out)


@pytest.mark.parametrize("name", ["nano", "edge"])
def test_fp32_parity(refs, name):
    ref, path = refs(name)
    model = load_component(NAME, path)
    a = _inputs(3, sound=name == "nano")
    want = _ref(ref, a)
    got = _ours(model, a)
    for label, g, w in zip(("vision", "sound", "action"), got, want):
        if w is None:
            assert g is None
            continue
        err = max_rel_err(g, w)
        print(f"{name} {label}: max_rel_err={err:.2e}")
        assert g.shape == w.shape and err < FP32_TOL
    assert np.all(got[0][:, 0] == 0) and float(np.abs(got[0][:, 1:]).max()) > 1e-3  # the condition frame


def test_bf16_against_fp32_reference(refs):
    """bfloat16 weights and activations (``time_embedder`` kept float32, as diffusers'
    ``_keep_in_fp32_modules``) stay near the float32 reference: 2 layers of bf16 rounding (8 bits
    of mantissa, ~4e-3 per operation) give ~1e-2 (measured 6e-3 to 9e-3); a wrong bf16 path (a lost fp32 table, an
    overflow) gives O(1)."""
    ref, path = refs("nano")
    model = load_component(NAME, path, dtype=jnp.bfloat16)
    assert model.time_embedder.linear_1.kernel[...].dtype == jnp.float32
    a = _inputs(3)
    want = _ref(ref, a)
    got = _ours(model, a)
    for g, w in zip(got, want):
        err = max_rel_err(np.asarray(g, np.float32), w)
        print(f"bf16 vs fp32 reference: max_rel_err={err:.2e}")
        assert err < 2e-2


def test_reference_depends_on_every_input(refs):
    """Each input changes the reference's vision prediction (so parity on it is not vacuous):
    the text ids, the latents (condition frame included), the sound, the action, the timesteps,
    the mRoPE positions of each axis, and the understanding tokens' causal mask (a text token
    moved after another changes what layer 2's keys hold)."""
    ref, _ = refs("nano")
    a = _inputs(3)
    base = _ref(ref, a)[0]
    g = np.random.default_rng(9)
    for key in ("input_ids", "vision", "sound", "action", "vision_timesteps", "position_ids"):
        b = dict(a)
        if key == "input_ids":
            b[key] = np.roll(a[key], 1, axis=1)
        elif key == "vision_timesteps":  # (0-1000) x timestep_scale: a small shift is too small a change
            b[key] = a[key] * 0.5
        elif key == "position_ids":
            for axis in range(3):
                p = a[key].copy()
                p[axis] = np.roll(p[axis], 3)
                assert_input_sensitive(_ref(ref, dict(a, position_ids=p))[0], base, 1e-3)
            continue
        else:
            b[key] = (a[key] + g.standard_normal(a[key].shape)).astype(a[key].dtype)
        assert_input_sensitive(_ref(ref, b)[0], base, 1e-3)
    cond = a["vision"].copy()
    cond[:, 0] += 1.0
    assert_input_sensitive(_ref(ref, dict(a, vision=cond))[0], base, 1e-3)


def test_stages_and_streamed_blocks_equal_the_call(refs):
    """Block streaming (one-layer chunks from host memory, both pathways' weights of a layer in one
    chunk; ``embed`` / ``run_blocks`` / ``head`` as separate executables) equals the resident call."""
    _, path = refs("edge")
    a = _inputs(4, sound=False)
    static = _static(a)
    resident = _ours(load_component(NAME, path), a)
    streamed = load_component(NAME, path, offload=1)
    stacks = offloaded_stacks(streamed)
    assert [s.attr for s in stacks] == ["layers"] and stacks[0].sizes == [1, 1]
    graphdef, params = nnx.split(streamed)
    keys = list(a)
    signature = inspect.signature(Cosmos3Forward)  # embed takes its arguments

    def positional(latents, state, *args):
        bound = signature.bind(**dict(zip(keys, args)), **static)
        bound.apply_defaults()
        return bound.args

    step = ChunkedStep(graphdef, stacks, positional, lambda out, latents, state, *args: (out, None))
    args = tuple(jnp.asarray(a[k]) for k in keys)
    out, _ = step.compile_for(params, None, None, *args)(params, None, None, *args)
    for o, r in zip(out, resident):
        if r is None:
            assert o is None
            continue
        err = max_rel_err(np.asarray(o), r)
        print(f"streamed vs resident max_rel_err={err:.2e}")
        assert err < 1e-6 and float(np.abs(r).max()) > 1e-3


@pytest.mark.parametrize("name", ["nano", "edge"])
def test_mesh_equals_single_device(refs, name):
    """data x tensor x sequence = 2 x 2 x 2 of the 8 virtual CPU devices (tests/conftest.py): the
    two-pathway attention through the shared attention's Ulysses mode, 4 query heads over
    tensor x sequence, the 2 GQA key/value heads repeated to 4 (they do not split over 4), the
    5 understanding tokens padded to 6 (masked for the generation pathway); Edge adds the
    separately normed understanding keys. A batch of 2 with different prompt lengths
    (``text_lengths``), so the per-row key mask is split over ``data``. fp32 both sides; the mesh
    run sums the row-parallel projections in another order: 1e-5 relative (measured ~1e-7); a
    wrong head group, mask or padding is off by > 1e-2."""
    _, path = refs(name)
    a = _inputs(5, sound=name == "nano")
    a = {
        k: np.concatenate([v, v[::-1]])
        if v.ndim
        and k
        in (
            "input_ids",
            "vision",
            "vision_timesteps",
            "sound",
            "sound_timesteps",
            "action",
            "action_timesteps",
            "action_domain_ids",
        )
        else v
        for k, v in a.items()
    }
    a["vision"][1] += 0.5  # the two rows differ
    a["text_lengths"] = np.array([5, 3], np.int32)
    single = _ours(load_component(NAME, path), a)
    sharded = load_component(NAME, path, mesh=make_mesh(2, 2, 2))
    assert sharded.layers.self_attn.to_q.kernel[...].sharding.spec[-1] == "tensor"
    got = _ours(sharded, a)
    for g, w in zip(got, single):
        if w is None:
            assert g is None
            continue
        err = max_rel_err(g, w)
        print(f"{name} mesh (2, 2, 2) vs single device: max_rel_err={err:.2e}")
        assert err < 1e-5 and float(np.abs(w).max()) > 1e-3
    assert max_rel_err(single[0][1], single[0][0]) > 1e-2  # the rows differ, so a mixed-up batch shows


CONFIGS = sorted(glob.glob(os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos3-*", "transformer", "config.json")))


def test_complete_configs_found():
    """Nano (vendored verbatim) and Edge (reconstructed); Super's transformer is only
    architecture essentials (``SOURCES.md``), so it has no config.json."""
    assert [p.split(os.sep)[-3] for p in CONFIGS] == ["nvidia__Cosmos3-Edge", "nvidia__Cosmos3-Nano"]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.split(os.sep)[-3] for p in CONFIGS])
def test_full_size_param_count_matches_reference(path):
    from accelerate import init_empty_weights

    with open(path) as f:
        raw = json.load(f)
    cfg = Cosmos3TransformerConfig.from_json_file(path)
    model = nnx.eval_shape(lambda: Cosmos3OmniTransformer(cfg, rngs=nnx.Rngs(0)))
    ours = sum(math.prod(v.get_value().shape) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))
    with init_empty_weights():
        ref = Ref.from_config(raw)
    theirs = sum(p.numel() for p in ref.parameters())
    print(f"{path.split(os.sep)[-3]}: {ours / 1e9:.3f} B parameters")
    assert ours == theirs


@pytest.mark.parametrize(
    "change, match",
    [
        ({"joint_attn_implementation": "full"}, r"joint_attn_implementation='full' is not implemented"),
        ({"video_temporal_causal": True}, r"video_temporal_causal=True is not implemented"),
        (
            {"backbone_type": "cosmos3_edge_nemotron_moe"},
            r"backbone_type='cosmos3_edge_nemotron_moe' is not implemented",
        ),
        ({"hidden_act": "gelu"}, r"hidden_act='gelu' is not valid"),
        (
            {"rope_scaling": {"mrope_section": [24, 20, 20], "mrope_interleaved": False}},
            r"rope_scaling=.* is not valid",
        ),
        ({"rope_axes_dim": [24, -1, 20]}, r"rope_axes_dim=\(24, -1, 20\) is not valid"),
        ({"num_key_value_heads": 5}, r"num_key_value_heads=5 is not valid"),
        ({"_class_name": None, "fancy": 1}, r"unknown setting fancy=1"),  # naming no diffusers class: strict
    ],
)
def test_config_refuses_what_is_not_implemented(change, match):
    """The released Nano config with one setting changed is refused in one line naming it."""
    from vidax.errors import ConfigError

    with open(os.path.join(REFERENCE_CONFIGS, "nvidia__Cosmos3-Nano", "transformer", "config.json")) as f:
        raw = json.load(f)
    with pytest.raises(ConfigError, match=match) as e:
        Cosmos3TransformerConfig.from_config_dict({**raw, **change}, source="t.json")
    assert "\n" not in str(e.value)
