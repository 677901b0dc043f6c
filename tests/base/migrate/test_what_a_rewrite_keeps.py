"""A file migrate replaces with a new one (config.json always; a shard whose header must grow, or a link it
materializes) keeps what the old one had: its owner, its mode with setuid and setgid, its POSIX ACL and every
extended attribute. Where this process could not keep them, or the file is read-only, migrate refuses before it
writes anything."""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalar_scales.migration import migrate_checkpoint
from scalar_scales_testkit.cli import make_checkpoint, run_cli_in_process, shards, snapshot, write_scales_natively_0_d

root_only = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="gives files away: root only")
linux_only = pytest.mark.skipif(not hasattr(os, "setxattr"), reason="extended attributes: Linux")

OTHER = 1234
NOBODY = 65534


def acl(entries: list[tuple[int, int, int]]) -> bytes:
    """A ``system.posix_acl_access`` value: (tag, permissions, id) entries, as the kernel reads them."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


UNDEFINED = 0xFFFFFFFF
GROUP_READS_UNDER_A_WRITABLE_MASK = acl(
    [(0x01, 6, UNDEFINED), (0x02, 6, OTHER), (0x04, 4, UNDEFINED), (0x10, 6, UNDEFINED), (0x20, 4, UNDEFINED)]
)
"""The owner rw-, user 1234 rw-, the owning group r--, the mask rw-, others r--."""


@pytest.fixture
def attributed(checkpoint: Path) -> Path:
    """The checkpoint, where its file system keeps user attributes and ACLs (tmpfs before Linux 6.6 has no user
    attributes): the tests that give files some skip elsewhere."""
    probe = checkpoint / "probe"
    probe.touch()
    try:
        os.setxattr(probe, "user.probe", b"1")
        os.setxattr(probe, "system.posix_acl_access", GROUP_READS_UNDER_A_WRITABLE_MASK)
    except OSError as exc:
        pytest.skip(f"this file system keeps no extended attributes or ACLs ({exc.strerror})")
    finally:
        probe.unlink()
    return checkpoint


def kept(path: Path) -> tuple[int, int, int, dict[str, bytes]]:
    info = os.stat(path)
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), {n: os.getxattr(path, n) for n in os.listxattr(path)}


@root_only
def test_root_keeps_setuid_and_setgid_of_another_users_config_json(checkpoint):
    config = checkpoint / "config.json"
    os.chown(config, OTHER, OTHER)
    config.chmod(0o6664)
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert (config.stat().st_uid, config.stat().st_gid, stat.S_IMODE(config.stat().st_mode)) == (OTHER, OTHER, 0o6664)


@linux_only
def test_config_json_keeps_its_acl_and_extended_attributes(attributed):
    checkpoint = attributed
    config = checkpoint / "config.json"
    os.setxattr(config, "user.origin", b"hub")
    os.setxattr(config, "system.posix_acl_access", GROUP_READS_UNDER_A_WRITABLE_MASK)
    before = kept(config)
    assert run_cli_in_process("migrate", checkpoint).returncode == 0
    assert kept(config) == before and "format_version" in config.read_text()


@linux_only
def test_a_shard_rewritten_to_a_new_file_keeps_its_owner_acl_and_attributes(attributed):
    checkpoint = attributed
    write_scales_natively_0_d(checkpoint)
    shard = shards(checkpoint)[0]
    os.setxattr(shard, "user.origin", b"hub")
    os.setxattr(shard, "system.posix_acl_access", GROUP_READS_UNDER_A_WRITABLE_MASK)
    if os.geteuid() == 0:
        os.chown(shard, OTHER, OTHER)
    before, inode = kept(shard), shard.stat().st_ino
    report = migrate_checkpoint(checkpoint, to="legacy")
    assert shard in report.rewritten and shard.stat().st_ino != inode
    assert kept(shard) == before


def test_a_read_only_shard_whose_header_must_grow_is_refused_and_nothing_changes(checkpoint):
    write_scales_natively_0_d(checkpoint)
    shards(checkpoint)[0].chmod(0o444)
    before = snapshot(checkpoint)
    result = run_cli_in_process("migrate", "--to", "legacy", checkpoint)
    assert result.returncode == 2 and result.stderr.strip().endswith(f"{shards(checkpoint)[0]}: is read-only")
    assert snapshot(checkpoint) == before


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder anyone may enter and write, outside pytest's own (which only root may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="scalar-scales-shared-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)


AS_NOBODY = """
import importlib, os, pkgutil, sys
import concurrent.futures, fcntl, locale, queue, signal, threading  # imported where used, and nobody cannot read them
import scalar_scales
for module in pkgutil.walk_packages(scalar_scales.__path__, "scalar_scales."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
from scalar_scales.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""The command line as user nobody: everything imported first, as root, since nobody may not read where Python
and the package are installed."""


def shared_checkpoint(folder: Path, owner: int, group: int) -> Path:
    """A 0-D checkpoint anyone may write (its folder, its shards, config.json), its files owned as given."""
    checkpoint = make_checkpoint(folder / "ckpt")
    write_scales_natively_0_d(checkpoint)
    checkpoint.chmod(0o777)
    for path in checkpoint.iterdir():
        path.chmod(0o666)
        os.chown(path, owner, group)
    return checkpoint


def migrate_as_nobody(checkpoint: Path) -> str:
    """``migrate --to legacy`` as user nobody, which must refuse with nothing changed: its one line."""
    before = snapshot(checkpoint)
    result = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, "migrate", "--to", "legacy", str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert snapshot(checkpoint) == before
    (line,) = result.stderr.splitlines()
    return line


@root_only
def test_a_user_who_could_not_keep_a_rewritten_shard_s_owner_is_refused_before_any_write(shared_folder):
    checkpoint = shared_checkpoint(shared_folder, OTHER, OTHER)
    line = migrate_as_nobody(checkpoint)
    assert line.startswith(f"scalar-scales: error: {shards(checkpoint)[0]}: migrate replaces it with a new file")
    assert "which could not keep its owner, user 1234: run migrate as its owner or as root" in line
    assert {path.stat().st_uid for path in checkpoint.iterdir()} == {OTHER}


@root_only
def test_a_user_who_could_not_keep_a_group_they_are_not_in_is_refused_before_any_write(shared_folder):
    checkpoint = shared_checkpoint(shared_folder, NOBODY, OTHER)
    line = migrate_as_nobody(checkpoint)
    assert "which could not keep its group 1234, which user 65534 is not in: run migrate as its owner" in line
    assert {path.stat().st_gid for path in checkpoint.iterdir()} == {OTHER}


@root_only
@linux_only
def test_a_user_who_could_not_keep_a_privileged_attribute_is_refused_before_any_write(shared_folder):
    checkpoint = shared_checkpoint(shared_folder, NOBODY, NOBODY)
    try:
        os.setxattr(shards(checkpoint)[0], "security.origin", b"hub")
    except OSError as exc:
        pytest.skip(f"this file system keeps no security attributes ({exc.strerror})")
    line = migrate_as_nobody(checkpoint)
    assert "which could not keep its extended attribute security.origin: run migrate as its owner or as root" in line


@root_only
def test_a_user_who_could_not_keep_config_json_s_owner_is_refused_before_any_write(shared_folder):
    """As found: config.json (0666) of another user, whose marker ``--to legacy`` removes, so it is replaced."""
    checkpoint = shared_checkpoint(shared_folder, NOBODY, NOBODY)
    config = checkpoint / "config.json"
    document = json.loads(config.read_text())
    document["quantization_config"]["format_version"] = 2
    config.write_text(json.dumps(document, indent=2))
    os.chown(config, OTHER, OTHER)
    line = migrate_as_nobody(checkpoint)
    assert line.startswith(f"scalar-scales: error: {config}: migrate replaces it with a new file")
    assert config.stat().st_uid == OTHER
