"""Checkpoint translation: memory-mapped safetensors in, strictly 1:1 JAX parameters out."""

from vidax.weights.loader import DtypePolicy, KeyRules, PendingLoad, export_state_dict, load_module
from vidax.weights.safetensors_io import CheckpointReader, save_safetensors

__all__ = [
    "CheckpointReader",
    "DtypePolicy",
    "KeyRules",
    "PendingLoad",
    "export_state_dict",
    "load_module",
    "save_safetensors",
]
