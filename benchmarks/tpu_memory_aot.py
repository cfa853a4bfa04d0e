"""The TPU compiler's memory for a line's programs beside vidax's plan, compiled on a CPU.

For a model of ``tpu_models.PRESETS`` at its reference size (``reference_configs/``, bfloat16
transformer, float32 VAE), two kinds of program are compiled ahead of time for one TPU v5e chip
(``jax.experimental.topologies``, with libtpu installed; no chip needed) and the compiler's
``memory_analysis()`` is printed beside what the memory plan estimates before loading
(:func:`~vidax.pipelines.memory.memory_estimate` for a TPU device):

* ``step``: one denoising step with ``--blocks`` transformer blocks (one streamed chunk; a
  resident transformer's scan over its blocks needs the same temporaries): the compiler's
  temporaries against the plan's step activations.
* ``decode`` / ``decode_tiled``: one VAE decode chunk program (Wan: one latent frame with its
  cache; HunyuanVideo 1.5: the whole clip, one tile; LTX: the clip or one temporal tile) at the
  call's size and at one tile of the tiling the plan turns on: temporaries against the plan's
  decode estimate.

``--tiny`` compiles the preset's tiny configs for this process's own device (the CPU in tests):
the same code path, the CPU compiler's numbers.

    python benchmarks/tpu_memory_aot.py --model hunyuan15-480p            # v5e, with libtpu
    python benchmarks/tpu_memory_aot.py --model wan-14b --stage step --blocks 4
    python benchmarks/tpu_memory_aot.py --model wan-1.3b --tiny           # smoke (any backend)

``XLA_FLAGS=--xla_dump_to=DIR`` writes each program's buffer assignment
(``*memory-usage-report.txt``: the buffers alive at the peak).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tpu_common import report  # noqa: E402
from tpu_models import PRESETS, PROMPT, build_step, build_vae, configs_only  # noqa: E402

from vidax.pipelines.memory import memory_estimate

#: The topology whose first chip the programs are compiled for (one v5e, 15.75 GiB of HBM).
TOPOLOGY = "v5e:2x2"


def target_device(tiny: bool):
    """(device, platform) the programs compile for: one v5e chip of :data:`TOPOLOGY` (libtpu's
    compiler, no chip needed), or this process's first device with ``tiny``."""
    import jax

    if tiny:
        d = jax.devices()[0]
        return d, d.platform
    from jax.experimental import topologies

    return topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGY).devices[0], "tpu"


def compile_on(fn, args, device) -> dict:
    """``memory_analysis()`` of ``jax.jit(fn)`` compiled for ``device`` with ``args`` (arrays or
    ShapeDtypeStructs) placed there: argument, output and temporary bytes, and the seconds."""
    import jax

    sharding = jax.sharding.SingleDeviceSharding(device)
    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), args)
    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*spec)
    try:
        m = lowered.compile().memory_analysis()
    except jax.errors.JaxRuntimeError as e:  # more than the chip: the compiler says how much
        found = re.search(r"HLO temporaries \(([0-9.]+)G\)", str(e))
        if found is None:
            raise
        return {"temp_bytes": int(float(found.group(1)) * 2**30), "over_hbm": True, "argument_bytes": 0}
    return {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "compile_s": round(time.perf_counter() - t0, 1),
    }


def use_tpu_attention() -> None:
    """Make vidax's attention dispatch pick the TPU's kernels in this process (which runs on a
    CPU while it compiles for a TPU): a measuring script's patch, not vidax's."""
    import vidax.nn.attention as attention

    tiles = attention.tpu_tiles
    attention.backend = lambda: "tpu"
    attention.tpu_tiles = lambda device_kind=None, dtype=None: tiles("TPU v5 lite", dtype or "bfloat16")


