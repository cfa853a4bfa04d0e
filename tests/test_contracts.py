"""Every component and pipeline in the registry keeps its contract (vidax.pipelines.contracts).

A component registered without an entry in ``TINY`` fails here: a new family adds its tiny
configs (and so gets the contract checked) with its folder.
"""

import ast
import dataclasses
import importlib.util
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.parity.cogvideox_reference import TRANSFORMER as COG_TRANSFORMER
from tests.parity.cogvideox_reference import VAE as COG_VAE
from tests.parity.ltx2_reference import CONNECTORS_23 as LTX2_CONNECTORS
from tests.parity.ltx2_reference import TRANSFORMER_23 as LTX2_TRANSFORMER
from vidax import default_checkpoint as dc
from vidax.checkpoint import TASK_NAMES
from vidax.pipelines.base import SHARED_CALL_ARGS, VideoPipeline
from vidax.pipelines.contracts import PROTOCOLS, PooledTextEncoder
from vidax.pipelines.hooks import FamilyHooks
from vidax.registry import FAMILIES, KINDS, registry

# The CLIP vision tower's, for both of its class names.
_CLIP_VISION = dict(
    hidden_size=36,
    intermediate_size=50,
    num_hidden_layers=2,
    num_attention_heads=3,
    image_size=28,
    patch_size=14,
    projection_dim=12,
)

