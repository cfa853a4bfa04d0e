"""Helpers for parity tests against the PyTorch references."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np


def randomize_torch_module(module, seed: int, scale: float = 0.5, gain: float | None = None) -> None:
    """Give **every** parameter and floating buffer of a torch module random values.

    Zero or one initialisation (biases, norm weights, modulation tables) hides bugs such as a
    missing bias or a swapped shift/scale, so nothing keeps its default. Norm weights get
    ``1 + scale * N(0, 1)`` so activations stay of order one; everything else
    ``scale * N(0, 1) / sqrt(fan_in)`` for matrices and ``scale * N(0, 1)`` for vectors.
    ``gain`` (default ``scale``) replaces ``scale`` for matrices: deep conv stacks (VAEs) need a
    gain near 1.5 so the input still reaches the output past the biases.
    """
    gain = scale if gain is None else gain
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if p.ndim == 1 and ("norm" in name or leaf in ("gamma", "scale")) and "bias" not in leaf:
                value = 1.0 + scale * noise
            elif p.ndim >= 2:
                fan_in = int(np.prod(p.shape[1:]))
                value = gain * noise / np.sqrt(fan_in) * (1.0 if "embedding" not in name else np.sqrt(fan_in))
            else:
                value = scale * noise
            p.copy_(value.to(p.dtype))


def max_rel_err(a, b) -> float:
    """max |a - b| / max |b|: a relative error that does not blow up on near-zero entries."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def assert_close(got, want, tol: float) -> None:
    """Same shape and :func:`max_rel_err` below ``tol``."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = max_rel_err(got, want)
    assert err < tol, err


def assert_input_sensitive(a, b, min_err: float = 0.05) -> None:
    """The reference's outputs ``a`` and ``b`` for two different inputs differ by far more than any
    parity tolerance (else a parity check on them would be vacuous)."""
    assert max_rel_err(a, b) > min_err, max_rel_err(a, b)


def standard_normal(shape, seed: int) -> np.ndarray:
    """float32 standard normal numbers of ``shape`` from numpy's generator seeded ``seed``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def psnr(a, b, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB of ``a`` against reference ``b``."""
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(data_range**2 / mse)


def bf16_reference(pipe, float32=("vae",)):
    """A copy of the diffusers pipeline ``pipe`` in bfloat16, as ``from_pretrained(...,
    torch_dtype=torch.bfloat16)`` loads it (every parameter and buffer of a diffusers model in
    bfloat16 except its ``_keep_in_fp32_modules``, matched on the dotted name's parts as diffusers
    does), with the components named in ``float32`` kept float32: pass what
    ``vidax.load_pipeline(path, dtype="bfloat16")`` keeps float32 by default (the VAE; the
    CogVideoX T5; the Wan2.1 CLIP image encoder), so both sides run the same component dtypes and
    the comparison sees the pipelines' own bfloat16 handling.

    What a PSNR bar against it can see: two bf16 implementations that round in different places
    (op order, fused ops) have independent rounding errors, so their videos are about as far apart
    as either is from the fp32 video (measured in every family); a vidax that silently ran fp32
    would sit at diffusers' own bf16-vs-fp32 distance and is caught by the tests' weight-dtype
    checks instead. The bars (measured value less ~4 dB) catch what adds error beyond bf16
    rounding: a step that fails or changes dtype (HunyuanVideo and LTX-Video without CFG failed at
    the second step before the fix), latents or guidance rounded to bf16 each step (HunyuanVideo:
    10 dB), a component in the wrong dtype.
    """
    import copy

    import torch
    from diffusers import ModelMixin

    ref = copy.deepcopy(pipe)
    for name, module in ref.components.items():
        if not isinstance(module, torch.nn.Module) or name in float32:
            continue
        module.to(torch.bfloat16)
        keep = (getattr(module, "_keep_in_fp32_modules", None) or []) if isinstance(module, ModelMixin) else []
        for sub_name, sub in module.named_modules():
            if any(k in sub_name.split(".") for k in keep):
                sub.to(torch.float32)
    return ref


def channels_first(x) -> np.ndarray:
    """``(B, T, H, W, C)`` -> contiguous ``(B, C, T, H, W)`` numpy (the diffusers video layout)."""
    return np.ascontiguousarray(np.transpose(np.asarray(x), (0, 4, 1, 2, 3)))


