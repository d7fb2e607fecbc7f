"""Counting TFRecord frames for the manifest: the native counter equals the Python one, however the bytes are cut."""

import numpy as np
import pytest

from sparse_io import tfrecord_frames


@pytest.fixture(autouse=True, scope="module")
def _native():
    assert tfrecord_frames.native_count_frames() is not None, "a C++ compiler builds the counter on every CI machine"


def _frames(lengths) -> bytes:
    out = bytearray()
    for n in lengths:
        out += int(n).to_bytes(8, "little") + b"\x01\x02\x03\x04" + bytes([n % 251]) * int(n) + b"\x05\x06\x07\x08"
    return bytes(out)


def _count(counter, data: bytes, cuts) -> tuple[int, bool]:
    start = 0
    for end in [*cuts, len(data)]:
        counter.feed(data[start:end])
        start = end
    return counter.records, counter.complete


@pytest.mark.parametrize("seed", range(12))
def test_native_counter_equals_the_python_counter_on_any_chunking(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, rng.integers(0, 60))
    data = _frames(lengths)
    # Cut points anywhere, headers split included; sometimes the stream is cut short (truncated).
    keep = len(data) if seed % 3 else int(rng.integers(0, len(data) + 1))
    data = data[:keep]
    cuts = sorted(rng.integers(0, len(data) + 1, rng.integers(0, 30)).tolist())
    native = _count(tfrecord_frames.frame_counter(), data, cuts)
    python = _count(tfrecord_frames.TFRecordCounter(), data, cuts)
    assert native == python
    if keep == len(_frames(lengths)):
        assert native == (len(lengths), True)


def test_a_length_no_file_can_hold_reads_as_truncated():
    data = (2**64 - 1).to_bytes(8, "little") + b"\x00" * 20
    assert _count(tfrecord_frames.frame_counter(), data, [3, 9])[1] is False
    assert _count(tfrecord_frames.TFRecordCounter(), data, [3, 9])[1] is False
