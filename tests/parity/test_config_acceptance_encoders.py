"""Config acceptance for the text and image encoders vidax implements
(:mod:`tests.parity.test_config_acceptance`'s pattern): configs that transformers builds and
runs load in vidax and compute what the reference computes on one float32 pass: T5 / UMT5 (byT5
is a T5), CLIP text, Llama, Qwen2.5-VL's language model (HunyuanVideo 1.5's bare text model and
Cosmos-Predict2.5's full model), Gemma 3 (LTX-2), Gemma 4 (LTX-2.5), SigLIP's vision tower
(HunyuanVideo 1.5 I2V), and LTX-2's text connectors.

Every draw has head counts and widths that are not powers of two, a head dim other than
``hidden / heads`` where the config has one, the optional switches on or off and optional keys
left out. The decoder LMs are compared on every hidden state (the pipelines read inner layers).

Tolerance: float32 on both sides, two to three layers: the 1e-5 of the per-encoder parity tests
(``tests/parity/test_t5_encoder.py``, measured ~1e-6 there); a wrong operation shows at > 1e-2.
The reference's output for other token ids must differ by > 5 %.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.parity.helpers import assert_close, assert_input_sensitive, standard_normal
from tests.parity.test_config_acceptance import FP32_TOL, _draw, _drop, _ids, _jit, _save
from vidax.weights.component import load_component

transformers = pytest.importorskip("transformers")

SEED = 20280
N_CONFIGS = 2  # per encoder: one fast compile each (~1-2 s on 2 cores)
B, L = 2, 9
LENGTHS = (9, 5)


def _ids_and_mask(vocab: int, seed: int, left: bool = False, low: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(B, L)`` random token ids in ``[low, vocab)`` and the mask of :data:`LENGTHS` real tokens
    (right padding, or ``left``)."""
    ids = np.random.default_rng(seed).integers(low, vocab, (B, L)).astype(np.int64)
    mask = np.zeros((B, L), np.int64)
    for b, n in enumerate(LENGTHS):
        if left:
            mask[b, L - n :] = 1
        else:
            mask[b, :n] = 1
    return ids, mask


def _compare(reference, ours, inputs: tuple, other: tuple, sensitive: int | None = None) -> None:
    """``ours(inputs)`` equals ``reference(inputs)`` (each output to :data:`FP32_TOL`), and the
    reference's outputs for ``other`` (the first ``sensitive`` of them; None: all) differ from
    them by > 5 %."""
    want, got, changed = reference(inputs), ours(inputs), reference(other)
    for k, (w, g, c) in enumerate(zip(want, got, changed, strict=True)):
        assert_close(g, w, FP32_TOL)
        if sensitive is None or k < sensitive:
            assert_input_sensitive(w, c)


def _hidden_states(ref, inputs) -> tuple:
    with torch.no_grad():
        out = ref(
            input_ids=torch.from_numpy(inputs[0]), attention_mask=torch.from_numpy(inputs[1]), output_hidden_states=True
        )
    return tuple(h.numpy() for h in out.hidden_states)


def _ours_hidden_states(model):
    """vidax's :meth:`~vidax.encoders.decoder_lm.DecoderLM.all_hidden_states` as a tuple."""
    run = _jit(model, lambda m, x: m.all_hidden_states(x[0].astype(np.int32), x[1].astype(np.int32)))
    return lambda x: tuple(run(x))


# -------------------------------------------------------------------------------------- T5 / UMT5


def t5_configs(n: int) -> list[dict]:
    """T5 / UMT5 encoder configs: 1-3 heads of any ``d_kv`` (not ``d_model / heads``), any widths,
    1-2 layers, any relative-position buckets and distance, every ``feed_forward_proj`` the
    encoders use (ReLU, gated GELU as byT5 / UMT5, gated SiLU), either model class."""

    def one(rng, i):
        return dict(
            _cls=["T5EncoderModel", "UMT5EncoderModel"][i % 2],
            vocab_size=int(rng.integers(30, 80)),
            d_model=int(rng.integers(5, 30)),
            d_kv=int(rng.integers(3, 13)),
            num_heads=int(rng.integers(1, 4)),
            d_ff=int(rng.integers(5, 40)),
            num_layers=int(rng.integers(1, 3)),
            relative_attention_num_buckets=int(rng.integers(4, 12)),
            relative_attention_max_distance=int(rng.integers(6, 30)),
            feed_forward_proj=["gated-gelu", "gated-silu", "relu"][i % 3],
            layer_norm_epsilon=float(rng.choice([1e-6, 1e-3])),
        )

    return _draw(SEED, n, one)


