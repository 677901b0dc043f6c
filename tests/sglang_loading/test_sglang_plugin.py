"""The SGLang plugin's patch: applied once however often it is asked, reverted exactly, refused where untested."""

from __future__ import annotations

import pytest

import sglang_patch
from sglang_patch import loaders

OWNERS = {
    "sglang.srt.layers.linear.ReplicatedLinear": "weight_loader",
    "sglang.srt.model_loader.loader.DefaultModelLoader": "load_weights_only",
}


def originals():
    from scalar_scales.patching import import_dotted

    return {owner: vars(import_dotted(owner))[attribute] for owner, attribute in OWNERS.items()}


@pytest.fixture(autouse=True)
def reverted():
    sglang_patch.revert()
    yield
    sglang_patch.revert()


def test_apply_patches_both_functions_once_however_often_it_is_called():
    before = originals()
    first = sglang_patch.apply()
    patched = originals()
    assert sglang_patch.apply() == first and originals() == patched
    assert sorted(first) == sorted(f"{owner}.{attribute}" for owner, attribute in OWNERS.items())
    assert all(patched[owner] is not before[owner] for owner in OWNERS)


def test_revert_puts_back_the_very_objects_it_replaced():
    before = originals()
    sglang_patch.apply()
    sglang_patch.revert()
    assert all(originals()[owner] is before[owner] for owner in OWNERS) and not sglang_patch.is_applied()


def test_a_release_the_patch_was_not_tested_on_is_refused_with_nothing_patched(monkeypatch, caplog):
    before = originals()
    monkeypatch.setattr(loaders, "TESTED_SGLANG", ("0.5.22",))
    assert sglang_patch.apply() == []
    assert originals() == before and "SGLang 0.5.23 is not a release the patch was tested on (0.5.22)" in caplog.text
