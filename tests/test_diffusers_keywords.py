"""Every ``__call__`` keyword of the diffusers 0.42.1 pipeline classes vidax runs is taken by
vidax's pipeline (its ``call_args()``) or refused in the one documented list
(:mod:`vidax.pipelines.diffusers_keywords`), and docs/diffusers.md's table is that list; then the
shared keywords end to end on the embedded tiny Wan checkpoint (no torch)."""

import importlib
import inspect
import os

import numpy as np
import pytest

import vidax
from vidax.errors import InputError
from vidax.pipelines.diffusers_keywords import REFUSED, REFUSED_VALUES, SPELLINGS, readme_table, refused
from vidax.registry import registry

DOC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "diffusers.md")


def _pairs():
    """(diffusers class name, diffusers class, vidax class) of every registered pipeline diffusers has."""
    diffusers = pytest.importorskip("diffusers")
    out = []
    for spec in registry().pipelines():
        module, name = spec.target.split(":")
        ref = getattr(diffusers, spec.class_name, None)
        if ref is not None:  # Cosmos3OmniDiffusersPipeline: a second spelling of Cosmos3OmniPipeline
            out.append((spec.class_name, ref, getattr(importlib.import_module(module), name)))
    return out


def _keywords(ref) -> dict:
    return {n: p.default for n, p in inspect.signature(ref.__call__).parameters.items() if n != "self"}


def test_every_diffusers_keyword_is_taken_or_refused_with_a_reason():
    pairs = _pairs()
    assert len({p[0] for p in pairs}) == 23  # the classes of the ten model lines, variants included
    missing, stale = [], []
    for name, ref, cls in pairs:
        taken = set(cls.call_args())
        for k in _keywords(ref):
            entry = refused(name, k)
            if k in taken and entry is not None:
                stale.append(f"{name}.{k}: taken but listed as refused")
            elif k not in taken and entry is None:
                missing.append(f"{name}.{k}")
    assert not missing, f"neither taken nor refused: {missing}"
    assert not stale, stale
    # Every entry of the list names a keyword some listed class's __call__ has (no dead entries).
    for entry in REFUSED:
        assert entry.reason and any(
            entry.keyword in _keywords(ref) and entry.applies(name) for name, ref, _ in pairs
        ), entry


#: The conditioning inputs some diffusers pipeline classes take and others do not.
INPUTS = ("image", "video", "last_image", "conditions", "image_embeds")


def test_inputs_are_taken_exactly_where_diffusers_takes_them():
    """A class takes image= / video= / last_image= / conditions= / image_embeds= iff its diffusers
    namesake's __call__ does (and vidax does not refuse it there), or the keyword is a listed
    spelling of an input diffusers' takes (SPELLINGS): a text-to-video class given an image would
    otherwise make a video diffusers' class never makes (it raises TypeError)."""
    pairs = _pairs()
    assert {k for _, ref, _ in pairs for k in _keywords(ref)} >= set(INPUTS)
    wrong = []
    for name, ref, cls in pairs:
        theirs, ours = _keywords(ref), set(cls.call_args())
        for k in INPUTS:
            spelled = any(s[:2] == (k, name) and s[2] in theirs for s in SPELLINGS)
            if (k in ours) != ((k in theirs and refused(name, k) is None) or spelled):
                wrong.append(
                    f"{name}.{k}: vidax {'takes' if k in ours else 'refuses'} it, diffusers' {'takes' if k in theirs else 'does not'}"
                )
    assert not wrong, wrong
    # Each spelling is needed: vidax's class takes it and diffusers' does not.
    by_name = {name: (ref, cls) for name, ref, cls in pairs}
    for keyword, name, _, _ in SPELLINGS:
        ref, cls = by_name[name]
        assert keyword in cls.call_args() and keyword not in _keywords(ref), (keyword, name)


#: Numeric / bool defaults vidax documents as different from diffusers' signature, and why.
DEFAULTS_DIFFER = {
    "enable_safety_check": "diffusers runs its guardrail by default; vidax has none (REFUSED_VALUES)",
}


