"""What vidax chooses for every released model line on one TPU v5e (15.7 GiB HBM, 40 GiB host),
from the configs in ``reference_configs/`` alone (no weights, no device; runs on any CPU): the
planning table of docs/benchmarks/tpu.md.

    python benchmarks/v5e_plan.py            # prints the markdown table
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.test_device_plan_full_size import LINES, plan_for_v5e  # noqa: E402


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}"


def row(label: str, repo: str, call: dict, tmp: pathlib.Path) -> str:
    plan, dp, why = plan_for_v5e(repo, call, tmp, find_fixes=True)
    c, sizes = plan.call, dp.sizes
    transformer = sum(t for t, _, _ in sizes.transformers.values())
    encoders = sum(sizes.text_encoders.values())
    blocks = "resident" if dp.chunk is None else f"streamed, {dp.chunk} a chunk"
    staged = [
        n + (f" (layers streamed, {dp.text_chunk[n]} a chunk)" if n in dp.text_chunk else "")
        for n, s in dp.staged.items()
        if s
    ]
    staged += ["transformer (off the device while the text encoder and the VAE run)"] * dp.free_transformer
    staged = ", ".join(staged) or "none"
    peaks = " / ".join(_gib(b) for _, b in dp.stages.items())
    result = "runs" if dp.fits else f"refused: {why}"
    return (
        f"| {label} | {c.height} x {c.width} x {c.num_frames}, {c.num_inference_steps} steps | {_gib(transformer)} | "
        f"{_gib(encoders)} | {blocks} | {staged} | {dp.tile_words()} | {peaks} | "
        f"{_gib(dp.host_bytes)} | {result} |"
    )


def main() -> None:
    print(
        "| line | call defaults | transformer GiB (bf16) | text encoders GiB | blocks | staged (on the device "
        "only while used) | VAE decode | est. peak GiB: text / steps / decode | host GiB | result |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, repo, call in LINES:
        with tempfile.TemporaryDirectory() as tmp:
            print(row(label, repo, call, pathlib.Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
