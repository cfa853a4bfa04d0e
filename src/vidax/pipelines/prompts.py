"""A call's prompts encoded (or its precomputed prompt embeddings taken), with the text encoder on
the device meanwhile, and how the tokenizer cuts them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.checkpoint import CheckpointInfo
from vidax.config import read_json_object
from vidax.encoders.tokenizer import Truncation
from vidax.errors import Arg, InputError, Message
from vidax.pipelines.call import Call

#: A tokenizer_config.json ``model_max_length`` at or above this is transformers' "no limit"
#: placeholder (``int(1e30)``), not a length.
_NO_TOKEN_LIMIT = 10**9


def tokenizer_token_limit(
    info: CheckpointInfo, fallback: int, fallback_reason: str, name: str = "tokenizer"
) -> tuple[int, str]:
    """``(largest max_sequence_length, why)`` for a text encoder without a position table
    (T5 / UMT5: relative positions): the tokenizer's ``model_max_length`` in
    ``<name>/tokenizer_config.json``, or ``fallback`` (the family's reference bound) where the
    file gives none or transformers' "no limit"; never below the checkpoint's default."""
    ckpt = info.checkpoint
    file = os.path.join(ckpt.folder(name), "tokenizer_config.json")
    n = read_json_object(file).get("model_max_length") if os.path.isfile(file) else None
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 < n < _NO_TOKEN_LIMIT:
        limit, reason = fallback, fallback_reason
    else:
        limit, reason = int(n), f"model_max_length={int(n)} in {file}"
    default = info.defaults.max_sequence_length
    return (limit, reason) if limit >= default else (default, "the checkpoint's default max_sequence_length")


def prompt_texts(call: Call) -> list[str]:
    """The texts to encode: the prompts, then the negatives when CFG runs."""
    return call.prompts + (call.negatives if call.do_cfg else [])


def text_truncation(call: Call, offset: int = 0) -> Truncation:
    """How the tokenizer's truncation warning names each of :func:`prompt_texts` and the limit:
    ``prompt`` (``prompt[i]`` for a list), ``negative_prompt`` (``[i]`` where they differ), or the
    pipeline's default negative prompt when the caller gave none; ``max_sequence_length=L`` when
    the caller gave it, else that L is the checkpoint's default. ``offset``: template tokens
    before each text (:class:`~vidax.encoders.tokenizer.Truncation`)."""

    def names(name: str, texts: list[str]) -> list[Arg]:
        return [Arg(name)] * len(texts) if len(set(texts)) == 1 else [Arg(f"{name}[{i}]") for i in range(len(texts))]

    labels = names("prompt", call.prompts)
    if call.do_cfg:
        labels += (
            names("negative_prompt", call.negatives)
            if "negative_prompt" in call.given
            else ["the pipeline's default negative prompt text"] * len(call.negatives)
        )
    n = call.max_sequence_length
    limit = (
        Message(Arg("max_sequence_length", n))
        if "max_sequence_length" in call.given
        else Message(
            f"{n} tokens, this checkpoint's default (",
            Arg("max_sequence_length", keyword=True),
            " sets another length)",
        )
    )
    return Truncation(labels, limit, offset)


def call_embeds(pipe: Any, call: Call) -> Any:
    """The call's text embeddings before the per-video repeat: ``pipe.hooks.encode_call``, or, with
    ``prompt_embeds=`` (:attr:`Call.prompt_parts`), ``pipe.hooks.context_of_parts`` of the given
    arrays, the negative ones given or encoded from the negative texts when CFG runs."""
    if call.prompt_parts is None:
        return pipe.hooks.encode_call(call)
    parts = tuple(jnp.asarray(p) for p in call.prompt_parts)
    if call.do_cfg:
        negatives = call.negative_parts
        if negatives is None:
            negatives = pipe.hooks.encode_prompt_parts(
                dataclasses.replace(call, prompts=call.negatives, cfg=False, given=call.given - {"negative_prompt"})
            )
        parts = tuple(jnp.concatenate([p, jnp.asarray(n).astype(p.dtype)]) for p, n in zip(parts, negatives))
    return pipe.hooks.context_of_parts(parts)


class PromptEncoding:
    """A pipeline's prompt encoding; a base of :class:`~vidax.pipelines.base.VideoPipeline`."""

    def encode_prompt_embeds(self, prompt: Any = None, negative_prompt: Any = None, **kwargs: Any) -> dict:
        """Encode the prompts once, to pass to later calls (diffusers' ``encode_prompt``, whose
        tuple is returned here by keyword): ``pipe(**pipe.encode_prompt_embeds(p, n, ...), ...)``
        makes the video ``pipe(p, n, ...)`` makes, bit for bit.

        Args: the call's keywords (``max_sequence_length``, ``guidance_scale``, ``image`` where
            the image joins the text encoding...): they decide the encoding and whether the
            negative prompt is encoded (only when CFG runs, as diffusers).

        Returns:
            ``{keyword: numpy array}``: :attr:`prompt_embeds_args` (e.g. ``prompt_embeds`` (B, L,
            D) in the pipeline's dtype, masks (B, L)), one row per prompt (not repeated per
            video), and their ``negative_`` twins when CFG runs.

        Raises:
            InputError: an invalid argument; a pipeline that takes no ``prompt_embeds``.
        """
        if not self.family.prompt_embeds_args:
            raise InputError(
                f"{type(self).__name__} takes no ", Arg("prompt_embeds"), " (its diffusers pipeline takes none)"
            )
        call = self.check_call(self.info, prompt, negative_prompt, **kwargs)
        parts = self.hooks.encode_prompt_parts(call)
        b = len(call.prompts)
        names = self.family.prompt_embeds_args
        out = {n: np.asarray(p[:b]) for n, p in zip(names, parts)}
        if call.do_cfg:
            out.update({"negative_" + n: np.asarray(p[b:]) for n, p in zip(names, parts)})
        return out

    def encode_prompt(self, *args: Any, **kwargs: Any) -> None:
        """diffusers' ``pipe.encode_prompt(prompt, negative_prompt, ...)``: vidax's is
        :meth:`encode_prompt_embeds`, whose dict of keywords is passed back as they are.

        Raises:
            InputError: always, naming :meth:`encode_prompt_embeds`.
        """
        raise InputError(
            "pipe.encode_prompt is diffusers' name: vidax's is pipe.encode_prompt_embeds(prompt, negative_prompt, "
            "**call_keywords), which returns diffusers' tuple as a dict of keywords: pipe(**embeds, ...) makes the "
            "same video"
        )


def encode_prompts(
    pipe: Any, prompts: Sequence[str], max_sequence_length: int, truncation: Truncation | None = None
) -> jax.Array:
    """Embeddings (B, L, D) of ``prompts`` as the reference encodes them (``pipe``'s family hook
    ``encode_text``), a staged text encoder placed on the device for the call only;
    ``truncation``: how a too-long prompt is named in the warning (:func:`text_truncation`)."""
    return encode_with(pipe, "text_encoder", pipe.hooks.encode_text, list(prompts), max_sequence_length, truncation)


def encode_with(pipe: Any, name: str, fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` with ``pipe``'s component ``name`` on the device (a staged component is placed
    for the call only, :attr:`~vidax.pipelines.base.VideoPipeline.staging`) at the pipeline's
    matmul precision, its result complete before the weights leave."""
    with pipe.staging.on_device(name), pipe.precision():
        out = fn(*args)
        jax.block_until_ready(out)
    return out
