"""Text tokenization with the checkpoint's own ``tokenizer.json`` (Hugging Face *tokenizers*).

vidax does not import *transformers* at run time (it imports torch when torch is installed), so
it drives the same Rust tokenizer that ``transformers``' fast tokenizers wrap, with the settings
diffusers pipelines pass: ``padding="max_length"``, ``truncation=True``,
``add_special_tokens=True``, the padding side from ``tokenizer_config.json``.

:func:`build_tiny_t5_tokenizer` writes a small T5-style (SentencePiece-Unigram) tokenizer, for the
embedded default checkpoint and for tests; it loads with both vidax and ``transformers``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

import numpy as np
import tokenizers

from vidax.config import read_json_object
from vidax.errors import CheckpointError, InputError

logger = logging.getLogger("vidax.tokenizer")


@dataclass(frozen=True)
class Tokens:
    """Token ids and mask of a batch of prompts.

    Attributes:
        input_ids: int32 (B, L).
        attention_mask: int32 (B, L), 1 for real tokens.
        lengths: real token counts (B,) before padding, after truncation.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    lengths: np.ndarray


class TextTokenizer:
    """A ``tokenizer/`` folder of a diffusers checkpoint.

    Reads ``tokenizer.json``. A folder that only has a SentencePiece ``spiece.model`` (the
    CogVideoX releases) is converted once by transformers' own slow-to-fast converter, run in a
    subprocess so this process never imports transformers (or torch); the result is cached in
    the vidax cache folder, keyed by the folder's file contents.

    Raises:
        CheckpointError: the folder has neither file, or they are unreadable.
    """

    def __init__(self, path: str | os.PathLike):
        path = os.fspath(path)
        file = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(file):
            file = _converted_tokenizer_json(path)
        try:
            self._tok = tokenizers.Tokenizer.from_file(file)
        except Exception as e:  # the Rust side raises plain Exception
            raise CheckpointError(f"{file} is not a readable tokenizer: {e}") from None
        config = {}
        config_file = os.path.join(path, "tokenizer_config.json")
        if os.path.isfile(config_file):
            config = read_json_object(config_file)
        self.path = path
        self.padding_side = config.get("padding_side", "right")
        self.truncation_side = config.get("truncation_side", "right")
        pad = config.get("pad_token", "<pad>")
        if isinstance(pad, dict):
            pad = pad.get("content", "<pad>")
        pad_id = self._tok.token_to_id(pad)
        if pad_id is None:
            raise CheckpointError(f"{path}: pad token {pad!r} is not in the vocabulary")
        self.pad_token, self.pad_token_id = pad, pad_id

    def __call__(self, prompts: list[str], max_length: int) -> Tokens:
        """Tokenize like ``tokenizer(prompts, padding="max_length", max_length=max_length,
        truncation=True, add_special_tokens=True)``; warns when a prompt is truncated."""
        if max_length < 1:
            raise InputError(f"max_sequence_length must be >= 1, got {max_length}")
        tok = self._tok
        tok.no_padding()
        tok.no_truncation()
        full = [len(e.ids) for e in tok.encode_batch(prompts)]
        tok.enable_truncation(max_length, direction=self.truncation_side)
        tok.enable_padding(
            length=max_length,
            direction=self.padding_side,
            pad_id=self.pad_token_id,
            pad_token=self.pad_token,
        )
        encodings = tok.encode_batch(prompts)
        tok.no_padding()
        tok.no_truncation()
        for i, n in enumerate(full):
            if n > max_length:
                logger.warning(
                    "prompt %d has %d tokens; truncated to max_sequence_length=%d as the reference "
                    "pipeline does (the end of the prompt is dropped)",
                    i,
                    n,
                    max_length,
                )
        ids = np.array([e.ids for e in encodings], np.int32)
        mask = np.array([e.attention_mask for e in encodings], np.int32)
        return Tokens(ids, mask, mask.sum(axis=1))


def _converted_tokenizer_json(path: str) -> str:
    """tokenizer.json made from a slow-tokenizer folder by ``transformers`` in a subprocess."""
    import hashlib
    import shutil
    import subprocess
    import sys
    import tempfile

    from vidax.default_checkpoint import cache_dir

    if not os.path.isdir(path) or not any(f.endswith(".model") for f in os.listdir(path)):
        raise CheckpointError(
            f"{path}: no tokenizer.json and no SentencePiece *.model file; vidax needs one of them"
        )
    digest = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            digest.update(name.encode())
            with open(full, "rb") as f:
                digest.update(f.read())
    out_dir = os.path.join(cache_dir(), "tokenizers", digest.hexdigest()[:24])
    out = os.path.join(out_dir, "tokenizer.json")
    if os.path.isfile(out):
        return out
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(out_dir), prefix=".convert-")
    code = (
        "import sys; from transformers import AutoTokenizer; "
        "AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])"
    )
    logger.warning("%s has no tokenizer.json; converting its SentencePiece model once (cached)", path)
    try:
        r = subprocess.run([sys.executable, "-c", code, path, tmp], capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not os.path.isfile(os.path.join(tmp, "tokenizer.json")):
            raise CheckpointError(
                f"{path} has no tokenizer.json and converting its SentencePiece model with transformers "
                f"failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'no output'}"
            )
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


_T5_SPECIALS = ["<pad>", "</s>", "<unk>"]


def build_tiny_t5_tokenizer(path: str | os.PathLike, vocab_size: int = 256) -> None:
    """Write a small T5-style Unigram tokenizer to ``path`` (tokenizer.json + configs).

    The vocabulary is the special tokens (pad 0, eos 1, unk 2), printable ASCII characters with
    and without the SentencePiece word marker, and frequent English words, cut to
    ``vocab_size``. Normaliser, pre-tokenizer and post-processor follow T5's (Metaspace, eos
    appended), so it behaves like the real ones in every way a pipeline depends on.
    """
    os.makedirs(path, exist_ok=True)
    words = (
        "the a an of and to in on with at is are was cat dog red blue green sky sea city car "
        "walking running flying over under beautiful video scene camera light night day"
    ).split()
    pieces: list[tuple[str, float]] = [(s, 0.0) for s in _T5_SPECIALS]
    pieces += [("\u2581" + w, -5.0) for w in words]
    pieces += [("\u2581", -8.0)]
    chars = [chr(c) for c in range(33, 127)]
    pieces += [("\u2581" + c, -11.0) for c in chars] + [(c, -10.0) for c in chars]
    if vocab_size < len(_T5_SPECIALS) + 8:
        raise InputError(f"vocab_size must be >= {len(_T5_SPECIALS) + 8}, got {vocab_size}")
    pieces = pieces[:vocab_size]
    model = tokenizers.models.Unigram(pieces, unk_id=2, byte_fallback=False)
    tok = tokenizers.Tokenizer(model)
    tok.normalizer = tokenizers.normalizers.Sequence(
        [tokenizers.normalizers.Replace(tokenizers.Regex(" {2,}"), " ")]
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = tokenizers.decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    for s in _T5_SPECIALS:
        tok.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False)])
    tok.save(os.path.join(path, "tokenizer.json"))
    config = {
        "tokenizer_class": "T5Tokenizer",
        "model_max_length": 512,
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "padding_side": "right",
        "extra_ids": 0,
        "additional_special_tokens": [],
    }
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(path, "special_tokens_map.json"), "w") as f:
        json.dump({"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=2)
