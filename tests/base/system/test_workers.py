"""Worker processes on Linux: forked workers and the calling process take the items in turn, and the results come
back in the items' order, with the first item's error, and no worker left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scalar_scales.system import Workers

FORKED = Workers("fork", processes=3)


def children() -> list[int]:
    tasks = Path("/proc/self/task").iterdir()
    return [int(child) for task in tasks for child in (task / "children").read_text().split()]


def square_in_a_worker(item: int) -> tuple[int, int]:
    return item * item, os.getpid()


def slowly_in_a_worker(item: int) -> int:
    time.sleep(0.05)
    return os.getpid()


def fail_on_multiples_of_five(item: int) -> int:
    if item and item % 5 == 0:
        raise ValueError(f"item {item}")
    return item


def test_forked_workers_return_every_result_in_the_items_order():
    results = FORKED.map(square_in_a_worker, range(20))
    assert [square for square, _ in results] == [item * item for item in range(20)]


def test_the_calling_process_and_each_forked_worker_take_items():
    pids = FORKED.map(slowly_in_a_worker, range(18))
    assert os.getpid() in pids and len(set(pids)) == 3


def test_a_process_busy_with_a_slow_item_leaves_the_other_items_to_the_others():
    def first_item_slow(item: int) -> int:
        time.sleep(1.0 if item == 0 else 0.001)
        return os.getpid()

    pids = FORKED.map(first_item_slow, range(30))
    assert pids.count(pids[0]) == 1


def test_forked_workers_raise_the_first_failing_items_error_in_the_items_order():
    """Items 5, 10 and 15 fail; 5 is the first."""
    with pytest.raises(ValueError, match=r"^item 5$"):
        FORKED.map(fail_on_multiples_of_five, range(20))


def test_no_forked_worker_is_left_after_the_map_whether_it_succeeds_or_fails():
    before = children()  # other tests' servers may be running
    FORKED.map(square_in_a_worker, range(20))
    with pytest.raises(ValueError):
        FORKED.map(fail_on_multiples_of_five, range(20))
    assert children() == before


def test_a_result_that_does_not_pickle_in_a_worker_is_an_error_naming_it():
    def unpicklable(item: int) -> object:
        time.sleep(0.05)
        return lambda: item

    with pytest.raises(RuntimeError, match="does not pickle"):
        FORKED.map(unpicklable, range(12))