def test_taken_keywords_default_as_diffusers():
    """A taken keyword whose diffusers default is a plain number or bool has that default in
    vidax (its CallOption's documented default), unless vidax takes it from the checkpoint."""
    checked = 0
    for name, ref, cls in _pairs():
        options = {o.name: o for o in cls.options()}
        for k, default in _keywords(ref).items():
            o = options.get(k)
            if o is None or isinstance(default, type(inspect.Parameter.empty)) or k in DEFAULTS_DIFFER:
                continue
            if not isinstance(default, (bool, int, float)) or "checkpoint" in o.default or not o.default:
                continue
            words = o.default.split(",")[0].strip()
            try:
                ours = {"True": True, "False": False}.get(words, None)
                ours = float(words) if ours is None else ours
            except ValueError:
                continue  # described in words (e.g. "the guidance scale")
            assert ours == default and (type(default) is bool) == (type(ours) is bool), (name, k, o.default, default)
            checked += 1
    assert checked >= 20  # return_dict, eta, frame_rate, the STG / decode defaults...


def test_docs_list_the_refused_keywords():
    text = open(DOC, encoding="utf-8").read()
    assert readme_table() in text, "docs/diffusers.md's 'Refused keywords' table is not readme_table(); regenerate it"
    assert len(REFUSED_VALUES) >= 3


@pytest.fixture(scope="module")
def pipe(ckpt):
    return vidax.load_pipeline(ckpt)


KW = dict(height=32, width=32, num_frames=5, num_inference_steps=2, guidance_scale=3.0, seed=3, progress=False)


def test_refused_keyword_error_quotes_its_reason(pipe):
    with pytest.raises(InputError, match=r"generator.*jax.random.*seed=") as e:
        pipe("a cat", generator=object(), **KW)
    assert str(e.value).count("\n") == 0
    with pytest.raises(InputError, match=r"callback_on_step_end_tensor_inputs.*latents only"):
        pipe("a cat", callback_on_step_end=lambda *a: {}, callback_on_step_end_tensor_inputs=["prompt_embeds"], **KW)
    with pytest.raises(InputError, match="give prompt or prompt_embeds, not both"):
        pipe("a cat", prompt_embeds=np.zeros((1, 8, 64), np.float32), **KW)
    with pytest.raises(InputError, match=r"attention_kwargs.*finite number"):
        pipe("a cat", attention_kwargs={"scale": float("nan")}, **KW)


def test_vae_scale_factors_are_diffusers_attributes(pipe, ckpt):
    """``pipe.vae_scale_factor_spatial`` / ``_temporal`` (and the LTX pipelines' names) are the
    numbers diffusers' WanPipeline sets from its VAE's config when it loads."""
    diffusers = pytest.importorskip("diffusers")
    vae = diffusers.AutoencoderKLWan.from_config(diffusers.AutoencoderKLWan.load_config(os.path.join(ckpt, "vae")))
    want = (vae.config.scale_factor_spatial, vae.config.scale_factor_temporal)
    assert (pipe.vae_scale_factor_spatial, pipe.vae_scale_factor_temporal) == want == (8, 4)
    assert (pipe.vae_spatial_compression_ratio, pipe.vae_temporal_compression_ratio) == want


def test_prompt_embeds_callback_and_return_dict_end_to_end(pipe):
    """One run by text; the same by embeddings (bit for bit); a callback that reads and scales the
    latents (diffusers' meaning: the next step starts from what it returns); return_dict=False."""
    base = pipe("a cat", "blurry", **KW)
    embeds = pipe.encode_prompt_embeds("a cat", "blurry", **KW)
    assert set(embeds) == {"prompt_embeds", "negative_prompt_embeds"} and embeds["prompt_embeds"].shape[0] == 1
    np.testing.assert_array_equal(pipe(**embeds, **KW).frames, base.frames)
    # Only the positive embeddings: the negative text is encoded, as diffusers does.
    np.testing.assert_array_equal(
        pipe(prompt_embeds=embeds["prompt_embeds"], negative_prompt="blurry", **KW).frames, base.frames
    )
    seen = []

    def keep(p, i, t, kwargs):
        seen.append((p, i, float(t), kwargs["latents"].shape))
        return kwargs

    same = pipe("a cat", "blurry", callback_on_step_end=keep, callback_on_step_end_tensor_inputs=["latents"], **KW)
    np.testing.assert_array_equal(same.frames, base.frames)  # handing the latents back changes nothing
    # (B, C, T, H, W): Wan's diffusers loop layout; t: the scheduler's timesteps (UniPC, 1000 trained).
    assert [(i, s) for _, i, _, s in seen] == [(0, (1, 16, 2, 4, 4)), (1, (1, 16, 2, 4, 4))] and seen[0][0] is pipe
    assert seen[0][2] > seen[1][2] > 0
    scaled = pipe(
        "a cat",
        "blurry",
        callback_on_step_end=lambda p, i, t, k: {"latents": k["latents"] * 0.0},
        output_type="latent",
        **KW,
    )
    # Zero latents after the last step stay zero (the last step's update is what the callback replaced).
    np.testing.assert_array_equal(scaled.frames, 0.0)
    (frames,) = pipe("a cat", "blurry", return_dict=False, **KW)
    np.testing.assert_array_equal(frames, base.frames)


