"""HunyuanVideo 1.5 denoising-step benchmark with the I2V transformer config and 729 non-zero
SigLIP tokens (what ``HunyuanVideo15ImageToVideoPipeline`` passes); see ``hunyuan15_step.py``,
whose options it takes.

    python benchmarks/hunyuan15_i2v_step.py                   # fp32 and bf16, latent 2x16x16, 2 blocks
"""

from __future__ import annotations

from hunyuan15_step import make_bench
from step_bench import main

BENCH = make_bench(__file__, i2v=True)

if __name__ == "__main__":
    main(BENCH)
