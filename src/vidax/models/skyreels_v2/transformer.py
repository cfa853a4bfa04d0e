"""SkyReels-V2 diffusion transformer (``diffusers.SkyReelsV2Transformer3DModel``) in Flax NNX.

The Wan2.1 transformer (:mod:`vidax.models.wan.transformer`: same blocks, embeddings, RoPE and
parameter paths) with what diffusion forcing adds::

    timestep (B,) or (B, F) one per latent frame (diffusion forcing)
        ──float64 sinusoid──time_embedder──> temb ──SiLU──time_proj──> 6 modulations
    [fps (B,) in {0, 1} ──fps_embedding──fps_projection (Linear, SiLU, Linear)──> + modulations]
    per-frame temb / modulations broadcast to the frame's tokens
    self-attention block-causal over blocks of ``num_frame_per_block`` latent frames when > 1:
        a token attends the tokens of its own block and of the blocks before it

Precision as Wan's; the sinusoid's angles are taken in float64 on the reference
(``get_1d_sincos_pos_embed_from_grid``), here in float32 with the frequencies rounded from float64.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.blocks.transformer import DiffusionTransformer, block_inputs, static
from vidax.errors import InputError
from vidax.models.skyreels_v2.config import SkyReelsV2TransformerConfig
from vidax.models.wan.rope import wan_rope
from vidax.models.wan.transformer import (
    WanBlockInputs,
    WanTransformerBlock,
    build_wan_modules,
    check_wan_inputs,
    wan_head,
    wan_image_context,
    wan_sequence_padding,
)
from vidax.nn.layers import FeedForward

_F32 = jnp.float32


def sincos_timestep_embedding(timestep: jax.Array, dim: int) -> jax.Array:
    """diffusers ``get_1d_sincos_pos_embed_from_grid(dim, t, flip_sin_to_cos=True)``:
    ``[cos(t·ω), sin(t·ω)]``, ``ω_i = 10000 ** (-i / (dim/2))``.

    Args:
        timestep: any shape ``S``, float (diffusion time in [0, 1000]).
        dim: feature width (even).

    Returns:
        ``S + (dim,)`` float32.
    """
    half = dim // 2
    omega = (1.0 / 10000 ** (np.arange(half, dtype=np.float64) / (dim / 2.0))).astype(np.float32)
    arg = timestep.astype(_F32)[..., None] * jnp.asarray(omega)
    return jnp.concatenate([jnp.cos(arg), jnp.sin(arg)], axis=-1)


@block_inputs
class SkyReelsV2BlockInputs(WanBlockInputs):
    """What the blocks and the head read (from :meth:`SkyReelsV2Transformer3DModel.embed`).

    Attributes: as :class:`vidax.models.wan.transformer.WanBlockInputs`, plus
        causal_block: static; tokens per causal block of the self-attention, or None (full).
    """

    causal_block: int | None = static()


class SkyReelsV2Transformer3DModel(DiffusionTransformer):
    """The SkyReels-V2 diffusion transformer; follows ``diffusers.SkyReelsV2Transformer3DModel``.

    Constructor arguments and errors as :class:`~vidax.blocks.transformer.DiffusionTransformer`
    (config: the checkpoint's :class:`SkyReelsV2TransformerConfig`). Call ``model(hidden_states,
    timestep, encoder_hidden_states, encoder_hidden_states_image, fps, num_frame_per_block)``
    (see :meth:`embed`).
    """

    block_stacks = ("blocks",)

    def build(self, cfg: SkyReelsV2TransformerConfig, param_dtype, attention, rngs):
        build_wan_modules(self, cfg, param_dtype, attention, rngs)
        if cfg.inject_sample_info:
            d = cfg.inner_dim
            self.fps_embedding = nnx.Embed(2, d, param_dtype=param_dtype, rngs=rngs)
            self.fps_projection = FeedForward(d, d, 6 * d, "linear-silu", self.dtype, param_dtype, rngs)

    def embed(
        self,
        hidden_states: jax.Array,
        timestep: jax.Array,
        encoder_hidden_states: jax.Array,
        encoder_hidden_states_image: jax.Array | None = None,
        fps: jax.Array | None = None,
        num_frame_per_block: int | None = None,
    ) -> tuple[jax.Array, SkyReelsV2BlockInputs]:
        """Everything before the blocks: patch embedding, time (+ fps) / text / image embeddings,
        RoPE, the causal blocks.

        Args:
            hidden_states: latents ``(B, T, H, W, C_in)`` channels-last; T, H, W divisible by
                ``patch_size``.
            timestep: ``(B,)`` diffusion time in [0, 1000] (not sigma), or ``(B, F)`` one per
                latent frame, ``F = T / p_t`` (diffusion forcing: the reference's
                ``enable_diffusion_forcing=True``). Float or int.
            encoder_hidden_states: text-encoder states ``(B, L_txt, text_dim)``.
            encoder_hidden_states_image: CLIP image features ``(B, L_img, image_dim)`` (I2V) or
                ``None``; passed apart from the text as in :class:`WanTransformer3DModel`.
            fps: ``(B,)`` int index of the fps embedding (the pipelines give 0 for 16 fps, 1 for
                any other), needed when the config has ``inject_sample_info``, else ignored.
            num_frame_per_block: static; latent frames per causal block of the self-attention
                (> 1: block-causal, single device), None: the config's ``num_frame_per_block``.

        Returns:
            The residual stream ``(B, L', D)`` and the :class:`SkyReelsV2BlockInputs`; the model
            call returns ``(B, T, H, W, C_out)`` in the compute dtype.

        Raises:
            InputError: shapes that do not fit the config; ``fps`` missing when needed;
                ``num_frame_per_block`` not a positive int or not dividing F.
        """
        cfg = self.config
        b = hidden_states.shape[0]
        grid = check_wan_inputs(self, hidden_states, encoder_hidden_states, encoder_hidden_states_image)
        per_frame = timestep.ndim == 2
        nfpb = self._check_forcing_inputs(b, grid, timestep, fps, num_frame_per_block)

        rope = wan_rope(cfg.attention_head_dim, grid, cfg.rope_max_seq_len)
        x = self.patch_embedding(hidden_states)  # (B, L, D)
        emb = self.condition_embedder
        ts = timestep.reshape(b, -1)  # (B, 1) or (B, F)
        temb = emb.time_embedder(sincos_timestep_embedding(ts, emb.freq_dim)).astype(self.dtype)  # (B, S, D)
        mod = emb.time_proj(jax.nn.silu(temb))
        mod = mod.reshape(*mod.shape[:-1], 6, -1)  # (B, S, 6, D)
        if cfg.inject_sample_info:
            fps_mod = self.fps_projection(self.fps_embedding(fps.astype(jnp.int32)).astype(self.dtype))
            mod = mod + fps_mod.reshape(b, 1, 6, -1)
        if per_frame:
            # One modulation per latent frame, broadcast to the frame's tokens (frame-major).
            per = math.prod(grid[1:])
            temb = jnp.repeat(temb, per, axis=1)
            mod = jnp.repeat(mod, per, axis=1)
        context = emb.text_embedder(encoder_hidden_states.astype(self.dtype))

        n_tok = x.shape[1]
        x, rope, mod, valid_length = wan_sequence_padding(self, x, rope, mod)
        context, context_img = wan_image_context(self, context, encoder_hidden_states_image)
        causal_block = nfpb * math.prod(grid[1:]) if nfpb > 1 else None
        inputs = SkyReelsV2BlockInputs(context, mod, rope, temb, context_img, valid_length, n_tok, grid, causal_block)
        return self.stream(x), inputs

    def _check_forcing_inputs(
        self, b: int, grid: tuple, timestep: jax.Array, fps: jax.Array | None, num_frame_per_block: int | None
    ) -> int:
        """:meth:`embed`'s diffusion-forcing inputs for ``b`` videos of ``grid`` (latent frames
        after patching first): the timestep's shape, the fps index where the config needs it.
        Returns the latent frames per causal block (``num_frame_per_block``, else the config's).

        Raises:
            InputError: as :meth:`embed`.
        """
        cfg, name = self.config, type(self).__name__
        if tuple(timestep.shape) not in ((b,), (b, grid[0])):
            raise InputError(
                f"{name}: timestep must have shape (B,)=({b},) or (B, F)=({b}, {grid[0]}) (one per latent "
                f"frame); got {tuple(timestep.shape)}."
            )
        nfpb = cfg.num_frame_per_block if num_frame_per_block is None else num_frame_per_block
        if not isinstance(nfpb, int) or isinstance(nfpb, bool) or nfpb < 1 or grid[0] % nfpb:
            raise InputError(
                f"{name}: num_frame_per_block={nfpb!r} must be a positive int dividing the {grid[0]} latent "
                "frames (after patching) into causal blocks."
            )
        if cfg.inject_sample_info and (fps is None or tuple(fps.shape) != (b,)):
            raise InputError(
                f"{name}: this checkpoint conditions on fps (inject_sample_info); pass fps of shape (B,)=({b},) "
                f"(0 for 16 fps, 1 for any other); got {None if fps is None else tuple(fps.shape)}."
            )
        return nfpb

    def run_block(self, block: WanTransformerBlock, x: jax.Array, inputs: SkyReelsV2BlockInputs) -> jax.Array:
        i = inputs
        return block(x, i.context, i.mod, i.rope, i.context_img, i.valid_length, i.causal_block)

    def head(self, x: jax.Array, inputs: SkyReelsV2BlockInputs) -> jax.Array:
        """Everything after the blocks, as Wan's (:func:`vidax.models.wan.transformer.wan_head`):
        ``(B, L', D)`` -> ``(B, T, H, W, C_out)`` in the compute dtype."""
        return wan_head(self, x, inputs)