def test_diffusers_pipeline_methods_around_the_call(pipe, caplog, capsys):
    """What the diffusers docs' scripts call beside ``__call__``: ``pipe.to("cuda")`` (the
    pipeline back, nothing moved: vidax's weights are on JAX's backend since the load; a dtype is
    refused), ``enable_model_cpu_offload()`` (a warning naming the load-time ``offload=``),
    ``vae.enable_slicing()``, ``set_progress_bar_config(disable=True)`` and
    ``vae_scale_factor_spatial`` (the Wan I2V example's ``mod_value``): the same video."""
    base = pipe("a cat", **KW).frames
    with caplog.at_level("WARNING", logger="vidax.pipeline"):
        assert pipe.to("cuda") is pipe and pipe.to(device="cpu") is pipe
        pipe.enable_model_cpu_offload()
        pipe.enable_sequential_cpu_offload()
    assert sum("offload=" in r.getMessage() for r in caplog.records) == 2
    with pytest.raises(InputError, match=r"^pipe.to\('bfloat16'\): vidax reads the weights in the dtype"):
        pipe.to("bfloat16")
    assert (pipe.vae_scale_factor_spatial, pipe.vae_scale_factor_temporal) == (8, 4)
    assert pipe.vae_spatial_compression_ratio == 8
    assert pipe.vae_scale_factor_spatial * pipe.transformer.config.patch_size[1] == 16
    pipe.vae.enable_slicing()
    assert pipe.vae.use_slicing
    capsys.readouterr()
    pipe.set_progress_bar_config(disable=True)
    try:
        frames = pipe("a cat", **{k: v for k, v in KW.items() if k != "progress"}).frames
        assert "denoising" not in capsys.readouterr().err  # no progress bar without progress=
    finally:
        pipe.set_progress_bar_config(disable=False)
        pipe.vae.disable_slicing()
    np.testing.assert_array_equal(frames, base)
    assert not pipe.vae.use_slicing
    # diffusers' encode_prompt: one line naming vidax's encode_prompt_embeds (was a TypeError).
    with pytest.raises(
        InputError, match=r"^pipe.encode_prompt is diffusers' name: vidax's is pipe.encode_prompt_embeds"
    ):
        pipe.encode_prompt("a cat", negative_prompt="blurry", do_classifier_free_guidance=True)


