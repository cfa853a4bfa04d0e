"""GGUF block dequantization in numpy, operation for operation as diffusers' GGUF loader
(``diffusers/quantizers/gguf/utils.py``, itself city96's ComfyUI-GGUF ``dequant.py``).

Each function takes ``blocks`` ``(n_blocks, type_size)`` uint8 and returns ``(n_blocks,
block_size)`` values in the dtype diffusers' arithmetic gives them: float16 for the formats whose
scales are float16 (every product and difference rounded to float16, as torch computes them),
float32 for ``BF16`` and the ``IQ4`` formats (their code book is float32).
"""

from __future__ import annotations

import numpy as np

QK_K = 256
K_SCALE_SIZE = 12
_U8 = np.uint8


def _split(blocks: np.ndarray, *sizes: int) -> list[np.ndarray]:
    cuts = np.cumsum(sizes)
    return np.split(blocks, cuts, axis=1)


def _f16(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.float16)


def _to_uint32(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.int32)
    return (x[:, 0] | x[:, 1] << 8 | x[:, 2] << 16 | x[:, 3] << 24)[:, None]


def _shifts(values, shape) -> np.ndarray:
    return np.asarray(values, _U8).reshape(shape)


def _scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = scales.shape[0]
    scales = scales.reshape(n, 3, 4)
    d, m, m_d = scales[:, 0:1], scales[:, 1:2], scales[:, 2:3]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.reshape(n, 8), mn.reshape(n, 8)


def q8_0(blocks, block_size):
    d, x = _split(blocks, 2)
    return _f16(d) * np.ascontiguousarray(x).view(np.int8)


def q5_1(blocks, block_size):
    n = blocks.shape[0]
    d, m, qh, qs = _split(blocks, 2, 2, 4)
    d, m = _f16(d), _f16(m)
    qh = _to_uint32(qh).reshape(n, 1) >> np.arange(32, dtype=np.int32).reshape(1, 32)
    ql = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    qh = (qh & 1).astype(_U8)
    ql = (ql & 0x0F).reshape(n, -1)
    return (d * (ql | (qh << 4))) + m


def q5_0(blocks, block_size):
    n = blocks.shape[0]
    d, qh, qs = _split(blocks, 2, 4)
    d = _f16(d)
    qh = _to_uint32(qh).reshape(n, 1) >> np.arange(32, dtype=np.int32).reshape(1, 32)
    ql = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    qh = (qh & 1).astype(_U8)
    ql = (ql & 0x0F).reshape(n, -1)
    return d * ((ql | (qh << 4)).astype(np.int8) - np.int8(16))


def q4_1(blocks, block_size):
    n = blocks.shape[0]
    d, m, qs = _split(blocks, 2, 2)
    d, m = _f16(d), _f16(m)
    qs = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    return (d * (qs & 0x0F).reshape(n, -1)) + m


def q4_0(blocks, block_size):
    n = blocks.shape[0]
    d, qs = _split(blocks, 2)
    d = _f16(d)
    qs = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    return d * ((qs & 0x0F).reshape(n, -1).astype(np.int8) - np.int8(8))