#: A tiny config of every component class with a model (the fields they need, others default).
TINY = {
    "WanTransformer3DModel": dc.TRANSFORMER,
    "SkyReelsV2Transformer3DModel": {
        **dc.TRANSFORMER,
        "_class_name": "SkyReelsV2Transformer3DModel",
        "inject_sample_info": True,
    },
    "AutoencoderKLWan": dc.VAE,
    "UMT5EncoderModel": dc.TEXT_ENCODER,
    "T5EncoderModel": {**dc.TEXT_ENCODER, "model_type": "t5", "architectures": ["T5EncoderModel"]},
    "CLIPVisionModel": _CLIP_VISION,
    # SkyReels-V2 I2V's image encoder: the same tower (its projection is not read).
    "CLIPVisionModelWithProjection": _CLIP_VISION,
    "CLIPTextModel": dict(
        vocab_size=50,
        hidden_size=36,
        intermediate_size=50,
        num_hidden_layers=2,
        num_attention_heads=3,
        max_position_embeddings=16,
    ),
    "SiglipVisionModel": dict(
        hidden_size=36, intermediate_size=50, num_hidden_layers=2, num_attention_heads=3, image_size=28, patch_size=14
    ),
    "Qwen2_5_VLTextModel": dict(
        model_type="qwen2_5_vl_text",
        vocab_size=89,
        hidden_size=40,
        intermediate_size=44,
        num_hidden_layers=3,
        num_attention_heads=5,
        num_key_value_heads=1,
        rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2]},
    ),
    "LlamaModel": dict(
        vocab_size=97,
        hidden_size=36,
        intermediate_size=52,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        model_type="llama",
    ),
    "LlavaForConditionalGeneration": dict(
        model_type="llava",
        image_token_index=5,
        pad_token_id=6,
        text_config=dict(
            model_type="llama",
            vocab_size=40,
            hidden_size=24,
            intermediate_size=30,
            num_hidden_layers=2,
            num_attention_heads=3,
            num_key_value_heads=1,
            head_dim=8,
        ),
        vision_config=dict(
            model_type="clip_vision_model",
            hidden_size=12,
            intermediate_size=20,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=28,
            patch_size=14,
        ),
    ),
    "Qwen2_5_VLForConditionalGeneration": dict(
        model_type="qwen2_5_vl",
        vision_config={"depth": 1},
        text_config=dict(
            vocab_size=89,
            hidden_size=40,
            intermediate_size=44,
            num_hidden_layers=3,
            num_attention_heads=5,
            num_key_value_heads=1,
            rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2]},
        ),
    ),
    "Gemma3ForConditionalGeneration": dict(
        model_type="gemma3",
        vision_config=dict(model_type="siglip_vision_model"),
        text_config=dict(
            vocab_size=97,
            hidden_size=48,
            intermediate_size=80,
            num_hidden_layers=4,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=5,
            sliding_window_pattern=2,
        ),
    ),
    "Gemma4UnifiedForConditionalGeneration": dict(
        model_type="gemma4_unified",
        text_config=dict(
            vocab_size=97,
            hidden_size=48,
            intermediate_size=80,
            num_hidden_layers=4,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=16,
            global_head_dim=24,
            sliding_window=5,
            attention_k_eq_v=True,
            num_global_key_value_heads=1,
            num_kv_shared_layers=2,
            layer_types=["sliding_attention", "full_attention"] * 2,
        ),
    ),
    **{
        name: dict(
            video_cross_attention_dim=40,
            audio_cross_attention_dim=16,
            pooler_hidden_dim=8,
            num_pooler_heads=2,
            mlp_hidden_dim=6,
        )
        for name in ("LTX2DurationHead", "LTX2DurationHeadModel")
    },
    "CogVideoXTransformer3DModel": {**COG_TRANSFORMER, "in_channels": 4, "use_rotary_positional_embeddings": True},
    "AutoencoderKLCogVideoX": COG_VAE,
    "CosmosTransformer3DModel": dict(
        in_channels=5,
        out_channels=4,
        num_attention_heads=3,
        attention_head_dim=16,
        num_layers=2,
        text_embed_dim=20,
        adaln_lora_dim=10,
        max_size=(8, 16, 16),
        extra_pos_embed_type=None,
        use_crossattn_projection=True,
        crossattn_proj_in_channels=28,
        encoder_hidden_states_channels=20,
    ),
    "HunyuanVideoTransformer3DModel": dict(
        in_channels=5,
        out_channels=7,
        num_attention_heads=3,
        attention_head_dim=18,
        num_layers=2,
        num_single_layers=3,
        num_refiner_layers=1,
        mlp_ratio=2.5,
        text_embed_dim=20,
        pooled_projection_dim=12,
        rope_axes_dim=[4, 6, 8],
        image_condition_type="token_replace",
    ),
    "HunyuanVideo15Transformer3DModel": dict(
        in_channels=5,
        out_channels=7,
        num_attention_heads=3,
        attention_head_dim=18,
        num_layers=2,
        num_refiner_layers=1,
        mlp_ratio=2.5,
        text_embed_dim=20,
        text_embed_2_dim=14,
        image_embed_dim=12,
        rope_axes_dim=[4, 6, 8],
        use_meanflow=True,
    ),
    "LTXVideoTransformer3DModel": dict(
        in_channels=6,
        out_channels=9,
        num_attention_heads=4,
        attention_head_dim=7,
        cross_attention_dim=28,
        num_layers=2,
        caption_channels=20,
    ),
    "AutoencoderKLLTXVideo": dict(
        block_out_channels=[6, 12, 12, 24],
        down_block_types=["LTXVideo095DownBlock3D"] * 3,
        downsample_type=["spatial", "temporal", "spatiotemporal"],
        spatio_temporal_scaling=[True, True, True],
        layers_per_block=[1, 1, 1, 1],
        decoder_block_out_channels=[16, 32],
        decoder_layers_per_block=[1, 1, 1],
        decoder_spatio_temporal_scaling=[True, True],
        decoder_inject_noise=[True, False, False],
        upsample_residual=[True, True],
        upsample_factor=[2, 2],
        timestep_conditioning=True,
        latent_channels=6,
        patch_size=2,
        spatial_compression_ratio=8,
        temporal_compression_ratio=4,
    ),
    "AutoencoderKLHunyuanVideo15": dict(block_out_channels=[6, 8, 16, 32, 32], latent_channels=4, layers_per_block=1),
    "AutoencoderKLHunyuanVideo": dict(
        block_out_channels=[6, 8, 10, 10], latent_channels=4, layers_per_block=1, norm_num_groups=2
    ),
    "LTXLatentUpsamplerModel": dict(
        in_channels=12, mid_channels=64, num_blocks_per_stage=2, dims=3, spatial_upsample=True, temporal_upsample=True
    ),
    "AutoencoderKLLTX2Video": dict(
        latent_channels=6,
        block_out_channels=[8, 16, 16],
        downsample_type=["spatial", "temporal", "spatiotemporal"],
        down_block_types=["LTX2VideoDownBlock3D"] * 3,
        layers_per_block=[1, 1, 1, 1],
        spatio_temporal_scaling=[True, True, True],
        decoder_block_out_channels=[16, 16, 16],
        decoder_layers_per_block=[1, 1, 1, 1],
        decoder_spatio_temporal_scaling=[True] * 3,
        decoder_inject_noise=[False] * 4,
        upsample_residual=[True, False, True],
        upsample_type=["spatiotemporal", "temporal", "spatial"],
        upsample_factor=[2, 1, 2],
        patch_size=2,
        spatial_compression_ratio=8,
        temporal_compression_ratio=4,
    ),
    "LTX2VideoDiffusionDecoderModel": dict(
        out_channels=3,
        latent_channels=8,
        patch_size=2,
        decoder_head_dim=8,
        decoder_stage_channels=[32, 16, 16, 16, 16],
        decoder_stage_depths=[1, 1, 1, 1, 1],
        decoder_stage_kernels=[[3, 3, 3]] * 4,
        decoder_upsample_strides=[[1, 2, 1], [2, 1, 1], [2, 1, 2], [2, 1, 1]],
        decoder_upsample_channel_reductions=[2, 1, 1, 1],
        decoder_stage5_kernel=[5, 5, 5],
        decoder_t_emb_dim=24,
    ),
    "LTX2LatentUpsamplerModel": dict(
        in_channels=12, mid_channels=64, num_blocks_per_stage=1, rational_spatial_scale=1.5
    ),
    "AutoencoderKLLTX2Audio": dict(
        base_channels=15, ch_mult=[1, 2, 3], num_res_blocks=1, latent_channels=3, mel_bins=20
    ),
    "LTX2Vocoder": dict(
        in_channels=40,
        hidden_channels=24,
        upsample_kernel_sizes=[6, 4],
        upsample_factors=[3, 2],
        resnet_kernel_sizes=[3, 5],
        resnet_dilations=[[1, 2], [1, 3]],
    ),
    "LTX2VocoderWithBWE": dict(
        in_channels=40,
        hidden_channels=16,
        upsample_kernel_sizes=[4, 4],
        upsample_factors=[2, 2],
        resnet_kernel_sizes=[3],
        resnet_dilations=[[1, 2]],
        bwe_in_channels=16,
        bwe_hidden_channels=12,
        bwe_upsample_kernel_sizes=[5, 4],
        bwe_upsample_factors=[3, 2],
        bwe_resnet_kernel_sizes=[3],
        bwe_resnet_dilations=[[1]],
        filter_length=12,
        hop_length=3,
        window_length=12,
        num_mel_channels=8,
        input_sampling_rate=8000,
        output_sampling_rate=16000,
    ),
    "LTX2VideoTransformer3DModel": LTX2_TRANSFORMER,
    "LTX2TextConnectors": LTX2_CONNECTORS,
    "Cosmos3OmniTransformer": dict(
        hidden_size=40,
        head_dim=12,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=36,
        num_hidden_layers=2,
        rope_axes_dim=[2, 2, 2],
        latent_channel=5,
        patch_latent_dim=20,
        vocab_size=50,
        sound_gen=True,
        sound_dim=6,
        action_gen=True,
        action_dim=7,
        num_embodiment_domains=3,
    ),
    "Cosmos3AVAEAudioTokenizer": dict(
        vocoder_input_dim=5,
        dec_dim=6,
        dec_c_mults=[1, 2],
        dec_strides=[2, 3],
        enc_dim=7,
        enc_c_mults=[1, 2],
        enc_strides=[3, 2],
        enc_num_blocks=1,
        enc_n_fft=10,
        enc_hop_length=4,
        enc_latent_dim=10,
    ),
}

