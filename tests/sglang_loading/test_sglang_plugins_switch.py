"""`SGLANG_PLUGINS`, SGLang's own allow-list, switches the plugin off (docs/sglang.md): read by SGLang's own
``load_plugins_by_group``, in a process of its own since SGLang reads its environment once."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("sglang.srt", reason="SGLang tests run in the sglang environment")

LOADED = (
    "from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group\n"
    "print(' '.join(sorted(load_plugins_by_group(GENERAL_PLUGINS_GROUP))))\n"
)


def loaded_plugins(**env: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOADED], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()


def test_installing_the_package_registers_the_plugin_with_sglang():
    assert "scalar_scales" in loaded_plugins()


def test_sglang_plugins_naming_another_plugin_switches_it_off():
    assert "scalar_scales" not in loaded_plugins(SGLANG_PLUGINS="none")


def test_an_empty_sglang_plugins_does_not_switch_it_off():
    """Unlike vLLM's `VLLM_PLUGINS=""`: SGLang reads an empty value as no restriction."""
    assert "scalar_scales" in loaded_plugins(SGLANG_PLUGINS="")
