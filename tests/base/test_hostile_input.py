"""check and migrate against input an attacker chose: each defect found that way, reproduced the way it was found,
then the class it belongs to.

Every refusal is one line, with the exit code docs/migrate.md gives it: 2 when nothing changed, 3 when migrate
changed shards and then stopped, 130 and 143 when interrupted before anything changed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from scalar_scales.files import TEMPORARY_NAME
from scalar_scales_testkit.broken import clean_checkpoint, rewrite_shard
from scalar_scales_testkit.cli import (
    Lease,
    let_edits_through,
    make_checkpoint,
    renamed,
    rewrite_header,
    run_cli,
    run_cli_in_process,
    shard_writes_held,
    shards,
    signals_taken_over,
    snapshot,
    until,
    write_scales_natively_0_d,
)
from scalar_scales_testkit.synthetic import write_synthetic_checkpoint


def one_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    return line


def migrate_process(checkpoint: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scalar_scales", "migrate", str(checkpoint), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


# Temporary files are new and private, and never written through a link.


def test_a_link_planted_at_each_temporary_name_is_never_written_through(checkpoint, monkeypatch):
    """The names are unguessable, so the test makes every other one known and plants a link to a file outside at
    it just before the run tries it (after the run cleared stale temporary files): a file is created exclusively,
    so each such name is passed over, the link is left alone, and config.json is written all the same."""
    outside = checkpoint.parent / "outside"
    outside.write_text("root's own file")
    outside.chmod(0o600)
    planted: list[Path] = []
    named: list[Path] = []
    real = os.urandom

    def urandom(size: int) -> bytes:
        """A name's random bytes; a link waits at the name unless the last name tried was one (that try failed)."""
        value = real(size)
        if size == 8:
            if not named or not named[-1].is_symlink():
                planted.append(checkpoint / f".scalar-scales-{value.hex()}.tmp")
                planted[-1].symlink_to(outside)
            named.append(checkpoint / f".scalar-scales-{value.hex()}.tmp")
        return value

    monkeypatch.setattr(os, "urandom", urandom)
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert outside.read_text() == "root's own file" and stat.S_IMODE(outside.stat().st_mode) == 0o600
    passed_over = [link for link in planted if link.is_symlink()]  # the run removed the others as stale
    assert passed_over == [planted[-1]], "config.json's first temporary name, the run's last, found no link"
    config = checkpoint / "config.json"
    assert not config.is_symlink() and json.loads(config.read_text())["quantization_config"]["format_version"] == 2


def test_a_temporary_file_is_new_private_and_named_as_no_one_can_guess(tmp_path):
    from scalar_scales.files import create_exclusive

    made = [create_exclusive(tmp_path) for _ in range(2)]
    for fd, _ in made:
        os.close(fd)
    (_, first), (_, second) = made
    assert first != second and all(TEMPORARY_NAME.fullmatch(p.name) for p in (first, second))
    assert {stat.S_IMODE(p.stat().st_mode) for p in (first, second)} == {0o600}


# A config.json that will be refused is refused before any shard changes.


def with_config_text(checkpoint: Path, change) -> None:
    path = checkpoint / "config.json"
    path.write_text(change(path.read_text()))


DUPLICATES = {
    "format_version twice": lambda text: text.replace(
        '"quantization_config": {', '"quantization_config": {\n    "format_version": 2,\n    "format_version": 1,', 1
    ),
    "quantization_config twice": lambda text: (
        text.rstrip().rstrip("}") + ',\n  "quantization_config": {"format": "float-quantized"}\n}\n'
    ),
}


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_a_config_json_that_says_a_thing_twice_is_refused_before_any_shard_changes(checkpoint, case):
    with_config_text(checkpoint, DUPLICATES[case])
    before = snapshot(checkpoint)
    for args in ((), ("--dry-run",)):
        line = one_line(run_cli_in_process("migrate", checkpoint, *args))
        assert line.startswith(f"scalar-scales: error: {checkpoint / 'config.json'}: ")
        assert "appears more than once; which one counts is ambiguous" in line
    assert "appears more than once" in one_line(run_cli_in_process("check", checkpoint))
    assert snapshot(checkpoint) == before


# Output that fails once the checkpoint has changed does not fail the migration.


