"""HunyuanVideo 1.5's prompt path against diffusers 0.42.1's own functions
(``HunyuanVideo15Pipeline._get_mllm_prompt_embeds`` / ``._get_byt5_prompt_embeds`` /
``extract_glyph_texts``), called on tiny torch models with every parameter randomised.

Text: a tiny ``Qwen2_5_VLTextModel`` (D 40, 5 heads / 1 KV head, 3 layers, M-RoPE section) and a
byte-level BPE tokenizer trained here with the Qwen2.5-VL chat template (no hub download). The
crop is the tiny tokenizer's own template prefix length (108 is the released tokenizer's); the
padded length is small (24 + crop) so one prompt is truncated and the others padded.

Glyph: a tiny byT5 ``T5EncoderModel`` (D 24, 3 heads of 8, gated-gelu FFN 40, 2 layers) with the
vocabulary resized after adding colour / font tokens as special tokens (as the Glyph-SDXL-v2
tokenizer of the checkpoint), and transformers' ``ByT5Tokenizer`` saved with those tokens.

Tolerance: fp32 on both sides, the same operations; only summation orders and the exp / cos
kernels differ (measured max_rel_err 7.7e-7 text, 4.4e-7 glyph); 1e-5 is far below any structural
error (a wrong layer, crop or mask gives ~1e-1).
"""

from __future__ import annotations

import inspect
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hv15 = pytest.importorskip("diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5")

from tests.parity.cosmos_reference import TEXT, build_qwen_tokenizer  # noqa: E402
from tests.parity.helpers import max_rel_err, randomize_torch_module, source_key_shapes  # noqa: E402
from tests.paths import REFERENCE_CONFIGS  # noqa: E402
from vidax.encoders.t5 import T5Encoder, T5EncoderConfig, t5_key_rules  # noqa: E402
from vidax.encoders.tokenizer import ByteTokenizer, TextTokenizer  # noqa: E402
from vidax.errors import CheckpointError, InputError  # noqa: E402
from vidax.models.hunyuan_video15 import text as hv15_text  # noqa: E402
from vidax.registry import registry  # noqa: E402
from vidax.weights.component import load_component  # noqa: E402
from vidax.weights.loader import abstract_params  # noqa: E402

Pipe = hv15.HunyuanVideo15Pipeline
FP32_TOL = 1e-5
TEXT_LEN = 24
GLYPH_LEN = 32
GLYPH_TOKENS = ["<color-0>", "<color-1>", "<en-font-0>", "<cn-font-2>"]
T5_TINY = dict(d_model=24, d_kv=8, num_heads=3, d_ff=40, num_layers=2, num_decoder_layers=1,
               feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
               relative_attention_max_distance=20, layer_norm_epsilon=1e-6)  # fmt: skip

PROMPTS = [
    "A red fox runs through fresh snow at dawn, mist rising between the pine trees while the camera "
    "tracks it slowly from the left side of the frame",  # longer than TEXT_LEN: truncated
    "A cat",
    "",  # the reference encodes " "
]
GLYPH_PROMPTS = [
    'A shop sign that reads "OPEN" above a door, a banner “欢迎光临” and again "OPEN"',
    "Only 'single', ‘curly single’ and 「CJK」 『quotes』 here",  # no glyph text: zeros
    'Glyph tokens "<color-1>Sale<en-font-0>" and a long one "' + "x" * 40 + '"',  # truncated
    "",
]
GLYPH_CASES = GLYPH_PROMPTS + [
    'an empty "" pair',
    '"a" then "a"',
    '“x”"y"“x”',
    '"two\nlines"',
    'nested "a “b” c"',
    'odd " quote',
    '""“z”',
    "「直角」“弯引号”",
]


@pytest.fixture(scope="module")
def mllm(tmp_path_factory):
    path = tmp_path_factory.mktemp("hv15_text")
    config = transformers.Qwen2_5_VLTextConfig(**TEXT)
    ref = transformers.Qwen2_5_VLTextModel(config).eval()
    randomize_torch_module(ref, seed=11)
    ref.save_pretrained(path / "text_encoder")
    build_qwen_tokenizer(str(path / "tokenizer"), [hv15_text.SYSTEM_MESSAGE] + PROMPTS)
    ref_tok = transformers.AutoTokenizer.from_pretrained(path / "tokenizer")
    assert ref_tok.padding_side == "right"
    prefix = f"<|im_start|>system\n{hv15_text.SYSTEM_MESSAGE}<|im_end|>\n<|im_start|>user\n"
    crop = len(ref_tok(prefix, add_special_tokens=False)["input_ids"])
    enc = load_component("Qwen2_5_VLTextModel", path / "text_encoder")
    return ref, ref_tok, enc, TextTokenizer(path / "tokenizer"), crop


