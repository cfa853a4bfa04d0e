"""vidax's tokenizer against transformers' on the same folders (tokenizer.json or spiece.model)."""

import numpy as np

from tests.parity.helpers import build_sentencepiece_tokenizer
from vidax.encoders.tokenizer import TextTokenizer, build_tiny_t5_tokenizer

PROMPTS = ["a cat walking over the sea", "A Red CAR &amp; zebra! " * 3, "", "night  city   light"]


def _reference(path, max_length):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    out = tok(
        PROMPTS,
        padding="max_length",
        max_length=max_length,
        truncation=True,
        add_special_tokens=True,
        return_attention_mask=True,
    )
    return np.array(out.input_ids), np.array(out.attention_mask)


def test_tokenizer_json_matches_transformers(tmp_path):
    build_tiny_t5_tokenizer(tmp_path)
    ours = TextTokenizer(tmp_path)(PROMPTS, 12)
    ids, mask = _reference(str(tmp_path), 12)
    np.testing.assert_array_equal(ours.input_ids, ids)
    np.testing.assert_array_equal(ours.attention_mask, mask)
    assert ours.lengths.tolist() == mask.sum(1).tolist()


def test_sentencepiece_only_folder_is_converted(tmp_path, monkeypatch):
    """CogVideoX ships spiece.model without tokenizer.json: vidax converts it (cached)."""
    folder = tmp_path / "tok"
    build_sentencepiece_tokenizer(folder)
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path / "cache"))
    ours = TextTokenizer(folder)(PROMPTS, 16)
    ids, mask = _reference(str(folder), 16)
    np.testing.assert_array_equal(ours.input_ids, ids)
    np.testing.assert_array_equal(ours.attention_mask, mask)
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1
    TextTokenizer(folder)  # second load uses the cache
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1


# --------------------------------------------------------------------------- padding side, chat templates

import json  # noqa: E402
import logging  # noqa: E402

import pytest  # noqa: E402

from vidax.encoders.tokenizer import encoding_arrays  # noqa: E402
from vidax.errors import CheckpointError, InputError  # noqa: E402

# Qwen-style ChatML with one extra template variable, to see template kwargs arrive.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if tag is defined %}{{ tag }}{% endif %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATS = [
    [{"role": "system", "content": "Describe the video."}, {"role": "user", "content": "a cat walking over the sea"}],
    [{"role": "user", "content": "night city light"}],
    [{"role": "user", "content": "a red car and a blue dog running under the green sky at night " * 6}],
]


