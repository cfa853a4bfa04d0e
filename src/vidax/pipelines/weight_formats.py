"""The weight formats a pipeline loads its transformers in: ``from_pretrained``'s
``weight_dtype=`` (8-bit kernels, :mod:`vidax.nn.quant`) and ``transformer=`` (a single-file
checkpoint, :mod:`vidax.weights.single_file`), carried by the :class:`~vidax.checkpoint.Checkpoint`
to the one component loader and to the staging plan."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from vidax.checkpoint import Checkpoint


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


def transformer_source(ckpt: Checkpoint, name: str, spec: Any) -> Any:
    """What transformer ``name``'s weights are read from: its single file's reader
    (:func:`vidax.weights.single_file.open_single_file`) when one is given, else its folder."""
    if name in ckpt.files:
        from vidax.weights.single_file import open_single_file

        return open_single_file(ckpt.files[name], spec)
    return ckpt.folder(name)
