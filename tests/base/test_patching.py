"""The patch mechanism: the releases a set declares, all rows or none, exact revert, idempotent apply.

The declared upstream is pytest, a real distribution installed wherever these tests run.
"""

from __future__ import annotations

import sys
import threading
import types
from importlib import metadata

import pytest

from scalar_scales.environment import SwitchValueError
from scalar_scales.patching import ALLOW_UNTESTED_ENV, Patch, PatchSet, UnsupportedUpstreamError, within

PYTEST = metadata.version("pytest")
SUPPORTED = {"pytest": ">=1"}
"""A declaration this environment's pytest is inside."""


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


def patch_set(*rows: Patch, supports: dict[str, str] = SUPPORTED, warned: list[str] | None = None) -> PatchSet:
    return PatchSet("test", list(rows), supports=supports, warn=None if warned is None else warned.append)


HELPER = Patch("scalar_scales_test_upstream", "helper", lambda f: lambda: "patched", "why")


def test_apply_patches_a_classmethod_and_revert_restores_the_same_object(upstream):
    original = vars(upstream.Compressor)["compress"]
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    patches.apply()
    assert upstream.Compressor.compress(3) == 6
    patches.revert()
    assert vars(upstream.Compressor)["compress"] is original


def test_a_missing_attribute_refuses_the_whole_set(upstream):
    original_helper = upstream.helper
    patches = patch_set(HELPER, Patch("scalar_scales_test_upstream.Compressor", "decompress", doubling, "why"))
    with pytest.raises(UnsupportedUpstreamError) as refusal:
        patches.apply()
    assert str(refusal.value) == (
        f"test supports pytest >=1; pytest {PYTEST} is installed, but "
        "scalar_scales_test_upstream.Compressor.decompress not found, so nothing was patched"
    )
    assert upstream.helper is original_helper
    assert not patches.is_applied()


def test_a_release_outside_the_declaration_is_refused_in_the_same_shape_with_nothing_patched(upstream):
    """The declaration is checked before any row: a release it does not name is refused as a row that does not
    resolve is, saying what the set supports and what is installed."""
    patches = patch_set(HELPER, supports={"pytest": "<1"})
    with pytest.raises(UnsupportedUpstreamError) as refusal:
        patches.apply()
    assert str(refusal.value) == (
        f"test supports pytest <1; pytest {PYTEST} is installed, so nothing was patched "
        f"({ALLOW_UNTESTED_ENV}=1 tries anyway)"
    )
    assert upstream.helper() == "original" and not patches.is_applied()


def test_a_set_none_of_whose_distributions_is_installed_is_refused(upstream):
    """A declaration is met by a release that is there: with none installed there is nothing it supports."""
    patches = patch_set(HELPER, supports={"scalar-scales-no-such-upstream": ">=1"})
    with pytest.raises(UnsupportedUpstreamError) as refusal:
        patches.apply()
    assert str(refusal.value) == (
        "test supports scalar-scales-no-such-upstream >=1; it is not installed, so nothing was patched"
    )
    assert upstream.helper() == "original"


def test_the_opt_in_patches_a_release_outside_the_declaration_with_one_warning(upstream, monkeypatch):
    """docs/environment.md: at the user's own risk, and said once, in the refusal's shape."""
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    warned: list[str] = []
    patches = patch_set(HELPER, supports={"pytest": "<1"}, warned=warned)
    assert patches.apply() == f"pytest {PYTEST}"
    assert upstream.helper() == "patched"
    assert warned == [
        f"test supports pytest <1; pytest {PYTEST} is installed, patched anyway because {ALLOW_UNTESTED_ENV}=1"
    ]


def test_an_opt_in_set_wrong_refuses_a_declared_release_too_naming_the_variable(upstream, monkeypatch):
    """docs/environment.md: a typo never silently keeps the default. The opt-in was read only for a release
    outside the declaration, so `yes` went unsaid wherever the release was declared."""
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "yes")
    patches = patch_set(HELPER)
    with pytest.raises(SwitchValueError, match=f"^{ALLOW_UNTESTED_ENV} must be 0 or 1, not 'yes'$"):
        patches.apply()
    assert upstream.helper() == "original" and not patches.is_applied()


def test_the_opt_in_still_refuses_a_row_that_does_not_resolve_and_warns_of_nothing(upstream, monkeypatch):
    """The opt-in lets a release through, not code the rows were not written for."""
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    warned: list[str] = []
    missing = Patch("scalar_scales_test_upstream.Compressor", "decompress", doubling, "why")
    patches = patch_set(HELPER, missing, supports={"pytest": "<1"}, warned=warned)
    with pytest.raises(UnsupportedUpstreamError, match=r", but .*Compressor.decompress not found, so nothing was"):
        patches.apply()
    assert upstream.helper() == "original" and warned == []


@pytest.mark.parametrize(
    ("version", "inside"),
    [("0.33.0", True), ("0.33.1.dev4+g1234.cpu", True), ("0.34.0rc1", False), ("0.22.9", False), ("cpu", False)],
)
def test_a_version_is_inside_a_specifier_as_pep_440_orders_it(version, inside):
    """A development build of a supported series is inside; a release candidate of the next is not, and a
    version that is no version is never inside."""
    assert within(version, ">=0.23,<0.34") is inside


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
        HELPER,
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

    patches = PatchSet("test", plan, supports=SUPPORTED)
    assert planned == []
    patches.apply()
    assert planned and upstream.Compressor.compress(3) == 6


def test_a_refusal_is_kept_until_revert(upstream):
    def plan() -> list[Patch]:
        raise UnsupportedUpstreamError("no class recognised")

    patches = PatchSet("test", plan, supports=SUPPORTED)
    with pytest.raises(UnsupportedUpstreamError, match="no class recognised"):
        patches.apply()
    assert (
        str(patches.refusal)
        == f"test supports pytest >=1; pytest {PYTEST} is installed, but no class recognised, so nothing was patched"
    )
    patches.revert()
    assert patches.refusal is None


def test_applied_reasons_name_the_patched_attributes_by_why(upstream):
    patches = patch_set(
        Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "doubles"),
        Patch("scalar_scales_test_upstream", "helper", lambda f: lambda: "patched", "replaces"),
    )
    patches.apply()
    assert patches.applied_reasons() == "compress (doubles); helper (replaces)"
