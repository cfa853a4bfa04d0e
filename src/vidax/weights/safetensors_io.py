"""Memory-mapped reading (and plain writing) of safetensors files, single or sharded.

The format is a little-endian u64 header length, a JSON header mapping each tensor name to its
``dtype``, ``shape`` and ``data_offsets``, then the raw bytes. Reading maps the file with
``numpy.memmap`` so a tensor's bytes are only paged in when it is used; bf16/fp8 come through
``ml_dtypes``. (The ``safetensors`` package's numpy path has no bf16, which real checkpoints use.)
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from vidax.config import read_json_object
from vidax.errors import CheckpointError
from vidax.io.atomic import publish

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_PARTLY_WRITTEN = "the file is partly written (an interrupted download or copy): fetch it again"


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: file, dtype, shape and byte range inside the file."""

    file: str
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int
    end: int


def _read_header(path: str) -> tuple[dict, int]:
    """(header dict, byte offset where the data starts) of the safetensors file ``path``.

    Raises:
        CheckpointError: the file is missing, shorter than its 8-byte length prefix or than the
            header that prefix announces (a truncated file), or the header is not UTF-8 JSON text
            holding an object (one line naming the file and what is wrong, never a codec error).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{path}: too short to be a safetensors file ({len(raw)} bytes)")
            (n,) = struct.unpack("<Q", raw)
            if n > 100 * 2**20 or n < 2:
                raise CheckpointError(
                    f"{path} is not a safetensors file: its first 8 bytes give a header length of {n} bytes "
                    f"(a safetensors header is a JSON object of 2 bytes to 100 MiB; the file is "
                    f"{os.path.getsize(path)} bytes)"
                )
            text = f.read(n)
        if len(text) < n:
            raise CheckpointError(
                f"{path}: safetensors header is truncated: the file is {8 + len(text)} bytes, but its "
                f"header alone should end at byte {8 + n}; {_PARTLY_WRITTEN}"
            )
        header = json.loads(text.decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file not found: {path}") from None
    except OSError as e:
        raise CheckpointError(f"{path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CheckpointError(
            f"{path} is not a safetensors file (or is damaged): its {n}-byte header is not UTF-8 JSON text "
            f"(byte 0x{e.object[e.start]:02x} at offset {8 + e.start})"
        ) from None
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"{path} is not a safetensors file (or is damaged): its {n}-byte header is not valid JSON "
            f"({e.msg} at offset {8 + e.pos})"
        ) from None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path} is not a safetensors file (or is damaged): its header is a JSON "
            f"{type(header).__name__}, not an object of tensors"
        )
    return header, 8 + n


def _tensor_info(file: str, name: str, meta: object, data_start: int) -> TensorInfo:
    """The :class:`TensorInfo` of header entry ``name``, its byte range checked against its
    dtype and shape (the check that the file itself is long enough is the caller's).

    Raises:
        CheckpointError: the entry lacks ``dtype`` / ``shape`` / ``data_offsets``, has a dtype
            vidax does not read, or a byte range of another size than dtype x shape needs.
    """
    try:
        dtype_name, shape, (a, b) = meta["dtype"], tuple(int(d) for d in meta["shape"]), meta["data_offsets"]
        a, b = int(a), int(b)
    except (TypeError, KeyError, ValueError):
        raise CheckpointError(
            f"{file}: invalid safetensors header entry for tensor {name!r}: {meta!r} (expected dtype, "
            "shape and data_offsets [start, end])"
        ) from None
    if dtype_name not in _DTYPES:
        raise CheckpointError(f"{file}: tensor {name!r} has unsupported dtype {dtype_name}")
    dtype = _DTYPES[dtype_name]
    need = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if a < 0 or b - a != need:
        raise CheckpointError(
            f"{file}: tensor {name!r} of shape {shape} {dtype} needs {need} bytes, but its header "
            f"data_offsets [{a}, {b}] span {b - a}; the header is corrupt"
        )
    return TensorInfo(file, dtype, shape, data_start + a, data_start + b)


def _check_file_size(file: str, data_start: int, data_end: int) -> None:
    """Refuse a file whose size is not what its header says: ``data_start`` (8 + header
    length) plus the largest ``data_offsets`` end, ``data_end``.

    Raises:
        CheckpointError: naming the file, the expected and the actual size in bytes.
    """
    expected, actual = data_start + data_end, os.path.getsize(file)
    if actual < expected:
        raise CheckpointError(
            f"{file} is truncated: it is {actual} bytes, but its safetensors header says {expected} bytes "
            f"({data_start} of header, {data_end} of tensor data); {_PARTLY_WRITTEN}"
        )
    if actual > expected:
        raise CheckpointError(
            f"{file} is {actual} bytes, but its safetensors header says {expected} bytes ({data_start} "
            f"of header, {data_end} of tensor data); {actual - expected} bytes after the last tensor "
            "mean the file is damaged"
        )


def has_safetensors(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds a ``*.safetensors`` file or a ``*.safetensors.index.json``
    (a component with weights, which :class:`CheckpointReader` must then read or refuse); False
    for a folder of configs alone (``scheduler/``, ``tokenizer/``) or a path that is no folder."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return False
    return any(e.endswith((".safetensors", ".safetensors.index.json")) or _is_variant_index(e) for e in entries)


def _is_plain_weights(entry: str) -> bool:
    """``model.safetensors``, ``diffusion_pytorch_model-00001-of-00002.safetensors``, their
    ``*.safetensors.index.json``: a weights file of no variant (no dot in its name's stem)."""
    for suffix in (".safetensors.index.json", ".safetensors"):
        if entry.endswith(suffix):
            return "." not in entry[: -len(suffix)]
    return False


def _is_variant_index(entry: str) -> bool:
    """``diffusion_pytorch_model.safetensors.index.fp16.json``: a variant's index (diffusers and
    transformers put the variant before ``.json``)."""
    stem, dot, last = entry.rpartition(".safetensors.index.")
    return bool(stem and dot and last.endswith(".json") and last.count(".") == 1)


def _variant_weights(entries: list[str], variant: str | None) -> list[str]:
    """The entries of ``variant``'s weights: its index, else its single file (empty: none, or no
    variant asked for)."""
    if not variant:
        return []
    index = [e for e in entries if _is_variant_index(e) and e.endswith(f".safetensors.index.{variant}.json")]
    return index or [e for e in entries if e.endswith(f".{variant}.safetensors") and e.count(".") == 2]


def _index_shards(index_path: str) -> list[str]:
    """The shard files a ``*.safetensors.index.json``'s ``weight_map`` names, each checked to exist."""
    path = os.path.dirname(index_path)
    weight_map = read_json_object(index_path, CheckpointError).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(
            f"{index_path} has no 'weight_map' object (tensor name -> shard file); it is not a safetensors index"
        )
    files = []
    for shard in sorted(set(weight_map.values())):
        full = os.path.join(path, shard)
        if not os.path.isfile(full):
            raise CheckpointError(f"{index_path} names shard {shard}, which is missing")
        files.append(full)
    return files


class TensorIndex:
    """The tensor names and headers of a checkpoint (``self._infos``: name -> :class:`TensorInfo`),
    looked up as the loader does: :class:`CheckpointReader` from safetensors headers,
    :class:`vidax.weights.random_weights.ConfigReader` from a model's abstract shapes."""

    _infos: dict[str, TensorInfo]

    def keys(self) -> list[str]:
        return list(self._infos)

    def info(self, key: str) -> TensorInfo:
        return self._infos[key]

    def __contains__(self, key: str) -> bool:
        return key in self._infos

    def __len__(self) -> int:
        return len(self._infos)


class CheckpointReader(TensorIndex):
    """Tensors of one model component, from a folder or a single ``.safetensors`` file.

    A folder may hold one ``*.safetensors`` file, or several shards with a
    ``*.safetensors.index.json`` whose ``weight_map`` names the shard of each tensor (the diffusers
    and transformers layout). Nothing is read until :meth:`get` is called, and then only that
    tensor's pages.

    ``variant`` (diffusers' ``from_pretrained(..., variant="fp16")``): a folder's
    ``<name>.<variant>.safetensors`` (or its shards and ``<name>.safetensors.index.<variant>.json``)
    are read where it has them; None: its plain files.

    Raises:
        CheckpointError: the folder has no safetensors file, an index names a missing shard, two
            files hold the same tensor, a header is malformed, or a file's size is not the one its
            header gives (a truncated, partly written file is refused when opened, naming the
            file, the expected and the actual size).
    """

    def __init__(self, path: str | os.PathLike, variant: str | None = None):
        path = os.fspath(path)
        self.path = path
        self.variant = variant
        self._infos: dict[str, TensorInfo] = {}
        self._maps: dict[str, np.memmap] = {}
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        for file in self._files(path, variant):
            header, data_start = _read_header(file)
            data_end = 0
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                if name in self._infos:
                    raise CheckpointError(f"tensor {name!r} is in both {self._infos[name].file} and {file}")
                info = self._infos[name] = _tensor_info(file, name, meta, data_start)
                data_end = max(data_end, info.end - data_start)
            _check_file_size(file, data_start, data_end)

    @staticmethod
    def _files(path: str, variant: str | None) -> list[str]:
        if os.path.isfile(path):
            return [path]
        if not os.path.isdir(path):
            raise CheckpointError(f"checkpoint path does not exist: {path}")
        entries = sorted(os.listdir(path))
        # diffusers' and transformers' save_pretrained(variant="fp16") write "<name>.fp16.safetensors"
        # (or ".fp16-00001-of-00002.safetensors" shards with "<name>.safetensors.index.fp16.json")
        # beside the plain files; from_pretrained without variant= reads the plain ones, as here.
        # A folder holding only one variant's weights is read as it is.
        # With variant= (load_pipeline(..., variant="fp16")) that variant's files where the folder has them.
        plain = _variant_weights(entries, variant) or [e for e in entries if _is_plain_weights(e)]
        variant_indexes = [e for e in entries if _is_variant_index(e)]
        chosen = plain or variant_indexes or [e for e in entries if e.endswith(".safetensors")]
        indexes = [e for e in chosen if not e.endswith(".safetensors")]
        if len(indexes) > 1:
            raise CheckpointError(f"{path}: several safetensors index files {indexes}; expected one")
        if indexes:
            return _index_shards(os.path.join(path, indexes[0]))
        files = [os.path.join(path, e) for e in chosen if e.endswith(".safetensors")]
        if not files:
            raise CheckpointError(f"{path}: no *.safetensors file (vidax reads safetensors only; found {entries[:8]})")
        if len(files) > 1:
            raise CheckpointError(
                f"{path}: several safetensors files {[os.path.basename(f) for f in files]} but no "
                "*.safetensors.index.json naming which tensor is where"
            )
        return files

    def get(self, key: str) -> np.ndarray:
        """The tensor as a read-only numpy view of the memory-mapped file (no copy)."""
        info = self._infos[key]
        mm = self._maps.get(info.file)
        if mm is None:
            mm = self._maps[info.file] = np.memmap(info.file, dtype=np.uint8, mode="r")
        return mm[info.start : info.end].view(info.dtype).reshape(info.shape)

    def read_into(self, key: str, out: np.ndarray, rows: tuple[int, int] | None = None) -> None:
        """Fill ``out`` (C-contiguous, the tensor's shape or its size) with tensor ``key``,
        converted to ``out``'s dtype; ``rows``: only rows ``[start, stop)`` of its first axis
        (``out`` then holds those).

        Of the file's dtype, the bytes go from the file (the page cache) straight into ``out``
        with ``preadv`` (no mapping of the file, so nothing of it stays in this process's
        resident memory; the GIL is released, so threads read in parallel); of another dtype,
        the mapped tensor is converted into ``out`` and its pages released.

        Raises:
            CheckpointError: the file got shorter since it was opened.
        """
        info = self._infos[key]
        shape, start, end = info.shape, info.start, info.end
        if rows is not None:
            row = (end - start) // max(shape[0], 1)
            stop = min(rows[1], shape[0])
            shape, start, end = (stop - rows[0], *shape[1:]), start + rows[0] * row, start + stop * row
        if out.dtype != info.dtype or not hasattr(os, "preadv"):
            whole = self.get(key)
            np.copyto(
                out.reshape(shape), whole if rows is None else whole[rows[0] : rows[0] + shape[0]], casting="unsafe"
            )
            if rows is None:
                self.release(key)
            return
        view = memoryview(out.reshape(-1).view(np.uint8))
        fd = self._fd(info.file)
        done, size = 0, end - start
        while done < size:
            n = os.preadv(fd, [view[done:]], start + done)
            if n <= 0:
                raise CheckpointError(
                    f"{info.file}: tensor {key!r} ends at byte {info.end}, but the file ends before; {_PARTLY_WRITTEN}"
                )
            done += n

    def _fd(self, file: str) -> int:
        with self._lock:
            if file not in self._fds:
                self._fds[file] = os.open(file, os.O_RDONLY)
            return self._fds[file]

    def release(self, key: str) -> None:
        """Drop the pages of tensor ``key`` from this process's resident memory once it has been
        copied where it belongs (``madvise(MADV_DONTNEED)`` on its byte range; the data stays in
        the OS page cache and a later :meth:`get` pages it in again). Without this, every tensor
        read stays mapped in and loading counts the whole checkpoint twice in host RSS. No-op
        where the platform has no ``madvise``."""
        info = self._infos[key]
        mm = self._maps.get(info.file)
        raw = getattr(mm, "_mmap", None)  # the mmap.mmap behind numpy.memmap
        if raw is None or not hasattr(mmap, "MADV_DONTNEED") or info.end <= info.start:
            return
        start = info.start - info.start % mmap.PAGESIZE
        try:
            raw.madvise(mmap.MADV_DONTNEED, start, info.end - start)
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        self._maps.clear()
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            os.close(fd)


def save_safetensors(
    tensors: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]],
    path: str | os.PathLike,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write numpy arrays as one safetensors file, atomically (temp file + rename).

    Accepts any dtype in the format, bf16 included. Tensors are written in the order given.
    """
    path = os.fspath(path)
    items = list(tensors.items() if isinstance(tensors, Mapping) else tensors)
    header: dict = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, arr in items:
        arr = np.asarray(arr)
        if arr.dtype not in _NAMES:
            raise ValueError(f"tensor {name!r}: dtype {arr.dtype} cannot be stored in safetensors")
        header[name] = {
            "dtype": _NAMES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".safetensors")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for _, arr in items:
                f.write(np.ascontiguousarray(arr).tobytes())
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
