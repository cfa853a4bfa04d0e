"""The jax / flax pairing check run when vidax is imported."""

import re

import pytest

import vidax


@pytest.mark.parametrize(
    "jax_v, flax_v, ok",
    [
        ("0.10.2", "0.12.8", True),  # Python 3.11: the newest of each
        ("0.11.2", "0.12.12", True),  # Python 3.12 (the lent GPU machine)
        ("0.11.2", "0.12.9", True),
        ("0.11.2", "0.12.8", False),  # flax's NNX fails to import: hijax.HiPrimitive is gone
        ("0.12.0rc1", "0.12.3", False),
        ("0.11.0rc1", "0.12.8rc1", False),  # a pre-release of 0.12.8 is not 0.12.81
        ("0.11.2", "0.12.1rc0", False),
        ("0.11.2", "0.12.8+local1", False),
        ("0.11.2", "0.12.10", True),
        ("0.10.2+cuda", "0.12.8", True),
    ],
)
def test_jax_flax_pairing(monkeypatch, jax_v, flax_v, ok):
    monkeypatch.setattr(vidax, "_version", lambda name: {"jax": jax_v, "flax": flax_v}[name])
    if ok:
        vidax._check_jax_flax()
    else:
        with pytest.raises(
            ImportError, match=re.escape(f"jax {jax_v} needs flax >= 0.12.9 (installed: flax {flax_v})")
        ):
            vidax._check_jax_flax()
