"""The composite GitHub Action (`action.yml`): its scripts hold no expression, and its `run` steps, executed with
bash as GitHub executes them, install scalar-scales and check a checkpoint.

GitHub runs a composite's `run` step as ``bash --noprofile --norc -eo pipefail FILE``, with the step's `env`
(each `${{ }}` expression evaluated first, ``steps.ID.outputs.NAME`` among them), ``GITHUB_ACTION_PATH`` (the
action's checkout), ``GITHUB_OUTPUT`` (a file of the step's own, whose ``NAME=VALUE`` lines become its outputs),
``GITHUB_ENV`` (a file whose lines set every later step's environment; the Action writes none) and
``RUNNER_TEMP``. :func:`run_step` does the same. `uses` steps (actions/setup-python) are GitHub's to run: the
Python it would give is this one, which makes the Action's virtual environment. The action's checkout is a copy of
the project's files as they are on disk. The install step is given the project's wheel as its `package` (built once
per run, scripts/build_wheel.py); the default `package`, that checkout, is built from source once, for a Hub page
address.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scalar_scales_testkit.broken import clean_checkpoint
from scalar_scales_testkit.cli import make_checkpoint
from scalar_scales_testkit.publishing import PROJECT, broken_checkpoint, project_snapshot, project_wheel

ACTION = yaml.safe_load((PROJECT / "action.yml").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
STEPS = ACTION["runs"]["steps"]
INSTALL, CHECK = (step for step in STEPS if "run" in step)


def evaluate(text: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    """The expressions action.yml's `env` uses, evaluated as GitHub would (a step's output that was not set is
    empty); any other is a test failure."""

    def value(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression.startswith("inputs."):
            name = expression.removeprefix("inputs.")
            return inputs.get(name, ACTION["inputs"][name].get("default", ""))
        if expression == "steps.python.outputs.python-path":
            return sys.executable
        if step_output := re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression):
            return outputs.get(step_output.group(1), {}).get(step_output.group(2), "")
        raise AssertionError(f"the test does not evaluate {expression!r}")

    return EXPRESSION.sub(value, text)


def run_step(
    step: dict, inputs: dict[str, str], runner: dict[str, Any], **more_env: str
) -> subprocess.CompletedProcess[str]:
    """One `run` step, as GitHub runs it: its script in a file, bash's flags, the step's env and GITHUB_ENV; then
    what it wrote to its GITHUB_OUTPUT file becomes its outputs (``runner["outputs"][ID]``), for later steps."""
    assert step["shell"] == "bash"
    script = runner["temp"] / "step.sh"
    script.write_text(step["run"])
    output_file = runner["temp"] / "github_output"
    output_file.write_text("")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(runner["temp"])),
        "GITHUB_ACTION_PATH": str(runner["action"]),
        "GITHUB_WORKSPACE": str(runner["workspace"]),
        "GITHUB_ENV": str(runner["env_file"]),
        "GITHUB_OUTPUT": str(output_file),
        "RUNNER_TEMP": str(runner["temp"]),
        **name_value_lines(runner["env_file"]),
        **{name: evaluate(str(value), inputs, runner["outputs"]) for name, value in step.get("env", {}).items()},
        **more_env,
    }
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=runner["workspace"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if "id" in step:
        runner["outputs"][step["id"]] = name_value_lines(output_file)
    return result


def name_value_lines(file: Path) -> dict[str, str]:
    """What a step wrote to GITHUB_ENV or GITHUB_OUTPUT (the ``NAME=VALUE`` form, the only one the Action
    writes)."""
    if not file.exists():
        return {}
    return dict(line.split("=", 1) for line in file.read_text().splitlines() if line)


def new_runner(root: Path, action: Path) -> dict[str, Any]:
    runner: dict[str, Any] = {"action": action, "workspace": root / "workspace", "temp": root / "runner-temp"}
    runner["env_file"] = runner["temp"] / "github_env"
    runner["outputs"] = {}
    for folder in (runner["workspace"], runner["temp"]):
        folder.mkdir(parents=True)
    return runner


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> dict[str, Any]:
    """A runner on which the install step has run, its `package` the project's wheel (a pip requirement: the wheel
    the test command built once, $SCALAR_SCALES_WHEEL, or one built here): scalar-scales in its own venv. The
    default `package`, the action's own checkout, is installed from source by ``page_address_install``."""
    root = tmp_path_factory.mktemp("runner")
    runner = new_runner(root, project_snapshot(root / "action"))
    installed = run_step(INSTALL, {"package": str(project_wheel(root / "wheel"))}, runner)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    runner["first install"] = runner["outputs"]["install"]
    return runner


