"""Shared by every test folder: the toy model's fixed prompts and bf16 logits.

``bf16_dir`` comes from each folder's own conftest (the producer tests take
the toy the run's artifacts suite wrote, or build it where pytest runs alone;
the round trip reads the one the producer environment wrote);
``device`` is the CPU unless a folder overrides it (tests/gpu).

Generated examples are the same on every run (hypothesis derandomized): CI
runs the examples the developer ran, so an example that fails or hangs does
so everywhere, not by chance. ``--hypothesis-seed N`` explores others (a
seed turns the derandomizing off: hypothesis would ignore the seed).

``NO_COLOR`` and ``FORCE_COLOR`` are removed from the run's environment: a CI
runner that sets ``FORCE_COLOR`` for its own tools would colour every
report ``check`` prints; the tests of colour set them where they test them.
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None)


def pytest_configure(config: pytest.Config) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR"):
        os.environ.pop(name, None)
    if config.getoption("hypothesis_seed", None) is None:
        settings.load_profile("repeatable")


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test run in a GitHub workflow's step does not write that step's summary (``check --output-format github``
    appends to the file GITHUB_STEP_SUMMARY names): a test that wants one names its own file."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(scope="session")
def device():
    return "cpu"


@pytest.fixture(scope="session")
def prompt_ids(device):
    import torch

    from scalar_scales_testkit.roundtrip import prompt_ids

    return torch.tensor(prompt_ids()).to(device)


@pytest.fixture(scope="session")
def bf16_logits(bf16_dir, device, prompt_ids):
    import torch

    from scalar_scales_testkit.producer import load_bf16

    with torch.no_grad():
        return load_bf16(bf16_dir).to(device)(prompt_ids).logits.float()
