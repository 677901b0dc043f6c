"""A pytest plugin for the runs of compressed-tensors' own suite (scripts/verify_upstream_patch.sh): every test
starts from the same random state, in the unpatched tree and the patched one alike.

Some of upstream's tests draw unseeded random inputs (``test_quantization_enabled_disabled``: ``torch.randn``,
then an exact comparison that a draw can break). The patched tree adds tests, which shift the global random state
of every test run after them, so such a test could pass in one tree and fail in the other with no change of the
code it tests. Seeding each test makes the two runs comparable test by test.
"""

from __future__ import annotations

import random


def pytest_runtest_setup(item: object) -> None:
    random.seed(0)
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(0)