pytestmark = pytest.mark.fast

MODELED = [s for s in registry().components() if s.model is not None]


def test_every_modeled_component_has_a_tiny_config():
    assert {s.class_name for s in MODELED} <= set(TINY), "add a tiny config of each registered model to TINY"
    assert all(s.kind in KINDS for s in registry().components())


def _abstract(spec):
    cfg = spec.config_class().from_config_dict(TINY[spec.class_name], source=spec.class_name)
    return cfg, nnx.eval_shape(lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0)))


@pytest.mark.parametrize("spec", MODELED, ids=[s.class_name for s in MODELED])
def test_component_keeps_its_protocol(spec):
    """The built module is an instance of its kind's Protocol; a transformer's declared block
    stacks exist and are stacked (one leading layer axis shared by every parameter), and the
    registry's checkpoint key prefixes name the same stacks."""
    cfg, module = _abstract(spec)
    protocol = PROTOCOLS.get(spec.kind)
    if protocol is not None:
        assert isinstance(module, protocol), f"{spec.class_name} does not keep {protocol.__name__}"
    if spec.kind == "transformer":
        assert tuple(spec.block_stacks) == tuple(module.block_stacks)
        for name in module.block_stacks:
            leaves = jax.tree.leaves(nnx.state(getattr(module, name)))
            assert leaves and len({leaf.shape[0] for leaf in leaves}) == 1, name
    if spec.kind == "vae":
        assert cfg.spatial_compression >= 1 and cfg.temporal_compression >= 1
    if spec.param_axes is not None:
        assert isinstance(spec.axes(), tuple) and spec.axes()


