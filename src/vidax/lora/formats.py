"""LoRA files in the layouts users have, read into one form: per denoising transformer, per module.

Layouts (detected from the keys; one file holds one layout):

* ``diffusers`` / PEFT: ``transformer.<module>.lora_A.weight`` (r, in), ``.lora_B.weight`` (out, r),
  optional ``.lora_B.bias`` (a bias delta), optional ``.alpha``; the ``transformer.`` prefix may
  be absent (a ``transformer_2.`` prefix is Wan2.2's second expert). PEFT's own saves
  (``base_model.model.``) are this layout. diffusers' ``lora_adapter_metadata`` (``lora_alpha``,
  ``r``, ``alpha_pattern``) scales the module as PEFT does: ``lora_alpha / rank``.
* ``kohya`` (kohya-ss, musubi-tuner): ``lora_unet_<module with _ for .>.lora_down.weight``,
  ``.lora_up.weight``, ``.alpha``; the module name is matched against the model's own names (in
  the diffusers naming or the original repository's).
* ``original`` (the original repository, ComfyUI, LightX2V): ``diffusion_model.<module>`` with
  ``lora_A``/``lora_B`` or ``lora_down``/``lora_up``, ``.alpha``, and full deltas ``.diff`` (of
  the module's weight, or of the parameter itself) and ``.diff_b`` (of its bias); LightX2V's
  ``blocks.N.diff_m`` is the delta of the block's modulation table (``blocks.N.modulation``,
  diffusers' ``scale_shift_table``), added to it (diffusers 0.42.1 drops it; logged at INFO).

Every module's low-rank delta is ``scale * up @ down`` with ``scale = alpha / rank`` where the file
gives an ``alpha`` (kohya's convention, also diffusers' conversions), else 1. diffusers folds the
same factor into the two matrices (powers of two apart); the product is the same up to rounding.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from vidax.errors import CheckpointError, InputError

logger = logging.getLogger("vidax.lora")

#: Key suffixes -> what the tensor is.
_SUFFIXES = (
    (".lora_A.weight", "down"),
    (".lora_B.weight", "up"),
    (".lora_down.weight", "down"),
    (".lora_up.weight", "up"),
    (".lora_B.bias", "diff_b"),
    (".diff_b", "diff_b"),
    (".diff", "diff"),
    (".alpha", "alpha"),
    (".diff_m", "diff_m"),
)
#: The module a LightX2V ``blocks.N.diff_m`` (a delta of the block's modulation table) lands on,
#: named as the original repository names it (``scale_shift_table`` in diffusers' Wan).
_DIFF_M_MODULE = "modulation"
#: Key prefixes -> (layout, expert index). Checked in order.
_PREFIXES = (
    ("transformer_2.", "diffusers", 1),
    ("transformer.", "diffusers", 0),
    ("base_model.model.", "diffusers", 0),
    ("model.diffusion_model.", "original", 0),
    ("diffusion_model.", "original", 0),
    ("lora_unet_", "kohya", 0),
)
_MAX_LISTED = 5


@dataclasses.dataclass
class LoraModule:
    """The tensors a LoRA file gives one module (torch layout, float32 numpy).

    Attributes:
        down: (r, in) or None. up: (out, r) or None. alpha: kohya's alpha or None.
        diff: a full delta of the module's weight (or of the parameter itself), torch layout.
        diff_b: a delta of the module's bias. peft_scale: diffusers metadata's ``lora_alpha / r``
            (1 without metadata), applied to the low-rank delta and to ``diff_b`` as PEFT does.
        keys: the file's keys of this module (for error messages).
    """

    down: np.ndarray | None = None
    up: np.ndarray | None = None
    alpha: float | None = None
    diff: np.ndarray | None = None
    diff_b: np.ndarray | None = None
    peft_scale: float = 1.0
    keys: list = dataclasses.field(default_factory=list)

    @property
    def rank(self) -> int | None:
        return None if self.down is None else int(self.down.shape[0])

    @property
    def scale(self) -> float:
        """The low-rank delta's factor: ``alpha / rank`` (kohya), times :attr:`peft_scale`."""
        s = 1.0 if self.alpha is None or self.rank is None else self.alpha / self.rank
        return s * self.peft_scale