@pytest.mark.parametrize("config", t5_configs(3), ids=_ids)
def test_t5_configs(tmp_path_factory, config):
    config = dict(config)
    cls = config.pop("_cls")
    conf = {"T5EncoderModel": transformers.T5Config, "UMT5EncoderModel": transformers.UMT5Config}[cls]
    ref = getattr(transformers, cls)(conf(**config))
    model = load_component(cls, _save(tmp_path_factory, ref, 60, "t5_config"))

    def reference(x):
        with torch.no_grad():
            return (
                ref(input_ids=torch.from_numpy(x[0]), attention_mask=torch.from_numpy(x[1])).last_hidden_state.numpy(),
            )

    ours = _jit(model, lambda m, x: (m(x[0].astype(np.int32), x[1].astype(np.int32)),))
    _compare(reference, ours, _ids_and_mask(config["vocab_size"], 61), _ids_and_mask(config["vocab_size"], 62))


# ------------------------------------------------------------------------------------- CLIP text


def clip_configs(n: int) -> list[dict]:
    """CLIP text configs: 1-3 heads of any dim, any widths, 1-2 layers, positions to 9-20, either
    activation, the legacy pooled row (``eos_token_id`` 2: the largest id) or the eos token's."""

    def one(rng, i):
        heads = int(rng.integers(1, 4))
        return _drop(
            rng,
            dict(
                vocab_size=int(rng.integers(30, 80)),
                hidden_size=heads * int(rng.integers(3, 11)),
                intermediate_size=int(rng.integers(5, 40)),
                num_hidden_layers=int(rng.integers(1, 3)),
                num_attention_heads=heads,
                max_position_embeddings=int(rng.integers(L, 20)),
                hidden_act=["quick_gelu", "gelu"][int(rng.integers(2))],
                eos_token_id=[2, 7][i % 2],
                layer_norm_eps=float(rng.choice([1e-5, 1e-3])),
                projection_dim=int(rng.integers(3, 20)),
            ),
            ("layer_norm_eps", "projection_dim"),
        )

    return _draw(SEED + 1, n, one)


@pytest.mark.parametrize("config", clip_configs(N_CONFIGS), ids=_ids)
def test_clip_text_configs(tmp_path_factory, config):
    ref = transformers.CLIPTextModel(transformers.CLIPTextConfig(**config))
    model = load_component("CLIPTextModel", _save(tmp_path_factory, ref, 63, "clip_config"))
    eos = config["vocab_size"] - 1 if config["eos_token_id"] == 2 else config["eos_token_id"]

    def inputs(seed):
        ids, mask = _ids_and_mask(config["vocab_size"] - 1, seed, low=8)  # words: neither eos id
        for b, n in enumerate(LENGTHS):
            ids[b, n - 1] = eos
        return ids, mask

    def reference(x):
        with torch.no_grad():
            out = ref(torch.from_numpy(x[0]), attention_mask=torch.from_numpy(x[1]))
        return out.last_hidden_state.numpy(), out.pooler_output.numpy()

    _compare(
        reference,
        _jit(model, lambda m, x: m.encode(x[0].astype(np.int32), x[1].astype(np.int32))),
        inputs(64),
        inputs(65),
    )


# ----------------------------------------------------------------------------------------- Llama


