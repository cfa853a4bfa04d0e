"""Where each module of a LoRA file lands: the model's parameters, found through the family's own
key rules (:class:`~vidax.weights.loader.KeyRules`, from the registry), so a family gets LoRA with
no LoRA code of its own.

A module name is tried, in order, as the diffusers name (``blocks.0.attn1.to_q``), as the
original repository's name (:data:`ORIGINAL_NAMES`: the renames and splits diffusers' LoRA
converters apply; kohya's ``blocks_0_self_attn_q`` matches with ``_`` for ``.``) and as the
diffusers name with ``_`` for ``.``. A low-rank
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
from vidax.models.hunyuan_video.original_names import ORIGINAL_EMBEDDER_NAMES
from vidax.nn.gguf import value_shape as gguf_shape
from vidax.nn.quant import _at, quantizable_kernels
from vidax.parallel.offload import offloaded_stacks
from vidax.weights.loader import KeyRules, _target_shape_of, _to_target_layout


@dataclasses.dataclass(frozen=True)
class Split:
    """An original module fused from several diffusers modules (HunyuanVideo's ``img_attn_qkv``):
    its output rows are those of ``names`` in order (sizes from the model); the down factor is
    shared, the up factor, ``diff`` and ``diff_b`` are split by rows, as diffusers' converter."""

    names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Halves:
    """An original module whose output rows are the diffusers module's with its two halves
    swapped (HunyuanVideo's final ``adaLN_modulation``: shift then scale, diffusers' scale then shift)."""

    name: str


def _wan_names() -> tuple:
    block = {
        f"{a}.{o}": f"{b}.{c}"
        for a, b in (("self_attn", "attn1"), ("cross_attn", "attn2"))
        for o, c in (
            ("q", "to_q"),
            ("k", "to_k"),
            ("v", "to_v"),
            ("o", "to_out.0"),
            ("norm_q", "norm_q"),
            ("norm_k", "norm_k"),
        )
    }
    block.update(
        {
            "cross_attn.k_img": "attn2.add_k_proj",
            "cross_attn.v_img": "attn2.add_v_proj",
            "cross_attn.norm_k_img": "attn2.norm_added_k",
            "ffn.0": "ffn.net.0.proj",
            "ffn.2": "ffn.net.2",
            "norm3": "norm2",
            "modulation": "scale_shift_table",
        }
    )
    top = {
        "text_embedding.0": "condition_embedder.text_embedder.linear_1",
        "text_embedding.2": "condition_embedder.text_embedder.linear_2",
        "time_embedding.0": "condition_embedder.time_embedder.linear_1",
        "time_embedding.2": "condition_embedder.time_embedder.linear_2",
        "time_projection.1": "condition_embedder.time_proj",
        "img_emb.proj.0": "condition_embedder.image_embedder.norm1",
        "img_emb.proj.1": "condition_embedder.image_embedder.ff.net.0.proj",
        "img_emb.proj.3": "condition_embedder.image_embedder.ff.net.2",
        "img_emb.proj.4": "condition_embedder.image_embedder.norm2",
        "head.head": "proj_out",
        "head.modulation": "scale_shift_table",
    }
    return tuple((rf"blocks\.(\d+)\.{re.escape(k)}", rf"blocks.\1.{v}") for k, v in block.items()) + tuple(
        (re.escape(k), v) for k, v in top.items()
    )


def _hunyuan_names() -> tuple:
    qkv, add = ("attn.to_q", "attn.to_k", "attn.to_v"), ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj")
    double = {
        "img_attn_qkv": qkv,
        "txt_attn_qkv": add,
        "img_attn_proj": "attn.to_out.0",
        "txt_attn_proj": "attn.to_add_out",
        "img_attn_q_norm": "attn.norm_q",
        "img_attn_k_norm": "attn.norm_k",
        "txt_attn_q_norm": "attn.norm_added_q",
        "txt_attn_k_norm": "attn.norm_added_k",
        "img_mod.linear": "norm1.linear",
        "txt_mod.linear": "norm1_context.linear",
        "img_mlp.fc1": "ff.net.0.proj",
        "img_mlp.fc2": "ff.net.2",
        "txt_mlp.fc1": "ff_context.net.0.proj",
        "txt_mlp.fc2": "ff_context.net.2",
    }
    single = {
        "linear1": qkv + ("proj_mlp",),
        "linear2": "proj_out",
        "modulation.linear": "norm.linear",
        "q_norm": "attn.norm_q",
        "k_norm": "attn.norm_k",
    }
    refiner = {
        "self_attn_qkv": qkv,
        "self_attn_proj": "attn.to_out.0",
        "mlp.fc1": "ff.net.0.proj",
        "mlp.fc2": "ff.net.2",
        "adaLN_modulation.1": "norm_out.linear",
        "norm1": "norm1",
        "norm2": "norm2",
    }
    top = {
        **ORIGINAL_EMBEDDER_NAMES,
        "final_layer.linear": "proj_out",
        "final_layer.adaLN_modulation.1": Halves("norm_out.linear"),
        "img_in.proj": "x_embedder.proj",
        "txt_in.input_embedder": "context_embedder.proj_in",
        "txt_in.t_embedder.mlp.0": "context_embedder.time_text_embed.timestep_embedder.linear_1",
        "txt_in.t_embedder.mlp.2": "context_embedder.time_text_embed.timestep_embedder.linear_2",
        "txt_in.c_embedder.linear_1": "context_embedder.time_text_embed.text_embedder.linear_1",
        "txt_in.c_embedder.linear_2": "context_embedder.time_text_embed.text_embedder.linear_2",
    }

    def to(prefix: str, v):
        if isinstance(v, tuple):
            return Split(tuple(prefix + n for n in v))
        return Halves(prefix + v.name) if isinstance(v, Halves) else prefix + v

    return (
        tuple((rf"double_blocks\.(\d+)\.{re.escape(k)}", to("transformer_blocks.\\1.", v)) for k, v in double.items())
        + tuple(
            (rf"single_blocks\.(\d+)\.{re.escape(k)}", to("single_transformer_blocks.\\1.", v))
            for k, v in single.items()
        )
        + tuple(
            (
                rf"txt_in\.individual_token_refiner\.blocks\.(\d+)\.{re.escape(k)}",
                to("context_embedder.token_refiner.refiner_blocks.\\1.", v),
            )
            for k, v in refiner.items()
        )
        + tuple((re.escape(k), to("", v)) for k, v in top.items())
    )


#: The original repositories' module names that diffusers' LoRA converters rename, per family
#: (registry name): ``(regex, diffusers name)`` pairs (the name may use the regex's groups, or be
#: a :class:`Split` / :class:`Halves`), matched against the whole module name with ``.`` or ``_``
#: between words (kohya files write ``_``). Families absent here (CogVideoX, Cosmos) or whose
#: original files use diffusers' names after the ``diffusion_model.`` prefix (LTX-Video, as
#: diffusers' ``_convert_non_diffusers_ltxv_lora_to_diffusers``) need none.
ORIGINAL_NAMES: dict[str, tuple] = {
    # diffusers' _convert_non_diffusers_wan_lora_to_diffusers / _convert_musubi_wan_lora_to_diffusers,
    # plus the norms and modulation tables that LightX2V's diff keys name.
    "wan": _wan_names(),
    # diffusers' _convert_hunyuan_video_lora_to_diffusers
    "hunyuan_video": _hunyuan_names(),
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
        #: kernels kept as GGUF blocks on the device (vidax.nn.gguf): path -> type
        self.gguf = {
            tuple(p): _at(module, p[:-1]).kernel_gguf
            for p in quantizable_kernels(module)
            if getattr(_at(module, p[:-1]), "kernel_gguf", None) is not None
        }
        #: the stack attributes whose blocks are streamed from host memory
        self.streamed = {s.attr for s in offloaded_stacks(module)}
        for path, var in nnx.to_flat_state(nnx.state(module, nnx.Param)):
            shape = tuple(var.get_value().shape)
            if tuple(path) in self.gguf:  # the kernel's values, not its blocks
                shape = gguf_shape(shape, self.gguf[tuple(path)])
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
        self._renames = [
            (re.compile(pattern.replace(r"\.", "[._]")), new) for pattern, new in ORIGINAL_NAMES.get(family, ())
        ]
        self._underscored = {}
        for name in self.modules:
            self._underscored.setdefault(name.replace(".", "_"), name)

    def module_name(self, name: str) -> str | Split | Halves | None:
        """The diffusers module (or :class:`Split` / :class:`Halves` of it) of a LoRA module
        ``name`` (see the module docstring), or None."""
        if name in self.modules:
            return name
        for pattern, new in self._renames:
            m = pattern.fullmatch(name)
            if m:
                if isinstance(new, Split):
                    return Split(tuple(m.expand(n) for n in new.names))
                return Halves(m.expand(new.name)) if isinstance(new, Halves) else m.expand(new)
        return self._underscored.get(name)

    def terms(self, modules: dict[str, LoraModule], weight: float = 1.0) -> tuple[list[Term], list[str]]:
        """``(terms, problems)``: what every module adds where, and each key that lands nowhere
        or on a parameter of another shape (one line each)."""
        terms, problems = [], []
        for name, m in modules.items():
            found = self.module_name(name)
            if found is None:
                problems += [f"{k} (no module {name})" for k in m.keys]
                continue
            parts = self._parts(found, m)
            if isinstance(parts, str):
                problems.append(parts)
                continue
            for module, rows in parts:
                self._module_terms(module, m, rows, weight, terms, problems)
        return terms, problems

    def _parts(self, found, m: LoraModule):
        """``[(diffusers module, rows)]`` a LoRA module's output rows go to (``rows``: a
        function of an array giving its rows for that module), or a problem (one line)."""
        if isinstance(found, str):
            return [(found, lambda x: x)]
        if isinstance(found, Halves):

            def swap(x):
                h = x.shape[0] // 2
                return np.concatenate([x[h:], x[:h]])

            return [(found.name, swap)]
        sizes = []
        for n in found.names:
            t = self.params.get(n + ".weight")
            if t is None:
                return f"{m.keys[0]} (splits into {', '.join(found.names)}; {n} has no weight)"
            sizes.append(_torch_shape(t)[0])
        rows = next(x.shape[0] for x in (m.up, m.diff, m.diff_b) if x is not None)
        if rows != sum(sizes):
            return (
                f"{m.keys[0]}: {rows} output rows, but {', '.join(found.names)} have {sum(sizes)} "
                f"({' + '.join(map(str, sizes))})"
            )
        starts = np.cumsum([0] + sizes)
        return [(n, lambda x, a=int(a), b=int(b): x[a:b]) for n, a, b in zip(found.names, starts[:-1], starts[1:])]

    def _module_terms(self, module: str, m: LoraModule, rows, weight: float, terms: list, problems: list) -> None:
        if m.down is not None:
            t = self.params.get(module + ".weight")
            up = np.ascontiguousarray(rows(m.up))
            out_in = (up.shape[0], m.down.shape[1])
            if t is None or len(t.shape) != 2:
                problems.append(f"{m.keys[0]} ({module} has no linear weight)")
            elif t.path in self.gguf and t.path[0] in self.streamed:
                problems.append(self._gguf_problem(m.keys[0], t))
            elif _target_shape_of(out_in, t.path) != t.shape:
                problems.append(f"{m.keys[0]}: up @ down is {out_in} (out, in), {t.key} is {_torch_shape(t)}")
            else:
                terms.append(Term(t, "lora", m.down, up, weight * m.scale))
        for kind, value, leafs in (("diff", m.diff, (".weight", "")), ("diff_b", m.diff_b, (".bias",))):
            if value is None:
                continue
            value = rows(value)
            t = next((self.params[module + s] for s in leafs if module + s in self.params), None)
            key = next(
                k for k in m.keys if k.endswith(("diff_b", "lora_B.bias") if kind == "diff_b" else ("diff", "diff_m"))
            )
            if t is None:
                problems.append(f"{key} ({module} has no {'bias' if kind == 'diff_b' else 'weight'})")
            elif t.path in self.gguf and t.path[0] in self.streamed:
                problems.append(self._gguf_problem(key, t))
            elif _target_shape_of(value.shape, t.path) != t.shape:
                problems.append(f"{key}: shape {value.shape}, {t.key} is {_torch_shape(t)}")
            else:
                scale = weight * (m.peft_scale if kind == "diff_b" else 1.0)
                terms.append(Term(t, "diff", np.ascontiguousarray(_to_target_layout(value, t.path)), None, scale))

    def _gguf_problem(self, key: str, t: Target) -> str:
        return (
            f"{key}: {t.key} is kept as GGUF {self.gguf[t.path]} blocks in streamed blocks, which vidax does "
            "not merge a LoRA into (load without offload=/--offload-blocks, with weight_dtype='int8' / "
            "--weights int8, or from safetensors)"
        )


def _torch_shape(t: Target) -> tuple:
    if t.path[-1] == "kernel" and len(t.shape) == 2:
        return (t.shape[1], t.shape[0])
    return t.shape


def transformer_targets(module: nnx.Module, spec: Any, config: Any) -> ModelTargets:
    """:class:`ModelTargets` of a transformer loaded from registry entry ``spec`` with ``config``."""
    return ModelTargets(module, spec.rules(config, ()), spec.family)


def guess_family(modules: dict[str, LoraModule], exclude: str = "") -> str | None:
    """The registered family whose transformer (default config, built abstractly) takes the most
    of ``modules``' names, as ``"family (ClassName)"``; where several take as many (LTX-Video,
    LTX-2, CogVideoX and Cosmos name their attention modules alike), all of them, saying so; None
    when none takes any (for the error naming another family's LoRA)."""
    return best_family(modules, exclude)[0]


def best_family(modules: dict[str, LoraModule], exclude: str = "") -> tuple[str | None, int]:
    """``(family, modules it places)`` of :func:`guess_family`."""
    specs, score = fitting_transformers(modules, exclude)
    return family_words(specs), score


def family_words(specs: list) -> str | None:
    """The transformer registry entries of :func:`fitting_transformers` in words: ``"family
    (ClassName)"``, several joined with "or" and saying their module names fit each alike; None
    for none."""
    names = [f"{spec.family} ({spec.class_name})" for spec in specs]
    if len(names) > 1:
        return f"{', '.join(names[:-1])} or {names[-1]} (its module names fit each of them alike)"
    return names[0] if names else None


def best_transformer(modules: dict[str, Any], exclude: str = "") -> tuple[Any, int]:
    """``(transformer spec, modules it places)``: the first of :func:`fitting_transformers`;
    ``(None, 0)`` when none takes any."""
    specs, score = fitting_transformers(modules, exclude)
    return (specs[0] if specs else None), score


def fitting_transformers(modules: dict[str, Any], exclude: str = "") -> tuple[list, int]:
    """``(transformer specs, modules each places)``: the registered transformers (family
    ``exclude`` left out) whose default config's modules take the most of ``modules``' names
    (layer indices beyond its depth folded to 0), in registry order; ``([], 0)`` when none takes
    any."""
    from vidax.registry import registry

    best, score = [], 0
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
        if hits and hits == score:
            best.append(spec)
        elif hits > score:
            best, score = [spec], hits
    return best, score


def _generic(targets: ModelTargets, name: str) -> str | None:
    """:meth:`ModelTargets.module_name` ignoring layer indices beyond the default config's depth."""
    found = targets.module_name(name)
    if found is not None:
        return found
    return targets.module_name(re.sub(r"([._])\d+([._])", r"\g<1>0\g<2>", name, count=1))


__all__ = ("ORIGINAL_NAMES", "ModelTargets", "Target", "Term", "transformer_targets", "guess_family")
