"""A pipeline's LoRA adapters: loading, weights, fusing and unloading, as diffusers' loaders.

The pipeline (:class:`vidax.pipelines.base.VideoPipeline`) delegates its ``load_lora_weights``,
``set_adapters``, ``fuse_lora``, ``unfuse_lora``, ``unload_lora_weights`` and
``get_active_adapters`` here. diffusers keeps an unfused adapter as extra layers run beside the
weights; vidax always merges, so the weights of every denoising transformer are at all times

    base + fuse_scale * sum over active adapters (weight * its delta)

(``fuse_scale`` 1 unless :meth:`LoraAdapters.fuse` set it), which is what diffusers computes
with the adapter layers, fused or not. Everything a file holds is checked (each key lands on a
parameter of its shape) before any weight changes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from vidax.errors import Arg, InputError, Message, joined
from vidax.lora.apply import ParamStore
from vidax.lora.formats import LoraFile, _listed, parse, read_state_dict
from vidax.lora.targets import ModelTargets, Term, fitting_transformers, guess_family, transformer_targets
from vidax.pipelines.options import MAX_FLOAT

logger = logging.getLogger("vidax.lora")


class LoraAdapters:
    """The adapters of one pipeline.

    Args:
        transformers: the denoising transformers, in expert order (component names,
            modules, registry specs and configs: ``[(name, module, spec, config), ...]``).
    """

    def __init__(self, transformers: Sequence[tuple[str, Any, Any, Any]]):
        self._transformers = list(transformers)
        self.names = [t[0] for t in transformers]
        self._stores = [ParamStore(m) for _, m, _, _ in transformers]
        self.terms: dict[str, list[list[Term]]] = {}  # adapter -> per expert, at weight 1
        self.files: dict[str, LoraFile] = {}
        self.loaded_into: dict[str, list[int]] = {}  # adapter -> experts it was loaded into
        self.active: list[list[tuple[str, float]]] = [[] for _ in transformers]  # per expert
        self.fuse_scale = [1.0] * len(transformers)
        self.enabled = True

    @functools.cached_property
    def _targets(self) -> list[ModelTargets]:
        """Each transformer's parameters by diffusers key, walked when the first LoRA is read (a
        pipeline holds its adapters from the load on, most never take one)."""
        return [transformer_targets(m, spec, cfg) for _, m, spec, cfg in self._transformers]

    # ------------------------------------------------------------------ loading
    def load(
        self,
        source: Any,
        adapter_name: str | None = None,
        *,
        experts: Sequence[int] | None = None,
        what: str | None = None,
    ) -> str:
        """Read, check and merge a LoRA; returns its adapter name (``default_<n>`` when None).

        Args:
            source: a ``.safetensors`` path or a state dict. experts: which transformers take it
                (None: the first; a file with ``transformer_2.`` keys gives those to the second).
            what: how the source is named in errors (default ``load_lora_weights(<path>)``).

        Raises:
            InputError: unreadable or truncated file, keys of no layout, a key that lands on no
                parameter (the first few listed; for a file that fits another family, which),
                a rank mismatch, a name in use (all before any weight changes).
        """
        label = what or f"load_lora_weights({_name(source)})"
        if adapter_name is None:
            n = len(self.terms)
            while f"default_{n}" in self.terms:
                n += 1
            adapter_name = f"default_{n}"
        if not isinstance(adapter_name, str) or not adapter_name:
            raise InputError(f"adapter_name={adapter_name!r} must be a non-empty string")
        tensors, metadata, src = read_state_dict(source, label)
        lora = parse(tensors, metadata, src, label)
        experts = list(experts) if experts is not None else [0]
        for e in experts:
            if not 0 <= e < len(self.names):
                raise InputError(f"{label}: this pipeline has no {_expert_name(e)} (it has {self.names})")
        if 1 in lora.experts and len(self.names) < 2:
            raise InputError(f"{label}: holds transformer_2 keys, but this pipeline has one transformer")
        into = experts if 1 not in lora.experts else sorted(set(lora.experts) & set(range(len(self.names))))
        # Adapter names are per transformer, as diffusers' (peft's, per model): Wan2.2's documented
        # use loads one name into transformer and again into transformer_2.
        taken = [self.names[e] for e in into if e in self.loaded_into.get(adapter_name, ())]
        if taken:
            raise InputError(
                f"adapter_name={adapter_name!r} is already loaded into {', '.join(taken)} (loaded: "
                f"{self._listing()}); give another name or unload_lora_weights() first"
            )
        per_expert: list[list[Term]] = [list(t) for t in self.terms.get(adapter_name, [[] for _ in self.names])]
        for e in into:
            modules = lora.experts.get(e, lora.experts.get(0, {})) if 1 in lora.experts else lora.experts[0]
            terms, problems = self._targets[e].terms(modules)
            if problems:
                raise InputError(self._misfit(label, e, problems, modules))
            per_expert[e] = terms
        self.terms[adapter_name] = per_expert
        self.files.setdefault(adapter_name, lora)  # the first file of the name names it in messages
        self.loaded_into[adapter_name] = [e for e, t in enumerate(per_expert) if t]
        for e in into:  # in each transformer it goes to, the active one, as diffusers'
            if per_expert[e]:
                self.active[e] = [(adapter_name, 1.0)]
        self._apply()
        logger.info(
            "LoRA %s (%s layout, rank %s, %d keys) -> %s",
            adapter_name,
            lora.layout,
            lora.ranks,
            lora.num_keys,
            ", ".join(self.names[e] for e in into if per_expert[e]),
        )
        return adapter_name

    def _listing(self) -> str:
        """The loaded adapters and the transformers each is in: ``'a' (transformer, transformer_2)``."""
        return (
            ", ".join(f"{n!r} ({', '.join(self.names[e] for e in into)})" for n, into in self.loaded_into.items())
            or "none"
        )

    def _misfit(self, label: str, expert: int, problems: list[str], modules: dict) -> str:
        targets: ModelTargets = self._targets[expert]
        placed = len(modules) - len({p.split(" ", 1)[0] for p in problems})
        msg = (
            f"{label}: {len(problems)} key(s) fit no parameter of {self.names[expert]} ({targets.family}) "
            f"(no such module, or another shape): {_listed(problems)}"
        )
        if placed <= 0:
            fits, _ = fitting_transformers(modules)
            if targets.family in {spec.family for spec in fits}:  # the names fit: only the shapes differ
                msg += (
                    f"; its module names fit {targets.family} as well as any family: a LoRA for another size of "
                    "this model"
                )
            else:
                other = guess_family(modules, exclude=targets.family)
                if other is not None:
                    msg += f"; the file looks like a LoRA for {other}"
        return msg

    # ------------------------------------------------------------------ choosing
    def set_adapters(self, names: Any, adapter_weights: Any = None) -> None:
        """Make ``names`` (a name or a list) the active adapters with ``adapter_weights`` (a number
        or one per name; default 1).

        Raises:
            InputError: an unknown name, or weights that are not a number or a list / tuple of one
                per name (each a number or None, i.e. 1, as diffusers); diffusers' dicts of
                per-module scales are not supported.
        """
        names = [names] if isinstance(names, str) else list(names)
        unknown = [n for n in names if n not in self.terms]
        if unknown:
            raise InputError(f"set_adapters: {unknown} not loaded (loaded: {self._listing()})")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InputError(
                f"set_adapters: adapter_names={names!r} names {', '.join(map(repr, twice))} more than "
                "once; give each adapter once, with its weight"
            )
        weights = _adapter_weights(adapter_weights, len(names))
        self.active = [
            [(n, w) for n, w in zip(names, weights) if e in self.loaded_into[n]] for e in range(len(self.names))
        ]
        self.enabled = True
        self._apply()

    def fuse(
        self,
        lora_scale: float = 1.0,
        components: Sequence[str] | None = None,
        adapter_names: Sequence[str] | None = None,
    ) -> None:
        """diffusers' ``fuse_lora``: the active adapters (or ``adapter_names``) scaled by
        ``lora_scale`` in ``components`` (default ``["transformer"]``)."""
        if not _finite(lora_scale):
            raise InputError(f"fuse_lora: lora_scale={_shown(lora_scale)} must be {FINITE}")
        for i in self._components(components, "fuse_lora"):
            self.fuse_scale[i] = float(lora_scale)
        if adapter_names is not None:
            weights = {n: w for per in self.active for n, w in per}
            self.set_adapters(list(adapter_names), [weights.get(n, 1.0) for n in adapter_names])
        self._apply()

    def unfuse(self, components: Sequence[str] | None = None) -> None:
        """diffusers' ``unfuse_lora``: the fused scale back to 1 (the adapters stay active, as
        diffusers' unfused adapter layers; :meth:`unload` removes them)."""
        for i in self._components(components, "unfuse_lora"):
            self.fuse_scale[i] = 1.0
        self._apply()

    def enable(self, on: bool) -> None:
        self.enabled = on
        self._apply()

    @contextlib.contextmanager
    def call_scale(self, scale: float):
        """Within the block, the active adapters merged at ``scale`` times their scale (a call's
        ``attention_kwargs={"scale": scale}``: diffusers' ``scale_lora_layers`` multiplies each
        unfused adapter layer's scale by it for the call); afterwards the weights are those of
        before, bit for bit. No adapter active: nothing changes (as diffusers)."""
        if not self.active_names() or scale == 1.0:
            yield
            return
        saved = list(self.fuse_scale)
        self.fuse_scale = [s * float(scale) for s in saved]
        try:
            self._apply()
            yield
        finally:
            self.fuse_scale = saved
            self._apply()

    def delete(self, names: Any) -> None:
        """diffusers' ``delete_adapters``: remove the adapters ``names`` (a name or a list) from
        every transformer; the others stay as they were (active ones re-merged from the base
        weights), and with none left the weights are the base ones, bit for bit.

        Raises:
            InputError: a name that is not loaded (before anything changes).
        """
        names = [names] if isinstance(names, str) else list(names)
        unknown = [n for n in names if n not in self.terms]
        if unknown:
            raise InputError(f"delete_adapters: {unknown} not loaded (loaded: {self._listing()})")
        for name in names:
            del self.terms[name]
            self.files.pop(name, None)
            self.loaded_into.pop(name, None)
        self.active = [[(n, w) for n, w in per if n not in names] for per in self.active]
        if self.terms:
            self._apply()
        else:
            self.unload()

    def unload(self) -> None:
        """Remove every adapter: each touched parameter gets its base value back, bit for bit."""
        self.terms.clear()
        self.files.clear()
        self.loaded_into.clear()
        self.active = [[] for _ in self.names]
        self.fuse_scale = [1.0] * len(self.names)
        for store in self._stores:
            store.restore()

    def _components(self, components, where: str) -> list[int]:
        components = (
            ["transformer"] if components is None else [components] if isinstance(components, str) else list(components)
        )
        bad = [c for c in components if c not in self.names]
        if bad:
            raise InputError(f"{where}: components={components!r}: {bad} not among this pipeline's {self.names}")
        return [self.names.index(c) for c in components]

    def active_names(self) -> list[str]:
        """The active adapters of every transformer, each once, in order."""
        out: list[str] = []
        for per in self.active if self.enabled else []:
            out += [n for n, _ in per if n not in out]
        return out

    def scales_in_use(self, at_least: float = 0.0) -> Message | None:
        """The active adapters and the scales they are merged at (the weight of :meth:`set_adapters`
        times the scale of :meth:`fuse`; the largest over the transformers), as message parts
        naming each as data: ``adapter 'style' at 1e+30`` in Python, ``--lora 'style.safetensors:1e+30'``
        on the command line; only those whose scale's magnitude is more than ``at_least`` (e.g.
        :data:`LARGE_SCALE`); None when none is."""
        scales: dict[str, float] = {}
        for e, per in enumerate(self.active if self.enabled else []):
            for name, weight in per:
                scale = weight * self.fuse_scale[e]
                scales[name] = max(scales.get(name, scale), scale, key=abs)
        scales = {n: w for n, w in scales.items() if abs(w) > at_least}
        if not scales:
            return None
        return Message(
            *joined(
                Arg("lora", f"{self.files[n].source}:{w:g}", python=f"adapter {n!r} at {w:g}")
                for n, w in scales.items()
            )
        )

    # ------------------------------------------------------------------ merging
    def _apply(self) -> None:
        for e, store in enumerate(self._stores):
            terms = []
            if self.enabled:
                for name, weight in self.active[e]:
                    for t in self.terms[name][e]:
                        terms.append(Term(t.target, t.kind, t.a, t.b, t.scale * weight * self.fuse_scale[e]))
            touched = {t.target.path for t in terms}
            store.restore(keep=lambda path: path in touched)
            store.merge(terms)


