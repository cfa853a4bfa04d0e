"""Decoder-only language models used as text encoders: Llama (HunyuanVideo's ``LlamaModel``, the
language model of its I2V ``LlavaForConditionalGeneration``), the Qwen2.5-VL text tower
(Cosmos-Predict2.5's ``Qwen2_5_VLForConditionalGeneration``) and Gemma 3's language model
(LTX-2's ``Gemma3ForConditionalGeneration``, config in :mod:`vidax.encoders.gemma3`), one
implementation for all three.

References: transformers 5.24 ``models/llama/modeling_llama.py`` ``LlamaModel``,
``models/qwen2_5_vl/modeling_qwen2_5_vl.py`` ``Qwen2_5_VLTextModel`` and
``models/gemma3/modeling_gemma3.py`` ``Gemma3TextModel``. All are: token embedding, pre-norm
decoder layers (RMS norm, causal self-attention with rotate-half RoPE and grouped-query K/V
heads, gated MLP ``down(act(gate(x)) * up(x))``), a final RMS norm. Their differences are
config-driven options of the one module (:class:`~vidax.encoders.decoder_lm_config.DecoderLMConfig`
properties, in :mod:`vidax.encoders.decoder_lm_config` with the configs):

=================  =====================  ======================  ==================================
option             Llama                  Qwen2.5-VL text         Gemma 3
=================  =====================  ======================  ==================================
q/k/v bias         ``attention_bias``     always                  ``attention_bias``
o bias             ``attention_bias``     never                   ``attention_bias``
MLP bias           ``mlp_bias``           never                   never
head dim           ``head_dim`` or D / N  always D / N            ``head_dim`` (default 256)
MLP act            silu                   silu                    GELU-tanh
RMS norm weight    ``w · x̂.to(dtype)``    ``w · x̂.to(dtype)``     ``(x̂ · (1 + w)).to(dtype)``
norms per layer    before attn / MLP      before attn / MLP       also on their outputs; q/k norms
score scale        ``K ** -0.5``          ``K ** -0.5``           ``query_pre_attn_scalar ** -0.5``
embeddings         as stored              as stored               times ``sqrt(D)``
attention kinds    one: global            one: global             sliding / global per layer
RoPE               1-D, ``rope_theta``    M-RoPE, see below       per kind: base, linear scaling
=================  =====================  ======================  ==================================

An *attention kind* (:class:`AttentionKind`) is a RoPE (base, linear scaling factor) and an
optional sliding window; each layer has one (``DecoderLMConfig.layer_kinds``) and the layer scan
picks its kind's RoPE tables and window by the layer's index. The window is a dense 0 / -inf bias
(query ``i`` sees key ``j`` only if ``i - j < window``, transformers' ``sliding_window_overlay``),
on top of the causal and padding masks.

Positions are ``arange(L)`` for every prompt, with or without padding, as both references
compute them for text-only input without a cache (``LlamaModel.forward``; for Qwen2.5-VL,
``Qwen2_5_VLModel.compute_3d_position_ids`` returns None without image / video grids and
``Qwen2_5_VLTextModel.forward`` then uses ``arange(L)`` for all three M-RoPE streams). M-RoPE
takes pair ``i`` of the head dim from stream ``s(i)`` (the ``mrope_section`` split), each with the
ordinary frequency ``theta ** (-2i / K)``; with the three streams equal, that is exactly the 1-D
RoPE, which is what runs here. Image / video tokens (unequal streams) are not implemented: the
Qwen2.5-VL vision tower is not part of this module and its weights are declared unused by the
key rules (:func:`decoder_lm_key_rules`).

Attention mask: causal, plus the key-padding mask when ``attention_mask`` is given: query ``i``
attends key ``j`` iff ``j <= i`` and ``attention_mask[j] != 0`` (transformers'
``create_causal_mask``: ``causal_mask_function`` and ``padding_mask_function``). With right
padding every row is then the reference's, padded rows included (they attend to all real tokens
before them). A query with no allowed key (left padding: padded positions before the first real
token) gets a zero attention output here, as torch's SDPA (the default implementation of
transformers) gives it, so with left padding too every row is the reference's (Gemma 3's test).

Hidden states: the reference's ``output_hidden_states=True`` tuple has ``num_hidden_layers + 1``
entries: ``[0]`` the token embeddings, ``[i]`` the output of layer ``i`` (1-based) for ``i < n``,
and ``[n]`` the output of the last layer *after the final norm* (``capture_outputs`` replaces it
by ``last_hidden_state``). :meth:`DecoderLM.__call__` returns one entry (``output_layer``, e.g.
HunyuanVideo's ``-(num_hidden_layers_skip + 1) = -3``, running only the layers it needs);
:meth:`DecoderLM.all_hidden_states` returns all of them stacked (Cosmos-Predict2.5).

Precision (every parameter in the load dtype): with ``dtype=float32`` everything is fp32. With
``dtype=bfloat16`` parameters and matmuls are bf16, as ``from_pretrained(dtype=torch.bfloat16)``;
norm statistics, RoPE and the softmax are fp32, and the residual stream is kept in fp32 (the
reference rounds it to bf16 after every sub-layer), so the returned hidden states are rounded
once, to bf16, at the end.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.encoders.decoder_lm_config import ACTIVATIONS, DecoderLMConfig
from vidax.errors import CheckpointError, InputError
from vidax.nn.attention import SegmentIds, dot_product_attention
from vidax.nn.inputs import compute_dtype
from vidax.nn.kernels import from_stack_bits, stack_bits_state
from vidax.nn.layers import Linear, RMSNorm
from vidax.nn.rope import apply_rope
from vidax.nn.stack import scan_layers, stacked
from vidax.parallel.offload import streams_layers
from vidax.parallel.rules import column_parallel, row_parallel
from vidax.weights.loader import KeyRules

_F32 = jnp.float32

#: Logical axes of the parameters (see :mod:`vidax.parallel.rules`): q/k/v and the MLP's gate / up
#: column-parallel (output split over ``heads`` / ``mlp``, their biases with it), ``o_proj`` and
#: ``down_proj`` row-parallel (input split; their biases replicated, added once after the
#: reduction), the token embedding split by vocabulary rows. Norm scales are replicated.
DECODER_LM_PARAM_AXES = (
    *column_parallel(r"^layers/self_attn/(q_proj|k_proj|v_proj)", "heads"),
    *row_parallel(r"^layers/self_attn/o_proj", "heads"),
    *column_parallel(r"^layers/mlp/(gate_proj|up_proj)", "mlp"),
    *row_parallel(r"^layers/mlp/down_proj", "mlp"),
    (r"^embed_tokens/embedding$", ("vocab", "embed")),
)


# ----------------------------------------------------------------------------- modules


def _rms_norm(cfg: DecoderLMConfig, dtype: Any, param_dtype: Any, dim: int | None = None) -> RMSNorm:
    """``LlamaRMSNorm`` / ``Qwen2RMSNorm`` (fp32 statistics, rounded to ``dtype``, then times the
    weight: ``weight * x̂.to(dtype)``, as T5's) or ``Gemma3RMSNorm`` (``(x̂ · (1 + w)).to(dtype)``,
    all in fp32), over ``dim`` (default the hidden size)."""
    return RMSNorm(
        cfg.hidden_size if dim is None else dim,
        cfg.rms_norm_eps,
        weight=cfg.norm_weight,
        dtype=dtype,
        weight_after_cast=cfg.norm_weight_after_cast,
        param_dtype=param_dtype,
    )


class DecoderAttention(nnx.Module):
    """``LlamaAttention`` / ``Qwen2_5_VLAttention`` / ``Gemma3Attention``: causal GQA
    self-attention with RoPE.

    q ``(B, L, N, K)``, k / v ``(B, L, N_kv, K)`` (not repeated: the attention dispatch groups
    the query heads); with ``qk_norm`` (Gemma 3) q and k are RMS-normed per head first;
    rotate-half RoPE on q and k in fp32; scores scaled by ``config.attention_scale``
    (``1 / sqrt(K)`` by default; Gemma 3: ``query_pre_attn_scalar ** -0.5``).
    """

    def __init__(self, cfg: DecoderLMConfig, attention: str, *, dtype, param_dtype, rngs):
        n, nkv, k, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        lin = partial(Linear, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.q_proj = lin(d, n * k, use_bias=cfg.qkv_bias)
        self.k_proj = lin(d, nkv * k, use_bias=cfg.qkv_bias)
        self.v_proj = lin(d, nkv * k, use_bias=cfg.qkv_bias)
        self.o_proj = lin(n * k, d, use_bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = _rms_norm(cfg, dtype, param_dtype, k)
            self.k_norm = _rms_norm(cfg, dtype, param_dtype, k)
        self.qk_norm = cfg.qk_norm
        self.scale = cfg.attention_scale
        self.shape = (n, nkv, k)
        self.attention = attention

    def __call__(self, x, cos, sin, segment_ids, bias=None):
        """x (B, L, D) compute dtype, cos / sin (L, K/2) f32, segment_ids or None, bias (1, 1, L, L)
        f32 or None (the sliding window: 0 or -inf) -> (B, L, D)."""
        b, length, _ = x.shape
        n, nkv, k = self.shape
        q = self.q_proj(x).reshape(b, length, n, k)
        key = self.k_proj(x).reshape(b, length, nkv, k)
        if self.qk_norm:
            q, key = self.q_norm(q), self.k_norm(key)
        q = apply_rope(q, cos, sin, layout="rotate_half")
        key = apply_rope(key, cos, sin, layout="rotate_half")
        v = self.v_proj(x).reshape(b, length, nkv, k)
        out = dot_product_attention(
            q, key, v, causal=True, segment_ids=segment_ids, bias=bias, scale=self.scale, implementation=self.attention
        )
        return self.o_proj(out.reshape(b, length, n * k))


class DecoderMLP(nnx.Module):
    """``LlamaMLP`` / ``Qwen2MLP`` / ``Gemma3MLP``: ``down_proj(act(gate_proj(x)) * up_proj(x))``
    (act: silu, Gemma: GELU-tanh)."""

    def __init__(self, cfg: DecoderLMConfig, *, dtype, param_dtype, rngs):
        bias = cfg.mlp_bias
        lin = partial(Linear, use_bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.gate_proj = lin(cfg.hidden_size, cfg.intermediate_size)
        self.up_proj = lin(cfg.hidden_size, cfg.intermediate_size)
        self.down_proj = lin(cfg.intermediate_size, cfg.hidden_size)
        self.act = cfg.hidden_act

    def __call__(self, x):
        return self.down_proj(ACTIVATIONS[self.act](self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    """``LlamaDecoderLayer`` / ``Qwen2_5_VLDecoderLayer``: pre-norm attention and MLP, each with
    a residual; ``Gemma3DecoderLayer`` (``sandwich_norms``): the attention and MLP outputs normed
    too before their residuals. The residual stream ``h`` is fp32."""

    def __init__(self, cfg: DecoderLMConfig, attention: str, *, dtype, param_dtype, rngs):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.self_attn = DecoderAttention(cfg, attention, **kw)
        self.mlp = DecoderMLP(cfg, **kw)
        self.input_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.post_attention_layernorm = _rms_norm(cfg, dtype, param_dtype)
        if cfg.sandwich_norms:
            self.pre_feedforward_layernorm = _rms_norm(cfg, dtype, param_dtype)
            self.post_feedforward_layernorm = _rms_norm(cfg, dtype, param_dtype)
        self.sandwich = cfg.sandwich_norms

    def __call__(self, h, cos, sin, segment_ids, bias=None):
        attn = self.self_attn(self.input_layernorm(h), cos, sin, segment_ids, bias)
        if not self.sandwich:
            h = h + attn.astype(h.dtype)
            return h + self.mlp(self.post_attention_layernorm(h)).astype(h.dtype)
        h = h + self.post_attention_layernorm(attn).astype(h.dtype)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h))).astype(h.dtype)


def mask_segments(attention_mask: Any, shape: tuple[int, int]) -> SegmentIds | None:
    """The segment ids of a decoder LM's ``attention_mask`` (``shape`` ``(B, L)``, nonzero for
    real tokens; None: none): every query may attend every real key (causality limits it to
    earlier ones).

    Raises:
        InputError: the mask's shape is not ``shape``.
    """
    if attention_mask is None:
        return None
    mask = jnp.asarray(attention_mask)
    if mask.shape != tuple(shape):
        raise InputError(f"attention_mask must have shape (B, L) = {tuple(shape)}; got {mask.shape}.")
    return SegmentIds(jnp.ones(shape, jnp.int32), (mask != 0).astype(jnp.int32))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Positions:
    """What every layer needs besides ``h``: per attention kind the RoPE tables ``cos`` / ``sin``
    (T, L, K/2) f32 and the window (T,) int32 (L for a global kind, never binding), the kind of
    each layer (n,) int32, the key-padding segments; ``windowed``: whether a mask bias is built."""

    cos: jax.Array
    sin: jax.Array
    windows: jax.Array
    kinds: jax.Array
    segments: SegmentIds | None
    windowed: bool = dataclasses.field(metadata=dict(static=True))

    @classmethod
    def build(cls, config: DecoderLMConfig, length: int, segments: SegmentIds | None) -> _Positions:
        kinds = config.attention_kinds
        tables = [kind.tables(length, config.head_dim) for kind in kinds]
        windows = [length if kind.window is None else kind.window for kind in kinds]
        return cls(
            jnp.stack([c for c, _ in tables]),
            jnp.stack([s for _, s in tables]),
            jnp.asarray(windows, jnp.int32),
            jnp.asarray(config.layer_kinds, jnp.int32),
            segments,
            any(kind.window is not None for kind in kinds),
        )

    def of_layer(self, i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """(cos, sin, bias) of layer ``i`` (traced): bias (1, 1, L, L) f32, 0 where ``q - k <
        window`` and -inf elsewhere (causality and padding are the attention's own masks)."""
        kind = self.kinds[i]
        bias = None
        if self.windowed:
            length = self.cos.shape[1]
            q = jnp.arange(length, dtype=jnp.int32)
            inside = (q[:, None] - q[None, :]) < self.windows[kind]
            bias = jnp.where(inside, 0.0, -jnp.inf).astype(_F32)[None, None]
        return self.cos[kind], self.sin[kind], bias


def init_decoder(
    module: nnx.Module,
    config: Any,
    what: str,
    dtype: Any,
    param_dtype: Any,
    rngs: nnx.Rngs | None,
    layers: Callable[[dict], dict],
) -> None:
    """The constructor every decoder-LM text encoder shares (:class:`DecoderLM`, Gemma 4's):
    ``module.embed_tokens`` (V, D), then the attributes ``layers(kw)`` returns (``kw``: the
    ``dtype`` / ``param_dtype`` / ``rngs`` keywords of a layer), then ``module.norm`` (D,),
    ``module.config`` and ``module.dtype`` (the compute dtype).

    Args:
        what: the module, named in the dtype error. param_dtype: None: ``dtype``. rngs: None:
            ``nnx.Rngs(0)`` (values are overwritten by the checkpoint).

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """
    dtype = compute_dtype(dtype, what)
    param_dtype = dtype if param_dtype is None else param_dtype
    kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0) if rngs is None else rngs)
    module.embed_tokens = nnx.Embed(config.vocab_size, config.hidden_size, **kw)
    for name, value in layers(kw).items():
        setattr(module, name, value)
    module.norm = _rms_norm(config, dtype, param_dtype)
    module.config = config
    module.dtype = dtype