#: Text encoders that also give a pooled vector per prompt (HunyuanVideo's pooled projections).
POOLED = ("CLIPTextModel",)


@pytest.mark.parametrize("name", POOLED)
def test_pooled_text_encoder_keeps_its_protocol(name):
    spec = next(s for s in MODELED if s.class_name == name)
    assert isinstance(_abstract(spec)[1], PooledTextEncoder)


PIPELINES = list(registry().pipelines())


@pytest.mark.parametrize("spec", PIPELINES, ids=[p.class_name for p in PIPELINES])
def test_pipeline_keeps_its_contract(spec):
    """Registered pipelines are VideoPipelines whose family hooks (declared for them, by name)
    declare their task and call keywords and implement the configs-only hooks."""
    cls = spec.load()
    assert issubclass(cls, VideoPipeline) and cls.family.task in TASK_NAMES
    assert cls.family.read_checkpoint.__func__ is not FamilyHooks.read_checkpoint.__func__
    assert cls.family.load_components.__func__ is not FamilyHooks.load_components.__func__
    assert issubclass(cls.family, FamilyHooks) and cls.family.pipeline_name == cls.__name__
    names = [o.name for o in cls.family.call_options]
    assert len(set(names)) == len(names) and not set(names) & set(SHARED_CALL_ARGS)
    assert set(cls.family.unsupported_call_args) <= set(SHARED_CALL_ARGS)


def test_every_diffusers_pipeline_class_vidax_implements_is_registered():
    """A class in a family folder named as a diffusers pipeline (LTX2VideoDiffusionDecodePipeline,
    LTXLatentUpsamplePipeline, ...) is registered under that name, so vidax.load_pipeline loads the
    folders whose model_index.json names it (as DiffusionPipeline.from_pretrained does)."""
    import inspect
    import pkgutil

    import diffusers

    import vidax.models

    found = {}
    for info in pkgutil.walk_packages(vidax.models.__path__, "vidax.models."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and name.endswith("Pipeline") and hasattr(diffusers, name):
                found[name] = cls
    assert {"LTX2VideoDiffusionDecodePipeline", "LTXLatentUpsamplePipeline", "WanPipeline"} <= set(found)
    every = {p.class_name: p for p in registry().pipelines(generating_only=False)}
    assert sorted(set(found) - set(every)) == []
    for name, cls in found.items():
        assert every[name].load() is cls, name
    for spec in every.values():  # what vidax generate skips: loadable, and says how it runs
        cls = spec.load()
        assert spec.generates == issubclass(cls, VideoPipeline) and hasattr(cls, "for_task"), spec.class_name


@pytest.mark.slow  # a CogVideoX transformer at its tiny config run stage by stage: left out of make test-fast
def test_cogvideox_transformer_stages_equal_the_call():
    """``head(run_blocks(*embed(...)))`` is the model call (what block streaming relies on)."""
    from vidax.models.cogvideox.config import CogVideoXTransformerConfig
    from vidax.models.cogvideox.transformer import CogVideoXTransformer3DModel

    cfg = CogVideoXTransformerConfig.from_config_dict(TINY["CogVideoXTransformer3DModel"])
    model = CogVideoXTransformer3DModel(cfg, rngs=nnx.Rngs(0))
    for i, (_, var) in enumerate(nnx.to_flat_state(nnx.state(model))):  # every parameter random, none zero
        var.set_value(jax.random.normal(jax.random.PRNGKey(i), var.get_value().shape) * 0.2)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, 3, 4, 6, 4)), jnp.float32)
    t = jnp.asarray([10.0, 700.0])
    ctx = jnp.asarray(rng.standard_normal((2, cfg.max_text_seq_length, cfg.text_embed_dim)), jnp.float32)
    whole = model(x, t, ctx)
    h, inputs = model.embed(x, t, ctx)
    staged = model.head(model.run_blocks(h, inputs), inputs)
    np.testing.assert_array_equal(np.asarray(staged), np.asarray(whole))
    assert float(jnp.abs(whole).max()) > 1e-3 and dataclasses.is_dataclass(inputs)


