"""Every environment variable: one table, one way of reading it, and docs/environment.md says what the table does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scalar_scales.environment import OTHERS_SETTINGS, SWITCHES, SwitchValueError, others_setting, switch
from scalar_scales_testkit.cli import run_cli_in_process

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("scalar_scales", "compressed_tensors_patch", "vllm_patch", "sglang_patch")


def documented() -> dict[str, tuple[str, str]]:
    rows = re.findall(r"^\| `(\w+)` \| `([01])` \| (.+) \|$", (ROOT / "docs" / "environment.md").read_text(), re.M)
    return {name: (default, doc) for name, default, doc in rows}


def test_the_docs_table_is_the_code_s_table():
    assert documented() == {name: (str(int(s.default)), s.doc) for name, s in SWITCHES.items()}


def test_the_docs_list_the_others_settings_the_code_reads_by_owner():
    page = (ROOT / "docs" / "environment.md").read_text()
    listed = page.split("<!-- The others' settings:")[1].split("<!-- End of the others' settings. -->")[0]
    rows = re.findall(r"^- (.+?): (.+)$", listed, re.M)
    assert {name: owner for owner, names in rows for name in re.findall(r"`(\w+)`", names)} == OTHERS_SETTINGS


def test_a_setting_no_table_holds_is_not_read():
    with pytest.raises(KeyError, match="HF_HUB_OFFLINE is not a setting scalar-scales reads"):
        others_setting("HF_HUB_OFFLINE")


def test_no_product_module_reads_the_environment_but_the_table():
    readers = [
        str(path.relative_to(ROOT))
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "scalar_scales" / "environment.py"
        and re.search(r"os\.getenv\b|os\.environ\b(?!, \*\*|\.setdefault\()", path.read_text())
    ]
    assert readers == []


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("0", False)])
def test_a_switch_is_on_with_1_and_off_with_0(monkeypatch, value, expected):
    monkeypatch.setenv("SCALAR_SCALES_PORTABLE", value)
    assert switch("SCALAR_SCALES_PORTABLE") is expected


@pytest.mark.parametrize("name", list(SWITCHES))
def test_an_unset_or_empty_switch_takes_its_default(monkeypatch, name):
    monkeypatch.delenv(name, raising=False)
    assert switch(name) is SWITCHES[name].default
    monkeypatch.setenv(name, "")
    assert switch(name) is SWITCHES[name].default


@pytest.mark.parametrize("value", ["yes", "true", "2", " 1"])
def test_any_other_value_is_an_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("SCALAR_SCALES_NVFP4_EMULATION", value)
    with pytest.raises(SwitchValueError, match=f"SCALAR_SCALES_NVFP4_EMULATION must be 0 or 1, not {value!r}"):
        switch("SCALAR_SCALES_NVFP4_EMULATION")


@pytest.mark.parametrize("command", [["check", "."], ["rule", "NV101"], ["migrate", "--dry-run", "."]])
def test_every_command_refuses_a_command_line_switch_set_wrong_whatever_it_needs(command):
    """docs/environment.md: any other value exits 2. ``check`` never needed SCALAR_SCALES_PORTABLE, and exited 0."""
    result = run_cli_in_process(*command, env={"SCALAR_SCALES_PORTABLE": "yes"})
    assert (result.returncode, result.stderr) == (
        2,
        "scalar-scales: error: SCALAR_SCALES_PORTABLE must be 0 or 1, not 'yes'\n",
    )
