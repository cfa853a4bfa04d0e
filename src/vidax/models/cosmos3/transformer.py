"""Cosmos 3's denoising transformer (diffusers 0.42.1 ``Cosmos3OmniTransformer``): a
Mixture-of-Transformers over one packed sequence.

Data flow (``B`` batch of sequences packed alike, ``L`` packed tokens, the first ``L_und`` the
understanding pathway, the rest the generation pathway)::

    input_ids (B, N_txt) ──embed_tokens──> at text_indexes ─┐
    vision latents (B, T, H, W, C) ──patchify p×p──proj_in──(+ time_embedder(t) on noisy frames)
                                                 at vision_sequence_indexes ─┤
    sound latents (B, C_s, T_s) ──audio_proj_in + audio_modality_embed (+ time) at sound indexes ─┤
    action (B, T_a, A) ──action_proj_in[domain] + action_modality_embed (+ time) at action indexes┘
        packed (B, L, D), split (und = [:L_und], gen = [L_und:])
    layers × num_hidden_layers (stacked, scanned; each layer holds both pathways' weights):
        und_n, gen_n = input_layernorm(und), input_layernorm_moe_gen(gen)
        self_attn: Attention(added="joint") with AttentionMask(first_stream_causal=True):
            und attends und causally; gen attends [und; gen]; GQA; per-head RMS q/k norms; mRoPE
        und += attn_und; gen += attn_gen
        und += mlp(post_attention_layernorm(und)); gen += mlp_moe_gen(post_attention_layernorm_moe_gen(gen))
    norm(und), norm_moe_gen(gen) -> joint (B, L, D)
        proj_out at vision_mse_loss_indexes -> unpatchify -> (B, T, H, W, C), zeros at clean frames
        audio_proj_out at sound_mse_loss_indexes -> (B, C_s, T_s), zeros at clean frames
        action_proj_out[domain] at action_mse_loss_indexes -> (B, T_a, A), zeros at clean frames

Edge (``hidden_act="relu2"``): squared-ReLU MLPs without ``gate_proj``, no understanding q/k norm
(``qk_norm_for_text`` False) and a separate ``k_norm_und_for_gen`` on the understanding keys the
generation pathway attends: :class:`~vidax.blocks.attention.AttentionConfig`'s
``first_stream_qk_norm`` / ``first_key_norm_for_second``.

Precision: projections and the residual streams in the compute dtype; norm statistics, the RoPE
angles (positions × inverse frequencies, float32 as the reference computes them outside
autocast) and rotation, the softmax and the timestep embedder (diffusers keeps it float32) in
float32. ``lm_head`` is a parameter of the checkpoint and is held, not run.

On a mesh (``data x tensor x sequence``): batch over ``data``; both pathways' heads over
``tensor`` (q/k/v column-, out row-parallel); each pathway's tokens padded to a multiple of
``sequence`` and split over it, the padding masked as keys of the generation pathway (trailing
understanding padding is never seen by a real understanding query under the causal mask); the
two-pathway attention through the Ulysses all-to-all of the shared attention
(:func:`vidax.parallel.ulysses.two_pathway_attention`; GQA's key/value heads repeated in place
where they do not split over ``tensor x sequence``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.blocks.attention import Attention, AttentionConfig, AttentionMask
from vidax.blocks.transformer import DiffusionTransformer, block_inputs, shared, static
from vidax.errors import InputError
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.nn.layers import RMSNorm, TimestepEmbedding, linear, timestep_sinusoid
from vidax.nn.rope import rope_inv_freq
from vidax.nn.stack import stacked
from vidax.parallel.ulysses import pad_tokens

_F32 = jnp.float32
_TWO_PATHWAYS = AttentionMask(first_stream_causal=True)


def mrope_tables(
    position_ids: jax.Array, head_dim: int, theta: float, section: tuple[int, int, int]
) -> tuple[jax.Array, jax.Array]:
    """diffusers ``Cosmos3VLTextRotaryEmbedding``: the interleaved 3-axis mRoPE.

    Pair ``j`` of the head takes its position from axis H when ``j % 3 == 1 and j < 3·section[1]``,
    from W when ``j % 3 == 2 and j < 3·section[2]``, else from T; angle = position · inv_freq[j].

    Args:
        position_ids: ``(3, L)`` (T, H, W positions of the packed sequence), or ``(B, 3, L)``
            per sequence; int or float (the reference's fps-modulated positions).
        head_dim: K. theta: RoPE base. section: (T, H, W) pair counts.

    Returns:
        ``(cos, sin)`` each ``(L, K/2)`` (or ``(B, L, K/2)``) float32 (rotate-half layout).
    """
    half = head_dim // 2
    j = np.arange(half)
    axis = np.where((j % 3 == 1) & (j < 3 * section[1]), 1, np.where((j % 3 == 2) & (j < 3 * section[2]), 2, 0))
    pos = jnp.asarray(position_ids).astype(_F32)[..., axis, :]  # (..., K/2, L)
    angles = jnp.swapaxes(pos, -1, -2) * jnp.asarray(rope_inv_freq(head_dim, theta))
    return jnp.cos(angles), jnp.sin(angles)


class Cosmos3MLP(nnx.Module):
    """diffusers ``Cosmos3VLTextMLP``: ``down(silu(gate(x)) · up(x))``, or ``down(relu(up(x))²)``
    (``relu2``); no biases."""

    def __init__(self, d, inner, act, dtype, param_dtype, rngs):
        self.act = act
        self.gate_proj = linear(d, inner, dtype, param_dtype, rngs, use_bias=False) if act == "silu" else None
        self.up_proj = linear(d, inner, dtype, param_dtype, rngs, use_bias=False)
        self.down_proj = linear(inner, d, dtype, param_dtype, rngs, use_bias=False)

    def __call__(self, x):
        if self.gate_proj is None:
            return self.down_proj(jnp.square(jax.nn.relu(self.up_proj(x))))
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DomainAwareLinear(nnx.Module):
    """diffusers ``DomainAwareLinear``: one ``(in, out)`` weight and ``(out,)`` bias per embodiment
    domain, stored as the rows of ``fc.weight`` ``(domains, in·out)`` and ``bias.weight``
    ``(domains, out)``."""

    def __init__(self, din, dout, domains, param_dtype, dtype):
        self.din, self.dout, self.dtype = din, dout, dtype
        self.fc = _Rows(domains, din * dout, param_dtype)
        self.bias = _Rows(domains, dout, param_dtype)

    def __call__(self, x: jax.Array, domain: jax.Array) -> jax.Array:
        """``x`` ``(B, n, in)``, ``domain`` ``(B,)`` int -> ``(B, n, out)`` in ``dtype``."""
        w = self.fc.weight[...][domain].reshape(-1, self.din, self.dout).astype(self.dtype)
        b = self.bias.weight[...][domain].astype(self.dtype)
        return jnp.einsum("bni,bio->bno", x.astype(self.dtype), w) + b[:, None]


class _Rows(nnx.Module):
    def __init__(self, n, width, param_dtype):
        self.weight = nnx.Param(jnp.zeros((n, width), param_dtype))


class Cosmos3MoTLayer(nnx.Module):
    """diffusers ``Cosmos3VLTextMoTDecoderLayer``: both pathways' norms, attention projections and
    MLPs; ``(und, gen) -> (und, gen)``."""

    def __init__(self, cfg: Cosmos3TransformerConfig, attention, dtype, param_dtype, rngs, mesh=None):
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.self_attn = Attention(
            AttentionConfig(
                d,
                cfg.num_attention_heads,
                cfg.head_dim,
                kv_heads=cfg.num_key_value_heads,
                bias=cfg.attention_bias,
                out_bias=cfg.attention_bias,
                out="linear",
                qk_norm="rms_head",
                qk_norm_eps=eps,
                rope="rotate_half",
                added="joint",
                first_stream_qk_norm=cfg.qk_norm_for_text,
                first_key_norm_for_second=cfg.has_und_k_norm_for_gen,
            ),
            attention,
            dtype,
            param_dtype,
            rngs,
            mesh=mesh,
        )
        self.mlp = Cosmos3MLP(d, cfg.intermediate_size, cfg.hidden_act, dtype, param_dtype, rngs)
        self.mlp_moe_gen = Cosmos3MLP(d, cfg.intermediate_size, cfg.hidden_act, dtype, param_dtype, rngs)
        for name in (
            "input_layernorm",
            "input_layernorm_moe_gen",
            "post_attention_layernorm",
            "post_attention_layernorm_moe_gen",
        ):
            setattr(self, name, RMSNorm(d, eps, param_dtype=param_dtype))

    def __call__(self, streams, inputs: Cosmos3Inputs):
        und, gen = streams
        mask = (
            _TWO_PATHWAYS
            if inputs.key_mask is None
            else AttentionMask(first_stream_causal=True, kv_mask=inputs.key_mask)
        )
        a_und, a_gen = self.self_attn(
            (self.input_layernorm(und), self.input_layernorm_moe_gen(gen)),
            rope=inputs.rope_und,
            added_rope=inputs.rope_gen,
            mask=mask,
        )
        und, gen = und + a_und.astype(und.dtype), gen + a_gen.astype(gen.dtype)
        und = und + self.mlp(self.post_attention_layernorm(und)).astype(und.dtype)
        gen = gen + self.mlp_moe_gen(self.post_attention_layernorm_moe_gen(gen)).astype(gen.dtype)
        return und, gen


@block_inputs
class Cosmos3Inputs:
    """What the layers and the head read besides the two streams."""

    rope_und: tuple[jax.Array, jax.Array]
    rope_gen: tuple[jax.Array, jax.Array]
    vision_mse_loss_indexes: jax.Array = shared()
    sound_mse_loss_indexes: jax.Array | None = shared()
    action_mse_loss_indexes: jax.Array | None = shared()
    action_domain_ids: jax.Array | None
    key_mask: jax.Array | None
    vision_shape: tuple[int, int, int, int] = static()
    vision_noisy_frames: tuple[int, ...] = static()
    sound_shape: tuple[int, int] | None = static()
    sound_noisy_frames: tuple[int, ...] | None = static()
    action_shape: tuple[int, int] | None = static()
    action_noisy_frames: tuple[int, ...] | None = static()
    #: Real tokens of the (understanding, generation) streams, before the mesh's sequence padding.
    stream_lengths: tuple[int, int] = static()


def _noisy_rows(noisy_frames: tuple[int, ...], per_frame: int) -> np.ndarray:
    """Token rows of the noisy frames (``per_frame`` tokens each), in frame order."""
    return (np.asarray(noisy_frames, np.int64)[:, None] * per_frame + np.arange(per_frame)).reshape(-1)


def _key_mask(text_lengths: Any, b: int, und_len: int, gen_len: int, l_und: int, l_gen: int) -> jax.Array | None:
    """``(B, l_und + l_gen)`` int32: 1 on the keys the generation tokens attend (the prompt's
    real tokens, ``text_lengths`` of the ``und_len``, and the ``gen_len`` generation tokens), 0 on
    prompt and mesh padding; None where there is none."""
    if text_lengths is None and (l_und, l_gen) == (und_len, gen_len):
        return None
    real = und_len if text_lengths is None else jnp.asarray(text_lengths, jnp.int32).reshape(-1, 1)
    return jnp.concatenate(
        [
            jnp.broadcast_to(jnp.arange(l_und)[None] < real, (b, l_und)),
            jnp.broadcast_to(jnp.arange(l_gen)[None] < gen_len, (b, l_gen)),
        ],
        axis=1,
    ).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Cosmos3Forward:
    """The arguments of :meth:`Cosmos3OmniTransformer.embed` (the reference's ``forward``'s
    names), in their order or by name.

    ``B`` sequences packed alike; indexes are positions in the packed sequence of length
    ``L = position_ids.shape[1]``.

    Attributes:
        input_ids: ``(B, N_txt)`` int token ids, placed at ``text_indexes`` ``(N_txt,)``.
        position_ids: ``(3, L)`` mRoPE positions (T, H, W), or ``(B, 3, L)`` per sequence.
        und_len: static; the understanding (causal) prefix length; the rest is generation.
        text_lengths: ``(B,)`` int or None: sequence ``b``'s understanding prefix holds
            ``text_lengths[b]`` real tokens, the rest up to ``und_len`` is padding that no
            generation token attends (so sequences of several prompt lengths -- a prompt and
            its negative -- run as one batch; the causal understanding tokens never see later
            padding). None: all ``und_len`` are real.
        vision: ``(B, T, H, W, C)`` channels-last latents (H, W padded to the patch with zeros
            as the reference).
        vision_sequence_indexes: ``(T·h·w,)`` positions of the patch tokens (frame-major).
        vision_mse_loss_indexes: ``(n_noisy·h·w,)`` positions whose prediction is read.
        vision_timesteps: ``(B, n_noisy·h·w)`` float timesteps (0-1000) of the noisy tokens.
        vision_noisy_frames: static tuple of the noisy latent frames (the others are condition).
        sound: ``(B, C_s, T_s)`` sound latents, with ``sound_sequence_indexes`` ``(T_s,)``,
            ``sound_mse_loss_indexes``, ``sound_timesteps`` ``(B, n_noisy)``,
            ``sound_noisy_frames``; or None.
        action: ``(B, T_a, A)`` with the same four, plus ``action_domain_ids`` ``(B,)`` int;
            or None.
    """

    input_ids: Any
    text_indexes: Any
    position_ids: Any
    und_len: int
    vision: Any
    vision_sequence_indexes: Any
    vision_mse_loss_indexes: Any
    vision_timesteps: Any
    vision_noisy_frames: tuple[int, ...]
    sound: Any = None
    sound_sequence_indexes: Any = None
    sound_mse_loss_indexes: Any = None
    sound_timesteps: Any = None
    sound_noisy_frames: tuple[int, ...] | None = None
    action: Any = None
    action_sequence_indexes: Any = None
    action_mse_loss_indexes: Any = None
    action_timesteps: Any = None
    action_noisy_frames: tuple[int, ...] | None = None
    action_domain_ids: Any = None
    text_lengths: Any = None


class Cosmos3OmniTransformer(DiffusionTransformer):
    """diffusers ``Cosmos3OmniTransformer`` (see the module docstring).

    Call ``model(input_ids, text_indexes, position_ids, und_len, vision, vision_sequence_indexes,
    vision_mse_loss_indexes, vision_timesteps, vision_noisy_frames, ...)`` (:meth:`embed`); it
    returns ``(vision, sound, action)`` (:meth:`head`).
    """

    block_stacks = ("layers",)

    def build(self, cfg: Cosmos3TransformerConfig, param_dtype, attention, rngs):
        d, dtype = cfg.hidden_size, self.dtype
        self.embed_tokens = nnx.Embed(cfg.vocab_size, d, param_dtype=param_dtype, rngs=rngs)
        self.layers = stacked(
            lambda r: Cosmos3MoTLayer(cfg, attention, dtype, param_dtype, r, self.mesh), cfg.num_hidden_layers, rngs
        )
        self.norm = RMSNorm(d, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.norm_moe_gen = RMSNorm(d, cfg.rms_norm_eps, param_dtype=param_dtype)
        self.lm_head = linear(d, cfg.vocab_size, dtype, param_dtype, rngs, use_bias=False)
        self.proj_in = linear(cfg.patch_latent_dim, d, dtype, param_dtype, rngs)
        self.proj_out = linear(d, cfg.patch_latent_dim, dtype, param_dtype, rngs)
        self.time_embedder = TimestepEmbedding(256, d, rngs)
        act = cfg.action_gen
        self.action_proj_in = (
            DomainAwareLinear(cfg.action_dim, d, cfg.num_embodiment_domains, param_dtype, dtype) if act else None
        )
        self.action_proj_out = (
            DomainAwareLinear(d, cfg.action_dim, cfg.num_embodiment_domains, param_dtype, dtype) if act else None
        )
        self.action_modality_embed = nnx.Param(jnp.zeros((d,), param_dtype)) if act else None
        snd = cfg.sound_gen
        self.audio_proj_in = linear(cfg.sound_dim, d, dtype, param_dtype, rngs) if snd else None
        self.audio_proj_out = linear(d, cfg.sound_dim, dtype, param_dtype, rngs) if snd else None
        self.audio_modality_embed = nnx.Param(jnp.zeros((d,), param_dtype)) if snd else None

    # -- embedding -------------------------------------------------------------------------------

    def _time(self, tokens, timesteps, noisy_frames, per_frame):
        """Add ``time_embedder(sinusoid(t · timestep_scale))`` ``(B, n_noisy, D)`` to the noisy
        frames' rows of ``tokens`` ``(B, n, D)`` (the reference's scatter_add)."""
        t = jnp.asarray(timesteps, _F32) * np.float32(self.config.timestep_scale)
        emb = self.time_embedder(timestep_sinusoid(t, 256)).astype(tokens.dtype)
        rows = _noisy_rows(noisy_frames, per_frame)
        if emb.shape[1] != rows.size:
            raise InputError(
                f"Cosmos3OmniTransformer: timesteps have {emb.shape[1]} entries per sequence; the noisy "
                f"frames {tuple(noisy_frames)} have {rows.size} tokens."
            )
        return tokens.at[:, rows].add(emb)

    def embed(self, *args, **kwargs):
        """The packed sequence, split into the two pathways; the arguments of
        :class:`Cosmos3Forward`, in its order or by name.

        Returns:
            ``((und (B, und_len', D), gen (B, L - und_len', D)), Cosmos3Inputs)``: each stream
            padded to a multiple of the mesh's ``sequence`` (none without a mesh).

        Raises:
            InputError: a latent of the wrong rank / channels, or a modality the config lacks.
            TypeError: an argument :class:`Cosmos3Forward` does not have.
        """
        f = Cosmos3Forward(*args, **kwargs)
        cfg = self.config
        vision = self._checked_vision(f)
        und_len = f.und_len
        length = int(np.shape(f.position_ids)[-1])
        b = vision.shape[0]
        text = self.embed_tokens(jnp.asarray(f.input_ids)).astype(self.res_dtype)
        h = jnp.zeros((b, length, cfg.hidden_size), self.res_dtype).at[:, f.text_indexes].set(text)
        h = self._place_vision(f, h, vision)
        h, sound_shape = self._place_sound(f, h)
        h, action_shape = self._place_action(f, h)

        cos, sin = mrope_tables(f.position_ids, cfg.head_dim, cfg.rope_theta, cfg.mrope_section)
        gen_len = length - und_len
        (l_und, _), (l_gen, _) = self.sequence_length(und_len), self.sequence_length(gen_len)

        def rope(start, stop, n):
            return tuple(pad_tokens(r[..., start:stop, :], n, axis=r.ndim - 2) for r in (cos, sin))

        sound, action = f.sound, f.action
        inputs = Cosmos3Inputs(
            rope_und=rope(0, und_len, l_und),
            rope_gen=rope(und_len, length, l_gen),
            vision_mse_loss_indexes=jnp.asarray(f.vision_mse_loss_indexes),
            sound_mse_loss_indexes=None if sound is None else jnp.asarray(f.sound_mse_loss_indexes),
            action_mse_loss_indexes=None if action is None else jnp.asarray(f.action_mse_loss_indexes),
            action_domain_ids=None if action is None else jnp.asarray(f.action_domain_ids),
            key_mask=_key_mask(f.text_lengths, b, und_len, gen_len, l_und, l_gen),
            vision_shape=tuple(vision.shape[1:]),
            vision_noisy_frames=tuple(int(i) for i in f.vision_noisy_frames),
            sound_shape=sound_shape,
            sound_noisy_frames=None if sound is None else tuple(int(i) for i in f.sound_noisy_frames),
            action_shape=action_shape,
            action_noisy_frames=None if action is None else tuple(int(i) for i in f.action_noisy_frames),
            stream_lengths=(und_len, gen_len),
        )
        return (self.stream(pad_tokens(h[:, :und_len], l_und)), self.stream(pad_tokens(h[:, und_len:], l_gen))), inputs

    def _checked_vision(self, f: Cosmos3Forward) -> jax.Array:
        """``f.vision`` as an array, after checking it and the modalities given against the config.

        Raises:
            InputError: as :meth:`embed`.
        """
        cfg, name = self.config, type(self).__name__
        vision = jnp.asarray(f.vision)
        if vision.ndim != 5 or vision.shape[-1] != cfg.latent_channel:
            raise InputError(
                f"{name}: vision must be (B, T, H, W, C={cfg.latent_channel}) channels-last; got {tuple(vision.shape)}."
            )
        if f.sound is not None and not cfg.sound_gen:
            raise InputError(f"{name}: sound= given but the checkpoint has sound_gen=False.")
        if f.action is not None and not cfg.action_gen:
            raise InputError(f"{name}: action= given but the checkpoint has action_gen=False.")
        return vision

    def _place_vision(self, f: Cosmos3Forward, h: jax.Array, vision: jax.Array) -> jax.Array:
        """``h`` with the vision latents' patch tokens (H, W padded to the patch with zeros, as the
        reference), time-embedded where noisy, at ``f.vision_sequence_indexes``."""
        p, dtype = self.config.latent_patch_size, self.dtype
        b, t, hh, ww, c = vision.shape
        hp, wp = -(-hh // p), -(-ww // p)
        x = jnp.pad(vision, ((0, 0), (0, 0), (0, hp * p - hh), (0, wp * p - ww), (0, 0)))
        x = x.reshape(b, t, hp, p, wp, p, c).transpose(0, 1, 2, 4, 3, 5, 6).reshape(b, t * hp * wp, p * p * c)
        tok = self.proj_in(x.astype(dtype))
        tok = self._time(tok, f.vision_timesteps, f.vision_noisy_frames, hp * wp)
        return h.at[:, f.vision_sequence_indexes].set(tok.astype(self.res_dtype))

    def _place_sound(self, f: Cosmos3Forward, h: jax.Array) -> tuple[jax.Array, tuple | None]:
        """``(h, (C_s, T_s))`` with the sound latents' tokens at ``f.sound_sequence_indexes``
        (``(h, None)`` without sound).

        Raises:
            InputError: sound not ``(B, C_s, T)``.
        """
        if f.sound is None:
            return h, None
        cfg, dtype = self.config, self.dtype
        sound = jnp.asarray(f.sound)
        if sound.ndim != 3 or sound.shape[1] != cfg.sound_dim:
            raise InputError(
                f"{type(self).__name__}: sound must be (B, C={cfg.sound_dim}, T); got {tuple(sound.shape)}."
            )
        tok = self.audio_proj_in(jnp.swapaxes(sound, 1, 2).astype(dtype))
        tok = tok + self.audio_modality_embed[...].astype(dtype)
        tok = self._time(tok, f.sound_timesteps, f.sound_noisy_frames, 1)
        return h.at[:, f.sound_sequence_indexes].set(tok.astype(self.res_dtype)), tuple(sound.shape[1:])

    def _place_action(self, f: Cosmos3Forward, h: jax.Array) -> tuple[jax.Array, tuple | None]:
        """``(h, (T_a, A))`` with the action's tokens at ``f.action_sequence_indexes`` (``(h, None)``
        without an action).

        Raises:
            InputError: an action not ``(B, T, A)``.
        """
        if f.action is None:
            return h, None
        cfg, dtype = self.config, self.dtype
        action = jnp.asarray(f.action)
        if action.ndim != 3 or action.shape[2] != cfg.action_dim:
            raise InputError(
                f"{type(self).__name__}: action must be (B, T, A={cfg.action_dim}); got {tuple(action.shape)}."
            )
        tok = self.action_proj_in(action, f.action_domain_ids) + self.action_modality_embed[...].astype(dtype)
        if len(f.action_noisy_frames):
            tok = self._time(tok, f.action_timesteps, f.action_noisy_frames, 1)
        return h.at[:, f.action_sequence_indexes].set(tok.astype(self.res_dtype)), tuple(action.shape[1:])

    # -- head --------------------------------------------------------------------------------------

    def head(self, x, inputs: Cosmos3Inputs):
        """``(vision (B, T, H, W, C), sound (B, C_s, T_s) or None, action (B, T_a, A) or None)``
        in the compute dtype; the condition (not noisy) frames are zeros, as the reference's."""
        cfg = self.config
        und_len, gen_len = inputs.stream_lengths
        und, gen = x[0][:, :und_len], x[1][:, :gen_len]  # without the mesh's sequence padding
        joint = jnp.concatenate([self.norm(und), self.norm_moe_gen(gen)], axis=1)
        b = joint.shape[0]
        t, hh, ww, c = inputs.vision_shape
        p = cfg.latent_patch_size
        hp, wp = -(-hh // p), -(-ww // p)
        noisy = inputs.vision_noisy_frames
        pred = self.proj_out(joint[:, inputs.vision_mse_loss_indexes])
        pred = pred.reshape(b, len(noisy), hp, wp, p, p, c).transpose(0, 1, 2, 4, 3, 5, 6)
        pred = pred.reshape(b, len(noisy), hp * p, wp * p, c)[:, :, :hh, :ww]
        vision = jnp.zeros((b, t, hh, ww, c), pred.dtype).at[:, np.asarray(noisy, np.int64)].set(pred)

        sound = None
        if inputs.sound_shape is not None:
            cs, ts = inputs.sound_shape
            pred = self.audio_proj_out(joint[:, inputs.sound_mse_loss_indexes])  # (B, n_noisy, C_s)
            sound = jnp.zeros((b, ts, cs), pred.dtype).at[:, np.asarray(inputs.sound_noisy_frames, np.int64)].set(pred)
            sound = jnp.swapaxes(sound, 1, 2)
        action = None
        if inputs.action_shape is not None:
            ta, a = inputs.action_shape
            pred = self.action_proj_out(joint[:, inputs.action_mse_loss_indexes], inputs.action_domain_ids)
            action = jnp.zeros((b, ta, a), pred.dtype).at[:, np.asarray(inputs.action_noisy_frames, np.int64)].set(pred)
        return vision, sound, action
