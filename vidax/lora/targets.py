"""Where each module of a LoRA file lands: the model's parameters, found through the family's own
key rules (:class:`~vidax.weights.loader.KeyRules`, from the registry), so a family gets LoRA with
no LoRA code of its own.

A module name is tried, in order, as the diffusers name (``blocks.0.attn1.to_q``), as the
original repository's name (:data:`ORIGINAL_NAMES`: the renames diffusers' LoRA converters apply),
and, for kohya files (``blocks_0_self_attn_q``), as either name with ``_`` for ``.``. A low-rank
pair and ``diff`` land on ``<module>.weight`` (or, for ``diff``, on the parameter ``<module>``
itself, e.g. ``scale_shift_table``), ``diff_b`` on ``<module>.bias``. Anything else is an error.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
from flax import nnx

from vidax.lora.formats import LoraModule
from vidax.weights.loader import KeyRules, _target_shape_of, _to_target_layout

#: The original repositories' module names that diffusers' LoRA converters rename, per family
#: (registry name): ``(per-block renames, top-level renames)``, whole dotted names (after the
#: block prefix and index, for the first). Families absent here (CogVideoX, Cosmos) or whose
#: original files use diffusers' names after the ``diffusion_model.`` prefix (LTX-Video, as
#: diffusers' ``_convert_non_diffusers_ltxv_lora_to_diffusers``) need none.
ORIGINAL_NAMES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    # diffusers' _convert_non_diffusers_wan_lora_to_diffusers / _convert_musubi_wan_lora_to_diffusers,
    # plus the norms and modulation tables that LightX2V's diff keys name.
    "wan": (
        {
            **{f"{a}.{o}": f"{b}.{c}" for a, b in (("self_attn", "attn1"), ("cross_attn", "attn2"))
               for o, c in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("o", "to_out.0"),
                            ("norm_q", "norm_q"), ("norm_k", "norm_k"))},
            "cross_attn.k_img": "attn2.add_k_proj", "cross_attn.v_img": "attn2.add_v_proj",
            "cross_attn.norm_k_img": "attn2.norm_added_k",
            "ffn.0": "ffn.net.0.proj", "ffn.2": "ffn.net.2", "norm3": "norm2", "modulation": "scale_shift_table",
        },
        {
            "text_embedding.0": "condition_embedder.text_embedder.linear_1",
            "text_embedding.2": "condition_embedder.text_embedder.linear_2",
            "time_embedding.0": "condition_embedder.time_embedder.linear_1",
            "time_embedding.2": "condition_embedder.time_embedder.linear_2",
            "time_projection.1": "condition_embedder.time_proj",
            "img_emb.proj.0": "condition_embedder.image_embedder.norm1",
            "img_emb.proj.1": "condition_embedder.image_embedder.ff.net.0.proj",
            "img_emb.proj.3": "condition_embedder.image_embedder.ff.net.2",
            "img_emb.proj.4": "condition_embedder.image_embedder.norm2",
            "head.head": "proj_out", "head.modulation": "scale_shift_table",
        },
    ),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """One parameter a LoRA module lands on.

    Attributes:
        path: the NNX parameter path (``("blocks", "attn1", "to_q", "kernel")``).
        layer: the layer index within a stacked parameter, or None.
        shape: the parameter's shape (one layer's, for a stacked parameter), vidax layout.
        key: the diffusers key of the parameter (``blocks.0.attn1.to_q.weight``).
    """

    path: tuple
    layer: int | None
    shape: tuple
    key: str


@dataclasses.dataclass
class Term:
    """What one LoRA module adds to one target: ``scale * up @ down`` (``kind="lora"``, ``a`` =
    down (r, in), ``b`` = up (out, r), torch layout) or ``scale * a`` (``kind="diff"``, ``a`` in
    the vidax layout)."""

    target: Target
    kind: str
    a: np.ndarray
    b: np.ndarray | None
    scale: float


class ModelTargets:
    """The parameters of one transformer, by diffusers key, and the family's name tables.

    Args:
        module: the loaded transformer (stacked blocks may be streamed: placeholders are enough).
        rules: its :class:`KeyRules`. family: its registry family name.
    """

    def __init__(self, module: nnx.Module, rules: KeyRules, family: str):
        self.family = family
        self.rules = rules
        self.params: dict[str, Target] = {}
        stacked = tuple(rules.stacked)
        for path, var in nnx.to_flat_state(nnx.state(module, nnx.Param)):
            shape = tuple(var.get_value().shape)
            dotted = ".".join(str(p) for p in path)
            if any(dotted.startswith(s + ".") for s in stacked):
                for layer in range(shape[0]):
                    key = rules.join(path, layer)
                    self.params[key] = Target(tuple(path), layer, shape[1:], key)
            else:
                key = rules.join(path, None)
                self.params[key] = Target(tuple(path), None, shape, key)
        self.modules = {k.rsplit(".", 1)[0] for k in self.params if k.endswith((".weight", ".bias"))}
        self.modules |= set(self.params)
        block, top = ORIGINAL_NAMES.get(family, ({}, {}))
        self._to_diffusers = dict(top)
        self._block_renames = block
        self._underscored = {}
        for name in self.modules:
            self._underscored.setdefault(name.replace(".", "_"), name)
        for orig, new in top.items():
            self._underscored.setdefault(orig.replace(".", "_"), new)
        for name in self.modules:
            prefix, rest = _split_block(name, stacked)
            if prefix:
                for orig, new in block.items():
                    if rest == new:
                        self._underscored.setdefault((prefix + orig).replace(".", "_"), name)

    def module_name(self, name: str) -> str | None:
        """The diffusers module name of a LoRA module ``name`` (see the module docstring), or None."""
        if name in self.modules:
            return name
        if name in self._to_diffusers:
            return self._to_diffusers[name]
        prefix, rest = _split_block(name, tuple(self.rules.stacked) + ("blocks",))
        if prefix and rest in self._block_renames:
            renamed = prefix + self._block_renames[rest]
            # the original repositories call the block stack "blocks" whatever diffusers calls it
            if renamed in self.modules:
                return renamed
        return self._underscored.get(name)

    def terms(self, modules: dict[str, LoraModule], weight: float = 1.0) -> tuple[list[Term], list[str]]:
        """``(terms, problems)``: what every module adds where, and each key that lands nowhere
        or on a parameter of another shape (one line each)."""
        terms, problems = [], []
        for name, m in modules.items():
            module = self.module_name(name)
            if module is None:
                problems += [f"{k} (no module {name})" for k in m.keys]
                continue
            if m.down is not None:
                t = self.params.get(module + ".weight")
                out_in = (m.up.shape[0], m.down.shape[1])
                if t is None or len(t.shape) != 2:
                    problems.append(f"{m.keys[0]} ({module} has no linear weight)")
                elif _target_shape_of(out_in, t.path) != t.shape:
                    problems.append(f"{m.keys[0]}: up @ down is {out_in} (out, in), {t.key} is "
                                    f"{_torch_shape(t)}")
                else:
                    terms.append(Term(t, "lora", m.down, m.up, weight * m.scale))
            for kind, value, leafs in (("diff", m.diff, (".weight", "")), ("diff_b", m.diff_b, (".bias",))):
                if value is None:
                    continue
                t = next((self.params[module + s] for s in leafs if module + s in self.params), None)
                key = next(k for k in m.keys if k.endswith(("diff_b", "lora_B.bias") if kind == "diff_b" else "diff"))
                if t is None:
                    problems.append(f"{key} ({module} has no {'bias' if kind == 'diff_b' else 'weight'})")
                elif _target_shape_of(value.shape, t.path) != t.shape:
                    problems.append(f"{key}: shape {value.shape}, {t.key} is {_torch_shape(t)}")
                else:
                    scale = weight * (m.peft_scale if kind == "diff_b" else 1.0)
                    terms.append(Term(t, "diff", np.ascontiguousarray(_to_target_layout(value, t.path)), None, scale))
        return terms, problems


def _split_block(name: str, stacked: tuple) -> tuple[str, str]:
    """``"blocks.3.attn1.to_q"`` -> (``"blocks.3."``, ``"attn1.to_q"``); ("", name) outside a stack."""
    for s in stacked:
        m = re.match(re.escape(s) + r"[._](\d+)[._](.*)$", name)
        if m:
            return f"{s}.{m.group(1)}.", m.group(2)
    return "", name


def _torch_shape(t: Target) -> tuple:
    if t.path[-1] == "kernel" and len(t.shape) == 2:
        return (t.shape[1], t.shape[0])
    return t.shape


def transformer_targets(module: nnx.Module, spec: Any, config: Any) -> ModelTargets:
    """:class:`ModelTargets` of a transformer loaded from registry entry ``spec`` with ``config``."""
    return ModelTargets(module, spec.rules(config, ()), spec.family)


def guess_family(modules: dict[str, LoraModule], exclude: str = "") -> str | None:
    """The registered family whose transformer (default config, built abstractly) takes the most
    of ``modules``' names, as ``"family (ClassName)"``, or None when none takes any (for the error
    naming another family's LoRA)."""
    return best_family(modules, exclude)[0]


