"""What vidax's command-line flags turn into, shared by ``vidax generate`` (:mod:`vidax.cli`,
:mod:`vidax.generate_command`) and ``vidax serve``: the call keywords offered as flags, the
``--lora`` files, the offloading flags."""

from __future__ import annotations

import dataclasses
import os


def _frame_rate_words() -> str:
    """What ``--fps`` takes, in words: ``"an integer frame rate in [1, 1000] fps"``
    (:data:`~vidax.pipelines.options.FRAME_RATE_RANGE`)."""
    from vidax.pipelines.options import FRAME_RATE_RANGE

    return f"an integer frame rate in [{FRAME_RATE_RANGE[0]}, {FRAME_RATE_RANGE[1]}] fps"


def call_options() -> dict:
    """The call keywords ``vidax generate`` offers as flags, by name: the shared ones, then those
    every registered pipeline declares (:class:`vidax.pipelines.options.CallOption`; a keyword
    several pipelines take is one flag, its help theirs joined by :func:`~vidax.pipelines.option_help.join_helps`).

    Raises:
        ConfigError: two pipelines declare one keyword with different types (one flag cannot take both).
    """
    from vidax.errors import ConfigError
    from vidax.pipelines.option_help import join_helps
    from vidax.pipelines.options import SHARED_OPTIONS
    from vidax.registry import registry

    options = {o.name: o for o in SHARED_OPTIONS if o.is_flag}
    helps: dict[str, list[str]] = {}
    differ: set[str] = set()  # keywords whose pipelines' defaults differ
    for spec in registry().pipelines():
        for o in spec.load().call_options:
            if not o.is_flag:
                continue
            if o.name not in options:
                options[o.name] = o
            elif o.type != options[o.name].type:
                raise ConfigError(
                    f"{spec.class_name} declares the call keyword {o.name!r} as {o.type}, another "
                    f"pipeline as {options[o.name].type}; one flag cannot take both"
                )
            else:
                helps.setdefault(o.name, [options[o.name].help]).append(o.help)
                if o.default != options[o.name].default:
                    differ.add(o.name)
    for name, texts in helps.items():  # one text: shared sentences once, each family's parenthetical
        options[name] = dataclasses.replace(options[name], help=join_helps(texts))
    for name in differ:  # one "[default: X]" would be one family's: each family's help says its own
        options[name] = dataclasses.replace(options[name], default="")
    return options


def _lora_files(specs: list[str]) -> list[tuple[str, float]]:
    """``(path, scale)`` of each ``--lora PATH[:SCALE]``, each file read and its keys checked
    for a LoRA layout (not yet against the model)."""
    import math

    from vidax.errors import InputError
    from vidax.lora.formats import parse, read_state_dict
    from vidax.pipelines.options import MAX_FLOAT

    out = []
    for spec in specs:
        path, scale = spec, 1.0
        head, sep, tail = spec.rpartition(":")
        if sep and not os.path.exists(spec):
            try:
                path, scale = head, float(tail)
            except ValueError:
                raise InputError(f"--lora {spec!r}: give PATH or PATH:SCALE with SCALE a number") from None
            if not math.isfinite(scale) or abs(scale) > MAX_FLOAT:  # the merge is float32
                raise InputError(
                    f"--lora {spec!r}: SCALE must be a finite number (at most {MAX_FLOAT:.4g} in "
                    "magnitude, float32's largest)"
                )
        parse(*read_state_dict(path, f"--lora {path}"), what=f"--lora {path}")
        out.append((path, scale))
    return out


def apply_loras(pipe, loras: list[tuple[str, float]]) -> None:
    """Merge the LoRAs of :func:`_lora_files` into ``pipe``'s transformer(s) at their scales
    (every key placed and checked before any step runs); nothing for an empty list."""
    if loras:
        names = [
            pipe.lora.load(path, f"lora_{i}", experts=range(len(pipe.experts.modules)), what=f"--lora {path}")
            for i, (path, _) in enumerate(loras)
        ]
        pipe.set_adapters(names, [scale for _, scale in loras])


def _check_lora_on_streamed_gguf(loras, transformer, weights, offload) -> None:
    """A LoRA on a .gguf transformer (its linear weights kept as GGUF blocks) with streamed blocks
    is refused by the merge (vidax does not merge into streamed GGUF blocks): refuse it here, before
    any loading, instead of after the transformer is read."""
    if (
        loras
        and transformer
        and weights is None
        and offload is not None
        and offload.streams_blocks
        and str(transformer).lower().endswith(".gguf")
    ):
        from vidax.errors import InputError

        raise InputError(
            f"--lora {loras[0][0]}: vidax does not merge a LoRA into the GGUF blocks of a .gguf "
            "--transformer whose blocks are streamed (--offload-blocks); drop --offload-blocks, or add "
            "--weights int8 (the file re-quantized to int8, which a LoRA merges into)"
        )


def _offload_config(offload_blocks, keep_text_encoder, keep_vae, text_encoder_layers=None):
    """The OffloadConfig of --offload-blocks / --keep-* / --offload-* / --offload-text-encoder-layers,
    or None when none is given."""
    if offload_blocks is None and keep_text_encoder is None and keep_vae is None and text_encoder_layers is None:
        return None
    from vidax.errors import InputError
    from vidax.parallel.offload import OffloadConfig

    chunk = offload_blocks
    if chunk is not None and chunk != "all":
        if not chunk.isdigit() or int(chunk) < 1:
            raise InputError(f"--offload-blocks must be a positive integer (blocks per chunk) or 'all', got {chunk!r}")
        chunk = int(chunk)
    if text_encoder_layers is not None and text_encoder_layers < 1:
        raise InputError(
            f"--offload-text-encoder-layers must be a positive integer (text encoder layers per chunk), "
            f"got {text_encoder_layers}"
        )
    if text_encoder_layers is not None and keep_text_encoder:
        raise InputError(
            "--offload-text-encoder-layers streams the text encoder's layers, --keep-text-encoder keeps them on "
            "the device: give one of the two"
        )
    return OffloadConfig(
        chunk=chunk, keep_text_encoder=keep_text_encoder, keep_vae=keep_vae, text_encoder_chunk=text_encoder_layers
    )
