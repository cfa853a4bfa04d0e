"""How fast ``load_pipeline`` reads a Wan2.1-T2V-1.3B folder, and the host memory it takes.

Writes a folder of the diffusers layout of ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` with random
bfloat16 weights (the transformer, VAE and UMT5 configs of ``reference_configs/``, UMT5 cut to
``--text-layers`` of its 24 layers: 5.6 GB on disk at 1 layer; ``--tiny``: the embedded default
checkpoint's configs, a few MB), then times ``vidax.load_pipeline(folder, dtype="bfloat16")``:

* ``warm``: the files in the page cache (read once before);
* ``cold``: the files' pages dropped from the page cache first (``posix_fadvise(DONTNEED)`` on
  each file: no root needed, nothing else's cache touched) so the load reads the disk.

Each load runs in a fresh child process (so its memory is its own) that samples
``/proc/self/status`` every 10 ms and prints the GB/s (file bytes / seconds), the peaks of
``RssAnon`` (anonymous memory: the load's buffers, and on CPU the loaded weights themselves) and
``RssFile`` (pages of the memory-mapped files), the anonymous peak over the weights the load
placed, and the CPU model. The folder is deleted afterwards unless ``--keep``.

    python benchmarks/load_speed.py                      # full size (check the free disk first)
    python benchmarks/load_speed.py --tiny               # seconds: what the test runs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_bench import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "reference_configs", "Wan-AI__Wan2.1-T2V-1.3B-Diffusers")
WEIGHTS = {  # component -> weights file name
    "text_encoder": "model.safetensors",
    "transformer": "diffusion_pytorch_model.safetensors",
    "vae": "diffusion_pytorch_model.safetensors",
}
POOL = 1 << 24  # random bf16 values reused across tensors (16 Mi values)


def folder_configs(tiny: bool, text_layers: int) -> dict[str, dict]:
    """model_index.json and each component's config, by component name."""
    from vidax import default_checkpoint as d

    if tiny:
        return {
            "model_index": d.MODEL_INDEX,
            "text_encoder": d.TEXT_ENCODER,
            "transformer": d.TRANSFORMER,
            "vae": d.VAE,
            "scheduler": d.SCHEDULER,
        }

    def read(*parts):
        with open(os.path.join(REFERENCE, *parts)) as f:
            return {k: v for k, v in json.load(f).items() if not k.startswith("_reconstruct")}

    text = read("text_encoder", "config.json") | {"num_layers": text_layers}
    return {
        "model_index": read("model_index.json"),
        "text_encoder": text,
        "transformer": read("transformer", "config.json"),
        "vae": read("vae", "config.json"),
        "scheduler": read("scheduler", "scheduler_config.json"),
    }