@pytest.fixture(scope="module")
def byt5(tmp_path_factory):
    path = tmp_path_factory.mktemp("hv15_byt5")
    tok = transformers.ByT5Tokenizer()
    tok.add_tokens(GLYPH_TOKENS, special_tokens=True)
    tok.save_pretrained(path / "tokenizer_2")
    ref = transformers.T5EncoderModel(transformers.T5Config(vocab_size=len(tok), **T5_TINY)).eval()
    randomize_torch_module(ref, seed=12)
    ref.save_pretrained(path / "text_encoder_2")
    ref_tok = transformers.ByT5Tokenizer.from_pretrained(path / "tokenizer_2")
    return ref, ref_tok, load_component("T5EncoderModel", path / "text_encoder_2"), ByteTokenizer(path / "tokenizer_2")


def test_constants_are_the_reference_defaults():
    sig = inspect.signature(Pipe._get_mllm_prompt_embeds).parameters
    assert sig["system_message"].default == hv15_text.SYSTEM_MESSAGE
    assert sig["crop_start"].default == hv15_text.CROP_START == 108
    assert sig["tokenizer_max_length"].default == hv15_text.TEXT_MAX_LENGTH == 1000
    assert sig["num_hidden_layers_to_skip"].default == hv15_text.NUM_HIDDEN_LAYERS_TO_SKIP == 2
    assert inspect.signature(Pipe._get_byt5_prompt_embeds).parameters["tokenizer_max_length"].default == 256
    assert hv15_text.GLYPH_MAX_LENGTH == 256
    for name in ("Qwen2_5_VLTextModel", "SiglipVisionModel", "T5EncoderModel", "ByT5Tokenizer", "Qwen2TokenizerFast"):
        assert registry().component(name).class_name == name


def test_image_to_video_pipeline_runs_the_same_functions():
    """The I2V pipeline's prompt functions are copies of the T2V ones tested here."""
    i2v = pytest.importorskip("diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video")

    def code(fn):
        return [line for line in inspect.getsource(fn).splitlines() if not line.strip().startswith("# Copied from")]

    for name in ("_get_mllm_prompt_embeds", "_get_byt5_prompt_embeds"):
        assert code(getattr(i2v.HunyuanVideo15ImageToVideoPipeline, name)) == code(getattr(Pipe, name)), name
    for name in ("extract_glyph_texts", "format_text_input"):
        assert code(getattr(i2v, name)) == code(getattr(hv15, name)), name


def test_text_states_match_diffusers(mllm, caplog):
    ref, ref_tok, enc, tok, crop = mllm
    assert 20 < crop < 200  # the system turn and the user header
    with torch.no_grad():
        want, want_mask = Pipe._get_mllm_prompt_embeds(ref, ref_tok, PROMPTS, "cpu", tokenizer_max_length=TEXT_LEN,
                                                       crop_start=crop)  # fmt: skip
    got, mask = hv15_text.encode_text_prompts(enc, tok, PROMPTS, max_length=TEXT_LEN, crop_start=crop)
    assert got.shape == tuple(want.shape) == (3, TEXT_LEN, TEXT["hidden_size"])
    np.testing.assert_array_equal(mask, want_mask.numpy())
    assert mask[0].all() and 0 < mask[1].sum() < mask[0].sum() and 0 < mask[2].sum() < mask[1].sum()
    assert max_rel_err(np.asarray(got), want.numpy()) < FP32_TOL
    assert "has" in caplog.text and "truncated" in caplog.text  # the long prompt is named
    # the crop is exactly the template prefix: every prompt's tokens before it are the same
    full = ref_tok.apply_chat_template(
        hv15.format_text_input(PROMPTS, hv15_text.SYSTEM_MESSAGE),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        padding="max_length",
        max_length=TEXT_LEN + crop,
        truncation=True,
    )
    ids = np.asarray(full["input_ids"])
    assert (ids[:, :crop] == ids[:1, :crop]).all() and not (ids[:, crop] == ids[0, crop]).all()
    # the layer matters: the last hidden state differs
    last, _ = hv15_text.encode_text_prompts(enc, tok, PROMPTS[1:2], max_length=TEXT_LEN, crop_start=crop,
                                            num_hidden_layers_to_skip=0)  # fmt: skip
    assert max_rel_err(np.asarray(last), want.numpy()[1:2]) > 0.1
    # one prompt alone gives its row of the batch
    one, _ = hv15_text.encode_text_prompts(enc, tok, "A cat", max_length=TEXT_LEN, crop_start=crop)
    assert max_rel_err(np.asarray(one), want.numpy()[1:2]) < FP32_TOL


def test_glyph_text_extraction_matches_diffusers():
    for prompt in GLYPH_CASES:
        assert hv15_text.extract_glyph_text(prompt) == hv15.extract_glyph_texts(prompt), prompt
    assert hv15_text.extract_glyph_text(GLYPH_PROMPTS[0]) == 'Text "OPEN". Text "欢迎光临". '
    assert hv15_text.extract_glyph_text(GLYPH_PROMPTS[1]) is None


