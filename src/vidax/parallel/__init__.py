"""Running one model across devices and hosts: a ``(data, tensor, sequence)`` mesh.

* :mod:`vidax.parallel.mesh`: mesh construction, validation, factorization listing.
* :mod:`vidax.parallel.rules`: the logical-axis -> mesh-axis table and sharding constraints.
* :mod:`vidax.parallel.placement`: per-parameter placement for the loader, reports, checks.
* :mod:`vidax.parallel.ulysses`: Ulysses sequence-parallel and local attention in ``shard_map``.
* :mod:`vidax.parallel.step`: data-parallel placement of a denoising step's inputs.
* :mod:`vidax.parallel.distributed`: multi-host initialisation and host <-> mesh transfers.
* :mod:`vidax.parallel.offload`: transformer blocks streamed from host memory in chunks.

See ``docs/parallelism.md`` and ``docs/offloading.md``.
"""