@pytest.fixture(scope="module")
def quiet(ckpt):
    """The embedded checkpoint loaded as diffusers spells it, with ``progress=False``: ``(pipe,
    what the load wrote on stderr)``."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        pipe = vidax.WanPipeline.from_pretrained(ckpt, torch_dtype="float32", progress=False)
    return pipe, err.getvalue()


def test_diffusers_class_names_load_as_load_pipeline_with_the_class_checked(ckpt, pipe, quiet):
    """``vidax.WanPipeline.from_pretrained(path, torch_dtype=...)`` (any diffusers pipeline class name
    the registry runs) is ``load_pipeline(path)``: the same pipeline; a class of another family is
    one line naming both classes and what loads it, before any weight is read."""
    from vidax.registry import registry

    names = {spec.class_name for spec in registry().pipelines(generating_only=False)}
    assert {"WanImageToVideoPipeline", "LTX2ConditionPipeline", "HunyuanVideo15Pipeline"} <= names <= set(dir(vidax))
    assert vidax.WanPipeline is type(pipe)
    wan = quiet[0]
    assert type(wan) is type(pipe) and wan.scheduler.config == pipe.scheduler.config and wan.dtype == pipe.dtype
    name = "CogVideoXPipeline"
    with pytest.raises(InputError) as e:
        vidax.CogVideoXPipeline.from_pretrained(ckpt)
    assert str(e.value) == (
        f"{name}.from_pretrained({str(ckpt)!r}): its model_index.json names WanPipeline, not a {name} "
        "checkpoint; load it with vidax.WanPipeline.from_pretrained(path) or vidax.load_pipeline(path)"
    )
    with pytest.raises(AttributeError):
        assert vidax.StableDiffusionPipeline is None  # a diffusers class vidax does not run


def test_load_errors_name_what_the_caller_gave(ckpt, monkeypatch):
    """diffusers' torch_dtype= with a dtype vidax lacks is refused naming torch_dtype=, not
    dtype=; another family's class given the embedded checkpoint's name names that name, not the
    cache folder it resolves to. Both before any weight is read."""
    import os

    from vidax.default_checkpoint import PUBLIC_NAME

    with pytest.raises(InputError, match=r"^torch_dtype='float16' is not supported; use float32 or bfloat16"):
        vidax.load_pipeline(ckpt, torch_dtype="float16")
    monkeypatch.setenv("VIDAX_CACHE_DIR", os.path.dirname(ckpt))
    with pytest.raises(InputError, match=rf"^CogVideoXPipeline.from_pretrained\('{PUBLIC_NAME}'\): its model_index"):
        vidax.CogVideoXPipeline.from_pretrained(PUBLIC_NAME)


def test_load_progress_false_silences_later_calls(quiet, capsys):
    """``progress=False`` at load is diffusers' ``set_progress_bar_config(disable=True)`` as well: no
    status line while loading and none in later calls that do not give ``progress=`` (each call
    here stops after its prompt encoding, whose status line it would show); ``progress=True`` in a
    call shows them for that call."""
    wan, loading = quiet
    assert "loading" not in loading
    kw = {k: v for k, v in KW.items() if k != "progress"}
    capsys.readouterr()
    for progress, shown in (({}, False), ({"progress": True}, True)):
        with pytest.raises(vidax.Cancelled):
            wan("a cat", cancel=lambda: True, **kw, **progress)
        assert ("encoding the prompt" in capsys.readouterr().err) is shown


def test_a_diffusers_scheduler_object_replaces_the_scheduler(pipe):
    """The Wan docs' ``pipe.scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction",
    use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=5.0)``: read through its config
    (the run of vidax's scheduler built from that config); one that vidax does not implement is
    a ConfigError when set (it was a TypeError inside the call)."""
    diffusers = pytest.importorskip("diffusers")
    from vidax.errors import ConfigError
    from vidax.schedulers import scheduler_from_config

    kept = pipe.scheduler
    ref = diffusers.UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=5.0
    )
    try:
        pipe.scheduler = ref
        assert type(pipe.scheduler).__module__.startswith("vidax.") and pipe.scheduler.config.flow_shift == 5.0
        got = pipe("a cat", **KW).frames
        pipe.scheduler = scheduler_from_config({**ref.config, "_class_name": "UniPCMultistepScheduler"})
        np.testing.assert_array_equal(got, pipe("a cat", **KW).frames)
        # The docs' other spelling: diffusers' from_config reads vidax's config (a dict, as its
        # FrozenDict), the diffusers scheduler it builds is read back.
        pipe.scheduler = kept
        assert isinstance(pipe.scheduler.config, dict) and pipe.scheduler.config["flow_shift"] != 5.0
        pipe.scheduler = diffusers.UniPCMultistepScheduler.from_config(pipe.scheduler.config, flow_shift=5.0)
        assert (
            pipe.scheduler.config
            == scheduler_from_config(
                {**kept.config, "flow_shift": 5.0, "_class_name": "UniPCMultistepScheduler"}
            ).config
        )
        np.testing.assert_array_equal(got, pipe("a cat", **KW).frames)
        with pytest.raises(TypeError, match="frozen"):
            pipe.scheduler.config["flow_shift"] = 3.0
        with pytest.raises(ConfigError, match=r"pipe.scheduler = DDIMScheduler\(...\): _class_name='DDIMScheduler'"):
            pipe.scheduler = diffusers.DDIMScheduler()
    finally:
        pipe.scheduler = kept
    assert np.abs(got - pipe("a cat", **KW).frames).max() > 0  # flow_shift 5 is another schedule


def test_scheduler_swap_warns_in_one_line_and_swap_back_names_the_keys(pipe, caplog):
    """The docs' swap ``pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config)``:
    diffusers' own from_config warns once about UniPC's settings; vidax adds no line per key (it
    was one per key). A config of several keys the named class ignores is one vidax line. Back to
    UniPC from Euler's config: one line naming the keywords to pass, and passing them gives the
    checkpoint's UniPC again."""
    diffusers = pytest.importorskip("diffusers")
    from vidax.errors import ConfigError
    from vidax.schedulers import scheduler_from_config

    kept = pipe.scheduler
    try:
        with caplog.at_level("WARNING"):
            pipe.scheduler = diffusers.FlowMatchEulerDiscreteScheduler.from_config(pipe.scheduler.config)
        assert type(pipe.scheduler).__name__ == "FlowMatchEulerDiscreteScheduler"
        assert not [r for r in caplog.records if r.name.startswith("vidax")], caplog.text
        with pytest.raises(ConfigError) as e:
            pipe.scheduler = diffusers.UniPCMultistepScheduler.from_config(pipe.scheduler.config)
        shift = kept.config.flow_shift
        fix = (
            "pipe.scheduler = UniPCMultistepScheduler.from_config(pipe.scheduler.config, "
            f"prediction_type='flow_prediction', use_flow_sigmas=True, flow_shift={shift!r})"
        )
        assert str(e.value).endswith(fix) and "\n" not in str(e.value), str(e.value)
        assert "prediction_type='epsilon', use_flow_sigmas=False" in str(e.value)
        pipe.scheduler = diffusers.UniPCMultistepScheduler.from_config(
            pipe.scheduler.config, prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=shift
        )
        assert pipe.scheduler.config == kept.config
    finally:
        pipe.scheduler = kept
    caplog.clear()
    with caplog.at_level("WARNING", logger="vidax.config"):
        scheduler_from_config(
            {**kept.config, "_class_name": "FlowMatchEulerDiscreteScheduler"}, source="swap-one-line.json"
        )
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("swap-one-line.json: solver_order=") and line.endswith(
        "are not settings of diffusers' FlowMatchEulerDiscreteScheduler, which ignores them; ignored"
    )
    assert "flow_shift=" in line and "use_flow_sigmas=True" in line


def _other_transformer(weights, source=None) -> None:
    """Write at ``weights`` the tiny transformer's weights (from ``source``, default ``weights``)
    with ``proj_out`` halved: another transformer that makes another video."""
    from vidax.weights import CheckpointReader, save_safetensors

    reader = CheckpointReader(source or weights)
    tensors = {k: np.array(reader.get(k)) * (0.5 if "proj_out" in k else 1.0) for k in reader.keys()}
    del reader
    save_safetensors(tensors, weights)


def test_variant_reads_that_variants_files(ckpt, tmp_path):
    """``load_pipeline(path, variant="fp16")`` reads ``<name>.fp16.safetensors`` where a folder
    has it beside the plain file (diffusers' ``variant=``), the plain files without ``variant=``
    (also after a load with one); a folder without that variant reads its plain files."""
    import shutil

    copy, whole = tmp_path / "copy", tmp_path / "whole"
    shutil.copytree(ckpt, copy)
    shutil.copytree(ckpt, whole)
    _other_transformer(copy / "transformer" / "diffusion_pytorch_model.fp16.safetensors", whole / "transformer")
    _other_transformer(whole / "transformer" / "diffusion_pytorch_model.safetensors")
    plain = vidax.load_pipeline(ckpt, progress=False)("a cat", **KW).frames
    fp16 = vidax.load_pipeline(str(copy), variant="fp16", progress=False)("a cat", **KW).frames
    np.testing.assert_array_equal(fp16, vidax.load_pipeline(str(whole), progress=False)("a cat", **KW).frames)
    assert np.abs(fp16 - plain).max() > 1e-3
    np.testing.assert_array_equal(vidax.load_pipeline(str(copy), progress=False)("a cat", **KW).frames, plain)
    with pytest.raises(InputError, match=r"^variant='../fp16' is not a weights variant's name"):
        vidax.load_pipeline(str(copy), variant="../fp16")


def test_transformer_folder_as_diffusers_transformer_module(ckpt, tmp_path):
    """diffusers' ``from_pretrained(path, transformer=Model.from_pretrained(other, subfolder=
    "transformer"))`` is ``load_pipeline(path, transformer=other/transformer)``: that folder's
    config and weights replace the checkpoint's (the video of a checkpoint holding them); a
    folder of another class is refused in one line."""
    import json
    import shutil

    from vidax.errors import ConfigError

    other = tmp_path / "other"
    shutil.copytree(os.path.join(ckpt, "transformer"), other)
    _other_transformer(other / "diffusion_pytorch_model.safetensors")
    whole = tmp_path / "whole"
    shutil.copytree(ckpt, whole)
    shutil.rmtree(whole / "transformer")
    shutil.copytree(other, whole / "transformer")
    got = vidax.load_pipeline(ckpt, transformer=str(other), progress=False)("a cat", **KW).frames
    np.testing.assert_array_equal(got, vidax.load_pipeline(str(whole), progress=False)("a cat", **KW).frames)
    assert np.abs(got - vidax.load_pipeline(ckpt, progress=False)("a cat", **KW).frames).max() > 1e-3
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "_class_name": "CogVideoXTransformer3DModel"}))
    with pytest.raises(ConfigError, match=r"_class_name='CogVideoXTransformer3DModel', but .* has transformer 'Wan"):
        vidax.load_pipeline(ckpt, transformer=str(other))
    # diffusers' own object: one line naming what to give (not the module's repr).
    diffusers = pytest.importorskip("diffusers")
    module = diffusers.WanTransformer3DModel(num_layers=1, num_attention_heads=2, attention_head_dim=8, ffn_dim=8)
    with pytest.raises(InputError, match=r"^transformer= is a WanTransformer3DModel object: .* give its folder") as e:
        vidax.load_pipeline(ckpt, transformer=module)
    assert "\n" not in str(e.value)