@dataclasses.dataclass
class LoraFile:
    """A LoRA file read into modules.

    Attributes:
        source: the file (or ``"a state dict"``). layout: ``"diffusers"``, ``"kohya"``,
        ``"original"``. experts: expert index (0 ``transformer``, 1 ``transformer_2``) ->
        module name as written (prefix and suffix removed) -> :class:`LoraModule`.
        num_keys: tensors in the file.
    """

    source: str
    layout: str
    experts: dict[int, dict[str, LoraModule]]
    num_keys: int

    @property
    def ranks(self) -> list[int]:
        return sorted({m.rank for e in self.experts.values() for m in e.values() if m.rank is not None})

    def kinds(self) -> list[str]:
        """Which tensors it carries: ``lora`` (down/up pairs), ``diff``, ``diff_b``."""
        out = set()
        for e in self.experts.values():
            for m in e.values():
                out |= {k for k, v in (("lora", m.down), ("diff", m.diff), ("diff_b", m.diff_b)) if v is not None}
        return sorted(out)


def read_state_dict(source: Any, what: str) -> tuple[dict[str, np.ndarray], dict, str]:
    """``(tensors as float32 numpy, safetensors metadata, source name)`` of a ``.safetensors``
    file, a folder holding one, or a dict of arrays (numpy, JAX or torch tensors).

    Raises:
        InputError: not found, not safetensors, truncated or damaged (one line naming ``what``).
    """
    from vidax.weights.safetensors_io import CheckpointReader

    if isinstance(source, Mapping):
        return {str(k): _float32(v) for k, v in source.items()}, {}, "a state dict"
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"{what}: expected a .safetensors path or a dict of tensors, got {type(source).__name__}")
    path = os.fspath(source)
    if not os.path.exists(path):
        raise InputError(f"{what}: no such file")
    try:
        reader = CheckpointReader(path)
        out = {k: _float32(reader.get(k)) for k in reader.keys()}
    except CheckpointError as e:
        raise InputError(f"{what}: not a readable LoRA file ({' '.join(str(e).split())})") from None
    return out, _metadata(reader), path


def _metadata(reader) -> dict:
    from vidax.weights.safetensors_io import _read_header

    files = reader._files(reader.path, reader.variant)
    header, _ = _read_header(files[0])
    meta = header.get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


def _float32(v: Any) -> np.ndarray:
    if hasattr(v, "detach"):  # a torch tensor
        v = v.detach().float().cpu().numpy()
    arr = np.asarray(v)
    if arr.dtype.kind not in "fc" and arr.dtype.name != "bfloat16":
        return arr.astype(np.float32)
    return np.asarray(arr, dtype=np.float32)