def llama_configs(n: int) -> list[dict]:
    """Llama configs (HunyuanVideo's text encoder): 1-2 key/value heads shared by 1-3 query heads
    each, an even head dim other than ``hidden / heads`` (or left out: ``hidden / heads``; the
    width a multiple of the heads, which transformers checks), any other widths, 1-2 layers, the
    attention and MLP biases or not, any RoPE base and norm eps, MLP activations other than SiLU."""

    def one(rng, i):
        kv = int(rng.integers(1, 3))
        heads = kv * int(rng.integers(1, 4))
        head_dim = 2 * int(rng.integers(2, 7))
        config = dict(
            vocab_size=int(rng.integers(30, 80)),
            hidden_size=heads * (head_dim if i % 2 else int(rng.integers(2, 11))),
            intermediate_size=int(rng.integers(5, 40)),
            num_hidden_layers=int(rng.integers(1, 3)),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=head_dim,
            attention_bias=bool(rng.integers(2)),
            mlp_bias=bool(rng.integers(2)),
            rope_theta=float(rng.choice([1e3, 1e4])),
            rms_norm_eps=float(rng.choice([1e-6, 1e-5])),
            hidden_act=["relu", "gelu_new"][i % 2],
        )
        return _drop(rng, config, ("head_dim", "mlp_bias") if i % 2 else ())

    return _draw(SEED + 2, n, one)


@pytest.mark.parametrize("config", llama_configs(N_CONFIGS), ids=_ids)
def test_llama_configs(tmp_path_factory, config):
    ref = transformers.LlamaModel(transformers.LlamaConfig(**config))
    model = load_component("LlamaModel", _save(tmp_path_factory, ref, 66, "llama_config"))
    _compare(
        lambda x: _hidden_states(ref, x),
        _ours_hidden_states(model),
        _ids_and_mask(config["vocab_size"], 67),
        _ids_and_mask(config["vocab_size"], 68),
    )


# ----------------------------------------------------------------------------------- Qwen2.5-VL


def qwen_configs(n: int) -> list[dict]:
    """Qwen2.5-VL language model configs: GQA as :func:`llama_configs` with the width ``heads x
    head dim``, an even head dim split into any three mRoPE sections, any widths, RoPE base and
    eps; HunyuanVideo 1.5's bare ``Qwen2_5_VLTextModel`` or Cosmos-Predict2.5's whole model (a
    tiny vision tower it does not run)."""

    def one(rng, i):
        kv = int(rng.integers(1, 3))
        heads = kv * int(rng.integers(1, 4))
        half = int(rng.integers(3, 8))
        t, h = int(rng.integers(0, half)), int(rng.integers(0, half))
        section = [t, min(h, half - t), half - t - min(h, half - t)]
        return dict(
            _full=i % 2 == 1,
            vocab_size=int(rng.integers(30, 80)),
            hidden_size=heads * 2 * half,
            intermediate_size=int(rng.integers(5, 40)),
            num_hidden_layers=int(rng.integers(1, 3)),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            rms_norm_eps=float(rng.choice([1e-6, 1e-5])),
            rope_parameters={
                "rope_type": "default",
                "rope_theta": float(rng.choice([1e3, 1e6])),
                "mrope_section": section,
            },
        )

    return _draw(SEED + 3, n, one)


@pytest.mark.parametrize("config", qwen_configs(N_CONFIGS), ids=_ids)
def test_qwen25vl_configs(tmp_path_factory, config):
    config = dict(config)
    full = config.pop("_full")
    vocab = config["vocab_size"]
    if full:
        ref = transformers.Qwen2_5_VLForConditionalGeneration(
            transformers.Qwen2_5_VLConfig(
                text_config=config,
                vision_config=dict(
                    depth=1,
                    hidden_size=16,
                    intermediate_size=20,
                    num_heads=2,
                    out_hidden_size=config["hidden_size"],
                    fullatt_block_indexes=[0],
                ),
                image_token_id=vocab - 1,
                video_token_id=vocab - 2,
                vision_start_token_id=vocab - 3,
                vision_end_token_id=vocab - 4,
            )
        )
        cls, vocab = "Qwen2_5_VLForConditionalGeneration", vocab - 4  # text only: below the vision tokens
    else:
        ref = transformers.Qwen2_5_VLTextModel(transformers.Qwen2_5_VLTextConfig(**config))
        cls = "Qwen2_5_VLTextModel"
    model = load_component(cls, _save(tmp_path_factory, ref, 69, "qwen_config"))
    _compare(
        lambda x: _hidden_states(ref, x), _ours_hidden_states(model), _ids_and_mask(vocab, 70), _ids_and_mask(vocab, 71)
    )


