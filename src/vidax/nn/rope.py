"""Rotary position embedding (RoPE): frequency tables and the rotation, in both pair layouts.

Tables are *half* tables: ``cos`` and ``sin`` of shape ``(..., K // 2)``, one angle per rotated
pair of the head dim K. Both layouts use the same tables; they differ in which channels form a
pair (read the math, not the helper's name):

``"interleaved"``
    pairs ``(x[2i], x[2i+1])``: diffusers ``apply_rotary_emb(use_real=True,
    use_real_unbind_dim=-1)`` with ``get_1d_rotary_pos_embed(use_real=True,
    repeat_interleave_real=True)`` tables (Wan, CogVideoX, HunyuanVideo video tokens, Flux).
``"rotate_half"``
    pairs ``(x[i], x[i + K/2])``: transformers ``apply_rotary_pos_emb`` / ``rotate_half`` with
    ``cos = cat(freqs, freqs)`` (Llama, Qwen2, Gemma), and diffusers ``apply_rotary_emb(
    use_real_unbind_dim=-2)`` (Cosmos, CogView4).

Angles are ``position · theta ** (-2i / d)`` for pair i of an axis of d channels
(:func:`rope_inv_freq`). Multi-axis tables (:func:`rope_tables`) give each position axis (e.g.
frame, row, column) its own share of the pairs and its own theta and concatenate the axes'
pairs in order, as HunyuanVideo's ``HunyuanVideoRotaryPosEmbed``; :class:`TextRope` is the 1-D
RoPE of transformers' text models read from their ``config.json``. The tables are float32; the
rotation is computed in float32 and cast back to the input dtype.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.errors import ConfigError, InputError

LAYOUTS = ("interleaved", "rotate_half")
_F32 = jnp.float32


def rope_inv_freq(dim: int, theta: float = 10000.0) -> np.ndarray:
    """Inverse frequencies ``1 / theta ** (arange(0, dim, 2) / dim)`` of one axis.

    The reference (``get_1d_rotary_pos_embed`` with float32 ``freqs_dtype``, transformers'
    ``_compute_default_rope_parameters``) computes this in float32 with torch's float32 ``pow``,
    which is within one float32 ulp of the correctly rounded value computed here (exponent in
    float32 as torch, power in float64, rounded once).

    Args:
        dim: channels of the axis (even, > 0); ``dim // 2`` pairs.
        theta: RoPE base (> 0).

    Returns:
        ``(dim // 2,)`` float32 numpy.

    Raises:
        InputError: odd or non-positive ``dim``, non-positive ``theta``.
    """
    if not isinstance(dim, (int, np.integer)) or dim < 2 or dim % 2:
        raise InputError(f"rope_inv_freq: dim={dim!r} must be a positive even int (channels per axis).")
    if not theta > 0:
        raise InputError(f"rope_inv_freq: theta={theta!r} must be > 0.")
    exponent = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    power = (np.float64(theta) ** exponent.astype(np.float64)).astype(np.float32)
    return np.float32(1.0) / power


def grid_position_ids(grid: Sequence[int]) -> np.ndarray:
    """Integer positions of a token grid, first axis slowest (the patch-embedding flatten order).

    Args:
        grid: sizes ``(n_0, n_1, ...)``, e.g. ``(t, h, w)`` patches.

    Returns:
        ``(n_0·n_1·..., len(grid))`` int32 numpy: row ``r`` holds the coordinates of token ``r``
        (``torch.meshgrid(..., indexing="ij")`` flattened, as HunyuanVideo).
    """
    axes = [np.arange(n, dtype=np.int32) for n in grid]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(grid))


def rope_tables(
    position_ids,
    axes_dims: Sequence[int],
    theta: float | Sequence[float] = 10000.0,
    *,
    freqs_dtype: str = "float32",
) -> tuple[jax.Array, jax.Array]:
    """cos and sin of a multi-axis RoPE: axis ``a`` rotates ``axes_dims[a] // 2`` pairs by
    ``position_ids[..., a] · rope_inv_freq(axes_dims[a], theta[a])``; the axes' pairs are
    concatenated in order.

    As diffusers' ``get_1d_rotary_pos_embed(dim, pos, theta, use_real=True)`` per axis and the
    ``torch.cat`` over axes of ``HunyuanVideoRotaryPosEmbed`` (which returns the same angles
    repeated per pair: ``cos_ref[..., 2i] == cos_ref[..., 2i+1] == cos[..., i]``). One axis
    (``axes_dims=(K,)``, ``position_ids[..., None]``) is the 1-D RoPE of a text model.

    Args:
        position_ids: ``(..., A)`` int or float positions (``A = len(axes_dims)``), e.g. from
            :func:`grid_position_ids` or ``(B, L, 1)`` token indices; fractional positions are
            allowed.
        axes_dims: channels of each axis, each even; their sum is the rotated head dim K.
        theta: one base for all axes or one per axis.
        freqs_dtype: ``"float32"`` (the reference's default: frequencies, angles and cos / sin in
            float32; ``position_ids`` may be traced) or ``"float64"`` (its ``freqs_dtype=
            torch.float64``, Wan / Flux: computed on the host in float64 and rounded once;
            ``position_ids`` must be concrete).

    Returns:
        ``(cos, sin)``, each ``(..., K // 2)`` float32.

    Raises:
        InputError: ``position_ids`` without a trailing axis of size A, a bad axis dim or theta,
            a traced ``position_ids`` with ``freqs_dtype="float64"``, an unknown ``freqs_dtype``.
    """
    dims = tuple(axes_dims)
    thetas = tuple(theta) if isinstance(theta, Sequence) else (theta,) * len(dims)
    if not dims or len(thetas) != len(dims):
        raise InputError(f"rope_tables: theta={theta!r} must be one number or one per axis of axes_dims={dims!r}.")
    if freqs_dtype not in ("float32", "float64"):
        raise InputError(f"rope_tables: freqs_dtype={freqs_dtype!r}; valid: 'float32', 'float64'.")
    shape = tuple(np.shape(position_ids))
    if not shape or shape[-1] != len(dims):
        raise InputError(
            f"rope_tables: position_ids of shape {shape} must end in one position per axis "
            f"({len(dims)} for axes_dims={dims!r}); add [..., None] for 1-D positions."
        )
    inv = [rope_inv_freq(d, t) for d, t in zip(dims, thetas)]
    if freqs_dtype == "float64":
        try:
            pos = np.asarray(position_ids, np.float64)
        except jax.errors.TracerArrayConversionError:
            raise InputError(
                "rope_tables: freqs_dtype='float64' is computed on the host and needs concrete "
                "position_ids, not traced ones; build the tables outside jit (or use 'float32')."
            ) from None
        ang = np.concatenate(
            [
                pos[..., a, None] * (1.0 / np.float64(t) ** (np.arange(0, d, 2, dtype=np.float64) / d))
                for a, (d, t) in enumerate(zip(dims, thetas))
            ],
            axis=-1,
        )
        return jnp.asarray(np.cos(ang).astype(np.float32)), jnp.asarray(np.sin(ang).astype(np.float32))
    pos = jnp.asarray(position_ids).astype(_F32)
    ang = jnp.concatenate([pos[..., a, None] * jnp.asarray(f) for a, f in enumerate(inv)], axis=-1)
    return jnp.cos(ang), jnp.sin(ang)


@dataclasses.dataclass(frozen=True)
class TextRope:
    """The 1-D RoPE of transformers' decoder text models (Llama, Qwen2, Mistral), ``rope_type``
    ``"default"`` only: ``LlamaRotaryEmbedding`` with ``compute_default_rope_parameters``.

    Attributes:
        head_dim: K, channels rotated per head (even).
        theta: ``rope_theta``.
    """

    head_dim: int
    theta: float = 10000.0

    @classmethod
    def from_config_dict(cls, config: Mapping) -> TextRope:
        """Read a transformers ``config.json`` dict: ``rope_scaling`` (older files) or
        ``rope_parameters`` (transformers >= 5), ``rope_theta`` there or at the top level
        (default 10000), ``head_dim`` or ``hidden_size // num_attention_heads``.

        Raises:
            ConfigError: a ``rope_type`` / ``type`` other than ``"default"`` (linear, dynamic,
                yarn, llama3, longrope, ... change the frequencies and are not implemented), RoPE
                parameters nested per layer type, ``partial_rotary_factor`` != 1, or no head dim.
        """
        key = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
        params = config.get(key) or {}
        if not isinstance(params, Mapping):
            raise ConfigError(f"config.json: {key}={params!r} must be a dict or null.")
        nested = [name for name, value in params.items() if isinstance(value, Mapping)]
        if nested:
            raise ConfigError(
                f"config.json: {key} is nested per layer type ({nested}); vidax's TextRope takes "
                "one global RoPE ('rope_type': 'default')."
            )
        type_key = "rope_type" if "rope_type" in params else "type"
        rope_type = params.get(type_key, "default")
        if rope_type != "default":
            raise ConfigError(
                f"config.json: {key}.{type_key}={rope_type!r} is not supported; vidax implements "
                "only 'default' RoPE (plain rope_theta frequencies, no scaling)."
            )
        partial = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
        if partial != 1.0:
            raise ConfigError(
                f"config.json: partial_rotary_factor={partial!r} is not supported; vidax's TextRope "
                "rotates the whole head dim (1.0)."
            )
        theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
        head_dim = config.get("head_dim")
        if not head_dim:
            if not config.get("hidden_size") or not config.get("num_attention_heads"):
                raise ConfigError(
                    "config.json: no head_dim and no hidden_size / num_attention_heads to derive it; "
                    f"got head_dim={config.get('head_dim')!r}, hidden_size={config.get('hidden_size')!r}, "
                    f"num_attention_heads={config.get('num_attention_heads')!r}."
                )
            head_dim = config["hidden_size"] // config["num_attention_heads"]
        if head_dim % 2:
            raise ConfigError(f"config.json: head_dim={head_dim!r} must be even for RoPE.")
        return cls(head_dim=int(head_dim), theta=theta)

    def inv_freq(self) -> np.ndarray:
        """``(head_dim // 2,)`` float32 inverse frequencies (:func:`rope_inv_freq`)."""
        return rope_inv_freq(self.head_dim, self.theta)

    def __call__(self, position_ids) -> tuple[jax.Array, jax.Array]:
        """Half tables for token positions.

        Args:
            position_ids: ``(B, L)`` (or any shape) int positions, e.g. ``arange(L)`` as
                transformers' ``cache_position``.

        Returns:
            ``(cos, sin)``, each ``position_ids.shape + (head_dim // 2,)`` float32 (transformers'
            ``LlamaRotaryEmbedding`` returns ``cat(.., ..)`` of these, in the input dtype).
        """
        return rope_tables(jnp.asarray(position_ids)[..., None], (self.head_dim,), self.theta)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array, *, layout: str = "interleaved") -> jax.Array:
    """Rotate the pairs of ``x`` by the angles of ``cos`` / ``sin``.

    ``out[a] = x[a] cos - x[b] sin``, ``out[b] = x[a] sin + x[b] cos`` for each pair ``(a, b)``:
    ``(2i, 2i+1)`` for ``layout="interleaved"`` (diffusers ``apply_rotary_emb(
    use_real_unbind_dim=-1)``, as ``WanAttnProcessor``), ``(i, i + K/2)`` for
    ``layout="rotate_half"`` (transformers ``apply_rotary_pos_emb``).

    Args:
        x: ``(B, L, N, K)`` queries or keys, any float dtype, K even.
        cos, sin: ``(L, K // 2)`` (same for every batch element) or ``(B, L, K // 2)``, float32
            (e.g. from :func:`rope_tables`, :class:`TextRope`, or
            :func:`vidax.models.wan.rope.wan_rope`).
        layout: ``"interleaved"`` or ``"rotate_half"``.

    Returns:
        ``(B, L, N, K)`` in ``x.dtype``; the rotation is computed in float32 and rounded once
        (transformers rounds cos / sin to a bf16 input's dtype and rotates in bf16: bf16 results
        differ from it by that rounding).

    Raises:
        InputError: an unknown ``layout`` or shapes that do not fit the above.
    """
    if layout not in LAYOUTS:
        raise InputError(f"apply_rope: layout={layout!r} is not known; valid: {list(LAYOUTS)}.")
    if x.ndim != 4 or x.shape[-1] % 2:
        raise InputError(f"apply_rope: x must be (B, L, N, K) with K even; got {tuple(x.shape)}.")
    b, l, n, k = x.shape
    if cos.shape != sin.shape or tuple(cos.shape) not in ((l, k // 2), (b, l, k // 2)):
        raise InputError(
            f"apply_rope: cos and sin must be ({l}, {k // 2}) or ({b}, {l}, {k // 2}) for x "
            f"{tuple(x.shape)}; got {tuple(cos.shape)} and {tuple(sin.shape)}."
        )
    c = (cos[None] if cos.ndim == 2 else cos)[:, :, None, :].astype(_F32)
    s = (sin[None] if sin.ndim == 2 else sin)[:, :, None, :].astype(_F32)
    x32 = x.astype(_F32)
    if layout == "interleaved":
        pairs = x32.reshape(b, l, n, k // 2, 2)
        x1, x2 = pairs[..., 0], pairs[..., 1]
        out = jnp.stack([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1).reshape(b, l, n, k)
    else:
        x1, x2 = x32[..., : k // 2], x32[..., k // 2 :]
        out = jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)
    return out.astype(x.dtype)
