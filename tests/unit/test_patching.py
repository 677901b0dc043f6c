"""The patch mechanism: all rows or none, exact revert, idempotent apply."""

from __future__ import annotations

import sys
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
    patches = PatchSet("test", [Patch("scalar_scales_test_upstream", "helper", lambda f: f, "why")], check=refuse)
    with pytest.raises(UnsupportedUpstreamError):
        patches.apply()
    assert upstream.helper is original_helper


def test_rows_of_a_package_that_is_not_installed_are_skipped(upstream):
    patches = patch_set(Patch("no_such_package.Thing", "method", doubling, "why", requires="no_such_package"))
    patches.apply()
    assert patches.is_applied() is False


def test_apply_twice_wraps_once(upstream):
    patches = patch_set(Patch("scalar_scales_test_upstream.Compressor", "compress", doubling, "why"))
    patches.apply()
    patches.apply()
    assert upstream.Compressor.compress(3) == 6
