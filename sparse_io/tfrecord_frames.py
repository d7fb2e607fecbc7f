"""Counting the records of a TFRecord file from its bytes fed in chunks, without parsing them.

A TFRecord frame is an 8-byte little-endian length, a 4-byte CRC of it, the
data and a 4-byte CRC of the data. `frame_counter()` counts frames as the
bytes stream past (the manifest counts a shard's rows in the same pass that
computes its checksum): native code where sparse_io's helpers build
(sparse_io/native/tfrecord_frames.cc), else the Python `TFRecordCounter`.

Example:
  >>> counter = TFRecordCounter()
  >>> counter.feed((3).to_bytes(8, "little") + b"crc!abc" + b"crc!")
  >>> counter.records, counter.complete
  (1, True)
"""

from __future__ import annotations

import ctypes
import functools
import struct

__all__ = ["TFRecordCounter", "NativeFrameCounter", "frame_counter", "native_count_frames"]


class TFRecordCounter:
    """Counts TFRecord frames (8-byte length, 4-byte CRC, data, 4-byte CRC) in a stream fed in chunks."""

    def __init__(self):
        self.records = 0
        self._skip = 0  # bytes of the current frame's body still to pass
        self._head = b""

    def feed(self, chunk: bytes) -> None:
        """Counts the frames that start in `chunk` (the next bytes of the file)."""
        view = memoryview(chunk)
        while len(view):
            if self._skip:
                step = min(self._skip, len(view))
                self._skip -= step
                view = view[step:]
                continue
            need = 12 - len(self._head)
            self._head += bytes(view[:need])
            view = view[need:]
            if len(self._head) == 12:
                (length,) = struct.unpack("<Q", self._head[:8])
                self._skip = length + 4
                self._head = b""
                self.records += 1

    @property
    def complete(self) -> bool:
        """Whether the bytes fed so far end at a frame's end (False: the file is cut inside one)."""
        return not self._skip and not self._head


class _NativeFrameState(ctypes.Structure):
    # Mirrors `SparseflowFrameCounter` in sparse_io/native/tfrecord_frames.cc.
    _fields_ = [
        ("records", ctypes.c_int64),
        ("skip", ctypes.c_int64),
        ("head_len", ctypes.c_int64),
        ("head", ctypes.c_uint8 * 16),
    ]


@functools.cache
def native_count_frames():
    """The native `sparseflow_count_frames` function, or None where sparse_io's helpers do not build."""
    from sparse_io import native_build

    return native_build.function("sparseflow_count_frames", [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64],
                                 ctypes.c_int64)


class NativeFrameCounter:
    """`TFRecordCounter` in native code (sparse_io/native/tfrecord_frames.cc): one call per chunk."""

    def __init__(self, count_frames):
        self._count = count_frames
        self._state = _NativeFrameState()

    def feed(self, chunk: bytes) -> None:
        """As `TFRecordCounter.feed`."""
        self._count(ctypes.byref(self._state), chunk, len(chunk))

    @property
    def records(self) -> int:
        """Frames counted so far."""
        return int(self._state.records)

    @property
    def complete(self) -> bool:
        """As `TFRecordCounter.complete`."""
        return not self._state.skip and not self._state.head_len


def frame_counter():
    """A TFRecord frame counter: native where sparse_io's helpers build, else `TFRecordCounter`."""
    count_frames = native_count_frames()
    return TFRecordCounter() if count_frames is None else NativeFrameCounter(count_frames)