# --------------------------------------------------------------------------------------- Gemma 3


def gemma3_configs(n: int) -> list[dict]:
    """Gemma 3 text configs (LTX-2's encoder, inside ``Gemma3ForConditionalGeneration``): GQA with
    an even head dim other than ``hidden / heads`` (a width that is a multiple of the heads, which
    transformers checks), any other widths, 1-3 layers of sliding or full
    attention in any order with a window of 2-6, any ``query_pre_attn_scalar``, the full layers'
    RoPE linearly scaled or not, any bases and eps, either GELU; left padding as LTX-2's tokenizer
    call."""

    def one(rng, i):
        kv, q = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        layers = int(rng.integers(1, 4))
        full = (
            {"rope_type": "linear", "factor": float(rng.choice([2.0, 8.0])), "rope_theta": 1e4}
            if i % 2
            else {"rope_type": "default", "rope_theta": float(rng.choice([1e3, 1e4]))}
        )
        return dict(
            vocab_size=int(rng.integers(30, 80)),
            hidden_size=kv * q * int(rng.integers(2, 11)),
            intermediate_size=int(rng.integers(5, 40)),
            num_hidden_layers=layers,
            num_attention_heads=kv * q,
            num_key_value_heads=kv,
            head_dim=2 * int(rng.integers(2, 7)),
            sliding_window=int(rng.integers(2, 7)),
            layer_types=[["sliding_attention", "full_attention"][int(b)] for b in rng.integers(0, 2, layers)],
            query_pre_attn_scalar=int(rng.integers(4, 40)),
            rms_norm_eps=float(rng.choice([1e-6, 1e-5])),
            hidden_activation=["gelu", "gelu_pytorch_tanh"][i % 2],
            rope_parameters={
                "full_attention": full,
                "sliding_attention": {"rope_type": "default", "rope_theta": float(rng.choice([10.0, 1e4]))},
            },
        )

    return _draw(SEED + 4, n, one)


@pytest.mark.parametrize("config", gemma3_configs(N_CONFIGS), ids=_ids)
def test_gemma3_configs(tmp_path_factory, config):
    ref = transformers.Gemma3ForConditionalGeneration(
        transformers.Gemma3Config(
            text_config=config,
            vision_config=dict(
                hidden_size=16,
                intermediate_size=20,
                num_hidden_layers=1,
                num_attention_heads=2,
                image_size=28,
                patch_size=14,
            ),
            mm_tokens_per_image=4,
        )
    )
    model = load_component("Gemma3ForConditionalGeneration", _save(tmp_path_factory, ref, 72, "gemma3_config"))

    def inputs(seed):
        ids, mask = _ids_and_mask(config["vocab_size"], seed, left=True, low=1)
        ids[mask == 0] = 0  # Gemma's <pad>
        return ids, mask

    _compare(lambda x: _hidden_states(ref, x), _ours_hidden_states(model), inputs(73), inputs(74))


# ------------------------------------------------------------------------------- SigLIP vision


def siglip_configs(n: int) -> list[dict]:
    """SigLIP vision configs: 1-3 heads of any dim, any widths, 1-2 layers, patches of 2-5 pixels
    on a 2-4 patch square, 1-3 image channels, the attention-pooling head or not, either
    activation, any eps."""

    def one(rng, i):
        heads, patch = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        return _drop(
            rng,
            dict(
                hidden_size=heads * int(rng.integers(3, 11)),
                intermediate_size=int(rng.integers(5, 40)),
                num_hidden_layers=int(rng.integers(1, 3)),
                num_attention_heads=heads,
                patch_size=patch,
                image_size=patch * int(rng.integers(2, 5)),
                num_channels=int(rng.integers(1, 4)),
                vision_use_head=i % 2 == 0,
                hidden_act=["gelu_pytorch_tanh", "gelu"][int(rng.integers(2))],
                layer_norm_eps=float(rng.choice([1e-6, 1e-3])),
            ),
            ("hidden_act", "layer_norm_eps"),
        )

    return _draw(SEED + 5, n, one)