def best_family(modules: dict[str, LoraModule], exclude: str = "") -> tuple[str | None, int]:
    """``(family, modules it places)`` of :func:`guess_family`."""
    from vidax.registry import registry

    best, score = None, 0
    for spec in registry().components():
        if spec.kind != "transformer" or spec.model is None or spec.family == exclude:
            continue
        try:
            config = spec.config_class().from_config_dict({}, source=spec.class_name)
            model_cls = spec.model_class()
            kwargs = {"mesh": None} if spec.block_stacks else {}
            module = nnx.eval_shape(lambda: model_cls(config, rngs=nnx.Rngs(0), **kwargs))
            targets = transformer_targets(module, spec, config)
        except Exception:  # a family whose default config cannot be built abstractly is skipped
            continue
        hits = sum(_generic(targets, name) is not None for name in modules)
        if hits > score:
            best, score = f"{spec.family} ({spec.class_name})", hits
    return best, score


def _generic(targets: ModelTargets, name: str) -> str | None:
    """:meth:`ModelTargets.module_name` ignoring layer indices beyond the default config's depth."""
    found = targets.module_name(name)
    if found is not None:
        return found
    return targets.module_name(re.sub(r"([._])\d+([._])", r"\g<1>0\g<2>", name, count=1))


__all__ = ("ORIGINAL_NAMES", "ModelTargets", "Target", "Term", "transformer_targets", "guess_family")
