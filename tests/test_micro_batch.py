"""The transformer's layers run over the CFG batch in parts (``micro_batch``): the same latents
as the whole batch at once, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import vidax
from vidax.errors import InputError

# float32 on the CPU: the parts' matmuls have fewer rows than the whole batch's, so XLA may block
# and sum them in another order; measured max |diff| 2e-6 on frames in [0, 1] (latents ~1).
TOL = 1e-5
CALL = dict(
    prompt="a cat on a boat",
    negative_prompt="blurry",
    num_inference_steps=2,
    height=64,
    width=64,
    num_frames=5,
    output_type="latent",
    seed=3,
)


@pytest.fixture(scope="module")
def pipe(ckpt):
    return vidax.load_pipeline(ckpt, progress=False)


def test_micro_batched_layers_equal_the_whole_batch(pipe):
    model = pipe.experts.modules[0]
    whole = np.asarray(pipe(**CALL).frames)
    try:
        model.set_micro_batch(1)
        parts = np.asarray(pipe(**CALL).frames)
    finally:
        model.set_micro_batch(None)
    assert whole.std() > 0.1  # the latents depend on the call (a vacuous comparison otherwise)
    assert np.abs(parts - whole).max() <= TOL * np.abs(whole).max()
    # the two-prompt batch (4 rows with CFG) in parts of 3 rows: an uneven last part
    model.set_micro_batch(3)
    try:
        three = np.asarray(pipe(**{**CALL, "prompt": ["a cat", "a dog"], "negative_prompt": None}).frames)
    finally:
        model.set_micro_batch(None)
    both = np.asarray(pipe(**{**CALL, "prompt": ["a cat", "a dog"], "negative_prompt": None}).frames)
    assert np.abs(three - both).max() <= TOL * np.abs(both).max()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_micro_batch_refuses_what_is_not_a_row_count(pipe, bad):
    with pytest.raises(InputError, match=r"micro_batch=.* must be a positive int"):
        pipe.experts.modules[0].set_micro_batch(bad)
