"""The patch mechanism: all rows or none, exact revert, idempotent apply."""

from __future__ import annotations

import sys
import threading
import types

import pytest

from scalar_scales.patching import Patch, PatchSet, UnsupportedUpstreamError


@pytest.fixture
def upstream():
    """A small stand-in upstream module holding a class with a classmethod and a function."""
    module = types.ModuleType("scalar_scales_test_upstream")

    class Compressor:
        @classmethod
        def compress(cls, x: int) -> int:
            return x

    module.Compressor = Compressor
    module.helper = lambda: "original"
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def doubling(original: classmethod) -> classmethod:
    return classmethod(lambda cls, x: 2 * original.__func__(cls, x))


def patch_set(*rows: Patch) -> PatchSet:
    return PatchSet("test", list(rows), check=lambda: "upstream 1.0")


def test_apply_patches_a_classmethod_and_revert_restores_the_same_object(upstream):
    original = vars(upstream.Compressor)["compress"]
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    patches.apply()
    assert upstream.Compressor.compress(3) == 6
    patches.revert()
    assert vars(upstream.Compressor)["compress"] is original


def test_a_missing_attribute_refuses_the_whole_set(upstream):
    original_helper = upstream.helper
    patches = patch_set(
        Patch("scalar_scales_test_upstream", "helper", lambda f: lambda: "patched", "why"),
        Patch("scalar_scales_test_upstream.Compressor", "decompress", doubling, "why"),
    )
    with pytest.raises(UnsupportedUpstreamError, match=r"Compressor.decompress not found.*nothing was patched"):
        patches.apply()
    assert upstream.helper is original_helper
    assert not patches.is_applied()


def test_a_failing_check_patches_nothing(upstream):
    def refuse() -> str:
        raise UnsupportedUpstreamError("upstream 9.9 is not supported")

    original_helper = upstream.helper
    replacement = Patch("scalar_scales_test_upstream", "helper", lambda f: lambda: "patched", "why")
    patches = PatchSet("test", [replacement], check=refuse)
    with pytest.raises(UnsupportedUpstreamError):
        patches.apply()
    assert upstream.helper is original_helper and upstream.helper() == "original"
    assert not patches.is_applied()


def test_rows_of_a_package_that_is_not_installed_are_skipped(upstream):
    patches = patch_set(Patch("no_such_package.Thing", "method", doubling, "why", requires="no_such_package"))
    patches.apply()
    assert patches.is_applied() is False


def test_apply_twice_wraps_once(upstream):
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    patches.apply()
    patches.apply()
    assert upstream.Compressor.compress(3) == 6


def test_a_row_whose_original_takes_other_parameters_refuses_the_whole_set(upstream):
    original_helper = upstream.helper
    patches = patch_set(
        Patch("scalar_scales_test_upstream", "helper", lambda f: lambda: "patched", "why"),
        Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why", parameters=("cls", "y")),
    )
    with pytest.raises(UnsupportedUpstreamError, match=r"Compressor.compress takes \('cls', 'x'\), not \('cls', 'y'\)"):
        patches.apply()
    assert upstream.helper is original_helper


def test_a_row_whose_original_takes_the_declared_parameters_is_applied(upstream):
    row = Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why", parameters=("cls", "x"))
    patches = patch_set(row)
    patches.apply()
    assert upstream.Compressor.compress(3) == 6


def test_nested_applied_blocks_revert_when_the_outer_one_exits(upstream):
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    with patches.applied():
        with patches.applied():
            pass
        assert patches.is_applied()
    assert not patches.is_applied()


def test_overlapping_blocks_in_two_threads_stay_patched_until_the_last_exits(upstream):
    """Thread A enters, B enters, A exits while B is still inside: B must still run patched."""
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()
    seen_by_b: list[int] = []

    def thread_a() -> None:
        with patches.applied():
            a_inside.set()
            b_inside.wait(10)
        a_left.set()

    def thread_b() -> None:
        a_inside.wait(10)
        with patches.applied():
            b_inside.set()
            a_left.wait(10)
            seen_by_b.append(upstream.Compressor.compress(3))

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert a_left.is_set() and seen_by_b == [6]
    assert not patches.is_applied()
    assert upstream.Compressor.compress(3) == 3


def test_an_explicit_apply_outlives_every_block(upstream):
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    with patches.applied():
        patches.apply()
    assert patches.is_applied()
    patches.revert()
    assert not patches.is_applied()


def test_rows_planned_by_a_function_are_planned_when_the_set_is_applied(upstream):
    planned: list[str] = []

    def plan() -> list[Patch]:
        planned.append("planned")
        return [Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why")]

    patches = PatchSet("test", plan, check=lambda: "upstream 1.0")
    assert planned == []
    patches.apply()
    assert planned and upstream.Compressor.compress(3) == 6


def test_a_refusal_is_kept_until_revert(upstream):
    def plan() -> list[Patch]:
        raise UnsupportedUpstreamError("no class recognised")

    patches = PatchSet("test", plan, check=lambda: "upstream 1.0")
    with pytest.raises(UnsupportedUpstreamError, match="no class recognised"):
        patches.apply()
    assert "no class recognised; this upstream version's internals are not recognised" in str(patches.refusal)
    patches.revert()
    assert patches.refusal is None


def test_applied_reasons_name_the_patched_attributes_by_why(upstream):
    patches = patch_set(
        Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "doubles"),
        Patch("scalar_scales_test_upstream", "helper", lambda f: lambda: "patched", "replaces"),
    )
    patches.apply()
    assert patches.applied_reasons() == "compress (doubles); helper (replaces)"
