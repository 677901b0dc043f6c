"""Verdicts that follow the engine, the same exit code in every format, and commands that run as printed: which
class an engine's "Not loaded by" is judged by (its own rule for `architectures`), a check run from a folder that
was removed, and the fix and download commands printed for names that start with `-` or hold shell syntax."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from scalar_scales.consumers import NO_FIX, OBSERVED
from scalar_scales.sources import read_headers
from scalar_scales_testkit.broken import mla_checkpoint
from scalar_scales_testkit.cli import make_checkpoint, rewrite_header, run_cli, run_cli_in_process, shards
from scalar_scales_testkit.refusals import refused

GLM = "Glm4MoeLiteForCausalLM"
DEEPSEEK = "DeepseekV3ForCausalLM"
FORMATS = ["text", "json", "github", "sarif"]


# Each engine's verdict follows that engine's own resolution of `architectures`


@pytest.mark.parametrize(
    ("architectures", "judged_as"),
    [([DEEPSEEK, GLM], DEEPSEEK), ([GLM, DEEPSEEK], GLM), (["Qwen3MoeForCausalLM", GLM], None)],
)
def test_sglang_is_judged_by_the_first_class_architectures_names_as_sglang_loads_it(tmp_path, architectures, judged_as):
    """SGLang 0.5.23's `ModelRegistry.resolve_model_cls` takes the first entry it registers: a 0-D checkpoint that
    names DeepSeek-V3 first loads as DeepSeek-V3, which takes 0-D scales; one that names a class first that no
    observation is of may load as that class, and no class's outcome is claimed."""
    checkpoint = mla_checkpoint(tmp_path / "mla", GLM)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    result = run_cli_in_process("check", "--strict", checkpoint)
    (refusing,) = [o for o in OBSERVED if o.architecture == GLM and o.fix == NO_FIX]
    assert (refusing.consumer in result.stdout) == (judged_as == GLM)
    assert result.returncode == int(refused(checkpoint)), "--strict fails what an engine was observed not to load"


# A removed current folder: every format exits alike, and names each file by its absolute path


def test_every_format_exits_alike_and_names_files_by_absolute_path_where_the_current_folder_is_gone(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    gone = tmp_path / "gone"
    results = {}
    for output_format in FORMATS:
        gone.mkdir()
        removing_its_folder = "import os; os.rmdir(os.getcwd()); from scalar_scales.start import run; run()"
        results[output_format] = subprocess.run(
            [sys.executable, "-c", removing_its_folder, "check", str(checkpoint), "--output-format", output_format],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=gone,
        )
    assert {f: (r.returncode, r.stderr) for f, r in results.items()} == dict.fromkeys(FORMATS, (0, ""))
    first = checkpoint / "model-00001-of-00003.safetensors"
    assert results["github"].stdout.startswith(f"::warning file={first},title=NV101")
    (run,) = json.loads(results["sarif"].stdout)["runs"]
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": first.as_uri()}
    assert run["originalUriBaseIds"] == {}


# Printed commands run as pasted


@pytest.fixture
def bash() -> str:
    """A real shell to paste a printed command into."""
    return shutil.which("bash") or pytest.skip("no bash to run a printed command in")


def fix_of(result: subprocess.CompletedProcess[str]) -> str:
    (nv101,) = [line for line in result.stdout.splitlines() if line.startswith("NV101 ")]
    return nv101.partition("; fix: ")[2]


@pytest.mark.parametrize("name", ["--to=legacy", "-n $(touch pwned) it's"])
def test_the_fix_for_a_folder_named_like_an_option_runs_in_a_shell_as_printed(tmp_path, bash, name):
    """The folder `--to=legacy` was printed as `scalar-scales migrate --to=legacy`: the option, and no folder."""
    make_checkpoint(tmp_path / name)
    fix = fix_of(run_cli_in_process("check", f"./{name}", cwd=tmp_path))
    assert fix == f"scalar-scales migrate {shlex.quote('./' + name)}"
    as_installed = 'scalar-scales() { "$PYTHON" -m scalar_scales "$@"; }'
    pasted = subprocess.run(
        [bash, "-c", f"{as_installed}\n{fix}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert pasted.returncode == 0, pasted.stderr
    assert not (tmp_path / "pwned").exists()
    assert "All checks passed" in run_cli_in_process("check", tmp_path / name).stdout


def test_the_fix_names_the_scales_include_added_so_that_it_changes_them(tmp_path):
    """A fix without the check's `--include` would leave the included scales (1,), NV101's finding."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    for shard in shards(checkpoint):
        rewrite_header(shard, lambda h: {n.replace("input_global_scale", "input_scale_pt"): s for n, s in h.items()})
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    index["weight_map"] = {n.replace("input_global_scale", "input_scale_pt"): f for n, f in index["weight_map"].items()}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
    fix = fix_of(run_cli_in_process("check", "ckpt", "--include", "*.input_scale_pt", cwd=tmp_path))
    assert fix == "scalar-scales migrate '--include=*.input_scale_pt' ckpt"
    assert run_cli_in_process(*shlex.split(fix)[1:], cwd=tmp_path).returncode == 0
    shapes = {n: s for header in read_headers(checkpoint) for n, s in zip(header.names, header.shapes, strict=True)}
    assert {s for n, s in shapes.items() if n.endswith(("input_scale_pt", "weight_global_scale"))} == {()}


def test_the_download_an_offline_check_asks_for_quotes_the_revision_for_the_shell(tmp_path, bash):
    """Offline, the revision is not checked against the Hub: printed bare, `;` in it would end the command."""
    pytest.importorskip("huggingface_hub")
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_CACHE": str(tmp_path / "cache")}
    result = run_cli("check", "hf://org/model@v1;touch${IFS}pwned", env=env)
    assert result.returncode == 2
    download = result.stderr.rpartition("download it first (")[2].removesuffix(")\n")
    its_arguments = "hf() { printf '%s\\n' \"$@\"; }"
    pasted = subprocess.run(
        [bash, "-c", f"{its_arguments}\n{download}"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert pasted.stdout.splitlines() == ["download", "org/model", "--revision", "v1;touch${IFS}pwned"]
    assert not (tmp_path / "pwned").exists()