def test_a_folder_name_the_terminal_cannot_encode_does_not_fail_a_finished_migration(tmp_path):
    folder = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/ckpt-\xff"))
    checkpoint = make_checkpoint(folder)
    result = run_cli("migrate", checkpoint, env={"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": None})
    assert result.returncode == 0, result.stderr
    assert "ckpt-\\udcff: changed 48 of 48 scales" in result.stdout
    assert run_cli_in_process("check", checkpoint, "--silent").returncode == 0


def test_a_reader_that_goes_away_does_not_change_migrate_s_exit_code(checkpoint):
    process = migrate_process(checkpoint)
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0 and stderr == ""
    assert run_cli_in_process("check", checkpoint, "--silent").returncode == 0


# Patterns from config.json are matched in bounded time, or refused.


def with_mixed_groups(checkpoint: Path, target: str) -> str:
    """Two NVFP4 config groups that differ in input activations, the second targeting ``target``: the doctor must
    match the name of each module without an input scale against it. Adds such a module and returns it."""
    module = "model." + "a" * 40 + "c"
    config_path = checkpoint / "config.json"
    config = json.loads(config_path.read_text())
    groups = config["quantization_config"]["config_groups"]
    groups["group_1"] = {**groups["group_0"], "targets": [target], "input_activations": None}
    config_path.write_text(json.dumps(config, indent=2))
    shard = shards(checkpoint)[0]
    added: list[str] = []

    def add_module(tensors: dict) -> None:
        prefix = next(n for n in tensors if n.endswith(".weight_packed")).removesuffix(".weight_packed")
        copies = {
            n.replace(prefix, module): dict(t)
            for n, t in tensors.items()
            if n.startswith(prefix + ".") and not n.endswith(".input_global_scale")
        }
        tensors.update(copies)
        added.extend(copies)

    rewrite_shard(shard, add_module)
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update(dict.fromkeys(added, shard.name))
    index_path.write_text(json.dumps(index))
    return module


