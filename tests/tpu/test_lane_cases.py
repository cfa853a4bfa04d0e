"""The TPU lane's case list, checked on any machine (the lane itself runs only on a TPU)."""

from tests.tpu.cases import CASES, FEATURES, MODEL_LINES
from tests.tpu.checkpoints import BUILDERS


def test_the_lane_has_a_case_for_every_tiny_checkpoint():
    """The lane's parametrised model lines are the checkpoints built for it (one added to
    ``checkpoints.BUILDERS`` without a case would never run on the TPU)."""
    assert sorted(MODEL_LINES) == sorted(BUILDERS)
    assert CASES == MODEL_LINES + FEATURES and len(set(CASES)) == len(CASES)