def channels_last(x) -> np.ndarray:
    """``(B, C, T, H, W)`` numpy or torch tensor -> ``(B, T, H, W, C)`` numpy."""
    x = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    return np.transpose(x, (0, 2, 3, 4, 1))


def save_random_vae(model, seed: int, path) -> None:
    """Randomise a reference VAE for parity and ``save_pretrained`` it to ``path``.

    Small biases and matrix gain 0.7: with larger biases (or the default scale) a deep random conv
    stack forgets its input (unrelated inputs decode to nearly the same frames), which would make
    parity vacuous. Tests should still assert that their outputs are input-sensitive.
    """
    randomize_torch_module(model, seed, scale=0.1, gain=0.7)
    model.save_pretrained(path)


def assert_reference_parameters(abstract, ref, rules, buffers=None) -> int:
    """Check an abstract NNX module (``nnx.eval_shape``) against a reference torch module 1:1.

    Every reference state-dict key must map by ``rules`` (a :class:`vidax.weights.loader.KeyRules`
    without stacked prefixes) to a parameter of the same shape after the loader's layout change,
    and back; the parameter counts must be equal. ``buffers``: the ``nnx.Variable`` type of the
    reference's persistent buffers (in its state dict, not among its parameters), if any. Returns
    the count.
    """
    from flax import nnx

    from vidax.weights.loader import _target_shape_of, path_str

    kinds = nnx.Param if buffers is None else (nnx.Param, buffers)
    flat = {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(abstract, kinds))}
    params = {p for p, _ in nnx.to_flat_state(nnx.state(abstract, nnx.Param))}
    ours = {rules.join(p, None): (p, tuple(v.shape)) for p, v in flat.items()}
    theirs = {k: tuple(t.shape) for k, t in ref.state_dict().items()}
    only_ref, only_ours = sorted(set(theirs) - set(ours)), sorted(set(ours) - set(theirs))
    assert not only_ref and not only_ours, (only_ref[:5], only_ours[:5])
    for key, shape in theirs.items():
        p, want = ours[key]
        assert _target_shape_of(shape, p) == want, (key, path_str(p), shape, want)
    n_ours = sum(int(np.prod(s)) for p, s in ours.values() if p in params)
    n_ref = sum(t.numel() for t in ref.parameters())
    assert n_ours == n_ref, (n_ours, n_ref)
    return n_ours


def source_key_shapes(abstract: dict, rules) -> dict[str, tuple[int, ...]]:
    """The checkpoint keys and (reference-layout) shapes that ``rules`` map onto an abstract module.

    ``abstract`` is the flat ``{path: Variable}`` of :func:`vidax.weights.loader.abstract_params`;
    parameters under a stacked prefix of ``rules`` give one key per layer, and linear kernels
    ``(I, O)`` are reported as torch's ``(O, I)``.
    """
    from vidax.weights.loader import _stack_axes

    stacks = _stack_axes(abstract, rules)
    out: dict[str, tuple[int, ...]] = {}
    for p, var in abstract.items():
        shape = tuple(var.get_value().shape)
        if p in stacks:
            shape = shape[1:]
            keys = [rules.join(p, i) for i in range(stacks[p])]
        else:
            keys = [rules.join(p, None)]
        if p[-1] == "kernel" and len(shape) == 2:
            shape = shape[::-1]  # linear (I, O) -> torch (O, I)
        out.update({k: shape for k in keys})
    return out