def test_a_backtracking_pattern_from_config_json_is_matched_in_bounded_time(clean):
    """``re:model\\.(a+)+b`` against a 48-character name: Python's engine takes about 17.6 s x 4^6 (a day)."""
    with_mixed_groups(clean, r"re:model\.(a+)+b")
    result = subprocess.run(
        [sys.executable, "-m", "scalar_scales", "check", str(clean), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr


def test_a_pattern_no_finite_automaton_matches_is_refused_naming_it(clean):
    with_mixed_groups(clean, r"re:(a)\1")
    line = one_line(run_cli_in_process("check", clean))
    assert line == (
        f"scalar-scales: error: {clean / 'config.json'}: a re: target or ignore entry '(a)\\\\1' uses a "
        "back-reference, which cannot be matched in bounded time"
    )


@pytest.fixture
def clean(tmp_path):
    return clean_checkpoint(tmp_path / "clean")


# Long shard names, and folders named as temporary files.


def test_a_shard_name_of_240_characters_is_migrated_in_place(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt", shards=1)
    (only,) = shards(checkpoint)
    long_name = "m" * (240 - len(".safetensors")) + ".safetensors"
    only.rename(checkpoint / long_name)
    index_path = checkpoint / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = dict.fromkeys(index["weight_map"], long_name)
    index_path.write_text(json.dumps(index))
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert "in place (header only)" in result.stdout


def test_a_folder_named_as_a_temporary_file_is_left_alone_and_migrate_succeeds(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    stale = checkpoint / ".scalar-scales-0123456789abcdef.tmp"
    stale.mkdir()
    (stale / "inside").write_text("")
    (checkpoint / ".config.json.scalar-scales.tmp").mkdir()
    result = run_cli_in_process("migrate", checkpoint)
    assert result.returncode == 0, result.stderr
    assert stale.is_dir(), "a folder of a temporary file's name is left alone"


# An empty path names no checkpoint, not the current folder.


def test_an_empty_path_is_refused_and_the_current_folder_is_left_alone(checkpoint):
    before = snapshot(checkpoint)
    for command in ("migrate", "check"):
        assert one_line(run_cli_in_process(command, "", cwd=checkpoint)) == (
            'scalar-scales: error: "": no checkpoint named: give a folder, a .safetensors file or hf://ORG/NAME'
        )
    assert snapshot(checkpoint) == before


# A config.json that is not a file is refused, not taken for absent.


@pytest.mark.parametrize("kind", ["a dangling link", "a folder"])
def test_a_config_json_that_is_not_a_file_is_refused_by_both_commands(checkpoint, kind):
    config = checkpoint / "config.json"
    config.unlink()
    if kind == "a folder":
        config.mkdir()
    else:
        config.symlink_to(checkpoint / "gone.json")
    before = snapshot(checkpoint)
    for command in ("migrate", "check"):
        assert (
            one_line(run_cli_in_process(command, checkpoint))
            == f"scalar-scales: error: {config}: is {kind}, not a file"
        )
    assert snapshot(checkpoint) == before


# What migrate says, usage errors, shards that are not files, and interrupts.


def test_a_migration_that_rewrites_every_shard_says_none_was_edited_in_place(checkpoint):
    for shard in shards(checkpoint):
        rewrite_header(
            shard, lambda h: {n: (s | {"shape": []} if n.endswith("_global_scale") else s) for n, s in h.items()}
        )
    result = run_cli_in_process("migrate", checkpoint, "--to", "legacy")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("in 3 of 3 shards (3 rewritten to new files)")


def test_a_usage_error_is_one_line_naming_the_command(checkpoint):
    line = one_line(run_cli_in_process("check", checkpoint, "--select", "NV999"))
    assert line.startswith("scalar-scales check: error: unknown rule code 'NV999'")
    assert line.endswith("(see scalar-scales check --help)")


@pytest.mark.parametrize("kind", ["a folder", "a FIFO"])
def test_a_shard_that_is_not_a_file_is_refused_as_what_it_is(checkpoint, kind):
    victim = shards(checkpoint)[1]
    victim.unlink()
    if kind == "a folder":
        victim.mkdir()
    else:
        os.mkfifo(victim)
    for command in ("migrate", "check"):
        assert (
            one_line(run_cli_in_process(command, checkpoint))
            == f"scalar-scales: error: {victim}: is {kind}, not a file"
        )


def test_ctrl_c_while_shards_are_edited_says_what_changed_and_a_rerun_finishes(tmp_path, sigint_reaches_children):
    """Ctrl-C once a shard is edited, while the migration's other writers wait to open theirs: it must stop."""
    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=3_000_000)
    with shard_writes_held(checkpoint, lambda: migrate_process(checkpoint)) as (process, leases):
        first_edit = let_edits_through(leases, process, 1)
        assert until(first_edit, process), "the migration ended before its first edit was seen"
        process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    (line,) = stderr.splitlines()
    assert process.returncode == 3, stderr
    assert line.startswith(f"scalar-scales: error: {checkpoint}: stopped after changing ")
    assert "(config.json not changed): interrupted; every shard is whole" in line
    config = json.loads((checkpoint / "config.json").read_text())["quantization_config"]
    assert "format_version" not in config
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert run_cli_in_process("check", checkpoint, "--silent").returncode == 0


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupt_before_any_change_is_one_line_and_changes_nothing(tmp_path, name, code):
    """The signal comes while the migration reads the shards, before it writes any (a write lease holds one
    shard's open): a run that would change every shard, not a dry run, which never writes."""
    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=3_000_000)
    before = snapshot(checkpoint)
    with Lease(shards(checkpoint)[len(shards(checkpoint)) // 2], "write") as read:
        process = migrate_process(checkpoint)
        assert until(read.waited_on, process), "the migration ended without reading every shard"
        process.send_signal(getattr(signal, name))
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == code
    assert stderr.splitlines() == [f"scalar-scales: interrupted ({name}); nothing was changed"]
    assert snapshot(checkpoint) == before


# Numbers and names past their bounds, and names that would forge a line.

HUGE_INTEGER = "9" * 5000
"""More digits than Python converts (``sys.get_int_max_str_digits()``: 4300)."""


@pytest.mark.parametrize("command", ["check", "migrate"])
@pytest.mark.parametrize(
    ("file", "field"), [("config.json", '"num_bits": 4'), ("model.safetensors.index.json", '"total_size": ')]
)
def test_an_integer_of_more_digits_than_python_converts_is_one_line(checkpoint, command, file, field):
    path = checkpoint / file
    value = field.replace("4", HUGE_INTEGER) if field.endswith("4") else field + HUGE_INTEGER
    path.write_text(path.read_text().replace(field, value, 1))
    before = snapshot(checkpoint)
    line = one_line(run_cli_in_process(command, checkpoint))
    assert line == f"scalar-scales: error: {path}: holds an integer of more than 4300 digits"
    assert snapshot(checkpoint) == before


@pytest.mark.parametrize("command", ["check", "migrate"])
def test_a_nul_in_a_shard_name_of_the_index_is_one_line(checkpoint, command):
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    tensor = next(iter(document["weight_map"]))
    document["weight_map"][tensor] = "a\0b.safetensors"
    index.write_text(json.dumps(document))
    line = one_line(run_cli_in_process(command, checkpoint))
    assert line.endswith(
        f"weight_map maps {tensor!r} to 'a\\x00b.safetensors', which is not a .safetensors file in this folder"
    )


FORGED = "\nAll checks passed: forged\x1b]0;title\x07\x1b[2J\u202e"
"""A newline that starts a line of the forger's, a terminal title, a cleared screen, a right-to-left override."""


def controls(text: str) -> list[str]:
    return [c for line in text.splitlines() for c in line if not c.isprintable()]


MODULE = "model.layers.0.mlp.experts.0.gate_proj."


@pytest.mark.parametrize("options", [[], ["--list"], ["--show-all"]])
def test_a_tensor_name_that_holds_control_characters_forges_no_line_and_reaches_no_terminal(checkpoint, options):
    renamed(checkpoint, MODULE, MODULE.replace(".gate_proj", FORGED + ".gate_proj"))
    result = run_cli_in_process("check", checkpoint, *options)
    assert result.returncode == 0, result.stderr
    assert not controls(result.stdout) and not any(line.startswith("All checks") for line in result.stdout.splitlines())
    assert "experts.0\\nAll checks passed: forged\\x1b]0;title\\x07\\x1b[2J\\u202e.gate_proj" in result.stdout


def test_a_shard_name_that_holds_a_newline_forges_no_line(checkpoint):
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    old = shards(checkpoint)[0].name
    new = "x" + FORGED + ".safetensors"
    (checkpoint / old).rename(checkpoint / new)
    document["weight_map"] = {tensor: new if file == old else file for tensor, file in document["weight_map"].items()}
    index.write_text(json.dumps(document))
    result = run_cli_in_process("check", checkpoint, "--show-all")
    assert result.returncode == 0, result.stderr
    assert not controls(result.stdout) and "    x\\nAll checks passed: forged" in result.stdout


def test_an_error_naming_a_file_with_control_characters_is_one_escaped_line(checkpoint):
    index = checkpoint / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    document["weight_map"][MODULE + "weight_global_scale"] = "gone" + FORGED + ".safetensors"
    index.write_text(json.dumps(document))
    line = one_line(run_cli_in_process("check", checkpoint))
    assert not controls(line) and line.endswith("named in model.safetensors.index.json but missing")


# Exit codes tell the truth at any instant: real signals at moments spread over a migration, many times.

SUCCESS = ("changed ", "nothing to change")


def checkpoint_moments(checkpoint: Path, *, edits: bool) -> list[tuple[str, int]]:
    """Where a migration of ``checkpoint`` can be interrupted, each an event seen from outside (see
    :func:`interrupted_at_moments`), in the order a run meets them: each a moment's name and a shard's number
    (or how many edits are let through), spread over the shards."""
    count = len(shards(checkpoint))
    spread = sorted({0, count // 3, count // 2, (2 * count) // 3, count - 1})
    moments = [("signals taken over", 0)] + [("reading a shard", j) for j in spread]
    if edits:
        moments += [("checking a shard", j) for j in spread]
    moments += [("checking config.json", 0)]
    if edits:
        moments += [("shards edited", p) for p in sorted({1, 2, count // 4, count // 2, (3 * count) // 4, count - 1})]
        moments += [("writing config.json", 0)]
    else:
        moments += [("config.json's temporary file", 0), ("config.json replaced", 0)]
    return [*moments, ("summary printed", 0)]


def interrupted_at_moments(checkpoint: Path, name: str, runs: int, *, edits: bool) -> list[tuple[int, str, str, bool]]:
    """``migrate`` on copies of ``checkpoint``, each sent signal ``name`` at one of :func:`checkpoint_moments`, in
    turn: (return code, stdout, stderr, whether any file changed) for each run.

    Each moment is an event seen from outside, never a guessed delay: the command has taken over its signals
    (scalar_scales.start: before that the interpreter itself is starting, and a signal ends it as the interpreter
    ends, before any line of the command has run); it waits to open a given shard, to read it (a write lease holds
    the open) or to check that it can write it (a read lease); it waits on config.json's check; a given number of
    shard edits is let through (:func:`shard_writes_held`) and the last one's header changed, while the other
    writers wait to open theirs; every shard is edited and read back and it waits to read config.json before its
    marker (a write lease taken while the writers wait); config.json's temporary file appears, or config.json is
    replaced (a marker-only run, which has no writers to hold); the command printed its summary line. A lease is
    released once the signal is sent; a moment that does not come (the run ended first: a temporary file that
    came and went between two looks) is a signal after the end. Whatever comes, the exit must tell the truth."""
    moments = checkpoint_moments(checkpoint, edits=edits)
    seen = []
    for run in range(runs):
        copy = checkpoint.with_name(f"run-{run}")
        shutil.copytree(checkpoint, copy)
        before = snapshot(copy)
        moment, number = moments[run % len(moments)]
        process, printed = interrupted_at(copy, getattr(signal, name), moment, number)
        stdout, stderr = process.communicate(timeout=300)
        seen.append((process.returncode, printed + stdout, stderr, snapshot(copy) != before))
        shutil.rmtree(copy)
    return seen


def interrupted_at(checkpoint: Path, number: int, moment: str, which: int) -> tuple[subprocess.Popen[str], str]:
    """A migrate of ``checkpoint`` sent signal ``number`` at ``moment`` (:func:`interrupted_at_moments`): the process,
    and what it printed on stdout that was read to see the moment. Every lease is taken before the process starts."""
    config = checkpoint / "config.json"
    if moment in ("reading a shard", "checking a shard"):
        with Lease(shards(checkpoint)[which], "write" if moment == "reading a shard" else "read") as lease:
            process = migrate_process(checkpoint)
            until(lease.waited_on, process)
            process.send_signal(number)
        return process, ""
    if moment == "checking config.json":
        with Lease(config) as lease:
            process = migrate_process(checkpoint)
            until(lease.waited_on, process)
            process.send_signal(number)
        return process, ""
    if moment == "shards edited":
        with shard_writes_held(checkpoint, lambda: migrate_process(checkpoint)) as (process, leases):
            until(let_edits_through(leases, process, which), process)
            process.send_signal(number)
        return process, ""
    if moment == "writing config.json":
        with (
            shard_writes_held(checkpoint, lambda: migrate_process(checkpoint)) as (process, leases),
            Lease(config, "write") as marker,
        ):
            for lease in leases:
                lease.release()
            until(marker.waited_on, process)
            process.send_signal(number)
        return process, ""
    identity = config.stat().st_ino
    process = migrate_process(checkpoint)
    if moment == "signals taken over":
        until(signals_taken_over(process), process)
    elif moment == "config.json's temporary file":
        until(lambda: any(TEMPORARY_NAME.fullmatch(p.name) for p in checkpoint.iterdir()), process)
    elif moment == "config.json replaced":
        until(lambda: config.stat().st_ino != identity, process)
    else:
        assert moment == "summary printed", moment
        assert process.stdout is not None
        printed = []
        while (line := process.stdout.readline()) and not line.split(": ", 1)[-1].startswith(SUCCESS):
            printed.append(line)
        process.send_signal(number)
        return process, "".join(printed) + line
    process.send_signal(number)
    return process, ""


def assert_each_exit_tells_the_truth(seen: list[tuple[int, str, str, bool]], code: int) -> None:
    for returncode, stdout, stderr, changed in seen:
        assert "Traceback" not in stderr, stderr
        if returncode == 0:
            assert changed and stdout.splitlines()[-1].split(": ", 1)[1].startswith(SUCCESS), (stdout, stderr)
        elif returncode == code:
            assert not changed and stderr.endswith("nothing was changed\n"), (stdout, stderr)
            assert not any(line.split(": ", 1)[-1].startswith(SUCCESS) for line in stdout.splitlines()), stdout
        elif returncode == 3:
            assert changed and "stopped after changing" in stderr, stderr
        else:
            raise AssertionError((returncode, stdout, stderr))


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupt_at_any_moment_of_a_migration_that_only_sets_the_marker_tells_the_truth(tmp_path, name, code):
    checkpoint = clean_checkpoint(tmp_path / "clean")
    config = checkpoint / "config.json"
    document = json.loads(config.read_text())
    del document["quantization_config"]["format_version"]
    config.write_text(json.dumps(document, indent=2))
    seen = interrupted_at_moments(checkpoint, name, runs=40, edits=False)
    assert_each_exit_tells_the_truth(seen, code)
    assert {returncode for returncode, *_ in seen} == {0, code}, "the moments did not meet both an interrupt and an end"


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupt_at_any_moment_of_a_migration_of_every_shard_tells_the_truth(tmp_path, name, code):
    checkpoint = write_synthetic_checkpoint(tmp_path / "ckpt", data_bytes=3_000_000)
    seen = interrupted_at_moments(checkpoint, name, runs=40, edits=True)
    assert_each_exit_tells_the_truth(seen, code)
    assert {returncode for returncode, *_ in seen} == {0, 3, code}, "the moments did not meet every way to end"


# One identity per file for the whole run.


def test_a_shard_swapped_by_rename_while_check_reads_gives_a_true_report_or_one_line(tmp_path):
    """Another process swaps a shard, by rename, between two valid versions with the same values, one with 0-D
    scales and one with (1,) (as ``migrate --to legacy`` replaces shards): each run reads each shard's header and
    values through one descriptor, so it reports every value right, or refuses the shard in one line."""
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    shard = shards(checkpoint)[0]
    legacy = shard.read_bytes()
    write_scales_natively_0_d(checkpoint)
    versions = [legacy, shard.read_bytes()]
    expected = {
        s["name"]: s["value"]
        for s in json.loads(run_cli_in_process("check", "--json", "--list", checkpoint).stdout)["scales"]
    }
    stop = threading.Event()

    def swap() -> None:
        turn = 0
        while not stop.is_set():
            staged = shard.with_name(f".staged-{turn % 2}")
            staged.write_bytes(versions[turn % 2])
            os.replace(staged, shard)
            turn += 1

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        results = [run_cli("check", "--json", "--list", checkpoint) for _ in range(15)]
    finally:
        stop.set()
        swapper.join()
    for result in results:
        assert "Traceback" not in result.stderr, result.stderr
        if result.returncode == 2:
            assert result.stderr.strip().endswith("changed while it was read"), result.stderr
            continue
        document = json.loads(result.stdout)
        assert {s["name"]: s["value"] for s in document["scales"]} == expected
        assert {f["code"] for f in document["findings"]} <= {"NV101", "NV103"}  # (1,) in shard 0, or 0-D everywhere


@pytest.mark.parametrize("command", ["check", "migrate"])
@pytest.mark.parametrize("file", ["config.json", "model.safetensors.index.json"])
def test_a_json_file_past_its_bound_is_refused_unread_in_one_line(checkpoint, command, file):
    """A config or an index of more than 256 MiB (a sparse file: its size, not its bytes, is what counts)."""
    path = checkpoint / file
    with open(path, "r+b") as f:
        f.truncate((256 << 20) + 1)
    line = one_line(run_cli_in_process(command, checkpoint))
    assert line == f"scalar-scales: error: {path}: holds more than the {256 << 20} bytes a config or an index may hold"


def test_json_output_escapes_control_characters_as_json_does_and_keeps_the_name(checkpoint):
    renamed(checkpoint, MODULE, MODULE.replace(".gate_proj", FORGED + ".gate_proj"))
    result = run_cli_in_process("check", "--json", "--list", checkpoint)
    assert result.returncode == 0 and not controls(result.stdout)
    forged = MODULE.replace(".gate_proj", FORGED + ".gate_proj") + "weight_global_scale"
    assert forged in {scale["name"] for scale in json.loads(result.stdout)["scales"]}