@pytest.mark.parametrize("config", siglip_configs(N_CONFIGS), ids=_ids)
def test_siglip_configs(tmp_path_factory, config):
    ref = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**config))
    model = load_component("SiglipVisionModel", _save(tmp_path_factory, ref, 75, "siglip_config"))
    shape = (1, config["image_size"], config["image_size"], config["num_channels"])

    def reference(x):
        with torch.no_grad():
            out = ref(torch.from_numpy(x[0].transpose(0, 3, 1, 2)))
        return (out.last_hidden_state.numpy(),) + ((out.pooler_output.numpy(),) if config["vision_use_head"] else ())

    ours = _jit(model, lambda m, x: tuple(o for o in m.encode(x[0]) if o is not None))
    _compare(reference, ours, (standard_normal(shape, 76),), (standard_normal(shape, 77),))


# ------------------------------------------------------------------------ LTX-2 text connectors


def connectors_configs(n: int) -> list[dict]:
    """LTX-2 text connector configs: LTX-2.0's shared projection (both streams as wide as the
    caption channels) or 2.3's per-modality projections to their own widths, with or without
    bias and attention gates; 1-3 heads of any dim (even for the split RoPE) per stream, 1-2
    layers, learnable registers (a divisor of the token count) or none, either RoPE layout and
    precision, any base, base length and the causal temporal positions or not."""

    def one(rng, i):
        per_modality = i % 2 == 1
        rope = ["split", "interleaved"][int(rng.integers(2))]
        hv, ha = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        kv, ka = (2 * int(k) for k in rng.integers(1, 5, 2))
        caption = hv * kv
        if not per_modality:  # one projection for both: each stream as wide as the captions
            ha, ka = (hv, kv) if rng.integers(2) else (1, caption)
        registers = lambda: [None, 2, 4, 8][int(rng.integers(4))]  # noqa: E731
        config = dict(
            caption_channels=caption + (int(rng.integers(1, 5)) if per_modality else 0),
            text_proj_in_factor=int(rng.integers(1, 4)),
            video_connector_num_attention_heads=hv,
            video_connector_attention_head_dim=kv,
            video_connector_num_layers=int(rng.integers(1, 3)),
            video_connector_num_learnable_registers=registers(),
            audio_connector_num_attention_heads=ha,
            audio_connector_attention_head_dim=ka,
            audio_connector_num_layers=int(rng.integers(1, 3)),
            audio_connector_num_learnable_registers=registers(),
            connector_rope_base_seq_len=int(rng.integers(4, 64)),
            rope_theta=float(rng.choice([1e3, 1e4])),
            rope_double_precision=bool(rng.integers(2)),
            causal_temporal_positioning=bool(rng.integers(2)),
            rope_type=rope,
        )
        if per_modality:
            config.update(
                per_modality_projections=True,
                video_hidden_dim=hv * kv,
                audio_hidden_dim=ha * ka,
                proj_bias=bool(rng.integers(2)),
                video_gated_attn=bool(rng.integers(2)),
                audio_gated_attn=bool(rng.integers(2)),
            )
        return _drop(rng, config, ("rope_double_precision", "causal_temporal_positioning"))

    return _draw(SEED + 6, n, one)


@pytest.mark.parametrize("config", connectors_configs(N_CONFIGS), ids=_ids)
def test_ltx2_connectors_configs(tmp_path_factory, config):
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    ref = LTX2TextConnectors(**config)
    model = load_component("LTX2TextConnectors", _save(tmp_path_factory, ref, 78, "connectors_config"))
    side = "left"

    def inputs(seed, real):
        h = 3 * standard_normal((B, 8, config["caption_channels"], config["text_proj_in_factor"]), seed)
        return h, (np.arange(8) >= 8 - np.array(real)[:, None]).astype(np.int64)  # 8 tokens: the registers divide them

    def reference(x):
        with torch.no_grad():
            out = ref(torch.from_numpy(x[0]), torch.from_numpy(x[1]), padding_side=side)
        return tuple(o.numpy().astype(np.float32) for o in out)

    # the output mask is all ones with registers: only the two streams must change with the input
    _compare(
        reference,
        _jit(model, lambda m, x: tuple(m(x[0], x[1], padding_side=side))),
        inputs(79, (5, 8)),
        inputs(80, (8, 3)),
        sensitive=2,
    )