def test_byte_tokenizer_token_for_token(byt5, caplog):
    _, ref_tok, _, tok = byt5
    texts = [hv15_text.extract_glyph_text(p) for p in GLYPH_PROMPTS if hv15_text.extract_glyph_text(p)]
    texts += ["<color-0>plain<cn-font-2>", "ünïcødé 字"]
    got = tok(texts, GLYPH_LEN)
    want = ref_tok(texts, padding="max_length", max_length=GLYPH_LEN, truncation=True, add_special_tokens=True)
    np.testing.assert_array_equal(got.input_ids, np.asarray(want["input_ids"]))
    np.testing.assert_array_equal(got.attention_mask, np.asarray(want["attention_mask"]))
    assert got.input_ids.dtype == np.int32 and (got.input_ids >= 384).any()  # glyph tokens used
    assert tok.token_to_id("<en-font-0>") == ref_tok.convert_tokens_to_ids("<en-font-0>")
    assert "truncated" in caplog.text
    assert len(tok) == len(ref_tok) == 384 + len(GLYPH_TOKENS)


def test_byte_tokenizer_needs_its_folder(tmp_path):
    with pytest.raises(CheckpointError, match="tokenizer_config.json"):
        ByteTokenizer(tmp_path)


def test_glyph_states_match_diffusers(byt5):
    ref, ref_tok, enc, tok = byt5
    with torch.no_grad():
        want, want_mask = Pipe._get_byt5_prompt_embeds(ref_tok, ref, GLYPH_PROMPTS, "cpu",
                                                       tokenizer_max_length=GLYPH_LEN)  # fmt: skip
    got, mask = hv15_text.encode_glyph_prompts(enc, tok, GLYPH_PROMPTS, max_length=GLYPH_LEN)
    assert got.shape == tuple(want.shape) == (4, GLYPH_LEN, 24) and got.dtype == jnp.float32
    np.testing.assert_array_equal(mask, want_mask.numpy())
    assert max_rel_err(np.asarray(got), want.numpy()) < FP32_TOL
    # the no-quote prompts are all zeros with a zero mask; the others are not
    assert not np.asarray(got)[[1, 3]].any() and not mask[[1, 3]].any()
    assert np.abs(np.asarray(got)[0]).min() > 0 and mask[2].all()
    # a prompt with no quoted text alone: the encoder's path is skipped, same zeros
    none, none_mask = hv15_text.encode_glyph_prompts(enc, tok, GLYPH_PROMPTS[1], max_length=GLYPH_LEN)
    assert none.shape == (1, GLYPH_LEN, 24) and not np.asarray(none).any() and not none_mask.any()
    with pytest.raises(InputError, match="prompt"):
        hv15_text.encode_glyph_prompts(enc, tok, [1, 2])


def test_byt5_full_size_matches_transformers():
    """byT5-small with the glyph vocabulary, as every HunyuanVideo 1.5 reference config gives it."""
    paths = sorted(
        p
        for p in (
            os.path.join(REFERENCE_CONFIGS, d, "text_encoder_2", "arch_essentials.json")
            for d in os.listdir(REFERENCE_CONFIGS)
            if "HunyuanVideo-1.5" in d
        )
        if os.path.isfile(p)
    )
    assert len(paths) == 8, paths
    with open(paths[0]) as f:
        arch = json.load(f)
    for p in paths[1:]:
        with open(p) as f:
            assert {k: v for k, v in json.load(f).items() if not k.startswith("_")} == {
                k: v for k, v in arch.items() if not k.startswith("_")
            }
    # google/byt5-small's config.json with these numbers (vocab resized for the glyph tokens)
    raw = {
        "model_type": "t5",
        "feed_forward_proj": "gated-gelu",
        "is_encoder_decoder": True,
        "tie_word_embeddings": False,
        "layer_norm_epsilon": 1e-6,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        **{
            k: arch[k]
            for k in ("d_ff", "d_kv", "d_model", "num_heads", "num_layers", "num_decoder_layers", "vocab_size")
        },
    }
    cfg = T5EncoderConfig.from_config_dict(raw)
    assert cfg.is_gated_act is arch["is_gated_act"] is True and cfg.d_model == 1472
    with torch.device("meta"):
        ref = transformers.T5EncoderModel(transformers.T5Config(**raw))
    ref_count = sum(p.numel() for p in ref.parameters())
    ref_shapes = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    ref_shapes.pop("encoder.embed_tokens.weight")  # tied to shared.weight
    _, abstract = abstract_params(lambda: T5Encoder(cfg))
    count = sum(math.prod(v.get_value().shape) for v in abstract.values())
    assert count == ref_count, (count, ref_count)
    assert source_key_shapes(abstract, t5_key_rules(cfg)) == ref_shapes
