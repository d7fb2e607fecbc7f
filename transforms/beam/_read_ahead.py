"""Produce an iterator's next items in a background thread while the caller works on the current one.

A DoFn's stages run one after another in one thread, so while a record batch
is hashed, counted and spilled, the CSV reader that makes the next one waits,
and while a shard's row group is encoded to Parquet, the sort that makes the
next one waits. pyarrow and numpy release the GIL in that work, so running
the producer in its own thread lets the two overlap on a second core.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["read_ahead"]

T = TypeVar("T")

_DONE = object()
_POLL_S = 0.1  # how often a producer blocked on a full queue checks whether the consumer left


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def read_ahead(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Yields the items of `items`, in order, producing up to `depth` ahead in a thread.

    At most `depth` finished items wait in the queue (plus the one being
    made and the one the caller holds), so memory stays bounded. An error
    raised by `items` is raised here, at the item where it happened. If the
    caller stops early (closes the generator or raises), the producer stops
    after its current item and its thread is joined before this returns.
    The items are produced in the thread: `items` must not rely on
    thread-local state (Beam's metrics, for one: count in the caller).

    Example:
      >>> list(read_ahead(x * x for x in range(4)))
      [0, 1, 4, 9]
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
        except BaseException as error:  # handed to the consumer, which raises it
            offer(_Failure(error))
            return
        offer(_DONE)

    thread = threading.Thread(target=produce, name="sparseflow-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
        close = getattr(items, "close", None)
        if close is not None:
            close()  # a generator left part-way runs its cleanup (open files) now, not at collection
