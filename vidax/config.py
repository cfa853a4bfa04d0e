"""Frozen model/scheduler configs built from a checkpoint's own ``config.json``.

A config class is a frozen dataclass whose fields are the settings vidax implements, named as in
diffusers. :meth:`ConfigBase.from_config_dict` builds one from the JSON dict and refuses, with a
:class:`~vidax.errors.ConfigError`, any setting that would change the result but that vidax does
not implement. Keys starting with ``_`` are metadata and always accepted.

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
import os
from typing import Any, ClassVar, Mapping

from vidax.errors import ConfigError


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
        for key, value in config.items():
            if key.startswith("_") or key in cls.IGNORED:
                continue
            if key in fields:
                kwargs[key] = _normalise(value)
                continue
            if key in cls.NEUTRAL:
                if value not in cls.NEUTRAL[key]:
                    raise ConfigError(
                        f"{source}: {key}={value!r} is not implemented by vidax's {cls.__name__}; "
                        f"only {' or '.join(repr(v) for v in cls.NEUTRAL[key])} is supported."
                    )
                continue
            raise ConfigError(
                f"{source}: unknown setting {key}={value!r} for {cls.__name__}; vidax knows "
                f"{sorted(fields) + sorted(cls.NEUTRAL)}."
            )
        try:
            out = cls(**kwargs)
        except TypeError as e:  # missing required field
            raise ConfigError(f"{source}: {e}") from None
        out.validate(source)
        return out

    @classmethod
    def from_json_file(cls, path: str | os.PathLike):
        """Read ``path`` (a config.json) and build the config; see :meth:`from_config_dict`."""
        path = os.fspath(path)
        try:
            with open(path) as f:
                config = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not valid JSON: {e}") from None
        return cls.from_config_dict(config, source=path)

    def validate(self, source: str) -> None:
        """Hook for cross-field checks; raise ConfigError on a bad combination."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _normalise(value: Any) -> Any:
    """JSON lists become tuples so configs stay hashable (usable as jit static args)."""
    if isinstance(value, list):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normalise(v)) for k, v in value.items()))
    return value
