"""Drains the Python-side reader's calls before the interpreter finalizes, so the process can exit.

TensorFlow runs a `tf.py_function` on its own threads. Once the interpreter
is finalizing, a thread that takes the GIL is ended on the spot, so a reader
call still running then never returns, and destroying the dataset iterator
(which happens during shutdown, when the module holding it is cleared)
waits for that call forever. A script that simply ended with an endless
Parquet dataset's iterator alive never exited. At exit, before finalizing,
`drain` makes new calls fail at once and waits until no call has run for a
moment: TensorFlow then holds only finished (failed) elements, which nobody
reads, and no call is in flight.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time

__all__ = ["reader_call", "drain", "ExitingError"]

_QUIET_S = 0.05  # no reader call for this long: the pipeline's buffers are full and it waits
_LIMIT_S = 5.0  # never hold up the exit longer than this

_lock = threading.Lock()
_in_flight = 0
_last_call = 0.0
_exiting = False


class ExitingError(RuntimeError):
    """Raised by reader calls made while the interpreter is exiting."""


@contextlib.contextmanager
def reader_call():
    """Wraps one reader call; raises ExitingError once the interpreter is exiting."""
    global _in_flight, _last_call
    with _lock:
        _last_call = time.monotonic()
        if _exiting:
            raise ExitingError("the Python interpreter is exiting: no more batches are read")
        _in_flight += 1
    try:
        yield
    finally:
        with _lock:
            _in_flight -= 1
            _last_call = time.monotonic()


def drain(quiet_s: float = _QUIET_S, limit_s: float = _LIMIT_S) -> bool:
    """Fails new calls, then waits for a quiet spell with none in flight; True if one came in time."""
    global _exiting
    with _lock:
        _exiting = True
    deadline = time.monotonic() + limit_s
    while True:
        with _lock:
            now = time.monotonic()
            if _in_flight == 0 and now - _last_call >= quiet_s:
                return True
        if now >= deadline:
            return False
        time.sleep(quiet_s / 5)  # releases the GIL, so the calls in flight can finish


atexit.register(drain)
