"""read_ahead: same items in the same order, errors where they happened, bounded, stoppable."""

from __future__ import annotations

import threading
import time

import pytest

from transforms.beam._read_ahead import read_ahead


def test_yields_every_item_in_order():
    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))


def test_empty_input_yields_nothing():
    assert list(read_ahead(iter([]))) == []


def test_items_are_made_in_another_thread():
    caller = threading.get_ident()
    makers = list(read_ahead(threading.get_ident() for _ in range(3)))
    assert makers and all(m != caller for m in makers)


def test_error_is_raised_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise KeyError("bad record")

    got = []
    with pytest.raises(KeyError, match="bad record"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [1, 2]


def test_producer_stays_within_depth_of_the_consumer():
    made = []

    def items():
        for i in range(50):
            made.append(i)
            yield i

    depth = 2
    consumed = 0
    for _ in read_ahead(items(), depth=depth):
        consumed += 1
        time.sleep(0.01)  # a slow consumer: the producer would run far ahead if nothing held it
        # queued (depth) + the one offered but not yet queued + the one just handed over
        assert len(made) <= consumed + depth + 1
    assert consumed == 50


def test_stopping_early_stops_the_producer_and_runs_its_cleanup():
    made, cleaned = [], threading.Event()

    def items():
        try:
            for i in range(10_000):
                made.append(i)
                yield i
        finally:
            cleaned.set()

    threads_before = threading.active_count()
    reader = read_ahead(items(), depth=1)
    assert next(reader) == 0
    reader.close()
    assert cleaned.is_set()
    assert len(made) <= 3
    assert threading.active_count() == threads_before


def test_consumer_error_stops_the_producer():
    cleaned = threading.Event()

    def items():
        try:
            yield from range(10_000)
        finally:
            cleaned.set()

    with pytest.raises(RuntimeError, match="downstream"):
        for item in read_ahead(items()):
            if item == 5:
                raise RuntimeError("downstream failed")
    assert cleaned.is_set()


def test_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="depth must be at least 1"):
        list(read_ahead(iter([1]), depth=0))