def test_interrupt_torch_inputs_pil_output_and_generator_none_as_diffusers(pipe):
    """diffusers' early stop (a step callback setting ``pipe._interrupt``: the remaining steps are
    skipped and the latents so far are returned / decoded; reset by the next call), torch tensors
    where diffusers takes them (the same result as numpy), ``output_type="pil"`` (a list of PIL
    images per video, ``(x * 255).round()``), ``generator=None`` (draw at random) and
    ``output_type="pt"`` refused with its reason (trial 8)."""
    import torch

    seen = []

    def stop(p, i, t, kwargs):
        seen.append(i)
        p._interrupt = True
        return kwargs

    kw = dict(KW, num_inference_steps=3, output_type="latent")
    out = pipe("a cat", callback_on_step_end=stop, **kw)
    assert seen == [0] and len(out.stats.step_s) == 1 and pipe.interrupt
    one = pipe("a cat", **dict(kw, num_inference_steps=1)).frames
    assert not pipe.interrupt  # reset when a call starts
    assert np.abs(out.frames - pipe("a cat", **kw).frames).max() > 0  # not the 3-step result
    np.testing.assert_array_equal(out.frames, pipe("a cat", callback_on_step_end=stop, **kw).frames)
    assert one.shape == out.frames.shape
    lat = np.random.default_rng(0).standard_normal(out.frames.shape).astype(np.float32)
    np.testing.assert_array_equal(
        pipe("a cat", latents=torch.from_numpy(lat), **kw).frames, pipe("a cat", latents=lat, **kw).frames
    )
    frames = pipe("a cat", **KW).frames
    pil = pipe("a cat", output_type="pil", **KW).frames
    assert len(pil) == 1 and len(pil[0]) == frames.shape[1] and pil[0][0].size == (32, 32)
    np.testing.assert_array_equal(np.asarray(pil[0][2]), (frames[0, 2] * 255).round().astype(np.uint8))
    assert pipe("a cat", generator=None, **dict(KW, seed=None)).stats.seed_random
    with pytest.raises(InputError, match=r"output_type='pt' is not taken: a torch tensor"):
        pipe("a cat", output_type="pt", **KW)


