"""GGUF block dequantization, operation for operation as diffusers' GGUF loader
(``diffusers/quantizers/gguf/utils.py``, itself city96's ComfyUI-GGUF ``dequant.py``), in numpy
on the host (``xp=numpy``, the default) or in ``jax.numpy`` (``xp=jax.numpy``: inside a
jitted matmul, :mod:`vidax.nn.gguf`, the weights kept quantized on the device).

Each function takes ``blocks`` ``(n_blocks, type_size)`` uint8 and returns ``(n_blocks,
block_size)`` values in the dtype diffusers' arithmetic gives them: float16 for the formats whose
scales are float16 (every product and difference rounded to float16, as torch computes them),
float32 for ``BF16`` and the ``IQ4`` formats (their code book is float32). The same operations
in the same dtypes in both: numpy and XLA's CPU both compute a float16 operation in float32 and
round the result once to float16, so the two give the same bits (tested per type on CPU). On a
GPU, XLA may keep a fused float16 product in float32 before the next operation
(``xla_allow_excess_precision``), which can move a weight by its last float16 bit; not measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QK_K = 256
K_SCALE_SIZE = 12
_U8 = np.uint8


def _split(blocks: np.ndarray, *sizes: int) -> list[np.ndarray]:
    cuts = [0, *np.cumsum(sizes).tolist(), blocks.shape[1]]
    return [blocks[:, a:b] for a, b in zip(cuts[:-1], cuts[1:])]


def _view(x: np.ndarray, dtype: Any, xp: Any = np) -> np.ndarray:
    """``x`` ``(n, k)`` reinterpreted as ``dtype`` (little-endian): ``(n, k * x.itemsize //
    dtype.itemsize)``."""
    if xp is np:
        return np.ascontiguousarray(x).view(dtype)
    import jax

    ratio = np.dtype(dtype).itemsize // np.dtype(x.dtype).itemsize
    x = x if ratio == 1 else x.reshape(*x.shape[:-1], x.shape[-1] // ratio, ratio)
    return jax.lax.bitcast_convert_type(x, dtype)


def _f16(x: np.ndarray, xp: Any = np) -> np.ndarray:
    return _view(x, np.float16, xp)


def _to_uint32(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.int32)
    return (x[:, 0] | x[:, 1] << 8 | x[:, 2] << 16 | x[:, 3] << 24)[:, None]


def _shifts(values, shape) -> np.ndarray:
    return np.asarray(values, _U8).reshape(shape)


def _scale_min(scales: np.ndarray, xp: Any = np) -> tuple[np.ndarray, np.ndarray]:
    n = scales.shape[0]
    scales = scales.reshape(n, 3, 4)
    d, m, m_d = scales[:, 0:1], scales[:, 1:2], scales[:, 2:3]
    sc = xp.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = xp.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.reshape(n, 8), mn.reshape(n, 8)


def q8_0(blocks, block_size, xp=np):
    d, x = _split(blocks, 2)
    return _f16(d, xp) * _view(x, np.int8, xp)


def q5_1(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, m, qh, qs = _split(blocks, 2, 2, 4)
    d, m = _f16(d, xp), _f16(m, xp)
    qh = _to_uint32(qh).reshape(n, 1) >> np.arange(32, dtype=np.int32).reshape(1, 32)
    ql = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    qh = (qh & 1).astype(_U8)
    ql = (ql & 0x0F).reshape(n, -1)
    return (d * (ql | (qh << 4))) + m


def q5_0(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, qh, qs = _split(blocks, 2, 4)
    d = _f16(d, xp)
    qh = _to_uint32(qh).reshape(n, 1) >> np.arange(32, dtype=np.int32).reshape(1, 32)
    ql = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    qh = (qh & 1).astype(_U8)
    ql = (ql & 0x0F).reshape(n, -1)
    return d * ((ql | (qh << 4)).astype(np.int8) - np.int8(16))


def q4_1(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, m, qs = _split(blocks, 2, 2)
    d, m = _f16(d, xp), _f16(m, xp)
    qs = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    return (d * (qs & 0x0F).reshape(n, -1)) + m


def q4_0(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, qs = _split(blocks, 2)
    d = _f16(d, xp)
    qs = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    return d * ((qs & 0x0F).reshape(n, -1).astype(np.int8) - np.int8(8))


def q6_k(blocks, block_size, xp=np):
    n = blocks.shape[0]
    ql, qh, scales, d = _split(blocks, QK_K // 2, QK_K // 4, QK_K // 16)
    d = (_f16(d, xp) * _view(scales, np.int8, xp)).reshape(n, QK_K // 16, 1)
    ql = ql.reshape(n, -1, 1, 64) >> _shifts([0, 4], (1, 1, 2, 1))
    ql = (ql & 0x0F).reshape(n, -1, 32)
    qh = qh.reshape(n, -1, 1, 32) >> _shifts([0, 2, 4, 6], (1, 1, 4, 1))
    qh = (qh & 0x03).reshape(n, -1, 32)
    q = ((ql | (qh << 4)).astype(np.int8) - np.int8(32)).reshape(n, QK_K // 16, -1)
    return (d * q).reshape(n, QK_K)


def q5_k(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, dmin, scales, qh, qs = _split(blocks, 2, 2, K_SCALE_SIZE, QK_K // 8)
    sc, m = _scale_min(scales, xp)
    d = (_f16(d, xp) * sc).reshape(n, -1, 1)
    dm = (_f16(dmin, xp) * m).reshape(n, -1, 1)
    ql = qs.reshape(n, -1, 1, 32) >> _shifts([0, 4], (1, 1, 2, 1))
    qh = qh.reshape(n, -1, 1, 32) >> np.arange(8, dtype=_U8).reshape(1, 1, 8, 1)
    ql = (ql & 0x0F).reshape(n, -1, 32)
    qh = (qh & 0x01).reshape(n, -1, 32)
    return (d * (ql | (qh << 4)) - dm).reshape(n, QK_K)


def q4_k(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, dmin, scales, qs = _split(blocks, 2, 2, K_SCALE_SIZE)
    sc, m = _scale_min(scales, xp)
    d = (_f16(d, xp) * sc).reshape(n, -1, 1)
    dm = (_f16(dmin, xp) * m).reshape(n, -1, 1)
    qs = qs.reshape(n, -1, 1, 32) >> _shifts([0, 4], (1, 1, 2, 1))
    return (d * (qs & 0x0F).reshape(n, -1, 32) - dm).reshape(n, QK_K)


def q3_k(blocks, block_size, xp=np):
    n = blocks.shape[0]
    hmask, qs, scales, d = _split(blocks, QK_K // 8, QK_K // 4, 12)
    d = _f16(d, xp)
    lscales, hscales = scales[:, :8], scales[:, 8:]
    lscales = (lscales.reshape(n, 1, 8) >> _shifts([0, 4], (1, 2, 1))).reshape(n, 16)
    hscales = (hscales.reshape(n, 1, 4) >> _shifts([0, 2, 4, 6], (1, 4, 1))).reshape(n, 16)
    scales = ((lscales & 0x0F) | ((hscales & 0x03) << 4)).astype(np.int8) - np.int8(32)
    dl = (d * scales).reshape(n, 16, 1)
    ql = qs.reshape(n, -1, 1, 32) >> _shifts([0, 2, 4, 6], (1, 1, 4, 1))
    qh = hmask.reshape(n, -1, 1, 32) >> np.arange(8, dtype=_U8).reshape(1, 1, 8, 1)
    ql = ql.reshape(n, 16, QK_K // 16) & 3
    qh = (qh.reshape(n, 16, QK_K // 16) & 1) ^ 1
    q = ql.astype(np.int8) - (qh << 2).astype(np.int8)
    return (dl * q).reshape(n, QK_K)


def q2_k(blocks, block_size, xp=np):
    n = blocks.shape[0]
    scales, qs, d, dmin = _split(blocks, QK_K // 16, QK_K // 4, 2)
    dl = (_f16(d, xp) * (scales & 0xF)).reshape(n, QK_K // 16, 1)
    ml = (_f16(dmin, xp) * (scales >> 4)).reshape(n, QK_K // 16, 1)
    qs = (qs.reshape(n, -1, 1, 32) >> _shifts([0, 2, 4, 6], (1, 1, 4, 1))) & 3
    return (dl * qs.reshape(n, QK_K // 16, 16) - ml).reshape(n, -1)


def bf16(blocks, block_size, xp=np):
    return _view(_view(blocks, np.int16, xp).astype(np.int32) << 16, np.float32, xp)


_KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def iq4_nl(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, qs = _split(blocks, 2)
    qs = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    return _f16(d, xp) * xp.asarray(_KVALUES)[(qs & 15).reshape(n, -1)]


def iq4_xs(blocks, block_size, xp=np):
    n = blocks.shape[0]
    d, scales_h, scales_l, qs = _split(blocks, 2, 2, QK_K // 64)
    scales_h = _view(scales_h, np.int16, xp)
    scales_l = scales_l.reshape(n, -1, 1) >> _shifts([0, 4], (1, 1, 2))
    scales_h = scales_h.reshape(n, 1, -1) >> np.array([2 * i for i in range(QK_K // 32)], _U8).reshape(1, -1, 1)
    scales_l = scales_l.reshape(n, -1) & 0x0F
    scales_h = scales_h.reshape(n, -1) & 0x03
    scales = (scales_l | (scales_h << 4)) - 32
    # torch multiplies float16 by int16 in float16 (numpy would promote to float32); the
    # scales (-32..31) are exact in float16.
    dl = (_f16(d, xp) * scales.astype(np.float16)).reshape(n, -1, 1)
    qs = qs.reshape(n, -1, 1, 16) >> _shifts([0, 4], (1, 1, 2, 1))
    qs = xp.asarray(_KVALUES)[(qs & 15).reshape(n, -1, 32)]
    return (dl * qs).reshape(n, -1)


#: GGML type name -> dequantization (the types diffusers' GGUF loader reads; F32 / F16 are
#: plain arrays).
DEQUANTIZE = {
    "Q8_0": q8_0,
    "Q5_1": q5_1,
    "Q5_0": q5_0,
    "Q4_1": q4_1,
    "Q4_0": q4_0,
    "Q6_K": q6_k,
    "Q5_K": q5_k,
    "Q4_K": q4_k,
    "Q3_K": q3_k,
    "Q2_K": q2_k,
    "BF16": bf16,
    "IQ4_NL": iq4_nl,
    "IQ4_XS": iq4_xs,
}


def dequantize(data: np.ndarray, type_name: str, block_size: int, type_size: int) -> np.ndarray:
    """A GGUF tensor's bytes ``(..., n_bytes)`` uint8 (the ``gguf`` reader's ``data``) ->
    ``(..., n_bytes // type_size * block_size)`` values (float16 or float32, see module doc)."""
    shape = (*data.shape[:-1], data.shape[-1] // type_size * block_size)
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, type_size)
    return DEQUANTIZE[type_name](blocks, block_size).reshape(shape)
