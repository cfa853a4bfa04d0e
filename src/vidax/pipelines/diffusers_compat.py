"""The calls a diffusers script makes on a loaded pipeline beside ``__call__``: ``pipe.to("cuda")``,
``enable_model_cpu_offload()``, ``set_progress_bar_config(disable=True)``,
``vae_scale_factor_spatial`` (:func:`vae_scale_factors`), ``pipe.scheduler = <a diffusers scheduler>``; a base of
:class:`~vidax.pipelines.base.VideoPipeline`.

vidax places its weights when it loads them (JAX's default backend; ``offload=`` for host memory,
docs/offloading.md), so the placement calls change nothing after the load: they are taken, with
one warning that says where vidax's equivalent is, and make the same video. A dtype given to
:meth:`DiffusersPipelineMethods.to` is refused: the weights are read in ``dtype=`` at load.
"""

from __future__ import annotations

import logging
from typing import Any

from vidax.errors import InputError

logger = logging.getLogger("vidax.pipeline")

#: The device names torch spells (``"cuda:0"``, ``torch.device("cuda")``): diffusers' ``.to(device)``.
_DEVICES = ("cpu", "cuda", "mps", "xpu", "npu", "tpu", "xla", "meta", "hpu", "gpu")


def _is_device(value: Any) -> bool:
    if type(value).__name__ == "device" and type(value).__module__ == "torch":
        return True
    return isinstance(value, str) and value.split(":", 1)[0].strip().lower() in _DEVICES


class DiffusersPipelineMethods:
    """diffusers' ``DiffusionPipeline`` methods a script calls around the generation."""

    #: ``progress=`` of a call that does not give it (:meth:`set_progress_bar_config`).
    progress_default: bool = True

    def to(self, *args: Any, **kwargs: Any):
        """diffusers' ``pipe.to(device)``: returns the pipeline, unchanged: its weights are on
        JAX's default backend (``jax.default_backend()``) since the load, and every call runs
        there. ``silence_dtype_warnings`` is taken.

        Raises:
            InputError: a dtype (``pipe.to(torch.bfloat16)``) or anything that is not a device:
                vidax reads the weights in the load's ``dtype=``.
        """
        kwargs.pop("silence_dtype_warnings", None)
        values = [*args, *kwargs.values()]
        if kwargs.keys() - {"device", "dtype"}:
            raise InputError(f"pipe.to() takes a device (and diffusers' dtype=); got {sorted(kwargs)}")
        for value in values:
            if not _is_device(value):
                raise InputError(
                    f"pipe.to({value!r}): vidax reads the weights in the dtype given when loading "
                    "(vidax.load_pipeline(path, dtype=...) or torch_dtype=); pipe.to() takes a device"
                )
        import jax

        backend = jax.default_backend()
        for value in values:
            name = str(value).split(":", 1)[0].lower()
            if name not in (backend, "xla") and not (name == "cuda" and backend == "gpu"):
                logger.warning(
                    "pipe.to(%r): vidax runs on JAX's %s backend, where its weights were loaded; "
                    "nothing is moved (install JAX's build for that device to run there)",
                    str(value),
                    backend,
                )
        return self

    def enable_model_cpu_offload(self, gpu_id: Any = None, device: Any = None) -> None:
        """diffusers' model offloading: taken, with a warning naming vidax's load-time
        ``offload=`` (the video is the same either way)."""
        placement_set_at_load("enable_model_cpu_offload")

    def enable_sequential_cpu_offload(self, gpu_id: Any = None, device: Any = None) -> None:
        """diffusers' sequential offloading: as :meth:`enable_model_cpu_offload`."""
        placement_set_at_load("enable_sequential_cpu_offload")

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """diffusers' progress-bar settings: ``disable=True`` turns off the progress bars and
        status lines of later calls that do not give ``progress=``; tqdm's other settings
        (``desc``, ``leave``, ...) are taken and not used."""
        if "disable" in kwargs:
            self.progress_default = not kwargs["disable"]

    @property
    def scheduler(self) -> Any:
        """The sampler. Settable as in diffusers: a vidax scheduler, or a diffusers scheduler
        object (``pipe.scheduler = UniPCMultistepScheduler(..., flow_shift=5.0)``, the Wan docs'
        line), read through its config into vidax's (the same schedule; a setting vidax does not
        implement is a ConfigError then). A diffusers scheduler built by ``from_config`` from
        another class's config holds that class's settings beside its own (diffusers keeps them
        for a later swap back, and its ``from_config`` warned about them once): vidax reads the
        class's own settings only. vidax's scheduler config keeps its own class's settings, so
        a swap back to UniPC from another sampler's config lacks UniPC's flow settings: the
        ConfigError names the keywords to pass (:func:`flow_settings_hint`)."""
        try:
            return self.__dict__["scheduler"]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no scheduler") from None

    @scheduler.setter
    def scheduler(self, value: Any) -> None:
        if type(value).__module__.startswith("diffusers.") and isinstance(getattr(value, "config", None), dict):
            from vidax.config_reference import diffusers_config_keys
            from vidax.errors import ConfigError
            from vidax.schedulers import scheduler_from_config

            name = type(value).__name__
            own = diffusers_config_keys(name)  # None: a class the tables do not hold (refused below)
            config = {k: v for k, v in value.config.items() if own is None or k in own or k.startswith("_")}
            try:
                value = scheduler_from_config({**config, "_class_name": name}, source=f"pipe.scheduler = {name}(...)")
            except ConfigError as e:
                hint = flow_settings_hint(
                    name, config, self.__dict__.get("scheduler"), getattr(self, "checkpoint", None)
                )
                if hint is None:
                    raise
                raise ConfigError(f"pipe.scheduler = {name}(...): {hint}") from e
        self.__dict__["scheduler"] = value