def test_cogvideox_schedulers_ignore_eta_as_vidax_does():
    """vidax takes CogVideoX's ``eta`` and changes nothing with it: diffusers 0.42.1's two
    CogVideoX schedulers take ``eta`` in ``step`` and do not use it (checked here on one step)."""
    torch = pytest.importorskip("torch")
    from diffusers import CogVideoXDDIMScheduler, CogVideoXDPMScheduler

    from vidax.models.cogvideox.pipeline import CogVideoXPipeline

    assert "eta" in CogVideoXPipeline.call_args()
    g = torch.Generator().manual_seed(0)
    x, eps = torch.randn(1, 2, 4, 3, 3, generator=g), torch.randn(1, 2, 4, 3, 3, generator=g)
    for cls in (CogVideoXDDIMScheduler, CogVideoXDPMScheduler):
        outs = []
        for eta in (0.0, 1.0):
            s = cls()
            s.set_timesteps(4)
            g = torch.Generator().manual_seed(1)
            t = s.timesteps
            out = (
                s.step(eps, t[0], x, eta=eta, generator=g)
                if cls is CogVideoXDDIMScheduler
                else s.step(eps, None, t[0], t[1], x, eta=eta, generator=g)
            )  # DPM: (x_prev, x0) tuple
            outs.append(out.prev_sample if cls is CogVideoXDDIMScheduler else out[0])
        assert torch.equal(outs[0], outs[1]), cls.__name__