def _build_chat_tokenizer(path, template_in: str, config_padding_side: str):
    """A byte-level BPE tokenizer trained here (no hub), saved by transformers, its chat template
    in tokenizer_config.json or in chat_template.jinja, its padding side in the config."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([m["content"] for c in CHATS for m in c] + PROMPTS + ["system user assistant"], trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>", padding_side=config_padding_side
    ).save_pretrained(path)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    (path / "chat_template.jinja").unlink(missing_ok=True)
    if template_in == "config":
        config["chat_template"] = CHAT_TEMPLATE
    else:
        config.pop("chat_template", None)
        (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    config_file.write_text(json.dumps(config))


def _reference_chat(path, chats, max_length, side, **kw):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    tok.padding_side = side
    out = tok.apply_chat_template(
        chats,
        tokenize=True,
        return_dict=True,
        padding="max_length",
        max_length=max_length,
        truncation=True,
        return_tensors="np",
        **kw,
    )
    return np.asarray(out["input_ids"]), np.asarray(out["attention_mask"])


@pytest.mark.parametrize("template_in", ["config", "jinja"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_chat_template_matches_transformers(tmp_path, template_in, side, caplog):
    """The padding side is the caller's, not the config's (set to the other side here)."""
    _build_chat_tokenizer(tmp_path, template_in, config_padding_side="right" if side == "left" else "left")
    with caplog.at_level(logging.WARNING, logger="vidax.tokenizer"):
        ours = TextTokenizer(tmp_path).apply_chat_template(CHATS, 64, padding_side=side, add_generation_prompt=True)
    ids, mask = _reference_chat(tmp_path, CHATS, 64, side, add_generation_prompt=True)
    np.testing.assert_array_equal(ours.input_ids, ids)
    np.testing.assert_array_equal(ours.attention_mask, mask)
    assert ours.input_ids.dtype == np.int32 and ours.input_ids.shape == (3, 64)
    assert ours.lengths.tolist() == mask.sum(1).tolist()
    assert ours.lengths[0] < 64 and ours.lengths[2] == 64  # one padded chat, one truncated
    assert ours.attention_mask[1, 0 if side == "left" else -1] == 0
    assert "text 2 has" in caplog.text and "text 0 has" not in caplog.text
    # the generation prompt is there: the reference without it differs
    assert not np.array_equal(_reference_chat(tmp_path, CHATS, 64, side)[0], ids)


def test_chat_template_single_conversation_and_template_kwargs(tmp_path):
    _build_chat_tokenizer(tmp_path, "jinja", "right")
    tok = TextTokenizer(tmp_path)
    ours = tok.apply_chat_template(CHATS[1], 24, padding_side="left", tag="night")
    ids, mask = _reference_chat(tmp_path, CHATS[1], 24, "left", tag="night")
    assert ours.input_ids.shape == (1, 24)
    np.testing.assert_array_equal(ours.input_ids, ids.reshape(1, 24))
    np.testing.assert_array_equal(ours.attention_mask, mask.reshape(1, 24))
    without = tok.apply_chat_template(CHATS[1], 24, padding_side="left")
    assert without.lengths[0] < ours.lengths[0]
    # a template passed in replaces the folder's
    plain = tok.apply_chat_template(CHATS[1], 24, padding_side="left", chat_template="{{ messages[0]['content'] }}")
    np.testing.assert_array_equal(plain.input_ids[0, -plain.lengths[0] :], tok._tok.encode("night city light").ids)


def test_plain_prompts_forced_padding_side(tmp_path):
    from transformers import AutoTokenizer

    build_tiny_t5_tokenizer(tmp_path)  # its config says right
    ours = TextTokenizer(tmp_path)(PROMPTS, 12, padding_side="left")
    ref = AutoTokenizer.from_pretrained(str(tmp_path))(
        PROMPTS, padding="max_length", max_length=12, truncation=True, padding_side="left"
    )
    np.testing.assert_array_equal(ours.input_ids, np.array(ref.input_ids))
    np.testing.assert_array_equal(ours.attention_mask, np.array(ref.attention_mask))
    assert ours.attention_mask[2, 0] == 0 and ours.attention_mask[2, -1] == 1
    right = TextTokenizer(tmp_path)(PROMPTS, 12)  # None: the config's side
    assert right.attention_mask[2, 0] == 1 and right.attention_mask[2, -1] == 0
    with pytest.raises(InputError, match="padding_side='top'"):
        TextTokenizer(tmp_path)(PROMPTS, 12, padding_side="top")


def test_encoding_arrays_takes_batch_encoding_or_dict():
    from transformers import BatchEncoding

    data = {"input_ids": [[5, 6, 0]], "attention_mask": [[1, 1, 0]]}
    for out in (BatchEncoding(data), dict(data)):
        ids, mask = encoding_arrays(out, 3)
        assert ids.dtype == np.int32 and ids.tolist() == [[5, 6, 0]] and mask.tolist() == [[1, 1, 0]]
    with pytest.raises(InputError, match="return_dict=True"):
        encoding_arrays([[5, 6, 0]], 3)
    with pytest.raises(InputError, match="no attention_mask"):
        encoding_arrays({"input_ids": [[5, 6, 0]]}, 3)


def test_chat_template_errors(tmp_path):
    build_tiny_t5_tokenizer(tmp_path)
    tok = TextTokenizer(tmp_path)
    with pytest.raises(CheckpointError, match="no chat template"):
        tok.apply_chat_template(CHATS, 8, padding_side="left")
    with pytest.raises(InputError, match="padding_side=None"):
        tok.apply_chat_template(CHATS, 8, padding_side=None)
    with pytest.raises(InputError, match="conversations must be"):
        tok.apply_chat_template(["a cat"], 8, padding_side="left")
    with pytest.raises(InputError, match="conversations must be"):
        tok.apply_chat_template([], 8, padding_side="left")


def test_truncation_warning_names_what_was_cut(caplog):
    """The caller's names for the texts and the limit; a template's leading tokens not counted
    (HunyuanVideo's crop_start); one warning per name."""
    from vidax.encoders.tokenizer import Truncation

    names = Truncation(["prompt", "negative_prompt", "negative_prompt"], "max_sequence_length=8", offset=3)
    with caplog.at_level(logging.WARNING, logger="vidax.tokenizer"):
        names.warn([5, 20, 20], 11, "the end of the text is dropped")
    assert [r.getMessage() for r in caplog.records] == [
        "negative_prompt has 17 tokens; truncated to max_sequence_length=8 as the reference pipeline does (the end "
        "of the text is dropped)"
    ]


# --------------------------------------------------------------------------- Gemma (LTX-2)


def _build_gemma_tokenizer(path, padding_side: str):
    """A tiny ``GemmaTokenizer`` (BPE with byte fallback, spaces as ``▁``, ``<bos>`` added) built
    here from a vocabulary and merges (no hub), saved by transformers with ``padding_side``."""
    from transformers import GemmaTokenizer

    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"])}
    vocab.update({f"<0x{b:02X}>": len(vocab) + b for b in range(256)})
    merges = [("▁", "a"), ("c", "a"), ("ca", "t"), ("▁", "ca"), ("▁ca", "t"), ("t", "h"), ("th", "e"), ("▁", "the")]
    for piece in list("▁abcdefghijklmnopqrstuvwxyz") + [a + b for a, b in merges]:
        vocab.setdefault(piece, len(vocab))
    GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, padding_side=padding_side).save_pretrained(path)


