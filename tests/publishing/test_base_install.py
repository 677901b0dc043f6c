"""The base install as a checkpoint publisher's CI has it (the publishing environment: no torch): the demo's
console script, installed with it, says what to install instead of a traceback; the plugins are registered."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from importlib.util import find_spec
from pathlib import Path

import pytest

DEMO_ERROR = (
    "scalar-scales-demo: error: the demo quantizes a toy model with llm-compressor and needs torch, not installed: "
    'pip install torch, then pip install "/path/to/scalar-scales[producer]" (README: Install)'
)


@pytest.fixture(autouse=True)
def no_torch():
    assert find_spec("torch") is None, "the publishing environment has no torch"


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).parent / "scalar-scales-demo")],
        [sys.executable, "-m", "compressed_tensors_patch.demo"],
        [str(Path(sys.executable).parent / "scalar-scales-demo"), "--scheme", "NVFP4A16"],
    ],
    ids=["console-script", "python-m", "with-arguments"],
)
def test_the_demo_without_torch_says_what_to_install_in_one_line_and_exits_2(tmp_path, command):
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (2, "", [DEMO_ERROR])


PLUGINS = [("vllm.general_plugins", "vllm_patch:register"), ("sglang.srt.plugins", "sglang_patch:register")]


@pytest.mark.parametrize(("group", "target"), PLUGINS)
def test_installing_the_command_line_registers_the_engine_plugins(group, target):
    """README: installing scalar-scales registers both plugins; each engine calls its own when it starts."""
    assert {(ep.name, ep.value) for ep in entry_points(group=group)} == {("scalar_scales", target)}


@pytest.mark.parametrize("package", ["vllm_patch", "sglang_patch"])
def test_an_engine_plugin_imports_and_registers_quietly_without_torch_or_its_engine(package):
    """A plugin only registers: where neither its engine nor torch is installed, importing it and calling its hook
    do nothing, say nothing, and import no torch."""
    code = (
        f"import sys, {package}; {package}.register(); {package}.revert(); "
        f"print({package}.is_applied(), 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "False False\n")
