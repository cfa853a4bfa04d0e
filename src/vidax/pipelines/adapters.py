"""diffusers' LoRA methods on a pipeline (``load_lora_weights``, ``set_adapters``, ``fuse_lora``,
...): :mod:`vidax.lora` does the work.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from vidax.errors import InputError
from vidax.registry import registry


def lora_adapters(experts: Any, checkpoint: Any) -> Any:
    """The :class:`~vidax.lora.adapters.LoraAdapters` of a pipeline's denoising transformers
    (``experts``: its :class:`~vidax.pipelines.experts.Experts`; ``checkpoint``: the
    :class:`~vidax.checkpoint.Checkpoint` whose configs they were loaded from); no weight is
    touched until a LoRA is loaded."""
    from vidax.lora.adapters import LoraAdapters

    parts = []
    for name, module in zip(experts.names, experts.modules):
        spec = registry().component(checkpoint.class_of(name), source=f"{checkpoint.source} ({name})")
        parts.append((name, module, spec, checkpoint.typed_config(name, spec.config_class())))
    return LoraAdapters(parts)


class LoraMethods:
    """diffusers' LoRA methods of a pipeline, over its ``lora`` (:func:`lora_adapters`); a base of
    :class:`~vidax.pipelines.base.VideoPipeline`."""

    def load_lora_weights(
        self,
        pretrained_model_name_or_path_or_dict: Any,
        adapter_name: str | None = None,
        *,
        load_into_transformer_2: bool = False,
        weight_name: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Load a LoRA into the denoising transformer and merge it (diffusers' API; every layout of
        :mod:`vidax.lora.formats`). The adapter loaded last is the active one, at weight 1
        (:meth:`set_adapters` combines several). Switching or unloading restores the base weights
        bit for bit, without reading the checkpoint again.

        Args:
            pretrained_model_name_or_path_or_dict: a ``.safetensors`` file, a folder holding it
                (``weight_name`` picks one), or a state dict of arrays / tensors.
            adapter_name: its name (default ``default_<n>``).
            load_into_transformer_2: into the second expert (Wan2.2 A14B) instead of the first,
                as diffusers. A file with ``transformer_2.`` keys gives those to the second expert.
            weight_name: the file within a folder.

        Returns:
            The adapter's name.

        Raises:
            InputError: the file cannot be read or is truncated, a key lands on no parameter (the
                first few named; a LoRA that fits another family says which), a rank mismatch,
                ``load_into_transformer_2`` without a second expert. Nothing changes then.
        """
        if kwargs:
            raise InputError(
                f"load_lora_weights takes no {', '.join(f'{k}=' for k in sorted(kwargs))} (vidax reads "
                "local files: it takes adapter_name=, load_into_transformer_2=, weight_name=)"
            )
        source = pretrained_model_name_or_path_or_dict
        if weight_name is not None:
            source = os.path.join(os.fspath(source), weight_name)
        if load_into_transformer_2 and len(self.experts.modules) < 2:
            raise InputError(
                f"load_into_transformer_2=True: {type(self).__name__} ({self.root}) has no "
                "transformer_2 (Wan2.1 and the other families have one transformer)"
            )
        return self.lora.load(source, adapter_name, experts=[1] if load_into_transformer_2 else [0])

    def set_adapters(self, adapter_names: Any, adapter_weights: Any = None) -> None:
        """Activate ``adapter_names`` (a name or a list) with ``adapter_weights`` (a number, or one
        per adapter, None in the list meaning 1; default 1), as diffusers; the weights are re-merged
        from the base ones. diffusers' dicts of per-module scales are not supported.

        Raises:
            InputError: an unknown name, or any other ``adapter_weights`` (one line naming it).
        """
        self.lora.set_adapters(adapter_names, adapter_weights)

    def delete_adapters(self, adapter_names: Any) -> None:
        """diffusers' ``delete_adapters``: remove ``adapter_names`` (a name or a list); the other
        adapters stay (re-merged from the base weights).

        Raises:
            InputError: a name that is not loaded.
        """
        self.lora.delete(adapter_names)

    def get_active_adapters(self) -> list[str]:
        """The names of the active adapters."""
        return self.lora.active_names()

    def get_list_adapters(self) -> dict[str, list[str]]:
        """Component -> names of the adapters loaded into it (diffusers' ``get_list_adapters``)."""
        out: dict[str, list[str]] = {}
        for name, per_expert in self.lora.terms.items():
            for e, terms in enumerate(per_expert):
                if terms:
                    out.setdefault(self.lora.names[e], []).append(name)
        return out

    def fuse_lora(
        self,
        lora_scale: float = 1.0,
        components: Sequence[str] | None = None,
        adapter_names: Sequence[str] | None = None,
    ) -> None:
        """diffusers' ``fuse_lora``: the active adapters (or ``adapter_names``) at ``lora_scale``
        in ``components`` (default ``["transformer"]``). vidax merges adapters as soon as they are
        loaded, so this only sets the scale."""
        self.lora.fuse(lora_scale, components, adapter_names)

    def unfuse_lora(self, components: Sequence[str] | None = None) -> None:
        """diffusers' ``unfuse_lora``: the scale of :meth:`fuse_lora` back to 1; the adapters stay
        active (as diffusers' unfused adapter layers) until :meth:`unload_lora_weights`."""
        self.lora.unfuse(components)

    def disable_lora(self) -> None:
        """Run with the base weights (the adapters stay loaded; :meth:`enable_lora` brings them back)."""
        self.lora.enable(False)

    def enable_lora(self) -> None:
        self.lora.enable(True)

    def unload_lora_weights(self) -> None:
        """Remove every adapter; the weights are the checkpoint's again, bit for bit."""
        self.lora.unload()
