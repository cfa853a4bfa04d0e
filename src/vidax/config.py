"""Frozen model/scheduler configs built from a checkpoint's own ``config.json``.

A config class is a frozen dataclass whose fields are the settings vidax implements, named as in
diffusers. :meth:`ConfigBase.from_config_dict` builds one from the JSON dict and refuses, with a
:class:`~vidax.errors.ConfigError`, any setting that would change the result but that vidax does
not implement. Keys starting with ``_`` are metadata and always accepted; a key that the diffusers class the
config names (``_class_name``) does not take either is ignored with a warning, as diffusers does
(:mod:`vidax.config_reference`).

Subclasses declare two class-level tables:

``IGNORED``
    keys that do not affect inference output (e.g. ``sample_size`` hints); accepted with any value.
``NEUTRAL``
    keys vidax does not implement, mapped to the tuple of values at which they are a no-op. A
    config that sets one of them to another value is refused.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from vidax.errors import ConfigError

logger = logging.getLogger("vidax.config")

#: diffusers ``FeedForward``'s ``activation_fn`` values (its ``net[0]``): ``gelu`` / ``gelu-approximate``
#: (``GELU``: gelu(proj x), erf or tanh), ``geglu`` (``GEGLU``: proj to 2 x inner, first half times the
#: erf gelu of the second), ``geglu-approximate`` (``ApproximateGELU``: y * sigmoid(1.702 y)),
#: ``swiglu`` (``SwiGLU``: as GEGLU with silu), ``linear-silu`` (``LinearActivation``: silu(proj x)).
FFN_ACTIVATIONS = ("gelu", "gelu-approximate", "geglu", "geglu-approximate", "swiglu", "linear-silu")
#: diffusers ``get_activation``'s names (its ``ACT2CLS``, matched lower-cased): the resnets' and
#: timestep MLPs' ``act_fn`` values.
ACTIVATIONS = ("swish", "silu", "mish", "gelu", "relu")


@dataclasses.dataclass(frozen=True)
class ConfigBase:
    IGNORED: ClassVar[frozenset[str]] = frozenset()
    NEUTRAL: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    @classmethod
    def from_config_dict(cls, config: Mapping[str, Any], *, source: str = "config.json"):
        """Build the config from a diffusers/transformers config dict.

        Raises:
            ConfigError: a key is unknown, or a not-implemented setting has a non-neutral value,
                or a field has a value of the wrong type. The message names the key, its value,
                the file and what vidax accepts.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        ignored: dict[str, Any] = {}  # keys the reference class ignores: one warning line for all
        for key, value in config.items():
            if key.startswith("_") or key in cls.IGNORED:
                continue
            if key in fields:
                if not _finite(value):
                    raise ConfigError(f"{source}: {key}={value!r} is not finite; give a finite number")
                kwargs[key] = _normalise(value)
                continue
            if key in cls.NEUTRAL:
                if value not in cls.NEUTRAL[key]:
                    raise ConfigError(
                        f"{source}: {key}={value!r} is not implemented by vidax's {cls.__name__}; "
                        f"only {' or '.join(repr(v) for v in cls.NEUTRAL[key])} is supported."
                    )
                continue
            if _ignored_by_reference(config, key):
                ignored[key] = value
                continue
            raise ConfigError(
                f"{source}: unknown setting {key}={value!r} for {cls.__name__}; vidax knows "
                f"{sorted(fields) + sorted(cls.NEUTRAL)}."
            )
        _warn_ignored(config, ignored, source)
        try:
            out = cls(**kwargs)
        except TypeError as e:  # missing required field
            raise ConfigError(f"{source}: {e}") from None
        out.validate(source)
        return out

    @classmethod
    def from_json_file(cls, path: str | os.PathLike):
        """Read ``path`` (a config.json) and build the config; see :meth:`from_config_dict`.

        Raises:
            ConfigError: the file is missing, unreadable, not JSON or not a JSON object (see
                :func:`read_json_object`), or its settings are refused by :meth:`from_config_dict`.
        """
        path = os.fspath(path)
        return cls.from_config_dict(read_json_object(path), source=path)

    @classmethod
    def init_keys(cls) -> frozenset[str]:
        """Every setting the config takes: its fields, :attr:`IGNORED` and :attr:`NEUTRAL` (for a
        diffusers class: the parameters of its ``__init__``, what diffusers' ``from_config`` keeps)."""
        return frozenset(f.name for f in dataclasses.fields(cls)) | cls.IGNORED | frozenset(cls.NEUTRAL)

    def validate(self, source: str) -> None:
        """Hook for cross-field checks; raise ConfigError on a bad combination."""

    def invalid(self, source: str, key: str, value: Any, want: str) -> None:
        """Raise the ConfigError ``"{source}: {key}={value!r} is not valid for {class}; {want}."``."""
        raise ConfigError(f"{source}: {key}={value!r} is not valid for {type(self).__name__}; {want}.")

    def check_positive(self, source: str, keys: tuple[str, ...], nullable: tuple[str, ...] = ()) -> None:
        """:meth:`invalid` on the first of ``keys`` that is not a positive int (booleans refused),
        then on the first of ``nullable`` that is neither that nor None."""
        for key in keys:
            if not is_positive_int(getattr(self, key)):
                self.invalid(source, key, getattr(self, key), "expected a positive int")
        for key in nullable:
            value = getattr(self, key)
            if value is not None and not is_positive_int(value):
                self.invalid(source, key, value, "expected a positive int or null")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TransformerConfig(ConfigBase):
    """A diffusion transformer's config: ``num_attention_heads`` heads of ``attention_head_dim``
    and ``in_channels`` / ``out_channels`` (null: as ``in_channels``), as every family names them."""

    @property
    def inner_dim(self) -> int:
        """Model width D = num_attention_heads * attention_head_dim."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def out_dim(self) -> int:
        """Output channels (``out_channels or in_channels`` as in the reference)."""
        return self.out_channels or self.in_channels


def _ignored_by_reference(config: Mapping[str, Any], key: str) -> bool:
    """True when ``key`` is no setting of the reference class the config names (diffusers'
    ``_class_name``, a T5 encoder's ``model_type``: :func:`vidax.config_reference.reference_config_keys`):
    the reference ignores it, and so does vidax. False for a key that class takes (vidax would
    compute something else without it) and for a config of a class the tables do not hold."""
    from vidax.config_reference import reference_config_keys

    reference = reference_config_keys(config)
    return reference is not None and key not in reference[1]


class ConfigFile(dict):
    """A component's config as :meth:`vidax.checkpoint.Checkpoint.open` read it from its file: the
    dict, and ``warned``, the keys of it a config class ignores that were warned about already.
    A load parses a config more than once (its plan, its memory estimate, its weights); the
    warning comes once per read of the file, as diffusers' one ``from_config`` per component
    gives it once per load. A plain dict warns on every parse, as diffusers' ``from_config``."""

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self.warned: set[str] = set()


def _warn_ignored(config: Mapping[str, Any], ignored: Mapping[str, Any], source: str) -> None:
    """One warning line naming every key of ``ignored`` (those :func:`_ignored_by_reference`
    found), but those a :class:`ConfigFile` ``config`` was warned about already: a scheduler
    swapped by ``from_config`` carries the old class's settings, a dozen at a time."""
    from vidax.config_reference import reference_config_keys

    warned = getattr(config, "warned", set())
    new = {k: v for k, v in ignored.items() if k not in warned}
    if not new:
        return
    warned.update(new)
    keys = ", ".join(f"{k}={v!r}" for k, v in new.items())
    what = "is not a setting" if len(new) == 1 else "are not settings"
    them = "it" if len(new) == 1 else "them"
    logger.warning(
        "%s: %s %s of %s, which ignores %s; ignored", source, keys, what, reference_config_keys(config)[0], them
    )


#: Keys every transformers ``PretrainedConfig`` may write that do not change a text encoder's
#: hidden states (metadata, tokenizer ids, output switches, training-only settings; the LM head,
#: tied or not, is not run): the text encoders' configs ignore them.
TRANSFORMERS_METADATA_KEYS = frozenset(
    {
        "architectures",
        "dtype",
        "torch_dtype",
        "transformers_version",
        "tokenizer_class",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "id2label",
        "label2id",
        "problem_type",
        "chunk_size_feed_forward",
        "gradient_checkpointing",
        "tie_word_embeddings",
    }
)


def is_positive_int(value: Any) -> bool:
    """An int >= 1 that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_positive_ints(source: str, config: Any, names: tuple[str, ...]) -> None:
    """Raise ConfigError naming the first of ``names`` whose value on ``config`` is not a
    positive integer (booleans refused)."""
    for name in names:
        value = getattr(config, name)
        if not is_positive_int(value):
            raise ConfigError(f"{source}: {name}={value!r} must be a positive integer")


#: The sizes of a diffusers VAE config that are positive ints in every family that has them.
VAE_SIZES = ("in_channels", "out_channels", "latent_channels", "layers_per_block", "norm_num_groups")


def check_vae_blocks(
    source: str, block_out_channels: Any, norm_num_groups: int, block_types: Mapping[str, tuple[Any, str]]
) -> None:
    """The checks a diffusers VAE config's block lists share: ``block_out_channels`` a non-empty
    list of positive integers each divisible by ``norm_num_groups``, and each entry of
    ``block_types`` (``key -> (value, the one type implemented)``) that type once per block.

    Raises:
        ConfigError: naming the key and its value.
    """
    boc = block_out_channels
    if not isinstance(boc, tuple) or not boc:
        raise ConfigError(f"{source}: block_out_channels={boc!r} must be a non-empty list")
    for c in boc:
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise ConfigError(f"{source}: block_out_channels entry={c!r} must be a positive integer")
        if c % norm_num_groups:
            raise ConfigError(
                f"{source}: block_out_channels={list(boc)} has {c} channels, not divisible "
                f"by norm_num_groups={norm_num_groups}"
            )
    for name, (value, want) in block_types.items():
        if not isinstance(value, tuple) or len(value) != len(boc) or set(value) != {want}:
            raise ConfigError(
                f"{source}: {name}={value!r} must list {want!r} once per block "
                f"({len(boc)} blocks, from block_out_channels)"
            )


def _finite(value: Any) -> bool:
    """No NaN or Infinity in ``value`` (Python's json reads both), nested lists and dicts included."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def read_json_object(path: str | os.PathLike, error: type[Exception] = ConfigError) -> dict[str, Any]:
    """The JSON object (a dict) stored in the file ``path``: every config, model index and shard
    index vidax reads goes through here, so a broken one is one error naming the file.

    Raises:
        ``error`` (ConfigError by default; CheckpointError for a safetensors shard index): the
        file is missing or unreadable, is not valid UTF-8 JSON (the message has the parser's
        line and column), or holds a JSON value other than an object (e.g. a list).
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise error(f"file not found: {path}") from None
    except OSError as e:
        raise error(f"{path} cannot be read: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path} is not valid JSON ({e}); the file is damaged or partly written") from None
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), type(value).__name__)
        raise error(f"{path} is not a JSON object: it holds {kind}, expected {{...}} with one key per setting")
    return value


def _normalise(value: Any) -> Any:
    """JSON lists become tuples so configs stay hashable (usable as jit static args)."""
    if isinstance(value, list):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normalise(v)) for k, v in value.items()))
    return value
