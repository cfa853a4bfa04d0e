"""The image side of LLaVA (transformers ``LlavaForConditionalGeneration``), in JAX.

HunyuanVideo image-to-video conditions its Llama text encoder on the image: the pipeline
(diffusers ``HunyuanVideoImageToVideoPipeline._get_llama_prompt_embeds``) runs the whole LLaVA
model, whose ``LlavaModel.get_image_features`` encodes the image and whose language model reads
the result in place of the image tokens. This module is the image half, as
``get_image_features(pixel_values)`` computes it:

1. the CLIP vision tower (:class:`vidax.encoders.clip.CLIPVisionEncoder`, the same code as
   Wan's image encoder), hidden state ``vision_feature_layer`` (``hidden_states[-2]``: the output
   of the second-to-last block, no post layernorm);
2. ``vision_feature_select_strategy``: ``"default"`` drops the class token, ``"full"`` keeps it;
3. the multi-modal projector ``linear_2(act(linear_1 x))`` (``projector_hidden_act`` ``gelu``,
   the exact erf form), from the vision width to the language model's width.

The splicing of the features into the token sequence belongs to the pipeline, the Llama
language model to :mod:`vidax.encoders` 's decoder LM; the checkpoint file holds all three, and
:data:`LLAVA_VISION` reads only the vision tower and projector tensors (the language model's are ``KeyRules.unused``)
and leaves the ``language_model`` / ``lm_head`` tensors to the language model's loader.

Checkpoint keys: ``LlavaForConditionalGeneration.save_pretrained`` of transformers 5.24 writes
``vision_tower.{embeddings,pre_layrnorm,encoder,post_layernorm}.*`` and
``multi_modal_projector.linear_{1,2}.*`` (and ``language_model.model.*``, ``language_model.lm_head.*``);
files of transformers 4 (xtuner/llava-llama-3-8b-v1_1-transformers, which the HunyuanVideo-I2V
converter loads) have ``vision_tower.vision_model.*``; transformers' in-memory layout (as 4.5x
files may hold it) ``model.vision_tower.*`` / ``model.multi_modal_projector.*``. All three load.

Precision: every parameter in ``dtype`` (float32 or bfloat16; transformers has no
``_keep_in_fp32_modules`` for LLaVA); the vision tower keeps its fp32 residual stream and fp32
norm statistics / softmax (see :mod:`vidax.encoders.clip`), the projector computes in ``dtype``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from vidax.config import ConfigBase
from vidax.encoders.clip import (
    _ACTIVATIONS,
    _TOWER_IGNORED,
    CLIP_PARAM_AXES,
    CLIPVisionConfig,
    CLIPVisionEncoder,
    _module_kwargs,
)
from vidax.errors import ConfigError
from vidax.nn.kernels import from_stack_bits, stack_bits_state
from vidax.nn.layers import Linear
from vidax.registry import ComponentSpec
from vidax.weights.loader import KeyRules, PendingLoad, Placement

#: Source-key prefixes of the language model's tensors in a LLaVA file (transformers 4 and 5
#: layouts): another loader's (the ``LlamaModel`` plan of :func:`load_llava_text_encoder`), so
#: :data:`LLAVA_VISION` consumes them unread; any other key it does not map is unexpected.
LLAVA_LANGUAGE_PREFIXES = ("language_model.", "model.language_model.", "lm_head.")

#: Logical axes: the vision tower's as :data:`~vidax.encoders.clip.CLIP_PARAM_AXES`; the
#: projector's ``linear_1`` column-parallel, ``linear_2`` row-parallel (bias added once).
LLAVA_VISION_PARAM_AXES = CLIP_PARAM_AXES + (
    (r"^multi_modal_projector/linear_1/kernel$", ("embed", "mlp")),
    (r"^multi_modal_projector/linear_1/bias$", ("mlp",)),
    (r"^multi_modal_projector/linear_2/kernel$", ("mlp", "embed")),
)

_STRATEGIES = ("default", "full")


@dataclasses.dataclass(frozen=True)
class LlavaVisionConfig(ConfigBase):
    """What ``LlavaModel.get_image_features`` reads from a ``LlavaConfig`` (``config.json`` of a
    ``LlavaForConditionalGeneration`` folder, HunyuanVideo-I2V's ``text_encoder/``).

    ``vision_config`` is parsed by :class:`~vidax.encoders.clip.CLIPVisionConfig` (it must be a
    ``clip_vision_model``); of ``text_config`` only ``hidden_size`` is read (the projector's
    output width); the rest of it is the language model's, validated by that model's config.

    Attributes:
        vision_config: the CLIP vision tower.
        text_hidden_size: D_text, the language model width (``text_config.hidden_size``).
        projector_hidden_act: the projector activation (``gelu``: exact erf).
        vision_feature_layer: index into the vision tower's ``num_hidden_layers + 1`` hidden
            states (``-2``: the second-to-last block's output). A list of layers (their
            concatenation) is refused.
        vision_feature_select_strategy: ``"default"`` (drop the class token) or ``"full"``.
        multimodal_projector_bias: whether ``linear_1`` / ``linear_2`` have biases.
        image_token_index: id of the image placeholder token (for the pipeline's splicing).
        image_seq_length: image tokens per image the processor writes (informational).
        model_type: ``"llava"``.

    Raises (``from_config_dict``):
        ConfigError: a missing or malformed ``vision_config`` / ``text_config``, an unknown
            key, or a setting not implemented.
    """

    # Generic PretrainedConfig keys (as for the CLIP towers), and the language model's head /
    # generation settings (older LlavaConfigs wrote vocab_size and ignore_index).
    IGNORED: ClassVar[frozenset[str]] = _TOWER_IGNORED | {"eos_token_id", "vocab_size", "ignore_index", "use_cache"}

    vision_config: CLIPVisionConfig | None = None
    text_hidden_size: int | None = None
    projector_hidden_act: str = "gelu"
    vision_feature_layer: int = -2
    vision_feature_select_strategy: str = "default"
    multimodal_projector_bias: bool = True
    image_token_index: int = 32000
    image_seq_length: int = 576
    model_type: str = "llava"

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        config = dict(config)
        vision, text = config.pop("vision_config", None), config.pop("text_config", None)
        if not isinstance(vision, Mapping) or not isinstance(text, Mapping):
            raise ConfigError(
                f"{source}: a LlavaConfig needs 'vision_config' and 'text_config' dicts (as "
                f"save_pretrained writes them); got {type(vision).__name__} and {type(text).__name__}."
            )
        hidden = text.get("hidden_size")
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            raise ConfigError(f"{source}: text_config.hidden_size={hidden!r} must be a positive integer.")
        if "image_token_id" in config:  # LlavaConfig.attribute_map
            config["image_token_index"] = config.pop("image_token_id")
        config["vision_config"] = CLIPVisionConfig.from_config_dict(vision, source=f"{source} (vision_config)")
        config["text_hidden_size"] = hidden
        return super().from_config_dict(config, source=source)

    def validate(self, source: str) -> None:
        if self.model_type != "llava":
            raise ConfigError(f"{source}: model_type={self.model_type!r} is not 'llava'.")
        n = self.vision_config.num_hidden_layers
        layer = self.vision_feature_layer
        if isinstance(layer, tuple):
            raise ConfigError(
                f"{source}: vision_feature_layer={list(layer)!r} (several layers, concatenated) is "
                "not implemented by vidax; only one int index is supported."
            )
        if not isinstance(layer, int) or isinstance(layer, bool) or not -(n + 1) <= layer <= n:
            raise ConfigError(
                f"{source}: vision_feature_layer={layer!r} must be an int in [{-(n + 1)}, {n}] (an "
                f"index into the vision tower's {n + 1} hidden states)."
            )
        if self.vision_feature_select_strategy not in _STRATEGIES:
            raise ConfigError(
                f"{source}: vision_feature_select_strategy={self.vision_feature_select_strategy!r} "
                f"is not one of {list(_STRATEGIES)}."
            )
        if self.projector_hidden_act not in _ACTIVATIONS:
            raise ConfigError(
                f"{source}: projector_hidden_act={self.projector_hidden_act!r} is not implemented; "
                f"supported: {sorted(_ACTIVATIONS)}."
            )
        if not isinstance(self.multimodal_projector_bias, bool):
            raise ConfigError(
                f"{source}: multimodal_projector_bias={self.multimodal_projector_bias!r} must be true or false."
            )

    @property
    def num_image_tokens(self) -> int:
        """N_img, feature rows per image: the patches, plus the class token for ``"full"``."""
        extra = 1 if self.vision_feature_select_strategy == "full" else 0
        return self.vision_config.num_patches + extra


class LlavaMultiModalProjector(nnx.Module):
    """``linear_2(act(linear_1 x))`` (``LlavaMultiModalProjector``): D_vision -> D_text."""

    def __init__(self, cfg: LlavaVisionConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        kw = dict(use_bias=cfg.multimodal_projector_bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_1 = Linear(cfg.vision_config.hidden_size, cfg.text_hidden_size, **kw)
        self.linear_2 = Linear(cfg.text_hidden_size, cfg.text_hidden_size, **kw)
        self.act = _ACTIVATIONS[cfg.projector_hidden_act]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear_2(self.act(self.linear_1(x)))


class LlavaVisionEncoder(nnx.Module):
    """LLaVA's vision tower and multi-modal projector (``LlavaModel.get_image_features``).

    ``config`` is the parsed ``LlavaConfig``; ``dtype``, ``param_dtype`` and ``rngs`` (and the
    InputError for another dtype) as :class:`~vidax.encoders.clip.CLIPVisionEncoder`'s, whose
    tower it builds.
    """

    def __init__(self, config: LlavaVisionConfig, *, dtype: Any = jnp.float32,
                 param_dtype: Any = None, rngs: nnx.Rngs | None = None):  # fmt: skip
        dtype, kw = _module_kwargs(dtype, param_dtype, rngs, "LLaVA vision encoder")
        self.vision_tower = CLIPVisionEncoder(config.vision_config, **kw)
        self.multi_modal_projector = LlavaMultiModalProjector(config, **kw)
        self.config = config
        self.dtype = dtype

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        """Projected image features, ``get_image_features(pixel_values).pooler_output`` stacked.

        Args:
            pixel_values: ``(B, S, S, 3)`` float, channels last, S = ``vision_config.image_size``,
                normalised by :func:`vidax.encoders.clip.clip_preprocess` with the checkpoint's
                ``preprocessor_config.json``.

        Returns:
            ``(B, N_img, D_text)`` in the compute dtype, N_img = :attr:`LlavaVisionConfig.
            num_image_tokens` (576 for a 336 px / 14 px-patch tower with ``"default"``), patches
            in row-major order.

        Raises:
            InputError: ``pixel_values`` is not ``(B, S, S, 3)`` floating point.
        """
        cfg = self.config
        h = self.vision_tower(pixel_values, output_layer=cfg.vision_feature_layer)
        if cfg.vision_feature_select_strategy == "default":
            h = h[:, 1:]
        return self.multi_modal_projector(h)


def llava_vision_key_rules(config: Any = None, keys: Any = ()) -> KeyRules:
    """Key mapping of the vision tower and projector tensors of a LLaVA checkpoint with tensor
    names ``keys``; the language model's keys (:data:`LLAVA_LANGUAGE_PREFIXES`) are another
    loader's and declared unused. ``vision_tower.encoder.layers`` is stacked; the transformers 4
    ``vision_tower.vision_model.`` and the ``model.`` prefixes are renamed away.
    """
    keys = [str(k) for k in keys]
    renames: list[tuple[str, str]] = []
    if any(k.startswith("model.vision_tower.") or k.startswith("model.multi_modal_projector.") for k in keys):
        renames += [("model.vision_tower.", "vision_tower."),
                    ("model.multi_modal_projector.", "multi_modal_projector.")]  # fmt: skip
    if any(k.startswith(("vision_tower.vision_model.", "model.vision_tower.vision_model.")) for k in keys):
        renames.append(("vision_tower.vision_model.", "vision_tower."))
    return KeyRules(stacked=("vision_tower.encoder.layers",), renames=tuple(renames), unused=LLAVA_LANGUAGE_PREFIXES)


#: LLaVA's vision tower + projector as a component of the one loader
#: (:func:`vidax.weights.component.plan_component`); not registered: it is a part of
#: ``LlavaForConditionalGeneration``, read with the language model by :func:`load_llava_text_encoder`.
LLAVA_VISION = ComponentSpec(
    "LlavaVisionTower",
    "image_encoder",
    config=f"{__name__}:LlavaVisionConfig",
    model=f"{__name__}:LlavaVisionEncoder",
    key_rules=f"{__name__}:llava_vision_key_rules",
    param_axes=f"{__name__}:LLAVA_VISION_PARAM_AXES",
)


@functools.lru_cache(maxsize=16)  # one entry per vision-tower structure in use
def _features_fn(graphdef):
    @jax.jit
    def features(params, pixels):
        return nnx.merge(graphdef, params)(pixels)

    return features


def llava_image_features(encoder: LlavaVisionEncoder, pixel_values: Any) -> jax.Array:
    """``(B, N_img, D_text)`` image features of ``(B, S, S, 3)`` preprocessed pixels (jitted once
    per encoder structure; the parameters are an argument, not captured). See
    :meth:`LlavaVisionEncoder.__call__`."""
    return _features_fn(nnx.graphdef(encoder))(nnx.state(encoder), jnp.asarray(pixel_values))


# ----------------------------------------------------------------------------- the whole LLaVA


@dataclasses.dataclass(frozen=True)
class LlavaTextEncoderConfig:
    """A ``LlavaConfig`` read for :class:`LlavaTextEncoder`: its language model
    (:class:`~vidax.encoders.decoder_lm_config.LlamaTextConfig` of ``text_config``), its image side
    (:class:`LlavaVisionConfig`) and ``pad_token_id`` (HunyuanVideo-I2V's pipeline builds the
    attention mask of the image-expanded sequence from it).

    Attributes:
        text: the Llama language model. vision: the vision tower and projector.
        pad_token_id: the config's ``pad_token_id`` (None when the file has none).
    """

    text: Any
    vision: LlavaVisionConfig
    pad_token_id: int | None = None

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json") -> LlavaTextEncoderConfig:
        """Raises: ConfigError: as :class:`LlavaVisionConfig` and ``LlamaTextConfig`` refuse."""
        from vidax.encoders.decoder_lm_config import LlamaTextConfig

        config = dict(config)
        pad = config.pop("pad_token_id", None)
        if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool) or pad < 0):
            raise ConfigError(f"{source}: pad_token_id={pad!r} must be a non-negative integer or null.")
        return cls(
            text=LlamaTextConfig.from_config_dict(config, source=source),
            vision=LlavaVisionConfig.from_config_dict(config, source=source),
            pad_token_id=pad,
        )

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> LlavaTextEncoderConfig:
        from vidax.config import read_json_object

        path = os.fspath(path)
        return cls.from_config_dict(read_json_object(path), source=path)


class LlavaTextEncoder(nnx.Module):
    """``transformers.LlavaForConditionalGeneration`` run as a text encoder (HunyuanVideo-I2V's
    ``text_encoder``): the Llama language model (``language_model``,
    :class:`~vidax.encoders.decoder_lm.DecoderLM`) and the vision tower + projector (``vision``,
    :class:`LlavaVisionEncoder`), both loaded from the one folder by :func:`load_llava_text_encoder`.

    Args:
        config: :class:`LlavaTextEncoderConfig`. dtype: compute dtype (float32 / bfloat16).
        param_dtype: dtype of freshly built parameters. rngs: initialiser keys.
    """

    #: Its stacked layers (dotted attribute paths): passed into its jitted forward as uint16 views
    #: on CPU (:func:`vidax.nn.kernels.stacks.as_stack_bits`); the vision tower's (run to a chosen layer) as they are.
    stacked_paths: ClassVar[tuple[str, ...]] = ("language_model.layers",)

    def __init__(self, config: LlavaTextEncoderConfig, *, dtype: Any = jnp.float32, param_dtype: Any = None,
                 rngs: nnx.Rngs | None = None):  # fmt: skip
        from vidax.encoders.decoder_lm import DecoderLM

        rngs = nnx.Rngs(0) if rngs is None else rngs
        self.language_model = DecoderLM(config.text, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.vision = LlavaVisionEncoder(config.vision, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.config = config
        self.dtype = dtype

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        *,
        pixel_values: jax.Array | None = None,
        output_layer: int = -1,
    ) -> jax.Array:
        """One hidden state of ``LlavaForConditionalGeneration(input_ids, pixel_values,
        attention_mask, output_hidden_states=True).hidden_states[output_layer]``.

        With ``pixel_values`` the token embeddings at the ``image_token_index`` positions are
        replaced by the image features (``LlavaModel.forward``'s ``masked_scatter``): row ``b``'s
        ``k``-th image token takes feature row ``k`` of image ``b``, so every row must hold exactly
        ``N_img`` image tokens (what the reference's count check demands with one image per row).
        Positions are ``arange(L)``, which equals the reference's ``position_ids`` on the real
        tokens of right-padded rows (see :mod:`vidax.encoders.decoder_lm`).

        Args:
            input_ids: (B, L) int. attention_mask: (B, L) 0/1 or None.
            pixel_values: (B, S, S, 3) float (:func:`vidax.encoders.clip.clip_preprocess`) or None.
            output_layer: static index into the ``num_hidden_layers + 1`` hidden states.

        Returns:
            (B, L, D_text) in the compute dtype.
        """
        lm = self.language_model
        h = lm.embed(input_ids)
        if pixel_values is not None:
            feats = self.vision(pixel_values).astype(h.dtype)  # (B, N_img, D)
            is_image = jnp.asarray(input_ids) == self.config.vision.image_token_index
            k = jnp.clip(jnp.cumsum(is_image, axis=1) - 1, 0, feats.shape[1] - 1)
            h = jnp.where(is_image[..., None], jnp.take_along_axis(feats, k[..., None], axis=1), h)
        return lm(attention_mask=attention_mask, inputs_embeds=h, output_layer=output_layer)


#: The parameter axes of :class:`LlavaTextEncoder`'s two parts, each on its own module's paths
#: (the loaders place each part separately).
def _llava_text_axes():
    from vidax.encoders.decoder_lm import DECODER_LM_PARAM_AXES

    return DECODER_LM_PARAM_AXES + LLAVA_VISION_PARAM_AXES


LLAVA_TEXT_PARAM_AXES = _llava_text_axes()


def load_llava_text_encoder(
    folder: str,
    *,
    dtype: Any,
    placement: Placement | None,
    mesh: Any,
    config: LlavaTextEncoderConfig,
    variant: str | None = None,
) -> PendingLoad:
    """The registered loader of ``LlavaForConditionalGeneration`` (:class:`LlavaTextEncoder`): two
    plans of the one loader on the same folder, the language model as ``LlamaModel`` (the LM head
    not read) and the vision tower and projector as :data:`LLAVA_VISION`; each tensor of the file
    is read by exactly one of them. ``placement`` (from :data:`LLAVA_TEXT_PARAM_AXES`) applies to
    each part's own parameter paths.

    Raises:
        InputError, ConfigError, CheckpointError: as :func:`vidax.weights.component.plan_component`.
    """
    from vidax.weights.component import plan_component

    lm = plan_component("LlamaModel", folder, dtype, placement, mesh=mesh, variant=variant)
    vision = plan_component(LLAVA_VISION, folder, dtype, placement, mesh=mesh, variant=variant)

    def read() -> LlavaTextEncoder:
        module = nnx.eval_shape(lambda: LlavaTextEncoder(config, dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0)))
        module.language_model, module.vision = lm.read(), vision.read()
        return module

    return PendingLoad(read)


@functools.lru_cache(maxsize=16)  # one entry per structure, output layer and image switch
def _llava_text_fn(graphdef, output_layer: int, with_image: bool):
    @jax.jit
    def run(params, ids, mask, pixels):
        return nnx.merge(graphdef, from_stack_bits(params))(
            ids, mask, pixel_values=pixels if with_image else None, output_layer=output_layer
        )

    return run


def encode_llava_text(
    encoder: LlavaTextEncoder, input_ids: Any, attention_mask: Any, pixel_values: Any = None, *, output_layer: int = -1
) -> jax.Array:
    """Jitted :meth:`LlavaTextEncoder.__call__` (one compile per encoder structure, layer and
    whether an image is given; the parameters are an argument, not captured)."""
    fn = _llava_text_fn(nnx.graphdef(encoder), output_layer, pixel_values is not None)
    pixels = jnp.zeros((), jnp.float32) if pixel_values is None else jnp.asarray(pixel_values)
    return fn(stack_bits_state(encoder), jnp.asarray(input_ids), jnp.asarray(attention_mask), pixels)