def placement_set_at_load(method: str) -> None:
    """Warn that diffusers' ``method`` (an offloading switch) changes nothing: vidax places the
    weights when it loads them."""
    logger.warning(
        "%s(): vidax places the weights when it loads them: vidax.load_pipeline(path, offload=...) "
        "streams the transformer's blocks and stages the text encoder / VAE in host memory "
        "(docs/offloading.md), and each call checks its memory first; nothing changes now",
        method,
    )


#: diffusers' pipeline attributes of the VAE's compression -> the VAE config's field: pixels per
#: latent pixel and frames per latent frame, under the names of its Wan, CogVideoX and
#: HunyuanVideo pipelines and those of its LTX pipelines.
VAE_SCALE_FACTORS = {
    "vae_scale_factor_spatial": "spatial_compression",
    "vae_scale_factor_temporal": "temporal_compression",
    "vae_spatial_compression_ratio": "spatial_compression",
    "vae_temporal_compression_ratio": "temporal_compression",
}


def vae_scale_factors(info: Any) -> dict[str, int]:
    """diffusers' attributes of :data:`VAE_SCALE_FACTORS` for a checkpoint's ``info`` (its
    ``vae_config``), as a pipeline sets them at load; those the checkpoint's VAE config lacks
    (or a checkpoint without a VAE config) are left out, so the pipeline has no such attribute."""
    config = getattr(info, "vae_config", None)
    return {name: int(getattr(config, field)) for name, field in VAE_SCALE_FACTORS.items() if hasattr(config, field)}


#: The settings vidax's UniPC runs with (flow sigmas, flow prediction), which another sampler's
#: config does not hold.
_UNIPC_FLOW = {"prediction_type": "flow_prediction", "use_flow_sigmas": True}


def flow_settings_hint(name: str, config: dict[str, Any], current: Any, checkpoint: Any) -> str | None:
    """Where diffusers' ``UniPCMultistepScheduler.from_config(config)`` (``name``) was built from a
    config without UniPC's flow settings (another sampler's: diffusers' defaults then are
    epsilon prediction without flow sigmas, which vidax does not run): the sentence naming the
    keywords to pass, with the flow shift of the checkpoint's UniPC config (else the current
    sampler's ``shift``). None: not that case."""
    wrong = {k: v for k, v in _UNIPC_FLOW.items() if config.get(k) != v}
    if name != "UniPCMultistepScheduler" or not wrong:
        return None
    settings = dict(wrong)
    original = checkpoint.config("scheduler") if checkpoint is not None else {}
    if original.get("_class_name") == name and "flow_shift" in original:
        settings["flow_shift"] = original["flow_shift"]
    elif getattr(getattr(current, "config", None), "shift", None) is not None:
        settings["flow_shift"] = current.config.shift
    given = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    was = ", ".join(f"{k}={config.get(k)!r}" for k in wrong)
    return (
        f"its config has {was} (diffusers' defaults: it was built from a config without UniPC's flow settings, "
        "another sampler's), and vidax runs UniPC with flow sigmas and flow prediction only; pass them: "
        f"pipe.scheduler = UniPCMultistepScheduler.from_config(pipe.scheduler.config, {given})"
    )