def q6_k(blocks, block_size):
    n = blocks.shape[0]
    ql, qh, scales, d = _split(blocks, QK_K // 2, QK_K // 4, QK_K // 16)
    d = (_f16(d) * np.ascontiguousarray(scales).view(np.int8)).reshape(n, QK_K // 16, 1)
    ql = ql.reshape(n, -1, 1, 64) >> _shifts([0, 4], (1, 1, 2, 1))
    ql = (ql & 0x0F).reshape(n, -1, 32)
    qh = qh.reshape(n, -1, 1, 32) >> _shifts([0, 2, 4, 6], (1, 1, 4, 1))
    qh = (qh & 0x03).reshape(n, -1, 32)
    q = ((ql | (qh << 4)).astype(np.int8) - np.int8(32)).reshape(n, QK_K // 16, -1)
    return (d * q).reshape(n, QK_K)


def q5_k(blocks, block_size):
    n = blocks.shape[0]
    d, dmin, scales, qh, qs = _split(blocks, 2, 2, K_SCALE_SIZE, QK_K // 8)
    sc, m = _scale_min(scales)
    d = (_f16(d) * sc).reshape(n, -1, 1)
    dm = (_f16(dmin) * m).reshape(n, -1, 1)
    ql = qs.reshape(n, -1, 1, 32) >> _shifts([0, 4], (1, 1, 2, 1))
    qh = qh.reshape(n, -1, 1, 32) >> np.arange(8, dtype=_U8).reshape(1, 1, 8, 1)
    ql = (ql & 0x0F).reshape(n, -1, 32)
    qh = (qh & 0x01).reshape(n, -1, 32)
    return (d * (ql | (qh << 4)) - dm).reshape(n, QK_K)


def q4_k(blocks, block_size):
    n = blocks.shape[0]
    d, dmin, scales, qs = _split(blocks, 2, 2, K_SCALE_SIZE)
    sc, m = _scale_min(scales)
    d = (_f16(d) * sc).reshape(n, -1, 1)
    dm = (_f16(dmin) * m).reshape(n, -1, 1)
    qs = qs.reshape(n, -1, 1, 32) >> _shifts([0, 4], (1, 1, 2, 1))
    return (d * (qs & 0x0F).reshape(n, -1, 32) - dm).reshape(n, QK_K)


def q3_k(blocks, block_size):
    n = blocks.shape[0]
    hmask, qs, scales, d = _split(blocks, QK_K // 8, QK_K // 4, 12)
    d = _f16(d)
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


def q2_k(blocks, block_size):
    n = blocks.shape[0]
    scales, qs, d, dmin = _split(blocks, QK_K // 16, QK_K // 4, 2)
    dl = (_f16(d) * (scales & 0xF)).reshape(n, QK_K // 16, 1)
    ml = (_f16(dmin) * (scales >> 4)).reshape(n, QK_K // 16, 1)
    qs = (qs.reshape(n, -1, 1, 32) >> _shifts([0, 2, 4, 6], (1, 1, 4, 1))) & 3
    return (dl * qs.reshape(n, QK_K // 16, 16) - ml).reshape(n, -1)


def bf16(blocks, block_size):
    return (np.ascontiguousarray(blocks).view(np.int16).astype(np.int32) << 16).view(np.float32)


_KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def iq4_nl(blocks, block_size):
    n = blocks.shape[0]
    d, qs = _split(blocks, 2)
    qs = qs.reshape(n, -1, 1, block_size // 2) >> _shifts([0, 4], (1, 1, 2, 1))
    return _f16(d) * _KVALUES[(qs & 15).reshape(n, -1)]


def iq4_xs(blocks, block_size):
    n = blocks.shape[0]
    d, scales_h, scales_l, qs = _split(blocks, 2, 2, QK_K // 64)
    scales_h = np.ascontiguousarray(scales_h).view(np.int16)
    scales_l = scales_l.reshape(n, -1, 1) >> _shifts([0, 4], (1, 1, 2))
    scales_h = scales_h.reshape(n, 1, -1) >> np.array([2 * i for i in range(QK_K // 32)], _U8).reshape(1, -1, 1)
    scales_l = scales_l.reshape(n, -1) & 0x0F
    scales_h = scales_h.reshape(n, -1) & 0x03
    scales = (scales_l | (scales_h << 4)) - 32
    # torch multiplies float16 by int16 in float16 (numpy would promote to float32); the
    # scales (-32..31) are exact in float16.
    dl = (_f16(d) * scales.astype(np.float16)).reshape(n, -1, 1)
    qs = qs.reshape(n, -1, 1, 16) >> _shifts([0, 4], (1, 1, 2, 1))
    qs = _KVALUES[(qs & 15).reshape(n, -1, 32)]
    return (dl * qs).reshape(n, -1)


#: GGML type name -> dequantization (the types diffusers' GGUF loader reads; F32 / F16 are
#: plain arrays).
DEQUANTIZE = {"Q8_0": q8_0, "Q5_1": q5_1, "Q5_0": q5_0, "Q4_1": q4_1, "Q4_0": q4_0, "Q6_K": q6_k,
              "Q5_K": q5_k, "Q4_K": q4_k, "Q3_K": q3_k, "Q2_K": q2_k, "BF16": bf16, "IQ4_NL": iq4_nl,
              "IQ4_XS": iq4_xs}


def dequantize(data: np.ndarray, type_name: str, block_size: int, type_size: int) -> np.ndarray:
    """A GGUF tensor's bytes ``(..., n_bytes)`` uint8 (the ``gguf`` reader's ``data``) ->
    ``(..., n_bytes // type_size * block_size)`` values (float16 or float32, see module doc)."""
    shape = (*data.shape[:-1], data.shape[-1] // type_size * block_size)
    blocks = np.ascontiguousarray(data).view(np.uint8).reshape(-1, type_size)
    return DEQUANTIZE[type_name](blocks, block_size).reshape(shape)