# --------------------------------------------------------------------------------------- Gemma 4


def gemma4_configs(n: int) -> list[dict]:
    """Gemma 4 text configs (LTX-2.5's encoder, inside ``Gemma4UnifiedForConditionalGeneration``):
    2-5 layers of sliding / full attention in any order (the last full), GQA with its own head dim
    and key/value heads on the full layers, keys as values there or not, the last 0-2 layers
    reusing earlier keys / values (double-wide MLPs there or not), any window, RoPE bases and the
    full layers' proportional RoPE fraction and factor, SiLU or GELU-tanh; left padding as LTX-2's
    tokenizer call."""

    def one(rng, i):
        layers = int(rng.integers(2, 6))
        types = [["sliding_attention", "full_attention"][int(b)] for b in rng.integers(0, 2, layers - 1)]
        types.append("full_attention")
        kv = int(rng.integers(1, 3))
        shared = int(rng.integers(0, min(2, layers - 2) + 1)) if "sliding_attention" in types[:-2] else 0
        return dict(
            vocab_size=int(rng.integers(40, 80)),
            hidden_size=kv * 2 * int(rng.integers(2, 8)),
            intermediate_size=int(rng.integers(5, 40)),
            num_hidden_layers=layers,
            num_attention_heads=kv * int(rng.integers(1, 3)),
            num_key_value_heads=kv,
            head_dim=2 * int(rng.integers(2, 7)),
            global_head_dim=2 * int(rng.integers(2, 9)),
            num_global_key_value_heads=1,
            attention_k_eq_v=bool(rng.integers(2)),
            num_kv_shared_layers=shared,
            use_double_wide_mlp=bool(rng.integers(2)),
            sliding_window=int(rng.integers(2, 7)),
            layer_types=types,
            hidden_activation=["silu", "gelu_pytorch_tanh"][i % 2],
            rms_norm_eps=float(rng.choice([1e-6, 1e-5])),
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": float(rng.choice([100.0, 1e4]))},
                "full_attention": {
                    "rope_type": "proportional",
                    "rope_theta": 1e4,
                    "partial_rotary_factor": float(rng.choice([0.25, 0.5, 1.0])),
                    "factor": float(rng.choice([1.0, 2.0])),
                },
            },
        )

    return _draw(SEED + 7, n, one)


@pytest.mark.parametrize("config", gemma4_configs(N_CONFIGS), ids=_ids)
def test_gemma4_configs(tmp_path_factory, config):
    cfg = transformers.Gemma4UnifiedConfig(
        text_config=config,
        vision_config=dict(
            patch_size=4,
            pooling_kernel_size=1,
            mm_embed_dim=16,
            mm_posemb_size=8,
            output_proj_dims=config["hidden_size"],
        ),
        audio_config=dict(audio_embed_dim=8),
        image_token_id=30,
        video_token_id=31,
        audio_token_id=32,
        boi_token_id=33,
        eoi_token_id=34,
        boa_token_id=35,
        eoa_token_index=36,
    )
    ref = transformers.Gemma4UnifiedForConditionalGeneration(cfg)
    with torch.no_grad():  # a buffer, which the randomisation leaves at 1
        for i, layer in enumerate(ref.model.language_model.layers):
            layer.layer_scalar.fill_(0.6 + 0.1 * i)
    model = load_component("Gemma4UnifiedForConditionalGeneration", _save(tmp_path_factory, ref, 81, "gemma4_config"))

    def inputs(seed):
        ids, mask = _ids_and_mask(config["vocab_size"], seed, left=True, low=37)  # above the special ids
        ids[mask == 0] = 0  # Gemma's <pad>
        return ids, mask

    _compare(lambda x: _hidden_states(ref, x), _ours_hidden_states(model), inputs(82), inputs(83))