def test_gemma_prompts_tokenized_as_ltx2(tmp_path):
    """``gemma_prompt_tokens`` = ``LTX2Pipeline._get_gemma_prompt_embeds``'s tokenizer call:
    prompts stripped, padding forced to the left (the folder says right here), max_length,
    truncation, ``<bos>`` first; token for token as transformers' tokenizer."""
    from transformers import AutoTokenizer

    from vidax.encoders.gemma3 import gemma_prompt_tokens

    _build_gemma_tokenizer(tmp_path, padding_side="right")
    prompts = ["  the cat sat  ", "A Cat, the CAT! é 🐱 the cat sat on the mat " * 2, ""]
    ref = AutoTokenizer.from_pretrained(str(tmp_path))
    assert ref.padding_side == "right"
    ref.padding_side = "left"
    want = ref(
        [p.strip() for p in prompts],
        padding="max_length",
        max_length=24,
        truncation=True,
        add_special_tokens=True,
        return_tensors="np",
    )
    tok = TextTokenizer(tmp_path)
    ours = gemma_prompt_tokens(tok, prompts, 24)
    np.testing.assert_array_equal(ours.input_ids, want.input_ids)
    np.testing.assert_array_equal(ours.attention_mask, want.attention_mask)
    bos = tok.token_to_id("<bos>")
    assert ours.attention_mask[0, 0] == 0 and ours.input_ids[0, -ours.lengths[0]] == bos  # left padded
    assert ours.lengths[1] == 24 and ours.lengths[2] == 1  # truncated; an empty prompt is <bos> alone
    # The strip matters: the spaces around the first prompt are tokens otherwise.
    assert not np.array_equal(tok(prompts, 24, padding_side="left").input_ids, ours.input_ids)


def test_no_torch_notice_from_transformers(tmp_path):
    """Without torch, importing transformers prints "PyTorch was not found. Models won't be
    available ..." (HunyuanVideo 1.5 and Cosmos 3 runs import it for chat templates / ByT5):
    vidax needs no torch, so its tokenizers import transformers without that line, and
    transformers' other messages still show."""
    import subprocess
    import sys

    build_tiny_t5_tokenizer(tmp_path)
    code = (
        "import sys; sys.modules['torch'] = None  # no torch installed\n"
        "from vidax.encoders.tokenizer import TextTokenizer\n"
        f"print(TextTokenizer({str(tmp_path)!r}).eos_token_id)\n"
        "from transformers.utils import logging\n"
        "logging.get_logger('transformers').warning('another warning')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "1\n", r.stderr
    assert "another warning" in r.stderr and "PyTorch" not in r.stderr, r.stderr