def source_tensors(class_name: str, config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(checkpoint key, shape in the file) of every tensor the component's model reads, from the
    abstract model (no parameter is allocated)."""
    import jax.numpy as jnp
    from flax import nnx

    from vidax.registry import registry
    from vidax.weights.loader import _source_shape_of, _stack_axes, abstract_params

    spec = registry().component(class_name)
    cfg = spec.config_class().from_config_dict(config)
    extra = {"mesh": None} if spec.block_stacks else {}
    make = lambda: spec.model_class()(cfg, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0), **extra)  # noqa: E731
    _, abstract = abstract_params(make)
    rules = spec.rules(cfg)
    stacks = _stack_axes(abstract, rules)
    out = []
    for path, var in abstract.items():
        shape = tuple(var.get_value().shape)
        if path in stacks:
            out += [(rules.join(path, i), _source_shape_of(shape[1:], path)) for i in range(stacks[path])]
        else:
            out.append((rules.join(path, None), _source_shape_of(shape, path)))
    return sorted(out)


def write_random_safetensors(path: str, tensors: list[tuple[str, tuple[int, ...]]], pool: np.ndarray) -> int:
    """A safetensors file of bf16 tensors filled from ``pool`` (streamed: no tensor is held
    whole in memory); returns its size in bytes."""
    from vidax.weights.safetensors_io import _NAMES

    header, offset = {"__metadata__": {"format": "pt"}}, 0
    bf16 = _NAMES[pool.dtype]
    for name, shape in tensors:
        n = int(np.prod(shape, dtype=np.int64)) * 2
        header[name] = {"dtype": bf16, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    start = 0
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for name, shape in tensors:
            left = int(np.prod(shape, dtype=np.int64))
            while left:
                take = min(left, pool.size - start)
                f.write(pool[start : start + take].tobytes())
                start, left = (start + take) % pool.size, left - take
    return 8 + len(raw) + offset


def write_folder(folder: str, tiny: bool, text_layers: int) -> int:
    """The pipeline folder with random bf16 weights; returns the bytes of its weights files."""
    import ml_dtypes

    from vidax.encoders.tokenizer import build_tiny_t5_tokenizer

    configs = folder_configs(tiny, text_layers)
    rng = np.random.default_rng(0)
    pool = (0.02 * rng.standard_normal(POOL if not tiny else 1 << 16, dtype=np.float32)).astype(ml_dtypes.bfloat16)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model_index.json"), "w") as f:
        json.dump(configs["model_index"], f)
    build_tiny_t5_tokenizer(os.path.join(folder, "tokenizer"))
    os.makedirs(os.path.join(folder, "scheduler"))
    with open(os.path.join(folder, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump(configs["scheduler"], f)
    total = 0
    for name, file in WEIGHTS.items():
        os.makedirs(os.path.join(folder, name))
        with open(os.path.join(folder, name, "config.json"), "w") as f:
            json.dump(configs[name], f)
        class_name = configs["model_index"][name][1]
        tensors = source_tensors(class_name, configs[name])
        total += write_random_safetensors(os.path.join(folder, name, file), tensors, pool)
    return total


def weights_files(folder: str) -> list[str]:
    return [os.path.join(folder, name, file) for name, file in WEIGHTS.items()]


def drop_from_page_cache(folder: str) -> None:
    """Evict the weights files' pages from the page cache (flushed first)."""
    for path in weights_files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_through(folder: str) -> None:
    """Read every weights file once (into the page cache)."""
    for path in weights_files(folder):
        with open(path, "rb", buffering=0) as f:
            while f.read(1 << 26):
                pass


class MemorySampler:
    """Peaks of ``RssAnon`` / ``RssFile`` (bytes) of this process, sampled every ``period`` s."""

    def __init__(self, period: float = 0.01):
        self.period, self.peak = period, {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> dict[str, int]:
        from vidax.stats import host_memory_bytes

        return host_memory_bytes()

    def _run(self):
        while not self._stop.is_set():
            for k, v in self.now().items():
                self.peak[k] = max(self.peak.get(k, 0), v)
            time.sleep(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        for k, v in self.now().items():
            self.peak[k] = max(self.peak.get(k, 0), v)


def child(folder: str, profile: str | None) -> None:
    """One timed load in this process; prints one JSON line."""
    import jax

    import vidax
    from vidax.stats import live_array_bytes

    jax.numpy.zeros(1).block_until_ready()  # the backend started before the clock
    before, cpu0 = MemorySampler.now(), os.times()
    with MemorySampler() as mem:
        t0 = time.perf_counter()
        if profile:
            import cProfile

            prof = cProfile.Profile()
            pipe = prof.runcall(vidax.load_pipeline, folder, dtype="bfloat16", progress=False)
            prof.dump_stats(profile)
        else:
            pipe = vidax.load_pipeline(folder, dtype="bfloat16", progress=False)
        jax.block_until_ready(jax.tree.leaves([pipe.transformer, pipe.text_encoder, pipe.vae]))
        seconds = time.perf_counter() - t0
    cpu = os.times()
    placed = live_array_bytes(None)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_user_s": cpu.user - cpu0.user,
                "cpu_sys_s": cpu.system - cpu0.system,
                "placed_bytes": placed,
                "anon_before": before["RssAnon"],
                "anon_peak": mem.peak["RssAnon"],
                "file_peak": mem.peak["RssFile"],
                "backend": jax.default_backend(),
            }
        )
    )


def run_child(folder: str, profile: str | None) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", folder] + (["--profile", profile] if profile else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(kind: str, nbytes: int, r: dict) -> str:
    gib = 2**30
    over = r["anon_peak"] - r["anon_before"] - (r["placed_bytes"] if r["backend"] == "cpu" else 0)
    return (
        f"{kind:5s} {r['seconds']:7.2f} s  {nbytes / r['seconds'] / 1e9:6.2f} GB/s  "
        f"(CPU {r['cpu_user_s']:.1f} s user + {r['cpu_sys_s']:.1f} s system)  "
        f"anon peak {r['anon_peak'] / gib:6.2f} GiB (before the load {r['anon_before'] / gib:.2f}, "
        f"over it and the placed weights {over / gib:.2f})  file-mapped peak {r['file_peak'] / gib:6.2f} GiB"
    )


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="the embedded default checkpoint's sizes (seconds)")
    p.add_argument("--text-layers", type=int, default=1, help="UMT5 layers kept (of 24)")
    p.add_argument("--dir", default=None, help="where to write the folder (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the folder (and reuse it when it exists)")
    p.add_argument("--no-cold", action="store_true", help="time the warm load only")
    p.add_argument("--profile", default=None, help="write a cProfile of the warm load here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.profile)
        return []
    base = args.dir or tempfile.mkdtemp(prefix="vidax-load-speed-")
    folder = os.path.join(base, "wan-tiny" if args.tiny else f"wan2.1-1.3b-umt5-{args.text_layers}l")
    try:
        if os.path.isfile(os.path.join(folder, "model_index.json")):
            nbytes = sum(os.path.getsize(f) for f in weights_files(folder))
        else:
            t0 = time.perf_counter()
            nbytes = write_folder(folder, args.tiny, args.text_layers)
            print(f"wrote {folder}: {nbytes / 1e9:.2f} GB of weights in {time.perf_counter() - t0:.1f} s")
        print(f"CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} cores")
        results = []
        read_through(folder)
        warm = run_child(folder, args.profile)
        print(report("warm", nbytes, warm))
        results.append(warm | {"kind": "warm", "bytes": nbytes})
        if not args.no_cold:
            drop_from_page_cache(folder)
            cold = run_child(folder, None)
            print(report("cold", nbytes, cold))
            results.append(cold | {"kind": "cold", "bytes": nbytes})
        return results
    finally:
        if not args.keep:
            shutil.rmtree(folder if args.dir else base, ignore_errors=True)


if __name__ == "__main__":
    main()