# ---------------------------------------------------------------------------------------------
# The layouts diffusers takes images, videos, latents and embeddings in: each gives what the
# canonical layout gives (bit for bit, two vidax runs) or is refused with a documented reason.


def _image(seed, size=(37, 53)):
    import PIL.Image

    return PIL.Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def i2v_pipe(tmp_path_factory):
    """The embedded tiny checkpoint as a 36-channel Wan image-to-video one (no image encoder,
    as Wan2.2 I2V-A14B; one transformer)."""
    from tests.parity.wan_reference import write_tiny_wan_variant

    return vidax.load_pipeline(write_tiny_wan_variant(str(tmp_path_factory.mktemp("i2v")), image_to_video=True))


I2V = dict(
    prompt="a cat",
    height=32,
    width=32,
    num_frames=5,
    num_inference_steps=1,
    guidance_scale=1.0,
    seed=3,
    progress=False,
    output_type="latent",
)


def test_image_layouts_and_last_image(i2v_pipe):
    """``image`` / ``last_image`` as a PIL image (canonical), a uint8 (H, W, 3) array or a list of
    one image give the same latents; a float array is refused with REFUSED_VALUES' reason; the
    last image changes the latents; its bad values are refused before any work, naming it."""
    from vidax.io.image import FLOAT_ARRAY_REASON

    pipe = i2v_pipe
    first, last = _image(0), _image(1)
    base = pipe(first, last_image=last, **I2V).frames
    assert base.shape == (1, 16, 2, 4, 4)
    for image, last_image in ((np.asarray(first), np.asarray(last)), ([first], [last])):
        np.testing.assert_array_equal(pipe(image, last_image=last_image, **I2V).frames, base)
    without = pipe(first, **I2V).frames
    assert np.abs(without - base).max() > 1e-3  # the last frame is conditioned on
    assert np.abs(without - base)[:, :, 0].max() < np.abs(without - base)[:, :, 1].max()  # mostly the last latent frame
    reason = next(r for k, v, r in REFUSED_VALUES if k == "image")
    assert reason.startswith(FLOAT_ARRAY_REASON)
    for bad in (np.asarray(first) / 255.0, np.asarray(first, np.float32) / 255):
        with pytest.raises(InputError, match=r"^image is a float.. array; .*nearest-neighbour") as e:
            pipe(bad, **I2V)
        assert "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"^last_image is a float32 array"):
        pipe(first, last_image=np.asarray(last, np.float32) / 255, **I2V)
    torch = pytest.importorskip("torch")
    with pytest.raises(InputError, match=r"^image is a torch tensor; give a PIL image .*nearest-neighbour"):
        pipe(torch.from_numpy(np.asarray(first)).permute(2, 0, 1) / 255.0, **I2V)  # as diffusers takes it
    with pytest.raises(InputError, match=r"^last_image is a list of 2; .*one last frame"):
        pipe(first, last_image=[last, last], **I2V)
    with pytest.raises(InputError, match=r"^last_image has shape \(4, 4, 2\)"):
        pipe(first, last_image=np.zeros((4, 4, 2), np.uint8), **I2V)
    with pytest.raises(InputError, match=r"^last_image needs a video of at least 2 frames.*num_frames=1"):
        pipe(first, last_image=last, **{**I2V, "num_frames": 1})
    with pytest.raises(InputError, match=r"^image is a list of 2"):
        pipe([first, first], **I2V)


