"""The weight formats a pipeline loads its transformers in: ``from_pretrained``'s
``weight_dtype=`` (8-bit kernels, :mod:`vidax.nn.quant`) and ``transformer=`` (a single-file
checkpoint, :mod:`vidax.weights.single_file`), and ``random_weights=True`` (every component's
weights made on the device from its config, :mod:`vidax.weights.random_weights`), carried by the
:class:`~vidax.checkpoint.Checkpoint` to the one component loader and to the staging plan."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from vidax.checkpoint import Checkpoint
from vidax.errors import InputError

logger = logging.getLogger("vidax.pipeline")

#: Files a tokenizer folder is read from (:class:`~vidax.encoders.tokenizer.TextTokenizer`).
_TOKENIZER_FILES = ("tokenizer.json", "spiece.model", "tokenizer.model", "vocab.json")


def with_weights(checkpoint: Checkpoint, weight_dtype: Any = None, transformer: Any = None) -> Checkpoint:
    """``checkpoint`` with its transformers' 8-bit format and single-file transformer
    (``from_pretrained``'s ``weight_dtype=`` / ``transformer=``), both checked before any
    weight is read.

    Raises:
        InputError: a format that is not one, or ``transformer=`` not an existing ``.gguf`` /
            ``.safetensors`` file (one line naming the keyword and its value;
            :func:`vidax.weights.single_file.check_single_file`).
    """
    from vidax.nn.quant import parse_weight_format

    weights = parse_weight_format(weight_dtype) or checkpoint.weights
    files = dict(checkpoint.files)
    if transformer is not None and _is_component_folder(transformer):
        checkpoint = checkpoint.with_folder("transformer", os.path.expanduser(os.fspath(transformer)))
    elif transformer is not None:
        from vidax.weights.single_file import check_single_file

        files["transformer"] = check_single_file(transformer)
    if weights is None and not files:
        return checkpoint
    return dataclasses.replace(checkpoint, weights=weights, files=files)


def _is_component_folder(path: Any) -> bool:
    """A folder holding a ``config.json``: a transformer in diffusers' layout (``transformer=``
    as diffusers' ``transformer=WanTransformer3DModel.from_pretrained(folder)``)."""
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        return False
    folder = os.path.expanduser(os.fspath(path))
    return os.path.isdir(folder) and os.path.isfile(os.path.join(folder, "config.json"))


def with_random_weights(checkpoint: Checkpoint, random_weights: bool = True) -> Checkpoint:
    """``checkpoint`` whose weights are made on the device from its configs (``random_weights``;
    False: ``checkpoint`` itself): its folders need only ``model_index.json`` and each
    component's config, as ``reference_configs/<name>/``. A tokenizer folder without tokenizer
    files (the reference folders keep a summary of the tokenizer, not the tokenizer) is read
    from a stand-in instead: :func:`stand_in_tokenizer`, a small T5-style tokenizer of 256
    pieces (so a prompt's ids fit any text encoder's vocabulary) plus the special tokens prompt
    templates look up, in random-weights mode only.

    An 8-bit ``weight_dtype`` applies: the transformer's Linear kernels are made as 8-bit
    kernels with their scales (what the memory plan and the step of such a run measure).

    Raises:
        InputError: ``random_weights`` with a single-file ``transformer=``.
    """
    if not random_weights:
        return checkpoint
    if checkpoint.files:
        from vidax.errors import Arg

        given = Arg("transformer", next(iter(checkpoint.files.values())))
        raise InputError(
            Arg("random_weights"), " makes every weight from the configs; ", given, " cannot apply; leave it out"
        )

    folders = dict(checkpoint.folders)
    for name in checkpoint.index:
        if name.startswith("_") or not checkpoint.has(name) or not _is_tokenizer(checkpoint.class_of(name)):
            continue
        folder = folders.get(name) or os.path.join(checkpoint.root, name)
        files = set(os.listdir(folder)) if os.path.isdir(folder) else set()
        if not files & set(_TOKENIZER_FILES):
            folders[name] = stand_in_tokenizer()
            logger.warning(
                "random weights: %s has no tokenizer files; %s is read from a stand-in tokenizer "
                "(256 T5-style pieces and chat / vision special tokens)",
                folder,
                name,
            )
    return dataclasses.replace(checkpoint, folders=folders, random_weights=True)


def _is_tokenizer(class_name: Any) -> bool:
    """Whether model_index.json's class ``class_name`` is a tokenizer: registered as one, or a
    transformers tokenizer class the registry does not list (``PreTrainedTokenizerFast``)."""
    from vidax.registry import registry

    spec = registry().find_component(class_name)
    if spec is not None:
        return spec.kind == "tokenizer"
    return isinstance(class_name, str) and class_name.endswith(("Tokenizer", "TokenizerFast"))


#: Special tokens the families' prompt builders look up by name (Qwen, Llama, Gemma chat
#: markers, vision markers), added to the stand-in tokenizer after its 256 pieces.
STAND_IN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<bos>",
    "<eos>",
    "<start_of_turn>",
    "<end_of_turn>",
)


