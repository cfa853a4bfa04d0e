"""vidax: open video-generation models (Wan, ...) in JAX, loaded from diffusers checkpoints.

Typical use::

    import vidax
    pipe = vidax.load_pipeline("path/to/Wan2.1-T2V-1.3B-Diffusers", dtype="bfloat16")
    frames = pipe("a cat surfing", num_frames=33, seed=0).frames  # (B, F, H, W, 3) in [0, 1]

Importing ``vidax`` imports nothing else: the ``vidax`` command installs its signal handling
first (:mod:`vidax.__main__`); the API's names are imported on first use, after the jax / flax
pairing check.
"""


def _version(name: str) -> str:
    """The installed version of the distribution ``name``."""
    from importlib.metadata import version

    return version(name)


def _check_jax_flax() -> None:
    """Refuse, with the fix, the one pairing that pip can leave behind by upgrading jax alone:
    JAX >= 0.11 with flax < 0.12.9 (flax's NNX then fails deep inside its own import)."""
    import re as _re
    from importlib.metadata import PackageNotFoundError as _PackageNotFoundError

    try:
        jax_v, flax_v = _version("jax"), _version("flax")
    except _PackageNotFoundError:
        return

    def parts(v: str) -> tuple[int, ...]:
        # Leading digits of each release part: "0.12.8rc1" -> (0, 12, 8), "0.12.8+local" too.
        return tuple(int(m.group()) if (m := _re.match(r"\d+", p)) else 0 for p in v.split("+")[0].split(".")[:3])

    if parts(jax_v) >= (0, 11) and parts(flax_v) < (0, 12, 9):
        raise ImportError(
            f"vidax: jax {jax_v} needs flax >= 0.12.9 (installed: flax {flax_v}); "
            "run `pip install -U flax` or install jax < 0.11."
        )


__version__ = "0.1.0"
__all__ = [
    "Cancelled",
    "CheckpointError",
    "ConfigError",
    "FirstBlockCacheConfig",
    "InputError",
    "LTXVideoCondition",
    "LTX2VideoCondition",
    "MagCacheConfig",
    "NumericalError",
    "OutOfMemoryError",
    "SetupError",
    "TaylorSeerCacheConfig",
    "VidaxError",
    "load_pipeline",
]

#: Names of the API imported on first use, by module (``load_pipeline`` and the conditions
#: pull in JAX, flax and a model family; the exceptions are light, but are imported on use too).
_ERRORS = (
    "Cancelled",
    "CheckpointError",
    "ConfigError",
    "InputError",
    "NumericalError",
    "OutOfMemoryError",
    "SetupError",
    "VidaxError",
)
_LAZY = {
    "load_pipeline": "vidax.pipelines.loading",
    **{name: "vidax.errors" for name in _ERRORS},
    "errors": None,
    "LTXVideoCondition": "vidax.models.ltx.pipeline",
    "LTX2VideoCondition": "vidax.models.ltx2.pipeline_condition",
    "FirstBlockCacheConfig": "vidax.pipelines.step_cache",
    "MagCacheConfig": "vidax.pipelines.step_cache",
    "TaylorSeerCacheConfig": "vidax.pipelines.step_cache",
}


def _pipeline_names() -> dict[str, str]:
    """diffusers pipeline class name -> the vidax class's ``"module:NAME"``, as the registry
    (:mod:`vidax.registry`) runs them (``WanPipeline``, ``CogVideoXImageToVideoPipeline``, ...)."""
    from vidax.registry import registry

    return {spec.class_name: spec.target for spec in registry().pipelines(generating_only=False)}


def __getattr__(name: str):
    """``vidax.load_pipeline``, ``vidax.InputError``, ``vidax.LTXVideoCondition`` (the
    conditioning item of ``LTXConditionPipeline``), ...: imported from their modules on first
    use, those that import flax after :func:`_check_jax_flax`.

    diffusers' pipeline class names (``vidax.WanPipeline``, ``vidax.LTX2Pipeline``, ...: those the
    registry runs) are the vidax pipeline classes that run them: ``vidax.WanPipeline.from_pretrained(path,
    torch_dtype=...)`` is ``vidax.load_pipeline(path, ...)`` with the class checked against
    model_index.json (:func:`vidax.pipelines.loading.check_pipeline_class`)."""
    if name.endswith("Pipeline") and name in _pipeline_names():
        import importlib

        _check_jax_flax()
        module, attr = _pipeline_names()[name].split(":")
        return getattr(importlib.import_module(module), attr)
    if name in _LAZY:
        import importlib
        import sys

        module = _LAZY[name] or f"vidax.{name}"  # None: the submodule itself (vidax.errors)
        if module not in sys.modules and module != "vidax.errors":
            _check_jax_flax()
        return (
            importlib.import_module(module) if _LAZY[name] is None else getattr(importlib.import_module(module), name)
        )
    raise AttributeError(f"module 'vidax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_pipeline_names()))
