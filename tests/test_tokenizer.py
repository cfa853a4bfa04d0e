"""vidax's tokenizer against transformers' on the same folders (tokenizer.json or spiece.model)."""

import numpy as np

from vidax.encoders.tokenizer import TextTokenizer, build_tiny_t5_tokenizer

PROMPTS = ["a cat walking over the sea", "A Red CAR &amp; zebra! " * 3, "", "night  city   light"]


def _reference(path, max_length):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    out = tok(PROMPTS, padding="max_length", max_length=max_length, truncation=True,
              add_special_tokens=True, return_attention_mask=True)
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
    import sentencepiece as spm
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["a cat walking over the sea at night", "the red car in the city light",
                                 "a dog running under the blue sky", "zebra and camera scene video"] * 50))
    folder = tmp_path / "tok"
    folder.mkdir()
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "spiece"), vocab_size=30,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    (folder / "spiece.vocab").unlink()
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "T5Tokenizer", "extra_ids": 0, "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}'
    )
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path / "cache"))
    ours = TextTokenizer(folder)(PROMPTS, 16)
    ids, mask = _reference(str(folder), 16)
    np.testing.assert_array_equal(ours.input_ids, ids)
    np.testing.assert_array_equal(ours.attention_mask, mask)
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1
    TextTokenizer(folder)  # second load uses the cache
    assert len(list((tmp_path / "cache" / "tokenizers").iterdir())) == 1