def step_row(preset, blocks: int, tiny: bool, device, platform: str) -> dict:
    """The step program of ``blocks`` blocks (bfloat16) for ``device``."""
    import jax
    import jax.numpy as jnp

    attention = "pallas_tpu" if platform == "tpu" else "auto"
    step = build_step(preset, jnp.bfloat16, tiny=tiny, num_layers=blocks, attention=attention, steps=2)
    args = (step.params, step.x, step.state, step.inputs)
    return {"blocks": blocks, **compile_on(step.fn, jax.tree.map(jnp.asarray, args), device)}


def decode_program(vae, z_shape):
    """``(fn, args)``: the VAE's decode chunk program for latents ``z_shape`` (channels last), as
    its decode runs it (for the Wan VAE a chunk after the first, with the cache it is given), and
    its arguments (the parameters first; ShapeDtypeStructs for the rest)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graphdef, state = nnx.split(vae)
    name = type(vae).__name__
    b, t, h, w, c = z_shape
    if name.startswith("Wan"):  # one latent frame a chunk, the cache carried between chunks
        # a chunk after the first: the cache the chunk before left (its peak program; the first
        # chunk's, from the zero cache, compiles to less)
        zi = jax.ShapeDtypeStruct((b, 1, h, w, c), jnp.float32)
        _, cache = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s).decode_chunk(x, None, True), state, zi)

        def fn(state, z, cache):
            return nnx.merge(graphdef, state).decode_chunk(z, cache, False)

        return fn, (state, zi, cache)
    elif hasattr(vae, "decode_tile"):  # HunyuanVideo (1.5): the whole clip in each tile

        def fn(state, z):
            return nnx.merge(graphdef, state).decode_tile(z)

    else:  # LTX: the decoder on the clip or one temporal tile
        from vidax.models.ltx.tiles import Tile

        temb = jnp.zeros((b,), jnp.float32) if vae.config.timestep_conditioning else None
        key = jax.random.key(0) if vae.injects_noise else None
        dec_graph, dec_state = nnx.split(vae.decoder)

        def fn(state, z):
            return nnx.merge(dec_graph, state)(z, temb, Tile(key)).astype(jnp.float32)

        state = dec_state
    return fn, (state, jax.ShapeDtypeStruct((b, t, h, w, c), jnp.float32))


def tile_latents(vae, z_shape) -> tuple:
    """``z_shape`` cut to one tile of the tiling ``vae.enable_tiled_decode()`` turns on."""
    b, t, h, w, c = z_shape
    tl = vae.tiling
    s = vae.config.spatial_compression
    if hasattr(tl, "tile_latent_min_height"):  # HunyuanVideo 1.5: resolved latent tile sizes
        tl = tl.resolved(s)
        return (b, t, min(h, tl.tile_latent_min_height), min(w, tl.tile_latent_min_width), c)
    if getattr(tl, "temporal", False):
        t = min(t, tl.tile_sample_min_num_frames // vae.config.temporal_compression + 1)
    return (b, t, min(h, tl.tile_sample_min_height // s), min(w, tl.tile_sample_min_width // s), c)


def video_latents(cls, info, call) -> tuple:
    """``(B, T, h, w, C)`` of the video latents the VAE decodes for ``call`` (LTX's pipelines
    keep them packed as tokens: their latent grid)."""
    shape = cls.family.latent_shape(info, call)
    if len(shape) == 5:
        b, c, t, h, w = shape
        return (b, t, h, w, c)
    t, h, w = info.latent_grid(call.num_frames, call.height, call.width)
    return (shape[0], t, h, w, info.vae_config.latent_channels)


def decode_rows(info, z_shape, device, tiny: bool, programs) -> dict:
    """The decode chunk program untiled and tiled (where the VAE tiles) as ``programs`` name
    them: the compiler's bytes."""
    import jax.numpy as jnp

    if "decode" not in programs and "decode_tiled" not in programs:
        return {}
    vae = build_vae(info, jnp.float32) if tiny else abstract_vae(info)
    out = {"decode": compile_on(*decode_program(vae, z_shape), device)} if "decode" in programs else {}
    if "decode_tiled" in programs and hasattr(vae, "enable_tiled_decode"):
        vae.enable_tiled_decode()
        tile = tile_latents(vae, z_shape)
        out["decode_tiled"] = {"latents": list(tile), **compile_on(*decode_program(vae, tile), device)}
    return out


