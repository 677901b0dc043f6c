"""Every environment variable scalar-scales reads: one table, one way of reading it (after vLLM's ``envs.py``).

Each variable is read when its value is needed, never at import. A switch is
on with ``1`` and off with ``0``; unset or empty, it takes its default. Any
other value is a :class:`SwitchValueError` naming the variable, so that a
typo never silently keeps the default. docs/environment.md lists the table,
and a test holds the page to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "OTHERS_SETTINGS",
    "SWITCHES",
    "Switch",
    "SwitchValueError",
    "others_setting",
    "read_command_line_switches",
    "switch",
]


class SwitchValueError(ValueError):
    """A switch set to something other than 0 or 1."""


@dataclass(frozen=True)
class Switch:
    """An on/off environment variable: its name, its value when unset, and what it does."""

    name: str
    default: bool
    doc: str
    command_line: bool = False
    """The command line reads it: every command reads it at its start (:func:`read_command_line_switches`), so that
    a value set wrong refuses the command even where the command would not have needed it."""


SWITCHES: dict[str, Switch] = {
    switch.name: switch
    for switch in (
        Switch(
            "SCALAR_SCALES_NVFP4_EMULATION",
            True,
            "`vllm_patch`: emulate NVFP4 on vLLM's CPU platform, where vLLM has no NVFP4 kernel; `0` keeps vLLM's "
            "refusal.",
        ),
        Switch(
            "SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM",
            False,
            "every patch (`compressed_tensors_patch`, `vllm_patch`, `sglang_patch`): `1` patches an upstream release "
            "outside the releases its patch set declares, with one warning, where every function it wraps is there "
            "with the parameters it expects; by default such a release is refused and nothing is patched.",
        ),
        Switch(
            "SCALAR_SCALES_PORTABLE",
            False,
            "the command line: `1` takes the paths every operating system has (a lock file, plain reads and writes) "
            "even on Linux, where faster ones exist. The tests "
            "set it to run what macOS and Windows run.",
            command_line=True,
        ),
    )
}
"""Every variable, by name."""


def switch(name: str) -> bool:
    """The value of switch ``name`` (a key of :data:`SWITCHES`) in this process's environment now."""
    variable = SWITCHES[name]
    value = os.environ.get(name, "")
    if value == "":
        return variable.default
    if value not in ("0", "1"):
        raise SwitchValueError(f"{name} must be 0 or 1, not {value!r}")
    return value == "1"


def read_command_line_switches() -> None:
    """Read every switch the command line reads (:attr:`Switch.command_line`): a :class:`SwitchValueError` for the
    first set wrong."""
    for name, variable in SWITCHES.items():
        if variable.command_line:
            switch(name)


OTHERS_SETTINGS: dict[str, str] = {
    **dict.fromkeys(
        (
            "HF_ENDPOINT",
            "HF_HUB_ETAG_TIMEOUT",
            "HF_HUB_DOWNLOAD_TIMEOUT",
            "HF_HUB_CACHE",
            "HUGGINGFACE_HUB_CACHE",
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "HF_TOKEN_PATH",
        ),
        "huggingface_hub",
    ),
    **dict.fromkeys(
        (
            "all_proxy",
            "ALL_PROXY",
            "http_proxy",
            "HTTP_PROXY",
            "https_proxy",
            "HTTPS_PROXY",
            "no_proxy",
            "NO_PROXY",
            "SSL_CERT_FILE",
        ),
        "huggingface_hub's HTTP client",
    ),
    **dict.fromkeys(("NO_COLOR", "FORCE_COLOR"), "the colour conventions (no-color.org, force-color.org)"),
    **dict.fromkeys(
        ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY"),
        "git",
    ),
    "GITHUB_STEP_SUMMARY": "GitHub Actions",
}
"""The variables other programs own that scalar-scales reads too, each with its owner: ``check hf://``, to
refuse in one line naming it a value huggingface_hub would fail on with a traceback, or take for what it cannot
be (``sources.hub``, ``sources.hub_client``); ``check --staged``, to make git's paths absolute before it runs git
in another folder (``sources.staged``); ``check``, whether to colour its text where ``--color`` is ``auto``
(``cli``); ``check --output-format github``, to append its report to the step's summary
(``doctor.report.github``). Their owner reads them for their meaning."""


def others_setting(name: str) -> str | None:
    """The value of ``name`` (a key of :data:`OTHERS_SETTINGS`) in this process's environment now, None where
    unset."""
    if name not in OTHERS_SETTINGS:
        raise KeyError(f"{name} is not a setting scalar-scales reads (OTHERS_SETTINGS)")
    return os.environ.get(name)
