"""CPU-only kernels called from XLA as custom calls (:mod:`vidax.cpu.onednn`)."""