def test_last_image_on_the_command_line(ckpt, i2v_pipe, tmp_path):
    """--last-image FILE: read like --image (a bad file is refused naming the flag), handed to
    the call and checked against the checkpoint before any weight is read (a generation from the
    command line is left out: ~50 s here; the flag reaches the same check_call as Python's)."""
    from typer.testing import CliRunner

    from vidax.cli import app

    first, last = tmp_path / "first.png", tmp_path / "last.png"
    _image(0).save(first)
    _image(1).save(last)
    (tmp_path / "bad.png").write_text("not an image")
    root = str(i2v_pipe.info.checkpoint.root)
    flags = [
        "--height",
        "32",
        "--width",
        "32",
        "--num-inference-steps",
        "1",
        "--guidance-scale",
        "1",
        "--seed",
        "3",
        "--no-progress",
    ]
    for args, message in (
        (
            ["--checkpoint", root, "--image", str(first), "--last-image", str(tmp_path / "bad.png")],
            f"--last-image '{tmp_path / 'bad.png'}' could not be read as an image",
        ),
        (
            ["--checkpoint", root, "--image", str(first), "--last-image", str(last), "--num-frames", "1"],
            "--last-image needs a video of at least 2 frames (the first and the last differ), got --num-frames 1",
        ),
        (["--checkpoint", ckpt, "--last-image", str(last)], "does not use --last-image"),
    ):
        r = CliRunner().invoke(app, ["generate", "-p", "a cat", *args, *flags, "--output", str(tmp_path / "v.npy")])
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert "--last-image" in CliRunner().invoke(app, ["generate", "--help"]).output


def test_latents_and_embeds_layouts(pipe):
    """Wan's ``latents`` and ``prompt_embeds`` have a batch axis in diffusers (its
    ``prepare_latents`` / ``encode_prompt`` use them as given; without it the transformer
    fails): numpy or JAX arrays of that layout give the same video; without the axis they are
    refused naming the layout."""
    import jax.numpy as jnp

    kw = dict(KW, output_type="latent", num_inference_steps=1)
    noise = np.random.default_rng(0).standard_normal((1, 16, 2, 4, 4)).astype(np.float32)
    base = pipe("a cat", latents=noise, **kw).frames
    np.testing.assert_array_equal(pipe("a cat", latents=jnp.asarray(noise), **kw).frames, base)
    with pytest.raises(InputError, match=r"latents have shape \(16, 2, 4, 4\), expected \(1, 16, 2, 4, 4\)"):
        pipe("a cat", latents=noise[0], **kw)
    embeds = pipe.encode_prompt_embeds("a cat", **kw)
    with pytest.raises(InputError, match="prompt_embeds"):
        pipe(prompt_embeds=np.asarray(embeds["prompt_embeds"])[0], **kw)


def test_video_layouts():
    """A conditioning video as uint8 (F, H, W, 3), a list of uint8 frames or a list of PIL
    images gives the same frames (``vidax.io.image.video_frames``, which every pipeline with a
    ``video`` reads it through); float frames are refused with REFUSED_VALUES' reason, an empty
    video and other types by name."""
    import PIL.Image

    from vidax.io.image import FLOAT_ARRAY_REASON, video_frames

    video = np.random.default_rng(0).integers(0, 256, (3, 6, 10, 3), dtype=np.uint8)
    np.testing.assert_array_equal(np.stack([np.asarray(f) for f in video_frames(video)]), video)
    for layout in (list(video), [PIL.Image.fromarray(f) for f in video], tuple(video)):
        np.testing.assert_array_equal(np.stack([np.asarray(f) for f in video_frames(layout)]), video)
    with pytest.raises(InputError, match=r"^video is a float64 array") as e:
        video_frames(video / 255.0)
    assert FLOAT_ARRAY_REASON in str(e.value)
    with pytest.raises(InputError, match=r"^conditions\[0\]\.video has no frames"):
        video_frames([], "conditions[0].video")
    with pytest.raises(InputError, match=r"^video must be .*; got ndarray of shape \(6, 10, 3\)"):
        video_frames(video[0])
    with pytest.raises(InputError, match=r"^video\[1\] has shape \(6, 10, 2\)"):
        video_frames([video[0], video[0, :, :, :2]])