def abstract_vae(info):
    """The checkpoint's VAE (float32) with abstract parameters (no array is made)."""
    from flax import nnx

    from vidax.registry import registry

    ckpt = info.checkpoint
    spec = registry().component(ckpt.class_of("vae"), "vae")
    cfg = spec.config_class().from_config_dict(ckpt.config("vae"), source=ckpt.config_file("vae"))
    return nnx.eval_shape(lambda: spec.model_class()(cfg, rngs=nnx.Rngs(0)))


def main(argv: list[str] | None = None) -> dict:
    """Run with ``argv`` (None: the command line); print and return the row (bytes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="wan-1.3b", choices=sorted(PRESETS))
    p.add_argument(
        "--programs",
        nargs="+",
        default=["step", "decode", "decode_tiled"],
        choices=["step", "decode", "decode_tiled"],
        help="which programs to compile (each full-size one takes minutes on a CPU)",
    )
    p.add_argument("--blocks", type=int, default=1, help="transformer blocks in the step program (a streamed chunk)")
    p.add_argument("--matmul-precision", default="high", choices=["highest", "high", "default"],
                   help="the VAE decode's (a bfloat16 run decodes at 'high')")  # fmt: skip
    p.add_argument("--tiny", action="store_true", help="the tiny configs, compiled for this process's device")
    p.add_argument("--out", default=None, help="append the JSON row to this file")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    device, platform = target_device(args.tiny)
    if platform == "tpu":
        use_tpu_attention()
    preset = PRESETS[args.model]
    cls, info = configs_only(
        preset.folder,
        preset.tiny if args.tiny else None,
        components={"vae": preset.tiny_components["vae"]} if args.tiny and "vae" in preset.tiny_components else None,
    )
    call = cls.check_call(info, PROMPT, **dict(preset.tiny_call if args.tiny else {}, num_inference_steps=2))
    est = memory_estimate(cls, info, call, dtype=jnp.bfloat16, flash=platform in ("tpu", "gpu"), platform=platform)
    row = {
        "model": args.model,
        "target": f"{platform}: {device.device_kind}",
        "jax": jax.__version__,
        "size_HxWxF": [call.height, call.width, call.num_frames],
        "estimate": {"step": est.step, "decode": est.decode, "decode_tiled": est.decode_tiled},
    }
    if "step" in args.programs:
        row["step"] = step_row(preset, args.blocks, args.tiny, device, platform)
    with jax.default_matmul_precision(args.matmul_precision):
        row.update(decode_rows(info, video_latents(cls, info, call), device, args.tiny, args.programs))
    for stage, key in (("step", "step"), ("decode", "decode"), ("decode_tiled", "decode_tiled")):
        if stage in row and row["estimate"][key]:
            row[stage]["estimate_over_compiler"] = round(row["estimate"][key] / max(1, row[stage]["temp_bytes"]), 3)
    print(table(row), flush=True)
    return report(row, args.out)


def table(row: dict) -> str:
    """The row as markdown lines: program, compiler's temporaries and arguments, the estimate."""
    lines = ["| line | program | compiler temp GiB | arguments GiB | plan's estimate GiB | estimate / compiler |"]
    lines.append("|---|---|---|---|---|---|")
    for stage in ("step", "decode", "decode_tiled"):
        if stage not in row:
            continue
        r, e = row[stage], row["estimate"][stage]
        what = f"step, {r['blocks']} block(s)" if stage == "step" else stage
        lines.append(
            f"| {row['model']} {'x'.join(map(str, row['size_HxWxF']))} | {what} | {r['temp_bytes'] / 2**30:.2f} | "
            f"{r['argument_bytes'] / 2**30:.2f} | {(e or 0) / 2**30:.2f} | {r.get('estimate_over_compiler', '-')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