def parse(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str], source: str, what: str) -> LoraFile:
    """Split a LoRA state dict into experts and modules (see the module docstring).

    Raises:
        InputError: a key of no known layout, two layouts in one file, a DoRA or LoKr file, a
            module with only one of its two factors, factors whose ranks differ, a non-scalar alpha.
    """
    layouts, stray, diff_m = set(), [], []
    experts: dict[int, dict[str, LoraModule]] = {}
    for key in tensors:
        layout, expert, rest = "diffusers", 0, key
        for prefix, lay, exp in _PREFIXES:
            if key.startswith(prefix):
                layout, expert, rest = lay, exp, key[len(prefix) :]
                break
        if layout == "kohya":
            module, dot, suffix = rest.partition(".")
            kind = dict((s[1:], k) for s, k in _SUFFIXES).get(suffix) if dot else None
        else:
            kind = next((k for s, k in _SUFFIXES if rest.endswith(s)), None)
            module = rest[: -len(next(s for s, k in _SUFFIXES if k == kind and rest.endswith(s)))] if kind else rest
        if kind is None:
            stray.append(key)
            continue
        if layout == "diffusers" and any(
            key.endswith(s) for s in (".lora_down.weight", ".lora_up.weight", ".diff", ".diff_b", ".diff_m")
        ):
            layout = "original"  # ComfyUI writes the original names with no prefix at times
        layouts.add(layout)
        if kind == "diff_m":  # the block's modulation table's delta: a diff of that parameter
            module, kind = f"{module}.{_DIFF_M_MODULE}", "diff"
            diff_m.append(key)
        m = experts.setdefault(expert, {}).setdefault(module, LoraModule())
        if kind == "diff" and m.diff is not None:
            raise InputError(f"{what}: {key} and {m.keys[0]} both give the delta of {module}; a LoRA gives it once")
        m.keys.append(key)
        value = tensors[key]
        if not np.all(np.isfinite(value)):  # it would merge into the weights and surface as NaN latents
            raise InputError(f"{what}: {key} holds NaN or Inf values; a LoRA's tensors must be finite")
        if kind == "alpha":
            if value.size != 1:
                raise InputError(f"{what}: {key} has shape {value.shape}; an alpha is one number")
            m.alpha = float(value.reshape(()))
        else:
            setattr(m, kind, value)
    if stray:
        if any("dora_scale" in k for k in stray):
            raise InputError(
                f"{what}: a DoRA file (dora_scale keys, e.g. {stray[0]}); vidax merges plain LoRA "
                "only (diffusers drops the DoRA magnitudes, which changes what the file does)"
            )
        raise InputError(
            f"{what}: {len(stray)} key(s) of no LoRA layout vidax knows (lora_A/lora_B, "
            f"lora_down/lora_up, alpha, diff, diff_b, diff_m): {_listed(stray)}"
        )
    if not experts:
        raise InputError(f"{what}: holds no tensor")
    if "kohya" in layouts and len(layouts) > 1:
        raise InputError(f"{what}: mixes kohya keys (lora_unet_...) with other layouts; a LoRA file holds one")
    layout = "kohya" if "kohya" in layouts else "original" if "original" in layouts else "diffusers"
    if diff_m:
        logger.info(
            "%s: %d diff_m key(s) (%s) add their deltas to the blocks' modulation tables "
            "(scale_shift_table), as LightX2V means them; diffusers 0.42.1 drops them",
            what,
            len(diff_m),
            _listed(diff_m),
        )
    scales = _peft_scales(metadata, what)
    for modules in experts.values():
        for name, m in modules.items():
            _check_module(name, m, what)
            if scales is not None and m.rank is not None:
                alpha = scales["patterns"].get(name, scales["alpha"])
                m.peft_scale = float(alpha) / m.rank if alpha is not None else 1.0
    return LoraFile(source, layout, experts, len(tensors))


def _check_module(name: str, m: LoraModule, what: str) -> None:
    if (m.down is None) != (m.up is None):
        have = "lora_A/lora_down" if m.down is not None else "lora_B/lora_up"
        raise InputError(f"{what}: {name} has {have} but not its other factor ({m.keys[0]})")
    if m.down is not None:
        if m.down.ndim != 2 or m.up.ndim != 2:
            raise InputError(
                f"{what}: {name}: factors of shapes {m.down.shape} and {m.up.shape}; vidax merges "
                "LoRA factors of linear layers (2-D)"
            )
        if m.up.shape[1] != m.down.shape[0]:
            raise InputError(
                f"{what}: {name}: rank mismatch, down/lora_A {m.down.shape} has rank {m.down.shape[0]} "
                f"but up/lora_B {m.up.shape} has rank {m.up.shape[1]}"
            )
    if m.alpha is not None and m.down is None:
        raise InputError(f"{what}: {name} has an alpha but no lora_A/lora_B factors")


def _peft_scales(metadata: Mapping[str, str], what: str) -> dict | None:
    """``lora_alpha`` and ``alpha_pattern`` of diffusers' ``lora_adapter_metadata`` (its keys
    prefixed ``transformer.``), or None.

    Raises:
        InputError: the metadata is not a JSON object (its alpha would be unknown: merging at
            scale 1 would change what the file does).
    """
    raw = metadata.get("lora_adapter_metadata")
    if not raw:
        return None
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise InputError(
            f"{what}: its lora_adapter_metadata is not a JSON object ({raw[:60]!r}), so its lora_alpha "
            "(the scale of the merge) cannot be read"
        )
    meta = {k.removeprefix("transformer."): v for k, v in meta.items()}
    return {"alpha": meta.get("lora_alpha"), "patterns": dict(meta.get("alpha_pattern") or {})}


def _listed(items: list) -> str:
    more = f" ... and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return ", ".join(items[:_MAX_LISTED]) + more