@pytest.fixture(scope="module")
def page_address_install(runner) -> dict[str, Any]:
    """The install step run a second time in the job, for a Hub repository's page address, with pip told (by its
    own environment variables) to install no dependency (the extra's would be fetched) and to report what it
    installed: which requirement, with which extras. The build backend's own install (setuptools, which has no
    dependency) is told the same, and writes the report first; the Action's install overwrites it.

    `package` is the default here: the action's own checkout, a folder pip builds from source. This is the one
    install of the project from a source path, on purpose (``runner`` installs the wheel)."""
    report = runner["temp"] / "pip-report.json"
    second_use = {**runner, "outputs": {}}  # the same runner and job; the steps' outputs are the second use's
    installed = run_step(
        INSTALL,
        {"path": "https://huggingface.co/org/model"},
        second_use,
        PIP_NO_DEPS="1",
        PIP_REPORT=str(report),
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return {"outputs": second_use["outputs"]["install"], "report": json.loads(report.read_text())}


def check(
    runner: dict[str, Any], more_env: dict[str, str] | None = None, **inputs: str
) -> subprocess.CompletedProcess[str]:
    return run_step(CHECK, inputs, runner, **(more_env or {}))


def check_outputs(runner: dict[str, Any]) -> dict[str, str]:
    """The outputs the check step set in its last run, which the Action's `outputs` give the workflow."""
    return runner["outputs"]["check"]


def test_no_run_script_holds_an_expression():
    """An expression in a script is pasted into it before bash reads it: an input `"; rm -rf ~; "` would run.
    Every input goes through `env`, which GitHub passes as data."""
    for step in STEPS:
        assert "${{" not in step.get("run", ""), step.get("name")


def test_every_input_reaches_a_script_only_through_env():
    used = {
        match.group(1).removeprefix("inputs.")
        for step in STEPS
        for value in [*step.get("env", {}).values(), *step.get("with", {}).values()]
        for match in EXPRESSION.finditer(str(value))
        if match.group(1).startswith("inputs.")
    }
    assert used == set(ACTION["inputs"])


def test_the_install_step_installs_the_actions_own_checkout_in_a_venv_of_its_own(runner, page_address_install):
    """The package is not on the registry: the default installs the checkout `uses: ...@REF` names, not into the
    workflow's Python; so does a `package` given (the wheel, in ``runner``)."""
    (requested,) = page_address_install["report"]["install"]
    assert requested["download_info"]["url"] == runner["action"].as_uri()
    assert "dir_info" in requested["download_info"]
    for bin_dir in (Path(runner["first install"]["bin"]), Path(page_address_install["outputs"]["bin"])):
        assert bin_dir.parent.parent == runner["temp"]
        where = subprocess.run(
            [bin_dir / "python", "-c", "import scalar_scales; print(scalar_scales.__file__)"],
            cwd=runner["temp"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert Path(where.stdout.strip()).is_relative_to(bin_dir.parent)
        assert not (bin_dir / "torch").exists()


def test_the_install_step_gives_its_bin_folder_as_a_step_output_and_sets_no_job_environment(runner):
    """GITHUB_ENV would give SCALAR_SCALES_BIN to every later step of the workflow's job, not only the Action's."""
    assert Path(runner["first install"]["bin"], "scalar-scales").exists()
    assert name_value_lines(runner["env_file"]) == {}


def test_a_hub_page_address_installs_the_hub_extra(page_address_install):
    """check takes https://huggingface.co/ORG/NAME as well as hf://ORG/NAME, and reads either with the extra."""
    (requested,) = page_address_install["report"]["install"]
    assert requested["requested_extras"] == ["hub"]
    assert requested["metadata"]["name"] == "scalar-scales"


def test_a_second_use_of_the_action_in_a_job_gets_a_venv_of_its_own(runner, page_address_install):
    """A second use in the same job (here, installing from the page address) gets a venv of its own: it must not
    install into (or run) the first use's."""
    first, second = Path(runner["first install"]["bin"]), Path(page_address_install["outputs"]["bin"])
    assert first.parent != second.parent and second.parent.parent == runner["temp"]


def test_a_broken_checkpoint_fails_the_step_with_error_annotations(runner):
    _, tensor = broken_checkpoint(runner["workspace"] / "broken")
    result = check(runner, path="broken")
    assert result.returncode == 1, result.stderr
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::error file=")]
    assert annotations, result.stdout
    assert any("NV301" in line and tensor in line for line in annotations)


def test_the_step_gives_the_counts_the_exit_code_and_the_json_report_as_outputs(runner):
    broken_checkpoint(runner["workspace"] / "counted")
    assert check(runner, path="counted").returncode == 1
    outputs = check_outputs(runner)
    assert {name: outputs[name] for name in ("exit-code", "errors", "warnings", "infos")} == {
        "exit-code": "1",
        "errors": "1",
        "warnings": "0",
        "infos": "0",
    }
    report = Path(outputs["report"])
    assert report.is_relative_to(runner["temp"])
    assert [finding["code"] for finding in json.loads(report.read_text())["findings"]] == ["NV301"]


def test_every_action_output_is_one_the_check_step_sets(runner):
    make_checkpoint(runner["workspace"] / "outputs")
    assert check(runner, path="outputs", **{"sarif-file": "outputs.sarif"}).returncode == 0
    assert {name: f"${{{{ steps.check.outputs.{name} }}}}" for name in check_outputs(runner)} == {
        name: output["value"] for name, output in ACTION["outputs"].items()
    }


def test_a_refused_checkpoint_gives_exit_code_2_and_no_counts(runner):
    assert check(runner, path="missing", **{"sarif-file": "missing.sarif"}).returncode == 2
    assert check_outputs(runner) == {"exit-code": "2"}
    assert not (runner["workspace"] / "missing.sarif").exists()


def test_sarif_file_writes_the_sarif_log_for_upload_sarif(runner):
    make_checkpoint(runner["workspace"] / "scanned")
    assert check(runner, path="scanned", **{"sarif-file": "scanned.sarif"}).returncode == 0
    assert check_outputs(runner)["sarif-file"] == "scanned.sarif"
    (run,) = json.loads((runner["workspace"] / "scanned.sarif").read_text())["runs"]
    assert (run["properties"]["findings"], len(run["results"])) == (48, 3)


def test_a_sarif_file_that_cannot_be_written_fails_the_step(runner):
    make_checkpoint(runner["workspace"] / "unwritten")
    result = check(runner, path="unwritten", **{"sarif-file": "no-such-folder/out.sarif"})
    assert (result.returncode, result.stderr) == (
        2,
        "scalar-scales: error: no-such-folder: cannot create a file in this folder: No such file or directory\n",
    )
    assert "sarif-file" not in check_outputs(runner) and check_outputs(runner)["exit-code"] == "2"


def test_a_sarif_file_that_is_a_link_is_replaced_not_written_through(runner):
    make_checkpoint(runner["workspace"] / "linked")
    target = runner["workspace"] / "elsewhere.txt"
    target.write_text("kept\n")
    (runner["workspace"] / "out.sarif").symlink_to(target)
    result = check(runner, path="linked", **{"sarif-file": "out.sarif"})
    assert result.returncode == 0, result.stderr
    assert target.read_text() == "kept\n"
    assert json.loads((runner["workspace"] / "out.sarif").read_text())["version"] == "2.1.0"


def test_a_sarif_file_with_a_line_break_is_refused_before_it_could_forge_an_output(runner):
    make_checkpoint(runner["workspace"] / "forged")
    result = check(runner, path="forged", **{"sarif-file": "x.sarif\nexit-code=0"})
    assert (result.returncode, result.stderr) == (2, "scalar-scales: error: sarif-file holds a line break\n")
    assert check_outputs(runner) == {}


def test_the_step_appends_the_report_to_the_step_s_summary(runner):
    broken_checkpoint(runner["workspace"] / "summarised")
    summary = runner["temp"] / "step_summary.md"
    summary.write_text("before\n")
    assert check(runner, {"GITHUB_STEP_SUMMARY": str(summary)}, path="summarised").returncode == 1
    lines = summary.read_text().splitlines()
    assert lines[:2] == ["before", "### scalar-scales check summarised"]
    assert "#### NV301 invalid-scale-value (error): 1 finding" in lines


def test_a_clean_checkpoint_passes_the_step(runner):
    clean_checkpoint(runner["workspace"] / "clean")
    result = check(runner, path="clean")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::error" not in result.stdout


def test_args_are_split_on_whitespace_into_arguments(runner):
    """`args: --ignore NV301` is two arguments: the broken checkpoint's one error is ignored."""
    broken_checkpoint(runner["workspace"] / "ignored")
    assert check(runner, path="ignored", args="--ignore  NV301\n").returncode == 0


def test_strict_in_args_fails_on_legacy_scales(runner):
    """Legacy (1,) scales are a warning, so the default passes them; `args: --strict` does not."""
    make_checkpoint(runner["workspace"] / "legacy")
    assert check(runner, path="legacy").returncode == 0
    assert check(runner, path="legacy", args="--strict").returncode == 1


HOSTILE = ['x"; touch pwned; "', "$(touch pwned)", "`touch pwned`", "x' ; touch pwned ; '", "x\ntouch pwned"]


@pytest.mark.parametrize("path", [*HOSTILE, "--version", "-h"])
def test_a_hostile_path_is_a_path_and_never_shell_code_or_an_option(runner, path):
    result = check(runner, path=path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [f"scalar-scales: error: {path}: no such file or folder"] or (
        "\n" in path and "no such file or folder" in result.stderr
    )
    assert not list(runner["workspace"].rglob("pwned"))


@pytest.mark.parametrize("args", HOSTILE)
def test_hostile_args_are_arguments_and_never_shell_code(runner, args):
    clean_checkpoint(runner["workspace"] / "target")
    result = check(runner, path="target", args=args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert not list(runner["workspace"].rglob("pwned"))


def test_the_step_checks_the_checkpoint_once_for_annotations_report_and_sarif(runner, tmp_path):
    """One check writes the annotations, the JSON report and the SARIF log (``--FORMAT-output``): a Hub checkpoint's
    headers are fetched once, and the three cannot disagree."""
    make_checkpoint(runner["workspace"] / "once")
    real = Path(runner["first install"]["bin"])
    counting = tmp_path / "bin"
    counting.mkdir()
    calls = tmp_path / "calls"
    (counting / "python").symlink_to(real / "python")
    wrapper = counting / "scalar-scales"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{real / "scalar-scales"}" "$@"\n')
    wrapper.chmod(0o755)
    counted = {**runner, "outputs": {**runner["outputs"], "install": {"bin": str(counting)}}}
    assert check(counted, path="once", **{"sarif-file": "once.sarif"}).returncode == 0
    assert len(calls.read_text().splitlines()) == 1
    assert json.loads(Path(counted["outputs"]["check"]["report"]).read_text())["summary"]["scales"] == 48
    assert json.loads((runner["workspace"] / "once.sarif").read_text())["runs"][0]["properties"]["findings"] == 48
