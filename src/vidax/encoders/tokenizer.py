"""Text tokenization with the checkpoint's own ``tokenizer.json`` (Hugging Face *tokenizers*).

Plain prompts (:meth:`TextTokenizer.__call__`) are tokenized by the same Rust tokenizer that
``transformers``' fast tokenizers wrap, without importing transformers, with the settings diffusers
pipelines pass: ``padding="max_length"``, ``truncation=True``, ``add_special_tokens=True``, and the
padding side the caller forces (as the references do) or else the one in
``tokenizer_config.json``.

Chat prompts (:meth:`TextTokenizer.apply_chat_template`, for Llama / Qwen-style text encoders)
go through ``transformers.PreTrainedTokenizerFast.apply_chat_template`` (transformers is a run-time
dependency of vidax for tokenizers only; it does not import torch), imported on first use.

:class:`ByteTokenizer` runs transformers' ``ByT5Tokenizer`` (a Python tokenizer, no
``tokenizer.json``) for ByT5 folders.

:func:`build_tiny_t5_tokenizer` writes a small T5-style (SentencePiece-Unigram) tokenizer, for the
embedded default checkpoint and for tests; it loads with both vidax and ``transformers``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tokenizers

from vidax.config import read_json_object
from vidax.errors import CheckpointError, InputError

logger = logging.getLogger("vidax.tokenizer")

PADDING_SIDES = ("left", "right")


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


@dataclass(frozen=True)
class Truncation:
    """How a truncation warning names what was cut (see :meth:`TextTokenizer.__call__`).

    Attributes:
        labels: one name per text as the caller knows it: an argument (``Arg("prompt")``,
            ``Arg("negative_prompt[1]")``, see :class:`vidax.errors.Arg`) or text (``"the default
            negative prompt"``); None: ``"text i"``.
        limit: the length limit as the user set it (``Message(Arg("max_sequence_length", 300))``, or
            that it is the checkpoint's default); None: ``"max_length=L"``.
        offset: tokens a prompt template puts before each text, subtracted from the counts and
            from ``max_length`` in the warning (HunyuanVideo's ``crop_start``).
        why: whose limit it is, in the warning.
    """

    labels: Sequence[Any] | None = None
    limit: Any = None
    offset: int = 0
    why: str = "as the reference pipeline does"

    def warn(self, counts: Sequence[int], max_length: int, how: str) -> None:
        """One WARNING per text (of ``counts`` tokens each) longer than ``max_length``: its
        label, its length and the limit, ``how`` saying what was dropped; a label named twice
        (one negative prompt for every prompt) is warned about once."""
        seen = set()
        for i, n in enumerate(counts):
            label = self.labels[i] if self.labels is not None else f"text {i}"
            if n <= max_length or label in seen:
                continue
            seen.add(label)
            limit = self.limit if self.limit is not None else f"max_length={max_length - self.offset}"
            logger.warning("%s has %d tokens; truncated to %s %s (%s)", label, n - self.offset, limit, self.why, how)


class TextTokenizer:
    """A ``tokenizer/`` folder of a diffusers checkpoint.

    Reads ``tokenizer.json``. A folder that only has a SentencePiece ``spiece.model`` (the
    CogVideoX releases) or a BPE ``vocab.json`` + ``merges.txt`` (a slow ``CLIPTokenizer`` saved by
    transformers 4) is converted once by transformers' own tokenizer classes, run in a
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
        self._hf = None  # transformers' tokenizer of the folder, built by apply_chat_template

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a special token or a vocabulary entry), or None."""
        return self._tok.token_to_id(token)

    def __call__(
        self,
        prompts: list[str],
        max_length: int,
        *,
        padding_side: str | None = None,
        truncation: Truncation | None = None,
    ) -> Tokens:
        """Tokenize like ``tokenizer(prompts, padding="max_length", max_length=max_length,
        truncation=True, add_special_tokens=True, padding_side=padding_side)``; warns when a
        prompt is truncated, naming it and the limit as ``truncation`` says.

        Args:
            prompts: B strings.
            max_length: L, the padded length (>= 1).
            padding_side: ``"left"`` or ``"right"``, forced whatever ``tokenizer_config.json``
                says; None: the file's ``padding_side`` (default ``"right"``).
            truncation: how the warning names the texts and the limit (:class:`Truncation`).

        Returns:
            :class:`Tokens` of shape ``(B, L)``.

        Raises:
            InputError: ``max_length < 1`` or an unknown ``padding_side``.
        """
        if max_length < 1:
            raise InputError(f"max_sequence_length must be >= 1, got {max_length}")
        side = self.padding_side if padding_side is None else _checked_padding_side(padding_side)
        tok = self._tok
        tok.no_padding()
        tok.no_truncation()
        full = [len(e.ids) for e in tok.encode_batch(prompts)]
        tok.enable_truncation(max_length, direction=self.truncation_side)
        tok.enable_padding(
            length=max_length,
            direction=side,
            pad_id=self.pad_token_id,
            pad_token=self.pad_token,
        )
        encodings = tok.encode_batch(prompts)
        tok.no_padding()
        tok.no_truncation()
        dropped = "end" if self.truncation_side == "right" else "start"
        (truncation or Truncation()).warn(full, max_length, f"the {dropped} of the text is dropped")
        ids = np.array([e.ids for e in encodings], np.int32)
        mask = np.array([e.attention_mask for e in encodings], np.int32)
        return Tokens(ids, mask, mask.sum(axis=1))

    def truncate_texts(self, texts: list[str], max_length: int, truncation: Truncation | None = None) -> list[str]:
        """Each of ``texts`` cut to the text of its first ``max_length`` tokens (tokenized without
        special tokens), warning for each text cut, named as ``truncation`` says: for a prompt put
        into a template afterwards, which stays whole."""
        tok = self._tok
        tok.no_padding()
        tok.no_truncation()
        encodings = tok.encode_batch(texts, add_special_tokens=False)
        (truncation or Truncation()).warn([len(e.ids) for e in encodings], max_length, "the end of the text is dropped")
        return [t if len(e.ids) <= max_length else t[: e.offsets[max_length - 1][1]] for t, e in zip(texts, encodings)]

    def apply_chat_template(
        self,
        conversations: Sequence,
        max_length: int,
        *,
        padding_side: str,
        add_generation_prompt: bool = False,
        chat_template: str | None = None,
        truncation: Truncation | None = None,
        **template_kwargs,
    ) -> Tokens:
        """Render conversations with the tokenizer's chat template and tokenize them, as
        ``tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True,
        padding="max_length", max_length=max_length, truncation=True,
        add_generation_prompt=add_generation_prompt, **template_kwargs)`` with the padding side
        forced (the reference pipelines of HunyuanVideo-1.5, Cosmos-Predict2.5, Flux2 call it so).

        The template is the folder's (``chat_template`` in ``tokenizer_config.json`` or
        ``chat_template.jinja``, read by ``transformers.PreTrainedTokenizerFast.from_pretrained``)
        unless ``chat_template`` gives one. The rendered text is tokenized without adding special
        tokens (the template writes them). transformers >= 5 returns a ``BatchEncoding`` where
        4.x could return a bare id list; vidax always asks for the dict form and reads
        ``input_ids`` / ``attention_mask`` from it (:func:`encoding_arrays`).

        Args:
            conversations: one conversation (a list of ``{"role": ..., "content": ...}`` dicts)
                or a list of B conversations.
            max_length: L, the padded length (>= 1); longer chats are truncated (warned).
            padding_side: ``"left"`` or ``"right"``, required: the references force it.
            add_generation_prompt: append the template's assistant header.
            chat_template: a Jinja template used instead of the folder's.
            truncation: how the truncation warning names the conversations and the limit
                (:class:`Truncation`; the counts include the template's tokens).
            **template_kwargs: extra variables for the template (e.g. ``add_vision_id=False`` for
                Qwen2.5-VL, ``enable_thinking=False`` for Qwen3).

        Returns:
            :class:`Tokens` of shape ``(B, L)`` (B = 1 for a single conversation).

        Raises:
            InputError: ``max_length < 1``, an unknown ``padding_side``, empty or malformed
                conversations.
            CheckpointError: the folder has no tokenizer.json or no chat template.
        """
        if max_length < 1:
            raise InputError(f"apply_chat_template: max_length must be >= 1, got {max_length}")
        _checked_padding_side(padding_side)
        batch = _conversation_batch(conversations)
        tok = self._transformers_tokenizer()
        if chat_template is None and not tok.chat_template:
            raise CheckpointError(
                f"{self.path}: the tokenizer has no chat template (no 'chat_template' in "
                "tokenizer_config.json and no chat_template.jinja); pass chat_template="
            )
        kw = dict(
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=True,
            **template_kwargs,
        )
        full = encoding_arrays(tok.apply_chat_template(batch, **kw), None)[0]
        out = tok.apply_chat_template(
            batch,
            padding="max_length",
            max_length=max_length,
            truncation=True,
            return_tensors="np",
            tokenizer_kwargs=dict(padding_side=padding_side),
            **kw,
        )
        ids, mask = encoding_arrays(out, max_length)
        (truncation or Truncation()).warn(
            [len(n) for n in full], max_length, f"in its chat template; cut on the {tok.truncation_side} side"
        )
        return Tokens(ids, mask, mask.sum(axis=1))

    def chat_token_ids(
        self, conversations: Sequence, *, add_generation_prompt: bool = False, **template_kwargs
    ) -> list[list[int]]:
        """The unpadded, untruncated token ids of conversations rendered with the folder's chat
        template: ``tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True,
        add_generation_prompt=add_generation_prompt, **template_kwargs)["input_ids"]`` (as
        Cosmos 3's reference tokenizes, one prompt at a time, no padding).

        Raises:
            InputError: empty or malformed conversations. CheckpointError: no chat template.
        """
        batch = _conversation_batch(conversations)
        tok = self._transformers_tokenizer()
        if not tok.chat_template:
            raise CheckpointError(
                f"{self.path}: the tokenizer has no chat template (no 'chat_template' in "
                "tokenizer_config.json and no chat_template.jinja)"
            )
        out = tok.apply_chat_template(
            batch, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=True, **template_kwargs
        )
        return [[int(i) for i in ids] for ids in encoding_arrays(out, None)[0]]

    @property
    def eos_token_id(self) -> int | None:
        """The id of the folder's ``eos_token`` (transformers' ``tokenizer.eos_token_id``)."""
        return self._transformers_tokenizer().eos_token_id

    def _transformers_tokenizer(self):
        """``PreTrainedTokenizerFast`` of this folder (imported and loaded on first use, kept)."""
        if self._hf is None:
            if not os.path.isfile(os.path.join(self.path, "tokenizer.json")):
                raise CheckpointError(f"{self.path}: chat templates need the folder's tokenizer.json (it has none).")
            self._hf = transformers_class("PreTrainedTokenizerFast").from_pretrained(self.path)
        return self._hf


class ByteTokenizer:
    """A ``ByT5Tokenizer`` folder (HunyuanVideo 1.5's ``tokenizer_2``: google/byt5-small's bytes
    plus the Glyph-SDXL-v2 colour and font tokens it adds as special tokens).

    ByT5 has no ``tokenizer.json`` (transformers' ``ByT5Tokenizer`` is a Python tokenizer: UTF-8
    bytes offset by the 3 specials, the added tokens split out first, ``</s>`` appended), so it is
    run by transformers itself (imported on first use; it does not import torch), with the
    folder's added tokens and settings.

    Raises:
        CheckpointError: the folder has no ``tokenizer_config.json`` or cannot be read as a ByT5
            tokenizer.
    """

    def __init__(self, path: str | os.PathLike):
        ByT5Tokenizer = transformers_class("ByT5Tokenizer")
        self.path = os.fspath(path)
        # ByT5Tokenizer builds without any file; a folder without its config would silently
        # lose the added (glyph) tokens.
        if not os.path.isfile(os.path.join(self.path, "tokenizer_config.json")):
            raise CheckpointError(f"{self.path}: no tokenizer_config.json (not a ByT5 tokenizer folder)")
        try:
            self._tok = ByT5Tokenizer.from_pretrained(self.path)
        except Exception as e:  # transformers raises OSError / ValueError / JSON errors
            raise CheckpointError(f"{self.path} is not a readable ByT5 tokenizer folder: {e}") from None

    def __len__(self) -> int:
        """Vocabulary size with the added tokens (the encoder's ``vocab_size`` must cover it)."""
        return len(self._tok)

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a byte's character, a special or added token), or None."""
        tok = self._tok
        if token in tok.get_vocab():
            return tok.convert_tokens_to_ids(token)
        return None

    def __call__(self, texts: list[str], max_length: int, *, truncation: Truncation | None = None) -> Tokens:
        """Tokenize like ``tokenizer(texts, padding="max_length", max_length=max_length,
        truncation=True, add_special_tokens=True)`` (the folder's padding side); warns when a text
        is truncated, as ``truncation`` names it.

        Returns:
            :class:`Tokens` of shape ``(B, max_length)``.

        Raises:
            InputError: ``max_length < 1``.
        """
        if max_length < 1:
            raise InputError(f"max_length must be >= 1, got {max_length}")
        tok = self._tok
        full = [len(ids) for ids in tok(list(texts), add_special_tokens=True)["input_ids"]]
        out = tok(list(texts), padding="max_length", max_length=max_length, truncation=True,
                  add_special_tokens=True, return_tensors="np")  # fmt: skip
        (truncation or Truncation()).warn(full, max_length, f"cut on the {tok.truncation_side} side")
        ids, mask = encoding_arrays(out, max_length)
        return Tokens(ids, mask, mask.sum(axis=1))


class _NoTorchNotice(logging.Filter):
    """Drops transformers' "PyTorch was not found. Models won't be available ..." (vidax uses its
    tokenizers only, and needs no torch); passes every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("PyTorch was not found.")


def transformers_class(name: str) -> Any:
    """``transformers.<name>``, transformers imported on first use without its notice that torch
    is missing (printed by its import in every run without torch); its other messages stay."""
    if "transformers" not in sys.modules:
        transformers_logger = logging.getLogger("transformers")
        notice = _NoTorchNotice()
        transformers_logger.addFilter(notice)
        try:
            import transformers  # noqa: F401
        finally:
            transformers_logger.removeFilter(notice)
    return getattr(sys.modules["transformers"], name)


def _checked_padding_side(padding_side) -> str:
    if padding_side not in PADDING_SIDES:
        raise InputError(f"padding_side={padding_side!r} is not valid; valid: {list(PADDING_SIDES)}.")
    return padding_side


def _conversation_batch(conversations) -> list[list[dict]]:
    """A list of conversations (lists of message dicts): one conversation is wrapped."""

    def is_message(m):
        return isinstance(m, Mapping) and "role" in m

    if isinstance(conversations, Sequence) and not isinstance(conversations, str) and conversations:
        if all(is_message(m) for m in conversations):
            return [list(conversations)]
        if all(
            isinstance(c, Sequence) and not isinstance(c, str) and c and all(is_message(m) for m in c)
            for c in conversations
        ):
            return [list(c) for c in conversations]
    raise InputError(
        "apply_chat_template: conversations must be a list of {'role': ..., 'content': ...} message "
        f"dicts or a non-empty list of such lists; got {conversations!r:.200}"
    )


def encoding_arrays(out, max_length: int | None) -> tuple[np.ndarray, np.ndarray] | tuple[list, None]:
    """``input_ids`` and ``attention_mask`` of what ``apply_chat_template(tokenize=True,
    return_dict=True)`` returned: a ``BatchEncoding`` or plain dict (transformers >= 4.4x).

    Args:
        out: the mapping returned.
        max_length: the padded length L, or None for unpadded output (then the ids are returned
            as lists and the mask as None).

    Returns:
        int32 ``(B, L)`` ids and mask, or (list of id lists, None) when ``max_length`` is None.

    Raises:
        InputError: ``out`` is not a mapping with ``input_ids`` (e.g. a bare id list from a call
            without ``return_dict=True``), or padded output without ``attention_mask``.
    """
    if not isinstance(out, Mapping) or "input_ids" not in out:
        raise InputError(
            "apply_chat_template returned no input_ids mapping (call it with tokenize=True, "
            f"return_dict=True); got {type(out).__name__}"
        )
    if max_length is None:
        return [list(np.asarray(ids).reshape(-1)) for ids in out["input_ids"]], None
    if "attention_mask" not in out:
        raise InputError("apply_chat_template returned no attention_mask; vidax needs it to mask padding.")
    ids = np.asarray(out["input_ids"], np.int32).reshape(-1, max_length)
    mask = np.asarray(out["attention_mask"], np.int32).reshape(-1, max_length)
    return ids, mask


def _converted_tokenizer_json(path: str) -> str:
    """tokenizer.json made from a slow-tokenizer folder by ``transformers`` in a subprocess."""
    import hashlib
    import shutil
    import subprocess
    import sys
    import tempfile

    from vidax.cache import cache_dir, cache_subdir

    names = set(os.listdir(path)) if os.path.isdir(path) else set()
    if not any(f.endswith(".model") for f in names) and not {"vocab.json", "merges.txt"} <= names:
        raise CheckpointError(
            f"{path}: no tokenizer.json, no SentencePiece *.model file and no BPE vocab.json + "
            "merges.txt; vidax needs one of them"
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
    tmp = tempfile.mkdtemp(dir=cache_subdir("tokenizers"), prefix=".convert-")
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
    tok.normalizer = tokenizers.normalizers.Sequence([tokenizers.normalizers.Replace(tokenizers.Regex(" {2,}"), " ")])
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
