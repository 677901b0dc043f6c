"""Worker processes on Linux: forked workers that send their results down pipes, in the items' order, with the first
item's error, and none left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scalar_scales.system import Workers

FORKED = Workers("fork", processes=3)


def children() -> list[int]:
    tasks = Path("/proc/self/task").iterdir()
    return [int(child) for task in tasks for child in (task / "children").read_text().split()]


def square_in_a_worker(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def fail_on_multiples_of_five(item: int) -> int:
    if item and item % 5 == 0:
        raise ValueError(f"item {item}")
    return item


def test_forked_workers_return_every_result_in_the_items_order():
    results = FORKED.map(square_in_a_worker, range(20))
    assert [square for square, _ in results] == [item * item for item in range(20)]
    assert len({pid for _, pid in results}) == 3 and os.getpid() not in {pid for _, pid in results}


def test_forked_workers_raise_the_first_failing_items_error_in_the_items_order():
    """Items 5, 10 and 15 fail, in three different workers; 5 is the first."""
    with pytest.raises(ValueError, match=r"^item 5$"):
        FORKED.map(fail_on_multiples_of_five, range(20))


def test_no_forked_worker_is_left_after_the_map_whether_it_succeeds_or_fails():
    before = children()  # other tests' servers may be running
    FORKED.map(square_in_a_worker, range(20))
    with pytest.raises(ValueError):
        FORKED.map(fail_on_multiples_of_five, range(20))
    assert children() == before


def test_a_result_that_does_not_pickle_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match="does not pickle"):
        FORKED.map(lambda item: lambda: item, range(6))
