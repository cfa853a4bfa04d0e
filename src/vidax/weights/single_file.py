"""Quantized checkpoints as the community publishes them: one transformer file, in the
original repository's key layout, either fp8 "scaled" safetensors or GGUF.

* **fp8 scaled safetensors** (ComfyUI / Kijai ``*_fp8_scaled.safetensors``): each float8 weight
  ``X.weight`` has its scale under ``X.scale_weight`` or ``X.weight_scale`` (a scalar or one per
  output row); the weight read is ``value × scale`` in float32. Activation scales
  (``input_scale``, ``scale_input``) are not used and not read. A float8 weight without a
  scale is refused.
* **GGUF** (city96's ``*-Q8_0.gguf``, ``*-Q4_K_M.gguf``...): read with the ``gguf`` package
  (the ``gguf`` extra) and dequantized as diffusers' GGUF loader does
  (:mod:`vidax.nn.gguf_dequant`); F32 / F16 tensors are read as they are.

Both are readers with the interface the loader uses (``keys``, ``info``, ``get``, ``release``):
the tensor names are converted to the diffusers layout by the family's
``single_file_keys(shapes)`` (in its ``convert.py``, after diffusers'
``loaders/single_file_utils.py`` conversion of that family: a rename, a tensor left out, or a
fused tensor cut into :class:`Part` s), and the values are the dequantized float tensors, which
the loader then casts to the component's dtype or quantizes to 8 bits like any checkpoint's; a
GGUF reader also gives its block-quantized tensors' bytes (``raw``), which the loader keeps on
the device for the Linear weights (:mod:`vidax.nn.gguf`).

The layout of a file is told from its keys alone (:func:`detect_layout`, by each family's
``SINGLE_FILE_LAYOUT``), so a file of another family is refused before any weight is read, and
``vidax inspect FILE`` describes one (:func:`describe_single_file`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vidax.errors import Arg, CheckpointError, InputError
from vidax.weights.safetensors_io import _PARTLY_WRITTEN, CheckpointReader

#: Names of a float8 weight's scale, after its ``weight`` leaf (``X.weight`` -> ``X.scale_weight``).
SCALE_NAMES = ("scale_weight", "weight_scale")
#: Leaves of activation scales, in the files and not used.
ACTIVATION_SCALES = ("input_scale", "scale_input", "output_scale")
_FP8 = ("float8_e4m3fn", "float8_e5m2")


@dataclasses.dataclass(frozen=True)
class VirtualInfo:
    """What the loader needs of a tensor: its file, dtype and shape as read (after
    dequantization), and the bytes it takes in the file (``end - start``)."""

    file: str
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int
    end: int
    stored: str = ""


class _Reader(CheckpointReader):
    """Tensors by name, each read by a function (the reader interface of
    :class:`~vidax.weights.safetensors_io.CheckpointReader`, whose ``keys`` / ``info`` it keeps)."""

    def __init__(
        self,
        path: str,
        infos: Mapping[str, VirtualInfo],
        reads: Mapping[str, Callable[[], np.ndarray]],
        raws: Mapping[str, Callable[[], np.ndarray]] | None = None,
    ):
        self.path = path
        self._infos, self._reads, self._maps, self._fds = dict(infos), dict(reads), {}, {}
        self._raws = dict(raws or {})

    def get(self, key: str) -> np.ndarray:
        return self._reads[key]()

    def raw(self, key: str) -> np.ndarray | None:
        """A GGUF block-quantized tensor's bytes as the file lays them out, ``(rows, n_bytes)``
        uint8 (checked finite once dequantized, as :meth:`get`); None for any other tensor."""
        return self._raws[key]() if key in self._raws else None

    def read_into(self, key: str, out: np.ndarray, rows: tuple[int, int] | None = None) -> None:
        whole = self.get(key)
        part = whole if rows is None else whole[rows[0] : rows[1]]
        np.copyto(out.reshape(part.shape), part, casting="unsafe")

    def release(self, key: str) -> None:
        pass

    def renamed(self, names: Mapping[str, Any]) -> _Reader:
        """The same tensors under new names (``names``: old -> new; a name absent keeps its own,
        a name mapped to None is left out, one mapped to a tuple of :class:`Part` gives a tensor
        per part).

        Raises:
            CheckpointError: two tensors of the file converted to one name.
        """
        infos, reads, raws = {}, {}, {}
        for old in self._infos:
            new = names.get(old, old)
            for part in () if new is None else (Part(new),) if isinstance(new, str) else new:
                if part.name in infos:
                    raise CheckpointError(f"{self.path}: two tensors of the file convert to {part.name!r}")
                infos[part.name], reads[part.name] = part.info(self._infos[old]), part.read(self._reads[old])
                if old in self._raws:  # a GGUF tensor's bytes: rows as its values'
                    raws[part.name] = part.read(self._raws[old])
        return _Reader(self.path, infos, reads, raws)


@dataclasses.dataclass(frozen=True)
class Part:
    """A tensor converted from part of one in the file (diffusers' ``chunk`` / ``split`` of fused
    weights): rows ``[start, stop)`` of its first axis (None: from the start / to the end), with
    the two halves of that axis swapped when ``swap`` (diffusers' ``shift, scale`` -> ``scale, shift``).
    """

    name: str
    start: int | None = None
    stop: int | None = None
    swap: bool = False

    def info(self, info: Any) -> VirtualInfo:
        """``info`` (the file's tensor) as this part: its shape, and its share of the bytes."""
        rows = info.shape[0] if info.shape else 1
        n = len(range(rows)[self.start : self.stop])
        shape = (n, *info.shape[1:]) if info.shape else ()
        size = (info.end - info.start) * n // max(rows, 1)
        return VirtualInfo(info.file, info.dtype, shape, info.start, info.start + size, getattr(info, "stored", ""))

    def read(self, read: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
        def part() -> np.ndarray:
            value = read()[self.start : self.stop]
            if self.swap:
                half = value.shape[0] // 2
                value = np.concatenate([value[half:], value[:half]])
            return value

        return part


def fp8_scaled(reader: CheckpointReader) -> _Reader | CheckpointReader:
    """``reader``'s tensors with every float8 weight times its scale (float32), the scales and
    activation scales left out; ``reader`` itself when it holds no float8 tensor.

    Raises:
        CheckpointError: a float8 weight has no ``scale_weight`` / ``weight_scale`` beside it
            (one line naming the tensor and the file), or a scale that does not broadcast.
    """
    keys = reader.keys()
    if not any(reader.info(k).dtype.name in _FP8 for k in keys):
        return reader
    skip = {k for k in keys if k.rsplit(".", 1)[-1] in ACTIVATION_SCALES + SCALE_NAMES}
    infos, reads = {}, {}
    for key in keys:
        if key in skip:
            continue
        info = reader.info(key)
        if info.dtype.name not in _FP8:
            infos[key], reads[key] = info, (lambda k=key: reader.get(k))
            continue
        stem = key[: -len("weight")] if key.endswith("weight") else key + "."
        scale = next((stem + s for s in SCALE_NAMES if stem + s in reader), None)
        if scale is None:
            raise CheckpointError(
                f"{info.file}: float8 tensor {key!r} has no scale ({stem}scale_weight or {stem}weight_scale); "
                "an fp8 file without its scales cannot be dequantized"
            )
        sshape = reader.info(scale).shape
        if int(np.prod(sshape)) not in (1, info.shape[0]):
            raise CheckpointError(
                f"{info.file}: scale {scale!r} of shape {sshape} fits neither the whole "
                f"tensor nor each of the {info.shape[0]} rows of {key!r} {info.shape}"
            )
        infos[key] = dataclasses.replace(_virtual(info), dtype=np.dtype(np.float32), stored=info.dtype.name)
        reads[key] = lambda k=key, s=scale, n=len(info.shape), f=info.file: _finite(
            _times_scale(reader.get(k), reader.get(s), n), k, f
        )
    return _Reader(reader.path, infos, reads)


def _finite(value: np.ndarray, key: str, file: str) -> np.ndarray:
    """``value`` (a dequantized float8 / GGUF tensor), refused when it holds NaN or Inf: they
    would surface as a NaN video (a float8 value overflowed on export, a broken scale).

    Raises:
        CheckpointError: one line naming the tensor and the file.
    """
    if not np.all(np.isfinite(value)):
        bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
        raise CheckpointError(
            f"{file}: tensor {key!r} holds {bad} NaN or Inf value(s) once dequantized; "
            "the file is broken (re-export it)"
        )
    return value


def _virtual(info: Any) -> VirtualInfo:
    return VirtualInfo(info.file, info.dtype, tuple(info.shape), info.start, info.end)


def _times_scale(value: np.ndarray, scale: np.ndarray, ndim: int) -> np.ndarray:
    scale = np.asarray(scale, np.float32).reshape(-1)
    scale = scale.reshape((-1,) + (1,) * (ndim - 1)) if scale.size > 1 else scale.reshape(())
    return np.asarray(value, np.float32) * scale


def gguf_reader(path: str) -> _Reader:
    """The tensors of a GGUF file, dequantized on read as diffusers' GGUF loader does
    (``get``), and the block-quantized ones also as their bytes (``raw``: what the loader keeps
    on the device for a Linear, :mod:`vidax.nn.gguf`).

    Raises:
        InputError: the ``gguf`` package is not installed (``pip install 'vidax[gguf]'``).
        CheckpointError: the file is not GGUF, or a tensor is in a type diffusers does not read.
    """
    try:
        import gguf
    except ImportError:
        raise InputError(
            f"{path} is a GGUF file; reading it needs the gguf package: pip install 'vidax[gguf]'"
        ) from None
    from vidax.nn.gguf_dequant import DEQUANTIZE, dequantize

    try:
        file = gguf.GGUFReader(path)
    except (ValueError, OSError) as e:
        raise CheckpointError(_gguf_truncated(path, gguf) or f"{path} is not a readable GGUF file: {e}") from None
    infos, reads, raws = {}, {}, {}
    for t in file.tensors:
        kind = t.tensor_type.name
        data = t.data
        if kind in ("F32", "F16"):
            infos[t.name] = VirtualInfo(
                path,
                np.dtype(data.dtype),
                tuple(data.shape),
                int(t.data_offset),
                int(t.data_offset) + int(t.n_bytes),
                kind,
            )
            reads[t.name] = lambda d=data: np.asarray(d)
            continue
        if kind not in DEQUANTIZE:
            raise CheckpointError(
                f"{path}: tensor {t.name!r} is {kind}; vidax reads the GGUF types diffusers "
                f"reads: F32, F16, {', '.join(DEQUANTIZE)}"
            )
        block, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
        shape = (*data.shape[:-1], data.shape[-1] // size * block)
        dtype = np.float32 if kind in ("BF16", "IQ4_NL", "IQ4_XS") else np.float16
        infos[t.name] = VirtualInfo(
            path, np.dtype(dtype), shape, int(t.data_offset), int(t.data_offset) + int(t.n_bytes), kind
        )
        reads[t.name] = lambda d=data, k=kind, b=block, s=size, n=t.name: _finite(dequantize(d, k, b, s), n, path)
        raws[t.name] = lambda d=data, r=reads[t.name]: _raw_bytes(d, r)
    return _Reader(path, infos, reads, raws)


def _gguf_truncated(path: str, gguf: Any) -> str | None:
    """Why the GGUF file ``path`` could not be read when it is shorter than its tensor table
    says (a truncated, partly written file): the first tensor that ends beyond the file, with
    the bytes expected and the file's size; None when the table itself cannot be read or every
    tensor fits."""

    class _Table(gguf.GGUFReader):  # the header and tensor table only: no tensor is mapped
        def _build_tensors(self, start_offs: int, fields: list) -> None:
            self.table = (start_offs, fields)
            self.tensors = []

    try:
        start, fields = _Table(path).table
        size = os.path.getsize(path)
        for field in fields:
            _, name, _, dims, kind, offset = field.parts
            block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(kind[0]))]
            begin = start + int(offset[0])
            end = begin + int(np.prod(dims)) * type_size // block
            if end > size:
                return (
                    f"{path} is truncated: it is {size:,} bytes, but its tensor table puts tensor "
                    f"{bytes(name).decode('utf-8', 'replace')!r} at bytes {begin:,} to {end:,} "
                    f"({end - begin:,} bytes); {_PARTLY_WRITTEN}"
                )
    except Exception:  # a table the gguf package cannot read either: its own message says why
        return None
    return None


def _raw_bytes(data: np.ndarray, read: Callable[[], np.ndarray]) -> np.ndarray:
    """A GGUF tensor's bytes ``(rows, n_bytes)`` uint8, once ``read()`` (its dequantization,
    which refuses NaN / Inf) has passed."""
    read()
    return np.ascontiguousarray(data).view(np.uint8).reshape(*data.shape[:-1], -1)


def open_single_file(path: str | os.PathLike, spec: Any, arg: str = "transformer") -> Any:
    """A reader of a single-file checkpoint of component ``spec`` (a
    :class:`~vidax.registry.ComponentSpec`): ``.gguf`` or ``.safetensors`` (fp8 scaled or not), its
    keys converted from the original layout by the family's ``single_file_keys``. Only the file's
    header is read here.

    Raises:
        InputError: as :func:`check_single_file`, a family without a single-file layout, or a
            file in another layout than the family's (one line naming ``arg``, the layout found
            and the one expected; for diffusers' own layout, the class and where it belongs).
        CheckpointError: as :func:`fp8_scaled` / :func:`gguf_reader`.
    """
    path = check_single_file(path, arg)
    module = _convert_module(spec)
    if module is None:
        raise InputError(
            Arg(arg, path),
            f": vidax reads single-file checkpoints of {', '.join(single_file_classes())}, not of {spec.class_name}",
        )
    try:
        raw = _file_reader(path)
    except CheckpointError as e:  # the reader names the file: the error names the argument that gave it
        text = str(e)
        said = text[len(path) :] if text.startswith(path) else f": {text}"  # "PATH is not ..." -> " is not ..."
        raise CheckpointError(Arg(arg, path), said) from None
    found, want = detect_layout(raw.keys()), module.SINGLE_FILE_LAYOUT[0]
    if found != want:
        diffusers = None if found else diffusers_class(raw.keys())
        if diffusers:
            raise InputError(
                Arg(arg, path),
                f" holds a transformer in diffusers' layout ({diffusers}), not an "
                f"original repository's layout: {DIFFUSERS_ADVICE}",
            )
        if not found and any(t in k for k in raw.keys() for t in _LORA_KEY_MARKS):
            raise InputError(
                Arg(arg, path),
                " holds a LoRA (its keys name lora_A / lora_B / lora_down / "
                "lora_up), not a transformer: give it with --lora (Python: pipe.load_lora_weights)",
            )
        held = f"a {found} transformer (original layout)" if found else "no transformer layout vidax reads"
        raise InputError(
            Arg(arg, path),
            f" holds {held}; this folder's transformer ({spec.class_name}) takes a file in the original {want} layout",
        )
    reader = fp8_scaled(raw)
    if not isinstance(reader, _Reader):
        reader = _Reader(
            path,
            {k: reader.info(k) for k in reader.keys()},
            {k: (lambda k=k, r=reader: r.get(k)) for k in reader.keys()},
        )
    return reader.renamed(module.single_file_keys({k: tuple(reader.info(k).shape) for k in reader.keys()}))


#: Key fragments of LoRA files (peft / diffusers ``lora_A`` / ``lora_B``, kohya ``lora_down`` / ``lora_up``).
_LORA_KEY_MARKS = (".lora_A.", ".lora_B.", ".lora_down.", ".lora_up.")


def check_single_file(path: Any, arg: str = "transformer") -> str:
    """``path`` (``~`` expanded) when it names an existing ``.gguf`` / ``.safetensors`` file
    (the suffix in any case); reads nothing.

    Raises:
        InputError: not a ``str`` / ``os.PathLike``, a folder, another suffix or no such file
            (one line naming ``arg`` and the value given).
    """
    if type(path).__module__.startswith(("torch", "diffusers")):  # a loaded diffusers model: its repr spans lines
        raise InputError(
            f"{arg}= is a {type(path).__name__} object: vidax reads weights from files, not torch modules; give "
            "its folder (model.save_pretrained(folder), or the one it was loaded from) or one .gguf / .safetensors file"
        )
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise InputError(
            Arg(arg, path),
            f" is not a path ({type(path).__name__}); give one .gguf or .safetensors file's path (str or os.PathLike)",
        )
    given = os.fspath(path)
    file = os.path.expanduser(given)
    if os.path.isdir(file):
        raise InputError(
            Arg(arg, given),
            " is a folder without a config.json; give one .gguf or .safetensors file, or a transformer "
            "folder in diffusers' layout (config.json and its safetensors)",
        )
    if not file.lower().endswith((".gguf", ".safetensors")):
        raise InputError(Arg(arg, given), " is not a .gguf or .safetensors file (a single-file transformer checkpoint)")
    if not os.path.isfile(file):
        raise InputError(Arg(arg, given), ": no such file")
    return file


def is_gguf(path: str) -> bool:
    """Whether ``path`` names a GGUF file (its suffix, in any case)."""
    return path.lower().endswith(".gguf")


def _file_reader(path: str) -> Any:
    """The tensors of a ``.gguf`` (dequantized on read) or ``.safetensors`` file as stored."""
    return gguf_reader(path) if is_gguf(path) else CheckpointReader(path)


def _convert_module(spec: Any) -> Any:
    """The family's ``convert.py`` for a transformer entry that reads single files, else None."""
    if spec.kind != "transformer" or not spec.fp32_params:
        return None
    module = importlib.import_module(spec.fp32_params.split(":")[0])
    return module if hasattr(module, "single_file_keys") else None


def single_file_keys(spec: Any) -> Callable[[Any], dict[str, Any]] | None:
    """The family's ``single_file_keys`` (its ``convert.py``) for a transformer entry, else None."""
    module = _convert_module(spec)
    return None if module is None else module.single_file_keys


def single_file_layouts() -> dict[str, tuple[tuple[str, ...], list[str]]]:
    """Layout name -> (the keys that tell it, the transformer classes that read it), for every
    family with a single-file layout (its ``convert.py``'s ``SINGLE_FILE_LAYOUT``)."""
    from vidax.registry import registry

    out: dict[str, tuple[tuple[str, ...], list[str]]] = {}
    for spec in registry().components():
        module = _convert_module(spec)
        if module is not None:
            name, markers = module.SINGLE_FILE_LAYOUT
            out.setdefault(name, (tuple(markers), []))[1].append(spec.class_name)
    return out


#: Prefixes the original repositories put before the transformer's keys.
_PREFIXES = ("model.diffusion_model.", "net.")


def detect_layout(keys: Any) -> str | None:
    """The original layout ``keys`` (a file's tensor names) are in: of the layouts whose telling
    keys are all there (prefixes of :data:`_PREFIXES` stripped), the one with the most; None when
    there is none."""
    names = {next((k[len(p) :] for p in _PREFIXES if k.startswith(p)), k) for k in keys}
    found = [(len(m), name) for name, (m, _) in single_file_layouts().items() if set(m) <= names]
    return max(found)[1] if found else None


def single_file_classes() -> list[str]:
    """Class names of the transformers whose single-file layout vidax converts."""
    return sorted(c for _, classes in single_file_layouts().values() for c in classes)


#: What to do with a transformer saved in diffusers' own layout (its state dict in one file).
DIFFUSERS_ADVICE = "put it in a checkpoint's transformer/ folder with its config.json"


def diffusers_class(keys: Any) -> str | None:
    """The diffusers transformer class (``"WanTransformer3DModel"``) whose modules most of
    ``keys`` (a file's tensor names, diffusers' own layout: ``transformer_blocks.0.attn1.to_q.weight``)
    name, by the LoRA targets' matching (:func:`vidax.lora.targets.best_transformer`); None when fewer
    than half of the ``.weight`` keys name one of its modules. Builds each family's default
    model abstractly (no weights)."""
    from vidax.lora.targets import best_transformer

    modules = {k[: -len(".weight")]: None for k in keys if k.endswith(".weight")}
    if not modules or any("lora" in k.lower() for k in keys):  # a LoRA file: its own description
        return None
    spec, placed = best_transformer(modules)
    return spec.class_name if spec is not None and 2 * placed >= len(modules) else None


def describe_single_file(path: str) -> str | None:
    """What a single-file transformer is (``vidax inspect FILE``): its format, its tensors by
    type, their bytes, the layout detected and the transformer classes that read it; None for a
    ``.safetensors`` file in no transformer layout (a LoRA file, say); one line for a
    transformer in diffusers' own layout (:func:`diffusers_class`). Only the header is read.

    Raises:
        InputError: a ``.gguf`` file without the gguf package installed.
        CheckpointError: a file that cannot be read as its extension says.
    """
    reader = _file_reader(path)
    keys = reader.keys()
    layout = detect_layout(keys)
    if layout is None:
        diffusers = diffusers_class(keys)
        if diffusers:
            return f"{path}: a transformer in diffusers' layout ({diffusers}): {DIFFUSERS_ADVICE}"
        if not is_gguf(path):
            return None
    infos = [reader.info(k) for k in keys]
    types: dict[str, int] = {}
    for info in infos:
        kind = getattr(info, "stored", "") or info.dtype.name
        types[kind] = types.get(kind, 0) + 1
    fp8 = any(t in _FP8 for t in types)
    fmt = (
        "GGUF (Linear weights kept as blocks on the device, dequantized in each matmul as diffusers' GGUFLinear does)"
        if is_gguf(path)
        else "safetensors, fp8 scaled (float8 weights times their scales)"
        if fp8
        else "safetensors"
    )
    nbytes = sum(i.end - i.start for i in infos)
    classes = single_file_layouts()[layout][1] if layout else []
    from vidax.nn.gguf import padded_stack_bytes

    padded = padded_stack_bytes(reader) if is_gguf(path) else {}
    extra = sum(padded[k] - (reader.info(k).end - reader.info(k).start) for k in padded)
    mixed = (
        [
            f"  mixed-type stacks: {len(padded)} tensors in layer stacks whose layers mix types, kept padded to the "
            f"widest type's bytes: +{extra / 2**20:,.1f} MiB ({extra:,} B) on the device over the file"
        ]
        if padded
        else []
    )
    return "\n".join(
        [
            f"single-file transformer {path}",
            f"  format: {fmt}",
            "  layout: "
            + (
                f"{layout} (original repository's keys), read by {', '.join(classes)} "
                "(load_pipeline(folder, transformer=FILE) / --transformer FILE)"
                if layout
                else "none vidax reads (" + ", ".join(single_file_layouts()) + " are)"
            ),
            f"  tensors: {len(infos)} ("
            + ", ".join(f"{k} {n}" for k, n in sorted(types.items(), key=lambda x: -x[1]))
            + ")",
            f"  bytes: {nbytes / 2**20:,.1f} MiB of tensors ({nbytes:,} B; file {os.path.getsize(path):,} B)",
            *mixed,
        ]
    )


def rename_keys(keys: Any, renames: Mapping[str, str], strip: str = "model.diffusion_model.") -> dict[str, str]:
    """``key -> converted key``: ``strip`` removed, then each ``renames`` substring replaced in
    order (diffusers' ``TRANSFORMER_KEYS_RENAME_DICT`` convention)."""
    return {key: renamed(key.replace(strip, ""), renames) for key in keys}


def renamed(key: str, renames: Mapping[str, str]) -> str:
    """``key`` with each ``renames`` substring replaced, in order."""
    for a, b in renames.items():
        key = key.replace(a, b)
    return key