class DecoderLM(nnx.Module):
    """A decoder-only language model run as a text encoder: ``transformers.LlamaModel``,
    ``Qwen2_5_VLTextModel`` or ``Gemma3TextModel`` (the module docstring lists what differs and
    what stays fp32).

    Parameters mirror the reference tree: ``embed_tokens/embedding`` (V, D), ``layers/...``
    stacked on a leading axis of n (``self_attn/{q,k,v,o}_proj``, ``mlp/{gate,up,down}_proj``,
    ``input_layernorm``, ``post_attention_layernorm``; Gemma 3 also ``self_attn/{q,k}_norm``,
    ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``), ``norm/scale`` (D,).

    Args:
        config: a :class:`~vidax.encoders.decoder_lm_config.LlamaTextConfig`,
            :class:`~vidax.encoders.decoder_lm_config.Qwen25VLTextConfig` or
            :class:`vidax.encoders.gemma3.Gemma3TextConfig`.
        dtype: compute dtype, float32 or bfloat16.
        param_dtype: dtype of freshly built parameters (the loader sets the stored dtype).
        rngs: initialisers' keys (values are overwritten by the checkpoint).
        attention: implementation for :func:`vidax.nn.attention.dot_product_attention`.

    Raises:
        InputError: ``dtype`` is not float32 or bfloat16.
    """

    #: Its stacked layers (dotted attribute paths): passed into its jitted forward as uint16 views
    #: on CPU (:func:`vidax.nn.kernels.stacks.as_stack_bits`).
    stacked_paths: ClassVar[tuple[str, ...]] = ("layers",)

    def __init__(
        self,
        config: DecoderLMConfig,
        *,
        dtype: Any = _F32,
        param_dtype: Any = None,
        rngs: nnx.Rngs | None = None,
        attention: str = "auto",
    ):
        init_decoder(
            self,
            config,
            "decoder text encoder",
            dtype,
            param_dtype,
            rngs,
            lambda kw: dict(
                layers=stacked(
                    lambda r: DecoderLayer(config, attention, **{**kw, "rngs": r}), config.num_hidden_layers, kw["rngs"]
                )
            ),
        )

    def embed(self, input_ids: jax.Array) -> jax.Array:
        """``embed_tokens(input_ids)``: (B, L) int ids -> (B, L, D) in the compute dtype.

        Raises:
            InputError: ``input_ids`` is not a 2-D integer array.
        """
        ids = jnp.asarray(input_ids)
        if ids.ndim != 2 or not jnp.issubdtype(ids.dtype, jnp.integer):
            raise InputError(f"input_ids must be a (B, L) integer array; got shape {ids.shape}, dtype {ids.dtype}.")
        table = self.embed_tokens.embedding[...]
        h = jnp.take(table, ids, axis=0)
        if self.config.embed_scale is not None:
            # Gemma's scale is a float32 tensor cast to the table's dtype (sqrt(3840) = 61.97 is
            # 62.0 in bf16) and multiplied in it, as Gemma3TextScaledWordEmbedding.
            h = h * jnp.asarray(np.float32(self.config.embed_scale)).astype(table.dtype)
        return h.astype(self.dtype)

    def _prepare(self, input_ids, attention_mask, inputs_embeds):
        """-> (h0 (B, L, D) fp32, :class:`_Positions`)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError("pass exactly one of input_ids and inputs_embeds.")
        if inputs_embeds is None:
            h = self.embed(input_ids)
        else:
            h = jnp.asarray(inputs_embeds)
            d = self.config.hidden_size
            if h.ndim != 3 or h.shape[-1] != d or not jnp.issubdtype(h.dtype, jnp.floating):
                raise InputError(
                    f"inputs_embeds must be a (B, L, {d}) float array; got shape {h.shape}, dtype {h.dtype}."
                )
        length = h.shape[1]
        return h.astype(_F32), _Positions.build(self.config, length, mask_segments(attention_mask, h.shape[:2]))

    def _run(self, h, pos: _Positions, num_layers: int, collect: bool):
        """The first ``num_layers`` layers on ``h``; with ``collect`` also every layer's output
        stacked (n, B, L, D). Each layer picks its kind's RoPE tables and window mask by its index
        (carried beside ``h``)."""

        def body(layer, carry):
            x, i = carry
            cos, sin, bias = pos.of_layer(i)
            return layer(x, cos, sin, pos.segments, bias), i + 1

        out = scan_layers(self.layers, (h, jnp.zeros((), jnp.int32)), body, num_layers=num_layers, collect=collect)
        if collect:
            (last, _), (states, _) = out
            return last, states
        return out[0]

    def __call__(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        *,
        inputs_embeds: jax.Array | None = None,
        output_layer: int = -1,
    ) -> jax.Array:
        """One entry of the reference's ``output_hidden_states=True`` tuple.

        Args:
            input_ids: (B, L) integer token ids in ``[0, vocab_size)``; or None with
                ``inputs_embeds``.
            attention_mask: (B, L), nonzero for real tokens, 0 for padding (right padding; see
                the module docstring); None = no padding (causal only).
            inputs_embeds: (B, L, D) float token embeddings instead of ``input_ids`` (e.g.
                :meth:`embed` with image features scattered in, as LLaVA does).
            output_layer: a static int indexing the ``num_hidden_layers + 1`` hidden states: 0 is
                the embeddings, ``i`` the output of layer ``i``, ``n`` (= ``-1``, the default)
                ``last_hidden_state`` (after the final norm); negative values count from the
                end, so HunyuanVideo's ``hidden_states[-(2 + 1)]`` is ``output_layer=-3``. Only
                the layers up to that one run.

        Returns:
            (B, L, D) in the compute dtype.

        Raises:
            InputError: malformed inputs, both or neither of ``input_ids`` / ``inputs_embeds``,
                ``output_layer`` out of range.
        """
        n = self.config.num_hidden_layers
        if not isinstance(output_layer, int) or isinstance(output_layer, bool) or not -(n + 1) <= output_layer <= n:
            raise InputError(
                f"output_layer={output_layer!r} must be an int in [{-(n + 1)}, {n}] (an index "
                f"into the {n + 1} hidden states: embeddings, then {n} layers, the last normed)."
            )
        index = output_layer % (n + 1)
        h, pos = self._prepare(input_ids, attention_mask, inputs_embeds)
        h = self._run(h, pos, index, collect=False)
        if index == n:
            return self.norm(h).astype(self.dtype)
        return h.astype(self.dtype)

    def all_hidden_states(
        self,
        input_ids: jax.Array | None = None,
        attention_mask: jax.Array | None = None,
        *,
        inputs_embeds: jax.Array | None = None,
    ) -> jax.Array:
        """All of the reference's ``output_hidden_states=True`` tuple, stacked.

        Args: as :meth:`__call__` (without ``output_layer``).

        Returns:
            (n + 1, B, L, D) in the compute dtype, n = ``num_hidden_layers``: entry ``i`` is the
            reference's ``hidden_states[i]`` (0 the embeddings, ``n`` after the final norm).
            Cosmos-Predict2.5 normalises and concatenates entries 1..n.

        Raises:
            InputError: malformed inputs.
        """
        h, pos = self._prepare(input_ids, attention_mask, inputs_embeds)
        n = self.config.num_hidden_layers
        last, states = self._run(h, pos, n, collect=True)
        return jnp.concatenate(
            [h[None].astype(self.dtype), states[:-1].astype(self.dtype), self.norm(last)[None].astype(self.dtype)]
        )


# ----------------------------------------------------------------------------- loading


def decoder_lm_key_rules(config: DecoderLMConfig, keys: Any) -> KeyRules:
    """Key mapping of a checkpoint holding the language model described by ``config``.

    The language model's keys are ``<prefix>embed_tokens.weight``, ``<prefix>layers.{i}....``
    (stacked) and ``<prefix>norm.weight``; ``<prefix>`` is found from the
    ``embed_tokens.weight`` key among ``keys`` and must be one of ``config.LAYOUTS``, which also
    names the other parts such a checkpoint holds that this module does not run (vision tower,
    projector, LM head): those are declared unused and never read.

    Raises:
        CheckpointError: no ``embed_tokens.weight`` key under a known prefix.
    """
    keys = set(keys)
    layouts = type(config).LAYOUTS
    found = [p for p in sorted(layouts, key=len, reverse=True) if f"{p}embed_tokens.weight" in keys]
    if not found:
        seen = sorted(k for k in keys if k.endswith("embed_tokens.weight"))[:4]
        raise CheckpointError(
            f"no language-model embedding among the checkpoint's tensors: expected one of "
            f"{[p + 'embed_tokens.weight' for p in layouts]}, found {seen or 'none'}."
        )
    prefix = found[0]
    return KeyRules(stacked=("layers",), prefix=prefix, unused=layouts[prefix])


def _hidden(model, ids, mask, output_layer: int | None, stack_axis: int):
    if output_layer is None:
        return jnp.moveaxis(model.all_hidden_states(ids, mask), 0, stack_axis)
    return model(ids, mask, output_layer=output_layer)


@functools.lru_cache(maxsize=16)  # one entry per encoder structure and output layer in use
def _hidden_fn(graphdef, output_layer: int | None, masked: bool, stack_axis: int = 0):
    """The jitted ``(params, ids, mask) -> hidden`` of one encoder structure; parameters are an
    argument (no closure holds them), so pipelines of one structure share the compiled function."""

    @jax.jit
    def run(params, ids, mask):
        model = nnx.merge(graphdef, from_stack_bits(params))
        return _hidden(model, ids, mask if masked else None, output_layer, stack_axis)

    return run


def encode_hidden_states(
    encoder: DecoderLM,
    input_ids: Any,
    attention_mask: Any = None,
    *,
    output_layer: int | None = -1,
    stack_axis: int = 0,
) -> jax.Array:
    """Jitted :meth:`DecoderLM.__call__` (``output_layer`` an int: (B, L, D)) or
    :meth:`DecoderLM.all_hidden_states` (``output_layer=None``: (n + 1, B, L, D), the layer axis
    moved to ``stack_axis``: -1 gives (B, L, D, n + 1), ``torch.stack(hidden_states, dim=-1)``)
    of token ids (B, L) and an optional mask (B, L), in the encoder's dtype. An encoder whose
    layers stream (:func:`~vidax.parallel.offload.streams_layers`) runs outside a jit, a jitted
    program per chunk of layers."""
    ids = jnp.asarray(input_ids)
    if streams_layers(encoder):
        mask = None if attention_mask is None else jnp.asarray(attention_mask)
        return _hidden(encoder, ids, mask, output_layer, stack_axis)
    fn = _hidden_fn(nnx.graphdef(encoder), output_layer, attention_mask is not None, stack_axis)
    mask = jnp.zeros((), jnp.int32) if attention_mask is None else jnp.asarray(attention_mask)
    return fn(stack_bits_state(encoder), ids, mask)