#: The magnitude past which a LoRA scale is named as a likely cause of a NaN/Inf run. LoRA scales
#: are used in 0..2 (diffusers' examples: 0.5 to 1.5); a trained LoRA's delta is a small part of
#: the weight it is merged into, so at those scales the merged weights stay near the base ones and
#: cannot be what overflowed. Past 10 times its trained strength, the delta outweighs the base
#: weight for any LoRA whose delta is a tenth of it or more, and the activations grow with it.
LARGE_SCALE = 10.0

#: What a LoRA weight / scale must be: the merge computes in float32.
FINITE = f"a finite number (at most {MAX_FLOAT:.4g} in magnitude, float32's largest: the merge is float32)"


def _finite(x: Any) -> bool:
    """``x`` is a number the float32 merge can scale by (a Python or numpy int / float; not a
    bool, a complex, or an int past float's range)."""
    if not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, (bool, np.bool_)):
        return False
    try:
        return abs(float(x)) <= MAX_FLOAT  # False for NaN and Inf too
    except OverflowError:  # an int past float64's range
        return False


def _shown(x: Any) -> str:
    """``repr(x)`` for a message, a very long one (e.g. ``10**400``) cut to its start and length."""
    text = repr(x)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _adapter_weights(adapter_weights: Any, count: int) -> list[float]:
    """``set_adapters``' ``adapter_weights`` as one float per adapter (``count`` of them): None (1
    each), a number (for each), or a list / tuple of ``count`` numbers or None (1), as diffusers.

    Raises:
        InputError: anything else, in one line naming ``adapter_weights=``, the value and what is valid.
    """
    if adapter_weights is None:
        return [1.0] * count
    if _finite(adapter_weights):
        return [float(adapter_weights)] * count
    if isinstance(adapter_weights, (int, float, np.integer, np.floating)) and not isinstance(adapter_weights, bool):
        raise InputError(f"set_adapters: adapter_weights={_shown(adapter_weights)} is not {FINITE}")
    valid = (
        f"give {FINITE}, or a list of one per adapter ({count}; None in it counts as 1); vidax does not "
        "take diffusers' dicts of per-module scales"
    )
    if isinstance(adapter_weights, (list, tuple)) and len(adapter_weights) == count:
        bad = [w for w in adapter_weights if w is not None and not _finite(w)]
        if not bad:
            return [1.0 if w is None else float(w) for w in adapter_weights]
        raise InputError(f"set_adapters: adapter_weights={_shown(adapter_weights)}: {_shown(bad[0])} is not {FINITE}")
    raise InputError(f"set_adapters: adapter_weights={_shown(adapter_weights)} is not valid: {valid}")


def _name(source: Any) -> str:
    return repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else "a state dict"


def _expert_name(e: int) -> str:
    return "transformer" if e == 0 else f"transformer_{e + 1}"
