"""LTX-2's configs (the family's ``config.py``, where the registry finds each component's config
class). The transformer's and the connectors' are in :mod:`vidax.models.ltx2.config_transformer`."""

from vidax.models.ltx2.config_transformer import (  # noqa: F401
    LTX2_FFN_ACTIVATIONS,
    LTX2_ROPE_TYPES,
    LTX2ConnectorsConfig,
    LTX2TransformerConfig,
)

__all__ = ["LTX2_FFN_ACTIVATIONS", "LTX2_ROPE_TYPES", "LTX2ConnectorsConfig", "LTX2TransformerConfig"]
