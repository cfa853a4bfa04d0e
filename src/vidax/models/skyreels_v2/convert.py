"""Reading a SkyReels-V2 checkpoint's transformer tensors: the tables the registry entry names
(``__init__.py``) for the one component loader. The model is the Wan2.1 transformer plus the fps
conditioning, so Wan's tables hold, the fps modules replicated."""

from __future__ import annotations

from vidax.models.wan.convert import TRANSFORMER_FP32_PARAMS, TRANSFORMER_PARAM_AXES, transformer_key_rules

__all__ = ["TRANSFORMER_FP32_PARAMS", "TRANSFORMER_PARAM_AXES", "transformer_key_rules"]
