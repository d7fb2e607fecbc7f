"""The Arrow op's CRC-32C (ops/native/crc32c_extend.h) against google-crc32c, which writes the checksums it checks.

Below 12 KiB one stream runs; above, three streams over the buffer's thirds, their CRCs combined: the
lengths and offsets cover both, the split points and every tail length.
"""

import ctypes

import google_crc32c
import numpy as np
import pytest
from native_functions import native_function


@pytest.fixture(scope="module")
def extend():
    return native_function("sparseflow_crc32c_extend", [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int64],
                           ctypes.c_uint32)


DATA = np.random.default_rng(3).integers(0, 256, 300_000, dtype=np.uint8)


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 4095, 12_287, 12_288, 12_289, 12_295, 65_536, 99_999, 299_990])
@pytest.mark.parametrize("offset", [0, 1, 3, 8])
@pytest.mark.parametrize("crc", [0, 0xDEADBEEF, 0xFFFFFFFF])
def test_the_crc_is_google_crc32cs(extend, length, offset, crc):
    part = DATA[offset : offset + length]
    if len(part) < length:
        pytest.skip("past the data")
    want = google_crc32c.extend(crc, part.tobytes())
    assert extend(crc, part.ctypes.data, length) == want


def test_a_crc_extended_piece_by_piece_is_the_whole_ones(extend):
    whole = google_crc32c.value(DATA.tobytes())
    crc = 0
    for start, stop in [(0, 13_000), (13_000, 13_001), (13_001, 200_000), (200_000, len(DATA))]:
        crc = extend(crc, DATA[start:stop].ctypes.data, stop - start)
    assert crc == whole