def build_clip_tokenizer(path: str):
    """A byte-level BPE CLIPTokenizer (every byte, with and without ``</w>``, a few merges;
    ``<|endoftext|>`` last, so the legacy eos pooling finds it as the largest id)."""
    import tokenizers
    import transformers

    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab.update({c + "</w>": len(alphabet) + i for i, c in enumerate(alphabet)})
    merges = [("t", "h"), ("th", "e</w>"), ("c", "a"), ("ca", "t</w>"), ("s", "k"), ("sk", "y</w>")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    tok = transformers.CLIPTokenizer(vocab=vocab, merges=merges)
    tok.save_pretrained(path)
    return tok


def build_sentencepiece_tokenizer(folder) -> None:
    """A CogVideoX-style T5 tokenizer folder: a SentencePiece unigram ``spiece.model`` (30 pieces;
    pad 0, eos 1, unk 2) and ``tokenizer_config.json``, no ``tokenizer.json`` (vidax converts it)."""
    import sentencepiece as spm

    os.makedirs(folder, exist_ok=True)
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(
            "\n".join(
                [
                    "a cat walking over the sea at night",
                    "the red car in the city light",
                    "a dog running under the blue sky",
                    "zebra and camera scene video",
                ]
                * 50
            )
        )
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=os.path.join(folder, "spiece"),
        vocab_size=30,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
    )
    os.remove(corpus)
    os.remove(os.path.join(folder, "spiece.vocab"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        f.write(
            '{"tokenizer_class": "T5Tokenizer", "extra_ids": 0, "pad_token": "<pad>", "eos_token": "</s>", '
            '"unk_token": "<unk>"}'
        )


@contextlib.contextmanager
def reference_tiling(ref, tiling, methods: tuple[str, ...]):
    """A diffusers VAE ``ref`` with its tiling attributes set from the vidax tiling dataclass
    ``tiling`` (its fields are the reference's attribute names; a ``None`` field keeps the
    reference's own value), restored after. Yields a dict filled on exit with how many times each
    of ``ref``'s ``methods`` (its tiled paths) was called."""
    from unittest import mock

    # ``same_shape_tiles`` is vidax's own (the memory plan's tile layout), not a reference attribute
    fields = [
        f.name
        for f in dataclasses.fields(tiling)
        if getattr(tiling, f.name) is not None and f.name != "same_shape_tiles"
    ]
    saved = {name: getattr(ref, name) for name in fields}
    calls = {}
    with contextlib.ExitStack() as stack:
        mocks = {
            name: stack.enter_context(mock.patch.object(ref, name, side_effect=getattr(ref, name))) for name in methods
        }
        for name in fields:
            setattr(ref, name, getattr(tiling, name))
        try:
            yield calls
        finally:
            calls.update({name: m.call_count for name, m in mocks.items()})
            for name, value in saved.items():
                setattr(ref, name, value)


def reference_vae_decode(ref, z, tiling, methods: tuple[str, ...]):
    """``ref.decode`` of channels-last latents ``z`` under :func:`reference_tiling`:
    ``(video (B, F, H, W, C) numpy, calls)``."""
    import torch

    with torch.no_grad(), reference_tiling(ref, tiling, methods) as calls:
        out = channels_last(ref.decode(torch.from_numpy(channels_first(z))).sample)
    return out, calls


def reference_vae_encode(ref, x, tiling, methods: tuple[str, ...]):
    """``ref.encode`` of a channels-last video ``x`` under :func:`reference_tiling`:
    ``((mean, logvar) channels-last numpy, calls)``."""
    import torch

    with torch.no_grad(), reference_tiling(ref, tiling, methods) as calls:
        dist = ref.encode(torch.from_numpy(channels_first(x))).latent_dist
    return (channels_last(dist.mean), channels_last(dist.logvar)), calls


# ----------------------------------------------------------------------------- tiled VAE decode


def tiling_state(vae) -> dict:
    """The switches and sizes of a vidax VAE's tiling (:class:`vidax.nn.tiling.TiledVAE`), by the
    reference's attribute names: ``use_tiling``, ``use_framewise_decoding`` where it has temporal
    tiles, and every size field of its tiling dataclass."""
    state = {"use_tiling": vae.use_tiling}
    if vae.TILING_FRAMEWISE is not None:
        state["use_framewise_decoding"] = vae.use_framewise_decoding
    tiling = vae.tiling if vae.tiling is not None else vae.TILING()
    switches = {vae.TILING_SWITCH, vae.TILING_FRAMEWISE}
    state.update(
        {
            f.name: getattr(tiling, f.name)
            for f in dataclasses.fields(tiling)
            if f.name not in switches and f.name.startswith("tile_")
        }
    )
    return state


def check_tiling_switches(ref, vae, steps) -> None:
    """Run each step (``("enable", kwargs)`` / ``("disable", {})`` / ``("framewise", bool)``) on
    the diffusers VAE ``ref`` and the vidax VAE ``vae``; after each, vidax's switches and tile
    sizes (:func:`tiling_state`) equal the reference's attributes of the same names (a size not
    given keeps its value, sizes survive ``disable_tiling``, as the reference)."""
    for what, arg in steps:
        for m in (ref, vae):
            if what == "enable":
                m.enable_tiling(**arg)
            elif what == "disable":
                m.disable_tiling()
            else:
                m.use_framewise_decoding = arg
        ours = tiling_state(vae)
        theirs = {name: getattr(ref, name) for name in ours}
        assert ours == theirs, (what, arg, ours, theirs)


def check_enable_tiling_decode(ref, vae, z, tiling: dict, ref_decode, decode, tol: float) -> np.ndarray:
    """``ref.enable_tiling(**tiling)`` and ``vae.enable_tiling(**tiling)`` (the same keywords):
    ``decode(z)`` (vidax) equals ``ref_decode(z)`` (diffusers) to ``tol`` (max relative) and
    >= 60 dB, has the untiled decode's shape, and differs from it (the tiles really ran: each has
    its own context and the seams are blended). After, ``ref``'s tiling is off and ``vae``'s
    tiling state is what it was. Returns the tiled vidax output."""
    saved = vae.tiling
    ref.enable_tiling(**tiling)
    vae.enable_tiling(**tiling)
    try:
        want = ref_decode(z)
        got = decode(z)
    finally:
        ref.disable_tiling()
        vae.tiling = saved
    untiled = decode(z)
    assert got.shape == want.shape == untiled.shape, (got.shape, want.shape, untiled.shape)
    assert max_rel_err(got, untiled) > 1e-3, max_rel_err(got, untiled)
    assert psnr(got, want, data_range=2.0) >= 60.0, psnr(got, want, data_range=2.0)
    err = max_rel_err(got, want)
    assert err < tol, err
    return got


def reference_decoder(ref, *args):
    """``z -> ref.decode(z, *args).sample`` on channels-last numpy latents, with the reference's
    tiling attributes as they are (``args``: torch tensors, e.g. LTX's decode timestep)."""
    import torch

    def decode(z):
        with torch.no_grad():
            return channels_last(ref.decode(torch.from_numpy(channels_first(z)), *args).sample)

    return decode


def decode_device_growth(module, name: str, decode) -> int:
    """Largest growth of the live device bytes (:func:`vidax.stats.live_array_bytes`) over those
    alive before ``decode()`` runs, sampled right after every call of the jitted function
    ``module.<name>`` (the VAE's per-chunk / per-tile decode, while its output and any cache it
    hands on are alive): CPU backends report no allocator peak, so this is measured on the arrays
    themselves. ``module.<name>`` is swapped for the sampling wrapper during ``decode()`` only."""
    import gc

    from vidax.stats import live_array_bytes

    fn = getattr(module, name)
    # arrays of earlier work left to the cycle collector would be freed during decode() and hide
    # its growth (seen in the full suite: a growth of 0)
    gc.collect()
    base, peak, calls = live_array_bytes(), [0], [0]

    def sampled(*args, **kwargs):
        out = fn(*args, **kwargs)
        calls[0] += 1
        peak[0] = max(peak[0], live_array_bytes() - base)
        return out

    setattr(module, name, sampled)
    try:
        decode()
    finally:
        setattr(module, name, fn)
    assert calls[0] > 1, f"{name} ran {calls[0]} times: not chunked"
    return peak[0]


def check_tiled_decode_memory_flat(
    vae, module, name: str, decode, short, long, tiling: dict | None = None, framewise: bool = False
) -> tuple[int, int]:
    """With ``vae.enable_tiling(**tiling)`` (and ``use_framewise_decoding`` when ``framewise``),
    the device bytes of ``decode(long)`` (latents of at least 4x the frames of ``short``) grow by
    at most 1.3x those of ``decode(short)`` (:func:`decode_device_growth` around the jitted
    ``module.<name>``): chunks go to host as they end. Tiling is switched off again after.
    Returns ``(short, long)`` bytes."""
    assert long.shape[1] >= 4 * short.shape[1], (short.shape, long.shape)
    vae.enable_tiling(**(tiling or {}))
    if framewise:
        vae.use_framewise_decoding = True
    try:
        small = decode_device_growth(module, name, lambda: decode(short))
        large = decode_device_growth(module, name, lambda: decode(long))
    finally:
        vae.disable_tiling()
        if framewise:
            vae.use_framewise_decoding = False
    assert small > 0 and large <= 1.3 * small, (small, large)
    return small, large


@contextlib.contextmanager
def transformer_calls(transformer, probe):
    """Per call of the torch ``transformer`` while open, ``"C"`` when its submodule ``probe``
    ran and ``"S"`` when it did not (a step cache predicted or skipped it): the list yielded.
    Open it before ``enable_cache`` (the cache hooks keep ``probe``'s forward as they find it)."""
    letters, ran = [], []
    probe_forward, forward = probe.forward, transformer.forward
    probe.forward = lambda *a, **k: (ran.append(1), probe_forward(*a, **k))[1]

    def counted(*a, **k):
        n = len(ran)
        out = forward(*a, **k)
        letters.append("C" if len(ran) > n else "S")
        return out

    transformer.forward = counted
    try:
        yield letters
    finally:
        del transformer.forward, probe.forward


@contextlib.contextmanager
def model_batches(pipe, ref_transformer=None):
    """The batch of every transformer input while open: ``(vidax, reference)`` lists yielded.
        vidax's is read where the step builds the model's arguments (its trace, so load a fresh
        pipeline: a step traced before is not traced again); the reference's per call of the torch
        ``ref_transformer`` (its ``hidden_states``' batch; None where it takes a packed sequence), so
    that one call per step with batch B is what the reference runs without CFG. At guidance 1 both must be the prompt batch B,
        never the 2B of a cond/uncond pair (issue 41: no wasted passes)."""
    import jax

    ours, theirs = [], []
    model_args = pipe.hooks.model_args

    def recorded(*args, **kwargs):
        out = model_args(*args, **kwargs)
        ours.append(jax.tree.leaves(out[0])[0].shape[0])
        return out

    pipe.hooks.model_args = recorded
    forward = None if ref_transformer is None else ref_transformer.forward
    if forward is not None:

        def counted(*args, **kwargs):
            x = kwargs.get("hidden_states", args[0] if args else None)
            theirs.append(None if x is None else int(x.shape[0]))  # None: a packed input (Cosmos 3)
            return forward(*args, **kwargs)

        ref_transformer.forward = counted
    try:
        yield ours, theirs
    finally:
        del pipe.hooks.model_args
        if forward is not None:
            del ref_transformer.forward


#: diffusers 0.42.1's custom schedule: what a call passes as ``timesteps=`` in the timesteps tests.
CUSTOM_TIMESTEPS = [900.0, 500.0]


def diffusers_timesteps_error(pipe, *args, **call) -> str:
    """The ValueError message of diffusers' ``pipe(*args, timesteps=CUSTOM_TIMESTEPS, **call)``
    (its ``retrieve_timesteps`` refusal); AssertionError where the call runs."""
    import pytest
    import torch

    with torch.no_grad(), pytest.raises(ValueError) as e:
        pipe(*args, timesteps=CUSTOM_TIMESTEPS, output_type="latent", **call)
    return str(e.value)


def vidax_timesteps_error(cls, checkpoint: str, *args, **call) -> str:
    """The one-line InputError of vidax's ``cls`` given ``timesteps=CUSTOM_TIMESTEPS``, checked
    from the checkpoint's configs alone (no weight read), with the reason vidax's list of
    refused keywords gives (:mod:`vidax.pipelines.diffusers_keywords`)."""
    import pytest

    from vidax.checkpoint import Checkpoint
    from vidax.errors import InputError
    from vidax.pipelines.call_checks import refused_keyword

    info = cls.family.read_checkpoint(Checkpoint.open(checkpoint))
    with pytest.raises(InputError) as e:
        cls.check_call(info, *args, timesteps=CUSTOM_TIMESTEPS, **call)
    message = str(e.value)
    entry = refused_keyword(cls, "timesteps")
    assert entry is not None and "\n" not in message, message
    assert message == f"{cls.__name__} takes no 'timesteps' (diffusers' timesteps=): {entry.message()}", message
    return message