def stand_in_tokenizer() -> str:
    """The folder of the random-weights stand-in tokenizer (built once in the vidax cache):
    :func:`~vidax.encoders.tokenizer.build_tiny_t5_tokenizer`'s 256 pieces (ids 0-255), the
    :data:`STAND_IN_SPECIALS` after them, and a plain chat template (each message's text on a
    line) for the families that prompt through one."""
    import json

    import tokenizers

    from vidax.cache import cache_subdir
    from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

    path = os.path.join(cache_subdir("tokenizers"), "random-weights-stand-in-2")
    config_file = os.path.join(path, "tokenizer_config.json")
    if not os.path.isfile(os.path.join(path, "tokenizer.json")) or not os.path.isfile(config_file):
        build_tiny_t5_tokenizer(path, vocab_size=256)
        tok = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in STAND_IN_SPECIALS])
        tok.save(os.path.join(path, "tokenizer.json"))
        with open(config_file) as f:
            config = json.load(f)
        config["chat_template"] = (
            "{% for message in messages %}{% if message['content'] is string %}{{ message['content'] }}"
            "{% else %}{% for part in message['content'] %}{{ part['text'] if part['type'] == 'text' else '' }}"
            "{% endfor %}{% endif %}\n{% endfor %}"
        )
        with open(config_file, "w") as f:
            json.dump(config, f)
    return path


def weights_source(ckpt: Checkpoint, name: str, spec: Any = None) -> Any:
    """What component ``name``'s weights are read (and sized) from: in random-weights mode a
    :class:`~vidax.weights.random_weights.ConfigReader` of its config, else
    :func:`transformer_source` (its single file's reader, or its folder)."""
    if ckpt.random_weights:
        from vidax.registry import registry
        from vidax.weights.random_weights import config_reader

        spec = spec or registry().component(ckpt.class_of(name), source=f"{ckpt.source} ({name})")
        return config_reader(spec, ckpt.typed_config(name, spec.config_class()))
    return transformer_source(ckpt, name, spec)


def transformer_source(ckpt: Checkpoint, name: str, spec: Any) -> Any:
    """What transformer ``name``'s weights are read from: its single file's reader
    (:func:`vidax.weights.single_file.open_single_file`) when one is given, else its folder's
    (:meth:`~vidax.checkpoint.Checkpoint.reader`)."""
    if ckpt.random_weights:
        return weights_source(ckpt, name, spec)
    if name in ckpt.files:
        from vidax.weights.single_file import open_single_file

        return open_single_file(ckpt.files[name], spec)
    return ckpt.reader(name)


def check_weights_present(checkpoint: Checkpoint) -> None:
    """Refuse a folder of configs only (``reference_configs/NAME``: each model component's
    folder holds JSON files alone) that is to be read from files, saying that
    ``random_weights=True`` (``--random-weights``) runs it, before anything else is read. The
    front doors that load call it (``vidax generate``, ``load_pipeline`` /
    ``from_pretrained``); planning from configs alone (``vidax inspect``, the device plan) does not.

    Raises:
        CheckpointError: no model component folder holds anything but JSON files.
    """
    from vidax.errors import Arg, CheckpointError

    if checkpoint.random_weights:
        return
    models = [
        name
        for name, file in checkpoint.config_files.items()
        if os.path.basename(file) == "config.json" and name not in checkpoint.files
    ]
    folders = [checkpoint.folders.get(name, os.path.join(checkpoint.root, name)) for name in models]
    if not models or any(  # a weights file of any kind (torch's *.bin too: the reader names what it reads)
        not entry.endswith(".json") and not entry.startswith(".")
        for folder in folders
        if os.path.isdir(folder)
        for entry in os.listdir(folder)
    ):
        return
    raise CheckpointError(
        f"{checkpoint.root} holds configs only (no *.safetensors in {', '.join(models)}): ",
        Arg("random_weights", python="random_weights=True"),
        " runs it with every weight made from the configs (the video is noise: to learn whether a model fits and "
        "how fast it runs); for a real video give a folder with the weights",
    )