#: What a family's model files (``config.py``, ``transformer.py``, ``vae.py``, ``rope.py``, ``upsampler.py``) may
#: not import: the
#: checkpoint reading (loaders, placement), block offloading, the pipelines and the registry all
#: belong in the family's ``convert.py`` / ``pipeline.py`` / ``__init__.py``.
FORBIDDEN_IN_MODELS = (
    "vidax.weights",
    "vidax.parallel.offload",
    "vidax.parallel.placement",
    "vidax.pipelines",
    "vidax.registry",
)
MODEL_FILES = (
    "config.py",
    "config_transformer.py",
    "transformer.py",
    "connectors.py",
    "vae.py",
    "rope.py",
    "upsampler.py",
)
FAMILY_PACKAGES = [m for m in FAMILIES if m.startswith("vidax.models.")] + ["tests.toy_family"]


def _imported_modules(tree: ast.AST):
    """Every module an ``import`` / ``from ... import`` names (``from a import b`` gives ``a`` and
    ``a.b``, since ``b`` may be a submodule)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


@pytest.mark.parametrize("package", FAMILY_PACKAGES)
def test_model_files_import_no_loader_offload_or_pipeline(package):
    """Model files hold model code only: they import ``vidax.nn`` and the logical-axis helpers,
    never the loaders, offloading, pipelines or the registry (docs/adding_a_family.md)."""
    folder = os.path.dirname(importlib.util.find_spec(package).origin)
    files = [os.path.join(folder, f) for f in MODEL_FILES if os.path.exists(os.path.join(folder, f))]
    assert files and os.path.exists(os.path.join(folder, "convert.py")), f"{package}: no model files / convert.py"
    for path in files:
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        bad = sorted(
            {m for m in _imported_modules(tree) if any(m == b or m.startswith(b + ".") for b in FORBIDDEN_IN_MODELS)}
        )
        assert not bad, f"{package}/{os.path.basename(path)} imports {bad}; move that code to convert.py"


def test_a_step_that_changes_a_dtype_is_named():
    """``check_step_dtypes`` (run at trace time on every pipeline's step) names the leaf whose
    dtype a step changed: the bug that made HunyuanVideo fail at step 2 in bf16."""
    from vidax.pipelines.base import check_step_dtypes
    from vidax.schedulers import scheduler_from_config

    sched = scheduler_from_config({"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0})
    state = sched.set_timesteps(2)
    x = jnp.zeros((1, 2, 2, 2, 4), jnp.float32)
    check_step_dtypes("P", (x, state), sched.step(state, x, x))  # float32 in, float32 out
    with pytest.raises(
        TypeError,
        match=r"P's denoising step .*\[0\]: \(1, 2, 2, 2, 4\) float32 -> \(1, 2, 2, 2, 4\) "
        r"bfloat16",
    ):
        check_step_dtypes("P", (x, state), sched.step(state, x.astype(jnp.bfloat16), x))
    with pytest.raises(TypeError, match=r"step_index: \(\) int32 -> \(\) float32"):
        check_step_dtypes("P", (x, state), (x, dataclasses.replace(state, step_index=jnp.float32(1))))


def test_shared_blocks_sit_between_parallel_and_models():
    """``src/vidax/blocks`` (the shared attention, modulation and transformer base) imports ``vidax.nn``,
    ``vidax.parallel``'s logical-axis / attention helpers and ``vidax.errors`` only: never a
    family, a pipeline, the loaders, offloading or the registry."""
    folder = os.path.dirname(importlib.util.find_spec("vidax.blocks").origin)
    allowed = (
        "vidax.blocks",
        "vidax.nn",
        "vidax.parallel.rules",
        "vidax.parallel.ulysses",
        "vidax.parallel.mesh",
        "vidax.errors",
    )
    files = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
    assert {"attention.py", "modulation.py", "transformer.py"} <= set(files)
    for name in files:
        with open(os.path.join(folder, name)) as f:
            tree = ast.parse(f.read(), name)
        bad = sorted(
            {
                m
                for m in _imported_modules(tree)
                if m.startswith("vidax") and not any(m == a or m.startswith(a + ".") for a in allowed)
            }
        )
        assert not bad, f"src/vidax/blocks/{name} imports {bad}"


def _transformer_files() -> list[str]:
    """The ``transformer.py`` of every family in :data:`FAMILIES` that has one (a family may
    register only autoencoders and vocoders, as LTX-2's did before its transformer)."""
    folders = [os.path.dirname(importlib.util.find_spec(m).origin) for m in FAMILIES if m.startswith("vidax.models.")]
    files = [os.path.join(f, "transformer.py") for f in folders if os.path.exists(os.path.join(f, "transformer.py"))]
    assert len(files) >= 5, files
    return files


@pytest.mark.parametrize("path", _transformer_files(), ids=lambda p: p.split(os.sep)[-2])
def test_family_transformers_define_no_attention_or_adaln_class(path):
    """A family's transformer declares its attention and adaptive norms as instances of
    ``vidax.blocks`` (data), never as its own class (issue 19)."""
    package = os.path.basename(os.path.dirname(path))
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    own = [
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and re.search(r"Attention|Attn|AdaNorm|AdaLayerNorm|LayerNormZero|AdaLN", n.name)
    ]
    assert not own, f"{package}/transformer.py defines {own}; use vidax.blocks.attention / modulation"


def _vidax_import_graph() -> dict[str, set[str]]:
    """vidax module -> the vidax modules it imports anywhere in its file (function bodies
    included); importing ``a.b.c`` also runs the packages ``a`` and ``a.b``."""
    root = os.path.dirname(importlib.util.find_spec("vidax").origin)
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(root))[:-3].replace(os.sep, ".")
                files[rel.removesuffix(".__init__")] = os.path.join(folder, name)
    graph = {}
    for module, path in files.items():
        with open(path) as f:
            named = set(_imported_modules(ast.parse(f.read(), path)))
        deps = set()
        for m in named:
            while m and m not in files:
                m = m.rpartition(".")[0]
            parts = m.split(".") if m else []
            deps.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        graph[module] = {d for d in deps if d in files and d != module and not module.startswith(d + ".")}
    return graph


def test_vidax_imports_form_no_cycle():
    """The layers import one way (models never import pipelines; no module reaches back into one
    that imports it, not even from a function body): a cycle among vidax's imports fails here,
    naming one."""
    graph = _vidax_import_graph()
    assert "vidax.pipelines.base" in graph["vidax.models.wan.pipeline"]  # the graph sees imports
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m) :] + [m]))
        if m not in done:
            path.append(m)
            for d in sorted(graph[m]):
                visit(d)
            path.pop()
            done.add(m)

    for module in sorted(graph):
        visit(module)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign_private_names(path: str, module: str, own: str):
    """``(line, what)`` for every private name the file of ``module`` takes from a module outside
    the package ``own``: ``from x import _name``, a private module (``x._mod``), or ``alias._name``
    of a module imported as ``alias``."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            if source == own or source.startswith(own + "."):
                continue
            for a in node.names:
                if _private(a.name) or any(_private(p) for p in source.split(".")):
                    yield node.lineno, f"from {source} import {a.name}"
                aliases[a.asname or a.name] = f"{source}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if not (a.name == own or a.name.startswith(own + ".")):
                    if any(_private(p) for p in a.name.split(".")):
                        yield node.lineno, f"import {a.name}"
                    if a.asname:
                        aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            yield node.lineno, f"{aliases[node.value.id]}.{node.attr}"


def _family_files(package: str):
    folder = os.path.dirname(importlib.util.find_spec(package).origin)
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, name), folder)[:-3].replace(os.sep, ".")
                yield os.path.join(root, name), f"{package}.{rel}".removesuffix(".__init__")


@pytest.mark.parametrize("package", FAMILY_PACKAGES)
def test_family_imports_only_public_names_of_others(package):
    """A family folder takes only public names from outside itself (docs/adding_a_family.md, "What
    a family may import"): a piece two families need is public in the older one or moves to the
    shared packages (vidax.nn, vidax.blocks, vidax.io, vidax.pipelines)."""
    bad = [
        f"{os.path.relpath(path)}:{line}: {what}"
        for path, module in _family_files(package)
        for line, what in _foreign_private_names(path, module, package)
    ]
    assert not bad, "private names of another package:\n" + "\n".join(bad)


def test_families_import_only_older_families():
    """The lineage rule: a family imports another family's public modules only when that family is
    older (listed before it in ``vidax.registry.FAMILIES``), so family imports run one way (LTX-2
    -> LTX-Video, HunyuanVideo 1.5 -> HunyuanVideo and Wan, Cosmos -> Wan) and a new family is the
    newest."""
    families = [m for m in FAMILIES if m.startswith("vidax.models.")]
    graph = _vidax_import_graph()
    seen = set()
    for i, family in enumerate(families):
        for module, deps in graph.items():
            if module == family or module.startswith(family + "."):
                for other in families:
                    if other != family and any(d == other or d.startswith(other + ".") for d in deps):
                        seen.add((family, other))
                        assert families.index(other) < i, (
                            f"{module} imports {other}, which is listed after {family} in FAMILIES"
                        )
    assert ("vidax.models.ltx2", "vidax.models.ltx") in seen  # the graph sees the lineage imports


def _fast_family_marks() -> dict[str, list[str]]:
    """family folder -> the test files that mark a test ``pytest.mark.fast(family=...)`` for it."""
    tests = os.path.dirname(os.path.abspath(__file__))
    marks = {}
    for folder, _, names in os.walk(tests):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.fast":
                    for kw in node.keywords:
                        if kw.arg == "family" and isinstance(kw.value, ast.Constant):
                            marks.setdefault(kw.value.value, []).append(os.path.relpath(path, tests))
    return marks


def test_every_family_has_a_fast_end_to_end_test():
    """``make test-fast`` runs one tiny pipeline of every family end to end: each family folder in
    ``FAMILIES`` has a test marked ``pytest.mark.fast(family="<folder>")`` (and no mark names a
    folder that is not a family)."""
    families = {m.rsplit(".", 1)[1] for m in FAMILIES if m.startswith("vidax.models.")}
    marks = _fast_family_marks()
    assert not families - set(marks), (
        f"families without a test marked pytest.mark.fast(family=...) for "
        f"make test-fast: {sorted(families - set(marks))}"
    )
    assert set(marks) <= families, f"fast marks naming no family folder: {sorted(set(marks) - families)}"


TRANSFORMERS = [s for s in MODELED if s.kind == "transformer"]


@pytest.mark.parametrize("spec", TRANSFORMERS, ids=[s.class_name for s in TRANSFORMERS])
def test_family_transformer_runs_on_the_shared_base(spec):
    """Every registered transformer is a ``vidax.blocks.transformer.DiffusionTransformer`` that
    keeps the base's constructor, call and ``run_blocks`` (a family writes ``build``, ``embed``,
    ``run_block`` and ``head`` only; issue 19), declares its ``block_stacks`` on its own class,
    and its ``run_blocks`` refuses an unknown stack with one line naming ``stack=``."""
    from vidax.blocks.transformer import DiffusionTransformer
    from vidax.errors import InputError

    cls = spec.model_class()
    assert issubclass(cls, DiffusionTransformer)
    for name in ("__init__", "__call__", "run_blocks", "sequence_length", "stream"):
        assert name not in vars(cls), f"{cls.__name__} overrides DiffusionTransformer.{name}"
    for name in ("build", "embed", "head"):
        assert name in vars(cls), f"{cls.__name__} does not define {name}"
    assert "block_stacks" in vars(cls) and cls.block_stacks
    _, module = _abstract(spec)
    with pytest.raises(InputError, match=r"run_blocks: stack='nope'"):
        module.run_blocks(None, None, stack="nope")


@pytest.mark.parametrize("spec", TRANSFORMERS, ids=[s.class_name for s in TRANSFORMERS])
def test_transformer_config_refuses_a_bad_width_by_name(spec):
    """The shared config checks (``vidax.config.TransformerConfig``): a non-positive or boolean
    head count is refused in one line naming the field, its value and the config class; the
    widths are ``heads x head_dim`` and ``out_channels or in_channels``."""
    from vidax.config import TransformerConfig
    from vidax.errors import ConfigError

    cls = spec.config_class()
    assert issubclass(cls, TransformerConfig)
    cfg = cls.from_config_dict(TINY[spec.class_name], source="t.json")
    assert cfg.inner_dim == cfg.num_attention_heads * cfg.attention_head_dim
    assert cfg.out_dim == (cfg.out_channels or cfg.in_channels)
    for bad in (0, True):
        with pytest.raises(
            ConfigError,
            match=rf"^t\.json: num_attention_heads={bad!r} is not valid for "
            rf"{cls.__name__}; expected a positive int\.$",
        ):
            cls.from_config_dict({**TINY[spec.class_name], "num_attention_heads": bad}, source="t.json")


#: The weight-format and CPU-kernel seam (issue 39): the only vidax packages that may import
#: ``vidax.cpu`` or name its kernel.
KERNEL_SEAM = ("vidax.nn.kernels", "vidax.cpu")
#: Files that may name the kernel in string literals only (user-facing help text).
KERNEL_NAMED_IN_HELP = ("vidax.cli.flags",)


def _kernel_seam_breaches(module: str, source: str) -> list[str]:
    """What in ``source`` (the file of vidax module ``module``) reaches past the seam: each import
    of ``vidax.cpu``, and each line naming oneDNN (outside string literals for
    :data:`KERNEL_NAMED_IN_HELP`)."""
    import io
    import tokenize

    bad = sorted(
        {f"imports {m}" for m in _imported_modules(ast.parse(source)) if m == "vidax.cpu" or m.startswith("vidax.cpu.")}
    )
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        hit = re.search("onednn|vidax\\.cpu", tok.string, re.I)
        if hit and not (module in KERNEL_NAMED_IN_HELP and tok.type == tokenize.STRING):
            line = tok.string[: hit.end()].splitlines()[-1].strip()
            bad.append(f"line {tok.start[0] + tok.string[: hit.start()].count(chr(10))}: {line[-70:]!r}")
    return bad


def test_cpu_kernels_and_weight_formats_are_reached_through_one_seam():
    """No vidax module outside ``vidax.nn.kernels`` and ``vidax.cpu`` imports ``vidax.cpu`` or
    names oneDNN (in code, comments or docstrings; ``vidax/cli/flags.py``'s help text may): the CPU kernels
    and the weight formats are used through the seam only, so a change to them touches no
    layer, encoder, loader or pipeline (issue 39)."""
    root = os.path.dirname(importlib.util.find_spec("vidax").origin)
    breaches, seen = {}, set()
    for folder, _, names in os.walk(root):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            module = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".").removesuffix(".__init__")
            with open(path) as f:
                found = _kernel_seam_breaches(module, f.read())
            if any(module == s or module.startswith(s + ".") for s in KERNEL_SEAM):
                seen.update([module] if found else [])
            elif found:
                breaches[module] = found
    assert "vidax.nn.kernels.cpu" in seen  # the scan sees the seam's own imports
    assert _kernel_seam_breaches("vidax.nn.layers", "from vidax.cpu import onednn\n")
    assert _kernel_seam_breaches("vidax.cli.flags", "x = 1  # oneDNN\n") and not _kernel_seam_breaches(
        "vidax.cli.flags", "help = 'the oneDNN build'\n"
    )
    assert not breaches, f"outside vidax.nn.kernels: {breaches}"
